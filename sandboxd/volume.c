/* Named volumes (docs/API.md "Volumes", docs/SECURITY.md "Volumes"): the
 * volume.* methods, their records, the bounded filesystem of each, and the
 * detached mounts a session gets of the volumes its sandbox names.
 *
 * A volume lives in <state>/volumes/<name>/: volume.json (its record,
 * written atomically and durably), and the same bounded storage a
 * sandbox's disk has (libcore/diskimg.h: disk.img mounted at disk/, or
 * with storage.pool a Btrfs subvolume with a qgroup limit, libcore/pool.h),
 * whose upper/ is bound onto <dir>/upper, the volume's tree. The daemon
 * mounts that filesystem once, in its own 0700 directory; a session gets a
 * detached clone of <dir>/upper (open_tree), idmapped so that the files
 * keep the sandbox ids on disk, as layers do (libcore/userns.h): sandbox
 * uid 1000 is stored as 1000 whatever the session's host range, and
 * without a user namespace the sandboxd-user account is stored as 1000 as
 * well. sandbox-init attaches it at its mount point after making the
 * missing directories without following any symlink (libcore/rootfs.c).
 * The daemon never reads or writes a path inside the tree.
 *
 * Crash order: the record is written last at create and removed first at
 * delete; at start a directory without a record is what an interrupted
 * create or delete left, and goes (volumes_load). */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "libcore/agent.h"
#include "libcore/diskimg.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/pool.h"
#include "libcore/userns.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/limits.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"
#include "sandboxd/worker.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* Largest sizeMiB: as resources.diskMiB (disk.c). */
#define VOLUME_MIB_MAX (16ull * 1024 * 1024)
/* Largest inodes: ext4's own bound (2^32 - 1). */
#define VOLUME_INODES_MAX 4294967295ull

/* ---- registry ----------------------------------------------------------- */

volume *manager_find_volume(manager *m, const char *name) {
        for (volume *v = m->volumes; v && name; v = v->next)
                if (streq(v->name, name))
                        return v;
        return NULL;
}

static void volume_free(volume *v) {
        if (!v)
                return;
        free(v->name);
        free(v->owner);
        free(v->dir);
        cJSON_Delete(v->tags);
        free(v);
}

static void volume_unlink(manager *m, volume *v) {
        for (volume **p = &m->volumes; *p; p = &(*p)->next)
                if (*p == v) {
                        *p = v->next;
                        return;
                }
}

void volumes_free(manager *m) {
        while (m->volumes) {
                volume *v = m->volumes;
                m->volumes = v->next;
                volume_free(v);
        }
        free(m->volumes_dir);
        m->volumes_dir = NULL;
}

bool volume_mounted_by(const sandbox *sb, const char *name) {
        const cJSON *it;
        cJSON_ArrayForEach(it, sb->volumes) {
                const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "name"));
                if (n && streq(n, name))
                        return true;
        }
        return false;
}

/* The sandboxes whose config names volume `name` (running or stopped: a
 * stopped persistent one mounts it again when it resumes), as an array
 * of names; with `req`, only those its client may see. */
static cJSON *mounted_by(manager *m, const rpc_request *req, const char *name, unsigned *ret_all) {
        cJSON *a = cJSON_CreateArray();
        unsigned all = 0;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                if (sb->pooled || !volume_mounted_by(sb, name))
                        continue;
                all++;
                if (!req || tenant_req_owns(m, req, sb->owner))
                        cJSON_AddItemToArray(a, cJSON_CreateString(sb->name));
        }
        if (ret_all)
                *ret_all = all;
        return a;
}

/* Bytes and inodes in use on the volume's filesystem (zeros when it
 * cannot be read): statfs of its tree's root, which is a mount root of the
 * daemon's (no path inside the tree is used); a pool volume's bytes are its
 * subvolume's referenced bytes (the qgroup its limit applies to). */
