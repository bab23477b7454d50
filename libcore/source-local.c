/* Local sources: tarball paths, file:// tarballs and file:// git
 * repositories on the daemon's host (see source.h).
 *
 * Threat: a caller names a host path, or a repository under an allowed
 * directory is made of links (objects -> another repository's objects,
 * refs -> ..., objects/info/alternates naming another path, a .git file or
 * commondir pointing elsewhere), so that files of another repository or
 * account end up in a sandbox's /workspace. Rules:
 *   - a local path is read only when it lies under one of the operator's
 *     localSourceRoots (daemon.json; none by default);
 *   - the root is opened without following any symlink, and the path below
 *     it is resolved from the root's fd with openat2(RESOLVE_BENEATH |
 *     RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS): no symlinked component,
 *     no "..", no magic link, whatever is swapped in meanwhile;
 *   - a git repository is never read by libgit2 in place: its git dir is
 *     first copied (HEAD, packed-refs, refs/, objects/) into a private
 *     directory, every directory and file opened the same way from its
 *     parent's fd, so a symlink anywhere, an alternates file, a gitfile or
 *     commondir fails the copy with the path named. libgit2 then clones
 *     from the copy, which holds only what was checked. The copy runs on
 *     the confined thread (fsuid = the sandbox user), so even a repository
 *     changed during the copy yields nothing that user could not read.
 *     The repository's own config (include.path, core.worktree, ...) is
 *     never read: the copy gets a minimal one. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/fsuid.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "libcore/source-internal.h"
#include "libcore/util.h"

#define REASON "source_failed"
/* Directory depth of a git dir copy: refs/heads/a/b/... and objects/xx. */
#define MAX_COPY_DEPTH 32
/* Entries of a git dir copy: loose objects and refs of a big repository
 * fit; an inode flood of empty files does not. */
#define MAX_COPY_ENTRIES (1U << 20)

static int openat2_resolve(int dirfd, const char *path, int flags, uint64_t resolve) {
        struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .resolve = resolve};
        int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        return fd < 0 ? negative_errno() : fd;
}

