/* Unit tests for sandboxd-e2b (e2b/): API keys stored as hashes and
 * checked, per-sandbox envd tokens, URL decoding, multipart bodies, and
 * the HTTP layer's answers over a socketpair (routing before any daemon
 * call: health, a missing or unknown key, a bad sandbox token, limits,
 * keep-alive), and what review found: the caller decided from the head
 * before any body is read, the bodies budget (uploads and downloads), a
 * head's deadline, non-object JSON bodies, the keys file's privacy, the
 * parts of one upload, tokens of a tenant without keys, and the
 * connection table (a share per address, keyed connections kept when
 * the table is full), and the rate per tenant.
 * docs/E2B.md, docs/SECURITY.md §4.3. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>
#include <cmocka.h>
#include "e2b/gateway.h"

static char keys_path[64];

static int setup(void **state) {
        snprintf(keys_path, sizeof(keys_path), "/tmp/test-e2b-keys-XXXXXX");
        int fd = mkstemp(keys_path);
        assert_true(fd >= 0);
        close(fd);
        unlink(keys_path); /* key add makes it */
        return 0;
}

static int teardown(void **state) {
        unlink(keys_path);
        return 0;
}

static char *slurp(const char *path) {
        FILE *f = fopen(path, "re");
        assert_non_null(f);
        static char buf[8192];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        return buf;
}

static void test_a_key_maps_to_its_tenant_and_only_its_hash_is_stored(void **state) {
        char a[64], b[64], t[80];
        assert_int_equal(gw_key_add("team-a", keys_path, a, sizeof(a)), 0);
        assert_int_equal(gw_key_add("team-b", keys_path, b, sizeof(b)), 0);
        assert_int_equal(strlen(a), 44);
        assert_memory_equal(a, "e2b_", 4);
        assert_string_not_equal(a, b);
        struct stat st;
        assert_int_equal(stat(keys_path, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0600);
        const char *text = slurp(keys_path);
        assert_null(strstr(text, a + 4));
        assert_null(strstr(text, b + 4));
        assert_non_null(strstr(text, "key team-a "));
        assert_int_equal(gw_key_tenant(keys_path, a, t, sizeof(t)), 0);
        assert_string_equal(t, "team-a");
        assert_int_equal(gw_key_tenant(keys_path, b, t, sizeof(t)), 0);
        assert_string_equal(t, "team-b");
        char wrong[64];
        snprintf(wrong, sizeof(wrong), "%s", a);
        wrong[10] = wrong[10] == '0' ? '1' : '0';
        assert_int_equal(gw_key_tenant(keys_path, wrong, t, sizeof(t)), -EACCES);
        assert_int_equal(gw_key_tenant(keys_path, "", t, sizeof(t)), -EACCES);
        assert_int_equal(gw_key_tenant(keys_path, NULL, t, sizeof(t)), -EACCES);
}

static void test_key_add_refuses_a_name_the_daemon_would_refuse(void **state) {
        char k[64];
        assert_int_equal(gw_key_add("uid:0", keys_path, k, sizeof(k)), 2);
        assert_int_equal(gw_key_add("", keys_path, k, sizeof(k)), 2);
        assert_int_equal(gw_key_add("-a", keys_path, k, sizeof(k)), 2);
        assert_int_equal(gw_key_add("a b", keys_path, k, sizeof(k)), 2);
}

static void test_an_envd_token_opens_one_sandbox_of_one_tenant(void **state) {
        char k[64], t[80];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(tok);
        assert_int_equal(gw_envd_token_check(keys_path, tok, "sbx-1", t, sizeof(t)), 0);
        assert_string_equal(t, "team-a");
        assert_int_equal(gw_envd_token_check(keys_path, tok, "sbx-2", t, sizeof(t)), -EACCES);
        /* The tenant part cannot be swapped. */
        char *forged = NULL;
        assert_true(asprintf(&forged, "team-b%s", strchr(tok, '.')) > 0);
        assert_int_equal(gw_envd_token_check(keys_path, forged, "sbx-1", t, sizeof(t)), -EACCES);
        assert_int_equal(gw_envd_token_check(keys_path, "team-a", "sbx-1", t, sizeof(t)), -EACCES);
        assert_int_equal(gw_envd_token_check(keys_path, NULL, "sbx-1", t, sizeof(t)), -EACCES);
        free(forged);
        free(tok);
}

static void test_url_decoding(void **state) {
        char *s = gw_url_decode("a%2Fb+c%20d%", 12, true);
        assert_string_equal(s, "a/b c d%");
        free(s);
        s = gw_url_decode("a+b", 3, false);
        assert_string_equal(s, "a+b");
        free(s);
        /* A decoded NUL would cut a path short: refused. */
        assert_null(gw_url_decode("a%00b", 5, true));
}

static void test_multipart_parts_with_their_file_names(void **state) {
        static const char body[] = "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a.txt\"\r\n"
                                   "Content-Type: application/octet-stream\r\n\r\nhello\r\n"
                                   "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n\r\n"
                                   "two\r\nlines\r\n--XyZ--\r\n";
        gw_header h = { .name = "Content-Type", .value = "multipart/form-data; boundary=XyZ" };
        gw_request r = { .headers = &h, .n_headers = 1, .body = (char *) body, .body_len = sizeof(body) - 1 };
        gw_part *parts = NULL;
        size_t n = 0;
        assert_int_equal(gw_multipart(&r, &parts, &n), 0);
        assert_int_equal(n, 2);
        assert_string_equal(parts[0].filename, "/tmp/a.txt");
        assert_int_equal(parts[0].len, 5);
        assert_memory_equal(parts[0].data, "hello", 5);
        assert_string_equal(parts[1].filename, "b");
        assert_int_equal(parts[1].len, 10);
        assert_memory_equal(parts[1].data, "two\r\nlines", 10);
        for (size_t i = 0; i < n; i++)
                free(parts[i].filename);
        free(parts);
        h.value = "application/json";
        assert_int_equal(gw_multipart(&r, &parts, &n), -EINVAL);
}

/* The tenants a request without a traffic token is looked for among
 * (ports.c): each tenant of the keys file once. */
static void test_key_tenants_lists_each_tenant_once(void **state) {
        char k[64], t[4][80];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        assert_int_equal(gw_key_add("team-b", keys_path, k, sizeof(k)), 0);
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        assert_int_equal(gw_key_tenants(keys_path, t, 4), 2);
        assert_string_equal(t[0], "team-a");
        assert_string_equal(t[1], "team-b");
        assert_int_equal(gw_key_tenants(keys_path, t, 1), 1);
}

/* ---- HTTP over a socketpair ---- */

static gw_config http_cfg;
static const char *http_domain; /* --domain of the next exchanges (NULL: any) */

static void *serve_thread(void *arg) {
        gw_serve_conn(&http_cfg, (int) (intptr_t) arg);
        return NULL;
}

/* Sends `req`, shuts down writing, and returns everything the gateway
 * answered until it closed (static buffer). */
static const char *exchange_on(const char *socket_path, const char *req, size_t len) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        http_cfg = (gw_config) { .socket_path = socket_path, .keys_path = keys_path, .domain = http_domain };
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, serve_thread, (void *) (intptr_t) sv[1]), 0);
        for (size_t off = 0; off < len;) {
                ssize_t n = send(sv[0], req + off, len - off, MSG_NOSIGNAL);
                if (n <= 0)
                        break; /* it may close before reading all (limits) */
                off += (size_t) n;
        }
        shutdown(sv[0], SHUT_WR);
        static char out[65536];
        size_t have = 0;
        ssize_t n;
        while ((n = recv(sv[0], out + have, sizeof(out) - 1 - have, 0)) > 0)
                have += (size_t) n;
        out[have] = 0;
        /* Connect envelopes hold NUL bytes: made visible to strstr. */
        for (size_t i = 0; i < have; i++)
                if (!out[i])
                        out[i] = '.';
        pthread_join(t, NULL);
        close(sv[0]);
        return out;
}

