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
#include <linux/netfilter/nf_nat.h>
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

DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_chain, nftnl_chain_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_rule, nftnl_rule_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set, nftnl_set_free);

/* ---- the shared objects as data ---- */

/* The address-range sets every custom session's ranges are elements of
 * (see nftgen.h), one per slot: interval sets of one field (no
 * NFT_SET_CONCAT), so the kernel keeps them in its rbtree, which compares
 * whole keys with memcmp. The key is the session's interface name
 * (IFNAMSIZ bytes, zero-padded as `meta iifname` loads it) followed by
 * the address, so each session's ranges are one stretch of the key space.
 * Every range has its end element, so a lookup never crosses from one
 * session's stretch into another's; the end of a range running to the
 * top of the address space carries into the name's last byte, always NUL
 * in a real name, so it is nobody's key. */
enum set_id { SET_ALLOW, SET_DENY, SET_FORBID, SET_ALLOW6, SET_DENY6, SET_FORBID6, N_SETS, SET_DNS = N_SETS, SET_DNS6 };

static const struct {
        const char *name[2]; /* by slot */
        bool v6;
} range_sets[N_SETS] = {
        [SET_ALLOW] = { { POL_NFT_ALLOW4_SET, POL_NFT_ALLOW4_SET "_b" }, false },
        [SET_DENY] = { { POL_NFT_DENY4_SET, POL_NFT_DENY4_SET "_b" }, false },
        [SET_FORBID] = { { POL_NFT_OPENED4_SET, POL_NFT_OPENED4_SET "_b" }, false },
        [SET_ALLOW6] = { { POL_NFT_ALLOW6_SET, POL_NFT_ALLOW6_SET "_b" }, true },
        [SET_DENY6] = { { POL_NFT_DENY6_SET, POL_NFT_DENY6_SET "_b" }, true },
        [SET_FORBID6] = { { POL_NFT_OPENED6_SET, POL_NFT_OPENED6_SET "_b" }, true },
};

#define KEY_LEN(v6) (IFNAMSIZ + ((v6) ? 16 : 4))
/* iifname . ip daddr . meta l4proto . th dport, each field padded to 4
 * bytes as the kernel's registers hold them (gw4, gw6, dnsfwd). */
#define SVC_KEY_LEN(v6) (IFNAMSIZ + ((v6) ? 16 : 4) + 4 + 4)

#define NFT_TYPE_INTEGER 4        /* nftables src/datatype.h TYPE_INTEGER */
#define NFT_TYPE_INET_PROTOCOL 12 /* TYPE_INET_PROTOCOL */
#define NFT_TYPE_INET_SERVICE 13  /* TYPE_INET_SERVICE */
#define NFT_BYTEORDER_BIG 2       /* nftables' BYTEORDER_BIG_ENDIAN, as set user data */

enum srule_kind { SR_RANGE, SR_FORBID, SR_PINS, SR_DPORT, SR_ALL, SR_CT_MARK, SR_CT_DNAT, SR_CT_RELATED };

typedef struct session_rule {
        enum srule_kind kind;
        enum set_id set;  /* SR_RANGE; SR_PINS: SET_DNS or SET_DNS6 */
        uint8_t l4proto;  /* SR_DPORT */
        uint16_t port;    /* SR_DPORT */
        bool accept;      /* else goto deny */
} session_rule;

/* The shared chains' rules after their head: one rule per step of the
 * packet decision table (pol_packet_steps(), policy/match.c), in its
 * order, so that what nftables enforces and what pol_check_packet() says
 * (denial events, policy.check) cannot differ. Order is precedence
 * (DESIGN §5.1 rules 4-5, §5.2): deny beats every allow; the forbidden
 * ranges beat subnets.allow except where a CIDR names them (opened4); the
 * port steps as the table orders them around subnets.allow. Each range
 * rule builds its key itself (the interface into a register, the address
 * right after it, then the lookup of the slot's set; no register is
 * relied on across rules); an interface with no range there matches
 * nothing, and the packet meets the chain's final deny. */
static const session_rule rule_deny4 = { SR_RANGE, SET_DENY, 0, 0, false };
/* The forbidden ranges are one shared set of addresses (forbid4, the
 * table's rows as a custom policy without subnets.allow has them), and a
 * session's elements of opened4 the part of them its subnets.allow opens:
 * `ip daddr @forbid4 iifname . ip daddr != @opened4 goto deny`. Every
 * session's forbidden ranges would otherwise be copies of nearly the same
 * hundred ranges, and the kernel's commit of an interval set costs in
 * proportion to its size. */
static const session_rule rule_forbid4 = { SR_FORBID, SET_FORBID, 0, 0, false };
static const session_rule rule_allow4 = { SR_RANGE, SET_ALLOW, 0, 0, true };
static const session_rule rule_dns4 = { SR_PINS, SET_DNS, 0, 0, true };
static const session_rule rule_deny6 = { SR_RANGE, SET_DENY6, 0, 0, false };
static const session_rule rule_forbid6 = { SR_FORBID, SET_FORBID6, 0, 0, false };
static const session_rule rule_allow6 = { SR_RANGE, SET_ALLOW6, 0, 0, true };
static const session_rule rule_dns6 = { SR_PINS, SET_DNS6, 0, 0, true };
static const session_rule rule_rest = { SR_ALL, 0, 0, 0, false };

/* Flow generations (the session's ct mark, DESIGN §5.1 rule 9). Every
 * flow the custom chains admit carries the session's mark, a number drawn
 * fresh for each change (take_mark), and the chains' first rule passes
 * exactly the flows of the session's current generation (`iifname . ct
 * mark @gens`); a flow admitted under an earlier policy (or under
 * allow-all, which marks nothing) meets the policy rules again on its next
 * packet, in either direction, and is cut at once if they deny it, kept
 * and re-marked if they allow it. So an update is elements only, with no
 * walk of the conntrack table. Before the policy steps, what a custom
 * policy never forwards whatever its addresses: a flow that allow-all's
 * DNS forwarding translated (ct status dnat: its lookups belong to the DNS
 * filter now) and TCP to ports 80 and 443, which the prerouting chain
 * sends to the egress proxy from the first packet on (so only a flow older
 * than the policy is forwarded there). */
static const session_rule rule_ct_mark = { SR_CT_MARK, 0, 0, 0, true };
static const session_rule rule_ct_dnat = { SR_CT_DNAT, 0, 0, 0, false };
/* reply only: a related packet (an ICMP error) of a flow of an older
 * generation is dropped, never judged: its source may be any router on the
 * way, and accepting it would mark the whole flow as judged by an address
 * that is not the flow's. The flow's own next packet is judged and, if
 * allowed, marks it; its errors pass from then on. */
static const session_rule rule_related = { SR_CT_RELATED, 0, 0, 0, false };
static const session_rule rule_http = { SR_DPORT, 0, IPPROTO_TCP, 80, false };
static const session_rule rule_https = { SR_DPORT, 0, IPPROTO_TCP, 443, false };

/* The shared chains: which direction they judge (reply: the remote end is
 * the source, the interface the output one, denials dropped) and which
 * slot's ids and genmark map their rules use. */
typedef struct chain_ctx {
        const char *name;
        bool reply;
        int slot;
} chain_ctx;

static const chain_ctx ch_custom = { POL_NFT_CUSTOM_CHAIN, false, 0 };
static const chain_ctx ch_custom_b = { POL_NFT_CUSTOM_B_CHAIN, false, 1 };
static const chain_ctx ch_reply = { POL_NFT_REPLY_CHAIN, true, 0 };
static const chain_ctx ch_reply_b = { POL_NFT_REPLY_B_CHAIN, true, 1 };

/* A session's gateway services (the input chain `gateway`, reached by
 * `jump` from the host input chain's `sessions_input` lookup, which comes
 * after `ct state established,related accept` and before input's final
 * rejects): the session's elements of gw4 (gw6) name each port it may
 * reach at its own gateway address, never the host's other addresses
 * (DESIGN §5.1 rule 5), another session's gateway, a broadcast. The
 * chain's last rule denies the rest itself rather than returning, so its
 * meaning does not depend on what follows the lookup. The proxy port takes
 * both the connections the prerouting chain redirected there (TCP 80/443,
 * rewritten to this gateway) and the clients that address it as
 * HTTP(S)_PROXY. IPv6: the proxy only (the prerouting chain redirects the
 * session's IPv6 TCP 80/443 to its gateway's IPv6 address); resolv.conf
 * names the IPv4 gateway, so DNS stays IPv4. */
static const struct {
        uint8_t l4proto;
        uint16_t port;
        bool v6;
} gateway_services[] = {
        { IPPROTO_UDP, 53, false },
        { IPPROTO_TCP, 53, false },
        { IPPROTO_TCP, POL_PROXY_PORT, false },
        { IPPROTO_TCP, POL_PROXY_PORT, true },
};

