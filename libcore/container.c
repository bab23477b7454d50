/* Starting a sandbox's PID 1 and the built-in `host` runtime (container.h).
 *
 * Runs in sandboxd (parent side, root, host namespaces), on a worker thread.
 * The clone child of sandbox-init shares the daemon's memory (CLONE_VM, on
 * x86-64; elsewhere it is a copy, as after fork) and runs on a stack of its
 * own until its exec, so between clone() and exec it makes raw syscalls only
 * (no malloc, no locks, no errno, no signal handler of the daemon's). */
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include "libcore/agent.h"
#include "libcore/container.h"
#include "libcore/fault.h"
#include "libcore/rawsys.h"
#include "libcore/userns.h"
#include "libcore/util.h"

int core_init_memfd(const char *path, sb_error **ret_err) {
        _cleanup_close_ int src = open(path, O_RDONLY | O_CLOEXEC);
        if (src < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", path);
        struct stat st;
        if (fstat(src, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "stat %s: %m", path);
        _cleanup_close_ int mfd = memfd_create("sandbox-init", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (mfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "memfd_create: %m");
        off_t off = 0;
        while (off < st.st_size) {
                ssize_t n = sendfile(mfd, src, &off, (size_t)(st.st_size - off));
                if (n <= 0)
                        return sb_error_set(ret_err, n < 0 ? negative_errno() : -EIO, NULL, NULL,
                                            "copy %s into memfd: %m", path);
        }
        if (fchmod(mfd, 0555) < 0 ||
            fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "seal memfd: %m");
        return TAKE_FD(mfd);
}

/* ---- libarchive's files, for sandbox-init (core_archive_lib_files) ---- */

#define LIB_MAX 64
#define LIB_NEEDED_MAX 32

typedef struct lib_object {
        const char *path, *soname;
        const char *needed[LIB_NEEDED_MAX];
        size_t n_needed;
        bool listed;
} lib_object;

typedef struct lib_table {
        lib_object o[LIB_MAX];
        size_t n;
} lib_table;

/* A dynamic entry's address: relocated in place by the loader on most
 * architectures, an offset from the load address where it is not. */
static const char *dyn_ptr(const struct dl_phdr_info *info, ElfW(Addr) p) {
        return (const char *)(p < info->dlpi_addr ? info->dlpi_addr + p : p);
}

static int lib_collect(struct dl_phdr_info *info, size_t size, void *userdata) {
        lib_table *t = userdata;
        if (!info->dlpi_name || info->dlpi_name[0] != '/' || t->n >= LIB_MAX)
                return 0;
        const ElfW(Dyn) *dyn = NULL;
        for (size_t i = 0; i < info->dlpi_phnum; i++)
                if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
                        dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        if (!dyn)
                return 0;
        const char *strtab = NULL;
        for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++)
                if (d->d_tag == DT_STRTAB)
                        strtab = dyn_ptr(info, d->d_un.d_ptr);
        if (!strtab)
                return 0;
        lib_object *o = &t->o[t->n++];
        *o = (lib_object){.path = info->dlpi_name};
        for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
                if (d->d_tag == DT_SONAME)
                        o->soname = strtab + d->d_un.d_val;
                else if (d->d_tag == DT_NEEDED && o->n_needed < LIB_NEEDED_MAX)
                        o->needed[o->n_needed++] = strtab + d->d_un.d_val;
        }
        return 0;
}

static lib_object *lib_find(lib_table *t, const char *soname) {
        for (size_t i = 0; i < t->n; i++)
                if (t->o[i].soname && streq(t->o[i].soname, soname))
                        return &t->o[i];
        return NULL;
}

/* Depth first, each object after what it needs; false when one is missing. */
static bool lib_order(lib_table *t, lib_object *o, const char **out, size_t *n) {
        if (o->listed)
                return true;
        o->listed = true;
        for (size_t i = 0; i < o->n_needed; i++) {
                lib_object *dep = lib_find(t, o->needed[i]);
                if (!dep || !lib_order(t, dep, out, n))
                        return false;
        }
        if (*n >= LIB_MAX)
                return false;
        out[(*n)++] = o->path;
        return true;
}

static const char *archive_files[LIB_MAX + 1];
static bool archive_files_ok;
static pthread_once_t archive_files_once = PTHREAD_ONCE_INIT;

static void archive_files_find(void) {
        static lib_table t;
        dl_iterate_phdr(lib_collect, &t);
        lib_object *a = lib_find(&t, "libarchive.so.13");
        size_t n = 0;
        archive_files_ok = a && lib_order(&t, a, archive_files, &n);
        archive_files[archive_files_ok ? n : 0] = NULL;
}

const char *const *core_archive_lib_files(void) {
        pthread_once(&archive_files_once, archive_files_find);
        return archive_files_ok ? archive_files : NULL;
}

/* struct clone_args of <linux/sched.h> (kernel ABI, v2 = 88 bytes), kept
 * here because that header's CLONE_* clash with glibc's <sched.h>. */
struct clone3_args {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
                set_tid_size, cgroup;
};
#define CLONE3_INTO_CGROUP 0x200000000ULL

struct child_args {
        int init_fd;
        int agent_fd;
        int listen_fd;   /* AGENT_LISTEN_FD in the child, or -EBADF */
        int devnull;
        int sync_fd;     /* userns: read end; EOF before a byte = abort */
        int sync_w;      /* its write end (the child closes it with the rest) */
        int exec_w;      /* close-on-exec: its EOF tells the parent the child exec'd or died */
        sigset_t mask;   /* the signal mask sandbox-init starts with */
};

/* The child's fds between its start and exec: 0-4 what init gets, then
 * the memfd to exec, the userns go-byte pipe, and the exec pipe. */
#define CHILD_EXE_FD (AGENT_LISTEN_FD + 1)
#define CHILD_SYNC_FD (AGENT_LISTEN_FD + 2)
#define CHILD_EXEC_FD (AGENT_LISTEN_FD + 3)

/* The child's stack (CLONE_VM): it only moves fds and execs. */
#define CHILD_STACK_SIZE (64 * 1024)

/* Not instrumented by ASan (here and in child_main): a child sharing the
 * daemon's memory must not poison shadow bytes of a stack it never
 * returns from (the daemon reuses that memory once the child exec'd). */
#define CHILD_CODE __attribute__((no_sanitize_address))

#define raw(n, a, b, c) core_rawsys((n), (long)(a), (long)(b), (long)(c), 0, 0)

/* Child side of clone(): raw syscalls only, then exec.
 *
 * Its first act is to put the fds it needs at known numbers and close
 * every other one, before it waits for the go byte: a child waiting with a
 * copy of the daemon's table would keep the daemon's locks, its listening
 * socket and the write ends of the other children's sync pipes alive after
 * the daemon died (and those children, holding its write end, would keep
 * it waiting forever). With only its own read end left, the daemon's death
 * closes the last write end: the child reads EOF and exits. Layout: 0-2
 * /dev/null, AGENT_FD, AGENT_LISTEN_FD (or closed), the memfd at
 * AGENT_LISTEN_FD + 1, the sync read end at AGENT_LISTEN_FD + 2 and the
 * exec pipe's write end at AGENT_LISTEN_FD + 3 (all three close-on-exec). */
CHILD_CODE _noreturn_ static void child_main(void *p) {
        struct child_args *a = p;
        /* Park every fd we keep above the slots about to be set, so no
         * dup below can clobber one of them. */
        long exe = raw(SYS_fcntl, a->init_fd, F_DUPFD_CLOEXEC, 64);
        long agent = raw(SYS_fcntl, a->agent_fd, F_DUPFD_CLOEXEC, 64);
        long null = raw(SYS_fcntl, a->devnull, F_DUPFD_CLOEXEC, 64);
        long lfd = a->listen_fd >= 0 ? raw(SYS_fcntl, a->listen_fd, F_DUPFD_CLOEXEC, 64) : -1;
        long sync = a->sync_fd >= 0 ? raw(SYS_fcntl, a->sync_fd, F_DUPFD_CLOEXEC, 64) : -1;
        long ew = a->exec_w >= 0 ? raw(SYS_fcntl, a->exec_w, F_DUPFD_CLOEXEC, 64) : -1;
        if (exe < 0 || agent < 0 || null < 0 || (a->listen_fd >= 0 && lfd < 0) || (a->sync_fd >= 0 && sync < 0) ||
            (a->exec_w >= 0 && ew < 0) || raw(SYS_dup3, null, 0, 0) < 0 || raw(SYS_dup3, null, 1, 0) < 0 ||
            raw(SYS_dup3, null, 2, 0) < 0 || raw(SYS_dup3, agent, AGENT_FD, 0) < 0 ||
            (lfd >= 0 && raw(SYS_dup3, lfd, AGENT_LISTEN_FD, 0) < 0) ||
            raw(SYS_dup3, exe, CHILD_EXE_FD, O_CLOEXEC) < 0 ||
            (sync >= 0 && raw(SYS_dup3, sync, CHILD_SYNC_FD, O_CLOEXEC) < 0) ||
            (ew >= 0 && raw(SYS_dup3, ew, CHILD_EXEC_FD, O_CLOEXEC) < 0))
                raw(SYS_exit_group, 126, 0, 0);
        if (lfd < 0)
                raw(SYS_close, AGENT_LISTEN_FD, 0, 0);
        /* Only 0-4 may cross into the sandbox, and nothing else of the
         * daemon's may stay here while we wait. */
        if (raw(SYS_close_range, CHILD_EXEC_FD + 1, ~0U, 0) < 0)
                raw(SYS_exit_group, 126, 0, 0);
        if (sync >= 0) {
                /* User namespace: wait until the parent has written
                 * uid_map/gid_map. Exec'ing before would drop every
                 * capability (the kernel grants them at exec only to the
                 * namespace's uid 0, which has no host id yet). Then become
                 * that uid 0 (host id = the range's base): clone kept the
                 * parent thread's ids (real and saved host root, effective
                 * the base), and host root is not mapped here. The host
                 * groups go too: setgroups is still allowed (the maps were
                 * written by host root), and none of host root's groups may
                 * follow. EOF before the byte (the parent gave up or died):
                 * exit. */
                char c;
                long n;
                while ((n = raw(SYS_read, CHILD_SYNC_FD, &c, 1)) == -EINTR)
                        ;
                if (n != 1 || raw(SYS_setgroups, 0, 0, 0) < 0 || raw(SYS_setresgid, 0, 0, 0) < 0 ||
                    raw(SYS_setresuid, 0, 0, 0) < 0)
                        raw(SYS_exit_group, 125, 0, 0);
                raw(SYS_close, CHILD_SYNC_FD, 0, 0);
        }
        char *const argv[] = {(char *)"sandbox-init", NULL};
        char *const envp[] = {NULL};
        /* The mask sandbox-init always started with (the worker's): the
         * parent blocked every signal for the clone, so that no handler
         * of the daemon's could run here on its memory. */
        core_rawsys(SYS_rt_sigprocmask, SIG_SETMASK, (long)&a->mask, 0, sizeof(uint64_t), 0);
        /* execveat on the memfd: it is the memfd, not a path, that runs. */
        core_rawsys(SYS_execveat, CHILD_EXE_FD, (long)"", (long)argv, (long)envp, AT_EMPTY_PATH);
        raw(SYS_exit_group, 127, 0, 0);
        __builtin_unreachable();
}

/* The child's stack (CLONE_VM), or NULL where the child is a copy (not
 * x86-64, or no memory: then the clone copies, as fork). */
static void *child_stack_new(void) {
#if defined(__x86_64__)
        void *p = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        return p == MAP_FAILED ? NULL : p;
#else
        return NULL;
#endif
}

static void child_stack_free(void **p) {
        if (*p)
                munmap(*p, CHILD_STACK_SIZE);
}

/* Blocks until the read end `fd` of the exec pipe sees EOF: the child
 * exec'd (its close-on-exec copy closed) or died. */
static void wait_exec(int fd) {
        char c;
        while (read(fd, &c, 1) != 0 && (errno == EINTR || errno == EAGAIN))
                ;
}

/* Parent side of the userns start: maps, then the go byte. On failure the
 * child sees EOF and exits. */
static int release_userns_child(pid_t pid, uint32_t userns_base, int sync_w, sb_error **ret_err) {
        int r = core_userns_write_maps(pid, userns_base, ret_err);
        if (r >= 0 && write(sync_w, "1", 1) != 1)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "release sandbox-init: %m");
        return r;
}

