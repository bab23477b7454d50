/* Tenants (tenant.h): the identity of each client, the ownership of what it
 * makes, the check of every request of a non-admin client before its
 * method runs, and the per-tenant limits of daemon.json "tenants".
 *
 * Threat: a client that is not admin (a member of the socket group that is
 * not root, a TLS client with a tenant or tag role) reaching objects of
 * another tenant, planting its objects in another tenant, or taking more of
 * the host than the operator gave it. The locks, in order:
 *  1. who: from the kernel (SO_PEERCRED) or the verified certificate, never
 *     from a request's params;
 *  2. what: every request checked against the table below before its
 *     method runs; a table miss is a refusal (a new method must be
 *     classified here); an object of another tenant is answered as one that
 *     does not exist;
 *  3. the handlers check ownership again where a request waits and runs
 *     later (sandbox.c), and the limits where the object is registered
 *     (create_sandbox, snapshot capture), so a wait cannot be used to swap
 *     a name and concurrent creates cannot pass a limit together.
 * Ownership lives in a field the daemon writes (sandbox.owner,
 * snapshot.owner), never in tags, which any owner may set to anything. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "libcore/log.h"
#include "libcore/source.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/remote.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"

/* ---- identity ---- */

static void set_admin(tenant *ret, bool remote) {
        *ret = (tenant) { .admin = true, .remote = remote };
}

static const cJSON *tenants_config(const daemon_config *cfg) {
        return cfg ? cfg->tenants : NULL;
}

static bool uid_listed(const daemon_config *cfg, const char *key, uid_t uid) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(tenants_config(cfg), key), *it;
        cJSON_ArrayForEach(it, list)
                if (cJSON_IsNumber(it) && it->valuedouble == (double) uid)
                        return true;
        return false;
}

bool tenant_conn_is_gateway(const daemon_config *cfg, const rpc_conn *c) {
        return c && !rpc_conn_is_tls(c) && uid_listed(cfg, "gateways", rpc_conn_uid(c));
}

void tenant_of_uid(const daemon_config *cfg, uid_t uid, tenant *ret) {
        if (uid == 0) {
                set_admin(ret, false);
                return;
        }
        const cJSON *admins = cJSON_GetObjectItemCaseSensitive(tenants_config(cfg), "localAdmins"), *it;
        cJSON_ArrayForEach(it, admins)
                if (cJSON_IsNumber(it) && it->valuedouble == (double) uid) {
                        set_admin(ret, false);
                        return;
                }
        *ret = (tenant) { .admin = false };
        snprintf(ret->name, sizeof(ret->name), "uid:%u", (unsigned) uid);
}

void tenant_of_conn(const daemon_config *cfg, const rpc_conn *c, tenant *ret) {
        if (!c) {
                set_admin(ret, false);
                return;
        }
        const remote_identity *id = rpc_conn_identity(c);
        if (!id) {
                tenant_of_uid(cfg, rpc_conn_uid(c), ret);
                return;
        }
        if (id->role == REMOTE_ROLE_ADMIN) {
                set_admin(ret, true);
                return;
        }
        /* id->tenant is set for every other role (remote.c); "?" owns
         * nothing of anyone's if it ever were not. */
        *ret = (tenant) { .admin = false, .remote = true };
        snprintf(ret->name, sizeof(ret->name), "%s", id->tenant ? id->tenant : "?");
}

const char *tenant_owner(const tenant *t) {
        return t->admin ? NULL : t->name;
}

bool tenant_owns(const tenant *t, const char *owner) {
        return t->admin || (owner && streq(owner, t->name));
}

bool tenant_req_owns(manager *m, const rpc_request *req, const char *owner) {
        tenant t;
        tenant_of_conn(m->cfg, req->conn, &t);
        return tenant_owns(&t, owner);
}

bool tenant_conn_sees_sandbox(manager *m, const rpc_conn *c, const char *sb_name) {
        tenant t;
        tenant_of_conn(m->cfg, c, &t);
        if (t.admin)
                return true;
        sandbox *sb = sb_name ? manager_find_sandbox(m, sb_name) : NULL;
        return sb && tenant_owns(&t, sb->owner);
}

/* ---- limits (daemon.json "tenants") ---- */

/* The networkPolicy modes, in the order of tenant_limits.modes. */
static const char *const mode_names[] = { "allow-all", "deny-all", "custom" };

typedef struct tenant_limits {
        uint64_t sandboxes, vcpus, disk_mib, snapshots, runtimes, volumes; /* UINT64_MAX: no limit */
        bool modes[3];                                  /* by mode_names */
        bool no_userns, local_sources;
        bool runtime_import, snapshot_import, snapshot_export;
} tenant_limits;

/* The integer limits: daemon.json name, member. */
static const struct {
        const char *key;
        size_t off;
} int_limits[] = {
        { "maxSandboxes", offsetof(tenant_limits, sandboxes) },
        { "maxVcpus", offsetof(tenant_limits, vcpus) },
        { "maxDiskMiB", offsetof(tenant_limits, disk_mib) },
        { "maxSnapshots", offsetof(tenant_limits, snapshots) },
        { "maxRuntimes", offsetof(tenant_limits, runtimes) },
        { "maxVolumes", offsetof(tenant_limits, volumes) },
};
#define TENANT_LIMIT_MAX 1000000000ULL

/* The permissions, all off by default: daemon.json name, member. */
static const struct {
        const char *key;
        size_t off;
} bool_limits[] = {
        { "allowNoUserns", offsetof(tenant_limits, no_userns) },
        { "allowLocalSources", offsetof(tenant_limits, local_sources) },
        { "allowRuntimeImport", offsetof(tenant_limits, runtime_import) },
        { "allowSnapshotImport", offsetof(tenant_limits, snapshot_import) },
        { "allowSnapshotExport", offsetof(tenant_limits, snapshot_export) },
};

static void apply_limits(const cJSON *o, tenant_limits *l) {
        if (!cJSON_IsObject(o))
                return;
        for (size_t i = 0; i < ELEMENTSOF(int_limits); i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, int_limits[i].key);
                if (cJSON_IsNumber(v))
                        *(uint64_t *) ((char *) l + int_limits[i].off) = (uint64_t) v->valuedouble;
                else if (v && cJSON_IsNull(v))
                        *(uint64_t *) ((char *) l + int_limits[i].off) = UINT64_MAX;
        }
        const cJSON *modes = cJSON_GetObjectItemCaseSensitive(o, "networkModes"), *it;
        if (cJSON_IsArray(modes)) {
                memset(l->modes, 0, sizeof(l->modes));
                cJSON_ArrayForEach(it, modes)
                        for (size_t i = 0; i < ELEMENTSOF(mode_names); i++)
                                if (cJSON_IsString(it) && streq(it->valuestring, mode_names[i]))
                                        l->modes[i] = true;
        }
        const cJSON *b;
        for (size_t i = 0; i < ELEMENTSOF(bool_limits); i++) {
                b = cJSON_GetObjectItemCaseSensitive(o, bool_limits[i].key);
                if (cJSON_IsBool(b))
                        *(bool *) ((char *) l + bool_limits[i].off) = cJSON_IsTrue(b);
        }
}

/* The built-in defaults (no limit on counts, every network mode, the user
 * namespace never off, no local sources), then tenants.defaults, then
 * tenants.names[NAME]. */
static void limits_of(const daemon_config *cfg, const tenant *t, tenant_limits *ret) {
        *ret = (tenant_limits) { .modes = { true, true, true } };
        /* Every integer limit starts unlimited: one loop over the table, so
         * that a key added to it can never start at 0 (refusing all). */
        for (size_t i = 0; i < ELEMENTSOF(int_limits); i++)
                *(uint64_t *) ((char *) ret + int_limits[i].off) = UINT64_MAX;
        const cJSON *tc = tenants_config(cfg);
        apply_limits(cJSON_GetObjectItemCaseSensitive(tc, "defaults"), ret);
        apply_limits(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "names"), t->name), ret);
}

static bool mode_allowed(const tenant_limits *l, const char *mode) {
        for (size_t i = 0; i < ELEMENTSOF(mode_names); i++)
                if (streq(mode, mode_names[i]))
                        return l->modes[i];
        return false;
}

