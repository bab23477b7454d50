/* container.* methods (docs/API.md "Containers"): containers inside a
 * running sandbox, each with its own root filesystem (a runtime as the
 * read-only lower, an upper of its own on the sandbox's disk), its own
 * mount namespace (made by sandbox-init, libcore/init/container.c) and its
 * own child cgroup of the session with its limits; and host mounts from
 * under daemon.json hostMountRoots.
 *
 * Where things live: the upper and work directories of container NAME are
 * <layer>/containers/NAME/{upper,work}, <layer> the sandbox's disk (its
 * upper's parent, core_disk_layer_dir): bounded by the sandbox's disk and
 * outside every tree the sandbox sees (its root is the overlay of
 * <layer>/upper). The daemon makes the overlay as a detached mount (on
 * idmapped layers in a user namespace, libcore/userns.h) and the host
 * mounts as detached clones, and hands the fds to init; no path of the
 * container's tree is ever resolved on the host.
 *
 * Lifetime: a container lives as long as its sandbox's session. It is
 * recorded in <run dir>/containers.json, so a restarted daemon re-adopts
 * it with the session (init keeps its namespace); when the session ends
 * (stop, delete, timeout, a crash of init) its processes, cgroup and
 * directories go with it, and a new session of a persistent sandbox
 * starts with none. */
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/openat2.h>
#include "libcore/agent.h"
#include "libcore/cgroup.h"
#include "libcore/container.h"
#include "libcore/diskimg.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/rootfs.h"
#include "libcore/userns.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/limits.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

#define CTR_PER_SANDBOX 32
#define CTR_MOUNTS_MAX 32
#define CTR_RECORD "containers.json"

struct ctr {
        struct ctr *next;
        char *name, *runtime;
        cJSON *mounts;          /* as given (source, destination, readOnly) */
        bool read_only_root;
        bool share_pids;        /* pidNamespace "sandbox" (else its own) */
        uint64_t memory_mib, cpu_millis, pids_max;
        uint64_t created_ms;
        core_cgroup *cg;        /* view of its child cgroup */
};

static void ctr_free(ctr *c) {
        if (!c)
                return;
        free(c->name);
        free(c->runtime);
        cJSON_Delete(c->mounts);
        core_cgroup_free(c->cg);
        free(c);
}

ctr *container_find(session *s, const char *name) {
        for (ctr *c = s ? s->ctrs : NULL; c && name; c = c->next)
                if (streq(c->name, name))
                        return c;
        return NULL;
}

bool container_uses_runtime(session *s, const char *name) {
        for (ctr *c = s ? s->ctrs : NULL; c; c = c->next)
                if (streq(c->runtime, name))
                        return true;
        return false;
}

bool container_writes_beyond(const session *s) {
        for (const ctr *c = s ? s->ctrs : NULL; c; c = c->next) {
                const cJSON *mt;
                cJSON_ArrayForEach(mt, c->mounts)
                        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mt, "readOnly")))
                                return true;
        }
        return false;
}

void container_thaw_all(session *s) {
        for (ctr *c = s ? s->ctrs : NULL; c; c = c->next) {
                if (!c->cg || core_cgroup_frozen(c->cg) <= 0)
                        continue;
                int r = core_cgroup_freeze(c->cg, false);
                if (r < 0)
                        log_warning_errno(r, "sandbox '%s': container '%s': thaw it for its stop: %m", s->sb->name,
                                          c->name);
        }
}

core_cgroup *container_cgroup(session *s, const char *name) {
        ctr *c = container_find(s, name);
        return c ? c->cg : NULL;
}

uint64_t container_memory_limit(session *s, const char *name) {
        ctr *c = container_find(s, name);
        return c ? c->memory_mib << 20 : 0;
}

static char *ctr_dir(const sandbox *sb, const char *name) {
        _cleanup_free_ char *layer = core_disk_layer_dir(sb->dir);
        char *p = NULL;
        if (!layer || asprintf(&p, "%s/containers%s%s", layer, name ? "/" : "", name ? name : "") < 0)
                return NULL;
        return p;
}

static cJSON *ctr_json(const ctr *c, bool usage) {
        cJSON *o = cJSON_CreateObject();
        char ts[64];
        cJSON_AddStringToObject(o, "name", c->name);
        cJSON_AddStringToObject(o, "runtime", c->runtime);
        cJSON_AddItemToObject(o, "mounts", c->mounts ? cJSON_Duplicate(c->mounts, 1) : cJSON_CreateArray());
        cJSON_AddBoolToObject(o, "readOnlyRoot", c->read_only_root);
        cJSON_AddStringToObject(o, "pidNamespace", c->share_pids ? "sandbox" : "container");
        cJSON *l = cJSON_AddObjectToObject(o, "limits");
        if (c->memory_mib)
                cJSON_AddNumberToObject(l, "memoryMiB", (double)c->memory_mib);
        if (c->cpu_millis)
                cJSON_AddNumberToObject(l, "cpuMillis", (double)c->cpu_millis);
        if (c->pids_max)
                cJSON_AddNumberToObject(l, "pidsMax", (double)c->pids_max);
        cJSON_AddStringToObject(o, "createdAt", core_format_time(c->created_ms, ts, sizeof(ts)));
        if (!usage)
                return o;
        cJSON_AddBoolToObject(o, "paused", core_cgroup_frozen(c->cg) > 0);
        core_cgroup_usage u = { UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX };
        (void)core_cgroup_read_usage(c->cg, &u);
        cJSON *uj = cJSON_AddObjectToObject(o, "usage");
#define FIG(key, v) ((v) == UINT64_MAX ? (void)cJSON_AddNullToObject(uj, key) : (void)cJSON_AddNumberToObject(uj, key, (double)(v)))
        FIG("cpuMs", u.cpu_usec == UINT64_MAX ? UINT64_MAX : u.cpu_usec / 1000);
        FIG("memoryBytes", u.memory_bytes);
        FIG("memoryPeakBytes", u.memory_peak_bytes);
        FIG("pids", u.pids);
#undef FIG
        uint64_t ooms = 0;
        if (core_cgroup_oom_kills(c->cg, &ooms) < 0)
                cJSON_AddNullToObject(o, "oomKills");
        else
                cJSON_AddNumberToObject(o, "oomKills", (double)ooms);
        return o;
}

