/* The table `inet sandboxd-pod` inside a pod sandbox's network namespace
 * (see policy/nftpod.h): built from the same policy decisions as a
 * session's chains (pol_packet_steps, pol_nft_forbidden), sent as one
 * libnftnl batch through libcore's batch from a thread that joined the
 * pod's namespace. */
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/rtnetlink.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "libcore/net.h"
#include "libcore/util.h"
#include "policy/nftexpr.h"
#include "policy/nftgen.h"
#include "policy/nftpod.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_chain, nftnl_chain_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_rule, nftnl_rule_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set, nftnl_set_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_table, nftnl_table_free);

/* Hook priorities (nftables' named ones, linux/netfilter_ipv4.h): right
 * after conntrack (-200), so `ct direction` is known and before mangle
 * (-150), dstnat (-100) and filter (0); postrouting after srcnat (100). */
#define PRIO_OUTPUT (-199)
#define PRIO_POSTROUTING 400
#define PRIO_DSTNAT (-100)

#define NFT_TYPE_IPADDR 7  /* nftables src/datatype.h */
#define NFT_TYPE_IP6ADDR 8

static const struct {
        const char *name;
        uint32_t key_len, key_type, flags;
} pod_sets[] = {
        { "allow4", 4, NFT_TYPE_IPADDR, NFT_SET_INTERVAL },
        { "allow6", 16, NFT_TYPE_IP6ADDR, NFT_SET_INTERVAL },
        { "dns4", 4, NFT_TYPE_IPADDR, NFT_SET_TIMEOUT },
        { "dns6", 16, NFT_TYPE_IP6ADDR, NFT_SET_TIMEOUT },
};

/* ---- rule building ---- */

/* meta oifname "lo". */
static int add_oif_lo(struct nftnl_rule *r) {
        char name[IFNAMSIZ] = "lo";
        int k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_OIFNAME, NFTNL_EXPR_META_DREG);
        return k < 0 ? k : pol_nftx_cmp(r, name, sizeof(name));
}

/* ct direction reply. */
static int add_ct_reply(struct nftnl_rule *r) {
        uint8_t dir = 1; /* IP_CT_DIR_REPLY (linux/netfilter/nf_conntrack_tuple_common.h) */
        int k = pol_nftx_load(r, "ct", NFTNL_EXPR_CT_KEY, NFT_CT_DIRECTION, NFTNL_EXPR_CT_DREG);
        return k < 0 ? k : pol_nftx_cmp(r, &dir, 1);
}

static int add_ct_related(struct nftnl_rule *r) {
        return pol_nftx_ct_bits(r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_RELATED));
}

/* ct state new fib saddr type != local: the first packet of a flow whose
 * source is not an address of the namespace (a raw socket's forged
 * header). The kernel's fib expression (net/netfilter/nft_fib.c) may look
 * up an address type in the output hook when neither iif nor oif is
 * asked; RTN_LOCAL is linux/rtnetlink.h's. */
static int add_new_foreign_saddr(struct nftnl_rule *r) {
        uint32_t local = RTN_LOCAL;
        struct nftnl_expr *e;
        int k = pol_nftx_ct_bits(r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_NEW));
        if (k < 0)
                return k;
        if ((e = nftnl_expr_alloc("fib"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, NFTA_FIB_F_SADDR);
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE);
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, NFT_REG_1);
        }
        if ((k = pol_nftx_expr(r, e)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("cmp"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_NEQ);
                nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, &local, sizeof(local));
        }
        return pol_nftx_expr(r, e);
}

static int add_nfproto(struct nftnl_rule *r, uint8_t fam) {
        int k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_NFPROTO, NFTNL_EXPR_META_DREG);
        return k < 0 ? k : pol_nftx_cmp(r, &fam, 1);
}

static int add_l4proto(struct nftnl_rule *r, uint8_t proto) {
        int k = pol_nftx_load(r, "meta", NFTNL_EXPR_META_KEY, NFT_META_L4PROTO, NFTNL_EXPR_META_DREG);
        return k < 0 ? k : pol_nftx_cmp(r, &proto, 1);
}

