/* sandbox-netd: the unprivileged process that runs the DNS filter of one
 * session (DESIGN §2, §5.2). It parses hostile traffic, so it holds no
 * privilege: when started as root it binds its sockets, then drops to an
 * unprivileged user with no capabilities and no_new_privs before it reads a
 * single packet.
 *
 * Command line (the standalone / test mode; the fd-3 control socket for
 * sandboxd comes later and will carry the same JSON lines):
 *
 *   sandbox-netd --listen ADDR:PORT --upstream ADDR:PORT --policy FILE
 *                [--never CIDR]... [--user NAME] [--timeout-ms N]
 *
 * It answers DNS on ADDR:PORT over UDP and TCP (PORT 0: a free port, the
 * same for both), judges queries with policy/dns.c against the
 * networkPolicy value in FILE, and forwards allowed ones to the upstream
 * resolver over the transport the client used. stdout carries one JSON
 * object per line:
 *   {"ready":true,"listen":"127.0.0.1:5353","uid":65534}  once, after setup
 *   {"pin":"1.2.3.4","ttl":30,"name":"x.test"}           per accepted address
 *   {"deny":"evil.test","qtype":"A","layer":"default","message":"..."}
 * Ordering contract: every pin line of an answer is written (and flushed)
 * before that answer is sent to the client; with --ack, netd also waits for
 * the reader's acknowledgement ('\n' on stdin) of each pin line, so the
 * address is in nftables before the client can learn it. If stdout cannot
 * take the line (or no ack comes in time), the client gets SERVFAIL instead
 * of the answer.
 *
 * Event loop: poll(2) over the UDP socket, the TCP listener and one
 * connected UDP socket per query in flight (a fresh source port and id per
 * query, RFC 5452). TCP clients are slow by nature, so each connection gets
 * its own thread with blocking I/O bounded by socket timeouts; both their
 * count and their message size are bounded. */
#include <arpa/inet.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/param.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <cjson/cJSON.h>
#include "libcore/caps.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "policy/dns.h"
#include "policy/policy.h"

#define MAX_INFLIGHT 128      /* UDP queries waiting for upstream */
#define MAX_TCP_CLIENTS 32
#define MAX_NEVER 1024
#define TCP_IDLE_MS 10000     /* a TCP client that says nothing is dropped */
#define POLICY_MAX_BYTES (1 << 20)

typedef struct config {
        struct sockaddr_storage listen;
        socklen_t listen_len;
        struct sockaddr_storage upstream;
        socklen_t upstream_len;
        const char *policy_path;
        const char *user;
        int timeout_ms;
        pol_cidr never[MAX_NEVER];
        size_t n_never;
        bool ack;          /* --ack: wait for one '\n' on stdin per pin line */
} config;

typedef struct inflight {
        int fd; /* connected to upstream; -EBADF when the slot is free */
        pol_dns_query q;
        struct sockaddr_storage client;
        socklen_t client_len;
        uint64_t deadline_ms;
} inflight;

static config cfg = { .user = "nobody", .timeout_ms = 3000 };
static pol_policy *policy;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int tcp_clients;
static volatile sig_atomic_t stop;

/* ---- output: the JSON lines on stdout ----------------------------------- */

/* Writes one JSON line and flushes it; the lock keeps lines whole across
 * TCP threads. 0 or -EIO. */
static int emit(cJSON *obj) {
        _cleanup_free_ char *line = obj ? cJSON_PrintUnformatted(obj) : NULL;
        cJSON_Delete(obj);
        if (!line)
                return -ENOMEM;
        pthread_mutex_lock(&out_lock);
        int r = (puts(line) < 0 || fflush(stdout) != 0) ? -EIO : 0;
        pthread_mutex_unlock(&out_lock);
        return r;
}

/* With --ack, waits for sandboxd's acknowledgement of one pin line: one
 * '\n' on stdin, written once the address is in the nftables set. Bounded
 * by the query timeout; a missing ack fails the answer (SERVFAIL), it never
 * releases an answer whose address is not pinned. Called with out_lock
 * held, so acks pair with lines across TCP threads. */
