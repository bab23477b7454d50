/* The sandbox's root filesystem, assembled inside its new mount namespace by
 * sandbox-init before anything else runs there: overlayfs (runtime lower,
 * the sandbox's own upper), read-only binds of host entries the runtime
 * needs, fresh /proc, a minimal /dev, /tmp and /dev/shm tmpfs, then
 * pivot_root with the old root detached. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "libcore/error.h"

typedef struct core_bind {
        char *src;  /* host path, resolved before pivot_root */
        char *dst;  /* path inside the sandbox root */
        bool ro;
        int fd;     /* > 2: a detached clone of src made by sandboxd (user
                     * namespace), attached instead of opening src; owned */
        bool mkdir; /* a volume (needs fd): attached after every other
                     * mount, its missing mount point directories made
                     * first (0755, never through a symlink) */
} core_bind;

typedef struct core_rootfs_config {
        char *rootfs;   /* empty mountpoint directory on the host (run dir) */
        char *lower;    /* runtime directory (read-only lower layer) */
        char *upper;    /* the sandbox's upper directory */
        char *work;     /* overlayfs work directory, same filesystem as upper */
        core_bind *binds;
        size_t n_binds;
        char *hostname;
        uint64_t tmp_size;  /* bytes for /tmp's tmpfs; 0: the kernel's default */
        /* User namespace (libcore/userns.h): init runs as root of its own
         * user namespace, where it may not mknod usable devices nor mount
         * an overlay with trusted xattrs. `overlay_fd` is then the root
         * overlay sandboxd built on idmapped layers (a detached mount, > 2,
         * owned by the config), attached instead of lower/upper/work; and
         * /dev's nodes are binds of the host's. */
        bool userns;
        int overlay_fd;     /* > 2 or -EBADF */
        /* Host mounts (sandbox.create "mounts"): detached trees sandboxd
         * made (fd > 2, src unused), attached last, over everything else,
         * each destination made when missing (core_rootfs_make_target). */
        core_bind *mounts;
        size_t n_mounts;
        /* Called once right before pivot_root, when every mount is made,
         * or NULL: what must still see the host's root does its last work
         * there (sandbox-init opens libarchive's files). */
        void (*before_pivot)(void);
} core_rootfs_config;

/* Runs in sandbox-init (PID 1 of new mount, PID, UTS, IPC, network and
 * cgroup namespaces, as root) before any sandbox code: makes every mount
 * private, mounts the overlay on cfg->rootfs, the binds, /proc (with
 * /proc/sys read-only), /dev, /dev/pts (newinstance), /dev/shm, /tmp,
 * read-only /sys, sets the hostname, pivot_root()s into the new root and
 * detaches the old one. On return the process's root and cwd are the
 * sandbox root. With cfg->userns (init is root of its own user namespace
 * only) the overlay and the binds are the mounts sandboxd passed in
 * (overlay_fd, binds[].fd) and /dev's nodes are binds of the host's.
 * Returns 0 or a negative errno with *ret_err naming the step. */
int core_rootfs_setup(const core_rootfs_config *cfg, sb_error **ret_err);

/* A detached recursive clone (open_tree OPEN_TREE_CLONE) of `src` relative
 * to dfd, nosuid, nodev, read-only when `ro`, private propagation, ready to
 * be attached with move_mount(2). Returns the fd (O_CLOEXEC, caller owns)
 * or a negative errno with *ret_err naming the path. */
int core_rootfs_clone_tree(int dfd, const char *src, bool ro, sb_error **ret_err);

/* A detached read-only mount (nosuid, nodev, noexec, private) of one
 * regular file `name` (no '/') holding the `size` bytes of `data`, mode
 * 0644, on a tmpfs made for it alone, ready to be attached with
 * move_mount(2) over a file. Its source is no host path: inside, the
 * mount's entry in /proc/self/mountinfo reads root "/NAME" on a tmpfs of
 * source "none", where a bind of a host file would show the file's path
 * (e.g. sandboxd's run directory). Returns the fd (O_CLOEXEC, caller owns)
 * or a negative errno with *ret_err naming the step. */
int core_rootfs_file_tree(const char *name, const void *data, size_t size, sb_error **ret_err);

/* The largest host file core_rootfs_attach_bind() copies when the file was
 * replaced on the host after its clone was made (ld.so.cache is tens of
 * KiB; openssl.cnf a few). */
#define CORE_ROOTFS_COPY_MAX_BYTES (16u * 1024 * 1024)

/* Attaches the detached bind `tree` (a clone of a host path, e.g. from
 * core_rootfs_clone_tree(); the caller keeps owning the fd) onto `dst`
 * beneath rootfd, the target resolved with openat2(RESOLVE_IN_ROOT |
 * RESOLVE_NO_SYMLINKS). When the clone's root is a regular file that was
 * renamed over on the host since (ldconfig's new /etc/ld.so.cache, a dpkg
 * conffile), the kernel refuses the move with ENOENT; a read-only tmpfs
 * copy of the file the clone still holds (at most
 * CORE_ROOTFS_COPY_MAX_BYTES, core_rootfs_file_tree()) is attached instead:
 * the same bytes the bind would have shown. Returns 0 or a negative errno
 * with *ret_err naming dst. */
int core_rootfs_attach_bind(int rootfd, int tree, const char *dst, sb_error **ret_err);

/* Makes the mount point `dst` (absolute or relative, inside the root
 * rootfd) when it is missing: its parents as directories (0755), itself a
 * directory when `dir`, else an empty regular file (0644); every component
 * resolved beneath rootfd with no symlink followed (core_open_beneath), so
 * a planted link fails (-ELOOP) instead of leading elsewhere. An existing
 * entry is left as it is. Returns 0 or a negative errno. */
int core_rootfs_make_target(int rootfd, const char *dst, bool dir);

/* Mounts a new procfs instance at /proc beneath rootfd (made when
 * missing, no symlink followed): the PID namespace of the calling process
 * (proc(5): a proc instance shows the mounter's PID namespace), /proc/sys
 * read-only, and the /proc entries of the sandbox's masks (Docker's masked
 * paths and the rest core_rootfs_setup hides) behind the verified host
 * /dev/null or an empty read-only tmpfs, as a sandbox's own /proc has them.
 * For a container with a PID namespace of its own
 * (libcore/init/container.c). Returns 0 or a negative errno with *ret_err
 * naming the step. */
int core_rootfs_mount_proc(int rootfd, sb_error **ret_err);

void core_rootfs_config_clear(core_rootfs_config *cfg);
