/* Commands run by sandbox-init: the spawn/exec sequence of the child
 * (session, stdio on pipes or a pty, user, cwd, signal reset, exec errors
 * reported back to init before the spawn returns), relaying output as
 * `output` events, stdin, resize and kill, and reaping with `exit` events
 * sent after all output. */
#include <fcntl.h>
#include <sched.h>
#include <limits.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <grp.h>
#include <inttypes.h>
#include <termios.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sys/syscall.h>
#include "libcore/agent.h"
#include "libcore/caps.h"
#include "libcore/init/init.h"
#include "libcore/log.h"
#include "libcore/rawsys.h"
#include "libcore/seccomp.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* sandboxd holds this init to what it may send past a window (agent.h):
 * one read past it, and the reads at a command's reap (drain_stream). */
_Static_assert(INIT_OUTPUT_CHUNK + 2 * ((uint64_t) INIT_DRAIN_MAX + INIT_OUTPUT_CHUNK) <= AGENT_WINDOW_SLACK,
               "init's reads past a window must stay within AGENT_WINDOW_SLACK");

/* Steps of the child that can fail before exec; reported to the parent. */
enum child_stage { STAGE_STDIO, STAGE_TTY, STAGE_USER, STAGE_CWD, STAGE_CONFINE, STAGE_EXEC, STAGE_CONTAINER };

typedef struct child_report {
        int stage;
        int err; /* positive errno */
} child_report;

typedef struct run_spec {
        int64_t id;
        char **argv;   /* NULL-terminated, points into the request */
        char **envp;   /* NULL-terminated, owned array of borrowed strings */
        const char *path; /* PATH used to find argv[0] */
        const char *cwd;
        bool cwd_given;
        uid_t uid;
        gid_t gid;
        bool tty, want_stdin;
        unsigned short rows, cols;
        const char *meta; /* sandboxd's own record of the command, or NULL */
        size_t log_bytes; /* retained log per stream ("logBytes"; 0: none) */
        uint64_t window;  /* per-command flow control ("window"; 0: none) */
        const init_container *ctr; /* "container": the one it runs in, or NULL */
        bool ctr_missing;          /* "container" named one init does not have */
} run_spec;

static void run_spec_clear(run_spec *s) {
        free(s->argv);
        free(s->envp);
}

/* A command not finished yet (a finished one only waits for its ack). */
static init_cmd *cmd_find(init_agent *a, int64_t id) {
        for (init_cmd *c = a->cmds; c; c = c->next)
                if (c->id == id && !c->finished)
                        return c;
        return NULL;
}

/* Takes c out of the list; freed after this epoll batch, since later
 * events of the same batch may still point at it. */
static void cmd_forget(init_agent *a, init_cmd *c) {
        for (init_cmd **p = &a->cmds; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        c->next = a->dead;
        a->dead = c;
}

/* The exit event of agent.h; with a reaped command `c`, its "usage". */
static void send_exit_event(init_agent *a, int64_t id, int code, const char *error, const init_cmd *c) {
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "exit");
        cJSON_AddNumberToObject(ev, "id", (double)id);
        cJSON_AddNumberToObject(ev, "code", code);
        if (error)
                cJSON_AddStringToObject(ev, "error", error);
        cJSON *u = c && c->has_usage ? cJSON_AddObjectToObject(ev, "usage") : NULL;
        if (u) {
                cJSON_AddNumberToObject(u, "cpuMs", (double)c->cpu_ms);
                cJSON_AddNumberToObject(u, "memoryPeakBytes", (double)c->maxrss_bytes);
        }
        (void)agent_send(a, ev);
}

static void send_exit(init_agent *a, int64_t id, int code, const char *error) {
        send_exit_event(a, id, code, error, NULL);
}

static void send_cmd_exit(init_agent *a, const init_cmd *c, const char *error) {
        send_exit_event(a, c->id, c->exit_code, error, c);
}

static void spawn_release(init_cmd *c);

/* ---- the child side (runs between spawn and exec; no return) ---- */

/* The child shares init's address space until its exec (spawn_child:
 * clone with CLONE_VM and without CLONE_VFORK, as glibc's posix_spawn does
 * but without waiting for it). So it runs raw system calls on what its
 * spawn_block holds and nothing else: no libc wrapper (errno and every
 * other thread-local variable are init's, and a wrapper may take a lock or
 * broadcast a uid change to what it believes are its threads), no malloc,
 * no global written, only its own stack, which is in the block's mapping.
 * memcpy and strlen are the only libc functions it calls (pure, bound at
 * load time: -z now). Where core_rawsys is not the inline instruction
 * (libcore/rawsys.h), the child gets a copy of init's memory (fork
 * semantics), in which errno is its own. */
#define SPAWN_VM_CAPABLE CORE_RAWSYS_INLINE
/* The child's mapping: a guard page, the child's stack, then the
 * spawn_block. */
#define SPAWN_STACK (64 * 1024)
#define R0(n) core_rawsys((n), 0, 0, 0, 0, 0)
#define R1(n, a) core_rawsys((n), (long)(a), 0, 0, 0, 0)
#define R2(n, a, b) core_rawsys((n), (long)(a), (long)(b), 0, 0, 0)
#define R3(n, a, b, c) core_rawsys((n), (long)(a), (long)(b), (long)(c), 0, 0)
#define R4(n, a, b, c, d) core_rawsys((n), (long)(a), (long)(b), (long)(c), (long)(d), 0)
#define R5(n, a, b, c, d, e) core_rawsys((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e))

/* The kernel's struct sigaction for rt_sigaction (x86_64 and the generic
 * layout: handler, flags, restorer, mask of _NSIG bits). */
struct spawn_ksigaction {
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        uint64_t mask;
};

/* Everything the child of one command needs, made by the parent before
 * the clone in a mapping of its own (spawn_block_new: a guard page, the
 * child's stack, then this block and the strings and arrays it points
 * to). The parent does not touch the mapping again until the child has
 * exec'd or died: it is released at the report pipe's end of file, which
 * the kernel gives only after the child left this address space (exec
 * switches the mm before it closes the close-on-exec report pipe; exit
 * drops the mm before it closes the files), or at the child's reap. */
typedef struct spawn_block {
        size_t map_len;          /* the whole mapping, guard page included */
        struct spawn_block *next_free;
        bool shares_vm;          /* cloned with CLONE_VM */
        int pidns;               /* a container's PID namespace for the child, or -1 */
        int report_fd;           /* write end of the report pipe */
        int in_fd, out_fd, err_fd; /* what goes on 0, 1 and 2 (all >= 3) */
        bool tty;                /* out_fd is the pty slave: made the controlling terminal */
        bool ctr;                /* a container's command: join its cgroups and mount namespace */
        int ctr_mntns;
        size_t n_cgroups;
        const int *cgroups;      /* the container's cgroup.procs, one per hierarchy */
        uid_t uid;
        gid_t gid;
        uint64_t drop_bounding;  /* capabilities to drop from the bounding set */
        uint32_t keep_lo, keep_hi; /* inheritable mask before the uid change */
        struct __user_cap_data_struct caps[2]; /* permitted/effective/inheritable at the end */
        uint64_t reset_signals;  /* bit sig-1: disposition to reset to SIG_DFL */
        int n_progs;
        struct sock_fprog progs[2]; /* seccomp programs, loaded in order */
        const char *cwd;
        bool cwd_given;
        const char *path;        /* the command's PATH */
        size_t argc;
        char **argv, **envp;
        char **sh_argv;          /* room for a script without #! (argc + 2) */
} spawn_block;

_noreturn_ static void child_fail(int report_fd, int stage, long r) {
        child_report rep = { .stage = stage, .err = r < 0 ? (int)-r : EIO };
        (void)R3(SYS_write, report_fd, &rep, sizeof(rep));
        for (;;)
                (void)R1(SYS_exit_group, 127);
}

/* Puts fd on target unless it is already there (dup3 onto itself fails,
 * and the fd would keep O_CLOEXEC). */
static long child_move_fd(int fd, int target) {
        if (fd == target)
                return R3(SYS_fcntl, fd, F_SETFD, 0);
        return R3(SYS_dup3, fd, target, 0);
}

/* execve, and for a file the kernel cannot run (ENOEXEC) /bin/sh with it,
 * as execvpe(3) does. Returns -errno. */
static long child_execve(spawn_block *b, const char *file) {
        long r = R3(SYS_execve, file, b->argv, b->envp);
        if (r != -ENOEXEC)
                return r;
        b->sh_argv[0] = (char *)"/bin/sh";
        b->sh_argv[1] = (char *)file;
        for (size_t i = 1; i < b->argc; i++)
                b->sh_argv[i + 1] = b->argv[i];
        b->sh_argv[b->argc < 1 ? 2 : b->argc + 1] = NULL;
        return R3(SYS_execve, "/bin/sh", b->sh_argv, b->envp);
}

/* execvpe(3)'s search (glibc posix/execvpe.c): a name with a slash as it
 * is, else each element of PATH in turn (an empty one is the working
 * directory); EACCES, ENOENT, ESTALE, ENOTDIR, ENODEV and ETIMEDOUT go on
 * to the next, any other error ends the search; EACCES wins if seen. */
