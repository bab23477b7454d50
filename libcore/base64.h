/* Base64 (RFC 4648 §4, standard alphabet, padded), table-driven, shared by
 * libcore and the client library so that neither pulls in OpenSSL for it:
 * sandbox-init stays small (libcrypto's relocated data alone is ~400 KiB per
 * process) and sandboxctl starts fast. glibc's b64_pton is not used: it
 * looks each character up with strchr, some 50 MB/s, too slow for
 * directory copies. Header-only because cli/ links no libcore object. */
#pragma once

#include <errno.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char base64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Returns a malloc'd NUL-terminated encoding (caller frees), or NULL on
 * ENOMEM or a length past SIZE_MAX / 2. Table-driven: directory copies move
 * hundreds of MB/s through it. */
static inline char *base64_encode(const void *data, size_t len) {
        if (len > SIZE_MAX / 2)
                return NULL;
        size_t out = 4 * ((len + 2) / 3) + 1;
        char *s = malloc(out), *w = s;
        if (!s)
                return NULL;
        const unsigned char *p = data;
        size_t i = 0;
        for (; i + 3 <= len; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
                *w++ = base64_alphabet[v >> 18];
                *w++ = base64_alphabet[(v >> 12) & 63];
                *w++ = base64_alphabet[(v >> 6) & 63];
                *w++ = base64_alphabet[v & 63];
        }
        if (i < len) {
                uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
                *w++ = base64_alphabet[v >> 18];
                *w++ = base64_alphabet[(v >> 12) & 63];
                *w++ = i + 1 < len ? base64_alphabet[(v >> 6) & 63] : '=';
                *w++ = '=';
        }
        *w = 0;
        return s;
}

/* Strict decoding: only the alphabet, padding only at the end (one or two
 * '='), length a multiple of 4, no whitespace. On success stores a malloc'd
 * buffer (NUL-terminated for convenience, the NUL not counted) and its
 * length in bytes; -EINVAL on malformed input, -ENOMEM. */
static inline int base64_decode(const char *text, void **ret_data, size_t *ret_len) {
        static signed char table[256];
        static bool ready;
        if (!ready) { /* idempotent, so a race between threads is harmless */
                memset(table, -1, sizeof(table));
                for (int k = 0; k < 64; k++)
                        table[(unsigned char)base64_alphabet[k]] = (signed char)k;
                ready = true;
        }
        size_t n = strlen(text);
        if (n % 4 != 0)
                return -EINVAL;
        size_t pad = n >= 1 && text[n - 1] == '=' ? (n >= 2 && text[n - 2] == '=' ? 2 : 1) : 0;
        unsigned char *buf = malloc(n / 4 * 3 + 1), *w = buf;
        if (!buf)
                return -ENOMEM;
        const unsigned char *t = (const unsigned char *)text;
        size_t body = n - pad;
        size_t i = 0;
        int bad = 0;
        for (; i + 4 <= body; i += 4) {
                int a = table[t[i]], b = table[t[i + 1]], c = table[t[i + 2]], d = table[t[i + 3]];
                bad |= a | b | c | d;
                uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
                *w++ = (unsigned char)(v >> 16);
                *w++ = (unsigned char)(v >> 8);
                *w++ = (unsigned char)v;
        }
        if (pad) {
                int a = table[t[i]], b = table[t[i + 1]], c = pad == 1 ? table[t[i + 2]] : 0;
                bad |= a | b | c;
                uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6;
                *w++ = (unsigned char)(v >> 16);
                if (pad == 1)
                        *w++ = (unsigned char)(v >> 8);
                /* Non-canonical forms (bits set in the padding) are refused,
                 * as b64_pton did. */
                if ((pad == 2 && (b & 15)) || (pad == 1 && (c & 3)))
                        bad = -1;
        }
        if (bad < 0) {
                free(buf);
                return -EINVAL;
        }
        *w = 0;
        *ret_data = buf;
        *ret_len = (size_t)(w - buf);
        return 0;
}
