/* Unit tests for the HTTP layer of the egress proxy (policy/http.c) and its
 * TLS (policy/tls.c): head parsing edge cases, leaf minting, and whole
 * terminated sessions: a TLS client on one end of a socketpair, the proxy
 * (pol_tls_terminate) on the other, and an HTTPS echo server whose leaf
 * comes from a test CA given to the proxy as its extra upstream CA. The
 * echo server answers every request with the request head it received, so
 * each test can compare what the sandbox sent, what upstream got and what
 * came back.
 *
 * Everything runs in a private pair of network namespaces (unshare, as
 * root): the tests and the proxy in one, the upstream servers in the other,
 * behind a veth: UPSTREAM_ADDR and FWD_ADDR (the forwardURL target) live
 * there, since the proxy never dials an address the kernel delivers
 * locally (loopback or one of its own). Nothing leaves this machine. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <http_parser.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "libcore/util.h"
#include "policy/policy.h"
#include "policy/proxy.h"

#define SECRET "Bearer sk-SECRET-0123456789"
#define FWD_ADDR "10.255.0.2"
#define UPSTREAM_ADDR "198.18.0.2"
/* A value with the characters JSON escapes, ones percent-encoding changes,
 * non-ASCII, and a token after its scheme: as C text and as policy JSON. */
#define ODD_VALUE "Token sk\"q\\u/\xc3\xa9-0123456789"
#define ODD_JSON "Token sk\\\"q\\\\u/\xc3\xa9-0123456789"

static const char policy_json[] =
        "{\"allow\": {\"api.test\": ["
        " {\"match\": {\"path\": {\"exact\": \"/first\"}},"
        "  \"transform\": [{\"headers\": {\"authorization\": \"" SECRET "\"}}]},"
        " {\"match\": {\"path\": {\"startsWith\": \"/fi\"}}, \"transform\": [{\"headers\": {\"x-rule\": \"second\"}}]},"
        " {\"match\": {\"path\": {\"exact\": \"/over\"}}, \"transform\": [{\"headers\": {\"X-Over\": \"new\"}}]},"
        " {\"match\": {\"path\": {\"startsWith\": \"/fwd\"}}, \"forwardURL\": \"https://fwd.example.com/base/\"},"
        " {\"match\": {\"method\": [\"POST\"], \"queryString\": [{\"key\": {\"exact\": \"q\"}, \"value\": {\"exact\": \"a b\"}}],"
        "   \"headers\": [{\"key\": {\"exact\": \"X-Kind\"}, \"value\": {\"regex\": \"tok.*\"}}]},"
        "  \"transform\": [{\"headers\": {\"x-matched\": \"post-rule\"}}]},"
        " {\"match\": {\"path\": {\"startsWith\": \"/chunked\"}},"
        "  \"transform\": [{\"headers\": {\"authorization\": \"" SECRET "\"}}]},"
        " {\"match\": {\"path\": {\"exact\": \"/forms\"}},"
        "  \"transform\": [{\"headers\": {\"x-api-key\": \"" ODD_JSON "\"}}]}"
        "]}}";

static char tmpdir[] = "/tmp/test-http-XXXXXX";
static char sess_cert[256], up_cert[256];
static pol_proxy_ca *sess_ca, *up_ca;
static SSL_CTX *up_trusting, *up_untrusting, *echo_ctx;
static pol_policy *policy;
static bool have_netns;
static uint16_t target_port; /* 0: the echo server */
static int io_timeout_ms = 5000;
static const char *client_sni = "api.test";

/* ---- events ------------------------------------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char events[4096];

static void record_event(const pol_proxy_event *ev, void *userdata) {
        pthread_mutex_lock(&lock);
        size_t l = strlen(events);
        snprintf(events + l, sizeof(events) - l, "%s|%s|rule=%s\n", ev->reason, ev->message,
                 ev->verdict ? ev->verdict->detail : "");
        pthread_mutex_unlock(&lock);
}

/* ---- the HTTPS echo server ------------------------------------------------------------ */

static int echo_fd = -1;
static uint16_t echo_port;
static pthread_t echo_thread;
static int accepted;
static char seen[8][8192]; /* request heads upstream received, in order */
static int n_seen;

static int echo_sni(SSL *ssl, int *alert, void *arg) {
        const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        X509 *cert = NULL;
        EVP_PKEY *key = NULL;
        if (pol_proxy_ca_leaf(up_ca, sni ? sni : FWD_ADDR, &cert, &key) < 0)
                return SSL_TLSEXT_ERR_ALERT_FATAL;
        SSL_use_certificate(ssl, cert);
        SSL_use_PrivateKey(ssl, key);
        X509_free(cert);
        EVP_PKEY_free(key);
        return SSL_TLSEXT_ERR_OK;
}

/* The forms an upstream might echo ODD_VALUE in, one per line, written out
 * by hand: Python's json.dumps, JavaScript's JSON.stringify, PHP's
 * json_encode, percent-encoding in both hex cases, and the token alone
 * (raw, JSON and percent-encoded). */
static const char *const odd_forms[] = {
        "Token sk\\\"q\\\\u/\\u00e9-0123456789",
        "Token sk\\\"q\\\\u/\xc3\xa9-0123456789",
        "Token sk\\\"q\\\\u\\/\\u00e9-0123456789",
        "Token%20sk%22q%5Cu%2F%C3%A9-0123456789",
        "Token%20sk%22q%5cu%2f%c3%a9-0123456789",
        "sk\"q\\u/\xc3\xa9-0123456789",
        "{\"key\":\"sk\\\"q\\\\u\\/\\u00e9-0123456789\"}",
        "?k=sk%22q%5Cu%2F%C3%A9-0123456789&x=1",
};

