/* Per-sandbox filesystem images (diskimg.h): sparse ext4 files on loop
 * devices, each sandbox's upper/ and work/ inside its own. Runs as root in
 * the daemon's mount namespace; `dir` is always a directory of the state
 * tree that only the daemon writes (the sandbox writes inside upper/ only,
 * never the directory itself or its siblings). */
#include "libcore/diskimg.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/pool.h"
#include "libcore/util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <linux/loop.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IMAGE "disk.img"
#define MOUNT "disk"
/* Where mke2fs is on Debian (e2fsprogs) and on merged-/usr hosts. */
static const char *const mkfs_paths[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"};
/* upper/ is bound onto <dir>/upper, where the daemon's other code (the
 * /etc writer, sources, snapshot copies) finds it; the overlay itself takes
 * upper and work from <dir>/disk (core_disk_layer_dir), since overlayfs
 * wants both on one mount. */
static const char *const bound[] = {"upper"};
/* One attach at a time: finding a free loop device and configuring it are
 * two steps, and two threads must never give one image two devices. */
static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;

/* Inodes held back from the sandbox for the daemon's own writes between
 * sessions (ext4 reserves blocks for root, never inodes): empty files in
 * <dir>/disk/reserve, outside upper/, that core_disk_release frees while
 * the sandbox is stopped and core_disk_rearm takes again before it runs.
 * The /etc files written at each start need one inode each at once
 * (a temporary file renamed over the old one). */
#define RESERVE_DIR MOUNT "/reserve"
#define RESERVE_INODES 8

static char *join(const char *a, const char *b) {
        char *p = NULL;
        return asprintf(&p, "%s/%s", a, b) < 0 ? NULL : p;
}

static bool image_present(const char *dir) {
        _cleanup_free_ char *img = join(dir, IMAGE);
        struct stat st;
        return img && lstat(img, &st) == 0 && S_ISREG(st.st_mode);
}

/* A sandbox's disk is an image or a subvolume of the storage pool
 * (libcore/pool.h), never both; the entry points below serve either. */
bool core_disk_present(const char *dir) {
        return image_present(dir) || core_pool_present(dir);
}

/* Is `path` the root of a mount other than its parent's? (Bind mounts of
 * the image are on the image's device, never the state filesystem's.) */
static int is_mounted(const char *dir, const char *name) {
        _cleanup_free_ char *p = join(dir, name);
        struct stat a, b;
        if (!p)
                return -ENOMEM;
        if (lstat(dir, &a) < 0)
                return negative_errno();
        if (lstat(p, &b) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        return a.st_dev != b.st_dev;
}

static int run_mkfs(const char *image, const core_disk_limits *lim, sb_error **ret_err) {
        const char *mkfs = NULL;
        for (size_t i = 0; i < ELEMENTSOF(mkfs_paths) && !mkfs; i++)
                if (access(mkfs_paths[i], X_OK) == 0)
                        mkfs = mkfs_paths[i];
        if (!mkfs)
                return sb_error_set(
                        ret_err, -ENOENT, NULL, NULL,
                        "disk image: mkfs.ext4 not found (install e2fsprogs, or set diskMiB to 0)");
        uint64_t inodes = lim->inodes ? lim->inodes : lim->bytes / 16384;
        char n_arg[32], m_arg[8];
        snprintf(n_arg, sizeof(n_arg), "%" PRIu64, inodes);
        snprintf(m_arg, sizeof(m_arg), "%d", CORE_DISK_RESERVE_PCT);
        /* The file is new and sparse, so its holes read as zeros: inode
         * tables and journal need no zeroing (lazy_*_init, and the mount's
         * noinit_itable), and there is nothing to discard. The metadata
         * checksums are seeded from a field of their own
         * (metadata_csum_seed), not from the UUID, so a copy of the image
         * takes a fresh UUID by a superblock write alone (template_clone);
         * no resize inode: the size is fixed at create, and its reserved
         * descriptor blocks were most of the written data (4 MiB of a
         * 10 GiB image; 170 KiB without). */
        char *argv[] = {(char *)"mkfs.ext4",
                        (char *)"-q",
                        (char *)"-F",
                        (char *)"-m",
                        m_arg,
                        (char *)"-N",
                        n_arg,
                        (char *)"-O",
                        (char *)"metadata_csum_seed,^resize_inode",
                        (char *)"-E",
                        (char *)"lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                        (char *)image,
                        NULL};
        int st, r = core_run_quiet(mkfs, argv, &st);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "disk image: run %s: %s", mkfs, strerror(-r));
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "disk image: %s %s failed (status %d)", mkfs,
                                    image, st);
        return 0;
}

/* ---- templates: format once per (size, inodes), copy per sandbox ----
 *
 * mkfs.ext4 per create cost a process spawn and ~15 ms of formatting. A
 * template per (bytes, inodes) is formatted once into
 * <templates>/ext4-v1-<bytes>-<inodes>.img, and each new image is a sparse
 * copy of it (FICLONE where the state filesystem shares extents, else its
 * data extents only, found with SEEK_DATA/SEEK_HOLE and copied with
 * copy_file_range) with a UUID and directory hash seed of its own written
 * into the primary superblock. A template is never mounted: it is the
 * state mkfs left. Templates are not sandbox state: a leftover of an
 * interrupted format (.tmp-*) is deleted at start, a finished one (made by
 * rename after fsync) is checked at each use and remade when its
 * superblock is not what this code writes. */
#define TEMPLATE_PREFIX "ext4-v1-"
#define TEMPLATE_TMP ".tmp-"
/* Most templates kept (distinct diskMiB/diskInodes pairs); past it an
 * image is formatted in place, as without templates. */
#define TEMPLATE_MAX 16

static pthread_mutex_t template_lock = PTHREAD_MUTEX_INITIALIZER; /* making one */
static char *template_dir;                                        /* set once at start */

