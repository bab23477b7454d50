/* sandbox.* methods: validation of create parameters, the registry view
 * (get, list), stop, delete, timeouts, update, getOrCreate, and the saved
 * config of each sandbox. Sessions themselves live in session.c. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include "libcore/agent.h"
#include "libcore/container.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/source.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/metrics.h"
#include "sandboxd/remote.h"
#include "sandboxd/tenant.h"
#include "sandboxd/limits.h"
#include "sandboxd/text.h"
#include "sandboxd/worker.h"


/* ---- JSON view ---------------------------------------------------------- */

static void add_time(cJSON *o, const char *key, uint64_t ms) {
        char buf[40];
        if (ms)
                cJSON_AddStringToObject(o, key, core_format_time(ms, buf, sizeof(buf)));
        else
                cJSON_AddNullToObject(o, key);
}

/* session.cgroups: the host directories of the session's cgroup, one per
 * hierarchy (what a containerd shim reads for Pids and Stats), and
 * session.initPid, sandbox-init's host pid. */
static void session_cgroups_json(const session *s, cJSON *o) {
        const char *dirs[8];
        size_t n = core_cgroup_dirs(s->cg, dirs, 8);
        cJSON *a = cJSON_AddArrayToObject(o, "cgroups");
        for (size_t i = 0; i < n && i < 8; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(dirs[i]));
        if (s->pid > 0)
                cJSON_AddNumberToObject(o, "initPid", s->pid);
        cJSON_AddBoolToObject(o, "paused", s->paused);
        cJSON_AddStringToObject(o, "onTimeout", s->pause_on_timeout ? "pause" : "stop");
}

cJSON *sandbox_to_json(const sandbox *sb) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", sb->name);
        cJSON_AddStringToObject(o, "id", sb->id);
        /* Who made it (tenant.h); null: admin. Shown, never taken. */
        cJSON_AddItemToObject(o, "owner", sb->owner ? cJSON_CreateString(sb->owner) : cJSON_CreateNull());
        cJSON_AddStringToObject(o, "status", sb->status);
        cJSON_AddStringToObject(o, "runtime", sb->runtime);
        cJSON_AddItemToObject(o, "source", sb->source ? cJSON_Duplicate(sb->source, 1) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "ports", ports_json(sb));
        /* Host mounts (root's only): shown when it has some. */
        if (cJSON_GetArraySize(sb->mounts) > 0)
                cJSON_AddItemToObject(o, "mounts", cJSON_Duplicate(sb->mounts, 1));
        cJSON_AddNumberToObject(o, "timeout", (double)sb->timeout_ms);
        add_time(o, "expiresAt", sb->sess ? sb->expires_ms : 0);
        cJSON *res = cJSON_AddObjectToObject(o, "resources");
        cJSON_AddNumberToObject(res, "vcpus", sb->vcpus);
        if (sb->disk_mib)
                cJSON_AddNumberToObject(res, "diskMiB", (double)sb->disk_mib);
        cJSON_AddItemToObject(o, "env", cJSON_Duplicate(sb->env, 1));
        cJSON_AddItemToObject(o, "tags", cJSON_Duplicate(sb->tags, 1));
        /* Its volume mounts (volume.c), as given at create. */
        cJSON_AddItemToObject(o, "volumes", sb->volumes ? cJSON_Duplicate(sb->volumes, 1) : cJSON_CreateArray());
        /* Header values of rules carry credentials: never shown (DESIGN §3). */
        cJSON *pol = sb->pol ? pol_policy_to_json(sb->pol, true) : NULL;
        cJSON_AddItemToObject(o, "networkPolicy", pol ? pol : cJSON_CreateString("deny-all"));
        cJSON_AddNumberToObject(o, "denials", (double)sb->denials);
        cJSON_AddBoolToObject(o, "persistent", sb->persistent);
        cJSON_AddBoolToObject(o, "ready", !sb->not_ready);
        cJSON_AddItemToObject(o, "setup", ready_setup_json(sb));
        userns_to_json(sb, o);
        /* Only a pod sandbox has one (pod.c). */
        if (sb->netns_path) {
                cJSON *net = cJSON_AddObjectToObject(o, "network");
                cJSON_AddStringToObject(net, "netns", sb->netns_path);
        }
        add_time(o, "createdAt", sb->created_ms);
        cJSON_AddItemToObject(o, "sessions", cJSON_Duplicate(sb->sessions, 1));
        /* The running session's health: how often its sandbox-netd died
         * and was started again (session.c, netd supervision). */
        if (sb->sess) {
                cJSON *cur = cJSON_AddObjectToObject(o, "session");
                cJSON_AddStringToObject(cur, "id", sb->sess->id);
                cJSON_AddNumberToObject(cur, "netdRestarts", sb->sess->netd_restarts);
                session_cgroups_json(sb->sess, cur);
        } else
                cJSON_AddNullToObject(o, "session");
        return o;
}

cJSON *sandbox_config_json(const sandbox *sb) {
        cJSON *o = sandbox_to_json(sb);
        cJSON_AddItemToObject(o, "layers", sb->layers ? cJSON_Duplicate(sb->layers, 1) : cJSON_CreateArray());
        cJSON_ReplaceItemInObject(o, "ports", cJSON_Duplicate(sb->ports, 1));
        /* The config keeps the policy whole (it is re-applied on resume). */
        cJSON_ReplaceItemInObject(o, "networkPolicy", cJSON_Duplicate(sb->policy, 1));
        cJSON_DeleteItemFromObject(o, "denials");
        cJSON_DeleteItemFromObject(o, "status");
        cJSON_DeleteItemFromObject(o, "expiresAt");
        cJSON_DeleteItemFromObject(o, "sessions");
        cJSON_DeleteItemFromObject(o, "session");
        /* Readiness is kept (as "ready": false) only while a sandbox is not
         * ready; the setup claim is a connection's, never stored (ready.c). */
        cJSON_DeleteItemFromObject(o, "setup");
        /* The namespace's identity: a resume or restore refuses another. */
        if (sb->netns_path) {
                cJSON *net = cJSON_GetObjectItemCaseSensitive(o, "network");
                cJSON_AddNumberToObject(net, "dev", (double)sb->netns_dev);
                cJSON_AddNumberToObject(net, "ino", (double)sb->netns_ino);
        }
        if (!sb->not_ready)
                cJSON_DeleteItemFromObject(o, "ready");
        return o;
}

void session_history_update(sandbox *sb, const char *status, uint64_t ended_ms) {
        cJSON *last = cJSON_GetArrayItem(sb->sessions, cJSON_GetArraySize(sb->sessions) - 1);
        if (!last)
                return;
        cJSON_ReplaceItemInObject(last, "status", cJSON_CreateString(status));
        if (ended_ms) {
                char buf[40];
                cJSON_ReplaceItemInObject(last, "endedAt",
                                          cJSON_CreateString(core_format_time(ended_ms, buf, sizeof(buf))));
        }
}

void set_status(sandbox *sb, const char *status) {
        sb->status = status;
        session_history_update(sb, status, 0);
}

/* ---- registry ----------------------------------------------------------- */

void sandbox_free(sandbox *sb) {
        if (!sb)
                return;
        if (sb->name)
                metrics_forget_sandbox(sb->name);
        free(sb->name);
        free(sb->owner);
        free(sb->runtime);
        cJSON_Delete(sb->source);
        cJSON_Delete(sb->env);
        cJSON_Delete(sb->tags);
        cJSON_Delete(sb->ports);
        cJSON_Delete(sb->mounts);
        cJSON_Delete(sb->sessions);
        cJSON_Delete(sb->layers);
        cJSON_Delete(sb->volumes);
        cJSON_Delete(sb->policy);
        pol_policy_free(sb->pol);
        free(sb->dir);
        free(sb->run_dir);
        free(sb->netns_path);
        free(sb->stop_waiters.items);
        free(sb->delete_waiters.items);
        free(sb->setup_waiters.items); /* answered by ready_sandbox_gone / ready_conn_closed */
        rpc_conn_unref(sb->setup_conn);
        redo_list_clear(&sb->pending);
        free(sb);
}

