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
#include <time.h>
#include <unistd.h>
#include "libcore/base64.h"

#include "libcore/macro.h"
#include "cli/client.h"

struct client {
        int fd;
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
        if (c->fd >= 0)
                close(c->fd);
        free(c->buf);
        free(c);
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
        return send_all(c->fd, line, n + 1);
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
        int r = send_all(c->fd, line, (size_t) h + params_len + 2);
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
        return c->queue_head ||
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
                r = poll(&p, 1, wait);
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