static void volume_usage(const volume *v, uint64_t *ret_bytes, uint64_t *ret_inodes, uint64_t *ret_total_inodes) {
        *ret_bytes = *ret_inodes = 0;
        *ret_total_inodes = v->inodes;
        _cleanup_close_ int dfd = open(v->dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int fd = dfd < 0 ? -EBADF : openat(dfd, "upper", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct statvfs st;
        if (fd >= 0 && fstatvfs(fd, &st) == 0) {
                *ret_bytes = (uint64_t)(st.f_blocks - st.f_bfree) * st.f_frsize;
                *ret_inodes = st.f_files >= st.f_ffree ? (uint64_t)(st.f_files - st.f_ffree) : 0;
                if (st.f_files && !core_pool_present(v->dir))
                        *ret_total_inodes = st.f_files; /* ext4 rounds up to whole block groups */
        }
        uint64_t used;
        if (core_pool_present(v->dir) && core_pool_used(v->dir, &used) >= 0)
                *ret_bytes = used;
}

static cJSON *volume_json(manager *m, const rpc_request *req, const volume *v) {
        char buf[40];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", v->name);
        cJSON_AddNumberToObject(o, "sizeMiB", (double)v->size_mib);
        uint64_t bytes = 0, inodes = 0, total = v->inodes;
        if (m)
                volume_usage(v, &bytes, &inodes, &total);
        /* The record keeps what was asked (0: ext4's ratio); the view the
         * filesystem's own count. */
        cJSON_AddNumberToObject(o, "inodes", (double)total);
        cJSON_AddItemToObject(o, "tags", cJSON_Duplicate(v->tags, 1));
        cJSON_AddStringToObject(o, "createdAt", core_format_time(v->created_ms, buf, sizeof(buf)));
        cJSON_AddItemToObject(o, "owner", v->owner ? cJSON_CreateString(v->owner) : cJSON_CreateNull());
        if (m) {
                cJSON *u = cJSON_AddObjectToObject(o, "usage");
                cJSON_AddNumberToObject(u, "usedBytes", (double)bytes);
                cJSON_AddNumberToObject(u, "usedInodes", (double)inodes);
                cJSON_AddItemToObject(o, "mountedBy", mounted_by(m, req, v->name, NULL));
        }
        return o;
}

static int volume_save(const volume *v, sb_error **ret_err) {
        _cleanup_(cJSON_Deletep) cJSON *o = volume_json(NULL, NULL, v);
        _cleanup_free_ char *text = o ? cJSON_Print(o) : NULL, *path = NULL;
        if (!text || asprintf(&path, "%s/volume.json", v->dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_write_file_atomic(path, text, strlen(text), 0600);
        return r < 0 ? sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", path, strerror(-r)) : 0;
}

/* Removes what the directory `dir` of a volume holds: its storage (pool
 * subvolume or image, unmounted lazily), then the directory. Errors are
 * logged. Worker thread or start-up. */
static void volume_remove_files(const char *dir) {
        sandbox_disk_remove(dir);
        int r = core_rm_rf(dir);
        if (r < 0 && r != -ENOENT)
                log_warning_errno(r, "remove %s: %m", dir);
}

/* ---- start-up ------------------------------------------------------------ */

static int volume_load_one(manager *m, const char *name, const char *dir) {
        _cleanup_free_ char *path = NULL, *text = NULL;
        size_t n = 0;
        if (asprintf(&path, "%s/volume.json", dir) < 0)
                return -ENOMEM;
        int r = core_read_file(path, 1 << 20, &text, &n);
        if (r == -ENOENT) {
                /* An interrupted create or delete: nothing names it. */
                log_info("volume '%s': removing what an interrupted create or delete left", name);
                volume_remove_files(dir);
                return 0;
        }
        _cleanup_(cJSON_Deletep) cJSON *o = r < 0 ? NULL : cJSON_Parse(text);
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "sizeMiB");
        const cJSON *inodes = cJSON_GetObjectItemCaseSensitive(o, "inodes");
        const char *rname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
        if (!o || !cJSON_IsNumber(size) || !rname || !streq(rname, name)) {
                /* Kept as it is (its files may matter): the operator decides. */
                log_warning("volume '%s': %s is unreadable or malformed; not loaded (files kept)", name, path);
                return 0;
        }
        volume *v = calloc(1, sizeof(*v));
        if (!v || !(v->name = strdup(name)) || !(v->dir = strdup(dir))) {
                volume_free(v);
                return -ENOMEM;
        }
        v->size_mib = (uint64_t)size->valuedouble;
        v->inodes = cJSON_IsNumber(inodes) ? (uint64_t)inodes->valuedouble : 0;
        const cJSON *tags = cJSON_GetObjectItemCaseSensitive(o, "tags");
        v->tags = cJSON_IsObject(tags) ? cJSON_Duplicate(tags, 1) : cJSON_CreateObject();
        const char *owner = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "owner"));
        v->owner = owner ? strdup(owner) : NULL;
        const char *created = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "createdAt"));
        v->created_ms = created ? core_parse_time(created) : 0;
        /* Its filesystem mounted again (a restarted daemon whose sessions
         * still hold it finds the mount, or the loop device, as it was). */
        _cleanup_error_ sb_error *err = NULL;
        r = core_pool_present(dir) ? core_pool_attach(dir, &err) : core_disk_attach(dir, &err);
        if (r < 0)
                log_warning("volume '%s': mount its filesystem: %s (sandboxes naming it will not start)", name,
                            err ? err->message : strerror(-r));
        v->next = m->volumes;
        m->volumes = v;
        return 0;
}

