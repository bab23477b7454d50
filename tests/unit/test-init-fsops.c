/* Unit tests for libcore/init/fsops.c, the file operations sandbox-init does
 * for sandboxd: run in this process against a private temporary directory
 * (owned by the sandbox user, standing in for /workspace), with the same
 * fsuid switch init uses. Needs root (setfsuid). */
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

/* fsops.c is part of the sandbox-init binary, not of a library: compile it in. */
#include "libcore/init/fsops.c"
#include "libcore/init/user.c"  /* the sandbox user's ids (init_user_uid) */

static char ws[64];

static int make_workspace(void **state) {
        strcpy(ws, "/tmp/test-init-fsops-XXXXXX");
        if (!mkdtemp(ws) || chown(ws, SANDBOX_UID, SANDBOX_GID) < 0)
                return -1;
        return 0;
}

static int remove_workspace(void **state) {
        return core_rm_rf(ws);
}

/* Runs one request given as JSON text; returns the result (caller frees)
 * or NULL with *ret_errno set (positive) and the message in *ret_msg. */
static cJSON *fs(int *ret_errno, char **ret_msg, const char *fmt, ...) _printf_(3, 4);
static cJSON *fs(int *ret_errno, char **ret_msg, const char *fmt, ...) {
        char buf[8192];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        cJSON *req = cJSON_Parse(buf);
        assert_non_null(req);
        cJSON *res = NULL;
        char *msg = NULL;
        int r = init_fs_handle(req, ws, &res, &msg);
        cJSON_Delete(req);
        if (ret_errno)
                *ret_errno = r < 0 ? -r : 0;
        if (ret_msg)
                *ret_msg = msg;
        else
                free(msg);
        return res;
}

static cJSON *fs_ok(const char *json) {
        int e;
        char *msg = NULL;
        cJSON *res = fs(&e, &msg, "%s", json);
        if (!res)
                fail_msg("%s -> %s", json, msg);
        free(msg);
        return res;
}

static void write_file(const char *path, const char *content, const char *extra) {
        _cleanup_free_ char *b64 = core_base64_encode(content, strlen(content));
        char req[4096];
        snprintf(req, sizeof(req), "{\"action\":\"write\",\"path\":\"%s\",\"data\":\"%s\"%s}", path, b64, extra);
        cJSON_Delete(fs_ok(req));
}

static char *read_text(const char *path, long offset) {
        char req[1024];
        snprintf(req, sizeof(req), "{\"action\":\"read\",\"path\":\"%s\",\"offset\":%ld}", path, offset);
        cJSON *res = fs_ok(req);
        void *data;
        size_t len;
        assert_int_equal(core_base64_decode(cJSON_GetObjectItem(res, "data")->valuestring, &data, &len), 0);
        cJSON_Delete(res);
        return data;
}

static void test_write_creates_parents_as_sandbox_user_with_exact_mode(void **state) {
        umask(077); /* the requested mode must win over the umask */
        write_file("a/b/c.txt", "hello", ",\"mode\":420");
        umask(022);
        char p[256];
        struct stat st;
        snprintf(p, sizeof(p), "%s/a/b/c.txt", ws);
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0644);
        assert_int_equal(st.st_uid, SANDBOX_UID);
        assert_int_equal(st.st_gid, SANDBOX_GID);
        snprintf(p, sizeof(p), "%s/a/b", ws);
        assert_int_equal(stat(p, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_uid, SANDBOX_UID);
}

static void test_write_then_append_then_read_by_offset(void **state) {
        write_file("f.txt", "hello", "");
        write_file("f.txt", " world", ",\"append\":true");
        _cleanup_free_ char *all = read_text("f.txt", 0);
        assert_string_equal(all, "hello world");
        _cleanup_free_ char *tail = read_text("f.txt", 6);
        assert_string_equal(tail, "world");
        write_file("f.txt", "new", ""); /* a first chunk truncates */
        _cleanup_free_ char *again = read_text("f.txt", 0);
        assert_string_equal(again, "new");
}

static void test_read_chunks_large_file_and_reports_eof(void **state) {
        size_t n = AGENT_FS_CHUNK + 1000;
        _cleanup_free_ char *big = malloc(n);
        assert_non_null(big);
        memset(big, 'x', n);
        char p[256];
        snprintf(p, sizeof(p), "%s/big", ws);
        assert_int_equal(core_write_file_atomic(p, big, n, 0644), 0);
        cJSON *r1 = fs_ok("{\"action\":\"read\",\"path\":\"big\"}");
        assert_false(cJSON_IsTrue(cJSON_GetObjectItem(r1, "eof")));
        assert_int_equal(cJSON_GetObjectItem(r1, "size")->valuedouble, n);
        assert_int_equal(strlen(cJSON_GetObjectItem(r1, "data")->valuestring), 4 * ((AGENT_FS_CHUNK + 2) / 3));
        cJSON_Delete(r1);
        char req[256];
        snprintf(req, sizeof(req), "{\"action\":\"read\",\"path\":\"big\",\"offset\":%d}", AGENT_FS_CHUNK);
        cJSON *r2 = fs_ok(req);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(r2, "eof")));
        void *data;
        size_t len;
        assert_int_equal(core_base64_decode(cJSON_GetObjectItem(r2, "data")->valuestring, &data, &len), 0);
        assert_int_equal(len, 1000);
        free(data);
        cJSON_Delete(r2);
}

