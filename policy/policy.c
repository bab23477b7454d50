/* Parsing and validation of the networkPolicy document (DESIGN §5.1): JSON
 * to pol_policy with errors that name the field path and the fix, printing
 * back with redaction, and the exact / startsWith / regex string matchers.
 *
 * Fail closed: every unknown key, wrong type, duplicate or out-of-range
 * value is an error, and on any error the partial policy is freed and
 * nothing is returned (rule 8). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <arpa/inet.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "libcore/util.h"
#include "policy/policy.h"

#define ROOT "networkPolicy"

/* ---- errors and paths ------------------------------------------------------ */

/* Fills *err with reason invalid_policy, field = path, message "path: ...". */
_printf_(3, 4) static int fail(sb_error **err, const char *path, const char *fmt, ...) {
        _cleanup_free_ char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&msg, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        return sb_error_set(err, -EINVAL, "invalid_policy", path, "%s: %s", path, msg);
}

static char *path_index(const char *parent, size_t i) {
        char *s = NULL;
        return asprintf(&s, "%s[%zu]", parent, i) < 0 ? NULL : s;
}

static char *path_field(const char *parent, const char *field) {
        char *s = NULL;
        return asprintf(&s, "%s.%s", parent, field) < 0 ? NULL : s;
}

/* parent["key"], the key JSON-escaped and cut at 80 bytes so a hostile key
 * cannot make an error message huge. */
static char *path_key(const char *parent, const char *key) {
        char buf[80 * 6 + 8];
        size_t o = 0;
        for (size_t i = 0; key[i] && i < 80; i++) {
                unsigned char c = (unsigned char)key[i];
                if (c == '"' || c == '\\')
                        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\%c", c);
                else if (c < 0x20 || c == 0x7f)
                        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\u%04x", c);
                else
                        buf[o++] = (char)c;
        }
        buf[o] = '\0';
        char *s = NULL;
        return asprintf(&s, "%s[\"%s%s\"]", parent, buf, strlen(key) > 80 ? "..." : "") < 0 ? NULL : s;
}

/* Rejects keys outside `allowed` and duplicate keys (cJSON keeps both; which
 * one a reader would pick is ambiguous, so neither is taken). */
static int check_keys(const cJSON *obj, const char *path, const char *const *allowed, size_t n,
                      const char *hint, sb_error **err) {
        for (const cJSON *c = obj->child; c; c = c->next) {
                _cleanup_free_ char *sub = path_field(path, c->string);
                bool known = false;
                if (!sub)
                        return -ENOMEM;
                for (size_t i = 0; i < n; i++)
                        known = known || streq(c->string, allowed[i]);
                if (!known) {
                        /* The same hint as for method params (sandboxd/schema.c). */
                        int best = core_closest_word(c->string, allowed, n);
                        if (best >= 0)
                                return fail(err, sub, "unknown key; expected %s%s; did you mean \"%s\"?", hint,
                                            strcasecmp(c->string, allowed[best]) == 0 ? " (keys are case-sensitive)" : "",
                                            allowed[best]);
                        return fail(err, sub, "unknown key; expected %s", hint);
                }
                for (const cJSON *d = obj->child; d != c; d = d->next)
                        if (streq(d->string, c->string))
                                return fail(err, sub, "duplicate key");
        }
        return 0;
}

static int check_array(const cJSON *a, const char *path, size_t max, const char *what, sb_error **err) {
        if (!cJSON_IsArray(a))
                return fail(err, path, "must be an array of %s", what);
        if ((size_t)cJSON_GetArraySize(a) > max)
                return fail(err, path, "at most %zu entries are allowed", max);
        return 0;
}

static int check_string(const cJSON *s, const char *path, size_t max, sb_error **err) {
        if (!cJSON_IsString(s) || !s->valuestring)
                return fail(err, path, "must be a string");
        if (strlen(s->valuestring) > max)
                return fail(err, path, "longer than %zu bytes", max);
        return 0;
}

/* ---- string matchers ---------------------------------------------------- */

static void str_match_free(pol_str_match *m) {
        if (!m)
                return;
        pcre2_code_free(m->re);
        free(m->text);
        free(m);
}

