/* command.* methods: start commands through sandbox-init, stream their
 * output to the connection that started them, keep a bounded log of each
 * stream, and answer run/wait when they exit.
 *
 * Flow control, per command: init sends at most COMMAND_WINDOW bytes of a
 * command's output that the daemon has not credited back (agent.h
 * "window", "credit"). Credit goes back as output is passed on, and is
 * held while the command's connection is congested (rpc.h): init then
 * stops reading that command's pipes and the command blocks on write, as
 * with `cmd | slow-reader` on a terminal, while the channel (and every
 * other request of the sandbox, from any client) goes on. The drain
 * handler gives the credit back. Output nobody is attached to is kept in
 * the log and credited at once.
 *
 * The daemon holds init to the window it granted: root inside a sandbox
 * can speak on init's socket (agent.c), and an init that ignores credit
 * would otherwise have every byte it sends queued for a client that does
 * not read. Output of a command past window + AGENT_WINDOW_SLACK bytes not
 * yet credited (more than an init that keeps the window ever sends) is
 * a protocol error: the command's output from there on is dropped,
 * neither logged nor passed on, and the daemon says so once in its log.
 * The channel is read on regardless (every answer of the sandbox comes
 * through it). What stays queued for a connection is then bounded
 * per command, and for all connections by outputBudgetMiB. Whether init
 * keeps windows is not init's to say: a session this daemon started runs
 * its own init, held to the window even when a "started" comes without
 * one (a forged init opting out); only a session re-adopted from a record
 * of before (an older init, maybe) is judged by its answers, and the
 * commands of one that keeps no window are bounded by the budget alone. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "libcore/agent.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/events.h"
#include "sandboxd/text.h"
#include "sandboxd/internal.h"
#include "sandboxd/metrics.h"
#include "sandboxd/limits.h"

/* Commands kept per daemon after they exit, oldest forgotten first. */
#define MAX_FINISHED_COMMANDS 4096

/* Bytes the daemon keeps for its commands' records (the record, cmd, cwd
 * and args; logs have logBudgetMiB), docs/API.md "Limits": over it the
 * oldest finished commands are forgotten, as past MAX_FINISHED_COMMANDS.
 * 4096 commands of maximal args and cwd would otherwise hold ~300 MiB of
 * daemon memory outside any cgroup. */
#define KEPT_COMMANDS_BYTES (32u << 20)

/* command.list answers at most this many bytes of commands per page (by
 * the kept text of each, before JSON escaping), always one command at least;
 * nextCursor goes on from there. */
#define LIST_PAGE_BYTES (4u << 20)

/* ---- helpers ------------------------------------------------------------ */

int req_list_add(req_list *l, rpc_request *req) {
        rpc_request **n = realloc(l->items, (l->n + 1) * sizeof(*n));
        if (!n) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return -ENOMEM;
        }
        l->items = n;
        l->items[l->n++] = req;
        return 0;
}

req_list req_list_take(req_list *l) {
        req_list t = *l;
        *l = (req_list){0};
        return t;
}

/* Keeps the last r->cap bytes. The buffer grows on demand (most commands
 * print little, and exec latency should not pay for a 1 MiB allocation),
 * then wraps once it reaches cap. */
void ring_append(ring *r, const char *data, size_t len) {
        r->total += len;
        if (!r->cap || !len)
                return;
        if (len >= r->cap) {
                r->truncated = r->truncated || r->len > 0 || len > r->cap;
                data += len - r->cap;
                len = r->cap;
                r->start = r->len = 0;
        }
        if (r->alloc < r->cap && r->len + len > r->alloc) {
                size_t want = r->alloc ? r->alloc : 4096;
                while (want < r->len + len)
                        want *= 2;
                if (want > r->cap)
                        want = r->cap;
                char *nb = realloc(r->buf, want);
                if (!nb)
                        return;
                r->buf = nb;
                r->alloc = want;
        }
        if (r->len + len > r->alloc) {
                /* Full: drop the oldest bytes to make room. */
                size_t drop = r->len + len - r->alloc;
                r->start = (r->start + drop) % r->alloc;
                r->len -= drop;
                r->truncated = true;
        }
        size_t pos = (r->start + r->len) % r->alloc;
        size_t first = len < r->alloc - pos ? len : r->alloc - pos;
        memcpy(r->buf + pos, data, first);
        memcpy(r->buf, data + first, len - first);
        r->len += len;
}

void ring_shrink(ring *r, size_t cap) {
        if (cap >= r->cap)
                return;
        size_t keep = r->len < cap ? r->len : cap;
        char *nb = NULL;
        if (keep) {
                nb = malloc(keep);
                if (!nb)
                        return;
                for (size_t i = 0; i < keep; i++)
                        nb[i] = r->buf[(r->start + r->len - keep + i) % r->alloc];
        }
        if (keep < r->len)
                r->truncated = true;
        free(r->buf);
        r->buf = nb;
        r->alloc = r->len = keep;
        r->start = 0;
        r->cap = cap;
}

char *ring_base64(const ring *r) {
        _cleanup_free_ char *flat = malloc(r->len + 1);
        if (!flat)
                return NULL;
        for (size_t i = 0; i < r->len; i++)
                flat[i] = r->buf[(r->start + i) % r->alloc];
        return core_base64_encode(flat, r->len);
}

void ring_free(ring *r) {
        free(r->buf);
        /* The offset goes on: command.logs still places what comes next. */
        *r = (ring){.total = r->total};
}

/* ---- the global log budget ---------------------------------------------- */

/* Every command's log rings together hold at most logBudgetMiB (daemon
 * memory outside any cgroup: 4096 finished commands of 2 x commandLogBytes
 * would otherwise be 8 GiB). Over budget, the logs of the command that
 * finished first are dropped whole, then the next; when only running
 * commands hold logs, each of their streams is cut to an equal share of the
 * budget (its newest bytes kept), so one chatty command cannot take the
 * logs of the others. What was dropped reads as "truncated" in
 * command.logs. */
#define LOG_SHARE_MIN 4096

static size_t log_alloc(const command *c) {
        return c->out.alloc + c->err.alloc;
}

/* Tells init to cut command c's kept logs the same way (agent.h "logcap";
 * 0: dropped whole), so that a restarted daemon gets back what this one
 * still had and no more. */
static void send_logcap(command *c, size_t bytes) {
        if (!c->sess || c->sess->agent_closed)
                return;
        cJSON *op = cJSON_CreateObject();
        if (!op)
                return;
        cJSON_AddStringToObject(op, "op", "logcap");
        cJSON_AddNumberToObject(op, "id", c->agent_id);
        cJSON_AddNumberToObject(op, "bytes", (double)bytes);
        (void)agent_send(c->sess, op);
}

static void drop_logs(manager *m, command *c) {
        send_logcap(c, 0);
        m->log_bytes -= log_alloc(c);
        bool had = c->out.len || c->err.len || c->out.truncated || c->err.truncated;
        ring_free(&c->out);
        ring_free(&c->err);
        c->out.truncated = c->err.truncated = had;
        c->log_evicted = true;
}

static void logs_enforce(manager *m) {
        size_t budget = (size_t)m->cfg->log_budget_mib << 20;
        while (m->log_bytes > budget) {
                command *oldest = NULL;
                for (command *c = m->commands; c; c = c->next)
                        if (c->exited && log_alloc(c) && (!oldest || c->ended_ms <= oldest->ended_ms))
                                oldest = c;
                if (!oldest)
                        break;
                drop_logs(m, oldest);
        }
        if (m->log_bytes <= budget)
                return;
        size_t streams = 0;
        for (command *c = m->commands; c; c = c->next)
                if (log_alloc(c))
                        streams += 2;
        size_t share = streams ? budget / streams : budget;
        if (share < LOG_SHARE_MIN)
                share = LOG_SHARE_MIN;
        for (command *c = m->commands; c; c = c->next) {
                if (!log_alloc(c))
                        continue;
                size_t before = log_alloc(c), cap_before = c->out.cap;
                ring_shrink(&c->out, share);
                ring_shrink(&c->err, share);
                m->log_bytes = m->log_bytes - before + log_alloc(c);
                if (c->out.cap < cap_before)
                        send_logcap(c, c->out.cap);
        }
}

/* ring_append with the budget's accounting. */
static void log_append(command *c, ring *r, const char *data, size_t len) {
        manager *m = c->sb->m;
        size_t before = r->alloc;
        ring_append(r, data, len);
        m->log_bytes = m->log_bytes - before + r->alloc;
        if (r->alloc > before)
                logs_enforce(m);
}