static long child_exec(spawn_block *b) {
        const char *file = b->argv[0];
        if (strchr(file, '/'))
                return child_execve(b, file);
        size_t flen = strlen(file);
        if (flen > NAME_MAX)
                return -ENAMETOOLONG;
        char buf[PATH_MAX + NAME_MAX + 2];
        bool eacces = false;
        long last = -ENOENT;
        for (const char *p = b->path;;) {
                const char *e = strchrnul(p, ':');
                size_t plen = (size_t)(e - p);
                if (plen < PATH_MAX) {
                        memcpy(buf, p, plen);
                        if (plen)
                                buf[plen++] = '/';
                        memcpy(buf + plen, file, flen + 1);
                        long r = child_execve(b, buf);
                        switch (-r) {
                        case EACCES:
                                eacces = true;
                                __attribute__((fallthrough));
                        case ENOENT:
                        case ESTALE:
                        case ENOTDIR:
                        case ENODEV:
                        case ETIMEDOUT:
                                last = r;
                                break;
                        default:
                                return r;
                        }
                }
                if (!*e)
                        break;
                p = e + 1;
        }
        return eacces ? -EACCES : last;
}

/* oom_score_adj to 0: init is exempt from the OOM killer (main.c), its
 * commands must not inherit that, or a memory hog would make the whole
 * session's cgroup unkillable. Raising the score needs no privilege.
 * Returns 0 or -errno. */
static long child_oom_score_zero(void) {
        int fd = (int)R4(SYS_openat, AT_FDCWD, "/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC, 0);
        if (fd < 0)
                return fd;
        long r = R3(SYS_write, fd, "0", 1);
        (void)R1(SYS_close, fd);
        return r == 1 ? 0 : r < 0 ? r : -EIO;
}

static int child_main(void *arg);

/* In the child: stdio, session, identity, cwd, signals, then exec. Every
 * step runs before exec so the new program inherits nothing of init but
 * what is set up here: fds 0-2 only, its own session, no supplementary
 * groups, no_new_privs, default signal dispositions and an empty mask, the
 * capabilities of its uid (libcore/caps.h) and the seccomp filter
 * (libcore/seccomp.h). Failures go to the report pipe as (stage, errno). */
static int child_main(void *arg) {
        spawn_block *b = arg;
        int rep = b->report_fd;
        long r;
        /* A container's command: into its cgroups first (what it uses from
         * here on is the container's), then its mount namespace, which
         * also makes its root the root and cwd (setns(2)). Before anything
         * else: the seccomp filter refuses setns from then on (outer mode),
         * and the identity switch drops the capabilities setns needs. */
        if (b->ctr) {
                for (size_t i = 0; i < b->n_cgroups; i++)
                        if ((r = R3(SYS_write, b->cgroups[i], "0", 1)) != 1)
                                child_fail(rep, STAGE_CONTAINER, r);
                if ((r = R2(SYS_setns, b->ctr_mntns, CLONE_NEWNS)) < 0)
                        child_fail(rep, STAGE_CONTAINER, r);
        }
        if ((r = R0(SYS_setsid)) < 0)
                child_fail(rep, STAGE_TTY, r);
        /* Session leader without a controlling terminal: the pty slave
         * becomes its controlling terminal, so job control and SIGHUP and
         * SIGWINCH work as in a login shell. */
        if (b->tty && (r = R3(SYS_ioctl, b->out_fd, TIOCSCTTY, 0)) < 0)
                child_fail(rep, STAGE_TTY, r);
        /* Every source fd is >= 3 (0-2 are init's /dev/null), so no move
         * clobbers a later one's source. */
        if ((r = child_move_fd(b->in_fd, 0)) < 0 || (r = child_move_fd(b->out_fd, 1)) < 0 ||
            (r = child_move_fd(b->err_fd, 2)) < 0)
                child_fail(rep, STAGE_STDIO, r);
        /* The report pipe on 3 (close-on-exec: EOF for init at the exec),
         * then no other fd of init (agent socket, other commands' pipes
         * and ptys) may reach the command. The fd table is the child's own
         * copy (no CLONE_FILES), so this closes nothing of init's. */
        if (rep != 3) {
                if ((r = R3(SYS_dup3, rep, 3, O_CLOEXEC)) < 0)
                        child_fail(rep, STAGE_STDIO, r);
                rep = 3;
        }
        (void)R3(SYS_close_range, 4, ~0U, 0);

        /* init is exempt from the OOM killer (main.c); its commands must not
         * inherit that. A child in init's memory has 0 already, from init
         * itself (it shares init's memory only when init's is 0): written
         * here, the score would reach init too. */
        int fd;
        if (!b->shares_vm && (r = child_oom_score_zero()) < 0)
                child_fail(rep, STAGE_CONFINE, r);

        /* Capabilities, step 1, while still root with init's full set:
         * CAP_SETPCAP is needed to shrink the bounding set, and a uid change
         * would drop it. Not dumpable first (init is not either: the flag
         * belongs to the address space, which this child shares with init
         * until its exec): once its capabilities are down to a root
         * command's, a `sudo` command (same uid) could otherwise ptrace it
         * and skip the rest of this sequence, or read and write init's
         * memory; after the uid change the kernel sets the flag to
         * fs.suid_dumpable, which spawn_child checked is not 1. Exec gives
         * the new program an address space of its own, dumpable again. */
        if ((r = R5(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0)) < 0)
                child_fail(rep, STAGE_CONFINE, r);
        /* PR_CAPBSET_DROP commits new credentials each time: only what
         * init's bounding set still has (init trims its own). */
        for (unsigned c = 0; c < 64; c++)
                if ((b->drop_bounding & (1ull << c)) && (r = R5(SYS_prctl, PR_CAPBSET_DROP, c, 0, 0, 0)) < 0)
                        child_fail(rep, STAGE_CONFINE, r);
        /* One call clears the ambient set; EINVAL: no ambient support. */
        r = R5(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        if (r < 0 && r != -EINVAL)
                child_fail(rep, STAGE_CONFINE, r);
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct data[2];
        if ((r = R2(SYS_capget, &hdr, data)) < 0)
                child_fail(rep, STAGE_CONFINE, r);
        data[0].inheritable &= b->keep_lo;
        data[1].inheritable &= b->keep_hi;
        if ((r = R2(SYS_capset, &hdr, data)) < 0)
                child_fail(rep, STAGE_CONFINE, r);

        /* Identity: groups first (needs CAP_SETGID), then gid, uid last.
         * Raw: libc's wrappers would signal init's other threads. */
        if ((r = R2(SYS_setgroups, 0, NULL)) < 0 || (r = R3(SYS_setresgid, b->gid, b->gid, b->gid)) < 0 ||
            (r = R3(SYS_setresuid, b->uid, b->uid, b->uid)) < 0)
                child_fail(rep, STAGE_USER, r);
        /* Again: the uid change set it to fs.suid_dumpable (2 at most
         * here, which also refuses the sandbox user). */
        if ((r = R5(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0)) < 0)
                child_fail(rep, STAGE_USER, r);
        /* no_new_privs for every command: setuid binaries inside the sandbox
         * cannot raise privileges, and seccomp can be loaded unprivileged. */
        if ((r = R5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) < 0)
                child_fail(rep, STAGE_USER, r);
        /* chdir after the uid change, so the user's own permissions apply.
         * Never through a /proc magic link (/proc/self/fd/N, /proc/1/cwd,
         * /dev/fd/N): those name whatever an fd or a process points at,
         * which is how runc's CVE-2024-21626 reached the host. */
        struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_NO_MAGICLINKS };
        fd = (int)R4(SYS_openat2, AT_FDCWD, b->cwd, &how, sizeof(how));
        r = fd;
        if (fd >= 0) {
                r = R1(SYS_fchdir, fd);
                (void)R1(SYS_close, fd);
        }
        if (r < 0 && (b->cwd_given || (r = R1(SYS_chdir, "/")) < 0))
                child_fail(rep, STAGE_CWD, r);
        (void)R1(SYS_umask, 022);

        /* Every signal is blocked since the clone (spawn_child), so none
         * of init's handlers can run here; each disposition init does not
         * have at SIG_DFL is reset (handlers, and SIG_IGN, which would
         * stay across exec), then the mask is emptied. The sighand table
         * is the child's own (no CLONE_SIGHAND). */
        struct spawn_ksigaction dfl = { .handler = SIG_DFL };
        for (int sig = 1; sig <= 64; sig++)
                if ((b->reset_signals & (1ull << (sig - 1))) &&
                    (r = R4(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(uint64_t))) < 0)
                        child_fail(rep, STAGE_CONFINE, r);
        uint64_t none = 0;
        if ((r = R4(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof(none))) < 0)
                child_fail(rep, STAGE_CONFINE, r);

        /* Capabilities, step 2: permitted, effective and inheritable to
         * exactly the kept set (nothing for the sandbox user). Then seccomp,
         * last, right before exec, so the filter need not allow anything
         * this sequence still does: compiled once per init (or handed over
         * by sandboxd), copied into the block; none left to load once init
         * runs under it itself (cmd_confine_self), which the clone
         * inherits. */
        if ((r = R2(SYS_capset, &hdr, b->caps)) < 0)
                child_fail(rep, STAGE_CONFINE, r);
        for (int i = 0; i < b->n_progs; i++)
                if ((r = R5(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &b->progs[i], 0, 0)) < 0)
                        child_fail(rep, STAGE_CONFINE, r);

        child_fail(rep, STAGE_EXEC, child_exec(b));
}

/* ---- the parent side ---- */

void cmd_confine_self(void) {
        static bool tried;
        const core_seccomp *f = NULL;
        if (tried || core_seccomp_default(&f, NULL) < 0)
                return;
        tried = true;
        int r = core_seccomp_install_self(f);
        if (r < 0)
                log_debug("seccomp on init itself: %s; each command's child installs the filter", strerror(-r));
}

/* Base env from setup, then the run's own "K=V" entries replace or add. */
static int build_env(init_agent *a, const cJSON *env, run_spec *s) {
        size_t n_base = 0, n_extra = cJSON_GetArraySize(env);
        while (a->base_env && a->base_env[n_base])
                n_base++;
        char **e = calloc(n_base + n_extra + 2, sizeof(char *));
        if (!e)
                return -ENOMEM;
        size_t n = 0;
        for (size_t i = 0; i < n_base; i++)
                e[n++] = a->base_env[i];
        const cJSON *it;
        cJSON_ArrayForEach(it, env) {
                const char *kv = cJSON_GetStringValue(it);
                const char *eq = kv ? strchr(kv, '=') : NULL;
                if (!eq || eq == kv) {
                        free(e);
                        return -EINVAL;
                }
                size_t klen = (size_t)(eq - kv) + 1, j;
                for (j = 0; j < n; j++)
                        if (strncmp(e[j], kv, klen) == 0)
                                break;
                e[j == n ? n++ : j] = (char *)kv;
        }
        s->path = NULL;
        for (size_t j = 0; j < n; j++)
                if (strncmp(e[j], "PATH=", 5) == 0)
                        s->path = e[j] + 5;
        if (!s->path) {
                e[n++] = (char *)"PATH=" INIT_DEFAULT_PATH;
                s->path = INIT_DEFAULT_PATH;
        }
        s->envp = e;
        return 0;
}

static int num_field(const cJSON *req, const char *name, double lo, double hi, double def, double *ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(req, name);
        if (!v || cJSON_IsNull(v)) {
                *ret = def;
                return 0;
        }
        if (!cJSON_IsNumber(v) || v->valuedouble < lo || v->valuedouble > hi ||
            v->valuedouble != (double)(int64_t)v->valuedouble)
                return -EINVAL;
        *ret = v->valuedouble;
        return 0;
}

/* Parses a run request; on failure returns a message naming the field. */
static const char *parse_run(init_agent *a, const cJSON *req, run_spec *s) {
        double id, uid, gid, rows, cols;
        if (num_field(req, "id", 0, 9007199254740991.0, -1, &id) < 0 || id < 0)
                return "run: \"id\" must be a non-negative integer";
        s->id = (int64_t)id;
        if (cmd_find(a, s->id))
                return "run: a command with this id is running";
        const cJSON *argv = cJSON_GetObjectItemCaseSensitive(req, "argv");
        int argc = cJSON_GetArraySize(argv);
        if (!cJSON_IsArray(argv) || argc < 1)
                return "run: \"argv\" must be a non-empty array of strings";
        s->argv = calloc((size_t)argc + 1, sizeof(char *));
        if (!s->argv)
                return "run: out of memory";
        for (int i = 0; i < argc; i++)
                if (!(s->argv[i] = cJSON_GetStringValue(cJSON_GetArrayItem(argv, i))))
                        return "run: \"argv\" must be a non-empty array of strings";
        if (!*s->argv[0])
                return "run: \"argv[0]\" is empty";
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(req, "env");
        if ((env && !cJSON_IsNull(env) && !cJSON_IsArray(env)) || build_env(a, env, s) < 0)
                return "run: \"env\" must be an array of \"K=V\" strings";
        const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(req, "cwd");
        s->cwd_given = cJSON_IsString(cwd) && *cwd->valuestring;
        s->cwd = s->cwd_given ? cwd->valuestring : INIT_WORKSPACE;
        s->meta = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "meta"));
        double log_bytes;
        if (num_field(req, "logBytes", 0, INIT_LOG_MAX, 0, &log_bytes) < 0)
                return "run: \"logBytes\" must be an integer from 0 to 1073741824";
        s->log_bytes = (size_t)log_bytes;
        double window;
        if (num_field(req, "window", 0, INIT_WINDOW_MAX, 0, &window) < 0)
                return "run: \"window\" must be an integer from 0 to 67108864";
        s->window = (uint64_t)window;
        if (num_field(req, "uid", 0, 4294967294.0, init_user_uid, &uid) < 0 ||
            num_field(req, "gid", 0, 4294967294.0, init_user_gid, &gid) < 0)
                return "run: \"uid\" and \"gid\" must be integers";
        if (num_field(req, "rows", 1, 65535, 24, &rows) < 0 || num_field(req, "cols", 1, 65535, 80, &cols) < 0)
                return "run: \"rows\" and \"cols\" must be integers from 1 to 65535";
        s->uid = (uid_t)uid;
        s->gid = (gid_t)gid;
        s->rows = (unsigned short)rows;
        s->cols = (unsigned short)cols;
        s->tty = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "tty"));
        s->want_stdin = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "stdin"));
        const cJSON *ctr = cJSON_GetObjectItemCaseSensitive(req, "container");
        if (ctr && !cJSON_IsNull(ctr)) {
                if (!cJSON_IsString(ctr))
                        return "run: \"container\" must be a string";
                /* Gone (a delete that crossed this run): the command's
                 * exit says so, as for one that cannot start. */
                s->ctr = init_ctr_find(ctr->valuestring);
                s->ctr_missing = !s->ctr;
        }
        return NULL;
}

