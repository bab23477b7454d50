/* Tarball sources: location checks, fetching (local file or http(s) via
 * libcurl into an anonymous temporary file) and contained extraction with
 * libarchive on a chrooted thread running as the sandbox user. Also owns the
 * confined-thread helper shared with source-git.c (source-internal.h). */
#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libcore/source-internal.h"
#include "libcore/source.h"
#include "libcore/util.h"

#define REASON "source_failed"

/* ---- confined helper thread ---------------------------------------------- */

typedef struct confined {
        int root_fd;
        uid_t uid;
        gid_t gid;
        source_fs_fn fn;
        void *userdata;
        int r;
        sb_error *err;
        const int *cancel;  /* the caller's core_cancel_bind(), carried over */
        core_source_address_guard guard; /* the caller's, carried over */
        core_source_progress_fn progress; /* the caller's, carried over */
        void *progress_userdata;
} confined;

/* Runs on the helper thread. Order matters: unshare(CLONE_FS) first so the
 * chroot and chdir below are private to this thread; chroot while we still
 * hold CAP_SYS_CHROOT; groups and fsgid before fsuid, because dropping fsuid
 * to non-zero clears the filesystem capabilities. */
static int confine_self(const confined *c, sb_error **ret_err) {
        if (unshare(CLONE_FS) < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, NULL, "unshare(CLONE_FS): %m");
        if (c->root_fd >= 0) {
                if (fchdir(c->root_fd) < 0 || chroot(".") < 0 || chdir("/") < 0)
                        return sb_error_set(ret_err, negative_errno(), REASON, NULL,
                                            "chroot into destination: %m");
        }
        /* Raw syscalls: glibc's wrappers for setgroups broadcast the change
         * to every thread of the daemon; the kernel's is per-thread. */
        gid_t groups[1] = {c->gid};
        if (syscall(SYS_setgroups, 1, groups) < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, NULL, "setgroups: %m");
        setfsgid(c->gid);
        setfsuid(c->uid);
        /* setfsuid/setfsgid report no error; read back to be sure. */
        if ((uid_t)setfsuid((uid_t)-1) != c->uid || (gid_t)setfsgid((gid_t)-1) != c->gid)
                return sb_error_set(ret_err, -EPERM, REASON, NULL, "could not switch to uid %u gid %u",
                                    (unsigned)c->uid, (unsigned)c->gid);
        return 0;
}

static void *confined_main(void *p) {
        confined *c = p;
        core_cancel_bind(c->cancel);
        core_source_set_address_guard(c->guard);
        core_source_set_progress(c->progress, c->progress_userdata);
        c->r = confine_self(c, &c->err);
        if (c->r >= 0)
                c->r = c->fn(c->userdata, &c->err);
        return NULL;
}

int source_run_confined(int root_fd, uid_t uid, gid_t gid, source_fs_fn fn, void *userdata,
                        sb_error **ret_err) {
        confined c = {.root_fd = root_fd, .uid = uid, .gid = gid, .fn = fn, .userdata = userdata,
                      .cancel = core_cancel_current(), .guard = core_source_get_address_guard()};
        c.progress = core_source_get_progress(&c.progress_userdata);
        pthread_t t;
        int r = pthread_create(&t, NULL, confined_main, &c);
        if (r != 0)
                return sb_error_set(ret_err, -r, REASON, NULL, "start helper thread: %s", strerror(r));
        pthread_join(t, NULL);
        if (c.r < 0 && c.err && ret_err && !*ret_err)
                *ret_err = TAKE_PTR(c.err);
        sb_error_free(c.err);
        return c.r < 0 ? c.r : 0;
}

int source_open_dest(const char *dest_dir, uid_t uid, gid_t gid, sb_error **ret_err) {
        _cleanup_close_ int fd = open(dest_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, NULL, "open destination '%s': %m",
                                    dest_dir);
        if (fchown(fd, uid, gid) < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, NULL, "chown destination '%s': %m",
                                    dest_dir);
        return TAKE_FD(fd);
}

/* ---- location checks ------------------------------------------------------ */

static bool has_control(const char *s) {
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || *s == 0x7f)
                        return true;
        return false;
}

