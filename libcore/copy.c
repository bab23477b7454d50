/* Tree copy and tree export (see copy.h). Used for forks and snapshots of
 * a running sandbox, whose upper layer cannot be reused in place while it
 * is mounted, and for snapshot export. Runs in sandboxd as root.
 *
 * The source is a tree root inside a sandbox wrote: any entry may be a
 * symlink to a host path, and (were the sandbox not frozen) may be swapped
 * for one between two looks at it. So the walk is made by fds, never by
 * path: every entry is opened beneath its parent's fd with openat2(
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS); a
 * directory or regular file is described by fstat of the fd it was opened
 * as (so what is copied is what was opened), its data, xattrs and ACLs read
 * from that fd; symlinks and special files are only ever opened O_PATH |
 * O_NOFOLLOW and their target read with readlinkat. An entry whose type
 * changed between readdir and open fails the copy (-ESTALE). Nothing of the
 * host outside the tree is read, whatever the tree holds. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include "libcore/copy.h"
#include "libcore/util.h"

/* Deeper trees are refused rather than walked with one fd per level. */
#define MAX_DEPTH 1024

typedef struct walk {
        struct archive *wr;
        struct archive *names;  /* disk reader: metadata of opened fds, owner names unless numeric */
        struct archive_entry_linkresolver *lr;
        dev_t dev;              /* the tree's filesystem: other mounts are not entered */
        sb_error **err;
} walk;

/* Copies every xattr of fd (an O_PATH fd through its /proc/self/fd link,
 * which names the inode itself, a symlink included: getxattr follows the
 * magic link to the inode and no further) into e. */
static int read_xattrs(int fd, bool opath, struct archive_entry *e, const char *shown, sb_error **ret_err) {
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        ssize_t n = opath ? listxattr(proc, NULL, 0) : flistxattr(fd, NULL, 0);
        if (n < 0 && (errno == ENOTSUP || errno == EPERM))
                return 0;
        if (n <= 0)
                return n < 0 ? sb_error_set(ret_err, negative_errno(), NULL, NULL, "xattrs of %s: %m", shown) : 0;
        _cleanup_free_ char *list = malloc((size_t)n);
        _cleanup_free_ char *val = malloc(XATTR_SIZE_MAX);
        if (!list || !val)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        n = opath ? listxattr(proc, list, (size_t)n) : flistxattr(fd, list, (size_t)n);
        if (n < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "xattrs of %s: %m", shown);
        for (char *k = list; k < list + n; k += strlen(k) + 1) {
                ssize_t v = opath ? getxattr(proc, k, val, XATTR_SIZE_MAX) : fgetxattr(fd, k, val, XATTR_SIZE_MAX);
                if (v < 0 && errno == ENODATA)
                        continue;
                if (v < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "xattr %s of %s: %m", k, shown);
                archive_entry_xattr_add_entry(e, k, val, (size_t)v);
        }
        return 0;
}

/* The entry `name` of dirfd, opened as what fstatat saw: a directory or
 * regular file for reading, anything else O_PATH without following it.
 * Fills *st from the opened fd. */
static int open_entry(int dirfd, const char *name, const char *shown, struct stat *st, bool *ret_opath,
                      sb_error **ret_err) {
        struct stat seen;
        if (fstatat(dirfd, name, &seen, AT_SYMLINK_NOFOLLOW) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "stat %s: %m", shown);
        bool opath = !S_ISDIR(seen.st_mode) && !S_ISREG(seen.st_mode);
        int flags = S_ISDIR(seen.st_mode) ? O_RDONLY | O_DIRECTORY
                    : opath               ? O_PATH | O_NOFOLLOW
                                          : O_RDONLY | O_NOCTTY | O_NONBLOCK;
        int fd = core_open_beneath(dirfd, name, flags, 0);
        if (fd < 0)
                return sb_error_set(ret_err, fd, NULL, NULL, "open %s: %s", shown, core_beneath_strerror(fd));
        if (fstat(fd, st) < 0 || st->st_ino != seen.st_ino || st->st_dev != seen.st_dev ||
            (st->st_mode & S_IFMT) != (seen.st_mode & S_IFMT)) {
                close(fd);
                return sb_error_set(ret_err, -ESTALE, NULL, NULL, "%s changed while it was copied", shown);
        }
        *ret_opath = opath;
        return fd;
}

/* The names in directory fd, read at once so that no directory stream
 * stays open across the recursion. NULL-terminated array, caller frees. */