static void close_pair(int p[2]) {
        for (int i = 0; i < 2; i++)
                if (p[i] >= 0)
                        close(p[i]);
        p[0] = p[1] = -EBADF;
}

/* Opens the pty pair in init: the master through /dev/ptmx (inside the
 * sandbox a newinstance devpts), the slave through TIOCGPTPEER so that no
 * path under /dev/pts is looked up while root. */
static int open_pty(const run_spec *s, int *ret_master, int *ret_slave) {
        _cleanup_close_ int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (master < 0)
                return negative_errno();
        if (unlockpt(master) < 0)
                return negative_errno();
        struct winsize ws = { .ws_row = s->rows, .ws_col = s->cols };
        if (ioctl(master, TIOCSWINSZ, &ws) < 0)
                return negative_errno();
        int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (slave < 0)
                return negative_errno();
        *ret_master = TAKE_FD(master);
        *ret_slave = slave;
        return 0;
}

static const char *stage_name(int stage) {
        switch (stage) {
        case STAGE_STDIO: return "set up stdio";
        case STAGE_TTY: return "set up terminal";
        case STAGE_USER: return "switch user";
        case STAGE_CONFINE: return "apply capabilities and seccomp";
        case STAGE_CONTAINER: return "join its container";
        default: return "start";
        }
}

/* Text for the exit event of a command that never ran. Exit code 127 when
 * the program or the directory is missing (as shells do), 126 otherwise. */
static int describe_failure(const char *argv0, const char *cwd, int stage, int err, char *buf, size_t size) {
        char e[128];
        snprintf(e, sizeof(e), "%s", strerror(err));
        e[0] = (char)(e[0] >= 'A' && e[0] <= 'Z' ? e[0] - 'A' + 'a' : e[0]);
        if (stage == STAGE_EXEC)
                snprintf(buf, size, "%s: %s", argv0 ? argv0 : "?", e);
        else if (stage == STAGE_CWD)
                snprintf(buf, size, "chdir %s: %s", cwd ? cwd : "?", e);
        else
                snprintf(buf, size, "%s: %s", stage_name(stage), e);
        return err == ENOENT ? 127 : 126;
}

static int set_nonblock(int fd) {
        int fl = fcntl(fd, F_GETFL);
        return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? negative_errno() : 0;
}

static init_cmd *cmd_new(init_agent *a, const run_spec *s, pid_t pid) {
        init_cmd *c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->id = s->id;
        c->pid = pid;
        c->tty = s->tty;
        if (s->meta && strlen(s->meta) <= INIT_META_MAX && !(c->meta = strdup(s->meta))) {
                free(c);
                return NULL;
        }
        c->log_out.cap = c->log_err.cap = s->log_bytes;
        c->window = s->window;
        c->out_fd = c->err_fd = c->in_fd = c->report_fd = -EBADF;
        if (!(c->argv0 = strdup(s->argv[0])) || !(c->cwd = strdup(s->cwd))) {
                free(c->argv0);
                free(c->meta);
                free(c);
                return NULL;
        }
        c->w_rep = (init_watch){ WATCH_REPORT, c };
        c->w_out = (init_watch){ WATCH_STDOUT, c };
        c->w_err = (init_watch){ WATCH_STDERR, c };
        c->w_in = (init_watch){ WATCH_STDIN, c };
        c->next = a->cmds;
        a->cmds = c;
        return c;
}

static void send_started(init_agent *a, init_cmd *c) {
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "started");
        cJSON_AddNumberToObject(ev, "id", (double)c->id);
        cJSON_AddNumberToObject(ev, "pid", c->pid);
        /* Says that this init keeps the window: the daemon credits only
         * then (an older init would answer "credit" as an unknown op). */
        if (c->window)
                cJSON_AddNumberToObject(ev, "window", (double)c->window);
        cJSON_AddBoolToObject(ev, "writeAcks", true); /* agent.h "write" */
        (void)agent_send(a, ev);
}

/* Whether c's output streams are read now: not while the socket's queue is
 * over its mark (a->output_paused), nor while c has its window's worth of
 * output sent and not credited. */
static bool output_wanted(const init_agent *a, const init_cmd *c) {
        return !a->output_paused && !(c->window && c->unacked >= c->window);
}

/* Registers or removes c's output streams as output_wanted says. */
static void update_output_watch(init_agent *a, init_cmd *c) {
        uint32_t ev = output_wanted(a, c) ? EPOLLIN : 0;
        if (c->out_fd >= 0)
                (void)watch_set(a, c->out_fd, &c->w_out, &c->out_watched, ev);
        if (c->err_fd >= 0)
                (void)watch_set(a, c->err_fd, &c->w_err, &c->err_watched, ev);
}

/* Reads c's exec report if it is there: EOF means the child exec'd (or
 * died before it, e.g. killed: its exit says so), and "started" goes out;
 * a report means a step before exec failed, and the exit event, once the
 * child is reaped, says which (maybe_finish). Nothing there yet: the child
 * is still on its way (or stopped by a signal), and init goes on with its
 * loop. Called before any output of c is sent, and at its reap, when the
 * pipe holds everything the child wrote. */
