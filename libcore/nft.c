/* The host-wide nftables table `inet sandboxd`: its base chains and the
 * rules every session shares (no access to the host, to other sandboxes, to
 * link-local, in either family; nothing inbound that a sandbox did not begin, from
 * outside or from the host's own processes; masquerade of the pool), built
 * with libnftnl and sent as one atomic netlink batch through libmnl.
 *
 * The rules are a data table (host_rules below). Each message of the batch
 * asks for an ACK and extended ACKs are on, so every error the kernel
 * reports comes back with the sequence number of the message that caused it
 * and is mapped to that rule's label (libnftnl/nftables' mnl_batch_talk
 * habit): "nftables: rule 'forward: ...': Operation not supported".
 *
 * Also owns the batch machinery policy/nftgen.c builds session objects
 * with (core_nft_batch_*), the dispatch maps `sessions`/`sessions_input`,
 * the `proxied` interface set with the prerouting chain that redirects
 * those sessions' HTTP(S) to the egress proxy, the `unrouted` chain that
 * judges what the host cannot route before routing drops it, the shared
 * `deny` chain, and the repair path for a table that
 * disappeared (core_net_host_ensure, core_net_monitor_*). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include "libcore/log.h"
#include "libcore/net.h"
#include "libcore/nflog.h"
#include "libcore/util.h"

#define TABLE_NAME "sandboxd"
#define SBX_PREFIX "sbx" /* nft compares only the bytes before '*' */
/* nft's datatype number for interface names (nftables src/datatype.h,
 * TYPE_IFNAME): lets `nft list` print the maps' keys as names. */
#define NFT_TYPE_IFNAME 41

DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_table, nftnl_table_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_chain, nftnl_chain_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_rule, nftnl_rule_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set, nftnl_set_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_udata_buf, nftnl_udata_buf_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct mnl_socket, mnl_socket_close);

/* ---- the ruleset as data ---- */

enum ifmatch { IF_ANY, IF_SBX, IF_NOT_SBX, IF_LO };
enum addrmatch {
        ADDR_ANY, DADDR_LINKLOCAL, SADDR_POOL, DADDR_POOL,
        /* IPv6 (imply nfproto ipv6): the rule's cidr6; the IPv6 pool; the
         * 6to4 (2002:a.b.c.d::, RFC 3056) and NAT64 (64:ff9b::a.b.c.d, RFC
         * 6052) forms of the IPv4 pool; the host sides of the IPv6 pool
         * (even offsets); source failing the reverse-path check. */
        DADDR6_CIDR, DADDR6_POOL, DADDR6_6TO4_POOL, DADDR6_NAT64_POOL, SADDR6_POOL, SADDR6_POOL_HOST,
        SADDR6_RPF_MISSING, EXTHDR6_ROUTING, SADDR6_LINKLOCAL,
};
/* Whether a rule exists with or without an IPv6 pool (core_net_pool.prefix6). */
enum v6when { V6_ANY, V6_ON, V6_OFF };
enum verdict {
        V_ACCEPT, V_REJECT_TCP, V_REJECT_ICMPX, V_MASQ, V_VMAP, V_GOTO_DENY, V_LOG, V_REDIRECT, V_DROP, V_GOTO
};

typedef struct host_rule {
        const char *chain;
        const char *label; /* names the rule in errors */
        enum ifmatch iif, oif;
        uint8_t nfproto;   /* NFPROTO_IPV4 / NFPROTO_IPV6, 0 = any */
        enum addrmatch addr; /* implies nfproto ipv4 */
        bool tcp;          /* meta l4proto tcp */
        bool ct_est_rel;   /* ct state established,related */
        enum verdict verdict;
        const char *map;   /* V_VMAP: iifname vmap @map */
        const char *iifset; /* iifname @iifset (a set of interface names) */
        uint16_t dport;    /* with tcp: tcp dport N */
        uint16_t to_port;  /* V_REDIRECT: redirect to :to_port */
        bool ct_reply;     /* ct direction reply: the flow's first packet went the other way */
        uint8_t icmp6_lo, icmp6_hi; /* nonzero: meta l4proto ipv6-icmp, icmpv6 type lo-hi */
        enum v6when v6;    /* V6_ON: only with an IPv6 pool; V6_OFF: only without */
        const char *cidr6; /* DADDR6_CIDR */
        bool vmap_oif;     /* V_VMAP: oifname vmap @map instead */
        bool unrouted;     /* add_unrouted(): a unicast destination the host has no route to */
        bool rpf_missing;  /* add_rpf_missing(): a source not routed back through the input interface */
        const char *to_chain; /* V_GOTO: goto to_chain */
} host_rule;

typedef struct host_chain {
        const char *name, *type; /* type NULL: a regular chain, no hook */
        uint32_t hook;
        int32_t prio;
} host_chain;

static const host_chain host_chains[] = {
        { "input", "filter", NF_INET_LOCAL_IN, 0 },
        { "forward", "filter", NF_INET_FORWARD, 0 },
        /* What forward and input take from a session veth: each base chain
         * tests the input interface once and sends a sandbox's packets
         * here, so a packet is judged only by the rules that can match it
         * (see "Per-packet cost" above host_rules). from_sbx6: the IPv6
         * ones, with an IPv6 pool. */
        { "from_sbx", NULL, 0, 0 },
        { "from_sbx6", NULL, 0, 0 },
        { "in_sbx", NULL, 0, 0 },
        /* The host's own packets into a sandbox (host_rules below). */
        { "output", "filter", NF_INET_LOCAL_OUT, 0 },
        { "postrouting", "nat", NF_INET_POST_ROUTING, 100 }, /* srcnat */
        /* dstnat: the egress proxy's interception (host_rules below). */
        { "prerouting", "nat", NF_INET_PRE_ROUTING, -100 },
        /* Priority filter, after dstnat (the proxy's redirect and
         * allow-all's DNS forwarding have rewritten their packets to a
         * local address) and before the routing decision, which every
         * prerouting hook precedes: see "unrouted" in host_rules. */
        { "unrouted", "filter", NF_INET_PRE_ROUTING, 0 },
        /* Its verdicts, for the packets it picks. */
        { "no_route", NULL, 0, 0 },
        /* The one place a denial is logged and turned into a packet back
         * to the sandbox: per-session chains and the host-protection rules
         * below `goto deny`. */
        { CORE_NFT_DENY_CHAIN, NULL, 0, 0 },
};

/* Per-session dispatch (DESIGN §5.2): one hash lookup per packet whatever
 * the number of sessions. `sessions` (forward) maps "sbx<n>" to `accept`
 * (allow-all), `goto custom` (custom, the shared chain of policy/nftgen.h) or `goto deny`; an "sbx*" interface
 * that is not in it (a leftover veth, or every veth right after the table
 * was re-installed and before the daemon re-applied its sessions) meets
 * the catch-all `goto deny` that follows the lookup: fail closed.
 * `sessions_input` is consulted before input's final rejects, for the
 * gateway services (DNS filter, proxy) on the host side of a veth: its
 * elements must be `jump`s to chains that only accept those services, so
 * the rejects still follow for everything else and the host stays
 * unreachable. */
static const char *const host_maps[] = { CORE_NFT_SESSIONS_MAP, CORE_NFT_SESSIONS_INPUT_MAP,
                                         CORE_NFT_SESSIONS_NAT_MAP, CORE_NFT_SESSIONS_REPLY_MAP };

/* Plain sets of interface names (`type ifname`), one hash lookup per
 * packet. `proxied`: the veths of custom-policy sessions, whose TCP to
 * ports 80 and 443 the prerouting chain redirects to the egress proxy on
 * their own gateway (DESIGN §5.2). policy/nftgen.c adds and removes the
 * elements with the session's other objects. */
static const char *const host_sets[] = { CORE_NFT_PROXIED_SET };

/* The sets every custom session's chains share (libcore/net.h, before
 * CORE_NFT_PINS4_SET): keys an interface name and a second field. */
static const struct keyed_set {
        const char *name;
        uint32_t flags, key_type, key_len, data_type, data_len;
} keyed_sets[] = {
        { CORE_NFT_PINS4_SET, NFT_SET_TIMEOUT,
          CORE_NFT_TYPE_IFNAME << CORE_NFT_TYPE_BITS | CORE_NFT_TYPE_IPADDR, IFNAMSIZ + 4, 0, 0 },
        { CORE_NFT_PINS6_SET, NFT_SET_TIMEOUT,
          CORE_NFT_TYPE_IFNAME << CORE_NFT_TYPE_BITS | CORE_NFT_TYPE_IP6ADDR, IFNAMSIZ + 16, 0, 0 },
        { CORE_NFT_GENS_SET, 0, CORE_NFT_TYPE_IFNAME << CORE_NFT_TYPE_BITS | CORE_NFT_TYPE_MARK, IFNAMSIZ + 4, 0, 0 },
        { CORE_NFT_GENMARK_MAP, NFT_SET_MAP, CORE_NFT_TYPE_IFNAME, IFNAMSIZ, CORE_NFT_TYPE_MARK, 4 },
        { CORE_NFT_GENMARK_B_MAP, NFT_SET_MAP, CORE_NFT_TYPE_IFNAME, IFNAMSIZ, CORE_NFT_TYPE_MARK, 4 },
        { CORE_NFT_SLOT_B_SET, 0, CORE_NFT_TYPE_IFNAME, IFNAMSIZ, 0, 0 },
};

/* DESIGN §5.1 rule 5: a sandbox never reaches the host itself, another
 * sandbox or link-local (cloud metadata), in IPv4 or in any IPv6 form;
 * without an IPv6 pool IPv6 is off (V6_OFF rule: the session chains would
 * have nothing to judge it by). Each of those
 * denials goes to the shared `deny` chain, like a session's: it logs the
 * packet to NFLOG (so the denial becomes an event, DESIGN §5.2) and answers
 * TCP with a reset and everything else with ICMP admin-prohibited, so a
 * denied connect fails at once instead of hanging. `goto`, not `jump`: the
 * deny chain always ends in a reject, and nothing after a denial in the
 * calling chain may ever run. The base chains keep policy accept:
 * sessions' own policies decide everything else.
 *
 * Inbound (DESIGN §5: nothing from outside ever starts a connection to a
 * sandbox, under any policy; exposed ports go through sandboxd's relay,
 * which connects from inside the sandbox's network namespace and never
 * crosses these chains). A neighbour that routes the pool via this host
 * reaches the veths and the gateway addresses on them, so:
 * - forward: a packet out of a session veth passes only as part of a flow
 *   whose first packet came from the sandbox (`ct direction reply`, with
 *   `ct state established,related`, so ICMP errors about the sandbox's own
 *   flows pass too); anything else is dropped, silently, as a firewall
 *   treats unsolicited traffic. A dropped first packet leaves no conntrack
 *   entry (entries are confirmed only when a packet leaves the hooks), so
 *   a TCP or UDP flow begun outside never becomes "established". Packets
 *   that arrive on any other interface with a pool source address are
 *   dropped first: a forged sandbox source would otherwise make an outside
 *   flow look like the reply direction of one the sandbox began.
 * - input: the pool's addresses (the gateways where the DNS filter and the
 *   egress proxy answer, DESIGN §5.2) take packets only from session
 *   veths; from elsewhere they are dropped (a session's proxy injects its
 *   policy's credentials, its DNS filter pins addresses for it), as are
 *   pool-sourced packets from elsewhere.
 * - output: the host's own processes cannot open a connection into a
 *   sandbox or to a gateway address either (denied at once, through
 *   `deny`); only replies leave towards a veth (the DNS filter's answers,
 *   the proxy's, rejects and ICMP errors about the sandbox's flows, which
 *   conntrack marks as the reply direction of that flow), and IPv6
 *   neighbour discovery, which a veth carrying IPv6 needs.
 * These rules match interfaces and conntrack, not addresses, so they hold
 * for both families of the inet table; the pool rules exist for each pool
 * (V6_ON rules for the IPv6 one).
 *
 * Per-packet cost: every forwarded packet of every flow, established or
 * not, walks forward until a rule decides it (a flow's later packets too:
 * its generation is checked on each, policy/nftgen.h). A rule that tests
 * `iifname` loads the name (16 bytes) before anything else, so one chain
 * of all the rules cost a sandbox's IPv4 packet 22 rules and 23 name loads
 * before the sessions map, 17 of them IPv6 rules it could never match
 * (docs/POLICY.md, "Per-packet cost"). So forward and input test the input interface once: what comes
 * from a session veth goes to from_sbx (forward) or in_sbx (input), and
 * the IPv6 rules sit behind one `meta nfproto ipv6` in from_sbx6. The
 * order of the rules a packet meets is unchanged, each chain keeps its
 * host_rules order, and nothing from a session veth falls back into the
 * base chain (`goto`, every such chain ends in a verdict): the rules left
 * in the base chains after the dispatch see only packets from elsewhere,
 * and their `!sbx*` tests are implied. */
