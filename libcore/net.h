/* Network plumbing for sessions: the host-wide nftables table, per-session
 * veth pairs (libnl-route-3) and the configuration of a sandbox's own network
 * namespace from inside it.
 *
 * Addressing (DESIGN §5): session slot n of the pool 10.201.0.0/16 gets the
 * /31 pair host 10.201.0.0 + 2n, sandbox 10.201.0.0 + 2n + 1. The host side
 * is named "sbx<n>", the sandbox side "eth0". */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <sys/types.h>
#include "libcore/error.h"

typedef struct core_net_pool {
        struct in_addr base;  /* network order; default 10.201.0.0 */
        unsigned prefix;      /* default 16 */
} core_net_pool;

/* Host-side address (network order) of slot n, and the sandbox side. */
struct in_addr core_net_host_addr(const core_net_pool *pool, unsigned slot);
struct in_addr core_net_sandbox_addr(const core_net_pool *pool, unsigned slot);
/* Number of /31 slots in the pool. */
unsigned core_net_pool_slots(const core_net_pool *pool);

/* Host-wide setup, run once at daemon start (idempotent): enables IPv4
 * forwarding and (re)creates the nftables table `inet sandboxd` in one atomic
 * libnftnl batch: traffic from any "sbx*" interface to the host itself is
 * rejected (TCP reset, otherwise ICMP admin-prohibited), forwarded traffic
 * from "sbx*" to another "sbx*" or to 169.254.0.0/16 is rejected, IPv6 from
 * "sbx*" is rejected, and the pool is masqueraded when it leaves through any
 * other interface. Errors name the failing rule (extended ACK). */
int core_net_host_setup(const core_net_pool *pool, sb_error **ret_err);

/* Removes the `inet sandboxd` table (daemon shutdown, tests). Missing table
 * is success. */
int core_net_host_teardown(sb_error **ret_err);

/* Creates veth "sbx<slot>" <-> peer, moves the peer into the network
 * namespace of `netns_pid` where it is named "eth0", assigns the host side
 * its /31 address, disables IPv6 on it and brings it up. On failure nothing
 * is left behind. */
int core_veth_create(const core_net_pool *pool, unsigned slot, pid_t netns_pid, sb_error **ret_err);

/* Deletes "sbx<slot>" (and so its peer). A missing link is success. */
int core_veth_delete(unsigned slot, sb_error **ret_err);

/* Inside the sandbox's network namespace (called by sandbox-init): brings up
 * lo; when `with_eth0`, gives eth0 the sandbox address of `slot` (/31), brings
 * it up and adds the default route via the host side. IPv6 is disabled on
 * every interface (net.ipv6.conf.{all,default}.disable_ipv6). */
int core_net_configure_inside(const core_net_pool *pool, unsigned slot, bool with_eth0,
                              sb_error **ret_err);
