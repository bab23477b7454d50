/* Network plumbing for sessions: the host-wide nftables table, per-session
 * veth pairs (libnl-route-3) and the configuration of a sandbox's own network
 * namespace from inside it.
 *
 * Addressing (DESIGN §5): session slot n of the pool 10.201.0.0/16 gets the
 * /31 pair host 10.201.0.0 + 2n, sandbox 10.201.0.0 + 2n + 1, and with an
 * IPv6 pool the /127 pair base6 + 2n, base6 + 2n + 1 on the same link. The
 * host side is named "sbx<n>", the sandbox side "eth0". */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "libcore/error.h"

typedef struct core_net_pool {
        struct in_addr base;  /* network order; default 10.201.0.0 */
        unsigned prefix;      /* default 16 */
        /* IPv6 (DESIGN §5: "the same for IPv6 from a configurable ULA
         * pool"): slot n gets the /127 pair host base6 + 2n, sandbox
         * base6 + 2n + 1 (RFC 6164 point-to-point links). prefix6 0: no
         * IPv6 (every IPv6 packet from a session is denied, as before). */
        struct in6_addr base6;
        unsigned prefix6;     /* 0, or 8..120; default 64 (fd5b:d0c5:6a1e::/64) */
} core_net_pool;

/* IPv6 host side and sandbox side of slot n (pool->prefix6 != 0). */
struct in6_addr core_net_host_addr6(const core_net_pool *pool, unsigned slot);
struct in6_addr core_net_sandbox_addr6(const core_net_pool *pool, unsigned slot);

/* Host-side address (network order) of slot n, and the sandbox side. */
struct in_addr core_net_host_addr(const core_net_pool *pool, unsigned slot);
struct in_addr core_net_sandbox_addr(const core_net_pool *pool, unsigned slot);
/* Number of /31 slots in the pool. */
unsigned core_net_pool_slots(const core_net_pool *pool);

/* Host-wide setup, run once at daemon start (idempotent): enables IPv4
 * forwarding and (re)creates the nftables table `inet sandboxd` in one atomic
 * libnftnl batch: traffic from any "sbx*" interface to the host itself is
 * rejected (through the `deny` chain: logged to NFLOG, libcore/nflog.h,
 * then TCP reset, otherwise ICMP admin-prohibited), forwarded traffic
 * from "sbx*" to another "sbx*" or to 169.254.0.0/16 is rejected, and the
 * pool is masqueraded when it leaves through any other interface. Without
 * an IPv6 pool (prefix6 0) IPv6 from "sbx*" is rejected; with one, IPv6
 * forwarding is enabled too, the IPv6 pool is masqueraded (NAT66), and the
 * IPv6 forms of what the IPv4 rules keep unreachable are rejected (see
 * host_rules in nft.c). A sandbox's packet to a destination the host has
 * no route to meets the same verdicts in prerouting (chain `unrouted`),
 * before routing would drop it unjudged. Errors name the failing rule
 * (extended ACK). */
int core_net_host_setup(const core_net_pool *pool, sb_error **ret_err);

/* Objects another layer adds to the host table (policy/nftgen.c: the
 * chains and keyed sets every custom session shares, which it generates
 * from the policy engine's packet decision table; libcore cannot include
 * policy/). `build` appends them to the table's batch after the host's own
 * sets and rules, so they come before any session's object and are found
 * by name at once; it returns 0 or a negative errno. `chains` (n_chains,
 * with `rules`: how many rules each holds) and `sets` (n_sets) name them
 * for core_net_host_ensure(), which re-installs the table when one is
 * missing or a chain's rule count differs; deleting one of them alarms
 * core_net_monitor_read() as a host object would. Every pointer is
 * borrowed for the life of the process. */
struct core_nft_batch;
typedef struct core_nft_extension {
        int (*build)(struct core_nft_batch *bt);
        const char *const *chains;
        const unsigned *rules;
        size_t n_chains;
        const char *const *sets;
        size_t n_sets;
} core_nft_extension;

/* Registers the objects core_net_host_setup() and core_net_host_ensure()
 * add to the table from then on (NULL: none). Call once, before the
 * table is set up; not thread-safe against a setup in progress. */
void core_net_host_extend(const core_nft_extension *ext);

