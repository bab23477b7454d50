/* Unit tests for libcore/util.c and libcore/error.c: sandbox names, base64,
 * time formatting, atomic writes, rm -rf that never follows symlinks, the
 * beneath-an-fd helpers (no symlink followed anywhere in a path), the tree
 * copy (libcore/copy.c) that never follows a link out of its source, and
 * the error object's context wrapping, the growing buffer of libcore/buf.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include "libcore/buf.h"
#include "libcore/container.h"
#include "libcore/copy.h"
#include "libcore/error.h"
#include "libcore/urldecode.h"
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

/* What http_parser hands over in pieces (a URL, a body with NULs) comes
 * out whole, counted, with a NUL after it. */
static void test_buf_append_joins_pieces_with_a_nul_after_them(void **state) {
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;
        assert_int_equal(core_buf_append(&buf, &len, "", 0), 0);
        assert_int_equal(len, 0);
        assert_string_equal(buf, "");
        assert_int_equal(core_buf_append(&buf, &len, "/sandboxes", 10), 0);
        assert_int_equal(core_buf_append(&buf, &len, "/x\0y", 4), 0);
        assert_int_equal(len, 14);
        assert_memory_equal(buf, "/sandboxes/x\0y", 15);
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

static void touch(const char *dir, const char *name) {
        _cleanup_free_ char *p = NULL;
        assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        close(fd);
}

static bool exists_in(const char *dir, const char *name) {
        _cleanup_free_ char *p = NULL;
        assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
        return access(p, F_OK) == 0;
}

/* Exactly the names the atomic writers use are temporaries, and only
 * regular files of those names are removed. */
static void test_write_temps_are_removed_and_nothing_else(void **state) {
        assert_true(core_is_write_temp("config.json.tmp-0123abcd"));
        assert_false(core_is_write_temp(".tmp-0123abcd"));
        assert_false(core_is_write_temp("config.json.tmp-0123ABCD"));
        assert_false(core_is_write_temp("config.json.tmp-0123abc"));
        assert_false(core_is_write_temp("config.json.tmp-0123abcde"));
        assert_false(core_is_write_temp("config.json"));
        char dir[] = "/tmp/test-util-XXXXXX";
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *p = NULL, *sub = NULL;
        assert_true(asprintf(&p, "%s/rec.json", dir) > 0);
        assert_int_equal(core_write_file_atomic(p, "x", 1, 0600), 0);
        touch(dir, "snap-1.json.tmp-deadbeef");
        touch(dir, "keep.tmp-deadbeefx");
        assert_true(asprintf(&sub, "%s/d.tmp-deadbeef", dir) > 0);
        assert_int_equal(mkdir(sub, 0700), 0);
        assert_int_equal(core_remove_write_temps(dir), 1);
        assert_false(exists_in(dir, "snap-1.json.tmp-deadbeef"));
        assert_true(exists_in(dir, "rec.json"));
        assert_true(exists_in(dir, "keep.tmp-deadbeefx"));
        assert_true(exists_in(dir, "d.tmp-deadbeef"));
        assert_int_equal(core_remove_write_temps("/nonexistent-test-util"), 0);
        assert_int_equal(core_rm_rf(dir), 0);
}

/* A tombstone takes the whole tree aside at once, under a name start-up
 * recognises and a sandbox name can never have. */
static void test_tombstone_renames_aside(void **state) {
        char dir[] = "/tmp/test-util-XXXXXX";
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *sb = NULL, *tomb = NULL;
        assert_true(asprintf(&sb, "%s/box", dir) > 0);
        assert_int_equal(mkdir(sb, 0700), 0);
        touch(sb, "config.json");
        assert_int_equal(core_tombstone(dir, "box", &tomb), 0);
        assert_false(exists_in(dir, "box"));
        const char *base = strrchr(tomb, '/') + 1;
        assert_true(core_is_tombstone(base));
        assert_false(core_name_is_valid(base));
        assert_true(exists_in(tomb, "config.json"));
        assert_false(core_is_tombstone("box"));
        assert_int_equal(core_tombstone(dir, "box", NULL), -ENOENT);
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

/* A tree at dir/t whose entries are links to a victim directory outside. */
static void make_planted_tree(const char *dir, const char *victim) {
        char p[512];
        snprintf(p, sizeof(p), "%s/t/real", dir);
        assert_int_equal(core_mkdir_p(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/t/etc", dir);
        assert_int_equal(symlink(victim, p), 0);
        snprintf(p, sizeof(p), "%s/t/rel", dir);
        assert_int_equal(symlink("../../../../../../../../../../../../../../../../tmp", p), 0);
        snprintf(p, sizeof(p), "%s/t/proc", dir);
        assert_int_equal(symlink("/proc/self/root/tmp", p), 0);
        snprintf(p, sizeof(p), "%s/t/real/hosts", dir);
        char target[512];
        snprintf(target, sizeof(target), "%s/secret", victim);
        assert_int_equal(symlink(target, p), 0);
}

static void test_beneath_helpers_refuse_every_symlinked_component(void **state) {
        char dir[] = "/tmp/test-util-XXXXXX", victim[] = "/tmp/test-util-victim-XXXXXX";
        assert_non_null(mkdtemp(dir));
        assert_non_null(mkdtemp(victim));
        make_planted_tree(dir, victim);
        char p[512];
        snprintf(p, sizeof(p), "%s/t", dir);
        _cleanup_close_ int top = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(top >= 0);
        /* A link as the directory, as a middle component, magic links, "..". */
        assert_int_equal(core_mkdir_beneath(top, "etc", 0755), -ELOOP);
        assert_int_equal(core_mkdir_beneath(top, "rel/x", 0755), -ELOOP);
        assert_int_equal(core_open_beneath(top, "proc/x", O_RDONLY, 0), -ELOOP);
        assert_int_equal(core_open_beneath(top, "etc/secret", O_WRONLY | O_CREAT, 0644), -ELOOP);
        assert_int_equal(core_open_beneath(top, "../t/real", O_RDONLY, 0), -EXDEV);
        assert_int_equal(core_open_beneath(top, "/tmp", O_RDONLY, 0), -EXDEV);
        assert_int_equal(core_open_beneath(top, "real/hosts", O_RDONLY, 0), -ELOOP);
        /* A link as the last component of a write is replaced, not followed. */
        _cleanup_close_ int real = core_mkdir_beneath(top, "real", 0755);
        assert_true(real >= 0);
        assert_int_equal(core_write_file_at(real, "hosts", "mine\n", 5, 0644, false), 0);
        struct stat st;
        snprintf(p, sizeof(p), "%s/t/real/hosts", dir);
        assert_int_equal(lstat(p, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0644);
        assert_int_equal(core_write_file_at(real, "../x", "x", 1, 0644, false), -EINVAL);
        _cleanup_close_ int made = core_mkdir_beneath(top, "new/a/b", 0700);
        assert_true(made >= 0);
        /* Nothing reached the victim. */
        snprintf(p, sizeof(p), "%s/secret", victim);
        assert_int_equal(access(p, F_OK), -1);
        assert_int_equal(core_rm_rf(dir), 0);
        assert_int_equal(core_rm_rf(victim), 0);
}

static void test_tree_copy_keeps_links_as_links_and_reads_nothing_outside(void **state) {
        char dir[] = "/tmp/test-util-XXXXXX", victim[] = "/tmp/test-util-victim-XXXXXX";
        assert_non_null(mkdtemp(dir));
        assert_non_null(mkdtemp(victim));
        char p[512], q[512];
        snprintf(p, sizeof(p), "%s/secret", victim);
        assert_int_equal(core_write_file_atomic(p, "host secret", 11, 0600), 0);
        make_planted_tree(dir, victim);
        /* Regular data, a hardlink, a whiteout, a FIFO, an xattr on a link. */
        snprintf(p, sizeof(p), "%s/t/real/data", dir);
        assert_int_equal(core_write_file_atomic(p, "payload", 7, 0640), 0);
        snprintf(q, sizeof(q), "%s/t/real/data2", dir);
        assert_int_equal(link(p, q), 0);
        snprintf(p, sizeof(p), "%s/t/wh", dir);
        assert_int_equal(mknod(p, S_IFCHR | 0, makedev(0, 0)), 0);
        snprintf(p, sizeof(p), "%s/t/fifo", dir);
        assert_int_equal(mkfifo(p, 0644), 0);
        snprintf(p, sizeof(p), "%s/t/etc", dir);
        bool xattr = lsetxattr(p, "trusted.test", "v", 1, 0) == 0;
        char src[64], dst[64];
        snprintf(src, sizeof(src), "%s/t", dir);
        snprintf(dst, sizeof(dst), "%s/copy", dir);
        _cleanup_error_ sb_error *err = NULL;
        assert_int_equal(core_tree_copy(src, dst, &err), 0);
        char target[64];
        static const char *const links[] = {"etc", "rel", "proc", "real/hosts"};
        for (size_t i = 0; i < sizeof(links) / sizeof(*links); i++) {
                struct stat a;
                snprintf(p, sizeof(p), "%s/%s", dst, links[i]);
                assert_int_equal(lstat(p, &a), 0);
                assert_true(S_ISLNK(a.st_mode));
        }
        snprintf(p, sizeof(p), "%s/etc", dst);
        ssize_t n = readlink(p, target, sizeof(target) - 1);
        assert_true(n > 0);
        target[n] = 0;
        assert_string_equal(target, victim);
        if (xattr) {
                char v[8] = "";
                assert_int_equal(lgetxattr(p, "trusted.test", v, sizeof(v)), 1);
                assert_int_equal(v[0], 'v');
        }
        struct stat a, b;
        snprintf(p, sizeof(p), "%s/real/data", dst);
        snprintf(q, sizeof(q), "%s/real/data2", dst);
        assert_int_equal(stat(p, &a), 0);
        assert_int_equal(stat(q, &b), 0);
        assert_int_equal(a.st_ino, b.st_ino);
        assert_int_equal(a.st_mode & 07777, 0640);
        _cleanup_free_ char *text = NULL;
        assert_int_equal(core_read_file(p, 64, &text, NULL), 0);
        assert_string_equal(text, "payload");
        snprintf(p, sizeof(p), "%s/wh", dst);
        assert_int_equal(lstat(p, &a), 0);
        assert_true(S_ISCHR(a.st_mode) && a.st_rdev == makedev(0, 0));
        snprintf(p, sizeof(p), "%s/fifo", dst);
        assert_int_equal(lstat(p, &a), 0);
        assert_true(S_ISFIFO(a.st_mode));
        /* The victim was neither read into the copy nor changed. */
        snprintf(p, sizeof(p), "%s/secret", dst);
        assert_int_equal(access(p, F_OK), -1);
        _cleanup_free_ char *kept = NULL;
        snprintf(p, sizeof(p), "%s/secret", victim);
        assert_int_equal(core_read_file(p, 64, &kept, NULL), 0);
        assert_string_equal(kept, "host secret");
        assert_int_equal(core_rm_rf(dir), 0);
        assert_int_equal(core_rm_rf(victim), 0);
}

/* A tree far deeper than the levels one removal holds open: removed whole,
 * with a file and a link to a victim at the bottom left alone. */
static void test_rm_rf_removes_a_tree_of_any_depth(void **state) {
        char dir[] = "/tmp/test-util-XXXXXX", victim[] = "/tmp/test-util-victim-XXXXXX";
        assert_non_null(mkdtemp(dir));
        assert_non_null(mkdtemp(victim));
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        for (int i = 0; i < 1000; i++) {
                assert_int_equal(mkdirat(fd, "d", 0755), 0);
                int sub = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                assert_true(sub >= 0);
                close(fd);
                fd = sub;
        }
        assert_int_equal(symlinkat(victim, fd, "out"), 0);
        assert_int_equal(core_write_file_at(fd, "f", "x", 1, 0644, false), 0);
        close(fd);
        char keep[64];
        snprintf(keep, sizeof(keep), "%s/keep", victim);
        assert_int_equal(core_write_file_atomic(keep, "y", 1, 0644), 0);
        assert_int_equal(core_rm_rf(dir), 0);
        assert_int_equal(access(dir, F_OK), -1);
        assert_int_equal(access(keep, F_OK), 0);
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

/* A child holding a dup of the lock file (started with `flags` for clone)
 * until its pipe closes; returns its pid. */
static pid_t lock_holding_child(int lockfd, unsigned long flags, int *ret_w) {
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid_t pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
        assert_true(pid >= 0);
        if (pid == 0) {
                char c;
                if (dup2(p[0], 0) < 0 || dup2(lockfd, 3) < 0 || syscall(SYS_close_range, 4U, ~0U, 0U) < 0)
                        _exit(1);
                while (read(0, &c, 1) < 0 && errno == EINTR)
                        ;
                _exit(0);
        }
        close(p[0]);
        *ret_w = p[1];
        return pid;
}

static void test_lock_holder_names_the_process_and_whether_it_never_exec_d_in_new_namespaces(void **state) {
        char path[] = "/tmp/test-lock-holder-XXXXXX";
        int fd = mkostemp(path, O_CLOEXEC);
        assert_true(fd >= 0);
        unlink(path);
        pid_t pid = 0;
        bool unexeced = true;
        /* Only this process holds it: nobody else. */
        assert_int_equal(core_lock_holder(fd, &pid, &unexeced), 0);
        int w = -1;
        /* A plain fork of this program: a holder, not an un-exec'd child
         * in new namespaces. */
        pid_t plain = lock_holding_child(fd, 0, &w);
        assert_int_equal(core_lock_holder(fd, &pid, &unexeced), 1);
        assert_int_equal(pid, plain);
        assert_false(unexeced);
        close(w);
        assert_int_equal(waitpid(plain, NULL, 0), plain);
        /* Cloned into a new user namespace and never exec'd. */
        pid_t child = lock_holding_child(fd, CLONE_NEWUSER, &w);
        assert_int_equal(core_lock_holder(fd, &pid, &unexeced), 1);
        assert_int_equal(pid, child);
        assert_true(unexeced);
        close(w);
        assert_int_equal(waitpid(child, NULL, 0), child);
        assert_int_equal(core_lock_holder(fd, &pid, &unexeced), 0);
        close(fd);
}

static void check_redact(const char *in, const char *prefix, const char *want) {
        char *got = core_redact_path(in, prefix, "<stateDir>");
        assert_non_null(got);
        assert_string_equal(got, want);
        free(got);
}

static void test_redact_path_replaces_whole_directories_only(void **state) {
        (void) state;
        check_redact("open /var/lib/sandboxd/sandboxes/a/disk.img: No space", "/var/lib/sandboxd",
                     "open <stateDir>/sandboxes/a/disk.img: No space");
        check_redact("rename '/var/lib/sandboxd/x' to /var/lib/sandboxd", "/var/lib/sandboxd/",
                     "rename '<stateDir>/x' to <stateDir>");
        /* Not a longer name, not inside another path. */
        check_redact("/var/lib/sandboxd2/x /srv/var/lib/sandboxd/y", "/var/lib/sandboxd",
                     "/var/lib/sandboxd2/x /srv/var/lib/sandboxd/y");
        check_redact("a:/var/lib/sandboxd(b)", "/var/lib/sandboxd", "a:<stateDir>(b)");
        /* Nothing to replace with "/", an empty or a NULL prefix. */
        check_redact("/etc/passwd", "/", "/etc/passwd");
        check_redact("/etc/passwd", "", "/etc/passwd");
        check_redact("/etc/passwd", NULL, "/etc/passwd");
        check_redact("", "/var/lib/sandboxd", "");
}

/* core_archive_lib_files: this test links libarchive, so the list names
 * its file last, and each file once, after every library it needs (the
 * order sandbox-init loads them in without a search). */
static void test_path_is_within_compares_whole_components(void **state) {
        (void)state;
        assert_true(core_path_is_within("/proc", "/proc"));
        assert_true(core_path_is_within("/proc/sys/kernel", "/proc"));
        assert_true(core_path_is_within("//proc//sys/", "/proc"));
        assert_true(core_path_is_within("/proc/", "/proc/"));
        assert_true(core_path_is_within("/anything", "/"));
        assert_false(core_path_is_within("/process", "/proc"));
        assert_false(core_path_is_within("/pro", "/proc"));
        assert_false(core_path_is_within("/sys", "/proc"));
        assert_false(core_path_is_within("proc", "/proc"));
        assert_false(core_path_is_within(NULL, "/proc"));
}

static void test_archive_lib_files_end_with_libarchive_once_each(void **state) {
        const char *const *f = core_archive_lib_files();
        assert_non_null(f);
        size_t n = 0;
        while (f[n])
                n++;
        assert_true(n >= 2);
        assert_non_null(strstr(f[n - 1], "libarchive.so.13"));
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(f[i][0], '/');
                for (size_t j = i + 1; j < n; j++)
                        assert_string_not_equal(f[i], f[j]);
        }
        assert_ptr_equal(core_archive_lib_files(), f);
}

/* Percent-decoding at its edges (RFC 3986 §2.1): a "%" takes exactly two
 * hex digits of either case, once (no double decoding); a malformed or
 * truncated escape stays literal; "%00" is a NUL counted in the length
 * (callers that want a C string compare with strlen); '+' is a space only
 * for form data. */
static void test_url_decode_takes_two_hex_digits_once_and_keeps_the_rest(void **state) {
        (void) state;
        static const struct {
                const char *in;
                bool plus;
                const char *out;
                size_t len;
        } cases[] = {
                { "%41%4a%4A", false, "AJJ", 3 },  { "a%2Fb", false, "a/b", 3 },
                { "%252F", false, "%2F", 3 },     { "%zz%4g%g4", false, "%zz%4g%g4", 9 },
                { "ab%4", false, "ab%4", 4 },     { "ab%", false, "ab%", 3 },
                { "%%41", false, "%A", 2 },       { "a+b%2B", true, "a b+", 4 },
                { "a+b", false, "a+b", 3 },       { "%C0%AF", false, "\xc0\xaf", 2 },
                { "x%00y", false, "x", 3 },       { "", true, "", 0 },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                size_t n = strlen(cases[i].in);
                char out[32];
                size_t got = core_url_decode(cases[i].in, n, cases[i].plus, out);
                if (got != cases[i].len || strcmp(out, cases[i].out) != 0 || out[got] != 0)
                        fail_msg("decode \"%s\": %zu \"%s\", want %zu \"%s\"", cases[i].in, got, out, cases[i].len,
                                 cases[i].out);
        }
        /* Only the bytes given: an escape cut by the length is literal. */
        char out[8];
        assert_int_equal(core_url_decode("a%41", 3, false, out), 3);
        assert_string_equal(out, "a%4");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_url_decode_takes_two_hex_digits_once_and_keeps_the_rest),
                cmocka_unit_test(test_sandbox_names_follow_design_rule),
                cmocka_unit_test(test_base64_round_trips_binary),
                cmocka_unit_test(test_base64_known_vectors_from_rfc4648),
                cmocka_unit_test(test_base64_rejects_malformed_input),
                cmocka_unit_test(test_buf_append_joins_pieces_with_a_nul_after_them),
                cmocka_unit_test(test_time_is_rfc3339_utc_with_millis),
                cmocka_unit_test(test_atomic_write_replaces_whole_file),
                cmocka_unit_test(test_write_temps_are_removed_and_nothing_else),
                cmocka_unit_test(test_tombstone_renames_aside),
                cmocka_unit_test(test_rm_rf_removes_tree_but_never_follows_symlinks),
                cmocka_unit_test(test_rm_rf_removes_a_tree_of_any_depth),
                cmocka_unit_test(test_beneath_helpers_refuse_every_symlinked_component),
                cmocka_unit_test(test_tree_copy_keeps_links_as_links_and_reads_nothing_outside),
                cmocka_unit_test(test_error_keeps_innermost_and_prefixes_context),
                cmocka_unit_test(test_redact_path_replaces_whole_directories_only),
                cmocka_unit_test(test_lock_holder_names_the_process_and_whether_it_never_exec_d_in_new_namespaces),
                cmocka_unit_test(test_archive_lib_files_end_with_libarchive_once_each),
                cmocka_unit_test(test_path_is_within_compares_whole_components),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
