/* Each sandbox's envd (spec/envd of e2b-dev/E2B) over sandboxd's
 * command.* and fs.* methods, as the tenant of the sandbox's access
 * token (docs/E2B.md "envd"): Connect-RPC with the JSON codec (unary:
 * application/json; server streams: application/connect+json, each
 * message a 5-byte envelope, the last one flagged end-of-stream) and the
 * /files HTTP endpoints.
 *
 * Processes are addressed by pid in E2B; sandboxd names commands by
 * cmdId. The pid shown is derived from the cmdId (its last 7 hex digits),
 * and a pid is found again by listing the sandbox's commands. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <zlib.h>
#include "e2b/gateway.h"

#define ENV_FLAG_END 0x02

/* ---- Connect framing ---- */

static const char *connect_status_code(int http) {
        switch (http) {
        case 400: return "invalid_argument";
        case 401: return "unauthenticated";
        case 404: return "not_found";
        case 409: return "already_exists";
        case 429: return "resource_exhausted";
        case 501: return "unimplemented";
        case 502:
        case 503: return "unavailable";
        default: return "internal";
        }
}

static int connect_error(gw_conn *c, int http, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int connect_error(gw_conn *c, int http, const char *fmt, ...) {
        char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "code", connect_status_code(http));
        cJSON_AddStringToObject(o, "message", msg ? msg : "error");
        free(msg);
        return gw_send_json(c, http, o);
}

static int daemon_error(gw_conn *c, const client_error *e, const char *what) {
        return connect_error(c, gw_status_of(e), "%s: %s", what, e ? e->message : "failed");
}

static int send_envelope(gw_conn *c, unsigned char flags, cJSON *msg) {
        char *text = cJSON_PrintUnformatted(msg);
        cJSON_Delete(msg);
        if (!text)
                return -ENOMEM;
        size_t n = strlen(text);
        unsigned char *buf = malloc(n + 5);
        if (!buf) {
                free(text);
                return -ENOMEM;
        }
        buf[0] = flags;
        buf[1] = (unsigned char) (n >> 24);
        buf[2] = (unsigned char) (n >> 16);
        buf[3] = (unsigned char) (n >> 8);
        buf[4] = (unsigned char) n;
        memcpy(buf + 5, text, n);
        int r = gw_send_chunk(c, buf, n + 5);
        free(buf);
        free(text);
        return r;
}

/* An error of a server-streaming call: Connect sends it in the
 * end-of-stream message of a 200 response (a client reads no error body
 * from another status of a stream). */
static void stream_error(gw_conn *c, int http, const char *msg) {
        cJSON *end = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(end, "error");
        cJSON_AddStringToObject(e, "code", connect_status_code(http));
        cJSON_AddStringToObject(e, "message", msg);
        gw_send_chunked_head(c, 200, "application/connect+json");
        send_envelope(c, ENV_FLAG_END, end);
        gw_send_chunked_end(c);
}

/* The message of a request: unary JSON, or the first envelope of a
 * streaming request. NULL when it is not a JSON object. */
static cJSON *request_message(const gw_request *r, bool streaming) {
        if (!streaming)
                return cJSON_ParseWithLength(r->body, r->body_len);
        if (r->body_len < 5)
                return NULL;
        const unsigned char *b = (const unsigned char *) r->body;
        size_t n = (size_t) b[1] << 24 | (size_t) b[2] << 16 | (size_t) b[3] << 8 | b[4];
        if (b[0] != 0 || n > r->body_len - 5)
                return NULL;
        return cJSON_ParseWithLength(r->body + 5, n);
}

static const char *str_of(const cJSON *o, const char *k) {
        return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* The user of a request: Authorization "Basic base64(USER:)" as the SDK
 * sends it; absent is the sandbox user. Returns 0 (sandbox user), 1
 * (root), -1 (another user: refused). */
static int request_user(const gw_request *r) {
        const char *a = gw_header_get(r, "Authorization");
        if (!a)
                return 0;
        if (strncasecmp(a, "Basic ", 6) != 0)
                return -1;
        void *dec = NULL;
        size_t len = 0;
        if (client_base64_decode(a + 6, &dec, &len) < 0)
                return -1;
        char *user = dec, *colon = memchr(user, ':', len);
        if (colon)
                *colon = 0;
        int res = !strcmp(user, "root") ? 1 : (!strcmp(user, "user") || !strcmp(user, "sandbox")) ? 0 : -1;
        free(dec);
        return res;
}

static unsigned pid_of(const char *cmd_id) {
        size_t n = cmd_id ? strlen(cmd_id) : 0;
        const char *tail = n > 7 ? cmd_id + n - 7 : (cmd_id ? cmd_id : "0");
        return (unsigned) strtoul(tail, NULL, 16) + 1;
}

/* ---- processes by tag ----
 *
 * E2B addresses a process by pid or by the tag its Start gave it
 * (ProcessSelector); sandboxd's commands have neither. The pid is derived
 * from the cmdId (pid_of); a tag is kept here, in the gateway, with the
 * cmdId it names, for the tenant and sandbox of the Start: at most
 * TAGS_PER_SANDBOX a sandbox and TAGS_PER_TENANT a tenant (a Start past
 * them: resource_exhausted) and TAGS_MAX in all (past them the oldest is
 * forgotten). Tags of commands
 * that ended are dropped at the sandbox's next tagged Start, and all of
 * them with the gateway's process: a tag names a process only through the
 * gateway that started it (docs/E2B.md "envd"). */
#define TAG_MAX_BYTES 256
#define TAGS_PER_SANDBOX 64
#define TAGS_PER_TENANT 1024
#define TAGS_MAX 4096

typedef struct tag_entry {
        char tenant[80], sbx[64], cmd_id[64]; /* cmd_id "" while its Start is starting it */
        char *tag;
} tag_entry;

static pthread_mutex_t tags_lock = PTHREAD_MUTEX_INITIALIZER;
static tag_entry *tags; /* oldest first */
static size_t n_tags;

static bool tag_match(const tag_entry *t, const char *tenant, const char *sbx) {
        return !strcmp(t->tenant, tenant) && !strcmp(t->sbx, sbx);
}

static void tag_remove_at(size_t i) {
        free(tags[i].tag);
        memmove(tags + i, tags + i + 1, (n_tags - i - 1) * sizeof(*tags));
        n_tags--;
}

/* Whether cmdId `id` is one of the running commands of command.list
 * answer `list`. */
static bool running_in(const cJSON *list, const char *id) {
        const cJSON *cmd;
        cJSON_ArrayForEach(cmd, cJSON_GetObjectItemCaseSensitive(list, "commands"))
                if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cmd, "exitCode")) && str_of(cmd, "cmdId") &&
                    !strcmp(str_of(cmd, "cmdId"), id))
                        return true;
        return false;
}

/* Reserves `tag` for a Start in (tenant, sbx), whose running commands
 * command.list answered `list` (the tags of the others are dropped
 * first). 0, -EEXIST (it names a running process, or one starting),
 * -EUSERS (the sandbox has TAGS_PER_SANDBOX), -ENOMEM. */
static int tag_reserve(const char *tenant, const char *sbx, const char *tag, const cJSON *list) {
        int r = 0;
        size_t mine = 0, tenants = 0;
        pthread_mutex_lock(&tags_lock);
        for (size_t i = 0; i < n_tags;) {
                if (tag_match(&tags[i], tenant, sbx) && tags[i].cmd_id[0] && !running_in(list, tags[i].cmd_id)) {
                        tag_remove_at(i);
                        continue;
                }
                tenants += !strcmp(tags[i].tenant, tenant);
                if (tag_match(&tags[i], tenant, sbx)) {
                        mine++;
                        if (!strcmp(tags[i].tag, tag))
                                r = -EEXIST;
                }
                i++;
        }
        if (!r && (mine >= TAGS_PER_SANDBOX || tenants >= TAGS_PER_TENANT))
                r = -EUSERS;
        if (!r && n_tags >= TAGS_MAX)
                tag_remove_at(0);
        tag_entry *n = r ? NULL : realloc(tags, (n_tags + 1) * sizeof(*tags));
        if (!r && n) {
                tags = n;
                tag_entry *t = &tags[n_tags];
                *t = (tag_entry) {0};
                snprintf(t->tenant, sizeof(t->tenant), "%s", tenant);
                snprintf(t->sbx, sizeof(t->sbx), "%s", sbx);
                if ((t->tag = strdup(tag)))
                        n_tags++;
                else
                        r = -ENOMEM;
        } else if (!r)
                r = -ENOMEM;
        pthread_mutex_unlock(&tags_lock);
        return r;
}

/* Sets the cmdId of a reserved tag (`cmd_id` NULL: drops the tag, its
 * Start failed). */
static void tag_set(const char *tenant, const char *sbx, const char *tag, const char *cmd_id) {
        pthread_mutex_lock(&tags_lock);
        for (size_t i = 0; i < n_tags; i++)
                if (tag_match(&tags[i], tenant, sbx) && !strcmp(tags[i].tag, tag)) {
                        if (cmd_id)
                                snprintf(tags[i].cmd_id, sizeof(tags[i].cmd_id), "%s", cmd_id);
                        else
                                tag_remove_at(i);
                        break;
                }
        pthread_mutex_unlock(&tags_lock);
}

/* The tag of command `cmd_id` (new string), or NULL. */
static char *tag_of(const char *tenant, const char *sbx, const char *cmd_id) {
        char *out = NULL;
        pthread_mutex_lock(&tags_lock);
        for (size_t i = 0; i < n_tags && !out; i++)
                if (tag_match(&tags[i], tenant, sbx) && !strcmp(tags[i].cmd_id, cmd_id))
                        out = strdup(tags[i].tag);
        pthread_mutex_unlock(&tags_lock);
        return out;
}

/* The cmdId a tag names (into out), or false. */
static bool tag_lookup(const char *tenant, const char *sbx, const char *tag, char out[64]) {
        bool found = false;
        pthread_mutex_lock(&tags_lock);
        for (size_t i = 0; i < n_tags && !found; i++)
                if (tag_match(&tags[i], tenant, sbx) && !strcmp(tags[i].tag, tag) && tags[i].cmd_id[0]) {
                        memcpy(out, tags[i].cmd_id, 64);
                        found = true;
                }
        pthread_mutex_unlock(&tags_lock);
        return found;
}

/* Whether ProcessSelector `sel` has a pid (1 to 2^32-1) or a tag (not
 * empty). */
static bool selector_ok(const cJSON *sel) {
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(sel, "pid");
        const char *tag = str_of(sel, "tag");
        return (cJSON_IsNumber(pid) && pid->valuedouble >= 1 && pid->valuedouble <= UINT32_MAX) || (tag && *tag);
}

#define SELECTOR_REQUIRED "process.pid or process.tag: required (the process's selector: a pid of 1 or more, or a tag)"

/* The running command a ProcessSelector `sel` ({"pid": N} or {"tag": S})
 * names, found in command.list answer `list`: 0 with *ret_cmd (new
 * string) and *ret_tty, *ret_pid; else the HTTP status of the refusal
 * (400: no selector; 404: no such running process) with msg. */
static int select_in(const char *tenant, const char *sbx, const cJSON *sel, const cJSON *list, char **ret_cmd,
                     bool *ret_tty, unsigned *ret_pid, char *msg, size_t msize) {
        const cJSON *pid = cJSON_GetObjectItemCaseSensitive(sel, "pid");
        const char *tag = str_of(sel, "tag");
        char tag_cmd[64] = "";
        unsigned want = 0;
        if (cJSON_IsNumber(pid) && pid->valuedouble >= 1 && pid->valuedouble <= UINT32_MAX)
                want = (unsigned) pid->valuedouble;
        else if (!tag || !*tag) {
                snprintf(msg, msize, SELECTOR_REQUIRED);
                return 400;
        }
        if (!want && !tag_lookup(tenant, sbx, tag, tag_cmd)) {
                snprintf(msg, msize, "process with tag '%.100s' not found", tag);
                return 404;
        }
        const cJSON *cmd;
        cJSON_ArrayForEach(cmd, cJSON_GetObjectItemCaseSensitive(list, "commands")) {
                const char *id = str_of(cmd, "cmdId");
                if (!id || !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cmd, "exitCode")) ||
                    (want ? pid_of(id) != want : strcmp(id, tag_cmd)))
                        continue;
                if (!(*ret_cmd = strdup(id))) {
                        snprintf(msg, msize, "out of memory");
                        return 500;
                }
                if (ret_tty)
                        *ret_tty = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cmd, "tty"));
                if (ret_pid)
                        *ret_pid = pid_of(id);
                return 0;
        }
        if (want)
                snprintf(msg, msize, "process with pid %u not found", want);
        else
                snprintf(msg, msize, "process with tag '%.100s' not found", tag);
        return 404;
}

/* E2B's user `user` has its home at /home/user, and envd resolves a
 * relative path (and a process without cwd) against the home of the
 * call's user (docs/E2B.md "The base template and its user"): the
 * sandbox user's is /home/user, root's /root. */
#define USER_HOME "/home/user"

/* `path` made absolute for the user (root when `root`): a relative one
 * below that user's home, "~" and "~/..." too. A new string (NULL on
 * ENOMEM). */
static char *abs_path(const char *path, bool root) {
        const char *home = root ? "/root" : USER_HOME;
        char *out = NULL;
        if (path[0] == '/')
                return strdup(path);
        if (!strcmp(path, "~") || !*path)
                return strdup(home);
        if (!strncmp(path, "~/", 2))
                path += 2;
        if (asprintf(&out, "%s/%s", home, path) < 0)
                return NULL;
        return out;
}

/* ---- process.Process ---- */

