/* sandbox-netd: the unprivileged process that runs the DNS filter and the
 * egress proxy of one session (DESIGN §2, §5.2). It parses hostile traffic,
 * so it holds no privilege: when started as root it binds its sockets and
 * loads the session CA, then drops to an unprivileged user with no
 * capabilities and no_new_privs before it reads a single packet.
 *
 * Command line (the standalone / test mode; the fd-3 control socket for
 * sandboxd comes later and will carry the same JSON lines):
 *
 *   sandbox-netd --listen ADDR:PORT [--listen-netns PATH] --upstream ADDR:PORT --policy FILE
 *                [--never CIDR]... [--user NAME] [--timeout-ms N] [--ack]
 *                [--proxy ADDR:PORT [--proxy6 [ADDR6]:PORT] [--ca-cert FILE --ca-key FILE [--ca-trusted]]
 *                 [--upstream-ca FILE] [--name NAME]]
 *
 * With --listen-netns PATH (a pod sandbox's network namespace, as an nsfs
 * file such as /proc/PID/fd/N), the DNS listeners are made inside that
 * namespace and everything else (the upstream sockets) in netd's own.
 *
 * With --proxy it also serves the egress proxy (policy/proxy.c) on TCP
 * ADDR:PORT (PORT 0: a free port, shown as "proxy" in the ready line): one
 * thread per connection, at most MAX_PROXY_CLIENTS at once. A connection
 * nftables redirected there (SO_ORIGINAL_DST) is served transparently; one
 * that addressed the proxy itself is an HTTP_PROXY / HTTPS_PROXY client.
 * The proxy resolves names through --upstream itself. Without --ca-cert,
 * hosts whose policy entry has rules are refused (they need termination).
 * --ca-trusted says the sandbox trusts that CA: a name the policy refuses
 * on port 443 then gets its 403 inside TLS, with a leaf the CA mints for
 * that name (pol_tls_deny), instead of a 403 to the CONNECT or a TLS
 * alert that HTTPS clients show no text of.
 *
 * FILE holds the policy (the networkPolicy value), or the envelope sandboxd
 * writes: {"networkPolicy": P, "never": ["CIDR", ...], "generation": N}.
 * The envelope's never list is added to --never for as long as that file
 * content is in force (sandboxd sends the host's current addresses with
 * every reload, so an address added to the host later is never reachable
 * once it is pushed), and every pin line judged under it carries
 * "generation": N, so the reader can refuse pins judged under a policy it
 * has already replaced.
 *
 * Policy reload without a restart: rewrite FILE in place (same inode, e.g.
 * O_TRUNC and write; a rename would leave netd reading the old inode), then
 * send SIGHUP. netd re-reads it through the descriptor it opened as root
 * (after the drop it may not be allowed to open FILE again), swaps it in for
 * every query and connection that starts afterwards, and reports
 * {"reloaded":true,"bytes":N} or {"reloaded":false,"message":"..."} (the
 * policy in force then stays unchanged). The answer comes once every live
 * proxied connection has been judged again under the new policy and each
 * one it decides differently (verdict or rule set) is cut
 * (pol_proxy_live_update()).
 *
 * It answers DNS on ADDR:PORT over UDP and TCP (PORT 0: a free port, the
 * same for both), judges queries with policy/dns.c against the
 * networkPolicy value in FILE, and forwards allowed ones to the upstream
 * resolver over the transport the client used. stdout carries one JSON
 * object per line:
 *   {"ready":true,"listen":"127.0.0.1:5353","uid":65534}  once, after setup
 *   {"pin":"1.2.3.4","ttl":30,"name":"x.test","generation":N} per accepted address
 *   {"deny":"evil.test","qtype":"A","layer":"default","message":"..."}
 *   {"deny":"evil.test","port":443,"layer":"proxy","reason":"not-allowed",
 *    "rule":"<verdict detail>","message":"..."}                 per proxy refusal
 * Ordering contract: every pin line of an answer is written (and flushed)
 * before that answer is sent to the client; with --ack, netd also waits for
 * the reader's acknowledgement ('\n' on stdin) of each pin line, so the
 * address is in nftables before the client can learn it. If stdout cannot
 * take the line (or no ack comes in time), the client gets SERVFAIL instead
 * of the answer. With --ack, netd also exits when the writer of stdin hangs
 * up (sandboxd died): an orphan could pin nothing and would hold the
 * gateway's ports against the next daemon's netd.
 *
 * Event loop: poll(2) over the UDP socket, the TCP listener and one
 * connected UDP socket per query in flight (a fresh source port and id per
 * query, RFC 5452). TCP clients are slow by nature, so each connection gets
 * its own thread with blocking I/O bounded by socket timeouts; both their
 * count and their message size are bounded. */
