/* sandbox-init's side of the agent socket (libcore/agent.h): non-blocking
 * sends with a bounded queue and backpressure on command output, packet
 * receipt and dispatch, epoll registration helpers, and the start of a stop. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include "libcore/agent.h"
#include "libcore/init/init.h"
#include "libcore/log.h"
#include "libcore/seccomp.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

void queue_clear(init_queue *q) {
        while (q->head) {
                init_buf *b = q->head;
                q->head = b->next;
                free(b);
        }
        q->tail = NULL;
        q->bytes = 0;
}

/* Appends a copy of data. 0 or -ENOMEM. */
int queue_push(init_queue *q, const void *data, size_t len) {
        init_buf *b = malloc(sizeof(*b) + len);
        if (!b)
                return -ENOMEM;
        b->next = NULL;
        b->len = len;
        b->off = 0;
        memcpy(b->data, data, len);
        if (q->tail)
                q->tail->next = b;
        else
                q->head = b;
        q->tail = b;
        q->bytes += len;
        return 0;
}

/* Registers (or changes) fd for `events`; events 0 removes it. */
int watch_set(init_agent *a, int fd, init_watch *w, bool *watched, uint32_t events) {
        if (events == 0) {
                watch_clear(a, fd, watched);
                return 0;
        }
        struct epoll_event ev = { .events = events, .data.ptr = w };
        if (epoll_ctl(a->epfd, *watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) < 0)
                return log_warning_errno(negative_errno(), "epoll_ctl fd %d: %m", fd);
        *watched = true;
        return 0;
}

void watch_clear(init_agent *a, int fd, bool *watched) {
        if (*watched && fd >= 0)
                (void)epoll_ctl(a->epfd, EPOLL_CTL_DEL, fd, NULL);
        *watched = false;
}

static void sock_lost(init_agent *a);

static void sock_mark_dead(init_agent *a) {
        if (a->sock_dead)
                return;
        a->sock_dead = true;
        watch_clear(a, a->sock, &a->sock_out_watched);
        (void)epoll_ctl(a->epfd, EPOLL_CTL_DEL, a->sock, NULL);
        queue_clear(&a->send_queue);
        agent_update_backpressure(a);
}

/* Pauses command output above the high mark, resumes below the low mark. */
void agent_update_backpressure(init_agent *a) {
        /* Offline, output stays in the pipes (a command that fills one
         * blocks) until the next sandboxd has the command list. */
        bool want = a->offline || a->replaying || (a->output_paused ? a->send_queue.bytes >= INIT_SEND_LOW
                                                    : a->send_queue.bytes > INIT_SEND_HIGH);
        if (want != a->output_paused)
                cmd_set_output_paused(a, want);
}

/* Sends queued packets until the socket would block. Each packet is one
 * SOCK_SEQPACKET record, so a record is either sent whole or not at all. */
void agent_flush(init_agent *a) {
        while (!a->sock_dead && a->send_queue.head) {
                init_buf *b = a->send_queue.head;
                ssize_t n = send(a->sock, b->data, b->len, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n < 0 && errno != EMSGSIZE) {
                        log_warning_errno(negative_errno(), "agent socket send: %m");
                        sock_lost(a);
                        return;
                }
                if (n < 0)
                        log_warning("dropping a %zu byte packet: too large", b->len);
                a->send_queue.head = b->next;
                if (!b->next)
                        a->send_queue.tail = NULL;
                a->send_queue.bytes -= b->len;
                free(b);
        }
        if (a->sock_dead)
                return;
        uint32_t want = EPOLLIN | (a->send_queue.head ? EPOLLOUT : 0);
        if (a->sock_out_watched != !!a->send_queue.head) {
                struct epoll_event ev = { .events = want, .data.ptr = &a->w_sock };
                if (epoll_ctl(a->epfd, EPOLL_CTL_MOD, a->sock, &ev) == 0)
                        a->sock_out_watched = !!a->send_queue.head;
        }
        agent_update_backpressure(a);
        if (a->replaying && a->send_queue.bytes < INIT_SEND_LOW)
                cmd_replay_step(a);
}

/* Serialises msg and sends it in order after anything already queued.
 * A dead socket swallows the message (sandboxd is gone; init is stopping). */
int agent_send(init_agent *a, const cJSON *msg) {
        if (a->sock_dead)
                return 0;
        _cleanup_free_ char *s = cJSON_PrintUnformatted(msg);
        if (!s)
                return -ENOMEM;
        int r = queue_push(&a->send_queue, s, strlen(s));
        if (r < 0)
                return r;
        agent_flush(a);
        return 0;
}

/* {"ev":"error","message":...} with the request's "id" or "req" when known. */
void agent_send_error(init_agent *a, const cJSON *id, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        log_debug("error event: %s", msg);
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "error");
        if (cJSON_IsNumber(id))
                cJSON_AddNumberToObject(ev, "id", id->valuedouble);
        cJSON_AddStringToObject(ev, "message", msg);
        (void)agent_send(a, ev);
}