/* <run dir>/containers.json: every container of the session, for a
 * restarted daemon (container_adopt). Best effort, logged. */
static void save_record(session *s) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/%s", s->sb->run_dir, CTR_RECORD) < 0)
                return;
        if (!s->ctrs) {
                (void)unlink(path);
                return;
        }
        _cleanup_(cJSON_Deletep) cJSON *a = cJSON_CreateArray();
        for (ctr *c = s->ctrs; c; c = c->next) {
                cJSON *o = ctr_json(c, false);
                cJSON_AddNumberToObject(o, "createdMs", (double)c->created_ms);
                cJSON_AddItemToArray(a, o);
        }
        _cleanup_free_ char *text = cJSON_PrintUnformatted(a);
        int r = text ? core_write_file_atomic(path, text, strlen(text), 0600) : -ENOMEM;
        if (r < 0)
                log_warning_errno(r, "sandbox '%s': record its containers: %m", s->sb->name);
}

static uint64_t num_or0(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 9007199254740992.0 ? (uint64_t)v->valuedouble : 0;
}

void container_adopt(session *s) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        if (!s->cg || asprintf(&path, "%s/%s", s->sb->run_dir, CTR_RECORD) < 0 ||
            core_read_file(path, 4 << 20, &text, NULL) < 0)
                return;
        _cleanup_(cJSON_Deletep) cJSON *a = cJSON_Parse(text);
        const cJSON *o;
        cJSON_ArrayForEach(o, a) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
                const char *rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "runtime"));
                ctr *c = name && rt && core_name_is_valid(name) ? calloc(1, sizeof(*c)) : NULL;
                if (!c)
                        continue;
                const cJSON *lim = cJSON_GetObjectItemCaseSensitive(o, "limits");
                c->name = strdup(name);
                c->runtime = strdup(rt);
                c->mounts = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(o, "mounts"), 1);
                c->read_only_root = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "readOnlyRoot"));
                /* A record without it is older than own PID namespaces:
                 * its container shares the sandbox's. */
                const char *pns = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "pidNamespace"));
                c->share_pids = !pns || streq(pns, "sandbox");
                c->memory_mib = num_or0(lim, "memoryMiB");
                c->cpu_millis = num_or0(lim, "cpuMillis");
                c->pids_max = num_or0(lim, "pidsMax");
                c->created_ms = num_or0(o, "createdMs");
                if (!c->name || !c->runtime || core_cgroup_container_open(s->cg, name, &c->cg) < 0) {
                        ctr_free(c);
                        continue;
                }
                c->next = s->ctrs;
                s->ctrs = c;
        }
}

static void reconcile_done(session *s, cJSON *result, int err, const char *message, void *userdata);

void container_reconcile(session *s) {
        cJSON *pkt = cJSON_CreateObject();
        if (!pkt)
                return;
        cJSON_AddStringToObject(pkt, "op", "container");
        cJSON_AddStringToObject(pkt, "action", "list");
        if (agent_call(s, pkt, reconcile_done, NULL) < 0)
                log_warning("sandbox '%s': could not list its containers", s->sb->name);
}

/* Removes what is left of container `name` of s on the host: its
 * processes, cgroup and directories. */
static void remove_leftover(session *s, const char *name) {
        core_cgroup *cg = NULL;
        if (s->cg && core_cgroup_container_open(s->cg, name, &cg) >= 0) {
                (void)core_cgroup_kill_all(cg);
                (void)core_cgroup_destroy(cg);
                core_cgroup_free(cg);
        }
        _cleanup_free_ char *dir = ctr_dir(s->sb, name);
        if (dir)
                (void)core_rm_rf(dir);
}

/* After a restart: init's containers and the record agree. A record init
 * does not have (its delete was answered, the record not yet written) and
 * a container of init the record does not name (made, not yet recorded)
 * were cut in half by the daemon's death: both are removed. */
