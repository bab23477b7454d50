/* Argument helpers for sandboxctl (durations, K=V, NAME:PATH, names) and
 * the error → exit code table. Kept apart from main.c so unit tests link
 * them. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcore/macro.h"
#include "cli/parse.h"

/* Units accepted after the digits of a DURATION, in milliseconds. "ms" is
 * listed before "m" only for readability: matching is exact. */
static const struct {
        const char *suffix;
        int64_t ms;
} duration_units[] = {
        { "", 1 },
        { "ms", 1 },
        { "s", 1000 },
        { "m", 60 * 1000 },
        { "h", 60 * 60 * 1000 },
        { "d", 24 * 60 * 60 * 1000 },
};

int cli_parse_duration(const char *s, int64_t *ret_ms) {
        if (!s || !isdigit((unsigned char) s[0]))
                return -EINVAL;
        int64_t value = 0;
        const char *p = s;
        for (; isdigit((unsigned char) *p); p++) {
                int digit = *p - '0';
                if (value > (INT64_MAX - digit) / 10)
                        return -ERANGE;
                value = value * 10 + digit;
        }
        for (size_t i = 0; i < ELEMENTSOF(duration_units); i++) {
                if (!streq(p, duration_units[i].suffix))
                        continue;
                if (value == 0)
                        return -EINVAL;
                if (value > INT64_MAX / duration_units[i].ms)
                        return -ERANGE;
                *ret_ms = value * duration_units[i].ms;
                return 0;
        }
        return -EINVAL;
}

int cli_parse_size_mib(const char *s, int64_t *ret_mib) {
        static const struct { const char *suffix; int64_t mib; } units[] = {
                { "", 1 }, { "M", 1 }, { "MiB", 1 }, { "G", 1024 }, { "GiB", 1024 },
                { "T", 1024 * 1024 }, { "TiB", 1024 * 1024 },
        };
        if (!s || !isdigit((unsigned char) s[0]))
                return -EINVAL;
        int64_t value = 0;
        const char *p = s;
        for (; isdigit((unsigned char) *p); p++) {
                if (value > ((INT64_C(1) << 53) - 9) / 10)
                        return -ERANGE;
                value = value * 10 + (*p - '0');
        }
        for (size_t i = 0; i < ELEMENTSOF(units); i++) {
                if (!streq(p, units[i].suffix))
                        continue;
                if (value == 0)
                        return -EINVAL;
                if (value > (INT64_C(1) << 53) / units[i].mib)
                        return -ERANGE;
                *ret_mib = value * units[i].mib;
                return 0;
        }
        return -EINVAL;
}

int cli_parse_volume_mount(const char *s, cJSON **ret) {
        const char *colon = s ? strchr(s, ':') : NULL;
        if (!colon || colon == s || colon[1] != '/')
                return -EINVAL;
        const char *path = colon + 1;
        size_t plen = strlen(path);
        bool ro = false;
        if (plen > 3 && streq(path + plen - 3, ":ro")) {
                ro = true;
                plen -= 3;
        } else if (strchr(path, ':'))
                return -EINVAL;
        cJSON *o = cJSON_CreateObject();
        char *name = strndup(s, (size_t)(colon - s)), *p = strndup(path, plen);
        if (!o || !name || !p || !cJSON_AddStringToObject(o, "name", name) || !cJSON_AddStringToObject(o, "path", p) ||
            !cJSON_AddBoolToObject(o, "readOnly", ro)) {
                free(name);
                free(p);
                cJSON_Delete(o);
                return -ENOMEM;
        }
        free(name);
        free(p);
        *ret = o;
        return 0;
}

const char *cli_format_duration(int64_t ms, char *buf, size_t size) {
        for (size_t i = ELEMENTSOF(duration_units) - 1; i >= 2; i--)
                if (ms != 0 && ms % duration_units[i].ms == 0) {
                        snprintf(buf, size, "%" PRId64 "%s", ms / duration_units[i].ms,
                                 duration_units[i].suffix);
                        return buf;
                }
        snprintf(buf, size, "%" PRId64 "ms", ms);
        return buf;
}

int cli_parse_kv(const char *s, char **ret_key, char **ret_value) {
        const char *eq = s ? strchr(s, '=') : NULL;
        if (!eq || eq == s)
                return -EINVAL;
        char *copy = strdup(s);
        if (!copy)
                return -ENOMEM;
        copy[eq - s] = 0;
        *ret_key = copy;
        *ret_value = copy + (eq - s) + 1;
        return 0;
}

int cli_kv_add(cJSON *obj, const char *s) {
        char *value;
        _cleanup_free_ char *key = NULL;
        int r = cli_parse_kv(s, &key, &value);
        if (r < 0)
                return r;
        cJSON *v = cJSON_CreateString(value);
        if (!v)
                return -ENOMEM;
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
        if (!cJSON_AddItemToObject(obj, key, v)) {
                cJSON_Delete(v);
                return -ENOMEM;
        }
        return 0;
}

bool cli_valid_name(const char *s) {
        size_t n = strlen(s);
        if (n < 1 || n > 63)
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || (i > 0 && ch == '-');
                if (!ok)
                        return false;
        }
        return true;
}

int cli_parse_remote(const char *s, char **ret_name, char **ret_path) {
        const char *colon = strchr(s, ':');
        if (!colon || colon[1] == 0 || colon - s > 63)
                return 0;
        char name[64];
        memcpy(name, s, (size_t) (colon - s));
        name[colon - s] = 0;
        if (!cli_valid_name(name))
                return 0;
        char *n = strdup(name), *p = strdup(colon + 1);
        if (!n || !p) {
                free(n);
                free(p);
                return -ENOMEM;
        }
        *ret_name = n;
        *ret_path = p;
        return 1;
}

