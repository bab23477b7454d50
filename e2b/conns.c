/* sandboxd-e2b's table of connections (docs/SECURITY.md §4.3): which peer
 * holds which of the gateway's connection threads, so that no one address
 * and no crowd of callers without a key can keep keyed callers out.
 *
 * Threat: a peer that opens connections and sends nothing (or a head that
 * never ends) holds a thread each until the head's deadline, and renews
 * them; with nothing per peer, one address filled all 256 every 30 s.
 * The rules, checked at accept under one lock:
 *   - one address (IPv4: the address; IPv6: its /64, what one host is
 *     usually given) holds at most `per_addr` connections: past it the new
 *     one is refused, other addresses are not touched;
 *   - when all `max` are held, the oldest connection that has not yet
 *     presented a valid API key or envd token is cut (shutdown(2): its
 *     thread reads the end and leaves) and the new one takes its place; a
 *     connection that has presented one is not cut for another while
 *     its tenant holds no more than a quarter of `max` such connections;
 *     when every connection has, the oldest one of a tenant holding more
 *     than that is cut, and when there is none the new one is refused.
 *   - one tenant has at most a quarter of `max` requests being served at
 *     once (gw_conns_begin; 429 past it): each holds a daemon connection
 *     (a Connect two), and the daemon allows the gateway's uid 256 of
 *     them (maxConnectionsPerUser), so one key's streams could otherwise
 *     take every daemon connection from the other tenants.
 * So a flood of connections without a key can only push out other
 * connections without a key, the oldest first, and one tenant's keyed
 * connections (from as many addresses as it has) cannot keep every other
 * tenant out. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "e2b/gateway.h"

struct gw_slot {
        gw_slot *prev, *next;   /* in order of admission: oldest first */
        unsigned char addr[16]; /* the peer's group (addr_key) */
        int fd;                 /* the connection's socket, open while in the table */
        bool keyed;             /* a valid key or token was presented on it */
        char tenant[80];        /* whose (when keyed) */
        bool busy;              /* a request of busy_tenant is being served on it */
        char busy_tenant[80];
        bool evicted;           /* cut for a newer one: counts no more */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gw_slot *oldest, *newest;
static unsigned conns_max = GW_CONNS_MAX_DEFAULT, conns_per_addr = GW_CONNS_PER_ADDR_DEFAULT;
static unsigned n_held; /* slots not evicted */

void gw_conns_set_limits(unsigned max, unsigned per_addr) {
        pthread_mutex_lock(&lock);
        conns_max = max ? max : 1;
        conns_per_addr = per_addr ? per_addr : 1;
        pthread_mutex_unlock(&lock);
}

/* The group a peer's address counts in: an IPv4 address (also as an
 * IPv4-mapped IPv6 one) whole, an IPv6 address by its /64; anything else
 * (a Unix socket, in the tests) one group of its own. */
static void addr_key(const struct sockaddr *sa, socklen_t len, unsigned char ret[16]) {
        static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        memset(ret, 0, 16);
        if (sa && sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
                memcpy(ret, mapped, 12);
                memcpy(ret + 12, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        } else if (sa && sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
                const unsigned char *a = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;
                memcpy(ret, a, memcmp(a, mapped, 12) == 0 ? 16 : 8);
        } else
                ret[0] = 0xfe, ret[1] = 0xff; /* no IPv6 /64 starts so (fe:ff::/16 is reserved) */
}

static void unlink_slot(gw_slot *s) {
        if (s->prev)
                s->prev->next = s->next;
        else
                oldest = s->next;
        if (s->next)
                s->next->prev = s->prev;
        else
                newest = s->prev;
}

/* Keyed connections one tenant holds that are never cut for another:
 * a quarter of the table (at least 1). */
static unsigned tenant_share(void) {
        return conns_max / 4 ? conns_max / 4 : 1;
}

/* The oldest keyed connection whose tenant holds more than its share of
 * keyed connections, or NULL. Under the lock. */
static gw_slot *over_share_victim(void) {
        for (gw_slot *o = oldest; o; o = o->next) {
                if (o->evicted || !o->keyed)
                        continue;
                unsigned n = 0;
                for (gw_slot *x = oldest; x; x = x->next)
                        if (!x->evicted && x->keyed && !strcmp(x->tenant, o->tenant))
                                n++;
                if (n > tenant_share())
                        return o;
        }
        return NULL;
}

int gw_conns_admit(const struct sockaddr *peer, socklen_t peer_len, int fd, gw_slot **ret) {
        gw_slot *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        addr_key(peer, peer_len, s->addr);
        s->fd = fd;
        pthread_mutex_lock(&lock);
        unsigned same = 0;
        gw_slot *victim = NULL;
        for (gw_slot *o = oldest; o; o = o->next) {
                if (o->evicted)
                        continue;
                if (memcmp(o->addr, s->addr, 16) == 0)
                        same++;
                if (!o->keyed && !victim)
                        victim = o;
        }
        int r = 0;
        if (same >= conns_per_addr)
                r = -EUSERS;
        else if (n_held >= conns_max) {
                if (!victim)
                        victim = over_share_victim();
                if (!victim)
                        r = -EAGAIN;
                else {
                        /* Under the lock its fd is still open (gw_conns_release
                         * unlinks before the socket is closed), so this cuts
                         * that connection and no other. */
                        victim->evicted = true;
                        n_held--;
                        (void) shutdown(victim->fd, SHUT_RDWR);
                }
        }
        if (r == 0) {
                s->prev = newest;
                if (newest)
                        newest->next = s;
                else
                        oldest = s;
                newest = s;
                n_held++;
        }
        pthread_mutex_unlock(&lock);
        if (r < 0) {
                free(s);
                return r;
        }
        *ret = s;
        return 0;
}

bool gw_conns_keyed(gw_slot *s, const char *tenant) {
        if (!s)
                return true;
        pthread_mutex_lock(&lock);
        if (!s->keyed)
                snprintf(s->tenant, sizeof(s->tenant), "%s", tenant ? tenant : "");
        s->keyed = true;
        bool held = !s->evicted;
        pthread_mutex_unlock(&lock);
        return held;
}

bool gw_conns_begin(gw_slot *s, const char *tenant) {
        if (!s)
                return true;
        pthread_mutex_lock(&lock);
        /* Cut connections count too: their threads may still hold their
         * daemon connections. */
        unsigned n = 0;
        for (gw_slot *o = oldest; o; o = o->next)
                if (o->busy && !strcmp(o->busy_tenant, tenant))
                        n++;
        bool ok = n < tenant_share();
        if (ok) {
                s->busy = true;
                snprintf(s->busy_tenant, sizeof(s->busy_tenant), "%s", tenant);
        }
        pthread_mutex_unlock(&lock);
        return ok;
}

void gw_conns_end(gw_slot *s) {
        if (!s)
                return;
        pthread_mutex_lock(&lock);
        s->busy = false;
        pthread_mutex_unlock(&lock);
}

void gw_conns_release(gw_slot *s) {
        if (!s)
                return;
        pthread_mutex_lock(&lock);
        unlink_slot(s);
        if (!s->evicted)
                n_held--;
        pthread_mutex_unlock(&lock);
        free(s);
}

unsigned gw_conns_held(void) {
        pthread_mutex_lock(&lock);
        unsigned n = n_held;
        pthread_mutex_unlock(&lock);
        return n;
}
