/* JSON-RPC 2.0 server over a Unix stream socket, one message per line, on an
 * sd-event loop. Many requests may be in flight per connection; handlers
 * answer now or later (from the event loop thread) through the request
 * object they are handed. */
#pragma once

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
};

typedef struct rpc_server rpc_server;
typedef struct rpc_conn rpc_conn;

/* One request in flight. The handler owns it and must finish it exactly once
 * with rpc_reply() or an rpc_reply_error*() call, which free it. */
typedef struct rpc_request {
        rpc_conn *conn;        /* a reference, released when the request is freed */
        cJSON *id;             /* owned by the request */
        char *method;          /* owned by the request */
        cJSON *params;         /* owned by the request; an empty object when absent */
} rpc_request;

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

/* Sends a notification (no id) on conn if it is still open; takes params. */
void rpc_notify(rpc_conn *conn, const char *method, cJSON *params);

rpc_conn *rpc_conn_ref(rpc_conn *c);
void rpc_conn_unref(rpc_conn *c);
bool rpc_conn_is_open(const rpc_conn *c);
/* Peer credentials from SO_PEERCRED at accept time. */
uid_t rpc_conn_uid(const rpc_conn *c);

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
/* Borrowed object/array (type checked). */
int rpc_param_object(rpc_request *req, const char *field, bool required, cJSON **ret, sb_error **ret_err);
int rpc_param_array(rpc_request *req, const char *field, bool required, cJSON **ret, sb_error **ret_err);
