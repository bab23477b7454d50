/* HTTP/1.1 for sandboxd-e2b: requests parsed with the packaged
 * http_parser (as policy/http.c does), keep-alive, one request at a time
 * per connection (E2B's SDKs do not pipeline), responses with a length or
 * chunked (Connect server streams).
 *
 * Threat: this code reads bytes from the network. Bounds: a head of at
 * most 64 KiB and 100 headers, a body of at most GW_MAX_BODY; anything
 * over is answered 413/431 and the connection closed; bodies of all
 * connections together at most the budget of gw_http_set_bodies_max
 * (503 past it). Access is decided by route.c from the head alone, before
 * any byte of the body is read: a request that may not go on is answered
 * at once, and when it has a body the connection is closed unread. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <http_parser.h>
#include <openssl/ssl.h>
#include "e2b/gateway.h"
#include "libcore/buf.h"
#include "libcore/urldecode.h"

#define HEAD_MAX (64u * 1024)

struct gw_conn;
static int write_all(struct gw_conn *c, const void *data, size_t len);
#define HEADERS_MAX 100

struct gw_conn {
        int fd;
        SSL *ssl;       /* --tls-cert: the TLS session over fd, else NULL */
        bool failed;    /* a write failed: close */
        bool close;     /* Connection: close asked */
};

typedef struct parse_state {
        const gw_config *cfg;
        gw_slot *slot;  /* of the connection table (conns.c), or NULL */
        gw_request req;
        gw_auth auth;   /* from the head (gw_authenticate) */
        char *url;
        size_t url_len, head_bytes;
        size_t reserved; /* of the bodies budget, for this request's body */
        bool in_value;
        bool done, too_big, head_too_big;
        bool head_done; /* the head is complete (its deadline is met) */
        bool refused;   /* answered from the head; the body is not read */
        bool busy;      /* the bodies budget is spent: 503 */
        bool cut;       /* the connection table cut it (conns.c): close */
        bool begun;     /* gw_conns_begin took a request of its tenant */
        gw_instream *in; /* a client stream (envd.c): its body goes there, not to req.body */
        bool in_failed; /* ... and it failed: answered, the rest unread */
} parse_state;

/* ---- the bodies budget (all connections) ----
 *
 * One tenant holds at most half of it (but always a whole GW_MAX_BODY):
 * a tenant whose connections each declare a 64 MiB body and then send it
 * a byte now and then (each read within the idle bound) held all of it,
 * and every other tenant's uploads were answered 503. */

typedef struct tenant_bytes {
        char tenant[80];
        size_t held;
} tenant_bytes;

static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t bodies_max = GW_BODIES_MAX_DEFAULT, bodies_held;
static tenant_bytes *held_by; /* the tenants holding some of it now */
static size_t n_held_by;

void gw_http_set_bodies_max(size_t bytes) {
        pthread_mutex_lock(&budget_lock);
        bodies_max = bytes;
        pthread_mutex_unlock(&budget_lock);
}

/* What one tenant may hold. Under budget_lock. */
static size_t tenant_share(void) {
        return bodies_max / 2 > GW_MAX_BODY ? bodies_max / 2 : GW_MAX_BODY;
}

/* `tenant`'s entry (NULL when it holds nothing). Under budget_lock. */
static tenant_bytes *held_of(const char *tenant) {
        for (size_t i = 0; i < n_held_by; i++)
                if (!strcmp(held_by[i].tenant, tenant))
                        return &held_by[i];
        return NULL;
}

/* Takes n bytes for `tenant` when they fit both bounds. Under budget_lock. */
static bool take_locked(const char *tenant, size_t n) {
        tenant_bytes *t = held_of(tenant);
        size_t mine = t ? t->held : 0, share = tenant_share();
        if (n > bodies_max || bodies_held > bodies_max - n || n > share || mine > share - n)
                return false;
        if (!t) {
                tenant_bytes *nt = realloc(held_by, (n_held_by + 1) * sizeof(*nt));
                if (!nt)
                        return false;
                held_by = nt;
                t = &held_by[n_held_by++];
                snprintf(t->tenant, sizeof(t->tenant), "%s", tenant);
                t->held = 0;
        }
        t->held += n;
        bodies_held += n;
        return true;
}

/* Gives back n bytes of `tenant`'s. Under budget_lock. */
static void release_locked(const char *tenant, size_t n) {
        tenant_bytes *t = held_of(tenant);
        bodies_held -= n;
        if (t && (t->held -= n) == 0)
                *t = held_by[--n_held_by];
}

