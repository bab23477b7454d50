/* The NFLOG reader: binds an nfnetlink_log group (NFNETLINK_V0, subsystem
 * NFNL_SUBSYS_ULOG) with libmnl and turns each packet report the kernel
 * sends into a core_nflog_packet (interface, family, protocol, addresses,
 * destination port, prefix). The reports come from the rate-limited log
 * rule of the host table's `deny` chain (libcore/nft.c); see nflog.h.
 *
 * Message layout and configuration sequence as in netfilter's libmnl
 * example examples/netfilter/nf-log.c and the kernel's
 * net/netfilter/nfnetlink_log.c. The reports are parsed defensively: they
 * hold bytes a sandbox chose (the copied packet headers), so every length
 * is checked before it is read and anything malformed is skipped. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <libmnl/libmnl.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "libcore/nflog.h"

#define ULOG_TYPE(msg) ((uint16_t) ((NFNL_SUBSYS_ULOG << 8) | (msg)))
#define ACK_TIMEOUT_MS 5000

/* One NFULNL_MSG_CONFIG request for `group` with an ACK asked for. */
static struct nlmsghdr *put_config(char *buf, uint16_t group, uint32_t seq) {
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = ULOG_TYPE(NFULNL_MSG_CONFIG);
        nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
        nlh->nlmsg_seq = seq;
        struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
        nfg->nfgen_family = AF_UNSPEC;
        nfg->version = NFNETLINK_V0;
        nfg->res_id = htons(group);
        return nlh;
}

/* Sends one request and waits for its ACK. Packet reports may already
 * arrive in between (the group is live from the bind on) and are dropped:
 * the caller has not been handed the fd yet. Returns 0 or the kernel's
 * negative errno. */
static int request(int fd, const struct nlmsghdr *req) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        if (send(fd, req, req->nlmsg_len, 0) < 0)
                return negative_errno();
        for (;;) {
                int p = poll(&pfd, 1, ACK_TIMEOUT_MS);
                if (p < 0 && errno == EINTR)
                        continue;
                if (p <= 0)
                        return p == 0 ? -ETIMEDOUT : negative_errno();
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == ENOBUFS))
                        continue;
                if (n < 0)
                        return negative_errno();
                const struct nlmsghdr *nlh = (const struct nlmsghdr *) buf;
                for (int len = (int) n; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
                        if (nlh->nlmsg_type != NLMSG_ERROR || nlh->nlmsg_seq != req->nlmsg_seq ||
                            nlh->nlmsg_len < NLMSG_HDRLEN + sizeof(struct nlmsgerr))
                                continue;
                        const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
                        return e->error;
                }
        }
}

/* Takes the group, then sets copy mode "packet" limited to the snap
 * length (the kernel copies the smaller of this and the rule's snaplen)
 * and a queue threshold of one, so each report is sent at once rather
 * than held back for up to the default flush timeout of one second. */
static int configure(int fd, uint16_t group) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = put_config(buf, group, 1);
        struct nfulnl_msg_config_cmd cmd = { .command = NFULNL_CFG_CMD_BIND };
        struct nfulnl_msg_config_mode mode = { .copy_range = htonl(CORE_NFLOG_SNAPLEN),
                                               .copy_mode = NFULNL_COPY_PACKET };
        int r;
        mnl_attr_put(nlh, NFULA_CFG_CMD, sizeof(cmd), &cmd);
        if ((r = request(fd, nlh)) < 0)
                return r;
        nlh = put_config(buf, group, 2);
        mnl_attr_put(nlh, NFULA_CFG_MODE, sizeof(mode), &mode);
        mnl_attr_put_u32(nlh, NFULA_CFG_QTHRESH, htonl(1));
        return request(fd, nlh);
}

int core_nflog_open(uint16_t group, sb_error **ret_err) {
        _cleanup_close_ int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
        struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
        int size = 1 << 20, r;
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "nflog: open netlink socket: %m");
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "nflog: bind netlink socket: %m");
        /* Room for a burst of reports while the daemon is busy; the deny
         * chain's limit keeps the rate low, an overflow only loses reports. */
        (void) setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size));
        r = configure(fd, group);
        /* The kernel refuses a group another socket holds with EPERM, the
         * same code as a missing CAP_NET_ADMIN: name both. */
        if (r == -EPERM)
                return sb_error_set(ret_err, -EBUSY, NULL, NULL,
                                    "nflog: bind group %u: %s (another process, e.g. ulogd, holds the "
                                    "group, or CAP_NET_ADMIN is missing)",
                                    group, strerror(EPERM));
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "nflog: bind group %u: %s", group, strerror(-r));
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "nflog: set non-blocking: %m");
        return TAKE_FD(fd);
}

