/* The systemd side of the session cgroups (libcore/cgroup.c's "systemd"
 * driver): transient scope units made and changed over D-Bus with sd-bus,
 * as runc's and crun's systemd cgroup managers do
 * (org.freedesktop.systemd1(5), systemd.scope(5), systemd.resource-control(5)). */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include "libcore/cgroup.h"

/* The slice every session scope is placed in. */
#define CORE_SYSTEMD_SLICE "sandboxd.slice"

/* True when systemd is this machine's (or container's) service manager:
 * PID 1 is systemd and /run/systemd/system exists (sd_booted(3)). */
bool core_systemd_is_pid1(void);

/* Checks that the system bus (or, failing that, systemd's private socket
 * /run/systemd/private) answers. Returns 0 or a negative errno. */
int core_systemd_check(sb_error **ret_err);

/* Starts the transient scope `unit` in CORE_SYSTEMD_SLICE holding `pid`,
 * with Delegate=yes (the subtree is ours: netd's child cgroup), the limits
 * as unit properties (TasksMax, MemoryMax, CPUQuotaPerSecUSec; 0 =
 * infinity) and `description`, and waits (bounded, 10 s) until systemd's job
 * for it is done. Returns 0, -EEXIST when a unit of that name is loaded and
 * active, or another negative errno with *ret_err naming systemd's answer. */
int core_systemd_start_scope(const char *unit, const char *description, pid_t pid,
                             const core_cgroup_limits *limits, sb_error **ret_err);

/* Sets the limits of a running scope (SetUnitProperties, runtime only: a
 * transient unit has no file). Returns 0 or a negative errno. */
int core_systemd_set_limits(const char *unit, const core_cgroup_limits *limits, sb_error **ret_err);

/* Stops the scope (StopUnit, mode "replace"); a unit systemd does not know
 * is not an error. Returns 0 or a negative errno. */
int core_systemd_stop_unit(const char *unit);