int volumes_load(manager *m, sb_error **ret_err) {
        if (asprintf(&m->volumes_dir, "%s/volumes", m->cfg->state_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_mkdir_p(m->volumes_dir, 0700);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "create %s: %s", m->volumes_dir, strerror(-r));
        _cleanup_closedir_ DIR *d = opendir(m->volumes_dir);
        for (struct dirent *de; d && (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_free_ char *dir = NULL;
                if (asprintf(&dir, "%s/%s", m->volumes_dir, de->d_name) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                if (!core_name_is_valid(de->d_name)) {
                        log_warning("volume directory %s: not a volume name; left alone", dir);
                        continue;
                }
                if ((r = volume_load_one(m, de->d_name, dir)) < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "load volume %s: %s", de->d_name, strerror(-r));
        }
        return 0;
}

/* ---- the space they hold ---------------------------------------------------- */

void volumes_storage_stats(const manager *m, const char *owner, sandbox_storage *st) {
        for (const volume *v = m->volumes; v; v = v->next) {
                if (owner && (!v->owner || strcmp(v->owner, owner) != 0))
                        continue;
                st->volumes++;
                if (core_pool_present(v->dir))
                        st->pool_committed_bytes += (v->size_mib << 20) + CORE_POOL_RESERVE_BYTES;
                else {
                        st->committed_bytes += v->size_mib << 20;
                        st->volume_committed_bytes += v->size_mib << 20;
                }
        }
}

uint64_t volumes_disk_mib(const manager *m, const char *owner) {
        uint64_t mib = 0;
        for (const volume *v = m->volumes; v && owner; v = v->next)
                if (v->owner && streq(v->owner, owner))
                        mib += v->size_mib;
        return mib;
}

unsigned volumes_count(const manager *m) {
        unsigned n = 0;
        for (const volume *v = m->volumes; v; v = v->next)
                n++;
        return n;
}

void volumes_metrics(manager *m, const char *owner, void (*fn)(const char *name, uint64_t size_bytes,
                                                                 uint64_t used_bytes, uint64_t used_inodes,
                                                                 uint64_t inodes, void *userdata),
                     void *userdata) {
        for (const volume *v = m->volumes; v; v = v->next) {
                if (v->creating || (owner && (!v->owner || strcmp(v->owner, owner) != 0)))
                        continue;
                uint64_t b, i, total;
                volume_usage(v, &b, &i, &total);
                fn(v->name, v->size_mib << 20, b, i, total, userdata);
        }
}

/* ---- mounts of a session ------------------------------------------------------ */

/* Paths no volume may cover: the kernel's filesystems sandbox-init mounts
 * fresh (a volume under them would be hidden or refused there). */
static const char *const forbidden_prefixes[] = { "/proc", "/sys", "/dev" };

static int mount_path_check(const char *path, const char *field, sb_error **ret_err) {
        if (path[0] != '/' || streq(path, "/"))
                return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: %s: must be an absolute path other than /",
                                    field, TEXT_Q(path));
        for (const char *c = path + 1; *c;) {
                const char *e = strchrnul(c, '/');
                size_t len = (size_t)(e - c);
                if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
                        return sb_error_set(ret_err, -EINVAL, NULL, field,
                                            "%s: %s: no empty, '.' or '..' components and no trailing '/'", field,
                                            TEXT_Q(path));
                c = *e ? e + 1 : e;
                if (!*c && *e)
                        return sb_error_set(ret_err, -EINVAL, NULL, field,
                                            "%s: %s: no empty, '.' or '..' components and no trailing '/'", field,
                                            TEXT_Q(path));
        }
        for (size_t i = 0; i < ELEMENTSOF(forbidden_prefixes); i++) {
                if (core_path_is_within(path, forbidden_prefixes[i]))
                        return sb_error_set(ret_err, -EINVAL, NULL, field,
                                            "%s: %s: volumes cannot be mounted under %s", field, TEXT_Q(path),
                                            forbidden_prefixes[i]);
        }
        return 0;
}

int volumes_parse_mounts(manager *m, const rpc_request *req, const cJSON *arr, cJSON **ret, sb_error **ret_err) {
        *ret = NULL;
        if (!arr || cJSON_IsNull(arr)) {
                *ret = cJSON_CreateArray();
                return *ret ? 0 : sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        if (!cJSON_IsArray(arr))
                return sb_error_set(ret_err, -EINVAL, NULL, "volumes", "volumes: must be an array of {name, path, readOnly?}");
        if (cJSON_GetArraySize(arr) > VOLUME_MOUNTS_MAX)
                return sb_error_set(ret_err, -E2BIG, NULL, "volumes", "volumes: at most %d mounts", VOLUME_MOUNTS_MAX);
        _cleanup_(cJSON_Deletep) cJSON *out = cJSON_CreateArray();
        if (!out)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, arr) {
                char fname[48], fpath[48], fro[48];
                snprintf(fname, sizeof(fname), "volumes[%d].name", i);
                snprintf(fpath, sizeof(fpath), "volumes[%d].path", i);
                snprintf(fro, sizeof(fro), "volumes[%d].readOnly", i);
                i++;
                if (!cJSON_IsObject(it))
                        return sb_error_set(ret_err, -EINVAL, NULL, fname, "volumes[%d]: must be an object {name, path, "
                                            "readOnly?}", i - 1);
                const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
                const cJSON *p = cJSON_GetObjectItemCaseSensitive(it, "path");
                const cJSON *ro = cJSON_GetObjectItemCaseSensitive(it, "readOnly");
                if (!cJSON_IsString(n) || !core_name_is_valid(n->valuestring))
                        return sb_error_set(ret_err, -EINVAL, NULL, fname,
                                            "%s: a volume name: 1-63 of a-z, 0-9 and '-', starting with a letter or digit",
                                            fname);
                if (!cJSON_IsString(p))
                        return sb_error_set(ret_err, -EINVAL, NULL, fpath, "%s: must be a string (an absolute path)",
                                            fpath);
                if (ro && !cJSON_IsBool(ro))
                        return sb_error_set(ret_err, -EINVAL, NULL, fro, "%s: must be true or false", fro);
                int r = mount_path_check(p->valuestring, fpath, ret_err);
                if (r < 0)
                        return r;
                const cJSON *o;
                cJSON_ArrayForEach(o, out)
                        if (streq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "path")), p->valuestring))
                                return sb_error_set(ret_err, -EINVAL, NULL, fpath,
                                                    "%s: %s: another volume of this sandbox is mounted there", fpath,
                                                    TEXT_Q(p->valuestring));
                /* Another tenant's volume is answered as a missing one. */
                volume *v = manager_find_volume(m, n->valuestring);
                if (!v || v->creating || v->deleting || !tenant_req_owns(m, req, v->owner))
                        return sb_error_set(ret_err, -ENOENT, "not_found", fname, "%s: no volume '%s'; make it with "
                                            "volume.create first", fname, TEXT_Q(n->valuestring));
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", n->valuestring);
                cJSON_AddStringToObject(e, "path", p->valuestring);
                cJSON_AddBoolToObject(e, "readOnly", cJSON_IsTrue(ro));
                cJSON_AddItemToArray(out, e);
        }
        *ret = TAKE_PTR(out);
        return 0;
}

