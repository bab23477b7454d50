/* E2B's control API (spec/openapi.yml of e2b-dev/E2B) over sandboxd's
 * sandbox.* methods, as the caller's tenant (docs/E2B.md "Control API").
 * What does not map is refused with E2B's error shape and a message
 * naming what sandboxd lacks; no field is silently dropped. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "e2b/gateway.h"

/* Paths under /sandboxes/{id}/ that E2B has and this gateway does not
 * serve yet, with what is missing. */
static const struct {
        const char *verb;
        const char *why;
} unserved[] = {
        { "logs", "sandbox logs: sandboxd has no sandbox-wide log (command.logs is per command)" },
        { "refreshes", "refreshes are not served by sandboxd-e2b yet" },
};

static int reply_daemon_error(gw_conn *c, const client_error *e, const char *what) {
        return gw_send_error(c, gw_status_of(e), "%s: %s", what, e ? e->message : "failed");
}

/* One daemon call as `tenant`, the client answered here when it fails:
 * 404 "sandbox \"ID\" not found" when `sandbox_id` is given and the daemon
 * has no such sandbox of the tenant's, else the daemon's error after
 * `what` (reply_daemon_error). params: taken. Returns 0 with *ret_result
 * (new; ret_result may be NULL), or -EIO once answered. */
static int call_or_answer(const gw_config *cfg, gw_conn *c, const char *tenant, const char *method, cJSON *params,
                          cJSON **ret_result, const char *sandbox_id, const char *what) {
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, method, params, ret_result, &err) >= 0)
                return 0;
        if (sandbox_id && gw_status_of(err) == 404)
                gw_send_error(c, 404, "sandbox \"%s\" not found", sandbox_id);
        else
                reply_daemon_error(c, err, what);
        client_error_free(err);
        return -EIO;
}

/* {"name": id}: the params of a call on sandbox `id`. New object. */
static cJSON *name_params(const char *id) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", id);
        return p;
}

/* sandbox.get of `id`, answering 404 (or the daemon's error) itself.
 * Returns the Sandbox (new) or NULL. */
static cJSON *get_or_answer(const gw_config *cfg, gw_conn *c, const char *tenant, const char *id, const char *what) {
        cJSON *sb = NULL;
        return call_or_answer(cfg, c, tenant, "sandbox.get", name_params(id), &sb, id, what) < 0 ? NULL : sb;
}

/* The request's JSON object body (new), an empty body being {} when
 * `empty_ok`; NULL after answering 400 naming `what`. Every handler takes
 * its body through here: an array, a string or a number has members
 * without names, which the handlers' key loops must never see. */
static cJSON *body_object(gw_conn *c, const gw_request *r, bool empty_ok, const char *what) {
        cJSON *body = empty_ok && r->body_len == 0 ? cJSON_CreateObject() : cJSON_ParseWithLength(r->body, r->body_len);
        if (!cJSON_IsObject(body)) {
                cJSON_Delete(body);
                gw_send_error(c, 400, "body: a JSON object (%s) is required", what);
                return NULL;
        }
        return body;
}

static const char *template_of(const cJSON *sb) {
        const char *rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "runtime"));
        return !rt || !strcmp(rt, "host") ? "base" : rt;
}

/* A Sandbox object of sandboxd as E2B's ListedSandbox/SandboxDetail. */
static cJSON *to_e2b(const cJSON *sb) {
        cJSON *o = cJSON_CreateObject();
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "name"));
        const char *status = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "status"));
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(sb, "resources");
        double vcpus = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "vcpus"));
        double disk = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "diskMiB"));
        const char *created = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "createdAt"));
        const char *expires = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "expiresAt"));
        cJSON_AddStringToObject(o, "templateID", template_of(sb));
        cJSON_AddStringToObject(o, "sandboxID", name ? name : "");
        cJSON_AddStringToObject(o, "clientID", "sandboxd");
        cJSON_AddStringToObject(o, "startedAt", created ? created : "");
        cJSON_AddStringToObject(o, "endAt", expires ? expires : (created ? created : ""));
        cJSON_AddNumberToObject(o, "cpuCount", vcpus == vcpus && vcpus > 0 ? vcpus : 1);
        /* The memory limit sandboxd sets: vCPUs x 2 GiB (docs/API.md Command). */
        cJSON_AddNumberToObject(o, "memoryMB", (vcpus == vcpus && vcpus > 0 ? vcpus : 1) * 2048);
        cJSON_AddNumberToObject(o, "diskSizeMB", disk == disk && disk > 0 ? disk : 0);
        /* Paused: the running session frozen (sandbox.pause). */
        bool paused = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sb, "session"),
                                                                   "paused"));
        cJSON_AddStringToObject(o, "state", paused || (status && !strcmp(status, "paused")) ? "paused" : "running");
        cJSON_AddStringToObject(o, "envdVersion", GW_ENVD_VERSION);
        const cJSON *tags = cJSON_GetObjectItemCaseSensitive(sb, "tags");
        cJSON *md = tags ? cJSON_Duplicate(tags, 1) : cJSON_CreateObject();
        /* allowPublicTraffic, kept as a tag (ports.c), is no metadata. */
        cJSON_DeleteItemFromObjectCaseSensitive(md, GW_PUBLIC_TAG);
        cJSON_DeleteItemFromObjectCaseSensitive(md, GW_AUTORESUME_TAG);
        cJSON_AddItemToObject(o, "metadata", md);
        return o;
}

/* A Sandbox answer's trafficAccessToken (the sandbox's exposed ports by
 * host name, ports.c) and domain (--domain, or null: the SDK's own). */
static void add_traffic(const gw_config *cfg, cJSON *o, const char *tenant, const char *name) {
        char *tok = name && name[0] ? gw_traffic_token(cfg->keys_path, tenant, name) : NULL;
        if (tok)
                cJSON_AddStringToObject(o, "trafficAccessToken", tok);
        else
                cJSON_AddNullToObject(o, "trafficAccessToken");
        free(tok);
        if (cfg->domain)
                cJSON_AddStringToObject(o, "domain", cfg->domain);
        else
                cJSON_AddNullToObject(o, "domain");
}

/* ---- network (allowOut/denyOut) -> networkPolicy (docs/POLICY.md) ---- */

/* An allowOut/denyOut entry that is an address: a CIDR, or an IP made
 * /32 or /128. New string, or NULL for a domain. */
static char *as_cidr(const char *e) {
        char buf[INET6_ADDRSTRLEN + 8], *out = NULL;
        unsigned char a[16];
        if (strchr(e, '/')) {
                size_t n = (size_t) (strchr(e, '/') - e);
                if (n >= sizeof(buf))
                        return NULL;
                memcpy(buf, e, n);
                buf[n] = 0;
                return inet_pton(AF_INET, buf, a) == 1 || inet_pton(AF_INET6, buf, a) == 1 ? strdup(e) : NULL;
        }
        if (inet_pton(AF_INET, e, a) == 1)
                return asprintf(&out, "%s/32", e) < 0 ? NULL : out;
        if (inet_pton(AF_INET6, e, a) == 1)
                return asprintf(&out, "%s/128", e) < 0 ? NULL : out;
        return NULL;
}

static bool is_all_traffic(const char *e) {
        return !strcmp(e, "0.0.0.0/0");
}

/* E2B's egress model: everything is open unless denyOut names it, and
 * allowOut beats denyOut. sandboxd's custom policy denies what it does not
 * allow and its subnets.deny beats every allow. The two meet exactly in
 * two shapes, which are served:
 *   - denyOut holds 0.0.0.0/0 (allTraffic; allow_internet_access false is
 *     the same): only allowOut is open: {allow: [its domains], subnets:
 *     {allow: [its addresses]}}, or deny-all when it is empty;
 *   - denyOut names only addresses and allowOut is empty: everything but
 *     those: {allow: ["*"], subnets: {allow: [0.0.0.0/0, ::/0], deny: [...]}};
 *   - no denyOut: allow-all (allowOut adds nothing).
 * An allowOut with a partial denyOut would need allow to beat deny:
 * refused, saying so. Returns the policy (new) or NULL with *ret_msg. */
