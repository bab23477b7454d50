/* Transient scope units over D-Bus (cgroup-systemd.h). One short-lived bus
 * connection per call: the daemon calls from worker threads and an sd_bus
 * object belongs to one thread (sd-bus(3)); a session start costs a few
 * milliseconds more, and a systemd re-exec between calls cannot leave a
 * stale connection behind. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-daemon.h>
#include "libcore/cgroup-systemd.h"
#include "libcore/log.h"
#include "libcore/util.h"

#define SD_DEST "org.freedesktop.systemd1"
#define SD_PATH "/org/freedesktop/systemd1"
#define SD_MANAGER "org.freedesktop.systemd1.Manager"
#define SD_PRIVATE "/run/systemd/private"
#define JOB_WAIT_USEC (10ULL * 1000000)

bool core_systemd_is_pid1(void) {
        if (sd_booted() <= 0)
                return false;
        _cleanup_free_ char *comm = NULL;
        if (core_read_file("/proc/1/comm", 64, &comm, NULL) < 0)
                return false;
        return streq(comm, "systemd\n") || streq(comm, "systemd");
}

/* systemd's private socket first (root only; no dbus-daemon needed, what
 * systemctl uses as root), else the system bus. */
static int bus_open(sd_bus **ret) {
        sd_bus *bus = NULL;
        int r;
        if (access(SD_PRIVATE, F_OK) == 0) {
                if ((r = sd_bus_new(&bus)) < 0)
                        return r;
                if ((r = sd_bus_set_address(bus, "unix:path=" SD_PRIVATE)) >= 0 && (r = sd_bus_start(bus)) >= 0) {
                        *ret = bus;
                        return 0;
                }
                sd_bus_unref(bus);
                bus = NULL;
        }
        if ((r = sd_bus_open_system(&bus)) < 0)
                return r;
        *ret = bus;
        return 0;
}

int core_systemd_check(sb_error **ret_err) {
        sd_bus *bus = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int r = bus_open(&bus);
        if (r >= 0)
                r = sd_bus_get_property(bus, SD_DEST, SD_PATH, SD_MANAGER, "Version", &error, &reply, "s");
        if (r < 0)
                sb_error_set(ret_err, r, NULL, NULL, "systemd: connect over D-Bus (%s or the system bus): %s",
                             SD_PRIVATE, error.message ? error.message : strerror(-r));
        sd_bus_message_unref(reply);
        sd_bus_error_free(&error);
        sd_bus_flush_close_unref(bus);
        return r < 0 ? r : 0;
}

static uint64_t or_infinity(uint64_t v) {
        return v ? v : UINT64_MAX;
}

/* The limits as properties (systemd.resource-control(5)): TasksMax=,
 * MemoryMax= in bytes, CPUQuotaPerSecUSec= in µs of CPU time per second
 * (100 % of one CPU = 1000000); UINT64_MAX is "infinity". */
static int append_limits(sd_bus_message *m, const core_cgroup_limits *l) {
        int r = sd_bus_message_append(m, "(sv)(sv)(sv)", "TasksMax", "t", or_infinity(l->pids_max), "MemoryMax", "t",
                                      or_infinity(l->memory_max), "CPUQuotaPerSecUSec", "t",
                                      l->cpu_quota_pct ? (uint64_t) l->cpu_quota_pct * 10000 : UINT64_MAX);
        return r;
}

typedef struct job_wait {
        const char *job;
        bool done;
        char result[32];
} job_wait;

static int on_job_removed(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        job_wait *w = userdata;
        uint32_t id;
        const char *path, *unit, *result;
        if (sd_bus_message_read(m, "uoss", &id, &path, &unit, &result) < 0 || !w->job || !streq(path, w->job))
                return 0;
        snprintf(w->result, sizeof(w->result), "%s", result);
        w->done = true;
        return 0;
}

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* Calls `m` (a method returning a job path) and waits for the JobRemoved
 * of that job. Returns 0 when the job's result is "done". */
static int call_and_wait(sd_bus *bus, sd_bus_message *m, const char *what, const char *unit, sd_bus_error *error,
                         sb_error **ret_err) {
        job_wait w = {};
        sd_bus_slot *slot = NULL;
        sd_bus_message *reply = NULL, *sub = NULL;
        /* The match first, so the signal cannot pass before it (sd_bus_call
         * queues what arrives meanwhile). Subscribe makes systemd send job
         * signals to this client at all. */
        int r = sd_bus_match_signal(bus, &slot, SD_DEST, SD_PATH, SD_MANAGER, "JobRemoved", on_job_removed, &w);
        if (r >= 0)
                r = sd_bus_call_method(bus, SD_DEST, SD_PATH, SD_MANAGER, "Subscribe", error, &sub, "");
        if (r >= 0)
                r = sd_bus_call(bus, m, 0, error, &reply);
        if (r >= 0)
                r = sd_bus_message_read(reply, "o", &w.job);
        uint64_t deadline = now_usec() + JOB_WAIT_USEC;
        while (r >= 0 && !w.done) {
                r = sd_bus_process(bus, NULL);
                if (r > 0)
                        continue;
                uint64_t now = now_usec();
                if (r >= 0 && now >= deadline)
                        r = -ETIMEDOUT;
                else if (r >= 0)
                        r = sd_bus_wait(bus, deadline - now);
        }
        if (r >= 0 && !streq(w.result, "done"))
                r = sb_error_set(ret_err, -EIO, NULL, NULL, "systemd: %s %s: the job ended '%s' (journalctl -u %s)",
                                 what, unit, w.result, unit);
        else if (r < 0)
                sb_error_set(ret_err, r, NULL, NULL, "systemd: %s %s: %s", what, unit,
                             error->message ? error->message : strerror(-r));
        sd_bus_message_unref(reply);
        sd_bus_message_unref(sub);
        sd_bus_slot_unref(slot);
        return r < 0 ? r : 0;
}

