/* fs.watch: file change notifications from inside a sandbox. The watching
 * is sandbox-init's (libcore/init/watch.c: inotify in a child confined as
 * the sandbox user, in the sandbox's namespaces and root, so paths are the
 * sandbox's own); this file relays its batches to the connection that
 * asked, as `fs.watchEvent` notifications, and answers the request when
 * the watch ends: request.cancel (-32800), the sandbox stopping (a final
 * result with reason "sandbox_stopped"), or the watched path going.
 *
 * Flow control: a watch never pauses the agent socket (commands of the
 * same sandbox would stall behind a slow watcher). While the connection is
 * congested (rpc.h) events are counted and dropped, and one "overflow"
 * event with the count goes out before the next event or once the
 * connection drains. Inside the sandbox init's own bounds apply the same
 * way (libcore/init/watch.c). At most FS_WATCHES_PER_SANDBOX watches run
 * per sandbox.
 *
 * Everything from init is sandbox-controlled: event types are checked
 * against the known ones, strings and numbers bounded, before relaying. */
#include <string.h>
#include "libcore/agent.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/limits.h"
#include "sandboxd/text.h"

/* Watches at once per sandbox (docs/API.md "fs.watch"). */
#define FS_WATCHES_PER_SANDBOX 16
/* Events taken from one batch of init (a batch is at most 64 KiB of lines). */
#define FS_WATCH_BATCH_MAX 4096

typedef struct fs_watch {
        struct fs_watch *next;
        manager *m;
        session *sess;            /* NULL once the session is gone */
        unsigned agent_id;        /* id on the agent channel ("op":"watch") */
        char watch_id[24];
        rpc_request *req;         /* answered when the watch ends */
        char *path;
        bool recursive;
        bool cancelled;           /* request.cancel: answered -32800 at the end */
        bool unwatch_sent;
        uint64_t events;          /* events relayed */
        uint64_t dropped;         /* dropped while the connection was congested, not told yet */
} fs_watch;

static fs_watch *watches;
static unsigned next_agent_id;

static fs_watch *find(session *s, unsigned id) {
        for (fs_watch *w = watches; w; w = w->next)
                if (w->sess == s && w->agent_id == id)
                        return w;
        return NULL;
}

static void unlink_watch(fs_watch *w) {
        for (fs_watch **pp = &watches; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        return;
                }
}

static void free_watch(fs_watch *w) {
        free(w->path);
        free(w);
}

/* Asks init to end the watch ("unwatch"); its "watch_end" answers. */
static bool send_unwatch(fs_watch *w) {
        if (w->unwatch_sent)
                return true;
        if (!w->sess || w->sess->agent_closed)
                return false;
        cJSON *op = cJSON_CreateObject();
        if (!op)
                return false;
        cJSON_AddStringToObject(op, "op", "unwatch");
        cJSON_AddNumberToObject(op, "id", w->agent_id);
        if (agent_send(w->sess, op) < 0)
                return false;
        w->unwatch_sent = true;
        return true;
}

static bool cancel_watch(rpc_request *req, void *userdata) {
        fs_watch *w = userdata;
        if (!send_unwatch(w))
                return false;
        w->cancelled = true;
        return true;
}

/* The overflow of events dropped for a congested connection, once it can
 * take it. */
static void tell_dropped(fs_watch *w) {
        rpc_conn *conn = w->req->conn;
        if (!w->dropped || !rpc_conn_is_open(conn) || rpc_conn_is_congested(conn))
                return;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "watchId", w->watch_id);
        cJSON_AddStringToObject(p, "type", "overflow");
        cJSON_AddStringToObject(p, "reason", "client");
        cJSON_AddNumberToObject(p, "dropped", (double)w->dropped);
        w->dropped = 0;
        rpc_notify(conn, "fs.watchEvent", p);
}

/* A path that is not well-formed UTF-8 reaches the client with U+FFFD in
 * place of each ill-formed byte (rpc.c), so two names can read the same:
 * its exact bytes go along too, base64, as `key` (docs/API.md fs.watch). */
static void add_path_bytes(cJSON *p, const char *key, const char *path) {
        size_t len = strlen(path);
        if (text_utf8_valid(path, len, NULL))
                return;
        _cleanup_free_ char *b64 = core_base64_encode(path, len);
        if (b64)
                cJSON_AddStringToObject(p, key, b64);
}

/* One event of init's batch as the notification's params, or NULL when it
 * is not one of ours (a sandbox that speaks on init's socket). */
