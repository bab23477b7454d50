/* Live restore (DESIGN §2, §7): the per-session listening socket that a
 * restarted sandboxd reconnects to sandbox-init through, the session record
 * (<runDir>/sandboxes/<name>/session.json) that says which process is the
 * session's init, and the checks that a recorded process is still that one.
 * The adoption itself is session_adopt() in session.c.
 *
 * Helper records (<runDir>/helpers/<pid>.json, {pid, startTime, owner}):
 * one for every helper process the daemon starts (each session's
 * sandbox-netd, a runtime bootstrap's debootstrap), written
 * the moment it is spawned, before anything else is done or recorded, and
 * removed once it is reaped. A daemon killed at any point after the spawn
 * leaves the record, and the next one ends every recorded helper that
 * still lives (by pidfd, checked against the start time: never by name)
 * before it adopts a session: helpers are always started anew then. */
#include <arpa/inet.h>
#include <dirent.h>
#include <limits.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <poll.h>
#include <unistd.h>
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/metrics.h"

#define AGENT_SOCK_NAME "agent.sock"
#define RECORD_NAME RESTORE_RECORD_NAME

/* sun_path through the directory fd: a run dir path may be longer than the
 * 108 bytes of sun_path. */
static void sock_addr(int dfd, struct sockaddr_un *sa) {
        *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
        snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/" AGENT_SOCK_NAME, dfd);
}

int restore_listen(const char *run_dir, sb_error **ret_err) {
        int r = core_mkdir_p(run_dir, 0700);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "create %s: %s", run_dir, strerror(-r));
        _cleanup_close_ int dfd = open(run_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (dfd < 0 || fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "agent socket in %s: %m", run_dir);
        struct sockaddr_un sa;
        sock_addr(dfd, &sa);
        (void)unlinkat(dfd, AGENT_SOCK_NAME, 0);
        /* Root only: the run directory is 0700 and the socket file 0600
         * (init also checks the peer's uid); the sandbox never sees the
         * path, which is outside its mount namespace. Not umask(2): it is
         * per process, and worker threads bind concurrently (a race there
         * once left the daemon's umask at 0177). Connecting needs write
         * permission on the file, which the default mode never gives to
         * others, so the moment before the chmod opens nothing. */
        r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        if (r >= 0)
                r = fchmodat(dfd, AGENT_SOCK_NAME, 0600, 0);
        if (r < 0 || listen(fd, 4) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "bind %s/%s: %m", run_dir,
                                    AGENT_SOCK_NAME);
        return TAKE_FD(fd);
}

int restore_connect(const char *run_dir) {
        _cleanup_close_ int dfd = open(run_dir, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        if (dfd < 0)
                return negative_errno();
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return negative_errno();
        struct sockaddr_un sa;
        sock_addr(dfd, &sa);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return negative_errno();
        return TAKE_FD(fd);
}

uint64_t restore_proc_start_time(pid_t pid) {
        char path[64];
        _cleanup_free_ char *data = NULL;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        if (pid <= 0 || core_read_file(path, 4096, &data, NULL) < 0)
                return 0;
        /* comm may hold spaces and ')': fields restart after the last ')'. */
        char *p = strrchr(data, ')');
        if (!p)
                return 0;
        /* Field 3 (state) follows; starttime is field 22, 19 further on. */
        p += 2;
        for (int i = 0; i < 19 && p; i++) {
                p = strchr(p, ' ');
                if (p)
                        p++;
        }
        return p ? strtoull(p, NULL, 10) : 0;
}

int restore_pidfd(pid_t pid, uint64_t start_time) {
        if (pid <= 0 || start_time == 0)
                return -ESRCH;
        int fd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
                return negative_errno();
        /* Checked after the pidfd is held: from here the pid cannot be
         * reused under us, so a match means the pidfd is that process. */
        if (restore_proc_start_time(pid) != start_time) {
                close(fd);
                return -ESRCH;
        }
        return fd;
}

void restore_kill_recorded(pid_t pid, uint64_t start_time, const char *comm) {
        _cleanup_close_ int fd = restore_pidfd(pid, start_time);
        if (fd < 0)
                return;
        char path[64];
        _cleanup_free_ char *name = NULL;
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
        if (core_read_file(path, 256, &name, NULL) < 0 || strncmp(name, comm, strlen(comm)) != 0)
                return;
        syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
        /* Not our child: the pidfd turns readable when it has exited, and
         * then its sockets (the DNS port) are free for its successor. */
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void)poll(&p, 1, 2000);
}