static void spawn_report(init_agent *a, init_cmd *c) {
        if (c->report_fd < 0)
                return;
        child_report rep;
        ssize_t n;
        do
                n = read(c->report_fd, &rep, sizeof(rep));
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
                return;
        watch_clear(a, c->report_fd, &c->report_watched);
        close(c->report_fd);
        c->report_fd = -EBADF;
        /* End of file: the child exec'd (the kernel closes close-on-exec
         * files after the switch to the new address space) or died (its
         * files close after it left its address space); either way it no
         * longer runs in the spawn mapping. After a report it may still
         * be on its way out: the mapping waits for the reap. */
        if (n == 0)
                spawn_release(c);
        if (n == (ssize_t)sizeof(rep) && rep.stage >= 0) {
                c->spawn_failed = true;
                c->spawn_stage = rep.stage;
                c->spawn_err = rep.err;
                return;
        }
        send_started(a, c);
}

/* Parent right after the spawn, which returns at once: sets up the listed
 * command c (its pid and spawn mapping set), whose "started" (or
 * failed-start exit) follows from its report pipe (spawn_report). */
static void after_spawn(init_agent *a, init_cmd *c, const run_spec *s, int report_fd, int master, int in_pipe[2],
                        int out_pipe[2], int err_pipe[2]) {
        c->report_fd = report_fd;
        (void)set_nonblock(c->report_fd);
        if (s->tty) {
                c->out_fd = master;
                c->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
        } else {
                c->out_fd = TAKE_FD(out_pipe[0]);
                c->err_fd = TAKE_FD(err_pipe[0]);
                c->in_fd = s->want_stdin ? TAKE_FD(in_pipe[1]) : -EBADF;
        }
        close_pair(in_pipe);
        close_pair(out_pipe);
        close_pair(err_pipe);
        (void)set_nonblock(c->out_fd);
        if (c->err_fd >= 0)
                (void)set_nonblock(c->err_fd);
        if (c->in_fd >= 0)
                (void)set_nonblock(c->in_fd);
        if (watch_set(a, c->report_fd, &c->w_rep, &c->report_watched, EPOLLIN) < 0)
                log_debug("command %lld: no watch of its exec report; read at its first output or exit",
                          (long long)c->id);
        update_output_watch(a, c);
        /* A child that was quick has exec'd already: "started" without
         * waiting for the next turn of the loop. */
        spawn_report(a, c);
}

/* The child's mapping: a guard page, its stack, then its spawn_block and
 * the block's data. Mappings of the usual size are kept for the next
 * commands (a few), so a spawn usually maps nothing and its stack pages
 * are in place already. */
#define SPAWN_MAP_USUAL (128 * 1024)
#define SPAWN_KEEP 4
static spawn_block *spawn_free;
static unsigned spawn_free_n;

static size_t page_size(void) {
        static size_t page;
        if (!page)
                page = (size_t)sysconf(_SC_PAGESIZE);
        return page;
}

/* Returns a block with room for `data` more bytes after it, or NULL with
 * errno set. The child's stack ends where the block starts. */
static spawn_block *spawn_block_get(size_t data) {
        size_t page = page_size();
        size_t need = page + SPAWN_STACK + sizeof(spawn_block) + data;
        need = (need + page - 1) / page * page;
        size_t len = need <= SPAWN_MAP_USUAL ? SPAWN_MAP_USUAL : need;
        if (len == SPAWN_MAP_USUAL && spawn_free) {
                spawn_block *b = spawn_free;
                spawn_free = b->next_free;
                spawn_free_n--;
                return b;
        }
        char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
        if (base == MAP_FAILED)
                return NULL;
        if (mprotect(base, page, PROT_NONE) < 0) {
                int saved = errno;
                (void)munmap(base, len);
                errno = saved;
                return NULL;
        }
        spawn_block *b = (spawn_block *)(base + page + SPAWN_STACK);
        b->map_len = len;
        return b;
}

/* Gives the mapping back (kept for the next command or unmapped). Only
 * once its child has left it: exec'd, died, or never cloned. */
static void spawn_block_put(spawn_block *b) {
        if (!b)
                return;
        char *base = (char *)b - SPAWN_STACK - page_size();
        if (b->map_len == SPAWN_MAP_USUAL && spawn_free_n < SPAWN_KEEP) {
                b->next_free = spawn_free;
                spawn_free = b;
                spawn_free_n++;
                return;
        }
        (void)munmap(base, b->map_len);
}

/* Releases c's spawn mapping once its child can no longer run in it. */
static void spawn_release(init_cmd *c) {
        spawn_block_put(c->spawn_mem);
        c->spawn_mem = NULL;
}

/* Bump allocation inside the block's data (sized beforehand). */
static void *blk_take(char **cur, size_t n) {
        *cur = (char *)(((uintptr_t)*cur + 15) & ~(uintptr_t)15);
        void *p = *cur;
        *cur += n;
        return p;
}

static char *blk_str(char **cur, const char *s) {
        size_t n = strlen(s) + 1;
        char *p = blk_take(cur, n);
        memcpy(p, s, n);
        return p;
}

/* init's bounding set, which each child starts from: a superset until
 * trimmed (a bounding set only ever shrinks), then read once. */
static uint64_t own_bounding = ~0ull;

/* What every command's child needs from init and init can have once,
 * after setup (cmd_spawn_state): a /dev/null of the sandbox's own, opened
 * read-only here instead of by each child (a path lookup per command), the
 * signals whose disposition is not SIG_DFL, so that the child resets those
 * instead of calling sigaction for all 64 (init sets its dispositions in
 * setup, main.c setup_signals, and never after; whatever sandboxd's exec
 * left ignored is seen here too), and fs.suid_dumpable, read at each
 * spawn (spawn_shares_vm). */
static int devnull_fd = -EBADF;
static int suid_dumpable_fd = -EBADF;
static int own_oom_fd = -EBADF;
static uint64_t nondefault;
static bool spawn_state_ready;

/* Whether this spawn may share init's memory (CLONE_VM). Not when
 * fs.suid_dumpable is 1 (or cannot be read): the kernel then makes the
 * address space dumpable at the child's uid change, and until the child
 * clears the flag again the sandbox user could ptrace it, init's memory
 * with it (proc(5) /proc/sys/fs/suid_dumpable; kernel/cred.c
 * commit_creds). The child then gets a copy, as a fork would; also with
 * SANDBOX_INIT_SPAWN=copy in init's environment (sandboxd never sets it;
 * tests/unit/test-init-agent.c runs its command tests both ways). */
static bool spawn_copy_forced;

static bool spawn_shares_vm(void) {
        if (!SPAWN_VM_CAPABLE || spawn_copy_forced || suid_dumpable_fd < 0)
                return false;
        char v[4];
        ssize_t n = pread(suid_dumpable_fd, v, sizeof(v), 0);
        return n >= 1 && (v[0] == '0' || v[0] == '2') && (n == 1 || v[1] == '\n');
}

/* Whether init's own oom_score_adj is 0, so that a child in its memory
 * has the score its command must have from the clone and writes none
 * (spawn_child). init sets -1000 where it may (main.c), which needs
 * CAP_SYS_RESOURCE of the initial user namespace: inside a user
 * namespace it stays 0. Read at each spawn through a kept fd, as the
 * host may change it; unreadable counts as not 0. */
static bool own_oom_score_zero(void) {
        if (own_oom_fd < 0)
                return false;
        char v[8];
        ssize_t n = pread(own_oom_fd, v, sizeof(v), 0);
        return n >= 1 && v[0] == '0' && (n == 1 || v[1] == '\n');
}

/* Builds the child's block for s: copies of argv, envp, PATH and cwd, the
 * fds to put on 0-2, the identity, capabilities, signals to reset and the
 * seccomp programs. Returns it, or NULL with *ret_err set. */
