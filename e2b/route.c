/* Which protocol a request speaks and who sends it (docs/E2B.md
 * "Routing"): a request with E2b-Sandbox-Id is for that sandbox's envd and
 * must carry the sandbox's access token (X-Access-Token), except
 * GET /health; any other request is the control API and must carry an
 * API key (X-API-Key). The tenant comes from the key or the token, never
 * from anything else the request says. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>
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

/* Whether the host names `a` and `b` (each HOST[:PORT]) are the same:
 * case-insensitive, and the port compared only when both have one. */
static bool same_domain(const char *a, const char *b) {
        size_t na = strcspn(a, ":"), nb = strcspn(b, ":");
        if (na != nb || strncasecmp(a, b, na) != 0)
                return false;
        return !a[na] || !b[nb] || !strcmp(a + na, b + nb);
}

/* E2B's host names for a sandbox's ports: PORT-ID.DOMAIN (the SDK's
 * getHost(); envd is port 49983, which the SDK uses when E2B_SANDBOX_URL
 * is not set and the domain has wildcard DNS). With --domain the DOMAIN
 * must be that one. Returns the port (1-65535) with the ID in id (size
 * bytes), or 0 when `host` is not such a name. */
static unsigned host_port_id(const gw_config *cfg, const char *host, char *id, size_t size) {
        if (!host || host[0] < '1' || host[0] > '9')
                return 0;
        char *end = NULL;
        unsigned long port = strtoul(host, &end, 10);
        if (end == host || *end != '-' || port < 1 || port > 65535)
                return 0;
        const char *start = end + 1, *dot = strchr(start, '.');
        size_t n = dot ? (size_t) (dot - start) : 0;
        if (!n || n >= size || !dot[1])
                return 0;
        if (cfg->domain && !same_domain(dot + 1, cfg->domain))
                return 0;
        memcpy(id, start, n);
        id[n] = 0;
        return sandbox_id_ok(id) ? (unsigned) port : 0;
}

/* A signed file URL (the SDK's downloadUrl()/uploadUrl() of a secure
 * sandbox): GET (read) or POST (write) /files with `signature`. Fills
 * ret: the tenant and sandbox of the token that signed it (`sbx` when the
 * request names one, else found among the sandboxes the gateway knows),
 * or a 401 naming what is wrong. True when `r` is such a request. */
static bool signed_files(const gw_config *cfg, const gw_request *r, const char *sbx, gw_auth *ret) {
        bool get = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
        if (strcmp(r->path, "/files") || !(get || post))
                return false;
        char *sig = gw_query_get(r, "signature");
        if (!sig)
                return false;
        char *exp = gw_query_get(r, "signature_expiration"), *path = gw_query_get(r, "path"),
             *user = gw_query_get(r, "username");
        ret->envd = true;
        char *end = NULL;
        long long e = exp ? strtoll(exp, &end, 10) : 0;
        if (exp && (!*exp || *end)) {
                ret->status = 401;
                snprintf(ret->msg, sizeof(ret->msg), "signature_expiration: not a number of seconds");
        } else if (exp && e < (long long) time(NULL)) {
                /* envd's words, which E2B's SDK tests expect */
                ret->status = 401;
                snprintf(ret->msg, sizeof(ret->msg), "signature is already expired");
        } else {
                int k = gw_signature_find(cfg->keys_path, sbx, path ? path : "", get ? "read" : "write",
                                          user ? user : "", exp, sig, ret->tenant, sizeof(ret->tenant), ret->sandbox,
                                          sizeof(ret->sandbox));
                if (k < 0) {
                        ret->tenant[0] = ret->sandbox[0] = 0;
                        ret->status = k == -EACCES ? 401 : 500;
                        snprintf(ret->msg, sizeof(ret->msg), "%s",
                                 k == -EACCES ? "invalid signature: not made with the access token of a sandbox "
                                                "for this path, operation and user"
                                              : "the gateway cannot read its keys file");
                }
        }
        free(sig);
        free(exp);
        free(path);
        free(user);
        return true;
}

