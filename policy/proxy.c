/* The front of the egress proxy (DESIGN §5.1 rules 3 and 7, §5.2): one
 * decision per accepted connection of sandbox-netd.
 *
 * It owns classification of the first bytes (TLS record or HTTP request
 * head), the CONNECT handshake, the TLS server name (peeked, never consumed,
 * parsed by OpenSSL), the agreement of every host the client named (CONNECT
 * target, SNI, Host, absolute URI), the policy verdict, the proxy's own DNS
 * resolution and dialling of the judged addresses, and the splice(2) tunnel
 * for TLS to domains without rules. Requests of plain HTTP and TLS that must
 * be terminated are handed to policy/http.c; so is a name refused on 443
 * in a sandbox that trusts the session CA, whose 403 is given inside TLS
 * (pol_tls_deny) with nothing dialled.
 *
 * Threat: the client is the untrusted sandbox. It picks what it sends and
 * where it connected, so nothing it says is used to reach an address: the
 * proxy resolves the name itself and dials only addresses that passed the
 * policy (the one exception, a ClientHello without SNI sent to an address
 * the policy admits as an address, dials that address, which was judged).
 * Every wait is bounded; refusals never wait for a timeout. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/param.h>
#include <sys/socket.h>
#include <cjson/cJSON.h>
#include <ldns/ldns.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/tls1.h>
#include "libcore/macro.h"
#include "libcore/route.h"
#include "libcore/util.h"
#include "policy/proxy.h"
#include "policy/tls-internal.h"

#define TLS_HEADER 5
#define TLS_RECORD_MAX 16384                 /* RFC 8446 §5.1: 2^14 bytes of plaintext */
#define HEAD_MAX (64 * 1024)                 /* same bound as pol_http_parse_head() */
#define TUNNEL_PIPE (256 * 1024)             /* within the unprivileged pipe-max-size (1 MiB) */
#define TUNNEL_IDLE_MS (5 * 60 * 1000)       /* long polls and idle keep-alives live this long */
#define LINGER_MS 1000                       /* reading what a refused client still sends */
#define LINGER_MAX (256 * 1024)
#define MAX_RESOLVED 256                     /* addresses judged from one answer */
#define NOT_ALLOWED "the network policy does not allow it"

/* TLS alert record: fatal (2), access_denied (49), RFC 8446 §6. Written raw:
 * the connection is refused before any handshake state exists. */
static const uint8_t alert_access_denied[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31 };

typedef enum first_bytes {
        FIRST_TLS,
        FIRST_HTTP,
} first_bytes;

/* A live connection as pol_proxy_live_update() sees it: in live_list
 * from the start of pol_proxy_serve() to just before its client socket is
 * closed. Every field is under live_lock. */
struct pol_proxy_live {
        pol_proxy_live *prev, *next;
        const pol_proxy_env *env;   /* the env its decision was made with */
        const pol_proxy_target *t;  /* the decision, valid when decided */
        int client_fd, up_fd;       /* up_fd -1 while no upstream is open */
        bool decided, cut;
};

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pol_proxy_live *live_list;
static const pol_proxy_env *live_env; /* NULL until the first pol_proxy_live_update() */

/* One connection's state while the decision is made. */
typedef struct conn {
        const pol_proxy_env *env;
        pol_proxy_live live;
        pol_stream client;
        const struct sockaddr_storage *orig; /* NULL: explicit proxy */
        uint64_t deadline;                   /* of the current wait for the client, monotonic ms */
        bool have_expect;
        pol_host expect;                     /* the CONNECT target every later host must equal */
        uint16_t port;                       /* upstream port; 0 until known */
        bool judged;
        pol_proxy_target t;                  /* judged at CONNECT time */
} conn;

/* ---- socket helpers -------------------------------------------------------- */

static void set_timeouts(int fd, int ms) {
        (void)pol_proxy_set_timeouts(fd, ms);
}

/* Small writes (TLS handshake records, request heads) must not wait for
 * Nagle's algorithm and the peer's delayed ACK (up to 40 ms each). */
static void set_nodelay(int fd) {
        int one = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int set_nonblock(int fd, bool on) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) < 0)
                return negative_errno();
        return 0;
}

static int remaining_ms(uint64_t deadline) {
        uint64_t now = core_monotonic_ms();
        return now >= deadline ? 0 : (int)(deadline - now);
}

/* Waits until at least `want` bytes are queued on fd, the peer closed, or the
 * deadline passed, then peeks up to `size` bytes into buf without consuming
 * any. SO_RCVLOWAT makes poll() wait for `want` bytes: a plain poll() would
 * report the bytes already peeked as readable again and spin. Returns the
 * bytes peeked (fewer than `want` when the peer closed), -ETIMEDOUT, or a
 * negative errno. */
static ssize_t peek_wait(int fd, uint8_t *buf, size_t size, size_t want, uint64_t deadline) {
        int lowat = (int)want, one = 1;
        bool last = false;
        ssize_t r, prev = -1;
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat));
        for (;;) {
                r = recv(fd, buf, size, MSG_PEEK | MSG_DONTWAIT);
                if (r < 0 && errno != EAGAIN && errno != EINTR) {
                        r = negative_errno();
                        break;
                }
                if (r == 0 || r >= (ssize_t)want || (last && r > 0))
                        break;
                int ms = remaining_ms(deadline);
                if (ms == 0) {
                        r = -ETIMEDOUT;
                        break;
                }
                /* A kernel that capped SO_RCVLOWAT would wake us with nothing
                 * new: pace the loop instead of spinning. */
                ssize_t have = r > 0 ? r : 0;
                if (have == prev)
                        (void)poll(NULL, 0, MIN(ms, 5));
                prev = have;
                struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
                if (poll(&p, 1, ms) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        last = true;
        }
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
        return r;
}

/* Ends a refused connection: shuts our side, then reads and drops what the
 * client still sends for a moment. Closing a socket with unread bytes makes
 * the kernel send a RST, which can destroy the 403 or the alert before the
 * client reads it. Bounded in time and bytes. */
static void linger_close(int fd) {
        uint8_t junk[4096];
        uint64_t end = core_monotonic_ms() + LINGER_MS;
        (void)shutdown(fd, SHUT_WR);
        for (size_t total = 0; total < LINGER_MAX;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, remaining_ms(end)) <= 0)
                        break;
                ssize_t n = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                        break;
                total += n > 0 ? (size_t)n : 0;
        }
}

static uint16_t sockaddr_port(const struct sockaddr_storage *a) {
        return ntohs(a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
                                              : ((const struct sockaddr_in *)a)->sin_port);
}