bool gw_budget_take(const char *tenant, size_t n) {
        pthread_mutex_lock(&budget_lock);
        bool ok = take_locked(tenant, n);
        pthread_mutex_unlock(&budget_lock);
        return ok;
}

void gw_budget_release(const char *tenant, size_t n) {
        pthread_mutex_lock(&budget_lock);
        release_locked(tenant, n);
        pthread_mutex_unlock(&budget_lock);
}

/* Takes n more bytes of the budget for s's body (its tenant's); false
 * when they are not there. */
static bool budget_take(parse_state *s, size_t n) {
        pthread_mutex_lock(&budget_lock);
        bool ok = take_locked(s->auth.tenant, n);
        if (ok)
                s->reserved += n;
        pthread_mutex_unlock(&budget_lock);
        return ok;
}

static void budget_release(parse_state *s) {
        pthread_mutex_lock(&budget_lock);
        if (s->reserved)
                release_locked(s->auth.tenant, s->reserved);
        pthread_mutex_unlock(&budget_lock);
        s->reserved = 0;
}

static void request_clear(gw_request *r) {
        free(r->method);
        free(r->path);
        free(r->query);
        for (size_t i = 0; i < r->n_headers; i++) {
                free(r->headers[i].name);
                free(r->headers[i].value);
        }
        free(r->headers);
        free(r->body);
        *r = (gw_request) {0};
}

