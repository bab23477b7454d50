/* Unit tests for libcore/userns.c: the host id pool rules (floor, size,
 * overlap with host accounts and subordinate id ranges) and, when run as
 * root on a kernel that can, the idmapped overlay probe end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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

/* A held namespace is owned by host_base (so the kernel charges its
 * per-user counts there), and the thread is host root again afterwards:
 * ids 0 and its whole permitted set effective. */
/* A probe that failed on its own scratch work (a full or read-only state
 * filesystem, no memory) must not read as "the host cannot". */
static void test_probe_failures_of_the_scratch_work_are_transient(void **state) {
        static const int transient[] = {ENOSPC, EDQUOT, EROFS, EIO, ENOMEM, EMFILE, ENFILE, EAGAIN, EINTR};
        static const int host[] = {EINVAL, ENOSYS, EPERM, EOPNOTSUPP, EOVERFLOW, ENOENT};
        for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++)
                assert_true(core_userns_probe_transient(-transient[i]));
        for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
                assert_false(core_userns_probe_transient(-host[i]));
}

static void test_held_namespace_is_owned_by_the_range_base(void **state) {
        if (geteuid() != 0)
                skip();
        _cleanup_free_ char *before = NULL, *after = NULL;
        assert_int_equal(core_read_file("/proc/thread-self/status", 65536, &before, NULL), 0);
        pid_t pid = 0;
        int fd = -1;
        sb_error *e = NULL;
        int r = core_userns_hold(100000000, &pid, &fd, &e);
        if (r < 0)
                fail_msg("hold: %s", e ? e->message : "?");
        uid_t owner = (uid_t)-1;
        /* NS_GET_OWNER_UID, <linux/nsfs.h>. */
        assert_int_equal(ioctl(fd, _IO(0xb7, 0x4), &owner), 0);
        assert_int_equal(owner, 100000000);
        close(fd);
        core_userns_release(pid);
        assert_int_equal(core_read_file("/proc/thread-self/status", 65536, &after, NULL), 0);
        static const char *const keys[] = {"Uid:", "Gid:", "CapEff:", "CapPrm:"};
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                const char *a = strstr(before, keys[i]), *b = strstr(after, keys[i]);
                assert_non_null(a);
                assert_non_null(b);
                assert_int_equal(strcspn(a, "\n"), strcspn(b, "\n"));
                assert_memory_equal(a, b, strcspn(a, "\n"));
        }
        sb_error_free(e);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pool_floor_size_and_end),
                cmocka_unit_test(test_pool_overlapping_accounts_or_subids_is_refused),
                cmocka_unit_test(test_missing_files_are_skipped),
                cmocka_unit_test(test_probe_builds_and_writes_an_idmapped_overlay),
                cmocka_unit_test(test_probe_failures_of_the_scratch_work_are_transient),
                cmocka_unit_test(test_held_namespace_is_owned_by_the_range_base),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
