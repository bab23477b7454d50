/* Unit tests for sandbox sources (libcore/source-tar.c, source-git.c):
 * URL vetting, contained tarball extraction of hostile archives built here
 * with libarchive's write API, and git clones of local repositories made
 * with the git binary. Runs as root (make check). */
#include <archive.h>
#include <archive_entry.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
/* cmocka.h needs the three headers above first. */
#include <cmocka.h>

#include "libcore/source.h"
#include "libcore/util.h"

#define UID 12345
#define GID 23456
#define CAP (64ULL << 20)
/* Local sources come from under these only (daemon.json localSourceRoots):
 * the worlds are made in /tmp; /dev for the device-path case. */
static const char *const test_roots[] = {"/tmp", "/dev", NULL};
#define TEST_ROOTS test_roots

/* ---- helpers -------------------------------------------------------------- */

typedef struct member {
        const char *name;
        unsigned type; /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR, AE_IFIFO */
        unsigned mode;
        const char *data;     /* regular file content */
        const char *link;     /* symlink target */
        const char *hardlink; /* hardlink target (type ignored) */
        size_t zeros;         /* regular file of this many zero bytes instead of data */
} member;

typedef struct world {
        char top[64];  /* mkdtemp root, 0755 so the sandbox uid can traverse it */
        char dest[96]; /* top/dest, the extraction or clone target */
        char victim[96];
        char tar[96];
} world;

static int world_setup(void **state) {
        world *w = calloc(1, sizeof(*w));
        assert_non_null(w);
        strcpy(w->top, "/tmp/test-source-XXXXXX");
        assert_non_null(mkdtemp(w->top));
        assert_int_equal(chmod(w->top, 0755), 0);
        snprintf(w->dest, sizeof(w->dest), "%s/dest", w->top);
        snprintf(w->victim, sizeof(w->victim), "%s/victim", w->top);
        snprintf(w->tar, sizeof(w->tar), "%s/t.tar", w->top);
        assert_int_equal(mkdir(w->dest, 0755), 0);
        assert_int_equal(mkdir(w->victim, 0755), 0);
        char keep[128];
        snprintf(keep, sizeof(keep), "%s/keep", w->victim);
        assert_int_equal(core_write_file_atomic(keep, "original", 8, 0644), 0);
        *state = w;
        return 0;
}

static int world_teardown(void **state) {
        world *w = *state;
        assert_int_equal(core_rm_rf(w->top), 0);
        free(w);
        return 0;
}

static void write_tar(const char *path, int filter, const member *m, size_t n) {
        struct archive *a = archive_write_new();
        assert_non_null(a);
        if (filter != ARCHIVE_FILTER_NONE)
                assert_int_equal(archive_write_add_filter(a, filter), ARCHIVE_OK);
        assert_int_equal(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
        for (size_t i = 0; i < n; i++) {
                struct archive_entry *e = archive_entry_new();
                archive_entry_set_pathname(e, m[i].name);
                size_t size = m[i].zeros ? m[i].zeros : m[i].data ? strlen(m[i].data) : 0;
                if (m[i].hardlink) {
                        archive_entry_set_filetype(e, AE_IFREG);
                        archive_entry_set_hardlink(e, m[i].hardlink);
                        size = 0;
                } else
                        archive_entry_set_filetype(e, m[i].type);
                archive_entry_set_perm(e, m[i].mode ? m[i].mode : 0644);
                archive_entry_set_uid(e, 0);
                archive_entry_set_gid(e, 0);
                archive_entry_set_mtime(e, 1700000000, 0);
                if (m[i].link)
                        archive_entry_set_symlink(e, m[i].link);
                if (m[i].type == AE_IFCHR)
                        archive_entry_set_rdev(e, makedev(1, 3));
                archive_entry_set_size(e, (la_int64_t)size);
                assert_int_equal(archive_write_header(a, e), ARCHIVE_OK);
                if (m[i].zeros) {
                        char *z = calloc(1, m[i].zeros);
                        assert_int_equal(archive_write_data(a, z, m[i].zeros), (la_ssize_t)m[i].zeros);
                        free(z);
                } else if (size)
                        assert_int_equal(archive_write_data(a, m[i].data, size), (la_ssize_t)size);
                archive_entry_free(e);
        }
        assert_int_equal(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
}

static char *read_at(const char *dir, const char *rel) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", dir, rel);
        char *data = NULL;
        size_t len;
        return core_read_file(p, 1 << 20, &data, &len) < 0 ? NULL : data;
}

static bool exists_at(const char *dir, const char *rel) {
        char p[512];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", dir, rel);
        return lstat(p, &st) == 0;
}

static void assert_victim_untouched(const world *w) {
        char *keep = read_at(w->victim, "keep");
        assert_non_null(keep);
        assert_string_equal(keep, "original");
        free(keep);
        _cleanup_closedir_ DIR *d = opendir(w->victim);
        assert_non_null(d);
        int n = 0;
        for (struct dirent *de; (de = readdir(d));)
                n += de->d_name[0] != '.';
        assert_int_equal(n, 1);
}

/* Extracts w->tar and asserts the extraction was refused with a message
 * naming `who`. */
static void assert_refused(const world *w, const char *who) {
        sb_error *err = NULL;
        int r = core_source_tarball_extract(w->tar, w->dest, UID, GID, CAP, TEST_ROOTS, &err);
        assert_true(r < 0);
        assert_non_null(err);
        assert_string_equal(err->reason, "source_failed");
        if (!strstr(err->message, who))
                fail_msg("message '%s' does not name '%s'", err->message, who);
        sb_error_free(err);
}

static void assert_owner(const char *dir, const char *rel) {
        char p[512];
        struct stat st;
        snprintf(p, sizeof(p), "%s/%s", dir, rel);
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(st.st_uid, UID);
        assert_int_equal(st.st_gid, GID);
}

/* ---- git URL checks ------------------------------------------------------- */

static void test_git_url_check_accepts_https_http_git_file(void **state) {
        const char *ok[] = {"https://example.com/repo.git", "http://example.com:8080/a/b",
                            "git://example.com/repo",       "file:///srv/repo.git",
                            "HTTPS://user@example.com/r",   "https://[::1]:8443/r.git",
                            "file://localhost/srv/r"};
        for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
                sb_error *err = NULL;
                if (core_git_url_check(ok[i], &err) != 0)
                        fail_msg("'%s' refused: %s", ok[i], err ? err->message : "?");
        }
}