int restore_save_record(const session *s) {
        const sandbox *sb = s->sb;
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return -ENOMEM;
        cJSON_AddStringToObject(o, "id", s->id);
        cJSON_AddNumberToObject(o, "pid", s->pid);
        cJSON_AddNumberToObject(o, "startTime", (double)restore_proc_start_time(s->pid));
        cJSON_AddNumberToObject(o, "slot", s->net_slot);
        char gw[INET_ADDRSTRLEN] = "";
        inet_ntop(AF_INET, &s->gateway, gw, sizeof(gw));
        cJSON_AddStringToObject(o, "gateway", gw);
        cJSON_AddNumberToObject(o, "netdPid", s->netd_pid);
        cJSON_AddNumberToObject(o, "netdStartTime", (double)restore_proc_start_time(s->netd_pid));
        cJSON_AddNumberToObject(o, "netdRestarts", s->netd_restarts);
        cJSON_AddNumberToObject(o, "startedMs", (double)s->started_ms);
        cJSON_AddNumberToObject(o, "expiresMs", (double)sb->expires_ms);
        cJSON_AddBoolToObject(o, "pauseOnTimeout", s->pause_on_timeout);
        cJSON_AddBoolToObject(o, "proxyCa", s->proxy_ca);
        cJSON_AddBoolToObject(o, "sandboxTrustsCa", s->sandbox_trusts_ca);
        cJSON_AddBoolToObject(o, "keepsWindows", s->keeps_windows);
        if (s->runtime_version[0])
                cJSON_AddStringToObject(o, "runtimeVersion", s->runtime_version);
        /* A session taken from the warm pool: its cgroup's key (not the name). */
        if (s->cgroup_name[0])
                cJSON_AddStringToObject(o, "cgroup", s->cgroup_name);
        metrics_usage_base_to_json(s, o);
        _cleanup_free_ char *text = cJSON_PrintUnformatted(o);
        _cleanup_free_ char *path = NULL;
        cJSON_Delete(o);
        if (!text || asprintf(&path, "%s/" RECORD_NAME, sb->run_dir) < 0)
                return -ENOMEM;
        /* Written whole and renamed into place: a daemon killed halfway
         * leaves the old record or the new one, never a torn one. */
        int r = core_write_file_replace(path, text, strlen(text), 0600);
        if (r < 0)
                log_warning_errno(r, "sandbox '%s': write %s (the session will not survive a daemon restart): %m",
                                  sb->name, path);
        return r;
}

cJSON *restore_load_record(const char *run_dir) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        if (asprintf(&path, "%s/" RECORD_NAME, run_dir) < 0 || core_read_file(path, 1 << 16, &text, NULL) < 0)
                return NULL;
        cJSON *o = cJSON_Parse(text);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return NULL;
        }
        return o;
}

static char *helpers_dir;

static int helper_path(pid_t pid, char *buf, size_t size) {
        if (!helpers_dir)
                return -ENOENT;
        return snprintf(buf, size, "%s/%d.json", helpers_dir, (int)pid) < (int)size ? 0 : -ENAMETOOLONG;
}

int restore_helper_record(pid_t pid, const char *owner) {
        char path[PATH_MAX];
        int r = helper_path(pid, path, sizeof(path));
        if (r < 0)
                return r;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "pid", pid);
        cJSON_AddNumberToObject(o, "startTime", (double)restore_proc_start_time(pid));
        cJSON_AddStringToObject(o, "owner", owner);
        _cleanup_free_ char *text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!text)
                return -ENOMEM;
        r = core_write_file_replace(path, text, strlen(text), 0600);
        if (r < 0)
                log_warning_errno(r, "write %s (a daemon killed now would leave this helper running): %m", path);
        return r;
}

void restore_helper_forget(pid_t pid) {
        char path[PATH_MAX];
        if (pid > 0 && helper_path(pid, path, sizeof(path)) >= 0)
                (void)unlink(path);
}

int restore_helpers_sweep(const char *run_dir) {
        free(helpers_dir);
        helpers_dir = NULL;
        if (asprintf(&helpers_dir, "%s/helpers", run_dir) < 0) {
                helpers_dir = NULL;
                return -ENOMEM;
        }
        int r = core_mkdir_p(helpers_dir, 0700);
        if (r < 0)
                return r;
        _cleanup_closedir_ DIR *d = opendir(helpers_dir);
        struct dirent *de;
        int n = 0;
        while (d && (de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char path[PATH_MAX];
                _cleanup_free_ char *text = NULL;
                if (snprintf(path, sizeof(path), "%s/%s", helpers_dir, de->d_name) >= (int)sizeof(path))
                        continue;
                cJSON *o = core_read_file(path, 4096, &text, NULL) >= 0 ? cJSON_Parse(text) : NULL;
                const cJSON *pid = cJSON_GetObjectItem(o, "pid"), *st = cJSON_GetObjectItem(o, "startTime");
                if (cJSON_IsNumber(pid) && cJSON_IsNumber(st) && pid->valuedouble > 0 && st->valuedouble > 0) {
                        _cleanup_close_ int fd = restore_pidfd((pid_t)pid->valuedouble, (uint64_t)st->valuedouble);
                        /* A pidfd is readable once its process has exited (a
                         * netd that saw the daemon go exits by itself). */
                        struct pollfd gone = {.fd = fd, .events = POLLIN};
                        if (fd >= 0 && poll(&gone, 1, 0) == 0) {
                                const char *owner = cJSON_GetStringValue(cJSON_GetObjectItem(o, "owner"));
                                log_info("ending helper pid %d (%s) that no session owns (left by the last "
                                         "sandboxd)", (int)pid->valuedouble, owner ? owner : "?");
                                syscall(SYS_pidfd_send_signal, fd, SIGKILL, NULL, 0);
                                /* Not our child: readable once it has exited, and its
                                 * sockets (the gateway's DNS port) are free again. */
                                struct pollfd p = {.fd = fd, .events = POLLIN};
                                (void)poll(&p, 1, 2000);
                                n++;
                        }
                }
                cJSON_Delete(o);
                (void)unlink(path);
        }
        return n;
}