bool tenant_req_admin(manager *m, const rpc_request *req) {
        tenant t;
        tenant_of_conn(m->cfg, req ? req->conn : NULL, &t);
        return t.admin;
}

/* The tenant's own tenants.names.NAME.localSourceRoots (never given in
 * tenants.defaults: tenant_config_check), or NULL. */
static const cJSON *own_roots(const daemon_config *cfg, const tenant *t) {
        const cJSON *names = cJSON_GetObjectItemCaseSensitive(tenants_config(cfg), "names");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(names, t->name),
                                                          "localSourceRoots");
        return cJSON_IsArray(r) ? r : NULL;
}

static char **roots_copy_json(const cJSON *a) {
        int n = cJSON_GetArraySize(a), i = 0;
        char **l = calloc((size_t) n + 1, sizeof(char *));
        const cJSON *it;
        if (!l)
                return NULL;
        cJSON_ArrayForEach(it, a) {
                const char *s = cJSON_GetStringValue(it);
                if (!s || !(l[i++] = strdup(s))) {
                        tenant_roots_free(l);
                        return NULL;
                }
        }
        return l;
}

static char **roots_copy_list(char *const *src) {
        size_t n = 0;
        while (src && src[n])
                n++;
        char **l = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; l && i < n; i++)
                if (!(l[i] = strdup(src[i]))) {
                        tenant_roots_free(l);
                        return NULL;
                }
        return l;
}

void tenant_roots_free(char **roots) {
        for (size_t i = 0; roots && roots[i]; i++)
                free(roots[i]);
        free(roots);
}

int tenant_roots(const daemon_config *cfg, const tenant *t, const char *field, char ***ret, sb_error **ret_err) {
        const cJSON *own = t->admin ? NULL : own_roots(cfg, t);
        if (!t->admin && !own && t->remote)
                return sb_error_set(ret_err, -EACCES, "permission_denied", field,
                                    "%s: host paths are not open to tenant %s: a remote tenant has no "
                                    "localSourceRoots of its own; the operator may list its own directories "
                                    "in daemon.json tenants.names.%s.localSourceRoots",
                                    field ? field : "path", t->name, t->name);
        char **l = own ? roots_copy_json(own) : roots_copy_list(cfg ? cfg->local_source_roots : NULL);
        if (!l)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        *ret = l;
        return 0;
}

/* One tenant_host_open: what to open, and for a local tenant whose
 * filesystem identity to open it with. */
typedef struct host_open {
        const char *const *roots;
        const char *path, *field;
        tenant_host_mode mode;
        bool as_peer;             /* a local tenant: opened as the client (core_run_as_peer) */
        int r;                    /* the fd, or a negative errno with err */
        sb_error *err;
} host_open;

static int host_open_do(host_open *h) {
        const char *path = h->path, *field = h->field;
        if (h->mode != TENANT_HOST_FILE) {
                _cleanup_close_ int fd = core_source_local_open(h->roots, path, O_RDONLY | O_DIRECTORY, field, &h->err);
                if (fd < 0)
                        return fd;
                /* Creating a file in it takes write and search permission
                 * there, as this identity (AT_EACCESS: the fsuid, fsgid
                 * and groups of this thread); the raw syscall, so that no
                 * library emulation judges by other ids. */
                if (h->mode == TENANT_HOST_WRITE_DIR && h->as_peer &&
                    syscall(SYS_faccessat2, fd, ".", W_OK | X_OK, AT_EACCESS) < 0)
                        return sb_error_set(&h->err, negative_errno(), "source_failed", field,
                                            "%s: create in '%s': %m (a local tenant writes only where its uid may)",
                                            field, path);
                return TAKE_FD(fd);
        }
        /* O_PATH first: opening a FIFO would block the event loop, a device
         * can have side effects; the same inode is opened for reading only
         * once it is known to be a plain file (as source-tar.c does), and
         * that open is where read permission is checked. */
        _cleanup_close_ int pfd = core_source_local_open(h->roots, path, O_PATH, field, &h->err);
        if (pfd < 0)
                return pfd;
        struct stat st;
        if (fstat(pfd, &st) < 0)
                return sb_error_set(&h->err, negative_errno(), "source_failed", field, "%s: stat '%s': %m", field, path);
        if (!S_ISREG(st.st_mode))
                return sb_error_set(&h->err, -EINVAL, "source_failed", field, "%s: '%s' is not a regular file", field,
                                    path);
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
        int fd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return sb_error_set(&h->err, negative_errno(), "source_failed", field, "%s: open '%s': %m%s", field,
                                    path, h->as_peer && errno == EACCES ?
                                    " (a local tenant reads only what its uid may)" : "");
        return fd;
}

static int host_open_call(void *userdata) {
        return host_open_do(userdata);
}

int tenant_host_open(manager *m, const rpc_request *req, const char *path, tenant_host_mode mode, const char *field,
                     sb_error **ret_err) {
        tenant t;
        tenant_of_conn(m->cfg, req ? req->conn : NULL, &t);
        /* The tenant's own roots (a remote one without: refused here, so
         * no two remote tenants share a directory by default). */
        _cleanup_(tenant_roots_freep) char **roots = NULL;
        int rr = tenant_roots(m->cfg, &t, field, &roots, ret_err);
        if (rr < 0)
                return rr;
        host_open h = { .roots = (const char *const *) roots, .path = path, .field = field,
                        .mode = mode, .r = -EIO };
        /* A local tenant is a user of this host: it reads and writes there
         * what its uid may and nothing more (the roots confine it besides).
         * A remote tenant has no host identity: the roots are the bound. */
        h.as_peer = !t.admin && !t.remote && req && req->conn;
        if (!h.as_peer)
                h.r = host_open_do(&h);
        else {
                _cleanup_free_ gid_t *groups = NULL;
                core_peer peer = { .uid = rpc_conn_uid(req->conn), .gid = rpc_conn_gid(req->conn) };
                int r = rpc_conn_peer_groups(req->conn, &groups, &peer.n_groups);
                if (r < 0)
                        return sb_error_set(ret_err, r, "failed", field, "%s: the client's groups: %s", field,
                                            strerror(-r));
                peer.groups = groups;
                h.r = core_run_as_peer(&peer, host_open_call, &h, ret_err);
        }
        if (h.r < 0) {
                if (ret_err && !*ret_err)
                        *ret_err = TAKE_PTR(h.err);
                sb_error_free(h.err);
        }
        return h.r;
}

/* ---- refusals ---- */

static int refusev(const rpc_request *req, const tenant *t, const char *reason, int code, sb_error **ret_err,
                   const char *fmt, va_list ap) _printf_(6, 0);
static int refusev(const rpc_request *req, const tenant *t, const char *reason, int code, sb_error **ret_err,
                   const char *fmt, va_list ap) {
        _cleanup_free_ char *why = NULL;
        if (vasprintf(&why, fmt, ap) < 0)
                why = NULL;
        char lm[TEXT_LOG_BUF], lw[TEXT_LOG_BUF], lt[TEXT_LOG_BUF];
        const remote_identity *id = req->conn ? rpc_conn_identity(req->conn) : NULL;
        log_warning("tenant: refused %s from %s (%s%s%stenant %s): %s", text_for_log(req->method, lm, sizeof(lm)),
                    req->conn ? rpc_conn_peer(req->conn) : "?", id ? "\"" : "", id ? id->subject : "",
                    id ? "\", " : "", text_for_log(t->name, lt, sizeof(lt)),
                    text_for_log(why ? why : "permission denied", lw, sizeof(lw)));
        if (streq(reason, "permission_denied"))
                return sb_error_set(ret_err, code, reason, NULL, "permission denied: %s (tenant %s)",
                                    why ? why : "not allowed", t->name);
        return sb_error_set(ret_err, code, reason, NULL, "%s", why ? why : "refused");
}

static int refuse(const rpc_request *req, const tenant *t, sb_error **ret_err, const char *fmt, ...) _printf_(4, 5);
static int refuse(const rpc_request *req, const tenant *t, sb_error **ret_err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = refusev(req, t, "permission_denied", -EACCES, ret_err, fmt, ap);
        va_end(ap);
        return r;
}

static int over_limit(const rpc_request *req, const tenant *t, sb_error **ret_err, const char *fmt, ...)
        _printf_(4, 5);