static const host_rule host_rules[] = {
        /* The host's own traffic to itself: a host process dialling a
         * gateway address was denied in output already, and the reset
         * that answers it comes back over lo to that pool address. */
        { "input", "input: iif lo accept",
          IF_LO, IF_ANY, 0, ADDR_ANY, false, false, V_ACCEPT },
        { .chain = "input", .label = "input: sbx* goto in_sbx",
          .iif = IF_SBX, .verdict = V_GOTO, .to_chain = "in_sbx" },
        /* Not from a session veth from here on (the rule above). */
        { "input", "input: !sbx* -> pool drop",
          IF_ANY, IF_ANY, NFPROTO_IPV4, DADDR_POOL, false, false, V_DROP },
        /* A forged sandbox source from outside would make the host's
         * answer leave through that sandbox's veth as a "reply". */
        { "input", "input: !sbx* pool source drop",
          IF_ANY, IF_ANY, NFPROTO_IPV4, SADDR_POOL, false, false, V_DROP },
        { "input", "input: !sbx* -> pool6 drop",
          IF_ANY, IF_ANY, 0, DADDR6_POOL, false, false, V_DROP, .v6 = V6_ON },
        { "input", "input: !sbx* pool6 source drop",
          IF_ANY, IF_ANY, 0, SADDR6_POOL, false, false, V_DROP, .v6 = V6_ON },
        /* IPv6 has no rp_filter: the reverse-path check is a rule (`fib
         * saddr . iif oif missing drop`, the nftables idiom): a source not
         * routed back through the veth it came from (a forged one) is
         * dropped, and so is a sandbox posing as its own gateway (the host
         * sides are the pool's even addresses). */
        { "in_sbx", "in_sbx: ip6 fib saddr . iif oif missing drop",
          IF_ANY, IF_ANY, 0, SADDR6_RPF_MISSING, false, false, V_DROP, .v6 = V6_ON },
        { "in_sbx", "in_sbx: ip6 saddr host side of pool6 drop",
          IF_ANY, IF_ANY, 0, SADDR6_POOL_HOST, false, false, V_DROP, .v6 = V6_ON },
        /* Neighbour solicitation and advertisement (RFC 4861) to the
         * gateway: the link does not work without them. Router
         * solicitations, MLD reports and the other ICMPv6 control messages
         * a sandbox's stack sends by itself (130-143) are dropped quietly:
         * they are not connection attempts and would flood the denial
         * events. */
        { .chain = "in_sbx", .label = "in_sbx: icmpv6 type 135-136 accept",
          .nfproto = NFPROTO_IPV6, .icmp6_lo = 135, .icmp6_hi = 136, .verdict = V_ACCEPT, .v6 = V6_ON },
        { .chain = "in_sbx", .label = "in_sbx: icmpv6 type 130-143 drop",
          .nfproto = NFPROTO_IPV6, .icmp6_lo = 130, .icmp6_hi = 143, .verdict = V_DROP, .v6 = V6_ON },
        { "in_sbx", "in_sbx: ct state established,related accept",
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, true, V_ACCEPT },
        { "in_sbx", "in_sbx: iifname vmap @" CORE_NFT_SESSIONS_INPUT_MAP,
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_VMAP, CORE_NFT_SESSIONS_INPUT_MAP },
        { "in_sbx", "in_sbx: goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_GOTO_DENY },
        { .chain = "forward", .label = "forward: sbx* goto from_sbx",
          .iif = IF_SBX, .verdict = V_GOTO, .to_chain = "from_sbx" },
        /* Not from a session veth from here on (the rule above). */
        { "forward", "forward: !sbx* pool source drop",
          IF_ANY, IF_ANY, NFPROTO_IPV4, SADDR_POOL, false, false, V_DROP },
        { "forward", "forward: !sbx* pool6 source drop",
          IF_ANY, IF_ANY, 0, SADDR6_POOL, false, false, V_DROP, .v6 = V6_ON },
        /* The reply direction passes by its session's verdict: a custom
         * session's elements send to the shared chain reply, which accepts the flows of its current generation (ct
         * mark) and judges older ones again (policy/nftgen.h); allow-all
         * accepts; no element (deny-all, a veth not applied) falls through
         * to the drop below. */
        { .chain = "forward",
          .label = "forward: -> sbx* ct state established,related ct direction reply oifname vmap @"
                   CORE_NFT_SESSIONS_REPLY_MAP,
          .oif = IF_SBX, .ct_est_rel = true, .ct_reply = true, .verdict = V_VMAP,
          .map = CORE_NFT_SESSIONS_REPLY_MAP, .vmap_oif = true },
        { "forward", "forward: -> sbx* drop",
          IF_ANY, IF_SBX, 0, ADDR_ANY, false, false, V_DROP },
        /* From a session veth (forward's first rule). */
        { "from_sbx", "from_sbx: -> sbx* goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_SBX, 0, ADDR_ANY, false, false, V_GOTO_DENY },
        { .chain = "from_sbx", .label = "from_sbx: ipv6 goto from_sbx6",
          .nfproto = NFPROTO_IPV6, .verdict = V_GOTO, .to_chain = "from_sbx6", .v6 = V6_ON },
        { "from_sbx", "from_sbx: ipv6 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, NFPROTO_IPV6, ADDR_ANY, false, false, V_GOTO_DENY, .v6 = V6_OFF },
        { "from_sbx", "from_sbx: -> 169.254.0.0/16 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, NFPROTO_IPV4, DADDR_LINKLOCAL, false, false, V_GOTO_DENY },
        /* After every absolute rule above: a session's policy can only
         * narrow what they leave. */
        { "from_sbx", "from_sbx: iifname vmap @" CORE_NFT_SESSIONS_MAP,
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_VMAP, CORE_NFT_SESSIONS_MAP },
        /* Right after the lookup: a session veth the daemon has not (or no
         * longer) given a verdict is denied, never forwarded by the chain's
         * policy accept. */
        { "from_sbx", "from_sbx: goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_GOTO_DENY },
        /* A sandbox's IPv6 packet (from_sbx's second rule), with an IPv6
         * pool: the reverse-path check and the gateway's address, as in
         * in_sbx. */
        { "from_sbx6", "from_sbx6: ip6 fib saddr . iif oif missing drop",
          IF_ANY, IF_ANY, 0, SADDR6_RPF_MISSING, false, false, V_DROP, .v6 = V6_ON },
        { "from_sbx6", "from_sbx6: ip6 saddr host side of pool6 drop",
          IF_ANY, IF_ANY, 0, SADDR6_POOL_HOST, false, false, V_DROP, .v6 = V6_ON },
        /* The IPv6 forms of what the IPv4 rules above
         * keep unreachable under every policy (DESIGN §5.1 rule 5; the
         * policy engine's `always` rows, policy/match.c, and the forms of
         * them it unwraps, pol_addr_embedded_v4). Sources: RFC 4291
         * (§2.5.2 unspecified, §2.5.3 loopback, §2.5.5.1 IPv4-compatible,
         * §2.5.5.2 IPv4-mapped, which never appear on the wire, §2.5.6
         * link-local), RFC 6052 (NAT64 64:ff9b::/96) and RFC 8215
         * (local-use NAT64, where the IPv4 address cannot be located), RFC
         * 3056 (6to4 2002::/16) of 0.0.0.0/8, 127.0.0.0/8 and
         * 169.254.0.0/16, and the pools: other sandboxes. Teredo
         * (2001::/32) embeds an obfuscated public address and its server's
         * address, never a local one: left to the policies (it is
         * reserved for custom ones). */
        /* A routing header names further destinations that a router past
         * this host would send the packet on to (segment routing, RFC
         * 8754; type 0 is gone, RFC 5095): the destination judged here
         * would not be the last one. IPv4 source routing is off by the
         * kernel's default (accept_source_route=0); this is its IPv6
         * counterpart, for packets the host forwards. */
        { "from_sbx6", "from_sbx6: exthdr rt exists goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, EXTHDR6_ROUTING, false, false, V_GOTO_DENY, .v6 = V6_ON },
        { "from_sbx6", "from_sbx6: -> ::/96 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "::/96" },
        { "from_sbx6", "from_sbx6: -> ::ffff:0:0/96 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "::ffff:0:0/96" },
        { "from_sbx6", "from_sbx6: -> fe80::/10 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "fe80::/10" },
        { "from_sbx6", "from_sbx6: -> 64:ff9b::/104 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "64:ff9b::/104" },
        { "from_sbx6", "from_sbx6: -> 64:ff9b::7f00:0/104 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "64:ff9b::7f00:0/104" },
        { "from_sbx6", "from_sbx6: -> 64:ff9b::a9fe:0/112 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "64:ff9b::a9fe:0/112" },
        { "from_sbx6", "from_sbx6: -> 64:ff9b:1::/48 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "64:ff9b:1::/48" },
        { "from_sbx6", "from_sbx6: -> 2002::/24 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "2002::/24" },
        { "from_sbx6", "from_sbx6: -> 2002:7f00::/24 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "2002:7f00::/24" },
        { "from_sbx6", "from_sbx6: -> 2002:a9fe::/32 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_CIDR, false, false, V_GOTO_DENY, .v6 = V6_ON, .cidr6 = "2002:a9fe::/32" },
        { "from_sbx6", "from_sbx6: -> pool6 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_POOL, false, false, V_GOTO_DENY, .v6 = V6_ON },
        { "from_sbx6", "from_sbx6: -> 6to4 of pool goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_6TO4_POOL, false, false, V_GOTO_DENY, .v6 = V6_ON },
        { "from_sbx6", "from_sbx6: -> NAT64 of pool goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_NAT64_POOL, false, false, V_GOTO_DENY, .v6 = V6_ON },
        /* After every absolute rule above, as in from_sbx. */
        { "from_sbx6", "from_sbx6: iifname vmap @" CORE_NFT_SESSIONS_MAP,
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_VMAP, CORE_NFT_SESSIONS_MAP, .v6 = V6_ON },
        { "from_sbx6", "from_sbx6: goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_GOTO_DENY, .v6 = V6_ON },
        /* Any output interface: the reset the deny chain sends a host
         * process that dialled a gateway address travels over lo to a pool
         * address, and is the reply direction of that attempt. */
        { .chain = "output", .label = "output: ct state established,related ct direction reply accept",
          .ct_est_rel = true, .ct_reply = true, .verdict = V_ACCEPT },
        /* ICMPv6 133-137: router solicitation and advertisement, neighbour
         * solicitation and advertisement, redirect (RFC 4861): link-local,
         * and conntrack makes no flow of them, so nothing above matches. */
        { .chain = "output", .label = "output: -> sbx* icmpv6 type 133-137 accept",
          .oif = IF_SBX, .nfproto = NFPROTO_IPV6, .icmp6_lo = 133, .icmp6_hi = 137, .verdict = V_ACCEPT },
        /* The host's own MLD (130-132, 143) on a veth carrying IPv6. */
        { .chain = "output", .label = "output: -> sbx* icmpv6 type 130-132 accept",
          .oif = IF_SBX, .nfproto = NFPROTO_IPV6, .icmp6_lo = 130, .icmp6_hi = 132, .verdict = V_ACCEPT,
          .v6 = V6_ON },
        { .chain = "output", .label = "output: -> sbx* icmpv6 type 143 accept",
          .oif = IF_SBX, .nfproto = NFPROTO_IPV6, .icmp6_lo = 143, .icmp6_hi = 143, .verdict = V_ACCEPT,
          .v6 = V6_ON },
        { "output", "output: -> sbx* goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_SBX, 0, ADDR_ANY, false, false, V_GOTO_DENY },
        { "output", "output: -> pool goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, NFPROTO_IPV4, DADDR_POOL, false, false, V_GOTO_DENY },
        { "output", "output: -> pool6 goto " CORE_NFT_DENY_CHAIN,
          IF_ANY, IF_ANY, 0, DADDR6_POOL, false, false, V_GOTO_DENY, .v6 = V6_ON },
        { "postrouting", "postrouting: pool -> !sbx* masquerade",
          IF_ANY, IF_NOT_SBX, NFPROTO_IPV4, SADDR_POOL, false, false, V_MASQ },
        /* NAT66 (masquerade, as for IPv4): the ULA pool never leaves. */
        { "postrouting", "postrouting: pool6 -> !sbx* masquerade",
          IF_ANY, IF_NOT_SBX, 0, SADDR6_POOL, false, false, V_MASQ, .v6 = V6_ON },
        /* A custom policy's HTTP and HTTPS go through the proxy whether or
         * not the client honours HTTP(S)_PROXY. `redirect` rewrites the
         * destination to the primary address of the input interface: the
         * session's own gateway, where the shared chain gateway admits the proxy
         * port and nothing else of the host. Only the first packet of a
         * flow passes a nat chain, so the cost is one set lookup per new
         * connection, whatever the number of sessions. */
        { "prerouting", "prerouting: iifname @" CORE_NFT_PROXIED_SET " tcp dport 80 redirect",
          IF_ANY, IF_ANY, NFPROTO_IPV4, ADDR_ANY, true, false, V_REDIRECT, NULL, CORE_NFT_PROXIED_SET,
          80, CORE_NFT_PROXY_PORT },
        { "prerouting", "prerouting: iifname @" CORE_NFT_PROXIED_SET " tcp dport 443 redirect",
          IF_ANY, IF_ANY, NFPROTO_IPV4, ADDR_ANY, true, false, V_REDIRECT, NULL, CORE_NFT_PROXIED_SET,
          443, CORE_NFT_PROXY_PORT },
        /* An allow-all session's DNS to its own gateway (the resolver its
         * resolv.conf names in every mode) is forwarded to the host's
         * resolver: `sessions_nat` maps its veth to the shared chain dns_forward, which
         * DNATs only <gateway>:53 (policy/nftgen.c). A session without an
         * element is not translated. */
        { "prerouting", "prerouting: iifname vmap @" CORE_NFT_SESSIONS_NAT_MAP,
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_VMAP, CORE_NFT_SESSIONS_NAT_MAP },
        /* IPv6 alike: `redirect` takes the input interface's first
         * non-tentative address, which is the global gateway address
         * (addresses are kept sorted by scope, and the pool's are added
         * without DAD), where the proxy also listens. */
        { "prerouting", "prerouting: iifname @" CORE_NFT_PROXIED_SET " ip6 tcp dport 80 redirect",
          IF_ANY, IF_ANY, NFPROTO_IPV6, ADDR_ANY, true, false, V_REDIRECT, NULL, CORE_NFT_PROXIED_SET,
          80, CORE_NFT_PROXY_PORT, .v6 = V6_ON },
        { "prerouting", "prerouting: iifname @" CORE_NFT_PROXIED_SET " ip6 tcp dport 443 redirect",
          IF_ANY, IF_ANY, NFPROTO_IPV6, ADDR_ANY, true, false, V_REDIRECT, NULL, CORE_NFT_PROXIED_SET,
          443, CORE_NFT_PROXY_PORT, .v6 = V6_ON },
        /* A sandbox's packet to a destination the host has no route to
         * (no default route, an unreachable or blackhole route) never
         * reaches the forward chain: the routing decision after prerouting
         * drops it and answers "network unreachable", so a denied connect
         * would hang through TCP's retries (a soft error) or fail with
         * ENETUNREACH, and no denial event would be reported. Such packets
         * are judged here, before routing, by the same verdicts as in
         * forward: the session's element of `sessions` (the shared chain custom,
         * generated from the one packet decision table), link-local and an
         * interface without an element denied. A denial goes to `deny` (a
         * reset, ICMP admin-prohibited, an event) as in forward; what the
         * policy allows goes on to routing and gets the host's own
         * answer. Only unicast destinations that are not the host's own
         * (add_unrouted): the gateway's services, the proxy's redirect,
         * broadcasts and multicast are not forwarded and stay input's
         * (or nobody's) to judge. Routed packets
         * fail the `oif missing` test and are judged in forward alone. */
        { .chain = "unrouted", .label = "unrouted: sbx* no route goto no_route",
          .iif = IF_SBX, .unrouted = true, .verdict = V_GOTO, .to_chain = "no_route" },
        /* A forged source first. The routing decision this chain runs
         * before is where rp_filter drops a source not routed back through
         * its veth; a reject answered here would otherwise carry the
         * sandbox's bytes (ICMP quotes them) to another sandbox or an
         * outside address of its choosing, from the host's address
         * (SECURITY.md §3.8). Only packets the rule above picked pay the
         * lookup. */
        { .chain = "no_route", .label = "no_route: fib saddr . iif oif missing drop",
          .rpf_missing = true, .verdict = V_DROP },
        /* Whatever it picked, in forward's order (the test is made once
         * per packet, in the rule above). */
        { .chain = "no_route", .label = "no_route: -> 169.254.0.0/16 goto " CORE_NFT_DENY_CHAIN,
          .nfproto = NFPROTO_IPV4, .addr = DADDR_LINKLOCAL, .verdict = V_GOTO_DENY },
        { .chain = "no_route", .label = "no_route: ipv6 goto " CORE_NFT_DENY_CHAIN,
          .nfproto = NFPROTO_IPV6, .verdict = V_GOTO_DENY, .v6 = V6_OFF },
        { .chain = "no_route", .label = "no_route: iifname vmap @" CORE_NFT_SESSIONS_MAP,
          .verdict = V_VMAP, .map = CORE_NFT_SESSIONS_MAP },
        { .chain = "no_route", .label = "no_route: goto " CORE_NFT_DENY_CHAIN, .verdict = V_GOTO_DENY },
        /* Log first, then reject. The limit belongs to the log rule alone:
         * over the rate the rule just does not match and the rejects below
         * still answer every packet, so a flood costs the daemon at most
         * CORE_NFLOG_RATE reports a second per input interface (one token
         * bucket per sandbox, in the `lograte` meter: a flooding sandbox
         * cannot hide another's denials) and never lets a packet through. */
        { CORE_NFT_DENY_CHAIN, "deny: limit log to nflog",
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_LOG },
        /* A TCP reset to a link-local source would be routed without the
         * scope of the interface the packet came in on (nf_reject_ipv6
         * looks the route up by address alone), so it leaves by another
         * link and the sandbox waits out its connect timeout. An ICMPv6
         * error is sent back on the incoming interface (icmp6_send() uses
         * its index for a link-local destination): connect() fails at
         * once (EACCES), as every denial must. */
        { CORE_NFT_DENY_CHAIN, "deny: ip6 saddr fe80::/10 reject with icmpx admin-prohibited",
          IF_ANY, IF_ANY, 0, SADDR6_LINKLOCAL, false, false, V_REJECT_ICMPX },
        { CORE_NFT_DENY_CHAIN, "deny: tcp reject with tcp reset",
          IF_ANY, IF_ANY, 0, ADDR_ANY, true, false, V_REJECT_TCP },
        { CORE_NFT_DENY_CHAIN, "deny: reject with icmpx admin-prohibited",
          IF_ANY, IF_ANY, 0, ADDR_ANY, false, false, V_REJECT_ICMPX },
};

/* ---- expression helpers (each returns 0 or -ENOMEM) ---- */

static int add_expr(struct nftnl_rule *r, struct nftnl_expr *e) {
        if (!e)
                return -ENOMEM;
        nftnl_rule_add_expr(r, e);
        return 0;
}

static int add_meta(struct nftnl_rule *r, uint32_t key) {
        struct nftnl_expr *e = nftnl_expr_alloc("meta");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
        }
        return add_expr(r, e);
}

static int add_cmp(struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len) {
        struct nftnl_expr *e = nftnl_expr_alloc("cmp");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
                nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
        }
        return add_expr(r, e);
}

static int add_payload(struct nftnl_rule *r, uint32_t offset, uint32_t len) {
        struct nftnl_expr *e = nftnl_expr_alloc("payload");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
        }
        return add_expr(r, e);
}

static int add_bitwise(struct nftnl_rule *r, const void *mask, const void *xor, uint32_t len) {
        struct nftnl_expr *e = nftnl_expr_alloc("bitwise");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, xor, len);
        }
        return add_expr(r, e);
}

static int add_ifname(struct nftnl_rule *r, uint32_t key, enum ifmatch m) {
        if (m == IF_ANY)
                return 0;
        if (m == IF_LO) { /* `iif lo`: loopback is ifindex 1 in every network namespace */
                uint32_t lo = 1;
                int ret = add_meta(r, key == NFT_META_IIFNAME ? NFT_META_IIF : NFT_META_OIF);
                return ret < 0 ? ret : add_cmp(r, NFT_CMP_EQ, &lo, sizeof(lo));
        }
        int ret = add_meta(r, key);
        return ret < 0 ? ret
                       : add_cmp(r, m == IF_SBX ? NFT_CMP_EQ : NFT_CMP_NEQ, SBX_PREFIX,
                                 strlen(SBX_PREFIX));
}

/* ip saddr/daddr within net/prefix. A byte-aligned prefix loads only the
 * prefix bytes (the form nft itself emits, so `nft list` shows a CIDR);
 * otherwise the whole address is loaded and masked. */
static int add_ip_prefix(struct nftnl_rule *r, uint32_t offset, struct in_addr net, unsigned prefix) {
        uint32_t mask = prefix ? htonl(~0u << (32 - prefix)) : 0, zero = 0;
        uint32_t val = net.s_addr & mask;
        int ret;
        if (prefix % 8 == 0) {
                if ((ret = add_payload(r, offset, prefix / 8)) < 0)
                        return ret;
                return add_cmp(r, NFT_CMP_EQ, &val, prefix / 8);
        }
        if ((ret = add_payload(r, offset, 4)) < 0 || (ret = add_bitwise(r, &mask, &zero, 4)) < 0)
                return ret;
        return add_cmp(r, NFT_CMP_EQ, &val, 4);
}

/* ip6 saddr/daddr (offset 8 / 24 of the IPv6 header) within net/prefix,
 * as add_ip_prefix does for IPv4; `extra` ORs more bits into the mask (the
 * last bit for SADDR6_POOL_HOST). */
static int add_ip6_prefix(struct nftnl_rule *r, uint32_t offset, const struct in6_addr *net, unsigned prefix,
                          const struct in6_addr *extra) {
        uint8_t mask[16] = {}, val[16], zero[16] = {};
        for (unsigned i = 0; i < 16; i++) {
                unsigned keep = prefix >= 8 * (i + 1) ? 8 : prefix > 8 * i ? prefix - 8 * i : 0;
                mask[i] = (uint8_t) (0xff00u >> keep);
                if (extra)
                        mask[i] |= extra->s6_addr[i];
                val[i] = net->s6_addr[i] & mask[i];
        }
        int ret;
        if (prefix % 8 == 0 && !extra) {
                if ((ret = add_payload(r, offset, prefix / 8)) < 0)
                        return ret;
                return add_cmp(r, NFT_CMP_EQ, val, prefix / 8);
        }
        if ((ret = add_payload(r, offset, 16)) < 0 || (ret = add_bitwise(r, mask, zero, 16)) < 0)
                return ret;
        return add_cmp(r, NFT_CMP_EQ, val, 16);
}

/* `fib saddr . iif oif missing`: no route back to the source through the
 * interface it came in on (the result register is the output ifindex, 0
 * when none). */
static int add_rpf_missing(struct nftnl_rule *r) {
        struct nftnl_expr *e = nftnl_expr_alloc("fib");
        uint32_t none = 0;
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, NFTA_FIB_F_SADDR | NFTA_FIB_F_IIF);
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, NFT_FIB_RESULT_OIF);
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, NFT_REG_1);
        }
        int ret = add_expr(r, e);
        return ret < 0 ? ret : add_cmp(r, NFT_CMP_EQ, &none, sizeof(none));
}

/* `fib daddr oif missing fib daddr type != { local, broadcast, multicast,
 * anycast }`: a destination that is none of the host's own addresses,
 * broadcast or multicast (local delivery or multicast routing decides
 * those, never the forward chain) and that the host's routing has no
 * unicast route to (the oif lookup yields 0 on a failed lookup and on
 * unreachable, blackhole and prohibit routes). The type is not compared
 * with `unicast`: IPv4 looks it up in the local table alone (unicast for
 * any other address), IPv6 in the full routing table (unreachable when
 * there is no route). */
static int add_unrouted(struct nftnl_rule *r) {
        static const uint32_t not_types[] = { RTN_LOCAL, RTN_BROADCAST, RTN_MULTICAST, RTN_ANYCAST };
        uint32_t none = 0;
        int ret;
        /* The route first: a routed packet, the common case, costs one
         * lookup. */
        for (int i = 0; i < 2; i++) {
                struct nftnl_expr *e = nftnl_expr_alloc("fib");
                if (e) {
                        nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, NFTA_FIB_F_DADDR);
                        nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, i == 0 ? NFT_FIB_RESULT_OIF
                                                                            : NFT_FIB_RESULT_ADDRTYPE);
                        nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, NFT_REG_1);
                }
                if ((ret = add_expr(r, e)) < 0)
                        return ret;
                if (i == 0 && (ret = add_cmp(r, NFT_CMP_EQ, &none, sizeof(none))) < 0)
                        return ret;
        }
        for (size_t t = 0; t < ELEMENTSOF(not_types); t++)
                if ((ret = add_cmp(r, NFT_CMP_NEQ, &not_types[t], sizeof(not_types[t]))) < 0)
                        return ret;
        return 0;
}

/* `exthdr rt exists`: the packet carries an IPv6 routing header (RFC 8200
 * §4.4). */
static int add_exthdr_routing(struct nftnl_rule *r) {
        struct nftnl_expr *e = nftnl_expr_alloc("exthdr");
        uint8_t yes = 1;
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_DREG, NFT_REG_1);
                nftnl_expr_set_u8(e, NFTNL_EXPR_EXTHDR_TYPE, IPPROTO_ROUTING);
                nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_OFFSET, 0);
                nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_LEN, 1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_FLAGS, NFT_EXTHDR_F_PRESENT);
                nftnl_expr_set_u32(e, NFTNL_EXPR_EXTHDR_OP, NFT_EXTHDR_OP_IPV6);
        }
        int ret = add_expr(r, e);
        return ret < 0 ? ret : add_cmp(r, NFT_CMP_EQ, &yes, 1);
}

/* The IPv6 address match of a host rule (addr >= DADDR6_CIDR). */
static int add_addr6(struct nftnl_rule *r, const host_rule *hr, const core_net_pool *pool) {
        static const struct in6_addr last_bit = { .s6_addr = { [15] = 1 } };
        struct in6_addr net = {};
        unsigned prefix = 0;
        switch (hr->addr) {
        case DADDR6_CIDR: {
                char buf[INET6_ADDRSTRLEN];
                const char *slash = strchr(hr->cidr6, '/');
                snprintf(buf, sizeof(buf), "%.*s", (int) (slash - hr->cidr6), hr->cidr6);
                if (inet_pton(AF_INET6, buf, &net) != 1)
                        return -EINVAL;
                prefix = (unsigned) atoi(slash + 1);
                return add_ip6_prefix(r, 24, &net, prefix, NULL);
        }
        case DADDR6_POOL:
                return add_ip6_prefix(r, 24, &pool->base6, pool->prefix6, NULL);
        case SADDR6_POOL:
                return add_ip6_prefix(r, 8, &pool->base6, pool->prefix6, NULL);
        case SADDR6_POOL_HOST:
                return add_ip6_prefix(r, 8, &pool->base6, pool->prefix6, &last_bit);
        case DADDR6_6TO4_POOL: /* 2002:AABB:CCDD::/(16 + prefix) */
                net.s6_addr[0] = 0x20, net.s6_addr[1] = 0x02;
                memcpy(net.s6_addr + 2, &pool->base, 4);
                return add_ip6_prefix(r, 24, &net, 16 + pool->prefix, NULL);
        case DADDR6_NAT64_POOL: /* 64:ff9b::AABB:CCDD/(96 + prefix) */
                net.s6_addr[1] = 0x64, net.s6_addr[2] = 0xff, net.s6_addr[3] = 0x9b;
                memcpy(net.s6_addr + 12, &pool->base, 4);
                return add_ip6_prefix(r, 24, &net, 96 + pool->prefix, NULL);
        case SADDR6_RPF_MISSING:
                return add_rpf_missing(r);
        case EXTHDR6_ROUTING:
                return add_exthdr_routing(r);
        case SADDR6_LINKLOCAL: /* fe80::/10 */
                net.s6_addr[0] = 0xfe, net.s6_addr[1] = 0x80;
                return add_ip6_prefix(r, 8, &net, 10, NULL);
        default:
                return -EINVAL;
        }
}

static bool rule_present(const host_rule *hr, const core_net_pool *pool) {
        return hr->v6 == V6_ANY || (hr->v6 == V6_ON) == (pool && pool->prefix6 != 0);
}

static int add_ct_est_rel(struct nftnl_rule *r) {
        uint32_t mask = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED), zero = 0;
        struct nftnl_expr *e = nftnl_expr_alloc("ct");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
        }
        int ret = add_expr(r, e);
        if (ret >= 0)
                ret = add_bitwise(r, &mask, &zero, sizeof(mask));
        return ret < 0 ? ret : add_cmp(r, NFT_CMP_NEQ, &zero, sizeof(zero));
}

/* `ct direction reply`: the packet travels against the direction of its
 * flow's first packet. A packet without a conntrack entry (untracked,
 * invalid) fails the load and so never matches. */
static int add_ct_reply(struct nftnl_rule *r) {
        uint8_t reply = IP_CT_DIR_REPLY;
        struct nftnl_expr *e = nftnl_expr_alloc("ct");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_DIRECTION);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
        }
        int ret = add_expr(r, e);
        return ret < 0 ? ret : add_cmp(r, NFT_CMP_EQ, &reply, sizeof(reply));
}

/* `meta l4proto ipv6-icmp icmpv6 type lo-hi`, as two comparisons of the
 * type byte (the first of the ICMPv6 header). */
static int add_icmp6_types(struct nftnl_rule *r, uint8_t lo, uint8_t hi) {
        uint8_t proto = IPPROTO_ICMPV6;
        struct nftnl_expr *e;
        int ret;
        if ((ret = add_meta(r, NFT_META_L4PROTO)) < 0 || (ret = add_cmp(r, NFT_CMP_EQ, &proto, 1)) < 0)
                return ret;
        if ((e = nftnl_expr_alloc("payload"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, 0);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, 1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
        }
        if ((ret = add_expr(r, e)) < 0 || (ret = add_cmp(r, NFT_CMP_GTE, &lo, 1)) < 0)
                return ret;
        return add_cmp(r, NFT_CMP_LTE, &hi, 1);
}

/* `limit rate CORE_NFLOG_RATE/second burst CORE_NFLOG_BURST packets log
 * prefix CORE_NFLOG_PREFIX group CORE_NFLOG_GROUP snaplen
 * CORE_NFLOG_SNAPLEN`: headers only, enough for the addresses and ports a
 * report carries (libcore/nflog.c), not the payload a sandbox sent. */
static int add_limited_log(struct nftnl_rule *r) {
        struct nftnl_expr *e = nftnl_expr_alloc("limit"), *d;
        int ret;
        if (e) {
                nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_RATE, CORE_NFLOG_RATE);
                nftnl_expr_set_u64(e, NFTNL_EXPR_LIMIT_UNIT, 1); /* seconds */
                nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_BURST, CORE_NFLOG_BURST);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_TYPE, NFT_LIMIT_PKTS);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LIMIT_FLAGS, 0);
        }
        if (!e)
                return -ENOMEM;
        /* `add @lograte { iifname limit ... }`: the limit lives in the
         * meter's element for the packet's input interface (one bucket per
         * sandbox); over the rate it breaks the rule, so the log below is
         * skipped and the rejects that follow still answer. */
        if ((ret = add_meta(r, NFT_META_IIFNAME)) < 0) {
                nftnl_expr_free(e);
                return ret;
        }
        if (!(d = nftnl_expr_alloc("dynset"))) {
                nftnl_expr_free(e);
                return -ENOMEM;
        }
        nftnl_expr_set_u32(d, NFTNL_EXPR_DYNSET_SREG_KEY, NFT_REG_1);
        nftnl_expr_set_u32(d, NFTNL_EXPR_DYNSET_OP, NFT_DYNSET_OP_ADD);
        if (nftnl_expr_set_str(d, NFTNL_EXPR_DYNSET_SET_NAME, CORE_NFT_LOGRATE_SET) < 0) {
                nftnl_expr_free(e);
                nftnl_expr_free(d);
                return -ENOMEM;
        }
        nftnl_expr_set(d, NFTNL_EXPR_DYNSET_EXPR, e, 0); /* d owns e from here */
        if ((ret = add_expr(r, d)) < 0)
                return ret;
        if ((e = nftnl_expr_alloc("log"))) {
                nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, CORE_NFLOG_GROUP);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOG_SNAPLEN, CORE_NFLOG_SNAPLEN);
                if (nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, CORE_NFLOG_PREFIX) < 0) {
                        nftnl_expr_free(e);
                        return -ENOMEM;
                }
        }
        return add_expr(r, e);
}

