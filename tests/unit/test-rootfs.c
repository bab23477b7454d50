/* Unit tests for libcore/rootfs.c's attach of a host bind
 * (core_rootfs_attach_bind): a host file replaced by rename after its clone
 * was made (ldconfig's new /etc/ld.so.cache while a sandbox starts) still
 * ends up in the sandbox with the bytes the clone holds, read-only, where a
 * plain move_mount(2) fails with ENOENT and failed the sandbox's start.
 * Needs root (a private mount namespace of this process, a scratch tmpfs
 * in it); skipped otherwise. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "libcore/rootfs.h"
#include "libcore/util.h"

static char scratch[] = "/tmp/test-rootfs-XXXXXX";
static bool ready;

static void put(const char *rel, const char *text) {
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", scratch, rel);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(core_write_all(fd, text, strlen(text)), 0);
        close(fd);
}

static char *slurp(const char *rel) {
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", scratch, rel);
        char *data = NULL;
        assert_int_equal(core_read_file(p, 4096, &data, NULL), 0);
        return data;
}

/* host/ stands for the host's /etc, root/ for the new root with its empty
 * mount point file. */
static int setup(void **state) {
        if (geteuid() != 0)
                return 0;
        if (!mkdtemp(scratch) || unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
            mount("tmpfs", scratch, "tmpfs", 0, "size=1m,mode=0755") < 0)
                return -1;
        char p[256];
        snprintf(p, sizeof(p), "%s/host", scratch);
        if (mkdir(p, 0755) < 0)
                return -1;
        snprintf(p, sizeof(p), "%s/root", scratch);
        if (mkdir(p, 0755) < 0)
                return -1;
        ready = true;
        return 0;
}

static int teardown(void **state) {
        if (ready)
                umount2(scratch, MNT_DETACH);
        if (geteuid() == 0)
                rmdir(scratch);
        return 0;
}

/* Clones host/<name> as sandbox-init gets it from sandboxd. */
static int clone_host(const char *name) {
        char p[256];
        snprintf(p, sizeof(p), "%s/host/%s", scratch, name);
        sb_error *e = NULL;
        int fd = core_rootfs_clone_tree(AT_FDCWD, p, true, &e);
        if (fd < 0)
                fail_msg("clone %s: %s", p, e ? e->message : "?");
        return fd;
}

static int open_root(void) {
        char p[256];
        snprintf(p, sizeof(p), "%s/root", scratch);
        int fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        return fd;
}

static void test_a_host_file_replaced_after_its_clone_is_mounted_as_the_clone_holds_it(void **state) {
        if (!ready)
                skip();
        put("host/ld.so.cache", "old cache\n");
        put("host/ld.so.cache~", "new cache\n");
        put("root/ld.so.cache", "");
        _cleanup_close_ int tree = clone_host("ld.so.cache");
        _cleanup_close_ int root = open_root();
        /* ldconfig's atomic replace, between sandboxd's clone and init's attach. */
        char from[256], to[256];
        snprintf(from, sizeof(from), "%s/host/ld.so.cache~", scratch);
        snprintf(to, sizeof(to), "%s/host/ld.so.cache", scratch);
        assert_int_equal(rename(from, to), 0);

        sb_error *e = NULL;
        int r = core_rootfs_attach_bind(root, tree, "/ld.so.cache", &e);
        if (r < 0)
                fail_msg("attach: %s", e ? e->message : "?");
        _cleanup_free_ char *seen = slurp("root/ld.so.cache");
        assert_string_equal(seen, "old cache\n");
        struct statvfs sv;
        snprintf(to, sizeof(to), "%s/root/ld.so.cache", scratch);
        assert_int_equal(statvfs(to, &sv), 0);
        assert_true(sv.f_flag & ST_RDONLY);
        assert_true(sv.f_flag & ST_NOSUID);
        assert_int_equal(open(to, O_WRONLY | O_CLOEXEC), -1);
        assert_int_equal(errno, EROFS);
        /* The host's new file is untouched. */
        _cleanup_free_ char *host = slurp("host/ld.so.cache");
        assert_string_equal(host, "new cache\n");
        umount2(to, MNT_DETACH);
        sb_error_free(e);
}

static void test_an_unreplaced_host_file_is_the_bind_itself(void **state) {
        if (!ready)
                skip();
        put("host/openssl.cnf", "cnf\n");
        put("root/openssl.cnf", "");
        _cleanup_close_ int tree = clone_host("openssl.cnf");
        _cleanup_close_ int root = open_root();
        sb_error *e = NULL;
        int r = core_rootfs_attach_bind(root, tree, "/openssl.cnf", &e);
        if (r < 0)
                fail_msg("attach: %s", e ? e->message : "?");
        char h[256], in[256];
        snprintf(h, sizeof(h), "%s/host/openssl.cnf", scratch);
        snprintf(in, sizeof(in), "%s/root/openssl.cnf", scratch);
        struct stat a, b;
        assert_int_equal(stat(h, &a), 0);
        assert_int_equal(stat(in, &b), 0);
        assert_true(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
        umount2(in, MNT_DETACH);
        sb_error_free(e);
}

/* A failure that is not a replaced file stays the error it was. */
static void test_a_missing_mount_point_is_still_an_error(void **state) {
        if (!ready)
                skip();
        put("host/hosts", "h\n");
        _cleanup_close_ int tree = clone_host("hosts");
        _cleanup_close_ int root = open_root();
        sb_error *e = NULL;
        assert_int_equal(core_rootfs_attach_bind(root, tree, "/no-such-file", &e), -ENOENT);
        assert_non_null(e);
        assert_non_null(strstr(e->message, "/no-such-file"));
        sb_error_free(e);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_a_host_file_replaced_after_its_clone_is_mounted_as_the_clone_holds_it),
                cmocka_unit_test(test_an_unreplaced_host_file_is_the_bind_itself),
                cmocka_unit_test(test_a_missing_mount_point_is_still_an_error),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