void sandbox_unlink(manager *m, sandbox *sb) {
        for (sandbox **pp = &m->sandboxes; *pp; pp = &(*pp)->next)
                if (*pp == sb) {
                        *pp = sb->next;
                        return;
                }
}

int redo_list_add(redo_list *l, rpc_request *req, rpc_handler fn) {
        rpc_request **r = realloc(l->reqs, (l->n + 1) * sizeof(*r));
        if (r)
                l->reqs = r;
        rpc_handler *f = r ? realloc(l->fns, (l->n + 1) * sizeof(*f)) : NULL;
        if (!f)
                return -ENOMEM;
        l->fns = f;
        l->reqs[l->n] = req;
        l->fns[l->n++] = fn;
        return 0;
}

redo_list redo_list_take(redo_list *l) {
        redo_list t = *l;
        *l = (redo_list){0};
        return t;
}

void redo_list_clear(redo_list *l) {
        free(l->reqs);
        free(l->fns);
        *l = (redo_list){0};
}

/* Starts a new session on a stopped persistent sandbox; parked requests
 * run when it is up. */
static void start_resume(sandbox *sb) {
        start_job *j = start_job_new(sb, false);
        if (!j)
                return;
        log_info("sandbox '%s': resuming", sb->name);
        if (session_start(sb, j) < 0) {
                redo_list l = redo_list_take(&sb->pending);
                for (size_t i = 0; i < l.n; i++)
                        rpc_reply_sb_error(l.reqs[i], j->err);
                redo_list_clear(&l);
                start_job_free(j);
        }
}

sandbox *sandbox_require_running(rpc_request *req, manager *m, const char *field, rpc_handler redo) {
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        if (rpc_param_string(req, field, true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        sandbox *sb = manager_find_sandbox(m, name);
        /* Checked again here, as a request may wait and run again later
         * (redo) when the name may be another tenant's (tenant.c). */
        if (!sb || sb->deleting || !tenant_req_owns(m, req, sb->owner)) {
                reply_not_found(req, "sandbox", name);
                return NULL;
        }
        if (sb->sess && !sb->sess->stopping && streq(sb->status, "running"))
                return sb;
        /* Being created or resumed: wait for it. A stopped (or stopping)
         * persistent sandbox: resume it (DESIGN §3). */
        if (redo && (sb->starting || sb->persistent)) {
                if (redo_list_add(&sb->pending, req, redo) < 0) {
                        rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                        return NULL;
                }
                if (!sb->starting && !sb->sess)
                        start_resume(sb);
                return NULL;
        }
        rpc_reply_error(req, RPC_APP_ERROR, "sandbox_stopped", NULL,
                        "sandbox '%s' is %s; create a new one (a persistent one resumes on use)", name, sb->status);
        return NULL;
}

sandbox *sandbox_require_unpaused(rpc_request *req, manager *m, const char *field, rpc_handler redo) {
        sandbox *sb = sandbox_require_running(req, m, field, redo);
        if (sb && sb->sess->paused) {
                /* Its sandbox-init is frozen: the request would wait for a
                 * resume that may never come, and a daemon restart in that
                 * wait would lose its answer but not its effect. */
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", field,
                                "sandbox '%s' is paused (sandbox.pause); resume it (sandbox.resume) first", sb->name);
                return NULL;
        }
        return sb;
}

int sandbox_open_upper(const sandbox *sb) {
        _cleanup_close_ int dir = open(sb->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0)
                return negative_errno();
        return core_open_beneath(dir, "upper", O_RDONLY | O_DIRECTORY, 0);
}

int sandbox_save_config(const sandbox *sb, const char *text, sb_error **ret_err) {
        _cleanup_free_ char *own = NULL, *path = NULL;
        if (!text) {
                cJSON *conf = sandbox_config_json(sb);
                own = cJSON_Print(conf);
                cJSON_Delete(conf);
                text = own;
        }
        if (!text || asprintf(&path, "%s/config.json", sb->dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* Only a persistent sandbox outlives a crash (DESIGN §7); the others
         * are removed at the next start anyway, so they skip the fsync. */
        int r = (sb->persistent ? core_write_file_atomic : core_write_file_replace)(path, text, strlen(text), 0600);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", path, strerror(-r));
        return 0;
}

/* ---- create: validation (loop thread) ------------------------------------ */

static int dup_str(cJSON *obj, const char *key, char **ret) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!v || cJSON_IsNull(v))
                return 0;
        if (!cJSON_IsString(v))
                return -EINVAL;
        *ret = strdup(v->valuestring);
        return *ret ? 0 : -ENOMEM;
}

static int parse_source(start_job *j, cJSON *src, sb_error **ret_err) {
        static const char *const git_keys[] = {"type", "url", "depth", "revision", "username", "password"};
        static const char *const tar_keys[] = {"type", "url", "path"};
        if (!cJSON_IsObject(src))
                return sb_error_set(ret_err, -EINVAL, NULL, "source", "source: must be an object with a type");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "type"));
        if (type && streq(type, "snapshot")) {
                /* The filesystem of a snapshot: its layers, shared read-only.
                 * An unknown id is an error, never a fallback to another. */
                cJSON *it;
                cJSON_ArrayForEach(it, src)
                        if (!streq(it->string, "type") && !streq(it->string, "snapshotId"))
                                return sb_error_set(ret_err, -EINVAL, NULL, "source",
                                                    "source.%s: unknown key for a snapshot source", TEXT_Q(it->string));
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "snapshotId"));
                if (!id)
                        return sb_error_set(ret_err, -EINVAL, NULL, "source.snapshotId",
                                            "source.snapshotId: a string is required");
                snapshot *snap = manager_find_snapshot(j->m, id);
                if (!snap)
                        return sb_error_set(ret_err, -ENOENT, "not_found", "source.snapshotId",
                                            "snapshot '%s' not found (sandboxctl snapshots lists them)", TEXT_Q(id));
                /* Kept only for the sandboxes already on it (snapshot.c). */
                if (snap->expired)
                        return sb_error_set(ret_err, -ENOENT, "not_found", "source.snapshotId",
                                            "snapshot '%s' has expired", TEXT_Q(id));
                cJSON_Delete(j->sb->layers);
                j->sb->layers = cJSON_Duplicate(snap->layers, 1);
                return 0;
        }
        if (!type || (!streq(type, "git") && !streq(type, "tarball")))
                return sb_error_set(ret_err, -EINVAL, NULL, "source.type",
                                    "source.type: must be \"git\", \"tarball\" or \"snapshot\"");
        bool git = streq(type, "git");
        const char *const *keys = git ? git_keys : tar_keys;
        size_t nkeys = git ? ELEMENTSOF(git_keys) : ELEMENTSOF(tar_keys);
        cJSON *it;
        cJSON_ArrayForEach(it, src) {
                bool known = false;
                for (size_t i = 0; i < nkeys; i++)
                        known = known || streq(it->string, keys[i]);
                if (!known)
                        return sb_error_set(ret_err, -EINVAL, NULL, "source",
                                            "source.%s: unknown key for a %s source", TEXT_Q(it->string), type);
        }
        j->src_type = strdup(type);
        if (git) {
                if (dup_str(src, "url", &j->url) < 0 || !j->url)
                        return sb_error_set(ret_err, -EINVAL, NULL, "source.url", "source.url: a string is required");
                if (dup_str(src, "revision", &j->revision) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, "source.revision", "source.revision: must be a string");
                if (dup_str(src, "username", &j->username) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, "source.username", "source.username: must be a string");
                if (dup_str(src, "password", &j->password) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, "source.password", "source.password: must be a string");
                cJSON *d = cJSON_GetObjectItemCaseSensitive(src, "depth");
                if (d && !cJSON_IsNull(d)) {
                        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e9 ||
                            d->valuedouble != (double)(unsigned)d->valuedouble)
                                return sb_error_set(ret_err, -EINVAL, NULL, "source.depth",
                                                    "source.depth: must be a whole number >= 0");
                        j->depth = (unsigned)d->valuedouble;
                }
                /* Refused before anything runs: ext::, option-looking URLs. */
                int r = core_git_url_check(j->url, ret_err);
                if (r < 0) {
                        if (*ret_err) {
                                free((*ret_err)->reason);
                                (*ret_err)->reason = NULL;
                                free((*ret_err)->field);
                                (*ret_err)->field = strdup("source.url");
                        }
                        return r;
                }
                return 0;
        }
        char *path = NULL;
        if (dup_str(src, "url", &j->url) < 0 || dup_str(src, "path", &path) < 0)
                return sb_error_set(ret_err, -EINVAL, NULL, "source.url", "source.url/source.path: must be a string");
        if (!!j->url == !!path) {
                free(path);
                return sb_error_set(ret_err, -EINVAL, NULL, "source.url",
                                    "source: a tarball source takes exactly one of url or path");
        }
        const char *field = j->url ? "source.url" : "source.path";
        if (path)
                j->url = path;
        int r = core_tarball_location_check(j->url, ret_err);
        if (r < 0 && *ret_err) {
                free((*ret_err)->reason);
                (*ret_err)->reason = NULL;
                free((*ret_err)->field);
                (*ret_err)->field = strdup(field);
        }
        return r;
}

