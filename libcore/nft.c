/* The host-wide nftables table `inet sandboxd`: its base chains and the
 * rules every session shares (no access to the host, to other sandboxes, to
 * link-local, no IPv6; masquerade of the pool), built with libnftnl and sent
 * as one atomic netlink batch through libmnl.
 *
 * The rules are a data table (host_rules below). Each message of the batch
 * asks for an ACK and extended ACKs are on, so every error the kernel
 * reports comes back with the sequence number of the message that caused it
 * and is mapped to that rule's label (libnftnl/nftables' mnl_batch_talk
 * habit): "nftables: rule 'forward: ...': Operation not supported". */
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include "libcore/log.h"
#include "libcore/net.h"
#include "libcore/util.h"

#define TABLE_NAME "sandboxd"
#define SBX_PREFIX "sbx" /* nft compares only the bytes before '*' */
#define MAX_MSGS 32

DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_table, nftnl_table_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_chain, nftnl_chain_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_rule, nftnl_rule_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mnl_nlmsg_batch, mnl_nlmsg_batch_stop);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mnl_socket, mnl_socket_close);

/* ---- the ruleset as data ---- */

enum ifmatch { IF_ANY, IF_SBX, IF_NOT_SBX };
enum addrmatch { ADDR_ANY, DADDR_LINKLOCAL, SADDR_POOL };
enum verdict { V_ACCEPT, V_REJECT_TCP, V_REJECT_ICMPX, V_MASQ };

typedef struct host_rule {
        const char *chain;
        const char *label; /* names the rule in errors */
        enum ifmatch iif, oif;
        uint8_t nfproto;   /* NFPROTO_IPV4 / NFPROTO_IPV6, 0 = any */
        enum addrmatch addr; /* implies nfproto ipv4 */
        bool tcp;          /* meta l4proto tcp */
        bool ct_est_rel;   /* ct state established,related */
        enum verdict verdict;
} host_rule;

typedef struct host_chain {
        const char *name, *type;
        uint32_t hook;
        int32_t prio;
} host_chain;

static const host_chain host_chains[] = {
        { "input", "filter", NF_INET_LOCAL_IN, 0 },
        { "forward", "filter", NF_INET_FORWARD, 0 },
        { "postrouting", "nat", NF_INET_POST_ROUTING, 100 }, /* srcnat */
};

/* DESIGN §5.1 rule 5: a sandbox never reaches the host itself, another
 * sandbox or link-local (cloud metadata), and IPv6 is off (the pool is IPv4
 * only, so any IPv6 would bypass the per-session IPv4 policy). Denied TCP
 * gets a reset and everything else ICMP admin-prohibited so a denied
 * connect fails at once instead of hanging (§5.2). Return traffic for
 * connections the host opened into a sandbox stays allowed. The base chains
 * keep policy accept: sessions' own policies decide everything else. */
static const host_rule host_rules[] = {
        { "input", "input: sbx* ct state established,related accept",
          IF_SBX, IF_ANY, 0, ADDR_ANY, false, true, V_ACCEPT },
        { "input", "input: sbx* tcp reject with tcp reset",
          IF_SBX, IF_ANY, 0, ADDR_ANY, true, false, V_REJECT_TCP },
        { "input", "input: sbx* reject with icmpx admin-prohibited",
          IF_SBX, IF_ANY, 0, ADDR_ANY, false, false, V_REJECT_ICMPX },
        { "forward", "forward: sbx* -> sbx* tcp reject",
          IF_SBX, IF_SBX, 0, ADDR_ANY, true, false, V_REJECT_TCP },
        { "forward", "forward: sbx* -> sbx* reject",
          IF_SBX, IF_SBX, 0, ADDR_ANY, false, false, V_REJECT_ICMPX },
        { "forward", "forward: sbx* -> 169.254.0.0/16 tcp reject",
          IF_SBX, IF_ANY, NFPROTO_IPV4, DADDR_LINKLOCAL, true, false, V_REJECT_TCP },
        { "forward", "forward: sbx* -> 169.254.0.0/16 reject",
          IF_SBX, IF_ANY, NFPROTO_IPV4, DADDR_LINKLOCAL, false, false, V_REJECT_ICMPX },
        { "forward", "forward: sbx* ipv6 tcp reject",
          IF_SBX, IF_ANY, NFPROTO_IPV6, ADDR_ANY, true, false, V_REJECT_TCP },
        { "forward", "forward: sbx* ipv6 reject",
          IF_SBX, IF_ANY, NFPROTO_IPV6, ADDR_ANY, false, false, V_REJECT_ICMPX },
        { "postrouting", "postrouting: pool -> !sbx* masquerade",
          IF_ANY, IF_NOT_SBX, NFPROTO_IPV4, SADDR_POOL, false, false, V_MASQ },
};

