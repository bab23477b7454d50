/* Text hygiene for strings that cross a trust boundary: UTF-8 validation
 * (RFC 3629) for what clients send, and escaping for what the daemon logs
 * when the text came from a client or from inside a sandbox. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Longest text text_for_log() keeps before it cuts (bytes of input). */
#define TEXT_LOG_MAX 512

/* True when s[0..len) is well-formed UTF-8 per RFC 3629 §4: no overlong
 * forms (C0 80 for NUL), no surrogates (ED A0 80..ED BF BF), nothing past
 * U+10FFFF, no stray continuation or truncated sequence. On false,
 * *ret_bad_offset (if given) is the offset of the first byte of the first
 * ill-formed sequence. */
bool text_utf8_valid(const char *s, size_t len, size_t *ret_bad_offset);

/* A malloc'd copy of s[0..len) (NUL-terminated; caller frees) with each
 * byte that is not part of a well-formed UTF-8 sequence replaced by U+FFFD,
 * the Unicode "maximal subpart" practice; NULL on ENOMEM. For text the daemon
 * relays but does not own (file names and messages from inside a sandbox),
 * so every line it sends stays valid for strict JSON clients. */
char *text_utf8_repair(const char *s, size_t len);

/* Makes `s` (NULL allowed: "(null)") safe for one log line in `buf` of
 * `size` bytes and returns buf: control characters (C0 incl. \n \r ESC,
 * DEL, and the C1 range U+0080..U+009F, which some terminals act on), bytes
 * that are not well-formed UTF-8, and the backslash itself become \xNN
 * (backslash "\\"), so a forged "<0>" level prefix or escape sequence from a
 * sandbox can never start a line or reach a terminal. Input past
 * TEXT_LOG_MAX bytes, or what does not fit in buf, is cut and marked with
 * "...". `size` must be at least 8. */
char *text_for_log(const char *s, char *buf, size_t size);

/* A buffer for text_for_log() that holds any escaped TEXT_LOG_MAX input. */
#define TEXT_LOG_BUF (TEXT_LOG_MAX * 4 + 8)

/* Characters of client input text_quote() keeps. */
#define TEXT_QUOTE_MAX 64
/* A buffer for text_quote(): 64 characters of up to 4 bytes, the marker. */
#define TEXT_QUOTE_BUF (TEXT_QUOTE_MAX * 4 + 32)

/* Input as quoted in a message: `s` (NULL: "") cut after TEXT_QUOTE_MAX
 * characters (UTF-8 code points; an ill-formed byte counts as one) and
 * marked "...(N bytes)" when cut, written to `buf` (TEXT_QUOTE_BUF bytes)
 * and returned. Every message that echoes a client's value uses it, so an
 * answer never carries back more than a few hundred bytes of input. */
char *text_quote(const char *s, char buf[TEXT_QUOTE_BUF]);

/* text_quote() into a buffer that lives until the end of the enclosing
 * block: for an argument of a message format. */
#define TEXT_Q(s) text_quote((s), (char[TEXT_QUOTE_BUF]){0})