static cJSON *network_policy(const cJSON *allow_out, const cJSON *deny_out, bool deny_all, char **ret_msg) {
        const cJSON *it;
        cJSON_ArrayForEach(it, deny_out) {
                if (!cJSON_IsString(it))
                        goto not_strings;
                if (is_all_traffic(it->valuestring))
                        deny_all = true;
        }
        cJSON_ArrayForEach(it, allow_out)
                if (!cJSON_IsString(it))
                        goto not_strings;
        int n_allow = cJSON_GetArraySize(allow_out), n_deny = cJSON_GetArraySize(deny_out);
        if (deny_all) {
                if (n_allow == 0)
                        return cJSON_CreateString("deny-all");
                cJSON *pol = cJSON_CreateObject(), *names = cJSON_AddArrayToObject(pol, "allow");
                cJSON *subnets = cJSON_AddObjectToObject(pol, "subnets"), *cidrs = cJSON_AddArrayToObject(subnets, "allow");
                cJSON_ArrayForEach(it, allow_out) {
                        char *c = as_cidr(it->valuestring);
                        cJSON_AddItemToArray(c ? cidrs : names, cJSON_CreateString(c ? c : it->valuestring));
                        free(c);
                }
                return pol;
        }
        if (n_deny == 0)
                return cJSON_CreateString("allow-all");
        if (n_allow > 0) {
                *ret_msg = strdup("network: allowOut with a denyOut that is not 0.0.0.0/0: sandboxd's subnet denies "
                                  "beat every allow, so allowOut cannot reopen part of denyOut; deny 0.0.0.0/0 and "
                                  "list what is allowed, or list only what is denied");
                return NULL;
        }
        cJSON *pol = cJSON_CreateObject();
        cJSON *names = cJSON_AddArrayToObject(pol, "allow");
        cJSON_AddItemToArray(names, cJSON_CreateString("*"));
        cJSON *subnets = cJSON_AddObjectToObject(pol, "subnets");
        cJSON *open = cJSON_AddArrayToObject(subnets, "allow"), *deny = cJSON_AddArrayToObject(subnets, "deny");
        cJSON_AddItemToArray(open, cJSON_CreateString("0.0.0.0/0"));
        cJSON_AddItemToArray(open, cJSON_CreateString("::/0"));
        cJSON_ArrayForEach(it, deny_out) {
                char *c = as_cidr(it->valuestring);
                if (!c) {
                        cJSON_Delete(pol);
                        if (asprintf(ret_msg, "network.denyOut: '%s' is not an address or CIDR (E2B denies addresses "
                                              "only)", it->valuestring) < 0)
                                *ret_msg = NULL;
                        return NULL;
                }
                cJSON_AddItemToArray(deny, cJSON_CreateString(c));
                free(c);
        }
        return pol;
not_strings:
        *ret_msg = strdup("network: allowOut and denyOut must be arrays of strings");
        return NULL;
}

/* E2B's network.rules {HOST: [{"transform": {"headers": {NAME: VALUE}}}]}
 * (header transforms applied by E2B's egress proxy) onto policy `pol`
 * (taken): the policy document's rules of the object form of `allow`,
 * {HOST: [{"transform": [{"headers": ...}]}]} (docs/POLICY.md "Header
 * rules"). allow-all becomes {"allow": {"*": [], HOST: rules}, subnets
 * allow everything}; a list of allowed names becomes the object form with
 * no rules for each. A rule's host must be allowed already (by "*" or by
 * name): a rule never opens a host (deny-all, or a name not in allowOut,
 * is refused). A rule without a transform does nothing and is left out.
 * Returns the new policy, or NULL with *ret_msg naming the field. */
static cJSON *apply_rules(cJSON *pol, const cJSON *rules, char **ret_msg) {
        const cJSON *host, *rule, *it;
        if (!cJSON_IsObject(rules)) {
                cJSON_Delete(pol);
                *ret_msg = strdup("network.rules: an object of host: [rules]");
                return NULL;
        }
        if (!rules->child)
                return pol;
        if (cJSON_IsString(pol) && !strcmp(pol->valuestring, "deny-all")) {
                cJSON_Delete(pol);
                *ret_msg = strdup("network.rules: every host is denied (denyOut 0.0.0.0/0 with no allowOut); a rule "
                                  "applies to an allowed host only: name it in allowOut");
                return NULL;
        }
        cJSON *out = cJSON_CreateObject(), *allow = cJSON_AddObjectToObject(out, "allow");
        if (cJSON_IsString(pol)) { /* allow-all */
                cJSON_AddArrayToObject(allow, "*");
                cJSON *sub = cJSON_AddArrayToObject(cJSON_AddObjectToObject(out, "subnets"), "allow");
                cJSON_AddItemToArray(sub, cJSON_CreateString("0.0.0.0/0"));
                cJSON_AddItemToArray(sub, cJSON_CreateString("::/0"));
        } else {
                cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pol, "allow"))
                        if (cJSON_IsString(it) && !cJSON_GetObjectItemCaseSensitive(allow, it->valuestring))
                                cJSON_AddArrayToObject(allow, it->valuestring);
                cJSON *sub = cJSON_DetachItemFromObjectCaseSensitive(pol, "subnets");
                if (sub)
                        cJSON_AddItemToObject(out, "subnets", sub);
        }
        cJSON_Delete(pol);
        bool any = cJSON_GetObjectItemCaseSensitive(allow, "*") != NULL;
        cJSON_ArrayForEach(host, rules) {
                cJSON *list = cJSON_GetObjectItemCaseSensitive(allow, host->string);
                if (!list && !any) {
                        if (asprintf(ret_msg, "network.rules.%s: the host is not allowed (name it in allowOut); a rule "
                                              "never opens a host", host->string) < 0)
                                *ret_msg = NULL;
                        goto bad;
                }
                if (!cJSON_IsArray(host)) {
                        if (asprintf(ret_msg, "network.rules.%s: a list of rules", host->string) < 0)
                                *ret_msg = NULL;
                        goto bad;
                }
                if (!list)
                        list = cJSON_AddArrayToObject(allow, host->string);
                int i = 0;
                cJSON_ArrayForEach(rule, host) {
                        const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rule, "transform");
                        const char *bad_key = NULL;
                        if (!cJSON_IsObject(rule))
                                bad_key = "(not an object)";
                        cJSON_ArrayForEach(it, rule)
                                if (!bad_key && strcmp(it->string, "transform"))
                                        bad_key = it->string;
                        cJSON_ArrayForEach(it, tr)
                                if (!bad_key && (strcmp(it->string, "headers") || !cJSON_IsObject(it)))
                                        bad_key = it->string;
                        if (!bad_key && tr && !cJSON_IsObject(tr))
                                bad_key = "transform";
                        if (bad_key) {
                                if (asprintf(ret_msg, "network.rules.%s[%d]: %s: not served (a rule is {\"transform\": "
                                                      "{\"headers\": {NAME: VALUE}}})", host->string, i, bad_key) < 0)
                                        *ret_msg = NULL;
                                goto bad;
                        }
                        const cJSON *headers = cJSON_GetObjectItemCaseSensitive(tr, "headers");
                        if (headers && headers->child) {
                                cJSON *r = cJSON_CreateObject(), *t = cJSON_AddArrayToObject(r, "transform");
                                cJSON *h = cJSON_CreateObject();
                                cJSON_AddItemToObject(h, "headers", cJSON_Duplicate(headers, 1));
                                cJSON_AddItemToArray(t, h);
                                cJSON_AddItemToArray(list, r);
                        }
                        i++;
                }
        }
        return out;
bad:
        cJSON_Delete(out);
        return NULL;
}

/* The network object of NewSandbox (`create`) or of PUT .../network:
 * allowOut/denyOut are served (and rules, apply_rules), allowPublicTraffic
 * at create (a boolean; create_params keeps it as a tag); egressProxy,
 * maskRequestHost, httpsPorts are not yet. 0, or -EINVAL with *ret_msg
 * naming the key. */