static const char *exchange(const char *req, size_t len) {
        return exchange_on("/nonexistent/sandboxd.sock", req, len);
}

static void test_http_routes_before_any_daemon_call(void **state) {
        char k[64];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        const char *o = exchange("GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 34);
        assert_non_null(strstr(o, "HTTP/1.1 200 OK\r\n"));

        static const char two[] = "GET /sandboxes HTTP/1.1\r\nHost: x\r\n\r\n"
                                  "GET /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: e2b_0000000000000000000000000000000000000000\r\n\r\n";
        o = exchange(two, sizeof(two) - 1);
        /* Keep-alive: both answered on one connection, E2B's error shape. */
        const char *first = strstr(o, "HTTP/1.1 401");
        assert_non_null(first);
        assert_non_null(strstr(o, "{\"code\":401,\"message\":\"X-API-Key: missing (E2B_API_KEY)\"}"));
        assert_non_null(strstr(first + 1, "HTTP/1.1 401"));
        assert_non_null(strstr(o, "\"message\":\"Invalid API key\""));

        /* A good key reaches the daemon: here none, so 502 naming it. */
        char req[512];
        int n = snprintf(req, sizeof(req), "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", k);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 502"));
        assert_non_null(strstr(o, "cannot reach sandboxd at /nonexistent/sandboxd.sock"));

        static const char envd[] = "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-1\r\n"
                                   "X-Access-Token: team-a.00\r\nContent-Length: 2\r\n\r\n{}";
        o = exchange(envd, sizeof(envd) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        assert_non_null(strstr(o, "not this sandbox's access token"));

        /* Connect's binary codec is refused, not misread as JSON. */
        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(tok);
        n = snprintf(req, sizeof(req), "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-1\r\n"
                     "X-Access-Token: %s\r\nContent-Type: application/proto\r\nContent-Length: 0\r\n\r\n", tok);
        free(tok);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 415"));
        assert_non_null(strstr(o, "application/json or application/connect+json (Connect's JSON codec)"));

        static const char bad_id[] = "GET /files?path=/a HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: ../etc\r\n\r\n";
        o = exchange(bad_id, sizeof(bad_id) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
}

/* E2B's host names PORT-ID.DOMAIN: envd's port names the sandbox as
 * E2b-Sandbox-Id would (its token checked the same way); another port is
 * the sandbox's exposed port (ports.c), opened by its traffic token or,
 * without one, looked up among the keys file's tenants; a Host that is
 * not of that form (or of another domain than --domain) is the control
 * API. */
static void test_host_names_route_envd_and_exposed_ports(void **state) {
        char k[64], req[512];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        static const char wrong[] = "POST /process.Process/List HTTP/1.1\r\nHost: 49983-sbx-1.e2b.test\r\n"
                                    "X-Access-Token: team-a.00\r\nContent-Length: 2\r\n\r\n{}";
        const char *o = exchange(wrong, sizeof(wrong) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        assert_non_null(strstr(o, "not this sandbox's access token"));

        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(tok);
        int n = snprintf(req, sizeof(req), "POST /process.Process/List HTTP/1.1\r\nHost: 49983-sbx-1.e2b.test:443\r\n"
                         "X-Access-Token: %s\r\nContent-Type: application/proto\r\nContent-Length: 0\r\n\r\n", tok);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 415")); /* past the token: envd's own answer */
        /* The token of sbx-1 does not open sbx-2 by its host name. */
        n = snprintf(req, sizeof(req), "POST /process.Process/List HTTP/1.1\r\nHost: 49983-sbx-2.e2b.test\r\n"
                     "X-Access-Token: %s\r\nContent-Length: 2\r\n\r\n{}", tok);
        free(tok);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 401"));

        /* An exposed port without a token: its tenant is looked for among
         * the keys file's (here no daemon answers: 502 naming it). */
        static const char port[] = "GET / HTTP/1.1\r\nHost: 8000-sbx-1.e2b.test\r\n\r\n";
        o = exchange(port, sizeof(port) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 502"));
        assert_non_null(strstr(o, "the gateway cannot reach sandboxd; retry later"));
        assert_null(strstr(o, "/nonexistent")); /* no host path to a caller without a token */
        /* With a traffic token: not the sandbox's (another sandbox's, the
         * envd token, garbage) is 403 from the head, the body unread. */
        char *traffic = gw_traffic_token(keys_path, "team-a", "sbx-1");
        char *other = gw_traffic_token(keys_path, "team-a", "sbx-2");
        char *envd = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(traffic);
        assert_non_null(other);
        assert_non_null(envd);
        assert_string_not_equal(traffic, envd);
        const char *bad[] = { other, envd, "team-a.00" };
        for (size_t i = 0; i < 3; i++) {
                n = snprintf(req, sizeof(req), "POST / HTTP/1.1\r\nHost: 8000-sbx-1.e2b.test\r\n"
                             "E2b-Traffic-Access-Token: %s\r\nContent-Length: 5\r\n\r\nhello", bad[i]);
                o = exchange(req, (size_t) n);
                assert_non_null(strstr(o, "HTTP/1.1 403"));
                assert_non_null(strstr(o, "not the trafficAccessToken of sandbox sbx-1"));
        }
        /* Its own: past the head to the daemon as the token's tenant. */
        n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: 8000-sbx-1.e2b.test\r\n"
                     "E2b-Traffic-Access-Token: %s\r\n\r\n", traffic);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 502"));
        assert_non_null(strstr(o, "get sandbox: cannot reach sandboxd"));
        /* A traffic token is no envd token. */
        n = snprintf(req, sizeof(req), "POST /process.Process/List HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-1\r\n"
                     "X-Access-Token: %s\r\nContent-Length: 2\r\n\r\n{}", traffic);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        free(traffic);
        free(other);
        free(envd);

        /* With --domain, another domain (or port) is no sandbox's host. */
        http_domain = "e2b.test:8443";
        static const char *const foreign[] = { "8000-sbx-1.evil.test", "8000-sbx-1.e2b.test:9", "8000-sbx-1.e2b.test.x" };
        for (size_t i = 0; i < sizeof(foreign) / sizeof(*foreign); i++) {
                n = snprintf(req, sizeof(req), "GET /sandboxes HTTP/1.1\r\nHost: %s\r\n\r\n", foreign[i]);
                o = exchange(req, (size_t) n);
                assert_non_null(strstr(o, "X-API-Key: missing"));
        }
        static const char two_hosts[] = "GET / HTTP/1.1\r\nHost: 8000-sbx-1.e2b.test:8443\r\nHost: x\r\n\r\n";
        o = exchange(two_hosts, sizeof(two_hosts) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
        assert_non_null(strstr(o, "Host: given 2 times"));
        static const char absolute[] = "GET http://8000-sbx-2.e2b.test:8443/ HTTP/1.1\r\nHost: 8000-sbx-1.e2b.test:8443\r\n\r\n";
        o = exchange(absolute, sizeof(absolute) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
        assert_non_null(strstr(o, "not an absolute URL"));
        static const char ours[] = "GET / HTTP/1.1\r\nHost: 8000-sbx-1.E2B.test:8443\r\n\r\n";
        o = exchange(ours, sizeof(ours) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 502"));
        http_domain = NULL;

        /* Not of that form (a bad ID, port 0, no domain): the control API. */
        static const char *const others[] = { "49983-../x.e2b.test", "0-sbx-1.e2b.test", "49983-sbx-1", "127.0.0.1:49983" };
        for (size_t i = 0; i < sizeof(others) / sizeof(*others); i++) {
                n = snprintf(req, sizeof(req), "GET /sandboxes HTTP/1.1\r\nHost: %s\r\n\r\n", others[i]);
                o = exchange(req, (size_t) n);
                assert_non_null(strstr(o, "X-API-Key: missing"));
        }
}

static void test_http_limits_answer_and_close(void **state) {
        char req[256];
        int n = snprintf(req, sizeof(req), "POST /sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
                         GW_MAX_BODY + 1);
        const char *o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 413"));
        size_t big = 70 * 1024;
        char *head = malloc(big + 64);
        assert_non_null(head);
        int h = snprintf(head, big + 64, "GET / HTTP/1.1\r\nX-Long: ");
        memset(head + h, 'a', big);
        memcpy(head + h + big, "\r\n\r\n", 5);
        o = exchange(head, (size_t) h + big + 4);
        assert_non_null(strstr(o, "HTTP/1.1 431"));
        free(head);
        o = exchange("NOT HTTP\r\n\r\n", 12);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
}

/* Found by review: a request without a valid key or token was read whole
 * (up to 64 MiB a connection) before route.c looked at its key, so
 * anyone reaching the port could make the gateway hold 256 x 64 MiB.
 * Now the head decides: the answer comes with no byte of the body sent,
 * and the connection closes unread. */
static void test_a_request_without_a_valid_key_is_answered_before_its_body(void **state) {
        char k[64], req[512];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        static const char no_key[] = "POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: e2b_00\r\n"
                                     "Content-Length: 60000000\r\n\r\n";
        const char *o = exchange(no_key, sizeof(no_key) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        assert_non_null(strstr(o, "Connection: close\r\n"));
        assert_non_null(strstr(o, "Invalid API key"));
        static const char chunked[] = "POST /files?path=/a HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-1\r\n"
                                      "X-Access-Token: team-a.00\r\nTransfer-Encoding: chunked\r\n\r\n";
        o = exchange(chunked, sizeof(chunked) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        assert_non_null(strstr(o, "not this sandbox's access token"));
        /* A good key's body is read: here it is cut short, so no answer. */
        int n = snprintf(req, sizeof(req), "POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                         "Content-Length: 60000000\r\n\r\n", k);
        o = exchange(req, (size_t) n);
        assert_string_equal(o, "");
}

/* Found by review: all connections' bodies together are bounded; past
 * the budget a request is answered 503 before its body is read. */
static void test_bodies_of_all_connections_are_bounded(void **state) {
        char k[64], req[512];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        gw_http_set_bodies_max(16);
        int n = snprintf(req, sizeof(req), "POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                         "Content-Length: 17\r\n\r\n{\"templateID\":1} ", k);
        const char *o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 503"));
        n = snprintf(req, sizeof(req), "POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n11\r\n{\"templateID\":1} \r\n0\r\n\r\n", k);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 503"));
        /* Within it (and given back after each request): answered. */
        n = snprintf(req, sizeof(req), "POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                     "Content-Length: 16\r\n\r\n{\"templateID\":1}", k);
        for (int i = 0; i < 3; i++) {
                o = exchange(req, (size_t) n);
                assert_non_null(strstr(o, "HTTP/1.1 400"));
                assert_non_null(strstr(o, "templateID: wrong type"));
        }
        gw_http_set_bodies_max(GW_BODIES_MAX_DEFAULT);
}

/* Attack: one tenant's connections each declaring a 64 MiB body and
 * sending it a byte now and then held the whole bodies budget, and every
 * other tenant's upload was answered 503. One tenant now holds at most
 * half of it (always a whole GW_MAX_BODY): past that its own requests
 * with a body are 503, another tenant's are read. */
static void test_one_tenant_holds_at_most_half_the_bodies_budget(void **state) {
        char a[64], b[64], req[512];
        assert_int_equal(gw_key_add("team-a", keys_path, a, sizeof(a)), 0);
        assert_int_equal(gw_key_add("team-b", keys_path, b, sizeof(b)), 0);
        gw_http_set_bodies_max(4 * GW_MAX_BODY);
        /* team-a's stalled bodies: half the budget. */
        assert_true(gw_budget_take("team-a", GW_MAX_BODY));
        assert_true(gw_budget_take("team-a", GW_MAX_BODY));
        for (int i = 0; i < 2; i++) {
                int n = snprintf(req, sizeof(req), "POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                                 "Content-Length: 16\r\n\r\n{\"templateID\":1}", i ? b : a);
                const char *o = exchange(req, (size_t) n);
                if (i)
                        assert_non_null(strstr(o, "templateID: wrong type"));
                else
                        assert_non_null(strstr(o, "HTTP/1.1 503"));
        }
        assert_true(gw_budget_take("team-b", GW_MAX_BODY));
        assert_false(gw_budget_take("team-a", 1));
        gw_budget_release("team-a", GW_MAX_BODY);
        assert_true(gw_budget_take("team-a", 1));
        gw_budget_release("team-a", GW_MAX_BODY + 1);
        gw_budget_release("team-b", GW_MAX_BODY);
        gw_http_set_bodies_max(GW_BODIES_MAX_DEFAULT);
}

/* Found by review: a JSON body that is not an object (an array, a
 * string) reached key loops that read each member's name, NULL for an
 * array's: POST /sandboxes/ID/pause with [1] crashed the gateway for
 * every tenant. Every body is an object or a 400. */
static void test_a_body_that_is_not_an_object_is_refused(void **state) {
        char k[64], req[512];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        static const struct {
                const char *path, *body;
        } cases[] = {
                { "/sandboxes/sbx-1/pause", "[1,2]" },
                { "/sandboxes/sbx-1/connect", "[{\"timeout\":1}]" },
                { "/v2/sandboxes/sbx-1/resume", "\"a\"" },
                { "/sandboxes/sbx-1/timeout", "[{\"timeout\":1}]" },
                { "/sandboxes", "[{\"templateID\":\"base\"}]" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
                int n = snprintf(req, sizeof(req), "POST %s HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                                 "Content-Length: %zu\r\n\r\n%s", cases[i].path, k, strlen(cases[i].body),
                                 cases[i].body);
                const char *o = exchange(req, (size_t) n);
                assert_non_null(strstr(o, "HTTP/1.1 400"));
                assert_non_null(strstr(o, "body: a JSON object"));
        }
        /* A pid out of range is a 400 too (it was cast to 0 and nothing answered). */
        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(tok);
        static const char sig[] = "{\"process\":{\"pid\":1e300},\"signal\":\"SIGNAL_SIGKILL\"}";
        int n = snprintf(req, sizeof(req), "POST /process.Process/SendSignal HTTP/1.1\r\nHost: x\r\n"
                         "E2b-Sandbox-Id: sbx-1\r\nX-Access-Token: %s\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s", tok, sizeof(sig) - 1, sig);
        free(tok);
        const char *o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
        assert_non_null(strstr(o, "process.pid or process.tag: required"));
}

/* Found by review: a peer sending a byte of a head every 119 s held a
 * connection (of 256) for ever, so 256 of them locked every tenant out.
 * A head must now be complete within the head time however it trickles:
 * here 1 s, with bytes still coming when it runs out. */
static void test_a_head_that_trickles_in_is_cut_off(void **state) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        http_cfg = (gw_config) { .socket_path = "/nonexistent/sandboxd.sock", .keys_path = keys_path };
        gw_http_set_head_seconds(1);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, serve_thread, (void *) (intptr_t) sv[1]), 0);
        assert_int_equal(send(sv[0], "GET /health HTTP/1.1\r\nX-A: ", 28, MSG_NOSIGNAL), 28);
        /* One byte a poll interval until the gateway answers and closes. */
        char out[4096];
        size_t have = 0;
        for (;;) {
                struct pollfd pfd = { .fd = sv[0], .events = POLLIN };
                if (poll(&pfd, 1, 200) == 0) {
                        assert_int_equal(send(sv[0], "a", 1, MSG_NOSIGNAL), 1);
                        continue;
                }
                ssize_t n = recv(sv[0], out + have, sizeof(out) - 1 - have, 0);
                if (n <= 0)
                        break;
                have += (size_t) n;
        }
        out[have] = 0;
        pthread_join(t, NULL);
        close(sv[0]);
        gw_http_set_head_seconds(GW_HEAD_SECONDS_DEFAULT);
        assert_non_null(strstr(out, "HTTP/1.1 408"));
        assert_non_null(strstr(out, "request head not complete within 1 s"));
}

/* Review: the keys file's secret forges any tenant's envd tokens, so a
 * keys file others can read is refused, at start and on each request. */
static void test_a_keys_file_others_can_read_is_refused(void **state) {
        char k[64];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        assert_int_equal(gw_keys_check(keys_path), 0);
        char tenant[80];
        assert_int_equal(gw_key_tenant(keys_path, k, tenant, sizeof(tenant)), 0);
        assert_int_equal(chmod(keys_path, 0640), 0);
        assert_int_equal(gw_keys_check(keys_path), -EPERM);
        assert_int_equal(gw_key_tenant(keys_path, k, tenant, sizeof(tenant)), -EPERM);
        assert_null(gw_envd_token(keys_path, "team-a", "sbx-1"));
        char req[256];
        int n = snprintf(req, sizeof(req), "GET /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", k);
        const char *o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 500"));
        assert_non_null(strstr(o, "not private to the gateway's uid"));
        assert_int_equal(chmod(keys_path, 0600), 0);
        assert_int_equal(gw_keys_check(keys_path), 0);
}

/* Review: a 64 MiB upload of one-byte parts was 850,000 parts, grown one
 * realloc each (minutes of CPU) and then as many fs.write calls: at most
 * GW_MAX_PARTS parts. */
static void test_a_multipart_body_has_at_most_max_parts(void **state) {
        static const char part[] = "--a\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\nx\r\n";
        size_t pl = sizeof(part) - 1;
        for (size_t count = GW_MAX_PARTS; count <= GW_MAX_PARTS + 1; count++) {
                char *body = malloc(pl * count + 8);
                assert_non_null(body);
                for (size_t i = 0; i < count; i++)
                        memcpy(body + i * pl, part, pl);
                memcpy(body + count * pl, "--a--\r\n", 8);
                gw_header h = { .name = "Content-Type", .value = "multipart/form-data; boundary=a" };
                gw_request r = { .headers = &h, .n_headers = 1, .body = body, .body_len = pl * count + 8 };
                gw_part *parts = NULL;
                size_t n = 0;
                int ret = gw_multipart(&r, &parts, &n);
                if (count == GW_MAX_PARTS) {
                        assert_int_equal(ret, 0);
                        assert_int_equal(n, GW_MAX_PARTS);
                        assert_string_equal(parts[n - 1].filename, "f");
                        for (size_t i = 0; i < n; i++)
                                free(parts[i].filename);
                        free(parts);
                } else
                        assert_int_equal(ret, -E2BIG);
                free(body);
        }
}

/* Review: removing a tenant's key line (the documented revocation) left
 * every envd token it had been given valid, so its holder kept running
 * commands in its sandboxes. A token now needs a key of its tenant. */
static void test_removing_a_tenants_last_key_ends_its_tokens(void **state) {
        char ka[64], kb[64], kb2[64], t[80];
        assert_int_equal(gw_key_add("team-a", keys_path, ka, sizeof(ka)), 0);
        assert_int_equal(gw_key_add("team-b", keys_path, kb, sizeof(kb)), 0);
        assert_int_equal(gw_key_add("team-b", keys_path, kb2, sizeof(kb2)), 0);
        char *ta = gw_envd_token(keys_path, "team-a", "sbx-1"), *tb = gw_envd_token(keys_path, "team-b", "sbx-2");
        assert_non_null(ta);
        assert_non_null(tb);
        assert_int_equal(gw_envd_token_check(keys_path, ta, "sbx-1", t, sizeof(t)), 0);
        /* Drop team-a's key and the first of team-b's two. */
        char *text = strdup(slurp(keys_path)), *out = calloc(1, strlen(text) + 1);
        assert_non_null(out);
        int seen_b = 0;
        for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
                if (!strncmp(l, "key team-a ", 11) || (!strncmp(l, "key team-b ", 11) && !seen_b++))
                        continue;
                strcat(out, l);
                strcat(out, "\n");
        }
        FILE *f = fopen(keys_path, "we");
        assert_non_null(f);
        fputs(out, f);
        fclose(f);
        assert_int_equal(gw_envd_token_check(keys_path, ta, "sbx-1", t, sizeof(t)), -EACCES);
        assert_int_equal(gw_envd_token_check(keys_path, tb, "sbx-2", t, sizeof(t)), 0);
        assert_string_equal(t, "team-b");
        free(ta);
        free(tb);
        free(text);
        free(out);
}

/* ---- a fake daemon: answers session.actAs, fs.stat (size 1000) and
 * fs.read ("hi") on each connection it accepts, until the test closes
 * its listening socket ---- */

static int fake_listen_fd;
static int fake_reads;

static void *fake_daemon(void *arg) {
        for (;;) {
                int fd = accept4(fake_listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        return NULL;
                FILE *f = fdopen(fd, "r+");
                char *line = NULL;
                size_t cap = 0;
                while (getline(&line, &cap, f) > 0) {
                        cJSON *m = cJSON_Parse(line), *res = cJSON_CreateObject();
                        const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "method"));
                        if (method && !strcmp(method, "fs.stat")) {
                                cJSON_AddNumberToObject(res, "size", 1000);
                                cJSON_AddStringToObject(res, "type", "file");
                        } else if (method && !strcmp(method, "fs.read")) {
                                __atomic_add_fetch(&fake_reads, 1, __ATOMIC_SEQ_CST);
                                cJSON_AddStringToObject(res, "content", "aGk=");
                        }
                        cJSON *ans = cJSON_CreateObject();
                        cJSON_AddStringToObject(ans, "jsonrpc", "2.0");
                        cJSON_AddItemToObject(ans, "id", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(m, "id"), 1));
                        cJSON_AddItemToObject(ans, "result", res);
                        char *text = cJSON_PrintUnformatted(ans);
                        fprintf(f, "%s\n", text);
                        fflush(f);
                        free(text);
                        cJSON_Delete(ans);
                        cJSON_Delete(m);
                }
                free(line);
                fclose(f);
        }
}

/* Review: a download's bytes were held (base64 line, parsed string,
 * decoded copy) while a caller that reads nothing took them, with no
 * bound across connections: one key's 256 connections each fetching a
 * 64 MiB file could make the gateway hold tens of GiB. Downloads now
 * share the bodies budget, sized from fs.stat before fs.read. */
static void test_downloads_share_the_bodies_budget(void **state) {
        char sock[80];
        snprintf(sock, sizeof(sock), "%s.sock", keys_path);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
        fake_listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fake_listen_fd >= 0);
        assert_int_equal(bind(fake_listen_fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        assert_int_equal(listen(fake_listen_fd, 8), 0);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, fake_daemon, NULL), 0);

        char k[64], req[512];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(tok);
        int n = snprintf(req, sizeof(req), "GET /files?path=/f HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-1\r\n"
                         "X-Access-Token: %s\r\n\r\n", tok);
        free(tok);
        gw_http_set_bodies_max(1000 * 4 + 65536);
        const char *o = exchange_on(sock, req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 200"));
        assert_non_null(strstr(o, "\r\n\r\nhi"));
        assert_int_equal(__atomic_load_n(&fake_reads, __ATOMIC_SEQ_CST), 1);
        gw_http_set_bodies_max(1000 * 4 + 65535);
        o = exchange_on(sock, req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 503"));
        assert_non_null(strstr(o, "as many file bodies as it may"));
        assert_int_equal(__atomic_load_n(&fake_reads, __ATOMIC_SEQ_CST), 1);
        gw_http_set_bodies_max(GW_BODIES_MAX_DEFAULT);

        shutdown(fake_listen_fd, SHUT_RDWR);
        pthread_join(t, NULL);
        close(fake_listen_fd);
        unlink(sock);
}

/* ---- the connection table (conns.c, docs/SECURITY.md §4.3) ---- */

static struct sockaddr_storage peer_of(const char *addr) {
        struct sockaddr_storage ss = {0};
        struct sockaddr_in *in = (struct sockaddr_in *) &ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &ss;
        if (inet_pton(AF_INET, addr, &in->sin_addr) == 1)
                in->sin_family = AF_INET;
        else {
                assert_int_equal(inet_pton(AF_INET6, addr, &in6->sin6_addr), 1);
                in6->sin6_family = AF_INET6;
        }
        return ss;
}

static int admit_from(const char *addr, int fd, gw_slot **ret) {
        struct sockaddr_storage ss = peer_of(addr);
        return gw_conns_admit((struct sockaddr *) &ss, sizeof(ss), fd, ret);
}

/* Found by review: one address renewing 256 idle connections every 30 s
 * kept every tenant out. An address (IPv6: its /64) now holds at most its
 * share, and only it is refused past that. */
static void test_one_address_holds_at_most_its_share(void **state) {
        gw_conns_set_limits(16, 2);
        gw_slot *s[10];
        int n = 0;
        assert_int_equal(admit_from("192.0.2.1", -1, &s[n++]), 0);
        assert_int_equal(admit_from("192.0.2.1", -1, &s[n++]), 0);
        gw_slot *x = NULL;
        assert_int_equal(admit_from("192.0.2.1", -1, &x), -EUSERS);
        /* The same address in IPv4-mapped form is the same peer. */
        assert_int_equal(admit_from("::ffff:192.0.2.1", -1, &x), -EUSERS);
        assert_null(x);
        assert_int_equal(admit_from("192.0.2.2", -1, &s[n++]), 0);
        /* One IPv6 /64 is one peer; the next /64 is another. */
        assert_int_equal(admit_from("2001:db8:1:2::1", -1, &s[n++]), 0);
        assert_int_equal(admit_from("2001:db8:1:2:ffff:ffff:ffff:ffff", -1, &s[n++]), 0);
        assert_int_equal(admit_from("2001:db8:1:2::3", -1, &x), -EUSERS);
        assert_int_equal(admit_from("2001:db8:1:3::1", -1, &s[n++]), 0);
        assert_int_equal(gw_conns_held(), 6);
        /* A connection given back makes room for its address again. */
        gw_conns_release(s[0]);
        assert_int_equal(admit_from("192.0.2.1", -1, &s[0]), 0);
        for (int i = 0; i < n; i++)
                gw_conns_release(s[i]);
        assert_int_equal(gw_conns_held(), 0);
        gw_conns_set_limits(GW_CONNS_MAX_DEFAULT, GW_CONNS_PER_ADDR_DEFAULT);
}

/* True when the peer of `fd` was cut: its end reads the end of stream
 * (already, without waiting). */
static bool was_cut(int fd) {
        char c;
        return recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

/* When every connection is held, the oldest one without a valid key makes
 * room (its socket shut down under it); a keyed one never does, and when
 * all are keyed the new one is refused. */
static void test_a_full_table_cuts_the_oldest_connection_without_a_key(void **state) {
        gw_conns_set_limits(3, 3);
        int sv[5][2];
        gw_slot *s[5] = {0};
        static const char *addr[5] = { "192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5" };
        for (int i = 0; i < 5; i++)
                assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]), 0);
        for (int i = 0; i < 3; i++)
                assert_int_equal(admit_from(addr[i], sv[i][1], &s[i]), 0);
        assert_true(gw_conns_keyed(s[0], "team-a")); /* the oldest, but keyed */
        assert_int_equal(admit_from(addr[3], sv[3][1], &s[3]), 0);
        assert_false(was_cut(sv[0][0]));
        assert_true(was_cut(sv[1][0])); /* the oldest without a key */
        assert_false(was_cut(sv[2][0]));
        /* A head with a key that arrives after the cut is not served
         * (gw_serve_conn_slot closes on false). */
        assert_false(gw_conns_keyed(s[1], "team-b"));
        assert_int_equal(gw_conns_held(), 3);
        assert_true(gw_conns_keyed(s[2], "team-c"));
        assert_true(gw_conns_keyed(s[3], "team-d"));
        gw_slot *x = NULL;
        assert_int_equal(admit_from(addr[4], sv[4][1], &x), -EAGAIN);
        assert_null(x);
        for (int i = 0; i < 4; i++)
                assert_false(i != 1 && was_cut(sv[i][0]));
        for (int i = 0; i < 4; i++)
                gw_conns_release(s[i]); /* the cut one too: its thread gives it back */
        assert_int_equal(gw_conns_held(), 0);
        for (int i = 0; i < 5; i++)
                close(sv[i][0]), close(sv[i][1]);
        gw_conns_set_limits(GW_CONNS_MAX_DEFAULT, GW_CONNS_PER_ADDR_DEFAULT);
}

/* Attack: one tenant keying every connection of the table (from as many
 * addresses as it takes: 8 IPv4 addresses fill 256) kept every other
 * tenant out, since a keyed connection was never cut. A tenant's keyed
 * connections past a quarter of the table are now cut, the oldest
 * first, for a newcomer when every connection is keyed; those within it
 * are not. */
static void test_one_tenant_cannot_hold_the_whole_table(void **state) {
        gw_conns_set_limits(8, 8);
        static const char *const newcomer[4] = { "team-c", "team-d", "team-e", "team-f" };
        int sv[13][2];
        gw_slot *s[13] = {0};
        for (int i = 0; i < 13; i++)
                assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]), 0);
        /* team-b holds 2 (its share), team-a the other 6. */
        for (int i = 0; i < 8; i++) {
                assert_int_equal(admit_from(i < 2 ? "192.0.2.2" : "192.0.2.1", sv[i][1], &s[i]), 0);
                assert_true(gw_conns_keyed(s[i], i < 2 ? "team-b" : "team-a"));
        }
        /* Each newcomer cuts team-a's oldest, until team-a is down to its
         * share: never team-b's. */
        for (int i = 8; i < 12; i++) {
                assert_int_equal(admit_from("192.0.2.3", sv[i][1], &s[i]), 0);
                assert_true(was_cut(sv[i - 6][0]));
                assert_true(gw_conns_keyed(s[i], newcomer[i - 8]));
        }
        /* Now every tenant is within its share: none is cut. */
        gw_slot *x = NULL;
        assert_int_equal(admit_from("192.0.2.4", sv[12][1], &x), -EAGAIN);
        assert_null(x);
        for (int i = 0; i < 12; i++)
                assert_false((i < 2 || i > 5) && was_cut(sv[i][0]));
        for (int i = 0; i < 12; i++)
                gw_conns_release(s[i]);
        assert_int_equal(gw_conns_held(), 0);
        for (int i = 0; i < 13; i++)
                close(sv[i][0]), close(sv[i][1]);
        gw_conns_set_limits(GW_CONNS_MAX_DEFAULT, GW_CONNS_PER_ADDR_DEFAULT);
}

/* Attack: one key's 256 Start streams (from 9 addresses) held every
 * daemon connection the daemon allows the gateway's uid
 * (maxConnectionsPerUser, 256): another tenant's calls were refused by
 * the daemon. One tenant now has at most a quarter of the table's
 * requests in progress (each holds a daemon connection or two). */
static void test_one_tenant_has_at_most_a_quarter_of_the_requests_in_progress(void **state) {
        gw_conns_set_limits(8, 8);
        gw_slot *s[4];
        for (int i = 0; i < 4; i++)
                assert_int_equal(admit_from("192.0.2.1", -1, &s[i]), 0);
        assert_true(gw_conns_begin(s[0], "team-a"));
        assert_true(gw_conns_begin(s[1], "team-a"));
        assert_false(gw_conns_begin(s[2], "team-a"));
        assert_true(gw_conns_begin(s[3], "team-b"));
        gw_conns_end(s[0]);
        assert_true(gw_conns_begin(s[2], "team-a"));
        assert_false(gw_conns_begin(s[0], "team-a"));
        for (int i = 0; i < 4; i++) {
                gw_conns_end(s[i]);
                gw_conns_release(s[i]);
        }
        gw_conns_set_limits(GW_CONNS_MAX_DEFAULT, GW_CONNS_PER_ADDR_DEFAULT);
}

typedef struct slot_conn {
        int fd;
        gw_slot *slot;
} slot_conn;

static void *serve_slot_thread(void *arg) {
        slot_conn *sc = arg;
        gw_serve_conn_slot(&http_cfg, sc->fd, sc->slot);
        return NULL;
}

/* Reads one answer (head and Content-Length body) from fd into buf. */
static void read_answer(int fd, char *buf, size_t size) {
        size_t have = 0;
        for (;;) {
                ssize_t n = recv(fd, buf + have, size - 1 - have, 0);
                assert_true(n > 0);
                have += (size_t) n;
                buf[have] = 0;
                const char *end = strstr(buf, "\r\n\r\n"), *cl = strcasestr(buf, "Content-Length: ");
                if (end && cl && have >= (size_t) (end + 4 - buf) + strtoul(cl + 16, NULL, 10))
                        return;
        }
}

/* Over a served connection: one that has sent a valid API key keeps its
 * place when the table is full; one that only asked /health (no key) is
 * cut for a newcomer. */
static void test_a_connection_with_a_valid_key_keeps_its_place(void **state) {
        char k[64];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        http_cfg = (gw_config) { .socket_path = "/nonexistent/sandboxd.sock", .keys_path = keys_path };
        gw_conns_set_limits(1, 4);
        char req[512], out[4096];
        int n = snprintf(req, sizeof(req), "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", k);
        static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        for (int keyed = 1; keyed >= 0; keyed--) {
                int sv[2], other[2];
                assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
                assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, other), 0);
                slot_conn sc = { .fd = sv[1] };
                assert_int_equal(admit_from("192.0.2.1", sv[1], &sc.slot), 0);
                pthread_t t;
                assert_int_equal(pthread_create(&t, NULL, serve_slot_thread, &sc), 0);
                if (keyed)
                        assert_int_equal(send(sv[0], req, (size_t) n, MSG_NOSIGNAL), n);
                else
                        assert_int_equal(send(sv[0], health, sizeof(health) - 1, MSG_NOSIGNAL), sizeof(health) - 1);
                read_answer(sv[0], out, sizeof(out));
                assert_non_null(strstr(out, keyed ? "HTTP/1.1 502" : "HTTP/1.1 200"));
                gw_slot *x = NULL;
                if (keyed) {
                        assert_int_equal(admit_from("192.0.2.2", other[1], &x), -EAGAIN);
                        shutdown(sv[0], SHUT_WR); /* the peer leaves */
                } else
                        assert_int_equal(admit_from("192.0.2.2", other[1], &x), 0);
                /* Either way the connection's thread ends (the peer left,
                 * or the gateway cut it) and gives its slot back. */
                pthread_join(t, NULL);
                if (!keyed)
                        assert_true(recv(sv[0], out, sizeof(out), 0) == 0);
                gw_conns_release(x);
                assert_int_equal(gw_conns_held(), 0);
                close(sv[0]);
                close(other[0]);
                close(other[1]);
        }
        gw_conns_set_limits(GW_CONNS_MAX_DEFAULT, GW_CONNS_PER_ADDR_DEFAULT);
}

/* ---- the rate per tenant (rate.c) ---- */

static int64_t frozen_ms;

static int64_t frozen_clock(void) {
        return frozen_ms;
}

/* A tenant over its rate is answered 429 in E2B's error shape, from the
 * head (a body is not read); another tenant is not touched, and the
 * bucket fills again with time (a clock the test moves, not a sleep). */
static void test_a_tenant_over_its_rate_is_answered_429(void **state) {
        char a[64], b[64], req[4096];
        assert_int_equal(gw_key_add("team-a", keys_path, a, sizeof(a)), 0);
        assert_int_equal(gw_key_add("team-b", keys_path, b, sizeof(b)), 0);
        frozen_ms = 1000000;
        gw_rate_set(2, frozen_clock); /* 2 a second, a bucket of 4 */
        size_t n = 0;
        for (int i = 0; i < 5; i++)
                n += (size_t) snprintf(req + n, sizeof(req) - n,
                                       "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", a);
        const char *o = exchange(req, n);
        /* Four reach the daemon (none here: 502), the fifth is refused. */
        int n502 = 0;
        for (const char *p = o; (p = strstr(p, "HTTP/1.1 502")); p++)
                n502++;
        assert_int_equal(n502, 4);
        assert_non_null(strstr(o, "HTTP/1.1 429 Too Many Requests"));
        assert_non_null(strstr(o, "{\"code\":429,\"message\":\"rate limit exceeded: tenant team-a sends more"));

        /* With a body: refused from the head, the connection closed unread. */
        n = (size_t) snprintf(req, sizeof(req), "POST /sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n"
                              "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", a);
        o = exchange(req, n);
        assert_non_null(strstr(o, "HTTP/1.1 429"));
        assert_non_null(strstr(o, "Connection: close"));

        /* Another tenant has its own bucket. */
        n = (size_t) snprintf(req, sizeof(req), "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", b);
        assert_non_null(strstr(exchange(req, n), "HTTP/1.1 502"));

        /* Half a second later one more of team-a's goes through. */
        frozen_ms += 500;
        n = (size_t) snprintf(req, sizeof(req), "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-Key: %s\r\n\r\n", a);
        assert_non_null(strstr(exchange(req, n), "HTTP/1.1 502"));
        assert_non_null(strstr(exchange(req, n), "HTTP/1.1 429"));
        gw_rate_set(GW_RATE_DEFAULT, NULL);
}

/* E2B's signature of a file URL, as the SDK's getSignature() makes it
 * (the values computed with Python's hashlib and base64). */
static void test_file_signatures_as_the_sdk_makes_them(void **state) {
        char sig[GW_SIGNATURE_SIZE];
        assert_int_equal(gw_file_signature("/home/user/hello.txt", "read", "root", "tok", NULL, sig), 0);
        assert_string_equal(sig, "v1_TRlHfiNgpf44c8IeZCoou7xiz+m60QkIJ1Pm8NXrjXk");
        assert_int_equal(gw_file_signature("/home/user/hello.txt", "write", "", "tok", "1700000000", sig), 0);
        assert_string_equal(sig, "v1_HQ2TqrDxPNUoM6isLbg4tFnU8LazsMAA+I0jWuEiqxI");
}

/* A signed /files URL is routed by its signature before any daemon call:
 * expired, wrong, or another sandbox's is 401 naming it; a valid one
 * (the sandbox's token was handed out by this gateway) goes on to the
 * daemon, here absent. */
static void test_signed_file_urls_route_by_their_signature(void **state) {
        char k[64], sig[GW_SIGNATURE_SIZE], req[512];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        static const char expired[] = "GET /files?path=a&signature=v1_x&signature_expiration=1 HTTP/1.1\r\nHost: x\r\n\r\n";
        const char *o = exchange(expired, sizeof(expired) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        assert_non_null(strstr(o, "{\"code\":401,\"message\":\"signature is already expired\"}"));
        static const char wrong[] = "GET /files?path=a&signature=v1_x HTTP/1.1\r\nHost: x\r\n\r\n";
        o = exchange(wrong, sizeof(wrong) - 1);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        assert_non_null(strstr(o, "invalid signature"));

        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1"); /* handed out: known */
        assert_non_null(tok);
        assert_int_equal(gw_file_signature("a", "read", "", tok, NULL, sig), 0);
        /* '+' and '/' of base64 percent-encoded, as URLSearchParams does. */
        char q[200];
        size_t j = 0;
        for (const char *c = sig; *c && j < sizeof(q) - 4; c++)
                j += (size_t) (*c == '+' ? snprintf(q + j, 4, "%%2B") : *c == '/' ? snprintf(q + j, 4, "%%2F")
                                                                                  : snprintf(q + j, 2, "%c", *c));
        int n = snprintf(req, sizeof(req), "GET /files?path=a&signature=%s HTTP/1.1\r\nHost: x\r\n\r\n", q);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 503"));
        assert_non_null(strstr(o, "sandboxd"));
        /* Naming another sandbox, it is not that sandbox's. */
        n = snprintf(req, sizeof(req), "GET /files?path=a&signature=%s HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-2\r\n\r\n", q);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        /* Signed to read, not to write. */
        n = snprintf(req, sizeof(req), "POST /files?path=a&signature=%s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", q);
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 401"));
        free(tok);
}

/* StreamInput's body is parsed as it comes, a byte at a time too; what
 * it must not be is refused naming it, before any daemon call. */
static void test_stream_input_is_parsed_as_it_comes(void **state) {
        gw_config cfg = { .socket_path = "/nonexistent/sandboxd.sock", .keys_path = keys_path };
        static const char keepalive[] = "\0\0\0\0\x10{\"keepalive\":{}}";
        gw_instream *s = gw_instream_open(&cfg, "team-a", "sbx-1");
        assert_non_null(s);
        for (size_t i = 0; i < sizeof(keepalive) - 1; i++)
                assert_int_equal(gw_instream_feed(s, keepalive + i, 1), 0);
        static const char data[] = "\0\0\0\0\x23{\"data\":{\"input\":{\"stdin\":\"eA==\"}}}";
        assert_int_equal(gw_instream_feed(s, data, sizeof(data) - 1), -1);
        gw_instream_finish(s, NULL);

        char k[64], req[1024];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(tok);
        static const struct {
                const char *body;
                size_t len;
                const char *words;
        } cases[] = {
                { "\0\0\0\0\x23{\"data\":{\"input\":{\"stdin\":\"eA==\"}}}", 40, "the start message (the process's selector) comes first" },
                { "\x01\0\0\0\x02{}", 7, "compressed messages are not served" },
                { "\0\x7f\0\0\0", 5, "at most 8388608" },
                { "\0\0\0\0\x02[]", 7, "must be a JSON object" },
                { "\0\0\0\0\x10{\"keepalive\":{}}", 21, "no start message" },
                { "\0\0\0\0\x18{\"start\":{\"process\":{}}}", 29, "start.process.pid or process.tag: required" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int n = snprintf(req, sizeof(req), "POST /process.Process/StreamInput HTTP/1.1\r\nHost: x\r\n"
                                 "E2b-Sandbox-Id: sbx-1\r\nX-Access-Token: %s\r\nContent-Type: application/connect+json\r\n"
                                 "Content-Length: %zu\r\n\r\n", tok, cases[i].len);
                memcpy(req + n, cases[i].body, cases[i].len);
                const char *o = exchange(req, (size_t) n + cases[i].len);
                assert_non_null(strstr(o, "HTTP/1.1 200"));
                assert_non_null(strstr(o, "application/connect+json"));
                assert_non_null(strstr(o, "\"code\":\""));
                assert_non_null(strstr(o, cases[i].words));
        }
        /* As a unary call it is refused, saying how to send it. */
        int n = snprintf(req, sizeof(req), "POST /process.Process/StreamInput HTTP/1.1\r\nHost: x\r\n"
                         "E2b-Sandbox-Id: sbx-1\r\nX-Access-Token: %s\r\nContent-Type: application/json\r\n"
                         "Content-Length: 2\r\n\r\n{}", tok);
        const char *o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
        assert_non_null(strstr(o, "is a client stream: Content-Type application/connect+json"));
        free(tok);
}

/* File metadata headers are checked before any daemon call: past 32
 * keys, or a key that is not an HTTP token, or a value over 4096 bytes,
 * is a 400 naming the header. */
static void test_file_metadata_headers_are_checked_first(void **state) {
        char k[64];
        assert_int_equal(gw_key_add("team-a", keys_path, k, sizeof(k)), 0);
        char *tok = gw_envd_token(keys_path, "team-a", "sbx-1");
        assert_non_null(tok);
        static char req[16384];
        int n = snprintf(req, sizeof(req), "POST /files?path=a HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-1\r\n"
                         "X-Access-Token: %s\r\nContent-Type: application/octet-stream\r\n", tok);
        for (int i = 0; i < 33; i++)
                n += snprintf(req + n, sizeof(req) - (size_t) n, "X-Metadata-k%d: v\r\n", i);
        n += snprintf(req + n, sizeof(req) - (size_t) n, "Content-Length: 1\r\n\r\nx");
        const char *o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
        assert_non_null(strstr(o, "at most 32 metadata keys a file"));

        n = snprintf(req, sizeof(req), "POST /files?path=a HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: sbx-1\r\n"
                     "X-Access-Token: %s\r\nContent-Type: application/octet-stream\r\nX-Metadata-a: ", tok);
        memset(req + n, 'v', 4097);
        n += 4097;
        n += snprintf(req + n, sizeof(req) - (size_t) n, "\r\nContent-Length: 1\r\n\r\nx");
        o = exchange(req, (size_t) n);
        assert_non_null(strstr(o, "HTTP/1.1 400"));
        assert_non_null(strstr(o, "X-Metadata-a: file metadata keys are 1 to 240 HTTP token characters"));
        free(tok);
}

/* Found by E2B's signing test: a request refused from its head (here an
 * expired signed upload) was answered and its socket closed with its
 * body unread, so TCP reset the connection and the client, still sending
 * its body, failed with "terminated" before it read the answer. Now the
 * gateway shuts down its side and drains what comes (bounded) before it
 * closes. Over TCP on loopback: the client reads the answer, then sends
 * the rest of its body, which must not fail, then sees the end. */
static void *serve_tcp_thread(void *arg) {
        int l = (int) (intptr_t) arg;
        int fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
                gw_serve_conn(&http_cfg, fd);
        return NULL;
}

static void test_an_answer_before_the_body_is_not_lost_to_a_reset(void **state) {
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        assert_int_equal(bind(l, (struct sockaddr *) &a, sizeof(a)), 0);
        assert_int_equal(listen(l, 1), 0);
        assert_int_equal(getsockname(l, (struct sockaddr *) &a, &al), 0);
        http_cfg = (gw_config) { .socket_path = "/nonexistent/sandboxd.sock", .keys_path = keys_path };
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, serve_tcp_thread, (void *) (intptr_t) l), 0);
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(connect(c, (struct sockaddr *) &a, sizeof(a)), 0);
        static const char head[] = "POST /files?path=a&signature=v1_x&signature_expiration=1 HTTP/1.1\r\nHost: x\r\n"
                                   "Content-Length: 524288\r\n\r\nxxxx";
        assert_int_equal(send(c, head, sizeof(head) - 1, MSG_NOSIGNAL), (ssize_t) sizeof(head) - 1);
        static char out[4096];
        size_t have = 0;
        ssize_t n;
        while (!strstr(out, "expired\"}") && (n = recv(c, out + have, sizeof(out) - 1 - have, 0)) > 0) {
                have += (size_t) n;
                out[have] = 0;
        }
        assert_non_null(strstr(out, "HTTP/1.1 401"));
        assert_non_null(strstr(out, "signature is already expired"));
        /* The rest of the body: every piece goes (no reset). */
        static char piece[16384];
        memset(piece, 'x', sizeof(piece));
        size_t left = 524288 - 4;
        while (left > 0) {
                size_t k = left < sizeof(piece) ? left : sizeof(piece);
                n = send(c, piece, k, MSG_NOSIGNAL);
                assert_true(n > 0);
                left -= (size_t) n;
        }
        shutdown(c, SHUT_WR);
        while ((n = recv(c, out, sizeof(out), 0)) > 0)
                ;
        assert_int_equal(n, 0); /* the end, not a reset */
        close(c);
        pthread_join(t, NULL);
        close(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_a_key_maps_to_its_tenant_and_only_its_hash_is_stored, setup, teardown),
                cmocka_unit_test_setup_teardown(test_key_add_refuses_a_name_the_daemon_would_refuse, setup, teardown),
                cmocka_unit_test_setup_teardown(test_an_envd_token_opens_one_sandbox_of_one_tenant, setup, teardown),
                cmocka_unit_test(test_url_decoding),
                cmocka_unit_test(test_multipart_parts_with_their_file_names),
                cmocka_unit_test_setup_teardown(test_http_routes_before_any_daemon_call, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_names_route_envd_and_exposed_ports, setup, teardown),
                cmocka_unit_test_setup_teardown(test_key_tenants_lists_each_tenant_once, setup, teardown),
                cmocka_unit_test_setup_teardown(test_http_limits_answer_and_close, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_request_without_a_valid_key_is_answered_before_its_body, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_bodies_of_all_connections_are_bounded, setup, teardown),
                cmocka_unit_test_setup_teardown(test_one_tenant_holds_at_most_half_the_bodies_budget, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_body_that_is_not_an_object_is_refused, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_head_that_trickles_in_is_cut_off, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_keys_file_others_can_read_is_refused, setup, teardown),
                cmocka_unit_test(test_a_multipart_body_has_at_most_max_parts),
                cmocka_unit_test_setup_teardown(test_removing_a_tenants_last_key_ends_its_tokens, setup, teardown),
                cmocka_unit_test_setup_teardown(test_downloads_share_the_bodies_budget, setup, teardown),
                cmocka_unit_test(test_one_address_holds_at_most_its_share),
                cmocka_unit_test(test_a_full_table_cuts_the_oldest_connection_without_a_key),
                cmocka_unit_test(test_one_tenant_cannot_hold_the_whole_table),
                cmocka_unit_test(test_one_tenant_has_at_most_a_quarter_of_the_requests_in_progress),
                cmocka_unit_test_setup_teardown(test_a_connection_with_a_valid_key_keeps_its_place, setup, teardown),
                cmocka_unit_test_setup_teardown(test_a_tenant_over_its_rate_is_answered_429, setup, teardown),
                cmocka_unit_test(test_file_signatures_as_the_sdk_makes_them),
                cmocka_unit_test_setup_teardown(test_signed_file_urls_route_by_their_signature, setup, teardown),
                cmocka_unit_test_setup_teardown(test_stream_input_is_parsed_as_it_comes, setup, teardown),
                cmocka_unit_test_setup_teardown(test_file_metadata_headers_are_checked_first, setup, teardown),
                cmocka_unit_test_setup_teardown(test_an_answer_before_the_body_is_not_lost_to_a_reset, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
