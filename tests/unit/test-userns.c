/* Unit tests for libcore/userns.c: the host id pool rules (floor, size,
 * overlap with host accounts and subordinate id ranges) and, when run as
 * root on a kernel that can, the idmapped overlay probe end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "libcore/userns.h"
#include "libcore/util.h"

static char etc[] = "/tmp/test-userns-XXXXXX";

static void put(const char *file, const char *text) {
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", etc, file);
        assert_int_equal(core_write_file_replace(path, text, strlen(text), 0644), 0);
}

static int setup(void **state) {
        if (!mkdtemp(etc))
                return -1;
        put("passwd", "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"
                      "svc:x:300000000:300000000::/:/bin/false\n");
        put("group", "root:x:0:\nbig:x:310000000:\n");
        put("subuid", "alice:400000000:65536\n");
        put("subgid", "alice:500000000:65536\n");
        return 0;
}

static int teardown(void **state) {
        core_rm_rf(etc);
        return 0;
}

static int check(uint64_t base, uint64_t size, const char *want) {
        sb_error *e = NULL;
        int r = core_userns_check_pool(etc, base, size, &e);
        if (want) {
                assert_int_equal(r, -EINVAL);
                assert_non_null(e);
                if (!strstr(e->message, want))
                        fail_msg("message '%s' lacks '%s'", e->message, want);
        } else if (r < 0)
                fail_msg("pool %llu+%llu refused: %s", (unsigned long long)base, (unsigned long long)size,
                         e ? e->message : "?");
        sb_error_free(e);
        return r;
}

static void test_pool_floor_size_and_end(void **state) {
        check(100000000, 65536 * 16, NULL);
        check(0, 65536, "start at 65536");
        check(65535, 65536, "start at 65536");
        check(100000000, 100000, "multiple of 65536");
        check(100000000, 0, "multiple of 65536");
        check(4294967295ULL - 65536, 65536 * 2, "end below");
}

static void test_pool_overlapping_accounts_or_subids_is_refused(void **state) {
        check(300000000 - 65536, 65536 * 2, "'svc'");
        check(310000000, 65536, "'big'");
        check(400000000 + 65535, 65536, "subordinate ids of 'alice'");
        check(500000000 - 65536, 65537 + 65535, "subordinate ids of 'alice'");
        /* Adjacent, not overlapping. */
        check(400000000 + 65536, 65536, NULL);
        check(400000000 - 65536, 65536, NULL);
}

static void test_missing_files_are_skipped(void **state) {
        sb_error *e = NULL;
        assert_int_equal(core_userns_check_pool("/nonexistent-etc", 100000000, 65536, &e), 0);
        assert_null(e);
}

static void test_probe_builds_and_writes_an_idmapped_overlay(void **state) {
        if (geteuid() != 0)
                skip();
        sb_error *e = NULL;
        int r = core_userns_probe("/tmp", 100000000, &e);
        if (r < 0)
                fail_msg("probe: %s", e ? e->message : "?");
        sb_error_free(e);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pool_floor_size_and_end),
                cmocka_unit_test(test_pool_overlapping_accounts_or_subids_is_refused),
                cmocka_unit_test(test_missing_files_are_skipped),
                cmocka_unit_test(test_probe_builds_and_writes_an_idmapped_overlay),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
