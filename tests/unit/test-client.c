/* Unit tests for the JSON-RPC client (cli/client.c) against a scripted fake
 * server on the other end of a socketpair, and for sandboxctl's pure
 * helpers (cli/parse.c): durations, K=V, NAME:PATH, exit codes, and the
 * escaping of sandbox text in human output (cli/output.c). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/client.h"
#include "cli/parse.h"
#include "cli/ctl.h"

/* --- fake server ------------------------------------------------------ */

typedef struct fake {
        client *c;
        int server;   /* our end of the socketpair */
} fake;

static int fake_setup(void **state) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        fake *f = calloc(1, sizeof(*f));
        f->c = client_new_fd(sv[0]);
        assert_non_null(f->c);
        f->server = sv[1];
        *state = f;
        return 0;
}

static int fake_teardown(void **state) {
        fake *f = *state;
        client_free(f->c);
        if (f->server >= 0)
                close(f->server);
        free(f);
        return 0;
}

static void server_write(fake *f, const char *s) {
        size_t n = strlen(s);
        assert_int_equal(send(f->server, s, n, MSG_NOSIGNAL), (ssize_t) n);
}

/* Reads one request line the client sent and parses it. */
static cJSON *server_read_request(fake *f) {
        char line[4096];
        size_t n = 0;
        while (n < sizeof(line) - 1) {
                ssize_t r = read(f->server, line + n, 1);
                assert_int_equal(r, 1);
                if (line[n] == '\n')
                        break;
                n++;
        }
        line[n] = 0;
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        return j;
}

static const char *str(const cJSON *obj, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *obj, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        assert_true(cJSON_IsNumber(v));
        return v->valuedouble;
}

/* --- framing ---------------------------------------------------------- */

static void test_partial_line_waits_for_the_rest(void **state) {
        fake *f = *state;
        client_msg *m = NULL;
        server_write(f, "{\"jsonrpc\":\"2.0\",\"method\":\"command.out");
        assert_int_equal(client_next(f->c, 0, &m), 0);
        assert_false(client_has_pending(f->c));
        server_write(f, "put\",\"params\":{\"n\":1}}");
        assert_int_equal(client_next(f->c, 0, &m), 0);
        server_write(f, "\n");
        assert_int_equal(client_next(f->c, 0, &m), 1);
        assert_int_equal(m->kind, CLIENT_MSG_NOTIFICATION);
        assert_string_equal(m->method, "command.output");
        assert_int_equal((int) num(m->params, "n"), 1);
        client_msg_free(m);
}

static void test_two_messages_in_one_read_both_delivered(void **state) {
        fake *f = *state;
        client_msg *m = NULL;
        server_write(f, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"a\":1}}\n"
                        "{\"jsonrpc\":\"2.0\",\"method\":\"command.exit\",\"params\":{\"exitCode\":3}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":8,\"res");
        assert_int_equal(client_next(f->c, 0, &m), 1);
        assert_int_equal(m->kind, CLIENT_MSG_RESPONSE);
        assert_int_equal(m->id, 7);
        assert_int_equal((int) num(m->result, "a"), 1);
        client_msg_free(m);
        /* The second line is already buffered: poll() on the fd would miss it. */
        assert_true(client_has_pending(f->c));
        assert_int_equal(client_next(f->c, 0, &m), 1);
        assert_int_equal(m->kind, CLIENT_MSG_NOTIFICATION);
        assert_string_equal(m->method, "command.exit");
        client_msg_free(m);
        assert_false(client_has_pending(f->c));
        assert_int_equal(client_next(f->c, 0, &m), 0);
}

typedef struct writer {
        int fd;
        size_t total;      /* bytes of filler before the newline */
        bool newline;
} writer;

/* Writes {"jsonrpc":"2.0","method":"big","params":{"s":"xxx…"}}\n in
 * small pieces, from a thread because it exceeds the socket buffer. */
static void *write_big_line(void *arg) {
        writer *w = arg;
        const char *head = "{\"jsonrpc\":\"2.0\",\"method\":\"big\",\"params\":{\"s\":\"";
        if (send(w->fd, head, strlen(head), MSG_NOSIGNAL) < 0)
                return NULL;
        static char chunk[4093];  /* an odd size, so pieces straddle reads */
        memset(chunk, 'x', sizeof(chunk));
        for (size_t left = w->total; left > 0;) {
                size_t n = left < sizeof(chunk) ? left : sizeof(chunk);
                if (send(w->fd, chunk, n, MSG_NOSIGNAL) < 0)
                        return NULL;   /* the client gave up (line too long) */
                left -= n;
        }
        if (w->newline)
                (void) !send(w->fd, "\"}}\n", 4, MSG_NOSIGNAL);
        return NULL;
}

