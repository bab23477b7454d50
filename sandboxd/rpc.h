/* JSON-RPC 2.0 server over a Unix stream socket, one message per line, on an
 * sd-event loop. Many requests may be in flight per connection; handlers
 * answer now or later (from the event loop thread) through the request
 * object they are handed. */
#pragma once

#include <stdio.h>

#include <stdbool.h>
#include <cjson/cJSON.h>
#include <systemd/sd-event.h>
#include "libcore/error.h"

/* JSON-RPC 2.0 error codes (https://www.jsonrpc.org/specification §5.1) and
 * the application code whose data.reason says what went wrong. */
enum {
        RPC_PARSE_ERROR = -32700,
        RPC_INVALID_REQUEST = -32600,
        RPC_METHOD_NOT_FOUND = -32601,
        RPC_INVALID_PARAMS = -32602,
        RPC_INTERNAL_ERROR = -32603,
        RPC_APP_ERROR = -32000,
        /* The request was cancelled by request.cancel (the code LSP gives
         * RequestCancelled; data.reason "cancelled"). */
        RPC_REQUEST_CANCELLED = -32800,
};

typedef struct rpc_server rpc_server;
typedef struct rpc_conn rpc_conn;

/* One request in flight. The handler owns it and must finish it exactly once
 * with rpc_reply() or an rpc_reply_error*() call, which free it. */
typedef struct rpc_request rpc_request;

/* Asked, on the event loop, to cancel `req` (request.cancel); it must not
 * finish req itself before returning. Returns true
 * when cancellation is under way: the owner then finishes req later with
 * data.reason "cancelled" (rpc_reply_sb_error() answers that as
 * RPC_REQUEST_CANCELLED) once everything the request made is undone; false
 * when it can no longer be cancelled (req then runs to its end). */
typedef bool (*rpc_cancel_fn)(rpc_request *req, void *userdata);

struct rpc_request {
        rpc_conn *conn;        /* a reference, released when the request is freed */
        cJSON *id;             /* owned by the request */
        char *method;          /* owned by the request */
        cJSON *params;         /* owned by the request; an empty object when absent */
        bool bulk;             /* its method is bulk (rpc_server_set_method_bulk) */
        /* request.cancel (rpc_request_set_cancel) */
        rpc_cancel_fn cancel;
        void *cancel_userdata;
        bool cancel_requested; /* cancel returned true once */
        struct rpc_request *pending_prev, *pending_next; /* the connection's requests in flight */
        /* Set by the authorize hook (rpc_server_set_authorize): runs on the
         * result in rpc_reply() before it is sent, e.g. to drop the items a
         * remote client may not see. NULL: none. */
        void (*result_filter)(struct rpc_request *req, cJSON *result, void *userdata);
        void *result_filter_userdata;
        int method_index;      /* the registered method's slot (statistics), -1 for none */
        bool failed;           /* finished with an error */
        bool stop_cancelled;   /* cancelled by rpc_server_stop(): "cancelled" is answered "unavailable" */
        uint64_t start_usec;   /* CLOCK_MONOTONIC when it was read */
};

typedef void (*rpc_handler)(rpc_request *req, void *userdata);

/* Called when a connection closes (peer hangup or error), before its memory
 * may go away, so owners of streams (commands) can drop it. */
typedef void (*rpc_close_handler)(rpc_conn *conn, void *userdata);

typedef struct rpc_server_config {
        const char *socket_path;  /* bound unless listen_fd >= 0 */
        int listen_fd;            /* from socket activation, or -1 */
        size_t max_line_bytes;    /* default 16 MiB */
        gid_t socket_gid;         /* group allowed to connect (SO_PEERCRED); (gid_t)-1 = root only */
        mode_t socket_mode;       /* 0660 */
        unsigned stall_timeout_ms; /* default 30000; see rpc_conn_queued() */
        unsigned max_conns_user;  /* open connections per non-root peer uid, default 256 */
        unsigned max_conns_root;  /* ... for uid 0, default 1024 */
        size_t out_budget_bytes;  /* queued output of all connections together, default 256 MiB (see below) */
} rpc_server_config;

