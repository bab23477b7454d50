/* Size limits of request parameters, checked where a request arrives so an
 * oversized value is refused with -32602 naming the field and the limit,
 * instead of being stored and failing later (a run packet to sandbox-init
 * holds at most AGENT_MAX_PACKET bytes, libcore/agent.h). docs/API.md
 * "Limits" lists the same numbers.
 *
 * Sizes are JSON-encoded bytes of a string without its quotes, as the agent
 * packet carries it: the UTF-8 length, plus one per '"', '\\' and \b \f \n
 * \r \t, plus five per other control character. The budget of one run
 * packet: sandbox env + command env + args + cmd + cwd + meta (4096,
 * escaped at most 6x) stays below AGENT_MAX_PACKET. */
#pragma once

#include <stddef.h>
#include <cjson/cJSON.h>
#include "libcore/error.h"

#define LIMIT_QUOTE_CHARS 64            /* characters of any input quoted in a message */
#define LIMIT_JSON_DEPTH 64             /* nesting of arrays and objects in one request line */
#define LIMIT_CMD_BYTES 4096
#define LIMIT_CWD_BYTES 4096
#define LIMIT_PATH_BYTES 4096
#define LIMIT_ARGS_COUNT 4096
#define LIMIT_ARGS_BYTES (64 * 1024)    /* all args together */
#define LIMIT_ENV_COUNT 1024
#define LIMIT_ENV_NAME_BYTES 255
#define LIMIT_ENV_VALUE_BYTES (32 * 1024)
#define LIMIT_ENV_BYTES (64 * 1024)     /* all names and values together, each pair counted as name=value */
#define LIMIT_TAG_COUNT 5
#define LIMIT_TAG_NAME_BYTES 255
#define LIMIT_TAG_VALUE_BYTES 1024
/* String parameters that name or locate something (schema.c's
 * schema_limits lists which parameter takes which). */
#define LIMIT_NAME_BYTES 63             /* sandbox and runtime names: [a-z0-9][a-z0-9-]{0,62} (DESIGN §3) */
#define LIMIT_ID_BYTES 64               /* snapshot ids, cmdIds, stream ids (made by the daemon: 16-37 bytes) */
#define LIMIT_URL_BYTES 4096            /* source URLs, policy.check url */
#define LIMIT_REVISION_BYTES 1024       /* a git revision: a ref name or an object id */
#define LIMIT_USERNAME_BYTES 1024
#define LIMIT_PASSWORD_BYTES 4096       /* room for a long token */
#define LIMIT_HOST_BYTES 253            /* a DNS name (RFC 1035; POL_NAME_MAX) or an address */
#define LIMIT_SUITE_BYTES 32            /* a Debian suite (runtime.c suite_is_valid) */
#define LIMIT_MIRROR_BYTES 400          /* a debootstrap mirror URL (runtime.c mirror_is_valid) */
#define LIMIT_WORD_BYTES 16             /* a signal name, a protocol */

/* The limits of a string-to-string map parameter (env, tags). */
typedef struct limit_map {
        unsigned max_entries;
        size_t max_name, max_value, max_total;
} limit_map;

extern const limit_map limit_env, limit_tags;

/* JSON-encoded length of `s` without its quotes (see above). */
size_t limit_json_len(const char *s);

/* Checks a JSON object of strings against `lim`: each value a string, each
 * name 1..max_name bytes without '=', each value and the sum of
 * "name=value" within bounds. `field` names the parameter in the error
 * (-EINVAL / -E2BIG with field "env" or "env.NAME"). Returns 0 or a
 * negative errno with *ret_err set. */
int limit_check_map(const cJSON *map, const char *field, const limit_map *lim, sb_error **ret_err);

/* Checks that `s` is at most `max` encoded bytes; error names `field`. */
int limit_check_string(const char *s, const char *field, size_t max, sb_error **ret_err);

/* Checks a command's argument array: strings only, at most
 * LIMIT_ARGS_COUNT entries and LIMIT_ARGS_BYTES together. */
int limit_check_args(const cJSON *args, const char *field, sb_error **ret_err);
