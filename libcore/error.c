/* sb_error: the message/reason/field error object (see error.h). */
#include <stdio.h>
#include <string.h>
#include "libcore/error.h"

int sb_error_setv(sb_error **ret_err, int code, const char *reason, const char *field,
                  const char *fmt, va_list ap) {
        if (code >= 0)
                code = -EIO;
        if (!ret_err || *ret_err)
                return code;
        sb_error *e = calloc(1, sizeof(*e));
        if (!e)
                return code;
        e->code = code;
        if (vasprintf(&e->message, fmt, ap) < 0)
                e->message = NULL;
        if (!e->message)
                e->message = strdup(strerror(-code));
        e->reason = reason ? strdup(reason) : NULL;
        e->field = field ? strdup(field) : NULL;
        *ret_err = e;
        return code;
}

int sb_error_set(sb_error **ret_err, int code, const char *reason, const char *field,
                 const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = sb_error_setv(ret_err, code, reason, field, fmt, ap);
        va_end(ap);
        return r;
}

int sb_error_prefix(sb_error **err, const char *fmt, ...) {
        if (!err || !*err)
                return -EIO;
        char *ctx = NULL, *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&ctx, fmt, ap);
        va_end(ap);
        if (r >= 0 && asprintf(&msg, "%s: %s", ctx, (*err)->message) >= 0) {
                free((*err)->message);
                (*err)->message = msg;
        }
        free(ctx);
        return (*err)->code;
}

void sb_error_default_reason(sb_error **err, const char *reason) {
        if (err && *err && !(*err)->reason)
                (*err)->reason = strdup(reason);
}

void sb_error_free(sb_error *e) {
        if (!e)
                return;
        free(e->reason);
        free(e->field);
        free(e->message);
        free(e);
}
