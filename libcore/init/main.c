/* sandbox-init: PID 1 of every sandbox. Owns the startup sequence (setup
 * packet, cgroup namespace, root filesystem, network, base environment),
 * the event loop over the agent socket, signals and command streams, and
 * the stop sequence (SIGTERM to all, grace, SIGKILL, reap, exit). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <iconv.h>
#include <langinfo.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "cli/lazy/archive.h"
#include "libcore/agent.h"
#include "libcore/init/init.h"
#include "libcore/log.h"
#include "libcore/net.h"
#include "libcore/rootfs.h"
#include "libcore/seccomp.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* libarchive (directory copies, tar.c) is not loaded at init's start: with
 * libxml2, ICU and libstdc++ it took about 2.7 ms of CPU on every sandbox
 * start, for copies most sandboxes never make. sandboxd names its files
 * (setup "archiveLibs", core_archive_lib_files); init opens them right
 * before its root changes (before_pivot of core_rootfs_setup), from the
 * host's tree, and a copy's child loads them from those fds
 * (cli/lazy/archive.h), never a library of the sandbox's tree. Without
 * the list, or when a file cannot be opened, copies fail and say so. */
static char **archive_lib_paths;
static size_t archive_n_lib_paths;
static int archive_lib_fds[64];

/* glibc reads its charset conversion configuration (gconv-modules, its
 * cache) once per process, at the first iconv_open(3), from the process's
 * root, and dlopen()s the modules it names: libarchive converts member
 * names (pax headers are UTF-8) in a copy's child, after the root became
 * the sandbox's, whose gconv files root inside (or the runtime) may
 * replace with a module of its own. Opened here, before the root changes,
 * for the conversions a copy makes (the C locale's charset to and from
 * UTF-8, glibc built-ins): the host's configuration is then the one every
 * child inherits, and nothing of the sandbox's gconv directory is read. */
static void gconv_load_host(void) {
        const char *cs = nl_langinfo(CODESET);
        const char *pairs[][2] = {{"UTF-8", cs}, {cs, "UTF-8"}};
        for (size_t i = 0; i < ELEMENTSOF(pairs); i++) {
                iconv_t cd = iconv_open(pairs[i][0], pairs[i][1]);
                if (cd != (iconv_t)-1)
                        (void)iconv_close(cd);
        }
}

static void archive_files_open(void) {
        static bool opened;
        if (opened)
                return;
        opened = true;
        gconv_load_host();
        size_t n = 0;
        for (size_t i = 0; i < archive_n_lib_paths && i < ELEMENTSOF(archive_lib_fds); i++) {
                int fd = open(archive_lib_paths[i], O_RDONLY | O_CLOEXEC);
                if (fd < 0) {
                        log_warning("open %s: %m: directory copies will fail", archive_lib_paths[i]);
                        for (size_t k = 0; k < n; k++)
                                close(archive_lib_fds[k]);
                        n = 0;
                        break;
                }
                archive_lib_fds[n++] = fd;
        }
        lazy_archive_use_files(archive_lib_fds, n);
}

static void archive_paths_take(const cJSON *req) {
        const cJSON *libs = cJSON_GetObjectItemCaseSensitive(req, "archiveLibs");
        int n = cJSON_IsArray(libs) ? cJSON_GetArraySize(libs) : 0;
        if (n <= 0 || !(archive_lib_paths = calloc((size_t)n, sizeof(char *))))
                return;
        const cJSON *p;
        cJSON_ArrayForEach(p, libs) {
                const char *s = cJSON_GetStringValue(p);
                if (!s || s[0] != '/' || !(archive_lib_paths[archive_n_lib_paths] = strdup(s)))
                        break;
                archive_n_lib_paths++;
        }
        if (archive_n_lib_paths != (size_t)n)
                archive_n_lib_paths = 0; /* a malformed list: no copies */
}

/* Blocking send of one packet, bounded by timeout_ms (setup replies and the
 * last events before exit, when there is no loop left to wait in). */