/* ext4 superblock fields (linux/fs/ext4/ext4.h struct ext4_super_block),
 * byte offsets in the 1024-byte superblock at offset 1024 of the image. */
#define SB_OFFSET 1024
#define SB_SIZE 1024
#define SB_INODES_COUNT 0x00
#define SB_BLOCKS_COUNT_LO 0x04
#define SB_LOG_BLOCK_SIZE 0x18
#define SB_MAGIC 0x38
#define SB_STATE 0x3A
#define SB_FEATURE_INCOMPAT 0x60
#define SB_FEATURE_RO_COMPAT 0x64
#define SB_UUID 0x68
#define SB_HASH_SEED 0xEC
#define SB_BLOCKS_COUNT_HI 0x150
#define SB_CHECKSUM_TYPE 0x175
#define SB_CHECKSUM 0x3FC
#define EXT4_MAGIC 0xEF53
#define EXT4_VALID_FS 0x0001
#define EXT4_INCOMPAT_64BIT 0x0080
#define EXT4_INCOMPAT_CSUM_SEED 0x2000
#define EXT4_RO_COMPAT_METADATA_CSUM 0x0400
#define EXT4_CRC32C_CHKSUM 1

static uint32_t le32(const uint8_t *p) {
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v) {
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 24);
}

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, RFC 3720 B.4) with
 * no final inversion, as ext4 keeps its checksums (ext4_chksum,
 * e2fsprogs' ext2fs_crc32c_le). */
static uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n) {
        while (n--) {
                crc ^= *p++;
                for (int k = 0; k < 8; k++)
                        crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
        }
        return crc;
}

static uint32_t sb_checksum(const uint8_t *sb) {
        return crc32c(~0u, sb, SB_CHECKSUM);
}

/* Is the superblock `sb` one mkfs made here for `lim`: ext4, clean, the
 * size and at least the inodes asked for, checksums seeded apart from the
 * UUID and the superblock's own checksum right? */
static bool template_sb_ok(const uint8_t *sb, const core_disk_limits *lim, uint64_t inodes) {
        uint32_t incompat = le32(sb + SB_FEATURE_INCOMPAT), ro = le32(sb + SB_FEATURE_RO_COMPAT);
        uint32_t log = le32(sb + SB_LOG_BLOCK_SIZE);
        uint64_t blocks = le32(sb + SB_BLOCKS_COUNT_LO);
        if ((sb[SB_MAGIC] | sb[SB_MAGIC + 1] << 8) != EXT4_MAGIC || !(sb[SB_STATE] & EXT4_VALID_FS) || log > 6)
                return false;
        if (incompat & EXT4_INCOMPAT_64BIT)
                blocks |= (uint64_t)le32(sb + SB_BLOCKS_COUNT_HI) << 32;
        if (blocks * (1024ull << log) != lim->bytes || le32(sb + SB_INODES_COUNT) < inodes)
                return false;
        /* Without metadata checksums (an mke2fs.conf that turns them off)
         * the UUID is free to change; with them, only if they are seeded
         * apart from it, or every group descriptor and inode of the copy
         * would fail its check. */
        if (!(ro & EXT4_RO_COMPAT_METADATA_CSUM))
                return true;
        return (incompat & EXT4_INCOMPAT_CSUM_SEED) && sb[SB_CHECKSUM_TYPE] == EXT4_CRC32C_CHKSUM &&
               le32(sb + SB_CHECKSUM) == sb_checksum(sb);
}

static bool template_ok(int fd, const core_disk_limits *lim, uint64_t inodes) {
        uint8_t sb[SB_SIZE];
        struct stat st;
        return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == lim->bytes &&
               pread(fd, sb, sizeof(sb), SB_OFFSET) == (ssize_t)sizeof(sb) && template_sb_ok(sb, lim, inodes);
}

static uint64_t wanted_inodes(const core_disk_limits *lim) {
        return lim->inodes ? lim->inodes : lim->bytes / 16384;
}

static int count_templates(const char *dir) {
        _cleanup_closedir_ DIR *d = opendir(dir);
        int n = 0;
        if (!d)
                return negative_errno();
        for (struct dirent *de; (de = readdir(d));)
                n += strncmp(de->d_name, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)) == 0;
        return n;
}

/* Formats the template `path` (under template_lock): into a temporary
 * file, flushed, then renamed, so a crash leaves either no template or a
 * whole one. */