static cJSON *event_params(const fs_watch *w, const cJSON *e) {
        static const char *const types[] = { "created", "modified", "deleted", "renamed", "overflow" };
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "type"));
        const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "path"));
        const char *old = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "oldPath"));
        const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "reason"));
        const cJSON *dropped = cJSON_GetObjectItemCaseSensitive(e, "dropped");
        bool known = false;
        for (size_t i = 0; type && i < ELEMENTSOF(types); i++)
                known = known || streq(type, types[i]);
        bool overflow = known && streq(type, "overflow");
        if (!known || (!overflow && (!path || path[0] != '/')) || (path && strlen(path) > LIMIT_PATH_BYTES) ||
            (old && (old[0] != '/' || strlen(old) > LIMIT_PATH_BYTES)) || (reason && strlen(reason) > 32))
                return NULL;
        cJSON *p = cJSON_CreateObject();
        if (!p)
                return NULL;
        cJSON_AddStringToObject(p, "watchId", w->watch_id);
        cJSON_AddStringToObject(p, "type", type);
        if (path) {
                cJSON_AddStringToObject(p, "path", path);
                add_path_bytes(p, "pathBytes", path);
                cJSON_AddBoolToObject(p, "isDir", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "isDir")));
        }
        if (old && streq(type, "renamed")) {
                cJSON_AddStringToObject(p, "oldPath", old);
                add_path_bytes(p, "oldPathBytes", old);
        }
        if (overflow)
                cJSON_AddStringToObject(p, "reason", reason ? reason : "kernel");
        if (overflow && cJSON_IsNumber(dropped) && dropped->valuedouble >= 1 && dropped->valuedouble < 1e15)
                cJSON_AddNumberToObject(p, "dropped", (double)(uint64_t)dropped->valuedouble);
        return p;
}

void fs_watch_on_events(session *s, unsigned id, const cJSON *msg) {
        fs_watch *w = find(s, id);
        if (!w || w->unwatch_sent)
                return;
        rpc_conn *conn = w->req->conn;
        if (!rpc_conn_is_open(conn))
                return;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "ready"))) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "watchId", w->watch_id);
                if (w->req->id)
                        cJSON_AddItemToObject(p, "requestId", cJSON_Duplicate(w->req->id, true));
                cJSON_AddStringToObject(p, "path", w->path);
                cJSON_AddBoolToObject(p, "recursive", w->recursive);
                rpc_notify(conn, "fs.watchStarted", p);
        }
        const cJSON *e;
        int n = 0;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(msg, "events")) {
                if (++n > FS_WATCH_BATCH_MAX)
                        break;
                if (rpc_conn_is_congested(conn)) {
                        w->dropped++;
                        continue;
                }
                tell_dropped(w);
                cJSON *p = event_params(w, e);
                if (!p)
                        continue;
                w->events++;
                rpc_notify(conn, "fs.watchEvent", p);
        }
}

void fs_watch_conn_drained(rpc_conn *conn) {
        for (fs_watch *w = watches; w; w = w->next)
                if (w->req->conn == conn)
                        tell_dropped(w);
}

static cJSON *final_result(const fs_watch *w, const char *reason) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "watchId", w->watch_id);
        cJSON_AddStringToObject(o, "reason", reason);
        cJSON_AddNumberToObject(o, "events", (double)w->events);
        return o;
}

void fs_watch_on_end(session *s, unsigned id, const cJSON *msg) {
        fs_watch *w = find(s, id);
        if (!w)
                return;
        unlink_watch(w);
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(msg, "errno");
        const char *message = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "message"));
        const char *reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "reason"));
        int err = cJSON_IsNumber(en) && en->valuedouble >= 1 && en->valuedouble <= 4095 ? (int)en->valuedouble : 0;
        if (w->cancelled)
                rpc_reply_error(w->req, RPC_REQUEST_CANCELLED, "cancelled", NULL, "fs.watch %s: cancelled",
                                w->watch_id);
        else if (err == EMFILE && reason && streq(reason, "limit_exceeded"))
                /* init's own cap of watches per sandbox (INIT_WATCH_MAX). */
                rpc_reply_error(w->req, RPC_APP_ERROR, "limit_exceeded", NULL, "%s",
                                message && strlen(message) < 8192 ? message : strerror(err));
        else if (err == EMFILE || err == ENOSPC)
                /* The kernel's inotify limits count per uid of the host
                 * (fs.inotify.max_user_instances, max_user_watches): not the
                 * sandbox's 16 watches, and not the caller's doing alone. */
                rpc_reply_error(w->req, RPC_APP_ERROR, "failed", NULL,
                                "fs.watch %s: the kernel's per-user inotify limit was reached (fs.inotify.%s); "
                                "processes of the same uid hold the rest: %s",
                                TEXT_Q(w->path), err == EMFILE ? "max_user_instances" : "max_user_watches",
                                strerror(err));
        else if (err)
                rpc_reply_error(w->req, RPC_APP_ERROR, err == ENOENT ? "not_found" : "failed", NULL, "%s",
                                message && strlen(message) < 8192 ? message : strerror(err));
        else
                rpc_reply(w->req, final_result(w, reason && (streq(reason, "deleted") || streq(reason, "sandbox_stopped"))
                                                          ? reason : "ended"));
        free_watch(w);
}

