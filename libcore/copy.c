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
#include <time.h>
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
        bool src_error;         /* the last error was reading the source (not writing) */
        bool disk;              /* wr is libarchive's disk writer: data written by offset, holes skipped */
        uint64_t copied;        /* bytes of regular file data read and written so far */
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

/* An error of the writer, with the system error under it when it has one
 * (a full file system says so, not just "Write failed"). */
static int writer_error(walk *w, const char *shown) {
        int e = archive_errno(w->wr);
        const char *s = archive_error_string(w->wr);
        if (e > 0 && (!s || !strstr(s, strerror(e))))
                return sb_error_set(w->err, -e, e == ENOSPC || e == EDQUOT ? "limit_exceeded" : NULL, NULL,
                                    "%s: %s: %s", shown, s ? s : "write", strerror(e));
        return sb_error_set(w->err, e > 0 ? -e : -EIO, NULL, NULL, "%s: %s", shown,
                            s ? s : "write failed");
}

/* Bytes of data a regular file's copy may write beyond the blocks the
 * source has allocated (st_blocks): data kept in the inode itself (ext4
 * inline data) and rounding. */
#define COPY_SLACK_BYTES (1 << 20)
/* A cancelled request is seen within this much data of one file. */
#define COPY_CANCEL_BYTES (4 << 20)

typedef struct extent {
        off_t off, len;
} extent;

/* The data extents of the regular file fd in [0, size), by
 * lseek(2) SEEK_DATA/SEEK_HOLE (a file system without them: one extent, the
 * whole file). Fails with limit_exceeded when they hold more than the
 * file's allocated blocks (blocks, st_blocks, in 512-byte units) plus
 * COPY_SLACK_BYTES: a copy never writes more than its source takes. */
static int data_extents(walk *w, int fd, off_t size, blkcnt_t blocks, const char *shown, extent **ret,
                        size_t *ret_n, off_t *ret_bytes) {
        _cleanup_free_ extent *v = NULL;
        size_t n = 0, cap = 0;
        off_t bytes = 0, off = 0;
        off_t bound = (off_t)blocks * 512 + COPY_SLACK_BYTES;
        while (off < size) {
                off_t d = lseek(fd, off, SEEK_DATA), h;
                if (d < 0 && errno == ENXIO)
                        break;
                if (d < 0 && errno == EINVAL)
                        d = off, h = size;
                else if (d < 0 || (h = lseek(fd, d, SEEK_HOLE)) < 0) {
                        w->src_error = true;
                        return sb_error_set(w->err, negative_errno(), NULL, NULL, "seek %s: %m", shown);
                }
                if (d >= size)
                        break;
                if (h > size || h <= d)
                        h = size;
                if (n == cap) {
                        size_t c = cap ? cap * 2 : 16;
                        extent *nv = realloc(v, c * sizeof(extent));
                        if (!nv)
                                return sb_error_set(w->err, -ENOMEM, NULL, NULL, "out of memory");
                        v = nv;
                        cap = c;
                }
                v[n++] = (extent){.off = d, .len = h - d};
                bytes += h - d;
                if (bytes > bound)
                        return sb_error_set(w->err, -EFBIG, "limit_exceeded", NULL,
                                            "%s: more data than the %lld bytes it has allocated (plus %d): "
                                            "a copy writes at most its source's allocated size",
                                            shown, (long long)blocks * 512, COPY_SLACK_BYTES);
                off = h;
        }
        *ret = v;
        v = NULL;
        *ret_n = n;
        *ret_bytes = bytes;
        return 0;
}

/* Writes len bytes of fd's data from off (zeros when fd < 0) at offset
 * off of the entry: by offset to the disk writer (holes stay holes), in
 * order to an archive writer. A file that shrinks meanwhile is cut there
 * (the disk writer and the archive's header keep the size). */