static void reconcile_done(session *s, cJSON *result, int err, const char *message, void *userdata) {
        (void)userdata;
        if (err < 0 || !s || s->stopping) {
                if (s && err < 0)
                        log_warning("sandbox '%s': list its containers: %s", s->sb->name,
                                    message ? message : strerror(-err));
                return;
        }
        const cJSON *names = cJSON_GetObjectItemCaseSensitive(result, "containers");
        bool changed = false;
        for (ctr **p = &s->ctrs; *p;) {
                bool known = false;
                const cJSON *n;
                cJSON_ArrayForEach(n, names)
                        known = known || (cJSON_IsString(n) && streq(n->valuestring, (*p)->name));
                if (known) {
                        p = &(*p)->next;
                        continue;
                }
                ctr *c = *p;
                *p = c->next;
                log_info("sandbox '%s': container '%s' was half deleted; removed", s->sb->name, c->name);
                remove_leftover(s, c->name);
                ctr_free(c);
                changed = true;
        }
        const cJSON *n;
        cJSON_ArrayForEach(n, names) {
                if (!cJSON_IsString(n) || !core_name_is_valid(n->valuestring) || container_find(s, n->valuestring))
                        continue;
                log_info("sandbox '%s': container '%s' was half made; removed", s->sb->name, n->valuestring);
                remove_leftover(s, n->valuestring);
                cJSON *pkt = cJSON_CreateObject();
                cJSON_AddStringToObject(pkt, "op", "container");
                cJSON_AddStringToObject(pkt, "action", "delete");
                cJSON_AddStringToObject(pkt, "name", n->valuestring);
                (void)agent_call(s, pkt, NULL, NULL);
        }
        if (changed)
                save_record(s);
}

/* A create in flight holds its name until init answers (a second create
 * of the name must not reuse the first one's cgroup and directory). */
static bool name_pending(const session *s, const char *name) {
        const cJSON *n;
        cJSON_ArrayForEach(n, s->ctr_pending)
                if (cJSON_IsString(n) && streq(n->valuestring, name))
                        return true;
        return false;
}

static void pending_drop(session *s, const char *name) {
        int i = 0;
        const cJSON *n;
        cJSON_ArrayForEach(n, s->ctr_pending) {
                if (cJSON_IsString(n) && streq(n->valuestring, name)) {
                        cJSON_DeleteItemFromArray(s->ctr_pending, i);
                        return;
                }
                i++;
        }
}

void container_forget(session *s) {
        cJSON_Delete(s->ctr_pending);
        s->ctr_pending = NULL;
        while (s->ctrs) {
                ctr *c = s->ctrs;
                s->ctrs = c->next;
                ctr_free(c);
        }
}

void container_session_end(session *s) {
        bool had = s->ctrs != NULL;
        while (s->ctrs) {
                ctr *c = s->ctrs;
                s->ctrs = c->next;
                ctr_free(c);
        }
        _cleanup_free_ char *dir = ctr_dir(s->sb, NULL), *path = NULL;
        /* Nothing runs there any more (init and its namespaces are gone):
         * removed without following anything the containers wrote. */
        if (dir) {
                int r = core_rm_rf(dir);
                if (r < 0 && had)
                        log_warning_errno(r, "sandbox '%s': remove its containers' files: %m", s->sb->name);
        }
        if (asprintf(&path, "%s/%s", s->sb->run_dir, CTR_RECORD) >= 0)
                (void)unlink(path);
}

/* ---- host mounts ---------------------------------------------------------- */

static bool path_clean(const char *p) {
        if (!p || p[0] != '/' || !p[1])
                return false;
        for (const char *c = p; *c;) {
                while (*c == '/')
                        c++;
                size_t n = strcspn(c, "/");
                if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += n;
        }
        return true;
}

int container_host_mount(const daemon_config *cfg, const char *field, const char *source, bool ro,
                         sb_error **ret_err) {
        if (!path_clean(source))
                return sb_error_set(ret_err, -EINVAL, NULL, field,
                                    "%s: must be an absolute host path other than / without '.' or '..' components",
                                    field);
        const char *root = NULL, *rel = NULL;
        for (char **r = cfg->host_mount_roots; r && *r && !root; r++) {
                size_t n = strlen(*r);
                while (n > 1 && (*r)[n - 1] == '/')
                        n--;
                if (strncmp(source, *r, n) == 0 && source[n] == '/' && source[n + strspn(source + n, "/")]) {
                        root = *r;
                        rel = source + n + strspn(source + n, "/");
                }
        }
        if (!root)
                return sb_error_set(ret_err, -EACCES, "permission_denied", field,
                                    "%s: '%s' does not lie under any of daemon.json hostMountRoots%s", field, source,
                                    cfg->host_mount_roots && cfg->host_mount_roots[0] ? "" : " (none are set)");
        _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (rootfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, field, "%s: open hostMountRoot %s: %m", field, root);
        /* Beneath the root, no symlink in any component (the last one
         * included), no magic link: a link planted in a kubelet or
         * tenant-writable directory cannot lead the bind elsewhere. */
        struct open_how how = { .flags = O_PATH | O_CLOEXEC,
                                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        _cleanup_close_ int fd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
        if (fd < 0) {
                int r = negative_errno();
                return sb_error_set(ret_err, r, r == -ENOENT ? "not_found" : "permission_denied", field, "%s: '%s' %s", field,
                                    source, core_beneath_strerror(r));
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)))
                return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: '%s' must be a directory or a regular file",
                                    field, source);
        int tree = open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
        if (tree < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, field, "%s: clone '%s': %m", field, source);
        /* Read-only in the mount itself; inside, no command may remount
         * (seccomp refuses the mount family, none holds CAP_SYS_ADMIN). */
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (ro ? MOUNT_ATTR_RDONLY : 0),
                .propagation = MS_PRIVATE,
        };
        if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0) {
                int r = negative_errno();
                close(tree);
                return sb_error_set(ret_err, r, NULL, field, "%s: mount attributes of '%s': %s", field, source,
                                    strerror(-r));
        }
        return tree;
}

