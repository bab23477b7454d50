/* Unit tests for libcore/net.c and libcore/nft.c: pool arithmetic, the host
 * nftables table, veth pairs and in-namespace configuration. Every test that
 * touches the network runs in a private network namespace the test creates
 * (unshare(CLONE_NEWNET) of the test thread, undone in teardown); the
 * "sandbox" is a forked child in a second private namespace. Nothing leaves
 * this machine. Also: the one-daemon-per-network-namespace lock, taken in
 * such private namespaces only. Needs root. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>
#include "libcore/net.h"
#include "libcore/util.h"

#define SLOT 3
#define PORT 8080

static int orig_netns = -1;
static pid_t child_pid = -1;
static int to_child = -1, from_child = -1;

static core_net_pool test_pool(void) {
        core_net_pool p = { .prefix = 16 };
        inet_pton(AF_INET, "10.201.0.0", &p.base);
        return p;
}

static int enter_private_netns(void **state) {
        orig_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (orig_netns < 0 || unshare(CLONE_NEWNET) < 0)
                return -1;
        return 0;
}

/* Kills the helper child (if a test failed half-way) and returns to the
 * original namespace; the private one, with its table and links, goes away
 * with its last reference. */
static int leave_private_netns(void **state) {
        if (child_pid > 0) {
                kill(child_pid, SIGKILL);
                waitpid(child_pid, NULL, 0);
                child_pid = -1;
        }
        if (to_child >= 0)
                close(to_child);
        if (from_child >= 0)
                close(from_child);
        to_child = from_child = -1;
        (void) core_veth_delete(SLOT, NULL);
        (void) core_net_host_teardown(NULL);
        int r = setns(orig_netns, CLONE_NEWNET);
        close(orig_netns);
        orig_netns = -1;
        return r;
}

static char *run_capture(const char *cmd, int *ret_status) {
        FILE *f = popen(cmd, "re");
        assert_non_null(f);
        size_t cap = 1 << 16, len = 0;
        char *buf = calloc(1, cap);
        assert_non_null(buf);
        size_t n;
        while ((n = fread(buf + len, 1, cap - 1 - len, f)) > 0)
                len += n;
        *ret_status = pclose(f);
        return buf;
}