static void echo_reply(pol_stream *s, const char *head, size_t body_len) {
        char out[20000], auth[256] = "";
        const char *a = strcasestr(head, "\nauthorization: ");
        if (a)
                snprintf(auth, sizeof(auth), "%.*s", (int)strcspn(a + 16, "\r"), a + 16);
        if (strncmp(strchr(head, ' ') + 1, "/forms", 6) == 0) {
                char body[4096] = "";
                for (size_t i = 0; i < sizeof(odd_forms) / sizeof(odd_forms[0]); i++)
                        snprintf(body + strlen(body), sizeof(body) - strlen(body), "%s\n", odd_forms[i]);
                int n = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\ncontent-length: %zu\r\n\r\n%s",
                                 strlen(body), body);
                pol_stream_write_all(s, out, (size_t)n);
                return;
        }
        if (strncmp(strchr(head, ' ') + 1, "/chunked", 8) == 0) {
                /* 5-byte chunks: an echoed value straddles several. */
                int n = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
                for (size_t i = 0; i < strlen(head); i += 5)
                        n += snprintf(out + n, sizeof(out) - n, "%zx\r\n%.5s\r\n",
                                      strlen(head) - i < 5 ? strlen(head) - i : 5, head + i);
                n += snprintf(out + n, sizeof(out) - n, "0\r\n\r\n");
                pol_stream_write_all(s, out, (size_t)n);
                return;
        }
        char body[10000];
        int bl = snprintf(body, sizeof(body), "BODYLEN=%zu\n%s", body_len, head);
        int n = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nx-echo-auth: %s\r\ncontent-length: %d\r\n\r\n%s",
                         auth, bl, body);
        pol_stream_write_all(s, out, (size_t)n);
}

/* Serves one upstream connection: requests with Content-Length bodies,
 * keep-alive until the proxy closes. */
static void *echo_conn(void *arg) {
        int fd = (int)(intptr_t)arg;
        SSL *ssl = SSL_new(echo_ctx);
        pol_stream s = { .fd = fd, .ssl = ssl };
        static __thread uint8_t buf[65536];
        size_t len = 0;
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) != 1)
                goto out;
        for (;;) {
                char method[32], *target = NULL, *host = NULL;
                size_t head_len;
                int r;
                while ((r = pol_http_parse_head(buf, len, method, &target, &host, &head_len)) == -EAGAIN) {
                        ssize_t got = pol_stream_read(&s, buf + len, sizeof(buf) - len);
                        if (got <= 0)
                                goto out;
                        len += (size_t)got;
                }
                free(target);
                free(host);
                if (r < 0)
                        goto out;
                char head[8192];
                snprintf(head, sizeof(head), "%.*s", (int)head_len, (char *)buf);
                pthread_mutex_lock(&lock);
                if (n_seen < 8)
                        snprintf(seen[n_seen++], sizeof(seen[0]), "%s", head);
                pthread_mutex_unlock(&lock);
                const char *cl = strcasestr(head, "\ncontent-length: ");
                size_t body = cl ? strtoul(cl + 17, NULL, 10) : 0, have = len - head_len, total = 0;
                memmove(buf, buf + head_len, have);
                len = have;
                while (total + len < body) { /* count the body without keeping it */
                        total += len;
                        len = 0;
                        ssize_t got = pol_stream_read(&s, buf, sizeof(buf));
                        if (got <= 0)
                                goto out;
                        len = (size_t)got;
                }
                size_t rest = body - total;
                memmove(buf, buf + rest, len - rest);
                len -= rest;
                echo_reply(&s, head, body);
        }
out:
        SSL_free(ssl);
        close(fd);
        return NULL;
}

static pthread_t conn_threads[64];
static int n_conn_threads;

/* A test's upstream connections must all be served and ended before the
 * next test resets seen[]: a head the proxy sent just before it gave up
 * (a 400 on a bad chunk size, say) may otherwise be read by its server
 * thread only later, under load, and land in the next test's seen[0].
 * quiesce() connects a sentinel from a known port; the accept queue is
 * FIFO, so once the accept loop has taken the sentinel, every earlier
 * connection has its thread, and joining those threads waits until each
 * has seen its connection close. */
static pthread_cond_t sentinel_cond = PTHREAD_COND_INITIALIZER;
static uint16_t sentinel_port; /* local port of the sentinel in flight; 0: none */
static bool sentinel_seen;

static void accept_loop(int lfd, void *(*serve)(void *)) {
        for (;;) {
                struct sockaddr_in peer;
                socklen_t pl = sizeof(peer);
                int fd = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
                if (fd < 0)
                        return; /* shut down */
                pthread_mutex_lock(&lock);
                if (sentinel_port && ntohs(peer.sin_port) == sentinel_port) {
                        sentinel_seen = true;
                        pthread_cond_broadcast(&sentinel_cond);
                        close(fd);
                } else {
                        accepted++;
                        if (n_conn_threads < 64)
                                pthread_create(&conn_threads[n_conn_threads++], NULL, serve, (void *)(intptr_t)fd);
                        else
                                close(fd);
                }
                pthread_mutex_unlock(&lock);
        }
}

static void *echo_main(void *arg) {
        accept_loop(echo_fd, echo_conn);
        return NULL;
}

/* ---- a plaintext upstream that misbehaves on cue --------------------------------------- */

/* Answers each request "ok". A chunked request body is kept as received (up
 * to its blank line). HEAD gets a Content-Length head and, once the test
 * writes to raw_go, a body it should not have sent; raw_done then says the
 * stray bytes were written. */
static int raw_fd = -1, raw_go[2] = { -1, -1 }, raw_done[2] = { -1, -1 };
static uint16_t raw_port;
static pthread_t raw_thread;
static char raw_body[4096];