static command *find_by_agent_id(session *s, unsigned id) {
        for (command *c = s->sb->m->commands; c; c = c->next)
                if (c->sess == s && c->agent_id == id)
                        return c;
        return NULL;
}

/* The session's memory limit in bytes (DESIGN §3: vcpus × 2048 MiB, as
 * session.c applies it). */
static uint64_t memory_limit(const sandbox *sb) {
        return (uint64_t)sb->vcpus * 2048ULL * 1024 * 1024;
}

/* "oomKilled" of a finished command, with the limit it hit when true. */
static void add_oom(cJSON *o, const command *c) {
        cJSON_AddBoolToObject(o, "oomKilled", c->oom_killed);
        if (c->oom_killed)
                cJSON_AddNumberToObject(o, "memoryLimitBytes", (double)(c->container && container_memory_limit(c->sess, c->container) ? container_memory_limit(c->sess, c->container) : memory_limit(c->sb)));
}

/* Reads the session's OOM kill count at a command's start. Without one
 * (no memory controller, an old kernel) oomKilled stays false. */
/* The cgroup whose OOM kills are the command's: its container's, else
 * the session's. */
static core_cgroup *oom_cgroup(const command *c) {
        core_cgroup *cg = c->container && c->sess ? container_cgroup(c->sess, c->container) : NULL;
        return cg ? cg : c->sess ? c->sess->cg : NULL;
}

static void note_oom_count(command *c) {
        core_cgroup *cg = oom_cgroup(c);
        c->oom_known = cg && core_cgroup_oom_kills(cg, &c->oom_before) >= 0;
}

/* A command that ended by SIGKILL (exit 128 + 9) while the session's OOM
 * kill count grew was killed by the kernel's OOM killer at the memory
 * limit (the kernel counts the kill as it sends SIGKILL, before the
 * victim's exit can reach init and us): marked oomKilled, told as an `oom`
 * event. A SIGKILL of ours (the timeout, command.signal) does not grow the
 * count. Another command of the session killed by SIGKILL in the same
 * window would be marked too: the count is per session. */
static void check_oom(command *c, int code) {
        uint64_t now;
        core_cgroup *cg = oom_cgroup(c);
        if (code != 128 + SIGKILL || c->timed_out || !c->oom_known || !cg || core_cgroup_oom_kills(cg, &now) < 0 ||
            now <= c->oom_before)
                return;
        c->oom_killed = true;
        uint64_t ctr_limit = c->container ? container_memory_limit(c->sess, c->container) : 0;
        uint64_t limit = ctr_limit ? ctr_limit : memory_limit(c->sb);
        cJSON *f = cJSON_CreateObject();
        char msg[320];
        if (ctr_limit)
                snprintf(msg, sizeof(msg), "command %s (%s) was killed by the OOM killer at container '%s''s memory "
                         "limit of %" PRIu64 " MiB", c->cmd_id, c->cmd, c->container, limit >> 20);
        else
                snprintf(msg, sizeof(msg), "command %s (%s) was killed by the OOM killer at the sandbox's memory limit of "
                         "%" PRIu64 " MiB (%u vCPU%s x 2048 MiB); update --vcpus raises it", c->cmd_id, c->cmd,
                         limit >> 20, c->sb->vcpus, c->sb->vcpus == 1 ? "" : "s");
        cJSON_AddStringToObject(f, "cmdId", c->cmd_id);
        if (c->container)
                cJSON_AddStringToObject(f, "container", c->container);
        cJSON_AddNumberToObject(f, "memoryLimitBytes", (double)limit);
        cJSON_AddNumberToObject(f, "vcpus", c->sb->vcpus);
        cJSON_AddStringToObject(f, "message", msg);
        events_emit(c->sb->m, EVENT_OOM, c->sb->name, f);
}

/* "usage" of a finished command: {cpuMs, memoryPeakBytes} from wait4 in
 * sandbox-init (docs/API.md "command.wait"), null when init reported none. */
static void add_usage(cJSON *o, const command *c) {
        if (!c->has_usage) {
                cJSON_AddNullToObject(o, "usage");
                return;
        }
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "cpuMs", (double)c->usage_cpu_ms);
        cJSON_AddNumberToObject(u, "memoryPeakBytes", (double)c->usage_mem_peak);
}

/* A usage number of an exit packet: sandbox-controlled, so range-checked
 * before the conversion (2^53 is beyond any real figure). */
static bool usage_number(const cJSON *u, const char *key, uint64_t *ret) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(u, key);
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 9007199254740992.0))
                return false;
        *ret = (uint64_t)v->valuedouble;
        return true;
}

/* Keeps the strings of args (a JSON array; non-strings skipped) as c's
 * argv. Returns 0 or -ENOMEM. */
static int set_args(command *c, const cJSON *args) {
        size_t len = 0;
        unsigned n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, args)
                if (cJSON_IsString(it)) {
                        len += strlen(it->valuestring) + 1;
                        n++;
                }
        char *buf = malloc(len ? len : 1);
        if (!buf)
                return -ENOMEM;
        size_t off = 0;
        cJSON_ArrayForEach(it, args)
                if (cJSON_IsString(it)) {
                        size_t l = strlen(it->valuestring) + 1;
                        memcpy(buf + off, it->valuestring, l);
                        off += l;
                }
        c->argv = buf;
        c->argv_len = len;
        c->argc = n;
        return 0;
}

/* c's args as a new JSON array of strings; caller owns it. */
static cJSON *args_json(const command *c) {
        cJSON *a = cJSON_CreateArray();
        for (size_t off = 0; a && off < c->argv_len; off += strlen(c->argv + off) + 1)
                cJSON_AddItemToArray(a, cJSON_CreateString(c->argv + off));
        return a;
}

/* What command c costs the daemon's KEPT_COMMANDS_BYTES. */
static size_t kept_size(const command *c) {
        return sizeof(*c) + strlen(c->cmd) + 1 + strlen(c->cwd) + 1 + c->argv_len;
}

/* Counts c, just put into m->commands, in n_commands and kept_bytes. */
static void keep_command(manager *m, command *c) {
        m->n_commands++;
        c->kept = kept_size(c);
        m->kept_bytes += c->kept;
}

static cJSON *command_json(const command *c) {
        char buf[40];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cmdId", c->cmd_id);
        cJSON_AddStringToObject(o, "sandbox", c->sb->name);
        cJSON_AddStringToObject(o, "cmd", c->cmd);
        cJSON_AddItemToObject(o, "args", args_json(c));
        cJSON_AddStringToObject(o, "cwd", c->cwd);
        cJSON_AddStringToObject(o, "user", c->sudo ? "root" : "sandbox");
        cJSON_AddBoolToObject(o, "tty", c->tty);
        if (c->container)
                cJSON_AddStringToObject(o, "container", c->container);
        cJSON_AddStringToObject(o, "startedAt", core_format_time(c->started_ms, buf, sizeof(buf)));
        if (c->exited) {
                cJSON_AddNumberToObject(o, "exitCode", c->exit_code);
                cJSON_AddNumberToObject(o, "durationMs", (double)(c->ended_ms - c->started_ms));
                cJSON_AddBoolToObject(o, "timedOut", c->timed_out);
                add_oom(o, c);
                add_usage(o, c);
        } else {
                cJSON_AddNullToObject(o, "exitCode");
                cJSON_AddNullToObject(o, "durationMs");
                cJSON_AddNullToObject(o, "usage");
        }
        return o;
}

static cJSON *finished_json(const command *c) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cmdId", c->cmd_id);
        cJSON_AddNumberToObject(o, "exitCode", c->exit_code);
        cJSON_AddNumberToObject(o, "durationMs", (double)(c->ended_ms - c->started_ms));
        /* Tells a 137 from the timeout or the OOM killer apart from any
         * other SIGKILL, so callers can say why the command died. */
        cJSON_AddBoolToObject(o, "timedOut", c->timed_out);
        add_oom(o, c);
        add_usage(o, c);
        return o;
}

void command_free(command *c) {
        if (c->sb) {
                c->sb->m->log_bytes -= log_alloc(c);
                c->sb->m->kept_bytes -= c->kept;
        }
        free(c->cmd);
        free(c->cwd);
        free(c->container);
        free(c->argv);
        ring_free(&c->out);
        ring_free(&c->err);
        sd_event_source_disable_unref(c->timeout_src);
        if (c->conn) {
                rpc_conn_unref(c->conn);
                if (c->sb)
                        c->sb->m->n_conn_commands--;
        }
        free(c->waiters.items);
        free(c);
}

