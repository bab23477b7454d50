/* The error contract used by every layer.
 *
 * A fallible function returns a negative errno and, where a person will read
 * the failure, also fills an sb_error: a message plus an optional stable
 * reason (the JSON-RPC `data.reason`, e.g. "source_failed") and an optional
 * field path (the JSON-RPC `data.field`, e.g. "source.url"). Callers add
 * context on the way up with sb_error_prefix(). */
#pragma once

#include <stdarg.h>
#include "libcore/macro.h"

typedef struct sb_error {
        int code;        /* negative errno */
        char *reason;    /* stable machine-readable reason, or NULL */
        char *field;     /* offending parameter path, or NULL */
        char *message;   /* human-readable, never NULL */
} sb_error;

/* Fills *ret_err (when ret_err is non-NULL and *ret_err is NULL) with a new
 * error. `code` is a negative errno; `reason` and `field` may be NULL.
 * Returns `code`, so callers can write `return sb_error_set(...)`.
 * The caller owns *ret_err and frees it with sb_error_free(). If *ret_err is
 * already set it is kept (the first, innermost error wins). */
int sb_error_set(sb_error **ret_err, int code, const char *reason, const char *field,
                 const char *fmt, ...) _printf_(5, 6);

/* Like sb_error_set() with a va_list. */
int sb_error_setv(sb_error **ret_err, int code, const char *reason, const char *field,
                  const char *fmt, va_list ap) _printf_(5, 0);

/* Prepends "<context>: " to the message of *err (no-op when err or *err is
 * NULL). Returns the error's code, or -EIO when there is no error object. */
int sb_error_prefix(sb_error **err, const char *fmt, ...) _printf_(2, 3);

/* Sets the reason of *err when it has none yet (no-op when err is NULL). */
void sb_error_default_reason(sb_error **err, const char *reason);

/* Frees an error; accepts NULL. */
void sb_error_free(sb_error *e);
DEFINE_TRIVIAL_CLEANUP_FUNC(sb_error, sb_error_free);
#define _cleanup_error_ _cleanup_(sb_error_freep)