static int compile_regex(pol_str_match *m, const char *path, sb_error **err) {
        pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
        PCRE2_UCHAR msg[256];
        PCRE2_SIZE off = 0;
        int code = 0;
        if (!cc)
                return -ENOMEM;
        /* Bounded nesting keeps compile time and stack use small; the
         * whole value must match so "^...$" is not needed and a forgotten
         * anchor cannot widen a rule. */
        pcre2_set_parens_nest_limit(cc, 64);
        m->re = pcre2_compile((PCRE2_SPTR)m->text, PCRE2_ZERO_TERMINATED,
                              PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NEVER_UTF | PCRE2_NEVER_UCP |
                                      PCRE2_NEVER_BACKSLASH_C,
                              &code, &off, cc);
        pcre2_compile_context_free(cc);
        if (m->re)
                return 0;
        if (pcre2_get_error_message(code, msg, sizeof(msg)) < 0)
                snprintf((char *)msg, sizeof(msg), "error %d", code);
        return fail(err, path, "invalid regular expression at offset %zu: %s", (size_t)off, (char *)msg);
}

static const char *const m_keys[] = {"exact", "startsWith", "regex"};

/* M = {exact} | {startsWith} | {regex}: exactly one key. */
static int parse_str_match(const cJSON *j, const char *path, pol_str_match **ret, sb_error **err) {
        pol_str_match *m;
        int r;
        if (!cJSON_IsObject(j) || cJSON_GetArraySize(j) != 1)
                return fail(err, path, "must be an object with exactly one of \"exact\", \"startsWith\", \"regex\"");
        if ((r = check_keys(j, path, m_keys, ELEMENTSOF(m_keys), "\"exact\", \"startsWith\" or \"regex\"", err)) < 0)
                return r;
        _cleanup_free_ char *sub = path_field(path, j->child->string);
        if (!sub)
                return -ENOMEM;
        bool regex = streq(j->child->string, "regex");
        if ((r = check_string(j->child, sub, regex ? POL_MAX_REGEX : POL_MAX_STRING, err)) < 0)
                return r;
        if (!(m = calloc(1, sizeof(*m))) || !(m->text = strdup(j->child->valuestring))) {
                free(m);
                return -ENOMEM;
        }
        m->kind = regex ? POL_STR_REGEX : streq(j->child->string, "exact") ? POL_STR_EXACT : POL_STR_STARTS_WITH;
        if (regex && (r = compile_regex(m, sub, err)) < 0) {
                str_match_free(m);
                return r;
        }
        *ret = m;
        return 0;
}

bool pol_str_match_test(const pol_str_match *m, const char *value, size_t len) {
        size_t tlen = strlen(m->text);
        if (m->kind == POL_STR_EXACT)
                return len == tlen && memcmp(value, m->text, len) == 0;
        if (m->kind == POL_STR_STARTS_WITH)
                return len >= tlen && memcmp(value, m->text, tlen) == 0;
        pcre2_match_context *mc = pcre2_match_context_create(NULL);
        pcre2_match_data *md = pcre2_match_data_create(1, NULL);
        int rc = -1;
        /* Limits bound the backtracking a hostile request can cause; hitting
         * one is "no match" (fail closed: no transform or forward). */
        if (mc && md) {
                pcre2_set_match_limit(mc, POL_REGEX_MATCH_LIMIT);
                pcre2_set_depth_limit(mc, POL_REGEX_DEPTH_LIMIT);
                rc = pcre2_match(m->re, (PCRE2_SPTR)value, len, 0, 0, md, mc);
        }
        pcre2_match_data_free(md);
        pcre2_match_context_free(mc);
        return rc >= 0;
}

/* ---- HTTP tokens and field values ------------------------------------------ */

bool pol_header_name_is_valid(const char *name) {
        /* tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "."
         *       / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA */
        if (!name || !*name)
                return false;
        for (const char *c = name; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                      strchr("!#$%&'*+-.^_`|~", *c)))
                        return false;
        return true;
}

bool pol_header_value_is_valid(const char *value) {
        if (!value)
                return false;
        for (const unsigned char *c = (const unsigned char *)value; *c; c++)
                if ((*c < 0x20 && *c != '\t') || *c == 0x7f)
                        return false;
        return true;
}