static int count_substr(const char *hay, const char *needle) {
        int n = 0;
        for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

static void test_pool_slots_are_consecutive_slash31_pairs(void **state) {
        core_net_pool p = test_pool();
        char buf[INET_ADDRSTRLEN];
        struct in_addr a = core_net_host_addr(&p, 0);
        assert_string_equal(inet_ntop(AF_INET, &a, buf, sizeof(buf)), "10.201.0.0");
        a = core_net_sandbox_addr(&p, 0);
        assert_string_equal(inet_ntop(AF_INET, &a, buf, sizeof(buf)), "10.201.0.1");
        a = core_net_host_addr(&p, 200);
        assert_string_equal(inet_ntop(AF_INET, &a, buf, sizeof(buf)), "10.201.1.144");
        a = core_net_sandbox_addr(&p, 200);
        assert_string_equal(inet_ntop(AF_INET, &a, buf, sizeof(buf)), "10.201.1.145");
        assert_int_equal(core_net_pool_slots(&p), 32768);
        p.prefix = 30;
        assert_int_equal(core_net_pool_slots(&p), 2);
        p.prefix = 31;
        assert_int_equal(core_net_pool_slots(&p), 1);
}

/* IPv6 (DESIGN §5): slot n of the ipv6Pool is the /127 pair base + 2n
 * (host) and base + 2n + 1 (sandbox), carried across bytes. */
static void test_ipv6_pool_slots_are_consecutive_slash127_pairs(void **state) {
        core_net_pool p = test_pool();
        char buf[INET6_ADDRSTRLEN];
        inet_pton(AF_INET6, "fd5b:d0c5:6a1e::", &p.base6);
        p.prefix6 = 64;
        struct in6_addr a = core_net_host_addr6(&p, 0);
        assert_string_equal(inet_ntop(AF_INET6, &a, buf, sizeof(buf)), "fd5b:d0c5:6a1e::");
        a = core_net_sandbox_addr6(&p, 0);
        assert_string_equal(inet_ntop(AF_INET6, &a, buf, sizeof(buf)), "fd5b:d0c5:6a1e::1");
        a = core_net_host_addr6(&p, 200);
        assert_string_equal(inet_ntop(AF_INET6, &a, buf, sizeof(buf)), "fd5b:d0c5:6a1e::190");
        a = core_net_sandbox_addr6(&p, 32767);
        assert_string_equal(inet_ntop(AF_INET6, &a, buf, sizeof(buf)), "fd5b:d0c5:6a1e::ffff");
        inet_pton(AF_INET6, "fd00:0:0:1::ff00", &p.base6);
        a = core_net_sandbox_addr6(&p, 128);
        assert_string_equal(inet_ntop(AF_INET6, &a, buf, sizeof(buf)), "fd00::1:0:0:1:1"); /* fd00:0:0:1::ff00 + 257 */
}

/* With an IPv6 pool the table holds its IPv6 rules, and the check that
 * repairs a changed table counts them: an intact table is left alone
 * (0), one missing a rule is re-installed (1). */
static void test_host_setup_with_an_ipv6_pool_is_intact_and_repaired(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        int status;
        inet_pton(AF_INET6, "fd5b:d0c5:6a1e::", &p.base6);
        p.prefix6 = 64;
        assert_int_equal(core_net_host_setup(&p, &err), 0);
        assert_null(err);
        assert_int_equal(core_net_host_ensure(&p, &err), 0);
        /* `nft list` shows the NAT66 and the embedded-form rules. */
        FILE *f = popen("nft list chain inet sandboxd postrouting; nft list chain inet sandboxd from_sbx; "
                        "nft list chain inet sandboxd from_sbx6",
                        "re");
        char out[16384] = "";
        size_t n = f ? fread(out, 1, sizeof(out) - 1, f) : 0;
        if (f)
                pclose(f);
        out[n] = 0;
        if (!strstr(out, "ip6 saddr fd5b:d0c5:6a1e::/64 oifname != \"sbx*\" masquerade") ||
            !strstr(out, "ip6 daddr 64:ff9b::a9fe:0/112") || !strstr(out, "ip6 daddr ::ffff:0.0.0.0/96") ||
            !strstr(out, "exthdr rt exists") || strstr(out, "meta nfproto ipv6 goto deny") ||
            !strstr(out, "meta nfproto ipv6 goto from_sbx6\n"))
                fail_msg("IPv6 rules not as expected:\n%s", out);
        status = system("nft delete rule inet sandboxd from_sbx6 handle "
                        "$(nft -a list chain inet sandboxd from_sbx6 | awk '/exthdr rt exists/ {print $NF}')");
        assert_int_equal(status, 0);
        assert_int_equal(core_net_host_ensure(&p, &err), 1);
        assert_int_equal(core_net_host_ensure(&p, &err), 0);
        assert_int_equal(core_net_host_teardown(&err), 0);
}

static void test_host_setup_installs_table_idempotently_and_teardown_removes_it(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        int status;

        assert_int_equal(core_net_host_setup(&p, &err), 0);
        assert_null(err);
        assert_int_equal(core_net_host_setup(&p, &err), 0); /* replaces, never duplicates */
        assert_null(err);

        char *fwd = NULL;
        assert_int_equal(core_read_file("/proc/sys/net/ipv4/ip_forward", 64, &fwd, NULL), 0);
        assert_int_equal(fwd[0], '1');
        free(fwd);

        char *out = run_capture("nft list table inet sandboxd 2>&1", &status);
        assert_int_equal(status, 0);
        static const char *const expected[] = {
                "type filter hook input priority filter; policy accept;",
                "type filter hook forward priority filter; policy accept;\n\t\tiifname \"sbx*\" goto from_sbx\n",
                /* A sandbox's packets meet the host-wide rules, then its
                 * session's verdict; a session veth without an element in
                 * @sessions is denied, not left to the policy accept. */
                "chain from_sbx {\n\t\toifname \"sbx*\" goto deny\n\t\tmeta nfproto ipv6 goto deny\n"
                "\t\tip daddr 169.254.0.0/16 goto deny\n\t\tiifname vmap @sessions\n\t\tgoto deny\n\t}",
                /* Before routing: a sandbox's packet to a destination the
                 * host has no route to is judged by the same verdicts as in
                 * forward, so a denial is rejected and logged instead of
                 * meeting routing's "network unreachable". */
                "type filter hook prerouting priority filter; policy accept;\n"
                "\t\tiifname \"sbx*\" fib daddr oif 0 fib daddr type != local fib daddr type != broadcast "
                "fib daddr type != multicast fib daddr type != anycast goto no_route\n\t}",
                "chain no_route {\n\t\tfib saddr . iif oif 0 drop\n\t\tip daddr 169.254.0.0/16 goto deny\n\t\tmeta nfproto ipv6 goto deny\n"
                "\t\tiifname vmap @sessions\n\t\tgoto deny\n\t}",
                /* Input's host protection: whatever sessions_input leaves. */
                "chain in_sbx {\n\t\tct state established,related accept\n\t\tiifname vmap @sessions_input\n"
                "\t\tgoto deny\n\t}",
                /* Inbound (DESIGN §5): nothing outside starts a flow to a
                 * sandbox or reaches a gateway address; only the replies
                 * of the sandbox's own flows go out through a veth, and
                 * those by their session's verdict (flow generations). */
                "iif \"lo\" accept\n\t\tiifname \"sbx*\" goto in_sbx\n\t\tip daddr 10.201.0.0/16 drop\n"
                "\t\tip saddr 10.201.0.0/16 drop\n\t}",
                "goto from_sbx\n\t\tip saddr 10.201.0.0/16 drop\n"
                "\t\toifname \"sbx*\" ct state established,related ct direction reply oifname vmap @sessions_reply\n"
                "\t\toifname \"sbx*\" drop\n\t}",
                "type filter hook output priority filter; policy accept;\n"
                "\t\tct state established,related ct direction reply accept\n"
                "\t\toifname \"sbx*\" icmpv6 type 133-137 accept\n"
                "\t\toifname \"sbx*\" goto deny\n"
                "\t\tip daddr 10.201.0.0/16 goto deny\n\t}",
                "type nat hook postrouting priority srcnat; policy accept;",
                "ip saddr 10.201.0.0/16 oifname != \"sbx*\" masquerade",
                /* Every denial is logged (rate-limited per input interface,
                 * headers only) before its reject; the limit guards the log
                 * rule alone. */
                "set lograte {\n\t\ttype ifname\n\t\tsize 65536\n\t\tflags dynamic\n\t}",
                "chain deny {\n\t\tadd @lograte { iifname limit rate 50/second burst 100 packets } log prefix "
                "\"sandboxd deny\" "
                "group 4242 snaplen 64\n\t\tip6 saddr fe80::/10 reject with icmpx admin-prohibited\n"
                "\t\tmeta l4proto tcp reject with tcp reset\n"
                "\t\treject with icmpx admin-prohibited\n\t}",
        };
        for (size_t i = 0; i < ELEMENTSOF(expected); i++) {
                if (count_substr(out, expected[i]) != 1)
                        fail_msg("expected once: %s\nin:\n%s", expected[i], out);
        }
        /* Only the deny chain rejects or logs: nothing is denied unlogged. */
        assert_int_equal(count_substr(out, "reject"), 3);
        assert_int_equal(count_substr(out, " log "), 1);
        free(out);
        out = run_capture("nft --debug=netlink list chain inet sandboxd from_sbx 2>&1", &status);
        assert_int_equal(status, 0);
        assert_int_equal(count_substr(out, "[ cmp eq reg 1 0x0000000a ]"), 1); /* NFPROTO_IPV6 */
        free(out);

        assert_int_equal(core_net_host_teardown(&err), 0);
        out = run_capture("nft list table inet sandboxd 2>&1", &status);
        assert_int_not_equal(status, 0);
        free(out);
        assert_int_equal(core_net_host_teardown(&err), 0); /* missing table: success */
        assert_null(err);
}

static void test_flush_ruleset_is_seen_by_the_monitor_and_ensure_reinstalls(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        int status;

        assert_int_equal(core_net_host_setup(&p, &err), 0);
        assert_int_equal(core_net_host_ensure(&p, &err), 0); /* intact: nothing to do */
        int fd = core_net_monitor_open(&err);
        assert_true(fd >= 0);
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
        assert_int_equal(core_net_monitor_read(fd), 0);

        /* What `systemctl restart nftables` does on Debian. */
        free(run_capture("nft flush ruleset", &status));
        assert_int_equal(status, 0);
        assert_int_equal(core_net_monitor_read(fd), 1);
        assert_int_equal(core_net_host_ensure(&p, &err), 1);
        assert_null(err);
        char *out = run_capture("nft list chain inet sandboxd from_sbx 2>&1", &status);
        assert_int_equal(status, 0);
        assert_int_equal(count_substr(out, "iifname vmap @sessions"), 1);
        free(out);
        assert_int_equal(core_net_host_ensure(&p, &err), 0);

        /* A flushed host chain is as bad as a missing table. */
        (void) core_net_monitor_read(fd);
        free(run_capture("nft flush chain inet sandboxd input", &status));
        assert_int_equal(core_net_monitor_read(fd), 1);
        assert_int_equal(core_net_host_ensure(&p, &err), 1);
        out = run_capture("nft list chain inet sandboxd input 2>&1", &status);
        assert_int_equal(count_substr(out, "iifname \"sbx*\" goto in_sbx"), 1);
        free(out);
        close(fd);
}

static void test_host_setup_refuses_a_pool_without_room_for_a_pair(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        p.prefix = 31;
        assert_int_equal(core_net_host_setup(&p, &err), -EINVAL);
        assert_non_null(err);
        sb_error_free(err);
}

static void test_veth_delete_of_missing_link_is_success(void **state) {
        sb_error *err = NULL;
        assert_int_equal(core_veth_delete(77, &err), 0);
        assert_null(err);
}

/* ---- the "sandbox": a child in its own network namespace ---- */

typedef struct reply {
        int r;
        int ms;
} reply;

static int connect_timed(int type, struct in_addr dst, int *ret_ms) {
        uint64_t t0 = core_monotonic_ms();
        int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), r = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(PORT), .sin_addr = dst };
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
                r = -errno;
        if (r == 0 && type == SOCK_DGRAM && send(fd, "x", 1, 0) < 0)
                r = -errno;
        if (r == 0) {
                /* Bounded so a silently dropped packet fails the test
                 * instead of hanging it. */
                struct pollfd p = { .fd = fd, .events = type == SOCK_DGRAM ? POLLIN : POLLOUT };
                int err = 0;
                socklen_t l = sizeof(err);
                if (poll(&p, 1, 3000) == 0)
                        r = -ETIMEDOUT;
                else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) == 0 && err)
                        r = -err;
        }
        *ret_ms = (int) (core_monotonic_ms() - t0);
        close(fd);
        return r;
}

