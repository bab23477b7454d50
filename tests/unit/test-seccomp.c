/* Unit tests for libcore/seccomp.c and libcore/caps.c: the filter a sandbox
 * command runs under, installed in a forked child of the test, refuses
 * what DESIGN §4 lists (with the argument filters holding against garbage
 * in the upper half of a register) and lets ordinary work through; other
 * ABIs kill the process; the capability steps leave the sandbox user with
 * nothing and root with the default set. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <linux/sched.h>
#include <pthread.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/capability.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "libcore/caps.h"
#include "libcore/seccomp.h"

/* Runs fn in a forked child under the filter; returns its wait status. fn
 * returns 0 for success or the number of the check that failed. */
static int run_filtered(int (*fn)(void)) {
        const core_seccomp *f = NULL;
        assert_int_equal(core_seccomp_default(&f, NULL), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || core_seccomp_install(f) < 0)
                        _exit(100);
                _exit(fn());
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        return st;
}

static void expect_exit_zero(int st) {
        if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
                fail_msg("check %d in the filtered child failed", WEXITSTATUS(st));
        assert_true(WIFEXITED(st));
}

/* errno of a raw syscall that is expected to fail, 0 if it succeeded. */
#define ERR_OF(call) ((call) < 0 ? errno : 0)

static void *thread_fn(void *p) {
        return p;
}

static int ordinary_work(void) {
        if (getpid() <= 0)
                return 1;
        pid_t c = fork(); /* clone without namespace flags */
        if (c < 0)
                return 2;
        if (c == 0)
                _exit(0);
        if (waitpid(c, NULL, 0) != c)
                return 3;
        pthread_t t; /* glibc tries clone3, gets ENOSYS, falls back to clone */
        if (pthread_create(&t, NULL, thread_fn, NULL) != 0 || pthread_join(t, NULL) != 0)
                return 4;
        if (personality(0xffffffff) < 0 || personality(PER_LINUX) < 0)
                return 5;
        /* The kernel reads the persona as an int: garbage in the upper
         * half of the register leaves a query a query. */
        if (syscall(SYS_personality, 0xabcd00000000ul | 0xffffffffu) < 0 ||
            syscall(SYS_personality, 0xabcd00000000ul) < 0)
                return 8;
        if (unshare(CLONE_FILES) < 0) /* no namespace flag: allowed */
                return 6;
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int n = 0;
        if (fd < 0 || (ioctl(fd, FIONREAD, &n) < 0 && errno != ENOTTY && errno != EINVAL))
                return 7;
        close(fd);
        return 0;
}

static void test_filter_lets_ordinary_work_through(void **state) {
        expect_exit_zero(run_filtered(ordinary_work));
}