static int send_blocking(int sock, const char *data, size_t len, int timeout_ms) {
        for (;;) {
                if (send(sock, data, len, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
                        return 0;
                if (errno != EAGAIN && errno != EINTR)
                        return negative_errno();
                struct pollfd p = { .fd = sock, .events = POLLOUT };
                int r = poll(&p, 1, timeout_ms);
                if (r == 0)
                        return -ETIMEDOUT;
                if (r < 0 && errno != EINTR)
                        return negative_errno();
        }
}

static void send_setup_reply(int sock, const char *error) {
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", error ? "error" : "ready");
        if (error)
                cJSON_AddStringToObject(ev, "message", error);
        _cleanup_free_ char *s = cJSON_PrintUnformatted(ev);
        if (s)
                (void)send_blocking(sock, s, strlen(s), 5000);
}

static char *dup_string(const cJSON *o, const char *name) {
        const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
        return s ? strdup(s) : NULL;
}

#define SETUP_MAX_FDS 64

/* Mount fds received with the setup packet; taken ones are -EBADF. */
typedef struct recv_fds {
        int fd[SETUP_MAX_FDS];
        size_t n;
} recv_fds;

static void recv_fds_close(recv_fds *f) {
        for (size_t i = 0; i < f->n; i++)
                if (f->fd[i] >= 0)
                        close(f->fd[i]);
        f->n = 0;
}

/* setup → core_rootfs_config. Every path is required once "rootfs" is set.
 * A bind's "fd" is an index into `fds`, taken by the config. */
static int parse_rootfs(const cJSON *setup, core_rootfs_config *cfg, recv_fds *fds, sb_error **ret_err) {
        cfg->rootfs = dup_string(setup, "rootfs");
        cfg->lower = dup_string(setup, "lower");
        cfg->upper = dup_string(setup, "upper");
        cfg->work = dup_string(setup, "work");
        cfg->hostname = dup_string(setup, "hostname");
        const cJSON *tmp = cJSON_GetObjectItemCaseSensitive(setup, "tmpSize");
        cfg->tmp_size = cJSON_IsNumber(tmp) && tmp->valuedouble > 0 ? (uint64_t)tmp->valuedouble : 0;
        if (!cfg->rootfs || !cfg->lower || !cfg->upper || !cfg->work)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "setup: \"rootfs\", \"lower\", \"upper\" and \"work\" must be strings");
        const cJSON *binds = cJSON_GetObjectItemCaseSensitive(setup, "binds");
        int n = cJSON_GetArraySize(binds);
        if (binds && !cJSON_IsNull(binds) && !cJSON_IsArray(binds))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "setup: \"binds\" must be an array");
        if (n > 0 && !(cfg->binds = calloc((size_t)n, sizeof(core_bind))))
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "setup: out of memory");
        for (int i = 0; i < n; i++) {
                const cJSON *b = cJSON_GetArrayItem(binds, i);
                core_bind *cb = &cfg->binds[cfg->n_binds++];
                cb->src = dup_string(b, "src");
                cb->dst = dup_string(b, "dst");
                cb->ro = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(b, "ro"));
                cb->mkdir = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "mkdir"));
                const cJSON *fd = cJSON_GetObjectItemCaseSensitive(b, "fd");
                cb->fd = -EBADF;
                if (cJSON_IsNumber(fd)) {
                        if (fd->valueint < 0 || (size_t)fd->valueint >= fds->n || fds->fd[fd->valueint] < 0)
                                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "setup: binds[%d].fd is not a received fd", i);
                        cb->fd = TAKE_FD(fds->fd[fd->valueint]);
                }
                if (!cb->src || !cb->dst)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                            "setup: binds[%d] needs \"src\" and \"dst\" strings", i);
        }
        /* Host mounts (sandbox.create "mounts"): each a received tree. */
        const cJSON *mounts = cJSON_GetObjectItemCaseSensitive(setup, "mounts");
        int nm = cJSON_GetArraySize(mounts);
        if (nm > 0 && !(cfg->mounts = calloc((size_t)nm, sizeof(core_bind))))
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "setup: out of memory");
        for (int i = 0; i < nm; i++) {
                const cJSON *mt = cJSON_GetArrayItem(mounts, i);
                const cJSON *fd = cJSON_GetObjectItemCaseSensitive(mt, "fd");
                core_bind *cb = &cfg->mounts[cfg->n_mounts++];
                cb->fd = -EBADF;
                cb->dst = dup_string(mt, "destination");
                if (!cb->dst || !cJSON_IsNumber(fd) || fd->valueint < 0 || (size_t)fd->valueint >= fds->n ||
                    fds->fd[fd->valueint] < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                            "setup: mounts[%d] needs \"destination\" and a received \"fd\"", i);
                cb->fd = TAKE_FD(fds->fd[fd->valueint]);
        }
        return 0;
}