/* Headers a transform may not set: they frame the message or route it, so
 * overwriting them would let a policy desynchronise the proxy and the
 * upstream (request smuggling) or spoof the forwarding headers of rule 7. */
static const char *const reserved_headers[] = {
        "host",    "content-length", "transfer-encoding", "connection",
        "upgrade", "te",             "trailer",           "keep-alive",
        "proxy-connection", "x-sandbox-forwarded-host", "x-sandbox-forwarded-scheme",
        "x-sandbox-forwarded-port",
};

static bool header_is_reserved(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(reserved_headers); i++)
                if (strcasecmp(name, reserved_headers[i]) == 0)
                        return true;
        return false;
}

/* ---- Match ------------------------------------------------------------------ */

static void kv_list_free(pol_kv *kv, size_t n) {
        for (size_t i = 0; kv && i < n; i++) {
                str_match_free(kv[i].key);
                str_match_free(kv[i].value);
        }
        free(kv);
}

static void match_free(pol_match *m) {
        if (!m)
                return;
        str_match_free(m->path);
        for (size_t i = 0; i < m->n_methods; i++)
                free(m->methods[i]);
        free(m->methods);
        kv_list_free(m->query, m->n_query);
        kv_list_free(m->headers, m->n_headers);
        free(m);
}

static const char *const kv_keys[] = {"key", "value"};

/* [KV]: each {key?: M, value?: M} with at least one of the two. */
static int parse_kv_list(const cJSON *a, const char *path, pol_kv **ret, size_t *ret_n, sb_error **err) {
        int r;
        if ((r = check_array(a, path, POL_MAX_LIST, "{\"key\"?: M, \"value\"?: M} objects", err)) < 0)
                return r;
        size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
        pol_kv *kv = calloc(n ? n : 1, sizeof(*kv));
        if (!kv)
                return -ENOMEM;
        *ret = kv; /* owned by the match from here on, freed with it */
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                _cleanup_free_ char *sub = path_index(path, i), *kp = NULL, *vp = NULL;
                if (!sub || !(kp = path_field(sub, "key")) || !(vp = path_field(sub, "value")))
                        return -ENOMEM;
                if (!cJSON_IsObject(e) || !e->child)
                        return fail(err, sub, "must be an object with \"key\" and/or \"value\"");
                if ((r = check_keys(e, sub, kv_keys, 2, "\"key\" or \"value\"", err)) < 0)
                        return r;
                *ret_n = i + 1;
                const cJSON *k = cJSON_GetObjectItemCaseSensitive(e, "key");
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "value");
                if (k && (r = parse_str_match(k, kp, &kv[i].key, err)) < 0)
                        return r;
                if (v && (r = parse_str_match(v, vp, &kv[i].value, err)) < 0)
                        return r;
        }
        return 0;
}

static int parse_methods(const cJSON *a, const char *path, pol_match *m, sb_error **err) {
        int r;
        size_t i = 0;
        if ((r = check_array(a, path, POL_MAX_LIST, "HTTP methods", err)) < 0)
                return r;
        if (cJSON_GetArraySize(a) == 0)
                return fail(err, path, "must name at least one method, or be left out to match every method");
        if (!(m->methods = calloc((size_t)cJSON_GetArraySize(a), sizeof(char *))))
                return -ENOMEM;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                _cleanup_free_ char *sub = path_index(path, i);
                if (!sub)
                        return -ENOMEM;
                if ((r = check_string(e, sub, 64, err)) < 0)
                        return r;
                /* Methods are case-sensitive tokens (RFC 9110 §9.1). */
                if (!pol_header_name_is_valid(e->valuestring))
                        return fail(err, sub, "\"%s\" is not an HTTP method token (e.g. \"GET\")", e->valuestring);
                if (!(m->methods[i] = strdup(e->valuestring)))
                        return -ENOMEM;
                m->n_methods = i + 1;
        }
        return 0;
}

static const char *const match_keys[] = {"path", "method", "queryString", "headers"};

