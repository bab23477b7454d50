/* Per-session cgroups on cgroup v2, on the v1 controllers, or on a hybrid
 * host (v1 controllers with a v2 hierarchy beside them), behind one ops table
 * as crun does.
 *
 * Every session's cgroup nests under sandboxd's own cgroup in each hierarchy
 * (found from /proc/self/cgroup), never at a hierarchy's root, inside a
 * parent that belongs to one daemon instance (its state directory):
 *   v1:  <mount>/<own path>/sandboxd-sessions-<instance>/<name>
 *   v2:  sandboxd moves itself into <own>/supervisor (the "no internal
 *        processes" rule of a delegated subtree, as with systemd's
 *        Delegate=yes; done even when no controller is delegated, so the
 *        layout is the same everywhere), enables the controllers it needs
 *        in <own> and <own>/sandboxd-sessions-<instance>, and places
 *        sessions there.
 *        When <own> is the hierarchy's root (hybrid hosts, cgroup
 *        namespaces) nothing moves.
 * Two daemons that share <own> therefore never see, sweep or reuse each
 * other's sessions.
 * v1 hierarchies used: pids, memory, cpu, freezer (those mounted). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "libcore/error.h"

typedef enum core_cgroup_mode {
        CORE_CGROUP_V1,      /* controllers on v1 */
        CORE_CGROUP_V2,      /* unified only */
        CORE_CGROUP_HYBRID,  /* v1 controllers plus a v2 hierarchy */
} core_cgroup_mode;

typedef struct core_cgroup core_cgroup;

/* Who makes the session cgroups (core_cgroup_set_driver):
 *   CGROUPFS: sandboxd itself, as directories below its own cgroup (the
 *             layout above);
 *   SYSTEMD:  systemd, as a transient scope unit sandboxd-<name>.scope in
 *             sandboxd.slice per session, started over D-Bus with the
 *             session's first process, Delegate=yes and the limits as unit
 *             properties (TasksMax, MemoryMax, CPUQuotaPerSecUSec), changed
 *             with SetUnitProperties; as runc's and crun's systemd cgroup
 *             managers do (systemd.scope(5), systemd.resource-control(5)).
 *             The sessions then live outside the service's cgroup, so
 *             stopping or restarting sandboxd.service leaves them running.
 *             Inside a scope (our delegated subtree) everything else is the
 *             same: attach, child cgroups, freeze, kill by cgroupfs. */
typedef enum core_cgroup_driver {
        CORE_CGROUP_CGROUPFS,
        CORE_CGROUP_SYSTEMD,
} core_cgroup_driver;

/* Chooses the driver for the next core_cgroup_init() (default CGROUPFS). */
void core_cgroup_set_driver(core_cgroup_driver d);
core_cgroup_driver core_cgroup_get_driver(void);
const char *core_cgroup_driver_name(core_cgroup_driver d); /* "cgroupfs", "systemd" */

/* The scope unit of a session under the systemd driver ("sandboxd-<name>.scope",
 * owned by cg), NULL under cgroupfs. */
const char *core_cgroup_unit(const core_cgroup *cg);

typedef struct core_cgroup_limits {
        uint64_t pids_max;      /* 0 = unlimited */
        uint64_t memory_max;    /* bytes; 0 = unlimited */
        unsigned cpu_quota_pct; /* percent of one CPU (vcpus × 100); 0 = unlimited */
} core_cgroup_limits;

/* The instance key of a daemon whose state directory is `state_dir` (which
 * must exist): 16 hex digits of a 64-bit FNV-1a hash of its canonical
 * absolute path, so the same directory always gives the same key (a
 * restarted daemon finds its own leftovers) and two directories give two
 * keys. *ret is malloc'd (caller frees). Returns 0 or a negative errno
 * (realpath's, -ENOMEM). */
int core_cgroup_instance_key(const char *state_dir, char **ret);

/* Detects the host's cgroup layout and prepares this instance's parent
 * cgroups (sandboxd-sessions-<instance>). `instance` is 1 to 32 letters,
 * digits, '-' or '_' (core_cgroup_instance_key gives one); -EINVAL
 * otherwise. Call once at daemon start, before any other core_cgroup_*
 * call (they fail with -ESTALE before it); calling it again switches
 * instance. Returns 0 or a negative errno. */