/* ---- expression helpers (each returns 0 or -ENOMEM) ---- */

static int add_expr(struct nftnl_rule *r, struct nftnl_expr *e) {
        if (!e)
                return -ENOMEM;
        nftnl_rule_add_expr(r, e);
        return 0;
}

static int add_meta(struct nftnl_rule *r, uint32_t key) {
        struct nftnl_expr *e = nftnl_expr_alloc("meta");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
        }
        return add_expr(r, e);
}

static int add_cmp(struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len) {
        struct nftnl_expr *e = nftnl_expr_alloc("cmp");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
                nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
        }
        return add_expr(r, e);
}

static int add_payload(struct nftnl_rule *r, uint32_t offset, uint32_t len) {
        struct nftnl_expr *e = nftnl_expr_alloc("payload");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
        }
        return add_expr(r, e);
}

static int add_bitwise(struct nftnl_rule *r, const void *mask, const void *xor, uint32_t len) {
        struct nftnl_expr *e = nftnl_expr_alloc("bitwise");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, xor, len);
        }
        return add_expr(r, e);
}

static int add_ifname(struct nftnl_rule *r, uint32_t key, enum ifmatch m) {
        if (m == IF_ANY)
                return 0;
        int ret = add_meta(r, key);
        return ret < 0 ? ret
                       : add_cmp(r, m == IF_SBX ? NFT_CMP_EQ : NFT_CMP_NEQ, SBX_PREFIX,
                                 strlen(SBX_PREFIX));
}

/* ip saddr/daddr within net/prefix. A byte-aligned prefix loads only the
 * prefix bytes (the form nft itself emits, so `nft list` shows a CIDR);
 * otherwise the whole address is loaded and masked. */
static int add_ip_prefix(struct nftnl_rule *r, uint32_t offset, struct in_addr net, unsigned prefix) {
        uint32_t mask = prefix ? htonl(~0u << (32 - prefix)) : 0, zero = 0;
        uint32_t val = net.s_addr & mask;
        int ret;
        if (prefix % 8 == 0) {
                if ((ret = add_payload(r, offset, prefix / 8)) < 0)
                        return ret;
                return add_cmp(r, NFT_CMP_EQ, &val, prefix / 8);
        }
        if ((ret = add_payload(r, offset, 4)) < 0 || (ret = add_bitwise(r, &mask, &zero, 4)) < 0)
                return ret;
        return add_cmp(r, NFT_CMP_EQ, &val, 4);
}

static int add_ct_est_rel(struct nftnl_rule *r) {
        uint32_t mask = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED), zero = 0;
        struct nftnl_expr *e = nftnl_expr_alloc("ct");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
        }
        int ret = add_expr(r, e);
        if (ret >= 0)
                ret = add_bitwise(r, &mask, &zero, sizeof(mask));
        return ret < 0 ? ret : add_cmp(r, NFT_CMP_NEQ, &zero, sizeof(zero));
}

static int add_verdict(struct nftnl_rule *r, enum verdict v) {
        struct nftnl_expr *e;
        switch (v) {
        case V_ACCEPT:
                if ((e = nftnl_expr_alloc("immediate"))) {
                        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
                        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, NF_ACCEPT);
                }
                return add_expr(r, e);
        case V_REJECT_TCP:
        case V_REJECT_ICMPX:
                if ((e = nftnl_expr_alloc("reject"))) {
                        bool tcp = v == V_REJECT_TCP;
                        nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE,
                                           tcp ? NFT_REJECT_TCP_RST : NFT_REJECT_ICMPX_UNREACH);
                        nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE,
                                          tcp ? 0 : NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
                }
                return add_expr(r, e);
        case V_MASQ:
                return add_expr(r, nftnl_expr_alloc("masq"));
        }
        return -EINVAL;
}