static void test_line_of_5_mib_in_small_writes_arrives_whole(void **state) {
        fake *f = *state;
        writer w = { .fd = f->server, .total = 5u << 20, .newline = true };
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, write_big_line, &w), 0);
        client_msg *m = NULL;
        assert_int_equal(client_next(f->c, -1, &m), 1);
        pthread_join(t, NULL);
        assert_string_equal(m->method, "big");
        const char *s = str(m->params, "s");
        assert_non_null(s);
        assert_int_equal(strlen(s), 5u << 20);
        assert_int_equal(strspn(s, "x"), 5u << 20);
        client_msg_free(m);
}

static void test_line_over_limit_is_emsgsize(void **state) {
        fake *f = *state;
        writer w = { .fd = f->server, .total = CLIENT_MAX_LINE + 4096, .newline = false };
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, write_big_line, &w), 0);
        client_msg *m = NULL;
        int r;
        while ((r = client_next(f->c, -1, &m)) == 0)
                ;
        assert_int_equal(r, -EMSGSIZE);
        /* Closing our end unblocks the writer with EPIPE. */
        client_free(f->c);
        f->c = NULL;
        pthread_join(t, NULL);
}

static void test_non_json_line_is_skipped_with_ebadmsg(void **state) {
        fake *f = *state;
        client_msg *m = NULL;
        server_write(f, "not json\n[1,2]\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":true}\n");
        assert_int_equal(client_next(f->c, 0, &m), -EBADMSG);
        assert_int_equal(client_next(f->c, 0, &m), -EBADMSG);
        assert_int_equal(client_next(f->c, 0, &m), 1);
        assert_int_equal(m->id, 1);
        assert_true(cJSON_IsTrue(m->result));
        client_msg_free(m);
}

