/* The seccomp filter every sandbox command runs under (DESIGN §4): default
 * allow, a deny list modelled on Docker's default profile plus the kernel
 * attack surface this project closes on top (io_uring, userfaultfd, keys,
 * bpf, perf, namespace-creating clone/unshare, the mount family, TIOCSTI and
 * TIOCLINUX), socket families other than AF_UNIX, AF_INET, AF_INET6 and
 * (two protocols of) AF_NETLINK, and the native syscall ABI only. The filter is compiled once
 * with libseccomp into a BPF program; installing it is one prctl, safe in a
 * forked child. */
#pragma once
#include <linux/filter.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "libcore/error.h"

typedef struct core_seccomp core_seccomp;

/* How a syscall is matched by one row of the deny table. */
enum core_seccomp_match {
        CORE_SC_ALL,       /* every call */
        CORE_SC_ANY_BIT,   /* any of the bits `bits` set in argument `arg` (low 32 bits) */
        CORE_SC_EQ32,      /* the low 32 bits of argument `arg` equal `bits` */
        CORE_SC_NOT_QUERY, /* argument `arg` (32 bits) is neither 0 nor 0xffffffff */
};

/* One row of the deny table: calls of `name` that match get -err. */
typedef struct core_seccomp_rule {
        const char *name;
        int err; /* positive errno */
        enum core_seccomp_match match;
        unsigned arg;
        uint64_t bits;
} core_seccomp_rule;

/* The deny table (static storage). *ret_n receives its length. Names the
 * native architecture does not have are skipped when the filter is built. */
const core_seccomp_rule *core_seccomp_rules(size_t *ret_n);

/* One row of the socket family table: socket(2)/socketpair(2) of `family`
 * is allowed; when `protocols` is non-NULL only those n_protocols protocol
 * numbers of it are (the rest get EPROTONOSUPPORT). Families not in the
 * table get EAFNOSUPPORT. */
typedef struct core_seccomp_family {
        int family;
        const char *name;
        const int *protocols;
        size_t n_protocols;
} core_seccomp_family;

/* The socket family table (static storage); *ret_n receives its length. */
const core_seccomp_family *core_seccomp_families(size_t *ret_n);

/* Compiles the filter with libseccomp and exports it as BPF. The caller owns
 * *ret and frees it with core_seccomp_free(). Errors: -ENOMEM, or the
 * negative errno libseccomp returned, with a message naming the rule. */
int core_seccomp_new(core_seccomp **ret, sb_error **ret_err);

/* Outer mode (sandbox-init and the daemon that compiles init's filter):
 * core_seccomp_new() leaves out the setns row, so that init (which runs
 * under the filter, core_seccomp_install_self) can still spawn a command
 * that joins a container's mount namespace (libcore/init/container.c);
 * core_seccomp_install() then first adds, in every child, a small inner
 * filter that refuses setns with EPERM, so what a command runs under
 * refuses exactly what the whole filter refuses. The child joins its
 * container before that call (command.c child_main). Off by default. */
void core_seccomp_set_outer(bool outer);
bool core_seccomp_outer(void);

/* Frees a filter; accepts NULL. */
void core_seccomp_free(core_seccomp *f);
DEFINE_TRIVIAL_CLEANUP_FUNC(core_seccomp, core_seccomp_free);

/* The process-wide filter, built on the first call (unless
 * core_seccomp_set_default() gave one) and kept for the life of the process
 * (sandbox-init has it before spawning a command, so the child only
 * installs it). Returns 0 and stores a borrowed pointer in *ret, or the
 * error of core_seccomp_new(); a failed build is retried on the next call.
 * Not thread-safe: sandbox-init is single-threaded, and sandboxd calls it
 * from its event loop only. */
int core_seccomp_default(const core_seccomp **ret, sb_error **ret_err);

/* A filter from BPF compiled elsewhere: sandboxd compiles the filter once
 * for the daemon's life and hands it to each sandbox-init (agent.h, op
 * "seccomp"), which then need not run libseccomp on its first command.
 * insns is size bytes of struct sock_filter; copied. Returns 0, -EINVAL
 * when size is not a whole, non-empty program of at most BPF_MAXINSNS
 * instructions, or -ENOMEM. */
int core_seccomp_from_bpf(const void *insns, size_t size, core_seccomp **ret);

/* The BPF program of f: *ret_size bytes of struct sock_filter, borrowed. */
const void *core_seccomp_bpf(const core_seccomp *f, size_t *ret_size);

/* Makes f (taken) the filter core_seccomp_default() returns, unless that
 * one exists already: then f is freed and -EEXIST returned. 0 on success. */
int core_seccomp_set_default(core_seccomp *f);

/* Installs f on the calling thread with one prctl(PR_SET_SECCOMP), without
 * allocating: usable between fork and exec. The caller must have set
 * no_new_privs first (or hold CAP_SYS_ADMIN). Returns 0 or a negative errno.
 * In outer mode the inner setns filter is installed first, always.
 * Otherwise a no-op returning 0 when the process already runs under f through
 * core_seccomp_install_self() (the filter is inherited over fork and clone,
 * seccomp(2)), so a child of sandbox-init does not compile it again. */
int core_seccomp_install(const core_seccomp *f);

/* What core_seccomp_install(f) would load, as programs for
 * seccomp(SECCOMP_SET_MODE_FILTER) in order, for a child that makes the
 * calls itself (a CLONE_VM spawn, which must not call libc): the small
 * no-setns filter in outer mode, then f unless this process runs under f
 * already (core_seccomp_install_self). Fills progs[0..n-1] (n <= 2) and
 * returns n, or -ENOSYS where the no-setns filter is not built. The
 * programs point at memory that lives as long as f and the process
 * (copy them if the caller may free f). */
int core_seccomp_programs(const core_seccomp *f, struct sock_fprog progs[2]);

/* Installs f on every thread of the calling process (seccomp(2) with
 * SECCOMP_FILTER_FLAG_TSYNC), for sandbox-init: its children then inherit
 * the filter, and the kernel's conversion and JIT of the program (in
 * seccomp_prepare_filter, a cost per instruction) happens once per
 * sandbox instead of in every command's child. The caller needs
 * CAP_SYS_ADMIN in its user namespace or no_new_privs, and must itself
 * make no call f refuses afterwards. Returns 0 (also when f is installed
 * already), -EEXIST when another filter was, or the negative errno of
 * seccomp(2) (-EBUSY when a thread could not be synchronised); on any
 * error the process is left without the filter and core_seccomp_install()
 * keeps installing it in each child. */
int core_seccomp_install_self(const core_seccomp *f);

/* Number of BPF instructions in f (for tests and debug logs). */
size_t core_seccomp_size(const core_seccomp *f);

/* Plain mode (no user namespace, where ids inside are host ids): installs
 * on this process (and so on everything it forks later) a second filter
 * under which the set*id calls can take only the ids the sandbox was
 * given. setuid, setreuid, setresuid and setfsuid accept as each id
 * argument 0, `uid` or -1 ("unchanged"), the gid calls 0, `gid` or -1;
 * setgroups only an empty list (its list is memory a filter cannot read).
 * Anything else gets EPERM, so root inside cannot become another host user
 * and use up that user's per-uid kernel quotas (inotify, message queues,
 * processes). x86_64 only, like core_seccomp_new(); other audit arches
 * pass through here and are killed by that filter. Needs CAP_SYS_ADMIN or
 * no_new_privs. Returns 0 or a negative errno. */
int core_seccomp_install_ids(uid_t uid, gid_t gid);
