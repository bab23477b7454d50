/* The Btrfs storage pool (pool.h): the pool's file, device and mount,
 * each pool sandbox's subvolume with its qgroup limit, read-only snapshot
 * layers, and admission. Runs as root in the daemon's mount namespace;
 * the pool's mount point and every directory named here are the daemon's
 * own (the sandboxes write inside their subvolume's upper/ only, through
 * the overlay). Subvolumes are made and deleted with the ioctls of
 * linux/btrfs.h (btrfs(5)), never by running `btrfs`; only the format is
 * mkfs.btrfs's. */
#include "libcore/pool.h"
#include "libcore/diskimg.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARKER "pool.id"
#define LABEL "sandboxd-pool"
/* Where mkfs.btrfs is on Debian (btrfs-progs) and on merged-/usr hosts. */
static const char *const mkfs_paths[] = {"/usr/sbin/mkfs.btrfs", "/sbin/mkfs.btrfs"};
/* The btrfs superblock (fs/btrfs/accessors.h, struct btrfs_super_block):
 * at 64 KiB, magic at byte 64, label at byte 299. */
#define SB_OFFSET 65536
#define SB_MAGIC_OFF 64
#define SB_LABEL_OFF 299
#define BLANK_BYTES (1u << 20)

/* Set once by core_pool_init (start-up, before any worker runs). */
static char *pool_mnt;
static char pool_fsid[40];
static uint64_t pool_size;
/* Admission and the subvolume or snapshot it admits happen under this
 * lock, so two creates never both take the last free bytes. */
static pthread_mutex_t admit_lock = PTHREAD_MUTEX_INITIALIZER;

static char *join(const char *a, const char *b) {
        char *p = NULL;
        return asprintf(&p, "%s/%s", a, b) < 0 ? NULL : p;
}

bool core_pool_enabled(void) {
        return pool_mnt != NULL;
}

/* Bytes the filesystem needs beyond what the qgroups count: the extent,
 * checksum, free-space, root and quota trees, the system chunk and
 * Btrfs's global block reserve (mixed block groups, so data and metadata
 * share one free space and no chunk type runs out alone). */
static uint64_t margin(uint64_t size) {
        return (64ull << 20) + size / 32;
}

static int spawn_mkfs(const char *dev, sb_error **ret_err) {
        const char *mkfs = NULL;
        for (size_t i = 0; i < ELEMENTSOF(mkfs_paths) && !mkfs; i++)
                if (access(mkfs_paths[i], X_OK) == 0)
                        mkfs = mkfs_paths[i];
        if (!mkfs)
                return sb_error_set(ret_err, -ENOENT, NULL, "storage.pool",
                                    "storage pool: mkfs.btrfs not found (install btrfs-progs)");
        /* --mixed: data and metadata in the same block groups, so the
         * pool has one free space (no metadata ENOSPC while data chunks
         * hold free space, the classic Btrfs surprise on small
         * filesystems). -f: the device was checked blank just before. */
        char *argv[] = {(char *)"mkfs.btrfs", (char *)"-q", (char *)"-f", (char *)"--mixed",
                        (char *)"-L", (char *)LABEL, (char *)dev, NULL};
        int st, r = core_run_quiet(mkfs, argv, &st);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, "storage.pool", "storage pool: run %s: %s", mkfs,
                                    strerror(-r));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return sb_error_set(ret_err, -EIO, NULL, "storage.pool", "storage pool: %s %s failed (status %d)",
                                    mkfs, dev, st);
        return 0;
}

/* 1: a Btrfs pool of sandboxd's (magic and label); 0: blank (the first
 * MiB zeros); -EEXIST: something else. */
static int probe(int fd) {
        _cleanup_free_ uint8_t *buf = malloc(BLANK_BYTES);
        if (!buf)
                return -ENOMEM;
        ssize_t n = pread(fd, buf, BLANK_BYTES, 0);
        if (n < 0)
                return negative_errno();
        if ((size_t)n >= SB_OFFSET + SB_LABEL_OFF + sizeof(LABEL) &&
            memcmp(buf + SB_OFFSET + SB_MAGIC_OFF, "_BHRfS_M", 8) == 0)
                return memcmp(buf + SB_OFFSET + SB_LABEL_OFF, LABEL, sizeof(LABEL)) == 0 ? 1 : -EEXIST;
        for (ssize_t i = 0; i < n; i++)
                if (buf[i])
                        return -EEXIST;
        return 0;
}

