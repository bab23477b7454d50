/* The matcher every layer shares (see match.h): name and pattern syntax,
 * host normalisation, IP literal canonicalisation, CIDRs, the forbidden
 * range tables and the verdict precedence of DESIGN §5.1 rules 3-6.
 *
 * Threat: a sandbox controls every host string it sends (DNS question, SNI,
 * Host, CONNECT) and will try spellings that one layer reads as a name and
 * another as an address (0x7f.1, 2130706433, ::ffff:127.0.0.1, trailing
 * dots, upper case). Every layer therefore calls these functions and nothing
 * else, so all layers agree on what a host is. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "policy/match.h"
#include "policy/policy.h"

#define MAX_LABELS 128

typedef struct label {
        const char *s;
        size_t len;
} label;

static bool is_ldh(char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

static char ascii_lower(char c) {
        return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static bool is_hex(char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Splits a normalised name into labels; returns the count or -1 when there
 * are too many. */
static int split_labels(const char *name, label *out) {
        int n = 0;
        const char *s = name;
        for (;;) {
                const char *dot = strchr(s, '.');
                if (n >= MAX_LABELS)
                        return -1;
                out[n].s = s;
                out[n].len = dot ? (size_t)(dot - s) : strlen(s);
                n++;
                if (!dot)
                        return n;
                s = dot + 1;
        }
}

/* WHATWG URL "ends in a number": the last label is all digits, or "0x"
 * followed by hex digits. Such a host is an IPv4 address or invalid; it is
 * never a name (browsers and curl agree). */
static bool ends_in_number(const char *name) {
        const char *last = strrchr(name, '.');
        last = last ? last + 1 : name;
        if (!*last)
                return false;
        if (last[0] == '0' && last[1] == 'x') {
                for (const char *c = last + 2; *c; c++)
                        if (!is_hex(*c))
                                return false;
                return true;
        }
        for (const char *c = last; *c; c++)
                if (*c < '0' || *c > '9')
                        return false;
        return true;
}

/* Lowercases and checks the characters and label lengths of in[0..len),
 * after dropping one trailing dot; '*' is accepted only when allow_star. */
static int normalize(const char *in, size_t len, bool allow_star, char *ret, const char **ret_why) {
        size_t lab = 0;
        if (len > 0 && in[len - 1] == '.')
                len--;
        if (len == 0)
                return *ret_why = "empty name", -EINVAL;
        if (len > POL_NAME_MAX)
                return *ret_why = "name longer than 253 characters", -EINVAL;
        for (size_t i = 0; i < len; i++) {
                char c = ascii_lower(in[i]);
                if ((unsigned char)c >= 0x80)
                        return *ret_why = "non-ASCII character; write internationalised names in punycode (xn--...)",
                               -EINVAL;
                if (c == '.') {
                        if (lab == 0)
                                return *ret_why = "empty label (a leading dot or \"..\")", -EINVAL;
                        lab = 0;
                } else if (is_ldh(c) || (allow_star && c == '*')) {
                        if (++lab > 63)
                                return *ret_why = "label longer than 63 characters", -EINVAL;
                } else
                        return *ret_why = "character outside letters, digits and '-'", -EINVAL;
                ret[i] = c;
        }
        if (lab == 0)
                return *ret_why = "empty label (a leading dot or \"..\")", -EINVAL;
        ret[len] = '\0';
        return 0;
}

int pol_name_normalize(const char *in, char *ret, const char **ret_why) {
        char buf[POL_NAME_MAX + 1];
        const char *why = NULL;
        if (!in)
                return *ret_why = "empty name", -EINVAL;
        int r = normalize(in, strlen(in), false, buf, &why);
        if (r < 0)
                return *ret_why = why, r;
        if (ends_in_number(buf))
                return *ret_why = "is an IP address, not a name", -EINVAL;
        memcpy(ret, buf, strlen(buf) + 1);
        return 0;
}

/* Parses a decimal port 1-65535 without sign or leading zeros. */
static int parse_port(const char *s, size_t len, uint16_t *ret) {
        unsigned v = 0;
        if (len == 0 || len > 5 || s[0] == '0')
                return -EINVAL;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -EINVAL;
                v = v * 10 + (unsigned)(s[i] - '0');
        }
        if (v > 65535)
                return -EINVAL;
        *ret = (uint16_t)v;
        return 0;
}

/* Checks where the wildcards of a normalised pattern sit (rule 3). */
static int check_wildcards(pol_pattern *p, const char **ret_why) {
        label l[MAX_LABELS];
        int n = split_labels(p->text, l), last_wild = -1;
        if (n < 0)
                return *ret_why = "too many labels", -EINVAL;
        for (int i = 0; i < n; i++) {
                if (!memchr(l[i].s, '*', l[i].len))
                        continue;
                if (l[i].len != 1)
                        return *ret_why = "a wildcard must be a whole label (write *.example.com)", -EINVAL;
                last_wild = i;
        }
        /* "*.com" or "api.*.com" would open a whole top-level domain. */
        if (last_wild >= 0 && n - 1 - last_wild < 2)
                return *ret_why = "a wildcard over a single label is not allowed; name at least two labels "
                                  "after it (*.example.com)",
                       -EINVAL;
        p->leading_wild = last_wild >= 0 && l[0].len == 1 && l[0].s[0] == '*';
        return 0;
}