/* meta l4proto proto th dport port. */
static int add_dport(struct nftnl_rule *r, uint8_t proto, uint16_t port) {
        uint16_t be = htons(port);
        int k;
        if ((k = add_l4proto(r, proto)) < 0 || (k = pol_nftx_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2)) < 0)
                return k;
        return pol_nftx_cmp(r, &be, 2);
}

/* meta nfproto F ip(6) daddr LO-HI. */
static int add_daddr_range(struct nftnl_rule *r, const pol_nft_range *x) {
        bool v6 = x->family == AF_INET6;
        uint32_t len = v6 ? 16 : 4;
        struct nftnl_expr *e;
        int k;
        if ((k = add_nfproto(r, v6 ? NFPROTO_IPV6 : NFPROTO_IPV4)) < 0 ||
            (k = pol_nftx_payload(r, NFT_PAYLOAD_NETWORK_HEADER, v6 ? 24 : 16, len)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("range"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_OP, NFT_RANGE_EQ);
                nftnl_expr_set(e, NFTNL_EXPR_RANGE_FROM_DATA, x->lo, len);
                nftnl_expr_set(e, NFTNL_EXPR_RANGE_TO_DATA, x->hi, len);
        }
        return pol_nftx_expr(r, e);
}

/* meta nfproto F ip(6) daddr @set. */
static int add_daddr_lookup(struct nftnl_rule *r, const char *set, bool v6) {
        struct nftnl_expr *e;
        int k;
        if ((k = add_nfproto(r, v6 ? NFPROTO_IPV6 : NFPROTO_IPV4)) < 0 ||
            (k = pol_nftx_payload(r, NFT_PAYLOAD_NETWORK_HEADER, v6 ? 24 : 16, v6 ? 16 : 4)) < 0)
                return k;
        if ((e = nftnl_expr_alloc("lookup"))) {
                nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
        }
        return pol_nftx_expr(r, e);
}

static int add_reject(struct nftnl_rule *r, bool tcp) {
        struct nftnl_expr *e = nftnl_expr_alloc("reject");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE, tcp ? NFT_REJECT_TCP_RST : NFT_REJECT_ICMPX_UNREACH);
                nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE, tcp ? 0 : NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
        }
        return pol_nftx_expr(r, e);
}

static int add_redirect(struct nftnl_rule *r) {
        return pol_nftx_expr(r, nftnl_expr_alloc("redir"));
}

/* ---- messages ---- */

static int msg_table(core_nft_batch *bt, uint16_t type, uint16_t flags, const char *digest) {
        _cleanup_(nftnl_table_freep) struct nftnl_table *t = nftnl_table_alloc();
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "table inet %s", POL_POD_TABLE);
        if (!t || !buf)
                return -ENOMEM;
        nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
        if (nftnl_table_set_str(t, NFTNL_TABLE_NAME, POL_POD_TABLE) < 0 ||
            (digest && nftnl_table_set_data(t, NFTNL_TABLE_USERDATA, digest, (uint32_t) strlen(digest) + 1) < 0))
                return -ENOMEM;
        nftnl_table_nlmsg_build_payload(nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, flags | NLM_F_ACK, seq), t);
        return core_nft_batch_commit(bt);
}

/* A chain; `hook` < 0: a regular one. */
static int msg_chain(core_nft_batch *bt, const char *name, int hook, int prio, const char *type) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = nftnl_chain_alloc();
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "chain %s", name);
        if (!c || !buf)
                return -ENOMEM;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
        if (nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, POL_POD_TABLE) < 0 ||
            nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name) < 0)
                return -ENOMEM;
        if (hook >= 0) {
                nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t) hook);
                nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
                nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
                if (nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type) < 0)
                        return -ENOMEM;
        }
        nftnl_chain_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWCHAIN, NFPROTO_INET, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, seq), c);
        return core_nft_batch_commit(bt);
}