/* The source as shown by sandbox.get: never the password. */
static cJSON *source_view(const start_job *j, cJSON *src) {
        if (!src)
                return NULL;
        cJSON *o = cJSON_Duplicate(src, 1);
        if (cJSON_GetObjectItemCaseSensitive(o, "password"))
                cJSON_ReplaceItemInObject(o, "password", cJSON_CreateString("<redacted>"));
        return o;
}

static int parse_string_map(rpc_request *req, const char *field, const limit_map *lim, cJSON **ret,
                            sb_error **ret_err) {
        cJSON *o = NULL;
        int r = rpc_param_object(req, field, false, &o, ret_err);
        if (r < 0)
                return r;
        if (!o) {
                *ret = cJSON_CreateObject();
                return 0;
        }
        if ((r = limit_check_map(o, field, lim, ret_err)) < 0)
                return r;
        *ret = cJSON_Duplicate(o, 1);
        return *ret ? 0 : sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
}

/* The runtime of a new sandbox: the one asked for, else a snapshot
 * source's own (its layers only make sense on the runtime they were taken
 * on, so another is refused), else `host`. It must exist. */
static int create_runtime(manager *m, const rpc_request *req, const cJSON *src, const char **runtime,
                          sb_error **ret_err) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "type"));
        if (type && streq(type, "snapshot")) {
                snapshot *snap = manager_find_snapshot(m, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "snapshotId")));
                const char *own = snap ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(snap->config, "runtime")) : NULL;
                own = own ? own : "host";
                if (*runtime && !streq(*runtime, own))
                        return sb_error_set(ret_err, -EINVAL, NULL, "runtime",
                                            "runtime: snapshot '%s' was taken on runtime '%s', not '%s'",
                                            snap ? snap->id : "?", own, TEXT_Q(*runtime));
                *runtime = own;
        }
        if (!*runtime)
                *runtime = "host";
        return runtime_check(m, req, *runtime, "runtime", ret_err);
}

static int parse_create(manager *m, rpc_request *req, sandbox *sb, start_job *j, sb_error **ret_err) {
        const daemon_config *cfg = m->cfg;
        const char *name = NULL, *runtime = NULL;
        int64_t timeout = (int64_t)cfg->default_timeout_ms;
        bool persistent = false;
        bool userns = m->userns_default;  /* absent: the daemon's default */
        cJSON *policy = NULL, *src = NULL, *res = NULL, *ports = NULL;
        int r;
        if ((r = rpc_param_string(req, "name", false, &name, ret_err)) < 0 ||
            (r = rpc_param_string(req, "runtime", false, &runtime, ret_err)) < 0 ||
            (r = rpc_param_duration_ms(req, "timeout", false, 1000, (int64_t)cfg->max_timeout_ms, &timeout, ret_err)) < 0 ||
            (r = rpc_param_bool(req, "persistent", &persistent, ret_err)) < 0 ||
            (r = rpc_param_bool(req, "userns", &userns, ret_err)) < 0 ||
            (r = rpc_param_bool(req, "progress", &j->progress, ret_err)) < 0 ||
            (r = rpc_param_object(req, "resources", false, &res, ret_err)) < 0 ||
            (r = rpc_param_array(req, "ports", false, &ports, ret_err)) < 0 ||
            (r = parse_string_map(req, "env", &limit_env, &sb->env, ret_err)) < 0 ||
            (r = parse_string_map(req, "tags", &limit_tags, &sb->tags, ret_err)) < 0)
                return r;
        if ((r = snapshot_userns_check(m, req->params, userns, ret_err)) < 0)
                return r;
        if (name && !core_name_is_valid(name))
                return sb_error_set(ret_err, -EINVAL, NULL, "name",
                                    "name: '%s' is not valid; use 1-63 of a-z, 0-9 and '-', starting with a letter or digit",
                                    TEXT_Q(name));
        sb->vcpus = 1;
        if (res) {
                cJSON *v = cJSON_GetObjectItemCaseSensitive(res, "vcpus");
                if (v && (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > cfg->max_vcpus ||
                          v->valuedouble != (double)(unsigned)v->valuedouble))
                        return sb_error_set(ret_err, -EINVAL, NULL, "resources.vcpus",
                                            "resources.vcpus: must be a whole number from 1 to %u", cfg->max_vcpus);
                if (v)
                        sb->vcpus = (unsigned)v->valuedouble;
        }
        if ((r = sandbox_parse_disk(cfg, res, &sb->disk_mib, ret_err)) < 0)
                return r;
        if ((r = ports_parse(ports, &sb->ports, ret_err)) < 0)
                return r;
        if ((r = volumes_parse_mounts(m, req, cJSON_GetObjectItemCaseSensitive(req->params, "volumes"), &sb->volumes,
                                      ret_err)) < 0)
                return r;
        /* Host mounts: root on the local socket only, each one under
         * hostMountRoots and resolved now, so a bad one is refused naming
         * it before anything is made (container.c). */
        cJSON *mounts = cJSON_GetObjectItemCaseSensitive(req->params, "mounts");
        if (mounts && !cJSON_IsNull(mounts)) {
                if ((r = container_mounts_check(m, req, mounts, ret_err)) < 0 ||
                    (r = container_mounts_userns_check(mounts, userns, ret_err)) < 0)
                        return r;
                if (cJSON_GetArraySize(mounts) > 0 && !(sb->mounts = cJSON_Duplicate(mounts, 1)))
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        policy = cJSON_GetObjectItemCaseSensitive(req->params, "networkPolicy");
        /* None given (absent or null): the operator's daemon.json
         * defaultNetworkPolicy, else allow-all (DESIGN §5.1 rule 1). A
         * snapshot's or a fork's own policy was filled in before this. */
        if (!policy || cJSON_IsNull(policy))
                policy = cfg->default_network_policy;
        /* Fail closed: a policy that does not validate is refused whole,
         * with the field and the fix (DESIGN §5.1 rule 8). */
        if ((r = pol_policy_parse(policy, &sb->pol, ret_err)) < 0)
                return r;
        sb->policy = policy ? cJSON_Duplicate(policy, 1) : cJSON_CreateString("allow-all");
        src = cJSON_GetObjectItemCaseSensitive(req->params, "source");
        if (src && !cJSON_IsNull(src)) {
                if ((r = parse_source(j, src, ret_err)) < 0)
                        return r;
                j->source_guarded = remote_conn_is_tenant(req->conn);
                /* A local tenant reads a local source only as far as its
                 * own uid may (core_source_set_local_peer). */
                tenant t;
                tenant_of_conn(m->cfg, req->conn, &t);
                /* A local path only beneath the tenant's roots (a remote
                 * tenant without its own: none, and refused before,
                 * tenant.c check_source). */
                if (tenant_roots(m->cfg, &t, "source", &j->source_roots, NULL) < 0 &&
                    !(j->source_roots = calloc(1, sizeof(char *))))
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                if (!t.admin && !t.remote && req->conn) {
                        j->source_as_peer = true;
                        j->source_peer.uid = rpc_conn_uid(req->conn);
                        j->source_peer.gid = rpc_conn_gid(req->conn);
                        if ((r = rpc_conn_peer_groups(req->conn, &j->source_peer_groups,
                                                      &j->source_peer.n_groups)) < 0)
                                return sb_error_set(ret_err, r, "failed", NULL, "the client's groups: %s",
                                                    strerror(-r));
                        j->source_peer.groups = j->source_peer_groups;
                }
                sb->source = source_view(j, src);
        }
        if ((r = create_runtime(m, req, src, &runtime, ret_err)) < 0)
                return r;
        /* A pod's network namespace (pod.c): checked and opened here, on
         * the loop, so the refusal names the field before anything is made. */
        if ((r = pod_parse_network(m, req, sb, &j->pod_netns, ret_err)) < 0)
                return r;
        if (sandbox_is_pod(sb) && (r = pod_policy_check(sb->pol, ret_err)) < 0)
                return r;
        char rnd[17];
        if (name)
                sb->name = strdup(name);
        else {
                core_random_hex(rnd, 8);
                if (asprintf(&sb->name, "sbx-%s", rnd) < 0)
                        sb->name = NULL;
        }
        sb->runtime = strdup(runtime);
        sb->timeout_ms = (uint64_t)timeout;
        sb->persistent = persistent;
        sb->userns = userns;

        return sb->name && sb->runtime && sb->policy ? 0 : sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
}

int sandbox_params_validate(manager *m, cJSON *params, sb_error **ret_err) {
        sandbox *sb = calloc(1, sizeof(*sb));
        if (sb)
                sb->m = m;
        start_job *j = sb ? start_job_new(sb, true) : NULL;
        int r = -ENOMEM;
        if (!j)
                sb_error_set(ret_err, r, NULL, NULL, "out of memory");
        else {
                rpc_request req = {.params = params};
                r = parse_create(m, &req, sb, j, ret_err);
        }
        start_job_free(j);
        sandbox_free(sb);
        return r;
}

const char *sandbox_policy_mode(const sandbox *sb) {
        if (!sb->pol || sb->pol->mode == POL_MODE_DENY_ALL)
                return "deny-all";
        return sb->pol->mode == POL_MODE_ALLOW_ALL ? "allow-all" : "custom";
}

static sandbox *find_by_param(rpc_request *req, manager *m) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req->params, "name"));
        sandbox *sb = name ? manager_find_sandbox(m, name) : NULL;
        /* A request that waited may find the name another's by now. */
        return sb && tenant_req_owns(m, req, sb->owner) ? sb : NULL;
}

