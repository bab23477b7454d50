/* Pure helpers behind sandboxctl's arguments and exit status: durations,
 * K=V pairs, NAME:PATH operands, sandbox names, and the mapping from a
 * daemon error to an exit code (DESIGN §6). No I/O, so tests call them
 * directly. */
#pragma once

#include <stdint.h>
#include <cjson/cJSON.h>
#include "cli/client.h"

/* Exit codes (DESIGN §6 "CLI exit codes"; 69 and 2 follow sysexits.h and
 * getopt tradition, 130 is the shell's 128+SIGINT). */
enum {
        CLI_EXIT_OK = 0,
        CLI_EXIT_ERROR = 1,
        CLI_EXIT_USAGE = 2,
        CLI_EXIT_POLICY = 3,
        CLI_EXIT_NOT_FOUND = 4,
        CLI_EXIT_CONFLICT = 5,
        CLI_EXIT_UNREACHABLE = 69,
        CLI_EXIT_INTERRUPTED = 130,
};

/* Parses a DURATION: digits followed by "ms", "s", "m" or "h", or bare
 * digits meaning milliseconds ("90s", "5m", "2h", "1500"). Stores
 * milliseconds in *ret_ms (> 0). Returns 0, -EINVAL for anything else
 * (empty, sign, spaces, fractions, unknown unit, zero), -ERANGE when the
 * value does not fit in int64 milliseconds. */
int cli_parse_duration(const char *s, int64_t *ret_ms);

/* Parses a SIZE in MiB: digits followed by "M" or "MiB" (mebibytes), "G" or
 * "GiB", "T" or "TiB", or bare digits meaning MiB ("512M", "1G", "2048").
 * Stores MiB in *ret_mib (> 0). Returns 0, -EINVAL for anything else,
 * -ERANGE when it does not fit in 2^53 MiB. */
int cli_parse_size_mib(const char *s, int64_t *ret_mib);

/* Parses a --volume value "NAME:/PATH" or "NAME:/PATH:ro" into a new
 * {name, path, readOnly} object (*ret, caller deletes). NAME must be
 * non-empty and PATH start with '/'; the daemon checks the rest. Returns
 * 0, -EINVAL or -ENOMEM. */
int cli_parse_volume_mount(const char *s, struct cJSON **ret);

/* Formats milliseconds as the largest exact unit ("2h", "5m", "90s",
 * "1500ms") into buf (size >= 24). Returns buf. */
const char *cli_format_duration(int64_t ms, char *buf, size_t size);

/* Splits "K=V" at the first '='. K must be non-empty; V may be empty and may
 * itself contain '='. On success stores pointers into a new copy of s in
 * *ret_key and *ret_value; the caller frees *ret_key only (both live in one
 * allocation). Returns 0, -EINVAL, or -ENOMEM. */
int cli_parse_kv(const char *s, char **ret_key, char **ret_value);

/* Adds the pair from "K=V" to the JSON object `obj` (a later duplicate
 * replaces an earlier one). Returns 0, -EINVAL, -ENOMEM. */
int cli_kv_add(cJSON *obj, const char *s);

/* True when s is a valid sandbox name: [a-z0-9][a-z0-9-]{0,62}. */
bool cli_valid_name(const char *s);

/* Classifies a cp operand. "NAME:PATH" with a valid sandbox name and a
 * non-empty PATH is remote: returns 1 and stores new strings in *ret_name
 * and *ret_path. Anything else ("-", "./a:b", "/tmp/x", "Foo:bar") is a
 * local path: returns 0 and leaves the outputs untouched. Returns -ENOMEM on
 * allocation failure. A local path containing ':' can always be written
 * with a "./" or "/" in front to keep it local. */
int cli_parse_remote(const char *s, char **ret_name, char **ret_path);

/* The exit code for a failed call (DESIGN §6): invalid_policy (or an
 * invalid parameter under networkPolicy) 3, not_found 4, already_exists and
 * in_use 5, any other invalid parameter (-32602: a value the user typed) 2
 * like a client-side usage error, except an export path that exists (5), a
 * lost connection 69, anything else 1. NULL gives 1. */
int cli_exit_code(const client_error *e);

/* The command line spelling of the request field `field` (data.field of an
 * error) for sandboxctl verb `verb` (its first word: "create", "update",
 * "snapshots"; may be NULL): "timeout" → "--timeout", "resources.vcpus" →
 * "--vcpus", "ports[3]" → "--port", "env.K" → "--env K", "name" → "--name"
 * for create and fork, "NAME" elsewhere. Returns a new string the caller
 * frees, or NULL when the field has no flag (or on ENOMEM). */
char *cli_field_flag(const char *verb, const char *field);

/* The message sandboxctl prints for a daemon error under `verb`: a leading
 * "FIELD:" becomes the flag the user typed ("--timeout: must be ..."); when
 * the message does not name the field or flag, " (FLAG)" is appended, but
 * never after a message that already ends in a parenthetical. Errors in the
 * network policy keep their document path ("networkPolicy.allow[0]: ...")
 * and get the options appended. Returns a new
 * string (NULL on ENOMEM). */
char *cli_error_text(const char *verb, const client_error *e);