bool container_may_mount(manager *m, const rpc_request *req) {
        return req->conn && rpc_conn_uid(req->conn) == 0 && tenant_req_admin(m, req);
}

/* ---- container.create ----------------------------------------------------- */

typedef struct create_op {
        rpc_request *req;
        ctr *c;
        char *dir;
} create_op;

static int keys_only(const cJSON *o, const char *const *keys, const char *where, sb_error **ret_err) {
        const cJSON *it;
        cJSON_ArrayForEach(it, o) {
                bool ok = false;
                for (size_t i = 0; keys[i] && !ok; i++)
                        ok = streq(it->string, keys[i]);
                if (!ok)
                        return sb_error_set(ret_err, -EINVAL, NULL, where, "%s.%s: unknown field (known: source, "
                                            "destination, readOnly)", where, it->string);
        }
        return 0;
}

/* The overlay for a container: the runtime read-only below, the
 * container's upper/work. */
static int make_overlay(session *s, const char *lower, const char *dir, sb_error **ret_err) {
        int fd;
        if (s->sb->userns_base) {
                char ns[64];
                snprintf(ns, sizeof(ns), "/proc/%d/ns/user", (int)s->pid);
                _cleanup_close_ int nsfd = open(ns, O_RDONLY | O_CLOEXEC);
                if (nsfd < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", ns);
                fd = core_userns_overlay(nsfd, lower, dir, s->sb->userns_base, ret_err);
                if (fd < 0)
                        return fd;
        } else {
                _cleanup_free_ char *upper = NULL, *work = NULL;
                if (asprintf(&upper, "%s/upper", dir) < 0 || asprintf(&work, "%s/work", dir) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                _cleanup_close_ int fs = fsopen("overlay", FSOPEN_CLOEXEC);
                if (fs < 0 || fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir", lower, 0) < 0 ||
                    fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) < 0 ||
                    fsconfig(fs, FSCONFIG_SET_STRING, "workdir", work, 0) < 0 ||
                    fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay: %m");
                fd = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
                if (fd < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay: fsmount: %m");
        }
        /* readOnlyRoot is applied by sandbox-init once the mount points
         * on the root are made (libcore/init/container.c). */
        return fd;
}

static void create_done(session *s, cJSON *result, int err, const char *message, void *userdata) {
        (void)result;
        create_op *op = userdata;
        ctr *c = op->c;
        if (s)
                pending_drop(s, c->name);
        if (err < 0 || !s || s->stopping || !s->sb->sess) {
                rpc_reply_error(op->req, RPC_APP_ERROR, err == -EEXIST ? "already_exists" : "failed", NULL,
                                "container.create '%s': %s", c->name, message ? message : strerror(err < 0 ? -err : EIO));
                core_cgroup_kill_all(c->cg);
                (void)core_cgroup_destroy(c->cg);
                (void)core_rm_rf(op->dir);
                ctr_free(c);
        } else {
                core_fault("container.made");
                c->next = s->ctrs;
                s->ctrs = c;
                save_record(s);
                rpc_reply(op->req, ctr_json(c, true));
                log_info("sandbox '%s': container '%s' created (runtime %s)", s->sb->name, c->name, c->runtime);
        }
        free(op->dir);
        free(op);
}

/* The fds of one creation, in the order init indexes them. */
typedef struct fdset {
        int fd[64];
        size_t n;
} fdset;

static void fdset_close(fdset *f) {
        for (size_t i = 0; i < f->n; i++)
                if (f->fd[i] >= 0)
                        close(f->fd[i]);
        f->n = 0;
}

static int parse_mounts(manager *m, rpc_request *req, cJSON *mounts, cJSON *pkt_mounts, fdset *fds,
                        sb_error **ret_err) {
        static const char *const keys[] = { "source", "destination", "readOnly", NULL };
        int i = 0;
        const cJSON *mt;
        if (mounts && !container_may_mount(m, req))
                return sb_error_set(ret_err, -EACCES, "permission_denied", "mounts",
                                    "mounts: host mounts may be asked for by root on the local socket only");
        if (mounts && (!cJSON_IsArray(mounts) || cJSON_GetArraySize(mounts) > CTR_MOUNTS_MAX))
                return sb_error_set(ret_err, -EINVAL, NULL, "mounts", "mounts: must be an array of at most %d objects",
                                    CTR_MOUNTS_MAX);
        cJSON_ArrayForEach(mt, mounts) {
                char where[64], f_src[80], f_dst[80];
                snprintf(where, sizeof(where), "mounts[%d]", i);
                snprintf(f_src, sizeof(f_src), "%s.source", where);
                snprintf(f_dst, sizeof(f_dst), "%s.destination", where);
                if (!cJSON_IsObject(mt))
                        return sb_error_set(ret_err, -EINVAL, NULL, where, "%s: must be an object", where);
                int r = keys_only(mt, keys, where, ret_err);
                if (r < 0)
                        return r;
                const cJSON *src = cJSON_GetObjectItemCaseSensitive(mt, "source");
                const cJSON *dst = cJSON_GetObjectItemCaseSensitive(mt, "destination");
                const cJSON *ro = cJSON_GetObjectItemCaseSensitive(mt, "readOnly");
                if (!cJSON_IsString(src) || strlen(src->valuestring) > LIMIT_PATH_BYTES)
                        return sb_error_set(ret_err, -EINVAL, NULL, f_src, "%s: must be a path of at most %d bytes",
                                            f_src, LIMIT_PATH_BYTES);
                if (!cJSON_IsString(dst) || strlen(dst->valuestring) > LIMIT_PATH_BYTES || !path_clean(dst->valuestring))
                        return sb_error_set(ret_err, -EINVAL, NULL, f_dst,
                                            "%s: must be an absolute path other than / without '.' or '..' components "
                                            "(at most %d bytes)",
                                            f_dst, LIMIT_PATH_BYTES);
                /* The kernel's filesystems init mounts fresh: a host tree
                 * over /proc would stand where init and its copy children
                 * look up /proc/self (as volumes, which /dev refuses too;
                 * a host mount may bind a file under /dev, as kubelet's
                 * termination log). */
                if (core_path_is_within(dst->valuestring, "/proc") || core_path_is_within(dst->valuestring, "/sys"))
                        return sb_error_set(ret_err, -EINVAL, NULL, f_dst,
                                            "%s: %s: nothing may be mounted under /proc or /sys (the sandbox's own)",
                                            f_dst, TEXT_Q(dst->valuestring));
                if (ro && !cJSON_IsBool(ro))
                        return sb_error_set(ret_err, -EINVAL, NULL, where, "%s.readOnly: must be true or false", where);
                if (fds->n >= ELEMENTSOF(fds->fd) - 8)
                        return sb_error_set(ret_err, -E2BIG, NULL, "mounts", "mounts: too many");
                int tree = container_host_mount(m->cfg, f_src, src->valuestring, cJSON_IsTrue(ro), ret_err);
                if (tree < 0)
                        return tree;
                cJSON *pm = cJSON_CreateObject();
                cJSON_AddStringToObject(pm, "destination", dst->valuestring);
                cJSON_AddNumberToObject(pm, "fd", (double)fds->n);
                cJSON_AddItemToArray(pkt_mounts, pm);
                fds->fd[fds->n++] = tree;
                i++;
        }
        return 0;
}

int container_mounts_userns_check(const cJSON *mounts, bool userns, sb_error **ret_err) {
        int i = 0;
        const cJSON *mt;
        if (userns)
                return 0;
        cJSON_ArrayForEach(mt, mounts) {
                if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mt, "readOnly")))
                        return sb_error_set(ret_err, -EACCES, "permission_denied", "mounts",
                                            "mounts[%d].readOnly: a sandbox without a user namespace gets host "
                                            "mounts read-only only (root inside is host root on the host's files: it "
                                            "could leave a setuid-root program there); give \"readOnly\": true, or "
                                            "use a sandbox with \"userns\": true",
                                            i);
                i++;
        }
        return 0;
}