static void *raw_conn(void *arg) {
        pol_stream s = { .fd = (int)(intptr_t)arg };
        static __thread uint8_t buf[65536];
        size_t len = 0;
        for (;;) {
                char method[32], *target = NULL, *host = NULL, b;
                size_t head_len;
                int r;
                while ((r = pol_http_parse_head(buf, len, method, &target, &host, &head_len)) == -EAGAIN) {
                        ssize_t got = pol_stream_read(&s, buf + len, sizeof(buf) - len - 1);
                        if (got <= 0)
                                goto out;
                        len += (size_t)got;
                }
                free(target);
                free(host);
                if (r < 0)
                        goto out;
                char head[8192];
                snprintf(head, sizeof(head), "%.*s", (int)head_len, (char *)buf);
                pthread_mutex_lock(&lock);
                if (n_seen < 8)
                        snprintf(seen[n_seen++], sizeof(seen[0]), "%s", head);
                pthread_mutex_unlock(&lock);
                bool chunked = strcasestr(head, "\ntransfer-encoding: chunked") != NULL;
                memmove(buf, buf + head_len, len - head_len);
                len -= head_len;
                buf[len] = 0;
                while (chunked && !strstr((char *)buf, "\r\n\r\n")) {
                        ssize_t got = pol_stream_read(&s, buf + len, sizeof(buf) - len - 1);
                        if (got <= 0)
                                goto out;
                        len += (size_t)got;
                        buf[len] = 0;
                }
                if (chunked) {
                        size_t bl = (size_t)((char *)strstr((char *)buf, "\r\n\r\n") + 4 - (char *)buf);
                        pthread_mutex_lock(&lock);
                        snprintf(raw_body, sizeof(raw_body), "%.*s", (int)bl, (char *)buf);
                        pthread_mutex_unlock(&lock);
                        memmove(buf, buf + bl, len - bl);
                        len -= bl;
                }
                if (streq(method, "HEAD")) {
                        static const char h[] = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n";
                        pol_stream_write_all(&s, h, strlen(h));
                        if (read(raw_go[0], &b, 1) != 1)
                                goto out;
                        pol_stream_write_all(&s, "hello", 5);
                        if (write(raw_done[1], "x", 1) != 1)
                                goto out;
                        continue;
                }
                static const char ok[] = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                pol_stream_write_all(&s, ok, strlen(ok));
        }
out:
        close(s.fd);
        return NULL;
}

static void *raw_main(void *arg) {
        accept_loop(raw_fd, raw_conn);
        return NULL;
}

/* Waits until the accept loop of the server on port has taken every
 * connection made before this call (see accept_loop). */
static void sentinel_through(uint16_t port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
        socklen_t sl = sizeof(sa);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
        pthread_mutex_lock(&lock);
        sentinel_port = ntohs(sa.sin_port);
        sentinel_seen = false;
        pthread_mutex_unlock(&lock);
        /* The servers listen on the far side of the veth (private_netns). */
        assert_int_equal(inet_pton(AF_INET, UPSTREAM_ADDR, &sa.sin_addr), 1);
        sa.sin_port = htons(port);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 10;
        pthread_mutex_lock(&lock);
        int r = 0;
        while (!sentinel_seen && r == 0)
                r = pthread_cond_timedwait(&sentinel_cond, &lock, &deadline);
        sentinel_port = 0;
        pthread_mutex_unlock(&lock);
        close(fd);
        assert_int_equal(r, 0);
}

/* Called once the proxy has returned (and so closed its upstream side):
 * serves out and joins every upstream connection the test made. */
static void quiesce(void) {
        sentinel_through(echo_port);
        sentinel_through(raw_port);
        pthread_mutex_lock(&lock);
        int n = n_conn_threads;
        n_conn_threads = 0;
        pthread_mutex_unlock(&lock);
        for (int i = 0; i < n; i++)
                pthread_join(conn_threads[i], NULL);
}

/* ---- the client side ------------------------------------------------------------------ */

typedef struct client {
        int fd;
        SSL_CTX *ctx;
        pol_stream s;
        pthread_t proxy;
        int proxy_fd;
        int proxy_r;
        pol_proxy_env env;
        pol_proxy_target t;
        bool tls, handshake_failed;
        uint8_t buf[65536];
        size_t off, len;
} client;

static void *proxy_main(void *arg) {
        client *c = arg;
        if (c->tls)
                c->proxy_r = pol_tls_terminate(&c->env, c->proxy_fd, &c->t);
        else {
                pol_stream s = { .fd = c->proxy_fd };
                c->proxy_r = pol_http_serve(&c->env, &s, &c->t, false, NULL, 0);
        }
        close(c->proxy_fd);
        return NULL;
}

/* Starts the proxy for api.test on one end of a socketpair and connects a
 * client (TLS trusting the session CA, or plain) to the other end. */
static client *client_start(bool tls, SSL_CTX *upstream, const char *alpn) {
        client *c = calloc(1, sizeof(*c));
        int sv[2];
        assert_non_null(c);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        c->fd = sv[0];
        c->proxy_fd = sv[1];
        c->tls = tls;
        c->env = (pol_proxy_env){ .policy = policy, .upstream_tls = upstream, .ca = sess_ca,
                                  .policy_name = "sbx-test", .io_timeout_ms = io_timeout_ms, .event = record_event };
        snprintf(c->t.host, sizeof(c->t.host), "api.test");
        c->t.port = target_port ? target_port : echo_port;
        c->t.domain = pol_policy_find_domain(policy, "api.test", c->t.port);
        assert_non_null(c->t.domain);
        assert_int_equal(pol_addr_parse(UPSTREAM_ADDR, &c->t.addrs[0]), 0);
        c->t.n_addrs = 1;
        pthread_mutex_lock(&lock);
        events[0] = 0;
        n_seen = 0;
        accepted = 0;
        pthread_mutex_unlock(&lock);
        assert_int_equal(pthread_create(&c->proxy, NULL, proxy_main, c), 0);
        c->s.fd = c->fd;
        if (!tls)
                return c;
        c->ctx = SSL_CTX_new(TLS_client_method());
        assert_int_equal(SSL_CTX_load_verify_locations(c->ctx, sess_cert, NULL), 1);
        SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
        if (alpn)
                SSL_CTX_set_alpn_protos(c->ctx, (const unsigned char *)alpn, (unsigned)strlen(alpn));
        c->s.ssl = SSL_new(c->ctx);
        SSL_set1_host(c->s.ssl, "api.test");
        SSL_set_tlsext_host_name(c->s.ssl, client_sni);
        SSL_set_fd(c->s.ssl, c->fd);
        if (SSL_connect(c->s.ssl) != 1)
                c->handshake_failed = true;
        return c;
}

