/* A bounded writable layer for each sandbox: a sparse ext4 image of its
 * own (<dir>/disk.img, made with mkfs.ext4 from e2fsprogs), attached to a
 * loop device and mounted at <dir>/disk, holding upper/ and work/, which
 * are bind-mounted onto <dir>/upper and <dir>/work. Everything else of the
 * daemon (state, config files, layers, snapshots) stays on the state
 * filesystem, so a sandbox that fills its image gets ENOSPC (or EDQUOT-like
 * inode exhaustion, also ENOSPC) alone and the daemon's own writes never
 * see it. The overlay takes upperdir and workdir from <dir>/disk (overlayfs
 * wants both on one mount); <dir>/upper is a bind of <dir>/disk/upper for
 * the rest of the daemon. Works on any host filesystem that holds regular files; project
 * quotas (XFS, ext4 with prjquota) are not used, since the common ext4
 * root has them off.
 *
 * A filesystem image must never be mounted through two loop devices at
 * once (two superblocks over one image corrupt it): attaching first looks
 * for a loop device already backed by the image (a restarted daemon whose
 * running sessions still hold it) and mounts that one.
 *
 * Blocking (mkfs, mount); for worker threads or start-up. */
#pragma once

#include <sys/types.h>
#include "libcore/error.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct core_disk_limits {
        uint64_t bytes;  /* size of the image; at least CORE_DISK_MIN_BYTES */
        uint64_t inodes; /* inodes of the filesystem; 0: one per 16 KiB (ext4's default ratio) */
} core_disk_limits;

#define CORE_DISK_MIN_BYTES (16ull << 20)
/* The most inodes an image of `bytes` takes: one per 4 KiB. ext4 keeps
 * at most one inode per block in each block group (its inode bitmap is one
 * block) and mke2fs(8) refuses an inode ratio below the block size; 4 KiB
 * is the largest block size mke2fs picks, so every count up to this one
 * formats. */
#define CORE_DISK_BYTES_PER_INODE_MIN 4096ull
/* Blocks reserved for root with CAP_SYS_RESOURCE (the daemon, not a
 * sandbox's root: it lacks that capability), so the daemon can still write
 * a full sandbox's /etc files at its next start (ext4 reserved blocks,
 * mke2fs(8) -m). Percent. */
#define CORE_DISK_RESERVE_PCT 1

/* The image's resuid and resgid (ext4(5) mount options): the reserve is
 * usable with CAP_SYS_RESOURCE in the initial user namespace (the daemon's
 * own writes) or by this uid or gid, which nothing that writes the image
 * holds: not host root (ext4's default resuid 0 would otherwise hand the
 * reserve to the overlay of a sandbox without a user namespace, whose
 * creator is host root), and no sandbox range (those start at or above
 * CORE_USERNS_SIZE). 65533 is in Debian's reserved 65000-65533 (Debian
 * Policy 9.2.2), allocated to no account. */
#define CORE_DISK_RESERVE_ID 65533u

/* Storage model (docs/SECURITY.md "Disk space"): every image is given all
 * its blocks on the state filesystem when it is made (fallocate(2), not
 * sparse), so the sum of the disks never promises more than the state
 * filesystem holds: a create whose disk cannot be backed is refused
 * (-ENOSPC, reason "limit_exceeded"), a sandbox that fills its disk gets
 * ENOSPC from its own ext4, and a full state filesystem (layers,
 * snapshots, exports, logs) never fails a write inside any image. */

/* Makes <dir>/disk.img (must not exist) of lim->bytes, fully allocated, formats it,
 * mounts it at <dir>/disk and creates upper/ (0755) and work/ (0700) in
 * it, upper/ bound onto <dir>/upper (created, must be missing or empty). `dir` is
 * a directory only the daemon writes. On failure everything made is
 * undone. Returns 0 or a negative errno with *ret_err saying what failed
 * (-ENOENT when mkfs.ext4 is missing: "install e2fsprogs"). */
int core_disk_create(const char *dir, const core_disk_limits *lim, sb_error **ret_err);

/* Turns on templates: from then on core_disk_create formats an image
 * once per (bytes, inodes) into `dir` (created 0700; a directory only the
 * daemon writes, on the filesystem of the images so copies can share
 * extents) and gives each new image a sparse copy of it with a UUID of its
 * own, instead of running mkfs.ext4 per image. Deletes what an interrupted
 * format left in `dir`. Call once at start, before any create. Returns 0
 * or a negative errno with *ret_err. */
int core_disk_templates_init(const char *dir, sb_error **ret_err);

