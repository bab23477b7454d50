/* Unit tests for the incremental copy of libcore/copy.c (core_tree_sync):
 * a later pass rewrites what changed and only that, and leaves the copy
 * what a fresh copy of the source would be (hard links, removals, renames,
 * types, xattrs, data under an mtime set back). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include "libcore/copy.h"
#include "libcore/error.h"
#include "libcore/util.h"

typedef struct tree {
        char dir[32];
        char src[64], dst[64];
        core_tree_index *idx;
} tree;

/* cmocka setup and teardown: the teardown runs after a failed test too,
 * so no directory is left behind. */
static int tree_setup(void **state) {
        tree *t = calloc(1, sizeof(*t));
        if (!t)
                return -1;
        snprintf(t->dir, sizeof(t->dir), "/tmp/test-copy-XXXXXX");
        if (!mkdtemp(t->dir)) {
                free(t);
                return -1;
        }
        snprintf(t->src, sizeof(t->src), "%s/src", t->dir);
        snprintf(t->dst, sizeof(t->dst), "%s/dst", t->dir);
        *state = t;
        return mkdir(t->src, 0755);
}

static int tree_teardown(void **state) {
        tree *t = *state;
        core_tree_index_free(t->idx);
        int r = core_rm_rf(t->dir);
        free(t);
        return r;
}

static core_tree_sync_stats pass(tree *t) {
        core_tree_sync_stats st = {0};
        _cleanup_error_ sb_error *err = NULL;
        int r = core_tree_sync(t->src, t->dst, &t->idx, false, &st, &err);
        if (r < 0)
                fail_msg("core_tree_sync: %s", err ? err->message : "?");
        return st;
}

/* Waits until the clock pass starts are taken from (CLOCK_REALTIME_COARSE)
 * is past every timestamp set so far: an entry changed in the clock tick a
 * pass starts in is copied again by the next pass, whether it changed or
 * not ("racily clean"). Polls, with a deadline. */
static void settle(void) {
        struct timespec fine, coarse;
        clock_gettime(CLOCK_REALTIME, &fine);
        for (int i = 0; i < 2000000; i++) {
                clock_gettime(CLOCK_REALTIME_COARSE, &coarse);
                if (coarse.tv_sec > fine.tv_sec || (coarse.tv_sec == fine.tv_sec && coarse.tv_nsec > fine.tv_nsec))
                        return;
                sched_yield();
        }
        fail_msg("CLOCK_REALTIME_COARSE did not advance");
}

static void put(const tree *t, const char *rel, const char *data) {
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", t->src, rel);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, data, strlen(data)), (ssize_t)strlen(data));
        close(fd);
}

static void sh(const tree *t, const char *fmt, const char *a, const char *b) {
        char p[256], q[256];
        snprintf(p, sizeof(p), "%s/%s", t->src, a);
        snprintf(q, sizeof(q), "%s/%s", t->src, b ? b : "");
        if (streq(fmt, "rename"))
                assert_int_equal(rename(p, q), 0);
        else if (streq(fmt, "link"))
                assert_int_equal(link(p, q), 0);
        else if (streq(fmt, "mkdir"))
                assert_int_equal(mkdir(p, 0755), 0);
        else if (streq(fmt, "unlink"))
                assert_int_equal(unlink(p), 0);
        else if (streq(fmt, "rm"))
                assert_int_equal(core_rm_rf(p), 0);
        else if (streq(fmt, "symlink"))
                assert_int_equal(symlink(b, p), 0);
        else
                fail_msg("unknown step %s", fmt);
}

static struct stat dstat(const tree *t, const char *rel) {
        char p[256];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", t->dst, rel);
        if (lstat(p, &st) < 0)
                fail_msg("lstat %s: %m", p);
        return st;
}

static bool dexists(const tree *t, const char *rel) {
        char p[256];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", t->dst, rel);
        return lstat(p, &st) == 0;
}

static void dcontent(const tree *t, const char *rel, const char *want) {
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", t->dst, rel);
        _cleanup_free_ char *got = NULL;
        assert_int_equal(core_read_file(p, 1 << 20, &got, NULL), 0);
        assert_string_equal(got, want);
}

