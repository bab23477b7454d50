/* Unit tests for libcore/util.c and libcore/error.c: sandbox names, base64,
 * time formatting, atomic writes, rm -rf that never follows symlinks, and
 * the error object's context wrapping. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include "libcore/error.h"
#include "libcore/util.h"

static void test_sandbox_names_follow_design_rule(void **state) {
        static const char *const good[] = {"a", "0", "web-1", "sbx-1234abcd", "a-",
                                           "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0"};
        static const char *const bad[] = {"", "-a", "A", "web_1", "a.b", "a/b", "..", "a b", "é",
                                          "abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01"};
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                assert_true(core_name_is_valid(good[i]));
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_false(core_name_is_valid(bad[i]));
        assert_false(core_name_is_valid(NULL));
}

static void test_base64_round_trips_binary(void **state) {
        unsigned char data[256];
        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (unsigned char)i;
        for (size_t len = 0; len <= sizeof(data); len += 37) {
                _cleanup_free_ char *enc = core_base64_encode(data, len);
                _cleanup_free_ void *dec = NULL;
                size_t n = 99;
                assert_non_null(enc);
                assert_int_equal(core_base64_decode(enc, &dec, &n), 0);
                assert_int_equal(n, len);
                assert_memory_equal(dec, data, len);
        }
}

static void test_base64_known_vectors_from_rfc4648(void **state) {
        static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
        static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
        for (size_t i = 0; i < ELEMENTSOF(plain); i++) {
                _cleanup_free_ char *enc = core_base64_encode(plain[i], strlen(plain[i]));
                assert_string_equal(enc, coded[i]);
        }
}

static void test_base64_rejects_malformed_input(void **state) {
        static const char *const bad[] = {"Zg=", "Z===", "Zm9v\n", "Zm 9v", "Zg==Zg==", "Zm9v!A==", "=Zg="};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                void *dec = NULL;
                size_t n;
                assert_int_equal(core_base64_decode(bad[i], &dec, &n), -EINVAL);
                assert_null(dec);
        }
}

static void test_time_is_rfc3339_utc_with_millis(void **state) {
        char buf[40];
        assert_string_equal(core_format_time(0, buf, sizeof(buf)), "1970-01-01T00:00:00.000Z");
        assert_string_equal(core_format_time(1796016919123ULL, buf, sizeof(buf)), "2026-11-30T05:35:19.123Z");
}

static void test_atomic_write_replaces_whole_file(void **state) {
        char dir[] = "/tmp/test-util-XXXXXX";
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *p = NULL;
        assert_true(asprintf(&p, "%s/f", dir) > 0);
        assert_int_equal(core_write_file_atomic(p, "first", 5, 0600), 0);
        assert_int_equal(core_write_file_atomic(p, "second", 6, 0600), 0);
        _cleanup_free_ char *text = NULL;
        size_t n;
        assert_int_equal(core_read_file(p, 1024, &text, &n), 0);
        assert_string_equal(text, "second");
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_int_equal(core_read_file(p, 3, &(char *){NULL}, &n), -EFBIG);
        assert_int_equal(core_rm_rf(dir), 0);
}

static void test_rm_rf_removes_tree_but_never_follows_symlinks(void **state) {
        char dir[] = "/tmp/test-util-XXXXXX", victim[] = "/tmp/test-util-victim-XXXXXX";
        assert_non_null(mkdtemp(dir));
        assert_non_null(mkdtemp(victim));
        _cleanup_free_ char *sub = NULL, *file = NULL, *lnk = NULL, *vfile = NULL;
        assert_true(asprintf(&sub, "%s/a/b", dir) > 0);
        assert_true(asprintf(&file, "%s/a/b/f", dir) > 0);
        assert_true(asprintf(&lnk, "%s/a/out", dir) > 0);
        assert_true(asprintf(&vfile, "%s/keep", victim) > 0);
        assert_int_equal(core_mkdir_p(sub, 0755), 0);
        assert_int_equal(core_write_file_atomic(file, "x", 1, 0644), 0);
        assert_int_equal(core_write_file_atomic(vfile, "y", 1, 0644), 0);
        assert_int_equal(symlink(victim, lnk), 0);
        assert_int_equal(core_rm_rf(dir), 0);
        assert_int_equal(access(dir, F_OK), -1);
        assert_int_equal(access(vfile, F_OK), 0);
        assert_int_equal(core_rm_rf(dir), 0); /* missing is success */
        assert_int_equal(core_rm_rf(victim), 0);
}

static void test_error_keeps_innermost_and_prefixes_context(void **state) {
        _cleanup_error_ sb_error *err = NULL;
        assert_int_equal(sb_error_set(&err, -ENOENT, "not_found", "source.path", "no file %s", "x"), -ENOENT);
        assert_int_equal(sb_error_set(&err, -EIO, NULL, NULL, "outer"), -EIO);
        assert_string_equal(err->message, "no file x");
        assert_int_equal(sb_error_prefix(&err, "create sandbox '%s'", "a"), -ENOENT);
        assert_string_equal(err->message, "create sandbox 'a': no file x");
        assert_string_equal(err->reason, "not_found");
        assert_string_equal(err->field, "source.path");
        sb_error_default_reason(&err, "failed");
        assert_string_equal(err->reason, "not_found");
        assert_int_equal(sb_error_set(NULL, -EPERM, NULL, NULL, "ignored"), -EPERM);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_sandbox_names_follow_design_rule),
                cmocka_unit_test(test_base64_round_trips_binary),
                cmocka_unit_test(test_base64_known_vectors_from_rfc4648),
                cmocka_unit_test(test_base64_rejects_malformed_input),
                cmocka_unit_test(test_time_is_rfc3339_utc_with_millis),
                cmocka_unit_test(test_atomic_write_replaces_whole_file),
                cmocka_unit_test(test_rm_rf_removes_tree_but_never_follows_symlinks),
                cmocka_unit_test(test_error_keeps_innermost_and_prefixes_context),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