static char **list_dir(int fd, const char *shown, sb_error **ret_err) {
        int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
        if (!d) {
                if (dup_fd >= 0)
                        close(dup_fd);
                sb_error_set(ret_err, negative_errno(), NULL, NULL, "read directory %s: %m", shown);
                return NULL;
        }
        rewinddir(d);
        size_t n = 0, cap = 16;
        char **names = calloc(cap + 1, sizeof(char *));
        struct dirent *de;
        while (names && (errno = 0, de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                if (n == cap) {
                        char **nn = realloc(names, (cap * 2 + 1) * sizeof(char *));
                        if (!nn)
                                break;
                        names = nn;
                        cap *= 2;
                }
                if (!(names[n] = strdup(de->d_name)))
                        break;
                names[++n] = NULL;
        }
        int err = errno;
        closedir(d);
        if (!names || err || de) {
                for (size_t i = 0; names && i < n; i++)
                        free(names[i]);
                free(names);
                sb_error_set(ret_err, err ? -err : -ENOMEM, NULL, NULL, "read directory %s: %s", shown,
                             strerror(err ? err : ENOMEM));
                return NULL;
        }
        return names;
}

/* Header, then the data of a regular file read from fd (at most the size
 * the header gave: a file that grows meanwhile is cut there). */
static int emit(walk *w, struct archive_entry *e, int fd, const char *shown) {
        struct archive_entry *sparse = NULL, *cur = e;
        archive_entry_linkify(w->lr, &cur, &sparse);
        /* The tar strategy never defers an entry: cur is e, or e turned
         * into a hardlink to one written before. */
        if (cur != e)
                return sb_error_set(w->err, -EIO, NULL, NULL, "%s: unexpected hardlink order", shown);
        if (archive_write_header(w->wr, e) < ARCHIVE_WARN)
                return sb_error_set(w->err, -EIO, NULL, NULL, "%s: %s", shown, archive_error_string(w->wr));
        if (archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e)) {
                char buf[64 * 1024];
                la_int64_t left = archive_entry_size(e);
                while (left > 0) {
                        ssize_t got = read(fd, buf, left < (la_int64_t)sizeof(buf) ? (size_t)left : sizeof(buf));
                        if (got < 0 && errno == EINTR)
                                continue;
                        if (got < 0)
                                return sb_error_set(w->err, negative_errno(), NULL, NULL, "read %s: %m", shown);
                        if (got == 0)
                                break;
                        if (archive_write_data(w->wr, buf, (size_t)got) != got)
                                return sb_error_set(w->err, -EIO, NULL, NULL, "%s: %s", shown,
                                                    archive_error_string(w->wr));
                        left -= got;
                }
        }
        if (archive_write_finish_entry(w->wr) < ARCHIVE_WARN)
                return sb_error_set(w->err, -EIO, NULL, NULL, "%s: %s", shown, archive_error_string(w->wr));
        return 0;
}

static int walk_dir(walk *w, int dirfd, const char *path, unsigned depth);

/* Metadata of the entry open at fd into e, named `path`. A directory or
 * regular file: libarchive's own reader on that fd (owners, modes, times,
 * xattrs, POSIX ACLs, file flags), with /proc/self/fd/N, which names the
 * opened inode and nothing else, for the calls it makes by path (a
 * directory's default ACL). A symlink or special file (an O_PATH fd):
 * stat and xattrs here, as libarchive would read them by path. */
static int describe(walk *w, struct archive_entry *e, int fd, bool opath, const struct stat *st, const char *path) {
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        if (!opath) {
                archive_entry_copy_sourcepath(e, proc);
                if (archive_read_disk_entry_from_file(w->names, e, fd, st) < ARCHIVE_WARN)
                        return sb_error_set(w->err, -EIO, NULL, NULL, "%s: %s", path, archive_error_string(w->names));
                archive_entry_copy_sourcepath(e, NULL);
                archive_entry_copy_pathname(e, path);
                return 0;
        }
        archive_entry_copy_stat(e, st);
        archive_entry_copy_pathname(e, path);
        const char *u = archive_read_disk_uname(w->names, st->st_uid);
        const char *g = archive_read_disk_gname(w->names, st->st_gid);
        if (u)
                archive_entry_copy_uname(e, u);
        if (g)
                archive_entry_copy_gname(e, g);
        return read_xattrs(fd, true, e, path, w->err);
}

/* One entry: fd as open_entry() made it, st its fstat; `path` the name
 * written (prefix/...). A directory is then walked. */
