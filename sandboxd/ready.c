/* Readiness of a sandbox and its setup claim (sandbox.getOrCreate with
 * `setup: true`, sandbox.setReady; docs/API.md "Setup and readiness").
 *
 * A getOrCreate caller that brings setup work of its own (an SDK's
 * onCreate) asks for `setup`. The sandbox it creates starts not ready, and
 * that caller's connection holds the setup claim: it runs its setup and
 * then calls sandbox.setReady {ready: true}. Every other getOrCreate of the
 * name waits meanwhile, parked here, and is answered once the sandbox is
 * ready. The claim goes when its holder says the setup failed
 * (sandbox.setReady {ready: false}) or its connection closes (the process
 * died): the sandbox stays not ready and the next getOrCreate with `setup`,
 * a parked one first, takes the claim and runs its setup again. So a
 * caller never gets the sandbox before a setup succeeded, and nobody waits
 * on a setup that nobody runs.
 *
 * Readiness is stored in config.json ("ready": false, only while not
 * ready), so it survives daemon restarts; the claim is a connection's and
 * does not. Everything here runs on the event loop thread. */
#include <string.h>
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/text.h"

bool ready_setup_wanted(const rpc_request *req) {
        return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req->params, "setup"));
}

cJSON *ready_setup_json(const sandbox *sb) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddBoolToObject(o, "claimed", sb->setup_conn != NULL);
        cJSON_AddNumberToObject(o, "waiters", (double)sb->setup_waiters.n);
        return o;
}

static void claim(sandbox *sb, rpc_conn *c) {
        sb->setup_conn = rpc_conn_ref(c);
}

static void release(sandbox *sb) {
        rpc_conn_unref(sb->setup_conn);
        sb->setup_conn = NULL;
}

/* Removes req from sb's waiters; true when it was there. */
static bool waiters_remove(sandbox *sb, rpc_request *req) {
        req_list *l = &sb->setup_waiters;
        for (size_t i = 0; i < l->n; i++)
                if (l->items[i] == req) {
                        memmove(&l->items[i], &l->items[i + 1], (l->n - i - 1) * sizeof(*l->items));
                        l->n--;
                        return true;
                }
        return false;
}

/* request.cancel of a parked getOrCreate: answered -32800 on the next loop
 * iteration (a cancel hook may not answer its request itself, rpc.h). */
typedef struct cancelled_wait {
        rpc_request *req;
        sd_event_source *src;
} cancelled_wait;

static int answer_cancelled(sd_event_source *s, void *userdata) {
        cancelled_wait *w = userdata;
        rpc_reply_error(w->req, RPC_REQUEST_CANCELLED, "cancelled", NULL,
                        "cancelled (request.cancel) while waiting for the sandbox's setup");
        sd_event_source_disable_unref(s);
        free(w);
        return 0;
}

static bool cancel_wait(rpc_request *req, void *userdata) {
        sandbox *sb = userdata;
        cancelled_wait *w = calloc(1, sizeof(*w));
        if (!w)
                return false;
        w->req = req;
        if (sd_event_add_defer(sb->m->event, &w->src, answer_cancelled, w) < 0) {
                free(w);
                return false;
        }
        (void)sd_event_source_set_enabled(w->src, SD_EVENT_ONESHOT);
        waiters_remove(sb, req);
        return true;
}

/* The getOrCreate answer: {sandbox, created, differs, setup}. `differs`
 * was kept in req's params by method_get_or_create (a key no client can
 * send: params passed the schema before). */
void ready_reply(rpc_request *req, sandbox *sb, bool created, bool setup) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "sandbox", sandbox_to_json(sb));
        cJSON_AddBoolToObject(o, "created", created);
        cJSON *differs = cJSON_DetachItemFromObjectCaseSensitive(req->params, GET_OR_CREATE_DIFFERS);
        cJSON_AddItemToObject(o, "differs", differs ? differs : cJSON_CreateArray());
        cJSON_AddBoolToObject(o, "setup", setup);
        rpc_reply(req, o);
}

void ready_answer(rpc_request *req, sandbox *sb, bool created) {
        bool want = ready_setup_wanted(req);
        if (!sb->not_ready) {
                ready_reply(req, sb, created, false);
                return;
        }
        if (!sb->setup_conn) {
                /* Nobody sets it up: a caller with setup of its own takes
                 * the claim (unless its connection is already gone, when
                 * the answer is lost anyway); one without gets the sandbox
                 * as it is, `ready: false`, having nothing to wait for. */
                if (want && rpc_conn_is_open(req->conn)) {
                        claim(sb, req->conn);
                        log_info("sandbox '%s': setup claimed by %s", sb->name, rpc_conn_peer(req->conn));
                }
                ready_reply(req, sb, created, want && sb->setup_conn == req->conn);
                return;
        }
        /* Being set up by another caller: wait for it. */
        if (req_list_add(&sb->setup_waiters, req) < 0)
                return;
        rpc_request_set_cancel(req, cancel_wait, sb);
}