static int network_check(const cJSON *net, bool create, char **ret_msg) {
        const cJSON *it;
        if (!cJSON_IsObject(net)) {
                *ret_msg = strdup("network: must be an object");
                return -EINVAL;
        }
        cJSON_ArrayForEach(it, net) {
                if (!strcmp(it->string, "rules"))
                        continue; /* apply_rules checks them */
                if (!strcmp(it->string, "allowOut") || !strcmp(it->string, "denyOut")) {
                        if (!cJSON_IsArray(it) && !cJSON_IsNull(it)) {
                                *ret_msg = strdup("network: allowOut and denyOut must be arrays of strings");
                                return -EINVAL;
                        }
                        continue;
                }
                if (!strcmp(it->string, "allowPublicTraffic")) {
                        if (create && (cJSON_IsBool(it) || cJSON_IsNull(it)))
                                continue;
                        *ret_msg = strdup(create ? "network.allowPublicTraffic: true or false"
                                                 : "network.allowPublicTraffic: set at create only (E2B's update "
                                                   "of the network changes egress)");
                        return -EINVAL;
                }
                if (asprintf(ret_msg, "network.%s: not served by sandboxd-e2b yet (allowOut, denyOut and rules are)",
                             it->string) < 0)
                        *ret_msg = NULL;
                return -EINVAL;
        }
        return 0;
}

/* NewSandbox -> sandbox.create params, or a 400 naming the field. */
static cJSON *create_params(gw_conn *c, const cJSON *body) {
        cJSON *p = cJSON_CreateObject();
        const cJSON *it;
        cJSON_ArrayForEach(it, body) {
                const char *k = it->string;
                if (cJSON_IsNull(it))
                        continue;
                if (!strcmp(k, "templateID")) {
                        if (!cJSON_IsString(it))
                                goto bad_type;
                        if (!strncmp(it->valuestring, "snap-", 5)) {
                                /* A snapshot (POST /sandboxes/{id}/snapshots)
                                 * is a template in E2B. */
                                cJSON *src = cJSON_AddObjectToObject(p, "source");
                                cJSON_AddStringToObject(src, "type", "snapshot");
                                cJSON_AddStringToObject(src, "snapshotId", it->valuestring);
                        } else
                                cJSON_AddStringToObject(p, "runtime",
                                                        strcmp(it->valuestring, "base") ? it->valuestring : "host");
                } else if (!strcmp(k, "timeout")) {
                        if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble > 1e7)
                                goto bad_type;
                        cJSON_AddNumberToObject(p, "timeout", it->valuedouble * 1000);
                } else if (!strcmp(k, "metadata") || !strcmp(k, "envVars")) {
                        if (!cJSON_IsObject(it))
                                goto bad_type;
                        const char *kept = !strcmp(k, "metadata") && cJSON_GetObjectItemCaseSensitive(it, GW_PUBLIC_TAG)
                                                   ? GW_PUBLIC_TAG
                                           : !strcmp(k, "metadata") && cJSON_GetObjectItemCaseSensitive(it, GW_AUTORESUME_TAG)
                                                   ? GW_AUTORESUME_TAG : NULL;
                        if (kept) {
                                gw_send_error(c, 400, "metadata.%s: a name the gateway keeps for itself "
                                                      "(allowPublicTraffic, autoResume); use another", kept);
                                goto fail;
                        }
                        cJSON_AddItemToObject(p, strcmp(k, "metadata") ? "env" : "tags", cJSON_Duplicate(it, 1));
                } else if (!strcmp(k, "allow_internet_access")) {
                        /* false: E2B's denyOut 0.0.0.0/0 (below). */
                        if (!cJSON_IsBool(it))
                                goto bad_type;
                } else if (!strcmp(k, "secure")) {
                        /* Envd access is always by the sandbox's token here. */
                        if (!cJSON_IsBool(it))
                                goto bad_type;
                } else if (!strcmp(k, "autoPause")) {
                        /* true: post_sandboxes sets onTimeout "pause". */
                        if (!cJSON_IsBool(it))
                                goto bad_type;
                } else if (!strcmp(k, "autoPauseMemory")) {
                        if (cJSON_IsFalse(it)) {
                                gw_send_error(c, 400, "autoPauseMemory: false (a filesystem-only pause at the timeout) is "
                                                      "not served: sandboxd pauses with the memory kept");
                                goto fail;
                        }
                        if (!cJSON_IsTrue(it))
                                goto bad_type;
                } else if (!strcmp(k, "autoResume")) {
                        const cJSON *en = cJSON_GetObjectItemCaseSensitive(it, "enabled");
                        if (!cJSON_IsObject(it) || !cJSON_IsBool(en) || cJSON_GetArraySize(it) != 1)
                                goto bad_type;
                        if (cJSON_IsTrue(en) && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "autoPause"))) {
                                gw_send_error(c, 400, "autoResume: enabled only with autoPause true");
                                goto fail;
                        }
                } else if (!strcmp(k, "network")) {
                        char *msg = NULL;
                        if (network_check(it, true, &msg) < 0) {
                                gw_send_error(c, 400, "%s", msg ? msg : "network: not served");
                                free(msg);
                                goto fail;
                        }
                } else {
                        gw_send_error(c, 400, "%s: not served by sandboxd-e2b (docs/E2B.md lists what maps)", k);
                        goto fail;
                }
                continue;
bad_type:
                gw_send_error(c, 400, "%s: wrong type or out of range", k);
                goto fail;
        }
        if (!cJSON_GetObjectItemCaseSensitive(body, "templateID")) {
                gw_send_error(c, 400, "templateID: required");
                goto fail;
        }
        const cJSON *aia = cJSON_GetObjectItemCaseSensitive(body, "allow_internet_access");
        const cJSON *net = cJSON_GetObjectItemCaseSensitive(body, "network");
        const cJSON *allow_out = cJSON_GetObjectItemCaseSensitive(net, "allowOut");
        const cJSON *deny_out = cJSON_GetObjectItemCaseSensitive(net, "denyOut");
        const cJSON *rules = cJSON_GetObjectItemCaseSensitive(net, "rules");
        if (cJSON_IsFalse(aia) || cJSON_IsArray(allow_out) || cJSON_IsArray(deny_out) || (rules && !cJSON_IsNull(rules))) {
                char *msg = NULL;
                cJSON *pol = network_policy(allow_out, deny_out, cJSON_IsFalse(aia), &msg);
                if (pol && rules && !cJSON_IsNull(rules))
                        pol = apply_rules(pol, rules, &msg);
                if (!pol) {
                        gw_send_error(c, 400, "%s", msg ? msg : "network: not served");
                        free(msg);
                        goto fail;
                }
                cJSON_AddItemToObject(p, "networkPolicy", pol);
        } else if (cJSON_IsTrue(aia))
                cJSON_AddStringToObject(p, "networkPolicy", "allow-all");
        /* E2B's allowPublicTraffic (default true): the ports by host name
         * open to anyone with the URL, and autoResume: a request to one of
         * them resumes the sandbox paused at its timeout; tags ports.c
         * reads. */
        bool pub = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(net, "allowPublicTraffic"));
        bool resume = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(body, "autoResume"),
                                                                     "enabled"));
        /* Always given, empty too: a create from a snapshot without tags
         * takes the snapshot's (sandboxd's snapshot config defaults), and a
         * public sandbox's snapshot would make this one public (and
         * autoResume) whatever allowPublicTraffic said. */
        cJSON *tags = cJSON_GetObjectItemCaseSensitive(p, "tags");
        if (!tags)
                tags = cJSON_AddObjectToObject(p, "tags");
        if (pub || resume) {
                int own = (int) pub + (int) resume;
                if (cJSON_GetArraySize(tags) > 5 - own) {
                        gw_send_error(c, 400, "metadata: at most %d entries here: sandboxd keeps 5 tags, and the "
                                              "gateway keeps %s as %d of them",
                                      5 - own, pub && resume ? "allowPublicTraffic and autoResume"
                                                             : pub ? "allowPublicTraffic (true by default)" : "autoResume",
                                      own);
                        goto fail;
                }
                if (pub)
                        cJSON_AddStringToObject(tags, GW_PUBLIC_TAG, "true");
                if (resume)
                        cJSON_AddStringToObject(tags, GW_AUTORESUME_TAG, "true");
        }
        return p;
