/* Unit tests for policy/match.c: domain patterns, host normalisation, IP
 * literal canonicalisation, CIDRs, the forbidden range table and the verdict
 * precedence of DESIGN §5.1 rules 3-6. Table-driven: each row is one case a
 * sandbox could try. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <string.h>
#include "policy/match.h"
#include "policy/policy.h"

/* ---- patterns ---- */

typedef struct match_case {
        const char *pattern;
        const char *host;
        uint16_t port;
        bool match;
} match_case;

static const match_case match_cases[] = {
        {"*.example.com", "evilexample.com", 0, false},
        {"*.example.com", "example.com.evil.net", 0, false},
        {"*.example.com", "xexample.com", 0, false},
        {"*.example.com", "a.example.com", 0, true},
        {"*.example.com", "a.b.example.com", 0, true},
        {"*.example.com", "example.com", 0, false},
        {"*.example.com", "a.example.com.", 0, true},
        {"*.example.com", "A.EXAMPLE.COM", 0, true},
        {"*.EXAMPLE.com.", "x.example.com", 0, true},
        {"api.example.com", "api.example.com", 0, true},
        {"api.example.com", "API.Example.Com.", 0, true},
        {"api.example.com", "a.api.example.com", 0, false},
        {"api.example.com", "example.com", 0, false},
        {"api.example.com", "api.example.co", 0, false},
        {"api.*.example.com", "api.eu.example.com", 0, true},
        {"api.*.example.com", "api.a.b.example.com", 0, false},
        {"api.*.example.com", "api.example.com", 0, false},
        {"*.*.example.com", "a.b.example.com", 0, true},
        {"*.*.example.com", "b.example.com", 0, false},
        {"*", "anything.at.all", 0, true},
        {"*", "localhost", 443, true},
        {"api.example.com:443", "api.example.com", 443, true},
        {"api.example.com:443", "api.example.com", 80, false},
        {"api.example.com:443", "api.example.com", 0, true}, /* DNS question: no port */
        {"api.example.com", "api.example.com", 8443, true},
        {"*.example.com:8443", "a.example.com", 8443, true},
        {"*.example.com:8443", "a.example.com", 443, false},
        {"*:443", "x.org", 443, true},
        {"*:443", "x.org", 80, false},
        {"xn--bcher-kva.example", "XN--BCHER-KVA.example", 0, true},
};

static void test_patterns_match_whole_labels_only(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(match_cases); i++) {
                const match_case *c = &match_cases[i];
                pol_pattern p;
                pol_host h;
                const char *why = NULL;
                assert_int_equal(pol_pattern_parse(c->pattern, &p, &why), 0);
                assert_int_equal(pol_host_parse(c->host, &h, &why), 0);
                assert_false(h.is_addr);
                if (pol_pattern_match(&p, h.name, c->port) != c->match)
                        fail_msg("case %zu: pattern %s host %s port %u: expected %s", i, c->pattern, c->host,
                                 c->port, c->match ? "match" : "no match");
        }
}

typedef struct reject_case {
        const char *pattern;
        const char *why;
} reject_case;

static const reject_case reject_cases[] = {
        {"www*.com", "whole label"},
        {"a*.example.com", "whole label"},
        {"*a.example.com", "whole label"},
        {"**.example.com", "whole label"},
        {"*.com", "single label"},
        {"api.*.com", "single label"},
        {"*.*.com", "single label"},
        {"example..com", "empty label"},
        {".example.com", "empty label"},
        {"example.com..", "empty label"},
        {"", "empty"},
        {".", "empty"},
        {"exa_mple.com", "outside letters"},
        {"exa mple.com", "outside letters"},
        {"bücher.example", "punycode"},
        {"api.example.com:0", "port"},
        {"api.example.com:65536", "port"},
        {"api.example.com:", "port"},
        {"api.example.com:http", "port"},
        {"127.0.0.1", "IP address"},
        {"2130706433", "IP address"},
        {"0x7f.1", "IP address"},
        {"::1", "IP address"},
        {"[::1]:443", "IP address"},
        {"https://api.example.com/", "not a URL"},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", "63"},
};

static void test_invalid_patterns_are_rejected_with_reason(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(reject_cases); i++) {
                pol_pattern p;
                const char *why = NULL;
                if (pol_pattern_parse(reject_cases[i].pattern, &p, &why) != -EINVAL)
                        fail_msg("pattern \"%s\" was accepted", reject_cases[i].pattern);
                if (!strstr(why, reject_cases[i].why))
                        fail_msg("pattern \"%s\": reason \"%s\" lacks \"%s\"", reject_cases[i].pattern, why,
                                 reject_cases[i].why);
        }
}