static int add_goto(struct nftnl_rule *r, const char *chain) {
        struct nftnl_expr *e = nftnl_expr_alloc("immediate");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, NFT_GOTO);
                nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
        }
        return add_expr(r, e);
}

static int add_verdict(struct nftnl_rule *r, enum verdict v) {
        struct nftnl_expr *e;
        switch (v) {
        case V_ACCEPT:
                if ((e = nftnl_expr_alloc("immediate"))) {
                        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
                        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, NF_ACCEPT);
                }
                return add_expr(r, e);
        case V_REJECT_TCP:
        case V_REJECT_ICMPX:
                if ((e = nftnl_expr_alloc("reject"))) {
                        bool tcp = v == V_REJECT_TCP;
                        nftnl_expr_set_u32(e, NFTNL_EXPR_REJECT_TYPE,
                                           tcp ? NFT_REJECT_TCP_RST : NFT_REJECT_ICMPX_UNREACH);
                        nftnl_expr_set_u8(e, NFTNL_EXPR_REJECT_CODE,
                                          tcp ? 0 : NFT_REJECT_ICMPX_ADMIN_PROHIBITED);
                }
                return add_expr(r, e);
        case V_MASQ:
                return add_expr(r, nftnl_expr_alloc("masq"));
        case V_GOTO_DENY:
                return add_goto(r, CORE_NFT_DENY_CHAIN);
        case V_DROP:
                if ((e = nftnl_expr_alloc("immediate"))) {
                        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
                        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, NF_DROP);
                }
                return add_expr(r, e);
        case V_LOG:
                return add_limited_log(r);
        case V_VMAP:
        case V_REDIRECT:
        case V_GOTO:
                break; /* need more than the verdict: add_vmap(), add_redirect(), add_goto() */
        }
        return -EINVAL;
}

