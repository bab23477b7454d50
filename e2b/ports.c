/* A sandbox's exposed ports by host name (E2B's getHost(): the Host
 * PORT-ID.DOMAIN; docs/E2B.md "Exposed ports").
 *
 * The gateway holds no sandbox logic here: the port is made one of the
 * sandbox's `ports` with sandbox.update (docs/API.md: the daemon listens
 * on a host endpoint for it and connects each connection to the port on
 * the sandbox's own loopback), and the request is relayed through that
 * endpoint, acting as the sandbox's tenant.
 *
 * Who may: with the sandbox's traffic token (header
 * e2b-traffic-access-token, the create answer's trafficAccessToken) the
 * token's tenant, whatever the sandbox says; without one anyone, but only
 * when the sandbox carries GW_PUBLIC_TAG (E2B's allowPublicTraffic, its
 * default true), which the gateway's create sets and nothing else here
 * does: a sandbox made through sandboxd's own API is never public by
 * accident. The tenant of such a request is found among the keys file's
 * tenants (the one for which sandbox.get succeeds: sandbox names are one
 * name space across tenants); every other tenant answers not found.
 *
 * Threat: the caller is anyone on the network. The request head is
 * parsed (http.c) and sent again from its parsed fields, so the sandbox
 * sees one well-formed head; everything after it goes to the same port
 * of the same sandbox, unparsed, until the connection ends: a second
 * request on the connection (whatever its Host) can reach nothing the
 * first could not, and the answer of the sandbox's server never reaches
 * the gateway's parser. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "e2b/gateway.h"

/* sandboxd's most ports per sandbox (docs/API.md `ports`). */
#define PORTS_MAX 15
/* A relayed connection with no byte either way this long is closed. */
#define TUNNEL_IDLE_SECONDS 600
/* Tenants looked through for a request without a token. */
#define TENANTS_MAX 256

/* Serialises the gateway's own sandbox.update of `ports` (a read, then
 * the whole new list): two requests adding ports at once would lose one.
 * Another gateway process can still race; the connect retries. */
static pthread_mutex_t ports_lock = PTHREAD_MUTEX_INITIALIZER;

/* The last tenant found owning a sandbox, tried first (a hint only:
 * every use is checked by the daemon's sandbox.get as that tenant). */
#define OWNERS 64
static struct {
        char sandbox[64], tenant[80];
} owners[OWNERS];
static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned owner_slot(const char *sandbox) {
        unsigned h = 5381;
        for (const char *p = sandbox; *p; p++)
                h = h * 33 + (unsigned char) *p;
        return h % OWNERS;
}

static void send_json_close(gw_conn *c, int status, cJSON *o) {
        char *text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (text)
                gw_send_ex(c, status, "application/json", text, strlen(text), "Connection: close\r\n");
        else
                gw_send_ex(c, 500, NULL, NULL, 0, "Connection: close\r\n");
        free(text);
}

/* E2B's proxy error: {"sandboxId", "message", "code"} (and "port"). */
static void send_proxy_error(gw_conn *c, int status, const char *sandbox, unsigned port, const char *msg) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "sandboxId", sandbox);
        cJSON_AddStringToObject(o, "message", msg);
        if (port)
                cJSON_AddNumberToObject(o, "port", port);
        cJSON_AddNumberToObject(o, "code", status);
        send_json_close(c, status, o);
}

static void send_error_close(gw_conn *c, int status, const char *msg) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "code", status);
        cJSON_AddStringToObject(o, "message", msg);
        send_json_close(c, status, o);
}

/* sandbox.get of `sandbox` as `tenant`: the Sandbox (new), or NULL with
 * *ret_status 404 (none of this tenant) or another status and *ret_msg. */
static cJSON *get_as(const gw_config *cfg, const char *tenant, const char *sandbox, int *ret_status,
                     char **ret_msg) {
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        cJSON_AddStringToObject(p, "name", sandbox);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "sandbox.get", p, &res, &err) < 0) {
                *ret_status = gw_status_of(err);
                if (*ret_status != 404 && asprintf(ret_msg, "get sandbox: %s", err ? err->message : "failed") < 0)
                        *ret_msg = NULL;
                client_error_free(err);
                return NULL;
        }
        return res;
}

