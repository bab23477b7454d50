/* File operations of the agent protocol (libcore/agent.h "op":"fs"), done
 * inside the sandbox's root by a short-lived child of sandbox-init that is
 * confined as a command of the sandbox user (init_fs_run in fsrun.c: its uid, no
 * capabilities, no_new_privs, the seccomp filter), never by init itself: as
 * init the kernel would see PID 1 with its capabilities reading /proc/1/maps,
 * /proc/kallsyms and the like. The child sends its answer over a pipe.
 *
 * Every lookup goes through openat2(RESOLVE_NO_MAGICLINKS): a path through
 * /proc/self/fd/N would otherwise reach init's own descriptors (the agent
 * socket, other commands' pipes). Recursive removal is fd-relative and never
 * follows a symlink or crosses into another mount. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>
#include "libcore/agent.h"
#include "libcore/init/init.h"
#include "libcore/util.h"

#define FS_MAX_DEPTH 256

static int open_resolved(int dirfd, const char *path, int flags, mode_t mode) {
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .mode = (flags & O_CREAT) ? mode : 0,
                .resolve = RESOLVE_NO_MAGICLINKS,
        };
        int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        return fd < 0 ? negative_errno() : fd;
}

/* Splits an absolute path into an O_PATH fd of its parent directory and its
 * last component ("." for "/"). *ret_name points into path. */
static int open_parent(char *path, const char **ret_name) {
        char *slash = strrchr(path, '/');
        if (!slash)
                return -EINVAL;
        if (slash[1] == 0) { /* only "/" keeps a trailing slash */
                *ret_name = ".";
                return open_resolved(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
        }
        *slash = 0;
        int fd = open_resolved(AT_FDCWD, slash == path ? "/" : path, O_PATH | O_DIRECTORY, 0);
        *slash = '/';
        *ret_name = slash + 1;
        return fd;
}

/* mkdir -p as the current fsuid, one component at a time, each created
 * directory 0755 (before umask). With !include_last the last component is
 * left alone (the parents of a file). Returns an O_PATH fd of the deepest
 * directory handled, or a negative errno. */
static int mkdir_parents(const char *path, bool include_last) {
        _cleanup_free_ char *copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        _cleanup_close_ int dfd = open_resolved(AT_FDCWD, "/", O_PATH | O_DIRECTORY, 0);
        if (dfd < 0)
                return dfd;
        char *save = NULL;
        char *comp = strtok_r(copy, "/", &save);
        while (comp) {
                char *next = strtok_r(NULL, "/", &save);
                if (!next && !include_last)
                        break;
                if (mkdirat(dfd, comp, 0755) < 0 && errno != EEXIST)
                        return negative_errno();
                int nfd = open_resolved(dfd, comp, O_PATH | O_DIRECTORY, 0);
                if (nfd < 0)
                        return nfd;
                close(dfd);
                dfd = nfd;
                comp = next;
        }
        return TAKE_FD(dfd);
}

/* Extended attributes in the `user.` namespace (xattr(7)): the only ones
 * fs.* read or write; set and read through an fd of the file opened
 * here, as the sandbox user (the kernel checks its rights: a file it may
 * not write gets EACCES, a filesystem without user xattrs ENOTSUP). At
 * most FS_XATTRS of them, each value at most FS_XATTR_VALUE bytes. */
#define FS_XATTRS 32
#define FS_XATTR_VALUE 4096
#define FS_XATTR_PREFIX "user."

/* Whether `v` (n bytes) is printable US-ASCII: the values fs.stat shows
 * (a JSON string of anything else would not be the bytes). */
static bool printable(const char *v, size_t n) {
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
                        return false;
        return true;
}

/* Adds "xattrs" {NAME: VALUE} to o: fd's user.* attributes whose values
 * are printable ASCII (at most FS_XATTRS), when it has any. *bytes grows
 * by their size. Errors reading them leave them out. */
static void add_xattrs(cJSON *o, int fd, size_t *bytes) {
        char list[8192], val[FS_XATTR_VALUE + 1];
        ssize_t n = flistxattr(fd, list, sizeof(list));
        if (n <= 0)
                return;
        cJSON *x = NULL;
        int count = 0;
        for (char *k = list; k < list + n && count < FS_XATTRS; k += strlen(k) + 1) {
                if (strncmp(k, FS_XATTR_PREFIX, strlen(FS_XATTR_PREFIX)) != 0)
                        continue;
                ssize_t v = fgetxattr(fd, k, val, FS_XATTR_VALUE);
                if (v < 0 || !printable(val, (size_t)v))
                        continue;
                val[v] = 0;
                if (!x && !(x = cJSON_AddObjectToObject(o, "xattrs")))
                        return;
                cJSON_AddStringToObject(x, k, val);
                count++;
                if (bytes)
                        *bytes += strlen(k) + (size_t)v + 8;
        }
}

/* The xattrs of dfd/name, whose lstat is st: opened (O_NOFOLLOW, no
 * blocking, no controlling tty) only when it is a regular file or a
 * directory, and read only when what was opened is still that inode. */
static void add_xattrs_at(cJSON *o, int dfd, const char *name, const struct stat *st, size_t *bytes) {
        if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode))
                return;
        int fd = open_resolved(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
                                                  (S_ISDIR(st->st_mode) ? O_DIRECTORY : 0), 0);
        if (fd < 0)
                return;
        struct stat now;
        if (fstat(fd, &now) == 0 && now.st_ino == st->st_ino && now.st_dev == st->st_dev)
                add_xattrs(o, fd, bytes);
        close(fd);
}

