/* What sandboxctl's command files share: the global options, error and
 * usage reporting with the exit code to return, and human output (JSON,
 * "key: value" lines, tables). */
#pragma once

#include <stdbool.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "cli/client.h"
#include "cli/parse.h"

typedef struct ctl_globals {
        const char *socket;   /* --socket, or NULL */
        bool json;            /* --json: print results as JSON */
        const char *host;     /* --host tcp://H:P (else $SANDBOXD_HOST): a remote daemon over TLS */
        const char *cert, *key, *ca;  /* --cert/--key/--ca (else $SANDBOXD_CERT/_KEY/_CA) */
} ctl_globals;

/* `certs init DIR` (cli/certs.c). Returns the exit code. */
int ctl_certs(ctl_globals *g, int argc, char **argv);

/* Prints "sandboxctl: <message>" on stderr and returns `exit_code`. */
int ctl_error(int exit_code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* getopt_long(3) for a command's own options, with getopt's own messages
 * off (opterr = 0) and a missing argument told apart from an unknown
 * option, so that ctl_usage() reports either as one line naming the option.
 * Records argv for that report. Same arguments and return as getopt_long,
 * except that both failures return '?'. */
struct option;
int ctl_getopt_long(int argc, char *const *argv, const char *shortopts, const struct option *longopts,
                    int *longindex);

/* The argv a command's options are parsed from, for the report of an
 * unknown option by a parser that does not use ctl_getopt_long (set by
 * main before it dispatches). */
extern char *const *ctl_option_argv;

/* Prints a usage error with a hint to `sandboxctl <command> --help` (command
 * may be NULL) and returns CLI_EXIT_USAGE. A message ending in "unknown
 * option" right after getopt returned '?' becomes one line naming the option
 * ("update: unrecognized option '--nmae'; see 'sandboxctl update --help'", or
 * "option '--vcpus' needs a value"). */
int ctl_usage(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reports a failed call: "sandboxctl: <context>: <message>" with the field
 * spelled as the flag the user typed (cli_error_text; the verb is the
 * context's first word), and with --json the error
 * object {code, message, data: {reason, field}} as one line on stderr too.
 * Returns the exit code for it (cli_exit_code). context may be NULL. */
int ctl_report(const ctl_globals *g, const char *context, const client_error *e);

/* Connects to the socket chosen by client_socket_path(g->socket). On
 * failure prints what to do and returns CLI_EXIT_UNREACHABLE; 0 on
 * success with *ret owned by the caller. */
int ctl_connect(const ctl_globals *g, client **ret);

/* One request on a connection of its own: connects (ctl_connect), calls
 * `method` with `params` (taken, even on failure), and stores the result
 * in *ret (caller deletes). On an error reply reports it (ctl_report with
 * `context`) and returns its exit code; 0 on success. */
int ctl_call(const ctl_globals *g, const char *context, const char *method, cJSON *params, cJSON **ret);

/* Pretty-prints `json` on stdout followed by a newline. */
void ctl_print_json(const cJSON *json);

/* Prints an object as "key: value" lines: nested objects flatten to
 * "a.b: v", arrays of scalars join with ", ", arrays of objects index as
 * "a[0].b: v", null prints "-". */
void ctl_print_fields(const cJSON *obj);

/* Prints a table: a header row and rows of `ncols` strings each (NULL
 * prints "-"), columns padded to the widest cell. */
void ctl_print_table(const char *const *header, size_t ncols, char ***rows, size_t nrows);

/* `exec` (cli/exec.c): argv[0] is "exec". Returns the exit code. */
int ctl_exec(ctl_globals *g, int argc, char **argv);

/* `fork`, `snapshot`, `snapshots` (cli/snapshot.c). Return the exit code. */
int ctl_fork(ctl_globals *g, int argc, char **argv);
int ctl_snapshot(ctl_globals *g, int argc, char **argv);
int ctl_snapshots(ctl_globals *g, int argc, char **argv);

/* `command get|wait|kill|logs ID` (cli/command.c). Returns the exit code;
 * `command wait` returns the command's own. */
int ctl_command(ctl_globals *g, int argc, char **argv);

/* `runtime list|import|bootstrap|rm` (cli/runtime.c). Returns the exit code. */
int ctl_runtime(ctl_globals *g, int argc, char **argv);

/* Writes all of buf to fd, retrying on EINTR. Returns 0 or a negative errno. */
int ctl_write_all(int fd, const void *buf, size_t len);

/* `policy test` and `events` (cli/policy.c). Return the exit code. */
int ctl_policy(ctl_globals *g, int argc, char **argv);
int ctl_events(ctl_globals *g, int argc, char **argv);

/* Adds `value` to the list `list` ("allow", "subnets.allow" or
 * "subnets.deny") of the custom policy document *doc, creating the document
 * ({"allow": [...], "subnets": {"allow": [...], "deny": [...]}}) on first
 * use; the caller owns *doc. For create's and update's --allow,
 * --allow-subnet and --deny-subnet; the daemon validates the values.
 * Returns 0 or -ENOMEM. */
int ctl_policy_add(cJSON **doc, const char *list, const char *value);

/* `fs ls|stat|mkdir|rm NAME:PATH` (cli/fs.c): argv[0] is "fs". Returns the
 * exit code. */
int ctl_fs(ctl_globals *g, int argc, char **argv);

/* Whether create (or get-or-create) with `params` shows the progress of its
 * source fetch (cli/progress.c): a git or tarball source, standard error a
 * terminal, and no --json. */
bool ctl_progress_wanted(const ctl_globals *g, const cJSON *params);

/* ctl_call() of a create-like `method` with "progress": true added to
 * `params` (taken): the daemon's sandbox.progress notifications are shown
 * on standard error as one line rewritten in place, cleared before this
 * returns. Same results as ctl_call(). */
int ctl_call_progress(const ctl_globals *g, const char *context, const char *method, cJSON *params, cJSON **ret);