static int template_make(const char *path, const core_disk_limits *lim, sb_error **ret_err) {
        _cleanup_free_ char *tmp = NULL;
        const char *base = strrchr(path, '/') + 1;
        if (asprintf(&tmp, "%.*s" TEMPLATE_TMP "%s", (int)(base - path), path, base) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        (void)unlink(tmp);
        _cleanup_close_ int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk template: create %s: %m", tmp);
        int r = ftruncate(fd, (off_t)lim->bytes) < 0 ? negative_errno() : 0;
        if (r < 0)
                sb_error_set(ret_err, r, NULL, NULL, "disk template: size %s: %s", tmp, strerror(-r));
        else
                r = run_mkfs(tmp, lim, ret_err);
        if (r >= 0 && fsync(fd) < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk template: fsync %s: %m", tmp);
        if (r >= 0 && rename(tmp, path) < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk template: rename %s: %m", tmp);
        if (r < 0)
                (void)unlink(tmp);
        return r;
}

/* An fd (read-only) of the template for lim in *ret_fd, made first if
 * missing or not one this code made: 0. 1 (nothing set) when templates are
 * off or TEMPLATE_MAX of them exist already; a negative errno with
 * *ret_err. */
static int template_open(const core_disk_limits *lim, int *ret_fd, sb_error **ret_err) {
        const char *dir = __atomic_load_n(&template_dir, __ATOMIC_ACQUIRE);
        uint64_t inodes = wanted_inodes(lim);
        _cleanup_free_ char *path = NULL;
        if (!dir)
                return 1;
        if (asprintf(&path, "%s/" TEMPLATE_PREFIX "%" PRIu64 "-%" PRIu64 ".img", dir, lim->bytes, inodes) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* The common case without the lock: a template only ever appears
         * whole (rename), and one unlinked meanwhile stays readable. */
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0 && template_ok(fd, lim, inodes)) {
                *ret_fd = fd;
                return 0;
        }
        if (fd >= 0)
                close(fd);
        pthread_mutex_lock(&template_lock);
        int r = 0;
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC); /* another thread may have made it */
        if (fd >= 0 && !template_ok(fd, lim, inodes)) {
                close(fd);
                fd = -EBADF;
                if (unlink(path) < 0 && errno != ENOENT)
                        r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk template: remove %s: %m",
                                         path);
        }
        if (fd < 0 && r >= 0) {
                int n = count_templates(dir);
                if (n >= TEMPLATE_MAX)
                        r = 1;
                else if (n < 0)
                        r = sb_error_set(ret_err, n, NULL, NULL, "disk template: read %s: %s", dir, strerror(-n));
                else if ((r = template_make(path, lim, ret_err)) >= 0 &&
                         (fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                        r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk template: open %s: %m", path);
                else if (r >= 0 && !template_ok(fd, lim, inodes)) {
                        /* mkfs made something a copy cannot take a UUID
                         * of its own in (checksums seeded from it): no
                         * template, each image is formatted in place. */
                        log_debug("disk template %s: not usable as a template, formatting in place", path);
                        close(fd);
                        fd = -EBADF;
                        (void)unlink(path);
                        r = 1;
                }
        }
        pthread_mutex_unlock(&template_lock);
        if (r != 0)
                return r;
        *ret_fd = fd;
        return 0;
}

/* Copies the template's data into dst (same size, sparse, holes left
 * holes): FICLONE shares the extents where the filesystem can (Btrfs, XFS);
 * elsewhere only the ranges SEEK_DATA finds are copied. */
static int template_copy(int src, int dst, uint64_t size) {
        if (ioctl(dst, FICLONE, src) == 0)
                return 0;
        for (off_t off = 0; (uint64_t)off < size;) {
                off_t data = lseek(src, off, SEEK_DATA);
                if (data < 0)
                        return errno == ENXIO ? 0 : negative_errno(); /* ENXIO: only a hole is left */
                off_t end = lseek(src, data, SEEK_HOLE);
                if (end < 0)
                        return negative_errno();
                for (off_t in = data, out = data; in < end;) {
                        ssize_t n = copy_file_range(src, &in, dst, &out, (size_t)(end - in), 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                return n < 0 ? negative_errno() : -EIO;
                }
                off = end;
        }
        return 0;
}

/* A UUID (random, RFC 4122 version 4) and a directory hash seed of its own
 * for a copy of a template, with the superblock checksum redone. The
 * metadata checksums stay valid: they are seeded from s_checksum_seed
 * (metadata_csum_seed). The hash seed keys the htree of indexed
 * directories; a fresh filesystem has none yet (its two directories are
 * one block each), so nothing was hashed with the old one. The backup
 * superblocks keep the template's values; e2fsck only refreshes them. */
static int template_identity(int fd) {
        uint8_t sb[SB_SIZE], rnd[32];
        if (pread(fd, sb, sizeof(sb), SB_OFFSET) != (ssize_t)sizeof(sb))
                return -EIO;
        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
                return -EIO;
        rnd[6] = (uint8_t)((rnd[6] & 0x0f) | 0x40);
        rnd[8] = (uint8_t)((rnd[8] & 0x3f) | 0x80);
        memcpy(sb + SB_UUID, rnd, 16);
        memcpy(sb + SB_HASH_SEED, rnd + 16, 16);
        put_le32(sb + SB_CHECKSUM, sb_checksum(sb));
        return pwrite(fd, sb, sizeof(sb), SB_OFFSET) == (ssize_t)sizeof(sb) ? 0 : -EIO;
}

/* Fills the new, empty image fd from the template for lim: 0. 1 when
 * there is no template to use (the caller formats in place), or a negative
 * errno with *ret_err. */
static int template_clone(int fd, const core_disk_limits *lim, sb_error **ret_err) {
        _cleanup_close_ int src = -EBADF;
        int r = template_open(lim, &src, ret_err);
        if (r != 0)
                return r;
        if ((r = template_copy(src, fd, lim->bytes)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "disk image: copy the template: %s", strerror(-r));
        if ((r = template_identity(fd)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "disk image: write its UUID: %s", strerror(-r));
        return 0;
}

int core_disk_templates_init(const char *dir, sb_error **ret_err) {
        int r = core_mkdir_p(dir, 0700);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "disk templates: create %s: %s", dir, strerror(-r));
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk templates: open %s: %m", dir);
        /* An interrupted format, or a template of another version of this
         * code: gone. Finished ones are checked at each use. */
        for (struct dirent *de; (de = readdir(d));) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (strncmp(de->d_name, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)) == 0 &&
                    de->d_type == DT_REG)
                        continue;
                if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
                        log_debug_errno(negative_errno(), "disk templates: remove %s/%s: %m", dir, de->d_name);
        }
        char *copy = strdup(dir);
        if (!copy)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        char *old = __atomic_exchange_n(&template_dir, copy, __ATOMIC_ACQ_REL);
        (void)old; /* a second call: the first string may still be read, kept */
        return 0;
}

/* The loop device already backed by the image (same device and inode), as
 * "/dev/loopN" in buf, or 0 when there is none. */
static int find_loop(const struct stat *img, char *buf, size_t size) {
        _cleanup_closedir_ DIR *d = opendir("/sys/block");
        if (!d)
                return 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (strncmp(de->d_name, "loop", 4) != 0)
                        continue;
                snprintf(buf, size, "/dev/%s", de->d_name);
                _cleanup_close_ int fd = open(buf, O_RDONLY | O_CLOEXEC);
                struct loop_info64 info;
                if (fd < 0 || ioctl(fd, LOOP_GET_STATUS64, &info) < 0)
                        continue;
                if (info.lo_device == (uint64_t)img->st_dev && info.lo_inode == (uint64_t)img->st_ino)
                        return 1;
        }
        return 0;
}

/* Loop devices this process is configuring. LOOP_CTL_GET_FREE names the
 * lowest unbound device without reserving it, so concurrent creates all
 * got the same one and all but one lost it (EBUSY), round after round;
 * with a hundred at once some lost every round of their retries. A device
 * is therefore chosen under loop_lock and claimed here until its
 * LOOP_CONFIGURE is done (outside the lock: devices configure in
 * parallel); a thread whose GET_FREE names a claimed device takes the next
 * unbound, unclaimed one (made with LOOP_CTL_ADD when there is none). Only
 * another process can take a device between the choice and the
 * configuration. Lock order: attach_lock, then loop_lock. */
#define LOOP_CLAIMS_MAX 256
static pthread_mutex_t loop_lock = PTHREAD_MUTEX_INITIALIZER;
static int loop_claims[LOOP_CLAIMS_MAX];
static size_t n_loop_claims;
/* Tries of new_loop before it gives up with EBUSY: the first
 * LOOP_TRIES_AT_ONCE at once (another process took the device: the next
 * one is free), then each after a pause (1 ms, growing by 1 ms to
 * LOOP_BACKOFF_MAX_MS): another process that takes devices as fast as they
 * free keeps a create waiting for at most about 1.2 s. */
#define LOOP_TRIES 80
#define LOOP_TRIES_AT_ONCE 16
#define LOOP_BACKOFF_MAX_MS 25
/* Most devices looked at past a claimed one before giving up (EBUSY). */
#define LOOP_SCAN_MAX (LOOP_CLAIMS_MAX + 64)

static bool loop_claimed(int n) {
        for (size_t i = 0; i < n_loop_claims; i++)
                if (loop_claims[i] == n)
                        return true;
        return false;
}

/* Is /dev/loop<n> there and bound to nothing? (LOOP_GET_STATUS64 answers
 * ENXIO for an unbound device, loop(4).) */
static bool loop_unbound(int n) {
        char path[32];
        snprintf(path, sizeof(path), "/dev/loop%d", n);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct loop_info64 info;
        return fd >= 0 && ioctl(fd, LOOP_GET_STATUS64, &info) < 0 && errno == ENXIO;
}

/* Under loop_lock: an unbound device no thread of this process is
 * configuring, claimed; its number, or a negative errno. */
static int loop_choose(int ctl) {
        if (n_loop_claims >= LOOP_CLAIMS_MAX)
                return -EBUSY;
        int n = ioctl(ctl, LOOP_CTL_GET_FREE);
        if (n < 0)
                return negative_errno();
        if (loop_claimed(n))
                for (int scanned = 0;; scanned++) {
                        if (scanned >= LOOP_SCAN_MAX)
                                return -EBUSY;
                        n++;
                        if (loop_claimed(n))
                                continue;
                        if (ioctl(ctl, LOOP_CTL_ADD, n) >= 0)
                                break; /* a new device is unbound */
                        if (errno != EEXIST)
                                return negative_errno();
                        if (loop_unbound(n))
                                break;
                }
        loop_claims[n_loop_claims++] = n;
        return n;
}

static void loop_unclaim(int n) {
        pthread_mutex_lock(&loop_lock);
        for (size_t i = 0; i < n_loop_claims; i++)
                if (loop_claims[i] == n) {
                        loop_claims[i] = loop_claims[--n_loop_claims];
                        break;
                }
        pthread_mutex_unlock(&loop_lock);
}

/* A new loop device for image_fd with LO_FLAGS_AUTOCLEAR; its fd (open
 * until the mount holds the device) in *ret_fd. */
static int new_loop(int image_fd, char *buf, size_t size, int *ret_fd) {
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return negative_errno();
        for (int tries = 0; tries < LOOP_TRIES; tries++) {
                if (tries >= LOOP_TRIES_AT_ONCE) {
                        long ms = tries - LOOP_TRIES_AT_ONCE + 1;
                        if (ms > LOOP_BACKOFF_MAX_MS)
                                ms = LOOP_BACKOFF_MAX_MS;
                        struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
                        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                                ;
                }
                pthread_mutex_lock(&loop_lock);
                int n = loop_choose(ctl);
                pthread_mutex_unlock(&loop_lock);
                if (n == -EBUSY)
                        continue;
                if (n < 0)
                        return n;
                snprintf(buf, size, "/dev/loop%d", n);
                int r = 0;
                int fd = open(buf, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        r = negative_errno();
                else {
                        struct loop_config cfg = {.fd = (uint32_t)image_fd};
                        cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                        if (ioctl(fd, LOOP_CONFIGURE, &cfg) < 0)
                                r = negative_errno();
                }
                loop_unclaim(n);
                if (r == 0) {
                        *ret_fd = fd;
                        return 0;
                }
                if (fd >= 0)
                        close(fd);
                /* Taken by another process between the choice and
                 * LOOP_CONFIGURE (EBUSY), or removed meanwhile (ENXIO,
                 * ENOENT): choose again. */
                if (r != -EBUSY && r != -ENXIO && r != -ENOENT)
                        return r;
        }
        return -EBUSY;
}

int core_disk_loop(int image_fd, char *dev, size_t size, int *ret_fd) {
        struct stat st;
        if (fstat(image_fd, &st) < 0)
                return negative_errno();
        pthread_mutex_lock(&attach_lock);
        int r = 0;
        *ret_fd = -EBADF;
        if (!find_loop(&st, dev, size))
                r = new_loop(image_fd, dev, size, ret_fd);
        pthread_mutex_unlock(&attach_lock);
        return r;
}

/* Mounts the image at <dir>/disk unless it is mounted. `fresh`: the image
 * was just made by this thread (core_disk_create), so no loop device can
 * be backed by it yet: no scan of every loop device and no attach_lock
 * (new_loop serialises the choice of a free device itself). */
static int mount_image(const char *dir, bool fresh, sb_error **ret_err) {
        _cleanup_free_ char *img = join(dir, IMAGE), *mnt = join(dir, MOUNT);
        if (!img || !mnt)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = is_mounted(dir, MOUNT);
        if (r != 0)
                return r < 0 ? sb_error_set(ret_err, r, NULL, NULL, "disk image: stat %s: %s", mnt,
                                            strerror(-r))
                             : 0;
        if (mkdir(mnt, 0700) < 0 && errno != EEXIST)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image: mkdir %s: %m", mnt);
        _cleanup_close_ int ifd = open(img, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (ifd < 0 || fstat(ifd, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image: open %s: %m", img);
        char dev[300];
        _cleanup_close_ int lfd = -EBADF;
        if (!fresh)
                pthread_mutex_lock(&attach_lock);
        if (fresh || !find_loop(&st, dev, sizeof(dev)))
                r = new_loop(ifd, dev, sizeof(dev), &lfd);
        if (r < 0) {
                if (!fresh)
                        pthread_mutex_unlock(&attach_lock);
                return sb_error_set(ret_err, r, NULL, NULL, "disk image: attach %s to a loop device: %s", img,
                                    strerror(-r));
        }
        /* resuid/resgid: the root reserve only for CAP_SYS_RESOURCE (see
         * CORE_DISK_RESERVE_ID), never for host root's fsuid 0. */
        char opts[96];
        snprintf(opts, sizeof(opts), "noinit_itable,resuid=%u,resgid=%u", CORE_DISK_RESERVE_ID,
                 CORE_DISK_RESERVE_ID);
        if (r >= 0 && mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV, opts) < 0)
                r = negative_errno();
        if (!fresh)
                pthread_mutex_unlock(&attach_lock);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "disk image: mount %s (%s) on %s: %s", img, dev, mnt,
                                    strerror(-r));
        return 0;
}

static int bind_dirs(const char *dir, bool create, sb_error **ret_err) {
        _cleanup_free_ char *mnt = join(dir, MOUNT);
        if (!mnt)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        for (size_t i = 0; i < ELEMENTSOF(bound); i++) {
                _cleanup_free_ char *src = join(mnt, bound[i]), *dst = join(dir, bound[i]);
                if (!src || !dst)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                int r = is_mounted(dir, bound[i]);
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "disk image: stat %s: %s", dst,
                                            strerror(-r));
                if (r > 0)
                        continue;
                mode_t mode = 0755;
                if (create && mkdir(src, mode) < 0 && errno != EEXIST)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                            "disk image: mkdir %s: %m", src);
                /* An empty mount point; a directory with files would be
                 * hidden under the mount (rmdir refuses a non-empty one). */
                if (rmdir(dst) < 0 && errno != ENOENT)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                            "disk image: %s is in the way: %m", dst);
                if (mkdir(dst, mode) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                            "disk image: mkdir %s: %m", dst);
                if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                            "disk image: bind %s on %s: %m", src, dst);
                /* A bind takes no flags of its own on creation: nosuid and
                 * nodev as on the image's mount, so nothing the sandbox
                 * made is a setuid program or a device node on the host
                 * side either. */
                if (mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                            "disk image: remount %s nosuid,nodev: %m", dst);
        }
        return 0;
}