static int on_url(http_parser *p, const char *at, size_t n) {
        parse_state *s = p->data;
        if ((s->head_bytes += n) > HEAD_MAX)
                return s->too_big = s->head_too_big = true, -1;
        return core_buf_append(&s->url, &s->url_len, at, n);
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
        parse_state *s = p->data;
        if ((s->head_bytes += n) > HEAD_MAX)
                return s->too_big = s->head_too_big = true, -1;
        gw_request *r = &s->req;
        if (s->in_value || r->n_headers == 0) {
                if (r->n_headers >= HEADERS_MAX)
                        return s->too_big = s->head_too_big = true, -1;
                gw_header *h = realloc(r->headers, (r->n_headers + 1) * sizeof(*h));
                if (!h)
                        return -1;
                r->headers = h;
                h[r->n_headers++] = (gw_header) {0};
                s->in_value = false;
        }
        gw_header *h = &r->headers[r->n_headers - 1];
        size_t len = h->name ? strlen(h->name) : 0;
        return core_buf_append(&h->name, &len, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
        parse_state *s = p->data;
        if ((s->head_bytes += n) > HEAD_MAX)
                return s->too_big = s->head_too_big = true, -1;
        if (s->req.n_headers == 0)
                return -1;
        s->in_value = true;
        gw_header *h = &s->req.headers[s->req.n_headers - 1];
        size_t len = h->value ? strlen(h->value) : 0;
        return core_buf_append(&h->value, &len, at, n);
}

static int on_body(http_parser *p, const char *at, size_t n) {
        parse_state *s = p->data;
        if (s->in)
                return gw_instream_feed(s->in, at, n) < 0 ? (s->in_failed = true, -1) : 0;
        if (s->req.body_len + n > GW_MAX_BODY)
                return s->too_big = true, -1;
        /* A chunked body takes its budget as it comes. */
        if (s->req.body_len + n > s->reserved && !budget_take(s, s->req.body_len + n - s->reserved))
                return s->busy = true, -1;
        return core_buf_append(&s->req.body, &s->req.body_len, at, n);
}

static int on_message_complete(http_parser *p) {
        parse_state *s = p->data;
        s->done = true;
        http_parser_pause(p, 1);
        return 0;
}

static int finish_head(parse_state *s, http_parser *p);

/* The head is complete: who sends it is decided now (route.c), and a
 * request that may not go on is answered without reading its body. */
static int on_headers_complete(http_parser *p) {
        parse_state *s = p->data;
        s->head_done = true;
        if (p->content_length != ULLONG_MAX && p->content_length > GW_MAX_BODY)
                return s->too_big = true, -1;
        if (finish_head(s, p) < 0)
                return -1;
        gw_authenticate(s->cfg, &s->req, &s->auth);
        /* An exposed port (ports.c): the head ends the parsing (2: no
         * body, the rest of the connection is another protocol's), and
         * what follows is relayed as it comes, never held. A request
         * without a traffic token is not keyed: its tenant is not known
         * yet, and ports.c takes that tenant's rate. */
        if (s->auth.port && s->auth.status == 0) {
                if (s->auth.tenant[0] && !gw_conns_keyed(s->slot, s->auth.tenant))
                        return s->cut = true, -1;
                if (s->auth.tenant[0] && !gw_rate_take(s->auth.tenant)) {
                        s->auth.status = 429;
                        snprintf(s->auth.msg, sizeof(s->auth.msg),
                                 "rate limit exceeded: tenant %.80s sends more requests a second than the gateway "
                                 "allows (--rate); retry later", s->auth.tenant);
                        return s->refused = true, -1;
                }
                return 2;
        }
        /* A valid key or token (not /health, which needs none): from now
         * on the connection is not cut to make room for others. */
        if (s->auth.status == 0 && !gw_conns_keyed(s->slot, s->auth.tenant))
                return s->cut = true, -1;
        /* Then the tenant's rate (rate.c): over it, answered from the head
         * like any refusal, the body unread. */
        if (s->auth.status == 0 && !gw_rate_take(s->auth.tenant)) {
                s->auth.status = 429;
                snprintf(s->auth.msg, sizeof(s->auth.msg),
                         "rate limit exceeded: tenant %.80s sends more requests a second than the gateway "
                         "allows (--rate); retry later",
                         s->auth.tenant);
        }
        /* And its share of the requests being served (conns.c). */
        if (s->auth.status == 0 && !(s->begun = gw_conns_begin(s->slot, s->auth.tenant))) {
                s->auth.status = 429;
                snprintf(s->auth.msg, sizeof(s->auth.msg),
                         "tenant %.80s has as many requests in progress at once as one tenant may; retry when "
                         "one has ended",
                         s->auth.tenant);
        }
        bool has_body = (p->flags & F_CHUNKED) || (p->content_length != ULLONG_MAX && p->content_length > 0);
        if (s->auth.status && has_body)
                return s->refused = true, -1;
        /* A client stream (StreamInput): its body is acted on as it comes,
         * not held (envd.c bounds each message). */
        if (s->auth.status == 0 && s->auth.envd && gw_instream_wanted(&s->req)) {
                if (!(s->in = gw_instream_open(s->cfg, s->auth.tenant, s->auth.sandbox)))
                        return -1;
                return 0;
        }
        if (p->content_length != ULLONG_MAX && p->content_length > 0 && !budget_take(s, (size_t) p->content_length))
                return s->busy = true, -1;
        return 0;
}

static const http_parser_settings settings = {
        .on_url = on_url,
        .on_header_field = on_header_field,
        .on_header_value = on_header_value,
        .on_headers_complete = on_headers_complete,
        .on_body = on_body,
        .on_message_complete = on_message_complete,
};

/* The method, and the request target split into path and query. */
static int finish_head(parse_state *s, http_parser *p) {
        gw_request *r = &s->req;
        r->method = strdup(http_method_str(p->method));
        if (!s->url || !r->method)
                return -1;
        char *q = strchr(s->url, '?');
        r->path = q ? strndup(s->url, (size_t) (q - s->url)) : strdup(s->url);
        r->query = q ? strdup(q + 1) : NULL;
        return r->path && (!q || r->query) ? 0 : -1;
}

static int finish_request(parse_state *s) {
        gw_request *r = &s->req;
        if (!r->body)
                r->body = calloc(1, 1);
        return r->path && r->body ? 0 : -1;
}

const char *gw_header_get(const gw_request *r, const char *name) {
        for (size_t i = 0; i < r->n_headers; i++)
                if (r->headers[i].name && strcasecmp(r->headers[i].name, name) == 0)
                        return r->headers[i].value ? r->headers[i].value : "";
        return NULL;
}

char *gw_url_decode(const char *s, size_t len, bool plus) {
        char *out = malloc(len + 1);
        if (!out)
                return NULL;
        size_t n = core_url_decode(s, len, plus, out);
        /* A decoded NUL would cut the string short: refuse it. */
        if (strlen(out) != n) {
                free(out);
                return NULL;
        }
        return out;
}

char *gw_query_get(const gw_request *r, const char *key) {
        size_t klen = strlen(key);
        for (const char *p = r->query; p && *p;) {
                const char *end = strchr(p, '&');
                size_t n = end ? (size_t) (end - p) : strlen(p);
                if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=')
                        return gw_url_decode(p + klen + 1, n - klen - 1, true);
                if (n == klen && strncmp(p, key, klen) == 0)
                        return strdup("");
                p = end ? end + 1 : NULL;
        }
        return NULL;
}

int gw_conn_write(gw_conn *c, const void *data, size_t len) {
        return write_all(c, data, len);
}

static int write_all(gw_conn *c, const void *data, size_t len) {
        const char *p = data;
        while (len > 0 && !c->failed) {
                ssize_t n;
                if (c->ssl) {
                        int w = SSL_write(c->ssl, p, len > INT_MAX ? INT_MAX : (int) len);
                        n = w > 0 ? w : -1;
                } else
                        n = send(c->fd, p, len, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR && !c->ssl)
                        continue;
                if (n <= 0) {
                        c->failed = true;
                        return -EPIPE;
                }
                p += n;
                len -= (size_t) n;
        }
        return c->failed ? -EPIPE : 0;
}

static const char *reason_of(int status) {
        switch (status) {
        case 200: return "OK";
        case 201: return "Created";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 409: return "Conflict";
        case 413: return "Payload Too Large";
        case 415: return "Unsupported Media Type";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        default: return "Status";
        }
}

int gw_send(gw_conn *c, int status, const char *ctype, const void *body, size_t len) {
        return gw_send_ex(c, status, ctype, body, len, NULL);
}

int gw_send_ex(gw_conn *c, int status, const char *ctype, const void *body, size_t len, const char *extra) {
        char head[768];
        int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\n%s%s%sContent-Length: %zu\r\n%s%s\r\n", status,
                         reason_of(status), ctype ? "Content-Type: " : "", ctype ? ctype : "", ctype ? "\r\n" : "",
                         len, c->close ? "Connection: close\r\n" : "", extra ? extra : "");
        if (n < 0 || (size_t) n >= sizeof(head))
                return -EINVAL;
        if (write_all(c, head, (size_t) n) < 0)
                return -EPIPE;
        return len ? write_all(c, body, len) : 0;
}