/* Redo handlers: answer once the new session runs. */
void reply_sandbox(rpc_request *req, void *userdata) {
        sandbox *sb = find_by_param(req, userdata);
        if (!sb)
                reply_not_found(req, "sandbox", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req->params, "name")));
        else
                rpc_reply(req, sandbox_to_json(sb));
}

static void reply_get_or_create(rpc_request *req, void *userdata, bool created) {
        sandbox *sb = find_by_param(req, userdata);
        if (!sb) {
                reply_not_found(req, "sandbox", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req->params, "name")));
                return;
        }
        /* Answered now, or once its setup is done (ready.c). */
        ready_answer(req, sb, created);
}

static void reply_created(rpc_request *req, void *m) { reply_get_or_create(req, m, true); }
static void reply_existing(rpc_request *req, void *m) { reply_get_or_create(req, m, false); }

/* Validates, registers (pending) and starts a new sandbox; `on_ready`
 * answers the request once it runs. */
void create_sandbox(rpc_request *req, manager *m, rpc_handler on_ready, const cJSON *layers) {
        _cleanup_error_ sb_error *err = NULL;
        sandbox *sb = calloc(1, sizeof(*sb));
        if (sb)
                sb->m = m;
        start_job *j = sb ? start_job_new(sb, true) : NULL;
        if (!sb || !j) {
                free(sb);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        sb->sessions = cJSON_CreateArray();
        if (cJSON_IsObject(req->params))
                snapshot_config_defaults(m, req->params);
        if (parse_create(m, req, sb, j, &err) < 0) {
                rpc_reply_sb_error(req, err);
                goto drop;
        }
        /* The owner is the client's identity, never a param (tenant.h);
         * its limits are checked here, where the sandbox is registered, so
         * concurrent creates and forks cannot pass them together. */
        {
                tenant t;
                tenant_of_conn(m->cfg, req->conn, &t);
                if (tenant_check_new_sandbox(m, req, sb, &err) < 0) {
                        rpc_reply_sb_error(req, err);
                        goto drop;
                }
                if (!t.admin && !(sb->owner = strdup(t.name))) {
                        rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                        goto drop;
                }
        }
        /* "progress": true, with a source to fetch: sandbox.progress
         * notifications on this connection until the answer. */
        if (j->progress && j->src_type && req->conn)
                j->progress_conn = rpc_conn_ref(req->conn);
        if (layers) {
                cJSON_Delete(sb->layers);
                sb->layers = cJSON_Duplicate(layers, 1);
        }
        /* getOrCreate with setup: not ready until its creator says so. */
        sb->not_ready = ready_setup_wanted(req);
        if (!sb->layers)
                sb->layers = cJSON_CreateArray();
        if (manager_find_sandbox(m, sb->name)) {
                rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                "sandbox '%s' already exists; pick another name or delete it first", sb->name);
                goto drop;
        }
        /* A matching create takes a prepared session (warmpool.c); any
         * other, or any failure there, goes on below. */
        if (warmpool_try_adopt(m, req, sb, j, on_ready)) {
                start_job_free(j);
                return;
        }
        if (userns_assign(m, sb, &err) < 0) {
                rpc_reply_sb_error(req, err);
                goto drop;
        }
        core_random_hex(sb->id, 32);
        sb->created_ms = core_now_ms();
        sb->status = "pending";
        cJSON *conf = sandbox_config_json(sb);
        j->config_text = cJSON_Print(conf);
        cJSON_Delete(conf);
        /* The effective name (generated when omitted) for the redo handler. */
        cJSON_DeleteItemFromObject(req->params, "name");
        cJSON_AddStringToObject(req->params, "name", sb->name);
        if (!j->config_text || asprintf(&sb->dir, "%s/%s", m->sandboxes_dir, sb->name) < 0 ||
            asprintf(&sb->run_dir, "%s/%s", m->run_sandboxes_dir, sb->name) < 0 ||
            redo_list_add(&sb->pending, req, on_ready) < 0) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                goto drop;
        }
        if (core_fault_error("create.start") < 0)
                sb_error_set(&j->err, -EIO, NULL, NULL, "create sandbox '%s': injected failure", sb->name);
        if (j->err || session_start(sb, j) < 0) {
                rpc_reply_sb_error(req, j->err);
                goto drop;
        }
        rpc_request_set_cancel(req, start_job_cancel, j);
        /* Registered while pending, so a concurrent create of the same name
         * answers already_exists and getOrCreate waits for this one. */
        sb->next = m->sandboxes;
        m->sandboxes = sb;
        return;
drop:
        redo_list_clear(&sb->pending); /* req was answered above, not by the list */
        sandbox_free(sb);
        start_job_free(j);
        /* A fork's new top layer (made for this create) is nobody's now;
         * layers still in use (its source's) stay. */
        if (layers)
                layers_collect(m, (cJSON *)layers, NULL, NULL);
}

static bool same_json(const cJSON *a, const cJSON *b) {
        return (!a && !b) || (a && b && cJSON_Compare(a, b, true));
}

/* The keys of `given` (create params as the caller sent them) whose value
 * differs from the existing sandbox `have`; `want` is `given` parsed by
 * parse_create. A key not given is no difference: absent means "any". */