typedef struct names {
        char ifname[IFNAMSIZ];
        uint32_t num;          /* n of "sbx<n>" */
        uint32_t mark;         /* the generation (ct mark) of this change */
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
 * the number of sessions. None without an IPv6 pool: the session then has
 * no gw6 element. */
static void find_gw6(names *n) {
        n->has_gw6 = ipv6_pool.prefix6 != 0 && n->num < core_net_pool_slots(&ipv6_pool);
        if (n->has_gw6)
                n->gw6 = core_net_host_addr6(&ipv6_pool, (unsigned) n->num);
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
        n->num = (uint32_t) strtoul(ifname + 3, NULL, 10);
        return 0;
}

/* ---- address ranges ----
 *
 * One type for both families: an address as an unsigned 128-bit integer
 * (an IPv4 address in the low 32 bits), so merging, subtracting and
 * writing ranges is one piece of code; only what differs by family (the
 * width, the forms an IPv6 address embeds an IPv4 one in) takes `v6`. */

typedef unsigned __int128 u128;
#define U128_MAX (~(u128) 0)

typedef struct range {
        u128 lo, hi; /* inclusive */
} range;

typedef struct ranges {
        range *v;
        size_t n, cap;
} ranges;

/* The highest address and the address length in bytes of a family. */
static u128 addr_top(bool v6) {
        return v6 ? U128_MAX : UINT32_MAX;
}

static size_t addr_len(bool v6) {
        return v6 ? 16 : 4;
}

/* An address from / to its addr_len(v6) bytes in network order; addr_to
 * keeps the low bytes, so the address after an IPv4 top is 0.0.0.0 and
 * the one after the IPv6 top ::. */
static u128 addr_from(const uint8_t *b, bool v6) {
        u128 v = 0;
        for (size_t i = 0; i < addr_len(v6); i++)
                v = v << 8 | b[i];
        return v;
}

static void addr_to(u128 v, bool v6, uint8_t *b) {
        for (size_t i = addr_len(v6); i-- > 0; v >>= 8)
                b[i] = (uint8_t) v;
}

static void ranges_done(ranges *r) {
        free(r->v);
}

static int ranges_add(ranges *r, u128 lo, u128 hi) {
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
                if (out > 0 && (r->v[out - 1].hi == U128_MAX || r->v[i].lo <= r->v[out - 1].hi + 1)) {
                        if (r->v[i].hi > r->v[out - 1].hi)
                                r->v[out - 1].hi = r->v[i].hi;
                        continue;
                }
                r->v[out++] = r->v[i];
        }
        r->n = out;
}

static range cidr_range(const pol_cidr *c) {
        bool v6 = c->addr.family == AF_INET6;
        unsigned bits = v6 ? 128 : 32;
        u128 mask = c->prefix ? (addr_top(v6) << (bits - c->prefix)) & addr_top(v6) : 0;
        u128 a = addr_from(c->addr.bytes, v6) & mask;
        return (range) { a, a | (~mask & addr_top(v6)) };
}

/* The CIDRs of c of one family (IPv6: see nftgen.h), merged. */
static int ranges_from_cidrs(ranges *r, const pol_cidr *c, size_t n, bool v6) {
        for (size_t i = 0; i < n; i++) {
                if (c[i].addr.family != (v6 ? AF_INET6 : AF_INET))
                        continue;
                range x = cidr_range(&c[i]);
                if (ranges_add(r, x.lo, x.hi) < 0)
                        return -ENOMEM;
        }
        ranges_merge(r);
        return 0;
}

/* a minus b, both sorted and disjoint (ranges_merge), into *out; -EINVAL
 * when b holds an address a does not; -ENOMEM. */
static int ranges_minus(const ranges *a, const ranges *b, ranges *out) {
        for (size_t j = 0; j < b->n; j++) {
                bool inside = false;
                for (size_t i = 0; i < a->n && !inside; i++)
                        inside = a->v[i].lo <= b->v[j].lo && b->v[j].hi <= a->v[i].hi;
                if (!inside)
                        return -EINVAL;
        }
        for (size_t i = 0; i < a->n; i++) {
                u128 cur = a->v[i].lo;
                bool done = false;
                for (size_t j = 0; j < b->n && !done; j++) {
                        if (b->v[j].hi < cur || b->v[j].lo > a->v[i].hi)
                                continue;
                        if (b->v[j].lo > cur && ranges_add(out, cur, b->v[j].lo - 1) < 0)
                                return -ENOMEM;
                        if (b->v[j].hi == U128_MAX)
                                done = true;
                        else
                                cur = b->v[j].hi + 1;
                }
                if (!done && cur <= a->v[i].hi && ranges_add(out, cur, a->v[i].hi) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int cmp_u128(const void *a, const void *b) {
        u128 x = *(const u128 *) a, y = *(const u128 *) b;
        return x < y ? -1 : x > y;
}

/* The addresses of one family between the n boundaries b (range starts
 * and one-past-ends, b[0] = 0; sorted here) that match.c keeps unreachable
 * under p: the verdict is constant between consecutive boundaries, so one
 * check per piece, with match.c itself deciding, gives the exact set
 * (rule 5 as pol_check_address applies it, subnets.deny aside since the
 * deny sets come first). NEVER: the built-in host rows (0.0.0.0/8,
 * 127.0.0.0/8), which no subnets.allow opens, match.c's verdict too. */
static int forbidden_pieces(const pol_policy *p, u128 *b, size_t n, bool v6, ranges *out) {
        pol_policy q = *p;
        qsort(b, n, sizeof(u128), cmp_u128);
        q.subnet_deny = NULL;
        q.n_subnet_deny = 0;
        for (size_t i = 0; i < n && b[i] <= addr_top(v6); i++) {
                if (i + 1 < n && b[i + 1] == b[i])
                        continue; /* duplicate boundary: the last copy starts the piece */
                u128 end = i + 1 < n ? b[i + 1] - 1 : addr_top(v6);
                pol_addr a = { .family = v6 ? AF_INET6 : AF_INET };
                pol_verdict v;
                addr_to(b[i], v6, a.bytes);
                if (!pol_check_address(&q, &a, NULL, 0, &v) &&
                    (v.layer == POL_LAYER_FORBIDDEN || v.layer == POL_LAYER_NEVER) && ranges_add(out, b[i], end) < 0)
                        return -ENOMEM;
        }
        ranges_merge(out);
        return 0;
}

/* Item i of the forbidden-range table's rows (n_rows of them) followed by
 * p's subnets.allow, into *ret; false for a row that does not parse,
 * which is then left out. */
static bool row_or_allow(const pol_policy *p, const pol_range *rows, size_t n_rows, size_t i, pol_cidr *ret) {
        char *why = NULL;
        if (i >= n_rows) {
                *ret = p->subnet_allow[i - n_rows];
                return true;
        }
        if (pol_cidr_parse(rows[i].cidr, ret, &why) < 0) {
                free(why);
                return false;
        }
        return true;
}

/* The IPv4 addresses the forbidden-range table and match.c's built-in
 * never list keep unreachable under p: the boundaries of the table's IPv4
 * rows and of the IPv4 allow CIDRs (an IPv4 range's one-past-end at the
 * top is 2^32, past every IPv4 piece). */
static int forbidden_ranges(const pol_policy *p, ranges *out) {
        size_t n_rows, n = 0;
        const pol_range *rows = pol_forbidden_ranges(&n_rows);
        _cleanup_free_ u128 *b = calloc(2 * (n_rows + p->n_subnet_allow) + 1, sizeof(u128));
        if (!b)
                return -ENOMEM;
        b[n++] = 0;
        for (size_t i = 0; i < n_rows + p->n_subnet_allow; i++) {
                pol_cidr c;
                if (!row_or_allow(p, rows, n_rows, i, &c))
                        continue;
                if (c.addr.family != AF_INET)
                        continue;
                range x = cidr_range(&c);
                b[n++] = x.lo, b[n++] = x.hi + 1;
        }
        return forbidden_pieces(p, b, n, false, out);
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
                u128 lo = v4_forms[f].base | x.lo << v4_forms[f].shift;
                u128 hi = v4_forms[f].base | x.hi << v4_forms[f].shift | (((u128) 1 << v4_forms[f].shift) - 1);
                b[n++] = lo;
                b[n++] = hi + 1;
        }
        return n;
}

/* forbidden_ranges() for IPv6: the IPv6 addresses match.c keeps
 * unreachable under p, its IPv6 rows and every IPv6 form of its IPv4 rows
 * (unwrapped and judged as IPv4, pol_addr_embedded_v4). The boundaries:
 * the IPv6 rows, the IPv6 forms of the IPv4 rows, the embedding prefixes
 * themselves (and ::/127, which the IPv4-compatible form excludes), and
 * the allow CIDRs (IPv6, and the IPv6 forms of IPv4 ones, which open the
 * rows they name). */
static int forbidden_ranges6(const pol_policy *p, ranges *out) {
        size_t n_rows, n = 0;
        const pol_range *rows = pol_forbidden_ranges(&n_rows);
        _cleanup_free_ u128 *b = calloc(8 * (n_rows + p->n_subnet_allow) + 32, sizeof(u128));
        if (!b)
                return -ENOMEM;
        b[n++] = 0;
        b[n++] = 2; /* ::/127: not IPv4-compatible */
        n += v4_form_bounds((range) { 0, UINT32_MAX }, b + n); /* the embedding prefixes */
        for (size_t i = 0; i < n_rows + p->n_subnet_allow; i++) {
                pol_cidr c;
                if (!row_or_allow(p, rows, n_rows, i, &c))
                        continue;
                range x = cidr_range(&c);
                if (c.addr.family == AF_INET)
                        n += v4_form_bounds(x, b + n);
                else {
                        b[n++] = x.lo;
                        b[n++] = x.hi + 1; /* wraps to 0 at the top: a duplicate of b[0] */
                }
        }
        return forbidden_pieces(p, b, n, true, out);
}

/* "10.0.0.0/8" when an IPv4 range is one CIDR, else "10.0.0.0-10.0.1.255";
 * IPv6 always as "lo-hi". */
static void range_text(range x, bool v6, char *buf, size_t size) {
        char lo[INET6_ADDRSTRLEN], hi[INET6_ADDRSTRLEN];
        uint8_t a[16], c[16];
        u128 span = x.hi - x.lo;
        addr_to(x.lo, v6, a);
        addr_to(x.hi, v6, c);
        inet_ntop(v6 ? AF_INET6 : AF_INET, a, lo, sizeof(lo));
        inet_ntop(v6 ? AF_INET6 : AF_INET, c, hi, sizeof(hi));
        if (!v6 && (span & (span + 1)) == 0 && (x.lo & span) == 0)
                snprintf(buf, size, "%s/%d", lo, span == UINT32_MAX ? 0 : 32 - __builtin_popcount((uint32_t) span));
        else
                snprintf(buf, size, "%s-%s", lo, hi);
}

/* ---- expressions (each returns 0 or -ENOMEM) ---- */

/* A `meta` load of key into register dreg. */
static int add_meta_to(struct nftnl_rule *r, uint32_t key, uint32_t dreg) {
        struct nftnl_expr *e = nftnl_expr_alloc("meta");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, dreg);
        }
        return pol_nftx_expr(r, e);
}

