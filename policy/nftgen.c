/* Generates and installs the per-session nftables objects of a network
 * policy (see policy/nftgen.h for what each mode gets): address ranges from
 * subnets.allow/deny and the forbidden-range table, merged into disjoint
 * intervals; the session's forward chain and its gateway-services input
 * chain as data tables of rules; one libnftnl batch per change, sent
 * through libcore's batch (one sendmsg, every ACK read, errors mapped to
 * the message's label). */
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <net/if.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "libcore/log.h"
#include "libcore/net.h"
#include "libcore/util.h"
#include "policy/nftexpr.h"
#include "policy/nftgen.h"
#include "policy/proxy.h"

_Static_assert(POL_PROXY_PORT == CORE_NFT_PROXY_PORT, "the prerouting redirect and the proxy agree on the port");

#define NFT_TYPE_IPADDR 7 /* nftables src/datatype.h TYPE_IPADDR */
#define NFT_TYPE_IFNAME 41

DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_chain, nftnl_chain_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_rule, nftnl_rule_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set, nftnl_set_free);

/* ---- the session's objects as data ---- */

enum set_id { SET_ALLOW, SET_DENY, SET_FORBID, SET_DNS, SET_ALLOW6, SET_DENY6, SET_FORBID6, SET_DNS6, N_SETS };

#define NFT_TYPE_IP6ADDR 8 /* nftables src/datatype.h TYPE_IP6ADDR */

static const struct {
        const char *suffix;
        uint32_t flags;
        uint32_t key_len, key_type;
} session_sets[N_SETS] = {
        [SET_ALLOW] = { "allow4", NFT_SET_INTERVAL, 4, 7 },
        [SET_DENY] = { "deny4", NFT_SET_INTERVAL, 4, 7 },
        [SET_FORBID] = { "forbid4", NFT_SET_INTERVAL, 4, 7 },
        /* The DNS pins: the host table's shared sets (pins4, pins6, keyed
         * by interface and address), never one of the session's own. */
        [SET_DNS] = { "dns4", NFT_SET_TIMEOUT, 4, 7 },
        /* IPv6 (DESIGN §5: every rule holds for both families): the same
         * four sets with 16-byte keys. */
        [SET_ALLOW6] = { "allow6", NFT_SET_INTERVAL, 16, NFT_TYPE_IP6ADDR },
        [SET_DENY6] = { "deny6", NFT_SET_INTERVAL, 16, NFT_TYPE_IP6ADDR },
        [SET_FORBID6] = { "forbid6", NFT_SET_INTERVAL, 16, NFT_TYPE_IP6ADDR },
        [SET_DNS6] = { "dns6", NFT_SET_TIMEOUT, 16, NFT_TYPE_IP6ADDR },
};

enum srule_kind {
        SR_CT_EST, SR_DADDR_SET, SR_DPORT, SR_GW_DPORT, SR_GW6_DPORT, SR_ALL, SR_CT_MARK, SR_CT_DNAT, SR_CT_RELATED
};

typedef struct session_rule {
        enum srule_kind kind;
        enum set_id set;  /* SR_DADDR_SET */
        uint8_t l4proto;  /* SR_DPORT, SR_GW_DPORT */
        uint16_t port;    /* SR_DPORT, SR_GW_DPORT */
        bool accept;      /* else goto deny */
        const char *text; /* names the rule in errors, as nft prints it */
} session_rule;

/* The session chain s_<if>: the generation check (rule_ct_mark below), then
 * one rule per step of the packet decision table (pol_packet_steps(),
 * policy/match.c), in its order, so that what nftables enforces and what
 * pol_check_packet() says (denial events, policy.check) cannot differ.
 * Order is precedence (DESIGN §5.1 rules 4-5, §5.2): deny beats every
 * allow; the forbidden ranges beat subnets.allow except where a CIDR names
 * them (already cut out of forbid4); the port steps as the table orders
 * them around subnets.allow. */
static const session_rule rule_deny4 = { SR_DADDR_SET, SET_DENY, 0, 0, false, "ip daddr @deny4 goto deny" };
static const session_rule rule_forbid4 = { SR_DADDR_SET, SET_FORBID, 0, 0, false, "ip daddr @forbid4 goto deny" };
static const session_rule rule_allow4 = { SR_DADDR_SET, SET_ALLOW, 0, 0, true, "ip daddr @allow4 accept" };
static const session_rule rule_dns4 = { SR_DADDR_SET, SET_DNS, 0, 0, true, "iifname . ip daddr @pins4 accept" };
static const session_rule rule_deny6 = { SR_DADDR_SET, SET_DENY6, 0, 0, false, "ip6 daddr @deny6 goto deny" };
static const session_rule rule_forbid6 = { SR_DADDR_SET, SET_FORBID6, 0, 0, false, "ip6 daddr @forbid6 goto deny" };
static const session_rule rule_allow6 = { SR_DADDR_SET, SET_ALLOW6, 0, 0, true, "ip6 daddr @allow6 accept" };
static const session_rule rule_dns6 = { SR_DADDR_SET, SET_DNS6, 0, 0, true, "iifname . ip6 daddr @pins6 accept" };
static const session_rule rule_rest = { SR_ALL, 0, 0, 0, false, "goto deny" };

/* Flow generations (the session's ct mark, DESIGN §5.1 rule 9). Every
 * flow a session chain admits carries the chain's mark, a number drawn
 * fresh for each change (take_mark), and the chain's first rule passes
 * exactly the flows of this generation; a flow admitted under an earlier
 * policy (or under allow-all, which marks nothing) meets the policy rules
 * again on its next packet, in either direction, and is cut at once if
 * they deny it, kept and re-marked if they allow it. So an update is one
 * batch proportional to the one session, with no walk of the conntrack
 * table. Before the policy steps, what a custom policy never forwards
 * whatever its addresses: a flow that allow-all's DNS forwarding
 * translated (ct status dnat: its lookups belong to the DNS filter now)
 * and TCP to ports 80 and 443, which the prerouting chain sends to the
 * egress proxy from the first packet on (so only a flow older than the
 * policy is forwarded there). */
static const session_rule rule_ct_mark = { SR_CT_MARK, 0, 0, 0, true, "ct mark <generation> accept" };
static const session_rule rule_ct_dnat = { SR_CT_DNAT, 0, 0, 0, false, "ct status dnat goto deny" };
/* r_<if> only: a related packet (an ICMP error) of a flow of an older
 * generation is dropped, never judged: its source may be any router on the
 * way, and accepting it would mark the whole flow as judged by an address
 * that is not the flow's. The flow's own next packet is judged and, if
 * allowed, marks it; its errors pass from then on. */
static const session_rule rule_related = { SR_CT_RELATED, 0, 0, 0, false, "ct state related drop" };
static const session_rule rule_http = { SR_DPORT, 0, IPPROTO_TCP, 80, false, "tcp dport 80 goto deny" };
static const session_rule rule_https = { SR_DPORT, 0, IPPROTO_TCP, 443, false, "tcp dport 443 goto deny" };

/* The input chain i_<if> of a custom session, reached by `jump` from the
 * host input chain's `sessions_input` lookup, which comes after `ct state
 * established,related accept` and before input's final rejects. It accepts
 * only the gateway services, and only at the session's own gateway address
 * (SR_GW_DPORT matches `ip daddr <gateway>` first): never the host's other
 * addresses (DESIGN §5.1 rule 5), another session's gateway, a broadcast or
 * IPv6. The last rule denies the rest itself rather than returning, so the
 * chain's meaning does not depend on what follows the lookup. The proxy
 * port takes both the connections the prerouting chain redirected there
 * (TCP 80/443, rewritten to this gateway) and the clients that address it
 * as HTTP(S)_PROXY. */
static const session_rule gateway_rules[] = {
        { SR_GW_DPORT, 0, IPPROTO_UDP, 53, true, "udp dport 53 accept" },
        { SR_GW_DPORT, 0, IPPROTO_TCP, 53, true, "tcp dport 53 accept" },
        { SR_GW_DPORT, 0, IPPROTO_TCP, POL_PROXY_PORT, true, "tcp dport 3128 accept" },
        /* IPv6: the proxy only (the prerouting chain redirects the
         * session's IPv6 TCP 80/443 to its gateway's IPv6 address);
         * resolv.conf names the IPv4 gateway, so DNS stays IPv4. Only when
         * the veth has an IPv6 gateway address (gw6_rule). */
        { SR_GW6_DPORT, 0, IPPROTO_TCP, POL_PROXY_PORT, true, "tcp dport 3128 accept" },
        { SR_ALL, 0, 0, 0, false, "goto deny" },
};

typedef struct names {
        char ifname[IFNAMSIZ];
        char chain[IFNAMSIZ + 2];  /* s_<if>: forward */
        char ichain[IFNAMSIZ + 2]; /* i_<if>: input, gateway services */
        char nchain[IFNAMSIZ + 2]; /* n_<if>: prerouting, DNS forwarding of allow-all */
        char rchain[IFNAMSIZ + 2]; /* r_<if>: forward, the reply direction of a flow of an older generation */
        char chain_b[IFNAMSIZ + 4];  /* s_<if>_b: s_<if>'s rules of slot b */
        char rchain_b[IFNAMSIZ + 4]; /* r_<if>_b: r_<if>'s rules of slot b */
        uint32_t mark;             /* the generation (ct mark) of this change's s_<if> and r_<if> */
        char set[N_SETS][IFNAMSIZ + 16];
        int slot;              /* where the interval sets of this change are: use_slot() */
        bool has_gw6;          /* the veth's host side has a global IPv6 address */
        struct in6_addr gw6;   /* that address: the session's IPv6 gateway */
} names;

/* The IPv6 pool (pol_nft_set_ipv6_pool); prefix6 0: none. */
static core_net_pool ipv6_pool;

void pol_nft_set_ipv6_pool(const core_net_pool *pool) {
        ipv6_pool = *pool;
}

/* The IPv6 gateway of session interface "sbx<slot>": the host side of the
 * slot's /127 (core_net_host_addr6(), the address core_veth_create()
 * gives it). Computed, not looked up, so a change costs the same whatever
 * the number of sessions. None without an IPv6 pool: the gateway chain
 * then admits no IPv6 at all. */
static void find_gw6(names *n) {
        unsigned long slot = strtoul(n->ifname + 3, NULL, 10);
        n->has_gw6 = ipv6_pool.prefix6 != 0 && slot < core_net_pool_slots(&ipv6_pool);
        if (n->has_gw6)
                n->gw6 = core_net_host_addr6(&ipv6_pool, (unsigned) slot);
}

/* Session interfaces are "sbx<n>": the host-wide rules that make the host,
 * other sandboxes and link-local unreachable match exactly that prefix, so
 * a policy is never attached to an interface they do not cover. */