static void send_ack(session *s, unsigned id);

/* Finished commands past MAX_FINISHED_COMMANDS are forgotten PRUNE_BATCH
 * at a time: the oldest are at the end of the list (newest first), so each
 * pruning walks all of it, and one walk of 4096 commands per exit was tens
 * of microseconds of every command.run once a daemon had run that many. */
#define PRUNE_BATCH 64

/* A finished command nobody waits for. */
static bool prunable(const command *c) {
        return c->exited && !c->waiters.n && !c->run_req;
}

/* Over KEPT_COMMANDS_BYTES by this much, finished commands are forgotten
 * down to the budget (one walk per this many bytes, as PRUNE_BATCH). */
#define PRUNE_BYTES (1u << 20)

/* Forgets the oldest finished commands past the bounds, once the count is
 * past MAX_FINISHED_COMMANDS by PRUNE_BATCH or the bytes are past
 * KEPT_COMMANDS_BYTES by PRUNE_BYTES: one walk finds the prunable ones,
 * marks the oldest of them until both bounds hold, a second drops those. */
static void prune_finished(manager *m) {
        if (m->n_commands <= MAX_FINISHED_COMMANDS + PRUNE_BATCH && m->kept_bytes <= KEPT_COMMANDS_BYTES + PRUNE_BYTES)
                return;
        unsigned prunables = 0;
        for (command *c = m->commands; c; c = c->next)
                prunables += prunable(c);
        _cleanup_free_ command **v = calloc(prunables + 1, sizeof(*v));
        if (!v)
                return;
        unsigned n = 0;
        for (command *c = m->commands; c; c = c->next)
                if (prunable(c))
                        v[n++] = c; /* newest first */
        unsigned count = m->n_commands;
        size_t bytes = m->kept_bytes;
        unsigned drop = 0;
        while (drop < n && (count > MAX_FINISHED_COMMANDS || bytes > KEPT_COMMANDS_BYTES)) {
                command *c = v[n - 1 - drop++];
                c->pruning = true;
                count--;
                bytes -= c->kept;
        }
        for (command **pp = &m->commands; *pp && drop;) {
                command *c = *pp;
                if (!c->pruning) {
                        pp = &c->next;
                        continue;
                }
                *pp = c->next;
                m->n_commands--;
                drop--;
                /* Only now: until a command leaves this table its exit
                 * stays with init too, so a daemon killed at any moment
                 * (before it read the exit event, or after) hears it again
                 * from init after the restart (agent.h "ack"). */
                send_ack(c->sess, c->agent_id);
                command_free(c);
        }
}

/* ---- flow control -------------------------------------------------------- */

/* Output bytes of one command init may send ahead of the daemon's credit:
 * what one stalled client can make the daemon queue beyond its
 * connection's high-water mark (rpc.h), and enough in flight that a
 * reading client never waits on a round trip. */
#define COMMAND_WINDOW (1u << 20)
/* Credit goes back in pieces of at least this many bytes (one packet per
 * 64 KiB chunk of output or so, not one per line), all of it once the
 * client drains or leaves. Below COMMAND_WINDOW, so a window never stays
 * full for a credit held back here. */
#define CREDIT_BATCH (128u * 1024)

/* The most output of a command init may have sent and the daemon not yet
 * credited (agent.h AGENT_WINDOW_SLACK): init's own count of what is not
 * credited is never below the daemon's, and an init that keeps the window
 * never lets its own pass this. */
#define OUTPUT_CAP ((uint64_t) COMMAND_WINDOW + AGENT_WINDOW_SLACK)

/* While c streams to a connection that is congested, its credit waits. */
static bool credit_held(const command *c) {
        return c->conn && rpc_conn_is_open(c->conn) && rpc_conn_is_congested(c->conn);
}

/* Gives c's owed credit back to init (agent.h "credit"), once it is
 * CREDIT_BATCH, or whatever it is with `all`. */
static void send_credit(command *c, bool all) {
        if (!c->window || !c->credit_owed || c->exited || !c->sess || c->sess->agent_closed ||
            (!all && c->credit_owed < CREDIT_BATCH))
                return;
        cJSON *op = cJSON_CreateObject();
        if (!op)
                return;
        cJSON_AddStringToObject(op, "op", "credit");
        cJSON_AddNumberToObject(op, "id", c->agent_id);
        cJSON_AddNumberToObject(op, "bytes", (double)c->credit_owed);
        if (agent_send(c->sess, op) >= 0)
                c->credit_owed = 0;
}

static void on_conn_drained(rpc_conn *conn, void *userdata) {
        manager *m = userdata;
        for (command *c = m->n_conn_commands ? m->commands : NULL; c; c = c->next)
                if (c->conn == conn)
                        send_credit(c, true);
        fs_watch_conn_drained(conn);
}

/* ---- events from sandbox-init ------------------------------------------ */

void command_on_started(session *s, unsigned id, pid_t pid, uint64_t window) {
        command *c = find_by_agent_id(s, id);
        if (!c)
                return;
        c->started = true;
        /* The window is the one this daemon granted in the run, whatever
         * init's answer says; an init that keeps windows (an earlier
         * answer had one) and answers without is held to it too. */
        if (window)
                s->keeps_windows = true;
        c->window = window || s->keeps_windows ? COMMAND_WINDOW : 0;
        /* Names the command of a request still waiting, so a client with
         * several runs in flight on one connection can tell their output
         * notifications apart before any answer came. */
        if (c->run_req && c->run_req->id && c->conn && rpc_conn_is_open(c->conn)) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "cmdId", c->cmd_id);
                cJSON_AddItemToObject(p, "requestId", cJSON_Duplicate(c->run_req->id, true));
                rpc_notify(c->conn, "command.started", p);
        }
        if (c->detached && c->run_req) {
                rpc_reply(c->run_req, command_json(c));
                c->run_req = NULL;
        }
}

void command_on_output(session *s, unsigned id, const char *stream, const char *b64) {
        command *c = find_by_agent_id(s, id);
        if (!c || !stream || !b64)
                return;
        bool is_err = streq(stream, "stderr");
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        if (core_base64_decode(b64, &data, &len) < 0)
                return;
        if (c->window_overrun || (c->window && c->credit_owed + len > OUTPUT_CAP)) {
                /* Past what an init that keeps the window sends: a forged
                 * init's. A protocol error: this command's stream ends
                 * here (nothing more of it logged, passed on or credited);
                 * the channel and every other command go on. */
                if (!c->window_overrun) {
                        char safe[TEXT_LOG_BUF];
                        log_warning("sandbox '%s': sandbox-init sent output of command %s past the window the daemon "
                                    "granted (%" PRIu64 " bytes not credited, at most %" PRIu64 "); its output is "
                                    "dropped from here on", text_for_log(s->sb->name, safe, sizeof(safe)), c->cmd_id,
                                    c->credit_owed + len, OUTPUT_CAP);
                        c->window_overrun = true;
                }
                return;
        }
        log_append(c, is_err ? &c->err : &c->out, data, len);
        c->log_replay = false;
        if (c->conn && rpc_conn_is_open(c->conn)) {
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "cmdId", c->cmd_id);
                cJSON_AddStringToObject(p, "stream", is_err ? "stderr" : "stdout");
                cJSON_AddStringToObject(p, "data", b64);
                rpc_notify(c->conn, "command.output", p);
        }
        c->credit_owed += len;
        if (!credit_held(c))
                send_credit(c, false);
}

static void command_finish(command *c, int code, const char *error) {
        if (c->exited)
                return;
        c->exited = true;
        c->exit_code = code;
        c->ended_ms = core_now_ms();
        c->timeout_src = sd_event_source_disable_unref(c->timeout_src);
        bool open = c->conn && rpc_conn_is_open(c->conn);
        if (error) {
                /* An exec failure reads like a shell's: on stderr, exit 126/127. */
                _cleanup_free_ char *line = NULL;
                if (asprintf(&line, "sandboxd: %s\n", error) >= 0) {
                        log_append(c, &c->err, line, strlen(line));
                        _cleanup_free_ char *b64 = core_base64_encode(line, strlen(line));
                        if (open && b64) {
                                cJSON *p = cJSON_CreateObject();
                                cJSON_AddStringToObject(p, "cmdId", c->cmd_id);
                                cJSON_AddStringToObject(p, "stream", "stderr");
                                cJSON_AddStringToObject(p, "data", b64);
                                rpc_notify(c->conn, "command.output", p);
                        }
                }
        }
        if (open)
                rpc_notify(c->conn, "command.exit", finished_json(c));
        if (c->run_req && c->cancelled) {
                rpc_reply_error(c->run_req, RPC_REQUEST_CANCELLED, "cancelled", NULL,
                                "command %s cancelled: its process group was killed (exit code %d)", c->cmd_id, code);
                c->run_req = NULL;
        } else if (c->run_req) {
                rpc_reply(c->run_req, c->detached ? command_json(c) : finished_json(c));
                c->run_req = NULL;
        }
        req_list w = req_list_take(&c->waiters);
        for (size_t i = 0; i < w.n; i++)
                rpc_reply(w.items[i], finished_json(c));
        free(w.items);
        if (c->conn) {
                rpc_conn_unref(c->conn);
                c->conn = NULL;
                c->sb->m->n_conn_commands--;
        }
}