/* Makes fd's user.* attributes exactly `want` ({NAME: string}, checked by
 * the daemon: names under user., values strings): the others removed
 * first. 0 or a negative errno. */
static int set_xattrs(int fd, const cJSON *want) {
        char list[8192];
        ssize_t n = flistxattr(fd, list, sizeof(list));
        if (n < 0 && errno != ENOTSUP)
                return negative_errno();
        for (char *k = list; n > 0 && k < list + n; k += strlen(k) + 1)
                if (!strncmp(k, FS_XATTR_PREFIX, strlen(FS_XATTR_PREFIX)) && !cJSON_GetObjectItemCaseSensitive(want, k) &&
                    fremovexattr(fd, k) < 0 && errno != ENODATA)
                        return negative_errno();
        const cJSON *x;
        cJSON_ArrayForEach(x, want) {
                const char *v = cJSON_GetStringValue(x);
                if (!x->string || strncmp(x->string, FS_XATTR_PREFIX, strlen(FS_XATTR_PREFIX)) != 0 || !v ||
                    strlen(v) > FS_XATTR_VALUE)
                        return -EINVAL;
                if (fsetxattr(fd, x->string, v, strlen(v), 0) < 0)
                        return negative_errno();
        }
        return 0;
}

static const char *type_name(mode_t m) {
        return S_ISREG(m) ? "file" : S_ISDIR(m) ? "directory" : S_ISLNK(m) ? "symlink" : "other";
}

/* The Stat object of docs/API.md "fs.stat". */
static cJSON *stat_json(const char *name, const char *path, const struct stat *st) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return NULL;
        char t[40];
        uint64_t ms = (uint64_t)st->st_mtim.tv_sec * 1000 + (uint64_t)st->st_mtim.tv_nsec / 1000000;
        cJSON_AddStringToObject(o, "name", name);
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddStringToObject(o, "type", type_name(st->st_mode));
        cJSON_AddNumberToObject(o, "size", (double)st->st_size);
        cJSON_AddNumberToObject(o, "mode", st->st_mode & 07777);
        cJSON_AddNumberToObject(o, "uid", st->st_uid);
        cJSON_AddNumberToObject(o, "gid", st->st_gid);
        cJSON_AddStringToObject(o, "mtime", core_format_time(ms, t, sizeof(t)));
        return o;
}

