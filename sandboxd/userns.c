/* User namespaces on the daemon's side: the start-up check of the host id
 * pool and of what this host supports, the daemon's default (on wherever
 * the host can), the per-sandbox range (assigned at create, kept in
 * config.json, checked again on load), the host account of the sandbox
 * user of sandboxes without one, and the daemon.info report. The
 * mechanics are libcore/userns.c. */
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include "libcore/agent.h"
#include "libcore/log.h"
#include "libcore/userns.h"
#include "sandboxd/internal.h"

/* ---- the sandbox user without a user namespace -------------------------------- */

/* KEY's value in login.defs(5), or `dflt` (shadow's own defaults) when the
 * file or the key is missing. */
static unsigned long login_defs(const char *key, unsigned long dflt) {
        _cleanup_fclose_ FILE *f = fopen("/etc/login.defs", "re");
        char line[256], k[64];
        unsigned long v;
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, " %63s %lu", k, &v) == 2 && streq(k, key))
                        return v;
        return dflt;
}

/* Without a user namespace the sandbox user *is* a host account: its
 * processes count against that uid's RLIMIT_NPROC everywhere on the host,
 * it may signal or ptrace that uid's processes where a path leads there,
 * and it owns its files on disk. So it must be a dedicated system account,
 * never host root and never an id login.defs(5) hands to people
 * (UID_MIN..UID_MAX, GID_MIN..GID_MAX): the first person's account is 1000
 * on most machines. Looked up by name, as systemd-sysusers made it; not
 * created here (a daemon does not edit the host's account database). */
static int plain_user_lookup(manager *m) {
        errno = 0;
        const struct passwd *pw = getpwnam(SANDBOXD_PLAIN_USER);
        int r = 0;
        if (!pw)
                r = asprintf(&m->plain_unavailable,
                             "the host account '%s' does not exist (%s); create it with "
                             "`systemd-sysusers sandboxd.conf` (systemd/sandboxd.sysusers) or "
                             "`useradd --system --user-group --no-create-home --shell /usr/sbin/nologin %s`",
                             SANDBOXD_PLAIN_USER, errno ? strerror(errno) : "no such user", SANDBOXD_PLAIN_USER);
        else if (pw->pw_uid == 0 || pw->pw_gid == 0)
                r = asprintf(&m->plain_unavailable, "the host account '%s' has uid %u gid %u: it must not be root's",
                             SANDBOXD_PLAIN_USER, (unsigned)pw->pw_uid, (unsigned)pw->pw_gid);
        else if ((pw->pw_uid >= login_defs("UID_MIN", 1000) && pw->pw_uid <= login_defs("UID_MAX", 60000)) ||
                 (pw->pw_gid >= login_defs("GID_MIN", 1000) && pw->pw_gid <= login_defs("GID_MAX", 60000)) ||
                 pw->pw_uid == SANDBOX_UID || pw->pw_gid == SANDBOX_GID)
                r = asprintf(&m->plain_unavailable,
                             "the host account '%s' has uid %u gid %u, ids /etc/login.defs gives to people "
                             "(UID_MIN..UID_MAX, GID_MIN..GID_MAX); recreate it as a system account "
                             "(systemd-sysusers, useradd --system)",
                             SANDBOXD_PLAIN_USER, (unsigned)pw->pw_uid, (unsigned)pw->pw_gid);
        else {
                m->plain_uid = pw->pw_uid;
                m->plain_gid = pw->pw_gid;
                return 0;
        }
        return r < 0 ? -ENOMEM : 0;
}

int userns_sandbox_user(const sandbox *sb, uid_t *ret_uid, gid_t *ret_gid) {
        if (!sb->userns && sb->m->plain_unavailable)
                return -EOPNOTSUPP;
        *ret_uid = sb->userns ? SANDBOX_UID : sb->m->plain_uid;
        *ret_gid = sb->userns ? SANDBOX_GID : sb->m->plain_gid;
        return 0;
}

/* ---- start-up ---------------------------------------------------------------- */

/* Records a probe failure r with message msg: a transient one keeps the
 * capability and the default (probed again later); any other turns user
 * namespaces off, the built-in default with them. */