typedef struct start_state {
        gw_conn *c;
        const gw_config *cfg;
        const char *tenant, *sbx;
        const char *gone; /* the sandbox ended under the process: the stream's error */
        bool pty;       /* started with a pty: output is E2B's pty data */
        const char *tag; /* Start's tag, reserved (tag_reserve), or NULL */
        char *id_copy;  /* the command's cmdId, from command.started */
        bool ended;     /* its command.exit was relayed */
} start_state;

/* Whether sandbox `sbx` is gone, or its session stopping or ended. */
static bool sandbox_gone(const gw_config *cfg, const char *tenant, const char *sbx) {
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        cJSON_AddStringToObject(p, "name", sbx);
        client_error *err = NULL;
        bool gone;
        if (gw_daemon_call(cfg, tenant, "sandbox.get", p, &res, &err) < 0)
                gone = gw_status_of(err) == 404;
        else {
                const char *st = str_of(res, "status");
                gone = !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(res, "session")) ||
                       !st || (strcmp(st, "running") && strcmp(st, "pending"));
        }
        client_error_free(err);
        cJSON_Delete(res);
        return gone;
}

static void on_command_note(const client_msg *m, void *userdata) {
        start_state *s = userdata;
        const char *cmd_id = str_of(m->params, "cmdId");
        if (!m->method || !cmd_id)
                return;
        cJSON *ev = NULL, *inner = NULL;
        if (!strcmp(m->method, "command.started")) {
                free(s->id_copy);
                s->id_copy = strdup(cmd_id);
                if (s->tag)
                        tag_set(s->tenant, s->sbx, s->tag, cmd_id);
                ev = cJSON_CreateObject();
                inner = cJSON_AddObjectToObject(ev, "start");
                cJSON_AddNumberToObject(inner, "pid", pid_of(cmd_id));
        } else if (!strcmp(m->method, "command.output") && s->id_copy && !strcmp(cmd_id, s->id_copy)) {
                const char *stream = str_of(m->params, "stream"), *data = str_of(m->params, "data");
                ev = cJSON_CreateObject();
                inner = cJSON_AddObjectToObject(ev, "data");
                cJSON_AddStringToObject(inner, s->pty ? "pty" : stream && !strcmp(stream, "stderr") ? "stderr" : "stdout",
                                        data ? data : "");
        } else if (!strcmp(m->method, "command.exit") && s->id_copy && !strcmp(cmd_id, s->id_copy)) {
                double code = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(m->params, "exitCode"));
                char status[64];
                int ci = code == code ? (int) code : -1;
                if (ci > 128 && s->cfg && sandbox_gone(s->cfg, s->tenant, s->sbx)) {
                        /* Killed with its sandbox: envd's stream breaks
                         * then, and E2B's SDK tells the caller so. */
                        s->gone = "the sandbox was killed or reached its end of life while the process ran";
                        s->ended = true;
                        return;
                }
                if (ci > 128)
                        snprintf(status, sizeof(status), "signal: %d", ci - 128);
                else
                        snprintf(status, sizeof(status), "exit status %d", ci);
                ev = cJSON_CreateObject();
                inner = cJSON_AddObjectToObject(ev, "end");
                cJSON_AddNumberToObject(inner, "exitCode", ci);
                cJSON_AddBoolToObject(inner, "exited", ci <= 128);
                cJSON_AddStringToObject(inner, "status", status);
                s->ended = true;
        }
        if (ev) {
                cJSON *msg = cJSON_CreateObject();
                cJSON_AddItemToObject(msg, "event", ev);
                send_envelope(s->c, 0, msg);
        }
}

/* Runs `method` with params `p` (taken) on daemon connection `d` and
 * relays it as a Connect server stream on `c`: each notification goes to
 * `fn` (which writes its envelopes), until *done is set by it, the answer
 * comes when `end_on_answer`, an error answers, or the caller goes away
 * (what the method started then goes on or ends with `d`, as its daemon
 * semantics say). Ends the stream, with the error if any: the method's,
 * or *end_error (with Connect code `end_code`) when `fn` set it. */
static void relay_stream(gw_conn *c, client *d, const char *method, cJSON *p, client_notify_fn fn, void *st,
                         bool *done, bool end_on_answer, const char *const *end_error, const char *end_code) {
        int64_t id = client_send(d, method, p);
        gw_send_chunked_head(c, 200, "application/connect+json");
        char *fail = NULL;
        int fail_status = 500;
        while (id > 0 && !*done && !gw_conn_failed(c)) {
                struct pollfd pfd[2] = { { .fd = client_fd(d), .events = POLLIN },
                                         { .fd = gw_conn_fd(c), .events = POLLRDHUP } };
                if (!client_has_pending(d)) {
                        if (poll(pfd, 2, -1) < 0 && errno != EINTR)
                                break;
                        if (pfd[1].revents & (POLLRDHUP | POLLHUP | POLLERR))
                                break;
                        if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                }
                client_msg *m = NULL;
                int rc = client_next(d, 0, &m);
                if (rc == -EBADMSG || rc == 0)
                        continue;
                if (rc < 0) {
                        fail_status = 503;
                        fail = strdup("the connection to sandboxd closed");
                        break;
                }
                if (m->kind == CLIENT_MSG_NOTIFICATION)
                        fn(m, st);
                else if (m->id == id && m->error) {
                        fail_status = gw_status_of(m->error);
                        fail = strdup(m->error->message ? m->error->message : "failed");
                } else if (m->id == id && end_on_answer)
                        *done = true;
                client_msg_free(m);
                if (fail)
                        break;
        }
        cJSON *end = cJSON_CreateObject();
        if (fail || id <= 0) {
                cJSON *e = cJSON_AddObjectToObject(end, "error");
                cJSON_AddStringToObject(e, "code", connect_status_code(fail ? fail_status : 502));
                cJSON_AddStringToObject(e, "message", fail ? fail : "cannot send to sandboxd");
        } else if (end_error && *end_error) {
                cJSON *e = cJSON_AddObjectToObject(end, "error");
                cJSON_AddStringToObject(e, "code", end_code);
                cJSON_AddStringToObject(e, "message", *end_error);
        }
        send_envelope(c, ENV_FLAG_END, end);
        gw_send_chunked_end(c);
        free(fail);
}

static void process_start(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant,
                          const char *sbx) {
        cJSON *req = request_message(r, true);
        const cJSON *proc = cJSON_GetObjectItemCaseSensitive(req, "process");
        const char *cmd = str_of(proc, "cmd");
        int user = request_user(r);
        const cJSON *pty = cJSON_GetObjectItemCaseSensitive(req, "pty");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(pty, "size");
        bool want_stdin = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "stdin"));
        const cJSON *tag_item = cJSON_GetObjectItemCaseSensitive(req, "tag");
        const char *tag_s = cJSON_GetStringValue(tag_item);
        bool tag_bad = tag_item && !cJSON_IsNull(tag_item) &&
                       (!tag_s || !*tag_s || strlen(tag_s) > TAG_MAX_BYTES);
        if (!cmd || user < 0 || tag_bad) {
                cJSON_Delete(req);
                stream_error(c, 400, !cmd ? "process.cmd: required"
                                     : user < 0 ? "user: sandboxd has the sandbox user (E2B's user) and root only"
                                                : "tag: a string of 1 to 256 bytes");
                return;
        }
        char *tag = tag_s ? strdup(tag_s) : NULL;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "sandbox", sbx);
        cJSON_AddStringToObject(p, "cmd", cmd);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(proc, "args");
        if (cJSON_IsArray(args))
                cJSON_AddItemToObject(p, "args", cJSON_Duplicate(args, 1));
        /* E2B's user `user`: its HOME, USER and LOGNAME, under the
         * process's own envs (which win, as in envd). */
        const cJSON *envs = cJSON_GetObjectItemCaseSensitive(proc, "envs"), *ev;
        cJSON *env = cJSON_CreateObject();
        if (user == 0) {
                cJSON_AddStringToObject(env, "HOME", USER_HOME);
                cJSON_AddStringToObject(env, "USER", "user");
                cJSON_AddStringToObject(env, "LOGNAME", "user");
        }
        cJSON_ArrayForEach(ev, envs)
                if (cJSON_IsString(ev) && ev->string) {
                        cJSON_DeleteItemFromObjectCaseSensitive(env, ev->string);
                        cJSON_AddStringToObject(env, ev->string, ev->valuestring);
                }
        if (env->child)
                cJSON_AddItemToObject(p, "env", env);
        else
                cJSON_Delete(env);
        const char *cwd = str_of(proc, "cwd");
        char *cwd_abs = abs_path(cwd ? cwd : "", user == 1);
        if (cwd_abs)
                cJSON_AddStringToObject(p, "cwd", cwd_abs);
        free(cwd_abs);
        if (user == 1)
                cJSON_AddBoolToObject(p, "sudo", true);
        bool is_pty = cJSON_IsObject(pty);
        if (is_pty) {
                /* A pty: stdout and stderr merged (docs/API.md command.run
                 * tty), stdin open for SendInput. */
                cJSON_AddBoolToObject(p, "tty", true);
                double rows = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(size, "rows"));
                double cols = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(size, "cols"));
                if (rows == rows && rows > 0)
                        cJSON_AddNumberToObject(p, "rows", rows);
                if (cols == cols && cols > 0)
                        cJSON_AddNumberToObject(p, "cols", cols);
        }
        cJSON_Delete(req);

        client *d = NULL;
        char *msg = NULL;
        if (gw_daemon_open(cfg, tenant, &d, &msg) < 0) {
                cJSON_Delete(p);
                stream_error(c, 503, msg ? msg : "sandboxd unavailable");
                free(msg);
                free(tag);
                return;
        }
        if (tag) {
                /* The tag is reserved before the start (another Start with
                 * it is refused meanwhile) and names the cmdId from
                 * command.started on. */
                cJSON *lp = cJSON_CreateObject(), *list = NULL;
                cJSON_AddStringToObject(lp, "name", sbx);
                client_error *err = NULL;
                int tr = client_call(d, "command.list", lp, 60000, NULL, NULL, &list, &err) < 0
                                 ? -EIO : tag_reserve(tenant, sbx, tag, list);
                cJSON_Delete(list);
                if (tr < 0) {
                        char m[400];
                        snprintf(m, sizeof(m), tr == -EEXIST ? "tag '%.256s': a running process has it already"
                                               : tr == -EUSERS ? "tag '%.256s': the sandbox (or its tenant) has as "
                                                                 "many tagged processes as the gateway keeps (64 "
                                                                 "a sandbox, 1024 a tenant)"
                                               : "tag '%.256s': cannot list the sandbox's processes", tag);
                        stream_error(c, tr == -EEXIST ? 409 : tr == -EUSERS ? 429 : err ? gw_status_of(err) : 500, m);
                        client_error_free(err);
                        cJSON_Delete(p);
                        client_free(d);
                        free(tag);
                        return;
                }
        }
        /* Detached, as envd's processes are: one whose caller goes away
         * keeps running (sandboxd would hang up a non-detached one), and
         * its output still reaches this connection while it stays open.
         * stdin "" closes stdin at once (E2B's stdin: false). */
        cJSON_AddBoolToObject(p, "detached", true);
        if (!is_pty && !want_stdin)
                cJSON_AddStringToObject(p, "stdin", "");
        start_state s = { .c = c, .pty = is_pty, .cfg = cfg, .tenant = tenant, .sbx = sbx, .tag = tag };
        relay_stream(c, d, "command.run", p, on_command_note, &s, &s.ended, false, &s.gone, "unavailable");
        if (tag && !s.id_copy)
                tag_set(tenant, sbx, tag, NULL);
        free(s.id_copy);
        free(tag);
        client_free(d);
}

/* The sandbox's commands (command.list), or NULL after answering. */
static cJSON *list_commands(const gw_config *cfg, gw_conn *c, const char *tenant, const char *sbx) {
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        cJSON_AddStringToObject(p, "name", sbx);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "command.list", p, &res, &err) < 0) {
                daemon_error(c, err, "list processes");
                client_error_free(err);
                return NULL;
        }
        return res;
}

static void process_list(const gw_config *cfg, gw_conn *c, const char *tenant, const char *sbx) {
        cJSON *res = list_commands(cfg, c, tenant, sbx);
        if (!res)
                return;
        cJSON *out = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(out, "processes"), *cmd;
        cJSON_ArrayForEach(cmd, cJSON_GetObjectItemCaseSensitive(res, "commands")) {
                if (!cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cmd, "exitCode")))
                        continue;
                cJSON *pi = cJSON_CreateObject(), *conf = cJSON_AddObjectToObject(pi, "config");
                cJSON_AddStringToObject(conf, "cmd", str_of(cmd, "cmd") ? str_of(cmd, "cmd") : "");
                const cJSON *args = cJSON_GetObjectItemCaseSensitive(cmd, "args");
                cJSON_AddItemToObject(conf, "args", args ? cJSON_Duplicate(args, 1) : cJSON_CreateArray());
                cJSON_AddItemToObject(conf, "envs", cJSON_CreateObject());
                if (str_of(cmd, "cwd"))
                        cJSON_AddStringToObject(conf, "cwd", str_of(cmd, "cwd"));
                cJSON_AddNumberToObject(pi, "pid", pid_of(str_of(cmd, "cmdId")));
                char *tag = str_of(cmd, "cmdId") ? tag_of(tenant, sbx, str_of(cmd, "cmdId")) : NULL;
                if (tag)
                        cJSON_AddStringToObject(pi, "tag", tag);
                free(tag);
                cJSON_AddItemToArray(arr, pi);
        }
        cJSON_Delete(res);
        gw_send_json(c, 200, out);
}

/* The cmdId of the running command ProcessSelector `sel` names (new
 * string), or NULL after answering (not_found, or the daemon's error). */