static int parse_match(const cJSON *j, const char *path, pol_match **ret, sb_error **err) {
        _cleanup_free_ char *pp = path_field(path, "path"), *mp = path_field(path, "method"),
                            *qp = path_field(path, "queryString"), *hp = path_field(path, "headers");
        pol_match *m;
        const cJSON *v;
        int r = 0;
        if (!pp || !mp || !qp || !hp)
                return -ENOMEM;
        if (!cJSON_IsObject(j))
                return fail(err, path, "must be an object with \"path\", \"method\", \"queryString\" or \"headers\"");
        if ((r = check_keys(j, path, match_keys, ELEMENTSOF(match_keys),
                            "\"path\", \"method\", \"queryString\" or \"headers\"", err)) < 0)
                return r;
        if (!(m = calloc(1, sizeof(*m))))
                return -ENOMEM;
        if ((v = cJSON_GetObjectItemCaseSensitive(j, "path")))
                r = parse_str_match(v, pp, &m->path, err);
        if (r >= 0 && (v = cJSON_GetObjectItemCaseSensitive(j, "method")))
                r = parse_methods(v, mp, m, err);
        if (r >= 0 && (v = cJSON_GetObjectItemCaseSensitive(j, "queryString")))
                r = parse_kv_list(v, qp, &m->query, &m->n_query, err);
        if (r >= 0 && (v = cJSON_GetObjectItemCaseSensitive(j, "headers")))
                r = parse_kv_list(v, hp, &m->headers, &m->n_headers, err);
        if (r < 0) {
                match_free(m);
                return r;
        }
        *ret = m;
        return 0;
}

/* ---- transform and forwardURL --------------------------------------------- */

static void transforms_free(pol_transform *t, size_t n) {
        for (size_t i = 0; t && i < n; i++) {
                for (size_t k = 0; k < t[i].n_headers; k++) {
                        free(t[i].headers[k].name);
                        free(t[i].headers[k].value);
                }
                free(t[i].headers);
        }
        free(t);
}

static int parse_headers(const cJSON *h, const char *path, pol_transform *t, sb_error **err) {
        size_t n = (size_t)cJSON_GetArraySize(h), i = 0;
        if (!cJSON_IsObject(h) || n == 0)
                return fail(err, path, "must be a non-empty object mapping header names to values");
        if (n > POL_MAX_LIST)
                return fail(err, path, "at most %d headers are allowed", POL_MAX_LIST);
        if (!(t->headers = calloc(n, sizeof(*t->headers))))
                return -ENOMEM;
        for (const cJSON *e = h->child; e; e = e->next, i++) {
                _cleanup_free_ char *sub = path_key(path, e->string);
                int r;
                if (!sub)
                        return -ENOMEM;
                if (!pol_header_name_is_valid(e->string))
                        return fail(err, sub, "not a valid header name (an HTTP token, RFC 9110 §5.6.2)");
                if (header_is_reserved(e->string))
                        return fail(err, sub, "this header frames or routes the request and cannot be set");
                for (size_t k = 0; k < i; k++)
                        if (strcasecmp(t->headers[k].name, e->string) == 0)
                                return fail(err, sub, "duplicate header (names are case-insensitive)");
                if ((r = check_string(e, sub, POL_MAX_STRING, err)) < 0)
                        return r;
                if (!pol_header_value_is_valid(e->valuestring))
                        return fail(err, sub, "header value contains CR, LF or another control character "
                                              "(RFC 9110 §5.5); remove it");
                if (!(t->headers[i].name = strdup(e->string)) || !(t->headers[i].value = strdup(e->valuestring))) {
                        free(t->headers[i].name);
                        return -ENOMEM;
                }
                t->n_headers = i + 1;
        }
        return 0;
}

static const char *const transform_keys[] = {"headers"};

static int parse_transforms(const cJSON *a, const char *path, pol_rule *rule, sb_error **err) {
        int r;
        size_t i = 0;
        if ((r = check_array(a, path, POL_MAX_LIST, "{\"headers\": {...}} objects", err)) < 0)
                return r;
        if (cJSON_GetArraySize(a) == 0)
                return fail(err, path, "must hold at least one {\"headers\": {...}} object");
        if (!(rule->transforms = calloc((size_t)cJSON_GetArraySize(a), sizeof(pol_transform))))
                return -ENOMEM;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                _cleanup_free_ char *sub = path_index(path, i), *hp = NULL;
                if (!sub || !(hp = path_field(sub, "headers")))
                        return -ENOMEM;
                if (!cJSON_IsObject(e) || !cJSON_GetObjectItemCaseSensitive(e, "headers"))
                        return fail(err, sub, "must be an object {\"headers\": {\"<name>\": \"<value>\"}}");
                if ((r = check_keys(e, sub, transform_keys, 1, "\"headers\"", err)) < 0)
                        return r;
                rule->n_transforms = i + 1;
                if ((r = parse_headers(cJSON_GetObjectItemCaseSensitive(e, "headers"), hp,
                                       &rule->transforms[i], err)) < 0)
                        return r;
        }
        return 0;
}

