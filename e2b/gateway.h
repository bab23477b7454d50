/* sandboxd-e2b (docs/E2B.md): the gateway that serves E2B's control API
 * and each sandbox's envd protocol over HTTP/1.1, as a client of
 * sandboxd's Unix socket that acts, per daemon connection, as the tenant
 * its caller's API key names (session.actAs, docs/SECURITY.md §4.3).
 *
 * Runs unprivileged: it parses HTTP from the network and holds no power
 * of its own over the daemon (its uid is one of daemon.json
 * tenants.gateways, whose connections can do nothing until they name a
 * tenant). One thread per HTTP connection; each request opens its own
 * daemon connection, so one tenant's request never shares a connection
 * (or an identity) with another's. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <cjson/cJSON.h>
#include "cli/client.h"

/* The envd version the gateway reports (Sandbox.envdVersion): the SDK's
 * feature gates read it: 0.4.0 and later force no default user; 0.5.2
 * has CloseStdin; 0.5.7 octet-stream uploads (gzip too); 0.6.2 file
 * metadata (user.e2b.* xattrs); 0.6.3 WatchDir includeEntry; 0.6.4
 * WatchDir allowNetworkMounts. */
#define GW_ENVD_VERSION "0.6.4"

/* envd's port in E2B's host names (PORT-ID.DOMAIN, route.c). */
#define GW_ENVD_PORT 49983

/* Longest request body read, in bytes (a files upload of fs.write's
 * largest single piece plus multipart framing). */
#define GW_MAX_BODY ((size_t) 64 << 20)

/* Keys file (keys.c): "secret HEX" once, then "key TENANT SHA256HEX" lines. */
#define GW_SECRET_BYTES 32

typedef struct ssl_ctx_st SSL_CTX;

typedef struct gw_config {
        const char *socket_path;
        const char *keys_path;
        SSL_CTX *tls;   /* --tls-cert/--tls-key: HTTPS on the listener; NULL: plain HTTP */
        const char *domain; /* --domain: E2B's sandbox domain (HOST[:PORT]) of PORT-ID.DOMAIN names; NULL: any */
} gw_config;

/* The tag that marks a sandbox's exposed ports as open to anyone with
 * their URL (E2B's network.allowPublicTraffic, true by default): set by
 * the gateway's create, hidden from `metadata`. Without it a port is
 * served only with the sandbox's traffic token (route.c, ports.c). */
#define GW_PUBLIC_TAG "e2b.publicTraffic"
/* The tag of a sandbox made with E2B's autoResume: a request to one of
 * its exposed ports resumes it when it is paused (ports.c). Hidden from
 * `metadata` as the one above. */
#define GW_AUTORESUME_TAG "e2b.autoResume"

/* The snapshot tag (sandbox.snapshot tags) that holds a snapshot's E2B
 * name (POST /sandboxes/{id}/snapshots {"name"}, GET /snapshots?name=,
 * and a templateID naming it). */
#define GW_NAME_TAG "e2b.name"

/* One parsed HTTP request (http.c). All strings owned by the request. */
typedef struct gw_header {
        char *name, *value;
} gw_header;

typedef struct gw_request {
        char *method;       /* "GET", "POST", ... */
        char *path;         /* the URL's path, not decoded */
        char *query;        /* after '?', or NULL */
        gw_header *headers;
        size_t n_headers;
        char *body;         /* NUL-terminated for convenience; body_len bytes */
        size_t body_len;
} gw_request;

/* The connection a handler answers on (http.c). */
typedef struct gw_conn gw_conn;

/* ---- http.c ---- */

/* A header's value (case-insensitive name), borrowed; NULL when absent. */
const char *gw_header_get(const gw_request *r, const char *name);
/* The query parameter `key`, percent-decoded (new string; NULL when absent
 * or on ENOMEM). */