static bool starts_with_ci(const char *s, const char *prefix) {
        return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

int source_file_url_path(const char *url, char **ret_path, sb_error **ret_err) {
        CURLU *u = curl_url();
        if (!u)
                return -ENOMEM;
        char *host = NULL, *path = NULL;
        int r = 0;
        if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
            curl_url_get(u, CURLUPART_PATH, &path, CURLU_URLDECODE) != CURLUE_OK)
                r = sb_error_set(ret_err, -EINVAL, REASON, "source.url",
                                 "source.url: malformed file:// URL");
        else if (curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host[0] &&
                 strcasecmp(host, "localhost") != 0)
                r = sb_error_set(ret_err, -EINVAL, REASON, "source.url",
                                 "source.url: file:// URL names host '%s'; only local files can be read "
                                 "(use file:///path)",
                                 host);
        else if (!path || path[0] != '/' || has_control(path))
                r = sb_error_set(ret_err, -EINVAL, REASON, "source.url",
                                 "source.url: file:// URL needs an absolute path");
        else if (!(*ret_path = strdup(path)))
                r = -ENOMEM;
        curl_free(host);
        curl_free(path);
        curl_url_cleanup(u);
        return r;
}

int core_tarball_location_check(const char *location, sb_error **ret_err) {
        if (!location || !location[0])
                return sb_error_set(ret_err, -EINVAL, REASON, "source.url",
                                    "source.url: empty tarball location; give an absolute path or an "
                                    "http(s):// or file:// URL");
        if (location[0] == '/') {
                if (has_control(location))
                        return sb_error_set(ret_err, -EINVAL, REASON, "source.path",
                                            "source.path: control characters are not allowed");
                return 0;
        }
        if (has_control(location) || strchr(location, ' '))
                return sb_error_set(ret_err, -EINVAL, REASON, "source.url",
                                    "source.url: spaces and control characters are not allowed in a URL");
        if (starts_with_ci(location, "file://")) {
                _cleanup_free_ char *path = NULL;
                return source_file_url_path(location, &path, ret_err);
        }
        if (starts_with_ci(location, "https://") || starts_with_ci(location, "http://")) {
                CURLU *u = curl_url();
                if (!u)
                        return -ENOMEM;
                CURLUcode rc = curl_url_set(u, CURLUPART_URL, location, 0);
                curl_url_cleanup(u);
                if (rc != CURLUE_OK)
                        return sb_error_set(ret_err, -EINVAL, REASON, "source.url",
                                            "source.url: malformed URL (%s)", curl_url_strerror(rc));
                return 0;
        }
        return sb_error_set(ret_err, -EINVAL, REASON, "source.url",
                            "source.url: unsupported tarball location; use an absolute path, file://, "
                            "http:// or https://");
}

/* ---- fetching ------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* An anonymous file for the download: O_TMPFILE never has a name, so a
 * crash leaves nothing behind; the mkostemp fallback unlinks at once. */
