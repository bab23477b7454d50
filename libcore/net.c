/* Per-session network plumbing with libnl-route-3: pool arithmetic, the veth
 * pair "sbx<n>" <-> "eth0" (created from the host, peer moved into the
 * sandbox's network namespace at creation), and the configuration of that
 * namespace from inside it (lo, eth0 addresses, default routes; IPv6 per
 * the pool),
 * and the lock that gives a network namespace to one daemon only.
 * The host-wide nftables table lives in nft.c. */
#include <arpa/inet.h>
#include <net/if.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include "libcore/log.h"
#include "libcore/net.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct nl_sock, nl_socket_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct rtnl_link, rtnl_link_put);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct rtnl_addr, rtnl_addr_put);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct rtnl_route, rtnl_route_put);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nl_addr, nl_addr_put);

#define SANDBOX_IFNAME "eth0"

struct in_addr core_net_host_addr(const core_net_pool *pool, unsigned slot) {
        return (struct in_addr) { .s_addr = htonl(ntohl(pool->base.s_addr) + 2u * slot) };
}

struct in_addr core_net_sandbox_addr(const core_net_pool *pool, unsigned slot) {
        return (struct in_addr) { .s_addr = htonl(ntohl(pool->base.s_addr) + 2u * slot + 1u) };
}

/* base6 + k in its low 64 bits (slots stay far below 2^63). */
static struct in6_addr addr6_plus(const struct in6_addr *base, uint64_t k) {
        struct in6_addr a = *base;
        uint64_t low = 0;
        for (int i = 8; i < 16; i++)
                low = low << 8 | a.s6_addr[i];
        low += k;
        for (int i = 15; i >= 8; i--, low >>= 8)
                a.s6_addr[i] = (uint8_t) low;
        return a;
}

struct in6_addr core_net_host_addr6(const core_net_pool *pool, unsigned slot) {
        return addr6_plus(&pool->base6, 2u * (uint64_t) slot);
}

struct in6_addr core_net_sandbox_addr6(const core_net_pool *pool, unsigned slot) {
        return addr6_plus(&pool->base6, 2u * (uint64_t) slot + 1u);
}

unsigned core_net_pool_slots(const core_net_pool *pool) {
        if (pool->prefix > 31)
                return 0;
        return 1u << (31 - pool->prefix);
}

/* libnl reports its own NLE_* codes; the errno contract wants errnos. */
static int nlerr_to_errno(int nlerr) {
        switch (nlerr < 0 ? -nlerr : nlerr) {
        case NLE_EXIST: return -EEXIST;
        case NLE_OBJ_NOTFOUND:
        case NLE_NODEV: return -ENODEV;
        case NLE_PERM: return -EPERM;
        case NLE_NOACCESS: return -EACCES;
        case NLE_NOMEM: return -ENOMEM;
        case NLE_INVAL: return -EINVAL;
        case NLE_BUSY: return -EBUSY;
        case NLE_RANGE: return -ERANGE;
        case NLE_NOADDR: return -EADDRNOTAVAIL;
        case NLE_OPNOTSUPP: return -EOPNOTSUPP;
        case NLE_AF_NOSUPPORT: return -EAFNOSUPPORT;
        default: return -EIO;
        }
}

static int nl_fail(sb_error **err, int nlerr, const char *what, const char *ifname) {
        return sb_error_set(err, nlerr_to_errno(nlerr), NULL, NULL, "%s %s: %s", what, ifname,
                            nl_geterror(nlerr));
}

static int route_socket(struct nl_sock **ret, sb_error **err) {
        _cleanup_(nl_socket_freep) struct nl_sock *sk = nl_socket_alloc();
        if (!sk)
                return sb_error_set(err, -ENOMEM, NULL, NULL, "netlink: out of memory");
        int r = nl_connect(sk, NETLINK_ROUTE); /* libnl opens it SOCK_CLOEXEC */
        if (r < 0)
                return nl_fail(err, r, "netlink:", "connect");
        *ret = TAKE_PTR(sk);
        return 0;
}