/* Whether `tenant` owns sandbox `sandbox`: its sandbox.list by that
 * name as prefix holds it (a list answers a tenant's own sandboxes, so
 * asking a tenant that does not own it is no refused call in the daemon's
 * log). 1, 0, or -1 with *ret_status and *ret_msg when the daemon fails. */
static int owns(const gw_config *cfg, const char *tenant, const char *sandbox, int *ret_status, char **ret_msg) {
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        cJSON_AddStringToObject(p, "namePrefix", sandbox);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "sandbox.list", p, &res, &err) < 0) {
                *ret_status = 502;
                if (asprintf(ret_msg, "list sandboxes: %s", err ? err->message : "failed") < 0)
                        *ret_msg = NULL;
                client_error_free(err);
                return -1;
        }
        const cJSON *it;
        int found = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(res, "sandboxes")) {
                const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "name"));
                if (n && !strcmp(n, sandbox))
                        found = 1;
        }
        cJSON_Delete(res);
        return found;
}

/* The sandbox and its tenant (into tenant, 80 bytes): a->tenant when a
 * traffic token named it, else the keys file's tenant owning it. NULL
 * with *ret_status (404: no tenant of the gateway has it). */
static cJSON *find_sandbox(const gw_config *cfg, const gw_auth *a, char *tenant, int *ret_status, char **ret_msg) {
        if (a->tenant[0]) {
                snprintf(tenant, 80, "%s", a->tenant);
                return get_as(cfg, tenant, a->sandbox, ret_status, ret_msg);
        }
        unsigned slot = owner_slot(a->sandbox);
        char hint[80] = "";
        pthread_mutex_lock(&owners_lock);
        if (!strcmp(owners[slot].sandbox, a->sandbox))
                snprintf(hint, sizeof(hint), "%s", owners[slot].tenant);
        pthread_mutex_unlock(&owners_lock);
        cJSON *sb = NULL;
        int o = hint[0] ? owns(cfg, hint, a->sandbox, ret_status, ret_msg) : 0;
        if (o < 0)
                return NULL;
        if (o > 0 && (sb = get_as(cfg, hint, a->sandbox, ret_status, ret_msg))) {
                snprintf(tenant, 80, "%s", hint);
                return sb;
        }
        if (o > 0 && *ret_status != 404)
                return NULL;
        char (*tenants)[80] = calloc(TENANTS_MAX, 80);
        int n = tenants ? gw_key_tenants(cfg->keys_path, tenants, TENANTS_MAX) : -ENOMEM;
        if (n < 0) {
                free(tenants);
                *ret_status = 500;
                if (asprintf(ret_msg, "the gateway cannot read its keys file: %s", strerror(-n)) < 0)
                        *ret_msg = NULL;
                return NULL;
        }
        *ret_status = 404;
        for (int i = 0; i < n && !sb; i++) {
                if (!strcmp(tenants[i], hint))
                        continue;
                o = owns(cfg, tenants[i], a->sandbox, ret_status, ret_msg);
                if (o < 0)
                        break;
                if (o == 0)
                        continue;
                sb = get_as(cfg, tenants[i], a->sandbox, ret_status, ret_msg);
                if (sb) {
                        snprintf(tenant, 80, "%s", tenants[i]);
                        pthread_mutex_lock(&owners_lock);
                        snprintf(owners[slot].sandbox, sizeof(owners[slot].sandbox), "%s", a->sandbox);
                        snprintf(owners[slot].tenant, sizeof(owners[slot].tenant), "%s", tenants[i]);
                        pthread_mutex_unlock(&owners_lock);
                } else if (*ret_status != 404)
                        break;
        }
        free(tenants);
        return sb;
}

static bool is_public(const cJSON *sb) {
        const char *v = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sb, "tags"), GW_PUBLIC_TAG));
        return v && !strcmp(v, "true");
}

/* The host endpoint of `port` in sb's `ports` ("127.0.0.1:N"), borrowed;
 * NULL when the port is not listed or has no endpoint (no session). */
