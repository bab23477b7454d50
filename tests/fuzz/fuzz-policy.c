/* networkPolicy parser (policy/policy.c): any JSON text either parses or is
 * refused with an error; a parsed policy printed (pol_policy_to_json, not
 * redacted) parses again, and prints the same a second time (the print is
 * a fixed point: nothing is lost or changed by a round trip). */
#include <cjson/cJSON.h>
#include "fuzz.h"
#include "libcore/error.h"
#include "policy/policy.h"

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
