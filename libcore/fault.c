/* Fault points for the kill -9 matrix (tests/faults/): see fault.h. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "libcore/fault.h"

void core_fault(const char *point) {
        const char *want = getenv("SANDBOXD_FAULT");
        if (want && strcmp(want, point) == 0)
                raise(SIGKILL);
}