/* meta nfproto ipv4 (ipv6): the dependency nft adds itself so a payload
 * offset means an IPv4 (IPv6) header. */
static int add_nfproto(struct nftnl_rule *r, bool v6) {
        uint8_t fam = v6 ? NFPROTO_IPV6 : NFPROTO_IPV4;
        int k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_NFPROTO, NFTNL_EXPR_META_DREG);
        return k < 0 ? k : pol_nftx_cmp(r, &fam, 1);
}

/* Loads the session's interface into register `reg` (NFT_REG_1 or
 * NFT_REG_2, 16 bytes each): the input interface (iifname) for the
 * sandbox's own packets, the output one (oifname) for the reply direction,
 * which the host table reaches through `sessions_reply` by oifname. */
static int load_if(struct nftnl_rule *r, bool reply, uint32_t reg) {
        return add_meta_to(r, reply ? NFT_META_OIFNAME : NFT_META_IIFNAME, reg);
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

/* meta nfproto ipv4 iifname . ip daddr @allow4 (and the like; the "_b"
 * set in the chains of slot b): the session's interface into NFT_REG_1,
 * the destination (for the reply direction oifname and the source) right
 * after it, then the lookup of the 20-byte (IPv6: 32-byte) key in the
 * keyed set. An interface with no range there matches nothing. */
static int add_range_lookup(struct nftnl_rule *r, enum set_id id, bool reply, int slot) {
        bool v6 = range_sets[id].v6;
        int k;
        if ((k = add_nfproto(r, v6)) < 0 || (k = load_if(r, reply, NFT_REG_1)) < 0 ||
            (k = pol_nftx_payload_to(r, NFT_PAYLOAD_NETWORK_HEADER, v6 ? (reply ? 8 : 24) : (reply ? 12 : 16), v6 ? 16 : 4,
                                NFT_REG_2)) < 0)
                return k;
        return add_lookup(r, range_sets[id].name[slot], NFT_REG_1, -1, false);
}

/* meta nfproto ipv4 ip daddr @forbid4 iifname . ip daddr != @opened4 (the
 * "_b" set in the chains of slot b; for the reply direction oifname and
 * the source): a forbidden address the session's subnets.allow does not
 * open. */
static int add_forbid_lookup(struct nftnl_rule *r, enum set_id id, bool reply, int slot) {
        bool v6 = range_sets[id].v6;
        int k;
        if ((k = add_nfproto(r, v6)) < 0 || (k = load_if(r, reply, NFT_REG_1)) < 0 ||
            (k = pol_nftx_payload_to(r, NFT_PAYLOAD_NETWORK_HEADER, v6 ? (reply ? 8 : 24) : (reply ? 12 : 16), v6 ? 16 : 4,
                                NFT_REG_2)) < 0 ||
            (k = add_lookup(r, v6 ? POL_NFT_FORBID6_SET : POL_NFT_FORBID4_SET, NFT_REG_2, -1, false)) < 0)
                return k;
        return add_lookup(r, range_sets[id].name[slot], NFT_REG_1, -1, true);
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

/* iifname @slot_b (oifname for the reply direction): the session's slot
 * b is in force. */
static int add_slot_guard(struct nftnl_rule *r, bool reply) {
        int k = load_if(r, reply, NFT_REG_1);
        return k < 0 ? k : add_lookup(r, CORE_NFT_SLOT_B_SET, NFT_REG_1, -1, false);
}

/* meta nfproto ipv4 iifname . ip daddr @pins4 (ipv6 ... ip6 daddr @pins6;
 * for the reply direction oifname and the source address). */
static int add_pin_lookup(struct nftnl_rule *r, bool v6, bool reply) {
        int k;
        if ((k = add_nfproto(r, v6)) < 0 || (k = load_if(r, reply, NFT_REG_1)) < 0 ||
            (k = pol_nftx_payload_to(r, NFT_PAYLOAD_NETWORK_HEADER, v6 ? (reply ? 8 : 24) : (reply ? 12 : 16), v6 ? 16 : 4,
                                NFT_REG_2)) < 0)
                return k;
        return add_lookup(r, v6 ? CORE_NFT_PINS6_SET : CORE_NFT_PINS4_SET, NFT_REG_1, -1, false);
}

/* meta nfproto ipv4 iifname . ip daddr . meta l4proto . th dport (ipv6:
 * ip6 daddr) into NFT_REG_1 on: the key of gw4/gw6 and dnsfwd
 * (SVC_KEY_LEN). */
static int add_service_key(struct nftnl_rule *r, bool v6) {
        int k;
        if ((k = add_nfproto(r, v6)) < 0 || (k = load_if(r, false, NFT_REG_1)) < 0 ||
            (k = pol_nftx_payload_to(r, NFT_PAYLOAD_NETWORK_HEADER, v6 ? 24 : 16, v6 ? 16 : 4, NFT_REG32_04)) < 0 ||
            (k = add_meta_to(r, NFT_META_L4PROTO, v6 ? NFT_REG32_08 : NFT_REG32_05)) < 0)
                return k;
        return pol_nftx_payload_to(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2, v6 ? NFT_REG32_09 : NFT_REG32_06);
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

/* accept, or goto deny; `drop` instead of the deny chain for the reply
 * direction, whose packets come from outside: nothing is answered or
 * reported to them (the sandbox's own next packet of the flow meets the
 * deny chain and its reset). */
static int add_verdict_or_drop(struct nftnl_rule *r, bool accept, bool drop) {
        return pol_nftx_verdict(r, accept ? NF_ACCEPT : drop ? NF_DROP : NFT_GOTO,
                                accept || drop ? NULL : CORE_NFT_DENY_CHAIN);
}

static struct nftnl_rule *new_rule(const char *chain) {
        struct nftnl_rule *r = nftnl_rule_alloc();
        if (!r)
                return NULL;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, CORE_NFT_TABLE) < 0 ||
            nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) < 0) {
                nftnl_rule_free(r);
                return NULL;
        }
        return r;
}