/* Builds one rule of host_rules into a libnftnl rule object. */
static int build_rule(const host_rule *hr, const core_net_pool *pool, struct nftnl_rule **ret) {
        const struct in_addr linklocal = { .s_addr = htonl(0xa9fe0000) }; /* 169.254.0.0, RFC 3927 */
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
        uint8_t proto = hr->addr != ADDR_ANY ? NFPROTO_IPV4 : hr->nfproto, tcp = IPPROTO_TCP;
        int k;
        if (!r)
                return -ENOMEM;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, TABLE_NAME) < 0 ||
            nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, hr->chain) < 0)
                return -ENOMEM;
        if ((k = add_ifname(r, NFT_META_IIFNAME, hr->iif)) < 0)
                return k;
        if (proto && ((k = add_meta(r, NFT_META_NFPROTO)) < 0 || (k = add_cmp(r, NFT_CMP_EQ, &proto, 1)) < 0))
                return k;
        if (hr->addr == DADDR_LINKLOCAL && (k = add_ip_prefix(r, 16, linklocal, 16)) < 0)
                return k;
        if (hr->addr == SADDR_POOL && (k = add_ip_prefix(r, 12, pool->base, pool->prefix)) < 0)
                return k;
        /* oifname after the address match: the order nft itself uses, so
         * `nft list` prints the rule the way it is written in host_rules. */
        if ((k = add_ifname(r, NFT_META_OIFNAME, hr->oif)) < 0)
                return k;
        if (hr->tcp && ((k = add_meta(r, NFT_META_L4PROTO)) < 0 || (k = add_cmp(r, NFT_CMP_EQ, &tcp, 1)) < 0))
                return k;
        if (hr->ct_est_rel && (k = add_ct_est_rel(r)) < 0)
                return k;
        if ((k = add_verdict(r, hr->verdict)) < 0)
                return k;
        *ret = TAKE_PTR(r);
        return 0;
}

/* ---- one batch, its ACKs and their mapping back to messages ---- */

typedef struct batch {
        struct mnl_nlmsg_batch *b;
        uint32_t seq0, seq;      /* first and next sequence number */
        const char *kind[MAX_MSGS], *name[MAX_MSGS]; /* per seq - seq0 */
        unsigned acks;           /* messages that asked for an ACK */
        char buf[64 * 1024];
} batch;

static uint32_t next_seq_base(void) {
        /* Distinct per batch so a late ACK of an earlier batch cannot be
         * taken for one of ours. */
        static uint32_t counter;
        if (!counter)
                counter = (uint32_t) time(NULL) << 8;
        return counter += MAX_MSGS;
}

static void batch_init(batch *bt) {
        bt->seq0 = bt->seq = next_seq_base();
        bt->acks = 0;
        bt->b = mnl_nlmsg_batch_start(bt->buf, sizeof(bt->buf));
}

/* Reserves the next message slot: returns its buffer and records a label. */
static void *batch_slot(batch *bt, const char *kind, const char *name, uint32_t *ret_seq) {
        uint32_t i = bt->seq - bt->seq0;
        if (i >= MAX_MSGS)
                return NULL;
        bt->kind[i] = kind;
        bt->name[i] = name;
        *ret_seq = bt->seq++;
        if (kind)
                bt->acks++;
        return mnl_nlmsg_batch_current(bt->b);
}

static int batch_commit_msg(batch *bt) {
        return mnl_nlmsg_batch_next(bt->b) ? 0 : -ENOBUFS;
}

static int batch_table(batch *bt, uint16_t type, uint16_t flags) {
        _cleanup_(nftnl_table_freep) struct nftnl_table *t = nftnl_table_alloc();
        uint32_t seq;
        void *buf = batch_slot(bt, "table", "inet " TABLE_NAME, &seq);
        if (!t || !buf)
                return -ENOMEM;
        nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
        if (nftnl_table_set_str(t, NFTNL_TABLE_NAME, TABLE_NAME) < 0)
                return -ENOMEM;
        struct nlmsghdr *nlh = nftnl_table_nlmsg_build_hdr(buf, type, NFPROTO_INET, flags | NLM_F_ACK, seq);
        nftnl_table_nlmsg_build_payload(nlh, t);
        return batch_commit_msg(bt);
}