static int wait_ack(void) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int r;
        do
                r = poll(&p, 1, cfg.timeout_ms);
        while (r < 0 && errno == EINTR);
        char c;
        if (r <= 0 || read(STDIN_FILENO, &c, 1) != 1 || c != '\n')
                return -ETIMEDOUT;
        return 0;
}

/* Pins every address of an accepted answer. Must return before the answer
 * is released (see the file comment): with --ack, only once sandboxd has
 * installed each address. */
static int emit_pins(const pol_dns_result *res) {
        for (size_t i = 0; i < res->n_pins; i++) {
                char a[INET6_ADDRSTRLEN];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "pin", pol_addr_format(&res->pins[i].addr, a, sizeof(a)));
                cJSON_AddNumberToObject(o, "ttl", res->pins[i].ttl);
                cJSON_AddStringToObject(o, "name", res->query.name);
                _cleanup_free_ char *line = cJSON_PrintUnformatted(o);
                cJSON_Delete(o);
                if (!line)
                        return -ENOMEM;
                pthread_mutex_lock(&out_lock);
                int r = (puts(line) < 0 || fflush(stdout) != 0) ? -EIO : 0;
                if (r >= 0 && cfg.ack)
                        r = wait_ack();
                pthread_mutex_unlock(&out_lock);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void emit_denial(const pol_dns_result *res) {
        char tn[16];
        if (!res->blocked)
                return;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "deny", res->query.name);
        cJSON_AddStringToObject(o, "qtype", pol_dns_type_name(res->query.qtype, tn, sizeof(tn)));
        cJSON_AddStringToObject(o, "layer", pol_layer_to_string(res->verdict.layer));
        cJSON_AddStringToObject(o, "message", res->message);
        (void)emit(o); /* an event lost on a closed stdout changes no verdict */
}

/* Turns an answer result into what may be released: pins first; when they
 * cannot be written, the answer is replaced by SERVFAIL. */
static int pin_then_release(pol_dns_result *res) {
        emit_denial(res);
        if (emit_pins(res) >= 0)
                return 0;
        pol_dns_query q = res->query;
        pol_dns_result_done(res);
        log_warning("cannot report pins for %s, answering SERVFAIL", q.name);
        return pol_dns_servfail(&q, res);
}

/* ---- UDP ------------------------------------------------------------------- */

static inflight slots[MAX_INFLIGHT];

static void slot_free(inflight *s) {
        closep(&s->fd);
        s->fd = -EBADF;
}

static void udp_reply(int udp, const inflight *s, const pol_dns_result *res) {
        if (sendto(udp, res->packet, res->len, MSG_DONTWAIT, (const struct sockaddr *)&s->client,
                   s->client_len) < 0)
                log_debug_errno(negative_errno(), "reply to client: %m");
}

/* Opens a connected socket to upstream and sends the sanitised query. */
static int udp_forward(inflight *s, const pol_dns_result *res) {
        _cleanup_close_ int fd = socket(cfg.upstream.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (const struct sockaddr *)&cfg.upstream, cfg.upstream_len) < 0 ||
            send(fd, res->packet, res->len, 0) < 0)
                return negative_errno();
        s->fd = TAKE_FD(fd);
        s->q = res->query;
        s->deadline_ms = core_monotonic_ms() + (uint64_t)cfg.timeout_ms;
        return 0;
}

static void udp_query(int udp) {
        static uint8_t buf[POL_DNS_TCP_MAX + 1];
        inflight tmp = { .fd = -EBADF, .client_len = sizeof(tmp.client) };
        ssize_t n = recvfrom(udp, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&tmp.client, &tmp.client_len);
        pol_dns_result res;
        if (n < 0 || pol_dns_filter_query(policy, cfg.never, cfg.n_never, buf, (size_t)n, false, &res) < 0)
                return;
        emit_denial(&res);
        if (res.action == POL_DNS_FORWARD) {
                inflight *s = NULL;
                for (size_t i = 0; i < MAX_INFLIGHT && !s; i++)
                        if (slots[i].fd < 0)
                                s = &slots[i];
                pol_dns_query q = res.query;
                if (s) {
                        *s = tmp;
                        if (udp_forward(s, &res) >= 0) {
                                pol_dns_result_done(&res);
                                return;
                        }
                        slot_free(s);
                }
                pol_dns_result_done(&res);
                if (pol_dns_servfail(&q, &res) < 0)
                        return;
        }
        if (res.action == POL_DNS_REPLY)
                udp_reply(udp, &tmp, &res);
        pol_dns_result_done(&res);
}