fail:
        cJSON_Delete(p);
        return NULL;
}

/* E2B's `base` template has the user `user` with home /home/user, where
 * E2B programs write (docs/E2B.md "The base template and its user");
 * sandboxd's host runtime has the sandbox user `sandbox`. The gateway
 * makes the alias in each new `base` sandbox through the daemon's
 * command.run as root there: /home/user, owned by the sandbox user, and
 * a passwd entry `user` with the sandbox user's ids and that home. 0, or
 * -EIO with *ret_msg (new string). */
#define USER_SETUP \
        "set -e; install -d -m 0755 -o sandbox -g sandbox /home/user; " \
        "grep -q '^user:' /etc/passwd || " \
        "echo \"user:x:$(id -u sandbox):$(id -g sandbox):user:/home/user:/bin/bash\" >> /etc/passwd"

static int make_user(const gw_config *cfg, const char *tenant, const char *name, char **ret_msg) {
        cJSON *p = cJSON_CreateObject(), *args = cJSON_CreateArray(), *res = NULL;
        cJSON_AddStringToObject(p, "sandbox", name);
        cJSON_AddStringToObject(p, "cmd", "/bin/sh");
        cJSON_AddItemToArray(args, cJSON_CreateString("-c"));
        cJSON_AddItemToArray(args, cJSON_CreateString(USER_SETUP));
        cJSON_AddItemToObject(p, "args", args);
        cJSON_AddBoolToObject(p, "sudo", true);
        client_error *err = NULL;
        int r = gw_daemon_call(cfg, tenant, "command.run", p, &res, &err);
        double code = r < 0 ? -1 : cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "exitCode"));
        if (r < 0 || code != 0) {
                if (asprintf(ret_msg, "make the user `user` and /home/user: %s (exit %.0f)",
                             err && err->message ? err->message : "the setup command failed", code) < 0)
                        *ret_msg = NULL;
                client_error_free(err);
                cJSON_Delete(res);
                return -EIO;
        }
        cJSON_Delete(res);
        return 0;
}

static void post_sandboxes(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant) {
        cJSON *body = body_object(c, r, false, "NewSandbox");
        if (!body)
                return;
        cJSON *p = create_params(c, body);
        const char *tmpl = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(body, "templateID"));
        char *tmpl_copy = strdup(tmpl ? tmpl : "base");
        bool auto_pause = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "autoPause"));
        cJSON_Delete(body);
        if (!p) {
                free(tmpl_copy);
                return;
        }
        cJSON *res = NULL;
        client_error *err = NULL;
        /* A templateID that names a snapshot (its E2B name, GW_NAME_TAG):
         * the tenant's newest with that name, before a runtime of it. */
        const char *rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "runtime"));
        if (rt && strcmp(rt, "host")) {
                cJSON *q = cJSON_CreateObject(), *list = NULL;
                cJSON_AddStringToObject(cJSON_AddObjectToObject(q, "tags"), GW_NAME_TAG, rt);
                if (gw_daemon_call(cfg, tenant, "snapshot.list", q, &list, &err) < 0) {
                        reply_daemon_error(c, err, "create sandbox: look up a snapshot of that name");
                        client_error_free(err);
                        cJSON_Delete(p);
                        free(tmpl_copy);
                        return;
                }
                const cJSON *sn, *newest = NULL;
                cJSON_ArrayForEach(sn, cJSON_GetObjectItemCaseSensitive(list, "snapshots"))
                        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sn, "expired")))
                                newest = sn; /* oldest first */
                const char *sid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(newest, "id"));
                if (sid) {
                        cJSON_DeleteItemFromObjectCaseSensitive(p, "runtime");
                        cJSON *src = cJSON_AddObjectToObject(p, "source");
                        cJSON_AddStringToObject(src, "type", "snapshot");
                        cJSON_AddStringToObject(src, "snapshotId", sid);
                }
                cJSON_Delete(list);
        }
        if (gw_daemon_call(cfg, tenant, "sandbox.create", p, &res, &err) < 0) {
                if (err && err->field && !strcmp(err->field, "runtime"))
                        gw_send_error(c, 404, "template '%s' not found: sandboxd has no runtime of that name "
                                              "(base is the host runtime)", tmpl_copy);
                else
                        reply_daemon_error(c, err, "create sandbox");
                client_error_free(err);
                free(tmpl_copy);
                return;
        }
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "name"));
        char *umsg = NULL;
        if (name && !strcmp(tmpl_copy, "base") && make_user(cfg, tenant, name, &umsg) < 0) {
                /* Fail closed: no sandbox without the user E2B promises. */
                cJSON *d = cJSON_CreateObject();
                cJSON_AddStringToObject(d, "name", name);
                gw_daemon_call(cfg, tenant, "sandbox.delete", d, NULL, NULL);
                gw_send_error(c, 500, "create sandbox: %s", umsg ? umsg : "out of memory");
                free(umsg);
                free(tmpl_copy);
                cJSON_Delete(res);
                return;
        }
        if (name && auto_pause) {
                /* autoPause: the session pauses at its timeout
                 * (sandbox.setTimeout onTimeout "pause"), from the same
                 * timeout on. Fails closed: no sandbox without it. */
                cJSON *q = cJSON_CreateObject();
                cJSON_AddStringToObject(q, "name", name);
                double t = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "timeout"));
                cJSON_AddNumberToObject(q, "timeout", t == t && t >= 1000 ? t : 1000);
                cJSON_AddStringToObject(q, "onTimeout", "pause");
                if (gw_daemon_call(cfg, tenant, "sandbox.setTimeout", q, NULL, &err) < 0) {
                        cJSON *d = cJSON_CreateObject();
                        cJSON_AddStringToObject(d, "name", name);
                        gw_daemon_call(cfg, tenant, "sandbox.delete", d, NULL, NULL);
                        reply_daemon_error(c, err, "create sandbox: autoPause (sandbox.setTimeout onTimeout pause)");
                        client_error_free(err);
                        free(tmpl_copy);
                        cJSON_Delete(res);
                        return;
                }
        }
        char *tok = name ? gw_envd_token(cfg->keys_path, tenant, name) : NULL;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "templateID", tmpl_copy);
        cJSON_AddStringToObject(o, "sandboxID", name ? name : "");
        cJSON_AddStringToObject(o, "clientID", "sandboxd");
        cJSON_AddStringToObject(o, "envdVersion", GW_ENVD_VERSION);
        cJSON_AddStringToObject(o, "envdAccessToken", tok ? tok : "");
        add_traffic(cfg, o, tenant, name);
        free(tok);
        free(tmpl_copy);
        cJSON_Delete(res);
        gw_send_json(c, 201, o);
}

static void get_sandbox(const gw_config *cfg, gw_conn *c, const char *tenant, const char *id) {
        cJSON *res = get_or_answer(cfg, c, tenant, id, "get sandbox");
        if (!res)
                return;
        cJSON *o = to_e2b(res);
        char *tok = gw_envd_token(cfg->keys_path, tenant, id);
        cJSON_AddStringToObject(o, "envdAccessToken", tok ? tok : "");
        if (cfg->domain)
                cJSON_AddStringToObject(o, "domain", cfg->domain);
        else
                cJSON_AddNullToObject(o, "domain");
        free(tok);
        cJSON_Delete(res);
        gw_send_json(c, 200, o);
}

