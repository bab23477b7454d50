/* Containers of a sandbox (docs/API.md "container.*"): each one a mount
 * namespace of its own under the sandbox's, with its own root (an overlay
 * sandboxd built: the container's runtime as the read-only lower, an upper
 * of its own), a PID namespace of its own unless the request shares the
 * sandbox's ("ownPids"), and everything else of the sandbox shared
 * (network, IPC, UTS and user namespaces). Its commands are init's
 * children like any other; command.c joins them to the namespace (setns),
 * and to the container's cgroup (fds sandboxd opened) before exec, and
 * init forks them into the container's PID namespace (spawn_child).
 *
 * A PID namespace of its own (the CRI's NamespaceMode CONTAINER, the
 * Kubernetes default): its PID 1 is a small reaper the creation child
 * forks right after unsharing it (pid_namespaces(7): the first process
 * made in a new PID namespace is its init; when it ends, the namespace
 * accepts no new process). It joins the container's cgroups (a delete of
 * the container kills it with the rest), mounts the container's own /proc
 * (a procfs instance shows the PID namespace of the process that mounted
 * it, proc(5)) with the sandbox's masks, then drops every capability and
 * closes every fd, and only reaps orphans from then on. A container's
 * commands thus see their own processes only: no other container's in
 * /proc, none to signal, ptrace or enter by /proc/PID/root.
 *
 * Who makes the namespace: init runs under the command filter from its
 * first command on (command.c cmd_confine_self), which refuses the mount
 * family and unshare, so the mounts are made by a helper that init forks
 * right after setup, before any filter (init_ctr_helper_start): it serves
 * one request at a time over a socketpair and does each creation in a
 * child of its own, which unshares, attaches the mounts, pivot_roots and
 * hands back its mount namespace fd. The helper never runs sandbox code
 * and reads nothing but init's requests. Every target is resolved beneath
 * the container's root with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS),
 * so a symlink the container's image or upper planted fails the creation
 * instead of leading elsewhere. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <linux/openat2.h>
#include "libcore/agent.h"
#include "libcore/caps.h"
#include "libcore/init/init.h"
#include "libcore/log.h"
#include "libcore/rootfs.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

#define CTR_MAX 64        /* containers per sandbox (sandboxd allows fewer) */
#define CTR_FDS_MAX 64    /* fds of one creation: overlay, mounts, cgroups */
#define CTR_HELPER_TIMEOUT_MS 30000

typedef struct init_container {
        struct init_container *next;
        char *name;
        int mntns;                    /* the container's mount namespace */
        int pidns;                    /* its own PID namespace, or -EBADF (the sandbox's) */
        int cg[CORE_CTR_CG_MAX];      /* cgroup.procs of its cgroups, one per hierarchy */
        size_t n_cg;
} init_container;

static init_container *containers;
static int pending[CTR_FDS_MAX];
static size_t n_pending;
static int helper_sock = -EBADF;
static int own_pidns = -EBADF;   /* init's own PID namespace */

static void pending_clear(void) {
        for (size_t i = 0; i < n_pending; i++)
                if (pending[i] >= 0)
                        close(pending[i]);
        n_pending = 0;
}

static void ctr_free(init_container *c) {
        if (!c)
                return;
        if (c->mntns >= 0)
                close(c->mntns);
        if (c->pidns >= 0)
                close(c->pidns);
        for (size_t i = 0; i < c->n_cg; i++)
                close(c->cg[i]);
        free(c->name);
        free(c);
}

const init_container *init_ctr_find(const char *name) {
        for (init_container *c = containers; c; c = c->next)
                if (streq(c->name, name))
                        return c;
        return NULL;
}

int init_ctr_mntns(const init_container *c) {
        return c->mntns;
}

int init_ctr_pidns(const init_container *c) {
        return c->pidns;
}

int init_ctr_pidns_enter(const init_container *c) {
        if (!c || c->pidns < 0)
                return 0;
        if (own_pidns < 0)
                return -ENOTSUP;
        return setns(c->pidns, CLONE_NEWPID) < 0 ? negative_errno() : 1;
}

void init_ctr_pidns_leave(void) {
        /* Back to init's own: setns(2) allows the caller's active PID
         * namespace always; should it fail, every later command would
         * start in the container's, so init gives up instead. */
        if (setns(own_pidns, CLONE_NEWPID) < 0) {
                log_error("setns back to init's own PID namespace: %m");
                abort();
        }
}

