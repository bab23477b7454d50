/* Layers, snapshots and forks.
 *
 * A sandbox's filesystem is its own upper directory over a stack of
 * immutable layers (layers/<id>/, former upper directories) over the
 * runtime. Capturing a sandbox turns its current upper into a new layer:
 *   - stopped: the upper directory is renamed into layers/ and the sandbox
 *     continues on a fresh empty upper — O(1) in the size of its files;
 *   - running: the session is frozen (cgroup freezer) so the copy is
 *     consistent, the upper is copied (libarchive, xattrs and whiteouts
 *     kept), and the session thawed — its commands keep running;
 *   - its disk in the storage pool (libcore/pool.h), running or stopped:
 *     a read-only snapshot of its subvolume is the layer (frozen around it
 *     when running), O(1) in the bytes, and the sandbox keeps its upper.
 * A fork is a new sandbox on [captured layer, source's layers...]; a
 * snapshot is a record of that chain plus the source's config. Nobody ever
 * writes to a layer, so forks and snapshots never share writable state.
 * A layer is removed when no sandbox and no snapshot refers to it.
 *
 * Expiration: a snapshot taken with `expiration` (ms) is deleted by a timer
 * on the event loop once expiresAt passes (and at start for those that
 * passed while the daemon was down). A sandbox "stands on" a snapshot when
 * the snapshot's whole layer chain is the bottom of its own (it was created
 * from it, or is the stopped sandbox it was taken of); such a snapshot is
 * only marked expired, can no longer be created from, and goes once the
 * last of those sandboxes is deleted. */
#include <dirent.h>
#include <linux/ioprio.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include "libcore/copy.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "libcore/diskimg.h"
#include "libcore/pool.h"
#include "sandboxd/internal.h"
#include "sandboxd/limits.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"
#include "sandboxd/worker.h"

/* overlayfs takes at most 500 lower layers, and the whole lowerdir string
 * must fit in a page; beyond this a capture is refused. */
#define MAX_LAYERS 64

/* Longest expiration accepted by sandbox.snapshot (docs/API.md): a year;
 * longer-lived snapshots are taken without one and deleted by hand. */
#define MAX_EXPIRATION_MS (365LL * 24 * 3600 * 1000)
/* An expired snapshot a sandbox stands on is looked at again this often,
 * besides right after each sandbox deletion (layers_collect). */
#define HELD_RECHECK_MS (60 * 1000)

char *layer_dir(const manager *m, const char *id, bool files) {
        /* A layer captured from a pool sandbox is a read-only subvolume
         * of the pool whose upper/ holds its files (libcore/pool.h); every
         * other one a directory of layers/. */
        char *home = core_pool_layer_home(id), *p = NULL;
        if (home) {
                if (!files)
                        return home;
                if (asprintf(&p, "%s/upper", home) < 0)
                        p = NULL;
                free(home);
                return p;
        }
        return asprintf(&p, "%s/%s", m->layers_dir, id) < 0 ? NULL : p;
}

char *sandbox_lowerdir(const sandbox *sb) {
        manager *m = sb->m;
        _cleanup_free_ char *runtime = runtime_dir(m, sb->runtime ? sb->runtime : "host");
        if (!runtime)
                return NULL;
        size_t n = strlen(runtime) + 1;
        int count = cJSON_GetArraySize(sb->layers), i = 0;
        _cleanup_free_ char **dirs = calloc((size_t)count + 1, sizeof(char *));
        if (!dirs)
                return NULL;
        cJSON *it;
        bool ok = true;
        cJSON_ArrayForEach(it, sb->layers) {
                dirs[i] = layer_dir(m, it->valuestring, true);
                ok = ok && dirs[i];
                n += dirs[i] ? strlen(dirs[i]) + 1 : 0;
                i++;
        }
        char *s = ok ? malloc(n) : NULL, *p = s;
        for (i = 0; s && i < count; i++)
                p += sprintf(p, "%s:", dirs[i]);
        if (s)
                strcpy(p, runtime);
        for (i = 0; i < count; i++)
                free(dirs[i]);
        return s;
}

snapshot *manager_find_snapshot(manager *m, const char *id) {
        for (snapshot *s = m->snapshots; s; s = s->next)
                if (streq(s->id, id))
                        return s;
        return NULL;
}

void snapshot_free(snapshot *s) {
        if (!s)
                return;
        free(s->sandbox);
        free(s->owner);
        cJSON_Delete(s->layers);
        cJSON_Delete(s->config);
        cJSON_Delete(s->tags);
        free(s);
}

void snapshots_free(manager *m) {
        m->snapshot_expire_src = sd_event_source_disable_unref(m->snapshot_expire_src);
        while (m->snapshots) {
                snapshot *s = m->snapshots;
                m->snapshots = s->next;
                snapshot_free(s);
        }
}

static bool chain_has(const cJSON *chain, const char *id) {
        const cJSON *it;
        cJSON_ArrayForEach(it, chain)
                if (cJSON_IsString(it) && streq(it->valuestring, id))
                        return true;
        return false;
}

/* A layer id as the daemon makes them (core_random_hex, 32 digits). Only
 * such a name is ever joined to the layers directory for a removal, so a
 * damaged record cannot make an rm -rf of a path elsewhere. */
static bool layer_id_ok(const char *id) {
        return id && strlen(id) == 32 && strspn(id, "0123456789abcdef") == 32;
}

bool layers_valid(const cJSON *layers) {
        const cJSON *it;
        if (!cJSON_IsArray(layers))
                return false;
        cJSON_ArrayForEach(it, layers)
                if (!layer_id_ok(cJSON_GetStringValue(it)))
                        return false;
        return true;
}

static bool layer_in_use(manager *m, const char *id) {
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                if (chain_has(sb->layers, id))
                        return true;
        for (snapshot *s = m->snapshots; s; s = s->next)
                if (chain_has(s->layers, id))
                        return true;
        return false;
}

bool layer_in_use_cb(const char *id, void *m) {
        return layer_in_use(m, id);
}

typedef struct rm_job {
        char **paths;
        size_t n;
        void (*done)(void *userdata);
        void *userdata;
} rm_job;

static void rm_work(void *userdata) {
        rm_job *j = userdata;
        for (size_t i = 0; i < j->n; i++) {
                int r = core_pool_layer_remove(j->paths[i]);
                if (r == -ENOTTY)
                        r = core_rm_rf(j->paths[i]);
                if (r < 0)
                        log_warning_errno(r, "remove layer %s: %m", j->paths[i]);
        }
}

static void rm_done(void *userdata) {
        rm_job *j = userdata;
        for (size_t i = 0; i < j->n; i++)
                free(j->paths[i]);
        free(j->paths);
        if (j->done)
                j->done(j->userdata);
        free(j);
}

static void arm_expiry(manager *m, uint64_t delay_ms);