/* net.ipv4.conf.<ifname>.rp_filter = 1 (strict reverse-path filtering,
 * RFC 3704): a packet from the sandbox is dropped unless its source is an
 * address routed back through this very veth — i.e. the sandbox's own.
 * Threat: root inside forges source addresses, and then the DNS filter's
 * answers, rejects' ICMP errors quoting the packet, and forwarded packets
 * (masquerade only rewrites pool sources) carry its bytes to any address,
 * another sandbox included. The kernel uses max(all, <if>), so this holds
 * whatever the host's defaults are. */
static int strict_reverse_path(const char *ifname) {
        char path[128];
        snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/rp_filter", ifname);
        return core_write_string(path, "1");
}

/* net.ipv6.conf.<ifname>.disable_ipv6 = 1. Missing file (no IPv6 in the
 * kernel, or the interface is gone) is fine: no IPv6 then either. */
static int disable_ipv6(const char *ifname) {
        char path[96];
        snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", ifname);
        int r = core_write_string(path, "1");
        return r == -ENOENT ? 0 : r;
}

/* IPv6 on for ifname, as a plain routed link: no router advertisements
 * accepted (the routes are ours: a sandbox's RA must not reroute the
 * host, nor the host's the sandbox), no SLAAC addresses, no redirects.
 * Written before the link goes up. */