static int fs_stat(char *path, cJSON **ret) {
        const char *name;
        _cleanup_close_ int dfd = open_parent(path, &name);
        if (dfd < 0)
                return dfd;
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return negative_errno();
        *ret = stat_json(streq(path, "/") ? "/" : name, path, &st);
        if (*ret)
                add_xattrs_at(*ret, dfd, name, &st, NULL);
        return *ret ? 0 : -ENOMEM;
}

/* First chunk: create (mode applied exactly, not masked) or truncate an
 * existing file, whose mode is kept; later chunks append. Only regular files
 * are written: a FIFO or device would block or surprise init. */
static int fs_write(char *path, const cJSON *req) {
        int r = 0;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(req, "mode");
        if (m && !cJSON_IsNull(m) && (!cJSON_IsNumber(m) || m->valuedouble < 0 || m->valuedouble > 07777))
                return -EINVAL;
        mode_t mode = cJSON_IsNumber(m) ? (mode_t)m->valuedouble : 0644;
        bool append = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "append"));
        const char *data = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "data"));
        _cleanup_free_ void *buf = NULL;
        size_t len = 0;
        if (data && core_base64_decode(data, &buf, &len) < 0)
                return -EINVAL;

        _cleanup_close_ int dfd = mkdir_parents(path, false);
        if (dfd < 0)
                return dfd;
        const char *name = strrchr(path, '/') + 1;
        int base = O_WRONLY | O_NONBLOCK | O_NOCTTY;
        bool created = false;
        _cleanup_close_ int fd = -EBADF;
        if (append)
                fd = open_resolved(dfd, name, base | O_APPEND, 0);
        else {
                fd = open_resolved(dfd, name, base | O_CREAT | O_EXCL, mode);
                created = fd >= 0;
                if (fd == -EEXIST)
                        fd = open_resolved(dfd, name, base, 0);
        }
        if (fd < 0)
                return fd;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        if (!append && !created && ftruncate(fd, 0) < 0)
                return negative_errno();
        if (created && fchmod(fd, mode) < 0)
                return negative_errno();
        /* xattrs: the daemon sends them with a file's first piece. */
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(req, "xattrs");
        if (x && !cJSON_IsObject(x))
                return -EINVAL;
        if (x && (r = set_xattrs(fd, x)) < 0)
                return r;
        return core_write_all(fd, buf, len);
}

static int fs_read(const char *path, const cJSON *req, cJSON **ret) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(req, "offset");
        if (o && !cJSON_IsNull(o) && (!cJSON_IsNumber(o) || o->valuedouble < 0))
                return -EINVAL;
        off_t off = cJSON_IsNumber(o) ? (off_t)o->valuedouble : 0;
        _cleanup_close_ int fd = open_resolved(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0);
        if (fd < 0)
                return fd;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (S_ISDIR(st.st_mode))
                return -EISDIR;
        if (!S_ISREG(st.st_mode))
                return -EINVAL;
        _cleanup_free_ char *buf = malloc(AGENT_FS_CHUNK);
        if (!buf)
                return -ENOMEM;
        size_t got = 0;
        while (got < AGENT_FS_CHUNK) {
                ssize_t n = pread(fd, buf + got, AGENT_FS_CHUNK - got, off + (off_t)got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        _cleanup_free_ char *b64 = core_base64_encode(buf, got);
        cJSON *r = cJSON_CreateObject();
        if (!b64 || !r) {
                cJSON_Delete(r);
                return -ENOMEM;
        }
        cJSON_AddStringToObject(r, "data", b64);
        cJSON_AddNumberToObject(r, "size", (double)st.st_size);
        cJSON_AddBoolToObject(r, "eof", got < AGENT_FS_CHUNK || off + (off_t)got >= st.st_size);
        *ret = r;
        return 0;
}

static int fs_mkdir(char *path, const cJSON *req) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, "parents");
        if (!p || cJSON_IsNull(p) || cJSON_IsTrue(p)) { /* API default: parents */
                int fd = mkdir_parents(path, true);
                if (fd < 0)
                        return fd;
                close(fd);
                return 0;
        }
        const char *name;
        _cleanup_close_ int dfd = open_parent(path, &name);
        if (dfd < 0)
                return dfd;
        return mkdirat(dfd, name, 0755) < 0 ? negative_errno() : 0;
}

