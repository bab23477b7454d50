/* The sandbox root filesystem: overlayfs over the runtime, binds, /proc,
 * /dev, /tmp, /sys, masks, pivot_root (see rootfs.h).
 *
 * Runs in sandbox-init, PID 1 of fresh namespaces, as real root, before any
 * sandbox code. Every mount is made with the new mount API (fsopen/fsmount,
 * open_tree) and attached with move_mount() onto a target fd that was
 * resolved with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS) beneath the
 * new root. Threat: a persistent sandbox's upper layer is sandbox-controlled,
 * so a previous session could have replaced /proc or /usr with a symlink to
 * a host path; resolving targets by string on the host would then mount over
 * the host's tree. With fd targets that cannot leave the root and refuse
 * symlinks, a planted link makes the setup fail instead. */
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <linux/capability.h>
#include "libcore/caps.h"
#include "libcore/rootfs.h"
#include "libcore/util.h"

static int openat2_beneath(int rootfd, const char *path, int flags) {
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        while (*path == '/')
                path++;
        if (!*path)
                path = ".";
        int fd = (int)syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
        return fd < 0 ? negative_errno() : fd;
}

/* Moves the detached mount `mntfd` onto `dst` beneath rootfd. */
/* attach() onto a mount point the caller opened beneath the root already
 * (O_PATH, openat2_beneath): the masks, which open each to see whether it
 * exists, attach on that fd instead of resolving the path a second time. */