static void test_more_specific_pattern_wins(void **state) {
        static const char *const order[] = {"*", "*.example.com", "*.api.example.com", "v1.api.example.com",
                                            "v1.api.example.com:443"};
        for (size_t i = 1; i < ELEMENTSOF(order); i++) {
                pol_pattern a, b;
                const char *why;
                assert_int_equal(pol_pattern_parse(order[i - 1], &a, &why), 0);
                assert_int_equal(pol_pattern_parse(order[i], &b, &why), 0);
                assert_true(pol_pattern_specificity(&a) < pol_pattern_specificity(&b));
        }
}

/* ---- hosts and IP literals ---- */

typedef struct host_case {
        const char *host;
        const char *addr;  /* canonical address text, or NULL for a name */
        const char *name;  /* normalised name when not an address */
        uint16_t port;
        int kind;          /* pol_range_kind, or -1 for public / a name */
} host_case;

static const host_case host_cases[] = {
        {"2130706433", "127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"0x7f000001", "127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"0X7F000001", "127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"0x7f.1", "127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"0177.0.0.1", "127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"127.1", "127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"127.0.0.1.", "127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"127.0.0.1:8080", "127.0.0.1", NULL, 8080, POL_RANGE_LOOPBACK},
        {"0", "0.0.0.0", NULL, 0, POL_RANGE_UNSPECIFIED},
        {"0.0.0.0", "0.0.0.0", NULL, 0, POL_RANGE_UNSPECIFIED},
        {"0.0.0.1", "0.0.0.1", NULL, 0, POL_RANGE_RESERVED},
        {"169.254.169.254", "169.254.169.254", NULL, 0, POL_RANGE_LINK_LOCAL},
        {"0xa9fea9fe", "169.254.169.254", NULL, 0, POL_RANGE_LINK_LOCAL},
        {"169.254.43518", "169.254.169.254", NULL, 0, POL_RANGE_LINK_LOCAL},
        {"10.1", "10.0.0.1", NULL, 0, POL_RANGE_PRIVATE},
        {"192.168.1.1", "192.168.1.1", NULL, 0, POL_RANGE_PRIVATE},
        {"172.31.255.255", "172.31.255.255", NULL, 0, POL_RANGE_PRIVATE},
        {"172.32.0.1", "172.32.0.1", NULL, 0, -1},
        {"100.64.0.1", "100.64.0.1", NULL, 0, POL_RANGE_CGNAT},
        {"192.0.2.7", "192.0.2.7", NULL, 0, POL_RANGE_DOCUMENTATION},
        {"198.19.255.1", "198.19.255.1", NULL, 0, POL_RANGE_BENCHMARK},
        {"224.0.0.251", "224.0.0.251", NULL, 0, POL_RANGE_MULTICAST},
        {"255.255.255.255", "255.255.255.255", NULL, 0, POL_RANGE_RESERVED},
        {"240.1.2.3", "240.1.2.3", NULL, 0, POL_RANGE_RESERVED},
        {"8.8.8.8", "8.8.8.8", NULL, 0, -1},
        {"[::]", "::", NULL, 0, POL_RANGE_UNSPECIFIED},
        {"[::1]:443", "::1", NULL, 443, POL_RANGE_LOOPBACK},
        {"::1", "::1", NULL, 0, POL_RANGE_LOOPBACK},
        {"::ffff:127.0.0.1", "::ffff:127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"[::ffff:7f00:1]", "::ffff:127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"::ffff:169.254.169.254", "::ffff:169.254.169.254", NULL, 0, POL_RANGE_LINK_LOCAL},
        {"64:ff9b::a9fe:a9fe", "64:ff9b::a9fe:a9fe", NULL, 0, POL_RANGE_LINK_LOCAL},
        {"64:ff9b::808:808", "64:ff9b::808:808", NULL, 0, -1},
        {"[2002:a9fe:a9fe::1]", "2002:a9fe:a9fe::1", NULL, 0, POL_RANGE_LINK_LOCAL},
        {"[2002:0a00:0001::1]", "2002:a00:1::1", NULL, 0, POL_RANGE_PRIVATE},
        {"::127.0.0.1", "::127.0.0.1", NULL, 0, POL_RANGE_LOOPBACK},
        {"[fe80::1]", "fe80::1", NULL, 0, POL_RANGE_LINK_LOCAL},
        {"[FD00::1]", "fd00::1", NULL, 0, POL_RANGE_PRIVATE},
        {"[2001:db8::1]:8443", "2001:db8::1", NULL, 8443, POL_RANGE_DOCUMENTATION},
        {"[ff02::1]", "ff02::1", NULL, 0, POL_RANGE_MULTICAST},
        {"[64:ff9b:1::1]", "64:ff9b:1::1", NULL, 0, POL_RANGE_RESERVED},
        {"[2606:4700::1111]", "2606:4700::1111", NULL, 0, -1},
        {"Example.COM.", NULL, "example.com", 0, -1},
        {"example.com:443", NULL, "example.com", 443, -1},
        {"1.2.3.4.example.com", NULL, "1.2.3.4.example.com", 0, -1},
        {"0x7f.example", NULL, "0x7f.example", 0, -1},
};

static void test_ip_literals_are_addresses_classified_by_what_they_are(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(host_cases); i++) {
                const host_case *c = &host_cases[i];
                pol_host h;
                const char *why = NULL;
                char buf[64];
                if (pol_host_parse(c->host, &h, &why) < 0)
                        fail_msg("host %s rejected: %s", c->host, why);
                assert_int_equal(h.port, c->port);
                if (!c->addr) {
                        assert_false(h.is_addr);
                        assert_string_equal(h.name, c->name);
                        continue;
                }
                if (!h.is_addr)
                        fail_msg("host %s was judged as a name", c->host);
                assert_string_equal(pol_addr_format(&h.addr, buf, sizeof(buf)), c->addr);
                const pol_range *r = pol_addr_classify(&h.addr);
                if ((r ? (int)r->kind : -1) != c->kind)
                        fail_msg("host %s: class %s, expected %s", c->host, r ? pol_range_kind_to_string(r->kind) : "public",
                                 c->kind < 0 ? "public" : pol_range_kind_to_string((pol_range_kind)c->kind));
        }
}