/* Creates the server: binds (unlinking a stale socket file) or adopts the
 * listening fd, chmod/chown the socket, attaches to `event`. Caller owns
 * *ret (rpc_server_free). */
int rpc_server_new(sd_event *event, const rpc_server_config *cfg, rpc_server **ret, sb_error **ret_err);
void rpc_server_free(rpc_server *s);

/* Registers `handler` for `method` (the string is copied). */
int rpc_server_add_method(rpc_server *s, const char *method, rpc_handler handler, void *userdata);
void rpc_server_set_close_handler(rpc_server *s, rpc_close_handler h, void *userdata);

/* Finishes a request with `result` (ownership taken; NULL means {}). */
void rpc_reply(rpc_request *req, cJSON *result);
/* Finishes a request with an error. For RPC_INVALID_PARAMS, `field` becomes
 * data.field; for RPC_APP_ERROR, `reason` becomes data.reason. Either may be
 * NULL. */
void rpc_reply_error(rpc_request *req, int code, const char *reason, const char *field,
                     const char *fmt, ...) _printf_(5, 6);
/* Finishes a request from an sb_error: -32602 when err->field is set and
 * err->reason is NULL or "invalid_params", else -32000 with data.reason
 * (default "failed"). */
void rpc_reply_sb_error(rpc_request *req, const sb_error *err);

/* Makes req cancellable through request.cancel: fn(req, userdata) runs
 * when a request.cancel on the same connection names req's id (an
 * integer). The owner calls this again whenever the work that holds req
 * changes hands, and with fn NULL once it can no longer be cancelled; the
 * hook goes with req when req is answered. */
void rpc_request_set_cancel(rpc_request *req, rpc_cancel_fn fn, void *userdata);

/* Finishes a request with -32000, data.reason "unavailable", and the
 * members of `data` (an object, taken; NULL: none) added to error.data,
 * e.g. {"completed": false, "cmdId": "cmd-..."}. */
void rpc_reply_unavailable(rpc_request *req, cJSON *data, const char *fmt, ...) _printf_(3, 4);
/* Finishes a request with -32000, data.reason `reason`, and the members of
 * `data` (an object, taken; NULL: none) added to error.data, e.g.
 * {"sandboxes": [...]} of a volume.delete refused while mounted. */
void rpc_reply_error_data(rpc_request *req, const char *reason, cJSON *data, const char *fmt, ...) _printf_(4, 5);

/* ---- Stopping (SIGTERM) ----
 *
 * rpc_server_stop() ends the server's service so that every request in
 * flight gets its answer before its connection closes:
 *  1. From the call on, a new request (other than request.cancel) is
 *     answered -32000 "unavailable" with data.completed false: it was not
 *     started. The listening socket stops accepting when it was passed by
 *     the service manager (socket activation keeps its backlog for the next
 *     daemon); a socket of our own keeps accepting, to answer so.
 *  2. Requests in flight may finish and answer as usual, for up to
 *     `finish_usec`.
 *  3. Then each one still in flight that can be cancelled (request.cancel,
 *     rpc_request_set_cancel) is cancelled; its "cancelled" answer, sent
 *     once everything it made is undone, goes out as "unavailable" with
 *     data.completed false. Up to `rollback_usec` more.
 *  4. Then any request still in flight (it neither finished nor could be
 *     rolled back) is answered "unavailable" with data.completed null
 *     (unknown: the state after the restart tells); its owner's later
 *     answer is dropped.
 *  5. Once nothing is in flight, no connection is read any more; each
 *     closes as soon as its queued output is written, for up to
 *     `flush_usec`; then `stopped` runs (once) and the rest are left for
 *     rpc_server_free().
 * Owners of long waits (a command.run streaming output, command.wait)
 * answer those themselves before calling this. Requests of connections
 * that closed are not waited for. A second call does nothing. */