/* Removes the `inet sandboxd` table (daemon shutdown, tests). Missing table
 * is success. */
int core_net_host_teardown(sb_error **ret_err);

/* One sandboxd per network namespace: the `inet sandboxd` table and the
 * "sbx<n>" names are per namespace, so a second daemon there would delete
 * the first one's table at its shutdown (its sandboxes then reach the host
 * and the metadata address: fail-open) and reuse its slots. Takes an
 * exclusive flock on /run/sandboxd-netns-<inode of /proc/self/ns/net>.lock
 * and writes our pid into it. Call before any nftables or veth work and keep
 * the fd (O_CLOEXEC) for the daemon's life. Returns the fd (caller owns;
 * release with core_net_unlock_namespace) or a negative errno: -EBUSY when
 * another process holds it, with the message "another sandboxd (pid N)
 * manages this network namespace; give each daemon its own network
 * namespace". */
int core_net_lock_namespace(sb_error **ret_err);

/* Releases a lock from core_net_lock_namespace(): removes the lock file
 * (when it is still ours) and closes fd. Call last at shutdown, after the
 * nftables table is gone. A negative fd is a no-op. */
void core_net_unlock_namespace(int fd);

/* Creates veth "sbx<slot>" <-> peer, moves the peer into the network
 * namespace of `netns_pid` where it is named "eth0", assigns the host side
 * its /31 address (and with an IPv6 pool its /127, IPv6 on without RA or
 * SLAAC; otherwise IPv6 off) and brings it up. On failure nothing is left
 * behind. */
int core_veth_create(const core_net_pool *pool, unsigned slot, pid_t netns_pid, sb_error **ret_err);

/* Deletes "sbx<slot>" (and so its peer). A missing link is success. */
int core_veth_delete(unsigned slot, sb_error **ret_err);

/* Inside the sandbox's network namespace (called by sandbox-init): brings up
 * lo; when `with_eth0`, gives eth0 the sandbox address of `slot` (/31), brings
 * it up and adds the default route via the host side; with an IPv6 pool
 * also the /127 sandbox address and the IPv6 default route, IPv6 on
 * without RA, SLAAC or redirects. Without an IPv6 pool or without eth0,
 * IPv6 is disabled on every interface (net.ipv6.conf.*.disable_ipv6). */
int core_net_configure_inside(const core_net_pool *pool, unsigned slot, bool with_eth0,
                              sb_error **ret_err);

/* From the host (sandboxd), for a sandbox that was started without a veth
 * and gets one later (a live update from deny-all): inside the network
 * namespace `netns_fd` (an fd of /proc/<pid>/ns/net, kept by the caller),
 * brings eth0 up with the sandbox address of `slot` (/31) and adds the
 * default route via the host side; with an IPv6 pool also enables IPv6
 * (net.ipv6.conf.{all,default,lo,eth0}: accept_ra, autoconf and
 * accept_redirects 0, then disable_ipv6 0, through the daemon's /proc
 * from the thread inside the namespace: /proc/sys/net is the opener's
 * namespace's), adds the /127 sandbox address (no DAD) and the IPv6
 * default route, as core_net_configure_inside() does at start (and removes
 * the routes core_net_fence_gateway() added). Idempotent. Blocking (a short-lived thread that enters the namespace). 0 or a
 * negative errno with *ret_err filled; eth0 may be left up without its
 * address or route on failure (the caller deletes the veth). */
int core_net_configure_eth0(int netns_fd, const core_net_pool *pool, unsigned slot, sb_error **ret_err);

/* For a session switched to deny-all that keeps its veth (fenced by
 * nftables): inside `netns_fd`, a route of type unreachable to the gateway
 * (/32; with an IPv6 pool also to the IPv6 gateway, /128), so the
 * sandbox's DNS (resolv.conf names the gateway) and anything else sent to
 * it fails in the sandbox's own stack at once (EHOSTUNREACH) instead of
 * waiting on an ICMP answer the kernel rate-limits (net.ipv4.icmp_ratelimit,
 * net.ipv6.icmp.ratelimit). core_net_configure_eth0() removes them.
 * Idempotent; 0 or a negative errno with *ret_err filled. */
