/* Escape probes, compiled and run inside a sandbox by tests/escape/run.py.
 *
 *     probe CASE [ARG...]
 *
 * Each case tries one way out of the sandbox and prints one line per
 * attempt. Exit 0: every attempt was refused. Exit 1: something got
 * through (the line starting with ESCAPED says what). Exit 2: usage. The
 * runner also checks the host's side, so a probe that lies about success
 * still fails the test. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>

static int escaped;

static void result(int ok, const char *what) {
        if (ok)
                printf("BLOCKED %s: %s\n", what, strerror(errno));
        else {
                printf("ESCAPED %s\n", what);
                escaped = 1;
        }
}

/* open(O_WRONLY) of every /proc/N/exe; one that opens is only fine when the
 * binary lives in the sandbox's own writable tree. */
static void exe_write(void) {
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
                if (e->d_name[0] < '0' || e->d_name[0] > '9')
                        continue;
                char path[300], target[4096] = "";
                snprintf(path, sizeof(path), "/proc/%s/exe", e->d_name);
                ssize_t n = readlink(path, target, sizeof(target) - 1);
                target[n > 0 ? n : 0] = 0;
                int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
                if (fd < 0) {
                        char what[4800];
                        snprintf(what, sizeof(what), "write %s (%s)", path, target);
                        result(1, what);
                        continue;
                }
                ssize_t w = write(fd, "", 0);
                close(fd);
                (void)w;
                int own = strncmp(target, "/workspace/", 11) == 0 || strncmp(target, "/tmp/", 5) == 0;
                char what[4800];
                snprintf(what, sizeof(what), "opened %s (%s) for writing", path, target);
                if (own)
                        printf("OWN %s\n", what);
                else
                        result(0, what);
        }
        if (d)
                closedir(d);
}

static void write_file(const char *path, const char *data) {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        char what[256];
        snprintf(what, sizeof(what), "write %s", path);
        if (fd < 0)
                return result(1, what);
        struct stat st;
        /* A mask: the path is the null device, the write goes nowhere. */
        if (fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3)) {
                close(fd);
                errno = 0;
                return result(1, "masked by /dev/null");
        }
        ssize_t n = write(fd, data, strlen(data));
        close(fd);
        result(n < 0, what);
}

static void read_kcore(void) {
        int fd = open("/proc/kcore", O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return result(1, "open /proc/kcore");
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        close(fd);
        errno = n < 0 ? errno : 0;
        result(n <= 0, "read /proc/kcore");
}

static void tty_ioctls(void) {
        if (!isatty(0)) {
                printf("USAGE stdin is not a terminal\n");
                exit(2);
        }
        char c = '#';
        result(ioctl(0, TIOCSTI, &c) < 0, "ioctl TIOCSTI");
        char sub = 11; /* TIOCL_GETKMSGREDIRECT: harmless if it went through */
        result(ioctl(0, TIOCLINUX, &sub) < 0, "ioctl TIOCLINUX");
}

static void user_ns(void) {
        result(unshare(CLONE_NEWUSER) < 0, "unshare(CLONE_NEWUSER)");
        result(syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0) < 0, "clone(CLONE_NEWUSER)");
        result(unshare(CLONE_NEWNS) < 0, "unshare(CLONE_NEWNS)");
        result(setns(0, 0) < 0, "setns");
}

/* x32 ABI: x86_64 syscall numbers with bit 30 set. The filter must kill
 * the process; if it comes back at all the ABI reached the kernel. */
static void user_ns_x32(void) {
        fflush(stdout);
        long r = syscall(0x40000000 | SYS_unshare, CLONE_NEWUSER);
        printf("RETURNED x32 unshare: %ld (%s)\n", r, r < 0 ? strerror(errno) : "ok");
        result(0, "x32 syscall returned instead of killing the process");
}

/* i386 ABI through int 0x80: socketcall(SYS_SOCKET, ...) as the 32-bit
 * compat path, a classic filter bypass. Must kill the process. */
