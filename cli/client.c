/* The JSON-RPC client: socket discovery and connection, request ids, line
 * framing over a buffered reader, message decoding, and waiting for one
 * response while other traffic is queued or handed to a callback. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include "cli/lazy/openssl.h"
#include "libcore/base64.h"

#include "libcore/macro.h"
#include "cli/client.h"

struct client {
        int fd;
        SSL *ssl;             /* a TLS connection (client_connect_tls), else NULL */
        int64_t next_id;
        char *buf;            /* received bytes not yet handed out */
        size_t len;           /* bytes used in buf */
        size_t cap;
        size_t scanned;       /* buf[0..scanned) holds no '\n' (saves rescans of long lines) */
        bool eof;
        client_msg *queue_head;   /* messages set aside by client_wait() */
        client_msg *queue_tail;
};

const char *client_socket_path(const char *option) {
        if (option && option[0])
                return option;
        const char *env = getenv(CLIENT_SOCKET_ENV);
        if (env && env[0])
                return env;
        return CLIENT_DEFAULT_SOCKET;
}

client *client_new_fd(int fd) {
        client *c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                return NULL;
        }
        c->fd = fd;
        c->next_id = 1;
        return c;
}

int client_connect(const char *path, client **ret) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        memcpy(sa.sun_path, path, strlen(path) + 1);

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return negative_errno();
        client *c = client_new_fd(TAKE_FD(fd));
        if (!c)
                return -ENOMEM;
        *ret = c;
        return 0;
}

void client_free(client *c) {
        if (!c)
                return;
        while (c->queue_head) {
                client_msg *m = c->queue_head;
                c->queue_head = m->next;
                client_msg_free(m);
        }
        if (c->ssl) {
                (void) SSL_shutdown(c->ssl);  /* close_notify: the daemon sees our end of input */
                SSL_free(c->ssl);
        }
        if (c->fd >= 0)
                close(c->fd);
        free(c->buf);
        free(c);
}

bool client_is_remote(const client *c) {
        return c->ssl != NULL;
}

int client_fd(const client *c) {
        return c->fd;
}

/* Writes all of `data`. MSG_NOSIGNAL: a daemon that went away must give us
 * EPIPE to report, not a SIGPIPE that kills the CLI silently. */
static int send_all(int fd, const char *data, size_t len) {
        while (len > 0) {
                ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                data += n;
                len -= (size_t) n;
        }
        return 0;
}

/* Waits until fd is ready for `events` (POLLIN/POLLOUT). */
static int wait_fd(int fd, short events) {
        struct pollfd p = { .fd = fd, .events = events };
        for (;;) {
                int r = poll(&p, 1, -1);
                if (r >= 0)
                        return 0;
                if (errno != EINTR)
                        return negative_errno();
        }
}

/* send_all() over TLS: SSL_write repeated with the same arguments after a
 * WANT_READ/WANT_WRITE (its retry rule), waiting on the socket meanwhile. */
static int tls_send_all(client *c, const char *data, size_t len) {
        while (len > 0) {
                size_t n = 0;
                ERR_clear_error();
                if (SSL_write_ex(c->ssl, data, len, &n) == 1) {
                        data += n;
                        len -= n;
                        continue;
                }
                int e = SSL_get_error(c->ssl, 0);
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                        int r = wait_fd(c->fd, e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN);
                        if (r < 0)
                                return r;
                        continue;
                }
                return e == SSL_ERROR_SYSCALL && errno ? negative_errno() : -ECONNRESET;
        }
        return 0;
}

static int conn_send(client *c, const char *data, size_t len) {
        return c->ssl ? tls_send_all(c, data, len) : send_all(c->fd, data, len);
}

/* Serialises `msg` unformatted (so it holds no newline: cJSON escapes them
 * inside strings) and sends it with its terminating '\n'. */
static int send_json(client *c, cJSON *msg) {
        _cleanup_free_ char *text = cJSON_PrintUnformatted(msg);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        _cleanup_free_ char *line = malloc(n + 2);
        if (!line)
                return -ENOMEM;
        memcpy(line, text, n);
        line[n] = '\n';
        return conn_send(c, line, n + 1);
}

