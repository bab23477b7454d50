/* Small helpers with no better home: base64 (OpenSSL), time, names,
 * atomic file writes, fd hygiene. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "libcore/error.h"
#include "libcore/macro.h"

/* Base64 (RFC 4648, standard alphabet, padded). Returns a malloc'd
 * NUL-terminated string owned by the caller, or NULL on ENOMEM. */
char *core_base64_encode(const void *data, size_t len);

/* Decodes RFC 4648 base64 (whitespace not allowed). On success stores a
 * malloc'd buffer (caller frees; NUL-terminated for convenience, the NUL not
 * counted) in *ret_data and its length in bytes in *ret_len and returns 0;
 * -EINVAL on malformed input, -ENOMEM. */
int core_base64_decode(const char *text, void **ret_data, size_t *ret_len);

/* Milliseconds since the Unix epoch (CLOCK_REALTIME). */
uint64_t core_now_ms(void);
/* Milliseconds on CLOCK_MONOTONIC. */
uint64_t core_monotonic_ms(void);

/* Formats epoch milliseconds as RFC 3339 UTC ("2026-11-30T05:35:19.123Z")
 * into buf (at least 32 bytes). Returns buf. */
char *core_format_time(uint64_t epoch_ms, char *buf, size_t size);

/* Parses core_format_time()'s RFC 3339 UTC form back to epoch ms; 0 when
 * it does not parse. */
uint64_t core_parse_time(const char *text);

/* True when name is a valid sandbox name: [a-z0-9][a-z0-9-]{0,62}
 * (DESIGN §3). */
bool core_name_is_valid(const char *name);

/* Fills buf (at least 9 bytes) with 8 random lowercase hex characters. */
void core_random_hex(char *buf, size_t nchars);

/* Writes all `len` bytes of p to fd, retrying short writes and EINTR.
 * Returns 0 or a negative errno (write(2)). */
int core_write_all(int fd, const void *p, size_t len);

/* Writes `len` bytes to `path` atomically: a temporary file in the same
 * directory, fsync, rename. Mode is applied to the new file. Returns 0 or a
 * negative errno. */
int core_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* Like core_write_file_atomic() without the fsync: readers see the old or
 * the new content, never a mix, but a crash may lose the write. For files
 * that are regenerated anyway (a sandbox's /etc/hosts). */
int core_write_file_replace(const char *path, const void *data, size_t len, mode_t mode);

/* True when `name` (one path component) has the form of the temporary file
 * core_write_file_atomic() and core_write_file_replace() write before their
 * rename: "<name>.tmp-" followed by 8 lowercase hex digits. */
bool core_is_write_temp(const char *name);

/* Removes, from directory `dir` (not recursively, not following a symlink
 * at `dir`), every regular file named like such a temporary: the leftovers
 * of writes a crash cut short. Only for start-up, when no write of this
 * process can be in progress. Returns the number removed (a missing `dir`
 * is 0) or a negative errno. */
int core_remove_write_temps(const char *dir);

/* Makes the removal of `parent`/`name` durable before any of it is removed:
 * renames it to `parent`/.<name>.del-<16 hex> (rename(2) is atomic) and
 * fsyncs `parent`. A crash afterwards leaves a tombstone, which start-up
 * finishes (core_is_tombstone) instead of loading a half-removed tree. On
 * success *ret_path (if not NULL; caller frees) is the tombstone's path.
 * Returns 0 or a negative errno (then nothing was renamed). */
int core_tombstone(const char *parent, const char *name, char **ret_path);
/* core_tombstone() with the fsync of `parent` only when `durable`. Without
 * it the rename survives a crash of the process (it is in the kernel's
 * cache at once) but not always a crash of the machine, which may bring
 * the entry back under its old name: only for a tree that start-up
 * removes anyway when found under that name (a non-persistent sandbox's
 * directory, reconcile; a directory under /run). Returns as
 * core_tombstone. */
int core_tombstone_ex(const char *parent, const char *name, bool durable, char **ret_path);

/* True when directory entry `name` is a tombstone of core_tombstone(). */
bool core_is_tombstone(const char *name);

/* Reads a whole file into a malloc'd NUL-terminated buffer (caller frees).
 * Fails with -EFBIG past max_bytes. Returns 0 or a negative errno. */
int core_read_file(const char *path, size_t max_bytes, char **ret_data, size_t *ret_len);

/* mkdir -p with the given mode for each created component. 0 or -errno. */
int core_mkdir_p(const char *path, mode_t mode);

/* Removes a directory tree without following symlinks and without crossing
 * into other mounts (fd-relative, like `rm -rf --one-file-system`). `path`
 * itself is the caller's (its last component is not followed); everything
 * below it may be a sandbox's: each subdirectory is opened beneath its
 * parent's fd with core_open_beneath() and must be the inode fstatat saw,
 * so a link or a swapped entry is left alone (-ELOOP, -ESTALE), and links
 * are unlinked, never followed. Missing path is success. Returns 0 or the
 * first negative errno seen, after trying every entry. */
int core_rm_rf(const char *path);

/* ---- paths inside a tree a sandbox can write ----------------------------
 * A sandbox's upper directory, its layers and its workspace hold whatever
 * root inside put there, symbolic links to host paths included. Host root
 * must never resolve a path through them by string: every lookup below
 * goes from a directory fd with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) (openat2(2)), so a
 * symlinked, magic-linked or ".." component fails (-ELOOP, -EXDEV) instead
 * of leading elsewhere. */

/* openat2(dirfd, path, flags | O_CLOEXEC, mode) resolved beneath dirfd with
 * no symlink and no magic link in any component, the last one included.
 * path is relative ("etc/hosts"). Returns the fd, or -ELOOP (a component
 * is a symlink), -EXDEV (it leaves dirfd: "..", absolute), -ENOTDIR,
 * -ENOENT or another negative errno. */
int core_open_beneath(int dirfd, const char *path, int flags, mode_t mode);

/* The directory `path` beneath dirfd, components that are missing made
 * with `mode` (mkdirat), each resolved as core_open_beneath() does. Returns
 * an O_DIRECTORY fd (O_CLOEXEC, caller closes) or a negative errno as
 * core_open_beneath(). */
int core_mkdir_beneath(int dirfd, const char *path, mode_t mode);

/* Replaces the entry `name` (one component) of directory dirfd with a
 * regular file holding `len` bytes: a new temporary file in dirfd
 * (O_CREAT | O_EXCL | O_NOFOLLOW), fsync when `durable`, renameat over
 * name. A symlink at name is replaced, never written through; a directory
 * there makes it fail (-EISDIR). Returns 0 or a negative errno. */
int core_write_file_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode, bool durable);

