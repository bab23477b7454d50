/* The progress of a slow create on a terminal: sandboxctl create asks the
 * daemon for sandbox.progress notifications (docs/API.md, sandbox.create
 * "progress") and shows the latest as one line on standard error,
 * rewritten in place and cleared before the answer is printed. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

typedef struct progress_line {
        bool drawn;  /* a line is on the terminal, to be cleared */
} progress_line;

/* "1.2 MiB": binary units, one decimal from KiB up. */
static void format_bytes(char *buf, size_t size, double n) {
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        size_t u = 0;
        while (n >= 1024 && u + 1 < ELEMENTSOF(units)) {
                n /= 1024;
                u++;
        }
        snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", n, units[u]);
}

static double number(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) && v->valuedouble >= 0 ? v->valuedouble : -1;
}

static void on_notification(const client_msg *msg, void *userdata) {
        progress_line *l = userdata;
        if (!msg->method || strcmp(msg->method, "sandbox.progress") != 0 || !cJSON_IsObject(msg->params))
                return;
        const char *stage = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg->params, "stage"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg->params, "name"));
        if (!stage || !name)
                return;
        double bytes = number(msg->params, "bytes"), total = number(msg->params, "totalBytes");
        double objects = number(msg->params, "objects"), total_objects = number(msg->params, "totalObjects");
        char line[256], b[32], t[32];
        int n = snprintf(line, sizeof(line), "%s: %s", name, stage);
        if (bytes > 0 && n >= 0 && (size_t)n < sizeof(line)) {
                format_bytes(b, sizeof(b), bytes);
                if (total > 0) {
                        format_bytes(t, sizeof(t), total);
                        n += snprintf(line + n, sizeof(line) - (size_t)n, " %s of %s", b, t);
                } else
                        n += snprintf(line + n, sizeof(line) - (size_t)n, " %s", b);
        }
        if (total_objects > 0 && objects >= 0 && n >= 0 && (size_t)n < sizeof(line))
                snprintf(line + n, sizeof(line) - (size_t)n, "%s %.0f/%.0f %s", bytes > 0 ? "," : "", objects,
                         total_objects, strcmp(stage, "checking out") == 0 ? "files" : "objects");
        /* The terminal's own name and stage texts only: control characters
         * from the daemon are shown escaped, not passed on. */
        fputs("\r\033[K", stderr);
        ctl_fput_escaped(stderr, line);
        fflush(stderr);
        l->drawn = true;
}

bool ctl_progress_wanted(const ctl_globals *g, const cJSON *params) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(params, "source");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "type"));
        return !g->json && type && (strcmp(type, "git") == 0 || strcmp(type, "tarball") == 0) &&
               isatty(STDERR_FILENO);
}

int ctl_call_progress(const ctl_globals *g, const char *context, const char *method, cJSON *params, cJSON **ret) {
        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0) {
                cJSON_Delete(params);
                return r;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(params, "progress");
        cJSON_AddBoolToObject(params, "progress", true);
        progress_line l = {};
        _cleanup_client_error_ client_error *err = NULL;
        r = client_call(c, method, params, -1, on_notification, &l, ret, &err);
        if (l.drawn) {
                fputs("\r\033[K", stderr);
                fflush(stderr);
        }
        return r < 0 ? ctl_report(g, context, err) : 0;
}
