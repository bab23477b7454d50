/* The one matcher every enforcement layer uses (DNS filter, proxy, nftables
 * generator): domain patterns, normalisation of hosts that arrive from the
 * sandbox, IP literal canonicalisation (inet_aton rules, IPv4 embedded in
 * IPv6), CIDRs, the forbidden address ranges, and the verdict functions that
 * apply the precedence of DESIGN §5.1 rules 3-5.
 *
 * Nothing here allocates on the check path and nothing logs: a verdict is a
 * pure function of the policy, the host or address, and the caller's list of
 * addresses that are never reachable (the host itself, other sandboxes). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "libcore/error.h"

typedef struct pol_policy pol_policy;
typedef struct pol_domain pol_domain;

/* Longest normalised name (RFC 1035 §2.3.4: 255 octets on the wire, i.e. 253
 * characters of text without the trailing dot). */
#define POL_NAME_MAX 253

/* An IP address. Family is AF_INET or AF_INET6; an IPv4 address sits in
 * bytes[0..3] in network order, the rest zero. */
typedef struct pol_addr {
        int family;
        uint8_t bytes[16];
} pol_addr;

/* A canonical CIDR: no host bits set below `prefix`. */
typedef struct pol_cidr {
        pol_addr addr;
        unsigned prefix;
} pol_cidr;

/* A validated domain pattern (DESIGN §5.1 rule 3). `text` is the normalised
 * pattern without the port ("*.example.com", "api.example.com", "*");
 * `port` is 0 when every port is allowed. */
typedef struct pol_pattern {
        char text[POL_NAME_MAX + 1];
        uint16_t port;
        bool any;          /* the lone "*" */
        bool leading_wild; /* "*.rest": any depth >= 1 */
} pol_pattern;

/* A host as it arrived (DNS question, SNI, Host header, CONNECT target),
 * after normalisation: either an IP address (judged as an address, never as
 * a name) or a lowercase name without the trailing dot. port is 0 when the
 * input carried none. */
typedef struct pol_host {
        bool is_addr;
        pol_addr addr;                /* as written, when is_addr */
        char name[POL_NAME_MAX + 1]; /* when !is_addr */
        uint16_t port;
} pol_host;

/* Who decided a verdict. */
typedef enum pol_layer {
        POL_LAYER_MODE,         /* "allow-all" or "deny-all" as a whole */
        POL_LAYER_INVALID_HOST, /* the host did not normalise: denied */
        POL_LAYER_NEVER,        /* the caller's never-list (host, sandboxes) */
        POL_LAYER_FORBIDDEN,    /* the built-in forbidden range table */
        POL_LAYER_SUBNET_DENY,  /* subnets.deny[rule] */
        POL_LAYER_SUBNET_ALLOW, /* subnets.allow[rule] */
        POL_LAYER_DOMAIN,       /* allow[rule] matched the name */
        POL_LAYER_DEFAULT,      /* custom policy, nothing allowed it */
        POL_LAYER_PORT,         /* a port step of pol_packet_steps() (rule: its index) */
        POL_LAYER_DNS_PIN,      /* a packet to an address the DNS filter pinned */
} pol_layer;

/* A verdict: allow or deny, which layer decided, the index of the rule in
 * that layer's list (-1 when there is none) and a printable description of
 * that rule for events and error pages ("subnets.deny[0] 10.0.0.0/8"). */
typedef struct pol_verdict {
        bool allow;
        pol_layer layer;
        int rule;
        char detail[160];
} pol_verdict;

/* Forbidden range categories (DESIGN §5.1 rule 5). */
typedef enum pol_range_kind {
        POL_RANGE_UNSPECIFIED,
        POL_RANGE_LOOPBACK,
        POL_RANGE_LINK_LOCAL,
        POL_RANGE_PRIVATE,
        POL_RANGE_CGNAT,
        POL_RANGE_DOCUMENTATION,
        POL_RANGE_BENCHMARK,
        POL_RANGE_MULTICAST,
        POL_RANGE_RESERVED,
} pol_range_kind;

/* One row of the forbidden range table. `always` rows are unreachable under
 * allow-all too; the others only under a custom policy. */
typedef struct pol_range {
        const char *cidr;
        pol_range_kind kind;
        bool always;
        const char *source;
} pol_range;

/* ---- names and patterns ------------------------------------------------ */

/* Validates and normalises a domain name (rule 3): ASCII only (IDNs as
 * punycode), lowercased into ret (POL_NAME_MAX + 1 bytes), one trailing dot
 * dropped, labels of 1-63 characters from [a-z0-9-]. A name whose last label
 * is a number (digits, or 0x and hex digits) is not a name: -EINVAL with
 * "is an IP address". On error *ret_why points to a static reason. Returns 0
 * or -EINVAL. */
