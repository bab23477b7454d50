/* Shared between source-tar.c and source-git.c: running a piece of source
 * materialisation on a dedicated thread whose filesystem identity is the
 * sandbox user's, and preparing the destination directory for it. */
#pragma once

#include "libcore/error.h"
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