static void handle_fs(init_agent *a, const cJSON *req, int fd) {
        const cJSON *rid = cJSON_GetObjectItemCaseSensitive(req, "req");
        if (!cJSON_IsNumber(rid))
                return agent_send_error(a, NULL, "fs: \"req\" must be a number");
        const char *action = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "action"));
        if (action && (streq(action, "writeTar") || streq(action, "readTar"))) {
                (void)init_tar_start(a, req, fd);
                return;
        }
        cJSON *result = NULL;
        _cleanup_free_ char *message = NULL;
        int r = init_fs_run(req, INIT_WORKSPACE, &result, &message);
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev) {
                cJSON_Delete(result);
                return;
        }
        cJSON_AddStringToObject(ev, "ev", "fs");
        cJSON_AddNumberToObject(ev, "req", rid->valuedouble);
        if (r < 0) {
                cJSON_AddNumberToObject(ev, "errno", -r);
                cJSON_AddStringToObject(ev, "message", message ? message : strerror(-r));
        } else
                cJSON_AddItemToObject(ev, "result", result);
        (void)agent_send(a, ev);
}

/* {"op":"seccomp","bpf":BASE64}: the command filter as sandboxd compiled
 * it (agent.h), so that init need not run libseccomp before its first
 * command. Kept only while init has none; a bad one is reported and init
 * compiles its own at the first command (no filter, no command). */
static void handle_seccomp(init_agent *a, const cJSON *req) {
        const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "bpf"));
        _cleanup_free_ void *raw = NULL;
        size_t len = 0;
        core_seccomp *f = NULL;
        int r = b64 ? core_base64_decode(b64, &raw, &len) : -EINVAL;
        if (r >= 0)
                r = core_seccomp_from_bpf(raw, len, &f);
        if (r >= 0)
                r = core_seccomp_set_default(f);
        if (r < 0 && r != -EEXIST)
                agent_send_error(a, NULL, "seccomp: \"bpf\" must be a base64 BPF program: %s", strerror(-r));
        if (r >= 0)
                cmd_confine_self();
        /* Sent right after setup, while the sandbox waits for its first
         * request: a good moment for the rest of the first command's
         * one-time work too. */
        cmd_prepare();
}

/* {"op":"list"}, the first request of a sandboxd that reconnected: the
 * commands it must know about, then the output and exits held while
 * offline, so that none of them names a command it has not heard of. */
static void handle_list(init_agent *a) {
        _cleanup_(cJSON_Deletep) cJSON *ev = cmd_list(a);
        if (!ev)
                return agent_send_error(a, NULL, "list: out of memory");
        /* "logs": the kept logs follow, ended by "logs_done" (agent.h). */
        if (a->offline)
                cJSON_AddBoolToObject(ev, "logs", true);
        (void)agent_send(a, ev);
        if (!a->offline)
                return;
        a->offline = false;
        /* Before any output is read again, so the daemon's copy of each
         * log is init's, then what follows it: no byte twice, none lost.
         * cmd_resume runs once the replay is done. */
        cmd_replay_logs(a);
}

/* {"op":"hostname","name":S} (agent.h "Hostname"): 1-64 bytes, as
 * sethostname(2) takes them (HOST_NAME_MAX). */
static void handle_hostname(init_agent *a, const cJSON *req) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "name"));
        size_t n = name ? strlen(name) : 0;
        if (n == 0 || n > HOST_NAME_MAX)
                return agent_send_error(a, NULL, "hostname: \"name\" must be a string of 1 to %d bytes",
                                        HOST_NAME_MAX);
        if (sethostname(name, n) < 0)
                return agent_send_error(a, NULL, "hostname: sethostname: %s", strerror(errno));
}

static void handle_packet(init_agent *a, const char *buf, size_t len, int fd) {
        _cleanup_(cJSON_Deletep) cJSON *req = cJSON_ParseWithLength(buf, len);
        if (!cJSON_IsObject(req))
                return agent_send_error(a, NULL, "malformed packet: not a JSON object");
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(req, "op");
        if (!cJSON_IsString(op))
                return agent_send_error(a, NULL, "malformed packet: \"op\" must be a string");
        const char *o = op->valuestring;
        if (streq(o, "run"))
                cmd_run(a, req);
        else if (streq(o, "write") || streq(o, "close_stdin") || streq(o, "resize") ||
                 streq(o, "kill"))
                cmd_op(a, o, req);
        else if (streq(o, "fs"))
                handle_fs(a, req, fd);
        else if (streq(o, "seccomp"))
                handle_seccomp(a, req);
        else if (streq(o, "ctrfd"))
                init_ctr_fd(a, req, fd);
        else if (streq(o, "container"))
                init_ctr_op(a, req);
        else if (streq(o, "list"))
                handle_list(a);
        else if (streq(o, "hostname"))
                handle_hostname(a, req);
        else if (streq(o, "ack"))
                cmd_ack(a, req);
        else if (streq(o, "credit"))
                cmd_credit(a, req);
        else if (streq(o, "watch"))
                init_watch_start(a, req);
        else if (streq(o, "unwatch"))
                init_watch_stop(a, req);
        else if (streq(o, "logcap"))
                cmd_logcap(a, req);
        else if (streq(o, "stop")) {
                const cJSON *g = cJSON_GetObjectItemCaseSensitive(req, "graceMs");
                agent_begin_stop(a, cJSON_IsNumber(g) && g->valuedouble > 0 ? (int64_t)g->valuedouble : 0);
        } else
                agent_send_error(a, cJSON_GetObjectItemCaseSensitive(req, "id"),
                                 "unknown op \"%.64s\"", o);
}