size_t init_ctr_cgroups(const init_container *c, const int **ret) {
        *ret = c->cg;
        return c->n_cg;
}

/* ---- fd passing ---- */

static int send_fds(int sock, const char *text, const int *fds, size_t n) {
        struct iovec iov = { .iov_base = (void *)text, .iov_len = strlen(text) };
        union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * CTR_FDS_MAX)]; } ctl = {};
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (n > CTR_FDS_MAX)
                return -E2BIG;
        if (n) {
                mh.msg_control = ctl.b;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * n);
                memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
        }
        return sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 ? negative_errno() : 0;
}

/* One packet into buf (NUL-terminated), its fds into fds (at most
 * CTR_FDS_MAX, close-on-exec). Returns its length or a negative errno. */
static ssize_t recv_fds(int sock, char *buf, size_t size, int *fds, size_t *ret_n) {
        union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * CTR_FDS_MAX)]; } ctl;
        struct iovec iov = { .iov_base = buf, .iov_len = size - 1 };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
        ssize_t n;
        do
                n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        *ret_n = 0;
        for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t i = 0; i < k; i++) {
                                int fd;
                                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                                if (*ret_n < CTR_FDS_MAX)
                                        fds[(*ret_n)++] = fd;
                                else
                                        close(fd);
                        }
                }
        if (n < 0)
                return negative_errno();
        if (n == 0)
                return -EPIPE;
        buf[n] = 0;
        return n;
}

/* ---- the helper's creation child (its own mount namespace) ---- */

static int attach(int rootfd, int tree, const char *dst, bool dir, char *msg, size_t msz) {
        int r = core_rootfs_make_target(rootfd, dst, dir);
        if (r < 0) {
                snprintf(msg, msz, "mount point %s: %s", dst, core_beneath_strerror(r));
                return r;
        }
        _cleanup_error_ sb_error *err = NULL;
        r = core_rootfs_attach_bind(rootfd, tree, dst, &err);
        if (r < 0)
                snprintf(msg, msz, "%s", err ? err->message : strerror(-r));
        return r;
}

static bool tree_is_dir(int tree) {
        struct stat st;
        return fstat(tree, &st) == 0 && S_ISDIR(st.st_mode);
}

/* How often PID 1 of a container's namespace, stopping, looks whether it
 * is the last process there (nothing tells it: the namespace's other
 * processes are children of sandbox-init, not its own). */
#define PID1_STOP_POLL_NS (10 * 1000 * 1000)

/* Whether the calling PID 1 is the only process of its PID namespace:
 * kill(2) with pid -1 reaches every process of the caller's namespace
 * (and those below it) but PID 1 itself, and fails with ESRCH when there
 * is none (EPERM when there are only some it may not signal). */
static bool pid1_alone(void) {
        return kill(-1, 0) < 0 && errno == ESRCH;
}

/* PID 1 of a container's own PID namespace, from its first moments: reaps
 * what is reparented to it, and ends at SIGKILL (a delete of the
 * container: its cgroup is killed) or, after a SIGTERM (a stop of the
 * sandbox, sent to every process of it at once), once it is the last
 * process of its namespace: its exit would SIGKILL the others
 * (pid_namespaces(7)), cutting the stop's grace short for the
 * container's processes. sandbox-init's SIGKILL at the grace's end ends
 * it with them. Holds no fd and no capability. */
_noreturn_ static void pid1_main(void) {
        (void)prctl(PR_SET_NAME, "sandbox-ctrinit");
        (void)close_range(0, ~0U, 0);
        (void)core_caps_set(0);
        /* Blocked signals are queued even for a namespace's init, whose
         * default dispositions are otherwise ignored (signal(7)). */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGTERM);
        (void)sigprocmask(SIG_SETMASK, &set, NULL);
        bool stopping = false;
        for (;;) {
                while (waitpid(-1, NULL, WNOHANG) > 0)
                        ;
                if (stopping && pid1_alone())
                        _exit(0);
                siginfo_t si;
                if (!stopping) {
                        stopping = sigwaitinfo(&set, &si) == SIGTERM;
                        continue;
                }
                const struct timespec poll_every = {.tv_sec = 0, .tv_nsec = PID1_STOP_POLL_NS};
                (void)sigtimedwait(&set, &si, &poll_every);
        }
}