static cJSON *build_message(const char *method, cJSON *params, int64_t id) {
        cJSON *msg = cJSON_CreateObject();
        if (!msg) {
                cJSON_Delete(params);
                return NULL;
        }
        cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
        if (id > 0)
                cJSON_AddNumberToObject(msg, "id", (double) id);
        cJSON_AddStringToObject(msg, "method", method);
        if (params)
                cJSON_AddItemToObject(msg, "params", params);
        return msg;
}

int64_t client_send(client *c, const char *method, cJSON *params) {
        int64_t id = c->next_id++;
        cJSON *msg = build_message(method, params, id);
        if (!msg)
                return -ENOMEM;
        int r = send_json(c, msg);
        cJSON_Delete(msg);
        return r < 0 ? r : id;
}

int64_t client_send_fd(client *c, const char *method, cJSON *params, int fd) {
        int64_t id = c->next_id++;
        cJSON *msg = build_message(method, params, id);
        _cleanup_free_ char *text = msg ? cJSON_PrintUnformatted(msg) : NULL;
        cJSON_Delete(msg);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        _cleanup_free_ char *line = malloc(n + 2);
        if (!line)
                return -ENOMEM;
        memcpy(line, text, n);
        line[n] = '\n';
        if (c->ssl)
                return -EOPNOTSUPP;  /* no descriptors cross TCP */
        /* The fd rides on the first byte; the kernel hands it over no later
         * than the line (unix(7) SCM_RIGHTS). */
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } cm = {};
        struct iovec iov = { .iov_base = line, .iov_len = 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
        struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(h), &fd, sizeof(int));
        ssize_t r;
        do
                r = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return -errno;
        int rr = send_all(c->fd, line + 1, n);
        return rr < 0 ? rr : id;
}

int64_t client_send_text(client *c, const char *method, const char *params, size_t params_len) {
        int64_t id = c->next_id++;
        _cleanup_free_ char *line = NULL;
        char head[160];
        int h = snprintf(head, sizeof(head), "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"method\":\"%s\",\"params\":",
                         (long long) id, method);
        if (h < 0 || (size_t) h >= sizeof(head) || !(line = malloc((size_t) h + params_len + 3)))
                return -ENOMEM;
        memcpy(line, head, (size_t) h);
        memcpy(line + h, params, params_len);
        memcpy(line + h + params_len, "}\n", 2);
        int r = conn_send(c, line, (size_t) h + params_len + 2);
        return r < 0 ? r : id;
}

int client_notify(client *c, const char *method, cJSON *params) {
        cJSON *msg = build_message(method, params, 0);
        if (!msg)
                return -ENOMEM;
        int r = send_json(c, msg);
        cJSON_Delete(msg);
        return r;
}

void client_msg_free(client_msg *m) {
        if (!m)
                return;
        client_error_free(m->error);
        cJSON_Delete(m->json);
        free(m);
}

static char *strdup_or_null(const char *s) {
        return s ? strdup(s) : NULL;
}

client_error *client_error_new(int code, const char *reason, const char *field, const char *fmt, ...) {
        client_error *e = calloc(1, sizeof(*e));
        if (!e)
                return NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&e->message, fmt, ap);
        va_end(ap);
        e->code = code;
        e->reason = strdup_or_null(reason);
        e->field = strdup_or_null(field);
        if (r < 0 || (reason && !e->reason) || (field && !e->field)) {
                if (r < 0)
                        e->message = NULL;
                client_error_free(e);
                return NULL;
        }
        return e;
}

client_error *client_error_from_json(const cJSON *error) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(error, "code");
        const cJSON *message = cJSON_GetObjectItemCaseSensitive(error, "message");
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(error, "data");
        if (!cJSON_IsNumber(code) || !cJSON_IsString(message))
                return client_error_new(-32603, NULL, NULL, "malformed error from sandboxd");

        const char *reason = NULL, *field = NULL;
        if (cJSON_IsObject(data)) {
                const cJSON *r = cJSON_GetObjectItemCaseSensitive(data, "reason");
                const cJSON *f = cJSON_GetObjectItemCaseSensitive(data, "field");
                reason = cJSON_IsString(r) ? r->valuestring : NULL;
                field = cJSON_IsString(f) ? f->valuestring : NULL;
        }
        return client_error_new(code->valueint, reason, field, "%s", message->valuestring);
}