/* A short phrase for an error of the helpers above, for messages that
 * name the path: "is a symbolic link", "leads outside the sandbox's
 * tree", ... or strerror(-r). */
const char *core_beneath_strerror(int r);

/* A copy of `s` with every path that starts with directory `prefix` (an
 * absolute path; trailing slashes ignored) written with `with` in place of
 * the prefix: "open /var/lib/sandboxd/x: ..." with prefix /var/lib/sandboxd
 * and with "<stateDir>" gives "open <stateDir>/x: ...". A match must stand
 * as a whole path or its leading directories: not inside a longer name
 * (/var/lib/sandboxd2) nor after other path characters. A NULL, empty or
 * "/" prefix replaces nothing. Returns a malloc'd string the caller frees,
 * or NULL when out of memory. */
char *core_redact_path(const char *s, const char *prefix, const char *with);

/* True when `s` (NUL-terminated, NULL allowed: false) is an absolute path
 * other than "/" (slashes may repeat) with no "." or ".." component, so
 * that comparing two such paths as text compares where they lead before
 * any symlink (path_resolution(7)). */
bool core_path_is_plain_absolute(const char *s);

/* True when the absolute path `path` is the directory `dir` (absolute) or
 * lies beneath it, compared component by component as text (repeated
 * slashes count as one; "/proc" holds "/proc/sys" and "//proc/" but not
 * "/process"). Meant for paths core_path_is_plain_absolute() accepts:
 * "." and ".." are compared as names, not resolved. NULL: false. */
bool core_path_is_within(const char *path, const char *dir);

/* Runs the program at `path` (absolute) with `argv` (NULL-terminated),
 * stdin, stdout and stderr on /dev/null, PATH=/usr/sbin:/usr/bin:/sbin:/bin
 * as its only environment, no signal blocked and every disposition at its
 * default, and waits for it (posix_spawn(3), waitpid(2): safe from any
 * thread). Stores its wait status in *ret_status. Returns 0 once it ended
 * (whatever its status), or a negative errno when it could not be started
 * or waited for. */
int core_run_quiet(const char *path, char *const argv[], int *ret_status);