static void assert_url_refused(const char *url, const char *needle) {
        sb_error *err = NULL;
        assert_int_equal(core_git_url_check(url, &err), -EINVAL);
        assert_non_null(err);
        assert_string_equal(err->reason, "source_failed");
        assert_string_equal(err->field, "source.url");
        assert_true(strncmp(err->message, "source.url: ", 12) == 0);
        if (!strstr(err->message, needle))
                fail_msg("'%s': message '%s' lacks '%s'", url, err->message, needle);
        sb_error_free(err);
}

static void test_git_url_check_refuses_transports_that_run_programs(void **state) {
        assert_url_refused("ext::sh -c touch% /tmp/p", "transport 'ext::' is not allowed");
        assert_url_refused("fd::17", "transport 'fd::'");
        assert_url_refused("ssh://host/x", "scheme 'ssh' is not allowed; use https, http, git or file");
        assert_url_refused("ftp://host/x", "scheme 'ftp'");
}

static void test_git_url_check_refuses_option_injection(void **state) {
        assert_url_refused("--upload-pack=touch /tmp/p", "starts with '-'");
        assert_url_refused("-oProxyCommand=x", "starts with '-'");
        assert_url_refused("ssh://-oProxyCommand=touch%20/tmp/p/x", "scheme 'ssh'");
        assert_url_refused("git://-host/x", "host starts with '-'");
        assert_url_refused("https://-user@host/x", "user part");
        assert_url_refused("https://host/-x", "path starts with '-'");
}

static void test_git_url_check_refuses_scp_like_and_malformed(void **state) {
        assert_url_refused("host:path", "scp-like");
        assert_url_refused("user@host:repo.git", "scp-like");
        assert_url_refused("/srv/repo", "not a URL");
        assert_url_refused("https://ho st/x", "space");
        assert_url_refused("https://host\t/x", "control");
        assert_url_refused("https://%2Dhost/x", "not allowed");
        assert_url_refused("https:///x", "no host");
        assert_url_refused("https://host", "no repository path");
        assert_url_refused("file://otherhost/srv/r", "must be local");
        assert_url_refused("", "empty");
}

/* ---- tarball location checks ---------------------------------------------- */

static void test_tarball_location_check_accepts_paths_and_http_file_urls(void **state) {
        assert_int_equal(core_tarball_location_check("/srv/a.tar.gz", NULL), 0);
        assert_int_equal(core_tarball_location_check("file:///srv/a.tar.gz", NULL), 0);
        assert_int_equal(core_tarball_location_check("https://example.com/a.tgz", NULL), 0);
        assert_int_equal(core_tarball_location_check("http://127.0.0.1:8080/a.tgz", NULL), 0);

        const char *bad[] = {"relative/a.tar",
                             "ftp://example.com/a.tar",
                             "file://other/a.tar",
                             "https://exa mple.com/a",
                             "",
                             "git://example.com/a"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                sb_error *err = NULL;
                assert_int_equal(core_tarball_location_check(bad[i], &err), -EINVAL);
                assert_non_null(err);
                assert_string_equal(err->field, "source.url");
                sb_error_free(err);
        }
}

/* ---- tarball extraction --------------------------------------------------- */

static const member good[] = {
        {"./dir/", AE_IFDIR, 0755},
        {"./dir/file", AE_IFREG, 0640, "hello\n"},
        {"dir/sub/deep.txt", AE_IFREG, 0644, "deep"},
        {"link", AE_IFLNK, 0777, NULL, "dir/file"},
        {"hard", 0, 0, NULL, NULL, "dir/file"},
};

