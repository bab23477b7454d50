/* Unit tests for policy/dns.c, the DNS filter of sandbox-netd (DESIGN §5.1
 * rules 2, 3, 6 and §5.2), plus one end-to-end run of the sandbox-netd
 * binary on loopback with a fake upstream written here with ldns. Packets
 * are built and read with ldns exactly as a resolver client would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ldns/ldns.h>
#include "policy/dns.h"
#include "policy/policy.h"

#define TIMEOUT_MS 5000

static pol_policy *policy_from(const char *json) {
        cJSON *j = cJSON_Parse(json);
        pol_policy *p = NULL;
        sb_error *err = NULL;
        assert_non_null(j);
        if (pol_policy_parse(j, &p, &err) < 0)
                fail_msg("policy %s: %s", json, err ? err->message : "?");
        cJSON_Delete(j);
        return p;
}

/* A query as a stub resolver sends it: RD, one question, EDNS when asked. */
static uint8_t *make_query(const char *name, ldns_rr_type type, bool edns, uint16_t id, size_t *len) {
        ldns_pkt *q = NULL;
        uint8_t *wire = NULL;
        assert_int_equal(ldns_pkt_query_new_frm_str(&q, name, type, LDNS_RR_CLASS_IN, LDNS_RD), LDNS_STATUS_OK);
        ldns_pkt_set_id(q, id);
        if (edns)
                ldns_pkt_set_edns_udp_size(q, 1232);
        assert_int_equal(ldns_pkt2wire(&wire, q, len), LDNS_STATUS_OK);
        ldns_pkt_free(q);
        return wire;
}

/* The upstream's answer to the forwarded query `fwd`: its id and question,
 * the records given in zone-file syntax. */
static uint8_t *make_answer(const uint8_t *fwd, size_t fwd_len, const char **rrs, size_t *len) {
        ldns_pkt *q = NULL, *a = ldns_pkt_new();
        uint8_t *wire = NULL;
        assert_int_equal(ldns_wire2pkt(&q, fwd, fwd_len), LDNS_STATUS_OK);
        ldns_pkt_set_id(a, ldns_pkt_id(q));
        ldns_pkt_set_qr(a, true);
        ldns_pkt_set_rd(a, true);
        ldns_pkt_set_ra(a, true);
        ldns_pkt_push_rr(a, LDNS_SECTION_QUESTION, ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(q), 0)));
        for (size_t i = 0; rrs && rrs[i]; i++) {
                ldns_rr *rr = NULL;
                assert_int_equal(ldns_rr_new_frm_str(&rr, rrs[i], 3600, NULL, NULL), LDNS_STATUS_OK);
                ldns_pkt_push_rr(a, LDNS_SECTION_ANSWER, rr);
        }
        assert_int_equal(ldns_pkt2wire(&wire, a, len), LDNS_STATUS_OK);
        ldns_pkt_free(q);
        ldns_pkt_free(a);
        return wire;
}

static ldns_pkt *parse(const uint8_t *wire, size_t len) {
        ldns_pkt *p = NULL;
        assert_int_equal(ldns_wire2pkt(&p, wire, len), LDNS_STATUS_OK);
        return p;
}

/* The EDE option of a reply: its INFO-CODE (-1 when absent) and text. */
static int ede_of(ldns_pkt *p, char *text, size_t size) {
        ldns_edns_option_list *l = ldns_pkt_edns_get_option_list(p);
        text[0] = '\0';
        for (size_t i = 0; l && i < ldns_edns_option_list_get_count(l); i++) {
                ldns_edns_option *o = ldns_edns_option_list_get_option(l, i);
                if (ldns_edns_get_code(o) != LDNS_EDNS_EDE || ldns_edns_get_size(o) < 2)
                        continue;
                const uint8_t *d = ldns_edns_get_data(o);
                size_t n = ldns_edns_get_size(o) - 2;
                snprintf(text, size, "%.*s", (int)n, (const char *)d + 2);
                return d[0] << 8 | d[1];
        }
        return -1;
}

/* Runs a query through the filter and returns the reply, parsed. */
static ldns_pkt *reply_to(const pol_policy *p, const char *name, ldns_rr_type type, bool edns,
                          pol_dns_result *res) {
        size_t len;
        uint8_t *q = make_query(name, type, edns, 0x1234, &len);
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, res), 0);
        free(q);
        assert_int_equal(res->action, POL_DNS_REPLY);
        ldns_pkt *r = parse(res->packet, res->len);
        assert_int_equal(ldns_pkt_id(r), 0x1234);
        assert_true(ldns_pkt_qr(r));
        return r;
}

/* ---- queries ---- */

