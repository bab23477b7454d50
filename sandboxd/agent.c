/* The daemon's side of the channel to sandbox-init (libcore/agent.h): a
 * non-blocking SOCK_SEQPACKET socket on the event loop with an outgoing
 * queue, so a sandbox that stops reading never stalls the daemon, plus the
 * pidfd that tells when init has exited.
 *
 * Everything that arrives here is sandbox-controlled: root inside a sandbox
 * can ptrace init and speak on its socket. Packets are parsed with bounds,
 * and any text from them that reaches the log goes through text_for_log(). */
#include <limits.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <fcntl.h>
#include "libcore/agent.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/seccomp.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/text.h"

/* The socket is always read: every answer for the sandbox comes through
 * it, so a slow client holds back its own command's output only, by that
 * command's window (agent.h "credit", command.c), never the channel. */
static int update_events(session *s) {
        if (!s->agent_src)
                return 0;
        return sd_event_source_set_io_events(s->agent_src, EPOLLIN | (s->outq ? EPOLLOUT : 0));
}

static void flush_queue(session *s) {
        while (s->outq) {
                agent_packet *p = s->outq;
                ssize_t n;
                if (p->fd >= 0) {
                        union {
                                struct cmsghdr h;
                                char buf[CMSG_SPACE(sizeof(int))];
                        } cm = {};
                        struct iovec iov = { .iov_base = p->data, .iov_len = p->len };
                        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                                             .msg_controllen = sizeof(cm.buf) };
                        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                        c->cmsg_level = SOL_SOCKET;
                        c->cmsg_type = SCM_RIGHTS;
                        c->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(c), &p->fd, sizeof(int));
                        n = sendmsg(s->agent_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
                } else
                        n = send(s->agent_fd, p->data, p->len, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR)
                                break;
                        log_debug_errno(negative_errno(), "send to sandbox-init of '%s': %m", s->sb->name);
                        s->agent_closed = true;
                        break;
                }
                s->outq = p->next;
                s->outq_bytes -= p->len;
                if (p->fd >= 0)
                        close(p->fd);
                free(p->data);
                free(p);
        }
        if (!s->outq)
                s->outq_tail = &s->outq;
        update_events(s);
}

static int send_with_fd(session *s, cJSON *json, int fd) {
        char *text = cJSON_PrintUnformatted(json);
        cJSON_Delete(json);
        size_t len = text ? strlen(text) : 0;
        int r = !text ? -ENOMEM : len > AGENT_MAX_PACKET ? -EMSGSIZE : s->agent_closed ? -EPIPE : 0;
        agent_packet *p = r < 0 ? NULL : calloc(1, sizeof(*p));
        if (!p) {
                free(text);
                if (fd >= 0)
                        close(fd);
                return r < 0 ? r : -ENOMEM;
        }
        p->data = text;
        p->len = len;
        p->fd = fd;
        s->outq_bytes += len;
        *s->outq_tail = p;
        s->outq_tail = &p->next;
        flush_queue(s);
        return 0;
}

int agent_send(session *s, cJSON *json) {
        return send_with_fd(s, json, -EBADF);
}

bool agent_input_refused(session *s, rpc_request *req, size_t bytes) {
        /* Packets carry base64 (4/3) and some JSON around it. */
        size_t packed = bytes / 3 * 4 + 4096;
        if (s->outq_bytes + packed <= AGENT_OUTQ_INPUT_MAX)
                return false;
        rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                        "sandbox '%s' is not taking input: %zu MiB wait for its sandbox-init already (limit %u MiB); "
                        "retry later", s->sb->name, s->outq_bytes >> 20, AGENT_OUTQ_INPUT_MAX >> 20);
        return true;
}

int agent_fs(session *s, cJSON *op, agent_fs_cb cb, void *userdata) {
        return agent_fs_fd(s, op, -EBADF, cb, userdata);
}

int agent_send_fd(session *s, cJSON *json, int fd) {
        return send_with_fd(s, json, fd);
}