static struct nftnl_set *new_set(const char *name) {
        struct nftnl_set *s = nftnl_set_alloc();
        if (!s)
                return NULL;
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        if (nftnl_set_set_str(s, NFTNL_SET_TABLE, POL_POD_TABLE) < 0 || nftnl_set_set_str(s, NFTNL_SET_NAME, name) < 0) {
                nftnl_set_free(s);
                return NULL;
        }
        return s;
}

static int msg_set(core_nft_batch *bt, size_t i) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(pod_sets[i].name);
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s", pod_sets[i].name);
        if (!s || !buf)
                return -ENOMEM;
        nftnl_set_set_u32(s, NFTNL_SET_ID, seq);
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, pod_sets[i].flags);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, pod_sets[i].key_type);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, pod_sets[i].key_len);
        if (pod_sets[i].flags & NFT_SET_TIMEOUT)
                nftnl_set_set_u32(s, NFTNL_SET_DESC_SIZE, POL_NFT_PIN_MAX);
        nftnl_set_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWSET, NFPROTO_INET, NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK, seq), s);
        return core_nft_batch_commit(bt);
}

static bool all_ones(const uint8_t *b, size_t len) {
        for (size_t i = 0; i < len; i++)
                if (b[i] != 0xff)
                        return false;
        return true;
}

/* One interval of an interval set: its start and, unless it runs to the
 * family's last address, the end element one past it (nft's encoding). */
static int msg_range_elem(core_nft_batch *bt, const char *set, const pol_nft_range *x) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(set);
        size_t len = x->family == AF_INET6 ? 16 : 4;
        uint8_t end[16];
        char lo[INET6_ADDRSTRLEN], hi[INET6_ADDRSTRLEN];
        uint32_t seq;
        inet_ntop(x->family, x->lo, lo, sizeof(lo));
        inet_ntop(x->family, x->hi, hi, sizeof(hi));
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s-%s", set, lo, hi);
        memcpy(end, x->hi, len);
        for (size_t i = len; i-- > 0;)
                if (++end[i] != 0)
                        break;
        if (!s || !buf || pol_nftx_key_elem(s, x->lo, len, 0, 0) < 0 ||
            (!all_ones(x->hi, len) && pol_nftx_key_elem(s, end, len, NFT_SET_ELEM_INTERVAL_END, 0) < 0))
                return -ENOMEM;
        nftnl_set_elems_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWSETELEM, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, seq), s);
        return core_nft_batch_commit(bt);
}

/* A rule built by the caller (`r`), labelled `text` for errors. */
static int msg_rule(core_nft_batch *bt, const char *chain, struct nftnl_rule *r, const char *text) {
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "rule '%s: %s'", chain, text);
        if (!buf)
                return -ENOMEM;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, POL_POD_TABLE) < 0 || nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain) < 0)
                return -ENOMEM;
        nftnl_rule_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_INET, NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq), r);
        return core_nft_batch_commit(bt);
}

/* ---- the table ---- */

/* What a policy chain does with a refused packet: goto deny_out in the
 * output hook (reset or ICMP, the client fails at once), drop in
 * postrouting (reject is not allowed there). */
typedef struct deny_kind {
        const char *chain;
        bool post;
} deny_kind;

/* Appends one rule made by `build` (may be NULL: the verdict alone) and
 * ending in accept (`accept`) or the deny verdict. */
typedef int (*rule_fn)(struct nftnl_rule *r, const void *arg);

static int put_rule(core_nft_batch *bt, const char *chain, rule_fn build, const void *arg, int verdict,
                    const char *to, const char *text) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
        int k;
        if (!r)
                return -ENOMEM;
        if (build && (k = build(r, arg)) < 0)
                return k;
        if ((k = pol_nftx_verdict(r, verdict, to)) < 0)
                return k;
        return msg_rule(bt, chain, r, text);
}

static int put_deny(core_nft_batch *bt, const deny_kind *d, rule_fn build, const void *arg, const char *text) {
        return put_rule(bt, d->chain, build, arg, d->post ? NF_DROP : NFT_GOTO, d->post ? NULL : "deny_out", text);
}

