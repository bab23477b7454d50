/* The warm pool (daemon.json warmPool): sessions prepared in the background
 * (directories, disk image, cgroup, namespaces, mounts, sandbox-init
 * running) so that a sandbox.create that matches adopts one instead of
 * making its own. warmPool.policy says what to prepare (a CA for a
 * networked mode); the caller's policy, any mode that session_pool_fits,
 * is applied at adoption.
 *
 * What a pooled session is: a sandbox of this daemon's own, named
 * WARMPOOL_PREFIX + 16 random hex digits (a name no caller can give), on
 * the pool's runtime with the daemon's defaults (1 vCPU, diskMiB, userns),
 * no source, under deny-all (no veth: lo only) whatever its hint,
 * with no timeout. It is in no registry a client sees (m->sandboxes, so
 * not in sandbox.list, daemon.info's counts or metrics) and emits no
 * event (emit_status).
 *
 * What it never carries: a pooled session is used once. Adoption gives it
 * to exactly one sandbox, which deletes it like any other; nothing ran in
 * it before (init only), its hostname, /etc/hostname, /etc/hosts and
 * egress proxy CA are made anew under the caller's name, it never had a
 * network (no flow, no conntrack entry, no DNS pin), its command list and
 * logs are empty, and the caller's env, tags, limits, ports, timeout and
 * policy are applied as a cold create would.
 *
 * What stays of the refill: the key WARMPOOL_PREFIX... names its cgroup
 * (and systemd scope, which cannot be renamed) for its whole life; the
 * session record keeps that key ("cgroup") so a restarted daemon finds it.
 *
 * Crash safety of an adoption: the run directory is renamed first, then
 * the config.json of the new sandbox (in the pooled state directory) and
 * the session record with the cgroup key are written, and, last, the
 * state directory is renamed: that rename is the commit (made durable for
 * a persistent sandbox). A daemon killed before it finds a WARMPOOL_PREFIX
 * state directory, which start-up removes (reconcile(); the cgroup sweep
 * ends its init; a renamed run directory has no sandbox and is removed
 * too): nothing is left. Killed after it, the new sandbox is re-adopted
 * like any live session. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/metrics.h"
#include "sandboxd/text.h"

/* Exchanges two char pointers. */
#define SWAP(a, b) do { char *swap_tmp_ = (a); (a) = (b); (b) = swap_tmp_; } while (0)

/* At most this many pooled sessions are being made at once: the refill is
 * background work and must not crowd the creates it serves. */
#define POOL_PARALLEL_STARTS 1
/* Back-off after failed refills: 100 ms doubling up to 30 s. */
#define POOL_RETRY_MIN_MS 100
#define POOL_RETRY_MAX_MS 30000
/* The refill after an adoption waits this long: a create is mostly
 * followed at once by its first commands, which a session being made on
 * the same cores would slow down. */
#define POOL_REFILL_DELAY_MS 100

typedef struct warm_pool {
        unsigned size;
        char *runtime;            /* warmPool.runtime */
        char *policy;             /* warmPool.policy: the networkPolicy mode served */
        sandbox *items;           /* pooled sandboxes, starting or ready (linked by ->next) */
        unsigned failures;        /* consecutive failed refills */
        char *reason;             /* why the last refill failed, or NULL */
        uint64_t adopted;         /* creates served from the pool */
        uint64_t missed;          /* creates that matched but found the pool empty */
        sd_event_source *retry_src;
} warm_pool;

static void pool_refill(manager *m);

/* Pooled sandboxes are "pending" while their session starts, then
 * "running"; one being discarded stays listed (its user namespace range
 * is still in use) until its session has ended. */
static bool is_starting(const sandbox *sb) {
        return streq(sb->status, "pending");
}

static bool is_ready(const sandbox *sb) {
        return sb->sess && !is_starting(sb) && !sb->sess->stopping && !sb->deleting;
}

static unsigned count_ready(const warm_pool *w) {
        unsigned n = 0;
        for (const sandbox *sb = w->items; sb; sb = sb->next)
                n += is_ready(sb);
        return n;
}

static unsigned count_starting(const warm_pool *w) {
        unsigned n = 0;
        for (const sandbox *sb = w->items; sb; sb = sb->next)
                n += is_starting(sb);
        return n;
}