/* Tells init it may forget command `id` of session s (agent.h "ack"). */
static void send_ack(session *s, unsigned id) {
        if (!s || s->agent_closed)
                return;
        cJSON *ack = cJSON_CreateObject();
        if (!ack)
                return;
        cJSON_AddStringToObject(ack, "op", "ack");
        cJSON_AddNumberToObject(ack, "id", id);
        (void)agent_send(s, ack);
}

void command_on_exit(session *s, unsigned id, int code, const char *error, const cJSON *usage) {
        command *c = find_by_agent_id(s, id);
        if (c && !c->exited)
                check_oom(c, code);
        if (c && !c->exited && cJSON_IsObject(usage))
                c->has_usage = usage_number(usage, "cpuMs", &c->usage_cpu_ms) &&
                               usage_number(usage, "memoryPeakBytes", &c->usage_mem_peak);
        if (c)
                command_finish(c, code, error);
        else
                /* Nothing here to keep it for: init may drop it now. */
                send_ack(s, id);
        prune_finished(s->sb->m);
}

static void listing_end(session *s);

void commands_session_gone(session *s) {
        listing_end(s);
        for (command *c = s->sb->m->commands; c; c = c->next)
                if (c->sess == s) {
                        command_finish(c, 128 + SIGKILL, NULL);
                        c->sess = NULL;
                }
}

void commands_session_left(session *s) {
        listing_end(s);
        for (command *c = s->sb->m->commands; c; c = c->next) {
                if (c->sess != s)
                        continue;
                c->sess = NULL;
                c->timeout_src = sd_event_source_disable_unref(c->timeout_src);
                if (c->run_req) {
                        rpc_reply_error(c->run_req, RPC_APP_ERROR, "unavailable", NULL,
                                        "sandboxd is shutting down; the command goes on (cmdId %s)", c->cmd_id);
                        c->run_req = NULL;
                }
                req_list w = req_list_take(&c->waiters);
                for (size_t i = 0; i < w.n; i++)
                        rpc_reply_error(w.items[i], RPC_APP_ERROR, "unavailable", NULL,
                                        "sandboxd is shutting down; the command goes on");
                free(w.items);
        }
}

void commands_forget_sandbox(manager *m, sandbox *sb) {
        for (command **pp = &m->commands; *pp;) {
                command *c = *pp;
                if (c->sb == sb) {
                        command_finish(c, 128 + SIGKILL, NULL);
                        *pp = c->next;
                        m->n_commands--;
                        command_free(c);
                } else
                        pp = &c->next;
        }
}

/* The caller of a command that was not detached went away: the command is
 * hung up (SIGHUP to its process group), as when a terminal closes, so an
 * interrupted client does not leave work running. Detached commands go on. */
void commands_conn_closed(manager *m, rpc_conn *conn) {
        /* Most connections that close have no command streaming to them
         * (every finished one let go of its connection): no walk of the
         * whole command table for each of them. */
        for (command *c = m->n_conn_commands ? m->commands : NULL; c; c = c->next)
                if (c->conn == conn) {
                        rpc_conn_unref(c->conn);
                        c->conn = NULL;
                        m->n_conn_commands--;
                        /* Its output goes to the log alone now. */
                        send_credit(c, true);
                        /* Not at daemon exit: the connections close
                         * before the sessions are left, and the command
                         * goes on for the next daemon (live restore). */
                        if (!c->detached && !c->exited && c->sess && !m->stopping) {
                                cJSON *op = cJSON_CreateObject();
                                cJSON_AddStringToObject(op, "op", "kill");
                                cJSON_AddNumberToObject(op, "id", c->agent_id);
                                cJSON_AddNumberToObject(op, "signal", SIGHUP);
                                agent_send(c->sess, op);
                        }
                }
}

static cJSON *drain_data(const command *c) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddBoolToObject(d, "completed", false);
        cJSON_AddStringToObject(d, "cmdId", c->cmd_id);
        return d;
}

void commands_drain(manager *m) {
        for (command *c = m->commands; c; c = c->next) {
                /* A detached run is answered once its command starts: soon. */
                if (c->run_req && !c->detached) {
                        rpc_reply_unavailable(c->run_req, drain_data(c),
                                              "sandboxd is stopping; command %s keeps running: once the daemon is back, "
                                              "call command.wait (or command.logs) with its cmdId", c->cmd_id);
                        c->run_req = NULL;
                }
                req_list w = req_list_take(&c->waiters);
                for (size_t i = 0; i < w.n; i++)
                        rpc_reply_unavailable(w.items[i], drain_data(c),
                                              "sandboxd is stopping; command %s keeps running: once the daemon is back, "
                                              "call command.wait again", c->cmd_id);
                free(w.items);
                /* Its caller has its answer: no more output to it (and no
                 * hang-up when that connection closes). */
                if (c->conn && !c->detached) {
                        rpc_conn_unref(c->conn);
                        c->conn = NULL;
                        m->n_conn_commands--;
                        send_credit(c, true);
                }
        }
        redo_list l = redo_list_take(&m->listing_waiters);
        for (size_t i = 0; i < l.n; i++)
                rpc_reply_error(l.reqs[i], RPC_APP_ERROR, "unavailable", NULL,
                                "sandboxd is stopping; try again once the daemon is back");
        redo_list_clear(&l);
        /* command.logs parked until a re-adopted init has handed its logs
         * back: a read that changed nothing, answered at once (an init that
         * never finishes the hand-over must not hold the daemon's stop). */
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                if (!sb->sess)
                        continue;
                l = redo_list_take(&sb->sess->logs_waiting);
                for (size_t i = 0; i < l.n; i++) {
                        cJSON *d = cJSON_CreateObject();
                        cJSON_AddBoolToObject(d, "completed", false);
                        rpc_reply_unavailable(l.reqs[i], d,
                                              "sandboxd is stopping before sandbox %s handed its command logs "
                                              "back; call command.logs again once the daemon is back", TEXT_Q(sb->name));
                }
                redo_list_clear(&l);
        }
}

/* ---- command.run ------------------------------------------------------- */

/* request.cancel of a command.run that waits for its command: SIGKILL to
 * the command's process group (init's "kill" op), and the run answers
 * -32800 once init reports the exit, so nothing of it runs on after the
 * answer. A detached run was answered at start and is not pending. */
static bool cancel_run(rpc_request *req, void *userdata) {
        (void)req;
        command *c = userdata;
        if (c->exited || c->detached || !c->sess || c->sess->agent_closed)
                return false;
        cJSON *op = cJSON_CreateObject();
        if (!op)
                return false;
        cJSON_AddStringToObject(op, "op", "kill");
        cJSON_AddNumberToObject(op, "id", c->agent_id);
        cJSON_AddNumberToObject(op, "signal", SIGKILL);
        if (agent_send(c->sess, op) < 0)
                return false;
        c->cancelled = true;
        return true;
}

static int on_command_timeout(sd_event_source *src, uint64_t usec, void *userdata) {
        command *c = userdata;
        if (c->sess && !c->exited) {
                c->timed_out = true;
                cJSON *op = cJSON_CreateObject();
                cJSON_AddStringToObject(op, "op", "kill");
                cJSON_AddNumberToObject(op, "id", c->agent_id);
                cJSON_AddNumberToObject(op, "signal", SIGKILL);
                agent_send(c->sess, op);
        }
        return 0;
}

/* The environment of a command: defaults for its user, then the sandbox's,
 * then the command's own (later ones win). */