/* Validates the authority of a forwardURL; fills host and port. */
static int parse_forward_authority(const char *auth, const char *path, pol_rule *rule, sb_error **err) {
        pol_host h;
        const char *why = NULL;
        char buf[INET6_ADDRSTRLEN + 2];
        if (strchr(auth, '@'))
                return fail(err, path, "user information (\"user@\") is not allowed in forwardURL");
        if (auth[0] != '[' && strchr(auth, ':') != strrchr(auth, ':'))
                return fail(err, path, "an IPv6 host must be written in brackets (https://[2001:db8::1]/)");
        if (!*auth || pol_host_parse(auth, &h, &why) < 0)
                return fail(err, path, "invalid host \"%s\": %s", auth, why ? why : "empty host");
        if (h.is_addr) {
                /* The proxy runs on the host: forwarding to a loopback,
                 * link-local or private address would reach the host's own
                 * services or cloud metadata. */
                const pol_range *r = pol_addr_classify(&h.addr);
                if (r)
                        return fail(err, path, "%s is a %s address (%s, %s); forward only to public hosts",
                                    pol_addr_format(&h.addr, buf, sizeof(buf)), pol_range_kind_to_string(r->kind),
                                    r->cidr, r->source);
        } else if (!strchr(h.name, '.'))
                return fail(err, path, "host \"%s\" must be a fully qualified name", h.name);
        rule->forward_host = strdup(h.is_addr ? pol_addr_format(&h.addr, buf, sizeof(buf)) : h.name);
        rule->forward_port = h.port ? h.port : 443;
        return rule->forward_host ? 0 : -ENOMEM;
}

static int parse_forward_url(const cJSON *j, const char *path, pol_rule *rule, sb_error **err) {
        int r;
        if ((r = check_string(j, path, 2048, err)) < 0)
                return r;
        const char *url = j->valuestring;
        if (strncasecmp(url, "https://", 8) != 0)
                return fail(err, path, "\"%s\": forwardURL must use https://", url);
        for (const unsigned char *c = (const unsigned char *)url; *c; c++)
                if (*c <= 0x20 || *c >= 0x7f)
                        return fail(err, path, "forwardURL must not contain spaces, control or non-ASCII characters");
        if (strpbrk(url, "?#"))
                return fail(err, path, "\"%s\": forwardURL must not have a query or fragment", url);
        const char *slash = strchr(url + 8, '/');
        _cleanup_free_ char *auth = slash ? strndup(url + 8, (size_t)(slash - url - 8)) : strdup(url + 8);
        if (!auth)
                return -ENOMEM;
        if ((r = parse_forward_authority(auth, path, rule, err)) < 0)
                return r;
        rule->forward_path = strdup(slash ? slash : "/");
        rule->forward_url = strdup(url);
        return rule->forward_path && rule->forward_url ? 0 : -ENOMEM;
}

/* ---- rules and domains -------------------------------------------------------- */

static void rule_clear(pol_rule *r) {
        match_free(r->match);
        transforms_free(r->transforms, r->n_transforms);
        free(r->forward_url);
        free(r->forward_host);
        free(r->forward_path);
}

static const char *const rule_keys[] = {"match", "transform", "forwardURL"};

