/* The storage pool (opt-in, daemon.json storage.pool; docs/SECURITY.md
 * "Disk space"): one Btrfs filesystem the daemon owns, on a fully
 * allocated file under the state directory or on a block device, mounted
 * at <stateDir>/pool (0700). Each pool-backed sandbox's writable layer is
 * a subvolume, <pool>/sandboxes/<id>, holding upper/ and work/ (overlayfs
 * renames from work/ into upper/, and Btrfs refuses a rename between two
 * subvolumes with EXDEV, so both are in the one subvolume), with a qgroup
 * limit on its referenced bytes of resources.diskMiB. A capture (fork,
 * snapshot) is a read-only snapshot of that subvolume, <pool>/layers/<id>,
 * whose upper/ is a lower layer of the fork or restore: O(1) in the bytes
 * written.
 *
 * The sandbox directory says which storage it has: <dir>/pool.id (the
 * subvolume's id and its size) marks a pool sandbox; <dir>/upper is a
 * bind mount of the subvolume's upper/ for the rest of the daemon.
 *
 * No overcommit: a subvolume or snapshot is made only while
 *   committed = sum over the pool's qgroups of (limited: limit + reserve,
 *               else referenced bytes) + a metadata margin
 * stays within the pool's size. Physical use is at most the sum of the
 * referenced bytes (every extent is referenced by some subvolume; a shared
 * one is counted once per subvolume), and a limited qgroup never
 * references more than its limit, so the pool cannot fill: a sandbox that
 * writes past its diskMiB gets EDQUOT alone. A deleted subvolume keeps its
 * qgroup (and is counted) until the cleaner has freed its extents; the
 * kernel then removes the qgroup itself.
 *
 * Blocking (mkfs, mount, transaction commits); for worker threads or
 * start-up. */
#pragma once

#include "libcore/error.h"
#include <stdbool.h>
#include <stdint.h>

/* The smallest pool accepted (storage.pool.sizeMiB), bytes. */
#define CORE_POOL_MIN_BYTES (256ull << 20)
/* Bytes above its diskMiB each pool sandbox may use while the daemon
 * writes its /etc files at a start (core_pool_release): counted as
 * committed for every limited qgroup. */
#define CORE_POOL_RESERVE_BYTES (4ull << 20)

/* Makes the pool ready: with `file`, creates it fully allocated
 * (fallocate, never sparse) of `bytes` when missing (an existing one must
 * have that size); with `device` (a block device), uses it whole.
 * Formats it (mkfs.btrfs --mixed, label "sandboxd-pool") only when it is
 * blank (a file just made, or a device whose first MiB is zeros); mounts
 * it at `mnt` (created 0700) unless mounted; turns quotas on; makes
 * sandboxes/ and layers/. A device that holds anything else is refused.
 * Call once at start. Returns 0 or a negative errno with *ret_err (field
 * "storage.pool"). */
int core_pool_init(const char *mnt, const char *file, const char *device, uint64_t bytes, sb_error **ret_err);

/* Whether core_pool_init succeeded in this process. */
bool core_pool_enabled(void);

/* The pool's numbers, bytes: size of the file or device, what admission
 * may commit (size less the metadata margin), committed (see above), and
 * the filesystem's own used bytes (statfs). Returns 0 or a negative errno
 * (-ENODEV: no pool). */
typedef struct core_pool_stats {
        uint64_t size, capacity, committed, used;
        unsigned subvolumes, layers;
} core_pool_stats;
int core_pool_stats_get(core_pool_stats *ret);

/* Gives the sandbox directory `dir` a writable layer in the pool of
 * `bytes` (its diskMiB): writes <dir>/pool.id, makes the subvolume with
 * its limit, upper/ (0755) and work/ (0700) in it, and binds upper/ onto
 * <dir>/upper. Refused with -ENOSPC (reason "limit_exceeded") when the
 * pool cannot back it. On failure what was made is removed. */
int core_pool_sandbox_create(const char *dir, uint64_t bytes, sb_error **ret_err);

