/* Private interfaces of sandbox-init (PID 1 inside every sandbox): the agent
 * state shared by the socket side (agent.c), the command side (command.c),
 * the file operations (fsops.c) and the startup/stop sequence (main.c).
 * The wire protocol is libcore/agent.h. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "libcore/agent.h"
#include "libcore/error.h"

/* Raw bytes of command output per `output` event (base64 adds a third, so a
 * packet stays far below AGENT_MAX_PACKET). */
#define INIT_OUTPUT_CHUNK (64 * 1024)
/* Bytes queued for the socket above which init stops reading command output,
 * and below which it starts again: a command that spews output while
 * sandboxd reads slowly must not grow init's memory without bound. */
#define INIT_SEND_HIGH (8u * 1024 * 1024)
#define INIT_SEND_LOW (1u * 1024 * 1024)
/* Largest "window" of a run: output bytes of one command sent and not yet
 * credited by sandboxd (agent.h "credit"). */
#define INIT_WINDOW_MAX (64.0 * 1024 * 1024)
/* Bound on stdin bytes queued for one command that does not read them. */
#define INIT_STDIN_MAX AGENT_STDIN_MAX
/* Output read from one stream after its process was reaped: what is in the
 * pipe now is taken, a daemonised grandchild that keeps writing is not. */
#define INIT_DRAIN_MAX (1u * 1024 * 1024)
/* Largest "logBytes" of a run (sandboxd's commandLogBytes maximum). */
#define INIT_LOG_MAX (1024.0 * 1024 * 1024)
/* Longest "meta" of a run that init keeps for list. */
#define INIT_META_MAX 4096
/* Finished commands whose exit sandboxd has not acknowledged, kept for a
 * reconnecting daemon; past this many the oldest are dropped. */
#define INIT_UNACKED_MAX 256
#define INIT_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define INIT_WORKSPACE "/workspace"
/* File watches (watch.c): at most INIT_WATCH_MAX at once per sandbox-init
 * (sandboxd allows fewer per sandbox), each with at most WATCH_INOTIFY_MAX
 * inotify watches (directories of a recursive watch) and WATCH_QUEUE_MAX
 * events queued in its child while init does not read them. */
#define INIT_WATCH_MAX 64
#define WATCH_INOTIFY_MAX 8192
#define WATCH_QUEUE_MAX 4096

struct init_cmd;

/* Largest number of cgroup hierarchies a container's commands join. */
#define CORE_CTR_CG_MAX 8

enum init_watch_kind {
        WATCH_SOCKET,
        WATCH_SIGNAL,
        WATCH_STDOUT, /* also the pty master of a tty command */
        WATCH_STDERR,
        WATCH_STDIN,
        WATCH_LISTEN, /* the listening socket sandboxd reconnects through */
        WATCH_REPORT, /* a command child's exec report pipe (command.c spawn_report) */
        WATCH_FSWATCH, /* a file watcher child's event pipe (watch.c) */
};

/* What an epoll registration points at (epoll_event.data.ptr). */
typedef struct init_watch {
        enum init_watch_kind kind;
        struct init_cmd *cmd;
        struct init_fswatch *fsw; /* WATCH_FSWATCH */
} init_watch;

/* A queued byte buffer: a packet for the socket or stdin for a command. */
typedef struct init_buf {
        struct init_buf *next;
        size_t len, off;
        char data[];
} init_buf;

typedef struct init_queue {
        init_buf *head, *tail;
        size_t bytes;
} init_queue;

/* The retained log of one output stream (DESIGN §2): its newest `cap`
 * bytes, kept by init so that a restarted sandboxd gets back what its
 * predecessor had (agent.h "log"). The buffer grows on demand up to cap. */
typedef struct init_log {
        char *buf;
        size_t cap, alloc, start, len;
        bool truncated;        /* bytes were dropped from the front */
        uint64_t total;        /* bytes ever appended: the kept ones begin at total - len */
} init_log;