static int open_anon_tmp(void) {
        int fd = open("/var/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR))
                return fd >= 0 ? fd : negative_errno();
        char tmpl[] = "/var/tmp/sandboxd-tarball-XXXXXX";
        fd = mkostemp(tmpl, O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        unlink(tmpl);
        return fd;
}

typedef struct sink {
        int fd;
        uint64_t written, max;
        int err; /* negative errno of a failed write, or -EFBIG */
} sink;

static size_t sink_write(char *data, size_t size, size_t n, void *userdata) {
        sink *s = userdata;
        size_t len = size * n;
        if (s->written + len > s->max) {
                s->err = -EFBIG;
                return 0; /* makes libcurl abort with CURLE_WRITE_ERROR */
        }
        for (size_t off = 0; off < len;) {
                ssize_t w = write(s->fd, data + off, len - off);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        s->err = negative_errno();
                        return 0;
                }
                off += (size_t)w;
        }
        s->written += len;
        return len;
}

typedef struct guard {
        const char *refused;   /* why the last connect was refused, or NULL */
        char addr[INET6_ADDRSTRLEN];
} guard;

/* libcurl calls this often while data flows and about once a second
 * while a server stalls: a cancelled request stops the download within
 * that (CURLOPT_XFERINFOFUNCTION, nonzero aborts). It also reports the
 * download's progress (dltotal is 0 until the size is known). */
static int cancel_xferinfo(void *data, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
        (void)data, (void)ultotal, (void)ulnow;
        source_progress("downloading", dlnow > 0 ? (uint64_t)dlnow : 0, dltotal > 0 ? (uint64_t)dltotal : 0, 0, 0);
        return core_cancel_requested() ? 1 : 0;
}

static curl_socket_t guarded_socket(void *data, curlsocktype purpose, struct curl_sockaddr *a) {
        guard *g = data;
        const char *why = core_source_address_forbidden(&a->addr);
        if (why) {
                g->refused = why;
                const void *ip = a->family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&a->addr)->sin6_addr
                                                       : (const void *)&((struct sockaddr_in *)&a->addr)->sin_addr;
                inet_ntop(a->family, ip, g->addr, sizeof(g->addr));
                return CURL_SOCKET_BAD;
        }
        return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* Downloads url into fd. Redirects: at most 5, and only to http(s), so a
 * server cannot bounce us to file:// or another scheme. HTTP >= 400 fails. */
static int http_fetch(const char *url, int fd, uint64_t max_bytes, sb_error **ret_err) {
        pthread_once(&curl_once, curl_init_once);
        CURL *h = curl_easy_init();
        if (!h)
                return sb_error_set(ret_err, -ENOMEM, REASON, NULL, "download: cannot start libcurl");
        char errbuf[CURL_ERROR_SIZE] = "";
        sink s = {.fd = fd, .max = max_bytes};
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
        curl_easy_setopt(h, CURLOPT_FAILONERROR, 1L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_bytes);
        /* A stalled server must not pin a worker thread forever. */
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        /* Every connect, redirects included, is checked against the
         * forbidden ranges (no DNS-rebinding window: this is the address
         * actually dialled). */
        guard g = {0};
        curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, guarded_socket);
        curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, &g);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, cancel_xferinfo);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_cleanup(h);
        if (rc == CURLE_OK)
                return 0;
        if (rc == CURLE_ABORTED_BY_CALLBACK && core_cancel_requested())
                return sb_error_set(ret_err, -ECANCELED, "cancelled", NULL, "download: cancelled");
        if (g.refused)
                return sb_error_set(ret_err, -EACCES, REASON, "source.url",
                                    "source.url: refusing to download from %s (%s)", g.addr, g.refused);
        if (s.err == -EFBIG || rc == CURLE_FILESIZE_EXCEEDED)
                return sb_error_set(ret_err, -EFBIG, REASON, NULL,
                                    "download: tarball is larger than the limit of %llu bytes",
                                    (unsigned long long)max_bytes);
        if (s.err < 0)
                return sb_error_set(ret_err, s.err, REASON, NULL, "download: write temporary file: %s",
                                    strerror(-s.err));
        return sb_error_set(ret_err, -EIO, REASON, NULL, "download: %s",
                            errbuf[0] ? errbuf : curl_easy_strerror(rc));
}

static int open_local_here(const char *path, const char *field, const char *const *roots, uint64_t max_bytes,
                           sb_error **ret_err) {
        /* O_PATH first: opening a FIFO would block the worker (and the name,
         * and shutdown) forever, and opening a device can have side effects.
         * Only once it is known to be a plain file is it opened for reading,
         * through the same inode. The file is read by host root, so only
         * under the operator's localSourceRoots, never through a symlink
         * (source-local.c). */
        _cleanup_close_ int pfd = source_local_open(roots, path, O_PATH, field, ret_err);
        if (pfd < 0)
                return pfd;
        struct stat st;
        if (fstat(pfd, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, "source.path", "stat '%s': %m", path);
        if (!S_ISREG(st.st_mode))
                return sb_error_set(ret_err, -EINVAL, REASON, "source.path", "'%s' is not a regular file",
                                    path);
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", pfd);
        _cleanup_close_ int fd = open(proc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, "source.path", "open '%s': %m", path);
        if ((uint64_t)st.st_size > max_bytes)
                return sb_error_set(ret_err, -EFBIG, REASON, "source.path",
                                    "'%s' is larger than the limit of %llu bytes", path,
                                    (unsigned long long)max_bytes);
        return TAKE_FD(fd);
}

typedef struct local_open_call {
        const char *path, *field;
        const char *const *roots;
        uint64_t max_bytes;
        sb_error *err;
} local_open_call;

static int open_local_call(void *userdata) {
        local_open_call *c = userdata;
        return open_local_here(c->path, c->field, c->roots, c->max_bytes, &c->err);
}

/* The tarball at a local path: opened as the thread's local peer when one
 * is set (core_source_set_local_peer), so that a local user reads only
 * what it could itself; else as the daemon. */
static int open_local(const char *path, const char *field, const char *const *roots, uint64_t max_bytes,
                      sb_error **ret_err) {
        const core_peer *peer = source_local_peer();
        if (!peer)
                return open_local_here(path, field, roots, max_bytes, ret_err);
        local_open_call c = {.path = path, .field = field, .roots = roots, .max_bytes = max_bytes};
        int r = core_run_as_peer(peer, open_local_call, &c, ret_err);
        if (r < 0 && c.err && ret_err && !*ret_err)
                *ret_err = TAKE_PTR(c.err);
        sb_error_free(c.err);
        if (r == -EACCES && ret_err && *ret_err && !strstr((*ret_err)->message, "localSourceRoots"))
                sb_error_prefix(ret_err, "as uid %u (a local client reads only what it may)", (unsigned)peer->uid);
        return r;
}

/* Returns a readable fd positioned at the start of the tarball bytes. */
static int fetch_tarball(const char *location, const char *const *roots, uint64_t max_bytes,
                         sb_error **ret_err) {
        int r = core_tarball_location_check(location, ret_err);
        if (r < 0)
                return r;
        if (location[0] == '/')
                return open_local(location, "source.path", roots, max_bytes, ret_err);
        if (starts_with_ci(location, "file://")) {
                _cleanup_free_ char *path = NULL;
                r = source_file_url_path(location, &path, ret_err);
                return r < 0 ? r : open_local(path, "source.url", roots, max_bytes, ret_err);
        }
        _cleanup_close_ int fd = open_anon_tmp();
        if (fd < 0)
                return sb_error_set(ret_err, fd, REASON, NULL, "create temporary file in /var/tmp: %s",
                                    strerror(-fd));
        source_progress("downloading", 0, 0, 0, 0);
        r = http_fetch(location, fd, max_bytes, ret_err);
        if (r < 0)
                return r;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, NULL, "rewind download: %m");
        return TAKE_FD(fd);
}

