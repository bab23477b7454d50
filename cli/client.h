/* A small JSON-RPC 2.0 client for sandboxd's Unix socket, shared by
 * sandboxctl and the tests.
 *
 * Framing is one JSON message per '\n'-terminated line (docs/API.md
 * "Framing"). Many requests may be in flight: client_send() returns the id it
 * used, client_next() hands back the next message of any kind, and
 * client_wait()/client_call() wait for one id while queueing (or handing to a
 * callback) whatever else arrives, so nothing is lost or reordered.
 *
 * Depends on libc and cJSON only (and OpenSSL's base64 helpers); never on
 * libcore, so the CLI stays thin. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

/* Default socket (DESIGN §6) and the variable that overrides it. */
#define CLIENT_DEFAULT_SOCKET "/run/sandboxd/sandboxd.sock"
#define CLIENT_SOCKET_ENV "SANDBOXD_SOCKET"

/* Longest line accepted from the daemon, newline excluded: fs.read of the
 * largest file (64 MiB) grows by a third in base64, so the limit leaves room
 * for that plus the envelope rather than failing a legal answer. */
#define CLIENT_MAX_LINE ((size_t) 96 << 20)

/* client_error.code for failures found on this side (no daemon answer):
 * reason is then CLIENT_REASON_DISCONNECTED (the socket failed or closed),
 * CLIENT_REASON_TIMEOUT, or CLIENT_REASON_PROTOCOL (a line that is not a
 * JSON-RPC message). */
#define CLIENT_ERROR_LOCAL 0
#define CLIENT_REASON_DISCONNECTED "disconnected"
#define CLIENT_REASON_TIMEOUT "timeout"
#define CLIENT_REASON_PROTOCOL "protocol"

typedef struct client client;

/* A JSON-RPC error: code (-32xxx from the daemon, or CLIENT_ERROR_LOCAL),
 * message (never NULL), and data.reason / data.field when given (else NULL).
 * All strings are owned by the object; free with client_error_free(). */
typedef struct client_error {
        int code;
        char *message;
        char *reason;
        char *field;
} client_error;

typedef enum client_msg_kind {
        CLIENT_MSG_RESPONSE,
        CLIENT_MSG_NOTIFICATION,
} client_msg_kind;

/* One message from the daemon. `json` owns the whole parsed line; `result`,
 * `params` and `method` point into it. A response carries either `result`
 * or `error`; `id` is 0 when the daemon answered with a null id (it could
 * not read the request). Free with client_msg_free(). */
typedef struct client_msg {
        client_msg_kind kind;
        int64_t id;                /* responses */
        cJSON *result;             /* responses: borrowed from json, NULL on error */
        client_error *error;       /* responses: owned, NULL on success */
        const char *method;        /* notifications: borrowed from json */
        cJSON *params;             /* notifications: borrowed from json, may be NULL */
        cJSON *json;               /* owned */
        struct client_msg *next;   /* queue link, private to client.c */
} client_msg;

/* Receives a notification while client_wait()/client_call() waits. The
 * message is borrowed for the duration of the call. */
typedef void (*client_notify_fn)(const client_msg *msg, void *userdata);

/* The socket to use: `option` (from --socket) when non-NULL and non-empty,
 * else $SANDBOXD_SOCKET when set and non-empty, else the default. Returns a
 * borrowed string (one of the inputs, the environment, or a constant). */
const char *client_socket_path(const char *option);

/* Connects to the Unix socket at `path` (SOCK_CLOEXEC). Returns 0 and a new
 * client in *ret (caller frees with client_free()), or a negative errno
 * (-ENAMETOOLONG for a path that does not fit sockaddr_un; connect's errno
 * otherwise, e.g. -ENOENT, -ECONNREFUSED, -EACCES). */
int client_connect(const char *path, client **ret);

/* A remote daemon (docs/SECURITY.md "Remote clients"): $SANDBOXD_HOST and
 * the files of the client certificate, its key and the CA the daemon's
 * certificate must chain to. */
#define CLIENT_HOST_ENV "SANDBOXD_HOST"
#define CLIENT_CERT_ENV "SANDBOXD_CERT"
#define CLIENT_KEY_ENV "SANDBOXD_KEY"
#define CLIENT_CA_ENV "SANDBOXD_CA"

/* Splits "tcp://HOST:PORT" (HOST a name, an IPv4 address or [IPv6]) into
 * new strings. Returns 0, -EINVAL, -ENOMEM. */
int client_parse_host(const char *url, char **ret_host, char **ret_port);

/* Connects to a daemon's TLS listener at `url` ("tcp://HOST:PORT") with
 * TLS 1.3, presenting the client certificate `cert` (PEM, with any
 * intermediates) and key `key`, and verifying the daemon's certificate
 * against the CA file `ca` alone and against HOST (name or address). The
 * handshake blocks; afterwards the client behaves as over the Unix socket
 * (no fds can be sent: client_send_fd gives -EOPNOTSUPP). Returns 0 and
 * *ret, or a negative errno with *ret_msg (caller frees; may be NULL on
 * ENOMEM) saying what failed. */