static int setup_network(const cJSON *setup, sb_error **ret_err) {
        /* A pod's namespace (sandbox.create network.netns): CNI configured
         * it and it is not ours to change (its sysctls belong to the host). */
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(setup, "joinedNetns")))
                return 0;
        core_net_pool pool = { .prefix = 16 };
        const char *base = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(setup, "poolBase"));
        if (inet_pton(AF_INET, base ? base : "10.201.0.0", &pool.base) != 1)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "setup: \"poolBase\" is not an IPv4 address");
        const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(setup, "poolPrefix");
        if (cJSON_IsNumber(prefix))
                pool.prefix = (unsigned)prefix->valueint;
        const char *base6 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(setup, "poolBase6"));
        const cJSON *prefix6 = cJSON_GetObjectItemCaseSensitive(setup, "poolPrefix6");
        if (base6) {
                if (inet_pton(AF_INET6, base6, &pool.base6) != 1 || !cJSON_IsNumber(prefix6) ||
                    prefix6->valueint < 8 || prefix6->valueint > 120)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                            "setup: \"poolBase6\"/\"poolPrefix6\" is not an IPv6 pool");
                pool.prefix6 = (unsigned)prefix6->valueint;
        }
        const cJSON *slot = cJSON_GetObjectItemCaseSensitive(setup, "netSlot");
        int s = cJSON_IsNumber(slot) ? slot->valueint : -1;
        int r = core_net_configure_inside(&pool, s >= 0 ? (unsigned)s : 0, s >= 0, ret_err);
        return r < 0 ? sb_error_prefix(ret_err, "configure network") : 0;
}

/* setup "env" {"K":"V"} → NULL-terminated "K=V" array, the base of every
 * command's environment. */
static int setup_env(init_agent *a, const cJSON *setup, sb_error **ret_err) {
        const cJSON *env = cJSON_GetObjectItemCaseSensitive(setup, "env");
        if (env && !cJSON_IsNull(env) && !cJSON_IsObject(env))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "setup: \"env\" must be an object");
        a->base_env = calloc((size_t)cJSON_GetArraySize(env) + 1, sizeof(char *));
        if (!a->base_env)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "setup: out of memory");
        size_t n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, env) {
                if (!cJSON_IsString(it) || !*it->string || strchr(it->string, '='))
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                            "setup: env values must be strings with names without '='");
                if (asprintf(&a->base_env[n], "%s=%s", it->string, it->valuestring) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "setup: out of memory");
                n++;
        }
        return 0;
}

/* Startup, in order: the setup packet; a cgroup namespace (init already sits
 * in the sandbox's cgroup, so that cgroup becomes the root of what the
 * sandbox sees); the network; the root filesystem ("rootfs": null skips
 * it, a mode for tests that run init on the host's filesystem); the base
 * environment; no supplementary groups (fs operations use fsuid 1000 and
 * must not carry root's groups). */