void fs_watches_session_detached(session *s) {
        for (fs_watch *w = watches, *next; w; w = next) {
                next = w->next;
                if (w->sess != s)
                        continue;
                unlink_watch(w);
                if (w->cancelled)
                        rpc_reply_error(w->req, RPC_REQUEST_CANCELLED, "cancelled", NULL, "fs.watch %s: cancelled",
                                        w->watch_id);
                else if (w->m->stopping)
                        rpc_reply_error(w->req, RPC_APP_ERROR, "unavailable", NULL,
                                        "sandboxd is shutting down; the watch %s ended", w->watch_id);
                else
                        rpc_reply(w->req, final_result(w, "sandbox_stopped"));
                free_watch(w);
        }
}

void fs_watches_drain(manager *m) {
        for (fs_watch *w = watches, *next; w; w = next) {
                next = w->next;
                if (w->m != m)
                        continue;
                unlink_watch(w);
                /* The watcher in the sandbox ends too: a watch does not
                 * outlive the daemon that relays it. */
                (void)send_unwatch(w);
                cJSON *d = cJSON_CreateObject();
                cJSON_AddBoolToObject(d, "completed", false);
                cJSON_AddStringToObject(d, "watchId", w->watch_id);
                rpc_reply_unavailable(w->req, d,
                                      "sandboxd is stopping; the watch %s ended after %llu events: watch again once "
                                      "the daemon is back", w->watch_id, (unsigned long long)w->events);
                free_watch(w);
        }
}

void fs_watches_conn_closed(rpc_conn *conn) {
        for (fs_watch *w = watches; w; w = w->next)
                if (w->req->conn == conn)
                        (void)send_unwatch(w);
}

static void method_watch(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *path = NULL;
        bool recursive = false;
        if (rpc_param_string(req, "path", true, &path, &err) < 0 ||
            rpc_param_bool(req, "recursive", &recursive, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (!*path || strlen(path) > LIMIT_PATH_BYTES) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "path", "path: must be a path of 1-%d bytes",
                                LIMIT_PATH_BYTES);
                return;
        }
        sandbox *sb = sandbox_require_unpaused(req, m, "sandbox", method_watch);
        if (!sb)
                return;
        unsigned n = 0;
        for (fs_watch *w = watches; w; w = w->next)
                n += w->sess == sb->sess;
        if (n >= FS_WATCHES_PER_SANDBOX) {
                rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "fs.watch: sandbox '%s' has %u watches, the most it may have; cancel one first",
                                sb->name, n);
                return;
        }
        fs_watch *w = calloc(1, sizeof(*w));
        cJSON *op = cJSON_CreateObject();
        if (!w || !op || !(w->path = strdup(path))) {
                if (w)
                        free(w->path);
                free(w);
                cJSON_Delete(op);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        w->m = m;
        w->sess = sb->sess;
        /* Ids start from the clock, not 1: an init re-adopted after a
         * restart may still be reaping a watch of the previous daemon. */
        if (!next_agent_id)
                next_agent_id = (unsigned)(core_now_ms() & 0x3fffffff);
        w->agent_id = ++next_agent_id ? next_agent_id : ++next_agent_id;
        snprintf(w->watch_id, sizeof(w->watch_id), "watch-%u", w->agent_id);
        w->req = req;
        w->recursive = recursive;
        cJSON_AddStringToObject(op, "op", "watch");
        cJSON_AddNumberToObject(op, "id", w->agent_id);
        cJSON_AddStringToObject(op, "path", path);
        cJSON_AddBoolToObject(op, "recursive", recursive);
        int r = agent_send(sb->sess, op);
        if (r < 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "sandbox_stopped", NULL, "fs.watch %s: %s", path, strerror(-r));
                free_watch(w);
                return;
        }
        w->next = watches;
        watches = w;
        rpc_request_set_cancel(req, cancel_watch, w);
        /* Killed here, the watch runs in the sandbox with no daemon to
         * relay it: init ends it when its agent connection closes. */
        core_fault("watch.sent");
}

void register_fs_watch_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "fs.watch", method_watch, m);
}