static void test_inet_aton_forms_agree_with_libc(void **state) {
        static const char *const forms[] = {"2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "127.1", "0",
                                            "0.0.0.0", "1.2.3", "255.255.255.255", "0xff.0xff.0xffff", "010.010"};
        for (size_t i = 0; i < ELEMENTSOF(forms); i++) {
                struct in_addr libc;
                pol_addr a;
                assert_int_equal(inet_aton(forms[i], &libc), 1);
                assert_int_equal(pol_addr_parse_inet_aton(forms[i], &a), 0);
                assert_memory_equal(a.bytes, &libc, 4);
        }
}

static void test_invalid_hosts_are_rejected(void **state) {
        static const char *const bad[] = {"", "a..b", "exa_mple.com", "1.2.3.4.5", "256.1.1.1", "08.0.0.1",
                                          "0x", "4294967296", "1.0x100.1.1", "[::1", "[::1]x", "[fe80::1%eth0]",
                                          "fe80::1%eth0", "example.com:0", "example.com:99999", "example.com:",
                                          "bücher.de", "a.b.", "..", "[1.2.3.4]", "::ffff:1.2.3.4.5"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                pol_host h;
                const char *why = NULL;
                if (strcmp(bad[i], "a.b.") == 0) { /* one trailing dot is fine */
                        assert_int_equal(pol_host_parse(bad[i], &h, &why), 0);
                        continue;
                }
                if (pol_host_parse(bad[i], &h, &why) != -EINVAL)
                        fail_msg("host \"%s\" was accepted", bad[i]);
                assert_non_null(why);
        }
}

/* ---- CIDRs ---- */

typedef struct cidr_case {
        const char *text;
        const char *error; /* NULL: valid */
} cidr_case;

static const cidr_case cidr_cases[] = {
        {"10.0.0.0/8", NULL},
        {"0.0.0.0/0", NULL},
        {"10.1.1.1/32", NULL},
        {"::/0", NULL},
        {"2001:db8::/32", NULL},
        {"fe80::/10", NULL},
        {"10.0.0.5/8", "10.0.0.5/8 has host bits set; did you mean 10.0.0.0/8?"},
        {"2001:db8::1/32", "2001:db8::1/32 has host bits set; did you mean 2001:db8::/32?"},
        {"10.0.0.0/33", "prefix length must be a number from 0 to 32"},
        {"::/129", "prefix length must be a number from 0 to 128"},
        {"10.0.0.0/", "prefix length"},
        {"10.0.0.0/08", "prefix length"},
        {"10.0.0.0/-1", "prefix length"},
        {"10.0.0.1", "10.0.0.1 is an address, not a CIDR; did you mean 10.0.0.1/32?"},
        {"10.1/16", "canonical form"},
        {"010.0.0.0/8", "canonical form"},
        {"example.com/8", "canonical form"},
};