static int default_route_via(struct in_addr gw) {
        char *routes = NULL, want[32];
        if (core_read_file("/proc/self/net/route", 1 << 16, &routes, NULL) < 0)
                return -EIO;
        snprintf(want, sizeof(want), "eth0\t00000000\t%08X", gw.s_addr);
        int r = strstr(routes, want) ? 0 : -ENOENT;
        free(routes);
        return r;
}

static _noreturn_ void child_main(int rd, int wr) {
        core_net_pool p = test_pool();
        reply rep = { .r = unshare(CLONE_NEWNET) < 0 ? -errno : 0 };
        char cmd;
        if (write(wr, &rep, sizeof(rep)) != sizeof(rep))
                _exit(1);
        while (read(rd, &cmd, 1) == 1) {
                rep = (reply) {};
                switch (cmd) {
                case 'c': rep.r = core_net_configure_inside(&p, SLOT, true, NULL); break;
                case 't': rep.r = connect_timed(SOCK_STREAM, core_net_host_addr(&p, SLOT), &rep.ms); break;
                case 'u': rep.r = connect_timed(SOCK_DGRAM, core_net_host_addr(&p, SLOT), &rep.ms); break;
                case 'r': rep.r = default_route_via(core_net_host_addr(&p, SLOT)); break;
                case 'e': rep.r = if_nametoindex("eth0") ? -EEXIST : 0; break;
                default: _exit(0);
                }
                if (write(wr, &rep, sizeof(rep)) != sizeof(rep))
                        _exit(1);
        }
        _exit(0);
}