static cJSON *build_env(const sandbox *sb, cJSON *cmd_env, bool sudo, bool tty) {
        cJSON *merged = cJSON_CreateObject();
        cJSON_AddStringToObject(merged, "PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        cJSON_AddStringToObject(merged, "HOME", sudo ? "/root" : "/home/sandbox");
        cJSON_AddStringToObject(merged, "USER", sudo ? "root" : "sandbox");
        cJSON_AddStringToObject(merged, "LOGNAME", sudo ? "root" : "sandbox");
        cJSON_AddStringToObject(merged, "LANG", "C.UTF-8");
        cJSON_AddStringToObject(merged, "HOSTNAME", sb->name);
        if (tty)
                cJSON_AddStringToObject(merged, "TERM", "xterm-256color");
        session_proxy_env(sb, merged);
        cJSON *layers[] = {sb->env, cmd_env};
        for (size_t i = 0; i < 2; i++) {
                cJSON *it;
                cJSON_ArrayForEach(it, layers[i]) {
                        cJSON_DeleteItemFromObjectCaseSensitive(merged, it->string);
                        cJSON_AddStringToObject(merged, it->string, it->valuestring);
                }
        }
        cJSON *list = cJSON_CreateArray();
        cJSON *it;
        cJSON_ArrayForEach(it, merged) {
                _cleanup_free_ char *kv = NULL;
                if (asprintf(&kv, "%s=%s", it->string, it->valuestring) >= 0)
                        cJSON_AddItemToArray(list, cJSON_CreateString(kv));
        }
        cJSON_Delete(merged);
        return list;
}

typedef struct run_params {
        const char *cmd, *cwd, *stdin_b64, *container;
        cJSON *args, *env;
        bool sudo, detached, tty;
        int64_t rows, cols, timeout_ms;
} run_params;

/* stdin of one request is at most what sandbox-init queues for a command
 * (agent.h AGENT_STDIN_MAX): more would be cut there, after the request
 * was answered. */
static int check_stdin_size(size_t n, const char *field, sb_error **ret_err) {
        if (n <= AGENT_STDIN_MAX)
                return 0;
        return sb_error_set(ret_err, -EINVAL, NULL, field,
                            "%s: %zu bytes is over the %u MiB a command's stdin takes at once; send it in parts "
                            "(command.write)", field, n, (unsigned)(AGENT_STDIN_MAX >> 20));
}

static int parse_run(rpc_request *req, manager *m, run_params *p, sb_error **ret_err) {
        int r;
        p->cwd = "/workspace";
        p->rows = 24;
        p->cols = 80;
        if ((r = rpc_param_string(req, "cmd", true, &p->cmd, ret_err)) < 0 ||
            (r = rpc_param_array(req, "args", false, &p->args, ret_err)) < 0 ||
            (r = rpc_param_string(req, "cwd", false, &p->cwd, ret_err)) < 0 ||
            (r = rpc_param_object(req, "env", false, &p->env, ret_err)) < 0 ||
            (r = rpc_param_bool(req, "sudo", &p->sudo, ret_err)) < 0 ||
            (r = rpc_param_bool(req, "detached", &p->detached, ret_err)) < 0 ||
            (r = rpc_param_bool(req, "tty", &p->tty, ret_err)) < 0 ||
            (r = rpc_param_string(req, "stdin", false, &p->stdin_b64, ret_err)) < 0 ||
            (r = rpc_param_string(req, "container", false, &p->container, ret_err)) < 0 ||
            (r = rpc_param_int(req, "rows", false, 1, 10000, &p->rows, ret_err)) < 0 ||
            (r = rpc_param_int(req, "cols", false, 1, 10000, &p->cols, ret_err)) < 0 ||
            (r = rpc_param_duration_ms(req, "timeoutMs", false, 1, (int64_t)m->cfg->max_timeout_ms,
                                       &p->timeout_ms, ret_err)) < 0)
                return r;
        if (!*p->cmd)
                return sb_error_set(ret_err, -EINVAL, NULL, "cmd", "cmd: must not be empty");
        if (!*p->cwd || p->cwd[0] != '/')
                return sb_error_set(ret_err, -EINVAL, NULL, "cwd", "cwd: must be an absolute path inside the sandbox");
        if ((r = limit_check_string(p->cmd, "cmd", LIMIT_CMD_BYTES, ret_err)) < 0 ||
            (r = limit_check_string(p->cwd, "cwd", LIMIT_CWD_BYTES, ret_err)) < 0 ||
            (r = limit_check_args(p->args, "args", ret_err)) < 0 ||
            (r = limit_check_map(p->env, "env", &limit_env, ret_err)) < 0)
                return r;
        if (p->stdin_b64) {
                _cleanup_free_ void *d = NULL;
                size_t n;
                if (core_base64_decode(p->stdin_b64, &d, &n) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, "stdin", "stdin: must be base64");
                if ((r = check_stdin_size(n, "stdin", ret_err)) < 0)
                        return r;
        }
        return 0;
}

/* Sends raw bytes to the command's stdin in agent-sized chunks. */
static void write_stdin(command *c, const void *data, size_t len) {
        for (size_t off = 0; off < len; off += AGENT_FS_CHUNK) {
                size_t n = len - off < AGENT_FS_CHUNK ? len - off : AGENT_FS_CHUNK;
                cJSON *op = cJSON_CreateObject();
                cJSON_AddStringToObject(op, "op", "write");
                cJSON_AddNumberToObject(op, "id", c->agent_id);
                _cleanup_free_ char *chunk = core_base64_encode((const char *)data + off, n);
                cJSON_AddStringToObject(op, "data", chunk ? chunk : "");
                agent_send(c->sess, op);
        }
}

static void send_stdin(command *c, const char *b64) {
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        if (core_base64_decode(b64, &data, &len) < 0)
                return;
        write_stdin(c, data, len);
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", "close_stdin");
        cJSON_AddNumberToObject(op, "id", c->agent_id);
        agent_send(c->sess, op);
}

static void add_meta(cJSON *op, const command *c);

static void method_run(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        run_params p = {0};
        if (parse_run(req, m, &p, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_require_unpaused(req, m, "sandbox", method_run);
        if (!sb)
                return;
        uid_t uid;
        gid_t gid;
        /* Fail closed: never run the sandbox user's command as some other
         * id (a session re-adopted after the account went away). */
        if (!p.sudo && userns_sandbox_user(sb, &uid, &gid) < 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", "userns",
                                "sandbox '%s' has no user namespace and no sandbox user: %s", sb->name,
                                m->plain_unavailable);
                return;
        }
        session *s = sb->sess;
        if (agent_input_refused(s, req, p.stdin_b64 ? strlen(p.stdin_b64) / 4 * 3 : 0))
                return;
        if (p.container && !container_find(s, p.container)) {
                rpc_reply_error(req, RPC_APP_ERROR, "not_found", "container", "container: sandbox '%s' has no container '%s'",
                                sb->name, p.container);
                return;
        }
        /* A paused container (container.pause) would hold the command
         * frozen before its exec, and the run with it: refused, as runc
         * refuses an exec into a paused container. */
        if (p.container && core_cgroup_frozen(container_cgroup(s, p.container)) > 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", "container",
                                "container: container '%s' of sandbox '%s' is paused; container.resume it first",
                                p.container, sb->name);
                return;
        }
        command *c = calloc(1, sizeof(*c));
        c->sb = sb;
        c->sess = s;
        c->container = p.container ? strdup(p.container) : NULL;
        c->agent_id = ++s->next_cmd_id;
        memcpy(c->cmd_id, "cmd-", 4);
        core_random_hex(c->cmd_id + 4, 16);
        c->cmd = strdup(p.cmd);
        c->cwd = strdup(p.cwd);
        if (!c->cmd || !c->cwd || set_args(c, p.args) < 0) {
                free(c->cmd);
                free(c->cwd);
                free(c);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        c->sudo = p.sudo;
        c->tty = p.tty;
        c->detached = p.detached;
        c->started_ms = core_now_ms();
        metrics_count_command(sb->name);
        note_oom_count(c);
        c->out = (ring){.cap = m->cfg->command_log_bytes};
        c->err = (ring){.cap = m->cfg->command_log_bytes};
        c->conn = rpc_conn_ref(req->conn);
        m->n_conn_commands++;
        c->run_req = req;
        c->next = m->commands;
        m->commands = c;
        keep_command(m, c);

        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", "run");
        cJSON_AddNumberToObject(op, "id", c->agent_id);
        cJSON *argv = cJSON_AddArrayToObject(op, "argv");
        cJSON_AddItemToArray(argv, cJSON_CreateString(p.cmd));
        cJSON *it;
        cJSON_ArrayForEach(it, p.args)
                cJSON_AddItemToArray(argv, cJSON_CreateString(it->valuestring));
        cJSON_AddItemToObject(op, "env", build_env(sb, p.env, p.sudo, p.tty));
        cJSON_AddStringToObject(op, "cwd", p.cwd);
        if (p.container)
                cJSON_AddStringToObject(op, "container", p.container);
        cJSON_AddNumberToObject(op, "uid", p.sudo ? 0 : uid);
        cJSON_AddNumberToObject(op, "gid", p.sudo ? 0 : gid);
        cJSON_AddBoolToObject(op, "tty", p.tty);
        cJSON_AddNumberToObject(op, "rows", (double)p.rows);
        cJSON_AddNumberToObject(op, "cols", (double)p.cols);
        /* stdin stays open for command.write only when the caller can still
         * write: a detached command without inline stdin, or a tty. */
        cJSON_AddBoolToObject(op, "stdin", p.stdin_b64 || p.detached || p.tty);
        /* init keeps the same bounded log (agent.h "log"): it outlives this
         * daemon, and the next one gets the output back from it. */
        cJSON_AddNumberToObject(op, "logBytes", (double)m->cfg->command_log_bytes);
        /* The fault build can ask init for a larger window than the daemon
         * holds it to, as a forged init would take (test_flow.py). */
        cJSON_AddNumberToObject(op, "window", (double)core_fault_tunable("SANDBOXD_FAULT_INIT_WINDOW", COMMAND_WINDOW));
        add_meta(op, c);
        int r = agent_send(s, op);
        if (r < 0) {
                /* The request limits (limits.h) keep a run packet below
                 * AGENT_MAX_PACKET; this says so should that ever fail. */
                command_finish(c, 255, r == -EMSGSIZE ? "the command with its environment is over the agent packet limit"
                                                      : "could not reach sandbox-init");
                return;
        }
        if (p.stdin_b64)
                send_stdin(c, p.stdin_b64);
        if (!p.detached)
                rpc_request_set_cancel(req, cancel_run, c);
        if (p.timeout_ms > 0)
                sd_event_add_time_relative(m->event, &c->timeout_src, CLOCK_MONOTONIC,
                                           (uint64_t)p.timeout_ms * 1000, 1000, on_command_timeout, c);
}

/* ---- live restore --------------------------------------------------------- */

/* The command as init keeps it for a restarted daemon (agent.h "meta"): what
 * command.get shows, kept opaque by init. Its output so far is not in it:
 * init replays its own copy of the logs after the list (command_on_log). */
static void add_meta(cJSON *op, const command *c) {
        cJSON *m = cJSON_CreateObject();
        if (!m)
                return;
        cJSON_AddStringToObject(m, "cmdId", c->cmd_id);
        cJSON_AddStringToObject(m, "cmd", c->cmd);
        cJSON_AddItemToObject(m, "args", args_json(c));
        cJSON_AddStringToObject(m, "cwd", c->cwd);
        cJSON_AddBoolToObject(m, "sudo", c->sudo);
        cJSON_AddBoolToObject(m, "tty", c->tty);
        cJSON_AddBoolToObject(m, "detached", c->detached);
        cJSON_AddNumberToObject(m, "startedMs", (double)c->started_ms);
        if (c->container)
                cJSON_AddStringToObject(m, "container", c->container);
        char *text = cJSON_PrintUnformatted(m);
        if (text && strlen(text) > 4096) {
                /* Init keeps at most 4096 bytes (agent.h): without its
                 * arguments a long command is still known after a restart,
                 * its id, exit status and the rest intact. */
                free(text);
                cJSON_ReplaceItemInObject(m, "args", cJSON_CreateArray());
                text = cJSON_PrintUnformatted(m);
        }
        cJSON_Delete(m);
        if (text && strlen(text) <= 4096)
                cJSON_AddStringToObject(op, "meta", text);
        free(text);
}

/* One entry of init's list → a command of session s, unless its id is
 * already known. The entry comes from inside the sandbox (root there can
 * speak for init): it is parsed with bounds and only names a command of
 * this same session. */
static void restore_one(session *s, const cJSON *e) {
        manager *m = s->sb->m;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "meta"));
        if (!cJSON_IsNumber(id) || id->valuedouble < 1 || id->valuedouble > 4294967295.0 || !text)
                return;
        unsigned aid = (unsigned)id->valuedouble;
        if (aid > s->next_cmd_id)
                s->next_cmd_id = aid;
        cJSON *meta = cJSON_Parse(text);
        const char *cmd_id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "cmdId"));
        const char *cmd = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "cmd"));
        const char *cwd = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "cwd"));
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(meta, "args");
        const cJSON *started = cJSON_GetObjectItemCaseSensitive(meta, "startedMs");
        command *c = NULL;
        if (!cmd_id || strlen(cmd_id) != 20 || strncmp(cmd_id, "cmd-", 4) || !cmd || !cwd || !cJSON_IsArray(args) ||
            find_by_agent_id(s, aid) || manager_find_command(m, cmd_id) || !(c = calloc(1, sizeof(*c)))) {
                cJSON_Delete(meta);
                return;
        }
        c->sb = s->sb;
        c->sess = s;
        c->agent_id = aid;
        memcpy(c->cmd_id, cmd_id, 21);
        c->cmd = strdup(cmd);
        c->cwd = strdup(cwd);
        if (!c->cmd || !c->cwd || set_args(c, args) < 0) {
                free(c->cmd);
                free(c->cwd);
                free(c);
                cJSON_Delete(meta);
                return;
        }
        c->sudo = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "sudo"));
        c->tty = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(meta, "tty"));
        /* Only a name of one of this session's containers (the meta is
         * the sandbox's to forge). */
        const char *ctr_name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "container"));
        if (ctr_name && container_find(s, ctr_name))
                c->container = strdup(ctr_name);
        c->detached = true; /* whoever waited for it went with the old daemon */
        c->started = true;
        /* Bounded before the conversion (an out-of-range double is undefined
         * behaviour): 2^53 ms is far beyond any real time. */
        c->started_ms = cJSON_IsNumber(started) && started->valuedouble > 0 && started->valuedouble < 9007199254740992.0
                                ? (uint64_t)started->valuedouble
                                : core_now_ms();
        note_oom_count(c); /* adopted: a kill before adoption is not seen */
        c->out = (ring){.cap = m->cfg->command_log_bytes};
        c->err = (ring){.cap = m->cfg->command_log_bytes};
        c->log_replay = true;
        c->next = m->commands;
        m->commands = c;
        keep_command(m, c);
        cJSON_Delete(meta);
}

