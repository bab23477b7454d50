/* HTTP request head parsing in the egress proxy (pol_http_parse_head,
 * policy/http.c). Invariants: the head is complete (0) only within the
 * bytes given, with a method of letters and a target; a parse that needs
 * more bytes (-EAGAIN) gives the same verdict as a parse of a prefix, so
 * feeding the bytes in two pieces decides the same as feeding them at once. */
#include <errno.h>
#include "fuzz.h"
#include "policy/proxy.h"

static int parse(const uint8_t *buf, size_t n, char method[32], char **target, char **host, size_t *head_len) {
        *target = *host = NULL;
        *head_len = 0;
        int r = pol_http_parse_head(buf, n, method, target, host, head_len);
        if (r == 0) {
                FUZZ_ASSERT(*head_len > 0 && *head_len <= n);
                FUZZ_ASSERT(method[0] && strlen(method) < 32);
                FUZZ_ASSERT(*target && (*target)[0]);
        }
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char method[32], *target, *host;
        size_t head_len;
        int r = parse(data, size, method, &target, &host, &head_len);
        if (r == 0) {
                /* The same head alone, without what follows it: same answer. */
                char m2[32], *t2, *h2;
                size_t l2;
                FUZZ_ASSERT(parse(data, head_len, m2, &t2, &h2, &l2) == 0);
                FUZZ_ASSERT(l2 == head_len && strcmp(m2, method) == 0 && strcmp(t2, target) == 0);
                FUZZ_ASSERT((!host && !h2) || (host && h2 && strcmp(host, h2) == 0));
                free(t2);
                free(h2);
                /* Any strict prefix of a complete head is incomplete or refused, never complete. */
                if (head_len > 1) {
                        int rp = parse(data, head_len - 1, m2, &t2, &h2, &l2);
                        FUZZ_ASSERT(rp != 0);
                        free(t2);
                        free(h2);
                }
        }
        free(target);
        free(host);
        return 0;
}