#if defined(__x86_64__)
/* clone3(2) with CLONE_VM: the child runs child_main(a) on the stack
 * args->stack (it never returns), the parent gets its pid or a negative
 * errno. No copy of the daemon's address space (its page tables and, until
 * the exec, copy-on-write faults on both sides: 0.75 ms of the clone for
 * 18 MiB and 300 mappings, against 0.44 for the namespaces), and the
 * exec drops a reference instead of tearing a copy down. In assembly: a
 * child on a new stack cannot return through the syscall() wrapper (as
 * glibc's own clone()); r12 and r13 survive the syscall in both. */
static pid_t clone3_vm(struct clone3_args *args, struct child_args *a) {
        args->flags |= CLONE_VM;
        register void (*fn)(void *) __asm__("r12") = child_main;
        register void *arg __asm__("r13") = a;
        long ret;
        __asm__ volatile("syscall\n\t"
                         "test %%rax, %%rax\n\t"
                         "jnz 1f\n\t"
                         "xor %%ebp, %%ebp\n\t"
                         "mov %%r13, %%rdi\n\t"
                         "call *%%r12\n\t"
                         "ud2\n"
                         "1:"
                         : "=a"(ret)
                         : "0"((long)SYS_clone3), "D"(args), "S"(sizeof(*args)), "r"(fn), "r"(arg)
                         : "rcx", "r11", "memory");
        return (pid_t)ret;
}
#endif