static char *find_command(const gw_config *cfg, gw_conn *c, const char *tenant, const char *sbx, const cJSON *sel) {
        if (!selector_ok(sel)) {
                connect_error(c, 400, SELECTOR_REQUIRED);
                return NULL;
        }
        cJSON *res = list_commands(cfg, c, tenant, sbx);
        if (!res)
                return NULL;
        char *found = NULL, msg[200];
        int st = select_in(tenant, sbx, sel, res, &found, NULL, NULL, msg, sizeof(msg));
        cJSON_Delete(res);
        if (st)
                connect_error(c, st, "%s", msg);
        return found;
}

/* ---- process.Process/Connect (server stream) ----
 *
 * sandboxd has no call that streams a running command's output to a new
 * connection: Connect follows it through the existing API, command.wait
 * (its end) on one daemon connection and command.logs (the bytes written,
 * with their offsets in the stream) on another, asked every
 * CONNECT_POLL_MS while the command runs and once more after it ended,
 * relaying the bytes written since the Connect began. command.logs
 * answers a stream's whole kept tail (up to 1 MiB) each time, so the
 * asking slows down while nothing new comes (50 ms, doubling to 400 ms;
 * back to 50 ms on new bytes), and at most CONNECT_MAX Connect streams
 * run at once in the gateway (past them: resource_exhausted), so that no
 * caller makes the gateway ask the daemon without bound; one tenant holds
 * at most CONNECT_PER_TENANT of them, so that one key following idle
 * processes cannot take every stream from the other tenants. */
#define CONNECT_POLL_MS 50
#define CONNECT_POLL_MAX_MS 400
#define CONNECT_MAX 16
#define CONNECT_PER_TENANT 4

/* The Connect streams held, by tenant (at most CONNECT_MAX entries). */
static pthread_mutex_t connects_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned connects;
static struct {
        char tenant[80];
        unsigned n;
} connect_holders[CONNECT_MAX];

/* Takes one Connect stream for `tenant`: 0, or the HTTP status to answer
 * (429, resource_exhausted) with its message in msg (size bytes). */
static int connect_take(const char *tenant, char *msg, size_t size) {
        pthread_mutex_lock(&connects_lock);
        int slot = -1, fre = -1;
        for (int i = 0; i < CONNECT_MAX; i++) {
                if (connect_holders[i].n && !strcmp(connect_holders[i].tenant, tenant))
                        slot = i;
                else if (!connect_holders[i].n && fre < 0)
                        fre = i;
        }
        int r = 0;
        if (slot >= 0 && connect_holders[slot].n >= CONNECT_PER_TENANT) {
                r = 429;
                snprintf(msg, size, "tenant %.80s follows as many processes (Connect) at once as one tenant may (%d); "
                         "retry later", tenant, CONNECT_PER_TENANT);
        } else if (connects >= CONNECT_MAX || (slot < 0 && fre < 0)) {
                r = 429;
                snprintf(msg, size, "the gateway follows as many processes (Connect) as it may; retry later");
        } else {
                if (slot < 0) {
                        slot = fre;
                        snprintf(connect_holders[slot].tenant, sizeof(connect_holders[slot].tenant), "%s", tenant);
                }
                connect_holders[slot].n++;
                connects++;
        }
        pthread_mutex_unlock(&connects_lock);
        return r;
}

/* Gives back a Connect stream of `tenant` (taken by connect_take). */
static void connect_give(const char *tenant) {
        pthread_mutex_lock(&connects_lock);
        for (int i = 0; i < CONNECT_MAX; i++)
                if (connect_holders[i].n && !strcmp(connect_holders[i].tenant, tenant)) {
                        connect_holders[i].n--;
                        connects--;
                        break;
                }
        pthread_mutex_unlock(&connects_lock);
}

typedef struct follow {
        gw_conn *c;
        const char *cmd_id;
        bool pty;
        double pos[2]; /* stdout, stderr: stream offsets relayed up to */
} follow;

/* Relays what command.logs `res` holds past f->pos (a part cut from the
 * logs meanwhile is skipped: its bytes are gone). */
static bool follow_relay(follow *f, const cJSON *res, bool send) {
        bool fresh = false;
        static const char *const stream[2] = { "stdout", "stderr" }, *const off[2] = { "stdoutOffset", "stderrOffset" };
        for (int i = 0; i < 2; i++) {
                const char *b64 = str_of(res, stream[i]);
                double start = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, off[i]));
                void *data = NULL;
                size_t len = 0;
                if (!b64 || start != start || client_base64_decode(b64, &data, &len) < 0)
                        continue;
                double end = start + (double) len;
                if (send && end > f->pos[i]) {
                        size_t skip = f->pos[i] > start ? (size_t) (f->pos[i] - start) : 0;
                        char *enc = client_base64_encode((char *) data + skip, len - skip);
                        if (enc) {
                                cJSON *msg = cJSON_CreateObject(), *ev = cJSON_AddObjectToObject(msg, "event");
                                cJSON *d = cJSON_AddObjectToObject(ev, "data");
                                cJSON_AddStringToObject(d, f->pty ? "pty" : stream[i], enc);
                                send_envelope(f->c, 0, msg);
                                free(enc);
                        }
                }
                if (end > f->pos[i]) {
                        f->pos[i] = end;
                        fresh = true;
                }
                free(data);
        }
        return fresh;
}

/* 1 when new bytes came, 0 when none, -EIO when command.logs failed. */
static int follow_poll(follow *f, client *d, bool send) {
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        cJSON_AddStringToObject(p, "cmdId", f->cmd_id);
        client_error *err = NULL;
        if (client_call(d, "command.logs", p, 60000, NULL, NULL, &res, &err) < 0) {
                client_error_free(err);
                return -EIO;
        }
        bool fresh = follow_relay(f, res, send);
        cJSON_Delete(res);
        return fresh;
}

static void process_connect(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant,
                            const char *sbx) {
        cJSON *req = request_message(r, true);
        const cJSON *sel = cJSON_GetObjectItemCaseSensitive(req, "process");
        if (!selector_ok(sel)) {
                cJSON_Delete(req);
                stream_error(c, 400, SELECTOR_REQUIRED);
                return;
        }
        char busy[200];
        int held = connect_take(tenant, busy, sizeof(busy));
        if (held) {
                cJSON_Delete(req);
                stream_error(c, held, busy);
                return;
        }
        client *lg = NULL, *w = NULL;
        char *msg = NULL;
        cJSON *p = cJSON_CreateObject(), *list = NULL;
        cJSON_AddStringToObject(p, "name", sbx);
        client_error *err = NULL;
        if (gw_daemon_open(cfg, tenant, &lg, &msg) < 0 || gw_daemon_open(cfg, tenant, &w, &msg) < 0) {
                cJSON_Delete(p);
                stream_error(c, 503, msg ? msg : "sandboxd unavailable");
                goto out;
        }
        if (client_call(lg, "command.list", p, 60000, NULL, NULL, &list, &err) < 0) {
                stream_error(c, gw_status_of(err), err && err->message ? err->message : "list processes");
                goto out;
        }
        follow f = { .c = c };
        char *cmd_id = NULL, why[200];
        unsigned want = 0;
        int st = select_in(tenant, sbx, sel, list, &cmd_id, &f.pty, &want, why, sizeof(why));
        if (st) {
                stream_error(c, st, why);
                goto out;
        }
        f.cmd_id = cmd_id;
        /* Where the streams are now: E2B's Connect relays what comes next. */
        int64_t wid = -1;
        if (follow_poll(&f, lg, false) < 0) {
                stream_error(c, 502, "command.logs failed");
                free(cmd_id);
                goto out;
        }
        cJSON *wp = cJSON_CreateObject();
        cJSON_AddStringToObject(wp, "cmdId", cmd_id);
        wid = client_send(w, "command.wait", wp);
        gw_send_chunked_head(c, 200, "application/connect+json");
        cJSON *start = cJSON_CreateObject();
        cJSON_AddNumberToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(start, "event"), "start"), "pid", want);
        send_envelope(c, 0, start);
        cJSON *fin = NULL;
        const char *fail = wid > 0 ? NULL : "cannot send to sandboxd";
        int interval = CONNECT_POLL_MS;
        while (!fail && !fin && !gw_conn_failed(c)) {
                struct pollfd pfd[2] = { { .fd = client_fd(w), .events = POLLIN },
                                         { .fd = gw_conn_fd(c), .events = POLLRDHUP } };
                if (!client_has_pending(w)) {
                        int n = poll(pfd, 2, interval);
                        if (n < 0 && errno != EINTR)
                                break;
                        if (pfd[1].revents & (POLLRDHUP | POLLHUP | POLLERR))
                                break;
                        if (n == 0 || !(pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                                int fresh = follow_poll(&f, lg, true);
                                if (fresh < 0)
                                        fail = "command.logs failed";
                                interval = fresh > 0 ? CONNECT_POLL_MS
                                         : interval * 2 > CONNECT_POLL_MAX_MS ? CONNECT_POLL_MAX_MS : interval * 2;
                                continue;
                        }
                }
                client_msg *m = NULL;
                int rc = client_next(w, 0, &m);
                if (rc == 0 || rc == -EBADMSG)
                        continue;
                if (rc < 0)
                        fail = "the connection to sandboxd closed";
                else if (m->kind != CLIENT_MSG_NOTIFICATION && m->id == wid) {
                        if (m->error)
                                fail = "command.wait failed";
                        else
                                fin = cJSON_Duplicate(m->result, 1);
                }
                client_msg_free(m);
        }
        cJSON *end = cJSON_CreateObject();
        if (fin) {
                /* What it wrote last, then its end. */
                follow_poll(&f, lg, true);
                double code = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(fin, "exitCode"));
                int ci = code == code ? (int) code : -1;
                char status[64];
                if (ci > 128)
                        snprintf(status, sizeof(status), "signal: %d", ci - 128);
                else
                        snprintf(status, sizeof(status), "exit status %d", ci);
                cJSON *ev = cJSON_CreateObject(), *inner = cJSON_AddObjectToObject(cJSON_AddObjectToObject(ev, "event"), "end");
                cJSON_AddNumberToObject(inner, "exitCode", ci);
                cJSON_AddBoolToObject(inner, "exited", ci <= 128);
                cJSON_AddStringToObject(inner, "status", status);
                send_envelope(c, 0, ev);
                cJSON_Delete(fin);
        } else if (fail) {
                cJSON *e = cJSON_AddObjectToObject(end, "error");
                cJSON_AddStringToObject(e, "code", "unavailable");
                cJSON_AddStringToObject(e, "message", fail);
        }
        send_envelope(c, ENV_FLAG_END, end);
        gw_send_chunked_end(c);
        free(cmd_id);
out:
        connect_give(tenant);
        cJSON_Delete(req);
        free(msg);
        client_error_free(err);
        cJSON_Delete(list);
        client_free(lg);
        client_free(w);
}

/* One call on the command the request's ProcessSelector names: `method`
 * with params {cmdId} plus `extra` (taken; may be NULL). */
static void call_on_pid(const gw_config *cfg, gw_conn *c, const char *tenant, const char *sbx, const cJSON *req,
                        const char *method, cJSON *extra, const char *what) {
        char *cmd_id = find_command(cfg, c, tenant, sbx, cJSON_GetObjectItemCaseSensitive(req, "process"));
        if (!cmd_id) {
                cJSON_Delete(extra);
                return;
        }
        cJSON *p = extra ? extra : cJSON_CreateObject();
        cJSON_AddStringToObject(p, "cmdId", cmd_id);
        free(cmd_id);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, method, p, NULL, &err) < 0) {
                daemon_error(c, err, what);
                client_error_free(err);
                return;
        }
        gw_send_json(c, 200, cJSON_CreateObject());
}

static void process_call(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *sbx,
                         const char *op) {
        cJSON *req = request_message(r, false);
        if (!cJSON_IsObject(req)) {
                cJSON_Delete(req);
                connect_error(c, 400, "the request must be a JSON object");
                return;
        }
        if (!strcmp(op, "SendSignal")) {
                const cJSON *sig = cJSON_GetObjectItemCaseSensitive(req, "signal");
                const char *name = NULL;
                if (cJSON_IsString(sig))
                        name = !strcmp(sig->valuestring, "SIGNAL_SIGKILL") ? "KILL"
                             : !strcmp(sig->valuestring, "SIGNAL_SIGTERM") ? "TERM" : NULL;
                else if (cJSON_IsNumber(sig))
                        name = sig->valueint == 9 ? "KILL" : sig->valueint == 15 ? "TERM" : NULL;
                if (!name)
                        connect_error(c, 400, "signal: SIGNAL_SIGKILL or SIGNAL_SIGTERM");
                else {
                        cJSON *x = cJSON_CreateObject();
                        cJSON_AddStringToObject(x, "signal", name);
                        call_on_pid(cfg, c, tenant, sbx, req, "command.kill", x, "send signal");
                }
        } else if (!strcmp(op, "SendInput")) {
                const cJSON *in = cJSON_GetObjectItemCaseSensitive(req, "input");
                const char *data = str_of(in, "stdin") ? str_of(in, "stdin") : str_of(in, "pty");
                if (!data)
                        connect_error(c, 400, "input.stdin or input.pty (base64) is required");
                else {
                        cJSON *x = cJSON_CreateObject();
                        cJSON_AddStringToObject(x, "data", data);
                        call_on_pid(cfg, c, tenant, sbx, req, "command.write", x, "send input");
                }
        } else if (!strcmp(op, "CloseStdin"))
                call_on_pid(cfg, c, tenant, sbx, req, "command.closeStdin", NULL, "close stdin");
        else if (!strcmp(op, "Update")) {
                const cJSON *size = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(req, "pty"), "size");
                const cJSON *rows = cJSON_GetObjectItemCaseSensitive(size, "rows");
                const cJSON *cols = cJSON_GetObjectItemCaseSensitive(size, "cols");
                if (!cJSON_IsNumber(rows) || !cJSON_IsNumber(cols))
                        connect_error(c, 400, "pty.size.rows and pty.size.cols are required");
                else {
                        cJSON *x = cJSON_CreateObject();
                        cJSON_AddNumberToObject(x, "rows", rows->valuedouble);
                        cJSON_AddNumberToObject(x, "cols", cols->valuedouble);
                        call_on_pid(cfg, c, tenant, sbx, req, "command.resize", x, "resize");
                }
        } else
                connect_error(c, 501, "process.Process/%s is not served by sandboxd-e2b yet", op);
        cJSON_Delete(req);
}