/* In the creation child, after unshare(CLONE_NEWPID): forks the
 * namespace's PID 1, which joins the container's cgroups (the request's
 * "cgroups" indexes into fds), mounts the namespace's /proc beneath rootfd
 * and reports; then it is pid1_main. Returns 0 once /proc is there, or a
 * negative errno with msg set (the child, if any, has ended). */
static int start_pid1(const cJSON *req, int rootfd, int *fds, size_t n_fds, char *msg, size_t msz) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                snprintf(msg, msz, "pipe: %m");
                return negative_errno();
        }
        pid_t pid = fork();
        if (pid < 0) {
                int r = negative_errno();
                snprintf(msg, msz, "fork the PID namespace's init: %m");
                close(p[0]);
                close(p[1]);
                return r;
        }
        if (pid == 0) {
                char m[512] = "";
                int r = 0;
                const cJSON *cg;
                cJSON_ArrayForEach(cg, cJSON_GetObjectItemCaseSensitive(req, "cgroups")) {
                        if (!cJSON_IsNumber(cg) || cg->valueint < 1 || (size_t)cg->valueint >= n_fds) {
                                r = -EINVAL;
                                snprintf(m, sizeof(m), "\"cgroups\" must index received fds");
                                break;
                        }
                        if (write(fds[cg->valueint], "0", 1) != 1) {
                                r = negative_errno();
                                snprintf(m, sizeof(m), "join the container's cgroup: %m");
                                break;
                        }
                }
                _cleanup_error_ sb_error *err = NULL;
                if (r >= 0 && (r = core_rootfs_mount_proc(rootfd, &err)) < 0)
                        snprintf(m, sizeof(m), "/proc of its PID namespace: %s", err ? err->message : strerror(-r));
                char rep[600];
                int n = snprintf(rep, sizeof(rep), "%d %s", -r, m);
                (void)!write(p[1], rep, (size_t)n);
                if (r < 0)
                        _exit(1);
                pid1_main();
        }
        close(p[1]);
        char rep[600];
        ssize_t n;
        do
                n = read(p[0], rep, sizeof(rep) - 1);
        while (n < 0 && errno == EINTR);
        close(p[0]);
        rep[n > 0 ? n : 0] = 0;
        int err = n > 0 ? atoi(rep) : EIO;
        if (err) {
                const char *t = strchr(rep, ' ');
                snprintf(msg, msz, "%s", t && t[1] ? t + 1 : "the PID namespace's init died");
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                return -err;
        }
        return 0;
}

/* In the creation child: the new namespace, its mounts, pivot_root. On
 * success the child's mount namespace is the container's. `fds` are the
 * request's (overlay first). ret_ns gets the namespace fds: [0] the mount
 * namespace, [1] the PID namespace when the request asks for its own
 * ("ownPids"). Returns 0 or a negative errno with msg set. */