/* ---- one report ---- */

/* Destination port of a TCP or UDP header at d (len bytes copied). */
static void parse_l4(core_nflog_packet *p, const uint8_t *d, size_t len) {
        uint16_t port;
        if ((p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP) || len < 4)
                return;
        memcpy(&port, d + 2, sizeof(port));
        p->dport = ntohs(port);
}

/* The copied network header: IPv4 (RFC 791) or IPv6 (RFC 8200; only the
 * first next header is reported, extension headers are not walked). A
 * non-first IPv4 fragment has no transport header, so no port. */
static void parse_payload(core_nflog_packet *p, const uint8_t *d, size_t len) {
        if (len >= 20 && d[0] >> 4 == 4) {
                size_t ihl = (size_t) (d[0] & 0x0f) * 4;
                uint16_t frag;
                if (ihl < 20)
                        return;
                p->family = AF_INET;
                p->proto = d[9];
                memcpy(&p->saddr.v4, d + 12, 4);
                memcpy(&p->daddr.v4, d + 16, 4);
                memcpy(&frag, d + 6, sizeof(frag));
                if ((ntohs(frag) & 0x1fff) == 0 && len > ihl)
                        parse_l4(p, d + ihl, len - ihl);
        } else if (len >= 40 && d[0] >> 4 == 6) {
                p->family = AF_INET6;
                p->proto = d[6];
                memcpy(&p->saddr.v6, d + 8, 16);
                memcpy(&p->daddr.v6, d + 24, 16);
                parse_l4(p, d + 40, len - 40);
        }
}

/* Keeps the attributes a report is read from, each with its type checked
 * (a wrong length or type is treated as absent). */
static int attr_cb(const struct nlattr *a, void *data) {
        const struct nlattr **tb = data;
        uint16_t type = mnl_attr_get_type(a);
        switch (type) {
        case NFULA_IFINDEX_INDEV:
                if (mnl_attr_validate(a, MNL_TYPE_U32) < 0)
                        return MNL_CB_OK;
                break;
        case NFULA_PREFIX:
                if (mnl_attr_validate(a, MNL_TYPE_NUL_STRING) < 0)
                        return MNL_CB_OK;
                break;
        case NFULA_PAYLOAD:
                break;
        default:
                return MNL_CB_OK;
        }
        tb[type] = a;
        return MNL_CB_OK;
}

/* Fills *p from one NFULNL_MSG_PACKET message; false when it is not one
 * or carries no readable network header. */
static bool parse_report(const struct nlmsghdr *nlh, core_nflog_packet *p) {
        const struct nlattr *tb[NFULA_MAX + 1] = {};
        if (nlh->nlmsg_type != ULOG_TYPE(NFULNL_MSG_PACKET) ||
            nlh->nlmsg_len < NLMSG_HDRLEN + MNL_ALIGN(sizeof(struct nfgenmsg)))
                return false;
        if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), attr_cb, tb) < 0 || !tb[NFULA_PAYLOAD])
                return false;
        *p = (core_nflog_packet) {};
        parse_payload(p, mnl_attr_get_payload(tb[NFULA_PAYLOAD]), mnl_attr_get_payload_len(tb[NFULA_PAYLOAD]));
        if (!p->family)
                return false;
        if (tb[NFULA_IFINDEX_INDEV]) {
                p->ifindex = ntohl(mnl_attr_get_u32(tb[NFULA_IFINDEX_INDEV]));
                /* The veth may be gone by now (session ended): no name. */
                if (p->ifindex && !if_indextoname(p->ifindex, p->ifname))
                        p->ifname[0] = '\0';
        }
        if (tb[NFULA_PREFIX])
                p->prefix = mnl_attr_get_str(tb[NFULA_PREFIX]);
        return true;
}

int core_nflog_read(int fd, core_nflog_cb cb, void *userdata) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        int reports = 0;
        for (;;) {
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n < 0 && errno == EAGAIN)
                        return reports;
                /* Reports lost to a full buffer are gone; read on. */
                if (n < 0 && (errno == ENOBUFS || errno == EINTR))
                        continue;
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        return reports;
                const struct nlmsghdr *nlh = (const struct nlmsghdr *) buf;
                for (int len = (int) n; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
                        core_nflog_packet p;
                        if (!parse_report(nlh, &p))
                                continue;
                        cb(&p, userdata);
                        reports++;
                }
        }
}
