/* Fault points (libcore/fault.h). Only the test build defines
 * SANDBOXD_FAULTS: a released daemon must not die because its environment
 * says so. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "libcore/fault.h"

void core_fault(const char *point) {
#ifdef SANDBOXD_FAULTS
        const char *want = getenv("SANDBOXD_FAULT");
        if (want && point && strcmp(want, point) == 0)
                raise(SIGKILL);
#else
        (void)point;
#endif
}

void core_fault_stall(const char *point) {
#ifdef SANDBOXD_FAULTS
        const char *want = getenv("SANDBOXD_FAULT_STALL");
        if (!want || !point || strcmp(want, point) != 0)
                return;
        const char *gate = getenv("SANDBOXD_FAULT_GATE");
        if (!gate)
                for (;;)
                        pause();
        char reached[4096], open_path[4096];
        snprintf(reached, sizeof(reached), "%s/%s.reached", gate, point);
        snprintf(open_path, sizeof(open_path), "%s/%s.open", gate, point);
        int fd = open(reached, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0)
                close(fd);
        while (access(open_path, F_OK) != 0)
                nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
#else
        (void)point;
#endif
}

unsigned long core_fault_tunable(const char *name, unsigned long fallback) {
#ifdef SANDBOXD_FAULTS
        const char *v = getenv(name);
        char *end = NULL;
        if (v && *v) {
                unsigned long n = strtoul(v, &end, 10);
                if (end && *end == '\0')
                        return n;
        }
#else
        (void)name;
#endif
        return fallback;
}

int core_fault_error(const char *point) {
#ifdef SANDBOXD_FAULTS
        static unsigned hits;
        const char *want = getenv("SANDBOXD_FAIL");
        size_t n = point ? strlen(point) : 0;
        if (!want || !point || strncmp(want, point, n) != 0)
                return 0;
        if (want[n] == '\0')
                return -EIO;
        if (want[n] != ':')
                return 0;
        unsigned long times = strtoul(want + n + 1, NULL, 10);
        return __atomic_fetch_add(&hits, 1, __ATOMIC_RELAXED) < times ? -EIO : 0;
#else
        (void)point;
        return 0;
#endif
}