static int build_ns(const cJSON *req, int *fds, size_t n_fds, int ret_ns[2], char *msg, size_t msz) {
        bool own_pids = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "ownPids"));
        if (n_fds < 1) {
                snprintf(msg, msz, "no overlay mount came with the request");
                return -EINVAL;
        }
        if (unshare(CLONE_NEWNS | (own_pids ? CLONE_NEWPID : 0)) < 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
                snprintf(msg, msz, "new mount and PID namespaces: %m");
                return negative_errno();
        }
        /* Opened while /proc is still the sandbox's: after pivot_root
         * it may be the container's own, where this process (not in the
         * new PID namespace itself) has no /proc/self. */
        if ((ret_ns[0] = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC)) < 0) {
                snprintf(msg, msz, "open the new mount namespace: %m");
                return negative_errno();
        }
        /* What the container shares with the sandbox, cloned from the
         * sandbox's own mounts (recursive: the masks over /proc and /sys
         * come along, and stay locked in a user namespace): /proc of the
         * shared PID namespace, /dev (with its pts and shm), read-only
         * /sys, and the sandbox's resolv.conf and hosts (its DNS filter). */
        static const struct { const char *path; bool dir; } shared[] = {
                { "/proc", true }, { "/dev", true }, { "/sys", true },
                { "/etc/resolv.conf", false }, { "/etc/hosts", false },
        };
        /* Each resolved from the sandbox's root with no symlink and no
         * magic link followed: /etc/resolv.conf and /etc/hosts are files
         * root inside may replace, and this process holds capabilities
         * and no seccomp filter, so a link there (to /proc/1/fd/N, a
         * descriptor of init that root inside may not open) would hand
         * the container what the helper can reach. A file that is not a
         * regular file there is left out, as a missing one is (the
         * container keeps its image's). */
        _cleanup_close_ int sbroot = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (sbroot < 0) {
                snprintf(msg, msz, "open the sandbox's root: %m");
                return negative_errno();
        }
        int trees[ELEMENTSOF(shared)];
        for (size_t i = 0; i < ELEMENTSOF(shared); i++) {
                /* A PID namespace of its own gets a /proc of its own
                 * (start_pid1), never the sandbox's. */
                if (own_pids && streq(shared[i].path, "/proc")) {
                        trees[i] = -ENOENT;
                        continue;
                }
                int at = core_open_beneath(sbroot, shared[i].path + 1,
                                           O_PATH | O_NOFOLLOW | (shared[i].dir ? O_DIRECTORY : 0), 0);
                struct stat st;
                if (at >= 0 && !shared[i].dir && (fstat(at, &st) < 0 || !S_ISREG(st.st_mode))) {
                        close(at);
                        at = -ELOOP;
                }
                trees[i] = at < 0 ? at
                                  : open_tree(at, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
                if (trees[i] < 0 && at >= 0)
                        trees[i] = negative_errno();
                if (at >= 0)
                        close(at);
                if (trees[i] < 0 && shared[i].dir) {
                        snprintf(msg, msz, "clone the sandbox's %s: %s", shared[i].path, strerror(-trees[i]));
                        return trees[i];
                }
        }
        /* A scratch tmpfs to attach the new root on, detached with the old
         * root by pivot_root below. */
        if (mount("none", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=0700") < 0 ||
            mkdir("/tmp/root", 0700) < 0) {
                snprintf(msg, msz, "scratch mount: %m");
                return negative_errno();
        }
        if (move_mount(fds[0], "", AT_FDCWD, "/tmp/root", MOVE_MOUNT_F_EMPTY_PATH) < 0 || chdir("/tmp/root") < 0) {
                snprintf(msg, msz, "attach the container's root: %m");
                return negative_errno();
        }
        _cleanup_close_ int rootfd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rootfd < 0) {
                snprintf(msg, msz, "open the container's root: %m");
                return negative_errno();
        }
        int r;
        for (size_t i = 0; i < ELEMENTSOF(shared); i++)
                if (trees[i] >= 0 && (r = attach(rootfd, trees[i], shared[i].path, shared[i].dir, msg, msz)) < 0)
                        return r;
        const cJSON *tmp = cJSON_GetObjectItemCaseSensitive(req, "tmpSize");
        _cleanup_close_ int tmpfs = -EBADF;
        int fsfd = fsopen("tmpfs", FSOPEN_CLOEXEC);
        if (fsfd >= 0) {
                char size[32];
                snprintf(size, sizeof(size), "%llu",
                         cJSON_IsNumber(tmp) && tmp->valuedouble >= 1 ? (unsigned long long)tmp->valuedouble : 64ULL << 20);
                if (fsconfig(fsfd, FSCONFIG_SET_STRING, "size", size, 0) == 0 &&
                    fsconfig(fsfd, FSCONFIG_SET_STRING, "mode", "1777", 0) == 0 &&
                    fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
                        tmpfs = fsmount(fsfd, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
                close(fsfd);
        }
        if (tmpfs < 0) {
                snprintf(msg, msz, "tmpfs for /tmp: %m");
                return negative_errno();
        }
        if ((r = attach(rootfd, tmpfs, "/tmp", true, msg, msz)) < 0)
                return r;
        /* The caller's mounts last, so they cover what the image has. */
        const cJSON *m;
        int i = 0;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(req, "mounts")) {
                const char *dst = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "destination"));
                const cJSON *fdi = cJSON_GetObjectItemCaseSensitive(m, "fd");
                if (!dst || *dst != '/' || !cJSON_IsNumber(fdi) || fdi->valueint < 1 || (size_t)fdi->valueint >= n_fds) {
                        snprintf(msg, msz, "mounts[%d]: needs \"destination\" and a received \"fd\"", i);
                        return -EINVAL;
                }
                int tree = fds[fdi->valueint];
                if ((r = attach(rootfd, tree, dst, tree_is_dir(tree), msg, msz)) < 0) {
                        char inner[512];
                        snprintf(inner, sizeof(inner), "%s", msg);
                        snprintf(msg, msz, "mounts[%d].destination: %s", i, inner);
                        return r;
                }
                i++;
        }
        /* The PID namespace's init first: until it exists the namespace
         * has no file to open (pid_namespaces(7), pid_for_children). */
        if (own_pids) {
                if ((r = start_pid1(req, rootfd, fds, n_fds, msg, msz)) < 0)
                        return r;
                if ((ret_ns[1] = open("/proc/self/ns/pid_for_children", O_RDONLY | O_CLOEXEC)) < 0) {
                        snprintf(msg, msz, "open the new PID namespace: %m");
                        return negative_errno();
                }
        }
        /* readOnlyRoot: the root mount itself, once every mount point on
         * it is made (its submounts keep their own flags). */
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "readOnlyRoot"))) {
                struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
                if (mount_setattr(rootfd, "", AT_EMPTY_PATH, &ro, sizeof(ro)) < 0) {
                        snprintf(msg, msz, "readOnlyRoot: %m");
                        return negative_errno();
                }
        }
        /* pivot_root(".", "."): the old root ends under the new one and is
         * detached at once, as runc does, with no directory needed for it. */
        if (syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 || chdir("/") < 0) {
                snprintf(msg, msz, "pivot_root into the container's root: %m");
                return negative_errno();
        }
        return 0;
}