static int put_data(walk *w, int fd, off_t off, off_t len, const char *shown) {
        static const char zeros[64 * 1024];
        char buf[64 * 1024];
        off_t since_check = 0;
        while (len > 0) {
                size_t want = len < (off_t)sizeof(buf) ? (size_t)len : sizeof(buf);
                ssize_t got = want;
                const char *p = zeros;
                if (fd >= 0) {
                        got = pread(fd, buf, want, off);
                        if (got < 0 && errno == EINTR)
                                continue;
                        if (got < 0) {
                                w->src_error = true;
                                return sb_error_set(w->err, negative_errno(), NULL, NULL, "read %s: %m", shown);
                        }
                        if (got == 0)
                                return 1;
                        p = buf;
                }
                /* (The disk writer's data_block answers a failed
                 * write(2), ENOSPC say, with ARCHIVE_WARN.) */
                la_ssize_t put = w->disk ? archive_write_data_block(w->wr, p, (size_t)got, off) == ARCHIVE_OK
                                                   ? got : -1
                                         : archive_write_data(w->wr, p, (size_t)got);
                if (put != got)
                        return writer_error(w, shown);
                off += got;
                len -= got;
                if (fd >= 0)
                        w->copied += (uint64_t)got;
                /* A cancel is seen within a few MiB, not at the end of
                 * a file of gigabytes. */
                if ((since_check += got) >= COPY_CANCEL_BYTES) {
                        since_check = 0;
                        if (core_cancel_requested())
                                return sb_error_set(w->err, -ECANCELED, "cancelled", NULL, "cancelled");
                }
        }
        return 0;
}

/* The data of the regular file fd for the entry e, whose header is not
 * written yet: only its data extents are read and written, so holes stay
 * holes (a sparse file is sparse in the copy, and in an archive as a
 * sparse entry). */
static int emit_data(walk *w, struct archive_entry *e, int fd, const char *shown) {
        struct stat st;
        if (fstat(fd, &st) < 0) {
                w->src_error = true;
                return sb_error_set(w->err, negative_errno(), NULL, NULL, "stat %s: %m", shown);
        }
        off_t size = archive_entry_size(e);
        _cleanup_free_ extent *v = NULL;
        size_t n = 0;
        off_t bytes = 0;
        int r = data_extents(w, fd, size, st.st_blocks, shown, &v, &n, &bytes);
        if (r < 0)
                return r;
        if (!w->disk && bytes < size) {
                for (size_t i = 0; i < n; i++)
                        archive_entry_sparse_add_entry(e, v[i].off, v[i].len);
                /* A file that ends in a hole ends its map with an empty
                 * extent at its size (as GNU tar). */
                if (!n || v[n - 1].off + v[n - 1].len < size)
                        archive_entry_sparse_add_entry(e, size, 0);
        }
        if (archive_write_header(w->wr, e) < ARCHIVE_WARN)
                return writer_error(w, shown);
        off_t pos = 0;
        for (size_t i = 0; i < n; i++) {
                if (!w->disk && (r = put_data(w, -1, pos, v[i].off - pos, shown)) < 0)
                        return r;
                if ((r = put_data(w, fd, v[i].off, v[i].len, shown)) < 0)
                        return r;
                pos = v[i].off + v[i].len;
                if (r > 0)
                        break;
        }
        /* The archive writer takes the whole size, holes as zeros (which
         * a sparse entry does not store); the disk writer truncates to
         * the size at finish_entry. */
        if (!w->disk && pos < size && (r = put_data(w, -1, pos, size - pos, shown)) < 0)
                return r;
        return 0;
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
        if (archive_entry_filetype(e) == AE_IFREG && !archive_entry_hardlink(e) && archive_entry_size(e) > 0) {
                int r = emit_data(w, e, fd, shown);
                if (r < 0)
                        return r;
        } else if (archive_write_header(w->wr, e) < ARCHIVE_WARN)
                return writer_error(w, shown);
        if (archive_write_finish_entry(w->wr) < ARCHIVE_WARN)
                return writer_error(w, shown);
        return 0;
}

/* A socket inode as `name` in the copy's directory dfd (the copy is the
 * daemon's, written by nothing else), with st's mode, owner and times: a
 * socket cannot be archived (libarchive's disk writer would make it a
 * regular file), so it is made here, as cp -a does. */
