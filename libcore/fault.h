/* Fault points for the crash tests: places where a test can have the
 * daemon killed (SIGKILL, as kill -9 would) to prove that a restart on the
 * same state finds no half-done operation, nothing frozen, nothing leaked. */
#pragma once

/* Raises SIGKILL on the calling process when the environment variable
 * SANDBOXD_FAULT equals `point` (e.g. "fork.frozen"). Compiled to nothing
 * unless this file is built with SANDBOXD_FAULTS defined (the test-only
 * build/faults/sandboxd); an installed daemon ignores the variable. */
void core_fault(const char *point);

/* Stops the calling thread for good (until the process dies) when the
 * environment variable SANDBOXD_FAULT_STALL equals `point`, so a test can
 * look at the daemon's state inside a window (a spawned child waiting to
 * be released) and kill the daemon there. With SANDBOXD_FAULT_GATE set to
 * a directory, the stall is a gate instead: the thread creates
 * DIR/POINT.reached and waits until DIR/POINT.open exists, then goes on
 * (an operation held in flight, e.g. across a SIGTERM). Like core_fault,
 * compiled to nothing unless built with SANDBOXD_FAULTS. */
void core_fault_stall(const char *point);

/* `fallback`, or, in the SANDBOXD_FAULTS build only, the value of the
 * environment variable `name` when it holds a whole number (a test's
 * shorter bound, such as SANDBOXD_FAULT_STOP_GRACE_MS). */
unsigned long core_fault_tunable(const char *name, unsigned long fallback);

/* Error injection for the failure-path tests: returns -EIO when the
 * environment variable SANDBOXD_FAIL equals `point` ("create.disk"), or
 * equals "point:N" and this is one of the first N times the point is
 * reached in this process; 0 otherwise. Always 0 unless built with
 * SANDBOXD_FAULTS (the test-only build/faults/sandboxd). Thread-safe. */
int core_fault_error(const char *point);
