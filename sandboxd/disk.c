/* Each sandbox's bounded writable layer (libcore/diskimg.h): the
 * resources.diskMiB parameter, and the points of the sandbox lifecycle
 * where its image is made, mounted and unmounted. */
#include "libcore/diskimg.h"
#include "libcore/log.h"
#include "libcore/pool.h"
#include "sandboxd/internal.h"
#include <dirent.h>
#include <string.h>
#include <sys/statvfs.h>

/* Largest resources.diskMiB: 16 TiB (the image is sparse; ext4 with 4 KiB
 * blocks goes far beyond). */
#define DISK_MIB_MAX (16ull * 1024 * 1024)

int sandbox_parse_disk(const daemon_config *cfg, const cJSON *res, uint64_t *ret_mib, sb_error **ret_err) {
        const cJSON *v = cJSON_GetObjectItem(res, "diskMiB");
        uint64_t lo = CORE_DISK_MIN_BYTES >> 20;
        if (!v) {
                if (cfg->disk_mib && cfg->disk_mib < lo)
                        return sb_error_set(ret_err, -EINVAL, NULL, "resources.diskMiB",
                                            "daemon.json diskMiB: must be 0 (unbounded) or at least %llu",
                                            (unsigned long long)lo);
                *ret_mib = cfg->disk_mib;
                return 0;
        }
        if (!cJSON_IsNumber(v) || v->valuedouble < (double)lo || v->valuedouble > (double)DISK_MIB_MAX ||
            v->valuedouble != (double)(uint64_t)v->valuedouble)
                return sb_error_set(ret_err, -EINVAL, NULL, "resources.diskMiB",
                                    "resources.diskMiB: must be a whole number from %llu to %llu",
                                    (unsigned long long)lo, (unsigned long long)DISK_MIB_MAX);
        *ret_mib = (uint64_t)v->valuedouble;
        return 0;
}

/* Without storage.pool, a state directory whose sandboxes have their
 * disks in a pool is refused whole: started, the daemon would show them
 * without their files, and its start-up removals would orphan their
 * subvolumes. */
static int refuse_pool_sandboxes(manager *m, sb_error **ret_err) {
        _cleanup_free_ char *vdir = NULL;
        if (asprintf(&vdir, "%s/volumes", m->cfg->state_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        _cleanup_closedir_ DIR *vd = opendir(vdir);
        for (struct dirent *de; vd && (de = readdir(vd));) {
                _cleanup_free_ char *dir = NULL;
                if (de->d_name[0] == '.' || asprintf(&dir, "%s/%s", vdir, de->d_name) < 0 || !core_pool_present(dir))
                        continue;
                return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool",
                                    "daemon.json: storage.pool: volume '%s' (%s) is in the storage pool; set "
                                    "storage.pool as it was (the pool's files are kept)", de->d_name, dir);
        }
        _cleanup_closedir_ DIR *d = opendir(m->sandboxes_dir);
        for (struct dirent *de; d && (de = readdir(d));) {
                _cleanup_free_ char *dir = NULL;
                if (streq(de->d_name, ".") || streq(de->d_name, "..") ||
                    asprintf(&dir, "%s/%s", m->sandboxes_dir, de->d_name) < 0 || !core_pool_present(dir))
                        continue;
                return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool",
                                    "daemon.json: storage.pool: the disk of sandbox '%s' (%s) is in the storage "
                                    "pool; set storage.pool as it was (the pool's files are kept)",
                                    de->d_name, dir);
        }
        return 0;
}

int storage_pool_init(manager *m, sb_error **ret_err) {
        const cJSON *pool = cJSON_GetObjectItemCaseSensitive(m->cfg->storage, "pool");
        if (!pool)
                return refuse_pool_sandboxes(m, ret_err);
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(pool, "sizeMiB");
        const char *dev = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pool, "device"));
        _cleanup_free_ char *mnt = NULL, *file = NULL;
        if (asprintf(&mnt, "%s/pool", m->cfg->state_dir) < 0 ||
            (!dev && asprintf(&file, "%s/pool.img", m->cfg->state_dir) < 0))
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        uint64_t bytes = cJSON_IsNumber(size) ? (uint64_t)size->valuedouble << 20 : 0;
        int r = core_pool_init(mnt, file, dev, bytes, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "daemon.json storage.pool");
        core_pool_stats st;
        if (core_pool_stats_get(&st) >= 0)
                log_info("storage pool at %s: %" PRIu64 " MiB, %" PRIu64 " MiB committed", mnt, st.size >> 20,
                         st.committed >> 20);
        return 0;
}