int pol_pattern_parse(const char *in, pol_pattern *ret, const char **ret_why) {
        pol_pattern p = {};
        const char *colon;
        size_t hlen;
        if (!in || !*in)
                return *ret_why = "empty pattern", -EINVAL;
        if (strchr(in, '/'))
                return *ret_why = "a pattern is a domain name, not a URL (write api.example.com)", -EINVAL;
        if (in[0] == '[' || (strchr(in, ':') != strrchr(in, ':')))
                return *ret_why = "is an IP address; list it under subnets.allow as a CIDR", -EINVAL;
        colon = strrchr(in, ':');
        hlen = colon ? (size_t)(colon - in) : strlen(in);
        if (colon && parse_port(colon + 1, strlen(colon + 1), &p.port) < 0)
                return *ret_why = "the port after ':' must be a number from 1 to 65535", -EINVAL;
        if (hlen == 1 && in[0] == '*') {
                p.any = true;
                strcpy(p.text, "*");
                *ret = p;
                return 0;
        }
        int r = normalize(in, hlen, true, p.text, ret_why);
        if (r < 0)
                return r;
        if (ends_in_number(p.text))
                return *ret_why = "is an IP address; list it under subnets.allow as a CIDR", -EINVAL;
        r = check_wildcards(&p, ret_why);
        if (r < 0)
                return r;
        *ret = p;
        return 0;
}

static bool label_eq(const label *pat, const label *host) {
        if (pat->len == 1 && pat->s[0] == '*')
                return true;
        return pat->len == host->len && memcmp(pat->s, host->s, pat->len) == 0;
}

bool pol_pattern_match(const pol_pattern *p, const char *name, uint16_t port) {
        label pl[MAX_LABELS], hl[MAX_LABELS];
        if (p->port && port && p->port != port)
                return false;
        if (p->any)
                return true;
        int np = split_labels(p->text, pl), nh = split_labels(name, hl);
        if (np < 0 || nh < 0)
                return false;
        /* A leading "*" stands for one or more labels; it is never empty,
         * so *.example.com never matches example.com, and the fixed labels
         * are compared whole, so evilexample.com never matches. */
        int fixed = p->leading_wild ? np - 1 : np;
        if (p->leading_wild ? nh < np : nh != np)
                return false;
        for (int i = 0; i < fixed; i++)
                if (!label_eq(&pl[np - 1 - i], &hl[nh - 1 - i]))
                        return false;
        return true;
}

unsigned pol_pattern_specificity(const pol_pattern *p) {
        label l[MAX_LABELS];
        unsigned score = p->port ? 1 : 0;
        if (p->any)
                return score;
        int n = split_labels(p->text, l);
        bool wild = false;
        for (int i = 0; i < n; i++) {
                if (l[i].len == 1 && l[i].s[0] == '*')
                        wild = true;
                else
                        score += 8;
        }
        return score + (wild ? 2 : 4);
}

/* ---- IP literals --------------------------------------------------------- */

/* One inet_aton part: 0x-hex, 0-octal or decimal, at most 0xffffffff. */
static int parse_aton_part(const char *s, size_t len, uint32_t *ret) {
        unsigned base = 10;
        uint64_t v = 0;
        if (len == 0)
                return -EINVAL;
        if (len >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
                base = 16, s += 2, len -= 2;
                if (len == 0)
                        return -EINVAL;
        } else if (len >= 2 && s[0] == '0')
                base = 8, s++, len--;
        for (size_t i = 0; i < len; i++) {
                char c = ascii_lower(s[i]);
                unsigned d = (c >= '0' && c <= '9') ? (unsigned)(c - '0')
                             : (c >= 'a' && c <= 'f') ? (unsigned)(c - 'a' + 10)
                                                      : 99;
                if (d >= base)
                        return -EINVAL;
                v = v * base + d;
                if (v > 0xffffffffu)
                        return -EINVAL;
        }
        *ret = (uint32_t)v;
        return 0;
}

int pol_addr_parse_inet_aton(const char *in, pol_addr *ret) {
        uint32_t part[4], v;
        size_t n = 0;
        const char *s = in;
        for (;;) {
                const char *dot = strchr(s, '.');
                size_t len = dot ? (size_t)(dot - s) : strlen(s);
                if (n == 4 || parse_aton_part(s, len, &part[n]) < 0)
                        return -EINVAL;
                n++;
                if (!dot)
                        break;
                s = dot + 1;
        }
        /* All parts but the last are single bytes; the last fills the rest
         * (inet_aton(3): a, a.b, a.b.c, a.b.c.d). */
        for (size_t i = 0; i + 1 < n; i++)
                if (part[i] > 0xff)
                        return -EINVAL;
        if (n > 1 && part[n - 1] > (0xffffffffu >> (8 * (n - 1))))
                return -EINVAL;
        v = part[n - 1];
        for (size_t i = 0; i + 1 < n; i++)
                v |= part[i] << (24 - 8 * i);
        *ret = (pol_addr){.family = AF_INET};
        v = htonl(v);
        memcpy(ret->bytes, &v, 4);
        return 0;
}

