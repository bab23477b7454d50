/* Per-session nftables objects generated from a network policy (DESIGN
 * §5.2): the chains `s_<ifname>` (forward; also prerouting, through the
 * host table's `no_route` chain, for a destination the host cannot route)
 * and `i_<ifname>` (input, the gateway services), the address sets and the session's elements of the
 * host table's `sessions` and `sessions_input` verdict maps, all inside
 * `inet sandboxd` (built by libcore/nft.c), and its element of the
 * `proxied` interface set. Every change is one libnftnl batch sent once; errors name
 * the message that failed ("nftables: set s_sbx3_allow4 element
 * 10.0.0.0/8: File exists").
 *
 * What a session gets, by mode:
 * - allow-all: the map element `"<if>" : accept`; forwarded traffic is
 *   accepted after the host-wide rules (no host, no other sandbox, no
 *   link-local, no IPv6). The element is required: the host forward chain
 *   follows its lookup with `iifname "sbx*" goto deny`, so a veth without
 *   an element is denied, never forwarded. No input element: its DNS to
 *   the gateway is translated to the host's resolver (DNAT in chain
 *   n_<if>, element `"<if>" : jump n_<if>` of `sessions_nat`, see
 *   pol_nft_set_dns_upstream) and forwarded.
 * - deny-all: the map element `"<if>" : goto deny` (it has no veth in
 *   normal operation; this keeps a stray one closed). No input element.
 * - custom: chain s_<if> and, in two slots, the sets s_<if>_allow4,
 *   _deny4, _forbid4 and s_<if>_allow4_b, _deny4_b, _forbid4_b (interval
 *   sets, disjoint merged ranges; the session's element of the host set
 *   slot_b says which slot is in force), the element `"<if>" : goto
 *   s_<if>`, and the session's elements of the host table's shared sets
 *   (libcore/net.h): `"<if>" . <generation>` in gens, `"<if>" :
 *   <generation>` in genmark (or genmark_b), and its DNS pins `"<if>" .
 *   <address>` (with timeouts) in pins4. The chain, in order:
 *     iifname . ct mark @gens accept       flows this policy admitted
 *     ct status dnat goto deny             allow-all's DNS forwarding, older
 *     tcp dport 80, 443 goto deny          forwarded, so older than the proxy
 *     iifname @slot_b goto s_<if>_b        slot b in force: the same steps
 *                                          on the "_b" sets, marking from
 *                                          genmark_b, in chain s_<if>_b
 *     ip daddr @deny4 goto deny            subnets.deny beats everything
 *     ip daddr @forbid4 goto deny          rule 5 ranges not named by allow
 *     tcp/udp dport 53, 853 goto deny      no resolver but the DNS filter
 *     udp dport 443 goto deny              QUIC: clients fall back to TCP
 *     ip daddr @allow4 ct mark set iifname map @genmark accept   subnets.allow
 *     iifname . ip daddr @pins4 ct mark set iifname map @genmark accept   pins
 *     goto deny                            a custom policy denies the rest
 *   Nothing in the chains depends on the policy, only on the interface:
 *   a custom policy replacing a custom policy is element-only (the unused
 *   slot's sets filled, then one batch that moves slot_b, gens, the new
 *   slot's genmark element and the pins and empties the old slot),
 *   never a rule, chain or verdict-map element, so its cost does not grow
 *   with the number of sessions (issue #23). The slot is decided once per
 *   packet (the goto), so a packet meeting a change's commit is judged by
 *   one slot's sets and marked with that slot's generation: the old one,
 *   judged again on its next packet, or the new one.
 *   where `deny` answers TCP with a reset and anything else with ICMP
 *   admin-prohibited; chain r_<if>, the same for the reply direction of a
 *   flow that fails the generation check (`oifname`, `ip saddr`, `th sport`,
 *   denials `drop`, and `ct state related drop` after the check; its slot-b
 *   rules in r_<if>_b), and the element
 *   `"<if>" : goto r_<if>` in `sessions_reply` (allow-all: `accept`;
 *   deny-all: none, the host drops). Also chain i_<if> and the element `"<if>" : jump
 *   i_<if>` in `sessions_input`, which the host input chain consults after
 *   `ct state established,related accept` and before its final rejects:
 *     ip daddr <gateway> udp dport 53 accept   the DNS filter (sandbox-netd)
 *     ip daddr <gateway> tcp dport 53 accept
 *     ip daddr <gateway> tcp dport 3128 accept the egress proxy (sandbox-netd)
 *     goto deny                                the rest of the host stays shut
 *   and the element `"<if>"` in the interface set `proxied`, which the
 *   host table's prerouting (nat) chain looks up to redirect the session's
 *   TCP to ports 80 and 443 to <gateway>:3128 (POL_PROXY_PORT), so HTTP and
 *   HTTPS pass the proxy even from clients that ignore HTTP(S)_PROXY.
 *
 * The host table holds no session state of its own: after
 * core_net_host_setup(), or core_net_host_ensure() returning 1 (the table
 * was re-installed), every session's elements are gone and its veth is
 * denied in both directions of the host, so the caller must call
 * pol_nft_session_apply() again for every live session.
 *
 * Both families (DESIGN §5): each IPv4 set has its IPv6 twin (s_<if>_allow6,
 * _deny6, _forbid6, and the shared pins6; forbid6 holds the IPv6 rows of the forbidden
 * table and every IPv6 form, IPv4-mapped, NAT64, IPv4-compatible, 6to4,
 * of its IPv4 rows, as match.c unwraps them) with its rule right after
 * the IPv4 one (`ip6 daddr @deny6 goto deny` after `ip daddr @deny4 goto
 * deny`, and so on), and the gateway chain admits the proxy port at the
 * veth's IPv6 gateway address too. Without an IPv6 pool the host table
 * denies every IPv6 packet of a session before the dispatch. */
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
#define POL_NFT_ALLOW6_SET "allow6"
#define POL_NFT_DENY6_SET "deny6"
#define POL_NFT_FORBID6_SET "forbid6"
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

/* Creates, or atomically replaces, the objects of session interface
 * `ifname` ("sbx<n>") for policy p: a custom policy's interval sets
 * (allow, deny, forbid) are filled first, in a batch of their own, in the
 * slot the session does not use ("s_<if>_allow4" or "s_<if>_allow4_b");
 * then one batch moves the session to it and to a new generation (custom
 * to custom: elements only), or deletes the old chains, sets and map
 * elements and adds the new ones (any other change), so no packet sees
 * both or neither (rule 9; the kernel shows an interval set's elements
 * only as the transaction that filled it ends, after that transaction's
 * rules and elements already apply). The session's DNS pins are deleted
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
 * (s_<if> for the sandbox's packets, r_<if> through the host table's
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
 * core_net_host_ensure() returning 1): every session's objects went with
 * the old one, so the generator forgets what it recorded of them (each
 * session's DNS pins, and that it has a custom policy: pol_nft_pin()
 * answers -ENOENT until the session is applied again). Safe from any
 * thread. */
void pol_nft_host_reset(void);

/* Deletes every object of session `ifname`, in both maps; nothing there is
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
