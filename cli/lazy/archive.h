/* The loader of cli/lazy/archive.c, which stands in for libarchive in the
 * programs that link it (sandboxctl, sandboxd-e2b, sandbox-init): every
 * archive_* function there loads the library at its first call. */
#pragma once
#include <stddef.h>

/* Loads libarchive now, once per process: from the files given to
 * lazy_archive_use_files, or else by name (dlopen(3) of libarchive.so.13
 * and what it needs, found as the dynamic loader finds them, through the
 * process's root); later calls and the archive_* functions use what this
 * first call found. Thread-safe. Returns 0, or -ENOENT when the library
 * could not be loaded (lazy_archive_error says why; each archive_*
 * function then exits with status 1 and a message naming it). */
int lazy_archive_load(void);

/* Makes the load (lazy_archive_load or the first archive_* call) take
 * libarchive and every library it needs from these open files (in order:
 * each after the ones it needs; the caller keeps them open until the load),
 * and never search for a library by name in the process's root: the files
 * are checked first (each DT_NEEDED the DT_SONAME of a file before it, the
 * last libarchive) and nothing is loaded when they are not so. For
 * sandbox-init: it opens the files before its root becomes the sandbox's,
 * and a copy's child loads them. More than 64 files: nothing is loaded. */
void lazy_archive_use_files(const int *fds, size_t n);

/* Why the last load from files failed (a static string). */
const char *lazy_archive_error(void);