/* An upstream datagram for slot s: ignored unless it answers s's query. */
static void udp_answer(int udp, inflight *s) {
        static uint8_t buf[POL_DNS_TCP_MAX + 1];
        pol_dns_result res;
        ssize_t n = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return;
                /* ICMP port unreachable and friends: upstream is down. */
                if (pol_dns_servfail(&s->q, &res) >= 0)
                        udp_reply(udp, s, &res), pol_dns_result_done(&res);
                slot_free(s);
                return;
        }
        if (pol_dns_filter_answer(policy, cfg.never, cfg.n_never, &s->q, buf, (size_t)n, &res) < 0)
                return; /* -EBADMSG: a stray or a spoof; keep waiting */
        if (pin_then_release(&res) >= 0)
                udp_reply(udp, s, &res);
        pol_dns_result_done(&res);
        slot_free(s);
}

static void udp_expire(int udp, uint64_t now) {
        for (size_t i = 0; i < MAX_INFLIGHT; i++) {
                pol_dns_result res;
                if (slots[i].fd < 0 || slots[i].deadline_ms > now)
                        continue;
                if (pol_dns_servfail(&slots[i].q, &res) >= 0)
                        udp_reply(udp, &slots[i], &res), pol_dns_result_done(&res);
                slot_free(&slots[i]);
        }
}

/* ---- TCP (RFC 1035 §4.2.2 / RFC 7766: two-byte length framing) ---------- */

static void set_timeouts(int fd, int ms) {
        struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Reads exactly n bytes; 0 at once-clean EOF before any byte, 1 when read,
 * negative errno otherwise (-EAGAIN: the socket timeout expired). */
static int read_full(int fd, uint8_t *buf, size_t n) {
        size_t got = 0;
        while (got < n) {
                ssize_t k = read(fd, buf + got, n - got);
                if (k == 0)
                        return got == 0 ? 0 : -EPIPE;
                if (k < 0 && errno != EINTR)
                        return negative_errno();
                if (k > 0)
                        got += (size_t)k;
        }
        return 1;
}

static int read_msg(int fd, uint8_t *buf, size_t *ret_len) {
        uint8_t hdr[2];
        int r = read_full(fd, hdr, 2);
        if (r <= 0)
                return r;
        size_t len = (size_t)(hdr[0] << 8 | hdr[1]);
        if (len == 0)
                return -EBADMSG;
        r = read_full(fd, buf, len);
        if (r <= 0)
                return r ?: -EPIPE;
        *ret_len = len;
        return 1;
}

static int write_msg(int fd, const uint8_t *msg, size_t len) {
        uint8_t hdr[2] = { (uint8_t)(len >> 8), (uint8_t)len };
        struct iovec iov[2] = { { hdr, 2 }, { (void *)msg, len } };
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
        ssize_t k = sendmsg(fd, &mh, MSG_NOSIGNAL);
        return k == (ssize_t)(len + 2) ? 0 : -EIO; /* blocking: all or an error */
}

/* Sends a forwarded query to upstream over TCP and filters its answer;
 * SERVFAIL in *res when upstream fails. */
static int tcp_resolve(pol_dns_result *res, uint8_t *buf) {
        pol_dns_query q = res->query;
        _cleanup_close_ int fd = socket(cfg.upstream.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        size_t len = 0;
        int r = fd < 0 ? negative_errno() : 0;
        if (r >= 0) {
                set_timeouts(fd, cfg.timeout_ms);
                if (connect(fd, (const struct sockaddr *)&cfg.upstream, cfg.upstream_len) < 0)
                        r = negative_errno();
        }
        if (r >= 0)
                r = write_msg(fd, res->packet, res->len);
        if (r >= 0)
                r = read_msg(fd, buf, &len);
        pol_dns_result_done(res);
        if (r > 0 && pol_dns_filter_answer(policy, cfg.never, cfg.n_never, &q, buf, len, res) >= 0)
                return pin_then_release(res);
        return pol_dns_servfail(&q, res);
}

static void *tcp_client(void *arg) {
        _cleanup_close_ int fd = (int)(intptr_t)arg;
        _cleanup_free_ uint8_t *buf = malloc(POL_DNS_TCP_MAX);
        set_timeouts(fd, TCP_IDLE_MS);
        for (size_t len = 0; buf && read_msg(fd, buf, &len) > 0;) {
                pol_dns_result res;
                if (pol_dns_filter_query(policy, cfg.never, cfg.n_never, buf, len, true, &res) < 0)
                        break;
                emit_denial(&res);
                int r = res.action == POL_DNS_FORWARD ? tcp_resolve(&res, buf) : 0;
                if (r >= 0 && res.action == POL_DNS_REPLY)
                        r = write_msg(fd, res.packet, res.len);
                bool drop = res.action == POL_DNS_DROP;
                pol_dns_result_done(&res);
                if (r < 0 || drop)
                        break;
        }
        atomic_fetch_sub(&tcp_clients, 1);
        return NULL;
}

static void tcp_accept(int listener) {
        _cleanup_close_ int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        pthread_t t;
        pthread_attr_t attr;
        if (fd < 0 || atomic_fetch_add(&tcp_clients, 1) >= MAX_TCP_CLIENTS) {
                if (fd >= 0)
                        atomic_fetch_sub(&tcp_clients, 1);
                return; /* closing is the RFC 7766 §6.2.3 way to shed load */
        }
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, tcp_client, (void *)(intptr_t)fd) == 0)
                TAKE_FD(fd);
        else
                atomic_fetch_sub(&tcp_clients, 1);
        pthread_attr_destroy(&attr);
}

