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

/* Set by main when the command line has --json (before any "--"): every
 * error is then reported as one JSON object on stderr and nothing else
 * (ctl_print_error_json), usage errors and unreachable daemons included. */
extern bool ctl_json_errors;

/* Prints "sandboxctl: <message>" on stderr and returns `exit_code`; in
 * --json mode the error object instead, and nothing for a notice
 * (exit_code 0). */
int ctl_error(int exit_code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the --json error object as one line on stderr:
 * {"error": {"code": C, "message": M, "data": {"reason": R, "field": F,
 * "exitCode": X, ...extra}}}. code is the daemon's JSON-RPC code, or for an
 * error sandboxctl found itself -32602 (usage) or -32000; reason and field
 * may be NULL (left out); the members of `extra` (an object, taken, may be
 * NULL) are added to data. */
void ctl_print_error_json(int code, const char *message, const char *reason, const char *field, int exit_code,
                          cJSON *extra);

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
 * context's first word), or with --json only the error object
 * (ctl_print_error_json) with the daemon's code, reason and field.
 * Returns the exit code for it (cli_exit_code). context may be NULL. */
int ctl_report(const ctl_globals *g, const char *context, const client_error *e);

/* Connects to the socket chosen by client_socket_path(g->socket). On
 * failure prints what to do and returns CLI_EXIT_UNREACHABLE; 0 on
 * success with *ret owned by the caller. */
int ctl_connect(const ctl_globals *g, client **ret);

/* ctl_connect after the daemon went away (a restart): tries quietly every
 * 100 ms for up to wait_ms, then once more reporting the failure as
 * ctl_connect does. Returns 0 with *ret, or CLI_EXIT_UNREACHABLE (or
 * CLI_EXIT_USAGE for bad TLS settings). */
int ctl_reconnect(const ctl_globals *g, unsigned wait_ms, client **ret);

/* One request on a connection of its own: connects (ctl_connect), calls
 * `method` with `params` (taken, even on failure), and stores the result
 * in *ret (caller deletes). On an error reply reports it (ctl_report with
 * `context`) and returns its exit code; 0 on success. */
int ctl_call(const ctl_globals *g, const char *context, const char *method, cJSON *params, cJSON **ret);

/* Writes s (NULL: nothing) to f with every byte a terminal may act on
 * shown as text: \n, \r and \t; other C0 controls, DEL and bytes that are
 * not part of valid UTF-8 as \xNN; C1 controls (U+0080 to U+009F) as
 * \uNNNN. Valid printable UTF-8 and the backslash pass unchanged. For every
 * human-readable output that can carry text from a sandbox or a client
 * (file names, command lines, tags, messages relayed from the daemon);
 * sandboxctl(1) "OUTPUT". */
void ctl_fput_escaped(FILE *f, const char *s);

/* ctl_fput_escaped() of s to stdout, then a newline. */
void ctl_puts_escaped(const char *s);

/* ctl_fput_escaped() into a new string (caller frees); NULL when out of
 * memory. */
char *ctl_escape(const char *s);

/* Pretty-prints `json` on stdout followed by a newline. */
void ctl_print_json(const cJSON *json);

/* Prints an object as "key: value" lines (keys and strings escaped,
 * ctl_fput_escaped): nested objects flatten to
 * "a.b: v", arrays of scalars join with ", ", arrays of objects index as
 * "a[0].b: v", null prints "-". */
void ctl_print_fields(const cJSON *obj);

/* Prints a table: a header row and rows of `ncols` strings each (NULL
 * prints "-"), each cell escaped (ctl_fput_escaped), columns padded to the
 * widest cell. */
void ctl_print_table(const char *const *header, size_t ncols, char ***rows, size_t nrows);

/* `volume` (cli/volume.c): create, ls, get, rm. Returns the exit code. */
int ctl_volume(ctl_globals *g, int argc, char **argv);

/* `exec` (cli/exec.c): argv[0] is "exec". Returns the exit code. */
int ctl_exec(ctl_globals *g, int argc, char **argv);

/* `fork`, `snapshot`, `snapshots` (cli/snapshot.c). Return the exit code. */
int ctl_fork(ctl_globals *g, int argc, char **argv);
int ctl_snapshot(ctl_globals *g, int argc, char **argv);
int ctl_snapshots(ctl_globals *g, int argc, char **argv);

/* `container ls|pause|resume` (cli/container.c). Returns the exit code. */
int ctl_container(ctl_globals *g, int argc, char **argv);

/* `command get|wait|kill|logs ID` (cli/command.c). Returns the exit code;
 * `command wait` returns the command's own. */
int ctl_command(ctl_globals *g, int argc, char **argv);

/* `ps NAME [--limit N] [--cursor C]` (cli/command.c): a sandbox's commands
 * from command.list. Returns the exit code. */
int ctl_ps(ctl_globals *g, int argc, char **argv);

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
/* `fs watch NAME:PATH [-r]` (cli/watch.c): fs.watch, one line per event on
 * stdout (with g->json one object per line) until Ctrl-C (exit 130) or the
 * watch ends (0, or the error's exit code). */
int ctl_fs_watch(ctl_globals *g, const char *name, const char *path, bool recursive);
/* SIGINT, SIGTERM and SIGHUP blocked and readable from the returned
 * signalfd (non-blocking, close-on-exec), so a loop that polls it beside
 * the socket never loses an interrupt; a negative errno on failure. */
int ctl_signal_fd(void);
/* Waits until `c` has a message to read (0) or `sfd`, from ctl_signal_fd(),
 * a signal: then the exit code to end with, CLI_EXIT_INTERRUPTED for SIGINT
 * and 128 + N for signal N; CLI_EXIT_ERROR when poll(2) fails, with `what`
 * (the verb) in the message printed. */
int ctl_wait_message(client *c, int sfd, const char *what);


/* Whether create (or get-or-create) with `params` shows the progress of its
 * source fetch (cli/progress.c): a git or tarball source, standard error a
 * terminal, and no --json. */
bool ctl_progress_wanted(const ctl_globals *g, const cJSON *params);

/* ctl_call() of a create-like `method` with "progress": true added to
 * `params` (taken): the daemon's sandbox.progress notifications are shown
 * on standard error as one line rewritten in place, cleared before this
 * returns. Same results as ctl_call(). */
int ctl_call_progress(const ctl_globals *g, const char *context, const char *method, cJSON *params, cJSON **ret);