/* metadata=k%3Dv%26k2%3Dv2 (one URL-encoded query of its own) -> tags. */
static int metadata_filter(const char *q, cJSON *tags) {
        char *dup = strdup(q), *save = NULL;
        if (!dup)
                return -ENOMEM;
        for (char *kv = strtok_r(dup, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(kv, '=');
                if (!eq) {
                        free(dup);
                        return -EINVAL;
                }
                char *k = gw_url_decode(kv, (size_t) (eq - kv), true), *v = gw_url_decode(eq + 1, strlen(eq + 1), true);
                /* A pair that does not decode (a NUL in it) is refused: left
                 * out, the filter would match more than was asked. */
                int r = !k || !v ? -EINVAL : 0;
                if (r == 0)
                        cJSON_AddStringToObject(tags, k, v);
                free(k);
                free(v);
                if (r < 0) {
                        free(dup);
                        return r;
                }
        }
        free(dup);
        return 0;
}

/* RFC 3339 UTC "YYYY-MM-DDTHH:MM:SS(.mmm)Z" (sandboxd's times) in ms
 * since the epoch; -1 when it is not one. */
static int64_t parse_time_ms(const char *s) {
        struct tm tm = {0};
        const char *rest = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
        if (!rest)
                return -1;
        int64_t ms = (int64_t) timegm(&tm) * 1000;
        if (*rest == '.')
                ms += strtol(rest + 1, NULL, 10);
        return ms;
}

/* Newest first (E2B's list order desc, its default), by startedAt. */
static int by_started_desc(const void *a, const void *b) {
        const char *x = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(*(cJSON *const *) a, "startedAt"));
        const char *y = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(*(cJSON *const *) b, "startedAt"));
        int64_t tx = parse_time_ms(x), ty = parse_time_ms(y);
        return tx < ty ? 1 : tx > ty ? -1 : strcmp(y ? y : "", x ? x : "");
}

static void list_sandboxes(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant) {
        /* Known query parameters; any other is refused, never ignored. */
        static const char *const known[] = { "metadata", "state", "limit", "nextToken", "order", "startedAfter",
                                             "template" };
        for (const char *q = r->query; q && *q;) {
                const char *end = strchr(q, '&');
                size_t n = end ? (size_t) (end - q) : strlen(q);
                bool ok = false;
                for (size_t i = 0; i < sizeof(known) / sizeof(*known); i++)
                        ok |= n > strlen(known[i]) && !strncmp(q, known[i], strlen(known[i])) && q[strlen(known[i])] == '=';
                if (!ok) {
                        gw_send_error(c, 400, "query %.*s: not served by sandboxd-e2b (metadata, state, limit, "
                                              "nextToken, order, startedAfter, template are)",
                                      (int) n, q);
                        return;
                }
                q = end ? end + 1 : NULL;
        }
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        char *md = gw_query_get(r, "metadata"), *state = gw_query_get(r, "state"), *limit = gw_query_get(r, "limit");
        char *token = gw_query_get(r, "nextToken"), *order = gw_query_get(r, "order");
        char *after = gw_query_get(r, "startedAfter"), *tmpl = gw_query_get(r, "template");
        cJSON **sorted = NULL;
        int64_t after_ms = after ? parse_time_ms(after) : 0;
        if ((order && strcmp(order, "asc") && strcmp(order, "desc")) || after_ms < 0) {
                gw_send_error(c, 400, "%s", after_ms < 0 ? "startedAfter: an RFC 3339 time"
                                                         : "order: asc or desc");
                goto out;
        }
        if (md) {
                cJSON *tags = cJSON_AddObjectToObject(p, "tags");
                if (metadata_filter(md, tags) < 0) {
                        gw_send_error(c, 400, "metadata: want k=v pairs joined by &");
                        goto out;
                }
        }
        /* Every page (sandbox.list gives at most 1000 a page): E2B's list
         * here has no pages of its own, so a short list would look whole. */
        res = cJSON_CreateObject();
        cJSON *all = cJSON_AddArrayToObject(res, "sandboxes");
        client *d = NULL;
        char *msg = NULL;
        if (gw_daemon_open(cfg, tenant, &d, &msg) < 0) {
                gw_send_error(c, 502, "%s", msg ? msg : "sandboxd unavailable");
                free(msg);
                goto out;
        }
        for (;;) {
                cJSON *page = NULL;
                client_error *err = NULL;
                if (client_call(d, "sandbox.list", cJSON_Duplicate(p, 1), 60000, NULL, NULL, &page, &err) < 0) {
                        reply_daemon_error(c, err, "list sandboxes");
                        client_error_free(err);
                        client_free(d);
                        goto out;
                }
                cJSON *list = cJSON_GetObjectItemCaseSensitive(page, "sandboxes"), *sb;
                while (list && (sb = list->child))
                        cJSON_AddItemToArray(all, cJSON_DetachItemViaPointer(list, sb));
                const char *next = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(page, "nextCursor"));
                if (!next) {
                        cJSON_Delete(page);
                        break;
                }
                cJSON_DeleteItemFromObjectCaseSensitive(p, "cursor");
                cJSON_AddStringToObject(p, "cursor", next);
                cJSON_Delete(page);
        }
        client_free(d);
        /* Pages: `limit` items from the offset `nextToken` names (a token
         * this gateway made: the decimal offset), and X-Next-Token when
         * more follow. */
        char *end = NULL;
        long max = limit ? strtol(limit, &end, 10) : 0, from = 0;
        if (limit && (*end || max < 1 || max > 10000)) {
                gw_send_error(c, 400, "limit: an integer from 1 to 10000");
                goto out;
        }
        if (token && ((from = strtol(token, &end, 10)) < 0 || *end || !*token)) {
                gw_send_error(c, 400, "nextToken: not a token of this gateway's");
                goto out;
        }
        /* E2B's order: by startedAt, newest first unless order=asc;
         * startedAfter and template filter (template as E2B names it:
         * base for the host runtime). */
        int total = cJSON_GetArraySize(all), kept = 0;
        sorted = calloc(total ? (size_t) total : 1, sizeof(*sorted));
        if (!sorted) {
                gw_send_error(c, 500, "out of memory");
                goto out;
        }
        cJSON *sb;
        cJSON_ArrayForEach(sb, all) {
                cJSON *o = to_e2b(sb);
                const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "state"));
                const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "templateID"));
                if ((state && !strstr(state, st)) || (tmpl && strcmp(tmpl, t)) ||
                    (after && parse_time_ms(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "startedAt"))) <
                                      after_ms))
                        cJSON_Delete(o);
                else
                        sorted[kept++] = o;
        }
        qsort(sorted, (size_t) kept, sizeof(*sorted), by_started_desc);
        if (order && !strcmp(order, "asc"))
                for (int i = 0; i < kept / 2; i++) {
                        cJSON *x = sorted[i];
                        sorted[i] = sorted[kept - 1 - i];
                        sorted[kept - 1 - i] = x;
                }
        cJSON *arr = cJSON_CreateArray();
        bool more = false;
        for (int i = 0; i < kept; i++) {
                if (i < from || more) {
                        cJSON_Delete(sorted[i]);
                        continue;
                }
                if (max > 0 && cJSON_GetArraySize(arr) >= max) {
                        cJSON_Delete(sorted[i]);
                        more = true;
                        continue;
                }
                cJSON_AddItemToArray(arr, sorted[i]);
        }
        char extra[64] = "";
        if (more)
                snprintf(extra, sizeof(extra), "X-Next-Token: %ld\r\n", from + max);
        char *text = cJSON_PrintUnformatted(arr);
        cJSON_Delete(arr);
        if (text)
                gw_send_ex(c, 200, "application/json", text, strlen(text), extra);
        else
                gw_send_error(c, 500, "out of memory");
        free(text);
out:
        cJSON_Delete(p);
        cJSON_Delete(res);
        free(md);
        free(state);
        free(limit);
        free(token);
        free(order);
        free(after);
        free(tmpl);
        free(sorted);
}

static void delete_sandbox(const gw_config *cfg, gw_conn *c, const char *tenant, const char *id) {
        if (call_or_answer(cfg, c, tenant, "sandbox.delete", name_params(id), NULL, id, "kill sandbox") == 0)
                gw_send(c, 204, NULL, NULL, 0);
}


/* POST /sandboxes/{id}/timeout {"timeout": seconds}: E2B ends the sandbox
 * that long from now, earlier or later than before: sandbox.setTimeout. */