static int add_vmap(struct nftnl_rule *r, const char *map, bool oif) {
        int ret = add_meta(r, oif ? NFT_META_OIFNAME : NFT_META_IIFNAME);
        struct nftnl_expr *e;
        if (ret < 0)
                return ret;
        if ((e = nftnl_expr_alloc("lookup"))) {
                nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, map);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG_VERDICT);
        }
        return add_expr(r, e);
}

/* iifname @set: the input interface's name looked up in a named set. */
static int add_iifset(struct nftnl_rule *r, const char *set) {
        int ret = add_meta(r, NFT_META_IIFNAME);
        struct nftnl_expr *e;
        if (ret < 0)
                return ret;
        if ((e = nftnl_expr_alloc("lookup"))) {
                nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
        }
        return add_expr(r, e);
}

/* After `meta l4proto tcp`: the destination port, as nft emits it. */
static int add_dport(struct nftnl_rule *r, uint16_t port) {
        uint16_t be = htons(port);
        struct nftnl_expr *e = nftnl_expr_alloc("payload");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, 2);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, 2);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
        }
        int ret = add_expr(r, e);
        return ret < 0 ? ret : add_cmp(r, NFT_CMP_EQ, &be, sizeof(be));
}

/* `redirect to :port`: the port in a register, then redir with a
 * specified protocol range (NF_NAT_RANGE_PROTO_SPECIFIED), as nft emits
 * it. */
