/* Each sandbox's bounded writable layer (libcore/diskimg.h): the
 * resources.diskMiB parameter, and the points of the sandbox lifecycle
 * where its image is made, mounted and unmounted. */
#include "libcore/diskimg.h"
#include "libcore/log.h"
#include "sandboxd/internal.h"
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

int sandbox_disk_create(const manager *m, const sandbox *sb, sb_error **ret_err) {
        if (!sb->disk_mib)
                return 0;
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
                ret->committed_bytes += sb->disk_mib << 20;
                ret->disks++;
                if (core_disk_backed(sb->dir) == 0 && core_disk_present(sb->dir))
                        ret->unbacked++;
        }
        struct statvfs st;
        if (statvfs(m->cfg->state_dir, &st) == 0) {
                ret->free_bytes = (uint64_t)st.f_bavail * st.f_frsize;
                ret->total_bytes = (uint64_t)st.f_blocks * st.f_frsize;
        }
}