static int denied_calls(void) {
        static const unsigned long ns_flags[] = {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID,
                                                 CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP, 0x80 /* NEWTIME */};
        for (size_t i = 0; i < ELEMENTSOF(ns_flags); i++) {
                if (ERR_OF(syscall(SYS_unshare, ns_flags[i])) != EPERM)
                        return 10 + (int)i;
                /* Garbage in the upper half is ignored by the kernel (int
                 * argument) and must be by the filter too. */
                if (ERR_OF(syscall(SYS_unshare, ns_flags[i] | 0xabcd00000000ul)) != EPERM)
                        return 20 + (int)i;
        }
        if (ERR_OF(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)) != EPERM)
                return 30;
        if (ERR_OF(syscall(SYS_clone3, NULL, 0)) != ENOSYS)
                return 31;
        if (ERR_OF(syscall(SYS_setns, 0, 0)) != EPERM)
                return 32;
        if (ERR_OF(personality(PER_LINUX32)) != EPERM || ERR_OF(personality(ADDR_NO_RANDOMIZE)) != EPERM ||
            ERR_OF(personality(READ_IMPLIES_EXEC)) != EPERM || ERR_OF(personality(0xfffffffe)) != EPERM ||
            ERR_OF(personality(0x7fffffff)) != EPERM || ERR_OF(personality(0x80000000)) != EPERM ||
            ERR_OF(personality(1)) != EPERM ||
            ERR_OF(syscall(SYS_personality, 0xabcd00000000ul | PER_LINUX32)) != EPERM ||
            ERR_OF(syscall(SYS_personality, 0xffffffff00000000ul | ADDR_NO_RANDOMIZE)) != EPERM)
                return 33;
        if (ERR_OF(syscall(SYS_ioctl, 0, (unsigned long)TIOCSTI, "x")) != EPERM ||
            ERR_OF(syscall(SYS_ioctl, 0, 0x100000000ul | TIOCSTI, "x")) != EPERM ||
            ERR_OF(syscall(SYS_ioctl, 0, (unsigned long)TIOCLINUX, "x")) != EPERM)
                return 34;
        static const unsigned long btrfs[] = {BTRFS_IOC_SUBVOL_CREATE, BTRFS_IOC_SUBVOL_CREATE_V2,
                                              BTRFS_IOC_SNAP_CREATE, BTRFS_IOC_SNAP_CREATE_V2};
        for (size_t i = 0; i < ELEMENTSOF(btrfs); i++)
                if (ERR_OF(syscall(SYS_ioctl, 0, btrfs[i], NULL)) != EPERM ||
                    ERR_OF(syscall(SYS_ioctl, 0, 0xabcd00000000ul | btrfs[i], NULL)) != EPERM)
                        return 35;
        /* No extent shared by reference (the storage pool's quotas). */
        if (ERR_OF(syscall(SYS_ioctl, 0, (unsigned long)FICLONE, 0)) != EOPNOTSUPP ||
            ERR_OF(syscall(SYS_ioctl, 0, (unsigned long)FICLONERANGE, 0)) != EOPNOTSUPP ||
            ERR_OF(syscall(SYS_ioctl, 0, (unsigned long)FIDEDUPERANGE, 0)) != EOPNOTSUPP ||
            ERR_OF(syscall(SYS_copy_file_range, 0, 0, 1, 0, 1, 0)) != ENOSYS)
                return 36;
        static const long plain[] = {SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
                                     SYS_userfaultfd, SYS_keyctl, SYS_add_key, SYS_request_key, SYS_bpf,
                                     SYS_perf_event_open, SYS_kexec_load, SYS_kexec_file_load,
                                     SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_mount,
                                     SYS_umount2, SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick,
                                     SYS_move_mount, SYS_open_tree, SYS_mount_setattr, SYS_pivot_root,
                                     SYS_chroot, SYS_acct, SYS_swapon, SYS_swapoff, SYS_reboot,
                                     SYS_settimeofday, SYS_clock_settime, SYS_adjtimex, SYS_syslog,
                                     SYS_quotactl, SYS_lookup_dcookie, SYS_vhangup,
                                     SYS_open_by_handle_at, SYS_name_to_handle_at};
        for (size_t i = 0; i < ELEMENTSOF(plain); i++)
                if (ERR_OF(syscall(plain[i], 0, 0, 0, 0, 0, 0)) != EPERM)
                        return 40 + (int)i;
        return 0;
}

static void test_filter_refuses_design_list_with_eperm(void **state) {
        expect_exit_zero(run_filtered(denied_calls));
}

/* Syscalls newer than the deny table: the mount family's new members get
 * its EPERM, memfd_secret EPERM, and every other number above the highest
 * one the table was written for (futex_requeue, 456) ENOSYS, the answer of
 * an older kernel; reviewed calls at or below it still reach the kernel. */
static int newer_calls(void) {
        if (ERR_OF(syscall(467 /* open_tree_attr */, AT_FDCWD, "/", O_CLOEXEC, NULL, 0)) != EPERM)
                return 1;
        if (ERR_OF(syscall(457 /* statmount */, 0, 0, 0, 0)) != EPERM ||
            ERR_OF(syscall(458 /* listmount */, 0, 0, 0, 0)) != EPERM)
                return 2;
        if (ERR_OF(syscall(SYS_memfd_secret, 0)) != EPERM)
                return 3;
        for (long nr = 459; nr < 1024; nr++)
                if (nr != 467 && ERR_OF(syscall(nr, 0, 0, 0, 0, 0, 0)) != ENOSYS)
                        return 4;
        /* Garbage in the upper half: the kernel reads nr as an int. */
        if (ERR_OF(syscall(0x100000000l | 467, AT_FDCWD, "/", O_CLOEXEC, NULL, 0)) != EPERM &&
            errno != ENOSYS)
                return 5;
        /* fchmodat2 (452) on a bad fd: the kernel's own EBADF. */
        if (ERR_OF(syscall(452, -1, "x", 0644, 0)) != EBADF)
                return 6;
        return 0;
}

