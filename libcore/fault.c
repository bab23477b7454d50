/* Fault points (libcore/fault.h). Only the test build defines
 * SANDBOXD_FAULTS: a released daemon must not die because its environment
 * says so. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
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