static int over_limit(const rpc_request *req, const tenant *t, sb_error **ret_err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = refusev(req, t, "limit_exceeded", -EDQUOT, ret_err, fmt, ap);
        va_end(ap);
        return r;
}

/* ---- limits at registration (sandbox.c, snapshot.c) ---- */

/* The tenant req's connection acts for in *ret_t and its limits in *ret_l;
 * false (*ret_l untouched) for an admin client, which has none. */
static bool limited_tenant(manager *m, const rpc_request *req, tenant *ret_t, tenant_limits *ret_l) {
        tenant_of_conn(m->cfg, req->conn, ret_t);
        if (ret_t->admin)
                return false;
        limits_of(m->cfg, ret_t, ret_l);
        return true;
}

/* How many items of list (the daemon's snapshots or volumes: any list of
 * structs with owner and next) tenant t owns. */
#define OWNED_COUNT(list, t) ({                                                 \
        uint64_t _n = 0;                                                        \
        for (__typeof__(list) _it = (list); _it; _it = _it->next)               \
                _n += _it->owner && tenant_owns((t), _it->owner);               \
        _n;                                                                     \
})

/* One more of what a tenant has `have` of: refused (limit_exceeded) past
 * its limit, daemon.json tenants `key`. what: the plural the message
 * names them by. 0 or -EDQUOT. */
static int check_count(const rpc_request *req, const tenant *t, sb_error **ret_err, uint64_t have,
                       uint64_t limit, const char *what, const char *key) {
        if (have + 1 > limit)
                return over_limit(req, t, ret_err,
                                  "tenant '%s' has %" PRIu64 " %s, its limit (daemon.json tenants %s %" PRIu64 "); "
                                  "delete one first", t->name, have, what, key, limit);
        return 0;
}

/* The disk a snapshot may hold, in MiB: its source's diskMiB (its top
 * layer is a copy of that disk's upper, no larger), 0 when unbounded. */
static uint64_t snapshot_disk_mib(const snapshot *s) {
        const cJSON *dm = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(s->config, "resources"), "diskMiB");
        return cJSON_IsNumber(dm) && dm->valuedouble > 0 ? (uint64_t)dm->valuedouble : 0;
}

/* What a tenant's snapshots, volumes and imported runtimes (those being
 * imported at what they reserved) hold against maxDiskMiB, in MiB: all of
 * its disk but its sandboxes'. */
static uint64_t snapshots_disk_mib(manager *m, const tenant *t) {
        /* Volumes too: each holds its sizeMiB on the state filesystem. */
        uint64_t disk = runtimes_disk_mib(m, t->name) + volumes_disk_mib(m, t->name);
        for (const snapshot *s = m->snapshots; s; s = s->next)
                if (s->owner && tenant_owns(t, s->owner))
                        disk += snapshot_disk_mib(s);
        return disk;
}

/* The MiB a tenant holds as maxDiskMiB counts them: its sandboxes' disks
 * (warm-pool members are nobody's yet) with everything snapshots_disk_mib
 * adds. */
static uint64_t disk_in_use_mib(manager *m, const tenant *t) {
        uint64_t disk = snapshots_disk_mib(m, t);
        for (const sandbox *o = m->sandboxes; o; o = o->next)
                if (!o->pooled && o->owner && tenant_owns(t, o->owner))
                        disk += o->disk_mib;
        return disk;
}

int tenant_check_new_sandbox(manager *m, rpc_request *req, const sandbox *sb, sb_error **ret_err) {
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return 0;
        const char *mode = sandbox_policy_mode(sb);
        if (!mode_allowed(&l, mode))
                return refuse(req, &t, ret_err,
                              "networkPolicy: mode %s is not open to this tenant (daemon.json tenants networkModes)",
                              mode);
        uint64_t n = 0, vcpus = 0, disk = snapshots_disk_mib(m, &t);
        bool unbounded = false;
        for (const sandbox *o = m->sandboxes; o; o = o->next)
                if (!o->pooled && tenant_owns(&t, o->owner) && o->owner) {
                        n++;
                        vcpus += o->vcpus;
                        disk += o->disk_mib;
                        unbounded |= !o->disk_mib;
                }
        int r = check_count(req, &t, ret_err, n, l.sandboxes, "sandboxes", "maxSandboxes");
        if (r < 0)
                return r;
        if (vcpus + sb->vcpus > l.vcpus)
                return over_limit(req, &t, ret_err,
                                  "resources.vcpus: tenant '%s' would have %" PRIu64 " vCPUs, over its limit "
                                  "(daemon.json tenants maxVcpus %" PRIu64 ")", t.name, vcpus + sb->vcpus, l.vcpus);
        if (l.disk_mib != UINT64_MAX && (!sb->disk_mib || unbounded))
                return over_limit(req, &t, ret_err,
                                  "resources.diskMiB: tenant '%s' has a disk limit (daemon.json tenants maxDiskMiB "
                                  "%" PRIu64 "), so every sandbox needs a bounded disk (diskMiB above 0)%s", t.name,
                                  l.disk_mib, sb->disk_mib ? "; one of its sandboxes has none" : "");
        if (disk + sb->disk_mib > l.disk_mib)
                return over_limit(req, &t, ret_err,
                                  "resources.diskMiB: tenant '%s' would have %" PRIu64 " MiB of disk (its sandboxes' "
                                  "disks, its snapshots' and its imported runtimes'), over its limit (daemon.json tenants maxDiskMiB %" PRIu64
                                  ")", t.name, disk + sb->disk_mib, l.disk_mib);
        return 0;
}

int tenant_check_new_volume(manager *m, rpc_request *req, uint64_t size_mib, sb_error **ret_err) {
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return 0;
        int r = check_count(req, &t, ret_err, OWNED_COUNT(m->volumes, &t), l.volumes,
                            "volumes (those being made included)", "maxVolumes");
        if (r < 0)
                return r;
        if (l.disk_mib == UINT64_MAX)
                return 0;
        uint64_t disk = disk_in_use_mib(m, &t);
        if (disk + size_mib > l.disk_mib)
                return over_limit(req, &t, ret_err,
                                  "sizeMiB: tenant '%s' would have %" PRIu64 " MiB of disk (its sandboxes' disks, its "
                                  "volumes', its snapshots' and its imported runtimes'), over its limit (daemon.json "
                                  "tenants maxDiskMiB %" PRIu64 ")", t.name, disk + size_mib, l.disk_mib);
        return 0;
}

int tenant_check_new_snapshot(manager *m, rpc_request *req, const sandbox *src, sb_error **ret_err) {
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return 0;
        int r = check_count(req, &t, ret_err, OWNED_COUNT(m->snapshots, &t), l.snapshots, "snapshots",
                            "maxSnapshots");
        if (r < 0)
                return r;
        if (l.disk_mib == UINT64_MAX || !src)
                return 0;
        /* A snapshot holds up to its source's disk on the state filesystem:
         * counted against maxDiskMiB with the tenant's sandboxes. */
        uint64_t disk = disk_in_use_mib(m, &t);
        if (!src->disk_mib || disk + src->disk_mib > l.disk_mib)
                return over_limit(req, &t, ret_err,
                                  "tenant '%s' would have %" PRIu64 " MiB of disk with a snapshot of sandbox %s (its "
                                  "sandboxes' disks and its snapshots', each snapshot counted at its source's diskMiB), "
                                  "over its limit (daemon.json tenants maxDiskMiB %" PRIu64 "); delete a snapshot first",
                                  t.name, disk + src->disk_mib, TEXT_Q(src->name), l.disk_mib);
        return 0;
}

int tenant_check_imported_snapshot(manager *m, rpc_request *req, const snapshot *s, uint64_t unpacked_bytes,
                                   sb_error **ret_err) {
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return 0;
        int r = tenant_check_new_snapshot(m, req, NULL, ret_err);
        if (r < 0)
                return r;
        if (l.disk_mib == UINT64_MAX)
                return 0;
        /* Counted as every snapshot is, at its diskMiB, which must hold what
         * the file unpacked to. */
        uint64_t mib = snapshot_disk_mib(s), need = (unpacked_bytes + (1u << 20) - 1) >> 20;
        if (!mib || mib < need)
                return over_limit(req, &t, ret_err,
                                  "tenant '%s' has a disk limit (daemon.json tenants maxDiskMiB %" PRIu64 "), so an "
                                  "imported snapshot needs a config.resources.diskMiB (import with config) of at least "
                                  "what its layers hold (%" PRIu64 " MiB)", t.name, l.disk_mib, need);
        uint64_t disk = disk_in_use_mib(m, &t);
        if (disk + mib > l.disk_mib)
                return over_limit(req, &t, ret_err,
                                  "tenant '%s' would have %" PRIu64 " MiB of disk with this snapshot (its sandboxes' "
                                  "disks and its snapshots'), over its limit (daemon.json tenants maxDiskMiB %" PRIu64
                                  "); delete a snapshot first", t.name, disk + mib, l.disk_mib);
        return 0;
}