int pol_addr_parse(const char *in, pol_addr *ret) {
        pol_addr a = {};
        if (!in)
                return -EINVAL;
        if (inet_pton(AF_INET, in, a.bytes) == 1)
                a.family = AF_INET;
        else if (inet_pton(AF_INET6, in, a.bytes) == 1)
                a.family = AF_INET6;
        else
                return -EINVAL;
        *ret = a;
        return 0;
}

char *pol_addr_format(const pol_addr *a, char *buf, size_t size) {
        if (!inet_ntop(a->family, a->bytes, buf, (socklen_t)size))
                snprintf(buf, size, "?");
        return buf;
}

bool pol_addr_embedded_v4(const pol_addr *a, pol_addr *ret) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const uint8_t nat64[12] = {0, 0x64, 0xff, 0x9b};
        static const uint8_t zero[12] = {};
        const uint8_t *v4 = NULL;
        if (a->family != AF_INET6)
                return false;
        if (memcmp(a->bytes, mapped, 12) == 0 || memcmp(a->bytes, nat64, 12) == 0)
                v4 = a->bytes + 12;
        else if (a->bytes[0] == 0x20 && a->bytes[1] == 0x02) /* 6to4, RFC 3056 §2 */
                v4 = a->bytes + 2;
        else if (memcmp(a->bytes, zero, 12) == 0 && !(a->bytes[12] == 0 && a->bytes[13] == 0 &&
                                                        a->bytes[14] == 0 && a->bytes[15] <= 1))
                v4 = a->bytes + 12; /* IPv4-compatible, deprecated but still routable via sit */
        if (!v4)
                return false;
        *ret = (pol_addr){.family = AF_INET};
        memcpy(ret->bytes, v4, 4);
        return true;
}

/* ---- hosts ----------------------------------------------------------------- */

static int parse_v6_literal(const char *s, size_t len, pol_addr *ret, const char **ret_why) {
        char buf[INET6_ADDRSTRLEN + 1];
        if (memchr(s, '%', len))
                return *ret_why = "IPv6 zone ids are not allowed", -EINVAL;
        if (len >= sizeof(buf))
                return *ret_why = "invalid IPv6 address", -EINVAL;
        memcpy(buf, s, len);
        buf[len] = '\0';
        *ret = (pol_addr){.family = AF_INET6};
        if (inet_pton(AF_INET6, buf, ret->bytes) != 1)
                return *ret_why = "invalid IPv6 address", -EINVAL;
        return 0;
}

/* Normalises the name-or-IPv4 part of a host. */
static int parse_host_name(const char *s, size_t len, pol_host *h, const char **ret_why) {
        char buf[POL_NAME_MAX + 1];
        int r = normalize(s, len, false, buf, ret_why);
        if (r < 0)
                return r;
        if (!ends_in_number(buf)) {
                memcpy(h->name, buf, strlen(buf) + 1);
                return 0;
        }
        if (pol_addr_parse_inet_aton(buf, &h->addr) < 0)
                return *ret_why = "ends in a number but is not a valid IPv4 address", -EINVAL;
        h->is_addr = true;
        return 0;
}

int pol_host_parse(const char *in, pol_host *ret, const char **ret_why) {
        pol_host h = {};
        const char *port = NULL, *colon;
        int r;
        if (!in || !*in)
                return *ret_why = "empty host", -EINVAL;
        if (in[0] == '[') {
                const char *close = strchr(in, ']');
                if (!close)
                        return *ret_why = "unterminated '['", -EINVAL;
                if (close[1] && close[1] != ':')
                        return *ret_why = "unexpected characters after ']'", -EINVAL;
                port = close[1] ? close + 2 : NULL;
                r = parse_v6_literal(in + 1, (size_t)(close - in - 1), &h.addr, ret_why);
                h.is_addr = true;
        } else if ((colon = strchr(in, ':')) && strchr(colon + 1, ':')) {
                /* Two or more colons and no brackets: a bare IPv6 address,
                 * which cannot carry a port. */
                r = parse_v6_literal(in, strlen(in), &h.addr, ret_why);
                h.is_addr = true;
        } else {
                port = colon ? colon + 1 : NULL;
                r = parse_host_name(in, colon ? (size_t)(colon - in) : strlen(in), &h, ret_why);
        }
        if (r < 0)
                return r;
        if (port && parse_port(port, strlen(port), &h.port) < 0)
                return *ret_why = "the port must be a number from 1 to 65535", -EINVAL;
        *ret = h;
        return 0;
}

/* ---- CIDRs ------------------------------------------------------------------ */

static unsigned addr_bits(int family) {
        return family == AF_INET ? 32 : 128;
}

static void mask_addr(pol_addr *a, unsigned prefix) {
        for (unsigned i = 0; i < addr_bits(a->family) / 8; i++) {
                unsigned keep = prefix >= 8 * (i + 1) ? 8 : prefix > 8 * i ? prefix - 8 * i : 0;
                a->bytes[i] &= (uint8_t)(0xff00u >> keep);
        }
}

