/* The loader of cli/lazy/archive.c, which stands in for libarchive in the
 * programs that link it (sandboxctl, sandboxd-e2b, sandbox-init): every
 * archive_* function there loads the library at its first call. */
#pragma once

/* Loads libarchive now (dlopen(3) of libarchive.so.13 and what it needs,
 * found as the dynamic loader finds them: through the file system root of
 * the calling process as it is now), once per process; later calls and the
 * archive_* functions use what this first call found. Thread-safe. For a
 * process that will change its root (sandbox-init's pivot_root), so that
 * the library comes from the host and never from the new root. Returns 0,
 * or -ENOENT when the library could not be loaded (each archive_* function
 * then exits with status 1 and a message naming it). */
int lazy_archive_load(void);