/* One rule of a shared custom chain (ctx), built into *ret. */
static int build_rule(const session_rule *sr, const chain_ctx *ctx, struct nftnl_rule **ret) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = new_rule(ctx->name);
        int k = 0;
        if (!r)
                return -ENOMEM;
        switch (sr->kind) {
        case SR_CT_MARK: k = add_gen_check(r, ctx->reply); break;
        case SR_CT_DNAT: k = pol_nftx_ct_bits(r, NFT_CT_STATUS, IPS_DST_NAT); break;
        case SR_CT_RELATED: k = pol_nftx_ct_bits(r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_RELATED)); break;
        case SR_RANGE: k = add_range_lookup(r, sr->set, ctx->reply, ctx->slot); break;
        case SR_FORBID: k = add_forbid_lookup(r, sr->set, ctx->reply, ctx->slot); break;
        case SR_PINS: k = add_pin_lookup(r, sr->set == SET_DNS6, ctx->reply); break;
        case SR_DPORT: k = add_port(r, sr->l4proto, sr->port, ctx->reply); break;
        case SR_ALL: break;
        }
        /* An accepting rule (but the generation check itself) marks the
         * flow with the generation of the slot that judged it. */
        if (k >= 0 && sr->accept && sr->kind != SR_CT_MARK)
                k = add_gen_set(r, ctx->reply, ctx->slot);
        if (k < 0 || (k = add_verdict_or_drop(r, sr->accept, ctx->reply)) < 0)
                return k;
        *ret = TAKE_PTR(r);
        return 0;
}

/* ---- messages ---- */

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

/* Adds a built set with its elements as one NEWSETELEM (DELSETELEM)
 * message. */
static int msg_elems(core_nft_batch *bt, uint16_t type, struct nftnl_set *s, uint32_t seq, void *buf) {
        nftnl_set_elems_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, (type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0) | NLM_F_ACK, seq), s);
        return core_nft_batch_commit(bt);
}

/* Ranges per NEWSETELEM message: two elements each (start, end), at most
 * 2 * (4 + 4 + 4 + 20 + 8) bytes with their attributes, well inside the
 * CORE_NFT_MSG_MAX bytes a message has. */
#define RANGES_PER_MSG 32

/* The address ranges of one slot of a session: what its elements of the
 * keyed sets hold (as the kernel has them, or as a change puts them in). */
typedef struct slot_ranges {
        ranges r[N_SETS]; /* by set_id */
} slot_ranges;

static void slot_ranges_done(slot_ranges *s) {
        for (int i = 0; i < N_SETS; i++)
                ranges_done(&s->r[i]);
        *s = (slot_ranges) {};
}

/* The keys of range i of set `id` in `s` for the session: the start
 * (name, lo) and the end element (name, hi + 1), the carry of an address
 * at the top going into the name's last byte (NUL in every real name, so
 * the key is nobody's). Network order throughout: the rbtree compares keys
 * with memcmp. */
static void range_keys(const slot_ranges *s, enum set_id id, size_t i, const names *n, uint8_t *lo, uint8_t *end) {
        bool v6 = range_sets[id].v6;
        range x = s->r[id].v[i];
        memset(lo, 0, IFNAMSIZ);
        memcpy(lo, n->ifname, strlen(n->ifname));
        memcpy(end, lo, IFNAMSIZ);
        addr_to(x.lo, v6, lo + IFNAMSIZ);
        addr_to(x.hi + 1, v6, end + IFNAMSIZ); /* 0.0.0.0 (::) after the top */
        if (x.hi == addr_top(v6))
                end[IFNAMSIZ - 1] = 1;
}

/* Adds (NEWSETELEM) or deletes (DELSETELEM) the session's elements of
 * keyed set `id` in `slot`: every range as its start and end element,
 * RANGES_PER_MSG ranges a message. */
static int msg_ranges(core_nft_batch *bt, uint16_t type, const names *n, int slot, const slot_ranges *s,
                      enum set_id id) {
        size_t total = s->r[id].n;
        bool v6 = range_sets[id].v6;
        for (size_t first = 0; first < total; first += RANGES_PER_MSG) {
                _cleanup_(nftnl_set_freep) struct nftnl_set *set = new_set(range_sets[id].name[slot]);
                size_t last = first + RANGES_PER_MSG < total ? first + RANGES_PER_MSG : total;
                char text[2 * INET6_ADDRSTRLEN + 2];
                uint32_t seq;
                range_text(s->r[id].v[first], v6, text, sizeof(text));
                void *buf = core_nft_batch_reserve(bt, &seq, "set %s: %s %zu range(s) of %s from %s",
                                                   range_sets[id].name[slot],
                                                   type == NFT_MSG_NEWSETELEM ? "add" : "delete", last - first,
                                                   n->ifname, text);
                if (!set || !buf)
                        return -ENOMEM;
                for (size_t i = first; i < last; i++) {
                        uint8_t lo[KEY_LEN(true)], end[KEY_LEN(true)];
                        range_keys(s, id, i, n, lo, end);
                        if (pol_nftx_key_elem(set, lo, KEY_LEN(v6), 0, 0) < 0 ||
                            pol_nftx_key_elem(set, end, KEY_LEN(v6), NFT_SET_ELEM_INTERVAL_END, 0) < 0)
                                return -ENOMEM;
                }
                int k = msg_elems(bt, type, set, seq, buf);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* msg_ranges() for every keyed set of the slot. */
static int msg_slot_ranges(core_nft_batch *bt, uint16_t type, const names *n, int slot, const slot_ranges *s) {
        for (int i = 0; i < N_SETS; i++) {
                int k = msg_ranges(bt, type, n, slot, s, i);
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

/* An element of one of the host table's shared sets keyed by interface
 * (libcore/net.h CORE_NFT_PINS4_SET..., and gw4, gw6,
 * dnsfwd): the key is the session's interface name (IFNAMSIZ bytes,
 * zero-padded) followed by tail_len bytes of `tail`; `data`: a map
 * element's 4-byte value (genmark, dnsfwd); timeout_ms 0: none.
 * `type` NFT_MSG_NEWSETELEM or NFT_MSG_DELSETELEM; `what` names it in
 * errors. */
static int msg_keyed_elem(core_nft_batch *bt, uint16_t type, const char *set, const names *n, const void *tail,
                          size_t tail_len, const uint32_t *data, uint64_t timeout_ms, const char *what) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(set);
        struct nftnl_set_elem *e = nftnl_set_elem_alloc();
        uint8_t key[IFNAMSIZ + 24] = {};
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s%s%s", set, n->ifname, what ? " . " : "",
                                           what ? what : "");
        if (!s || !e || !buf || tail_len > 24) {
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

/* The tail of a service key after the interface (SVC_KEY_LEN): the
 * address, the protocol and the port, each padded to 4 bytes. Returns its
 * length. */
static size_t service_tail(const void *addr, bool v6, uint8_t l4proto, uint16_t port, uint8_t *tail) {
        size_t alen = v6 ? 16 : 4;
        uint16_t be = htons(port);
        memset(tail, 0, alen + 8);
        memcpy(tail, addr, alen);
        tail[alen] = l4proto;
        memcpy(tail + alen + 4, &be, 2);
        return alen + 8;
}

/* The session's elements of gw4 (and gw6 when it has an IPv6 gateway):
 * the gateway services at its gateway address. */
static int msg_gateway(core_nft_batch *bt, uint16_t type, const names *n, struct in_addr gw, bool v6,
                       const struct in6_addr *gw6) {
        for (size_t i = 0; i < ELEMENTSOF(gateway_services); i++) {
                uint8_t tail[24];
                char text[INET6_ADDRSTRLEN + 32], a[INET6_ADDRSTRLEN];
                if (gateway_services[i].v6 != v6)
                        continue;
                size_t len = service_tail(v6 ? (const void *) gw6->s6_addr : (const void *) &gw.s_addr, v6,
                                          gateway_services[i].l4proto, gateway_services[i].port, tail);
                inet_ntop(v6 ? AF_INET6 : AF_INET, v6 ? (const void *) gw6->s6_addr : (const void *) &gw.s_addr, a,
                          sizeof(a));
                snprintf(text, sizeof(text), "%s . %s . %u", a,
                         gateway_services[i].l4proto == IPPROTO_TCP ? "tcp" : "udp", gateway_services[i].port);
                int k = msg_keyed_elem(bt, type, v6 ? POL_NFT_GW6_SET : POL_NFT_GW4_SET, n, tail, len, NULL, 0, text);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* An allow-all session's elements of dnsfwd: its gateway's UDP and TCP
 * port 53 : the upstream resolver. */
static int msg_dnsfwd(core_nft_batch *bt, uint16_t type, const names *n, struct in_addr gw, struct in_addr up) {
        static const uint8_t protos[] = { IPPROTO_UDP, IPPROTO_TCP };
        for (size_t i = 0; i < ELEMENTSOF(protos); i++) {
                uint8_t tail[24];
                char text[INET_ADDRSTRLEN + 16], a[INET_ADDRSTRLEN];
                size_t len = service_tail(&gw.s_addr, false, protos[i], 53, tail);
                inet_ntop(AF_INET, &gw, a, sizeof(a));
                snprintf(text, sizeof(text), "%s . %s . 53", a, protos[i] == IPPROTO_TCP ? "tcp" : "udp");
                int k = msg_keyed_elem(bt, type, POL_NFT_DNSFWD_MAP, n, tail, len, &up.s_addr, 0, text);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* ---- the shared objects: made with the host table ---- */

static int msg_shared_chain(core_nft_batch *bt, const char *chain) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = nftnl_chain_alloc();
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "chain %s", chain);
        if (!c || !buf)
                return -ENOMEM;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
        if (nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, CORE_NFT_TABLE) < 0 ||
            nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, chain) < 0)
                return -ENOMEM;
        nftnl_chain_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWCHAIN, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, seq), c);
        return core_nft_batch_commit(bt);
}

typedef core_nft_set_spec shared_set;

#define CONCAT2(a, b) ((a) << CORE_NFT_TYPE_BITS | (b))
#define SVC_TYPE(ip) \
        CONCAT2(CONCAT2(CONCAT2(CORE_NFT_TYPE_IFNAME, ip), NFT_TYPE_INET_PROTOCOL), NFT_TYPE_INET_SERVICE)

#define RANGE4(name) { name, NFT_SET_INTERVAL, NFT_TYPE_INTEGER, KEY_LEN(false), NFT_BYTEORDER_BIG, 0, 0, 0 }
#define RANGE6(name) { name, NFT_SET_INTERVAL, NFT_TYPE_INTEGER, KEY_LEN(true), NFT_BYTEORDER_BIG, 0, 0, 0 }

#define GLOBAL4(name) { name, NFT_SET_INTERVAL, CORE_NFT_TYPE_IPADDR, 4, 0, 0, 0, 0 }
#define GLOBAL6(name) { name, NFT_SET_INTERVAL, CORE_NFT_TYPE_IP6ADDR, 16, 0, 0, 0, 0 }

/* The key types are for `nft list` alone. A range set's is a big-endian
 * integer: nft takes an interval set of a concatenated type for one of
 * its own, with a field per member (NFT_SET_CONCAT, the kernel's pipapo),
 * and cannot read this one as such; as an integer it prints each range as
 * two numbers, the name's bytes and the address's. */
static const shared_set shared_sets[] = {
        GLOBAL4(POL_NFT_FORBID4_SET),      GLOBAL6(POL_NFT_FORBID6_SET),
        RANGE4(POL_NFT_ALLOW4_SET),        RANGE4(POL_NFT_DENY4_SET),        RANGE4(POL_NFT_OPENED4_SET),
        RANGE6(POL_NFT_ALLOW6_SET),        RANGE6(POL_NFT_DENY6_SET),        RANGE6(POL_NFT_OPENED6_SET),
        RANGE4(POL_NFT_ALLOW4_SET "_b"),   RANGE4(POL_NFT_DENY4_SET "_b"),   RANGE4(POL_NFT_OPENED4_SET "_b"),
        RANGE6(POL_NFT_ALLOW6_SET "_b"),   RANGE6(POL_NFT_DENY6_SET "_b"),   RANGE6(POL_NFT_OPENED6_SET "_b"),
        { POL_NFT_GW4_SET, 0, SVC_TYPE(CORE_NFT_TYPE_IPADDR), SVC_KEY_LEN(false), 0, 0, 0, 0 },
        { POL_NFT_GW6_SET, 0, SVC_TYPE(CORE_NFT_TYPE_IP6ADDR), SVC_KEY_LEN(true), 0, 0, 0, 0 },
        { POL_NFT_DNSFWD_MAP, NFT_SET_MAP, SVC_TYPE(CORE_NFT_TYPE_IPADDR), SVC_KEY_LEN(false), 0, CORE_NFT_TYPE_IPADDR,
          4, 0 },
};

/* nft's text of a shared chain's rule, for errors. */
static void rule_text(const session_rule *sr, const chain_ctx *ctx, char *buf, size_t size) {
        const char *dir = ctx->reply ? "saddr" : "daddr", *deny = ctx->reply ? "drop" : "goto deny";
        const char *ifk = ctx->reply ? "oifname" : "iifname";
        switch (sr->kind) {
        case SR_CT_MARK: snprintf(buf, size, "%s . ct mark @gens accept", ifk); return;
        case SR_CT_DNAT: snprintf(buf, size, "ct status dnat %s", deny); return;
        case SR_CT_RELATED: snprintf(buf, size, "ct state related drop"); return;
        case SR_RANGE:
                snprintf(buf, size, "%s . %s %s @%s %s", ifk, range_sets[sr->set].v6 ? "ip6" : "ip", dir,
                         range_sets[sr->set].name[ctx->slot], sr->accept ? "accept" : deny);
                return;
        case SR_FORBID:
                snprintf(buf, size, "%s %s @%s %s . %s %s != @%s %s", range_sets[sr->set].v6 ? "ip6" : "ip", dir,
                         range_sets[sr->set].v6 ? POL_NFT_FORBID6_SET : POL_NFT_FORBID4_SET, ifk,
                         range_sets[sr->set].v6 ? "ip6" : "ip", dir, range_sets[sr->set].name[ctx->slot], deny);
                return;
        case SR_PINS:
                snprintf(buf, size, "%s . %s %s @%s accept", ifk, sr->set == SET_DNS6 ? "ip6" : "ip", dir,
                         sr->set == SET_DNS6 ? CORE_NFT_PINS6_SET : CORE_NFT_PINS4_SET);
                return;
        case SR_DPORT:
                snprintf(buf, size, "%s %s %u %s", sr->l4proto == IPPROTO_TCP ? "tcp" : "udp",
                         ctx->reply ? "sport" : "dport", sr->port, deny);
                return;
        case SR_ALL: snprintf(buf, size, "%s", deny); return;
        }
}

static int msg_add_rule(core_nft_batch *bt, struct nftnl_rule *r, const char *chain, const char *text) {
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "rule '%s: %s'", chain, text);
        if (!buf)
                return -ENOMEM;
        nftnl_rule_nlmsg_build_payload(nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_INET,
                                                             NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq), r);
        return core_nft_batch_commit(bt);
}