static int sockaddr_to_addr(const struct sockaddr_storage *a, pol_addr *ret) {
        memset(ret, 0, sizeof(*ret));
        ret->family = a->ss_family;
        if (a->ss_family == AF_INET)
                memcpy(ret->bytes, &((const struct sockaddr_in *)a)->sin_addr, 4);
        else if (a->ss_family == AF_INET6)
                memcpy(ret->bytes, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
        else
                return -EAFNOSUPPORT;
        return 0;
}

/* ---- events and refusals ---------------------------------------------------- */

static void report(const conn *c, const char *host, uint16_t port, const char *reason, const pol_verdict *v,
                   const char *fmt, ...) _printf_(6, 7);
static void report(const conn *c, const char *host, uint16_t port, const char *reason, const pol_verdict *v,
                   const char *fmt, ...) {
        char msg[512];
        va_list ap;
        if (!c->env->event)
                return;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        pol_proxy_event ev = { .allow = false, .host = host ?: "", .port = port, .reason = reason,
                               .verdict = v, .message = msg };
        c->env->event(&ev, c->env->event_userdata);
}

/* A verdict for refusals the policy text did not decide (the hosts a client
 * named disagree, or one does not parse): shown in the 403 and the event. */
static pol_verdict host_verdict(const char *detail) {
        pol_verdict v = { .allow = false, .layer = POL_LAYER_INVALID_HOST, .rule = -1 };
        snprintf(v.detail, sizeof(v.detail), "%s", detail);
        return v;
}

/* Refuses a TLS connection: the ClientHello is still queued (peeked), so it
 * is dropped first, then the alert goes out and the socket lingers. */
static void refuse_tls(conn *c, const char *host, const char *reason, const pol_verdict *v, const char *why) {
        uint8_t junk[4096];
        ssize_t n;
        for (size_t total = 0; total < LINGER_MAX && (n = recv(c->client.fd, junk, sizeof(junk), MSG_DONTWAIT)) > 0;)
                total += (size_t)n;
        (void)send(c->client.fd, alert_access_denied, sizeof(alert_access_denied), MSG_NOSIGNAL | MSG_DONTWAIT);
        report(c, host, c->port, reason, v, "TLS connection to %s:%u refused: %s", host, c->port, why);
        linger_close(c->client.fd);
}

/* Whether a refusal of host h on c->port can be made legible inside TLS
 * (pol_tls_deny): the sandbox trusts the CA that would sign the leaf, the
 * host is a name (an address literal gets no minted certificate), and the
 * port is 443, where the client is known to speak HTTPS; a CONNECT to
 * another port may carry anything (SSH, a database, TLS that is not
 * HTTP), so its refusal stays a 403 before the tunnel. */
static bool deny_in_tls(const conn *c, const pol_host *h) {
        return c->env->ca && c->env->deny_in_tls && !h->is_addr && c->port == 443;
}

/* The refusal of a denied name inside TLS: reported once, as refuse_tls()
 * and refuse_http() report it, then the handshake with a leaf for the
 * name and the 403 for the request that follows. c->t holds the name and
 * the verdict (judge()); nothing is resolved or dialled here. */
static void refuse_inside_tls(conn *c, const char *why) {
        (void)pol_tls_deny(c->env, c->client.fd, &c->t, why);
        linger_close(c->client.fd);
}

static void refuse_http(conn *c, const char *host, const char *reason, const pol_verdict *v, const char *why) {
        (void)pol_http_write_403(&c->client, c->env->policy_name, host, v, why);
        report(c, host, c->port, reason, v, "HTTP request to %s:%u refused: %s", host, c->port, why);
        linger_close(c->client.fd);
}

static void bad_request(conn *c, const char *host, const char *why) {
        (void)pol_http_write_error(&c->client, 400, why);
        report(c, host, c->port, "bad-request", NULL, "malformed request refused: %s", why);
        linger_close(c->client.fd);
}

/* A head that read_head() refused: 431 when it is too large (RFC 6585 §5,
 * as the HTTP layer answers on a terminated connection), else 400. */
static void bad_head(conn *c, const char *host, int r) {
        if (r != -E2BIG)
                return bad_request(c, host, "malformed request head");
        (void)pol_http_write_error(&c->client, 431, "request head too large (more than 64 KiB)");
        report(c, host, c->port, "framing", NULL, "request refused: head larger than 64 KiB");
        linger_close(c->client.fd);
}

/* ---- hosts ---------------------------------------------------------------------- */

static bool same_host(const pol_host *a, const pol_host *b) {
        if (a->is_addr != b->is_addr)
                return false;
        if (a->is_addr)
                return a->addr.family == b->addr.family && memcmp(a->addr.bytes, b->addr.bytes, 16) == 0;
        return streq(a->name, b->name);
}

/* The host as text for pages and events: its normalised form. */
static const char *host_text(const pol_host *h, char *buf, size_t size) {
        if (h->is_addr)
                return pol_addr_format(&h->addr, buf, size);
        snprintf(buf, size, "%s", h->name);
        return buf;
}

/* The allow entry whose rules apply to `name` on `port`: the most specific
 * pattern that matches, counting a pattern without ":port" only on 80 and
 * 443. Its rules were written for the web ports: on another port the same
 * name may be a different service (an admin API, a database), which must
 * not receive the credentials a transform injects. A pattern that names
 * its port ("api.example.com:8443") applies its rules on that port. On
 * other ports the connection is that of a domain without rules. */
static const pol_domain *rules_domain(const pol_policy *p, const char *name, uint16_t port) {
        const pol_domain *best = NULL;
        unsigned best_score = 0;
        for (size_t i = 0; p && i < p->n_domains; i++) {
                const pol_pattern *pat = &p->domains[i].pattern;
                unsigned score = pol_pattern_specificity(pat);
                if (!pat->port && port != 80 && port != 443)
                        continue;
                if (pol_pattern_match(pat, name, port) && (!best || score > best_score)) {
                        best = &p->domains[i];
                        best_score = score;
                }
        }
        return best;
}

/* The address this connection is bound for when the client named one: the
 * original destination of a transparent connection, or the address of a
 * CONNECT to an IP literal. True, with that address in *ret and its
 * verdict in *ret_v, when a subnets.allow CIDR admits it (DESIGN §5.1 rule
 * 4: and neither subnets.deny nor the never-list refuses it, and a
 * forbidden range only where the CIDR names it, as pol_check_address()
 * applies them). Such a connection is never refused on SNI, Host or
 * CONNECT grounds. A CONNECT to a name is not looked up to find out: a
 * lookup of a name the policy does not allow would carry that name to an
 * upstream DNS server the policy keeps the sandbox from. */
static bool admitted_destination(const conn *c, pol_addr *ret, pol_verdict *ret_v) {
        if (c->orig && !c->have_expect) {
                if (sockaddr_to_addr(c->orig, ret) < 0)
                        return false;
        } else if (c->have_expect && c->expect.is_addr)
                *ret = c->expect.addr;
        else
                return false;
        return pol_check_address(c->env->policy, ret, c->env->never, c->env->n_never, ret_v) &&
               ret_v->layer == POL_LAYER_SUBNET_ALLOW;
}

/* Fills c->t for a connection to the admitted address `a` (verdict av)
 * that carries host h: the connection goes to `a` whatever h names; when h
 * is a name the policy allows, that name's rules apply (rule 7) and its
 * upstream TLS is verified against it; any other name is spliced as a
 * domain without rules. */
static void admit_into(conn *c, pol_proxy_target *t, const pol_host *h, uint16_t port, const pol_addr *a,
                       const pol_verdict *av) {
        pol_verdict nv;
        memset(t, 0, sizeof(*t));
        t->port = port;
        t->verdict = *av;
        t->addrs[0] = *a;
        t->n_addrs = 1;
        if (h->is_addr) {
                t->is_addr = true;
                pol_addr_format(&h->addr, t->host, sizeof(t->host));
                return;
        }
        snprintf(t->host, sizeof(t->host), "%s", h->name);
        if (pol_check_name(c->env->policy, h->name, port, &nv))
                t->domain = rules_domain(c->env->policy, h->name, port);
}

/* Judges host h on `port` and fills c->t: a connection bound for an
 * address subnets.allow admits goes there (admitted_destination());
 * otherwise names by pol_check_name(), then our own resolution
 * (pol_proxy_resolve); addresses by pol_check_address().
 * 0 allowed, -EACCES denied (c->t.verdict says why), other negative errno
 * when the name could not be resolved. */
static void commit(conn *c, const pol_proxy_target *t, bool allowed);

static int judge_into(conn *c, pol_proxy_target *t, const pol_host *h, uint16_t port) {
        const pol_proxy_env *env = c->env;
        pol_addr dest;
        pol_verdict dv;
        if (admitted_destination(c, &dest, &dv)) {
                admit_into(c, t, h, port, &dest, &dv);
                return 0;
        }
        memset(t, 0, sizeof(*t));
        t->port = port;
        if (h->is_addr) {
                t->is_addr = true;
                pol_addr_format(&h->addr, t->host, sizeof(t->host));
                if (!pol_check_address(env->policy, &h->addr, env->never, env->n_never, &t->verdict))
                        return -EACCES;
                t->addrs[0] = h->addr;
                t->n_addrs = 1;
                return 0;
        }
        snprintf(t->host, sizeof(t->host), "%s", h->name);
        /* The name first: a denied name is refused without a DNS round trip. */
        if (!pol_check_name(env->policy, h->name, port, &t->verdict))
                return -EACCES;
        int r = pol_proxy_resolve(env, h->name, port, t);
        if (r < 0)
                return r;
        t->domain = rules_domain(env->policy, h->name, port);
        return 0;
}

/* The decision is made on a copy and published whole under live_lock
 * (commit()), so pol_proxy_live_update() never sees half of one. */
static int judge(conn *c, const pol_host *h, uint16_t port) {
        pol_proxy_target t;
        int r = judge_into(c, &t, h, port);
        commit(c, &t, r >= 0);
        return r;
}

static void admit_address(conn *c, const pol_host *h, uint16_t port, const pol_addr *a, const pol_verdict *av) {
        pol_proxy_target t;
        admit_into(c, &t, h, port, a, av);
        commit(c, &t, true);
}

/* ---- live policy updates ------------------------------------------------------------ */

/* Shuts both sockets of l down (the owner closes them): a blocked read or
 * poll of its thread wakes, and nothing more is sent either way. */
static void cut_locked(pol_proxy_live *l) {
        l->cut = true;
        (void)shutdown(l->client_fd, SHUT_RDWR);
        if (l->up_fd >= 0)
                (void)shutdown(l->up_fd, SHUT_RDWR);
}

/* The rules of two allow entries are the same (both none, or the same
 * pattern with the same rules as pol_policy_to_json() prints them, header
 * values included: a rotated secret is a different rule set). */
static bool same_rules(const pol_domain *a, const pol_domain *b) {
        size_t na = a ? a->n_rules : 0, nb = b ? b->n_rules : 0;
        if (na == 0 && nb == 0)
                return true;
        if (na != nb)
                return false;
        pol_policy pa = { .mode = POL_MODE_CUSTOM, .allow_is_object = true, .domains = (pol_domain *)a, .n_domains = 1 };
        pol_policy pb = { .mode = POL_MODE_CUSTOM, .allow_is_object = true, .domains = (pol_domain *)b, .n_domains = 1 };
        cJSON *ja = pol_policy_to_json(&pa, false), *jb = pol_policy_to_json(&pb, false);
        bool same = ja && jb && cJSON_Compare(ja, jb, true);
        cJSON_Delete(ja);
        cJSON_Delete(jb);
        return same;
}

/* Whether env's policy makes the decision t again, from memory: the same
 * checks judge() made (by address for an address or a subnets.allow
 * admission, else the name with the addresses the proxy resolved), and the
 * same rule set. */
static bool target_holds(const pol_proxy_env *env, const pol_proxy_target *t) {
        pol_verdict v;
        const pol_domain *d = NULL;
        if (t->n_addrs == 0)
                return false;
        if (t->is_addr || t->verdict.layer == POL_LAYER_SUBNET_ALLOW) {
                if (t->n_addrs != 1 || !pol_check_address(env->policy, &t->addrs[0], env->never, env->n_never, &v))
                        return false;
                if (t->verdict.layer == POL_LAYER_SUBNET_ALLOW && v.layer != POL_LAYER_SUBNET_ALLOW)
                        return false;
                if (!t->is_addr && pol_check_name(env->policy, t->host, t->port, &v))
                        d = rules_domain(env->policy, t->host, t->port);
        } else {
                if (!pol_check_resolved(env->policy, t->host, t->port, t->addrs, t->n_addrs, env->never, env->n_never,
                                        &v))
                        return false;
                d = rules_domain(env->policy, t->host, t->port);
        }
        return same_rules(t->domain, d);
}

static void commit(conn *c, const pol_proxy_target *t, bool allowed) {
        pthread_mutex_lock(&live_lock);
        c->t = *t;
        c->t.live = &c->live;
        c->live.t = &c->t;
        if (allowed && !c->live.cut) {
                c->live.decided = true;
                /* Decided under a policy replaced meanwhile; or with the
                 * policy the connection started under (c->env) after a
                 * reload carried it over into a newer one (live.env): it
                 * must hold there too. */
                if (live_env && c->live.env != live_env)
                        cut_locked(&c->live);
                else if (live_env && c->env != c->live.env && !target_holds(c->live.env, &c->t))
                        cut_locked(&c->live);
        }
        pthread_mutex_unlock(&live_lock);
}

void pol_proxy_live_update(const pol_proxy_env *env) {
        pthread_mutex_lock(&live_lock);
        live_env = env;
        for (pol_proxy_live *l = live_list; l; l = l->next) {
                if (l->cut)
                        continue;
                if (!l->decided || !target_holds(env, l->t))
                        cut_locked(l);
                else
                        l->env = env; /* judged again: holds under env */
        }
        pthread_mutex_unlock(&live_lock);
}

void pol_proxy_live_forget(pol_proxy_live *live, int fd) {
        if (!live || fd < 0)
                return;
        pthread_mutex_lock(&live_lock);
        if (live->up_fd == fd)
                live->up_fd = -1;
        pthread_mutex_unlock(&live_lock);
}

static void live_register(conn *c) {
        pthread_mutex_lock(&live_lock);
        c->live = (pol_proxy_live){ .env = c->env, .t = &c->t, .client_fd = c->client.fd, .up_fd = -1 };
        c->live.next = live_list;
        if (live_list)
                live_list->prev = &c->live;
        live_list = &c->live;
        if (live_env && c->env != live_env)
                cut_locked(&c->live);
        pthread_mutex_unlock(&live_lock);
}

static void live_unregister(conn *c) {
        pthread_mutex_lock(&live_lock);
        if (c->live.prev)
                c->live.prev->next = c->live.next;
        else
                live_list = c->live.next;
        if (c->live.next)
                c->live.next->prev = c->live.prev;
        pthread_mutex_unlock(&live_lock);
}

/* ---- DNS --------------------------------------------------------------------------- */

DEFINE_TRIVIAL_CLEANUP_FUNC(ldns_resolver, ldns_resolver_deep_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(ldns_rdf, ldns_rdf_deep_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(ldns_pkt, ldns_pkt_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(ldns_rr_list, ldns_rr_list_deep_free);

/* A resolver that asks env->resolver only, once, within io_timeout_ms. */
static int make_resolver(const pol_proxy_env *env, ldns_resolver **ret) {
        _cleanup_(ldns_resolver_deep_freep) ldns_resolver *res = ldns_resolver_new();
        uint16_t port = 0;
        _cleanup_(ldns_rdf_deep_freep) ldns_rdf *ns =
                ldns_sockaddr_storage2rdf((struct sockaddr_storage *)&env->resolver, &port);
        if (!res || !ns)
                return -ENOMEM;
        if (ldns_resolver_push_nameserver(res, ns) != LDNS_STATUS_OK)
                return -EINVAL;
        int ms = env->io_timeout_ms > 0 ? env->io_timeout_ms : 3000;
        ldns_resolver_set_port(res, port);
        ldns_resolver_set_recursive(res, true);
        ldns_resolver_set_retry(res, 1);
        ldns_resolver_set_timeout(res, (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 });
        ldns_resolver_set_defnames(res, false);
        ldns_resolver_set_dnsrch(res, false);
        *ret = TAKE_PTR(res);
        return 0;
}

/* The addresses of one record type (A or AAAA) of `dn`, appended to
 * addrs. 0, -ENOENT for NXDOMAIN, -ETIMEDOUT / -EIO when the resolver
 * failed or the answer is too big to judge whole (rule 6). */
static int resolve_type(ldns_resolver *res, const ldns_rdf *dn, ldns_rr_type type, pol_addr *addrs, size_t *n) {
        _cleanup_(ldns_pkt_freep) ldns_pkt *pkt = NULL;
        _cleanup_(ldns_rr_list_deep_freep) ldns_rr_list *a = NULL;
        size_t len = type == LDNS_RR_TYPE_A ? 4 : 16;
        ldns_status s = ldns_resolver_query_status(&pkt, res, dn, type, LDNS_RR_CLASS_IN, LDNS_RD);
        if (s != LDNS_STATUS_OK || !pkt)
                return s == LDNS_STATUS_NETWORK_ERR ? -ETIMEDOUT : -EIO;
        if (ldns_pkt_get_rcode(pkt) == LDNS_RCODE_NXDOMAIN)
                return -ENOENT;
        if (ldns_pkt_get_rcode(pkt) != LDNS_RCODE_NOERROR)
                return -EIO;
        a = ldns_pkt_rr_list_by_type(pkt, type, LDNS_SECTION_ANSWER);
        for (size_t i = 0; a && i < ldns_rr_list_rr_count(a); i++) {
                const ldns_rdf *rd = ldns_rr_rdf(ldns_rr_list_rr(a, i), 0);
                if (!rd || ldns_rdf_size(rd) != len)
                        continue;
                if (*n == MAX_RESOLVED)
                        return -EIO;
                addrs[*n] = (pol_addr){ .family = type == LDNS_RR_TYPE_A ? AF_INET : AF_INET6 };
                memcpy(addrs[(*n)++].bytes, ldns_rdf_data(rd), len);
        }
        return 0;
}

int pol_proxy_resolve(const pol_proxy_env *env, const char *name, uint16_t port, pol_proxy_target *t) {
        _cleanup_(ldns_resolver_deep_freep) ldns_resolver *res = NULL;
        _cleanup_(ldns_rdf_deep_freep) ldns_rdf *dn = ldns_dname_new_frm_str(name);
        pol_addr addrs[MAX_RESOLVED];
        size_t n = 0;
        int r = make_resolver(env, &res);
        if (r < 0)
                return r;
        if (!dn)
                return -EINVAL;
        /* A first, then AAAA (IPv6 upstreams, DESIGN §5): the upstream is
         * dialled in that order. Both answers are judged together (rule 6:
         * one forbidden address in either refuses the name). A failed
         * AAAA lookup leaves the A answer; a failed A lookup with a good
         * AAAA answer is served over IPv6. */
        int ra = resolve_type(res, dn, LDNS_RR_TYPE_A, addrs, &n);
        if (ra == -ENOENT)
                return -ENOENT;
        int r6 = resolve_type(res, dn, LDNS_RR_TYPE_AAAA, addrs, &n);
        if (ra < 0 && r6 < 0)
                return ra;
        if (r6 == -EIO && n == MAX_RESOLVED)
                return -EIO; /* too big to judge whole */
        if (n == 0)
                return -ENOENT;
        if (!pol_check_resolved(env->policy, name, port, addrs, n, env->never, env->n_never, &t->verdict))
                return -EACCES;
        t->n_addrs = MIN(n, (size_t)POL_PROXY_MAX_ADDRS);
        memcpy(t->addrs, addrs, t->n_addrs * sizeof(pol_addr));
        return 0;
}

/* ---- TLS ClientHello --------------------------------------------------------------- */

typedef struct hello {
        bool seen;   /* OpenSSL parsed a whole ClientHello */
        bool bad;    /* its server_name extension is malformed */
        bool has_sni;
        char sni[256];
} hello;

/* The host_name entry of a server_name extension body (RFC 6066 §3:
 * ServerNameList = uint16 length, then entries of uint8 type, uint16 length,
 * bytes). OpenSSL hands over the raw body in the client-hello callback. */
static void read_server_name(const unsigned char *p, size_t len, hello *h) {
        if (len < 2 || (size_t)(p[0] << 8 | p[1]) != len - 2) {
                h->bad = true;
                return;
        }
        for (size_t i = 2; i + 3 <= len;) {
                size_t l = (size_t)(p[i + 1] << 8 | p[i + 2]);
                if (i + 3 + l > len) {
                        h->bad = true;
                        return;
                }
                if (p[i] == TLSEXT_NAMETYPE_host_name) {
                        if (l == 0 || l >= sizeof(h->sni) || memchr(p + i + 3, '\0', l)) {
                                h->bad = true;
                                return;
                        }
                        memcpy(h->sni, p + i + 3, l);
                        h->sni[l] = '\0';
                        h->has_sni = true;
                        return;
                }
                i += 3 + l;
        }
}

/* Reads the SNI, then aborts the handshake: this SSL object only parses. */
static int hello_cb(SSL *s, int *al, void *arg) {
        hello *h = SSL_get_app_data(s);
        const unsigned char *p = NULL;
        size_t len = 0;
        h->seen = true;
        if (SSL_client_hello_get0_ext(s, TLSEXT_TYPE_server_name, &p, &len) == 1)
                read_server_name(p, len, h);
        *al = SSL_AD_ACCESS_DENIED;
        return SSL_CLIENT_HELLO_ERROR;
}

static SSL_CTX *hello_ctx;
static pthread_once_t hello_once = PTHREAD_ONCE_INIT;

static void hello_ctx_init(void) {
        hello_ctx = SSL_CTX_new(TLS_server_method());
        if (hello_ctx)
                SSL_CTX_set_client_hello_cb(hello_ctx, hello_cb, NULL);
}

/* Lets OpenSSL parse one ClientHello record (a copy of the peeked bytes, on
 * a memory BIO; anything it would answer goes to a memory BIO too). */
static int parse_hello(const uint8_t *rec, size_t n, hello *h) {
        pthread_once(&hello_once, hello_ctx_init);
        if (!hello_ctx)
                return -ENOMEM;
        SSL *ssl = SSL_new(hello_ctx);
        BIO *rb = BIO_new_mem_buf(rec, (int)n), *wb = BIO_new(BIO_s_mem());
        if (!ssl || !rb || !wb) {
                SSL_free(ssl);
                BIO_free(rb);
                BIO_free(wb);
                return -ENOMEM;
        }
        SSL_set_bio(ssl, rb, wb);
        SSL_set_app_data(ssl, h);
        SSL_set_accept_state(ssl);
        (void)SSL_do_handshake(ssl); /* fails by design: hello_cb aborts */
        SSL_free(ssl);
        ERR_clear_error(); /* the queue is per thread; leave it clean */
        return h->seen && !h->bad ? 0 : -EBADMSG;
}

/* Peeks the first TLS record (the ClientHello) whole, without consuming it,
 * and parses its SNI. Only the 5-byte record header is read by hand, for the
 * length. -EBADMSG when it is not a single-record ClientHello. */
static int peek_hello(conn *c, hello *h) {
        _cleanup_free_ uint8_t *buf = malloc(TLS_HEADER + TLS_RECORD_MAX);
        if (!buf)
                return -ENOMEM;
        ssize_t n = peek_wait(c->client.fd, buf, TLS_HEADER, TLS_HEADER, c->deadline);
        if (n < 0)
                return (int)n;
        if (n < TLS_HEADER || buf[0] != 0x16)
                return -EBADMSG;
        size_t len = (size_t)(buf[3] << 8 | buf[4]);
        if (len == 0 || len > TLS_RECORD_MAX)
                return -EBADMSG;
        n = peek_wait(c->client.fd, buf, TLS_HEADER + len, TLS_HEADER + len, c->deadline);
        if (n < 0)
                return (int)n;
        if ((size_t)n < TLS_HEADER + len)
                return -EBADMSG;
        return parse_hello(buf, TLS_HEADER + len, h);
}

/* ---- upstream ------------------------------------------------------------------------- */

static int dial_wait(int fd, int cr, int timeout_ms);

static int dial_one(const pol_addr *a, uint16_t port, int timeout_ms, pol_proxy_live *live) {
        struct sockaddr_storage ss = {};
        socklen_t len;
        if (a->family == AF_INET) {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
                s4->sin_family = AF_INET;
                s4->sin_port = htons(port);
                memcpy(&s4->sin_addr, a->bytes, 4);
                len = sizeof(*s4);
        } else {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons(port);
                memcpy(&s6->sin6_addr, a->bytes, 16);
                len = sizeof(*s6);
        }
        _cleanup_close_ int fd = socket(a->family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        /* The SYN leaves inside connect(): checked and sent under
         * live_lock, so no dial of a cut connection starts after
         * pol_proxy_live_update() returned. */
        int cr = 0;
        if (live) {
                pthread_mutex_lock(&live_lock);
                if (live->cut) {
                        pthread_mutex_unlock(&live_lock);
                        return -ECONNABORTED;
                }
                cr = connect(fd, (struct sockaddr *)&ss, len) < 0 ? -errno : 0;
                live->up_fd = fd;
                pthread_mutex_unlock(&live_lock);
        } else
                cr = connect(fd, (struct sockaddr *)&ss, len) < 0 ? -errno : 0;
        int r = dial_wait(fd, cr, timeout_ms);
        if (r < 0) {
                pol_proxy_live_forget(live, fd);
                return r;
        }
        return TAKE_FD(fd);
}

/* Completes the non-blocking connect of dial_one() (cr: its result). */
static int dial_wait(int fd, int cr, int timeout_ms) {
        if (cr < 0) {
                if (cr != -EINPROGRESS)
                        return cr;
                struct pollfd p = { .fd = fd, .events = POLLOUT };
                int k = poll(&p, 1, timeout_ms), err = 0;
                socklen_t el = sizeof(err);
                if (k == 0)
                        return -ETIMEDOUT;
                if (k < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
                        return negative_errno();
                if (err)
                        return -err;
        }
        int r = set_nonblock(fd, false);
        if (r < 0)
                return r;
        set_timeouts(fd, timeout_ms);
        set_nodelay(fd);
        return 0;
}

/* The last check before a connect(): the proxy dials from the host's
 * network namespace, so an address the kernel delivers locally (any of the
 * host's addresses, whenever it was added; 0.0.0.0 and 127.0.0.0/8; a
 * broadcast) would reach the host's own listeners. Only an address whose
 * route is RTN_UNICAST is dialled; anything else, or a kernel that cannot
 * be asked, is -EACCES (fail closed). */
static int dial_allowed(const pol_addr *a) {
        int r = core_route_is_unicast(a->family, a->bytes, NULL);
        return r > 0 ? 0 : -EACCES;
}

int pol_proxy_dial(const pol_proxy_target *t, int timeout_ms) {
        int r = -EHOSTUNREACH;
        for (size_t i = 0; i < t->n_addrs; i++) {
                if ((r = dial_allowed(&t->addrs[i])) < 0)
                        continue;
                r = dial_one(&t->addrs[i], t->port, timeout_ms, t->live);
                if (r == -ECONNABORTED)
                        return r;
                if (r >= 0)
                        return r;
        }
        return r;
}

static int dial(const pol_proxy_env *env, const pol_proxy_target *t) {
        return pol_proxy_dial(t, env->io_timeout_ms);
}

/* ---- the tunnel ------------------------------------------------------------------------- */

typedef struct half {
        int from, to;
        int pipe[2];
        size_t queued; /* bytes in the pipe */
        bool eof, shut;
} half;

/* Moves what it can from `from` into the pipe and from the pipe to `to`,
 * without blocking; passes EOF on as shutdown(SHUT_WR) once the pipe is
 * empty, so each direction closes on its own (half-close). */
static int pump(half *h, bool *progress) {
        if (!h->eof && h->queued < TUNNEL_PIPE) {
                ssize_t n = splice(h->from, NULL, h->pipe[1], NULL, TUNNEL_PIPE - h->queued,
                                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n > 0)
                        h->queued += (size_t)n, *progress = true;
                else if (n == 0)
                        h->eof = true, *progress = true;
                else if (errno != EAGAIN && errno != EINTR)
                        return negative_errno();
        }
        while (h->queued > 0) {
                ssize_t n = splice(h->pipe[0], NULL, h->to, NULL, h->queued, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n > 0) {
                        h->queued -= (size_t)n, *progress = true;
                        continue;
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        break;
                return n < 0 ? negative_errno() : -EPIPE;
        }
        if (h->eof && h->queued == 0 && !h->shut) {
                (void)shutdown(h->to, SHUT_WR);
                h->shut = true;
        }
        return 0;
}

static short want(const half *in, const half *out) {
        return (short)((!in->eof && in->queued < TUNNEL_PIPE ? POLLIN : 0) | (out->queued > 0 ? POLLOUT : 0));
}

/* Splices a and b both ways until both directions ended, one failed, or
 * nothing moved for TUNNEL_IDLE_MS. */
static int tunnel(int a, int b) {
        half h[2] = { { .from = a, .to = b, .pipe = { -EBADF, -EBADF } },
                      { .from = b, .to = a, .pipe = { -EBADF, -EBADF } } };
        int r = 0;
        for (size_t i = 0; i < 2 && r >= 0; i++) {
                if (pipe2(h[i].pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                        r = negative_errno();
                else
                        (void)fcntl(h[i].pipe[1], F_SETPIPE_SZ, TUNNEL_PIPE);
        }
        if (r >= 0 && ((r = set_nonblock(a, true)) < 0 || (r = set_nonblock(b, true)) < 0))
                goto out;
        while (r >= 0 && !(h[0].shut && h[1].shut)) {
                struct pollfd p[2] = { { .fd = a, .events = want(&h[0], &h[1]) },
                                       { .fd = b, .events = want(&h[1], &h[0]) } };
                int k = poll(p, 2, TUNNEL_IDLE_MS);
                if (k == 0)
                        r = -ETIMEDOUT;
                if (k < 0 && errno != EINTR)
                        r = negative_errno();
                if (k <= 0)
                        continue;
                bool progress = false;
                for (size_t i = 0; i < 2 && r >= 0; i++)
                        r = pump(&h[i], &progress);
                /* A hung-up or failed socket that cannot move data any more
                 * would wake poll() forever. */
                if (r >= 0 && !progress && ((p[0].revents | p[1].revents) & (POLLERR | POLLHUP | POLLNVAL)))
                        r = -ECONNRESET;
        }
out:
        for (size_t i = 0; i < 2; i++) {
                closep(&h[i].pipe[0]);
                closep(&h[i].pipe[1]);
        }
        return r;
}

/* ---- TLS connections ------------------------------------------------------------------------ */

/* Connects to c->t and splices; an unreachable upstream becomes an event. */
static void splice_to_target(conn *c) {
        int up = dial(c->env, &c->t);
        if (up < 0) {
                report(c, c->t.host, c->port, "upstream-unreachable", &c->t.verdict,
                       "cannot connect to %s:%u: %s", c->t.host, c->port,
                       up == -EACCES ? POL_PROXY_LOCAL_REFUSED : strerror(-up));
                return;
        }
        (void)tunnel(c->client.fd, up);
        pol_proxy_live_forget(&c->live, up);
        close(up);
}

/* A ClientHello without SNI: refused unless the original destination is
 * itself admitted as an address (a subnets.allow CIDR), or the CONNECT
 * target was an address (clients send no SNI for IP literals). */
static void serve_tls_without_sni(conn *c) {
        char text[INET6_ADDRSTRLEN];
        pol_addr a;
        if (c->have_expect && c->expect.is_addr)
                return splice_to_target(c);
        if (!c->have_expect && c->orig && sockaddr_to_addr(c->orig, &a) >= 0) {
                pol_host h = { .is_addr = true, .addr = a };
                if (judge(c, &h, c->port) >= 0)
                        return splice_to_target(c);
                pol_addr_format(&a, text, sizeof(text));
                return refuse_tls(c, text, "missing-sni", &c->t.verdict,
                                  "no server name (SNI) was sent and the address is not allowed");
        }
        pol_verdict v = host_verdict("TLS without a server name (SNI)");
        refuse_tls(c, c->have_expect ? c->t.host : "", "missing-sni", &v, "no server name (SNI) was sent");
}

static void serve_tls(conn *c) {
        hello h = {};
        pol_host sni;
        const char *why = NULL;
        int r = peek_hello(c, &h);
        if (r == -ETIMEDOUT || r == -ECONNRESET || r == -ENOMEM)
                return;
        if (r < 0) {
                pol_verdict v = host_verdict("malformed TLS ClientHello");
                return refuse_tls(c, c->have_expect ? c->t.host : "", "bad-request", &v,
                                  "the first TLS record is not a whole ClientHello");
        }
        if (!h.has_sni)
                return serve_tls_without_sni(c);
        if (pol_host_parse(h.sni, &sni, &why) < 0) {
                pol_verdict v = host_verdict(why);
                return refuse_tls(c, h.sni, "not-allowed", &v, "the server name (SNI) is not a valid host");
        }
        char text[POL_NAME_MAX + 1];
        host_text(&sni, text, sizeof(text));
        pol_addr dest;
        pol_verdict dv;
        if (c->have_expect && !same_host(&c->expect, &sni) && admitted_destination(c, &dest, &dv))
                admit_address(c, &sni, c->port, &dest, &dv);
        else if (c->have_expect && !same_host(&c->expect, &sni)) {
                pol_verdict v = host_verdict("SNI differs from the CONNECT target");
                return refuse_tls(c, text, "sni-mismatch", &v, "the server name (SNI) differs from the CONNECT target");
        }
        if (!c->judged && (r = judge(c, &sni, c->port)) < 0) {
                if (r == -EACCES && deny_in_tls(c, &sni)) {
                        report(c, text, c->port, "not-allowed", &c->t.verdict, "TLS connection to %s:%u refused: %s",
                               text, c->port, NOT_ALLOWED);
                        return refuse_inside_tls(c, NOT_ALLOWED);
                }
                if (r == -EACCES)
                        return refuse_tls(c, text, "not-allowed", &c->t.verdict, NOT_ALLOWED);
                report(c, text, c->port, "upstream-unreachable", NULL, "cannot resolve %s: %s", text, strerror(-r));
                return;
        }
        if (c->t.domain && c->t.domain->n_rules > 0) {
                if (!c->env->ca)
                        return refuse_tls(c, text, "not-allowed", &c->t.verdict,
                                          "the host has rules but this proxy has no CA to apply them");
                (void)pol_tls_terminate(c->env, c->client.fd, &c->t);
                return;
        }
        splice_to_target(c);
}

/* ---- HTTP ------------------------------------------------------------------------------------ */

typedef struct head {
        uint8_t *buf; /* HEAD_MAX bytes; the head is consumed from the socket */
        size_t len;
        char method[32];
        char *target;
        char *host;
} head;

static void head_done(head *h) {
        free(h->buf);
        free(h->target);
        free(h->host);
}

/* Peeks until a whole request head is queued, then consumes exactly the head,
 * so whatever follows (a tunnelled ClientHello after CONNECT, a body) stays
 * in the socket. 0, -EBADMSG / -E2BIG (answer 400), or another negative
 * errno (the client went away or timed out: nothing to answer). */
static int read_head(conn *c, head *h) {
        size_t need = 1;
        int r;
        if (!(h->buf = malloc(HEAD_MAX)))
                return -ENOMEM;
        for (;;) {
                ssize_t n = peek_wait(c->client.fd, h->buf, HEAD_MAX, need, c->deadline);
                if (n < 0)
                        return (int)n;
                if ((size_t)n < need)
                        return -ECONNRESET;
                r = pol_http_parse_head(h->buf, (size_t)n, h->method, &h->target, &h->host, &h->len);
                if (r != -EAGAIN)
                        break;
                if ((size_t)n >= HEAD_MAX)
                        return -E2BIG;
                need = (size_t)n + 1;
        }
        if (r < 0)
                return r;
        if (recv(c->client.fd, h->buf, h->len, MSG_WAITALL) != (ssize_t)h->len)
                return -EIO;
        return 0;
}

/* The authority of an absolute-form target "http://host[:port]/..." (RFC
 * 9112 §3.2.2) into buf. -EPROTONOSUPPORT for other schemes (https goes
 * through CONNECT), -EPERM for userinfo ("user:pass@host", which RFC 9110
 * §4.2.4 forbids senders to generate and which hides the real host from
 * a careless reader), -EINVAL when malformed. */
static int absolute_authority(const char *target, char *buf, size_t size) {
        static const char http[] = "http://";
        if (strncasecmp(target, http, strlen(http)) != 0)
                return strstr(target, "://") ? -EPROTONOSUPPORT : -ENOENT;
        const char *a = target + strlen(http);
        size_t n = strcspn(a, "/?#");
        if (memchr(a, '@', n))
                return -EPERM;
        if (n == 0 || n >= size)
                return -EINVAL;
        memcpy(buf, a, n);
        buf[n] = '\0';
        return 0;
}

/* The one host of a plain request: the absolute URI's and the Host
 * header's, which must agree, and with the CONNECT target when inside one.
 * On refusal answers the client and returns a negative errno. */
static int request_host(conn *c, const head *h, pol_host *ret) {
        char auth[POL_NAME_MAX + 16];
        pol_host uri = {}, hh = {};
        const char *why = NULL;
        int r = absolute_authority(h->target, auth, sizeof(auth));
        bool have_uri = r >= 0;
        if (r == -EPERM)
                return bad_request(c, "", "an absolute URI with userinfo (user@host) is refused"), r;
        if (r == -EINVAL)
                return bad_request(c, "", "the request URI names no valid host"), r;
        if (r < 0 && r != -ENOENT)
                return bad_request(c, "", "only http:// absolute URIs are proxied; use CONNECT for https"), r;
        if (have_uri && pol_host_parse(auth, &uri, &why) < 0)
                return bad_request(c, auth, "the request URI names no valid host"), -EINVAL;
        if (h->host && pol_host_parse(h->host, &hh, &why) < 0)
                return bad_request(c, "", "the Host header names no valid host"), -EINVAL;
        if (!have_uri && !h->host)
                return -ENOENT;
        char text[POL_NAME_MAX + 1];
        *ret = have_uri ? uri : hh;
        host_text(ret, text, sizeof(text));
        if (have_uri && h->host && !same_host(&uri, &hh)) {
                pol_verdict v = host_verdict("Host header differs from the request URI");
                return refuse_http(c, text, "host-mismatch", &v, "the Host header differs from the request URI"), -EACCES;
        }
        pol_addr dest;
        pol_verdict dv;
        if (c->have_expect && !same_host(&c->expect, ret) && admitted_destination(c, &dest, &dv))
                admit_address(c, ret, c->port, &dest, &dv);
        else if (c->have_expect && !same_host(&c->expect, ret)) {
                pol_verdict v = host_verdict("Host differs from the CONNECT target");
                return refuse_http(c, text, "host-mismatch", &v, "the Host header differs from the CONNECT target"), -EACCES;
        }
        return 0;
}

/* A request without any host: only a transparent connection whose original
 * destination the policy admits as an address may go on, to that address. */
static int hostless_target(conn *c, pol_host *ret) {
        pol_addr a;
        if (!c->orig || c->have_expect || sockaddr_to_addr(c->orig, &a) < 0)
                return bad_request(c, "", "the request names no host (no Host header)"), -EINVAL;
        *ret = (pol_host){ .is_addr = true, .addr = a };
        return 0;
}

static void serve_request(conn *c, head *h) {
        pol_host host;
        char text[POL_NAME_MAX + 1];
        int r = request_host(c, h, &host);
        if (r == -ENOENT)
                r = hostless_target(c, &host);
        if (r < 0)
                return;
        host_text(&host, text, sizeof(text));
        if (c->port == 0)
                c->port = host.port ?: 80;
        if (!c->judged && (r = judge(c, &host, c->port)) < 0) {
                if (r == -EACCES)
                        return refuse_http(c, text, "not-allowed", &c->t.verdict, NOT_ALLOWED);
                (void)pol_http_write_error(&c->client, 502, "the proxy could not resolve the host");
                report(c, text, c->port, "upstream-unreachable", NULL, "cannot resolve %s: %s", text, strerror(-r));
                return;
        }
        /* Always through the HTTP layer, rules or not: later requests on a
         * keep-alive connection are Host-checked there. */
        (void)pol_http_serve(c->env, &c->client, &c->t, false, h->buf, h->len);
}

static int classify(conn *c, first_bytes *ret) {
        uint8_t b;
        ssize_t n = peek_wait(c->client.fd, &b, 1, 1, c->deadline);
        if (n <= 0)
                return n < 0 ? (int)n : -ECONNRESET;
        *ret = b == 0x16 ? FIRST_TLS : FIRST_HTTP;
        return 0;
}

/* A CONNECT to a name the policy refuses on 443 (deny_in_tls): the
 * tunnel is granted to the proxy itself, so that the client reads the
 * 403 inside it; clients show no body of a refused CONNECT. Reported
 * once, as a refused CONNECT always was. TLS inside gets pol_tls_deny();
 * plain HTTP inside gets the 403 as it is. */
static void refuse_connect_inside(conn *c, const char *text) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        first_bytes k = FIRST_HTTP;
        report(c, text, c->port, "not-allowed", &c->t.verdict, "HTTP request to %s:%u refused: %s", text, c->port,
               NOT_ALLOWED);
        if (send(c->client.fd, ok, strlen(ok), MSG_NOSIGNAL) != (ssize_t)strlen(ok))
                return;
        c->deadline = core_monotonic_ms() + (uint64_t)c->env->io_timeout_ms;
        if (classify(c, &k) < 0)
                return linger_close(c->client.fd);
        if (k == FIRST_TLS)
                return refuse_inside_tls(c, NOT_ALLOWED);
        (void)pol_http_refuse(c->env, &c->client, &c->t, NOT_ALLOWED);
        linger_close(c->client.fd);
}

/* CONNECT host:port: judged before the tunnel is granted, then the first
 * bytes inside the tunnel name the host again and must agree. */
static void serve_connect(conn *c, head *h) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        const char *why = NULL;
        char text[POL_NAME_MAX + 1];
        pol_host hh;
        first_bytes k = FIRST_HTTP;
        if (pol_host_parse(h->target, &c->expect, &why) < 0 || c->expect.port == 0)
                return bad_request(c, "", "CONNECT needs host:port");
        host_text(&c->expect, text, sizeof(text));
        c->port = c->expect.port;
        if (h->host && (pol_host_parse(h->host, &hh, &why) < 0 || !same_host(&c->expect, &hh))) {
                pol_verdict v = host_verdict("Host header differs from the CONNECT target");
                return refuse_http(c, text, "host-mismatch", &v, "the Host header differs from the CONNECT target");
        }
        int r = judge(c, &c->expect, c->port);
        if (r == -EACCES && deny_in_tls(c, &c->expect))
                return refuse_connect_inside(c, text);
        if (r == -EACCES)
                return refuse_http(c, text, "not-allowed", &c->t.verdict, NOT_ALLOWED);
        if (r < 0) {
                (void)pol_http_write_error(&c->client, 502, "the proxy could not resolve the host");
                return report(c, text, c->port, "upstream-unreachable", NULL, "cannot resolve %s: %s", text,
                              strerror(-r));
        }
        c->have_expect = c->judged = true;
        if (send(c->client.fd, ok, strlen(ok), MSG_NOSIGNAL) != (ssize_t)strlen(ok))
                return;
        c->deadline = core_monotonic_ms() + (uint64_t)c->env->io_timeout_ms;
        if (classify(c, &k) < 0)
                return;
        if (k == FIRST_TLS)
                return serve_tls(c);
        head inner = {};
        r = read_head(c, &inner);
        if (r == -EBADMSG || r == -E2BIG)
                bad_head(c, text, r);
        else if (r >= 0 && streq(inner.method, "CONNECT"))
                bad_request(c, text, "CONNECT inside CONNECT");
        else if (r >= 0)
                serve_request(c, &inner);
        head_done(&inner);
}

static void serve_http(conn *c) {
        head h = {};
        int r = read_head(c, &h);
        if (r == -EBADMSG || r == -E2BIG)
                bad_head(c, "", r);
        else if (r >= 0 && streq(h.method, "CONNECT") && !c->orig)
                serve_connect(c, &h);
        else if (r >= 0 && streq(h.method, "CONNECT"))
                bad_request(c, "", "CONNECT is for clients that address the proxy");
        else if (r >= 0)
                serve_request(c, &h);
        head_done(&h);
}

void pol_proxy_serve(const pol_proxy_env *env, int client_fd, const struct sockaddr_storage *orig) {
        conn c = { .env = env, .client = { .fd = client_fd }, .orig = orig,
                   .deadline = core_monotonic_ms() + (uint64_t)env->io_timeout_ms };
        first_bytes k = FIRST_HTTP;
        set_timeouts(client_fd, env->io_timeout_ms);
        set_nodelay(client_fd);
        /* Transparent: the port the client dialled is the upstream port. */
        if (orig)
                c.port = sockaddr_port(orig);
        live_register(&c);
        if (classify(&c, &k) >= 0) {
                if (k == FIRST_HTTP)
                        serve_http(&c);
                else if (orig)
                        serve_tls(&c);
                else {
                        pol_verdict v = host_verdict("TLS sent to the proxy without CONNECT");
                        refuse_tls(&c, "", "bad-request", &v, "TLS must go through CONNECT");
                }
        }
        live_unregister(&c);
        closep(&client_fd);
}
