/* Unit tests for libcore/init/user.c: the `sandbox` entries of passwd and
 * group follow the sandbox user's ids, an image's own user at that id is
 * kept, a symlink planted at /etc or /etc/passwd fails the start without
 * writing through it, and one at /home/sandbox or /workspace is left as it
 * is, never followed. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "libcore/util.h"

/* user.c is part of the sandbox-init binary, not of a library: compile it in. */
#include "libcore/init/user.c"

static char root[] = "/tmp/test-init-user-XXXXXX";
static int rootfd = -EBADF;

static void put(const char *rel, const char *text) {
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", root, rel);
        assert_int_equal(core_write_file_replace(p, text, strlen(text), 0644), 0);
}

static char *get(const char *rel) {
        char p[256];
        char *text = NULL;
        snprintf(p, sizeof(p), "%s/%s", root, rel);
        assert_int_equal(core_read_file(p, 1 << 20, &text, NULL), 0);
        return text;
}

static int setup(void **state) {
        if (!mkdtemp(root))
                return -1;
        char p[256];
        snprintf(p, sizeof(p), "%s/etc", root);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/home", root);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/home/sandbox", root);
        mkdir(p, 0755);
        rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        init_user_uid = 995;
        init_user_gid = 994;
        return rootfd < 0 ? -1 : 0;
}

static int teardown(void **state) {
        close(rootfd);
        core_rm_rf(root);
        return 0;
}

static void test_sandbox_entries_take_the_ids_and_keep_the_rest(void **state) {
        put("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/bash\n"
                          "other:x:1001:1001::/home/other:/bin/sh\n");
        put("etc/group", "root:x:0:\nsandbox:x:1000:\nsudo:x:27:sandbox\n");
        sb_error *e = NULL;
        assert_int_equal(fix_tree(rootfd, &e), 0);
        _cleanup_free_ char *pw = get("etc/passwd"), *gr = get("etc/group");
        assert_string_equal(pw, "root:x:0:0:root:/root:/bin/sh\nsandbox:x:995:994:sandbox:/home/sandbox:/bin/bash\n"
                                "other:x:1001:1001::/home/other:/bin/sh\n");
        assert_string_equal(gr, "root:x:0:\nsandbox:x:994:\nsudo:x:27:sandbox\n");
        struct stat st;
        assert_int_equal(fstatat(rootfd, "home/sandbox", &st, 0), 0);
        assert_int_equal(st.st_uid, 995);
        assert_int_equal(st.st_gid, 994);
        /* Again: nothing changes (a start with a user namespace copies up nothing). */
        assert_int_equal(fix_tree(rootfd, &e), 0);
        _cleanup_free_ char *pw2 = get("etc/passwd");
        assert_string_equal(pw, pw2);
}

static void test_an_image_user_at_the_id_is_kept_and_a_missing_one_added(void **state) {
        init_user_uid = 1000;
        init_user_gid = 1000;
        put("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nubuntu:x:1000:1000::/home/ubuntu:/bin/sh");
        put("etc/group", "root:x:0:\nubuntu:x:1000:\n");
        sb_error *e = NULL;
        assert_int_equal(fix_tree(rootfd, &e), 0);
        _cleanup_free_ char *gr = get("etc/group");
        assert_string_equal(gr, "root:x:0:\nubuntu:x:1000:\n");
        init_user_uid = 995;
        init_user_gid = 994;
        assert_int_equal(fix_tree(rootfd, &e), 0);
        _cleanup_free_ char *pw = get("etc/passwd"), *gr2 = get("etc/group");
        assert_non_null(strstr(pw, "ubuntu:x:1000:1000::/home/ubuntu:/bin/sh\nsandbox:x:995:994:sandbox:"));
        assert_string_equal(gr2, "root:x:0:\nubuntu:x:1000:\nsandbox:x:994:\n");
}