/* Stores a malloc'd reason in *ret_why; returns -EINVAL (or -ENOMEM). */
_printf_(2, 3) static int cidr_error(char **ret_why, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(ret_why, fmt, ap);
        va_end(ap);
        if (r < 0)
                return *ret_why = NULL, -ENOMEM;
        return -EINVAL;
}

int pol_cidr_parse(const char *in, pol_cidr *ret, char **ret_why) {
        char addr[INET6_ADDRSTRLEN + 1], fixed[INET6_ADDRSTRLEN + 1];
        const char *slash = in ? strchr(in, '/') : NULL;
        pol_cidr c = {}, m;
        uint16_t len16 = 0;
        pol_addr a;
        *ret_why = NULL;
        if (!slash) {
                if (in && pol_addr_parse(in, &a) == 0)
                        return cidr_error(ret_why, "%s is an address, not a CIDR; did you mean %s/%u?", in, in,
                                          addr_bits(a.family));
                return cidr_error(ret_why, "\"%s\" is not a CIDR (address/prefix-length)", in ? in : "");
        }
        size_t alen = (size_t)(slash - in);
        if (alen >= sizeof(addr))
                return cidr_error(ret_why, "%s: not an IPv4 or IPv6 address", in);
        memcpy(addr, in, alen);
        addr[alen] = '\0';
        if (pol_addr_parse(addr, &c.addr) < 0)
                return cidr_error(ret_why, "%s: not an IPv4 or IPv6 address in canonical form", in);
        if (!streq(slash + 1, "0") &&
            (parse_port(slash + 1, strlen(slash + 1), &len16) < 0 || len16 > addr_bits(c.addr.family)))
                return cidr_error(ret_why, "%s: the prefix length must be a number from 0 to %u", in,
                                  addr_bits(c.addr.family));
        c.prefix = len16;
        m = c;
        mask_addr(&m.addr, m.prefix);
        if (memcmp(m.addr.bytes, c.addr.bytes, sizeof(c.addr.bytes)) != 0)
                return cidr_error(ret_why, "%s has host bits set; did you mean %s/%u?", in,
                                  pol_addr_format(&m.addr, fixed, sizeof(fixed)), c.prefix);
        *ret = c;
        return 0;
}

char *pol_cidr_format(const pol_cidr *c, char *buf, size_t size) {
        char a[INET6_ADDRSTRLEN];
        snprintf(buf, size, "%s/%u", pol_addr_format(&c->addr, a, sizeof(a)), c->prefix);
        return buf;
}

bool pol_cidr_contains(const pol_cidr *c, const pol_addr *a) {
        pol_addr m = *a;
        if (c->addr.family != a->family)
                return false;
        mask_addr(&m, c->prefix);
        return memcmp(m.bytes, c->addr.bytes, sizeof(m.bytes)) == 0;
}

bool pol_cidr_within(const pol_cidr *inner, const pol_cidr *outer) {
        return inner->prefix >= outer->prefix && pol_cidr_contains(outer, &inner->addr);
}

/* ---- forbidden ranges (DESIGN §5.1 rule 5) ---------------------------------
 *
 * Sources: the IANA IPv4 and IPv6 Special-Purpose Address Registries
 * (RFC 6890), RFC 1918 (private), RFC 6598 (CGNAT), RFC 5737 and RFC 3849 /
 * RFC 9637 (documentation), RFC 2544 / RFC 5180 (benchmarking), RFC 3927 and
 * RFC 4291 §2.5.6 / RFC 4862 (link-local, where cloud metadata lives),
 * RFC 4193 (unique local), RFC 5771 and RFC 4291 §2.7 (multicast).
 *
 * `always` rows are unreachable under allow-all too. Unspecified is one of
 * them because on Linux a connect() to 0.0.0.0 or :: reaches the local host.
 *
 * Left out on purpose:
 * - ::ffff:0:0/96, 64:ff9b::/96, 2002::/16 and ::/96 are not rows: the IPv4
 *   address embedded in them is unwrapped and judged instead
 *   (pol_addr_embedded_v4), so ::ffff:169.254.169.254 is link-local.
 * - AS112 (192.31.196.0/24, 192.175.48.0/24) and the globally reachable
 *   pieces inside 2001::/23 (AMT, ORCHIDv2): rare, and treating 2001::/23 as
 *   reserved only denies more.
 * - Teredo (2001::/32) client addresses are obfuscated public addresses; the
 *   block stays reserved under a custom policy. */