void layers_collect(manager *m, cJSON *layers, void (*done)(void *userdata), void *userdata) {
        /* A sandbox left: an expired snapshot it stood on may go now. */
        for (snapshot *s = m->snapshots; s; s = s->next)
                if (s->expired) {
                        arm_expiry(m, 0);
                        break;
                }
        rm_job *j = calloc(1, sizeof(*j));
        if (!j) {
                if (done)
                        done(userdata);
                return;
        }
        j->done = done;
        j->userdata = userdata;
        j->paths = calloc((size_t)cJSON_GetArraySize(layers) + 1, sizeof(char *));
        cJSON *it;
        cJSON_ArrayForEach(it, layers)
                if (layer_id_ok(cJSON_GetStringValue(it)) && !layer_in_use(m, it->valuestring) &&
                    (j->paths[j->n] = layer_dir(m, it->valuestring, false)))
                        j->n++;
        if (!j->n || worker_submit(rm_work, rm_done, j) < 0) {
                rm_work(j);
                rm_done(j);
        }
}

/* ---- capture ------------------------------------------------------------- */

typedef void (*capture_cb)(manager *m, rpc_request *req, sandbox *sb, cJSON *chain, sb_error *err);
static void fork_captured(manager *m, rpc_request *req, sandbox *src, cJSON *chain, sb_error *err);

typedef struct capture_job {
        manager *m;
        sandbox *sb;
        rpc_request *req;
        capture_cb cb;
        const char *op;   /* "fork" or "snapshot": names its fault points */
        char id[33];
        char *upper, *dest;
        char *pool_dir;   /* the sandbox's directory when its disk is in the storage pool: a snapshot, no copy */
        core_cgroup *cg;  /* the session's, borrowed: the session outlives the job (deferred teardown) */
        int cancel;       /* CORE_CANCEL_REQUESTED once request.cancel asked (capture_cancel) */
        bool keep_frozen; /* paused (sandbox.pause, pause.c): stays frozen after the copy */
        bool precopy;     /* copied while it runs first, then frozen for what changed (capture_work) */
        bool started;     /* submitted to a worker (else waiting in `captures`) */
        sb_error *err;
        struct capture_job *next; /* in `captures` */
} capture_job;

/* Every capture not yet done, in the order asked. One capture of a sandbox
 * runs at a time: two would freeze and thaw the same cgroup under each
 * other (one's thaw ends the other's freeze: "freeze the sandbox:
 * Connection timed out", or a copy of a running sandbox). A later one
 * waits here until the one before it is done (capture_done). */
static capture_job *captures;

static void capture_work(void *userdata);
static void capture_done(void *userdata);

/* Submits j, which waited for the capture before it, to a worker. When it
 * was cancelled meanwhile, when its sandbox is being stopped or deleted (a
 * teardown deferred for the captures, start_teardown) or when the
 * submission fails, finishes it with that error at once instead. */
static void capture_start(capture_job *j) {
        j->started = true;
        if (__atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE) == CORE_CANCEL_REQUESTED) {
                /* It made nothing: capture_done answers "cancelled". */
                sb_error_set(&j->err, -ECANCELED, "cancelled", NULL, "cancelled");
                capture_done(j);
        } else if (j->sb->deferred_teardown) {
                sb_error_set(&j->err, -EBUSY, "unavailable", NULL, "sandbox '%s' is %s; try again in a moment",
                             j->sb->name, j->sb->deferred_remove ? "being deleted" : "stopping");
                capture_done(j);
        } else if (worker_submit(capture_work, capture_done, j) < 0) {
                sb_error_set(&j->err, -ENOMEM, NULL, NULL, "cannot start the copy");
                capture_done(j);
        }
}

/* request.cancel of a fork or snapshot while its copy runs: the copy stops
 * between entries, or, done already, its layer is removed (capture_done);
 * one still waiting for an earlier capture of its sandbox never freezes it
 * (capture_work). Always in time: nothing is recorded before capture_done,
 * which answers once the worker has thawed the sandbox and returned. */
static bool capture_cancel(rpc_request *req, void *userdata) {
        (void)req;
        capture_job *j = userdata;
        __atomic_store_n(&j->cancel, CORE_CANCEL_REQUESTED, __ATOMIC_RELEASE);
        return true;
}

static cJSON *chain_with(const char *id, const cJSON *below) {
        cJSON *c = cJSON_CreateArray();
        cJSON_AddItemToArray(c, cJSON_CreateString(id));
        const cJSON *it;
        cJSON_ArrayForEach(it, below)
                cJSON_AddItemToArray(c, cJSON_Duplicate(it, 1));
        return c;
}

/* Pre-copy (as live migration does): live passes of core_tree_sync()
 * while the sandbox runs, the first copying everything, each later one
 * what changed during the one before; another follows while the last one
 * rewrote more than this (bytes, entries) and less than the one before,
 * up to PRECOPY_LIVE_PASSES in all. Then the sandbox is frozen only for
 * the pass that copies what changed during the last live one. */
#define PRECOPY_LIVE_PASSES 4
#define PRECOPY_SMALL_BYTES (8ULL << 20)
#define PRECOPY_SMALL_ENTRIES 1024

/* The live passes of a pre-copy into tmp (the sandbox runs throughout and
 * is never frozen here). *idx gets the last pass's records. Returns the
 * number of passes made, or a negative errno with j->err set; tmp is then
 * partial (caller removes). */
static int precopy_live(capture_job *j, const char *tmp, core_tree_index **idx) {
        char point[48];
        core_tree_sync_stats prev = {0};
        int pass;
        for (pass = 1; pass <= PRECOPY_LIVE_PASSES; pass++) {
                core_tree_sync_stats st = {0};
                core_cancel_bind(&j->cancel);
                int r = core_tree_sync(j->upper, tmp, idx, true, &st, &j->err);
                core_cancel_bind(NULL);
                if (r < 0)
                        return r;
                log_debug("sandbox '%s': %s pre-copy pass %d: %" PRIu64 " of %" PRIu64 " entries, %" PRIu64
                          " bytes rewritten, %" PRIu64 " removed", j->sb->name, j->op, pass, st.written,
                          st.entries, st.bytes, st.removed);
                snprintf(point, sizeof(point), "%s.%s", j->op, pass == 1 ? "precopy_copied" : "precopy_repeated");
                core_fault(point);
                bool small = st.bytes <= PRECOPY_SMALL_BYTES && st.written <= PRECOPY_SMALL_ENTRIES;
                if (small || (pass > 1 && st.bytes >= prev.bytes && st.written >= prev.written))
                        break;
                prev = st;
        }
        return pass > PRECOPY_LIVE_PASSES ? PRECOPY_LIVE_PASSES : pass;
}

/* The I/O and CPU priority of the calling thread (a worker, shared with
 * other jobs), as capture_priority() found it. */
typedef struct thread_priority {
        int ioprio, nice, policy;
        bool saved;
} thread_priority;

/* The calling thread's copy runs at low priority when low: best-effort
 * I/O class at its lowest level, 7 (ioprio_set(2); the I/O scheduler
 * honours it, BFQ, and reads are charged to the thread, writeback is
 * not), SCHED_BATCH at nice 19 (sched(7)), so a capture's copy yields
 * the disk and the CPU to the sandboxes that run meanwhile. When not
 * low, the priority saved before is restored (the worker thread serves
 * other jobs after). Failures are logged and otherwise ignored: a copy at
 * the normal priority is still a correct copy. */