int tenant_check_new_runtime(manager *m, rpc_request *req, unsigned have, sb_error **ret_err) {
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return 0;
        return check_count(req, &t, ret_err, have, l.runtimes, "runtimes (those being made included)", "maxRuntimes");
}

int tenant_disk_room(manager *m, rpc_request *req, uint64_t *ret_room_mib, sb_error **ret_err) {
        *ret_room_mib = UINT64_MAX;
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return 0;
        if (l.disk_mib == UINT64_MAX)
                return 0;
        uint64_t disk = disk_in_use_mib(m, &t);
        if (disk >= l.disk_mib)
                return over_limit(req, &t, ret_err,
                                  "tenant '%s' has %" PRIu64 " MiB of disk (its sandboxes' disks, its snapshots' and "
                                  "its imported runtimes'), its limit (daemon.json tenants maxDiskMiB %" PRIu64 "); "
                                  "delete something first", t.name, disk, l.disk_mib);
        *ret_room_mib = l.disk_mib - disk;
        return 0;
}

int tenant_check_room(manager *m, rpc_request *req, const sandbox *snapshot_src, sb_error **ret_err) {
        if (snapshot_src)
                return tenant_check_new_snapshot(m, req, snapshot_src, ret_err);
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return 0;
        uint64_t n = 0;
        for (const sandbox *o = m->sandboxes; o; o = o->next)
                n += !o->pooled && o->owner && tenant_owns(&t, o->owner);
        return check_count(req, &t, ret_err, n, l.sandboxes, "sandboxes", "maxSandboxes");
}

/* ---- daemon.info ---- */

static void add_limit(cJSON *o, const char *key, uint64_t v) {
        if (v == UINT64_MAX)
                cJSON_AddNullToObject(o, key);
        else
                cJSON_AddNumberToObject(o, key, (double) v);
}

bool tenant_info(manager *m, const rpc_request *req, cJSON *o) {
        tenant t;
        tenant_limits l;
        if (!limited_tenant(m, req, &t, &l))
                return false;
        cJSON *to = cJSON_AddObjectToObject(o, "tenant");
        cJSON_AddStringToObject(to, "name", t.name);
        cJSON *lo = cJSON_AddObjectToObject(to, "limits");
        for (size_t i = 0; i < ELEMENTSOF(int_limits); i++)
                add_limit(lo, int_limits[i].key, *(const uint64_t *) ((const char *) &l + int_limits[i].off));
        cJSON *modes = cJSON_AddArrayToObject(lo, "networkModes");
        for (size_t i = 0; i < ELEMENTSOF(mode_names); i++)
                if (l.modes[i])
                        cJSON_AddItemToArray(modes, cJSON_CreateString(mode_names[i]));
        for (size_t i = 0; i < ELEMENTSOF(bool_limits); i++)
                cJSON_AddBoolToObject(lo, bool_limits[i].key, *(const bool *) ((const char *) &l + bool_limits[i].off));
        const cJSON *own = own_roots(m->cfg, &t);
        cJSON_AddItemToObject(lo, "localSourceRoots", own ? cJSON_Duplicate(own, 1) : cJSON_CreateNull());
        uint64_t n = 0, running = 0, vcpus = 0, disk = snapshots_disk_mib(m, &t);
        for (const sandbox *sb = m->sandboxes; sb; sb = sb->next)
                if (!sb->pooled && sb->owner && tenant_owns(&t, sb->owner)) {
                        n++;
                        running += sb->sess != NULL;
                        vcpus += sb->vcpus;
                        disk += sb->disk_mib;
                }
        cJSON *u = cJSON_AddObjectToObject(to, "usage");
        cJSON_AddNumberToObject(u, "sandboxes", (double) n);
        cJSON_AddNumberToObject(u, "running", (double) running);
        cJSON_AddNumberToObject(u, "vcpus", (double) vcpus);
        cJSON_AddNumberToObject(u, "diskMiB", (double) disk);
        cJSON_AddNumberToObject(u, "snapshots", (double) OWNED_COUNT(m->snapshots, &t));
        cJSON_AddNumberToObject(u, "runtimes", (double) runtimes_owned(m, t.name));
        cJSON_AddNumberToObject(u, "volumes", (double) OWNED_COUNT(m->volumes, &t));
        cJSON_AddNumberToObject(o, "sandboxes", (double) n);
        cJSON_AddNumberToObject(o, "running", (double) running);
        return true;
}

/* ---- session.actAs: a gateway names the tenant it serves ---- */

/* Threat: a process that speaks for many tenants (sandboxd-e2b, which
 * maps its clients' API keys to tenants) holding more power than the
 * tenant it serves. Such a process runs as a uid of daemon.json
 * tenants.gateways (never root, never a localAdmin: tenant_config_check);
 * each of its connections is good for nothing but this one call, which
 * makes the connection the tenant NAME for good, as a TLS certificate
 * with O=tenant:NAME would (remote: sources from public addresses only).
 * Another uid, a TLS client, admin, or a second call is refused. */
static void method_act_as(rpc_request *req, void *userdata) {
        manager *m = userdata;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req->params, "tenant"));
        if (!tenant_conn_is_gateway(m->cfg, req->conn) || rpc_conn_identity(req->conn)) {
                log_warning("tenant: refused session.actAs from %s: not a gateway uid (daemon.json tenants.gateways) "
                            "or already acting", req->conn ? rpc_conn_peer(req->conn) : "?");
                rpc_reply_error(req, RPC_APP_ERROR, "permission_denied", NULL,
                                "permission denied: session.actAs is for the uids of daemon.json tenants.gateways, "
                                "once per connection");
                return;
        }
        if (!name || !remote_tenant_name_ok(name)) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "tenant",
                                "tenant: 1-64 of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit");
                return;
        }
        remote_identity *id = calloc(1, sizeof(*id));
        uid_t uid = rpc_conn_uid(req->conn);
        if (!id || asprintf(&id->name, "gateway uid %u", (unsigned) uid) < 0 ||
            asprintf(&id->subject, "gateway uid %u as tenant:%s", (unsigned) uid, name) < 0 ||
            asprintf(&id->role_text, "tenant:%s", name) < 0 || !(id->tenant = strdup(name))) {
                remote_identity_free(id);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        id->role = REMOTE_ROLE_TENANT;
        if (rpc_conn_set_identity(req->conn, id, (rpc_identity_free_fn) remote_identity_free) < 0) {
                remote_identity_free(id);
                rpc_reply_error(req, RPC_APP_ERROR, "permission_denied", NULL,
                                "permission denied: this connection already has an identity");
                return;
        }
        log_debug("tenant: %s acts as tenant %s", rpc_conn_peer(req->conn), name);
        cJSON *res = cJSON_CreateObject();
        cJSON_AddStringToObject(res, "tenant", name);
        rpc_reply(req, res);
}

/* ---- the check of each request ---- */