#include <arpa/inet.h>
#include <fcntl.h>
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
#include <sched.h>
#include <sys/socket.h>
#include <time.h>
#include <linux/netfilter_ipv4.h>
#include <openssl/ssl.h>
#include <cjson/cJSON.h>
#include "libcore/caps.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "policy/dns.h"
#include "policy/policy.h"
#include "policy/proxy.h"

#define MAX_INFLIGHT 128      /* UDP queries waiting for upstream */
#define MAX_TCP_CLIENTS 32
#define MAX_NEVER 1024
#define TCP_IDLE_MS 10000     /* a TCP client that says nothing is dropped */
#define POLICY_MAX_BYTES (1 << 20)
#define MAX_PROXY_CLIENTS 256 /* proxy connections served at once */

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
        bool proxy;        /* --proxy given */
        struct sockaddr_storage proxy_listen;
        socklen_t proxy_listen_len;
        bool proxy6;       /* --proxy6 given: a second listener, IPv6 */
        struct sockaddr_storage proxy6_listen;
        socklen_t proxy6_listen_len;
        const char *ca_cert, *ca_key, *upstream_ca, *name;
        bool ca_trusted;   /* --ca-trusted: refusals on 443 are answered inside TLS */
        const char *listen_netns; /* --listen-netns: the network namespace the DNS listeners are made in */
} config;

typedef struct inflight {
        int fd; /* connected to upstream; -EBADF when the slot is free */
        pol_dns_query q;
        struct sockaddr_storage client;
        socklen_t client_len;
        uint64_t deadline_ms;
} inflight;

/* A policy and the proxy environment that judges with it. Every DNS query
 * and every proxied connection holds a reference while it uses one (a
 * proxied connection keeps pointers into its policy for its whole life), so
 * a reload swaps `current` at once for everything that starts afterwards,
 * cuts the live connections the new one decides differently, and the old
 * policy is freed by its last user. */
typedef struct snapshot {
        pol_policy *policy;
        pol_proxy_env env;
        /* The never list in force with this policy: --never, plus the
         * "never" of an envelope (sandboxd sends the host's current
         * addresses with every reload). */
        pol_cidr *never;
        size_t n_never;
        /* The envelope's "generation" (0 without one): every pin line
         * judged under this snapshot carries it, so sandboxd can drop pins
         * judged under a policy it has already replaced. */
        uint64_t generation;
        unsigned refs; /* under snap_lock */
} snapshot;

static config cfg = { .user = "nobody", .timeout_ms = 3000 };
static pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
static snapshot *current;
static int policy_fd = -EBADF; /* FILE, opened before the privilege drop */
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int tcp_clients;
static atomic_int proxy_clients;
static pol_proxy_env proxy_env; /* everything but the policy */
static volatile sig_atomic_t stop, reload;

static snapshot *snap_get(void) {
        pthread_mutex_lock(&snap_lock);
        snapshot *s = current;
        s->refs++;
        pthread_mutex_unlock(&snap_lock);
        return s;
}

static void snap_put(snapshot *s) {
        if (!s)
                return;
        pthread_mutex_lock(&snap_lock);
        bool last = --s->refs == 0;
        pthread_mutex_unlock(&snap_lock);
        if (last) {
                pol_policy_free(s->policy);
                free(s->never);
                free(s);
        }
}
DEFINE_TRIVIAL_CLEANUP_FUNC(snapshot, snap_put);

/* What a policy file holds besides the policy (see read_policy). */
typedef struct envelope {
        pol_cidr *never; /* malloc'd, may be NULL */
        size_t n_never;
        uint64_t generation;
} envelope;

/* Makes p, with the never list cfg.never + e->never and e's generation, the
 * policy of everything that starts from now on (takes p and e->never). */