/* Whether `dir` is a pool sandbox (<dir>/pool.id exists). */
bool core_pool_present(const char *dir);

/* The directory holding the overlay's upper/ and work/ of the pool
 * sandbox `dir` (its subvolume); malloc'd, NULL when out of memory, not a
 * pool sandbox, or no pool. */
char *core_pool_layer_dir(const char *dir);

/* Binds the subvolume's upper/ onto <dir>/upper unless bound. Returns 0 or
 * a negative errno with *ret_err (-ENODEV: no pool configured; -ENOENT:
 * its subvolume is missing). */
int core_pool_attach(const char *dir, sb_error **ret_err);

/* Unmounts <dir>/upper (lazily). Returns 0 or a negative errno. */
int core_pool_detach(const char *dir);

/* Unmounts and deletes the subvolume of `dir`, then <dir>/pool.id.
 * Missing pieces are fine. Every subvolume deletion here starts a
 * transaction commit without waiting for it (BTRFS_IOC_START_SYNC), so the
 * cleaner frees the subvolume within milliseconds, not at the next
 * periodic commit. Returns 0 or the first negative errno. */
int core_pool_remove(const char *dir);

/* While the sandbox is stopped the daemon writes its /etc files: release
 * raises its limit by CORE_POOL_RESERVE_BYTES, rearm sets it back. */
void core_pool_release(const char *dir);
int core_pool_rearm(const char *dir);

/* A read-only snapshot of the subvolume of `dir` as layer `id` (32 hex
 * digits), <pool>/layers/<id>, without the qgroup limit Btrfs copies to
 * it from its source (a layer is counted by the bytes it references). The
 * caller writes out a running sandbox's dirty data (core_pool_flush),
 * freezes it around this call, then (thawed: it may wait for the cleaner)
 * calls core_pool_capture_admit. Returns 0 or a negative errno with
 * *ret_err (the layer is deleted again on failure). */
int core_pool_capture(const char *dir, const char *id, sb_error **ret_err);

/* Writes out what is dirty in the pool (syncfs(2) on the subvolume of pool
 * sandbox `dir`), so that a core_pool_capture right after has only what
 * was written meanwhile to write: a snapshot writes the source's dirty
 * data first (fs/btrfs/ioctl.c btrfs_start_delalloc_snapshot), which,
 * with the source frozen, froze it for as long as its dirty pages took to
 * reach the disk (a second and more after a write of 600 MiB). Called
 * before the freeze, while the sandbox runs. Returns 0 or a negative
 * errno. */
int core_pool_flush(const char *dir);

/* Admission of the layer core_pool_capture made: refused with -ENOSPC
 * (reason "limit_exceeded", the layer deleted again) when its referenced
 * bytes do not fit beside what is committed. */
int core_pool_capture_admit(const char *id, sb_error **ret_err);

/* The bytes the subvolume of pool sandbox `dir` references now (its
 * qgroup's, as of the last commit), in *ret. 0 or a negative errno. */
int core_pool_used(const char *dir, uint64_t *ret);

/* <pool>/layers/<id> when the pool has that layer, else NULL (malloc'd).
 * Its upper/ is the overlay's lower directory. */
char *core_pool_layer_home(const char *id);

/* Deletes the layer subvolume at `path` (a core_pool_layer_home). Returns
 * 0, -ENOTTY when `path` is not a pool layer, or a negative errno. */
int core_pool_layer_remove(const char *path);

/* Start-up sweep of what a crash left: deletes every subvolume in
 * sandboxes/ whose id is not in keep (n ids) and every layer for which
 * layer_kept(id, userdata) is false. Returns how many went. */
int core_pool_sweep(char *const *keep, size_t n, bool (*layer_kept)(const char *id, void *userdata),
                    void *userdata);

/* The pool id in <dir>/pool.id (33 bytes with the NUL); 0 or a negative
 * errno. */
int core_pool_sandbox_id(const char *dir, char ret_id[33]);