typedef struct list_entry {
        char *name;
        struct stat st;
} list_entry;

static int entry_cmp(const void *x, const void *y) {
        return strcmp(((const list_entry *)x)->name, ((const list_entry *)y)->name);
}

static void entries_free(list_entry *e, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(e[i].name);
        free(e);
}

/* Reads a directory's entries with lstat semantics (entries that vanish
 * meanwhile are skipped). */
static int read_entries(const char *path, list_entry **ret, size_t *ret_n) {
        int fd = open_resolved(AT_FDCWD, path, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0)
                return fd;
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return negative_errno();
        }
        list_entry *e = NULL;
        size_t n = 0, cap = 0;
        struct dirent *de;
        while ((errno = 0, de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (n == cap) {
                        cap = cap ? cap * 2 : 32;
                        list_entry *ne = realloc(e, cap * sizeof(*e));
                        if (!ne)
                                return entries_free(e, n), -ENOMEM;
                        e = ne;
                }
                if (!(e[n].name = strdup(de->d_name)))
                        return entries_free(e, n), -ENOMEM;
                e[n++].st = st;
        }
        if (errno != 0)
                return entries_free(e, n), negative_errno();
        qsort(e, n, sizeof(*e), entry_cmp);
        *ret = e;
        *ret_n = n;
        return 0;
}

/* A reply is one packet: a directory whose listing does not fit in
 * AGENT_MAX_PACKET is refused with EFBIG rather than cut short silently. */
static int fs_list(const char *path, cJSON **ret) {
        list_entry *e = NULL;
        size_t n = 0;
        int r = read_entries(path, &e, &n);
        if (r < 0)
                return r;
        cJSON *res = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(res, "entries");
        size_t approx = 64;
        /* For the entries' xattrs (each checked to be the inode listed). */
        _cleanup_close_ int dfd = open_resolved(AT_FDCWD, path, O_PATH | O_DIRECTORY, 0);
        for (size_t i = 0; arr && i < n; i++) {
                _cleanup_free_ char *full = NULL;
                if (asprintf(&full, "%s%s%s", path, streq(path, "/") ? "" : "/", e[i].name) < 0) {
                        arr = NULL;
                        break;
                }
                cJSON *st = stat_json(e[i].name, full, &e[i].st);
                if (st && dfd >= 0)
                        add_xattrs_at(st, dfd, e[i].name, &e[i].st, &approx);
                if (!st || !cJSON_AddItemToArray(arr, st)) {
                        cJSON_Delete(st);
                        arr = NULL;
                        break;
                }
                approx += 2 * strlen(full) + 160;
        }
        entries_free(e, n);
        if (!arr || approx > AGENT_MAX_PACKET - 1024) {
                cJSON_Delete(res);
                return arr ? -EFBIG : -ENOMEM;
        }
        *ret = res;
        return 0;
}

/* Removes dfd/name and, for a directory, everything below it: fd-relative,
 * O_NOFOLLOW, never into a directory on another device than `dev` (a mount
 * point). Tries every entry and returns the first error. */
static int remove_tree(int dfd, const char *name, dev_t dev, int depth) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return negative_errno();
        if (!S_ISDIR(st.st_mode))
                return unlinkat(dfd, name, 0) < 0 ? negative_errno() : 0;
        if (depth > FS_MAX_DEPTH)
                return -ELOOP;
        if (depth > 0 && st.st_dev != dev)
                return -EXDEV;
        int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                close(fd);
                return negative_errno();
        }
        int r = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                int k = remove_tree(dirfd(d), de->d_name, st.st_dev, depth + 1);
                if (r == 0 && k < 0)
                        r = k;
        }
        if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && r == 0)
                r = negative_errno();
        return r;
}