static int snap_install(pol_policy *p, envelope *e) {
        snapshot *n = calloc(1, sizeof(*n)), *old;
        size_t extra = e ? e->n_never : 0;
        pol_cidr *never = n ? calloc(cfg.n_never + extra + 1, sizeof(*never)) : NULL;
        if (!n || !never) {
                free(n);
                free(never);
                if (e)
                        free(e->never), e->never = NULL;
                pol_policy_free(p);
                return -ENOMEM;
        }
        memcpy(never, cfg.never, cfg.n_never * sizeof(*never));
        if (extra)
                memcpy(never + cfg.n_never, e->never, extra * sizeof(*never));
        if (e)
                free(e->never), e->never = NULL;
        n->never = never;
        n->n_never = cfg.n_never + extra;
        n->generation = e ? e->generation : 0;
        n->policy = p;
        n->env = proxy_env;
        n->env.policy = p;
        n->env.never = n->never;
        n->env.n_never = n->n_never;
        n->refs = 1; /* current's own */
        pthread_mutex_lock(&snap_lock);
        old = current;
        current = n;
        pthread_mutex_unlock(&snap_lock);
        /* Every live proxied connection is judged again and cut unless the
         * new policy makes the same decision (rule 9), before the old
         * policy can be freed and before a reload is answered. */
        pol_proxy_live_update(&n->env);
        snap_put(old);
        return 0;
}

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
static int emit_pins(const pol_dns_result *res, uint64_t generation) {
        for (size_t i = 0; i < res->n_pins; i++) {
                char a[INET6_ADDRSTRLEN];
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "pin", pol_addr_format(&res->pins[i].addr, a, sizeof(a)));
                cJSON_AddNumberToObject(o, "ttl", res->pins[i].ttl);
                cJSON_AddStringToObject(o, "name", res->query.name);
                cJSON_AddNumberToObject(o, "generation", (double)generation);
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
static int pin_then_release(pol_dns_result *res, uint64_t generation) {
        emit_denial(res);
        if (emit_pins(res, generation) >= 0)
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
        _cleanup_(snap_putp) snapshot *snap = snap_get();
        pol_dns_result res;
        if (n < 0 || pol_dns_filter_query(snap->policy, snap->never, snap->n_never, buf, (size_t)n, false, &res) < 0)
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
        /* Judged by the policy in force now, not the one of the query. */
        _cleanup_(snap_putp) snapshot *snap = snap_get();
        if (pol_dns_filter_answer(snap->policy, snap->never, snap->n_never, &s->q, buf, (size_t)n, &res) < 0)
                return; /* -EBADMSG: a stray or a spoof; keep waiting */
        if (pin_then_release(&res, snap->generation) >= 0)
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
static int tcp_resolve(const snapshot *snap, pol_dns_result *res, uint8_t *buf) {
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
        if (r > 0 && pol_dns_filter_answer(snap->policy, snap->never, snap->n_never, &q, buf, len, res) >= 0)
                return pin_then_release(res, snap->generation);
        return pol_dns_servfail(&q, res);
}

static void *tcp_client(void *arg) {
        _cleanup_close_ int fd = (int)(intptr_t)arg;
        _cleanup_free_ uint8_t *buf = malloc(POL_DNS_TCP_MAX);
        set_timeouts(fd, TCP_IDLE_MS);
        for (size_t len = 0; buf && read_msg(fd, buf, &len) > 0;) {
                pol_dns_result res;
                _cleanup_(snap_putp) snapshot *snap = snap_get();
                if (pol_dns_filter_query(snap->policy, snap->never, snap->n_never, buf, len, true, &res) < 0)
                        break;
                emit_denial(&res);
                int r = res.action == POL_DNS_FORWARD ? tcp_resolve(snap, &res, buf) : 0;
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

/* ---- the egress proxy (policy/proxy.c) --------------------------------- */

static uint16_t endpoint_port(const struct sockaddr_storage *a) {
        return ntohs(a->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)a)->sin6_port
                                              : ((const struct sockaddr_in *)a)->sin_port);
}

/* One line per refusal, beside the DNS denials. Never a header value: the
 * event carries hosts, the rule and the proxy's own sentence only. */
static void proxy_event(const pol_proxy_event *ev, void *userdata) {
        if (ev->allow)
                return;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "deny", ev->host ? ev->host : "");
        cJSON_AddNumberToObject(o, "port", ev->port);
        cJSON_AddStringToObject(o, "layer", "proxy");
        cJSON_AddStringToObject(o, "reason", ev->reason ? ev->reason : "");
        if (ev->verdict)
                cJSON_AddStringToObject(o, "rule", ev->verdict->detail);
        cJSON_AddStringToObject(o, "message", ev->message ? ev->message : "");
        (void)emit(o); /* as for DNS: a lost event changes no verdict */
}

typedef struct proxy_conn {
        int fd;
        bool redirected;
        struct sockaddr_storage orig;
} proxy_conn;

static void *proxy_client(void *arg) {
        proxy_conn *pc = arg;
        snapshot *snap = snap_get();
        pol_proxy_serve(&snap->env, pc->fd, pc->redirected ? &pc->orig : NULL);
        snap_put(snap);
        free(pc);
        atomic_fetch_sub(&proxy_clients, 1);
        return NULL;
}

static bool sockaddr_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
        if (a->ss_family != b->ss_family)
                return false;
        if (a->ss_family == AF_INET6)
                return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                              sizeof(struct in6_addr)) == 0 &&
                       endpoint_port(a) == endpoint_port(b);
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr &&
               endpoint_port(a) == endpoint_port(b);
}