static spawn_block *spawn_block_new(const run_spec *s, const core_seccomp *filter, int in_fd, int out_fd,
                                    int err_fd, int report_fd, int *ret_err) {
        struct sock_fprog progs[2];
        int n_progs = core_seccomp_programs(filter, progs);
        if (n_progs < 0) {
                *ret_err = n_progs;
                return NULL;
        }
        const int *cg = NULL;
        size_t n_cg = s->ctr ? init_ctr_cgroups(s->ctr, &cg) : 0;
        size_t argc = 0, n_env = 0, data = 16 * 8;
        for (; s->argv[argc]; argc++)
                data += strlen(s->argv[argc]) + 1 + 16;
        for (; s->envp[n_env]; n_env++)
                data += strlen(s->envp[n_env]) + 1 + 16;
        data += strlen(s->cwd) + strlen(s->path) + 2 + 32;
        data += (argc + 1 + argc + 2 + n_env + 1) * sizeof(char *) + n_cg * sizeof(int);
        for (int i = 0; i < n_progs; i++)
                data += progs[i].len * sizeof(struct sock_filter) + 16;
        spawn_block *b = spawn_block_get(data);
        if (!b) {
                *ret_err = negative_errno();
                return NULL;
        }
        size_t map_len = b->map_len;
        *b = (spawn_block){ .map_len = map_len, .report_fd = report_fd, .in_fd = in_fd, .out_fd = out_fd,
                            .err_fd = err_fd, .tty = s->tty, .ctr = s->ctr != NULL, .ctr_mntns = -1, .pidns = -1,
                            .uid = s->uid, .gid = s->gid, .cwd_given = s->cwd_given, .argc = argc,
                            .reset_signals = nondefault, .n_progs = n_progs };
        char *cur = (char *)(b + 1);
        if (s->ctr) {
                b->ctr_mntns = init_ctr_mntns(s->ctr);
                b->pidns = init_ctr_pidns(s->ctr);
                int *fds = blk_take(&cur, n_cg * sizeof(int));
                memcpy(fds, cg, n_cg * sizeof(int));
                b->cgroups = fds;
                b->n_cgroups = n_cg;
        }
        uint64_t known = core_caps_known_mask();
        uint64_t keep = core_caps_for_uid(s->uid) & known;
        b->drop_bounding = own_bounding & known & ~keep;
        b->keep_lo = (uint32_t)keep;
        b->keep_hi = (uint32_t)(keep >> 32);
        b->caps[0] = (struct __user_cap_data_struct){ .effective = (uint32_t)keep, .permitted = (uint32_t)keep,
                                                      .inheritable = (uint32_t)keep };
        b->caps[1] = (struct __user_cap_data_struct){ .effective = (uint32_t)(keep >> 32),
                                                      .permitted = (uint32_t)(keep >> 32),
                                                      .inheritable = (uint32_t)(keep >> 32) };
        for (int i = 0; i < n_progs; i++) {
                size_t sz = progs[i].len * sizeof(struct sock_filter);
                struct sock_filter *q = blk_take(&cur, sz);
                memcpy(q, progs[i].filter, sz);
                b->progs[i] = (struct sock_fprog){ .len = progs[i].len, .filter = q };
        }
        b->argv = blk_take(&cur, (argc + 1) * sizeof(char *));
        for (size_t i = 0; i < argc; i++)
                b->argv[i] = blk_str(&cur, s->argv[i]);
        b->argv[argc] = NULL;
        b->sh_argv = blk_take(&cur, (argc + 2) * sizeof(char *));
        b->envp = blk_take(&cur, (n_env + 1) * sizeof(char *));
        for (size_t i = 0; i < n_env; i++)
                b->envp[i] = blk_str(&cur, s->envp[i]);
        b->envp[n_env] = NULL;
        b->cwd = blk_str(&cur, s->cwd);
        b->path = blk_str(&cur, s->path);
        return b;
}

/* Starts child_main(b) as a new process and returns at once with its pid,
 * or -1 with errno set. In init's memory (spawn_shares_vm) when init's own
 * OOM score is 0 (always inside a user namespace): cloned with CLONE_VM
 * (no CLONE_VFORK, no CLONE_SIGHAND, no CLONE_FILES) on the block's stack,
 * it inherits the score of 0 and writes none (a write to oom_score_adj
 * reaches every process sharing the writer's memory, init included: fs/
 * proc/base.c __set_oom_adj). init never waits for that child: between
 * its uid change and its exec it is the sandbox user's to signal (a
 * SIGSTOP there held a vfork parent forever); whether it got to exec
 * comes back through the report pipe, read from init's event loop, whose
 * end of file also frees the block (spawn_report). The pid is known
 * before init reads its next request, so a kill always finds the child.
 * Otherwise (init exempt from the OOM killer, or a container's command,
 * fork semantics) the child gets a copy of init's memory and sets its own
 * score: no vfork helper,
 * which the sandbox's root could stop and so hold init. A container with
 * a PID namespace of its own: the child starts in it. init itself is not
 * dumpable (once): the flag belongs to the address space the child
 * shares. */
static pid_t spawn_child(spawn_block *b, const init_container *ctr) {
        static bool undumpable;
        if (!undumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
                undumpable = true;
        if (!undumpable) {
                errno = EPERM;
                return -1;
        }
        /* Never a container's command: its child joins the container's
         * cgroups, where an OOM kill that picks it kills every process of
         * its address space (mm/oom_kill.c __oom_kill_process), init
         * included. */
        b->shares_vm = spawn_shares_vm() && own_oom_score_zero() && !b->ctr;
        /* Every signal blocked across the clones: the child resets every
         * disposition before it unblocks them, so no handler of init runs
         * in it, on init's memory or not. */
        sigset_t all, old;
        sigfillset(&all);
        if (sigprocmask(SIG_SETMASK, &all, &old) < 0)
                return -1;
        pid_t pid;
        int saved;
        /* A container with a PID namespace of its own: the child starts in
         * it (init_ctr_pidns_enter); clone returns its pid in init's own,
         * which stays init's active one. */
        int entered = init_ctr_pidns_enter(ctr);
        if (entered < 0) {
                (void)sigprocmask(SIG_SETMASK, &old, NULL);
                errno = -entered;
                return -1;
        }
        pid = clone(child_main, (char *)b, (b->shares_vm ? CLONE_VM : 0) | SIGCHLD, b);
        saved = errno;
        if (entered)
                init_ctr_pidns_leave();
        (void)sigprocmask(SIG_SETMASK, &old, NULL);
        errno = saved;
        return pid;
}

/* Once per init: the bounding set of init itself shrinks to what a root
 * command may keep. init never execs again, so this takes nothing from it
 * (its own permitted and effective sets stay), and each command's child
 * then has fewer capabilities to drop (PR_CAPBSET_DROP is the costly step
 * of its setup). The child still drops everything its uid must not keep,
 * whatever this achieved. */
static void trim_own_bounding_set(void) {
        static bool done;
        if (done)
                return;
        done = true;
        int r = core_caps_bound(core_caps_root_set());
        if (r < 0)
                log_debug_errno(r, "trimming init's own bounding set: %m");
        own_bounding = core_caps_bounding();
}

static int cmd_spawn_state(void) {
        if (spawn_state_ready)
                return 0;
        nondefault = 0;
        for (int sig = 1; sig < _NSIG && sig <= 64; sig++) {
                struct sigaction old;
                if (sig == SIGKILL || sig == SIGSTOP)
                        continue;
                /* A signal the kernel does not know (glibc's reserved
                 * real-time ones still are) is skipped; any other failure
                 * means resetting it, as the full reset did. */
                if (sigaction(sig, NULL, &old) < 0) {
                        if (errno != EINVAL)
                                nondefault |= 1ull << (sig - 1);
                        continue;
                }
                if (old.sa_handler != SIG_DFL)
                        nondefault |= 1ull << (sig - 1);
        }
        (void)core_caps_known_mask(); /* asked of the kernel once, here */
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negative_errno();
        devnull_fd = fd;
        const char *mode = getenv("SANDBOX_INIT_SPAWN");
        spawn_copy_forced = mode && streq(mode, "copy");
        own_oom_fd = open("/proc/self/oom_score_adj", O_RDONLY | O_CLOEXEC);
        suid_dumpable_fd = open("/proc/sys/fs/suid_dumpable", O_RDONLY | O_CLOEXEC);
        if (suid_dumpable_fd < 0)
                log_debug("fs.suid_dumpable unreadable (%m): commands start with a copy of init's memory");
        spawn_state_ready = true;
        return 0;
}

void cmd_prepare(void) {
        trim_own_bounding_set();
        spawn_block_put(spawn_block_get(0));
        int r = cmd_spawn_state();
        if (r < 0)
                log_debug("no /dev/null for command children yet: %s", strerror(-r));
}

/* Handles {"op":"run",...}: never fails init; every failure becomes an
 * error event (bad request) or an exit event (the command did not start). */
void cmd_run(init_agent *a, const cJSON *req) {
        _cleanup_(run_spec_clear) run_spec s = {};
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(req, "id");
        const char *bad = parse_run(a, req, &s);
        if (bad)
                return agent_send_error(a, idj, "%s", bad);
        if (a->stopping)
                return send_exit(a, s.id, 126, "sandbox is stopping");
        if (s.ctr_missing)
                return send_exit(a, s.id, 127, "its container is gone");

        int in_pipe[2] = { -EBADF, -EBADF }, out_pipe[2] = { -EBADF, -EBADF },
            err_pipe[2] = { -EBADF, -EBADF };
        int master = -EBADF, slave = -EBADF, r = 0;
        if (s.tty)
                r = open_pty(&s, &master, &slave);
        else if (pipe2(out_pipe, O_CLOEXEC) < 0 || pipe2(err_pipe, O_CLOEXEC) < 0 ||
                 (s.want_stdin && pipe2(in_pipe, O_CLOEXEC) < 0))
                r = negative_errno();
        /* The seccomp filter is compiled once per init (or handed over by
         * sandboxd, agent.h), so that each child only installs it; no
         * filter, no command (fail closed). */
        int report[2] = { -EBADF, -EBADF };
        if (r >= 0 && pipe2(report, O_CLOEXEC) < 0)
                r = negative_errno();
        const core_seccomp *filter = NULL;
        if (r >= 0)
                r = core_seccomp_default(&filter, NULL);
        if (r >= 0)
                cmd_confine_self();
        if (r >= 0)
                r = cmd_spawn_state();
        /* The command is listed before its clone, so that nothing can fail
         * between the clone and the registration of its pid. */
        init_cmd *c = r >= 0 ? cmd_new(a, &s, 0) : NULL;
        if (r >= 0 && !c)
                r = -ENOMEM;
        spawn_block *b = NULL;
        if (r >= 0) {
                int in = s.tty ? slave : s.want_stdin ? in_pipe[0] : devnull_fd;
                b = spawn_block_new(&s, filter, in, s.tty ? slave : out_pipe[1], s.tty ? slave : err_pipe[1],
                                    report[1], &r);
        }
        pid_t pid = r >= 0 ? spawn_child(b, s.ctr) : -1;
        if (r >= 0 && pid < 0)
                r = negative_errno();
        if (slave >= 0)
                close(slave);
        if (report[1] >= 0)
                close(report[1]);
        if (r < 0) {
                spawn_block_put(b); /* no child ever ran in it */
                if (c)
                        cmd_forget(a, c);
                if (report[0] >= 0)
                        close(report[0]);
                close_pair(in_pipe);
                close_pair(out_pipe);
                close_pair(err_pipe);
                if (master >= 0)
                        close(master);
                char msg[256];
                snprintf(msg, sizeof(msg), "%s: %s", s.tty ? "open pty" : "start", strerror(-r));
                return send_exit(a, s.id, 126, msg);
        }
        c->pid = pid;
        c->spawn_mem = b;
        after_spawn(a, c, &s, report[0], master, in_pipe, out_pipe, err_pipe);
        /* Unless done ahead (cmd_prepare), after the first command is on
         * its way (its own child dropped everything itself), not before. */
        trim_own_bounding_set();
}
/* ---- output, stdin, exit ---- */

static void close_stream(init_agent *a, init_cmd *c, enum init_watch_kind k) {
        int *fd = k == WATCH_STDOUT ? &c->out_fd : k == WATCH_STDERR ? &c->err_fd : &c->in_fd;
        bool *w = k == WATCH_STDOUT ? &c->out_watched : k == WATCH_STDERR ? &c->err_watched : &c->in_watched;
        watch_clear(a, *fd, w);
        if (*fd >= 0)
                close(*fd);
        *fd = -EBADF;
        if (k == WATCH_STDIN)
                queue_clear(&c->in_queue);
}

/* ---- the retained log (agent.h "log", "logcap") ---- */

/* Keeps the newest l->cap bytes, as sandboxd's ring does (sandboxd/command.c
 * ring_append), so the two hold the same bytes. Out of memory, the bytes
 * are dropped and the log reads as truncated. */
static void log_append(init_log *l, const char *data, size_t len) {
        l->total += len;
        if (!l->cap || !len)
                return;
        if (len >= l->cap) {
                l->truncated = l->truncated || l->len > 0 || len > l->cap;
                data += len - l->cap;
                len = l->cap;
                l->start = l->len = 0;
        }
        if (l->alloc < l->cap && l->len + len > l->alloc) {
                size_t want = l->alloc ? l->alloc : 4096;
                while (want < l->len + len)
                        want *= 2;
                if (want > l->cap)
                        want = l->cap;
                /* Linearised into the new buffer: a wrapped ring cannot
                 * simply be realloc'd. */
                char *nb = malloc(want);
                if (!nb) {
                        l->truncated = true;
                        return;
                }
                for (size_t i = 0; i < l->len; i++)
                        nb[i] = l->buf[(l->start + i) % l->alloc];
                free(l->buf);
                l->buf = nb;
                l->alloc = want;
                l->start = 0;
        }
        if (l->len + len > l->alloc) {
                size_t drop = l->len + len - l->alloc;
                l->start = (l->start + drop) % l->alloc;
                l->len -= drop;
                l->truncated = true;
        }
        size_t pos = (l->start + l->len) % l->alloc;
        size_t first = len < l->alloc - pos ? len : l->alloc - pos;
        memcpy(l->buf + pos, data, first);
        memcpy(l->buf, data + first, len - first);
        l->len += len;
}

/* Lowers the cap to `cap`, keeping the newest bytes. */
static void log_shrink(init_log *l, size_t cap) {
        if (cap >= l->cap)
                return;
        size_t keep = l->len < cap ? l->len : cap;
        char *nb = keep ? malloc(keep) : NULL;
        if (keep && !nb)
                keep = 0; /* out of memory: nothing kept, as if evicted */
        for (size_t i = 0; i < keep; i++)
                nb[i] = l->buf[(l->start + l->len - keep + i) % l->alloc];
        if (keep < l->len)
                l->truncated = true;
        free(l->buf);
        l->buf = nb;
        l->alloc = l->len = keep;
        l->start = 0;
        l->cap = cap;
}

void cmd_logcap(init_agent *a, const cJSON *req) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(req, "id");
        double bytes;
        if (!cJSON_IsNumber(idj) || num_field(req, "bytes", 0, INIT_LOG_MAX, 0, &bytes) < 0)
                return agent_send_error(a, idj, "logcap: \"id\" and \"bytes\" must be numbers");
        for (init_cmd *c = a->cmds; c; c = c->next) {
                if (c->id != (int64_t)idj->valuedouble)
                        continue;
                if (bytes == 0) {
                        bool had = c->log_out.len || c->log_err.len || c->log_out.truncated || c->log_err.truncated;
                        log_shrink(&c->log_out, 0);
                        log_shrink(&c->log_err, 0);
                        c->log_out.truncated = c->log_err.truncated = had;
                        c->log_evicted = true;
                } else {
                        log_shrink(&c->log_out, (size_t)bytes);
                        log_shrink(&c->log_err, (size_t)bytes);
                }
                return;
        }
}