typedef void (*rpc_stopped_fn)(rpc_server *s, void *userdata);
typedef struct rpc_stop_config {
        uint64_t finish_usec, rollback_usec, flush_usec;
} rpc_stop_config;
void rpc_server_stop(rpc_server *s, const rpc_stop_config *cfg, rpc_stopped_fn stopped, void *userdata);
/* True from rpc_server_stop() on. */
bool rpc_server_is_stopping(const rpc_server *s);

/* Sends a notification (no id) on conn if it is still open; takes params. */
void rpc_notify(rpc_conn *conn, const char *method, cJSON *params);

rpc_conn *rpc_conn_ref(rpc_conn *c);
void rpc_conn_unref(rpc_conn *c);
bool rpc_conn_is_open(const rpc_conn *c);
/* Peer credentials from SO_PEERCRED at accept time. */
uid_t rpc_conn_uid(const rpc_conn *c);
gid_t rpc_conn_gid(const rpc_conn *c);

/* The Unix peer's supplementary groups (SO_PEERGROUPS, as at connect
 * time). *ret_groups (the caller's, free()) gets *ret_n gids. Returns 0,
 * -EBADF for a connection without a socket, or the getsockopt error. */
int rpc_conn_peer_groups(const rpc_conn *c, gid_t **ret_groups, size_t *ret_n);

/* Output flow control. A connection whose peer reads slower than a source
 * produces (command output) becomes congested once more than
 * RPC_CONN_HIGH_WATER bytes wait unsent; the source should then stop
 * producing until the drain handler says the queue fell to
 * RPC_CONN_LOW_WATER or below (hysteresis, so it does not flap per packet).
 *
 * The daemon never drops a connection for the size of its queue alone: only
 * when more than RPC_OUT_QUEUE_MAX (32 MiB) wait AND the peer has taken no
 * byte for stall_timeout_ms (a peer that reads nothing at all). While more
 * than that wait, no further request of the connection is started (lines
 * already read stay in its input buffer) and its input is not read, so a
 * peer that sends requests without reading answers cannot grow the queue
 * further; at most one bulk request (one with a large answer, such as
 * fs.read) runs per connection at a time, later lines waiting behind it. */
#define RPC_OUT_QUEUE_MAX (32u * 1024 * 1024)
/* The queues of all connections together (their buffers as allocated)
 * have one budget, out_budget_bytes (daemon.json "outputBudgetMiB"): many
 * peers that each stay under RPC_OUT_QUEUE_MAX cannot grow the daemon
 * without bound either. Past it, of the client (rpc_peer_key_fn: a uid, a
 * TLS tenant) whose connections hold the most, the connection that has
 * taken no byte for the longest time (of those with output waiting) is
 * dropped, its queue freed at once, the reason logged; again until the
 * queues fit. By client first: a client that holds most of the budget on
 * connections it reads a trickle from cannot make another's connection,
 * one that read less recently, the one dropped. */
#define RPC_OUT_BUDGET_DEFAULT (256u * 1024 * 1024)
#define RPC_CONN_HIGH_WATER (4u * 1024 * 1024)
#define RPC_CONN_LOW_WATER (1u * 1024 * 1024)

/* Writes the server's request statistics in the Prometheus text format
 * (exposition format 0.0.4): sandboxd_rpc_requests_total{method,outcome}
 * and the histogram sandboxd_rpc_request_duration_seconds{method} (from the
 * request being read to its answer being queued), one series per
 * registered method. */
void rpc_server_write_metrics(const rpc_server *s, FILE *f);

/* Whether the peer of the connected Unix socket `fd` may use the server:
 * root, or a member (primary or supplementary, SO_PEERCRED/SO_PEERGROUPS)
 * of the socket group; the same check the JSON-RPC socket makes. */
bool rpc_server_peer_allowed(const rpc_server *s, int fd);

/* Marks `method` (registered) as bulk: its answers may be tens of MiB, so
 * a connection runs at most one at a time (see above). Returns 0 or
 * -ENOENT. */
