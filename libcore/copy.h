/* Copying a directory tree with everything an overlayfs upper layer holds:
 * owners, modes, times, hardlinks, symlinks, device nodes (overlayfs
 * whiteouts are 0:0 character devices) and extended attributes
 * (trusted.overlay.opaque and friends), POSIX ACLs and file flags. An
 * fd-based walk of our own (a sandbox's tree is hostile, see copy.c)
 * feeding either libarchive's disk writer (a copy) or an archive writer (a
 * tarball), as `bsdtar -cf - . | bsdtar -xpf -` does. */
#pragma once

#include <stdbool.h>
#include <archive.h>
#include <archive_entry.h>
#include "libcore/error.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct archive, archive_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct archive_entry, archive_entry_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct archive_entry_linkresolver, archive_entry_linkresolver_free);

/* Walks the tree below `src` and writes every entry, data and xattrs
 * included, to the libarchive writer `wr`, named prefix/... (hardlinks
 * between entries kept); the top directory is written as "prefix/". src
 * itself is the caller's directory; what is below may be a sandbox's: the
 * walk goes by fds (openat2 beneath each parent, no symlink or magic link
 * followed), symlinks are copied as links and never followed, special
 * files never opened but O_PATH, other mounts below src not entered, and an
 * entry that changes type while it is copied fails the walk (-ESTALE). With
 * numeric_owners, owner and group names are not looked up (they mean
 * nothing on another host). Blocking; for a worker thread. Returns 0 or a
 * negative errno with *ret_err naming the entry. */
int core_tree_write(const char *src, struct archive *wr, const char *prefix, bool numeric_owners,
                    sb_error **ret_err);

/* Copies the tree below `src` into `dst` (which must not exist; it is
 * created with src's mode and owner), with core_tree_write() into
 * libarchive's disk writer. Returns 0 or a negative errno with *ret_err
 * naming the entry. On failure a partial `dst` may remain; the caller
 * removes it. */
int core_tree_copy(const char *src, const char *dst, sb_error **ret_err);
