/* Per-session nftables elements generated from a network policy (DESIGN
 * §5.2). No session has a chain, rule or set of its own: everything a
 * session gets is elements of sets and maps shared by every session, all
 * inside `inet sandboxd` (built by libcore/nft.c; the shared objects below
 * are made in the same batch, pol_nft_host_extend(), so they come before
 * any session's elements and are found by name at once). A change is
 * element-only and costs the same whatever the number of sessions (issue
 * #23): the kernel's commit walks every chain of the table, a constant
 * number now, and each set message finds its set among the table's first
 * few. Every change is one libnftnl batch sent once (two for a custom
 * policy, see pol_nft_session_apply); errors name the message that failed
 * ("nftables: set allow4: add 2 range(s) of sbx3 from 10.0.0.0/8: File
 * exists").
 *
 * What a session gets, by mode:
 * - allow-all: the elements `"<if>" : accept` of `sessions` and
 *   `sessions_reply`; forwarded traffic is accepted after the host-wide
 *   rules (no host, no other sandbox, no link-local, no IPv6). The element
 *   is required: the host forward chain follows its lookup with `iifname
 *   "sbx*" goto deny`, so a veth without an element is denied, never
 *   forwarded. No input element: its DNS to the gateway is translated to
 *   the host's resolver by the shared chain dns_forward (`dnat ip to
 *   iifname . ip daddr . meta l4proto . th dport map @dnsfwd`), through
 *   its elements `"<if>" . <gateway> . udp . 53 : <upstream>` (and tcp) of
 *   `dnsfwd` and `"<if>" : jump dns_forward` of `sessions_nat` (see
 *   pol_nft_set_dns_upstream), and forwarded.
 * - deny-all: the element `"<if>" : goto deny` (it has no veth in normal
 *   operation; this keeps a stray one closed). No input element.
 * - custom: its ranges as elements of the keyed interval sets allow4,
 *   deny4, opened4, allow6, deny6, opened6 (slot a) or allow4_b ...
 *   opened6_b (slot b): its subnets.allow, its subnets.deny, and the part
 *   of the forbidden ranges its subnets.allow opens (the forbidden ranges
 *   themselves, the same for every session, are the shared address sets
 *   forbid4 and forbid6, as a custom policy without subnets.allow has
 *   them, so a session's elements are only what its policy names: the
 *   kernel's commit of an interval set costs in proportion to its size).
 *   A keyed set's key is the interface name (IFNAMSIZ bytes,
 *   zero-padded, as `meta iifname` loads it) followed by the address:
 *   one field, no NFT_SET_CONCAT, so the kernel keeps them in its rbtree,
 *   which compares whole keys with memcmp, and each session's ranges are
 *   one stretch of the key space. Every range has its end element (name,
 *   hi + 1), the end of one running to the top of the address space
 *   carrying into the name's last byte (always NUL in a real name), so a
 *   lookup never matches another session's range. Then the elements
 *   `"<if>" : goto custom` of `sessions`, `"<if>" : goto reply` of
 *   `sessions_reply`, `"<if>" : jump gateway` of `sessions_input`,
 *   `"<if>"` of `proxied`, and of the host table's keyed sets
 *   (libcore/net.h): `"<if>" . <generation>` in gens, `"<if>" :
 *   <generation>` in genmark (or genmark_b), its element of slot_b when
 *   slot b is in force, and its DNS pins `"<if>" . <address>` (with
 *   timeouts) in pins4/pins6. The shared chain custom, in order:
 *     iifname . ct mark @gens accept       flows this policy admitted
 *     ct status dnat goto deny             allow-all's DNS forwarding, older
 *     tcp dport 80, 443 goto deny          forwarded, so older than the proxy
 *     iifname @slot_b goto custom_b        slot b in force: the same steps
 *                                          on the "_b" sets, marking from
 *                                          genmark_b, in chain custom_b
 *     iifname . ip daddr @deny4 goto deny     subnets.deny beats everything
 *     ip daddr @forbid4 iifname . ip daddr != @opened4 goto deny
 *                                          rule 5 ranges not named by allow
 *     tcp/udp dport 53, 853 goto deny      no resolver but the DNS filter
 *     iifname . ip daddr @allow4 ct mark set iifname map @genmark accept
 *     udp dport 443 goto deny              QUIC: clients fall back to TCP
 *     iifname . ip daddr @pins4 ct mark set iifname map @genmark accept
 *     goto deny                            a custom policy denies the rest
 *   (the steps after the slot's goto are the packet decision table's,
 *   pol_packet_steps(), each IPv4 rule followed by its IPv6 twin). An
 *   interface with no range in a set matches nothing there and meets the
 *   final deny: fail closed. A custom policy replacing a custom policy
 *   is element-only: the unused slot's ranges put in first, then one
 *   batch that moves slot_b, gens, the new slot's genmark element and the
 *   pins and deletes the old slot's ranges. The slot is decided once per
 *   packet (the goto), so a packet meeting a change's commit is judged by
 *   one slot's ranges and marked with that slot's generation: the old
 *   one, judged again on its next packet, or the new one.
 *   `deny` answers TCP with a reset and anything else with ICMP
 *   admin-prohibited. The shared chain reply is the same for the reply
 *   direction of a flow that fails the generation check (`oifname`, `ip
 *   saddr`, `th sport`, denials `drop`, and `ct state related drop` after
 *   the check; its slot-b rules in reply_b). The shared chain gateway,
 *   which the host input chain reaches through `sessions_input` after
 *   `ct state established,related accept` and before its final rejects:
 *     iifname . ip daddr . meta l4proto . th dport @gw4 accept
 *     iifname . ip6 daddr . meta l4proto . th dport @gw6 accept
 *     goto deny                            the rest of the host stays shut
 *   with the session's elements `"<if>" . <gateway> . udp . 53`, tcp 53
 *   (the DNS filter, sandbox-netd) and tcp 3128 (the egress proxy) in
 *   gw4, and tcp 3128 at its IPv6 gateway in gw6. The element of
 *   `proxied` makes the host table's prerouting (nat) chain redirect the
 *   session's TCP to ports 80 and 443 to <gateway>:3128 (POL_PROXY_PORT),
 *   so HTTP and HTTPS pass the proxy even from clients that ignore
 *   HTTP(S)_PROXY.
 *
 * The generator keeps in memory, per interface, the elements it must
 * delete later that it cannot name from the interface alone (each slot's
 * ranges, the gateway and DNS-forwarding elements) as the last committed
 * batch left them: the daemon is the table's only writer.
 *
 * The host table holds no session state of its own: after
 * core_net_host_setup(), or core_net_host_ensure() returning 1 (the table
 * was re-installed), every session's elements are gone and its veth is
 * denied in both directions of the host, so the caller must call
 * pol_nft_host_reset() and then pol_nft_session_apply() again for every
 * live session.
 *
 * Both families (DESIGN §5): each IPv4 range set has its IPv6 twin
 * (allow6, deny6, opened6, forbid6, and the shared pins6; forbid6 holds the IPv6
 * rows of the forbidden table and every IPv6 form, IPv4-mapped, NAT64,
 * IPv4-compatible, 6to4, of its IPv4 rows, as match.c unwraps them) with
 * its rule right after the IPv4 one, and the gateway services admit the
 * proxy port at the veth's IPv6 gateway address too. Without an IPv6 pool
 * the host table denies every IPv6 packet of a session before the
 * dispatch. */
