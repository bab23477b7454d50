/* JSON-RPC framing and parameter validation (sandboxd/rpc.c): a real
 * server on a Unix socket in a private directory, as tests/unit/test-rpc.c
 * runs it, with methods that validate parameters of every kind. Each input
 * is written by a fresh client, which then half-closes; the event loop runs
 * until the server has answered and closed. Invariants: every answer is one
 * line of JSON-RPC 2.0 (an object with "jsonrpc":"2.0" and exactly one of
 * "result" and "error"), there are no more answers than input lines, and
 * the server closes the connection within a deadline. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <systemd/sd-event.h>
#include "fuzz.h"
#include "libcore/util.h"
#include "sandboxd/rpc.h"

static sd_event *event;
static rpc_server *server;
static char dir[] = "/tmp/fuzz-rpc-XXXXXX", path[128];

static void m_echo(rpc_request *req, void *userdata) {
        rpc_reply(req, cJSON_Duplicate(req->params, true));
}

/* Every validator, each on its own field; the first failure is answered. */
static void m_params(rpc_request *req, void *userdata) {
        sb_error *err = NULL;
        const char *s = NULL;
        bool b = false;
        int64_t i = 0, d = 0;
        cJSON *o = NULL, *a = NULL;
        if (rpc_param_string(req, "s", false, &s, &err) < 0 || rpc_param_bool(req, "b", &b, &err) < 0 ||
            rpc_param_int(req, "i", false, -5, 1000, &i, &err) < 0 ||
            rpc_param_duration_ms(req, "d", false, 0, 86400000, &d, &err) < 0 ||
            rpc_param_object(req, "o", false, &o, &err) < 0 || rpc_param_array(req, "a", false, &a, &err) < 0) {
                FUZZ_ASSERT(err && err->message);
                rpc_reply_sb_error(req, err);
                sb_error_free(err);
                return;
        }
        FUZZ_ASSERT(i >= -5 && i <= 1000 && d >= 0 && d <= 86400000);
        char buf[64];
        rpc_format_duration(d, buf, sizeof(buf));
        cJSON *res = cJSON_CreateObject();
        cJSON_AddStringToObject(res, "d", buf);
        rpc_reply(req, res);
}

static void m_fail(rpc_request *req, void *userdata) {
        rpc_reply_error(req, -32000, "failed", "x", "%s", "always");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        FUZZ_ASSERT(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/rpc.sock", dir);
        FUZZ_ASSERT(sd_event_new(&event) >= 0);
        rpc_server_config cfg = { .socket_path = path, .listen_fd = -1, .max_line_bytes = 4096,
                                  .socket_gid = (gid_t)-1, .socket_mode = 0600, .stall_timeout_ms = 1000 };
        sb_error *err = NULL;
        FUZZ_ASSERT(rpc_server_new(event, &cfg, &server, &err) == 0);
        FUZZ_ASSERT(rpc_server_add_method(server, "t.echo", m_echo, NULL) == 0);
        FUZZ_ASSERT(rpc_server_add_method(server, "t.params", m_params, NULL) == 0);
        FUZZ_ASSERT(rpc_server_add_method(server, "t.fail", m_fail, NULL) == 0);
        return 0;
}

static void check_answer(const char *line, size_t len) {
        cJSON *j = cJSON_ParseWithLength(line, len);
        if (!j)
                fprintf(stderr, "answer is not JSON: %.*s\n", (int)len, line);
        FUZZ_ASSERT(cJSON_IsObject(j));
        FUZZ_ASSERT(cJSON_IsString(cJSON_GetObjectItem(j, "jsonrpc")) &&
                    strcmp(cJSON_GetObjectItem(j, "jsonrpc")->valuestring, "2.0") == 0);
        bool has_result = cJSON_HasObjectItem(j, "result"), has_error = cJSON_HasObjectItem(j, "error");
        FUZZ_ASSERT(has_result != has_error);
        if (has_error) {
                cJSON *e = cJSON_GetObjectItem(j, "error");
                FUZZ_ASSERT(cJSON_IsNumber(cJSON_GetObjectItem(e, "code")));
                FUZZ_ASSERT(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
        }
        cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        FUZZ_ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
        size_t sent = 0, got = 0, cap = 1 << 16;
        char *in = malloc(cap);
        bool eof = false, shut = false;
        uint64_t deadline = core_monotonic_ms() + 10000;
        while (!eof) {
                FUZZ_ASSERT(core_monotonic_ms() < deadline); /* the server must answer and close */
                if (sent < size) {
                        ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
                        if (n > 0)
                                sent += (size_t)n;
                        else if (n < 0 && errno != EAGAIN)
                                sent = size; /* the server closed on us (a line over the limit) */
                }
                if (sent == size && !shut) {
                        shutdown(fd, SHUT_WR);
                        shut = true;
                }
                FUZZ_ASSERT(sd_event_run(event, 1000) >= 0);
                for (;;) {
                        if (got == cap)
                                in = realloc(in, cap *= 2);
                        ssize_t n = recv(fd, in + got, cap - got, 0);
                        if (n > 0) {
                                got += (size_t)n;
                                continue;
                        }
                        if (n == 0 || errno != EAGAIN)
                                eof = true;
                        break;
                }
        }
        close(fd);
        size_t lines_in = 1;
        for (size_t i = 0; i < size; i++)
                lines_in += data[i] == '\n';
        size_t answers = 0;
        for (size_t off = 0; off < got;) {
                char *nl = memchr(in + off, '\n', got - off);
                FUZZ_ASSERT(nl); /* every answer ends with a newline */
                check_answer(in + off, (size_t)(nl - (in + off)));
                answers++;
                off = (size_t)(nl - in) + 1;
        }
        FUZZ_ASSERT(answers <= lines_in);
        free(in);
        /* Let the server finish closing before the next input. */
        while (sd_event_run(event, 0) > 0)
                ;
        return 0;
}