int gw_send_json(gw_conn *c, int status, cJSON *json) {
        char *text = json ? cJSON_PrintUnformatted(json) : NULL;
        cJSON_Delete(json);
        if (!text)
                return gw_send(c, 500, NULL, NULL, 0);
        int r = gw_send(c, status, "application/json", text, strlen(text));
        free(text);
        return r;
}

int gw_send_error(gw_conn *c, int status, const char *fmt, ...) {
        char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "code", status);
        cJSON_AddStringToObject(o, "message", msg ? msg : "error");
        free(msg);
        return gw_send_json(c, status, o);
}

int gw_send_chunked_head(gw_conn *c, int status, const char *ctype) {
        char head[256];
        int n = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n",
                         status, reason_of(status), ctype);
        return write_all(c, head, (size_t) n);
}

int gw_send_chunk(gw_conn *c, const void *data, size_t len) {
        char size[32];
        if (len == 0)
                return 0;
        int n = snprintf(size, sizeof(size), "%zx\r\n", len);
        if (write_all(c, size, (size_t) n) < 0 || write_all(c, data, len) < 0)
                return -EPIPE;
        return write_all(c, "\r\n", 2);
}

int gw_send_chunked_end(gw_conn *c) {
        return write_all(c, "0\r\n\r\n", 5);
}

static const char *memmem_s(const char *h, size_t hl, const char *n, size_t nl) {
        return memmem(h, hl, n, nl);
}

