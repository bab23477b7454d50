/* The JSON-RPC 2.0 server (rpc.h): the listening socket, per-connection
 * framing (one message per '\n'-terminated line), request validation and
 * dispatch, reply and notification encoding, write queues, peer checks, and
 * the parameter helpers that turn a bad parameter into a -32602 naming it.
 *
 * Everything here runs on the event loop thread. Nothing blocks: sockets are
 * non-blocking, output is queued and written when the socket is writable.
 *
 * Connection lifetime: the server's list holds one reference to each open
 * connection, every request in flight holds one more. A connection closes
 * (fd closed, close handler called) on peer hangup, on an I/O error, after
 * flushing a fatal framing error, or when more than RPC_OUT_QUEUE_MAX bytes
 * wait and the peer has taken nothing for the stall timeout; replies to a
 * closed connection are dropped, and the memory goes when the last request
 * holding it is finished.
 *
 * Input hygiene: a line must be well-formed UTF-8 (a strict JSON client
 * must be able to read back whatever we store and echo) and no string in it
 * may hold NUL (cJSON keeps C strings, so "x\u0000y" would silently become
 * "x" — a different path, name or argument than the client sent).
 *
 * A peer that only shuts down its writing side (shutdown(SHUT_WR), as
 * `nc -N` or a pipe into socat does) still gets the answers to everything it
 * sent: the connection closes once those requests are finished and flushed. */
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <time.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <systemd/sd-daemon.h>
#include "libcore/log.h"
#include "sandboxd/limits.h"
#include "sandboxd/rpc.h"
#include "sandboxd/schema.h"
#include "sandboxd/text.h"

/* A peer that stops reading may not make the daemon hold unbounded memory.
 * Above RPC_OUT_QUEUE_MAX unsent bytes (rpc.h) no further request of the
 * connection is started and its input is no longer read (no new requests,
 * so no new answers), and if the peer then takes no byte for the stall
 * timeout it is dropped. A slow reader is never dropped: sources of
 * unbounded output (command streams) stop at RPC_CONN_HIGH_WATER. */
#define RPC_STALL_TIMEOUT_MS_DEFAULT 30000u
/* Bulk requests (large answers) a connection runs at once. */
#define RPC_BULK_IN_FLIGHT 1
/* TLS connections together: at most this many bulk requests in flight, and
 * none starts while their queued answers pass RPC_REMOTE_OUT_BUDGET, so
 * many slow remote readers cannot pin the daemon's memory with large
 * answers (each up to about 86 MiB of base64 for a 64 MiB fs.read). The
 * Unix socket is not bound by them. */
#define RPC_REMOTE_BULK_MAX 8u
#define RPC_REMOTE_OUT_BUDGET (256u * 1024 * 1024)
/* After freeing a buffer at least this big, memory goes back to the
 * system (malloc_trim): a flood's peak must not stay the daemon's size. */
#define RPC_TRIM_BYTES (1u * 1024 * 1024)
/* Read size, and reads per wakeup, so one chatty connection cannot starve
 * the others (epoll is level-triggered: unread input wakes us again). */
#define RPC_READ_CHUNK (64u * 1024)
/* The server-wide bound on input buffered for unterminated lines: each
 * connection's buffer beyond its first chunk is charged to it, so many
 * clients each sending a long partial line cannot grow the daemon without
 * bound (one line alone is bounded by maxLineBytes). */
#define RPC_INPUT_BUDGET_MIN (256u * 1024 * 1024)
#define RPC_READS_PER_WAKEUP 16
/* Back-off when accept() fails for lack of file descriptors: the listening
 * socket stays readable, so retrying at once would spin. */
#define RPC_ACCEPT_BACKOFF_USEC (100 * 1000)
/* At most one accept-failure warning per this period; the others are counted
 * into the next one. */
#define RPC_ACCEPT_LOG_USEC (10 * 1000 * 1000)
#define RPC_MAX_CONNS_USER_DEFAULT 256
#define RPC_MAX_CONNS_ROOT_DEFAULT 1024

/* Upper bounds of the latency histogram, in microseconds. */
static const uint64_t rpc_buckets_usec[] = { 1000, 5000, 10000, 50000, 100000, 500000, 1000000, 5000000, 30000000 };
#define RPC_N_BUCKETS (sizeof(rpc_buckets_usec) / sizeof(rpc_buckets_usec[0]))

typedef struct rpc_method {
        char *name;
        rpc_handler handler;
        void *userdata;
        bool bulk;
        uint64_t ok, errors;                /* finished requests */
        uint64_t buckets[RPC_N_BUCKETS + 1];  /* non-cumulative; the last is +Inf */
        uint64_t sum_usec;
} rpc_method;

struct rpc_conn {
        unsigned refs;
        rpc_server *server;       /* NULL once closed */
        int fd;
        sd_event_source *io;
        sd_event_source *close_later;  /* deferred close, holds a reference */
        struct ucred cred;
        bool open;                /* accepted, not closed, not doomed */
        bool accepted;            /* passed the peer check: the close handler hears of it */
        bool counted;             /* charged to its uid's connection count */
        bool read_eof;            /* the peer shut down its writing side */
        bool close_after_flush;   /* a fatal error line is queued: stop reading */
        bool congested;           /* passed RPC_CONN_HIGH_WATER, not yet drained */
        uint64_t progress_usec;   /* CLOCK_MONOTONIC: the peer last took bytes, or the queue filled */
        sd_event_source *stall;   /* armed while more than RPC_OUT_QUEUE_MAX wait */
        unsigned in_flight;       /* requests handed to handlers, not yet finished */
        unsigned bulk_in_flight;  /* ... of them bulk */
        bool held;                /* complete lines wait in `in`: dispatch paused (see conn_may_start) */
        sd_event_source *kick;    /* deferred resume of held lines, holds a reference */
        char *in;                 /* unframed input */
        size_t in_len, in_alloc, in_scanned;
        char *out;                /* queued output, out_off bytes already written */
        size_t out_len, out_off, out_alloc;
        int fds[RPC_CONN_FDS];    /* received with SCM_RIGHTS, oldest first (rpc_request_take_fd) */
        unsigned n_fds;
        rpc_request *pending;     /* requests in flight, for request.cancel */
        /* TLS connections only (ssl != NULL): */
        SSL *ssl;
        bool handshaking;         /* SSL_do_handshake not finished: no request is read */
        bool read_wants_write;    /* the last SSL_read needs the socket writable */
        bool write_wants_read;    /* the last SSL_write needs the socket readable */
        size_t ssl_write_len;     /* a write to repeat with this length (SSL_write's retry rule) */
        sd_event_source *hs_timer;   /* the handshake deadline */
        sd_event_source *ssl_more;   /* deferred read of records OpenSSL already holds; a reference */
        void *identity;           /* from the tls_accept hook, freed with the last reference */
        rpc_identity_free_fn identity_free;
        struct in6_addr addr;     /* the peer's address (IPv4 mapped), for the per-address cap */
        bool addr_counted;
        bool remote;              /* a TLS connection: charged to the remote input budget */
        uint64_t in_progress_usec;   /* CLOCK_MONOTONIC: the last bytes of input arrived */
        sd_event_source *in_idle;    /* armed while an unfinished line waits (conn_arm_partial) */
        char peer[64];            /* "ADDR:PORT", or "uid N pid N" */
        char peer_key[80];        /* the client, for the output budget (rpc_peer_key_fn); "" until known */
        rpc_conn *prev, *next;
};

typedef struct tls_listener {
        rpc_server *server;
        int fd;
        char *name;
        SSL_CTX *ctx;
        sd_event_source *io;
        sd_event_source *backoff; /* accepts paused after EMFILE */
} tls_listener;

#define RPC_TLS_LISTENERS_MAX 8
#define RPC_TLS_HANDSHAKE_MS_DEFAULT 5000u
#define RPC_TLS_CONNS_DEFAULT 256u
#define RPC_TLS_CONNS_ADDR_DEFAULT 64u
#define RPC_TLS_HANDSHAKES_DEFAULT 64u
/* The most bytes one SSL_write is handed: a record layer's worth of
 * batches, so one connection's large answer does not hold the loop. */
#define RPC_TLS_WRITE_CHUNK (256u * 1024)

struct rpc_server {
        sd_event *event;
        int listen_fd;
        sd_event_source *listen_io;
        sd_event_source *accept_backoff;  /* created at start, disabled: arming it needs no new fd */
        bool backing_off;         /* listen_io is off until accept_backoff fires */
        int reserve_fd;           /* /dev/null, given up to answer a client at EMFILE */
        uint64_t accept_logged_usec;  /* CLOCK_MONOTONIC of the last accept-failure warning */
        unsigned accept_unlogged; /* failures since then */
        unsigned max_conns_user, max_conns_root;
        struct { uid_t uid; unsigned n; } *uid_conns;  /* open connections per peer uid */
        size_t n_uid_conns;
        char *bound_path;         /* the socket file we created, unlinked on free */
        dev_t bound_dev;
        ino_t bound_ino;
        size_t max_line_bytes;
        size_t in_budget;         /* most bytes of long partial lines across all connections */
        size_t in_charged;        /* ... held now (input buffers beyond their first chunk) */
        size_t in_budget_remote;  /* the same for TLS connections, a pool of their own */
        size_t in_charged_remote;
        size_t out_budget;        /* most bytes of output buffers across all connections (rpc.h) */
        size_t out_charged;       /* ... allocated now */
        uint64_t stall_usec;
        gid_t socket_gid;
        rpc_method *methods;
        size_t n_methods;
        rpc_close_handler close_handler;
        void *close_userdata;
        rpc_drain_handler drain_handler;
        void *drain_userdata;
        rpc_params_check params_check;
        rpc_authorize_fn authorize;
        rpc_message_filter_fn message_filter;
        void *message_filter_userdata;
        rpc_peer_key_fn peer_key;
        void *peer_key_userdata;
        void *authorize_userdata;
        tls_listener tls[RPC_TLS_LISTENERS_MAX];
        size_t n_tls;
        rpc_tls_accept_fn tls_accept;
        rpc_identity_free_fn tls_identity_free;
        void *tls_userdata;
        uint64_t tls_handshake_usec;
        unsigned tls_max_conns, tls_max_conns_addr, tls_max_handshakes;
        unsigned tls_conns, tls_handshakes;
        struct { struct in6_addr addr; unsigned n; } *addr_conns;  /* open TLS connections per address */
        size_t n_addr_conns;
        uint64_t tls_refuse_logged_usec;  /* rate limit of cap refusals */
        unsigned tls_refuse_unlogged;
        rpc_conn *conns;
        /* rpc_server_stop(): */
        int stop_phase;           /* STOP_* */
        sd_event_source *stop_timer;
        uint64_t stop_rollback_usec, stop_flush_usec;
        rpc_stopped_fn stopped;
        void *stopped_userdata;
};

/* The phases of rpc_server_stop(), in order. */
enum {
        STOP_NONE,      /* serving */
        STOP_FINISH,    /* new requests refused; those in flight may finish */
        STOP_ROLLBACK,  /* the cancellable ones are being rolled back */
        STOP_FLUSH,     /* every request answered: writing the answers out */
        STOP_DONE,      /* the stopped callback ran */
};

static void conn_close(rpc_conn *c);
static void conn_update_events(rpc_conn *c);
static void stop_check(rpc_server *s);

/* Adds delta (+1 or -1) to uid's count of open connections and returns the
 * count before the change. Entries that reach zero are dropped, so the table
 * holds only the uids connected now. */
static unsigned uid_conns_add(rpc_server *s, uid_t uid, int delta) {
        for (size_t i = 0; i < s->n_uid_conns; i++) {
                if (s->uid_conns[i].uid != uid)
                        continue;
                unsigned before = s->uid_conns[i].n;
                s->uid_conns[i].n += delta;
                if (s->uid_conns[i].n == 0)
                        s->uid_conns[i] = s->uid_conns[--s->n_uid_conns];
                return before;
        }
        if (delta > 0) {
                void *p = reallocarray(s->uid_conns, s->n_uid_conns + 1, sizeof(*s->uid_conns));
                if (!p)
                        return UINT_MAX;  /* no memory: refused like a uid over its cap */
                s->uid_conns = p;
                s->uid_conns[s->n_uid_conns].uid = uid;
                s->uid_conns[s->n_uid_conns].n = 1;
                s->n_uid_conns++;
        }
        return 0;
}

static unsigned uid_conns_get(const rpc_server *s, uid_t uid) {
        for (size_t i = 0; i < s->n_uid_conns; i++)
                if (s->uid_conns[i].uid == uid)
                        return s->uid_conns[i].n;
        return 0;
}

/* ---- TLS connection accounting ---- */

/* Adds delta to the count of open TLS connections from `addr`; returns the
 * count before (UINT_MAX: no memory for a new entry). */
static unsigned addr_conns_add(rpc_server *s, const struct in6_addr *addr, int delta) {
        for (size_t i = 0; i < s->n_addr_conns; i++) {
                if (memcmp(&s->addr_conns[i].addr, addr, sizeof(*addr)) != 0)
                        continue;
                unsigned before = s->addr_conns[i].n;
                s->addr_conns[i].n += delta;
                if (s->addr_conns[i].n == 0)
                        s->addr_conns[i] = s->addr_conns[--s->n_addr_conns];
                return before;
        }
        if (delta > 0) {
                void *p = reallocarray(s->addr_conns, s->n_addr_conns + 1, sizeof(*s->addr_conns));
                if (!p)
                        return UINT_MAX;
                s->addr_conns = p;
                s->addr_conns[s->n_addr_conns].addr = *addr;
                s->addr_conns[s->n_addr_conns].n = 1;
                s->n_addr_conns++;
        }
        return 0;
}

static unsigned addr_conns_get(const rpc_server *s, const struct in6_addr *addr) {
        for (size_t i = 0; i < s->n_addr_conns; i++)
                if (memcmp(&s->addr_conns[i].addr, addr, sizeof(*addr)) == 0)
                        return s->addr_conns[i].n;
        return 0;
}