int rpc_server_set_method_bulk(rpc_server *s, const char *method);

/* File descriptors a client sent with SCM_RIGHTS wait on its connection,
 * at most RPC_CONN_FDS (more are closed). rpc_request_take_fd() hands the
 * oldest to the request that asked for one (caller owns it; O_CLOEXEC), or
 * returns -ENOENT when none came. */
#define RPC_CONN_FDS 4
int rpc_request_take_fd(rpc_request *req);

/* Bytes queued for the peer and not yet written (0 once closed). */
size_t rpc_conn_queued(const rpc_conn *c);
/* True from the moment the queue passed RPC_CONN_HIGH_WATER until the drain
 * handler ran for it (or the connection closed: then false). */
bool rpc_conn_is_congested(const rpc_conn *c);
/* Called on the event loop when a congested connection's queue has drained
 * to RPC_CONN_LOW_WATER or below. Not called for a connection that closes
 * instead (the close handler runs then). */
typedef void (*rpc_drain_handler)(rpc_conn *conn, void *userdata);
void rpc_server_set_drain_handler(rpc_server *s, rpc_drain_handler h, void *userdata);

/* Checks a request's params before its handler runs (schema_check_params
 * has this shape): 0, or a negative errno with *ret_err, answered as
 * rpc_reply_sb_error() does (-32602 naming data.field). Set once, before
 * requests arrive; none set: every request reaches its handler. */
typedef int (*rpc_params_check)(const char *method, const cJSON *params, sb_error **ret_err);
void rpc_server_set_params_check(rpc_server *s, rpc_params_check check);

/* Parameter helpers: each returns 0 and stores the value (borrowed from
 * req->params, valid while req lives), or, when the field is missing but not
 * required, leaves *ret untouched and returns 0; on a wrong type or missing
 * required field it fills *ret_err with field set (reason NULL) and returns
 * -EINVAL. */
int rpc_param_string(rpc_request *req, const char *field, bool required, const char **ret,
                     sb_error **ret_err);
int rpc_param_bool(rpc_request *req, const char *field, bool *ret, sb_error **ret_err);
/* Integers must be whole numbers within [min, max]. */
int rpc_param_int(rpc_request *req, const char *field, bool required, int64_t min, int64_t max,
                  int64_t *ret, sb_error **ret_err);
/* Like rpc_param_int for a duration in milliseconds, with messages that
 * give the bound in ms and as a duration a person reads at a glance:
 * "timeout: 172800000 ms is over the maximum of 86400000 ms (24h)". */
int rpc_param_duration_ms(rpc_request *req, const char *field, bool required, int64_t min_ms, int64_t max_ms,
                          int64_t *ret, sb_error **ret_err);
/* Formats `ms` (>= 0) as "24h", "1h30m", "2s", "1s500ms" into buf (at least
 * 32 bytes); returns buf. */
char *rpc_format_duration(int64_t ms, char *buf, size_t size);
/* Borrowed object/array (type checked). */
int rpc_param_object(rpc_request *req, const char *field, bool required, cJSON **ret, sb_error **ret_err);
int rpc_param_array(rpc_request *req, const char *field, bool required, cJSON **ret, sb_error **ret_err);

/* ---- TLS listeners (remote clients, sandboxd/remote.c) ----
 *
 * A TLS listener accepts TCP connections on the same event loop and serves
 * the same methods once a TLS handshake with a verified client certificate
 * completes. Nothing blocks: the handshake, reads and writes are
 * non-blocking SSL calls driven by the connection's I/O events. A
 * connection that has not finished its handshake within the handshake
 * timeout is closed; connections are capped in all, per peer address and
 * while handshaking (over a cap the socket is closed at once, logged at
 * most once a second with the count of others). Such connections have no
 * peer uid (rpc_conn_uid() is (uid_t)-1) and never carry fds. */
struct ssl_ctx_st;
struct ssl_st;