static void test_cidrs_must_be_canonical(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(cidr_cases); i++) {
                pol_cidr c;
                char *why = NULL, buf[64];
                int r = pol_cidr_parse(cidr_cases[i].text, &c, &why);
                if (!cidr_cases[i].error) {
                        assert_int_equal(r, 0);
                        assert_string_equal(pol_cidr_format(&c, buf, sizeof(buf)), cidr_cases[i].text);
                        continue;
                }
                assert_int_equal(r, -EINVAL);
                if (!why || !strstr(why, cidr_cases[i].error))
                        fail_msg("CIDR %s: got \"%s\", want \"%s\"", cidr_cases[i].text, why, cidr_cases[i].error);
                free(why);
        }
}

static void test_cidr_containment(void **state) {
        pol_cidr net, small, v6;
        pol_addr a;
        char *why = NULL;
        assert_int_equal(pol_cidr_parse("10.0.0.0/8", &net, &why), 0);
        assert_int_equal(pol_cidr_parse("10.1.0.0/16", &small, &why), 0);
        assert_int_equal(pol_cidr_parse("::/0", &v6, &why), 0);
        assert_int_equal(pol_addr_parse("10.255.255.255", &a), 0);
        assert_true(pol_cidr_contains(&net, &a));
        assert_false(pol_cidr_contains(&small, &a));
        assert_false(pol_cidr_contains(&v6, &a)); /* families never mix */
        assert_int_equal(pol_addr_parse("11.0.0.0", &a), 0);
        assert_false(pol_cidr_contains(&net, &a));
        assert_true(pol_cidr_within(&small, &net));
        assert_false(pol_cidr_within(&net, &small));
}

static void test_range_table_rows_all_parse(void **state) {
        /* Every row of the table must be live: probe the network address of
         * a few rows and expect each to classify as that row's kind. */
        static const struct {
                const char *addr;
                pol_range_kind kind;
        } probes[] = {{"0.0.0.0", POL_RANGE_UNSPECIFIED}, {"127.255.255.255", POL_RANGE_LOOPBACK},
                      {"100.127.255.255", POL_RANGE_CGNAT}, {"198.51.100.1", POL_RANGE_DOCUMENTATION},
                      {"203.0.113.255", POL_RANGE_DOCUMENTATION}, {"192.88.99.1", POL_RANGE_RESERVED},
                      {"100::1", POL_RANGE_RESERVED}, {"2001:2::1", POL_RANGE_BENCHMARK},
                      {"3fff::1", POL_RANGE_DOCUMENTATION}, {"fec0::1", POL_RANGE_RESERVED}};
        for (size_t i = 0; i < ELEMENTSOF(probes); i++) {
                pol_addr a;
                assert_int_equal(pol_addr_parse(probes[i].addr, &a), 0);
                const pol_range *r = pol_addr_classify(&a);
                assert_non_null(r);
                assert_int_equal(r->kind, probes[i].kind);
        }
}

/* ---- verdicts ---- */

static pol_policy *policy(const char *json) {
        cJSON *j = cJSON_Parse(json);
        pol_policy *p = NULL;
        sb_error *err = NULL;
        assert_non_null(j);
        if (pol_policy_parse(j, &p, &err) < 0)
                fail_msg("policy %s: %s", json, err->message);
        cJSON_Delete(j);
        return p;
}

typedef struct verdict_case {
        const char *policy;
        const char *host;
        uint16_t port;
        bool allow;
        pol_layer layer;
} verdict_case;

#define PREC "{\"subnets\":{\"allow\":[\"0.0.0.0/0\",\"10.1.1.1/32\"],\"deny\":[\"10.0.0.0/8\"]}}"
#define DOMS "{\"allow\":[\"*.example.com\",\"api.example.org:443\"]}"