static int parse_rule(const cJSON *j, const char *path, pol_rule *rule, sb_error **err) {
        const cJSON *m, *t, *f;
        int r;
        if (!cJSON_IsObject(j))
                return fail(err, path, "a rule must be an object {\"match\"?, \"transform\" | \"forwardURL\"}");
        if ((r = check_keys(j, path, rule_keys, ELEMENTSOF(rule_keys), "\"match\", \"transform\" or \"forwardURL\"",
                            err)) < 0)
                return r;
        m = cJSON_GetObjectItemCaseSensitive(j, "match");
        t = cJSON_GetObjectItemCaseSensitive(j, "transform");
        f = cJSON_GetObjectItemCaseSensitive(j, "forwardURL");
        if (!t == !f)
                return fail(err, path, "a rule needs exactly one of \"transform\" or \"forwardURL\"");
        _cleanup_free_ char *mp = path_field(path, "match"), *tp = path_field(path, "transform"),
                            *fp = path_field(path, "forwardURL");
        if (!mp || !tp || !fp)
                return -ENOMEM;
        if (m && (r = parse_match(m, mp, &rule->match, err)) < 0)
                return r;
        rule->kind = t ? POL_RULE_TRANSFORM : POL_RULE_FORWARD;
        return t ? parse_transforms(t, tp, rule, err) : parse_forward_url(f, fp, rule, err);
}

static int parse_rules(const cJSON *a, const char *path, pol_domain *d, sb_error **err) {
        int r;
        size_t i = 0;
        if ((r = check_array(a, path, POL_MAX_RULES, "rules", err)) < 0)
                return r;
        if (!(d->rules = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof(pol_rule))))
                return -ENOMEM;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                _cleanup_free_ char *sub = path_index(path, i);
                if (!sub)
                        return -ENOMEM;
                d->n_rules = i + 1;
                if ((r = parse_rule(e, sub, &d->rules[i], err)) < 0)
                        return r;
        }
        return 0;
}

/* Parses one pattern into p->domains[i]; `quote` repeats the pattern in the
 * message when the path does not already show it (the array form). */
static int parse_domain_pattern(pol_policy *p, size_t i, const char *text, const char *path, bool quote,
                                sb_error **err) {
        const char *why = NULL;
        pol_pattern *pat = &p->domains[i].pattern;
        if (pol_pattern_parse(text, pat, &why) < 0)
                return quote ? fail(err, path, "\"%s\": %s", text, why) : fail(err, path, "%s", why);
        for (size_t k = 0; k < i; k++)
                if (streq(p->domains[k].pattern.text, pat->text) && p->domains[k].pattern.port == pat->port)
                        return fail(err, path, "duplicate pattern; it is already listed as entry %zu", k);
        p->n_domains = i + 1;
        return 0;
}

static int parse_allow(const cJSON *a, pol_policy *p, sb_error **err) {
        const char *path = ROOT ".allow";
        size_t n = (size_t)cJSON_GetArraySize(a), i = 0;
        int r;
        if (!cJSON_IsArray(a) && !cJSON_IsObject(a))
                return fail(err, path, "must be an array of domain patterns or an object mapping patterns to rules");
        if (n > POL_MAX_PATTERNS)
                return fail(err, path, "at most %d patterns are allowed", POL_MAX_PATTERNS);
        p->allow_is_object = cJSON_IsObject(a);
        if (!(p->domains = calloc(n ? n : 1, sizeof(pol_domain))))
                return -ENOMEM;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                _cleanup_free_ char *sub = p->allow_is_object ? path_key(path, e->string) : path_index(path, i);
                if (!sub)
                        return -ENOMEM;
                if (!p->allow_is_object) {
                        if ((r = check_string(e, sub, POL_MAX_STRING, err)) < 0 ||
                            (r = parse_domain_pattern(p, i, e->valuestring, sub, true, err)) < 0)
                                return r;
                        continue;
                }
                if ((r = parse_domain_pattern(p, i, e->string, sub, false, err)) < 0 ||
                    (r = parse_rules(e, sub, &p->domains[i], err)) < 0)
                        return r;
        }
        return 0;
}

static int parse_cidr_list(const cJSON *a, const char *path, pol_cidr **ret, size_t *ret_n, sb_error **err) {
        int r;
        size_t i = 0;
        if ((r = check_array(a, path, POL_MAX_CIDRS, "CIDRs", err)) < 0)
                return r;
        if (!(*ret = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof(pol_cidr))))
                return -ENOMEM;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
                _cleanup_free_ char *sub = path_index(path, i), *why = NULL;
                if (!sub)
                        return -ENOMEM;
                if ((r = check_string(e, sub, 64, err)) < 0)
                        return r;
                if ((r = pol_cidr_parse(e->valuestring, &(*ret)[i], &why)) < 0)
                        return why ? fail(err, sub, "%s", why) : r;
                *ret_n = i + 1;
        }
        return 0;
}

