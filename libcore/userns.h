/* The optional user namespace of a sandbox: the host id pool check, the
 * uid_map/gid_map of a sandbox-init, the idmapped overlay root built by
 * sandboxd for it, and the probe that tells whether this host can do it.
 *
 * Mapping: sandbox ids 0..CORE_USERNS_SIZE-1 ↔ host ids base..base+SIZE-1,
 * one contiguous range per sandbox, uid and gid alike. Files in a sandbox's
 * upper directory and its snapshot layers keep the *sandbox* ids on disk
 * (canonical, as without a user namespace): the overlay is mounted by the
 * daemon over idmapped layers, so the range of a session can be any free
 * one and fork, snapshots, export and import never remap anything. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "libcore/error.h"

/* Ids per sandbox: the 16-bit id space programs expect (nobody = 65534). */
#define CORE_USERNS_SIZE 65536u

/* Checks that the host id pool [base, base+size) can hold sandbox ranges:
 * base ≥ CORE_USERNS_SIZE (host root and the usual system/user ids stay
 * outside), size a positive multiple of CORE_USERNS_SIZE, the end below
 * 2^32-1 ((uid_t)-1 is "no id"), and no overlap with any uid or gid named in
 * /etc/passwd or /etc/group (a host account owning sandbox files) or any
 * range in /etc/subuid or /etc/subgid (rootless containers of host users,
 * shadow-utils subid(5)). Files that do not exist are skipped.
 * `etc` is the directory holding those files ("/etc"; tests pass others).
 * Returns 0 or -EINVAL with a message naming the conflict. */
int core_userns_check_pool(const char *etc, uint64_t base, uint64_t size, sb_error **ret_err);

/* Writes "0 <host_base> CORE_USERNS_SIZE" to /proc/<pid>/uid_map and
 * gid_map (parent side, host root). setgroups stays "allow": the maps are
 * written by a process holding CAP_SETGID over the parent namespace, and
 * sandbox-init itself must drop the host groups it was cloned with
 * (setgroups(0)); a sandbox can only ever drop or set groups inside its own
 * range, so the CVE-2014-8989 concern (an unprivileged mapper shedding a
 * deny group) does not arise. Returns 0 or a negative errno. */
int core_userns_write_maps(pid_t pid, uint32_t host_base, sb_error **ret_err);

/* Makes the calling thread (only: raw syscalls, not glibc's process-wide
 * set*id broadcast) take effective uid and gid `host_base`, keeping real and
 * saved ids 0 and the permitted capabilities, with the effective set raised
 * back to the permitted one. A user namespace created by this thread (clone
 * CLONE_NEWUSER) is then owned by host_base instead of host root: the owner
 * is the creator's euid (user_namespaces(7)), and the kernel charges the
 * per-user counts of everything inside the namespace (inotify instances and
 * watches, user namespaces, mqueue bytes...; kernel/ucount.c inc_ucount) to
 * (parent namespace, owner) on top of the ids inside, so each sandbox's
 * quota is its own rather than host root's. Undo it with
 * core_userns_owner_leave as soon as the namespace exists: while it lasts
 * the thread acts as host_base for file access (fsuid follows euid).
 * Returns 0 or a negative errno (the thread's ids are restored on failure). */
int core_userns_owner_enter(uint32_t host_base);

/* Undoes core_userns_owner_enter: effective uid and gid 0 again (the kernel
 * copies the permitted capabilities back into the effective set when the
 * euid returns to 0). Returns 0 or a negative errno. */
int core_userns_owner_leave(void);

/* Builds the sandbox's root overlay in the caller's (host) user namespace:
 * every lower layer of `lowers` (colon-separated, top first, as overlayfs
 * takes them) and the directory `sbdir` holding "upper" and "work" are
 * cloned as detached mounts idmapped through `userns_fd` (sandbox id k on
 * disk ↔ host id host_base+k), and overlayfs is mounted on them with the
 * trusted.overlay xattrs of a host mount (the same on-disk format as a
 * sandbox without user namespace). The overlay's mounter credentials get
 * fsuid/fsgid host_base for the mount, so the work directory it creates is
 * owned by sandbox root (host root has no id in the idmap); the caller's
 * thread gets its fs ids and capabilities back before return.
 * Returns the detached overlay mount (O_CLOEXEC fd, nosuid, nodev; the
 * caller owns it and hands it to sandbox-init) or a negative errno. */
