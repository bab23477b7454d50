/* Per-session nftables objects generated from a network policy (DESIGN
 * §5.2): the chain `s_<ifname>`, its address sets and its element of the
 * host table's `sessions` verdict map, all inside `inet sandboxd` (built by
 * libcore/nft.c). Every change is one libnftnl batch sent once; errors name
 * the message that failed ("nftables: set s_sbx3_allow4 element
 * 10.0.0.0/8: File exists").
 *
 * What a session gets, by mode:
 * - allow-all: nothing; forwarded traffic meets the forward chain's policy
 *   (accept) after the host-wide rules (no host, no other sandbox, no
 *   link-local, no IPv6).
 * - deny-all: the map element `"<if>" : goto deny` (it has no veth in
 *   normal operation; this keeps a stray one closed).
 * - custom: chain s_<if> and sets s_<if>_allow4, _deny4, _forbid4 (interval
 *   sets, disjoint merged ranges) and _dns4 (timeouts, DNS pins), and the
 *   element `"<if>" : goto s_<if>`. The chain, in order:
 *     ct state established,related accept
 *     ip daddr @deny4 goto deny            subnets.deny beats everything
 *     ip daddr @forbid4 goto deny          rule 5 ranges not named by allow
 *     tcp/udp dport 53, 853 goto deny      no resolver but the DNS filter
 *     ip daddr @allow4 accept              subnets.allow
 *     ip daddr @dns4 accept                pinned answers of allowed names
 *     goto deny                            a custom policy denies the rest
 *   where `deny` answers TCP with a reset and anything else with ICMP
 *   admin-prohibited.
 *
 * IPv4 only: the host table rejects every IPv6 packet from "sbx*" before
 * the dispatch, so IPv6 CIDRs of a policy have nothing to act on here and
 * no v6 sets are made (match.c likewise never judges an IPv4 address
 * against an IPv6 CIDR). */
#pragma once

#include <netinet/in.h>
#include <stdint.h>
#include "libcore/error.h"
#include "policy/policy.h"

/* Floor of a DNS pin's lifetime, seconds (DESIGN §5.1 rule 6). */
#define POL_NFT_PIN_MIN_TTL 30

/* Creates, or atomically replaces, the objects of session interface
 * `ifname` ("sbx<n>") for policy p, in one batch: the old chain, sets and
 * map element are deleted and the new ones added, so no packet sees both or
 * neither (rule 9). DNS pins of the old policy are dropped with its set:
 * they were judged under the old policy (fail closed). The host table must
 * exist (core_net_host_setup). Returns 0 or a negative errno with *ret_err
 * naming the failing object. */
int pol_nft_session_apply(const char *ifname, const pol_policy *p, sb_error **ret_err);

/* Deletes every object of session `ifname`; nothing there is success.
 * Returns 0 or a negative errno with *ret_err filled. */
int pol_nft_session_remove(const char *ifname, sb_error **ret_err);

/* Pins `addr` into the session's s_<if>_dns4 set for ttl_s seconds (at
 * least POL_NFT_PIN_MIN_TTL). Re-pinning an address refreshes its timeout
 * on kernels that update element timeouts (Linux 6.10+); older kernels keep
 * the first one. The caller has judged the address with
 * pol_check_resolved(). -ENOENT when the session has no custom policy. */
int pol_nft_pin(const char *ifname, struct in_addr addr, uint32_t ttl_s, sb_error **ret_err);