/* ---- the loop ---------------------------------------------------------- */

static int run(int udp, int tcp) {
        struct pollfd pfd[2 + MAX_INFLIGHT];
        inflight *owner[2 + MAX_INFLIGHT];
        while (!stop) {
                uint64_t now = core_monotonic_ms(), next = now + 60000;
                nfds_t n = 2;
                pfd[0] = (struct pollfd){ .fd = udp, .events = POLLIN };
                pfd[1] = (struct pollfd){ .fd = tcp, .events = POLLIN };
                for (size_t i = 0; i < MAX_INFLIGHT; i++)
                        if (slots[i].fd >= 0) {
                                owner[n] = &slots[i];
                                pfd[n++] = (struct pollfd){ .fd = slots[i].fd, .events = POLLIN };
                                next = MIN(next, slots[i].deadline_ms);
                        }
                int k = poll(pfd, n, next > now ? (int)(next - now) : 0);
                if (k < 0 && errno != EINTR)
                        return log_error_errno(negative_errno(), "poll: %m");
                for (nfds_t i = 2; k > 0 && i < n; i++)
                        if (pfd[i].revents)
                                udp_answer(udp, owner[i]);
                if (k > 0 && pfd[0].revents)
                        udp_query(udp);
                if (k > 0 && pfd[1].revents)
                        tcp_accept(tcp);
                udp_expire(udp, core_monotonic_ms());
        }
        return 0;
}

/* ---- setup --------------------------------------------------------------- */

/* Parses "1.2.3.4:53" or "[::1]:53" (port 0-65535). 0 or -EINVAL. */
static int parse_endpoint(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len) {
        char host[INET6_ADDRSTRLEN + 2];
        const char *colon = strrchr(s, ':');
        char *end = NULL;
        if (!colon || (size_t)(colon - s) >= sizeof(host))
                return -EINVAL;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        errno = 0;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (errno || !colon[1] || *end || port > 65535)
                return -EINVAL;
        memset(ret, 0, sizeof(*ret));
        size_t hl = strlen(host);
        if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
                struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ret;
                host[hl - 1] = '\0';
                if (inet_pton(AF_INET6, host + 1, &a6->sin6_addr) != 1)
                        return -EINVAL;
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t)port);
                *ret_len = sizeof(*a6);
                return 0;
        }
        struct sockaddr_in *a4 = (struct sockaddr_in *)ret;
        if (inet_pton(AF_INET, host, &a4->sin_addr) != 1)
                return -EINVAL;
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *ret_len = sizeof(*a4);
        return 0;
}

