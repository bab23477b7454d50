/* The optional user namespace of a sandbox (userns.h): pool checks, maps,
 * the idmapped overlay root and the host probe.
 *
 * Runs in sandboxd (host root, host user namespace), on a worker thread for
 * a session start and on the main thread for the probe. The fs-id switch in
 * core_userns_overlay is per thread (raw setfsuid/capset, never glibc's
 * process-wide set*id broadcast), so other threads keep their credentials. */
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "libcore/fault.h"
#include "libcore/rootfs.h"
#include "libcore/userns.h"
#include "libcore/util.h"

/* ---- the pool ---------------------------------------------------------------- */

static bool overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
        return a < b + blen && b < a + alen;
}

/* name:x:ID:... (passwd, group) or name:START:COUNT (subuid, subgid). */
static int check_file(const char *etc, const char *file, bool subid, uint64_t base, uint64_t size,
                      sb_error **ret_err) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", etc, file);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return errno == ENOENT ? 0 : sb_error_set(ret_err, negative_errno(), NULL, NULL, "read %s: %m", path);
        char line[1024];
        while (fgets(line, sizeof(line), f)) {
                char name[256];
                unsigned long long a = 0, n = 1;
                int ok = subid ? sscanf(line, "%255[^:]:%llu:%llu", name, &a, &n) == 3
                               : sscanf(line, "%255[^:]:%*[^:]:%llu", name, &a) == 2;
                if (!ok || line[0] == '#')
                        continue;
                if (overlaps(base, size, a, n))
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                            "the user namespace pool %llu-%llu overlaps %s of '%s' in %s "
                                            "(%llu%s%llu); choose usernsBase/usernsSize outside every host "
                                            "account and subordinate id range",
                                            (unsigned long long)base, (unsigned long long)(base + size - 1),
                                            subid ? "the subordinate ids" : "the id", name, path, a,
                                            subid ? "+" : "", subid ? n : 0ULL);
        }
        return 0;
}

int core_userns_check_pool(const char *etc, uint64_t base, uint64_t size, sb_error **ret_err) {
        if (base < CORE_USERNS_SIZE || size == 0 || size % CORE_USERNS_SIZE || base + size > UINT32_MAX)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "the user namespace pool must start at %u or above, hold a positive multiple "
                                    "of %u ids and end below 4294967295",
                                    CORE_USERNS_SIZE, CORE_USERNS_SIZE);
        static const struct { const char *file; bool subid; } files[] = {
                {"passwd", false}, {"group", false}, {"subuid", true}, {"subgid", true},
        };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                int r = check_file(etc, files[i].file, files[i].subid, base, size, ret_err);
                if (r < 0)
                        return r;
        }
        return 0;
}

int core_userns_write_maps(pid_t pid, uint32_t host_base, sb_error **ret_err) {
        char path[64], map[64];
        snprintf(map, sizeof(map), "0 %u %u\n", host_base, CORE_USERNS_SIZE);
        static const char *const files[] = {"uid_map", "gid_map"};
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
                int r = core_write_string(path, map);
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", path, strerror(-r));
        }
        return 0;
}

/* ---- the namespace owner ------------------------------------------------------ */

/* Effective capabilities := permitted, for this thread. */
static int raise_effective(void) {
        struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
        struct __user_cap_data_struct d[2];
        if (syscall(SYS_capget, &h, d) < 0)
                return negative_errno();
        d[0].effective = d[0].permitted;
        d[1].effective = d[1].permitted;
        return syscall(SYS_capset, &h, d) < 0 ? negative_errno() : 0;
}

int core_userns_owner_enter(uint32_t host_base) {
        /* gid first: after the euid leaves 0 the effective set is empty
         * (capabilities(7), "Effect of user ID changes on capabilities").
         * Real and saved ids stay 0, so the permitted set survives and the
         * way back needs no privilege. */
        if (syscall(SYS_setresgid, -1, host_base, -1) < 0)
                return negative_errno();
        if (syscall(SYS_setresuid, -1, host_base, -1) < 0) {
                int r = negative_errno();
                (void)syscall(SYS_setresgid, -1, 0, -1);
                return r;
        }
        /* Back to the full effective set: clone3 into the sandbox's cgroup
         * checks write access to cgroup.procs with the cloning thread's
         * credentials (kernel/cgroup/cgroup.c cgroup_css_set_fork), and that
         * file is host root's. */
        int r = raise_effective();
        if (r < 0)
                (void)core_userns_owner_leave();
        return r;
}

