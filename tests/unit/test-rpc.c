/* Unit tests for the JSON-RPC server (sandboxd/rpc.c) and the worker
 * channel (sandboxd/worker.c): a real server on a Unix socket in a private
 * temporary directory, driven by a client over that socket while the test
 * steps the sd-event loop with sd_event_run() until the answer it waits for
 * arrives (each wait has a deadline, so a missing answer fails, never hangs). */
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cmocka.h>
#include "libcore/util.h"
#include "sandboxd/limits.h"
#include "sandboxd/rpc.h"
#include "sandboxd/text.h"
#include "sandboxd/worker.h"

#define DEADLINE_MS 5000
#define TEST_MAX_LINE 1024
#define TEST_STALL_MS 300

typedef struct fixture {
        char dir[64];
        char path[128];
        sd_event *event;
        rpc_server *server;
        unsigned closes;        /* close handler calls */
        unsigned notes;         /* test.note calls */
        unsigned pending_later; /* test.later timers not yet fired */
        unsigned drains;        /* drain handler calls */
        rpc_conn *flooded;      /* the connection test.flood last wrote to (a reference) */
        unsigned stopped;       /* rpc_server_stop()'s callback calls */
} fixture;

typedef struct client {
        int fd;
        char *buf;
        size_t len;
} client;

/* ---- the test method table ---- */

static void m_echo(rpc_request *req, void *userdata) {
        rpc_reply(req, cJSON_Duplicate(req->params, true));
}

typedef struct later_ctx {
        fixture *f;
        rpc_request *req;
} later_ctx;

static int later_fire(sd_event_source *s, uint64_t usec, void *userdata) {
        later_ctx *ctx = userdata;
        ctx->f->pending_later--;
        cJSON *res = cJSON_CreateObject();
        cJSON_AddBoolToObject(res, "later", true);
        rpc_reply(ctx->req, res);
        free(ctx);
        sd_event_source_unref(s);
        return 0;
}

/* Replies {"later":true} after params.ms milliseconds, from a timer. */
static void m_later(rpc_request *req, void *userdata) {
        fixture *f = userdata;
        _cleanup_error_ sb_error *err = NULL;
        int64_t ms = 50;
        if (rpc_param_int(req, "ms", false, 0, 10000, &ms, &err) < 0)
                return rpc_reply_sb_error(req, err);
        later_ctx *ctx = calloc(1, sizeof(*ctx));
        *ctx = (later_ctx) { f, req };
        sd_event_source *s = NULL;
        assert_int_equal(sd_event_add_time_relative(f->event, &s, CLOCK_MONOTONIC, (uint64_t) ms * 1000, 0,
                                                    later_fire, ctx), 0);
        f->pending_later++;
}

/* Validates params with the helpers, then fails with an application error. */
static void m_fail(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        int64_t count;
        const char *name = NULL;
        bool flag = false;
        cJSON *obj = NULL;
        if (rpc_param_int(req, "count", true, 1, 10, &count, &err) < 0 ||
            rpc_param_string(req, "name", false, &name, &err) < 0 ||
            rpc_param_bool(req, "flag", &flag, &err) < 0 ||
            rpc_param_object(req, "opts", false, &obj, &err) < 0)
                return rpc_reply_sb_error(req, err);
        rpc_reply_error(req, RPC_APP_ERROR, "not_found", NULL, "sandbox '%s' not found", name ? name : "?");
}

static void m_note(rpc_request *req, void *userdata) {
        fixture *f = userdata;
        f->notes++;
        rpc_reply(req, NULL);
}

/* Sends a notification on the caller's connection, then answers. */
static void m_notify(rpc_request *req, void *userdata) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "n", 1);
        rpc_notify(req->conn, "test.event", p);
        rpc_reply(req, NULL);
}

/* Sends params.mib notifications of 1 MiB each, then answers. */
static void m_flood(rpc_request *req, void *userdata) {
        fixture *f = userdata;
        rpc_conn_unref(f->flooded);
        f->flooded = rpc_conn_ref(req->conn);
        _cleanup_error_ sb_error *err = NULL;
        int64_t mib = 0;
        if (rpc_param_int(req, "mib", true, 1, 200, &mib, &err) < 0)
                return rpc_reply_sb_error(req, err);
        _cleanup_free_ char *blob = malloc(1024 * 1024 + 1);
        memset(blob, 'a', 1024 * 1024);
        blob[1024 * 1024] = '\0';
        for (int64_t i = 0; i < mib; i++) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "data", blob);
                rpc_notify(req->conn, "test.blob", p);
        }
        rpc_reply(req, NULL);
}

typedef struct work_job {
        rpc_request *req;
        int64_t in, out;
        pthread_t loop_thread, work_thread;
} work_job;

static void work_run(void *userdata) {
        work_job *j = userdata;
        j->out = j->in * 2;
        j->work_thread = pthread_self();
}

static void work_done(void *userdata) {
        work_job *j = userdata;
        cJSON *res = cJSON_CreateObject();
        cJSON_AddNumberToObject(res, "out", (double) j->out);
        cJSON_AddBoolToObject(res, "offLoop", !pthread_equal(j->loop_thread, j->work_thread));
        cJSON_AddBoolToObject(res, "doneOnLoop", pthread_equal(j->loop_thread, pthread_self()));
        rpc_reply(j->req, res);
        free(j);
}

/* Doubles params.in on a worker thread. */
static void m_work(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        int64_t in = 0;
        if (rpc_param_int(req, "in", true, 0, 1000000, &in, &err) < 0)
                return rpc_reply_sb_error(req, err);
        work_job *j = calloc(1, sizeof(*j));
        *j = (work_job) { .req = req, .in = in, .loop_thread = pthread_self() };
        assert_int_equal(worker_submit(work_run, work_done, j), 0);
}

/* Validates params.ms as a duration from 1s to 24h. */
static void m_duration(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        int64_t ms = 0;
        if (rpc_param_duration_ms(req, "timeout", true, 1000, 86400000, &ms, &err) < 0)
                return rpc_reply_sb_error(req, err);
        rpc_reply(req, NULL);
}

static int cancel_fire(sd_event_source *s, void *userdata) {
        rpc_reply_error(userdata, RPC_REQUEST_CANCELLED, "cancelled", NULL, "cancelled");
        sd_event_source_unref(s);
        return 0;
}

/* The cancel hook of test.cancellable: undoes nothing, answers "cancelled"
 * on the next loop iteration (a hook never finishes the request itself). */
