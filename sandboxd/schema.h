/* The parameter schema of every JSON-RPC method (schema.c): which keys each
 * method takes, at every level (resources, source per type, files[] items,
 * fork overrides), checked before a handler runs, so a typo, a wrong-case
 * key or a duplicated key is refused with -32602 naming its path instead of
 * being ignored. Types, ranges and sizes stay with the handlers and
 * sandboxd/limits.c; networkPolicy is validated by pol_policy_parse. The
 * same table prints the "Parameters" section of docs/API.md. */
#pragma once

#include <stdbool.h>
#include <stdio.h>
#include <cjson/cJSON.h>
#include "libcore/error.h"

typedef enum schema_kind {
        SCHEMA_VALUE,   /* a string, number, bool or array of them: no keys of its own */
        SCHEMA_OBJECT,  /* an object taking exactly the keys of `fields` */
        SCHEMA_ARRAY,   /* an array of objects, each taking the keys of `fields` */
        SCHEMA_MAP,     /* an object of names the caller chooses (env, tags) */
        SCHEMA_VARIANT, /* an object whose "type" chooses the keys (`variants`) */
        SCHEMA_POLICY,  /* a network policy: pol_policy_parse checks its keys */
} schema_kind;

typedef struct schema_variant schema_variant;

typedef struct schema_field {
        const char *key;                   /* NULL ends a list */
        schema_kind kind;
        bool required;
        const struct schema_field *fields; /* SCHEMA_OBJECT, SCHEMA_ARRAY */
        const schema_variant *variants;    /* SCHEMA_VARIANT, ended by a NULL type */
} schema_field;

struct schema_variant {
        const char *type;                  /* the value of "type" */
        const schema_field *fields;        /* every key but "type" */
};

typedef struct schema_method {
        const char *method;
        const schema_field *params;        /* ends with a NULL key */
} schema_method;

/* The size of every plain parameter (SCHEMA_VALUE) of every method: for a
 * string, the most JSON-encoded bytes it may have (sandboxd/limits.h's
 * measure), checked by schema_check_params on arrival; 0 for a value that
 * is not a string (number, bool, array) or whose bound is the line itself
 * (file content, stdin, chunks: maxLineBytes). `field` is the path with
 * "[]" for every item of an array ("files[].path"); "source.url" holds for
 * every source type that takes it. Maps (env, tags) are bounded by
 * limit_check_map, networkPolicy by the policy parser. Ends with a NULL
 * method. tests/unit/test-schema.c checks that every plain parameter of
 * schema_methods has its row here. */
typedef struct schema_limit {
        const char *method;
        const char *field;
        size_t max;
} schema_limit;
extern const schema_limit schema_limits[];

/* Prints the rows of docs/API.md's "String parameters" table to `f`: one
 * per method with a string limit, | `method` | `field` N, ... |. */
void schema_print_limits_markdown(FILE *f);

/* Every method, in docs/API.md order; ends with a NULL method. */
extern const schema_method schema_methods[];

/* The schema of `method`, or NULL when it has none. */
const schema_method *schema_find(const char *method);

/* Checks `params` (the request's params: an object, or an empty array
 * meaning none) against the schema of `method`: every key known (case
 * matters), none given twice, at every level the schema describes; values
 * of env/tags-like maps and any other object in params must not repeat a
 * key either (networkPolicy excepted: the policy parser checks its own).
 * Returns 0, or -EINVAL with *ret_err naming the path in `field`
 * ("resources.memory", "files[1].mdoe") and, for an unknown key close to a
 * known one, the hint `did you mean "timeoutMs"?`; then every string
 * within its schema_limits size, else -EINVAL naming the field and the
 * limit ("namePrefix: \"aaa...\": 64 bytes is over the limit of 63
 * bytes"; a password is not quoted). A method without a
 * schema is refused (-ENOENT): a new method must add its table. */
int schema_check_params(const char *method, const cJSON *params, sb_error **ret_err);

/* Checks an object's members against `allowed` (n names, case-sensitive)
 * and for duplicates, as schema_check_params does for params; `what` names
 * the object in messages ("the request"). Used for the JSON-RPC envelope.
 * Returns 0 or -EINVAL with *ret_err (field: the member's name). */
int schema_check_members(const cJSON *obj, const char *const *allowed, size_t n, const char *what,
                         sb_error **ret_err);

/* Prints the rows of docs/API.md's "Parameters" table to `f`, one per
 * method: | `method` | `key`, `opt?`, `obj?` {`sub?`}, `src?` (git: ...) |. */
void schema_print_markdown(FILE *f);