static int walk_entry(walk *w, int dirfd, const char *name, const char *path, unsigned depth) {
        /* A cancelled request stops between entries (core_cancel_bind). */
        if (core_cancel_requested())
                return sb_error_set(w->err, -ECANCELED, "cancelled", NULL, "cancelled");
        struct stat st;
        bool opath = false;
        _cleanup_close_ int fd = open_entry(dirfd, name, path, &st, &opath, w->err);
        if (fd < 0)
                return fd;
        if (S_ISSOCK(st.st_mode))
                return 0;  /* as libarchive: a socket cannot be archived */
        _cleanup_(archive_entry_freep) struct archive_entry *e = archive_entry_new();
        if (!e)
                return sb_error_set(w->err, -ENOMEM, NULL, NULL, "out of memory");
        int r = describe(w, e, fd, opath, &st, path);
        if (r < 0)
                return r;
        if (S_ISLNK(st.st_mode)) {
                char target[PATH_MAX + 1];
                /* The O_PATH fd of the link itself, so a swap cannot change
                 * which link is read. */
                ssize_t n = readlinkat(fd, "", target, PATH_MAX);
                if (n < 0)
                        return sb_error_set(w->err, negative_errno(), NULL, NULL, "readlink %s: %m", path);
                target[n] = 0;
                archive_entry_copy_symlink(e, target);
        }
        if ((r = emit(w, e, fd, path)) < 0)
                return r;
        /* Another mount below the tree is listed, not entered. */
        if (!S_ISDIR(st.st_mode) || st.st_dev != w->dev)
                return 0;
        return walk_dir(w, fd, path, depth + 1);
}

static int walk_dir(walk *w, int dirfd, const char *path, unsigned depth) {
        if (depth > MAX_DEPTH) {
                /* The reason first: the path alone is thousands of bytes. */
                size_t n = strlen(path);
                return sb_error_set(w->err, -ELOOP, NULL, NULL, "more than %d directory levels at %s%s", MAX_DEPTH,
                                    n > 120 ? "..." : "", n > 120 ? path + n - 120 : path);
        }
        char **names = list_dir(dirfd, path, w->err);
        if (!names)
                return -EIO;
        int r = 0;
        size_t base = strlen(path);
        for (size_t i = 0; names[i]; i++) {
                _cleanup_free_ char *child = NULL;
                if (r >= 0 && asprintf(&child, "%s%s%s", path, base && path[base - 1] == '/' ? "" : "/", names[i]) < 0)
                        r = sb_error_set(w->err, -ENOMEM, NULL, NULL, "out of memory");
                if (r >= 0)
                        r = walk_entry(w, dirfd, names[i], child, depth);
                free(names[i]);
        }
        free(names);
        return r;
}

int core_tree_write(const char *src, struct archive *wr, const char *prefix, bool numeric_owners,
                    sb_error **ret_err) {
        _cleanup_(archive_freep) struct archive *names = archive_read_disk_new();
        _cleanup_(archive_entry_linkresolver_freep) struct archive_entry_linkresolver *lr =
                archive_entry_linkresolver_new();
        if (!lr || !names)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* Never a path walk of its own: only entry_from_file on our fds. */
        archive_read_disk_set_symlink_physical(names);
        if (!numeric_owners)
                archive_read_disk_set_standard_lookup(names);
        archive_entry_linkresolver_set_strategy(lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
        /* src itself is a directory of the daemon's (an upper directory or
         * a layer): its own path is trusted, its contents are not. */
        _cleanup_close_ int top = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (top < 0 || fstat(top, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", src);
        walk w = {.wr = wr, .names = names, .lr = lr, .dev = st.st_dev, .err = ret_err};
        _cleanup_(archive_entry_freep) struct archive_entry *e = archive_entry_new();
        _cleanup_free_ char *root = NULL;
        if (!e || asprintf(&root, "%s/", prefix) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = describe(&w, e, top, false, &st, root);
        if (r >= 0)
                r = emit(&w, e, top, src);
        if (r >= 0)
                r = walk_dir(&w, top, prefix, 1);
        return r;
}

int core_tree_copy(const char *src, const char *dst, sb_error **ret_err) {
        struct stat st;
        if (lstat(src, &st) < 0 || !S_ISDIR(st.st_mode))
                return sb_error_set(ret_err, -ENOTDIR, NULL, NULL, "copy: %s is not a directory", src);
        if (access(dst, F_OK) == 0)
                return sb_error_set(ret_err, -EEXIST, NULL, NULL, "copy: %s exists", dst);
        _cleanup_(archive_freep) struct archive *wr = archive_write_disk_new();
        if (!wr)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* dst is a new directory of the daemon's that nothing else writes,
         * and the walk never emits an entry below a symlink it emitted, so
         * no entry is written through a link. (SECURE_SYMLINKS would also
         * refuse a symlink among the state directory's own components.) */
        archive_write_disk_set_options(wr, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                                   ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_ACL |
                                                   ARCHIVE_EXTRACT_FFLAGS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                   ARCHIVE_EXTRACT_UNLINK);
        int r = core_tree_write(src, wr, dst, false, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "copy");
        return archive_write_close(wr) == ARCHIVE_OK
                       ? 0 : sb_error_set(ret_err, -EIO, NULL, NULL, "copy: %s", archive_error_string(wr));
}