static int enable_ipv6(const char *ifname) {
        static const char *const knobs[][2] = {
                { "accept_ra", "0" }, { "autoconf", "0" }, { "accept_redirects", "0" }, { "disable_ipv6", "0" },
        };
        char path[128];
        for (size_t i = 0; i < ELEMENTSOF(knobs); i++) {
                snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/%s", ifname, knobs[i][0]);
                int r = core_write_string(path, knobs[i][1]);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Brings ifname up; returns its ifindex in *ret_index when non-NULL. */
static int link_up(struct nl_sock *sk, const char *ifname, int *ret_index, sb_error **err) {
        _cleanup_(rtnl_link_putp) struct rtnl_link *link = NULL, *change = rtnl_link_alloc();
        if (!change)
                return sb_error_set(err, -ENOMEM, NULL, NULL, "netlink: out of memory");
        int r = rtnl_link_get_kernel(sk, 0, ifname, &link);
        if (r < 0)
                return nl_fail(err, r, "find link", ifname);
        rtnl_link_set_flags(change, IFF_UP);
        if ((r = rtnl_link_change(sk, link, change, 0)) < 0)
                return nl_fail(err, r, "bring up", ifname);
        if (ret_index)
                *ret_index = rtnl_link_get_ifindex(link);
        return 0;
}

/* Adds addr/31 to ifindex. An identical address already there (a leftover
 * of an earlier run on the same slot) is accepted. */
static int add_addr31(struct nl_sock *sk, int ifindex, struct in_addr addr, const char *ifname,
                      sb_error **err) {
        _cleanup_(rtnl_addr_putp) struct rtnl_addr *a = rtnl_addr_alloc();
        _cleanup_(nl_addr_putp) struct nl_addr *local = nl_addr_build(AF_INET, &addr, sizeof(addr));
        if (!a || !local)
                return sb_error_set(err, -ENOMEM, NULL, NULL, "netlink: out of memory");
        nl_addr_set_prefixlen(local, 31);
        rtnl_addr_set_ifindex(a, ifindex);
        int r = rtnl_addr_set_local(a, local);
        if (r >= 0) {
                rtnl_addr_set_prefixlen(a, 31);
                r = rtnl_addr_add(sk, a, 0);
        }
        if (r < 0 && r != -NLE_EXIST)
                return nl_fail(err, r, "add address to", ifname);
        return 0;
}

/* Adds addr/127 (RFC 6164) to ifindex with IFA_F_NODAD: the two ends of a
 * veth are the only nodes on the link, and a tentative address would make
 * the first second of a session fail (and the proxy redirect, which takes
 * the interface's first non-tentative address, pick another one). */
static int add_addr127(struct nl_sock *sk, int ifindex, struct in6_addr addr, const char *ifname,
                       sb_error **err) {
        _cleanup_(rtnl_addr_putp) struct rtnl_addr *a = rtnl_addr_alloc();
        _cleanup_(nl_addr_putp) struct nl_addr *local = nl_addr_build(AF_INET6, &addr, sizeof(addr));
        if (!a || !local)
                return sb_error_set(err, -ENOMEM, NULL, NULL, "netlink: out of memory");
        nl_addr_set_prefixlen(local, 127);
        rtnl_addr_set_ifindex(a, ifindex);
        int r = rtnl_addr_set_local(a, local);
        if (r >= 0) {
                rtnl_addr_set_prefixlen(a, 127);
                rtnl_addr_set_flags(a, IFA_F_NODAD);
                r = rtnl_addr_add(sk, a, 0);
        }
        if (r < 0 && r != -NLE_EXIST)
                return nl_fail(err, r, "add IPv6 address to", ifname);
        return 0;
}

static int add_default_route_family(struct nl_sock *sk, int ifindex, int family, const void *gw, size_t gwlen,
                                    sb_error **err);

static int add_default_route(struct nl_sock *sk, int ifindex, struct in_addr gw, sb_error **err) {
        return add_default_route_family(sk, ifindex, AF_INET, &gw, sizeof(gw), err);
}

static int add_default_route_family(struct nl_sock *sk, int ifindex, int family, const void *gw, size_t gwlen,
                                    sb_error **err) {
        static const struct in6_addr any6 = IN6ADDR_ANY_INIT;
        _cleanup_(rtnl_route_putp) struct rtnl_route *rt = rtnl_route_alloc();
        _cleanup_(nl_addr_putp) struct nl_addr *dst = nl_addr_build(family, &any6, family == AF_INET ? 4 : 16);
        _cleanup_(nl_addr_putp) struct nl_addr *via = nl_addr_build(family, gw, gwlen);
        struct rtnl_nexthop *nh = rtnl_route_nh_alloc();
        if (!rt || !dst || !via || !nh) {
                if (nh)
                        rtnl_route_nh_free(nh);
                return sb_error_set(err, -ENOMEM, NULL, NULL, "netlink: out of memory");
        }
        nl_addr_set_prefixlen(dst, 0);
        rtnl_route_set_family(rt, (uint8_t) family);
        rtnl_route_set_table(rt, RT_TABLE_MAIN);
        rtnl_route_set_protocol(rt, RTPROT_STATIC);
        rtnl_route_set_scope(rt, RT_SCOPE_UNIVERSE);
        int r = rtnl_route_set_dst(rt, dst);
        rtnl_route_nh_set_ifindex(nh, ifindex);
        rtnl_route_nh_set_gateway(nh, via);
        rtnl_route_add_nexthop(rt, nh); /* rt owns nh from here */
        if (r >= 0)
                r = rtnl_route_add(sk, rt, NLM_F_REPLACE);
        if (r < 0)
                return nl_fail(err, r, "add default route via", SANDBOX_IFNAME);
        return 0;
}

static int delete_link(struct nl_sock *sk, const char *ifname, sb_error **err) {
        _cleanup_(rtnl_link_putp) struct rtnl_link *link = rtnl_link_alloc();
        if (!link)
                return sb_error_set(err, -ENOMEM, NULL, NULL, "netlink: out of memory");
        rtnl_link_set_name(link, ifname);
        int r = rtnl_link_delete(sk, link);
        if (r < 0 && r != -NLE_OBJ_NOTFOUND && r != -NLE_NODEV)
                return nl_fail(err, r, "delete link", ifname);
        return 0;
}

int core_veth_create(const core_net_pool *pool, unsigned slot, pid_t netns_pid, sb_error **ret_err) {
        _cleanup_(nl_socket_freep) struct nl_sock *sk = NULL;
        char ifname[IFNAMSIZ];
        int r, ifindex = 0;

        if (slot >= core_net_pool_slots(pool) || netns_pid <= 0)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "veth: slot %u or pid %d out of range",
                                    slot, (int) netns_pid);
        snprintf(ifname, sizeof(ifname), "sbx%u", slot);
        if ((r = route_socket(&sk, ret_err)) < 0)
                return r;
        /* The peer is created directly inside the sandbox's namespace
         * (IFLA_NET_NS_PID), so it never exists on the host under a name
         * another session could collide with. */
        r = rtnl_link_veth_add(sk, ifname, SANDBOX_IFNAME, netns_pid);
        if (r < 0)
                return nl_fail(ret_err, r, "create veth", ifname);

        /* IPv6 set before the link goes up: off without an IPv6 pool, so
         * the host side never gets a link-local address or sends DAD /
         * router solicitations; with one, on without RA or SLAAC. */
        if ((r = pool->prefix6 ? enable_ipv6(ifname) : disable_ipv6(ifname)) < 0)
                sb_error_set(ret_err, r, NULL, NULL, "%s IPv6 on %s: %s", pool->prefix6 ? "enable" : "disable",
                             ifname, strerror(-r));
        else if ((r = strict_reverse_path(ifname)) < 0)
                sb_error_set(ret_err, r, NULL, NULL, "rp_filter on %s: %s", ifname, strerror(-r));
        else if ((r = link_up(sk, ifname, &ifindex, ret_err)) >= 0)
                r = add_addr31(sk, ifindex, core_net_host_addr(pool, slot), ifname, ret_err);
        if (r >= 0 && pool->prefix6)
                r = add_addr127(sk, ifindex, core_net_host_addr6(pool, slot), ifname, ret_err);
        if (r < 0) {
                (void) delete_link(sk, ifname, NULL);
                return r;
        }
        return 0;
}

int core_veth_delete(unsigned slot, sb_error **ret_err) {
        _cleanup_(nl_socket_freep) struct nl_sock *sk = NULL;
        char ifname[IFNAMSIZ];
        int r;
        snprintf(ifname, sizeof(ifname), "sbx%u", slot);
        if ((r = route_socket(&sk, ret_err)) < 0)
                return r;
        /* Deleting one end of a veth deletes its peer in the other netns. */
        return delete_link(sk, ifname, ret_err);
}

/* The IPv6 sysctls of the calling thread's network namespace
 * (/proc/sys/net resolves against the opener's), before eth0 goes up; the
 * one configuration of a sandbox's IPv6 for both ways eth0 comes to be: at
 * start (core_net_configure_inside, in sandbox-init) and on leaving
 * deny-all (eth0_thread, in the daemon). Without IPv6 (`v6` false: no
 * IPv6 pool, or no eth0) it is off everywhere: the host table then denies
 * every IPv6 packet of a session, and this is a second layer. With it, on
 * for lo and eth0 without router advertisements, SLAAC or redirects (the
 * only routes are the ones added by this file; /proc/sys is read-only for
 * the sandbox afterwards), and no link-local address on eth0
 * (addr_gen_mode 1, "none", before the link is up, which is when the
 * kernel would make one): its only link is the veth, whose far end is the
 * host, and the ULA is enough for neighbour discovery there. A connect to
 * the host side's link-local address then leaves from the ULA, so the TCP
 * reset that refuses it is routed back over the veth (a reset to a
 * link-local source is routed without its scope and left by another link:
 * the connect hung). The addresses themselves are added without DAD
 * (add_addr127). */
static int ipv6_sysctls(bool v6, sb_error **ret_err) {
        static const char *const ifs[] = { "all", "default", "lo", SANDBOX_IFNAME };
        int r;
        for (size_t i = 0; i < ELEMENTSOF(ifs); i++)
                if ((r = v6 ? enable_ipv6(ifs[i]) : disable_ipv6(ifs[i])) < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "%s IPv6 on %s: %s", v6 ? "enable" : "disable",
                                            ifs[i], strerror(-r));
        if (v6) {
                char path[96];
                snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/addr_gen_mode", SANDBOX_IFNAME);
                if ((r = core_write_string(path, "1")) < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "IPv6 addr_gen_mode on %s: %s", SANDBOX_IFNAME,
                                            strerror(-r));
        }
        return 0;
}

/* Runs in sandbox-init, inside the sandbox's fresh network namespace, as
 * root there, BEFORE /proc/sys is remounted read-only: the IPv6 sysctl
 * writes below are the last writes to /proc/sys/net the sandbox needs.
 * /proc/sys/net resolves against the writer's network namespace, so these
 * writes touch only the sandbox's own stack. */
int core_net_configure_inside(const core_net_pool *pool, unsigned slot, bool with_eth0,
                              sb_error **ret_err) {
        _cleanup_(nl_socket_freep) struct nl_sock *sk = NULL;
        int r, ifindex = 0;

        /* IPv6 first, before any link is up. */
        bool v6 = with_eth0 && pool->prefix6;
        if ((r = ipv6_sysctls(v6, ret_err)) < 0)
                return r;
        if ((r = route_socket(&sk, ret_err)) < 0)
                return r;
        if ((r = link_up(sk, "lo", NULL, ret_err)) < 0 || !with_eth0)
                return r;
        if (slot >= core_net_pool_slots(pool))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "network slot %u out of range", slot);
        if ((r = link_up(sk, SANDBOX_IFNAME, &ifindex, ret_err)) < 0 ||
            (r = add_addr31(sk, ifindex, core_net_sandbox_addr(pool, slot), SANDBOX_IFNAME, ret_err)) < 0)
                return r;
        if ((r = add_default_route(sk, ifindex, core_net_host_addr(pool, slot), ret_err)) < 0 || !v6)
                return r;
        struct in6_addr gw6 = core_net_host_addr6(pool, slot);
        if ((r = add_addr127(sk, ifindex, core_net_sandbox_addr6(pool, slot), SANDBOX_IFNAME, ret_err)) < 0)
                return r;
        return add_default_route_family(sk, ifindex, AF_INET6, &gw6, sizeof(gw6), ret_err);
}