/* What a tenant may do with a method, by the object its params name. */
typedef enum tenant_access {
        ACCESS_ADMIN,     /* daemon-wide, shared runtimes or host paths: admin only */
        ACCESS_ANY,       /* reads nothing of any sandbox */
        ACCESS_SANDBOX,   /* params[field] names a sandbox the tenant owns */
        ACCESS_COMMAND,   /* params.cmdId names a command of such a sandbox */
        ACCESS_SNAPSHOT,  /* params.id names a snapshot the tenant owns */
        ACCESS_STREAM,    /* a tar stream: bound to the connection that began it (fstar.c) */
        ACCESS_CREATE,    /* sandbox.create / getOrCreate: names, sources and limits checked */
        ACCESS_LIST,      /* sandbox.list, snapshot.list: the handler lists the tenant's own */
        ACCESS_RUNTIMES,  /* runtime.list: each runtime's users filtered to the tenant's */
        ACCESS_OPTIONAL_SANDBOX, /* params[field] optional; when given, ACCESS_SANDBOX */
        ACCESS_RUNTIME_MAKE,     /* runtime.import, runtime.bootstrap: allowRuntimeImport */
        ACCESS_RUNTIME_DELETE,   /* params.name names a runtime the tenant made */
        ACCESS_SNAPSHOT_IMPORT,  /* allowSnapshotImport; the file under localSourceRoots */
        ACCESS_SNAPSHOT_EXPORT,  /* params.id its own snapshot; allowSnapshotExport */
        ACCESS_INFO,             /* daemon.info: the handler answers a tenant's view */
        ACCESS_VOLUME,           /* params.name names a volume the tenant owns */
} tenant_access;

/* Every method of the API (schema.c's table) with a tenant's access.
 * runtime.import, runtime.bootstrap, snapshot.import and snapshot.export
 * are permissions (daemon.json tenants allowRuntimeImport,
 * allowSnapshotImport, allowSnapshotExport; off by default): they read or
 * write host paths as root, which for a tenant must lie under
 * localSourceRoots (tenant_host_open), and bootstrap runs debootstrap's
 * package scripts as root (the daemon's own mirror only). A method missing
 * here is refused for tenants. */
static const struct {
        const char *method;
        tenant_access access;
        const char *field;
} method_access[] = {
        { "sandbox.create", ACCESS_CREATE, "name" },
        { "sandbox.getOrCreate", ACCESS_CREATE, "name" },
        { "sandbox.get", ACCESS_SANDBOX, "name" },
        { "sandbox.update", ACCESS_SANDBOX, "name" },
        { "sandbox.list", ACCESS_LIST, NULL },
        { "sandbox.stop", ACCESS_SANDBOX, "name" },
        { "sandbox.delete", ACCESS_SANDBOX, "name" },
        { "sandbox.extendTimeout", ACCESS_SANDBOX, "name" },
        { "sandbox.setTimeout", ACCESS_SANDBOX, "name" },
        { "sandbox.fork", ACCESS_SANDBOX, "sourceSandbox" },
        { "sandbox.snapshot", ACCESS_SANDBOX, "name" },
        { "sandbox.pause", ACCESS_SANDBOX, "name" },
        { "sandbox.resume", ACCESS_SANDBOX, "name" },
        { "sandbox.setReady", ACCESS_SANDBOX, "name" },
        { "snapshot.list", ACCESS_LIST, NULL },
        { "snapshot.get", ACCESS_SNAPSHOT, "id" },
        { "snapshot.delete", ACCESS_SNAPSHOT, "id" },
        { "snapshot.export", ACCESS_SNAPSHOT_EXPORT, "id" },
        { "snapshot.import", ACCESS_SNAPSHOT_IMPORT, NULL },
        { "runtime.list", ACCESS_RUNTIMES, NULL },
        { "runtime.import", ACCESS_RUNTIME_MAKE, NULL },
        { "runtime.bootstrap", ACCESS_RUNTIME_MAKE, NULL },
        { "runtime.delete", ACCESS_RUNTIME_DELETE, "name" },
        { "command.run", ACCESS_SANDBOX, "sandbox" },
        /* Containers of its own sandboxes; host mounts (their "mounts")
         * are root's only, refused by the handler naming the field. */
        { "container.create", ACCESS_SANDBOX, "sandbox" },
        { "container.get", ACCESS_SANDBOX, "sandbox" },
        { "container.list", ACCESS_SANDBOX, "sandbox" },
        { "container.delete", ACCESS_SANDBOX, "sandbox" },
        { "container.pause", ACCESS_SANDBOX, "sandbox" },
        { "container.resume", ACCESS_SANDBOX, "sandbox" },
        { "command.write", ACCESS_COMMAND, "cmdId" },
        { "command.closeStdin", ACCESS_COMMAND, "cmdId" },
        { "command.resize", ACCESS_COMMAND, "cmdId" },
        { "command.wait", ACCESS_COMMAND, "cmdId" },
        { "command.kill", ACCESS_COMMAND, "cmdId" },
        { "command.get", ACCESS_COMMAND, "cmdId" },
        { "command.logs", ACCESS_COMMAND, "cmdId" },
        { "command.list", ACCESS_SANDBOX, "name" },
        { "fs.write", ACCESS_SANDBOX, "sandbox" },
        { "fs.read", ACCESS_SANDBOX, "sandbox" },
        { "fs.mkdir", ACCESS_SANDBOX, "sandbox" },
        { "fs.list", ACCESS_SANDBOX, "sandbox" },
        { "fs.stat", ACCESS_SANDBOX, "sandbox" },
        { "fs.remove", ACCESS_SANDBOX, "sandbox" },
        { "fs.writeTar", ACCESS_SANDBOX, "sandbox" },
        { "fs.writeTarChunk", ACCESS_STREAM, NULL },
        { "fs.writeTarEnd", ACCESS_STREAM, NULL },
        { "fs.readTar", ACCESS_SANDBOX, "sandbox" },
        { "fs.readTarChunk", ACCESS_STREAM, NULL },
        { "fs.watch", ACCESS_SANDBOX, "sandbox" },
        { "policy.check", ACCESS_OPTIONAL_SANDBOX, "sandbox" },
        { "events.subscribe", ACCESS_OPTIONAL_SANDBOX, "sandbox" },
        { "daemon.info", ACCESS_INFO, NULL },
        /* volume.create: the name is checked by the handler (a name
         * another holds is already_exists, never saying whose), the disk
         * limit by tenant_check_new_volume. */
        { "volume.create", ACCESS_ANY, NULL },
        { "volume.get", ACCESS_VOLUME, "name" },
        { "volume.list", ACCESS_LIST, NULL },
        { "volume.delete", ACCESS_VOLUME, "name" },
        /* Finds requests of the caller's own connection only (rpc.c). */
        { "request.cancel", ACCESS_ANY, NULL },
};

/* A string param (borrowed), or NULL when absent or not a string. */
static const char *param_str(const cJSON *o, const char *field) {
        return cJSON_GetStringValue(cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, field) : NULL);
}

static bool url_is_remote(const char *url) {
        return url && (strncasecmp(url, "https://", 8) == 0 || strncasecmp(url, "http://", 7) == 0);
}

/* The networkPolicy mode a params value asks for, or NULL when it gives
 * none (absent or null: the daemon's default, checked at registration). */
static const char *policy_mode_of(const cJSON *p) {
        if (!p || cJSON_IsNull(p))
                return NULL;
        if (cJSON_IsString(p))
                return p->valuestring;
        return "custom";
}

/* A tenant's source: a snapshot it owns, a URL (a remote tenant: http(s)
 * only, fetched from public addresses, remote_source_guard), or a host path
 * (path or file://, under localSourceRoots) when its limits allow local
 * sources. */
static int check_source(const rpc_request *req, manager *m, const tenant *t, const tenant_limits *l,
                        sb_error **ret_err) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(req->params, "source");
        if (!src || cJSON_IsNull(src))
                return 0;
        const char *type = param_str(src, "type");
        if (type && streq(type, "snapshot")) {
                const char *sid = param_str(src, "snapshotId");
                snapshot *sn = sid ? manager_find_snapshot(m, sid) : NULL;
                if (!sn || !tenant_owns(t, sn->owner))
                        return refuse(req, t, ret_err, "source.snapshotId: no snapshot '%s' of this tenant",
                                      TEXT_Q(sid ? sid : "?"));
                return 0;
        }
        const char *url = param_str(src, "url");
        bool local = cJSON_GetObjectItemCaseSensitive(src, "path") || (url && strncasecmp(url, "file:", 5) == 0);
        if (local && !l->local_sources)
                return refuse(req, t, ret_err, "source: host paths (path, file://) are not open to this tenant "
                                               "(daemon.json tenants allowLocalSources)");
        if (local && t->remote && !own_roots(m->cfg, t))
                return refuse(req, t, ret_err, "source: host paths (path, file://) are not open to a remote tenant "
                                               "without localSourceRoots of its own (daemon.json "
                                               "tenants.names.%s.localSourceRoots)", t->name);
        if (!local && url && t->remote && !url_is_remote(url))
                return refuse(req, t, ret_err, "source.url: only http:// and https:// sources for remote clients");
        return 0;
}