static bool cancel_hook(rpc_request *req, void *userdata) {
        fixture *f = userdata;
        sd_event_source *s = NULL;
        assert_int_equal(sd_event_add_defer(f->event, &s, cancel_fire, req), 0);
        return true;
}

/* Never answers by itself: only a cancel ends it. */
static void m_cancellable(rpc_request *req, void *userdata) {
        rpc_request_set_cancel(req, cancel_hook, userdata);
}

static void on_stopped(rpc_server *s, void *userdata) {
        fixture *f = userdata;
        f->stopped++;
}

static void on_drain(rpc_conn *c, void *userdata) {
        fixture *f = userdata;
        f->drains++;
        assert_false(rpc_conn_is_congested(c));
        assert_true(rpc_conn_queued(c) <= RPC_CONN_LOW_WATER);
}

static void on_close(rpc_conn *c, void *userdata) {
        fixture *f = userdata;
        f->closes++;
        assert_false(rpc_conn_is_open(c));
}

/* ---- fixture ---- */

static int start_server(fixture *f, gid_t gid, mode_t mode) {
        rpc_server_config cfg = {
                .socket_path = f->path,
                .listen_fd = -1,
                .max_line_bytes = TEST_MAX_LINE,
                .socket_gid = gid,
                .socket_mode = mode,
                .stall_timeout_ms = TEST_STALL_MS,
        };
        sb_error *err = NULL;
        int r = rpc_server_new(f->event, &cfg, &f->server, &err);
        if (r < 0) {
                print_error("rpc_server_new: %s\n", err->message);
                sb_error_free(err);
                return r;
        }
        assert_int_equal(rpc_server_add_method(f->server, "test.echo", m_echo, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.later", m_later, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.fail", m_fail, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.note", m_note, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.notify", m_notify, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.work", m_work, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.flood", m_flood, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.echo", m_echo, f), -EEXIST);
        assert_int_equal(rpc_server_add_method(f->server, "test.duration", m_duration, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.bulk", m_later, f), 0);
        assert_int_equal(rpc_server_add_method(f->server, "test.cancellable", m_cancellable, f), 0);
        assert_int_equal(rpc_server_set_method_bulk(f->server, "test.bulk"), 0);
        assert_int_equal(rpc_server_set_method_bulk(f->server, "test.none"), -ENOENT);
        rpc_server_set_close_handler(f->server, on_close, f);
        rpc_server_set_drain_handler(f->server, on_drain, f);
        return 0;
}

static int setup(void **state) {
        fixture *f = calloc(1, sizeof(*f));
        strcpy(f->dir, "/tmp/test-rpc-XXXXXX");
        assert_non_null(mkdtemp(f->dir));
        snprintf(f->path, sizeof(f->path), "%s/sub/s.sock", f->dir);
        assert_int_equal(core_mkdir_p(f->path, 0755), 0);
        assert_int_equal(rmdir(f->path), 0);
        assert_int_equal(sd_event_new(&f->event), 0);
        assert_int_equal(worker_init(f->event), 0);
        assert_int_equal(start_server(f, (gid_t) -1, 0660), 0);
        *state = f;
        return 0;
}

static uint64_t now_ms(void) {
        return core_monotonic_ms();
}

/* Steps the loop until `cond` holds or the deadline passes. */
#define RUN_UNTIL(f, cond)                                                      \
        do {                                                                    \
                uint64_t _end = now_ms() + DEADLINE_MS;                         \
                while (!(cond) && now_ms() < _end)                              \
                        sd_event_run((f)->event, 10000);                        \
        } while (0)

static int teardown(void **state) {
        fixture *f = *state;
        /* Let every timer-held request finish so nothing leaks. */
        RUN_UNTIL(f, f->pending_later == 0);
        assert_int_equal(f->pending_later, 0);
        rpc_conn_unref(f->flooded);
        rpc_server_free(f->server);
        struct stat st;
        assert_int_equal(lstat(f->path, &st), -1);  /* the socket file is gone */
        worker_shutdown();
        sd_event_unref(f->event);
        assert_int_equal(core_rm_rf(f->dir), 0);
        free(f);
        return 0;
}

/* ---- client side ---- */

static client client_connect(fixture *f) {
        client c = { .fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) };
        assert_true(c.fd >= 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, f->path);
        assert_int_equal(connect(c.fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        return c;
}

static void client_close(client *c) {
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
        free(c->buf);
        c->buf = NULL;
        c->len = 0;
}

static void client_send(client *c, const char *s) {
        size_t n = strlen(s);
        while (n > 0) {
                ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
                assert_true(w > 0);
                s += w;
                n -= (size_t) w;
        }
}

/* Reads what is available without blocking. Returns false at EOF. */
static bool client_pump(client *c) {
        char tmp[65536];
        for (;;) {
                ssize_t n = recv(c->fd, tmp, sizeof(tmp), MSG_DONTWAIT);
                if (n < 0) {
                        assert_true(errno == EAGAIN || errno == ECONNRESET);
                        return errno == EAGAIN;
                }
                if (n == 0)
                        return false;
                c->buf = realloc(c->buf, c->len + (size_t) n + 1);
                memcpy(c->buf + c->len, tmp, (size_t) n);
                c->len += (size_t) n;
        }
}

/* Runs the server's loop until one whole line reached the client; returns
 * it parsed. Fails the test at the deadline or at EOF. */
static cJSON *client_read(fixture *f, client *c) {
        uint64_t end = now_ms() + DEADLINE_MS;
        for (;;) {
                bool open = client_pump(c);
                char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
                if (nl) {
                        size_t n = (size_t) (nl - c->buf);
                        cJSON *j = cJSON_ParseWithLength(c->buf, n);
                        if (!j)
                                fail_msg("server sent a line that is not JSON: %.*s", (int) n, c->buf);
                        memmove(c->buf, nl + 1, c->len - n - 1);
                        c->len -= n + 1;
                        return j;
                }
                if (!open)
                        fail_msg("connection closed while waiting for an answer");
                if (now_ms() > end)
                        fail_msg("no answer within %d ms", DEADLINE_MS);
                sd_event_run(f->event, 10000);
        }
}

/* Runs the loop until the server closed the connection; nothing else may
 * arrive first. */
static void client_expect_eof(fixture *f, client *c) {
        uint64_t end = now_ms() + DEADLINE_MS;
        while (client_pump(c)) {
                if (now_ms() > end)
                        fail_msg("server did not close the connection");
                sd_event_run(f->event, 10000);
        }
        assert_int_equal(c->len, 0);
}

static void assert_error(cJSON *msg, int code) {
        cJSON *err = cJSON_GetObjectItem(msg, "error");
        assert_non_null(err);
        assert_int_equal(cJSON_GetObjectItem(err, "code")->valueint, code);
        assert_true(cJSON_IsString(cJSON_GetObjectItem(err, "message")));
        assert_null(cJSON_GetObjectItem(msg, "result"));
        assert_string_equal(cJSON_GetObjectItem(msg, "jsonrpc")->valuestring, "2.0");
}

static const char *error_data(cJSON *msg, const char *key) {
        cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(msg, "error"), "data"), key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double id_of(cJSON *msg) {
        cJSON *id = cJSON_GetObjectItem(msg, "id");
        assert_true(cJSON_IsNumber(id));
        return id->valuedouble;
}

static bool id_is_null(cJSON *msg) {
        return cJSON_IsNull(cJSON_GetObjectItem(msg, "id"));
}

/* Reads one whole answer line as sent (no parse). */
static char *client_read_raw(fixture *f, client *c) {
        uint64_t end = now_ms() + DEADLINE_MS;
        for (;;) {
                bool open = client_pump(c);
                char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
                if (nl) {
                        size_t n = (size_t) (nl - c->buf);
                        char *line = strndup(c->buf, n);
                        memmove(c->buf, nl + 1, c->len - n - 1);
                        c->len -= n + 1;
                        return line;
                }
                if (!open)
                        fail_msg("connection closed while waiting for an answer");
                if (now_ms() > end)
                        fail_msg("no answer within %d ms", DEADLINE_MS);
                sd_event_run(f->event, 10000);
        }
}

/* An id the answer could not carry exactly (JSON-RPC 2.0 §4: the same id)
 * is refused with -32600 and id null, and the method does not run; an
 * integer id below 2^53 and a string id come back as sent. */
static void test_ids_that_cannot_be_echoed_exactly_are_refused(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        static const char *const bad[] = {"1e400", "-1e400", "123456789012345678901234567890", "1.5",
                                          "9007199254740992", "-9007199254740993", "0.1"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char line[256];
                snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"test.echo\",\"params\":{}}\n",
                         bad[i]);
                client_send(&c, line);
                cJSON *m = client_read(f, &c);
                assert_error(m, RPC_INVALID_REQUEST);
                assert_true(id_is_null(m));
                assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "error"), "message")->valuestring,
                                       "not representable"));
                cJSON_Delete(m);
        }
        /* Also where a refused request echoes its id (a repeated member). */
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1e400,\"method\":\"test.echo\",\"method\":\"x\"}\n");
        cJSON *m = client_read(f, &c);
        assert_error(m, RPC_INVALID_REQUEST);
        assert_true(id_is_null(m));
        cJSON_Delete(m);
        static const struct {
                const char *sent, *echoed;
        } good[] = {
                {"9007199254740991", "\"id\":9007199254740991,"},
                {"-9007199254740991", "\"id\":-9007199254740991,"},
                {"1000000000000000", "\"id\":1000000000000000,"},
                {"0", "\"id\":0,"},
                {"\"a\\\"b\\\\c\\u00e9\"", "\"id\":\"a\\\"b\\\\c\xc3\xa9\","},
        };
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                char line[256];
                snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"test.echo\",\"params\":{}}\n",
                         good[i].sent);
                client_send(&c, line);
                _cleanup_free_ char *raw = client_read_raw(f, &c);
                if (!strstr(raw, good[i].echoed))
                        fail_msg("id %s answered as %s", good[i].sent, raw);
                assert_non_null(strstr(raw, "\"result\":{}"));
        }
        client_close(&c);
}