/* The pool file: made fully allocated when missing (or left empty by an
 * interrupted start), else it must have `bytes`. Its fd in *ret_fd. */
static int open_file(const char *file, uint64_t bytes, int *ret_fd, sb_error **ret_err) {
        _cleanup_close_ int fd = open(file, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool", "storage pool: open %s: %m",
                                    file);
        if (!S_ISREG(st.st_mode))
                return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool", "storage pool: %s is not a file", file);
        if (st.st_size == 0 && fallocate(fd, 0, 0, (off_t)bytes) < 0) {
                int r = negative_errno();
                if (ftruncate(fd, 0) < 0)
                        log_debug("storage pool: truncate %s: %m", file);
                return sb_error_set(ret_err, r, r == -ENOSPC ? "limit_exceeded" : NULL, "storage.pool.sizeMiB",
                                    "storage pool: allocate %" PRIu64 " MiB for %s: %s (lower storage.pool.sizeMiB "
                                    "or free space on the state filesystem)",
                                    bytes >> 20, file, strerror(-r));
        }
        if (fstat(fd, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool", "storage pool: stat %s: %m",
                                    file);
        if ((uint64_t)st.st_size != bytes)
                return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool.sizeMiB",
                                    "storage.pool.sizeMiB: %" PRIu64 " differs from the existing pool %s (%" PRIu64
                                    " MiB); a pool is not resized: set sizeMiB to %" PRIu64,
                                    bytes >> 20, file, (uint64_t)st.st_size >> 20, (uint64_t)st.st_size >> 20);
        /* Fully backed: a sparse pool file would overcommit the state
         * filesystem like the sparse images of issue 21. */
        if ((uint64_t)st.st_blocks * 512 < bytes && fallocate(fd, 0, 0, (off_t)bytes) < 0)
                return sb_error_set(ret_err, negative_errno(), "limit_exceeded", "storage.pool.sizeMiB",
                                    "storage pool: %s is sparse and cannot be given all its blocks: %m", file);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

static int mounted(const char *mnt) {
        _cleanup_free_ char *parent = join(mnt, "..");
        struct stat a, b;
        if (!parent)
                return -ENOMEM;
        if (lstat(mnt, &b) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        if (lstat(parent, &a) < 0)
                return negative_errno();
        return a.st_dev != b.st_dev;
}

static int mount_pool(const char *mnt, const char *file, const char *device, uint64_t bytes,
                      sb_error **ret_err) {
        _cleanup_close_ int fd = -EBADF, lfd = -EBADF;
        char dev[300];
        int r;
        if (file) {
                if ((r = open_file(file, bytes, &fd, ret_err)) < 0)
                        return r;
                if ((r = core_disk_loop(fd, dev, sizeof(dev), &lfd)) < 0)
                        return sb_error_set(ret_err, r, NULL, "storage.pool",
                                            "storage pool: attach %s to a loop device: %s", file, strerror(-r));
                pool_size = bytes;
        } else {
                snprintf(dev, sizeof(dev), "%s", device);
                fd = open(dev, O_RDWR | O_CLOEXEC);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool.device",
                                            "storage.pool.device: open %s: %m", dev);
                if (!S_ISBLK(st.st_mode))
                        return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool.device",
                                            "storage.pool.device: %s is not a block device", dev);
                if (ioctl(fd, BLKGETSIZE64, &pool_size) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool.device",
                                            "storage.pool.device: size of %s: %m", dev);
        }
        if (pool_size < CORE_POOL_MIN_BYTES)
                return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool",
                                    "storage pool: %s has %" PRIu64 " MiB; at least %llu are needed", dev,
                                    pool_size >> 20, CORE_POOL_MIN_BYTES >> 20);
        if ((r = mounted(mnt)) > 0)
                return 0; /* a restart: the pool stayed mounted */
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, "storage.pool", "storage pool: stat %s: %s", mnt,
                                    strerror(-r));
        _cleanup_close_ int probe_fd = open(dev, O_RDONLY | O_CLOEXEC);
        r = probe_fd < 0 ? negative_errno() : probe(probe_fd);
        if (r == -EEXIST)
                return sb_error_set(ret_err, r, NULL, file ? "storage.pool" : "storage.pool.device",
                                    "storage pool: %s holds data that is not a sandboxd pool; it is never "
                                    "formatted over (wipe it, e.g. wipefs -a, to let sandboxd format it)",
                                    file ? file : dev);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, "storage.pool", "storage pool: read %s: %s", dev,
                                    strerror(-r));
        if (r == 0 && (r = spawn_mkfs(dev, ret_err)) < 0)
                return r;
        if (mkdir(mnt, 0700) < 0 && errno != EEXIST)
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool", "storage pool: mkdir %s: %m",
                                    mnt);
        if (mount(dev, mnt, "btrfs", MS_NOSUID | MS_NODEV | MS_NOATIME, NULL) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool",
                                    "storage pool: mount %s on %s: %m", dev, mnt);
        return 0;
}