static int make_names(const char *ifname, names *n, sb_error **err) {
        size_t len = ifname ? strlen(ifname) : 0;
        if (len <= 3 || len >= IFNAMSIZ || strncmp(ifname, "sbx", 3) != 0 ||
            strspn(ifname + 3, "0123456789") != len - 3)
                return sb_error_set(err, -EINVAL, NULL, NULL, "nftables: '%s' is not a session interface (sbx<n>)",
                                    ifname ? ifname : "");
        memset(n, 0, sizeof(*n));
        memcpy(n->ifname, ifname, len);
        snprintf(n->chain, sizeof(n->chain), "s_%s", ifname);
        snprintf(n->ichain, sizeof(n->ichain), "i_%s", ifname);
        snprintf(n->nchain, sizeof(n->nchain), "n_%s", ifname);
        snprintf(n->rchain, sizeof(n->rchain), "r_%s", ifname);
        snprintf(n->chain_b, sizeof(n->chain_b), "s_%s_b", ifname);
        snprintf(n->rchain_b, sizeof(n->rchain_b), "r_%s_b", ifname);
        for (int i = 0; i < N_SETS; i++)
                snprintf(n->set[i], sizeof(n->set[i]), "s_%s_%s", ifname, session_sets[i].suffix);
        snprintf(n->set[SET_DNS], sizeof(n->set[SET_DNS]), "%s", CORE_NFT_PINS4_SET);
        snprintf(n->set[SET_DNS6], sizeof(n->set[SET_DNS6]), "%s", CORE_NFT_PINS6_SET);
        return 0;
}

/* The interval sets (allow, deny, forbid) come in two slots, 0 "s_<if>_allow4"
 * and 1 "s_<if>_allow4_b": a change fills the slot the session's chains do
 * not use in a batch of its own, before the batch that points the new
 * chains at it (see stage_interval_sets). Name of set `id` in `slot`. */
static bool set_is_interval(enum set_id id) {
        return session_sets[id].flags & NFT_SET_INTERVAL;
}

static bool set_is_shared(enum set_id id) {
        return id == SET_DNS || id == SET_DNS6;
}

static void slot_set_name(const names *n, enum set_id id, int slot, char *buf, size_t size) {
        snprintf(buf, size, "s_%s_%s%s", n->ifname, session_sets[id].suffix, slot ? "_b" : "");
}

static void use_slot(names *n, int slot) {
        for (int i = 0; i < N_SETS; i++)
                if (set_is_interval(i)) {
                        /* Through a buffer of its own: the name is made from
                         * n->ifname, in the same object (snprintf's
                         * restrict). */
                        char name[sizeof(n->set[i])];
                        slot_set_name(n, i, slot, name, sizeof(name));
                        memcpy(n->set[i], name, sizeof(name));
                }
        n->slot = slot;
}

/* ---- address ranges ---- */

typedef struct range {
        uint32_t lo, hi; /* host order, inclusive */
} range;

typedef struct ranges {
        range *v;
        size_t n, cap;
} ranges;

static void ranges_done(ranges *r) {
        free(r->v);
}

static int ranges_add(ranges *r, uint32_t lo, uint32_t hi) {
        if (r->n == r->cap) {
                size_t cap = r->cap ? r->cap * 2 : 16;
                range *v = reallocarray(r->v, cap, sizeof(*v));
                if (!v)
                        return -ENOMEM;
                r->v = v;
                r->cap = cap;
        }
        r->v[r->n++] = (range) { lo, hi };
        return 0;
}

static int cmp_range(const void *a, const void *b) {
        const range *x = a, *y = b;
        return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges overlapping and adjacent ranges into disjoint ones, as
 * nft's automerge does: an interval set holds each address once, and two
 * ranges that touch would otherwise share a boundary element (EEXIST). */
static void ranges_merge(ranges *r) {
        size_t out = 0;
        if (r->n == 0)
                return; /* v may be NULL */
        qsort(r->v, r->n, sizeof(range), cmp_range);
        for (size_t i = 0; i < r->n; i++) {
                if (out > 0 && (r->v[out - 1].hi == UINT32_MAX || r->v[i].lo <= r->v[out - 1].hi + 1)) {
                        if (r->v[i].hi > r->v[out - 1].hi)
                                r->v[out - 1].hi = r->v[i].hi;
                        continue;
                }
                r->v[out++] = r->v[i];
        }
        r->n = out;
}

static range cidr_range(const pol_cidr *c) {
        uint32_t a, mask = c->prefix ? ~0u << (32 - c->prefix) : 0;
        memcpy(&a, c->addr.bytes, 4);
        a = ntohl(a) & mask;
        return (range) { a, a | ~mask };
}

static int ranges_from_cidrs(ranges *r, const pol_cidr *c, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (c[i].addr.family != AF_INET)
                        continue; /* IPv6: see nftgen.h */
                range x = cidr_range(&c[i]);
                if (ranges_add(r, x.lo, x.hi) < 0)
                        return -ENOMEM;
        }
        ranges_merge(r);
        return 0;
}

static int cmp_u64(const void *a, const void *b) {
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
        return x < y ? -1 : x > y;
}

/* The IPv4 addresses the forbidden-range table and match.c's built-in
 * never list keep unreachable under p
 * (rule 5 as pol_check_address applies it, subnets.deny aside since deny4
 * comes first). The verdict is constant between consecutive boundaries of
 * the table's rows and of the allow CIDRs, so one check per such piece,
 * with match.c itself deciding, gives the exact set. */
static int forbidden_ranges(const pol_policy *p, ranges *out) {
        size_t n_rows, n = 0;
        const pol_range *rows = pol_forbidden_ranges(&n_rows);
        _cleanup_free_ uint64_t *b = calloc(2 * (n_rows + p->n_subnet_allow) + 1, sizeof(uint64_t));
        pol_policy q = *p;
        if (!b)
                return -ENOMEM;
        b[n++] = 0;
        for (size_t i = 0; i < n_rows; i++) {
                pol_cidr c;
                char *why = NULL;
                if (pol_cidr_parse(rows[i].cidr, &c, &why) < 0 || c.addr.family != AF_INET) {
                        free(why);
                        continue;
                }
                range x = cidr_range(&c);
                b[n++] = x.lo, b[n++] = (uint64_t) x.hi + 1;
        }
        for (size_t i = 0; i < p->n_subnet_allow; i++)
                if (p->subnet_allow[i].addr.family == AF_INET) {
                        range x = cidr_range(&p->subnet_allow[i]);
                        b[n++] = x.lo, b[n++] = (uint64_t) x.hi + 1;
                }
        qsort(b, n, sizeof(uint64_t), cmp_u64);
        q.subnet_deny = NULL;
        q.n_subnet_deny = 0;
        for (size_t i = 0; i < n && b[i] <= UINT32_MAX; i++) {
                if (i + 1 < n && b[i + 1] == b[i])
                        continue; /* duplicate boundary: the last copy starts the piece */
                uint64_t end = i + 1 < n ? b[i + 1] - 1 : UINT32_MAX;
                pol_addr a = { .family = AF_INET };
                uint32_t be = htonl((uint32_t) b[i]);
                pol_verdict v;
                memcpy(a.bytes, &be, 4);
                /* NEVER: the built-in host rows (0.0.0.0/8, 127.0.0.0/8),
                 * which no subnets.allow opens, match.c's verdict too. */
                if (!pol_check_address(&q, &a, NULL, 0, &v) &&
                    (v.layer == POL_LAYER_FORBIDDEN || v.layer == POL_LAYER_NEVER) &&
                    ranges_add(out, (uint32_t) b[i], (uint32_t) end) < 0)
                        return -ENOMEM;
        }
        ranges_merge(out);
        return 0;
}

/* ---- IPv6 address ranges (the same, on 128-bit integers) ---- */

typedef unsigned __int128 u128;
#define U128_MAX (~(u128) 0)

typedef struct range6 {
        u128 lo, hi; /* inclusive */
} range6;

typedef struct ranges6 {
        range6 *v;
        size_t n, cap;
} ranges6;

static void ranges6_done(ranges6 *r) {
        free(r->v);
}

static u128 u128_from(const uint8_t *b) {
        u128 v = 0;
        for (int i = 0; i < 16; i++)
                v = v << 8 | b[i];
        return v;
}

static void u128_to(u128 v, uint8_t *b) {
        for (int i = 15; i >= 0; i--, v >>= 8)
                b[i] = (uint8_t) v;
}

static int ranges6_add(ranges6 *r, u128 lo, u128 hi) {
        if (r->n == r->cap) {
                size_t cap = r->cap ? r->cap * 2 : 16;
                range6 *v = reallocarray(r->v, cap, sizeof(*v));
                if (!v)
                        return -ENOMEM;
                r->v = v;
                r->cap = cap;
        }
        r->v[r->n++] = (range6) { lo, hi };
        return 0;
}