static void test_allowed_name_is_forwarded_with_a_fresh_id(void **state) {
        pol_policy *p = policy_from("{\"allow\":[\"*.example.com\"]}");
        pol_dns_result res;
        size_t len;
        uint8_t *q = make_query("www.example.com", LDNS_RR_TYPE_A, true, 0x4242, &len);
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, &res), 0);
        assert_int_equal(res.action, POL_DNS_FORWARD);
        assert_false(res.blocked);
        assert_string_equal(res.query.name, "www.example.com");
        ldns_pkt *f = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_id(f), res.query.upstream_id);
        assert_true(ldns_pkt_rd(f));
        assert_false(ldns_pkt_qr(f));
        assert_int_equal(ldns_pkt_qdcount(f), 1);
        assert_int_equal(ldns_rr_get_type(ldns_rr_list_rr(ldns_pkt_question(f), 0)), LDNS_RR_TYPE_A);
        ldns_pkt_free(f);
        pol_dns_result_done(&res);
        free(q);
        pol_policy_free(p);
}

static void test_denied_name_gets_nxdomain_with_blocked_ede_naming_it(void **state) {
        pol_policy *p = policy_from("{\"allow\":[\"*.example.com\"]}");
        pol_dns_result res;
        char text[512];
        ldns_pkt *r = reply_to(p, "evil.test", LDNS_RR_TYPE_A, true, &res);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
        assert_int_equal(ede_of(r, text, sizeof(text)), 15);
        assert_string_equal(text, "blocked by sandbox policy: evil.test is not in networkPolicy.allow");
        assert_true(res.blocked);
        assert_int_equal(res.verdict.layer, POL_LAYER_DEFAULT);
        assert_int_equal(ldns_pkt_ancount(r), 0);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);
}

static void test_deny_all_denies_every_name(void **state) {
        pol_policy *p = policy_from("\"deny-all\"");
        const char *names[] = { "example.com", "localhost", "a.b.c.d.e", "_srv._tcp.example.com" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                pol_dns_result res;
                char text[512];
                ldns_pkt *r = reply_to(p, names[i], LDNS_RR_TYPE_AAAA, true, &res);
                assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
                assert_int_equal(ede_of(r, text, sizeof(text)), 15);
                assert_non_null(strstr(text, "deny-all"));
                ldns_pkt_free(r);
                pol_dns_result_done(&res);
        }
        pol_policy_free(p);
}

static void test_trailing_dot_and_upper_case_are_normalised_and_sent_upstream_in_lower_case(void **state) {
        pol_policy *p = policy_from("{\"allow\":[\"api.example.com\"]}");
        pol_dns_result res;
        size_t len;
        uint8_t *q = make_query("API.Example.COM.", LDNS_RR_TYPE_A, false, 7, &len);
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, &res), 0);
        assert_int_equal(res.action, POL_DNS_FORWARD);
        assert_string_equal(res.query.name, "api.example.com");
        /* Lower case upstream: the letters' case is no channel out. */
        ldns_pkt *f = parse(res.packet, res.len);
        char *owner = ldns_rdf2str(ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_question(f), 0)));
        assert_string_equal(owner, "api.example.com.");
        free(owner);
        ldns_pkt_free(f);
        pol_dns_result_done(&res);
        free(q);
        pol_policy_free(p);
}

static void test_ip_literal_question_is_judged_as_an_address(void **state) {
        pol_policy *p = policy_from("\"allow-all\"");
        const char *loopbacks[] = { "127.0.0.1", "0x7f.1", "2130706433", "169.254.169.254" };
        for (size_t i = 0; i < ELEMENTSOF(loopbacks); i++) {
                pol_dns_result res;
                char text[512];
                ldns_pkt *r = reply_to(p, loopbacks[i], LDNS_RR_TYPE_A, true, &res);
                assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
                assert_int_equal(ede_of(r, text, sizeof(text)), 15);
                assert_int_equal(res.verdict.layer, i < 3 ? POL_LAYER_NEVER : POL_LAYER_FORBIDDEN);
                assert_non_null(strstr(text, i < 3 ? "127.0.0.1 is the host itself (127.0.0.0/8"
                                                   : "169.254.169.254 is link-local"));
                ldns_pkt_free(r);
                pol_dns_result_done(&res);
        }
        /* An allowed public literal is still never sent upstream. */
        pol_dns_result res;
        char text[512];
        ldns_pkt *r = reply_to(p, "8.8.8.8", LDNS_RR_TYPE_A, true, &res);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
        assert_int_equal(ede_of(r, text, sizeof(text)), -1);
        assert_false(res.blocked);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);
}

static void test_query_types_outside_the_forwarded_set_stay_local(void **state) {
        pol_policy *p = policy_from("\"allow-all\"");
        pol_dns_result res;
        char text[512];
        ldns_pkt *r = reply_to(p, "example.com", LDNS_RR_TYPE_ANY, true, &res);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_REFUSED);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        r = reply_to(p, "example.com", LDNS_RR_TYPE_HTTPS, true, &res);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR); /* NODATA: fall back to A/AAAA */
        assert_int_equal(ldns_pkt_ancount(r), 0);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        r = reply_to(p, "example.com", LDNS_RR_TYPE_NS, true, &res);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_REFUSED);
        assert_int_equal(ede_of(r, text, sizeof(text)), 21);
        assert_non_null(strstr(text, "query type NS"));
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);
}