/* ---- a veth given to a running sandbox (live policy update) ---- */

typedef struct eth0_job {
        bool fence;               /* core_net_fence_gateway, else configure */
        int netns_fd;
        const core_net_pool *pool;
        unsigned slot;
        sb_error *err;
        int r;
} eth0_job;

/* The sandbox's route to its gateway, a host route (/32 or /128) of type
 * unreachable: add (a fenced deny-all session) or delete (leaving it; none
 * there is fine). */
static int gateway_unreachable_family(struct nl_sock *sk, int family, const void *gw, bool add, sb_error **err) {
        _cleanup_(rtnl_route_putp) struct rtnl_route *rt = rtnl_route_alloc();
        _cleanup_(nl_addr_putp) struct nl_addr *dst = nl_addr_build(family, gw, family == AF_INET ? 4 : 16);
        if (!rt || !dst)
                return sb_error_set(err, -ENOMEM, NULL, NULL, "netlink: out of memory");
        nl_addr_set_prefixlen(dst, family == AF_INET ? 32 : 128);
        rtnl_route_set_family(rt, (uint8_t) family);
        rtnl_route_set_table(rt, RT_TABLE_MAIN);
        rtnl_route_set_protocol(rt, RTPROT_STATIC);
        rtnl_route_set_scope(rt, RT_SCOPE_UNIVERSE);
        rtnl_route_set_type(rt, RTN_UNREACHABLE);
        int r = rtnl_route_set_dst(rt, dst);
        if (r >= 0)
                r = add ? rtnl_route_add(sk, rt, NLM_F_REPLACE) : rtnl_route_delete(sk, rt, 0);
        if (!add && (r == -NLE_OBJ_NOTFOUND || r == -NLE_NOADDR))
                return 0;
        if (r < 0)
                return nl_fail(err, r, add ? (family == AF_INET ? "add unreachable route to the gateway on" :
                                              "add unreachable route to the IPv6 gateway on") :
                               (family == AF_INET ? "delete the unreachable route to the gateway on" :
                                                    "delete the unreachable route to the IPv6 gateway on"),
                               SANDBOX_IFNAME);
        return 0;
}

