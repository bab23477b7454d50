/* `sandboxctl fs watch NAME:PATH [-r]`: fs.watch (docs/API.md), one line
 * per fs.watchEvent notification until Ctrl-C or the end of the watch.
 * Closing the connection at Ctrl-C ends the watch in the sandbox. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

/* "created file /workspace/a.txt", "renamed directory /a -> /b",
 * "overflow: 12 events dropped (client)". */
static void print_event(const ctl_globals *g, const cJSON *p) {
        if (g->json) {
                _cleanup_free_ char *t = cJSON_PrintUnformatted(p);
                if (t)
                        puts(t);
                fflush(stdout);
                return;
        }
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "type"));
        const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "path"));
        const char *old = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "oldPath"));
        const char *kind = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "isDir")) ? "directory" : "file";
        if (!type)
                return;
        if (streq(type, "overflow")) {
                const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "reason"));
                const cJSON *dropped = cJSON_GetObjectItemCaseSensitive(p, "dropped");
                printf("overflow");
                if (cJSON_IsNumber(dropped))
                        printf(": %.0f events dropped", dropped->valuedouble);
                else
                        printf(": events were dropped");
                fputs(" (", stdout);
                ctl_fput_escaped(stdout, reason ? reason : "kernel");
                putchar(')');
                if (path) {
                        fputs(" at ", stdout);
                        ctl_fput_escaped(stdout, path);
                }
                putchar('\n');
        } else {
                /* Paths are named by code in the sandbox: escaped, so each
                 * event stays one line and no escape reaches the terminal. */
                bool renamed = streq(type, "renamed") && old;
                ctl_fput_escaped(stdout, renamed ? "renamed" : type);
                printf(" %s ", kind);
                if (renamed) {
                        ctl_fput_escaped(stdout, old);
                        fputs(" -> ", stdout);
                }
                ctl_fput_escaped(stdout, path ? path : "?");
                putchar('\n');
        }
        fflush(stdout);
}

/* A message of the watch: 1 to go on, else the exit code. */
static int handle(const ctl_globals *g, int64_t id, const char *name, const client_msg *msg) {
        if (msg->kind == CLIENT_MSG_RESPONSE) {
                if (msg->id != id)
                        return 1;
                if (msg->error)
                        return ctl_report(g, "fs watch", msg->error);
                const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg->result, "reason"));
                fputs("the watch ended: ", stderr);
                ctl_fput_escaped(stderr, !reason ? "?" : streq(reason, "sandbox_stopped") ? "the sandbox stopped"
                                         : streq(reason, "deleted") ? "the watched path was deleted" : reason);
                fputc('\n', stderr);
                return 0;
        }
        if (!msg->method || !cJSON_IsObject(msg->params))
                return 1;
        if (streq(msg->method, "fs.watchStarted")) {
                const cJSON *rid = cJSON_GetObjectItemCaseSensitive(msg->params, "requestId");
                const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg->params, "path"));
                if (cJSON_IsNumber(rid) && (int64_t)rid->valuedouble == id) {
                        fputs("watching ", stderr);
                        ctl_fput_escaped(stderr, name);
                        fputc(':', stderr);
                        ctl_fput_escaped(stderr, path);
                        fprintf(stderr, "%s; Ctrl-C to stop\n",
                                cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg->params, "recursive"))
                                        ? " and everything below it" : "");
                }
        } else if (streq(msg->method, "fs.watchEvent"))
                print_event(g, msg->params);
        return 1;
}

int ctl_fs_watch(ctl_globals *g, const char *name, const char *path, bool recursive) {
        _cleanup_close_ int sfd = ctl_signal_fd();
        if (sfd < 0)
                return ctl_error(CLI_EXIT_ERROR, "fs watch: signals: %s", strerror(-sfd));
        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0)
                return r;
        cJSON *params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "sandbox", name);
        cJSON_AddStringToObject(params, "path", path);
        cJSON_AddBoolToObject(params, "recursive", recursive);
        int64_t id = client_send(c, "fs.watch", params);
        if (id < 0)
                return ctl_error(CLI_EXIT_UNREACHABLE, "fs watch: cannot send to sandboxd: %s", strerror((int)-id));
        for (;;) {
                int w = ctl_wait_message(c, sfd, "fs watch");
                if (w != 0)
                        return w;
                _cleanup_client_msg_ client_msg *msg = NULL;
                r = client_next(c, 0, &msg);
                if (r == 0 || r == -EBADMSG)
                        continue;
                if (r < 0)
                        return ctl_error(CLI_EXIT_UNREACHABLE, "fs watch: sandboxd closed the connection");
                r = handle(g, id, name, msg);
                if (r != 1)
                        return r;
        }
}