static cJSON *config_differs(const cJSON *given, const sandbox *want, const sandbox *have) {
        cJSON *out = cJSON_CreateArray();
        const cJSON *k;
        cJSON_ArrayForEach(k, given) {
                const char *key = k->string;
                bool same = true;
                if (streq(key, "name"))
                        continue;
                else if (streq(key, "runtime"))
                        same = streq(want->runtime, have->runtime);
                else if (streq(key, "timeout"))
                        same = want->timeout_ms == have->timeout_ms;
                else if (streq(key, "resources"))
                        same = want->vcpus == have->vcpus;
                else if (streq(key, "persistent"))
                        same = want->persistent == have->persistent;
                else if (streq(key, "userns"))
                        same = want->userns == have->userns;
                else if (streq(key, "env"))
                        same = same_json(want->env, have->env);
                else if (streq(key, "tags"))
                        same = same_json(want->tags, have->tags);
                else if (streq(key, "ports"))
                        same = same_json(want->ports, have->ports);
                else if (streq(key, "volumes"))
                        same = same_json(want->volumes, have->volumes);
                else if (streq(key, "mounts"))
                        same = same_json(want->mounts, have->mounts) ||
                               (cJSON_GetArraySize(want->mounts) == 0 && cJSON_GetArraySize(have->mounts) == 0);
                else if (streq(key, "networkPolicy"))
                        same = same_json(want->policy, have->policy);
                else if (streq(key, "network"))
                        same = want->netns_path && have->netns_path && want->netns_dev == have->netns_dev &&
                               want->netns_ino == have->netns_ino;
                else if (streq(key, "source"))
                        /* Both as shown: a password is never compared. */
                        same = same_json(want->source, have->source);
                if (!same)
                        cJSON_AddItemToArray(out, cJSON_CreateString(key));
        }
        return out;
}

/* Runs create's validation of `req` on a scratch sandbox and drops it:
 * nothing is registered or started. With `existing`, *ret_differs gets the
 * keys given whose value is not the existing sandbox's (config_differs). */