static const pol_range ranges[] = {
        {"0.0.0.0/32", POL_RANGE_UNSPECIFIED, true, "RFC 1122 §3.2.1.3"},
        {"0.0.0.0/8", POL_RANGE_RESERVED, false, "RFC 6890 (this network)"},
        {"10.0.0.0/8", POL_RANGE_PRIVATE, false, "RFC 1918"},
        {"100.64.0.0/10", POL_RANGE_CGNAT, false, "RFC 6598"},
        {"127.0.0.0/8", POL_RANGE_LOOPBACK, true, "RFC 1122 §3.2.1.3"},
        {"169.254.0.0/16", POL_RANGE_LINK_LOCAL, true, "RFC 3927"},
        {"172.16.0.0/12", POL_RANGE_PRIVATE, false, "RFC 1918"},
        {"192.0.0.0/24", POL_RANGE_RESERVED, false, "RFC 6890 (IETF protocol assignments)"},
        {"192.0.2.0/24", POL_RANGE_DOCUMENTATION, false, "RFC 5737 (TEST-NET-1)"},
        {"192.88.99.0/24", POL_RANGE_RESERVED, false, "RFC 7526 (deprecated 6to4 relay anycast)"},
        {"192.168.0.0/16", POL_RANGE_PRIVATE, false, "RFC 1918"},
        {"198.18.0.0/15", POL_RANGE_BENCHMARK, false, "RFC 2544"},
        {"198.51.100.0/24", POL_RANGE_DOCUMENTATION, false, "RFC 5737 (TEST-NET-2)"},
        {"203.0.113.0/24", POL_RANGE_DOCUMENTATION, false, "RFC 5737 (TEST-NET-3)"},
        {"224.0.0.0/4", POL_RANGE_MULTICAST, false, "RFC 5771"},
        {"240.0.0.0/4", POL_RANGE_RESERVED, false, "RFC 1112 §4 (future use)"},
        {"255.255.255.255/32", POL_RANGE_RESERVED, false, "RFC 919 (limited broadcast)"},
        {"::/128", POL_RANGE_UNSPECIFIED, true, "RFC 4291 §2.5.2"},
        {"::1/128", POL_RANGE_LOOPBACK, true, "RFC 4291 §2.5.3"},
        /* Local-use NAT64: the operator chooses where the IPv4 address sits,
         * so it cannot be unwrapped and judged; fail closed. */
        {"64:ff9b:1::/48", POL_RANGE_RESERVED, true, "RFC 8215 (local-use NAT64)"},
        {"100::/64", POL_RANGE_RESERVED, false, "RFC 6666 (discard-only)"},
        {"2001::/23", POL_RANGE_RESERVED, false, "RFC 2928 (IETF protocol assignments)"},
        {"2001:2::/48", POL_RANGE_BENCHMARK, false, "RFC 5180"},
        {"2001:db8::/32", POL_RANGE_DOCUMENTATION, false, "RFC 3849"},
        {"3fff::/20", POL_RANGE_DOCUMENTATION, false, "RFC 9637"},
        {"fc00::/7", POL_RANGE_PRIVATE, false, "RFC 4193 (unique local)"},
        {"fe80::/10", POL_RANGE_LINK_LOCAL, true, "RFC 4291 §2.5.6"},
        {"fec0::/10", POL_RANGE_RESERVED, false, "RFC 3879 (deprecated site-local)"},
        {"ff00::/8", POL_RANGE_MULTICAST, false, "RFC 4291 §2.7"},
};

static pol_cidr range_cidrs[ELEMENTSOF(ranges)];
static pthread_once_t ranges_once = PTHREAD_ONCE_INIT;

static void ranges_init(void) {
        for (size_t i = 0; i < ELEMENTSOF(ranges); i++) {
                char *why = NULL;
                /* The table is constant and covered by the unit tests; a row
                 * that fails to parse stays /0 of family 0 and matches
                 * nothing, which the tests catch. */
                (void)pol_cidr_parse(ranges[i].cidr, &range_cidrs[i], &why);
                free(why);
        }
}

/* The longest-prefix row containing a, without unwrapping. */
static const pol_range *classify_raw(const pol_addr *a, const pol_cidr **ret_cidr) {
        const pol_range *best = NULL;
        pthread_once(&ranges_once, ranges_init);
        for (size_t i = 0; i < ELEMENTSOF(ranges); i++)
                if (pol_cidr_contains(&range_cidrs[i], a) && (!best || range_cidrs[i].prefix > (*ret_cidr)->prefix)) {
                        best = &ranges[i];
                        *ret_cidr = &range_cidrs[i];
                }
        return best;
}

const pol_range *pol_addr_classify(const pol_addr *a) {
        const pol_cidr *c = NULL;
        pol_addr v4;
        if (pol_addr_embedded_v4(a, &v4))
                return classify_raw(&v4, &c);
        return classify_raw(a, &c);
}

const pol_range *pol_forbidden_ranges(size_t *ret_n) {
        *ret_n = ELEMENTSOF(ranges);
        return ranges;
}

const char *pol_range_kind_to_string(pol_range_kind k) {
        static const char *const names[] = {
                [POL_RANGE_UNSPECIFIED] = "unspecified",     [POL_RANGE_LOOPBACK] = "loopback",
                [POL_RANGE_LINK_LOCAL] = "link-local",       [POL_RANGE_PRIVATE] = "private",
                [POL_RANGE_CGNAT] = "CGNAT",                 [POL_RANGE_DOCUMENTATION] = "documentation",
                [POL_RANGE_BENCHMARK] = "benchmarking",      [POL_RANGE_MULTICAST] = "multicast",
                [POL_RANGE_RESERVED] = "reserved",
        };
        return (unsigned)k < ELEMENTSOF(names) ? names[k] : "?";
}