static int call_fd(session *s, cJSON *op, const char *name, int fd, agent_fs_cb cb, void *userdata);

int agent_call(session *s, cJSON *op, agent_fs_cb cb, void *userdata) {
        return call_fd(s, op, NULL, -EBADF, cb, userdata);
}

int agent_fs_fd(session *s, cJSON *op, int fd, agent_fs_cb cb, void *userdata) {
        return call_fd(s, op, "fs", fd, cb, userdata);
}

static int call_fd(session *s, cJSON *op, const char *name, int fd, agent_fs_cb cb, void *userdata) {
        agent_fs_op *o = calloc(1, sizeof(*o));
        if (!o) {
                cJSON_Delete(op);
                if (fd >= 0)
                        close(fd);
                return -ENOMEM;
        }
        o->req = ++s->next_fs_req;
        o->cb = cb;
        o->userdata = userdata;
        if (name)
                cJSON_AddStringToObject(op, "op", name);
        cJSON_AddNumberToObject(op, "req", o->req);
        int r = send_with_fd(s, op, fd);
        if (r < 0) {
                free(o);
                return r;
        }
        o->next = s->fs_ops;
        s->fs_ops = o;
        return 0;
}

/* Numbers in packets are sandbox-controlled doubles: converting one that is
 * out of the target type's range is undefined behaviour (C11 6.3.1.4), so
 * each is range-checked first. An id outside 1..UINT_MAX reads as 0, which
 * names no command or request. */
static unsigned packet_id(const cJSON *j) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= 1 && j->valuedouble <= (double)UINT_MAX))
                return 0;
        return (unsigned)j->valuedouble;
}

/* j's value when it is a number in [min, max], else dflt. */
static int packet_int(const cJSON *j, int min, int max, int dflt) {
        if (!cJSON_IsNumber(j) || !(j->valuedouble >= min && j->valuedouble <= max))
                return dflt;
        return (int)j->valuedouble;
}

static void on_fs_reply(session *s, cJSON *msg) {
        unsigned req = packet_id(cJSON_GetObjectItem(msg, "req"));
        if (!req)
                return;
        for (agent_fs_op **pp = &s->fs_ops; *pp; pp = &(*pp)->next) {
                agent_fs_op *o = *pp;
                if (o->req != req)
                        continue;
                *pp = o->next;
                cJSON *err = cJSON_GetObjectItem(msg, "errno");
                const char *message = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "message"));
                if (!o->cb)
                        ; /* nobody waits for it (agent_call with no cb) */
                else if (cJSON_IsNumber(err))
                        o->cb(s, NULL, -packet_int(err, 1, 4095, EIO), message, o->userdata);
                else
                        o->cb(s, cJSON_GetObjectItem(msg, "result"), 0, NULL, o->userdata);
                free(o);
                return;
        }
}