static void test_second_pass_rewrites_only_what_changed(void **state) {
        tree *t = *state;
        sh(t, "mkdir", "d", NULL);
        put(t, "a", "alpha");
        put(t, "d/b", "beta");
        settle();
        core_tree_sync_stats st = pass(t);
        assert_int_equal(st.written, 4); /* the top, a, d, d/b */
        st = pass(t);
        assert_int_equal(st.written, 0);
        assert_int_equal(st.bytes, 0);
        put(t, "d/b", "beta 2");
        settle();
        st = pass(t);
        /* d/b, and d's own metadata (its times, after the entry's rewrite). */
        assert_int_equal(st.written, 2);
        assert_int_equal(st.bytes, 6);
        dcontent(t, "d/b", "beta 2");
        dcontent(t, "a", "alpha");
        /* The rewrite of d/b left d's times those of the source. */
        char p[256];
        struct stat sd;
        snprintf(p, sizeof(p), "%s/d", t->src);
        assert_int_equal(lstat(p, &sd), 0);
        assert_int_equal(dstat(t, "d").st_mtim.tv_sec, sd.st_mtim.tv_sec);
        assert_int_equal(dstat(t, "d").st_mtim.tv_nsec, sd.st_mtim.tv_nsec);
}

static void test_data_changed_under_an_mtime_set_back_is_copied(void **state) {
        tree *t = *state;
        put(t, "f", "old data");
        pass(t);
        char p[256];
        snprintf(p, sizeof(p), "%s/f", t->src);
        struct stat before;
        assert_int_equal(stat(p, &before), 0);
        int fd = open(p, O_WRONLY);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, "new", 3, 0), 3);
        close(fd);
        struct timespec ts[2] = {before.st_atim, before.st_mtim};
        assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
        pass(t);
        dcontent(t, "f", "new data");
}

static void test_hard_links_stay_links_when_one_name_moves(void **state) {
        tree *t = *state;
        sh(t, "mkdir", "d", NULL);
        put(t, "d/a", "shared");
        sh(t, "link", "d/a", "b");
        settle();
        pass(t);
        assert_int_equal(dstat(t, "d/a").st_ino, dstat(t, "b").st_ino);
        /* The inode is unchanged: only its directory moved. */
        sh(t, "rename", "d", "e");
        pass(t);
        assert_false(dexists(t, "d"));
        assert_int_equal(dstat(t, "e/a").st_ino, dstat(t, "b").st_ino);
        assert_int_equal(dstat(t, "b").st_nlink, 2);
        dcontent(t, "e/a", "shared");
}

static void test_removals_type_changes_and_xattrs_follow_the_source(void **state) {
        tree *t = *state;
        sh(t, "mkdir", "d", NULL);
        put(t, "d/x", "x");
        put(t, "f", "file");
        put(t, "gone", "gone");
        char p[256];
        snprintf(p, sizeof(p), "%s/d", t->src);
        bool xattrs = setxattr(p, "user.k", "v", 1, 0) == 0;
        pass(t);
        snprintf(p, sizeof(p), "%s/d", t->dst);
        if (xattrs)
                assert_int_equal(lgetxattr(p, "user.k", NULL, 0), 1);
        sh(t, "unlink", "gone", NULL);
        sh(t, "unlink", "f", NULL);
        sh(t, "mkdir", "f", NULL);       /* a file turned directory */
        put(t, "f/in", "in");
        sh(t, "rm", "d", NULL);
        sh(t, "symlink", "d", "/etc");   /* a directory turned symlink */
        sh(t, "mkdir", "e", NULL);
        snprintf(p, sizeof(p), "%s/e", t->src);
        if (xattrs)
                assert_int_equal(setxattr(p, "user.k", "v", 1, 0), 0);
        pass(t);
        snprintf(p, sizeof(p), "%s/e", t->src);
        if (xattrs)
                assert_int_equal(removexattr(p, "user.k"), 0);
        pass(t);
        assert_false(dexists(t, "gone"));
        assert_true(S_ISDIR(dstat(t, "f").st_mode));
        dcontent(t, "f/in", "in");
        assert_true(S_ISLNK(dstat(t, "d").st_mode));
        char target[64] = {0};
        snprintf(p, sizeof(p), "%s/d", t->dst);
        assert_int_equal(readlink(p, target, sizeof(target) - 1), 4);
        assert_string_equal(target, "/etc");
        snprintf(p, sizeof(p), "%s/e", t->dst);
        assert_int_equal(lgetxattr(p, "user.k", NULL, 0), -1);
}