/* ---- process.Process/StreamInput (client stream) ----
 *
 * The body is read as it comes (http.c): a start message names the
 * process (pid or tag), each data message is written to its stdin (or
 * pty) by command.write on the stream's own daemon connection, in order,
 * before the next bytes of the body are read; keepalives do nothing. A
 * message is at most INSTREAM_MSG_MAX bytes, held from the gateway's
 * budget of bodies while it is read. */
#define INSTREAM_MSG_MAX ((size_t) 8 << 20)

struct gw_instream {
        const gw_config *cfg;
        char tenant[80], sbx[64];
        client *d;              /* opened at the start message */
        char *cmd_id;           /* the process, from the start message */
        unsigned char head[5];
        size_t head_have;
        char *msg;              /* the message being read (msg_len bytes) */
        size_t msg_len, msg_have;
        int status;             /* the first failure: HTTP status, 0 none */
        char err[300];
};

bool gw_instream_wanted(const gw_request *r) {
        const char *ct = gw_header_get(r, "Content-Type");
        size_t sl = strlen("application/connect+json");
        return !strcmp(r->method, "POST") && !strcmp(r->path, "/process.Process/StreamInput") && ct &&
               !strncasecmp(ct, "application/connect+json", sl) && (!ct[sl] || ct[sl] == ';');
}

gw_instream *gw_instream_open(const gw_config *cfg, const char *tenant, const char *sandbox) {
        gw_instream *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->cfg = cfg;
        snprintf(s->tenant, sizeof(s->tenant), "%s", tenant);
        snprintf(s->sbx, sizeof(s->sbx), "%s", sandbox);
        return s;
}

static int instream_fail(gw_instream *s, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int instream_fail(gw_instream *s, int status, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->err, sizeof(s->err), fmt, ap);
        va_end(ap);
        s->status = status;
        return -1;
}

/* Acts on one whole message (s->msg). */
static int instream_message(gw_instream *s) {
        cJSON *m = cJSON_ParseWithLength(s->msg, s->msg_len);
        int r = 0;
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(m, "start");
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(m, "data");
        if (!cJSON_IsObject(m))
                r = instream_fail(s, 400, "a StreamInputRequest message must be a JSON object");
        else if (cJSON_IsObject(start)) {
                if (s->cmd_id) {
                        r = instream_fail(s, 400, "start: sent twice in one stream");
                        goto out;
                }
                if (!selector_ok(cJSON_GetObjectItemCaseSensitive(start, "process"))) {
                        r = instream_fail(s, 400, "start.%s", SELECTOR_REQUIRED);
                        goto out;
                }
                char *msg = NULL;
                if (gw_daemon_open(s->cfg, s->tenant, &s->d, &msg) < 0) {
                        r = instream_fail(s, 503, "%s", msg ? msg : "sandboxd unavailable");
                        free(msg);
                        goto out;
                }
                cJSON *p = cJSON_CreateObject(), *list = NULL;
                cJSON_AddStringToObject(p, "name", s->sbx);
                client_error *err = NULL;
                if (client_call(s->d, "command.list", p, 60000, NULL, NULL, &list, &err) < 0)
                        r = instream_fail(s, gw_status_of(err), "list processes: %s",
                                          err && err->message ? err->message : "failed");
                else {
                        char why[200];
                        int st = select_in(s->tenant, s->sbx, cJSON_GetObjectItemCaseSensitive(start, "process"),
                                           list, &s->cmd_id, NULL, NULL, why, sizeof(why));
                        if (st)
                                r = instream_fail(s, st, "start: %s", why);
                }
                client_error_free(err);
                cJSON_Delete(list);
        } else if (cJSON_IsObject(data)) {
                const cJSON *in = cJSON_GetObjectItemCaseSensitive(data, "input");
                const char *b64 = str_of(in, "stdin") ? str_of(in, "stdin") : str_of(in, "pty");
                if (!s->cmd_id) {
                        r = instream_fail(s, 400, "data: the start message (the process's selector) comes first");
                        goto out;
                }
                if (!b64) {
                        r = instream_fail(s, 400, "data.input.stdin or data.input.pty (base64) is required");
                        goto out;
                }
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "cmdId", s->cmd_id);
                cJSON_AddStringToObject(p, "data", b64);
                client_error *err = NULL;
                if (client_call(s->d, "command.write", p, 60000, NULL, NULL, NULL, &err) < 0)
                        r = instream_fail(s, gw_status_of(err), "send input: %s",
                                          err && err->message ? err->message : "failed");
                client_error_free(err);
        } else if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(m, "keepalive")))
                r = instream_fail(s, 400, "a StreamInputRequest is one of start, data, keepalive");
out:
        cJSON_Delete(m);
        return r;
}

int gw_instream_feed(gw_instream *s, const char *data, size_t n) {
        if (s->status)
                return -1;
        while (n > 0) {
                if (s->head_have < 5) {
                        size_t k = 5 - s->head_have < n ? 5 - s->head_have : n;
                        memcpy(s->head + s->head_have, data, k);
                        s->head_have += k, data += k, n -= k;
                        if (s->head_have < 5)
                                break;
                        size_t len = (size_t) s->head[1] << 24 | (size_t) s->head[2] << 16 |
                                     (size_t) s->head[3] << 8 | s->head[4];
                        if (s->head[0] != 0)
                                return instream_fail(s, s->head[0] & 1 ? 501 : 400,
                                                     "envelope flags %#x: %s", s->head[0],
                                                     s->head[0] & 1 ? "compressed messages are not served "
                                                                      "(send Connect-Content-Encoding identity)"
                                                                    : "a request message has flags 0");
                        if (len > INSTREAM_MSG_MAX)
                                return instream_fail(s, 429, "a StreamInput message of %zu bytes: at most %zu",
                                                     len, INSTREAM_MSG_MAX);
                        if (!gw_budget_take(s->tenant, len + 1))
                                return instream_fail(s, 503, "the gateway holds as many request bodies as it "
                                                             "may; retry");
                        if (!(s->msg = malloc(len + 1))) {
                                gw_budget_release(s->tenant, len + 1);
                                return instream_fail(s, 500, "out of memory");
                        }
                        s->msg_len = len;
                        s->msg_have = 0;
                }
                size_t k = s->msg_len - s->msg_have < n ? s->msg_len - s->msg_have : n;
                memcpy(s->msg + s->msg_have, data, k);
                s->msg_have += k, data += k, n -= k;
                if (s->msg_have < s->msg_len)
                        break;
                int r = instream_message(s);
                free(s->msg);
                s->msg = NULL;
                gw_budget_release(s->tenant, s->msg_len + 1);
                s->head_have = 0;
                if (r < 0)
                        return -1;
        }
        return 0;
}

void gw_instream_finish(gw_instream *s, gw_conn *c) {
        if (!s)
                return;
        if (c) {
                if (!s->status && (s->head_have || s->msg))
                        instream_fail(s, 400, "the body ended inside a message");
                else if (!s->status && !s->cmd_id)
                        instream_fail(s, 400, "no start message (the process's selector)");
                gw_send_chunked_head(c, 200, "application/connect+json");
                cJSON *end = cJSON_CreateObject();
                if (s->status) {
                        cJSON *e = cJSON_AddObjectToObject(end, "error");
                        cJSON_AddStringToObject(e, "code", connect_status_code(s->status));
                        cJSON_AddStringToObject(e, "message", s->err);
                } else
                        send_envelope(c, 0, cJSON_CreateObject());
                send_envelope(c, ENV_FLAG_END, end);
                gw_send_chunked_end(c);
        }
        if (s->msg) {
                free(s->msg);
                gw_budget_release(s->tenant, s->msg_len + 1);
        }
        free(s->cmd_id);
        client_free(s->d);
        free(s);
}

/* ---- filesystem.Filesystem ---- */

/* A command.output notification's stdout appended to *(char **) userdata
 * (at most 64 KiB: a path). */
static void collect_stdout(const client_msg *m, void *userdata) {
        char **acc = userdata;
        if (!m->method || strcmp(m->method, "command.output") || strcmp(str_of(m->params, "stream") ?: "", "stdout"))
                return;
        void *data = NULL;
        size_t len = 0, have = *acc ? strlen(*acc) : 0;
        if (!str_of(m->params, "data") || client_base64_decode(str_of(m->params, "data"), &data, &len) < 0)
                return;
        char *n = have + len < 65536 ? realloc(*acc, have + len + 1) : NULL;
        if (n) {
                memcpy(n + have, data, len);
                n[have + len] = 0;
                *acc = n;
        }
        free(data);
}

/* The sandbox user's uid and gid inside the sandbox: 1000 with a user
 * namespace, the sandboxd-user account's ids without one. */
typedef struct user_ids {
        double uid, gid;
} user_ids;

/* Reads them as the owner of /workspace (the sandbox user's in every
 * runtime, docs/API.md); 1000 when it cannot be read. */
static user_ids sandbox_user_ids(const gw_config *cfg, const char *tenant, const char *sbx) {
        user_ids u = { 1000, 1000 };
        cJSON *p = cJSON_CreateObject(), *st = NULL;
        cJSON_AddStringToObject(p, "sandbox", sbx);
        cJSON_AddStringToObject(p, "path", "/workspace");
        if (gw_daemon_call(cfg, tenant, "fs.stat", p, &st, NULL) == 0) {
                double uid = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "uid"));
                double gid = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "gid"));
                if (uid == uid && gid == gid && uid > 0)
                        u = (user_ids) { uid, gid };
        }
        cJSON_Delete(st);
        return u;
}

static void add_metadata(cJSON *o, const cJSON *xattrs);

/* A sandboxd Stat as EntryInfo; the sandbox user (`u`) is E2B's `user`;
 * `metadata` from its user.e2b.* xattrs. */
static cJSON *entry_of(const cJSON *st, user_ids u) {
        cJSON *e = cJSON_CreateObject();
        const char *type = str_of(st, "type");
        double mode = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "mode"));
        /* sandboxd's mtime is already RFC 3339 (core_format_time), as
         * proto3 JSON writes a Timestamp. */
        const char *mtime = str_of(st, "mtime");
        double uid = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "uid"));
        double gid = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "gid"));
        cJSON_AddStringToObject(e, "name", str_of(st, "name") ? str_of(st, "name") : "");
        cJSON_AddStringToObject(e, "type", !type ? "FILE_TYPE_UNSPECIFIED"
                                          : !strcmp(type, "file") ? "FILE_TYPE_FILE"
                                          : !strcmp(type, "directory") ? "FILE_TYPE_DIRECTORY"
                                          : !strcmp(type, "symlink") ? "FILE_TYPE_SYMLINK" : "FILE_TYPE_UNSPECIFIED");
        cJSON_AddStringToObject(e, "path", str_of(st, "path") ? str_of(st, "path") : "");
        double size = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "size"));
        char num[32], perms[16], id[32];
        snprintf(num, sizeof(num), "%.0f", size == size ? size : 0);
        cJSON_AddStringToObject(e, "size", num); /* int64 is a string in proto3 JSON */
        unsigned m = mode == mode ? (unsigned) mode : 0;
        cJSON_AddNumberToObject(e, "mode", m);
        snprintf(perms, sizeof(perms), "%c%c%c%c%c%c%c%c%c%c", type && !strcmp(type, "directory") ? 'd' : '-',
                 m & 0400 ? 'r' : '-', m & 0200 ? 'w' : '-', m & 0100 ? 'x' : '-', m & 040 ? 'r' : '-',
                 m & 020 ? 'w' : '-', m & 010 ? 'x' : '-', m & 04 ? 'r' : '-', m & 02 ? 'w' : '-', m & 01 ? 'x' : '-');
        cJSON_AddStringToObject(e, "permissions", perms);
        cJSON_AddStringToObject(e, "modifiedTime", mtime ? mtime : "1970-01-01T00:00:00Z");
        /* Owners by uid: 0 is root, the sandbox user's E2B's `user`;
         * names are not looked up in the sandbox. */
        snprintf(id, sizeof(id), "%.0f", uid == uid ? uid : 0);
        cJSON_AddStringToObject(e, "owner", uid == 0 ? "root" : uid == u.uid ? "user" : id);
        snprintf(id, sizeof(id), "%.0f", gid == gid ? gid : 0);
        cJSON_AddStringToObject(e, "group", gid == 0 ? "root" : gid == u.gid ? "user" : id);
        add_metadata(e, cJSON_GetObjectItemCaseSensitive(st, "xattrs"));
        return e;
}

static cJSON *fs_call(const gw_config *cfg, gw_conn *c, const char *tenant, const char *method, cJSON *p,
                      const char *what) {
        cJSON *res = NULL;
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, method, p, &res, &err) < 0) {
                /* A missing path is Connect's not_found, as envd answers. */
                if (err && err->message && strstr(err->message, "No such file"))
                        connect_error(c, 404, "%s: %s", what, err->message);
                else
                        daemon_error(c, err, what);
                client_error_free(err);
                return NULL;
        }
        return res ? res : cJSON_CreateObject();
}

