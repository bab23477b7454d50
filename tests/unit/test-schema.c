/* Unit tests for the method parameter schema (sandboxd/schema.c): unknown,
 * wrong-case and duplicated keys at every level are refused naming their
 * path, with a hint for a typo; and docs/API.md's "Parameters" table is
 * the table's own printout, so the docs list exactly the keys taken. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "libcore/util.h"
#include "sandboxd/schema.h"

#define API_MD "docs/API.md"
#define TABLE_BEGIN "<!-- BEGIN params-table (sandboxd/schema.c; tests/unit/test-schema.c checks it) -->\n"
#define TABLE_END "<!-- END params-table -->\n"
#define LIMITS_BEGIN "<!-- BEGIN string-limits (sandboxd/schema.c schema_limits; tests/unit/test-schema.c checks it) -->\n"
#define LIMITS_END "<!-- END string-limits -->\n"

/* Checks `json` as params of `method`: NULL when accepted, else the error
 * (caller frees). */
static sb_error *check(const char *method, const char *json) {
        cJSON *p = cJSON_Parse(json);
        assert_non_null(p);
        sb_error *err = NULL;
        int r = schema_check_params(method, p, &err);
        cJSON_Delete(p);
        if (r == 0)
                assert_null(err);
        else
                assert_non_null(err);
        return err;
}

static void assert_refused(const char *method, const char *json, const char *field, const char *needle) {
        sb_error *err = check(method, json);
        if (!err)
                fail_msg("%s %s was accepted", method, json);
        if (!err->field || !streq(err->field, field))
                fail_msg("%s %s: field '%s', expected '%s' (%s)", method, json, err->field ? err->field : "(null)",
                         field, err->message);
        if (!strstr(err->message, needle))
                fail_msg("%s %s: message '%s' does not contain '%s'", method, json, err->message, needle);
        assert_int_equal(err->code, -EINVAL);
        assert_null(err->reason); /* answered -32602 */
        sb_error_free(err);
}

static void assert_accepted(const char *method, const char *json) {
        sb_error *err = check(method, json);
        if (err)
                fail_msg("%s %s refused: %s", method, json, err->message);
}

static void test_valid_params_pass(void **state) {
        assert_accepted("sandbox.create", "{}");
        assert_accepted("sandbox.create",
                        "{\"name\":\"a\",\"runtime\":\"host\",\"timeout\":5000,\"resources\":{\"vcpus\":2},"
                        "\"networkPolicy\":{\"allow\":[\"x.test\"]},\"env\":{\"A\":\"1\",\"a\":\"2\"},"
                        "\"tags\":{\"t\":\"v\"},\"persistent\":true,\"userns\":false,\"ports\":[80],"
                        "\"source\":{\"type\":\"git\",\"url\":\"https://x.test/r\",\"depth\":1}}");
        assert_accepted("sandbox.create", "{\"source\":{\"type\":\"tarball\",\"path\":\"/x.tar\"}}");
        assert_accepted("sandbox.create", "{\"source\":{\"type\":\"snapshot\",\"snapshotId\":\"snap-1\"}}");
        assert_accepted("fs.write", "{\"sandbox\":\"a\",\"files\":[{\"path\":\"x\",\"content\":\"\",\"mode\":420}]}");
        assert_accepted("sandbox.fork", "{\"sourceSandbox\":\"a\",\"overrides\":{\"env\":{\"B\":\"1\"}}}");
        assert_accepted("daemon.info", "{}");
        assert_accepted("daemon.info", "[]");
        /* A wrong type is the handler's to name (with the type it wants). */
        assert_accepted("sandbox.create", "{\"resources\":5,\"source\":\"x\"}");
}