static void list_remove(warm_pool *w, sandbox *sb) {
        for (sandbox **pp = &w->items; *pp; pp = &(*pp)->next)
                if (*pp == sb) {
                        *pp = sb->next;
                        sb->next = NULL;
                        return;
                }
}

static bool in_list(const warm_pool *w, const sandbox *sb) {
        for (const sandbox *it = w->items; it; it = it->next)
                if (it == sb)
                        return true;
        return false;
}

static void set_reason(warm_pool *w, const char *msg) {
        free(w->reason);
        w->reason = msg ? strdup(msg) : NULL;
}

/* The identity of runtime `name`'s tree now: a runtime deleted, or
 * imported again under the same name, is another tree. */
static int runtime_identity(const manager *m, const char *name, dev_t *ret_dev, ino_t *ret_ino) {
        _cleanup_free_ char *dir = runtime_dir(m, name);
        struct stat st;
        if (!dir)
                return -ENOMEM;
        if (stat(dir, &st) < 0)
                return negative_errno();
        *ret_dev = st.st_dev;
        *ret_ino = st.st_ino;
        return 0;
}

/* A pooled sandbox as start_work makes a fresh one (session.c). */
static sandbox *pool_sandbox_new(manager *m, warm_pool *w, sb_error **ret_err) {
        sandbox *sb = calloc(1, sizeof(*sb));
        if (!sb)
                return NULL;
        sb->m = m;
        sb->pooled = true;
        char rnd[17];
        core_random_hex(rnd, 16);
        if (asprintf(&sb->name, WARMPOOL_PREFIX "%s", rnd) < 0)
                sb->name = NULL;
        sb->runtime = strdup(w->runtime);
        sb->env = cJSON_CreateObject();
        sb->tags = cJSON_CreateObject();
        sb->ports = cJSON_CreateArray();
        sb->layers = cJSON_CreateArray();
        sb->sessions = cJSON_CreateArray();
        sb->policy = cJSON_CreateString("deny-all");
        sb->timeout_ms = m->cfg->default_timeout_ms;
        sb->userns = m->userns_default;
        sb->vcpus = 1;
        sb->disk_mib = m->cfg->disk_mib;
        core_random_hex(sb->id, 32);
        sb->created_ms = core_now_ms();
        sb->status = "pending";
        if (!sb->name || !sb->runtime || !sb->env || !sb->tags || !sb->ports || !sb->layers || !sb->sessions ||
            !sb->policy || asprintf(&sb->dir, "%s/%s", m->sandboxes_dir, sb->name) < 0 ||
            asprintf(&sb->run_dir, "%s/%s", m->run_sandboxes_dir, sb->name) < 0) {
                sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                sandbox_free(sb);
                return NULL;
        }
        if (pol_policy_parse(sb->policy, &sb->pol, ret_err) < 0 ||
            runtime_check(m, NULL, sb->runtime, "warmPool.runtime", ret_err) < 0 || userns_assign(m, sb, ret_err) < 0) {
                sandbox_free(sb);
                return NULL;
        }
        int r = runtime_identity(m, sb->runtime, &sb->pool_rt_dev, &sb->pool_rt_ino);
        if (r < 0) {
                sb_error_set(ret_err, r, NULL, "warmPool.runtime", "runtime '%s': %s", sb->runtime, strerror(-r));
                sandbox_free(sb);
                return NULL;
        }
        return sb;
}