void storage_pool_sweep(manager *m) {
        if (!core_pool_enabled())
                return;
        /* Every sandbox directory that names a subvolume keeps it, loaded
         * or not (a persistent one that failed to load keeps its files). */
        size_t n = 0, cap = 16;
        char **keep = calloc(cap, sizeof(char *));
        _cleanup_closedir_ DIR *d = opendir(m->sandboxes_dir);
        for (struct dirent *de; keep && d && (de = readdir(d));) {
                _cleanup_free_ char *dir = NULL;
                char id[33];
                if (streq(de->d_name, ".") || streq(de->d_name, "..") ||
                    asprintf(&dir, "%s/%s", m->sandboxes_dir, de->d_name) < 0 || core_pool_sandbox_id(dir, id) < 0)
                        continue;
                if (n + 1 >= cap) {
                        char **k = realloc(keep, (cap *= 2) * sizeof(char *));
                        if (!k)
                                break;
                        keep = k;
                }
                keep[n++] = strdup(id);
        }
        /* And every volume's (volume.c). */
        for (const volume *v = m->volumes; keep && v; v = v->next) {
                char id[33];
                if (core_pool_sandbox_id(v->dir, id) < 0)
                        continue;
                if (n + 1 >= cap) {
                        char **k = realloc(keep, (cap *= 2) * sizeof(char *));
                        if (!k)
                                break;
                        keep = k;
                }
                keep[n++] = strdup(id);
        }
        if (!keep) {
                log_warning("storage pool: out of memory; leftovers of a crash are kept until the next start");
                return;
        }
        int gone = core_pool_sweep(keep, n, layer_in_use_cb, m);
        if (gone > 0)
                log_info("storage pool: removed %d subvolume(s) nothing refers to (left by a crash)", gone);
        for (size_t i = 0; i < n; i++)
                free(keep[i]);
        free(keep);
}

int sandbox_disk_create(const manager *m, const sandbox *sb, sb_error **ret_err) {
        if (!sb->disk_mib)
                return 0;
        if (core_pool_enabled()) {
                int r = core_pool_sandbox_create(sb->dir, sb->disk_mib << 20, ret_err);
                if (r == -ENOSPC && ret_err && *ret_err && !(*ret_err)->field)
                        (*ret_err)->field = strdup("resources.diskMiB");
                return r < 0 ? sb_error_prefix(ret_err, "sandbox disk (resources.diskMiB %llu)",
                                               (unsigned long long)sb->disk_mib)
                             : 0;
        }
        core_disk_limits lim = {.bytes = sb->disk_mib << 20, .inodes = m->cfg->disk_inodes};
        int r = core_disk_create(sb->dir, &lim, ret_err);
        /* Admission (libcore/diskimg.h): a disk the state filesystem
         * cannot back is the client's resources.diskMiB to lower. */
        if (r == -ENOSPC && ret_err && *ret_err && !(*ret_err)->field)
                (*ret_err)->field = strdup("resources.diskMiB");
        return r < 0 ? sb_error_prefix(ret_err, "sandbox disk (resources.diskMiB %llu)",
                                       (unsigned long long)sb->disk_mib)
                     : 0;
}

int sandbox_disk_attach(const char *dir, sb_error **ret_err) {
        int r = core_disk_attach(dir, ret_err);
        return r < 0 ? sb_error_prefix(ret_err, "sandbox disk") : r;
}

void sandbox_disk_detach(const char *dir) {
        int r = core_disk_detach(dir);
        if (r < 0)
                log_warning_errno(r, "unmount the disk image of %s: %m", dir);
}

void sandbox_disk_remove(const char *dir) {
        if (core_pool_present(dir)) {
                int r = core_pool_remove(dir);
                if (r < 0)
                        log_warning_errno(r, "remove the pool subvolume of %s: %m", dir);
                return;
        }
        sandbox_disk_detach(dir);
        _cleanup_free_ char *img = NULL;
        if (asprintf(&img, "%s/disk.img", dir) >= 0 && unlink(img) < 0 && errno != ENOENT)
                log_warning_errno(-errno, "remove %s: %m", img);
}

void sandbox_storage_stats(const manager *m, const char *owner, sandbox_storage *ret) {
        *ret = (sandbox_storage){0};
        for (const sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                if (!sb->disk_mib || (owner && (!sb->owner || strcmp(sb->owner, owner) != 0)))
                        continue;
                /* Pool disks are the pool's (core_pool_stats_get), which is
                 * itself held on the state filesystem whole. */
                if (core_pool_present(sb->dir)) {
                        ret->pool_disks++;
                        ret->pool_committed_bytes += (sb->disk_mib << 20) + CORE_POOL_RESERVE_BYTES;
                        continue;
                }
                ret->committed_bytes += sb->disk_mib << 20;
                ret->disks++;
                if (core_disk_backed(sb->dir) == 0 && core_disk_present(sb->dir))
                        ret->unbacked++;
        }
        volumes_storage_stats(m, owner, ret);
        struct statvfs st;
        if (statvfs(m->cfg->state_dir, &st) == 0) {
                ret->free_bytes = (uint64_t)st.f_bavail * st.f_frsize;
                ret->total_bytes = (uint64_t)st.f_blocks * st.f_frsize;
        }
}