/* clone3 of sandbox-init's child: its pid or a negative errno. */
static pid_t clone3_child(struct clone3_args *args, struct child_args *a) {
#if defined(__x86_64__)
        if (args->stack)
                return clone3_vm(args, a);
#endif
        pid_t pid = (pid_t)syscall(SYS_clone3, args, sizeof(*args));
        if (pid == 0)
                child_main(a);
        return pid < 0 ? negative_errno() : pid;
}

/* clone3 of sandbox-init; returns its pid (parent side) or a negative
 * errno. A new user namespace is owned by the euid of the thread that
 * clones it (user_namespaces(7)): as host root, the per-user kernel counts
 * (inotify instances, ...) of every sandbox would be charged to host root
 * together, so this thread takes the range's base ids for the clone only;
 * the child starts with those credentials. */
static pid_t clone_init(struct clone3_args *args, struct child_args *a, uint32_t userns_base,
                        sb_error **ret_err) {
        int r = userns_base ? core_userns_owner_enter(userns_base) : 0;
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "take the ids of %u to own the user namespace: %s",
                                    userns_base, strerror(-r));
        pid_t pid = clone3_child(args, a);
        int clone_err = pid < 0 ? pid : 0;
        /* Host root again before anything else: the maps, and all this
         * worker thread does afterwards, need it. */
        if (userns_base && (r = core_userns_owner_leave()) < 0) {
                if (pid > 0) {
                        int pidfd = *(int *)(uintptr_t)args->pidfd;
                        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                        waitpid(pid, NULL, 0);
                        close(pidfd);
                }
                return sb_error_set(ret_err, r, NULL, NULL, "restore the ids of root after clone: %s", strerror(-r));
        }
        if (pid < 0)
                return sb_error_set(ret_err, clone_err, NULL, NULL, "clone sandbox-init: %s", strerror(-clone_err));
        return pid;
}