static int add_redirect(struct nftnl_rule *r, uint16_t port) {
        uint16_t be = htons(port);
        struct nftnl_expr *e = nftnl_expr_alloc("immediate");
        int ret;
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
                nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &be, sizeof(be));
        }
        if ((ret = add_expr(r, e)) < 0)
                return ret;
        if ((e = nftnl_expr_alloc("redir"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
        }
        return add_expr(r, e);
}

/* Builds one rule of host_rules into a libnftnl rule object. */
static int build_rule(const host_rule *hr, const core_net_pool *pool, struct nftnl_rule **ret) {
        const struct in_addr linklocal = { .s_addr = htonl(0xa9fe0000) }; /* 169.254.0.0, RFC 3927 */
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = nftnl_rule_alloc();
        uint8_t proto = hr->addr >= DADDR6_CIDR ? NFPROTO_IPV6 : hr->addr != ADDR_ANY ? NFPROTO_IPV4 : hr->nfproto,
                tcp = IPPROTO_TCP;
        int k;
        if (!r)
                return -ENOMEM;
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        if (nftnl_rule_set_str(r, NFTNL_RULE_TABLE, TABLE_NAME) < 0 ||
            nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, hr->chain) < 0)
                return -ENOMEM;
        if ((k = add_ifname(r, NFT_META_IIFNAME, hr->iif)) < 0)
                return k;
        if (hr->iifset && (k = add_iifset(r, hr->iifset)) < 0)
                return k;
        if (proto && ((k = add_meta(r, NFT_META_NFPROTO)) < 0 || (k = add_cmp(r, NFT_CMP_EQ, &proto, 1)) < 0))
                return k;
        if (hr->addr == DADDR_LINKLOCAL && (k = add_ip_prefix(r, 16, linklocal, 16)) < 0)
                return k;
        if (hr->addr == SADDR_POOL && (k = add_ip_prefix(r, 12, pool->base, pool->prefix)) < 0)
                return k;
        if (hr->addr == DADDR_POOL && (k = add_ip_prefix(r, 16, pool->base, pool->prefix)) < 0)
                return k;
        if (hr->addr >= DADDR6_CIDR && (k = add_addr6(r, hr, pool)) < 0)
                return k;
        if (hr->unrouted && (k = add_unrouted(r)) < 0)
                return k;
        if (hr->rpf_missing && (k = add_rpf_missing(r)) < 0)
                return k;
        /* oifname after the address match: the order nft itself uses, so
         * `nft list` prints the rule the way it is written in host_rules. */
        if ((k = add_ifname(r, NFT_META_OIFNAME, hr->oif)) < 0)
                return k;
        if (hr->tcp && ((k = add_meta(r, NFT_META_L4PROTO)) < 0 || (k = add_cmp(r, NFT_CMP_EQ, &tcp, 1)) < 0))
                return k;
        if (hr->dport && (k = add_dport(r, hr->dport)) < 0)
                return k;
        if (hr->icmp6_lo && (k = add_icmp6_types(r, hr->icmp6_lo, hr->icmp6_hi)) < 0)
                return k;
        if (hr->ct_est_rel && (k = add_ct_est_rel(r)) < 0)
                return k;
        if (hr->ct_reply && (k = add_ct_reply(r)) < 0)
                return k;
        if (hr->verdict == V_VMAP)
                k = add_vmap(r, hr->map, hr->vmap_oif);
        else if (hr->verdict == V_REDIRECT)
                k = add_redirect(r, hr->to_port);
        else if (hr->verdict == V_GOTO)
                k = add_goto(r, hr->to_chain);
        else
                k = add_verdict(r, hr->verdict);
        if (k < 0)
                return k;
        *ret = TAKE_PTR(r);
        return 0;
}

/* ---- one batch, its ACKs and their mapping back to messages ----
 *
 * A growable buffer of netlink messages between a batch-begin and a
 * batch-end, each with a label that names it in errors. Sequence numbers
 * are seq0 + index, so an ACK maps back to its label by subtraction. */

struct core_nft_batch {
        char *buf;
        size_t len, cap, reserved; /* reserved: offset of the message being built */
        uint32_t seq0, seq;        /* first and next sequence number */
        char **labels;             /* per seq - seq0; NULL for begin/end */
        size_t n_labels, cap_labels;
        unsigned acks;             /* messages that asked for an ACK */
        bool ended;
};

static uint32_t next_seq_base(uint32_t span) {
        /* Distinct per batch so a late ACK of an earlier batch cannot be
         * taken for one of ours. */
        static uint32_t counter;
        if (!counter)
                counter = (uint32_t) time(NULL) << 8;
        uint32_t r = counter;
        counter += span;
        return r;
}

void core_nft_batch_free(core_nft_batch *b) {
        if (!b)
                return;
        for (size_t i = 0; i < b->n_labels; i++)
                free(b->labels[i]);
        free(b->labels);
        free(b->buf);
        free(b);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
        if (need <= *cap)
                return 0;
        size_t n = *cap ? *cap : 16;
        while (n < need)
                n *= 2;
        void *q = reallocarray(*p, n, elem);
        if (!q)
                return -ENOMEM;
        *p = q;
        *cap = n;
        return 0;
}

/* Records the label of the next sequence number. */
static int push_label(core_nft_batch *b, char *label) {
        void *l = b->labels;
        if (grow(&l, &b->cap_labels, b->n_labels + 1, sizeof(char *)) < 0) {
                free(label);
                return -ENOMEM;
        }
        b->labels = l;
        b->labels[b->n_labels++] = label;
        return 0;
}

static void *reserve(core_nft_batch *b, uint32_t *ret_seq) {
        void *p = b->buf;
        if (grow(&p, &b->cap, b->len + CORE_NFT_MSG_MAX, 1) < 0)
                return NULL;
        b->buf = p;
        b->reserved = b->len;
        memset(b->buf + b->len, 0, CORE_NFT_MSG_MAX);
        *ret_seq = b->seq++;
        return b->buf + b->len;
}

int core_nft_batch_new(core_nft_batch **ret) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *b = calloc(1, sizeof(*b));
        uint32_t seq;
        if (!b)
                return -ENOMEM;
        /* A window of 2^20 sequence numbers per batch: far more messages
         * than any batch holds (POL_MAX_CIDRS ranges per set). */
        b->seq0 = b->seq = next_seq_base(1u << 20);
        void *buf = reserve(b, &seq);
        if (!buf || push_label(b, NULL) < 0)
                return -ENOMEM;
        nftnl_batch_begin(buf, seq);
        b->len += ((struct nlmsghdr *) buf)->nlmsg_len;
        *ret = TAKE_PTR(b);
        return 0;
}