static int openat2_beneath(int dirfd, const char *path, int flags) {
        return openat2_resolve(dirfd, path, flags, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

/* Absolute, and no "." or ".." component: the comparison with the roots is
 * on the text, so the text must mean what it says. */
static bool plain_absolute(const char *p) {
        if (p[0] != '/')
                return false;
        for (const char *c = p; *c;) {
                while (*c == '/')
                        c++;
                size_t n = strcspn(c, "/");
                if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += n;
        }
        return true;
}

/* The part of path below root ("." for root itself), or NULL. */
static const char *below_root(const char *root, const char *path) {
        size_t n = strlen(root);
        while (n > 1 && root[n - 1] == '/')
                n--;
        if (strncmp(path, root, n) != 0 || (path[n] != '/' && path[n] != '\0' && !(n == 1 && root[0] == '/')))
                return NULL;
        const char *rest = path + n;
        while (*rest == '/')
                rest++;
        return *rest ? rest : ".";
}

int source_local_open(const char *const *roots, const char *path, int flags, const char *field,
                      sb_error **ret_err) {
        if (!plain_absolute(path))
                return sb_error_set(ret_err, -EINVAL, REASON, field,
                                    "%s: '%s' must be an absolute path without '.' or '..' components", field, path);
        for (size_t i = 0; roots && roots[i]; i++) {
                const char *rest = below_root(roots[i], path);
                if (!rest)
                        continue;
                _cleanup_close_ int rootfd = openat2_resolve(AT_FDCWD, roots[i], O_PATH | O_DIRECTORY,
                                                             RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
                if (rootfd == -ELOOP)
                        return sb_error_set(ret_err, -ELOOP, REASON, field,
                                            "%s: localSourceRoots entry '%s' has a symlink in its path; the "
                                            "operator must list the real directory",
                                            field, roots[i]);
                if (rootfd < 0)
                        return sb_error_set(ret_err, rootfd, REASON, field,
                                            "%s: open localSourceRoots entry '%s': %s", field, roots[i],
                                            strerror(-rootfd));
                int fd = openat2_beneath(rootfd, rest, flags);
                if (fd == -ELOOP || fd == -EXDEV)
                        return sb_error_set(ret_err, -ELOOP, REASON, field,
                                            "%s: '%s' has a symlink on the way below '%s'; local sources are "
                                            "never read through symlinks",
                                            field, path, roots[i]);
                if (fd < 0)
                        return sb_error_set(ret_err, fd, REASON, field, "%s: open '%s': %s", field, path,
                                            strerror(-fd));
                return fd;
        }
        if (!roots || !roots[0])
                return sb_error_set(ret_err, -EACCES, REASON, field,
                                    "%s: local sources are off: localSourceRoots in daemon.json lists no "
                                    "directory (the default); the operator may list the directories local "
                                    "sources may come from, or use an http(s) or git URL",
                                    field);
        return sb_error_set(ret_err, -EACCES, REASON, field,
                            "%s: '%s' is not under a directory listed in localSourceRoots (daemon.json)", field,
                            path);
}

int core_source_local_open(const char *const *roots, const char *path, int flags, const char *field,
                           sb_error **ret_err) {
        return source_local_open(roots, path, flags, field, ret_err);
}

/* ---- opening as a local user ------------------------------------------------ */

typedef struct peer_call {
        const core_peer *peer;
        int (*fn)(void *);
        void *userdata;
        int r;
        bool ran;
} peer_call;

/* Groups and fsgid before fsuid: dropping fsuid to non-zero clears the
 * filesystem capabilities. */
static void *peer_main(void *p) {
        peer_call *c = p;
        if (syscall(SYS_setgroups, c->peer->n_groups, c->peer->groups) < 0) {
                c->r = negative_errno();
                return NULL;
        }
        setfsgid(c->peer->gid);
        setfsuid(c->peer->uid);
        /* setfsuid/setfsgid report no error; read back to be sure. */
        if ((uid_t)setfsuid((uid_t)-1) != c->peer->uid || (gid_t)setfsgid((gid_t)-1) != c->peer->gid) {
                c->r = -EPERM;
                return NULL;
        }
        c->ran = true;
        c->r = c->fn(c->userdata);
        return NULL;
}

int core_run_as_peer(const core_peer *peer, int (*fn)(void *userdata), void *userdata, sb_error **ret_err) {
        peer_call c = {.peer = peer, .fn = fn, .userdata = userdata, .r = -EIO};
        pthread_t t;
        int r = pthread_create(&t, NULL, peer_main, &c);
        if (r != 0)
                return sb_error_set(ret_err, -r, REASON, NULL, "start a thread: %s", strerror(r));
        pthread_join(t, NULL);
        if (!c.ran)
                return sb_error_set(ret_err, c.r, REASON, NULL, "take the identity of uid %u gid %u: %s",
                                    (unsigned)peer->uid, (unsigned)peer->gid, strerror(-c.r));
        return c.r;
}

static __thread const core_peer *thread_peer;

void core_source_set_local_peer(const core_peer *peer) {
        thread_peer = peer;
}

const core_peer *source_local_peer(void) {
        return thread_peer;
}

/* ---- git dir copy ------------------------------------------------------------ */

typedef struct copy_ctx {
        uint64_t left;         /* bytes still allowed */
        unsigned entries;      /* entries copied so far */
        sb_error **err;
} copy_ctx;

static int copy_refused(copy_ctx *c, const char *shown, const char *why) {
        return sb_error_set(c->err, -ELOOP, REASON, "source.url",
                            "source.url: local repository: '%s' %s; local repositories must be plain "
                            "directories and files, with no symlinks and no alternates",
                            shown, why);
}

static int copy_file(copy_ctx *c, int src_dir, int dst_dir, const char *name, const char *shown) {
        /* O_NONBLOCK: a FIFO swapped in after the lstat must not block. */
        _cleanup_close_ int in = openat2_beneath(src_dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
        if (in == -ELOOP || in == -EXDEV)
                return copy_refused(c, shown, "is a symlink");
        if (in < 0)
                return sb_error_set(c->err, in, REASON, "source.url", "source.url: open '%s': %s", shown,
                                    strerror(-in));
        struct stat st;
        if (fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
                return copy_refused(c, shown, "is not a regular file");
        if ((uint64_t)st.st_size > c->left)
                return sb_error_set(c->err, -EFBIG, REASON, "source.url",
                                    "source.url: local repository is larger than the source limit (maxSourceBytes)");
        _cleanup_close_ int out = openat(dst_dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (out < 0)
                return sb_error_set(c->err, negative_errno(), REASON, NULL, "copy '%s': %m", shown);
        char buf[64 * 1024];
        for (;;) {
                ssize_t n = read(in, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return sb_error_set(c->err, negative_errno(), REASON, NULL, "read '%s': %m", shown);
                if (n == 0)
                        return 0;
                if ((uint64_t)n > c->left)
                        return sb_error_set(c->err, -EFBIG, REASON, "source.url",
                                            "source.url: local repository is larger than the source limit "
                                            "(maxSourceBytes)");
                c->left -= (uint64_t)n;
                for (ssize_t o = 0; o < n;) {
                        ssize_t w = write(out, buf + o, (size_t)(n - o));
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w < 0)
                                return sb_error_set(c->err, negative_errno(), REASON, NULL, "copy '%s': %m", shown);
                        o += w;
                }
        }
}

static int copy_entry(copy_ctx *c, int src_dir, int dst_dir, const char *name, const char *shown, unsigned depth);

/* Copies directory src_dir/name (opened beneath src_dir, no symlinks) to
 * dst_dir/name, entry by entry. */
static int copy_dir(copy_ctx *c, int src_dir, int dst_dir, const char *name, const char *shown, unsigned depth) {
        if (depth > MAX_COPY_DEPTH)
                return copy_refused(c, shown, "is nested too deep");
        _cleanup_close_ int in = openat2_beneath(src_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (in == -ELOOP || in == -EXDEV)
                return copy_refused(c, shown, "is a symlink");
        if (in < 0)
                return sb_error_set(c->err, in, REASON, "source.url", "source.url: open '%s': %s", shown,
                                    strerror(-in));
        if (mkdirat(dst_dir, name, 0755) < 0)
                return sb_error_set(c->err, negative_errno(), REASON, NULL, "copy '%s': %m", shown);
        _cleanup_close_ int out = openat2_beneath(dst_dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (out < 0)
                return sb_error_set(c->err, out, REASON, NULL, "copy '%s': %s", shown, strerror(-out));
        int dfd = fcntl(in, F_DUPFD_CLOEXEC, 0);
        DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d) {
                if (dfd >= 0)
                        close(dfd);
                return sb_error_set(c->err, -errno, REASON, NULL, "read '%s': %m", shown);
        }
        int r = 0;
        struct dirent *de;
        while (r >= 0 && (de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                _cleanup_free_ char *sub = NULL;
                if (asprintf(&sub, "%s/%s", shown, de->d_name) < 0) {
                        r = sb_error_set(c->err, -ENOMEM, NULL, NULL, "out of memory");
                        break;
                }
                r = copy_entry(c, in, out, de->d_name, sub, depth + 1);
        }
        closedir(d);
        return r;
}

/* Objects found by path alone, never copied: each names another place
 * objects are read from (gitrepository-layout(5)). */
static const char *const link_files[] = {"alternates", "http-alternates"};

static int copy_entry(copy_ctx *c, int src_dir, int dst_dir, const char *name, const char *shown, unsigned depth) {
        struct stat st;
        if (++c->entries > MAX_COPY_ENTRIES)
                return sb_error_set(c->err, -EFBIG, REASON, "source.url",
                                    "source.url: local repository has more than %u files", MAX_COPY_ENTRIES);
        if (fstatat(src_dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return sb_error_set(c->err, negative_errno(), REASON, "source.url", "source.url: stat '%s': %m",
                                    shown);
        if (S_ISLNK(st.st_mode))
                return copy_refused(c, shown, "is a symlink");
        size_t sl = strlen(shown), nl = strlen(name);
        bool in_objects_info = sl >= nl + 13 && strncmp(shown + sl - nl - 13, "objects/info/", 13) == 0;
        for (size_t i = 0; in_objects_info && i < ELEMENTSOF(link_files); i++)
                if (streq(name, link_files[i]))
                        return copy_refused(c, shown, "names other object directories");
        if (S_ISDIR(st.st_mode))
                return copy_dir(c, src_dir, dst_dir, name, shown, depth);
        if (S_ISREG(st.st_mode))
                return copy_file(c, src_dir, dst_dir, name, shown);
        return copy_refused(c, shown, "is not a regular file or directory");
}

/* Names in a git dir checked (never a symlink; the link files refused) even
 * when not copied, so the answer is the same whatever git would read. */
static const char *const checked[] = {"config", "info", "commondir", "gitdir", "shallow"};
/* What the copy holds; HEAD, refs and objects must exist. */
static const char *const copied[] = {"HEAD", "refs", "objects", "packed-refs"};

static int copy_git_dir(copy_ctx *c, int gitdir, int dst, const char *shown) {
        for (size_t i = 0; i < ELEMENTSOF(checked); i++) {
                struct stat st;
                if (fstatat(gitdir, checked[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                _cleanup_free_ char *sub = NULL;
                if (asprintf(&sub, "%s/%s", shown, checked[i]) < 0)
                        return sb_error_set(c->err, -ENOMEM, NULL, NULL, "out of memory");
                if (S_ISLNK(st.st_mode))
                        return copy_refused(c, sub, "is a symlink");
                if (streq(checked[i], "commondir") || streq(checked[i], "gitdir"))
                        return copy_refused(c, sub, "points to another git directory");
                if (streq(checked[i], "info") && S_ISDIR(st.st_mode)) {
                        _cleanup_close_ int info = openat2_beneath(gitdir, "info", O_PATH | O_DIRECTORY);
                        if (info < 0)
                                return copy_refused(c, sub, "cannot be opened without following a link");
                        for (size_t k = 0; k < ELEMENTSOF(link_files); k++)
                                if (fstatat(info, link_files[k], &st, AT_SYMLINK_NOFOLLOW) == 0)
                                        return copy_refused(c, sub, "holds an alternates file");
                }
        }
        for (size_t i = 0; i < ELEMENTSOF(copied); i++) {
                struct stat st;
                _cleanup_free_ char *sub = NULL;
                if (asprintf(&sub, "%s/%s", shown, copied[i]) < 0)
                        return sb_error_set(c->err, -ENOMEM, NULL, NULL, "out of memory");
                if (fstatat(gitdir, copied[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno == ENOENT && streq(copied[i], "packed-refs"))
                                continue;
                        return sb_error_set(c->err, negative_errno(), REASON, "source.url",
                                            "source.url: '%s' is not a git repository (%s: %m)", shown, sub);
                }
                int r = copy_entry(c, gitdir, dst, copied[i], sub, 0);
                if (r < 0)
                        return r;
        }
        static const char config[] = "[core]\n\trepositoryformatversion = 0\n\tbare = true\n";
        _cleanup_close_ int fd = openat(dst, "config", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, config, sizeof(config) - 1) != (ssize_t)(sizeof(config) - 1))
                return sb_error_set(c->err, fd < 0 ? negative_errno() : -EIO, REASON, NULL, "write config: %m");
        return 0;
}

int source_local_git_copy(const char *const *roots, const char *path, uint64_t max_bytes, char **ret_dir,
                          sb_error **ret_err) {
        _cleanup_close_ int repo = source_local_open(roots, path, O_PATH | O_DIRECTORY, "source.url", ret_err);
        if (repo < 0)
                return repo;
        /* A work tree's .git must be a directory: a .git file ("gitdir:
         * ...") names a git dir anywhere. Without one, path is a bare
         * repository. */
        _cleanup_close_ int gitdir = -EBADF;
        _cleanup_free_ char *shown = NULL;
        struct stat st;
        if (fstatat(repo, ".git", &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (!S_ISDIR(st.st_mode))
                        return sb_error_set(ret_err, -ELOOP, REASON, "source.url",
                                            "source.url: '%s/.git' is %s, not a directory; local repositories "
                                            "must hold their own git directory",
                                            path, S_ISLNK(st.st_mode) ? "a symlink" : "a file pointing elsewhere");
                gitdir = openat2_beneath(repo, ".git", O_PATH | O_DIRECTORY);
                if (asprintf(&shown, "%s/.git", path) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        } else {
                gitdir = openat2_beneath(repo, ".", O_PATH | O_DIRECTORY);
                shown = strdup(path);
        }
        if (gitdir < 0 || !shown)
                return sb_error_set(ret_err, gitdir < 0 ? gitdir : -ENOMEM, REASON, "source.url",
                                    "source.url: open the git directory of '%s': %s", path,
                                    strerror(gitdir < 0 ? -gitdir : ENOMEM));
        /* Private to the sandbox user (the confined thread's fsuid): made
         * by it in the sticky /var/tmp, removed by it afterwards. */
        _cleanup_free_ char *tmp = strdup("/var/tmp/sandboxd-git-XXXXXX");
        if (!tmp || !mkdtemp(tmp))
                return sb_error_set(ret_err, tmp ? negative_errno() : -ENOMEM, REASON, NULL,
                                    "create a temporary directory in /var/tmp: %m");
        _cleanup_close_ int dst = open(tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        copy_ctx c = {.left = max_bytes ? max_bytes : UINT64_MAX, .err = ret_err};
        int r = dst < 0 ? sb_error_set(ret_err, negative_errno(), REASON, NULL, "open %s: %m", tmp)
                        : copy_git_dir(&c, gitdir, dst, shown);
        if (r < 0) {
                core_rm_rf(tmp);
                return r;
        }
        *ret_dir = TAKE_PTR(tmp);
        return 0;
}