static void capture_priority(thread_priority *saved, bool low) {
        pid_t tid = gettid();
        if (low) {
                if (!saved->saved) {
                        errno = 0;
                        saved->nice = getpriority(PRIO_PROCESS, (id_t)tid);
                        if (errno)
                                saved->nice = 0;
                        saved->ioprio = (int)syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, tid);
                        saved->policy = sched_getscheduler(0);
                        saved->saved = true;
                }
                struct sched_param sp = {0};
                if (syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7)) < 0 ||
                    sched_setscheduler(0, SCHED_BATCH, &sp) < 0 || setpriority(PRIO_PROCESS, (id_t)tid, 19) < 0)
                        log_warning_errno(negative_errno(), "capture: lower the copy's priority: %m");
                return;
        }
        if (!saved->saved)
                return;
        struct sched_param sp = {0};
        if ((saved->ioprio >= 0 && syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, tid, saved->ioprio) < 0) ||
            (saved->policy >= 0 && sched_setscheduler(0, saved->policy, &sp) < 0) ||
            setpriority(PRIO_PROCESS, (id_t)tid, saved->nice) < 0)
                log_warning_errno(negative_errno(), "capture: restore the worker's priority: %m");
        saved->saved = false;
}

/* Worker, a pool sandbox (libcore/pool.h): freeze a running one, take a
 * read-only snapshot of its subvolume as the layer, thaw. The snapshot's
 * commit flushes what the frozen processes wrote before it; the freeze
 * makes the files consistent with each other (no process is between two
 * writes). O(1) in the bytes written. */
static void capture_snapshot(capture_job *j) {
        char point[32];
        /* Its dirty data written out while it still runs: the snapshot
         * below writes what is left, with the sandbox frozen
         * (core_pool_flush). */
        int f = j->cg ? core_pool_flush(j->pool_dir) : 0;
        if (f < 0)
                log_warning_errno(f, "sandbox '%s': write out its data before the snapshot: %m", j->sb->name);
        int r = j->cg ? core_cgroup_freeze(j->cg, true) : 0;
        if (r < 0 && r != -ENOTSUP) {
                sb_error_set(&j->err, r, NULL, NULL, "freeze the sandbox: %s", strerror(-r));
                core_cgroup_freeze(j->cg, false);
                return;
        }
        snprintf(point, sizeof(point), "%s.frozen", j->op);
        core_fault(point);
        /* Its failure is j->err, which capture_done answers. */
        r = core_pool_capture(j->pool_dir, j->id, &j->err);
        snprintf(point, sizeof(point), "%s.copied", j->op);
        core_fault(point);
        int t = j->keep_frozen || !j->cg ? 0 : core_cgroup_freeze(j->cg, false);
        if (t < 0 && t != -ENOTSUP)
                log_warning_errno(t, "sandbox '%s': thaw after the snapshot: %m", j->sb->name);
        /* Thawed first: admission may wait for the cleaner. */
        if (r >= 0)
                (void)core_pool_capture_admit(j->id, &j->err);
}

/* Worker: freeze, copy the upper into a new layer, thaw. Thawing is tried
 * whatever happened, so a failed copy never leaves the sandbox frozen.
 * With j->precopy, the copy is made while the sandbox runs (precopy_live)
 * and the frozen pass only copies what changed meanwhile; a failure or a
 * cancel there leaves the sandbox never frozen. */
static void capture_work(void *userdata) {
        capture_job *j = userdata;
        _cleanup_free_ char *tmp = NULL;
        if (asprintf(&tmp, "%s.tmp", j->dest) < 0) {
                sb_error_set(&j->err, -ENOMEM, NULL, NULL, "out of memory");
                return;
        }
        core_fault_stall("capture.working");
        /* Cancelled while it waited for the capture before it: nothing to do. */
        if (__atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE) == CORE_CANCEL_REQUESTED) {
                sb_error_set(&j->err, -ECANCELED, "cancelled", NULL, "cancelled");
                return;
        }
        char point[32];
        if (j->pool_dir) {
                capture_snapshot(j);
                return;
        }
        _cleanup_(core_tree_index_freep) core_tree_index *idx = NULL;
        core_tree_sync_stats frozen = {0};
        int r, passes = 0;
        /* The live passes at low priority (capture_priority); the
         * frozen pass after them at the worker's own, since the sandbox
         * waits for it. A copy made only while frozen (no pre-copy) is
         * the whole copy, at low priority too. */
        thread_priority prio = {0};
        capture_priority(&prio, true);
        if (j->precopy && (r = passes = precopy_live(j, tmp, &idx)) < 0) {
                capture_priority(&prio, false);
                core_rm_rf(tmp);
                return;
        }
        if (j->precopy)
                capture_priority(&prio, false);
        /* Cancelled as the last live pass ended: never frozen either. */
        if (j->precopy && __atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE) == CORE_CANCEL_REQUESTED) {
                sb_error_set(&j->err, -ECANCELED, "cancelled", NULL, "cancelled");
                core_rm_rf(tmp);
                return;
        }
        r = core_cgroup_freeze(j->cg, true);
        if (r < 0 && r != -ENOTSUP) {
                sb_error_set(&j->err, r, NULL, NULL, "freeze the sandbox: %s", strerror(-r));
                core_cgroup_freeze(j->cg, false);
                capture_priority(&prio, false);
                if (j->precopy)
                        core_rm_rf(tmp);
                return;
        }
        snprintf(point, sizeof(point), "%s.frozen", j->op);
        core_fault(point);
        core_cancel_bind(&j->cancel);
        r = j->precopy ? core_tree_sync(j->upper, tmp, &idx, false, &frozen, &j->err)
                       : core_tree_copy(j->upper, tmp, &j->err);
        core_cancel_bind(NULL);
        capture_priority(&prio, false);
        snprintf(point, sizeof(point), "%s.copied", j->op);
        core_fault(point);
        int t = j->keep_frozen ? 0 : core_cgroup_freeze(j->cg, false);
        if (t < 0 && t != -ENOTSUP)
                log_warning_errno(t, "sandbox '%s': thaw after copy: %m", j->sb->name);
        if (j->precopy && r >= 0)
                log_info("sandbox '%s': %s pre-copied in %d live pass%s; while frozen %" PRIu64 " of %" PRIu64
                         " entries rewritten (%" PRIu64 " bytes), %" PRIu64 " removed", j->sb->name, j->op, passes,
                         passes == 1 ? "" : "es", frozen.written, frozen.entries, frozen.bytes, frozen.removed);
        if (r >= 0 && rename(tmp, j->dest) < 0)
                r = sb_error_set(&j->err, negative_errno(), NULL, NULL, "rename %s: %m", tmp);
        if (r < 0)
                core_rm_rf(tmp);
}

