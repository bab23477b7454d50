/* Conntrack entries by original source: dump (IPCTNL_MSG_CT_GET with
 * NLM_F_DUMP, AF_INET) and delete (IPCTNL_MSG_CT_DELETE) over ctnetlink
 * with libmnl; see conntrack.h for why a policy update needs this.
 *
 * Message layout as in libmnl's examples/netfilter/nf-ct-dump.c and the
 * kernel's net/netfilter/nf_conntrack_netlink.c: a dump answers with one
 * IPCTNL_MSG_CT_NEW per entry holding CTA_TUPLE_ORIG { CTA_TUPLE_IP
 * { CTA_IP_V4_SRC, CTA_IP_V4_DST }, CTA_TUPLE_PROTO { CTA_PROTO_NUM, ports
 * or ICMP id/type/code } [, CTA_TUPLE_ZONE] }, CTA_ID and, when non-zero,
 * CTA_ZONE. A delete names one entry by that original tuple (the kernel
 * looks the entry up by tuple and zone, then checks CTA_ID). The tuple is
 * sent back exactly as the kernel dumped it, so every layer-4 protocol's
 * own tuple attributes (ports, ICMP id) are right without our knowing them.
 *
 * Entries are collected during the dump and deleted after it: a netlink
 * socket answers one request at a time, and deleting while the kernel walks
 * its hash table could make it skip entries. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <libmnl/libmnl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include "libcore/conntrack.h"
#include "libcore/net.h"


#define CT_TYPE(msg) ((uint16_t) ((NFNL_SUBSYS_CTNETLINK << 8) | (msg)))
#define MAX_ENTRIES_PER_PASS 16384
#define MAX_PASSES 4
#define RECV_TIMEOUT_S 5
/* An IPv4 original tuple is about 80 bytes (IP nest 20, proto nest up to
 * 36, zone 8, headers); anything larger is not one we know how to name. */
#define TUPLE_MAX 160

typedef struct ct_entry {
        uint8_t tuple[TUPLE_MAX]; /* payload of CTA_TUPLE_ORIG, as dumped */
        uint16_t tuple_len;
        bool has_id, has_zone;
        uint32_t id;              /* CTA_ID, network order, opaque */
        uint16_t zone;            /* CTA_ZONE, network order, opaque */
} ct_entry;

typedef struct dump_ctx {
        int family;         /* AF_INET (src) or AF_INET6 (src6) */
        struct in_addr src;
        struct in6_addr src6;
        ct_entry *entries;  /* NULL: count only */
        size_t n, cap;
        bool truncated;     /* more matches than MAX_ENTRIES_PER_PASS */
} dump_ctx;

/* Keeps the attributes of a known type; their lengths are checked where
 * they are read. */
static int keep_attr_cb(const struct nlattr *attr, void *data, uint16_t max) {
        const struct nlattr **tb = data;
        uint16_t type = mnl_attr_get_type(attr);
        if (type <= max)
                tb[type] = attr;
        return MNL_CB_OK;
}
static int top_cb(const struct nlattr *a, void *d) { return keep_attr_cb(a, d, CTA_MAX); }
static int tuple_cb(const struct nlattr *a, void *d) { return keep_attr_cb(a, d, CTA_TUPLE_MAX); }
static int ip_cb(const struct nlattr *a, void *d) { return keep_attr_cb(a, d, CTA_IP_MAX); }

/* Whether the original-direction source of this entry is ctx->src (src6). */
static bool source_matches(const struct nlattr *orig, const dump_ctx *ctx) {
        const struct nlattr *tt[CTA_TUPLE_MAX + 1] = {0};
        const struct nlattr *ip[CTA_IP_MAX + 1] = {0};
        struct in_addr src = ctx->src;
        if (mnl_attr_parse_nested(orig, tuple_cb, tt) < 0 || !tt[CTA_TUPLE_IP])
                return false;
        if (ctx->family == AF_INET6) {
                if (mnl_attr_parse_nested(tt[CTA_TUPLE_IP], ip_cb, ip) < 0 || !ip[CTA_IP_V6_SRC] ||
                    mnl_attr_get_payload_len(ip[CTA_IP_V6_SRC]) != 16)
                        return false;
                return memcmp(mnl_attr_get_payload(ip[CTA_IP_V6_SRC]), &ctx->src6, 16) == 0;
        }
        if (mnl_attr_parse_nested(tt[CTA_TUPLE_IP], ip_cb, ip) < 0 || !ip[CTA_IP_V4_SRC] ||
            mnl_attr_validate(ip[CTA_IP_V4_SRC], MNL_TYPE_U32) < 0)
                return false;
        return mnl_attr_get_u32(ip[CTA_IP_V4_SRC]) == src.s_addr;
}