static void int80_socketcall(void) {
        static unsigned int args[3] = {AF_UNIX, SOCK_STREAM, 0};
        long ret;
        fflush(stdout);
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(102), "b"(1), "c"(args) : "memory");
        printf("RETURNED int 0x80 socketcall: %ld\n", ret);
        result(0, "int 0x80 returned instead of killing the process");
}

/* socket() and socketpair() of every family number 0..45 (AF_MAX - 1 on
 * Linux 6.x) with each socket type. Only AF_UNIX, AF_INET, AF_INET6 and
 * AF_NETLINK may reach the kernel; any other answer than EAFNOSUPPORT
 * (a socket, or EPERM/ESOCKTNOSUPPORT/EPROTONOSUPPORT from the family's
 * own code) means the family was reached. Then every netlink protocol
 * 0..31: only ROUTE (0) and SOCK_DIAG (4) may open, the rest must say
 * EPROTONOSUPPORT. Prints "OPEN family N" / "OPEN netlink N" for what
 * opened, so the runner can compare the set with the table. */
static void socket_families(void) {
        static const int types[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET, SOCK_RDM};
        for (int f = 0; f < 46; f++) {
                int allowed = f == AF_UNIX || f == AF_INET || f == AF_INET6 || f == AF_NETLINK;
                int reached = 0;
                char what[128];
                for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                        errno = 0;
                        int fd = socket(f, types[i] | SOCK_CLOEXEC, 0);
                        int e = errno;
                        if (fd >= 0)
                                close(fd);
                        int sv[2];
                        int r = socketpair(f, types[i] | SOCK_CLOEXEC, 0, sv);
                        int e2 = errno;
                        if (r == 0) {
                                close(sv[0]);
                                close(sv[1]);
                        }
                        if (fd >= 0 || e != EAFNOSUPPORT || r == 0 || e2 != EAFNOSUPPORT) {
                                reached = 1;
                                if (!allowed) {
                                        snprintf(what, sizeof(what), "family %d type %d: socket %s, socketpair %s",
                                                 f, types[i], fd >= 0 ? "opened" : strerror(e),
                                                 r == 0 ? "opened" : strerror(e2));
                                        result(0, what);
                                }
                        }
                }
                if (reached) {
                        printf("OPEN family %d\n", f);
                        continue;
                }
                errno = EAFNOSUPPORT;
                snprintf(what, sizeof(what), "family %d", f);
                result(1, what);
        }
        /* AF_INET + SOCK_PACKET is turned into an AF_PACKET socket. */
        errno = 0;
        int fd = socket(AF_INET, SOCK_PACKET | SOCK_CLOEXEC, htons(0x0003 /* ETH_P_ALL */));
        result(fd < 0 && errno == EAFNOSUPPORT, "AF_INET SOCK_PACKET");
        if (fd >= 0)
                close(fd);
        for (int p = 0; p < 32; p++) {
                errno = 0;
                fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, p);
                char what[64];
                snprintf(what, sizeof(what), "netlink protocol %d", p);
                if (fd >= 0) {
                        close(fd);
                        printf("OPEN netlink %d\n", p);
                } else if (errno == EPROTONOSUPPORT)
                        result(1, what);
                else {
                        /* Neither opened nor refused as missing: the
                         * protocol's own code answered (or, for ROUTE
                         * and SOCK_DIAG, the tools that need them break). */
                        printf("ESCAPED %s: %s\n", what, strerror(errno));
                        escaped = 1;
                }
        }
}