int core_pool_init(const char *mnt, const char *file, const char *device, uint64_t bytes, sb_error **ret_err) {
        int r = mount_pool(mnt, file, device, bytes, ret_err);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct statfs sf;
        if (fd < 0 || fstatfs(fd, &sf) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool", "storage pool: open %s: %m",
                                    mnt);
        if (sf.f_type != BTRFS_SUPER_MAGIC)
                return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool",
                                    "storage pool: %s is mounted but is not Btrfs", mnt);
        struct btrfs_ioctl_fs_info_args fi = {0};
        if (ioctl(fd, BTRFS_IOC_FS_INFO, &fi) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool", "storage pool: fs info: %m");
        const uint8_t *u = fi.fsid;
        snprintf(pool_fsid, sizeof(pool_fsid),
                 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
                 u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        /* Quotas are what bounds each sandbox: on, or no pool. Enabling
         * them on a pool that has them is a no-op. */
        struct btrfs_ioctl_quota_ctl_args q = {.cmd = BTRFS_QUOTA_CTL_ENABLE};
        if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool",
                                    "storage pool: enable quotas on %s: %m", mnt);
        /* Limits are enforced from reservations whatever the accounting
         * says, but committed is read from the qgroups' numbers: an
         * inconsistent accounting (an older kernel's quick subtree drop)
         * is rescanned. */
        char path[128];
        snprintf(path, sizeof(path), "/sys/fs/btrfs/%s/qgroups/inconsistent", pool_fsid);
        _cleanup_free_ char *inc = NULL;
        if (core_read_file(path, 16, &inc, NULL) >= 0 && inc[0] == '1') {
                struct btrfs_ioctl_quota_rescan_args ra = {0};
                if (ioctl(fd, BTRFS_IOC_QUOTA_RESCAN, &ra) < 0 && errno != EINPROGRESS)
                        log_debug("storage pool: rescan quotas: %m");
                (void)ioctl(fd, BTRFS_IOC_QUOTA_RESCAN_WAIT);
        }
        if (fchmod(fd, 0700) < 0 || (mkdirat(fd, "sandboxes", 0700) < 0 && errno != EEXIST) ||
            (mkdirat(fd, "layers", 0700) < 0 && errno != EEXIST))
                return sb_error_set(ret_err, negative_errno(), NULL, "storage.pool",
                                    "storage pool: prepare %s: %m", mnt);
        free(pool_mnt);
        pool_mnt = strdup(mnt);
        return pool_mnt ? 0 : sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
}

static int read_u64(int dirfd, const char *name, uint64_t *ret) {
        char buf[32];
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return n < 0 ? negative_errno() : -EIO;
        buf[n] = '\0';
        *ret = strtoull(buf, NULL, 10);
        return 0;
}

/* The committed bytes of the pool (pool.h), from its qgroups in sysfs
 * (/sys/fs/btrfs/<fsid>/qgroups/0_<subvolume id>: level 0, one per
 * subvolume, the top level 0_5 included). */
