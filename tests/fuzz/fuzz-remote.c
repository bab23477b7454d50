/* Client certificate subject to role (sandboxd/remote.c): any bytes either
 * are refused (not a Name, or a Name the rules refuse) or map to exactly one
 * role; a mapped identity is self-consistent (admin has no tag, a tag role
 * has a non-empty key without '=' and a non-empty value, role_text spells
 * the role), its strings hold no control character, and the logged subject
 * is printable ASCII. Mapping the same bytes twice gives the same answer. */
#include <string.h>
#include "fuzz.h"
#include "sandboxd/remote.h"

static void printable(const char *s, bool ascii) {
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                FUZZ_ASSERT(*p >= 0x20 && *p != 0x7f && (!ascii || *p < 0x80));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        remote_identity *id = NULL, *again = NULL;
        const char *reason = NULL, *reason2 = NULL;
        int r = remote_identity_from_der(data, size, &id, &reason);
        int r2 = remote_identity_from_der(data, size, &again, &reason2);
        FUZZ_ASSERT(r == r2);
        if (r < 0) {
                FUZZ_ASSERT(!id && reason && reason2 && strcmp(reason, reason2) == 0);
                return 0;
        }
        FUZZ_ASSERT(id && id->name && id->subject && id->role_text);
        printable(id->name, false);
        printable(id->subject, true);
        printable(id->role_text, false);
        if (id->role == REMOTE_ROLE_ADMIN) {
                FUZZ_ASSERT(!id->tag_key && !id->tag_value && !id->tenant && strcmp(id->role_text, "admin") == 0);
        } else if (id->role == REMOTE_ROLE_TENANT) {
                /* tenant:NAME: NAME never holds ':' (it could pose as uid:N
                 * or tag:K=V, sandboxd/tenant.h). */
                FUZZ_ASSERT(!id->tag_key && id->tenant && id->tenant[0] && !strchr(id->tenant, ':'));
                char want[600];
                snprintf(want, sizeof(want), "tenant:%s", id->tenant);
                FUZZ_ASSERT(strcmp(id->role_text, want) == 0);
        } else {
                FUZZ_ASSERT(id->role == REMOTE_ROLE_TAG && id->tag_key && id->tag_value);
                FUZZ_ASSERT(id->tag_key[0] && !strchr(id->tag_key, '=') && id->tag_value[0]);
                char want[600];
                snprintf(want, sizeof(want), "tag:%s=%s", id->tag_key, id->tag_value);
                FUZZ_ASSERT(strcmp(id->role_text, want) == 0);
                FUZZ_ASSERT(id->tenant && strcmp(id->tenant, id->role_text) == 0);
        }
        FUZZ_ASSERT(again && again->role == id->role && strcmp(again->subject, id->subject) == 0);
        remote_identity_free(id);
        remote_identity_free(again);
        return 0;
}