/* The destination the client dialled before nftables redirected it to us
 * (SO_ORIGINAL_DST reads conntrack's NAT record; IP6T_SO_ORIGINAL_DST has
 * the same value). A client that dialled the proxy itself has no NAT record,
 * or one naming our own address: then it is an explicit-proxy client. */
static bool original_dst(int fd, struct sockaddr_storage *ret) {
        struct sockaddr_storage local = {};
        socklen_t len = sizeof(*ret), llen = sizeof(local);
        memset(ret, 0, sizeof(*ret));
        /* The level by the listener's family: the IPv6 listener's
         * connections carry an IPv6 NAT record. */
        if (getsockname(fd, (struct sockaddr *)&local, &llen) < 0 ||
            getsockopt(fd, local.ss_family == AF_INET6 ? SOL_IPV6 : SOL_IP, SO_ORIGINAL_DST, ret, &len) < 0)
                return false;
        return !sockaddr_same(ret, &local);
}

/* Accepts one proxy connection into its own thread. Over the bound the
 * client is answered at once and closed: a full proxy never queues. */
static void proxy_accept(int listener) {
        static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n"
                                   "content-length: 0\r\n\r\n";
        _cleanup_close_ int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        pthread_t t;
        pthread_attr_t attr;
        if (fd < 0)
                return;
        if (atomic_fetch_add(&proxy_clients, 1) >= MAX_PROXY_CLIENTS) {
                atomic_fetch_sub(&proxy_clients, 1);
                (void)send(fd, busy, sizeof(busy) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
                return;
        }
        proxy_conn *pc = calloc(1, sizeof(*pc));
        if (!pc) {
                atomic_fetch_sub(&proxy_clients, 1);
                return;
        }
        pc->redirected = original_dst(fd, &pc->orig);
        pc->fd = fd;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, proxy_client, pc) == 0)
                TAKE_FD(fd);
        else {
                free(pc);
                atomic_fetch_sub(&proxy_clients, 1);
        }
        pthread_attr_destroy(&attr);
}

/* ---- the loop ---------------------------------------------------------- */

static void reload_policy(void);

/* proxy is -EBADF without --proxy: poll(2) ignores negative fds. The
 * signals that steer the loop (SIGTERM, SIGINT, SIGHUP) are blocked except
 * inside ppoll(), which unblocks them atomically with `waitmask`: a signal
 * can neither be lost between the flag check and the wait nor land in a
 * connection thread. */