/* The claim went (failed setup, closed connection): the first waiter that
 * has setup of its own takes it over; waiters without setup get the
 * sandbox as it is when nobody takes it. */
static void handover(sandbox *sb) {
        req_list *l = &sb->setup_waiters;
        for (size_t i = 0; i < l->n; i++) {
                rpc_request *req = l->items[i];
                if (!ready_setup_wanted(req) || !rpc_conn_is_open(req->conn))
                        continue;
                waiters_remove(sb, req);
                rpc_request_set_cancel(req, NULL, NULL);
                claim(sb, req->conn);
                log_info("sandbox '%s': setup taken over by %s", sb->name, rpc_conn_peer(req->conn));
                ready_reply(req, sb, false, true);
                return;
        }
        req_list w = req_list_take(l);
        for (size_t i = 0; i < w.n; i++) {
                rpc_request_set_cancel(w.items[i], NULL, NULL);
                ready_reply(w.items[i], sb, false, false);
        }
        free(w.items);
}

static void answer_all(sandbox *sb) {
        req_list w = req_list_take(&sb->setup_waiters);
        for (size_t i = 0; i < w.n; i++) {
                rpc_request_set_cancel(w.items[i], NULL, NULL);
                ready_reply(w.items[i], sb, false, false);
        }
        free(w.items);
}

void ready_conn_closed(manager *m, rpc_conn *c) {
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                /* Its own waiters first: nobody reads their answers. */
                for (size_t i = sb->setup_waiters.n; i-- > 0;) {
                        rpc_request *req = sb->setup_waiters.items[i];
                        if (req->conn != c)
                                continue;
                        waiters_remove(sb, req);
                        rpc_request_set_cancel(req, NULL, NULL);
                        rpc_reply_error(req, RPC_APP_ERROR, "unavailable", NULL, "the connection closed");
                }
                if (sb->setup_conn == c) {
                        log_info("sandbox '%s': the connection holding its setup closed; the setup is "
                                 "released", sb->name);
                        release(sb);
                        /* At daemon exit every connection closes: no
                         * handover to one that is about to. */
                        if (!m->stopping)
                                handover(sb);
                }
        }
}

void ready_drain(manager *m) {
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                req_list w = req_list_take(&sb->setup_waiters);
                for (size_t i = 0; i < w.n; i++) {
                        rpc_request_set_cancel(w.items[i], NULL, NULL);
                        cJSON *d = cJSON_CreateObject();
                        cJSON_AddBoolToObject(d, "completed", false);
                        rpc_reply_unavailable(w.items[i], d,
                                              "sandboxd is stopping while sandbox '%s' waits for its setup; call "
                                              "getOrCreate again once the daemon is back", TEXT_Q(sb->name));
                }
                free(w.items);
        }
}

void ready_sandbox_gone(sandbox *sb) {
        release(sb);
        req_list w = req_list_take(&sb->setup_waiters);
        for (size_t i = 0; i < w.n; i++) {
                rpc_request_set_cancel(w.items[i], NULL, NULL);
                rpc_reply_error(w.items[i], RPC_APP_ERROR, "not_found", NULL,
                                "sandbox '%s' was deleted while it waited for its setup", TEXT_Q(sb->name));
        }
        free(w.items);
}

/* sandbox.setReady {name, ready}: see the top of the file. */
static void method_set_ready(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        bool ready = false;
        if (!cJSON_GetObjectItemCaseSensitive(req->params, "ready")) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "ready",
                                "ready: required (true: the setup succeeded; false: it failed)");
                return;
        }
        if (rpc_param_bool(req, "ready", &ready, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_lookup(req, m, "name");
        if (!sb)
                return;
        if (sb->deleting) {
                reply_not_found(req, "sandbox", sb->name);
                return;
        }
        /* A claim held by another connection is that caller's to end:
         * `ready: false` from anyone else changes nothing. */
        bool holder = sb->setup_conn && sb->setup_conn == req->conn;
        if (!ready && sb->setup_conn && !holder) {
                rpc_reply(req, sandbox_to_json(sb));
                return;
        }
        if (sb->not_ready == !ready) {
                /* Nothing to store. */
        } else {
                sb->not_ready = !ready;
                if (sandbox_save_config(sb, NULL, &err) < 0) {
                        sb->not_ready = ready;
                        rpc_reply_sb_error(req, err);
                        return;
                }
        }
        if (ready) {
                if (sb->setup_conn)
                        log_info("sandbox '%s': setup done", sb->name);
                release(sb);
                answer_all(sb);
        } else if (holder) {
                log_info("sandbox '%s': setup failed; released", sb->name);
                release(sb);
                handover(sb);
        }
        rpc_reply(req, sandbox_to_json(sb));
}

void register_ready_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "sandbox.setReady", method_set_ready, m);
}
