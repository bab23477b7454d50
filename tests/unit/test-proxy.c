/* Unit tests for policy/proxy.c, the front of the egress proxy (DESIGN §5.1
 * rules 3 and 7, §5.2), on loopback only: pol_proxy_serve() runs in a thread
 * on one accepted TCP connection; upstreams are listeners on 198.18.0.x in a
 * private network namespace behind a veth; a
 * fake resolver written here with ldns answers fixed A records. The policy
 * names the test hosts and admits 198.18.0.0/15 as a subnet (loopback is
 * otherwise forbidden). ClientHellos are real ones, written by an OpenSSL
 * client into a memory BIO. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <ldns/ldns.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "policy/policy.h"
#include "policy/proxy.h"

#define TIMEOUT_MS 5000

static const uint8_t alert_access_denied[] = { 0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31 };

/* ---- the fake resolver: a.test -> 198.18.0.2, b.test and evil.test -> 198.18.0.3 ---- */

static int dns_fd = -1, dns_stop[2] = { -1, -1 };
static pthread_t dns_thread;
static struct sockaddr_in dns_addr;
static int dns_queries;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const char *zone_lookup(const char *qname) {
        static const char *zone[][2] = {
                { "a.test.", "198.18.0.2" },
                { "b.test.", "198.18.0.3" },
                { "evil.test.", "198.18.0.3" },
                { "rules.test.", "198.18.0.2" },
                { "private.test.", "10.1.2.3" },
        };
        for (size_t i = 0; i < sizeof(zone) / sizeof(zone[0]); i++)
                if (strcasecmp(zone[i][0], qname) == 0)
                        return zone[i][1];
        return NULL;
}

static void dns_answer(const uint8_t *buf, size_t n, const struct sockaddr_storage *from, socklen_t flen) {
        ldns_pkt *q = NULL, *a = ldns_pkt_new();
        uint8_t *wire = NULL;
        size_t wlen = 0;
        if (ldns_wire2pkt(&q, buf, n) != LDNS_STATUS_OK || ldns_pkt_qdcount(q) != 1) {
                ldns_pkt_free(q);
                ldns_pkt_free(a);
                return;
        }
        ldns_rr *question = ldns_rr_list_rr(ldns_pkt_question(q), 0);
        char *qname = ldns_rdf2str(ldns_rr_owner(question));
        const char *addr = zone_lookup(qname);
        ldns_pkt_set_id(a, ldns_pkt_id(q));
        ldns_pkt_set_qr(a, true);
        ldns_pkt_set_rd(a, true);
        ldns_pkt_set_ra(a, true);
        ldns_pkt_push_rr(a, LDNS_SECTION_QUESTION, ldns_rr_clone(question));
        if (addr) {
                char text[300];
                ldns_rr *rr = NULL;
                snprintf(text, sizeof(text), "%s 60 IN A %s", qname, addr);
                if (ldns_rr_new_frm_str(&rr, text, 60, NULL, NULL) == LDNS_STATUS_OK)
                        ldns_pkt_push_rr(a, LDNS_SECTION_ANSWER, rr);
        } else
                ldns_pkt_set_rcode(a, LDNS_RCODE_NXDOMAIN);
        if (ldns_pkt2wire(&wire, a, &wlen) == LDNS_STATUS_OK)
                (void)sendto(dns_fd, wire, wlen, 0, (const struct sockaddr *)from, flen);
        pthread_mutex_lock(&lock);
        dns_queries++;
        pthread_mutex_unlock(&lock);
        free(wire);
        free(qname);
        ldns_pkt_free(q);
        ldns_pkt_free(a);
}

static void *dns_main(void *arg) {
        uint8_t buf[4096];
        for (;;) {
                struct pollfd p[2] = { { .fd = dns_fd, .events = POLLIN }, { .fd = dns_stop[0], .events = POLLIN } };
                if (poll(p, 2, -1) < 0 || p[1].revents)
                        return NULL;
                struct sockaddr_storage from;
                socklen_t flen = sizeof(from);
                ssize_t n = recvfrom(dns_fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &flen);
                if (n > 0)
                        dns_answer(buf, (size_t)n, &from, flen);
        }
}

/* ---- the proxy under test ---- */

static pol_policy *policy;
static pol_proxy_env env;

typedef struct seen_event {
        int count;
        char host[256];
        char reason[32];
        uint16_t port;
} seen_event;
static seen_event events;

static void on_event(const pol_proxy_event *ev, void *userdata) {
        pthread_mutex_lock(&lock);
        events.count++;
        snprintf(events.host, sizeof(events.host), "%s", ev->host);
        snprintf(events.reason, sizeof(events.reason), "%s", ev->reason);
        events.port = ev->port;
        pthread_mutex_unlock(&lock);
}

static pol_policy *policy_from(const char *json) {
        cJSON *j = cJSON_Parse(json);
        pol_policy *p = NULL;
        sb_error *err = NULL;
        assert_non_null(j);
        if (pol_policy_parse(j, &p, &err) < 0)
                fail_msg("policy %s: %s", json, err ? err->message : "?");
        cJSON_Delete(j);
        return p;
}

/* The two namespaces: `here_ns` (tests, proxy, netd) and `far_ns` (the
 * upstreams). */
static int here_ns = -1, far_ns = -1;