int core_cgroup_init(const char *instance, sb_error **ret_err);

/* Removes this instance's parent cgroups when they are empty (daemon
 * shutdown, after every session is destroyed) and forgets the layout.
 * Returns 0, or the first rmdir error after trying all (-EBUSY while a
 * session is left). */
int core_cgroup_fini(void);

/* The mode found by core_cgroup_init(). */
core_cgroup_mode core_cgroup_get_mode(void);
const char *core_cgroup_mode_name(core_cgroup_mode m); /* "v1", "v2", "hybrid" */

/* Creates the session cgroup `name` in every hierarchy in use and applies
 * limits. Caller owns *ret (free with core_cgroup_free, which does not
 * remove it). An existing empty cgroup of that name (a leftover) is reused;
 * one that has processes in it (a running session) is refused with -EEXIST
 * and left untouched. */
int core_cgroup_create(const char *name, const core_cgroup_limits *limits, core_cgroup **ret,
                       sb_error **ret_err);

/* Changes a running session's limits from `old` (what it has now, for the
 * rollback) to `limits`, in every hierarchy. Memory is written first; if
 * any write fails the old values are written back, so the session keeps
 * either the old limits or the new ones. Lowering memory below the
 * session's usage makes the kernel reclaim (page cache, swap); what cannot
 * be reclaimed is handled as the kernel does for that hierarchy:
 *   v1 memory.limit_in_bytes: the write fails, -EBUSY, old limits kept;
 *   v2 memory.max: the kernel OOM-kills processes inside the session.
 * (Documentation/admin-guide/cgroup-v1/memory.rst and cgroup-v2.rst.)
 * Neither can touch the caller: it is not in the session's cgroup.
 * Returns 0 or a negative errno. */
int core_cgroup_update(core_cgroup *cg, const core_cgroup_limits *old, const core_cgroup_limits *limits,
                       sb_error **ret_err);

/* Moves pid into the session cgroup in every hierarchy (on a v2 one with
 * controllers, its leaf CORE_CGROUP_INIT, made when missing). */
int core_cgroup_attach(core_cgroup *cg, pid_t pid, sb_error **ret_err);

/* The child cgroup of a session that holds its sandbox-netd. */
#define CORE_CGROUP_NETD "netd"
/* The child cgroup of a session that holds sandbox-init and the
 * sandbox's own commands on a v2 hierarchy with controllers (cgroupfs
 * driver): the session itself then holds no process, so it can delegate
 * controllers to its containers' child cgroups (cgroup-v2.rst "no
 * internal processes"). core_cgroup_attach and core_cgroup_open_v2 place
 * processes there; elsewhere (v1, a hybrid host's controller-less v2
 * hierarchy, the systemd driver) they go to the session's directory. */
#define CORE_CGROUP_INIT "init"

/* Moves pid into the child cgroup `child` of the session (only the names
 * above, -EINVAL otherwise) in every hierarchy, creating it when missing.
 * The child has no limits of its own and no controller is enabled for it
 * (v2 subtree_control stays empty, so the session's processes may stay in
 * the session cgroup itself: the no-internal-process rule applies only to
 * enabled controllers); its use is charged to the session, whose limits
 * (pids.max, memory, cpu) therefore cover it too (cgroup-v2.rst, "Top-down
 * Constraint"; cgroup-v1 hierarchical accounting). core_cgroup_kill_all
 * and core_cgroup_destroy include it. Returns 0 or a negative errno. */
int core_cgroup_attach_child(core_cgroup *cg, const char *child, pid_t pid, sb_error **ret_err);

/* Like core_cgroup_attach_child() but leaves out the v2 hierarchy, for a
 * process cloned into it (core_cgroup_make_child). */
int core_cgroup_attach_child_v1(core_cgroup *cg, const char *child, pid_t pid, sb_error **ret_err);