#pragma once

#include <netinet/in.h>
#include <stdint.h>
#include "libcore/error.h"
#include "libcore/net.h"
#include "policy/match.h"
#include "policy/policy.h"

/* The objects every session shares, made with the host table
 * (pol_nft_host_extend): the keyed address-range sets (slot b's with the
 * suffix "_b"), the gateway-service and DNS-forwarding sets, and the chains. */
#define POL_NFT_ALLOW4_SET "allow4"
#define POL_NFT_DENY4_SET "deny4"
#define POL_NFT_FORBID4_SET "forbid4"
#define POL_NFT_OPENED4_SET "opened4"
#define POL_NFT_ALLOW6_SET "allow6"
#define POL_NFT_DENY6_SET "deny6"
#define POL_NFT_FORBID6_SET "forbid6"
#define POL_NFT_OPENED6_SET "opened6"
#define POL_NFT_GW4_SET "gw4"
#define POL_NFT_GW6_SET "gw6"
#define POL_NFT_DNSFWD_MAP "dnsfwd"
#define POL_NFT_CUSTOM_CHAIN "custom"
#define POL_NFT_CUSTOM_B_CHAIN "custom_b"
#define POL_NFT_REPLY_CHAIN "reply"
#define POL_NFT_REPLY_B_CHAIN "reply_b"
#define POL_NFT_GATEWAY_CHAIN "gateway"
#define POL_NFT_DNS_FORWARD_CHAIN "dns_forward"