void client_error_free(client_error *e) {
        if (!e)
                return;
        free(e->message);
        free(e->reason);
        free(e->field);
        free(e);
}

/* Turns one line into a message. Anything that is neither a response (has
 * "id" and "result" or "error") nor a notification (has "method", no id) is
 * -EBADMSG. */
static int decode_line(const char *line, size_t len, client_msg **ret) {
        _cleanup_free_ client_msg *m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        m->json = cJSON_ParseWithLength(line, len);
        if (!cJSON_IsObject(m->json)) {
                cJSON_Delete(m->json);
                return -EBADMSG;
        }
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m->json, "id");
        const cJSON *method = cJSON_GetObjectItemCaseSensitive(m->json, "method");
        const cJSON *error = cJSON_GetObjectItemCaseSensitive(m->json, "error");
        cJSON *result = cJSON_GetObjectItemCaseSensitive(m->json, "result");

        if (cJSON_IsString(method) && (!id || cJSON_IsNull(id))) {
                m->kind = CLIENT_MSG_NOTIFICATION;
                m->method = method->valuestring;
                m->params = cJSON_GetObjectItemCaseSensitive(m->json, "params");
        } else if ((cJSON_IsNumber(id) || cJSON_IsNull(id)) && (result || cJSON_IsObject(error))) {
                m->kind = CLIENT_MSG_RESPONSE;
                m->id = cJSON_IsNumber(id) ? (int64_t) id->valuedouble : 0;
                if (cJSON_IsObject(error)) {
                        m->error = client_error_from_json(error);
                        if (!m->error) {
                                cJSON_Delete(m->json);
                                return -ENOMEM;
                        }
                } else
                        m->result = result;
        } else {
                cJSON_Delete(m->json);
                return -EBADMSG;
        }
        *ret = TAKE_PTR(m);
        return 0;
}

/* Pops one complete line off the buffer and decodes it. Returns 1 with a
 * message, 0 when no complete line is buffered, or a negative errno. */
static int take_buffered(client *c, client_msg **ret) {
        for (;;) {
                char *nl = c->len > c->scanned ? memchr(c->buf + c->scanned, '\n', c->len - c->scanned) : NULL;
                if (!nl) {
                        c->scanned = c->len;
                        if (c->len > CLIENT_MAX_LINE)
                                return -EMSGSIZE;
                        return 0;
                }
                size_t line_len = (size_t) (nl - c->buf);
                int r = 0;
                /* Blank lines (e.g. "\r\n" keep-alives) carry nothing: skip. */
                bool blank = line_len == 0 || (line_len == 1 && c->buf[0] == '\r');
                if (line_len > CLIENT_MAX_LINE)
                        r = -EMSGSIZE;
                else if (!blank)
                        r = decode_line(c->buf, line_len, ret);
                c->len -= line_len + 1;
                memmove(c->buf, nl + 1, c->len);
                c->scanned = 0;
                if (r < 0)
                        return r;
                if (!blank)
                        return 1;
        }
}

/* Reads once from the socket into the buffer. Returns bytes read (> 0),
 * -ECONNRESET on end of file, or a negative errno. */
static int fill(client *c) {
        if (c->eof)
                return -ECONNRESET;
        if (c->cap - c->len < 65536) {
                size_t cap = c->cap ? c->cap * 2 : 65536;
                while (cap - c->len < 65536)
                        cap *= 2;
                char *b = realloc(c->buf, cap);
                if (!b)
                        return -ENOMEM;
                c->buf = b;
                c->cap = cap;
        }
        if (c->ssl) {
                /* Everything OpenSSL can decrypt now, so that what is left
                 * waits in the socket where poll() sees it. */
                size_t got = 0;
                while (c->cap - c->len > 0) {
                        size_t n = 0;
                        ERR_clear_error();
                        if (SSL_read_ex(c->ssl, c->buf + c->len, c->cap - c->len, &n) == 1) {
                                c->len += n;
                                got += n;
                                continue;
                        }
                        int e = SSL_get_error(c->ssl, 0);
                        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
                                break;
                        if (got)
                                break;  /* report the end on the next call */
                        c->eof = true;
                        return -ECONNRESET;
                }
                return (int) got;
        }
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, MSG_DONTWAIT);
        if (n < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : negative_errno();
        if (n == 0) {
                c->eof = true;
                return -ECONNRESET;
        }
        c->len += (size_t) n;
        return (int) n;
}