static int b_oif_lo(struct nftnl_rule *r, const void *arg) { (void) arg; return add_oif_lo(r); }
static int b_ct_reply(struct nftnl_rule *r, const void *arg) { (void) arg; return add_ct_reply(r); }
static int b_ct_related(struct nftnl_rule *r, const void *arg) { (void) arg; return add_ct_related(r); }
static int b_new_foreign_saddr(struct nftnl_rule *r, const void *arg) { (void) arg; return add_new_foreign_saddr(r); }
static int b_range(struct nftnl_rule *r, const void *arg) { return add_daddr_range(r, arg); }
static int b_lookup4(struct nftnl_rule *r, const void *arg) { return add_daddr_lookup(r, arg, false); }
static int b_lookup6(struct nftnl_rule *r, const void *arg) { return add_daddr_lookup(r, arg, true); }

typedef struct port_arg {
        uint8_t proto;
        uint16_t port;
        bool v4_only;
} port_arg;

static int b_port(struct nftnl_rule *r, const void *arg) {
        const port_arg *p = arg;
        int k = p->v4_only ? add_nfproto(r, NFPROTO_IPV4) : 0;
        return k < 0 ? k : add_dport(r, p->proto, p->port);
}

static const port_arg dns_udp = { IPPROTO_UDP, 53, true }, dns_tcp = { IPPROTO_TCP, 53, true };

/* The first rules of both filter hooks: answers to inbound flows and
 * their errors pass, then (output) a new flow from a source that is not
 * the namespace's is dropped, then the pod's loopback passes; in output,
 * IPv4 DNS passes on to the dns chain's redirect. The forged source comes
 * before loopback: root inside with raw sockets (CAP_NET_RAW without a
 * user namespace) sent itself, over loopback, a packet "from" another
 * host, which conntrack took for an inbound flow whose reply direction
 * then passed to that host past any policy. */
static int put_prologue(core_nft_batch *bt, const char *chain, bool output, const char *policy_chain) {
        int k;
        if ((k = put_rule(bt, chain, b_ct_reply, NULL, NF_ACCEPT, NULL, "ct direction reply accept")) < 0 ||
            (k = put_rule(bt, chain, b_ct_related, NULL, NF_ACCEPT, NULL, "ct state related accept")) < 0)
                return k;
        if (output && (k = put_rule(bt, chain, b_new_foreign_saddr, NULL, NF_DROP, NULL,
                                    "ct state new fib saddr type != local drop")) < 0)
                return k;
        if ((k = put_rule(bt, chain, b_oif_lo, NULL, NF_ACCEPT, NULL, "oifname \"lo\" accept")) < 0)
                return k;
        if (output && ((k = put_rule(bt, chain, b_port, &dns_udp, NF_ACCEPT, NULL, "udp dport 53 accept")) < 0 ||
                       (k = put_rule(bt, chain, b_port, &dns_tcp, NF_ACCEPT, NULL, "tcp dport 53 accept")) < 0))
                return k;
        return put_rule(bt, chain, NULL, NULL, NFT_GOTO, policy_chain, "goto policy");
}

static int put_ranges(core_nft_batch *bt, const deny_kind *d, const pol_nft_range *v, size_t n) {
        for (size_t i = 0; i < n; i++) {
                char lo[INET6_ADDRSTRLEN], hi[INET6_ADDRSTRLEN], text[2 * INET6_ADDRSTRLEN + 40];
                inet_ntop(v[i].family, v[i].lo, lo, sizeof(lo));
                inet_ntop(v[i].family, v[i].hi, hi, sizeof(hi));
                snprintf(text, sizeof(text), "%s daddr %s-%s deny", v[i].family == AF_INET6 ? "ip6" : "ip", lo, hi);
                int k = put_deny(bt, d, b_range, &v[i], text);
                if (k < 0)
                        return k;
        }
        return 0;
}

/* The ranges refused before any allow step (nftpod.h): `never`, the
 * forbidden ranges under p, and for a custom policy subnets.deny and the
 * cluster CIDRs no subnets.allow entry overlaps. */