void command_on_log(session *s, unsigned id, const cJSON *msg) {
        command *c = find_by_agent_id(s, id);
        const char *stream = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "stream"));
        const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(msg, "data"));
        /* Only for a command this daemon restored from init's list, and
         * only before its own output reaches it (init sends every log
         * right after the list): a log never doubles what was relayed. */
        if (!c || !c->log_replay || !stream || !b64)
                return;
        ring *r = streq(stream, "stderr") ? &c->err : &c->out;
        /* The first piece says where the kept bytes begin in the stream:
         * command.logs gives the same offsets as before the restart. */
        const cJSON *offset = cJSON_GetObjectItemCaseSensitive(msg, "offset");
        if (cJSON_IsNumber(offset) && offset->valuedouble >= 0 && offset->valuedouble < 9007199254740992.0 &&
            !r->total && !r->len)
                r->total = (uint64_t)offset->valuedouble;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "evicted"))) {
                if (!c->log_evicted)
                        drop_logs(s->sb->m, c);
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "truncated")))
                        c->out.truncated = c->err.truncated = true;
                return;
        }
        const cJSON *cap = cJSON_GetObjectItemCaseSensitive(msg, "cap");
        /* The cap the old daemon had cut it to for the budget, if lower. */
        if (cJSON_IsNumber(cap) && cap->valuedouble >= LOG_SHARE_MIN && cap->valuedouble < (double)r->cap) {
                size_t before = r->alloc;
                ring_shrink(r, (size_t)cap->valuedouble);
                s->sb->m->log_bytes = s->sb->m->log_bytes - before + r->alloc;
        }
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(msg, "truncated")))
                r->truncated = true;
        _cleanup_free_ void *data = NULL;
        size_t len = 0;
        if (core_base64_decode(b64, &data, &len) < 0)
                return;
        log_append(c, r, data, len);
        /* Killed with part of init's logs in: init still has all of them
         * and replays them whole to the next daemon. */
        core_fault("adopt.logs_replaying");
}