int container_mounts_check(manager *m, const rpc_request *req, const cJSON *mounts, sb_error **ret_err) {
        _cleanup_(cJSON_Deletep) cJSON *pkt = cJSON_CreateArray();
        _cleanup_(fdset_close) fdset fds = { .n = 0 };
        if (!pkt)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        return parse_mounts(m, (rpc_request *)req, (cJSON *)mounts, pkt, &fds, ret_err);
}

int container_sandbox_mounts(const sandbox *sb, cJSON *pkt_mounts, int *fds, size_t *n, size_t max,
                             sb_error **ret_err) {
        int i = 0;
        const cJSON *mt;
        cJSON_ArrayForEach(mt, sb->mounts) {
                char field[64];
                snprintf(field, sizeof(field), "mounts[%d].source", i);
                const char *src = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mt, "source"));
                const char *dst = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(mt, "destination"));
                if (!src || !dst || !path_clean(dst))
                        return sb_error_set(ret_err, -EINVAL, NULL, "mounts", "mounts[%d]: not a valid record", i);
                if (*n >= max)
                        return sb_error_set(ret_err, -E2BIG, NULL, "mounts", "mounts: too many");
                /* Read-only without a user namespace whatever the record
                 * says (container_mounts_userns_check; a record older
                 * than that rule may hold a writable one). */
                int tree = container_host_mount(sb->m->cfg, field, src,
                                                !sb->userns ||
                                                        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(mt, "readOnly")),
                                                ret_err);
                if (tree < 0)
                        return tree;
                cJSON *pm = cJSON_CreateObject();
                cJSON_AddStringToObject(pm, "destination", dst);
                cJSON_AddNumberToObject(pm, "fd", (double)*n);
                cJSON_AddItemToArray(pkt_mounts, pm);
                fds[(*n)++] = tree;
                i++;
        }
        return 0;
}

/* The host runtime is a skeleton: the host's /usr and the few /etc entries
 * are bound in read-only, as for a sandbox (session.c setup_packet). */