static void capture_done(void *userdata) {
        capture_job *j = userdata;
        sandbox *sb = j->sb;
        manager *m = j->m;
        sb->capturing--;
        rpc_request_set_cancel(j->req, NULL, NULL);
        for (capture_job **p = &captures; *p; p = &(*p)->next)
                if (*p == j) {
                        *p = j->next;
                        break;
                }
        if (__atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE) == CORE_CANCEL_REQUESTED) {
                if (!j->err) {
                        /* Copied before the cancel was seen: the layer is
                         * nobody's, so it goes. */
                        cJSON *mine = cJSON_CreateArray();
                        cJSON_AddItemToArray(mine, cJSON_CreateString(j->id));
                        layers_collect(m, mine, NULL, NULL);
                        cJSON_Delete(mine);
                }
                sb_error_free(j->err);
                j->err = NULL;
                sb_error_set(&j->err, -ECANCELED, "cancelled", NULL, "%s of sandbox '%s': cancelled", j->op,
                             sb->name);
        }
        cJSON *chain = j->err ? NULL : chain_with(j->id, sb->layers);
        j->cb(m, j->req, sb, chain, j->err);
        cJSON_Delete(chain);
        /* The next capture of this sandbox, which waited for this one. */
        capture_job *next = NULL;
        for (capture_job *q = captures; q && !next; q = q->next)
                if (q->sb == sb && !q->started)
                        next = q;
        if (next) {
                free(j->upper);
                free(j->dest);
                free(j->pool_dir);
                sb_error_free(j->err);
                free(j);
                capture_start(next);
                return;
        }
        if (!sb->capturing && sb->deferred_teardown) {
                sb->deferred_teardown = false;
                start_teardown(sb, sb->deferred_teardown_session, sb->deferred_remove);
        }
        free(j->upper);
        free(j->dest);
        free(j->pool_dir);
        sb_error_free(j->err);
        free(j);
}

/* A stopped sandbox: its upper becomes the layer, in place. Between the
 * move and the config that names the new layer, the layer alone holds the
 * sandbox's files, and the start-up sweep of unused layers would remove
 * it: an intent record, layers/.capture-<id> (the sandbox's name, written
 * durably before the move, removed once the config is), lets the next
 * start finish the capture instead (captures_finish). */
static int capture_stopped(sandbox *sb, const char *id, const char *dest, const char *fault,
                           sb_error **ret_err) {
        _cleanup_free_ char *upper = NULL, *intent = NULL;
        if (asprintf(&upper, "%s/upper", sb->dir) < 0 ||
            asprintf(&intent, "%s/.capture-%s", sb->m->layers_dir, id) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_write_file_atomic(intent, sb->name, strlen(sb->name), 0600);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", intent, strerror(-r));
        if (rename(upper, dest) < 0) {
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "move %s to a layer: %m", upper);
                (void)unlink(intent);
                return r;
        }
        core_fault(fault);
        if (mkdir(upper, 0755) < 0) {
                r = negative_errno();
                (void)rename(dest, upper);
                (void)unlink(intent);
                return sb_error_set(ret_err, r, NULL, NULL, "mkdir %s: %s", upper, strerror(-r));
        }
        cJSON *chain = chain_with(id, sb->layers);
        cJSON_Delete(sb->layers);
        sb->layers = chain;
        r = sandbox_save_config(sb, NULL, ret_err);
        /* Kept when the config could not be written: the next start
         * finishes the capture rather than lose the layer. */
        if (r >= 0)
                (void)unlink(intent);
        return r;
}

/* Daemon start, sandboxes loaded: finishes every stopped-sandbox capture a
 * crash interrupted after its upper moved into layers/ (capture_stopped):
 * the layer goes on top of the sandbox's chain, it gets an empty upper if
 * it has none, and its config is written. Where the move had not happened
 * yet, the intent is just dropped. */
static void captures_finish(manager *m) {
        _cleanup_closedir_ DIR *d = opendir(m->layers_dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (strncmp(de->d_name, ".capture-", 9) != 0)
                        continue;
                const char *id = de->d_name + 9;
                _cleanup_free_ char *intent = NULL, *name = NULL, *layer = NULL, *upper = NULL;
                if (asprintf(&intent, "%s/%s", m->layers_dir, de->d_name) < 0 ||
                    asprintf(&layer, "%s/%s", m->layers_dir, id) < 0)
                        continue;
                sandbox *sb = core_read_file(intent, 256, &name, NULL) >= 0 ? manager_find_sandbox(m, name) : NULL;
                struct stat st;
                if (sb && !sb->sess && strlen(id) == 32 && !chain_has(sb->layers, id) && lstat(layer, &st) == 0 &&
                    S_ISDIR(st.st_mode) && asprintf(&upper, "%s/upper", sb->dir) >= 0) {
                        _cleanup_error_ sb_error *err = NULL;
                        if (mkdir(upper, 0755) < 0 && errno != EEXIST) {
                                log_warning("sandbox '%s': finish the interrupted capture %s: mkdir %s: %m; left "
                                            "for the next start", sb->name, id, upper);
                                continue;
                        }
                        cJSON *chain = chain_with(id, sb->layers);
                        cJSON_Delete(sb->layers);
                        sb->layers = chain;
                        if (sandbox_save_config(sb, NULL, &err) < 0) {
                                log_warning("sandbox '%s': finish the interrupted capture %s: %s; left for the "
                                            "next start", sb->name, id, err ? err->message : "write config");
                                continue;
                        }
                        log_info("sandbox '%s': finished a capture a crash interrupted (its files are layer %s)",
                                 sb->name, id);
                }
                (void)unlink(intent);
        }
}

/* Captures sb's filesystem and calls cb with the chain of layers that now
 * holds it (or an error). cb runs later when the sandbox is running. */