/* Opens the session's cgroup v2 directory (its leaf CORE_CGROUP_INIT when
 * the hierarchy has controllers, made when missing; O_DIRECTORY|O_CLOEXEC) for
 * clone3(CLONE_INTO_CGROUP), which places a child at birth instead of
 * migrating it later: a v2 migration waits for an RCU grace period
 * (cgroup_threadgroup_rwsem), about 10 ms on this class of machine. Returns
 * the fd (caller owns) or -ENOENT when no v2 hierarchy is in use. */
int core_cgroup_open_v2(const core_cgroup *cg);

/* Like core_cgroup_attach() but leaves out the v2 hierarchy, for a process
 * cloned into it with core_cgroup_open_v2(). */
int core_cgroup_attach_v1(core_cgroup *cg, pid_t pid, sb_error **ret_err);

/* Runs fn(userdata) with the calling thread inside the session's v1
 * cgroups, then moves it back to the daemon's own, so that a process fn
 * clones is born in them and needs no migration. Writing "0" to a v1
 * `tasks` file moves only the calling thread, which takes no
 * cgroup_threadgroup_rwsem (kernel/cgroup/cgroup.c,
 * cgroup_procs_write_start), unlike moving a process through cgroup.procs,
 * which waits for an RCU grace period (~10 ms). *ret_inside tells whether
 * fn ran inside: false with no v1 hierarchy, under the systemd driver,
 * or when a move in failed (then the thread is back where it was and the
 * caller attaches the child with core_cgroup_attach_v1() as before).
 * Returns fn's result, or a negative errno with *ret_err when the thread
 * could not be moved back (fn's child exists: the caller ends it). While
 * inside, what the thread allocates is charged to the session. */
int core_cgroup_run_inside_v1(core_cgroup *cg, int (*fn)(void *userdata), void *userdata, bool *ret_inside,
                              sb_error **ret_err);

/* Creates the child cgroup `child` of the session (only the names of
 * core_cgroup_attach_child) in every hierarchy, for a process to be born
 * in it: *ret_v2_fd gets its v2 directory opened O_DIRECTORY|O_CLOEXEC for
 * clone3(CLONE_INTO_CGROUP) (caller owns it), or -EBADF with no v2
 * hierarchy or under the systemd driver (where
 * core_cgroup_run_inside_child_v1 does not move the thread either: the
 * process is then attached). Returns 0, 1 when a v2 hierarchy
 * is in use but no fd is given (the process is then attached with
 * core_cgroup_attach_child), or a negative errno with *ret_err. */
int core_cgroup_make_child(core_cgroup *cg, const char *child, int *ret_v2_fd, sb_error **ret_err);

/* core_cgroup_run_inside_v1() with the thread inside the session's child
 * cgroup `child` (made by core_cgroup_make_child) instead of the session's
 * own: a process fn clones is born in the child's v1 cgroups, with no
 * migration through cgroup.procs and its RCU grace period. Same results as
 * core_cgroup_run_inside_v1; -EINVAL for an unknown child. */
int core_cgroup_run_inside_child_v1(core_cgroup *cg, const char *child, int (*fn)(void *userdata),
                                    void *userdata, bool *ret_inside, sb_error **ret_err);

/* Freezes (true) or thaws (false) every process of the session: v2
 * cgroup.freeze, else the v1 freezer's freezer.state. Freezing waits
 * (bounded, 2 s) until the kernel reports the cgroup frozen, so a copy of
 * the session's files taken afterwards is consistent. Returns 0, -ENOTSUP
 * when no freezer is available, -ETIMEDOUT, or another negative errno. */
int core_cgroup_freeze(core_cgroup *cg, bool frozen);
/* 1 when any of the session's hierarchies is frozen or freezing (v2
 * cgroup.freeze is 1, v1 freezer.state is not THAWED), else 0: what a
 * daemon killed between freeze and thaw leaves (Documentation/admin-guide/
 * cgroup-v2.rst "Core Interface Files", cgroup-v1/freezer-subsystem.rst). */
int core_cgroup_frozen(core_cgroup *cg);