static int cmp_range6(const void *a, const void *b) {
        const range6 *x = a, *y = b;
        return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void ranges6_merge(ranges6 *r) {
        size_t out = 0;
        if (r->n == 0)
                return;
        qsort(r->v, r->n, sizeof(range6), cmp_range6);
        for (size_t i = 0; i < r->n; i++) {
                if (out > 0 && (r->v[out - 1].hi == U128_MAX || r->v[i].lo <= r->v[out - 1].hi + 1)) {
                        if (r->v[i].hi > r->v[out - 1].hi)
                                r->v[out - 1].hi = r->v[i].hi;
                        continue;
                }
                r->v[out++] = r->v[i];
        }
        r->n = out;
}

static range6 cidr_range6(const pol_cidr *c) {
        u128 mask = c->prefix ? U128_MAX << (128 - c->prefix) : 0, a = u128_from(c->addr.bytes) & mask;
        return (range6) { a, a | ~mask };
}

static int ranges6_from_cidrs(ranges6 *r, const pol_cidr *c, size_t n) {
        for (size_t i = 0; i < n; i++) {
                if (c[i].addr.family != AF_INET6)
                        continue;
                range6 x = cidr_range6(&c[i]);
                if (ranges6_add(r, x.lo, x.hi) < 0)
                        return -ENOMEM;
        }
        ranges6_merge(r);
        return 0;
}

static int cmp_u128(const void *a, const void *b) {
        u128 x = *(const u128 *) a, y = *(const u128 *) b;
        return x < y ? -1 : x > y;
}

/* The IPv6 prefixes that carry an IPv4 address (pol_addr_embedded_v4:
 * IPv4-mapped, NAT64 64:ff9b::/96, IPv4-compatible ::/96, 6to4
 * 2002::/16), as the base of the form and the shift of the IPv4 address
 * inside it. */
static const struct {
        u128 base;
        unsigned shift;
} v4_forms[] = {
        { (u128) 0xffff << 32, 0 },
        { (u128) 0x0064ff9b << 96, 0 },
        { 0, 0 },
        { (u128) 0x2002 << 112, 80 },
};

/* Boundaries (range starts and one-past-ends) of the IPv4 range x in every
 * IPv6 form that embeds it. */
static size_t v4_form_bounds(range x, u128 *b) {
        size_t n = 0;
        for (size_t f = 0; f < ELEMENTSOF(v4_forms); f++) {
                u128 lo = v4_forms[f].base | (u128) x.lo << v4_forms[f].shift;
                u128 hi = v4_forms[f].base | (u128) x.hi << v4_forms[f].shift |
                          (((u128) 1 << v4_forms[f].shift) - 1);
                b[n++] = lo;
                b[n++] = hi + 1;
        }
        return n;
}

/* forbidden_ranges() for IPv6: the IPv6 addresses match.c keeps
 * unreachable under p, its IPv6 rows and every IPv6 form of its IPv4 rows
 * (unwrapped and judged as IPv4, pol_addr_embedded_v4). The verdict is
 * constant between consecutive boundaries of: the IPv6 rows, the IPv6
 * forms of the IPv4 rows, the embedding prefixes themselves (and ::/127,
 * which the IPv4-compatible form excludes), and the allow CIDRs (IPv6, and
 * the IPv6 forms of IPv4 ones, which open the rows they name); one check
 * per piece gives the exact set. */
static int forbidden_ranges6(const pol_policy *p, ranges6 *out) {
        size_t n_rows, n = 0;
        const pol_range *rows = pol_forbidden_ranges(&n_rows);
        _cleanup_free_ u128 *b = calloc(8 * (n_rows + p->n_subnet_allow) + 32, sizeof(u128));
        pol_policy q = *p;
        if (!b)
                return -ENOMEM;
        b[n++] = 0;
        b[n++] = 2; /* ::/127: not IPv4-compatible */
        n += v4_form_bounds((range) { 0, UINT32_MAX }, b + n); /* the embedding prefixes */
        for (size_t i = 0; i < n_rows + p->n_subnet_allow; i++) {
                pol_cidr c;
                if (i < n_rows) {
                        char *why = NULL;
                        if (pol_cidr_parse(rows[i].cidr, &c, &why) < 0) {
                                free(why);
                                continue;
                        }
                } else
                        c = p->subnet_allow[i - n_rows];
                if (c.addr.family == AF_INET)
                        n += v4_form_bounds(cidr_range(&c), b + n);
                else {
                        range6 x = cidr_range6(&c);
                        b[n++] = x.lo;
                        b[n++] = x.hi + 1; /* wraps to 0 at the top: a duplicate of b[0] */
                }
        }
        qsort(b, n, sizeof(u128), cmp_u128);
        q.subnet_deny = NULL;
        q.n_subnet_deny = 0;
        for (size_t i = 0; i < n; i++) {
                if (i + 1 < n && b[i + 1] == b[i])
                        continue;
                u128 end = i + 1 < n ? b[i + 1] - 1 : U128_MAX;
                pol_addr a = { .family = AF_INET6 };
                pol_verdict v;
                u128_to(b[i], a.bytes);
                if (!pol_check_address(&q, &a, NULL, 0, &v) &&
                    (v.layer == POL_LAYER_FORBIDDEN || v.layer == POL_LAYER_NEVER) && ranges6_add(out, b[i], end) < 0)
                        return -ENOMEM;
        }
        ranges6_merge(out);
        return 0;
}

static void range6_text(range6 x, char *buf, size_t size) {
        char lo[INET6_ADDRSTRLEN], hi[INET6_ADDRSTRLEN];
        uint8_t a[16], c[16];
        u128_to(x.lo, a);
        u128_to(x.hi, c);
        inet_ntop(AF_INET6, a, lo, sizeof(lo));
        inet_ntop(AF_INET6, c, hi, sizeof(hi));
        snprintf(buf, size, "%s-%s", lo, hi);
}

/* "10.0.0.0/8" when the range is one CIDR, else "10.0.0.0-10.0.1.255". */
static void range_text(range x, char *buf, size_t size) {
        char lo[INET_ADDRSTRLEN], hi[INET_ADDRSTRLEN];
        struct in_addr a = { htonl(x.lo) }, b = { htonl(x.hi) };
        uint32_t span = x.hi - x.lo;
        inet_ntop(AF_INET, &a, lo, sizeof(lo));
        inet_ntop(AF_INET, &b, hi, sizeof(hi));
        if ((span & (span + 1)) == 0 && (x.lo & span) == 0)
                snprintf(buf, size, "%s/%d", lo, span == UINT32_MAX ? 0 : 32 - __builtin_popcount(span));
        else
                snprintf(buf, size, "%s-%s", lo, hi);
}

/* ---- expressions (each returns 0 or -ENOMEM) ---- */

/* ct state established,related. */
static int add_ct_est_rel(struct nftnl_rule *r) {
        return pol_nftx_ct_bits(r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED));
}

/* meta nfproto ipv4 ip daddr @set (ipv6 ip6 daddr @set for a 16-byte
 * set): the nfproto check is the dependency nft adds itself so the payload
 * offset means an IPv4 (IPv6) header. `src`: the source address instead
 * (the reply direction's remote end). */
static int add_addr_lookup(struct nftnl_rule *r, const char *set, bool v6, bool src) {
        uint8_t fam = v6 ? NFPROTO_IPV6 : NFPROTO_IPV4;
        struct nftnl_expr *e;
        int k;
        if ((k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_NFPROTO, NFTNL_EXPR_META_DREG)) < 0 ||
            (k = pol_nftx_cmp(r, &fam, 1)) < 0 ||
            (k = pol_nftx_payload(r, NFT_PAYLOAD_NETWORK_HEADER, v6 ? (src ? 8 : 24) : (src ? 12 : 16), v6 ? 16 : 4)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("lookup"))) {
                nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
        }
        return pol_nftx_expr(r, e);
}

/* Loads the session's interface into register `reg` (NFT_REG_1 or
 * NFT_REG_2, 16 bytes each): the input interface (iifname) for the
 * sandbox's own packets, the output one (oifname) for the reply direction,
 * which the host table reaches through `sessions_reply` by oifname. */
static int load_if(struct nftnl_rule *r, bool reply, uint32_t reg) {
        struct nftnl_expr *e = nftnl_expr_alloc("meta");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, reply ? NFT_META_OIFNAME : NFT_META_IIFNAME);
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, reg);
        }
        return pol_nftx_expr(r, e);
}

/* A lookup of the key from register sreg on in `set`; dreg >= 0: a map
 * whose value goes there; inv: matches when the key is absent. */
static int add_lookup(struct nftnl_rule *r, const char *set, uint32_t sreg, int dreg, bool inv) {
        struct nftnl_expr *e = nftnl_expr_alloc("lookup");
        if (e) {
                nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, sreg);
                if (dreg >= 0)
                        nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, (uint32_t) dreg);
                if (inv)
                        nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
        }
        return pol_nftx_expr(r, e);
}

/* iifname . ct mark @gens (oifname for the reply direction): the flow
 * carries the session's current generation (the ct mark, in host order
 * as nft loads it). */
static int add_gen_check(struct nftnl_rule *r, bool reply) {
        struct nftnl_expr *e;
        int k;
        if ((k = load_if(r, reply, NFT_REG_1)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("ct"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_MARK);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_2);
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        return add_lookup(r, CORE_NFT_GENS_SET, NFT_REG_1, -1, false);
}

/* ct mark set iifname map @genmark (genmark_b in the chains of slot b;
 * oifname for the reply direction): the flow now belongs to the
 * generation of the slot that judged it. A change writes the new
 * generation into the map of the slot it moves to and leaves the other's:
 * a packet that met the old slot's chain while the change was committed
 * gets the old generation, and is judged again on its next packet. */
static int add_gen_set(struct nftnl_rule *r, bool reply, int slot) {
        struct nftnl_expr *e;
        int k;
        if ((k = load_if(r, reply, NFT_REG_1)) < 0 ||
            (k = add_lookup(r, slot ? CORE_NFT_GENMARK_B_MAP : CORE_NFT_GENMARK_MAP, NFT_REG_1, NFT_REG_1, false)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("ct"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_MARK);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_SREG, NFT_REG_1);
        }
        return pol_nftx_expr(r, e);
}

/* iifname @slot_b (oifname for the reply direction): the session's chains
 * of slot b are in force. */
static int add_slot_guard(struct nftnl_rule *r, bool reply) {
        int k = load_if(r, reply, NFT_REG_1);
        return k < 0 ? k : add_lookup(r, CORE_NFT_SLOT_B_SET, NFT_REG_1, -1, false);
}

/* meta nfproto ipv4 iifname . ip daddr @pins4 (ipv6 ... ip6 daddr @pins6;
 * for the reply direction oifname and the source address). */
static int add_pin_lookup(struct nftnl_rule *r, const char *set, bool v6, bool reply) {
        uint8_t fam = v6 ? NFPROTO_IPV6 : NFPROTO_IPV4;
        struct nftnl_expr *e;
        int k;
        if ((k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_NFPROTO, NFTNL_EXPR_META_DREG)) < 0 ||
            (k = pol_nftx_cmp(r, &fam, 1)) < 0 || (k = load_if(r, reply, NFT_REG_1)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("payload"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, v6 ? (reply ? 8 : 24) : (reply ? 12 : 16));
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, v6 ? 16 : 4);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_2);
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        return add_lookup(r, set, NFT_REG_1, -1, false);
}

/* meta nfproto ipv4 ip daddr <addr>: as nft emits it. */
static int add_daddr(struct nftnl_rule *r, struct in_addr addr) {
        uint8_t v4 = NFPROTO_IPV4;
        int k;
        if ((k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_NFPROTO, NFTNL_EXPR_META_DREG)) < 0 ||
            (k = pol_nftx_cmp(r, &v4, 1)) < 0 || (k = pol_nftx_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 16, 4)) < 0)
                return k;
        return pol_nftx_cmp(r, &addr.s_addr, 4);
}

/* meta l4proto proto th dport port (th sport for `src`). */
static int add_port(struct nftnl_rule *r, uint8_t proto, uint16_t port, bool src) {
        uint16_t be = htons(port);
        int k;
        if ((k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_L4PROTO, NFTNL_EXPR_META_DREG)) < 0 ||
            (k = pol_nftx_cmp(r, &proto, 1)) < 0 || (k = pol_nftx_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, src ? 0 : 2, 2)) < 0)
                return k;
        return pol_nftx_cmp(r, &be, 2);
}

static int add_dport(struct nftnl_rule *r, uint8_t proto, uint16_t port) {
        return add_port(r, proto, port, false);
}

/* accept, or goto deny; `drop` instead of the deny chain for the reply
 * direction, whose packets come from outside: nothing is answered or
 * reported to them (the sandbox's own next packet of the flow meets the
 * deny chain and its reset). */
static int add_verdict_or_drop(struct nftnl_rule *r, bool accept, bool drop) {
        return pol_nftx_verdict(r, accept ? NF_ACCEPT : drop ? NF_DROP : NFT_GOTO,
                                accept || drop ? NULL : CORE_NFT_DENY_CHAIN);
}