typedef struct init_cmd {
        struct init_cmd *next;
        int64_t id;
        pid_t pid;
        bool tty;
        bool reaped;
        bool finished;         /* exit event sent; kept (listed, re-sent on reconnect) until acked */
        int status;            /* wait status once reaped */
        /* What the command's process used (wait4's rusage at its reap):
         * user+system CPU of it and of every descendant it waited for, and
         * the largest resident set of any one of those processes. */
        bool has_usage;
        uint64_t cpu_ms, maxrss_bytes;
        int exit_code;         /* what the exit event said, once finished */
        int out_fd, err_fd;    /* read ends (err_fd unused for a tty); -EBADF once closed */
        int in_fd;             /* stdin pipe write end, or a dup of the pty master */
        bool out_watched, err_watched, in_watched;
        /* Per-command flow control (agent.h "window", "credit"): output
         * bytes sent and not yet credited; at `window` (0: none asked)
         * the command's streams are not read until credit comes. */
        uint64_t window, unacked;
        bool in_close_pending; /* close stdin once the queue drains */
        /* An acked write refused at its first chunk: bytes of its chunks
         * still to come, dropped, and the errno its last one answers. */
        uint64_t in_skip;
        int in_skip_errno;
        init_watch w_out, w_err, w_in;
        init_queue in_queue;
        char *meta;            /* sandboxd's opaque "meta" of run, returned by list */
        init_log log_out, log_err;
        bool log_evicted;      /* sandboxd dropped its logs for its budget ("logcap" 0) */
        /* Until its exec: the read end of the child's report pipe (EOF at
         * exec, a report if a step before failed), -EBADF once read. */
        int report_fd;
        bool report_watched;
        init_watch w_rep;
        bool spawn_failed;     /* the report said a step before exec failed */
        int spawn_stage, spawn_err;
        char *argv0, *cwd;     /* for the message of a failed start */
        /* The mapping the child was spawned with (its stack and arguments,
         * command.c spawn_block), until the child left it: exec or death. */
        void *spawn_mem;
} init_cmd;

typedef struct init_agent {
        int sock, epfd, sigfd;
        init_watch w_sock, w_sig;
        init_queue send_queue;
        bool sock_out_watched;
        bool sock_dead;        /* EOF or error: nothing more is sent or read */
        int listen_fd;         /* AGENT_LISTEN_FD, or -EBADF: no reconnection */
        init_watch w_listen;
        uid_t peer_uid;        /* uid of the daemon that started init, as seen here */
        bool offline;          /* between a lost connection and the next "list" */
        bool output_paused;    /* send_queue above INIT_SEND_HIGH */
        /* Handing the kept logs to a reconnected daemon (cmd_replay_logs),
         * paced by the send queue: the ids to replay, which one, which
         * stream (0 stdout, 1 stderr) and how far into it. */
        bool replaying, replay_busy;
        int64_t *replay_ids;
        size_t replay_n, replay_i, replay_off;
        int replay_stream;
        char **base_env;       /* NULL-terminated "K=V" from setup */
        init_cmd *cmds;
        init_cmd *dead;        /* finished commands, freed between epoll batches */
        bool stopping;
        uint64_t stop_deadline_ms; /* CLOCK_MONOTONIC */
        bool children_gone;    /* last waitpid() said ECHILD */
} init_agent;