static int userns_probe_failed(manager *m, int r, const char *msg) {
        const daemon_config *cfg = m->cfg;
        if (core_userns_probe_transient(r)) {
                char *e = strdup(msg);
                if (!e)
                        return -ENOMEM;
                free(m->userns_probe_error);
                m->userns_probe_error = e;
                log_warning("the user-namespace probe failed (%s); user namespaces stay on and are probed again "
                            "at the next sandbox that needs one",
                            msg);
                return 0;
        }
        free(m->userns_probe_error);
        m->userns_probe_error = NULL;
        m->userns_unavailable = strdup(msg);
        if (!m->userns_unavailable)
                return -ENOMEM;
        m->userns_default = cfg->userns_set && cfg->userns;
        m->userns_default_from = cfg->userns_set ? "daemon.json" : "fallback";
        if (cfg->userns_set)
                log_warning("user-namespace sandboxes unavailable: %s", m->userns_unavailable);
        else
                log_warning("user namespaces unavailable here (%s): sandboxes run without one by default, "
                            "their user as host account '%s'",
                            m->userns_unavailable, SANDBOXD_PLAIN_USER);
        return 0;
}

int userns_manager_init(manager *m, sb_error **ret_err) {
        const daemon_config *cfg = m->cfg;
        _cleanup_error_ sb_error *err = NULL;
        if (plain_user_lookup(m) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_userns_check_pool("/etc", cfg->userns_base, cfg->userns_size, &err);
        if (r >= 0)
                r = core_userns_probe(cfg->state_dir, (uint32_t)cfg->userns_base, &err);
        m->userns_default = cfg->userns;
        m->userns_default_from = cfg->userns_set ? "daemon.json" : "host";
        if (r < 0) {
                /* Asked for in daemon.json and impossible: the start stops
                 * (fail closed). Only the built-in default falls back; a
                 * transient failure changes nothing. */
                if (cfg->userns_set && cfg->userns && !core_userns_probe_transient(r))
                        return sb_error_set(ret_err, r, NULL, "userns", "daemon.json: userns: %s",
                                            err ? err->message : strerror(-r));
                if (userns_probe_failed(m, r, err ? err->message : strerror(-r)) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        if (m->plain_unavailable && m->userns_default)
                log_info("sandboxes without a user namespace are refused: %s", m->plain_unavailable);
        else if (m->plain_unavailable)
                log_warning("sandboxes without a user namespace (the default here) are refused: %s",
                            m->plain_unavailable);
        return 0;
}

int userns_reprobe(manager *m, sb_error **ret_err) {
        if (!m->userns_probe_error || m->userns_unavailable)
                return 0;
        _cleanup_error_ sb_error *err = NULL;
        int r = core_userns_probe(m->cfg->state_dir, (uint32_t)m->cfg->userns_base, &err);
        if (r >= 0) {
                log_notice("the user-namespace probe passed again: user-namespace sandboxes work");
                free(m->userns_probe_error);
                m->userns_probe_error = NULL;
                return 0;
        }
        const char *msg = err ? err->message : strerror(-r);
        bool transient = core_userns_probe_transient(r);
        int q = sb_error_set(ret_err, transient ? r : -EOPNOTSUPP, "unavailable", "userns",
                             transient ? "userns: the user-namespace probe failed: %s; free space (or fix the "
                                         "error) under the state directory and retry"
                                       : "userns: this host cannot run user-namespace sandboxes: %s",
                             msg);
        if (userns_probe_failed(m, r, msg) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        return q;
}

static bool range_taken(const manager *m, const sandbox *self, uint32_t base) {
        for (const sandbox *o = m->sandboxes; o; o = o->next)
                if (o != self && o->userns_base == base)
                        return true;
        return warmpool_userns_taken(m, base);
}

int userns_assign(manager *m, sandbox *sb, sb_error **ret_err) {
        if (!sb->userns) {
                sb->userns_base = 0;
                if (m->plain_unavailable)
                        return sb_error_set(ret_err, -EOPNOTSUPP, "unavailable", "userns",
                                            "userns: false: no sandbox user for sandboxes without a user "
                                            "namespace: %s",
                                            m->plain_unavailable);
                return 0;
        }
        int pr = userns_reprobe(m, ret_err);
        if (pr < 0)
                return pr;
        if (m->userns_unavailable)
                return sb_error_set(ret_err, -EOPNOTSUPP, "unavailable", "userns",
                                    "userns: this host cannot run user-namespace sandboxes: %s",
                                    m->userns_unavailable);
        const daemon_config *cfg = m->cfg;
        uint64_t n = cfg->userns_size / CORE_USERNS_SIZE;
        for (uint64_t i = 0; i < n; i++) {
                uint32_t base = (uint32_t)(cfg->userns_base + i * CORE_USERNS_SIZE);
                if (!range_taken(m, sb, base)) {
                        sb->userns_base = base;
                        return 0;
                }
        }
        return sb_error_set(ret_err, -ENOSPC, "limit_exceeded", "userns",
                            "userns: all %llu id ranges of the pool are in use (usernsSize in daemon.json)",
                            (unsigned long long)n);
}

void userns_load(manager *m, sandbox *sb, const cJSON *conf) {
        sb->userns = cJSON_IsTrue(cJSON_GetObjectItem(conf, "userns"));
        sb->userns_base = 0;
        if (!sb->userns)
                return;
        const cJSON *start = cJSON_GetObjectItem(cJSON_GetObjectItem(conf, "usernsRange"), "start");
        const daemon_config *cfg = m->cfg;
        double v = cJSON_IsNumber(start) ? start->valuedouble : -1;
        /* Keep the stored range when it still lies in the pool, on a range
         * boundary, and is nobody else's; otherwise take a new one: the
         * layers hold sandbox ids, so no file needs to change. */
        if (v >= (double)cfg->userns_base && v < (double)(cfg->userns_base + cfg->userns_size) &&
            ((uint64_t)v - cfg->userns_base) % CORE_USERNS_SIZE == 0 && !range_taken(m, sb, (uint32_t)v)) {
                sb->userns_base = (uint32_t)v;
                return;
        }
        _cleanup_error_ sb_error *err = NULL;
        if (userns_assign(m, sb, &err) < 0)
                log_warning("sandbox '%s': %s; it cannot start until a range is free", sb->name,
                            err ? err->message : "no user namespace range");
}

void userns_to_json(const sandbox *sb, cJSON *o) {
        cJSON_AddBoolToObject(o, "userns", sb->userns);
        if (!sb->userns_base)
                return;
        cJSON *r = cJSON_AddObjectToObject(o, "usernsRange");
        cJSON_AddNumberToObject(r, "start", sb->userns_base);
        cJSON_AddNumberToObject(r, "count", CORE_USERNS_SIZE);
}

void userns_info(const manager *m, cJSON *cap) {
        cJSON *u = cJSON_AddObjectToObject(cap, "userns");
        cJSON_AddBoolToObject(u, "available", !m->userns_unavailable);
        cJSON_AddStringToObject(u, "mode", m->userns_unavailable ? "none" : "idmapped-overlay");
        if (m->userns_unavailable)
                cJSON_AddStringToObject(u, "reason", m->userns_unavailable);
        if (m->userns_probe_error)
                cJSON_AddStringToObject(u, "probeError", m->userns_probe_error);
        cJSON_AddBoolToObject(u, "default", m->userns_default);
        cJSON_AddStringToObject(u, "defaultFrom", m->userns_default_from ? m->userns_default_from : "host");
        cJSON_AddNumberToObject(u, "poolStart", (double)m->cfg->userns_base);
        cJSON_AddNumberToObject(u, "poolRanges", (double)(m->cfg->userns_size / CORE_USERNS_SIZE));
        cJSON *p = cJSON_AddObjectToObject(u, "plainUser");
        cJSON_AddStringToObject(p, "name", SANDBOXD_PLAIN_USER);
        cJSON_AddBoolToObject(p, "available", !m->plain_unavailable);
        if (m->plain_unavailable)
                cJSON_AddStringToObject(p, "reason", m->plain_unavailable);
        else {
                cJSON_AddNumberToObject(p, "uid", m->plain_uid);
                cJSON_AddNumberToObject(p, "gid", m->plain_gid);
        }
}
