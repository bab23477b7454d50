/* Starting a sandbox's PID 1: the clone into new namespaces and the exec of
 * sandbox-init from a sealed memfd; and the built-in `host` runtime. */
#pragma once

#include <stdint.h>
#include <sys/types.h>
#include "libcore/cgroup.h"
#include "libcore/error.h"

/* Copies the sandbox-init binary at `path` into a memfd and seals it
 * (F_SEAL_SEAL|SHRINK|GROW|WRITE), so sandboxes exec an immutable copy that
 * no host path leads to (/proc/1/exe inside shows only the memfd).
 * Returns the fd (O_CLOEXEC, caller owns) or a negative errno. */
int core_init_memfd(const char *path, sb_error **ret_err);

/* The files of libarchive and of every library it needs, each after the
 * ones it needs (as this process loaded them: dl_iterate_phdr(3) and each
 * object's DT_SONAME and DT_NEEDED), for sandbox-init: it opens them
 * before its root changes and loads libarchive from those fds when a copy
 * first needs it (setup packet "archiveLibs", cli/lazy/archive.h), never
 * at its start. Computed once per process; the array is static, NULL
 * terminated, and never freed. NULL when libarchive is not loaded here or
 * a library it needs cannot be found among the loaded ones. */
const char *const *core_archive_lib_files(void);

typedef struct core_spawn_result {
        pid_t pid;       /* sandbox-init, in the caller's PID namespace */
        int pidfd;       /* CLOEXEC pidfd of pid */
        int agent_fd;    /* CLOEXEC SOCK_SEQPACKET end for the agent protocol */
} core_spawn_result;

/* Clones a child in new mount, PID, UTS, IPC and network namespaces (the
 * cgroup namespace is entered by init itself once it sits in its cgroup),
 * born in the v2 cgroup of `cg` when there is one (clone3 CLONE_INTO_CGROUP)
 * and attached to its v1 cgroups right after, and execs `init_memfd` with
 * the agent socket on fd 3, `listen_fd` (when >= 0: the listening socket a
 * restarted sandboxd reconnects through, libcore/agent.h) on fd 4 and
 * /dev/null on 0-2; no other fd crosses. Safe
 * to call from any thread: the child only makes raw syscalls before exec.
 * On success fills *ret (caller owns the fds); on failure nothing is left.
 * With `userns_base` non-zero the child is also in a new user namespace
 * owning all the others, mapped sandbox 0..65535 → host userns_base..+65535
 * (libcore/userns.h): the maps are written here before the child may exec,
 * and it runs sandbox-init as the namespace's uid/gid 0 with no host group.
 * 0: no user namespace (sandbox root is host root). `netns_fd` >= 0: the
 * child is born in that network namespace (a pod's, owned by the host's
 * user namespace, so sandbox root holds no capability over it) instead of
 * a new one; -1: a new one. */
int core_spawn_init(int init_memfd, core_cgroup *cg, uint32_t userns_base, int listen_fd, int netns_fd,
                    core_spawn_result *ret, sb_error **ret_err);

/* Hex digits of a host runtime version (core_runtime_host_build). */
#define CORE_RUNTIME_VERSION_LEN 16

/* Makes sure the current version of the `host` runtime exists under `dir`
 * (<state>/runtimes/host) and puts its name in ret_version: the merged-usr
 * skeleton (bin, lib*, sbin links into usr), empty mount points for the
 * host binds, and a generated /etc (passwd and group with root and the
 * `sandbox` user uid/gid 1000, nsswitch.conf, hosts, and os-release: a
 * symlink to ../usr/lib/os-release when that is the host's, else a copy of
 * the host's own /etc/os-release) — never the host's /etc as a whole. Each version is <dir>/<version>, named by a hash of
 * what it is made from, built under a temporary name and renamed into
 * place, and never changed or removed here: running sessions stand on
 * older ones (the caller removes those nothing uses). An existing version
 * is reused as it is (no write at all). A tree of the older unversioned
 * layout becomes <dir>/legacy. Returns 0 or a negative errno. */
int core_runtime_host_build(const char *dir, char ret_version[static CORE_RUNTIME_VERSION_LEN + 1],
                            sb_error **ret_err);

/* The read-only host binds the `host` runtime needs, as {src, dst} pairs
 * terminated by {NULL, NULL}: /usr and the few /etc entries programs need
 * (ld.so.cache, alternatives, ssl, ca-certificates). Entries missing on the
 * host are skipped by the caller. */
extern const char *const core_runtime_host_binds[][2];
