/* networkPolicy parser (policy/policy.c): any JSON text either parses or is
 * refused with an error; a parsed policy printed (pol_policy_to_json, not
 * redacted) parses again, and prints the same a second time (the print is
 * a fixed point: nothing is lost or changed by a round trip), and the
 * re-parsed policy judges a set of destinations exactly as the first. */
#include <cjson/cJSON.h>
#include "fuzz.h"
#include "libcore/error.h"
#include "policy/match.h"
#include "policy/policy.h"

/* Destinations of every kind the policy layers decide on. */
static const struct {
        const char *host;
        uint16_t port;
} probes[] = {
        { "api.example.com", 443 }, { "api.example.com", 80 }, { "www.github.com", 443 }, { "a.b.c.test", 0 },
        { "example.com", 22 }, { "203.0.113.7", 443 }, { "198.51.100.1", 80 }, { "10.0.0.1", 443 },
        { "2001:db8::1", 443 }, { "8.8.8.8", 53 }, { "api.test", 443 }, { "svc.test", 8443 },
};

static void same_verdicts(const pol_policy *p, const pol_policy *q) {
        for (size_t i = 0; i < sizeof(probes) / sizeof(probes[0]); i++) {
                pol_verdict a, b;
                bool x = pol_check(p, probes[i].host, probes[i].port, NULL, 0, &a);
                bool y = pol_check(q, probes[i].host, probes[i].port, NULL, 0, &b);
                if (x != y || a.layer != b.layer || a.rule != b.rule)
                        fprintf(stderr, "%s:%u: %d/%d/%d before, %d/%d/%d after the round trip\n", probes[i].host,
                                probes[i].port, x, a.layer, a.rule, y, b.layer, b.rule);
                FUZZ_ASSERT(x == y && a.layer == b.layer && a.rule == b.rule);
        }
}

static char *print_policy(const pol_policy *p) {
        cJSON *j = pol_policy_to_json(p, false);
        FUZZ_ASSERT(j);
        char *text = cJSON_PrintUnformatted(j);
        FUZZ_ASSERT(text);
        cJSON_Delete(j);
        return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        cJSON *j = cJSON_ParseWithLength((const char *)data, size);
        if (!j)
                return 0;
        pol_policy *p = NULL;
        sb_error *err = NULL;
        int r = pol_policy_parse(j, &p, &err);
        cJSON_Delete(j);
        if (r < 0) {
                FUZZ_ASSERT(!p);
                FUZZ_ASSERT(err && err->message && err->message[0]);
                sb_error_free(err);
                return 0;
        }
        FUZZ_ASSERT(p && !err);
        char *first = print_policy(p);
        cJSON *again = cJSON_Parse(first);
        FUZZ_ASSERT(again);
        pol_policy *q = NULL;
        r = pol_policy_parse(again, &q, &err);
        if (r < 0)
                fprintf(stderr, "re-parse of %s: %s\n", first, err ? err->message : "?");
        FUZZ_ASSERT(r == 0 && q);
        cJSON_Delete(again);
        same_verdicts(p, q);
        char *second = print_policy(q);
        if (strcmp(first, second) != 0)
                fprintf(stderr, "first:  %s\nsecond: %s\n", first, second);
        FUZZ_ASSERT(strcmp(first, second) == 0);
        free(first);
        free(second);
        pol_policy_free(p);
        pol_policy_free(q);
        return 0;
}