/* Both families' gateway routes of the fence (IPv6 only with a pool). */
static int gateway_unreachable(struct nl_sock *sk, const core_net_pool *pool, unsigned slot, bool add,
                               sb_error **err) {
        struct in_addr gw = core_net_host_addr(pool, slot);
        int r = gateway_unreachable_family(sk, AF_INET, &gw, add, err);
        if (r < 0 || !pool->prefix6)
                return r;
        struct in6_addr gw6 = core_net_host_addr6(pool, slot);
        return gateway_unreachable_family(sk, AF_INET6, &gw6, add, err);
}

/* A thread of its own: setns(CLONE_NEWNET) changes only the calling
 * thread's network namespace, and this thread ends right after, so no
 * other work of the daemon ever runs in the sandbox's namespace. The
 * netlink socket is opened after the setns and so talks to the sandbox's
 * stack, and so do the IPv6 sysctl writes: /proc/sys/net resolves against
 * the network namespace of the thread that opens the file (not the one of
 * the /proc mount, nor the process's), so the daemon's own /proc reaches
 * the sandbox's net.ipv6.conf.* although /proc/sys is read-only inside the
 * sandbox. A session started under deny-all had IPv6 disabled everywhere
 * (all, default, lo; eth0 made later inherits default): with an IPv6 pool
 * it is enabled here as sandbox-init does for a networked start (no RA,
 * SLAAC or redirects, written before eth0 goes up; the addresses without
 * DAD). */