static int batch_chain(batch *bt, const host_chain *hc) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = nftnl_chain_alloc();
        uint32_t seq;
        void *buf = batch_slot(bt, "chain", hc->name, &seq);
        if (!c || !buf)
                return -ENOMEM;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
        if (nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, TABLE_NAME) < 0 ||
            nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, hc->name) < 0 ||
            nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, hc->type) < 0)
                return -ENOMEM;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, hc->hook);
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, hc->prio);
        nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
        struct nlmsghdr *nlh = nftnl_chain_nlmsg_build_hdr(buf, NFT_MSG_NEWCHAIN, NFPROTO_INET,
                                                           NLM_F_CREATE | NLM_F_ACK, seq);
        nftnl_chain_nlmsg_build_payload(nlh, c);
        return batch_commit_msg(bt);
}

static int batch_rule(batch *bt, const host_rule *hr, const core_net_pool *pool) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = NULL;
        uint32_t seq;
        int ret = build_rule(hr, pool, &r);
        if (ret < 0)
                return ret;
        void *buf = batch_slot(bt, "rule", hr->label, &seq);
        if (!buf)
                return -ENOBUFS;
        struct nlmsghdr *nlh = nftnl_rule_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_INET,
                                                          NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq);
        nftnl_rule_nlmsg_build_payload(nlh, r);
        return batch_commit_msg(bt);
}

static int batch_edge(batch *bt, bool begin) {
        uint32_t seq;
        void *buf = batch_slot(bt, NULL, NULL, &seq);
        if (!buf)
                return -ENOBUFS;
        if (begin)
                nftnl_batch_begin(buf, seq);
        else
                nftnl_batch_end(buf, seq);
        return batch_commit_msg(bt);
}

static int ext_ack_attr_cb(const struct nlattr *a, void *data) {
        if (mnl_attr_get_type(a) == NLMSGERR_ATTR_MSG && mnl_attr_validate(a, MNL_TYPE_NUL_STRING) == 0)
                *(const char **) data = mnl_attr_get_str(a);
        return MNL_CB_OK;
}

/* Records the first error of the batch with the message it belongs to. */
static void note_error(batch *bt, const struct nlmsghdr *nlh, sb_error **err, int *first) {
        const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
        const char *ext = NULL;
        if (e->error == 0 || *first)
                return;
        if (nlh->nlmsg_flags & NLM_F_ACK_TLVS) {
                size_t off = sizeof(*e);
                if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
                        off += e->msg.nlmsg_len - sizeof(struct nlmsghdr);
                (void) mnl_attr_parse(nlh, MNL_ALIGN(off), ext_ack_attr_cb, &ext);
        }
        uint32_t i = e->msg.nlmsg_seq - bt->seq0;
        bool known = i < MAX_MSGS && e->msg.nlmsg_seq >= bt->seq0 && bt->kind[i];
        *first = e->error;
        sb_error_set(err, e->error, NULL, NULL, "nftables: %s '%s': %s%s%s%s",
                     known ? bt->kind[i] : "batch", known ? bt->name[i] : "begin", strerror(-e->error),
                     ext ? " (" : "", ext ? ext : "", ext ? ")" : "");
}

/* Reads every ACK the batch asked for. The kernel handles the whole batch
 * inside sendmsg() and queues all its ACKs before returning, even after an
 * error (it reports every failing message, then aborts the transaction), so
 * the wait below only guards against a kernel that never answers. */
static int drain_acks(struct mnl_socket *nl, batch *bt, sb_error **err) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        unsigned seen = 0;
        int first = 0;
        struct pollfd pfd = { .fd = mnl_socket_get_fd(nl), .events = POLLIN };
        while (seen < bt->acks) {
                int p = poll(&pfd, 1, 5000);
                if (p <= 0)
                        return first ? first : sb_error_set(err, p == 0 ? -ETIMEDOUT : negative_errno(),
                                                            NULL, NULL, "nftables: no ACK from the kernel");
                ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                if (n < 0)
                        return first ? first : sb_error_set(err, negative_errno(), NULL, NULL,
                                                            "nftables: receive ACK: %m");
                const struct nlmsghdr *nlh = (const struct nlmsghdr *) buf;
                for (int len = (int) n; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
                        if (nlh->nlmsg_type != NLMSG_ERROR)
                                continue;
                        const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
                        seen++;
                        note_error(bt, nlh, err, &first);
                        /* An error on the batch header (ENOMEM) replaces all ACKs. */
                        if (e->error && e->msg.nlmsg_seq == bt->seq0)
                                return first;
                }
        }
        return first;
}