static int denied_ranges(const pol_policy *p, const pol_pod_ranges *pr, pol_nft_range **ret, size_t *ret_n) {
        _cleanup_free_ pol_cidr *c = calloc(pr->n_never + pr->n_cluster + p->n_subnet_deny + 1, sizeof(*c));
        _cleanup_free_ pol_nft_range *f = NULL, *g = NULL;
        size_t n = 0, nf = 0, ng = 0;
        if (!c)
                return -ENOMEM;
        for (size_t i = 0; i < pr->n_never; i++)
                c[n++] = pr->never[i];
        if (p->mode == POL_MODE_CUSTOM) {
                for (size_t i = 0; i < p->n_subnet_deny; i++)
                        c[n++] = p->subnet_deny[i];
                for (size_t i = 0; i < pr->n_cluster; i++) {
                        bool opened = false;
                        for (size_t j = 0; j < p->n_subnet_allow && !opened; j++)
                                opened = pol_cidr_contains(&pr->cluster[i], &p->subnet_allow[j].addr) ||
                                         pol_cidr_contains(&p->subnet_allow[j], &pr->cluster[i].addr);
                        if (!opened)
                                c[n++] = pr->cluster[i];
                }
        }
        int k = pol_nft_cidr_ranges(c, n, &f, &nf);
        if (k >= 0)
                k = pol_nft_forbidden(p, &g, &ng);
        if (k < 0)
                return k;
        pol_nft_range *v = reallocarray(f, nf + ng + 1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        f = NULL;
        if (ng)
                memcpy(v + nf, g, ng * sizeof(*v));
        *ret = v;
        *ret_n = nf + ng;
        return 0;
}

/* One policy chain (policy_out or policy_post), in the order of
 * pol_packet_steps() for a custom policy. */
static int put_policy(core_nft_batch *bt, const deny_kind *d, const pol_policy *p, const pol_nft_range *denied,
                      size_t n_denied) {
        int k;
        if (p->mode == POL_MODE_DENY_ALL)
                return put_deny(bt, d, NULL, NULL, "deny-all");
        if (p->mode == POL_MODE_ALLOW_ALL) {
                if ((k = put_ranges(bt, d, denied, n_denied)) < 0)
                        return k;
                return put_rule(bt, d->chain, NULL, NULL, NF_ACCEPT, NULL, "allow-all accept");
        }
        size_t n_steps;
        const pol_packet_step *steps = pol_packet_steps(&n_steps);
        for (size_t i = 0; i < n_steps; i++) {
                switch (steps[i].kind) {
                case POL_STEP_ADDRESS_DENY:
                        k = put_ranges(bt, d, denied, n_denied);
                        break;
                case POL_STEP_PORT: {
                        port_arg pa = { steps[i].l4proto, steps[i].port, false };
                        k = put_deny(bt, d, b_port, &pa, steps[i].rule ? steps[i].rule : "port deny");
                        break;
                }
                case POL_STEP_SUBNET_ALLOW:
                        if ((k = put_rule(bt, d->chain, b_lookup4, "allow4", NF_ACCEPT, NULL, "ip daddr @allow4 accept")) >= 0)
                                k = put_rule(bt, d->chain, b_lookup6, "allow6", NF_ACCEPT, NULL, "ip6 daddr @allow6 accept");
                        break;
                case POL_STEP_DNS_PIN:
                        if ((k = put_rule(bt, d->chain, b_lookup4, "dns4", NF_ACCEPT, NULL, "ip daddr @dns4 accept")) >= 0)
                                k = put_rule(bt, d->chain, b_lookup6, "dns6", NF_ACCEPT, NULL, "ip6 daddr @dns6 accept");
                        break;
                default:
                        k = put_deny(bt, d, NULL, NULL, "default deny");
                }
                if (k < 0)
                        return k;
        }
        return 0;
}

static int put_deny_out(core_nft_batch *bt) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r2 = nftnl_rule_alloc();
        int k;
        if (!r || !r2)
                return -ENOMEM;
        if ((k = add_l4proto(r, IPPROTO_TCP)) < 0 || (k = add_reject(r, true)) < 0 ||
            (k = msg_rule(bt, "deny_out", r, "meta l4proto tcp reject with tcp reset")) < 0)
                return k;
        if ((k = add_reject(r2, false)) < 0)
                return k;
        return msg_rule(bt, "deny_out", r2, "reject with icmpx admin-prohibited");
}

