/* Unit tests for libcore/nflog.c and the logging `deny` chain of
 * libcore/nft.c: every packet the host table denies is still rejected and
 * is reported through NFLOG (rate-limited), with the sandbox's interface,
 * protocol, destination address and port. Each network test runs in a
 * private network namespace it creates (unshare of the test thread, undone
 * in teardown) with the host table, veth "sbx7" into a "sandbox" child
 * namespace and a session policy that allows nothing. Destinations beyond
 * the host are routed to a veth pair inside that private namespace, and
 * the denial happens before any packet reaches it. Nothing leaves this
 * machine. The parser is also fed hand-made messages through a socket
 * pair. Needs root. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>
#include "libcore/net.h"
#include "libcore/nflog.h"
#include "libcore/util.h"
#include "policy/nftgen.h"

#define SLOT 7
#define IF "sbx7"
#define FLOOD 1000

static int orig_netns = -1;
static pid_t kid = -1;
static int to_kid = -1, from_kid = -1, nflog_fd = -1;

static core_net_pool test_pool(void) {
        core_net_pool p = { .prefix = 16 };
        inet_pton(AF_INET, "10.201.0.0", &p.base);
        return p;
}

/* ---- the "sandbox": a child in its own network namespace ---- */

typedef struct cmd {
        char op;
        struct in_addr dst;
        uint16_t port;
} cmd;

typedef struct reply {
        int r, ms, refused;
} reply;

static int connect_tcp(struct in_addr dst, uint16_t port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), r = 0, e = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = dst };
        socklen_t l = sizeof(e);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
                r = -errno;
        /* Bounded, so a silently dropped SYN fails the test instead of
         * hanging it. */
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        if (r == 0 && poll(&p, 1, 3000) == 0)
                r = -ETIMEDOUT;
        else if (r == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e)
                r = -e;
        close(fd);
        return r;
}

/* One datagram; the error an ICMP answer leaves on the socket, or
 * -ETIMEDOUT when none came. */
static int send_udp(struct in_addr dst, uint16_t port) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = dst };
        char c;
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || send(fd, "q", 1, 0) < 0)
                r = -errno;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (r == 0 && poll(&p, 1, 3000) == 0)
                r = -ETIMEDOUT;
        else if (r == 0 && recv(fd, &c, 1, MSG_DONTWAIT) < 0)
                r = -errno;
        close(fd);
        return r;
}

static _noreturn_ void kid_main(int rd, int wr) {
        core_net_pool p = test_pool();
        reply rep = { .r = unshare(CLONE_NEWNET) < 0 ? -errno : 0 };
        cmd c;
        if (write(wr, &rep, sizeof(rep)) != sizeof(rep))
                _exit(1);
        while (read(rd, &c, sizeof(c)) == sizeof(c)) {
                uint64_t t0 = core_monotonic_ms();
                rep = (reply) {};
                switch (c.op) {
                case 'c': rep.r = core_net_configure_inside(&p, SLOT, true, NULL); break;
                case 't': rep.r = connect_tcp(c.dst, c.port); break;
                case 'u': rep.r = send_udp(c.dst, c.port); break;
                case 'f':
                        for (int i = 0; i < FLOOD; i++)
                                rep.refused += connect_tcp(c.dst, c.port) == -ECONNREFUSED;
                        break;
                default: _exit(0);
                }
                rep.ms = (int) (core_monotonic_ms() - t0);
                if (write(wr, &rep, sizeof(rep)) != sizeof(rep))
                        _exit(1);
        }
        _exit(0);
}

static reply ask(char op, const char *dst, uint16_t port) {
        cmd c = { .op = op, .port = port };
        reply rep;
        if (dst)
                inet_pton(AF_INET, dst, &c.dst);
        if (op && write(to_kid, &c, sizeof(c)) != sizeof(c))
                fail_msg("child gone");
        if (read(from_kid, &rep, sizeof(rep)) != sizeof(rep))
                fail_msg("no reply from child for '%c'", op);
        return rep;
}

static int start_kid(void) {
        int down[2], up[2];
        if (pipe2(down, O_CLOEXEC) < 0 || pipe2(up, O_CLOEXEC) < 0)
                return -1;
        kid = fork();
        if (kid < 0)
                return -1;
        if (kid == 0) {
                close(down[1]);
                close(up[0]);
                kid_main(down[0], up[1]);
        }
        close(down[0]);
        close(up[1]);
        to_kid = down[1];
        from_kid = up[0];
        return ask(0, NULL, 0).r; /* in its own netns */
}

/* ---- fixture ---- */

