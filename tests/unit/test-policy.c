/* Unit tests for policy/policy.c: parsing and validation of networkPolicy
 * with exact field paths in errors, fail-closed behaviour, header and
 * forwardURL rules, PCRE2 regex errors and limits, and redaction when the
 * policy is printed back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "policy/policy.h"

/* Parses `text`; returns the policy or NULL and then stores the error. */
static pol_policy *parse(const char *text, sb_error **err) {
        cJSON *j = cJSON_Parse(text);
        pol_policy *p = NULL;
        if (!j)
                fail_msg("test JSON does not parse: %s", text);
        int r = pol_policy_parse(j, &p, err);
        cJSON_Delete(j);
        if (r < 0) {
                assert_null(p);
                assert_non_null(*err);
                assert_int_equal((*err)->code, r);
                assert_string_equal((*err)->reason, "invalid_policy");
        } else
                assert_null(*err);
        return p;
}

static void test_string_policies_and_default(void **state) {
        sb_error *err = NULL;
        pol_policy *p = parse("\"allow-all\"", &err);
        assert_int_equal(p->mode, POL_MODE_ALLOW_ALL);
        pol_policy_free(p);
        p = parse("\"deny-all\"", &err);
        assert_int_equal(p->mode, POL_MODE_DENY_ALL);
        pol_policy_free(p);
        p = parse("null", &err);
        assert_int_equal(p->mode, POL_MODE_ALLOW_ALL);
        pol_policy_free(p);
        assert_int_equal(pol_policy_parse(NULL, &p, &err), 0);
        assert_int_equal(p->mode, POL_MODE_ALLOW_ALL);
        pol_policy_free(p);
}

typedef struct error_case {
        const char *json;
        const char *field;
        const char *message; /* substring of the message, or the whole when it starts with the field */
} error_case;

#define RULES(pattern, rule) "{\"allow\":{\"" pattern "\":[" rule "]}}"
#define TRANSFORM(hdrs) "\"transform\":[{\"headers\":{" hdrs "}}]"
#define FWD(url) RULES("api.example.com", "{\"forwardURL\":\"" url "\"}")
#define FWD_FIELD "networkPolicy.allow[\"api.example.com\"][0].forwardURL"
#define HDR_FIELD(name) "networkPolicy.allow[\"api.example.com\"][0].transform[0].headers[\"" name "\"]"