static void test_syscalls_newer_than_the_table_are_refused(void **state) {
        expect_exit_zero(run_filtered(newer_calls));
}

static int x32_getpid(void) {
        syscall(0x40000000 | SYS_getpid);
        return 1; /* reached only if the call returned */
}

static int i386_getpid(void) {
        long ret;
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20 /* i386 getpid */) : "memory");
        return ret > 0 ? 2 : 3;
}

static void test_non_native_abis_kill_the_process(void **state) {
        int st = run_filtered(x32_getpid);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGSYS);
        st = run_filtered(i386_getpid);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGSYS);
}

/* Whether family f is in the table, and protocol p of it allowed. */
static bool family_allowed(long f, long p, bool any_protocol) {
        size_t n;
        const core_seccomp_family *t = core_seccomp_families(&n);
        for (size_t i = 0; i < n; i++) {
                if (t[i].family != f)
                        continue;
                if (any_protocol || !t[i].protocols)
                        return true;
                for (size_t k = 0; k < t[i].n_protocols; k++)
                        if (t[i].protocols[k] == p)
                                return true;
                return false;
        }
        return false;
}

static int close_if(long fd) {
        if (fd >= 0)
                close((int) fd);
        return fd >= 0;
}

/* Every family number the kernel knows (0 to AF_MAX-1 = 45 on Linux 6.x)
 * and some it does not, with every socket type: refused families give
 * EAFNOSUPPORT for every one of them (the filter answers before the
 * kernel, which would say EPERM, ESOCKTNOSUPPORT or EPROTONOSUPPORT for a
 * family it has); allowed ones reach the kernel. */
static int socket_family_calls(void) {
        static const long types[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET, SOCK_RDM,
                                     SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK};
        static const long extra[] = {46, 47, 63, 64, 255, 256, 0x7fffffff, -1, -2,
                                     0x100000028l /* AF_VSOCK, upper half set */};
        for (size_t f = 0; f < 46 + ELEMENTSOF(extra); f++) {
                long fam = f < 46 ? (long) f : extra[f - 46];
                bool allowed = family_allowed(fam, 0, true);
                bool reached = false;
                for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                        errno = 0;
                        long fd = syscall(SYS_socket, fam, types[i], 0);
                        int e = errno;
                        reached |= close_if(fd) || e != EAFNOSUPPORT;
                        if (!allowed && (fd >= 0 || e != EAFNOSUPPORT))
                                return 10;
                        int sv[2];
                        long r = syscall(SYS_socketpair, fam, types[i], 0, sv);
                        if (r == 0) {
                                close(sv[0]);
                                close(sv[1]);
                        }
                        if (!allowed && (r == 0 || errno != EAFNOSUPPORT))
                                return 11;
                }
                if (allowed && !reached)
                        return 12;
        }
        /* Garbage in the upper half never makes a refused family allowed. */
        if (ERR_OF(syscall(SYS_socket, 0xabcd00000000l | AF_VSOCK, SOCK_STREAM, 0)) != EAFNOSUPPORT)
                return 13;
        /* AF_INET with SOCK_PACKET is an AF_PACKET socket in the kernel. */
        if (ERR_OF(syscall(SYS_socket, AF_INET, SOCK_PACKET, 0x0300)) != EAFNOSUPPORT ||
            ERR_OF(syscall(SYS_socket, AF_INET, SOCK_PACKET | SOCK_CLOEXEC, 0x0300)) != EAFNOSUPPORT)
                return 14;
        /* Netlink: the listed protocols work, the others are not there. */
        for (long p = -1; p < 40; p++) {
                long fd = syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, p);
                int e = errno;
                bool ok = close_if(fd);
                if (family_allowed(AF_NETLINK, p, false) ? !ok : (ok || e != EPROTONOSUPPORT))
                        return 20;
        }
        if (ERR_OF(syscall(SYS_socket, AF_NETLINK, SOCK_DGRAM, 0x100000000l | NETLINK_GENERIC)) !=
            EPROTONOSUPPORT)
                return 21;
        /* What ordinary programs make still works. */
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return 30;
        close(sv[0]);
        close(sv[1]);
        if (!close_if(socket(AF_INET, SOCK_STREAM, 0)) || !close_if(socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP)) ||
            !close_if(socket(AF_UNIX, SOCK_DGRAM, 0)) ||
            !close_if(socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE)) ||
            !close_if(socket(AF_NETLINK, SOCK_DGRAM, NETLINK_SOCK_DIAG)))
                return 31;
        /* AF_INET6 too, unless this kernel has IPv6 off altogether. */
        long fd6 = socket(AF_INET6, SOCK_STREAM, 0);
        if (fd6 < 0 && errno == EAFNOSUPPORT && access("/proc/net/if_inet6", F_OK) == 0)
                return 32;
        close_if(fd6);
        return 0;
}