static int64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool client_has_pending(const client *c) {
        return c->queue_head || (c->ssl && SSL_pending(c->ssl) > 0) ||
                (c->len > c->scanned && memchr(c->buf + c->scanned, '\n', c->len - c->scanned));
}

/* The next message from the buffer or the socket, ignoring the queue. */
static int read_next(client *c, int timeout_ms, client_msg **ret) {
        int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
        for (;;) {
                int r = take_buffered(c, ret);
                if (r != 0)
                        return r;
                int wait = -1;
                if (deadline >= 0) {
                        int64_t left = deadline - now_ms();
                        wait = left > 0 ? (int) left : 0;
                }
                struct pollfd p = { .fd = c->fd, .events = POLLIN };
                r = c->ssl && SSL_pending(c->ssl) > 0 ? 1 : poll(&p, 1, wait);
                if (r < 0)
                        return negative_errno();
                if (r == 0)
                        return 0;
                r = fill(c);
                if (r < 0)
                        return r;
        }
}

int client_next(client *c, int timeout_ms, client_msg **ret) {
        if (c->queue_head) {
                client_msg *m = c->queue_head;
                c->queue_head = m->next;
                if (!c->queue_head)
                        c->queue_tail = NULL;
                m->next = NULL;
                *ret = m;
                return 1;
        }
        return read_next(c, timeout_ms, ret);
}

static void enqueue(client *c, client_msg *m) {
        m->next = NULL;
        if (c->queue_tail)
                c->queue_tail->next = m;
        else
                c->queue_head = m;
        c->queue_tail = m;
}

/* Removes from the queue, in order, the notifications (handed to cb) and the
 * response to `id` (returned). Other responses stay. */
static client_msg *scan_queue(client *c, int64_t id, client_notify_fn cb, void *userdata) {
        client_msg *prev = NULL, *m = c->queue_head;
        while (m) {
                client_msg *next = m->next;
                bool mine = m->kind == CLIENT_MSG_RESPONSE && m->id == id;
                bool deliver = m->kind == CLIENT_MSG_NOTIFICATION && cb;
                if (mine || deliver) {
                        if (prev)
                                prev->next = next;
                        else
                                c->queue_head = next;
                        if (c->queue_tail == m)
                                c->queue_tail = prev;
                        m->next = NULL;
                        if (mine)
                                return m;
                        cb(m, userdata);
                        client_msg_free(m);
                } else
                        prev = m;
                m = next;
        }
        return NULL;
}

static int local_error(client_error **ret_err, int r) {
        if (!ret_err)
                return r;
        if (r == -ETIMEDOUT)
                *ret_err = client_error_new(CLIENT_ERROR_LOCAL, CLIENT_REASON_TIMEOUT, NULL,
                                            "timed out waiting for sandboxd");
        else if (r == -EBADMSG || r == -EMSGSIZE)
                *ret_err = client_error_new(CLIENT_ERROR_LOCAL, CLIENT_REASON_PROTOCOL, NULL,
                                            "unreadable answer from sandboxd: %s", strerror(-r));
        else if (r == -ECONNRESET)
                *ret_err = client_error_new(CLIENT_ERROR_LOCAL, CLIENT_REASON_DISCONNECTED, NULL,
                                            "sandboxd closed the connection");
        else
                *ret_err = client_error_new(CLIENT_ERROR_LOCAL, CLIENT_REASON_DISCONNECTED, NULL,
                                            "talking to sandboxd: %s", strerror(-r));
        return r;
}

/* Hands a response to the caller: the result (detached from the message)
 * or the error. */