static const char *const subnet_keys[] = {"allow", "deny"};

static int parse_subnets(const cJSON *s, pol_policy *p, sb_error **err) {
        const char *path = ROOT ".subnets";
        const cJSON *a, *d;
        int r;
        if (!cJSON_IsObject(s))
                return fail(err, path, "must be an object {\"allow\"?: [CIDR], \"deny\"?: [CIDR]}");
        if ((r = check_keys(s, path, subnet_keys, 2, "\"allow\" or \"deny\"", err)) < 0)
                return r;
        if ((a = cJSON_GetObjectItemCaseSensitive(s, "allow")) &&
            (r = parse_cidr_list(a, ROOT ".subnets.allow", &p->subnet_allow, &p->n_subnet_allow, err)) < 0)
                return r;
        if ((d = cJSON_GetObjectItemCaseSensitive(s, "deny")) &&
            (r = parse_cidr_list(d, ROOT ".subnets.deny", &p->subnet_deny, &p->n_subnet_deny, err)) < 0)
                return r;
        return 0;
}

static const char *const top_keys[] = {"allow", "subnets"};

int pol_policy_parse(const cJSON *json, pol_policy **ret, sb_error **ret_err) {
        _cleanup_policy_ pol_policy *p = calloc(1, sizeof(*p));
        const cJSON *a, *s;
        int r;
        if (!p)
                return -ENOMEM;
        if (!json || cJSON_IsNull(json))
                p->mode = POL_MODE_ALLOW_ALL; /* rule 1 */
        else if (cJSON_IsString(json) && json->valuestring && streq(json->valuestring, "allow-all"))
                p->mode = POL_MODE_ALLOW_ALL;
        else if (cJSON_IsString(json) && json->valuestring && streq(json->valuestring, "deny-all"))
                p->mode = POL_MODE_DENY_ALL;
        else if (cJSON_IsString(json))
                return fail(ret_err, ROOT, "unknown policy \"%.64s\"; use \"allow-all\", \"deny-all\" or a policy object",
                            json->valuestring ? json->valuestring : "");
        else if (!cJSON_IsObject(json))
                return fail(ret_err, ROOT, "must be \"allow-all\", \"deny-all\" or a policy object");
        else {
                p->mode = POL_MODE_CUSTOM;
                if ((r = check_keys(json, ROOT, top_keys, 2, "\"allow\" or \"subnets\"", ret_err)) < 0)
                        return r;
                if ((a = cJSON_GetObjectItemCaseSensitive(json, "allow")) && (r = parse_allow(a, p, ret_err)) < 0)
                        return r;
                if ((s = cJSON_GetObjectItemCaseSensitive(json, "subnets")) &&
                    (r = parse_subnets(s, p, ret_err)) < 0)
                        return r;
        }
        *ret = TAKE_PTR(p);
        return 0;
}

void pol_policy_free(pol_policy *p) {
        if (!p)
                return;
        for (size_t i = 0; i < p->n_domains; i++) {
                for (size_t k = 0; k < p->domains[i].n_rules; k++)
                        rule_clear(&p->domains[i].rules[k]);
                free(p->domains[i].rules);
        }
        free(p->domains);
        free(p->subnet_allow);
        free(p->subnet_deny);
        free(p);
}

/* ---- printing back ------------------------------------------------------------ */

static cJSON *str_match_to_json(const pol_str_match *m) {
        static const char *const keys[] = {[POL_STR_EXACT] = "exact", [POL_STR_STARTS_WITH] = "startsWith",
                                           [POL_STR_REGEX] = "regex"};
        cJSON *o = cJSON_CreateObject();
        if (o && !cJSON_AddStringToObject(o, keys[m->kind], m->text))
                cJSON_Delete(o), o = NULL;
        return o;
}

static cJSON *kv_list_to_json(const pol_kv *kv, size_t n) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; a && i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                if (!o || !cJSON_AddItemToArray(a, o))
                        return cJSON_Delete(o), cJSON_Delete(a), NULL;
                if (kv[i].key)
                        cJSON_AddItemToObject(o, "key", str_match_to_json(kv[i].key));
                if (kv[i].value)
                        cJSON_AddItemToObject(o, "value", str_match_to_json(kv[i].value));
        }
        return a;
}