/* Registers the shared objects above with the host table
 * (core_net_host_extend): from then on core_net_host_setup() and
 * core_net_host_ensure() make them, generated from the packet decision
 * table (pol_packet_steps()), in the table's batch. Call once at start,
 * before the table is set up. */
void pol_nft_host_extend(void);

/* Floor of a DNS pin's lifetime, seconds (DESIGN §5.1 rule 6). */
#define POL_NFT_PIN_MIN_TTL 30
/* Most DNS-pinned addresses a session holds at once (the set's size). */
#define POL_NFT_PIN_MAX 16384

/* Creates, or atomically replaces, the elements of session interface
 * `ifname` ("sbx<n>") for policy p: a custom policy's ranges (allow, deny,
 * forbid) are put in first, in a batch of their own, in the slot the
 * session does not use (allow4 or allow4_b, ...); then one batch moves the
 * session to it and to a new generation and deletes the old slot's ranges
 * (custom to custom), or deletes the old elements and adds the new ones
 * (any other change), so no packet sees both or neither (rule 9; the
 * kernel may show an interval set's new elements only as the transaction
 * that added them ends, after its other elements already apply). The session's DNS pins are deleted
 * in the same batch: they were judged under the old policy (fail closed). `gateway` is the
 * host side of the session's veth (core_net_host_addr() of its slot), where
 * the DNS filter answers; only a custom policy uses it, and then it must be
 * a unicast address (-EINVAL otherwise). The host table must exist
 * (core_net_host_setup). Returns 0 or a negative errno with *ret_err naming
 * the failing object. */
int pol_nft_session_apply(const char *ifname, const pol_policy *p, struct in_addr gateway,
                          sb_error **ret_err);

/* A DNS pin carried over a change: the address and the seconds it has
 * left (floored to POL_NFT_PIN_MIN_TTL). */
typedef struct pol_nft_carried_pin {
        pol_addr addr;
        uint32_t ttl_s;
} pol_nft_carried_pin;

/* pol_nft_session_apply() that also puts `pins` (n_pins, borrowed) into
 * the shared pin sets (pins4/pins6) in the same batch (custom policies only;
 * the caller passes only pins the new policy allows): flows of an older
 * generation to those addresses meet the new rules with their pins in
 * place. Flow generations: each custom change draws a new ct mark for the
 * session's chains (pol_nft_set_mark_store); a flow admitted under any
 * other generation is judged again on its next packet in either direction
 * (chain custom for the sandbox's packets, chain reply through the host table's
 * `sessions_reply` map for the replies), and cut at once if the new policy
 * denies it: no conntrack entry needs deleting. -ENOSPC (with *ret_err)
 * when no generation can be reserved. */
int pol_nft_session_apply_pins(const char *ifname, const pol_policy *p, struct in_addr gateway,
                               const pol_nft_carried_pin *pins, size_t n_pins, sb_error **ret_err);

/* Durably records that every generation below `*ret_limit` (> next) is
 * taken, before any of them is used; 0 or a negative errno. Called under
 * the generator's lock, from the thread that applies a policy. */
typedef int (*pol_nft_mark_reserve_fn)(void *userdata, uint32_t next, uint32_t *ret_limit);