static int put_dns_redirect(core_nft_batch *bt) {
        const port_arg *dns[] = { &dns_udp, &dns_tcp };
        for (size_t i = 0; i < ELEMENTSOF(dns); i++) {
                _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
                int k;
                if (!r)
                        return -ENOMEM;
                if ((k = b_port(r, dns[i])) < 0 || (k = add_redirect(r)) < 0 ||
                    (k = msg_rule(bt, "dns", r, i ? "tcp dport 53 redirect" : "udp dport 53 redirect")) < 0)
                        return k;
        }
        return 0;
}

/* FNV-1a 64 over the policy's normalised JSON and the ranges: what the
 * table records as its userdata ("v2:<hex>"; the version names the
 * rules' layout: a table an older daemon built is rebuilt, not kept). */
static int digest_of(const pol_policy *p, const pol_pod_ranges *pr, char *buf, size_t size) {
        cJSON *j = pol_policy_to_json(p, false);
        _cleanup_free_ char *text = j ? cJSON_PrintUnformatted(j) : NULL;
        cJSON_Delete(j);
        if (!text)
                return -ENOMEM;
        uint64_t h = 0xcbf29ce484222325ULL;
#define MIX(ptr, len)                                                        \
        for (size_t _i = 0; _i < (len); _i++) {                                 \
                h ^= ((const uint8_t *) (ptr))[_i];                             \
                h *= 0x100000001b3ULL;                                          \
        }
        MIX(text, strlen(text));
        /* The CIDRs as text: a pol_cidr's bytes past its family's length
         * are not defined. */
        for (size_t i = 0; i < pr->n_never + pr->n_cluster; i++) {
                char c[64];
                const pol_cidr *x = i < pr->n_never ? &pr->never[i] : &pr->cluster[i - pr->n_never];
                pol_cidr_format(x, c, sizeof(c));
                MIX(i == pr->n_never ? "|" : ",", 1);
                MIX(c, strlen(c));
        }
#undef MIX
        snprintf(buf, size, "v2:%016llx", (unsigned long long) h);
        return 0;
}

static int build_table(core_nft_batch *bt, const pol_policy *p, const pol_pod_ranges *pr, const char *digest) {
        static const deny_kind out = { "policy_out", false }, post = { "policy_post", true };
        _cleanup_free_ pol_nft_range *denied = NULL, *allow = NULL;
        size_t n_denied = 0, n_allow = 0;
        int k;
        if ((k = denied_ranges(p, pr, &denied, &n_denied)) < 0)
                return k;
        if (p->mode == POL_MODE_CUSTOM && (k = pol_nft_cidr_ranges(p->subnet_allow, p->n_subnet_allow, &allow, &n_allow)) < 0)
                return k;
        /* The table whole, replaced: created if missing (no EXCL) so the
         * delete finds one, then made again with nothing of the old. */
        if ((k = msg_table(bt, NFT_MSG_NEWTABLE, NLM_F_CREATE, NULL)) < 0 ||
            (k = msg_table(bt, NFT_MSG_DELTABLE, 0, NULL)) < 0 ||
            (k = msg_table(bt, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL, digest)) < 0)
                return k;
        if (p->mode == POL_MODE_CUSTOM) {
                for (size_t i = 0; i < ELEMENTSOF(pod_sets); i++)
                        if ((k = msg_set(bt, i)) < 0)
                                return k;
                for (size_t i = 0; i < n_allow; i++)
                        if ((k = msg_range_elem(bt, allow[i].family == AF_INET6 ? "allow6" : "allow4", &allow[i])) < 0)
                                return k;
        }
        if ((k = msg_chain(bt, "deny_out", -1, 0, NULL)) < 0 || (k = put_deny_out(bt)) < 0 ||
            (k = msg_chain(bt, out.chain, -1, 0, NULL)) < 0 || (k = put_policy(bt, &out, p, denied, n_denied)) < 0 ||
            (k = msg_chain(bt, post.chain, -1, 0, NULL)) < 0 || (k = put_policy(bt, &post, p, denied, n_denied)) < 0)
                return k;
        if ((k = msg_chain(bt, "output", NF_INET_LOCAL_OUT, PRIO_OUTPUT, "filter")) < 0 ||
            (k = put_prologue(bt, "output", true, out.chain)) < 0 ||
            (k = msg_chain(bt, "postrouting", NF_INET_POST_ROUTING, PRIO_POSTROUTING, "filter")) < 0 ||
            (k = put_prologue(bt, "postrouting", false, post.chain)) < 0 ||
            (k = msg_chain(bt, "dns", NF_INET_LOCAL_OUT, PRIO_DSTNAT, "nat")) < 0 || (k = put_dns_redirect(bt)) < 0)
                return k;
        return 0;
}