/* agent.c */
void queue_clear(init_queue *q);
int queue_push(init_queue *q, const void *data, size_t len);
int agent_send(init_agent *a, const cJSON *msg);
void agent_send_error(init_agent *a, const cJSON *id, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void agent_flush(init_agent *a);
void agent_on_socket(init_agent *a, uint32_t events);
void agent_update_backpressure(init_agent *a);
void agent_begin_stop(init_agent *a, int64_t grace_ms);
void agent_on_listen(init_agent *a);
int watch_set(init_agent *a, int fd, init_watch *w, bool *watched, uint32_t events);
void watch_clear(init_agent *a, int fd, bool *watched);

/* command.c */
void cmd_run(init_agent *a, const cJSON *req);
void cmd_op(init_agent *a, const char *op, const cJSON *req);
void cmd_on_event(init_agent *a, init_watch *w, uint32_t events);
void cmd_reap(init_agent *a);
void cmd_set_output_paused(init_agent *a, bool paused);
void cmd_finish_all(init_agent *a);
void cmd_free_dead(init_agent *a);
/* {"ev":"list"} reply: every command whose exit is not acknowledged. */
cJSON *cmd_list(init_agent *a);
/* Back online: commands reaped while offline get their last output and
 * exit events now, and every exit not acknowledged yet is sent again. */
void cmd_resume(init_agent *a);
/* {"op":"logcap","id":N,"bytes":B}: sandboxd cut command N's logs to
 * their newest B bytes per stream (0: dropped whole); so does init. */
void cmd_logcap(init_agent *a, const cJSON *req);
/* After a "list" reply: every command's retained log as "log" events
 * (agent.h), then "logs_done", then what cmd_resume sends. Output stays
 * unread meanwhile, so none of it comes before the logs. The pieces are
 * queued while the send queue is below INIT_SEND_LOW (cmd_replay_step
 * from agent_flush), so the replay never holds a second copy of the logs. */
void cmd_replay_logs(init_agent *a);
void cmd_replay_step(init_agent *a);
/* The connection went: a replay in progress ends (the next list restarts it). */
void cmd_replay_abort(init_agent *a);
/* {"op":"credit","id":N,"bytes":B}: sandboxd passed on B more bytes of
 * command N's output; its streams are read again below its window. */
void cmd_credit(init_agent *a, const cJSON *req);
/* The connection went: no window holds any command's output any more (the
 * next daemon has no client attached to them; its own runs ask anew). */
void cmd_windows_clear(init_agent *a);
/* {"op":"ack","id":N}: sandboxd forgot finished command N; so does init. */
void cmd_ack(init_agent *a, const cJSON *req);
/* One-time work of the first command, done ahead while init is idle. */
void cmd_prepare(void);
/* Puts the command filter (core_seccomp_default) on init itself, once, so
 * that every child inherits it instead of having the kernel compile it
 * again before each exec (libcore/seccomp.h core_seccomp_install_self).
 * Nothing init does after setup is refused by the filter: its ops (run,
 * write, kill, fs in a forked child, list, ack, logcap, stop) use none of
 * the calls the filter denies, nor does a command's child before exec
 * (libcore/init/command.c child_main). On failure (logged at debug level)
 * each child installs the filter as before. */
void cmd_confine_self(void);

/* user.c: the sandbox user's ids inside (SANDBOX_UID/GID until setup says
 * otherwise: sandboxes without a user namespace run it as the host's
 * sandboxd-user account). */
extern uid_t init_user_uid;
extern gid_t init_user_gid;
/* Takes setup's "user" {"uid", "gid"} (absent: SANDBOX_UID/GID; root and
 * (uid_t)-1 refused) and, with `in_rootfs` (called after pivot_root into
 * the sandbox's tree), makes the `sandbox` entries of /etc/passwd and
 * /etc/group carry those ids (adding them when no entry holds the uid) and
 * the sandbox user own /home/sandbox and /workspace (not recursively).
 * With "user"."remapFrom" {"uid", "gid"} (the other mode's ids of the
 * sandbox user) and /home/sandbox owned by exactly those, the files under
 * /workspace and /home/sandbox owned by them become the sandbox user's
 * (a walk that follows no symlink and enters no other mount).
 * Paths are resolved beneath / with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS; a symlink on the way fails. Returns 0 or a
 * negative errno with *ret_err set. */
int init_user_setup(const cJSON *setup, bool in_rootfs, sb_error **ret_err);

/* fsops.c: one file request of agent.h ("op":"fs"), run in the calling
 * process with fsuid/fsgid init_user_uid/init_user_gid for the duration of the
 * call. Relative paths resolve against `workspace`. On success returns 0 and
 * stores the result object (caller owns) in *ret_result; on failure returns a
 * negative errno and stores a message ("fs.write /x/y: Permission denied",
 * caller frees) in *ret_message. */
int init_fs_handle(const cJSON *req, const char *workspace, cJSON **ret_result, char **ret_message);

/* fsrun.c: the same request run in a short-lived child of init that takes
 * a command's credentials and confinement (init_child_confine as the sandbox
 * user), never in init itself: the child answers over a pipe and is reaped
 * before this returns. Same contract as init_fs_handle. */
int init_fs_run(const cJSON *req, const char *workspace, cJSON **ret_result, char **ret_message);

/* fsrun.c: waits until `fd` (the read end of a pipe the child `pid`
 * writes) is readable, or the child is stopped. init is single-threaded and
 * every request of the sandbox waits while it blocks; the sandbox user (or
 * root inside) can SIGSTOP a child that took its uid (kill(2): same real
 * uid), which would hold init forever. A stopped child is sent SIGKILL, so
 * its end of the pipe closes. Looks every STOP_CHECK_MS (100 ms). Returns 0
 * when readable, the stopping signal (> 0) after killing a stopped child,
 * or a negative errno from poll(2). */
int init_child_await(pid_t pid, int fd);

/* fsrun.c: the signal that stopped child `pid` (> 0) when it is stopped
 * now, else 0. The status is left for the reap. */
int init_child_stopped(pid_t pid);

/* tar.c, watch.c: each copy or watcher child the sandbox stopped (found
 * when its SIGCHLD comes, from cmd_reap) is sent SIGKILL, so that no
 * request waits on it forever: a copy then answers with an error naming
 * the stop, a watch ends as for a watcher the sandbox killed. */
void init_tar_end_stopped(void);
void init_watch_end_stopped(void);

/* fsops.c: an agent path made absolute (relative ones under `workspace`),
 * repeated and trailing slashes removed. Caller frees; NULL on ENOMEM. */
char *init_fs_path(const char *p, const char *workspace);

/* tar.c: in a child of init just forked (single-threaded), the confinement
 * of a command (command.c child_main), in its order: every fd but 0-2, keep1
 * and keep2 closed, not dumpable, the capability bounding set of `uid`,
 * setgroups(0)/setresgid/setresuid to uid/gid, no_new_privs, default
 * signals, umask 022, the capabilities of `uid` (none but for root) and the
 * seccomp `filter`. Returns 0 or a negative errno (then the child must exit
 * without doing its work). Used by the tar copies and every fs op. */
struct core_seccomp;
int init_child_confine(uid_t uid, gid_t gid, int keep1, int keep2, const struct core_seccomp *filter);

/* tar.c: {"op":"fs","action":"writeTar"|"readTar","req":N,"path":S,
 * "sudo":B} with the pipe `data_fd` (taken: the child copies it; the caller
 * closes its own). Forks the confined child that unpacks the stream read
 * from the pipe into path, or packs path into it; its answer is sent when it
 * is reaped (init_tar_reaped). Returns 0, or -EINVAL when the request has no
 * "req" (nothing can be answered). */
int init_tar_start(init_agent *a, const cJSON *req, int data_fd);
/* From the reap loop: true when pid was a copy's child (then answered). */
bool init_tar_reaped(init_agent *a, pid_t pid, int wstatus);

/* watch.c: {"op":"watch","id":W,"path":S,"recursive":B} (agent.h): forks
 * the confined watcher child of W; every failure is told as W's
 * "watch_end" with "errno". */
void init_watch_start(init_agent *a, const cJSON *req);
/* {"op":"unwatch","id":W}: SIGKILL to W's child; "watch_end" with reason
 * "stopped" follows once it is reaped. Unknown ids are ignored. */
void init_watch_stop(init_agent *a, const cJSON *req);
/* The daemon's connection is gone: every watcher is ended (its client went
 * with the daemon). */
void init_watch_stop_all(init_agent *a);
/* From the event loop: W's pipe is readable (relayed as "watch" batches). */
void init_watch_on_event(init_agent *a, init_watch *w);
/* From the reap loop: true when pid was a watcher child (its end is sent
 * once its pipe is read to EOF). */
bool init_watch_reaped(init_agent *a, pid_t pid, int wstatus);
/* Backpressure, with the commands' output (cmd_set_output_paused). */
void init_watch_set_paused(init_agent *a, bool paused);
/* Frees the watches ended since the last call; from the event loop between
 * epoll batches only (an event of the batch may point at an ended one, as
 * for cmd_free_dead). */
void init_watch_free_dead(void);

/* container.c: containers of the sandbox (agent.h "container").
 * init_ctr_helper_start forks the unconfined helper that makes their mount
 * namespaces; called once after setup, before any seccomp filter is on
 * init (before the first request is read); close_fds are init's fds the
 * helper closes (its sockets, signalfd and epoll; < 0 skipped). 0 or a
 * negative errno (then container creation answers ENOTSUP). */
int init_ctr_helper_start(const int *close_fds, size_t n_close);
/* {"op":"ctrfd"} with its one fd (copied): queued for the next create. */
void init_ctr_fd(init_agent *a, const cJSON *req, int fd);
/* {"op":"container","action":"create"|"delete"|"list","req":N,...}:
 * answered as {"ev":"fs","req":N,"result":{...}} or with "errno". */
void init_ctr_op(init_agent *a, const cJSON *req);
typedef struct init_container init_container;
/* The container `name`, or NULL; borrowed. */
const init_container *init_ctr_find(const char *name);
/* Its mount namespace fd, and its cgroup.procs fds (*ret, count returned);
 * borrowed, valid until its delete. */
int init_ctr_mntns(const init_container *c);
/* The container's own PID namespace (an fd init keeps), or -EBADF when it
 * shares the sandbox's. */
int init_ctr_pidns(const init_container *c);
/* Around the fork of a command of container c (command.c spawn_child):
 * enter makes init's next children start in c's own PID namespace
 * (setns(2) CLONE_NEWPID: init itself stays where it is); returns 1 when it
 * did, 0 when c (or NULL) shares the sandbox's, or a negative errno. leave,
 * after the fork when enter returned 1, puts init's children back in its
 * own namespace (aborts init if it cannot: nothing else may start in the
 * container's by mistake). */
int init_ctr_pidns_enter(const init_container *c);
void init_ctr_pidns_leave(void);
size_t init_ctr_cgroups(const init_container *c, const int **ret);