static void test_unknown_keys_name_their_path_and_the_close_match(void **state) {
        assert_refused("sandbox.create", "{\"nme\":\"a\"}", "nme", "did you mean \"name\"?");
        assert_refused("command.run", "{\"sandbox\":\"a\",\"cmd\":\"sleep\",\"timeout\":100}", "timeout",
                       "did you mean \"timeoutMs\"?");
        assert_refused("sandbox.create", "{\"resources\":{\"memory\":2048}}", "resources.memory",
                       "unknown parameter of resources, which takes \"vcpus\"");
        assert_refused("sandbox.update", "{\"name\":\"a\",\"envv\":{}}", "envv", "did you mean \"env\"?");
        assert_refused("fs.write", "{\"sandbox\":\"a\",\"files\":[{\"path\":\"x\",\"content\":\"\"},{\"path\":\"y\",\"mdoe\":1}]}",
                       "files[1].mdoe", "did you mean \"mode\"?");
        assert_refused("sandbox.create", "{\"source\":{\"type\":\"git\",\"url\":\"u\",\"dpeth\":1}}", "source.dpeth",
                       "did you mean \"depth\"?");
        assert_refused("sandbox.create", "{\"source\":{\"type\":\"tarball\",\"url\":\"u\",\"depth\":1}}",
                       "source.depth", "a tarball source");
        assert_refused("sandbox.fork", "{\"sourceSandbox\":\"a\",\"overrides\":{\"timeuot\":1000}}",
                       "overrides.timeuot", "did you mean \"timeout\"?");
        assert_refused("daemon.info", "{\"verbose\":true}", "verbose", "daemon.info takes none");
        /* A name that is not an identifier is quoted, so it cannot forge
         * another path. */
        assert_refused("sandbox.get", "{\"name\":\"a\",\"x.y\\\"\":1}", "[\"x.y\\\"\"]", "unknown parameter");
}

static void test_keys_are_case_sensitive(void **state) {
        assert_refused("sandbox.create", "{\"networkpolicy\":\"deny-all\"}", "networkpolicy",
                       "(keys are case-sensitive); did you mean \"networkPolicy\"?");
        assert_refused("sandbox.create", "{\"Name\":\"a\"}", "Name", "did you mean \"name\"?");
        assert_refused("sandbox.create", "{\"resources\":{\"VCPUS\":1}}", "resources.VCPUS", "did you mean \"vcpus\"?");
        assert_refused("command.run", "{\"sandbox\":\"a\",\"cmd\":\"x\",\"timeoutms\":1}", "timeoutms",
                       "did you mean \"timeoutMs\"?");
}

static void test_duplicate_keys_are_refused_everywhere(void **state) {
        assert_refused("sandbox.create", "{\"networkPolicy\":\"deny-all\",\"networkPolicy\":\"allow-all\"}",
                       "networkPolicy", "duplicate key");
        assert_refused("sandbox.create", "{\"env\":{\"A\":\"1\",\"A\":\"2\"}}", "env.A", "duplicate key");
        assert_refused("sandbox.create", "{\"resources\":{\"vcpus\":1,\"vcpus\":4}}", "resources.vcpus",
                       "duplicate key");
        assert_refused("sandbox.create", "{\"source\":{\"type\":\"git\",\"url\":\"a\",\"url\":\"b\"}}", "source.url",
                       "duplicate key");
        assert_refused("sandbox.create", "{\"source\":{\"type\":\"git\",\"type\":\"tarball\",\"url\":\"b\"}}",
                       "source.type", "duplicate key");
        assert_refused("fs.write", "{\"sandbox\":\"a\",\"files\":[{\"path\":\"x\",\"path\":\"y\",\"content\":\"\"}]}",
                       "files[0].path", "duplicate key");
        assert_refused("sandbox.list", "{\"tags\":{\"t\":\"a\",\"t\":\"b\"}}", "tags.t", "duplicate key");
        /* Inside a value of the wrong type too: never left to a reader. */
        assert_refused("command.run", "{\"sandbox\":\"a\",\"cmd\":\"x\",\"args\":[{\"k\":1,\"k\":2}]}", "args[0].k",
                       "duplicate key");
}

/* Many members are checked in O(n log n): a pairwise scan of 200000 would
 * take minutes on the event loop. */