static int finish(client_msg *m, cJSON **ret_result, client_error **ret_err) {
        if (m->error) {
                if (ret_err)
                        *ret_err = TAKE_PTR(m->error);
                client_msg_free(m);
                return -EREMOTEIO;
        }
        if (ret_result) {
                cJSON *copy = cJSON_DetachItemViaPointer(m->json, m->result);
                *ret_result = copy;
        }
        client_msg_free(m);
        return 0;
}

int client_wait(client *c, int64_t id, int timeout_ms, client_notify_fn cb, void *userdata,
                cJSON **ret_result, client_error **ret_err) {
        client_msg *m = scan_queue(c, id, cb, userdata);
        if (m)
                return finish(m, ret_result, ret_err);

        /* What is queued now was judged above (other ids, or notifications
         * kept for later); new arrivals go behind it. */
        int64_t deadline = timeout_ms >= 0 ? now_ms() + timeout_ms : -1;
        int r;
        for (;;) {
                int left = -1;
                if (deadline >= 0) {
                        int64_t l = deadline - now_ms();
                        left = l > 0 ? (int) l : 0;
                }
                r = read_next(c, left, &m);
                if (r == 0)
                        r = -ETIMEDOUT;
                if (r == -EBADMSG)
                        continue;  /* one bad line does not doom the answer we wait for */
                if (r < 0)
                        break;
                /* A null id answers a request the daemon could not read, and
                 * only ours can be outstanding in that sense: take it. */
                if (m->kind == CLIENT_MSG_RESPONSE && (m->id == id || (m->id == 0 && m->error)))
                        break;
                if (m->kind == CLIENT_MSG_NOTIFICATION && cb) {
                        cb(m, userdata);
                        client_msg_free(m);
                } else
                        enqueue(c, m);
        }
        if (r < 0)
                return local_error(ret_err, r);
        return finish(m, ret_result, ret_err);
}

int client_call(client *c, const char *method, cJSON *params, int timeout_ms,
                client_notify_fn cb, void *userdata, cJSON **ret_result, client_error **ret_err) {
        int64_t id = client_send(c, method, params);
        if (id < 0)
                return local_error(ret_err, (int) id);
        return client_wait(c, id, timeout_ms, cb, userdata, ret_result, ret_err);
}

char *client_base64_encode(const void *data, size_t len) {
        return base64_encode(data, len);
}

int client_base64_decode(const char *text, void **ret, size_t *ret_len) {
        return base64_decode(text, ret, ret_len);
}

/* ---- TLS (remote daemons) ---- */

static char *tls_errorf(const char *what, const char *path) {
        char buf[256] = "";
        unsigned long e = ERR_peek_last_error();
        if (e)
                ERR_error_string_n(e, buf, sizeof(buf));
        ERR_clear_error();
        char *msg = NULL;
        if (asprintf(&msg, "%s%s%s%s%s", what, path ? " '" : "", path ? path : "", path ? "'" : "",
                     e ? ": " : "") < 0)
                return NULL;
        char *full = NULL;
        if (asprintf(&full, "%s%s", msg, buf) < 0)
                full = NULL;
        free(msg);
        return full;
}

int client_parse_host(const char *url, char **ret_host, char **ret_port) {
        if (!url || strncmp(url, "tcp://", 6) != 0)
                return -EINVAL;
        const char *h = url + 6, *colon, *end;
        if (h[0] == '[') {
                end = strchr(h, ']');
                if (!end || end[1] != ':')
                        return -EINVAL;
                colon = end + 1;
                h++;
        } else {
                colon = strrchr(h, ':');
                if (!colon)
                        return -EINVAL;
                end = colon;
        }
        const char *port = colon + 1;
        if (end == h || !*port || strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 ||
            atoi(port) < 1 || atoi(port) > 65535)
                return -EINVAL;
        char *host = strndup(h, (size_t) (end - h)), *p = strdup(port);
        if (!host || !p) {
                free(host);
                free(p);
                return -ENOMEM;
        }
        *ret_host = host;
        *ret_port = p;
        return 0;
}

/* A TLS 1.3 client context with our certificate and the CA the daemon's
 * certificate must chain to (that CA alone, never the system's roots). */