static int validate_create(manager *m, rpc_request *req, const sandbox *existing, cJSON **ret_differs,
                           sb_error **ret_err) {
        sandbox *sb = calloc(1, sizeof(*sb));
        start_job *j = NULL;
        if (sb) {
                sb->m = m;
                j = start_job_new(sb, true);
        }
        /* What the caller gave, before a snapshot's config fills in the rest. */
        cJSON *given = cJSON_IsObject(req->params) ? cJSON_Duplicate(req->params, 1) : NULL;
        if (!sb || !j || (cJSON_IsObject(req->params) && !given)) {
                cJSON_Delete(given);
                start_job_free(j);
                sandbox_free(sb);
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        if (cJSON_IsObject(req->params))
                snapshot_config_defaults(m, req->params);
        int r = parse_create(m, req, sb, j, ret_err);
        if (r >= 0 && existing && ret_differs)
                *ret_differs = config_differs(given, sb, existing);
        cJSON_Delete(given);
        sandbox_free(sb);
        start_job_free(j);
        return r;
}

static void method_create(rpc_request *req, void *userdata) {
        create_sandbox(req, userdata, reply_sandbox, NULL);
}

/* created is true for exactly one of concurrent callers: the loop is
 * single-threaded and a sandbox is registered (pending) before the first
 * caller's handler returns; the others wait for it to run. */
static void method_get_or_create(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        if (rpc_param_string(req, "name", true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        bool setup = false;
        if (rpc_param_bool(req, "setup", &setup, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = manager_find_sandbox(m, name);
        if (!sb) {
                create_sandbox(req, m, reply_created, NULL);
                return;
        }
        /* Another tenant's name (tenant.c refuses it first; a request
         * parked for a setup runs here again): taken, without whose. */
        if (!tenant_req_owns(m, req, sb->owner)) {
                rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                "sandbox '%s' already exists; pick another name", TEXT_Q(name));
                return;
        }
        /* The parameters are the same whether the sandbox exists or not:
         * an existing name is no licence for ones create would refuse. */
        cJSON *differs = NULL;
        if (validate_create(m, req, sb, &differs, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        /* Kept with the request until the answer (reply_get_or_create). */
        cJSON_DeleteItemFromObjectCaseSensitive(req->params, GET_OR_CREATE_DIFFERS);
        cJSON_AddItemToObject(req->params, GET_OR_CREATE_DIFFERS, differs ? differs : cJSON_CreateArray());
        if (sb->deleting) {
                rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                "sandbox '%s' is being deleted; try again when it is gone", TEXT_Q(name));
                return;
        }
        if (sb->starting) {
                if (redo_list_add(&sb->pending, req, reply_existing) < 0)
                        rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        /* Get "with its session resumed": a stopped persistent sandbox gets a
         * new session on its kept filesystem first (as sandbox.get with
         * resume: true); a non-persistent one that is stopping cannot. */
        if (sandbox_require_running(req, m, "name", reply_existing))
                reply_existing(req, m);
}

/* A sandbox whose first session is still being made is not there yet for
 * get/stop/delete (create answers when it is). */
static bool being_created(const sandbox *sb) {
        return sb->starting && cJSON_GetArraySize(sb->sessions) == 0;
}

sandbox *sandbox_lookup(rpc_request *req, manager *m, const char *field) {
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        if (rpc_param_string(req, field, true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        sandbox *sb = manager_find_sandbox(m, name);
        if (!sb || being_created(sb) || !tenant_req_owns(m, req, sb->owner)) {
                reply_not_found(req, "sandbox", name);
                return NULL;
        }
        return sb;
}

static sandbox *lookup(rpc_request *req, manager *m) {
        return sandbox_lookup(req, m, "name");
}

static void method_get(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        bool resume = false;
        if (rpc_param_bool(req, "resume", &resume, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = lookup(req, userdata);
        if (!sb)
                return;
        if (!resume || sb->deleting || (sb->sess && !sb->sess->stopping)) {
                cJSON *o = sandbox_to_json(sb);
                if (o)
                        metrics_usage_to_json(sb, o);
                rpc_reply(req, o);
                return;
        }
        if (!sb->persistent) {
                rpc_reply_error(req, RPC_APP_ERROR, "sandbox_stopped", NULL,
                                "sandbox '%s' is not persistent; only persistent sandboxes resume", sb->name);
                return;
        }
        /* Resumes it (or waits for the start under way), then answers. */
        sandbox_require_running(req, userdata, "name", method_get);
}

static void method_stop(rpc_request *req, void *userdata) {
        sandbox *sb = lookup(req, userdata);
        if (!sb)
                return;
        if (!sb->sess && !sb->starting && !sb->deleting) {
                rpc_reply(req, sandbox_to_json(sb));
                return;
        }
        req_list_add(&sb->stop_waiters, req);
        if (sb->sess)
                session_stop(sb);
        /* Starting: stopped as soon as it runs (start_done). */
}

/* Whether the sandbox mounts something writable that outlives it (a
 * volume, a host mount of its own or of one of its containers): its
 * processes' last writes there are kept, so a delete gives them the
 * stop's grace instead of killing at once. */
static bool writes_beyond_itself(const sandbox *sb) {
        if (container_writes_beyond(sb->sess))
                return true;
        const cJSON *lists[] = {sb->volumes, sb->mounts};
        for (size_t k = 0; k < sizeof(lists) / sizeof(lists[0]); k++) {
                const cJSON *it;
                cJSON_ArrayForEach(it, lists[k])
                        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "readOnly")))
                                return true;
        }
        return false;
}

static void method_delete(rpc_request *req, void *userdata) {
        sandbox *sb = lookup(req, userdata);
        if (!sb)
                return;
        req_list_add(&sb->delete_waiters, req);
        if (sb->deleting)
                return;
        sb->deleting = true;
        if (sb->sess && writes_beyond_itself(sb))
                session_stop(sb);
        else if (sb->sess)
                session_kill(sb);
        else if (!sb->starting)
                start_teardown(sb, NULL, true);
        /* Starting: stopped and removed as soon as it runs (start_done). */
}

static void method_extend(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        int64_t duration = 0;
        if (rpc_param_duration_ms(req, "duration", true, 1, (int64_t)m->cfg->max_timeout_ms, &duration, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_require_running(req, m, "name", NULL);
        if (!sb)
                return;
        uint64_t now = core_now_ms();
        uint64_t expires = sb->expires_ms + (uint64_t)duration, old = sb->expires_ms;
        if (expires > now + m->cfg->max_timeout_ms)
                expires = now + m->cfg->max_timeout_ms;
        /* Recorded before it applies, so a restarted daemon keeps the new
         * expiry; a record that cannot be written changes nothing. */
        sb->expires_ms = expires;
        int r = restore_save_record(sb->sess);
        if (r < 0) {
                sb->expires_ms = old;
                rpc_reply_error(req, RPC_APP_ERROR, r == -ENOSPC || r == -EDQUOT ? "limit_exceeded" : "failed", NULL,
                                "sandbox '%s': cannot save the new expiry (%s); nothing changed", sb->name,
                                strerror(-r));
                return;
        }
        sd_event_source_set_time_relative(sb->sess->expire_src, (expires - now) * 1000);
        sd_event_source_set_enabled(sb->sess->expire_src, SD_EVENT_ONESHOT);
        rpc_reply(req, sandbox_to_json(sb));
}

/* sandbox.setTimeout {name, timeout}: the running session ends `timeout`
 * ms from now, earlier or later than it would have (E2B's setTimeout; an
 * end only moved later is sandbox.extendTimeout). The sandbox's own
 * `timeout` (of its next sessions) is not changed. */
static void method_set_timeout(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        int64_t timeout = 0;
        const char *on_timeout = NULL;
        if (rpc_param_duration_ms(req, "timeout", true, 1000, (int64_t)m->cfg->max_timeout_ms, &timeout, &err) < 0 ||
            rpc_param_string(req, "onTimeout", false, &on_timeout, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (on_timeout && !streq(on_timeout, "stop") && !streq(on_timeout, "pause")) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "onTimeout",
                                "onTimeout: \"stop\" (the session ends) or \"pause\" (it is paused, as sandbox.pause)");
                return;
        }
        sandbox *sb = sandbox_require_running(req, m, "name", NULL);
        if (!sb)
                return;
        uint64_t now = core_now_ms(), old = sb->expires_ms;
        bool old_pause = sb->sess->pause_on_timeout;
        /* Recorded before it applies, as extendTimeout's. */
        sb->expires_ms = now + (uint64_t)timeout;
        if (on_timeout)
                sb->sess->pause_on_timeout = streq(on_timeout, "pause");
        int r = restore_save_record(sb->sess);
        if (r < 0) {
                sb->expires_ms = old;
                sb->sess->pause_on_timeout = old_pause;
                rpc_reply_error(req, RPC_APP_ERROR, r == -ENOSPC || r == -EDQUOT ? "limit_exceeded" : "failed", NULL,
                                "sandbox '%s': cannot save the new expiry (%s); nothing changed", sb->name,
                                strerror(-r));
                return;
        }
        sd_event_source_set_time_relative(sb->sess->expire_src, (uint64_t)timeout * 1000);
        sd_event_source_set_enabled(sb->sess->expire_src, SD_EVENT_ONESHOT);
        rpc_reply(req, sandbox_to_json(sb));
}

/* update's resources.vcpus: a whole number from 1 to maxVcpus. Returns it,
 * 0 when absent, or -EINVAL with *ret_err naming the field. */
static int update_vcpus_param(const manager *m, const cJSON *res, sb_error **ret_err) {
        /* The disk image is made at creation (libcore/diskimg.h); no
         * resize, and never silently ignored. */
        if (cJSON_GetObjectItemCaseSensitive(res, "diskMiB"))
                return sb_error_set(ret_err, -EINVAL, NULL, "resources.diskMiB",
                                    "resources.diskMiB: is fixed when the sandbox is created; "
                                    "fork it with another");
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(res, "vcpus");
        if (!v)
                return 0;
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > m->cfg->max_vcpus ||
            v->valuedouble != (double)(unsigned)v->valuedouble)
                return sb_error_set(ret_err, -EINVAL, NULL, "resources.vcpus",
                                    "resources.vcpus: must be a whole number from 1 to %u", m->cfg->max_vcpus);
        return (int)v->valuedouble;
}

/* The cgroup limits of a session with `vcpus` (DESIGN §3): CPU quota of
 * vcpus × the period, vcpus × 2048 MiB of memory, the daemon's pidsMax.
 * session.c's start applies the same. */
static core_cgroup_limits vcpu_limits(const manager *m, unsigned vcpus) {
        return (core_cgroup_limits){.pids_max = m->cfg->pids_max,
                                    .memory_max = (uint64_t)vcpus * 2048ULL * 1024 * 1024,
                                    .cpu_quota_pct = vcpus * 100};
}

/* Moves sb's running session from `from` to `to` vCPUs at once. Lowering
 * memory below what the session holds: the kernel reclaims; on v1, what it
 * cannot reclaim makes the update fail (limit_exceeded, old limits kept),
 * on v2 it OOM-kills inside the sandbox (core_cgroup_update). */
static int resize_session(sandbox *sb, unsigned from, unsigned to, sb_error **ret_err) {
        _cleanup_error_ sb_error *e = NULL;
        core_cgroup_limits old = vcpu_limits(sb->m, from), new = vcpu_limits(sb->m, to);
        if (!sb->sess || !sb->sess->cg)
                return 0;
        int r = core_cgroup_update(sb->sess->cg, &old, &new, &e);
        if (r < 0)
                return sb_error_set(ret_err, r, r == -EBUSY ? "limit_exceeded" : "failed", "resources.vcpus",
                                    "resources.vcpus: %s%s", e ? e->message : strerror(-r),
                                    r == -EBUSY ? "; nothing changed (free memory in the sandbox, or stop it "
                                                  "and update it)" : "");
        log_info("sandbox '%s': %u vCPUs (was %u)", sb->name, to, from);
        return 0;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* Undoes the ports part of an update that failed later on. */
static void update_restore_ports(sandbox *sb, cJSON **oldports) {
        if (!*oldports)
                return;
        if (sb->sess)
                (void)ports_replace(sb->sess, *oldports, NULL);
        cJSON_Delete(sb->ports);
        sb->ports = TAKE_PTR(*oldports);
}

/* Writes the config of `next` (the sandbox as an update would leave it) to
 * the sandbox's config.json before the update is answered: an atomic
 * rename, so a daemon killed at any point restarts on the old or the new
 * config whole. Only a persistent sandbox's record is fsync'd: a
 * non-persistent one does not outlive a reboot (start-up removes it,
 * DESIGN §7), and a daemon crash keeps the page cache, so the rename alone
 * is what its restart reads (the reasoning of core_tombstone_ex's
 * `durable`). `persistent` cannot change in an update. Errors name the
 * file and say nothing changed. */
static int update_save(const sandbox *next, sb_error **ret_err) {
        cJSON *conf = sandbox_config_json(next);
        _cleanup_free_ char *text = conf ? cJSON_Print(conf) : NULL;
        cJSON_Delete(conf);
        _cleanup_free_ char *path = NULL;
        if (!text || asprintf(&path, "%s/config.json", next->dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = (next->persistent ? core_write_file_atomic : core_write_file_replace)(path, text, strlen(text), 0600);
        if (r < 0) {
                log_warning("sandbox '%s': update refused: write %s: %s", next->name, path, strerror(-r));
                return sb_error_set(ret_err, r, r == -ENOSPC || r == -EDQUOT ? "limit_exceeded" : "failed", NULL,
                                    "sandbox '%s': cannot save the update (write %s: %s); nothing changed%s",
                                    next->name, path, strerror(-r),
                                    r == -ENOSPC || r == -EDQUOT ? "; free space on the state filesystem" : "");
        }
        return 0;
}

/* A live change was refused after update_save: the old config goes back. */
static void update_undo(sandbox *sb) {
        _cleanup_error_ sb_error *err = NULL;
        if (sandbox_save_config(sb, NULL, &err) < 0)
                log_warning("sandbox '%s': restore config after a refused update: %s", sb->name,
                            text_for_log(err->message, (char[TEXT_LOG_BUF]){0}, TEXT_LOG_BUF));
}

/* sandbox.update: timeout, env, tags, resources (live on a running session:
 * its cgroup limits change at once; persisted for the next sessions),
 * networkPolicy (live, atomically, between any two modes: session_apply_policy),
 * and ports (live: ports still listed keep their endpoints).
 * A timeout increase also extends the running session by the difference;
 * a decrease applies from the next session on. */
static void method_update(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        int64_t timeout = -1;
        int new_vcpus = 0;
        cJSON *env = NULL, *tags = NULL, *ports = NULL, *res = NULL;
        if (rpc_param_duration_ms(req, "timeout", false, 1000, (int64_t)m->cfg->max_timeout_ms, &timeout, &err) < 0 ||
            rpc_param_object(req, "resources", false, &res, &err) < 0 ||
            (new_vcpus = update_vcpus_param(m, res, &err)) < 0 ||
            rpc_param_array(req, "ports", false, &ports, &err) < 0 ||
            (cJSON_GetObjectItemCaseSensitive(req->params, "env") && parse_string_map(req, "env", &limit_env, &env, &err) < 0) ||
            (cJSON_GetObjectItemCaseSensitive(req->params, "tags") && parse_string_map(req, "tags", &limit_tags, &tags, &err) < 0)) {
                cJSON_Delete(env);
                cJSON_Delete(tags);
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = lookup(req, m);
        if (!sb) {
                /* lookup answered (and freed) the request. */
                cJSON_Delete(env);
                cJSON_Delete(tags);
                return;
        }
        cJSON *policy = cJSON_GetObjectItemCaseSensitive(req->params, "networkPolicy");
        const char *fail_field = NULL, *fail_reason = NULL, *fail_msg = NULL;
        _cleanup_policy_ pol_policy *newpol = NULL;
        if (policy && (pol_policy_parse(policy, &newpol, &err) < 0 ||
                       (sandbox_is_pod(sb) && pod_policy_check(newpol, &err) < 0))) {
                cJSON_Delete(env);
                cJSON_Delete(tags);
                rpc_reply_sb_error(req, err);
                return;
        }
        if (newpol && sb->sess && sb->sess->net_slot < 0 && !sandbox_is_pod(sb) && newpol->mode != POL_MODE_DENY_ALL) {
                /* Only a deny-all session started while the pool was full. */
                fail_field = "networkPolicy";
                fail_reason = "invalid_policy";
                fail_msg = "networkPolicy: this session started without a network address (the address pool "
                           "was full); stop the sandbox and start it again to give it network access";
        } else if (newpol && sb->sess && sb->sess->paused) {
                /* Its sandbox-netd is frozen with it (sandbox.pause). */
                fail_field = "networkPolicy";
                fail_reason = "unavailable";
                fail_msg = "networkPolicy: the sandbox is paused; resume it (sandbox.resume) and update it";
        } else if (newpol && sb->starting) {
                /* The starting session reads the policy on a worker thread. */
                fail_field = "networkPolicy";
                fail_reason = "unavailable";
                fail_msg = "networkPolicy: the sandbox is starting; try again when it runs";
        } else if (newpol && sb->sess && sb->capturing) {
                /* A snapshot or fork has the session frozen, and its
                 * sandbox-netd with it (it runs in the session's cgroup):
                 * a reload or restart would wait on the loop for a frozen
                 * process. */
                fail_field = "networkPolicy";
                fail_reason = "unavailable";
                fail_msg = "networkPolicy: a snapshot or fork of the sandbox is being taken; "
                           "try again in a moment";
        } else if (new_vcpus > 0 && (unsigned)new_vcpus != sb->vcpus && sb->starting) {
                /* The starting session reads vcpus on a worker thread. */
                fail_field = "resources.vcpus";
                fail_reason = "unavailable";
                fail_msg = "resources.vcpus: the sandbox is starting; try again when it runs";
        } else if (ports && sb->starting) {
                fail_field = "ports";
                fail_reason = "unavailable";
                fail_msg = "ports: the sandbox is starting; try again when it runs";
        }
        if (fail_field) {
                rpc_reply_error(req, fail_reason ? RPC_APP_ERROR : RPC_INVALID_PARAMS, fail_reason, fail_field,
                                "%s", fail_msg);
                cJSON_Delete(env);
                cJSON_Delete(tags);
                return;
        }
        _cleanup_(cJSON_Deletep) cJSON *newports = NULL, *oldports = NULL;
        if (ports && ports_parse(ports, &newports, &err) < 0) {
                cJSON_Delete(env);
                cJSON_Delete(tags);
                rpc_reply_sb_error(req, err);
                return;
        }
        /* The disk first: config.json with every change is written before
         * any is applied, so a full or failing state filesystem answers an
         * error and changes nothing, in memory or live. */
        sandbox next = *sb;
        next.env = env ? env : sb->env;
        next.tags = tags ? tags : sb->tags;
        next.ports = newports ? newports : sb->ports;
        next.policy = policy ? policy : sb->policy;
        next.pol = newpol ? newpol : sb->pol;
        next.vcpus = new_vcpus > 0 ? (unsigned)new_vcpus : sb->vcpus;
        next.timeout_ms = timeout > 0 ? (uint64_t)timeout : sb->timeout_ms;
        if (update_save(&next, &err) < 0) {
                cJSON_Delete(env);
                cJSON_Delete(tags);
                rpc_reply_sb_error(req, err);
                return;
        }
        core_fault("update.recorded");
        /* Ports first: the one change here that can be undone without a
         * trace if something later is refused. Each refusal below puts the
         * old config back on disk (update_undo). */
        if (newports && sb->sess && ports_replace(sb->sess, newports, &err) < 0) {
                update_undo(sb);
                cJSON_Delete(env);
                cJSON_Delete(tags);
                rpc_reply_sb_error(req, err);
                return;
        }
        if (newports) {
                oldports = sb->ports;
                sb->ports = TAKE_PTR(newports);
                core_fault("update.ports_applied");
        }
        /* Resources before the policy: a refused resize leaves everything
         * as it was, and a refused policy puts the old limits back. */
        unsigned old_vcpus = sb->vcpus;
        if (new_vcpus > 0 && (unsigned)new_vcpus != old_vcpus) {
                if (resize_session(sb, old_vcpus, (unsigned)new_vcpus, &err) < 0) {
                        update_restore_ports(sb, &oldports);
                        update_undo(sb);
                        cJSON_Delete(env);
                        cJSON_Delete(tags);
                        rpc_reply_sb_error(req, err);
                        return;
                }
                sb->vcpus = (unsigned)new_vcpus;
                core_fault("update.resources_applied");
        }
        if (newpol) {
                /* One nftables batch swaps the running session's rules: no
                 * moment where both or neither apply (rule 9). */
                if (sb->sess && session_apply_policy(sb->sess, newpol, &err) < 0) {
                        if (sb->vcpus != old_vcpus && resize_session(sb, sb->vcpus, old_vcpus, NULL) >= 0)
                                sb->vcpus = old_vcpus;
                        update_restore_ports(sb, &oldports);
                        update_undo(sb);
                        cJSON_Delete(env);
                        cJSON_Delete(tags);
                        rpc_reply_sb_error(req, err);
                        return;
                }
                pol_policy_free(sb->pol);
                sb->pol = TAKE_PTR(newpol);
                cJSON_Delete(sb->policy);
                sb->policy = cJSON_Duplicate(policy, 1);
                core_fault("update.policy_applied");
        }
        if (env) {
                cJSON_Delete(sb->env);
                sb->env = env;
        }
        if (tags) {
                cJSON_Delete(sb->tags);
                sb->tags = tags;
        }
        if (timeout > 0) {
                if (sb->sess && (uint64_t)timeout > sb->timeout_ms && sb->sess->expire_src) {
                        uint64_t now = core_now_ms();
                        uint64_t expires = sb->expires_ms + ((uint64_t)timeout - sb->timeout_ms);
                        if (expires > now + m->cfg->max_timeout_ms)
                                expires = now + m->cfg->max_timeout_ms;
                        sb->expires_ms = expires;
                        sd_event_source_set_time_relative(sb->sess->expire_src, (expires - now) * 1000);
                        sd_event_source_set_enabled(sb->sess->expire_src, SD_EVENT_ONESHOT);
                        (void)restore_save_record(sb->sess);
                }
                sb->timeout_ms = (uint64_t)timeout;
        }
        rpc_reply(req, sandbox_to_json(sb));
}

static char *dup_json_string(cJSON *o, const char *key, const char *fallback) {
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
        return strdup(v ? v : fallback);
}

static cJSON *dup_json_of_type(cJSON *o, const char *key, cJSON_bool (*is)(const cJSON *), cJSON *fallback) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        if (v && is(v)) {
                cJSON_Delete(fallback);
                return cJSON_Duplicate(v, 1);
        }
        return fallback;
}

int sandbox_load(manager *m, const char *dir, sb_error **ret_err) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        if (asprintf(&path, "%s/config.json", dir) < 0)
                return -ENOMEM;
        int r = core_read_file(path, 1 << 20, &text, NULL);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "read %s: %s", path, strerror(-r));
        cJSON *c = cJSON_Parse(text);
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "id"));
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(c, "layers");
        if (!c || !name || !core_name_is_valid(name) || !id || strlen(id) != 32 || manager_find_sandbox(m, name) ||
            (layers && !layers_valid(layers))) {
                cJSON_Delete(c);
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "%s: not a valid sandbox config", path);
        }
        sandbox *sb = calloc(1, sizeof(*sb));
        sb->m = m;
        sb->name = strdup(name);
        memcpy(sb->id, id, 33);
        /* Absent or null (configs written before owners existed): admin. */
        const char *owner = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "owner"));
        sb->owner = owner && *owner ? strdup(owner) : NULL;
        sb->runtime = dup_json_string(c, "runtime", "host");
        cJSON *pj = cJSON_GetObjectItemCaseSensitive(c, "networkPolicy");
        if (!pj || pol_policy_parse(pj, &sb->pol, NULL) < 0) {
                /* Fail closed: a stored policy that no longer validates. */
                log_warning("sandbox '%s': stored networkPolicy does not validate; using deny-all", name);
                pj = NULL;
                cJSON *deny = cJSON_CreateString("deny-all");
                pol_policy_parse(deny, &sb->pol, NULL);
                cJSON_Delete(deny);
        }
        sb->policy = pj ? cJSON_Duplicate(pj, 1) : cJSON_CreateString("deny-all");
        cJSON *src = cJSON_GetObjectItemCaseSensitive(c, "source");
        sb->source = cJSON_IsObject(src) ? cJSON_Duplicate(src, 1) : NULL;
        cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "timeout");
        sb->timeout_ms = cJSON_IsNumber(t) && t->valuedouble >= 1000 ? (uint64_t)t->valuedouble
                                                                     : m->cfg->default_timeout_ms;
        sb->env = dup_json_of_type(c, "env", cJSON_IsObject, cJSON_CreateObject());
        sb->tags = dup_json_of_type(c, "tags", cJSON_IsObject, cJSON_CreateObject());
        sb->ports = dup_json_of_type(c, "ports", cJSON_IsArray, cJSON_CreateArray());
        sb->mounts = dup_json_of_type(c, "mounts", cJSON_IsArray, NULL);
        sb->sessions = dup_json_of_type(c, "sessions", cJSON_IsArray, cJSON_CreateArray());
        sb->layers = dup_json_of_type(c, "layers", cJSON_IsArray, cJSON_CreateArray());
        /* Checked again at each start (volumes_session_mounts). */
        sb->volumes = dup_json_of_type(c, "volumes", cJSON_IsArray, cJSON_CreateArray());
        cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "resources"), "vcpus");
        sb->vcpus = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= m->cfg->max_vcpus
                            ? (unsigned)v->valuedouble : 1;
        cJSON *dm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "resources"), "diskMiB");
        sb->disk_mib = cJSON_IsNumber(dm) && dm->valuedouble >= 0 ? (uint64_t)dm->valuedouble : 0;
        sb->persistent = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "persistent"));
        /* Absent (every config written before readiness existed): ready. */
        sb->not_ready = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c, "ready"));
        userns_load(m, sb, c);
        /* A pod sandbox: its namespace is opened again (and its identity
         * checked) when a session starts or is adopted (pod.c). */
        const cJSON *net = cJSON_GetObjectItemCaseSensitive(c, "network");
        const char *netns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(net, "netns"));
        if (netns) {
                const cJSON *dev = cJSON_GetObjectItemCaseSensitive(net, "dev");
                const cJSON *ino = cJSON_GetObjectItemCaseSensitive(net, "ino");
                sb->netns_path = strdup(netns);
                sb->netns_dev = cJSON_IsNumber(dev) ? (uint64_t)dev->valuedouble : 0;
                sb->netns_ino = cJSON_IsNumber(ino) ? (uint64_t)ino->valuedouble : 0;
        }
        sb->created_ms = core_parse_time(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "createdAt")));
        sb->status = "stopped";
        /* Sessions that were running when the daemon went away ended then. */
        cJSON *h;
        cJSON_ArrayForEach(h, sb->sessions) {
                const char *st = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(h, "status"));
                if (st && !streq(st, "stopped") && !streq(st, "failed"))
                        cJSON_ReplaceItemInObject(h, "status", cJSON_CreateString("stopped"));
        }
        cJSON_Delete(c);
        if (asprintf(&sb->dir, "%s", dir) < 0 || asprintf(&sb->run_dir, "%s/%s", m->run_sandboxes_dir, sb->name) < 0) {
                sandbox_free(sb);
                return -ENOMEM;
        }
        sb->next = m->sandboxes;
        m->sandboxes = sb;
        return 0;
}