static void send_log_event(init_agent *a, const init_cmd *c, const char *stream, const init_log *l,
                           const char *data, size_t len, bool first) {
        _cleanup_free_ char *b64 = core_base64_encode(data, len);
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!b64 || !ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "log");
        cJSON_AddNumberToObject(ev, "id", (double)c->id);
        cJSON_AddStringToObject(ev, "stream", stream);
        cJSON_AddStringToObject(ev, "data", b64);
        if (first) {
                cJSON_AddNumberToObject(ev, "cap", (double)l->cap);
                cJSON_AddBoolToObject(ev, "truncated", l->truncated);
                cJSON_AddNumberToObject(ev, "offset", (double)(l->total - l->len));
                if (c->log_evicted)
                        cJSON_AddBoolToObject(ev, "evicted", true);
        }
        (void)agent_send(a, ev);
}

static init_cmd *cmd_by_id(init_agent *a, int64_t id) {
        for (init_cmd *c = a->cmds; c; c = c->next)
                if (c->id == id)
                        return c;
        return NULL;
}

void cmd_replay_abort(init_agent *a) {
        a->replaying = false;
        free(a->replay_ids);
        a->replay_ids = NULL;
        a->replay_n = a->replay_i = a->replay_off = 0;
        a->replay_stream = 0;
}

void cmd_replay_logs(init_agent *a) {
        cmd_replay_abort(a);
        size_t n = 0;
        for (init_cmd *c = a->cmds; c; c = c->next)
                n++;
        a->replay_ids = n ? calloc(n, sizeof(*a->replay_ids)) : NULL;
        /* Out of memory: no logs (the daemon's read as empty), the rest
         * goes on. */
        if (a->replay_ids)
                for (init_cmd *c = a->cmds; c; c = c->next)
                        a->replay_ids[a->replay_n++] = c->id;
        a->replaying = true;
        agent_update_backpressure(a);
        cmd_replay_step(a);
}

/* The next piece, or false when the replay is through. A command
 * forgotten meanwhile (ack) is skipped; a log cut meanwhile (logcap) ends
 * where it now ends. */
static bool replay_piece(init_agent *a) {
        static char buf[INIT_OUTPUT_CHUNK];
        while (a->replay_i < a->replay_n) {
                init_cmd *c = cmd_by_id(a, a->replay_ids[a->replay_i]);
                const init_log *l = c ? (a->replay_stream ? &c->log_err : &c->log_out) : NULL;
                bool first = a->replay_off == 0;
                bool want = l && (a->replay_stream == 0 || !c->tty) &&
                            (first ? l->len || l->truncated || c->log_evicted : a->replay_off < l->len);
                if (!want) {
                        a->replay_off = 0;
                        if (++a->replay_stream > 1) {
                                a->replay_stream = 0;
                                a->replay_i++;
                        }
                        continue;
                }
                size_t n = l->len - a->replay_off < sizeof(buf) ? l->len - a->replay_off : sizeof(buf);
                for (size_t k = 0; k < n; k++)
                        buf[k] = l->buf[(l->start + a->replay_off + k) % l->alloc];
                send_log_event(a, c, a->replay_stream ? "stderr" : "stdout", l, buf, n, first);
                /* An empty first piece (only flags) moves on as well. */
                a->replay_off += n ? n : 1;
                if (a->replay_off >= l->len) {
                        a->replay_off = 0;
                        if (++a->replay_stream > 1) {
                                a->replay_stream = 0;
                                a->replay_i++;
                        }
                }
                return true;
        }
        return false;
}

void cmd_replay_step(init_agent *a) {
        /* agent_send flushes, and a flush calls back here. */
        if (a->replay_busy)
                return;
        a->replay_busy = true;
        while (a->replaying && !a->sock_dead && a->send_queue.bytes < INIT_SEND_LOW)
                if (!replay_piece(a)) {
                        cmd_replay_abort(a);
                        _cleanup_(cJSON_Deletep) cJSON *done = cJSON_CreateObject();
                        if (done && cJSON_AddStringToObject(done, "ev", "logs_done"))
                                (void)agent_send(a, done);
                        agent_update_backpressure(a);
                        cmd_resume(a);
                }
        a->replay_busy = false;
}

/* Reads one chunk and sends it. Returns bytes read, 0 at end of stream
 * (EOF, or EIO on a pty master whose slave side is all closed), -EAGAIN
 * when nothing is there now. */
static ssize_t read_chunk(init_agent *a, init_cmd *c, enum init_watch_kind k) {
        static char buf[INIT_OUTPUT_CHUNK];
        /* "started" before any output (output means the exec is done). */
        spawn_report(a, c);
        int fd = k == WATCH_STDOUT ? c->out_fd : c->err_fd;
        ssize_t n;
        do
                n = read(fd, buf, sizeof(buf));
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno == EAGAIN)
                return -EAGAIN;
        if (n <= 0)
                return 0;
        /* Kept whether or not it can be sent: a daemon that dies with this
         * packet unread gets it back from the log (cmd_replay_logs). */
        log_append(k == WATCH_STDERR ? &c->log_err : &c->log_out, buf, (size_t)n);
        _cleanup_free_ char *b64 = core_base64_encode(buf, (size_t)n);
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (b64 && ev) {
                cJSON_AddStringToObject(ev, "ev", "output");
                cJSON_AddNumberToObject(ev, "id", (double)c->id);
                cJSON_AddStringToObject(ev, "stream", k == WATCH_STDERR ? "stderr" : "stdout");
                cJSON_AddStringToObject(ev, "data", b64);
                (void)agent_send(a, ev);
        }
        /* Counted even when the packet could not be made: the credit of
         * the bytes sent is what reopens the window, and a command whose
         * window is full waits on its pipe as under a slow terminal. */
        c->unacked += (uint64_t)n;
        if (c->window && c->unacked >= c->window)
                update_output_watch(a, c);
        return n;
}