/* Where generations (ct marks) come from: `next` is the first one not
 * handed out by an earlier run (as the store recorded it; 0 means 1), and
 * `reserve` is called before each block is used, so a restarted daemon
 * never gives a new policy the mark of flows an old one admitted. Without
 * a store (tests) marks start at 1 in each process. Call once at start,
 * before any session is applied. */
void pol_nft_set_mark_store(uint32_t next, pol_nft_mark_reserve_fn reserve, void *userdata);

/* Tells the generator the daemon's address pools (once, at start, before
 * any session is applied): with an IPv6 pool, the gateway chain of
 * "sbx<n>" also admits the egress proxy's port at the IPv6 gateway of slot
 * n (core_net_host_addr6()). */
void pol_nft_set_ipv6_pool(const core_net_pool *pool);

/* The host table was installed anew (core_net_host_setup(), or
 * core_net_host_ensure() returning 1): every session's elements went with
 * the old one, so the generator forgets what it recorded of them (each
 * session's DNS pins, ranges, gateway and DNS-forwarding elements, and
 * that it has a custom policy: pol_nft_pin() answers -ENOENT until the
 * session is applied again). Required before the sessions are applied
 * again: a change deletes what the record names, and a delete of a
 * missing element fails its batch. Safe from any thread. */
void pol_nft_host_reset(void);

/* Deletes every element of session `ifname`; nothing there is
 * success. Its veth, if it still exists, is denied from then on. Returns 0
 * or a negative errno with *ret_err filled. */
int pol_nft_session_remove(const char *ifname, sb_error **ret_err);

/* Sets the resolver an allow-all session's DNS to its gateway (UDP and TCP
 * port 53) is translated to by later pol_nft_session_apply() calls: an
 * IPv4 unicast address the host reaches by forwarding (not loopback: the
 * sandbox's packets cannot be routed there), in network order; 0.0.0.0
 * for none (allow-all lookups then fail at once). Call before sessions are
 * applied; safe from any thread. */
void pol_nft_set_dns_upstream(struct in_addr upstream);

/* Pins `addr` for the session: the element `"<if>" . <addr>` of the host
 * table's shared pins4 set, for ttl_s seconds (at least
 * POL_NFT_PIN_MIN_TTL). Re-pinning an address refreshes its timeout on
 * kernels that update element timeouts (Linux 6.10+); older kernels keep
 * the first one. The caller has judged the address with
 * pol_check_resolved(). -ENOENT when the session has no custom policy
 * (as this process applied it); -ENOSPC when it already holds
 * POL_NFT_PIN_MAX live pins (the bound a set of its own gave it). */
int pol_nft_pin(const char *ifname, struct in_addr addr, uint32_t ttl_s, sb_error **ret_err);

/* pol_nft_pin() for an IPv6 address (an accepted AAAA answer): into the
 * shared pins6 set. */
int pol_nft_pin6(const char *ifname, const struct in6_addr *addr, uint32_t ttl_s, sb_error **ret_err);

/* pol_nft_pin() or pol_nft_pin6() by the address's family. */
int pol_nft_pin_addr(const char *ifname, const pol_addr *addr, uint32_t ttl_s, sb_error **ret_err);

/* One inclusive address range of `family` (AF_INET: the first 4 bytes of
 * lo and hi; AF_INET6: all 16), network order. */
typedef struct pol_nft_range {
        int family;
        uint8_t lo[16], hi[16];
} pol_nft_range;

/* The addresses custom or allow-all policy p keeps unreachable whatever
 * else it says: the forbidden-range table and match.c's built-in never
 * rows, minus what subnets.allow opens (exactly what a session's
 * forbid4/forbid6 sets hold), as disjoint ranges, IPv4 first. *ret is the
 * caller's to free. 0 or -ENOMEM. */
int pol_nft_forbidden(const pol_policy *p, pol_nft_range **ret, size_t *ret_n);

/* The addresses of n CIDRs c (both families) as disjoint merged ranges,
 * IPv4 first (an interval set's elements). *ret is the caller's to free.
 * 0 or -ENOMEM. */
int pol_nft_cidr_ranges(const pol_cidr *c, size_t n, pol_nft_range **ret, size_t *ret_n);
