/* Percent-decoding (RFC 3986 §2.1), shared by the egress proxy's request
 * matching (policy/http.c, query parameters) and the E2B gateway's URLs
 * (e2b/http.c). Header-only because sandboxd-e2b links no libcore object
 * (as buf.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* The value of one hexadecimal digit (either case), or -1. */
static inline int core_hexval(int ch) {
        if (ch >= '0' && ch <= '9')
                return ch - '0';
        if (ch >= 'a' && ch <= 'f')
                return ch - 'a' + 10;
        if (ch >= 'A' && ch <= 'F')
                return ch - 'A' + 10;
        return -1;
}

/* Percent-decodes s[0..n) into out, which must hold n + 1 bytes, and
 * NUL-terminates it: "%" and two hex digits of either case is that byte,
 * a "%" not followed by two is kept as it is; with `plus`, '+' decodes to
 * a space (application/x-www-form-urlencoded, WHATWG URL §5.1). Returns
 * the decoded length: a decoded "%00" is a NUL inside it, so a caller
 * that wants a C string compares it with strlen(out). */
static inline size_t core_url_decode(const char *s, size_t n, bool plus, char *out) {
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                int hi, lo;
                if (s[i] == '%' && i + 2 < n && (hi = core_hexval(s[i + 1])) >= 0 &&
                    (lo = core_hexval(s[i + 2])) >= 0) {
                        out[o++] = (char) (hi * 16 + lo);
                        i += 2;
                } else
                        out[o++] = plus && s[i] == '+' ? ' ' : s[i];
        }
        out[o] = 0;
        return o;
}