void *core_nft_batch_reserve(core_nft_batch *b, uint32_t *ret_seq, const char *fmt, ...) {
        char *label = NULL;
        va_list ap;
        va_start(ap, fmt);
        int k = vasprintf(&label, fmt, ap);
        va_end(ap);
        if (k < 0)
                return NULL;
        void *buf = reserve(b, ret_seq);
        if (!buf || push_label(b, label) < 0) {
                if (!buf)
                        free(label);
                return NULL;
        }
        return buf;
}

int core_nft_batch_commit(core_nft_batch *b) {
        const struct nlmsghdr *nlh = (const struct nlmsghdr *) (b->buf + b->reserved);
        if (nlh->nlmsg_len > CORE_NFT_MSG_MAX)
                return -ENOBUFS; /* already overran: a builder bug, never sent */
        if (nlh->nlmsg_flags & NLM_F_ACK)
                b->acks++;
        b->len += MNL_ALIGN(nlh->nlmsg_len);
        return 0;
}

static int ext_ack_attr_cb(const struct nlattr *a, void *data) {
        if (mnl_attr_get_type(a) == NLMSGERR_ATTR_MSG && mnl_attr_validate(a, MNL_TYPE_NUL_STRING) == 0)
                *(const char **) data = mnl_attr_get_str(a);
        return MNL_CB_OK;
}

/* Records the first error of the batch with the message it belongs to. */
static void note_error(const core_nft_batch *b, const struct nlmsghdr *nlh, sb_error **err, int *first) {
        const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
        const char *ext = NULL;
        if (e->error == 0 || *first)
                return;
        if (nlh->nlmsg_flags & NLM_F_ACK_TLVS) {
                size_t off = sizeof(*e);
                if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
                        off += e->msg.nlmsg_len - sizeof(struct nlmsghdr);
                (void) mnl_attr_parse(nlh, MNL_ALIGN(off), ext_ack_attr_cb, &ext);
        }
        uint32_t i = e->msg.nlmsg_seq - b->seq0;
        const char *label = i < b->n_labels && b->labels[i] ? b->labels[i] : "batch";
        *first = e->error;
        sb_error_set(err, e->error, NULL, NULL, "nftables: %s: %s%s%s%s", label, strerror(-e->error),
                     ext ? " (" : "", ext ? ext : "", ext ? ")" : "");
}

/* Reads every ACK the batch asked for. The kernel handles the whole batch
 * inside sendmsg() and queues all its ACKs before returning, even after an
 * error (it reports every failing message, then aborts the transaction), so
 * the wait below only guards against a kernel that never answers. */
/* mnl_socket_recvfrom() with MSG_DONTWAIT: one datagram of the netlink
 * socket `fd` into `buf`, or -1 with errno (EAGAIN: none queued; ENOSPC:
 * truncated; EINVAL: not from a netlink address), as libmnl checks it. */
static ssize_t recv_nowait(int fd, void *buf, size_t size) {
        struct sockaddr_nl addr;
        struct iovec iov = { .iov_base = buf, .iov_len = size };
        struct msghdr msg = { .msg_name = &addr, .msg_namelen = sizeof(addr), .msg_iov = &iov, .msg_iovlen = 1 };
        ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT);
        if (n < 0)
                return n;
        if (msg.msg_flags & MSG_TRUNC) {
                errno = ENOSPC;
                return -1;
        }
        if (msg.msg_namelen != sizeof(struct sockaddr_nl)) {
                errno = EINVAL;
                return -1;
        }
        return n;
}

static int drain_acks(struct mnl_socket *nl, const core_nft_batch *b, sb_error **err) {
        _cleanup_free_ char *buf = malloc(MNL_SOCKET_BUFFER_SIZE);
        unsigned seen = 0;
        int first = 0;
        struct pollfd pfd = { .fd = mnl_socket_get_fd(nl), .events = POLLIN };
        if (!buf)
                return -ENOMEM;
        while (seen < b->acks) {
                /* The kernel processes a batch within the sendmsg() that
                 * carried it, so its ACKs are usually queued already: read
                 * without waiting, and poll (bounded) only when none is. */
                ssize_t n = recv_nowait(pfd.fd, buf, MNL_SOCKET_BUFFER_SIZE);
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        int p = poll(&pfd, 1, 5000);
                        if (p <= 0)
                                return first ? first : sb_error_set(err, p == 0 ? -ETIMEDOUT : negative_errno(),
                                                                    NULL, NULL, "nftables: no ACK from the kernel");
                        n = mnl_socket_recvfrom(nl, buf, MNL_SOCKET_BUFFER_SIZE);
                }
                if (n < 0)
                        return first ? first : sb_error_set(err, negative_errno(), NULL, NULL,
                                                            "nftables: receive ACK: %m");
                const struct nlmsghdr *nlh = (const struct nlmsghdr *) buf;
                for (int len = (int) n; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
                        if (nlh->nlmsg_type != NLMSG_ERROR)
                                continue;
                        const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
                        if (e->msg.nlmsg_seq - b->seq0 >= b->seq - b->seq0)
                                continue; /* not of this batch */
                        seen++;
                        note_error(b, nlh, err, &first);
                        /* An error on the batch header (ENOMEM, EPERM)
                         * replaces all ACKs. */
                        if (e->error && e->msg.nlmsg_seq == b->seq0)
                                return first;
                }
        }
        return first;
}

/* ---- netfilter sockets, kept open ----
 *
 * Closing a netfilter netlink socket is slow right after any nftables
 * commit: the release notifier of nf_tables (nft_rcv_nl_event, for
 * NETLINK_URELEASE) takes the netns's commit mutex and flushes the work
 * that frees the last commits' objects, which waits for an RCU grace period
 * (4 to 30 ms on a 2-core machine with HZ=250), and every other commit of
 * the host waits behind that mutex. A create or delete opened and closed
 * five of them. So the sockets are kept: taken from a small stack, given
 * back after a clean exchange, closed only when their state is unknown (an
 * error, a timeout) or the stack is full. Each request carries its own
 * sequence numbers (next_seq_base), and a socket goes back only after its
 * last answer was read, so no answer reaches the next user. */
#define NL_CACHE_MAX 32
/* A socket speaks to the nftables of the network namespace it was made in,
 * so each is kept with that namespace's identity and handed only to a
 * thread in the same one (tests and helpers switch a thread's namespace).
 * Only sockets of the process's own namespace (/proc/self/ns/net, the
 * main thread's) are kept: a kept socket holds its namespace alive, and
 * one of a sandbox's would outlive the sandbox. */
typedef struct nl_cached {
        struct mnl_socket *nl;
        dev_t dev;
        ino_t ino;
} nl_cached;
static pthread_mutex_t nl_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static nl_cached nl_cache[NL_CACHE_MAX];
static size_t nl_cache_n;

/* Reads and drops whatever is queued on a socket (nothing, after a clean
 * exchange; this guards the next user against a stray answer). */
static void nl_discard_queued(struct mnl_socket *nl) {
        char buf[512];
        while (recv(mnl_socket_get_fd(nl), buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
}

int core_nft_socket_take(struct mnl_socket **ret, sb_error **ret_err) {
        struct mnl_socket *nl = NULL;
        struct stat ns;
        if (stat("/proc/thread-self/ns/net", &ns) == 0) {
                pthread_mutex_lock(&nl_cache_lock);
                for (size_t i = nl_cache_n; i-- > 0;)
                        if (nl_cache[i].dev == ns.st_dev && nl_cache[i].ino == ns.st_ino) {
                                nl = nl_cache[i].nl;
                                nl_cache[i] = nl_cache[--nl_cache_n];
                                break;
                        }
                pthread_mutex_unlock(&nl_cache_lock);
        }
        if (nl) {
                nl_discard_queued(nl);
                *ret = nl;
                return 0;
        }
        if (!(nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC)))
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "nftables: open netlink socket: %m");
        /* Extended ACKs carry the kernel's own explanation; capped ACKs keep
         * the reply small (no echo of each request). */
        int one = 1;
        (void) mnl_socket_setsockopt(nl, NETLINK_EXT_ACK, &one, sizeof(one));
        (void) mnl_socket_setsockopt(nl, NETLINK_CAP_ACK, &one, sizeof(one));
        if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
                int r = negative_errno();
                mnl_socket_close(nl);
                return sb_error_set(ret_err, r, NULL, NULL, "nftables: bind netlink socket: %s", strerror(-r));
        }
        *ret = nl;
        return 0;
}

void core_nft_socket_give(struct mnl_socket *nl, bool clean) {
        if (!nl)
                return;
        /* The namespace of the socket itself (SIOCGSKNS, Linux 4.9), not
         * the thread's: the two may differ if the thread moved meanwhile. */
        struct stat ns;
        int nsfd = clean ? ioctl(mnl_socket_get_fd(nl), SIOCGSKNS) : -1;
        if (nsfd >= 0) {
                struct stat home;
                bool known = fstat(nsfd, &ns) == 0 && stat("/proc/self/ns/net", &home) == 0 &&
                             ns.st_dev == home.st_dev && ns.st_ino == home.st_ino;
                close(nsfd);
                pthread_mutex_lock(&nl_cache_lock);
                if (known && nl_cache_n < NL_CACHE_MAX) {
                        nl_cache[nl_cache_n++] = (nl_cached){ .nl = nl, .dev = ns.st_dev, .ino = ns.st_ino };
                        nl = NULL;
                }
                pthread_mutex_unlock(&nl_cache_lock);
        }
        if (nl)
                mnl_socket_close(nl);
}

/* A socket for a batch of `bytes` of requests and `acks` ACKs: its
 * buffers are forced large enough, since a batch is sent in one sendmsg()
 * and answered before it returns. */
static int open_nl(size_t bytes, unsigned acks, struct mnl_socket **ret, sb_error **err) {
        int r = core_nft_socket_take(ret, err);
        if (r < 0)
                return r;
        int snd = (int) bytes + 65536, rcv = (int) acks * 128 + 65536;
        (void) setsockopt(mnl_socket_get_fd(*ret), SOL_SOCKET, SO_SNDBUFFORCE, &snd, sizeof(snd));
        (void) setsockopt(mnl_socket_get_fd(*ret), SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv));
        return 0;
}

int core_nft_batch_send(core_nft_batch *b, sb_error **ret_err) {
        struct mnl_socket *nl = NULL;
        uint32_t seq;
        int r;
        if (!b->ended) {
                void *buf = reserve(b, &seq);
                if (!buf || push_label(b, NULL) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "nftables: build batch: %s",
                                            strerror(ENOMEM));
                nftnl_batch_end(buf, seq);
                b->len += ((struct nlmsghdr *) buf)->nlmsg_len;
                b->ended = true;
        }
        if ((r = open_nl(b->len, b->acks, &nl, ret_err)) < 0)
                return r;
        if (mnl_socket_sendto(nl, b->buf, b->len) < 0) {
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "nftables: send batch: %m");
                core_nft_socket_give(nl, false);
                return r;
        }
        r = drain_acks(nl, b, ret_err);
        /* After an error, ACKs of the batch may still be queued. */
        core_nft_socket_give(nl, r == 0);
        return r;
}

/* ---- the host table as messages ---- */