static void *eth0_thread(void *userdata) {
        eth0_job *j = userdata;
        _cleanup_(nl_socket_freep) struct nl_sock *sk = NULL;
        int ifindex = 0;
        if (setns(j->netns_fd, CLONE_NEWNET) < 0) {
                j->r = sb_error_set(&j->err, negative_errno(), NULL, NULL, "enter the sandbox's network namespace: %m");
                return NULL;
        }
        if ((j->r = route_socket(&sk, &j->err)) < 0)
                return NULL;
        if (j->fence) {
                j->r = gateway_unreachable(sk, j->pool, j->slot, true, &j->err);
                return NULL;
        }
        if ((j->r = gateway_unreachable(sk, j->pool, j->slot, false, &j->err)) < 0)
                return NULL;
        if ((j->r = ipv6_sysctls(j->pool->prefix6 != 0, &j->err)) < 0)
                return NULL;
        if ((j->r = link_up(sk, SANDBOX_IFNAME, &ifindex, &j->err)) < 0)
                return NULL;
        /* Idempotent: a veth configured before (a fenced deny-all session,
         * or an adoption after a kill in the middle of an update) already
         * has them. */
        j->r = add_addr31(sk, ifindex, core_net_sandbox_addr(j->pool, j->slot), SANDBOX_IFNAME, &j->err);
        if (j->r == -EEXIST) {
                sb_error_free(TAKE_PTR(j->err));
                j->r = 0;
        }
        if (j->r < 0)
                return NULL;
        j->r = add_default_route(sk, ifindex, core_net_host_addr(j->pool, j->slot), &j->err);
        if (j->r == -EEXIST) {
                sb_error_free(TAKE_PTR(j->err));
                j->r = 0;
        }
        if (j->r < 0 || !j->pool->prefix6)
                return NULL;
        /* add_addr127 accepts an identical address already there; the
         * route is added with NLM_F_REPLACE. */
        struct in6_addr gw6 = core_net_host_addr6(j->pool, j->slot);
        if ((j->r = add_addr127(sk, ifindex, core_net_sandbox_addr6(j->pool, j->slot), SANDBOX_IFNAME, &j->err)) < 0)
                return NULL;
        j->r = add_default_route_family(sk, ifindex, AF_INET6, &gw6, sizeof(gw6), &j->err);
        return NULL;
}

static int eth0_run(bool fence, int netns_fd, const core_net_pool *pool, unsigned slot, sb_error **ret_err) {
        eth0_job j = { .fence = fence, .netns_fd = netns_fd, .pool = pool, .slot = slot };
        pthread_t t;
        if (netns_fd < 0 || slot >= core_net_pool_slots(pool))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "configure eth0: no network namespace or slot %u",
                                    slot);
        int r = pthread_create(&t, NULL, eth0_thread, &j);
        if (r != 0)
                return sb_error_set(ret_err, -r, NULL, NULL, "configure eth0: start a thread: %s", strerror(r));
        pthread_join(t, NULL);
        if (j.r < 0) {
                if (ret_err && !*ret_err)
                        *ret_err = TAKE_PTR(j.err);
                sb_error_free(j.err);
                return j.r;
        }
        return 0;
}

int core_net_configure_eth0(int netns_fd, const core_net_pool *pool, unsigned slot, sb_error **ret_err) {
        return eth0_run(false, netns_fd, pool, slot, ret_err);
}