static const char *endpoint_of(const cJSON *sb, unsigned port) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(sb, "ports")) {
                if (cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "port")) == port)
                        return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "endpoint"));
        }
        return NULL;
}

/* sandbox.update of `sandbox`'s ports: `port` added (add) or taken out,
 * from the list read anew under ports_lock. The Sandbox (new) or NULL
 * with *ret_status and *ret_msg. */
static cJSON *change_ports(const gw_config *cfg, const char *tenant, const char *sandbox, unsigned port, bool add,
                           int *ret_status, char **ret_msg) {
        pthread_mutex_lock(&ports_lock);
        cJSON *sb = get_as(cfg, tenant, sandbox, ret_status, ret_msg), *res = NULL;
        if (!sb)
                goto out;
        cJSON *p = cJSON_CreateObject(), *list = cJSON_CreateArray();
        const cJSON *it;
        bool listed = false;
        int n = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(sb, "ports")) {
                double v = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(it, "port"));
                if (v == port)
                        listed = true;
                if (v == port && !add)
                        continue;
                cJSON_AddItemToArray(list, cJSON_CreateNumber(v));
                n++;
        }
        if (add && listed) { /* another request added it meanwhile */
                cJSON_Delete(p);
                cJSON_Delete(list);
                res = sb;
                sb = NULL;
                goto out;
        }
        if (!add && !listed) {
                cJSON_Delete(p);
                cJSON_Delete(list);
                goto out;
        }
        if (add && n >= PORTS_MAX) {
                cJSON_Delete(p);
                cJSON_Delete(list);
                *ret_status = 502;
                if (asprintf(ret_msg, "sandbox %s exposes %d ports, sandboxd's most (docs/API.md ports): port %u "
                                      "cannot be added",
                             sandbox, PORTS_MAX, port) < 0)
                        *ret_msg = NULL;
                goto out;
        }
        if (add)
                cJSON_AddItemToArray(list, cJSON_CreateNumber(port));
        cJSON_AddStringToObject(p, "name", sandbox);
        cJSON_AddItemToObject(p, "ports", list);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "sandbox.update", p, &res, &err) < 0) {
                res = NULL;
                *ret_status = gw_status_of(err) == 404 ? 404 : 502;
                if (asprintf(ret_msg, "expose port %u of sandbox %s (sandbox.update ports): %s", port, sandbox,
                             err ? err->message : "failed") < 0)
                        *ret_msg = NULL;
                client_error_free(err);
        }
out:
        pthread_mutex_unlock(&ports_lock);
        cJSON_Delete(sb);
        return res;
}

/* A TCP connection to endpoint "ADDR:PORT" (IPv4, or [IPv6]): the fd or
 * -errno. */
static int connect_endpoint(const char *ep) {
        const char *colon = strrchr(ep, ':');
        char addr[64];
        if (!colon || (size_t) (colon - ep) >= sizeof(addr))
                return -EINVAL;
        memcpy(addr, ep, (size_t) (colon - ep));
        addr[colon - ep] = 0;
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port < 1 || port > 65535)
                return -EINVAL;
        struct sockaddr_storage ss = {0};
        socklen_t len;
        char *a = addr;
        size_t al = strlen(a);
        if (a[0] == '[' && al > 2 && a[al - 1] == ']') {
                a[al - 1] = 0;
                a++;
        }
        struct sockaddr_in *s4 = (struct sockaddr_in *) &ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *) &ss;
        if (inet_pton(AF_INET, a, &s4->sin_addr) == 1) {
                s4->sin_family = AF_INET;
                s4->sin_port = htons((uint16_t) port);
                len = sizeof(*s4);
        } else if (inet_pton(AF_INET6, a, &s6->sin6_addr) == 1) {
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons((uint16_t) port);
                len = sizeof(*s6);
        } else
                return -EINVAL;
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &ss, len) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static int send_all(int fd, const char *p, size_t len) {
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -EPIPE;
                p += n;
                len -= (size_t) n;
        }
        return 0;
}

/* The request head again from its parsed fields (new string, *ret_len
 * bytes), without the traffic token (it opens the sandbox's ports; the
 * sandbox's servers need not see it). NULL when a value holds a CR, LF
 * or NUL (not one well-formed head). */