/* The setup packet into buf; its fds (SCM_RIGHTS, close-on-exec) into
 * *fds. A user-namespace sandbox's mounts come that way: the root overlay
 * first, then one per bind ("fd": its index); init cannot make them. */
static ssize_t recv_setup(int sock, char *buf, size_t size, recv_fds *fds, sb_error **ret_err) {
        union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * SETUP_MAX_FDS)]; } ctl;
        struct iovec iov = { .iov_base = buf, .iov_len = size };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
        ssize_t n;
        do
                n = recvmsg(sock, &mh, MSG_TRUNC | MSG_CMSG_CLOEXEC);
        while (n < 0 && errno == EINTR);
        for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && fds->n == 0) {
                        fds->n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        memcpy(fds->fd, CMSG_DATA(c), fds->n * sizeof(int));
                }
        if (n > 0 && (mh.msg_flags & MSG_CTRUNC))
                return sb_error_set(ret_err, -EBADMSG, NULL, NULL, "setup: too many file descriptors");
        if (n <= 0 || n > AGENT_MAX_PACKET)
                return sb_error_set(ret_err, n < 0 ? negative_errno() : -EBADMSG, NULL, NULL,
                                    "setup: no valid setup packet");
        return n;
}

static int setup(init_agent *a, sb_error **ret_err) {
        static char buf[AGENT_MAX_PACKET + 1];
        _cleanup_(recv_fds_close) recv_fds fds = { .n = 0 };
        ssize_t n = recv_setup(a->sock, buf, sizeof(buf), &fds, ret_err);
        if (n < 0)
                return (int)n;
        _cleanup_(cJSON_Deletep) cJSON *req = cJSON_ParseWithLength(buf, (size_t)n);
        const char *op = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "op"));
        if (!op || !streq(op, "setup"))
                return sb_error_set(ret_err, -EBADMSG, NULL, NULL, "setup: first packet must be {\"op\":\"setup\"}");
        if (unshare(CLONE_NEWCGROUP) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "setup: unshare cgroup namespace: %m");
        /* The network first: its sysctls (disable_ipv6) are written through
         * /proc/sys, which is read-only once the sandbox's /proc is mounted. */
        archive_paths_take(req);
        int r = setup_network(req, ret_err);
        if (r < 0)
                return r;
        const cJSON *rootfs = cJSON_GetObjectItemCaseSensitive(req, "rootfs");
        if (rootfs && !cJSON_IsNull(rootfs)) {
                _cleanup_(core_rootfs_config_clear) core_rootfs_config cfg = { .overlay_fd = -EBADF,
                                                                               .before_pivot = archive_files_open };
                cfg.userns = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "userns"));
                if (cfg.userns && fds.n == 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL, "setup: \"userns\" needs the overlay mount fd");
                if (cfg.userns)
                        cfg.overlay_fd = TAKE_FD(fds.fd[0]);
                r = parse_rootfs(req, &cfg, &fds, ret_err);
                if (r >= 0)
                        r = core_rootfs_setup(&cfg, ret_err);
                if (r < 0)
                        return r;
        }
        /* Without a root to change the files are opened here. */
        archive_files_open();
        /* After pivot_root: the account files are the sandbox's own. */
        r = init_user_setup(req, rootfs && !cJSON_IsNull(rootfs), ret_err);
        if (r < 0)
                return r;
        r = setup_env(a, req, ret_err);
        if (r < 0)
                return r;
        if (setgroups(0, NULL) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "setup: setgroups: %m");
        /* Plain mode: ids inside are host ids, so nothing here may take an
         * id but root's and the sandbox user's (another host user's per-uid
         * quotas are not the sandbox's to use up; docs/SECURITY.md). On init
         * itself, before any command: every process of the sandbox forks
         * from it. */
        if (rootfs && !cJSON_IsNull(rootfs) && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "userns")) &&
            (r = core_seccomp_install_ids(init_user_uid, init_user_gid)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "setup: seccomp filter of the sandbox's ids: %s",
                                    strerror(-r));
        return 0;
}