static int sh(const char *cmdline) {
        int r = system(cmdline);
        if (r != 0)
                fprintf(stderr, "failed: %s\n", cmdline);
        return r == 0 ? 0 : -1;
}

/* Host table, a routed "outside" (veth pair lst0/lst1, both in this
 * private namespace, with a documentation and a link-local network), the
 * sandbox behind sbx7 with a custom policy that allows nothing, and the
 * NFLOG group open. */
static int setup(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        pol_policy *pol = NULL;
        cJSON *j = cJSON_Parse("{\"allow\":[]}");
        int r = -1;
        orig_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (!j || orig_netns < 0 || unshare(CLONE_NEWNET) < 0)
                goto out;
        pol_nft_host_extend();
        pol_nft_host_reset();
        if (core_net_host_setup(&p, &err) < 0 ||
            sh("ip link add lst0 type veth peer name lst1 && ip addr add 192.0.2.1/24 dev lst0 && "
               "ip addr add 169.254.1.1/16 dev lst0 && ip link set lst0 up && ip link set lst1 up") < 0 ||
            start_kid() < 0 || core_veth_create(&p, SLOT, kid, &err) < 0 || ask('c', NULL, 0).r < 0 ||
            pol_policy_parse(j, &pol, &err) < 0 ||
            pol_nft_session_apply(IF, pol, core_net_host_addr(&p, SLOT), &err) < 0)
                goto out;
        nflog_fd = core_nflog_open(CORE_NFLOG_GROUP, &err);
        r = nflog_fd < 0 ? -1 : 0;
out:
        if (err)
                fprintf(stderr, "setup: %s\n", err->message);
        sb_error_free(err);
        pol_policy_free(pol);
        cJSON_Delete(j);
        return r;
}

/* Kills the child and returns to the original namespace; the private
 * ones, with their table and links, go away with their last reference. */
static int teardown(void **state) {
        if (nflog_fd >= 0)
                close(nflog_fd);
        nflog_fd = -1;
        if (kid > 0) {
                kill(kid, SIGKILL);
                waitpid(kid, NULL, 0);
        }
        kid = -1;
        if (to_kid >= 0)
                close(to_kid);
        if (from_kid >= 0)
                close(from_kid);
        to_kid = from_kid = -1;
        (void) core_veth_delete(SLOT, NULL);
        (void) core_net_host_teardown(NULL);
        if (orig_netns < 0)
                return 0;
        int r = setns(orig_netns, CLONE_NEWNET);
        close(orig_netns);
        orig_netns = -1;
        return r;
}

/* ---- collecting reports ---- */

#define MAX_SEEN 64

typedef struct seen {
        core_nflog_packet p[MAX_SEEN];
        char prefix[MAX_SEEN][64];
        int n, total;
} seen;

static void collect(const core_nflog_packet *p, void *userdata) {
        seen *s = userdata;
        if (s->n < MAX_SEEN) {
                s->p[s->n] = *p;
                snprintf(s->prefix[s->n], sizeof(s->prefix[0]), "%s", p->prefix ? p->prefix : "");
                s->p[s->n].prefix = s->prefix[s->n];
                s->n++;
        }
        s->total++;
}

/* Reads reports until one arrives (or 2 s pass), then whatever else is
 * pending. The kernel queues a report before the rejecting rule runs, so
 * by the time the child saw its connect refused the report is there. */
static seen *read_reports(void) {
        seen *s = calloc(1, sizeof(*s));
        struct pollfd p = { .fd = nflog_fd, .events = POLLIN };
        assert_non_null(s);
        while (s->total == 0 && poll(&p, 1, 2000) == 1)
                assert_true(core_nflog_read(nflog_fd, collect, s) >= 0);
        return s;
}

/* The one report of the child's packet to dst:port over proto. */
static void assert_one_report(const seen *s, uint8_t proto, const char *dst, uint16_t port) {
        core_net_pool pool = test_pool();
        struct in_addr want, src = core_net_sandbox_addr(&pool, SLOT);
        char a[INET_ADDRSTRLEN];
        inet_pton(AF_INET, dst, &want);
        if (s->total != 1)
                fail_msg("expected one report for %s:%u, got %d", dst, port, s->total);
        const core_nflog_packet *p = &s->p[0];
        assert_string_equal(p->ifname, IF);
        assert_int_equal(p->ifindex, if_nametoindex(IF));
        assert_int_equal(p->family, AF_INET);
        assert_int_equal(p->proto, proto);
        assert_string_equal(inet_ntop(AF_INET, &p->daddr.v4, a, sizeof(a)), dst);
        assert_int_equal(p->daddr.v4.s_addr, want.s_addr);
        assert_int_equal(p->saddr.v4.s_addr, src.s_addr);
        assert_int_equal(p->dport, port);
        assert_string_equal(p->prefix, CORE_NFLOG_PREFIX);
}