const char *pol_layer_to_string(pol_layer l) {
        static const char *const names[] = {
                [POL_LAYER_MODE] = "policy",           [POL_LAYER_INVALID_HOST] = "invalid-host",
                [POL_LAYER_NEVER] = "never",           [POL_LAYER_FORBIDDEN] = "forbidden-range",
                [POL_LAYER_SUBNET_DENY] = "subnets.deny", [POL_LAYER_SUBNET_ALLOW] = "subnets.allow",
                [POL_LAYER_DOMAIN] = "allow",          [POL_LAYER_DEFAULT] = "default-deny",
                [POL_LAYER_PORT] = "port",             [POL_LAYER_DNS_PIN] = "dns-pin",
        };
        return (unsigned)l < ELEMENTSOF(names) ? names[l] : "?";
}

/* ---- verdicts ------------------------------------------------------------- */

_printf_(5, 6) static bool verdict(pol_verdict *v, bool allow, pol_layer layer, int rule, const char *fmt, ...) {
        va_list ap;
        v->allow = allow;
        v->layer = layer;
        v->rule = rule;
        va_start(ap, fmt);
        vsnprintf(v->detail, sizeof(v->detail), fmt, ap);
        va_end(ap);
        return allow;
}

static pol_mode mode_of(const pol_policy *p) {
        return p ? p->mode : POL_MODE_DENY_ALL; /* no policy: fail closed */
}

static int find_cidr(const pol_cidr *list, size_t n, const pol_addr *a) {
        for (size_t i = 0; i < n; i++)
                if (pol_cidr_contains(&list[i], a))
                        return (int)i;
        return -1;
}

/* A forbidden row is opened only by a subnets.allow CIDR that contains the
 * address and lies inside the row: "names them". 0.0.0.0/0 or ::/0 in
 * subnets.allow therefore never opens metadata or loopback. */
static bool range_opened(const pol_policy *p, const pol_cidr *row, const pol_addr *a) {
        if (p->mode != POL_MODE_CUSTOM)
                return false;
        for (size_t i = 0; i < p->n_subnet_allow; i++)
                if (pol_cidr_contains(&p->subnet_allow[i], a) && pol_cidr_within(&p->subnet_allow[i], row))
                        return true;
        return false;
}

typedef enum addr_result { ADDR_DENY, ADDR_ALLOW, ADDR_UNDECIDED } addr_result;

/* Addresses that always mean the local host, whatever host it is (DESIGN
 * §5.1 rule 5, docs/SECURITY.md §3.8): on Linux a connect() to any of them
 * from the host's network namespace, where netd's proxy dials, reaches the
 * host's own listeners. They belong to the never list of every caller, so
 * no subnets.allow entry (which can open a forbidden range it names) opens
 * them: 0.0.0.0/8 ("this host on this network", RFC 1122 §3.2.1.3; Linux
 * treats 0.0.0.0 as the local host), all of 127.0.0.0/8 (RFC 1122
 * §3.2.1.3), :: and ::1 (RFC 4291 §2.5.2, §2.5.3). The IPv4-mapped and
 * -compatible forms are unwrapped by check_addr and meet the IPv4 rows. */
static const char *const host_never_text[] = { "0.0.0.0/8", "127.0.0.0/8", "::/128", "::1/128" };
static pol_cidr host_never[ELEMENTSOF(host_never_text)];
static pthread_once_t host_never_once = PTHREAD_ONCE_INIT;

static void host_never_init(void) {
        for (size_t i = 0; i < ELEMENTSOF(host_never_text); i++) {
                char *why = NULL;
                (void)pol_cidr_parse(host_never_text[i], &host_never[i], &why); /* constant; unit-tested */
                free(why);
        }
}

/* Rules 4-5 for one address, judged as written and as its embedded IPv4
 * address (cand[0], cand[1]): deny-all, never-list, subnets.deny, forbidden
 * ranges, subnets.allow, allow-all. UNDECIDED: a custom policy's subnets say
 * nothing, so only an allowed name can admit the address. */