/* The helper: one creation at a time, each in a child that unshares its
 * mount namespace (the helper's own stays the sandbox's) and sends back its
 * namespace fd. */
_noreturn_ static void helper_main(int sock) {
        static char buf[AGENT_MAX_PACKET + 1];
        for (;;) {
                int fds[CTR_FDS_MAX];
                size_t n_fds = 0;
                ssize_t n = recv_fds(sock, buf, sizeof(buf), fds, &n_fds);
                if (n < 0)
                        _exit(0);
                int pair[2];
                char msg[1024] = "";
                int r = socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0 ? negative_errno() : 0;
                pid_t pid = r < 0 ? -1 : fork();
                if (pid == 0) {
                        close(pair[0]);
                        _cleanup_(cJSON_Deletep) cJSON *req = cJSON_ParseWithLength(buf, (size_t)n);
                        /* [0] the mount namespace, [1] its own PID one. */
                        int ns[2] = { -EBADF, -EBADF };
                        r = req ? build_ns(req, fds, n_fds, ns, msg, sizeof(msg)) : -EBADMSG;
                        char reply[1200];
                        snprintf(reply, sizeof(reply), "%d %s", -r, r < 0 ? (*msg ? msg : strerror(-r)) : "");
                        (void)send_fds(pair[1], reply, ns, r < 0 ? 0 : ns[1] >= 0 ? 2 : 1);
                        _exit(0);
                }
                for (size_t i = 0; i < n_fds; i++)
                        close(fds[i]);
                char reply[1200] = "";
                int ns[CTR_FDS_MAX];
                size_t n_ns = 0;
                if (pid > 0) {
                        close(pair[1]);
                        ssize_t k = recv_fds(pair[0], reply, sizeof(reply), ns, &n_ns);
                        if (k < 0)
                                snprintf(reply, sizeof(reply), "%d creation child died", EIO);
                        close(pair[0]);
                        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                                ;
                } else {
                        if (r >= 0)
                                r = negative_errno();
                        snprintf(reply, sizeof(reply), "%d fork: %s", -r, strerror(-r));
                }
                (void)send_fds(sock, reply, ns, n_ns);
                for (size_t i = 0; i < n_ns; i++)
                        close(ns[i]);
        }
}

