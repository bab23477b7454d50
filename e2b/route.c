/* Which protocol a request speaks and who sends it (docs/E2B.md
 * "Routing"): a request with E2b-Sandbox-Id is for that sandbox's envd and
 * must carry the sandbox's access token (X-Access-Token), except
 * GET /health; any other request is the control API and must carry an
 * API key (X-API-Key). The tenant comes from the key or the token, never
 * from anything else the request says. */
#include <errno.h>
#include <string.h>
#include "e2b/gateway.h"

/* E2B sandbox IDs are sandboxd names (docs/API.md sandbox.create). */
static bool sandbox_id_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 63)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || (i > 0 && s[i] == '-')))
                        return false;
        return true;
}

void gw_route(const gw_config *cfg, gw_conn *c, const gw_request *r) {
        char tenant[80];
        const char *sbx = gw_header_get(r, "E2b-Sandbox-Id");
        if (sbx) {
                if (!sandbox_id_ok(sbx)) {
                        gw_send_error(c, 400, "E2b-Sandbox-Id: not a sandbox ID");
                        return;
                }
                if (!strcmp(r->method, "GET") && !strcmp(r->path, "/health")) {
                        gw_send(c, 204, NULL, NULL, 0);
                        return;
                }
                const char *tok = gw_header_get(r, "X-Access-Token");
                if (gw_envd_token_check(cfg->keys_path, tok, sbx, tenant, sizeof(tenant)) < 0) {
                        gw_send_error(c, 401, "%s", tok ? "X-Access-Token: not this sandbox's access token"
                                                      : "X-Access-Token: missing (the envdAccessToken of the sandbox)");
                        return;
                }
                gw_envd(cfg, c, r, tenant, sbx);
                return;
        }
        if (!strcmp(r->method, "GET") && !strcmp(r->path, "/health")) {
                gw_send(c, 200, NULL, NULL, 0);
                return;
        }
        const char *key = gw_header_get(r, "X-API-Key");
        int k = key ? gw_key_tenant(cfg->keys_path, key, tenant, sizeof(tenant)) : -EACCES;
        if (k == -EACCES) {
                gw_send_error(c, 401, "%s", key ? "Invalid API key" : "X-API-Key: missing (E2B_API_KEY)");
                return;
        }
        if (k < 0) {
                gw_send_error(c, 500, "the gateway cannot read its keys file: %s", strerror(-k));
                return;
        }
        gw_control(cfg, c, r, tenant);
}