static void syscalls(void) {
        result(syscall(SYS_io_uring_setup, 8, calloc(1, 256)) < 0, "io_uring_setup");
        result(syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0) < 0, "keyctl");
        result(syscall(SYS_add_key, "user", "x", "y", 1, -3) < 0, "add_key");
        char attr[128] = {0};
        result(syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, attr, sizeof(attr)) < 0, "bpf");
        result(mount("none", "/mnt", "tmpfs", 0, NULL) < 0, "mount tmpfs");
        result(umount2("/proc", MNT_DETACH) < 0, "umount2 /proc");
        result(syscall(SYS_fsopen, "tmpfs", 0) < 0, "fsopen");
        result(chroot("/tmp") < 0, "chroot");
        result(syscall(SYS_userfaultfd, 0) < 0, "userfaultfd");
        result(syscall(SYS_perf_event_open, calloc(1, 128), 0, -1, -1, 0) < 0, "perf_event_open");
        /* Newer than libseccomp 2.5.4's table: by raw x86_64 number. */
        result(syscall(467 /* open_tree_attr */, AT_FDCWD, "/", O_CLOEXEC, NULL, 0) < 0, "open_tree_attr");
        result(syscall(457 /* statmount */, calloc(1, 64), calloc(1, 4096), 4096, 0) < 0, "statmount");
        result(syscall(458 /* listmount */, calloc(1, 64), calloc(1, 64), 8, 0) < 0, "listmount");
        result(syscall(447 /* memfd_secret */, 0) < 0, "memfd_secret");
        result(syscall(462 /* mseal */, 0, 0, 0) < 0 && errno == ENOSYS, "mseal");
        result(syscall(468 /* file_getattr */, AT_FDCWD, "/", calloc(1, 64), 24, 0) < 0, "file_getattr");
        result(syscall(500, 0, 0, 0) < 0 && errno == ENOSYS, "syscall 500");
}

static void ptrace_init(void) {
        result(ptrace(PTRACE_ATTACH, 1, 0, 0) < 0, "ptrace(PTRACE_ATTACH, 1)");
        result(ptrace(PTRACE_SEIZE, 1, 0, 0) < 0, "ptrace(PTRACE_SEIZE, 1)");
        result(open("/proc/1/mem", O_RDONLY | O_CLOEXEC) < 0, "open /proc/1/mem");
        result(open("/proc/1/environ", O_RDONLY | O_CLOEXEC) < 0, "open /proc/1/environ");
}

static void mknod_devices(void) {
        result(mknod("/dev/sbx-escape-blk", S_IFBLK | 0600, makedev(7, 0)) < 0, "mknod block 7:0");
        result(mknod("/dev/sbx-escape-mem", S_IFCHR | 0600, makedev(1, 1)) < 0, "mknod /dev/mem 1:1");
        result(mknod("/tmp/sbx-escape-blk", S_IFBLK | 0600, makedev(7, 0)) < 0, "mknod in /tmp");
}

static void cgroup_mkdir(void) {
        static const char *const dirs[] = {"/sys/fs/cgroup/sbx-escape", "/sys/fs/cgroup/memory/sbx-escape",
                                           "/sys/fs/cgroup/unified/sbx-escape", "/sys/fs/cgroup/pids/sbx-escape"};
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
                char what[128];
                snprintf(what, sizeof(what), "mkdir %s", dirs[i]);
                result(mkdir(dirs[i], 0755) < 0, what);
        }
}

/* Lists this process's open fds (beyond the one reading the directory). */
static void fds(void) {
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        while (d && (e = readdir(d))) {
                if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
                        continue;
                char path[300], target[512] = "";
                snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
                ssize_t n = readlink(path, target, sizeof(target) - 1);
                target[n > 0 ? n : 0] = 0;
                printf("FD %s %s\n", e->d_name, target);
                if (atoi(e->d_name) > 2) {
                        escaped = 1;
                        printf("ESCAPED fd %s leaked\n", e->d_name);
                }
        }
        if (d)
                closedir(d);
}

/* connect() to each Unix socket address given ("@name" is abstract). */
/* SIGSTOP to every pid just above the last one the sandbox's PID
 * namespace gave out, for `secs` seconds or until the file `until`
 * exists: each command sandbox-init spawns for this user is caught
 * between its uid change and its exec. Prints its pid first. */