/* clone_init as a core_cgroup_run_inside_v1 callback. */
struct clone_call {
        struct clone3_args *args;
        struct child_args *a;
        uint32_t userns_base;
        int netns_fd;   /* a network namespace to be born in, or -1 */
        sb_error **err;
        pid_t pid;
};

/* Clones into c->netns_fd when one is given (a pod's namespace, made by
 * CNI: docs/KUBERNETES.md): this thread joins it for the clone only, so
 * the child is born there without CLONE_NEWNET (a child already in its
 * own user namespace could not setns(2) into a namespace of the host's),
 * and returns to the thread's own namespace before anything else runs on
 * it. setns(CLONE_NEWNET) moves the calling thread alone. */
static int clone_call_run(void *userdata) {
        struct clone_call *c = userdata;
        _cleanup_close_ int home = -EBADF;
        if (c->netns_fd >= 0) {
                if ((home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
                        return sb_error_set(c->err, negative_errno(), NULL, NULL, "open this thread's network namespace: %m");
                if (setns(c->netns_fd, CLONE_NEWNET) < 0)
                        return sb_error_set(c->err, negative_errno(), NULL, NULL, "join the pod's network namespace: %m");
        }
        c->pid = clone_init(c->args, c->a, c->userns_base, c->err);
        /* A worker thread left in the pod's namespace would make the next
         * sandbox's sockets there: nothing can be trusted after that. */
        if (home >= 0 && setns(home, CLONE_NEWNET) < 0)
                abort();
        return c->pid < 0 ? c->pid : 0;
}

int core_spawn_init(int init_memfd, core_cgroup *cg, uint32_t userns_base, int listen_fd, int netns_fd,
                    core_spawn_result *ret, sb_error **ret_err) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "socketpair: %m");
        _cleanup_close_ int ours = sv[0], theirs = sv[1];
        _cleanup_close_ int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (devnull < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open /dev/null: %m");

        _cleanup_close_ int sync_r = -EBADF, sync_w = -EBADF;
        if (userns_base) {
                int p[2];
                if (pipe2(p, O_CLOEXEC) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
                sync_r = p[0];
                sync_w = p[1];
        }
        /* Its write end is the child's alone once cloned (close-on-exec):
         * EOF on the read end, the child exec'd or died, and its stack and
         * `a` (read from this frame, CLONE_VM) are free. */
        int ep[2];
        if (pipe2(ep, O_CLOEXEC) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
        _cleanup_close_ int exec_r = ep[0], exec_w = ep[1];
        _cleanup_(child_stack_free) void *stack = child_stack_new();
        struct child_args a = {.init_fd = init_memfd, .agent_fd = theirs, .listen_fd = listen_fd, .devnull = devnull,
                               .sync_fd = sync_r,
                              .sync_w = sync_w, .exec_w = exec_w};
        /* clone3 so the child is born in its v2 cgroup (no migration, see
         * core_cgroup_open_v2); with CLONE_VM on a stack of its own
         * (clone3_vm), else on a copy of this stack, like fork. */
        _cleanup_close_ int cgfd = cg ? core_cgroup_open_v2(cg) : -ENOENT;
        int pidfd = -EBADF;
        struct clone3_args args = {
                .flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | (netns_fd >= 0 ? 0 : CLONE_NEWNET) |
                         CLONE_PIDFD |
                         (userns_base ? CLONE_NEWUSER : 0) | (cgfd >= 0 ? CLONE3_INTO_CGROUP : 0),
                .pidfd = (uint64_t)(uintptr_t)&pidfd,
                .exit_signal = SIGCHLD,
                .cgroup = cgfd >= 0 ? (uint64_t)cgfd : 0,
                .stack = (uint64_t)(uintptr_t)stack,
                .stack_size = stack ? CHILD_STACK_SIZE : 0,
        };
        /* On a v1 (or hybrid) host the child is born in its v1 cgroups
         * too: the cloning thread steps into them for the clone (a move
         * of the calling thread alone takes no threadgroup lock), so no
         * migration of sandbox-init waits for an RCU grace period. */
        struct clone_call call = {.args = &args, .a = &a, .userns_base = userns_base, .netns_fd = netns_fd,
                                  .err = ret_err, .pid = -1};
        bool born_inside = false;
        /* No handler of the daemon's may run in a child on its memory:
         * every signal blocked until the child's exec (it restores the
         * worker's mask right before, as sandbox-init always got it). */
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &a.mask);
        int r = cg ? core_cgroup_run_inside_v1(cg, clone_call_run, &call, &born_inside, ret_err)
                   : clone_call_run(&call);
        pthread_sigmask(SIG_SETMASK, &a.mask, NULL);
        pid_t pid = call.pid;
        if (pid > 0)
                close(TAKE_FD(exec_w));
        if (r < 0 && pid > 0) {
                /* Cloned, but the thread could not leave the session's cgroups. */
                syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
                waitpid(pid, NULL, 0);
                close(pidfd);
        }
        if (r < 0)
                return r;
        _cleanup_close_ int pfd = pidfd;
        /* With CLONE_NEWUSER every other new namespace (mount, PID, UTS,
         * IPC, network) is owned by the new user namespace, so sandbox root
         * holds its capabilities over them and over nothing else. The maps
         * are written from here, by host root (CAP_SETUID and CAP_SETGID
         * over the parent namespace: no restriction on the map, and
         * setgroups stays allowed, user_namespaces(7)). */
        if (userns_base) {
                close(TAKE_FD(sync_r)); /* the child holds its own copy */
                /* The child waits for the go byte here. */
                core_fault("spawn.init_waiting");
                core_fault_stall("spawn.init_waiting");
                if (release_userns_child(pid, userns_base, sync_w, ret_err) < 0) {
                        syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
                        waitpid(pid, NULL, 0);
                        return sb_error_prefix(ret_err, "user namespace of sandbox-init");
                }
        }
        /* Until then the child may still read `a` and runs on `stack`. */
        wait_exec(exec_r);

        if (cg && !born_inside) {
                /* A v1 migration waits for an RCU grace period (~10 ms here);
                 * the v2 one was avoided by CLONE_INTO_CGROUP above. */
                r = cgfd >= 0 ? core_cgroup_attach_v1(cg, pid, ret_err) : core_cgroup_attach(cg, pid, ret_err);
                if (r < 0) {
                        syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
                        waitpid(pid, NULL, 0);
                        return sb_error_prefix(ret_err, "attach sandbox-init to its cgroup");
                }
        }
        ret->pid = pid;
        ret->pidfd = TAKE_FD(pfd);
        ret->agent_fd = TAKE_FD(ours);
        return 0;
}

const char *const core_runtime_host_binds[][2] = {
        {"/usr", "/usr"},
        {"/etc/ld.so.cache", "/etc/ld.so.cache"},
        {"/etc/alternatives", "/etc/alternatives"},
        /* Not /etc/ssl whole: its private/ holds the host's TLS keys. */
        {"/etc/ssl/certs", "/etc/ssl/certs"},
        {"/etc/ssl/openssl.cnf", "/etc/ssl/openssl.cnf"},
        {"/etc/ca-certificates", "/etc/ca-certificates"},
        {NULL, NULL},
};

static int write_at(int dfd, const char *name, const char *text) {
        _cleanup_close_ int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return negative_errno();
        size_t n = strlen(text);
        return write(fd, text, n) == (ssize_t)n ? 0 : -EIO;
}

/* The generated /etc of the host runtime. */
static const struct { const char *name, *text; } etc_files[] = {
        {"passwd", "root:x:0:0:root:/root:/bin/bash\n"
                   "sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/bash\n"
                   "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
        {"group", "root:x:0:\ntty:x:5:\nsandbox:x:1000:\nnogroup:x:65534:\n"},
        {"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"
                          "networks: files\nprotocols: files\nservices: files\n"},
        {"hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"},
        {"hostname", "sandbox\n"},
        {"resolv.conf", "# no resolver: this sandbox has no network\n"},
        {"shells", "/bin/sh\n/bin/bash\n/usr/bin/bash\n"},
};

/* The host's os-release(5), for /etc/os-release of the host runtime:
 * pip, package managers and lsb_release read it to learn the distribution,
 * which is the host's (its /usr is the sandbox's). */
typedef enum { OS_RELEASE_NONE, OS_RELEASE_LINK, OS_RELEASE_COPY } os_release_kind;
#define OS_RELEASE_MAX_BYTES (64 * 1024)

/* OS_RELEASE_LINK when the host's /etc/os-release is /usr/lib/os-release
 * (Debian's relative symlink, or the file only /usr has): the runtime's
 * /etc/os-release is then the same symlink into the read-only /usr bind.
 * OS_RELEASE_COPY, with the text in *ret_text (caller frees), when /etc has
 * a file of its own (an override, os-release(5) says it wins): its text is
 * copied into the generated /etc. Only root-owned host files are read, and
 * at most OS_RELEASE_MAX_BYTES of them. */
static os_release_kind host_os_release(char **ret_text) {
        struct stat e, u;
        bool have_etc = stat("/etc/os-release", &e) == 0 && S_ISREG(e.st_mode);
        bool have_usr = stat("/usr/lib/os-release", &u) == 0 && S_ISREG(u.st_mode);
        *ret_text = NULL;
        if (have_usr && (!have_etc || (e.st_dev == u.st_dev && e.st_ino == u.st_ino)))
                return OS_RELEASE_LINK;
        size_t len;
        if (have_etc && core_read_file("/etc/os-release", OS_RELEASE_MAX_BYTES, ret_text, &len) == 0) {
                if (strlen(*ret_text) == len)
                        return OS_RELEASE_COPY;
                free(*ret_text); /* a NUL byte: not an os-release file */
                *ret_text = NULL;
        }
        return have_usr ? OS_RELEASE_LINK : OS_RELEASE_NONE;
}

static int build_os_release(int etc) {
        _cleanup_free_ char *text = NULL;
        switch (host_os_release(&text)) {
        case OS_RELEASE_LINK:
                return symlinkat("../usr/lib/os-release", etc, "os-release") < 0 ? negative_errno() : 0;
        case OS_RELEASE_COPY:
                return write_at(etc, "os-release", text);
        default:
                return 0;
        }
}

static int build_etc(int etc) {
        for (size_t i = 0; i < ELEMENTSOF(etc_files); i++) {
                int r = write_at(etc, etc_files[i].name, etc_files[i].text);
                if (r < 0)
                        return r;
        }
        int k = build_os_release(etc);
        if (k < 0)
                return k;
        /* Mount points for the host binds under /etc. */
        for (size_t i = 0; core_runtime_host_binds[i][0]; i++) {
                const char *dst = core_runtime_host_binds[i][1];
                if (strncmp(dst, "/etc/", 5) != 0)
                        continue;
                struct stat st;
                if (stat(core_runtime_host_binds[i][0], &st) < 0)
                        continue;
                /* Parents first ("ssl" for "ssl/certs"). */
                char parent[PATH_MAX];
                snprintf(parent, sizeof(parent), "%s", dst + 5);
                for (char *sl = strchr(parent, '/'); sl; sl = strchr(sl + 1, '/')) {
                        *sl = 0;
                        if (mkdirat(etc, parent, 0755) < 0 && errno != EEXIST)
                                return negative_errno();
                        *sl = '/';
                }
                if (S_ISDIR(st.st_mode)) {
                        if (mkdirat(etc, dst + 5, 0755) < 0 && errno != EEXIST)
                                return negative_errno();
                } else {
                        int r = write_at(etc, dst + 5, "");
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static const char *const host_dirs[] = {"usr", "etc", "proc", "dev", "sys", "tmp", "run", "var", "var/tmp",
                                        "home", "root", "mnt", "opt", "srv", "workspace"};
static const char *const host_usr_links[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};

/* The version of the tree host_build_tree() would make on this host now:
 * the first 16 hex digits of SHA-256 over everything it depends on (the
 * layout, the /usr links the host has, the generated files, which host
 * binds exist and of what type). Same inputs, same version: a restart
 * reuses the tree its running sessions stand on. */
static int host_version(char ret[static CORE_RUNTIME_VERSION_LEN + 1]) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return -ENOMEM;
        fputs("host-runtime/1\n", f);
        for (size_t i = 0; i < ELEMENTSOF(host_dirs); i++)
                fprintf(f, "dir %s\n", host_dirs[i]);
        for (size_t i = 0; i < ELEMENTSOF(host_usr_links); i++) {
                char host[64];
                snprintf(host, sizeof(host), "/usr/%s", host_usr_links[i]);
                fprintf(f, "link %s %d\n", host_usr_links[i], access(host, F_OK) == 0);
        }
        for (size_t i = 0; i < ELEMENTSOF(etc_files); i++)
                fprintf(f, "file %s %zu\n%s", etc_files[i].name, strlen(etc_files[i].text), etc_files[i].text);
        /* A host upgrade that changes a copied os-release makes a new version. */
        _cleanup_free_ char *osrel = NULL;
        os_release_kind ok = host_os_release(&osrel);
        if (ok == OS_RELEASE_LINK)
                fputs("os-release link\n", f);
        else if (ok == OS_RELEASE_COPY)
                fprintf(f, "os-release copy %zu\n%s", strlen(osrel), osrel);
        for (size_t i = 0; core_runtime_host_binds[i][0]; i++) {
                struct stat st;
                int type = stat(core_runtime_host_binds[i][0], &st) < 0 ? 0 : S_ISDIR(st.st_mode) ? 2 : 1;
                fprintf(f, "bind %s %d\n", core_runtime_host_binds[i][1], type);
        }
        if (fclose(f) != 0 || !text)
                return -ENOMEM;
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)text, len, md);
        for (size_t i = 0; i < CORE_RUNTIME_VERSION_LEN / 2; i++)
                sprintf(ret + 2 * i, "%02x", md[i]);
        return 0;
}

/* Moves `from` (if it exists) to <dir>/<name>, through <dir>.<name> so that
 * a crash between the two renames is finished at the next start. */
static int host_move_in(const char *dir, const char *from, const char *name, sb_error **ret_err) {
        _cleanup_free_ char *moved = NULL, *final = NULL;
        if (asprintf(&moved, "%s.%s", dir, name) < 0 || asprintf(&final, "%s/%s", dir, name) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (from && access(from, F_OK) == 0 && rename(from, moved) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "rename %s: %m", from);
        if (access(moved, F_OK) < 0)
                return 0;
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mkdir %s: %m", dir);
        if (rename(moved, final) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "rename %s: %m", moved);
        return 0;
}

/* A tree of the layout before versions (<dir> itself held usr, etc...)
 * becomes the version "legacy" (<dir>/legacy): sessions of an older
 * daemon stand on it, and a rename moves nothing under their overlays.
 * That layout swapped <dir>.new in and removed <dir>.old at each start; a
 * <dir>.old a crash left may be what older sessions stand on, so it is
 * kept too, as "legacy-old". */
static int host_migrate_legacy(const char *dir, sb_error **ret_err) {
        _cleanup_free_ char *usr = NULL, *tmp = NULL, *old = NULL;
        if (asprintf(&usr, "%s/usr", dir) < 0 || asprintf(&tmp, "%s.new", dir) < 0 ||
            asprintf(&old, "%s.old", dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        core_rm_rf(tmp);        /* never used by a session */
        int r = host_move_in(dir, access(usr, F_OK) == 0 ? dir : NULL, "legacy", ret_err);
        if (r >= 0)
                r = host_move_in(dir, old, "legacy-old", ret_err);
        return r;
}

/* Builds one version of the host runtime in the new directory `tmp`. */
static int host_build_tree(const char *tmp, sb_error **ret_err) {
        int r = core_mkdir_p(tmp, 0755);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "mkdir %s: %s", tmp, strerror(-r));
        _cleanup_close_ int dfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", tmp);
        for (size_t i = 0; i < ELEMENTSOF(host_dirs); i++)
                if (mkdirat(dfd, host_dirs[i], 0755) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mkdir %s: %m", host_dirs[i]);
        if (fchmodat(dfd, "tmp", 01777, 0) < 0 || fchmodat(dfd, "var/tmp", 01777, 0) < 0 ||
            fchmodat(dfd, "root", 0700, 0) < 0 || mkdirat(dfd, "home/sandbox", 0755) < 0 ||
            fchownat(dfd, "home/sandbox", SANDBOX_UID, SANDBOX_GID, 0) < 0 ||
            fchownat(dfd, "workspace", SANDBOX_UID, SANDBOX_GID, 0) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "prepare runtime tree: %m");
        /* Merged /usr, as on the host: follow the host's own layout. */
        for (size_t i = 0; i < ELEMENTSOF(host_usr_links); i++) {
                char host[64], target[64];
                snprintf(host, sizeof(host), "/usr/%s", host_usr_links[i]);
                if (access(host, F_OK) < 0)
                        continue;
                snprintf(target, sizeof(target), "usr/%s", host_usr_links[i]);
                if (symlinkat(target, dfd, host_usr_links[i]) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "symlink %s: %m",
                                            host_usr_links[i]);
        }
        _cleanup_close_ int etc = openat(dfd, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (etc < 0 || (r = build_etc(etc)) < 0)
                return sb_error_set(ret_err, etc < 0 ? negative_errno() : r, NULL, NULL,
                                    "generate runtime /etc: %s", strerror(etc < 0 ? errno : -r));
        return 0;
}

int core_runtime_host_build(const char *dir, char ret_version[static CORE_RUNTIME_VERSION_LEN + 1],
                            sb_error **ret_err) {
        char version[CORE_RUNTIME_VERSION_LEN + 1];
        int r = host_migrate_legacy(dir, ret_err);
        if (r < 0)
                return r;
        if ((r = host_version(version)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "out of memory");
        if ((r = core_mkdir_p(dir, 0755)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "mkdir %s: %s", dir, strerror(-r));
        _cleanup_free_ char *path = NULL, *tmp = NULL;
        char hex[17];
        core_random_hex(hex, 16);
        if (asprintf(&path, "%s/%s", dir, version) < 0 || asprintf(&tmp, "%s/.tmp-%s", dir, hex) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* A version is whole once it has its name (renamed into place, never
         * written after), so an existing one is used as it is. */
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
                memcpy(ret_version, version, sizeof(version));
                return 0;
        }
        r = host_build_tree(tmp, ret_err);
        if (r >= 0 && rename(tmp, path) < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "rename %s: %m", tmp);
        if (r < 0) {
                core_rm_rf(tmp);
                return r;
        }
        memcpy(ret_version, version, sizeof(version));
        return 0;
}