/* ---- tests ---- */

static void test_denied_tcp_connect_is_refused_and_reported(void **state) {
        reply t = ask('t', "192.0.2.10", 8080); /* documentation range: forbidden */
        /* Refused by a reset, not timed out (connect_tcp's bound), which
         * is what makes the denial immediate. */
        assert_int_equal(t.r, -ECONNREFUSED);
        seen *s = read_reports();
        assert_one_report(s, IPPROTO_TCP, "192.0.2.10", 8080);
        free(s);
}

static void test_denied_udp_send_is_rejected_and_reported(void **state) {
        reply u = ask('u', "192.0.2.10", 5353);
        assert_int_equal(u.r, -EHOSTUNREACH); /* ICMP admin-prohibited, not a timeout */
        seen *s = read_reports();
        assert_one_report(s, IPPROTO_UDP, "192.0.2.10", 5353);
        free(s);
}

/* Host protection (DESIGN §5.1 rule 5) is reported like a session's own
 * denial: cloud metadata through forwarding, the host itself on input. */
static void test_host_protection_denials_are_reported_too(void **state) {
        core_net_pool pool = test_pool();
        struct in_addr gw = core_net_host_addr(&pool, SLOT);
        char gws[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &gw, gws, sizeof(gws));

        /* Not port 80 or 443: a custom policy's TCP to those is redirected
         * to the egress proxy, which reports its own denials. */
        assert_int_equal(ask('t', "169.254.169.254", 8080).r, -ECONNREFUSED);
        seen *s = read_reports();
        assert_one_report(s, IPPROTO_TCP, "169.254.169.254", 8080);
        free(s);

        assert_int_equal(ask('t', gws, 22).r, -ECONNREFUSED);
        s = read_reports();
        assert_one_report(s, IPPROTO_TCP, gws, 22);
        free(s);
}

static void test_flood_is_rejected_in_full_but_reported_at_the_limit(void **state) {
        reply f = ask('f', "192.0.2.10", 8443); /* 443 would go to the proxy */
        assert_int_equal(f.refused, FLOOD);
        seen *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        assert_true(core_nflog_read(nflog_fd, collect, s) >= 0);
        /* The bucket starts full (the burst) and refills at the rate; one
         * extra second of refill for the rounding of the elapsed time. */
        int bound = CORE_NFLOG_BURST + CORE_NFLOG_RATE * (f.ms / 1000 + 2);
        if (s->total < CORE_NFLOG_BURST || s->total > bound || s->total >= FLOOD / 2)
                fail_msg("%d reports for %d denied connects in %d ms (expected %d..%d)", s->total, FLOOD,
                         f.ms, CORE_NFLOG_BURST, bound);
        assert_string_equal(s->p[0].ifname, IF);
        free(s);
}

static void test_second_reader_of_the_group_is_refused_until_the_first_closes(void **state) {
        sb_error *err = NULL;
        assert_true(fcntl(nflog_fd, F_GETFD) & FD_CLOEXEC);
        assert_true(fcntl(nflog_fd, F_GETFL) & O_NONBLOCK);
        seen s = {};
        assert_int_equal(core_nflog_read(nflog_fd, collect, &s), 0); /* nothing pending */
        assert_int_equal(core_nflog_open(CORE_NFLOG_GROUP, &err), -EBUSY);
        assert_non_null(err);
        assert_non_null(strstr(err->message, "nflog: bind group 4242"));
        sb_error_free(err);
        err = NULL;
        close(nflog_fd);
        nflog_fd = core_nflog_open(CORE_NFLOG_GROUP, &err);
        assert_true(nflog_fd >= 0);
        assert_null(err);
}

/* ---- hand-made messages: the parser never trusts a length ---- */

static struct nlmsghdr *put_report(char *buf, uint8_t family) {
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
        struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
        g->nfgen_family = family;
        g->version = NFNETLINK_V0;
        g->res_id = htons(CORE_NFLOG_GROUP);
        return nlh;
}

static const uint8_t ipv4_udp[] = {
        0x45, 0, 0, 29, 0, 0, 0x40, 0, 64, IPPROTO_UDP, 0, 0, /* DF, ttl 64 */
        10, 201, 0, 15, 192, 0, 2, 10,                        /* src, dst */
        0x30, 0x39, 0x14, 0xe9, 0, 9, 0, 0,                   /* 12345 -> 5353 */
};