static void test_daemon_hangup_is_econnreset(void **state) {
        fake *f = *state;
        client_msg *m = NULL;
        server_write(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n{\"trunc");
        close(f->server);
        f->server = -1;
        assert_int_equal(client_next(f->c, -1, &m), 1);
        client_msg_free(m);
        assert_int_equal(client_next(f->c, -1, &m), -ECONNRESET);
}

/* --- requests and waiting ---------------------------------------------- */

static void test_requests_carry_increasing_ids_and_params(void **state) {
        fake *f = *state;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", "line\nbreak");
        assert_int_equal(client_send(f->c, "sandbox.get", p), 1);
        assert_int_equal(client_send(f->c, "daemon.info", NULL), 2);
        assert_int_equal(client_notify(f->c, "ping", NULL), 0);

        cJSON *r1 = server_read_request(f), *r2 = server_read_request(f), *r3 = server_read_request(f);
        assert_string_equal(str(r1, "jsonrpc"), "2.0");
        assert_string_equal(str(r1, "method"), "sandbox.get");
        assert_int_equal((int) num(r1, "id"), 1);
        /* The newline inside a string was escaped: the request stayed one line. */
        assert_string_equal(str(cJSON_GetObjectItem(r1, "params"), "name"), "line\nbreak");
        assert_int_equal((int) num(r2, "id"), 2);
        assert_null(cJSON_GetObjectItem(r2, "params"));
        assert_null(cJSON_GetObjectItem(r3, "id"));
        assert_string_equal(str(r3, "method"), "ping");
        cJSON_Delete(r1);
        cJSON_Delete(r2);
        cJSON_Delete(r3);
}

typedef struct seen {
        int n;
        int values[8];
} seen;

static void record(const client_msg *m, void *userdata) {
        seen *s = userdata;
        assert_int_equal(m->kind, CLIENT_MSG_NOTIFICATION);
        assert_true(s->n < 8);
        s->values[s->n++] = (int) num(m->params, "n");
}

static void test_out_of_order_responses_matched_by_id(void **state) {
        fake *f = *state;
        int64_t a = client_send(f->c, "command.run", NULL);
        int64_t b = client_send(f->c, "command.write", NULL);
        assert_true(a > 0 && b > a);
        char script[512];
        snprintf(script, sizeof(script),
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"which\":\"b\"}}\n"
                 "{\"jsonrpc\":\"2.0\",\"method\":\"command.output\",\"params\":{\"n\":1}}\n"
                 "{\"jsonrpc\":\"2.0\",\"method\":\"command.output\",\"params\":{\"n\":2}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{\"which\":\"a\"}}\n"
                 "{\"jsonrpc\":\"2.0\",\"method\":\"command.output\",\"params\":{\"n\":3}}\n",
                 (int) b, (int) a);
        server_write(f, script);

        seen s = {};
        cJSON *result = NULL;
        assert_int_equal(client_wait(f->c, a, 1000, record, &s, &result, NULL), 0);
        assert_string_equal(str(result, "which"), "a");
        cJSON_Delete(result);
        assert_int_equal(s.n, 2);
        assert_int_equal(s.values[0], 1);
        assert_int_equal(s.values[1], 2);

        /* b's answer came first; it was kept, not dropped. */
        assert_int_equal(client_wait(f->c, b, 0, record, &s, &result, NULL), 0);
        assert_string_equal(str(result, "which"), "b");
        cJSON_Delete(result);

        /* n=3 arrived after a's answer and is still buffered, in order. */
        client_msg *m = NULL;
        assert_int_equal(client_next(f->c, 0, &m), 1);
        assert_int_equal((int) num(m->params, "n"), 3);
        client_msg_free(m);
}

static void test_notifications_queued_without_callback_then_delivered_in_order(void **state) {
        fake *f = *state;
        int64_t a = client_send(f->c, "x", NULL);
        int64_t b = client_send(f->c, "y", NULL);
        char script[512];
        snprintf(script, sizeof(script),
                 "{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"n\":1}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{}}\n"
                 "{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"n\":2}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{}}\n",
                 (int) a, (int) b);
        server_write(f, script);
        /* No callback: n=1 is queued. */
        assert_int_equal(client_wait(f->c, a, 1000, NULL, NULL, NULL, NULL), 0);
        /* With a callback: the queued n=1 first, then n=2 read now. */
        seen s = {};
        assert_int_equal(client_wait(f->c, b, 1000, record, &s, NULL, NULL), 0);
        assert_int_equal(s.n, 2);
        assert_int_equal(s.values[0], 1);
        assert_int_equal(s.values[1], 2);
}

static void test_queued_messages_come_first_from_client_next(void **state) {
        fake *f = *state;
        int64_t a = client_send(f->c, "x", NULL);
        char script[512];
        snprintf(script, sizeof(script),
                 "{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"n\":1}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"result\":{}}\n"
                 "{\"jsonrpc\":\"2.0\",\"method\":\"event\",\"params\":{\"n\":2}}\n", (int) a);
        server_write(f, script);
        assert_int_equal(client_wait(f->c, a, 1000, NULL, NULL, NULL, NULL), 0);
        client_msg *m = NULL;
        for (int n = 1; n <= 2; n++) {
                assert_int_equal(client_next(f->c, 0, &m), 1);
                assert_int_equal((int) num(m->params, "n"), n);
                client_msg_free(m);
        }
        assert_int_equal(client_next(f->c, 0, &m), 0);
}

static void test_error_answer_decoded_with_reason_and_field(void **state) {
        fake *f = *state;
        client_error *err = NULL;
        cJSON *result = (cJSON *) 0x1;
        int64_t a = client_send(f->c, "sandbox.create", NULL);
        int64_t b = client_send(f->c, "sandbox.create", NULL);
        char script[512];
        snprintf(script, sizeof(script),
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"error\":{\"code\":-32602,\"message\":\"bad url\","
                 "\"data\":{\"field\":\"source.url\"}}}\n"
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"error\":{\"code\":-32000,\"message\":\"sandbox 'x' exists\","
                 "\"data\":{\"reason\":\"already_exists\"}}}\n", (int) a, (int) b);
        server_write(f, script);

        assert_int_equal(client_wait(f->c, a, 1000, NULL, NULL, &result, &err), -EREMOTEIO);
        assert_ptr_equal(result, (cJSON *) 0x1);  /* untouched on failure */
        assert_int_equal(err->code, -32602);
        assert_string_equal(err->message, "bad url");
        assert_string_equal(err->field, "source.url");
        assert_null(err->reason);
        assert_int_equal(cli_exit_code(err), CLI_EXIT_USAGE);  /* a value the user typed */
        client_error_free(err);

        err = NULL;
        assert_int_equal(client_wait(f->c, b, 1000, NULL, NULL, NULL, &err), -EREMOTEIO);
        assert_int_equal(err->code, -32000);
        assert_string_equal(err->reason, "already_exists");
        assert_null(err->field);
        assert_int_equal(cli_exit_code(err), CLI_EXIT_CONFLICT);
        client_error_free(err);
}

static void test_null_id_error_answers_the_waiting_call(void **state) {
        fake *f = *state;
        server_write(f, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"parse error\"}}\n");
        client_error *err = NULL;
        assert_int_equal(client_call(f->c, "x", NULL, 1000, NULL, NULL, NULL, &err), -EREMOTEIO);
        assert_int_equal(err->code, -32700);
        client_error_free(err);
}

static void test_malformed_error_object_still_an_error(void **state) {
        fake *f = *state;
        server_write(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":42}}\n");
        client_error *err = NULL;
        assert_int_equal(client_call(f->c, "x", NULL, 1000, NULL, NULL, NULL, &err), -EREMOTEIO);
        assert_int_equal(err->code, -32603);
        assert_non_null(err->message);
        client_error_free(err);
}

static void test_call_when_daemon_hangs_up_is_disconnected_exit_69(void **state) {
        fake *f = *state;
        close(f->server);
        f->server = -1;
        client_error *err = NULL;
        int r = client_call(f->c, "daemon.info", NULL, 1000, NULL, NULL, NULL, &err);
        assert_true(r == -EPIPE || r == -ECONNRESET);
        assert_int_equal(err->code, CLIENT_ERROR_LOCAL);
        assert_string_equal(err->reason, CLIENT_REASON_DISCONNECTED);
        assert_int_equal(cli_exit_code(err), CLI_EXIT_UNREACHABLE);
        client_error_free(err);
}

static void test_call_without_answer_times_out(void **state) {
        fake *f = *state;
        client_error *err = NULL;
        assert_int_equal(client_call(f->c, "daemon.info", NULL, 20, NULL, NULL, NULL, &err), -ETIMEDOUT);
        assert_string_equal(err->reason, CLIENT_REASON_TIMEOUT);
        assert_int_equal(cli_exit_code(err), CLI_EXIT_ERROR);
        client_error_free(err);
}

/* --- connection ------------------------------------------------------- */

static void test_socket_path_order_option_env_default(void **state) {
        unsetenv(CLIENT_SOCKET_ENV);
        assert_string_equal(client_socket_path(NULL), CLIENT_DEFAULT_SOCKET);
        assert_string_equal(client_socket_path(""), CLIENT_DEFAULT_SOCKET);
        setenv(CLIENT_SOCKET_ENV, "/tmp/env.sock", 1);
        assert_string_equal(client_socket_path(NULL), "/tmp/env.sock");
        assert_string_equal(client_socket_path("/tmp/opt.sock"), "/tmp/opt.sock");
        setenv(CLIENT_SOCKET_ENV, "", 1);
        assert_string_equal(client_socket_path(NULL), CLIENT_DEFAULT_SOCKET);
        unsetenv(CLIENT_SOCKET_ENV);
}

static void test_connect_to_listening_socket_and_missing_one(void **state) {
        char dir[] = "/tmp/test-client-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[128];
        snprintf(path, sizeof(path), "%s/s.sock", dir);

        client *c = NULL;
        assert_int_equal(client_connect(path, &c), -ENOENT);

        int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strcpy(sa.sun_path, path);
        assert_int_equal(bind(l, (struct sockaddr *) &sa, sizeof(sa)), 0);
        assert_int_equal(listen(l, 1), 0);
        assert_int_equal(client_connect(path, &c), 0);
        int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        assert_true(s >= 0);
        assert_int_equal(client_send(c, "daemon.info", NULL), 1);
        char buf[128];
        ssize_t n = read(s, buf, sizeof(buf) - 1);
        assert_true(n > 0 && buf[n - 1] == '\n');
        client_free(c);
        close(s);
        close(l);
        unlink(path);
        rmdir(dir);

        char long_path[200];
        memset(long_path, 'a', sizeof(long_path) - 1);
        long_path[sizeof(long_path) - 1] = 0;
        assert_int_equal(client_connect(long_path, &c), -ENAMETOOLONG);
}

/* --- helpers ---------------------------------------------------------- */

static void test_base64_round_trip_and_rejects(void **state) {
        const char *inputs[] = { "", "a", "ab", "abc", "abcd", "\0\xff\n" };
        size_t lens[] = { 0, 1, 2, 3, 4, 3 };
        const char *expect[] = { "", "YQ==", "YWI=", "YWJj", "YWJjZA==", "AP8K" };
        for (size_t i = 0; i < 6; i++) {
                char *b = client_base64_encode(inputs[i], lens[i]);
                assert_string_equal(b, expect[i]);
                void *out = NULL;
                size_t len = 99;
                assert_int_equal(client_base64_decode(b, &out, &len), 0);
                assert_int_equal(len, lens[i]);
                if (lens[i] > 0)
                        assert_memory_equal(out, inputs[i], lens[i]);
                free(out);
                free(b);
        }
        void *out = NULL;
        size_t len;
        assert_int_equal(client_base64_decode("abc", &out, &len), -EINVAL);
        assert_int_equal(client_base64_decode("ab!?", &out, &len), -EINVAL);
        /* Padding only at the end, at most two, and no bits set under it. */
        const char *bad[] = { "Y===", "====", "YQ=A", "Y=Q=", "YR==", "YWJ=", "YQ==YQ==", "YQ\n=", "YWJj\x80" "AAA" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(client_base64_decode(bad[i], &out, &len), -EINVAL);
        /* A long buffer of every byte value, as directory copies send. */
        unsigned char big[3000];
        for (size_t i = 0; i < sizeof(big); i++)
                big[i] = (unsigned char) (i * 7);
        for (size_t n = sizeof(big) - 3; n <= sizeof(big); n++) {
                char *b = client_base64_encode(big, n);
                assert_int_equal(client_base64_decode(b, &out, &len), 0);
                assert_int_equal(len, n);
                assert_memory_equal(out, big, n);
                free(out);
                free(b);
        }
}

static void test_volume_sizes_and_mounts_parse_or_are_refused(void **state) {
        int64_t mib = 0;
        assert_int_equal(cli_parse_size_mib("512M", &mib), 0);
        assert_int_equal(mib, 512);
        assert_int_equal(cli_parse_size_mib("1G", &mib), 0);
        assert_int_equal(mib, 1024);
        assert_int_equal(cli_parse_size_mib("2TiB", &mib), 0);
        assert_int_equal(mib, 2 * 1024 * 1024);
        assert_int_equal(cli_parse_size_mib("100", &mib), 0);
        assert_int_equal(mib, 100);
        const char *bad[] = { "", "0", "0G", "1.5G", "1g", "G", "-1G", " 1G", "1 G", "1K" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(cli_parse_size_mib(bad[i], &mib), -EINVAL);
        assert_int_equal(cli_parse_size_mib("99999999999999999999", &mib), -ERANGE);

        cJSON *m = NULL;
        assert_int_equal(cli_parse_volume_mount("cache:/data/x:ro", &m), 0);
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "name")), "cache");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItem(m, "path")), "/data/x");
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(m, "readOnly")));
        cJSON_Delete(m);
        assert_int_equal(cli_parse_volume_mount("cache:/data", &m), 0);
        assert_true(cJSON_IsFalse(cJSON_GetObjectItem(m, "readOnly")));
        cJSON_Delete(m);
        const char *badm[] = { "cache", ":/data", "cache:data", "cache:/data:rw", "cache:/a:b", "cache:" };
        for (size_t i = 0; i < sizeof(badm) / sizeof(badm[0]); i++)
                assert_int_equal(cli_parse_volume_mount(badm[i], &m), -EINVAL);
}