static int msg_rule(core_nft_batch *bt, const session_rule *sr, const chain_ctx *ctx) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = NULL;
        char text[96];
        int k = build_rule(sr, ctx, &r);
        if (k < 0)
                return k;
        rule_text(sr, ctx, text, sizeof(text));
        return msg_add_rule(bt, r, ctx->name, text);
}

/* The packet decision table's steps (see the comment above rule_deny4),
 * appended to the chain; `count` only counts the rules. */
static int add_steps(core_nft_batch *bt, const chain_ctx *ctx, unsigned *count) {
        size_t n_steps;
        const pol_packet_step *steps = pol_packet_steps(&n_steps);
        int k = 0;
        for (size_t i = 0; k >= 0 && i < n_steps; i++) {
                const session_rule *v[4] = {};
                session_rule port = { SR_DPORT, 0, steps[i].l4proto, steps[i].port, false };
                switch (steps[i].kind) {
                case POL_STEP_ADDRESS_DENY:
                        v[0] = &rule_deny4, v[1] = &rule_forbid4, v[2] = &rule_deny6, v[3] = &rule_forbid6;
                        break;
                case POL_STEP_PORT: v[0] = &port; break;
                case POL_STEP_SUBNET_ALLOW: v[0] = &rule_allow4, v[1] = &rule_allow6; break;
                case POL_STEP_DNS_PIN: v[0] = &rule_dns4, v[1] = &rule_dns6; break;
                case POL_STEP_DEFAULT: v[0] = &rule_rest; break;
                }
                for (size_t j = 0; k >= 0 && j < ELEMENTSOF(v) && v[j]; j++) {
                        if (count)
                                (*count)++;
                        else
                                k = msg_rule(bt, v[j], ctx);
                }
        }
        return k;
}

/* `iifname @slot_b goto <chain_b>` (oifname for the reply direction): the
 * slot is decided once per packet, so a packet is judged by one slot's
 * ranges and marked from that slot's genmark map whenever a change
 * commits. */
static int msg_slot_goto(core_nft_batch *bt, const chain_ctx *ctx, const char *chain_b) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = new_rule(ctx->name);
        char text[64];
        int k;
        if (!r)
                return -ENOMEM;
        if ((k = add_slot_guard(r, ctx->reply)) < 0 || (k = pol_nftx_verdict(r, NFT_GOTO, chain_b)) < 0)
                return k;
        snprintf(text, sizeof(text), "%s @slot_b goto %s", ctx->reply ? "oifname" : "iifname", chain_b);
        return msg_add_rule(bt, r, ctx->name, text);
}

/* custom (reply): the generation check and what a custom policy never
 * forwards, the slot's goto, then the steps with slot a's ids; custom_b
 * (reply_b) holds the same steps with slot b's. `count`: only count the
 * rules of the two chains, into count[0] and count[1]. */
static int add_custom_chains(core_nft_batch *bt, const chain_ctx *ctx, const chain_ctx *ctx_b, unsigned *count) {
        const session_rule *head[] = { &rule_ct_mark, ctx->reply ? &rule_related : NULL, &rule_ct_dnat, &rule_http,
                                       &rule_https };
        int k = 0;
        for (size_t i = 0; k >= 0 && i < ELEMENTSOF(head); i++)
                if (head[i])
                        k = count ? (count[0]++, 0) : msg_rule(bt, head[i], ctx);
        if (k < 0)
                return k;
        if (count)
                count[0]++;
        else if ((k = msg_slot_goto(bt, ctx, ctx_b->name)) < 0)
                return k;
        if ((k = add_steps(bt, ctx, count)) < 0)
                return k;
        return add_steps(bt, ctx_b, count ? &count[1] : NULL);
}