/* Starts a helper program (sandbox-netd) with stdout on a new pipe whose
 * read end goes to *ret_out, stdin on a second pipe whose write end goes to
 * *ret_in (or /dev/null when ret_in is NULL), stderr inherited, an empty
 * environment and no other fd; our ends are O_CLOEXEC. posix_spawn, so it
 * is safe from any thread. Stores the pid in *ret_pid. Returns 0 or a
 * negative errno. */
int core_spawn_helper(const char *path, char *const argv[], int *ret_out, int *ret_in, pid_t *ret_pid,
                      sb_error **ret_err);

/* core_spawn_helper() with the helper born in the cgroup v2 directory
 * open at `cgroup_fd` (clone3 CLONE_INTO_CGROUP, Linux 5.7; clone(2)), or
 * where the calling thread is with -EBADF; its v1 cgroups are the calling
 * thread's (core_cgroup_run_inside_child_v1). A fork (copy-on-write) that
 * runs only async-signal-safe calls before the exec; an exec failure is
 * reported through a close-on-exec pipe, so it is an error here with the
 * child reaped. Signals unblocked and default in the helper, stdin and
 * stdout as core_spawn_helper's, stderr inherited, an empty environment.
 * Returns 0 or a negative errno with *ret_err. */
int core_spawn_helper_in(const char *path, char *const argv[], int cgroup_fd, int *ret_out, int *ret_in,
                         pid_t *ret_pid, sb_error **ret_err);

/* Reads one '\n'-terminated line (without the newline) from a blocking or
 * non-blocking fd, waiting at most timeout_ms in total; reads byte by byte so
 * nothing after the line is consumed. Returns the length, -ETIMEDOUT, -EPIPE
 * at end of file, or another negative errno. */
int core_read_line_timeout(int fd, char *buf, size_t size, int timeout_ms);

/* For a child between fork and exec: every signal back to its default
 * disposition, then none blocked, so that neither the parent's handlers nor
 * its blocked set (sd-event blocks SIGCHLD, SIGTERM, ...) survive exec.
 * Async-signal-safe (sigaction and sigprocmask only). */
void core_signals_reset(void);

/* Writes a string to a file that already exists (sysfs, cgroupfs, procfs).
 * 0 or -errno. */
int core_write_string(const char *path, const char *s);

/* The candidate closest to `word` for a "did you mean" hint: the index in
 * `candidates` (n entries) of the one with the smallest optimal string
 * alignment distance (insertions, deletions, substitutions, adjacent
 * transpositions; Damerau 1964) ignoring ASCII case, when that distance is
 * small enough to be a typo: 0 (a case difference), at most 1 for words up
 * to 4 characters, 2 up to 8, 3 beyond; or a candidate that `word` is a
 * prefix of or that is a prefix of `word` ("timeout" for "timeoutMs").
 * Returns -1 when none is that close. Words longer than 64 bytes never
 * match (bounded work on hostile input). */
int core_closest_word(const char *word, const char *const *candidates, size_t n);

/* Cancellation of a thread's blocking work (the daemon's request.cancel).
 * A worker binds a flag it shares with the event loop; long loops in
 * libcore (downloads, clones, tree copies) poll core_cancel_requested() and
 * give up with -ECANCELED (reason "cancelled"), leaving their caller to
 * remove what was made, as after any failure. The flag is read with atomic
 * loads; the value CORE_CANCEL_REQUESTED means "stop now", anything else
 * "go on". Binding is per thread: helpers that run work on a thread of
 * their own carry the binding over (source_run_confined). NULL unbinds. */
#define CORE_CANCEL_REQUESTED 1
void core_cancel_bind(const int *flag);
const int *core_cancel_current(void);
bool core_cancel_requested(void);

/* Who holds a lock file open: scans /proc/<pid>/fd of every process but
 * this one for a descriptor of the same file as `fd` (st_dev and st_ino,
 * fstat(2) of the /proc magic link), for the start-up error of a daemon
 * whose flock(2) was refused. Writes the first holder's pid to *ret_pid,
 * and sets *ret_unexeced_child when that process still runs this program's
 * own executable (/proc/<pid>/exe is the same file as /proc/self/exe) but
 * in another user or PID namespace (/proc/<pid>/ns/user, ns/pid): a child
 * a sandboxd cloned into new namespaces that never exec'd, not a daemon.
 * Returns 1 when one was found, 0 when none (or /proc is not readable),
 * -errno when `fd` cannot be stat'ed. Not for a hot path: it reads every
 * process's fd table. */
int core_lock_holder(int fd, pid_t *ret_pid, bool *ret_unexeced_child);