static int committed(uint64_t *ret, unsigned *ret_limited) {
        char path[96];
        snprintf(path, sizeof(path), "/sys/fs/btrfs/%s/qgroups", pool_fsid);
        _cleanup_closedir_ DIR *d = opendir(path);
        if (!d)
                return negative_errno();
        uint64_t sum = 0;
        unsigned limited = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (strncmp(de->d_name, "0_", 2) != 0)
                        continue;
                _cleanup_close_ int q = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                uint64_t rfer = 0, max = 0;
                if (q < 0 || read_u64(q, "referenced", &rfer) < 0)
                        continue; /* removed meanwhile: its subvolume is gone */
                (void)read_u64(q, "max_referenced", &max);
                if (max && max != UINT64_MAX) {
                        sum += (max > rfer ? max : rfer) + CORE_POOL_RESERVE_BYTES;
                        limited++;
                } else
                        sum += rfer;
        }
        *ret = sum + margin(pool_size);
        if (ret_limited)
                *ret_limited = limited;
        return 0;
}

int core_pool_stats_get(core_pool_stats *ret) {
        if (!pool_mnt)
                return -ENODEV;
        core_pool_stats s = {.size = pool_size, .capacity = pool_size};
        int r = committed(&s.committed, &s.subvolumes);
        if (r < 0)
                return r;
        struct statfs sf;
        if (statfs(pool_mnt, &sf) == 0)
                s.used = (uint64_t)(sf.f_blocks - sf.f_bfree) * (uint64_t)sf.f_bsize;
        _cleanup_free_ char *layers = join(pool_mnt, "layers");
        _cleanup_closedir_ DIR *d = layers ? opendir(layers) : NULL;
        for (struct dirent *de; d && (de = readdir(d));)
                s.layers += de->d_name[0] != '.';
        *ret = s;
        return 0;
}

/* BTRFS_IOC_SUBVOL_SYNC_WAIT (Linux 6.13, fs/btrfs/ioctl.c
 * btrfs_ioctl_subvol_sync; not yet in the uapi headers this builds with):
 * mode WAIT_FOR_ONE waits until the cleaner has freed deleted subvolume
 * `subvolid`. */
struct pool_subvol_wait {
        __u64 subvolid;
        __u32 mode;
        __u32 count;
};
#define POOL_SUBVOL_SYNC_WAIT _IOW(BTRFS_IOCTL_MAGIC, 65, struct pool_subvol_wait)
#define POOL_SYNC_WAIT_FOR_ONE 0

/* Commits the pool's running transaction (BTRFS_IOC_START_SYNC, then
 * BTRFS_IOC_WAIT_SYNC for its transid, btrfs(5)): unlike BTRFS_IOC_SYNC
 * it does not first write out every sandbox's dirty pages, so it takes
 * milliseconds whatever the sandboxes are writing. Returns 0 or a
 * negative errno. */
static int commit(int fd) {
        uint64_t transid = 0;
        if (ioctl(fd, BTRFS_IOC_START_SYNC, &transid) < 0 || ioctl(fd, BTRFS_IOC_WAIT_SYNC, &transid) < 0)
                return negative_errno();
        return 0;
}

/* Deleted subvolumes are counted (their referenced bytes) until the
 * cleaner thread has freed them and the kernel has removed their qgroups,
 * which happens after a commit, in the background. When they are what
 * keeps a request out, it waits for them: a commit (which queues what was
 * deleted since the last one), then, for every qgroup of the pool,
 * BTRFS_IOC_SUBVOL_SYNC_WAIT for its subvolume (fs/btrfs/ioctl.c
 * btrfs_ioctl_subvol_sync: EEXIST at once for a live one, ENOENT for one
 * gone, else it waits, polling every second, until the cleaner has
 * dropped it; the one the cleaner is dropping right now included, which
 * the queue's count no longer shows), and a commit again (which removes
 * the qgroups of what was freed). Returns true when some qgroup had no
 * live subvolume and the waits worked (committed is worth reading
 * again); false when every qgroup is a live subvolume's, or on a kernel
 * before 6.13 (ENOTTY: refused as it stands). */
static bool reclaim_deleted(void) {
        _cleanup_close_ int fd = open(pool_mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0 || commit(fd) < 0)
                return false;
        char path[96];
        snprintf(path, sizeof(path), "/sys/fs/btrfs/%s/qgroups", pool_fsid);
        _cleanup_closedir_ DIR *d = opendir(path);
        bool dead = false;
        for (struct dirent *de; d && (de = readdir(d));) {
                char *end = NULL;
                if (strncmp(de->d_name, "0_", 2) != 0)
                        continue;
                uint64_t id = strtoull(de->d_name + 2, &end, 10);
                if (!end || *end || id < BTRFS_FIRST_FREE_OBJECTID)
                        continue; /* the top level, 0_5 */
                struct pool_subvol_wait w = {.subvolid = id, .mode = POOL_SYNC_WAIT_FOR_ONE};
                if (ioctl(fd, POOL_SUBVOL_SYNC_WAIT, &w) == 0 || errno == ENOENT)
                        dead = true;
                else if (errno != EEXIST)
                        return false;
        }
        return dead && commit(fd) == 0;
}