static int run(int udp, int tcp, int proxy, int proxy6, const sigset_t *waitmask) {
        struct pollfd pfd[5 + MAX_INFLIGHT];
        inflight *owner[5 + MAX_INFLIGHT];
        while (!stop) {
                if (reload) {
                        reload = 0;
                        reload_policy();
                }
                uint64_t now = core_monotonic_ms(), next = now + 60000;
                nfds_t n = 4;
                pfd[0] = (struct pollfd){ .fd = udp, .events = POLLIN };
                pfd[1] = (struct pollfd){ .fd = tcp, .events = POLLIN };
                pfd[2] = (struct pollfd){ .fd = proxy, .events = POLLIN };
                pfd[3] = (struct pollfd){ .fd = proxy6, .events = POLLIN }; /* -EBADF without --proxy6 */
                for (size_t i = 0; i < MAX_INFLIGHT; i++)
                        if (slots[i].fd >= 0) {
                                owner[n] = &slots[i];
                                pfd[n++] = (struct pollfd){ .fd = slots[i].fd, .events = POLLIN };
                                next = MIN(next, slots[i].deadline_ms);
                        }
                nfds_t slots_end = n;
                /* With --ack, stdin is sandboxd's end of the pin handshake.
                 * When it hangs up, sandboxd is gone: nothing can pin an
                 * answer any more, and a netd nobody owns would hold the
                 * gateway's ports against the next daemon's. Only hang-up
                 * is asked for (events 0): acks stay for wait_ack(). */
                if (cfg.ack)
                        pfd[n++] = (struct pollfd){ .fd = STDIN_FILENO, .events = 0 };
                uint64_t wait = next > now ? next - now : 0;
                struct timespec ts = { .tv_sec = (time_t)(wait / 1000), .tv_nsec = (long)(wait % 1000) * 1000000 };
                int k = ppoll(pfd, n, &ts, waitmask);
                if (k < 0 && errno != EINTR)
                        return log_error_errno(negative_errno(), "poll: %m");
                if (k > 0 && cfg.ack && (pfd[slots_end].revents & (POLLHUP | POLLERR | POLLNVAL))) {
                        log_info("sandboxd closed its end of the ack pipe; exiting");
                        return 0;
                }
                for (nfds_t i = 4; k > 0 && i < slots_end; i++)
                        if (pfd[i].revents)
                                udp_answer(udp, owner[i]);
                if (k > 0 && pfd[0].revents)
                        udp_query(udp);
                if (k > 0 && pfd[1].revents)
                        tcp_accept(tcp);
                if (k > 0 && pfd[2].revents)
                        proxy_accept(proxy);
                if (k > 0 && pfd[3].revents)
                        proxy_accept(proxy6);
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

/* Reads and parses the policy through policy_fd, from its start: the same
 * descriptor serves the first load (as root) and every reload (after the
 * drop, when FILE itself may no longer be openable). On failure *ret_why
 * is a static or err-owned sentence. */
/* An envelope {"networkPolicy": P, "never": [CIDR...], "generation": N}
 * (what sandboxd writes) or a bare policy P (standalone use). A policy
 * object has only "allow" and "subnets", so the two never collide. */
static int parse_envelope(const cJSON *json, const cJSON **ret_policy, envelope *e, const char **ret_why) {
        const cJSON *pol = cJSON_GetObjectItemCaseSensitive(json, "networkPolicy");
        *e = (envelope){};
        if (!cJSON_IsObject(json) || !pol) {
                *ret_policy = json;
                return 0;
        }
        *ret_policy = pol;
        const cJSON *gen = cJSON_GetObjectItemCaseSensitive(json, "generation");
        const cJSON *never = cJSON_GetObjectItemCaseSensitive(json, "never");
        if (gen && (!cJSON_IsNumber(gen) || gen->valuedouble < 0 || gen->valuedouble > 9007199254740991.0))
                return *ret_why = "generation: must be a non-negative integer", -EINVAL;
        e->generation = gen ? (uint64_t)gen->valuedouble : 0;
        if (!never)
                return 0;
        int n = cJSON_IsArray(never) ? cJSON_GetArraySize(never) : -1;
        if (n < 0 || n > MAX_NEVER)
                return *ret_why = "never: must be an array of at most 1024 CIDRs", -EINVAL;
        if (n == 0)
                return 0;
        if (!(e->never = calloc((size_t)n, sizeof(*e->never))))
                return *ret_why = "out of memory", -ENOMEM;
        const cJSON *it;
        cJSON_ArrayForEach(it, never) {
                char *why = NULL;
                if (!cJSON_IsString(it) || pol_cidr_parse(it->valuestring, &e->never[e->n_never], &why) < 0) {
                        free(why);
                        free(e->never);
                        *e = (envelope){};
                        return *ret_why = "never: an element is not a CIDR", -EINVAL;
                }
                e->n_never++;
        }
        return 0;
}

static int read_policy(pol_policy **ret, envelope *ret_env, size_t *ret_len, sb_error **err,
                       const char **ret_why) {
        _cleanup_free_ char *text = malloc(POLICY_MAX_BYTES + 1);
        size_t len = 0;
        if (!text)
                return *ret_why = "out of memory", -ENOMEM;
        while (len <= POLICY_MAX_BYTES) {
                ssize_t n = pread(policy_fd, text + len, POLICY_MAX_BYTES + 1 - len, (off_t)len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return *ret_why = "cannot read it", negative_errno();
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        if (len > POLICY_MAX_BYTES)
                return *ret_why = "it is larger than 1 MiB", -EFBIG;
        cJSON *json = cJSON_ParseWithLength(text, len);
        if (!json)
                return *ret_why = "it is not JSON", -EINVAL;
        const cJSON *pol = NULL;
        int r = parse_envelope(json, &pol, ret_env, ret_why);
        if (r >= 0 && (r = pol_policy_parse(pol, ret, err)) < 0)
                *ret_why = *err ? (*err)->message : "invalid";
        cJSON_Delete(json);
        if (r < 0) {
                free(ret_env->never);
                *ret_env = (envelope){};
                return r;
        }
        *ret_len = len;
        return 0;
}

/* The first load, as root: opens FILE for good (reloads read it again
 * through the same descriptor). Returns the parsed policy in *ret. */
static int load_policy(const char *path, pol_policy **ret, envelope *ret_env) {
        _cleanup_error_ sb_error *err = NULL;
        const char *why = NULL;
        size_t len;
        policy_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (policy_fd < 0)
                return log_error_errno(negative_errno(), "read policy %s: %m", path);
        int r = read_policy(ret, ret_env, &len, &err, &why);
        if (r < 0)
                return log_error_errno(r, "policy %s: %s", path, why);
        return 0;
}

/* SIGHUP: FILE was rewritten in place (same inode) by its owner; parse it
 * again and make it the policy of every query and connection that starts
 * from now on. A document that does not parse changes nothing (the policy
 * in force stays; nothing is widened). Either way one line reports it:
 *   {"reloaded":true,"bytes":N}  or  {"reloaded":false,"message":"..."} */
static void reload_policy(void) {
        _cleanup_error_ sb_error *err = NULL;
        const char *why = NULL;
        pol_policy *p = NULL;
        envelope e = {};
        size_t len = 0;
        int r = read_policy(&p, &e, &len, &err, &why);
        uint64_t generation = e.generation;
        if (r >= 0 && (r = snap_install(p, &e)) < 0)
                why = "out of memory";
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "reloaded", r >= 0);
        if (r >= 0) {
                cJSON_AddNumberToObject(o, "bytes", (double)len);
                cJSON_AddNumberToObject(o, "generation", (double)generation);
        }
        else
                cJSON_AddStringToObject(o, "message", why);
        (void)emit(o);
}

static int bind_sockets_here(int *ret_udp, int *ret_tcp);

/* Binds UDP, then TCP on the same port (the one the kernel chose for UDP
 * when the port asked is 0). With --listen-netns, inside that network
 * namespace (a pod's, docs/KUBERNETES.md): a socket keeps the namespace it
 * was made in, so the listeners stay there after this thread returns to
 * its own, where the upstream sockets are made (a query forwarded from
 * inside the pod's namespace would meet the pod's own DNS redirect). Runs
 * as root, before any thread exists. */
static int bind_sockets(int *ret_udp, int *ret_tcp) {
        if (!cfg.listen_netns)
                return bind_sockets_here(ret_udp, ret_tcp);
        _cleanup_close_ int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int ns = open(cfg.listen_netns, O_RDONLY | O_CLOEXEC);
        if (home < 0 || ns < 0)
                return log_error_errno(negative_errno(), "--listen-netns %s: %m", cfg.listen_netns);
        if (setns(ns, CLONE_NEWNET) < 0)
                return log_error_errno(negative_errno(), "--listen-netns %s: setns: %m", cfg.listen_netns);
        int r = bind_sockets_here(ret_udp, ret_tcp);
        if (setns(home, CLONE_NEWNET) < 0) {
                /* Never serve from the wrong namespace. */
                log_error_errno(negative_errno(), "return to the own network namespace: %m");
                _exit(1);
        }
        return r;
}

/* With port 0 the kernel picks UDP's port, which a TCP socket of someone
 * else may hold: then another pick, a few times, before giving up (a fixed
 * port asked is tried once). */
static int bind_sockets_here(int *ret_udp, int *ret_tcp) {
        bool any_port = endpoint_port(&cfg.listen) == 0;
        for (int attempt = 0;; attempt++) {
                _cleanup_close_ int udp = socket(cfg.listen.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                _cleanup_close_ int tcp = socket(cfg.listen.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_storage addr = cfg.listen;
                socklen_t len = cfg.listen_len;
                int one = 1;
                if (udp < 0 || tcp < 0)
                        return log_error_errno(negative_errno(), "socket: %m");
                if (bind(udp, (struct sockaddr *)&addr, len) < 0)
                        return log_error_errno(negative_errno(), "bind UDP: %m");
                if (getsockname(udp, (struct sockaddr *)&addr, &len) < 0)
                        return log_error_errno(negative_errno(), "getsockname: %m");
                (void)setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
                if (bind(tcp, (struct sockaddr *)&addr, len) < 0) {
                        if (errno == EADDRINUSE && any_port && attempt < 32)
                                continue;
                        return log_error_errno(negative_errno(), "bind TCP port %u: %m", endpoint_port(&addr));
                }
                if (listen(tcp, 64) < 0)
                        return log_error_errno(negative_errno(), "listen TCP port %u: %m", endpoint_port(&addr));
                cfg.listen = addr;
                cfg.listen_len = len;
                *ret_udp = TAKE_FD(udp);
                *ret_tcp = TAKE_FD(tcp);
                return 0;
        }
}

/* The proxy's listener and everything it needs that only root can read
 * (the CA key is mode 0600) or that must not be read after the drop (the
 * system roots): done before drop_privileges(). */
static int setup_proxy(int *ret_fd) {
        _cleanup_error_ sb_error *err = NULL;
        _cleanup_close_ int fd = -EBADF;
        int r, one = 1;
        if (!cfg.proxy)
                return 0;
        if (cfg.ca_cert && (r = pol_proxy_ca_load(cfg.ca_cert, cfg.ca_key, &proxy_env.ca, &err)) < 0)
                return log_error_errno(r, "load CA %s: %s", cfg.ca_cert, err ? err->message : "failed");
        if ((r = pol_proxy_upstream_ctx_new(cfg.upstream_ca, &proxy_env.upstream_tls, &err)) < 0)
                return log_error_errno(r, "upstream TLS: %s", err ? err->message : "failed");
        proxy_env = (pol_proxy_env){
                .never = cfg.never, .n_never = cfg.n_never,
                .resolver = cfg.upstream, .resolver_len = cfg.upstream_len,
                .upstream_tls = proxy_env.upstream_tls, .ca = proxy_env.ca, .deny_in_tls = cfg.ca_trusted,
                .policy_name = cfg.name ? cfg.name : "sandbox", .io_timeout_ms = cfg.timeout_ms,
                .event = proxy_event,
        };
        fd = socket(cfg.proxy_listen.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_error_errno(negative_errno(), "proxy socket: %m");
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        socklen_t len = cfg.proxy_listen_len;
        if (bind(fd, (struct sockaddr *)&cfg.proxy_listen, cfg.proxy_listen_len) < 0 || listen(fd, 128) < 0 ||
            getsockname(fd, (struct sockaddr *)&cfg.proxy_listen, &len) < 0)
                return log_error_errno(negative_errno(), "bind proxy port %u: %m", endpoint_port(&cfg.proxy_listen));
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* The IPv6 twin of the proxy's listener (--proxy6), where nftables
 * redirects the session's IPv6 TCP 80/443; the same environment. */
static int setup_proxy6(int *ret_fd) {
        _cleanup_close_ int fd = -EBADF;
        int one = 1;
        if (!cfg.proxy6)
                return 0;
        fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return log_error_errno(negative_errno(), "proxy socket: %m");
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        socklen_t len = cfg.proxy6_listen_len;
        if (bind(fd, (struct sockaddr *)&cfg.proxy6_listen, cfg.proxy6_listen_len) < 0 || listen(fd, 128) < 0 ||
            getsockname(fd, (struct sockaddr *)&cfg.proxy6_listen, &len) < 0)
                return log_error_errno(negative_errno(), "bind IPv6 proxy port %u: %m",
                                       endpoint_port(&cfg.proxy6_listen));
        *ret_fd = TAKE_FD(fd);
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
        if (sig == SIGHUP)
                reload = 1;
        else
                stop = 1;
}

static void usage(FILE *f) {
        fputs("usage: sandbox-netd --listen ADDR:PORT [--listen-netns PATH] --upstream ADDR:PORT --policy FILE\n"
              "                    [--never CIDR]... [--user NAME] [--timeout-ms N] [--ack]\n"
              "                    [--proxy ADDR:PORT [--proxy6 [ADDR6]:PORT] [--ca-cert FILE --ca-key FILE\n"
              "                     [--ca-trusted]]\n"
              "                     [--upstream-ca FILE] [--name NAME]]\n",
              f);
}

static int parse_args(int argc, char **argv) {
        static const struct option opts[] = {
                { "listen", required_argument, NULL, 'l' },  { "upstream", required_argument, NULL, 'u' },
                { "policy", required_argument, NULL, 'p' },  { "never", required_argument, NULL, 'n' },
                { "user", required_argument, NULL, 'U' },    { "timeout-ms", required_argument, NULL, 't' },
                { "ack", no_argument, NULL, 'a' },           { "help", no_argument, NULL, 'h' },
                { "proxy", required_argument, NULL, 'P' },   { "ca-cert", required_argument, NULL, 'C' },
                { "ca-key", required_argument, NULL, 'K' },  { "upstream-ca", required_argument, NULL, 'A' },
                { "name", required_argument, NULL, 'N' },    { "proxy6", required_argument, NULL, '6' },
                { "ca-trusted", no_argument, NULL, 'T' },  { "listen-netns", required_argument, NULL, 'L' },
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
                case 'P':
                        if (parse_endpoint(optarg, &cfg.proxy_listen, &cfg.proxy_listen_len) < 0)
                                return log_error_errno(-EINVAL, "--proxy %s: expected ADDR:PORT", optarg);
                        cfg.proxy = true;
                        break;
                case '6':
                        if (parse_endpoint(optarg, &cfg.proxy6_listen, &cfg.proxy6_listen_len) < 0 ||
                            cfg.proxy6_listen.ss_family != AF_INET6)
                                return log_error_errno(-EINVAL, "--proxy6 %s: expected [ADDR]:PORT", optarg);
                        cfg.proxy6 = true;
                        break;
                case 'C':
                        cfg.ca_cert = optarg;
                        break;
                case 'K':
                        cfg.ca_key = optarg;
                        break;
                case 'A':
                        cfg.upstream_ca = optarg;
                        break;
                case 'T':
                        cfg.ca_trusted = true;
                        break;
                case 'N':
                        cfg.name = optarg;
                        break;
                case 'L':
                        cfg.listen_netns = optarg;
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
        if (!cfg.ca_cert != !cfg.ca_key)
                return log_error_errno(-EINVAL, "--ca-cert and --ca-key go together");
        if (cfg.proxy6 && !cfg.proxy)
                return log_error_errno(-EINVAL, "--proxy6 needs --proxy");
        if ((cfg.ca_cert || cfg.upstream_ca) && !cfg.proxy)
                return log_error_errno(-EINVAL, "--ca-cert and --upstream-ca need --proxy");
        if (cfg.ca_trusted && !cfg.ca_cert)
                return log_error_errno(-EINVAL, "--ca-trusted needs --ca-cert and --ca-key");
        return 0;
}

/* "1.2.3.4:53" or "[::1]:53" into buf (at least INET6_ADDRSTRLEN + 10). */
static char *format_endpoint(const struct sockaddr_storage *ss, char *buf, size_t size) {
        char a[INET6_ADDRSTRLEN];
        const void *addr = ss->ss_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                                                     : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
        inet_ntop(ss->ss_family, addr, a, sizeof(a));
        snprintf(buf, size, ss->ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", a, endpoint_port(ss));
        return buf;
}

static int emit_ready(void) {
        char ep[INET6_ADDRSTRLEN + 10];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "ready", true);
        cJSON_AddStringToObject(o, "listen", format_endpoint(&cfg.listen, ep, sizeof(ep)));
        if (cfg.proxy)
                cJSON_AddStringToObject(o, "proxy", format_endpoint(&cfg.proxy_listen, ep, sizeof(ep)));
        if (cfg.proxy6)
                cJSON_AddStringToObject(o, "proxy6", format_endpoint(&cfg.proxy6_listen, ep, sizeof(ep)));
        cJSON_AddNumberToObject(o, "uid", getuid());
        return emit(o);
}

int main(int argc, char **argv) {
        _cleanup_close_ int udp = -EBADF, tcp = -EBADF, proxy = -EBADF, proxy6 = -EBADF;
        struct sigaction sa = { .sa_handler = on_signal };
        sigset_t steer, waitmask;
        pol_policy *policy = NULL;
        log_set_ident("sandbox-netd");
        if (parse_args(argc, argv) < 0)
                return 2;
        for (size_t i = 0; i < MAX_INFLIGHT; i++)
                slots[i].fd = -EBADF;
        /* Root-only steps first: the policy file may be readable by root
         * only, and a low port needs CAP_NET_BIND_SERVICE. */
        envelope env0 = {};
        if (load_policy(cfg.policy_path, &policy, &env0) < 0 || bind_sockets(&udp, &tcp) < 0 ||
            setup_proxy(&proxy) < 0 || setup_proxy6(&proxy6) < 0 || snap_install(policy, &env0) < 0 || drop_privileges(cfg.user) < 0)
                return 1;
        signal(SIGPIPE, SIG_IGN); /* a reader gone: emit() reports -EIO */
        /* Blocked before any thread exists, so threads inherit the mask
         * and only the loop's ppoll() takes these signals. */
        sigemptyset(&steer);
        sigaddset(&steer, SIGTERM);
        sigaddset(&steer, SIGINT);
        sigaddset(&steer, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &steer, &waitmask);
        sigdelset(&waitmask, SIGTERM);
        sigdelset(&waitmask, SIGINT);
        sigdelset(&waitmask, SIGHUP);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        if (emit_ready() < 0)
                return 1;
        int r = run(udp, tcp, proxy, proxy6, &waitmask);
        /* Only the loop accepts, so with no thread left none can start. */
        if (atomic_load(&tcp_clients) == 0 && atomic_load(&proxy_clients) == 0) {
                snap_put(current);
                closep(&policy_fd);
                pol_proxy_ca_free(proxy_env.ca);
                SSL_CTX_free(proxy_env.upstream_tls);
        }
        return r < 0 ? 1 : 0;
}