/* sandbox.create and getOrCreate: a name another tenant holds is refused
 * (without saying whose); the user namespace, the source and the network
 * mode are checked against the tenant's limits. The counts are checked
 * when the sandbox is registered (tenant_check_new_sandbox). */
static int check_create(const rpc_request *req, manager *m, const tenant *t, const tenant_limits *l,
                        sb_error **ret_err) {
        const char *name = param_str(req->params, "name");
        sandbox *sb = name ? manager_find_sandbox(m, name) : NULL;
        if (sb && !tenant_owns(t, sb->owner)) {
                char lm[TEXT_LOG_BUF];
                log_info("tenant: %s of '%s' by tenant %s: the name is another's", text_for_log(req->method, lm, sizeof(lm)),
                         name, t->name);
                return sb_error_set(ret_err, -EEXIST, "already_exists", "name",
                                    "sandbox '%s' already exists; pick another name", name);
        }
        if (sb)
                return 0; /* getOrCreate of its own: a get (and create's already_exists) */
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(req->params, "userns");
        if (cJSON_IsFalse(u) && !l->no_userns)
                return refuse(req, t, ret_err, "userns: false (no user namespace: root inside is host root) is not "
                                               "open to this tenant (daemon.json tenants allowNoUserns)");
        const char *mode = policy_mode_of(cJSON_GetObjectItemCaseSensitive(req->params, "networkPolicy"));
        if (mode && !mode_allowed(l, mode))
                return refuse(req, t, ret_err,
                              "networkPolicy: mode %s is not open to this tenant (daemon.json tenants networkModes)",
                              TEXT_Q(mode));
        return check_source(req, m, t, l, ret_err);
}

/* sandbox.update of a tenant's own sandbox: a new network mode and vCPU
 * count within its limits. */
static int check_update(const rpc_request *req, manager *m, const tenant *t, const tenant_limits *l,
                        const sandbox *sb, sb_error **ret_err) {
        const char *mode = policy_mode_of(cJSON_GetObjectItemCaseSensitive(req->params, "networkPolicy"));
        if (mode && !mode_allowed(l, mode))
                return refuse(req, t, ret_err,
                              "networkPolicy: mode %s is not open to this tenant (daemon.json tenants networkModes)",
                              TEXT_Q(mode));
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(req->params, "resources"),
                                                          "vcpus");
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || l->vcpus == UINT64_MAX)
                return 0; /* sandbox.update validates the value itself */
        uint64_t total = 0;
        for (const sandbox *o = m->sandboxes; o; o = o->next)
                if (o != sb && !o->pooled && o->owner && tenant_owns(t, o->owner))
                        total += o->vcpus;
        if (total + (uint64_t) v->valuedouble > l->vcpus)
                return over_limit(req, t, ret_err,
                                  "resources.vcpus: tenant '%s' would have %" PRIu64 " vCPUs, over its limit "
                                  "(daemon.json tenants maxVcpus %" PRIu64 ")", t->name,
                                  total + (uint64_t) v->valuedouble, l->vcpus);
        return 0;
}

/* sandbox.fork of a tenant's own sandbox: overrides within its limits (the
 * counts at registration). */
static int check_fork(const rpc_request *req, const tenant *t, const tenant_limits *l, const sandbox *src,
                      sb_error **ret_err) {
        const cJSON *ov = cJSON_GetObjectItemCaseSensitive(req->params, "overrides");
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(ov, "userns");
        if (cJSON_IsFalse(u) && src->userns && !l->no_userns)
                return refuse(req, t, ret_err, "overrides.userns: false (no user namespace: root inside is host "
                                               "root) is not open to this tenant (daemon.json tenants allowNoUserns)");
        const char *mode = policy_mode_of(cJSON_GetObjectItemCaseSensitive(ov, "networkPolicy"));
        if (mode && !mode_allowed(l, mode))
                return refuse(req, t, ret_err,
                              "overrides.networkPolicy: mode %s is not open to this tenant (daemon.json tenants "
                              "networkModes)", TEXT_Q(mode));
        return 0;
}

/* runtime.list for a tenant: a runtime's `sandboxes` name only its own,
 * and `snapshots` counts only its own, so other tenants' names and counts
 * do not show; a shared (admin's) runtime imported from a tarball does not
 * show the host path it came from. (Other tenants' runtimes are not
 * listed at all: runtime.c.) */
static void filter_runtimes(rpc_request *req, cJSON *result, void *userdata) {
        manager *m = userdata;
        tenant t;
        tenant_of_conn(m->cfg, req->conn, &t);
        cJSON *list = cJSON_GetObjectItemCaseSensitive(result, "runtimes"), *rt;
        cJSON_ArrayForEach(rt, list) {
                cJSON *users = cJSON_GetObjectItemCaseSensitive(rt, "sandboxes");
                cJSON *it = cJSON_IsArray(users) ? users->child : NULL;
                while (it) {
                        cJSON *next = it->next;
                        sandbox *sb = cJSON_IsString(it) ? manager_find_sandbox(m, it->valuestring) : NULL;
                        if (!sb || !tenant_owns(&t, sb->owner))
                                cJSON_Delete(cJSON_DetachItemViaPointer(users, it));
                        it = next;
                }
                const char *name = param_str(rt, "name");
                int snaps = 0;
                for (snapshot *sn = name ? m->snapshots : NULL; sn; sn = sn->next) {
                        const char *r = param_str(sn->config, "runtime");
                        if (streq(r ? r : "host", name) && tenant_owns(&t, sn->owner))
                                snaps++;
                }
                if (cJSON_GetObjectItemCaseSensitive(rt, "snapshots"))
                        cJSON_ReplaceItemInObjectCaseSensitive(rt, "snapshots", cJSON_CreateNumber(snaps));
                if (cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(rt, "owner")))
                        cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(rt, "source"), "path");
        }
}

/* runtime.import and runtime.bootstrap: the permission; a bootstrap from
 * the daemon's mirror only. The name is checked by the handler (a name
 * another holds is already_exists, never saying whose). */
static int check_runtime_make(const rpc_request *req, const tenant *t, const tenant_limits *l, sb_error **ret_err) {
        if (!l->runtime_import)
                return refuse(req, t, ret_err, "%s is not open to this tenant (daemon.json tenants allowRuntimeImport)",
                              TEXT_Q(req->method));
        /* debootstrap runs the maintainer scripts of what it installs as
         * root (in a chroot, which does not hold root): only packages of
         * the mirror the operator's apt trusts. */
        if (streq(req->method, "runtime.bootstrap") && cJSON_GetObjectItemCaseSensitive(req->params, "mirror"))
                return refuse(req, t, ret_err, "mirror: tenants bootstrap from the daemon's own mirror only (leave "
                                               "mirror out)");
        return 0;
}

/* runtime.delete: a runtime the tenant made. Another tenant's is answered
 * as a missing one; a shared one (admin's, "host" included) is refused. */
static int check_runtime_delete(const rpc_request *req, manager *m, const tenant *t, const char *name,
                                sb_error **ret_err) {
        _cleanup_free_ char *owner = NULL;
        int r = name ? runtime_owner(m, name, &owner) : -ENOENT;
        if (r < 0 || (owner && !tenant_owns(t, owner)))
                return refuse(req, t, ret_err, "name: no runtime '%s' of this tenant", TEXT_Q(name ? name : "?"));
        if (!owner)
                return refuse(req, t, ret_err, "runtime '%s' is shared by every tenant; only admin clients delete it",
                              TEXT_Q(name));
        return 0;
}