static void extract_and_check(world *w, int filter) {
        write_tar(w->tar, filter, good, ELEMENTSOF(good));
        sb_error *err = NULL;
        int r = core_source_tarball_extract(w->tar, w->dest, UID, GID, CAP, TEST_ROOTS, &err);
        if (r < 0)
                fail_msg("extract failed: %s", err ? err->message : "?");
        char *s = read_at(w->dest, "dir/file");
        assert_non_null(s);
        assert_string_equal(s, "hello\n");
        free(s);
        assert_non_null(s = read_at(w->dest, "link"));
        assert_string_equal(s, "hello\n");
        free(s);
        assert_non_null(s = read_at(w->dest, "hard"));
        assert_string_equal(s, "hello\n");
        free(s);
        assert_non_null(s = read_at(w->dest, "dir/sub/deep.txt"));
        assert_string_equal(s, "deep");
        free(s);
        const char *owned[] = {".", "dir", "dir/file", "dir/sub", "dir/sub/deep.txt", "link", "hard"};
        for (size_t i = 0; i < ELEMENTSOF(owned); i++)
                assert_owner(w->dest, owned[i]);
        struct stat st;
        char p[256];
        snprintf(p, sizeof(p), "%s/dir/file", w->dest);
        assert_int_equal(stat(p, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0640);
        assert_int_equal(st.st_mtime, 1700000000);
}

static void test_tarball_gzip_extracts_content_owned_by_sandbox_user(void **state) {
        extract_and_check(*state, ARCHIVE_FILTER_GZIP);
}
static void test_tarball_xz_extracts_content_owned_by_sandbox_user(void **state) {
        extract_and_check(*state, ARCHIVE_FILTER_XZ);
}
static void test_tarball_zstd_extracts_content_owned_by_sandbox_user(void **state) {
        extract_and_check(*state, ARCHIVE_FILTER_ZSTD);
}

static void test_tarball_file_url_extracts(void **state) {
        world *w = *state;
        write_tar(w->tar, ARCHIVE_FILTER_BZIP2, good, ELEMENTSOF(good));
        char url[160];
        snprintf(url, sizeof(url), "file://%s", w->tar);
        assert_int_equal(core_source_tarball_extract(url, w->dest, UID, GID, CAP, TEST_ROOTS, NULL), 0);
        assert_true(exists_at(w->dest, "dir/sub/deep.txt"));
}

static void test_tarball_dotdot_member_is_refused_and_nothing_lands_outside(void **state) {
        world *w = *state;
        const member m[] = {{"ok", AE_IFREG, 0644, "ok"},
                            {"../victim/keep", AE_IFREG, 0644, "pwned"},
                            {"../victim/new", AE_IFREG, 0644, "pwned"}};
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, m, ELEMENTSOF(m));
        assert_refused(w, "member '../victim/keep' refused: '..' component");
        assert_victim_untouched(w);
}

static void test_tarball_absolute_member_is_refused(void **state) {
        world *w = *state;
        char abs[160];
        snprintf(abs, sizeof(abs), "%s/new", w->victim);
        const member m[] = {{abs, AE_IFREG, 0644, "pwned"}};
        write_tar(w->tar, ARCHIVE_FILTER_NONE, m, ELEMENTSOF(m));
        assert_refused(w, "absolute name");
        assert_refused(w, abs);
        assert_victim_untouched(w);
        assert_false(exists_at(w->dest, abs + 1));
}

static void test_tarball_symlink_then_member_through_it_lands_nowhere_outside(void **state) {
        world *w = *state;
        /* dest is /tmp/test-source-X/dest, so ../../.. is the host's "/". */
        char escape[64];
        snprintf(escape, sizeof(escape), "sbx-test-escape-%d", (int)getpid());
        char through[96];
        snprintf(through, sizeof(through), "lnk/%s", escape);
        const member m[] = {{"lnk", AE_IFLNK, 0777, NULL, "../../.."},
                            {through, AE_IFREG, 0644, "pwned"},
                            {"vl", AE_IFLNK, 0777, NULL, "../victim"},
                            {"vl/keep", AE_IFREG, 0644, "pwned"},
                            {"vl/new", AE_IFREG, 0644, "pwned"}};
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, m, ELEMENTSOF(m));
        assert_refused(w, through);
        assert_false(exists_at("/", escape));
        assert_false(exists_at(w->top, escape));
        /* Same for the victim directory, on its own. */
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, m + 2, 3);
        assert_refused(w, "vl/keep");
        assert_victim_untouched(w);
}

static void test_tarball_hardlink_to_outside_then_rewrite_leaves_victim_unchanged(void **state) {
        world *w = *state;
        const member m[] = {{"h", 0, 0, NULL, NULL, "../victim/keep"}, {"h", AE_IFREG, 0644, "pwned"}};
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, m, ELEMENTSOF(m));
        assert_refused(w, "member 'h' refused: hardlink target '../victim/keep'");
        assert_victim_untouched(w);

        /* An absolute target is as bad; inside the chroot it would be dest's own. */
        char abs[160];
        snprintf(abs, sizeof(abs), "%s/keep", w->victim);
        const member a[] = {{"h2", 0, 0, NULL, NULL, abs}, {"h2", AE_IFREG, 0644, "pwned"}};
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, a, ELEMENTSOF(a));
        assert_refused(w, "member 'h2' refused");
        assert_victim_untouched(w);
}

static void test_tarball_device_nodes_and_fifos_are_skipped(void **state) {
        world *w = *state;
        const member m[] = {
                {"null", AE_IFCHR, 0666}, {"fifo", AE_IFIFO, 0644}, {"after", AE_IFREG, 0644, "x"}};
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, m, ELEMENTSOF(m));
        assert_int_equal(core_source_tarball_extract(w->tar, w->dest, UID, GID, CAP, TEST_ROOTS, NULL), 0);
        assert_false(exists_at(w->dest, "null"));
        assert_false(exists_at(w->dest, "fifo"));
        assert_true(exists_at(w->dest, "after"));
}

