/* Tenants (docs/SECURITY.md §4, docs/API.md "Tenants"): who owns what, who
 * may see and touch it, and the per-tenant limits of daemon.json "tenants".
 *
 * Every client is either admin or one tenant:
 *   - the Unix socket: uid 0 and the uids of tenants.localAdmins are admin;
 *     any other peer (a member of the socket group) is the tenant "uid:N",
 *     N its uid from SO_PEERCRED, as incus gives each unprivileged user a
 *     project of its own;
 *   - TLS: O=admin is admin; O=tenant:NAME is the tenant "NAME";
 *     O=tag:K=V (the older role) is the tenant "tag:K=V" (remote.h).
 * The names cannot collide: NAME has no ':'.
 *
 * Ownership is a field the daemon sets and no method changes: a sandbox,
 * a snapshot and the commands of a sandbox record the tenant of the client
 * that made them (NULL: admin-owned; state written before owners existed
 * reads as admin-owned). Tags are labels and decide nothing here. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include <cjson/cJSON.h>
#include "libcore/error.h"
#include "sandboxd/config.h"
#include "sandboxd/manager.h"
#include "sandboxd/rpc.h"

/* Bytes of a tenant name with its NUL: "tag:" + an O of at most 64
 * characters of up to 4 bytes each. */
#define TENANT_NAME_BUF 272

typedef struct tenant {
        bool admin;                 /* every object, every method */
        bool remote;                /* a TLS client (sources from public addresses only) */
        char name[TENANT_NAME_BUF]; /* "" for admin */
} tenant;

/* Who the client of connection `c` is (rules above). `cfg` gives
 * tenants.localAdmins (NULL: uid 0 only). A connection of neither kind
 * (none) is admin: the daemon's own calls. Never fails. */
void tenant_of_conn(const daemon_config *cfg, const rpc_conn *c, tenant *ret);

/* The tenant of Unix peer `uid` (rules above). */
void tenant_of_uid(const daemon_config *cfg, uid_t uid, tenant *ret);

/* True when `c` is a Unix-socket connection of a uid of daemon.json
 * tenants.gateways (session.actAs, tenant.c). */
bool tenant_conn_is_gateway(const daemon_config *cfg, const rpc_conn *c);

/* What an object made by `t` records as its owner: NULL for admin, else
 * t->name (borrowed from t). */
const char *tenant_owner(const tenant *t);

/* True when `t` may see and touch an object recorded with `owner` (NULL:
 * admin-owned): admin always, a tenant only its own. */
bool tenant_owns(const tenant *t, const char *owner);

/* True when the client of `c` may see sandbox `sb_name` and its events
 * (NULL: the daemon's own events, admin only). */
bool tenant_conn_sees_sandbox(manager *m, const rpc_conn *c, const char *sb_name);

/* True when the client of `req` may see an object recorded with `owner`. */
bool tenant_req_owns(manager *m, const rpc_request *req, const char *owner);

/* True when the client of `req` (NULL: the daemon itself) is admin. */
bool tenant_req_admin(manager *m, const rpc_request *req);

/* The directories the host paths of tenant `t` are confined beneath
 * (docs/SECURITY.md §4 "Host paths"): admin, daemon.json localSourceRoots;
 * a tenant whose limits name localSourceRoots (tenants.names.NAME), those;
 * a local tenant (uid:N) without, daemon.json localSourceRoots (opened as
 * its own uid: tenant_host_open); a remote tenant (TLS, gateway
 * session.actAs) without, none: refused, so that no two remote tenants
 * share a directory unless the operator lists it for both. On success
 * *ret gets a NULL-terminated copy (the caller's: tenant_roots_free; it
 * may be empty) and 0 is returned. A remote tenant without roots: -EACCES
 * (permission_denied) with *ret_err naming `field` (NULL: "path") and
 * daemon.json tenants.names.NAME.localSourceRoots. -ENOMEM. */
int tenant_roots(const daemon_config *cfg, const tenant *t, const char *field, char ***ret, sb_error **ret_err);

/* Frees a list of tenant_roots (NULL: nothing). */
void tenant_roots_free(char **roots);
static inline void tenant_roots_freep(char ***p) {
        tenant_roots_free(*p);
}

/* What tenant_host_open opens: a file to read, or a directory. */
typedef enum tenant_host_mode {
        TENANT_HOST_FILE,         /* a tarball to import: a regular file, O_RDONLY */
        TENANT_HOST_WRITE_DIR,    /* a directory to export into: O_RDONLY | O_DIRECTORY, writable */
} tenant_host_mode;