static const error_case error_cases[] = {
        {"\"allow-most\"", "networkPolicy", "unknown policy \"allow-most\"; use \"allow-all\", \"deny-all\""},
        {"42", "networkPolicy", "must be \"allow-all\", \"deny-all\" or a policy object"},
        {"[]", "networkPolicy", "must be \"allow-all\""},
        {"{\"alow\":[]}", "networkPolicy.alow", "networkPolicy.alow: unknown key; expected \"allow\" or \"subnets\""},
        {"{\"allow\":[],\"allow\":[]}", "networkPolicy.allow", "duplicate key"},
        {"{\"alow\":[]}", "networkPolicy.alow", "did you mean \"allow\"?"},
        {"{\"Subnets\":{}}", "networkPolicy.Subnets", "(keys are case-sensitive); did you mean \"subnets\"?"},
        {"{\"subnets\":{\"allow\":[],\"allow\":[\"10.0.0.0/8\"]}}", "networkPolicy.subnets.allow", "duplicate key"},
        {"{\"allow\":\"example.com\"}", "networkPolicy.allow", "must be an array of domain patterns or an object"},
        {"{\"allow\":[\"www*.com\"]}", "networkPolicy.allow[0]",
         "networkPolicy.allow[0]: \"www*.com\": a wildcard must be a whole label"},
        {"{\"allow\":[\"a.com\",\"a*.example.com\"]}", "networkPolicy.allow[1]", "a wildcard must be a whole label"},
        {"{\"allow\":[\"*.com\"]}", "networkPolicy.allow[0]", "a wildcard over a single label is not allowed"},
        {"{\"allow\":[\"a..com\"]}", "networkPolicy.allow[0]", "empty label"},
        {"{\"allow\":[\"a.com\",3]}", "networkPolicy.allow[1]", "networkPolicy.allow[1]: must be a string"},
        {"{\"allow\":[\"a.com\",\"A.COM.\"]}", "networkPolicy.allow[1]", "duplicate pattern"},
        {"{\"allow\":[\"10.0.0.1\"]}", "networkPolicy.allow[0]", "is an IP address; list it under subnets.allow"},
        {"{\"allow\":{\"*.x\":[]}}", "networkPolicy.allow[\"*.x\"]", "a wildcard over a single label"},
        {"{\"allow\":{\"a.com\":{}}}", "networkPolicy.allow[\"a.com\"]", "must be an array of rules"},
        {"{\"allow\":{\"a\\\"b.com\":[]}}", "networkPolicy.allow[\"a\\\"b.com\"]", "outside letters"},
        {"{\"subnets\":{\"allow\":[\"10.0.0.0/8\",\"1.1.1.1/32\",\"10.0.0.5/8\"]}}", "networkPolicy.subnets.allow[2]",
         "networkPolicy.subnets.allow[2]: 10.0.0.5/8 has host bits set; did you mean 10.0.0.0/8?"},
        {"{\"subnets\":{\"deny\":[\"10.0.0.0/33\"]}}", "networkPolicy.subnets.deny[0]",
         "networkPolicy.subnets.deny[0]: 10.0.0.0/33: the prefix length must be a number from 0 to 32"},
        {"{\"subnets\":{\"deny\":[\"::/129\"]}}", "networkPolicy.subnets.deny[0]", "from 0 to 128"},
        {"{\"subnets\":{\"deny\":[\"fd00::1/8\"]}}", "networkPolicy.subnets.deny[0]", "did you mean fd00::/8?"},
        {"{\"subnets\":{\"allow\":\"10.0.0.0/8\"}}", "networkPolicy.subnets.allow", "must be an array of CIDRs"},
        {"{\"subnets\":{\"permit\":[]}}", "networkPolicy.subnets.permit", "unknown key; expected \"allow\" or \"deny\""},
        {"{\"subnets\":[]}", "networkPolicy.subnets", "must be an object"},
        /* rules */
        {RULES("api.example.com", "{}"), "networkPolicy.allow[\"api.example.com\"][0]",
         "needs exactly one of \"transform\" or \"forwardURL\""},
        {RULES("api.example.com", "{" TRANSFORM("\"a\":\"b\"") ",\"forwardURL\":\"https://x.example.com/\"}"),
         "networkPolicy.allow[\"api.example.com\"][0]", "needs exactly one of"},
        {RULES("api.example.com", "{\"forwardUrl\":\"https://x.example.com/\"}"),
         "networkPolicy.allow[\"api.example.com\"][0].forwardUrl", "did you mean \"forwardURL\"?"},
        {RULES("api.example.com", "3"), "networkPolicy.allow[\"api.example.com\"][0]", "a rule must be an object"},
        {RULES("api.example.com", "{\"transform\":[]}"), "networkPolicy.allow[\"api.example.com\"][0].transform",
         "at least one"},
        {RULES("api.example.com", "{\"transform\":[{\"header\":{}}]}"),
         "networkPolicy.allow[\"api.example.com\"][0].transform[0]", "must be an object {\"headers\""},
        {RULES("api.example.com", "{\"transform\":[{\"headers\":{}}]}"),
         "networkPolicy.allow[\"api.example.com\"][0].transform[0].headers", "non-empty object"},
        /* header names and values (RFC 9110 §5.6.2, §5.5) */
        {RULES("api.example.com", "{" TRANSFORM("\"x-key\":\"a\\r\\nHost: evil\"") "}"), HDR_FIELD("x-key"),
         "contains CR, LF"},
        {RULES("api.example.com", "{" TRANSFORM("\"x-key\":\"a\\nb\"") "}"), HDR_FIELD("x-key"), "CR, LF"},
        {RULES("api.example.com", "{" TRANSFORM("\"x-key\":\"a\\rb\"") "}"), HDR_FIELD("x-key"), "CR, LF"},
        {RULES("api.example.com", "{" TRANSFORM("\"x-key\":\"a\\u0001b\"") "}"), HDR_FIELD("x-key"), "control"},
        {RULES("api.example.com", "{" TRANSFORM("\"x key\":\"v\"") "}"), HDR_FIELD("x key"), "HTTP token"},
        {RULES("api.example.com", "{" TRANSFORM("\"x:y\":\"v\"") "}"), HDR_FIELD("x:y"), "HTTP token"},
        {RULES("api.example.com", "{" TRANSFORM("\"\":\"v\"") "}"), HDR_FIELD(""), "HTTP token"},
        {RULES("api.example.com", "{" TRANSFORM("\"Host\":\"evil.example\"") "}"), HDR_FIELD("Host"),
         "cannot be set"},
        {RULES("api.example.com", "{" TRANSFORM("\"Content-Length\":\"0\"") "}"), HDR_FIELD("Content-Length"),
         "cannot be set"},
        {RULES("api.example.com", "{" TRANSFORM("\"X-A\":\"1\",\"x-a\":\"2\"") "}"), HDR_FIELD("x-a"),
         "duplicate header"},
        {RULES("api.example.com", "{" TRANSFORM("\"x-a\":3") "}"), HDR_FIELD("x-a"), "must be a string"},
        /* forwardURL */
        {FWD("http://proxy.example.com/"), FWD_FIELD, "must use https://"},
        {FWD("ftp://proxy.example.com/"), FWD_FIELD, "must use https://"},
        {FWD("https://proxy.example.com/p?q=1"), FWD_FIELD, "must not have a query or fragment"},
        {FWD("https://proxy.example.com/#top"), FWD_FIELD, "must not have a query or fragment"},
        {FWD("https://user:pw@proxy.example.com/"), FWD_FIELD, "user information"},
        {FWD("https://169.254.169.254/latest"), FWD_FIELD, "is a link-local address"},
        {FWD("https://0x7f.1/"), FWD_FIELD, "127.0.0.1 is a loopback address"},
        {FWD("https://[::ffff:10.0.0.1]/"), FWD_FIELD, "is a private address"},
        {FWD("https://::1/"), FWD_FIELD, "brackets"},
        {FWD("https://localhost/"), FWD_FIELD, "fully qualified"},
        {FWD("https://proxy.example.com:0/"), FWD_FIELD, "port"},
        {FWD("https://proxy.example.com:99999/"), FWD_FIELD, "port"},
        {FWD("https://exa_mple.com/"), FWD_FIELD, "invalid host"},
        {FWD("https:///path"), FWD_FIELD, "invalid host"},
        {FWD("https://proxy.example.com/a b"), FWD_FIELD, "spaces"},
        {RULES("api.example.com", "{\"forwardURL\":7}"), FWD_FIELD, "must be a string"},
        /* match */
        {RULES("api.example.com", "{\"match\":{\"paths\":{}}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.paths", "unknown key"},
        {RULES("api.example.com", "{\"match\":{\"method\":[\"GE T\"]}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.method[0]", "not an HTTP method token"},
        {RULES("api.example.com", "{\"match\":{\"method\":[]}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.method", "at least one method"},
        {RULES("api.example.com", "{\"match\":{\"method\":\"GET\"}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.method", "must be an array"},
        {RULES("api.example.com", "{\"match\":{\"queryString\":[{}]}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.queryString[0]", "\"key\" and/or \"value\""},
        {RULES("api.example.com",
               "{\"match\":{\"headers\":[{\"key\":{\"exact\":\"a\"},\"val\":{}}]}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.headers[0].val", "unknown key"},
        {RULES("api.example.com",
               "{\"match\":{\"path\":{\"exact\":\"/a\",\"regex\":\"/b\"}}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.path", "exactly one of"},
        {RULES("api.example.com", "{\"match\":{\"path\":{\"prefix\":\"/a\"}}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.path.prefix", "unknown key"},
        {RULES("api.example.com", "{\"match\":{\"path\":{\"exact\":1}}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"api.example.com\"][0].match.path.exact", "must be a string"},
        /* PCRE2 compile errors carry the field and PCRE2's own words */
        {RULES("*.x.com", "{\"match\":{\"path\":{\"regex\":\"(\"}}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"*.x.com\"][0].match.path.regex",
         "networkPolicy.allow[\"*.x.com\"][0].match.path.regex: invalid regular expression at offset 1: "
         "missing closing parenthesis"},
        {RULES("*.x.com",
               "{\"match\":{\"queryString\":[{\"value\":{\"regex\":\"a{2,1}\"}}]}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"*.x.com\"][0].match.queryString[0].value.regex", "numbers out of order"},
        {RULES("*.x.com", "{\"match\":{\"path\":{\"regex\":\"\\\\C\"}}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"*.x.com\"][0].match.path.regex", "invalid regular expression"},
        {RULES("*.x.com", "{\"match\":{\"path\":{\"regex\":\"(*UTF)a\"}}," TRANSFORM("\"a\":\"b\"") "}"),
         "networkPolicy.allow[\"*.x.com\"][0].match.path.regex", "invalid regular expression"},
};

static void test_errors_name_the_field_and_the_fix(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(error_cases); i++) {
                const error_case *c = &error_cases[i];
                sb_error *err = NULL;
                pol_policy *p = parse(c->json, &err);
                if (p)
                        fail_msg("case %zu accepted: %s", i, c->json);
                if (!streq(err->field, c->field))
                        fail_msg("case %zu: field %s, want %s (%s)", i, err->field, c->field, err->message);
                if (strncmp(err->message, c->field, strlen(c->field)) != 0 || !strstr(err->message, c->message))
                        fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, err->message, c->message);
                sb_error_free(err);
        }
}

static void test_failed_parse_returns_nothing(void **state) {
        cJSON *j = cJSON_Parse("{\"allow\":[\"ok.example.com\"],\"subnets\":{\"deny\":[\"10.0.0.1/8\"]}}");
        pol_policy *p = (pol_policy *)0x1;
        sb_error *err = NULL;
        assert_int_equal(pol_policy_parse(j, &p, &err), -EINVAL);
        assert_ptr_equal(p, (pol_policy *)0x1); /* untouched */
        assert_string_equal(err->field, "networkPolicy.subnets.deny[0]");
        sb_error_free(err);
        cJSON_Delete(j);
}

#define FULL                                                                                                    \
        "{\"allow\":{\"API.Example.com.\":[{\"match\":{\"path\":{\"startsWith\":\"/v1/\"},\"method\":[\"GET\","  \
        "\"POST\"],\"queryString\":[{\"key\":{\"exact\":\"debug\"}}],\"headers\":[{\"key\":{\"exact\":"         \
        "\"accept\"},\"value\":{\"regex\":\"application/(json|xml)\"}}]},\"transform\":[{\"headers\":{"       \
        "\"Authorization\":\"Bearer s3cr3t-token\",\"x-tab\":\"a\\tb\"}},{\"headers\":{\"x-two\":\"2\"}}]},"   \
        "{\"forwardURL\":\"https://Proxy.Example.com:8443/v1\"}],\"*.cdn.example.net:443\":[],\"*\":[]},"     \
        "\"subnets\":{\"allow\":[\"192.168.7.0/24\",\"2001:db8::/32\"],\"deny\":[\"10.0.0.0/8\"]}}"

static void test_full_policy_parses_into_typed_struct(void **state) {
        sb_error *err = NULL;
        pol_policy *p = parse(FULL, &err);
        assert_non_null(p);
        assert_int_equal(p->mode, POL_MODE_CUSTOM);
        assert_true(p->allow_is_object);
        assert_int_equal(p->n_domains, 3);
        assert_string_equal(p->domains[0].pattern.text, "api.example.com");
        assert_int_equal(p->domains[1].pattern.port, 443);
        assert_true(p->domains[2].pattern.any);
        const pol_rule *r = &p->domains[0].rules[0];
        assert_int_equal(p->domains[0].n_rules, 2);
        assert_int_equal(r->kind, POL_RULE_TRANSFORM);
        assert_int_equal(r->match->n_methods, 2);
        assert_string_equal(r->match->methods[1], "POST");
        assert_int_equal(r->match->path->kind, POL_STR_STARTS_WITH);
        assert_null(r->match->query[0].value);
        assert_int_equal(r->n_transforms, 2);
        assert_string_equal(r->transforms[0].headers[0].value, "Bearer s3cr3t-token");
        r = &p->domains[0].rules[1];
        assert_int_equal(r->kind, POL_RULE_FORWARD);
        assert_string_equal(r->forward_host, "proxy.example.com");
        assert_int_equal(r->forward_port, 8443);
        assert_string_equal(r->forward_path, "/v1");
        assert_int_equal(p->n_subnet_allow, 2);
        assert_int_equal(p->n_subnet_deny, 1);
        pol_policy_free(p);
}

static void test_forward_url_defaults_port_and_path(void **state) {
        sb_error *err = NULL;
        pol_policy *p = parse(FWD("HTTPS://Proxy.Example.COM"), &err);
        const pol_rule *r = &p->domains[0].rules[0];
        assert_string_equal(r->forward_host, "proxy.example.com");
        assert_int_equal(r->forward_port, 443);
        assert_string_equal(r->forward_path, "/");
        pol_policy_free(p);
        p = parse(FWD("https://[2606:4700::1111]:8443/x/y"), &err);
        r = &p->domains[0].rules[0];
        assert_string_equal(r->forward_host, "2606:4700::1111");
        assert_int_equal(r->forward_port, 8443);
        assert_string_equal(r->forward_path, "/x/y");
        pol_policy_free(p);
}

static void test_redaction_hides_every_header_value(void **state) {
        sb_error *err = NULL;
        pol_policy *p = parse(FULL, &err);
        cJSON *red = pol_policy_to_json(p, true), *clear = pol_policy_to_json(p, false);
        char *rs = cJSON_PrintUnformatted(red), *cs = cJSON_PrintUnformatted(clear);
        assert_null(strstr(rs, "s3cr3t"));
        assert_null(strstr(rs, "a\\tb"));
        assert_non_null(strstr(rs, "\"Authorization\":\"<redacted>\""));
        assert_non_null(strstr(rs, "\"x-two\":\"<redacted>\""));
        assert_non_null(strstr(cs, "\"Authorization\":\"Bearer s3cr3t-token\""));
        /* normalised form: lowercase patterns, ports kept, canonical CIDRs */
        assert_non_null(strstr(cs, "\"api.example.com\":"));
        assert_non_null(strstr(cs, "\"*.cdn.example.net:443\":[]"));
        assert_non_null(strstr(cs, "\"deny\":[\"10.0.0.0/8\"]"));
        assert_non_null(strstr(cs, "\"forwardURL\":\"https://Proxy.Example.com:8443/v1\""));
        free(rs);
        free(cs);
        cJSON_Delete(red);
        cJSON_Delete(clear);
        pol_policy_free(p);
}

static void test_printed_policy_parses_back_to_the_same(void **state) {
        static const char *const docs[] = {FULL, "\"deny-all\"", "\"allow-all\"", "{}",
                                           "{\"allow\":[\"a.example.com:80\",\"*.b.example.com\"]}"};
        for (size_t i = 0; i < ELEMENTSOF(docs); i++) {
                sb_error *err = NULL;
                pol_policy *p = parse(docs[i], &err), *q = NULL;
                cJSON *once = pol_policy_to_json(p, false);
                assert_int_equal(pol_policy_parse(once, &q, &err), 0);
                cJSON *twice = pol_policy_to_json(q, false);
                assert_true(cJSON_Compare(once, twice, true));
                cJSON_Delete(once);
                cJSON_Delete(twice);
                pol_policy_free(p);
                pol_policy_free(q);
        }
}

static pol_str_match *first_path_matcher(pol_policy *p) {
        return p->domains[0].rules[0].match->path;
}

static void test_string_matchers(void **state) {
        sb_error *err = NULL;
        pol_policy *p = parse(RULES("api.example.com", "{\"match\":{\"path\":{\"regex\":\"/api/[a-z]+\"}},"
                                                       TRANSFORM("\"a\":\"b\"") "}"),
                              &err);
        const pol_str_match *m = first_path_matcher(p);
        /* a regex must match the whole value, so an unanchored-looking
         * pattern cannot be satisfied by a longer path */
        assert_true(pol_str_match_test(m, "/api/users", 10));
        assert_false(pol_str_match_test(m, "/v1/api/users", 13));
        assert_false(pol_str_match_test(m, "/api/users/1", 12));
        assert_true(pol_str_match_test(m, "/api/usersXX", 10)); /* length bounds the value */
        pol_policy_free(p);
        pol_str_match exact = {.kind = POL_STR_EXACT, .text = (char *)"/a"};
        pol_str_match prefix = {.kind = POL_STR_STARTS_WITH, .text = (char *)"/a"};
        assert_true(pol_str_match_test(&exact, "/a", 2));
        assert_false(pol_str_match_test(&exact, "/ab", 3));
        assert_false(pol_str_match_test(&exact, "/A", 2));
        assert_true(pol_str_match_test(&prefix, "/ab", 3));
        assert_false(pol_str_match_test(&prefix, "/", 1));
}

static void test_catastrophic_regex_hits_limit_and_does_not_match(void **state) {
        sb_error *err = NULL;
        pol_policy *p = parse(RULES("api.example.com", "{\"match\":{\"path\":{\"regex\":\"(a|aa)+(a|aa)+b\"}},"
                                                       TRANSFORM("\"a\":\"b\"") "}"),
                              &err);
        char subject[64];
        /* 'b' present (so PCRE2's required-character shortcut does not
         * apply) but not last: without the match limit this backtracks for
         * far longer than any test run; with it the answer is "no match". */
        memset(subject, 'a', sizeof(subject));
        subject[62] = 'b';
        assert_false(pol_str_match_test(first_path_matcher(p), subject, sizeof(subject)));
        assert_true(pol_str_match_test(first_path_matcher(p), "aab", 3));
        pol_policy_free(p);
}

static void test_header_token_and_value_rules(void **state) {
        assert_true(pol_header_name_is_valid("X-Api-Key"));
        assert_true(pol_header_name_is_valid("a!#$%&'*+-.^_`|~9"));
        assert_false(pol_header_name_is_valid("a b"));
        assert_false(pol_header_name_is_valid("a:b"));
        assert_false(pol_header_name_is_valid("a\"b"));
        assert_false(pol_header_name_is_valid(""));
        assert_true(pol_header_value_is_valid("Bearer abc\tdef é"));
        assert_false(pol_header_value_is_valid("a\r\nb"));
        assert_false(pol_header_value_is_valid("a\nb"));
        assert_false(pol_header_value_is_valid("a\x7f"));
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_string_policies_and_default),
                cmocka_unit_test(test_errors_name_the_field_and_the_fix),
                cmocka_unit_test(test_failed_parse_returns_nothing),
                cmocka_unit_test(test_full_policy_parses_into_typed_struct),
                cmocka_unit_test(test_forward_url_defaults_port_and_path),
                cmocka_unit_test(test_redaction_hides_every_header_value),
                cmocka_unit_test(test_printed_policy_parses_back_to_the_same),
                cmocka_unit_test(test_string_matchers),
                cmocka_unit_test(test_catastrophic_regex_hits_limit_and_does_not_match),
                cmocka_unit_test(test_header_token_and_value_rules),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