/* ---- tests ---- */

static void test_two_lines_in_one_write_get_two_answers(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":{\"a\":1}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":\"two\",\"method\":\"test.echo\",\"params\":[\"x\"]}\n");
        cJSON *a = client_read(f, &c);
        assert_int_equal(id_of(a), 1);
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "result"), "a")->valueint, 1);
        assert_string_equal(cJSON_GetObjectItem(a, "jsonrpc")->valuestring, "2.0");
        cJSON *b = client_read(f, &c);
        assert_string_equal(cJSON_GetObjectItem(b, "id")->valuestring, "two");
        assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(b, "result"), 0)->valuestring, "x");
        cJSON_Delete(a);
        cJSON_Delete(b);
        client_close(&c);
}

static void test_line_split_across_writes_is_one_request(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":7,");
        for (int i = 0; i < 5; i++)
                sd_event_run(f->event, 0);
        client_send(&c, "\"method\":\"test.echo\"}\r\n\n   \n");
        cJSON *a = client_read(f, &c);
        assert_int_equal(id_of(a), 7);
        assert_true(cJSON_IsObject(cJSON_GetObjectItem(a, "result")));  /* absent params: {} */
        cJSON_Delete(a);
        client_close(&c);
}

static void test_garbage_gets_parse_error_and_connection_survives(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        const char *bad[] = { "hello\n", "{\"jsonrpc\":\"2.0\",\"id\":1,\n", "{} x\n", "{}{}\n" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                client_send(&c, bad[i]);
                cJSON *m = client_read(f, &c);
                assert_error(m, RPC_PARSE_ERROR);
                assert_true(id_is_null(m));
                cJSON_Delete(m);
        }
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\"}\n");
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 2);
        cJSON_Delete(m);
        client_close(&c);
}

static const char *error_message_of(cJSON *msg) {
        return cJSON_GetObjectItem(cJSON_GetObjectItem(msg, "error"), "message")->valuestring;
}