static int pool_start_one(manager *m, warm_pool *w, sb_error **ret_err) {
        sandbox *sb = pool_sandbox_new(m, w, ret_err);
        if (!sb)
                return ret_err && *ret_err ? (*ret_err)->code : -ENOMEM;
        start_job *j = start_job_new(sb, true);
        cJSON *conf = j ? sandbox_config_json(sb) : NULL;
        if (j)
                j->config_text = conf ? cJSON_Print(conf) : NULL;
        cJSON_Delete(conf);
        if (!j || !j->config_text) {
                start_job_free(j);
                sandbox_free(sb);
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        j->pool_ca = !streq(w->policy, "deny-all");
        if (session_start(sb, j) < 0) {
                if (ret_err && j->err) {
                        *ret_err = j->err;
                        j->err = NULL;
                }
                start_job_free(j);
                sandbox_free(sb);
                return ret_err && *ret_err ? (*ret_err)->code : -EIO;
        }
        sb->next = w->items;
        w->items = sb;
        return 0;
}

static int on_retry(sd_event_source *src, uint64_t usec, void *userdata) {
        manager *m = userdata;
        warm_pool *w = m->warm_pool;
        (void)src;
        (void)usec;
        w->retry_src = sd_event_source_disable_unref(w->retry_src);
        pool_refill(m);
        return 0;
}

/* Starts sessions until the pool holds `size` (ready or starting), one
 * at a time; after failures, again only when the back-off timer fires. */
static void pool_refill(manager *m) {
        warm_pool *w = m->warm_pool;
        if (!w || m->stopping || w->retry_src)
                return;
        unsigned have = 0;
        for (const sandbox *sb = w->items; sb; sb = sb->next)
                have++;
        while (have < w->size && count_starting(w) < POOL_PARALLEL_STARTS) {
                _cleanup_error_ sb_error *err = NULL;
                if (pool_start_one(m, w, &err) < 0) {
                        if (!err)
                                sb_error_set(&err, -ENOMEM, NULL, NULL, "out of memory");
                        warmpool_forget(m, NULL, err);
                        return;
                }
                have++;
        }
}

int warmpool_init(manager *m) {
        unsigned size;
        const char *runtime, *policy;
        daemon_config_warm_pool(m->cfg, &size, &runtime, &policy);
        if (!size)
                return 0;
        warm_pool *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        w->size = size;
        w->runtime = strdup(runtime);
        w->policy = strdup(policy);
        if (!w->runtime || !w->policy) {
                free(w->runtime);
                free(w->policy);
                free(w);
                return -ENOMEM;
        }
        m->warm_pool = w;
        log_info("warm pool: keeping %u session(s) on runtime '%s' for %s creates", size, runtime, policy);
        pool_refill(m);
        return 0;
}

void warmpool_ready(manager *m, sandbox *sb) {
        warm_pool *w = m->warm_pool;
        if (!w || !in_list(w, sb)) {
                /* Not ours any more (the pool was freed): not kept. */
                sb->deleting = true;
                session_stop(sb);
                return;
        }
        w->failures = 0;
        set_reason(w, NULL);
        log_debug("warm pool: session %s ready", sb->name);
        pool_refill(m);
}

void warmpool_forget(manager *m, sandbox *sb, const sb_error *err) {
        warm_pool *w = m->warm_pool;
        if (!w)
                return;
        if (sb && in_list(w, sb))
                list_remove(w, sb);
        if (!err) {
                pool_refill(m);
                return;
        }
        /* The message can carry text from the host's files. */
        char safe[TEXT_LOG_BUF];
        text_for_log(err->message, safe, sizeof(safe));
        if (!w->reason || !streq(w->reason, safe))
                log_warning("warm pool: preparing a session failed: %s (creates take the cold path meanwhile)",
                            safe);
        set_reason(w, safe);
        w->failures++;
        uint64_t ms = POOL_RETRY_MIN_MS;
        for (unsigned i = 1; i < w->failures && ms < POOL_RETRY_MAX_MS; i++)
                ms *= 2;
        if (ms > POOL_RETRY_MAX_MS)
                ms = POOL_RETRY_MAX_MS;
        if (!w->retry_src &&
            sd_event_add_time_relative(m->event, &w->retry_src, CLOCK_MONOTONIC, ms * 1000, 10 * 1000, on_retry, m) < 0)
                log_warning("warm pool: cannot arm the refill timer; the pool refills at the next create");
}

/* Ends a pooled session nobody will use: SIGKILL to init; its end
 * (session_ended) tears down and removes it like a deleted sandbox. */
static void pool_discard(sandbox *sb) {
        session *s = sb->sess;
        sb->deleting = true;
        if (!s)
                return;
        s->stopping = true;
        if (s->pidfd >= 0)
                syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
}

/* Whether the create of sb (parsed by parse_create) can take a pooled
 * session: what the pool's sessions were made with is what that create
 * would make, but for the policy, applied at adoption (session_matches),
 * and nothing it asks for needs a step taken before init ran (a source,
 * layers, a disk size, a tmpfs size). A persistent
 * sandbox may: its later sessions are cold starts of its own files. */
static bool create_matches(const warm_pool *w, const sandbox *sb, const start_job *j) {
        /* A pooled session was started without volumes: a create that
         * mounts any takes the cold path. */
        return !j->src_type && cJSON_GetArraySize(sb->layers) == 0 && sb->vcpus == 1 &&
               cJSON_GetArraySize(sb->volumes) == 0 && streq(sb->runtime, w->runtime);
}

/* Whether pooled p still stands on the tree its runtime's name holds. */
static bool runtime_current(const manager *m, const sandbox *p) {
        dev_t dev;
        ino_t ino;
        return runtime_identity(m, p->runtime, &dev, &ino) >= 0 && dev == p->pool_rt_dev && ino == p->pool_rt_ino &&
               runtime_check((manager *)m, NULL, p->runtime, "runtime", NULL) >= 0;
}

/* Whether ready pooled p can serve no create any more: made on a runtime
 * tree since deleted or replaced, on a host runtime version since
 * replaced, with a diskMiB since reloaded, or without an address (the
 * network pool was full) for a pool that serves networked creates. */
static bool is_stale(const manager *m, const warm_pool *w, const sandbox *p) {
        if (!runtime_current(m, p) || p->disk_mib != m->cfg->disk_mib || p->userns != m->userns_default)
                return true;
        if (runtime_is_host(p) && !streq(p->sess->runtime_version, m->host_version))
                return true;
        return !streq(w->policy, "deny-all") && p->sess->net_slot < 0;
}

/* The policy mode is applied at adoption (session_pool_network), any
 * mode on any pooled session that session_pool_fits: the pool's policy
 * only says which sessions to prepare (a CA for a networked one). */
static bool session_matches(const sandbox *p, const sandbox *sb) {
        return is_ready(p) && p->userns == sb->userns && p->disk_mib == sb->disk_mib &&
               session_pool_fits(p->sess, sandbox_policy_mode(sb));
}

/* Moves the session of pooled p to sb before the commit, or back. */
static void session_give(sandbox *from, sandbox *to) {
        session *s = from->sess;
        to->sess = s;
        from->sess = NULL;
        s->sb = to;
        free(to->dir);
        free(to->run_dir);
        to->dir = TAKE_PTR(from->dir);
        to->run_dir = TAKE_PTR(from->run_dir);
        to->userns_base = from->userns_base;
        from->userns_base = 0;
}

/* Removes dir/name; a file already gone is no error, nor any other
 * failure (a write over it follows, which reports its own). */
static void unlink_in(const char *dir, const char *name) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/%s", dir, name) >= 0)
                (void)unlink(path);
}