static void start_child(void) {
        int down[2], up[2];
        assert_int_equal(pipe2(down, O_CLOEXEC), 0);
        assert_int_equal(pipe2(up, O_CLOEXEC), 0);
        child_pid = fork();
        assert_true(child_pid >= 0);
        if (child_pid == 0) {
                close(down[1]);
                close(up[0]);
                child_main(down[0], up[1]);
        }
        close(down[0]);
        close(up[1]);
        to_child = down[1];
        from_child = up[0];
}

static reply ask(char cmd) {
        reply rep;
        if (cmd && write(to_child, &cmd, 1) != 1)
                fail_msg("child gone");
        if (read(from_child, &rep, sizeof(rep)) != sizeof(rep))
                fail_msg("no reply from child for '%c'", cmd);
        return rep;
}

static void test_sandbox_reaches_host_only_until_host_rules_reject_it_at_once(void **state) {
        core_net_pool p = test_pool();
        struct in_addr host = core_net_host_addr(&p, SLOT);
        sb_error *err = NULL;

        start_child();
        assert_int_equal(ask(0).r, 0); /* child is in its own netns */
        assert_int_equal(core_veth_create(&p, SLOT, child_pid, &err), 0);
        assert_null(err);
        assert_int_not_equal(if_nametoindex("sbx3"), 0);
        assert_int_equal(if_nametoindex("eth0"), 0); /* the peer went to the child */

        char *v6 = NULL;
        assert_int_equal(core_read_file("/proc/sys/net/ipv6/conf/sbx3/disable_ipv6", 64, &v6, NULL), 0);
        assert_int_equal(v6[0], '1');
        free(v6);

        assert_int_equal(ask('c').r, 0);
        assert_int_equal(ask('r').r, 0);

        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(PORT), .sin_addr = host };
        assert_true(lfd >= 0);
        assert_int_equal(bind(lfd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        assert_int_equal(listen(lfd, 8), 0);

        /* Without the host table the listener is reachable... */
        assert_int_equal(ask('t').r, 0);
        assert_int_equal(ask('u').r, -ECONNREFUSED); /* closed UDP port: port unreachable */

        /* ...with it, TCP gets a reset and UDP admin-prohibited, at once. */
        assert_int_equal(core_net_host_setup(&p, &err), 0);
        assert_null(err);
        reply t = ask('t');
        assert_int_equal(t.r, -ECONNREFUSED);
        assert_in_range(t.ms, 0, 1000);
        reply u = ask('u');
        assert_int_equal(u.r, -EHOSTUNREACH);
        assert_in_range(u.ms, 0, 1000);
        close(lfd);

        assert_int_equal(core_veth_delete(SLOT, &err), 0);
        assert_null(err);
        assert_int_equal(if_nametoindex("sbx3"), 0);
        assert_int_equal(ask('e').r, 0); /* the peer is gone too */
}

static void test_veth_create_into_missing_process_leaves_nothing(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        pid_t gone = fork();
        assert_true(gone >= 0);
        if (gone == 0)
                _exit(0);
        waitpid(gone, NULL, 0);
        assert_true(core_veth_create(&p, SLOT, gone, &err) < 0);
        assert_non_null(err);
        sb_error_free(err);
        assert_int_equal(if_nametoindex("sbx3"), 0);
}

static void current_lock_path(char *buf, size_t size) {
        struct stat st;
        assert_int_equal(stat("/proc/self/ns/net", &st), 0);
        snprintf(buf, size, "/run/sandboxd-netns-%llu.lock", (unsigned long long) st.st_ino);
}

/* Runs core_net_lock_namespace() in a forked child, in a network namespace
 * of its own when `own_netns`; returns its result (0 for a lock it got). */
static int lock_in_child(bool own_netns) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (own_netns && unshare(CLONE_NEWNET) < 0)
                        _exit(100);
                int fd = core_net_lock_namespace(NULL);
                core_net_unlock_namespace(fd);
                _exit(fd >= 0 ? 0 : -fd);
        }
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        return -WEXITSTATUS(status);
}

