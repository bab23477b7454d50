/* sandbox.* methods and the session lifecycle: create (validate on the loop,
 * build on a worker thread, attach on the loop), stop (SIGTERM, grace,
 * SIGKILL through sandbox-init), timeout, delete, and teardown of every
 * trace (cgroup, veth, directories) on a worker thread. */
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
#include "libcore/log.h"
#include "libcore/source.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/worker.h"

#define SETUP_TIMEOUT_MS 15000

/* ---- JSON view ---------------------------------------------------------- */

static void add_time(cJSON *o, const char *key, uint64_t ms) {
        char buf[40];
        if (ms)
                cJSON_AddStringToObject(o, key, core_format_time(ms, buf, sizeof(buf)));
        else
                cJSON_AddNullToObject(o, key);
}

cJSON *sandbox_to_json(const sandbox *sb) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", sb->name);
        cJSON_AddStringToObject(o, "id", sb->id);
        cJSON_AddStringToObject(o, "status", sb->status);
        cJSON_AddStringToObject(o, "runtime", sb->runtime);
        cJSON_AddItemToObject(o, "source", sb->source ? cJSON_Duplicate(sb->source, 1) : cJSON_CreateNull());
        cJSON_AddItemToObject(o, "ports", cJSON_Duplicate(sb->ports, 1));
        cJSON_AddNumberToObject(o, "timeout", (double)sb->timeout_ms);
        add_time(o, "expiresAt", sb->sess ? sb->expires_ms : 0);
        cJSON *res = cJSON_AddObjectToObject(o, "resources");
        cJSON_AddNumberToObject(res, "vcpus", sb->vcpus);
        cJSON_AddItemToObject(o, "env", cJSON_Duplicate(sb->env, 1));
        cJSON_AddItemToObject(o, "tags", cJSON_Duplicate(sb->tags, 1));
        cJSON_AddStringToObject(o, "networkPolicy", sb->policy);
        cJSON_AddBoolToObject(o, "persistent", sb->persistent);
        add_time(o, "createdAt", sb->created_ms);
        cJSON_AddItemToObject(o, "sessions", cJSON_Duplicate(sb->sessions, 1));
        return o;
}

static cJSON *sandbox_config_json(const sandbox *sb) {
        cJSON *o = sandbox_to_json(sb);
        cJSON_DeleteItemFromObject(o, "status");
        cJSON_DeleteItemFromObject(o, "expiresAt");
        cJSON_DeleteItemFromObject(o, "sessions");
        return o;
}

