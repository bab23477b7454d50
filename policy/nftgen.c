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
static const session_rule rule_dns4 = { SR_DADDR_SET, SET_DNS, 0, 0, true, "ip daddr @dns4 accept" };
static const session_rule rule_deny6 = { SR_DADDR_SET, SET_DENY6, 0, 0, false, "ip6 daddr @deny6 goto deny" };
static const session_rule rule_forbid6 = { SR_DADDR_SET, SET_FORBID6, 0, 0, false, "ip6 daddr @forbid6 goto deny" };
static const session_rule rule_allow6 = { SR_DADDR_SET, SET_ALLOW6, 0, 0, true, "ip6 daddr @allow6 accept" };
static const session_rule rule_dns6 = { SR_DADDR_SET, SET_DNS6, 0, 0, true, "ip6 daddr @dns6 accept" };
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
        for (int i = 0; i < N_SETS; i++)
                snprintf(n->set[i], sizeof(n->set[i]), "s_%s_%s", ifname, session_sets[i].suffix);
        return 0;
}

/* The interval sets (allow, deny, forbid) come in two slots, 0 "s_<if>_allow4"
 * and 1 "s_<if>_allow4_b": a change fills the slot the session's chains do
 * not use in a batch of its own, before the batch that points the new
 * chains at it (see stage_interval_sets). Name of set `id` in `slot`. */
static bool set_is_interval(enum set_id id) {
        return session_sets[id].flags & NFT_SET_INTERVAL;
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

/* ct mark == mark (the register holds it in host order, as nft does). */
static int add_ct_mark_eq(struct nftnl_rule *r, uint32_t mark) {
        int k = pol_nftx_load(r, "ct", NFTNL_EXPR_CT_KEY, NFT_CT_MARK, NFTNL_EXPR_CT_DREG);
        return k < 0 ? k : pol_nftx_cmp(r, &mark, sizeof(mark));
}

/* ct state established,related. */
static int add_ct_est_rel(struct nftnl_rule *r) {
        return pol_nftx_ct_bits(r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED));
}