static const verdict_case verdict_cases[] = {
        /* subnets.deny beats every allow, even a more specific one */
        {PREC, "10.1.1.1", 0, false, POL_LAYER_SUBNET_DENY},
        {PREC, "10.9.9.9", 0, false, POL_LAYER_SUBNET_DENY},
        {PREC, "8.8.8.8", 0, true, POL_LAYER_SUBNET_ALLOW},
        {PREC, "::ffff:10.1.1.1", 0, false, POL_LAYER_SUBNET_DENY},
        /* 0.0.0.0/0 does not name loopback, link-local or private ranges */
        {PREC, "169.254.169.254", 0, false, POL_LAYER_FORBIDDEN},
        {PREC, "127.0.0.1", 0, false, POL_LAYER_NEVER},
        {PREC, "192.168.1.1", 0, false, POL_LAYER_FORBIDDEN},
        /* a subnets.allow entry inside a forbidden range names it */
        {"{\"subnets\":{\"allow\":[\"192.168.1.0/24\"]}}", "192.168.1.7", 0, true, POL_LAYER_SUBNET_ALLOW},
        {"{\"subnets\":{\"allow\":[\"192.168.1.0/24\"]}}", "192.168.2.7", 0, false, POL_LAYER_FORBIDDEN},
        {"{\"subnets\":{\"allow\":[\"169.254.169.254/32\"]}}", "169.254.169.254", 0, true, POL_LAYER_SUBNET_ALLOW},
        {"{\"subnets\":{\"allow\":[\"0.0.0.0/0\"]}}", "1.1.1.1", 0, true, POL_LAYER_SUBNET_ALLOW},
        {"{\"subnets\":{\"allow\":[\"0.0.0.0/0\"]}}", "::ffff:169.254.169.254", 0, false, POL_LAYER_FORBIDDEN},
        {"{\"subnets\":{\"allow\":[\"::/0\"]}}", "[2606:4700::1111]", 0, true, POL_LAYER_SUBNET_ALLOW},
        {"{\"subnets\":{\"allow\":[\"::/0\"]}}", "[fe80::1]", 0, false, POL_LAYER_FORBIDDEN},
        /* custom policy: domains */
        {DOMS, "a.example.com", 443, true, POL_LAYER_DOMAIN},
        {DOMS, "example.com", 443, false, POL_LAYER_DEFAULT},
        {DOMS, "evilexample.com", 443, false, POL_LAYER_DEFAULT},
        {DOMS, "api.example.org", 443, true, POL_LAYER_DOMAIN},
        {DOMS, "api.example.org:443", 0, true, POL_LAYER_DOMAIN},
        {DOMS, "api.example.org:80", 0, false, POL_LAYER_DEFAULT},
        {DOMS, "api.example.org", 80, false, POL_LAYER_DEFAULT},
        {DOMS, "8.8.8.8", 443, false, POL_LAYER_DEFAULT},
        {DOMS, "203.0.113.9", 443, false, POL_LAYER_FORBIDDEN},
        {DOMS, "a..example.com", 443, false, POL_LAYER_INVALID_HOST},
        {DOMS, "1.2.3.4.5", 443, false, POL_LAYER_INVALID_HOST},
        /* allow-all: public and private yes, loopback / link-local never */
        {"\"allow-all\"", "example.com", 443, true, POL_LAYER_MODE},
        {"\"allow-all\"", "8.8.8.8", 0, true, POL_LAYER_MODE},
        {"\"allow-all\"", "10.0.0.1", 0, true, POL_LAYER_MODE},
        {"\"allow-all\"", "100.64.0.1", 0, true, POL_LAYER_MODE},
        {"\"allow-all\"", "169.254.169.254", 0, false, POL_LAYER_FORBIDDEN},
        {"\"allow-all\"", "0xa9fea9fe", 0, false, POL_LAYER_FORBIDDEN},
        {"\"allow-all\"", "64:ff9b::a9fe:a9fe", 0, false, POL_LAYER_FORBIDDEN},
        {"\"allow-all\"", "2130706433", 0, false, POL_LAYER_NEVER},
        {"\"allow-all\"", "0", 0, false, POL_LAYER_NEVER},
        {"\"allow-all\"", "[::]", 0, false, POL_LAYER_NEVER},
        {"\"allow-all\"", "[fe80::1]", 0, false, POL_LAYER_FORBIDDEN},
        /* deny-all denies everything */
        {"\"deny-all\"", "example.com", 443, false, POL_LAYER_MODE},
        {"\"deny-all\"", "8.8.8.8", 0, false, POL_LAYER_MODE},
        /* the lone "*" */
        {"{\"allow\":[\"*\"]}", "anything.example", 0, true, POL_LAYER_DOMAIN},
        {"{\"allow\":[\"*\"]}", "127.0.0.1", 0, false, POL_LAYER_NEVER},
        {"{}", "example.com", 443, false, POL_LAYER_DEFAULT},
        /* The host itself: no subnets.allow entry opens it, even one that
         * names it exactly; mapped and compatible forms alike. */
        {"{\"subnets\":{\"allow\":[\"0.0.0.0/32\"]}}", "0.0.0.0", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"0.0.0.0/32\"]}}", "0", 7777, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"0.0.0.0/8\"]}}", "0.1.2.3", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"127.0.0.0/8\"]}}", "127.0.0.2", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"127.0.0.1/32\"]}}", "127.0.0.1", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"127.0.0.0/8\"]}}", "::ffff:127.0.0.2", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"0.0.0.0/32\"]}}", "::ffff:0.0.0.0", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"::ffff:0:0/96\"]}}", "[::ffff:7f00:2]", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"::/96\"]}}", "::127.0.0.2", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"::1/128\"]}}", "[::1]", 0, false, POL_LAYER_NEVER},
        {"{\"subnets\":{\"allow\":[\"::/128\"]}}", "[::]", 0, false, POL_LAYER_NEVER},
        {"\"allow-all\"", "127.9.9.9", 0, false, POL_LAYER_NEVER},
        {"\"allow-all\"", "[::1]", 0, false, POL_LAYER_NEVER},
};