static void method_logs(rpc_request *req, void *userdata);

void commands_logs_replayed(session *s) {
        s->logs_replaying = false;
        redo_list l = redo_list_take(&s->logs_waiting);
        for (size_t i = 0; i < l.n; i++)
                l.fns[i](l.reqs[i], s->sb->m);
        redo_list_clear(&l);
}

/* ---- the wait for re-adopted sessions' command lists ------------------- */

/* How long requests naming an unknown cmdId wait, after the start, for
 * the command lists of re-adopted sessions (an init that never answers). */
#define LISTING_WAIT_MS 10000

/* Runs the parked requests again (they find their command now, or answer
 * not_found), or at daemon exit answers them `unavailable`. */
static void listing_release(manager *m) {
        redo_list l = redo_list_take(&m->listing_waiters);
        for (size_t i = 0; i < l.n; i++)
                if (m->stopping)
                        rpc_reply_error(l.reqs[i], RPC_APP_ERROR, "unavailable", NULL,
                                        "sandboxd is shutting down; try again with the next one");
                else
                        l.fns[i](l.reqs[i], m);
        redo_list_clear(&l);
}

static int on_listing_timeout(sd_event_source *src, uint64_t usec, void *userdata) {
        manager *m = userdata;
        log_warning("%u re-adopted session(s) did not list their commands within %d s; "
                    "their commands are unknown until they do", m->n_listing, LISTING_WAIT_MS / 1000);
        m->listing_timer = sd_event_source_disable_unref(m->listing_timer);
        m->listing_over = true;
        listing_release(m);
        return 0;
}

void commands_listing_begin(session *s) {
        manager *m = s->sb->m;
        if (s->listing)
                return;
        s->listing = true;
        m->n_listing++;
        if (!m->listing_timer && !m->listing_over &&
            sd_event_add_time_relative(m->event, &m->listing_timer, CLOCK_MONOTONIC,
                                       (uint64_t)LISTING_WAIT_MS * 1000, 0, on_listing_timeout, m) < 0)
                m->listing_over = true; /* no bound on the wait: do not wait */
}

static void listing_end(session *s) {
        manager *m = s->sb->m;
        if (!s->listing)
                return;
        s->listing = false;
        if (--m->n_listing > 0)
                return;
        m->listing_timer = sd_event_source_disable_unref(m->listing_timer);
        listing_release(m);
}

void commands_listing_free(manager *m) {
        m->listing_timer = sd_event_source_disable_unref(m->listing_timer);
        m->listing_over = true;
        bool stopping = m->stopping;
        m->stopping = true;
        listing_release(m);
        m->stopping = stopping;
}

void commands_restore(session *s, const cJSON *list) {
        const cJSON *e;
        /* Until init's logs are all in, command.logs of its commands waits
         * (method_logs): an answer now would lack what came before. */
        s->logs_replaying = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(list, "logs"));
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(list, "commands"))
                restore_one(s, e);
        listing_end(s);
}

/* ---- the other command.* methods ---------------------------------------- */

/* The command req's cmdId names; answers req itself when there is none.
 * While re-adopted sessions have not listed their commands yet, an unknown
 * cmdId may be one of theirs: req is parked and `redo` runs it again once
 * they have (commands_listing_begin), and NULL is returned. */
static command *lookup_command(rpc_request *req, manager *m, rpc_handler redo) {
        _cleanup_error_ sb_error *err = NULL;
        const char *id = NULL;
        if (rpc_param_string(req, "cmdId", true, &id, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        command *c = manager_find_command(m, id);
        if (!c && m->n_listing > 0 && !m->listing_over && redo_list_add(&m->listing_waiters, req, redo) == 0)
                return NULL;
        if (!c)
                reply_not_found(req, "command", id);
        return c;
}

/* A command that can still take input; replies itself when not. */
static command *lookup_live(rpc_request *req, manager *m, rpc_handler redo) {
        command *c = lookup_command(req, m, redo);
        if (c && (c->exited || !c->sess)) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "command %s has already exited", c->cmd_id);
                return NULL;
        }
        return c;
}

typedef struct write_op {
        rpc_request *req;
        char *cmd_id;
} write_op;

/* sandbox-init's answer to an acked write (agent.h "write"): it took all
 * of it or none. Its message is not relayed (init is the sandbox's): the
 * errno picks the daemon's own. */
static void write_done(session *s, cJSON *result, int err, const char *message, void *userdata) {
        (void)s, (void)result, (void)message;
        write_op *op = userdata;
        if (err == -ENOBUFS)
                rpc_reply_error(op->req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "command %s is not reading its stdin: %u MiB of it wait already, the most kept for "
                                "one command; nothing of this write was taken, write it again once the command has "
                                "read some", op->cmd_id, (unsigned)(AGENT_STDIN_MAX >> 20));
        else if (err == -EPIPE)
                rpc_reply_error(op->req, RPC_APP_ERROR, "failed", NULL,
                                "the stdin of command %s is closed; nothing of this write was taken", op->cmd_id);
        else if (err == -ESHUTDOWN)
                rpc_reply_error(op->req, RPC_APP_ERROR, "sandbox_stopped", NULL,
                                "command %s: the sandbox stopped; nothing of this write was taken", op->cmd_id);
        else if (err < 0)
                rpc_reply_error(op->req, RPC_APP_ERROR, "failed", NULL, "command %s has already exited",
                                op->cmd_id);
        else
                rpc_reply(op->req, NULL);
        free(op->cmd_id);
        free(op);
}

/* One write whose answer says whether init queued it (agent.h "write"):
 * chunks back to back, "total" on the first, "req" on the last, so that
 * init takes the whole write or none and the client hears which. */
static int write_stdin_acked(command *c, rpc_request *req, const void *data, size_t len) {
        size_t off = 0;
        for (;;) {
                size_t n = len - off < AGENT_FS_CHUNK ? len - off : AGENT_FS_CHUNK;
                bool last = off + n >= len;
                cJSON *op = cJSON_CreateObject();
                _cleanup_free_ char *chunk = core_base64_encode((const char *)data + off, n);
                if (!op || !chunk) {
                        cJSON_Delete(op);
                        return -ENOMEM;
                }
                cJSON_AddStringToObject(op, "op", "write");
                cJSON_AddNumberToObject(op, "id", c->agent_id);
                cJSON_AddStringToObject(op, "data", chunk);
                cJSON_AddBoolToObject(op, "acked", true);
                if (off == 0)
                        cJSON_AddNumberToObject(op, "total", (double)len);
                if (!last) {
                        int r = agent_send(c->sess, op);
                        if (r < 0)
                                return r;
                        off += n;
                        continue;
                }
                write_op *w = calloc(1, sizeof(*w));
                if (!w || !(w->cmd_id = strdup(c->cmd_id))) {
                        free(w);
                        cJSON_Delete(op);
                        return -ENOMEM;
                }
                w->req = req;
                int r = agent_call(c->sess, op, write_done, w);
                if (r < 0) {
                        free(w->cmd_id);
                        free(w);
                }
                return r;
        }
}

static void method_write(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        const char *data = NULL;
        _cleanup_free_ void *raw = NULL;
        size_t len;
        if (rpc_param_string(req, "data", true, &data, &err) < 0 ||
            (core_base64_decode(data, &raw, &len) < 0 &&
             sb_error_set(&err, -EINVAL, NULL, "data", "data: must be base64") < 0) ||
            check_stdin_size(len, "data", &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        command *c = lookup_live(req, userdata, method_write);
        if (!c)
                return;
        /* A frozen init reads nothing: the write would wait, held in the
         * daemon, for a resume that may never come (as command.run and
         * fs.* are refused, sandbox.c sandbox_require_unpaused). */
        if (c->sess->paused) {
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", NULL,
                                "command %s: sandbox '%s' is paused (sandbox.pause); resume it (sandbox.resume) first",
                                c->cmd_id, c->sess->sb->name);
                return;
        }
        if (agent_input_refused(c->sess, req, len))
                return;
        /* An init of before acked writes queues what it can and drops
         * the rest, logging it; this daemon's own answers for each. */
        if (!c->sess->write_acks) {
                write_stdin(c, raw, len);
                rpc_reply(req, NULL);
                return;
        }
        int r = write_stdin_acked(c, req, raw, len);
        if (r < 0)
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "command %s: sending to sandbox-init: %s",
                                c->cmd_id, strerror(-r));
}