/* Opens a host path the tenant of `req` named (a tarball to import, or
 * the directory to export into) as local sources are opened: only under
 * the tenant's roots (tenant_roots; a remote tenant without roots of its
 * own is refused, -EACCES naming tenants.names.NAME.localSourceRoots),
 * resolved beneath the root with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) (core_source_local_open);
 * a file must be a regular one and is opened O_RDONLY (through O_PATH
 * first, so a FIFO or device is never opened). A local tenant's path is
 * opened on a thread of its own with the client's uid, gid and groups
 * (SO_PEERCRED, SO_PEERGROUPS) as fsuid, fsgid and groups, without the
 * daemon's filesystem capabilities: it opens only what the client could
 * read itself, and a directory to export into must be one it may create
 * files in (write and search permission). A remote tenant has no host
 * identity: its own roots alone bound it. Returns the fd (the caller's), or a
 * negative errno with *ret_err naming `field` (reason source_failed; a
 * local tenant's EACCES says whose permission it was). The fd is then used
 * as root: the path is never used again. */
int tenant_host_open(manager *m, const rpc_request *req, const char *path, tenant_host_mode mode, const char *field,
                     sb_error **ret_err);

/* daemon.info of a tenant: adds to `o` "tenant" {name, limits (every key of
 * daemon.json LIMITS, null for none), usage {sandboxes, running, vcpus,
 * diskMiB, snapshots, runtimes}} and the tenant's own "sandboxes" and
 * "running" counts. Returns false (and adds nothing) for admin. */
bool tenant_info(manager *m, const rpc_request *req, cJSON *o);

/* Installs the check every request passes before its method runs (Unix
 * socket and TLS alike): admin passes; a tenant is held to the table of
 * methods in tenant.c (a method missing there is refused), to its own
 * objects, and to its limits (daemon.json "tenants"). */
void tenant_attach(manager *m, rpc_server *server);

struct sandbox;
/* The limits checked where a new sandbox is registered (create_sandbox,
 * after its params are parsed, so a fork's and a snapshot's values count):
 * the network mode, and the tenant's sandboxes, vCPUs and disk with this
 * one added. Admin: 0. Else 0, or -EACCES (permission_denied) / -EDQUOT
 * (limit_exceeded) with *ret_err naming the limit and the tenant, logged. */
int tenant_check_new_sandbox(manager *m, rpc_request *req, const struct sandbox *sb, sb_error **ret_err);

/* The same for a new volume of size_mib (volume.create): under a
 * maxDiskMiB, the tenant's sandboxes' disks, volumes, snapshots and
 * imported runtimes with this one added. */
int tenant_check_new_volume(manager *m, rpc_request *req, uint64_t size_mib, sb_error **ret_err);

/* The same for a new snapshot of `src` (its capture done): the tenant's
 * snapshots with this one added, and with a maxDiskMiB its sandboxes'
 * disks plus its snapshots', each snapshot counted at its source's diskMiB
 * (the most its top layer can hold). */
int tenant_check_new_snapshot(manager *m, rpc_request *req, const struct sandbox *src, sb_error **ret_err);

/* The same for snapshot `s` brought in by snapshot.import (not yet
 * registered), its layers `unpacked_bytes` in all: the tenant's snapshots
 * with it, and under a maxDiskMiB its config's resources.diskMiB, which
 * must hold the layers, with the tenant's sandboxes' disks and its other
 * snapshots'. Returns as tenant_check_new_sandbox. */
struct snapshot;
int tenant_check_imported_snapshot(manager *m, rpc_request *req, const struct snapshot *s, uint64_t unpacked_bytes,
                                   sb_error **ret_err);

/* The same for a new runtime (runtime.import, runtime.bootstrap) of a
 * tenant that has `have` (made and being made): maxRuntimes. */
int tenant_check_new_runtime(manager *m, rpc_request *req, unsigned have, sb_error **ret_err);

/* Before a runtime.import or snapshot.import of the tenant of `req`
 * unpacks onto the state filesystem: under a
 * maxDiskMiB, *ret_room_mib gets what the tenant has left (its sandboxes'
 * disks, snapshots and imported runtimes, imports in progress at what they
 * reserved, taken off the limit), the most the import may unpack;
 * UINT64_MAX without a limit (and for admin). Returns 0, or -EDQUOT
 * (limit_exceeded, naming maxDiskMiB and the tenant) when nothing is left. */
int tenant_disk_room(manager *m, rpc_request *req, uint64_t *ret_room_mib, sb_error **ret_err);

/* Before a fork or a snapshot copies its source (snapshot.c): whether the
 * tenant has room for one more sandbox (`snapshot_src` NULL) or for a
 * snapshot of `snapshot_src` (count and disk, as tenant_check_new_snapshot). The copy takes the source's disk in bytes on the state
 * filesystem and freezes it; a tenant at its limit would otherwise have it
 * done, again and again, only to be refused at registration (which stays
 * the check that counts: concurrent requests can all pass this one).
 * Returns as tenant_check_new_sandbox. */
int tenant_check_room(manager *m, rpc_request *req, const struct sandbox *snapshot_src, sb_error **ret_err);

/* daemon.json "tenants": validates the value (every key known, every value
 * of its type and range), naming the key at fault in *ret_err. Pure. */
int tenant_config_check(const cJSON *v, sb_error **ret_err);