/* Drops what a TLS connection holds: its timers, its SSL (a close_notify
 * is sent when the handshake had completed; one non-blocking try), its
 * place in the counts. Called from conn_close() before the fd closes. */
static void tls_conn_release(rpc_server *s, rpc_conn *c) {
        c->hs_timer = sd_event_source_disable_unref(c->hs_timer);
        if (c->ssl_more) {
                c->ssl_more = sd_event_source_disable_unref(c->ssl_more);
                rpc_conn_unref(c);  /* conn_close holds its own reference */
        }
        if (c->handshaking) {
                s->tls_handshakes--;
                c->handshaking = false;
        } else if (c->fd >= 0) {
                ERR_clear_error();
                (void) SSL_shutdown(c->ssl);
        }
        ERR_clear_error();
        SSL_free(c->ssl);
        c->ssl = NULL;
        s->tls_conns--;
        if (c->addr_counted) {
                addr_conns_add(s, &c->addr, -1);
                c->addr_counted = false;
        }
}

/* Writes one error line to a connection we do not keep, then closes it. The
 * socket is fresh, so the short line fits its send buffer; a peer that is
 * gone simply does not read it. */
static void refuse_fd(int fd, const char *reason, const char *message) {
        cJSON *msg = cJSON_CreateObject();
        cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
        cJSON_AddNullToObject(msg, "id");
        cJSON *err = cJSON_AddObjectToObject(msg, "error");
        cJSON_AddNumberToObject(err, "code", RPC_APP_ERROR);
        cJSON_AddStringToObject(err, "message", message);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(err, "data"), "reason", reason);
        _cleanup_free_ char *text = cJSON_PrintUnformatted(msg);
        cJSON_Delete(msg);
        if (text) {
                struct iovec iov[2] = { { text, strlen(text) }, { (char *) "\n", 1 } };
                (void) !writev(fd, iov, 2);
        }
        close(fd);
}

/* ---- connection references and teardown ---- */

rpc_conn *rpc_conn_ref(rpc_conn *c) {
        if (c)
                c->refs++;
        return c;
}

void rpc_conn_unref(rpc_conn *c) {
        if (!c || --c->refs > 0)
                return;
        /* The last reference: conn_close() already ran (the server's list
         * holds a reference while the connection is open). */
        bool big = c->in_alloc >= RPC_TRIM_BYTES;
        for (unsigned i = 0; i < c->n_fds; i++)
                close(c->fds[i]);
        if (c->identity && c->identity_free)
                c->identity_free(c->identity);
        free(c->in);
        free(c->out);
        free(c);
        if (big)
                malloc_trim(0);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(rpc_conn, rpc_conn_unref);

bool rpc_conn_is_open(const rpc_conn *c) {
        return c && c->open && !c->close_after_flush;
}

uid_t rpc_conn_uid(const rpc_conn *c) {
        return c->cred.uid;
}

gid_t rpc_conn_gid(const rpc_conn *c) {
        return c->cred.gid;
}

int rpc_conn_peer_groups(const rpc_conn *c, gid_t **ret_groups, size_t *ret_n) {
        if (!c || c->fd < 0)
                return -EBADF;
        socklen_t len = 64 * sizeof(gid_t);
        for (int attempt = 0; attempt < 2; attempt++) {
                _cleanup_free_ gid_t *groups = malloc(len ? len : sizeof(gid_t));
                if (!groups)
                        return -ENOMEM;
                if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
                        if (errno == ERANGE)
                                continue;  /* len now holds the size needed */
                        return negative_errno();
                }
                *ret_n = len / sizeof(gid_t);
                *ret_groups = TAKE_PTR(groups);
                return 0;
        }
        return -ERANGE;
}

void *rpc_conn_identity(const rpc_conn *c) {
        return c ? c->identity : NULL;
}

int rpc_conn_set_identity(rpc_conn *c, void *identity, rpc_identity_free_fn free_fn) {
        if (!c || c->ssl || c->identity)
                return -EPERM;
        c->identity = identity;
        c->identity_free = free_fn;
        return 0;
}

bool rpc_conn_is_tls(const rpc_conn *c) {
        return c && c->ssl;
}

const char *rpc_conn_peer(const rpc_conn *c) {
        return c->peer;
}

size_t rpc_conn_queued(const rpc_conn *c) {
        return c ? c->out_len - c->out_off : 0;
}

bool rpc_conn_is_congested(const rpc_conn *c) {
        return c && c->server && c->congested;
}

void rpc_server_set_drain_handler(rpc_server *s, rpc_drain_handler h, void *userdata) {
        s->drain_handler = h;
        s->drain_userdata = userdata;
}

static int close_later_cb(sd_event_source *s, void *userdata) {
        conn_close(userdata);
        return 0;
}

/* Closes from a place where closing now could pull the connection from under
 * a caller (a handler replying, a notification from the manager): the close
 * handler then runs on a later loop iteration, never nested in a handler. */
static void conn_close_soon(rpc_conn *c) {
        c->open = false;
        if (c->close_later || !c->server)
                return;
        if (sd_event_add_defer(c->server->event, &c->close_later, close_later_cb, c) < 0) {
                /* No memory for a defer source: stop listening for input and
                 * let the next I/O event (or server teardown) close it. */
                log_warning("rpc: cannot schedule connection close");
                return;
        }
        rpc_conn_ref(c);
}

static size_t in_charge(size_t alloc) {
        return alloc > RPC_READ_CHUNK ? alloc - RPC_READ_CHUNK : 0;
}

/* The pool a connection's input is charged to: TLS connections have their
 * own, so remote clients cannot take the buffers local clients need. */
static size_t *conn_charged(rpc_conn *c) {
        return c->remote ? &c->server->in_charged_remote : &c->server->in_charged;
}

static size_t conn_budget(const rpc_conn *c) {
        return c->remote ? c->server->in_budget_remote : c->server->in_budget;
}

/* Frees the input buffer and gives its charge back to the server's budget. */
static void conn_free_input(rpc_conn *c) {
        if (c->server)
                *conn_charged(c) -= in_charge(c->in_alloc);
        bool big = c->in_alloc >= RPC_TRIM_BYTES;
        free(c->in);
        c->in = NULL;
        c->in_len = c->in_scanned = c->in_alloc = 0;
        if (big)
                malloc_trim(0);
}

/* Frees the output buffer (whatever it still holds is dropped) and gives
 * its charge back to the server's output budget. */
static void conn_free_output(rpc_conn *c) {
        if (c->server)
                c->server->out_charged -= c->out_alloc;
        free(c->out);
        c->out = NULL;
        c->out_len = c->out_off = c->out_alloc = 0;
}

static void conn_close(rpc_conn *c) {
        rpc_server *s = c->server;
        if (!s)
                return;
        rpc_conn_ref(c);  /* keeps c alive through the close handler */
        bool was_accepted = c->accepted;
        c->open = false;
        c->accepted = false;
        if (c->counted) {
                uid_conns_add(s, c->cred.uid, -1);
                c->counted = false;
        }
        c->io = sd_event_source_disable_unref(c->io);
        c->stall = sd_event_source_disable_unref(c->stall);
        c->congested = false;
        if (c->close_later) {
                c->close_later = sd_event_source_disable_unref(c->close_later);
                rpc_conn_unref(c);
        }
        if (c->kick) {
                c->kick = sd_event_source_disable_unref(c->kick);
                rpc_conn_unref(c);
        }
        if (c->ssl)
                tls_conn_release(s, c);
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -EBADF;
        bool big = c->out_alloc >= RPC_TRIM_BYTES;
        conn_free_output(c);
        c->held = false;
        if (big)
                malloc_trim(0);
        /* The input buffer may still hold the line a handler runs from; it
         * is freed with the last reference, its charge given back now. */
        *conn_charged(c) -= in_charge(c->in_alloc);
        c->in_idle = sd_event_source_disable_unref(c->in_idle);
        if (c->prev)
                c->prev->next = c->next;
        else
                s->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        c->prev = c->next = NULL;
        c->server = NULL;
        if (was_accepted && s->close_handler)
                s->close_handler(c, s->close_userdata);
        c->refs--;  /* the server list's reference; ours is still held */
        rpc_conn_unref(c);
        stop_check(s);
}

/* ---- output ---- */

static uint64_t conn_now(const rpc_conn *c) {
        uint64_t now = 0;
        (void) sd_event_now(c->server->event, CLOCK_MONOTONIC, &now);
        return now;
}

/* Fires stall_usec after the peer last took bytes while more than
 * RPC_OUT_QUEUE_MAX wait: a peer that reads nothing at all is dropped, one
 * that still reads (however slowly) gets another period. */
static int stall_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        rpc_conn *c = userdata;
        size_t pending = c->out_len - c->out_off;
        if (!c->server || pending <= RPC_OUT_QUEUE_MAX)
                return 0;  /* oneshot: stays off until the queue grows again */
        uint64_t deadline = c->progress_usec + c->server->stall_usec;
        if (usec >= deadline) {
                log_warning("rpc: peer uid %u read nothing for %" PRIu64 " ms with %zu bytes queued; dropping the connection",
                            (unsigned) c->cred.uid, c->server->stall_usec / 1000, pending);
                conn_close(c);
                return 0;
        }
        if (sd_event_source_set_time(src, deadline) < 0 || sd_event_source_set_enabled(src, SD_EVENT_ONESHOT) < 0)
                conn_close_soon(c);
        return 0;
}

/* Past RPC_OUT_QUEUE_MAX: (re)arms the stall check. */
static void conn_arm_stall(rpc_conn *c) {
        uint64_t deadline = c->progress_usec + c->server->stall_usec;
        int r;
        if (c->stall) {
                int enabled = SD_EVENT_OFF;
                if (sd_event_source_get_enabled(c->stall, &enabled) >= 0 && enabled != SD_EVENT_OFF)
                        return;
                r = sd_event_source_set_time(c->stall, deadline);
                if (r >= 0)
                        r = sd_event_source_set_enabled(c->stall, SD_EVENT_ONESHOT);
        } else
                r = sd_event_add_time(c->server->event, &c->stall, CLOCK_MONOTONIC, deadline, 0, stall_cb, c);
        if (r < 0) {
                log_warning("rpc: cannot watch a stalled peer; dropping the connection");
                conn_close_soon(c);
        }
}

/* The client c speaks for (rpc_peer_key_fn), worked out once. */
static const char *conn_peer_key(rpc_conn *c) {
        if (c->peer_key[0])
                return c->peer_key;
        if (c->handshaking)
                return c->peer; /* not yet known: a client of its own, not kept */
        rpc_server *s = c->server;
        if (s && s->peer_key)
                s->peer_key(c, s->peer_key_userdata, c->peer_key, sizeof(c->peer_key));
        if (!c->peer_key[0]) {
                if (c->ssl)
                        snprintf(c->peer_key, sizeof(c->peer_key), "tls %s", c->peer);
                else
                        snprintf(c->peer_key, sizeof(c->peer_key), "uid %u", (unsigned) c->cred.uid);
        }
        return c->peer_key;
}

typedef struct peer_charge {
        const char *key;
        size_t bytes;
        bool waiting; /* output not yet written */
} peer_charge;

static int peer_charge_cmp(const void *a, const void *b) {
        return strcmp(((const peer_charge *) a)->key, ((const peer_charge *) b)->key);
}

/* The client (conn_peer_key) whose open connections hold the most output
 * as allocated, of those with output waiting; NULL when none or out of
 * memory (then every connection is its own client). Borrowed from a
 * connection. O(n log n) in the connections. */
static const char *heaviest_peer(rpc_server *s, size_t *ret_bytes) {
        size_t n = 0;
        for (rpc_conn *x = s->conns; x; x = x->next)
                n += x->open && x->out_alloc;
        _cleanup_free_ peer_charge *v = n ? calloc(n, sizeof(*v)) : NULL;
        if (!v)
                return NULL;
        size_t i = 0;
        for (rpc_conn *x = s->conns; x && i < n; x = x->next)
                if (x->open && x->out_alloc)
                        v[i++] = (peer_charge) { .key = conn_peer_key(x), .bytes = x->out_alloc,
                                                 .waiting = x->out_len > x->out_off };
        qsort(v, i, sizeof(*v), peer_charge_cmp);
        const char *best = NULL;
        size_t best_bytes = 0;
        for (size_t a = 0; a < i;) {
                size_t b = a, sum = 0;
                bool waiting = false;
                for (; b < i && streq(v[b].key, v[a].key); b++) {
                        sum += v[b].bytes;
                        waiting |= v[b].waiting;
                }
                if (waiting && sum > best_bytes) {
                        best = v[a].key;
                        best_bytes = sum;
                }
                a = b;
        }
        *ret_bytes = best_bytes;
        return best;
}

/* Over the output budget (rpc.h): of the client whose connections hold
 * the most output, drops the connection that has taken nothing for the
 * longest time, of those with output waiting, and frees its queue now (its
 * close follows on a later turn of the loop), until the queues fit. */
static void out_budget_enforce(rpc_server *s) {
        while (s->out_charged > s->out_budget) {
                size_t peer_bytes = 0;
                const char *peer = heaviest_peer(s, &peer_bytes);
                rpc_conn *worst = NULL;
                for (rpc_conn *x = s->conns; x; x = x->next)
                        if (x->open && x->out_len > x->out_off && (!peer || streq(conn_peer_key(x), peer)) &&
                            (!worst || x->progress_usec < worst->progress_usec))
                                worst = x;
                if (!worst)
                        return;
                uint64_t now = conn_now(worst);
                log_warning("rpc: the queued output of all connections passed the output budget (%zu MiB, "
                            "outputBudgetMiB); dropping %s, which took nothing for %" PRIu64 " ms with %zu bytes queued, "
                            "of the client holding the most (%s, %zu MiB)",
                            s->out_budget >> 20, worst->peer,
                            now > worst->progress_usec ? (now - worst->progress_usec) / 1000 : 0,
                            worst->out_len - worst->out_off, worst->peer_key, peer_bytes >> 20);
                conn_free_output(worst);
                conn_close_soon(worst);
        }
}

