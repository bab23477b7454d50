/* Directory copies of the agent protocol (libcore/agent.h "writeTar" and
 * "readTar"): sandbox-init forks a child per copy that becomes the sandbox
 * user (or root for sudo) with the confinement of a command (capabilities
 * of its uid, no_new_privs, the seccomp filter), enters the directory inside
 * the sandbox and unpacks the tar stream from, or packs the tree into, the
 * pipe sandboxd handed over with the request (SCM_RIGHTS). The rules for
 * members are libcore/tarstream.h's. The child reports one line on a status
 * pipe; when it is reaped init answers the request. */
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli/lazy/archive.h"
#include "libcore/agent.h"
#include "libcore/caps.h"
#include "libcore/init/init.h"
#include "libcore/log.h"
#include "libcore/seccomp.h"
#include "libcore/tarstream.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

typedef struct tar_job {
        struct tar_job *next;
        pid_t pid;
        double req;
        int status_fd; /* read end of the child's status pipe */
        char *action;
        int stopped;   /* the signal that stopped it, once ended for it */
} tar_job;

static tar_job *jobs;

static void send_reply(init_agent *a, double req, int err, const char *message, uint64_t entries,
                       uint64_t bytes) {
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "fs");
        cJSON_AddNumberToObject(ev, "req", req);
        if (err) {
                cJSON_AddNumberToObject(ev, "errno", err);
                cJSON_AddStringToObject(ev, "message", message && *message ? message : strerror(err));
        } else {
                cJSON *res = cJSON_AddObjectToObject(ev, "result");
                cJSON_AddNumberToObject(res, "entries", (double)entries);
                cJSON_AddNumberToObject(res, "bytes", (double)bytes);
        }
        (void)agent_send(a, ev);
}

/* mkdir -p of an absolute path as the caller, then chdir into it, each step
 * through openat2(RESOLVE_NO_MAGICLINKS) so that /proc/self/fd/N and the
 * like cannot name a directory of another process. */
static int enter_dir(const char *path, bool create) {
        struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC, .resolve = RESOLVE_NO_MAGICLINKS };
        int fd = (int)syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
        if (fd < 0)
                return negative_errno();
        for (const char *p = path; *p;) {
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                const char *e = strchrnul(p, '/');
                char comp[256];
                if ((size_t)(e - p) >= sizeof(comp)) {
                        close(fd);
                        return -ENAMETOOLONG;
                }
                memcpy(comp, p, (size_t)(e - p));
                comp[e - p] = 0;
                if (create && mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
                        int r = negative_errno();
                        close(fd);
                        return r;
                }
                int nfd = (int)syscall(SYS_openat2, fd, comp, &how, sizeof(how));
                int r = negative_errno();
                close(fd);
                if (nfd < 0)
                        return r;
                fd = nfd;
                p = e;
        }
        int r = fchdir(fd) < 0 ? negative_errno() : 0;
        close(fd);
        return r;
}

/* Closes every fd but 0-2, keep1 and keep2. */
static void close_all_but(int keep1, int keep2) {
        int lo = keep1 < keep2 ? keep1 : keep2, hi = keep1 < keep2 ? keep2 : keep1;
        if (lo > 3)
                (void)close_range(3, (unsigned)lo - 1, 0);
        if (hi > lo + 1)
                (void)close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
        (void)close_range((unsigned)hi + 1, ~0U, 0);
}

int init_child_confine(uid_t uid, gid_t gid, int keep1, int keep2, const core_seccomp *filter) {
        int r = 0;
        close_all_but(keep1, keep2);
        uint64_t keep = core_caps_for_uid(uid);
        /* Not dumpable before the uid change: a child running as root (sudo)
         * must not be ptraced by the sandbox's root before it is confined,
         * and this memory is a copy of init's. */
        if (core_write_string("/proc/self/oom_score_adj", "0") < 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 ||
            (r = core_caps_bound_known(keep, core_caps_bounding())) < 0)
                return r < 0 ? r : negative_errno();
        if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
            syscall(SYS_setresuid, uid, uid, uid) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return negative_errno();
        core_signals_reset();
        umask(022);
        r = core_caps_set(keep);
        if (r >= 0)
                r = core_seccomp_install(filter);
        return r < 0 ? r : 0;
}