static void capture(manager *m, rpc_request *req, sandbox *sb, const char *op, capture_cb cb) {
        _cleanup_error_ sb_error *err = NULL;
        if (sb->starting || sb->deleting || (sb->sess && sb->sess->stopping)) {
                sb_error_set(&err, -EBUSY, "unavailable", NULL, "sandbox '%s' is %s; try again in a moment",
                             sb->name, sb->deleting ? "being deleted" : "starting or stopping");
                cb(m, req, sb, NULL, err);
                return;
        }
        if (cJSON_GetArraySize(sb->layers) >= MAX_LAYERS) {
                sb_error_set(&err, -E2BIG, "limit_exceeded", NULL,
                             "sandbox '%s' already stands on %d layers", sb->name, MAX_LAYERS);
                cb(m, req, sb, NULL, err);
                return;
        }
        char id[33];
        core_random_hex(id, 32);
        _cleanup_free_ char *dest = NULL;
        if (asprintf(&dest, "%s/%s", m->layers_dir, id) < 0)
                return;
        /* A stopped sandbox's image must be mounted before its upper is
         * read: copying the empty mount point would make an empty layer. */
        if (!sb->sess && sandbox_disk_attach(sb->dir, &err) < 0) {
                cb(m, req, sb, NULL, err);
                return;
        }
        /* An upper on its own disk image (libcore/diskimg.h) cannot be
         * renamed onto the state filesystem: it is copied as a running
         * one is (nothing to freeze), and the sandbox keeps it. */
        if (!sb->sess && !core_disk_present(sb->dir)) {
                if (capture_stopped(sb, id, dest, cb == fork_captured ? "fork.stopped" : "snapshot.stopped",
                                    &err) < 0) {
                        cb(m, req, sb, NULL, err);
                        return;
                }
                char point[32];
                snprintf(point, sizeof(point), "%s.moved", op);
                core_fault(point);
                cb(m, req, sb, sb->layers, NULL);
                return;
        }
        capture_job *j = calloc(1, sizeof(*j));
        j->m = m;
        j->sb = sb;
        j->req = req;
        j->cb = cb;
        j->op = op;
        memcpy(j->id, id, sizeof(id));
        j->dest = TAKE_PTR(dest);
        j->cg = sb->sess ? sb->sess->cg : NULL;
        j->keep_frozen = sb->sess && sb->sess->paused;
        /* Pre-copy is sound on the sandbox's own ext4 image only (see
         * core_tree_sync): elsewhere, and when paused or stopped (nothing
         * runs), one copy while frozen. */
        j->precopy = sb->sess && j->cg && !j->keep_frozen && core_disk_present(sb->dir) &&
                     !core_pool_present(sb->dir);
        if (core_pool_present(sb->dir) && !(j->pool_dir = strdup(sb->dir))) {
                sb_error_set(&err, -ENOMEM, NULL, NULL, "out of memory");
                cb(m, req, sb, NULL, err);
                free(j->dest);
                free(j);
                return;
        }
        bool busy = false;
        for (capture_job *q = captures; q && !busy; q = q->next)
                busy = q->sb == sb;
        if (asprintf(&j->upper, "%s/upper", sb->dir) < 0 ||
            (!busy && worker_submit(capture_work, capture_done, j) < 0)) {
                sb_error_set(&err, -ENOMEM, NULL, NULL, "cannot start the copy");
                cb(m, req, sb, NULL, err);
                free(j->upper);
                free(j->dest);
                free(j->pool_dir);
                free(j);
                return;
        }
        j->started = !busy;
        capture_job **tail = &captures;
        while (*tail)
                tail = &(*tail)->next;
        *tail = j;
        sb->capturing++;
        rpc_request_set_cancel(req, capture_cancel, j);
}

/* ---- sandbox.fork ------------------------------------------------------------ */

/* The fork's create parameters: the source's config, then the overrides,
 * then the new name. */
static cJSON *fork_params(const sandbox *src, const cJSON *overrides, const char *name) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "runtime", src->runtime);
        cJSON_AddNumberToObject(p, "timeout", (double)src->timeout_ms);
        cJSON *res = cJSON_AddObjectToObject(p, "resources");
        cJSON_AddNumberToObject(res, "vcpus", src->vcpus);
        if (src->disk_mib)
                cJSON_AddNumberToObject(res, "diskMiB", (double)src->disk_mib);
        cJSON_AddItemToObject(p, "env", cJSON_Duplicate(src->env, 1));
        cJSON_AddItemToObject(p, "tags", cJSON_Duplicate(src->tags, 1));
        cJSON_AddItemToObject(p, "networkPolicy", cJSON_Duplicate(src->policy, 1));
        cJSON_AddItemToObject(p, "ports", cJSON_Duplicate(src->ports, 1));
        cJSON_AddBoolToObject(p, "persistent", src->persistent);
        /* The fork gets a range of its own; the copied layers hold sandbox
         * ids, so none of its files needs remapping (libcore/userns.h). */
        cJSON_AddBoolToObject(p, "userns", src->userns);
        /* The same volumes, mounted (never copied: a volume is outside
         * the fork's bytes), unless overrides.volumes says otherwise. */
        cJSON_AddItemToObject(p, "volumes", src->volumes ? cJSON_Duplicate(src->volumes, 1) : cJSON_CreateArray());
        const cJSON *it;
        cJSON_ArrayForEach(it, overrides) {
                cJSON_DeleteItemFromObject(p, it->string);
                cJSON_AddItemToObject(p, it->string, cJSON_Duplicate(it, 1));
        }
        if (name)
                cJSON_AddStringToObject(p, "name", name);
        return p;
}

void snapshot_config_defaults(manager *m, cJSON *params) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(params, "source");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "type"));
        if (!type || !streq(type, "snapshot"))
                return;
        const snapshot *snap = manager_find_snapshot(m, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "snapshotId")));
        if (!snap)
                return; /* create names the unknown id */
        /* Not persistent: how long the new sandbox lives is the caller's
         * choice. userns only ever strengthens: a snapshot taken with one
         * restores with one (its layers were written by a root that was not
         * host root), and one taken without does not turn off a daemon
         * default of "userns": true. */
        static const char *const keys[] = {"timeout", "resources", "env", "tags", "networkPolicy", "ports"};
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(snap->config, keys[i]);
                if (v && !cJSON_IsNull(v) && !cJSON_GetObjectItemCaseSensitive(params, keys[i]))
                        cJSON_AddItemToObject(params, keys[i], cJSON_Duplicate(v, 1));
        }
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(snap->config, "userns")) && !cJSON_GetObjectItemCaseSensitive(params, "userns"))
                cJSON_AddBoolToObject(params, "userns", true);
}

int snapshot_userns_check(manager *m, const cJSON *params, bool userns, sb_error **ret_err) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(params, "source");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "type"));
        if (userns || !type || !streq(type, "snapshot"))
                return 0;
        const snapshot *snap = manager_find_snapshot(m, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "snapshotId")));
        if (!snap || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(snap->config, "userns")))
                return 0;
        return sb_error_set(ret_err, -EINVAL, NULL, "userns",
                            "userns: snapshot '%s' was taken in a user namespace and restores only in one; "
                            "omit userns or set it to true", snap->id);
}