static void test_tarball_setuid_setgid_sticky_bits_are_dropped(void **state) {
        world *w = *state;
        const member m[] = {{"suid", AE_IFREG, 04755, "#!/bin/sh\n"},
                            {"sgid", AE_IFREG, 02755, "#!/bin/sh\n"},
                            {"sticky", AE_IFDIR, 01777}};
        write_tar(w->tar, ARCHIVE_FILTER_XZ, m, ELEMENTSOF(m));
        assert_int_equal(core_source_tarball_extract(w->tar, w->dest, UID, GID, CAP, TEST_ROOTS, NULL), 0);
        const struct {
                const char *name;
                unsigned mode;
        } want[] = {{"suid", 0755}, {"sgid", 0755}, {"sticky", 0777}};
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                char p[256];
                struct stat st;
                snprintf(p, sizeof(p), "%s/%s", w->dest, want[i].name);
                assert_int_equal(stat(p, &st), 0);
                assert_int_equal(st.st_mode & 07777, want[i].mode);
                assert_int_equal(st.st_uid, UID);
        }
}

static void test_tarball_over_size_limit_is_refused(void **state) {
        world *w = *state;
        /* 4 MiB of zeros compresses to a few KiB: the cap must see the
         * unpacked size, not only the archive's. */
        const member m[] = {{"zeros", AE_IFREG, 0644, NULL, NULL, NULL, 4 << 20}};
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, m, ELEMENTSOF(m));
        sb_error *err = NULL;
        assert_int_equal(core_source_tarball_extract(w->tar, w->dest, UID, GID, 1 << 20, TEST_ROOTS, &err), -EFBIG);
        assert_non_null(strstr(err->message, "exceeds the limit"));
        sb_error_free(err);
        err = NULL;
        assert_int_equal(core_source_tarball_extract(w->tar, w->dest, UID, GID, 100, TEST_ROOTS, &err), -EFBIG);
        assert_string_equal(err->field, "source.path");
        sb_error_free(err);
}

/* A FIFO (or device) named as the tarball must be refused at once, never
 * opened: opening a FIFO blocks until a writer appears. alarm() turns a hang
 * into a failure. */
static void test_tarball_path_to_fifo_or_device_is_refused_without_opening(void **state) {
        world *w = *state;
        char fifo[160];
        snprintf(fifo, sizeof(fifo), "%s/fifo", w->top);
        assert_int_equal(mkfifo(fifo, 0644), 0);
        const char *paths[] = {fifo, "/dev/zero"};
        for (size_t i = 0; i < 2; i++) {
                sb_error *err = NULL;
                alarm(5);
                assert_int_equal(core_source_tarball_extract(paths[i], w->dest, UID, GID, CAP, TEST_ROOTS, &err), -EINVAL);
                alarm(0);
                assert_non_null(strstr(err->message, "not a regular file"));
                sb_error_free(err);
        }
        unlink(fifo);
}

/* Source URLs never reach link-local (metadata), unspecified or multicast
 * addresses: not by name, not by literal, not through a redirect. */
static void test_source_urls_to_metadata_and_other_forbidden_addresses_are_refused(void **state) {
        world *w = *state;
        static const char *const bad[] = {
                "http://169.254.169.254/latest/meta-data", "https://169.254.0.1/x.tar",
                "git://[fe80::1]/repo.git", "http://0.0.0.0/x", "http://[::ffff:169.254.169.254]/x",
                "http://224.0.0.1/x",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                sb_error *err = NULL;
                assert_int_equal(core_source_host_check(bad[i], &err), -EACCES);
                assert_string_equal(err->field, "source.url");
                assert_non_null(strstr(err->message, "refusing"));
                sb_error_free(err);
        }
        static const char *const allowed[] = {"http://127.0.0.1/x", "git://203.0.113.9/r.git", "/tmp/x.tar",
                                           "file:///tmp/x.tar", "https://[::1]:8443/x"};
        for (size_t i = 0; i < ELEMENTSOF(allowed); i++) {
                sb_error *err = NULL;
                assert_int_equal(core_source_host_check(allowed[i], &err), 0);
                assert_null(err);
        }
        /* The download path checks the address it dials, too. */
        sb_error *err = NULL;
        assert_int_equal(core_source_tarball_extract("http://169.254.169.254/x.tar", w->dest, UID, GID, CAP, TEST_ROOTS, &err),
                         -EACCES);
        assert_non_null(strstr(err->message, "link-local"));
        sb_error_free(err);
}

static void test_tarball_garbage_and_missing_file_fail_with_message(void **state) {
        world *w = *state;
        assert_int_equal(core_write_file_atomic(w->tar, "not a tarball at all", 20, 0644), 0);
        sb_error *err = NULL;
        assert_true(core_source_tarball_extract(w->tar, w->dest, UID, GID, CAP, TEST_ROOTS, &err) < 0);
        assert_string_equal(err->reason, "source_failed");
        sb_error_free(err);
        err = NULL;
        char missing[128];
        snprintf(missing, sizeof(missing), "%s/missing.tar", w->top);
        assert_int_equal(core_source_tarball_extract(missing, w->dest, UID, GID, CAP, TEST_ROOTS, &err), -ENOENT);
        assert_non_null(strstr(err->message, "missing.tar"));
        sb_error_free(err);
}

/* ---- tarball over http (loopback server in a thread) ---------------------- */

typedef struct http_server {
        int fd;
        int port;
        const char *tar_path; /* served at /ok.tgz */
        pthread_t thread;
        int auth_requests;   /* requests under /auth/, answered 401 */
        bool saw_basic_auth; /* one of them carried an Authorization header */
} http_server;