#define SPARSE_SIZE (10LL << 30)

static int64_t now_ms(void) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A's data at 0, the middle and the last 3 bytes; zeros between. */
static void sparse_check(const char *p) {
        struct stat st;
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_size, SPARSE_SIZE);
        if ((int64_t)st.st_blocks * 512 > (1 << 20))
                fail_msg("%s: %lld bytes allocated for a file of 12 bytes of data", p, (long long)st.st_blocks * 512);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        char b[8] = {0};
        assert_int_equal(pread(fd, b, 3, 0), 3);
        assert_memory_equal(b, "abc", 3);
        assert_int_equal(pread(fd, b, 6, SPARSE_SIZE / 2 - 3), 6);
        assert_memory_equal(b, "\0\0\0def", 6);
        assert_int_equal(pread(fd, b, 4, SPARSE_SIZE - 4), 4);
        assert_memory_equal(b, "\0xyz", 4);
        close(fd);
}

/* A sparse file stays sparse in an incremental copy, a copy and an
 * archive (holes are not written), in well under a second. */
static void test_sparse_file_copies_sparse(void **state) {
        tree *t = *state;
        char p[256];
        snprintf(p, sizeof(p), "%s/S", t->src);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, SPARSE_SIZE), 0);
        assert_int_equal(pwrite(fd, "abc", 3, 0), 3);
        assert_int_equal(pwrite(fd, "def", 3, SPARSE_SIZE / 2), 3);
        assert_int_equal(pwrite(fd, "xyz", 3, SPARSE_SIZE - 3), 3);
        close(fd);
        int64_t t0 = now_ms();
        core_tree_sync_stats st = pass(t);
        assert_true(st.bytes < (1 << 20));
        snprintf(p, sizeof(p), "%s/S", t->dst);
        sparse_check(p);
        char copy[128];
        snprintf(copy, sizeof(copy), "%s/copy", t->dir);
        _cleanup_error_ sb_error *err = NULL;
        if (core_tree_copy(t->src, copy, &err) < 0)
                fail_msg("core_tree_copy: %s", err ? err->message : "?");
        snprintf(p, sizeof(p), "%s/S", copy);
        sparse_check(p);
        /* An archive: a sparse entry whose data is only the 9 bytes. */
        snprintf(p, sizeof(p), "%s/a.tar", t->dir);
        struct archive *wr = archive_write_new();
        assert_non_null(wr);
        assert_int_equal(archive_write_set_format_pax(wr), ARCHIVE_OK);
        assert_int_equal(archive_write_open_filename(wr, p), ARCHIVE_OK);
        if (core_tree_write(t->src, wr, "x", true, &err) < 0)
                fail_msg("core_tree_write: %s", err ? err->message : "?");
        assert_int_equal(archive_write_close(wr), ARCHIVE_OK);
        archive_write_free(wr);
        int64_t took = now_ms() - t0;
        if (took > 1000)
                fail_msg("copying a sparse file of 10 GiB took %lld ms", (long long)took);
        struct stat ast;
        assert_int_equal(stat(p, &ast), 0);
        assert_true(ast.st_size < (1 << 20));
        struct archive *rd = archive_read_new();
        archive_read_support_format_tar(rd);
        assert_int_equal(archive_read_open_filename(rd, p, 10240), ARCHIVE_OK);
        struct archive_entry *e;
        bool seen = false;
        while (archive_read_next_header(rd, &e) == ARCHIVE_OK) {
                if (!streq(archive_entry_pathname(e), "x/S"))
                        continue;
                seen = true;
                assert_int_equal(archive_entry_size(e), SPARSE_SIZE);
                const void *buf;
                size_t len;
                la_int64_t off;
                int64_t data = 0;
                bool mid = false;
                while (archive_read_data_block(rd, &buf, &len, &off) == ARCHIVE_OK) {
                        data += (int64_t)len;
                        if (off <= SPARSE_SIZE / 2 && off + (int64_t)len >= SPARSE_SIZE / 2 + 3)
                                mid = memcmp((const char *)buf + (SPARSE_SIZE / 2 - off), "def", 3) == 0;
                }
                assert_true(mid);
                assert_true(data < (1 << 20));
        }
        archive_read_free(rd);
        assert_true(seen);
}