int core_userns_owner_leave(void) {
        if (syscall(SYS_setresuid, -1, 0, -1) < 0 || syscall(SYS_setresgid, -1, 0, -1) < 0)
                return negative_errno();
        /* The kernel restores effective := permitted on the euid's return
         * to 0; make it so even if a securebit kept it from doing so. */
        return raise_effective();
}

/* ---- the overlay --------------------------------------------------------------- */

/* A detached clone of `path`, idmapped through userns_fd. */
static int idmapped_clone(const char *path, int userns_fd, sb_error **ret_err) {
        _cleanup_close_ int tree = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (tree < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open_tree %s: %m", path);
        struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns_fd};
        if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "idmapped mount of %s: %m", path);
        return TAKE_FD(tree);
}

/* This thread's fs ids become `id`; effective capabilities are raised back
 * to the permitted set, which a switch of fsuid away from 0 clears for the
 * file capabilities (capabilities(7)). id 0 undoes it. */
static int set_fs_ids(uint32_t id) {
        syscall(SYS_setfsgid, id);
        syscall(SYS_setfsuid, id);
        if ((uint32_t)syscall(SYS_setfsuid, -1) != id || (uint32_t)syscall(SYS_setfsgid, -1) != id)
                return -EPERM;
        return raise_effective();
}

/* Every detached layer mount, kept open until the overlay is created:
 * closing the last fd of a detached mount dissolves it, and overlayfs
 * clones the layers' mounts only at create. */
typedef struct layer_fds {
        int fds[64];
        size_t n;
} layer_fds;

static void layer_fds_close(layer_fds *l) {
        for (size_t i = 0; i < l->n; i++)
                close(l->fds[i]);
        l->n = 0;
}