static void test_reply_without_edns_carries_no_opt_record(void **state) {
        pol_policy *p = policy_from("\"deny-all\"");
        pol_dns_result res;
        ldns_pkt *r = reply_to(p, "example.com", LDNS_RR_TYPE_A, false, &res);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
        assert_false(ldns_pkt_edns(r)); /* RFC 6891 §7: no OPT unless asked */
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);
}

/* ---- malformed queries ---- */

static void test_truncated_header_gets_formerr(void **state) {
        pol_policy *p = policy_from("\"allow-all\"");
        const uint8_t pkt[5] = { 0xab, 0xcd, 0x01, 0x00, 0x00 };
        pol_dns_result res;
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, pkt, sizeof(pkt), false, &res), 0);
        assert_int_equal(res.action, POL_DNS_REPLY);
        assert_int_equal(res.len, 12);
        assert_int_equal(res.packet[0], 0xab);
        assert_int_equal(res.packet[1], 0xcd);
        assert_true(res.packet[2] & 0x80);
        assert_int_equal(res.packet[3] & 0x0f, LDNS_RCODE_FORMERR);
        pol_dns_result_done(&res);
        /* Too short for an id, or a response: no reply at all. */
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, pkt, 1, false, &res), 0);
        assert_int_equal(res.action, POL_DNS_DROP);
        const uint8_t resp[12] = { 1, 2, 0x81, 0x80 };
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, resp, sizeof(resp), false, &res), 0);
        assert_int_equal(res.action, POL_DNS_DROP);
        pol_policy_free(p);
}

static void test_compression_loop_gets_formerr(void **state) {
        pol_policy *p = policy_from("\"allow-all\"");
        /* Header (1 question), then a name that is a pointer to itself. */
        const uint8_t loop[] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1 };
        /* Two pointers pointing at each other. */
        const uint8_t pingpong[] = { 0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0,
                                     1, 'a', 0xc0, 16, 0xc0, 12, 0, 1, 0, 1 };
        const uint8_t *cases[] = { loop, pingpong };
        size_t lens[] = { sizeof(loop), sizeof(pingpong) };
        for (size_t i = 0; i < 2; i++) {
                pol_dns_result res;
                assert_int_equal(pol_dns_filter_query(p, NULL, 0, cases[i], lens[i], false, &res), 0);
                assert_int_equal(res.action, POL_DNS_REPLY);
                assert_int_equal(res.packet[3] & 0x0f, LDNS_RCODE_FORMERR);
                pol_dns_result_done(&res);
        }
        pol_policy_free(p);
}

/* Every truncation and many byte flips of valid packets: the filter must
 * answer or drop, never crash or leak (this test earns its keep under ASan). */
static void test_mutated_packets_never_crash(void **state) {
        pol_policy *p = policy_from("{\"allow\":[\"*.example.com\"]}");
        size_t len, alen;
        uint8_t *q = make_query("www.example.com", LDNS_RR_TYPE_A, true, 9, &len);
        uint8_t buf[512];
        pol_dns_result res, fwd;
        uint32_t seed = 12345;
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, &fwd), 0);
        const char *rrs[] = { "www.example.com. 60 IN CNAME c.example.net.", "c.example.net. 60 IN A 93.184.216.34",
                              NULL };
        uint8_t *a = make_answer(fwd.packet, fwd.len, rrs, &alen);
        for (size_t cut = 0; cut <= len; cut++) {
                assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, cut, false, &res), 0);
                pol_dns_result_done(&res);
        }
        for (size_t cut = 0; cut <= alen; cut++) {
                if (pol_dns_filter_answer(p, NULL, 0, &fwd.query, a, cut, &res) == 0)
                        pol_dns_result_done(&res);
        }
        for (int round = 0; round < 20000; round++) {
                const uint8_t *src = round & 1 ? a : q;
                size_t n = round & 1 ? alen : len;
                memcpy(buf, src, n);
                for (int k = 0; k < 1 + round % 4; k++) {
                        seed = seed * 1103515245u + 12345u;
                        buf[(seed >> 8) % n] = (uint8_t)(seed >> 20);
                }
                if (round & 1) {
                        if (pol_dns_filter_answer(p, NULL, 0, &fwd.query, buf, n, &res) == 0)
                                pol_dns_result_done(&res);
                } else {
                        assert_int_equal(pol_dns_filter_query(p, NULL, 0, buf, n, false, &res), 0);
                        pol_dns_result_done(&res);
                }
        }
        free(a);
        free(q);
        pol_dns_result_done(&fwd);
        pol_policy_free(p);
}