static void test_verdicts_follow_precedence(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(verdict_cases); i++) {
                const verdict_case *c = &verdict_cases[i];
                pol_policy *p = policy(c->policy);
                pol_verdict v;
                bool allow = pol_check(p, c->host, c->port, NULL, 0, &v);
                if (allow != c->allow || v.allow != allow || v.layer != c->layer)
                        fail_msg("case %zu: %s on %s: got %s by %s (%s), want %s by %s", i, c->host, c->policy,
                                 allow ? "allow" : "deny", pol_layer_to_string(v.layer), v.detail,
                                 c->allow ? "allow" : "deny", pol_layer_to_string(c->layer));
                pol_policy_free(p);
        }
}

/* The packet decision (pol_check_packet, the table nftables is generated
 * from): the port steps name themselves, subnets.allow admits before QUIC
 * is refused, deny beats the port steps. */
typedef struct packet_case {
        const char *policy;
        int proto;
        const char *addr;
        uint16_t port;
        bool pinned;
        bool allow;
        pol_layer layer;
        const char *detail; /* a substring, or NULL */
} packet_case;

#define PKT "{\"allow\":[\"a.test\"],\"subnets\":{\"allow\":[\"5.5.5.0/24\"],\"deny\":[\"5.5.5.66/32\"]}}"
static const packet_case packet_cases[] = {
        {PKT, IPPROTO_TCP, "5.5.5.10", 853, false, false, POL_LAYER_PORT, "tcp dport 853 (DNS over TLS)"},
        {PKT, IPPROTO_UDP, "5.5.5.10", 853, false, false, POL_LAYER_PORT, "udp dport 853"},
        {PKT, IPPROTO_UDP, "5.5.5.10", 53, false, false, POL_LAYER_PORT, "udp dport 53 (DNS)"},
        {PKT, IPPROTO_TCP, "5.5.5.10", 53, false, false, POL_LAYER_PORT, "tcp dport 53 (DNS)"},
        {PKT, IPPROTO_UDP, "5.5.5.10", 443, false, true, POL_LAYER_SUBNET_ALLOW, "subnets.allow[0] 5.5.5.0/24"},
        {PKT, IPPROTO_TCP, "5.5.5.10", 7000, false, true, POL_LAYER_SUBNET_ALLOW, NULL},
        {PKT, IPPROTO_UDP, "8.8.8.8", 443, true, false, POL_LAYER_PORT, "udp dport 443 (QUIC"},
        {PKT, IPPROTO_UDP, "8.8.8.8", 443, false, false, POL_LAYER_PORT, "udp dport 443 (QUIC"},
        {PKT, IPPROTO_TCP, "8.8.8.8", 7000, true, true, POL_LAYER_DNS_PIN, NULL},
        {PKT, IPPROTO_TCP, "8.8.8.8", 7000, false, false, POL_LAYER_DEFAULT, "not resolved through the DNS filter"},
        {PKT, IPPROTO_ICMP, "8.8.8.8", 0, false, false, POL_LAYER_DEFAULT, NULL},
        {PKT, IPPROTO_TCP, "5.5.5.66", 853, false, false, POL_LAYER_SUBNET_DENY, "subnets.deny[0]"},
        {PKT, IPPROTO_TCP, "169.254.169.254", 80, true, false, POL_LAYER_FORBIDDEN, "link-local"},
        {"\"allow-all\"", IPPROTO_TCP, "8.8.8.8", 853, false, true, POL_LAYER_MODE, NULL},
        {"\"deny-all\"", IPPROTO_TCP, "5.5.5.10", 80, true, false, POL_LAYER_MODE, NULL},
};