static void test_invalid_utf8_gets_32700_naming_the_byte(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        static const struct {
                const char *line;
                const char *where;
        } cases[] = {
                { "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":{\"p\":\"\xff\"}}\n", "at byte 60" },
                /* overlong NUL, a UTF-16 surrogate, past U+10FFFF, truncated */
                { "{\"p\":\"\xc0\x80\"}\n", "at byte 6" },
                { "{\"p\":\"\xed\xa0\x80\"}\n", "at byte 6" },
                { "{\"p\":\"\xf4\x90\x80\x80\"}\n", "at byte 6" },
                { "{\"p\":\"ab\xe2\x82\"}\n", "at byte 8" },
                { "{\"p\":\"\x80\"}\n", "at byte 6" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                client_send(&c, cases[i].line);
                cJSON *m = client_read(f, &c);
                assert_error(m, RPC_PARSE_ERROR);
                assert_true(id_is_null(m));
                assert_non_null(strstr(error_message_of(m), "not valid UTF-8"));
                assert_non_null(strstr(error_message_of(m), cases[i].where));
                cJSON_Delete(m);
        }
        /* Well-formed multi-byte text (2, 3 and 4 bytes) goes through untouched. */
        const char *text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xef\xbf\xbf";
        char line[256];
        snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\",\"params\":{\"p\":\"%s\"}}\n",
                 text);
        client_send(&c, line);
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 2);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "result"), "p")->valuestring, text);
        cJSON_Delete(m);
        client_close(&c);
}

static void test_nul_in_a_string_is_refused(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        const char *bad[] = {
                "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.echo\",\"params\":{\"path\":\"x\\u0000y\"}}\n",
                "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.echo\",\"params\":{\"a\\u0000\":1}}\n",
                "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.echo\",\"params\":{\"p\":\"\\\\\\u0000\"}}\n",
                "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.echo\",\"params\":[\"\\u0000\"]}\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                client_send(&c, bad[i]);
                cJSON *m = client_read(f, &c);
                assert_error(m, RPC_INVALID_REQUEST);
                assert_int_equal(id_of(m), 3);
                assert_non_null(strstr(error_message_of(m), "may not contain NUL"));
                cJSON_Delete(m);
        }
        /* An escaped backslash before "u0000" is text, not NUL; so are
         * other escapes and "\u0001". */
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"test.echo\",\"params\":"
                        "{\"p\":\"\\\\u0000\",\"q\":\"\\u00001\",\"r\":\"\\u0001\\\"\"}}\n");
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 4);
        assert_error(m, RPC_INVALID_REQUEST);  /* "\u00001" is a NUL and then "1" */
        cJSON_Delete(m);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"test.echo\",\"params\":"
                        "{\"p\":\"\\\\u0000\",\"r\":\"\\u0001\\\"\"}}\n");
        m = client_read(f, &c);
        assert_int_equal(id_of(m), 5);
        cJSON *res = cJSON_GetObjectItem(m, "result");
        assert_string_equal(cJSON_GetObjectItem(res, "p")->valuestring, "\\u0000");
        assert_string_equal(cJSON_GetObjectItem(res, "r")->valuestring, "\x01\"");
        cJSON_Delete(m);
        client_close(&c);
}

static void test_duration_errors_give_ms_and_a_duration(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        static const struct {
                const char *value;
                const char *message;
        } cases[] = {
                { "172800000", "timeout: 172800000 ms is over the maximum of 86400000 ms (24h)" },
                { "999", "timeout: 999 ms is under the minimum of 1000 ms (1s)" },
                { "\"48h\"", "timeout: must be a whole number of milliseconds from 1000 ms (1s) to 86400000 ms (24h)" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char line[256];
                snprintf(line, sizeof(line),
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.duration\",\"params\":{\"timeout\":%s}}\n",
                         cases[i].value);
                client_send(&c, line);
                cJSON *m = client_read(f, &c);
                assert_error(m, RPC_INVALID_PARAMS);
                assert_string_equal(error_data(m, "field"), "timeout");
                assert_string_equal(error_message_of(m), cases[i].message);
                cJSON_Delete(m);
        }
        char buf[32];
        assert_string_equal(rpc_format_duration(5400000, buf, sizeof(buf)), "1h30m");
        assert_string_equal(rpc_format_duration(1500, buf, sizeof(buf)), "1s500ms");
        assert_string_equal(rpc_format_duration(300000, buf, sizeof(buf)), "5m");
        assert_string_equal(rpc_format_duration(0, buf, sizeof(buf)), "0s");
        client_close(&c);
}

static void test_text_for_log_defuses_control_characters(void **state) {
        char buf[TEXT_LOG_BUF];
        /* A forged level prefix on a new line, an escape sequence, a C1 CSI,
         * a backslash (so \x0a in the input cannot pass for an escape) and
         * bytes that are not UTF-8. */
        assert_string_equal(text_for_log("oops\n<0>forged\r\x1b[2J\x7f", buf, sizeof(buf)),
                            "oops\\x0a<0>forged\\x0d\\x1b[2J\\x7f");
        assert_string_equal(text_for_log("a\\x0ab \xc2\x9b \xff\xc0\x80", buf, sizeof(buf)),
                            "a\\\\x0ab \\xc2\\x9b \\xff\\xc0\\x80");
        assert_string_equal(text_for_log("caf\xc3\xa9 \xe2\x82\xac", buf, sizeof(buf)), "caf\xc3\xa9 \xe2\x82\xac");
        assert_string_equal(text_for_log(NULL, buf, sizeof(buf)), "(null)");
        /* Long input is cut and marked; a small buffer never overflows. */
        char big[TEXT_LOG_MAX * 2];
        memset(big, '\n', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        text_for_log(big, buf, sizeof(buf));
        assert_int_equal(strlen(buf), TEXT_LOG_MAX * 4 + 3);
        assert_string_equal(buf + strlen(buf) - 3, "...");
        char small[12];
        assert_string_equal(text_for_log("abcdefghijklmnop", small, sizeof(small)), "abcde...");
}

static void test_utf8_repair_replaces_only_bad_bytes(void **state) {
        _cleanup_free_ char *a = text_utf8_repair("ok \xff x \xed\xa0\x80 \xc3\xa9", 13);
        assert_string_equal(a, "ok \xef\xbf\xbd x \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xc3\xa9");
        size_t bad = 0;
        assert_true(text_utf8_valid(a, strlen(a), NULL));
        assert_false(text_utf8_valid("ab\xf5", 3, &bad));
        assert_int_equal(bad, 2);
}

static void test_invalid_requests_get_32600(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        static const struct {
                const char *line;
                bool id_null;
        } cases[] = {
                { "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\"}]\n", true },  /* batch */
                { "42\n", true },
                { "{\"id\":3,\"method\":\"test.echo\"}\n", false },                      /* no jsonrpc */
                { "{\"jsonrpc\":\"1.0\",\"id\":3,\"method\":\"test.echo\"}\n", false },
                { "{\"jsonrpc\":\"2.0\",\"id\":{\"x\":1},\"method\":\"test.echo\"}\n", true },
                { "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"test.echo\"}\n", true },
                { "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":5}\n", false },
                { "{\"jsonrpc\":\"2.0\",\"id\":3}\n", false },
                { "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.echo\",\"params\":\"x\"}\n", false },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                client_send(&c, cases[i].line);
                cJSON *m = client_read(f, &c);
                assert_error(m, RPC_INVALID_REQUEST);
                if (cases[i].id_null)
                        assert_true(id_is_null(m));
                else
                        assert_int_equal(id_of(m), 3);
                cJSON_Delete(m);
        }
        client_close(&c);
}

static void test_unknown_method_gets_32601(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"no.such\"}\n");
        cJSON *m = client_read(f, &c);
        assert_error(m, RPC_METHOD_NOT_FOUND);
        assert_int_equal(id_of(m), 9);
        assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "error"), "message")->valuestring,
                               "no.such"));
        cJSON_Delete(m);
        client_close(&c);
}