/* ---- answers ---- */

/* Forwards `name` and returns the filtered answer made of rrs. */
static int answer_for(const pol_policy *p, const char *name, ldns_rr_type type, const char **rrs,
                      pol_dns_result *res) {
        pol_dns_result fwd;
        size_t len, alen;
        uint8_t *q = make_query(name, type, true, 0x5555, &len);
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, &fwd), 0);
        assert_int_equal(fwd.action, POL_DNS_FORWARD);
        uint8_t *a = make_answer(fwd.packet, fwd.len, rrs, &alen);
        int r = pol_dns_filter_answer(p, NULL, 0, &fwd.query, a, alen, res);
        free(a);
        free(q);
        pol_dns_result_done(&fwd);
        return r;
}

static void test_answer_with_a_forbidden_address_is_refused_whole(void **state) {
        pol_policy *p = policy_from("{\"allow\":[\"*.example.com\"]}");
        pol_dns_result res;
        char text[512];
        const char *rrs[] = { "www.example.com. 60 IN A 93.184.216.34", "www.example.com. 60 IN A 10.0.0.1", NULL };
        assert_int_equal(answer_for(p, "www.example.com", LDNS_RR_TYPE_A, rrs, &res), 0);
        ldns_pkt *r = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_id(r), 0x5555);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_REFUSED);
        assert_int_equal(ldns_pkt_ancount(r), 0);
        assert_int_equal(res.n_pins, 0);
        assert_int_equal(ede_of(r, text, sizeof(text)), 15);
        assert_non_null(strstr(text, "www.example.com resolved to 10.0.0.1"));
        assert_non_null(strstr(text, "private"));
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);

        /* Metadata behind a CNAME, under allow-all. */
        p = policy_from("\"allow-all\"");
        const char *meta[] = { "x.example.com. 60 IN CNAME metadata.evil.net.",
                               "metadata.evil.net. 60 IN A 169.254.169.254", NULL };
        assert_int_equal(answer_for(p, "x.example.com", LDNS_RR_TYPE_A, meta, &res), 0);
        r = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_REFUSED);
        assert_int_equal(ede_of(r, text, sizeof(text)), 15);
        assert_non_null(strstr(text, "169.254.169.254"));
        assert_int_equal(res.n_pins, 0);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);
}

static void test_subnets_deny_refuses_an_allowed_name(void **state) {
        pol_policy *p = policy_from("{\"allow\":[\"*.example.com\"],\"subnets\":{\"deny\":[\"93.184.0.0/16\"]}}");
        pol_dns_result res;
        char text[512];
        const char *rrs[] = { "www.example.com. 60 IN A 93.184.216.34", NULL };
        assert_int_equal(answer_for(p, "www.example.com", LDNS_RR_TYPE_A, rrs, &res), 0);
        ldns_pkt *r = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_REFUSED);
        assert_int_equal(ede_of(r, text, sizeof(text)), 15);
        assert_non_null(strstr(text, "subnets.deny[0] 93.184.0.0/16"));
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);
}

static void test_allowed_answer_is_pinned_with_ttl_floor_and_released(void **state) {
        pol_policy *p = policy_from("{\"allow\":[\"*.example.com\"]}");
        pol_dns_result res;
        char s[64];
        const char *rrs[] = {
                "www.example.com. 5 IN CNAME edge.cdn.example.net.",
                "edge.cdn.example.net. 5 IN A 93.184.216.34",
                "edge.cdn.example.net. 300 IN A 93.184.216.35",
                "unrelated.example.org. 300 IN A 1.1.1.1", /* off the chain: not released */
                NULL,
        };
        assert_int_equal(answer_for(p, "www.example.com", LDNS_RR_TYPE_A, rrs, &res), 0);
        assert_false(res.blocked);
        assert_int_equal(res.n_pins, 2);
        assert_string_equal(pol_addr_format(&res.pins[0].addr, s, sizeof(s)), "93.184.216.34");
        assert_int_equal(res.pins[0].ttl, 30);
        assert_string_equal(pol_addr_format(&res.pins[1].addr, s, sizeof(s)), "93.184.216.35");
        assert_int_equal(res.pins[1].ttl, 300);
        ldns_pkt *r = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
        assert_int_equal(ldns_pkt_id(r), 0x5555);
        assert_int_equal(ldns_pkt_ancount(r), 3);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);

        const char *v6[] = { "www.example.com. 999999 IN AAAA 2606:2800:220:1::1", NULL };
        assert_int_equal(answer_for(p, "www.example.com", LDNS_RR_TYPE_AAAA, v6, &res), 0);
        assert_int_equal(res.n_pins, 1);
        assert_string_equal(pol_addr_format(&res.pins[0].addr, s, sizeof(s)), "2606:2800:220:1::1");
        assert_int_equal(res.pins[0].ttl, POL_DNS_TTL_CAP);
        r = parse(res.packet, res.len);
        assert_int_equal(ldns_rr_ttl(ldns_rr_list_rr(ldns_pkt_answer(r), 0)), POL_DNS_TTL_CAP);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_policy_free(p);
}

