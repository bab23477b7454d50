/* Sandbox sources: tarballs (libarchive) and git repositories (libgit2),
 * materialised into a sandbox's /workspace directory on the host side
 * before the sandbox starts.
 *
 * Threat: the archive or repository is hostile. Nothing it contains may land
 * outside the destination directory (`..`, absolute names, symlinks followed
 * by later members, hardlinks to outside paths), no device node or setuid bit
 * survives, and no repository-controlled program (hooks, ext:: transports,
 * option-looking URLs) ever runs.
 *
 * All functions here are blocking and meant for a worker thread; they may
 * change the calling thread's fs attributes (unshare(CLONE_FS), chroot,
 * setfsuid) only inside a child thread or process of their own, never the
 * caller's. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "libcore/error.h"

typedef struct core_git_source {
        const char *url;        /* https://, http://, git://, file:// */
        const char *revision;   /* commit, tag or branch; NULL = remote HEAD */
        unsigned depth;         /* 0 = full history */
        const char *username;   /* NULL = none */
        const char *password;   /* NULL = none; never logged or put in errors */
        /* file:// only: the directories a local repository may lie under
         * (NULL-terminated; NULL = none, so file:// is refused), and the
         * most bytes its copy may take (0 = no bound). */
        const char *const *local_roots;
        uint64_t max_local_bytes;
} core_git_source;

/* Checks a git URL before anything runs: scheme must be https, http, git or
 * file; `ext::` and other transports, scp-like "host:path", any URL whose
 * host, path or user part starts with '-' (option injection such as
 * `--upload-pack=…`, `ssh://-oProxyCommand=…`), and control characters are
 * refused. Returns 0, or -EINVAL with *ret_err (reason "source_failed",
 * field "source.url") naming what was wrong. */
int core_git_url_check(const char *url, sb_error **ret_err);

/* Clones `src` into `dest_dir` (an existing, empty directory, which is
 * chowned to uid:gid), then checks out `revision` if given (detached HEAD).
 * A file:// repository must lie under one of src->local_roots and is never
 * read in place: its git dir is first copied, refusing any symlink,
 * alternates file, gitfile or commondir (source-internal.h,
 * source_local_git_copy), and the clone is made from the copy.
 * With `depth` > 0 the clone is shallow (that many commits) and is made by
 * the git program (/usr/bin/git; libgit2 1.5 has no shallow fetch), run as
 * uid:gid with an empty environment, no system or global config, hooks,
 * templates, credential helpers, prompts, submodules and redirects off, and
 * only the http, https and git transports (file for the checked copy of a
 * local source); the checks below run first all the same. Files are owned
 * by uid:gid (the clone
 * runs as that user, so a file:// repository must be readable by it).
 * Hooks never run (libgit2 does not run them; core.hooksPath is not
 * consulted); url.*.insteadOf is not applied. Returns 0 or a negative errno
 * with *ret_err carrying libgit2's message (reason "source_failed").
 * Credentials never appear in the error text. */
int core_source_git_clone(const core_git_source *src, const char *dest_dir, uid_t uid, gid_t gid,
                          sb_error **ret_err);

/* Addresses a source is never fetched from, whatever the URL says:
 * link-local (169.254.0.0/16, fe80::/10: cloud metadata lives there),
 * unspecified, multicast and broadcast (RFC 6890). Sources are fetched by the
 * daemon from the host's network, outside every sandbox's policy, so this is
 * the guard against a URL an agent supplied reaching the metadata service.
 * Returns a static description of the range, or NULL when allowed. */
struct sockaddr;
const char *core_source_address_forbidden(const struct sockaddr *sa);

/* Resolves the host of a network URL (http, https, git) and fails with
 * -EACCES (field "source.url") when any of its addresses is forbidden
 * (core_source_address_forbidden). file:// and paths pass. Used before a git
 * clone, whose connections cannot be hooked; for downloads the connect
 * itself is checked as well, redirects included. */
int core_source_host_check(const char *url, sb_error **ret_err);

/* A stricter refusal of source addresses, for the calling thread only (and
 * the processes it forks, such as the git program's confined child): when
 * set, core_source_address_forbidden() also refuses every address `guard`
 * returns non-NULL for, and any refusal at all then reads as guard(NULL),
 * one text for every range, so an error does not tell which kind of
 * address (or whether a port there is open) was behind a URL. With a guard
 * the git clone always runs the git program (redirects off, addresses
 * pinned) and refuses git:// (its connect cannot be pinned). NULL clears
 * it. sandboxd sets it for sources a remote tag role supplied. */
typedef const char *(*core_source_address_guard)(const struct sockaddr *sa);
void core_source_set_address_guard(core_source_address_guard guard);
/* The calling thread's guard, or NULL. */
core_source_address_guard core_source_get_address_guard(void);

/* Progress of a source fetch, for a person waiting on a slow create. */
typedef struct core_source_progress {
        const char *stage;      /* static: "cloning" (git objects arriving), "resolving" (git
                                   deltas), "checking out", "downloading", "extracting" */
        uint64_t bytes;         /* cloning, resolving: bytes received; downloading: bytes
                                   downloaded; extracting: bytes written; checking out: 0 */
        uint64_t total_bytes;   /* downloading: the size the server announced; else 0 (unknown) */
        uint64_t objects;       /* cloning: objects received; resolving: deltas resolved;
                                   checking out: files written; else 0 */
        uint64_t total_objects; /* of how many (0: unknown or not counted) */
} core_source_progress;