static void test_param_helpers_name_the_field(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        static const struct {
                const char *params;
                const char *field;
        } cases[] = {
                { "{}", "count" },                               /* required, missing */
                { "{\"count\":\"3\"}", "count" },                /* wrong type */
                { "{\"count\":11}", "count" },                   /* out of range */
                { "{\"count\":2.5}", "count" },                  /* not whole */
                { "{\"count\":1e300}", "count" },
                { "{\"count\":2,\"name\":7}", "name" },
                { "{\"count\":2,\"flag\":1}", "flag" },
                { "{\"count\":2,\"opts\":[]}", "opts" },
        };
        char line[256];
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"test.fail\",\"params\":%s}\n",
                         i, cases[i].params);
                client_send(&c, line);
                cJSON *m = client_read(f, &c);
                assert_error(m, RPC_INVALID_PARAMS);
                assert_int_equal(id_of(m), i);
                const char *field = error_data(m, "field");
                assert_non_null(field);
                assert_string_equal(field, cases[i].field);
                assert_non_null(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "error"), "message")->valuestring,
                                       cases[i].field));
                cJSON_Delete(m);
        }
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"test.fail\",\"params\":{\"count\":3,\"name\":\"box\",\"flag\":true,\"opts\":{}}}\n");
        cJSON *m = client_read(f, &c);
        assert_error(m, RPC_APP_ERROR);
        assert_string_equal(error_data(m, "reason"), "not_found");
        assert_null(error_data(m, "field"));
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "error"), "message")->valuestring,
                            "sandbox 'box' not found");
        cJSON_Delete(m);
        client_close(&c);
}

static void test_line_too_long_gets_32600_and_close(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        char big[TEST_MAX_LINE + 100];
        memset(big, ' ', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        client_send(&c, big);  /* no newline yet: the limit applies before the line ends */
        cJSON *m = client_read(f, &c);
        assert_error(m, RPC_INVALID_REQUEST);
        assert_true(id_is_null(m));
        char want[64];
        snprintf(want, sizeof(want), "line exceeds maxLineBytes (%d bytes)", TEST_MAX_LINE);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "error"), "message")->valuestring, want);
        cJSON_Delete(m);
        client_expect_eof(f, &c);
        assert_int_equal(f->closes, 1);
        client_close(&c);
}

static void test_line_at_the_limit_is_accepted(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        const char *head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":{\"p\":\"";
        const char *tail = "\"}}";
        char line[TEST_MAX_LINE + 2];
        size_t pad = TEST_MAX_LINE - strlen(head) - strlen(tail);
        strcpy(line, head);
        memset(line + strlen(head), 'x', pad);
        strcpy(line + strlen(head) + pad, tail);
        assert_int_equal(strlen(line), TEST_MAX_LINE);
        strcat(line, "\n");
        client_send(&c, line);
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 1);
        assert_int_equal(strlen(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "result"), "p")->valuestring), pad);
        cJSON_Delete(m);
        client_close(&c);
}

static void test_many_in_flight_answer_in_completion_order(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.later\",\"params\":{\"ms\":200}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.later\",\"params\":{\"ms\":20}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.echo\"}\n");
        int order[3];
        for (int i = 0; i < 3; i++) {
                cJSON *m = client_read(f, &c);
                order[i] = (int) id_of(m);
                cJSON_Delete(m);
        }
        assert_int_equal(order[0], 3);
        assert_int_equal(order[1], 2);
        assert_int_equal(order[2], 1);
        client_close(&c);
}

static void test_disconnect_with_request_in_flight_is_safe(void **state) {
        fixture *f = *state;
        client a = client_connect(f);
        client b = client_connect(f);
        client_send(&a, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.later\",\"params\":{\"ms\":100}}\n");
        /* Let the server take the request before the client vanishes. */
        RUN_UNTIL(f, f->pending_later == 1);
        assert_int_equal(f->pending_later, 1);
        client_close(&a);
        client_send(&b, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\"}\n");
        cJSON *m = client_read(f, &b);
        assert_int_equal(id_of(m), 2);
        cJSON_Delete(m);
        RUN_UNTIL(f, f->pending_later == 0 && f->closes == 1);
        assert_int_equal(f->pending_later, 0);  /* the late reply went nowhere, safely */
        assert_int_equal(f->closes, 1);
        client_send(&b, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.echo\"}\n");
        m = client_read(f, &b);
        assert_int_equal(id_of(m), 3);
        cJSON_Delete(m);
        client_close(&b);
}

static void test_notifications_get_no_answer(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"method\":\"test.note\"}\n"
                        "{\"jsonrpc\":\"2.0\",\"method\":\"no.such\"}\n"
                        "{\"jsonrpc\":\"2.0\",\"method\":\"test.fail\",\"params\":{}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"test.echo\"}\n");
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 5);  /* the first line back answers the request */
        assert_int_equal(f->notes, 1);
        cJSON_Delete(m);
        client_close(&c);
}

static void test_id_null_request_is_answered(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"test.echo\",\"params\":{\"k\":true}}\n");
        cJSON *m = client_read(f, &c);
        assert_true(id_is_null(m));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "result"), "k")));
        cJSON_Delete(m);
        client_close(&c);
}

static void test_server_notification_has_no_id(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.notify\"}\n");
        cJSON *n = client_read(f, &c);
        assert_null(cJSON_GetObjectItem(n, "id"));
        assert_string_equal(cJSON_GetObjectItem(n, "method")->valuestring, "test.event");
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(n, "params"), "n")->valueint, 1);
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 1);
        cJSON_Delete(n);
        cJSON_Delete(m);
        client_close(&c);
}

