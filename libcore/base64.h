/* Base64 (RFC 4648 §4, standard alphabet, padded) on glibc's libresolv
 * (b64_ntop / b64_pton), shared by libcore and the client library so that
 * neither pulls in OpenSSL for it: sandbox-init stays small (libcrypto's
 * relocated data alone is ~400 KiB per process) and sandboxctl starts fast.
 * Header-only because cli/ links no libcore object. Link with -lresolv. */
#pragma once

#include <errno.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Returns a malloc'd NUL-terminated encoding (caller frees), or NULL on
 * ENOMEM or a length past SIZE_MAX / 2. */
static inline char *base64_encode(const void *data, size_t len) {
        if (len > SIZE_MAX / 2)
                return NULL;
        size_t out = 4 * ((len + 2) / 3) + 1;
        char *s = malloc(out);
        if (!s)
                return NULL;
        if (b64_ntop(data, len, s, out) < 0) {
                free(s);
                return NULL;
        }
        return s;
}

/* Strict decoding: only the alphabet, padding only at the end, length a
 * multiple of 4 (b64_pton alone would skip whitespace). On success stores a
 * malloc'd buffer (NUL-terminated for convenience, the NUL not counted) and
 * its length in bytes; -EINVAL on malformed input, -ENOMEM. */
static inline int base64_decode(const char *text, void **ret_data, size_t *ret_len) {
        size_t n = strlen(text);
        if (n % 4 != 0)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                char c = text[i];
                bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                          c == '+' || c == '/' || (c == '=' && i >= n - 2);
                if (!ok || (c != '=' && i > 0 && text[i - 1] == '='))
                        return -EINVAL;
        }
        unsigned char *buf = malloc(n / 4 * 3 + 1);
        if (!buf)
                return -ENOMEM;
        int r = n ? b64_pton(text, buf, n / 4 * 3 + 1) : 0;
        if (r < 0) {
                free(buf);
                return -EINVAL;
        }
        buf[r] = 0;
        *ret_data = buf;
        *ret_len = (size_t)r;
        return 0;
}
