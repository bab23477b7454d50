/* The kernel's own view of an address, asked over rtnetlink (rtnetlink(7),
 * libmnl): whether a destination routes as ordinary unicast, and a watch on
 * the host's address changes. Neither needs a privilege: RTM_GETROUTE and
 * the address multicast groups are open to every user. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* Asks the kernel how it would route a packet to `addr` (`family` AF_INET,
 * 4 bytes, or AF_INET6, 16 bytes, network order) from this network
 * namespace: one RTM_GETROUTE request for the destination (the same FIB
 * lookup connect(2) does). An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is
 * asked as its IPv4 address, which is where a socket sends it.
 *
 * Returns 1 when the route type is RTN_UNICAST (a remote host, via an
 * interface or a gateway); 0 when it is anything else: RTN_LOCAL (an
 * address of this host, loopback included), RTN_BROADCAST, RTN_ANYCAST,
 * RTN_MULTICAST, RTN_BLACKHOLE, RTN_UNREACHABLE, RTN_PROHIBIT, or no route
 * at all; *ret_type (may be NULL) gets the RTN_* type, or RTN_UNSPEC when
 * the kernel had no route. A negative errno when the kernel could not be
 * asked; callers fail closed on it. */
int core_route_is_unicast(int family, const void *addr, unsigned *ret_type);

/* Name of an RTN_* route type as ip-route(8) prints it ("local",
 * "broadcast", ...; "none" for RTN_UNSPEC). Static string. */
const char *core_route_type_to_string(unsigned type);

/* Opens a non-blocking rtnetlink socket that joins RTNLGRP_IPV4_IFADDR and
 * RTNLGRP_IPV6_IFADDR: it turns readable whenever an address is added to or
 * removed from any interface of this network namespace. Returns the fd
 * (caller owns; O_CLOEXEC) or a negative errno. */
int core_addr_monitor_open(void);

/* Reads every pending message of a monitor fd without blocking. Returns 1
 * when at least one was an address change (RTM_NEWADDR / RTM_DELADDR) that
 * `ignore` (may be NULL) did not dismiss, or the socket overran (changes
 * were lost: the caller must assume one); 0 when none; or a negative
 * errno. `ignore` gets the family and the address (4 or 16 bytes, network
 * order) of each change. */
int core_addr_monitor_drain(int fd, bool (*ignore)(int family, const void *addr, void *userdata), void *userdata);