static char *head_of(const gw_request *r, int http_minor, size_t *ret_len) {
        char *out = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&out, &len);
        if (!f)
                return NULL;
        bool ok = true;
        fprintf(f, "%s %s%s%s HTTP/1.%d\r\n", r->method, r->path, r->query ? "?" : "", r->query ? r->query : "",
                http_minor ? 1 : 0);
        for (size_t i = 0; i < r->n_headers; i++) {
                const char *n = r->headers[i].name, *v = r->headers[i].value ? r->headers[i].value : "";
                if (!n || strpbrk(n, "\r\n:") || strpbrk(v, "\r\n"))
                        ok = false;
                if (!n || !strcasecmp(n, "E2b-Traffic-Access-Token"))
                        continue;
                fprintf(f, "%s: %s\r\n", n, v);
        }
        fputs("\r\n", f);
        if (fclose(f) != 0 || !ok || strpbrk(r->method, "\r\n ") || strpbrk(r->path, "\r\n ") ||
            (r->query && strpbrk(r->query, "\r\n "))) {
                free(out);
                return NULL;
        }
        *ret_len = len;
        return out;
}

/* Relays bytes both ways between the caller and `up` until the sandbox's
 * side ends (or the caller's, once the sandbox's answer is through), or
 * TUNNEL_IDLE_SECONDS pass with none. Returns the bytes the sandbox's
 * side sent. */