static void test_socket_families_outside_the_table_get_eafnosupport(void **state) {
        size_t n;
        const core_seccomp_family *t = core_seccomp_families(&n);
        assert_int_equal(n, 4);
        assert_int_equal(t[0].family, AF_UNIX);
        expect_exit_zero(run_filtered(socket_family_calls));
}

static int x32_socket(void) {
        syscall(0x40000000 | SYS_socket, AF_VSOCK, SOCK_STREAM, 0);
        return 1;
}

static void test_x32_socket_kills_the_process(void **state) {
        int st = run_filtered(x32_socket);
        assert_true(WIFSIGNALED(st));
        assert_int_equal(WTERMSIG(st), SIGSYS);
}

static void test_rule_table_names_exist_on_this_arch(void **state) {
        size_t n;
        const core_seccomp_rule *rules = core_seccomp_rules(&n);
        assert_true(n > 40);
        /* Every row names a syscall libseccomp knows on x86_64: a typo
         * would otherwise be skipped silently when the filter is built. */
        for (size_t i = 0; i < n; i++) {
                assert_true(rules[i].err == EPERM || rules[i].err == ENOSYS || rules[i].err == EOPNOTSUPP);
                if (seccomp_syscall_resolve_name(rules[i].name) < 0)
                        fail_msg("%s is not a syscall here", rules[i].name);
        }
        _cleanup_(core_seccomp_freep) core_seccomp *f = NULL;
        assert_int_equal(core_seccomp_new(&f, NULL), 0);
        assert_true(core_seccomp_size(f) > n);
        assert_true(core_seccomp_size(f) < 4096);
}

/* The kernel converts and JIT-compiles the filter in every command's
 * child (seccomp_prepare_filter), at a cost per instruction: the
 * personality rule, once 62 libseccomp rules and 182 instructions, is a
 * nine-instruction block in front, and the whole filter stays small. */
static void test_filter_stays_compact(void **state) {
        _cleanup_(core_seccomp_freep) core_seccomp *f = NULL;
        assert_int_equal(core_seccomp_new(&f, NULL), 0);
        if (core_seccomp_size(f) > 256)
                fail_msg("the filter has %zu instructions", core_seccomp_size(f));
}

static void test_filter_from_bpf_copies_whole_programs_only(void **state) {
        const core_seccomp *def = NULL;
        assert_int_equal(core_seccomp_default(&def, NULL), 0);
        size_t size = 0;
        const void *bpf = core_seccomp_bpf(def, &size);
        assert_int_equal(size, core_seccomp_size(def) * 8);
        _cleanup_(core_seccomp_freep) core_seccomp *copy = NULL;
        assert_int_equal(core_seccomp_from_bpf(bpf, size, &copy), 0);
        size_t copy_size = 0;
        const void *copy_bpf = core_seccomp_bpf(copy, &copy_size);
        assert_int_equal(copy_size, size);
        assert_memory_equal(copy_bpf, bpf, size);
        core_seccomp *bad = NULL;
        assert_int_equal(core_seccomp_from_bpf(bpf, 0, &bad), -EINVAL);
        assert_int_equal(core_seccomp_from_bpf(bpf, 12, &bad), -EINVAL);
        assert_int_equal(core_seccomp_from_bpf(bpf, 8 * 4097, &bad), -EINVAL);
        assert_null(bad);
        /* The process already has its default: a second one is refused. */
        assert_int_equal(core_seccomp_set_default(TAKE_PTR(copy)), -EEXIST);
}

