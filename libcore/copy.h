/* Copying a directory tree with everything an overlayfs upper layer holds:
 * owners, modes, times, hardlinks, symlinks, device nodes (overlayfs
 * whiteouts are 0:0 character devices) and extended attributes
 * (trusted.overlay.opaque and friends). Built on libarchive's disk reader
 * and writer, as `bsdtar -cf - . | bsdtar -xpf -` is. */
#pragma once

#include "libcore/error.h"

/* Copies the tree below `src` into `dst` (which must not exist; it is
 * created with src's mode and owner). Symlinks are copied as links, never
 * followed; other mounts below src are not entered. Blocking; for a worker
 * thread. Returns 0 or a negative errno with *ret_err naming the entry. On
 * failure a partial `dst` may remain; the caller removes it. */
int core_tree_copy(const char *src, const char *dst, sb_error **ret_err);