static void session_history_update(sandbox *sb, const char *status, uint64_t ended_ms) {
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

static void set_status(sandbox *sb, const char *status) {
        sb->status = status;
        session_history_update(sb, status, 0);
}

/* ---- registry ----------------------------------------------------------- */

void sandbox_free(sandbox *sb) {
        if (!sb)
                return;
        free(sb->name);
        free(sb->runtime);
        cJSON_Delete(sb->source);
        cJSON_Delete(sb->env);
        cJSON_Delete(sb->tags);
        cJSON_Delete(sb->ports);
        cJSON_Delete(sb->sessions);
        free(sb->policy);
        free(sb->dir);
        free(sb->run_dir);
        free(sb->stop_waiters.items);
        free(sb->delete_waiters.items);
        free(sb);
}

static void sandbox_unlink(manager *m, sandbox *sb) {
        for (sandbox **pp = &m->sandboxes; *pp; pp = &(*pp)->next)
                if (*pp == sb) {
                        *pp = sb->next;
                        return;
                }
}

sandbox *sandbox_require_running(rpc_request *req, manager *m, const char *field) {
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        if (rpc_param_string(req, field, true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        sandbox *sb = manager_find_sandbox(m, name);
        if (!sb || sb->deleting) {
                reply_not_found(req, "sandbox", name);
                return NULL;
        }
        if (!sb->sess || sb->sess->stopping || !streq(sb->status, "running")) {
                rpc_reply_error(req, RPC_APP_ERROR, "sandbox_stopped", NULL,
                                "sandbox '%s' is %s; create a new one (or resume a persistent one)", name,
                                sb->status);
                return NULL;
        }
        return sb;
}

/* ---- create: validation (loop thread) ------------------------------------ */

typedef struct create_job {
        manager *m;
        sandbox *sb;
        rpc_request *req;
        /* source, copied out of the request */
        char *src_type, *url, *revision, *username, *password;
        unsigned depth;
        /* results from the worker */
        core_spawn_result spawn;
        core_cgroup *cg;
        int slot;
        sb_error *err;
} create_job;

static void create_job_free(create_job *j) {
        free(j->src_type);
        free(j->url);
        free(j->revision);
        free(j->username);
        if (j->password) {
                explicit_bzero(j->password, strlen(j->password));
                free(j->password);
        }
        sb_error_free(j->err);
        free(j);
}

static int dup_str(cJSON *obj, const char *key, char **ret) {
        cJSON *v = cJSON_GetObjectItem(obj, key);
        if (!v || cJSON_IsNull(v))
                return 0;
        if (!cJSON_IsString(v))
                return -EINVAL;
        *ret = strdup(v->valuestring);
        return *ret ? 0 : -ENOMEM;
}

static int parse_source(create_job *j, cJSON *src, sb_error **ret_err) {
        static const char *const git_keys[] = {"type", "url", "depth", "revision", "username", "password"};
        static const char *const tar_keys[] = {"type", "url", "path"};
        if (!cJSON_IsObject(src))
                return sb_error_set(ret_err, -EINVAL, NULL, "source", "source: must be an object with a type");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(src, "type"));
        if (!type || (!streq(type, "git") && !streq(type, "tarball")))
                return sb_error_set(ret_err, -EINVAL, NULL, "source.type",
                                    type && streq(type, "snapshot")
                                            ? "source.type: snapshots are not supported yet"
                                            : "source.type: must be \"git\" or \"tarball\"");
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
                                            "source.%s: unknown key for a %s source", it->string, type);
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
                cJSON *d = cJSON_GetObjectItem(src, "depth");
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
static cJSON *source_view(const create_job *j, cJSON *src) {
        if (!src)
                return NULL;
        cJSON *o = cJSON_Duplicate(src, 1);
        if (cJSON_GetObjectItem(o, "password"))
                cJSON_ReplaceItemInObject(o, "password", cJSON_CreateString("<redacted>"));
        return o;
}

static int parse_string_map(rpc_request *req, const char *field, unsigned max, cJSON **ret, sb_error **ret_err) {
        cJSON *o = NULL;
        int r = rpc_param_object(req, field, false, &o, ret_err);
        if (r < 0)
                return r;
        if (!o) {
                *ret = cJSON_CreateObject();
                return 0;
        }
        unsigned n = 0;
        cJSON *it;
        cJSON_ArrayForEach(it, o) {
                char path[300];
                snprintf(path, sizeof(path), "%s.%s", field, it->string);
                if (!cJSON_IsString(it))
                        return sb_error_set(ret_err, -EINVAL, NULL, path, "%s: must be a string", path);
                if (!*it->string || strchr(it->string, '=') || strlen(it->string) > 255)
                        return sb_error_set(ret_err, -EINVAL, NULL, path,
                                            "%s: keys must be 1-255 characters without '='", path);
                n++;
        }
        if (max && n > max)
                return sb_error_set(ret_err, -E2BIG, "limit_exceeded", field, "%s: at most %u entries", field, max);
        *ret = cJSON_Duplicate(o, 1);
        return 0;
}

static int parse_create(manager *m, rpc_request *req, sandbox *sb, create_job *j, sb_error **ret_err) {
        const daemon_config *cfg = m->cfg;
        const char *name = NULL, *runtime = "host";
        int64_t timeout = (int64_t)cfg->default_timeout_ms;
        bool persistent = false;
        cJSON *policy = NULL, *src = NULL, *res = NULL, *ports = NULL;
        int r;
        if ((r = rpc_param_string(req, "name", false, &name, ret_err)) < 0 ||
            (r = rpc_param_string(req, "runtime", false, &runtime, ret_err)) < 0 ||
            (r = rpc_param_int(req, "timeout", false, 1000, (int64_t)cfg->max_timeout_ms, &timeout, ret_err)) < 0 ||
            (r = rpc_param_bool(req, "persistent", &persistent, ret_err)) < 0 ||
            (r = rpc_param_object(req, "resources", false, &res, ret_err)) < 0 ||
            (r = rpc_param_array(req, "ports", false, &ports, ret_err)) < 0 ||
            (r = parse_string_map(req, "env", 0, &sb->env, ret_err)) < 0 ||
            (r = parse_string_map(req, "tags", 5, &sb->tags, ret_err)) < 0)
                return r;
        if (name && !core_name_is_valid(name))
                return sb_error_set(ret_err, -EINVAL, NULL, "name",
                                    "name: '%s' is not valid; use 1-63 of a-z, 0-9 and '-', starting with a letter or digit",
                                    name);
        if (!streq(runtime, "host"))
                return sb_error_set(ret_err, -ENOENT, "not_found", "runtime",
                                    "runtime: '%s' not found; the built-in runtime is 'host'", runtime);
        sb->vcpus = 1;
        if (res) {
                cJSON *v = cJSON_GetObjectItem(res, "vcpus");
                if (v && (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > cfg->max_vcpus ||
                          v->valuedouble != (double)(unsigned)v->valuedouble))
                        return sb_error_set(ret_err, -EINVAL, NULL, "resources.vcpus",
                                            "resources.vcpus: must be a whole number from 1 to %u", cfg->max_vcpus);
                if (v)
                        sb->vcpus = (unsigned)v->valuedouble;
        }
        if (ports && cJSON_GetArraySize(ports) > 0)
                return sb_error_set(ret_err, -EOPNOTSUPP, NULL, "ports", "ports: exposing ports is not supported yet");
        policy = cJSON_GetObjectItem(req->params, "networkPolicy");
        if (!policy || cJSON_IsNull(policy))
                sb->policy = strdup("allow-all");
        else if (cJSON_IsString(policy) && (streq(policy->valuestring, "allow-all") ||
                                              streq(policy->valuestring, "deny-all")))
                sb->policy = strdup(policy->valuestring);
        else if (cJSON_IsObject(policy))
                /* Fail closed: never treat a policy we cannot enforce as allow-all. */
                return sb_error_set(ret_err, -EOPNOTSUPP, "invalid_policy", "networkPolicy",
                                    "networkPolicy: custom policy objects are not supported yet; use \"allow-all\" or \"deny-all\"");
        else
                return sb_error_set(ret_err, -EINVAL, "invalid_policy", "networkPolicy",
                                    "networkPolicy: must be \"allow-all\", \"deny-all\" or a policy object");
        src = cJSON_GetObjectItem(req->params, "source");
        if (src && !cJSON_IsNull(src)) {
                if ((r = parse_source(j, src, ret_err)) < 0)
                        return r;
                sb->source = source_view(j, src);
        }
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
        sb->ports = cJSON_CreateArray();
        return sb->name && sb->runtime && sb->policy ? 0 : sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
}

/* ---- create: the worker thread ------------------------------------------- */

static int write_upper_etc(const sandbox *sb, const char *upper, bool network) {
        _cleanup_free_ char *etc = NULL, *hosts = NULL, *hostname = NULL, *resolv = NULL;
        if (asprintf(&etc, "%s/etc", upper) < 0)
                return -ENOMEM;
        if (mkdir(etc, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        if (asprintf(&hosts, "127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n",
                     sb->name) < 0 ||
            asprintf(&hostname, "%s\n", sb->name) < 0)
                return -ENOMEM;
        /* resolv.conf: with network, the host's own resolvers that a sandbox can
         * reach (loopback ones cannot be: they are the host's). */
        size_t cap = 4096, len = 0;
        resolv = calloc(1, cap);
        if (!resolv)
                return -ENOMEM;
        if (network) {
                _cleanup_fclose_ FILE *f = fopen("/etc/resolv.conf", "re");
                char line[512];
                while (f && fgets(line, sizeof(line), f)) {
                        char ns[256];
                        if (sscanf(line, " nameserver %255s", ns) != 1 || !strncmp(ns, "127.", 4) || streq(ns, "::1"))
                                continue;
                        len += (size_t)snprintf(resolv + len, cap - len, "nameserver %s\n", ns);
                        if (len >= cap - 300)
                                break;
                }
        } else
                snprintf(resolv, cap, "# deny-all: this sandbox has no network\n");
        static const char *const names[] = {"hosts", "hostname", "resolv.conf"};
        const char *texts[] = {hosts, hostname, resolv};
        for (size_t i = 0; i < 3; i++) {
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", etc, names[i]) < 0)
                        return -ENOMEM;
                int r = core_write_file_replace(p, texts[i], strlen(texts[i]), 0644);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int prepare_dirs(create_job *j, sb_error **ret_err) {
        sandbox *sb = j->sb;
        _cleanup_free_ char *upper = NULL, *work = NULL, *ws = NULL, *rootfs = NULL;
        if (asprintf(&upper, "%s/upper", sb->dir) < 0 || asprintf(&work, "%s/work", sb->dir) < 0 ||
            asprintf(&ws, "%s/upper/workspace", sb->dir) < 0 || asprintf(&rootfs, "%s/rootfs", sb->run_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (mkdir(sb->dir, 0710) < 0)
                return sb_error_set(ret_err, negative_errno(), errno == EEXIST ? "already_exists" : NULL, NULL,
                                    "create %s: %m", sb->dir);
        /* Sources are fetched as the sandbox user (libcore/source.h), which
         * must traverse to upper/workspace; nobody else may. */
        if (chown(sb->dir, 0, SANDBOX_GID) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chown %s: %m", sb->dir);
        int r;
        if ((r = core_mkdir_p(upper, 0755)) < 0 || (r = core_mkdir_p(work, 0700)) < 0 ||
            (r = core_mkdir_p(ws, 0755)) < 0 || (r = core_mkdir_p(rootfs, 0755)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "create sandbox directories: %s", strerror(-r));
        if (chown(ws, SANDBOX_UID, SANDBOX_GID) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chown workspace: %m");
        if ((r = write_upper_etc(sb, upper, streq(sb->policy, "allow-all"))) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "write sandbox /etc: %s", strerror(-r));
        return 0;
}

static int fetch_source(create_job *j, sb_error **ret_err) {
        if (!j->src_type)
                return 0;
        _cleanup_free_ char *ws = NULL;
        if (asprintf(&ws, "%s/upper/workspace", j->sb->dir) < 0)
                return -ENOMEM;
        int r;
        if (streq(j->src_type, "git")) {
                core_git_source g = {.url = j->url, .revision = j->revision, .depth = j->depth,
                                     .username = j->username, .password = j->password};
                r = core_source_git_clone(&g, ws, SANDBOX_UID, SANDBOX_GID, ret_err);
        } else
                r = core_source_tarball_extract(j->url, ws, SANDBOX_UID, SANDBOX_GID, j->m->cfg->max_source_bytes,
                                                ret_err);
        if (r < 0) {
                sb_error_set(ret_err, r, "source_failed", NULL, "%s", strerror(-r));
                free((*ret_err)->reason);
                (*ret_err)->reason = strdup("source_failed");
                return sb_error_prefix(ret_err, "%s source", j->src_type);
        }
        return 0;
}

static cJSON *setup_packet(create_job *j) {
        sandbox *sb = j->sb;
        manager *m = j->m;
        char buf[INET_ADDRSTRLEN];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", "setup");
        cJSON_AddStringToObject(o, "hostname", sb->name);
        char *p = NULL;
        if (asprintf(&p, "%s/rootfs", sb->run_dir) >= 0)
                cJSON_AddStringToObject(o, "rootfs", p);
        free(p);
        cJSON_AddStringToObject(o, "lower", m->host_runtime);
        if (asprintf(&p, "%s/upper", sb->dir) >= 0)
                cJSON_AddStringToObject(o, "upper", p);
        free(p);
        if (asprintf(&p, "%s/work", sb->dir) >= 0)
                cJSON_AddStringToObject(o, "work", p);
        free(p);
        cJSON *binds = cJSON_AddArrayToObject(o, "binds");
        for (size_t i = 0; core_runtime_host_binds[i][0]; i++) {
                if (access(core_runtime_host_binds[i][0], F_OK) < 0)
                        continue;
                cJSON *b = cJSON_CreateObject();
                cJSON_AddStringToObject(b, "src", core_runtime_host_binds[i][0]);
                cJSON_AddStringToObject(b, "dst", core_runtime_host_binds[i][1]);
                cJSON_AddBoolToObject(b, "ro", true);
                cJSON_AddItemToArray(binds, b);
        }
        cJSON_AddNumberToObject(o, "netSlot", j->slot);
        cJSON_AddStringToObject(o, "poolBase", inet_ntop(AF_INET, &m->pool.base, buf, sizeof(buf)));
        cJSON_AddNumberToObject(o, "poolPrefix", m->pool.prefix);
        cJSON_AddItemToObject(o, "env", cJSON_Duplicate(sb->env, 1));
        return o;
}

/* Sends the setup packet and waits (bounded) for ready or error. */
static int setup_init(create_job *j, sb_error **ret_err) {
        cJSON *pkt = setup_packet(j);
        _cleanup_free_ char *text = cJSON_PrintUnformatted(pkt);
        cJSON_Delete(pkt);
        if (!text)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (send(j->spawn.agent_fd, text, strlen(text), MSG_NOSIGNAL) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "send setup to sandbox-init: %m");
        struct pollfd p = {.fd = j->spawn.agent_fd, .events = POLLIN};
        int r = poll(&p, 1, SETUP_TIMEOUT_MS);
        if (r <= 0)
                return sb_error_set(ret_err, r < 0 ? negative_errno() : -ETIMEDOUT, NULL, NULL,
                                    "sandbox-init did not report ready within %d ms", SETUP_TIMEOUT_MS);
        char buf[8192];
        ssize_t n = recv(j->spawn.agent_fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
                return sb_error_set(ret_err, -EPIPE, NULL, NULL, "sandbox-init exited during setup");
        buf[n] = 0;
        cJSON *msg = cJSON_Parse(buf);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "ev"));
        if (ev && streq(ev, "ready")) {
                cJSON_Delete(msg);
                return 0;
        }
        r = sb_error_set(ret_err, -EIO, NULL, NULL, "sandbox-init setup: %s",
                         cJSON_GetStringValue(cJSON_GetObjectItem(msg, "message")) ?: "unexpected answer");
        cJSON_Delete(msg);
        return r;
}

static void kill_spawned(core_spawn_result *sp) {
        if (sp->pidfd >= 0) {
                syscall(SYS_pidfd_send_signal, sp->pidfd, SIGKILL, NULL, 0);
                siginfo_t si;
                waitid(P_PIDFD, (id_t)sp->pidfd, &si, WEXITED);
                close(sp->pidfd);
        }
        if (sp->agent_fd >= 0)
                close(sp->agent_fd);
        sp->pidfd = sp->agent_fd = -EBADF;
}

/* Worker thread: directories, source, config, cgroup, clone, veth, setup.
 * On failure everything made here is undone before returning. */
static void create_work(void *userdata) {
        create_job *j = userdata;
        sandbox *sb = j->sb;
        manager *m = j->m;
        int r;
        bool made_dir = false;
        if ((r = prepare_dirs(j, &j->err)) < 0)
                goto fail;
        made_dir = true;
        if ((r = fetch_source(j, &j->err)) < 0)
                goto fail;
        {
                cJSON *conf = sandbox_config_json(sb);
                _cleanup_free_ char *text = cJSON_Print(conf), *path = NULL;
                cJSON_Delete(conf);
                if (!text || asprintf(&path, "%s/config.json", sb->dir) < 0 ||
                    /* Only a persistent sandbox outlives a crash (DESIGN §7);
                     * the others are removed at the next start anyway. */
                    (r = (sb->persistent ? core_write_file_atomic
                                         : core_write_file_replace)(path, text, strlen(text), 0600)) < 0) {
                        r = sb_error_set(&j->err, -EIO, NULL, NULL, "write config.json");
                        goto fail;
                }
        }
        core_cgroup_limits lim = {.pids_max = m->cfg->pids_max,
                                  .memory_max = (uint64_t)sb->vcpus * 2048ULL * 1024 * 1024,
                                  .cpu_quota_pct = sb->vcpus * 100};
        if ((r = core_cgroup_create(sb->name, &lim, &j->cg, &j->err)) < 0) {
                sb_error_prefix(&j->err, "create cgroup");
                goto fail;
        }
        if ((r = core_spawn_init(m->init_memfd, j->cg, &j->spawn, &j->err)) < 0)
                goto fail;
        if (j->slot >= 0 && (r = core_veth_create(&m->pool, (unsigned)j->slot, j->spawn.pid, &j->err)) < 0) {
                sb_error_prefix(&j->err, "create veth");
                goto fail;
        }
        if ((r = setup_init(j, &j->err)) < 0)
                goto fail;
        return;
fail:
        kill_spawned(&j->spawn);
        if (j->slot >= 0)
                core_veth_delete((unsigned)j->slot, NULL);
        if (j->cg) {
                core_cgroup_kill_all(j->cg);
                core_cgroup_destroy(j->cg);
                core_cgroup_free(j->cg);
                j->cg = NULL;
        }
        if (made_dir) {
                core_rm_rf(sb->dir);
                core_rm_rf(sb->run_dir);
        }
        sb_error_default_reason(&j->err, "failed");
}

static int on_expire(sd_event_source *s, uint64_t usec, void *userdata);

static int session_start_timers(sandbox *sb) {
        session *s = sb->sess;
        sb->expires_ms = core_now_ms() + sb->timeout_ms;
        return sd_event_add_time_relative(sb->m->event, &s->expire_src, CLOCK_MONOTONIC,
                                          sb->timeout_ms * 1000, 10 * 1000, on_expire, sb);
}

/* Loop thread: the worker finished. */
static void create_done(void *userdata) {
        create_job *j = userdata;
        sandbox *sb = j->sb;
        manager *m = j->m;
        if (j->err) {
                log_info("create sandbox '%s' failed: %s", sb->name, j->err->message);
                rpc_reply_sb_error(j->req, j->err);
                manager_release_slot(m, j->slot);
                sandbox_unlink(m, sb);
                sandbox_free(sb);
                create_job_free(j);
                return;
        }
        session *s = calloc(1, sizeof(*s));
        s->sb = sb;
        s->pid = j->spawn.pid;
        s->pidfd = j->spawn.pidfd;
        s->agent_fd = j->spawn.agent_fd;
        s->net_slot = j->slot;
        s->cg = j->cg;
        s->started_ms = core_now_ms();
        core_random_hex(s->id, 32);
        sb->sess = s;
        cJSON *h = cJSON_CreateObject();
        char buf[40];
        cJSON_AddStringToObject(h, "id", s->id);
        cJSON_AddStringToObject(h, "status", "running");
        cJSON_AddStringToObject(h, "startedAt", core_format_time(s->started_ms, buf, sizeof(buf)));
        cJSON_AddNullToObject(h, "endedAt");
        cJSON_AddItemToArray(sb->sessions, h);
        sb->status = "running";
        int r = agent_attach(s, m->event);
        if (r >= 0)
                r = session_start_timers(sb);
        if (r < 0)
                log_warning_errno(r, "sandbox '%s': attach session: %m", sb->name);
        log_info("sandbox '%s' running (init pid %d, %s)", sb->name, (int)s->pid, sb->policy);
        rpc_reply(j->req, sandbox_to_json(sb));
        create_job_free(j);
}

static void method_create(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        sandbox *sb = calloc(1, sizeof(*sb));
        create_job *j = calloc(1, sizeof(*j));
        if (!sb || !j) {
                free(sb);
                free(j);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        sb->m = m;
        sb->sessions = cJSON_CreateArray();
        j->m = m;
        j->sb = sb;
        j->slot = -1;
        j->spawn.pidfd = j->spawn.agent_fd = -EBADF;
        if (parse_create(m, req, sb, j, &err) < 0) {
                rpc_reply_sb_error(req, err);
                goto drop;
        }
        if (manager_find_sandbox(m, sb->name)) {
                rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                "sandbox '%s' already exists; pick another name or delete it first", sb->name);
                goto drop;
        }
        if (streq(sb->policy, "allow-all") && (j->slot = manager_alloc_slot(m)) < 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "no free address in the network pool %s", m->cfg->network_pool);
                goto drop;
        }
        core_random_hex(sb->id, 32);
        sb->created_ms = core_now_ms();
        sb->status = "pending";
        if (asprintf(&sb->dir, "%s/%s", m->sandboxes_dir, sb->name) < 0 ||
            asprintf(&sb->run_dir, "%s/%s", m->run_sandboxes_dir, sb->name) < 0) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                goto drop;
        }
        /* Registered while pending, so a concurrent create of the same name
         * answers already_exists. */
        sb->next = m->sandboxes;
        m->sandboxes = sb;
        j->req = req;
        int r = worker_submit(create_work, create_done, j);
        if (r < 0) {
                sandbox_unlink(m, sb);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "start worker: %s", strerror(-r));
                goto drop;
        }
        return;
drop:
        manager_release_slot(m, j->slot);
        sandbox_free(sb);
        create_job_free(j);
}

/* ---- stop, timeout, teardown --------------------------------------------- */

static int on_kill_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        session *s = userdata;
        log_warning("sandbox '%s': sandbox-init did not stop in time; killing it", s->sb->name);
        if (s->pidfd >= 0)
                syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
        return 0;
}

static void session_stop(sandbox *sb) {
        session *s = sb->sess;
        if (!s || s->stopping)
                return;
        s->stopping = true;
        set_status(sb, "stopping");
        uint64_t grace = sb->m->cfg->stop_grace_ms;
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", "stop");
        cJSON_AddNumberToObject(op, "graceMs", (double)grace);
        if (agent_send(s, op) < 0 && s->pidfd >= 0)
                syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
        /* Backstop: init that ignores stop is killed (its PID namespace with it). */
        sd_event_add_time_relative(sb->m->event, &s->kill_src, CLOCK_MONOTONIC, (grace + 3000) * 1000, 0,
                                   on_kill_timer, s);
}

static int on_expire(sd_event_source *src, uint64_t usec, void *userdata) {
        sandbox *sb = userdata;
        log_info("sandbox '%s': timeout reached; stopping", sb->name);
        session_stop(sb);
        return 0;
}

typedef struct teardown_job {
        manager *m;
        sandbox *sb;
        session *s;       /* may be NULL */
        bool remove_files;
} teardown_job;

/* Worker thread: everything the kernel holds for the session, then files.
 * Every step is tried; errors are logged, never stop the rest. */
static void teardown_work(void *userdata) {
        teardown_job *t = userdata;
        if (t->s) {
                if (t->s->net_slot >= 0)
                        core_veth_delete((unsigned)t->s->net_slot, NULL);
                if (t->s->cg) {
                        core_cgroup_kill_all(t->s->cg);
                        int r = core_cgroup_destroy(t->s->cg);
                        if (r < 0)
                                log_warning_errno(r, "sandbox '%s': remove cgroup: %m", t->sb->name);
                }
        }
        if (t->remove_files) {
                int r = core_rm_rf(t->sb->dir);
                if (r < 0)
                        log_warning_errno(r, "sandbox '%s': remove %s: %m", t->sb->name, t->sb->dir);
        }
        core_rm_rf(t->sb->run_dir);
}

static void finish_requests(sandbox *sb, req_list *l, bool empty_result) {
        req_list taken = req_list_take(l);
        for (size_t i = 0; i < taken.n; i++)
                rpc_reply(taken.items[i], empty_result ? cJSON_CreateObject() : sandbox_to_json(sb));
        free(taken.items);
}

static void teardown_done(void *userdata) {
        teardown_job *t = userdata;
        sandbox *sb = t->sb;
        manager *m = t->m;
        if (t->s) {
                manager_release_slot(m, t->s->net_slot);
                core_cgroup_free(t->s->cg);
                free(t->s);
        }
        finish_requests(sb, &sb->stop_waiters, false);
        if (t->remove_files) {
                finish_requests(sb, &sb->delete_waiters, true);
                log_info("sandbox '%s' deleted", sb->name);
                commands_forget_sandbox(m, sb);
                sandbox_unlink(m, sb);
                sandbox_free(sb);
        }
        free(t);
}

static void start_teardown(sandbox *sb, session *s, bool remove_files) {
        teardown_job *t = calloc(1, sizeof(*t));
        t->m = sb->m;
        t->sb = sb;
        t->s = s;
        t->remove_files = remove_files;
        if (worker_submit(teardown_work, teardown_done, t) < 0) {
                teardown_work(t);
                teardown_done(t);
        }
}

void session_ended(session *s, int status) {
        sandbox *sb = s->sb;
        bool expected = s->stopping;
        log_info("sandbox '%s': session ended (init status %d%s)", sb->name, status,
                 expected ? "" : ", unexpected");
        s->kill_src = sd_event_source_disable_unref(s->kill_src);
        s->expire_src = sd_event_source_disable_unref(s->expire_src);
        agent_detach(s);
        commands_session_gone(s);
        sb->sess = NULL;
        sb->status = expected ? "stopped" : "failed";
        session_history_update(sb, sb->status, core_now_ms());
        /* A non-persistent sandbox lives exactly as long as its session. */
        bool remove = sb->deleting || !sb->persistent;
        if (remove)
                sb->deleting = true;
        start_teardown(sb, s, remove);
}

static sandbox *lookup(rpc_request *req, manager *m) {
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        if (rpc_param_string(req, "name", true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        sandbox *sb = manager_find_sandbox(m, name);
        if (!sb || streq(sb->status, "pending")) {
                reply_not_found(req, "sandbox", name);
                return NULL;
        }
        return sb;
}

static void method_get(rpc_request *req, void *userdata) {
        sandbox *sb = lookup(req, userdata);
        if (sb)
                rpc_reply(req, sandbox_to_json(sb));
}

static void method_stop(rpc_request *req, void *userdata) {
        sandbox *sb = lookup(req, userdata);
        if (!sb)
                return;
        if (!sb->sess) {
                if (sb->deleting)
                        req_list_add(&sb->stop_waiters, req);
                else
                        rpc_reply(req, sandbox_to_json(sb));
                return;
        }
        req_list_add(&sb->stop_waiters, req);
        session_stop(sb);
}

static void method_delete(rpc_request *req, void *userdata) {
        sandbox *sb = lookup(req, userdata);
        if (!sb)
                return;
        req_list_add(&sb->delete_waiters, req);
        if (sb->deleting)
                return;
        sb->deleting = true;
        if (sb->sess)
                session_stop(sb);
        else
                start_teardown(sb, NULL, true);
}

static void method_extend(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        int64_t duration = 0;
        if (rpc_param_int(req, "duration", true, 1, (int64_t)m->cfg->max_timeout_ms, &duration, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_require_running(req, m, "name");
        if (!sb)
                return;
        uint64_t now = core_now_ms();
        uint64_t expires = sb->expires_ms + (uint64_t)duration;
        if (expires > now + m->cfg->max_timeout_ms)
                expires = now + m->cfg->max_timeout_ms;
        sb->expires_ms = expires;
        sd_event_source_set_time_relative(sb->sess->expire_src, (expires - now) * 1000);
        sd_event_source_set_enabled(sb->sess->expire_src, SD_EVENT_ONESHOT);
        rpc_reply(req, sandbox_to_json(sb));
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
                    (cursor && strcmp(sb->name, cursor) <= 0))
                        continue;
                bool match = true;
                cJSON *t;
                cJSON_ArrayForEach(t, tags) {
                        const char *have = cJSON_GetStringValue(cJSON_GetObjectItem(sb->tags, t->string));
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

void sandbox_stop_all(manager *m) {
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                session *s = sb->sess;
                if (!s)
                        continue;
                /* Daemon exit: the PID namespace dies with its init. */
                if (s->pidfd >= 0) {
                        syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
                        siginfo_t si;
                        waitid(P_PIDFD, (id_t)s->pidfd, &si, WEXITED);
                }
                s->kill_src = sd_event_source_disable_unref(s->kill_src);
                s->expire_src = sd_event_source_disable_unref(s->expire_src);
                agent_detach(s);
                commands_session_gone(s);
                sb->sess = NULL;
                teardown_job t = {.m = m, .sb = sb, .s = s, .remove_files = !sb->persistent};
                teardown_work(&t);
                manager_release_slot(m, s->net_slot);
                core_cgroup_free(s->cg);
                free(s);
        }
}

void register_sandbox_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "sandbox.create", method_create, m);
        rpc_server_add_method(s, "sandbox.get", method_get, m);
        rpc_server_add_method(s, "sandbox.list", method_list, m);
        rpc_server_add_method(s, "sandbox.stop", method_stop, m);
        rpc_server_add_method(s, "sandbox.delete", method_delete, m);
        rpc_server_add_method(s, "sandbox.extendTimeout", method_extend, m);
}