/* ---- config of an imported file ---------------------------------------------- */

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* What an imported file's config may set, with config: true. Left out on
 * purpose: persistent (how long a sandbox lives is the caller's choice, as
 * for local snapshots) and everything else a record may carry (name, id,
 * usernsRange, sessions: this host's own bookkeeping). runtime and userns
 * are handled apart (snapshot_import_config). */
static const char *const import_config_keys[] = {"timeout", "resources", "env", "tags", "networkPolicy",
                                                  "ports"};

/* Rewrites an error of the create validators as one about the file:
 * field "config.<field>", message "snapshot.json: config.<message>". */
static int import_config_error(sb_error **ret_err, int r) {
        if (!ret_err || !*ret_err)
                return r;
        sb_error *e = *ret_err;
        char *field = NULL, *msg = NULL;
        if (asprintf(&field, "config%s%s", e->field ? "." : "", e->field ?: "") >= 0) {
                free(e->field);
                e->field = field;
        }
        if (asprintf(&msg, "snapshot.json: config.%s", e->message) >= 0) {
                free(e->message);
                e->message = msg;
        }
        return r;
}

int snapshot_import_config(manager *m, const cJSON *file_config, bool take, cJSON **ret_config,
                           cJSON **ret_ignored, sb_error **ret_err) {
        _cleanup_(cJSON_Deletep) cJSON *conf = cJSON_CreateObject(), *ignored = cJSON_CreateArray();
        if (!conf || !ignored)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(file_config, "runtime");
        if (rt && !cJSON_IsNull(rt)) {
                /* Kept either way: it only names which runtime installed here
                 * the layers belong on (create checks that it exists). */
                if (!cJSON_IsString(rt) || !core_name_is_valid(rt->valuestring))
                        return sb_error_set(ret_err, -EINVAL, NULL, "config.runtime",
                                            "snapshot.json: config.runtime: not a runtime name");
                cJSON_AddStringToObject(conf, "runtime", rt->valuestring);
        }
        const cJSON *un = cJSON_GetObjectItemCaseSensitive(file_config, "userns");
        if (un && !cJSON_IsBool(un) && !cJSON_IsNull(un))
                return sb_error_set(ret_err, -EINVAL, NULL, "config.userns",
                                    "snapshot.json: config.userns: must be true or false");
        const cJSON *it;
        cJSON_ArrayForEach(it, file_config) {
                bool known = false;
                for (size_t i = 0; i < ELEMENTSOF(import_config_keys); i++)
                        known = known || streq(it->string, import_config_keys[i]);
                if (cJSON_GetObjectItem(file_config, it->string) != it)
                        /* cJSON finds the first of equal (case-blind) keys:
                         * one file must not show one value and apply another. */
                        return sb_error_set(ret_err, -EINVAL, NULL, "config",
                                            "snapshot.json: config.%s: key given more than once", it->string);
                if (cJSON_IsNull(it) || streq(it->string, "runtime"))
                        continue;
                if (streq(it->string, "userns") && cJSON_IsTrue(it))
                        /* Only ever a strengthening, so taken with or without config. */
                        cJSON_AddBoolToObject(conf, "userns", true);
                else if (known && take)
                        cJSON_AddItemToObject(conf, it->string, cJSON_Duplicate(it, 1));
                else
                        cJSON_AddItemToArray(ignored, cJSON_CreateString(it->string));
        }
        /* The very validators of sandbox.create params, against this
         * daemon's limits (maxVcpus, maxTimeoutMs): a file never carries in
         * what a caller could not ask for. */
        _cleanup_(cJSON_Deletep) cJSON *params = cJSON_Duplicate(conf, 1);
        if (!params)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        cJSON_DeleteItemFromObject(params, "runtime");
        int r = sandbox_params_validate(m, params, ret_err);
        if (r < 0)
                return import_config_error(ret_err, r);
        *ret_config = TAKE_PTR(conf);
        *ret_ignored = TAKE_PTR(ignored);
        return 0;
}

static void fork_captured(manager *m, rpc_request *req, sandbox *src, cJSON *chain, sb_error *err) {
        if (err) {
                rpc_reply_sb_error(req, err);
                return;
        }
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req->params, "name"));
        cJSON *overrides = cJSON_GetObjectItemCaseSensitive(req->params, "overrides");
        cJSON *p = fork_params(src, overrides, name);
        cJSON_Delete(req->params);
        req->params = p;
        log_info("sandbox '%s': forked (%d layers)", src->name, cJSON_GetArraySize(chain));
        create_sandbox(req, m, reply_sandbox, chain);
}