/* Refuses (-ENOSPC, "limit_exceeded") when `more` bytes do not fit beside
 * what is committed now (after waiting for deleted subvolumes to be freed
 * when they are in the way). Under admit_lock. */
static int admit(uint64_t more, const char *what, sb_error **ret_err) {
        uint64_t c;
        int r = committed(&c, NULL);
        if (r >= 0 && c + more > pool_size && reclaim_deleted())
                r = committed(&c, NULL);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "storage pool: read its quotas: %s", strerror(-r));
        if (c + more <= pool_size)
                return 0;
        uint64_t free_b = c < pool_size ? pool_size - c : 0;
        if (!more)
                return sb_error_set(ret_err, -ENOSPC, "limit_exceeded", NULL,
                                    "storage pool: %s does not fit: %" PRIu64 " MiB of the pool's %" PRIu64
                                    " MiB would be committed (disks, layers and its metadata margin)",
                                    what, c >> 20, pool_size >> 20);
        return sb_error_set(ret_err, -ENOSPC, "limit_exceeded", NULL,
                            "storage pool: %s needs %" PRIu64 " MiB and %" PRIu64 " MiB of the pool's %" PRIu64
                            " MiB are free (committed to other disks and layers, and its metadata margin)",
                            what, (more + (1 << 20) - 1) >> 20, free_b >> 20, pool_size >> 20);
}

int core_pool_sandbox_id(const char *dir, char ret_id[33]) {
        _cleanup_free_ char *marker = join(dir, MARKER), *text = NULL;
        if (!marker)
                return -ENOMEM;
        int r = core_read_file(marker, 128, &text, NULL);
        if (r < 0)
                return r;
        if (strlen(text) < 32 || strspn(text, "0123456789abcdef") != 32)
                return -EBADMSG;
        memcpy(ret_id, text, 32);
        ret_id[32] = '\0';
        return 0;
}

static int sandbox_bytes(const char *dir, uint64_t *ret) {
        _cleanup_free_ char *marker = join(dir, MARKER), *text = NULL;
        if (!marker)
                return -ENOMEM;
        int r = core_read_file(marker, 128, &text, NULL);
        if (r < 0)
                return r;
        if (strlen(text) < 34 || text[32] != ' ')
                return -EBADMSG;
        *ret = strtoull(text + 33, NULL, 10);
        return *ret ? 0 : -EBADMSG;
}

bool core_pool_present(const char *dir) {
        _cleanup_free_ char *marker = join(dir, MARKER);
        struct stat st;
        return marker && lstat(marker, &st) == 0 && S_ISREG(st.st_mode);
}

char *core_pool_layer_dir(const char *dir) {
        char id[33];
        char *p = NULL;
        if (!pool_mnt || core_pool_sandbox_id(dir, id) < 0 || asprintf(&p, "%s/sandboxes/%s", pool_mnt, id) < 0)
                return NULL;
        return p;
}

/* Sets the referenced-bytes limit of the qgroup of the subvolume `fd` is
 * in; (u64)-1 clears it (fs/btrfs/qgroup.c CLEAR_VALUE). */
static int fd_limit(int fd, uint64_t bytes) {
        /* qgroupid 0: the qgroup of the subvolume fd is in. */
        struct btrfs_ioctl_qgroup_limit_args a = {.qgroupid = 0};
        a.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
        a.lim.max_rfer = bytes;
        return ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &a) < 0 ? negative_errno() : 0;
}