static void dispatch(session *s, cJSON *msg) {
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "ev"));
        unsigned cid = packet_id(cJSON_GetObjectItem(msg, "id"));
        if (!ev)
                return;
        if (streq(ev, "output"))
                command_on_output(s, cid, cJSON_GetStringValue(cJSON_GetObjectItem(msg, "stream")),
                                  cJSON_GetStringValue(cJSON_GetObjectItem(msg, "data")));
        else if (streq(ev, "log"))
                command_on_log(s, cid, msg);
        else if (streq(ev, "logs_done")) {
                /* The fault build can keep the hand-over unfinished, as an
                 * init that never completes it would (the stop's tests). */
                if (!core_fault_tunable("SANDBOXD_FAULT_HOLD_LOGS_DONE", 0))
                        commands_logs_replayed(s);
        }
        else if (streq(ev, "started")) {
                if (cJSON_IsTrue(cJSON_GetObjectItem(msg, "writeAcks")))
                        s->write_acks = true;
                command_on_started(s, cid, packet_int(cJSON_GetObjectItem(msg, "pid"), 1, INT_MAX, 0),
                                   (uint64_t)packet_int(cJSON_GetObjectItem(msg, "window"), 1, INT_MAX, 0));
        } else if (streq(ev, "exit")) {
                /* An exit status, or 128+signal: 0..255 (agent.h). */
                command_on_exit(s, cid, packet_int(cJSON_GetObjectItem(msg, "code"), 0, 255, 255),
                                cJSON_GetStringValue(cJSON_GetObjectItem(msg, "error")),
                                cJSON_GetObjectItem(msg, "usage"));
        } else if (streq(ev, "fs"))
                on_fs_reply(s, msg);
        else if (streq(ev, "list")) {
                if (cJSON_IsTrue(cJSON_GetObjectItem(msg, "writeAcks")))
                        s->write_acks = true;
                commands_restore(s, msg);
        }
        else if (streq(ev, "watch"))
                fs_watch_on_events(s, cid, msg);
        else if (streq(ev, "watch_end"))
                fs_watch_on_end(s, cid, msg);
        else if (streq(ev, "error")) {
                char safe[TEXT_LOG_BUF];
                log_warning("sandbox '%s': sandbox-init: %s", s->sb->name,
                            text_for_log(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "message")) ?: "error",
                                         safe, sizeof(safe)));
        }
}

void agent_handle_packet(session *s, const char *buf, size_t len) {
        cJSON *msg = cJSON_ParseWithLength(buf, len);
        if (!msg) {
                log_debug("sandbox '%s': malformed packet from sandbox-init", s->sb->name);
                return;
        }
        dispatch(s, msg);
        cJSON_Delete(msg);
}

/* Relay fairness across sandboxes. Each turn of the event loop a session
 * reads at most AGENT_TURN_BUDGET bytes of packets from its sandbox-init.
 * A session that used its whole budget (its init has more queued: a command
 * floods its output) drops to AGENT_PRIORITY_BULK, below every other source
 * of the loop (client connections, timers, other sessions' agents), until a
 * turn finds its socket empty. sd-event dispatches the highest-priority
 * pending source first and, within one priority, the one pending longest,
 * so flooding sessions share what the rest of the daemon leaves idle, round
 * robin, and a quiet sandbox's command waits behind at most one budget of a
 * flood at each step (sd_event_source_set_priority(3)). */
#define AGENT_TURN_BUDGET (64u * 1024)
#define AGENT_PRIORITY_BULK (SD_EVENT_PRIORITY_NORMAL + 10)

static void set_bulk(session *s, sd_event_source *src, bool bulk) {
        if (s->output_bulk == bulk)
                return;
        if (sd_event_source_set_priority(src, bulk ? AGENT_PRIORITY_BULK : SD_EVENT_PRIORITY_NORMAL) >= 0)
                s->output_bulk = bulk;
}

static int on_agent_io(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        session *s = userdata;
        static char buf[AGENT_MAX_PACKET + 1];
        if (revents & EPOLLOUT)
                flush_queue(s);
        /* Bounded work per wakeup (AGENT_TURN_BUDGET above). */
        size_t used = 0;
        bool drained = false;
        while (revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (used >= AGENT_TURN_BUDGET) {
                        set_bulk(s, src, true);
                        return 0;
                }
                ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EAGAIN || errno == EINTR) {
                                drained = errno == EAGAIN;
                                break;
                        }
                        n = 0;
                }
                used += (size_t)n;
                if (n == 0) {
                        s->agent_closed = true;
                        sd_event_source_set_enabled(src, SD_EVENT_OFF);
                        /* init is gone or going; the pidfd says when.
                         * A stop that removes the sandbox: init has reaped
                         * every process of its namespace and closed its
                         * socket on its way out (libcore/init/main.c
                         * finish); its exit (the kernel's teardown of the
                         * namespaces, milliseconds) is the background
                         * teardown's to wait for. The teardown kills the
                         * cgroup before anything else, so whatever closed
                         * the socket, nothing of the session runs on. */
                        sandbox *sb = s->sb;
                        if (s->stopping && (sb->deleting || !sb->persistent) && s->pidfd >= 0) {
                                s->ended_early = true;
                                session_ended(s, 0);
                                return 0;
                        }
                        break;
                }
                buf[n] = 0;
                agent_handle_packet(s, buf, (size_t)n);
                if (!s->agent_src)
                        return 0; /* the session ended inside dispatch */
        }
        if (drained)
                set_bulk(s, src, false);
        return 0;
}