/* Appends one encoded message plus '\n' to the write queue. Takes `msg`. */
static void conn_queue(rpc_conn *c, cJSON *msg) {
        if (!c->open) {
                cJSON_Delete(msg);
                return;
        }
        _cleanup_free_ char *text = cJSON_PrintUnformatted(msg);
        cJSON_Delete(msg);
        if (!text) {
                log_warning("rpc: out of memory encoding a message; dropping the connection");
                return conn_close_soon(c);
        }
        size_t n = strlen(text), pending = c->out_len - c->out_off;
        if (!text_utf8_valid(text, n, NULL)) {
                /* Only strings can hold such bytes (cJSON writes everything
                 * else as ASCII), and a strict client must get UTF-8 even
                 * when a file name or message from a sandbox is not. */
                char *fixed = text_utf8_repair(text, n);
                if (!fixed) {
                        log_warning("rpc: out of memory encoding a message; dropping the connection");
                        return conn_close_soon(c);
                }
                free(text);
                text = fixed;
                n = strlen(text);
        }
        if (pending == 0)
                c->progress_usec = conn_now(c);  /* the peer's clock starts now */
        if (c->out_off > 0 && c->out_off >= pending) {
                memmove(c->out, c->out + c->out_off, pending);
                c->out_len = pending;
                c->out_off = 0;
        }
        if (c->out_len + n + 1 > c->out_alloc) {
                size_t want = c->out_len + n + 1, alloc = c->out_alloc ? c->out_alloc : 4096;
                while (alloc < want)
                        alloc *= 2;
                char *p = realloc(c->out, alloc);
                if (!p) {
                        log_warning("rpc: out of memory queueing a message; dropping the connection");
                        return conn_close_soon(c);
                }
                c->server->out_charged += alloc - c->out_alloc;
                c->out = p;
                c->out_alloc = alloc;
        }
        memcpy(c->out + c->out_len, text, n);
        c->out[c->out_len + n] = '\n';
        c->out_len += n + 1;
        if (c->server->out_charged > c->server->out_budget)
                out_budget_enforce(c->server);
        if (!c->open)
                return; /* dropped for the budget itself */
        pending = c->out_len - c->out_off;
        if (pending > RPC_CONN_HIGH_WATER)
                c->congested = true;
        if (pending > RPC_OUT_QUEUE_MAX)
                conn_arm_stall(c);
        conn_update_events(c);
}

/* Everything queued is written: a buffer that grew large goes back, so an
 * idle connection holds none of the output budget for the burst it had. */
static void conn_drained_output(rpc_conn *c) {
        c->out_off = c->out_len = 0;
        if (c->out_alloc >= RPC_TRIM_BYTES)
                conn_free_output(c);
}

/* Writes what the socket takes. Returns 0, or a negative errno when the
 * connection is broken. MSG_NOSIGNAL: a vanished peer is an error here, not
 * a SIGPIPE for the whole daemon. */
static int tls_flush(rpc_conn *c);
static int conn_flush(rpc_conn *c) {
        if (c->ssl)
                return tls_flush(c);
        while (c->out_off < c->out_len) {
                ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        return -errno;
                }
                c->out_off += (size_t) n;
                if (n > 0)
                        c->progress_usec = conn_now(c);
        }
        conn_drained_output(c);
        return 0;
}

/* conn_flush() over TLS. SSL_write must be repeated with the same length
 * after WANT_READ/WANT_WRITE (the buffer may move:
 * SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER), so that length is kept. */
static int tls_flush(rpc_conn *c) {
        if (c->handshaking)
                return 0;
        while (c->out_off < c->out_len) {
                size_t pending = c->out_len - c->out_off;
                size_t len = c->ssl_write_len ? c->ssl_write_len : pending < RPC_TLS_WRITE_CHUNK ? pending : RPC_TLS_WRITE_CHUNK;
                size_t n = 0;
                ERR_clear_error();
                errno = 0;
                int r = SSL_write_ex(c->ssl, c->out + c->out_off, len, &n);
                c->write_wants_read = false;
                if (r == 1) {
                        c->ssl_write_len = 0;
                        c->out_off += n;
                        if (n > 0)
                                c->progress_usec = conn_now(c);
                        continue;
                }
                int e = SSL_get_error(c->ssl, r);
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                        c->ssl_write_len = len;
                        c->write_wants_read = e == SSL_ERROR_WANT_READ;
                        return 0;
                }
                return e == SSL_ERROR_SYSCALL && errno ? -errno : -EPROTO;
        }
        conn_drained_output(c);
        return 0;
}

static int ssl_more_cb(sd_event_source *src, void *userdata);

/* OpenSSL may hold decrypted bytes of a record we read only in part (our
 * buffer had less room) that epoll cannot see: while input is wanted, read
 * them on the next loop iteration. SSL_pending, not SSL_has_pending: the
 * latter also counts the bytes of an unfinished record, and a peer that
 * sends half a record would then keep the loop spinning. Without
 * read-ahead (the default) OpenSSL never reads past the record it is on,
 * so nothing else can wait unseen. */
static void tls_arm_more(rpc_conn *c) {
        if (c->ssl_more || !c->server || SSL_pending(c->ssl) <= 0)
                return;
        if (sd_event_add_defer(c->server->event, &c->ssl_more, ssl_more_cb, c) < 0) {
                log_warning("rpc: cannot schedule a TLS read; dropping the connection");
                conn_close_soon(c);
                return;
        }
        rpc_conn_ref(c);
}

/* After a write: a congested connection that drained tells its sources. */
static void conn_check_drained(rpc_conn *c) {
        if (!c->congested || c->out_len - c->out_off > RPC_CONN_LOW_WATER)
                return;
        c->congested = false;
        rpc_server *s = c->server;
        if (s && c->accepted && s->drain_handler)
                s->drain_handler(c, s->drain_userdata);
}

static void conn_update_events(rpc_conn *c) {
        if (!c->io)
                return;
        /* To be closed once its output is written, and nothing is left
         * to write (marked after its last message went out): no EPOLLOUT
         * will come to close it, and its input is no longer read, so it
         * would stay open, holding an fd and a slot of its uid's
         * maxConnectionsPerUser, until the peer hung up (a peer refused
         * for its group kept its connection while answers were written at
         * once). */
        if (c->close_after_flush && c->open && !c->ssl && c->out_off == c->out_len) {
                conn_close_soon(c);
                return;
        }
        uint32_t ev = 0;
        if (c->open && !c->read_eof && !c->close_after_flush && !c->held && c->out_len - c->out_off <= RPC_OUT_QUEUE_MAX)
                ev |= EPOLLIN | EPOLLRDHUP;
        if (c->out_off < c->out_len)
                ev |= EPOLLOUT;
        if (c->ssl && !c->handshaking) {
                if ((ev & EPOLLIN) && SSL_pending(c->ssl) > 0)
                        tls_arm_more(c);
                if (c->read_wants_write && (ev & EPOLLIN))
                        ev |= EPOLLOUT;
                if (c->write_wants_read && (ev & EPOLLOUT))
                        ev |= EPOLLIN;
        }
        if (sd_event_source_set_io_events(c->io, ev) < 0)
                conn_close_soon(c);
}

static cJSON *envelope(cJSON *id) {
        cJSON *msg = cJSON_CreateObject();
        if (!msg) {
                cJSON_Delete(id);
                return NULL;
        }
        cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
        cJSON_AddItemToObject(msg, "id", id ? id : cJSON_CreateNull());
        return msg;
}

/* Builds an error response. `id` is taken (NULL: null). */
static cJSON *error_message(cJSON *id, int code, const char *reason, const char *field,
                            const char *message) {
        cJSON *msg = envelope(id);
        cJSON *err = cJSON_AddObjectToObject(msg, "error");
        if (!err)
                return msg;
        cJSON_AddNumberToObject(err, "code", code);
        cJSON_AddStringToObject(err, "message", message);
        if (reason || field) {
                cJSON *data = cJSON_AddObjectToObject(err, "data");
                if (reason)
                        cJSON_AddStringToObject(data, "reason", reason);
                if (field)
                        cJSON_AddStringToObject(data, "field", field);
        }
        return msg;
}

/* error_message() with the members of `extra` (taken; NULL: none) added
 * to error.data after reason and field. */
static cJSON *error_message_data(cJSON *id, int code, const char *reason, const char *field,
                                 const char *message, cJSON *extra) {
        cJSON *msg = error_message(id, code, reason, field, message);
        cJSON *err = cJSON_GetObjectItemCaseSensitive(msg, "error");
        if (err && extra) {
                cJSON *data = cJSON_GetObjectItemCaseSensitive(err, "data");
                if (!data)
                        data = cJSON_AddObjectToObject(err, "data");
                while (data && extra->child) {
                        cJSON *item = cJSON_DetachItemViaPointer(extra, extra->child);
                        const char *k = item->string;
                        cJSON_DeleteItemFromObjectCaseSensitive(data, k);
                        cJSON_AddItemToObject(data, k, item);
                }
        }
        cJSON_Delete(extra);
        return msg;
}

/* ---- requests ---- */

static void conn_kick(rpc_conn *c);

static uint64_t monotonic_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void request_account(rpc_request *req) {
        rpc_server *s = req->conn->server;  /* NULL once the connection closed */
        if (!s || !req->start_usec || req->method_index < 0 || (size_t) req->method_index >= s->n_methods)
                return;
        rpc_method *m = &s->methods[req->method_index];
        uint64_t d = monotonic_usec() - req->start_usec;
        size_t b = 0;
        while (b < RPC_N_BUCKETS && d > rpc_buckets_usec[b])
                b++;
        m->buckets[b]++;
        m->sum_usec += d;
        if (req->failed)
                m->errors++;
        else
                m->ok++;
}

static void request_free(rpc_request *req) {
        rpc_conn *c = req->conn;
        bool bulk = req->bulk;
        if (req->pending_prev)
                req->pending_prev->pending_next = req->pending_next;
        else if (c->pending == req)
                c->pending = req->pending_next;
        if (req->pending_next)
                req->pending_next->pending_prev = req->pending_prev;
        request_account(req);
        cJSON_Delete(req->id);
        cJSON_Delete(req->params);
        free(req->method);
        free(req);
        if (bulk && c->bulk_in_flight > 0 && --c->bulk_in_flight < RPC_BULK_IN_FLIGHT)
                conn_kick(c);  /* a line held for this slot may start */
        if (c->in_flight > 0 && --c->in_flight == 0 && c->read_eof && c->open && !c->held)
                /* The half-closed peer's last answer is queued: close once
                 * it is flushed (the defer runs after this iteration's I/O). */
                c->close_after_flush = true, conn_update_events(c);
        if (c->close_after_flush && c->out_off == c->out_len && c->open)
                conn_close_soon(c);
        rpc_server *s = c->server;
        rpc_conn_unref(c);
        if (s)
                stop_check(s);
}

void rpc_reply(rpc_request *req, cJSON *result) {
        if (req->id && rpc_conn_is_open(req->conn)) {
                cJSON *msg = envelope(TAKE_PTR(req->id));
                if (!result)
                        result = cJSON_CreateObject();
                if (req->result_filter && result)
                        req->result_filter(req, result, req->result_filter_userdata);
                if (msg)
                        cJSON_AddItemToObject(msg, "result", TAKE_PTR(result));
                conn_queue(req->conn, msg);
        }
        cJSON_Delete(result);
        request_free(req);
}

/* The backstop behind text_quote(): no error message is longer than
 * RPC_MESSAGE_MAX bytes, whatever a format was given. Cut at a character
 * boundary, marked with "...". */
#define RPC_MESSAGE_MAX 1024
static void cut_message(char *message) {
        if (!message || strlen(message) <= RPC_MESSAGE_MAX)
                return;
        size_t n = RPC_MESSAGE_MAX - 3;
        while (n > 0 && ((unsigned char)message[n] & 0xC0) == 0x80)
                n--;
        memcpy(message + n, "...", 4);
}

/* The server's message filter (rpc_server_set_message_filter), then the
 * length cut: what every error message goes through before it is queued. */
static void finish_message(rpc_conn *c, char **message) {
        if (*message && c->server && c->server->message_filter)
                c->server->message_filter(c, message, c->server->message_filter_userdata);
        cut_message(*message);
}

static void reply_errorv(rpc_request *req, int code, const char *reason, const char *field,
                         const char *fmt, va_list ap) _printf_(5, 0);
static void reply_errorv(rpc_request *req, int code, const char *reason, const char *field,
                         const char *fmt, va_list ap) {
        req->failed = true;
        if (req->id && rpc_conn_is_open(req->conn)) {
                _cleanup_free_ char *message = NULL;
                cJSON *extra = NULL;
                if (req->stop_cancelled && code == RPC_REQUEST_CANCELLED) {
                        /* Rolled back by rpc_server_stop(), not by the
                         * caller: it did not happen, and may be retried. */
                        code = RPC_APP_ERROR;
                        reason = "unavailable";
                        if (asprintf(&message, "sandboxd is stopping: %s did not finish within the shutdown grace "
                                     "and was rolled back, nothing of it was kept; retry once the daemon is back",
                                     req->method) < 0)
                                message = NULL;
                        extra = cJSON_CreateObject();
                        cJSON_AddBoolToObject(extra, "completed", false);
                } else if (vasprintf(&message, fmt, ap) < 0)
                        message = NULL;
                finish_message(req->conn, &message);
                conn_queue(req->conn, error_message_data(TAKE_PTR(req->id), code, reason, field,
                                                         message ? message : "error", extra));
        }
        request_free(req);
}