static addr_result check_addr(const pol_policy *p, const pol_addr *a, const pol_cidr *never, size_t n_never,
                              pol_verdict *v) {
        pol_addr cand[2];
        char s[INET6_ADDRSTRLEN], c[64];
        size_t n = 1;
        int i;
        cand[0] = *a;
        if (pol_addr_embedded_v4(a, &cand[1]))
                n = 2;
        pol_addr_format(a, s, sizeof(s));
        if (mode_of(p) == POL_MODE_DENY_ALL)
                return verdict(v, false, POL_LAYER_MODE, -1, "deny-all"), ADDR_DENY;
        pthread_once(&host_never_once, host_never_init);
        for (size_t k = 0; k < n; k++)
                if ((i = find_cidr(host_never, ELEMENTSOF(host_never), &cand[k])) >= 0)
                        return verdict(v, false, POL_LAYER_NEVER, -1, "%s is the host itself (%s; no policy opens it)", s,
                                       host_never_text[i]),
                               ADDR_DENY;
        for (size_t k = 0; k < n; k++)
                if ((i = find_cidr(never, never ? n_never : 0, &cand[k])) >= 0)
                        return verdict(v, false, POL_LAYER_NEVER, i, "%s is in %s (the host or another sandbox)", s,
                                       pol_cidr_format(&never[i], c, sizeof(c))),
                               ADDR_DENY;
        for (size_t k = 0; k < n && p->mode == POL_MODE_CUSTOM; k++)
                if ((i = find_cidr(p->subnet_deny, p->n_subnet_deny, &cand[k])) >= 0)
                        return verdict(v, false, POL_LAYER_SUBNET_DENY, i, "subnets.deny[%d] %s", i,
                                       pol_cidr_format(&p->subnet_deny[i], c, sizeof(c))),
                               ADDR_DENY;
        for (size_t k = 0; k < n; k++) {
                const pol_cidr *row = NULL;
                const pol_range *r = classify_raw(&cand[k], &row);
                if (r && (r->always || p->mode == POL_MODE_CUSTOM) && !range_opened(p, row, &cand[k]))
                        return verdict(v, false, POL_LAYER_FORBIDDEN, (int)(r - ranges), "%s is %s (%s, %s)", s,
                                       pol_range_kind_to_string(r->kind), r->cidr, r->source),
                               ADDR_DENY;
        }
        for (size_t k = 0; k < n && p->mode == POL_MODE_CUSTOM; k++)
                if ((i = find_cidr(p->subnet_allow, p->n_subnet_allow, &cand[k])) >= 0)
                        return verdict(v, true, POL_LAYER_SUBNET_ALLOW, i, "subnets.allow[%d] %s", i,
                                       pol_cidr_format(&p->subnet_allow[i], c, sizeof(c))),
                               ADDR_ALLOW;
        if (p->mode == POL_MODE_ALLOW_ALL)
                return verdict(v, true, POL_LAYER_MODE, -1, "allow-all"), ADDR_ALLOW;
        verdict(v, false, POL_LAYER_DEFAULT, -1, "no subnets.allow entry contains %s", s);
        return ADDR_UNDECIDED;
}

bool pol_check_address(const pol_policy *p, const pol_addr *a, const pol_cidr *never, size_t n_never,
                       pol_verdict *ret) {
        check_addr(p, a, never, n_never, ret);
        return ret->allow;
}

const pol_domain *pol_policy_find_domain(const pol_policy *p, const char *name, uint16_t port) {
        const pol_domain *best = NULL;
        unsigned best_score = 0;
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->n_domains; i++) {
                const pol_pattern *pat = &p->domains[i].pattern;
                unsigned score = pol_pattern_specificity(pat);
                if (pol_pattern_match(pat, name, port) && (!best || score > best_score)) {
                        best = &p->domains[i];
                        best_score = score;
                }
        }
        return best;
}

static void pattern_text(const pol_pattern *pat, char *buf, size_t size) {
        if (pat->port)
                snprintf(buf, size, "%s:%u", pat->text, pat->port);
        else
                snprintf(buf, size, "%s", pat->text);
}

bool pol_check_name(const pol_policy *p, const char *name, uint16_t port, pol_verdict *ret) {
        char norm[POL_NAME_MAX + 1], pat[POL_NAME_MAX + 8];
        const char *why = NULL;
        if (mode_of(p) == POL_MODE_DENY_ALL)
                return verdict(ret, false, POL_LAYER_MODE, -1, "deny-all");
        /* Callers pass normalised names; re-checking costs little and keeps
         * an unnormalised or numeric name from ever matching as a name. */
        if (pol_name_normalize(name, norm, &why) < 0)
                return verdict(ret, false, POL_LAYER_INVALID_HOST, -1, "%s", why);
        if (p->mode == POL_MODE_ALLOW_ALL)
                return verdict(ret, true, POL_LAYER_MODE, -1, "allow-all");
        const pol_domain *d = pol_policy_find_domain(p, norm, port);
        if (!d) {
                if (port)
                        return verdict(ret, false, POL_LAYER_DEFAULT, -1, "%s:%u is not in allow", norm, port);
                return verdict(ret, false, POL_LAYER_DEFAULT, -1, "%s is not in allow", norm);
        }
        pattern_text(&d->pattern, pat, sizeof(pat));
        return verdict(ret, true, POL_LAYER_DOMAIN, (int)(d - p->domains), "allow[%d] \"%s\"",
                       (int)(d - p->domains), pat);
}

bool pol_check(const pol_policy *p, const char *host, uint16_t port, const pol_cidr *never, size_t n_never,
               pol_verdict *ret) {
        pol_host h;
        const char *why = NULL;
        if (pol_host_parse(host, &h, &why) < 0)
                return verdict(ret, false, POL_LAYER_INVALID_HOST, -1, "%s", why);
        if (h.is_addr)
                return pol_check_address(p, &h.addr, never, n_never, ret);
        return pol_check_name(p, h.name, h.port ? h.port : port, ret);
}

