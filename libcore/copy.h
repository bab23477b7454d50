/* Copying a directory tree with everything an overlayfs upper layer holds:
 * owners, modes, times, hardlinks, symlinks, device nodes (overlayfs
 * whiteouts are 0:0 character devices) and extended attributes
 * (trusted.overlay.opaque and friends), POSIX ACLs and file flags. An
 * fd-based walk of our own (a sandbox's tree is hostile, see copy.c)
 * feeding either libarchive's disk writer (a copy) or an archive writer (a
 * tarball), as `bsdtar -cf - . | bsdtar -xpf -` does. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
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
 * nothing on another host). A regular file's data is read by its data
 * extents (lseek(2) SEEK_DATA/SEEK_HOLE): holes are never read nor
 * written, a sparse file becomes a sparse entry (pax, GNU.sparse 1.0) and,
 * through the disk writer, a sparse file. A file whose data extents hold
 * more than its allocated blocks (st_blocks) plus 1 MiB fails the walk
 * with reason limit_exceeded, so no copy writes more than its source
 * takes on disk. Blocking; for a worker thread; a cancel (core_cancel_bind)
 * is seen between entries and every 4 MiB of a file's data. Returns 0 or a
 * negative errno with *ret_err naming the entry. */
int core_tree_write(const char *src, struct archive *wr, const char *prefix, bool numeric_owners,
                    sb_error **ret_err);

/* Copies the tree below `src` into `dst` (which must not exist; it is
 * created with src's mode and owner), with core_tree_write() into
 * libarchive's disk writer. Returns 0 or a negative errno with *ret_err
 * naming the entry. On failure a partial `dst` may remain; the caller
 * removes it. */
int core_tree_copy(const char *src, const char *dst, sb_error **ret_err);

/* What core_tree_sync() records of each entry it copied (path, inode,
 * times, size, mode, owner, link count), to tell on the next pass what
 * changed since. Opaque; freed with core_tree_index_free(). */
typedef struct core_tree_index core_tree_index;
void core_tree_index_free(core_tree_index *idx);
DEFINE_TRIVIAL_CLEANUP_FUNC(core_tree_index, core_tree_index_free);

/* What one pass of core_tree_sync() did: entries looked at, entries
 * written (with `bytes` of regular file data, in bytes), entries removed
 * from dst. Added to, never reset. */
typedef struct core_tree_sync_stats {
        uint64_t entries, written, bytes, removed;
} core_tree_sync_stats;

/* One pass of an incremental copy of the tree below `src` into `dst`, as
 * the pre-copy of live migration: the first pass (*idx NULL, dst absent)
 * copies everything as core_tree_copy() does; each later pass rewrites in
 * dst only the entries that changed in src since the pass before, removes
 * those src no longer has, and leaves the rest. *idx is replaced by this
 * pass's records (caller frees it with core_tree_index_free()). The walk is
 * core_tree_write()'s, by fds beneath src (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS).
 *
 * Change is judged from inode, ctime and the other stat fields against a
 * pass's start (see copy.c), so a pass made while src is frozen after live
 * passes leaves dst exactly what a copy made while frozen would be, data,
 * modes, owners, xattrs, hardlinks, symlinks, removals and renames
 * included. live: src may change during this pass (the sandbox runs): an
 * entry that goes or is replaced while it is read is skipped and its
 * directory compared by name on the next pass, which must be made; each
 * live pass begins with syncfs(2) of src's file system (writes through
 * shared mappings then set the ctime too). Only for a file system whose
 * writeback write-protects mapped pages (ext4, the per-sandbox image):
 * tmpfs stores through a mapping set no time at all.
 *
 * Blocking; for a worker thread; stops with -ECANCELED between entries, and
 * within 4 MiB of a file's data, once the thread's cancel flag is set
 * (core_cancel_bind). Returns 0, or a
 * negative errno with *ret_err naming the entry; dst is then partial (the
 * caller removes it) and *idx unchanged. */
int core_tree_sync(const char *src, const char *dst, core_tree_index **idx, bool live, core_tree_sync_stats *stats,
                   sb_error **ret_err);