typedef struct cancel_run {
        tree *t;
        int flag;
        int r;
} cancel_run;

/* core_tree_sync at SCHED_IDLE, so the test's thread, which cancels it,
 * runs whenever it is woken. */
static void *copy_thread(void *p) {
        cancel_run *c = p;
        struct sched_param sp = {0};
        pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
        core_cancel_bind(&c->flag);
        core_tree_sync_stats st = {0};
        sb_error *err = NULL;
        c->r = core_tree_sync(c->t->src, c->t->dst, &c->t->idx, false, &st, &err);
        core_cancel_bind(NULL);
        sb_error_free(err);
        return NULL;
}

/* A cancel while one big file is copied stops within a few MiB of it,
 * not at its end. */
static void test_cancel_stops_inside_a_big_file(void **state) {
        tree *t = *state;
        char p[256];
        snprintf(p, sizeof(p), "%s/big", t->src);
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        static char chunk[1 << 20];
        memset(chunk, 'x', sizeof(chunk));
        for (int i = 0; i < 256; i++)
                assert_int_equal(write(fd, chunk, sizeof(chunk)), (ssize_t)sizeof(chunk));
        close(fd);
        cancel_run c = {.t = t};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, copy_thread, &c), 0);
        /* The copy is in the file once its copy exists. */
        snprintf(p, sizeof(p), "%s/big", t->dst);
        struct stat st;
        int64_t deadline = now_ms() + 60000;
        while (lstat(p, &st) < 0 && now_ms() < deadline) {
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
        }
        __atomic_store_n(&c.flag, CORE_CANCEL_REQUESTED, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(c.r, -ECANCELED);
        if (st.st_blocks * 512 >= (128 << 20))
                fail_msg("cancelled, the copy still wrote %lld bytes of the file", (long long)st.st_blocks * 512);
}

static void socket_check(const char *p) {
        struct stat st;
        if (lstat(p, &st) < 0)
                fail_msg("%s: %m", p);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0640);
        assert_int_equal(st.st_uid, 1000);
        assert_int_equal(st.st_gid, 1001);
}

/* A Unix socket's inode is copied (mode, owner), as a FIFO is, by an
 * incremental copy and a copy; an unchanged one is kept. */
static void test_sockets_are_copied(void **state) {
        tree *t = *state;
        sh(t, "mkdir", "d", NULL);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/d/sock", t->src);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(fd);
        assert_int_equal(chown(sa.sun_path, 1000, 1001), 0);
        assert_int_equal(chmod(sa.sun_path, 0640), 0);
        settle();
        pass(t);
        char p[256];
        snprintf(p, sizeof(p), "%s/d/sock", t->dst);
        socket_check(p);
        ino_t ino = dstat(t, "d/sock").st_ino;
        settle();
        core_tree_sync_stats st = pass(t);
        assert_int_equal(st.written, 0);
        assert_int_equal(dstat(t, "d/sock").st_ino, ino);
        char copy[128];
        snprintf(copy, sizeof(copy), "%s/copy", t->dir);
        _cleanup_error_ sb_error *err = NULL;
        if (core_tree_copy(t->src, copy, &err) < 0)
                fail_msg("core_tree_copy: %s", err ? err->message : "?");
        snprintf(p, sizeof(p), "%s/d/sock", copy);
        socket_check(p);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_second_pass_rewrites_only_what_changed, tree_setup, tree_teardown),
                cmocka_unit_test_setup_teardown(test_data_changed_under_an_mtime_set_back_is_copied, tree_setup, tree_teardown),
                cmocka_unit_test_setup_teardown(test_hard_links_stay_links_when_one_name_moves, tree_setup, tree_teardown),
                cmocka_unit_test_setup_teardown(test_removals_type_changes_and_xattrs_follow_the_source, tree_setup, tree_teardown),
                cmocka_unit_test_setup_teardown(test_sparse_file_copies_sparse, tree_setup, tree_teardown),
                cmocka_unit_test_setup_teardown(test_cancel_stops_inside_a_big_file, tree_setup, tree_teardown),
                cmocka_unit_test_setup_teardown(test_sockets_are_copied, tree_setup, tree_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