static void test_root_set_is_docker_default_without_mknod(void **state) {
        uint64_t root = core_caps_root_set();
        static const cap_value_t want[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_NET_RAW,
                                           CAP_SETGID, CAP_SETUID, CAP_SETFCAP, CAP_SETPCAP,
                                           CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_KILL, CAP_AUDIT_WRITE};
        uint64_t m = 0;
        for (size_t i = 0; i < ELEMENTSOF(want); i++)
                m |= 1ull << want[i];
        assert_int_equal(root, m);
        assert_false(root & (1ull << CAP_MKNOD));
        assert_false(root & (1ull << CAP_SYS_ADMIN));
        assert_int_equal(core_caps_for_uid(1000), 0);
        assert_int_equal(core_caps_for_uid(0), root);
}

/* In a forked child of a root test: the two capability steps around a
 * change to uid, as sandbox-init does. Exit 0 when the result is exactly
 * the expected set. */
static int caps_child(uid_t uid) {
        uint64_t keep = core_caps_for_uid(uid);
        if (core_caps_bound(keep) < 0)
                return 1;
        if (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                return 2;
        if (core_caps_set(keep) < 0)
                return 3;
        return core_caps_verify(keep) < 0 ? 4 : 0;
}

static void test_cap_steps_leave_exactly_the_kept_set(void **state) {
        if (geteuid() != 0)
                skip();
        uid_t uids[] = {1000, 0};
        for (size_t i = 0; i < ELEMENTSOF(uids); i++) {
                pid_t pid = fork();
                assert_true(pid >= 0);
                if (pid == 0)
                        _exit(caps_child(uids[i]));
                int st;
                assert_int_equal(waitpid(pid, &st, 0), pid);
                assert_true(WIFEXITED(st));
                assert_int_equal(WEXITSTATUS(st), 0);
        }
}

/* As sandbox-init's child does it: step 1 told the bounding set (a
 * superset of it), not reading it. */
static void test_cap_steps_from_a_known_bounding_superset_leave_nothing(void **state) {
        if (geteuid() != 0)
                skip();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (core_caps_bound_known(0, ~0ull) < 0)
                        _exit(1);
                if (setresgid(1000, 1000, 1000) < 0 || setresuid(1000, 1000, 1000) < 0)
                        _exit(2);
                if (core_caps_set(0) < 0)
                        _exit(3);
                _exit(core_caps_verify(0) < 0 ? 4 : 0);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_verify_notices_extra_capabilities(void **state) {
        if (geteuid() != 0)
                skip();
        /* The test runs as root with the full set: not the root set. */
        assert_int_equal(core_caps_verify(core_caps_root_set()), -EPERM);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_filter_lets_ordinary_work_through),
                cmocka_unit_test(test_filter_refuses_design_list_with_eperm),
                cmocka_unit_test(test_non_native_abis_kill_the_process),
                cmocka_unit_test(test_syscalls_newer_than_the_table_are_refused),
                cmocka_unit_test(test_rule_table_names_exist_on_this_arch),
                cmocka_unit_test(test_filter_stays_compact),
                cmocka_unit_test(test_socket_families_outside_the_table_get_eafnosupport),
                cmocka_unit_test(test_x32_socket_kills_the_process),
                cmocka_unit_test(test_filter_from_bpf_copies_whole_programs_only),
                cmocka_unit_test(test_root_set_is_docker_default_without_mknod),
                cmocka_unit_test(test_cap_steps_leave_exactly_the_kept_set),
                cmocka_unit_test(test_cap_steps_from_a_known_bounding_superset_leave_nothing),
                cmocka_unit_test(test_verify_notices_extra_capabilities),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