cJSON *volumes_session_mounts(manager *m, const sandbox *sb, sb_error **ret_err) {
        _cleanup_(cJSON_Deletep) cJSON *out = cJSON_CreateArray();
        const cJSON *it;
        cJSON_ArrayForEach(it, sb->volumes) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "name"));
                const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "path"));
                volume *v = manager_find_volume(m, name);
                if (!name || !path) {
                        sb_error_set(ret_err, -EINVAL, NULL, "volumes", "sandbox '%s': its stored volumes are malformed",
                                     sb->name);
                        return NULL;
                }
                if (!v || v->creating || v->deleting) {
                        sb_error_set(ret_err, -ENOENT, "not_found", "volumes",
                                     "sandbox '%s' mounts volume '%s', which does not exist", sb->name, name);
                        return NULL;
                }
                cJSON *e = cJSON_CreateObject();
                cJSON_AddStringToObject(e, "name", name);
                cJSON_AddStringToObject(e, "dir", v->dir);
                cJSON_AddStringToObject(e, "path", path);
                cJSON_AddBoolToObject(e, "readOnly", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "readOnly")));
                cJSON_AddItemToArray(out, e);
        }
        return TAKE_PTR(out);
}

int volumes_tree(const char *dir, int userns_fd, bool ro, sb_error **ret_err) {
        _cleanup_close_ int dfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", dir);
        /* <dir>/upper is the bind of the volume's own filesystem: a mount
         * root, never the ext4 or subvolume root (which hold the reserve
         * and lost+found). */
        struct stat st, up;
        if (fstat(dfd, &st) < 0 || fstatat(dfd, "upper", &up, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(up.st_mode) ||
            up.st_dev == st.st_dev)
                return sb_error_set(ret_err, -ENXIO, NULL, NULL, "volume %s: its filesystem is not mounted", dir);
        return core_userns_idmap_tree(dfd, "upper", userns_fd, ro, ret_err);
}

/* ---- volume.create ------------------------------------------------------------ */

typedef struct create_job {
        manager *m;
        rpc_request *req;
        volume *v;
        sb_error *err;
} create_job;

static void create_work(void *userdata) {
        create_job *j = userdata;
        volume *v = j->v;
        _cleanup_close_ int dfd = -EBADF;
        int r;
        if (mkdir(v->dir, 0700) < 0) {
                sb_error_set(&j->err, negative_errno(), NULL, NULL, "create %s: %m", v->dir);
                return;
        }
        if ((r = core_fault_error("volume.create")) < 0) {
                sb_error_set(&j->err, r, NULL, NULL, "injected failure");
                goto fail;
        }
        if (core_pool_enabled())
                r = core_pool_sandbox_create(v->dir, v->size_mib << 20, &j->err);
        else {
                core_disk_limits lim = {.bytes = v->size_mib << 20, .inodes = v->inodes};
                r = core_disk_create(v->dir, &lim, &j->err);
        }
        if (r < 0) {
                /* Admission (libcore/diskimg.h, pool.h): a volume the state
                 * filesystem or the pool cannot back is sizeMiB to lower. */
                if (r == -ENOSPC && j->err && !j->err->field)
                        j->err->field = strdup("sizeMiB");
                goto fail;
        }
        /* The tree's root belongs to the sandbox user (uid and gid 1000 on
         * disk, idmapped in each session: volumes_tree), mode 0755, as
         * /workspace is; root inside may change that. */
        dfd = open(v->dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0 || fchownat(dfd, "upper", SANDBOX_UID, SANDBOX_GID, AT_SYMLINK_NOFOLLOW) < 0) {
                sb_error_set(&j->err, negative_errno(), NULL, NULL, "chown the volume's root: %m");
                goto fail;
        }
        /* A kill -9 here leaves a directory without record: removed at the
         * next start (volumes_load). */
        core_fault("volume.create");
        if ((r = volume_save(v, &j->err)) < 0)
                goto fail;
        return;
fail:
        volume_remove_files(v->dir);
}

static void create_done(void *userdata) {
        create_job *j = userdata;
        volume *v = j->v;
        if (j->err) {
                sb_error_prefix(&j->err, "create volume '%s'", v->name);
                volume_unlink(j->m, v);
                volume_free(v);
                rpc_reply_sb_error(j->req, j->err);
        } else {
                v->creating = false;
                log_info("volume '%s' created (%" PRIu64 " MiB)", v->name, v->size_mib);
                rpc_reply(j->req, volume_json(j->m, j->req, v));
        }
        sb_error_free(j->err);
        free(j);
}

static int parse_create_params(manager *m, rpc_request *req, volume *v, sb_error **ret_err) {
        const char *name = NULL;
        int64_t size = 0, inodes = 0;
        cJSON *tags = NULL;
        int r;
        if ((r = rpc_param_string(req, "name", true, &name, ret_err)) < 0)
                return r;
        if (!core_name_is_valid(name))
                return sb_error_set(ret_err, -EINVAL, NULL, "name",
                                    "name: '%s' is not valid; use 1-63 of a-z, 0-9 and '-', starting with a letter or digit",
                                    TEXT_Q(name));
        if ((r = rpc_param_int(req, "sizeMiB", true, (int64_t)(CORE_DISK_MIN_BYTES >> 20), (int64_t)VOLUME_MIB_MAX,
                               &size, ret_err)) < 0 ||
            (r = rpc_param_int(req, "inodes", false, 1024, (int64_t)VOLUME_INODES_MAX, &inodes, ret_err)) < 0 ||
            (r = rpc_param_object(req, "tags", false, &tags, ret_err)) < 0)
                return r;
        if (tags && (r = limit_check_map(tags, "tags", &limit_tags, ret_err)) < 0)
                return r;
        /* Checked here, not by mkfs: a count the size cannot hold is the
         * caller's to fix, named, and leaves nothing (docs/API.md
         * "volume.create"). */
        if (inodes && (uint64_t)inodes > ((uint64_t)size << 20) / CORE_DISK_BYTES_PER_INODE_MIN)
                return sb_error_set(ret_err, -EINVAL, NULL, "inodes",
                                    "inodes: %" PRId64 " do not fit in sizeMiB %" PRId64 " (at most one per %llu "
                                    "bytes: %" PRIu64 "); lower inodes or raise sizeMiB",
                                    inodes, size, (unsigned long long)CORE_DISK_BYTES_PER_INODE_MIN,
                                    (uint64_t)(((uint64_t)size << 20) / CORE_DISK_BYTES_PER_INODE_MIN));
        if (core_pool_enabled() && inodes)
                return sb_error_set(ret_err, -EINVAL, NULL, "inodes",
                                    "inodes: the storage pool (Btrfs) has no inode bound per volume; leave inodes out");
        v->size_mib = (uint64_t)size;
        v->inodes = (uint64_t)inodes;
        v->tags = tags ? cJSON_Duplicate(tags, 1) : cJSON_CreateObject();
        v->name = strdup(name);
        if (!v->name || !v->tags || asprintf(&v->dir, "%s/%s", m->volumes_dir, name) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        return 0;
}

static void method_create(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        volume *v = calloc(1, sizeof(*v));
        if (!v) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        if (parse_create_params(m, req, v, &err) < 0) {
                volume_free(v);
                rpc_reply_sb_error(req, err);
                return;
        }
        if (manager_find_volume(m, v->name)) {
                rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                "volume '%s' already exists; pick another name", v->name);
                volume_free(v);
                return;
        }
        tenant t;
        tenant_of_conn(m->cfg, req->conn, &t);
        if (tenant_check_new_volume(m, req, v->size_mib, &err) < 0 || (!t.admin && !(v->owner = strdup(t.name)))) {
                volume_free(v);
                if (err)
                        rpc_reply_sb_error(req, err);
                else
                        rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        v->created_ms = core_now_ms();
        v->creating = true;
        create_job *j = calloc(1, sizeof(*j));
        if (!j) {
                volume_free(v);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        *j = (create_job){.m = m, .req = req, .v = v};
        /* Registered while its filesystem is made, so a second create of
         * the name answers already_exists (and a mount not_found). */
        v->next = m->volumes;
        m->volumes = v;
        int r = worker_submit(create_work, create_done, j);
        if (r < 0) {
                volume_unlink(m, v);
                volume_free(v);
                free(j);
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", NULL, "create volume: no worker: %s", strerror(-r));
        }
}

/* ---- get, list ---------------------------------------------------------------- */

/* The volume named by params.name that the client may see, or NULL after
 * answering not_found (another tenant's answered as a missing one). */
static volume *lookup(rpc_request *req, manager *m) {
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        if (rpc_param_string(req, "name", true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        volume *v = manager_find_volume(m, name);
        if (!v || v->creating || !tenant_req_owns(m, req, v->owner)) {
                reply_not_found(req, "volume", name);
                return NULL;
        }
        return v;
}

static void method_get(rpc_request *req, void *userdata) {
        manager *m = userdata;
        volume *v = lookup(req, m);
        if (v)
                rpc_reply(req, volume_json(m, req, v));
}

static int cmp_volumes(const void *a, const void *b) {
        return strcmp((*(volume *const *)a)->name, (*(volume *const *)b)->name);
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
        size_t n = volumes_count(m);
        _cleanup_free_ volume **vs = calloc(n + 1, sizeof(*vs));
        if (!vs) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        n = 0;
        for (volume *v = m->volumes; v; v = v->next) {
                if (v->creating || (prefix && strncmp(v->name, prefix, strlen(prefix))) ||
                    (cursor && strcmp(v->name, cursor) <= 0) || !tenant_req_owns(m, req, v->owner))
                        continue;
                bool match = true;
                cJSON *t;
                cJSON_ArrayForEach(t, tags) {
                        const char *have = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v->tags, t->string));
                        match = match && have && cJSON_IsString(t) && streq(have, t->valuestring);
                }
                if (match)
                        vs[n++] = v;
        }
        qsort(vs, n, sizeof(*vs), cmp_volumes);
        cJSON *res = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(res, "volumes");
        size_t shown = n < (size_t)limit ? n : (size_t)limit;
        for (size_t i = 0; i < shown; i++)
                cJSON_AddItemToArray(arr, volume_json(m, req, vs[i]));
        if (shown < n)
                cJSON_AddStringToObject(res, "nextCursor", vs[shown - 1]->name);
        else
                cJSON_AddNullToObject(res, "nextCursor");
        rpc_reply(req, res);
}

/* ---- volume.delete ------------------------------------------------------------ */

typedef struct delete_job {
        manager *m;
        rpc_request *req;
        volume *v;
} delete_job;

static void delete_work(void *userdata) {
        delete_job *j = userdata;
        /* The record first (durably): from here the volume is gone for any
         * next daemon, which removes the rest (volumes_load). */
        _cleanup_free_ char *rec = NULL;
        if (asprintf(&rec, "%s/volume.json", j->v->dir) >= 0 && unlink(rec) < 0 && errno != ENOENT)
                log_warning_errno(-errno, "remove %s: %m", rec);
        _cleanup_close_ int dfd = open(j->v->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd >= 0)
                (void)fsync(dfd);
        core_fault("volume.delete");
        volume_remove_files(j->v->dir);
}

static void method_delete(rpc_request *req, void *userdata);

static void delete_done(void *userdata) {
        delete_job *j = userdata;
        log_info("volume '%s' deleted", j->v->name);
        volume_unlink(j->m, j->v);
        volume_free(j->v);
        rpc_reply(j->req, cJSON_CreateObject());
        free(j);
}

/* The held delete (method_delete): the volume stayed marked deleting
 * meanwhile, so no new sandbox mounted it; judged again now. */
static void delete_again(rpc_request *req, manager *m) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req->params, "name"));
        volume *v = name ? manager_find_volume(m, name) : NULL;
        if (v)
                v->deleting = false;
        method_delete(req, m);
}