static void set_timeout(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *id) {
        cJSON *body = body_object(c, r, false, "{\"timeout\": seconds}");
        if (!body)
                return;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(body, "timeout");
        if (!cJSON_IsNumber(t) || t->valuedouble < 1 || t->valuedouble > 1e7 || cJSON_GetArraySize(body) != 1) {
                cJSON_Delete(body);
                gw_send_error(c, 400, "body: {\"timeout\": seconds} (an integer above 0), nothing else");
                return;
        }
        int64_t want_ms = (int64_t) (t->valuedouble * 1000);
        cJSON_Delete(body);
        cJSON *p = name_params(id);
        cJSON_AddNumberToObject(p, "timeout", (double) want_ms);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "sandbox.setTimeout", p, NULL, &err) < 0) {
                if (gw_status_of(err) == 404)
                        gw_send_error(c, 404, "sandbox \"%s\" not found", id);
                else if (err && err->reason && !strcmp(err->reason, "sandbox_stopped"))
                        gw_send_error(c, 409, "sandbox \"%s\" is not running (no end to move)", id);
                else
                        reply_daemon_error(c, err, "set timeout");
                client_error_free(err);
                return;
        }
        gw_send(c, 204, NULL, NULL, 0);
}

/* PUT /sandboxes/{id}/network: E2B replaces the whole egress config
 * (an omitted field is cleared), so the new policy is built from this body
 * alone and applied to the running session at once (sandbox.update). */
static void put_network(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *id) {
        cJSON *body = body_object(c, r, false, "SandboxNetworkUpdateConfig"), *aia = NULL;
        char *msg = NULL;
        if (!body)
                return;
        aia = cJSON_DetachItemFromObjectCaseSensitive(body, "allow_internet_access");
        if ((aia && !cJSON_IsBool(aia)) || network_check(body, false, &msg) < 0) {
                gw_send_error(c, 400, "%s", msg ? msg : "allow_internet_access: true or false");
                goto out;
        }
        cJSON *pol = network_policy(cJSON_GetObjectItemCaseSensitive(body, "allowOut"),
                                    cJSON_GetObjectItemCaseSensitive(body, "denyOut"), cJSON_IsFalse(aia), &msg);
        const cJSON *rules = cJSON_GetObjectItemCaseSensitive(body, "rules");
        if (pol && rules && !cJSON_IsNull(rules))
                pol = apply_rules(pol, rules, &msg);
        if (!pol) {
                gw_send_error(c, 400, "%s", msg ? msg : "network: not served");
                goto out;
        }
        cJSON *p = name_params(id);
        cJSON_AddItemToObject(p, "networkPolicy", pol);
        if (call_or_answer(cfg, c, tenant, "sandbox.update", p, NULL, id, "update network") == 0)
                gw_send(c, 204, NULL, NULL, 0);
out:
        free(msg);
        cJSON_Delete(aia);
        cJSON_Delete(body);
}

static bool is_paused(const cJSON *sb) {
        return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sb, "session"), "paused"));
}

/* POST /sandboxes/{id}/pause {"memory"?}: sandbox.pause freezes the
 * running session with its memory, kept while the host runs (a host
 * reboot loses it: the sandbox comes back stopped, docs/E2B.md). 409 when
 * already paused (the SDK's false). memory false (a filesystem-only
 * pause) is refused. */
static void pause_sandbox(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *id) {
        cJSON *body = body_object(c, r, true, "{\"memory\": true} or none"), *it;
        if (!body)
                return;
        cJSON_ArrayForEach(it, body)
                if (strcmp(it->string, "memory") != 0 || !(cJSON_IsTrue(it) || cJSON_IsNull(it))) {
                        gw_send_error(c, 400, "%s: not served (sandboxd pauses with the memory kept; memory false, a "
                                              "filesystem-only pause, it has not)", it->string);
                        cJSON_Delete(body);
                        return;
                }
        cJSON_Delete(body);
        cJSON *sb = get_or_answer(cfg, c, tenant, id, "pause");
        if (!sb)
                return;
        bool paused = is_paused(sb);
        cJSON_Delete(sb);
        if (paused) {
                gw_send_error(c, 409, "sandbox \"%s\" is already paused", id);
                return;
        }
        if (call_or_answer(cfg, c, tenant, "sandbox.pause", name_params(id), NULL, NULL, "pause") == 0)
                gw_send(c, 204, NULL, NULL, 0);
}

/* E2B's Sandbox (openapi Sandbox) of sandbox `name` made from template
 * `tmpl`, with its envd token. New object. */
static cJSON *sandbox_reply(const gw_config *cfg, const char *tenant, const char *name, const char *tmpl) {
        char *tok = gw_envd_token(cfg->keys_path, tenant, name);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "templateID", tmpl);
        cJSON_AddStringToObject(o, "sandboxID", name);
        cJSON_AddStringToObject(o, "clientID", "sandboxd");
        cJSON_AddStringToObject(o, "envdVersion", GW_ENVD_VERSION);
        cJSON_AddStringToObject(o, "envdAccessToken", tok ? tok : "");
        add_traffic(cfg, o, tenant, name);
        free(tok);
        return o;
}

/* The most forks one request makes (E2B's SandboxForkRequest count). */
#define FORK_MAX 10

/* POST /sandboxes/{id}/fork {"timeout"?: s, "count"?: n}: `count`
 * sandbox.fork calls, each a new running sandbox with the source's
 * filesystem as it is now and its config (timeout overridden when
 * given); the source keeps running. 201 with one SandboxForkResult each
 * ({"sandbox"} or {"error": {code, message}}). sandboxd forks the
 * filesystem, not the memory: a fork's processes are not carried
 * (docs/E2B.md). */
static void fork_sandbox(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *id) {
        cJSON *body = body_object(c, r, true, "{\"timeout\": seconds, \"count\": n} or none"), *it;
        if (!body)
                return;
        double timeout = -1, count = 1;
        cJSON_ArrayForEach(it, body) {
                if (!strcmp(it->string, "timeout") && cJSON_IsNumber(it) && it->valuedouble >= 1 && it->valuedouble <= 86400)
                        timeout = it->valuedouble;
                else if (!strcmp(it->string, "count") && cJSON_IsNumber(it) && it->valuedouble >= 1 &&
                         it->valuedouble <= FORK_MAX && it->valuedouble == (int) it->valuedouble)
                        count = it->valuedouble;
                else {
                        gw_send_error(c, 400, "%s: %s", it->string,
                                      !strcmp(it->string, "count") ? "a whole number from 1 to 10"
                                      : !strcmp(it->string, "timeout") ? "seconds, 1 to 86400"
                                                                       : "not a fork field (timeout, count are)");
                        cJSON_Delete(body);
                        return;
                }
        }
        cJSON_Delete(body);
        cJSON *sb = get_or_answer(cfg, c, tenant, id, "fork");
        if (!sb)
                return;
        char *tmpl = strdup(template_of(sb));
        cJSON_Delete(sb);
        cJSON *out = cJSON_CreateArray();
        for (int i = 0; i < (int) count; i++) {
                cJSON *p = cJSON_CreateObject(), *res = NULL, *one = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "sourceSandbox", id);
                if (timeout > 0)
                        cJSON_AddNumberToObject(cJSON_AddObjectToObject(p, "overrides"), "timeout", timeout * 1000);
                client_error *err = NULL;
                if (gw_daemon_call(cfg, tenant, "sandbox.fork", p, &res, &err) < 0) {
                        if (i == 0 && gw_status_of(err) == 404) {
                                /* Nothing forked: the source is gone. */
                                reply_daemon_error(c, err, "fork");
                                client_error_free(err);
                                cJSON_Delete(one);
                                cJSON_Delete(out);
                                free(tmpl);
                                return;
                        }
                        cJSON *e = cJSON_AddObjectToObject(one, "error");
                        cJSON_AddNumberToObject(e, "code", gw_status_of(err));
                        cJSON_AddStringToObject(e, "message", err && err->message ? err->message : "fork failed");
                        client_error_free(err);
                } else {
                        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "name"));
                        cJSON_AddItemToObject(one, "sandbox", sandbox_reply(cfg, tenant, name ? name : "", tmpl ? tmpl : "base"));
                }
                cJSON_Delete(res);
                cJSON_AddItemToArray(out, one);
        }
        free(tmpl);
        gw_send_json(c, 201, out);
}