static int entry_cb(const struct nlmsghdr *nlh, void *data) {
        dump_ctx *ctx = data;
        const struct nlattr *tb[CTA_MAX + 1] = {0};
        if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), top_cb, tb) < 0 || !tb[CTA_TUPLE_ORIG])
                return MNL_CB_OK;
        if (!source_matches(tb[CTA_TUPLE_ORIG], ctx))
                return MNL_CB_OK;
        if (!ctx->entries) {
                ctx->n++;
                return MNL_CB_OK;
        }
        uint16_t len = mnl_attr_get_payload_len(tb[CTA_TUPLE_ORIG]);
        if (ctx->n >= ctx->cap || len > TUPLE_MAX) {
                ctx->truncated = true;
                return MNL_CB_OK;
        }
        ct_entry *e = &ctx->entries[ctx->n++];
        *e = (ct_entry) { .tuple_len = len };
        memcpy(e->tuple, mnl_attr_get_payload(tb[CTA_TUPLE_ORIG]), len);
        if (tb[CTA_ID] && mnl_attr_validate(tb[CTA_ID], MNL_TYPE_U32) == 0) {
                e->has_id = true;
                e->id = mnl_attr_get_u32(tb[CTA_ID]);
        }
        if (tb[CTA_ZONE] && mnl_attr_validate(tb[CTA_ZONE], MNL_TYPE_U16) == 0) {
                e->has_zone = true;
                e->zone = mnl_attr_get_u16(tb[CTA_ZONE]);
        }
        return MNL_CB_OK;
}

static struct nlmsghdr *put_request(char *buf, uint8_t msg, uint16_t flags, uint32_t seq, int family) {
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = CT_TYPE(msg);
        nlh->nlmsg_flags = NLM_F_REQUEST | flags;
        nlh->nlmsg_seq = seq;
        struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
        nfg->nfgen_family = (uint8_t) family;
        nfg->version = NFNETLINK_V0;
        nfg->res_id = 0;
        return nlh;
}

/* Sends req and runs cb over the answer until the dump's NLMSG_DONE or the
 * request's ACK. Returns 0 or a negative errno (the kernel's, or -EAGAIN
 * when a receive timed out). */
static int transact(struct mnl_socket *nl, const struct nlmsghdr *req, mnl_cb_t cb, void *data) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        uint32_t portid = mnl_socket_get_portid(nl);
        if (mnl_socket_sendto(nl, req, req->nlmsg_len) < 0)
                return negative_errno();
        for (;;) {
                ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errno == EWOULDBLOCK ? -EAGAIN : negative_errno();
                int r = mnl_cb_run(buf, (size_t) n, req->nlmsg_seq, portid, cb, data);
                if (r < 0)
                        return negative_errno();
                if (r == MNL_CB_STOP)
                        return 0;
        }
}

/* A netfilter netlink socket from the daemon's kept ones
 * (core_nft_socket_take, libcore/nft.c): closing one right after an
 * nftables commit waits for an RCU grace period in the kernel, which a
 * create or delete would otherwise pay here. Its receives are bounded for
 * this use. Given back with kept_socket_give(): kept only when `clean`. */
static int open_socket(struct mnl_socket **ret, sb_error **ret_err) {
        struct mnl_socket *nl = NULL;
        int r = core_nft_socket_take(&nl, ret_err);
        if (r < 0)
                return r;
        /* Bounded: a daemon thread must never wait on the kernel forever. */
        struct timeval tv = { .tv_sec = RECV_TIMEOUT_S };
        if (setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
                r = negative_errno();
                core_nft_socket_give(nl, false);
                return sb_error_set(ret_err, r, NULL, NULL, "set up netfilter netlink socket: %s", strerror(-r));
        }
        *ret = nl;
        return 0;
}

/* Gives a socket of open_socket() back, its receives unbounded again as
 * the other users of the kept sockets expect; kept only after a clean
 * exchange (every answer read). */
static void kept_socket_give(struct mnl_socket *nl, bool clean) {
        struct timeval none = {};
        if (!nl)
                return;
        if (setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none)) < 0)
                clean = false;
        core_nft_socket_give(nl, clean);
}

/* The kernel's dump filter flag for the original source address
 * (CTA_FILTER_FLAG(CTA_IP_SRC) in net/netfilter/nf_conntrack_netlink.c,
 * Linux 5.8; not in the uapi header). */
#define CT_FILTER_ORIG_IP_SRC (1u << 0)

/* Asks the kernel to dump only the entries whose original source is
 * ctx's address (CTA_FILTER with CTA_TUPLE_ORIG { CTA_TUPLE_IP { src } }):
 * it still walks its table, but in the kernel, instead of sending every
 * entry of every session here. entry_cb matches the source again, so a
 * kernel that ignores the filter gives the same result. */
