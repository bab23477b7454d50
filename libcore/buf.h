/* A growing NUL-terminated buffer of bytes, filled piece by piece as a
 * parser hands them over (http_parser's callbacks: a URL, a header, a
 * body). Header-only because sandboxd-e2b links no libcore object (as
 * base64.h for cli/). */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Appends the n bytes at `at` (NULs allowed) to *buf, which holds *len
 * bytes (NULL when none yet, malloc'd otherwise; the caller frees it),
 * and keeps a NUL after them: *buf may move, *len grows by n. Returns 0,
 * or -ENOMEM with *buf and *len as they were. */
static inline int core_buf_append(char **buf, size_t *len, const char *at, size_t n) {
        char *p = realloc(*buf, *len + n + 1);
        if (!p)
                return -ENOMEM;
        memcpy(p + *len, at, n);
        *len += n;
        p[*len] = 0;
        *buf = p;
        return 0;
}