static SSL_CTX *client_ctx(const char *cert, const char *key, const char *ca, char **ret_msg) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx) {
                *ret_msg = tls_errorf("TLS", NULL);
                return NULL;
        }
        const char *fail = NULL, *path = NULL;
        if (!SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION))
                fail = "TLS 1.3";
        else if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
                fail = "read the CA certificate", path = ca;
        else if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
                fail = "read the client certificate", path = cert;
        else if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
                fail = "read the client key", path = key;
        else if (SSL_CTX_check_private_key(ctx) != 1)
                fail = "the client key does not match the certificate", path = key;
        if (fail) {
                *ret_msg = tls_errorf(fail, path);
                SSL_CTX_free(ctx);
                return NULL;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        return ctx;
}

static int tcp_connect(const char *host, const char *port, char **ret_msg) {
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC }, *res = NULL;
        int r = getaddrinfo(host, port, &hints, &res);
        if (r != 0) {
                if (asprintf(ret_msg, "resolve '%s': %s", host, gai_strerror(r)) < 0)
                        *ret_msg = NULL;
                return -EHOSTUNREACH;
        }
        int fd = -1, err = ECONNREFUSED;
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
                fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
                if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
                        err = errno;
                        close(fd);
                        fd = -1;
                }
        }
        freeaddrinfo(res);
        if (fd < 0 && asprintf(ret_msg, "connect to %s port %s: %s", host, port, strerror(err)) < 0)
                *ret_msg = NULL;
        return fd < 0 ? -err : fd;
}

int client_connect_tls(const char *url, const char *cert, const char *key, const char *ca, client **ret,
                       char **ret_msg) {
        _cleanup_free_ char *host = NULL, *port = NULL;
        *ret_msg = NULL;
        if (client_parse_host(url, &host, &port) < 0) {
                *ret_msg = strdup("the host must be tcp://HOST:PORT (a name, an IPv4 address or [IPv6])");
                return -EINVAL;
        }
        if (!cert || !key || !ca) {
                *ret_msg = strdup("a remote daemon needs --cert, --key and --ca (or $SANDBOXD_CERT, "
                                  "$SANDBOXD_KEY, $SANDBOXD_CA)");
                return -EINVAL;
        }
        signal(SIGPIPE, SIG_IGN);  /* OpenSSL writes without MSG_NOSIGNAL */
        SSL_CTX *ctx = client_ctx(cert, key, ca, ret_msg);
        if (!ctx)
                return -EINVAL;
        int fd = tcp_connect(host, port, ret_msg);
        if (fd < 0) {
                SSL_CTX_free(ctx);
                return fd;
        }
        SSL *ssl = SSL_new(ctx);
        SSL_CTX_free(ctx);  /* the SSL holds its reference */
        struct in6_addr ip;
        bool is_ip = inet_pton(AF_INET, host, &ip) == 1 || inet_pton(AF_INET6, host, &ip) == 1;
        /* The daemon's certificate must name the host we dialled. */
        int ok = ssl && SSL_set_fd(ssl, fd) == 1 &&
                 (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) == 1
                        : SSL_set1_host(ssl, host) == 1 && SSL_set_tlsext_host_name(ssl, host) == 1);
        if (ok && SSL_connect(ssl) != 1) {
                long vr = SSL_get_verify_result(ssl);
                char *m = tls_errorf("TLS handshake", NULL);
                if (asprintf(ret_msg, "%s%s%s", m ? m : "TLS handshake failed",
                             vr != X509_V_OK ? "; the daemon's certificate: " : "",
                             vr != X509_V_OK ? X509_verify_cert_error_string(vr) : "") < 0)
                        *ret_msg = NULL;
                free(m);
                ok = 0;
        } else if (!ok)
                *ret_msg = tls_errorf("TLS", NULL);
        int flags = ok ? fcntl(fd, F_GETFL) : -1;
        if (ok && (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0))
                ok = 0;
        client *c = ok ? client_new_fd(fd) : NULL;
        if (!c) {
                SSL_free(ssl);
                if (!ok)
                        close(fd);
                return -ECONNREFUSED;
        }
        c->ssl = ssl;
        *ret = c;
        return 0;
}