void rpc_reply_error(rpc_request *req, int code, const char *reason, const char *field,
                     const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        reply_errorv(req, code, reason, field, fmt, ap);
        va_end(ap);
}

void rpc_reply_sb_error(rpc_request *req, const sb_error *err) {
        if (!err)
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "internal error");
        if (err->field && (!err->reason || streq(err->reason, "invalid_params")))
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, err->field, "%s", err->message);
        if (err->reason && streq(err->reason, "cancelled"))
                return rpc_reply_error(req, RPC_REQUEST_CANCELLED, "cancelled", NULL, "%s", err->message);
        rpc_reply_error(req, RPC_APP_ERROR, err->reason ? err->reason : "failed", err->field, "%s",
                        err->message);
}

void rpc_reply_unavailable(rpc_request *req, cJSON *data, const char *fmt, ...) {
        req->failed = true;
        if (req->id && rpc_conn_is_open(req->conn)) {
                _cleanup_free_ char *message = NULL;
                va_list ap;
                va_start(ap, fmt);
                if (vasprintf(&message, fmt, ap) < 0)
                        message = NULL;
                va_end(ap);
                finish_message(req->conn, &message);
                conn_queue(req->conn, error_message_data(TAKE_PTR(req->id), RPC_APP_ERROR, "unavailable", NULL,
                                                         message ? message : "unavailable", TAKE_PTR(data)));
        }
        cJSON_Delete(data);
        request_free(req);
}

void rpc_reply_error_data(rpc_request *req, const char *reason, cJSON *data, const char *fmt, ...) {
        req->failed = true;
        if (req->id && rpc_conn_is_open(req->conn)) {
                _cleanup_free_ char *message = NULL;
                va_list ap;
                va_start(ap, fmt);
                if (vasprintf(&message, fmt, ap) < 0)
                        message = NULL;
                va_end(ap);
                finish_message(req->conn, &message);
                conn_queue(req->conn, error_message_data(TAKE_PTR(req->id), RPC_APP_ERROR, reason, NULL,
                                                         message ? message : reason, TAKE_PTR(data)));
        }
        cJSON_Delete(data);
        request_free(req);
}

void rpc_notify(rpc_conn *conn, const char *method, cJSON *params) {
        if (!rpc_conn_is_open(conn)) {
                cJSON_Delete(params);
                return;
        }
        cJSON *msg = cJSON_CreateObject();
        if (msg) {
                cJSON_AddStringToObject(msg, "jsonrpc", "2.0");
                cJSON_AddStringToObject(msg, "method", method);
                if (params)
                        cJSON_AddItemToObject(msg, "params", TAKE_PTR(params));
        }
        cJSON_Delete(params);
        if (msg)
                conn_queue(conn, msg);
}

/* Answers a line that never became a request (parse error, invalid request,
 * framing error). `id` is taken. */
static void reply_raw_error(rpc_conn *c, cJSON *id, int code, const char *fmt, ...) _printf_(4, 5);
static void reply_raw_error(rpc_conn *c, cJSON *id, int code, const char *fmt, ...) {
        _cleanup_free_ char *message = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&message, fmt, ap) < 0)
                message = NULL;
        va_end(ap);
        conn_queue(c, error_message(id, code, NULL, NULL, message ? message : "error"));
}

static const rpc_method *find_method(const rpc_server *s, const char *name) {
        for (size_t i = 0; i < s->n_methods; i++)
                if (streq(s->methods[i].name, name))
                        return &s->methods[i];
        return NULL;
}

/* True when `id` may be echoed exactly (JSON-RPC 2.0 §4: the response
 * carries the same id). A string always can (cJSON keeps its bytes); a
 * number only when it is an integer below 2^53 in magnitude, the range in
 * which a double holds every integer, so 1e400, 1.5 and a 30-digit id are
 * refused rather than answered with null or a rounded id (§4: numbers
 * SHOULD NOT contain fractional parts). */
static bool id_echoable(const cJSON *id) {
        if (!id || !(cJSON_IsString(id) || cJSON_IsNumber(id)))
                return false;
        if (cJSON_IsString(id))
                return true;
        double d = id->valuedouble;
        return isfinite(d) && d == trunc(d) && fabs(d) <= 9007199254740991.0;
}

/* A copy of an echoable id to answer with: a number is printed as its
 * integer digits (cJSON would print 1e15 as "1e+15"). NULL: out of memory. */
static cJSON *id_copy(const cJSON *id) {
        if (!cJSON_IsNumber(id))
                return cJSON_Duplicate(id, false);
        char buf[32];
        snprintf(buf, sizeof(buf), "%.0f", id->valuedouble);
        return cJSON_CreateRaw(buf);
}

/* Checks the request object (JSON-RPC 2.0 §4). On a violation, answers
 * -32600 itself and returns false. *ret_has_id tells a request from a
 * notification. */
static bool request_is_valid(rpc_conn *c, cJSON *root, bool *ret_has_id) {
        if (cJSON_IsArray(root)) {
                reply_raw_error(c, NULL, RPC_INVALID_REQUEST, "batch requests are not supported");
                return false;
        }
        if (!cJSON_IsObject(root)) {
                reply_raw_error(c, NULL, RPC_INVALID_REQUEST, "a request must be a JSON object");
                return false;
        }
        /* The members of JSON-RPC 2.0 §4 only, each once: cJSON keeps a
         * repeated member twice and a reader picks one of them, and a
         * misspelt "parms" would run the method with no params at all. */
        static const char *const members[] = {"jsonrpc", "id", "method", "params"};
        _cleanup_error_ sb_error *err = NULL;
        if (schema_check_members(root, members, ELEMENTSOF(members), "invalid request", &err) < 0) {
                cJSON *dup_id = cJSON_GetObjectItemCaseSensitive(root, "id");
                bool usable = id_echoable(dup_id) && !(err->field && streq(err->field, "id"));
                reply_raw_error(c, usable ? id_copy(dup_id) : NULL, RPC_INVALID_REQUEST, "%s",
                                err->message);
                return false;
        }
        cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
        if (id && !cJSON_IsString(id) && !cJSON_IsNumber(id) && !cJSON_IsNull(id)) {
                reply_raw_error(c, NULL, RPC_INVALID_REQUEST, "id must be a string, a number or null");
                return false;
        }
        if (cJSON_IsNumber(id) && !id_echoable(id)) {
                reply_raw_error(c, NULL, RPC_INVALID_REQUEST,
                                "invalid request: id not representable exactly: a number id must be an integer "
                                "from -(2^53-1) to 2^53-1; use a string id");
                return false;
        }
        cJSON *reply_id = id ? id_copy(id) : NULL;
        cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "jsonrpc");
        cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "method");
        cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "params");
        if (!cJSON_IsString(v) || !streq(v->valuestring, "2.0"))
                reply_raw_error(c, reply_id, RPC_INVALID_REQUEST, "jsonrpc must be \"2.0\"");
        else if (!cJSON_IsString(m))
                reply_raw_error(c, reply_id, RPC_INVALID_REQUEST, "method must be a string");
        else if (p && !cJSON_IsObject(p) && !cJSON_IsArray(p))
                reply_raw_error(c, reply_id, RPC_INVALID_REQUEST, "params must be an object or an array");
        else {
                cJSON_Delete(reply_id);
                *ret_has_id = id != NULL;
                return true;
        }
        return false;
}

/* True when a string in `line` (valid JSON) holds NUL: a \u0000 escape, or
 * a raw 0 byte anywhere. The scan tracks string boundaries and skips each
 * escape's second character, so "\\u0000" (an escaped backslash, then
 * "u0000") is not a NUL. */
/* Inside a string, the next '"' or '\\' at or after i (len when none):
 * two memchr scans, so a multi-megabyte base64 string costs little. */
static size_t string_special(const char *line, size_t i, size_t len) {
        const char *q = memchr(line + i, '"', len - i);
        size_t end = q ? (size_t)(q - line) : len;
        const char *b = memchr(line + i, '\\', end - i);
        return b ? (size_t)(b - line) : end;
}

static bool has_nul(const char *line, size_t len) {
        if (memchr(line, 0, len))
                return true;
        bool in_string = false;
        for (size_t i = 0; i < len; i++) {
                if (in_string && (i = string_special(line, i, len)) >= len)
                        break;
                char ch = line[i];
                if (!in_string) {
                        in_string = ch == '"';
                        continue;
                }
                if (ch == '"')
                        in_string = false;
                else if (ch == '\\') {
                        if (i + 5 < len && line[i + 1] == 'u' && memcmp(line + i + 2, "0000", 4) == 0)
                                return true;
                        i++;
                }
        }
        return false;
}

/* True when arrays and objects in `line` nest deeper than `limit`. Scanned
 * before parsing: cJSON recurses once per level (and stops at its own
 * CJSON_NESTING_LIMIT with a bare parse failure). Brackets inside strings
 * do not count; an escape's second character is skipped. */
static bool too_deep(const char *line, size_t len, unsigned limit) {
        bool in_string = false;
        unsigned depth = 0;
        for (size_t i = 0; i < len; i++) {
                if (in_string && (i = string_special(line, i, len)) >= len)
                        break;
                char ch = line[i];
                if (in_string) {
                        if (ch == '\\')
                                i++;
                        else if (ch == '"')
                                in_string = false;
                } else if (ch == '"')
                        in_string = true;
                else if (ch == '[' || ch == '{') {
                        if (++depth > limit)
                                return true;
                } else if ((ch == ']' || ch == '}') && depth > 0)
                        depth--;
        }
        return false;
}

/* The id to answer a line that parsed but is refused, when it has a usable
 * one (else NULL: null). */
static cJSON *reply_id_of(cJSON *root) {
        cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
        return id_echoable(id) ? id_copy(id) : NULL;
}

/* A bulk request of a TLS connection: refused with limit_exceeded (true)
 * when RPC_REMOTE_BULK_MAX others of TLS connections run, or their queued
 * answers pass RPC_REMOTE_OUT_BUDGET. */
static bool remote_bulk_refused(rpc_request *req) {
        rpc_server *s = req->conn->server;
        size_t queued = 0;
        unsigned running = 0;
        for (const rpc_conn *o = s->conns; o; o = o->next) {
                if (!o->remote)
                        continue;
                queued += o->out_len - o->out_off;
                running += o->bulk_in_flight;
        }
        running -= 1;  /* this one is counted already */
        if (running < RPC_REMOTE_BULK_MAX && queued <= RPC_REMOTE_OUT_BUDGET)
                return false;
        if (running >= RPC_REMOTE_BULK_MAX)
                rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "%s: %u large answers are being made for remote clients, their limit; retry later",
                                TEXT_Q(req->method), RPC_REMOTE_BULK_MAX);
        else
                rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "%s: answers of more than %u MiB wait for remote clients to read them, their limit; "
                                "retry later", TEXT_Q(req->method), RPC_REMOTE_OUT_BUDGET >> 20);
        return true;
}

/* Parses one line (without its '\n') and dispatches it. Returns false,
 * having done nothing, when the line is a bulk request and the connection
 * already runs RPC_BULK_IN_FLIGHT of them: the line stays in the input
 * buffer and is handled again when one finishes. */
static bool handle_line(rpc_conn *c, const char *line, size_t len) {
        size_t i = 0, bad = 0;
        while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
                i++;
        if (i == len)
                return true;  /* empty lines are keep-alives, not errors */
        if (!text_utf8_valid(line, len, &bad)) {
                reply_raw_error(c, NULL, RPC_PARSE_ERROR, "parse error: the line is not valid UTF-8 at byte %zu", bad);
                return true;
        }
        if (too_deep(line, len, LIMIT_JSON_DEPTH)) {
                reply_raw_error(c, NULL, RPC_INVALID_REQUEST,
                                "invalid request: arrays and objects nested too deep (limit %d)", LIMIT_JSON_DEPTH);
                return true;
        }
        const char *end = NULL;
        cJSON *root = cJSON_ParseWithLengthOpts(line, len, &end, false);
        if (root && end) {
                /* The whole line must be one value: "{} {}" or "{}x" is not. */
                for (const char *e = end; e < line + len; e++)
                        if (*e != ' ' && *e != '\t' && *e != '\r') {
                                cJSON_Delete(root);
                                root = NULL;
                                break;
                        }
        }
        if (!root) {
                reply_raw_error(c, NULL, RPC_PARSE_ERROR, "parse error: the line is not valid JSON");
                return true;
        }
        if (has_nul(line, len)) {
                cJSON *id = reply_id_of(root);
                cJSON_Delete(root);
                reply_raw_error(c, id, RPC_INVALID_REQUEST, "invalid request: strings may not contain NUL (\\u0000)");
                return true;
        }
        bool has_id = false;
        if (!request_is_valid(c, root, &has_id)) {
                cJSON_Delete(root);
                return true;
        }
        const rpc_method *m = find_method(c->server, cJSON_GetObjectItemCaseSensitive(root, "method")->valuestring);
        if (m && m->bulk && c->bulk_in_flight >= RPC_BULK_IN_FLIGHT) {
                cJSON_Delete(root);
                return false;
        }
        rpc_request *req = calloc(1, sizeof(*req));
        if (!req) {
                cJSON_Delete(root);
                reply_raw_error(c, NULL, RPC_INTERNAL_ERROR, "out of memory");
                return true;
        }
        req->conn = rpc_conn_ref(c);
        req->method_index = m ? (int) (m - c->server->methods) : -1;
        req->start_usec = monotonic_usec();
        c->in_flight++;
        req->pending_next = c->pending;
        if (c->pending)
                c->pending->pending_prev = req;
        c->pending = req;
        if (m && m->bulk) {
                req->bulk = true;
                c->bulk_in_flight++;
        }
        req->id = has_id ? id_copy(cJSON_GetObjectItemCaseSensitive(root, "id")) : NULL;
        req->method = strdup(cJSON_GetObjectItemCaseSensitive(root, "method")->valuestring);
        req->params = cJSON_DetachItemFromObjectCaseSensitive(root, "params");
        if (!req->params)
                req->params = cJSON_CreateObject();
        cJSON_Delete(root);
        if (!req->method || !req->params) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return true;
        }
        if (!m) {
                rpc_reply_error(req, RPC_METHOD_NOT_FOUND, NULL, NULL, "method not found: %s", TEXT_Q(req->method));
                return true;
        }
        /* Stopping (rpc_server_stop): nothing new starts; a request.cancel
         * of one in flight still may. */
        if (c->server->stop_phase != STOP_NONE && !streq(req->method, "request.cancel")) {
                cJSON *data = cJSON_CreateObject();
                cJSON_AddBoolToObject(data, "completed", false);
                rpc_reply_unavailable(req, data, "sandboxd is stopping; %s was not started: retry once the daemon is back",
                                      TEXT_Q(req->method));
                return true;
        }
        if (c->server->params_check) {
                _cleanup_error_ sb_error *err = NULL;
                if (c->server->params_check(req->method, req->params, &err) < 0) {
                        rpc_reply_sb_error(req, err);
                        return true;
                }
                /* No params given as [] are none: handlers read an object. */
                if (cJSON_IsArray(req->params)) {
                        cJSON_Delete(req->params);
                        if (!(req->params = cJSON_CreateObject())) {
                                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                                return true;
                        }
                }
        }
        if (c->server->authorize) {
                _cleanup_error_ sb_error *err = NULL;
                if (c->server->authorize(req, c->server->authorize_userdata, &err) < 0) {
                        rpc_reply_sb_error(req, err);
                        return true;
                }
        } else if (c->ssl) {
                /* Fail closed: a TLS connection without an authorizer. */
                rpc_reply_error(req, RPC_APP_ERROR, "permission_denied", NULL, "permission denied");
                return true;
        }
        if (req->bulk && c->remote && remote_bulk_refused(req))
                return true;
        m->handler(req, m->userdata);
        return true;
}