static void test_duration_units_and_bad_input(void **state) {
        int64_t ms = 0;
        assert_int_equal(cli_parse_duration("90s", &ms), 0);
        assert_int_equal(ms, 90000);
        assert_int_equal(cli_parse_duration("5m", &ms), 0);
        assert_int_equal(ms, 300000);
        assert_int_equal(cli_parse_duration("7d", &ms), 0);
        assert_int_equal(ms, 7 * 86400000LL);
        assert_int_equal(cli_parse_duration("2h", &ms), 0);
        assert_int_equal(ms, 7200000);
        assert_int_equal(cli_parse_duration("1500", &ms), 0);
        assert_int_equal(ms, 1500);
        assert_int_equal(cli_parse_duration("250ms", &ms), 0);
        assert_int_equal(ms, 250);

        ms = 42;
        const char *bad[] = { "", "s", "-5s", "+5s", " 5s", "5 s", "1.5h", "5D", "5sec", "0", "0s",
                              "5m30s", "abc", "5S" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(cli_parse_duration(bad[i], &ms), -EINVAL);
        assert_int_equal(cli_parse_duration(NULL, &ms), -EINVAL);
        assert_int_equal(cli_parse_duration("99999999999999999999", &ms), -ERANGE);
        assert_int_equal(cli_parse_duration("9999999999999999h", &ms), -ERANGE);
        assert_int_equal(ms, 42);   /* untouched on failure */

        char buf[32];
        assert_string_equal(cli_format_duration(7200000, buf, sizeof(buf)), "2h");
        assert_string_equal(cli_format_duration(90000, buf, sizeof(buf)), "90s");
        assert_string_equal(cli_format_duration(300000, buf, sizeof(buf)), "5m");
        assert_string_equal(cli_format_duration(1500, buf, sizeof(buf)), "1500ms");
}

static void test_kv_split_at_first_equals(void **state) {
        char *k = NULL, *v = NULL;
        assert_int_equal(cli_parse_kv("A=b=c", &k, &v), 0);
        assert_string_equal(k, "A");
        assert_string_equal(v, "b=c");
        free(k);
        assert_int_equal(cli_parse_kv("EMPTY=", &k, &v), 0);
        assert_string_equal(k, "EMPTY");
        assert_string_equal(v, "");
        free(k);
        assert_int_equal(cli_parse_kv("=v", &k, &v), -EINVAL);
        assert_int_equal(cli_parse_kv("novalue", &k, &v), -EINVAL);

        cJSON *obj = cJSON_CreateObject();
        assert_int_equal(cli_kv_add(obj, "team=a"), 0);
        assert_int_equal(cli_kv_add(obj, "team=b"), 0);   /* last one wins */
        assert_int_equal(cli_kv_add(obj, "x=1"), 0);
        assert_int_equal(cli_kv_add(obj, "bad"), -EINVAL);
        assert_int_equal(cJSON_GetArraySize(obj), 2);
        assert_string_equal(str(obj, "team"), "b");
        cJSON_Delete(obj);
}

static void test_cp_operands_remote_or_local(void **state) {
        char *n = NULL, *p = NULL;
        assert_int_equal(cli_parse_remote("web-1:/etc/hosts", &n, &p), 1);
        assert_string_equal(n, "web-1");
        assert_string_equal(p, "/etc/hosts");
        free(n);
        free(p);
        assert_int_equal(cli_parse_remote("sbx:rel/a:b", &n, &p), 1);
        assert_string_equal(n, "sbx");
        assert_string_equal(p, "rel/a:b");
        free(n);
        free(p);
        n = p = NULL;
        const char *local[] = { "-", "/tmp/x", "./a:b", "file.txt", "Web:/x", "-x:/y", "sbx:", ":x",
                                "a/b:c", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:x" };
        for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
                assert_int_equal(cli_parse_remote(local[i], &n, &p), 0);
        assert_null(n);
        assert_null(p);

        assert_true(cli_valid_name("a"));
        assert_true(cli_valid_name("sbx-1234abcd"));
        assert_false(cli_valid_name(""));
        assert_false(cli_valid_name("-a"));
        assert_false(cli_valid_name("A"));
        assert_false(cli_valid_name("a_b"));
}

static void test_exit_codes_from_reasons(void **state) {
        struct { int code; const char *reason, *field; int exit; } cases[] = {
                { -32000, "invalid_policy", NULL, CLI_EXIT_POLICY },
                { -32000, "not_found", NULL, CLI_EXIT_NOT_FOUND },
                { -32000, "already_exists", NULL, CLI_EXIT_CONFLICT },
                { -32000, "limit_exceeded", NULL, CLI_EXIT_ERROR },
                { -32000, "sandbox_stopped", NULL, CLI_EXIT_ERROR },
                { -32000, "failed", NULL, CLI_EXIT_ERROR },
                { -32000, NULL, NULL, CLI_EXIT_ERROR },
                { -32602, NULL, "networkPolicy.allow[0]", CLI_EXIT_POLICY },
                { -32602, NULL, "source.url", CLI_EXIT_USAGE },
                { -32602, NULL, "timeout", CLI_EXIT_USAGE },
                { -32602, NULL, "resources.vcpus", CLI_EXIT_USAGE },
                { -32602, NULL, NULL, CLI_EXIT_USAGE },
                { -32000, "in_use", NULL, CLI_EXIT_CONFLICT },
                { -32000, "not_found", "source.snapshotId", CLI_EXIT_NOT_FOUND },
                { -32601, NULL, NULL, CLI_EXIT_ERROR },
                { CLIENT_ERROR_LOCAL, CLIENT_REASON_DISCONNECTED, NULL, CLI_EXIT_UNREACHABLE },
                { CLIENT_ERROR_LOCAL, CLIENT_REASON_TIMEOUT, NULL, CLI_EXIT_ERROR },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                client_error *e = client_error_new(cases[i].code, cases[i].reason, cases[i].field, "m %zu", i);
                assert_non_null(e);
                assert_int_equal(cli_exit_code(e), cases[i].exit);
                client_error_free(e);
        }
        assert_int_equal(cli_exit_code(NULL), CLI_EXIT_ERROR);
}

static void test_export_to_existing_path_is_a_conflict(void **state) {
        client_error *e = client_error_new(-32602, NULL, "path", "path: /tmp/x.tar exists; give a new file name");
        assert_non_null(e);
        assert_int_equal(cli_exit_code(e), CLI_EXIT_CONFLICT);
        client_error_free(e);
        e = client_error_new(-32602, NULL, "path", "path: 'x' is not an absolute path");
        assert_int_equal(cli_exit_code(e), CLI_EXIT_USAGE);
        client_error_free(e);
}

static void test_fields_map_to_the_flags_users_type(void **state) {
        struct { const char *verb, *field, *flag; } cases[] = {
                { "create", "timeout", "--timeout" },
                { "exec", "timeoutMs", "--timeout" },
                { "update", "resources.vcpus", "--vcpus" },
                { "snapshot", "expiration", "--expire" },
                { "events", "kinds[1]", "--kind" },
                { "create", "ports[3]", "--port" },
                { "create", "env.FOO", "--env FOO" },
                { "update", "env", "--env" },
                { "create", "tags", "--tag" },
                { "create", "tags.k", "--tag" },
                { "create", "source.snapshotId", "--snapshot" },
                { "create", "runtime", "--runtime" },
                { "create", "name", "--name" },
                { "fork", "name", "--name" },
                { "update", "name", "NAME" },
                { NULL, "name", "NAME" },
                { "create", "networkPolicy.allow[0]", "--allow or --policy FILE" },
                { "create", "networkPolicy.subnets.deny[1]", "--deny-subnet or --policy FILE" },
                { "create", "networkPolicy.rules[0].host", "--policy" },
                { "command", "signal", "--signal" },
                { "snapshots", "path", "FILE" },
                { "runtime", "path", "ROOTFS" },
                { "exec", "sandbox", "NAME" },
                { "fork", "sourceSandbox", "SRC" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char *flag = cli_field_flag(cases[i].verb, cases[i].field);
                assert_non_null(flag);
                assert_string_equal(flag, cases[i].flag);
                free(flag);
        }
        /* Prefixes match whole path segments only, and unknown fields have
         * no flag. */
        assert_null(cli_field_flag("create", "timeouts"));
        assert_null(cli_field_flag("create", "environment"));
        assert_null(cli_field_flag("cp", "path"));
        assert_null(cli_field_flag("create", "source.url"));
        assert_null(cli_field_flag("create", NULL));
}

static void assert_error_text(const char *verb, int code, const char *field, const char *msg, const char *want) {
        client_error *e = client_error_new(code, NULL, field, "%s", msg);
        assert_non_null(e);
        char *text = cli_error_text(verb, e);
        assert_non_null(text);
        assert_string_equal(text, want);
        free(text);
        client_error_free(e);
}

static void test_error_text_names_the_flag_once(void **state) {
        /* A leading "field:" becomes the flag. */
        assert_error_text("create", -32602, "timeout", "timeout: 90000000 ms is over the maximum of 86400000 ms (24h)",
                          "--timeout: 90000000 ms is over the maximum of 86400000 ms (24h)");
        assert_error_text("update", -32602, "resources.vcpus", "resources.vcpus: must be a whole number from 1 to 8",
                          "--vcpus: must be a whole number from 1 to 8");
        assert_error_text("create", -32602, "env.A", "env.A: must be a string", "--env A: must be a string");
        /* A message ending in its own hint gets no second parenthetical. */
        assert_error_text("create", -32000, "source.snapshotId",
                          "snapshot 'x' not found (sandboxctl snapshots lists them)",
                          "snapshot 'x' not found (sandboxctl snapshots lists them)");
        /* Otherwise the flag is appended once, never the JSON field. */
        assert_error_text("create", -32000, "source.snapshotId", "snapshot 'x' has expired",
                          "snapshot 'x' has expired (--snapshot)");
        assert_error_text("create", -32000, "name", "sandbox 'a' already exists; pick another name",
                          "sandbox 'a' already exists; pick another name (--name)");
        /* A field with no flag: appended only when the message lacks it. */
        assert_error_text("create", -32602, "source.url", "source.url: a string is required",
                          "source.url: a string is required");
        assert_error_text("create", -32602, "source.url", "bad url", "bad url (source.url)");
        assert_error_text("get", -32000, NULL, "no such thing", "no such thing");
        /* Policy errors keep their document path and gain the options. */
        assert_error_text("create", -32602, "networkPolicy.allow[0]",
                          "networkPolicy.allow[0]: 'www*.com' is not a valid pattern",
                          "networkPolicy.allow[0]: 'www*.com' is not a valid pattern (--allow or --policy FILE)");
}

/* --- escaping of human output (ctl_escape) ------------------------------ */

static void assert_escaped(const char *in, const char *want) {
        char *got = ctl_escape(in);
        assert_non_null(got);
        assert_string_equal(got, want);
        free(got);
}

static void test_escape_shows_controls_as_text(void **state) {
        /* The attack's file name: an OSC title, BEL, and a clear screen. */
        assert_escaped("\x1b]0;PWNED\x07\x1b[2Jz", "\\x1b]0;PWNED\\x07\\x1b[2Jz");
        assert_escaped("a\ndeleted file /workspace/FORGED", "a\\ndeleted file /workspace/FORGED");
        assert_escaped("cr\rtab\tdel\x7f", "cr\\rtab\\tdel\\x7f");
        assert_escaped("\x01\x1f", "\\x01\\x1f");
        /* C1 controls as code points (U+009B is CSI on some terminals). */
        assert_escaped("x\xc2\x9b" "2J\xc2\x80", "x\\u009b2J\\u0080");
}

static void test_escape_keeps_printable_utf8(void **state) {
        assert_escaped("café", "café");
        assert_escaped("日本語 \xf0\x9f\x98\x80 ~!@#$%^&*()'\"\\", "日本語 \xf0\x9f\x98\x80 ~!@#$%^&*()'\"\\");
        assert_escaped("\xc2\xa0nbsp", "\xc2\xa0nbsp");   /* U+00A0 is past C1 */
        assert_escaped("", "");
}

static void test_escape_shows_invalid_utf8_bytes(void **state) {
        assert_escaped("a\xff" "b", "a\\xffb");
        assert_escaped("\x80", "\\x80");                              /* a lone continuation byte */
        assert_escaped("\xc3", "\\xc3");                              /* cut short at the end */
        assert_escaped("\xc3(", "\\xc3(");                            /* cut short by ASCII */
        assert_escaped("\xc0\xaf", "\\xc0\\xaf");                     /* overlong '/' */
        assert_escaped("\xe0\x80\xaf", "\\xe0\\x80\\xaf");            /* overlong, 3 bytes */
        assert_escaped("\xed\xa0\x80", "\\xed\\xa0\\x80");            /* a UTF-16 surrogate */
        assert_escaped("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80");   /* above U+10FFFF */
        assert_escaped("\xe2\x82", "\\xe2\\x82");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_partial_line_waits_for_the_rest, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_two_messages_in_one_read_both_delivered, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_line_of_5_mib_in_small_writes_arrives_whole, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_line_over_limit_is_emsgsize, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_non_json_line_is_skipped_with_ebadmsg, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_daemon_hangup_is_econnreset, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_requests_carry_increasing_ids_and_params, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_out_of_order_responses_matched_by_id, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_notifications_queued_without_callback_then_delivered_in_order,
                                                fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_queued_messages_come_first_from_client_next, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_error_answer_decoded_with_reason_and_field, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_null_id_error_answers_the_waiting_call, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_malformed_error_object_still_an_error, fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_call_when_daemon_hangs_up_is_disconnected_exit_69,
                                                fake_setup, fake_teardown),
                cmocka_unit_test_setup_teardown(test_call_without_answer_times_out, fake_setup, fake_teardown),
                cmocka_unit_test(test_socket_path_order_option_env_default),
                cmocka_unit_test(test_connect_to_listening_socket_and_missing_one),
                cmocka_unit_test(test_base64_round_trip_and_rejects),
                cmocka_unit_test(test_duration_units_and_bad_input),
                cmocka_unit_test(test_volume_sizes_and_mounts_parse_or_are_refused),
                cmocka_unit_test(test_kv_split_at_first_equals),
                cmocka_unit_test(test_cp_operands_remote_or_local),
                cmocka_unit_test(test_exit_codes_from_reasons),
                cmocka_unit_test(test_export_to_existing_path_is_a_conflict),
                cmocka_unit_test(test_fields_map_to_the_flags_users_type),
                cmocka_unit_test(test_error_text_names_the_flag_once),
                cmocka_unit_test(test_escape_shows_controls_as_text),
                cmocka_unit_test(test_escape_keeps_printable_utf8),
                cmocka_unit_test(test_escape_shows_invalid_utf8_bytes),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
