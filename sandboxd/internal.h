/* The daemon's registry types shared by manager.c (registry, daemon.info,
 * startup), sandbox.c (sandbox.* methods and the session lifecycle),
 * agent.c (the channel to sandbox-init), command.c (command.*) and fs.c
 * (fs.*). Everything here runs on the event loop thread unless a comment
 * says a worker thread. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <cjson/cJSON.h>
#include <systemd/sd-event.h>
#include "libcore/cgroup.h"
#include "libcore/net.h"
#include "sandboxd/config.h"
#include "sandboxd/manager.h"
#include "sandboxd/rpc.h"

typedef struct sandbox sandbox;
typedef struct session session;
typedef struct command command;

/* A list of requests waiting for the same event. */
typedef struct req_list {
        rpc_request **items;
        size_t n;
} req_list;
int req_list_add(req_list *l, rpc_request *req);
/* Takes the requests out of the list (the caller replies to each). */
req_list req_list_take(req_list *l);

/* Last `cap` bytes of a stream. */
typedef struct ring {
        char *buf;
        size_t cap;     /* most bytes kept */
        size_t alloc;   /* bytes allocated so far (grows up to cap) */
        size_t start, len;
        bool truncated;
} ring;
void ring_append(ring *r, const char *data, size_t len);
/* Base64 of the ring's content in order; caller frees. */
char *ring_base64(const ring *r);
void ring_free(ring *r);

struct command {
        char cmd_id[24];          /* "cmd-" + 16 hex */
        unsigned agent_id;        /* id on the agent channel, unique per session */
        sandbox *sb;
        session *sess;            /* NULL once the session is gone */
        char *cmd;
        cJSON *args;              /* array of strings */
        char *cwd;
        bool sudo, tty, detached;
        uint64_t started_ms, ended_ms;
        bool started, exited;
        int exit_code;
        rpc_conn *conn;           /* streams go here while it is open; a reference */
        rpc_request *run_req;     /* command.run waiting for start (detached) or exit */
        req_list waiters;         /* command.wait */
        sd_event_source *timeout_src;
        ring out, err;
        command *next;
};

/* A pending file operation on the agent channel. */
typedef void (*agent_fs_cb)(session *s, cJSON *result, int err, const char *message, void *userdata);
typedef struct agent_fs_op {
        unsigned req;
        agent_fs_cb cb;
        void *userdata;
        struct agent_fs_op *next;
} agent_fs_op;

typedef struct agent_packet {
        char *data;
        size_t len;
        struct agent_packet *next;
} agent_packet;

struct session {
        char id[33];
        sandbox *sb;
        pid_t pid;
        int pidfd;
        int agent_fd;
        int net_slot;             /* -1 without network */
        core_cgroup *cg;
        uint64_t started_ms;
        sd_event_source *agent_src, *pidfd_src, *expire_src, *kill_src;
        agent_packet *outq, **outq_tail;
        unsigned next_cmd_id, next_fs_req;
        agent_fs_op *fs_ops;
        bool stopping, agent_closed;
};

struct sandbox {
        manager *m;
        char *name;
        char id[33];
        char *runtime;
        cJSON *source;            /* as stored: password replaced by "<redacted>", or NULL */
        uint64_t timeout_ms;
        cJSON *env;               /* object of strings */
        cJSON *tags;              /* object of strings */
        char *policy;             /* "allow-all" | "deny-all" */
        bool persistent;
        unsigned vcpus;
        cJSON *ports;             /* array */
        uint64_t created_ms, expires_ms;
        const char *status;       /* pending, running, stopping, stopped, failed */
        session *sess;
        cJSON *sessions;          /* history: [{id, status, startedAt, endedAt}] */
        char *dir;                /* <state>/sandboxes/<name> */
        char *run_dir;            /* <run>/sandboxes/<name> */
        bool deleting;
        req_list stop_waiters, delete_waiters;
        sandbox *next;
};

struct manager {
        sd_event *event;
        const daemon_config *cfg;
        char *sandboxes_dir, *runtimes_dir, *run_sandboxes_dir;
        char *host_runtime;
        int init_memfd;
        core_net_pool pool;
        bool *slots;              /* slot in use */
        unsigned n_slots;
        bool have_nft;
        sandbox *sandboxes;
        command *commands;
        unsigned n_commands;
        rpc_server *server;
        uint64_t started_ms;
};

/* manager.c */
sandbox *manager_find_sandbox(manager *m, const char *name);
command *manager_find_command(manager *m, const char *cmd_id);
int manager_alloc_slot(manager *m);
void manager_release_slot(manager *m, int slot);
void reply_not_found(rpc_request *req, const char *what, const char *name);

/* sandbox.c */
void register_sandbox_methods(manager *m, rpc_server *s);
cJSON *sandbox_to_json(const sandbox *sb);
/* Looks up params.<field> as a sandbox name; replies not_found or
 * sandbox_stopped itself and returns NULL when there is no running session. */
sandbox *sandbox_require_running(rpc_request *req, manager *m, const char *field);
/* Called by agent.c when sandbox-init has exited. */
void session_ended(session *s, int status);
void sandbox_stop_all(manager *m);
void sandbox_free(sandbox *sb);

/* agent.c */
int agent_attach(session *s, sd_event *event);
/* Queues one packet (takes json). */
int agent_send(session *s, cJSON *json);
int agent_fs(session *s, cJSON *op, agent_fs_cb cb, void *userdata);
void agent_detach(session *s);

/* command.c */
void register_command_methods(manager *m, rpc_server *s);
void command_on_started(session *s, unsigned id, pid_t pid);
void command_on_output(session *s, unsigned id, const char *stream, const char *b64);
void command_on_exit(session *s, unsigned id, int code, const char *error);
/* The session ended: every command still running exits with 137. */
void commands_session_gone(session *s);
/* The sandbox is deleted: forget its commands. */
void commands_forget_sandbox(manager *m, sandbox *sb);
void commands_conn_closed(manager *m, rpc_conn *c);
void command_free(command *c);

/* fs.c */
void register_fs_methods(manager *m, rpc_server *s);