typedef struct rpc_tls_config {
        int listen_fd;                 /* a bound, listening TCP socket; taken, even on failure */
        const char *name;              /* "tcp://0.0.0.0:7443", for logs (copied) */
        struct ssl_ctx_st *ctx;        /* a reference is taken (SSL_CTX_up_ref) */
        unsigned handshake_timeout_ms; /* default 5000 */
        unsigned max_conns;            /* open TLS connections on all listeners, default 256 */
        unsigned max_conns_addr;       /* ... per peer address, default 64 */
        unsigned max_handshakes;       /* handshakes in progress on all listeners, default 64 */
} rpc_tls_config;

/* Called on the event loop when a TLS connection's handshake has completed
 * (OpenSSL verified the client's chain already). Returns 0 with
 * *ret_identity (owned by the connection from then on, freed with the
 * identity free function), or a negative errno to refuse: the callee logs
 * why, the connection is closed. `peer` is "ADDR:PORT". */
typedef int (*rpc_tls_accept_fn)(rpc_conn *c, struct ssl_st *ssl, const char *peer, void **ret_identity,
                                 void *userdata);
typedef void (*rpc_identity_free_fn)(void *identity);

/* Adds a TLS listener. The accept function must be set first. Returns 0 or
 * a negative errno with *ret_err. */
int rpc_server_add_tls_listener(rpc_server *s, const rpc_tls_config *cfg, sb_error **ret_err);
void rpc_server_set_tls_accept(rpc_server *s, rpc_tls_accept_fn fn, rpc_identity_free_fn free_fn,
                               void *userdata);

/* The identity a TLS connection was accepted with (rpc_tls_accept_fn),
 * NULL on the Unix socket. Borrowed; lives as long as the connection. */
void *rpc_conn_identity(const rpc_conn *c);
/* Gives a Unix-socket connection that has none an identity (session.actAs,
 * tenant.c), freed with `free_fn` with the connection's last reference.
 * Takes `identity` on success. -EPERM (nothing taken) for a TLS connection
 * or one that already has an identity: an identity is set once and never
 * replaced. */
int rpc_conn_set_identity(rpc_conn *c, void *identity, rpc_identity_free_fn free_fn);
/* True for a connection of a TLS listener. */
bool rpc_conn_is_tls(const rpc_conn *c);
/* "ADDR:PORT" of a TLS peer, "uid N pid N" on the Unix socket. Borrowed. */
const char *rpc_conn_peer(const rpc_conn *c);

/* Called with every error message (rpc_reply_error, rpc_reply_sb_error,
 * rpc_reply_unavailable, rpc_reply_error_data) before it is sent on
 * `conn`: the filter may replace *message (a malloc'd string it then owns,
 * freeing the old one; NULL when out of memory) so that a client is told
 * only what it may know. Set once. */
typedef void (*rpc_message_filter_fn)(const rpc_conn *conn, char **message, void *userdata);
void rpc_server_set_message_filter(rpc_server *s, rpc_message_filter_fn fn, void *userdata);

/* Called for every request after its params passed the schema check and
 * before its handler: 0 lets it run (the hook may change req->params or set
 * req->result_filter), a negative errno refuses it with *ret_err (answered
 * as rpc_reply_sb_error(); the hook logs the refusal). Set once. */
typedef int (*rpc_authorize_fn)(rpc_request *req, void *userdata, sb_error **ret_err);
void rpc_server_set_authorize(rpc_server *s, rpc_authorize_fn fn, void *userdata);

/* Names the client a connection speaks for, for the output budget
 * (RPC_OUT_BUDGET_DEFAULT): writes a NUL-terminated key of at most `size`
 * bytes (truncated) to `buf`; connections of one client share a key.
 * Called once per connection, after the TLS handshake. Without the hook a
 * Unix socket connection's key is its uid, a TLS connection's its own
 * address and port. */
typedef void (*rpc_peer_key_fn)(const rpc_conn *c, void *userdata, char *buf, size_t size);
/* Sets the hook above (fn NULL: the default keys). */
void rpc_server_set_peer_key(rpc_server *s, rpc_peer_key_fn fn, void *userdata);