int gw_multipart(const gw_request *r, gw_part **ret, size_t *ret_n) {
        const char *ct = gw_header_get(r, "Content-Type"), *b = ct ? strstr(ct, "boundary=") : NULL;
        if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0 || !b)
                return -EINVAL;
        b += 9;
        char delim[256];
        size_t bl = strcspn(b, ";");
        if (*b == '"')
                b++, bl = strcspn(b, "\"");
        if (bl == 0 || bl > 200)
                return -EINVAL;
        int dl = snprintf(delim, sizeof(delim), "--%.*s", (int) bl, b);
        gw_part *parts = NULL;
        size_t n = 0, cap = 0;
        const char *p = memmem_s(r->body, r->body_len, delim, (size_t) dl), *end = r->body + r->body_len;
        while (p && p + dl + 2 <= end && strncmp(p + dl, "--", 2) != 0) {
                const char *head = p + dl + 2; /* after CRLF */
                const char *head_end = memmem_s(head, (size_t) (end - head), "\r\n\r\n", 4);
                if (!head_end)
                        break;
                const char *data = head_end + 4;
                char crlf_delim[260];
                int cl = snprintf(crlf_delim, sizeof(crlf_delim), "\r\n%s", delim);
                const char *next = memmem_s(data, (size_t) (end - data), crlf_delim, (size_t) cl);
                if (!next)
                        break;
                char *fn = NULL;
                const char *f = memmem_s(head, (size_t) (head_end - head), "filename=\"", 10);
                if (f) {
                        f += 10;
                        const char *q = memchr(f, '"', (size_t) (head_end - f));
                        if (q)
                                fn = strndup(f, (size_t) (q - f));
                }
                if (n == GW_MAX_PARTS) {
                        free(fn);
                        for (size_t i = 0; i < n; i++)
                                free(parts[i].filename);
                        free(parts);
                        return -E2BIG;
                }
                if (n == cap) {
                        size_t ncap = cap ? 2 * cap : 8;
                        gw_part *np = realloc(parts, ncap * sizeof(*np));
                        if (!np) {
                                free(fn);
                                break;
                        }
                        parts = np;
                        cap = ncap;
                }
                parts[n++] = (gw_part) { .filename = fn, .data = data, .len = (size_t) (next - data) };
                p = next + 2;
        }
        *ret = parts;
        *ret_n = n;
        return n ? 0 : -EINVAL;
}

int gw_conn_fd(const gw_conn *c) {
        return c->fd;
}

bool gw_conn_failed(const gw_conn *c) {
        return c->failed;
}

/* A connection idle this long between requests, or stalled this long in
 * one, is closed: a thread is not held by a peer that sends nothing. */
#define IDLE_SECONDS 120

/* A request's head must be complete this long after the gateway began
 * to wait for it (the connection accepted, or the previous answer sent),
 * however its bytes trickle in: a peer cannot hold one of the 256
 * connections by sending a byte now and then (slowloris). */
static unsigned head_seconds = GW_HEAD_SECONDS_DEFAULT;