static void test_answer_not_matching_the_query_is_ignored(void **state) {
        pol_policy *p = policy_from("\"allow-all\"");
        pol_dns_result fwd, res;
        size_t len, alen;
        uint8_t *q = make_query("www.example.com", LDNS_RR_TYPE_A, true, 1, &len);
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, &fwd), 0);
        const char *rrs[] = { "www.example.com. 60 IN A 93.184.216.34", NULL };
        uint8_t *a = make_answer(fwd.packet, fwd.len, rrs, &alen);
        a[1] ^= 1; /* wrong id: a spoof racing the real answer */
        assert_int_equal(pol_dns_filter_answer(p, NULL, 0, &fwd.query, a, alen, &res), -EBADMSG);
        a[1] ^= 1;
        pol_dns_query other = fwd.query;
        other.qtype = LDNS_RR_TYPE_AAAA; /* same id, other question */
        assert_int_equal(pol_dns_filter_answer(p, NULL, 0, &other, a, alen, &res), -EBADMSG);
        assert_int_equal(pol_dns_filter_answer(p, NULL, 0, &fwd.query, a, alen, &res), 0);
        assert_int_equal(res.n_pins, 1);
        pol_dns_result_done(&res);
        free(a);
        free(q);
        pol_dns_result_done(&fwd);
        pol_policy_free(p);
}

static void test_policy_change_in_flight_denies_the_answer(void **state) {
        pol_policy *old = policy_from("{\"allow\":[\"*.example.com\"]}");
        pol_policy *now = policy_from("{\"allow\":[\"other.org\"]}");
        pol_dns_result fwd, res;
        size_t len, alen;
        char text[512];
        uint8_t *q = make_query("www.example.com", LDNS_RR_TYPE_A, true, 1, &len);
        assert_int_equal(pol_dns_filter_query(old, NULL, 0, q, len, false, &fwd), 0);
        const char *rrs[] = { "www.example.com. 60 IN A 93.184.216.34", NULL };
        uint8_t *a = make_answer(fwd.packet, fwd.len, rrs, &alen);
        assert_int_equal(pol_dns_filter_answer(now, NULL, 0, &fwd.query, a, alen, &res), 0);
        assert_int_equal(res.n_pins, 0);
        ldns_pkt *r = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
        assert_int_equal(ede_of(r, text, sizeof(text)), 15);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        free(a);
        free(q);
        pol_dns_result_done(&fwd);
        pol_policy_free(old);
        pol_policy_free(now);
}

static void test_answer_too_big_for_udp_is_truncated_without_pins(void **state) {
        pol_policy *p = policy_from("\"allow-all\"");
        pol_dns_result fwd, res;
        size_t len, alen;
        char rrtext[40][64];
        const char *rrs[41];
        for (int i = 0; i < 40; i++) {
                snprintf(rrtext[i], sizeof(rrtext[i]), "big.example.com. 60 IN A 93.184.216.%d", i + 1);
                rrs[i] = rrtext[i];
        }
        rrs[40] = NULL;
        uint8_t *q = make_query("big.example.com", LDNS_RR_TYPE_A, false, 1, &len); /* 512-byte limit */
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, &fwd), 0);
        uint8_t *a = make_answer(fwd.packet, fwd.len, rrs, &alen);
        assert_int_equal(pol_dns_filter_answer(p, NULL, 0, &fwd.query, a, alen, &res), 0);
        assert_true(res.len <= 512);
        assert_int_equal(res.n_pins, 0);
        ldns_pkt *r = parse(res.packet, res.len);
        assert_true(ldns_pkt_tc(r));
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_dns_result_done(&fwd);
        free(a);
        free(q);
        pol_policy_free(p);
}

static void test_upstream_failure_gives_servfail(void **state) {
        pol_policy *p = policy_from("\"allow-all\"");
        pol_dns_result fwd, res;
        size_t len;
        uint8_t *q = make_query("www.example.com", LDNS_RR_TYPE_A, true, 77, &len);
        assert_int_equal(pol_dns_filter_query(p, NULL, 0, q, len, false, &fwd), 0);
        assert_int_equal(pol_dns_servfail(&fwd.query, &res), 0);
        ldns_pkt *r = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_id(r), 77);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_SERVFAIL);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        /* Garbage that carries the right id and QR: a label runs off the end. */
        uint8_t junk[20] = { (uint8_t)(fwd.query.upstream_id >> 8), (uint8_t)fwd.query.upstream_id, 0x81, 0x80, 0, 1,
                             0, 0, 0, 0, 0, 0, 63, 'a' };
        assert_int_equal(pol_dns_filter_answer(p, NULL, 0, &fwd.query, junk, sizeof(junk), &res), 0);
        r = parse(res.packet, res.len);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_SERVFAIL);
        ldns_pkt_free(r);
        pol_dns_result_done(&res);
        pol_dns_result_done(&fwd);
        free(q);
        pol_policy_free(p);
}