static int client_stop(client *c) {
        if (c->s.ssl)
                SSL_shutdown(c->s.ssl);
        shutdown(c->fd, SHUT_RDWR);
        pthread_join(c->proxy, NULL);
        quiesce();
        SSL_free(c->s.ssl);
        SSL_CTX_free(c->ctx);
        close(c->fd);
        int r = c->proxy_r;
        free(c);
        return r;
}

typedef struct resp {
        int status;
        char head[8192]; /* "name: value\n" lines */
        char body[65536];
        size_t body_len;
        bool chunked, done, in_value;
} resp;

static int r_field(http_parser *p, const char *at, size_t n) {
        resp *r = p->data;
        size_t l = strlen(r->head);
        snprintf(r->head + l, sizeof(r->head) - l, "%s%.*s", r->in_value ? "\n" : "", (int)n, at);
        r->in_value = false;
        return 0;
}

static int r_value(http_parser *p, const char *at, size_t n) {
        resp *r = p->data;
        size_t l = strlen(r->head);
        snprintf(r->head + l, sizeof(r->head) - l, "%s%.*s", r->in_value ? "" : ": ", (int)n, at);
        r->in_value = true;
        return 0;
}

static bool expect_no_body; /* the next response answers HEAD */

static int r_headers(http_parser *p) {
        resp *r = p->data;
        r->status = p->status_code;
        r->chunked = p->flags & F_CHUNKED;
        return expect_no_body ? 1 : 0;
}

static int r_body(http_parser *p, const char *at, size_t n) {
        resp *r = p->data;
        if (r->body_len + n < sizeof(r->body)) {
                memcpy(r->body + r->body_len, at, n);
                r->body_len += n;
                r->body[r->body_len] = 0;
        }
        return 0;
}

static int r_done(http_parser *p) {
        ((resp *)p->data)->done = true;
        http_parser_pause(p, 1);
        return 0;
}

static const http_parser_settings rsettings = { .on_header_field = r_field, .on_header_value = r_value,
                                                .on_headers_complete = r_headers, .on_body = r_body,
                                                .on_message_complete = r_done };

/* Sends a request and reads one whole response (as a client would). */
static resp *exchange(client *c, const char *req) {
        resp *r = calloc(1, sizeof(*r));
        http_parser p;
        assert_non_null(r);
        assert_false(c->handshake_failed);
        http_parser_init(&p, HTTP_RESPONSE);
        p.data = r;
        assert_int_equal(pol_stream_write_all(&c->s, req, strlen(req)), 0);
        while (!r->done) {
                if (c->off == c->len) {
                        ssize_t n = pol_stream_read(&c->s, c->buf, sizeof(c->buf));
                        assert_true(n >= 0);
                        c->off = 0;
                        c->len = (size_t)n;
                        if (n == 0) {
                                http_parser_execute(&p, &rsettings, NULL, 0);
                                break;
                        }
                }
                size_t used = http_parser_execute(&p, &rsettings, (char *)c->buf + c->off, c->len - c->off);
                c->off += used;
                if (HTTP_PARSER_ERRNO(&p) == HPE_PAUSED)
                        http_parser_pause(&p, 0);
                else
                        assert_int_equal(HTTP_PARSER_ERRNO(&p), HPE_OK);
        }
        assert_true(r->done);
        return r;
}

static bool client_at_eof(client *c) {
        uint8_t b;
        return c->off == c->len && pol_stream_read(&c->s, &b, 1) == 0;
}

static const char *seen_head(int i) {
        pthread_mutex_lock(&lock);
        const char *h = i < n_seen ? seen[i] : "";
        pthread_mutex_unlock(&lock);
        return h;
}

static int count_of(const char *hay, const char *needle) {
        int n = 0;
        for (const char *p = hay; (p = strcasestr(p, needle)); p++)
                n++;
        return n;
}

/* ---- tests ----------------------------------------------------------------------------- */

static void parse_head_rejects_ambiguous_and_waits_for_more(void **state) {
        char method[32], *target = NULL, *host = NULL;
        size_t hl = 0;
        const char ok[] = "GET /a?b=c HTTP/1.1\r\nHost: API.test\r\nX: y\r\n\r\nBODY";
        assert_int_equal(pol_http_parse_head((const uint8_t *)ok, strlen(ok), method, &target, &host, &hl), 0);
        assert_string_equal(method, "GET");
        assert_string_equal(target, "/a?b=c");
        assert_string_equal(host, "API.test");
        assert_int_equal(hl, strlen(ok) - 4);
        free(target);
        free(host);
        static const char *const bad[] = {
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
                "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: a\r\nX-Long: a\r\n b\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: a\r\nBad Name: b\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                "NOT A REQUEST\r\n\r\n",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                if (pol_http_parse_head((const uint8_t *)bad[i], strlen(bad[i]), method, &target, &host, &hl) !=
                    -EBADMSG)
                        fail_msg("accepted: %s", bad[i]);
        const char part[] = "GET / HTTP/1.1\r\nHost: a\r\n";
        assert_int_equal(pol_http_parse_head((const uint8_t *)part, strlen(part), method, &target, &host, &hl),
                         -EAGAIN);
        size_t big = 70 * 1024;
        char *huge = malloc(big);
        memcpy(huge, part, strlen(part));
        memset(huge + strlen(part), 'x', big - strlen(part));
        memcpy(huge + strlen(part), "X-Big: ", 7);
        assert_int_equal(pol_http_parse_head((const uint8_t *)huge, big, method, &target, &host, &hl), -E2BIG);
        free(huge);
}