static int set_limit(const char *subvol, uint64_t bytes) {
        _cleanup_close_ int fd = open(subvol, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? negative_errno() : fd_limit(fd, bytes);
}

/* A snapshot's qgroup inherits its source's limits (fs/btrfs/qgroup.c
 * btrfs_qgroup_inherit copies lim_flags and max_rfer). A layer is
 * read-only and never grows, so its limit only made admission count the
 * source's whole diskMiB for it instead of the bytes it references:
 * cleared, so it is counted by its referenced bytes. */
static int layer_unlimit(int layers_fd, const char *id) {
        _cleanup_close_ int fd = openat(layers_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? negative_errno() : fd_limit(fd, UINT64_MAX);
}

/* Deletes subvolume `name` of the directory `parent`. Its limit goes
 * first: a deleted subvolume cannot grow, so from then on admission counts
 * what it still references (freed by the cleaner thread in the
 * background, after the next commit; admit() waits for it when it is in
 * the way), not the whole diskMiB. */
static int destroy(const char *parent, const char *name) {
        _cleanup_close_ int fd = open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        {
                _cleanup_close_ int sfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sfd >= 0 && fd_limit(sfd, UINT64_MAX) < 0)
                        log_debug("storage pool: clear the limit of %s/%s: %m", parent, name);
        }
        struct btrfs_ioctl_vol_args_v2 a = {0};
        snprintf(a.name, sizeof(a.name), "%s", name);
        if (ioctl(fd, BTRFS_IOC_SNAP_DESTROY_V2, &a) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        /* The cleaner frees a deleted subvolume only after the commit
         * that records the deletion, by default up to 30 s later (the
         * commit= mount option); meanwhile admission still counts what it
         * references, and a create that needed those bytes waited in
         * reclaim_deleted (about a second). A commit started now (not
         * waited for: BTRFS_IOC_START_SYNC returns at once and writes no
         * dirty pages) has them freed within milliseconds. */
        uint64_t transid = 0;
        if (ioctl(fd, BTRFS_IOC_START_SYNC, &transid) < 0)
                log_debug("storage pool: start a commit after deleting %s/%s: %m", parent, name);
        return 0;
}

static int bind_upper(const char *dir, const char *subvol, sb_error **ret_err) {
        _cleanup_free_ char *dst = join(dir, "upper"), *src = join(subvol, "upper");
        if (!dst || !src)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        struct stat a, b;
        if (lstat(dir, &a) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: stat %s: %m", dir);
        if (lstat(dst, &b) == 0 && a.st_dev != b.st_dev)
                return 0; /* bound already */
        if (mkdir(dst, 0755) < 0 && errno != EEXIST)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: mkdir %s: %m", dst);
        if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: bind %s on %s: %m",
                                    src, dst);
        return 0;
}

int core_pool_sandbox_create(const char *dir, uint64_t bytes, sb_error **ret_err) {
        if (!pool_mnt)
                return sb_error_set(ret_err, -ENODEV, NULL, NULL, "storage pool: none configured");
        char id[33], text[64];
        core_random_hex(id, 32);
        id[32] = '\0';
        _cleanup_free_ char *marker = join(dir, MARKER), *parent = join(pool_mnt, "sandboxes"),
                           *subvol = parent ? join(parent, id) : NULL;
        if (!marker || !subvol)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* The marker first: a crash after the subvolume is made leaves a
         * sandbox directory that names it (removed with the directory), or
         * one no marker names (the start-up sweep's). */
        int n = snprintf(text, sizeof(text), "%s %" PRIu64 "\n", id, bytes);
        int r = core_write_file_atomic(marker, text, (size_t)n, 0600);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "storage pool: write %s: %s", marker, strerror(-r));
        pthread_mutex_lock(&admit_lock);
        r = admit(bytes + CORE_POOL_RESERVE_BYTES, "a disk of resources.diskMiB", ret_err);
        _cleanup_close_ int pfd = r < 0 ? -EBADF : open(parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (r >= 0 && pfd < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: open %s: %m", parent);
        if (r >= 0) {
                struct btrfs_ioctl_vol_args a = {0};
                snprintf(a.name, sizeof(a.name), "%s", id);
                if (ioctl(pfd, BTRFS_IOC_SUBVOL_CREATE, &a) < 0)
                        r = sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                         "storage pool: create subvolume %s: %m", subvol);
                else if ((r = set_limit(subvol, bytes)) < 0)
                        sb_error_set(ret_err, r, NULL, NULL, "storage pool: limit %s: %s", subvol, strerror(-r));
        }
        pthread_mutex_unlock(&admit_lock);
        /* The subvolume and its limit exist, nothing is bound yet and no
         * record names the sandbox: the start-up sweep's (its marker is
         * removed with the unrecorded sandbox directory). */
        if (r >= 0)
                core_fault("storage.subvolume_made");
        if (r >= 0) {
                _cleanup_close_ int sfd = open(subvol, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sfd < 0 || (mkdirat(sfd, "upper", 0755) < 0 && errno != EEXIST) ||
                    (mkdirat(sfd, "work", 0700) < 0 && errno != EEXIST) || fchmod(sfd, 0700) < 0)
                        r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: prepare %s: %m",
                                         subvol);
        }
        if (r >= 0)
                r = bind_upper(dir, subvol, ret_err);
        if (r < 0) {
                (void)destroy(parent, id);
                (void)unlink(marker);
        }
        return r;
}

int core_pool_attach(const char *dir, sb_error **ret_err) {
        if (!pool_mnt)
                return sb_error_set(ret_err, -ENODEV, NULL, "storage.pool",
                                    "its disk is in the storage pool and daemon.json has no storage.pool (set it "
                                    "as it was; the pool's files are kept)");
        _cleanup_free_ char *subvol = core_pool_layer_dir(dir);
        if (!subvol)
                return sb_error_set(ret_err, -EBADMSG, NULL, NULL, "storage pool: %s/" MARKER " is damaged", dir);
        struct stat st;
        if (lstat(subvol, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: its subvolume %s: %m",
                                    subvol);
        return bind_upper(dir, subvol, ret_err);
}

int core_pool_detach(const char *dir) {
        _cleanup_free_ char *dst = join(dir, "upper");
        if (!dst)
                return -ENOMEM;
        struct stat a, b;
        if (lstat(dir, &a) < 0 || lstat(dst, &b) < 0 || a.st_dev == b.st_dev)
                return 0;
        return umount2(dst, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL ? negative_errno() : 0;
}

int core_pool_remove(const char *dir) {
        char id[33];
        int r = core_pool_detach(dir);
        int k = core_pool_sandbox_id(dir, id);
        if (k == -ENOENT)
                return r;
        if (k < 0)
                return r < 0 ? r : k;
        if (!pool_mnt)
                return r < 0 ? r : -ENODEV;
        _cleanup_free_ char *parent = join(pool_mnt, "sandboxes"), *marker = join(dir, MARKER);
        if (!parent || !marker)
                return -ENOMEM;
        /* A subvolume is deleted whole, read-only or not, busy or not: a
         * session that still holds the overlay keeps its files open until
         * it ends (the kernel keeps the tree until the last reference). */
        k = destroy(parent, id);
        if (k < 0)
                return r < 0 ? r : k;
        /* The subvolume is gone and the marker still names it. */
        core_fault("storage.subvolume_deleted");
        if (unlink(marker) < 0 && errno != ENOENT && r >= 0)
                r = negative_errno();
        return r;
}

void core_pool_release(const char *dir) {
        uint64_t bytes;
        _cleanup_free_ char *subvol = core_pool_layer_dir(dir);
        if (subvol && sandbox_bytes(dir, &bytes) >= 0)
                (void)set_limit(subvol, bytes + CORE_POOL_RESERVE_BYTES);
}

int core_pool_rearm(const char *dir) {
        uint64_t bytes;
        _cleanup_free_ char *subvol = core_pool_layer_dir(dir);
        if (!subvol)
                return 0;
        int r = sandbox_bytes(dir, &bytes);
        return r < 0 ? r : set_limit(subvol, bytes);
}

int core_pool_capture(const char *dir, const char *id, sb_error **ret_err) {
        _cleanup_free_ char *subvol = core_pool_layer_dir(dir), *layers = pool_mnt ? join(pool_mnt, "layers") : NULL;
        if (!subvol || !layers)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "storage pool: no subvolume for %s", dir);
        _cleanup_close_ int src = open(subvol, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC),
                            dst = open(layers, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (src < 0 || dst < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: open %s: %m",
                                    src < 0 ? subvol : layers);
        struct btrfs_ioctl_vol_args_v2 a = {.fd = src, .flags = BTRFS_SUBVOL_RDONLY};
        snprintf(a.name, sizeof(a.name), "%s", id);
        if (ioctl(dst, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "storage pool: snapshot %s: %m",
                                    subvol);
        int r = layer_unlimit(dst, id);
        if (r < 0) {
                (void)destroy(layers, id);
                return sb_error_set(ret_err, r, NULL, NULL, "storage pool: clear the limit of layer %s: %s", id,
                                    strerror(-r));
        }
        return 0;
}

int core_pool_flush(const char *dir) {
        _cleanup_free_ char *subvol = core_pool_layer_dir(dir);
        if (!subvol)
                return -ENOENT;
        _cleanup_close_ int fd = open(subvol, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        return syncfs(fd) < 0 ? negative_errno() : 0;
}

int core_pool_capture_admit(const char *id, sb_error **ret_err) {
        _cleanup_free_ char *layers = pool_mnt ? join(pool_mnt, "layers") : NULL;
        if (!layers)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* The snapshot's referenced bytes are known once it exists (its
         * commit accounts the source first) and counted by every
         * admission from then on: it is deleted again when they do not
         * fit beside what is committed. Physical use grows by its
         * metadata only meanwhile. */
        pthread_mutex_lock(&admit_lock);
        int r = admit(0, "the captured layer", ret_err);
        if (r < 0)
                (void)destroy(layers, id);
        pthread_mutex_unlock(&admit_lock);
        return r;
}

int core_pool_used(const char *dir, uint64_t *ret) {
        _cleanup_free_ char *subvol = core_pool_layer_dir(dir);
        if (!subvol)
                return -ENOENT;
        _cleanup_close_ int fd = open(subvol, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        /* treeid 0 and the subvolume's root directory: the id of the
         * subvolume fd is in, which names its qgroup 0/<id>. */
        struct btrfs_ioctl_ino_lookup_args a = {.treeid = 0, .objectid = BTRFS_FIRST_FREE_OBJECTID};
        if (ioctl(fd, BTRFS_IOC_INO_LOOKUP, &a) < 0)
                return negative_errno();
        char path[128];
        snprintf(path, sizeof(path), "/sys/fs/btrfs/%s/qgroups/0_%llu", pool_fsid, (unsigned long long)a.treeid);
        _cleanup_close_ int q = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return q < 0 ? negative_errno() : read_u64(q, "referenced", ret);
}

char *core_pool_layer_home(const char *id) {
        char *p = NULL;
        struct stat st;
        if (!pool_mnt || asprintf(&p, "%s/layers/%s", pool_mnt, id) < 0)
                return NULL;
        if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode)) {
                free(p);
                return NULL;
        }
        return p;
}

int core_pool_layer_remove(const char *path) {
        if (!pool_mnt)
                return -ENOTTY;
        size_t n = strlen(pool_mnt);
        if (strncmp(path, pool_mnt, n) != 0 || strncmp(path + n, "/layers/", 8) != 0 ||
            strchr(path + n + 8, '/'))
                return -ENOTTY;
        _cleanup_free_ char *layers = join(pool_mnt, "layers");
        return layers ? destroy(layers, path + n + 8) : -ENOMEM;
}

static bool id_in(const char *id, char *const *keep, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (keep[i] && streq(keep[i], id))
                        return true;
        return false;
}

int core_pool_sweep(char *const *keep, size_t n, bool (*layer_kept)(const char *id, void *userdata),
                    void *userdata) {
        if (!pool_mnt)
                return 0;
        int gone = 0;
        static const char *const kinds[] = {"sandboxes", "layers"};
        for (size_t k = 0; k < ELEMENTSOF(kinds); k++) {
                _cleanup_free_ char *parent = join(pool_mnt, kinds[k]);
                _cleanup_closedir_ DIR *d = parent ? opendir(parent) : NULL;
                for (struct dirent *de; d && (de = readdir(d));) {
                        if (de->d_name[0] == '.')
                                continue;
                        bool kept = k == 0 ? id_in(de->d_name, keep, n) : layer_kept(de->d_name, userdata);
                        /* A layer an earlier version made still has the
                         * limit its snapshot inherited (layer_unlimit). */
                        if (kept && k == 1 && layer_unlimit(dirfd(d), de->d_name) < 0)
                                log_debug("storage pool: clear the limit of layer %s: %m", de->d_name);
                        if (kept)
                                continue;
                        int r = destroy(parent, de->d_name);
                        if (r < 0)
                                log_debug("storage pool: delete %s/%s: %s", parent, de->d_name, strerror(-r));
                        else
                                gone++;
                }
        }
        return gone;
}