/* ---- request.cancel ---- */

/* A request's id is kept as id_copy() made it: a number as raw digits. */
static bool id_is(const cJSON *rid, int64_t id) {
        if (cJSON_IsNumber(rid))
                return rid->valuedouble == (double)id;
        char buf[32];
        snprintf(buf, sizeof(buf), "%lld", (long long)id);
        return cJSON_IsRaw(rid) && rid->valuestring && streq(rid->valuestring, buf);
}

void rpc_request_set_cancel(rpc_request *req, rpc_cancel_fn fn, void *userdata) {
        req->cancel = fn;
        req->cancel_userdata = userdata;
}

/* request.cancel {id}: the id is matched as an integer among the
 * requests in flight on the caller's own connection only, so no client can
 * cancel another's work. A second cancel of a request already being
 * cancelled answers true again. */
static void method_cancel(rpc_request *req, void *userdata) {
        (void)userdata;
        _cleanup_error_ sb_error *err = NULL;
        int64_t id = 0;
        if (rpc_param_int(req, "id", true, INT64_MIN / 2, INT64_MAX / 2, &id, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        bool cancelled = false;
        for (rpc_request *r = req->conn->pending; r; r = r->pending_next) {
                if (r == req || !id_is(r->id, id))
                        continue;
                if (r->cancel_requested) {
                        cancelled = true;
                        break;
                }
                if (r->cancel) {
                        /* fn never finishes r itself (rpc_cancel_fn). */
                        rpc_cancel_fn fn = r->cancel;
                        r->cancel = NULL;
                        cancelled = r->cancel_requested = fn(r, r->cancel_userdata);
                        break;
                }
        }
        cJSON *res = cJSON_CreateObject();
        cJSON_AddBoolToObject(res, "cancelled", cancelled);
        rpc_reply(req, res);
}

/* ---- input ---- */

/* Frames and handles every complete line in the input buffer. At EOF, an
 * unterminated last line counts as a line. Stops, keeping the rest (held),
 * while more than RPC_OUT_QUEUE_MAX of the connection's answers wait unsent
 * or when a bulk request must wait for the one running: work already read
 * is not started for a peer that does not take its answers. */
static void conn_process_input(rpc_conn *c, bool at_eof) {
        size_t start = 0;
        c->held = false;
        while (c->open && !c->close_after_flush) {
                char *nl = memchr(c->in + c->in_scanned, '\n', c->in_len - c->in_scanned);
                size_t line_len = nl ? (size_t) (nl - (c->in + start)) : c->in_len - start;
                if (line_len > c->server->max_line_bytes) {
                        reply_raw_error(c, NULL, RPC_INVALID_REQUEST, "line exceeds maxLineBytes (%zu bytes)",
                                        c->server->max_line_bytes);
                        c->close_after_flush = true;
                        break;
                }
                if (!nl && !(at_eof && line_len > 0)) {
                        c->in_scanned = c->in_len;
                        break;
                }
                if (c->out_len - c->out_off > RPC_OUT_QUEUE_MAX) {
                        c->held = true;
                        break;
                }
                if (!handle_line(c, c->in + start, line_len)) {
                        c->held = true;
                        break;
                }
                start = nl ? start + line_len + 1 : c->in_len;
                c->in_scanned = start;
        }
        if (!c->open || c->close_after_flush) {
                c->in_len = c->in_scanned = 0;
                c->held = false;
                return;
        }
        memmove(c->in, c->in + start, c->in_len - start);
        c->in_len -= start;
        c->in_scanned -= start;
        if (c->held)
                c->in_scanned = 0;  /* rescan from the held line */
        if (c->in_len == 0 && c->in_alloc > 4 * RPC_READ_CHUNK)
                conn_free_input(c);  /* give back the room a once-long line took */
}

static int kick_cb(sd_event_source *src, void *userdata) {
        rpc_conn *c = userdata;
        c->kick = sd_event_source_disable_unref(c->kick);
        if (c->server && c->held) {
                conn_process_input(c, c->read_eof);
                if (c->server && !c->held && c->read_eof && c->in_flight == 0 && c->open)
                        c->close_after_flush = true;  /* the half-closed peer's last line ran */
                if (c->server)
                        conn_update_events(c);
                if (c->server && c->close_after_flush && c->out_off == c->out_len)
                        conn_close(c);
        }
        rpc_conn_unref(c);
        return 0;
}

/* Resumes held lines on a later loop iteration (never nested in a handler
 * or a reply, which may run inside conn_process_input). */
static void conn_kick(rpc_conn *c) {
        if (!c->held || c->kick || !c->server || !c->open)
                return;
        if (sd_event_add_defer(c->server->event, &c->kick, kick_cb, c) < 0) {
                log_warning("rpc: cannot schedule held requests; dropping the connection");
                conn_close_soon(c);
                return;
        }
        rpc_conn_ref(c);
}

/* recv() into c->in that also takes file descriptors a client sent with
 * SCM_RIGHTS (a pipe for fs.writeTar / fs.readTar), queued on the
 * connection for the request that names them; past RPC_CONN_FDS queued the
 * rest are closed. The kernel delivers a sendmsg's fds no later than its
 * bytes, so a request's fd is queued by the time its line is parsed. */
static ssize_t tls_recv(rpc_conn *c) {
        size_t n = 0;
        ERR_clear_error();
        errno = 0;
        c->read_wants_write = false;
        int r = SSL_read_ex(c->ssl, c->in + c->in_len, c->in_alloc - c->in_len, &n);
        if (r == 1)
                return (ssize_t) n;
        switch (SSL_get_error(c->ssl, r)) {
        case SSL_ERROR_WANT_READ:
                errno = EAGAIN;
                return -1;
        case SSL_ERROR_WANT_WRITE:
                c->read_wants_write = true;
                errno = EAGAIN;
                return -1;
        case SSL_ERROR_ZERO_RETURN:
                return 0;  /* close_notify: the peer's end of input */
        case SSL_ERROR_SYSCALL:
                errno = errno ? errno : ECONNRESET;
                return -1;
        default: {
                /* A bad record, an unexpected EOF (a truncation: not an end
                 * of input), an alert, a renegotiation attempt. */
                char buf[256];
                ERR_error_string_n(ERR_peek_last_error(), buf, sizeof(buf));
                log_info("rpc: %s: TLS error, closing: %s", c->peer, buf);
                errno = EPROTO;
                return -1;
        }
        }
}

static ssize_t conn_recv(rpc_conn *c) {
        if (c->ssl)
                return tls_recv(c);
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int) * RPC_CONN_FDS)];
        } cm;
        struct iovec iov = { .iov_base = c->in + c->in_len, .iov_len = c->in_alloc - c->in_len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm.buf) };
        ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
                return n;
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
                if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
                        continue;
                for (size_t k = 0; k < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
                        int fd;
                        memcpy(&fd, CMSG_DATA(h) + k * sizeof(int), sizeof(int));
                        if (c->n_fds < RPC_CONN_FDS)
                                c->fds[c->n_fds++] = fd;
                        else
                                close(fd);
                }
        }
        return n;
}

int rpc_request_take_fd(rpc_request *req) {
        rpc_conn *c = req->conn;
        if (!c || c->n_fds == 0)
                return -ENOENT;
        int fd = c->fds[0];
        memmove(c->fds, c->fds + 1, sizeof(int) * --c->n_fds);
        return fd;
}

/* Fires stall_usec after the last input bytes while an unfinished line
 * waits: a line must make progress, or the connection (and the buffer it
 * holds against the input budget) goes. Complete lines held back by the
 * daemon itself (dispatch paused) are not the peer's delay. */
static int partial_idle_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        rpc_conn *c = userdata;
        if (!c->server || !c->open || c->in_len == 0)
                return 0;  /* oneshot: stays off until a partial line waits again */
        uint64_t deadline = c->in_progress_usec + c->server->stall_usec;
        if (c->held || c->read_eof || memchr(c->in, '\n', c->in_len))
                deadline = usec + c->server->stall_usec;
        else if (usec >= deadline) {
                log_warning("rpc: %s sent no byte of its unfinished request line (%zu bytes) for %" PRIu64
                            " ms; dropping the connection", c->peer, c->in_len, c->server->stall_usec / 1000);
                conn_close(c);
                return 0;
        }
        if (sd_event_source_set_time(src, deadline) < 0 || sd_event_source_set_enabled(src, SD_EVENT_ONESHOT) < 0)
                conn_close_soon(c);
        return 0;
}

/* An unfinished line is buffered: (re)arms its idle check. */
static void conn_arm_partial(rpc_conn *c) {
        if (!c->server || !c->open || c->in_len == 0)
                return;
        int enabled = SD_EVENT_OFF, r = 0;
        if (c->in_idle && sd_event_source_get_enabled(c->in_idle, &enabled) >= 0 && enabled != SD_EVENT_OFF)
                return;
        uint64_t deadline = c->in_progress_usec + c->server->stall_usec;
        if (c->in_idle) {
                r = sd_event_source_set_time(c->in_idle, deadline);
                if (r >= 0)
                        r = sd_event_source_set_enabled(c->in_idle, SD_EVENT_ONESHOT);
        } else
                r = sd_event_add_time(c->server->event, &c->in_idle, CLOCK_MONOTONIC, deadline, 0, partial_idle_cb, c);
        if (r < 0) {
                log_warning("rpc: cannot watch an unfinished request line; dropping the connection");
                conn_close_soon(c);
        }
}

/* Reads what is there. Returns 0, 1 at end of input, or a negative errno. */
static int conn_read(rpc_conn *c) {
        for (int i = 0; i < RPC_READS_PER_WAKEUP; i++) {
                if (c->in_alloc - c->in_len < RPC_READ_CHUNK) {
                        /* Grows by half again (a long line costs O(n) copying,
                         * not O(n^2)), but never past what one line may hold
                         * and, near the budget, by one chunk only. */
                        size_t want = c->in_len + RPC_READ_CHUNK;
                        size_t cap = c->server->max_line_bytes + 2 * RPC_READ_CHUNK;
                        size_t grown = c->in_alloc + c->in_alloc / 2;
                        if (grown > cap)
                                grown = cap;
                        if (grown > want && *conn_charged(c) + in_charge(grown) - in_charge(c->in_alloc) <=
                                                    conn_budget(c))
                                want = grown;
                        size_t more = in_charge(want) - in_charge(c->in_alloc);
                        if (*conn_charged(c) + more > conn_budget(c)) {
                                reply_raw_error(c, NULL, RPC_INVALID_REQUEST,
                                                "the daemon's buffers for unfinished requests are full (%zu MiB "
                                                "across all %s connections); send shorter lines or retry later",
                                                conn_budget(c) >> 20, c->remote ? "remote" : "local");
                                c->close_after_flush = true;
                                conn_free_input(c);
                                return 0;
                        }
                        char *p = realloc(c->in, want);
                        if (!p)
                                return -ENOMEM;
                        c->in = p;
                        *conn_charged(c) += more;
                        c->in_alloc = want;
                }
                ssize_t n = conn_recv(c);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return errno == EAGAIN ? 0 : -errno;
                }
                if (n == 0)
                        return 1;
                c->in_len += (size_t) n;
                c->in_progress_usec = conn_now(c);
                /* Frame as we go so a flood of lines never buffers more than
                 * one partial line plus one chunk. */
                conn_process_input(c, false);
                conn_arm_partial(c);
                if (!c->open || c->close_after_flush || c->held || c->out_len - c->out_off > RPC_OUT_QUEUE_MAX)
                        return 0;
        }
        return 0;
}