/* ct mark set mark: the flow now belongs to this generation. */
static int add_ct_mark_set(struct nftnl_rule *r, uint32_t mark) {
        struct nftnl_expr *e = nftnl_expr_alloc("immediate");
        int k;
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
                nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &mark, sizeof(mark));
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("ct"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_MARK);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_SREG, NFT_REG_1);
        }
        return pol_nftx_expr(r, e);
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
        bool reply = streq(chain, n->rchain), marked = reply || streq(chain, n->chain);
        int k = 0;
        if (!r)
                return -ENOMEM;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, CORE_NFT_TABLE) < 0 ||
            nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) < 0)
                return -ENOMEM;
        switch (sr->kind) {
        case SR_CT_EST: k = add_ct_est_rel(r); break;
        case SR_CT_MARK: k = add_ct_mark_eq(r, n->mark); break;
        case SR_CT_DNAT: k = pol_nftx_ct_bits(r, NFT_CT_STATUS, IPS_DST_NAT); break;
        case SR_CT_RELATED: k = pol_nftx_ct_bits(r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_RELATED)); break;
        case SR_DADDR_SET:
                k = add_addr_lookup(r, n->set[sr->set], session_sets[sr->set].key_len == 16, reply);
                break;
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
                k = add_ct_mark_set(r, n->mark);
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
static int map_elem_exists(const char *map, const names *n, sb_error **err) {
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
                r = mnl_cb_run(buf, (size_t) len, seq, mnl_socket_get_portid(nl), NULL, NULL);
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

/* Deletes whatever the session has: the map elements (if any) first, since
 * they reference the chains; then the chains with their rules, which
 * reference the sets; then the sets. Chains and sets are added without
 * EXCL right before their delete, so a missing one is not an error and the
 * batch needs no knowledge of what an earlier change left. */
static int purge(core_nft_batch *bt, const names *n, bool has_elem, bool has_input_elem, bool proxied,
                 bool has_nat_elem, bool has_reply_elem, int keep_slot) {
        int k;
        if (has_reply_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_REPLY_MAP, n, NULL)) < 0)
                return k;
        if (proxied && (k = msg_proxied_elem(bt, n, false)) < 0)
                return k;
        if (has_nat_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_NAT_MAP, n, NULL)) < 0)
                return k;
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->nchain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->nchain)) < 0)
                return k;
        if (has_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, NULL)) < 0)
                return k;
        if (has_input_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_INPUT_MAP, n, NULL)) < 0)
                return k;
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->chain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->chain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->ichain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->ichain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE, n->rchain)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_DELCHAIN, 0, n->rchain)) < 0)
                return k;
        /* The interval sets of both slots but the one this change
         * filled (keep_slot; -1: none). */
        for (int i = 0; i < N_SETS; i++) {
                if (!set_is_interval(i)) {
                        if ((k = msg_set_drop(bt, n->set[i], i)) < 0)
                                return k;
                        continue;
                }
                for (int slot = 0; slot < 2; slot++) {
                        char name[sizeof(n->set[i])];
                        if (slot == keep_slot)
                                continue;
                        slot_set_name(n, i, slot, name, sizeof(name));
                        if ((k = msg_set_drop(bt, name, i)) < 0)
                                return k;
                }
        }
        return 0;
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
static int add_session_rules(core_nft_batch *bt, const names *n, const char *chain, struct in_addr gateway) {
        size_t n_steps;
        const pol_packet_step *steps = pol_packet_steps(&n_steps);
        int k;
        if ((k = msg_rule(bt, &rule_ct_mark, chain, n, gateway)) < 0 ||
            (streq(chain, n->rchain) && (k = msg_rule(bt, &rule_related, chain, n, gateway)) < 0) ||
            (k = msg_rule(bt, &rule_ct_dnat, chain, n, gateway)) < 0 ||
            (k = msg_rule(bt, &rule_http, chain, n, gateway)) < 0 ||
            (k = msg_rule(bt, &rule_https, chain, n, gateway)) < 0)
                return k;
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

/* The carried-over DNS pins (pol_nft_session_apply_pins) into the new
 * dns4/dns6 sets, in the same batch as the rules: a flow to a pinned
 * address that the new policy still allows is re-judged against them on
 * its next packet, so it must never see the sets without them. */
static int add_pins(core_nft_batch *bt, const names *n, const pol_nft_carried_pin *pins, size_t n_pins) {
        for (size_t i = 0; i < n_pins; i++) {
                bool v6 = pins[i].addr.family == AF_INET6;
                enum set_id id = v6 ? SET_DNS6 : SET_DNS;
                _cleanup_(nftnl_set_freep) struct nftnl_set *set = new_set(n->set[id]);
                char text[INET6_ADDRSTRLEN];
                uint32_t seq, ttl = pins[i].ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : pins[i].ttl_s;
                if (pins[i].addr.family != AF_INET && !v6)
                        continue;
                inet_ntop(pins[i].addr.family, pins[i].addr.bytes, text, sizeof(text));
                void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s", n->set[id], text);
                if (!set || !buf || pol_nftx_key_elem(set, pins[i].addr.bytes, v6 ? 16 : 4, 0, (uint64_t) ttl * 1000) < 0)
                        return -ENOMEM;
                int k = msg_elems(bt, NFT_MSG_NEWSETELEM, set, seq, buf);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* Chain, sets with their ranges, rules, then the map element that makes
 * the chain live, and the gateway services: within the batch nothing is
 * visible before the commit. */
/* Rule 9 (DESIGN §5.1): no window where neither policy applies. The
 * kernel makes the elements of an interval set that a transaction fills
 * visible to lookups only as that transaction ends, after the rules added
 * by it already run: a packet meeting the new chain in between misses
 * `@allow4` and is denied although both policies allow it. So the
 * interval sets of a custom policy are filled here, in a batch of their
 * own, committed before the batch that adds the chains looking them up.
 * The slot the session's current chains use cannot be deleted (EBUSY: the
 * batch fails whole and changes nothing), so slot 0 is tried, then slot 1;
 * whatever the slot held before (a change that failed after this batch) is
 * deleted first. Sets nothing references are harmless until the next
 * change or removal deletes them. 0 with n's interval set names pointing
 * at the filled slot, or a negative errno with *ret_err filled. */
static int stage_interval_sets(names *n, const pol_policy *p, sb_error **ret_err) {
        ranges allow = {}, deny = {}, forbid = {};
        ranges6 allow6 = {}, deny6 = {}, forbid6 = {};
        int k;
        if ((k = ranges_from_cidrs(&allow, p->subnet_allow, p->n_subnet_allow)) < 0 ||
            (k = ranges_from_cidrs(&deny, p->subnet_deny, p->n_subnet_deny)) < 0 ||
            (k = forbidden_ranges(p, &forbid)) < 0 ||
            (k = ranges6_from_cidrs(&allow6, p->subnet_allow, p->n_subnet_allow)) < 0 ||
            (k = ranges6_from_cidrs(&deny6, p->subnet_deny, p->n_subnet_deny)) < 0 ||
            (k = forbidden_ranges6(p, &forbid6)) < 0) {
                k = sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname, strerror(-k));
                goto out;
        }
        for (int slot = 0; slot < 2; slot++) {
                _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
                sb_error *err = NULL;
                use_slot(n, slot);
                k = core_nft_batch_new(&bt);
                for (int i = 0; k >= 0 && i < N_SETS; i++)
                        if (set_is_interval(i))
                                k = msg_set_drop(bt, n->set[i], i);
                for (int i = 0; k >= 0 && i < N_SETS; i++)
                        if (set_is_interval(i))
                                k = msg_set(bt, NFT_MSG_NEWSET, NLM_F_CREATE | NLM_F_EXCL, n, i);
                if (k < 0 || (k = add_ranges(bt, n->set[SET_ALLOW], &allow)) < 0 ||
                    (k = add_ranges(bt, n->set[SET_DENY], &deny)) < 0 ||
                    (k = add_ranges(bt, n->set[SET_FORBID], &forbid)) < 0 ||
                    (k = add_ranges6(bt, n->set[SET_ALLOW6], &allow6)) < 0 ||
                    (k = add_ranges6(bt, n->set[SET_DENY6], &deny6)) < 0 ||
                    (k = add_ranges6(bt, n->set[SET_FORBID6], &forbid6)) < 0) {
                        k = sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname,
                                         strerror(-k));
                        goto out;
                }
                k = core_nft_batch_send(bt, &err);
                if (k == -EBUSY && slot == 0) {
                        sb_error_free(err); /* slot 0 is in use: fill slot 1 */
                        continue;
                }
                if (k < 0 && ret_err)
                        *ret_err = err;
                else
                        sb_error_free(err);
                goto out;
        }
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
        if ((k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->chain)) < 0)
                return k;
        for (int i = 0; i < N_SETS; i++)
                if (!set_is_interval(i) && (k = msg_set(bt, NFT_MSG_NEWSET, NLM_F_CREATE | NLM_F_EXCL, n, i)) < 0)
                        return k;
        if ((k = add_pins(bt, n, pins, n_pins)) < 0 || (k = add_session_rules(bt, n, n->chain, gateway)) < 0 ||
            (k = msg_chain(bt, NFT_MSG_NEWCHAIN, NLM_F_CREATE | NLM_F_EXCL, n->rchain)) < 0 ||
            (k = add_session_rules(bt, n, n->rchain, gateway)) < 0)
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

static int change(const char *ifname, const pol_policy *p, struct in_addr gateway, const pol_nft_carried_pin *pins,
                  size_t n_pins, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        names n;
        int k, has_elem, has_input_elem, proxied, has_nat_elem, has_reply_elem;
        if ((k = make_names(ifname, &n, ret_err)) < 0)
                return k;
        find_gw6(&n);
        if (p && p->mode == POL_MODE_CUSTOM && (k = take_mark(&n.mark)) < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: no flow generation (ct mark) for %s: %s",
                                    ifname, strerror(-k));
        if ((has_elem = map_elem_exists(CORE_NFT_SESSIONS_MAP, &n, ret_err)) < 0)
                return has_elem;
        if ((has_input_elem = map_elem_exists(CORE_NFT_SESSIONS_INPUT_MAP, &n, ret_err)) < 0)
                return has_input_elem;
        if ((proxied = map_elem_exists(CORE_NFT_PROXIED_SET, &n, ret_err)) < 0)
                return proxied;
        if ((has_nat_elem = map_elem_exists(CORE_NFT_SESSIONS_NAT_MAP, &n, ret_err)) < 0)
                return has_nat_elem;
        if ((has_reply_elem = map_elem_exists(CORE_NFT_SESSIONS_REPLY_MAP, &n, ret_err)) < 0)
                return has_reply_elem;
        bool custom = p && p->mode == POL_MODE_CUSTOM;
        if (custom && (k = stage_interval_sets(&n, p, ret_err)) < 0)
                return k;
        if ((k = core_nft_batch_new(&bt)) < 0 ||
            (k = purge(bt, &n, has_elem, has_input_elem, proxied, has_nat_elem, has_reply_elem,
                       custom ? n.slot : -1)) < 0 ||
            (k = add_mode(bt, &n, p, gateway, pins, n_pins)) < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", ifname,
                                    strerror(-k));
        return core_nft_batch_send(bt, ret_err);
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

int pol_nft_pin6(const char *ifname, const struct in6_addr *addr, uint32_t ttl_s, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = NULL;
        char text[INET6_ADDRSTRLEN];
        uint32_t seq;
        names n;
        int k;
        if ((k = make_names(ifname, &n, ret_err)) < 0)
                return k;
        inet_ntop(AF_INET6, addr, text, sizeof(text));
        uint64_t ms = (uint64_t) (ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : ttl_s) * 1000;
        if ((k = core_nft_batch_new(&bt)) < 0 || !(s = new_set(n.set[SET_DNS6])) ||
            pol_nftx_key_elem(s, addr->s6_addr, 16, 0, ms) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "nftables: build batch: %s", strerror(ENOMEM));
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s", n.set[SET_DNS6], text);
        if (!buf || (k = msg_elems(bt, NFT_MSG_NEWSETELEM, s, seq, buf)) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "nftables: build batch: %s", strerror(ENOMEM));
        return core_nft_batch_send(bt, ret_err);
}

int pol_nft_pin_addr(const char *ifname, const pol_addr *addr, uint32_t ttl_s, sb_error **ret_err) {
        if (addr->family == AF_INET6) {
                struct in6_addr a6;
                memcpy(&a6, addr->bytes, 16);
                return pol_nft_pin6(ifname, &a6, ttl_s, ret_err);
        }
        struct in_addr a4;
        memcpy(&a4, addr->bytes, 4);
        return pol_nft_pin(ifname, a4, ttl_s, ret_err);
}

int pol_nft_pin(const char *ifname, struct in_addr addr, uint32_t ttl_s, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = NULL;
        char text[INET_ADDRSTRLEN];
        uint32_t seq;
        names n;
        int k;
        if ((k = make_names(ifname, &n, ret_err)) < 0)
                return k;
        inet_ntop(AF_INET, &addr, text, sizeof(text));
        uint64_t ms = (uint64_t) (ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : ttl_s) * 1000;
        if ((k = core_nft_batch_new(&bt)) < 0 || !(s = new_set(n.set[SET_DNS])) ||
            pol_nftx_key_elem(s, &addr.s_addr, 4, 0, ms) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "nftables: build batch: %s", strerror(ENOMEM));
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s", n.set[SET_DNS], text);
        if (!buf || (k = msg_elems(bt, NFT_MSG_NEWSETELEM, s, seq, buf)) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "nftables: build batch: %s", strerror(ENOMEM));
        return core_nft_batch_send(bt, ret_err);
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
