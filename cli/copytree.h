/* `sandboxctl cp -r` (cli/copytree.c): directory trees between the host and
 * a sandbox through fs.writeTar / fs.readTar. */
#pragma once

#include "cli/ctl.h"

/* Copies the tree under the host directory `local` to `path` in sandbox
 * `name` (created, parents too; existing files are replaced). Returns 0 or
 * the exit code after printing the error. */
int ctl_cp_tree_to_sandbox(const ctl_globals *g, client *c, const char *local, const char *name, const char *path);

/* Copies the tree under `path` in sandbox `name` into the host directory
 * `local` (created, parents too), as the caller. Returns 0 or the exit code
 * after printing the error. */
int ctl_cp_tree_from_sandbox(const ctl_globals *g, client *c, const char *name, const char *path, const char *local);
