/* Per-sandbox filesystem images (diskimg.h): sparse ext4 files on loop
 * devices, each sandbox's upper/ and work/ inside its own. Runs as root in
 * the daemon's mount namespace; `dir` is always a directory of the state
 * tree that only the daemon writes (the sandbox writes inside upper/ only,
 * never the directory itself or its siblings). */
#include "libcore/diskimg.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/loop.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

bool core_disk_present(const char *dir) {
        _cleanup_free_ char *img = join(dir, IMAGE);
        struct stat st;
        return img && lstat(img, &st) == 0 && S_ISREG(st.st_mode);
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
         * noinit_itable), and there is nothing to discard. */
        char *argv[] = {(char *)"mkfs.ext4",
                        (char *)"-q",
                        (char *)"-F",
                        (char *)"-m",
                        m_arg,
                        (char *)"-N",
                        n_arg,
                        (char *)"-E",
                        (char *)"lazy_itable_init=1,lazy_journal_init=1,nodiscard",
                        (char *)image,
                        NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        posix_spawnattr_t attr;
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_init(&attr);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &all);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        pid_t pid;
        char *envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
        int r = posix_spawn(&pid, mkfs, &fa, &attr, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (r != 0)
                return sb_error_set(ret_err, -r, NULL, NULL, "disk image: run %s: %s", mkfs, strerror(r));
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                            "disk image: wait for mkfs: %m");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "disk image: %s %s failed (status %d)", mkfs,
                                    image, st);
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

/* A new loop device for image_fd with LO_FLAGS_AUTOCLEAR; its fd (open
 * until the mount holds the device) in *ret_fd. */
static int new_loop(int image_fd, char *buf, size_t size, int *ret_fd) {
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return negative_errno();
        for (int tries = 0; tries < 16; tries++) {
                int n = ioctl(ctl, LOOP_CTL_GET_FREE);
                if (n < 0)
                        return negative_errno();
                snprintf(buf, size, "/dev/loop%d", n);
                _cleanup_close_ int fd = open(buf, O_RDWR | O_CLOEXEC);
                if (fd < 0)
                        return negative_errno();
                struct loop_config cfg = {.fd = (uint32_t)image_fd};
                cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
                        *ret_fd = TAKE_FD(fd);
                        return 0;
                }
                if (errno != EBUSY)
                        return negative_errno();
                /* Taken between GET_FREE and CONFIGURE: try the next. */
        }
        return -EBUSY;
}

/* Mounts the image at <dir>/disk unless it is mounted. */
static int mount_image(const char *dir, sb_error **ret_err) {
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
        pthread_mutex_lock(&attach_lock);
        if (!find_loop(&st, dev, sizeof(dev)))
                r = new_loop(ifd, dev, sizeof(dev), &lfd);
        if (r >= 0 && mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV, "noinit_itable") < 0)
                r = negative_errno();
        pthread_mutex_unlock(&attach_lock);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "disk image: mount %s on %s: %s", img, mnt,
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

int core_disk_create(const char *dir, const core_disk_limits *lim, sb_error **ret_err) {
        if (!lim || lim->bytes < CORE_DISK_MIN_BYTES)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "disk image: at least %llu MiB",
                                    CORE_DISK_MIN_BYTES >> 20);
        _cleanup_free_ char *img = join(dir, IMAGE);
        if (!img)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        _cleanup_close_ int fd = open(img, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "disk image: create %s: %m", img);
        int r = ftruncate(fd, (off_t)lim->bytes) < 0 ? negative_errno() : 0;
        if (r < 0)
                sb_error_set(ret_err, r, NULL, NULL, "disk image: size %s: %s", img, strerror(-r));
        else
                r = run_mkfs(img, lim, ret_err);
        if (r >= 0)
                r = mount_image(dir, ret_err);
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
        if (!core_disk_present(dir))
                return 0;
        int r = mount_image(dir, ret_err);
        if (r >= 0)
                r = bind_dirs(dir, false, ret_err);
        return r < 0 ? r : 1;
}

static char *reserve_file(const char *dir, int i) {
        char *p = NULL;
        return asprintf(&p, "%s/%s/r%d", dir, RESERVE_DIR, i) < 0 ? NULL : p;
}

void core_disk_release(const char *dir) {
        if (!core_disk_present(dir))
                return;
        for (int i = 0; i < RESERVE_INODES; i++) {
                _cleanup_free_ char *p = reserve_file(dir, i);
                if (p)
                        (void)unlink(p);
        }
}

int core_disk_rearm(const char *dir) {
        if (!core_disk_present(dir))
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
        return core_disk_present(dir) ? join(dir, MOUNT) : strdup(dir);
}

int core_disk_detach(const char *dir) {
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