static int rename_noreplace(const char *from, const char *to) {
        return renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) < 0 ? negative_errno() : 0;
}

/* The adoption's steps: the run directory renamed first (netd, started
 * for a custom policy, is given its final paths: its policy file, which a
 * live update rewrites, and its CA), then the session relabelled and its
 * network made, the config and record written, and the state directory
 * renamed last: the commit. On failure p has its session back, its run
 * directory where it is now (to be discarded), and sb is as given. */
static int adopt(manager *m, sandbox *p, sandbox *sb, sb_error **ret_err) {
        _cleanup_free_ char *dir = NULL, *run_dir = NULL;
        if (asprintf(&dir, "%s/%s", m->sandboxes_dir, sb->name) < 0 ||
            asprintf(&run_dir, "%s/%s", m->run_sandboxes_dir, sb->name) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        session_give(p, sb);
        session *s = sb->sess;
        snprintf(s->cgroup_name, sizeof(s->cgroup_name), "%s", p->name);
        core_random_hex(s->id, 32);
        s->started_ms = core_now_ms();
        core_random_hex(sb->id, 32);
        sb->created_ms = s->started_ms;
        sb->expires_ms = s->started_ms + sb->timeout_ms;
        int r;
        /* Nothing but this session has used the pooled run directory's
         * paths since its init started (the agent socket is connected). */
        if ((r = rename_noreplace(sb->run_dir, run_dir)) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "rename %s: %s", sb->run_dir, strerror(-r));
                goto undo;
        }
        SWAP(sb->run_dir, run_dir);  /* run_dir: the pooled path, for an undo */
        core_fault("pool.run_renamed");
        if ((r = session_pool_relabel(s, ret_err)) < 0)
                goto undo_run;
        core_fault("pool.relabeled");
        /* The limits of now, when pidsMax was reloaded since the pooled
         * cgroup was made: its memory and CPU limits are those of 1 vCPU,
         * as sb's (create_matches). */
        core_cgroup_limits lim = {.pids_max = m->cfg->pids_max,
                                  .memory_max = (uint64_t)sb->vcpus * 2048ULL * 1024 * 1024,
                                  .cpu_quota_pct = sb->vcpus * 100};
        if ((p->pool_pids_max != lim.pids_max || sb->vcpus != 1) &&
            (r = core_cgroup_update(s->cg, &lim, &lim, ret_err)) < 0)
                goto undo_run;
        if ((r = session_pool_network(s, ret_err)) < 0)
                goto undo_run;
        core_fault("pool.network");
        if ((r = core_fault_error("pool.adopt")) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "injected failure");
                goto undo_run;
        }
        metrics_usage_rebase(sb); /* nothing of the refill counts as the sandbox's (kept in the record) */
        /* The pooled config and record go, and new ones of the same names
         * are written: a rename over an existing file makes ext4 start the
         * new one's writeback (auto_da_alloc, ext4(5)), a block write on
         * the create's path. Nothing reads them before the commit: a
         * daemon killed before it removes the pooled state directory and
         * the renamed run directory (reconcile). */
        unlink_in(sb->dir, "config.json");
        unlink_in(sb->run_dir, RESTORE_RECORD_NAME);
        if ((r = sandbox_save_config(sb, NULL, ret_err)) < 0 || (r = restore_save_record(s)) < 0) {
                if (ret_err && !*ret_err)
                        sb_error_set(ret_err, r, NULL, NULL, "write the session record: %s", strerror(-r));
                goto undo_run;
        }
        core_fault("pool.recorded");
        /* The commit: from here a restarted daemon re-adopts sandbox sb. */
        if ((r = rename_noreplace(sb->dir, dir)) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "rename %s: %s", sb->dir, strerror(-r));
                goto undo_run;
        }
        free(sb->dir);
        sb->dir = TAKE_PTR(dir);
        /* A persistent sandbox outlives a power loss only if the rename
         * does (rename(2) is atomic, not durable, until its directory is
         * synced); a non-persistent one does not outlive a reboot anyway. */
        if (sb->persistent) {
                _cleanup_close_ int pfd = open(m->sandboxes_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (pfd < 0 || fsync(pfd) < 0)
                        log_warning("sandbox '%s': sync %s: %m", sb->name, m->sandboxes_dir);
        }
        core_fault("pool.committed");
        return 0;
undo_run:
        /* Back where p's teardown expects it; if that fails, p's teardown
         * removes it where it is. */
        if (rename_noreplace(sb->run_dir, run_dir) >= 0)
                SWAP(sb->run_dir, run_dir);
undo:
        s->cgroup_name[0] = '\0';
        session_give(sb, p);
        return r;
}