void cmd_credit(init_agent *a, const cJSON *req) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(req, "id");
        double bytes;
        if (!cJSON_IsNumber(idj) || num_field(req, "bytes", 0, 9007199254740991.0, 0, &bytes) < 0)
                return agent_send_error(a, NULL, "credit: \"id\" and \"bytes\" must be numbers");
        init_cmd *c = cmd_find(a, (int64_t)idj->valuedouble);
        if (!c || !c->window)
                return; /* finished meanwhile: nothing waits for it */
        bool was_full = c->unacked >= c->window;
        c->unacked = (uint64_t)bytes < c->unacked ? c->unacked - (uint64_t)bytes : 0;
        if (was_full && c->unacked < c->window)
                update_output_watch(a, c);
}

void cmd_windows_clear(init_agent *a) {
        for (init_cmd *c = a->cmds; c; c = c->next) {
                c->window = c->unacked = 0;
                update_output_watch(a, c);
        }
}

/* The exit event goes out once the process is reaped and its streams are
 * closed. The command stays listed until sandboxd acknowledges the exit
 * (cmd_ack): a daemon killed before it read the event hears it again from
 * cmd_resume after it reconnects. The list is newest first, so past
 * INIT_UNACKED_MAX the oldest finished ones go. */
static void maybe_finish(init_agent *a, init_cmd *c) {
        if (c->finished || !c->reaped)
                return;
        spawn_report(a, c); /* reaped: the pipe holds all the child wrote */
        if (c->out_fd >= 0 || c->err_fd >= 0)
                return;
        c->finished = true;
        close_stream(a, c, WATCH_STDIN);
        if (c->spawn_failed) {
                char msg[512];
                c->exit_code = describe_failure(c->argv0, c->cwd, c->spawn_stage, c->spawn_err, msg, sizeof(msg));
                send_cmd_exit(a, c, msg);
        } else {
                c->exit_code = WIFEXITED(c->status) ? WEXITSTATUS(c->status) :
                               WIFSIGNALED(c->status) ? 128 + WTERMSIG(c->status) : 255;
                send_cmd_exit(a, c, NULL);
        }
        unsigned n = 0;
        init_cmd *oldest = NULL;
        for (init_cmd *x = a->cmds; x; x = x->next)
                if (x->finished) {
                        n++;
                        oldest = x;
                }
        if (n > INIT_UNACKED_MAX && oldest)
                cmd_forget(a, oldest);
}

void cmd_ack(init_agent *a, const cJSON *req) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(req, "id");
        if (!cJSON_IsNumber(idj))
                return agent_send_error(a, NULL, "ack: \"id\" must be a number");
        for (init_cmd *c = a->cmds; c; c = c->next)
                if (c->id == (int64_t)idj->valuedouble && c->finished)
                        return cmd_forget(a, c);
}

void cmd_free_dead(init_agent *a) {
        while (a->dead) {
                init_cmd *c = a->dead;
                a->dead = c->next;
                /* Out of epoll before the close: a child forked meanwhile
                 * may hold a copy of the fd until its exec, and the
                 * registration lives as long as any copy does, with a
                 * pointer to c (freed below). */
                watch_clear(a, c->report_fd, &c->report_watched);
                if (c->report_fd >= 0)
                        close(c->report_fd);
                /* Listed commands are forgotten once reaped (or when
                 * their clone failed, with no mapping): a child that could
                 * still run in its mapping keeps it. */
                if (c->reaped || !c->pid)
                        spawn_release(c);
                free(c->meta);
                free(c->argv0);
                free(c->cwd);
                free(c->log_out.buf);
                free(c->log_err.buf);
                free(c);
        }
}

static void stdin_flush(init_agent *a, init_cmd *c) {
        while (c->in_fd >= 0 && c->in_queue.head) {
                init_buf *b = c->in_queue.head;
                ssize_t n = write(c->in_fd, b->data + b->off, b->len - b->off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n < 0) { /* EPIPE: the command closed its stdin */
                        close_stream(a, c, WATCH_STDIN);
                        return;
                }
                b->off += (size_t)n;
                c->in_queue.bytes -= (size_t)n;
                if (b->off == b->len) {
                        c->in_queue.head = b->next;
                        if (!b->next)
                                c->in_queue.tail = NULL;
                        free(b);
                }
        }
        if (c->in_fd < 0)
                return;
        if (!c->in_queue.head && c->in_close_pending)
                return close_stream(a, c, WATCH_STDIN);
        (void)watch_set(a, c->in_fd, &c->w_in, &c->in_watched, c->in_queue.head ? EPOLLOUT : 0);
}

void cmd_on_event(init_agent *a, init_watch *w, uint32_t events) {
        init_cmd *c = w->cmd;
        if (w->kind == WATCH_REPORT)
                return spawn_report(a, c);
        if (w->kind == WATCH_STDIN) {
                if (events & EPOLLERR)
                        return close_stream(a, c, WATCH_STDIN);
                return stdin_flush(a, c);
        }
        if ((w->kind == WATCH_STDOUT ? c->out_fd : c->err_fd) < 0)
                return; /* closed earlier in this epoll batch */
        if (read_chunk(a, c, w->kind) == 0) {
                close_stream(a, c, w->kind);
                maybe_finish(a, c);
        }
}

/* Takes what is readable now from a reaped command's stream, then closes it:
 * output written before the exit is in the pipe or pty buffer already
 * (n_tty flushes pending pty input before reporting EIO), and a daemonised
 * grandchild that keeps the stream open must not delay the exit event. */
static void drain_stream(init_agent *a, init_cmd *c, enum init_watch_kind k) {
        int fd = k == WATCH_STDOUT ? c->out_fd : c->err_fd;
        size_t total = 0;
        while (fd >= 0 && total < INIT_DRAIN_MAX) {
                ssize_t n = read_chunk(a, c, k);
                if (n <= 0)
                        break;
                total += (size_t)n;
        }
        close_stream(a, c, k);
}

/* Reaps every child that has exited. As PID 1, init is also the parent of
 * every orphan of the sandbox; those are reaped silently. */
void cmd_reap(init_agent *a) {
        /* A child's stop also comes as SIGCHLD: copies and watchers the
         * sandbox stopped are ended here (init.h init_tar_end_stopped). */
        init_tar_end_stopped();
        init_watch_end_stopped();
        for (;;) {
                int st;
                /* wait4 for the command's own usage: its rusage covers it
                 * and the descendants it waited for (getrusage(2)
                 * RUSAGE_CHILDREN semantics); orphans reparented to init
                 * are not in it. ru_maxrss is in KiB. */
                struct rusage ru = {0};
                pid_t pid = wait4(-1, &st, WNOHANG, &ru);
                if (pid < 0 && errno == EINTR)
                        continue;
                a->children_gone = pid < 0 && errno == ECHILD;
                if (pid <= 0)
                        return;
                if (init_tar_reaped(a, pid, st) || init_watch_reaped(a, pid, st))
                        continue;
                for (init_cmd *c = a->cmds; c; c = c->next)
                        if (c->pid == pid && !c->reaped) {
                                c->reaped = true;
                                c->status = st;
                                spawn_release(c);
                                c->has_usage = true;
                                c->cpu_ms = ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000 +
                                            ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) / 1000;
                                c->maxrss_bytes = (uint64_t)ru.ru_maxrss * 1024;
                                /* Offline, or while the kept logs are
                                 * handed over, the last output and the
                                 * exit wait (cmd_resume). */
                                if (a->offline || a->replaying)
                                        break;
                                drain_stream(a, c, WATCH_STDOUT);
                                drain_stream(a, c, WATCH_STDERR);
                                maybe_finish(a, c);
                                break;
                        }
        }
}

/* Bytes `c` adds to the list packet: its fields, and its meta as a JSON
 * string (each '"' and '\\' escaped, control characters as \\u00XX). */
static size_t list_entry_size(const init_cmd *c) {
        size_t n = 96;
        for (const unsigned char *p = (const unsigned char *)(c->meta ? c->meta : ""); *p; p++)
                n += *p == '"' || *p == '\\' ? 2 : *p < 0x20 ? 6 : 1;
        return n;
}

cJSON *cmd_list(init_agent *a) {
        cJSON *ev = cJSON_CreateObject();
        cJSON *arr = ev ? cJSON_AddArrayToObject(ev, "commands") : NULL;
        if (!arr) {
                cJSON_Delete(ev);
                return NULL;
        }
        cJSON_AddStringToObject(ev, "ev", "list");
        cJSON_AddBoolToObject(ev, "writeAcks", true); /* agent.h "write" */
        /* One packet (AGENT_MAX_PACKET): running commands first, then
         * finished ones newest first while they fit. A finished command
         * left out is forgotten by the daemon that acks its re-sent exit. */
        size_t budget = AGENT_MAX_PACKET - 4096;
        for (int pass = 0; pass < 2; pass++)
                for (init_cmd *c = a->cmds; c; c = c->next) {
                        if (c->finished != (pass == 1))
                                continue;
                        size_t need = list_entry_size(c);
                        if (need > budget)
                                continue;
                        cJSON *o = cJSON_CreateObject();
                        if (!o)
                                continue;
                        budget -= need;
                        cJSON_AddNumberToObject(o, "id", (double)c->id);
                        cJSON_AddNumberToObject(o, "pid", c->pid);
                        cJSON_AddBoolToObject(o, "exited", c->reaped);
                        if (c->meta)
                                cJSON_AddStringToObject(o, "meta", c->meta);
                        cJSON_AddItemToArray(arr, o);
                }
        return ev;
}