bool pol_check_resolved(const pol_policy *p, const char *name, uint16_t port, const pol_addr *addrs,
                        size_t n_addrs, const pol_cidr *never, size_t n_never, pol_verdict *ret) {
        pol_verdict name_v, addr_v;
        if (!pol_check_name(p, name, port, &name_v)) {
                *ret = name_v;
                return false;
        }
        /* Rule 6: one forbidden address refuses the whole answer, so a
         * rebinding answer cannot smuggle a private address next to a public
         * one. */
        for (size_t i = 0; i < n_addrs; i++)
                if (check_addr(p, &addrs[i], never, n_never, &addr_v) == ADDR_DENY) {
                        *ret = addr_v;
                        return false;
                }
        *ret = name_v;
        return true;
}

/* ---- the packet decision table -------------------------------------------- */

/* DESIGN §5.2: "Direct queries to other resolvers are denied" — even at an
 * address subnets.allow admits, or subnets.allow 0.0.0.0/0 would bypass
 * the filter (53 plain DNS, 853 DNS over TLS / DNS over QUIC, RFC 7858 /
 * RFC 9250). QUIC (UDP 443, RFC 9000) cannot pass the egress proxy, which
 * reads the SNI of a TCP ClientHello, so it is refused at once (clients
 * fall back to TCP 443) — except at an address subnets.allow admits, which
 * needs no name check (rule 4). */
static const pol_packet_step packet_steps[] = {
        { POL_STEP_ADDRESS_DENY, 0, 0, NULL },
        { POL_STEP_PORT, IPPROTO_TCP, 53, "tcp dport 53 (DNS): no resolver but the DNS filter" },
        { POL_STEP_PORT, IPPROTO_UDP, 53, "udp dport 53 (DNS): no resolver but the DNS filter" },
        { POL_STEP_PORT, IPPROTO_TCP, 853, "tcp dport 853 (DNS over TLS): no resolver but the DNS filter" },
        { POL_STEP_PORT, IPPROTO_UDP, 853, "udp dport 853 (DNS over QUIC): no resolver but the DNS filter" },
        { POL_STEP_SUBNET_ALLOW, 0, 0, NULL },
        { POL_STEP_PORT, IPPROTO_UDP, 443,
          "udp dport 443 (QUIC, HTTP/3): cannot pass the egress proxy; use TCP 443" },
        { POL_STEP_DNS_PIN, 0, 0, NULL },
        { POL_STEP_DEFAULT, 0, 0, NULL },
};

const pol_packet_step *pol_packet_steps(size_t *ret_n) {
        *ret_n = ELEMENTSOF(packet_steps);
        return packet_steps;
}

bool pol_check_port(const pol_policy *p, int l4proto, uint16_t port, bool subnet_allowed, pol_verdict *ret) {
        if (mode_of(p) != POL_MODE_CUSTOM || port == 0)
                return true;
        for (size_t i = 0; i < ELEMENTSOF(packet_steps); i++) {
                const pol_packet_step *st = &packet_steps[i];
                if (st->kind == POL_STEP_SUBNET_ALLOW && subnet_allowed)
                        return true;
                if (st->kind == POL_STEP_PORT && st->l4proto == l4proto && st->port == port)
                        return verdict(ret, false, POL_LAYER_PORT, (int)i, "%s", st->rule);
        }
        return true;
}

bool pol_check_packet(const pol_policy *p, int l4proto, const pol_addr *a, uint16_t port, bool pinned,
                      const pol_cidr *never, size_t n_never, pol_verdict *ret) {
        char s[INET6_ADDRSTRLEN];
        addr_result r = check_addr(p, a, never, n_never, ret);
        if (mode_of(p) != POL_MODE_CUSTOM || r == ADDR_DENY)
                return ret->allow;
        pol_addr_format(a, s, sizeof(s));
        for (size_t i = 0; i < ELEMENTSOF(packet_steps); i++) {
                const pol_packet_step *st = &packet_steps[i];
                switch (st->kind) {
                case POL_STEP_ADDRESS_DENY:
                        break; /* r != ADDR_DENY */
                case POL_STEP_PORT:
                        if (port && st->l4proto == l4proto && st->port == port)
                                return verdict(ret, false, POL_LAYER_PORT, (int)i, "%s", st->rule);
                        break;
                case POL_STEP_SUBNET_ALLOW:
                        if (r == ADDR_ALLOW)
                                return true; /* *ret: the subnets.allow entry */
                        break;
                case POL_STEP_DNS_PIN:
                        if (pinned)
                                return verdict(ret, true, POL_LAYER_DNS_PIN, -1,
                                               "%s was pinned by the DNS filter for an allowed name", s);
                        break;
                case POL_STEP_DEFAULT:
                        return verdict(ret, false, POL_LAYER_DEFAULT, -1,
                                       "not resolved through the DNS filter: no allowed name resolved to %s, "
                                       "and no subnets.allow entry contains it", s);
                }
        }
        return verdict(ret, false, POL_LAYER_DEFAULT, -1, "no step decided"); /* unreachable */
}