/* Makes the request's paths (`keys`, NULL-ended) absolute for the
 * sandbox user, or root when `root` (abs_path), in place. */
static void abs_paths(cJSON *req, const char *const *keys, bool root) {
        for (; *keys; keys++) {
                const char *v = str_of(req, *keys);
                char *a = v ? abs_path(v, root) : NULL;
                if (a)
                        cJSON_ReplaceItemInObjectCaseSensitive(req, *keys, cJSON_CreateString(a));
                free(a);
        }
}

static cJSON *path_params(const char *sbx, const char *path) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "sandbox", sbx);
        cJSON_AddStringToObject(p, "path", path);
        return p;
}

/* The same for the call's user: root's (E2B's user root) with sudo. */
static cJSON *path_params_as(const char *sbx, const char *path, bool root) {
        cJSON *p = path_params(sbx, path);
        if (root)
                cJSON_AddBoolToObject(p, "sudo", true);
        return p;
}

/* A symlink's target, resolved to an absolute path as envd gives it
 * (readlink -f as the sandbox user: sandboxd's fs.stat does not read
 * links). New string, or NULL when it cannot be read. */
static char *link_target(const gw_config *cfg, const char *tenant, const char *sbx, const char *path, bool root) {
        cJSON *p = cJSON_CreateObject(), *args = cJSON_CreateArray(), *res = NULL;
        cJSON_AddStringToObject(p, "sandbox", sbx);
        if (root)
                cJSON_AddBoolToObject(p, "sudo", true);
        cJSON_AddStringToObject(p, "cmd", "readlink");
        cJSON_AddItemToArray(args, cJSON_CreateString("-f"));
        cJSON_AddItemToArray(args, cJSON_CreateString("--"));
        cJSON_AddItemToArray(args, cJSON_CreateString(path));
        cJSON_AddItemToObject(p, "args", args);
        client *d = NULL;
        char *msg = NULL, *out = NULL;
        if (gw_daemon_open(cfg, tenant, &d, &msg) < 0) {
                free(msg);
                cJSON_Delete(p);
                return NULL;
        }
        /* Its stdout comes as command.output notifications. */
        char *acc = NULL;
        client_error *err = NULL;
        if (client_call(d, "command.run", p, 60000, collect_stdout, &acc, &res, &err) == 0 &&
            cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "exitCode")) == 0 && acc) {
                acc[strcspn(acc, "\n")] = 0;
                if (acc[0] == '/')
                        out = strdup(acc);
        }
        free(acc);
        client_error_free(err);
        cJSON_Delete(res);
        client_free(d);
        return out;
}

/* ListDir's depth: at most this many levels, and at most LIST_MAX
 * entries in one answer (each directory is one fs.list). */
#define LIST_DEPTH_MAX 16
#define LIST_MAX 10000

/* Appends the entries of directory `path` to `arr` (EntryInfo), and those
 * of its subdirectories (not symlinks) down to `depth` levels, each
 * directory's entries by name with a subdirectory's right after it (as
 * envd's walk lists them). 0, or -1 after answering. */
static int list_into(const gw_config *cfg, gw_conn *c, const char *tenant, const char *sbx, const char *path,
                     int depth, cJSON *arr, size_t *count, user_ids u, bool root) {
        cJSON *res = fs_call(cfg, c, tenant, "fs.list", path_params_as(sbx, path, root), "list"), *st;
        if (!res)
                return -1;
        int r = 0;
        cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(res, "entries")) {
                if (++*count > LIST_MAX) {
                        connect_error(c, 400, "list %s: more than %d entries; list with a smaller depth", path, LIST_MAX);
                        r = -1;
                        break;
                }
                cJSON_AddItemToArray(arr, entry_of(st, u));
                const char *type = str_of(st, "type"), *sub = str_of(st, "path");
                if (depth > 1 && type && !strcmp(type, "directory") && sub &&
                    (r = list_into(cfg, c, tenant, sbx, sub, depth - 1, arr, count, u, root)) < 0)
                        break;
        }
        cJSON_Delete(res);
        return r;
}

static void create_watcher(const gw_config *cfg, gw_conn *c, const gw_request *r, const cJSON *req, const char *tenant,
                           const char *sbx);
static void watcher_events(gw_conn *c, const cJSON *req, const char *tenant, const char *sbx, bool remove);

static void filesystem(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *sbx,
                       const char *op) {
        cJSON *req = request_message(r, false);
        int user = request_user(r);
        bool root = user == 1;
        abs_paths(req, (const char *const[]) { "path", "source", "destination", NULL }, root);
        const char *path = str_of(req, "path");
        if (!strcmp(op, "CreateWatcher") || !strcmp(op, "GetWatcherEvents") || !strcmp(op, "RemoveWatcher")) {
                if (!cJSON_IsObject(req))
                        connect_error(c, 400, "the request must be a JSON object");
                else if (op[0] == 'C')
                        create_watcher(cfg, c, r, req, tenant, sbx);
                else
                        watcher_events(c, req, tenant, sbx, op[0] == 'R');
                cJSON_Delete(req);
                return;
        }
        if (user < 0) {
                cJSON_Delete(req);
                connect_error(c, 400, "user: sandboxd has the sandbox user (E2B's user) and root only");
                return;
        }
        cJSON *res = NULL, *out = NULL;
        if (!strcmp(op, "Stat") && path) {
                if ((res = fs_call(cfg, c, tenant, "fs.stat", path_params_as(sbx, path, root), "stat"))) {
                        cJSON *e = entry_of(res, sandbox_user_ids(cfg, tenant, sbx));
                        const char *type = str_of(res, "type");
                        char *target = type && !strcmp(type, "symlink") ? link_target(cfg, tenant, sbx, path, root) : NULL;
                        if (target)
                                cJSON_AddStringToObject(e, "symlinkTarget", target);
                        free(target);
                        out = cJSON_CreateObject(), cJSON_AddItemToObject(out, "entry", e);
                }
        } else if (!strcmp(op, "ListDir") && path) {
                double depth = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(req, "depth"));
                if (depth == depth && (depth < 0 || depth > LIST_DEPTH_MAX)) {
                        connect_error(c, 400, "depth: 1 to %d", LIST_DEPTH_MAX);
                        goto done;
                }
                out = cJSON_CreateObject();
                size_t count = 0;
                if (list_into(cfg, c, tenant, sbx, path, depth == depth && depth >= 1 ? (int) depth : 1,
                              cJSON_AddArrayToObject(out, "entries"), &count,
                              sandbox_user_ids(cfg, tenant, sbx), root) < 0) {
                        cJSON_Delete(out);
                        out = NULL;
                }
        } else if (!strcmp(op, "MakeDir") && path) {
                cJSON *st = NULL;
                client_error *err = NULL;
                if (gw_daemon_call(cfg, tenant, "fs.stat", path_params_as(sbx, path, root), &st, &err) == 0) {
                        cJSON_Delete(st);
                        connect_error(c, 409, "path %s already exists", path);
                        goto done;
                }
                client_error_free(err);
                cJSON *p = path_params_as(sbx, path, root);
                cJSON_AddBoolToObject(p, "parents", true);
                if ((res = fs_call(cfg, c, tenant, "fs.mkdir", p, "make dir"))) {
                        cJSON_Delete(res);
                        if ((res = fs_call(cfg, c, tenant, "fs.stat", path_params_as(sbx, path, root), "stat")))
                                out = cJSON_CreateObject(),
                                cJSON_AddItemToObject(out, "entry", entry_of(res, sandbox_user_ids(cfg, tenant, sbx)));
                }
        } else if (!strcmp(op, "Remove") && path) {
                cJSON *p = path_params_as(sbx, path, root);
                cJSON_AddBoolToObject(p, "recursive", true);
                /* A missing path is no error, as envd's Remove. */
                client_error *err = NULL;
                if (gw_daemon_call(cfg, tenant, "fs.remove", p, &res, &err) == 0 ||
                    (err && err->message && strstr(err->message, "No such file")))
                        out = cJSON_CreateObject();
                else
                        daemon_error(c, err, "remove");
                client_error_free(err);
        } else if (!strcmp(op, "Move") && str_of(req, "source") && str_of(req, "destination")) {
                /* sandboxd has no fs.move: mv(1) as the call's user (root
                 * with sudo), whose rights are those of its fs.* calls. */
                cJSON *p = cJSON_CreateObject(), *args = cJSON_CreateArray();
                cJSON_AddStringToObject(p, "sandbox", sbx);
                cJSON_AddStringToObject(p, "cmd", "mv");
                if (root)
                        cJSON_AddBoolToObject(p, "sudo", true);
                cJSON_AddItemToArray(args, cJSON_CreateString("-T"));
                cJSON_AddItemToArray(args, cJSON_CreateString("--"));
                cJSON_AddItemToArray(args, cJSON_CreateString(str_of(req, "source")));
                cJSON_AddItemToArray(args, cJSON_CreateString(str_of(req, "destination")));
                cJSON_AddItemToObject(p, "args", args);
                if ((res = fs_call(cfg, c, tenant, "command.run", p, "move"))) {
                        double code = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "exitCode"));
                        if (code != 0) {
                                connect_error(c, 404, "move %s: failed (mv exited %.0f)", str_of(req, "source"), code);
                                goto done;
                        }
                        cJSON_Delete(res);
                        if ((res = fs_call(cfg, c, tenant, "fs.stat", path_params_as(sbx, str_of(req, "destination"), root),
                                           "stat")))
                                out = cJSON_CreateObject(),
                                cJSON_AddItemToObject(out, "entry", entry_of(res, sandbox_user_ids(cfg, tenant, sbx)));
                }
        } else if (!strcmp(op, "Stat") || !strcmp(op, "ListDir") || !strcmp(op, "MakeDir") || !strcmp(op, "Remove") ||
                   !strcmp(op, "Move")) {
                connect_error(c, 400, "%s: path (or source and destination) required", op);
        } else
                connect_error(c, 501, "filesystem.Filesystem/%s is not served by sandboxd-e2b yet", op);
        if (out)
                gw_send_json(c, 200, out);
done:
        cJSON_Delete(res);
        cJSON_Delete(req);
}

/* ---- filesystem.Filesystem/WatchDir (server stream) over fs.watch ---- */

typedef struct watch_state {
        gw_conn *c;
        const gw_config *cfg;
        const char *tenant, *sbx;
        bool entry;       /* includeEntry: each event with the path's EntryInfo */
        user_ids ids;     /* the sandbox user's, for those entries */
        char *dir;        /* the watched path as fs.watchStarted names it */
        bool done;        /* an overflow: the stream ends */
        const char *lost; /* ... with this error */
} watch_state;

/* fs.watch's types as E2B's EventType. An overflow (events lost) has no
 * E2B form: the stream ends with an error saying so, never silently. */
static const char *event_type(const char *t) {
        if (!t)
                return NULL;
        if (!strcmp(t, "created"))
                return "EVENT_TYPE_CREATE";
        if (!strcmp(t, "modified"))
                return "EVENT_TYPE_WRITE";
        if (!strcmp(t, "deleted"))
                return "EVENT_TYPE_REMOVE";
        if (!strcmp(t, "renamed"))
                return "EVENT_TYPE_RENAME";
        return NULL;
}

/* fs.watchEvent params `ev` as E2B's FilesystemEvent (new object): `name`
 * the path below watched directory `dir`, `type`, and with `entry` the
 * path's EntryInfo as it is now (none for a path gone by then, as a
 * removal's). NULL with *lost set for an overflow (events lost). */
static cJSON *fs_event(const gw_config *cfg, const char *tenant, const char *sbx, const char *dir, bool entry,
                       user_ids ids, const cJSON *ev, bool *lost) {
        const char *type = event_type(str_of(ev, "type")), *path = str_of(ev, "path");
        if (!type) {
                *lost = true;
                return NULL;
        }
        size_t dl = dir ? strlen(dir) : 0;
        const char *name = path ? path : "";
        if (dl && !strncmp(name, dir, dl) && name[dl] == '/')
                name += dl + 1;
        cJSON *fe = cJSON_CreateObject();
        cJSON_AddStringToObject(fe, "name", name);
        cJSON_AddStringToObject(fe, "type", type);
        cJSON *st = NULL;
        if (entry && path && strcmp(type, "EVENT_TYPE_REMOVE") &&
            gw_daemon_call(cfg, tenant, "fs.stat", path_params(sbx, path), &st, NULL) == 0)
                cJSON_AddItemToObject(fe, "entry", entry_of(st, ids));
        cJSON_Delete(st);
        return fe;
}

static void on_watch_note(const client_msg *m, void *userdata) {
        watch_state *w = userdata;
        if (!m->method)
                return;
        cJSON *msg = NULL;
        if (!strcmp(m->method, "fs.watchStarted")) {
                free(w->dir);
                w->dir = str_of(m->params, "path") ? strdup(str_of(m->params, "path")) : NULL;
                msg = cJSON_CreateObject();
                cJSON_AddObjectToObject(msg, "start");
        } else if (!strcmp(m->method, "fs.watchEvent")) {
                bool lost = false;
                cJSON *fe = fs_event(w->cfg, w->tenant, w->sbx, w->dir, w->entry, w->ids, m->params, &lost);
                if (lost) {
                        w->lost = "events were lost (sandboxd's fs.watch overflowed); watch again and list the "
                                  "directory";
                        w->done = true;
                        return;
                }
                msg = cJSON_CreateObject();
                cJSON_AddItemToObject(msg, "filesystem", fe);
        }
        if (msg)
                send_envelope(w->c, 0, msg);
}