static void test_one_daemon_per_network_namespace(void **state) {
        sb_error *err = NULL;
        char path[64], want[160];
        current_lock_path(path, sizeof(path));
        int fd = core_net_lock_namespace(&err);
        assert_true(fd >= 0);
        assert_null(err);
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);

        /* flock belongs to the open file, so a second open from this very
         * process is refused just as another daemon's would be. */
        assert_int_equal(core_net_lock_namespace(&err), -EBUSY);
        assert_non_null(err);
        snprintf(want, sizeof(want),
                 "another sandboxd (pid %d) manages this network namespace; give each daemon its own "
                 "network namespace", (int) getpid());
        assert_string_equal(err->message, want);
        sb_error_free(err);
        assert_int_equal(lock_in_child(false), -EBUSY);
        /* Another namespace is another daemon's business. */
        assert_int_equal(lock_in_child(true), 0);

        core_net_unlock_namespace(fd);
        struct stat st;
        assert_int_equal(stat(path, &st), -1);
        assert_int_equal(errno, ENOENT);
        /* Released: the namespace is free for the next daemon. */
        assert_int_equal(lock_in_child(false), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pool_slots_are_consecutive_slash31_pairs),
                cmocka_unit_test(test_ipv6_pool_slots_are_consecutive_slash127_pairs),
                cmocka_unit_test_setup_teardown(test_host_setup_with_an_ipv6_pool_is_intact_and_repaired,
                                                enter_private_netns, leave_private_netns),
                cmocka_unit_test_setup_teardown(test_host_setup_installs_table_idempotently_and_teardown_removes_it,
                                                enter_private_netns, leave_private_netns),
                cmocka_unit_test_setup_teardown(test_flush_ruleset_is_seen_by_the_monitor_and_ensure_reinstalls,
                                                enter_private_netns, leave_private_netns),
                cmocka_unit_test_setup_teardown(test_host_setup_refuses_a_pool_without_room_for_a_pair,
                                                enter_private_netns, leave_private_netns),
                cmocka_unit_test_setup_teardown(test_veth_delete_of_missing_link_is_success,
                                                enter_private_netns, leave_private_netns),
                cmocka_unit_test_setup_teardown(test_sandbox_reaches_host_only_until_host_rules_reject_it_at_once,
                                                enter_private_netns, leave_private_netns),
                cmocka_unit_test_setup_teardown(test_veth_create_into_missing_process_leaves_nothing,
                                                enter_private_netns, leave_private_netns),
                cmocka_unit_test_setup_teardown(test_one_daemon_per_network_namespace,
                                                enter_private_netns, leave_private_netns),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