int core_net_fence_gateway(int netns_fd, const core_net_pool *pool, unsigned slot, sb_error **ret_err);

/* ---- fail closed when the table disappears ----
 *
 * `nft flush ruleset` (which `systemctl restart nftables` runs on Debian)
 * removes `inet sandboxd` with every other table; sandboxes would then reach
 * the host, link-local and the LAN without NAT. The daemon watches the
 * nftables notification group and repairs the table at once:
 *   core_net_monitor_read() == 1  ->  core_net_host_ensure() == 1
 *   ->  re-apply every session (pol_nft_session_apply).
 * The kernel has no per-interface default that the table could open
 * instead (see core_net_host_ensure in nft.c). */

/* Checks that the table, its chains and maps exist and that each host chain
 * holds exactly its rules; if not, re-installs the whole table as
 * core_net_host_setup() does (which drops every session chain). Returns 0
 * when the table was intact, 1 when it re-installed it (the caller must
 * re-apply the sessions), or a negative errno with *ret_err filled. */
int core_net_host_ensure(const core_net_pool *pool, sb_error **ret_err);

/* Opens a non-blocking, close-on-exec netlink socket subscribed to the
 * nftables notifications (NFNLGRP_NFTABLES) of the caller's network
 * namespace. Returns the fd (caller closes) or a negative errno. */
int core_net_monitor_open(sb_error **ret_err);

/* Reads every pending notification from a core_net_monitor_open() fd
 * without blocking. Returns 1 when one of them deleted the table, or a
 * chain, set or rule of it (or notifications were lost to an overflow,
 * which may have hidden one), 0 otherwise, or a negative errno. Set
 * elements are ignored: the daemon changes those itself (a session owns
 * no chain, rule or set, only elements of the shared ones). */
int core_net_monitor_read(int fd);

/* ---- nftables batches (used by policy/nftgen.c) ----
 *
 * One batch per change, sent once: messages built with libnftnl into a
 * growable buffer between batch-begin and batch-end, each with NLM_F_ACK
 * and a label; extended ACKs on; every ACK drained and the first error
 * mapped to its message's label: "nftables: <label>: <strerror> (<kernel
 * explanation>)". */

#define CORE_NFT_TABLE "sandboxd"             /* family inet */
#define CORE_NFT_SESSIONS_MAP "sessions"      /* forward: ifname : verdict */
#define CORE_NFT_SESSIONS_INPUT_MAP "sessions_input" /* input: ifname : jump only */
#define CORE_NFT_DENY_CHAIN "deny"            /* limited nflog, then tcp reset, else icmpx admin-prohibited */
#define CORE_NFT_PROXIED_SET "proxied"        /* ifname: TCP 80/443 redirected to the egress proxy */
#define CORE_NFT_LOGRATE_SET "lograte"        /* ifname meter: one NFLOG rate bucket per input interface */
/* prerouting (nat): ifname : jump only; an allow-all session's DNS to its
 * gateway is forwarded (DNAT) to the host's resolver (policy/nftgen.h). */
#define CORE_NFT_SESSIONS_NAT_MAP "sessions_nat"
/* forward: oifname : verdict, for packets of the reply direction of a flow
 * that does not pass its session's generation check (policy/nftgen.h): a
 * custom session's `goto reply`, allow-all's `accept`; no element drops. */
#define CORE_NFT_SESSIONS_REPLY_MAP "sessions_reply"
/* Shared by every custom session, keyed by its interface (policy/nftgen.h),
 * so that a policy update is an element-only batch into sets made here,
 * once, before any session's (a set is found by name with a walk of the
 * table's list of sets, oldest first):
 * - pins4 / pins6: `type ifname . ipv4_addr` / `ifname . ipv6_addr`, flags
 *   timeout: the DNS pins (one garbage collector for all sessions);
 * - gens: `type ifname . mark`: the session's current flow generation;
 * - genmark, genmark_b: `type ifname : mark`: the generation a flow gets
 *   when the session's chain of slot a (of slot b) accepts it (`ct mark
 *   set iifname map @genmark`);
 * - slot_b: `type ifname`: sessions whose packets the shared chains
 *   judge by the "_b" slot of the keyed address-range sets (allow4_b, ...).
 * The rest of what sessions share (the keyed range sets, gw4/gw6, dnsfwd
 * and the chains custom, reply, gateway, dns_forward) is policy/nftgen.c's,
 * added to the table's batch through core_net_host_extend(). */