static size_t relay(gw_conn *c, int up) {
        char buf[65536];
        size_t from_up = 0;
        bool client_open = true;
        struct timeval tv = { .tv_sec = TUNNEL_IDLE_SECONDS };
        (void) setsockopt(gw_conn_fd(c), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        for (;;) {
                struct pollfd pf[2] = { { .fd = client_open ? gw_conn_fd(c) : -1, .events = POLLIN },
                                        { .fd = up, .events = POLLIN } };
                if (!(client_open && gw_conn_pending(c) > 0)) {
                        int n = poll(pf, 2, TUNNEL_IDLE_SECONDS * 1000);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                break;
                } else
                        pf[0].revents = POLLIN;
                if (pf[0].revents) {
                        ssize_t n = gw_conn_read(c, buf, sizeof(buf));
                        if (n <= 0) {
                                /* The caller is done sending: the sandbox's
                                 * side sees the end, its answer still comes. */
                                client_open = false;
                                (void) shutdown(up, SHUT_WR);
                        } else if (send_all(up, buf, (size_t) n) < 0)
                                break;
                }
                if (pf[1].revents) {
                        ssize_t n;
                        do
                                n = recv(up, buf, sizeof(buf), 0);
                        while (n < 0 && errno == EINTR);
                        if (n <= 0)
                                break;
                        from_up += (size_t) n;
                        if (gw_conn_write(c, buf, (size_t) n) < 0)
                                break;
                }
        }
        return from_up;
}

void gw_port_proxy(const gw_config *cfg, gw_conn *c, const gw_request *r, const gw_auth *a, int http_minor,
                   const char *rest, size_t len) {
        char tenant[80] = "", *msg = NULL;
        int status = 0;
        cJSON *sb = find_sandbox(cfg, a, tenant, &status, &msg);
        if (!sb) {
                if (status == 404)
                        send_proxy_error(c, 502, a->sandbox, 0, "The sandbox was not found");
                else if (!a->tenant[0]) /* no tenant: nothing of the host's (paths, daemon messages) */
                        send_error_close(c, 502, "the gateway cannot reach sandboxd; retry later");
                else
                        send_error_close(c, status, msg ? msg : "get sandbox: failed");
                goto out;
        }
        if (!a->tenant[0] && !is_public(sb)) {
                send_error_close(c, 403, "e2b-traffic-access-token: missing: this sandbox's ports are not public "
                                         "(network.allowPublicTraffic false); send its trafficAccessToken");
                goto out;
        }
        if (!a->tenant[0] && !gw_rate_take(tenant)) {
                send_error_close(c, 429, "rate limit exceeded: the sandbox's tenant receives more requests a second "
                                         "than the gateway allows (--rate); retry later");
                goto out;
        }
        const cJSON *session = cJSON_GetObjectItemCaseSensitive(sb, "session");
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "status"));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(session, "paused"))) {
                /* autoResume (a tag of the gateway's create): the request
                 * resumes it, as its tenant; without it the caller must
                 * connect first. */
                const char *ar = cJSON_GetStringValue(
                        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sb, "tags"), GW_AUTORESUME_TAG));
                if (!ar || strcmp(ar, "true")) {
                        send_proxy_error(c, 502, a->sandbox, a->port,
                                         "The sandbox is paused: connect to it (resume) to reach its ports");
                        goto out;
                }
                cJSON *p = cJSON_CreateObject(), *res = NULL;
                cJSON_AddStringToObject(p, "name", a->sandbox);
                client_error *err = NULL;
                if (gw_daemon_call(cfg, tenant, "sandbox.resume", p, &res, &err) < 0) {
                        char *m = NULL;
                        if (asprintf(&m, "autoResume: resume the sandbox: %s", err ? err->message : "failed") < 0)
                                m = NULL;
                        send_proxy_error(c, 502, a->sandbox, a->port, m ? m : "autoResume: resume failed");
                        free(m);
                        client_error_free(err);
                        goto out;
                }
                cJSON_Delete(sb);
                sb = res;
                st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb, "status"));
        }
        if (!st || strcmp(st, "running")) {
                send_proxy_error(c, 502, a->sandbox, 0, "The sandbox was not found");
                goto out;
        }
        size_t head_len = 0;
        char *head = head_of(r, http_minor, &head_len);
        if (!head) {
                send_error_close(c, 400, "bad HTTP request: a header holds a CR or LF");
                goto out;
        }
        int up = -ECONNREFUSED;
        bool added = false;
        /* The endpoint, adding the port when it is not listed; a refused
         * connect (the port taken out meanwhile, by another gateway's
         * update or a restart of the daemon) is tried again from a fresh
         * sandbox.get. */
        for (int attempt = 0; attempt < 3 && up < 0; attempt++) {
                const char *ep = endpoint_of(sb, a->port);
                if (!ep) {
                        cJSON *nsb = change_ports(cfg, tenant, a->sandbox, a->port, true, &status, &msg);
                        if (!nsb)
                                break;
                        cJSON_Delete(sb);
                        sb = nsb;
                        added = true;
                        ep = endpoint_of(sb, a->port);
                }
                up = ep ? connect_endpoint(ep) : -ENOENT;
                if (up < 0 && attempt < 2) {
                        cJSON *nsb = get_as(cfg, tenant, a->sandbox, &status, &msg);
                        if (!nsb)
                                break;
                        cJSON_Delete(sb);
                        sb = nsb;
                }
        }
        if (up < 0) {
                free(head);
                if (status == 404)
                        send_proxy_error(c, 502, a->sandbox, 0, "The sandbox was not found");
                else if (msg)
                        send_proxy_error(c, 502, a->sandbox, a->port, msg);
                else
                        send_proxy_error(c, 502, a->sandbox, a->port, "The sandbox's port could not be reached");
                goto out;
        }
        /* A sandbox's server that stops reading holds the relay no longer
         * than an idle one. */
        struct timeval tv = { .tv_sec = TUNNEL_IDLE_SECONDS };
        (void) setsockopt(up, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        size_t got = 0;
        if (send_all(up, head, head_len) == 0 && (len == 0 || send_all(up, rest, len) == 0))
                got = relay(c, up);
        free(head);
        close(up);
        if (got == 0) {
                /* Nothing answered: the daemon connects to the port inside
                 * the sandbox and closes when nothing listens there. A port
                 * this request added is taken out again, so probing ports
                 * cannot fill the sandbox's list. */
                if (!gw_conn_failed(c))
                        send_proxy_error(c, 502, a->sandbox, a->port, "The sandbox is running but port is not open");
                if (added) {
                        char *m2 = NULL;
                        int s2 = 0;
                        cJSON_Delete(change_ports(cfg, tenant, a->sandbox, a->port, false, &s2, &m2));
                        free(m2);
                }
        }
out:
        free(msg);
        cJSON_Delete(sb);
}
