/* Text hygiene (text.h): the UTF-8 decoder both checks share, validation
 * of client input, and escaping of untrusted text for the log. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sandboxd/text.h"

/* Length (1-4) of the well-formed UTF-8 sequence at p[0..n), storing its
 * code point in *ret_cp, or 0 when it is ill-formed. The second-byte ranges
 * are RFC 3629 §4's table: they rule out overlong forms (E0 80..9F,
 * F0 80..8F), surrogates (ED A0..BF) and code points past U+10FFFF
 * (F4 90.., F5..FF). */
static size_t utf8_seq(const unsigned char *p, size_t n, uint32_t *ret_cp) {
        unsigned char b = p[0];
        size_t len;
        unsigned char lo = 0x80, hi = 0xBF;
        uint32_t cp;
        if (b < 0x80) {
                *ret_cp = b;
                return 1;
        }
        if (b >= 0xC2 && b <= 0xDF)
                len = 2, cp = b & 0x1F;
        else if (b >= 0xE0 && b <= 0xEF) {
                len = 3, cp = b & 0x0F;
                if (b == 0xE0)
                        lo = 0xA0;
                else if (b == 0xED)
                        hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
                len = 4, cp = b & 0x07;
                if (b == 0xF0)
                        lo = 0x90;
                else if (b == 0xF4)
                        hi = 0x8F;
        } else
                return 0;  /* 80..C1 (continuation, overlong 2-byte lead), F5..FF */
        if (n < len)
                return 0;
        for (size_t i = 1; i < len; i++) {
                unsigned char c = p[i];
                if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF))
                        return 0;
                cp = (cp << 6) | (c & 0x3F);
        }
        *ret_cp = cp;
        return len;
}

bool text_utf8_valid(const char *s, size_t len, size_t *ret_bad_offset) {
        const unsigned char *p = (const unsigned char *) s;
        size_t i = 0;
        while (i < len) {
                /* ASCII runs dominate JSON (base64 contents are nothing
                 * else): skip them eight bytes at a time. */
                if (p[i] < 0x80) {
                        i++;
                        while (i + 8 <= len) {
                                uint64_t w;
                                memcpy(&w, p + i, 8);
                                if (w & 0x8080808080808080ull)
                                        break;
                                i += 8;
                        }
                        continue;
                }
                uint32_t cp;
                size_t n = utf8_seq(p + i, len - i, &cp);
                if (n == 0) {
                        if (ret_bad_offset)
                                *ret_bad_offset = i;
                        return false;
                }
                i += n;
        }
        return true;
}

char *text_utf8_repair(const char *s, size_t len) {
        const unsigned char *p = (const unsigned char *) s;
        /* Worst case: every byte becomes the 3-byte replacement. */
        char *out = malloc(len * 3 + 1);
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < len;) {
                uint32_t cp;
                size_t n = utf8_seq(p + i, len - i, &cp);
                if (n == 0) {
                        memcpy(out + o, "\xEF\xBF\xBD", 3);
                        o += 3;
                        i++;
                        continue;
                }
                memcpy(out + o, p + i, n);
                o += n;
                i += n;
        }
        out[o] = '\0';
        return out;
}

char *text_for_log(const char *s, char *buf, size_t size) {
        if (!s)
                s = "(null)";
        const unsigned char *p = (const unsigned char *) s;
        size_t len = strnlen(s, TEXT_LOG_MAX + 1), o = 0, i = 0;
        bool cut = len > TEXT_LOG_MAX;
        if (cut)
                len = TEXT_LOG_MAX;
        /* Room for the longest piece (4 bytes) plus "..." and the NUL. */
        while (i < len) {
                if (o + 4 + 4 > size) {
                        cut = true;
                        break;
                }
                uint32_t cp = 0;
                size_t n = utf8_seq(p + i, len - i, &cp);
                if (n == 1 && cp >= 0x20 && cp != 0x7F && cp != '\\')
                        buf[o++] = (char) p[i];
                else if (n == 1 && cp == '\\')
                        buf[o++] = '\\', buf[o++] = '\\';
                else if (n > 1 && !(cp >= 0x80 && cp <= 0x9F)) {
                        memcpy(buf + o, p + i, n);
                        o += n;
                } else {
                        /* A control character, or one byte of something
                         * ill-formed (the next byte gets its own look). */
                        snprintf(buf + o, size - o, "\\x%02x", p[i]);
                        o += 4;
                        n = 1;
                }
                i += n;
        }
        if (cut) {
                memcpy(buf + o, "...", 3);
                o += 3;
        }
        buf[o] = '\0';
        return buf;
}

char *text_quote(const char *s, char buf[TEXT_QUOTE_BUF]) {
        const unsigned char *p = (const unsigned char *)(s ? s : "");
        size_t len = strlen((const char *)p), o = 0, chars = 0;
        while (o < len && chars < TEXT_QUOTE_MAX) {
                uint32_t cp;
                size_t n = utf8_seq(p + o, len - o, &cp);
                o += n ? n : 1;
                chars++;
        }
        memcpy(buf, p, o);
        if (o < len)
                snprintf(buf + o, TEXT_QUOTE_BUF - o, "...(%zu bytes)", len);
        else
                buf[o] = '\0';
        return buf;
}