int init_ctr_helper_start(const int *close_fds, size_t n_close) {
        int pair[2];
        if (own_pidns < 0)
                own_pidns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
                return negative_errno();
        pid_t pid = fork();
        if (pid < 0) {
                int r = negative_errno();
                close(pair[0]);
                close(pair[1]);
                return r;
        }
        if (pid == 0) {
                /* Nothing of init's but the pair: not the agent socket,
                 * the listening one, the signalfd nor the epoll fd
                 * (close_fds are those). */
                close(pair[0]);
                for (size_t i = 0; i < n_close; i++)
                        if (close_fds[i] >= 0)
                                close(close_fds[i]);
                /* Default signals, none blocked: a stop's SIGTERM to every
                 * process of the sandbox (agent_begin_stop) ends it at once
                 * instead of at the grace's SIGKILL. */
                core_signals_reset();
                (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
                (void)prctl(PR_SET_NAME, "sandbox-ctrd");
                (void)prctl(PR_SET_DUMPABLE, 0);
                helper_main(pair[1]);
        }
        close(pair[1]);
        helper_sock = pair[0];
        return 0;
}

/* ---- the agent side ---- */

static void reply(init_agent *a, const cJSON *req, int err, const char *message, cJSON *result) {
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev) {
                cJSON_Delete(result);
                return;
        }
        cJSON_AddStringToObject(ev, "ev", "fs");
        cJSON_AddItemToObject(ev, "req", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(req, "req"), true));
        if (err) {
                cJSON_AddNumberToObject(ev, "errno", err);
                cJSON_AddStringToObject(ev, "message", message ? message : strerror(err));
                cJSON_Delete(result);
        } else
                cJSON_AddItemToObject(ev, "result", result ? result : cJSON_CreateObject());
        (void)agent_send(a, ev);
}

void init_ctr_fd(init_agent *a, const cJSON *req, int fd) {
        /* "index" 0 starts a batch: what an earlier daemon queued and never
         * used (it died between its fds and its create) is dropped, so no
         * index of this batch names a stale fd. */
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(req, "index");
        if (!cJSON_IsNumber(idx) || idx->valuedouble < 0 || idx->valuedouble >= CTR_FDS_MAX)
                return agent_send_error(a, NULL, "ctrfd: \"index\" must be a number below %d", CTR_FDS_MAX);
        if (idx->valueint == 0)
                pending_clear();
        if ((size_t)idx->valueint != n_pending) {
                pending_clear();
                return agent_send_error(a, NULL, "ctrfd: index %d out of order", idx->valueint);
        }
        if (fd < 0)
                return agent_send_error(a, NULL, "ctrfd: no file descriptor came with the packet");
        if (n_pending >= CTR_FDS_MAX)
                return agent_send_error(a, NULL, "ctrfd: more than %d pending", CTR_FDS_MAX);
        /* The caller closes its own after the packet: keep a copy. */
        int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (copy < 0)
                return agent_send_error(a, NULL, "ctrfd: %s", strerror(errno));
        pending[n_pending++] = copy;
}

/* {"op":"container","action":"create","req":N,"name":S,"mounts":[...],
 * "cgroups":[I...],"tmpSize":B} with the fds of the "ctrfd" packets before
 * it: pending[0] the overlay, mounts[].fd and cgroups[] indexes into them. */