static void test_stat_returns_api_stat_object(void **state) {
        write_file("s.txt", "12345", ",\"mode\":384");
        cJSON *st = fs_ok("{\"action\":\"stat\",\"path\":\"s.txt\"}");
        char p[256];
        snprintf(p, sizeof(p), "%s/s.txt", ws);
        assert_string_equal(cJSON_GetObjectItem(st, "name")->valuestring, "s.txt");
        assert_string_equal(cJSON_GetObjectItem(st, "path")->valuestring, p);
        assert_string_equal(cJSON_GetObjectItem(st, "type")->valuestring, "file");
        assert_int_equal(cJSON_GetObjectItem(st, "size")->valueint, 5);
        assert_int_equal(cJSON_GetObjectItem(st, "mode")->valueint, 0600);
        assert_int_equal(cJSON_GetObjectItem(st, "uid")->valueint, SANDBOX_UID);
        assert_int_equal(cJSON_GetObjectItem(st, "gid")->valueint, SANDBOX_GID);
        const char *mtime = cJSON_GetObjectItem(st, "mtime")->valuestring;
        assert_int_equal(strlen(mtime), 24); /* 2026-11-30T05:35:19.123Z */
        assert_int_equal(mtime[23], 'Z');
        cJSON_Delete(st);
}

static void test_stat_does_not_follow_symlink(void **state) {
        char p[256];
        snprintf(p, sizeof(p), "%s/link", ws);
        assert_int_equal(symlink("/etc/passwd", p), 0);
        cJSON *st = fs_ok("{\"action\":\"stat\",\"path\":\"link\"}");
        assert_string_equal(cJSON_GetObjectItem(st, "type")->valuestring, "symlink");
        cJSON_Delete(st);
}

static void test_list_is_sorted_by_name_with_stat_entries(void **state) {
        write_file("l/z", "", "");
        write_file("l/b.txt", "bb", "");
        write_file("l/A", "", "");
        cJSON_Delete(fs_ok("{\"action\":\"mkdir\",\"path\":\"l/dir\"}"));
        cJSON *res = fs_ok("{\"action\":\"list\",\"path\":\"l\"}");
        cJSON *entries = cJSON_GetObjectItem(res, "entries");
        const char *want[] = { "A", "b.txt", "dir", "z" };
        assert_int_equal(cJSON_GetArraySize(entries), 4);
        for (int i = 0; i < 4; i++)
                assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(entries, i), "name")->valuestring, want[i]);
        cJSON *b = cJSON_GetArrayItem(entries, 1);
        assert_int_equal(cJSON_GetObjectItem(b, "size")->valueint, 2);
        assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(entries, 2), "type")->valuestring, "directory");
        char p[256];
        snprintf(p, sizeof(p), "%s/l/b.txt", ws);
        assert_string_equal(cJSON_GetObjectItem(b, "path")->valuestring, p);
        cJSON_Delete(res);
}

static void test_mkdir_parents_and_without_parents(void **state) {
        cJSON_Delete(fs_ok("{\"action\":\"mkdir\",\"path\":\"m/n/o\"}"));
        cJSON_Delete(fs_ok("{\"action\":\"mkdir\",\"path\":\"m/n/o\"}")); /* exists: fine with parents */
        int e;
        assert_null(fs(&e, NULL, "{\"action\":\"mkdir\",\"path\":\"m/n/o\",\"parents\":false}"));
        assert_int_equal(e, EEXIST);
        assert_null(fs(&e, NULL, "{\"action\":\"mkdir\",\"path\":\"q/r\",\"parents\":false}"));
        assert_int_equal(e, ENOENT);
}

static void test_remove_needs_recursive_for_non_empty_directory(void **state) {
        write_file("r/x/y.txt", "y", "");
        int e;
        char *msg;
        assert_null(fs(&e, &msg, "{\"action\":\"remove\",\"path\":\"r\"}"));
        assert_int_equal(e, ENOTEMPTY);
        char want[256];
        snprintf(want, sizeof(want), "fs.remove %s/r: %s", ws, strerror(ENOTEMPTY));
        assert_string_equal(msg, want);
        free(msg);
        cJSON_Delete(fs_ok("{\"action\":\"remove\",\"path\":\"r\",\"recursive\":true}"));
        assert_null(fs(&e, NULL, "{\"action\":\"stat\",\"path\":\"r\"}"));
        assert_int_equal(e, ENOENT);
        write_file("single", "", "");
        cJSON_Delete(fs_ok("{\"action\":\"remove\",\"path\":\"single\"}"));
        cJSON_Delete(fs_ok("{\"action\":\"mkdir\",\"path\":\"emptydir\"}"));
        cJSON_Delete(fs_ok("{\"action\":\"remove\",\"path\":\"emptydir\"}"));
}