int pol_name_normalize(const char *in, char *ret, const char **ret_why);

/* Parses a domain pattern, optionally ending in ":port" (1-65535). Errors:
 * -EINVAL with a static reason in *ret_why for partial-label wildcards
 * ("www*.com"), a wildcard over a single label ("*.com"), IP addresses,
 * and everything pol_name_normalize() rejects. */
int pol_pattern_parse(const char *in, pol_pattern *ret, const char **ret_why);

/* True when the normalised name `name` matches pattern `p` on `port`.
 * port 0 means "any port" (a DNS question has none): it matches a pattern
 * that allows at least one port. */
bool pol_pattern_match(const pol_pattern *p, const char *name, uint16_t port);

/* Specificity of a pattern, higher is more specific: an exact name beats a
 * wildcard, a longer suffix beats a shorter one, "*" is lowest, and a
 * pattern with a port beats the same pattern without. Used to pick the rules
 * of the most specific matching pattern. */
unsigned pol_pattern_specificity(const pol_pattern *p);

/* Normalises a host as it arrived: lowercase, one trailing dot dropped,
 * "[v6]" brackets removed, "host:port" split. Any IP literal (inet_aton
 * forms such as 2130706433, 0x7f.1, 0177.0.0.1, 127.1; IPv6 with or without
 * brackets) becomes an address. Zone ids ("fe80::1%eth0") are rejected.
 * Returns 0 or -EINVAL with a static reason in *ret_why. */
int pol_host_parse(const char *in, pol_host *ret, const char **ret_why);

/* ---- addresses and CIDRs ---------------------------------------------- */

/* Parses an address in strict form (dotted quad or RFC 4291 text). 0 or
 * -EINVAL. */
int pol_addr_parse(const char *in, pol_addr *ret);

/* Parses an IPv4 literal with inet_aton(3) rules (1-4 parts, each decimal,
 * 0-octal or 0x-hex). 0 or -EINVAL. */
int pol_addr_parse_inet_aton(const char *in, pol_addr *ret);

/* Formats an address (inet_ntop) into buf of at least 46 bytes; returns buf. */
char *pol_addr_format(const pol_addr *a, char *buf, size_t size);

/* The address packets really reach: the IPv4 address embedded in an
 * IPv4-mapped (::ffff:0:0/96, RFC 4291 §2.5.5.2), IPv4-compatible (::/96,
 * RFC 4291 §2.5.5.1, except :: and ::1), NAT64 well-known prefix
 * (64:ff9b::/96, RFC 6052) or 6to4 (2002::/16, RFC 3056) address; otherwise
 * the address itself. Returns true when an embedded address was found. */
bool pol_addr_embedded_v4(const pol_addr *a, pol_addr *ret);

/* Parses a canonical CIDR "addr/len". Rejects a missing or out-of-range
 * length (/33, /129), leading zeros, and host bits; *ret_why gets a
 * malloc'd message (caller frees) naming the fix, e.g. "10.0.0.5/8 has host
 * bits set; did you mean 10.0.0.0/8?". 0, -EINVAL or -ENOMEM. */
int pol_cidr_parse(const char *in, pol_cidr *ret, char **ret_why);

/* Formats "addr/len" into buf (at least 50 bytes); returns buf. */
char *pol_cidr_format(const pol_cidr *c, char *buf, size_t size);

/* True when c contains a (same family only). */
bool pol_cidr_contains(const pol_cidr *c, const pol_addr *a);

/* True when inner lies wholly inside outer. */
bool pol_cidr_within(const pol_cidr *inner, const pol_cidr *outer);

/* The most specific forbidden-range row that contains a (after unwrapping
 * embedded IPv4), or NULL for a public address. */
const pol_range *pol_addr_classify(const pol_addr *a);

/* The forbidden range table itself (static storage), with its size in
 * *ret_n: for generators that must cover every row (the nftables sets). */
const pol_range *pol_forbidden_ranges(size_t *ret_n);

/* Name of a range kind ("loopback", "link-local", ...). */
const char *pol_range_kind_to_string(pol_range_kind k);

/* Name of a layer ("subnets.deny", "forbidden-range", ...). */
const char *pol_layer_to_string(pol_layer l);

/* ---- the packet decision table (DESIGN §5.1 rules 4-5, §5.2) ------------ */

/* What one step of a custom session's packet decision looks at. */
typedef enum pol_step_kind {
        POL_STEP_ADDRESS_DENY, /* never-list, subnets.deny, forbidden ranges (pol_check_address) */
        POL_STEP_PORT,         /* l4proto and destination port: denied */
        POL_STEP_SUBNET_ALLOW, /* subnets.allow: allowed */
        POL_STEP_DNS_PIN,      /* an address the DNS filter pinned: allowed */
        POL_STEP_DEFAULT,      /* the rest: denied */
} pol_step_kind;