static void test_half_closed_peer_still_gets_answers(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.later\",\"params\":{\"ms\":30}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\"}");  /* last line unterminated */
        assert_int_equal(shutdown(c.fd, SHUT_WR), 0);
        cJSON *a = client_read(f, &c);
        cJSON *b = client_read(f, &c);
        assert_int_equal(id_of(a), 2);
        assert_int_equal(id_of(b), 1);
        cJSON_Delete(a);
        cJSON_Delete(b);
        client_expect_eof(f, &c);
        client_close(&c);
}

/* One bulk request at a time per connection, and the lines after a held
 * one wait too (order kept); a half-closed peer still gets every answer. */
static void test_bulk_requests_run_one_at_a_time_in_order(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.bulk\",\"params\":{\"ms\":100}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\"}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.bulk\",\"params\":{\"ms\":1}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"test.echo\"}");
        assert_int_equal(shutdown(c.fd, SHUT_WR), 0);
        int order[4];
        for (int i = 0; i < 4; i++) {
                cJSON *m = client_read(f, &c);
                order[i] = (int) id_of(m);
                cJSON_Delete(m);
        }
        /* 2 runs at once; 3 (1 ms) waits for 1 (100 ms), and 4 behind it. */
        assert_int_equal(order[0], 2);
        assert_int_equal(order[1], 1);
        assert_int_equal(order[2], 4);
        assert_int_equal(order[3], 3);
        client_expect_eof(f, &c);
        client_close(&c);
}

static void test_deep_nesting_is_named_with_its_limit(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        char line[1024];
        int n = snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":{\"a\":");
        for (int i = 0; i < 100; i++)
                line[n++] = '[';
        for (int i = 0; i < 100; i++)
                line[n++] = ']';
        /* Brackets inside strings do not count. */
        snprintf(line + n, sizeof(line) - (size_t) n, ",\"s\":\"[[[[\"}}\n");
        client_send(&c, line);
        cJSON *m = client_read(f, &c);
        cJSON *e = cJSON_GetObjectItem(m, "error");
        assert_int_equal(cJSON_GetObjectItem(e, "code")->valueint, RPC_INVALID_REQUEST);
        assert_non_null(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(e, "message")), "nested too deep (limit 64)"));
        cJSON_Delete(m);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\",\"params\":{\"s\":\"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"}}\n");
        m = client_read(f, &c);
        assert_non_null(cJSON_GetObjectItem(m, "result"));
        cJSON_Delete(m);
        client_close(&c);
}

static void test_text_quote_cuts_at_64_characters(void **state) {
        char buf[TEXT_QUOTE_BUF];
        assert_string_equal(text_quote("short", buf), "short");
        assert_string_equal(text_quote(NULL, buf), "");
        char long_in[300];
        memset(long_in, 'x', 200);
        long_in[200] = 0;
        text_quote(long_in, buf);
        assert_int_equal(strspn(buf, "x"), 64);
        assert_string_equal(buf + 64, "...(200 bytes)");
        /* Characters, not bytes: 70 two-byte characters keep 64 whole ones. */
        char utf[200] = "";
        for (int i = 0; i < 70; i++)
                strcat(utf, "\xc3\xa9");
        text_quote(utf, buf);
        assert_int_equal(strncmp(buf, utf, 128), 0);
        assert_string_equal(buf + 128, "...(140 bytes)");
}

static void test_limits_count_json_bytes_and_name_the_field(void **state) {
        assert_int_equal(limit_json_len("abc"), 3);
        assert_int_equal(limit_json_len("a\"\\\n"), 7);
        assert_int_equal(limit_json_len("\x01"), 6);
        cJSON *env = cJSON_Parse("{\"A\":\"1\",\"B\":\"2\"}");
        sb_error *err = NULL;
        assert_int_equal(limit_check_map(env, "env", &limit_env, &err), 0);
        char *big = malloc(LIMIT_ENV_VALUE_BYTES + 2);
        memset(big, 'v', LIMIT_ENV_VALUE_BYTES + 1);
        big[LIMIT_ENV_VALUE_BYTES + 1] = 0;
        cJSON_AddStringToObject(env, "BIG", big);
        assert_int_equal(limit_check_map(env, "env", &limit_env, &err), -E2BIG);
        assert_string_equal(err->field, "env.BIG");
        assert_non_null(strstr(err->message, "32768"));
        sb_error_free(err);
        err = NULL;
        cJSON_Delete(env);
        /* Just at the limit per value, but three of them are over the total. */
        big[LIMIT_ENV_VALUE_BYTES - 4] = 0;
        env = cJSON_CreateObject();
        cJSON_AddStringToObject(env, "A", big);
        cJSON_AddStringToObject(env, "B", big);
        assert_int_equal(limit_check_map(env, "env", &limit_env, &err), 0);
        cJSON_AddStringToObject(env, "C", big);
        assert_int_equal(limit_check_map(env, "env", &limit_env, &err), -E2BIG);
        assert_string_equal(err->field, "env");
        sb_error_free(err);
        err = NULL;
        cJSON_Delete(env);
        cJSON *args = cJSON_CreateArray();
        cJSON_AddItemToArray(args, cJSON_CreateString(big));
        cJSON_AddItemToArray(args, cJSON_CreateString(big));
        assert_int_equal(limit_check_args(args, "args", &err), 0);
        cJSON_AddItemToArray(args, cJSON_CreateString(big));
        assert_int_equal(limit_check_args(args, "args", &err), -E2BIG);
        assert_string_equal(err->field, "args");
        sb_error_free(err);
        cJSON_Delete(args);
        free(big);
}

static void test_worker_runs_off_loop_and_finishes_on_loop(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        char line[128];
        for (int i = 1; i <= 8; i++) {
                snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"test.work\",\"params\":{\"in\":%d}}\n",
                         i, i * 10);
                client_send(&c, line);
        }
        bool seen[9] = {};
        for (int i = 0; i < 8; i++) {
                cJSON *m = client_read(f, &c);
                int id = (int) id_of(m);
                assert_true(id >= 1 && id <= 8 && !seen[id]);
                seen[id] = true;
                cJSON *res = cJSON_GetObjectItem(m, "result");
                assert_int_equal(cJSON_GetObjectItem(res, "out")->valueint, id * 20);
                assert_true(cJSON_IsTrue(cJSON_GetObjectItem(res, "offLoop")));
                assert_true(cJSON_IsTrue(cJSON_GetObjectItem(res, "doneOnLoop")));
                cJSON_Delete(m);
        }
        assert_int_equal(worker_in_flight(), 0);
        client_close(&c);
}

