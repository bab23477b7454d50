/* The DNS pins of a running session as sandboxd saw them (name, address,
 * expiry), so that a live policy update keeps what the new policy still
 * allows. The nftables update drops the session's pins (they were judged
 * under the old policy, and the kernel holds addresses, not names);
 * without this table, every established flow to a still-allowed
 * name would be cut when it meets the new rules, and the sandbox would
 * have to resolve every name again. Each (name, address) pair is judged
 * again with pol_check_resolved() under the new policy and pinned again
 * for the rest of its TTL in the batch that installs the new rules. */
#include <arpa/inet.h>
#include <string.h>
#include "libcore/log.h"
#include "libcore/util.h"
#include "policy/nftgen.h"
#include "sandboxd/internal.h"

/* As many as a session may hold pinned (POL_NFT_PIN_MAX, policy/nftgen.c). */
#define PINS_MAX 16384

struct session_pin {
        pol_addr addr; /* IPv4 (pins4) or IPv6 (pins6) */
        uint64_t expires_ms; /* CLOCK_MONOTONIC */
        char name[POL_NAME_MAX + 1];
};

void pins_free(session_pins *p) {
        free(p->v);
        *p = (session_pins) {};
}

/* Drops expired entries in place; returns how many are left. */
static size_t pins_compact(session_pins *p, uint64_t now) {
        size_t k = 0;
        for (size_t i = 0; i < p->n; i++)
                if (p->v[i].expires_ms > now)
                        p->v[k++] = p->v[i];
        p->n = k;
        return k;
}

void pins_record(session_pins *p, struct in_addr addr, const char *name, uint32_t ttl_s) {
        pol_addr a = { .family = AF_INET };
        memcpy(a.bytes, &addr, 4);
        pins_record_addr(p, &a, name, ttl_s);
}

void pins_record_addr(session_pins *p, const pol_addr *addr, const char *name, uint32_t ttl_s) {
        if (!name || strlen(name) > POL_NAME_MAX)
                return;
        uint64_t now = core_monotonic_ms();
        uint64_t expires = now + (uint64_t)(ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : ttl_s) * 1000;
        for (size_t i = 0; i < p->n; i++)
                if (p->v[i].addr.family == addr->family && memcmp(p->v[i].addr.bytes, addr->bytes, 16) == 0 &&
                    strcmp(p->v[i].name, name) == 0) {
                        if (expires > p->v[i].expires_ms)
                                p->v[i].expires_ms = expires;
                        return;
                }
        if (p->n == p->cap && pins_compact(p, now) == p->cap) {
                if (p->cap >= PINS_MAX) {
                        /* Full of live pins: forget the oldest. It stays
                         * pinned in nftables; only a later update would
                         * not carry it over (fail closed). */
                        memmove(p->v, p->v + 1, (p->n - 1) * sizeof(*p->v));
                        p->n--;
                } else {
                        size_t cap = p->cap ? p->cap * 2 : 64;
                        session_pin *v = reallocarray(p->v, cap, sizeof(*v));
                        if (!v)
                                return;
                        p->v = v;
                        p->cap = cap;
                }
        }
        session_pin *e = &p->v[p->n++];
        e->addr = *addr;
        e->expires_ms = expires;
        snprintf(e->name, sizeof(e->name), "%s", name);
}

int pins_keep_allowed(session_pins *p, const pol_policy *pol, const pol_cidr *never, size_t n_never,
                      pol_nft_carried_pin **ret, size_t *ret_n) {
        uint64_t now = core_monotonic_ms();
        pins_compact(p, now);
        _cleanup_free_ pol_nft_carried_pin *out = p->n ? calloc(p->n, sizeof(*out)) : NULL;
        size_t k = 0;
        if (p->n && !out)
                return -ENOMEM;
        for (size_t i = 0; i < p->n; i++) {
                session_pin *e = &p->v[i];
                pol_verdict v;
                if (!pol_check_resolved(pol, e->name, 0, &e->addr, 1, never, n_never, &v))
                        continue; /* the new policy does not allow it: forgotten */
                out[k] = (pol_nft_carried_pin) { e->addr, (uint32_t)((e->expires_ms - now + 999) / 1000) };
                p->v[k++] = *e;
        }
        p->n = k;
        *ret = TAKE_PTR(out);
        *ret_n = k;
        return 0;
}
