/* Copying a directory tree with everything an overlayfs upper layer holds:
 * owners, modes, times, hardlinks, symlinks, device nodes (overlayfs
 * whiteouts are 0:0 character devices) and extended attributes
 * (trusted.overlay.opaque and friends). Built on libarchive's disk reader,
 * feeding either its disk writer (a copy) or an archive writer (a tarball),
 * as `bsdtar -cf - . | bsdtar -xpf -` does. */
#pragma once

#include <stdbool.h>
#include <archive.h>
#include <archive_entry.h>
#include "libcore/error.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(struct archive, archive_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct archive_entry, archive_entry_free);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct archive_entry_linkresolver, archive_entry_linkresolver_free);

/* Walks the tree below `src` (symlinks copied as links, never followed;
 * other mounts below src not entered) and writes every entry, data
 * included, to the libarchive writer `wr`, its path (and hardlink target)
 * rewritten from src/... to prefix/...; the top directory is written as
 * "prefix/". With numeric_owners, owner and group names are not looked up
 * (they mean nothing on another host). Blocking; for a worker thread.
 * Returns 0 or a negative errno with *ret_err naming the entry. */
int core_tree_write(const char *src, struct archive *wr, const char *prefix, bool numeric_owners,
                    sb_error **ret_err);

/* Copies the tree below `src` into `dst` (which must not exist; it is
 * created with src's mode and owner), with core_tree_write() into
 * libarchive's disk writer. Returns 0 or a negative errno with *ret_err
 * naming the entry. On failure a partial `dst` may remain; the caller
 * removes it. */
int core_tree_copy(const char *src, const char *dst, sb_error **ret_err);