static void test_peer_that_stops_reading_is_dropped(void **state) {
        fixture *f = *state;
        client slow = client_connect(f);
        client other = client_connect(f);
        client_send(&slow, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.flood\",\"params\":{\"mib\":80}}\n");
        RUN_UNTIL(f, f->closes == 1);
        assert_int_equal(f->closes, 1);
        /* Everyone else is still served. */
        client_send(&other, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\"}\n");
        cJSON *m = client_read(f, &other);
        assert_int_equal(id_of(m), 2);
        cJSON_Delete(m);
        client_close(&other);
        client_close(&slow);
}

/* Reads what arrived, counting lines; at most `max` bytes. */
static size_t client_drain(client *c, size_t max, size_t *lines) {
        char tmp[65536];
        size_t got = 0;
        while (got < max) {
                ssize_t n = recv(c->fd, tmp, sizeof(tmp) < max - got ? sizeof(tmp) : max - got, MSG_DONTWAIT);
                if (n <= 0)
                        break;
                for (ssize_t i = 0; i < n; i++)
                        *lines += tmp[i] == '\n';
                got += (size_t) n;
        }
        return got;
}

static void test_congested_connection_reports_when_drained(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.flood\",\"params\":{\"mib\":8}}\n");
        RUN_UNTIL(f, f->flooded != NULL);
        assert_non_null(f->flooded);
        assert_true(rpc_conn_is_congested(f->flooded));
        assert_true(rpc_conn_queued(f->flooded) > RPC_CONN_HIGH_WATER);
        assert_int_equal(f->drains, 0);
        /* The peer reads: once the queue is down to the low mark, one call. */
        size_t lines = 0;
        uint64_t end = now_ms() + DEADLINE_MS;
        while (lines < 9 && now_ms() < end) {
                client_drain(&c, SIZE_MAX, &lines);
                sd_event_run(f->event, 10000);
        }
        assert_int_equal(lines, 9);  /* 8 notifications and the answer */
        assert_int_equal(f->drains, 1);
        assert_false(rpc_conn_is_congested(f->flooded));
        assert_int_equal(rpc_conn_queued(f->flooded), 0);
        assert_int_equal(f->closes, 0);
        client_close(&c);
}

static void test_slow_reader_with_a_huge_queue_is_kept(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.flood\",\"params\":{\"mib\":80}}\n");
        /* 256 KiB per 20 ms: the queue stays over 64 MiB for more than a
         * second (several stall periods), but the peer keeps taking bytes. */
        size_t lines = 0;
        uint64_t end = now_ms() + 4 * DEADLINE_MS;
        while (lines < 81 && now_ms() < end && f->closes == 0) {
                client_drain(&c, 256 * 1024, &lines);
                usleep(20 * 1000);
                sd_event_run(f->event, 0);
        }
        assert_int_equal(f->closes, 0);
        assert_int_equal(lines, 81);
        client_close(&c);
}

static void test_socket_file_has_mode_and_refuses_to_clobber(void **state) {
        fixture *f = *state;
        struct stat st;
        assert_int_equal(lstat(f->path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0660);
        /* A second server on the same path: someone listens there. */
        rpc_server *s2 = NULL;
        sb_error *err = NULL;
        rpc_server_config cfg = { .socket_path = f->path, .listen_fd = -1, .socket_gid = (gid_t) -1,
                                  .socket_mode = 0660 };
        assert_int_equal(rpc_server_new(f->event, &cfg, &s2, &err), -EADDRINUSE);
        sb_error_free(err);
        err = NULL;
        /* A regular file is never replaced. */
        char other[160];
        snprintf(other, sizeof(other), "%s/file", f->dir);
        assert_int_equal(core_write_file_atomic(other, "x", 1, 0644), 0);
        cfg.socket_path = other;
        assert_int_equal(rpc_server_new(f->event, &cfg, &s2, &err), -EEXIST);
        assert_non_null(strstr(err->message, "not a socket"));
        sb_error_free(err);
        err = NULL;
        /* A stale socket (bound, nobody listening) is replaced. */
        char stale[160];
        snprintf(stale, sizeof(stale), "%s/stale.sock", f->dir);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, stale);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        close(fd);
        cfg.socket_path = stale;
        assert_int_equal(rpc_server_new(f->event, &cfg, &s2, &err), 0);
        rpc_server_free(s2);
        assert_int_equal(lstat(stale, &st), -1);
}

/* Runs `fn` in a child that dropped to uid/gid 65534 with `groups`, while
 * the parent steps the loop; returns the child's exit status. */
static int run_as_nobody(fixture *f, const gid_t *groups, size_t n_groups, int (*fn)(const char *path)) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (setgroups(n_groups, groups) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(99);
                _exit(fn(f->path));
        }
        uint64_t end = now_ms() + DEADLINE_MS;
        int status = 0;
        while (waitpid(pid, &status, WNOHANG) == 0) {
                if (now_ms() > end) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &status, 0);
                        fail_msg("child did not finish");
                }
                sd_event_run(f->event, 10000);
        }
        assert_true(WIFEXITED(status));
        return WEXITSTATUS(status);
}

/* Child side: connects, sends an echo, reads one line. Exit 0 when the
 * answer is the echo, 1 when it is the permission_denied error, else 2+. */
static int child_call(const char *path) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, path);
        struct timeval tv = { .tv_sec = 5 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return 3;
        const char *req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\"}\n";
        /* A refused peer may find the server gone already (EPIPE); what the
         * server wrote before hanging up is still there to read. */
        if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0 && errno != EPIPE)
                return 4;
        char buf[1024];
        size_t len = 0;
        while (len < sizeof(buf) - 1 && !memchr(buf, '\n', len)) {
                ssize_t n = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
                if (n <= 0)
                        return 5;
                len += (size_t) n;
        }
        buf[len] = '\0';
        if (strstr(buf, "\"result\"") && strstr(buf, "\"id\":1"))
                return 0;
        if (strstr(buf, "\"code\":-32000") && strstr(buf, "\"reason\":\"permission_denied\"")) {
                /* ... and the server hangs up: EOF, or a reset when it
                 * closed with our unread request still queued. */
                char x;
                ssize_t n = recv(fd, &x, 1, 0);
                return n == 0 || (n < 0 && errno == ECONNRESET) ? 1 : 6;
        }
        return 7;
}