static void ctr_create_fds(init_agent *a, const cJSON *req) {
        char msg[1200];
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "name"));
        if (!name || !*name || strlen(name) > 64)
                return reply(a, req, EINVAL, "container: \"name\" must be a short string", NULL);
        if (init_ctr_find(name))
                return reply(a, req, EEXIST, "container exists", NULL);
        size_t count = 0;
        for (init_container *c = containers; c; c = c->next)
                count++;
        if (count >= CTR_MAX)
                return reply(a, req, ENOSPC, "too many containers", NULL);
        if (helper_sock < 0)
                return reply(a, req, ENOTSUP, "this sandbox-init has no container helper", NULL);
        _cleanup_free_ init_container *c = calloc(1, sizeof(*c));
        if (!c)
                return reply(a, req, ENOMEM, NULL, NULL);
        c->mntns = c->pidns = -EBADF;
        const cJSON *cg;
        cJSON_ArrayForEach(cg, cJSON_GetObjectItemCaseSensitive(req, "cgroups")) {
                if (!cJSON_IsNumber(cg) || cg->valueint < 1 || (size_t)cg->valueint >= n_pending ||
                    pending[cg->valueint] < 0 || c->n_cg >= CORE_CTR_CG_MAX) {
                        for (size_t i = 0; i < c->n_cg; i++)
                                close(c->cg[i]);
                        return reply(a, req, EINVAL, "container: \"cgroups\" must index received fds", NULL);
                }
                /* A copy: the helper gets the fd at its index too (the
                 * PID namespace's init joins the cgroup with it). */
                int copy = fcntl(pending[cg->valueint], F_DUPFD_CLOEXEC, 3);
                if (copy < 0) {
                        int e = errno;
                        for (size_t i = 0; i < c->n_cg; i++)
                                close(c->cg[i]);
                        return reply(a, req, e, NULL, NULL);
                }
                c->cg[c->n_cg++] = copy;
        }
        /* The helper gets every pending fd, at its index. */
        int fds[CTR_FDS_MAX];
        size_t n_fds = 0;
        for (size_t i = 0; i < n_pending; i++)
                fds[n_fds++] = pending[i];
        _cleanup_free_ char *text = cJSON_PrintUnformatted(req);
        int r = text ? send_fds(helper_sock, text, fds, n_fds) : -ENOMEM;
        pending_clear();
        int ns = -EBADF;
        if (r >= 0) {
                struct pollfd p = { .fd = helper_sock, .events = POLLIN };
                r = poll(&p, 1, CTR_HELPER_TIMEOUT_MS);
                r = r < 0 ? negative_errno() : r == 0 ? -ETIMEDOUT : 0;
        }
        int got[CTR_FDS_MAX];
        size_t n_got = 0;
        if (r >= 0) {
                ssize_t k = recv_fds(helper_sock, msg, sizeof(msg), got, &n_got);
                if (k < 0)
                        r = (int)k;
        }
        if (r < 0) {
                /* A late answer would pair with the next request: the
                 * helper is given up (it exits at EOF), and so are
                 * container creations in this sandbox. */
                close(helper_sock);
                helper_sock = -EBADF;
                for (size_t i = 0; i < c->n_cg; i++)
                        close(c->cg[i]);
                snprintf(msg, sizeof(msg), "container helper: %s", strerror(-r));
                return reply(a, req, -r, msg, NULL);
        }
        bool own_pids = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "ownPids"));
        for (size_t i = own_pids ? 2 : 1; i < n_got; i++)
                close(got[i]);
        ns = n_got ? got[0] : -EBADF;
        int pidns = own_pids && n_got > 1 ? got[1] : -EBADF;
        int err = atoi(msg);
        const char *text_msg = strchr(msg, ' ');
        if (err || ns < 0 || (own_pids && pidns < 0)) {
                if (ns >= 0)
                        close(ns);
                if (pidns >= 0)
                        close(pidns);
                for (size_t i = 0; i < c->n_cg; i++)
                        close(c->cg[i]);
                return reply(a, req, err ? err : EIO, text_msg ? text_msg + 1 : "container creation failed", NULL);
        }
        c->mntns = ns;
        c->pidns = pidns;
        c->name = strdup(name);
        if (!c->name) {
                ctr_free(TAKE_PTR(c));
                return reply(a, req, ENOMEM, NULL, NULL);
        }
        c->next = containers;
        containers = TAKE_PTR(c);
        reply(a, req, 0, NULL, NULL);
}

/* Whatever the outcome, the queued fds belong to this create only. */
static void ctr_create(init_agent *a, const cJSON *req) {
        ctr_create_fds(a, req);
        pending_clear();
}

static void ctr_delete(init_agent *a, const cJSON *req) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "name"));
        for (init_container **p = &containers; name && *p; p = &(*p)->next)
                if (streq((*p)->name, name)) {
                        init_container *c = *p;
                        *p = c->next;
                        ctr_free(c);
                        return reply(a, req, 0, NULL, NULL);
                }
        reply(a, req, ENOENT, "no such container", NULL);
}

static void ctr_list(init_agent *a, const cJSON *req) {
        cJSON *res = cJSON_CreateObject();
        cJSON *arr = res ? cJSON_AddArrayToObject(res, "containers") : NULL;
        for (init_container *c = containers; arr && c; c = c->next)
                cJSON_AddItemToArray(arr, cJSON_CreateString(c->name));
        if (!arr) {
                cJSON_Delete(res);
                return reply(a, req, ENOMEM, NULL, NULL);
        }
        reply(a, req, 0, NULL, res);
}

void init_ctr_op(init_agent *a, const cJSON *req) {
        const char *action = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "action"));
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(req, "req"))) {
                pending_clear();
                return agent_send_error(a, NULL, "container: \"req\" must be a number");
        }
        if (action && streq(action, "create"))
                return ctr_create(a, req);
        pending_clear();
        if (action && streq(action, "delete"))
                return ctr_delete(a, req);
        if (action && streq(action, "list"))
                return ctr_list(a, req);
        reply(a, req, EINVAL, "container: unknown \"action\"", NULL);
}