static void put_source_filter(struct nlmsghdr *req, const dump_ctx *ctx) {
        struct nlattr *orig = mnl_attr_nest_start(req, CTA_TUPLE_ORIG);
        struct nlattr *ip = mnl_attr_nest_start(req, CTA_TUPLE_IP);
        if (ctx->family == AF_INET6)
                mnl_attr_put(req, CTA_IP_V6_SRC, sizeof(ctx->src6), &ctx->src6);
        else
                mnl_attr_put(req, CTA_IP_V4_SRC, sizeof(ctx->src), &ctx->src);
        mnl_attr_nest_end(req, ip);
        mnl_attr_nest_end(req, orig);
        struct nlattr *filter = mnl_attr_nest_start(req, CTA_FILTER);
        mnl_attr_put_u32(req, CTA_FILTER_ORIG_FLAGS, CT_FILTER_ORIG_IP_SRC); /* host order (nla_get_u32) */
        mnl_attr_nest_end(req, filter);
}

static int dump(struct mnl_socket *nl, uint32_t seq, dump_ctx *ctx, sb_error **ret_err) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *req = put_request(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP, seq, ctx->family);
        put_source_filter(req, ctx);
        int r = transact(nl, req, entry_cb, ctx);
        if (r == -EINVAL || r == -EOPNOTSUPP) {
                /* A kernel before the dump filter: the whole table, matched here. */
                ctx->n = 0;
                ctx->truncated = false;
                req = put_request(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP, seq + 0x40000000u, ctx->family);
                r = transact(nl, req, entry_cb, ctx);
        }
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "dump conntrack table: %s", strerror(-r));
        return 0;
}

/* Deletes one entry. An entry already gone (expired, closed, or replaced so
 * that its id no longer matches) is success: 0; deleted: 1. */
static int delete_entry(struct mnl_socket *nl, uint32_t seq, const ct_entry *e, int family) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *req = put_request(buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK, seq, family);
        mnl_attr_put(req, CTA_TUPLE_ORIG | NLA_F_NESTED, e->tuple_len, e->tuple);
        if (e->has_id)
                mnl_attr_put_u32(req, CTA_ID, e->id);
        if (e->has_zone)
                mnl_attr_put_u16(req, CTA_ZONE, e->zone);
        int r = transact(nl, req, NULL, NULL);
        if (r == -ENOENT)
                return 0;
        return r < 0 ? r : 1;
}

int core_conntrack_count_source(struct in_addr src, sb_error **ret_err) {
        struct mnl_socket *nl = NULL;
        int r = open_socket(&nl, ret_err);
        if (r < 0)
                return r;
        dump_ctx ctx = { .family = AF_INET, .src = src };
        r = dump(nl, (uint32_t) time(NULL), &ctx, ret_err);
        kept_socket_give(nl, r >= 0);
        if (r < 0)
                return r;
        return ctx.n > INT32_MAX ? INT32_MAX : (int) ctx.n;
}

static int flush_on(struct mnl_socket *nl, const dump_ctx *proto, const char *addr, sb_error **ret_err);

static int flush(const dump_ctx *proto, const char *addr, sb_error **ret_err) {
        struct mnl_socket *nl = NULL;
        int r = open_socket(&nl, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "flush conntrack entries of %s", addr);
        r = flush_on(nl, proto, addr, ret_err);
        kept_socket_give(nl, r >= 0);
        return r;
}

/* flush() on an open socket: dump the source's entries, delete them, again
 * while the dump was cut short. */
static int flush_on(struct mnl_socket *nl, const dump_ctx *proto, const char *addr, sb_error **ret_err) {
        int r;
        _cleanup_free_ ct_entry *entries = calloc(MAX_ENTRIES_PER_PASS, sizeof(ct_entry));
        if (!entries)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "flush conntrack entries of %s: out of memory", addr);
        uint32_t seq = (uint32_t) time(NULL);
        int deleted = 0;
        for (int pass = 0; pass < MAX_PASSES; pass++) {
                dump_ctx ctx = *proto;
                ctx.entries = entries;
                ctx.cap = MAX_ENTRIES_PER_PASS;
                if ((r = dump(nl, seq++, &ctx, ret_err)) < 0)
                        return sb_error_prefix(ret_err, "flush conntrack entries of %s", addr);
                for (size_t i = 0; i < ctx.n; i++) {
                        if ((r = delete_entry(nl, seq++, &entries[i], ctx.family)) < 0)
                                return sb_error_set(ret_err, r, NULL, NULL,
                                                    "flush conntrack entries of %s: delete entry: %s",
                                                    addr, strerror(-r));
                        deleted += r;
                }
                if (!ctx.truncated)
                        return deleted;
        }
        return sb_error_set(ret_err, -E2BIG, NULL, NULL,
                            "flush conntrack entries of %s: still more after %d passes of %d",
                            addr, MAX_PASSES, MAX_ENTRIES_PER_PASS);
}

int core_conntrack_flush_source(struct in_addr src, sb_error **ret_err) {
        char addr[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &src, addr, sizeof(addr));
        dump_ctx ctx = { .family = AF_INET, .src = src };
        return flush(&ctx, addr, ret_err);
}

int core_conntrack_flush_source6(const struct in6_addr *src, sb_error **ret_err) {
        char addr[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, src, addr, sizeof(addr));
        dump_ctx ctx = { .family = AF_INET6, .src6 = *src };
        return flush(&ctx, addr, ret_err);
}
