/* stderr logger with syslog level prefixes (see log.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "libcore/log.h"

static const char *log_ident = "sandboxd";
static int log_max_level = -1;

void log_set_ident(const char *ident) { log_ident = ident; }
void log_set_max_level(int level) { log_max_level = level; }

int log_internal(int level, int error, const char *fmt, ...) {
        if (log_max_level < 0) {
                const char *d = getenv("SANDBOXD_DEBUG");
                log_max_level = d && *d && strcmp(d, "0") ? LOG_DEBUG : LOG_INFO;
        }
        int saved = errno;
        if (error < 0)
                errno = -error;
        if (level <= log_max_level) {
                char buf[2048];
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(buf, sizeof(buf), fmt, ap);
                va_end(ap);
                fprintf(stderr, "<%d>%s: %s\n", level, log_ident, buf);
        }
        errno = saved;
        return error < 0 ? error : -EIO;
}