static void watch_dir(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *sbx) {
        cJSON *req = request_message(r, true);
        abs_paths(req, (const char *const[]) { "path", NULL }, false);
        const char *path = str_of(req, "path");
        /* allowNetworkMounts lifts envd's refusal of network mounts;
         * sandboxd's fs.watch has none to lift. */
        if (!path || request_user(r) != 0) {
                stream_error(c, path ? 501 : 400,
                             !path ? "path: required" : "watching as root is not served by sandboxd-e2b yet");
                cJSON_Delete(req);
                return;
        }
        bool include_entry = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "includeEntry"));
        /* A directory only, as envd's WatchDir (fs.watch would watch a
         * file too). */
        cJSON *st = NULL;
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "fs.stat", path_params(sbx, path), &st, &err) < 0 ||
            strcmp(str_of(st, "type") ? str_of(st, "type") : "", "directory")) {
                char m[200];
                bool missing = err && err->message && strstr(err->message, "No such file");
                snprintf(m, sizeof(m), "watch %.150s: %s", path,
                         missing ? "no such directory" : err ? "cannot stat it" : "not a directory");
                stream_error(c, missing ? 404 : err ? gw_status_of(err) : 400, m);
                client_error_free(err);
                cJSON_Delete(st);
                cJSON_Delete(req);
                return;
        }
        cJSON_Delete(st);
        cJSON *p = path_params(sbx, path);
        cJSON_AddBoolToObject(p, "recursive", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "recursive")));
        cJSON_Delete(req);
        client *d = NULL;
        char *msg = NULL;
        if (gw_daemon_open(cfg, tenant, &d, &msg) < 0) {
                cJSON_Delete(p);
                stream_error(c, 503, msg ? msg : "sandboxd unavailable");
                free(msg);
                return;
        }
        /* The watch ends with the daemon connection: when the caller stops
         * (closes the stream) or fs.watch answers (its path deleted, the
         * sandbox stopped). */
        watch_state w = { .c = c, .cfg = cfg, .tenant = tenant, .sbx = sbx, .entry = include_entry,
                          .ids = include_entry ? sandbox_user_ids(cfg, tenant, sbx) : (user_ids) { 1000, 1000 } };
        relay_stream(c, d, "fs.watch", p, on_watch_note, &w, &w.done, true, &w.lost, "data_loss");
        free(w.dir);
        client_free(d);
}

/* ---- CreateWatcher, GetWatcherEvents, RemoveWatcher ----
 *
 * The non-streaming watch: CreateWatcher starts fs.watch on a daemon
 * connection of its own, held by a thread of the gateway that collects
 * the events (as WatchDir relays them); GetWatcherEvents hands out and
 * forgets what was collected; RemoveWatcher ends the watch. Bounds: at
 * most WATCHERS_PER_SANDBOX watchers a sandbox, WATCHERS_PER_TENANT a
 * tenant and WATCHERS_MAX in the gateway (past them resource_exhausted), at most WATCHER_EVENTS events
 * kept for one (past them the watcher fails with data_loss, never
 * silently); a watcher not asked for WATCHER_IDLE_S seconds is removed,
 * and one whose fs.watch ended (its sandbox stopped or went, its
 * directory was deleted) answers its last events and then, once, why it
 * ended, and is removed. A watcher is found only with the tenant and
 * sandbox that made it (its ID is 128 random bits besides). */
#define WATCHERS_PER_SANDBOX 8
#define WATCHERS_PER_TENANT 32
#define WATCHERS_MAX 128
#define WATCHER_EVENTS 4096
#define WATCHER_IDLE_S 600

typedef struct watcher {
        struct watcher *next;
        char id[33];
        char tenant[80], sbx[64];
        const gw_config *cfg;
        client *d;              /* the fs.watch connection, the thread's */
        int64_t watch_id;       /* the fs.watch request's id on d */
        int wake;               /* eventfd: RemoveWatcher wakes the thread */
        bool entry;             /* includeEntry */
        user_ids ids;
        char *dir;              /* the watched path as fs.watchStarted names it */
        cJSON *events;          /* collected FilesystemEvents (under watchers_lock) */
        int n_events;
        const char *failed;     /* data_loss: events were lost */
        char *ended;            /* fs.watch answered: why */
        int64_t asked_ms;       /* when it was made or last asked for events */
        bool linked;            /* in the table */
        int refs;               /* the table's and the thread's */
} watcher;

static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;
static watcher *watchers;

static int64_t mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Drops one reference (under watchers_lock); frees at none. */
static void watcher_unref(watcher *w) {
        if (--w->refs > 0)
                return;
        client_free(w->d);
        if (w->wake >= 0)
                close(w->wake);
        cJSON_Delete(w->events);
        free(w->dir);
        free(w->ended);
        free(w);
}

/* Takes w out of the table (under watchers_lock), waking its thread. */
static void watcher_unlink(watcher *w) {
        if (!w->linked)
                return;
        for (watcher **pp = &watchers; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        break;
                }
        w->linked = false;
        uint64_t one = 1;
        if (write(w->wake, &one, sizeof(one)) < 0) {
                /* an eventfd's counter cannot overflow from this */
        }
        watcher_unref(w);
}

static void *watcher_thread(void *arg) {
        watcher *w = arg;
        bool watching = true;
        for (;;) {
                pthread_mutex_lock(&watchers_lock);
                bool linked = w->linked;
                int64_t idle_left = w->asked_ms + (int64_t) WATCHER_IDLE_S * 1000 - mono_ms();
                if (linked && idle_left <= 0)
                        watcher_unlink(w);
                pthread_mutex_unlock(&watchers_lock);
                if (!linked || idle_left <= 0)
                        break;
                struct pollfd pfd[2] = { { .fd = w->wake, .events = POLLIN },
                                         { .fd = watching ? client_fd(w->d) : -1, .events = POLLIN } };
                if (!watching || !client_has_pending(w->d)) {
                        int n = poll(pfd, watching ? 2 : 1, idle_left > INT32_MAX ? INT32_MAX : (int) idle_left);
                        if (n < 0 && errno != EINTR)
                                break;
                        if (n <= 0 || (pfd[0].revents & POLLIN) || !(pfd[1].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                }
                client_msg *m = NULL;
                int rc = client_next(w->d, 0, &m);
                if (rc == 0 || rc == -EBADMSG)
                        continue;
                cJSON *fe = NULL;
                bool lost = false;
                char *end = NULL;
                if (rc < 0)
                        end = strdup("the connection to sandboxd closed");
                else if (m->kind == CLIENT_MSG_NOTIFICATION && m->method && !strcmp(m->method, "fs.watchEvent"))
                        fe = fs_event(w->cfg, w->tenant, w->sbx, w->dir, w->entry, w->ids, m->params, &lost);
                else if (m->kind != CLIENT_MSG_NOTIFICATION && m->id == w->watch_id &&
                         asprintf(&end, "the watch ended: %s",
                                  m->error && m->error->message ? m->error->message
                                                                : "its directory or its sandbox went away") < 0)
                        end = NULL;
                client_msg_free(m);
                pthread_mutex_lock(&watchers_lock);
                if (lost || (fe && w->n_events >= WATCHER_EVENTS))
                        w->failed = lost ? "events were lost (sandboxd's fs.watch overflowed); make a new watcher "
                                           "and list the directory"
                                         : "events were lost: more than 4096 waited to be asked for; make a new "
                                           "watcher and list the directory";
                else if (fe) {
                        cJSON_AddItemToArray(w->events, fe);
                        w->n_events++;
                        fe = NULL;
                }
                if (end) {
                        w->ended = end;
                        watching = false;
                }
                pthread_mutex_unlock(&watchers_lock);
                cJSON_Delete(fe);
                if (w->failed || end) {
                        /* The watch is of no more use: closing its
                         * connection ends it in the daemon. Only this
                         * thread uses d now. */
                        watching = false;
                        client_free(w->d);
                        w->d = NULL;
                }
        }
        pthread_mutex_lock(&watchers_lock);
        watcher_unref(w);
        pthread_mutex_unlock(&watchers_lock);
        return NULL;
}

/* The watcher `id` of (tenant, sbx), or NULL; under watchers_lock. */
static watcher *watcher_find(const char *tenant, const char *sbx, const char *id) {
        for (watcher *w = watchers; w; w = w->next)
                if (id && strlen(id) == 32 && CRYPTO_memcmp(w->id, id, 32) == 0 && !strcmp(w->tenant, tenant) &&
                    !strcmp(w->sbx, sbx))
                        return w;
        return NULL;
}

static void create_watcher(const gw_config *cfg, gw_conn *c, const gw_request *r, const cJSON *req, const char *tenant,
                           const char *sbx) {
        const char *path = str_of(req, "path");
        if (!path || request_user(r) != 0) {
                connect_error(c, path ? 501 : 400, "%s",
                              !path ? "path: required" : "watching as root is not served by sandboxd-e2b yet");
                return;
        }
        /* The bounds first, so a caller past them makes no daemon call. */
        unsigned all = 0, mine = 0, theirs = 0;
        pthread_mutex_lock(&watchers_lock);
        for (watcher *w = watchers; w; w = w->next, all++) {
                mine += !strcmp(w->tenant, tenant) && !strcmp(w->sbx, sbx);
                theirs += !strcmp(w->tenant, tenant);
        }
        pthread_mutex_unlock(&watchers_lock);
        if (mine >= WATCHERS_PER_SANDBOX || theirs >= WATCHERS_PER_TENANT || all >= WATCHERS_MAX) {
                connect_error(c, 429, "the gateway keeps as many watchers as it may (%s); remove one "
                                      "(RemoveWatcher) or use WatchDir",
                              mine >= WATCHERS_PER_SANDBOX ? "8 a sandbox"
                              : theirs >= WATCHERS_PER_TENANT ? "32 a tenant" : "128 in all");
                return;
        }
        cJSON *st = NULL;
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "fs.stat", path_params(sbx, path), &st, &err) < 0 ||
            strcmp(str_of(st, "type") ? str_of(st, "type") : "", "directory")) {
                bool missing = err && err->message && strstr(err->message, "No such file");
                connect_error(c, missing ? 404 : err ? gw_status_of(err) : 400, "watch %.150s: %s", path,
                              missing ? "no such directory" : err ? "cannot stat it" : "not a directory");
                client_error_free(err);
                cJSON_Delete(st);
                return;
        }
        cJSON_Delete(st);
        watcher *w = calloc(1, sizeof(*w));
        unsigned char rnd[16];
        char *msg = NULL;
        if (!w || RAND_bytes(rnd, sizeof(rnd)) != 1 || (w->wake = eventfd(0, EFD_CLOEXEC)) < 0 ||
            !(w->events = cJSON_CreateArray())) {
                if (w && w->wake > 0)
                        close(w->wake);
                if (w)
                        cJSON_Delete(w->events);
                free(w);
                connect_error(c, 500, "create watcher: out of resources");
                return;
        }
        for (int i = 0; i < 16; i++)
                snprintf(w->id + 2 * i, 3, "%02x", rnd[i]);
        snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
        snprintf(w->sbx, sizeof(w->sbx), "%s", sbx);
        w->cfg = cfg;
        w->entry = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "includeEntry"));
        w->ids = w->entry ? sandbox_user_ids(cfg, tenant, sbx) : (user_ids) { 1000, 1000 };
        w->asked_ms = mono_ms();
        w->refs = 2;
        if (gw_daemon_open(cfg, tenant, &w->d, &msg) < 0) {
                connect_error(c, 503, "%s", msg ? msg : "sandboxd unavailable");
                free(msg);
                w->refs = 1;
                watcher_unref(w);
                return;
        }
        /* Answered once the watch is in place (fs.watchStarted): every
         * change from then on is collected. */
        cJSON *p = path_params(sbx, path);
        cJSON_AddBoolToObject(p, "recursive", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "recursive")));
        w->watch_id = client_send(w->d, "fs.watch", p);
        const char *fail = w->watch_id > 0 ? NULL : "cannot send to sandboxd";
        int fail_status = 502;
        while (!fail && !w->dir) {
                client_msg *m = NULL;
                int rc = client_next(w->d, 60000, &m);
                if (rc == 0 || rc == -EBADMSG)
                        continue;
                if (rc < 0)
                        fail = "sandboxd did not start the watch";
                else if (m->kind == CLIENT_MSG_NOTIFICATION && m->method && !strcmp(m->method, "fs.watchStarted"))
                        w->dir = strdup(str_of(m->params, "path") ? str_of(m->params, "path") : path);
                else if (m->kind != CLIENT_MSG_NOTIFICATION && m->id == w->watch_id) {
                        fail = "sandboxd ended the watch at its start";
                        if (m->error) {
                                fail_status = gw_status_of(m->error);
                                connect_error(c, fail_status, "watch %.150s: %s", path,
                                              m->error->message ? m->error->message : "failed");
                                fail = "";
                        }
                }
                client_msg_free(m);
        }
        if (fail) {
                if (*fail)
                        connect_error(c, fail_status, "watch %.150s: %s", path, fail);
                w->refs = 1;
                watcher_unref(w);
                return;
        }
        /* The bounds again, now exactly (others may have made watchers
         * meanwhile). */
        pthread_mutex_lock(&watchers_lock);
        all = mine = theirs = 0;
        for (watcher *o = watchers; o; o = o->next, all++) {
                mine += !strcmp(o->tenant, tenant) && !strcmp(o->sbx, sbx);
                theirs += !strcmp(o->tenant, tenant);
        }
        bool room = mine < WATCHERS_PER_SANDBOX && theirs < WATCHERS_PER_TENANT && all < WATCHERS_MAX;
        if (room) {
                w->next = watchers;
                watchers = w;
                w->linked = true;
        }
        pthread_mutex_unlock(&watchers_lock);
        if (!room) {
                w->refs = 1;
                watcher_unref(w);
                connect_error(c, 429, "the gateway keeps as many watchers as it may; remove one (RemoveWatcher) "
                                      "or use WatchDir");
                return;
        }
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &attr, watcher_thread, w) != 0) {
                pthread_mutex_lock(&watchers_lock);
                watcher_unlink(w);
                watcher_unref(w);
                pthread_mutex_unlock(&watchers_lock);
                pthread_attr_destroy(&attr);
                connect_error(c, 503, "create watcher: the gateway cannot start its thread");
                return;
        }
        pthread_attr_destroy(&attr);
        cJSON *out = cJSON_CreateObject();
        cJSON_AddStringToObject(out, "watcherId", w->id);
        gw_send_json(c, 200, out);
}