/* One rule of the session chain (add_session_rules) or gateway_rules, appended to `chain`. */
static int build_rule(const session_rule *sr, const char *chain, const names *n, struct in_addr gateway,
                      struct nftnl_rule **ret) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
        /* The session's own chains carry its generation; the reply chain
         * judges the remote end, which is the source there. */
        bool reply = streq(chain, n->rchain) || streq(chain, n->rchain_b);
        bool marked = reply || streq(chain, n->chain) || streq(chain, n->chain_b);
        /* The chains of slot b look up the "_b" sets and mark from genmark_b. */
        int slot = streq(chain, n->chain_b) || streq(chain, n->rchain_b);
        int k = 0;
        if (!r)
                return -ENOMEM;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, CORE_NFT_TABLE) < 0 ||
            nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) < 0)
                return -ENOMEM;
        switch (sr->kind) {
        case SR_CT_EST: k = add_ct_est_rel(r); break;
        case SR_CT_MARK: k = add_gen_check(r, reply); break;
        case SR_CT_DNAT: k = pol_nftx_ct_bits(r, NFT_CT_STATUS, IPS_DST_NAT); break;
        case SR_CT_RELATED: k = pol_nftx_ct_bits(r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_RELATED)); break;
        case SR_DADDR_SET: {
                bool v6 = session_sets[sr->set].key_len == 16;
                char name[sizeof(n->set[0])];
                if (set_is_shared(sr->set)) {
                        k = add_pin_lookup(r, n->set[sr->set], v6, reply);
                        break;
                }
                slot_set_name(n, sr->set, slot, name, sizeof(name));
                k = add_addr_lookup(r, name, v6, reply);
                break;
        }
        case SR_DPORT: k = add_port(r, sr->l4proto, sr->port, reply); break;
        case SR_GW_DPORT:
                if ((k = add_daddr(r, gateway)) >= 0)
                        k = add_dport(r, sr->l4proto, sr->port);
                break;
        case SR_GW6_DPORT: {
                uint8_t v6 = NFPROTO_IPV6;
                if ((k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_NFPROTO, NFTNL_EXPR_META_DREG)) < 0 ||
                    (k = pol_nftx_cmp(r, &v6, 1)) < 0 || (k = pol_nftx_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 24, 16)) < 0 ||
                    (k = pol_nftx_cmp(r, n->gw6.s6_addr, 16)) < 0)
                        break;
                k = add_dport(r, sr->l4proto, sr->port);
                break;
        }
        case SR_ALL: break;
        }
        /* An accepting rule of the session's chains (but the generation
         * check itself) marks the flow with the generation. */
        if (k >= 0 && marked && sr->accept && sr->kind != SR_CT_MARK)
                k = add_gen_set(r, reply, slot);
        if (k < 0 || (k = add_verdict_or_drop(r, sr->accept, reply)) < 0)
                return k;
        *ret = TAKE_PTR(r);
        return 0;
}

/* ---- messages ---- */

static int msg_chain(core_nft_batch *bt, uint16_t type, uint16_t flags, const char *chain) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = nftnl_chain_alloc();
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "chain %s", chain);
        if (!c || !buf)
                return -ENOMEM;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
        if (nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, CORE_NFT_TABLE) < 0 ||
            nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, chain) < 0)
                return -ENOMEM;
        nftnl_chain_nlmsg_build_payload(nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, flags | NLM_F_ACK, seq), c);
        return core_nft_batch_commit(bt);
}

static struct nftnl_set *new_set(const char *name) {
        struct nftnl_set *s = nftnl_set_alloc();
        if (!s)
                return NULL;
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        if (nftnl_set_set_str(s, NFTNL_SET_TABLE, CORE_NFT_TABLE) < 0 || nftnl_set_set_str(s, NFTNL_SET_NAME, name) < 0) {
                nftnl_set_free(s);
                return NULL;
        }
        return s;
}

/* Set `id` of the session under `name` (its name in one slot). */
static int msg_set_named(core_nft_batch *bt, uint16_t type, uint16_t flags, const char *name, enum set_id id) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(name);
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s", name);
        if (!s || !buf)
                return -ENOMEM;
        if (type == NFT_MSG_NEWSET) {
                nftnl_set_set_u32(s, NFTNL_SET_ID, seq);
                nftnl_set_set_u32(s, NFTNL_SET_FLAGS, session_sets[id].flags);
                nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, session_sets[id].key_type);
                nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, session_sets[id].key_len);
                /* Bounded: a sandbox that floods its DNS filter with fresh
                 * answers fills its own pin set, then gets SERVFAIL, never
                 * an unbounded kernel allocation. */
                if (id == SET_DNS || id == SET_DNS6)
                        nftnl_set_set_u32(s, NFTNL_SET_DESC_SIZE, POL_NFT_PIN_MAX);
        }
        nftnl_set_nlmsg_build_payload(nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, flags | NLM_F_ACK, seq), s);
        return core_nft_batch_commit(bt);
}

static int msg_set(core_nft_batch *bt, uint16_t type, uint16_t flags, const names *n, enum set_id id) {
        return msg_set_named(bt, type, flags, n->set[id], id);
}

/* Deletes set `name` whether it exists or not (added without EXCL first). */
static int msg_set_drop(core_nft_batch *bt, const char *name, enum set_id id) {
        int k;
        if ((k = msg_set_named(bt, NFT_MSG_NEWSET, NLM_F_CREATE, name, id)) < 0)
                return k;
        return msg_set_named(bt, NFT_MSG_DELSET, 0, name, id);
}

/* Adds a built set with its elements as one NEWSETELEM message. */
static int msg_elems(core_nft_batch *bt, uint16_t type, struct nftnl_set *s, uint32_t seq, void *buf) {
        nftnl_set_elems_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, (type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0) | NLM_F_ACK, seq), s);
        return core_nft_batch_commit(bt);
}

/* One interval: its start element and, unless it runs to 255.255.255.255,
 * the end element one past it (NFT_SET_ELEM_INTERVAL_END), nft's own
 * encoding. One message per interval so an error names it. */
static int msg_range(core_nft_batch *bt, const char *set, range x) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(set);
        char text[40];
        uint32_t seq, lo = htonl(x.lo), end = htonl(x.hi + 1);
        range_text(x, text, sizeof(text));
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s", set, text);
        if (!s || !buf || pol_nftx_key_elem(s, &lo, 4, 0, 0) < 0 ||
            (x.hi != UINT32_MAX && pol_nftx_key_elem(s, &end, 4, NFT_SET_ELEM_INTERVAL_END, 0) < 0))
                return -ENOMEM;
        return msg_elems(bt, NFT_MSG_NEWSETELEM, s, seq, buf);
}

/* msg_range() for an IPv6 interval. */
static int msg_range6(core_nft_batch *bt, const char *set, range6 x) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(set);
        char text[2 * INET6_ADDRSTRLEN + 2];
        uint8_t lo[16], end[16];
        uint32_t seq;
        u128_to(x.lo, lo);
        u128_to(x.hi + 1, end);
        range6_text(x, text, sizeof(text));
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s", set, text);
        if (!s || !buf || pol_nftx_key_elem(s, lo, 16, 0, 0) < 0 ||
            (x.hi != U128_MAX && pol_nftx_key_elem(s, end, 16, NFT_SET_ELEM_INTERVAL_END, 0) < 0))
                return -ENOMEM;
        return msg_elems(bt, NFT_MSG_NEWSETELEM, s, seq, buf);
}

static int add_ranges6(core_nft_batch *bt, const char *set, const ranges6 *r) {
        for (size_t i = 0; i < r->n; i++) {
                int k = msg_range6(bt, set, r->v[i]);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* A map element's verdict: NF_ACCEPT, or NFT_GOTO / NFT_JUMP to chain. */
typedef struct elem_verdict {
        int code;
        const char *chain;
} elem_verdict;

/* The session's element of `map` (sessions or sessions_input): add with
 * verdict v, or delete (v NULL). */
static int msg_map_elem(core_nft_batch *bt, const char *map, const names *n, const elem_verdict *v) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(map);
        struct nftnl_set_elem *e = nftnl_set_elem_alloc();
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "map %s element %s", map, n->ifname);
        if (!s || !e || !buf) {
                nftnl_set_elem_free(e);
                return -ENOMEM;
        }
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, n->ifname, IFNAMSIZ);
        if (v) {
                nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, (uint32_t) v->code);
                if (v->chain)
                        nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, v->chain);
        }
        nftnl_set_elem_add(s, e);
        return msg_elems(bt, v ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, s, seq, buf);
}

/* The session's element of the `proxied` interface set: add, or delete. */
static int msg_proxied_elem(core_nft_batch *bt, const names *n, bool add) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(CORE_NFT_PROXIED_SET);
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s", CORE_NFT_PROXIED_SET, n->ifname);
        if (!s || !buf || pol_nftx_key_elem(s, n->ifname, IFNAMSIZ, 0, 0) < 0)
                return -ENOMEM;
        return msg_elems(bt, add ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, s, seq, buf);
}

/* An element of one of the host table's shared keyed sets (libcore/net.h
 * CORE_NFT_PINS4_SET...): the key is the session's interface name
 * (IFNAMSIZ bytes, zero-padded) followed by tail_len bytes of `tail`;
 * `data`: a map element's 4-byte value (genmark); timeout_ms 0: none.
 * `type` NFT_MSG_NEWSETELEM or NFT_MSG_DELSETELEM; `what` names it in
 * errors. */
static int msg_keyed_elem(core_nft_batch *bt, uint16_t type, const char *set, const names *n, const void *tail,
                          size_t tail_len, const uint32_t *data, uint64_t timeout_ms, const char *what) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(set);
        struct nftnl_set_elem *e = nftnl_set_elem_alloc();
        uint8_t key[IFNAMSIZ + 16] = {};
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s%s%s", set, n->ifname, what ? " . " : "",
                                           what ? what : "");
        if (!s || !e || !buf || tail_len > 16) {
                nftnl_set_elem_free(e);
                return -ENOMEM;
        }
        memcpy(key, n->ifname, strlen(n->ifname));
        if (tail_len)
                memcpy(key + IFNAMSIZ, tail, tail_len);
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, IFNAMSIZ + tail_len);
        if (data && type == NFT_MSG_NEWSETELEM)
                nftnl_set_elem_set(e, NFTNL_SET_ELEM_DATA, data, sizeof(*data));
        if (timeout_ms && type == NFT_MSG_NEWSETELEM)
                nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout_ms);
        nftnl_set_elem_add(s, e);
        return msg_elems(bt, type, s, seq, buf);
}

/* The session's current generation, `"<if>" . mark` in gens (type
 * NEWSETELEM: add; DELSETELEM: delete). */
static int msg_gens(core_nft_batch *bt, uint16_t type, const names *n, uint32_t mark) {
        char text[16];
        int k;
        snprintf(text, sizeof(text), "0x%08x", mark);
        /* A delete adds first (no EXCL): whatever gens held, the batch
         * does not fail on it. */
        if ((type == NFT_MSG_DELSETELEM &&
             (k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, CORE_NFT_GENS_SET, n, &mark, sizeof(mark), NULL, 0, text)) < 0) ||
            (k = msg_keyed_elem(bt, type, CORE_NFT_GENS_SET, n, &mark, sizeof(mark), NULL, 0, text)) < 0)
                return k;
        return 0;
}

/* The generation the chains of `slot` mark flows with, `"<if>" : mark` in
 * genmark (slot 0) or genmark_b (slot 1); a delete needs no mark. */