/* A query parameter of seconds since the epoch: -1 when absent, -2 when
 * it is not a number. */
static long long query_seconds(const gw_request *r, const char *key) {
        char *v = gw_query_get(r, key), *end = NULL;
        if (!v)
                return -1;
        long long n = strtoll(v, &end, 10);
        bool ok = *v && !*end && n >= 0;
        free(v);
        return ok ? n : -2;
}

/* GET /sandboxes/{id}/metrics [?start=&end=] (seconds): E2B keeps a time
 * series; sandboxd has the running session's figures as sandbox.get reads
 * them when asked. The answer is one SandboxMetric taken now (none when
 * now is outside start..end, or no session runs): cpuUsedPct the CPU time
 * of the session (activeCpuUsageMs) over its wall time and vCPUs, an
 * average since it started; memUsed usage.memoryBytes, memTotal vCPUs x
 * 2 GiB (sandboxd's limit); diskUsed usage.diskUsedBytes, diskTotal
 * diskMiB; a figure the host does not keep is 0. */
static void get_metrics(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *id) {
        long long from = query_seconds(r, "start"), to = query_seconds(r, "end");
        if (from == -2 || to == -2) {
                gw_send_error(c, 400, "%s: seconds since the epoch", from == -2 ? "start" : "end");
                return;
        }
        cJSON *sb = get_or_answer(cfg, c, tenant, id, "metrics");
        if (!sb)
                return;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        cJSON *arr = cJSON_CreateArray();
        const cJSON *sess = cJSON_GetObjectItemCaseSensitive(sb, "session");
        const cJSON *sessions = cJSON_GetObjectItemCaseSensitive(sb, "sessions");
        const cJSON *last = cJSON_GetArrayItem(sessions, cJSON_GetArraySize(sessions) - 1);
        int64_t started = parse_time_ms(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(last, "startedAt")));
        int64_t now_ms = (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000;
        if (cJSON_IsObject(sess) && (from < 0 || now.tv_sec >= from) && (to < 0 || now.tv_sec <= to)) {
                const cJSON *res = cJSON_GetObjectItemCaseSensitive(sb, "resources");
                const cJSON *usage = cJSON_GetObjectItemCaseSensitive(sb, "usage");
                double vcpus = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "vcpus"));
                double disk = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "diskMiB"));
                double cpu = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(sb, "activeCpuUsageMs"));
                double mem = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(usage, "memoryBytes"));
                double used = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(usage, "diskUsedBytes"));
                if (!(vcpus > 0))
                        vcpus = 1;
                double wall = started > 0 && now_ms > started ? (double) (now_ms - started) : 0;
                char ts[32];
                struct tm tm;
                gmtime_r(&now.tv_sec, &tm);
                strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
                cJSON *m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "timestamp", ts);
                cJSON_AddNumberToObject(m, "timestampUnix", (double) now.tv_sec);
                cJSON_AddNumberToObject(m, "cpuCount", vcpus);
                cJSON_AddNumberToObject(m, "cpuUsedPct", cpu == cpu && wall > 0 ? cpu / wall / vcpus * 100 : 0);
                cJSON_AddNumberToObject(m, "memUsed", mem == mem ? mem : 0);
                cJSON_AddNumberToObject(m, "memTotal", vcpus * 2048.0 * 1024 * 1024);
                cJSON_AddNumberToObject(m, "memCache", 0);
                cJSON_AddNumberToObject(m, "diskUsed", used == used ? used : 0);
                cJSON_AddNumberToObject(m, "diskTotal", disk == disk && disk > 0 ? disk * 1024 * 1024 : 0);
                cJSON_AddItemToArray(arr, m);
        }
        cJSON_Delete(sb);
        gw_send_json(c, 200, arr);
}

/* A snapshot's E2B names (openapi SnapshotInfo names): its tag
 * GW_NAME_TAG, when it has one. New array. */
static cJSON *snapshot_names(const cJSON *sn) {
        cJSON *a = cJSON_CreateArray();
        const char *n = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sn, "tags"), GW_NAME_TAG));
        if (n)
                cJSON_AddItemToArray(a, cJSON_CreateString(n));
        return a;
}

/* POST /sandboxes/{id}/snapshots {"name"?}: sandbox.snapshot, the
 * sandbox's filesystem and config kept (its memory is not: a sandbox
 * created from it starts new processes), the sandbox running on. 201
 * {"snapshotID": "snap-…", "names": [name]}; the ID is a template ID
 * (create from it, DELETE /templates/{ID}), and so is the name (the
 * newest snapshot of the tenant with it). The name is the snapshot's tag
 * GW_NAME_TAG (sandbox.snapshot tags). */
static void snapshot_sandbox(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant,
                             const char *id) {
        cJSON *body = body_object(c, r, true, "{\"name\"?: string}"), *it;
        if (!body)
                return;
        const char *name = NULL;
        cJSON_ArrayForEach(it, body) {
                if (cJSON_IsNull(it))
                        continue;
                if (!strcmp(it->string, "name") && cJSON_IsString(it) && it->valuestring[0] &&
                    strlen(it->valuestring) <= 1024) {
                        name = it->valuestring;
                        continue;
                }
                gw_send_error(c, 400, "%s: %s", it->string,
                              strcmp(it->string, "name") ? "not served (a snapshot takes a name only)"
                                                         : "a string of 1 to 1024 bytes");
                cJSON_Delete(body);
                return;
        }
        cJSON *p = name_params(id), *res = NULL;
        if (name)
                cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "tags"), GW_NAME_TAG, name);
        cJSON_Delete(body);
        if (call_or_answer(cfg, c, tenant, "sandbox.snapshot", p, &res, NULL, "snapshot") < 0)
                return;
        const char *sid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "id"));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "snapshotID", sid ? sid : "");
        cJSON_AddItemToObject(o, "names", snapshot_names(res));
        cJSON_Delete(res);
        gw_send_json(c, 201, o);
}

/* GET /snapshots [?sandboxID=&name=&limit=&nextToken=]: snapshot.list
 * (the tenant's own; name: its GW_NAME_TAG), newest first, paged as the
 * sandbox list is. */
static void list_snapshots(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant) {
        static const char *const known[] = { "sandboxID", "name", "limit", "nextToken" };
        for (const char *q = r->query; q && *q;) {
                const char *end = strchr(q, '&');
                size_t n = end ? (size_t) (end - q) : strlen(q);
                bool ok = false;
                for (size_t i = 0; i < sizeof(known) / sizeof(*known); i++)
                        ok |= n > strlen(known[i]) && !strncmp(q, known[i], strlen(known[i])) && q[strlen(known[i])] == '=';
                if (!ok) {
                        gw_send_error(c, 400, "query %.*s: not served by sandboxd-e2b (sandboxID, name, limit, "
                                              "nextToken are)", (int) n, q);
                        return;
                }
                q = end ? end + 1 : NULL;
        }
        char *sbx = gw_query_get(r, "sandboxID"), *limit = gw_query_get(r, "limit"), *token = gw_query_get(r, "nextToken");
        char *name = gw_query_get(r, "name");
        char *end = NULL;
        long max = limit ? strtol(limit, &end, 10) : 0, from = 0;
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        if ((limit && (*end || max < 1 || max > 10000)) ||
            (token && ((from = strtol(token, &end, 10)) < 0 || *end || !*token))) {
                gw_send_error(c, 400, "%s", limit && (max < 1 || max > 10000 || !end || *end) ? "limit: an integer from 1 to 10000"
                                                                                      : "nextToken: not a token of this gateway's");
                goto out;
        }
        if (sbx)
                cJSON_AddStringToObject(p, "sandbox", sbx);
        if (name)
                cJSON_AddStringToObject(cJSON_AddObjectToObject(p, "tags"), GW_NAME_TAG, name);
        int rc = call_or_answer(cfg, c, tenant, "snapshot.list", p, &res, NULL, "list snapshots");
        p = NULL; /* taken */
        if (rc < 0)
                goto out;
        cJSON *arr = cJSON_CreateArray(), *sn;
        long i = 0;
        bool more = false;
        int total = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(res, "snapshots"));
        /* snapshot.list is oldest first: E2B's newest first is its reverse. */
        for (int k = total - 1; k >= 0; k--) {
                sn = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(res, "snapshots"), k);
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sn, "expired")) || i++ < from)
                        continue;
                if (max > 0 && cJSON_GetArraySize(arr) >= max) {
                        more = true;
                        break;
                }
                cJSON *o = cJSON_CreateObject();
                const char *sid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sn, "id"));
                cJSON_AddStringToObject(o, "snapshotID", sid ? sid : "");
                cJSON_AddItemToObject(o, "names", snapshot_names(sn));
                cJSON_AddItemToArray(arr, o);
        }
        char extra[64] = "";
        if (more)
                snprintf(extra, sizeof(extra), "X-Next-Token: %ld\r\n", from + max);
        char *text = cJSON_PrintUnformatted(arr);
        cJSON_Delete(arr);
        if (text)
                gw_send_ex(c, 200, "application/json", text, strlen(text), extra);
        else
                gw_send_error(c, 500, "out of memory");
        free(text);