static int authorize_tenant(rpc_request *req, manager *m, const tenant *t, tenant_access a, const char *field,
                            sb_error **ret_err) {
        const char *name = field ? param_str(req->params, field) : NULL;
        tenant_limits l;
        limits_of(m->cfg, t, &l);
        switch (a) {
        case ACCESS_ADMIN:
                return refuse(req, t, ret_err, "%s is for admin clients only", TEXT_Q(req->method));
        case ACCESS_ANY:
        case ACCESS_STREAM:
        case ACCESS_LIST:
                return 0;
        case ACCESS_OPTIONAL_SANDBOX:
                if (!cJSON_GetObjectItemCaseSensitive(req->params, field))
                        return 0;
                __attribute__((fallthrough));
        case ACCESS_SANDBOX: {
                sandbox *sb = name ? manager_find_sandbox(m, name) : NULL;
                if (!sb || !tenant_owns(t, sb->owner))
                        return refuse(req, t, ret_err, "%s: no sandbox '%s' of this tenant", field,
                                      TEXT_Q(name ? name : "?"));
                if (streq(req->method, "sandbox.update"))
                        return check_update(req, m, t, &l, sb, ret_err);
                if (streq(req->method, "sandbox.fork"))
                        return check_fork(req, t, &l, sb, ret_err);
                return 0;
        }
        case ACCESS_COMMAND: {
                command *cmd = name ? manager_find_command(m, name) : NULL;
                if (!cmd || !cmd->sb || !tenant_owns(t, cmd->sb->owner))
                        return refuse(req, t, ret_err, "cmdId: no command '%s' of this tenant",
                                      TEXT_Q(name ? name : "?"));
                return 0;
        }
        case ACCESS_SNAPSHOT: {
                snapshot *sn = name ? manager_find_snapshot(m, name) : NULL;
                if (!sn || !tenant_owns(t, sn->owner))
                        return refuse(req, t, ret_err, "id: no snapshot '%s' of this tenant", TEXT_Q(name ? name : "?"));
                return 0;
        }
        case ACCESS_VOLUME: {
                volume *v = name ? manager_find_volume(m, name) : NULL;
                if (!v || !tenant_owns(t, v->owner))
                        return refuse(req, t, ret_err, "name: no volume '%s' of this tenant", TEXT_Q(name ? name : "?"));
                return 0;
        }
        case ACCESS_CREATE:
                return check_create(req, m, t, &l, ret_err);
        case ACCESS_RUNTIMES:
                req->result_filter = filter_runtimes;
                req->result_filter_userdata = m;
                return 0;
        case ACCESS_RUNTIME_MAKE:
                return check_runtime_make(req, t, &l, ret_err);
        case ACCESS_RUNTIME_DELETE:
                return check_runtime_delete(req, m, t, name, ret_err);
        case ACCESS_SNAPSHOT_IMPORT:
                if (!l.snapshot_import)
                        return refuse(req, t, ret_err, "\"snapshot.import\" is not open to this tenant (daemon.json "
                                                       "tenants allowSnapshotImport)");
                return 0;
        case ACCESS_SNAPSHOT_EXPORT: {
                snapshot *sn = name ? manager_find_snapshot(m, name) : NULL;
                if (!sn || !tenant_owns(t, sn->owner))
                        return refuse(req, t, ret_err, "id: no snapshot '%s' of this tenant", TEXT_Q(name ? name : "?"));
                if (!l.snapshot_export)
                        return refuse(req, t, ret_err, "\"snapshot.export\" is not open to this tenant (daemon.json "
                                                       "tenants allowSnapshotExport)");
                return 0;
        }
        case ACCESS_INFO:
                return 0;
        }
        return refuse(req, t, ret_err, "not allowed");
}

static int authorize(rpc_request *req, void *userdata, sb_error **ret_err) {
        manager *m = userdata;
        tenant t;
        tenant_of_conn(m->cfg, req->conn, &t);
        /* The handler refuses every caller but a gateway's first call. */
        if (streq(req->method, "session.actAs"))
                return 0;
        if (t.admin)
                return 0;
        /* A gateway's connection before session.actAs: nothing else. */
        if (tenant_conn_is_gateway(m->cfg, req->conn) && !rpc_conn_identity(req->conn))
                return refuse(req, &t, ret_err, "this uid is a gateway (daemon.json tenants.gateways): its connection "
                                                "must call session.actAs first, and acts only as that tenant");
        if (!cJSON_IsObject(req->params))
                return refuse(req, &t, ret_err, "params must be an object");
        for (size_t i = 0; i < ELEMENTSOF(method_access); i++)
                if (streq(method_access[i].method, req->method))
                        return authorize_tenant(req, m, &t, method_access[i].access, method_access[i].field, ret_err);
        return refuse(req, &t, ret_err, "%s is not open to tenants", TEXT_Q(req->method));
}

/* The output budget's client (rpc_peer_key_fn): a tenant is one client
 * on every connection and both sockets, an admin one per local uid or
 * per TLS certificate name, so one tenant's many connections are weighed
 * together against anyone else's. */
static void peer_key(const rpc_conn *c, void *userdata, char *buf, size_t size) {
        manager *m = userdata;
        tenant t;
        tenant_of_conn(m->cfg, c, &t);
        const remote_identity *id = rpc_conn_identity(c);
        if (!t.admin)
                snprintf(buf, size, "tenant %s", t.name);
        else if (id)
                snprintf(buf, size, "admin cn %s", id->name ? id->name : "?");
        else
                snprintf(buf, size, "admin uid %u", (unsigned) rpc_conn_uid(c));
}

/* A tenant is told nothing of the host's file system (docs/SECURITY.md
 * 4): an error that names a path under the state or run directory (a
 * sandbox's image, a volume's mount, a record) says <stateDir> or <runDir>
 * in its place; an admin reads the path as it is, as the log has it. */
static void redact_message(const rpc_conn *c, char **message, void *userdata) {
        manager *m = userdata;
        tenant t;
        tenant_of_conn(m->cfg, c, &t);
        if (t.admin)
                return;
        char *a = core_redact_path(*message, m->cfg->state_dir, "<stateDir>");
        char *b = a ? core_redact_path(a, m->cfg->run_dir, "<runDir>") : NULL;
        free(a);
        free(*message);
        *message = b;
}

void tenant_attach(manager *m, rpc_server *server) {
        rpc_server_set_authorize(server, authorize, m);
        rpc_server_set_message_filter(server, redact_message, m);
        rpc_server_add_method(server, "session.actAs", method_act_as, m);
        rpc_server_set_peer_key(server, peer_key, m);
}

/* ---- daemon.json "tenants" ---- */

static int config_error(sb_error **ret_err, const char *field, const char *fmt, ...) _printf_(3, 4);
static int config_error(sb_error **ret_err, const char *field, const char *fmt, ...) {
        _cleanup_free_ char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        return sb_error_set(ret_err, -EINVAL, NULL, field, "daemon.json: %s", msg ? msg : field);
}

static bool dup_key(const cJSON *obj, const cJSON *it) {
        return cJSON_GetObjectItemCaseSensitive(obj, it->string) != it;
}

#define LIMIT_KEYS                                                                                     \
        "maxSandboxes, maxVcpus, maxDiskMiB, maxSnapshots, maxRuntimes, maxVolumes, networkModes, "         \
        "allowNoUserns, "                                                                              \
        "allowLocalSources, "                                                                          \
        "allowRuntimeImport, allowSnapshotImport, allowSnapshotExport, localSourceRoots (tenants.names only)"

/* A tenant's localSourceRoots: as daemon.json localSourceRoots (at most
 * 64 absolute paths other than /, without '.' or '..' components), and
 * each an existing directory reached without a symlink (a root that is
 * not one now would fail every open later). Not in tenants.defaults: one
 * list there would be every remote tenant's again, the sharing these
 * roots exist to end. */
static int check_roots(const cJSON *it, const char *where, sb_error **ret_err) {
        if (streq(where, "tenants.defaults"))
                return config_error(ret_err, "tenants.defaults.localSourceRoots",
                                    "tenants.defaults.localSourceRoots: not allowed: one list for every tenant "
                                    "would share its directories between all of them; give each tenant its own "
                                    "in tenants.names.NAME.localSourceRoots");
        if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) > 64)
                return config_error(ret_err, where, "%s.localSourceRoots: must be an array of at most 64 absolute "
                                    "directory paths", where);
        const cJSON *p;
        int i = 0;
        cJSON_ArrayForEach(p, it) {
                const char *s = cJSON_GetStringValue(p);
                if (!core_path_is_plain_absolute(s))
                        return config_error(ret_err, where, "%s.localSourceRoots[%d]: must be an absolute "
                                            "directory path other than / without '.' or '..' components", where, i);
                struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                                        .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
                _cleanup_close_ int fd = (int) syscall(SYS_openat2, AT_FDCWD, s, &how, sizeof(how));
                if (fd < 0)
                        fd = negative_errno();
                if (fd < 0)
                        return config_error(ret_err, where, "%s.localSourceRoots[%d]: '%s' %s", where, i, s,
                                            fd == -ELOOP ? "has a symlink in its path; list the real directory"
                                                         : fd == -ENOTDIR ? "is not a directory"
                                                                          : "is not an existing directory");
                i++;
        }
        return 0;
}