/* ---- extraction ----------------------------------------------------------- */

DEFINE_TRIVIAL_CLEANUP_FUNC(struct archive, archive_read_free);
static inline void archive_write_freep(struct archive **a) {
        if (*a)
                archive_write_free(*a);
}

/* Why a member name is refused, or NULL when it is acceptable: absolute
 * names and ".." components could address paths outside the destination. A
 * leading "./" is harmless. */
static const char *bad_name_reason(const char *name) {
        if (!name || !name[0])
                return "empty name";
        if (name[0] == '/')
                return "absolute name";
        for (const char *p = name; *p;) {
                size_t len = strcspn(p, "/");
                if (len == 2 && p[0] == '.' && p[1] == '.')
                        return "'..' component";
                p += len;
                p += strspn(p, "/");
        }
        return NULL;
}

typedef struct extract {
        struct archive *in;
        uint64_t max_bytes, total;
        uid_t uid;
        gid_t gid;
} extract;

static int copy_data(extract *x, struct archive *out, const char *name, sb_error **ret_err) {
        for (;;) {
                const void *buf;
                size_t size;
                la_int64_t offset;
                int r = archive_read_data_block(x->in, &buf, &size, &offset);
                if (r == ARCHIVE_EOF)
                        return 0;
                if (r < ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EIO, REASON, NULL, "read member '%s': %s", name,
                                            archive_error_string(x->in));
                /* Bounds the unpacked size too: a small archive can expand to
                 * fill the disk (decompression bomb). */
                x->total += size;
                source_progress("extracting", x->total, 0, 0, 0);
                if (x->total > x->max_bytes)
                        return sb_error_set(ret_err, -EFBIG, REASON, NULL,
                                            "member '%s': extracted content exceeds the limit of %llu "
                                            "bytes",
                                            name, (unsigned long long)x->max_bytes);
                if (archive_write_data_block(out, buf, size, offset) < ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EIO, REASON, NULL, "write member '%s': %s", name,
                                            archive_error_string(out));
        }
}

/* Returns 1 when the entry should be written, 0 to skip it, <0 to refuse
 * the whole extraction. Rewrites ownership and mode in place. */
static int vet_entry(struct archive_entry *e, uid_t uid, gid_t gid, sb_error **ret_err) {
        const char *name = archive_entry_pathname(e);
        const char *why = bad_name_reason(name);
        if (why)
                return sb_error_set(ret_err, -EPERM, REASON, NULL, "member '%s' refused: %s",
                                    name ? name : "", why);
        const char *hl = archive_entry_hardlink(e);
        if (hl && hl[0] == '/') {
                /* An absolute hardlink target (usr/bin/perlthanks ->
                 * /usr/bin/perlbug, from a tarball of a whole root) names a
                 * member of this archive: resolve it inside the extraction
                 * root. ".." is still refused below, and a target that is
                 * not in the tree fails to link. */
                while (*hl == '/')
                        hl++;
                archive_entry_copy_hardlink(e, hl);
                hl = archive_entry_hardlink(e);
        }
        if (hl && (why = bad_name_reason(hl)))
                return sb_error_set(ret_err, -EPERM, REASON, NULL,
                                    "member '%s' refused: hardlink target '%s' has an %s", name, hl, why);
        /* A hardlink entry may carry no file type of its own (tar's type
         * '1'); it links to a regular member vetted above. */
        switch (hl ? AE_IFREG : archive_entry_filetype(e)) {
        case AE_IFREG:
        case AE_IFDIR:
        case AE_IFLNK:
                break;
        default:
                /* Device nodes, FIFOs and sockets are skipped, not refused:
                 * tarballs of whole trees often carry a few, and a workspace
                 * never needs them (the sandbox has its own minimal /dev). */
                return 0;
        }
        archive_entry_set_uid(e, uid);
        archive_entry_set_gid(e, gid);
        archive_entry_set_uname(e, NULL);
        archive_entry_set_gname(e, NULL);
        /* No setuid, setgid or sticky bit survives. */
        archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
        return 1;
}