static int msg_genmark(core_nft_batch *bt, uint16_t type, const names *n, uint32_t mark, int slot) {
        return msg_keyed_elem(bt, type, slot ? CORE_NFT_GENMARK_B_MAP : CORE_NFT_GENMARK_MAP, n, NULL, 0, &mark, 0,
                              NULL);
}

/* Empties set `name` (a DELSETELEM without elements: nft's `flush set`). */
static int msg_set_flush(core_nft_batch *bt, const char *name) {
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "flush set %s", name);
        if (!buf)
                return -ENOMEM;
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_DELSETELEM, NFPROTO_INET, NLM_F_ACK, seq);
        mnl_attr_put_strz(nlh, NFTA_SET_ELEM_LIST_TABLE, CORE_NFT_TABLE);
        mnl_attr_put_strz(nlh, NFTA_SET_ELEM_LIST_SET, name);
        return core_nft_batch_commit(bt);
}

/* ---- the DNS pins of each session, as this process added them ----
 *
 * The pins of every custom session share the host table's sets pins4 and
 * pins6 (one timeout set each, one garbage collector, found by name with a
 * walk of the table's first few sets whatever the number of sessions), so
 * a change of policy deletes the session's pins one by one rather than
 * with a set of its own: they were judged under the old policy (fail
 * closed). This table holds what was added and is still live; it is
 * complete, since every pin goes through pol_nft_pin*() or a carried-over
 * change, and a daemon that starts again starts with an empty host table
 * (core_net_host_setup). It also bounds each session to POL_NFT_PIN_MAX
 * live pins, as a set of its own did: a sandbox that floods its DNS filter
 * with fresh answers gets SERVFAIL, and never fills the others' room.
 * `pin_lock` also orders a pin against a change of the same session. */

typedef struct pin_rec {
        pol_addr addr;
        uint64_t expires_ms; /* CLOCK_MONOTONIC */
} pin_rec;

typedef struct if_pins {
        char ifname[IFNAMSIZ];
        bool custom; /* the session's custom chains are in place */
        pin_rec *v;
        size_t n, cap;
} if_pins;

static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static if_pins *pin_tab; /* one per session interface this process changed */
static size_t pin_tab_n;

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* The session's entry (created when `create`); NULL if none, or out of
 * memory. Under pin_lock. */
static if_pins *pins_of(const char *ifname, bool create) {
        for (size_t i = 0; i < pin_tab_n; i++)
                if (streq(pin_tab[i].ifname, ifname))
                        return &pin_tab[i];
        if (!create)
                return NULL;
        if_pins *t = reallocarray(pin_tab, pin_tab_n + 1, sizeof(*t));
        if (!t)
                return NULL;
        pin_tab = t;
        t[pin_tab_n] = (if_pins) {};
        snprintf(t[pin_tab_n].ifname, sizeof(t[pin_tab_n].ifname), "%s", ifname);
        return &t[pin_tab_n++];
}

/* Drops the entries whose timeout has passed (the kernel no longer
 * matches them either). */
static void pins_compact(if_pins *p, uint64_t now) {
        size_t k = 0;
        for (size_t i = 0; i < p->n; i++)
                if (p->v[i].expires_ms > now)
                        p->v[k++] = p->v[i];
        p->n = k;
}

static pin_rec *pins_find(if_pins *p, const pol_addr *a) {
        size_t len = a->family == AF_INET6 ? 16 : 4;
        for (size_t i = 0; i < p->n; i++)
                if (p->v[i].addr.family == a->family && memcmp(p->v[i].addr.bytes, a->bytes, len) == 0)
                        return &p->v[i];
        return NULL;
}

void pol_nft_host_reset(void) {
        pthread_mutex_lock(&pin_lock);
        for (size_t i = 0; i < pin_tab_n; i++)
                free(pin_tab[i].v);
        free(pin_tab);
        pin_tab = NULL;
        pin_tab_n = 0;
        pthread_mutex_unlock(&pin_lock);
}

/* Records pin a for ttl_ms: refreshes an existing entry, else adds one.
 * -ENOSPC when the session already holds POL_NFT_PIN_MAX live pins;
 * -ENOMEM. */
static int pins_add(if_pins *p, const pol_addr *a, uint64_t ttl_ms) {
        uint64_t now = now_ms();
        pin_rec *r = pins_find(p, a);
        if (r) {
                if (now + ttl_ms > r->expires_ms)
                        r->expires_ms = now + ttl_ms;
                return 0;
        }
        if (p->n == p->cap) {
                pins_compact(p, now);
                if (p->n >= POL_NFT_PIN_MAX)
                        return -ENOSPC;
        }
        if (p->n == p->cap) {
                size_t cap = p->cap ? p->cap * 2 : 16;
                pin_rec *v = reallocarray(p->v, cap, sizeof(*v));
                if (!v)
                        return -ENOMEM;
                p->v = v;
                p->cap = cap;
        }
        p->v[p->n++] = (pin_rec) { *a, now + ttl_ms };
        return 0;
}

/* Deletes the session's live pins from pins4/pins6 in batch bt, but those
 * in `keep` (n_keep; carried over, added again by the caller). Each is
 * added first (no EXCL, a short timeout) and then deleted, so one that
 * expired meanwhile is no error; the batch is one transaction either way. */
static int msg_pins_drop(core_nft_batch *bt, const names *n, if_pins *p, const pol_nft_carried_pin *keep,
                         size_t n_keep) {
        uint64_t now = now_ms();
        if (!p)
                return 0;
        for (size_t i = 0; i < p->n; i++) {
                const pin_rec *r = &p->v[i];
                bool v6 = r->addr.family == AF_INET6, kept = false;
                char text[INET6_ADDRSTRLEN];
                int k;
                if (r->expires_ms <= now)
                        continue;
                for (size_t j = 0; j < n_keep && !kept; j++)
                        kept = keep[j].addr.family == r->addr.family &&
                               memcmp(keep[j].addr.bytes, r->addr.bytes, v6 ? 16 : 4) == 0;
                if (kept)
                        continue;
                inet_ntop(r->addr.family, r->addr.bytes, text, sizeof(text));
                const char *set = v6 ? CORE_NFT_PINS6_SET : CORE_NFT_PINS4_SET;
                if ((k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, set, n, r->addr.bytes, v6 ? 16 : 4, NULL, 1000, text)) < 0 ||
                    (k = msg_keyed_elem(bt, NFT_MSG_DELSETELEM, set, n, r->addr.bytes, v6 ? 16 : 4, NULL, 0, text)) < 0)
                        return k;
        }
        return 0;
}

static int msg_rule(core_nft_batch *bt, const session_rule *sr, const char *chain, const names *n,
                    struct in_addr gateway) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = NULL;
        char gw[INET6_ADDRSTRLEN + 16] = "";
        uint32_t seq;
        int k = build_rule(sr, chain, n, gateway, &r);
        if (k < 0)
                return k;
        if (sr->kind == SR_GW_DPORT) {
                char a[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &gateway, a, sizeof(a));
                snprintf(gw, sizeof(gw), "ip daddr %s ", a);
        } else if (sr->kind == SR_GW6_DPORT) {
                char a[INET6_ADDRSTRLEN];
                inet_ntop(AF_INET6, &n->gw6, a, sizeof(a));
                snprintf(gw, sizeof(gw), "ip6 daddr %s ", a);
        }
        void *buf = core_nft_batch_reserve(bt, &seq, "rule '%s: %s%s'", chain, gw, sr->text);
        if (!buf)
                return -ENOMEM;
        nftnl_rule_nlmsg_build_payload(nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_INET,
                                                             NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq), r);
        return core_nft_batch_commit(bt);
}

/* 1 when `map` (or the plain set `proxied`) holds an element for the
 * interface, 0 when not. A delete
 * of a missing element would fail the whole batch, and its verdict may
 * differ from any we would add first (accept, goto deny, goto s_<if>), so
 * it is looked up; only the daemon changes session elements, one change at
 * a time. */
/* The reply to a GETSETELEM of one element: its value (a map's data, 4
 * bytes) into *data. */
static int elem_data_cb(const struct nlmsghdr *nlh, void *data) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nftnl_set_alloc();
        struct nftnl_set_elems_iter *it;
        if (!s || nftnl_set_elems_nlmsg_parse(nlh, s) < 0 || !(it = nftnl_set_elems_iter_create(s)))
                return MNL_CB_ERROR;
        struct nftnl_set_elem *e = nftnl_set_elems_iter_next(it);
        uint32_t len = 0;
        const void *d = e ? nftnl_set_elem_get(e, NFTNL_SET_ELEM_DATA, &len) : NULL;
        if (d && len == sizeof(uint32_t))
                memcpy(data, d, sizeof(uint32_t));
        nftnl_set_elems_iter_destroy(it);
        return MNL_CB_OK;
}

static int map_elem_query(const char *map, const names *n, uint32_t *data, sb_error **err);

static int map_elem_exists(const char *map, const names *n, sb_error **err) {
        return map_elem_query(map, n, NULL, err);
}

/* map_elem_exists() that also reads a map element's 4-byte value into
 * *data (data NULL: no value read). */
static int map_elem_query(const char *map, const names *n, uint32_t *data, sb_error **err) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(map);
        struct mnl_socket *nl = NULL;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        int r;
        if (!s || pol_nftx_key_elem(s, n->ifname, IFNAMSIZ, 0, 0) < 0)
                return -ENOMEM;
        /* A kept socket (core_nft_socket_take: closing one waits for the
         * last commit's release); a sequence number of its own per query. */
        if ((r = core_nft_socket_take(&nl, err)) < 0)
                return r;
        static uint32_t query_seq;
        uint32_t seq = __atomic_add_fetch(&query_seq, 1, __ATOMIC_RELAXED);
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSETELEM, NFPROTO_INET, NLM_F_ACK, seq);
        nftnl_set_elems_nlmsg_build_payload(nlh, s);
        if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
                r = sb_error_set(err, negative_errno(), NULL, NULL, "nftables: query map element: %m");
                core_nft_socket_give(nl, false);
                return r;
        }
        do {
                ssize_t len = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                if (len < 0) {
                        r = sb_error_set(err, negative_errno(), NULL, NULL, "nftables: query map element: %m");
                        core_nft_socket_give(nl, false);
                        return r;
                }
                r = mnl_cb_run(buf, (size_t) len, seq, mnl_socket_get_portid(nl), data ? elem_data_cb : NULL, data);
        } while (r > MNL_CB_STOP);
        int e = errno;
        /* Answered in full: the ACK (or the error, which replaces it) ends
         * the reply; a sequence mismatch (EPROTO) leaves the socket unknown. */
        core_nft_socket_give(nl, r >= 0 || e == ENOENT);
        if (r < 0 && e == ENOENT)
                return 0;
        if (r < 0)
                return sb_error_set(err, -e, NULL, NULL, "nftables: map %s element %s: %s", map, n->ifname,
                                    strerror(e));
        return 1;
}

/* ---- changes ---- */

static int take_mark(uint32_t *ret);