/* sandboxd is gone (exited, restarted, crashed). With a listening socket
 * the session lives on: commands keep running, their output waits in its
 * pipes, and the next sandboxd connects. Without one, a stop with no grace. */
static void sock_lost(init_agent *a) {
        bool was_dead = a->sock_dead;
        sock_mark_dead(a);
        if (was_dead)
                return;
        if (a->listen_fd < 0 || a->stopping)
                return agent_begin_stop(a, 0);
        close(a->sock);
        a->sock = -EBADF;
        a->offline = true;
        /* A watch streams to a client of the daemon that went. */
        init_watch_stop_all(a);
        cmd_replay_abort(a);
        /* The clients the windows were for went with that daemon. */
        cmd_windows_clear(a);
        agent_update_backpressure(a);
}

/* A connection on the listening socket. Only one sandboxd at a time, and
 * only the one with the uid of the daemon that started init (SO_PEERCRED,
 * uid 0 on the host; the socket's path is root-only and outside the
 * sandbox's mount namespace, this is the second lock). */
void agent_on_listen(init_agent *a) {
        int fd = accept4(a->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
                return;
        /* The old connection's EOF may not have been read yet (a daemon
         * killed and restarted at once): read it now, or the new daemon
         * would be refused while the old one is already gone. */
        if (!a->sock_dead)
                agent_on_socket(a, EPOLLIN);
        struct ucred cred;
        socklen_t len = sizeof(cred);
        if (!a->sock_dead || a->stopping ||
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != a->peer_uid) {
                log_debug("refusing a connection on the agent socket");
                close(fd);
                return;
        }
        int sndbuf = 4 * 1024 * 1024;
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &a->w_sock };
        if (epoll_ctl(a->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
                close(fd);
                return;
        }
        if (a->sock >= 0)
                close(a->sock);
        a->sock = fd;
        a->sock_dead = false;
        a->sock_out_watched = false;
        log_debug("sandboxd reconnected");
}

/* Reads every packet available now. EOF (sandboxd gone): sock_lost. */
void agent_on_socket(init_agent *a, uint32_t events) {
        if (a->sock_dead)
                return;
        if (events & EPOLLOUT)
                agent_flush(a);
        if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                return;
        static char buf[AGENT_MAX_PACKET + 1];
        for (int i = 0; i < 64 && !a->sock_dead; i++) {
                /* A packet may carry one fd (the pipe of a directory copy);
                 * any other is closed once the packet is handled. */
                union {
                        struct cmsghdr h;
                        char buf[CMSG_SPACE(sizeof(int) * 4)];
                } cm;
                struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                                     .msg_controllen = sizeof(cm.buf) };
                ssize_t n = recvmsg(a->sock, &mh, MSG_DONTWAIT | MSG_TRUNC | MSG_CMSG_CLOEXEC);
                int fds[4] = { -EBADF, -EBADF, -EBADF, -EBADF };
                size_t nfds = 0;
                for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
                        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                                for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && nfds < 4; k++)
                                        memcpy(&fds[nfds++], CMSG_DATA(c) + k * sizeof(int), sizeof(int));
                _cleanup_close_ int fd0 = fds[0];
                for (size_t k = 1; k < nfds; k++)
                        close(fds[k]);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        log_debug("agent socket closed");
                        sock_lost(a);
                        return;
                }
                if ((size_t)n > AGENT_MAX_PACKET) {
                        agent_send_error(a, NULL, "packet of %zd bytes exceeds the %d byte limit",
                                         n, AGENT_MAX_PACKET);
                        continue;
                }
                handle_packet(a, buf, (size_t)n, fd0);
        }
}

/* SIGTERM to every process of the PID namespace now, SIGKILL at the
 * deadline (main loop). kill(-1) from PID 1 reaches every process in its
 * namespace but init itself; main() refuses to run as anything but PID 1,
 * because from a host PID it would reach every process of the host. A second
 * stop can only shorten the grace. */
void agent_begin_stop(init_agent *a, int64_t grace_ms) {
        uint64_t deadline = core_monotonic_ms() + (uint64_t)(grace_ms > 0 ? grace_ms : 0);
        if (a->stopping && deadline >= a->stop_deadline_ms)
                return;
        if (!a->stopping)
                (void)kill(-1, SIGTERM);
        a->stopping = true;
        a->stop_deadline_ms = deadline;
}
