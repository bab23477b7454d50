/* Fault points for the crash tests: places where a test can have the
 * daemon killed (SIGKILL, as kill -9 would) to prove that a restart on the
 * same state finds no half-done operation, nothing frozen, nothing leaked. */
#pragma once

/* Raises SIGKILL on the calling process when the environment variable
 * SANDBOXD_FAULT equals `point` (e.g. "fork.frozen"). Compiled to nothing
 * unless this file is built with SANDBOXD_FAULTS defined (the test-only
 * build/faults/sandboxd); an installed daemon ignores the variable. */
void core_fault(const char *point);