out:
        cJSON_Delete(p);
        cJSON_Delete(res);
        free(sbx);
        free(name);
        free(limit);
        free(token);
}

/* DELETE /templates/{snap-…}: snapshot.delete → 204; 404 when the
 * tenant has no such snapshot. */
static void delete_snapshot(const gw_config *cfg, gw_conn *c, const char *tenant, const char *id) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "id", id);
        if (call_or_answer(cfg, c, tenant, "snapshot.delete", p, NULL, NULL, "delete snapshot") == 0)
                gw_send(c, 204, NULL, NULL, 0);
}

/* POST /v2/sandboxes/{id}/connect (and /sandboxes/{id}/connect, and the
 * older /resume) {"timeout": s, "memory"?}: a paused sandbox is resumed
 * (201), a running one answered as it is (200); the end is moved to
 * `timeout` s from now when that is later (E2B: "TTL is only extended").
 * Answers the Sandbox with its envd token. */
static void connect_sandbox(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *id) {
        cJSON *body = body_object(c, r, true, "{\"timeout\": seconds} or none"), *it;
        if (!body)
                return;
        double timeout = 0;
        cJSON_ArrayForEach(it, body) {
                if (!strcmp(it->string, "timeout") && cJSON_IsNumber(it) && it->valuedouble >= 0 && it->valuedouble <= 1e7)
                        timeout = it->valuedouble;
                else if (!strcmp(it->string, "memory") && (cJSON_IsTrue(it) || cJSON_IsNull(it)))
                        ;
                else if (!strcmp(it->string, "autoPause") && cJSON_IsFalse(it))
                        ;
                else {
                        gw_send_error(c, 400, "%s: not served (connect takes timeout; memory false, a reboot, is not "
                                              "served)", it->string);
                        cJSON_Delete(body);
                        return;
                }
        }
        cJSON_Delete(body);
        cJSON *sb = get_or_answer(cfg, c, tenant, id, "connect");
        if (!sb)
                return;
        bool paused = is_paused(sb);
        int64_t end = parse_time_ms(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "expiresAt")));
        const char *tmpl = template_of(sb);
        char *tmpl_copy = strdup(tmpl);
        cJSON_Delete(sb);
        if (end < 0) {
                free(tmpl_copy);
                gw_send_error(c, 404, "sandbox \"%s\" is not running", id);
                return;
        }
        if (paused && call_or_answer(cfg, c, tenant, "sandbox.resume", name_params(id), NULL, NULL, "resume") < 0) {
                free(tmpl_copy);
                return;
        }
        if (paused) {
                /* A resume past the expiry (a pause at the timeout, autoPause)
                 * gave the session a new end: extend from that one. */
                sb = get_or_answer(cfg, c, tenant, id, "connect");
                if (!sb) {
                        free(tmpl_copy);
                        return;
                }
                end = parse_time_ms(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "expiresAt")));
                cJSON_Delete(sb);
        }
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        int64_t want = (int64_t) now.tv_sec * 1000 + now.tv_nsec / 1000000 + (int64_t) (timeout * 1000);
        if (want > end) {
                cJSON *p = name_params(id);
                cJSON_AddNumberToObject(p, "duration", (double) (want - end));
                if (call_or_answer(cfg, c, tenant, "sandbox.extendTimeout", p, NULL, NULL,
                                   "connect: extend the timeout") < 0) {
                        free(tmpl_copy);
                        return;
                }
        }
        cJSON *o = sandbox_reply(cfg, tenant, id, tmpl_copy);
        free(tmpl_copy);
        gw_send_json(c, paused ? 201 : 200, o);
}

/* The paths /sandboxes/{id}/VERB served, by verb and method; another
 * method on one of them is not an E2B endpoint (404). */
static const struct {
        const char *verb;
        const char *method;
        void (*serve)(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *id);
} verbs[] = {
        { "timeout", "POST", set_timeout },
        { "network", "PUT", put_network },
        { "pause", "POST", pause_sandbox },
        { "metrics", "GET", get_metrics },
        { "snapshots", "POST", snapshot_sandbox },
        { "fork", "POST", fork_sandbox },
        { "connect", "POST", connect_sandbox },
        { "resume", "POST", connect_sandbox },
};

void gw_control(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant) {
        const char *m = r->method, *path = r->path;
        if (!strcmp(path, "/sandboxes") || !strcmp(path, "/v2/sandboxes")) {
                if (!strcmp(m, "POST"))
                        post_sandboxes(cfg, c, r, tenant);
                else if (!strcmp(m, "GET"))
                        list_sandboxes(cfg, c, r, tenant);
                else
                        gw_send_error(c, 405, "%s %s: not allowed", m, path);
                return;
        }
        if (!strcmp(path, "/snapshots") && !strcmp(m, "GET")) {
                list_snapshots(cfg, c, r, tenant);
                return;
        }
        if (!strncmp(path, "/templates/snap-", 16) && !strcmp(m, "DELETE") && !strchr(path + 11, '/') &&
            strlen(path + 11) < 64) {
                delete_snapshot(cfg, c, tenant, path + 11);
                return;
        }
        const char *rest = !strncmp(path, "/sandboxes/", 11) ? path + 11
                         : !strncmp(path, "/v2/sandboxes/", 14) ? path + 14 : NULL;
        if (!rest) {
                gw_send_error(c, 404, "%s %s: not served by sandboxd-e2b (templates, snapshots, teams, volumes "
                                      "are not mapped yet; docs/E2B.md)", m, path);
                return;
        }
        char id[64];
        const char *slash = strchr(rest, '/');
        size_t n = slash ? (size_t) (slash - rest) : strlen(rest);
        if (n == 0 || n >= sizeof(id)) {
                gw_send_error(c, 404, "sandbox not found");
                return;
        }
        memcpy(id, rest, n);
        id[n] = 0;
        if (!slash) {
                if (!strcmp(m, "GET"))
                        get_sandbox(cfg, c, tenant, id);
                else if (!strcmp(m, "DELETE"))
                        delete_sandbox(cfg, c, tenant, id);
                else
                        gw_send_error(c, 405, "%s %s: not allowed", m, path);
                return;
        }
        const char *verb = slash + 1;
        for (size_t i = 0; i < sizeof(verbs) / sizeof(*verbs); i++)
                if (!strcmp(verb, verbs[i].verb) && !strcmp(m, verbs[i].method)) {
                        verbs[i].serve(cfg, c, r, tenant, id);
                        return;
                }
        for (size_t i = 0; i < sizeof(unserved) / sizeof(*unserved); i++)
                if (!strcmp(verb, unserved[i].verb)) {
                        gw_send_error(c, 501, "%s", unserved[i].why);
                        return;
                }
        gw_send_error(c, 404, "%s %s: not an E2B endpoint", m, path);
}
