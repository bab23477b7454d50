/* Shared between source-tar.c and source-git.c: running a piece of source
 * materialisation on a dedicated thread whose filesystem identity is the
 * sandbox user's, and preparing the destination directory for it. */
#pragma once

#include "libcore/error.h"
#include "libcore/source.h"
#include <stdint.h>
#include <sys/types.h>

/* Work run on the helper thread. Returns 0 or a negative errno and may fill
 * *ret_err. */
typedef int (*source_fs_fn)(void *userdata, sb_error **ret_err);

/* Runs fn(userdata) on a new thread that first unshares its fs attributes
 * (unshare(CLONE_FS), so chroot/chdir/umask never touch the caller), then,
 * when root_fd >= 0, chroots into that directory and chdirs to "/", then
 * drops its supplementary groups and sets its fsgid/fsuid to gid/uid. All of
 * these are per-thread in Linux when done with raw syscalls (glibc's
 * setgroups() would broadcast to every thread, so it is not used).
 *
 * Why: with fsuid != 0 the kernel clears the thread's filesystem
 * capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER, ...), so every file
 * it creates is owned by uid:gid and it cannot write anywhere uid could not;
 * the chroot keeps even a library bug inside the destination.
 *
 * The calling thread blocks until the helper ends. Returns fn's result, or a
 * negative errno with *ret_err when the thread could not be set up. */
int source_run_confined(int root_fd, uid_t uid, gid_t gid, source_fs_fn fn, void *userdata,
                        sb_error **ret_err);

/* Opens `dest_dir` (an existing directory, not a symlink) O_DIRECTORY and
 * chowns it to uid:gid so the confined thread can create entries in it.
 * Returns the fd (owned by the caller) or a negative errno with *ret_err. */
int source_open_dest(const char *dest_dir, uid_t uid, gid_t gid, sb_error **ret_err);

/* Parses a file:// URL into a malloc'd absolute local path (percent-decoded
 * by libcurl's URL parser). Only an empty host or "localhost" is local.
 * Returns 0 or -EINVAL with *ret_err (field "source.url"). */
int source_file_url_path(const char *url, char **ret_path, sb_error **ret_err);

/* Opens a local source `path` with open(2) `flags` (O_CLOEXEC added) when
 * it lies under one of `roots` (NULL-terminated; NULL or empty: none, so
 * every local path is refused). The root is opened without following a
 * symlink anywhere in it, and the rest of path is resolved from the root's
 * fd with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_MAGICLINKS) (openat2(2)). Returns the fd, or a negative errno
 * with *ret_err (reason "source_failed", field `field`): -EACCES outside
 * every root (the message names localSourceRoots), -ELOOP for a symlink on
 * the way, -EINVAL for a path with "." or ".." components. */
int source_local_open(const char *const *roots, const char *path, int flags, const char *field,
                      sb_error **ret_err);

/* The calling thread's local peer (core_source_set_local_peer), or NULL. */
const core_peer *source_local_peer(void);

/* Copies the git repository at `path` (under `roots`, as source_local_open)
 * into a new directory under /var/tmp: HEAD, packed-refs, refs/ and
 * objects/ of its git dir (path/.git, or path itself when bare) and a
 * minimal config, each entry opened from its parent's fd without following
 * symlinks. A symlink anywhere in them or among config, info, commondir,
 * gitdir and shallow, objects/info/alternates, objects/info/http-alternates,
 * info/alternates, a .git that is not a directory, a commondir or gitdir
 * file, and anything but plain files and directories fail it with the path
 * named (-ELOOP). At most max_bytes (0: no bound) are copied (-EFBIG).
 * Meant for the confined thread: the copy is owned by, and read as, its
 * fsuid. *ret_dir (malloc'd) is the copy, which the caller removes. */
int source_local_git_copy(const char *const *roots, const char *path, uint64_t max_bytes, char **ret_dir,
                          sb_error **ret_err);

/* Reports progress to the calling thread's callback
 * (core_source_set_progress), if any. `stage` is a static string. */
void source_progress(const char *stage, uint64_t bytes, uint64_t total_bytes, uint64_t objects,
                     uint64_t total_objects);