/* SIGCHLD, SIGTERM and SIGINT through a signalfd. As PID 1 of its namespace
 * init gets only the signals it handles; blocking them here and reading
 * them from the loop keeps every handler out of async context. SIGPIPE is
 * ignored: a command that closes its stdin must not kill init. These are
 * init's last changes of a disposition: command.c (cmd_spawn_state) takes
 * the set a command's child resets once, after this. */
static int setup_signals(init_agent *a) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
                return negative_errno();
        signal(SIGPIPE, SIG_IGN);
        a->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        return a->sigfd < 0 ? negative_errno() : 0;
}

static void on_signals(init_agent *a) {
        struct signalfd_siginfo si;
        while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
                        agent_begin_stop(a, 0);
        }
        /* SIGCHLD coalesces; one reap loop covers every exited child. */
        cmd_reap(a);
}

static int serve(init_agent *a) {
        struct epoll_event evs[64];
        for (;;) {
                int timeout = -1;
                if (a->stopping) {
                        cmd_reap(a);
                        uint64_t now = core_monotonic_ms();
                        if (a->children_gone || now >= a->stop_deadline_ms)
                                return 0;
                        timeout = (int)(a->stop_deadline_ms - now > INT_MAX ? INT_MAX : a->stop_deadline_ms - now);
                }
                int n = epoll_wait(a->epfd, evs, (int)ELEMENTSOF(evs), timeout);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return log_error_errno(negative_errno(), "epoll_wait: %m");
                for (int i = 0; i < n; i++) {
                        init_watch *w = evs[i].data.ptr;
                        if (w->kind == WATCH_SOCKET)
                                agent_on_socket(a, evs[i].events);
                        else if (w->kind == WATCH_SIGNAL)
                                on_signals(a);
                        else if (w->kind == WATCH_LISTEN)
                                agent_on_listen(a);
                        else if (w->kind == WATCH_FSWATCH)
                                init_watch_on_event(a, w);
                        else
                                cmd_on_event(a, w, evs[i].events);
                }
                cmd_free_dead(a);
                init_watch_free_dead();
        }
}

/* The end of a stop: SIGKILL to everything left, reap it all (waitid with
 * WNOWAIT blocks without consuming a status that cmd_reap must record),
 * send the last exit events, and exit. */
_noreturn_ static void finish(init_agent *a) {
        (void)kill(-1, SIGKILL);
        for (;;) {
                cmd_reap(a);
                if (a->children_gone)
                        break;
                siginfo_t si;
                if (waitid(P_ALL, 0, &si, WEXITED | WNOWAIT) < 0 && errno == ECHILD)
                        break;
        }
        cmd_finish_all(a);
        cmd_free_dead(a);
        if (!a->sock_dead)
                for (init_buf *b = a->send_queue.head; b; b = b->next)
                        if (send_blocking(a->sock, b->data, b->len, 2000) < 0)
                                break;
        queue_clear(&a->send_queue);
        _exit(0);
}

/* AGENT_LISTEN_FD, when sandboxd passed one (a listening Unix SOCK_SEQPACKET
 * socket), is how a restarted sandboxd reconnects (agent.h); the uid of the
 * peer of AGENT_FD, as seen from here (0, or the overflow uid inside a user
 * namespace where host root is unmapped), is the uid a reconnecting peer
 * must have. Close-on-exec: no command may inherit it. */