static int run_cmd(const char *fmt, ...) {
        char cmd[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        int r = system(cmd);
        return r == 0 ? 0 : -1;
}

/* Both namespaces are the process's own (unshare), so they vanish with it,
 * even on a crash: nothing to clean up on the host. */
static int world_setup(void) {
        if (unshare(CLONE_NEWNET) < 0 || (here_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
                return -1;
        if (run_cmd("ip link set lo up") < 0 || unshare(CLONE_NEWNET) < 0 ||
            (far_ns = open("/proc/self/ns/net", O_RDONLY)) < 0 || run_cmd("ip link set lo up") < 0 ||
            setns(here_ns, CLONE_NEWNET) < 0)
                return -1;
        /* far_ns is inherited by ip(8) (no O_CLOEXEC), which names it by path. */
        if (run_cmd("ip link add tpx0 type veth peer name tpx1 netns /proc/self/fd/%d", far_ns) < 0 ||
            run_cmd("ip addr add 198.18.0.1/24 dev tpx0 && ip link set tpx0 up") < 0 ||
            run_cmd("nsenter --net=/proc/self/fd/%d sh -c 'ip addr add 198.18.0.2/24 dev tpx1 && "
                    "ip addr add 198.18.0.3/24 dev tpx1 && ip addr add 198.18.0.9/24 dev tpx1 && "
                    "ip link set tpx1 up'", far_ns) < 0)
                return -1;
        return 0;
}

static int listen_on(const char *ip, uint16_t *ret_port) {
        struct sockaddr_in a = { .sin_family = AF_INET };
        socklen_t alen = sizeof(a);
        /* Upstreams live on the far side: the socket stays in the namespace
         * it was made in. */
        bool far = strncmp(ip, "198.18.0.", 9) == 0 && strcmp(ip, "198.18.0.1") != 0;
        assert_int_equal(setns(far ? far_ns : here_ns, CLONE_NEWNET), 0);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(setns(here_ns, CLONE_NEWNET), 0);
        assert_true(fd >= 0);
        assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(fd, 8), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
        *ret_port = ntohs(a.sin_port);
        return fd;
}

static bool readable(int fd, int ms) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return poll(&p, 1, ms) == 1;
}

typedef struct proxy_run {
        pthread_t thread;
        int served_fd;
        bool has_orig;
        struct sockaddr_storage orig;
} proxy_run;

static void *proxy_main(void *arg) {
        proxy_run *pr = arg;
        pol_proxy_serve(&env, pr->served_fd, pr->has_orig ? &pr->orig : NULL);
        return NULL;
}

/* Connects a client to a fresh proxy connection. orig_ip NULL: the client
 * addresses the proxy (explicit mode); else it was "redirected" from
 * orig_ip:orig_port. Returns the client's socket. */
static int proxy_start(proxy_run *pr, const char *orig_ip, uint16_t orig_port) {
        uint16_t port;
        int l = listen_on("127.0.0.1", &port);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        assert_int_equal(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
        (void)setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        memset(pr, 0, sizeof(*pr));
        pr->served_fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        assert_true(pr->served_fd >= 0);
        close(l);
        if (orig_ip) {
                struct sockaddr_in *o = (struct sockaddr_in *)&pr->orig;
                o->sin_family = AF_INET;
                o->sin_port = htons(orig_port);
                inet_pton(AF_INET, orig_ip, &o->sin_addr);
                pr->has_orig = true;
        }
        memset(&events, 0, sizeof(events));
        assert_int_equal(pthread_create(&pr->thread, NULL, proxy_main, pr), 0);
        return c;
}

static void proxy_finish(proxy_run *pr, int client) {
        close(client);
        pthread_join(pr->thread, NULL);
}

/* Reads until EOF (or size), bounded. */
static size_t read_all(int fd, uint8_t *buf, size_t size) {
        size_t n = 0;
        while (n < size && readable(fd, TIMEOUT_MS)) {
                ssize_t k = read(fd, buf + n, size - n);
                if (k <= 0)
                        break;
                n += (size_t)k;
        }
        return n;
}

/* Reads one response head (up to the blank line) byte by byte, so that
 * nothing after it is consumed. */
static void read_head(int fd, char *buf, size_t size) {
        size_t n = 0;
        while (n + 1 < size && (n < 4 || memcmp(buf + n - 4, "\r\n\r\n", 4) != 0)) {
                if (!readable(fd, TIMEOUT_MS) || read(fd, buf + n, 1) != 1)
                        break;
                n++;
        }
        buf[n] = '\0';
}

static void send_str(int fd, const char *s) {
        assert_int_equal(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

/* A real ClientHello as OpenSSL's client writes it, with SNI when given. */
static uint8_t *client_hello(const char *sni, size_t *ret_len) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        SSL *ssl = SSL_new(ctx);
        BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
        char *data = NULL;
        SSL_set_bio(ssl, rb, wb);
        if (sni)
                assert_int_equal(SSL_set_tlsext_host_name(ssl, sni), 1);
        SSL_set_connect_state(ssl);
        assert_int_equal(SSL_do_handshake(ssl), -1); /* wants the server's answer */
        long n = BIO_get_mem_data(wb, &data);
        assert_true(n > 5 && data[0] == 0x16);
        uint8_t *copy = malloc((size_t)n);
        memcpy(copy, data, (size_t)n);
        *ret_len = (size_t)n;
        SSL_free(ssl);
        SSL_CTX_free(ctx);
        return copy;
}

/* ---- an upstream that takes one connection, reads to EOF, answers ---- */

typedef struct upstream {
        int listener;
        uint16_t port;
        pthread_t thread;
        uint8_t got[32768];
        size_t n_got;
        bool accepted;
} upstream;

static void *upstream_main(void *arg) {
        upstream *u = arg;
        static const char reply[] = "reply from upstream";
        if (!readable(u->listener, TIMEOUT_MS))
                return NULL;
        int fd = accept4(u->listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return NULL;
        u->accepted = true;
        /* Reading to EOF proves the client's half-close went through. */
        u->n_got = read_all(fd, u->got, sizeof(u->got));
        (void)send(fd, reply, strlen(reply), MSG_NOSIGNAL);
        close(fd);
        return NULL;
}

static void upstream_start(upstream *u, const char *ip) {
        memset(u, 0, sizeof(*u));
        u->listener = listen_on(ip, &u->port);
        assert_int_equal(pthread_create(&u->thread, NULL, upstream_main, u), 0);
}

/* Upstreams that must see nothing: a listener that is never accepted from
 * here; any connection sits in its backlog and shows up as readable. */
static bool upstream_saw_connection(int listener) {
        return readable(listener, 0);
}

static void upstream_join(upstream *u) {
        pthread_join(u->thread, NULL);
        close(u->listener);
}

/* Sends bytes[sent..n], half-closes, and expects the upstream's reply back
 * and bytes[0..n] to have arrived upstream unchanged. */
static void expect_tunnel_rest(int c, upstream *u, const uint8_t *bytes, size_t sent, size_t n) {
        uint8_t back[256];
        assert_int_equal(send(c, bytes + sent, n - sent, MSG_NOSIGNAL), (ssize_t)(n - sent));
        assert_int_equal(shutdown(c, SHUT_WR), 0);
        size_t k = read_all(c, back, sizeof(back) - 1);
        back[k] = 0;
        assert_string_equal((char *)back, "reply from upstream");
        upstream_join(u);
        assert_true(u->accepted);
        assert_int_equal(u->n_got, n);
        assert_memory_equal(u->got, bytes, n);
}

static void expect_tunnel(int c, upstream *u, const uint8_t *bytes, size_t n) {
        expect_tunnel_rest(c, u, bytes, 0, n);
}

static void expect_alert(int c) {
        uint8_t buf[64];
        size_t n = read_all(c, buf, sizeof(buf));
        assert_int_equal(n, sizeof(alert_access_denied));
        assert_memory_equal(buf, alert_access_denied, n);
}

/* ---- tests ---- */

static void test_transparent_tls_with_allowed_sni_is_spliced_both_ways(void **state) {
        upstream u;
        proxy_run pr;
        size_t n;
        upstream_start(&u, "198.18.0.2");
        /* The original destination is an address nobody listens on and
         * no subnet admits: the proxy dials what it resolved for the SNI,
         * not what the client picked. */
        int c = proxy_start(&pr, "192.0.2.9", u.port);
        uint8_t *hello = client_hello("a.test", &n);
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        assert_int_equal(events.count, 0);
        free(hello);
}

static void test_transparent_tls_without_sni_gets_the_alert(void **state) {
        proxy_run pr;
        size_t n;
        int c = proxy_start(&pr, "10.1.2.3", 443);
        uint8_t *hello = client_hello(NULL, &n);
        assert_int_equal(send(c, hello, n, MSG_NOSIGNAL), (ssize_t)n);
        expect_alert(c);
        proxy_finish(&pr, c);
        assert_int_equal(events.count, 1);
        assert_string_equal(events.reason, "missing-sni");
        free(hello);
}

static void test_transparent_tls_without_sni_to_an_allowed_subnet_is_spliced_to_it(void **state) {
        upstream u;
        proxy_run pr;
        size_t n;
        upstream_start(&u, "198.18.0.2");
        int c = proxy_start(&pr, "198.18.0.2", u.port);
        uint8_t *hello = client_hello(NULL, &n);
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        free(hello);
}

static void test_transparent_tls_with_denied_sni_gets_the_alert_without_dns(void **state) {
        proxy_run pr;
        size_t n;
        pthread_mutex_lock(&lock);
        int before = dns_queries;
        pthread_mutex_unlock(&lock);
        int c = proxy_start(&pr, "192.0.2.3", 443);
        uint8_t *hello = client_hello("EVIL.test", &n);
        assert_int_equal(send(c, hello, n, MSG_NOSIGNAL), (ssize_t)n);
        expect_alert(c);
        proxy_finish(&pr, c);
        assert_string_equal(events.reason, "not-allowed");
        assert_string_equal(events.host, "evil.test");
        assert_int_equal(dns_queries, before);
        free(hello);
}

static void test_sni_resolving_to_a_forbidden_address_gets_the_alert(void **state) {
        proxy_run pr;
        size_t n;
        int c = proxy_start(&pr, "192.0.2.2", 443);
        uint8_t *hello = client_hello("private.test", &n);
        assert_int_equal(send(c, hello, n, MSG_NOSIGNAL), (ssize_t)n);
        expect_alert(c);
        proxy_finish(&pr, c);
        assert_string_equal(events.reason, "not-allowed");
        free(hello);
}

static void test_host_with_rules_and_no_ca_is_refused(void **state) {
        proxy_run pr;
        size_t n;
        int c = proxy_start(&pr, "198.18.0.2", 443);
        uint8_t *hello = client_hello("rules.test", &n);
        assert_int_equal(send(c, hello, n, MSG_NOSIGNAL), (ssize_t)n);
        expect_alert(c);
        proxy_finish(&pr, c);
        assert_string_equal(events.host, "rules.test");
        free(hello);
}

/* DESIGN §5.1 rule 4: an address in subnets.allow is admitted whatever
 * name the connection carries. A transparent connection to one, with an
 * SNI the policy does not allow, goes to that address, without a lookup
 * of the name. */
static void test_transparent_tls_to_an_allowed_subnet_with_a_denied_sni_goes_to_it(void **state) {
        upstream u;
        proxy_run pr;
        size_t n;
        pthread_mutex_lock(&lock);
        int before = dns_queries;
        pthread_mutex_unlock(&lock);
        upstream_start(&u, "198.18.0.9");
        int c = proxy_start(&pr, "198.18.0.9", u.port);
        uint8_t *hello = client_hello("evil.test", &n);
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        assert_int_equal(events.count, 0);
        assert_int_equal(dns_queries, before);
        free(hello);
}

/* An allowed name whose own addresses are elsewhere: the connection still
 * goes to the admitted address the client dialled. */
static void test_transparent_tls_to_an_allowed_subnet_with_an_allowed_sni_goes_to_that_address(void **state) {
        upstream u;
        proxy_run pr;
        size_t n;
        upstream_start(&u, "198.18.0.9");
        int c = proxy_start(&pr, "198.18.0.9", u.port);
        uint8_t *hello = client_hello("a.test", &n); /* a.test resolves to 198.18.0.2 */
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        assert_int_equal(events.count, 0);
        free(hello);
}

/* CONNECT to an admitted address literal, then a ClientHello naming a
 * host the policy does not allow: tunnelled to the address. */
static void test_connect_to_an_allowed_subnet_address_then_a_denied_sni_is_tunnelled(void **state) {
        upstream u;
        proxy_run pr;
        char head[1024], req[128];
        size_t n;
        upstream_start(&u, "198.18.0.9");
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT 198.18.0.9:%u HTTP/1.1\r\n\r\n", u.port);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        uint8_t *hello = client_hello("evil.test", &n);
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        assert_int_equal(events.count, 0);
        free(hello);
}

/* subnets.deny still beats subnets.allow: the SNI check applies again, and
 * the name the policy does not allow is refused. */
static void test_subnet_deny_inside_an_allowed_subnet_still_refuses_a_denied_sni(void **state) {
        proxy_run pr;
        size_t n;
        uint16_t port;
        int l = listen_on("198.18.0.9", &port);
        pol_policy *p = policy_from("{\"allow\": [\"a.test\"],"
                                    " \"subnets\": {\"allow\": [\"198.18.0.0/15\"], \"deny\": [\"198.18.0.9/32\"]}}");
        env.policy = p;
        int c = proxy_start(&pr, "198.18.0.9", port);
        uint8_t *hello = client_hello("evil.test", &n);
        assert_int_equal(send(c, hello, n, MSG_NOSIGNAL), (ssize_t)n);
        expect_alert(c);
        proxy_finish(&pr, c);
        env.policy = policy;
        pol_policy_free(p);
        assert_string_equal(events.reason, "not-allowed");
        assert_false(upstream_saw_connection(l));
        close(l);
        free(hello);
}

/* Waits until the proxy asks the kernel for `lowat` bytes on its socket,
 * i.e. it has seen the part sent so far and waits for more. This watches the
 * proxy's real state; it is not a timed pause. */
static void wait_for_lowat(const proxy_run *pr, int lowat) {
        for (int i = 0; i < TIMEOUT_MS; i++) {
                int v = 0;
                socklen_t l = sizeof(v);
                assert_int_equal(getsockopt(pr->served_fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l), 0);
                if (v == lowat)
                        return;
                (void)poll(NULL, 0, 1);
        }
        fail_msg("the proxy never waited for %d bytes", lowat);
}

static void test_client_hello_split_across_writes_still_yields_the_sni(void **state) {
        upstream u;
        proxy_run pr;
        size_t n;
        upstream_start(&u, "198.18.0.2");
        int c = proxy_start(&pr, "192.0.2.9", u.port);
        uint8_t *hello = client_hello("a.test", &n);
        size_t record = 5 + (size_t)(hello[3] << 8 | hello[4]);
        assert_int_equal(record, n);
        assert_int_equal(send(c, hello, 3, MSG_NOSIGNAL), 3);
        wait_for_lowat(&pr, 5);
        assert_int_equal(send(c, hello + 3, 40, MSG_NOSIGNAL), 40);
        wait_for_lowat(&pr, (int)record);
        expect_tunnel_rest(c, &u, hello, 43, n);
        proxy_finish(&pr, c);
        free(hello);
}

static void test_connect_to_allowed_host_tunnels_tls(void **state) {
        upstream u;
        proxy_run pr;
        char head[1024], req[128];
        size_t n;
        upstream_start(&u, "198.18.0.2");
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT a.test:%u HTTP/1.1\r\nHost: a.test:%u\r\n\r\n", u.port, u.port);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        uint8_t *hello = client_hello("a.test", &n);
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        free(hello);
}

static void test_connect_host_is_normalised(void **state) {
        upstream u;
        proxy_run pr;
        char head[1024], req[128];
        size_t n;
        upstream_start(&u, "198.18.0.2");
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT A.TEST.:%u HTTP/1.1\r\n\r\n", u.port);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        uint8_t *hello = client_hello("A.Test", &n);
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        free(hello);
}

static void test_connect_then_sni_of_another_host_gets_the_alert(void **state) {
        proxy_run pr;
        char head[1024], req[128];
        size_t n;
        uint16_t port;
        int a = listen_on("198.18.0.2", &port);
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT a.test:%u HTTP/1.1\r\n\r\n", port);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        uint8_t *hello = client_hello("b.test", &n);
        assert_int_equal(send(c, hello, n, MSG_NOSIGNAL), (ssize_t)n);
        expect_alert(c);
        proxy_finish(&pr, c);
        assert_string_equal(events.reason, "sni-mismatch");
        assert_false(upstream_saw_connection(a));
        close(a);
        free(hello);
}

static void test_connect_to_denied_host_gets_403_naming_host_and_policy(void **state) {
        proxy_run pr;
        char resp[4096];
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n");
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
        assert_non_null(strcasestr(resp, "x-sandbox-policy: test-policy"));
        assert_non_null(strstr(resp, "evil.test"));
        assert_string_equal(events.reason, "not-allowed");
        assert_int_equal(events.port, 443);
}

static void test_absolute_form_to_denied_host_gets_403_and_upstream_sees_nothing(void **state) {
        proxy_run pr;
        char resp[4096], req[256];
        uint16_t port;
        int evil = listen_on("198.18.0.3", &port);
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "GET http://evil.test:%u/?t=SECRET HTTP/1.1\r\nHost: evil.test:%u\r\n\r\n", port,
                 port);
        send_str(c, req);
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
        assert_non_null(strcasestr(resp, "x-sandbox-policy:"));
        assert_null(strstr(resp, "SECRET"));
        assert_false(upstream_saw_connection(evil));
        close(evil);
}

/* 198.18.0.1 is this side's own address, inside the policy's
 * subnets.allow: the kernel routes it as local, so the proxy never dials
 * it (plain HTTP and CONNECT alike) and says why. The same holds for an
 * address added to the host after the policy was judged. */
static void test_address_local_to_the_host_is_never_dialled_even_when_allowed(void **state) {
        proxy_run pr;
        char resp[4096], req[256];
        uint16_t port;
        int self = listen_on("198.18.0.1", &port);
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "GET http://198.18.0.1:%u/ HTTP/1.1\r\nHost: 198.18.0.1:%u\r\n\r\n", port, port);
        send_str(c, req);
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        if (strncmp(resp, "HTTP/1.1 502", 12) != 0 || !strstr(resp, "the host itself"))
                fail_msg("want 502 naming the host itself, got: %.300s", resp);
        assert_false(upstream_saw_connection(self));
        /* CONNECT, then a ClientHello: the tunnel is never opened. */
        c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT 198.18.0.1:%u HTTP/1.1\r\n\r\n", port);
        send_str(c, req);
        char head[1024];
        read_head(c, head, sizeof(head));
        size_t hn;
        uint8_t *hello = client_hello("198.18.0.1", &hn);
        (void)send(c, hello, hn, MSG_NOSIGNAL);
        uint8_t junk[64];
        (void)read_all(c, junk, sizeof(junk));
        proxy_finish(&pr, c);
        free(hello);
        assert_false(upstream_saw_connection(self));
        assert_string_equal(events.reason, "upstream-unreachable");
        close(self);
}

static void test_absolute_uri_and_host_header_must_agree(void **state) {
        proxy_run pr;
        char resp[4096];
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n");
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
        assert_string_equal(events.reason, "host-mismatch");
}

static void test_connect_then_plain_http_with_another_host_gets_403(void **state) {
        proxy_run pr;
        char head[1024], resp[4096];
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT a.test:80 HTTP/1.1\r\n\r\n");
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        send_str(c, "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n");
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
        assert_string_equal(events.reason, "host-mismatch");
}

/* A pattern without ":port" has its rules applied on 80 and 443 only: on
 * another port the host is one without rules, so its TLS is spliced (this
 * proxy has no CA, so a host with rules would be refused instead). */
static void test_rules_of_a_pattern_without_port_apply_only_on_80_and_443(void **state) {
        upstream u;
        proxy_run pr;
        char head[1024], req[128];
        size_t n;
        upstream_start(&u, "198.18.0.2");
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT rules.test:%u HTTP/1.1\r\n\r\n", u.port);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        uint8_t *hello = client_hello("rules.test", &n);
        expect_tunnel(c, &u, hello, n);
        proxy_finish(&pr, c);
        assert_int_equal(events.count, 0);
        free(hello);
}

/* "host:port" applies its rules on that port. */
static void test_rules_of_a_pattern_with_port_apply_on_that_port(void **state) {
        proxy_run pr;
        char head[1024], req[128], json[256];
        size_t n;
        uint16_t port;
        int l = listen_on("198.18.0.2", &port);
        snprintf(json, sizeof(json),
                 "{\"allow\": {\"rules.test:%u\": [{\"transform\": [{\"headers\": {\"x-k\": \"v\"}}]}]},"
                 " \"subnets\": {\"allow\": [\"198.18.0.0/15\"]}}", port);
        pol_policy *p = policy_from(json);
        env.policy = p;
        int c = proxy_start(&pr, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT rules.test:%u HTTP/1.1\r\n\r\n", port);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        uint8_t *hello = client_hello("rules.test", &n);
        assert_int_equal(send(c, hello, n, MSG_NOSIGNAL), (ssize_t)n);
        expect_alert(c);
        proxy_finish(&pr, c);
        env.policy = policy;
        pol_policy_free(p);
        assert_false(upstream_saw_connection(l));
        close(l);
        free(hello);
}

static void test_absolute_uri_with_userinfo_is_refused_saying_so(void **state) {
        proxy_run pr;
        char resp[4096];
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "GET http://user:pw@a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n");
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 400", 12) == 0);
        assert_non_null(strstr(resp, "userinfo"));
}

static void test_request_head_over_64k_gets_431(void **state) {
        proxy_run pr;
        char resp[4096];
        size_t big = 70 * 1024;
        char *req = malloc(big + 1);
        int c = proxy_start(&pr, NULL, 0);
        strcpy(req, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-Big: ");
        memset(req + strlen(req), 'x', big - strlen(req));
        req[big] = 0;
        send_str(c, req);
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        free(req);
        assert_true(strncmp(resp, "HTTP/1.1 431", 12) == 0);
}

static void test_garbage_request_gets_400(void **state) {
        proxy_run pr;
        char resp[4096];
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "\x01\x02 nonsense\r\n\r\n");
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 400", 12) == 0);
}

/* ---- end to end: sandbox-netd --proxy on loopback ---- */

/* pol_proxy_live_update() (rule 9): a CONNECT granted under the old policy
 * whose first bytes come after the update is cut before the call returns
 * and never dialled; a tunnel the new policy still allows the same way
 * carries on. */
static void test_live_update_cuts_a_granted_connect_the_new_policy_denies(void **state) {
        upstream ub;
        proxy_run pa, pb;
        char head[1024], req[128];
        uint16_t aport;
        size_t n;
        uint8_t buf[64];
        int la = listen_on("198.18.0.2", &aport);
        upstream_start(&ub, "198.18.0.3");
        int ca = proxy_start(&pa, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT a.test:%u HTTP/1.1\r\nHost: a.test:%u\r\n\r\n", aport, aport);
        send_str(ca, req);
        read_head(ca, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        int cb = proxy_start(&pb, NULL, 0);
        snprintf(req, sizeof(req), "CONNECT b.test:%u HTTP/1.1\r\nHost: b.test:%u\r\n\r\n", ub.port, ub.port);
        send_str(cb, req);
        read_head(cb, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);

        pol_policy *p2 = policy_from("{\"allow\": {\"b.test\": []}, \"subnets\": {\"allow\": [\"198.18.0.3/32\"]}}");
        pol_proxy_env env2 = env;
        env2.policy = p2;
        pol_proxy_live_update(&env2);
        /* Cut already: the client reads EOF without waiting. */
        assert_true(readable(ca, 0));
        assert_int_equal(recv(ca, buf, sizeof(buf), MSG_DONTWAIT), 0);
        uint8_t *hello = client_hello("a.test", &n);
        (void)send(ca, hello, n, MSG_NOSIGNAL);
        proxy_finish(&pa, ca);
        assert_false(upstream_saw_connection(la));
        free(hello);
        close(la);

        hello = client_hello("b.test", &n);
        expect_tunnel(cb, &ub, hello, n);
        proxy_finish(&pb, cb);
        free(hello);
        pol_proxy_live_update(&env); /* the other tests' policy again */
        pol_policy_free(p2);
}

static pid_t netd_pid = -1;
static char netd_policy[] = "/tmp/test-proxy-policy-XXXXXX";

static const char *netd_binary(void) {
        const char *p = getenv("SANDBOX_NETD");
        return p && *p ? p : "build/sandbox-netd";
}

/* Reads one line of netd's stdout (bounded). */
static void read_line(int fd, char *buf, size_t size) {
        size_t n = 0;
        while (n + 1 < size) {
                if (!readable(fd, TIMEOUT_MS) || read(fd, buf + n, 1) != 1)
                        fail_msg("no line from sandbox-netd");
                if (buf[n++] == '\n')
                        break;
        }
        buf[n] = '\0';
}

static pid_t spawn_netd(int out_fd) {
        char resolver[32];
        snprintf(resolver, sizeof(resolver), "127.0.0.1:%u", ntohs(dns_addr.sin_port));
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char *argv[] = { (char *)"sandbox-netd", (char *)"--listen", (char *)"127.0.0.1:0",
                                 (char *)"--upstream", resolver, (char *)"--policy", netd_policy,
                                 (char *)"--proxy", (char *)"127.0.0.1:0", (char *)"--name", (char *)"sbx-test",
                                 NULL };
                if (dup2(out_fd, 1) < 0)
                        _exit(127);
                execv(netd_binary(), argv);
                _exit(127);
        }
        return pid;
}

static int connect_to(const char *ip, unsigned port) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        inet_pton(AF_INET, ip, &a.sin_addr);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        return fd;
}

static void stop_netd(int out[2]);
/* ---- refusals inside TLS (pol_tls_deny): the session CA the sandbox trusts ---- */

static char deny_dir[] = "/tmp/test-proxy-ca-XXXXXX";
static char deny_cert[64], deny_key[64], other_cert[64], other_key[64];

static int deny_setup(void **state) {
        sb_error *err = NULL;
        strcpy(deny_dir, "/tmp/test-proxy-ca-XXXXXX");
        if (!mkdtemp(deny_dir))
                return -1;
        snprintf(deny_cert, sizeof(deny_cert), "%s/ca.crt", deny_dir);
        snprintf(deny_key, sizeof(deny_key), "%s/ca.key", deny_dir);
        snprintf(other_cert, sizeof(other_cert), "%s/other.crt", deny_dir);
        snprintf(other_key, sizeof(other_key), "%s/other.key", deny_dir);
        if (pol_proxy_ca_generate(deny_cert, deny_key, "test", &err) < 0 ||
            pol_proxy_ca_generate(other_cert, other_key, "other", &err) < 0 ||
            pol_proxy_ca_load(deny_cert, deny_key, &env.ca, &err) < 0) {
                sb_error_free(err);
                return -1;
        }
        env.deny_in_tls = true;
        return 0;
}

static int deny_teardown(void **state) {
        pol_proxy_ca_free(env.ca);
        env.ca = NULL;
        env.deny_in_tls = false;
        unlink(deny_cert);
        unlink(deny_key);
        unlink(other_cert);
        unlink(other_key);
        rmdir(deny_dir);
        return 0;
}

typedef struct tls_result {
        bool handshake;
        char alpn[16];
        bool cert_names_a_test; /* the leaf would also pass for a.test */
        char resp[4096];
} tls_result;

/* A TLS client on the connected fd, as a sandbox's would be: it trusts
 * only ca_file, sends SNI `sni` (none when NULL), checks the leaf names
 * `name`, offers h2 and http/1.1, then sends one GET and reads the answer
 * to the end. */
static void tls_get_sni(int fd, const char *ca_file, const char *sni, const char *name, tls_result *ret) {
        static const unsigned char protos[] = "\x02h2\x08http/1.1";
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        struct timeval tv = { .tv_sec = TIMEOUT_MS / 1000 };
        memset(ret, 0, sizeof(*ret));
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        assert_non_null(ctx);
        assert_int_equal(SSL_CTX_load_verify_locations(ctx, ca_file, NULL), 1);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        assert_int_equal(SSL_CTX_set_alpn_protos(ctx, protos, sizeof(protos) - 1), 0);
        SSL *ssl = SSL_new(ctx);
        if (sni)
                assert_int_equal(SSL_set_tlsext_host_name(ssl, sni), 1);
        assert_int_equal(SSL_set1_host(ssl, name), 1);
        SSL_set_fd(ssl, fd);
        if (SSL_connect(ssl) == 1) {
                const unsigned char *sel = NULL;
                unsigned len = 0;
                char req[256];
                size_t n = 0, k = 0;
                ret->handshake = true;
                SSL_get0_alpn_selected(ssl, &sel, &len);
                snprintf(ret->alpn, sizeof(ret->alpn), "%.*s", (int)len, sel ? (const char *)sel : "");
                X509 *leaf = SSL_get1_peer_certificate(ssl);
                ret->cert_names_a_test = leaf && X509_check_host(leaf, "a.test", 0, 0, NULL) == 1;
                X509_free(leaf);
                snprintf(req, sizeof(req), "GET /?t=SECRET HTTP/1.1\r\nHost: %s\r\n\r\n", name);
                assert_int_equal(SSL_write(ssl, req, (int)strlen(req)), (int)strlen(req));
                while (n + 1 < sizeof(ret->resp) && SSL_read_ex(ssl, ret->resp + n, sizeof(ret->resp) - 1 - n, &k) == 1)
                        n += k;
                ret->resp[n] = '\0';
        }
        SSL_free(ssl);
        SSL_CTX_free(ctx);
}

/* tls_get_sni() with the SNI naming the host it checks. */
static void tls_get(int fd, const char *ca_file, const char *name, tls_result *ret) {
        tls_get_sni(fd, ca_file, name, name, ret);
}

static void expect_deny_page(const tls_result *t, const char *host) {
        assert_true(t->handshake);
        assert_string_equal(t->alpn, "http/1.1");
        assert_false(t->cert_names_a_test);
        assert_true(strncmp(t->resp, "HTTP/1.1 403", 12) == 0);
        assert_non_null(strcasestr(t->resp, "x-sandbox-policy: test-policy"));
        assert_non_null(strstr(t->resp, host));
        assert_non_null(strstr(t->resp, "retrying will not help"));
        assert_null(strstr(t->resp, "SECRET"));
}

static int dns_count(void) {
        pthread_mutex_lock(&lock);
        int n = dns_queries;
        pthread_mutex_unlock(&lock);
        return n;
}

static void test_denied_connect_to_443_gets_its_403_inside_tls_with_a_leaf_for_that_name_only(void **state) {
        proxy_run pr;
        char head[1024];
        tls_result t;
        int before = dns_count();
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT Evil.Test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n");
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        tls_get(c, deny_cert, "evil.test", &t);
        proxy_finish(&pr, c);
        expect_deny_page(&t, "evil.test");
        assert_int_equal(events.count, 1);
        assert_string_equal(events.reason, "not-allowed");
        assert_string_equal(events.host, "evil.test");
        assert_int_equal(events.port, 443);
        assert_int_equal(dns_count(), before); /* nothing resolved, so nothing dialled */
}

static void test_transparent_tls_with_denied_sni_gets_its_403_inside_tls(void **state) {
        proxy_run pr;
        tls_result t;
        int before = dns_count();
        int c = proxy_start(&pr, "192.0.2.3", 443);
        tls_get(c, deny_cert, "evil.test", &t);
        proxy_finish(&pr, c);
        expect_deny_page(&t, "evil.test");
        assert_int_equal(events.count, 1);
        assert_string_equal(events.reason, "not-allowed");
        assert_int_equal(dns_count(), before);
}

static void test_denied_name_to_a_client_not_trusting_the_ca_fails_the_handshake_reported_once(void **state) {
        proxy_run pr;
        char head[1024];
        tls_result t;
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n");
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        tls_get(c, other_cert, "evil.test", &t);
        proxy_finish(&pr, c);
        assert_false(t.handshake);
        assert_int_equal(events.count, 1);
        assert_string_equal(events.reason, "not-allowed");
        /* An SNI naming another host than the denied CONNECT: no leaf. */
        c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n");
        read_head(c, head, sizeof(head));
        tls_get(c, deny_cert, "a.test", &t);
        proxy_finish(&pr, c);
        assert_false(t.handshake);
        assert_int_equal(events.count, 1);
}

/* docs/POLICY.md: the SNI must name the refused host, else the handshake
 * fails; a ClientHello without SNI gets no leaf and no page either. */
static void test_denied_connect_then_a_client_hello_without_sni_fails_the_handshake_reported_once(void **state) {
        proxy_run pr;
        char head[1024];
        tls_result t;
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n");
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        tls_get_sni(c, deny_cert, NULL, "evil.test", &t);
        proxy_finish(&pr, c);
        assert_false(t.handshake);
        assert_int_equal(events.count, 1);
        assert_string_equal(events.reason, "not-allowed");
}

static void test_denied_connect_to_another_port_or_an_address_keeps_the_403_before_the_tunnel(void **state) {
        static const char *const reqs[] = { "CONNECT evil.test:8443 HTTP/1.1\r\n\r\n",
                                            "CONNECT 192.0.2.7:443 HTTP/1.1\r\n\r\n" };
        for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
                proxy_run pr;
                char resp[4096];
                int c = proxy_start(&pr, NULL, 0);
                send_str(c, reqs[i]);
                size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
                resp[n] = 0;
                proxy_finish(&pr, c);
                assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
                assert_non_null(strcasestr(resp, "x-sandbox-policy: test-policy"));
                assert_int_equal(events.count, 1);
        }
}

/* A sandbox that does not trust the CA (an imported runtime): a page
 * behind a leaf it rejects would read as a broken certificate, so the
 * refusal stays the 403 to the CONNECT. */
static void test_denied_connect_when_the_sandbox_does_not_trust_the_ca_keeps_the_403(void **state) {
        proxy_run pr;
        char resp[4096];
        env.deny_in_tls = false;
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n");
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
        assert_int_equal(events.count, 1);
}

/* Bounded work for a flood of refused names: every leaf carries the one
 * key the CA made at load (no key is generated per name or connection),
 * a name's leaf is minted once and then served from the cache, and each
 * is valid for its own name only. */
static void test_leaves_for_many_names_share_one_key_and_are_cached_per_name(void **state) {
        X509 *first_cert = NULL, *cert = NULL;
        EVP_PKEY *first_key = NULL, *key = NULL;
        char name[64], other[64];
        assert_int_equal(pol_proxy_ca_leaf(env.ca, "n0.test", &first_cert, &first_key), 0);
        for (int i = 1; i < 300; i++) {
                snprintf(name, sizeof(name), "n%d.test", i);
                snprintf(other, sizeof(other), "n%d.test", i - 1);
                assert_int_equal(pol_proxy_ca_leaf(env.ca, name, &cert, &key), 0);
                assert_ptr_equal(key, first_key);
                assert_int_equal(X509_check_host(cert, name, 0, 0, NULL), 1);
                assert_int_not_equal(X509_check_host(cert, other, 0, 0, NULL), 1);
                X509 *again = NULL;
                EVP_PKEY *k2 = NULL;
                assert_int_equal(pol_proxy_ca_leaf(env.ca, name, &again, &k2), 0);
                assert_ptr_equal(again, cert);
                X509_free(again);
                EVP_PKEY_free(k2);
                X509_free(cert);
                EVP_PKEY_free(key);
        }
        X509_free(first_cert);
        EVP_PKEY_free(first_key);
}

static void test_denied_connect_to_443_then_plain_http_gets_the_403(void **state) {
        proxy_run pr;
        char head[1024], resp[4096];
        int c = proxy_start(&pr, NULL, 0);
        send_str(c, "CONNECT evil.test:443 HTTP/1.1\r\n\r\n");
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        send_str(c, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n");
        size_t n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        proxy_finish(&pr, c);
        assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
        assert_non_null(strstr(resp, "evil.test"));
        assert_int_equal(events.count, 1);
}


static void test_netd_proxy_tunnels_allowed_connect_and_reports_denials(void **state) {
        int out[2];
        char line[1024], ip[32], head[1024], req[128], resp[4096];
        unsigned dport, pport, uid;
        upstream u;
        size_t n;
        int tmp = mkstemp(netd_policy);
        const char *pol = "{\"allow\":[\"a.test\"],\"subnets\":{\"allow\":[\"198.18.0.0/15\"]}}";
        assert_true(tmp >= 0);
        assert_int_equal(write(tmp, pol, strlen(pol)), (ssize_t)strlen(pol));
        close(tmp);
        assert_int_equal(pipe2(out, O_CLOEXEC), 0);
        netd_pid = spawn_netd(out[1]);
        read_line(out[0], line, sizeof(line));
        assert_int_equal(sscanf(line, "{\"ready\":true,\"listen\":\"127.0.0.1:%u\",\"proxy\":\"%31[0-9.]:%u\","
                                      "\"uid\":%u}",
                                &dport, ip, &pport, &uid),
                         4);

        /* Allowed: the tunnel works after the privilege drop. */
        upstream_start(&u, "198.18.0.2");
        int c = connect_to(ip, pport);
        snprintf(req, sizeof(req), "CONNECT a.test:%u HTTP/1.1\r\n\r\n", u.port);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        assert_true(strncmp(head, "HTTP/1.1 200", 12) == 0);
        uint8_t *hello = client_hello("a.test", &n);
        expect_tunnel(c, &u, hello, n);
        close(c);
        free(hello);

        /* Denied: a legible 403, and one event line without header values. */
        c = connect_to(ip, pport);
        send_str(c, "CONNECT evil.test:443 HTTP/1.1\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n");
        n = read_all(c, (uint8_t *)resp, sizeof(resp) - 1);
        resp[n] = 0;
        close(c);
        assert_true(strncmp(resp, "HTTP/1.1 403", 12) == 0);
        assert_non_null(strcasestr(resp, "x-sandbox-policy: sbx-test"));
        read_line(out[0], line, sizeof(line));
        assert_non_null(strstr(line, "\"deny\":\"evil.test\",\"port\":443,\"layer\":\"proxy\","
                                     "\"reason\":\"not-allowed\""));
        assert_null(strstr(line, "c2VjcmV0"));
        stop_netd(out);
}

/* Rewrites the policy file in place (same inode) and signals netd. */
static void rewrite_policy(const char *json) {
        int fd = open(netd_policy, O_WRONLY | O_TRUNC | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
        close(fd);
        assert_int_equal(kill(netd_pid, SIGHUP), 0);
}

static void expect_connect(const char *ip, unsigned pport, const char *host, const char *status) {
        char req[128], head[1024];
        int c = connect_to(ip, pport);
        snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\n\r\n", host);
        send_str(c, req);
        read_head(c, head, sizeof(head));
        /* Half-close and wait for the proxy's own close: the connection is
         * over on both sides before the next step. */
        shutdown(c, SHUT_WR);
        uint8_t rest[4096];
        (void)read_all(c, rest, sizeof(rest));
        close(c);
        if (strncmp(head, status, strlen(status)) != 0)
                fail_msg("CONNECT %s: expected %s, got %.40s", host, status, head);
}

static void test_netd_reloads_its_policy_on_sighup_and_keeps_it_when_invalid(void **state) {
        int out[2];
        char line[1024], ip[32], target[64];
        unsigned dport, pport, uid;
        int tmp = mkstemp(netd_policy);
        const char *pol = "{\"allow\":[\"a.test\"],\"subnets\":{\"allow\":[\"198.18.0.0/15\"]}}";
        assert_true(tmp >= 0);
        assert_int_equal(write(tmp, pol, strlen(pol)), (ssize_t)strlen(pol));
        close(tmp);
        assert_int_equal(pipe2(out, O_CLOEXEC), 0);
        netd_pid = spawn_netd(out[1]);
        read_line(out[0], line, sizeof(line));
        assert_int_equal(sscanf(line, "{\"ready\":true,\"listen\":\"127.0.0.1:%u\",\"proxy\":\"%31[0-9.]:%u\","
                                      "\"uid\":%u}",
                                &dport, ip, &pport, &uid),
                         4);
        snprintf(target, sizeof(target), "b.test:443");
        expect_connect(ip, pport, target, "HTTP/1.1 403");
        read_line(out[0], line, sizeof(line)); /* its deny line */

        /* After the drop, FILE is read again through the descriptor opened
         * as root; the new policy applies to the next connection. */
        rewrite_policy("{\"allow\":[\"a.test\",\"b.test\"],\"subnets\":{\"allow\":[\"198.18.0.0/15\"]}}");
        read_line(out[0], line, sizeof(line));
        assert_non_null(strstr(line, "\"reloaded\":true"));
        expect_connect(ip, pport, target, "HTTP/1.1 200");

        /* A document that does not validate changes nothing. */
        rewrite_policy("{\"allow\":[\"www*.test\"]}");
        read_line(out[0], line, sizeof(line));
        assert_non_null(strstr(line, "\"reloaded\":false"));
        expect_connect(ip, pport, target, "HTTP/1.1 200");
        stop_netd(out);
}

/* With --listen ADDR:0, netd binds UDP where the kernel picks and TCP on
 * the same number, which a TCP socket may already hold (on a busy host, a
 * client's local port: "bind TCP port N: Address already in use"). Here
 * the namespace's ephemeral range is four ports, two of them held by TCP
 * listeners: each start's first pick is a held one half the time, and
 * netd must pick again. Eight starts, each ready on a port of its own. */
static void test_netd_with_port_0_picks_again_when_tcp_holds_the_udp_pick(void **state) {
        static const char *range = "/proc/sys/net/ipv4/ip_local_port_range";
        char old[64] = "", line[1024], ip[32];
        unsigned dport, pport, uid;
        uint16_t held[2];
        int fds[2], out[2], tmp = mkstemp(netd_policy);
        const char *pol = "{\"allow\":[\"a.test\"]}";
        assert_true(tmp >= 0);
        assert_int_equal(write(tmp, pol, strlen(pol)), (ssize_t)strlen(pol));
        close(tmp);
        int rf = open(range, O_RDWR | O_CLOEXEC);
        assert_true(rf >= 0);
        assert_true(read(rf, old, sizeof(old) - 1) > 0);
        assert_int_equal(pwrite(rf, "40100 40103", 11, 0), 11);
        for (int i = 0; i < 2; i++) {
                struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(40100 + i),
                                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
                fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                assert_true(fds[i] >= 0);
                assert_int_equal(bind(fds[i], (struct sockaddr *)&a, sizeof(a)), 0);
                assert_int_equal(listen(fds[i], 1), 0);
                held[i] = 40100 + i;
        }
        for (int round = 0; round < 8; round++) {
                assert_int_equal(pipe2(out, O_CLOEXEC), 0);
                netd_pid = spawn_netd(out[1]);
                read_line(out[0], line, sizeof(line));
                assert_int_equal(sscanf(line, "{\"ready\":true,\"listen\":\"127.0.0.1:%u\",\"proxy\":\"%31[0-9.]:%u\","
                                              "\"uid\":%u}",
                                        &dport, ip, &pport, &uid),
                                 4);
                assert_true(dport != held[0] && dport != held[1]);
                stop_netd(out);
        }
        for (int i = 0; i < 2; i++)
                close(fds[i]);
        assert_int_equal(pwrite(rf, old, strlen(old), 0), (ssize_t)strlen(old));
        close(rf);
}

static void stop_netd(int out[2]) {
        int status;
        assert_int_equal(kill(netd_pid, SIGTERM), 0);
        assert_int_equal(waitpid(netd_pid, &status, 0), netd_pid);
        netd_pid = -1;
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        close(out[0]);
        close(out[1]);
}

static int netd_teardown(void **state) {
        if (netd_pid > 0) {
                kill(netd_pid, SIGKILL);
                waitpid(netd_pid, NULL, 0);
                netd_pid = -1;
        }
        unlink(netd_policy);
        strcpy(netd_policy, "/tmp/test-proxy-policy-XXXXXX");
        return 0;
}

/* ---- setup ---- */

static int setup(void **state) {
        socklen_t l = sizeof(dns_addr);
        signal(SIGPIPE, SIG_IGN);
        if (world_setup() < 0)
                return -1;
        dns_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        dns_addr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (dns_fd < 0 || bind(dns_fd, (struct sockaddr *)&dns_addr, sizeof(dns_addr)) < 0 ||
            getsockname(dns_fd, (struct sockaddr *)&dns_addr, &l) < 0 || pipe2(dns_stop, O_CLOEXEC) < 0 ||
            pthread_create(&dns_thread, NULL, dns_main, NULL) != 0)
                return -1;
        policy = policy_from("{\"allow\": {\"a.test\": [], \"b.test\": [], \"private.test\": [],"
                             " \"rules.test\": [{\"transform\": [{\"headers\": {\"x-k\": \"v\"}}]}]},"
                             " \"subnets\": {\"allow\": [\"198.18.0.0/15\"]}}");
        env = (pol_proxy_env){ .policy = policy, .policy_name = "test-policy", .io_timeout_ms = TIMEOUT_MS,
                               .event = on_event };
        memcpy(&env.resolver, &dns_addr, sizeof(dns_addr));
        env.resolver_len = sizeof(dns_addr);
        return 0;
}

static int teardown(void **state) {
        if (write(dns_stop[1], "x", 1) != 1)
                return -1;
        pthread_join(dns_thread, NULL);
        close(dns_fd);
        close(dns_stop[0]);
        close(dns_stop[1]);
        pol_policy_free(policy);
        return 0;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_transparent_tls_with_allowed_sni_is_spliced_both_ways),
                cmocka_unit_test(test_transparent_tls_without_sni_gets_the_alert),
                cmocka_unit_test(test_transparent_tls_without_sni_to_an_allowed_subnet_is_spliced_to_it),
                cmocka_unit_test(test_transparent_tls_with_denied_sni_gets_the_alert_without_dns),
                cmocka_unit_test(test_sni_resolving_to_a_forbidden_address_gets_the_alert),
                cmocka_unit_test(test_host_with_rules_and_no_ca_is_refused),
                cmocka_unit_test(test_transparent_tls_to_an_allowed_subnet_with_a_denied_sni_goes_to_it),
                cmocka_unit_test(test_transparent_tls_to_an_allowed_subnet_with_an_allowed_sni_goes_to_that_address),
                cmocka_unit_test(test_connect_to_an_allowed_subnet_address_then_a_denied_sni_is_tunnelled),
                cmocka_unit_test(test_subnet_deny_inside_an_allowed_subnet_still_refuses_a_denied_sni),
                cmocka_unit_test(test_client_hello_split_across_writes_still_yields_the_sni),
                cmocka_unit_test(test_connect_to_allowed_host_tunnels_tls),
                cmocka_unit_test(test_connect_host_is_normalised),
                cmocka_unit_test(test_connect_then_sni_of_another_host_gets_the_alert),
                cmocka_unit_test(test_connect_to_denied_host_gets_403_naming_host_and_policy),
                cmocka_unit_test(test_absolute_form_to_denied_host_gets_403_and_upstream_sees_nothing),
                cmocka_unit_test(test_address_local_to_the_host_is_never_dialled_even_when_allowed),
                cmocka_unit_test(test_absolute_uri_and_host_header_must_agree),
                cmocka_unit_test(test_connect_then_plain_http_with_another_host_gets_403),
                cmocka_unit_test(test_garbage_request_gets_400),
                cmocka_unit_test(test_rules_of_a_pattern_without_port_apply_only_on_80_and_443),
                cmocka_unit_test(test_rules_of_a_pattern_with_port_apply_on_that_port),
                cmocka_unit_test(test_absolute_uri_with_userinfo_is_refused_saying_so),
                cmocka_unit_test(test_request_head_over_64k_gets_431),
                cmocka_unit_test(test_live_update_cuts_a_granted_connect_the_new_policy_denies),
                cmocka_unit_test_setup_teardown(
                        test_denied_connect_to_443_gets_its_403_inside_tls_with_a_leaf_for_that_name_only, deny_setup,
                        deny_teardown),
                cmocka_unit_test_setup_teardown(test_transparent_tls_with_denied_sni_gets_its_403_inside_tls,
                                                deny_setup, deny_teardown),
                cmocka_unit_test_setup_teardown(
                        test_denied_name_to_a_client_not_trusting_the_ca_fails_the_handshake_reported_once, deny_setup,
                        deny_teardown),
                cmocka_unit_test_setup_teardown(
                        test_denied_connect_then_a_client_hello_without_sni_fails_the_handshake_reported_once,
                        deny_setup, deny_teardown),
                cmocka_unit_test_setup_teardown(
                        test_denied_connect_to_another_port_or_an_address_keeps_the_403_before_the_tunnel, deny_setup,
                        deny_teardown),
                cmocka_unit_test_setup_teardown(test_denied_connect_to_443_then_plain_http_gets_the_403, deny_setup,
                                                deny_teardown),
                cmocka_unit_test_setup_teardown(
                        test_denied_connect_when_the_sandbox_does_not_trust_the_ca_keeps_the_403, deny_setup,
                        deny_teardown),
                cmocka_unit_test_setup_teardown(test_leaves_for_many_names_share_one_key_and_are_cached_per_name,
                                                deny_setup, deny_teardown),
                cmocka_unit_test_teardown(test_netd_proxy_tunnels_allowed_connect_and_reports_denials, netd_teardown),
                cmocka_unit_test_teardown(test_netd_reloads_its_policy_on_sighup_and_keeps_it_when_invalid,
                                          netd_teardown),
                cmocka_unit_test_teardown(test_netd_with_port_0_picks_again_when_tcp_holds_the_udp_pick,
                                          netd_teardown),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
