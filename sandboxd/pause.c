/* sandbox.pause and sandbox.resume: the running session's cgroup frozen
 * and thawed (cgroup v2 cgroup.freeze, else the v1 freezer; Documentation/
 * admin-guide/cgroup-v2.rst "Core Interface Files", cgroup-v1/
 * freezer-subsystem.rst), as containerd's Pause and Resume of a task.
 *
 * The freeze is done on the event loop: it waits for the kernel to report
 * the cgroup frozen (milliseconds; at most 2 s, then it is undone and
 * the call fails), and being on the loop it can never interleave with a
 * snapshot's or fork's own freeze and thaw on their worker thread: both
 * are refused while one of those is in flight (sb->capturing), and a
 * capture started while paused keeps the session frozen (snapshot.c). A
 * policy update is refused while paused (sandbox-netd is in the frozen
 * cgroup). A delete that kills at once kills a paused session as any
 * other (core_cgroup_kill_all thaws after the kill); a stop, and a
 * delete given the stop's grace, thaw it first (session.c
 * stop_with_grace). A daemon restart thaws it
 * (session.c, live restore) and it runs again. */
#include <errno.h>
#include <string.h>
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"

/* Freezes or thaws sb's session (on the loop); a freeze that fails is
 * undone. 0 or -errno (-ENOTSUP: no freezer). */
static int freeze_session(sandbox *sb, bool freeze) {
        int r = core_cgroup_freeze(sb->sess->cg, freeze);
        if (r < 0 && freeze)
                (void)core_cgroup_freeze(sb->sess->cg, false); /* never left half frozen */
        if (r >= 0) {
                sb->sess->paused = freeze;
                log_info("sandbox '%s': %s", sb->name, freeze ? "paused (cgroup frozen)" : "resumed (cgroup thawed)");
        }
        return r;
}

int session_pause_at_expiry(sandbox *sb) {
        session *s = sb->sess;
        if (s->paused)
                return 0;
        if (sb->capturing) {
                /* A snapshot or fork holds the freezer: once it is done. */
                sd_event_source_set_time_relative(s->expire_src, 1000 * 1000);
                sd_event_source_set_enabled(s->expire_src, SD_EVENT_ONESHOT);
                return 0;
        }
        int r = freeze_session(sb, true);
        if (r < 0) {
                log_warning("sandbox '%s': timeout reached; pausing failed (%s), stopping instead", sb->name,
                            strerror(-r));
                return r;
        }
        log_info("sandbox '%s': timeout reached; paused (onTimeout pause)", sb->name);
        return 0;
}

static void method_pause_resume(rpc_request *req, manager *m, bool freeze) {
        sandbox *sb = sandbox_require_running(req, m, "name", NULL);
        if (!sb)
                return;
        if (sb->capturing) {
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", "name",
                                "sandbox '%s': a snapshot or fork of it is being taken; try again in a moment",
                                sb->name);
                return;
        }
        if (sb->sess->paused == freeze) {
                rpc_reply(req, sandbox_to_json(sb)); /* already so */
                return;
        }
        int r = freeze_session(sb, freeze);
        if (r == -ENOTSUP) {
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", "name",
                                "sandbox '%s': this host has no cgroup freezer (neither cgroup.freeze nor the "
                                "v1 freezer controller)", sb->name);
                return;
        }
        if (r < 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "sandbox '%s': %s its cgroup: %s", sb->name,
                                freeze ? "freeze" : "thaw", strerror(-r));
                return;
        }
        /* Resumed past its expiry (paused by it, onTimeout "pause"): a
         * whole timeout from now, as a new session would have. */
        uint64_t now = core_now_ms();
        if (!freeze && sb->expires_ms <= now) {
                sb->expires_ms = now + sb->timeout_ms;
                (void)restore_save_record(sb->sess);
                sd_event_source_set_time_relative(sb->sess->expire_src, sb->timeout_ms * 1000);
                sd_event_source_set_enabled(sb->sess->expire_src, SD_EVENT_ONESHOT);
        }
        rpc_reply(req, sandbox_to_json(sb));
}

static void method_pause(rpc_request *req, void *userdata) {
        method_pause_resume(req, userdata, true);
}

static void method_resume(rpc_request *req, void *userdata) {
        method_pause_resume(req, userdata, false);
}

void register_pause_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "sandbox.pause", method_pause, m);
        rpc_server_add_method(s, "sandbox.resume", method_resume, m);
}