/* What the session has now, as change() found it. */
typedef struct current {
        bool elem, input_elem, proxied, nat_elem, reply_elem;
        bool custom;        /* its genmark element: custom chains in place */
        uint32_t mark_a;    /* that element's value, slot a's generation */
        bool has_b;         /* its genmark_b element */
        uint32_t mark_b;    /* that element's value */
        int slot;           /* custom: the slot of address-range sets in use */
} current;

/* Deletes whatever the session has: the map elements (if any) first, since
 * they reference the chains; then the chains with their rules, which
 * reference the sets; then the sets (the address-range sets of both
 * slots, unless keep_ranges: a custom policy's new chains use them), its
 * generation and slot elements and its DNS pins. Chains and sets are
 * added without EXCL right before their delete, so a missing one is not
 * an error and the batch needs no knowledge of what an earlier change
 * left. */
static int purge(core_nft_batch *bt, const names *n, const current *cur, bool keep_ranges, if_pins *pins) {
        int k;
        if (cur->reply_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_REPLY_MAP, n, NULL)) < 0)
                return k;
        if (cur->proxied && (k = msg_proxied_elem(bt, n, false)) < 0)
                return k;
        if (cur->nat_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_NAT_MAP, n, NULL)) < 0)
                return k;
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->nchain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->nchain)) < 0)
                return k;
        if (cur->elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, NULL)) < 0)
                return k;
        if (cur->input_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_INPUT_MAP, n, NULL)) < 0)
                return k;
        /* s_ and r_ before their slot-b chains, which their gotos use. */
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->chain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->chain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->chain_b)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->chain_b)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->ichain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->ichain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->rchain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->rchain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->rchain_b)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->rchain_b)) < 0)
                return k;
        for (int i = 0; !keep_ranges && i < N_SETS; i++)
                for (int slot = 0; set_is_interval(i) && slot < 2; slot++) {
                        char name[sizeof(n->set[i])];
                        slot_set_name(n, i, slot, name, sizeof(name));
                        if ((k = msg_set_drop(bt, name, i)) < 0)
                                return k;
                }
        if (cur->custom && ((k = msg_gens(bt, NFT_MSG_DELSETELEM, n, cur->slot ? cur->mark_b : cur->mark_a)) < 0 ||
                            (k = msg_genmark(bt, NFT_MSG_DELSETELEM, n, 0, 0)) < 0))
                return k;
        if (cur->has_b && (k = msg_genmark(bt, NFT_MSG_DELSETELEM, n, 0, 1)) < 0)
                return k;
        if ((k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, CORE_NFT_SLOT_B_SET, n, NULL, 0, NULL, 0, NULL)) < 0 ||
            (k = msg_keyed_elem(bt, NFT_MSG_DELSETELEM, CORE_NFT_SLOT_B_SET, n, NULL, 0, NULL, 0, NULL)) < 0)
                return k;
        return msg_pins_drop(bt, n, pins, NULL, 0);
}

static int add_ranges(core_nft_batch *bt, const char *set, const ranges *r) {
        for (size_t i = 0; i < r->n; i++) {
                int k = msg_range(bt, set, r->v[i]);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* The input chain i_<if> with its rules, then the `sessions_input`
 * element that jumps to it (a jump, as host_maps in libcore/nft.c
 * requires: input's rejects still follow if the chain ever returns). */
static int add_gateway_services(core_nft_batch *bt, const names *n, struct in_addr gateway) {
        const elem_verdict jump = { NFT_JUMP, n->ichain };
        int k;
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->ichain)) < 0)
                return k;
        for (size_t i = 0; i < ELEMENTSOF(gateway_rules); i++)
                if ((gateway_rules[i].kind != SR_GW6_DPORT || n->has_gw6) &&
                    (k = msg_rule(bt, &gateway_rules[i], n->ichain, n, gateway)) < 0)
                        return k;
        return msg_map_elem(bt, CORE_NFT_SESSIONS_INPUT_MAP, n, &jump);
}

/* The rules of s_<if> (chain n->chain) or of r_<if> (n->rchain, the same
 * judged on the remote end as the source, denials dropped) from the packet
 * decision table (see the comment above rule_deny4), after the generation check and what a
 * custom policy never forwards (see rule_ct_mark). */
/* `iifname @slot_b goto <chain_b>` (oifname for the reply direction),
 * appended to `chain`: the slot is decided once per packet, so a packet
 * is judged by one slot's sets and marked from that slot's genmark map
 * whenever a change commits. */
static int msg_slot_goto(core_nft_batch *bt, const names *n, const char *chain, const char *chain_b) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
        bool reply = streq(chain, n->rchain);
        uint32_t seq;
        int k;
        if (!r)
                return -ENOMEM;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, CORE_NFT_TABLE) < 0 ||
            nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) < 0)
                return -ENOMEM;
        if ((k = add_slot_guard(r, reply)) < 0 || (k = pol_nftx_verdict(r, NFT_GOTO, chain_b)) < 0)
                return k;
        void *buf = core_nft_batch_reserve(bt, &seq, "rule '%s: %s @slot_b goto %s'", chain,
                                           reply ? "oifname" : "iifname", chain_b);
        if (!buf)
                return -ENOMEM;
        nftnl_rule_nlmsg_build_payload(nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_INET,
                                                             NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq), r);
        return core_nft_batch_commit(bt);
}

static int add_steps(core_nft_batch *bt, const names *n, const char *chain, struct in_addr gateway);

/* s_<if> (chain n->chain, with n->chain_b) or r_<if> (n->rchain, with
 * n->rchain_b): the generation check and what a custom policy never
 * forwards, the slot's goto, then the decision table's steps on slot a's
 * sets; the slot-b chain holds the same steps on the "_b" sets. */
static int add_session_rules(core_nft_batch *bt, const names *n, const char *chain, const char *chain_b,
                             struct in_addr gateway) {
        int k;
        if ((k = msg_rule(bt, &rule_ct_mark, chain, n, gateway)) < 0 ||
            (streq(chain, n->rchain) && (k = msg_rule(bt, &rule_related, chain, n, gateway)) < 0) ||
            (k = msg_rule(bt, &rule_ct_dnat, chain, n, gateway)) < 0 ||
            (k = msg_rule(bt, &rule_http, chain, n, gateway)) < 0 ||
            (k = msg_rule(bt, &rule_https, chain, n, gateway)) < 0 ||
            (k = msg_slot_goto(bt, n, chain, chain_b)) < 0 || (k = add_steps(bt, n, chain, gateway)) < 0)
                return k;
        return add_steps(bt, n, chain_b, gateway);
}

/* The packet decision table's steps (see the comment above rule_deny4),
 * appended to `chain`. */
static int add_steps(core_nft_batch *bt, const names *n, const char *chain, struct in_addr gateway) {
        size_t n_steps;
        const pol_packet_step *steps = pol_packet_steps(&n_steps);
        int k = 0;
        for (size_t i = 0; k >= 0 && i < n_steps; i++) {
                char text[48];
                session_rule port = { SR_DPORT, 0, steps[i].l4proto, steps[i].port, false, text };
                switch (steps[i].kind) {
                case POL_STEP_ADDRESS_DENY:
                        if ((k = msg_rule(bt, &rule_deny4, chain, n, gateway)) >= 0 &&
                            (k = msg_rule(bt, &rule_forbid4, chain, n, gateway)) >= 0 &&
                            (k = msg_rule(bt, &rule_deny6, chain, n, gateway)) >= 0)
                                k = msg_rule(bt, &rule_forbid6, chain, n, gateway);
                        break;
                case POL_STEP_PORT:
                        snprintf(text, sizeof(text), "%s dport %u goto deny",
                                 steps[i].l4proto == IPPROTO_TCP ? "tcp" : "udp", steps[i].port);
                        k = msg_rule(bt, &port, chain, n, gateway);
                        break;
                case POL_STEP_SUBNET_ALLOW:
                        if ((k = msg_rule(bt, &rule_allow4, chain, n, gateway)) >= 0)
                                k = msg_rule(bt, &rule_allow6, chain, n, gateway);
                        break;
                case POL_STEP_DNS_PIN:
                        if ((k = msg_rule(bt, &rule_dns4, chain, n, gateway)) >= 0)
                                k = msg_rule(bt, &rule_dns6, chain, n, gateway);
                        break;
                case POL_STEP_DEFAULT:
                        k = msg_rule(bt, &rule_rest, chain, n, gateway);
                        break;
                }
        }
        return k;
}

/* The carried-over DNS pins (pol_nft_session_apply_pins) into the shared
 * pin sets under the session's interface, in the same batch as the new
 * generation: a flow to a pinned address that the new policy still
 * allows is re-judged against them on its next packet, so it must never
 * see the sets without them. */
static int add_pins(core_nft_batch *bt, const names *n, const pol_nft_carried_pin *pins, size_t n_pins) {
        for (size_t i = 0; i < n_pins; i++) {
                bool v6 = pins[i].addr.family == AF_INET6;
                char text[INET6_ADDRSTRLEN];
                uint32_t ttl = pins[i].ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : pins[i].ttl_s;
                if (pins[i].addr.family != AF_INET && !v6)
                        continue;
                inet_ntop(pins[i].addr.family, pins[i].addr.bytes, text, sizeof(text));
                int k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, n->set[v6 ? SET_DNS6 : SET_DNS], n, pins[i].addr.bytes,
                                       v6 ? 16 : 4, NULL, (uint64_t) ttl * 1000, text);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* Records the carried pins as the session's only ones, once the batch
 * that put them in is committed. Under pin_lock. */
static void pins_replace(if_pins *p, const pol_nft_carried_pin *pins, size_t n_pins) {
        p->n = 0;
        for (size_t i = 0; i < n_pins; i++) {
                uint32_t ttl = pins[i].ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : pins[i].ttl_s;
                if (pins[i].addr.family == AF_INET || pins[i].addr.family == AF_INET6)
                        (void) pins_add(p, &pins[i].addr, (uint64_t) ttl * 1000); /* at most as many as before */
        }
}

/* Rule 9 (DESIGN §5.1): no window where neither policy applies. The
 * kernel makes the elements of an interval set that a transaction fills
 * visible to lookups only as that transaction ends, after the rules and
 * elements added by it already apply: a packet meeting the new policy in
 * between would miss `@allow4` and be denied although both policies allow
 * it, or, worse, be judged by ranges of the old one under the new
 * generation. So the address-range sets of a custom policy are filled
 * here, in a batch of their own, committed before the batch that points
 * the session at them. Each session has two slots of them ("s_<if>_allow4"
 * and "s_<if>_allow4_b"), both looked up by its chains, each rule behind
 * the guard of its slot (add_slot_guard): the slot the session does not
 * use (1 - cur->slot) is flushed and filled, an element-only batch, and
 * the change's second batch moves the session's slot_b element. `create`
 * (the session has no custom chains yet): both slots are made first, the
 * one to fill and an empty one, replacing whatever an earlier change left.
 * Fills `slot`; 0, or a negative errno with *ret_err filled. */
static int stage_interval_sets(names *n, const pol_policy *p, int slot, bool create, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        ranges allow = {}, deny = {}, forbid = {};
        ranges6 allow6 = {}, deny6 = {}, forbid6 = {};
        int k;
        if ((k = ranges_from_cidrs(&allow, p->subnet_allow, p->n_subnet_allow)) < 0 ||
            (k = ranges_from_cidrs(&deny, p->subnet_deny, p->n_subnet_deny)) < 0 ||
            (k = forbidden_ranges(p, &forbid)) < 0 ||
            (k = ranges6_from_cidrs(&allow6, p->subnet_allow, p->n_subnet_allow)) < 0 ||
            (k = ranges6_from_cidrs(&deny6, p->subnet_deny, p->n_subnet_deny)) < 0 ||
            (k = forbidden_ranges6(p, &forbid6)) < 0 || (k = core_nft_batch_new(&bt)) < 0)
                goto fail;
        for (int s2 = 0; create && k >= 0 && s2 < 2; s2++) {
                use_slot(n, s2);
                for (int i = 0; k >= 0 && i < N_SETS; i++)
                        if (set_is_interval(i) && (k = msg_set_drop(bt, n->set[i], i)) >= 0)
                                k = msg_set(bt, NFT_MSG_NEWSET, NLM_F_CREATE | NLM_F_EXCL, n, i);
        }
        use_slot(n, slot);
        for (int i = 0; !create && k >= 0 && i < N_SETS; i++)
                if (set_is_interval(i))
                        k = msg_set_flush(bt, n->set[i]);
        if (k < 0 || (k = add_ranges(bt, n->set[SET_ALLOW], &allow)) < 0 ||
            (k = add_ranges(bt, n->set[SET_DENY], &deny)) < 0 || (k = add_ranges(bt, n->set[SET_FORBID], &forbid)) < 0 ||
            (k = add_ranges6(bt, n->set[SET_ALLOW6], &allow6)) < 0 ||
            (k = add_ranges6(bt, n->set[SET_DENY6], &deny6)) < 0 ||
            (k = add_ranges6(bt, n->set[SET_FORBID6], &forbid6)) < 0)
                goto fail;
        k = core_nft_batch_send(bt, ret_err);
        goto out;
fail:
        k = sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname, strerror(-k));
out:
        ranges_done(&allow);
        ranges_done(&deny);
        ranges_done(&forbid);
        ranges6_done(&allow6);
        ranges6_done(&deny6);
        ranges6_done(&forbid6);
        return k;
}