static void leaf_has_host_san_and_is_cached(void **state) {
        X509 *a = NULL, *b = NULL, *ip = NULL;
        EVP_PKEY *ka = NULL, *kb = NULL, *kip = NULL;
        assert_int_equal(pol_proxy_ca_leaf(sess_ca, "api.test", &a, &ka), 0);
        assert_int_equal(pol_proxy_ca_leaf(sess_ca, "api.test", &b, &kb), 0);
        assert_ptr_equal(a, b); /* cached */
        assert_int_equal(X509_check_host(a, "api.test", 0, 0, NULL), 1);
        assert_int_equal(X509_check_host(a, "other.test", 0, 0, NULL), 0);
        assert_int_equal(pol_proxy_ca_leaf(sess_ca, "192.0.2.7", &ip, &kip), 0);
        assert_int_equal(X509_check_ip_asc(ip, "192.0.2.7", 0), 1);
        assert_int_equal(X509_check_host(ip, "192.0.2.7", 0, X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, NULL), 0);
        /* Chains to the session CA and is a server certificate only. */
        X509_STORE *st = X509_STORE_new();
        assert_int_equal(X509_STORE_load_file(st, sess_cert), 1);
        X509_STORE_CTX *ctx = X509_STORE_CTX_new();
        X509_STORE_CTX_init(ctx, st, a, NULL);
        X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER);
        assert_int_equal(X509_verify_cert(ctx), 1);
        assert_false(X509_check_ca(a));
        X509_STORE_CTX_free(ctx);
        X509_STORE_free(st);
        X509_free(a);
        X509_free(b);
        X509_free(ip);
        EVP_PKEY_free(ka);
        EVP_PKEY_free(kb);
        EVP_PKEY_free(kip);
}

static void first_matching_rule_applies_in_order(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET /first HTTP/1.1\r\nHost: api.test\r\n\r\n");
        if (r->status != 200)
                fail_msg("%d %s %s", r->status, r->body, events);
        free(r);
        r = exchange(c, "GET /fix HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 200);
        free(r);
        /* /first matches rules 0 and 1: only rule 0 applies. */
        assert_non_null(strstr(seen_head(0), "authorization: " SECRET "\r\n"));
        assert_null(strcasestr(seen_head(0), "x-rule"));
        assert_non_null(strstr(seen_head(1), "x-rule: second\r\n"));
        assert_null(strcasestr(seen_head(1), "authorization"));
        assert_int_equal(client_stop(c), 0);
}

static void transform_overwrites_every_existing_field(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET /over HTTP/1.1\r\nHost: api.test\r\nx-over: old\r\nX-OVER: older\r\n\r\n");
        assert_int_equal(r->status, 200);
        assert_int_equal(count_of(seen_head(0), "x-over:"), 1);
        assert_non_null(strstr(seen_head(0), "X-Over: new\r\n"));
        free(r);
        assert_int_equal(client_stop(c), 0);
}

static void unmatched_request_passes_unmodified_without_proxy_credentials(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET /plain?x=1 HTTP/1.1\r\nHost: api.test\r\nX-Custom: 1\r\n"
                              "Proxy-Authorization: Basic dXNlcjpwYXNz\r\nProxy-Connection: keep-alive\r\n\r\n");
        assert_int_equal(r->status, 200);
        const char *h = seen_head(0);
        assert_true(strncmp(h, "GET /plain?x=1 HTTP/1.1\r\n", 25) == 0);
        assert_non_null(strstr(h, "X-Custom: 1\r\n"));
        assert_null(strcasestr(h, "proxy-authorization"));
        assert_null(strcasestr(h, "proxy-connection"));
        assert_null(strcasestr(h, "authorization:"));
        assert_null(strcasestr(h, "x-rule"));
        free(r);
        assert_int_equal(client_stop(c), 0);
}