#define CORE_NFT_PINS4_SET "pins4"
#define CORE_NFT_PINS6_SET "pins6"
#define CORE_NFT_GENS_SET "gens"
#define CORE_NFT_GENMARK_MAP "genmark"
#define CORE_NFT_GENMARK_B_MAP "genmark_b"
#define CORE_NFT_SLOT_B_SET "slot_b"
/* nftables' datatype numbers (src/datatype.h) and the width of one field
 * of a concatenation's type (TYPE_BITS): key types `nft list` prints. */
#define CORE_NFT_TYPE_IPADDR 7
#define CORE_NFT_TYPE_IP6ADDR 8
#define CORE_NFT_TYPE_MARK 19
#define CORE_NFT_TYPE_IFNAME 41
#define CORE_NFT_TYPE_BITS 6
/* The egress proxy's port on each gateway (policy/proxy.h POL_PROXY_PORT;
 * libcore cannot include policy/, so nftgen.c checks the two agree). */
#define CORE_NFT_PROXY_PORT 3128
#define CORE_NFT_MSG_MAX 4096                 /* room reserved per message */

typedef struct core_nft_batch core_nft_batch;

/* Starts a batch (writes batch-begin). 0 or -ENOMEM; the caller frees it
 * with core_nft_batch_free(). */
int core_nft_batch_new(core_nft_batch **ret);

/* Frees a batch; accepts NULL. */
void core_nft_batch_free(core_nft_batch *b);
DEFINE_TRIVIAL_CLEANUP_FUNC(core_nft_batch, core_nft_batch_free);

/* Reserves CORE_NFT_MSG_MAX zeroed bytes for the next message and labels it
 * (printf format) for errors. Stores its sequence number in *ret_seq and
 * returns the buffer to build it in (valid until the next reserve), or NULL
 * on ENOMEM. */
void *core_nft_batch_reserve(core_nft_batch *b, uint32_t *ret_seq, const char *fmt, ...) _printf_(3, 4);

/* Appends the message built in the last reserved buffer (its length is read
 * from its nlmsghdr). 0 or -ENOBUFS. */
int core_nft_batch_commit(core_nft_batch *b);

/* A set (or map) of the host table, as NEWSET needs it: `flags`
 * (NFT_SET_INTERVAL, NFT_SET_MAP, NFT_SET_TIMEOUT ...), the key's and
 * (maps) the data's nftables type ids and lengths in bytes, and the byte
 * orders nft reads from the set's user data to print them (nftables'
 * enum byteorder: 1 host endian, 2 big endian; 0: not stored). */
typedef struct core_nft_set_spec {
        const char *name;
        uint32_t flags, key_type, key_len, key_order, data_type, data_len, data_order;
} core_nft_set_spec;

/* Appends a NEWSET of `spec` (borrowed) to the host table (CORE_NFT_TABLE,
 * family inet) in batch b, labelled "set <name>" for errors. 0, -ENOMEM
 * or -ENOBUFS. */
int core_nft_batch_set(core_nft_batch *b, const core_nft_set_spec *spec);

/* Ends the batch, sends it in one sendmsg() and reads every ACK. 0, or the
 * first error with *ret_err naming its message. */
int core_nft_batch_send(core_nft_batch *b, sb_error **ret_err);

struct mnl_socket;
/* A bound NETLINK_NETFILTER socket with extended and capped ACKs, from a
 * process-wide stack of open ones (or new): closing one right after an
 * nftables commit waits for an RCU grace period under the netns's commit
 * mutex (nf_tables' NETLINK_URELEASE handling), so they are reused instead.
 * 0 or a negative errno with *ret_err. Hand it back with
 * core_nft_socket_give(). Thread-safe. */
int core_nft_socket_take(struct mnl_socket **ret, sb_error **ret_err);

/* Gives a socket of core_nft_socket_take() back: kept for reuse when
 * `clean` (every answer to what was sent on it has been read), else
 * closed. Accepts NULL. */
void core_nft_socket_give(struct mnl_socket *nl, bool clean);