static void method_fork(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *src_name = NULL, *name = NULL;
        cJSON *overrides = NULL;
        if (rpc_param_string(req, "sourceSandbox", true, &src_name, &err) < 0 ||
            rpc_param_string(req, "name", false, &name, &err) < 0 ||
            rpc_param_object(req, "overrides", false, &overrides, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        static const char *const forbidden[] = {"source", "name"};
        for (size_t i = 0; i < ELEMENTSOF(forbidden); i++)
                if (cJSON_GetObjectItemCaseSensitive(overrides, forbidden[i])) {
                        rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "overrides",
                                        "overrides.%s: a fork's %s comes from its source; use the top-level name",
                                        forbidden[i], forbidden[i]);
                        return;
                }
        sandbox *src = manager_find_sandbox(m, src_name);
        if (!src || (src->starting && cJSON_GetArraySize(src->sessions) == 0) || !tenant_req_owns(m, req, src->owner)) {
                reply_not_found(req, "sandbox", src_name);
                return;
        }
        if (name && manager_find_sandbox(m, name)) {
                rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                "sandbox '%s' already exists; pick another name", TEXT_Q(name));
                return;
        }
        /* Every parameter of the fork's create (name, overrides) is checked
         * here, before the capture copies and freezes the source. */
        cJSON *p = fork_params(src, overrides, name);
        int r = p ? sandbox_params_validate(m, p, &err) : sb_error_set(&err, -ENOMEM, NULL, NULL, "out of memory");
        cJSON_Delete(p);
        /* A fork in a user namespace where the host can run none. */
        const cJSON *ou = cJSON_GetObjectItemCaseSensitive(overrides, "userns");
        bool userns = cJSON_IsBool(ou) ? cJSON_IsTrue(ou) : src->userns;
        if (r >= 0 && userns && (r = userns_reprobe(m, &err)) >= 0 && m->userns_unavailable)
                r = sb_error_set(&err, -EOPNOTSUPP, "unavailable", "userns",
                                 "userns: this host cannot run user-namespace sandboxes: %s", m->userns_unavailable);
        if (r >= 0)
                r = tenant_check_room(m, req, NULL, &err);
        if (r < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        capture(m, req, src, "fork", fork_captured);
}

/* ---- snapshots ---------------------------------------------------------------- */

cJSON *snapshot_json(const snapshot *s) {
        char buf[40];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", s->id);
        cJSON_AddStringToObject(o, "sandbox", s->sandbox);
        cJSON_AddItemToObject(o, "owner", s->owner ? cJSON_CreateString(s->owner) : cJSON_CreateNull());
        cJSON_AddStringToObject(o, "createdAt", core_format_time(s->created_ms, buf, sizeof(buf)));
        if (s->expires_ms)
                cJSON_AddStringToObject(o, "expiresAt", core_format_time(s->expires_ms, buf, sizeof(buf)));
        else
                cJSON_AddNullToObject(o, "expiresAt");
        cJSON_AddBoolToObject(o, "expired", s->expired);
        cJSON_AddItemToObject(o, "tags", s->tags ? cJSON_Duplicate(s->tags, 1) : cJSON_CreateObject());
        cJSON_AddNumberToObject(o, "layers", cJSON_GetArraySize(s->layers));
        cJSON_AddItemToObject(o, "config", cJSON_Duplicate(s->config, 1));
        return o;
}

cJSON *snapshot_view(const snapshot *s) {
        cJSON *o = snapshot_json(s);
        cJSON *config = cJSON_GetObjectItemCaseSensitive(o, "config");
        cJSON *pj = cJSON_GetObjectItemCaseSensitive(config, "networkPolicy");
        if (pj && cJSON_IsObject(pj)) {
                /* Header values of transform rules carry credentials: shown
                 * as <redacted>, as sandbox.get shows them; a stored policy
                 * that no longer parses is hidden whole (fail closed). */
                _cleanup_(pol_policy_freep) pol_policy *pol = NULL;
                _cleanup_error_ sb_error *err = NULL;
                cJSON *shown = pol_policy_parse(pj, &pol, &err) >= 0 ? pol_policy_to_json(pol, true) : NULL;
                cJSON_ReplaceItemInObject(config, "networkPolicy", shown ? shown : cJSON_CreateString("<redacted>"));
        }
        cJSON *src = cJSON_GetObjectItemCaseSensitive(config, "source");
        if (cJSON_IsObject(src) && cJSON_GetObjectItemCaseSensitive(src, "password"))
                cJSON_ReplaceItemInObject(src, "password", cJSON_CreateString("<redacted>"));
        return o;
}

int snapshot_save(manager *m, const snapshot *s, sb_error **ret_err) {
        cJSON *o = snapshot_json(s);
        cJSON_ReplaceItemInObject(o, "layers", cJSON_Duplicate(s->layers, 1));
        cJSON_DeleteItemFromObject(o, "expired"); /* recomputed at start */
        _cleanup_free_ char *text = cJSON_Print(o), *path = NULL;
        cJSON_Delete(o);
        if (!text || asprintf(&path, "%s/%s.json", m->snapshots_dir, s->id) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_write_file_atomic(path, text, strlen(text), 0600);
        return r < 0 ? sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", path, strerror(-r)) : 0;
}

static void snapshot_captured(manager *m, rpc_request *req, sandbox *sb, cJSON *chain, sb_error *err) {
        if (err) {
                rpc_reply_sb_error(req, err);
                return;
        }
        _cleanup_error_ sb_error *e = NULL;
        /* A tenant's snapshot limit, where the snapshot is registered. */
        if (tenant_check_new_snapshot(m, req, sb, &e) < 0) {
                rpc_reply_sb_error(req, e);
                layers_collect(m, chain, NULL, NULL);
                return;
        }
        tenant t;
        tenant_of_conn(m->cfg, req->conn, &t);
        snapshot *s = calloc(1, sizeof(*s));
        s->owner = t.admin ? NULL : strdup(t.name);
        memcpy(s->id, "snap-", 5);
        core_random_hex(s->id + 5, 32);
        s->sandbox = strdup(sb->name);
        s->layers = cJSON_Duplicate(chain, 1);
        s->config = sandbox_config_json(sb);
        /* "volumes": a volume is no part of a snapshot (volume.c); a
         * create from it mounts only what its own request names.
         * "network": a pod's namespace is the pod's, never a snapshot's.
         * "mounts": host mounts are the sandbox's own, never a snapshot's. */
        static const char *const drop[] = {"name", "id", "owner", "createdAt", "sessions", "layers", "source", "ready",
                                           "volumes", "network", "mounts"};
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                cJSON_DeleteItemFromObject(s->config, drop[i]);
        s->created_ms = core_now_ms();
        /* Validated by method_snapshot before the capture. */
        cJSON *exp = cJSON_GetObjectItemCaseSensitive(req->params, "expiration");
        if (cJSON_IsNumber(exp) && exp->valuedouble > 0)
                s->expires_ms = s->created_ms + (uint64_t)exp->valuedouble;
        /* Validated by method_snapshot too. */
        cJSON *tags = cJSON_GetObjectItemCaseSensitive(req->params, "tags");
        if (cJSON_IsObject(tags))
                s->tags = cJSON_Duplicate(tags, 1);
        if (snapshot_save(m, s, &e) < 0) {
                rpc_reply_sb_error(req, e);
                snapshot_free(s);
                layers_collect(m, chain, NULL, NULL);
                return;
        }
        s->next = m->snapshots;
        m->snapshots = s;
        core_fault("snapshot.recorded");
        log_info("sandbox '%s': snapshot %s", sb->name, s->id);
        if (s->expires_ms)
                snapshots_schedule_expiry(m);
        rpc_reply(req, snapshot_view(s));
}

static void method_snapshot(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        int64_t expiration = 0;
        /* 0 (or absent) = never expires. */
        cJSON *tags = NULL;
        if (rpc_param_duration_ms(req, "expiration", false, 0, MAX_EXPIRATION_MS, &expiration, &err) < 0 ||
            rpc_param_object(req, "tags", false, &tags, &err) < 0 ||
            (tags && limit_check_map(tags, "tags", &limit_tags, &err) < 0)) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_lookup(req, m, "name");
        if (sb && tenant_check_room(m, req, sb, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (sb)
                capture(m, req, sb, "snapshot", snapshot_captured);
}

static void reply_empty(void *req) {
        rpc_reply(req, NULL);
}

static snapshot *lookup_snapshot(rpc_request *req, manager *m) {
        _cleanup_error_ sb_error *err = NULL;
        const char *id = NULL;
        if (rpc_param_string(req, "id", true, &id, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        snapshot *s = manager_find_snapshot(m, id);
        if (s && !tenant_req_owns(m, req, s->owner))
                s = NULL; /* another tenant's: as one that does not exist */
        if (!s)
                reply_not_found(req, "snapshot", id);
        return s;
}

static void method_snapshot_get(rpc_request *req, void *userdata) {
        snapshot *s = lookup_snapshot(req, userdata);
        if (s)
                rpc_reply(req, snapshot_view(s));
}

static void method_snapshot_list(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *of = NULL;
        cJSON *tags = NULL;
        if (rpc_param_string(req, "sandbox", false, &of, &err) < 0 ||
            rpc_param_object(req, "tags", false, &tags, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(o, "snapshots");
        for (snapshot *s = m->snapshots; s; s = s->next) {
                if ((of && !streq(of, s->sandbox)) || !tenant_req_owns(m, req, s->owner))
                        continue;
                /* tags: every given one must match, as sandbox.list's. */
                bool match = true;
                cJSON *t;
                cJSON_ArrayForEach(t, tags) {
                        const char *have = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->tags, t->string));
                        match = match && have && cJSON_IsString(t) && streq(have, t->valuestring);
                }
                if (match)
                        cJSON_AddItemToArray(arr, snapshot_view(s));
        }
        rpc_reply(req, o);
}

/* Removes s's record and unlinks it from the registry, frees it, and
 * collects the layers only it used; done(userdata) runs once they are gone
 * (as layers_collect). On failure s stays and done is not called. */
static int snapshot_remove(manager *m, snapshot *s, void (*done)(void *), void *userdata, sb_error **ret_err) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/%s.json", m->snapshots_dir, s->id) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (unlink(path) < 0 && errno != ENOENT)
                return sb_error_set(ret_err, negative_errno(), "failed", NULL, "remove %s: %m", path);
        for (snapshot **pp = &m->snapshots; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        /* The layers only it used go from disk; sandboxes on it keep theirs. */
        layers_collect(m, s->layers, done, userdata);
        snapshot_free(s);
        return 0;
}

/* Safe while sandboxes stand on it: they hold their own references to its
 * layers, which stay until the last user is gone. */
static void method_snapshot_delete(rpc_request *req, void *userdata) {
        manager *m = userdata;
        snapshot *s = lookup_snapshot(req, m);
        if (!s)
                return;
        _cleanup_error_ sb_error *err = NULL;
        if (snapshot_remove(m, s, reply_empty, req, &err) < 0)
                rpc_reply_sb_error(req, err);
}

/* ---- expiration ------------------------------------------------------------- */

/* Does a sandbox stand on s: is s's whole chain the bottom of its own? */
static bool stood_on(manager *m, const snapshot *s) {
        int n = cJSON_GetArraySize(s->layers);
        if (n == 0)
                return false;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                int k = cJSON_GetArraySize(sb->layers);
                bool match = k >= n;
                for (int i = 0; match && i < n; i++) {
                        const char *a = cJSON_GetStringValue(cJSON_GetArrayItem(sb->layers, k - n + i));
                        const char *b = cJSON_GetStringValue(cJSON_GetArrayItem(s->layers, i));
                        match = a && b && streq(a, b);
                }
                if (match)
                        return true;
        }
        return false;
}

/* Deletes what expired and nothing stands on; marks the rest expired. */
static void expire_now(manager *m) {
        uint64_t now = core_now_ms();
        for (snapshot *s = m->snapshots, *next; s; s = next) {
                next = s->next;
                if (!s->expires_ms || s->expires_ms > now)
                        continue;
                if (stood_on(m, s)) {
                        if (!s->expired)
                                log_info("snapshot %s expired; kept while a sandbox stands on it", s->id);
                        s->expired = true;
                        continue;
                }
                _cleanup_error_ sb_error *err = NULL;
                log_info("snapshot %s expired; deleting it", s->id);
                if (snapshot_remove(m, s, NULL, NULL, &err) < 0)
                        log_warning("snapshot %s: %s", s->id, err->message);
        }
}

static int on_expiry(sd_event_source *src, uint64_t usec, void *userdata) {
        manager *m = userdata;
        expire_now(m);
        snapshots_schedule_expiry(m);
        return 0;
}

static void arm_expiry(manager *m, uint64_t delay_ms) {
        int r;
        if (!m->snapshot_expire_src)
                r = sd_event_add_time_relative(m->event, &m->snapshot_expire_src, CLOCK_MONOTONIC, delay_ms * 1000,
                                               0, on_expiry, m);
        else if ((r = sd_event_source_set_time_relative(m->snapshot_expire_src, delay_ms * 1000)) >= 0)
                r = sd_event_source_set_enabled(m->snapshot_expire_src, SD_EVENT_ONESHOT);
        if (r < 0)
                log_warning_errno(r, "snapshot expiration timer: %m");
}

void snapshots_schedule_expiry(manager *m) {
        uint64_t now = core_now_ms(), next = UINT64_MAX;
        for (snapshot *s = m->snapshots; s; s = s->next) {
                uint64_t at = s->expired ? now + HELD_RECHECK_MS : s->expires_ms;
                if (s->expires_ms && at < next)
                        next = at;
        }
        if (next == UINT64_MAX) {
                if (m->snapshot_expire_src)
                        (void)sd_event_source_set_enabled(m->snapshot_expire_src, SD_EVENT_OFF);
                return;
        }
        /* Wall-clock expiresAt, waited for on the monotonic clock and
         * re-checked when the timer fires, so a clock step only moves the
         * deletion, never loses it. */
        arm_expiry(m, next > now ? next - now : 0);
}

void snapshots_load(manager *m) {
        _cleanup_closedir_ DIR *d = opendir(m->snapshots_dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                size_t n = strlen(de->d_name);
                if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0 || strncmp(de->d_name, "snap-", 5) != 0)
                        continue;
                _cleanup_free_ char *path = NULL, *text = NULL;
                if (asprintf(&path, "%s/%s", m->snapshots_dir, de->d_name) < 0 ||
                    core_read_file(path, 1 << 20, &text, NULL) < 0)
                        continue;
                cJSON *o = cJSON_Parse(text);
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "id"));
                cJSON *layers = cJSON_GetObjectItemCaseSensitive(o, "layers");
                /* The id names the record file; the layers name directories
                 * under layers/: both only as the daemon makes them. */
                if (!id || strlen(id) >= sizeof(((snapshot *)0)->id) || strncmp(de->d_name, id, n - 5) != 0 ||
                    strlen(id) != n - 5 || !layers_valid(layers)) {
                        log_warning("snapshot record %s is not valid; left as it is", path);
                        cJSON_Delete(o);
                        continue;
                }
                snapshot *s = calloc(1, sizeof(*s));
                snprintf(s->id, sizeof(s->id), "%s", id);
                s->sandbox = strdup(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "sandbox")) ?: "");
                /* Absent or null (records from before owners): admin. */
                const char *owner = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "owner"));
                s->owner = owner && *owner ? strdup(owner) : NULL;
                s->layers = cJSON_Duplicate(layers, 1);
                cJSON *conf = cJSON_GetObjectItemCaseSensitive(o, "config");
                s->config = cJSON_IsObject(conf) ? cJSON_Duplicate(conf, 1) : cJSON_CreateObject();
                s->created_ms = core_parse_time(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "createdAt")));
                s->expires_ms = core_parse_time(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "expiresAt")));
                /* Absent (records from before snapshot tags): none. */
                cJSON *tags = cJSON_GetObjectItemCaseSensitive(o, "tags");
                s->tags = cJSON_IsObject(tags) ? cJSON_Duplicate(tags, 1) : NULL;
                s->next = m->snapshots;
                m->snapshots = s;
                cJSON_Delete(o);
        }
        captures_finish(m);
        /* Layers nothing refers to: leftovers of a crash during a capture. */
        _cleanup_closedir_ DIR *l = opendir(m->layers_dir);
        while (l && (de = readdir(l))) {
                if (de->d_name[0] == '.' || layer_in_use(m, de->d_name))
                        continue;
                _cleanup_free_ char *path = NULL;
                if (asprintf(&path, "%s/%s", m->layers_dir, de->d_name) >= 0) {
                        log_info("removing unused layer %s", de->d_name);
                        core_rm_rf(path);
                }
        }
        /* Those that expired while the daemon was down go on the first
         * loop iteration. */
        snapshots_schedule_expiry(m);
}

void register_snapshot_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "sandbox.fork", method_fork, m);
        rpc_server_add_method(s, "sandbox.snapshot", method_snapshot, m);
        rpc_server_add_method(s, "snapshot.list", method_snapshot_list, m);
        rpc_server_add_method(s, "snapshot.get", method_snapshot_get, m);
        rpc_server_add_method(s, "snapshot.delete", method_snapshot_delete, m);
}