static void http_reply(int c, const http_server *srv, const char *path) {
        char head[512];
        if (streq(path, "/ok.tgz")) {
                char *body = NULL;
                size_t len = 0;
                assert_int_equal(core_read_file(srv->tar_path, 1 << 24, &body, &len), 0);
                int n = snprintf(head, sizeof(head),
                                 "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", len);
                assert_int_equal(write(c, head, (size_t)n), n);
                assert_int_equal(write(c, body, len), (ssize_t)len);
                free(body);
                return;
        }
        int n;
        if (streq(path, "/redir"))
                n = snprintf(head, sizeof(head),
                             "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/ok.tgz\r\n"
                             "Content-Length: 0\r\nConnection: close\r\n\r\n",
                             srv->port);
        else if (streq(path, "/tofile"))
                n = snprintf(head, sizeof(head),
                             "HTTP/1.1 302 Found\r\nLocation: file://%s\r\n"
                             "Content-Length: 0\r\nConnection: close\r\n\r\n",
                             srv->tar_path);
        else if (strncmp(path, "/auth/", 6) == 0)
                n = snprintf(head, sizeof(head),
                             "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"t\"\r\n"
                             "Content-Length: 0\r\nConnection: close\r\n\r\n");
        else if (streq(path, "/loop"))
                n = snprintf(head, sizeof(head),
                             "HTTP/1.1 302 Found\r\nLocation: /loop\r\n"
                             "Content-Length: 0\r\nConnection: close\r\n\r\n");
        else
                n = snprintf(head, sizeof(head),
                             "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        assert_int_equal(write(c, head, (size_t)n), n);
}

/* Serves one request per connection until the listening socket is shut
 * down by http_stop(). */
static void *http_main(void *p) {
        http_server *srv = p;
        for (;;) {
                int c = accept4(srv->fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        return NULL;
                char req[4096];
                size_t got = 0;
                while (got < sizeof(req) - 1 && !memmem(req, got, "\r\n\r\n", 4)) {
                        ssize_t r = read(c, req + got, sizeof(req) - 1 - got);
                        if (r <= 0)
                                break;
                        got += (size_t)r;
                }
                req[got] = 0;
                char path[256] = "";
                if (sscanf(req, "GET %255s ", path) == 1) {
                        if (strncmp(path, "/auth/", 6) == 0) {
                                srv->auth_requests++;
                                srv->saw_basic_auth |= strcasestr(req, "\nAuthorization: Basic ") != NULL;
                        }
                        http_reply(c, srv, path);
                }
                close(c);
        }
}

static void http_start(http_server *srv, const char *tar_path) {
        srv->tar_path = tar_path;
        srv->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(srv->fd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t alen = sizeof(a);
        assert_int_equal(bind(srv->fd, (struct sockaddr *)&a, sizeof(a)), 0);
        assert_int_equal(listen(srv->fd, 8), 0);
        assert_int_equal(getsockname(srv->fd, (struct sockaddr *)&a, &alen), 0);
        srv->port = ntohs(a.sin_port);
        assert_int_equal(pthread_create(&srv->thread, NULL, http_main, srv), 0);
}

static void http_stop(http_server *srv) {
        /* Wakes the blocked accept() with EINVAL. */
        shutdown(srv->fd, SHUT_RDWR);
        pthread_join(srv->thread, NULL);
        close(srv->fd);
}

static int http_extract(const world *w, const http_server *srv, const char *path, uint64_t cap,
                        sb_error **err) {
        char url[128];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", srv->port, path);
        return core_source_tarball_extract(url, w->dest, UID, GID, cap, TEST_ROOTS, err);
}

static void test_tarball_http_download_follows_http_redirects_only(void **state) {
        world *w = *state;
        write_tar(w->tar, ARCHIVE_FILTER_GZIP, good, ELEMENTSOF(good));
        http_server srv = {0};
        http_start(&srv, w->tar);
        sb_error *err = NULL;
        int r = http_extract(w, &srv, "/redir", CAP, &err);
        if (r < 0)
                fail_msg("http extract failed: %s", err ? err->message : "?");
        assert_true(exists_at(w->dest, "dir/sub/deep.txt"));
        assert_owner(w->dest, "dir/file");

        /* A redirect to file:// must not make the daemon read a host file. */
        assert_true(http_extract(w, &srv, "/tofile", CAP, &err) < 0);
        assert_non_null(strstr(err->message, "download: "));
        sb_error_free(err);
        err = NULL;
        assert_true(http_extract(w, &srv, "/loop", CAP, &err) < 0);
        assert_non_null(strstr(err->message, "redirect"));
        sb_error_free(err);
        err = NULL;
        assert_true(http_extract(w, &srv, "/missing", CAP, &err) < 0);
        assert_non_null(strstr(err->message, "404"));
        sb_error_free(err);
        err = NULL;
        assert_int_equal(http_extract(w, &srv, "/ok.tgz", 64, &err), -EFBIG);
        assert_non_null(strstr(err->message, "larger than the limit"));
        sb_error_free(err);
        http_stop(&srv);
}

/* ---- git clone ------------------------------------------------------------ */

_printf_(1, 2) static void sh(const char *fmt, ...) {
        char *cmd = NULL;
        va_list ap;
        va_start(ap, fmt);
        assert_true(vasprintf(&cmd, fmt, ap) >= 0);
        va_end(ap);
        int r = system(cmd);
        if (r != 0)
                fail_msg("command failed (%d): %s", r, cmd);
        free(cmd);
}

#define GIT "git -c user.name=t -c user.email=t@example.com -c init.defaultBranch=main "

/* A repository at top/src: commit 1 (a.txt "one", tag v1), commit 2 (a.txt
 * "two") on main, a branch "feature" with b.txt, and a post-checkout hook
 * that would create top/hook-ran if anything ran it. */
static void make_repo(const world *w) {
        sh(GIT "init -q %s/src", w->top);
        sh("cd %s/src && echo one > a.txt && " GIT "add a.txt && " GIT "commit -q -m one && " GIT
           "tag v1 && " GIT "rev-parse HEAD > ../first-sha",
           w->top);
        sh("cd %s/src && " GIT "checkout -q -b feature && echo b > b.txt && " GIT "add b.txt && " GIT
           "commit -q -m b && " GIT "checkout -q main && echo two > a.txt && " GIT "commit -q -am two",
           w->top);
        sh("printf '#!/bin/sh\\ntouch %s/hook-ran\\n' > %s/src/.git/hooks/post-checkout && "
           "chmod 755 %s/src/.git/hooks/post-checkout",
           w->top, w->top, w->top);
}

/* depth 1: the git program; 0: libgit2 (full history). */
static unsigned clone_depth = 1;

static void clone_ok(const world *w, const char *revision) {
        char url[160];
        snprintf(url, sizeof(url), "file://%s/src", w->top);
        core_git_source src = {.local_roots = TEST_ROOTS, .url = url, .revision = revision, .depth = clone_depth};
        sb_error *err = NULL;
        int r = core_source_git_clone(&src, w->dest, UID, GID, &err);
        if (r < 0)
                fail_msg("clone failed: %s", err ? err->message : "?");
}

static void test_git_clone_file_repo_at_head_owned_by_sandbox_user(void **state) {
        world *w = *state;
        make_repo(w);
        clone_ok(w, NULL);
        char *s = read_at(w->dest, "a.txt");
        assert_non_null(s);
        assert_string_equal(s, "two\n");
        free(s);
        assert_false(exists_at(w->dest, "b.txt"));
        assert_owner(w->dest, "a.txt");
        assert_owner(w->dest, ".git");
        assert_owner(w->dest, ".git/HEAD");
        /* depth = 1: only the tip (the git program makes shallow clones). */
        sh("test \"$(git -C %s -c safe.directory='*' rev-list --count HEAD)\" = 1", w->dest);
        sh("test -f %s/.git/shallow", w->dest);
}

static void test_git_clone_without_depth_has_full_history_and_runs_no_hook(void **state) {
        world *w = *state;
        make_repo(w);
        clone_depth = 0;
        clone_ok(w, NULL);
        sh("git -C %s -c safe.directory='*' cat-file -e v1^{commit}", w->dest);
        assert_owner(w->dest, "a.txt");
        assert_int_equal(core_rm_rf(w->dest), 0);
        assert_int_equal(mkdir(w->dest, 0755), 0);
        clone_ok(w, "v1");
        clone_depth = 1;
        char *s = read_at(w->dest, "a.txt");
        assert_string_equal(s, "one\n");
        free(s);
        assert_false(exists_at(w->top, "hook-ran"));
}

static void test_git_clone_checks_out_tag_sha_and_branch(void **state) {
        world *w = *state;
        make_repo(w);
        clone_ok(w, "v1");
        char *s = read_at(w->dest, "a.txt");
        assert_string_equal(s, "one\n");
        free(s);

        char *sha = read_at(w->top, "first-sha");
        assert_non_null(sha);
        sha[strcspn(sha, "\n")] = 0;
        assert_int_equal(core_rm_rf(w->dest), 0);
        assert_int_equal(mkdir(w->dest, 0755), 0);
        clone_ok(w, sha);
        free(sha);
        assert_string_equal(s = read_at(w->dest, "a.txt"), "one\n");
        free(s);

        assert_int_equal(core_rm_rf(w->dest), 0);
        assert_int_equal(mkdir(w->dest, 0755), 0);
        clone_ok(w, "feature");
        assert_string_equal(s = read_at(w->dest, "b.txt"), "b\n");
        free(s);
        assert_owner(w->dest, "b.txt");
}

static void test_git_clone_never_runs_hooks(void **state) {
        world *w = *state;
        make_repo(w);
        /* The hook works when git itself checks out in the source repo... */
        sh("cd %s/src && git checkout -q v1 && git checkout -q main", w->top);
        assert_true(exists_at(w->top, "hook-ran"));
        sh("rm %s/hook-ran", w->top);
        /* ...but neither a clone's checkout nor a checkout of a revision
         * after it may run it. */
        clone_ok(w, NULL);
        assert_false(exists_at(w->top, "hook-ran"));
        assert_int_equal(core_rm_rf(w->dest), 0);
        assert_int_equal(mkdir(w->dest, 0755), 0);
        clone_ok(w, "v1");
        assert_false(exists_at(w->top, "hook-ran"));
}

static void test_git_clone_unknown_revision_and_missing_repo_fail_with_message(void **state) {
        world *w = *state;
        make_repo(w);
        char url[160];
        snprintf(url, sizeof(url), "file://%s/src", w->top);
        core_git_source src = {.local_roots = TEST_ROOTS, .url = url, .revision = "no-such-rev"};
        sb_error *err = NULL;
        assert_true(core_source_git_clone(&src, w->dest, UID, GID, &err) < 0);
        assert_string_equal(err->reason, "source_failed");
        assert_non_null(strstr(err->message, "resolve revision"));
        sb_error_free(err);

        assert_int_equal(core_rm_rf(w->dest), 0);
        assert_int_equal(mkdir(w->dest, 0755), 0);
        snprintf(url, sizeof(url), "file://%s/nope", w->top);
        core_git_source missing = {.local_roots = TEST_ROOTS, .url = url};
        err = NULL;
        assert_true(core_source_git_clone(&missing, w->dest, UID, GID, &err) < 0);
        assert_non_null(strstr(err->message, "nope"));
        sb_error_free(err);

        core_git_source bad = {.url = "ext::sh -c touch% /tmp/p"};
        err = NULL;
        assert_int_equal(core_source_git_clone(&bad, w->dest, UID, GID, &err), -EINVAL);
        assert_string_equal(err->field, "source.url");
        sb_error_free(err);
}

static void test_git_clone_runs_as_sandbox_user_so_unreadable_repo_fails(void **state) {
        world *w = *state;
        make_repo(w);
        /* Root could read it; the sandbox user cannot, and neither can the clone. */
        sh("chmod 700 %s/src", w->top);
        char url[160];
        snprintf(url, sizeof(url), "file://%s/src", w->top);
        core_git_source src = {.local_roots = TEST_ROOTS, .url = url};
        sb_error *err = NULL;
        assert_true(core_source_git_clone(&src, w->dest, UID, GID, &err) < 0);
        assert_non_null(err);
        sb_error_free(err);
}

static void test_git_clone_offers_credentials_once_and_never_reports_them(void **state) {
        world *w = *state;
        http_server srv = {0};
        http_start(&srv, w->tar);
        char url[128];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/auth/repo.git", srv.port);
        core_git_source src = {.local_roots = TEST_ROOTS, .url = url, .username = "u", .password = "s3cret-token"};
        sb_error *err = NULL;
        int r = core_source_git_clone(&src, w->dest, UID, GID, &err);
        http_stop(&srv);
        assert_true(r < 0);
        assert_string_equal(err->reason, "source_failed");
        assert_null(strstr(err->message, "s3cret-token"));
        /* One anonymous request, one with the credentials, then give up. */
        assert_int_equal(srv.auth_requests, 2);
        assert_true(srv.saw_basic_auth);
        sb_error_free(err);
}

/* ---- local sources: localSourceRoots, symlinks, alternates ------------------ */

static int clone_local(const world *w, const char *const *roots, const char *rel, sb_error **err) {
        char url[200];
        snprintf(url, sizeof(url), "file://%s/%s", w->top, rel);
        core_git_source src = {.local_roots = roots, .url = url};
        return core_source_git_clone(&src, w->dest, UID, GID, err);
}

static void assert_local_refused(int r, sb_error *err, int code, const char *says) {
        assert_int_equal(r, code);
        assert_non_null(err);
        if (!strstr(err->message, says))
                fail_msg("'%s' does not say '%s'", err->message, says);
        sb_error_free(err);
}

/* `call` fills `err` (declared here): evaluated before the checks. */
#define REFUSED(call, code, says)                                \
        do {                                                     \
                sb_error *err = NULL;                            \
                int r_ = (call);                                 \
                assert_local_refused(r_, err, code, says);       \
        } while (0)

static void test_local_sources_are_refused_outside_roots_and_by_default(void **state) {
        world *w = *state;
        make_repo(w);
        REFUSED(clone_local(w, NULL, "src", &err), -EACCES, "localSourceRoots");
        static const char *const other[] = {"/var/empty-root-of-nothing", NULL};
        REFUSED(clone_local(w, other, "src", &err), -EACCES, "not under a directory listed");
        write_tar(w->tar, ARCHIVE_FILTER_NONE, (member[]){{.name = "a", .type = AE_IFREG, .data = "a"}}, 1);
        REFUSED(core_source_tarball_extract(w->tar, w->dest, UID, GID, CAP, NULL, &err), -EACCES, "localSourceRoots");
        char dotdot[200];
        snprintf(dotdot, sizeof(dotdot), "%s/../../etc/passwd", w->top);
        REFUSED(core_source_tarball_extract(dotdot, w->dest, UID, GID, CAP, TEST_ROOTS, &err), -EINVAL, "'..'");
}

static void test_local_sources_through_a_symlink_are_refused(void **state) {
        world *w = *state;
        make_repo(w);
        write_tar(w->tar, ARCHIVE_FILTER_NONE, (member[]){{.name = "a", .type = AE_IFREG, .data = "a"}}, 1);
        sh("ln -s %s/src %s/link && ln -s %s %s/tar-link", w->top, w->top, w->tar, w->top);
        REFUSED(clone_local(w, TEST_ROOTS, "link", &err), -ELOOP, "symlink");
        char p[200];
        snprintf(p, sizeof(p), "%s/tar-link", w->top);
        REFUSED(core_source_tarball_extract(p, w->dest, UID, GID, CAP, TEST_ROOTS, &err), -ELOOP, "symlink");
        /* A root that is itself reached through a symlink is refused too. */
        snprintf(p, sizeof(p), "%s/link", w->top);
        const char *const via_link[] = {p, NULL};
        char url[240];
        snprintf(url, sizeof(url), "file://%s/link", w->top);
        core_git_source src = {.local_roots = via_link, .url = url};
        REFUSED(core_source_git_clone(&src, w->dest, UID, GID, &err), -ELOOP, "symlink in its path");
}

/* Each link form a repository may use to make git read elsewhere. */
static void test_local_repo_made_of_links_is_refused(void **state) {
        world *w = *state;
        make_repo(w);
        static const struct {
                const char *setup;
                const char *says;
        } cases[] = {
                {"git clone -q --bare src b1 && rm -rf b1/objects && ln -s ../src/.git/objects b1/objects", "symlink"},
                {"git clone -q --bare src b2 && rm -rf b2/refs && ln -s ../src/.git/refs b2/refs", "symlink"},
                {"git clone -q --bare src b3 && rm b3/HEAD && ln -s ../src/.git/HEAD b3/HEAD", "symlink"},
                {"git clone -q --bare src b4 && rm b4/config && ln -s ../src/.git/config b4/config", "symlink"},
                {"git clone -q --bare src b5 && git -C b5 pack-refs --all && rm b5/packed-refs && "
                 "ln -s ../src/.git/packed-refs b5/packed-refs", "symlink"},
                {"git init -q --bare b6 && echo \"$PWD/src/.git/objects\" > b6/objects/info/alternates && "
                 "cp src/.git/HEAD b6/ && cp -r src/.git/refs/heads b6/refs/", "alternates"},
                {"git init -q --bare b7 && echo \"$PWD/src/.git/objects\" > b7/objects/info/http-alternates",
                 "other object directories"},
                {"mkdir b8 && echo \"gitdir: $PWD/src/.git\" > b8/.git", "pointing elsewhere"},
                {"mkdir b9 && ln -s ../src/.git b9/.git", "symlink"},
                {"git clone -q --bare src b10 && mkdir -p b10/info && ln -s /etc/passwd b10/info/alternates",
                 "alternates"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                sh("cd %s && %s", w->top, cases[i].setup);
                char rel[8];
                snprintf(rel, sizeof(rel), "b%zu", i + 1);
                sb_error *err = NULL;
                int r = clone_local(w, TEST_ROOTS, rel, &err);
                if (r >= 0)
                        fail_msg("case %s (%s) was cloned", rel, cases[i].setup);
                assert_local_refused(r, err, -ELOOP, cases[i].says);
                assert_int_equal(core_rm_rf(w->dest), 0);
                assert_int_equal(mkdir(w->dest, 0755), 0);
        }
        /* The same bare clone without links clones, and names its origin. */
        sh("cd %s && git clone -q --bare src plain", w->top);
        sb_error *err = NULL;
        if (clone_local(w, TEST_ROOTS, "plain", &err) < 0)
                fail_msg("plain bare clone: %s", err ? err->message : "?");
        char *s = read_at(w->dest, "a.txt");
        assert_string_equal(s, "two\n");
        free(s);
        sh("git -C %s -c safe.directory='*' remote get-url origin | grep -qx 'file://%s/plain'", w->dest, w->top);
}

#define T(f) cmocka_unit_test_setup_teardown(f, world_setup, world_teardown)

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_git_url_check_accepts_https_http_git_file),
                cmocka_unit_test(test_git_url_check_refuses_transports_that_run_programs),
                cmocka_unit_test(test_git_url_check_refuses_option_injection),
                cmocka_unit_test(test_git_url_check_refuses_scp_like_and_malformed),
                cmocka_unit_test(test_tarball_location_check_accepts_paths_and_http_file_urls),
                T(test_tarball_gzip_extracts_content_owned_by_sandbox_user),
                T(test_tarball_xz_extracts_content_owned_by_sandbox_user),
                T(test_tarball_zstd_extracts_content_owned_by_sandbox_user),
                T(test_tarball_file_url_extracts),
                T(test_tarball_dotdot_member_is_refused_and_nothing_lands_outside),
                T(test_tarball_absolute_member_is_refused),
                T(test_tarball_symlink_then_member_through_it_lands_nowhere_outside),
                T(test_tarball_hardlink_to_outside_then_rewrite_leaves_victim_unchanged),
                T(test_tarball_device_nodes_and_fifos_are_skipped),
        T(test_tarball_path_to_fifo_or_device_is_refused_without_opening),
        T(test_source_urls_to_metadata_and_other_forbidden_addresses_are_refused),
                T(test_tarball_setuid_setgid_sticky_bits_are_dropped),
                T(test_tarball_over_size_limit_is_refused),
                T(test_tarball_garbage_and_missing_file_fail_with_message),
                T(test_tarball_http_download_follows_http_redirects_only),
                T(test_git_clone_file_repo_at_head_owned_by_sandbox_user),
                T(test_git_clone_without_depth_has_full_history_and_runs_no_hook),
                T(test_git_clone_checks_out_tag_sha_and_branch),
                T(test_git_clone_never_runs_hooks),
                T(test_git_clone_unknown_revision_and_missing_repo_fail_with_message),
                T(test_git_clone_runs_as_sandbox_user_so_unreadable_repo_fails),
                T(test_git_clone_offers_credentials_once_and_never_reports_them),
                T(test_local_sources_are_refused_outside_roots_and_by_default),
                T(test_local_sources_through_a_symlink_are_refused),
                T(test_local_repo_made_of_links_is_refused),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