/* Turns on the spare disk: from then on one image of lim (the daemon's
 * default disk) is kept ready in `dir` (created 0700, a directory only the
 * daemon writes, on the filesystem of the sandboxes' directories so an
 * image is renamed into one) by a thread of its own: made from the
 * template, fully backed, attached to a loop device and mounted as a
 * detached mount with upper/, work/ and the reserved inodes made, which
 * core_disk_create of the same size renames into its directory and
 * attaches (move_mount(2)) instead of making one; the next is made at
 * core_disk_spare_refill. A spare is made only
 * while the state filesystem keeps four times its size free besides it.
 * Deletes every file in `dir` first (a crashed daemon's spare: its mount
 * and loop device went with the process). Call once at start, after
 * core_disk_templates_init. Returns 0 or a negative errno with *ret_err. */
int core_disk_spare_init(const char *dir, const core_disk_limits *lim, sb_error **ret_err);

/* Makes the next spare when a create took the last one (or its making
 * failed): called once that create is done, so that the spare's kernel work
 * (the loop device, ext4's mount) does not compete with the rest of it.
 * No-op without a spare thread. */
void core_disk_spare_refill(void);

/* Stops the spare's thread and removes the spare (its mount, loop device
 * and image). No-op when it was never started. */
void core_disk_spare_stop(void);

/* Gives the image of `dir` every block it lacks (an image made sparse by
 * an earlier version of sandboxd: migration at attach). Returns 1 when the
 * image is (now) fully backed, 0 when `dir` has no image, or a negative
 * errno with *ret_err (-ENOSPC, reason "limit_exceeded": the state
 * filesystem cannot hold the rest; the image and its files are untouched
 * and still usable, only not protected from a full state filesystem). */
int core_disk_back(const char *dir, sb_error **ret_err);

/* 1 when the image of `dir` has blocks for its whole size, 0 when it is
 * sparse or missing, or a negative errno. */
int core_disk_backed(const char *dir);

/* Makes sure the image of `dir` is mounted with its binds (daemon start,
 * before a sandbox's files are used). Returns 1 when it is (now), 0 when
 * `dir` has no image (a sandbox made without a disk bound), or a negative
 * errno with *ret_err. */
int core_disk_attach(const char *dir, sb_error **ret_err);

/* Unmounts the binds and the image of `dir` (lazily: a session that still
 * holds them keeps them until it ends; the loop device detaches itself
 * after the last user, LO_FLAGS_AUTOCLEAR). Missing mounts are fine.
 * Returns 0 or the first negative errno after trying all. */
int core_disk_detach(const char *dir);

/* The directory holding the overlay's upper/ and work/: <dir>/disk for a
 * sandbox with an image, else `dir`. malloc'd (caller frees), NULL when out
 * of memory. */
char *core_disk_layer_dir(const char *dir);

/* Inodes held back for the daemon (ext4 reserves blocks for root but no
 * inodes): core_disk_release frees them while the sandbox is stopped,
 * before the daemon writes into its upper/ at a start; core_disk_rearm
 * takes them again before anything of the sandbox runs. No-ops without an
 * image. rearm returns 0 or a negative errno (best effort: a full disk may
 * leave fewer). */
void core_disk_release(const char *dir);
int core_disk_rearm(const char *dir);

/* The calling thread's supplementary groups, kept by
 * core_disk_reserve_enter for core_disk_reserve_leave. */
typedef struct core_disk_groups {
        int n; /* -1: nothing to restore */
        gid_t gids[64];
} core_disk_groups;

/* Gives the calling thread alone the images' root reserve for the daemon's
 * own writes into a full sandbox at its start (the /etc files, the
 * reserved inodes): adds CORE_DISK_RESERVE_ID, the images' resgid, to its
 * supplementary groups (ext4's reserve test, ext4_has_free_clusters, is
 * CAP_SYS_RESOURCE, fsuid = resuid, or resgid among the groups), which
 * works where the daemon runs without CAP_SYS_RESOURCE too. The raw
 * setgroups(2) syscall changes one thread's credentials; glibc's wrapper
 * would change every thread's (nptl setxid), so it is not used. The
 * groups never reach a new file (its group is the fsgid). `saved` gets
 * the previous groups. Returns 0 or a negative errno (then nothing
 * changed). */
int core_disk_reserve_enter(core_disk_groups *saved);

/* Restores the groups core_disk_reserve_enter saved (no-op for n < 0). */
void core_disk_reserve_leave(const core_disk_groups *saved);

/* Whether `dir` has an image (<dir>/disk.img exists). */
bool core_disk_present(const char *dir);

/* The loop device backed by the file open as image_fd: the one already
 * bound to it (same device and inode; a file must never be behind two
 * loop devices, whose two superblocks would corrupt it), else a new one
 * with LO_FLAGS_AUTOCLEAR. "/dev/loopN" in dev (size bytes); *ret_fd gets
 * the new device's fd (keep it open until the mount holds the device) or
 * -EBADF for one found bound. Serialised with the images' attaches.
 * Returns 0 or a negative errno (-EBUSY: no free device). */
int core_disk_loop(int image_fd, char *dev, size_t size, int *ret_fd);