static int cmp_names(const void *a, const void *b) {
        return strcmp((*(sandbox *const *)a)->name, (*(sandbox *const *)b)->name);
}

static void method_list(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *prefix = NULL, *cursor = NULL;
        cJSON *tags = NULL;
        int64_t limit = 1000;
        if (rpc_param_string(req, "namePrefix", false, &prefix, &err) < 0 ||
            rpc_param_string(req, "cursor", false, &cursor, &err) < 0 ||
            rpc_param_object(req, "tags", false, &tags, &err) < 0 ||
            rpc_param_int(req, "limit", false, 1, 1000, &limit, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        size_t n = 0;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                n++;
        _cleanup_free_ sandbox **v = calloc(n + 1, sizeof(*v));
        n = 0;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                if (streq(sb->status, "pending") || (prefix && strncmp(sb->name, prefix, strlen(prefix))) ||
                    (cursor && strcmp(sb->name, cursor) <= 0) || !tenant_req_owns(m, req, sb->owner))
                        continue;
                bool match = true;
                cJSON *t;
                cJSON_ArrayForEach(t, tags) {
                        const char *have = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sb->tags, t->string));
                        match = match && have && cJSON_IsString(t) && streq(have, t->valuestring);
                }
                if (match)
                        v[n++] = sb;
        }
        qsort(v, n, sizeof(*v), cmp_names);
        cJSON *res = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(res, "sandboxes");
        size_t shown = n < (size_t)limit ? n : (size_t)limit;
        for (size_t i = 0; i < shown; i++)
                cJSON_AddItemToArray(arr, sandbox_to_json(v[i]));
        if (shown < n)
                cJSON_AddStringToObject(res, "nextCursor", v[shown - 1]->name);
        else
                cJSON_AddNullToObject(res, "nextCursor");
        rpc_reply(req, res);
}

void register_sandbox_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "sandbox.create", method_create, m);
        rpc_server_add_method(s, "sandbox.getOrCreate", method_get_or_create, m);
        rpc_server_add_method(s, "sandbox.get", method_get, m);
        rpc_server_add_method(s, "sandbox.list", method_list, m);
        rpc_server_add_method(s, "sandbox.stop", method_stop, m);
        rpc_server_add_method(s, "sandbox.delete", method_delete, m);
        rpc_server_add_method(s, "sandbox.extendTimeout", method_extend, m);
        rpc_server_add_method(s, "sandbox.setTimeout", method_set_timeout, m);
        rpc_server_add_method(s, "sandbox.update", method_update, m);
}