static void tls_handshake(rpc_conn *c);
static int conn_io_cb(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        rpc_conn *c = userdata;
        /* Keeps c alive until the callback returns (a close in it drops the last reference). */
        _unused_ _cleanup_(rpc_conn_unrefp) rpc_conn *hold = rpc_conn_ref(c);
        if (revents & EPOLLERR)
                return conn_close(c), 0;
        if (c->handshaking)
                return tls_handshake(c), 0;
        if (c->read_wants_write && (revents & EPOLLOUT))
                revents |= EPOLLIN;  /* the read that waited for the socket to take its bytes */
        if (c->open && !c->read_eof && !c->close_after_flush && (revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))) {
                int r = conn_read(c);
                if (r < 0)
                        return conn_close(c), 0;
                if (r > 0) {
                        c->read_eof = true;
                        conn_process_input(c, true);
                }
        }
        /* Both directions gone: nobody can read what we would write. */
        if ((revents & EPOLLHUP) || !c->server)
                return conn_close(c), 0;
        if (conn_flush(c) < 0)
                return conn_close(c), 0;
        conn_check_drained(c);
        if (!c->server)
                return 0;  /* the drain handler closed it */
        if (c->held && c->out_len - c->out_off <= RPC_OUT_QUEUE_MAX)
                conn_kick(c);  /* the peer took enough: start what it sent */
        bool drained = c->out_off == c->out_len;
        if (drained && (c->close_after_flush || (c->read_eof && c->in_flight == 0 && !c->held) || !c->open))
                return conn_close(c), 0;
        conn_update_events(c);
        return 0;
}

/* ---- accepting ---- */

/* Root, or a member of the socket group by primary or supplementary group.
 * The supplementary groups come from SO_PEERGROUPS: the kernel's record of
 * the peer's credentials at connect() time, so neither a later setgroups()
 * nor a recycled pid (the weakness of reading /proc/<pid>/status) can change
 * the answer. The socket's mode and group already keep others from
 * connecting; this is the second lock. */
static bool peer_is_allowed(const rpc_server *s, int fd, const struct ucred *cred) {
        if (cred->uid == 0)
                return true;
        if (s->socket_gid == (gid_t) -1)
                return false;
        if (cred->gid == s->socket_gid)
                return true;
        socklen_t len = 64 * sizeof(gid_t);
        for (int attempt = 0; attempt < 2; attempt++) {
                _cleanup_free_ gid_t *groups = malloc(len);
                if (!groups)
                        return false;
                if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
                        if (errno == ERANGE)
                                continue;  /* len now holds the size needed */
                        return false;
                }
                for (size_t i = 0; i < len / sizeof(gid_t); i++)
                        if (groups[i] == s->socket_gid)
                                return true;
                return false;
        }
        return false;
}

bool rpc_server_peer_allowed(const rpc_server *s, int fd) {
        struct ucred cred;
        socklen_t len = sizeof(cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return false;
        return peer_is_allowed(s, fd, &cred);
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void prom_label(FILE *f, const char *v) {
        for (; *v; v++) {
                if (*v == '\\' || *v == '"')
                        fputc('\\', f), fputc(*v, f);
                else if (*v == '\n')
                        fputs("\\n", f);
                else
                        fputc(*v, f);
        }
}

void rpc_server_write_metrics(const rpc_server *s, FILE *f) {
        fputs("# HELP sandboxd_rpc_requests_total JSON-RPC requests finished, by method and outcome.\n"
              "# TYPE sandboxd_rpc_requests_total counter\n", f);
        for (size_t i = 0; i < s->n_methods; i++) {
                const rpc_method *m = &s->methods[i];
                for (int e = 0; e < 2; e++) {
                        fputs("sandboxd_rpc_requests_total{method=\"", f);
                        prom_label(f, m->name);
                        fprintf(f, "\",outcome=\"%s\"} %" PRIu64 "\n", e ? "error" : "ok", e ? m->errors : m->ok);
                }
        }
        fputs("# HELP sandboxd_rpc_request_duration_seconds From a request being read to its answer being queued.\n"
              "# TYPE sandboxd_rpc_request_duration_seconds histogram\n", f);
        for (size_t i = 0; i < s->n_methods; i++) {
                const rpc_method *m = &s->methods[i];
                uint64_t cum = 0;
                for (size_t b = 0; b <= RPC_N_BUCKETS; b++) {
                        cum += m->buckets[b];
                        fputs("sandboxd_rpc_request_duration_seconds_bucket{method=\"", f);
                        prom_label(f, m->name);
                        if (b < RPC_N_BUCKETS)
                                fprintf(f, "\",le=\"%g\"} %" PRIu64 "\n", (double) rpc_buckets_usec[b] / 1e6, cum);
                        else
                                fprintf(f, "\",le=\"+Inf\"} %" PRIu64 "\n", cum);
                }
                fputs("sandboxd_rpc_request_duration_seconds_sum{method=\"", f);
                prom_label(f, m->name);
                fprintf(f, "\"} %.6f\n", (double) m->sum_usec / 1e6);
                fputs("sandboxd_rpc_request_duration_seconds_count{method=\"", f);
                prom_label(f, m->name);
                fprintf(f, "\"} %" PRIu64 "\n", cum);
        }
}

static int conn_new(rpc_server *s, int fd) {
        rpc_conn *c = calloc(1, sizeof(*c));
        if (!c)
                return close(fd), -ENOMEM;
        c->refs = 1;  /* the server list's */
        c->server = s;
        c->fd = fd;
        c->open = true;
        c->next = s->conns;
        if (s->conns)
                s->conns->prev = c;
        s->conns = c;
        socklen_t len = sizeof(c->cred);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len) < 0) {
                int r = -errno;
                conn_close(c);
                return r;
        }
        unsigned cap = c->cred.uid == 0 ? s->max_conns_root : s->max_conns_user;
        if (uid_conns_get(s, c->cred.uid) >= cap || uid_conns_add(s, c->cred.uid, +1) == UINT_MAX) {
                log_warning("rpc: refused connection from uid %u pid %d: it has %u open connections, the most "
                            "allowed (%s)", (unsigned) c->cred.uid, (int) c->cred.pid, uid_conns_get(s, c->cred.uid),
                            c->cred.uid == 0 ? "maxConnectionsRoot" : "maxConnectionsPerUser");
                bool root = c->cred.uid == 0;
                c->fd = -EBADF;
                conn_close(c);  /* frees c */
                refuse_fd(fd, "too_many_connections",
                          root ? "too many connections from uid 0 (maxConnectionsRoot); close some and retry"
                               : "too many connections from this user (maxConnectionsPerUser); close some and retry");
                return 0;
        }
        c->counted = true;
        int r = sd_event_add_io(s->event, &c->io, fd, EPOLLIN | EPOLLRDHUP, conn_io_cb, c);
        if (r < 0) {
                conn_close(c);
                return r;
        }
        if (!peer_is_allowed(s, fd, &c->cred)) {
                log_warning("rpc: refused connection from uid %u gid %u pid %d: not root and not in the socket group",
                            (unsigned) c->cred.uid, (unsigned) c->cred.gid, (int) c->cred.pid);
                cJSON *err = error_message(NULL, RPC_APP_ERROR, "permission_denied", NULL,
                                           "permission denied: only root and members of the socket group may use sandboxd");
                conn_queue(c, err);
                c->close_after_flush = true;
                conn_update_events(c);
                return 0;
        }
        c->accepted = true;
        snprintf(c->peer, sizeof(c->peer), "uid %u pid %d", (unsigned) c->cred.uid, (int) c->cred.pid);
        log_debug("rpc: connection from uid %u pid %d", (unsigned) c->cred.uid, (int) c->cred.pid);
        return 0;
}

static int accept_backoff_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        rpc_server *s = userdata;
        s->backing_off = false;
        if (s->stop_phase == STOP_NONE || (s->bound_path && s->stop_phase < STOP_FLUSH))
                sd_event_source_set_enabled(s->listen_io, SD_EVENT_ON);
        return 0;
}

/* Out of file descriptors: gives up the reserve fd for a moment to accept
 * one waiting client and tell it so (rather than leave it hanging), then
 * stops accepting for RPC_ACCEPT_BACKOFF_USEC. The listening socket stays
 * readable while clients wait, so without the pause the loop would spin.
 * The timer source exists from the start: arming it opens no fd (sd-event's
 * per-clock timerfd would be the one fd it could not get). */
static void accept_exhausted(rpc_server *s, int fd, int error) {
        if (s->reserve_fd >= 0) {
                close(s->reserve_fd);
                s->reserve_fd = -EBADF;
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd >= 0)
                        refuse_fd(cfd, "too_many_connections",
                                  "sandboxd is out of file descriptors; close idle connections and retry");
                s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        s->accept_unlogged++;
        uint64_t now = 0;
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (!s->accept_logged_usec || now - s->accept_logged_usec >= RPC_ACCEPT_LOG_USEC) {
                log_warning_errno(-error, "rpc: accept: %m; pausing accepts for %d ms at a time (%u failures "
                                  "since the last report)", RPC_ACCEPT_BACKOFF_USEC / 1000, s->accept_unlogged);
                s->accept_logged_usec = now ? now : 1;
                s->accept_unlogged = 0;
        }
        if (s->backing_off)
                return;
        if (sd_event_source_set_time_relative(s->accept_backoff, RPC_ACCEPT_BACKOFF_USEC) >= 0 &&
            sd_event_source_set_enabled(s->accept_backoff, SD_EVENT_ONESHOT) >= 0) {
                sd_event_source_set_enabled(s->listen_io, SD_EVENT_OFF);
                s->backing_off = true;
        }
}

static int listen_io_cb(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        rpc_server *s = userdata;
        for (int i = 0; i < 64; i++) {
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                                return 0;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                accept_exhausted(s, fd, errno);
                                return 0;
                        }
                        log_warning_errno(-errno, "rpc: accept: %m");
                        return 0;
                }
                int r = conn_new(s, cfd);
                if (r < 0)
                        log_warning_errno(r, "rpc: set up connection: %m");
        }
        return 0;
}

/* ---- TLS listeners ---- */

static int ssl_more_cb(sd_event_source *src, void *userdata) {
        rpc_conn *c = userdata;
        c->ssl_more = sd_event_source_disable_unref(c->ssl_more);
        if (c->server && c->ssl && c->io)
                conn_io_cb(NULL, c->fd, EPOLLIN, c);
        rpc_conn_unref(c);
        return 0;
}

/* At most one cap-refusal line a second, with the count of the others. */
static void tls_log_refusal(rpc_server *s, const char *peer, const char *why) {
        uint64_t now = 0;
        (void) sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (s->tls_refuse_logged_usec && now - s->tls_refuse_logged_usec < 1000000) {
                s->tls_refuse_unlogged++;
                return;
        }
        log_warning("remote: refused %s: %s (%u more refused since the last report)", peer, why,
                    s->tls_refuse_unlogged);
        s->tls_refuse_logged_usec = now ? now : 1;
        s->tls_refuse_unlogged = 0;
}

static int hs_timer_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        rpc_conn *c = userdata;
        log_warning("remote: refused %s: TLS handshake not finished within %" PRIu64 " ms", c->peer,
                    c->server->tls_handshake_usec / 1000);
        conn_close(c);
        return 0;
}

/* Drives the handshake one step (non-blocking). On completion the accept
 * hook decides (and logs a refusal); any failure closes the connection
 * with one log line naming the peer and OpenSSL's reason: plaintext
 * ("http request", "wrong version number"), TLS 1.2 ("unsupported
 * protocol"), no certificate ("peer did not return a certificate"), a
 * certificate that does not verify (the verify callback logged which). */
static void tls_handshake(rpc_conn *c) {
        rpc_server *s = c->server;
        ERR_clear_error();
        errno = 0;
        int r = SSL_do_handshake(c->ssl);
        if (r == 1) {
                c->handshaking = false;
                s->tls_handshakes--;
                c->hs_timer = sd_event_source_disable_unref(c->hs_timer);
                void *identity = NULL;
                if (!s->tls_accept || s->tls_accept(c, c->ssl, c->peer, &identity, s->tls_userdata) < 0)
                        return conn_close(c);
                c->identity = identity;
                c->identity_free = s->tls_identity_free;
                c->accepted = true;
                conn_update_events(c);  /* requests sent with the last flight may wait in OpenSSL */
                return;
        }
        int e = SSL_get_error(c->ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                if (sd_event_source_set_io_events(c->io, e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLOUT) < 0)
                        conn_close(c);
                return;
        }
        char buf[256] = "connection closed by the peer";
        unsigned long code = ERR_peek_last_error();
        if (code)
                ERR_error_string_n(code, buf, sizeof(buf));
        else if (e == SSL_ERROR_SYSCALL && errno)
                snprintf(buf, sizeof(buf), "%s", strerror(errno));
        long vr = SSL_get_verify_result(c->ssl);
        log_warning("remote: refused %s: TLS handshake failed: %s%s%s", c->peer, buf,
                    vr != X509_V_OK ? "; certificate: " : "", vr != X509_V_OK ? X509_verify_cert_error_string(vr) : "");
        conn_close(c);
}

static void format_peer(const struct sockaddr_storage *sa, char *buf, size_t size, struct in6_addr *ret_addr) {
        char a[INET6_ADDRSTRLEN] = "?";
        unsigned port = 0;
        memset(ret_addr, 0, sizeof(*ret_addr));
        if (sa->ss_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *) sa;
                inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a));
                port = ntohs(in->sin_port);
                ret_addr->s6_addr[10] = ret_addr->s6_addr[11] = 0xff;
                memcpy(ret_addr->s6_addr + 12, &in->sin_addr, 4);
                snprintf(buf, size, "%s:%u", a, port);
        } else if (sa->ss_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) sa;
                inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
                *ret_addr = in6->sin6_addr;
                snprintf(buf, size, "[%s]:%u", a, (unsigned) ntohs(in6->sin6_port));
        } else
                snprintf(buf, size, "?");
}

/* Keep-alive probes and a bound on unacknowledged data, so a peer that
 * vanished (a half-open connection) is found and closed in minutes rather
 * than holding its slot until the kernel's default of hours. */
