/* The network policy document (DESIGN §5.1, the API's `networkPolicy`):
 * parsing and validation from JSON into a typed, immutable struct with
 * field-path errors, printing back (with header values redacted), and the
 * string matchers (exact, startsWith, regex via PCRE2) the HTTP rules use.
 *
 * Fail closed: a document that does not validate yields an error and no
 * policy; nothing is ever silently widened or dropped. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "libcore/error.h"
#include "policy/match.h"

/* Size limits: a policy travels in one JSON-RPC request and is evaluated on
 * every connection, so it stays small. */
#define POL_MAX_PATTERNS 1024
#define POL_MAX_CIDRS 1024
#define POL_MAX_RULES 64       /* per pattern */
#define POL_MAX_LIST 64        /* methods, queryString, headers, transforms */
#define POL_MAX_REGEX 1024     /* bytes of regex source */
#define POL_MAX_STRING 8192    /* any other string */
#define POL_REGEX_MATCH_LIMIT 100000
#define POL_REGEX_DEPTH_LIMIT 1000

typedef enum pol_mode {
        POL_MODE_ALLOW_ALL,
        POL_MODE_DENY_ALL,
        POL_MODE_CUSTOM,
} pol_mode;

typedef enum pol_str_kind {
        POL_STR_EXACT,
        POL_STR_STARTS_WITH,
        POL_STR_REGEX,
} pol_str_kind;

struct pcre2_real_code_8;

/* M = {exact} | {startsWith} | {regex}. A regex must match the whole value
 * (anchored at both ends), with PCRE2 match and depth limits. */
typedef struct pol_str_match {
        pol_str_kind kind;
        char *text;
        struct pcre2_real_code_8 *re; /* POL_STR_REGEX only */
} pol_str_match;

/* KV = {key?: M, value?: M}; a missing matcher matches anything. */
typedef struct pol_kv {
        pol_str_match *key;
        pol_str_match *value;
} pol_kv;

/* Match = {path?, method?, queryString?, headers?}: every given dimension
 * must match; methods are ORed, queryString and headers matchers ANDed. */
typedef struct pol_match {
        pol_str_match *path;
        char **methods;
        size_t n_methods;
        pol_kv *query;
        size_t n_query;
        pol_kv *headers;
        size_t n_headers;
} pol_match;

typedef struct pol_header {
        char *name;
        char *value;
} pol_header;

/* One element of a transform list: {headers: {name: value}}. */
typedef struct pol_transform {
        pol_header *headers;
        size_t n_headers;
} pol_transform;

typedef enum pol_rule_kind {
        POL_RULE_TRANSFORM,
        POL_RULE_FORWARD,
} pol_rule_kind;

typedef struct pol_rule {
        pol_match *match; /* NULL: every request */
        pol_rule_kind kind;
        pol_transform *transforms;
        size_t n_transforms;
        char *forward_url;  /* as written, validated */
        char *forward_host; /* normalised name or address text */
        uint16_t forward_port;
        char *forward_path; /* starts with '/' */
} pol_rule;

/* One entry of `allow`: a pattern and, in the object form, its rules. */
struct pol_domain {
        pol_pattern pattern;
        pol_rule *rules;
        size_t n_rules;
};

struct pol_policy {
        pol_mode mode;
        bool allow_is_object; /* `allow` was the pattern → rules form */
        pol_domain *domains;
        size_t n_domains;
        pol_cidr *subnet_allow;
        size_t n_subnet_allow;
        pol_cidr *subnet_deny;
        size_t n_subnet_deny;
};

/* Parses and validates a `networkPolicy` value: NULL or JSON null mean the
 * default "allow-all" (rule 1). On success stores a new policy in *ret (the
 * caller frees it with pol_policy_free()) and returns 0. On failure returns
 * -EINVAL (or -ENOMEM), leaves *ret untouched and fills *ret_err with reason
 * "invalid_policy", field = the JSON path of the offending value
 * ("networkPolicy.subnets.allow[2]") and a message starting with that path
 * and saying how to fix it. */
int pol_policy_parse(const cJSON *json, pol_policy **ret, sb_error **ret_err);

/* Frees a policy (accepts NULL). */
void pol_policy_free(pol_policy *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(pol_policy, pol_policy_free);
#define _cleanup_policy_ _cleanup_(pol_policy_freep)

/* Prints a policy back as JSON in normalised form (patterns lowercased with
 * ":port", canonical CIDRs). With redact, every header value of a transform
 * is replaced by "<redacted>" (they carry credentials that must never reach
 * a sandbox or a log). Returns a new cJSON the caller deletes, or NULL on
 * ENOMEM. */
cJSON *pol_policy_to_json(const pol_policy *p, bool redact);

/* True when `value` (len bytes, need not be NUL-terminated) satisfies m.
 * A regex that hits its match limit does not match (fail closed). */
bool pol_str_match_test(const pol_str_match *m, const char *value, size_t len);

/* True when `name` is an HTTP field name: a token (RFC 9110 §5.6.2). */
bool pol_header_name_is_valid(const char *name);

/* True when `value` may be sent as a field value: no CR, LF or NUL
 * (RFC 9110 §5.5), and no other control character except HTAB. */
bool pol_header_value_is_valid(const char *value);