static int host_runtime_binds(session *s, cJSON *pkt_mounts, fdset *fds, sb_error **ret_err) {
        for (size_t i = 0; core_runtime_host_binds[i][0]; i++) {
                if (access(core_runtime_host_binds[i][0], F_OK) < 0)
                        continue;
                if (fds->n >= ELEMENTSOF(fds->fd) - 8)
                        return sb_error_set(ret_err, -E2BIG, NULL, NULL, "too many binds");
                int fd = s->sb->userns_base ? core_userns_bind_tree(core_runtime_host_binds[i][0], true, ret_err)
                                            : core_rootfs_clone_tree(AT_FDCWD, core_runtime_host_binds[i][0], true, ret_err);
                if (fd < 0)
                        return fd;
                cJSON *pm = cJSON_CreateObject();
                cJSON_AddStringToObject(pm, "destination", core_runtime_host_binds[i][1]);
                cJSON_AddNumberToObject(pm, "fd", (double)fds->n);
                /* First in the list: the caller's mounts go over them. */
                cJSON_InsertItemInArray(pkt_mounts, 0, pm);
                fds->fd[fds->n++] = fd;
        }
        return 0;
}

static int parse_limit(rpc_request *req, const char *field, int64_t min, int64_t max, uint64_t *ret, sb_error **ret_err) {
        int64_t v = 0;
        int r = rpc_param_int(req, field, false, min, max, &v, ret_err);
        if (r >= 0)
                *ret = (uint64_t)v;
        return r;
}

static void method_create(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL, *runtime = NULL, *pidns = NULL;
        cJSON *mounts = NULL;
        bool ro = false;
        _cleanup_free_ ctr *c = calloc(1, sizeof(*c));
        if (!c)
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
        if (rpc_param_string(req, "name", true, &name, &err) < 0 ||
            rpc_param_string(req, "runtime", true, &runtime, &err) < 0 ||
            rpc_param_array(req, "mounts", false, &mounts, &err) < 0 ||
            rpc_param_bool(req, "readOnlyRoot", &ro, &err) < 0 ||
            rpc_param_string(req, "pidNamespace", false, &pidns, &err) < 0 ||
            parse_limit(req, "memoryMiB", 16, 1 << 20, &c->memory_mib, &err) < 0 ||
            parse_limit(req, "cpuMillis", 10, 1000 * 1024, &c->cpu_millis, &err) < 0 ||
            parse_limit(req, "pidsMax", 1, 1 << 22, &c->pids_max, &err) < 0)
                return rpc_reply_sb_error(req, err);
        if (!core_name_is_valid(name))
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "name",
                                       "name: must match [a-z0-9][a-z0-9-]{0,62}");
        /* The CRI's NamespaceOption.pid: CONTAINER (its own, the default)
         * or POD (the sandbox's, shared by its containers). */
        if (pidns && !streq(pidns, "container") && !streq(pidns, "sandbox"))
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "pidNamespace",
                                       "pidNamespace: must be \"container\" (a PID namespace of its own, the "
                                       "default) or \"sandbox\" (the sandbox's, shared with its other containers)");
        c->share_pids = pidns && streq(pidns, "sandbox");
        /* One this client may use (a tenant's own or a shared one),
         * imported completely. */
        if (runtime_check(m, req, runtime, "runtime", &err) < 0)
                return rpc_reply_sb_error(req, err);
        _cleanup_free_ char *lower = runtime_dir(m, runtime);
        if (!lower)
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
        _cleanup_(cJSON_Deletep) cJSON *pkt = cJSON_CreateObject();
        cJSON *pkt_mounts = cJSON_AddArrayToObject(pkt, "mounts");
        _cleanup_(fdset_close) fdset fds = { .n = 1, .fd = { -EBADF } }; /* [0]: the overlay */
        /* Host mounts are checked before anything is made (refused naming
         * the mount, nothing left behind). */
        if (parse_mounts(m, req, mounts, pkt_mounts, &fds, &err) < 0)
                return rpc_reply_sb_error(req, err);
        sandbox *sb = sandbox_require_unpaused(req, m, "sandbox", method_create);
        if (!sb)
                return;
        session *s = sb->sess;
        if (!tenant_req_owns(m, req, sb->owner))
                return rpc_reply_error(req, RPC_APP_ERROR, "not_found", "sandbox", "no sandbox '%s'", sb->name);
        if (container_mounts_userns_check(mounts, sb->userns, &err) < 0)
                return rpc_reply_sb_error(req, err);
        unsigned count = 0;
        for (ctr *o = s->ctrs; o; o = o->next)
                count++;
        count += (unsigned)cJSON_GetArraySize(s->ctr_pending);
        if (container_find(s, name) || name_pending(s, name))
                return rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                       "name: sandbox '%s' has a container '%s' already", sb->name, name);
        if (count >= CTR_PER_SANDBOX)
                return rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", "name",
                                       "name: sandbox '%s' has %u containers, the most it may have", sb->name, count);
        if (!s->cg)
                return rpc_reply_error(req, RPC_APP_ERROR, "unavailable", NULL, "sandbox '%s' has no cgroup", sb->name);
        if (streq(runtime, "host") && host_runtime_binds(s, pkt_mounts, &fds, &err) < 0)
                return rpc_reply_sb_error(req, err);
        _cleanup_free_ char *dir = ctr_dir(sb, name), *upper = NULL, *work = NULL;
        if (!dir || asprintf(&upper, "%s/upper", dir) < 0 || asprintf(&work, "%s/work", dir) < 0)
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
        (void)core_rm_rf(dir); /* a leftover of a crash between its creation and its record */
        int r = core_mkdir_p(upper, 0755);
        if (r >= 0)
                r = core_mkdir_p(work, 0700);
        /* Owned by host root on disk, as the sandbox's own: through the
         * idmapped mount (user namespace) that is root inside. */
        if (r < 0) {
                (void)core_rm_rf(dir);
                return rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "container.create '%s': directories: %s",
                                       name, strerror(-r));
        }
        fds.fd[0] = make_overlay(s, lower, dir, &err);
        /* CPU above the sandbox's own is bounded by it anyway (and a v1
         * child quota above its parent's is refused): at most that. */
        uint64_t cpu = c->cpu_millis < (uint64_t)sb->vcpus * 1000 ? c->cpu_millis : (uint64_t)sb->vcpus * 1000;
        core_cgroup_limits lim = { .pids_max = c->pids_max, .memory_max = c->memory_mib << 20,
                                   .cpu_quota_pct = (unsigned)(cpu / 10) };
        int cgfds[8];
        size_t n_cg = 0;
        if (fds.fd[0] < 0 ||
            core_cgroup_container_create(s->cg, name, &lim, &c->cg, cgfds, ELEMENTSOF(cgfds), &n_cg, &err) < 0) {
                (void)core_rm_rf(dir);
                sb_error_prefix(&err, "container.create '%s'", name);
                return rpc_reply_sb_error(req, err);
        }
        core_fault("container.cgroup_made");
        cJSON *cgs = cJSON_AddArrayToObject(pkt, "cgroups");
        for (size_t i = 0; i < n_cg; i++) {
                cJSON_AddItemToArray(cgs, cJSON_CreateNumber((double)fds.n));
                fds.fd[fds.n++] = cgfds[i];
        }
        c->name = strdup(name);
        c->runtime = strdup(runtime);
        c->mounts = mounts ? cJSON_Duplicate(mounts, 1) : cJSON_CreateArray();
        c->read_only_root = ro;
        c->created_ms = core_now_ms();
        /* Every fd in a packet of its own (the agent's transport carries
         * one), in index order, then the request that takes them. */
        r = 0;
        for (size_t i = 0; i < fds.n && r >= 0; i++) {
                cJSON *f = cJSON_CreateObject();
                cJSON_AddStringToObject(f, "op", "ctrfd");
                cJSON_AddNumberToObject(f, "index", (double)i);
                r = agent_send_fd(s, f, TAKE_FD(fds.fd[i]));
        }
        create_op *op = calloc(1, sizeof(*op));
        cJSON_AddStringToObject(pkt, "op", "container");
        cJSON_AddStringToObject(pkt, "action", "create");
        cJSON_AddStringToObject(pkt, "name", name);
        cJSON_AddBoolToObject(pkt, "readOnlyRoot", ro);
        cJSON_AddBoolToObject(pkt, "ownPids", !c->share_pids);
        cJSON_AddNumberToObject(pkt, "tmpSize", (double)(c->memory_mib ? (c->memory_mib << 20) / 2 : (uint64_t)sb->vcpus << 30));
        if (op) {
                op->req = req;
                op->c = TAKE_PTR(c);
                op->dir = TAKE_PTR(dir);
                if (!s->ctr_pending)
                        s->ctr_pending = cJSON_CreateArray();
                cJSON_AddItemToArray(s->ctr_pending, cJSON_CreateString(name));
        }
        if (!op || r < 0 || (r = agent_call(s, TAKE_PTR(pkt), create_done, op)) < 0) {
                if (op)
                        create_done(s, NULL, r < 0 ? r : -ENOMEM, "could not reach sandbox-init", op);
                else
                        rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
        }
}