static void test_packet_verdicts_name_the_step_that_decided(void **state) {
        size_t n_steps;
        const pol_packet_step *steps = pol_packet_steps(&n_steps);
        for (size_t i = 0; i < ELEMENTSOF(packet_cases); i++) {
                const packet_case *c = &packet_cases[i];
                pol_policy *p = policy(c->policy);
                pol_addr a;
                pol_verdict v;
                assert_int_equal(pol_addr_parse(c->addr, &a), 0);
                bool allow = pol_check_packet(p, c->proto, &a, c->port, c->pinned, NULL, 0, &v);
                if (allow != c->allow || v.allow != allow || v.layer != c->layer ||
                    (c->detail && !strstr(v.detail, c->detail)))
                        fail_msg("case %zu: %s:%u: got %s by %s (%s), want %s by %s (%s)", i, c->addr, c->port,
                                 allow ? "allow" : "deny", pol_layer_to_string(v.layer), v.detail,
                                 c->allow ? "allow" : "deny", pol_layer_to_string(c->layer),
                                 c->detail ? c->detail : "");
                /* A port step names its own row of the table. */
                if (v.layer == POL_LAYER_PORT) {
                        assert_in_range(v.rule, 0, n_steps - 1);
                        assert_int_equal(steps[v.rule].kind, POL_STEP_PORT);
                        assert_int_equal(steps[v.rule].port, c->port);
                        assert_string_equal(steps[v.rule].rule, v.detail);
                }
                pol_policy_free(p);
        }
}

/* The port steps alone (a name whose addresses are not known): the same
 * rows, skipping those after subnets.allow for an admitted address. */
static void test_port_steps_alone_agree_with_the_packet_decision(void **state) {
        pol_policy *p = policy(PKT);
        pol_verdict v;
        assert_false(pol_check_port(p, IPPROTO_TCP, 853, false, &v));
        assert_int_equal(v.layer, POL_LAYER_PORT);
        assert_false(pol_check_port(p, IPPROTO_UDP, 443, false, &v));
        assert_true(pol_check_port(p, IPPROTO_UDP, 443, true, &v));
        assert_false(pol_check_port(p, IPPROTO_UDP, 53, true, &v));
        assert_true(pol_check_port(p, IPPROTO_TCP, 443, false, &v));
        assert_false(pol_check_port(p, IPPROTO_TCP, 853, true, &v));
        pol_policy_free(p);
}

static void test_verdict_names_the_deciding_rule(void **state) {
        pol_policy *p = policy(PREC);
        pol_verdict v;
        assert_false(pol_check(p, "10.1.1.1", 0, NULL, 0, &v));
        assert_int_equal(v.rule, 0);
        assert_string_equal(v.detail, "subnets.deny[0] 10.0.0.0/8");
        assert_true(pol_check(p, "1.1.1.1", 0, NULL, 0, &v));
        assert_string_equal(v.detail, "subnets.allow[0] 0.0.0.0/0");
        assert_false(pol_check(p, "169.254.169.254", 0, NULL, 0, &v));
        assert_string_equal(v.detail, "169.254.169.254 is link-local (169.254.0.0/16, RFC 3927)");
        pol_policy_free(p);
        p = policy(DOMS);
        assert_true(pol_check(p, "api.example.org", 443, NULL, 0, &v));
        assert_int_equal(v.rule, 1);
        assert_string_equal(v.detail, "allow[1] \"api.example.org:443\"");
        pol_policy_free(p);
}

static void test_never_list_beats_subnets_allow(void **state) {
        pol_policy *p = policy("{\"subnets\":{\"allow\":[\"10.201.0.0/16\",\"0.0.0.0/0\"]}}");
        pol_cidr never[2];
        char *why = NULL;
        pol_verdict v;
        assert_int_equal(pol_cidr_parse("10.201.0.0/31", &never[0], &why), 0);
        assert_int_equal(pol_cidr_parse("198.51.100.7/32", &never[1], &why), 0);
        assert_true(pol_check(p, "10.201.0.9", 0, never, 2, &v));
        assert_false(pol_check(p, "10.201.0.1", 0, never, 2, &v));
        assert_int_equal(v.layer, POL_LAYER_NEVER);
        assert_int_equal(v.rule, 0);
        assert_false(pol_check(p, "::ffff:10.201.0.0", 0, never, 2, &v));
        assert_int_equal(v.layer, POL_LAYER_NEVER);
        pol_policy_free(p);
        p = policy("\"allow-all\"");
        assert_false(pol_check(p, "198.51.100.7", 0, never, 2, &v));
        assert_int_equal(v.layer, POL_LAYER_NEVER);
        assert_int_equal(v.rule, 1);
        pol_policy_free(p);
}