int cli_exit_code(const client_error *e) {
        if (!e)
                return CLI_EXIT_ERROR;
        if (e->code == CLIENT_ERROR_LOCAL)
                return e->reason && streq(e->reason, CLIENT_REASON_DISCONNECTED) ?
                        CLI_EXIT_UNREACHABLE : CLI_EXIT_ERROR;
        if (e->reason) {
                if (streq(e->reason, "invalid_policy"))
                        return CLI_EXIT_POLICY;
                if (streq(e->reason, "not_found"))
                        return CLI_EXIT_NOT_FOUND;
                if (streq(e->reason, "already_exists") || streq(e->reason, "in_use"))
                        return CLI_EXIT_CONFLICT;
        }
        if (e->code == -32602) {
                /* -32602 on the policy itself is still a policy the daemon refused. */
                if (e->field && strncmp(e->field, "networkPolicy", 13) == 0)
                        return CLI_EXIT_POLICY;
                /* snapshot.export refuses to overwrite: a conflict with what
                 * is on disk, not a malformed value. */
                if (e->field && streq(e->field, "path") && e->message && strstr(e->message, " exists"))
                        return CLI_EXIT_CONFLICT;
                /* Any other invalid parameter is a value the user typed that
                 * the daemon's checks refused: the same as a client-side
                 * usage error. */
                return CLI_EXIT_USAGE;
        }
        return CLI_EXIT_ERROR;
}

/* Fields whose flag does not depend on the verb, matched on the whole field
 * or on the field followed by '[' or '.' (ports[2], resources.vcpus). */
static const struct {
        const char *field;
        const char *flag;
} field_flags[] = {
        { "timeout", "--timeout" },
        { "timeoutMs", "--timeout" },
        { "resources.vcpus", "--vcpus" },
        { "resources", "--vcpus" },
        { "expiration", "--expire" },
        { "kinds", "--kind" },
        { "ports", "--port" },
        { "tags", "--tag" },
        { "source.snapshotId", "--snapshot" },
        { "source.depth", "--depth" },
        { "source.revision", "--revision" },
        { "source.username", "--git-username" },
        { "source.password", "--git-password-env/--git-password-stdin" },
        { "source.path", "--tarball" },
        { "runtime", "--runtime" },
        { "cwd", "--cwd" },
        { "signal", "--signal" },
        { "suite", "--suite" },
        { "mirror", "--mirror" },
        /* The custom policy options build the same document a --policy
         * FILE holds, so either may have put the value there. */
        { "networkPolicy.allow", "--allow or --policy FILE" },
        { "networkPolicy.subnets.allow", "--allow-subnet or --policy FILE" },
        { "networkPolicy.subnets.deny", "--deny-subnet or --policy FILE" },
        { "networkPolicy", "--policy" },
        { "sandbox", "NAME" },
        { "sourceSandbox", "SRC" },
        { "cmdId", "ID" },
        { "id", "ID" },
};

/* True when `field` is `prefix` or starts with it followed by '.' or '['. */
static bool field_under(const char *field, const char *prefix) {
        size_t n = strlen(prefix);
        return strncmp(field, prefix, n) == 0 && (field[n] == 0 || field[n] == '.' || field[n] == '[');
}

char *cli_field_flag(const char *verb, const char *field) {
        if (!field || !*field)
                return NULL;
        if (streq(field, "name"))
                /* create and fork take the new name as --name; elsewhere the
                 * name is the NAME operand. */
                return strdup(verb && (streq(verb, "create") || streq(verb, "fork")) ? "--name" : "NAME");
        if (streq(field, "path") && verb && (streq(verb, "snapshots") || streq(verb, "runtime")))
                return strdup(streq(verb, "runtime") ? "ROOTFS" : "FILE");
        if (field_under(field, "env")) {
                char *s = NULL;
                if (asprintf(&s, "--env%s%s", field[3] ? " " : "", field[3] ? field + 4 : "") < 0)
                        return NULL;
                return s;
        }
        for (size_t i = 0; i < ELEMENTSOF(field_flags); i++)
                if (field_under(field, field_flags[i].field))
                        return strdup(field_flags[i].flag);
        return NULL;
}

char *cli_error_text(const char *verb, const client_error *e) {
        const char *msg = e && e->message ? e->message : "unknown error";
        const char *field = e ? e->field : NULL;
        _cleanup_free_ char *flag = cli_field_flag(verb, field);
        char *s = NULL;
        size_t n = field ? strlen(field) : 0;
        int r;
        /* A policy error keeps its path in the policy document
         * (sandboxd-policy(5)), which is what a --policy FILE needs; the
         * options are added after it. */
        bool in_policy = field && strncmp(field, "networkPolicy", 13) == 0;
        if (flag && !in_policy && strncmp(msg, field, n) == 0 && msg[n] == ':')
                /* "timeout: must be ..." → "--timeout: must be ..." */
                r = asprintf(&s, "%s%s", flag, msg + n);
        else if (!field || (!flag && strstr(msg, field)) || (flag && !in_policy && strstr(msg, flag)) ||
                 (*msg && msg[strlen(msg) - 1] == ')'))
                /* The message names what it is about already, or ends in a
                 * parenthetical hint a second one would only clutter. */
                r = asprintf(&s, "%s", msg);
        else
                r = asprintf(&s, "%s (%s)", msg, flag ? flag : field);
        return r < 0 ? NULL : s;
}