static void take_listen_fd(init_agent *a) {
        int type = 0, acc = 0;
        socklen_t tl = sizeof(type), al = sizeof(acc);
        struct ucred cred;
        socklen_t cl = sizeof(cred);
        if (getsockopt(AGENT_LISTEN_FD, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET ||
            getsockopt(AGENT_LISTEN_FD, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0 || !acc ||
            getsockopt(a->sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0) {
                (void)close(AGENT_LISTEN_FD);
                return;
        }
        (void)fcntl(AGENT_LISTEN_FD, F_SETFD, FD_CLOEXEC);
        (void)fcntl(AGENT_LISTEN_FD, F_SETFL, O_NONBLOCK);
        a->listen_fd = AGENT_LISTEN_FD;
        a->peer_uid = cred.uid;
}

int main(int argc, char **argv) {
        log_set_ident("sandbox-init");
        /* setns stays open to init and is refused in each child after it
         * joined its container (libcore/seccomp.h outer mode). */
        core_seccomp_set_outer(true);
        init_agent a = { .sock = AGENT_FD, .epfd = -EBADF, .sigfd = -EBADF, .listen_fd = -EBADF };
        a.w_listen = (init_watch){ WATCH_LISTEN, NULL };
        a.w_sock = (init_watch){ WATCH_SOCKET, NULL };
        a.w_sig = (init_watch){ WATCH_SIGNAL, NULL };

        int type = 0;
        socklen_t tl = sizeof(type);
        if (getsockopt(a.sock, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_SEQPACKET)
                return log_error("fd %d is not the agent socket", AGENT_FD), 1;
        /* kill(-1) in the stop sequence reaches every process the caller may
         * signal: from PID 1 of a PID namespace that is the sandbox, from
         * anywhere else it would be the host. */
        if (getpid() != 1) {
                send_setup_reply(a.sock, "sandbox-init must run as PID 1 of a new PID namespace");
                return 1;
        }
        (void)fcntl(a.sock, F_SETFD, FD_CLOEXEC);
        take_listen_fd(&a);
        /* The OOM killer picks the largest task of the session's memory
         * cgroup; tmpfs pages (/tmp, /dev/shm) count against the cgroup but
         * no task, so without this it picks init and the whole session dies.
         * Commands reset it to 0 before exec (command.c). */
        if (core_write_string("/proc/self/oom_score_adj", "-1000") < 0)
                log_debug("cannot set oom_score_adj of sandbox-init: %m");
        /* Room for whole packets of AGENT_MAX_PACKET and bursts of output. */
        int sndbuf = 4 * 1024 * 1024;
        (void)setsockopt(a.sock, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
        umask(022);

        _cleanup_error_ sb_error *err = NULL;
        int r = setup(&a, &err);
        if (r < 0) {
                send_setup_reply(a.sock, err ? err->message : strerror(-r));
                return 1;
        }
        if (setup_signals(&a) < 0 || (a.epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
                send_setup_reply(a.sock, "setup: signalfd or epoll failed");
                return 1;
        }
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &a.w_sock };
        struct epoll_event evs = { .events = EPOLLIN, .data.ptr = &a.w_sig };
        if (epoll_ctl(a.epfd, EPOLL_CTL_ADD, a.sock, &ev) < 0 ||
            epoll_ctl(a.epfd, EPOLL_CTL_ADD, a.sigfd, &evs) < 0) {
                send_setup_reply(a.sock, "setup: epoll_ctl failed");
                return 1;
        }
        struct epoll_event evl = { .events = EPOLLIN, .data.ptr = &a.w_listen };
        if (a.listen_fd >= 0 && epoll_ctl(a.epfd, EPOLL_CTL_ADD, a.listen_fd, &evl) < 0) {
                send_setup_reply(a.sock, "setup: epoll_ctl failed");
                return 1;
        }
        send_setup_reply(a.sock, NULL);
        /* After the answer (the fork is off the create's path), before the
         * first request is read and so before any seccomp filter is on
         * init (its first command puts one there): the helper that makes
         * containers' mount namespaces needs the mount calls
         * (container.c). Without it, containers are refused; the sandbox
         * works as before. */
        const int helper_close[] = { a.sock, a.listen_fd, a.sigfd, a.epfd };
        r = init_ctr_helper_start(helper_close, ELEMENTSOF(helper_close));
        if (r < 0)
                log_debug("container helper: %s", strerror(-r));
        (void)serve(&a);
        finish(&a);
}
