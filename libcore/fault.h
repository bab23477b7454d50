/* Fault points for kill -9 tests: SANDBOXD_FAULT=<point> in the
 * environment makes core_fault(<point>) kill the process with SIGKILL. */
#pragma once

/* Raises SIGKILL when getenv("SANDBOXD_FAULT") equals `point`. */
void core_fault(const char *point);