/* gateway: `iifname . ip daddr . meta l4proto . th dport @gw4 accept`,
 * the same for IPv6 with gw6, then `goto deny`. */
static int add_gateway_chain(core_nft_batch *bt) {
        for (int v6 = 0; v6 < 2; v6++) {
                _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = new_rule(POL_NFT_GATEWAY_CHAIN);
                int k;
                if (!r)
                        return -ENOMEM;
                if ((k = add_service_key(r, v6)) < 0 ||
                    (k = add_lookup(r, v6 ? POL_NFT_GW6_SET : POL_NFT_GW4_SET, NFT_REG_1, -1, false)) < 0 ||
                    (k = pol_nftx_verdict(r, NF_ACCEPT, NULL)) < 0 ||
                    (k = msg_add_rule(bt, r, POL_NFT_GATEWAY_CHAIN,
                                      v6 ? "iifname . ip6 daddr . meta l4proto . th dport @gw6 accept"
                                         : "iifname . ip daddr . meta l4proto . th dport @gw4 accept")) < 0)
                        return k;
        }
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = new_rule(POL_NFT_GATEWAY_CHAIN);
        int k;
        if (!r)
                return -ENOMEM;
        if ((k = add_verdict_or_drop(r, false, false)) < 0)
                return k;
        return msg_add_rule(bt, r, POL_NFT_GATEWAY_CHAIN, "goto deny");
}

/* dns_forward (prerouting, nat): `dnat ip to iifname . ip daddr . meta
 * l4proto . th dport map @dnsfwd`: an allow-all session's DNS to its
 * gateway goes to the resolver its elements name. */
static int add_dns_forward_chain(core_nft_batch *bt) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = new_rule(POL_NFT_DNS_FORWARD_CHAIN);
        struct nftnl_expr *e;
        int k;
        if (!r)
                return -ENOMEM;
        if ((k = add_service_key(r, false)) < 0 || (k = add_lookup(r, POL_NFT_DNSFWD_MAP, NFT_REG_1, NFT_REG_1, false)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("nat"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_TYPE, NFT_NAT_DNAT);
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FAMILY, NFPROTO_IPV4);
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_ADDR_MIN, NFT_REG_1);
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        return msg_add_rule(bt, r, POL_NFT_DNS_FORWARD_CHAIN,
                            "dnat ip to iifname . ip daddr . meta l4proto . th dport map @dnsfwd");
}

static const char *const shared_chain_names[] = {
        POL_NFT_CUSTOM_CHAIN, POL_NFT_CUSTOM_B_CHAIN, POL_NFT_REPLY_CHAIN,
        POL_NFT_REPLY_B_CHAIN, POL_NFT_GATEWAY_CHAIN, POL_NFT_DNS_FORWARD_CHAIN,
};
static unsigned shared_chain_rules[ELEMENTSOF(shared_chain_names)];
static const char *shared_set_names[ELEMENTSOF(shared_sets)];

static int global_forbidden(ranges *r4, ranges *r6);

/* The shared forbidden sets' elements: every range as its start and end
 * element (none after the top of the address space), RANGES_PER_MSG ranges
 * a message. */
static int msg_global_forbidden(core_nft_batch *bt) {
        ranges r[2] = {}; /* IPv4, IPv6 */
        int k = global_forbidden(&r[0], &r[1]);
        for (int v6 = 0; k >= 0 && v6 < 2; v6++) {
                size_t total = r[v6].n;
                for (size_t first = 0; k >= 0 && first < total; first += RANGES_PER_MSG) {
                        const char *name = v6 ? POL_NFT_FORBID6_SET : POL_NFT_FORBID4_SET;
                        _cleanup_(nftnl_set_freep) struct nftnl_set *set = new_set(name);
                        size_t last = first + RANGES_PER_MSG < total ? first + RANGES_PER_MSG : total;
                        uint32_t seq;
                        void *buf = core_nft_batch_reserve(bt, &seq, "set %s: the forbidden ranges", name);
                        if (!set || !buf) {
                                k = -ENOMEM;
                                break;
                        }
                        for (size_t i = first; k >= 0 && i < last; i++) {
                                uint8_t lo[16], end[16];
                                bool top = r[v6].v[i].hi == addr_top(v6);
                                addr_to(r[v6].v[i].lo, v6, lo);
                                addr_to(r[v6].v[i].hi + 1, v6, end);
                                if (pol_nftx_key_elem(set, lo, addr_len(v6), 0, 0) < 0 ||
                                    (!top && pol_nftx_key_elem(set, end, addr_len(v6), NFT_SET_ELEM_INTERVAL_END, 0) < 0))
                                        k = -ENOMEM;
                        }
                        if (k >= 0)
                                k = msg_elems(bt, NFT_MSG_NEWSETELEM, set, seq, buf);
                }
        }
        ranges_done(&r[0]);
        ranges_done(&r[1]);
        return k;
}

/* core_nft_extension.build: the shared sets (the forbidden ones filled),
 * then the chains, then their rules (the custom chains' gotos name the
 * slot-b ones). */
static int build_shared(core_nft_batch *bt) {
        int k;
        for (size_t i = 0; i < ELEMENTSOF(shared_sets); i++)
                if ((k = core_nft_batch_set(bt, &shared_sets[i])) < 0)
                        return k;
        if ((k = msg_global_forbidden(bt)) < 0)
                return k;
        for (size_t i = 0; i < ELEMENTSOF(shared_chain_names); i++)
                if ((k = msg_shared_chain(bt, shared_chain_names[i])) < 0)
                        return k;
        if ((k = add_custom_chains(bt, &ch_custom, &ch_custom_b, NULL)) < 0 ||
            (k = add_custom_chains(bt, &ch_reply, &ch_reply_b, NULL)) < 0 || (k = add_gateway_chain(bt)) < 0)
                return k;
        return add_dns_forward_chain(bt);
}

static core_nft_extension extension = {
        .build = build_shared,
        .chains = shared_chain_names,
        .rules = shared_chain_rules,
        .n_chains = ELEMENTSOF(shared_chain_names),
        .sets = shared_set_names,
        .n_sets = ELEMENTSOF(shared_sets),
};

void pol_nft_host_extend(void) {
        unsigned c[2] = {}, r[2] = {};
        (void) add_custom_chains(NULL, &ch_custom, &ch_custom_b, c);
        (void) add_custom_chains(NULL, &ch_reply, &ch_reply_b, r);
        shared_chain_rules[0] = c[0];
        shared_chain_rules[1] = c[1];
        shared_chain_rules[2] = r[0];
        shared_chain_rules[3] = r[1];
        shared_chain_rules[4] = 3;
        shared_chain_rules[5] = 1;
        for (size_t i = 0; i < ELEMENTSOF(shared_sets); i++)
                shared_set_names[i] = shared_sets[i].name;
        core_net_host_extend(&extension);
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
        bool custom; /* the session's custom policy is in place */
        pin_rec *v;
        size_t n, cap;
        /* The session's other elements a change must delete, as the last
         * committed batch left them (the daemon is the tables' only
         * writer; a re-installed table starts empty, pol_nft_host_reset):
         * its ranges in each slot, its gateway services, its DNS
         * forwarding. */
        slot_ranges loaded[2];
        bool gw, gw6, dns;
        struct in_addr gw_addr, dns_gw, dns_up;
        struct in6_addr gw6_addr;
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
        for (size_t i = 0; i < pin_tab_n; i++) {
                free(pin_tab[i].v);
                slot_ranges_done(&pin_tab[i].loaded[0]);
                slot_ranges_done(&pin_tab[i].loaded[1]);
        }
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

/* 1 when `map` (or the plain set `proxied`) holds an element for the
 * interface, 0 when not. A delete
 * of a missing element would fail the whole batch, and its verdict may
 * differ from any we would add first (accept, goto deny, goto custom), so
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
        bool custom;        /* its genmark element: a custom policy in force */
        uint32_t mark_a;    /* that element's value, slot a's generation */
        bool has_b;         /* its genmark_b element */
        uint32_t mark_b;    /* that element's value */
        int slot;           /* custom: the slot in force (slot_b) */
} current;

/* The forbidden ranges of a custom policy without subnets.allow: the
 * shared sets forbid4 and forbid6, which every custom policy's forbidden
 * ranges are part of (subnets.allow only opens). 0 or -ENOMEM. */
static int global_forbidden(ranges *r4, ranges *r6) {
        pol_policy empty = { .mode = POL_MODE_CUSTOM };
        int k = forbidden_ranges(&empty, r4);
        return k < 0 ? k : forbidden_ranges6(&empty, r6);
}