static int batch_send(batch *bt, sb_error **err) {
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
        int one = 1;
        if (!nl)
                return sb_error_set(err, negative_errno(), NULL, NULL, "nftables: open netlink socket: %m");
        /* Extended ACKs carry the kernel's own explanation; capped ACKs keep
         * the reply small (no echo of each request). */
        (void) mnl_socket_setsockopt(nl, NETLINK_EXT_ACK, &one, sizeof(one));
        (void) mnl_socket_setsockopt(nl, NETLINK_CAP_ACK, &one, sizeof(one));
        if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
                return sb_error_set(err, negative_errno(), NULL, NULL, "nftables: bind netlink socket: %m");
        if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(bt->b), mnl_nlmsg_batch_size(bt->b)) < 0)
                return sb_error_set(err, negative_errno(), NULL, NULL, "nftables: send batch: %m");
        return drain_acks(nl, bt, err);
}

/* Sandbox traffic is routed, not bridged: without forwarding in the
 * namespace sandboxd runs in, nothing from a veth leaves the host side.
 * The setting is per network namespace, like the table. */
static int write_ip_forward(sb_error **ret_err) {
        int r = core_write_string("/proc/sys/net/ipv4/ip_forward", "1");
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "enable IPv4 forwarding: %s", strerror(-r));
        return 0;
}

int core_net_host_setup(const core_net_pool *pool, sb_error **ret_err) {
        _cleanup_free_ batch *bt = calloc(1, sizeof(*bt));
        int r;
        if (!pool || pool->prefix > 30 || pool->prefix < 8)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "nftables: invalid address pool prefix");
        if (!bt)
                return -ENOMEM;
        if ((r = write_ip_forward(ret_err)) < 0)
                return r;
        batch_init(bt);
        _cleanup_(mnl_nlmsg_batch_stopp) struct mnl_nlmsg_batch *b = bt->b;
        /* add (no EXCL) + delete + add: in one transaction this replaces
         * whatever an earlier run left, without a window where the host
         * has no rules and without failing when there was nothing. */
        if ((r = batch_edge(bt, true)) < 0 || (r = batch_table(bt, NFT_MSG_NEWTABLE, NLM_F_CREATE)) < 0 ||
            (r = batch_table(bt, NFT_MSG_DELTABLE, 0)) < 0 ||
            (r = batch_table(bt, NFT_MSG_NEWTABLE, NLM_F_CREATE)) < 0)
                goto fail;
        for (size_t i = 0; i < ELEMENTSOF(host_chains); i++)
                if ((r = batch_chain(bt, &host_chains[i])) < 0)
                        goto fail;
        for (size_t i = 0; i < ELEMENTSOF(host_rules); i++)
                if ((r = batch_rule(bt, &host_rules[i], pool)) < 0)
                        goto fail;
        if ((r = batch_edge(bt, false)) < 0)
                goto fail;
        return batch_send(bt, ret_err);
fail:
        return sb_error_set(ret_err, r, NULL, NULL, "nftables: build batch: %s", strerror(-r));
}

int core_net_host_teardown(sb_error **ret_err) {
        _cleanup_free_ batch *bt = calloc(1, sizeof(*bt));
        _cleanup_error_ sb_error *err = NULL;
        int r;
        if (!bt)
                return -ENOMEM;
        batch_init(bt);
        _cleanup_(mnl_nlmsg_batch_stopp) struct mnl_nlmsg_batch *b = bt->b;
        if ((r = batch_edge(bt, true)) < 0 || (r = batch_table(bt, NFT_MSG_DELTABLE, 0)) < 0 ||
            (r = batch_edge(bt, false)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "nftables: build batch: %s", strerror(-r));
        r = batch_send(bt, &err);
        if (r == -ENOENT)
                return 0;
        if (r < 0 && ret_err && !*ret_err)
                *ret_err = TAKE_PTR(err);
        return r;
}
