/* Unit tests for libcore/conntrack.c: flushing a source's conntrack entries
 * removes its TCP, UDP and ICMP flows and no one else's, and an established
 * TCP flow whose entry was flushed is judged again by the ruleset on its
 * next packet (a rejecting rule then resets it). Each test runs in a
 * private network namespace it creates (unshare, undone in teardown), on
 * loopback only: the sources are 127.0.0.2 and 127.0.0.3, the destination
 * 127.0.0.1. Conntrack only tracks a namespace's packets once some rule
 * there uses it, so setup loads a small table with `ct state` rules through
 * the nft binary. Nothing leaves this machine. Needs root. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>
#include "libcore/conntrack.h"
#include "libcore/net.h"

#define SRC_A "127.0.0.2"
#define SRC_B "127.0.0.3"
#define DST "127.0.0.1"

static int orig_netns = -1;

static struct in_addr addr(const char *s) {
        struct in_addr a;
        assert_int_equal(inet_pton(AF_INET, s, &a), 1);
        return a;
}

/* Input chain of the test ruleset: established flows first, as in a
 * session chain (policy/nftgen.c), so only a flow without an entry meets
 * the rules after it. */
static const char ruleset[] =
        "table ip cttest {\n"
        "  chain in {\n"
        "    type filter hook input priority 0; policy accept;\n"
        "    ct state established,related accept\n"
        "  }\n"
        "}\n";

static int nft(const char *script) {
        FILE *f = popen("nft -f -", "we");
        if (!f)
                return -errno;
        fputs(script, f);
        int st = pclose(f);
        return st == 0 ? 0 : -EIO;
}

static int setup(void **state) {
        core_net_pool p = { .prefix = 16 };
        inet_pton(AF_INET, "10.201.0.0", &p.base);
        orig_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (orig_netns < 0 || unshare(CLONE_NEWNET) < 0)
                return -1;
        if (core_net_configure_inside(&p, 0, false, NULL) < 0 || nft(ruleset) < 0)
                return -1;
        return 0;
}

static int teardown(void **state) {
        /* The namespace, its ruleset and its conntrack table go away with
         * the last reference; the tests close every socket they open. */
        if (orig_netns < 0)
                return 0;
        int r = setns(orig_netns, CLONE_NEWNET);
        close(orig_netns);
        orig_netns = -1;
        return r;
}

static int listener(int type, uint16_t *ret_port) {
        int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = addr(DST) };
        socklen_t l = sizeof(sa);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        if (type == SOCK_STREAM)
                assert_int_equal(listen(fd, 8), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *) &sa, &l), 0);
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

/* A socket bound to `from`, connected to DST:port. */
static int client(int type, int proto, const char *from, uint16_t port) {
        int fd = socket(AF_INET, type | SOCK_CLOEXEC, proto);
        struct sockaddr_in src = { .sin_family = AF_INET, .sin_addr = addr(from) };
        struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addr(DST) };
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *) &src, sizeof(src)), 0);
        assert_int_equal(connect(fd, (struct sockaddr *) &dst, sizeof(dst)), 0);
        return fd;
}

static void ping_from(int fd) {
        struct icmphdr h = { .type = ICMP_ECHO, .un.echo = { .id = htons(77), .sequence = htons(1) } };
        uint32_t sum = 0;
        for (size_t i = 0; i < sizeof(h) / 2; i++)
                sum += ((uint16_t *) &h)[i];
        while (sum >> 16)
                sum = (sum & 0xffff) + (sum >> 16);
        h.checksum = (uint16_t) ~sum;
        assert_int_equal(send(fd, &h, sizeof(h), 0), sizeof(h));
}

static int count(const char *src) {
        _cleanup_error_ sb_error *err = NULL;
        int r = core_conntrack_count_source(addr(src), &err);
        if (r < 0)
                fail_msg("count: %s", err->message);
        return r;
}

static void test_flush_deletes_every_flow_of_the_source_and_keeps_the_others(void **state) {
        uint16_t tport, uport;
        int tl = listener(SOCK_STREAM, &tport), ul = listener(SOCK_DGRAM, &uport);
        int ta = client(SOCK_STREAM, 0, SRC_A, tport), tb = client(SOCK_STREAM, 0, SRC_B, tport);
        int ua = client(SOCK_DGRAM, 0, SRC_A, uport), ia = client(SOCK_RAW, IPPROTO_ICMP, SRC_A, 0);
        assert_int_equal(send(ua, "x", 1, 0), 1);
        ping_from(ia);
        /* TCP, UDP and ICMP from A; TCP from B. */
        assert_int_equal(count(SRC_A), 3);
        assert_int_equal(count(SRC_B), 1);

        _cleanup_error_ sb_error *err = NULL;
        int r = core_conntrack_flush_source(addr(SRC_A), &err);
        if (r < 0)
                fail_msg("flush: %s", err->message);
        assert_int_equal(r, 3);
        assert_int_equal(count(SRC_A), 0);
        assert_int_equal(count(SRC_B), 1);
        /* Nothing left to do is success, not an error. */
        assert_int_equal(core_conntrack_flush_source(addr(SRC_A), NULL), 0);
        close(tl), close(ul), close(ta), close(tb), close(ua), close(ia);
}

/* The policy-update case: a flow admitted before a rule that denies it
 * keeps flowing (its entry is established) until its entry is flushed;
 * then its next packet meets the rule and the sender is reset. */
static void test_flushed_established_flow_is_judged_again_and_reset(void **state) {
        uint16_t port;
        char buf[16];
        int l = listener(SOCK_STREAM, &port), c = client(SOCK_STREAM, 0, SRC_A, port);
        int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        assert_true(s >= 0);
        char rule[160];
        snprintf(rule, sizeof(rule), "add rule ip cttest in ip saddr %s tcp dport %u reject with tcp reset\n",
                 SRC_A, port);
        assert_int_equal(nft(rule), 0);

        assert_int_equal(send(c, "a", 1, MSG_NOSIGNAL), 1);
        struct pollfd p = { .fd = s, .events = POLLIN };
        assert_int_equal(poll(&p, 1, 3000), 1);
        assert_int_equal(recv(s, buf, sizeof(buf), 0), 1);

        assert_int_equal(core_conntrack_flush_source(addr(SRC_A), NULL), 1);
        assert_int_equal(send(c, "b", 1, MSG_NOSIGNAL), 1);
        /* The reset answers that very segment; bounded wait, no sleep. */
        p = (struct pollfd) { .fd = c, .events = POLLIN };
        assert_int_equal(poll(&p, 1, 3000), 1);
        assert_int_equal(recv(c, buf, sizeof(buf), 0), -1);
        assert_int_equal(errno, ECONNRESET);
        /* And the server never saw the denied byte. */
        assert_int_equal(recv(s, buf, sizeof(buf), MSG_DONTWAIT), -1);
        assert_int_equal(errno, EAGAIN);
        close(s), close(c), close(l);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_flush_deletes_every_flow_of_the_source_and_keeps_the_others,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_flushed_established_flow_is_judged_again_and_reset, setup,
                                                teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