static int batch_table(core_nft_batch *bt, uint16_t type, uint16_t flags) {
        _cleanup_(nftnl_table_freep) struct nftnl_table *t = nftnl_table_alloc();
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "table 'inet " TABLE_NAME "'");
        if (!t || !buf)
                return -ENOMEM;
        nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
        if (nftnl_table_set_str(t, NFTNL_TABLE_NAME, TABLE_NAME) < 0)
                return -ENOMEM;
        struct nlmsghdr *nlh = nftnl_table_nlmsg_build_hdr(buf, type, NFPROTO_INET, flags | NLM_F_ACK, seq);
        nftnl_table_nlmsg_build_payload(nlh, t);
        return core_nft_batch_commit(bt);
}

static int batch_chain(core_nft_batch *bt, const host_chain *hc) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = nftnl_chain_alloc();
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "chain '%s'", hc->name);
        if (!c || !buf)
                return -ENOMEM;
        nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
        if (nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, TABLE_NAME) < 0 ||
            nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, hc->name) < 0)
                return -ENOMEM;
        if (hc->type) { /* a base chain; the others are only jumped to */
                if (nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, hc->type) < 0)
                        return -ENOMEM;
                nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, hc->hook);
                nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, hc->prio);
                nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
        }
        struct nlmsghdr *nlh = nftnl_chain_nlmsg_build_hdr(buf, NFT_MSG_NEWCHAIN, NFPROTO_INET,
                                                           NLM_F_CREATE | NLM_F_ACK, seq);
        nftnl_chain_nlmsg_build_payload(nlh, c);
        return core_nft_batch_commit(bt);
}

/* The meter behind the deny chain's log rule (add_limited_log): `set
 * lograte { type ifname; flags dynamic; size 65536; }`, an element per input
 * interface, each holding its own limit. Bounded: interface names in this
 * namespace are far fewer. */
static int batch_meter(core_nft_batch *bt) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nftnl_set_alloc();
        _cleanup_(nftnl_udata_buf_freep) struct nftnl_udata_buf *ud = nftnl_udata_buf_alloc(64);
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "set '%s'", CORE_NFT_LOGRATE_SET);
        if (!s || !ud || !buf)
                return -ENOMEM;
        if (!nftnl_udata_put_u32(ud, NFTNL_UDATA_SET_KEYBYTEORDER, 1) ||
            nftnl_set_set_data(s, NFTNL_SET_USERDATA, nftnl_udata_buf_data(ud), nftnl_udata_buf_len(ud)) < 0)
                return -ENOMEM;
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        if (nftnl_set_set_str(s, NFTNL_SET_TABLE, TABLE_NAME) < 0 ||
            nftnl_set_set_str(s, NFTNL_SET_NAME, CORE_NFT_LOGRATE_SET) < 0)
                return -ENOMEM;
        nftnl_set_set_u32(s, NFTNL_SET_ID, seq);
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_EVAL);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, NFT_TYPE_IFNAME);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, IFNAMSIZ);
        nftnl_set_set_u32(s, NFTNL_SET_DESC_SIZE, 65536);
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWSET, NFPROTO_INET,
                                                     NLM_F_CREATE | NLM_F_ACK, seq);
        nftnl_set_nlmsg_build_payload(nlh, s);
        return core_nft_batch_commit(bt);
}

/* A map from interface name to verdict (`type ifname : verdict`), or with
 * is_map false a plain set of interface names (`type ifname`). */
static int batch_map(core_nft_batch *bt, const char *name, bool is_map) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nftnl_set_alloc();
        _cleanup_(nftnl_udata_buf_freep) struct nftnl_udata_buf *ud = nftnl_udata_buf_alloc(64);
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "%s '%s'", is_map ? "map" : "set", name);
        if (!s || !ud || !buf)
                return -ENOMEM;
        /* Only for `nft list`: names are host-order strings (nft's
         * BYTEORDER_HOST_ENDIAN); without it nft prints the keys as "". */
        if (!nftnl_udata_put_u32(ud, NFTNL_UDATA_SET_KEYBYTEORDER, 1) ||
            nftnl_set_set_data(s, NFTNL_SET_USERDATA, nftnl_udata_buf_data(ud), nftnl_udata_buf_len(ud)) < 0)
                return -ENOMEM;
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        if (nftnl_set_set_str(s, NFTNL_SET_TABLE, TABLE_NAME) < 0 || nftnl_set_set_str(s, NFTNL_SET_NAME, name) < 0)
                return -ENOMEM;
        nftnl_set_set_u32(s, NFTNL_SET_ID, seq);
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, is_map ? NFT_SET_MAP : 0);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, NFT_TYPE_IFNAME);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, IFNAMSIZ);
        if (is_map) {
                nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, NFT_DATA_VERDICT);
                nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, 0);
        }
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWSET, NFPROTO_INET,
                                                     NLM_F_CREATE | NLM_F_ACK, seq);
        nftnl_set_nlmsg_build_payload(nlh, s);
        return core_nft_batch_commit(bt);
}

int core_nft_batch_set(core_nft_batch *bt, const core_nft_set_spec *ss) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nftnl_set_alloc();
        _cleanup_(nftnl_udata_buf_freep) struct nftnl_udata_buf *ud = nftnl_udata_buf_alloc(64);
        uint32_t seq;
        void *buf = core_nft_batch_reserve(bt, &seq, "set '%s'", ss->name);
        if (!s || !ud || !buf)
                return -ENOMEM;
        if ((ss->key_order && !nftnl_udata_put_u32(ud, NFTNL_UDATA_SET_KEYBYTEORDER, ss->key_order)) ||
            (ss->data_order && !nftnl_udata_put_u32(ud, NFTNL_UDATA_SET_DATABYTEORDER, ss->data_order)))
                return -ENOMEM;
        if (nftnl_udata_buf_len(ud) &&
            nftnl_set_set_data(s, NFTNL_SET_USERDATA, nftnl_udata_buf_data(ud), nftnl_udata_buf_len(ud)) < 0)
                return -ENOMEM;
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        if (nftnl_set_set_str(s, NFTNL_SET_TABLE, TABLE_NAME) < 0 || nftnl_set_set_str(s, NFTNL_SET_NAME, ss->name) < 0)
                return -ENOMEM;
        nftnl_set_set_u32(s, NFTNL_SET_ID, seq);
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, ss->flags);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, ss->key_type);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, ss->key_len);
        if (ss->flags & NFT_SET_MAP) {
                nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, ss->data_type);
                nftnl_set_set_u32(s, NFTNL_SET_DATA_LEN, ss->data_len);
        }
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_NEWSET, NFPROTO_INET, NLM_F_CREATE | NLM_F_ACK, seq);
        nftnl_set_nlmsg_build_payload(nlh, s);
        return core_nft_batch_commit(bt);
}

/* One of keyed_sets. The interface name is a host-order string (nft's
 * BYTEORDER_HOST_ENDIAN, the user data `nft list` reads) only where it is
 * the whole key; a concatenation's fields nft prints by their types. A
 * mark is a host-order number to nft too. */
static int batch_keyed_set(core_nft_batch *bt, const struct keyed_set *ks) {
        core_nft_set_spec ss = {
                .name = ks->name, .flags = ks->flags, .key_type = ks->key_type, .key_len = ks->key_len,
                .key_order = ks->key_type == CORE_NFT_TYPE_IFNAME ? 1 : 0, .data_type = ks->data_type,
                .data_len = ks->data_len, .data_order = ks->data_type == CORE_NFT_TYPE_MARK ? 1 : 0,
        };
        return core_nft_batch_set(bt, &ss);
}

static int batch_rule(core_nft_batch *bt, const host_rule *hr, const core_net_pool *pool) {
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = NULL;
        uint32_t seq;
        int ret = build_rule(hr, pool, &r);
        if (ret < 0)
                return ret;
        void *buf = core_nft_batch_reserve(bt, &seq, "rule '%s'", hr->label);
        if (!buf)
                return -ENOMEM;
        struct nlmsghdr *nlh = nftnl_rule_nlmsg_build_hdr(buf, NFT_MSG_NEWRULE, NFPROTO_INET,
                                                          NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK, seq);
        nftnl_rule_nlmsg_build_payload(nlh, r);
        return core_nft_batch_commit(bt);
}

/* Sandbox traffic is routed, not bridged: without forwarding in the
 * namespace sandboxd runs in, nothing from a veth leaves the host side.
 * The setting is per network namespace, like the table. */
static int write_ip_forward(const core_net_pool *pool, sb_error **ret_err) {
        int r = core_write_string("/proc/sys/net/ipv4/ip_forward", "1");
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "enable IPv4 forwarding: %s", strerror(-r));
        /* IPv6 forwarding is net.ipv6.conf.all.forwarding. It makes
         * interfaces with accept_ra=1 stop taking router advertisements
         * (an uplink configured by SLAAC needs accept_ra=2; see
         * sandboxd(8)). */
        if (pool->prefix6 && (r = core_write_string("/proc/sys/net/ipv6/conf/all/forwarding", "1")) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "enable IPv6 forwarding: %s%s", strerror(-r),
                                    r == -ENOENT ? " (this host has no IPv6: set \"ipv6Pool\": \"off\" in daemon.json)"
                                                 : "");
        return 0;
}

static const core_nft_extension *extension; /* core_net_host_extend() */

void core_net_host_extend(const core_nft_extension *ext) {
        extension = ext;
}

/* The whole table in one batch. add (no EXCL) + delete + add: in one
 * transaction this replaces whatever an earlier run (or a half-deleted
 * table) left, without a window where the host has no rules and without
 * failing when there was nothing. Session chains go with the old table. */
static int build_host_batch(const core_net_pool *pool, core_nft_batch **ret) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        int r;
        if ((r = core_nft_batch_new(&bt)) < 0 || (r = batch_table(bt, NFT_MSG_NEWTABLE, NLM_F_CREATE)) < 0 ||
            (r = batch_table(bt, NFT_MSG_DELTABLE, 0)) < 0 || (r = batch_table(bt, NFT_MSG_NEWTABLE, NLM_F_CREATE)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(host_chains); i++)
                if ((r = batch_chain(bt, &host_chains[i])) < 0)
                        return r;
        /* Maps and sets before the rules that look them up. */
        for (size_t i = 0; i < ELEMENTSOF(host_maps); i++)
                if ((r = batch_map(bt, host_maps[i], true)) < 0)
                        return r;
        for (size_t i = 0; i < ELEMENTSOF(host_sets); i++)
                if ((r = batch_map(bt, host_sets[i], false)) < 0)
                        return r;
        for (size_t i = 0; i < ELEMENTSOF(keyed_sets); i++)
                if ((r = batch_keyed_set(bt, &keyed_sets[i])) < 0)
                        return r;
        if ((r = batch_meter(bt)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(host_rules); i++)
                if (rule_present(&host_rules[i], pool) && (r = batch_rule(bt, &host_rules[i], pool)) < 0)
                        return r;
        if (extension && (r = extension->build(bt)) < 0)
                return r;
        *ret = TAKE_PTR(bt);
        return 0;
}

int core_net_host_setup(const core_net_pool *pool, sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        int r;
        if (!pool || pool->prefix > 30 || pool->prefix < 8)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "nftables: invalid address pool prefix");
        if (pool->prefix6 && (pool->prefix6 < 8 || pool->prefix6 > 120))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "nftables: invalid IPv6 pool prefix");
        if ((r = write_ip_forward(pool, ret_err)) < 0)
                return r;
        if ((r = build_host_batch(pool, &bt)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "nftables: build batch: %s", strerror(-r));
        return core_nft_batch_send(bt, ret_err);
}