static int make_socket(walk *w, int dfd, const char *name, const struct stat *st, const char *shown) {
        struct timespec times[2] = {st->st_atim, st->st_mtim};
        if (mknodat(dfd, name, S_IFSOCK | 0600, 0) < 0 ||
            fchownat(dfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
            fchmodat(dfd, name, st->st_mode & 07777, 0) < 0 || utimensat(dfd, name, times, AT_SYMLINK_NOFOLLOW) < 0)
                return sb_error_set(w->err, negative_errno(), NULL, NULL, "make socket %s in the copy: %m", shown);
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
        /* A socket cannot be archived (as libarchive): a copy makes one. */
        if (S_ISSOCK(st.st_mode))
                return w->disk ? make_socket(w, AT_FDCWD, path, &st, path) : 0;
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

static int tree_write(const char *src, struct archive *wr, bool disk, const char *prefix, bool numeric_owners,
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
        walk w = {.wr = wr, .names = names, .lr = lr, .dev = st.st_dev, .err = ret_err, .disk = disk};
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

int core_tree_write(const char *src, struct archive *wr, const char *prefix, bool numeric_owners,
                    sb_error **ret_err) {
        return tree_write(src, wr, false, prefix, numeric_owners, ret_err);
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
        int r = tree_write(src, wr, true, dst, false, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "copy");
        return archive_write_close(wr) == ARCHIVE_OK
                       ? 0 : sb_error_set(ret_err, -EIO, NULL, NULL, "copy: %s", archive_error_string(wr));
}

/* ---- incremental copy (pre-copy of a running tree) ------------------------
 *
 * core_tree_sync() brings dst up to date with src, rewriting only what
 * changed since the pass that last copied it, as live migration's pre-copy
 * does: passes while the sandbox runs, then one more while it is frozen.
 * Whether an entry changed is judged from what the sandbox cannot forge:
 * every change to an inode (data, size, hole punch, mode, owner, xattrs,
 * link count, rename, utimensat itself) sets its ctime to the current time
 * (inode(7), "Last status change timestamp"), which no call lets a process
 * set. An entry is unchanged when its path held the same inode (st_dev,
 * st_ino) with the same ctime, mtime, size, mode, owner and link count as
 * when it was last copied, and that ctime is older than the start of that
 * pass: a change made after the pass began gets a ctime at or after that
 * start (same clock, CLOCK_REALTIME_COARSE, as the kernel's current_time),
 * so it can never look unchanged, however fine or coarse the timestamps
 * are and even when it lands in the same clock tick as the copy (the
 * "racily clean" case). A directory unchanged so has the same entry names;
 * one that changed is compared name by name. Writes through a shared
 * mapping only touch the times when a clean page is first written
 * (page_mkwrite): each live pass begins with syncfs(2), which writes back
 * and write-protects every dirty page, so a later store faults and sets
 * the ctime. */

typedef struct tree_rec {
        char *path;  /* relative to the top, "" for the top itself */
        dev_t dev;
        ino_t ino;
        mode_t mode;
        nlink_t nlink;
        uid_t uid;
        gid_t gid;
        off_t size;
        struct timespec mtime, ctime;
        struct timespec since; /* start of the pass that copied it */
        bool dirty;            /* an entry below vanished while it was read: compare by name next time */
} tree_rec;

struct core_tree_index {
        tree_rec *v;
        size_t n, cap;
        int64_t wall_minus_mono; /* CLOCK_REALTIME - CLOCK_MONOTONIC at the pass's start, ns */
        int64_t mono;            /* CLOCK_MONOTONIC then, ns */
};

static int64_t ts_ns(struct timespec t) {
        return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

void core_tree_index_free(core_tree_index *idx) {
        if (!idx)
                return;
        for (size_t i = 0; i < idx->n; i++)
                free(idx->v[i].path);
        free(idx->v);
        free(idx);
}

static int rec_cmp(const void *a, const void *b) {
        return strcmp(((const tree_rec *)a)->path, ((const tree_rec *)b)->path);
}

static const tree_rec *index_find(const core_tree_index *idx, const char *path) {
        if (!idx || !idx->n)
                return NULL;
        tree_rec key = {.path = (char *)path};
        return bsearch(&key, idx->v, idx->n, sizeof(tree_rec), rec_cmp);
}

static int index_add(core_tree_index *idx, const char *path, const struct stat *st, struct timespec since,
                     bool dirty) {
        if (idx->n == idx->cap) {
                size_t cap = idx->cap ? idx->cap * 2 : 256;
                tree_rec *v = realloc(idx->v, cap * sizeof(tree_rec));
                if (!v)
                        return -ENOMEM;
                idx->v = v;
                idx->cap = cap;
        }
        tree_rec *r = &idx->v[idx->n];
        *r = (tree_rec){.dev = st->st_dev, .ino = st->st_ino, .mode = st->st_mode, .nlink = st->st_nlink,
                        .uid = st->st_uid, .gid = st->st_gid, .size = st->st_size, .mtime = st->st_mtim,
                        .ctime = st->st_ctim, .since = since, .dirty = dirty};
        if (!(r->path = strdup(path)))
                return -ENOMEM;
        idx->n++;
        return 0;
}

static bool ts_eq(struct timespec a, struct timespec b) {
        return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static bool ts_lt(struct timespec a, struct timespec b) {
        return a.tv_sec < b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

/* Was the entry seen as st the one copied as r, unchanged since? */
static bool rec_unchanged(const tree_rec *r, const struct stat *st) {
        return r && !r->dirty && r->dev == st->st_dev && r->ino == st->st_ino && r->mode == st->st_mode &&
               r->nlink == st->st_nlink && r->uid == st->st_uid && r->gid == st->st_gid &&
               r->size == st->st_size && ts_eq(r->mtime, st->st_mtim) && ts_eq(r->ctime, st->st_ctim) &&
               ts_lt(r->ctime, r->since);
}

/* Hard links of one pass: for each inode of src with more than one name
 * met so far, the name in dst that holds it (written, or kept from the
 * pass before) and that dst inode. Every later name of it is made a link
 * to that one, so a pass that rewrites one name of an inode (say, moved
 * with its directory) never leaves another as a separate copy. Open
 * addressing on (st_dev, st_ino). */
typedef struct link_slot {
        dev_t dev;
        ino_t ino;
        ino_t dst_ino;
        char *dst_path;  /* absolute; NULL: free slot */
} link_slot;

typedef struct link_map {
        link_slot *v;
        size_t n, cap;  /* cap: a power of two, or 0 */
} link_map;

static size_t link_hash(dev_t dev, ino_t ino, size_t cap) {
        uint64_t h = ((uint64_t)ino * 0x9e3779b97f4a7c15ULL) ^ (uint64_t)dev;
        return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static link_slot *link_find(link_map *m, dev_t dev, ino_t ino) {
        if (!m->cap)
                return NULL;
        for (size_t i = link_hash(dev, ino, m->cap);; i = (i + 1) & (m->cap - 1)) {
                if (!m->v[i].dst_path)
                        return NULL;
                if (m->v[i].dev == dev && m->v[i].ino == ino)
                        return &m->v[i];
        }
}

static int link_put(link_map *m, dev_t dev, ino_t ino, ino_t dst_ino, const char *dst_path) {
        if ((m->n + 1) * 2 > m->cap) {
                size_t cap = m->cap ? m->cap * 2 : 64;
                link_slot *v = calloc(cap, sizeof(link_slot));
                if (!v)
                        return -ENOMEM;
                for (size_t i = 0; i < m->cap; i++)
                        if (m->v[i].dst_path) {
                                size_t k = link_hash(m->v[i].dev, m->v[i].ino, cap);
                                while (v[k].dst_path)
                                        k = (k + 1) & (cap - 1);
                                v[k] = m->v[i];
                        }
                free(m->v);
                m->v = v;
                m->cap = cap;
        }
        size_t k = link_hash(dev, ino, m->cap);
        while (m->v[k].dst_path)
                k = (k + 1) & (m->cap - 1);
        if (!(m->v[k].dst_path = strdup(dst_path)))
                return -ENOMEM;
        m->v[k].dev = dev;
        m->v[k].ino = ino;
        m->v[k].dst_ino = dst_ino;
        m->n++;
        return 0;
}

static void link_map_done(link_map *m) {
        for (size_t i = 0; i < m->cap; i++)
                free(m->v[i].dst_path);
        free(m->v);
}

typedef struct sync_walk {
        walk w;                     /* the disk writer, metadata reader, link resolver, top device, error */
        link_map links;
        const core_tree_index *old; /* the last pass's records, sorted; NULL on the first */
        core_tree_index *new;       /* this pass's */
        struct timespec since;      /* this pass's start, at the timestamps' granularity */
        const char *dst;
        bool live;
        core_tree_sync_stats *stats;
} sync_walk;

/* An error a running sandbox causes by changing the tree under the walk:
 * the entry went, was replaced, or turned into a link. */
static bool vanished(int r) {
        return r == -ENOENT || r == -ESTALE || r == -ELOOP || r == -ENOTDIR || r == -EXDEV || r == -EAGAIN ||
               r == -EISDIR;
}

/* Removes every xattr (POSIX ACLs included) of fd, a directory of dst
 * about to get src's anew: the disk writer adds xattrs, never removes. */
static int clear_xattrs(int fd, const char *shown, sb_error **ret_err) {
        ssize_t n = flistxattr(fd, NULL, 0);
        if (n < 0 && (errno == ENOTSUP || errno == EPERM))
                return 0;
        if (n <= 0)
                return n < 0 ? sb_error_set(ret_err, negative_errno(), NULL, NULL, "xattrs of %s: %m", shown) : 0;
        _cleanup_free_ char *list = malloc((size_t)n);
        if (!list)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        n = flistxattr(fd, list, (size_t)n);
        if (n < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "xattrs of %s: %m", shown);
        for (char *k = list; k < list + n; k += strlen(k) + 1)
                if (fremovexattr(fd, k) < 0 && errno != ENODATA)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "remove xattr %s of %s: %m", k,
                                            shown);
        return 0;
}

/* Removes the entry `name` of dst's directory dfd (a whole tree if it is a
 * directory). dst is the daemon's, written only by this walk. */
static int remove_dst(sync_walk *s, int dfd, const char *name, const char *rel, bool is_dir) {
        int r = 0;
        if (!is_dir)
                r = unlinkat(dfd, name, 0) < 0 && errno != ENOENT ? negative_errno() : 0;
        else {
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", s->dst, rel) < 0)
                        return sb_error_set(s->w.err, -ENOMEM, NULL, NULL, "out of memory");
                r = core_rm_rf(p);
        }
        if (r < 0)
                return sb_error_set(s->w.err, r, NULL, NULL, "remove %s from the copy: %s", rel, strerror(-r));
        if (s->stats)
                s->stats->removed++;
        return 0;
}

/* Writes the entry open at fd (st) as dst/rel: header, data, xattrs. */
static int write_entry(sync_walk *s, int fd, bool opath, const struct stat *st, const char *rel) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/%s", s->dst, rel) < 0)
                return sb_error_set(s->w.err, -ENOMEM, NULL, NULL, "out of memory");
        _cleanup_(archive_entry_freep) struct archive_entry *e = archive_entry_new();
        if (!e)
                return sb_error_set(s->w.err, -ENOMEM, NULL, NULL, "out of memory");
        int r = describe(&s->w, e, fd, opath, st, path);
        if (r < 0) {
                s->w.src_error = true;
                return r;
        }
        if (S_ISLNK(st->st_mode)) {
                char target[PATH_MAX + 1];
                ssize_t n = readlinkat(fd, "", target, PATH_MAX);
                s->w.src_error = n < 0;
                if (n < 0)
                        return sb_error_set(s->w.err, negative_errno(), NULL, NULL, "readlink %s: %m", rel);
                target[n] = 0;
                archive_entry_copy_symlink(e, target);
        }
        if (s->stats)
                s->stats->written++;
        uint64_t before = s->w.copied;
        r = emit(&s->w, e, fd, rel);
        if (s->stats)
                s->stats->bytes += s->w.copied - before;
        return r;
}

static int sync_dir(sync_walk *s, int sfd, int dfd, const char *rel, unsigned depth, bool by_name,
                    bool *ret_touched, bool *ret_dirty);

/* A directory entry (src fd, its fstat st, its last record old) against
 * dst's entry at dfd/name (dexists, dst_st): made when dst has none,
 * compared below, its metadata rewritten when it changed or anything in it
 * was rewritten (the disk writer then restores its times at close). */
static int sync_subdir(sync_walk *s, int fd, const struct stat *st, const tree_rec *old, int dfd, const char *name,
                       const char *rel, bool dexists, unsigned depth, bool *ret_touched) {
        bool same = rec_unchanged(old, st);
        int r;
        if (!dexists) {
                if ((r = write_entry(s, fd, false, st, rel)) < 0)
                        return r;
                *ret_touched = true;
        }
        bool touched = false, dirty = false;
        _cleanup_close_ int dchild = core_open_beneath(dfd, name, O_RDONLY | O_DIRECTORY, 0);
        if (dchild < 0)
                return sb_error_set(s->w.err, dchild, NULL, NULL, "open %s in the copy: %s", rel,
                                    core_beneath_strerror(dchild));
        /* Another mount below the tree is listed, not entered. */
        if (st->st_dev == s->w.dev &&
            (r = sync_dir(s, fd, dchild, rel, depth + 1, !same && dexists, &touched, &dirty)) < 0)
                return r;
        /* (Its metadata rewritten leaves its parent's times as they are.) */
        if (dexists && (!same || touched) &&
            ((r = clear_xattrs(dchild, rel, s->w.err)) < 0 || (r = write_entry(s, fd, false, st, rel)) < 0))
                return r;
        r = index_add(s->new, rel, st, same ? old->since : s->since, dirty);
        return r < 0 ? sb_error_set(s->w.err, r, NULL, NULL, "out of memory") : 0;
}

static int sync_entry_one(sync_walk *s, int sfd, int dfd, const char *name, const char *rel, unsigned depth,
                          bool *ret_touched, bool *ret_dirty) {
        if (core_cancel_requested())
                return sb_error_set(s->w.err, -ECANCELED, "cancelled", NULL, "cancelled");
        if (s->stats)
                s->stats->entries++;
        struct stat st, dst_st;
        int r;
        if (fstatat(sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                r = negative_errno();
                if (s->live && vanished(r)) {
                        /* Gone or replaced while it was read: its directory
                         * is compared by name on the next pass, the frozen
                         * one last. */
                        *ret_dirty = true;
                        return 0;
                }
                return sb_error_set(s->w.err, r, NULL, NULL, "stat %s: %m", rel);
        }
        bool dexists = fstatat(dfd, name, &dst_st, AT_SYMLINK_NOFOLLOW) == 0;
        if (!dexists && errno != ENOENT)
                return sb_error_set(s->w.err, negative_errno(), NULL, NULL, "stat %s in the copy: %m", rel);
        const tree_rec *old = index_find(s->old, rel);
        /* An unchanged entry, or another name of an inode already in dst,
         * is never opened: its stat decides. Anything else is opened and
         * described by what was opened. */
        bool opath = false;
        _cleanup_close_ int fd = -EBADF;
        if (S_ISDIR(st.st_mode) || S_ISSOCK(st.st_mode) ||
            !((st.st_nlink > 1 && link_find(&s->links, st.st_dev, st.st_ino)) ||
              (rec_unchanged(old, &st) && dexists && !S_ISDIR(dst_st.st_mode)))) {
                sb_error *e = NULL;
                if ((fd = open_entry(sfd, name, rel, &st, &opath, &e)) < 0 && s->live && vanished(fd)) {
                        sb_error_free(e);
                        *ret_dirty = true;
                        return 0;
                }
                if (fd < 0) {
                        sb_error_free(*s->w.err);
                        *s->w.err = e;
                        return fd;
                }
        }
        if (S_ISSOCK(st.st_mode)) {
                /* Made by make_socket() (a socket cannot be archived),
                 * anew unless unchanged. */
                bool keep = dexists && S_ISSOCK(dst_st.st_mode) && rec_unchanged(old, &st);
                if (!keep) {
                        if (dexists && (r = remove_dst(s, dfd, name, rel, S_ISDIR(dst_st.st_mode))) < 0)
                                return r;
                        if ((r = make_socket(&s->w, dfd, name, &st, rel)) < 0)
                                return r;
                        if (s->stats)
                                s->stats->written++;
                        *ret_touched = true;
                }
                r = index_add(s->new, rel, &st, keep ? old->since : s->since, false);
                return r < 0 ? sb_error_set(s->w.err, r, NULL, NULL, "out of memory") : 0;
        }
        if (dexists && S_ISDIR(dst_st.st_mode) != S_ISDIR(st.st_mode)) {
                if ((r = remove_dst(s, dfd, name, rel, S_ISDIR(dst_st.st_mode))) < 0)
                        return r;
                dexists = false;
                *ret_touched = true;
        }
        if (S_ISDIR(st.st_mode))
                return sync_subdir(s, fd, &st, old, dfd, name, rel, dexists, depth, ret_touched);
        bool same = rec_unchanged(old, &st);
        link_slot *first = S_ISDIR(st.st_mode) || st.st_nlink < 2 ? NULL : link_find(&s->links, st.st_dev, st.st_ino);
        if (first) {
                /* Another name of an inode met before: a link to the dst
                 * entry that holds it (data and metadata are the inode's),
                 * whatever this name's record says. */
                if (!dexists || dst_st.st_ino != first->dst_ino) {
                        if (dexists && (r = remove_dst(s, dfd, name, rel, false)) < 0)
                                return r;
                        if (linkat(AT_FDCWD, first->dst_path, dfd, name, 0) < 0)
                                return sb_error_set(s->w.err, negative_errno(), NULL, NULL,
                                                    "link %s in the copy: %m", rel);
                        if (s->stats)
                                s->stats->written++;
                        *ret_touched = true;
                }
        } else if (!same || !dexists) {
                if (fd < 0) {  /* (not reached: it was opened unless unchanged) */
                        s->w.src_error = true;
                        return sb_error_set(s->w.err, -ESTALE, NULL, NULL, "%s changed while it was copied", rel);
                }
                if (dexists && (r = remove_dst(s, dfd, name, rel, false)) < 0)
                        return r;
                if ((r = write_entry(s, fd, opath, &st, rel)) < 0)
                        return r;
                *ret_touched = true;
        }
        if (!first && !S_ISDIR(st.st_mode) && st.st_nlink > 1) {
                _cleanup_free_ char *dpath = NULL;
                if (fstatat(dfd, name, &dst_st, AT_SYMLINK_NOFOLLOW) < 0)
                        return sb_error_set(s->w.err, negative_errno(), NULL, NULL, "stat %s in the copy: %m", rel);
                if (asprintf(&dpath, "%s/%s", s->dst, rel) < 0 ||
                    link_put(&s->links, st.st_dev, st.st_ino, dst_st.st_ino, dpath) < 0)
                        return sb_error_set(s->w.err, -ENOMEM, NULL, NULL, "out of memory");
        }
        r = index_add(s->new, rel, &st, same && dexists ? old->since : s->since, false);
        return r < 0 ? sb_error_set(s->w.err, r, NULL, NULL, "out of memory") : 0;
}

/* One entry of src's directory sfd into dst's dfd. In a live pass, an
 * entry that cannot be read (its xattrs or data changing under the read,
 * say) is left out of dst and its directory compared by name next time,
 * as one that vanished; a failure to write dst fails the pass. */
static int sync_entry(sync_walk *s, int sfd, int dfd, const char *name, const char *rel, unsigned depth,
                      bool *ret_touched, bool *ret_dirty) {
        s->w.src_error = false;
        int r = sync_entry_one(s, sfd, dfd, name, rel, depth, ret_touched, ret_dirty);
        if (r >= 0 || !s->live || !s->w.src_error || r == -ECANCELED)
                return r;
        s->w.src_error = false;
        sb_error_free(*s->w.err);
        *s->w.err = NULL;
        *ret_dirty = true;
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : sb_error_set(s->w.err, negative_errno(), NULL, NULL,
                                                          "stat %s in the copy: %m", rel);
        *ret_touched = true;
        return remove_dst(s, dfd, name, rel, S_ISDIR(st.st_mode));
}

static bool names_have(char **names, const char *name) {
        for (size_t i = 0; names[i]; i++)
                if (streq(names[i], name))
                        return true;
        return false;
}

static void names_free(char **names) {
        for (size_t i = 0; names && names[i]; i++)
                free(names[i]);
        free(names);
}

/* The entries of src's directory sfd into dst's dfd. by_name: the
 * directory changed, so dst's entries that src no longer has go. */
static int sync_dir(sync_walk *s, int sfd, int dfd, const char *rel, unsigned depth, bool by_name,
                    bool *ret_touched, bool *ret_dirty) {
        if (depth > MAX_DEPTH) {
                size_t n = strlen(rel);
                return sb_error_set(s->w.err, -ELOOP, NULL, NULL, "more than %d directory levels at %s%s",
                                    MAX_DEPTH, n > 120 ? "..." : "", n > 120 ? rel + n - 120 : rel);
        }
        char **names = list_dir(sfd, rel, s->w.err);
        if (!names)
                return -EIO;
        int r = 0;
        if (by_name) {
                char **have = list_dir(dfd, rel, s->w.err);
                if (!have)
                        r = -EIO;
                for (size_t i = 0; r >= 0 && have[i]; i++) {
                        if (names_have(names, have[i]))
                                continue;
                        struct stat st;
                        _cleanup_free_ char *child = NULL;
                        if (asprintf(&child, "%s%s%s", rel, *rel ? "/" : "", have[i]) < 0)
                                r = sb_error_set(s->w.err, -ENOMEM, NULL, NULL, "out of memory");
                        else if (fstatat(dfd, have[i], &st, AT_SYMLINK_NOFOLLOW) == 0) {
                                r = remove_dst(s, dfd, have[i], child, S_ISDIR(st.st_mode));
                                *ret_touched = true;
                        }
                }
                names_free(have);
        }
        for (size_t i = 0; r >= 0 && names[i]; i++) {
                _cleanup_free_ char *child = NULL;
                if (asprintf(&child, "%s%s%s", rel, *rel ? "/" : "", names[i]) < 0)
                        r = sb_error_set(s->w.err, -ENOMEM, NULL, NULL, "out of memory");
                else
                        r = sync_entry(s, sfd, dfd, names[i], child, depth, ret_touched, ret_dirty);
        }
        names_free(names);
        return r;
}

/* libarchive's disk writer as core_tree_copy() sets it up. */
static struct archive *disk_writer(void) {
        struct archive *wr = archive_write_disk_new();
        if (wr)
                archive_write_disk_set_options(wr, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM |
                                                           ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_XATTR |
                                                           ARCHIVE_EXTRACT_ACL | ARCHIVE_EXTRACT_FFLAGS |
                                                           ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_UNLINK);
        return wr;
}

int core_tree_sync(const char *src, const char *dst, core_tree_index **idx, bool live, core_tree_sync_stats *stats,
                   sb_error **ret_err) {
        /* The pass's start, taken before anything is read (and before the
         * syncfs): see above. */
        struct timespec since, wall, mono;
        clock_gettime(CLOCK_REALTIME_COARSE, &since);
        clock_gettime(CLOCK_MONOTONIC, &mono);
        clock_gettime(CLOCK_REALTIME, &wall);
        /* The wall clock set back since the pass before (more than 1 ms
         * and than 1000 ppm of the time between, which slewing stays
         * within): a change made since may carry an older ctime, so
         * nothing is judged unchanged this time (a full pass). */
        const core_tree_index *last = *idx;
        if (last && ts_ns(wall) - ts_ns(mono) <
                            last->wall_minus_mono - 1000000 - (ts_ns(mono) - last->mono) / 1000)
                last = NULL;
        _cleanup_close_ int top = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (top < 0 || fstat(top, &st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "copy: open %s: %m", src);
        /* Timestamps of whole seconds (ext4 with 128-byte inodes, which
         * also lack the birth time; other file systems): a change in the
         * pass's first second may keep the second it already had. */
        struct statx sx;
        if (statx(top, "", AT_EMPTY_PATH, STATX_BTIME, &sx) < 0 || !(sx.stx_mask & STATX_BTIME))
                since.tv_nsec = 0;
        if (live && syncfs(top) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "copy: syncfs %s: %m", src);
        _cleanup_(archive_freep) struct archive *names = archive_read_disk_new();
        _cleanup_(archive_entry_linkresolver_freep) struct archive_entry_linkresolver *lr =
                archive_entry_linkresolver_new();
        _cleanup_(archive_freep) struct archive *wr = disk_writer();
        core_tree_index *fresh = calloc(1, sizeof(*fresh));
        if (!lr || !names || !wr || !fresh) {
                free(fresh);
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        archive_read_disk_set_symlink_physical(names);
        archive_read_disk_set_standard_lookup(names);
        archive_entry_linkresolver_set_strategy(lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
        sync_walk s = {.w = {.wr = wr, .names = names, .lr = lr, .dev = st.st_dev, .err = ret_err, .disk = true},
                       .old = last,
                       .new = fresh,
                       .since = since,
                       .dst = dst,
                       .live = live,
                       .stats = stats};
        const tree_rec *old = index_find(last, "");
        bool same = rec_unchanged(old, &st), touched = false, dirty = false;
        struct stat dst_st;
        bool dexists = lstat(dst, &dst_st) == 0;
        int r = 0;
        if (dexists && !S_ISDIR(dst_st.st_mode))
                r = sb_error_set(ret_err, -ENOTDIR, NULL, NULL, "copy: %s is not a directory", dst);
        if (r >= 0 && !dexists)
                r = write_entry(&s, top, false, &st, "");
        _cleanup_close_ int dtop = -1;
        if (r >= 0 && (dtop = open(dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "copy: open %s: %m", dst);
        if (r >= 0)
                r = sync_dir(&s, top, dtop, "", 1, !same && dexists, &touched, &dirty);
        if (r >= 0 && dexists && (!same || touched) && (r = clear_xattrs(dtop, dst, ret_err)) >= 0)
                r = write_entry(&s, top, false, &st, "");
        if (r >= 0 && index_add(fresh, "", &st, same ? old->since : since, dirty) < 0)
                r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (r >= 0 && archive_write_close(wr) != ARCHIVE_OK)
                r = sb_error_set(ret_err, -EIO, NULL, NULL, "%s", archive_error_string(wr));
        link_map_done(&s.links);
        if (r < 0) {
                core_tree_index_free(fresh);
                return sb_error_prefix(ret_err, "copy");
        }
        qsort(fresh->v, fresh->n, sizeof(tree_rec), rec_cmp);
        fresh->wall_minus_mono = ts_ns(wall) - ts_ns(mono);
        fresh->mono = ts_ns(mono);
        core_tree_index_free(*idx);
        *idx = fresh;
        return 0;
}