/* The address ranges of policy p, as the keyed sets hold them: subnets.deny,
 * subnets.allow and the part of the shared forbidden ranges subnets.allow
 * opens, both families. 0, -EINVAL (a forbidden range outside the shared
 * sets: the engine and the generator disagree) or -ENOMEM (s then holds
 * what was made; slot_ranges_done() frees it). */
static int policy_ranges(const pol_policy *p, slot_ranges *s) {
        ranges all = {}, mine = {}, all6 = {}, mine6 = {};
        int k;
        if ((k = ranges_from_cidrs(&s->r[SET_ALLOW], p->subnet_allow, p->n_subnet_allow, false)) < 0 ||
            (k = ranges_from_cidrs(&s->r[SET_DENY], p->subnet_deny, p->n_subnet_deny, false)) < 0 ||
            (k = ranges_from_cidrs(&s->r[SET_ALLOW6], p->subnet_allow, p->n_subnet_allow, true)) < 0 ||
            (k = ranges_from_cidrs(&s->r[SET_DENY6], p->subnet_deny, p->n_subnet_deny, true)) < 0 ||
            (k = global_forbidden(&all, &all6)) < 0 || (k = forbidden_ranges(p, &mine)) < 0 ||
            (k = forbidden_ranges6(p, &mine6)) < 0 || (k = ranges_minus(&all, &mine, &s->r[SET_FORBID])) < 0)
                goto out;
        k = ranges_minus(&all6, &mine6, &s->r[SET_FORBID6]);
out:
        ranges_done(&all);
        ranges_done(&mine);
        ranges_done(&all6);
        ranges_done(&mine6);
        return k;
}

/* Deletes whatever the session has: its elements of the dispatch maps (if
 * any), of the gateway services and DNS forwarding (as `rec` recorded
 * them), of the keyed range sets in both slots (unless keep_ranges: a
 * custom policy's stage_ranges() has just put them right),
 * its generation and slot elements and its DNS pins. Elements only: no
 * chain, rule or set is a session's. */
static int purge(core_nft_batch *bt, const names *n, const current *cur, bool keep_ranges, if_pins *rec) {
        int k;
        if (cur->reply_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_REPLY_MAP, n, NULL)) < 0)
                return k;
        if (cur->proxied && (k = msg_proxied_elem(bt, n, false)) < 0)
                return k;
        if (cur->nat_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_NAT_MAP, n, NULL)) < 0)
                return k;
        if (rec->dns && (k = msg_dnsfwd(bt, NFT_MSG_DELSETELEM, n, rec->dns_gw, rec->dns_up)) < 0)
                return k;
        if (cur->elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, NULL)) < 0)
                return k;
        if (cur->input_elem && (k = msg_map_elem(bt, CORE_NFT_SESSIONS_INPUT_MAP, n, NULL)) < 0)
                return k;
        if (rec->gw && (k = msg_gateway(bt, NFT_MSG_DELSETELEM, n, rec->gw_addr, false, NULL)) < 0)
                return k;
        if (rec->gw6 && (k = msg_gateway(bt, NFT_MSG_DELSETELEM, n, (struct in_addr) {}, true, &rec->gw6_addr)) < 0)
                return k;
        for (int slot = 0; !keep_ranges && slot < 2; slot++)
                if ((k = msg_slot_ranges(bt, NFT_MSG_DELSETELEM, n, slot, &rec->loaded[slot])) < 0)
                        return k;
        if (cur->custom && ((k = msg_gens(bt, NFT_MSG_DELSETELEM, n, cur->slot ? cur->mark_b : cur->mark_a)) < 0 ||
                            (k = msg_genmark(bt, NFT_MSG_DELSETELEM, n, 0, 0)) < 0))
                return k;
        if (cur->has_b && (k = msg_genmark(bt, NFT_MSG_DELSETELEM, n, 0, 1)) < 0)
                return k;
        if ((k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, CORE_NFT_SLOT_B_SET, n, NULL, 0, NULL, 0, NULL)) < 0 ||
            (k = msg_keyed_elem(bt, NFT_MSG_DELSETELEM, CORE_NFT_SLOT_B_SET, n, NULL, 0, NULL, 0, NULL)) < 0)
                return k;
        return msg_pins_drop(bt, n, rec, NULL, 0);
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
                int k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, v6 ? CORE_NFT_PINS6_SET : CORE_NFT_PINS4_SET, n,
                                       pins[i].addr.bytes, v6 ? 16 : 4, NULL, (uint64_t) ttl * 1000, text);
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
 * kernel may make the elements a transaction adds to an interval set
 * visible to lookups only as that transaction ends, after its other
 * elements already apply: a packet meeting the new policy in between would
 * miss `@allow4` and be denied although both policies allow it. So a
 * custom policy's ranges are put in here, in a batch of their own,
 * committed before the batch that points the session at them. Each
 * session has two slots of keyed sets (allow4 and allow4_b, ...): the
 * slot the session does not use, which no rule looks up for it yet, takes
 * the new ranges (after whatever an earlier failed change left there, as
 * `rec` recorded it), an element-only batch; the change's second batch
 * moves the session's slot_b element. `create` (the session has no custom
 * policy yet): the other slot's leftovers are deleted too. Fills `slot`;
 * 0, or a negative errno with *ret_err filled. */
static int stage_ranges(const names *n, const pol_policy *p, int slot, bool create, if_pins *rec, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        slot_ranges next = {};
        int k;
        if ((k = policy_ranges(p, &next)) < 0 || (k = core_nft_batch_new(&bt)) < 0 ||
            (k = msg_slot_ranges(bt, NFT_MSG_DELSETELEM, n, slot, &rec->loaded[slot])) < 0 ||
            (create && (k = msg_slot_ranges(bt, NFT_MSG_DELSETELEM, n, 1 - slot, &rec->loaded[1 - slot])) < 0) ||
            (k = msg_slot_ranges(bt, NFT_MSG_NEWSETELEM, n, slot, &next)) < 0) {
                slot_ranges_done(&next);
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname, strerror(-k));
        }
        if ((k = core_nft_batch_send(bt, ret_err)) < 0) {
                slot_ranges_done(&next);
                return k;
        }
        slot_ranges_done(&rec->loaded[slot]);
        rec->loaded[slot] = next;
        if (create)
                slot_ranges_done(&rec->loaded[1 - slot]);
        return 0;
}

/* The rest of a custom policy, after stage_ranges(): its generation, the
 * carried pins, the dispatch elements that send its packets to the shared
 * chains, its gateway services and its element of `proxied`. */
static int add_custom(core_nft_batch *bt, const names *n, struct in_addr gateway, const pol_nft_carried_pin *pins,
                      size_t n_pins) {
        static const elem_verdict go = { NFT_GOTO, POL_NFT_CUSTOM_CHAIN }, go_reply = { NFT_GOTO, POL_NFT_REPLY_CHAIN };
        /* A jump, as host_maps in libcore/nft.c requires: input's rejects
         * still follow if the chain ever returns. */
        static const elem_verdict jump = { NFT_JUMP, POL_NFT_GATEWAY_CHAIN };
        int k;
        if ((k = msg_gens(bt, NFT_MSG_NEWSETELEM, n, n->mark)) < 0 ||
            (k = msg_genmark(bt, NFT_MSG_NEWSETELEM, n, n->mark, 0)) < 0 || (k = add_pins(bt, n, pins, n_pins)) < 0 ||
            (k = msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, &go)) < 0 ||
            (k = msg_map_elem(bt, CORE_NFT_SESSIONS_REPLY_MAP, n, &go_reply)) < 0 ||
            (k = msg_gateway(bt, NFT_MSG_NEWSETELEM, n, gateway, false, NULL)) < 0 ||
            (n->has_gw6 && (k = msg_gateway(bt, NFT_MSG_NEWSETELEM, n, gateway, true, &n->gw6)) < 0) ||
            (k = msg_map_elem(bt, CORE_NFT_SESSIONS_INPUT_MAP, n, &jump)) < 0)
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
 * gateway's port 53 is translated to the host's resolver by the shared
 * chain dns_forward:
 *     dnat ip to iifname . ip daddr . meta l4proto . th dport map @dnsfwd
 * with the session's elements `"<if>" . <gateway> . udp . 53 : <upstream>`
 * (and tcp) and its element `"<if>" : jump dns_forward` of
 * `sessions_nat`. The translated packet is then forwarded (and
 * masqueraded) as the session's own, so the host-wide rules still apply
 * to it. */

static uint32_t dns_upstream_be; /* network order; 0: none */

void pol_nft_set_dns_upstream(struct in_addr upstream) {
        __atomic_store_n(&dns_upstream_be, upstream.s_addr, __ATOMIC_RELEASE);
}

static struct in_addr dns_upstream_get(void) {
        return (struct in_addr) { __atomic_load_n(&dns_upstream_be, __ATOMIC_ACQUIRE) };
}