static void stopper(int secs, const char *until) {
        printf("PID %d\n", (int)getpid());
        fflush(stdout);
        time_t end = time(NULL) + secs;
        unsigned long hits = 0, n = 0;
        while (time(NULL) < end) {
                if ((++n & 1023) == 0 && access(until, F_OK) == 0)
                        break;
                char buf[32] = {0};
                int fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        break;
                ssize_t k = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                int last = k > 0 ? atoi(buf) : 0;
                for (int p = last; p <= last + 3; p++)
                        if (p > 1 && p != getpid() && kill(p, SIGSTOP) == 0 && hits++ == 0) {
                                /* For the test to know it has caught one. */
                                printf("FIRST STOP %d\n", p);
                                fflush(stdout);
                        }
        }
        printf("BLOCKED stopper: %lu stops sent\n", hits);
}

/* SIGSTOP to every process it may signal (kill(-1): all but PID 1 and
 * itself) in a tight loop for `secs` seconds: as root inside, whatever
 * sandbox-init starts is caught within a few microseconds of its birth.
 * Prints "stopall: N rounds" (kills that reached at least one process). */
static void stopall(int secs) {
        time_t end = time(NULL) + secs;
        unsigned long hits = 0, n = 0;
        while ((++n & 255) != 0 || time(NULL) < end)
                if (kill(-1, SIGSTOP) == 0)
                        hits++;
        printf("BLOCKED stopall: %lu rounds\n", hits);
}

/* Reads /proc/PID/NAME into buf (NUL-terminated, newline cut); 0 or -1. */
static int read_proc(int pid, const char *name, char *buf, size_t size) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t k = read(fd, buf, size - 1);
        close(fd);
        if (k <= 0)
                return -1;
        buf[k] = 0;
        char *nl = strchr(buf, '\n');
        if (nl)
                *nl = 0;
        return 0;
}

/* Whether pid is in the stopped state ('T' in /proc/PID/stat) within a
 * bounded number of looks. */
static int stopped(int pid) {
        for (int i = 0; i < 10000; i++) {
                char st[256];
                if (read_proc(pid, "stat", st, sizeof(st)) < 0)
                        return 0;
                const char *e = strrchr(st, ')');
                if (e && e[1] == ' ' && e[2] == 'T')
                        return 1;
        }
        return 0;
}

/* Catches new commands' children between their uid change and their exec
 * (SIGSTOP on the pids just above the last one, as stopper does): a child
 * still running init's program (its comm is PID 1's) shares init's memory
 * until its exec. Each one caught: PTRACE_ATTACH, PTRACE_SEIZE,
 * /proc/PID/mem read-write and read-only, /proc/PID/environ and
 * process_vm_readv must all be refused; then it gets SIGSEGV, SIGUSR1 and
 * SIGCONT (signals during the spawn: the child must die of them or exec,
 * init must go on). Prints "held: N checked". */