int core_systemd_start_scope(const char *unit, const char *description, pid_t pid,
                             const core_cgroup_limits *limits, sb_error **ret_err) {
        sd_bus *bus = NULL;
        sd_bus_message *m = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        int r = bus_open(&bus);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "systemd: connect over D-Bus: %s", strerror(-r));
        r = sd_bus_message_new_method_call(bus, &m, SD_DEST, SD_PATH, SD_MANAGER, "StartTransientUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", unit, "fail");
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "(sv)");
        /* Delegate=yes: the scope's subtree is the daemon's to manage
         * (systemd.resource-control(5) Delegate=; cgroup-delegation doc).
         * CollectMode: a failed scope does not linger under the name. */
        if (r >= 0)
                r = sd_bus_message_append(m, "(sv)(sv)(sv)(sv)(sv)", "Description", "s", description, "Slice", "s",
                                          CORE_SYSTEMD_SLICE, "Delegate", "b", 1, "CollectMode", "s",
                                          "inactive-or-failed", "PIDs", "au", 1, (uint32_t) pid);
        if (r >= 0)
                r = sd_bus_message_append(m, "(sv)(sv)(sv)", "TasksAccounting", "b", 1, "MemoryAccounting", "b", 1,
                                          "CPUAccounting", "b", 1);
        if (r >= 0)
                r = append_limits(m, limits);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_message_append(m, "a(sa(sv))", 0);
        if (r < 0)
                sb_error_set(ret_err, r, NULL, NULL, "systemd: build StartTransientUnit: %s", strerror(-r));
        else {
                r = call_and_wait(bus, m, "start scope", unit, &error, ret_err);
                if (r < 0 && sd_bus_error_has_name(&error, "org.freedesktop.systemd1.UnitExists"))
                        r = -EEXIST;
        }
        sd_bus_error_free(&error);
        sd_bus_message_unref(m);
        sd_bus_flush_close_unref(bus);
        return r;
}

int core_systemd_set_limits(const char *unit, const core_cgroup_limits *limits, sb_error **ret_err) {
        sd_bus *bus = NULL;
        sd_bus_message *m = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        int r = bus_open(&bus);
        if (r >= 0)
                r = sd_bus_message_new_method_call(bus, &m, SD_DEST, SD_PATH, SD_MANAGER, "SetUnitProperties");
        if (r >= 0)
                r = sd_bus_message_append(m, "sb", unit, 1);
        if (r >= 0)
                r = sd_bus_message_open_container(m, 'a', "(sv)");
        if (r >= 0)
                r = append_limits(m, limits);
        if (r >= 0)
                r = sd_bus_message_close_container(m);
        if (r >= 0)
                r = sd_bus_call(bus, m, 0, &error, NULL);
        if (r < 0)
                sb_error_set(ret_err, r, NULL, NULL, "systemd: set the limits of %s: %s", unit,
                             error.message ? error.message : strerror(-r));
        sd_bus_error_free(&error);
        sd_bus_message_unref(m);
        sd_bus_flush_close_unref(bus);
        return r < 0 ? r : 0;
}

int core_systemd_stop_unit(const char *unit) {
        sd_bus *bus = NULL;
        sd_bus_message *m = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        _cleanup_error_ sb_error *err = NULL;
        int r = bus_open(&bus);
        if (r >= 0)
                r = sd_bus_message_new_method_call(bus, &m, SD_DEST, SD_PATH, SD_MANAGER, "StopUnit");
        if (r >= 0)
                r = sd_bus_message_append(m, "ss", unit, "replace");
        if (r >= 0)
                r = call_and_wait(bus, m, "stop", unit, &error, &err);
        if (r < 0 && sd_bus_error_has_name(&error, "org.freedesktop.systemd1.NoSuchUnit"))
                r = 0;
        if (r < 0)
                log_debug("%s", err ? err->message : "systemd: stop failed");
        sd_bus_error_free(&error);
        sd_bus_message_unref(m);
        sd_bus_flush_close_unref(bus);
        return r;
}
