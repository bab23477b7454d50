/* Connection-tracking cleanup for policy updates (ctnetlink over libmnl).
 *
 * A session's nftables chain accepts `ct state established,related` before
 * any policy rule (DESIGN §5.1 rule 6: an established flow outlives the
 * expiry of the DNS pin that admitted it). After `sandbox.update` swaps the
 * policy, flows admitted by the old policy would therefore keep flowing.
 * Deleting the conntrack entries a sandbox originated makes the next packet
 * of every such flow be judged again by the new rules (a denied TCP flow is
 * then reset by the chain's reject). Conntrack entries live per network
 * namespace: these functions act on the caller's. */
#pragma once

#include <netinet/in.h>
#include "libcore/error.h"

/* Deletes every IPv4 conntrack entry whose original-direction source address
 * is `src` (network order): for a sandbox, its veth address,
 * core_net_sandbox_addr(). Each entry is deleted by its full original tuple
 * (addresses, protocol, ports or ICMP id) plus its conntrack id, so an entry
 * that was replaced in between is left alone; an entry already gone (ENOENT)
 * counts as done, not as an error.
 *
 * Bounded work: at most 16384 entries per pass and 4 passes; every netlink
 * receive times out after 5 s. Needs CAP_NET_ADMIN in the owning user
 * namespace of the network namespace.
 *
 * Returns the number of entries deleted (>= 0), or a negative errno with
 * *ret_err filled: -EPERM without CAP_NET_ADMIN, -EAGAIN when a kernel
 * receive timed out, -E2BIG when entries of `src` were still left after the
 * last pass (a sandbox opening flows faster than they are removed). */
int core_conntrack_flush_source(struct in_addr src, sb_error **ret_err);

/* core_conntrack_flush_source() for the IPv6 conntrack entries whose
 * original-direction source is `src` (a sandbox's IPv6 veth address,
 * core_net_sandbox_addr6()). Same bounds and errors. */
int core_conntrack_flush_source6(const struct in6_addr *src, sb_error **ret_err);

/* Counts the IPv4 conntrack entries whose original-direction source is
 * `src` (network order), in the caller's network namespace (tests,
 * diagnostics). Returns the count or a negative errno with *ret_err
 * filled. Each netlink receive times out after 5 s. */
int core_conntrack_count_source(struct in_addr src, sb_error **ret_err);