bool warmpool_try_adopt(manager *m, rpc_request *req, sandbox *sb, const start_job *j, rpc_handler on_ready) {
        warm_pool *w = m->warm_pool;
        /* A pooled session has a network namespace of its own; a pod's
         * sandbox must be born in the pod's (pod.c). */
        if (!w || sandbox_is_pod(sb) || !create_matches(w, sb, j))
                return false;
        sandbox *p = NULL;
        for (sandbox *it = w->items; it && !p; it = it->next) {
                if (is_ready(it) && is_stale(m, w, it)) {
                        pool_discard(it);
                        continue;
                }
                if (session_matches(it, sb))
                        p = it;
        }
        if (!p) {
                w->missed++;
                pool_refill(m);
                return false;
        }
        list_remove(w, p);
        _cleanup_error_ sb_error *err = NULL;
        if (adopt(m, p, sb, &err) < 0) {
                char safe[TEXT_LOG_BUF];
                log_warning("create sandbox '%s': the warm pool session could not be adopted (%s); taking the cold "
                            "path", sb->name, text_for_log(err ? err->message : "failed", safe, sizeof(safe)));
                /* Listed until its session has ended (warmpool_forget). */
                p->next = w->items;
                w->items = p;
                pool_discard(p);
                return false;
        }
        sandbox_free(p);
        session *s = sb->sess;
        sb->status = "running";
        cJSON *h = cJSON_CreateObject();
        char buf[40];
        cJSON_AddStringToObject(h, "id", s->id);
        cJSON_AddStringToObject(h, "status", "running");
        cJSON_AddStringToObject(h, "startedAt", core_format_time(s->started_ms, buf, sizeof(buf)));
        cJSON_AddNullToObject(h, "endedAt");
        cJSON_AddItemToArray(sb->sessions, h);
        sb->next = m->sandboxes;
        m->sandboxes = sb;
        if (session_pool_activate(sb) < 0)
                log_warning("sandbox '%s': its timeout timer could not be armed", sb->name);
        w->adopted++;
        /* The effective name (generated when omitted) for the answer. */
        cJSON_DeleteItemFromObject(req->params, "name");
        cJSON_AddStringToObject(req->params, "name", sb->name);
        core_fault("pool.adopted");
        on_ready(req, m);
        if (!w->retry_src &&
            sd_event_add_time_relative(m->event, &w->retry_src, CLOCK_MONOTONIC, POOL_REFILL_DELAY_MS * 1000,
                                       10 * 1000, on_retry, m) < 0)
                pool_refill(m);
        return true;
}