/* How many processes of the session the kernel's OOM killer has killed so
 * far, because the session reached its memory limit: the `oom_kill` count of
 * memory.events on v2, of memory.oom_control on v1 (both since Linux 4.13;
 * Documentation/admin-guide/cgroup-v2.rst "memory.events",
 * cgroup-v1/memory.rst "OOM Control"). The count only grows while the
 * cgroup exists, so comparing two reads tells whether a kill happened in
 * between. Stores it in *ret; returns 0, -ENOENT when no memory controller
 * is in use for sessions, -ENODATA when the kernel has no such count, or
 * another negative errno from reading the file. */
int core_cgroup_oom_kills(const core_cgroup *cg, uint64_t *ret);

/* Parses the "oom_kill N" line out of a memory.events or memory.oom_control
 * text (NUL-terminated). 0, -ENODATA without such a line, -EBADMSG when N
 * is not a number. Exposed for tests. */
int core_cgroup_parse_oom_kills(const char *text, uint64_t *ret);

/* What a session has used, read from its cgroup directories. A figure the
 * hierarchies in use do not keep is UINT64_MAX. */
typedef struct core_cgroup_usage {
        uint64_t cpu_usec;          /* CPU time of every process ever in it: v2 cpu.stat usage_usec,
                                       else v1 cpuacct.usage (cpu,cpuacct co-mounted) / 1000 */
        uint64_t memory_bytes;      /* v2 memory.current, v1 memory.usage_in_bytes */
        uint64_t memory_peak_bytes; /* v2 memory.peak (Linux 5.19), v1 memory.max_usage_in_bytes */
        uint64_t pids;              /* pids.current: processes and threads now */
} core_cgroup_usage;

/* Fills *ret from the session's files (Documentation/admin-guide/
 * cgroup-v2.rst "cpu.stat", "memory.current", "memory.peak", "pids.current";
 * cgroup-v1/memory.rst, cpuacct.rst, pids.rst). Never blocks on anything but
 * cgroupfs reads; returns 0 (a missing figure is UINT64_MAX, not an error). */
int core_cgroup_read_usage(const core_cgroup *cg, core_cgroup_usage *ret);

/* The cpu_usec figure of core_cgroup_read_usage() alone (one file read
 * instead of every figure's): microseconds, or UINT64_MAX when the
 * hierarchies in use keep none. */
uint64_t core_cgroup_read_cpu_usec(const core_cgroup *cg);

/* Restarts the session's memory high-water mark at its use now, so that
 * later reads count from this moment (what ran in it before is not
 * counted). cgroup v2 (Linux 6.12, cgroup-v2.rst "memory.peak"): a write to
 * memory.peak resets it for reads through the same open file only, so the
 * file stays open: its fd in *ret_fd, owned by the caller, read with
 * core_cgroup_peak_read(). cgroup v1 (cgroup-v1/memory.rst 5.7): writing 0
 * to memory.max_usage_in_bytes resets it for every reader; *ret_fd is then
 * -EBADF and core_cgroup_read_usage() reads the reset figure. Returns 0;
 * -EOPNOTSUPP when the kernel cannot reset it (v2 before 6.12), -ENODATA
 * without memory accounting, or another negative errno. */
int core_cgroup_peak_reset(const core_cgroup *cg, int *ret_fd);

/* The memory.peak figure through an fd from core_cgroup_peak_reset(): 0
 * and bytes in *ret, or a negative errno (-EBADMSG: not a number). */
int core_cgroup_peak_read(int fd, uint64_t *ret);

/* Sends SIGKILL to every process in the cgroup (cgroup.kill on v2, else by
 * reading cgroup.procs repeatedly until empty). */
int core_cgroup_kill_all(core_cgroup *cg);

/* core_cgroup_kill_all() without waiting: SIGKILL sent once to every
 * process in the cgroup (cgroup.kill on v2, which also covers a fork under
 * way; else one read of each cgroup.procs) and a frozen cgroup thawed, so
 * that no process of it runs user code again; they may still be exiting
 * on return (kill(2): a pending SIGKILL ends the process before it returns
 * to user mode). For a session whose PID namespace is already empty but
 * for its exiting init. Returns 0 or the first negative errno. */
int core_cgroup_kill_now(core_cgroup *cg);