int core_userns_overlay(int userns_fd, const char *lowers, const char *sbdir, uint32_t host_base,
                        sb_error **ret_err);

/* A detached recursive clone of host path `src`, nosuid, nodev, read-only
 * when `ro`, private, for a sandbox-init in a user namespace to attach: as
 * root of its own namespace only, it cannot open paths under sandboxd's
 * 0700 directories, nor make a mount that host root's credentials would
 * then guard. Not idmapped on purpose: files stay owned by host ids outside
 * the sandbox's range (shown as nobody inside), so no sandbox id holds any
 * permission over them even if the mount were writable. Returns the fd
 * (O_CLOEXEC, caller owns) or a negative errno. */
int core_userns_bind_tree(const char *src, bool ro, sb_error **ret_err);

/* A detached clone of the directory `path` (relative to dfd, not empty)
 * idmapped through `userns_fd` (on-disk id k shows
 * as the id k maps to in that namespace, and a write by that id is stored
 * as k), nosuid, nodev, read-only when `ro` (set in the same
 * mount_setattr(2) call as the idmap), private propagation: a volume's
 * tree for one session (sandboxd/volume.c). The symlink at `path`'s last
 * component, if any, is not followed. Returns the fd (O_CLOEXEC, caller
 * owns) or a negative errno with *ret_err. Source: mount_setattr(2),
 * Documentation/filesystems/idmappings.rst. */
int core_userns_idmap_tree(int dfd, const char *path, int userns_fd, bool ro, sb_error **ret_err);

/* A throwaway process in a new user namespace (owned by the caller, host
 * root) with the uid_map and gid_map texts given ("0 0 1\n1000 997 1\n",
 * user_namespaces(7) format), for an idmapped mount that maps a few ids
 * only (a volume in a sandbox without a user namespace). *ret_pid is the
 * process (reap it with core_userns_release once the mount is made: the
 * mount keeps the namespace), *ret_fd its /proc/<pid>/ns/user. Returns 0
 * or a negative errno with *ret_err. */
int core_userns_hold_maps(const char *uid_map, const char *gid_map, pid_t *ret_pid, int *ret_fd,
                          sb_error **ret_err);

/* A throwaway process in a new user namespace mapped to host_base and
 * owned by it (as a sandbox's), for idmapping without a sandbox (the probe,
 * tests). *ret_pid is the process (reap it with core_userns_release),
 * *ret_fd its /proc/<pid>/ns/user. */
int core_userns_hold(uint32_t host_base, pid_t *ret_pid, int *ret_fd, sb_error **ret_err);
void core_userns_release(pid_t pid);

/* Whether this host can run user-namespace sandboxes with state under
 * `state_dir`: a user namespace, an idmapped mount of that filesystem and
 * an overlay on idmapped layers mounted and written once in a scratch
 * directory (removed again). Returns 0, or a negative errno with a message
 * saying what is missing ("idmapped mounts: ext2 does not support them"). */
int core_userns_probe(const char *state_dir, uint32_t host_base, sb_error **ret_err);

/* Whether a failure r (negative errno) of core_userns_probe comes from the
 * probe's own scratch work and may pass (ENOSPC, EDQUOT, EROFS, EIO,
 * ENOMEM, EMFILE, ENFILE, EAGAIN, EINTR, EBUSY, ETIMEDOUT, ENOBUFS: a full
 * or read-only state filesystem, a lack of memory or fds) rather than say
 * that the kernel or host cannot (EINVAL, ENOSYS, EPERM, EOPNOTSUPP from
 * unshare, clone, mount_setattr MOUNT_ATTR_IDMAP, overlay creation; errno
 * values per their man pages). A transient failure must not turn user
 * namespaces off: the caller probes again later. */
bool core_userns_probe_transient(int r);