int core_net_fence_gateway(int netns_fd, const core_net_pool *pool, unsigned slot, sb_error **ret_err) {
        return eth0_run(true, netns_fd, pool, slot, ret_err);
}

/* ---- one daemon per network namespace ---- */

/* /run, not the daemon's run dir: two daemons with different run dirs must
 * still meet on the same file. The namespace's inode number names it (nsfs
 * inodes are unique while the namespace lives). */
#define NETNS_LOCK_FMT "/run/sandboxd-netns-%llu.lock"
#define NETNS_LOCK_TRIES 8

static int netns_lock_path(char *buf, size_t size) {
        struct stat st;
        if (stat("/proc/self/ns/net", &st) < 0)
                return negative_errno();
        snprintf(buf, size, NETNS_LOCK_FMT, (unsigned long long) st.st_ino);
        return 0;
}

/* The pid the holder wrote, or 0 when it is not there (yet). */
static pid_t lock_holder(int fd) {
        char buf[24] = "";
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
        return pid > 0 && pid < INT32_MAX ? (pid_t) pid : 0;
}

static int refuse_busy(int fd, sb_error **ret_err) {
        pid_t pid = lock_holder(fd), holder = 0;
        bool orphan = false;
        /* The pid written is the daemon that took the lock; the lock is on
         * the open file, so a process that inherited the fd holds it too.
         * When the writer is gone, name the process that holds it now. */
        bool writer_gone = pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH);
        if (writer_gone && core_lock_holder(fd, &holder, &orphan) > 0)
                return sb_error_set(ret_err, -EBUSY, NULL, NULL,
                                    "the lock of this network namespace is held by pid %d, %s; end that "
                                    "process (kill -9 %d) and start again",
                                    (int) holder,
                                    orphan ? "a child of a sandboxd that never ran its program"
                                           : "which inherited it from a sandboxd that is gone",
                                    (int) holder);
        if (pid > 0)
                return sb_error_set(ret_err, -EBUSY, NULL, NULL,
                                    "another sandboxd (pid %d) manages this network namespace; "
                                    "give each daemon its own network namespace", (int) pid);
        return sb_error_set(ret_err, -EBUSY, NULL, NULL,
                            "another sandboxd manages this network namespace; "
                            "give each daemon its own network namespace");
}

int core_net_lock_namespace(sb_error **ret_err) {
        char path[64];
        int r = netns_lock_path(path, sizeof(path));
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "stat /proc/self/ns/net: %s", strerror(-r));
        for (int i = 0; i < NETNS_LOCK_TRIES; i++) {
                /* O_NOFOLLOW: /run is root's, but a planted symlink must not
                 * make us truncate another file. */
                _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
                if (fd < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", path);
                if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                        if (errno == EWOULDBLOCK)
                                return refuse_busy(fd, ret_err);
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "lock %s: %m", path);
                }
                /* The holder unlinks the file before it lets go; a lock won
                 * on that unlinked inode guards nothing, so only a lock on
                 * the file the path names now counts. */
                struct stat held, named;
                if (fstat(fd, &held) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "stat %s: %m", path);
                if (stat(path, &named) < 0 || held.st_ino != named.st_ino || held.st_dev != named.st_dev)
                        continue;
                char pid[24];
                int len = snprintf(pid, sizeof(pid), "%d\n", (int) getpid());
                if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t) len, 0) != len)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "write %s: %m", path);
                return TAKE_FD(fd);
        }
        return sb_error_set(ret_err, -EAGAIN, NULL, NULL, "lock %s: it keeps being replaced", path);
}

void core_net_unlock_namespace(int fd) {
        if (fd < 0)
                return;
        char path[64];
        struct stat held, named;
        /* Unlink while still holding the lock, and only our own file: a
         * waiter that opened it meanwhile sees it unlinked and retries. */
        if (netns_lock_path(path, sizeof(path)) == 0 && fstat(fd, &held) == 0 && stat(path, &named) == 0 &&
            held.st_ino == named.st_ino && held.st_dev == named.st_dev)
                (void) unlink(path);
        close(fd);
}