/* True when directory a is b or lies beneath it (as text, after
 * check_roots: no '.' or '..'; slashes may repeat). */
static bool path_within(const char *a, const char *b) {
        for (;;) {
                while (*a == '/')
                        a++;
                while (*b == '/')
                        b++;
                if (!*b)
                        return true;
                size_t na = strcspn(a, "/"), nb = strcspn(b, "/");
                if (na != nb || strncmp(a, b, na) != 0)
                        return false;
                a += na;
                b += nb;
        }
}

/* No directory is two tenants': no root of one tenant is, or lies
 * beneath or above, a root of another (tenants.names). */
static int check_roots_apart(const cJSON *names, sb_error **ret_err) {
        const cJSON *n1, *n2, *r1, *r2;
        cJSON_ArrayForEach(n1, names)
                for (n2 = n1->next; n2; n2 = n2->next)
                        cJSON_ArrayForEach(r1, cJSON_GetObjectItemCaseSensitive(n1, "localSourceRoots"))
                                cJSON_ArrayForEach(r2, cJSON_GetObjectItemCaseSensitive(n2, "localSourceRoots")) {
                                        const char *a = cJSON_GetStringValue(r1), *b = cJSON_GetStringValue(r2);
                                        if (a && b && (path_within(a, b) || path_within(b, a)))
                                                return config_error(ret_err, "tenants.names",
                                                                    "tenants.names.%s.localSourceRoots: '%s' "
                                                                    "overlaps tenants.names.%s.localSourceRoots "
                                                                    "'%s'; a directory is one tenant's only",
                                                                    n2->string, b, n1->string, a);
                                }
        return 0;
}

static bool is_bool_limit(const char *key) {
        for (size_t i = 0; i < ELEMENTSOF(bool_limits); i++)
                if (streq(key, bool_limits[i].key))
                        return true;
        return false;
}

static int check_limits(const cJSON *o, const char *where, sb_error **ret_err) {
        if (!cJSON_IsObject(o))
                return config_error(ret_err, where, "%s: must be an object of limits (%s)", where, LIMIT_KEYS);
        const cJSON *it;
        cJSON_ArrayForEach(it, o) {
                if (dup_key(o, it))
                        return config_error(ret_err, where, "%s.%s: key given more than once", where, it->string);
                bool known = false;
                for (size_t i = 0; i < ELEMENTSOF(int_limits); i++)
                        if (streq(it->string, int_limits[i].key)) {
                                known = true;
                                double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
                                if (!cJSON_IsNull(it) &&
                                    (!isfinite(d) || d != floor(d) || d < 0 || d > (double) TENANT_LIMIT_MAX))
                                        return config_error(ret_err, where,
                                                            "%s.%s: must be an integer from 0 to %llu, or null (no "
                                                            "limit)", where, it->string, TENANT_LIMIT_MAX);
                        }
                if (known)
                        continue;
                if (streq(it->string, "networkModes")) {
                        if (!cJSON_IsArray(it))
                                return config_error(ret_err, where, "%s.networkModes: must be an array of "
                                                    "\"allow-all\", \"deny-all\" and \"custom\"", where);
                        const cJSON *mv;
                        cJSON_ArrayForEach(mv, it) {
                                const char *s = cJSON_GetStringValue(mv);
                                bool ok = false;
                                for (size_t i = 0; s && i < ELEMENTSOF(mode_names); i++)
                                        ok |= streq(s, mode_names[i]);
                                if (!ok)
                                        return config_error(ret_err, where, "%s.networkModes: '%s' is not a mode; use "
                                                            "\"allow-all\", \"deny-all\" or \"custom\"", where,
                                                            s ? s : "(not a string)");
                        }
                } else if (streq(it->string, "localSourceRoots")) {
                        int r = check_roots(it, where, ret_err);
                        if (r < 0)
                                return r;
                } else if (is_bool_limit(it->string)) {
                        if (!cJSON_IsBool(it))
                                return config_error(ret_err, where, "%s.%s: must be true or false", where,
                                                    it->string);
                } else
                        return config_error(ret_err, where, "%s: unknown key '%s'; known keys: %s", where,
                                            it->string, LIMIT_KEYS);
        }
        return 0;
}

/* A name tenants.names may hold: "uid:N", "tag:K=V" or a tenant:NAME's
 * NAME (remote.h), 1..TENANT_NAME_BUF-1 bytes without control characters. */
static bool config_name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n >= TENANT_NAME_BUF)
                return false;
        for (const unsigned char *p = (const unsigned char *) s; *p; p++)
                if (*p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

int tenant_config_check(const cJSON *v, sb_error **ret_err) {
        if (!cJSON_IsObject(v))
                return config_error(ret_err, "tenants", "tenants: must be an object {\"localAdmins\": [UID...], \"gateways\": [UID...], "
                                    "\"defaults\": {LIMITS}, \"names\": {NAME: {LIMITS}}}");
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
                if (dup_key(v, it))
                        return config_error(ret_err, "tenants", "tenants.%s: key given more than once", it->string);
                int r = 0;
                if (streq(it->string, "localAdmins")) {
                        if (!cJSON_IsArray(it))
                                return config_error(ret_err, "tenants.localAdmins",
                                                    "tenants.localAdmins: must be an array of uids");
                        const cJSON *u;
                        cJSON_ArrayForEach(u, it) {
                                double d = cJSON_IsNumber(u) ? u->valuedouble : NAN;
                                if (!isfinite(d) || d != floor(d) || d < 1 || d > 4294967294.0)
                                        return config_error(ret_err, "tenants.localAdmins",
                                                            "tenants.localAdmins: each entry must be a uid from 1 to "
                                                            "4294967294 (root is always admin)");
                        }
                } else if (streq(it->string, "gateways")) {
                        if (!cJSON_IsArray(it))
                                return config_error(ret_err, "tenants.gateways",
                                                    "tenants.gateways: must be an array of uids");
                        const cJSON *u;
                        cJSON_ArrayForEach(u, it) {
                                double d = cJSON_IsNumber(u) ? u->valuedouble : NAN;
                                if (!isfinite(d) || d != floor(d) || d < 1 || d > 4294967294.0)
                                        return config_error(ret_err, "tenants.gateways",
                                                            "tenants.gateways: each entry must be a uid from 1 to "
                                                            "4294967294 (root is admin, never a gateway)");
                                const cJSON *a;
                                cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(v, "localAdmins"))
                                        if (cJSON_IsNumber(a) && a->valuedouble == d)
                                                return config_error(ret_err, "tenants.gateways",
                                                                    "tenants.gateways: uid %.0f is also in "
                                                                    "localAdmins; a gateway acts only as tenants, "
                                                                    "so it must not be admin", d);
                        }
                } else if (streq(it->string, "defaults"))
                        r = check_limits(it, "tenants.defaults", ret_err);
                else if (streq(it->string, "names")) {
                        if (!cJSON_IsObject(it))
                                return config_error(ret_err, "tenants.names",
                                                    "tenants.names: must be an object of tenant name -> limits");
                        const cJSON *n;
                        cJSON_ArrayForEach(n, it) {
                                if (dup_key(it, n) || !config_name_ok(n->string))
                                        return config_error(ret_err, "tenants.names",
                                                            "tenants.names: '%s' is given twice or is not a tenant "
                                                            "name (\"uid:N\", \"tag:K=V\" or a tenant:NAME's NAME)",
                                                            n->string);
                                _cleanup_free_ char *where = NULL;
                                if (asprintf(&where, "tenants.names.%s", n->string) < 0)
                                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                                if ((r = check_limits(n, where, ret_err)) < 0)
                                        return r;
                        }
                        r = check_roots_apart(it, ret_err);
                } else
                        return config_error(ret_err, "tenants", "tenants: unknown key '%s'; known keys: "
                                            "localAdmins, gateways, defaults, names", it->string);
                if (r < 0)
                        return r;
        }
        return 0;
}