void cmd_resume(init_agent *a) {
        init_cmd *next;
        for (init_cmd *c = a->cmds; c; c = next) {
                next = c->next;
                if (c->finished) {
                        send_cmd_exit(a, c, NULL);
                        continue;
                }
                if (!c->reaped)
                        continue;
                drain_stream(a, c, WATCH_STDOUT);
                drain_stream(a, c, WATCH_STDERR);
                maybe_finish(a, c);
        }
}

/* Backpressure: removes every output stream from epoll, or adds back
 * those whose window is open. */
void cmd_set_output_paused(init_agent *a, bool paused) {
        a->output_paused = paused;
        init_watch_set_paused(a, paused);
        for (init_cmd *c = a->cmds; c; c = c->next)
                update_output_watch(a, c);
}

/* At the very end of a stop (everything killed and reaped): any command
 * still listed gets its exit event so sandboxd is not left waiting. */
void cmd_finish_all(init_agent *a) {
        cmd_reap(a);
        while (a->cmds) {
                init_cmd *c = a->cmds;
                if (c->finished) {
                        cmd_forget(a, c);  /* its exit went out already */
                        continue;
                }
                if (!c->reaped) {
                        c->reaped = true;
                        c->status = SIGKILL; /* a wait status of "killed by SIGKILL" */
                }
                drain_stream(a, c, WATCH_STDOUT);
                drain_stream(a, c, WATCH_STDERR);
                maybe_finish(a, c);
        }
}

/* ---- write / close_stdin / resize / kill ---- */

static int parse_signal(const cJSON *v) {
        if (!v || cJSON_IsNull(v))
                return SIGKILL;
        if (cJSON_IsNumber(v))
                return v->valuedouble >= 1 && v->valuedouble < _NSIG &&
                       v->valuedouble == (int)v->valuedouble ? (int)v->valuedouble : -EINVAL;
        const char *s = cJSON_GetStringValue(v);
        if (!s)
                return -EINVAL;
        if (strncasecmp(s, "SIG", 3) == 0)
                s += 3;
        for (int sig = 1; sig < NSIG; sig++) {
                const char *abbrev = sigabbrev_np(sig);
                if (abbrev && strcasecmp(abbrev, s) == 0)
                        return sig;
        }
        return -EINVAL;
}

/* Answers the last chunk of an acked write (agent.h "write"): {} or errno
 * with a message naming the command and the limit. */
static void write_answer(init_agent *a, const cJSON *reqj, int64_t id, int err) {
        if (!cJSON_IsNumber(reqj))
                return;
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "fs");
        cJSON_AddNumberToObject(ev, "req", reqj->valuedouble);
        if (!err)
                cJSON_AddItemToObject(ev, "result", cJSON_CreateObject());
        else {
                char msg[256];
                if (err == ENOBUFS)
                        snprintf(msg, sizeof(msg), "command %" PRId64 " is not reading its stdin: %u MiB of it wait "
                                 "already, the most kept for one command; write again once it has read some",
                                 id, (unsigned)(INIT_STDIN_MAX >> 20));
                else if (err == EPIPE)
                        snprintf(msg, sizeof(msg), "the stdin of command %" PRId64 " is closed", id);
                else
                        snprintf(msg, sizeof(msg), "command %" PRId64 " is not running", id);
                cJSON_AddNumberToObject(ev, "errno", err);
                cJSON_AddStringToObject(ev, "message", msg);
        }
        (void)agent_send(a, ev);
}

/* A plain write (no "total"/"req", an older daemon's) is refused by the
 * chunk, with an error event. An acked one is taken whole or not at all:
 * its first chunk ("total") decides for every chunk of it, since a
 * client told its write was refused must not find part of it in the
 * command's input; its last chunk ("req") is answered. */
static void op_write(init_agent *a, init_cmd *c, const cJSON *req, const cJSON *idj) {
        const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "data"));
        const cJSON *reqj = cJSON_GetObjectItemCaseSensitive(req, "req");
        _cleanup_free_ void *buf = NULL;
        size_t len = 0;
        double total = -1;
        if (!data || core_base64_decode(data, &buf, &len) < 0 ||
            num_field(req, "total", 0, INIT_STDIN_MAX, -1, &total) < 0)
                return agent_send_error(a, idj, "write: \"data\" must be base64 and \"total\" a byte count");
        if (total >= 0) { /* the first chunk of an acked write */
                c->in_skip = 0;
                c->in_skip_errno = c->in_fd < 0 || c->in_close_pending ? EPIPE
                                   : c->in_queue.bytes + (uint64_t)total > INIT_STDIN_MAX ? ENOBUFS : 0;
                if (c->in_skip_errno)
                        c->in_skip = (uint64_t)total;
        }
        if (c->in_skip) {
                c->in_skip -= len < c->in_skip ? len : c->in_skip;
                if (cJSON_IsNumber(reqj))
                        write_answer(a, reqj, c->id, c->in_skip_errno);
                return;
        }
        if (c->in_fd < 0 || c->in_close_pending) {
                if (cJSON_IsNumber(reqj))
                        return write_answer(a, reqj, c->id, EPIPE);
                return agent_send_error(a, idj, "write: stdin of command %" PRId64 " is closed", c->id);
        }
        if (c->in_queue.bytes + len > INIT_STDIN_MAX) {
                if (cJSON_IsNumber(reqj))
                        return write_answer(a, reqj, c->id, ENOBUFS);
                return agent_send_error(a, idj, "write: command %" PRId64 " is not reading its stdin", c->id);
        }
        if (len && queue_push(&c->in_queue, buf, len) < 0)
                return agent_send_error(a, idj, "write: out of memory");
        stdin_flush(a, c);
        if (cJSON_IsNumber(reqj))
                write_answer(a, reqj, c->id, 0);
}

static void op_close_stdin(init_agent *a, init_cmd *c) {
        if (c->in_fd < 0 || c->in_close_pending)
                return;
        /* A pty has no end of file of its own: the line discipline turns
         * VEOF (^D, at the start of a line) into one for the reader. */
        if (c->tty)
                (void)queue_push(&c->in_queue, "\x04", 1);
        c->in_close_pending = true;
        stdin_flush(a, c);
}

static void op_resize(init_agent *a, init_cmd *c, const cJSON *req, const cJSON *idj) {
        double rows, cols;
        if (num_field(req, "rows", 1, 65535, 24, &rows) < 0 || num_field(req, "cols", 1, 65535, 80, &cols) < 0)
                return agent_send_error(a, idj, "resize: \"rows\" and \"cols\" must be integers from 1 to 65535");
        if (!c->tty || c->out_fd < 0)
                return; /* nothing to resize; not an error for sandboxd */
        struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
        if (ioctl(c->out_fd, TIOCSWINSZ, &ws) < 0)
                agent_send_error(a, idj, "resize: %m");
}

/* Handles write, close_stdin, resize and kill for a running command. */
void cmd_op(init_agent *a, const char *op, const cJSON *req) {
        const cJSON *idj = cJSON_GetObjectItemCaseSensitive(req, "id");
        if (!cJSON_IsNumber(idj))
                return agent_send_error(a, NULL, "%s: \"id\" must be a number", op);
        init_cmd *c = cmd_find(a, (int64_t)idj->valuedouble);
        /* kill, resize and close_stdin race with the command's exit as a
         * matter of course; only lost stdin is worth an error. */
        if (!c && streq(op, "write")) {
                /* An acked write's chunks are answered once, at the last. */
                const cJSON *reqj = cJSON_GetObjectItemCaseSensitive(req, "req");
                if (cJSON_IsNumber(reqj))
                        return write_answer(a, reqj, (int64_t)idj->valuedouble, ESRCH);
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "acked")))
                        return;
                return agent_send_error(a, idj, "write: no running command with id %.0f", idj->valuedouble);
        }
        if (!c)
                return;
        if (streq(op, "write"))
                op_write(a, c, req, idj);
        else if (streq(op, "close_stdin"))
                op_close_stdin(a, c);
        else if (streq(op, "resize"))
                op_resize(a, c, req, idj);
        else {
                int sig = parse_signal(cJSON_GetObjectItemCaseSensitive(req, "signal"));
                if (sig < 0)
                        return agent_send_error(a, idj, "kill: unknown signal");
                /* The command leads its own process group (setsid), so the
                 * signal also reaches what it started. A reaped command may
                 * still wait for its streams: nothing left to signal. One
                 * that has not exec'd yet (its report pipe still open) may
                 * not lead its group yet, as setsid is one of its steps
                 * before exec: the signal goes to it directly too, and it
                 * has started nothing before exec. SIGKILL goes to the
                 * leader first in any case: once it is pending there, it
                 * can start nothing more (fork fails with a fatal signal
                 * pending), so the group's SIGKILL after it reaches
                 * everything it started. */
                spawn_report(a, c);
                if (!c->reaped) {
                        bool pre_exec = c->report_fd >= 0;
                        if (pre_exec || sig == SIGKILL)
                                (void)kill(c->pid, sig);
                        if (kill(-c->pid, sig) < 0 && errno != ESRCH && !pre_exec)
                                agent_send_error(a, idj, "kill: %m");
                }
        }
}