static void addrs(pol_addr *out, const char *const *text, size_t n) {
        for (size_t i = 0; i < n; i++)
                assert_int_equal(pol_addr_parse(text[i], &out[i]), 0);
}

static void test_resolved_name_denied_when_any_address_is_forbidden(void **state) {
        pol_policy *p = policy("{\"allow\":[\"*.example.com\"],\"subnets\":{\"deny\":[\"203.0.113.0/24\"],"
                               "\"allow\":[\"192.168.7.0/24\"]}}");
        static const char *const good[] = {"93.184.216.34", "2606:2800:220:1::1", "192.168.7.7"};
        static const char *const rebind[] = {"93.184.216.34", "127.0.0.1"};
        static const char *const metadata[] = {"::ffff:169.254.169.254"};
        static const char *const denied[] = {"203.0.113.5"};
        static const char *const private[] = {"192.168.8.1"};
        pol_addr a[3];
        pol_verdict v;
        addrs(a, good, 3);
        assert_true(pol_check_resolved(p, "a.example.com", 443, a, 3, NULL, 0, &v));
        assert_int_equal(v.layer, POL_LAYER_DOMAIN);
        addrs(a, rebind, 2);
        assert_false(pol_check_resolved(p, "a.example.com", 443, a, 2, NULL, 0, &v));
        assert_int_equal(v.layer, POL_LAYER_NEVER); /* loopback is the host itself */
        addrs(a, metadata, 1);
        assert_false(pol_check_resolved(p, "a.example.com", 443, a, 1, NULL, 0, &v));
        assert_int_equal(v.layer, POL_LAYER_FORBIDDEN);
        addrs(a, denied, 1);
        assert_false(pol_check_resolved(p, "a.example.com", 443, a, 1, NULL, 0, &v));
        assert_int_equal(v.layer, POL_LAYER_SUBNET_DENY);
        addrs(a, private, 1);
        assert_false(pol_check_resolved(p, "a.example.com", 443, a, 1, NULL, 0, &v));
        addrs(a, good, 1);
        assert_false(pol_check_resolved(p, "example.com", 443, a, 1, NULL, 0, &v));
        assert_int_equal(v.layer, POL_LAYER_DEFAULT);
        pol_policy_free(p);
}

static void test_rules_of_most_specific_pattern_apply(void **state) {
        pol_policy *p = policy("{\"allow\":{\"*\":[],\"*.example.com\":[],\"api.example.com\":"
                               "[{\"transform\":[{\"headers\":{\"x-k\":\"v\"}}]}]}}");
        const pol_domain *d = pol_policy_find_domain(p, "api.example.com", 443);
        assert_non_null(d);
        assert_string_equal(d->pattern.text, "api.example.com");
        assert_int_equal(d->n_rules, 1);
        d = pol_policy_find_domain(p, "www.example.com", 443);
        assert_string_equal(d->pattern.text, "*.example.com");
        d = pol_policy_find_domain(p, "example.net", 443);
        assert_string_equal(d->pattern.text, "*");
        pol_policy_free(p);
}

static void test_missing_policy_fails_closed(void **state) {
        pol_verdict v;
        pol_addr a;
        assert_false(pol_check(NULL, "example.com", 443, NULL, 0, &v));
        assert_int_equal(pol_addr_parse("8.8.8.8", &a), 0);
        assert_false(pol_check_address(NULL, &a, NULL, 0, &v));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_patterns_match_whole_labels_only),
                cmocka_unit_test(test_invalid_patterns_are_rejected_with_reason),
                cmocka_unit_test(test_more_specific_pattern_wins),
                cmocka_unit_test(test_ip_literals_are_addresses_classified_by_what_they_are),
                cmocka_unit_test(test_inet_aton_forms_agree_with_libc),
                cmocka_unit_test(test_invalid_hosts_are_rejected),
                cmocka_unit_test(test_cidrs_must_be_canonical),
                cmocka_unit_test(test_cidr_containment),
                cmocka_unit_test(test_range_table_rows_all_parse),
                cmocka_unit_test(test_verdicts_follow_precedence),
                cmocka_unit_test(test_verdict_names_the_deciding_rule),
                cmocka_unit_test(test_never_list_beats_subnets_allow),
                cmocka_unit_test(test_resolved_name_denied_when_any_address_is_forbidden),
                cmocka_unit_test(test_rules_of_most_specific_pattern_apply),
                cmocka_unit_test(test_missing_policy_fails_closed),
                cmocka_unit_test(test_packet_verdicts_name_the_step_that_decided),
                cmocka_unit_test(test_port_steps_alone_agree_with_the_packet_decision),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