int core_net_host_teardown(sb_error **ret_err) {
        _cleanup_(core_nft_batch_freep) core_nft_batch *bt = NULL;
        _cleanup_error_ sb_error *err = NULL;
        int r;
        if ((r = core_nft_batch_new(&bt)) < 0 || (r = batch_table(bt, NFT_MSG_DELTABLE, 0)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "nftables: build batch: %s", strerror(-r));
        r = core_nft_batch_send(bt, &err);
        if (r == -ENOENT)
                return 0;
        if (r < 0 && ret_err && !*ret_err)
                *ret_err = TAKE_PTR(err);
        return r;
}

/* ---- fail closed when the table goes away ---- */

static int count_cb(const struct nlmsghdr *nlh, void *data) {
        (*(unsigned *) data)++;
        return MNL_CB_OK;
}

/* Sends one GET request (built by the caller into buf) and counts the
 * objects in the answer. A missing object is -ENOENT. */
static int nl_get_count(struct mnl_socket *nl, struct nlmsghdr *nlh, unsigned *ret_n) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        uint32_t seq = nlh->nlmsg_seq, portid = mnl_socket_get_portid(nl);
        unsigned n = 0;
        int r;
        if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
                return negative_errno();
        do {
                ssize_t len = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                if (len < 0)
                        return negative_errno();
                r = mnl_cb_run(buf, (size_t) len, seq, portid, count_cb, &n);
        } while (r > MNL_CB_STOP);
        if (r < 0)
                return negative_errno();
        *ret_n = n;
        return 0;
}

/* 0 when the table, every host chain, map and set exist and each chain holds
 * exactly its rules from host_rules; -ENOENT (or -ESTALE for a rule count
 * that differs, e.g. after `nft flush chain`) otherwise. */
static int host_table_intact(struct mnl_socket *nl, const core_net_pool *pool) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        uint32_t seq = next_seq_base(64);
        unsigned n;
        int r;
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETTABLE, NFPROTO_INET, NLM_F_ACK, seq++);
        mnl_attr_put_strz(nlh, NFTA_TABLE_NAME, TABLE_NAME);
        if ((r = nl_get_count(nl, nlh, &n)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(host_maps) + ELEMENTSOF(host_sets) + ELEMENTSOF(keyed_sets) + 1; i++) {
                size_t ks = i - ELEMENTSOF(host_maps) - ELEMENTSOF(host_sets);
                const char *name = i < ELEMENTSOF(host_maps)                         ? host_maps[i]
                                   : i < ELEMENTSOF(host_maps) + ELEMENTSOF(host_sets) ? host_sets[i - ELEMENTSOF(host_maps)]
                                   : ks < ELEMENTSOF(keyed_sets)                       ? keyed_sets[ks].name
                                                                                      : CORE_NFT_LOGRATE_SET;
                nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSET, NFPROTO_INET, NLM_F_ACK, seq++);
                mnl_attr_put_strz(nlh, NFTA_SET_TABLE, TABLE_NAME);
                mnl_attr_put_strz(nlh, NFTA_SET_NAME, name);
                if ((r = nl_get_count(nl, nlh, &n)) < 0)
                        return r;
        }
        for (size_t i = 0; extension && i < extension->n_sets; i++) {
                nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSET, NFPROTO_INET, NLM_F_ACK, seq++);
                mnl_attr_put_strz(nlh, NFTA_SET_TABLE, TABLE_NAME);
                mnl_attr_put_strz(nlh, NFTA_SET_NAME, extension->sets[i]);
                if ((r = nl_get_count(nl, nlh, &n)) < 0)
                        return r;
        }
        for (size_t i = 0; extension && i < extension->n_chains; i++) {
                nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETCHAIN, NFPROTO_INET, NLM_F_ACK, seq++);
                mnl_attr_put_strz(nlh, NFTA_CHAIN_TABLE, TABLE_NAME);
                mnl_attr_put_strz(nlh, NFTA_CHAIN_NAME, extension->chains[i]);
                if ((r = nl_get_count(nl, nlh, &n)) < 0)
                        return r;
                nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETRULE, NFPROTO_INET, NLM_F_DUMP, seq++);
                mnl_attr_put_strz(nlh, NFTA_RULE_TABLE, TABLE_NAME);
                mnl_attr_put_strz(nlh, NFTA_RULE_CHAIN, extension->chains[i]);
                if ((r = nl_get_count(nl, nlh, &n)) < 0)
                        return r;
                if (n != extension->rules[i])
                        return -ESTALE;
        }
        for (size_t i = 0; i < ELEMENTSOF(host_chains); i++) {
                unsigned want = 0;
                nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETCHAIN, NFPROTO_INET, NLM_F_ACK, seq++);
                mnl_attr_put_strz(nlh, NFTA_CHAIN_TABLE, TABLE_NAME);
                mnl_attr_put_strz(nlh, NFTA_CHAIN_NAME, host_chains[i].name);
                if ((r = nl_get_count(nl, nlh, &n)) < 0)
                        return r;
                /* A dump filtered by table and chain: the rules of one chain. */
                nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETRULE, NFPROTO_INET, NLM_F_DUMP, seq++);
                mnl_attr_put_strz(nlh, NFTA_RULE_TABLE, TABLE_NAME);
                mnl_attr_put_strz(nlh, NFTA_RULE_CHAIN, host_chains[i].name);
                if ((r = nl_get_count(nl, nlh, &n)) < 0)
                        return r;
                for (size_t k = 0; k < ELEMENTSOF(host_rules); k++)
                        want += streq(host_rules[k].chain, host_chains[i].name) && rule_present(&host_rules[k], pool);
                if (n != want)
                        return -ESTALE;
        }
        return 0;
}

/* Why repair from userspace rather than a kernel default the table opens:
 * - net.ipv4.conf.sbx<n>.forwarding=0 does stop forwarding of what arrives
 *   on the veth (ip_route_input checks the input device), but nothing in
 *   nftables can turn it back on per packet, so sandboxes would never reach
 *   anything; and it does not cover local delivery to the host's addresses.
 * - Policy routing (`ip rule iif sbx<n> fwmark 0/M prohibit`, the table
 *   setting mark M in prerouting) fails closed for forwarding, but the
 *   `local` rule at preference 0 is consulted first, so the host stays
 *   reachable unless that rule is moved, which rewrites the host's routing
 *   policy for everything else on it.
 * - An owned table (NFT_TABLE_F_OWNER) survives `nft flush ruleset` but dies
 *   with the daemon's socket, turning a daemon crash into fail-open.
 * So the table is re-installed within one notification round trip instead;
 * the window is the time between the flush and core_net_monitor_read(). */
int core_net_host_ensure(const core_net_pool *pool, sb_error **ret_err) {
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
        int r;
        if ((r = open_nl(0, 0, &nl, ret_err)) < 0)
                return r;
        r = host_table_intact(nl, pool);
        if (r == 0)
                return 0;
        if (r != -ENOENT && r != -ESTALE)
                return sb_error_set(ret_err, r, NULL, NULL, "nftables: check table inet " TABLE_NAME ": %s",
                                    strerror(-r));
        if ((r = core_net_host_setup(pool, ret_err)) < 0)
                return r;
        return 1;
}

int core_net_monitor_open(sb_error **ret_err) {
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER,
                                                                              SOCK_CLOEXEC | SOCK_NONBLOCK);
        int group = NFNLGRP_NFTABLES, size = 1 << 20;
        if (!nl)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "nftables monitor: open socket: %m");
        if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
            mnl_socket_setsockopt(nl, NETLINK_ADD_MEMBERSHIP, &group, sizeof(group)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "nftables monitor: subscribe: %m");
        /* A large buffer so a big ruleset change does not overflow it; an
         * overflow is reported as a deletion anyway (core_net_monitor_read). */
        (void) setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size));
        /* The socket outlives the libmnl handle: a duplicate keeps it
         * (memberships belong to the socket, not the descriptor). */
        int fd = fcntl(mnl_socket_get_fd(nl), F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "nftables monitor: dup: %m");
        return fd;
}

typedef struct del_attrs {
        uint16_t name_attr; /* which attribute names the object */
        const char *table, *name;
} del_attrs;

/* NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE and NFTA_SET_TABLE are
 * all attribute 1, so one callback serves every message type; the object's
 * name is NFTA_CHAIN_NAME, NFTA_RULE_CHAIN (a rule is judged by its chain)
 * or NFTA_SET_NAME. */
static int del_attr_cb(const struct nlattr *a, void *data) {
        del_attrs *d = data;
        if (mnl_attr_validate(a, MNL_TYPE_NUL_STRING) < 0)
                return MNL_CB_OK;
        if (mnl_attr_get_type(a) == 1)
                d->table = mnl_attr_get_str(a);
        else if (mnl_attr_get_type(a) == d->name_attr)
                d->name = mnl_attr_get_str(a);
        return MNL_CB_OK;
}

/* True for a deletion that weakens the host table: the table itself, or
 * any chain, rule or set of it. Sessions own no chain, rule or set (only
 * elements of the shared sets and maps, which come and go with pins and
 * sessions, and do not count: a missing element means deny), so no
 * deletion of the daemon's own does either. */
static bool weakens_table(const struct nlmsghdr *nlh) {
        uint16_t type = nlh->nlmsg_type;
        const struct nfgenmsg *g = mnl_nlmsg_get_payload(nlh);
        del_attrs d = {};
        if (NFNL_SUBSYS_ID(type) != NFNL_SUBSYS_NFTABLES || g->nfgen_family != NFPROTO_INET)
                return false;
        switch (NFNL_MSG_TYPE(type)) {
        case NFT_MSG_DELTABLE: d.name_attr = NFTA_TABLE_NAME; break;
        case NFT_MSG_DELCHAIN: d.name_attr = NFTA_CHAIN_NAME; break;
        case NFT_MSG_DELRULE: d.name_attr = NFTA_RULE_CHAIN; break;
        case NFT_MSG_DELSET: d.name_attr = NFTA_SET_NAME; break;
        default: return false;
        }
        (void) mnl_attr_parse(nlh, sizeof(struct nfgenmsg), del_attr_cb, &d);
        if (NFNL_MSG_TYPE(type) == NFT_MSG_DELTABLE)
                return d.table && streq(d.table, TABLE_NAME);
        return d.table && streq(d.table, TABLE_NAME);
}

int core_net_monitor_read(int fd) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        int seen = 0;
        for (;;) {
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n < 0 && errno == EAGAIN)
                        return seen;
                /* Lost notifications may have been deletions: fail closed. */
                if (n < 0 && errno == ENOBUFS) {
                        seen = 1;
                        continue;
                }
                if (n < 0)
                        return errno == EINTR ? seen : negative_errno();
                const struct nlmsghdr *nlh = (const struct nlmsghdr *) buf;
                for (int len = (int) n; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len))
                        if (weakens_table(nlh))
                                seen = 1;
        }
}