/* The rest of a custom policy, after stage_interval_sets(): its chains
 * (looking up the staged sets), the DNS pin sets and the map elements. */
static int add_custom(core_nft_batch *bt, const names *n, struct in_addr gateway, const pol_nft_carried_pin *pins,
                      size_t n_pins) {
        const elem_verdict go = { NFT_GOTO, n->chain }, go_reply = { NFT_GOTO, n->rchain };
        int k;
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->chain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->chain_b)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->rchain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->rchain_b)) < 0 ||
            (k = msg_gens(bt, NFT_MSG_NEWSETELEM, n, n->mark)) < 0 ||
            (k = msg_genmark(bt, NFT_MSG_NEWSETELEM, n, n->mark, 0)) < 0)
                return k;
        if ((k = add_pins(bt, n, pins, n_pins)) < 0 ||
            (k = add_session_rules(bt, n, n->chain, n->chain_b, gateway)) < 0 ||
            (k = add_session_rules(bt, n, n->rchain, n->rchain_b, gateway)) < 0)
                return k;
        if ((k = msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, &go)) < 0 ||
            (k = msg_map_elem(bt, CORE_NFT_SESSIONS_REPLY_MAP, n, &go_reply)) < 0 ||
            (k = add_gateway_services(bt, n, gateway)) < 0)
                return k;
        /* Last: the redirect starts once the gateway admits the proxy port
         * (within one batch this only orders the messages; the commit makes
         * all of it visible at once). */
        return msg_proxied_elem(bt, n, true);
}

/* ---- DNS of allow-all sessions ----
 *
 * A session's resolv.conf names its gateway in every mode, so a live
 * change of mode never has to rewrite a file inside the sandbox. Under a
 * custom policy the DNS filter answers there; under allow-all the
 * gateway's port 53 is translated to the host's resolver, in chain n_<if>:
 *     ip daddr <gateway> udp dport 53 dnat ip to <upstream>
 *     ip daddr <gateway> tcp dport 53 dnat ip to <upstream>
 * and the element `"<if>" : jump n_<if>` of `sessions_nat`. The translated
 * packet is then forwarded (and masqueraded) as the session's own, so the
 * host-wide rules still apply to it. */

static uint32_t dns_upstream_be; /* network order; 0: none */

void pol_nft_set_dns_upstream(struct in_addr upstream) {
        __atomic_store_n(&dns_upstream_be, upstream.s_addr, __ATOMIC_RELEASE);
}

static struct in_addr dns_upstream_get(void) {
        return (struct in_addr) { __atomic_load_n(&dns_upstream_be, __ATOMIC_ACQUIRE) };
}

static int msg_dnat_rule(core_nft_batch *bt, const names *n, struct in_addr gateway, uint8_t proto,
                         struct in_addr upstream) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
        char gw[INET_ADDRSTRLEN], up[INET_ADDRSTRLEN];
        struct nftnl_expr *e;
        uint32_t seq;
        int k;
        if (!r)
                return -ENOMEM;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, CORE_NFT_TABLE) < 0 ||
            nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, n->nchain) < 0)
                return -ENOMEM;
        if ((k = add_daddr(r, gateway)) < 0 || (k = add_dport(r, proto, 53)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("immediate"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
                nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &upstream.s_addr, 4);
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("nat"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_TYPE, NFT_NAT_DNAT);
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FAMILY, NFPROTO_IPV4);
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_ADDR_MIN, NFT_REG_1);
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        inet_ntop(AF_INET, &gateway, gw, sizeof(gw));
        inet_ntop(AF_INET, &upstream, up, sizeof(up));
        void *buf = core_nft_batch_reserve(bt, &seq, "rule '%s: ip daddr %s %s dport 53 dnat ip to %s'", n->nchain,
                                           gw, proto == IPPROTO_TCP ? "tcp" : "udp", up);
        if (!buf)
                return -ENOMEM;
        nftnl_rule_nlmsg_build_payload(nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_INET,
                                                             NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq), r);
        return core_nft_batch_commit(bt);
}

/* Chain n_<if> with its two rules, then its `sessions_nat` element; nothing
 * without an upstream (the gateway's port 53 then meets the input chain's
 * rejects: lookups fail at once). */
static int add_dns_forward(core_nft_batch *bt, const names *n, struct in_addr gateway) {
        const elem_verdict jump = { NFT_JUMP, n->nchain };
        struct in_addr upstream = dns_upstream_get();
        int k;
        if (!upstream.s_addr)
                return 0;
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->nchain)) < 0 ||
            (k = msg_dnat_rule(bt, n, gateway, IPPROTO_UDP, upstream)) < 0 ||
            (k = msg_dnat_rule(bt, n, gateway, IPPROTO_TCP, upstream)) < 0)
                return k;
        return msg_map_elem(bt, CORE_NFT_SESSIONS_NAT_MAP, n, &jump);
}

/* What a mode adds after the purge; p NULL: nothing (remove). The reply
 * direction (`sessions_reply`): allow-all accepts it whatever the flow's
 * generation, deny-all has no element, so the host forward chain drops it. */
static int add_mode(core_nft_batch *bt, const names *n, const pol_policy *p, struct in_addr gateway,
                    const pol_nft_carried_pin *pins, size_t n_pins) {
        static const elem_verdict accept = { NF_ACCEPT, NULL }, deny = { NFT_GOTO, CORE_NFT_DENY_CHAIN };
        int k;
        if (!p)
                return 0;
        switch (p->mode) {
        case POL_MODE_ALLOW_ALL:
                if ((k = msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, &accept)) < 0 ||
                    (k = msg_map_elem(bt, CORE_NFT_SESSIONS_REPLY_MAP, n, &accept)) < 0)
                        return k;
                return add_dns_forward(bt, n, gateway);
        case POL_MODE_DENY_ALL: return msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, &deny);
        case POL_MODE_CUSTOM: return add_custom(bt, n, gateway, pins, n_pins);
        }
        return -EINVAL;
}

/* A custom policy replacing a custom policy: the session's chains, map
 * elements and gateway services stay as they are (they depend on the
 * interface alone), and the change is element-only batches into sets the
 * change never re-creates: the unused slot's address-range sets
 * (stage_interval_sets), then one batch that moves the session to that
 * slot (slot_b), to the new generation (gens, and the slot's genmark map:
 * every flow of an older one is judged again on its next packet) and
 * drops the old policy's DNS pins but the carried ones, and empties the
 * slot left behind. No rule, chain or verdict-map
 * element is added, so the kernel neither validates the table's chains
 * again nor looks a set up by name among the other sessions' but the
 * session's own six (issue #23). */
static int change_custom(names *n, const current *cur, const pol_policy *p, const pol_nft_carried_pin *pins,
                         size_t n_pins, if_pins *rec, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        int slot = 1 - cur->slot, k;
        bool had = slot ? cur->has_b : true; /* the new slot's genmark element */
        names old = *n;
        if ((k = stage_interval_sets(n, p, slot, false, ret_err)) < 0)
                return k;
        use_slot(&old, cur->slot);
        if ((k = core_nft_batch_new(&bt)) < 0 ||
            (k = msg_keyed_elem(bt, slot ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, CORE_NFT_SLOT_B_SET, n, NULL, 0,
                                NULL, 0, NULL)) < 0 ||
            (k = msg_gens(bt, NFT_MSG_DELSETELEM, n, cur->slot ? cur->mark_b : cur->mark_a)) < 0 ||
            (k = msg_gens(bt, NFT_MSG_NEWSETELEM, n, n->mark)) < 0 ||
            (had && (k = msg_genmark(bt, NFT_MSG_DELSETELEM, n, 0, slot)) < 0) ||
            (k = msg_genmark(bt, NFT_MSG_NEWSETELEM, n, n->mark, slot)) < 0 ||
            (k = msg_pins_drop(bt, n, rec, pins, n_pins)) < 0 || (k = add_pins(bt, n, pins, n_pins)) < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname,
                                    strerror(-k));
        /* The slot left behind is emptied in the same batch, so nothing of
         * the replaced policy stays loaded and the change costs two
         * commits. A packet the old slot's chain was judging as this
         * commits sees those sets emptied at some point: it can then be
         * accepted only by a pin, which the new policy allows (the carried
         * ones, judged again), and is marked with the old slot's
         * generation, so its flow is judged again on its next packet. */
        for (int i = 0; k >= 0 && i < N_SETS; i++)
                if (set_is_interval(i))
                        k = msg_set_flush(bt, old.set[i]);
        if (k < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname,
                                    strerror(-k));
        return core_nft_batch_send(bt, ret_err);
}