static void test_peer_outside_socket_group_is_refused(void **state) {
        fixture *f = *state;
        /* Open the file permissions so only the SO_PEERCRED check stands. */
        rpc_server_free(f->server);
        assert_int_equal(chmod(f->dir, 0755), 0);
        assert_int_equal(start_server(f, 4242, 0666), 0);
        assert_int_equal(run_as_nobody(f, NULL, 0, child_call), 1);
        gid_t member[] = { 1, 4242 };
        assert_int_equal(run_as_nobody(f, member, 2, child_call), 0);
        RUN_UNTIL(f, f->closes == 1);
        assert_int_equal(f->closes, 1);  /* the refused peer never reached the close handler */
}

static void test_root_only_when_no_group(void **state) {
        fixture *f = *state;
        rpc_server_free(f->server);
        assert_int_equal(chmod(f->dir, 0755), 0);
        assert_int_equal(start_server(f, (gid_t) -1, 0666), 0);
        gid_t member[] = { 4242 };
        assert_int_equal(run_as_nobody(f, member, 1, child_call), 1);
}

/* ---- rpc_server_stop ---- */

static cJSON *error_data_item(cJSON *msg, const char *key) {
        return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(msg, "error"), "data"), key);
}

static void stop_server(fixture *f, unsigned finish_ms, unsigned rollback_ms) {
        rpc_stop_config cfg = {
                .finish_usec = finish_ms * 1000ULL,
                .rollback_usec = rollback_ms * 1000ULL,
                .flush_usec = 1000 * 1000,
        };
        rpc_server_stop(f->server, &cfg, on_stopped, f);
        assert_true(rpc_server_is_stopping(f->server));
}

static void test_stop_answers_the_request_in_flight_and_refuses_new_ones(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.later\",\"params\":{\"ms\":100}}\n");
        RUN_UNTIL(f, f->pending_later == 1);
        stop_server(f, 5000, 1000);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.echo\"}\n");
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 2);
        assert_error(m, RPC_APP_ERROR);
        assert_string_equal(error_data(m, "reason"), "unavailable");
        assert_true(cJSON_IsFalse(error_data_item(m, "completed")));
        cJSON_Delete(m);
        m = client_read(f, &c);
        assert_int_equal(id_of(m), 1);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "result"), "later")));
        cJSON_Delete(m);
        client_expect_eof(f, &c);
        RUN_UNTIL(f, f->stopped == 1);
        assert_int_equal(f->stopped, 1);
        client_close(&c);
}

static void test_stop_rolls_back_what_can_be_and_answers_it_not_completed(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"test.cancellable\"}\n");
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"test.echo\"}\n");
        cJSON *m = client_read(f, &c);  /* the echo: both were read */
        assert_int_equal(id_of(m), 8);
        cJSON_Delete(m);
        stop_server(f, 20, 5000);
        m = client_read(f, &c);
        assert_int_equal(id_of(m), 7);
        assert_error(m, RPC_APP_ERROR);
        assert_string_equal(error_data(m, "reason"), "unavailable");
        assert_true(cJSON_IsFalse(error_data_item(m, "completed")));
        cJSON_Delete(m);
        client_expect_eof(f, &c);
        RUN_UNTIL(f, f->stopped == 1);
        assert_int_equal(f->stopped, 1);
        client_close(&c);
}

static void test_stop_answers_unknown_for_what_neither_finishes_nor_rolls_back(void **state) {
        fixture *f = *state;
        client c = client_connect(f);
        client_send(&c, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.later\",\"params\":{\"ms\":1500}}\n");
        RUN_UNTIL(f, f->pending_later == 1);
        stop_server(f, 20, 20);
        cJSON *m = client_read(f, &c);
        assert_int_equal(id_of(m), 3);
        assert_string_equal(error_data(m, "reason"), "unavailable");
        assert_true(cJSON_IsNull(error_data_item(m, "completed")));
        cJSON_Delete(m);
        client_expect_eof(f, &c);
        RUN_UNTIL(f, f->stopped == 1);
        assert_int_equal(f->stopped, 1);
        client_close(&c);
        /* The owner's late answer (teardown waits for it) goes nowhere. */
}

int main(void) {
        const struct CMUnitTest tests[] = {
#define T(x) cmocka_unit_test_setup_teardown(x, setup, teardown)
                T(test_two_lines_in_one_write_get_two_answers),
                T(test_line_split_across_writes_is_one_request),
                T(test_garbage_gets_parse_error_and_connection_survives),
                T(test_invalid_utf8_gets_32700_naming_the_byte),
                T(test_nul_in_a_string_is_refused),
                T(test_duration_errors_give_ms_and_a_duration),
                T(test_invalid_requests_get_32600),
                T(test_ids_that_cannot_be_echoed_exactly_are_refused),
                T(test_unknown_method_gets_32601),
                T(test_param_helpers_name_the_field),
                T(test_line_too_long_gets_32600_and_close),
                T(test_line_at_the_limit_is_accepted),
                T(test_many_in_flight_answer_in_completion_order),
                T(test_stop_answers_the_request_in_flight_and_refuses_new_ones),
                T(test_stop_rolls_back_what_can_be_and_answers_it_not_completed),
                T(test_stop_answers_unknown_for_what_neither_finishes_nor_rolls_back),
                T(test_disconnect_with_request_in_flight_is_safe),
                T(test_notifications_get_no_answer),
                T(test_id_null_request_is_answered),
                T(test_server_notification_has_no_id),
                T(test_half_closed_peer_still_gets_answers),
                T(test_bulk_requests_run_one_at_a_time_in_order),
                T(test_deep_nesting_is_named_with_its_limit),
                T(test_worker_runs_off_loop_and_finishes_on_loop),
                T(test_peer_that_stops_reading_is_dropped),
                T(test_congested_connection_reports_when_drained),
                T(test_slow_reader_with_a_huge_queue_is_kept),
                T(test_socket_file_has_mode_and_refuses_to_clobber),
                T(test_peer_outside_socket_group_is_refused),
                T(test_root_only_when_no_group),
#undef T
                cmocka_unit_test(test_text_for_log_defuses_control_characters),
                cmocka_unit_test(test_utf8_repair_replaces_only_bad_bytes),
                cmocka_unit_test(test_text_quote_cuts_at_64_characters),
                cmocka_unit_test(test_limits_count_json_bytes_and_name_the_field),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