/* ---- the namespace thread ---- */

typedef struct ns_job {
        int netns_fd;
        int (*fn)(void *);
        void *userdata;
        int r;
} ns_job;

static void *ns_thread(void *arg) {
        ns_job *j = arg;
        /* CLONE_NEWNET moves this thread alone; it ends right after. */
        if (setns(j->netns_fd, CLONE_NEWNET) < 0)
                j->r = negative_errno();
        else
                j->r = j->fn(j->userdata);
        return NULL;
}

int pol_pod_in_netns(int netns_fd, int (*fn)(void *userdata), void *userdata) {
        ns_job j = { .netns_fd = netns_fd, .fn = fn, .userdata = userdata, .r = -EIO };
        pthread_t t;
        if (netns_fd < 0)
                return -EBADF;
        int k = pthread_create(&t, NULL, ns_thread, &j);
        if (k != 0)
                return -k;
        pthread_join(t, NULL);
        return j.r;
}

typedef struct apply_job {
        const pol_policy *p;
        const pol_pod_ranges *r;
        const pol_addr *pin;
        uint32_t ttl_s;
        bool remove;
        const char *digest;
        char *current;  /* pol_pod_current: the table's userdata */
        sb_error **err;
} apply_job;

static int apply_run(void *userdata) {
        apply_job *j = userdata;
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        int k = core_nft_batch_new(&bt);
        if (k < 0)
                return sb_error_set(j->err, k, NULL, NULL, "nftables: %s", strerror(-k));
        if (j->remove)
                k = msg_table(bt, NFT_MSG_NEWTABLE, NLM_F_CREATE, NULL) < 0 ? -ENOMEM
                                                                             : msg_table(bt, NFT_MSG_DELTABLE, 0, NULL);
        else
                k = build_table(bt, j->p, j->r, j->digest);
        if (k < 0)
                return sb_error_set(j->err, k, NULL, NULL, "nftables: build the pod table: %s", strerror(-k));
        return core_nft_batch_send(bt, j->err);
}

int pol_pod_apply(int netns_fd, const pol_policy *p, const pol_pod_ranges *r, sb_error **ret_err) {
        char digest[32];
        int k = digest_of(p, r, digest, sizeof(digest));
        if (k < 0)
                return sb_error_set(ret_err, k, NULL, NULL, "out of memory");
        apply_job j = { .p = p, .r = r, .digest = digest, .err = ret_err };
        k = pol_pod_in_netns(netns_fd, apply_run, &j);
        if (k < 0 && ret_err && !*ret_err)
                sb_error_set(ret_err, k, NULL, NULL, "enter the pod's network namespace: %s", strerror(-k));
        return k;
}

int pol_pod_remove(int netns_fd, sb_error **ret_err) {
        apply_job j = { .remove = true, .err = ret_err };
        int k = pol_pod_in_netns(netns_fd, apply_run, &j);
        if (k < 0 && ret_err && !*ret_err)
                sb_error_set(ret_err, k, NULL, NULL, "enter the pod's network namespace: %s", strerror(-k));
        return k;
}