static void test_recursive_remove_never_follows_symlinks(void **state) {
        write_file("keep/precious", "data", "");
        cJSON_Delete(fs_ok("{\"action\":\"mkdir\",\"path\":\"doomed\"}"));
        char link[256], target[256], precious[256];
        snprintf(link, sizeof(link), "%s/doomed/link", ws);
        snprintf(target, sizeof(target), "%s/keep", ws);
        snprintf(precious, sizeof(precious), "%s/keep/precious", ws);
        assert_int_equal(symlink(target, link), 0);
        cJSON_Delete(fs_ok("{\"action\":\"remove\",\"path\":\"doomed\",\"recursive\":true}"));
        assert_int_equal(access(precious, F_OK), 0);
        assert_int_not_equal(access(link, F_OK), 0);
}

static void test_sandbox_user_permissions_apply(void **state) {
        char d[256];
        snprintf(d, sizeof(d), "%s/rootonly", ws);
        assert_int_equal(mkdir(d, 0755), 0); /* owned by root, not writable by 1000 */
        int e;
        char *msg;
        _cleanup_free_ char *b64 = core_base64_encode("x", 1);
        assert_null(fs(&e, &msg, "{\"action\":\"write\",\"path\":\"rootonly/f\",\"data\":\"%s\"}", b64));
        assert_int_equal(e, EACCES);
        char want[300];
        snprintf(want, sizeof(want), "fs.write %s/rootonly/f: Permission denied", ws);
        assert_string_equal(msg, want);
        free(msg);
        assert_null(fs(&e, NULL, "{\"action\":\"read\",\"path\":\"/etc/shadow\"}"));
        assert_int_equal(e, EACCES);
        /* root's capabilities are back after the call */
        assert_int_equal(setfsuid((uid_t)-1), 0);
}

static void test_magic_links_are_not_followed(void **state) {
        int e;
        assert_null(fs(&e, NULL, "{\"action\":\"read\",\"path\":\"/proc/self/fd/0\"}"));
        assert_int_equal(e, ELOOP);
}

static void test_read_refuses_directories_and_fifos(void **state) {
        int e;
        assert_null(fs(&e, NULL, "{\"action\":\"read\",\"path\":\".\"}"));
        assert_int_equal(e, EISDIR);
        char p[256];
        snprintf(p, sizeof(p), "%s/fifo", ws);
        assert_int_equal(mkfifo(p, 0666), 0);
        assert_int_equal(chown(p, SANDBOX_UID, SANDBOX_GID), 0);
        assert_null(fs(&e, NULL, "{\"action\":\"read\",\"path\":\"fifo\"}"));
        assert_int_equal(e, EINVAL);
}

static void test_malformed_requests_are_errors(void **state) {
        int e;
        char *msg;
        assert_null(fs(&e, &msg, "{\"action\":\"write\"}"));
        assert_int_equal(e, EINVAL);
        free(msg);
        assert_null(fs(&e, &msg, "{\"action\":\"chmod\",\"path\":\"x\"}"));
        assert_int_equal(e, EOPNOTSUPP);
        free(msg);
        assert_null(fs(&e, NULL, "{\"action\":\"write\",\"path\":\"x\",\"data\":\"!!\"}"));
        assert_int_equal(e, EINVAL);
        assert_null(fs(&e, NULL, "{\"action\":\"remove\",\"path\":\"/\"}"));
        assert_int_equal(e, EINVAL);
}

static void test_relative_paths_resolve_against_workspace(void **state) {
        write_file("rel///dir//file", "r", "");
        char p[256];
        snprintf(p, sizeof(p), "%s/rel/dir/file", ws);
        assert_int_equal(access(p, F_OK), 0);
        char req[300];
        snprintf(req, sizeof(req), "{\"action\":\"stat\",\"path\":\"%s/rel/dir/\"}", ws);
        cJSON *st = fs_ok(req);
        assert_string_equal(cJSON_GetObjectItem(st, "name")->valuestring, "dir");
        cJSON_Delete(st);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, make_workspace, remove_workspace)
        const struct CMUnitTest tests[] = {
                T(test_write_creates_parents_as_sandbox_user_with_exact_mode),
                T(test_write_then_append_then_read_by_offset),
                T(test_read_chunks_large_file_and_reports_eof),
                T(test_stat_returns_api_stat_object),
                T(test_stat_does_not_follow_symlink),
                T(test_list_is_sorted_by_name_with_stat_entries),
                T(test_mkdir_parents_and_without_parents),
                T(test_remove_needs_recursive_for_non_empty_directory),
                T(test_recursive_remove_never_follows_symlinks),
                T(test_sandbox_user_permissions_apply),
                T(test_magic_links_are_not_followed),
                T(test_read_refuses_directories_and_fifos),
                T(test_malformed_requests_are_errors),
                T(test_relative_paths_resolve_against_workspace),
        };
#undef T
        return cmocka_run_group_tests_name("init-fsops", tests, NULL, NULL);
}