/* ---- end to end: the sandbox-netd binary on loopback ---- */

static pid_t netd_pid = -1;
static char policy_path[] = "/tmp/test-dns-policy-XXXXXX";

static const char *netd_binary(void) {
        const char *p = getenv("SANDBOX_NETD");
        return p && *p ? p : "build/sandbox-netd";
}

static int udp_socket_on_loopback(uint16_t *ret_port) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof(a);
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
        *ret_port = ntohs(a.sin_port);
        return fd;
}

static bool readable(int fd, int ms) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return poll(&p, 1, ms) == 1;
}

/* Reads netd's stdout up to and including the first newline. */
static void read_line(int fd, char *buf, size_t size) {
        size_t n = 0;
        while (n + 1 < size) {
                if (!readable(fd, TIMEOUT_MS))
                        fail_msg("no line from sandbox-netd within %d ms", TIMEOUT_MS);
                if (read(fd, buf + n, 1) != 1)
                        fail_msg("sandbox-netd closed its stdout");
                if (buf[n++] == '\n')
                        break;
        }
        buf[n] = '\0';
}

static pid_t spawn_netd(uint16_t upstream_port, int out_fd) {
        char upstream[32];
        snprintf(upstream, sizeof(upstream), "127.0.0.1:%u", upstream_port);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char *argv[] = { (char *)"sandbox-netd", (char *)"--listen", (char *)"127.0.0.1:0",
                                 (char *)"--upstream", upstream, (char *)"--policy", policy_path,
                                 (char *)"--timeout-ms", (char *)"5000", NULL };
                if (dup2(out_fd, 1) < 0)
                        _exit(127);
                execv(netd_binary(), argv);
                _exit(127);
        }
        return pid;
}