/* SIGKILL to every process of the session at once: cgroup.kill on its
 * cgroup of the tracking hierarchy (v2, or the unified hierarchy of a
 * hybrid layout; Documentation/admin-guide/cgroup-v2.rst "cgroup.kill":
 * every process of the subtree, a fork under way included). On return no
 * process of the session runs user code again, whether or not its PID
 * namespace's init reaped them; frozen ones (a v1 freezer) stay frozen
 * until thawed (core_cgroup_kill_now thaws). No sweep of the v1
 * hierarchies: every process of a session is in its tracking cgroup.
 * Returns 0; -EOPNOTSUPP, having done nothing, when the tracking hierarchy
 * is v1 (a sweep of cgroup.procs can miss a fork under way); or the
 * negative errno of the write (a kernel before 5.14 has no cgroup.kill:
 * -ENOENT). */
int core_cgroup_kill_fence(core_cgroup *cg);

/* Removes the cgroup directories (after the processes are gone; retries
 * briefly while the kernel reaps). Returns the first error after trying all. */
int core_cgroup_destroy(core_cgroup *cg);

/* Removes this instance's leftover session cgroups of any name (daemon
 * start, tests), killing what is in them; other instances' sessions are not
 * touched. Returns the number removed or a negative errno. */
int core_cgroup_remove_all_sessions(void);
/* The same, but the sessions named in keep[0..n_keep) stay (live restore:
 * sessions a restarted daemon re-adopted). */
int core_cgroup_remove_sessions_except(char *const *keep, size_t n_keep);

/* A handle on the existing session cgroup `name` of this instance, after
 * checking that `pid` is in it (cgroup.procs of the tracking hierarchy):
 * how a restarted daemon re-adopts a live session. -ESRCH when pid is not
 * there, -ENOENT when the cgroup is gone, -EINVAL for a bad name. */
int core_cgroup_open(const char *name, pid_t pid, core_cgroup **ret);

/* Path of the session cgroup in the hierarchy used for process tracking
 * (v2 path when available, else the v1 pids path). Owned by cg. */
const char *core_cgroup_path(const core_cgroup *cg);

/* The session cgroup's directories, one per hierarchy in use (the tracking
 * one first, as core_cgroup_path): at most `max` pointers, owned by cg, go
 * to dirs[]. Returns how many there are (0 for a NULL cg). */
size_t core_cgroup_dirs(const core_cgroup *cg, const char **dirs, size_t max);

/* ---- containers (docs/API.md "container.*") ----
 * A container of a session has the child cgroup CORE_CGROUP_CTR_PREFIX
 * + its name in every hierarchy, with its own limits (below the session's,
 * which bound it too: hierarchical accounting), so that its usage and OOM
 * kills are its own. core_cgroup_kill_all and core_cgroup_destroy of the
 * session include every such child. The handle returned is a view on the
 * child's directories: core_cgroup_read_usage, core_cgroup_oom_kills,
 * core_cgroup_kill_all and core_cgroup_destroy work on it; free it with
 * core_cgroup_free. */
#define CORE_CGROUP_CTR_PREFIX "ctr-"

/* Creates the child cgroup of container `name` (core_name_is_valid) with
 * `limits` and opens its cgroup.procs in each hierarchy (O_WRONLY, for
 * sandbox-init to put a command there by writing "0" before exec: the
 * kernel checks the opener's credentials, cgroup-v2.rst "Delegation
 * Containment"). At most max_fds fds go to ret_fds (caller closes),
 * their count to *ret_n; the view to *ret. On cgroup v2 limits need the
 * controllers delegated below the session, which fails while the session
 * cgroup holds processes: an error then. Everything made is removed on
 * failure. Returns 0 or a negative errno with *ret_err. */
int core_cgroup_container_create(core_cgroup *cg, const char *name, const core_cgroup_limits *limits,
                                 core_cgroup **ret, int *ret_fds, size_t max_fds, size_t *ret_n, sb_error **ret_err);
/* The view of an existing container child (live restore); -EINVAL for a
 * bad name, -ENOMEM. */
int core_cgroup_container_open(const core_cgroup *cg, const char *name, core_cgroup **ret);

void core_cgroup_free(core_cgroup *cg);
DEFINE_TRIVIAL_CLEANUP_FUNC(core_cgroup, core_cgroup_free);