static void method_delete(rpc_request *req, void *userdata) {
        manager *m = userdata;
        volume *v = lookup(req, m);
        if (!v)
                return;
        if (v->deleting) {
                reply_not_found(req, "volume", v->name);
                return;
        }
        unsigned all = 0;
        cJSON *users = mounted_by(m, req, v->name, &all);
        if (all) {
                _cleanup_free_ char *list = cJSON_PrintUnformatted(users);
                unsigned hidden = all - (unsigned)cJSON_GetArraySize(users);
                cJSON *data = cJSON_CreateObject();
                cJSON_AddItemToObject(data, "sandboxes", users);
                char more[64] = "";
                if (hidden)
                        snprintf(more, sizeof(more), " and %u more", hidden);
                rpc_reply_error_data(req, "in_use", data,
                                     "volume '%s' is mounted by sandbox(es) %s%s; delete them or create them without "
                                     "it first", v->name, list ? list : "?", more);
                return;
        }
        cJSON_Delete(users);
        /* A deleted sandbox that mounted it may still hold its clones while
         * its session is torn down after the delete answered: this delete
         * runs again once that is done (the volume is then free). */
        if (session_teardown_hold(m, v->name, delete_again, req)) {
                v->deleting = true; /* as for the delete itself: nothing new mounts it meanwhile */
                return;
        }
        delete_job *j = calloc(1, sizeof(*j));
        if (!j) {
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        *j = (delete_job){.m = m, .req = req, .v = v};
        v->deleting = true;
        int r = worker_submit(delete_work, delete_done, j);
        if (r < 0) {
                v->deleting = false;
                free(j);
                rpc_reply_error(req, RPC_APP_ERROR, "unavailable", NULL, "delete volume: no worker: %s", strerror(-r));
        }
}

void register_volume_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "volume.create", method_create, m);
        rpc_server_add_method(s, "volume.get", method_get, m);
        rpc_server_add_method(s, "volume.list", method_list, m);
        rpc_server_add_method(s, "volume.delete", method_delete, m);
}