/* Runs on the confined thread, chrooted into the destination: "/" is
 * dest_dir and the filesystem identity is uid:gid. */
static int extract_confined(void *userdata, sb_error **ret_err) {
        extract *x = userdata;
        _cleanup_(archive_write_freep) struct archive *out = archive_write_disk_new();
        if (!out)
                return sb_error_set(ret_err, -ENOMEM, REASON, NULL, "extract: out of memory");
        /* No ARCHIVE_EXTRACT_OWNER (the thread's fsuid gives ownership),
         * no XATTR/ACL/FFLAGS (a security.capability xattr would act like a
         * setuid bit; immutable flags would block cleanup). */
        archive_write_disk_set_options(out, ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                    ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                    ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS |
                                                    ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM);
        source_progress("extracting", 0, 0, 0, 0);
        for (;;) {
                struct archive_entry *e;
                if (core_cancel_requested())
                        return sb_error_set(ret_err, -ECANCELED, "cancelled", NULL, "extract: cancelled");
                int r = archive_read_next_header(x->in, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r < ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EIO, REASON, NULL, "read tarball: %s",
                                            archive_error_string(x->in));
                r = vet_entry(e, x->uid, x->gid, ret_err);
                if (r < 0)
                        return r;
                if (r == 0)
                        continue;
                const char *name = archive_entry_pathname(e);
                if (archive_write_header(out, e) < ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EPERM, REASON, NULL, "member '%s' refused: %s", name,
                                            archive_error_string(out));
                if (archive_entry_size(e) > 0 && (r = copy_data(x, out, name, ret_err)) < 0)
                        return r;
                if (archive_write_finish_entry(out) < ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EIO, REASON, NULL, "finish member '%s': %s", name,
                                            archive_error_string(out));
        }
        /* Applies the deferred directory modes and times, still confined. */
        if (archive_write_close(out) < ARCHIVE_WARN)
                return sb_error_set(ret_err, -EIO, REASON, NULL, "finish extraction: %s",
                                    archive_error_string(out));
        return 0;
}

int core_source_tarball_extract(const char *location, const char *dest_dir, uid_t uid, gid_t gid,
                                uint64_t max_bytes, const char *const *local_roots, sb_error **ret_err) {
        _cleanup_close_ int fd = fetch_tarball(location, local_roots, max_bytes, ret_err);
        if (fd < 0)
                return fd;
        _cleanup_(archive_read_freep) struct archive *in = archive_read_new();
        if (!in)
                return sb_error_set(ret_err, -ENOMEM, REASON, NULL, "extract: out of memory");
        /* The compressions of the contract and the tar family (ustar, pax,
         * gnutar, v7) only: a "tarball" has no business being a zip or an ISO
         * image, and filter_all would also enable filters that run external
         * programs (lrzip, grzip, lzop) on hostile bytes. */
        archive_read_support_filter_gzip(in);
        archive_read_support_filter_bzip2(in);
        archive_read_support_filter_xz(in);
        archive_read_support_filter_zstd(in);
        archive_read_support_format_tar(in);
        if (archive_read_open_fd(in, fd, 64 * 1024) != ARCHIVE_OK)
                return sb_error_set(ret_err, -EINVAL, REASON, NULL, "open tarball: %s",
                                    archive_error_string(in));
        _cleanup_close_ int dest_fd = source_open_dest(dest_dir, uid, gid, ret_err);
        if (dest_fd < 0)
                return dest_fd;
        extract x = {.in = in, .max_bytes = max_bytes, .uid = uid, .gid = gid};
        int r = source_run_confined(dest_fd, uid, gid, extract_confined, &x, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "extract tarball");
        return 0;
}
