/* User namespaces on the daemon's side: the start-up check of the host id
 * pool and of what this host supports, the per-sandbox range (assigned at
 * create, kept in config.json, checked again on load), and the
 * daemon.info report. The mechanics are libcore/userns.c. */
#include <string.h>
#include "libcore/log.h"
#include "libcore/userns.h"
#include "sandboxd/internal.h"

int userns_manager_init(manager *m, sb_error **ret_err) {
        const daemon_config *cfg = m->cfg;
        _cleanup_error_ sb_error *err = NULL;
        int r = core_userns_check_pool("/etc", cfg->userns_base, cfg->userns_size, &err);
        if (r >= 0)
                r = core_userns_probe(cfg->state_dir, (uint32_t)cfg->userns_base, &err);
        if (r >= 0)
                return 0;
        /* A default the host cannot honour stops the start (fail closed);
         * otherwise only sandboxes that ask for it are refused. */
        if (cfg->userns)
                return sb_error_set(ret_err, r, NULL, "userns", "daemon.json: userns: %s",
                                    err ? err->message : strerror(-r));
        m->userns_unavailable = strdup(err ? err->message : strerror(-r));
        log_info("user-namespace sandboxes unavailable: %s", m->userns_unavailable);
        return 0;
}

static bool range_taken(const manager *m, const sandbox *self, uint32_t base) {
        for (const sandbox *o = m->sandboxes; o; o = o->next)
                if (o != self && o->userns_base == base)
                        return true;
        return false;
}

int userns_assign(manager *m, sandbox *sb, sb_error **ret_err) {
        if (!sb->userns) {
                sb->userns_base = 0;
                return 0;
        }
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
        cJSON_AddBoolToObject(u, "default", m->cfg->userns);
        cJSON_AddNumberToObject(u, "poolStart", (double)m->cfg->userns_base);
        cJSON_AddNumberToObject(u, "poolRanges", (double)(m->cfg->userns_size / CORE_USERNS_SIZE));
}