static cJSON *match_to_json(const pol_match *m) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        if (m->path)
                cJSON_AddItemToObject(o, "path", str_match_to_json(m->path));
        if (m->n_methods)
                cJSON_AddItemToObject(o, "method",
                                      cJSON_CreateStringArray((const char *const *)m->methods, (int)m->n_methods));
        if (m->n_query)
                cJSON_AddItemToObject(o, "queryString", kv_list_to_json(m->query, m->n_query));
        if (m->n_headers)
                cJSON_AddItemToObject(o, "headers", kv_list_to_json(m->headers, m->n_headers));
        return o;
}

static cJSON *rule_to_json(const pol_rule *r, bool redact) {
        cJSON *o = cJSON_CreateObject(), *list;
        if (!o)
                return NULL;
        if (r->match)
                cJSON_AddItemToObject(o, "match", match_to_json(r->match));
        if (r->kind == POL_RULE_FORWARD) {
                cJSON_AddStringToObject(o, "forwardURL", r->forward_url);
                return o;
        }
        if (!(list = cJSON_AddArrayToObject(o, "transform")))
                return cJSON_Delete(o), NULL;
        for (size_t i = 0; i < r->n_transforms; i++) {
                cJSON *t = cJSON_CreateObject(), *h;
                if (!t || !cJSON_AddItemToArray(list, t) || !(h = cJSON_AddObjectToObject(t, "headers")))
                        return cJSON_Delete(t), cJSON_Delete(o), NULL;
                /* Header values are credentials (API keys): redacted copies
                 * go to logs, events and `sandboxctl show`. */
                for (size_t k = 0; k < r->transforms[i].n_headers; k++)
                        cJSON_AddStringToObject(h, r->transforms[i].headers[k].name,
                                                redact ? "<redacted>" : r->transforms[i].headers[k].value);
        }
        return o;
}

static cJSON *allow_to_json(const pol_policy *p, bool redact) {
        cJSON *allow = p->allow_is_object ? cJSON_CreateObject() : cJSON_CreateArray();
        for (size_t i = 0; allow && i < p->n_domains; i++) {
                const pol_domain *d = &p->domains[i];
                char key[POL_NAME_MAX + 8];
                if (d->pattern.port)
                        snprintf(key, sizeof(key), "%s:%u", d->pattern.text, d->pattern.port);
                else
                        snprintf(key, sizeof(key), "%s", d->pattern.text);
                if (!p->allow_is_object) {
                        cJSON_AddItemToArray(allow, cJSON_CreateString(key));
                        continue;
                }
                cJSON *rules = cJSON_AddArrayToObject(allow, key);
                for (size_t k = 0; rules && k < d->n_rules; k++)
                        cJSON_AddItemToArray(rules, rule_to_json(&d->rules[k], redact));
        }
        return allow;
}

static cJSON *cidrs_to_json(const pol_cidr *c, size_t n) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; a && i < n; i++) {
                char buf[64];
                cJSON_AddItemToArray(a, cJSON_CreateString(pol_cidr_format(&c[i], buf, sizeof(buf))));
        }
        return a;
}

cJSON *pol_policy_to_json(const pol_policy *p, bool redact) {
        if (!p || p->mode != POL_MODE_CUSTOM)
                return cJSON_CreateString(p && p->mode == POL_MODE_ALLOW_ALL ? "allow-all" : "deny-all");
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        if (p->allow_is_object || p->n_domains)
                cJSON_AddItemToObject(o, "allow", allow_to_json(p, redact));
        if (p->n_subnet_allow || p->n_subnet_deny) {
                cJSON *s = cJSON_AddObjectToObject(o, "subnets");
                if (s && p->n_subnet_allow)
                        cJSON_AddItemToObject(s, "allow", cidrs_to_json(p->subnet_allow, p->n_subnet_allow));
                if (s && p->n_subnet_deny)
                        cJSON_AddItemToObject(s, "deny", cidrs_to_json(p->subnet_deny, p->n_subnet_deny));
        }
        return o;
}