/* The fake upstream: answers one query with one A record. */
static void serve_one_answer(int upstream, const char *rr) {
        uint8_t buf[4096];
        struct sockaddr_storage from;
        socklen_t flen = sizeof(from);
        size_t alen;
        if (!readable(upstream, TIMEOUT_MS))
                fail_msg("sandbox-netd forwarded nothing upstream");
        ssize_t n = recvfrom(upstream, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
        assert_true(n > 0);
        const char *rrs[] = { rr, NULL };
        uint8_t *a = make_answer(buf, (size_t)n, rrs, &alen);
        assert_int_equal(sendto(upstream, a, alen, 0, (struct sockaddr *)&from, flen), (ssize_t)alen);
        free(a);
}

/* Fills the pipe through a second, non-blocking open file description of
 * its write end, so that netd's own (blocking) writes stall. */
static void fill_pipe(int write_fd) {
        char path[64], junk[4096];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", write_fd);
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        assert_true(fd >= 0);
        memset(junk, '#', sizeof(junk));
        while (write(fd, junk, sizeof(junk)) > 0)
                ;
        while (write(fd, junk, 1) > 0)
                ;
        assert_int_equal(errno, EAGAIN);
        close(fd);
}

/* Reads what is in the pipe now, dropping the filler. */
static size_t drain(int fd, char *out, size_t size, size_t n) {
        char buf[4096];
        ssize_t k;
        while ((k = read(fd, buf, sizeof(buf))) > 0)
                for (ssize_t i = 0; i < k; i++)
                        if (buf[i] != '#' && n + 1 < size)
                                out[n++] = buf[i];
        out[n] = '\0';
        return n;
}

static void test_netd_pins_before_it_releases_the_answer(void **state) {
        int pipefd[2], client;
        uint16_t up_port;
        char line[256], ready_ip[32], out[8192];
        unsigned port = 0, uid = 0;
        int tmp = mkstemp(policy_path);
        assert_true(tmp >= 0);
        const char *pol = "{\"allow\":[\"*.example.com\"]}";
        assert_int_equal(write(tmp, pol, strlen(pol)), (ssize_t)strlen(pol));
        close(tmp);
        int upstream = udp_socket_on_loopback(&up_port);
        assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
        assert_true(fcntl(pipefd[1], F_SETPIPE_SZ, 4096) >= 4096);
        netd_pid = spawn_netd(up_port, pipefd[1]);

        read_line(pipefd[0], line, sizeof(line));
        assert_int_equal(sscanf(line, "{\"ready\":true,\"listen\":\"%31[0-9.]:%u\",\"uid\":%u}", ready_ip, &port, &uid),
                         3);
        if (getuid() == 0)
                assert_int_equal(uid, 65534); /* dropped to nobody after binding */

        /* Block netd's stdout, then resolve an allowed name. */
        fill_pipe(pipefd[1]);
        assert_int_equal(fcntl(pipefd[0], F_SETFL, O_NONBLOCK), 0);
        struct sockaddr_in netd = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        size_t qlen;
        uint8_t *q = make_query("WWW.example.com", LDNS_RR_TYPE_A, true, 0x2222, &qlen);
        client = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        assert_int_equal(sendto(client, q, qlen, 0, (struct sockaddr *)&netd, sizeof(netd)), (ssize_t)qlen);
        serve_one_answer(upstream, "www.example.com. 5 IN A 93.184.216.34");
        /* The pin cannot be written, so the answer must not be released. */
        assert_false(readable(client, 300));
        size_t n = drain(pipefd[0], out, sizeof(out), 0);
        if (!readable(client, TIMEOUT_MS))
                fail_msg("no answer after the pin line could be written");
        /* netd wrote the pin before it sent the answer, so it is here now. */
        drain(pipefd[0], out, sizeof(out), n);
        assert_non_null(strstr(out, "{\"pin\":\"93.184.216.34\",\"ttl\":30,\"name\":\"www.example.com\",\"generation\":0}\n"));
        uint8_t buf[4096];
        ssize_t k = recv(client, buf, sizeof(buf), 0);
        assert_true(k > 0);
        ldns_pkt *r = parse(buf, (size_t)k);
        assert_int_equal(ldns_pkt_id(r), 0x2222);
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NOERROR);
        assert_int_equal(ldns_pkt_ancount(r), 1);
        ldns_pkt_free(r);
        free(q);

        /* A denied name over TCP: answered locally, length-framed. */
        int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(connect(tcp, (struct sockaddr *)&netd, sizeof(netd)), 0);
        q = make_query("evil.test", LDNS_RR_TYPE_A, true, 0x3333, &qlen);
        uint8_t frame[2 + 512] = { (uint8_t)(qlen >> 8), (uint8_t)qlen };
        memcpy(frame + 2, q, qlen);
        assert_int_equal(write(tcp, frame, qlen + 2), (ssize_t)(qlen + 2));
        assert_true(readable(tcp, TIMEOUT_MS));
        size_t got = 0;
        while (got < 2 || got < 2 + (size_t)(buf[0] << 8 | buf[1])) {
                assert_true(readable(tcp, TIMEOUT_MS));
                k = read(tcp, buf + got, sizeof(buf) - got);
                assert_true(k > 0);
                got += (size_t)k;
        }
        r = parse(buf + 2, got - 2);
        char text[512];
        assert_int_equal(ldns_pkt_get_rcode(r), LDNS_RCODE_NXDOMAIN);
        assert_int_equal(ede_of(r, text, sizeof(text)), 15);
        assert_string_equal(text, "blocked by sandbox policy: evil.test is not in networkPolicy.allow");
        ldns_pkt_free(r);
        free(q);
        close(tcp);
        close(client);
        close(upstream);
        close(pipefd[0]);
        close(pipefd[1]);

        int status;
        assert_int_equal(kill(netd_pid, SIGTERM), 0);
        assert_int_equal(waitpid(netd_pid, &status, 0), netd_pid);
        netd_pid = -1;
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Sends one A query for name to netd and serves upstream's answer rr (when
 * netd forwards it); returns the rcode netd answered with. */