void gw_authenticate(const gw_config *cfg, const gw_request *r, gw_auth *ret) {
        *ret = (gw_auth) {0};
        /* One Host at most (RFC 9112 §3.2: a server answers 400 to more):
         * the gateway routes by the first, a server behind it might read
         * another. */
        size_t hosts = 0;
        for (size_t i = 0; i < r->n_headers; i++)
                hosts += r->headers[i].name && !strcasecmp(r->headers[i].name, "Host");
        if (hosts > 1) {
                ret->status = 400;
                snprintf(ret->msg, sizeof(ret->msg), "Host: given %zu times (one at most)", hosts);
                return;
        }
        const char *sbx = gw_header_get(r, "E2b-Sandbox-Id");
        /* No E2b-Sandbox-Id: the Host may name the sandbox (PORT-ID.DOMAIN).
         * Envd's port is served as the header would be; another port (an
         * exposed one) is relayed by ports.c: with the sandbox's traffic
         * token it acts as the token's tenant; without one the tenant is
         * found there (a sandbox whose ports are public). */
        char host_id[64];
        unsigned port = sbx ? 0 : host_port_id(cfg, gw_header_get(r, "Host"), host_id, sizeof(host_id));
        if (port && port != GW_ENVD_PORT) {
                /* The origin form only (RFC 9112 §3.2.1): an absolute URL
                 * would name a host of its own to the sandbox's server. */
                if (r->path[0] != '/') {
                        ret->status = 400;
                        snprintf(ret->msg, sizeof(ret->msg), "request target: a path (/...) to port %u of sandbox "
                                 "%s, not an absolute URL", port, host_id);
                        return;
                }
                ret->port = port;
                snprintf(ret->sandbox, sizeof(ret->sandbox), "%s", host_id);
                const char *tok = gw_header_get(r, "E2b-Traffic-Access-Token");
                if (tok && gw_traffic_token_check(cfg->keys_path, tok, host_id, ret->tenant, sizeof(ret->tenant)) < 0) {
                        ret->tenant[0] = 0;
                        ret->status = 403;
                        snprintf(ret->msg, sizeof(ret->msg),
                                 "e2b-traffic-access-token: not the trafficAccessToken of sandbox %s", host_id);
                }
                return;
        }
        if (port)
                sbx = host_id;
        bool health = !strcmp(r->method, "GET") && !strcmp(r->path, "/health");
        if (sbx) {
                ret->envd = true;
                if (!sandbox_id_ok(sbx)) {
                        ret->status = 400;
                        snprintf(ret->msg, sizeof(ret->msg), "E2b-Sandbox-Id: not a sandbox ID");
                        return;
                }
                snprintf(ret->sandbox, sizeof(ret->sandbox), "%s", sbx);
                const char *tok = gw_header_get(r, "X-Access-Token");
                /* No token: a signed file URL may stand for it. */
                if (!tok && signed_files(cfg, r, sbx, ret))
                        return;
                /* /health needs no token, as envd's; with the sandbox's
                 * own token it says whether the sandbox runs (envd.c). */
                if (health && (!tok || gw_envd_token_check(cfg->keys_path, tok, sbx, ret->tenant,
                                                           sizeof(ret->tenant)) < 0)) {
                        ret->tenant[0] = 0;
                        ret->status = 204;
                        return;
                }
                if (gw_envd_token_check(cfg->keys_path, tok, sbx, ret->tenant, sizeof(ret->tenant)) < 0) {
                        ret->status = 401;
                        snprintf(ret->msg, sizeof(ret->msg), "%s",
                                 tok ? "X-Access-Token: not this sandbox's access token"
                                     : "X-Access-Token: missing (the envdAccessToken of the sandbox)");
                }
                return;
        }
        if (health) {
                ret->status = 200;
                return;
        }
        /* A signed file URL made with E2B_SANDBOX_URL names no sandbox:
         * its signature says which (without an API key: with one it is a
         * control API request). */
        if (!gw_header_get(r, "X-API-Key") && signed_files(cfg, r, NULL, ret))
                return;
        const char *key = gw_header_get(r, "X-API-Key");
        int k = key ? gw_key_tenant(cfg->keys_path, key, ret->tenant, sizeof(ret->tenant)) : -EACCES;
        if (k == -EACCES) {
                ret->status = 401;
                snprintf(ret->msg, sizeof(ret->msg), "%s", key ? "Invalid API key" : "X-API-Key: missing (E2B_API_KEY)");
        } else if (k < 0) {
                ret->status = 500;
                snprintf(ret->msg, sizeof(ret->msg), "the gateway cannot read its keys file: %s",
                         k == -EPERM ? "it is not private to the gateway's uid (mode 0600, its owner)"
                                     : strerror(-k));
        }
}

void gw_route(const gw_config *cfg, gw_conn *c, const gw_request *r, const gw_auth *a) {
        if (a->status) {
                if (a->msg[0])
                        gw_send_error(c, a->status, "%s", a->msg);
                else
                        gw_send(c, a->status, NULL, NULL, 0);
                return;
        }
        if (a->port) /* relayed by gw_serve_conn (ports.c), never here */
                gw_send_error(c, 500, "port %u of sandbox %s: not relayed", a->port, a->sandbox);
        else if (a->envd)
                gw_envd(cfg, c, r, a->tenant, a->sandbox);
        else
                gw_control(cfg, c, r, a->tenant);
}
