/* Usage figures of each sandbox and the Prometheus metrics endpoint
 * (daemon.json metrics, metricsSocket, metricsListen; sandboxd(8) METRICS).
 * Loop thread only. */
#pragma once

#include <stdint.h>
#include <cjson/cJSON.h>
#include "sandboxd/config.h"

struct manager;
struct sandbox;

/* What a sandbox has used. Figures of its running session (CPU, memory,
 * processes, network, disk) are UINT64_MAX when it has none or the host
 * does not keep the figure; counters run from the daemon's start. */
typedef struct metrics_usage {
        uint64_t cpu_usec;           /* CPU time of the session's cgroup, microseconds */
        uint64_t memory_bytes;       /* memory in use now */
        uint64_t memory_peak_bytes;  /* the session's peak */
        uint64_t pids;               /* processes and threads now */
        uint64_t disk_used_bytes;    /* in use on its disk image (diskMiB) */
        uint64_t net_ingress;        /* bytes into the sandbox over its veth */
        uint64_t net_egress;         /* bytes out of it */
        uint64_t commands_started;   /* since the daemon started */
        uint64_t commands_running;   /* now */
        uint64_t denials;            /* every layer and rule, since the daemon started */
} metrics_usage;

/* Reads the figures of `sb` now (cgroup files through core_cgroup_read_usage(),
 * /proc/net/dev, statvfs of the disk image). */
void metrics_sandbox_usage(const struct sandbox *sb, metrics_usage *ret);

/* Makes the usage figures of `sb`'s session start from now: called when a
 * pooled session is adopted (warmpool.c), so nothing the refill used is
 * shown as the sandbox's. Records the CPU time now (subtracted from later
 * reads) and restarts the memory peak (core_cgroup_peak_reset); where the
 * kernel cannot restart it (cgroup v2 before Linux 6.12) memoryPeakBytes is
 * null for this session rather than the refill's figure. */
void metrics_usage_rebase(struct sandbox *sb);

/* The rebase of metrics_usage_rebase() in a session record (restore.c):
 * "usageBase": {"cpuUsec": N, "peak": "reset" | "fd" | "none"}; nothing
 * for a session that was not rebased. Read back when a restarted daemon
 * re-adopts the session: the CPU base is kept; a peak that was read
 * through an fd (gone with the old daemon) or never reset is null from
 * then on. */
struct session;
void metrics_usage_base_to_json(const struct session *s, cJSON *rec);
void metrics_usage_base_from_json(struct session *s, const cJSON *rec);

/* Adds sandbox.get's usage fields to `o`: activeCpuUsageMs, memoryPeakBytes,
 * networkTransfer {ingress, egress} and usage {memoryBytes, pids,
 * diskUsedBytes, commandsStarted, commandsRunning, denials}; a figure the
 * host does not keep (or of a sandbox without a session) is null. */
void metrics_usage_to_json(const struct sandbox *sb, cJSON *o);

/* Counts one denial of `sandbox` by its layer (dns, nft, proxy...) and rule;
 * at most 64 distinct pairs per sandbox, the rest as rule "other". */
void metrics_count_denial(const char *sb_name, const char *layer, const char *rule);
/* Counts one command started in `sandbox`. */
void metrics_count_command(const char *sb_name);
/* Drops the counters of a deleted sandbox. */
void metrics_forget_sandbox(const char *sb_name);

/* Starts serving per the configuration; errors binding are logged and leave
 * that endpoint off (the daemon runs on). Both endpoints serve root and
 * members of socketGroup only, as the JSON-RPC socket does: the Unix socket
 * (mode 0660, group socketGroup) by SO_PEERCRED/SO_PEERGROUPS, the loopback
 * TCP address by the owner of the client's socket (sock_diag(7)) and its
 * groups (getgrouplist(3)); anyone else's connection is closed unanswered. */
void metrics_start(struct manager *m, const daemon_config *cfg);
/* Applies a reloaded configuration: endpoints whose address changed are
 * closed and opened at the new one. */
void metrics_reconfigure(const daemon_config *cfg);
/* Closes every endpoint and connection and removes the socket file. */
void metrics_stop(void);