static void watcher_events(gw_conn *c, const cJSON *req, const char *tenant, const char *sbx, bool remove) {
        const char *id = str_of(req, "watcherId");
        if (!id) {
                connect_error(c, 400, "watcherId: required");
                return;
        }
        pthread_mutex_lock(&watchers_lock);
        watcher *w = watcher_find(tenant, sbx, id);
        if (!w) {
                pthread_mutex_unlock(&watchers_lock);
                connect_error(c, 404, "watcher %.40s not found (removed, idle %d s, or its watch ended and was "
                                      "answered)", id, WATCHER_IDLE_S);
                return;
        }
        if (remove) {
                watcher_unlink(w);
                pthread_mutex_unlock(&watchers_lock);
                gw_send_json(c, 200, cJSON_CreateObject());
                return;
        }
        w->asked_ms = mono_ms();
        cJSON *evs = w->events, *out = NULL;
        char why[400] = "";
        int status = 0;
        if (w->failed) {
                status = 400; /* data_loss below */
                snprintf(why, sizeof(why), "%s", w->failed);
                watcher_unlink(w);
        } else if (w->n_events == 0 && w->ended) {
                status = 404;
                snprintf(why, sizeof(why), "watcher %s: %s", w->id, w->ended);
                watcher_unlink(w);
        } else {
                w->events = cJSON_CreateArray();
                w->n_events = 0;
                out = cJSON_CreateObject();
                cJSON_AddItemToObject(out, "events", evs);
                if (!w->events) {
                        w->events = evs;
                        cJSON_DetachItemViaPointer(out, evs);
                        cJSON_Delete(out);
                        out = NULL;
                        status = 500;
                        snprintf(why, sizeof(why), "out of memory");
                }
        }
        pthread_mutex_unlock(&watchers_lock);
        if (out)
                gw_send_json(c, 200, out);
        else if (status == 400) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "code", "data_loss");
                cJSON_AddStringToObject(o, "message", why);
                gw_send_json(c, 500, o);
        } else
                connect_error(c, status, "%s", why);
}

/* ---- /files ---- */

/* What a download of `size` bytes holds in the gateway at its peak: the
 * daemon's base64 answer line, its parsed string, and the decoded bytes
 * being sent. */
static size_t download_bytes(double size) {
        if (!(size >= 0) || size > (double) GW_MAX_BODY)
                size = (double) GW_MAX_BODY;
        return (size_t) size * 4 + 65536;
}

/* The query's `path` made absolute for the sandbox user or root (new
 * string; NULL when absent). */
static char *query_path(const gw_request *r, bool root) {
        char *q = gw_query_get(r, "path");
        char *a = q ? abs_path(q, root) : NULL;
        free(q);
        return a;
}

/* The query's `username`: 0 the sandbox user (absent, `user`,
 * `sandbox`), 1 root, -1 another. */
static int query_user(const gw_request *r) {
        char *u = gw_query_get(r, "username");
        int res = !u || !strcmp(u, "user") || !strcmp(u, "sandbox") ? 0 : !strcmp(u, "root") ? 1 : -1;
        free(u);
        return res;
}

static void files_get(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *sbx) {
        int user = query_user(r);
        bool root = user == 1;
        char *path = query_path(r, root);
        client *d = NULL;
        cJSON *res = NULL, *st = NULL;
        size_t held = 0;
        if (!path || user < 0) {
                gw_send_error(c, 400, "%s", !path ? "path: required"
                                                  : "username: sandboxd has the sandbox user (E2B's user) and root only");
                goto out;
        }
        char *msg = NULL;
        if (gw_daemon_open(cfg, tenant, &d, &msg) < 0) {
                gw_send_error(c, 503, "%s", msg ? msg : "sandboxd unavailable");
                free(msg);
                goto out;
        }
        /* Its size first: the file's bytes are held (several times over)
         * until the caller takes them, so downloads of all connections
         * together share the budget of request bodies (a caller cannot
         * make 256 connections each hold a 64 MiB file). */
        client_error *err = NULL;
        if (client_call(d, "fs.stat", path_params_as(sbx, path, root), 60000, NULL, NULL, &st, &err) < 0) {
                int code = err && err->message && (strstr(err->message, "No such file") || strstr(err->message, "not found"))
                                   ? 404 : gw_status_of(err);
                gw_send_error(c, code, "read %s: %s", path, err ? err->message : "failed");
                client_error_free(err);
                goto out;
        }
        held = download_bytes(cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(st, "size")));
        if (!gw_budget_take(tenant, held)) {
                held = 0;
                gw_send_error(c, 503, "read %s: the gateway holds as many file bodies as it may; retry", path);
                goto out;
        }
        if (client_call(d, "fs.read", path_params_as(sbx, path, root), 10 * 60 * 1000, NULL, NULL, &res, &err) < 0) {
                int code = err && err->message && (strstr(err->message, "No such file") || strstr(err->message, "not found"))
                                   ? 404 : gw_status_of(err);
                gw_send_error(c, code, "read %s: %s", path, err ? err->message : "failed");
                client_error_free(err);
                goto out;
        }
        void *data = NULL;
        size_t len = 0;
        const char *b64 = str_of(res, "content");
        if (!b64 || client_base64_decode(b64, &data, &len) < 0)
                gw_send_error(c, 502, "read %s: sandboxd's answer was not base64", path);
        else
                gw_send(c, 200, "application/octet-stream", data, len);
        free(data);
out:
        if (held)
                gw_budget_release(tenant, held);
        cJSON_Delete(res);
        cJSON_Delete(st);
        client_free(d);
        free(path);
}

/* File metadata (envd 0.6.2) is kept as the file's extended attributes
 * `user.e2b.KEY` (as envd keeps it): fs.write xattrs, fs.stat xattrs. */
#define METADATA_XATTR "user.e2b."
#define METADATA_MAX 32
#define METADATA_VALUE_MAX 4096

/* The X-Metadata-KEY headers of `r` as fs.write xattrs {"user.e2b.key":
 * VALUE} (a new object, {} when none), the key lower-cased (header names
 * are case-insensitive: the SDK's fetch sends them lower-case). NULL with
 * why when one is not a key E2B allows (HTTP token characters) or its
 * value not printable ASCII, or past METADATA_MAX. */
static cJSON *metadata_xattrs(const gw_request *r, char *why, size_t size) {
        cJSON *x = cJSON_CreateObject();
        int n = 0;
        for (size_t i = 0; x && i < r->n_headers; i++) {
                const char *name = r->headers[i].name, *v = r->headers[i].value ? r->headers[i].value : "";
                if (!name || strncasecmp(name, "X-Metadata-", 11) != 0)
                        continue;
                const char *key = name + 11;
                char xn[300];
                size_t kl = strlen(key);
                bool ok = kl > 0 && kl <= 240 && strlen(v) <= METADATA_VALUE_MAX;
                for (const char *k = key; ok && *k; k++)
                        ok = (*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
                             strchr("!#$%&'*+-.^_`|~", *k);
                for (const char *k = v; ok && *k; k++)
                        ok = (unsigned char) *k >= 0x20 && (unsigned char) *k <= 0x7e;
                if (!ok || ++n > METADATA_MAX) {
                        snprintf(why, size, "%.80s: %s", name,
                                 !ok ? "file metadata keys are 1 to 240 HTTP token characters, values at most 4096 "
                                       "bytes of printable ASCII"
                                     : "at most 32 metadata keys a file");
                        cJSON_Delete(x);
                        return NULL;
                }
                snprintf(xn, sizeof(xn), METADATA_XATTR "%s", key);
                for (char *k = xn; *k; k++)
                        if (*k >= 'A' && *k <= 'Z')
                                *k = (char) (*k - 'A' + 'a');
                cJSON_DeleteItemFromObjectCaseSensitive(x, xn);
                cJSON_AddStringToObject(x, xn, v);
        }
        if (!x)
                snprintf(why, size, "out of memory");
        return x;
}

/* Adds E2B's `metadata` {KEY: VALUE} to `o` from `xattrs` (fs.write's or
 * fs.stat's): the user.e2b.* ones, the prefix taken off; none when
 * there are none. */
static void add_metadata(cJSON *o, const cJSON *xattrs) {
        const cJSON *e;
        cJSON *m = NULL;
        cJSON_ArrayForEach(e, xattrs)
                if (e->string && !strncmp(e->string, METADATA_XATTR, strlen(METADATA_XATTR)) &&
                    e->string[strlen(METADATA_XATTR)] && cJSON_IsString(e) &&
                    (m || (m = cJSON_AddObjectToObject(o, "metadata"))))
                        cJSON_AddStringToObject(m, e->string + strlen(METADATA_XATTR), e->valuestring);
}

/* fs.write takes one line of at most maxLineBytes (16 MiB by default):
 * a file goes in pieces of this many bytes, the first one creating or
 * truncating it, the rest appended (as sandboxctl cp sends them). */
#define WRITE_PIECE ((size_t) 4 << 20)

static int write_file(client *d, const char *sbx, const char *path, const char *data, size_t len,
                      const cJSON *xattrs, bool root, client_error **ret_err) {
        size_t off = 0;
        do {
                size_t n = len - off < WRITE_PIECE ? len - off : WRITE_PIECE;
                char *b64 = client_base64_encode(data + off, n);
                if (!b64) {
                        *ret_err = client_error_new(CLIENT_ERROR_LOCAL, NULL, NULL, "out of memory");
                        return -ENOMEM;
                }
                cJSON *p = cJSON_CreateObject(), *files = cJSON_AddArrayToObject(p, "files"),
                      *f = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "sandbox", sbx);
                if (root)
                        cJSON_AddBoolToObject(p, "sudo", true);
                cJSON_AddStringToObject(f, "path", path);
                cJSON_AddStringToObject(f, "content", b64);
                if (off > 0)
                        cJSON_AddBoolToObject(f, "append", true);
                else if (xattrs)
                        cJSON_AddItemToObject(f, "xattrs", cJSON_Duplicate(xattrs, 1));
                cJSON_AddItemToArray(files, f);
                free(b64);
                int r = client_call(d, "fs.write", p, 10 * 60 * 1000, NULL, NULL, NULL, ret_err);
                if (r < 0)
                        return r;
                off += n;
        } while (off < len);
        return 0;
}

/* A command run as root in the sandbox on connection d (argv: cmd, then
 * args, NULL-ended): 0 when it exited 0. */
static int root_run(client *d, const char *sbx, const char *const *argv) {
        cJSON *p = cJSON_CreateObject(), *args = cJSON_CreateArray(), *res = NULL;
        cJSON_AddStringToObject(p, "sandbox", sbx);
        cJSON_AddStringToObject(p, "cmd", argv[0]);
        for (const char *const *a = argv + 1; *a; a++)
                cJSON_AddItemToArray(args, cJSON_CreateString(*a));
        cJSON_AddItemToObject(p, "args", args);
        cJSON_AddBoolToObject(p, "sudo", true);
        int r = client_call(d, "command.run", p, 60000, NULL, NULL, &res, NULL) == 0 &&
                                cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(res, "exitCode")) == 0
                        ? 0 : -EIO;
        cJSON_Delete(res);
        return r;
}

/* envd makes a written file's missing parent directories as root, owned
 * by the writing user (its EnsureDirs), so E2B's user writes to /0/a.txt;
 * sandboxd's fs.write makes them as the sandbox user, who may not. After
 * such a refusal (EACCES) this makes them so: the missing ancestors found
 * by fs.stat as the sandbox user (none below a directory it cannot search:
 * only an ENOENT counts), then `mkdir -p` and `chown -R -P` (no symlink
 * followed) of the topmost one made, as root in the sandbox, the tenant's
 * own root (E2B's user root). 1 when it made some, 0 when none were
 * missing (the refusal is another), -EIO when it failed. */
static int ensure_dirs(const gw_config *cfg, const char *tenant, client *d, const char *sbx, const char *path) {
        char dir[4096], top[4096] = "", uid[48];
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
                return 0;
        *slash = 0;
        char cur[4096];
        snprintf(cur, sizeof(cur), "%s", dir);
        for (int depth = 0; depth < 64 && cur[0] && strcmp(cur, "/"); depth++) {
                cJSON *st = NULL;
                client_error *err = NULL;
                int r = client_call(d, "fs.stat", path_params(sbx, cur), 60000, NULL, NULL, &st, &err);
                bool missing = r < 0 && err && err->message && strstr(err->message, "No such file");
                cJSON_Delete(st);
                client_error_free(err);
                if (!missing)
                        break;
                snprintf(top, sizeof(top), "%s", cur);
                char *up = strrchr(cur, '/');
                if (!up)
                        break;
                *up = 0;
        }
        if (!top[0])
                return 0;
        user_ids u = sandbox_user_ids(cfg, tenant, sbx);
        snprintf(uid, sizeof(uid), "%.0f:%.0f", u.uid, u.gid);
        if (root_run(d, sbx, (const char *const[]) { "mkdir", "-p", "--", dir, NULL }) < 0 ||
            root_run(d, sbx, (const char *const[]) { "chown", "-R", "-P", "--", uid, top, NULL }) < 0)
                return -EIO;
        return 1;
}