static void test_symlinks_fail_and_write_nothing_through(void **state) {
        static const char *const targets[] = {"/etc/passwd-outside", "../outside", "/proc/self/root/outside"};
        char outside[256], p[256];
        snprintf(outside, sizeof(outside), "%s/outside", root);
        for (size_t i = 0; i < ELEMENTSOF(targets); i++) {
                put("outside", "untouched\n");
                snprintf(p, sizeof(p), "%s/etc/passwd", root);
                unlink(p);
                assert_int_equal(symlink(targets[i], p), 0);
                sb_error *e = NULL;
                assert_true(fix_tree(rootfd, &e) < 0);
                assert_non_null(e);
                assert_non_null(strstr(e->message, "/etc/passwd"));
                sb_error_free(e);
                _cleanup_free_ char *o = get("outside");
                assert_string_equal(o, "untouched\n");
                unlink(p);
        }
        /* /home/sandbox a symlink (the sandbox's own doing): left as it is,
         * never followed: its target's owner untouched. */
        put("etc/passwd", "sandbox:x:995:994::/home/sandbox:/bin/sh\n");
        snprintf(p, sizeof(p), "%s/home/sandbox", root);
        rmdir(p);
        assert_int_equal(symlink("/", p), 0);
        struct stat before, after;
        assert_int_equal(fstat(rootfd, &before), 0);
        sb_error *e = NULL;
        assert_true(fix_tree(rootfd, &e) >= 0);
        assert_null(e);
        assert_int_equal(fstat(rootfd, &after), 0);
        assert_int_equal(before.st_uid, after.st_uid);
        assert_int_equal(before.st_gid, after.st_gid);
        unlink(p);
        mkdir(p, 0755);
        /* /etc itself a symlink. */
        char etc[256], moved[256];
        snprintf(etc, sizeof(etc), "%s/etc", root);
        snprintf(moved, sizeof(moved), "%s/etc-real", root);
        assert_int_equal(rename(etc, moved), 0);
        assert_int_equal(symlink("etc-real", etc), 0);
        e = NULL;
        assert_true(fix_tree(rootfd, &e) < 0);
        assert_non_null(strstr(e->message, "/etc"));
        sb_error_free(e);
        unlink(etc);
        assert_int_equal(rename(moved, etc), 0);
}

static void own(const char *rel, uid_t u, gid_t g) {
        assert_int_equal(fchownat(rootfd, rel, u, g, AT_SYMLINK_NOFOLLOW), 0);
}

static void assert_owner(const char *rel, uid_t u, gid_t g) {
        struct stat st;
        assert_int_equal(fstatat(rootfd, rel, &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(st.st_uid, u);
        assert_int_equal(st.st_gid, g);
}

static void test_files_of_the_other_modes_user_are_given_to_this_one(void **state) {
        init_user_uid = 995;
        init_user_gid = 994;
        remap_uid = 1000;
        remap_gid = 1000;
        put("etc/passwd", "sandbox:x:1000:1000::/home/sandbox:/bin/sh\n");
        put("etc/group", "sandbox:x:1000:\n");
        char p[256];
        snprintf(p, sizeof(p), "%s/workspace", root);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/workspace/d", root);
        mkdir(p, 0755);
        put("workspace/d/f", "x");
        put("workspace/root-file", "x");
        put("outside", "x");
        snprintf(p, sizeof(p), "%s/workspace/link", root);
        unlink(p);
        assert_int_equal(symlink("/outside", p), 0);
        own("home/sandbox", 1000, 1000);
        own("workspace", 1000, 1000);
        own("workspace/d", 1000, 1000);
        own("workspace/d/f", 1000, 1000);
        own("workspace/link", 1000, 1000);
        own("workspace/root-file", 0, 0);
        own("outside", 1000, 1000);
        sb_error *e = NULL;
        assert_int_equal(fix_tree(rootfd, &e), 0);
        assert_owner("workspace/d", 995, 994);
        assert_owner("workspace/d/f", 995, 994);
        assert_owner("workspace/link", 995, 994);
        assert_owner("workspace/root-file", 0, 0);
        assert_owner("outside", 1000, 1000); /* the link's target is not followed */
        /* $HOME already this mode's: no walk, other files keep their owner. */
        own("workspace/d/f", 1000, 1000);
        assert_int_equal(fix_tree(rootfd, &e), 0);
        assert_owner("workspace/d/f", 1000, 1000);
        remap_uid = (uid_t)-1;
        remap_gid = (gid_t)-1;
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_sandbox_entries_take_the_ids_and_keep_the_rest),
                cmocka_unit_test(test_an_image_user_at_the_id_is_kept_and_a_missing_one_added),
                cmocka_unit_test(test_symlinks_fail_and_write_nothing_through),
                cmocka_unit_test(test_files_of_the_other_modes_user_are_given_to_this_one),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