static int fs_remove(char *path, const cJSON *req) {
        const char *name;
        _cleanup_close_ int dfd = open_parent(path, &name);
        if (dfd < 0)
                return dfd;
        if (streq(name, ".") || streq(name, ".."))
                return -EINVAL;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "recursive")))
                return remove_tree(dfd, name, 0, 0);
        if (unlinkat(dfd, name, 0) == 0)
                return 0;
        if (errno != EISDIR)
                return negative_errno();
        return unlinkat(dfd, name, AT_REMOVEDIR) < 0 ? negative_errno() : 0;
}

/* Absolute path for a request path: relative ones under workspace, repeated
 * and trailing slashes dropped (so the last component is never empty). */
char *init_fs_path(const char *p, const char *workspace) {
        _cleanup_free_ char *joined = NULL;
        if (asprintf(&joined, "%s/%s", p[0] == '/' ? "" : workspace, p) < 0)
                return NULL;
        char *out = malloc(strlen(joined) + 2), *w = out;
        if (!out)
                return NULL;
        for (const char *r = joined; *r; r++)
                if (*r != '/' || w == out || w[-1] != '/')
                        *w++ = *r;
        if (w > out + 1 && w[-1] == '/')
                w--;
        if (w == out)
                *w++ = '/';
        *w = 0;
        return out;
}

static int dispatch(const char *action, char *path, const cJSON *req, cJSON **ret) {
        if (streq(action, "stat"))
                return fs_stat(path, ret);
        if (streq(action, "list"))
                return fs_list(path, ret);
        if (streq(action, "read"))
                return fs_read(path, req, ret);
        int r;
        if (streq(action, "write"))
                r = fs_write(path, req);
        else if (streq(action, "mkdir"))
                r = fs_mkdir(path, req);
        else if (streq(action, "remove"))
                r = fs_remove(path, req);
        else
                return -EOPNOTSUPP;
        if (r < 0)
                return r;
        *ret = cJSON_CreateObject();
        /* Said back, so the daemon knows this init set them (an older
         * one would ignore the field). */
        if (*ret && streq(action, "write") && cJSON_GetObjectItemCaseSensitive(req, "xattrs"))
                cJSON_AddBoolToObject(*ret, "xattrs", true);
        return *ret ? 0 : -ENOMEM;
}

int init_fs_handle(const cJSON *req, const char *workspace, cJSON **ret_result, char **ret_message) {
        const char *action = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "action"));
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "path"));
        if (!action || !p || !*p || strlen(p) >= 4096) {
                *ret_message = strdup("fs: \"action\" and \"path\" must be non-empty strings");
                return -EINVAL;
        }
        _cleanup_free_ char *path = init_fs_path(p, workspace);
        if (!path) {
                *ret_message = NULL;
                return -ENOMEM;
        }
        /* fsgid first, fsuid last; restored in the opposite order. Changing
         * the fsuid from 0 drops CAP_DAC_OVERRIDE and the other file
         * capabilities for the call (capabilities(7)); back to 0 restores
         * them. */
        bool root = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "sudo"));
        uid_t old_gid = (uid_t)setfsgid(root ? 0 : init_user_gid);
        uid_t old_uid = (uid_t)setfsuid(root ? 0 : init_user_uid);
        cJSON *result = NULL;
        int r = dispatch(action, path, req, &result);
        /* Said back, so the daemon knows this init did it as root (an
         * older one would ignore the field and act as the sandbox user). */
        if (r >= 0 && root && result)
                cJSON_AddBoolToObject(result, "sudo", true);
        (void)setfsuid(old_uid);
        (void)setfsgid((gid_t)old_gid);
        if (r < 0) {
                if (asprintf(ret_message, "fs.%s %s: %s", action, path,
                             r == -EOPNOTSUPP ? "unknown action" : strerror(-r)) < 0)
                        *ret_message = NULL;
                return r;
        }
        *ret_result = result;
        return 0;
}