static int resolve_through(int upstream, uint16_t port, const char *name, const char *rr, uint16_t id) {
        struct sockaddr_in netd = { .sin_family = AF_INET, .sin_port = htons(port),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        size_t qlen;
        uint8_t *q = make_query(name, LDNS_RR_TYPE_A, true, id, &qlen), buf[4096];
        int client = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        assert_int_equal(sendto(client, q, qlen, 0, (struct sockaddr *)&netd, sizeof(netd)), (ssize_t)qlen);
        serve_one_answer(upstream, rr);
        if (!readable(client, TIMEOUT_MS))
                fail_msg("no answer for %s", name);
        ssize_t k = recv(client, buf, sizeof(buf), 0);
        assert_true(k > 0);
        ldns_pkt *r = parse(buf, (size_t)k);
        int rcode = ldns_pkt_get_rcode(r);
        ldns_pkt_free(r);
        free(q);
        close(client);
        return rcode;
}

static void write_policy_file(const char *text) {
        int fd = open(policy_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        close(fd);
}

/* The envelope sandboxd writes: its never list applies on top of the
 * policy (and is replaced by the next reload: a host address added later
 * is pushed that way), and every pin carries the envelope's generation so
 * sandboxd can refuse pins judged under a policy it replaced. */
static void test_netd_envelope_never_list_and_generation_follow_each_reload(void **state) {
        int pipefd[2];
        uint16_t up_port;
        char line[512], ready_ip[32];
        unsigned port = 0, uid = 0;
        snprintf(policy_path, sizeof(policy_path), "/tmp/test-dns-policy-XXXXXX"); /* mkstemp filled it before */
        int tmp = mkstemp(policy_path);
        assert_true(tmp >= 0);
        close(tmp);
        write_policy_file("{\"networkPolicy\":{\"allow\":[\"*.example.com\"]},\"never\":[],\"generation\":7}");
        int upstream = udp_socket_on_loopback(&up_port);
        assert_int_equal(pipe2(pipefd, O_CLOEXEC), 0);
        netd_pid = spawn_netd(up_port, pipefd[1]);
        read_line(pipefd[0], line, sizeof(line));
        assert_int_equal(sscanf(line, "{\"ready\":true,\"listen\":\"%31[0-9.]:%u\",\"uid\":%u}", ready_ip, &port, &uid),
                         3);
        assert_int_equal(resolve_through(upstream, (uint16_t)port, "www.example.com",
                                         "www.example.com. 60 IN A 93.184.216.34", 0x4001), LDNS_RCODE_NOERROR);
        read_line(pipefd[0], line, sizeof(line));
        assert_string_equal(line, "{\"pin\":\"93.184.216.34\",\"ttl\":60,\"name\":\"www.example.com\",\"generation\":7}\n");
        /* The host gained 93.184.216.34: the next reload says so. */
        write_policy_file("{\"networkPolicy\":{\"allow\":[\"*.example.com\"]},\"never\":[\"93.184.216.34/32\"],"
                          "\"generation\":8}");
        assert_int_equal(kill(netd_pid, SIGHUP), 0);
        read_line(pipefd[0], line, sizeof(line));
        assert_non_null(strstr(line, "\"reloaded\":true"));
        assert_non_null(strstr(line, "\"generation\":8"));
        assert_int_equal(resolve_through(upstream, (uint16_t)port, "www.example.com",
                                         "www.example.com. 60 IN A 93.184.216.34", 0x4002), LDNS_RCODE_REFUSED);
        read_line(pipefd[0], line, sizeof(line));
        if (!strstr(line, "\"deny\":\"www.example.com\"") || !strstr(line, "\"layer\":\"never\""))
                fail_msg("want a denial by the never list, got %s", line);
        assert_int_equal(resolve_through(upstream, (uint16_t)port, "ok.example.com",
                                         "ok.example.com. 60 IN A 93.184.216.35", 0x4003), LDNS_RCODE_NOERROR);
        read_line(pipefd[0], line, sizeof(line));
        assert_string_equal(line, "{\"pin\":\"93.184.216.35\",\"ttl\":60,\"name\":\"ok.example.com\",\"generation\":8}\n");
        /* An envelope that does not parse changes nothing. */
        write_policy_file("{\"networkPolicy\":{\"allow\":[\"*.example.com\"]},\"never\":[\"nope\"],\"generation\":9}");
        assert_int_equal(kill(netd_pid, SIGHUP), 0);
        read_line(pipefd[0], line, sizeof(line));
        assert_non_null(strstr(line, "\"reloaded\":false"));
        close(upstream);
        close(pipefd[0]);
        close(pipefd[1]);
}

static int netd_teardown(void **state) {
        if (netd_pid > 0) {
                kill(netd_pid, SIGKILL);
                waitpid(netd_pid, NULL, 0);
                netd_pid = -1;
        }
        unlink(policy_path);
        return 0;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_allowed_name_is_forwarded_with_a_fresh_id),
                cmocka_unit_test(test_denied_name_gets_nxdomain_with_blocked_ede_naming_it),
                cmocka_unit_test(test_deny_all_denies_every_name),
                cmocka_unit_test(test_trailing_dot_and_upper_case_are_normalised_and_sent_upstream_in_lower_case),
                cmocka_unit_test(test_ip_literal_question_is_judged_as_an_address),
                cmocka_unit_test(test_query_types_outside_the_forwarded_set_stay_local),
                cmocka_unit_test(test_reply_without_edns_carries_no_opt_record),
                cmocka_unit_test(test_truncated_header_gets_formerr),
                cmocka_unit_test(test_compression_loop_gets_formerr),
                cmocka_unit_test(test_mutated_packets_never_crash),
                cmocka_unit_test(test_answer_with_a_forbidden_address_is_refused_whole),
                cmocka_unit_test(test_subnets_deny_refuses_an_allowed_name),
                cmocka_unit_test(test_allowed_answer_is_pinned_with_ttl_floor_and_released),
                cmocka_unit_test(test_answer_not_matching_the_query_is_ignored),
                cmocka_unit_test(test_policy_change_in_flight_denies_the_answer),
                cmocka_unit_test(test_answer_too_big_for_udp_is_truncated_without_pins),
                cmocka_unit_test(test_upstream_failure_gives_servfail),
                cmocka_unit_test_teardown(test_netd_pins_before_it_releases_the_answer, netd_teardown),
                cmocka_unit_test_teardown(test_netd_envelope_never_list_and_generation_follow_each_reload,
                                          netd_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