static void report(int status_fd, int err, const char *message, const tarstream_stats *st) {
        char line[1200];
        int n = snprintf(line, sizeof(line), "%d %llu %llu %s", err, (unsigned long long)st->entries,
                         (unsigned long long)st->bytes, message ? message : "");
        if (n > 0)
                (void)!write(status_fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* In the child, single-threaded after fork: the confinement of a command
 * (command.c child_main), in its order, then the copy. Never returns. */
_noreturn_ static void child_run(const char *action, const char *path, uid_t uid, gid_t gid, int data_fd,
                                 int status_fd, const core_seccomp *filter) {
        tarstream_stats st = {};
        char msg[1024] = "";
        /* libarchive from the files init opened before its root changed
         * (main.c), while this child still may chroot: before the
         * confinement, which closes those fds. */
        if (lazy_archive_load() < 0) {
                snprintf(msg, sizeof(msg), "fs.%s %s: libarchive could not be loaded: %s", action, path,
                         lazy_archive_error());
                report(status_fd, ENOENT, msg, &st);
                _exit(1);
        }
        int r = init_child_confine(uid, gid, data_fd, status_fd, filter);
        if (r < 0) {
                snprintf(msg, sizeof(msg), "fs.%s %s: confine the copy: %s", action, path, strerror(-r));
                report(status_fd, -r, msg, &st);
                _exit(1);
        }
        bool unpack = streq(action, "writeTar");
        if ((r = enter_dir(path, unpack)) < 0) {
                snprintf(msg, sizeof(msg), "fs.%s %s: %s", action, path, strerror(-r));
                report(status_fd, -r, msg, &st);
                _exit(1);
        }
        char err[900] = "";
        if (unpack) {
                struct archive *in = tarstream_reader_new();
                if (!in || archive_read_open_fd(in, data_fd, TARSTREAM_BLOCK) != ARCHIVE_OK) {
                        snprintf(err, sizeof(err), "%s", in ? archive_error_string(in) ?: "not a tar stream" : "out of memory");
                        r = -EINVAL;
                } else
                        r = tarstream_unpack(in, &st, err, sizeof(err));
        } else {
                struct archive *out = tarstream_writer_new();
                if (!out || archive_write_open_fd(out, data_fd) != ARCHIVE_OK) {
                        snprintf(err, sizeof(err), "out of memory");
                        r = -ENOMEM;
                } else {
                        r = tarstream_pack(out, ".", &st, err, sizeof(err));
                        if (archive_write_close(out) != ARCHIVE_OK && r == 0) {
                                snprintf(err, sizeof(err), "%s", archive_error_string(out) ?: "write error");
                                r = -EIO;
                        }
                }
        }
        if (r < 0)
                snprintf(msg, sizeof(msg), "fs.%s %s: %s", action, path, err);
        report(status_fd, r < 0 ? -r : 0, msg, &st);
        _exit(r < 0 ? 1 : 0);
}

int init_tar_start(init_agent *a, const cJSON *req, int data_fd) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(req, "req");
        const char *action = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "action"));
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "path"));
        bool root = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "sudo"));
        if (!cJSON_IsNumber(rid))
                return -EINVAL;
        if (data_fd < 0 || !p || !*p || strlen(p) >= 4096) {
                send_reply(a, rid->valuedouble, EINVAL, "fs: a copy needs a non-empty \"path\" and a pipe", 0, 0);
                return 0;
        }
        _cleanup_free_ char *path = init_fs_path(p, INIT_WORKSPACE);
        const core_seccomp *filter = NULL;
        int status[2] = { -EBADF, -EBADF };
        tar_job *j = calloc(1, sizeof(*j));
        int r = !path || !j ? -ENOMEM : 0;
        /* No filter, no copy (fail closed), as for a command. */
        if (r >= 0)
                r = core_seccomp_default(&filter, NULL);
        if (r >= 0 && pipe2(status, O_CLOEXEC | O_NONBLOCK) < 0)
                r = negative_errno();
        pid_t pid = r >= 0 ? fork() : -1;
        if (r >= 0 && pid < 0)
                r = negative_errno();
        if (pid == 0)
                child_run(action, path, root ? 0 : init_user_uid, root ? 0 : init_user_gid, data_fd, status[1],
                          filter);
        if (status[1] >= 0)
                close(status[1]);
        if (r < 0) {
                if (status[0] >= 0)
                        close(status[0]);
                free(j);
                send_reply(a, rid->valuedouble, -r, NULL, 0, 0);
                return 0;
        }
        j->pid = pid;
        j->req = rid->valuedouble;
        j->status_fd = status[0];
        j->action = strdup(action);
        j->next = jobs;
        jobs = j;
        return 0;
}

void init_tar_end_stopped(void) {
        for (tar_job *j = jobs; j; j = j->next) {
                int sig = j->stopped ? 0 : init_child_stopped(j->pid);
                if (sig > 0) {
                        j->stopped = sig;
                        (void)kill(j->pid, SIGKILL);
                }
        }
}

bool init_tar_reaped(init_agent *a, pid_t pid, int wstatus) {
        for (tar_job **pp = &jobs; *pp; pp = &(*pp)->next) {
                tar_job *j = *pp;
                if (j->pid != pid)
                        continue;
                *pp = j->next;
                char line[1200];
                ssize_t n = read(j->status_fd, line, sizeof(line) - 1);
                close(j->status_fd);
                int err = 0, off = 0;
                unsigned long long entries = 0, bytes = 0;
                if (j->stopped && n <= 0) {
                        err = EINTR;
                        snprintf(line, sizeof(line), "fs.%s: a process in the sandbox stopped the copy (signal %s); "
                                 "it was ended, part of it may be done", j->action ? j->action : "copy",
                                 sigabbrev_np(j->stopped) ?: "?");
                        off = 0;
                } else if (n <= 0 || (line[n] = 0, sscanf(line, "%d %llu %llu %n", &err, &entries, &bytes, &off) < 3)) {
                        err = EIO;
                        snprintf(line, sizeof(line), "fs.%s: the copy ended without a report (%s %d)",
                                 j->action ? j->action : "copy", WIFSIGNALED(wstatus) ? "signal" : "status",
                                 WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : WEXITSTATUS(wstatus));
                        off = 0;
                }
                if (!a->offline)
                        send_reply(a, j->req, err, line + off, entries, bytes);
                free(j->action);
                free(j);
                return true;
        }
        return false;
}