static int attach_at(int mntfd, int target, const char *dst, sb_error **ret_err) {
        if (target < 0)
                return sb_error_set(ret_err, target, NULL, NULL, "open mount point %s: %s", dst,
                                    strerror(-target));
        if (move_mount(mntfd, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount on %s: %m", dst);
        return 0;
}

static int attach(int rootfd, int mntfd, const char *dst, sb_error **ret_err) {
        _cleanup_close_ int target = openat2_beneath(rootfd, dst, O_PATH);
        return attach_at(mntfd, target, dst, ret_err);
}

/* A fresh filesystem instance (proc, tmpfs, devpts, sysfs) with the given
 * fsconfig string options ("key=value" or "key") and mount attributes, as
 * a detached mount: its fd (the caller closes it) or a negative errno.
 * mount_new() attaches it on dst beneath rootfd. */
static int make_new(const char *fstype, const char *const *opts, unsigned attrs, sb_error **ret_err) {
        _cleanup_close_ int fsfd = fsopen(fstype, FSOPEN_CLOEXEC);
        if (fsfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsopen %s: %m", fstype);
        for (const char *const *o = opts; o && *o; o++) {
                char key[64];
                const char *eq = strchr(*o, '=');
                int r;
                if (eq) {
                        snprintf(key, sizeof(key), "%.*s", (int)(eq - *o), *o);
                        r = fsconfig(fsfd, FSCONFIG_SET_STRING, key, eq + 1, 0);
                } else
                        r = fsconfig(fsfd, FSCONFIG_SET_FLAG, *o, NULL, 0);
                if (r < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "%s option %s: %m",
                                            fstype, *o);
        }
        if (fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "create %s: %m", fstype);
        int mnt = fsmount(fsfd, FSMOUNT_CLOEXEC, attrs);
        if (mnt < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsmount %s: %m", fstype);
        return mnt;
}

static int mount_new(int rootfd, const char *fstype, const char *const *opts, unsigned attrs,
                     const char *dst, sb_error **ret_err) {
        _cleanup_close_ int mnt = make_new(fstype, opts, attrs, ret_err);
        if (mnt < 0)
                return mnt;
        return attach(rootfd, mnt, dst, ret_err);
}

int core_rootfs_clone_tree(int dfd, const char *src, bool ro, sb_error **ret_err) {
        _cleanup_close_ int tree = open_tree(dfd, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
        if (tree < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open_tree %s: %m", src);
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (ro ? MOUNT_ATTR_RDONLY : 0),
                .propagation = MS_PRIVATE,
        };
        if (mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount_setattr %s: %m", src);
        return TAKE_FD(tree);
}

int core_rootfs_file_tree(const char *name, const void *data, size_t size, sb_error **ret_err) {
        if (!name || !*name || strchr(name, '/') || streq(name, ".") || streq(name, ".."))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "file mount: bad name");
        char sz[32];
        snprintf(sz, sizeof(sz), "%zu", size + 65536);
        _cleanup_close_ int fsfd = fsopen("tmpfs", FSOPEN_CLOEXEC);
        if (fsfd < 0 || fsconfig(fsfd, FSCONFIG_SET_STRING, "size", sz, 0) < 0 ||
            fsconfig(fsfd, FSCONFIG_SET_STRING, "nr_inodes", "4", 0) < 0 ||
            fsconfig(fsfd, FSCONFIG_SET_STRING, "mode", "0755", 0) < 0 ||
            fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "tmpfs for %s: %m", name);
        _cleanup_close_ int mnt = fsmount(fsfd, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        if (mnt < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsmount tmpfs for %s: %m", name);
        _cleanup_close_ int f = openat(mnt, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (f < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "create %s on its tmpfs: %m", name);
        int r = core_write_all(f, data, size);
        if (r < 0 || fchmod(f, 0644) < 0)
                return sb_error_set(ret_err, r < 0 ? r : negative_errno(), NULL, NULL, "write %s on its tmpfs: %s",
                                    name, strerror(r < 0 ? -r : errno));
        _cleanup_close_ int tree = open_tree(mnt, name, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
        if (tree < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open_tree %s: %m", name);
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                .propagation = MS_PRIVATE,
        };
        if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount_setattr %s: %m", name);
        return TAKE_FD(tree);
}

int core_rootfs_make_target(int rootfd, const char *dst, bool dir) {
        while (*dst == '/')
                dst++;
        if (!*dst)
                return -EINVAL;
        _cleanup_free_ char *parent = strdup(dst);
        if (!parent)
                return -ENOMEM;
        char *slash = strrchr(parent, '/');
        const char *base = slash ? slash + 1 : parent;
        if (slash)
                *slash = 0;
        if (streq(base, ".") || streq(base, ".."))
                return -EINVAL;
        _cleanup_close_ int pfd = slash ? core_mkdir_beneath(rootfd, parent, 0755)
                                        : core_open_beneath(rootfd, ".", O_PATH | O_DIRECTORY, 0);
        if (pfd < 0)
                return pfd;
        if (dir)
                return mkdirat(pfd, base, 0755) < 0 && errno != EEXIST ? negative_errno() : 0;
        /* O_RDONLY: an existing file is not opened for writing (no
         * copy-up of a lower layer's file); a missing one is made. */
        int fd = core_open_beneath(pfd, base, O_RDONLY | O_CREAT | O_NOCTTY | O_NONBLOCK, 0644);
        if (fd < 0 && fd != -EISDIR)
                return fd;
        if (fd >= 0)
                close(fd);
        return 0;
}

int core_rootfs_attach_bind(int rootfd, int tree, const char *dst, sb_error **ret_err) {
        _cleanup_close_ int target = openat2_beneath(rootfd, dst, O_PATH);
        if (target < 0)
                return sb_error_set(ret_err, target, NULL, NULL, "open mount point %s: %s", dst,
                                    strerror(-target));
        if (move_mount(tree, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) == 0)
                return 0;
        int err = negative_errno();
        /* ENOENT with a root that has no name left: the file was replaced
         * on the host after it was cloned (ldconfig renames a new
         * /etc/ld.so.cache over the old one; dpkg does so with every
         * conffile), and the kernel attaches no mount whose root was
         * renamed over. The clone still holds the old file: a copy of it
         * is what the bind would have shown. */
        struct stat st;
        if (err != -ENOENT || fstat(tree, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 0)
                return sb_error_set(ret_err, err, NULL, NULL, "mount on %s: %s", dst, strerror(-err));
        char self[64];
        snprintf(self, sizeof(self), "/proc/self/fd/%d", tree);
        _cleanup_free_ char *data = NULL;
        size_t len = 0;
        int r = core_read_file(self, CORE_ROOTFS_COPY_MAX_BYTES, &data, &len);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "mount on %s: replaced on the host; read the old file: %s",
                                    dst, strerror(-r));
        const char *base = strrchr(dst, '/');
        base = base && base[1] ? base + 1 : "file";
        _cleanup_close_ int copy = core_rootfs_file_tree(base, data, len, ret_err);
        if (copy < 0)
                return sb_error_prefix(ret_err, "mount on %s: replaced on the host", dst);
        if (move_mount(copy, "", target, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount a copy on %s: %m", dst);
        return 0;
}

/* Makes the directories of `dst` beneath rootfd that are missing (0755),
 * one component at a time from the root: each is opened with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS from its parent's fd, so a
 * symlink the sandbox's own files planted anywhere on the way (a fork of
 * a sandbox that made /data -> /etc) is refused (ELOOP), never followed.
 * Runs before pivot_root, as root of the sandbox. */
static int mkdir_beneath(int rootfd, const char *dst, sb_error **ret_err) {
        _cleanup_free_ char *copy = strdup(dst);
        if (!copy)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        _cleanup_close_ int cur = fcntl(rootfd, F_DUPFD_CLOEXEC, 3);
        if (cur < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "dup: %m");
        char *save = NULL;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                struct open_how how = {
                        .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
                        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
                };
                int fd = (int)syscall(SYS_openat2, cur, c, &how, sizeof(how));
                if (fd < 0 && errno == ENOENT) {
                        if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST)
                                return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                                    "volume mount point %s: mkdir %s: %m", dst, c);
                        fd = (int)syscall(SYS_openat2, cur, c, &how, sizeof(how));
                }
                if (fd < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "volume mount point %s: %s: %s", dst,
                                            c, errno == ELOOP ? "a symbolic link (not followed)"
                                                              : errno == ENOTDIR ? "not a directory" : strerror(errno));
                close(cur);
                cur = fd;
        }
        return 0;
}

/* Binds host path src (recursively) onto dst beneath rootfd. */
static int bind_path(int rootfd, int srcdfd, const char *src, const char *dst, bool ro,
                     sb_error **ret_err) {
        _cleanup_close_ int tree = core_rootfs_clone_tree(srcdfd, src, ro, ret_err);
        if (tree < 0)
                return tree;
        return core_rootfs_attach_bind(rootfd, tree, dst, ret_err);
}

/* Paths under /proc and /sys hidden behind the verified /dev/null (files) or
 * an empty read-only tmpfs (directories). Source: Docker's default masked paths
 * (moby oci/defaults.go, maskedPaths) plus /proc/sysrq-trigger from its
 * read-only list, and /proc/key-users (every host uid's key quota use).
 * Left out on purpose: /proc/asound (absent on servers). */
static const char *const masked_files[] = {
        "/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/latency_stats", "/proc/timer_list",
        "/proc/timer_stats", "/proc/sched_debug", "/proc/sysrq-trigger",
        /* The host's block devices with their I/O counters, and its swap
         * devices: every sandbox's disk image is a loop device. */
        "/proc/partitions", "/proc/diskstats", "/proc/swaps",
        /* The flags, map counts and memory cgroups of every physical page
         * of the host (a side channel on other tenants' memory, and the
         * layout Rowhammer-style attacks need). */
        "/proc/kpageflags", "/proc/kpagecount", "/proc/kpagecgroup",
        /* Host-wide kernel memory layout, root-only (0400) on the host and
         * so readable by root inside a sandbox without a user namespace:
         * the slab caches, the vmalloc areas with their callers, and the
         * free pages per order; vmcoreinfo (0444) gives the physical
         * address of the kernel's vmcoreinfo note, which helps defeat
         * physical KASLR, in both modes. */
        "/proc/slabinfo", "/proc/vmallocinfo", "/proc/pagetypeinfo", "/sys/kernel/vmcoreinfo",
};
/* The /sys entries beyond Docker's: every view of the block devices (the
 * loop devices of all sandboxes' disk images, whose loop/backing_file names
 * the state directory and the sandbox, and whose stat is live I/O), their
 * backing devices (bdi), and /sys/fs as a whole (ext4's per-device
 * directories; cgroup, bpf, fuse, pstore and the rest are nothing a
 * sandbox uses: no cgroup filesystem is mounted inside). */
static const char *const masked_dirs[] = {
        "/proc/acpi", "/proc/scsi", "/proc/irq", "/proc/bus", "/proc/fs", "/sys/firmware",
        "/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block",
        "/sys/class/bdi", "/sys/devices/virtual/bdi", "/sys/class/bsg", "/sys/fs", "/sys/kernel/debug",
        /* The idle bit of every host page (kpageflags' companion). */
        "/sys/kernel/mm/page_idle",
};

static int mount_proc(int rootfd, sb_error **ret_err) {
        static const char *const none[] = {NULL};
        int r = mount_new(rootfd, "proc", none, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                          "/proc", ret_err);
        if (r < 0)
                return r;
        /* /proc/sys read-only: a bind of itself, remounted read-only. */
        _cleanup_close_ int procfd = openat2_beneath(rootfd, "/proc", O_PATH | O_DIRECTORY);
        if (procfd < 0)
                return sb_error_set(ret_err, procfd, NULL, NULL, "open /proc: %s", strerror(-procfd));
        return bind_path(rootfd, procfd, "sys", "/proc/sys", true, ret_err);
}

/* Binds the verified /dev/null over each of masked_files that exists: after
 * /proc and /sys are both mounted, since the list names files of both. */
static int mask_files(int rootfd, int devnull, sb_error **ret_err) {
        for (size_t i = 0; i < ELEMENTSOF(masked_files); i++) {
                _cleanup_close_ int t = openat2_beneath(rootfd, masked_files[i], O_PATH);
                if (t == -ENOENT)
                        continue;
                _cleanup_close_ int tree = open_tree(devnull, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
                                                                      AT_EMPTY_PATH);
                if (tree < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "clone /dev/null: %m");
                int r = attach_at(tree, t, masked_files[i], ret_err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* One empty read-only tmpfs, cloned over each of masked_dirs that exists
 * (as /dev/null is over masked_files): a bind per directory instead of a
 * filesystem instance each, which the sandbox's start made and its end
 * tore down one by one. Every clone keeps the mount's attributes
 * (read-only, nosuid, nodev, noexec), and nothing can be written to any. */
static int mask_dirs(int rootfd, sb_error **ret_err) {
        static const char *const ro_opts[] = {"size=0", "mode=0555", NULL};
        _cleanup_close_ int empty = -EBADF;
        for (size_t i = 0; i < ELEMENTSOF(masked_dirs); i++) {
                _cleanup_close_ int t = openat2_beneath(rootfd, masked_dirs[i], O_PATH | O_DIRECTORY);
                if (t < 0)
                        continue;
                if (empty < 0) {
                        /* The first is the instance itself; the others are
                         * clones of it, once it is attached (a detached
                         * mount cannot be cloned before Linux 6.15). */
                        empty = make_new("tmpfs", ro_opts,
                                         MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                                         ret_err);
                        if (empty < 0)
                                return empty;
                        int r = attach_at(empty, t, masked_dirs[i], ret_err);
                        if (r < 0)
                                return r;
                        continue;
                }
                _cleanup_close_ int tree = open_tree(empty, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
                if (tree < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "clone the empty tmpfs for %s: %m",
                                            masked_dirs[i]);
                int r = attach_at(tree, t, masked_dirs[i], ret_err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int open_verified_devnull(sb_error **ret_err);

int core_rootfs_mount_proc(int rootfd, sb_error **ret_err) {
        _cleanup_close_ int devnull = -EBADF;
        int r = core_rootfs_make_target(rootfd, "/proc", true);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "mount point /proc: %s", core_beneath_strerror(r));
        if ((r = mount_proc(rootfd, ret_err)) < 0)
                return r;
        static const char *const ro_opts[] = {"size=0", "mode=0555", NULL};
        for (size_t i = 0; i < ELEMENTSOF(masked_dirs); i++) {
                if (strncmp(masked_dirs[i], "/proc/", 6) != 0)
                        continue;
                _cleanup_close_ int t = openat2_beneath(rootfd, masked_dirs[i], O_PATH | O_DIRECTORY);
                if (t < 0)
                        continue;
                r = mount_new(rootfd, "tmpfs", ro_opts,
                              MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                              masked_dirs[i], ret_err);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < ELEMENTSOF(masked_files); i++) {
                if (strncmp(masked_files[i], "/proc/", 6) != 0)
                        continue;
                _cleanup_close_ int t = openat2_beneath(rootfd, masked_files[i], O_PATH);
                if (t == -ENOENT)
                        continue;
                if (devnull < 0 && (devnull = open_verified_devnull(ret_err)) < 0)
                        return devnull;
                _cleanup_close_ int tree = open_tree(devnull, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC |
                                                                      AT_EMPTY_PATH);
                if (tree < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "clone /dev/null: %m");
                if ((r = attach(rootfd, tree, masked_files[i], ret_err)) < 0)
                        return r;
        }
        return 0;
}

/* User namespace: device nodes on a tmpfs mounted there are unusable
 * (SB_I_NODEV) and mknod is refused, so each node is a read-write bind of
 * the host's own node onto an empty file (as bubblewrap does), checked to
 * be the device it should be. */
static int bind_dev_node(int devfd, const char *name, dev_t want, sb_error **ret_err) {
        char host[32];
        snprintf(host, sizeof(host), "/dev/%s", name);
        _cleanup_close_ int tree = open_tree(AT_FDCWD, host, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        struct stat st;
        if (tree < 0 || fstat(tree, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "bind host %s: %m", host);
        if (!S_ISCHR(st.st_mode) || st.st_rdev != want)
                return sb_error_set(ret_err, -ENODEV, NULL, NULL, "host %s is not the expected device", host);
        struct mount_attr attr = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, .propagation = MS_PRIVATE};
        if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount_setattr %s: %m", host);
        _cleanup_close_ int f = openat(devfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (f < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "create /dev/%s: %m", name);
        if (move_mount(tree, "", f, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount on /dev/%s: %m", name);
        return 0;
}

/* The minimal /dev of DESIGN §4. Device nodes are created with mknod on a
 * fresh tmpfs (not bound from the host), so nothing of the host's /dev is
 * shared; in a user namespace, where that cannot work, the six nodes are
 * binds of the host's (bind_dev_node), and nothing else of its /dev. */
static int mount_dev(int rootfd, bool userns, sb_error **ret_err) {
        static const char *const dev_opts[] = {"mode=0755", "size=65536", NULL};
        static const char *const pts_opts[] = {"newinstance", "ptmxmode=0666", "mode=0620", "gid=5", NULL};
        static const char *const shm_opts[] = {"mode=1777", "size=67108864", NULL};
        static const struct { const char *name; unsigned maj, min; mode_t mode; } nodes[] = {
                {"null", 1, 3, 0666}, {"zero", 1, 5, 0666}, {"full", 1, 7, 0666},
                {"random", 1, 8, 0666}, {"urandom", 1, 9, 0666}, {"tty", 5, 0, 0666},
        };
        static const struct { const char *name, *target; } links[] = {
                {"ptmx", "pts/ptmx"}, {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
                {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
        };
        int r = mount_new(rootfd, "tmpfs", dev_opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "/dev", ret_err);
        if (r < 0)
                return r;
        _cleanup_close_ int devfd = openat2_beneath(rootfd, "/dev", O_PATH | O_DIRECTORY);
        if (devfd < 0)
                return sb_error_set(ret_err, devfd, NULL, NULL, "open /dev: %s", strerror(-devfd));
        for (size_t i = 0; i < ELEMENTSOF(nodes); i++) {
                if (userns) {
                        r = bind_dev_node(devfd, nodes[i].name, makedev(nodes[i].maj, nodes[i].min), ret_err);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (mknodat(devfd, nodes[i].name, S_IFCHR | nodes[i].mode,
                            makedev(nodes[i].maj, nodes[i].min)) < 0 ||
                    fchmodat(devfd, nodes[i].name, nodes[i].mode, 0) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mknod /dev/%s: %m",
                                            nodes[i].name);
        }
        for (size_t i = 0; i < ELEMENTSOF(links); i++)
                if (symlinkat(links[i].target, devfd, links[i].name) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "symlink /dev/%s: %m",
                                            links[i].name);
        if (mkdirat(devfd, "pts", 0755) < 0 || mkdirat(devfd, "shm", 01777) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mkdir in /dev: %m");
        r = mount_new(rootfd, "devpts", pts_opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, "/dev/pts", ret_err);
        if (r < 0)
                return r;
        return mount_new(rootfd, "tmpfs", shm_opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "/dev/shm", ret_err);
}

/* User namespace: init is root of its own namespace only, so it cannot
 * traverse sandboxd's run directory (0700, host root) to reach cfg->rootfs.
 * The overlay sandboxd built goes instead onto a directory of a small
 * staging tmpfs of init's own, over /tmp of this mount namespace (any
 * directory every uid may traverse would do); pivot_root and the detach of
 * the old root take the staging tmpfs away again. Returns an O_PATH fd of
 * the overlay's root. */
static int attach_userns_root(const core_rootfs_config *cfg, sb_error **ret_err) {
        _cleanup_close_ int fsfd = fsopen("tmpfs", FSOPEN_CLOEXEC);
        if (fsfd < 0 || fsconfig(fsfd, FSCONFIG_SET_STRING, "size", "65536", 0) < 0 ||
            fsconfig(fsfd, FSCONFIG_SET_STRING, "mode", "0700", 0) < 0 ||
            fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "staging tmpfs: %m");
        _cleanup_close_ int staging = fsmount(fsfd, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
        if (staging < 0 || mkdirat(staging, "root", 0755) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "staging tmpfs: %m");
        if (move_mount(staging, "", AT_FDCWD, "/tmp", MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount staging tmpfs: %m");
        _cleanup_close_ int mp = openat(staging, "root", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (mp < 0 || move_mount(cfg->overlay_fd, "", mp, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount the idmapped overlay: %m");
        int rootfd = openat(staging, "root", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return rootfd >= 0 ? rootfd : sb_error_set(ret_err, negative_errno(), NULL, NULL, "open the overlay root: %m");
}

/* The lower layers, top first: one "lowerdir+" each (Linux 6.8), since
 * fsconfig(2) takes at most 256 bytes in one string and a sandbox on a few
 * layers under a long state directory needs more; an older kernel, which
 * knows no "lowerdir+", gets the whole list as "lowerdir". */
static int overlay_lowers(int fsfd, const char *lowers, sb_error **ret_err) {
        _cleanup_free_ char *list = strdup(lowers);
        if (!list)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        char *save = NULL;
        bool first = true;
        for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save), first = false)
                if (fsconfig(fsfd, FSCONFIG_SET_STRING, "lowerdir+", p, 0) < 0) {
                        if (first && errno == EINVAL && fsconfig(fsfd, FSCONFIG_SET_STRING, "lowerdir", lowers, 0) >= 0)
                                return 0;
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay lower layer %s: %m", p);
                }
        return 0;
}

/* Detached clones of the layers, kept open until the overlay is created
 * (closing the last fd of a detached mount dissolves it). */
typedef struct overlay_fds {
        int *fds;
        size_t n;
} overlay_fds;

static void overlay_fds_close(overlay_fds *o) {
        for (size_t i = 0; i < o->n; i++)
                close(o->fds[i]);
        free(o->fds);
        o->fds = NULL;
        o->n = 0;
}

static int overlay_fds_add(overlay_fds *o, int fd) {
        int *n = realloc(o->fds, (o->n + 1) * sizeof(int));
        if (!n) {
                close(fd);
                return -ENOMEM;
        }
        o->fds = n;
        o->fds[o->n++] = fd;
        return 0;
}

/* Gives overlayfs every layer as an fd of a detached clone of its
 * directory (FSCONFIG_SET_FD, Linux 6.13), so the mount's options show "/"
 * and not the host paths under the state directory (which
 * /proc/self/mountinfo would show inside). upper and work are opened
 * beneath one clone of their common parent: overlayfs wants both on the
 * same mount. Returns 1 when the kernel takes no fds for the layers (the
 * caller then names them by path), 0 when configured, or a negative errno. */
static int overlay_layer_fds(int fsfd, const core_rootfs_config *cfg, overlay_fds *keep, sb_error **ret_err) {
        _cleanup_free_ char *list = strdup(cfg->lower);
        _cleanup_free_ char *parent = strdup(cfg->upper);
        if (!list || !parent)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        char *slash = strrchr(parent, '/');
        size_t plen = slash ? (size_t)(slash - parent) : 0;
        if (!slash || plen == 0 || strncmp(cfg->work, parent, plen) != 0 || cfg->work[plen] != '/' ||
            strchr(cfg->work + plen + 1, '/'))
                return 1;  /* upper and work not side by side: by path */
        *slash = '\0';
        char *save = NULL;
        bool first = true;
        for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save), first = false) {
                int l = open_tree(AT_FDCWD, p, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
                if (l < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open_tree %s: %m", p);
                if (overlay_fds_add(keep, l) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                if (fsconfig(fsfd, FSCONFIG_SET_FD, "lowerdir+", NULL, l) < 0) {
                        if (first && errno == EINVAL)
                                return 1;
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay lower layer %s: %m", p);
                }
        }
        int pt = open_tree(AT_FDCWD, parent, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
        if (pt < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open_tree %s: %m", parent);
        if (overlay_fds_add(keep, pt) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        const char *keys[] = {"upperdir", "workdir"};
        const char *vals[] = {cfg->upper, cfg->work};
        for (size_t i = 0; i < 2; i++) {
                _cleanup_close_ int d = openat(pt, vals[i] + plen + 1, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (d < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", vals[i]);
                if (fsconfig(fsfd, FSCONFIG_SET_FD, keys[i], NULL, d) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay %s=%s: %m",
                                            keys[i], vals[i]);
        }
        return 0;
}

static int mount_overlay(const core_rootfs_config *cfg, sb_error **ret_err) {
        _cleanup_close_ int fsfd = fsopen("overlay", FSOPEN_CLOEXEC);
        if (fsfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsopen overlay: %m");
        _cleanup_(overlay_fds_close) overlay_fds keep = {.fds = NULL, .n = 0};
        int r = overlay_layer_fds(fsfd, cfg, &keep, ret_err);
        if (r < 0)
                return r;
        if (r > 0) {
                /* By path: a fresh context, nothing half-configured. */
                overlay_fds_close(&keep);
                close(fsfd);
                if ((fsfd = fsopen("overlay", FSOPEN_CLOEXEC)) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsopen overlay: %m");
                r = overlay_lowers(fsfd, cfg->lower, ret_err);
                if (r < 0)
                        return r;
                const char *keys[] = {"upperdir", "workdir"};
                const char *vals[] = {cfg->upper, cfg->work};
                for (size_t i = 0; i < 2; i++)
                        if (fsconfig(fsfd, FSCONFIG_SET_STRING, keys[i], vals[i], 0) < 0)
                                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay %s=%s: %m",
                                                    keys[i], vals[i]);
        }
        /* overlayfs makes every change of the upper layer with the
         * credentials of the thread that creates it (ovl_fill_super keeps
         * them as creator_cred), here host root's. Without CAP_SYS_RESOURCE
         * in them, ext4 keeps its root reserve from the sandbox's writes
         * (the image's resuid is CORE_DISK_RESERVE_ID, never fsuid 0):
         * the reserve stays for the daemon's own writes at the next start.
         * Cleared in this thread's effective set for the create only. */
        int had = core_caps_effective(CAP_SYS_RESOURCE, false);
        if (had < 0)
                return sb_error_set(ret_err, had, NULL, NULL, "overlay: drop CAP_SYS_RESOURCE: %s", strerror(-had));
        int cr = fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0 ? negative_errno() : 0;
        r = had ? core_caps_effective(CAP_SYS_RESOURCE, true) : 0;
        if (cr < 0)
                return sb_error_set(ret_err, cr, NULL, NULL, "create overlay: %s", strerror(-cr));
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "overlay: restore CAP_SYS_RESOURCE: %s", strerror(-r));
        _cleanup_close_ int mnt = fsmount(fsfd, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (mnt < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsmount overlay: %m");
        if (move_mount(mnt, "", AT_FDCWD, cfg->rootfs, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mount overlay on %s: %m",
                                    cfg->rootfs);
        return 0;
}

/* Opens the host's /dev/null and checks it is the real character device 1:3
 * before it is used to mask files (never a path from inside the sandbox). */
static int open_verified_devnull(sb_error **ret_err) {
        int fd = open("/dev/null", O_PATH | O_CLOEXEC | O_NOFOLLOW);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISCHR(st.st_mode) || st.st_rdev != makedev(1, 3)) {
                if (fd >= 0)
                        close(fd);
                return sb_error_set(ret_err, -ENODEV, NULL, NULL, "host /dev/null is not the null device");
        }
        return fd;
}

int core_rootfs_setup(const core_rootfs_config *cfg, sb_error **ret_err) {
        /* /tmp is bounded below the session's memory limit: tmpfs pages are
         * charged to the cgroup but to no task, so an unbounded /tmp could
         * fill the cgroup with memory the OOM killer cannot free, leaving
         * even sandbox-init unable to allocate. */
        char tmp_size[48];
        snprintf(tmp_size, sizeof(tmp_size), "size=%llu", (unsigned long long)cfg->tmp_size);
        const char *const tmp_opts[] = {"mode=1777", cfg->tmp_size ? tmp_size : NULL, NULL};
        static const char *const none[] = {NULL};
        int r;

        /* 1. Nothing we mount may propagate back to the host's namespace. */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "make / private: %m");

        _cleanup_close_ int devnull = open_verified_devnull(ret_err);
        if (devnull < 0)
                return devnull;

        /* 2. The overlay root, then everything else beneath it by fd. */
        _cleanup_close_ int rootfd = -EBADF;
        if (cfg->userns) {
                if (cfg->overlay_fd <= 2)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL, "user namespace without an overlay mount");
                rootfd = attach_userns_root(cfg, ret_err);
                if (rootfd < 0)
                        return rootfd;
        } else {
                r = mount_overlay(cfg, ret_err);
                if (r < 0)
                        return r;
                rootfd = open(cfg->rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
        }
        if (rootfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", cfg->rootfs);

        for (size_t i = 0; i < cfg->n_binds; i++) {
                if (cfg->binds[i].mkdir)
                        continue; /* a volume: last, below */
                if (cfg->binds[i].fd > 2) {
                        r = core_rootfs_attach_bind(rootfd, cfg->binds[i].fd, cfg->binds[i].dst, ret_err);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (cfg->userns)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL, "bind %s: no mount from sandboxd",
                                            cfg->binds[i].dst);
                r = bind_path(rootfd, AT_FDCWD, cfg->binds[i].src, cfg->binds[i].dst, cfg->binds[i].ro,
                              ret_err);
                if (r < 0)
                        return r;
        }
        if ((r = mount_proc(rootfd, ret_err)) < 0 || (r = mount_dev(rootfd, cfg->userns, ret_err)) < 0)
                return r;
        r = mount_new(rootfd, "tmpfs", tmp_opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, "/tmp", ret_err);
        if (r < 0)
                return r;
        /* sysfs of the new network namespace, read-only. */
        _cleanup_error_ sb_error *sys_err = NULL;
        r = mount_new(rootfd, "sysfs", none,
                      MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, "/sys",
                      &sys_err);
        /* A network namespace this user namespace does not own (a pod's,
         * joined: sandbox.create network.netns) gives no sysfs to mount
         * (the kernel's kobj_ns_current_may_mount). An empty read-only
         * tmpfs stands in, as mask_dirs masks; the host's /sys is never
         * bound instead (it would show the host's devices). Tools that
         * read interfaces use netlink, which works. */
        if (r == -EPERM && cfg->userns) {
                static const char *const ro_opts[] = {"size=0", "mode=0555", NULL};
                r = mount_new(rootfd, "tmpfs", ro_opts,
                              MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, "/sys",
                              ret_err);
        } else if (r < 0 && ret_err) {
                *ret_err = TAKE_PTR(sys_err);
        }
        if (r < 0)
                return r;
        if ((r = mask_dirs(rootfd, ret_err)) < 0 || (r = mask_files(rootfd, devnull, ret_err)) < 0)
                return r;
        /* Volumes last: on top of everything above (a volume at /tmp/x is
         * on the sandbox's /tmp). Only detached mounts sandboxd made, each
         * attached through RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS after its
         * mount point was made without following symlinks. */
        for (size_t i = 0; i < cfg->n_binds; i++) {
                if (!cfg->binds[i].mkdir)
                        continue;
                if (cfg->binds[i].fd <= 2)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL, "volume %s: no mount from sandboxd",
                                            cfg->binds[i].dst);
                if ((r = mkdir_beneath(rootfd, cfg->binds[i].dst, ret_err)) < 0 ||
                    (r = core_rootfs_attach_bind(rootfd, cfg->binds[i].fd, cfg->binds[i].dst, ret_err)) < 0)
                        return r;
        }

        /* Host mounts last: over /tmp, /dev and the rest, as asked. */
        for (size_t i = 0; i < cfg->n_mounts; i++) {
                struct stat st;
                if (cfg->mounts[i].fd <= 2 || fstat(cfg->mounts[i].fd, &st) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL, "mounts[%zu]: no mount from sandboxd", i);
                r = core_rootfs_make_target(rootfd, cfg->mounts[i].dst, S_ISDIR(st.st_mode));
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "mounts[%zu].destination %s: %s", i,
                                            cfg->mounts[i].dst, core_beneath_strerror(r));
                r = core_rootfs_attach_bind(rootfd, cfg->mounts[i].fd, cfg->mounts[i].dst, ret_err);
                if (r < 0)
                        return sb_error_prefix(ret_err, "mounts[%zu]", i);
        }

        if (cfg->hostname && sethostname(cfg->hostname, strlen(cfg->hostname)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "sethostname: %m");

        if (cfg->before_pivot)
                cfg->before_pivot();
        /* 3. pivot_root(".", ".") stacks the old root on the new one; detaching
         * it leaves no path back to the host's tree (as runc and crun do). */
        if (fchdir(rootfd) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chdir to new root: %m");
        if (syscall(SYS_pivot_root, ".", ".") < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pivot_root: %m");
        if (umount2(".", MNT_DETACH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "detach old root: %m");
        if (chdir("/") < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chdir /: %m");
        return 0;
}

void core_rootfs_config_clear(core_rootfs_config *cfg) {
        if (!cfg)
                return;
        free(cfg->rootfs);
        free(cfg->lower);
        free(cfg->upper);
        free(cfg->work);
        free(cfg->hostname);
        for (size_t i = 0; i < cfg->n_mounts; i++) {
                free(cfg->mounts[i].src);
                free(cfg->mounts[i].dst);
                if (cfg->mounts[i].fd > 2)
                        close(cfg->mounts[i].fd);
        }
        free(cfg->mounts);
        for (size_t i = 0; i < cfg->n_binds; i++) {
                free(cfg->binds[i].src);
                free(cfg->binds[i].dst);
                if (cfg->binds[i].fd > 2)
                        close(cfg->binds[i].fd);
        }
        free(cfg->binds);
        if (cfg->overlay_fd > 2)
                close(cfg->overlay_fd);
        *cfg = (core_rootfs_config){.overlay_fd = -EBADF};
}
