/* Fault points for the kill -9 matrix (tests/faults/). */
#pragma once

/* Kills the calling process with SIGKILL when the environment variable
 * SANDBOXD_FAULT equals `point` ("<op>.<step>", e.g. "fork.frozen"); does
 * nothing otherwise. Only root starts sandboxd, with its own environment. */
void core_fault(const char *point);