static void test_many_members_are_checked_quickly(void **state) {
        cJSON *p = cJSON_CreateObject(), *env = cJSON_AddObjectToObject(p, "env");
        char k[32];
        for (int i = 0; i < 200000; i++) {
                snprintf(k, sizeof(k), "K%d", i);
                cJSON_AddItemToObject(env, k, cJSON_CreateString("v"));
        }
        sb_error *err = NULL;
        assert_int_equal(schema_check_params("sandbox.create", p, &err), 0);
        cJSON_AddItemToObject(env, "K17", cJSON_CreateString("again"));
        assert_int_equal(schema_check_params("sandbox.create", p, &err), -EINVAL);
        assert_string_equal(err->field, "env.K17");
        sb_error_free(err);
        cJSON_Delete(p);
}

static void test_positional_params_and_unknown_methods_are_refused(void **state) {
        assert_refused("sandbox.get", "[\"a\"]", "params", "by name");
        sb_error *err = NULL;
        cJSON *p = cJSON_CreateObject();
        assert_int_equal(schema_check_params("sandbox.nosuch", p, &err), -ENOENT);
        sb_error_free(err);
        cJSON_Delete(p);
}

static void test_envelope_members(void **state) {
        static const char *const members[] = {"jsonrpc", "id", "method", "params"};
        cJSON *o = cJSON_Parse("{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"parms\":{}}");
        sb_error *err = NULL;
        assert_int_equal(schema_check_members(o, members, 4, "invalid request", &err), -EINVAL);
        assert_string_equal(err->field, "parms");
        assert_non_null(strstr(err->message, "did you mean \"params\"?"));
        sb_error_free(err);
        err = NULL;
        cJSON_Delete(o);
        o = cJSON_Parse("{\"jsonrpc\":\"2.0\",\"method\":\"a\",\"params\":{},\"params\":{\"x\":1}}");
        assert_int_equal(schema_check_members(o, members, 4, "invalid request", &err), -EINVAL);
        assert_non_null(strstr(err->message, "duplicate member \"params\""));
        sb_error_free(err);
        cJSON_Delete(o);
}

static void test_closest_word(void **state) {
        static const char *const w[] = {"name", "timeoutMs", "networkPolicy", "vcpus"};
        assert_int_equal(core_closest_word("nme", w, 4), 0);
        assert_int_equal(core_closest_word("nmae", w, 4), 0);
        assert_int_equal(core_closest_word("timeout", w, 4), 1);
        assert_int_equal(core_closest_word("NETWORKPOLICY", w, 4), 2);
        assert_int_equal(core_closest_word("memory", w, 4), -1);
        assert_int_equal(core_closest_word("", w, 4), -1);
        char longword[200];
        memset(longword, 'a', sizeof(longword) - 1);
        longword[sizeof(longword) - 1] = '\0';
        assert_int_equal(core_closest_word(longword, w, 4), -1);
}

static char *read_file(const char *path) {
        FILE *f = fopen(path, "re");
        if (!f)
                fail_msg("cannot open %s (run from the source tree)", path);
        char *buf = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&buf, &size);
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                fwrite(chunk, 1, n, out);
        fclose(f);
        fclose(out);
        return buf;
}

/* docs/API.md's table is exactly what the schema prints: a key added to or
 * dropped from either shows here. */
static void test_api_md_lists_exactly_the_schema(void **state) {
        _cleanup_free_ char *doc = read_file(API_MD);
        char *begin = strstr(doc, TABLE_BEGIN), *end = begin ? strstr(begin, TABLE_END) : NULL;
        if (!begin || !end)
                fail_msg("%s has no params table between '%s' and '%s'", API_MD, TABLE_BEGIN, TABLE_END);
        begin += strlen(TABLE_BEGIN);
        /* The table's header, then the rows. */
        const char *header = "| method | parameters (`?`: optional) |\n|---|---|\n";
        _cleanup_free_ char *want = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&want, &size);
        fputs(header, f);
        schema_print_markdown(f);
        fclose(f);
        size_t have_len = (size_t)(end - begin);
        if (have_len != strlen(want) || memcmp(begin, want, have_len) != 0)
                fail_msg("%s's params table differs from sandboxd/schema.c; it should read:\n%s", API_MD, want);
}

/* Every method with a section in docs/API.md has a schema and the other
 * way round. */