static void tcp_set_liveness(int fd) {
        int on = 1, idle = 60, intvl = 10, cnt = 6;
        unsigned user_timeout_ms = 120000;
        (void) setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
        (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        (void) setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
        (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

/* True when a and b are one client for the handshake share: the same IPv4
 * address (v4-mapped), or the same IPv6 /64 (one subnet, RFC 4291 §2.5.4,
 * which a single host commonly holds whole). */
static bool same_client(const struct in6_addr *a, const struct in6_addr *b) {
        if (IN6_IS_ADDR_V4MAPPED(a) || IN6_IS_ADDR_V4MAPPED(b))
                return memcmp(a, b, sizeof(*a)) == 0;
        return memcmp(a, b, 8) == 0;
}

/* Handshakes in progress from addr's client (same_client). The list holds
 * at most maxConnectionsRemote TLS connections plus the local ones. */
static unsigned handshakes_from(const rpc_server *s, const struct in6_addr *addr) {
        unsigned n = 0;
        for (const rpc_conn *c = s->conns; c; c = c->next)
                if (c->ssl && c->handshaking && same_client(&c->addr, addr))
                        n++;
        return n;
}

/* A client's share of maxTlsHandshakes: a quarter (at least 1), so one
 * address (or IPv6 /64) cannot hold every handshake slot with connections
 * that never speak. */
static unsigned handshake_share(const rpc_server *s) {
        return s->tls_max_handshakes / 4 ? s->tls_max_handshakes / 4 : 1;
}

static int conn_new_tls(tls_listener *l, int fd, const struct sockaddr_storage *sa) {
        rpc_server *s = l->server;
        char peer[64];
        struct in6_addr addr;
        format_peer(sa, peer, sizeof(peer), &addr);
        /* Caps before any allocation or TLS work: a flood of connections
         * costs an accept and a close each. */
        const char *over = s->tls_conns >= s->tls_max_conns ? "too many TLS connections (maxConnectionsRemote)"
                         : addr_conns_get(s, &addr) >= s->tls_max_conns_addr
                                 ? "too many TLS connections from this address (maxConnectionsPerAddress)"
                         : s->tls_handshakes >= s->tls_max_handshakes ? "too many TLS handshakes in progress (maxTlsHandshakes)"
                         : handshakes_from(s, &addr) >= handshake_share(s)
                                 ? "too many TLS handshakes in progress from this address (a quarter of maxTlsHandshakes)"
                                 : NULL;
        if (over) {
                tls_log_refusal(s, peer, over);
                close(fd);
                return 0;
        }
        rpc_conn *c = calloc(1, sizeof(*c));
        if (!c)
                return close(fd), -ENOMEM;
        c->refs = 1;
        c->server = s;
        c->fd = fd;
        c->open = true;
        c->cred = (struct ucred) { .pid = 0, .uid = (uid_t) -1, .gid = (gid_t) -1 };
        c->addr = addr;
        c->remote = true;
        snprintf(c->peer, sizeof(c->peer), "%s", peer);
        c->next = s->conns;
        if (s->conns)
                s->conns->prev = c;
        s->conns = c;
        c->ssl = SSL_new(l->ctx);
        if (!c->ssl) {
                conn_close(c);
                return -ENOMEM;
        }
        s->tls_conns++;  /* from here conn_close() releases the TLS state */
        c->handshaking = true;
        s->tls_handshakes++;
        if (addr_conns_add(s, &addr, +1) == UINT_MAX) {
                conn_close(c);
                return -ENOMEM;
        }
        c->addr_counted = true;
        tcp_set_liveness(fd);
        SSL_set_app_data(c->ssl, c->peer);  /* the verify callback names the peer */
        if (SSL_set_fd(c->ssl, fd) != 1) {
                conn_close(c);
                return -ENOMEM;
        }
        SSL_set_accept_state(c->ssl);
        int r = sd_event_add_io(s->event, &c->io, fd, EPOLLIN, conn_io_cb, c);
        if (r >= 0)
                r = sd_event_add_time_relative(s->event, &c->hs_timer, CLOCK_MONOTONIC, s->tls_handshake_usec, 0,
                                               hs_timer_cb, c);
        if (r < 0) {
                conn_close(c);
                return r;
        }
        log_debug("remote: connection from %s on %s", c->peer, l->name);
        return 0;
}

static int tls_backoff_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        tls_listener *l = userdata;
        rpc_server *s = l->server;
        if (s->stop_phase == STOP_NONE || (s->bound_path && s->stop_phase < STOP_FLUSH))
                sd_event_source_set_enabled(l->io, SD_EVENT_ON);
        return 0;
}

static int tls_listen_cb(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        tls_listener *l = userdata;
        rpc_server *s = l->server;
        for (int i = 0; i < 64; i++) {
                struct sockaddr_storage sa = {};
                socklen_t len = sizeof(sa);
                int cfd = accept4(fd, (struct sockaddr *) &sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                                return 0;
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                                /* As on the Unix socket: give up the reserve fd to
                                 * take one waiting client off the queue, then pause. */
                                if (s->reserve_fd >= 0) {
                                        close(s->reserve_fd);
                                        int dropped = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
                                        if (dropped >= 0)
                                                close(dropped);
                                        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                                }
                                tls_log_refusal(s, l->name, "out of file descriptors; pausing accepts");
                                if (sd_event_source_set_time_relative(l->backoff, RPC_ACCEPT_BACKOFF_USEC) >= 0 &&
                                    sd_event_source_set_enabled(l->backoff, SD_EVENT_ONESHOT) >= 0)
                                        sd_event_source_set_enabled(l->io, SD_EVENT_OFF);
                                return 0;
                        }
                        log_warning_errno(-errno, "remote: accept on %s: %m", l->name);
                        return 0;
                }
                int r = conn_new_tls(l, cfd, &sa);
                if (r < 0)
                        log_warning_errno(r, "remote: set up connection: %m");
        }
        return 0;
}

void rpc_server_set_tls_accept(rpc_server *s, rpc_tls_accept_fn fn, rpc_identity_free_fn free_fn,
                               void *userdata) {
        s->tls_accept = fn;
        s->tls_identity_free = free_fn;
        s->tls_userdata = userdata;
}

void rpc_server_set_peer_key(rpc_server *s, rpc_peer_key_fn fn, void *userdata) {
        s->peer_key = fn;
        s->peer_key_userdata = userdata;
}

void rpc_server_set_message_filter(rpc_server *s, rpc_message_filter_fn fn, void *userdata) {
        s->message_filter = fn;
        s->message_filter_userdata = userdata;
}

void rpc_server_set_authorize(rpc_server *s, rpc_authorize_fn fn, void *userdata) {
        s->authorize = fn;
        s->authorize_userdata = userdata;
}

int rpc_server_add_tls_listener(rpc_server *s, const rpc_tls_config *cfg, sb_error **ret_err) {
        _cleanup_close_ int fd = cfg->listen_fd;
        if (!s->tls_accept)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "TLS listener: no accept hook set");
        if (s->n_tls >= RPC_TLS_LISTENERS_MAX)
                return sb_error_set(ret_err, -E2BIG, NULL, NULL, "at most %d TLS listeners", RPC_TLS_LISTENERS_MAX);
        tls_listener *l = &s->tls[s->n_tls];
        *l = (tls_listener) { .server = s, .fd = -EBADF };
        l->name = strdup(cfg->name ? cfg->name : "tcp");
        if (!l->name)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = sd_event_add_io(s->event, &l->io, fd, EPOLLIN, tls_listen_cb, l);
        if (r >= 0)
                r = sd_event_add_time_relative(s->event, &l->backoff, CLOCK_MONOTONIC, RPC_ACCEPT_BACKOFF_USEC, 0,
                                               tls_backoff_cb, l);
        if (r >= 0)
                r = sd_event_source_set_enabled(l->backoff, SD_EVENT_OFF);
        if (r < 0) {
                l->io = sd_event_source_disable_unref(l->io);
                l->backoff = sd_event_source_disable_unref(l->backoff);
                free(l->name);
                return sb_error_set(ret_err, r, NULL, NULL, "watch %s: %s", cfg->name, strerror(-r));
        }
        SSL_CTX_up_ref(cfg->ctx);
        l->ctx = cfg->ctx;
        l->fd = TAKE_FD(fd);
        s->tls_handshake_usec = (uint64_t) (cfg->handshake_timeout_ms ? cfg->handshake_timeout_ms
                                                                      : RPC_TLS_HANDSHAKE_MS_DEFAULT) * 1000;
        s->tls_max_conns = cfg->max_conns ? cfg->max_conns : RPC_TLS_CONNS_DEFAULT;
        s->tls_max_conns_addr = cfg->max_conns_addr ? cfg->max_conns_addr : RPC_TLS_CONNS_ADDR_DEFAULT;
        s->tls_max_handshakes = cfg->max_handshakes ? cfg->max_handshakes : RPC_TLS_HANDSHAKES_DEFAULT;
        s->n_tls++;
        return 0;
}

/* ---- the listening socket ---- */

/* Refuses to replace anything but a stale socket: a regular file at the
 * configured path is an operator's mistake, and a socket someone still
 * listens on is another running daemon. */
static int check_existing(const char *path, sb_error **ret_err) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : sb_error_set(ret_err, -errno, NULL, NULL, "stat '%s': %m", path);
        if (!S_ISSOCK(st.st_mode))
                return sb_error_set(ret_err, -EEXIST, NULL, NULL, "'%s' exists and is not a socket; not replacing it",
                                    path);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return sb_error_set(ret_err, -errno, NULL, NULL, "socket: %m");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0 || errno == EAGAIN)
                return sb_error_set(ret_err, -EADDRINUSE, NULL, NULL,
                                    "'%s': another server is listening there (is sandboxd already running?)",
                                    path);
        return 0;
}

/* Binds under a temporary name, sets mode and owner, then renames over the
 * final path: the socket never exists at its public path with the umask's
 * mode or root's group, and a stale socket is replaced atomically. */
static int bind_socket(rpc_server *s, const rpc_server_config *cfg, sb_error **ret_err) {
        const char *path = cfg->socket_path;
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        _cleanup_free_ char *tmp = NULL;
        if (!path || path[0] != '/')
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "socket path must be absolute");
        if (asprintf(&tmp, "%s.%d.tmp", path, (int) getpid()) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (strlen(tmp) >= sizeof(sa.sun_path))
                return sb_error_set(ret_err, -ENAMETOOLONG, NULL, NULL, "socket path '%s' is too long", path);
        int r = check_existing(path, ret_err);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sb_error_set(ret_err, -errno, NULL, NULL, "socket: %m");
        strcpy(sa.sun_path, tmp);
        (void) unlink(tmp);  /* our own leftover from a crash with a recycled pid */
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return sb_error_set(ret_err, -errno, NULL, NULL, "bind '%s': %m", tmp);
        gid_t gid = cfg->socket_gid == (gid_t) -1 ? 0 : cfg->socket_gid;
        struct stat st;
        if (chmod(tmp, cfg->socket_mode) < 0 || chown(tmp, 0, gid) < 0 || lstat(tmp, &st) < 0 ||
            rename(tmp, path) < 0) {
                r = sb_error_set(ret_err, -errno, NULL, NULL, "set up socket '%s': %m", path);
                (void) unlink(tmp);
                return r;
        }
        if (listen(fd, SOMAXCONN) < 0) {
                r = sb_error_set(ret_err, -errno, NULL, NULL, "listen '%s': %m", path);
                (void) unlink(path);
                return r;
        }
        s->bound_path = strdup(path);
        s->bound_dev = st.st_dev;
        s->bound_ino = st.st_ino;
        s->listen_fd = TAKE_FD(fd);
        return 0;
}

/* A socket from systemd: must be a listening Unix stream socket. systemd
 * hands it over blocking; accept4() needs it non-blocking. */
static int adopt_socket(rpc_server *s, int fd, sb_error **ret_err) {
        int r = sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "inherited socket %d: %s", fd, strerror(-r));
        if (r == 0)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "inherited fd %d is not a listening Unix stream socket", fd);
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
                return sb_error_set(ret_err, -errno, NULL, NULL, "inherited socket %d: %m", fd);
        s->listen_fd = fd;
        return 0;
}