cJSON *warmpool_info(const manager *m) {
        const warm_pool *w = m->warm_pool;
        unsigned size;
        const char *runtime, *policy;
        daemon_config_warm_pool(m->cfg, &size, &runtime, &policy);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "size", w ? w->size : 0);
        cJSON_AddStringToObject(o, "runtime", w ? w->runtime : runtime);
        cJSON_AddStringToObject(o, "policy", w ? w->policy : policy);
        cJSON_AddNumberToObject(o, "ready", w ? count_ready(w) : 0);
        cJSON_AddNumberToObject(o, "starting", w ? count_starting(w) : 0);
        cJSON_AddNumberToObject(o, "adopted", w ? (double)w->adopted : 0);
        cJSON_AddNumberToObject(o, "missed", w ? (double)w->missed : 0);
        if (w && w->reason)
                cJSON_AddStringToObject(o, "reason", w->reason);
        return o;
}

void warmpool_discard_runtime(manager *m, const char *name) {
        for (sandbox *sb = m->warm_pool ? m->warm_pool->items : NULL; sb; sb = sb->next)
                if (streq(sb->runtime, name) && sb->sess)
                        pool_discard(sb);
}

bool warmpool_userns_taken(const manager *m, uint32_t base) {
        for (const sandbox *sb = m->warm_pool ? m->warm_pool->items : NULL; sb; sb = sb->next)
                if (sb->userns_base == base)
                        return true;
        return false;
}

bool warmpool_host_version_in_use(const manager *m, const char *version) {
        for (const sandbox *sb = m->warm_pool ? m->warm_pool->items : NULL; sb; sb = sb->next)
                if (!sb->sess || streq(sb->sess->runtime_version, version))
                        return true;  /* one still starting may be on any version */
        return false;
}

void warmpool_stop_all(manager *m) {
        warm_pool *w = m->warm_pool;
        if (!w)
                return;
        w->retry_src = sd_event_source_disable_unref(w->retry_src);
        /* Ready ones now; one still starting is left to its worker, and
         * to the next start-up's sweep if the daemon exits first. */
        for (sandbox **pp = &w->items; *pp;) {
                sandbox *sb = *pp;
                if (!sb->sess || is_starting(sb)) {
                        pp = &sb->next;
                        continue;
                }
                *pp = sb->next;
                session_destroy_now(sb);
                sandbox_free(sb);
        }
}

void warmpool_free(manager *m) {
        warm_pool *w = m->warm_pool;
        if (!w)
                return;
        warmpool_stop_all(m);
        /* Starting ones are the workers' until start_done, which finds
         * no pool and stops them. */
        m->warm_pool = NULL;
        free(w->runtime);
        free(w->policy);
        free(w->reason);
        free(w);
}
