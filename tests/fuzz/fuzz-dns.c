/* DNS query and answer judging (policy/dns.c). The input is a query and an
 * answer: two bytes of query length (big endian), the query, then the
 * answer. The query is judged under an allowlist policy (and, from the
 * second byte's low bit, allow-all); a forwarded query's answer is judged
 * with its ID set to the one the filter chose (an off-path spoofer would
 * have to guess it; the fuzzer need not). Invariants: a reply fits the
 * transport it is for, pins are bounded, a blocked answer pins nothing. */
#include <cjson/cJSON.h>
#include "fuzz.h"
#include "policy/dns.h"
#include "policy/match.h"
#include "policy/policy.h"

static pol_policy *allowlist, *allow_all;
static pol_cidr never[2];

static pol_policy *policy_from(const char *text) {
        cJSON *j = cJSON_Parse(text);
        pol_policy *p = NULL;
        sb_error *err = NULL;
        FUZZ_ASSERT(j && pol_policy_parse(j, &p, &err) == 0);
        cJSON_Delete(j);
        return p;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        allowlist = policy_from("{\"allow\": [\"*.example.com\", \"api.test\", \"svc.test:443\"],"
                                " \"subnets\": {\"allow\": [\"203.0.113.0/24\"], \"deny\": [\"198.51.100.0/24\"]}}");
        allow_all = policy_from("\"allow-all\"");
        char *why = NULL;
        FUZZ_ASSERT(pol_cidr_parse("10.201.0.0/16", &never[0], &why) == 0);
        FUZZ_ASSERT(pol_cidr_parse("fd00:201::/64", &never[1], &why) == 0);
        return 0;
}

static void check_reply(const pol_dns_result *r, bool tcp, size_t max_reply) {
        if (r->action == POL_DNS_REPLY || r->action == POL_DNS_FORWARD)
                FUZZ_ASSERT(r->packet && r->len >= 12);
        if (r->action == POL_DNS_REPLY)
                FUZZ_ASSERT(r->len <= (tcp ? POL_DNS_TCP_MAX : (max_reply ? max_reply : POL_DNS_TCP_MAX)));
        FUZZ_ASSERT(r->n_pins <= POL_DNS_MAX_PINS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 2)
                return 0;
        size_t qlen = ((size_t)data[0] << 8 | data[1]) % (size - 1);
        const uint8_t *query = data + 2, *answer = data + 2 + qlen;
        size_t alen = size - 2 - qlen;
        bool tcp = size & 1;
        const pol_policy *p = (data[1] & 1) ? allow_all : allowlist;

        pol_dns_result q = { 0 };
        if (pol_dns_filter_query(p, never, 2, query, qlen, tcp, &q) < 0)
                return 0;
        check_reply(&q, tcp, 0);
        if (q.action == POL_DNS_FORWARD && alen >= 2) {
                uint8_t *a = malloc(alen);
                FUZZ_ASSERT(a);
                memcpy(a, answer, alen);
                a[0] = (uint8_t)(q.query.upstream_id >> 8);
                a[1] = (uint8_t)q.query.upstream_id;
                pol_dns_result r = { 0 };
                int k = pol_dns_filter_answer(p, never, 2, &q.query, a, alen, &r);
                if (k == 0) {
                        FUZZ_ASSERT(r.action == POL_DNS_REPLY);
                        check_reply(&r, tcp, q.query.max_reply);
                        if (r.blocked)
                                FUZZ_ASSERT(r.n_pins == 0);
                        for (size_t i = 0; i < r.n_pins; i++)
                                FUZZ_ASSERT(r.pins[i].addr.family == 2 || r.pins[i].addr.family == 10);
                }
                pol_dns_result_done(&r);
                pol_dns_result sf = { 0 };
                if (pol_dns_servfail(&q.query, &sf) == 0)
                        check_reply(&sf, tcp, q.query.max_reply);
                pol_dns_result_done(&sf);
                free(a);
        }
        pol_dns_result_done(&q);
        return 0;
}