static void method_close_stdin(rpc_request *req, void *userdata) {
        command *c = lookup_live(req, userdata, method_close_stdin);
        if (!c)
                return;
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", "close_stdin");
        cJSON_AddNumberToObject(op, "id", c->agent_id);
        agent_send(c->sess, op);
        rpc_reply(req, NULL);
}

static void method_resize(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        int64_t rows = 0, cols = 0;
        if (rpc_param_int(req, "rows", true, 1, 10000, &rows, &err) < 0 ||
            rpc_param_int(req, "cols", true, 1, 10000, &cols, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        command *c = lookup_live(req, userdata, method_resize);
        if (!c)
                return;
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", "resize");
        cJSON_AddNumberToObject(op, "id", c->agent_id);
        cJSON_AddNumberToObject(op, "rows", (double)rows);
        cJSON_AddNumberToObject(op, "cols", (double)cols);
        agent_send(c->sess, op);
        rpc_reply(req, NULL);
}

/* Signal names as kill(1) takes them, with or without "SIG". */
static int parse_signal(cJSON *v) {
        static const struct { const char *name; int sig; } table[] = {
                {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"KILL", SIGKILL}, {"USR1", SIGUSR1},
                {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"ALRM", SIGALRM},
                {"WINCH", SIGWINCH},
        };
        if (!v || cJSON_IsNull(v))
                return SIGKILL;
        if (cJSON_IsNumber(v))
                return v->valuedouble >= 1 && v->valuedouble <= 64 && v->valuedouble == (int)v->valuedouble
                               ? (int)v->valuedouble : -1;
        if (!cJSON_IsString(v))
                return -1;
        const char *s = v->valuestring;
        if (!strncmp(s, "SIG", 3))
                s += 3;
        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (streq(s, table[i].name))
                        return table[i].sig;
        return -1;
}

static void method_kill(rpc_request *req, void *userdata) {
        int sig = parse_signal(cJSON_GetObjectItemCaseSensitive(req->params, "signal"));
        if (sig < 0) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "signal",
                                "signal: must be a number from 1 to 64 or a name like \"TERM\"");
                return;
        }
        command *c = lookup_command(req, userdata, method_kill);
        if (!c)
                return;
        if (!c->exited && c->sess) {
                cJSON *op = cJSON_CreateObject();
                cJSON_AddStringToObject(op, "op", "kill");
                cJSON_AddNumberToObject(op, "id", c->agent_id);
                cJSON_AddNumberToObject(op, "signal", sig);
                agent_send(c->sess, op);
        }
        rpc_reply(req, NULL);
}

static void method_wait(rpc_request *req, void *userdata) {
        command *c = lookup_command(req, userdata, method_wait);
        if (!c)
                return;
        if (c->exited)
                rpc_reply(req, finished_json(c));
        else
                req_list_add(&c->waiters, req);
}

static void method_get(rpc_request *req, void *userdata) {
        command *c = lookup_command(req, userdata, method_get);
        if (c)
                rpc_reply(req, command_json(c));
}

static void method_logs(rpc_request *req, void *userdata) {
        command *c = lookup_command(req, userdata, method_logs);
        if (!c)
                return;
        if (c->sess && c->sess->logs_replaying && redo_list_add(&c->sess->logs_waiting, req, method_logs) >= 0)
                return;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cmdId", c->cmd_id);
        _cleanup_free_ char *out = ring_base64(&c->out), *err = ring_base64(&c->err);
        cJSON_AddStringToObject(o, "stdout", out ? out : "");
        cJSON_AddStringToObject(o, "stderr", err ? err : "");
        cJSON_AddBoolToObject(o, "truncated", c->out.truncated || c->err.truncated);
        /* Where in each stream the bytes returned begin, so a client that
         * polls (sandboxctl command logs -f) prints each byte once. */
        cJSON_AddNumberToObject(o, "stdoutOffset", (double)(c->out.total - c->out.len));
        cJSON_AddNumberToObject(o, "stderrOffset", (double)(c->err.total - c->err.len));
        if (c->log_evicted)
                cJSON_AddBoolToObject(o, "evicted", true);
        rpc_reply(req, o);
}

/* The order of command.list: newest first, by start time then cmdId (ids
 * are random, so the id only breaks ties). Negative when a comes first. */
static int list_order(uint64_t a_ms, const char *a_id, uint64_t b_ms, const char *b_id) {
        if (a_ms != b_ms)
                return a_ms > b_ms ? -1 : 1;
        return -strcmp(a_id, b_id);
}

static int cmp_commands(const void *a, const void *b) {
        const command *x = *(command *const *)a, *y = *(command *const *)b;
        return list_order(x->started_ms, x->cmd_id, y->started_ms, y->cmd_id);
}

/* A command.list cursor: "<startedMs>.<cmdId>" of the last command of the
 * page before, so a page stays right when commands start or are forgotten
 * in between. Returns 0 or -EINVAL. */
#define LIST_CURSOR_BYTES 64
static int parse_list_cursor(const char *s, uint64_t *ret_ms, const char **ret_id) {
        char *end = NULL;
        if (!s[0] || s[0] < '0' || s[0] > '9')
                return -EINVAL;
        errno = 0;
        unsigned long long ms = strtoull(s, &end, 10);
        if (errno || *end != '.' || strlen(end + 1) != 20 || strncmp(end + 1, "cmd-", 4))
                return -EINVAL;
        *ret_ms = ms;
        *ret_id = end + 1;
        return 0;
}

/* command.list {name, limit?, cursor?}: the commands of one sandbox the
 * daemon still keeps (running ones, the last MAX_FINISHED_COMMANDS
 * finished ones of the daemon, those re-adopted after a restart), each as
 * command.get shows it, newest first, a page at a time: at most limit
 * commands and LIST_PAGE_BYTES of them. */
static void method_list(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *cursor = NULL, *after_id = NULL;
        uint64_t after_ms = 0;
        int64_t limit = 1000;
        if (rpc_param_string(req, "cursor", false, &cursor, &err) < 0 ||
            (cursor && limit_check_string(cursor, "cursor", LIST_CURSOR_BYTES, &err) < 0) ||
            rpc_param_int(req, "limit", false, 1, 1000, &limit, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (cursor && parse_list_cursor(cursor, &after_ms, &after_id) < 0) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "cursor",
                                "cursor: not a nextCursor of command.list; leave it out for the first page");
                return;
        }
        sandbox *sb = sandbox_lookup(req, m, "name");
        if (!sb)
                return;
        /* Re-adopted sessions have not listed their commands yet: answer
         * once they have, so the list lacks none of them. */
        if (m->n_listing > 0 && !m->listing_over && redo_list_add(&m->listing_waiters, req, method_list) == 0)
                return;
        size_t n = 0;
        for (command *c = m->commands; c; c = c->next)
                n += c->sb == sb;
        _cleanup_free_ command **v = calloc(n + 1, sizeof(*v));
        if (!v) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        n = 0;
        for (command *c = m->commands; c; c = c->next)
                if (c->sb == sb && (!after_id || list_order(c->started_ms, c->cmd_id, after_ms, after_id) > 0))
                        v[n++] = c;
        qsort(v, n, sizeof(*v), cmp_commands);
        cJSON *res = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(res, "commands");
        size_t shown = 0, bytes = 0;
        while (shown < n && shown < (size_t)limit && (!shown || bytes + v[shown]->kept <= LIST_PAGE_BYTES)) {
                bytes += v[shown]->kept;
                cJSON_AddItemToArray(arr, command_json(v[shown++]));
        }
        if (shown < n) {
                char next[LIST_CURSOR_BYTES];
                snprintf(next, sizeof(next), "%" PRIu64 ".%s", v[shown - 1]->started_ms, v[shown - 1]->cmd_id);
                cJSON_AddStringToObject(res, "nextCursor", next);
        } else
                cJSON_AddNullToObject(res, "nextCursor");
        rpc_reply(req, res);
}

void register_command_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "command.run", method_run, m);
        rpc_server_add_method(s, "command.write", method_write, m);
        rpc_server_add_method(s, "command.closeStdin", method_close_stdin, m);
        rpc_server_add_method(s, "command.resize", method_resize, m);
        rpc_server_add_method(s, "command.kill", method_kill, m);
        rpc_server_add_method(s, "command.wait", method_wait, m);
        rpc_server_add_method(s, "command.get", method_get, m);
        rpc_server_add_method(s, "command.logs", method_logs, m);
        rpc_server_add_method(s, "command.list", method_list, m);
        rpc_server_set_drain_handler(s, on_conn_drained, m);
}