/* ---- get, list, delete ------------------------------------------------------ */

static sandbox *require_running(rpc_request *req, manager *m, rpc_handler self) {
        sandbox *sb = sandbox_require_unpaused(req, m, "sandbox", self);
        if (sb && !tenant_req_owns(m, req, sb->owner)) {
                rpc_reply_error(req, RPC_APP_ERROR, "not_found", "sandbox", "no sandbox '%s'", sb->name);
                return NULL;
        }
        return sb;
}

/* The container a request's "name" names in the sandbox it names (running,
 * not paused, the caller's own), that sandbox in *ret_sb; NULL once the
 * request is answered (a bad parameter, no such sandbox or container) or
 * left to redo (require_running). */
static ctr *require_container(rpc_request *req, manager *m, rpc_handler redo, sandbox **ret_sb) {
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        if (rpc_param_string(req, "name", true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        sandbox *sb = require_running(req, m, redo);
        if (!sb)
                return NULL;
        ctr *c = container_find(sb->sess, name);
        if (!c) {
                rpc_reply_error(req, RPC_APP_ERROR, "not_found", "name", "sandbox '%s' has no container '%s'",
                                sb->name, name);
                return NULL;
        }
        *ret_sb = sb;
        return c;
}

static void method_get(rpc_request *req, void *userdata) {
        manager *m = userdata;
        sandbox *sb = NULL;
        ctr *c = require_container(req, m, method_get, &sb);
        if (!c)
                return;
        rpc_reply(req, ctr_json(c, true));
}

static void method_list(rpc_request *req, void *userdata) {
        manager *m = userdata;
        sandbox *sb = require_running(req, m, method_list);
        if (!sb)
                return;
        cJSON *o = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(o, "containers");
        for (ctr *c = sb->sess->ctrs; c; c = c->next)
                cJSON_AddItemToArray(a, ctr_json(c, true));
        rpc_reply(req, o);
}

typedef struct delete_op {
        rpc_request *req;
        char *name;
} delete_op;

static void delete_done(session *s, cJSON *result, int err, const char *message, void *userdata) {
        (void)result;
        delete_op *op = userdata;
        core_fault("container.init_deleted");
        /* init forgot it (or never had it: a daemon restart in between);
         * either way nothing of it is left to keep. */
        if (err < 0 && err != -ENOENT)
                log_warning("container '%s': sandbox-init: %s", op->name, message ? message : strerror(-err));
        ctr *c = s ? container_find(s, op->name) : NULL;
        if (c) {
                for (ctr **p = &s->ctrs; *p; p = &(*p)->next)
                        if (*p == c) {
                                *p = c->next;
                                break;
                        }
                int r = core_cgroup_destroy(c->cg);
                if (r < 0)
                        log_warning_errno(r, "sandbox '%s': remove container '%s' cgroup: %m", s->sb->name, c->name);
                _cleanup_free_ char *dir = ctr_dir(s->sb, c->name);
                if (dir && (r = core_rm_rf(dir)) < 0)
                        log_warning_errno(r, "sandbox '%s': remove container '%s' files: %m", s->sb->name, c->name);
                ctr_free(c);
                save_record(s);
        }
        rpc_reply(op->req, NULL);
        free(op->name);
        free(op);
}

static void method_delete(rpc_request *req, void *userdata) {
        manager *m = userdata;
        sandbox *sb = NULL;
        ctr *c = require_container(req, m, method_delete, &sb);
        if (!c)
                return;
        const char *name = c->name;
        /* Its processes first (the whole child cgroup), so nothing holds
         * its namespace or writes its upper once init drops it. */
        int r = core_cgroup_kill_all(c->cg);
        if (r < 0)
                log_warning_errno(r, "sandbox '%s': kill container '%s': %m", sb->name, name);
        delete_op *op = calloc(1, sizeof(*op));
        cJSON *pkt = cJSON_CreateObject();
        if (!op || !pkt || !(op->name = strdup(name))) {
                free(op);
                cJSON_Delete(pkt);
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
        }
        op->req = req;
        cJSON_AddStringToObject(pkt, "op", "container");
        cJSON_AddStringToObject(pkt, "action", "delete");
        cJSON_AddStringToObject(pkt, "name", name);
        if ((r = agent_call(sb->sess, pkt, delete_done, op)) < 0)
                delete_done(sb->sess, NULL, r, NULL, op);
}

/* container.pause / container.resume: the container's own cgroup frozen
 * or thawed (cgroup v2 cgroup.freeze, else the v1 freezer; as
 * sandbox.pause does for the session, pause.c), its processes only: the
 * sandbox and its other containers run on. The state is the kernel's
 * (a restarted daemon finds it there): a freeze of the sandbox and its
 * thaw leave a paused container paused; delete and the session's end kill
 * it as any other (core_cgroup_kill_all thaws after the kill). */
static void method_pause_resume(rpc_request *req, manager *m, bool freeze, rpc_handler self) {
        sandbox *sb = NULL;
        ctr *c = require_container(req, m, self, &sb);
        if (!c)
                return;
        const char *name = c->name;
        if (sb->capturing)
                return rpc_reply_error(req, RPC_APP_ERROR, "unavailable", "sandbox",
                                       "sandbox '%s': a snapshot or fork of it is being taken; try again in a moment",
                                       sb->name);
        int r = core_cgroup_freeze(c->cg, freeze);
        if (r < 0 && freeze)
                (void)core_cgroup_freeze(c->cg, false); /* never left half frozen */
        if (r == -ENOTSUP)
                return rpc_reply_error(req, RPC_APP_ERROR, "unavailable", "name",
                                       "container '%s': this host has no cgroup freezer (neither cgroup.freeze nor "
                                       "the v1 freezer controller)", name);
        if (r < 0)
                return rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "container '%s': %s its cgroup: %s", name,
                                       freeze ? "freeze" : "thaw", strerror(-r));
        log_info("sandbox '%s': container '%s' %s", sb->name, name,
                 freeze ? "paused (cgroup frozen)" : "resumed (cgroup thawed)");
        rpc_reply(req, ctr_json(c, true));
}

static void method_pause(rpc_request *req, void *userdata) {
        method_pause_resume(req, userdata, true, method_pause);
}

static void method_resume(rpc_request *req, void *userdata) {
        method_pause_resume(req, userdata, false, method_resume);
}

void container_attach(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "container.create", method_create, m);
        rpc_server_add_method(s, "container.get", method_get, m);
        rpc_server_add_method(s, "container.list", method_list, m);
        rpc_server_add_method(s, "container.delete", method_delete, m);
        rpc_server_add_method(s, "container.pause", method_pause, m);
        rpc_server_add_method(s, "container.resume", method_resume, m);
}