static void test_every_documented_method_has_a_schema(void **state) {
        _cleanup_free_ char *doc = read_file(API_MD);
        unsigned documented = 0;
        for (char *line = doc; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                if (strncmp(line, "### ", 4) != 0 && strncmp(line, "#### ", 5) != 0)
                        continue;
                /* "### a.b / c.d": each `x.y` word is a method. */
                char *eol = strchr(line, '\n');
                _cleanup_free_ char *h = strndup(line, eol ? (size_t)(eol - line) : strlen(line));
                char *save = NULL;
                for (char *w = strtok_r(h, " /", &save); w; w = strtok_r(NULL, " /", &save)) {
                        if (*w == '#' || !strchr(w, '.'))
                                continue;
                        if (!schema_find(w))
                                fail_msg("%s documents %s, which has no schema", API_MD, w);
                        documented++;
                }
        }
        unsigned n = 0;
        for (const schema_method *m = schema_methods; m->method; m++)
                n++;
        assert_int_equal(documented, n);
}

/* ---- sizes (schema_limits) ---- */

/* Rows walk_leaves() found a parameter for, by index in schema_limits. */
static bool row_seen[512];

static const schema_limit *limit_row(const char *method, const char *field) {
        for (const schema_limit *l = schema_limits; l->method; l++)
                if (streq(l->method, method) && streq(l->field, field)) {
                        size_t i = (size_t)(l - schema_limits);
                        if (i < ELEMENTSOF(row_seen))
                                row_seen[i] = true;
                        return l;
                }
        return NULL;
}

/* Walks the plain (SCHEMA_VALUE) parameters under `fields`, the path
 * written as schema_limits writes it ("files[].path", "source.url"),
 * counting them in *n. */
static void walk_leaves(const char *method, const schema_field *fields, const char *prefix, unsigned *n) {
        for (const schema_field *f = fields; f->key; f++) {
                char path[256];
                snprintf(path, sizeof(path), "%s%s", prefix, f->key);
                char sub[260];
                switch (f->kind) {
                case SCHEMA_VALUE:
                        if (!limit_row(method, path))
                                fail_msg("%s: parameter %s has no row in schema_limits (sandboxd/schema.c): give its "
                                         "size limit, or 0 when it is not a string", method, path);
                        (*n)++;
                        break;
                case SCHEMA_OBJECT:
                case SCHEMA_ARRAY:
                        snprintf(sub, sizeof(sub), "%s%s", path, f->kind == SCHEMA_ARRAY ? "[]." : ".");
                        walk_leaves(method, f->fields, sub, n);
                        break;
                case SCHEMA_VARIANT:
                        snprintf(sub, sizeof(sub), "%s.", path);
                        for (const schema_variant *v = f->variants; v->type; v++)
                                walk_leaves(method, v->fields, sub, n);
                        break;
                case SCHEMA_MAP:    /* limit_check_map */
                case SCHEMA_POLICY: /* the policy parser */
                        break;
                }
        }
}

/* Every plain parameter of every method has its size row, and every row
 * is a parameter: a method or key added without its limit shows here. */
static void test_every_parameter_has_a_size_limit(void **state) {
        unsigned leaves = 0;
        memset(row_seen, 0, sizeof(row_seen));
        for (const schema_method *m = schema_methods; m->method; m++)
                walk_leaves(m->method, m->params, "", &leaves);
        for (const schema_limit *l = schema_limits; l->method; l++) {
                size_t i = (size_t)(l - schema_limits);
                assert_true(i < ELEMENTSOF(row_seen));
                if (!row_seen[i])
                        fail_msg("schema_limits: %s %s is no parameter of the method's schema", l->method, l->field);
        }
        assert_true(leaves > 100);
}

/* params holding `value` at a schema_limits path ("files[].path"). */
static char *params_at(const char *field, const char *value) {
        cJSON *root = cJSON_CreateObject(), *cur = root;
        char *copy = strdup(field);
        char *save = NULL;
        for (char *k = strtok_r(copy, ".", &save); k; k = strtok_r(NULL, ".", &save)) {
                bool last = !save || !*save;
                size_t n = strlen(k);
                bool array = n > 2 && streq(k + n - 2, "[]");
                if (array)
                        k[n - 2] = '\0';
                cJSON *next = last ? cJSON_CreateString(value) : cJSON_CreateObject();
                if (array) {
                        cJSON *a = cJSON_AddArrayToObject(cur, k);
                        cJSON_AddItemToArray(a, next);
                } else
                        cJSON_AddItemToObject(cur, k, next);
                cur = next;
        }
        free(copy);
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        return text;
}