int client_connect_tls(const char *url, const char *cert, const char *key, const char *ca, client **ret,
                       char **ret_msg);

/* True for a connection made by client_connect_tls(). */
bool client_is_remote(const client *c);

/* Wraps an already connected stream socket (ownership of fd is taken, even
 * on failure). Used by tests with a socketpair. Returns NULL on ENOMEM. */
client *client_new_fd(int fd);

/* Closes the socket and frees queued messages. Accepts NULL. */
void client_free(client *c);

/* The socket fd, for poll() by callers that multiplex other fds. */
int client_fd(const client *c);

/* Sends `method` with `params` (ownership taken; NULL sends no params) as a
 * request with the next id (1, 2, ...). Returns the id (> 0), or a negative
 * errno when the message could not be built or written (-EPIPE,
 * -ECONNRESET, -ENOMEM). */
int64_t client_send(client *c, const char *method, cJSON *params);

/* Like client_send(), with `fd` (not taken) sent along (SCM_RIGHTS) for
 * methods that take one ("fd": true in fs.writeTar / fs.readTar). */
int64_t client_send_fd(client *c, const char *method, cJSON *params, int fd);
/* Like client_send() with params already encoded: `params` holds
 * params_len bytes of one JSON object (the caller vouches for it; method is
 * a plain name). For large params built without cJSON's copies (base64
 * written straight into the text). Returns the id or a negative errno. */
int64_t client_send_text(client *c, const char *method, const char *params, size_t params_len);
/* Sends a notification (no id, no answer expected). Same ownership and
 * errors as client_send(); returns 0 on success. */
int client_notify(client *c, const char *method, cJSON *params);

/* Returns the next message: first any queued by client_wait(), then lines
 * already buffered, then reads from the socket, waiting at most timeout_ms
 * milliseconds (-1 = forever, 0 = do not block). Returns 1 and *ret (owned
 * by the caller), 0 on timeout, or a negative errno: -ECONNRESET when the
 * daemon closed the connection, -EMSGSIZE for a line over CLIENT_MAX_LINE,
 * -EBADMSG for a line that is not a JSON-RPC message (skipped; the next call
 * goes on with the following line), -EINTR when a signal interrupted the
 * wait. */
int client_next(client *c, int timeout_ms, client_msg **ret);

/* True when a complete message can be had from client_next() without
 * reading the socket (queued or buffered). Callers that poll() the fd must
 * drain these first, since poll() cannot see them. */
bool client_has_pending(const client *c);

/* Waits for the response to request `id`. Notifications that arrive
 * meanwhile (and ones queued earlier) go to `cb` in order when it is non-NULL,
 * else they are queued for client_next(); responses to other ids are queued.
 * On a result returns 0 and *ret_result (owned by the caller; may be
 * NULL if not wanted). On an error answer returns -EREMOTEIO and fills
 * *ret_err; on a local failure (see client_next; timeout gives -ETIMEDOUT)
 * returns that negative errno and fills *ret_err with code
 * CLIENT_ERROR_LOCAL. ret_err may be NULL. */
int client_wait(client *c, int64_t id, int timeout_ms, client_notify_fn cb, void *userdata,
                cJSON **ret_result, client_error **ret_err);

/* client_send() followed by client_wait(). Ownership of params is taken. */
int client_call(client *c, const char *method, cJSON *params, int timeout_ms,
                client_notify_fn cb, void *userdata, cJSON **ret_result, client_error **ret_err);

/* Frees a message (its JSON and error); accepts NULL. */
void client_msg_free(client_msg *m);

/* Builds an error (printf-style message); reason and field may be NULL.
 * Returns NULL on ENOMEM. */
client_error *client_error_new(int code, const char *reason, const char *field,
                               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Decodes a JSON-RPC error object {code, message, data?: {reason?, field?}}.
 * A malformed object still yields an error (code -32603, a message saying
 * so). Returns NULL only on ENOMEM. */
client_error *client_error_from_json(const cJSON *error);

/* Frees an error; accepts NULL. */
void client_error_free(client_error *e);

/* Base64 (RFC 4648, padded, no line breaks). Encode returns a new
 * NUL-terminated string or NULL on ENOMEM. Decode returns 0 and a new buffer
 * (*ret, NUL-terminated for convenience, not counted in *ret_len), or
 * -EINVAL for input that is not base64, -ENOMEM. */
char *client_base64_encode(const void *data, size_t len);
int client_base64_decode(const char *text, void **ret, size_t *ret_len);

static inline void client_freep(client **c) { client_free(*c); }
static inline void client_msg_freep(client_msg **m) { client_msg_free(*m); }
static inline void client_error_freep(client_error **e) { client_error_free(*e); }
#define _cleanup_client_ __attribute__((cleanup(client_freep)))
#define _cleanup_client_msg_ __attribute__((cleanup(client_msg_freep)))
#define _cleanup_client_error_ __attribute__((cleanup(client_error_freep)))
static inline void client_json_freep(cJSON **j) { cJSON_Delete(*j); }
#define _cleanup_json_ __attribute__((cleanup(client_json_freep)))