static void absolute_form_becomes_origin_form_and_must_name_the_host(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET https://API.test./plain?a=1 HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 200);
        assert_true(strncmp(seen_head(0), "GET /plain?a=1 HTTP/1.1\r\n", 25) == 0);
        free(r);
        r = exchange(c, "GET https://evil.test/plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 403);
        assert_true(client_at_eof(c));
        pthread_mutex_lock(&lock);
        assert_int_equal(n_seen, 1);
        pthread_mutex_unlock(&lock);
        free(r);
        client_stop(c);
}

static void keep_alive_requests_share_one_upstream_connection(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        for (int i = 0; i < 3; i++) {
                resp *r = exchange(c, "GET /plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
                assert_int_equal(r->status, 200);
                assert_null(strcasestr(r->head, "connection: close"));
                free(r);
        }
        pthread_mutex_lock(&lock);
        assert_int_equal(accepted, 1);
        assert_int_equal(n_seen, 3);
        pthread_mutex_unlock(&lock);
        assert_int_equal(client_stop(c), 0);
}

static void host_mismatch_on_second_request_is_refused(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET /plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 200);
        free(r);
        r = exchange(c, "GET /first HTTP/1.1\r\nHost: evil.test\r\n\r\n");
        assert_int_equal(r->status, 403);
        assert_non_null(strstr(r->head, "x-sandbox-policy: sbx-test; host=evil.test; layer=http"));
        assert_non_null(strstr(r->body, "retrying will not help"));
        assert_non_null(strstr(r->body, "sbx-test"));
        assert_null(strstr(r->body, "SECRET"));
        assert_true(client_at_eof(c));
        pthread_mutex_lock(&lock);
        assert_int_equal(n_seen, 1); /* the refused request never went upstream */
        assert_non_null(strstr(events, "host-mismatch|"));
        pthread_mutex_unlock(&lock);
        free(r);
        client_stop(c);
}

static void echoed_secret_is_scrubbed_in_headers_and_bodies(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET /first HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_non_null(strstr(seen_head(0), SECRET)); /* upstream got it */
        assert_null(strstr(r->body, "sk-SECRET"));
        assert_null(strstr(r->head, "sk-SECRET"));
        assert_non_null(strstr(r->body, "authorization: ***************************\r\n"));
        assert_non_null(strstr(r->head, "x-echo-auth: ***************************"));
        free(r);
        /* Chunked stays chunked, and 5-byte chunks do not hide the value. */
        r = exchange(c, "GET /chunked HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_true(r->chunked);
        assert_null(strstr(r->body, "sk-SECRET"));
        assert_non_null(strstr(r->body, "authorization: ***************************\r\n"));
        assert_non_null(strstr(r->body, "GET /chunked HTTP/1.1\r\n"));
        free(r);
        assert_int_equal(client_stop(c), 0);
}

static void echoed_secret_is_scrubbed_in_escaped_and_encoded_forms(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET /forms HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 200);
        assert_non_null(strstr(seen_head(0), "x-api-key: " ODD_VALUE "\r\n")); /* upstream got it */
        /* Each line is masked over the whole encoded form, keeping its length. */
        char *line = r->body;
        for (size_t i = 0; i < sizeof(odd_forms) / sizeof(odd_forms[0]); i++) {
                const char *f = odd_forms[i];
                size_t l = strcspn(line, "\n");
                assert_int_equal(l, strlen(f));
                if (f[0] == '{')
                        assert_true(strncmp(line, "{\"key\":\"", 8) == 0 && strncmp(line + l - 2, "\"}", 2) == 0);
                if (f[0] == '?')
                        assert_true(strncmp(line, "?k=", 3) == 0 && strncmp(line + l - 4, "&x=1", 4) == 0);
                assert_null(memmem(line, l, "0123456789", 10));
                line += l + 1;
        }
        free(r);
        assert_int_equal(client_stop(c), 0);
}

/* The client's chunk lines never reach upstream: an extension with a bare
 * LF (which a lenient server might end the line at, reading "GET /x" as
 * a second request) and a trailer are replaced by the proxy's own framing. */
static void chunked_request_body_is_reframed(void **state) {
        target_port = raw_port;
        client *c = client_start(false, NULL, NULL);
        target_port = 0;
        resp *r = exchange(c, "POST /plain HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "3;a\nGET /x HTTP/1.1\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n");
        assert_int_equal(r->status, 200);
        pthread_mutex_lock(&lock);
        assert_string_equal(raw_body, "3\r\nabc\r\n0\r\n\r\n");
        assert_int_equal(count_of(seen[0], "transfer-encoding: chunked\r\n"), 1);
        pthread_mutex_unlock(&lock);
        free(r);
        assert_int_equal(client_stop(c), 0);
}

static void overflowing_chunk_size_gets_400(void **state) {
        target_port = raw_port;
        client *c = client_start(false, NULL, NULL);
        target_port = 0;
        resp *r = exchange(c, "POST /plain HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "ffffffffffffffffff1\r\nabc\r\n0\r\n\r\n");
        assert_int_equal(r->status, 400);
        assert_true(client_at_eof(c));
        pthread_mutex_lock(&lock);
        assert_non_null(strstr(events, "framing|"));
        assert_null(strstr(events, "upstream-"));
        pthread_mutex_unlock(&lock);
        free(r);
        client_stop(c);
}

/* A body sent after a complete response to HEAD puts the upstream
 * connection out of step: the next request goes on a new connection, once. */
static void upstream_bytes_after_a_response_close_the_connection(void **state) {
        target_port = raw_port;
        client *c = client_start(false, NULL, NULL);
        target_port = 0;
        expect_no_body = true;
        resp *r = exchange(c, "HEAD /plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
        expect_no_body = false;
        assert_int_equal(r->status, 200);
        free(r);
        char b;
        assert_int_equal(write(raw_go[1], "x", 1), 1);
        assert_int_equal(read(raw_done[0], &b, 1), 1); /* the stray body is on its way */
        r = exchange(c, "GET /plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 200);
        assert_string_equal(r->body, "ok");
        free(r);
        assert_int_equal(client_stop(c), 0);
        pthread_mutex_lock(&lock);
        int gets = 0;
        for (int i = 0; i < n_seen; i++)
                gets += strncmp(seen[i], "GET ", 4) == 0;
        assert_int_equal(gets, 1);
        pthread_mutex_unlock(&lock);
}

static void method_query_and_header_matchers_all_apply(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "POST /p?z=1&q=a+b HTTP/1.1\r\nHost: api.test\r\nx-kind: token\r\n"
                              "Content-Length: 5\r\n\r\nhello");
        assert_int_equal(r->status, 200);
        assert_non_null(strstr(r->body, "BODYLEN=5\n"));
        assert_non_null(strstr(seen_head(0), "x-matched: post-rule\r\n"));
        free(r);
        r = exchange(c, "POST /p?q=a%20b HTTP/1.1\r\nHost: api.test\r\nX-Kind: nope\r\nContent-Length: 0\r\n\r\n");
        assert_null(strstr(seen_head(1), "x-matched"));
        free(r);
        r = exchange(c, "GET /p?q=a%20b HTTP/1.1\r\nHost: api.test\r\nX-Kind: tok\r\n\r\n");
        assert_null(strstr(seen_head(2), "x-matched"));
        free(r);
        assert_int_equal(client_stop(c), 0);
}

static void forward_url_reaches_target_with_forwarded_headers(void **state) {
        if (!have_netns)
                skip();
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "POST /fwd/x?y=1 HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\n\r\nabc");
        assert_int_equal(r->status, 200);
        assert_non_null(strstr(r->body, "BODYLEN=3\n"));
        const char *h = seen_head(0);
        char want[128];
        assert_true(strncmp(h, "POST /base/fwd/x?y=1 HTTP/1.1\r\n", 31) == 0);
        snprintf(want, sizeof(want), "host: %s:%u\r\n", FWD_ADDR, echo_port);
        assert_non_null(strstr(h, want));
        assert_non_null(strstr(h, "x-sandbox-forwarded-host: api.test\r\n"));
        assert_non_null(strstr(h, "x-sandbox-forwarded-scheme: https\r\n"));
        snprintf(want, sizeof(want), "x-sandbox-forwarded-port: %u\r\n", echo_port);
        assert_non_null(strstr(h, want));
        assert_non_null(strstr(h, "x-sandbox-forwarded-path: /fwd/x?y=1\r\n"));
        free(r);
        assert_int_equal(client_stop(c), 0);
}

static void untrusted_upstream_certificate_gets_502(void **state) {
        client *c = client_start(true, up_untrusting, NULL);
        resp *r = exchange(c, "GET /first HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 502);
        assert_non_null(strstr(r->body, "certificate"));
        pthread_mutex_lock(&lock);
        assert_non_null(strstr(events, "upstream-tls|"));
        assert_int_equal(n_seen, 0);
        pthread_mutex_unlock(&lock);
        free(r);
        client_stop(c);
}

static int here_ns = -1, far_ns = -1;

/* A TCP socket in the upstreams' namespace. */
static int far_socket(void) {
        assert_int_equal(setns(far_ns, CLONE_NEWNET), 0);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(setns(here_ns, CLONE_NEWNET), 0);
        return fd;
}

static uint16_t bound_port(int fd) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
        socklen_t sl = sizeof(sa);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
        return ntohs(sa.sin_port);
}

static void refused_upstream_gets_502_and_silent_one_504(void **state) {
        /* Nothing listens on a port bound but never listened on. */
        int closed = far_socket();
        target_port = bound_port(closed);
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "GET /plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 502);
        assert_non_null(strstr(events, "upstream-unreachable|"));
        free(r);
        client_stop(c);
        close(closed);
        /* A listener that never accepts: TCP connects (the kernel's
         * backlog), TLS never answers. */
        int silent = far_socket();
        target_port = bound_port(silent);
        assert_int_equal(listen(silent, 4), 0);
        io_timeout_ms = 300;
        c = client_start(true, up_trusting, NULL);
        io_timeout_ms = 5000;
        r = exchange(c, "GET /plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 504);
        assert_non_null(strstr(events, "upstream-timeout|"));
        free(r);
        client_stop(c);
        close(silent);
        target_port = 0;
}

static void transform_over_plaintext_is_refused(void **state) {
        client *c = client_start(false, up_trusting, NULL);
        resp *r = exchange(c, "GET /first HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 403);
        assert_non_null(strstr(r->body, "https"));
        assert_null(strstr(r->body, "SECRET"));
        pthread_mutex_lock(&lock);
        assert_non_null(strstr(events, "transform-needs-tls|"));
        assert_non_null(strstr(events, "allow[\"api.test\"][0]"));
        assert_non_null(strstr(events, "|rule=allow[\"api.test\"][0]\n"));
        assert_null(strstr(events, "SECRET"));
        assert_int_equal(n_seen, 0);
        pthread_mutex_unlock(&lock);
        free(r);
        client_stop(c);
}

static void ambiguous_framing_gets_400(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        resp *r = exchange(c, "POST /plain HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        assert_int_equal(r->status, 400);
        assert_true(client_at_eof(c));
        pthread_mutex_lock(&lock);
        assert_int_equal(n_seen, 0);
        pthread_mutex_unlock(&lock);
        free(r);
        client_stop(c);
}

static void large_body_streams_through(void **state) {
        client *c = client_start(true, up_trusting, NULL);
        size_t n = 8 << 20;
        char *big = malloc(n);
        memset(big, 'b', n);
        char head[128];
        snprintf(head, sizeof(head), "PUT /plain HTTP/1.1\r\nHost: api.test\r\nContent-Length: %zu\r\n\r\n", n);
        assert_int_equal(pol_stream_write_all(&c->s, head, strlen(head)), 0);
        assert_int_equal(pol_stream_write_all(&c->s, big, n - 10), 0);
        free(big);
        resp *r = exchange(c, "bbbbbbbbbb");
        assert_non_null(strstr(r->body, "BODYLEN=8388608\n"));
        free(r);
        assert_int_equal(client_stop(c), 0);
}

static void sni_naming_another_host_gets_no_certificate(void **state) {
        client_sni = "other.test";
        client *c = client_start(true, up_trusting, NULL);
        client_sni = "api.test";
        assert_true(c->handshake_failed);
        ERR_clear_error();
        assert_int_equal(client_stop(c), -ECONNABORTED);
}

static void client_offering_only_h2_falls_back_to_http11(void **state) {
        client *c = client_start(true, up_trusting, "\x02h2");
        const unsigned char *sel = NULL;
        unsigned len = 0;
        assert_false(c->handshake_failed);
        SSL_get0_alpn_selected(c->s.ssl, &sel, &len);
        assert_int_equal(len, 0);
        resp *r = exchange(c, "GET /plain HTTP/1.1\r\nHost: api.test\r\n\r\n");
        assert_int_equal(r->status, 200);
        free(r);
        assert_int_equal(client_stop(c), 0);
}

/* ---- setup ------------------------------------------------------------------------------ */

/* Two private network namespaces: here (lo up; the proxy) and far (the
 * upstreams, on UPSTREAM_ADDR and FWD_ADDR), joined by a veth. Both belong
 * to this process alone and vanish with it. */
static int run_cmd(const char *fmt, ...) {
        char cmd[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        return system(cmd) == 0 ? 0 : -1;
}

static bool private_netns(void) {
        if (geteuid() != 0 || unshare(CLONE_NEWNET) < 0 || (here_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
                return false;
        if (run_cmd("ip link set lo up") < 0 || unshare(CLONE_NEWNET) < 0 ||
            (far_ns = open("/proc/self/ns/net", O_RDONLY)) < 0 || run_cmd("ip link set lo up") < 0 ||
            setns(here_ns, CLONE_NEWNET) < 0)
                return false;
        return run_cmd("ip link add thx0 type veth peer name thx1 netns /proc/self/fd/%d", far_ns) == 0 &&
               run_cmd("ip addr add 198.18.0.1/24 dev thx0 && ip link set thx0 up && "
                       "ip route add %s/32 dev thx0", FWD_ADDR) == 0 &&
               run_cmd("nsenter --net=/proc/self/fd/%d sh -c 'ip addr add %s/24 dev thx1 && "
                       "ip addr add %s/32 dev thx1 && ip link set thx1 up'", far_ns, UPSTREAM_ADDR, FWD_ADDR) == 0;
}

static int setup(void **state) {
        char key[256], upkey[256];
        sb_error *err = NULL;
        if (!mkdtemp(tmpdir))
                return -1;
        snprintf(sess_cert, sizeof(sess_cert), "%s/ca.pem", tmpdir);
        snprintf(key, sizeof(key), "%s/ca.key", tmpdir);
        snprintf(up_cert, sizeof(up_cert), "%s/up.pem", tmpdir);
        snprintf(upkey, sizeof(upkey), "%s/up.key", tmpdir);
        if (pol_proxy_ca_generate(sess_cert, key, "test", &err) < 0 || pol_proxy_ca_load(sess_cert, key, &sess_ca, &err) < 0 ||
            pol_proxy_ca_generate(up_cert, upkey, "upstream", &err) < 0 ||
            pol_proxy_ca_load(up_cert, upkey, &up_ca, &err) < 0 ||
            pol_proxy_upstream_ctx_new(up_cert, &up_trusting, &err) < 0 ||
            pol_proxy_upstream_ctx_new(NULL, &up_untrusting, &err) < 0) {
                fprintf(stderr, "setup: %s\n", err ? err->message : "?");
                sb_error_free(err);
                return -1;
        }
        cJSON *j = cJSON_Parse(policy_json);
        if (!j || pol_policy_parse(j, &policy, &err) < 0) {
                fprintf(stderr, "policy: %s\n", err ? err->message : "?");
                return -1;
        }
        cJSON_Delete(j);
        echo_ctx = SSL_CTX_new(TLS_server_method());
        SSL_CTX_set_tlsext_servername_callback(echo_ctx, echo_sni);
        if (!have_netns) {
                fprintf(stderr, "setup: needs root for its private network namespaces\n");
                return -1;
        }
        echo_fd = far_socket();
        struct sockaddr_in sa = { .sin_family = AF_INET };
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        socklen_t sl = sizeof(sa);
        if (echo_fd < 0 || bind(echo_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(echo_fd, 16) < 0 ||
            getsockname(echo_fd, (struct sockaddr *)&sa, &sl) < 0)
                return -1;
        echo_port = ntohs(sa.sin_port);
        /* The forward rule (index 3) targets the echo server on FWD_ADDR; the
         * parser refuses private addresses in a policy, so it is set here. */
        pol_rule *fw = (pol_rule *)&policy->domains[0].rules[3];
        free(fw->forward_host);
        fw->forward_host = strdup(FWD_ADDR);
        fw->forward_port = echo_port;
        raw_fd = far_socket();
        sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
        sl = sizeof(sa);
        if (raw_fd < 0 || bind(raw_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(raw_fd, 16) < 0 ||
            getsockname(raw_fd, (struct sockaddr *)&sa, &sl) < 0 || pipe2(raw_go, O_CLOEXEC) < 0 ||
            pipe2(raw_done, O_CLOEXEC) < 0 || pthread_create(&raw_thread, NULL, raw_main, NULL) != 0)
                return -1;
        raw_port = ntohs(sa.sin_port);
        return pthread_create(&echo_thread, NULL, echo_main, NULL) == 0 ? 0 : -1;
}

static int teardown(void **state) {
        shutdown(echo_fd, SHUT_RDWR);
        pthread_join(echo_thread, NULL);
        shutdown(raw_fd, SHUT_RDWR);
        pthread_join(raw_thread, NULL);
        for (int i = 0; i < n_conn_threads; i++)
                pthread_join(conn_threads[i], NULL);
        close(echo_fd);
        close(raw_fd);
        for (int i = 0; i < 2; i++) {
                close(raw_go[i]);
                close(raw_done[i]);
        }
        SSL_CTX_free(echo_ctx);
        SSL_CTX_free(up_trusting);
        SSL_CTX_free(up_untrusting);
        pol_proxy_ca_free(sess_ca);
        pol_proxy_ca_free(up_ca);
        pol_policy_free(policy);
        core_rm_rf(tmpdir);
        return 0;
}

int main(void) {
        signal(SIGPIPE, SIG_IGN);
        have_netns = private_netns();
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(parse_head_rejects_ambiguous_and_waits_for_more),
                cmocka_unit_test(leaf_has_host_san_and_is_cached),
                cmocka_unit_test(first_matching_rule_applies_in_order),
                cmocka_unit_test(transform_overwrites_every_existing_field),
                cmocka_unit_test(unmatched_request_passes_unmodified_without_proxy_credentials),
                cmocka_unit_test(absolute_form_becomes_origin_form_and_must_name_the_host),
                cmocka_unit_test(keep_alive_requests_share_one_upstream_connection),
                cmocka_unit_test(host_mismatch_on_second_request_is_refused),
                cmocka_unit_test(echoed_secret_is_scrubbed_in_headers_and_bodies),
                cmocka_unit_test(echoed_secret_is_scrubbed_in_escaped_and_encoded_forms),
                cmocka_unit_test(chunked_request_body_is_reframed),
                cmocka_unit_test(overflowing_chunk_size_gets_400),
                cmocka_unit_test(upstream_bytes_after_a_response_close_the_connection),
                cmocka_unit_test(method_query_and_header_matchers_all_apply),
                cmocka_unit_test(forward_url_reaches_target_with_forwarded_headers),
                cmocka_unit_test(untrusted_upstream_certificate_gets_502),
                cmocka_unit_test(refused_upstream_gets_502_and_silent_one_504),
                cmocka_unit_test(transform_over_plaintext_is_refused),
                cmocka_unit_test(ambiguous_framing_gets_400),
                cmocka_unit_test(large_body_streams_through),
                cmocka_unit_test(sni_naming_another_host_gets_no_certificate),
                cmocka_unit_test(client_offering_only_h2_falls_back_to_http11),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
