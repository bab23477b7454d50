/* sandboxd-e2b's side of the daemon's socket: a connection per request,
 * made the tenant of the caller with session.actAs before anything else
 * (docs/SECURITY.md §4.3), and the mapping of the daemon's error
 * reasons to the HTTP statuses E2B answers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "e2b/gateway.h"

#define CALL_TIMEOUT_MS (10 * 60 * 1000)

int gw_daemon_open(const gw_config *cfg, const char *tenant, client **ret, char **ret_msg) {
        client *c = NULL;
        int r = client_connect(cfg->socket_path, &c);
        if (r < 0) {
                if (asprintf(ret_msg, "cannot reach sandboxd at %s: %s", cfg->socket_path, strerror(-r)) < 0)
                        *ret_msg = NULL;
                return r;
        }
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "tenant", tenant);
        client_error *err = NULL;
        r = client_call(c, "session.actAs", p, CALL_TIMEOUT_MS, NULL, NULL, NULL, &err);
        if (r < 0) {
                if (asprintf(ret_msg, "sandboxd refused to let the gateway act as tenant %s: %s", tenant,
                             err ? err->message : strerror(-r)) < 0)
                        *ret_msg = NULL;
                client_error_free(err);
                client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

int gw_daemon_call(const gw_config *cfg, const char *tenant, const char *method, cJSON *params,
                   cJSON **ret_result, client_error **ret_err) {
        client *c = NULL;
        char *msg = NULL;
        int r = gw_daemon_open(cfg, tenant, &c, &msg);
        if (r < 0) {
                cJSON_Delete(params);
                *ret_err = client_error_new(CLIENT_ERROR_LOCAL, "unavailable", NULL, "%s", msg ? msg : "sandboxd");
                free(msg);
                return r;
        }
        r = client_call(c, method, params, CALL_TIMEOUT_MS, NULL, NULL, ret_result, ret_err);
        client_free(c);
        return r;
}

int gw_status_of(const client_error *e) {
        if (!e)
                return 500;
        if (e->code == CLIENT_ERROR_LOCAL)
                return 502;
        if (e->code == -32602)
                return 400;
        const char *r = e->reason ? e->reason : "";
        /* Another tenant's sandbox is answered as one that does not exist
         * (the daemon does the same). */
        if (!strcmp(r, "not_found") || !strcmp(r, "permission_denied"))
                return 404;
        if (!strcmp(r, "already_exists"))
                return 409;
        if (!strcmp(r, "limit_exceeded"))
                return 429;
        if (!strcmp(r, "invalid_policy") || !strcmp(r, "invalid_params"))
                return 400;
        if (!strcmp(r, "unavailable") || !strcmp(r, "sandbox_stopped"))
                return 503;
        return 500;
}