char *gw_query_get(const gw_request *r, const char *key);
/* Percent-decodes `s` (and '+' as space when `plus`); new string or NULL. */
char *gw_url_decode(const char *s, size_t len, bool plus);

/* Sends a complete response with `body` (len bytes; may be NULL for
 * none) and content type `ctype` (NULL: none). Returns 0 or -errno. */
int gw_send(gw_conn *c, int status, const char *ctype, const void *body, size_t len);
/* The same with `extra` (NULL: none): header lines, each ending in CRLF,
 * at most 256 bytes together. */
int gw_send_ex(gw_conn *c, int status, const char *ctype, const void *body, size_t len, const char *extra);
/* Sends `json` (taken) with status. */
int gw_send_json(gw_conn *c, int status, cJSON *json);
/* E2B's error shape {"code": status, "message": ...} (openapi Error). */
int gw_send_error(gw_conn *c, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A chunked response: the head, then chunks, then the end. */
int gw_send_chunked_head(gw_conn *c, int status, const char *ctype);
int gw_send_chunk(gw_conn *c, const void *data, size_t len);
int gw_send_chunked_end(gw_conn *c);
/* The connection's socket (for poll), and whether a write to it failed. */
int gw_conn_fd(const gw_conn *c);
bool gw_conn_failed(const gw_conn *c);
/* Serves HTTP/1.1 on accepted socket `fd` (taken) until the peer closes,
 * over TLS when cfg->tls is set (the handshake first): each request goes
 * to gw_route(). */
void gw_serve_conn(const gw_config *cfg, int fd);
/* The same for a connection holding `slot` of the connection table
 * (conns.c; taken, may be NULL): the slot is marked keyed once a request
 * head carries a valid API key or envd token, and released before `fd`
 * is closed. */
typedef struct gw_slot gw_slot;
void gw_serve_conn_slot(const gw_config *cfg, int fd, gw_slot *slot);

/* Most parts of one multipart body: each is a daemon call (fs.write), so
 * a 64 MiB body of tiny parts would be millions of them. */
#define GW_MAX_PARTS 1000

/* A multipart/form-data body's parts (r's Content-Type boundary): each
 * part's filename (new string or NULL) and bytes (borrowed from r->body).
 * Returns 0 with *ret (free each filename and the array), -EINVAL when
 * the body is not multipart with at least one part, -E2BIG past
 * GW_MAX_PARTS parts. */
typedef struct gw_part {
        char *filename;
        const char *data;
        size_t len;
} gw_part;
int gw_multipart(const gw_request *r, gw_part **ret, size_t *ret_n);

/* Bytes of request bodies all connections together may hold at once
 * (gw_http_set_bodies_max): past it a request is answered 503 before its
 * body is read, so many large uploads cannot exhaust the gateway's
 * memory (256 connections x GW_MAX_BODY would be 16 GiB). */
#define GW_BODIES_MAX_DEFAULT ((size_t) 512 << 20)
/* Sets that bound (bytes, at least GW_MAX_BODY makes every single body
 * possible); for the tests and main(). */
void gw_http_set_bodies_max(size_t bytes);
/* Takes `n` bytes of that budget for `tenant`'s body held outside the
 * parser (a file download, envd.c); false (nothing taken) when they are
 * not there, in all or in `tenant`'s share: one tenant holds at most half
 * the budget (but always GW_MAX_BODY), so that one key's stalled bodies
 * cannot refuse every other tenant's. Each take is given back with
 * gw_budget_release(tenant, n). */
bool gw_budget_take(const char *tenant, size_t n);
void gw_budget_release(const char *tenant, size_t n);

/* Seconds a request's head may take to arrive, from when the gateway
 * begins to wait for it (accept, or the previous answer): past them the
 * connection is answered 408 (when part of a head came) and closed.
 * gw_http_set_head_seconds changes it (for the tests). */
#define GW_HEAD_SECONDS_DEFAULT 30
void gw_http_set_head_seconds(unsigned seconds);

/* ---- conns.c ---- */

/* Connections the gateway serves at once (a thread each), and how many of
 * them one peer address may hold (IPv4: the address; IPv6: its /64).
 * docs/SECURITY.md §4.3. */
#define GW_CONNS_MAX_DEFAULT 256
#define GW_CONNS_PER_ADDR_DEFAULT 32
/* Sets both bounds (0 counts as 1); main() (--max-conns,
 * --max-conns-per-addr) and the tests, while no connection is held. */
void gw_conns_set_limits(unsigned max, unsigned per_addr);
/* Admits accepted socket `fd` from `peer` (peer_len bytes; a Unix
 * socket's counts as one address of its own): 0 with *ret (give it back
 * with gw_conns_release, before closing fd). When the table is full the
 * oldest connection that has not presented a valid key or token is cut
 * (shutdown(2) of its socket: its thread sees the end) to make room;
 * when every one has presented a key, the oldest of a tenant holding
 * more than its share (gw_conns_keyed) is.
 * Errors: -EUSERS, `peer`'s address holds its share already; -EAGAIN,
 * every connection has presented a key, no tenant past its share;
 * -ENOMEM. Nothing is taken on error. */
int gw_conns_admit(const struct sockaddr *peer, socklen_t peer_len, int fd, gw_slot **ret);
/* Marks the connection of `slot` (NULL: nothing) as having presented a
 * valid API key or envd token of `tenant` (the first one presented on it
 * counts): it is no longer cut to make room for a connection without a
 * key, nor for any while `tenant` holds at most a quarter of the table
 * of keyed connections (past that its oldest is cut for a newcomer when
 * every connection is keyed). Returns
 * false when it was cut already (its head may have arrived just before):
 * the request must not be served, its answer could not be sent. */
bool gw_conns_keyed(gw_slot *slot, const char *tenant);
/* A request of `tenant` begins on the connection of `slot` (NULL: always
 * true): false when that tenant has a quarter of the table's requests
 * (at least 1) being served already (answer 429), for each holds one or
 * two daemon connections, of which the daemon allows the gateway's uid a
 * bounded number (daemon.json maxConnectionsPerUser, 256). A true begin
 * is ended with gw_conns_end(slot) once the request is answered. */
bool gw_conns_begin(gw_slot *slot, const char *tenant);
void gw_conns_end(gw_slot *slot);
/* Gives `slot` (NULL: nothing) back; its fd must still be open. */
void gw_conns_release(gw_slot *slot);
/* Connections held now (not counting ones cut and still leaving). */
unsigned gw_conns_held(void);

/* ---- rate.c ---- */

/* Requests a second one tenant (all its API keys and envd tokens
 * together) may send, sustained; a bucket of twice that absorbs bursts.
 * docs/SECURITY.md §4.3. */
#define GW_RATE_DEFAULT 100
/* Sets the rate (requests a second, 0 counts as 1; main()'s --rate) and
 * the clock in milliseconds (NULL: CLOCK_MONOTONIC; the tests pass one
 * they move themselves), and empties the table: every tenant starts with
 * a full bucket. */
void gw_rate_set(unsigned per_second, int64_t (*now_ms)(void));
/* Takes one request from `tenant`'s bucket: true when there was one,
 * false when the tenant is over its rate (answer 429). */
bool gw_rate_take(const char *tenant);

/* ---- route.c ---- */

/* Who sends a request, decided from its head alone (method, path,
 * headers) as soon as the head is complete, so the body of a request
 * without a valid API key or token is never read: status 0 with the
 * tenant (and, for envd, the sandbox) when it may go on, else the HTTP
 * status to answer (200/204 for /health, 400, 401, 500) with msg ("" for
 * no body). */
typedef struct gw_auth {
        int status;
        bool envd;              /* E2b-Sandbox-Id named a sandbox: envd */
        unsigned port;          /* Host PORT-ID.DOMAIN of an exposed port (not envd's): ports.c */
        char tenant[80];
        char sandbox[64];
        char msg[200];
} gw_auth;
void gw_authenticate(const gw_config *cfg, const gw_request *r, gw_auth *ret);
/* Serves request `r` whose head gave `auth` (gw_authenticate). */
void gw_route(const gw_config *cfg, gw_conn *c, const gw_request *r, const gw_auth *auth);

/* ---- ports.c ---- */

/* Serves a request to exposed port auth->port of sandbox auth->sandbox
 * (the Host PORT-ID.DOMAIN, E2B's getHost()): finds the sandbox's tenant
 * (auth->tenant when a traffic token named it, else the tenant of the
 * keys file that owns it, which must have made its ports public), makes
 * the port one of the sandbox's `ports` (sandbox.update) and relays the
 * request, re-sent from its parsed head, then every byte after it either
 * way, through the daemon's endpoint of that port, until either side
 * closes. `rest` (len bytes) is what followed the head in the read.
 * The connection is not parsed again: it belongs to that port for the
 * rest of its life. Answers E2B's errors (403, 502 {sandboxId, message,
 * code}) itself. */
void gw_port_proxy(const gw_config *cfg, gw_conn *c, const gw_request *r, const gw_auth *auth, int http_minor,
                   const char *rest, size_t len);
/* One read from the connection (plain or TLS): >0 bytes, 0 at the end,
 * <0 on an error (http.c). Bytes buffered by TLS are read before the
 * socket: gw_conn_pending says how many. */
ssize_t gw_conn_read(gw_conn *c, char *buf, size_t size);
size_t gw_conn_pending(gw_conn *c);
/* Writes all of data to the connection: 0 or -EPIPE. */
int gw_conn_write(gw_conn *c, const void *data, size_t len);

/* ---- keys.c ---- */

/* `sandboxd-e2b key add TENANT --keys FILE`: makes a new key (into
 * ret_key, size bytes: 45 are enough) and appends only its SHA-256 to the
 * keys file (made 0600 with a new secret when missing), under flock.
 * Returns an exit status: 0, 1 (I/O; said on stderr), 2 (a bad tenant). */
int gw_key_add(const char *tenant, const char *keys_path, char *ret_key, size_t size);
/* The tenant of API key `key` (checked against the keys file, read anew
 * each time so `key add` takes effect at once). Returns 0 with the tenant
 * in ret (size bytes), -EACCES for an unknown key, other -errno when the
 * file cannot be read. */
int gw_key_tenant(const char *keys_path, const char *key, char *ret, size_t size);
/* The envd access token of sandbox `sandbox` for tenant `tenant`:
 * "TENANT.HMAC" (HMAC-SHA256 under the keys file's secret, hex), a new
 * string, NULL on failure. */
char *gw_envd_token(const char *keys_path, const char *tenant, const char *sandbox);
/* Checks `token` for sandbox `sandbox`: 0 with its tenant in ret, or
 * -EACCES (a bad token, or its tenant has no key left in the file:
 * removing a tenant's last key ends its tokens too). */
int gw_envd_token_check(const char *keys_path, const char *token, const char *sandbox, char *ret, size_t size);
/* E2B's signature of a file URL, as the SDK's getSignature() makes it
 * (packages/js-sdk/src/sandbox/signature.ts): "v1_" and the base64 of
 * SHA-256("PATH:OP:USER:TOKEN") (":EXP" appended when `exp`, the
 * signature_expiration, is not NULL), without '=' padding. `op` is
 * "read" or "write", `user` "" when the URL names none. Into out; 0 or
 * -errno. */
#define GW_SIGNATURE_SIZE 64
int gw_file_signature(const char *path, const char *op, const char *user, const char *token, const char *exp,
                      char out[GW_SIGNATURE_SIZE]);
/* The tenant and sandbox whose envd token signed `sig` (compared in
 * constant time): for `sandbox` (NULL: one of the sandboxes whose tokens
 * this gateway handed out or accepted lately, at most 1024) the token of
 * each tenant with a key. 0 with both, -EACCES when none did (or its
 * tenant has no key left), other -errno when the keys file cannot be
 * read. The expiration is the caller's to check. */
int gw_signature_find(const char *keys_path, const char *sandbox, const char *path, const char *op, const char *user,
                      const char *exp, const char *sig, char *ret_tenant, size_t tsize, char *ret_sandbox,
                      size_t ssize);
/* The traffic access token of sandbox `sandbox` for tenant `tenant`
 * (E2B's trafficAccessToken: it opens the sandbox's exposed ports by host
 * name, nothing else): "TENANT.HMAC" as the envd token, over a message
 * of its own, so neither token is ever the other. New string, NULL on
 * failure. */
char *gw_traffic_token(const char *keys_path, const char *tenant, const char *sandbox);
/* Checks a traffic token for `sandbox` as gw_envd_token_check does. */
int gw_traffic_token_check(const char *keys_path, const char *token, const char *sandbox, char *ret, size_t size);
/* The distinct tenants with a key in the keys file, at most `max` of them
 * into ret: their count, or -errno when the file cannot be read. */
int gw_key_tenants(const char *keys_path, char (*ret)[80], size_t max);
/* Whether the keys file is private to this uid: 0, -EPERM when another
 * uid could read or write it (group or other mode bits, another owner,
 * not a regular file; then every request it would serve is refused too),
 * other -errno when it cannot be opened. */
int gw_keys_check(const char *keys_path);
/* True for a tenant name the daemon accepts (session.actAs). */
bool gw_tenant_name_ok(const char *s);

/* ---- daemon.c ---- */

/* A new daemon connection acting as `tenant` (session.actAs). Returns 0
 * and *ret, or -errno with *ret_msg (new string) saying what failed. */
int gw_daemon_open(const gw_config *cfg, const char *tenant, client **ret, char **ret_msg);
/* One call on a new connection as `tenant`: 0 with *ret_result, or
 * -errno with *ret_err (a local error when the connection failed). */
int gw_daemon_call(const gw_config *cfg, const char *tenant, const char *method, cJSON *params,
                   cJSON **ret_result, client_error **ret_err);
/* The HTTP status E2B would answer for a daemon error. */
int gw_status_of(const client_error *e);

/* ---- envd.c: client streams ----
 *
 * process.Process/StreamInput is a client stream: its request body is a
 * sequence of Connect envelopes that ends only with the process's input,
 * so it is not read whole before it is answered (http.c hands its bytes
 * over as they come). */
typedef struct gw_instream gw_instream;
/* Whether request head `r` (authenticated for an envd) is a client
 * stream the gateway serves (POST /process.Process/StreamInput with
 * Content-Type application/connect+json). */
bool gw_instream_wanted(const gw_request *r);
/* A new client stream for `tenant`'s sandbox `sandbox` (copied), or NULL
 * on ENOMEM. */
gw_instream *gw_instream_open(const gw_config *cfg, const char *tenant, const char *sandbox);
/* Takes the next `n` bytes of the body: each whole envelope is acted on
 * at once (start: the process its selector names; data: command.write;
 * keepalive: nothing). Returns 0, or -1 after the first failure (kept
 * for gw_instream_finish; the rest of the body is not to be read). */
int gw_instream_feed(gw_instream *s, const char *data, size_t n);
/* Answers the stream on `c` (NULL: the caller went away, nothing is
 * sent): the end-of-stream message with the failure, if any, or an empty
 * StreamInputResponse; then frees `s` (NULL: nothing). */
void gw_instream_finish(gw_instream *s, gw_conn *c);

/* ---- control.c / envd.c ---- */
void gw_control(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant);
void gw_envd(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *sandbox);