int rpc_server_new(sd_event *event, const rpc_server_config *cfg, rpc_server **ret, sb_error **ret_err) {
        rpc_server *s = calloc(1, sizeof(*s));
        if (!s)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        s->event = sd_event_ref(event);
        s->listen_fd = -EBADF;
        s->max_line_bytes = cfg->max_line_bytes ? cfg->max_line_bytes : 16u * 1024 * 1024;
        s->in_budget = s->max_line_bytes * 4 > RPC_INPUT_BUDGET_MIN ? s->max_line_bytes * 4 : RPC_INPUT_BUDGET_MIN;
        s->in_budget_remote = s->in_budget / 2;
        s->out_budget = cfg->out_budget_bytes ? cfg->out_budget_bytes : RPC_OUT_BUDGET_DEFAULT;
        s->stall_usec = (uint64_t) (cfg->stall_timeout_ms ? cfg->stall_timeout_ms : RPC_STALL_TIMEOUT_MS_DEFAULT) * 1000;
        s->socket_gid = cfg->socket_gid;
        s->max_conns_user = cfg->max_conns_user ? cfg->max_conns_user : RPC_MAX_CONNS_USER_DEFAULT;
        s->max_conns_root = cfg->max_conns_root ? cfg->max_conns_root : RPC_MAX_CONNS_ROOT_DEFAULT;
        s->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        int r = cfg->listen_fd >= 0 ? adopt_socket(s, cfg->listen_fd, ret_err) : bind_socket(s, cfg, ret_err);
        if (r >= 0) {
                r = sd_event_add_io(event, &s->listen_io, s->listen_fd, EPOLLIN, listen_io_cb, s);
                if (r < 0)
                        sb_error_set(ret_err, r, NULL, NULL, "watch listening socket: %s", strerror(-r));
        }
        if (r >= 0) {
                r = sd_event_add_time_relative(event, &s->accept_backoff, CLOCK_MONOTONIC, RPC_ACCEPT_BACKOFF_USEC, 0,
                                               accept_backoff_cb, s);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s->accept_backoff, SD_EVENT_OFF);
                if (r < 0)
                        sb_error_set(ret_err, r, NULL, NULL, "accept back-off timer: %s", strerror(-r));
        }
        if (s->reserve_fd < 0 && r >= 0)
                r = sb_error_set(ret_err, -errno, NULL, NULL, "open /dev/null (reserve descriptor): %m");
        if (r >= 0 && (r = rpc_server_add_method(s, "request.cancel", method_cancel, NULL)) < 0)
                sb_error_set(ret_err, r, NULL, NULL, "out of memory");
        if (r < 0) {
                rpc_server_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

/* ---- stopping (rpc_server_stop) ---- */

static unsigned stop_in_flight(const rpc_server *s) {
        unsigned n = 0;
        for (const rpc_conn *c = s->conns; c; c = c->next)
                n += c->in_flight;
        return n;
}

static void stop_listening(rpc_server *s) {
        (void) sd_event_source_set_enabled(s->listen_io, SD_EVENT_OFF);
        (void) sd_event_source_set_enabled(s->accept_backoff, SD_EVENT_OFF);
        for (size_t i = 0; i < s->n_tls; i++) {
                (void) sd_event_source_set_enabled(s->tls[i].io, SD_EVENT_OFF);
                (void) sd_event_source_set_enabled(s->tls[i].backoff, SD_EVENT_OFF);
        }
}

static void stop_done(rpc_server *s) {
        if (s->stop_phase == STOP_DONE)
                return;
        s->stop_phase = STOP_DONE;
        s->stop_timer = sd_event_source_disable_unref(s->stop_timer);
        if (s->stopped)
                s->stopped(s, s->stopped_userdata);
}

static int stop_timer_cb(sd_event_source *src, uint64_t usec, void *userdata);

static void stop_arm(rpc_server *s, uint64_t usec) {
        s->stop_timer = sd_event_source_disable_unref(s->stop_timer);
        if (sd_event_add_time_relative(s->event, &s->stop_timer, CLOCK_MONOTONIC, usec, 0, stop_timer_cb, s) < 0)
                log_warning("rpc: cannot arm the shutdown timer; the stop waits without a bound");
}

/* Every request answered: read nothing more, close each connection once
 * its output is written. */
static void stop_flush(rpc_server *s) {
        s->stop_phase = STOP_FLUSH;
        stop_listening(s);
        for (rpc_conn *c = s->conns; c; c = c->next) {
                c->close_after_flush = true;
                if (c->out_off == c->out_len || c->handshaking)
                        conn_close_soon(c);
                else
                        conn_update_events(c);
        }
        if (!s->conns)
                return stop_done(s);
        stop_arm(s, s->stop_flush_usec);
}

static void stop_check(rpc_server *s) {
        if ((s->stop_phase == STOP_FINISH || s->stop_phase == STOP_ROLLBACK) && stop_in_flight(s) == 0)
                stop_flush(s);
        else if (s->stop_phase == STOP_FLUSH && !s->conns)
                stop_done(s);
}

/* Cancels every request in flight that can be (their owners roll back). */
static void stop_rollback(rpc_server *s) {
        s->stop_phase = STOP_ROLLBACK;
        unsigned n = 0;
        for (rpc_conn *c = s->conns; c; c = c->next)
                for (rpc_request *r = c->pending; r; r = r->pending_next) {
                        if (!r->cancel || r->cancel_requested)
                                continue;
                        /* fn never finishes r itself (rpc_cancel_fn): the list holds. */
                        rpc_cancel_fn fn = r->cancel;
                        r->cancel = NULL;
                        r->stop_cancelled = true;
                        r->cancel_requested = fn(r, r->cancel_userdata);
                        n += r->cancel_requested;
                }
        log_info("stopping: %u request(s) still in flight after the shutdown grace; rolling back %u of them",
                 stop_in_flight(s), n);
        stop_arm(s, s->stop_rollback_usec);
}

/* The last resort: whatever is still in flight is answered "unknown". */
static void stop_give_up(rpc_server *s) {
        for (rpc_conn *c = s->conns; c; c = c->next)
                for (rpc_request *r = c->pending; r; r = r->pending_next) {
                        if (!r->id)
                                continue;
                        log_warning("stopping: %s (%s) did not finish or roll back in time; answering that its "
                                    "outcome is unknown", r->method, c->peer);
                        _cleanup_free_ char *message = NULL;
                        if (asprintf(&message, "sandboxd is stopping: %s did not finish within the shutdown grace "
                                     "and could not be rolled back; whether it took effect is known once the daemon "
                                     "is back (look the object up then)", r->method) < 0)
                                message = NULL;
                        cJSON *extra = cJSON_CreateObject();
                        cJSON_AddNullToObject(extra, "completed");
                        r->failed = true;
                        conn_queue(c, error_message_data(TAKE_PTR(r->id), RPC_APP_ERROR, "unavailable", NULL,
                                                         message ? message : "unavailable", extra));
                }
        stop_flush(s);
}

static int stop_timer_cb(sd_event_source *src, uint64_t usec, void *userdata) {
        rpc_server *s = userdata;
        if (s->stop_phase == STOP_FINISH)
                stop_rollback(s);
        else if (s->stop_phase == STOP_ROLLBACK)
                stop_give_up(s);
        else if (s->stop_phase == STOP_FLUSH) {
                unsigned n = 0;
                for (rpc_conn *c = s->conns; c; c = c->next)
                        n++;
                log_warning("stopping: %u connection(s) did not take their last answers in time; closing them", n);
                return stop_done(s), 0;
        }
        stop_check(s);
        return 0;
}

void rpc_server_stop(rpc_server *s, const rpc_stop_config *cfg, rpc_stopped_fn stopped, void *userdata) {
        if (!s || s->stop_phase != STOP_NONE)
                return;
        s->stop_phase = STOP_FINISH;
        s->stop_rollback_usec = cfg->rollback_usec;
        s->stop_flush_usec = cfg->flush_usec;
        s->stopped = stopped;
        s->stopped_userdata = userdata;
        /* Socket activation: the backlog stays with the service manager,
         * for the next daemon. */
        if (!s->bound_path)
                stop_listening(s);
        unsigned n = stop_in_flight(s);
        if (n > 0)
                log_info("stopping: %u request(s) in flight may finish for up to %" PRIu64 " ms", n,
                         cfg->finish_usec / 1000);
        stop_arm(s, cfg->finish_usec);
        stop_check(s);
}

bool rpc_server_is_stopping(const rpc_server *s) {
        return s && s->stop_phase != STOP_NONE;
}

/* ---- server ---- */

void rpc_server_free(rpc_server *s) {
        if (!s)
                return;
        /* Close connections first: their close handler may still look at
         * the server's owner, which outlives this call. */
        while (s->conns)
                conn_close(s->conns);
        for (size_t i = 0; i < s->n_tls; i++) {
                sd_event_source_disable_unref(s->tls[i].io);
                sd_event_source_disable_unref(s->tls[i].backoff);
                close(s->tls[i].fd);
                SSL_CTX_free(s->tls[i].ctx);
                free(s->tls[i].name);
        }
        free(s->addr_conns);
        sd_event_source_disable_unref(s->stop_timer);
        sd_event_source_disable_unref(s->listen_io);
        sd_event_source_disable_unref(s->accept_backoff);
        if (s->listen_fd >= 0)
                close(s->listen_fd);
        if (s->reserve_fd >= 0)
                close(s->reserve_fd);
        free(s->uid_conns);
        /* Unlink only the socket we made: a newer daemon may have replaced it. */
        struct stat st;
        if (s->bound_path && lstat(s->bound_path, &st) == 0 && st.st_dev == s->bound_dev &&
            st.st_ino == s->bound_ino)
                (void) unlink(s->bound_path);
        free(s->bound_path);
        for (size_t i = 0; i < s->n_methods; i++)
                free(s->methods[i].name);
        free(s->methods);
        sd_event_unref(s->event);
        free(s);
}

int rpc_server_add_method(rpc_server *s, const char *method, rpc_handler handler, void *userdata) {
        if (find_method(s, method))
                return -EEXIST;
        rpc_method *m = realloc(s->methods, (s->n_methods + 1) * sizeof(*m));
        if (!m)
                return -ENOMEM;
        s->methods = m;
        char *name = strdup(method);
        if (!name)
                return -ENOMEM;
        s->methods[s->n_methods++] = (rpc_method) { name, handler, userdata, false };
        return 0;
}

int rpc_server_set_method_bulk(rpc_server *s, const char *method) {
        for (size_t i = 0; i < s->n_methods; i++)
                if (streq(s->methods[i].name, method)) {
                        s->methods[i].bulk = true;
                        return 0;
                }
        return -ENOENT;
}

void rpc_server_set_params_check(rpc_server *s, rpc_params_check check) {
        s->params_check = check;
}

void rpc_server_set_close_handler(rpc_server *s, rpc_close_handler h, void *userdata) {
        s->close_handler = h;
        s->close_userdata = userdata;
}

/* ---- parameter helpers ---- */

static int param_get(rpc_request *req, const char *field, bool required, cJSON **ret, sb_error **ret_err) {
        cJSON *v = cJSON_IsObject(req->params) ? cJSON_GetObjectItemCaseSensitive(req->params, field) : NULL;
        if (!v && required)
                return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: missing required parameter", field);
        *ret = v;
        return 0;
}

static int param_wrong_type(const char *field, const char *what, sb_error **ret_err) {
        return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: must be %s", field, what);
}

int rpc_param_string(rpc_request *req, const char *field, bool required, const char **ret,
                     sb_error **ret_err) {
        cJSON *v = NULL;
        int r = param_get(req, field, required, &v, ret_err);
        if (r < 0 || !v)
                return r;
        if (!cJSON_IsString(v))
                return param_wrong_type(field, "a string", ret_err);
        *ret = v->valuestring;
        return 0;
}

int rpc_param_bool(rpc_request *req, const char *field, bool *ret, sb_error **ret_err) {
        cJSON *v = NULL;
        int r = param_get(req, field, false, &v, ret_err);
        if (r < 0 || !v)
                return r;
        if (!cJSON_IsBool(v))
                return param_wrong_type(field, "true or false", ret_err);
        *ret = cJSON_IsTrue(v);
        return 0;
}

int rpc_param_int(rpc_request *req, const char *field, bool required, int64_t min, int64_t max,
                  int64_t *ret, sb_error **ret_err) {
        cJSON *v = NULL;
        int r = param_get(req, field, required, &v, ret_err);
        if (r < 0 || !v)
                return r;
        double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        /* 2^63 is exactly representable; anything at or past it (or below
         * -2^63) does not fit an int64_t and must not reach the cast. */
        if (!isfinite(d) || d != floor(d) || d >= 9223372036854775808.0 || d < -9223372036854775808.0 ||
            (int64_t) d < min || (int64_t) d > max)
                return sb_error_set(ret_err, -EINVAL, NULL, field,
                                    "%s: must be an integer from %" PRId64 " to %" PRId64, field, min, max);
        *ret = (int64_t) d;
        return 0;
}

char *rpc_format_duration(int64_t ms, char *buf, size_t size) {
        static const struct {
                const char *unit;
                int64_t ms;
        } units[] = { { "h", 3600000 }, { "m", 60000 }, { "s", 1000 }, { "ms", 1 } };
        size_t o = 0;
        buf[0] = '\0';
        if (ms <= 0) {
                snprintf(buf, size, "0s");
                return buf;
        }
        for (size_t i = 0; i < ELEMENTSOF(units) && ms > 0 && o < size; i++) {
                int64_t n = ms / units[i].ms;
                ms %= units[i].ms;
                if (n > 0) {
                        int w = snprintf(buf + o, size - o, "%" PRId64 "%s", n, units[i].unit);
                        o += w > 0 ? (size_t) w : 0;
                }
        }
        return buf;
}

int rpc_param_duration_ms(rpc_request *req, const char *field, bool required, int64_t min_ms, int64_t max_ms,
                          int64_t *ret, sb_error **ret_err) {
        cJSON *v = NULL;
        int r = param_get(req, field, required, &v, ret_err);
        if (r < 0 || !v)
                return r;
        char lo[32], hi[32];
        rpc_format_duration(min_ms, lo, sizeof(lo));
        rpc_format_duration(max_ms, hi, sizeof(hi));
        double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!isfinite(d) || d != floor(d))
                return sb_error_set(ret_err, -EINVAL, NULL, field,
                                    "%s: must be a whole number of milliseconds from %" PRId64 " ms (%s) to %" PRId64
                                    " ms (%s)", field, min_ms, lo, max_ms, hi);
        if (d > (double) max_ms)
                return sb_error_set(ret_err, -EINVAL, NULL, field,
                                    "%s: %.15g ms is over the maximum of %" PRId64 " ms (%s)", field, d, max_ms, hi);
        if (d < (double) min_ms)
                return sb_error_set(ret_err, -EINVAL, NULL, field,
                                    "%s: %.15g ms is under the minimum of %" PRId64 " ms (%s)", field, d, min_ms, lo);
        *ret = (int64_t) d;
        return 0;
}

int rpc_param_object(rpc_request *req, const char *field, bool required, cJSON **ret, sb_error **ret_err) {
        cJSON *v = NULL;
        int r = param_get(req, field, required, &v, ret_err);
        if (r < 0 || !v)
                return r;
        if (!cJSON_IsObject(v))
                return param_wrong_type(field, "an object", ret_err);
        *ret = v;
        return 0;
}

int rpc_param_array(rpc_request *req, const char *field, bool required, cJSON **ret, sb_error **ret_err) {
        cJSON *v = NULL;
        int r = param_get(req, field, required, &v, ret_err);
        if (r < 0 || !v)
                return r;
        if (!cJSON_IsArray(v))
                return param_wrong_type(field, "an array", ret_err);
        *ret = v;
        return 0;
}
