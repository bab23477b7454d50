/* Route lookups and the address watch over rtnetlink (see route.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <libmnl/libmnl.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "libcore/route.h"
#include "libcore/util.h"

typedef struct route_answer {
        bool seen;
        unsigned type;
} route_answer;

static int on_route(const struct nlmsghdr *nlh, void *data) {
        route_answer *a = data;
        if (nlh->nlmsg_type != RTM_NEWROUTE || nlh->nlmsg_len < NLMSG_LENGTH(sizeof(struct rtmsg)))
                return MNL_CB_OK;
        const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
        a->seen = true;
        a->type = rtm->rtm_type;
        return MNL_CB_OK;
}

int core_route_is_unicast(int family, const void *addr, unsigned *ret_type) {
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        char buf[MNL_SOCKET_BUFFER_SIZE];
        route_answer ans = { .type = RTN_UNSPEC };
        size_t len;
        if (ret_type)
                *ret_type = RTN_UNSPEC;
        if (family == AF_INET)
                len = 4;
        else if (family == AF_INET6)
                len = 16;
        else
                return -EAFNOSUPPORT;
        if (family == AF_INET6 && memcmp(addr, mapped, 12) == 0) {
                family = AF_INET; /* a socket sends a mapped address as IPv4 */
                addr = (const uint8_t *)addr + 12;
                len = 4;
        }
        struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
        if (!nl)
                return negative_errno();
        if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
                int r = negative_errno();
                mnl_socket_close(nl);
                return r;
        }
        /* The reply can never block for long, but a socket timeout keeps a
         * kernel that does not answer from hanging a proxy thread. */
        struct timeval tv = { .tv_sec = 2 };
        (void)setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = RTM_GETROUTE;
        nlh->nlmsg_flags = NLM_F_REQUEST;
        nlh->nlmsg_seq = (uint32_t)time(NULL);
        struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
        rtm->rtm_family = (uint8_t)family;
        rtm->rtm_dst_len = (uint8_t)(len * 8);
        mnl_attr_put(nlh, RTA_DST, len, addr);
        uint32_t seq = nlh->nlmsg_seq, portid = mnl_socket_get_portid(nl);
        int r = 0;
        if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
                r = negative_errno();
        while (r == 0) {
                ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                if (n < 0) {
                        r = negative_errno();
                        break;
                }
                int k = mnl_cb_run(buf, (size_t)n, seq, portid, on_route, &ans);
                if (k < 0) {
                        r = negative_errno();
                        break;
                }
                if (ans.seen || k == MNL_CB_STOP)
                        break;
        }
        mnl_socket_close(nl);
        /* No route (ENETUNREACH, EHOSTUNREACH, EINVAL for an address the
         * kernel will not route): an answer, not a failure to ask. */
        if (r == -ENETUNREACH || r == -EHOSTUNREACH || r == -EINVAL || r == -EACCES || r == -EPERM)
                return 0;
        if (r < 0)
                return r;
        if (!ans.seen)
                return -EIO;
        if (ret_type)
                *ret_type = ans.type;
        return ans.type == RTN_UNICAST;
}

const char *core_route_type_to_string(unsigned type) {
        static const char *const names[] = {
                [RTN_UNSPEC] = "none",          [RTN_UNICAST] = "unicast",   [RTN_LOCAL] = "local",
                [RTN_BROADCAST] = "broadcast",  [RTN_ANYCAST] = "anycast",   [RTN_MULTICAST] = "multicast",
                [RTN_BLACKHOLE] = "blackhole",  [RTN_UNREACHABLE] = "unreachable",
                [RTN_PROHIBIT] = "prohibit",    [RTN_THROW] = "throw",       [RTN_NAT] = "nat",
                [RTN_XRESOLVE] = "xresolve",
        };
        return type < ELEMENTSOF(names) && names[type] ? names[type] : "?";
}

int core_addr_monitor_open(void) {
        struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (!nl)
                return negative_errno();
        unsigned groups = RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
        if (mnl_socket_bind(nl, groups, MNL_SOCKET_AUTOPID) < 0) {
                int r = negative_errno();
                mnl_socket_close(nl);
                return r;
        }
        /* Keep only the fd (no wrapper to carry); dup(2) would drop its
         * close-on-exec flag. */
        int fd = fcntl(mnl_socket_get_fd(nl), F_DUPFD_CLOEXEC, 0);
        int r = fd < 0 ? negative_errno() : fd;
        mnl_socket_close(nl);
        if (r >= 0) {
                /* dup() drops FD_CLOEXEC; the loop's fds must not leak into helpers. */
                int fl = fcntl(r, F_GETFD);
                if (fl < 0 || fcntl(r, F_SETFD, fl | FD_CLOEXEC) < 0) {
                        r = negative_errno();
                        close(fd);
                }
        }
        return r;
}

/* The address of one RTM_NEWADDR / RTM_DELADDR: IFA_LOCAL when present
 * (the interface's own address on point-to-point links), else IFA_ADDRESS. */
static bool ifaddr_of(const struct nlmsghdr *h, int *ret_family, const void **ret_addr) {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifaddrmsg)))
                return false;
        const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(h);
        const void *local = NULL, *address = NULL;
        size_t want = ifa->ifa_family == AF_INET ? 4 : ifa->ifa_family == AF_INET6 ? 16 : 0;
        const struct nlattr *attr;
        if (!want)
                return false;
        mnl_attr_for_each(attr, h, sizeof(*ifa)) {
                if (mnl_attr_get_payload_len(attr) != want)
                        continue;
                if (mnl_attr_get_type(attr) == IFA_LOCAL)
                        local = mnl_attr_get_payload(attr);
                else if (mnl_attr_get_type(attr) == IFA_ADDRESS)
                        address = mnl_attr_get_payload(attr);
        }
        *ret_family = ifa->ifa_family;
        *ret_addr = local ? local : address;
        return *ret_addr != NULL;
}

int core_addr_monitor_drain(int fd, bool (*ignore)(int family, const void *addr, void *userdata), void *userdata) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        int changed = 0;
        for (;;) {
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                        return changed;
                if (n < 0 && errno == ENOBUFS) {
                        changed = 1; /* overrun: changes were lost, so assume one */
                        continue;
                }
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        return changed;
                int left = (int)n;
                for (const struct nlmsghdr *h = (const struct nlmsghdr *)buf; mnl_nlmsg_ok(h, left);
                     h = mnl_nlmsg_next(h, &left)) {
                        int family;
                        const void *addr;
                        if (h->nlmsg_type != RTM_NEWADDR && h->nlmsg_type != RTM_DELADDR)
                                continue;
                        if (ignore && ifaddr_of(h, &family, &addr) && ignore(family, addr, userdata))
                                continue;
                        changed = 1;
                }
        }
}