void gw_http_set_head_seconds(unsigned seconds) {
        head_seconds = seconds;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The receive timeout for the next read: the idle bound, or what is left
 * of the head's time while a head is awaited. False when none is left. */
static bool set_read_timeout(int fd, bool head_done, int64_t head_deadline) {
        int64_t ms = (int64_t) IDLE_SECONDS * 1000;
        if (!head_done) {
                int64_t left = head_deadline - now_ms();
                if (left <= 0)
                        return false;
                if (left < ms)
                        ms = left;
        }
        struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
        (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        return true;
}

size_t gw_conn_pending(gw_conn *c) {
        return c->ssl ? (size_t) SSL_pending(c->ssl) : 0;
}

/* One read from the connection: plain or TLS. >0 bytes, 0 at the end, <0
 * on an error (a timeout included). */
ssize_t gw_conn_read(gw_conn *c, char *buf, size_t size) {
        if (!c->ssl) {
                ssize_t n;
                do
                        n = recv(c->fd, buf, size, 0);
                while (n < 0 && errno == EINTR);
                return n;
        }
        int n = SSL_read(c->ssl, buf, size > INT_MAX ? INT_MAX : (int) size);
        if (n > 0)
                return n;
        return SSL_get_error(c->ssl, n) == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

void gw_serve_conn(const gw_config *cfg, int fd) {
        gw_serve_conn_slot(cfg, fd, NULL);
}

/* Bytes and time a connection answered before its request was read
 * whole is drained for, after the answer, before it is closed. */
#define LINGER_BYTES ((size_t) 1 << 20)
#define LINGER_MS 2000

/* A lingering close (as RFC 9112 §9.6 advises): a socket closed with
 * unread bytes in its receive queue sends a reset, which may make the
 * peer, still sending its body, drop the answer it was sent (a 401 for a
 * request refused from its head). So the write side is shut down and
 * what the peer still sends is read and dropped, at most LINGER_BYTES
 * for at most LINGER_MS, before the caller closes. */
static void linger(int fd) {
        if (shutdown(fd, SHUT_WR) < 0)
                return;
        char buf[16384];
        size_t total = 0;
        int64_t deadline = now_ms() + LINGER_MS;
        while (total < LINGER_BYTES) {
                int64_t left = deadline - now_ms();
                if (left <= 0)
                        break;
                struct timeval tv = { .tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000 };
                (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                ssize_t n = recv(fd, buf, sizeof(buf), 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                total += (size_t) n;
        }
}

void gw_serve_conn_slot(const gw_config *cfg, int fd, gw_slot *slot) {
        gw_conn c = { .fd = fd };
        bool unread = false;
        struct timeval tv = { .tv_sec = IDLE_SECONDS };
        (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (cfg->tls) {
                /* The handshake: each read bounded by the head's time. */
                struct timeval hs = { .tv_sec = head_seconds ? head_seconds : 1 };
                (void) setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hs, sizeof(hs));
                c.ssl = SSL_new(cfg->tls);
                if (!c.ssl || SSL_set_fd(c.ssl, fd) != 1 || SSL_accept(c.ssl) != 1) {
                        SSL_free(c.ssl);
                        gw_conns_release(slot);
                        close(fd);
                        return;
                }
        }
        http_parser p;
        parse_state s = { .cfg = cfg, .slot = slot };
        http_parser_init(&p, HTTP_REQUEST);
        p.data = &s;
        char buf[65536];
        size_t have = 0, off = 0;
        int64_t head_deadline = now_ms() + (int64_t) head_seconds * 1000;
        for (;;) {
                if (off == have) {
                        ssize_t n = -1;
                        if (set_read_timeout(fd, s.head_done, head_deadline))
                                n = gw_conn_read(&c, buf, sizeof(buf));
                        if (n < 0 && !s.head_done && s.head_bytes > 0 && now_ms() >= head_deadline) {
                                c.close = true;
                                gw_send_error(&c, 408, "request head not complete within %u s", head_seconds);
                        }
                        if (n <= 0)
                                break;
                        have = (size_t) n;
                        off = 0;
                }
                size_t used = http_parser_execute(&p, &settings, buf + off, have - off);
                off += used;
                enum http_errno e = HTTP_PARSER_ERRNO(&p);
                if (s.done && s.auth.port && s.auth.status == 0) {
                        /* An exposed port: the rest of the connection is
                         * relayed to it (ports.c), never parsed again. */
                        if (finish_request(&s) == 0)
                                gw_port_proxy(cfg, &c, &s.req, &s.auth, p.http_major == 1 ? p.http_minor : 0,
                                              buf + off, have - off);
                        break;
                }
                if (s.done) {
                        http_parser_pause(&p, 0);
                        c.close = !http_should_keep_alive(&p);
                        if (finish_request(&s) < 0) {
                                gw_send_error(&c, 500, "out of memory");
                                break;
                        }
                        if (s.in)
                                gw_instream_finish(s.in, &c);
                        else
                                gw_route(cfg, &c, &s.req, &s.auth);
                        if (s.begun)
                                gw_conns_end(slot);
                        request_clear(&s.req);
                        free(s.url);
                        budget_release(&s);
                        s = (parse_state) { .cfg = cfg, .slot = slot };
                        head_deadline = now_ms() + (int64_t) head_seconds * 1000;
                        if (c.close || c.failed)
                                break;
                        continue;
                }
                if (e != HPE_OK) {
                        c.close = true;
                        if (s.cut)
                                break;
                        /* Answered with bytes of the request still unread:
                         * closed lingering, so the answer is not lost. */
                        unread = !s.head_too_big;
                        if (s.in_failed) {
                                gw_instream_finish(s.in, &c);
                                s.in = NULL;
                        } else if (s.refused)
                                gw_route(cfg, &c, &s.req, &s.auth);
                        else if (s.busy)
                                gw_send_error(&c, 503, "the gateway holds as many request bodies as it may; retry");
                        else if (s.too_big)
                                gw_send_error(&c, s.head_too_big ? 431 : 413,
                                              "request too large (head 64 KiB, body %zu bytes at most)", GW_MAX_BODY);
                        else
                                gw_send_error(&c, 400, "bad HTTP request: %s", http_errno_description(e));
                        break;
                }
        }
        if (s.begun)
                gw_conns_end(slot);
        request_clear(&s.req);
        free(s.url);
        budget_release(&s);
        gw_instream_finish(s.in, NULL);
        if (c.ssl) {
                if (!c.failed)
                        (void) SSL_shutdown(c.ssl);
                SSL_free(c.ssl);
        }
        if (unread && !c.failed)
                linger(fd);
        /* Released before the close: while the table holds the slot its
         * fd is this socket, so a cut (shutdown) never hits a reused fd. */
        gw_conns_release(slot);
        close(fd);
}