/* Called with the progress of the calling thread's fetch; it may be called
 * very often (each network read, each archive block), so it must be cheap
 * and do its own rate limiting. It runs on the thread that fetches (the
 * caller's, or the confined helper thread that replaces it while the
 * caller waits), never two at once for one fetch. */
typedef void (*core_source_progress_fn)(const core_source_progress *p, void *userdata);

/* Sets the calling thread's progress callback for the git clones and
 * tarball fetches it runs next (carried into the confined helper thread,
 * source-internal.h); fn NULL clears it. Reported: "cloning" as the clone
 * starts, then received bytes and objects, "resolving" and "checking out"
 * (from libgit2's callbacks, or for a clone by the git program, depth or a
 * guarded client, from the lines of its --progress). A tarball reports
 * "downloading" (http, https) and "extracting". */
void core_source_set_progress(core_source_progress_fn fn, void *userdata);
/* The calling thread's callback and its userdata (NULL when none). */
core_source_progress_fn core_source_get_progress(void **ret_userdata);

/* Opens the host path `path` with open(2) `flags` (O_CLOEXEC added) when
 * it lies under one of `roots` (NULL-terminated; NULL or empty: none), as
 * local sources are read: the root opened without following a symlink
 * anywhere in it, the rest resolved from the root's fd with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS).
 * For the daemon's other host paths a tenant names (runtime and snapshot
 * imports, snapshot exports; docs/SECURITY.md). Returns the fd (owned by
 * the caller), or a negative errno with *ret_err (reason "source_failed",
 * field `field`): -EACCES outside every root (the message names
 * localSourceRoots), -ELOOP for a symlink on the way, -EINVAL for a path
 * with "." or ".." components. */
int core_source_local_open(const char *const *roots, const char *path, int flags, const char *field,
                           sb_error **ret_err);

/* A local user's filesystem identity (a client's SO_PEERCRED uid and gid
 * and its SO_PEERGROUPS): host paths it names are opened as it. */
typedef struct core_peer {
        uid_t uid;
        gid_t gid;
        const gid_t *groups;    /* borrowed */
        size_t n_groups;
} core_peer;

/* Runs fn(userdata) on a new thread whose fsuid, fsgid and supplementary
 * groups are `peer`'s (the kernel keeps credentials per thread; raw
 * syscalls, since glibc's setgroups changes every thread of the process).
 * A non-zero fsuid drops the filesystem capabilities (CAP_DAC_OVERRIDE,
 * CAP_DAC_READ_SEARCH, CAP_FOWNER, ...), so every open and access check
 * fn makes is judged as that user's own would be. The identity ends with
 * the thread. Returns fn's result, or a negative errno with *ret_err when
 * the thread could not take the identity (fn not run). */
int core_run_as_peer(const core_peer *peer, int (*fn)(void *userdata), void *userdata, sb_error **ret_err);

/* The local user the calling thread's next tarball source is read as
 * (core_source_tarball_extract of a path or file:// under local_roots):
 * with a peer set, the file is opened and its read permission checked as
 * that user (core_run_as_peer), not as the daemon's root. NULL clears it;
 * the peer is borrowed until then. sandboxd sets it for a local tenant's
 * sources. */
void core_source_set_local_peer(const core_peer *peer);

/* Checks a tarball location: an absolute path, file://, http:// or https://.
 * Returns 0 or -EINVAL with *ret_err (field "source.url" or "source.path"). */
int core_tarball_location_check(const char *location, sb_error **ret_err);

/* Fetches a tarball (absolute path, file://PATH, http(s):// URL via libcurl,
 * redirects followed up to 5, max size max_bytes) and extracts it into
 * `dest_dir` (an existing directory) with members owned by uid:gid.
 * A path or file:// tarball is read only when it lies under one of
 * `local_roots` (NULL-terminated; NULL: none), resolved without following
 * symlinks (-EACCES outside them, -ELOOP through a symlink; field
 * "source.path").
 * Compression (none, gzip, xz, zstd, bzip2) is detected by libarchive.
 *
 * Containment: members named absolute or with `..` components are refused
 * (the whole extraction fails), symlinks are created but never followed by
 * later members, hardlinks must name a member inside dest_dir, device nodes,
 * FIFOs and sockets are skipped, setuid/setgid/sticky bits are dropped.
 * dest_dir is chowned to uid:gid; max_bytes bounds both the fetched archive
 * and the total unpacked size. On failure dest_dir may hold a partial
 * extraction; the caller removes it.
 * Returns 0 or a negative errno with *ret_err (reason "source_failed")
 * naming the member that was refused or libarchive's/libcurl's message. */
int core_source_tarball_extract(const char *location, const char *dest_dir, uid_t uid, gid_t gid,
                                uint64_t max_bytes, const char *const *local_roots, sb_error **ret_err);