static int change_locked(names *n, const pol_policy *p, struct in_addr gateway, const pol_nft_carried_pin *pins,
                         size_t n_pins, if_pins *rec, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        bool custom = p && p->mode == POL_MODE_CUSTOM;
        current cur = {};
        int k;
        if (custom && (k = take_mark(&n->mark)) < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: no flow generation (ct mark) for %s: %s",
                                    n->ifname, strerror(-k));
        if ((k = map_elem_query(CORE_NFT_GENMARK_MAP, n, &cur.mark_a, ret_err)) < 0)
                return k;
        cur.custom = k;
        if (cur.custom && (k = map_elem_query(CORE_NFT_GENMARK_B_MAP, n, &cur.mark_b, ret_err)) < 0)
                return k;
        cur.has_b = cur.custom && k;
        if (cur.custom && (k = map_elem_exists(CORE_NFT_SLOT_B_SET, n, ret_err)) < 0)
                return k;
        cur.slot = cur.custom && k;
        if (custom && cur.custom) {
                return change_custom(n, &cur, p, pins, n_pins, rec, ret_err);
        }
        if ((k = map_elem_exists(CORE_NFT_SESSIONS_MAP, n, ret_err)) < 0)
                return k;
        cur.elem = k;
        if ((k = map_elem_exists(CORE_NFT_SESSIONS_INPUT_MAP, n, ret_err)) < 0)
                return k;
        cur.input_elem = k;
        if ((k = map_elem_exists(CORE_NFT_PROXIED_SET, n, ret_err)) < 0)
                return k;
        cur.proxied = k;
        if ((k = map_elem_exists(CORE_NFT_SESSIONS_NAT_MAP, n, ret_err)) < 0)
                return k;
        cur.nat_elem = k;
        if ((k = map_elem_exists(CORE_NFT_SESSIONS_REPLY_MAP, n, ret_err)) < 0)
                return k;
        cur.reply_elem = k;
        if (custom && (k = stage_interval_sets(n, p, 0, true, ret_err)) < 0)
                return k;
        if ((k = core_nft_batch_new(&bt)) < 0 || (k = purge(bt, n, &cur, custom, rec)) < 0 ||
            (k = add_mode(bt, n, p, gateway, pins, n_pins)) < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname,
                                    strerror(-k));
        return core_nft_batch_send(bt, ret_err);
}

/* One change of the session's objects, under pin_lock (a pin of the same
 * session waits for it); on success the session's pin record holds the
 * carried pins alone. */
static int change(const char *ifname, const pol_policy *p, struct in_addr gateway, const pol_nft_carried_pin *pins,
                  size_t n_pins, sb_error **ret_err) {
        bool custom = p && p->mode == POL_MODE_CUSTOM;
        names n;
        int k;
        if ((k = make_names(ifname, &n, ret_err)) < 0)
                return k;
        find_gw6(&n);
        pthread_mutex_lock(&pin_lock);
        k = change_locked(&n, p, gateway, pins, n_pins, pins_of(ifname, false), ret_err);
        if (k >= 0) {
                /* Without memory for a record the session takes no pins
                 * (pol_nft_pin: -ENOENT): fail closed. */
                if_pins *rec = pins_of(ifname, custom);
                if (rec) {
                        rec->custom = custom;
                        pins_replace(rec, custom ? pins : NULL, custom ? n_pins : 0);
                }
        }
        pthread_mutex_unlock(&pin_lock);
        return k;
}

/* The gateway is where the sandbox's resolv.conf points: a unicast host
 * address. 0.0.0.0, broadcast, loopback or multicast would be a caller bug
 * that points the gateway rules at something other than the veth. */
static bool gateway_valid(struct in_addr gateway) {
        uint32_t a = ntohl(gateway.s_addr);
        return a != INADDR_ANY && a != INADDR_BROADCAST && (a >> 24) != IN_LOOPBACKNET && !IN_MULTICAST(a);
}

int pol_nft_session_apply(const char *ifname, const pol_policy *p, struct in_addr gateway,
                          sb_error **ret_err) {
        return pol_nft_session_apply_pins(ifname, p, gateway, NULL, 0, ret_err);
}

int pol_nft_session_apply_pins(const char *ifname, const pol_policy *p, struct in_addr gateway,
                               const pol_nft_carried_pin *pins, size_t n_pins, sb_error **ret_err) {
        char text[INET_ADDRSTRLEN];
        if (!p)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "nftables: no policy for %s", ifname);
        if ((p->mode == POL_MODE_CUSTOM || (p->mode == POL_MODE_ALLOW_ALL && dns_upstream_get().s_addr)) &&
            !gateway_valid(gateway))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "nftables: invalid gateway address %s for %s",
                                    inet_ntop(AF_INET, &gateway, text, sizeof(text)), ifname);
        return change(ifname, p, gateway, p->mode == POL_MODE_CUSTOM ? pins : NULL,
                      p->mode == POL_MODE_CUSTOM ? n_pins : 0, ret_err);
}

int pol_nft_session_remove(const char *ifname, sb_error **ret_err) {
        return change(ifname, NULL, (struct in_addr) {}, NULL, 0, ret_err);
}

/* ---- generations ---- */

static pthread_mutex_t mark_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t mark_next = 1, mark_limit; /* limit 0: no store, unbounded */
static pol_nft_mark_reserve_fn mark_reserve;
static void *mark_userdata;

void pol_nft_set_mark_store(uint32_t next, pol_nft_mark_reserve_fn reserve, void *userdata) {
        pthread_mutex_lock(&mark_lock);
        mark_next = next ? next : 1;
        mark_limit = mark_next;
        mark_reserve = reserve;
        mark_userdata = userdata;
        pthread_mutex_unlock(&mark_lock);
}

/* A generation never handed out before (by this daemon or, through the
 * store, an earlier run of it); 0 is never one (an unmarked flow). */
static int take_mark(uint32_t *ret) {
        int k = 0;
        pthread_mutex_lock(&mark_lock);
        if (mark_reserve && mark_next == mark_limit) {
                uint32_t limit = 0;
                k = mark_reserve(mark_userdata, mark_next, &limit);
                if (k >= 0 && limit == mark_next)
                        k = -ENOSPC;
                if (k >= 0)
                        mark_limit = limit;
        }
        if (k >= 0) {
                *ret = mark_next++;
                if (mark_next == 0)
                        mark_next = 1; /* after 2^32 - 1 changes */
        }
        pthread_mutex_unlock(&mark_lock);
        return k;
}

int pol_nft_pin_addr(const char *ifname, const pol_addr *addr, uint32_t ttl_s, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        bool v6 = addr->family == AF_INET6;
        char text[INET6_ADDRSTRLEN];
        names n;
        int k;
        if ((k = make_names(ifname, &n, ret_err)) < 0)
                return k;
        if (addr->family != AF_INET && !v6)
                return sb_error_set(ret_err, -EAFNOSUPPORT, NULL, NULL, "nftables: pin for %s: not an IP address",
                                    ifname);
        inet_ntop(addr->family, addr->bytes, text, sizeof(text));
        uint64_t ms = (uint64_t) (ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : ttl_s) * 1000;
        pthread_mutex_lock(&pin_lock);
        if_pins *rec = pins_of(ifname, false);
        if (!rec || !rec->custom)
                k = sb_error_set(ret_err, -ENOENT, NULL, NULL, "nftables: %s has no custom policy: no DNS pin for %s",
                                 ifname, text);
        else if ((k = pins_add(rec, addr, ms)) < 0)
                k = k == -ENOSPC ? sb_error_set(ret_err, k, NULL, NULL,
                                                "nftables: %s: DNS pin %s: the session holds %d pins, the most it may",
                                                ifname, text, POL_NFT_PIN_MAX)
                                 : sb_error_set(ret_err, k, NULL, NULL, "nftables: %s: DNS pin %s: %s", ifname, text,
                                                strerror(-k));
        else if ((k = core_nft_batch_new(&bt)) < 0 ||
                 (k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, n.set[v6 ? SET_DNS6 : SET_DNS], &n, addr->bytes, v6 ? 16 : 4,
                                     NULL, ms, text)) < 0)
                k = sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch: %s", strerror(-k));
        else
                k = core_nft_batch_send(bt, ret_err);
        pthread_mutex_unlock(&pin_lock);
        return k;
}

int pol_nft_pin6(const char *ifname, const struct in6_addr *addr, uint32_t ttl_s, sb_error **ret_err) {
        pol_addr a = { .family = AF_INET6 };
        memcpy(a.bytes, addr->s6_addr, 16);
        return pol_nft_pin_addr(ifname, &a, ttl_s, ret_err);
}

int pol_nft_pin(const char *ifname, struct in_addr addr, uint32_t ttl_s, sb_error **ret_err) {
        pol_addr a = { .family = AF_INET };
        memcpy(a.bytes, &addr.s_addr, 4);
        return pol_nft_pin_addr(ifname, &a, ttl_s, ret_err);
}

/* ---- ranges for other generators (policy/nftpod.c) ---- */

static int out_add(pol_nft_range **v, size_t *n, int family, const uint8_t *lo, const uint8_t *hi, size_t len) {
        pol_nft_range *w = reallocarray(*v, *n + 1, sizeof(**v));
        if (!w)
                return -ENOMEM;
        *v = w;
        w[*n] = (pol_nft_range) { .family = family };
        memcpy(w[*n].lo, lo, len);
        memcpy(w[*n].hi, hi, len);
        (*n)++;
        return 0;
}

static int export_ranges(const ranges *r4, const ranges6 *r6, pol_nft_range **ret, size_t *ret_n) {
        _cleanup_free_ pol_nft_range *v = NULL;
        size_t n = 0;
        for (size_t i = 0; r4 && i < r4->n; i++) {
                uint32_t lo = htonl(r4->v[i].lo), hi = htonl(r4->v[i].hi);
                if (out_add(&v, &n, AF_INET, (const uint8_t *) &lo, (const uint8_t *) &hi, 4) < 0)
                        return -ENOMEM;
        }
        for (size_t i = 0; r6 && i < r6->n; i++) {
                uint8_t lo[16], hi[16];
                u128_to(r6->v[i].lo, lo);
                u128_to(r6->v[i].hi, hi);
                if (out_add(&v, &n, AF_INET6, lo, hi, 16) < 0)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

int pol_nft_forbidden(const pol_policy *p, pol_nft_range **ret, size_t *ret_n) {
        ranges r4 = {};
        ranges6 r6 = {};
        int k = forbidden_ranges(p, &r4);
        if (k >= 0)
                k = forbidden_ranges6(p, &r6);
        if (k >= 0)
                k = export_ranges(&r4, &r6, ret, ret_n);
        ranges_done(&r4);
        ranges6_done(&r6);
        return k;
}

int pol_nft_cidr_ranges(const pol_cidr *c, size_t n, pol_nft_range **ret, size_t *ret_n) {
        ranges r4 = {};
        ranges6 r6 = {};
        int k = ranges_from_cidrs(&r4, c, n);
        if (k >= 0)
                k = ranges6_from_cidrs(&r6, c, n);
        if (k >= 0)
                k = export_ranges(&r4, &r6, ret, ret_n);
        ranges_done(&r4);
        ranges6_done(&r6);
        return k;
}