static int overlay_layers(int fsfd, int userns_fd, const char *lowers, const char *sbdir, layer_fds *keep,
                          sb_error **ret_err) {
        _cleanup_free_ char *list = strdup(lowers);
        if (!list)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        char *save = NULL;
        for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
                if (keep->n + 1 >= ELEMENTSOF(keep->fds))
                        return sb_error_set(ret_err, -E2BIG, NULL, NULL, "more than %zu layers",
                                            ELEMENTSOF(keep->fds) - 1);
                int l = idmapped_clone(p, userns_fd, ret_err);
                if (l < 0)
                        return l;
                keep->fds[keep->n++] = l;
                if (fsconfig(fsfd, FSCONFIG_SET_FD, "lowerdir+", NULL, l) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay lower layer %s: %m", p);
        }
        /* upper and work through one idmapped mount: overlayfs wants both on
         * the same mount. */
        int sb = idmapped_clone(sbdir, userns_fd, ret_err);
        if (sb < 0)
                return sb;
        keep->fds[keep->n++] = sb;
        static const char *const dirs[] = {"upper", "work"};
        static const char *const keys[] = {"upperdir", "workdir"};
        for (size_t i = 0; i < 2; i++) {
                _cleanup_close_ int d = openat(sb, dirs[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (d < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s/%s: %m", sbdir, dirs[i]);
                if (fsconfig(fsfd, FSCONFIG_SET_FD, keys[i], NULL, d) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "overlay %s: %m", keys[i]);
        }
        return 0;
}

int core_userns_overlay(int userns_fd, const char *lowers, const char *sbdir, uint32_t host_base,
                        sb_error **ret_err) {
        _cleanup_close_ int fsfd = fsopen("overlay", FSOPEN_CLOEXEC);
        if (fsfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsopen overlay: %m");
        _cleanup_(layer_fds_close) layer_fds keep = {.n = 0};
        int r = overlay_layers(fsfd, userns_fd, lowers, sbdir, &keep, ret_err);
        if (r < 0)
                return r;
        /* overlayfs records its mounter's credentials at create and does
         * every upper-layer operation with them: with fsuid 0, which the
         * idmap cannot express, creating work/work fails with EOVERFLOW. */
        r = set_fs_ids(host_base);
        if (r >= 0 && fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
                r = negative_errno();
        int r2 = set_fs_ids(0);
        if (r < 0 || r2 < 0)
                return sb_error_set(ret_err, r < 0 ? r : r2, NULL, NULL,
                                    "create overlay on idmapped layers: %s", strerror(-(r < 0 ? r : r2)));
        int mnt = fsmount(fsfd, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
        if (mnt < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "fsmount overlay: %m");
        return mnt;
}

int core_userns_bind_tree(const char *src, bool ro, sb_error **ret_err) {
        return core_rootfs_clone_tree(AT_FDCWD, src, ro, ret_err);
}

/* ---- idmapped trees of volumes ---------------------------------------------- */

int core_userns_idmap_tree(int dfd, const char *path, int userns_fd, bool ro, sb_error **ret_err) {
        _cleanup_close_ int tree = open_tree(dfd, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
        if (tree < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open_tree %s: %m", path);
        /* One call: the tree never exists idmapped but writable when it is
         * to be read-only. nosuid and nodev: a file root of one sandbox
         * made is nothing to any other. */
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (ro ? MOUNT_ATTR_RDONLY : 0),
                .userns_fd = (uint64_t)userns_fd,
                .propagation = MS_PRIVATE,
        };
        if (mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "idmapped mount of %s: %m", path);
        return TAKE_FD(tree);
}

int core_userns_hold_maps(const char *uid_map, const char *gid_map, pid_t *ret_pid, int *ret_fd,
                          sb_error **ret_err) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
        pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid == 0) {
                /* As core_userns_hold's child: waits for EOF, raw syscalls. */
                char c;
                if (dup2(p[0], STDIN_FILENO) < 0 || syscall(SYS_close_range, STDIN_FILENO + 1, ~0U, 0) < 0)
                        _exit(1);
                while (read(STDIN_FILENO, &c, 1) < 0 && errno == EINTR)
                        ;
                _exit(0);
        }
        int err = pid < 0 ? negative_errno() : 0;
        close(p[0]);
        if (pid < 0) {
                close(p[1]);
                return sb_error_set(ret_err, err, NULL, NULL, "clone a user namespace: %s", strerror(-err));
        }
        char path[64];
        int r = 0;
        const char *maps[2] = {uid_map, gid_map};
        static const char *const files[] = {"uid_map", "gid_map"};
        for (size_t i = 0; i < 2 && r >= 0; i++) {
                snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
                r = core_write_string(path, maps[i]);
                if (r < 0)
                        sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", path, strerror(-r));
        }
        snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
        int fd = r < 0 ? r : open(path, O_RDONLY | O_CLOEXEC);
        if (r >= 0 && fd < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", path);
        close(p[1]);
        if (r < 0) {
                waitpid(pid, NULL, 0);
                return r;
        }
        *ret_pid = pid;
        *ret_fd = fd;
        return 0;
}

/* ---- probe ----------------------------------------------------------------- */

int core_userns_hold(uint32_t host_base, pid_t *ret_pid, int *ret_fd, sb_error **ret_err) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
        /* Owned by host_base, as a sandbox's namespace (core_spawn_init).
         * The child only waits for the pipe to close: raw syscalls only. */
        int r = core_userns_owner_enter(host_base);
        if (r < 0) {
                close(p[0]);
                close(p[1]);
                return sb_error_set(ret_err, r, NULL, NULL, "take the ids of %u: %s", host_base, strerror(-r));
        }
        pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid == 0) {
                /* Nothing of the daemon's stays here while it waits (its
                 * locks, its sockets, the write ends of other children's
                 * pipes): only the read end, so the parent's close or
                 * death is EOF. */
                char c;
                if (dup2(p[0], STDIN_FILENO) < 0 || syscall(SYS_close_range, STDIN_FILENO + 1, ~0U, 0) < 0)
                        _exit(1);
                while (read(STDIN_FILENO, &c, 1) < 0 && errno == EINTR)
                        ;
                _exit(0);
        }
        int clone_err = pid < 0 ? negative_errno() : 0;
        r = core_userns_owner_leave();
        close(p[0]);
        if (pid < 0 || r < 0) {
                close(p[1]);
                if (pid > 0)
                        waitpid(pid, NULL, 0);
                return pid < 0 ? sb_error_set(ret_err, clone_err, NULL, NULL, "clone a user namespace: %s",
                                              strerror(-clone_err))
                               : sb_error_set(ret_err, r, NULL, NULL, "restore the ids of root: %s", strerror(-r));
        }
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
        r = core_userns_write_maps(pid, host_base, ret_err);
        int fd = r < 0 ? r : open(path, O_RDONLY | O_CLOEXEC);
        if (r >= 0 && fd < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", path);
        /* The namespace outlives its process through the fd: let it go now. */
        close(p[1]);
        if (r < 0) {
                waitpid(pid, NULL, 0);
                return r;
        }
        *ret_pid = pid;
        *ret_fd = fd;
        return 0;
}

void core_userns_release(pid_t pid) {
        if (pid > 0)
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
}

static int probe_in(const char *dir, uint32_t host_base, sb_error **ret_err) {
        _cleanup_free_ char *lower = NULL, *sbdir = NULL, *upper = NULL, *work = NULL, *written = NULL;
        if (asprintf(&lower, "%s/lower", dir) < 0 || asprintf(&sbdir, "%s/sb", dir) < 0 ||
            asprintf(&upper, "%s/sb/upper", dir) < 0 || asprintf(&work, "%s/sb/work", dir) < 0 ||
            asprintf(&written, "%s/sb/upper/probe", dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (mkdir(lower, 0755) < 0 || mkdir(sbdir, 0700) < 0 || mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "probe directories: %m");
        pid_t pid = 0;
        _cleanup_close_ int nsfd = -EBADF;
        int r = core_userns_hold(host_base, &pid, &nsfd, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "user namespace");
        core_userns_release(pid);
        _cleanup_close_ int mnt = core_userns_overlay(nsfd, lower, sbdir, host_base, ret_err);
        if (mnt < 0)
                return mnt;
        /* Written as sandbox root (host_base) through the overlay, it must
         * land on disk as id 0: the layers keep sandbox ids. */
        r = set_fs_ids(host_base);
        int fd = r < 0 ? r : openat(mnt, "probe", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (r >= 0 && fd < 0)
                r = negative_errno();
        (void)set_fs_ids(0);
        if (fd >= 0)
                close(fd);
        struct stat st;
        if (r >= 0 && stat(written, &st) < 0)
                r = negative_errno();
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "write through the idmapped overlay: %s", strerror(-r));
        if (st.st_uid != 0 || st.st_gid != 0)
                return sb_error_set(ret_err, -EOPNOTSUPP, NULL, NULL, "idmapped overlay stored ids %u:%u, not 0:0",
                                    st.st_uid, st.st_gid);
        return 0;
}

int core_userns_probe(const char *state_dir, uint32_t host_base, sb_error **ret_err) {
        if (access("/proc/self/ns/user", F_OK) < 0)
                return sb_error_set(ret_err, -EOPNOTSUPP, NULL, NULL, "the kernel has no user namespaces");
        _cleanup_free_ char *dir = NULL;
        if (asprintf(&dir, "%s/.userns-probe-XXXXXX", state_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int fr = core_fault_error("userns.probe");
        if (fr < 0)
                return sb_error_set(ret_err, fr, NULL, NULL, "mkdtemp in %s: injected failure: %s", state_dir,
                                    strerror(-fr));
        if (!mkdtemp(dir))
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mkdtemp in %s: %m", state_dir);
        int r = probe_in(dir, host_base, ret_err);
        core_rm_rf(dir);
        return r;
}

bool core_userns_probe_transient(int r) {
        switch (-r) {
        case ENOSPC: case EDQUOT: case EROFS: case EIO: case ENOMEM: case EMFILE: case ENFILE:
        case EAGAIN: case EINTR: case EBUSY: case ETIMEDOUT: case ENOBUFS:
                return true;
        default:
                return false;
        }
}