/* write_file, and for the sandbox user once more after ensure_dirs made
 * the missing parents a refusal came from. */
static int write_file_as(const gw_config *cfg, const char *tenant, client *d, const char *sbx, const char *path,
                         const char *data, size_t len, const cJSON *xattrs, bool root, client_error **ret_err) {
        int r = write_file(d, sbx, path, data, len, xattrs, root, ret_err);
        if (r < 0 && !root && *ret_err && (*ret_err)->message && strstr((*ret_err)->message, "Permission denied") &&
            ensure_dirs(cfg, tenant, d, sbx, path) == 1) {
                client_error_free(*ret_err);
                *ret_err = NULL;
                r = write_file(d, sbx, path, data, len, xattrs, root, ret_err);
        }
        return r;
}

/* Inflates the gzip stream `in` (len bytes) into a new buffer of at most
 * GW_MAX_BODY bytes: 0 with *ret, *ret_len; -EINVAL when it is not gzip,
 * -E2BIG past the bound, -ENOMEM. RFC 1952; zlib's inflate with gzip
 * decoding (windowBits 16 + MAX_WBITS, zlib.h). */
static int gunzip(const char *in, size_t len, char **ret, size_t *ret_len) {
        z_stream z = {0};
        if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
                return -ENOMEM;
        size_t cap = len * 4 + 4096, have = 0;
        if (cap > GW_MAX_BODY)
                cap = GW_MAX_BODY;
        char *buf = malloc(cap);
        int r = buf ? 0 : -ENOMEM, zr = Z_OK;
        z.next_in = (unsigned char *) in;
        z.avail_in = (uInt) len;
        while (!r && zr != Z_STREAM_END) {
                if (have == cap) {
                        if (cap == GW_MAX_BODY) {
                                r = -E2BIG;
                                break;
                        }
                        size_t ncap = cap * 2 > GW_MAX_BODY ? GW_MAX_BODY : cap * 2;
                        char *nb = realloc(buf, ncap);
                        if (!nb) {
                                r = -ENOMEM;
                                break;
                        }
                        buf = nb;
                        cap = ncap;
                }
                z.next_out = (unsigned char *) buf + have;
                z.avail_out = (uInt) (cap - have);
                zr = inflate(&z, Z_NO_FLUSH);
                have = cap - z.avail_out;
                if (zr != Z_OK && zr != Z_STREAM_END)
                        r = -EINVAL;
                else if (zr == Z_OK && z.avail_in == 0 && z.avail_out > 0)
                        r = -EINVAL; /* the stream ended early */
        }
        inflateEnd(&z);
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret = buf;
        *ret_len = have;
        return 0;
}

/* POST /files with Content-Type application/octet-stream (envd 0.5.7):
 * the body is the file at the query's `path`, gzip when Content-Encoding
 * says so. Answers as the multipart upload does. */
static void files_post_octet(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant,
                             const char *sbx, const char *path, const cJSON *xattrs, bool root) {
        const char *enc = gw_header_get(r, "Content-Encoding");
        char *plain = NULL;
        size_t plain_len = 0;
        client *d = NULL;
        if (!path) {
                gw_send_error(c, 400, "path: required for an application/octet-stream upload");
                return;
        }
        if (enc && strcasecmp(enc, "gzip") && strcasecmp(enc, "identity")) {
                gw_send_error(c, 415, "Content-Encoding %s: gzip or identity", enc);
                return;
        }
        if (enc && !strcasecmp(enc, "gzip")) {
                int g = gunzip(r->body, r->body_len, &plain, &plain_len);
                if (g < 0) {
                        gw_send_error(c, g == -E2BIG ? 413 : g == -ENOMEM ? 500 : 400, "body: %s",
                                      g == -E2BIG ? "the file is larger than the gateway's 64 MiB"
                                      : g == -ENOMEM ? "out of memory" : "not a whole gzip stream");
                        return;
                }
        }
        char *msg = NULL;
        if (gw_daemon_open(cfg, tenant, &d, &msg) < 0) {
                gw_send_error(c, 503, "%s", msg ? msg : "sandboxd unavailable");
                free(msg);
                free(plain);
                return;
        }
        client_error *err = NULL;
        if (write_file_as(cfg, tenant, d, sbx, path, plain ? plain : r->body, plain ? plain_len : r->body_len, xattrs,
                          root, &err) < 0) {
                gw_send_error(c, gw_status_of(err), "write %s: %s", path, err ? err->message : "failed");
                client_error_free(err);
        } else {
                cJSON *arr = cJSON_CreateArray(), *info = cJSON_CreateObject();
                const char *slash = strrchr(path, '/');
                cJSON_AddStringToObject(info, "name", slash ? slash + 1 : path);
                cJSON_AddStringToObject(info, "type", "file");
                cJSON_AddStringToObject(info, "path", path);
                add_metadata(info, xattrs);
                cJSON_AddItemToArray(arr, info);
                gw_send_json(c, 200, arr);
        }
        client_free(d);
        free(plain);
}

static void files_post(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *sbx) {
        int user = query_user(r);
        bool root = user == 1;
        char *path = query_path(r, root);
        gw_part *parts = NULL;
        size_t n = 0;
        client *d = NULL;
        cJSON *out_arr = NULL, *xattrs = NULL;
        if (user < 0) {
                gw_send_error(c, 400, "username: sandboxd has the sandbox user (E2B's user) and root only");
                goto out;
        }
        /* File metadata (X-Metadata-* headers, envd 0.6.2): the files'
         * user.e2b.* extended attributes, exactly those (an upload
         * without any clears them, as envd's overwrite does). */
        char why[300];
        if (!(xattrs = metadata_xattrs(r, why, sizeof(why)))) {
                gw_send_error(c, 400, "%s", why);
                goto out;
        }
        const char *ct = gw_header_get(r, "Content-Type");
        if (ct && !strncasecmp(ct, "application/octet-stream", 24)) {
                files_post_octet(cfg, c, r, tenant, sbx, path, xattrs, root);
                goto out;
        }
        int mp = gw_multipart(r, &parts, &n);
        if (mp == -E2BIG) {
                gw_send_error(c, 413, "body: at most %d files in one upload", GW_MAX_PARTS);
                goto out;
        }
        if (mp < 0) {
                gw_send_error(c, 400, "body: multipart/form-data with one or more file parts is required "
                                      "(application/octet-stream uploads are not served yet)");
                goto out;
        }
        for (size_t i = 0; i < n; i++)
                if (!(path && n == 1) && (!parts[i].filename || !*parts[i].filename)) {
                        gw_send_error(c, 400, "path: required (the query or each part's filename)");
                        goto out;
                }
        char *msg = NULL;
        if (gw_daemon_open(cfg, tenant, &d, &msg) < 0) {
                gw_send_error(c, 503, "%s", msg ? msg : "sandboxd unavailable");
                free(msg);
                goto out;
        }
        out_arr = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
                if (!(path && n == 1)) {
                        char *a = abs_path(parts[i].filename, root);
                        if (!a) {
                                gw_send_error(c, 500, "out of memory");
                                goto out;
                        }
                        free(parts[i].filename);
                        parts[i].filename = a;
                }
                const char *fp = path && n == 1 ? path : parts[i].filename;
                client_error *err = NULL;
                if (write_file_as(cfg, tenant, d, sbx, fp, parts[i].data, parts[i].len, xattrs, root, &err) < 0) {
                        gw_send_error(c, gw_status_of(err), "write %s: %s", fp, err ? err->message : "failed");
                        client_error_free(err);
                        goto out;
                }
                cJSON *info = cJSON_CreateObject();
                const char *slash = strrchr(fp, '/');
                cJSON_AddStringToObject(info, "name", slash ? slash + 1 : fp);
                cJSON_AddStringToObject(info, "type", "file");
                cJSON_AddStringToObject(info, "path", fp);
                add_metadata(info, xattrs);
                cJSON_AddItemToArray(out_arr, info);
        }
        gw_send_json(c, 200, out_arr);
        out_arr = NULL;
out:
        cJSON_Delete(out_arr);
        cJSON_Delete(xattrs);
        client_free(d);
        for (size_t i = 0; i < n; i++)
                free(parts[i].filename);
        free(parts);
        free(path);
}

/* GET /health with the sandbox's token: 204 while it runs; 502 when it
 * is paused or gone, as E2B's proxy answers for a sandbox whose envd is
 * not there (the SDK's isRunning() false). */
static void health(const gw_config *cfg, gw_conn *c, const char *tenant, const char *sbx) {
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        cJSON_AddStringToObject(p, "name", sbx);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "sandbox.get", p, &res, &err) < 0) {
                int st = gw_status_of(err);
                client_error_free(err);
                if (st == 404)
                        gw_send_error(c, 502, "sandbox %s is not running", sbx);
                else
                        gw_send_error(c, st, "health: sandboxd did not answer");
                return;
        }
        const cJSON *sess = cJSON_GetObjectItemCaseSensitive(res, "session");
        bool running = cJSON_IsObject(sess) && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sess, "paused"));
        cJSON_Delete(res);
        if (running)
                gw_send(c, 204, NULL, NULL, 0);
        else
                gw_send_error(c, 502, "sandbox %s is %s", sbx, cJSON_IsObject(sess) ? "paused" : "not running");
}

/* GET /envs: the sandbox's environment variables as envd keeps them (the
 * envVars it was created with): sandbox.get's env. */
static void envs(const gw_config *cfg, gw_conn *c, const char *tenant, const char *sbx) {
        cJSON *p = cJSON_CreateObject(), *res = NULL;
        cJSON_AddStringToObject(p, "name", sbx);
        client_error *err = NULL;
        if (gw_daemon_call(cfg, tenant, "sandbox.get", p, &res, &err) < 0) {
                gw_send_error(c, gw_status_of(err), "envs: %s", err && err->message ? err->message : "failed");
                client_error_free(err);
                return;
        }
        cJSON *env = cJSON_DetachItemFromObjectCaseSensitive(res, "env");
        cJSON_Delete(res);
        gw_send_json(c, 200, cJSON_IsObject(env) ? env : (cJSON_Delete(env), cJSON_CreateObject()));
}

void gw_envd(const gw_config *cfg, gw_conn *c, const gw_request *r, const char *tenant, const char *sandbox) {
        const char *m = r->method, *path = r->path;
        if (!strcmp(path, "/health") && !strcmp(m, "GET")) {
                health(cfg, c, tenant, sandbox);
                return;
        }
        if (!strcmp(path, "/envs") && !strcmp(m, "GET")) {
                envs(cfg, c, tenant, sandbox);
                return;
        }
        if (!strcmp(path, "/files")) {
                if (!strcmp(m, "GET"))
                        files_get(cfg, c, r, tenant, sandbox);
                else if (!strcmp(m, "POST"))
                        files_post(cfg, c, r, tenant, sandbox);
                else
                        gw_send_error(c, 405, "%s /files: not allowed", m);
                return;
        }
        if (strcmp(m, "POST") != 0) {
                gw_send_error(c, 404, "%s %s: not served by sandboxd-e2b's envd (GET /envs, /health, /files "
                                      "and the Connect calls are)", m, path);
                return;
        }
        /* Connect's JSON codec only (a binary, proto, request would be
         * misread as JSON): application/connect+json for streams,
         * application/json for unary calls. */
        const char *ct = gw_header_get(r, "Content-Type");
        size_t sl = strlen("application/connect+json"), ul = strlen("application/json");
        bool streaming = ct && !strncasecmp(ct, "application/connect+json", sl) && (!ct[sl] || ct[sl] == ';');
        bool unary = ct && !strncasecmp(ct, "application/json", ul) && (!ct[ul] || ct[ul] == ';');
        if (!streaming && !unary) {
                gw_send_error(c, 415, "Content-Type: application/json or application/connect+json (Connect's JSON "
                                      "codec) is what sandboxd-e2b speaks");
                return;
        }
        if (streaming) {
                if (!strcmp(path, "/process.Process/Start"))
                        process_start(cfg, c, r, tenant, sandbox);
                else if (!strcmp(path, "/process.Process/Connect"))
                        process_connect(cfg, c, r, tenant, sandbox);
                else if (!strcmp(path, "/filesystem.Filesystem/WatchDir"))
                        watch_dir(cfg, c, r, tenant, sandbox);
                else {
                        char msg[160];
                        snprintf(msg, sizeof(msg), "%.100s is not served by sandboxd-e2b yet", path + 1);
                        stream_error(c, 501, msg);
                }
                return;
        }
        if (!strcmp(path, "/process.Process/StreamInput"))
                connect_error(c, 400, "process.Process/StreamInput is a client stream: Content-Type "
                                      "application/connect+json, its messages in envelopes");
        else if (!strcmp(path, "/process.Process/List"))
                process_list(cfg, c, tenant, sandbox);
        else if (!strcmp(path, "/process.Process/SendSignal") || !strcmp(path, "/process.Process/SendInput") ||
                 !strcmp(path, "/process.Process/CloseStdin") || !strcmp(path, "/process.Process/Update"))
                process_call(cfg, c, r, tenant, sandbox, path + 17);
        else if (!strncmp(path, "/filesystem.Filesystem/", 23))
                filesystem(cfg, c, r, tenant, sandbox, path + 23);
        else if (!strncmp(path, "/process.Process/", 17))
                connect_error(c, 501, "process.Process/%s is not served by sandboxd-e2b yet", path + 17);
        else
                connect_error(c, 404, "%s: no such envd call", path);
}