/* Gives the image fd every block of its `bytes` on the state filesystem
 * (fallocate(2); the size is kept): a write into the image then never
 * needs a block of the host, so a full state filesystem cannot fail it
 * (ext4 inside would see an I/O error, abort its journal and go
 * read-only). FALLOC_FL_UNSHARE_RANGE first, for a template copy that
 * shares extents (XFS FICLONE): a shared block would need a new one at
 * its first write; filesystems without shared extents refuse the flag
 * (EOPNOTSUPP, EINVAL) and get the plain allocation. Returns 0 or a
 * negative errno (-ENOSPC: the state filesystem cannot hold it). */
static int back_fd(int fd, uint64_t bytes) {
        if (fallocate(fd, FALLOC_FL_UNSHARE_RANGE | FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0)
                return 0;
        if (errno != EOPNOTSUPP && errno != EINVAL)
                return negative_errno();
        return fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) < 0 ? negative_errno() : 0;
}

/* Whether fd's blocks cover its size (st_blocks counts 512-byte units). */
static bool fd_backed(int fd) {
        struct stat st;
        return fstat(fd, &st) == 0 && (uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size;
}

/* Sets *ret_err for a failed back_fd of `bytes` on fd's filesystem. */
/* The admission refusal (limit_exceeded, -ENOSPC) for an image of
 * `bytes` when `avail` bytes are free. */
static int no_room(uint64_t bytes, uint64_t avail, sb_error **ret_err) {
        return sb_error_set(ret_err, -ENOSPC, "limit_exceeded", NULL,
                            "disk image: the state filesystem cannot back %" PRIu64
                            " MiB (%" PRIu64 " MiB free): every disk is given its blocks when made, "
                            "so no sandbox can fill the host; choose a smaller disk or free space on "
                            "the state filesystem",
                            bytes >> 20, avail >> 20);
}

static int back_error(int fd, int r, uint64_t bytes, sb_error **ret_err) {
        struct statvfs vfs;
        uint64_t avail = fstatvfs(fd, &vfs) == 0 ? (uint64_t)vfs.f_bavail * vfs.f_frsize : 0;
        if (r == -ENOSPC)
                return no_room(bytes, avail, ret_err);
        return sb_error_set(ret_err, r, NULL, NULL, "disk image: allocate %" PRIu64 " MiB: %s", bytes >> 20,
                            strerror(-r));
}

int core_disk_back(const char *dir, sb_error **ret_err) {
        _cleanup_free_ char *img = join(dir, IMAGE);
        if (!img)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        _cleanup_close_ int fd = open(img, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0
                                       : sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                                      "disk image: open %s: %m", img);
        if (fd_backed(fd))
                return 1;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image: stat %s: %m", img);
        int r = back_fd(fd, (uint64_t)st.st_size);
        if (r < 0)
                return back_error(fd, r, (uint64_t)st.st_size, ret_err);
        return 1;
}

int core_disk_backed(const char *dir) {
        if (core_pool_present(dir))
                return 1; /* the pool is fully backed (core_pool_init) */
        _cleanup_free_ char *img = join(dir, IMAGE);
        if (!img)
                return -ENOMEM;
        _cleanup_close_ int fd = open(img, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        return fd_backed(fd) ? 1 : 0;
}

static int spare_take(const char *dir, const core_disk_limits *lim, sb_error **ret_err);

int core_disk_create(const char *dir, const core_disk_limits *lim, sb_error **ret_err) {
        if (!lim || lim->bytes < CORE_DISK_MIN_BYTES)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "disk image: at least %llu MiB",
                                    CORE_DISK_MIN_BYTES >> 20);
        int taken = spare_take(dir, lim, ret_err);
        if (taken <= 0)
                return taken;
        _cleanup_free_ char *img = join(dir, IMAGE);
        if (!img)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* Admission first, as far as the free space says: a size the state
         * filesystem cannot hold is refused before anything is formatted
         * (found: a refused create had formatted, and kept, a template of
         * its size). The fallocate below stays the admission proper. */
        struct statvfs vfs = {0};
        if (statvfs(dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < lim->bytes)
                return no_room(lim->bytes, (uint64_t)vfs.f_bavail * vfs.f_frsize, ret_err);
        _cleanup_close_ int fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image: create %s: %m", img);
        int r = ftruncate(fd, (off_t)lim->bytes) < 0 ? negative_errno() : 0;
        if (r == -EFBIG)
                /* Past the state filesystem's largest file (ext4: 16 TiB
                 * less a block): no room for it either. */
                r = no_room(lim->bytes, (uint64_t)vfs.f_bavail * vfs.f_frsize, ret_err);
        else if (r < 0)
                sb_error_set(ret_err, r, NULL, NULL, "disk image: size %s: %s", img, strerror(-r));
        else if ((r = template_clone(fd, lim, ret_err)) > 0)
                r = run_mkfs(img, lim, ret_err); /* no templates, or too many kinds */
        /* After the copy or mkfs (FICLONE replaces the whole file; mkfs
         * runs with nodiscard, so it punches no holes). */
        if (r >= 0 && (r = back_fd(fd, lim->bytes)) < 0)
                back_error(fd, r, lim->bytes, ret_err);
        if (r >= 0)
                core_fault("create.disk_backed");
        if (r >= 0)
                r = mount_image(dir, true, ret_err);
        if (r >= 0)
                r = bind_dirs(dir, true, ret_err);
        if (r >= 0 && (r = core_disk_rearm(dir)) < 0)
                sb_error_set(ret_err, r, NULL, NULL, "disk image: reserve inodes: %s", strerror(-r));
        if (r >= 0) {
                _cleanup_free_ char *work = join(dir, MOUNT "/work");
                if (!work || (mkdir(work, 0700) < 0 && errno != EEXIST))
                        r = sb_error_set(ret_err, work ? negative_errno() : -ENOMEM, NULL, NULL,
                                         "disk image: mkdir %s/%s/work: %m", dir, MOUNT);
        }
        if (r < 0) {
                (void)core_disk_detach(dir);
                (void)unlink(img);
        }
        return r;
}

int core_disk_attach(const char *dir, sb_error **ret_err) {
        if (core_pool_present(dir)) {
                int r = core_pool_attach(dir, ret_err);
                return r < 0 ? r : 1;
        }
        if (!image_present(dir))
                return 0;
        /* An image an earlier sandboxd made sparse gets its blocks now;
         * when the state filesystem cannot hold them it is used as it is
         * (never refused: its files stay reachable) and said so. */
        _cleanup_error_ sb_error *berr = NULL;
        if (core_disk_back(dir, &berr) < 0)
                log_warning("%s: the disk image is not fully backed, so a full state filesystem can fail "
                            "its writes: %s",
                            dir, berr ? berr->message : "allocate");
        int r = mount_image(dir, false, ret_err);
        if (r >= 0)
                r = bind_dirs(dir, false, ret_err);
        return r < 0 ? r : 1;
}

static char *reserve_file(const char *dir, int i) {
        char *p = NULL;
        return asprintf(&p, "%s/%s/r%d", dir, RESERVE_DIR, i) < 0 ? NULL : p;
}

void core_disk_release(const char *dir) {
        if (core_pool_present(dir)) {
                core_pool_release(dir);
                return;
        }
        if (!image_present(dir))
                return;
        for (int i = 0; i < RESERVE_INODES; i++) {
                _cleanup_free_ char *p = reserve_file(dir, i);
                if (p)
                        (void)unlink(p);
        }
}

int core_disk_rearm(const char *dir) {
        if (core_pool_present(dir))
                return core_pool_rearm(dir);
        if (!image_present(dir))
                return 0;
        _cleanup_free_ char *rd = join(dir, RESERVE_DIR);
        if (!rd)
                return -ENOMEM;
        if (mkdir(rd, 0700) < 0 && errno != EEXIST)
                return negative_errno();
        int ret = 0;
        for (int i = 0; i < RESERVE_INODES; i++) {
                _cleanup_free_ char *p = reserve_file(dir, i);
                int fd = p ? open(p, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -ENOMEM;
                if (fd < 0 && !ret)
                        ret = p ? negative_errno() : -ENOMEM;
                if (fd >= 0)
                        close(fd);
        }
        return ret;
}

char *core_disk_layer_dir(const char *dir) {
        if (core_pool_present(dir))
                return core_pool_layer_dir(dir);
        return image_present(dir) ? join(dir, MOUNT) : strdup(dir);
}

int core_disk_detach(const char *dir) {
        if (core_pool_present(dir))
                return core_pool_detach(dir);
        int ret = 0;
        const char *order[] = {bound[0], MOUNT};
        for (size_t i = 0; i < ELEMENTSOF(order); i++) {
                int m = is_mounted(dir, order[i]);
                if (m <= 0)
                        continue;
                _cleanup_free_ char *p = join(dir, order[i]);
                if (!p || umount2(p, MNT_DETACH | UMOUNT_NOFOLLOW) < 0) {
                        int r = p ? negative_errno() : -ENOMEM;
                        log_debug_errno(r, "disk image: unmount %s: %m", p ? p : dir);
                        if (!ret)
                                ret = r;
                }
        }
        _cleanup_free_ char *mnt = join(dir, MOUNT);
        if (mnt)
                (void)rmdir(mnt);
        return ret;
}

int core_disk_reserve_enter(core_disk_groups *saved) {
        saved->n = -1;
        gid_t gids[ELEMENTSOF(saved->gids) + 1];
        int n = getgroups((int)ELEMENTSOF(saved->gids), saved->gids);
        if (n < 0)
                return negative_errno();
        memcpy(gids, saved->gids, (size_t)n * sizeof(gid_t));
        gids[n] = CORE_DISK_RESERVE_ID;
        if (syscall(SYS_setgroups, (size_t)n + 1, gids) < 0)
                return negative_errno();
        saved->n = n;
        return 0;
}

void core_disk_reserve_leave(const core_disk_groups *saved) {
        if (saved->n < 0)
                return;
        if (syscall(SYS_setgroups, (size_t)saved->n, saved->gids) < 0)
                log_error("disk image: restore this thread's groups: %m");
}

/* ---- the spare disk ---------------------------------------------------- */

/* One image of the daemon's default size, made ahead of the create that
 * takes it (core_disk_spare_init): copied from the template, backed,
 * attached to a loop device and mounted as a detached mount (fsmount(2):
 * in no mount table, reachable only through the fd held here), its
 * upper/, work/ and reserve made. A create then renames the image into
 * its directory and attaches the mount with move_mount(2): the loop
 * device's configuration and ext4's mount, kernel waits of 1 to 12 ms
 * under load, are off its path. A crash at any moment leaves only the
 * image file: the process's fds close with it, so the detached mount goes,
 * the loop device clears itself (LO_FLAGS_AUTOCLEAR), and the next start
 * removes every file of the spare directory. */
static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        pthread_t tid;
        bool running, stop, wanted;
        char *dir;              /* the spare directory (set by init) */
        core_disk_limits lim;   /* the only size a spare is made of */
        int mnt;                /* the ready spare's detached mount, or -EBADF */
        char *path;             /* its image, NULL when none is ready */
        unsigned long made;     /* a counter for the images' names */
} spare = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, .mnt = -EBADF};

/* A spare is made only while the state filesystem keeps this many times
 * its size free besides: it must not take the room of the creates that
 * ask for another size, nor turn away a create at the edge of a nearly
 * full filesystem that would have fitted without it. */
#define SPARE_FREE_FACTOR 4

/* Mounts the loop device dev as a detached ext4 mount with the options of
 * mount_image; its fd, or a negative errno. */
static int spare_fsmount(const char *dev) {
        char id[16];
        snprintf(id, sizeof(id), "%u", CORE_DISK_RESERVE_ID);
        _cleanup_close_ int fs = fsopen("ext4", FSOPEN_CLOEXEC);
        if (fs < 0)
                return negative_errno();
        if (fsconfig(fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
            fsconfig(fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
            fsconfig(fs, FSCONFIG_SET_STRING, "resuid", id, 0) < 0 ||
            fsconfig(fs, FSCONFIG_SET_STRING, "resgid", id, 0) < 0 ||
            fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return negative_errno();
        int mnt = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        return mnt < 0 ? negative_errno() : mnt;
}

/* What core_disk_create makes inside a new image (upper/, work/ and the
 * reserved inodes), relative to the root of mount fd `mnt`, which nothing
 * but the daemon can reach yet. */
static int spare_fill(int mnt) {
        /* Modes set outright: the process's umask is not always 022 (the
         * metrics socket is made under 0177, metrics.c), and this thread
         * may run at any moment (found: a spare made at start got an
         * upper/ of 0600, the sandbox's / then untraversable by its user). */
        static const struct { const char *name; mode_t mode; } dirs[] = {
                {"upper", 0755}, {"work", 0700}, {"reserve", 0700}};
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
                if (mkdirat(mnt, dirs[i].name, dirs[i].mode) < 0 || fchmodat(mnt, dirs[i].name, dirs[i].mode, 0) < 0)
                        return negative_errno();
        for (int i = 0; i < RESERVE_INODES; i++) {
                char name[32];
                snprintf(name, sizeof(name), "reserve/r%d", i);
                int fd = openat(mnt, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0)
                        return negative_errno();
                close(fd);
        }
        return 0;
}

/* Makes one spare: its mount fd with *ret_path set (malloc'd), or a
 * negative errno with nothing left. Spare thread. */
static int spare_make(char **ret_path) {
        _cleanup_free_ char *path = NULL;
        struct statvfs vfs;
        if (statvfs(spare.dir, &vfs) < 0)
                return negative_errno();
        if ((uint64_t)vfs.f_bavail * vfs.f_frsize / SPARE_FREE_FACTOR < spare.lim.bytes)
                return -ENOSPC;
        if (asprintf(&path, "%s/spare-%d-%lu.img", spare.dir, (int)getpid(), ++spare.made) < 0)
                return -ENOMEM;
        _cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return negative_errno();
        _cleanup_error_ sb_error *err = NULL;
        _cleanup_close_ int lfd = -EBADF;
        char dev[300];
        int mnt = -EBADF;
        int r = ftruncate(fd, (off_t)spare.lim.bytes) < 0 ? negative_errno() : 0;
        if (r >= 0 && (r = template_clone(fd, &spare.lim, &err)) > 0)
                r = run_mkfs(path, &spare.lim, &err);
        if (r >= 0)
                r = back_fd(fd, spare.lim.bytes);
        if (r >= 0)
                r = new_loop(fd, dev, sizeof(dev), &lfd);
        if (r >= 0 && (mnt = spare_fsmount(dev)) < 0)
                r = mnt;
        if (r >= 0)
                core_fault("disk.spare_mounted");
        if (r >= 0)
                r = spare_fill(mnt);
        if (r < 0) {
                log_debug_errno(r, "disk image: spare %s: %s", path, err ? err->message : "%m");
                if (mnt >= 0)
                        close(mnt);
                (void)unlink(path);
                return r;
        }
        *ret_path = TAKE_PTR(path);
        return mnt;
}

static void *spare_thread(void *arg) {
        (void)arg;
        pthread_mutex_lock(&spare.lock);
        for (;;) {
                while (!spare.stop && (!spare.wanted || spare.path))
                        pthread_cond_wait(&spare.cond, &spare.lock);
                if (spare.stop)
                        break;
                spare.wanted = false;
                pthread_mutex_unlock(&spare.lock);
                char *path = NULL;
                int mnt = spare_make(&path);
                pthread_mutex_lock(&spare.lock);
                if (mnt >= 0) {
                        spare.mnt = mnt;
                        spare.path = path;
                }
        }
        pthread_mutex_unlock(&spare.lock);
        return NULL;
}

int core_disk_spare_init(const char *dir, const core_disk_limits *lim, sb_error **ret_err) {
        if (!lim || lim->bytes < CORE_DISK_MIN_BYTES || spare.running)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "disk image spare: bad size or started twice");
        int r = core_mkdir_p(dir, 0700);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "disk image spare: create %s: %s", dir, strerror(-r));
        /* A crashed daemon's spare: its mount and loop device went with
         * it, its image is all that is left. */
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image spare: open %s: %m", dir);
        for (struct dirent *de; (de = readdir(d));)
                if (!streq(de->d_name, ".") && !streq(de->d_name, "..") && unlinkat(dirfd(d), de->d_name, 0) < 0 &&
                    errno != ENOENT)
                        log_debug_errno(negative_errno(), "disk image spare: remove %s/%s: %m", dir, de->d_name);
        if (!(spare.dir = strdup(dir)))
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        spare.lim = *lim;
        spare.wanted = true;
        /* The thread takes no signal: the daemon's are read from a
         * signalfd, and the mask is inherited at creation. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        r = -pthread_create(&spare.tid, NULL, spare_thread, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                free(TAKE_PTR(spare.dir));
                return sb_error_set(ret_err, r, NULL, NULL, "disk image spare: start its thread: %s", strerror(-r));
        }
        spare.running = true;
        return 0;
}

void core_disk_spare_refill(void) {
        if (!spare.running)
                return;
        pthread_mutex_lock(&spare.lock);
        if (spare.wanted)
                pthread_cond_signal(&spare.cond);
        pthread_mutex_unlock(&spare.lock);
}

void core_disk_spare_stop(void) {
        if (!spare.running)
                return;
        pthread_mutex_lock(&spare.lock);
        spare.stop = true;
        pthread_cond_signal(&spare.cond);
        pthread_mutex_unlock(&spare.lock);
        pthread_join(spare.tid, NULL);
        spare.running = false;
        if (spare.mnt >= 0)
                close(TAKE_FD(spare.mnt));
        if (spare.path)
                (void)unlink(spare.path);
        free(TAKE_PTR(spare.path));
        free(TAKE_PTR(spare.dir));
}

/* core_disk_create with the spare: 0 when it gave `dir` its disk, 1 when
 * there is none of lim's size (the caller makes one), or a negative errno
 * with *ret_err and nothing left in `dir`. */
static int spare_take(const char *dir, const core_disk_limits *lim, sb_error **ret_err) {
        pthread_mutex_lock(&spare.lock);
        bool fits = spare.path && lim->bytes == spare.lim.bytes && lim->inodes == spare.lim.inodes;
        _cleanup_close_ int mnt = fits ? TAKE_FD(spare.mnt) : -EBADF;
        _cleanup_free_ char *from = fits ? TAKE_PTR(spare.path) : NULL;
        /* Another one made once this create is done (core_disk_spare_refill);
         * after a spare that failed (no room, say) each create of its size
         * tries again. */
        if (spare.running && lim->bytes == spare.lim.bytes && lim->inodes == spare.lim.inodes)
                spare.wanted = true;
        pthread_mutex_unlock(&spare.lock);
        if (!fits)
                return 1;
        _cleanup_free_ char *img = join(dir, IMAGE), *mp = join(dir, MOUNT);
        if (!img || !mp) {
                (void)unlink(from);
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        if (renameat2(AT_FDCWD, from, AT_FDCWD, img, RENAME_NOREPLACE) < 0) {
                int r = negative_errno();
                (void)unlink(from);
                if (r == -EXDEV)
                        return 1; /* another filesystem: made in place */
                return sb_error_set(ret_err, r, NULL, NULL, "disk image: move the spare to %s: %s", img,
                                    strerror(-r));
        }
        core_fault("create.disk_backed");
        int r = 0;
        if (mkdir(mp, 0700) < 0 && errno != EEXIST)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image: mkdir %s: %m", mp);
        else if (move_mount(mnt, "", AT_FDCWD, mp, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image: attach the spare on %s: %m", mp);
        else
                r = bind_dirs(dir, true, ret_err);
        if (r < 0) {
                (void)core_disk_detach(dir);
                (void)unlink(img);
        }
        return r;
}