static uint16_t endpoint_port(const struct sockaddr_storage *a) {
        return ntohs(a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
                                              : ((const struct sockaddr_in *)a)->sin_port);
}

static int load_policy(const char *path) {
        _cleanup_free_ char *text = NULL;
        _cleanup_error_ sb_error *err = NULL;
        size_t len = 0;
        int r = core_read_file(path, POLICY_MAX_BYTES, &text, &len);
        if (r < 0)
                return log_error_errno(r, "read policy %s: %m", path);
        cJSON *json = cJSON_ParseWithLength(text, len);
        if (!json)
                return log_error_errno(-EINVAL, "policy %s is not JSON", path);
        r = pol_policy_parse(json, &policy, &err);
        cJSON_Delete(json);
        if (r < 0)
                return log_error_errno(r, "policy %s: %s", path, err ? err->message : "invalid");
        return 0;
}

/* Binds UDP, then TCP on the same port (the one the kernel chose for UDP
 * when the port asked is 0). */
static int bind_sockets(int *ret_udp, int *ret_tcp) {
        _cleanup_close_ int udp = socket(cfg.listen.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        _cleanup_close_ int tcp = socket(cfg.listen.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (udp < 0 || tcp < 0)
                return log_error_errno(negative_errno(), "socket: %m");
        if (bind(udp, (struct sockaddr *)&cfg.listen, cfg.listen_len) < 0)
                return log_error_errno(negative_errno(), "bind UDP: %m");
        socklen_t len = cfg.listen_len;
        if (getsockname(udp, (struct sockaddr *)&cfg.listen, &len) < 0)
                return log_error_errno(negative_errno(), "getsockname: %m");
        (void)setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(tcp, (struct sockaddr *)&cfg.listen, cfg.listen_len) < 0 || listen(tcp, 64) < 0)
                return log_error_errno(negative_errno(), "bind TCP port %u: %m", endpoint_port(&cfg.listen));
        *ret_udp = TAKE_FD(udp);
        *ret_tcp = TAKE_FD(tcp);
        return 0;
}

/* Runs after the sockets are bound (port 53 needs root) and before any
 * packet is read: the filter parses hostile input, so a bug in it must not
 * hold root or a capability. Order: the bounding set while CAP_SETPCAP is
 * still held, groups and gids while setgid is allowed, uids last; then
 * verify that nothing is left and that root cannot be regained. */
static int drop_privileges(const char *user) {
        int r;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return log_error_errno(negative_errno(), "no_new_privs: %m");
        if (getuid() != 0 && geteuid() != 0)
                return core_caps_set(0) < 0 ? log_error_errno(-EPERM, "cannot clear capabilities") : 0;
        struct passwd *pw = getpwnam(user);
        if (!pw || pw->pw_uid == 0 || pw->pw_gid == 0)
                return log_error_errno(-ESRCH, "user %s: not found or privileged", user);
        uid_t uid = pw->pw_uid;
        gid_t gid = pw->pw_gid;
        if ((r = core_caps_bound(0)) < 0)
                return log_error_errno(r, "drop bounding set: %m");
        if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
                return log_error_errno(negative_errno(), "switch to user %s: %m", user);
        if ((r = core_caps_set(0)) < 0 || (r = core_caps_verify(0)) < 0)
                return log_error_errno(r, "capabilities left after the switch: %m");
        if (setuid(0) == 0 || setgid(0) == 0)
                return log_error_errno(-EPERM, "root could be regained; refusing to run");
        return 0;
}

static void on_signal(int sig) {
        stop = 1;
}

static void usage(FILE *f) {
        fputs("usage: sandbox-netd --listen ADDR:PORT --upstream ADDR:PORT --policy FILE\n"
              "                    [--never CIDR]... [--user NAME] [--timeout-ms N]\n",
              f);
}

static int parse_args(int argc, char **argv) {
        static const struct option opts[] = {
                { "listen", required_argument, NULL, 'l' },  { "upstream", required_argument, NULL, 'u' },
                { "policy", required_argument, NULL, 'p' },  { "never", required_argument, NULL, 'n' },
                { "user", required_argument, NULL, 'U' },    { "timeout-ms", required_argument, NULL, 't' },
                { "ack", no_argument, NULL, 'a' },           { "help", no_argument, NULL, 'h' },
                {},
        };
        bool have_listen = false, have_upstream = false;
        int c;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                _cleanup_free_ char *why = NULL;
                switch (c) {
                case 'l':
                        if (parse_endpoint(optarg, &cfg.listen, &cfg.listen_len) < 0)
                                return log_error_errno(-EINVAL, "--listen %s: expected ADDR:PORT", optarg);
                        have_listen = true;
                        break;
                case 'u':
                        if (parse_endpoint(optarg, &cfg.upstream, &cfg.upstream_len) < 0 ||
                            endpoint_port(&cfg.upstream) == 0)
                                return log_error_errno(-EINVAL, "--upstream %s: expected ADDR:PORT", optarg);
                        have_upstream = true;
                        break;
                case 'p':
                        cfg.policy_path = optarg;
                        break;
                case 'n':
                        if (cfg.n_never >= MAX_NEVER || pol_cidr_parse(optarg, &cfg.never[cfg.n_never], &why) < 0)
                                return log_error_errno(-EINVAL, "--never %s: %s", optarg, why ? why : "too many");
                        cfg.n_never++;
                        break;
                case 'U':
                        cfg.user = optarg;
                        break;
                case 'a':
                        cfg.ack = true;
                        break;
                case 't':
                        cfg.timeout_ms = atoi(optarg);
                        if (cfg.timeout_ms < 100 || cfg.timeout_ms > 60000)
                                return log_error_errno(-EINVAL, "--timeout-ms must be 100-60000");
                        break;
                case 'h':
                        usage(stdout);
                        exit(0);
                default:
                        return -EINVAL;
                }
        }
        if (!have_listen || !have_upstream || !cfg.policy_path || optind != argc)
                return usage(stderr), -EINVAL;
        return 0;
}

