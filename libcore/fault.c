/* Fault points (libcore/fault.h). Only the test build defines
 * SANDBOXD_FAULTS: a released daemon must not die because its environment
 * says so. */
#include <errno.h>
#include <signal.h>
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
        if (want && point && strcmp(want, point) == 0)
                for (;;)
                        pause();
#else
        (void)point;
#endif
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