static void held(int secs, const char *until) {
        printf("PID %d\n", (int)getpid());
        fflush(stdout);
        char init_comm[64] = "";
        if (read_proc(1, "comm", init_comm, sizeof(init_comm)) < 0) {
                printf("ESCAPED? cannot read /proc/1/comm: %s\n", strerror(errno));
                escaped = 1;
                return;
        }
        time_t end = time(NULL) + secs;
        unsigned long checked = 0, n = 0;
        while (time(NULL) < end) {
                if ((++n & 1023) == 0 && access(until, F_OK) == 0)
                        break;
                char buf[32] = {0};
                int fd = open("/proc/sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        break;
                ssize_t got = read(fd, buf, sizeof(buf) - 1);
                close(fd);
                if (got <= 0)
                        break;
                int last = atoi(buf);
                for (int p = last; p <= last + 3; p++) {
                        if (p <= 1 || p == getpid() || kill(p, SIGSTOP) < 0)
                                continue;
                        /* Only once it is stopped: a child inside its exec
                         * still has init's comm for a moment after it got
                         * the new program's (dumpable) memory. */
                        if (!stopped(p)) {
                                (void)kill(p, SIGCONT);
                                continue;
                        }
                        char comm[64] = "";
                        if (read_proc(p, "comm", comm, sizeof(comm)) == 0 && strcmp(comm, init_comm) == 0) {
                                char what[96];
                                checked++;
                                snprintf(what, sizeof(what), "ptrace(PTRACE_ATTACH) of a held child");
                                long r = ptrace(PTRACE_ATTACH, p, 0, 0);
                                result(r < 0, what);
                                if (r == 0)
                                        (void)ptrace(PTRACE_DETACH, p, 0, 0);
                                r = ptrace(PTRACE_SEIZE, p, 0, 0);
                                result(r < 0, "ptrace(PTRACE_SEIZE) of a held child");
                                if (r == 0)
                                        (void)ptrace(PTRACE_DETACH, p, 0, 0);
                                char path[64];
                                snprintf(path, sizeof(path), "/proc/%d/mem", p);
                                int fd = open(path, O_RDWR | O_CLOEXEC);
                                result(fd < 0, "open /proc/<held child>/mem read-write");
                                if (fd >= 0)
                                        close(fd);
                                fd = open(path, O_RDONLY | O_CLOEXEC);
                                result(fd < 0, "open /proc/<held child>/mem read-only");
                                if (fd >= 0)
                                        close(fd);
                                snprintf(path, sizeof(path), "/proc/%d/environ", p);
                                fd = open(path, O_RDONLY | O_CLOEXEC);
                                result(fd < 0, "open /proc/<held child>/environ");
                                if (fd >= 0)
                                        close(fd);
                                char one[8];
                                struct iovec local = { one, sizeof(one) }, remote = { (void *)0x400000, sizeof(one) };
                                ssize_t k = process_vm_readv(p, &local, 1, &remote, 1, 0);
                                result(k < 0 && errno != EFAULT, "process_vm_readv of a held child");
                                (void)kill(p, checked % 2 ? SIGSEGV : SIGUSR1);
                        }
                        (void)kill(p, SIGCONT);
                }
        }
        printf("BLOCKED held: %lu checked\n", checked);
}

static void unix_connect(int argc, char **argv) {
        for (int i = 0; i < argc; i++) {
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                size_t len = strlen(argv[i]);
                if (len >= sizeof(sa.sun_path))
                        len = sizeof(sa.sun_path) - 1;
                memcpy(sa.sun_path, argv[i], len);
                if (argv[i][0] == '@')
                        sa.sun_path[0] = 0;
                int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                char what[256];
                snprintf(what, sizeof(what), "connect %s", argv[i]);
                int r = connect(s, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len));
                result(r < 0, what);
                close(s);
        }
}

int main(int argc, char **argv) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        const char *c = argc > 1 ? argv[1] : "";
        if (!strcmp(c, "exe-write"))
                exe_write();
        else if (!strcmp(c, "write") && argc == 4)
                write_file(argv[2], argv[3]);
        else if (!strcmp(c, "kcore"))
                read_kcore();
        else if (!strcmp(c, "tty"))
                tty_ioctls();
        else if (!strcmp(c, "userns"))
                user_ns();
        else if (!strcmp(c, "userns-x32"))
                user_ns_x32();
        else if (!strcmp(c, "int80"))
                int80_socketcall();
        else if (!strcmp(c, "families"))
                socket_families();
        else if (!strcmp(c, "syscalls"))
                syscalls();
        else if (!strcmp(c, "ptrace"))
                ptrace_init();
        else if (!strcmp(c, "mknod"))
                mknod_devices();
        else if (!strcmp(c, "cgroup"))
                cgroup_mkdir();
        else if (!strcmp(c, "fds"))
                fds();
        else if (!strcmp(c, "stopper") && argc == 4)
                stopper(atoi(argv[2]), argv[3]);
        else if (!strcmp(c, "stopall") && argc == 3)
                stopall(atoi(argv[2]));
        else if (!strcmp(c, "held") && argc == 4)
                held(atoi(argv[2]), argv[3]);
        else if (!strcmp(c, "connect"))
                unix_connect(argc - 2, argv + 2);
        else {
                fprintf(stderr, "usage: probe CASE [ARG...]\n");
                return 2;
        }
        return escaped;
}
