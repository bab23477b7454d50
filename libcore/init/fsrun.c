/* The file operations of fsops.c run in a child of sandbox-init confined as
 * a command of the sandbox user (init_child_confine), never in init (PID 1)
 * itself; the child sends its answer back over a pipe. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "libcore/agent.h"
#include "libcore/init/init.h"
#include "libcore/seccomp.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* In the child: confine, run the request, write {"result":R} or
 * {"errno":N,"message":S} to out_fd. Never returns. */
_noreturn_ static void fs_child(const cJSON *req, const char *workspace, int out_fd, const core_seccomp *filter) {
        cJSON *result = NULL;
        char *message = NULL;
        /* sudo: as root, with a command's confinement all the same (as
         * fs.writeTar's sudo, tar.c). */
        bool root = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "sudo"));
        int r = init_child_confine(root ? 0 : init_user_uid, root ? 0 : init_user_gid, out_fd, out_fd, filter);
        if (r < 0) {
                const char *action = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "action"));
                if (asprintf(&message, "fs.%s: confine the file operation: %s", action ? action : "?",
                             strerror(-r)) < 0)
                        message = NULL;
        } else
                r = init_fs_handle(req, workspace, &result, &message);
        cJSON *o = cJSON_CreateObject();
        if (o && r < 0) {
                cJSON_AddNumberToObject(o, "errno", -r);
                cJSON_AddStringToObject(o, "message", message ? message : strerror(-r));
        } else if (o)
                cJSON_AddItemToObject(o, "result", result);
        char *text = o ? cJSON_PrintUnformatted(o) : NULL;
        int w = text ? core_write_all(out_fd, text, strlen(text)) : -ENOMEM;
        _exit(w < 0 ? 1 : 0);
}

/* How often init looks whether the child it waits for was stopped. */
#define STOP_CHECK_MS 100

int init_child_stopped(pid_t pid) {
        siginfo_t si = {};
        /* WNOWAIT: the status stays for the reap (cmd_reap's wait4). */
        if (pid > 0 && waitid(P_PID, (id_t)pid, &si, WSTOPPED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid &&
            (si.si_code == CLD_STOPPED || si.si_code == CLD_TRAPPED))
                return si.si_status > 0 ? si.si_status : SIGSTOP;
        return 0;
}

int init_child_await(pid_t pid, int fd) {
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int n = poll(&p, 1, STOP_CHECK_MS);
                if (n > 0)
                        return 0;
                if (n < 0 && errno != EINTR)
                        return negative_errno();
                int sig = init_child_stopped(pid);
                if (sig > 0) {
                        (void)kill(pid, SIGKILL);
                        return sig;
                }
        }
}

int init_fs_run(const cJSON *req, const char *workspace, cJSON **ret_result, char **ret_message) {
        *ret_message = NULL;
        const core_seccomp *filter = NULL;
        /* No filter, no file operation (fail closed), as for a command. */
        int r = core_seccomp_default(&filter, NULL);
        if (r < 0) {
                if (asprintf(ret_message, "fs: no seccomp filter for the file operation: %s", strerror(-r)) < 0)
                        *ret_message = NULL;
                return r;
        }
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();
        pid_t pid = fork();
        if (pid < 0) {
                r = negative_errno();
                close(p[0]);
                close(p[1]);
                return r;
        }
        if (pid == 0) {
                close(p[0]);
                fs_child(req, workspace, p[1], filter);
        }
        close(p[1]);
        /* A reply is one packet: more than that is not an answer. */
        size_t cap = AGENT_MAX_PACKET + 1, len = 0;
        _cleanup_free_ char *buf = malloc(cap + 1);
        r = buf ? 0 : -ENOMEM;
        int stopped = 0;
        while (r == 0) {
                /* Never blocks on a child the sandbox stopped (init_child_await). */
                if (!stopped && (stopped = init_child_await(pid, p[0])) < 0) {
                        r = stopped;
                        (void)kill(pid, SIGKILL);
                        break;
                }
                ssize_t n = read(p[0], buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        r = negative_errno();
                else if (n == 0)
                        break;
                else if ((len += (size_t)n) == cap)
                        r = -EFBIG;
        }
        close(p[0]);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        _cleanup_(cJSON_Deletep) cJSON *o = NULL;
        if (r == 0) {
                buf[len] = 0;
                o = cJSON_Parse(buf);
        }
        const cJSON *res = cJSON_GetObjectItemCaseSensitive(o, "result");
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(o, "errno");
        if (res) {
                *ret_result = cJSON_DetachItemViaPointer(o, (cJSON *)res);
                return 0;
        }
        if (cJSON_IsNumber(en) && en->valuedouble > 0) {
                const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "message"));
                *ret_message = m ? strdup(m) : NULL;
                return -(int)en->valuedouble;
        }
        const char *action = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "action"));
        if (stopped > 0) {
                if (asprintf(ret_message, "fs.%s: a process in the sandbox stopped the file operation (signal %s); "
                             "it was ended, nothing after the stop was done", action ? action : "?",
                             sigabbrev_np(stopped) ?: "?") < 0)
                        *ret_message = NULL;
                return -EINTR;
        }
        if (asprintf(ret_message, "fs.%s: the file operation ended without an answer (%s %d)",
                     action ? action : "?", WIFSIGNALED(st) ? "signal" : "status",
                     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st)) < 0)
                *ret_message = NULL;
        return r < 0 ? r : -EIO;
}