static int on_pidfd(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        session *s = userdata;
        siginfo_t si = {0};
        int status = 0;
        /* An adopted init (live restore) is not our child: its parent
         * reaps it, and a readable pidfd is all we learn (status 0). */
        if (waitid(P_PIDFD, (id_t)fd, &si, WEXITED | WNOHANG) < 0) {
                if (errno != ECHILD)
                        return 0;
        } else if (si.si_pid == 0)
                return 0;
        else
                status = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
        sd_event_source_set_enabled(src, SD_EVENT_OFF);
        session_ended(s, status);
        return 0;
}

/* Hands init the command filter, compiled once for the daemon's life (the
 * first call compiles it): init's first command then skips libseccomp,
 * about a millisecond on the path of create-then-run. Best effort: without
 * it init compiles the same filter itself. */
static void send_seccomp(session *s) {
        const core_seccomp *f = NULL;
        _cleanup_error_ sb_error *err = NULL;
        if (core_seccomp_default(&f, &err) < 0) {
                log_debug("sandbox '%s': no seccomp filter to hand to sandbox-init: %s", s->sb->name,
                          err ? err->message : "error");
                return;
        }
        size_t size;
        const void *bpf = core_seccomp_bpf(f, &size);
        _cleanup_free_ char *b64 = core_base64_encode(bpf, size);
        cJSON *op = cJSON_CreateObject();
        if (!b64 || !op) {
                cJSON_Delete(op);
                return;
        }
        cJSON_AddStringToObject(op, "op", "seccomp");
        cJSON_AddStringToObject(op, "bpf", b64);
        (void)agent_send(s, op);
}

int agent_attach(session *s, sd_event *event) {
        s->outq_tail = &s->outq;
        int fl = fcntl(s->agent_fd, F_GETFL);
        if (fl < 0 || fcntl(s->agent_fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return negative_errno();
        int r = sd_event_add_io(event, &s->agent_src, s->agent_fd, EPOLLIN, on_agent_io, s);
        if (r < 0)
                return r;
        r = sd_event_add_io(event, &s->pidfd_src, s->pidfd, EPOLLIN, on_pidfd, s);
        if (r < 0)
                return r;
        send_seccomp(s);
        return 0;
}

void agent_detach(session *s) {
        commands_logs_replayed(s);
        s->agent_src = sd_event_source_disable_unref(s->agent_src);
        s->pidfd_src = sd_event_source_disable_unref(s->pidfd_src);
        while (s->outq) {
                agent_packet *p = s->outq;
                s->outq = p->next;
                if (p->fd >= 0)
                        close(p->fd);
                free(p->data);
                free(p);
        }
        s->outq_tail = &s->outq;
        s->outq_bytes = 0;
        fs_watches_session_detached(s);
        /* Pending file operations fail: the sandbox stopped under them. */
        while (s->fs_ops) {
                agent_fs_op *o = s->fs_ops;
                s->fs_ops = o->next;
                if (o->cb)
                        o->cb(s, NULL, -ESHUTDOWN, "the sandbox stopped", o->userdata);
                free(o);
        }
        if (s->agent_fd >= 0)
                close(s->agent_fd);
        s->agent_fd = -EBADF;
        /* An early end keeps it for the teardown (internal.h ended_early). */
        if (s->pidfd >= 0 && !s->ended_early) {
                close(s->pidfd);
                s->pidfd = -EBADF;
        }
}