static int pin_run(void *userdata) {
        apply_job *j = userdata;
        bool v6 = j->pin->family == AF_INET6;
        const char *set = v6 ? "dns6" : "dns4";
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = new_set(set);
        char a[INET6_ADDRSTRLEN];
        uint32_t seq;
        int k = core_nft_batch_new(&bt);
        if (k < 0 || !s)
                return sb_error_set(j->err, -ENOMEM, NULL, NULL, "out of memory");
        inet_ntop(j->pin->family, j->pin->bytes, a, sizeof(a));
        void *buf = core_nft_batch_reserve(bt, &seq, "set %s element %s", set, a);
        uint32_t ttl = j->ttl_s < POL_NFT_PIN_MIN_TTL ? POL_NFT_PIN_MIN_TTL : j->ttl_s;
        if (!buf || pol_nftx_key_elem(s, j->pin->bytes, v6 ? 16 : 4, 0, (uint64_t) ttl * 1000) < 0)
                return sb_error_set(j->err, -ENOMEM, NULL, NULL, "out of memory");
        nftnl_set_elems_nlmsg_build_payload(
                nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWSETELEM, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, seq), s);
        if ((k = core_nft_batch_commit(bt)) < 0)
                return sb_error_set(j->err, k, NULL, NULL, "nftables: %s", strerror(-k));
        return core_nft_batch_send(bt, j->err);
}

int pol_pod_pin(int netns_fd, const pol_addr *a, uint32_t ttl_s, sb_error **ret_err) {
        apply_job j = { .pin = a, .ttl_s = ttl_s, .err = ret_err };
        if (a->family != AF_INET && a->family != AF_INET6)
                return sb_error_set(ret_err, -EAFNOSUPPORT, NULL, NULL, "pin: not an IP address");
        int k = pol_pod_in_netns(netns_fd, pin_run, &j);
        if (k < 0 && ret_err && !*ret_err)
                sb_error_set(ret_err, k, NULL, NULL, "enter the pod's network namespace: %s", strerror(-k));
        return k;
}

static int table_cb(const struct nlmsghdr *nlh, void *data) {
        apply_job *j = data;
        _cleanup_(nftnl_table_freep) struct nftnl_table *t = nftnl_table_alloc();
        uint32_t len = 0;
        if (!t || nftnl_table_nlmsg_parse(nlh, t) < 0)
                return MNL_CB_OK;
        const char *u = nftnl_table_get_data(t, NFTNL_TABLE_USERDATA, &len);
        if (u && len > 0 && u[len - 1] == 0 && !j->current)
                j->current = strdup(u);
        return MNL_CB_OK;
}

static int current_run(void *userdata) {
        apply_job *j = userdata;
        _cleanup_(nftnl_table_freep) struct nftnl_table *t = nftnl_table_alloc();
        struct mnl_socket *nl = NULL;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        int r;
        if (!t)
                return -ENOMEM;
        nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
        nftnl_table_set_str(t, NFTNL_TABLE_NAME, POL_POD_TABLE);
        if ((r = core_nft_socket_take(&nl, NULL)) < 0)
                return r;
        uint32_t seq = (uint32_t) time(NULL);
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETTABLE, NFPROTO_INET, NLM_F_ACK, seq);
        nftnl_table_nlmsg_build_payload(nlh, t);
        if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
                r = negative_errno();
                core_nft_socket_give(nl, false);
                return r;
        }
        do {
                ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                if (n < 0) {
                        r = negative_errno();
                        core_nft_socket_give(nl, false);
                        return r;
                }
                r = mnl_cb_run(buf, (size_t) n, seq, mnl_socket_get_portid(nl), table_cb, j);
        } while (r > MNL_CB_STOP);
        int e = errno;
        core_nft_socket_give(nl, false);
        if (r < 0 && e == ENOENT)
                return 0;
        return r < 0 ? -e : 0;
}

int pol_pod_current(int netns_fd, const pol_policy *p, const pol_pod_ranges *r) {
        char digest[32];
        apply_job j = { 0 };
        int k = digest_of(p, r, digest, sizeof(digest));
        if (k < 0)
                return k;
        k = pol_pod_in_netns(netns_fd, current_run, &j);
        bool same = k >= 0 && j.current && streq(j.current, digest);
        free(j.current);
        return k < 0 ? k : same;
}