static void test_malformed_messages_are_skipped_and_valid_ones_parsed(void **state) {
        int sp[2];
        char buf[1024];
        seen s = {};
        assert_int_equal(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sp), 0);

        /* 1: valid IPv4/UDP, with prefix and no interface. */
        struct nlmsghdr *nlh = put_report(buf, NFPROTO_IPV4);
        mnl_attr_put_strz(nlh, NFULA_PREFIX, "p1");
        mnl_attr_put(nlh, NFULA_PAYLOAD, sizeof(ipv4_udp), ipv4_udp);
        assert_true(send(sp[1], buf, nlh->nlmsg_len, 0) > 0);
        /* 2: header claims more than was sent. */
        assert_true(send(sp[1], buf, nlh->nlmsg_len - 8, 0) > 0);
        /* 3: a payload attribute whose length runs past the message. */
        nlh = put_report(buf, NFPROTO_IPV4);
        struct nlattr *a = (struct nlattr *) mnl_nlmsg_get_payload_tail(nlh);
        mnl_attr_put(nlh, NFULA_PAYLOAD, sizeof(ipv4_udp), ipv4_udp);
        a->nla_len = 200;
        assert_true(send(sp[1], buf, nlh->nlmsg_len, 0) > 0);
        /* 4: IPv4 header cut short, and an IHL below 5. */
        nlh = put_report(buf, NFPROTO_IPV4);
        mnl_attr_put(nlh, NFULA_PAYLOAD, 12, ipv4_udp);
        assert_true(send(sp[1], buf, nlh->nlmsg_len, 0) > 0);
        uint8_t bad_ihl[sizeof(ipv4_udp)];
        memcpy(bad_ihl, ipv4_udp, sizeof(bad_ihl));
        bad_ihl[0] = 0x41;
        nlh = put_report(buf, NFPROTO_IPV4);
        mnl_attr_put(nlh, NFULA_PAYLOAD, sizeof(bad_ihl), bad_ihl);
        assert_true(send(sp[1], buf, nlh->nlmsg_len, 0) > 0);
        /* 5: no payload; a prefix without its NUL; a config message. */
        nlh = put_report(buf, NFPROTO_IPV4);
        mnl_attr_put(nlh, NFULA_PREFIX, 2, "ab");
        assert_true(send(sp[1], buf, nlh->nlmsg_len, 0) > 0);
        nlh->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
        assert_true(send(sp[1], buf, nlh->nlmsg_len, 0) > 0);
        /* 6: valid, transport header cut (ports unknown), a prefix without
         * NUL (dropped) and an interface index that does not exist. */
        nlh = put_report(buf, NFPROTO_IPV4);
        mnl_attr_put(nlh, NFULA_PREFIX, 2, "ab");
        mnl_attr_put_u32(nlh, NFULA_IFINDEX_INDEV, htonl(999999));
        mnl_attr_put(nlh, NFULA_PAYLOAD, 22, ipv4_udp);
        assert_true(send(sp[1], buf, nlh->nlmsg_len, 0) > 0);
        /* 7: a one-byte datagram. */
        assert_true(send(sp[1], buf, 1, 0) > 0);

        assert_int_equal(core_nflog_read(sp[0], collect, &s), 2);
        assert_int_equal(s.total, 2);
        assert_int_equal(s.p[0].family, AF_INET);
        assert_int_equal(s.p[0].proto, IPPROTO_UDP);
        assert_int_equal(s.p[0].dport, 5353);
        assert_int_equal(s.p[0].daddr.v4.s_addr, htonl(0xc000020a));
        assert_int_equal(s.p[0].saddr.v4.s_addr, htonl(0x0ac9000f));
        assert_int_equal(s.p[0].ifindex, 0);
        assert_string_equal(s.p[0].ifname, "");
        assert_string_equal(s.p[0].prefix, "p1");
        assert_int_equal(s.p[1].dport, 0);
        assert_int_equal(s.p[1].ifindex, 999999);
        assert_string_equal(s.p[1].ifname, "");
        assert_string_equal(s.p[1].prefix, "");
        close(sp[0]);
        close(sp[1]);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_denied_tcp_connect_is_refused_and_reported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_denied_udp_send_is_rejected_and_reported, setup, teardown),
                cmocka_unit_test_setup_teardown(test_host_protection_denials_are_reported_too, setup, teardown),
                cmocka_unit_test_setup_teardown(test_flood_is_rejected_in_full_but_reported_at_the_limit, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_second_reader_of_the_group_is_refused_until_the_first_closes,
                                                setup, teardown),
                cmocka_unit_test(test_malformed_messages_are_skipped_and_valid_ones_parsed),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