/* One step. `rule` names a port step as events and policy.check print it
 * ("tcp dport 853 (DNS over TLS): ..."); NULL for the other kinds, whose
 * verdict names the subnets entry or the address. */
typedef struct pol_packet_step {
        pol_step_kind kind;
        uint8_t l4proto; /* POL_STEP_PORT: IPPROTO_TCP or IPPROTO_UDP */
        uint16_t port;   /* POL_STEP_PORT */
        const char *rule;
} pol_packet_step;

/* The ordered steps of a custom session's packet decision (static storage,
 * count in *ret_n); the first step that matches decides. The nftables
 * generator (policy/nftgen.c) emits the session chain from this table and
 * pol_check_packet() walks it, so an enforced packet and a dry run
 * (policy.check) always get the same verdict and name the same rule. */
const pol_packet_step *pol_packet_steps(size_t *ret_n);

/* Judges one packet of a session under p, as its nftables chain does:
 * `l4proto` (IPPROTO_TCP, IPPROTO_UDP, or another protocol, which no port
 * step matches), destination address `a` and port (0: none or unknown),
 * `pinned` true when the DNS filter pinned `a` for this session. allow-all
 * and deny-all: pol_check_address(). A custom policy: the steps of
 * pol_packet_steps() in order. Always fills *ret (for a port step:
 * layer POL_LAYER_PORT, rule = its index in the table); returns ret->allow. */
bool pol_check_packet(const pol_policy *p, int l4proto, const pol_addr *a, uint16_t port, bool pinned,
                      const pol_cidr *never, size_t n_never, pol_verdict *ret);

/* The port steps alone, for a destination whose address is not known yet
 * (a name on `port`): true when no port step of a custom policy denies
 * l4proto/port for an address admitted as subnet_allowed says (steps after
 * subnets.allow do not apply to one it admits). Fills *ret only when it
 * denies. */
bool pol_check_port(const pol_policy *p, int l4proto, uint16_t port, bool subnet_allowed, pol_verdict *ret);

/* ---- verdicts (DESIGN §5.1 rules 2-6) ------------------------------------ */

/* Judges a connection to address `a`. `never`/`n_never` are CIDRs that are
 * never reachable whatever the policy says (the host's own addresses, other
 * sandboxes); may be NULL/0. Order: deny-all; the built-in never list of
 * addresses that always mean the local host (0.0.0.0/8, 127.0.0.0/8, ::,
 * ::1; layer "never", whatever the caller passes); never-list; subnets.deny (deny
 * beats every allow); the forbidden table (opened only by a subnets.allow
 * CIDR that lies inside the forbidden range, i.e. names it); subnets.allow;
 * allow-all; otherwise denied (a custom policy denies what it does not
 * allow). An address is judged both as written and as its embedded IPv4
 * address; either one being denied denies. Always fills *ret; returns
 * ret->allow. */
bool pol_check_address(const pol_policy *p, const pol_addr *a, const pol_cidr *never, size_t n_never,
                       pol_verdict *ret);

/* Judges a name (already normalised, see pol_host_parse) on `port` (0: any
 * port, e.g. a DNS question): allow-all allows, deny-all denies, a custom
 * policy allows when an allow pattern matches. Addresses are not looked at;
 * see pol_check_resolved(). Always fills *ret; returns ret->allow. */
bool pol_check_name(const pol_policy *p, const char *name, uint16_t port, pol_verdict *ret);

/* Judges a raw host as it arrived (see pol_host_parse) on `port` (used when
 * the host carries no port; 0: any). An IP literal is judged with
 * pol_check_address(), a name with pol_check_name(). A host that does not
 * normalise is denied (layer POL_LAYER_INVALID_HOST). Returns ret->allow. */
bool pol_check(const pol_policy *p, const char *host, uint16_t port, const pol_cidr *never,
               size_t n_never, pol_verdict *ret);

/* Judges a name that resolved to `addrs` (rule 6: an answer with any
 * forbidden address is refused as a whole). The name must be allowed, and
 * every address must pass pol_check_address(); an address the subnets say
 * nothing about is allowed because the name is. The verdict names the first
 * layer that denied, or the domain rule that allowed. Returns ret->allow. */
bool pol_check_resolved(const pol_policy *p, const char *name, uint16_t port, const pol_addr *addrs,
                        size_t n_addrs, const pol_cidr *never, size_t n_never, pol_verdict *ret);

/* The entry of p->domains whose pattern matches the normalised `name` on
 * `port` most specifically (pol_pattern_specificity; the earlier entry wins
 * a tie), or NULL. The proxy applies its rules (rule 7) on the pattern's
 * own port, or on 80 and 443 for a pattern without one (policy/proxy.c). */
const pol_domain *pol_policy_find_domain(const pol_policy *p, const char *name, uint16_t port);
