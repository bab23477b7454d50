/* Logging. Library code (libcore/, policy/) logs at debug only; programs
 * (sandboxd, sandbox-init) log at any level and return in one statement:
 *     return log_error_errno(r, "create sandbox '%s': %m", name);
 * Output goes to stderr with a syslog-style "<N>" prefix so journald keeps
 * the level. SANDBOXD_DEBUG=1 in the environment enables debug lines. */
#pragma once

#include <syslog.h>
#include "libcore/macro.h"

void log_set_ident(const char *ident);
void log_set_max_level(int level);
int log_internal(int level, int error, const char *fmt, ...) _printf_(3, 4);

#define log_debug(...) log_internal(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_internal(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_internal(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_internal(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_internal(LOG_ERR, 0, __VA_ARGS__)
/* The _errno variants set errno from the negative `error` so %m prints it,
 * and return `error` (always negative). */
#define log_debug_errno(e, ...) log_internal(LOG_DEBUG, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_internal(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...) log_internal(LOG_ERR, (e), __VA_ARGS__)