/* What a mode adds after the purge; p NULL: nothing (remove). The reply
 * direction (`sessions_reply`): allow-all accepts it whatever the flow's
 * generation, deny-all has no element, so the host forward chain drops it.
 * *ret_dns: the upstream an allow-all session's DNS now goes to (0.0.0.0:
 * none). */
static int add_mode(core_nft_batch *bt, const names *n, const pol_policy *p, struct in_addr gateway,
                    const pol_nft_carried_pin *pins, size_t n_pins, struct in_addr *ret_dns) {
        static const elem_verdict accept = { NF_ACCEPT, NULL }, deny = { NFT_GOTO, CORE_NFT_DENY_CHAIN };
        static const elem_verdict jump_nat = { NFT_JUMP, POL_NFT_DNS_FORWARD_CHAIN };
        struct in_addr up = dns_upstream_get();
        int k;
        *ret_dns = (struct in_addr) {};
        if (!p)
                return 0;
        switch (p->mode) {
        case POL_MODE_ALLOW_ALL:
                if ((k = msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, &accept)) < 0 ||
                    (k = msg_map_elem(bt, CORE_NFT_SESSIONS_REPLY_MAP, n, &accept)) < 0)
                        return k;
                /* Without an upstream the gateway's port 53 meets the input
                 * chain's rejects: lookups fail at once. */
                if (!up.s_addr)
                        return 0;
                if ((k = msg_dnsfwd(bt, NFT_MSG_NEWSETELEM, n, gateway, up)) < 0 ||
                    (k = msg_map_elem(bt, CORE_NFT_SESSIONS_NAT_MAP, n, &jump_nat)) < 0)
                        return k;
                *ret_dns = up;
                return 0;
        case POL_MODE_DENY_ALL: return msg_map_elem(bt, CORE_NFT_SESSIONS_MAP, n, &deny);
        case POL_MODE_CUSTOM: return add_custom(bt, n, gateway, pins, n_pins);
        }
        return -EINVAL;
}

/* A custom policy replacing a custom policy: the dispatch elements and
 * gateway services stay as they are (they depend on the interface alone),
 * and the change is two element-only batches: the unused slot's ranges
 * (stage_ranges), then one batch that moves the session to that slot
 * (slot_b), to the new generation (gens, and the slot's genmark map: every
 * flow of an older one is judged again on its next packet), drops the old
 * policy's DNS pins but the carried ones, and deletes the ranges of the
 * slot left behind. No rule, chain, set or verdict-map element is added,
 * and every set is one of the table's first few, found by name at once:
 * the cost does not grow with the number of sessions (issue #23). */
static int change_custom(names *n, const current *cur, const pol_policy *p, const pol_nft_carried_pin *pins,
                         size_t n_pins, if_pins *rec, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        int slot = 1 - cur->slot, k;
        bool had = slot ? cur->has_b : true; /* the new slot's genmark element */
        if ((k = stage_ranges(n, p, slot, false, rec, ret_err)) < 0)
                return k;
        /* The slot left behind is emptied in the same batch, so nothing of
         * the replaced policy stays loaded. A packet the old slot's chain
         * was judging as this commits sees those ranges gone at some point:
         * it can then be accepted only by a pin, which the new policy
         * allows (the carried ones, judged again), and is marked with the
         * old slot's generation, so its flow is judged again on its next
         * packet. */
        if ((k = core_nft_batch_new(&bt)) < 0 ||
            (k = msg_keyed_elem(bt, slot ? NFT_MSG_NEWSETELEM : NFT_MSG_DELSETELEM, CORE_NFT_SLOT_B_SET, n, NULL, 0,
                                NULL, 0, NULL)) < 0 ||
            (k = msg_gens(bt, NFT_MSG_DELSETELEM, n, cur->slot ? cur->mark_b : cur->mark_a)) < 0 ||
            (k = msg_gens(bt, NFT_MSG_NEWSETELEM, n, n->mark)) < 0 ||
            (had && (k = msg_genmark(bt, NFT_MSG_DELSETELEM, n, 0, slot)) < 0) ||
            (k = msg_genmark(bt, NFT_MSG_NEWSETELEM, n, n->mark, slot)) < 0 ||
            (k = msg_pins_drop(bt, n, rec, pins, n_pins)) < 0 || (k = add_pins(bt, n, pins, n_pins)) < 0 ||
            (k = msg_slot_ranges(bt, NFT_MSG_DELSETELEM, n, cur->slot, &rec->loaded[cur->slot])) < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname,
                                    strerror(-k));
        if ((k = core_nft_batch_send(bt, ret_err)) < 0)
                return k;
        slot_ranges_done(&rec->loaded[cur->slot]);
        return 0;
}

static int change_locked(names *n, const pol_policy *p, struct in_addr gateway, const pol_nft_carried_pin *pins,
                         size_t n_pins, if_pins *rec, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        bool custom = p && p->mode == POL_MODE_CUSTOM;
        struct in_addr dns = {};
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
        if (custom && cur.custom)
                return change_custom(n, &cur, p, pins, n_pins, rec, ret_err);
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
        if (custom && (k = stage_ranges(n, p, 0, true, rec, ret_err)) < 0)
                return k;
        if ((k = core_nft_batch_new(&bt)) < 0 || (k = purge(bt, n, &cur, custom, rec)) < 0 ||
            (k = add_mode(bt, n, p, gateway, pins, n_pins, &dns)) < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch for %s: %s", n->ifname,
                                    strerror(-k));
        if ((k = core_nft_batch_send(bt, ret_err)) < 0)
                return k;
        /* What the batch left, for the next change to delete. */
        if (!custom)
                for (int slot = 0; slot < 2; slot++)
                        slot_ranges_done(&rec->loaded[slot]);
        rec->gw = custom;
        rec->gw_addr = gateway;
        rec->gw6 = custom && n->has_gw6;
        rec->gw6_addr = n->gw6;
        rec->dns = dns.s_addr != 0;
        rec->dns_gw = gateway;
        rec->dns_up = dns;
        return 0;
}

/* One change of the session's elements, under pin_lock (a pin of the same
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
        if_pins *rec = pins_of(ifname, true);
        if (!rec)
                k = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "nftables: %s: out of memory", ifname);
        else if ((k = change_locked(&n, p, gateway, pins, n_pins, rec, ret_err)) >= 0) {
                rec->custom = custom;
                pins_replace(rec, custom ? pins : NULL, custom ? n_pins : 0);
        }
        pthread_mutex_unlock(&pin_lock);
        return k;
}

/* The gateway is where the sandbox's resolv.conf points: a unicast host
 * address. 0.0.0.0, broadcast, loopback or multicast would be a caller bug
 * that points the gateway services at something other than the veth. */
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
                 (k = msg_keyed_elem(bt, NFT_MSG_NEWSETELEM, v6 ? CORE_NFT_PINS6_SET : CORE_NFT_PINS4_SET, &n, addr->bytes, v6 ? 16 : 4,
                                     NULL, ms, text)) < 0)
                k = sb_error_set(ret_err, k, NULL, NULL, "nftables: build batch: %s", strerror(-k));
        else if ((k = core_nft_batch_send(bt, ret_err)) >= 0)
                /* The kernel dates the element's timeout from its commit,
                 * after the record's date above: dated again from the
                 * ack, the record outlives the element, so an update or
                 * delete never skips a pin the kernel still holds as one
                 * it thinks expired (msg_pins_drop). */
                (void) pins_add(rec, addr, ms);
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

/* r[0] IPv4, r[1] IPv6, into pol_nft_range (network order). */
static int export_ranges(const ranges r[2], pol_nft_range **ret, size_t *ret_n) {
        _cleanup_free_ pol_nft_range *v = NULL;
        size_t n = 0;
        for (int v6 = 0; v6 < 2; v6++)
                for (size_t i = 0; i < r[v6].n; i++) {
                        uint8_t lo[16], hi[16];
                        addr_to(r[v6].v[i].lo, v6, lo);
                        addr_to(r[v6].v[i].hi, v6, hi);
                        if (out_add(&v, &n, v6 ? AF_INET6 : AF_INET, lo, hi, addr_len(v6)) < 0)
                                return -ENOMEM;
                }
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

int pol_nft_forbidden(const pol_policy *p, pol_nft_range **ret, size_t *ret_n) {
        ranges r[2] = {};
        int k = forbidden_ranges(p, &r[0]);
        if (k >= 0)
                k = forbidden_ranges6(p, &r[1]);
        if (k >= 0)
                k = export_ranges(r, ret, ret_n);
        ranges_done(&r[0]);
        ranges_done(&r[1]);
        return k;
}

int pol_nft_cidr_ranges(const pol_cidr *c, size_t n, pol_nft_range **ret, size_t *ret_n) {
        ranges r[2] = {};
        int k = ranges_from_cidrs(&r[0], c, n, false);
        if (k >= 0)
                k = ranges_from_cidrs(&r[1], c, n, true);
        if (k >= 0)
                k = export_ranges(r, ret, ret_n);
        ranges_done(&r[0]);
        ranges_done(&r[1]);
        return k;
}