static void test_strings_over_their_limit_are_refused_naming_field_and_limit(void **state) {
        unsigned checked = 0;
        for (const schema_limit *l = schema_limits; l->method; l++) {
                if (l->max == 0)
                        continue;
                _cleanup_free_ char *at = malloc(l->max + 2);
                memset(at, 'a', l->max + 1);
                at[l->max + 1] = '\0';
                _cleanup_free_ char *over = params_at(l->field, at);
                /* data.field is the path with the item's index. */
                char field[256], needle[64];
                size_t o = 0;
                for (const char *c = l->field; *c && o + 4 < sizeof(field); c++) {
                        if (c[0] == '[' && c[1] == ']') {
                                memcpy(field + o, "[0]", 3);
                                o += 3;
                                c++;
                        } else
                                field[o++] = *c;
                }
                field[o] = '\0';
                snprintf(needle, sizeof(needle), "%zu bytes is over the limit of %zu bytes", l->max + 1, l->max);
                assert_refused(l->method, over, field, needle);
                at[l->max] = '\0';
                _cleanup_free_ char *ok = params_at(l->field, at);
                assert_accepted(l->method, ok);
                checked++;
        }
        assert_true(checked > 40);
        /* A password over its limit is not quoted back. */
        _cleanup_free_ char *pw = malloc(5000);
        memset(pw, 's', 4999);
        pw[4999] = '\0';
        _cleanup_free_ char *pw_params = params_at("source.password", pw);
        sb_error *err = check("sandbox.create", pw_params);
        assert_non_null(err);
        assert_null(strstr(err->message, "sss"));
        sb_error_free(err);
        /* Escapes count as JSON encodes them: 32 quotes are 64 bytes. */
        assert_refused("sandbox.get", "{\"name\":\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\\\"\"}",
                       "name", "64 bytes is over the limit of 63 bytes");
}

/* docs/API.md's "String parameters" table is exactly schema_limits. */
static void test_api_md_lists_exactly_the_string_limits(void **state) {
        _cleanup_free_ char *doc = read_file(API_MD);
        char *begin = strstr(doc, LIMITS_BEGIN), *end = begin ? strstr(begin, LIMITS_END) : NULL;
        if (!begin || !end)
                fail_msg("%s has no string limits table between '%s' and '%s'", API_MD, LIMITS_BEGIN, LIMITS_END);
        begin += strlen(LIMITS_BEGIN);
        _cleanup_free_ char *want = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&want, &size);
        fputs("| method | string parameters: most bytes |\n|---|---|\n", f);
        schema_print_limits_markdown(f);
        fclose(f);
        size_t have_len = (size_t)(end - begin);
        if (have_len != strlen(want) || memcmp(begin, want, have_len) != 0)
                fail_msg("%s's string limits table differs from sandboxd/schema.c; it should read:\n%s", API_MD, want);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_valid_params_pass),
                cmocka_unit_test(test_unknown_keys_name_their_path_and_the_close_match),
                cmocka_unit_test(test_keys_are_case_sensitive),
                cmocka_unit_test(test_duplicate_keys_are_refused_everywhere),
                cmocka_unit_test(test_many_members_are_checked_quickly),
                cmocka_unit_test(test_positional_params_and_unknown_methods_are_refused),
                cmocka_unit_test(test_envelope_members),
                cmocka_unit_test(test_closest_word),
                cmocka_unit_test(test_api_md_lists_exactly_the_schema),
                cmocka_unit_test(test_every_documented_method_has_a_schema),
                cmocka_unit_test(test_every_parameter_has_a_size_limit),
                cmocka_unit_test(test_strings_over_their_limit_are_refused_naming_field_and_limit),
                cmocka_unit_test(test_api_md_lists_exactly_the_string_limits),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