static int emit_ready(void) {
        char a[INET6_ADDRSTRLEN], ep[INET6_ADDRSTRLEN + 10];
        const void *addr = cfg.listen.ss_family == AF_INET6
                                   ? (const void *)&((struct sockaddr_in6 *)&cfg.listen)->sin6_addr
                                   : (const void *)&((struct sockaddr_in *)&cfg.listen)->sin_addr;
        inet_ntop(cfg.listen.ss_family, addr, a, sizeof(a));
        snprintf(ep, sizeof(ep), cfg.listen.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", a,
                 endpoint_port(&cfg.listen));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ready", true);
        cJSON_AddStringToObject(o, "listen", ep);
        cJSON_AddNumberToObject(o, "uid", getuid());
        return emit(o);
}

int main(int argc, char **argv) {
        _cleanup_close_ int udp = -EBADF, tcp = -EBADF;
        struct sigaction sa = { .sa_handler = on_signal };
        log_set_ident("sandbox-netd");
        if (parse_args(argc, argv) < 0)
                return 2;
        for (size_t i = 0; i < MAX_INFLIGHT; i++)
                slots[i].fd = -EBADF;
        /* Root-only steps first: the policy file may be readable by root
         * only, and a low port needs CAP_NET_BIND_SERVICE. */
        if (load_policy(cfg.policy_path) < 0 || bind_sockets(&udp, &tcp) < 0 || drop_privileges(cfg.user) < 0)
                return 1;
        signal(SIGPIPE, SIG_IGN); /* a reader gone: emit() reports -EIO */
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        if (emit_ready() < 0)
                return 1;
        int r = run(udp, tcp);
        /* Only the loop accepts, so with no TCP thread left none can start. */
        if (atomic_load(&tcp_clients) == 0)
                pol_policy_free(policy);
        return r < 0 ? 1 : 0;
}
