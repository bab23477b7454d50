/* Small helpers: base64, time, names, atomic writes, rm -rf (see util.h). */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include "libcore/base64.h"
#include "libcore/fault.h"
#include "libcore/util.h"

char *core_base64_encode(const void *data, size_t len) {
        return base64_encode(data, len);
}

int core_base64_decode(const char *text, void **ret_data, size_t *ret_len) {
        return base64_decode(text, ret_data, ret_len);
}

uint64_t core_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t core_monotonic_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

char *core_format_time(uint64_t epoch_ms, char *buf, size_t size) {
        time_t t = (time_t)(epoch_ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        char base[24];
        strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(buf, size, "%s.%03uZ", base, (unsigned)(epoch_ms % 1000));
        return buf;
}

uint64_t core_parse_time(const char *text) {
        struct tm tm = {0};
        unsigned ms = 0;
        if (!text)
                return 0;
        const char *rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
        if (rest && *rest == '.')
                ms = (unsigned)strtoul(rest + 1, NULL, 10) % 1000;
        return rest ? (uint64_t)timegm(&tm) * 1000 + ms : 0;
}

bool core_name_is_valid(const char *name) {
        size_t n = name ? strlen(name) : 0;
        if (n < 1 || n > 63)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                if (!alnum && !(i > 0 && c == '-'))
                        return false;
        }
        return true;
}

void core_random_hex(char *buf, size_t nchars) {
        static const char hex[] = "0123456789abcdef";
        unsigned char r[64];
        if (nchars > sizeof(r))
                nchars = sizeof(r);
        if (getrandom(r, nchars, 0) != (ssize_t)nchars)
                for (size_t i = 0; i < nchars; i++)
                        r[i] = (unsigned char)(random() & 0xff);
        for (size_t i = 0; i < nchars; i++)
                buf[i] = hex[r[i] & 0xf];
        buf[nchars] = 0;
}

/* The temporary name of write_file_replace(): "<name>" WRITE_TEMP_INFIX
 * and WRITE_TEMP_HEX lowercase hex digits. core_is_write_temp() must match
 * exactly what this writes. */
#define WRITE_TEMP_INFIX ".tmp-"
#define WRITE_TEMP_HEX 8
/* core_tombstone(): ".<name>" TOMBSTONE_INFIX "<16 hex>" */
#define TOMBSTONE_INFIX ".del-"

static int write_file_replace(const char *path, const void *data, size_t len, mode_t mode, bool durable) {
        _cleanup_free_ char *tmp = NULL;
        char rnd[WRITE_TEMP_HEX + 1];
        core_random_hex(rnd, WRITE_TEMP_HEX);
        if (asprintf(&tmp, "%s" WRITE_TEMP_INFIX "%s", path, rnd) < 0)
                return -ENOMEM;
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return negative_errno();
        const char *p = data;
        while (len > 0) {
                ssize_t w = write(fd, p, len);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        int r = negative_errno();
                        unlink(tmp);
                        return r;
                }
                p += w;
                len -= (size_t)w;
        }
        {
                /* Fault point "write.temp_written:<directory's name>". */
                char point[96];
                const char *end = strrchr(path, '/'), *start = end;
                while (start && start > path && start[-1] != '/')
                        start--;
                if (end && end - start < 64) {
                        snprintf(point, sizeof(point), "write.temp_written:%.*s", (int) (end - start), start);
                        core_fault(point);
                }
        }
        if ((durable && fsync(fd) < 0) || rename(tmp, path) < 0) {
                int r = negative_errno();
                unlink(tmp);
                return r;
        }
        return 0;
}

int core_write_all(int fd, const void *p, size_t len) {
        const char *c = p;
        while (len > 0) {
                ssize_t n = write(fd, c, len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                c += n;
                len -= (size_t)n;
        }
        return 0;
}

int core_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode) {
        return write_file_replace(path, data, len, mode, true);
}

int core_write_file_replace(const char *path, const void *data, size_t len, mode_t mode) {
        return write_file_replace(path, data, len, mode, false);
}

int core_tombstone(const char *parent, const char *name, char **ret_path) {
        return core_tombstone_ex(parent, name, true, ret_path);
}

int core_tombstone_ex(const char *parent, const char *name, bool durable, char **ret_path) {
        char hex[17];
        core_random_hex(hex, 16);
        _cleanup_free_ char *from = NULL, *to = NULL;
        if (asprintf(&from, "%s/%s", parent, name) < 0 || asprintf(&to, "%s/.%s" TOMBSTONE_INFIX "%s", parent, name, hex) < 0)
                return -ENOMEM;
        if (rename(from, to) < 0)
                return negative_errno();
        int dfd = durable ? open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -EBADF;
        if (dfd >= 0) {
                (void) fsync(dfd);
                close(dfd);
        }
        if (ret_path)
                *ret_path = TAKE_PTR(to);
        return 0;
}

bool core_is_tombstone(const char *name) {
        return name[0] == '.' && strstr(name + 1, TOMBSTONE_INFIX) != NULL;
}

bool core_is_write_temp(const char *name) {
        size_t n = strlen(name), tail = strlen(WRITE_TEMP_INFIX) + WRITE_TEMP_HEX;
        if (n <= tail || strncmp(name + n - tail, WRITE_TEMP_INFIX, strlen(WRITE_TEMP_INFIX)) != 0)
                return false;
        for (const char *p = name + n - WRITE_TEMP_HEX; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

int core_remove_write_temps(const char *dir) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT ? 0 : negative_errno();
        DIR *d = fdopendir(dfd);
        if (!d) {
                int r = negative_errno();
                close(dfd);
                return r;
        }
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct stat st;
                if (!core_is_write_temp(de->d_name) ||
                    fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                if (unlinkat(dfd, de->d_name, 0) == 0)
                        n++;
        }
        closedir(d);
        return n;
}

int core_read_file(const char *path, size_t max_bytes, char **ret_data, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        size_t cap = max_bytes < 4096 ? max_bytes : 4096, len = 0;
        _cleanup_free_ char *buf = malloc(cap + 1);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                if (len == cap) {
                        if (cap >= max_bytes) {
                                /* Full: anything more is over the limit. */
                                char extra;
                                ssize_t r = read(fd, &extra, 1);
                                if (r < 0)
                                        return negative_errno();
                                if (r > 0)
                                        return -EFBIG;
                                break;
                        }
                        cap = cap * 2 > max_bytes ? max_bytes : cap * 2;
                        char *nb = realloc(buf, cap + 1);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                }
                ssize_t r = read(fd, buf + len, cap - len);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (r == 0)
                        break;
                len += (size_t)r;
        }
        buf[len] = 0;
        if (ret_len)
                *ret_len = len;
        *ret_data = TAKE_PTR(buf);
        return 0;
}

int core_mkdir_p(const char *path, mode_t mode) {
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = 0;
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return negative_errno();
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return negative_errno();
        return 0;
}

/* Directory levels one removal holds open at once. A tree deeper than this
 * (root inside a sandbox can nest directories without limit) has its
 * deeper part moved up under the top directory and removed in the next
 * pass, so neither the stack nor the fds used grow with its depth. */
#define RM_MAX_DEPTH 128

typedef struct rm_ctx {
        dev_t dev;          /* the tree's filesystem: other mounts are not entered */
        int top;            /* the directory being emptied, for subtrees moved up */
        unsigned moved;     /* subtrees moved up in this pass */
} rm_ctx;

static int rm_rf_at(rm_ctx *c, int dfd, unsigned depth) {
        _cleanup_closedir_ DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return negative_errno();
        }
        /* The top's fd is a dup sharing its offset with the last pass's. */
        rewinddir(d);
        int ret = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                        if (errno != ENOENT && !ret)
                                ret = negative_errno();
                        continue;
                }
                if (!S_ISDIR(st.st_mode)) {
                        if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT && !ret)
                                ret = negative_errno();
                        continue;
                }
                if (st.st_dev != c->dev) {
                        if (!ret)
                                ret = -EXDEV;
                        continue;
                }
                if (depth >= RM_MAX_DEPTH) {
                        /* renameat moves the entry itself, never what it
                         * might point to. */
                        char name[32], rnd[17];
                        core_random_hex(rnd, 16);
                        snprintf(name, sizeof(name), ".rm-deep-%s", rnd);
                        if (renameat(dirfd(d), de->d_name, c->top, name) == 0)
                                c->moved++;
                        else if (!ret)
                                ret = negative_errno();
                        continue;
                }
                /* Beneath this directory's fd, no symlink followed, and the
                 * very directory fstatat saw (same inode and filesystem): a
                 * swap for a link or a mount point meanwhile is refused,
                 * never descended into. */
                int sub = core_open_beneath(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY, 0);
                struct stat held;
                if (sub >= 0 && (fstat(sub, &held) < 0 || held.st_dev != c->dev || held.st_ino != st.st_ino)) {
                        close(sub);
                        sub = -ESTALE;
                }
                if (sub < 0) {
                        if (!ret)
                                ret = sub;
                        continue;
                }
                int r = rm_rf_at(c, sub, depth + 1);
                if (r < 0 && !ret)
                        ret = r;
                if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT && errno != ENOTEMPTY &&
                    !ret)
                        ret = negative_errno();
        }
        return ret;
}

int core_rm_rf(const char *path) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return errno == ENOENT ? 0 : negative_errno();
        if (!S_ISDIR(st.st_mode))
                return unlink(path) < 0 && errno != ENOENT ? negative_errno() : 0;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        struct stat held;
        if (fstat(fd, &held) < 0 || held.st_dev != st.st_dev || held.st_ino != st.st_ino)
                return -ESTALE;
        rm_ctx c = {.dev = st.st_dev, .top = fd};
        int r = 0;
        /* Each pass removes what lies within RM_MAX_DEPTH levels and moves
         * what is deeper up to the top; a pass that moved nothing was the
         * last. (A directory moved while a pass reads the top one may be
         * seen by it or not: the next pass gets it either way.) */
        do {
                c.moved = 0;
                int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                int k = dup_fd < 0 ? negative_errno() : rm_rf_at(&c, dup_fd, 0);
                if (k < 0 && !r)
                        r = k;
                if (dup_fd < 0)
                        break;
        } while (c.moved);
        if (rmdir(path) < 0 && errno != ENOENT && !r)
                r = negative_errno();
        return r;
}

int core_open_beneath(int dirfd, const char *path, int flags, mode_t mode) {
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        /* EAGAIN: a rename elsewhere on the filesystem raced the lookup
         * (openat2(2)); retried a few times, never forever, since a sandbox
         * that runs could keep renaming. */
        int fd = -1;
        for (int tries = 0; tries < 32; tries++) {
                fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
                if (fd >= 0 || errno != EAGAIN)
                        break;
        }
        return fd < 0 ? negative_errno() : fd;
}

int core_mkdir_beneath(int dirfd, const char *path, mode_t mode) {
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return negative_errno();
        char *save = NULL;
        for (char *c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                /* One component at a time from the fd already checked, so a
                 * link anywhere is refused, not only at the end. */
                if (mkdirat(fd, c, mode) < 0 && errno != EEXIST) {
                        int r = negative_errno();
                        close(fd);
                        return r;
                }
                int sub = core_open_beneath(fd, c, O_RDONLY | O_DIRECTORY, 0);
                close(fd);
                if (sub < 0)
                        return sub;
                fd = sub;
        }
        return fd;
}

int core_write_file_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode, bool durable) {
        char tmp[NAME_MAX + 1], rnd[9];
        if (strchr(name, '/') || streq(name, ".") || streq(name, "..") || strlen(name) + 14 > NAME_MAX)
                return -EINVAL;
        core_random_hex(rnd, 8);
        snprintf(tmp, sizeof(tmp), ".%s.tmp-%s", name, rnd);
        _cleanup_close_ int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return negative_errno();
        const char *p = data;
        int r = 0;
        while (len > 0 && r == 0) {
                ssize_t w = write(fd, p, len);
                if (w < 0 && errno != EINTR)
                        r = negative_errno();
                else if (w > 0) {
                        p += w;
                        len -= (size_t)w;
                }
        }
        /* The mode as asked, whatever the umask took away. */
        if (r == 0 && fchmod(fd, mode) < 0)
                r = negative_errno();
        if (r == 0 && durable && fsync(fd) < 0)
                r = negative_errno();
        if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
                r = negative_errno();
        if (r < 0)
                (void)unlinkat(dirfd, tmp, 0);
        return r;
}

const char *core_beneath_strerror(int r) {
        switch (r) {
        case -ELOOP: return "is a symbolic link or lies under one";
        case -EXDEV: return "leads outside the sandbox's files";
        case -ENOTDIR: return "is not a directory, or lies under something that is not";
        case -EISDIR: return "is a directory";
        default: return strerror(-r);
        }
}

void core_signals_reset(void) {
        /* rt_sigaction(2) itself, not glibc's sigaction(), which refuses
         * the two real-time signals it reserves (32 and 33, EINVAL): a
         * SIG_IGN inherited for them across exec would stay. The kernel's
         * struct for SIG_DFL: handler, flags, restorer, mask, all zero but
         * the handler (arch/x86/include/uapi/asm/signal.h). */
        struct {
                void (*handler)(int);
                unsigned long flags;
                void (*restorer)(void);
                unsigned long mask;
        } dfl = { .handler = SIG_DFL };
        for (int sig = 1; sig < _NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        (void)syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
        sigset_t none;
        sigemptyset(&none);
        (void)sigprocmask(SIG_SETMASK, &none, NULL);
}

int core_write_string(const char *path, const char *s) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negative_errno();
        size_t n = strlen(s);
        ssize_t w = write(fd, s, n);
        if (w < 0)
                return negative_errno();
        return (size_t)w == n ? 0 : -EIO;
}

extern char **environ;

/* Initialises *attr so that the child starts with no signal blocked and
 * every disposition at its default: the caller may block signals for its
 * own loop (sandboxd blocks SIGTERM, SIGINT and SIGCHLD for sd-event), and
 * a child that kept them would never see the SIGTERM that stops it. The
 * caller destroys *attr (posix_spawnattr_destroy). */
static void spawnattr_clean_signals(posix_spawnattr_t *attr) {
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        posix_spawnattr_init(attr);
        posix_spawnattr_setsigmask(attr, &none);
        posix_spawnattr_setsigdefault(attr, &all);
        posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

int core_spawn_helper(const char *path, char *const argv[], int *ret_out, int *ret_in, pid_t *ret_pid,
                      sb_error **ret_err) {
        int p[2], q[2] = {-EBADF, -EBADF};
        if (pipe2(p, O_CLOEXEC) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
        if (ret_in && pipe2(q, O_CLOEXEC) < 0) {
                int r = negative_errno();
                close(p[0]);
                close(p[1]);
                return sb_error_set(ret_err, r, NULL, NULL, "pipe: %s", strerror(-r));
        }
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        if (ret_in)
                posix_spawn_file_actions_adddup2(&fa, q[0], 0);
        else
                posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, p[1], 1);
        /* Everything else of the daemon's is O_CLOEXEC; this makes sure. */
        posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        posix_spawnattr_t attr;
        spawnattr_clean_signals(&attr);
        char *const envp[] = {NULL};
        pid_t pid;
        int r = posix_spawn(&pid, path, &fa, &attr, argv, envp);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
        close(p[1]);
        if (ret_in)
                close(q[0]);
        if (r != 0) {
                close(p[0]);
                if (ret_in)
                        close(q[1]);
                return sb_error_set(ret_err, -r, NULL, NULL, "start %s: %s", path, strerror(r));
        }
        *ret_out = p[0];
        if (ret_in)
                *ret_in = q[1];
        *ret_pid = pid;
        return 0;
}

static bool path_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-' || c == '/' || c == '+' || c == '@' || c == '~';
}

char *core_redact_path(const char *s, const char *prefix, const char *with) {
        size_t n = prefix ? strlen(prefix) : 0;
        while (n > 1 && prefix[n - 1] == '/')
                n--;
        if (n <= 1)
                return strdup(s); /* no prefix, or "/": nothing that names one directory */
        size_t wn = strlen(with), cap = strlen(s) + 1, out_n = 0;
        for (const char *p = s; (p = memmem(p, strlen(p), prefix, n)); p += n)
                cap += wn; /* at most one replacement per occurrence */
        char *out = malloc(cap);
        if (!out)
                return NULL;
        for (const char *p = s; *p;) {
                bool starts = (p == s || !path_char(p[-1])) && strncmp(p, prefix, n) == 0 &&
                              (p[n] == '/' || !path_char(p[n]));
                if (starts) {
                        memcpy(out + out_n, with, wn);
                        out_n += wn;
                        p += n;
                } else
                        out[out_n++] = *p++;
        }
        out[out_n] = '\0';
        return out;
}

bool core_path_is_plain_absolute(const char *s) {
        bool ok = s && s[0] == '/' && s[strspn(s, "/")] != '\0';
        for (const char *c = s; ok && *c;) {
                while (*c == '/')
                        c++;
                size_t n = strcspn(c, "/");
                ok = !((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'));
                c += n;
        }
        return ok;
}

bool core_path_is_within(const char *path, const char *dir) {
        if (!path || !dir || path[0] != '/' || dir[0] != '/')
                return false;
        for (;;) {
                while (*path == '/')
                        path++;
                while (*dir == '/')
                        dir++;
                if (!*dir)
                        return true;
                size_t n = strcspn(dir, "/");
                if (strncmp(path, dir, n) != 0 || (path[n] != '/' && path[n] != '\0'))
                        return false;
                path += n;
                dir += n;
        }
}

int core_run_quiet(const char *path, char *const argv[], int *ret_status) {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        posix_spawnattr_t attr;
        spawnattr_clean_signals(&attr);
        char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
        pid_t pid;
        int r = posix_spawn(&pid, path, &fa, &attr, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (r != 0)
                return -r;
        while (waitpid(pid, ret_status, 0) < 0)
                if (errno != EINTR)
                        return negative_errno();
        return 0;
}

/* clone3(2) arguments (include/uapi/linux/sched.h, struct clone_args). */
struct helper_clone_args {
        uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
                set_tid_size, cgroup;
};
#define HELPER_CLONE_INTO_CGROUP 0x200000000ULL

/* Puts fd `from` on `to` without O_CLOEXEC (dup2 of an fd onto itself
 * keeps the flag). Child side: system calls only. */
static int helper_move_fd(int from, int to) {
        if (from == to)
                return fcntl(to, F_SETFD, 0);
        return dup2(from, to) < 0 ? -1 : 0;
}

/* Child side of core_spawn_helper_in, a fork of a threaded process:
 * async-signal-safe calls only (signal(7)), then exec. */
_noreturn_ static void helper_child(const char *path, char *const argv[], int in_fd, int out_fd, int err_fd) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (int sig = 1; sig < NSIG; sig++)
                if (sig != SIGKILL && sig != SIGSTOP)
                        (void)sigaction(sig, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        int e = 0;
        if (sigprocmask(SIG_SETMASK, &none, NULL) < 0 || helper_move_fd(in_fd, 0) < 0 ||
            helper_move_fd(out_fd, 1) < 0 ||
            /* Everything else of the daemon's is O_CLOEXEC; this makes
             * sure (marked, not closed: err_fd must live until the exec). */
            syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) < 0)
                e = errno;
        if (!e) {
                char *const envp[] = {NULL};
                execve(path, argv, envp);
                e = errno;
        }
        (void)!write(err_fd, &e, sizeof(e));
        _exit(127);
}

int core_spawn_helper_in(const char *path, char *const argv[], int cgroup_fd, int *ret_out, int *ret_in,
                         pid_t *ret_pid, sb_error **ret_err) {
        _cleanup_close_ int out_r = -EBADF, out_w = -EBADF, in_r = -EBADF, in_w = -EBADF, err_r = -EBADF,
                            err_w = -EBADF;
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
        out_r = p[0], out_w = p[1];
        if (ret_in) {
                if (pipe2(p, O_CLOEXEC) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
                in_r = p[0], in_w = p[1];
        } else if ((in_r = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open /dev/null: %m");
        if (pipe2(p, O_CLOEXEC) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "pipe: %m");
        err_r = p[0], err_w = p[1];
        struct helper_clone_args args = {.exit_signal = SIGCHLD};
        if (cgroup_fd >= 0) {
                args.flags |= HELPER_CLONE_INTO_CGROUP;
                args.cgroup = (uint64_t)cgroup_fd;
        }
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0)
                helper_child(path, argv, in_r, out_w, err_w);
        if (pid < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "start %s: clone3: %m", path);
        close(TAKE_FD(err_w));
        int e = 0;
        ssize_t n;
        while ((n = read(err_r, &e, sizeof(e))) < 0 && errno == EINTR)
                ;
        if (n > 0) {
                /* It never ran the helper: reap it here. */
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                return sb_error_set(ret_err, -(e ? e : EIO), NULL, NULL, "start %s: %s", path, strerror(e ? e : EIO));
        }
        *ret_out = TAKE_FD(out_r);
        if (ret_in)
                *ret_in = TAKE_FD(in_w);
        *ret_pid = pid;
        return 0;
}

int core_read_line_timeout(int fd, char *buf, size_t size, int timeout_ms) {
        uint64_t deadline = core_monotonic_ms() + (uint64_t)timeout_ms;
        size_t len = 0;
        while (len + 1 < size) {
                uint64_t now = core_monotonic_ms();
                if (now >= deadline)
                        return -ETIMEDOUT;
                struct pollfd pfd = {.fd = fd, .events = POLLIN};
                int r = poll(&pfd, 1, (int)(deadline - now));
                if (r < 0 && errno != EINTR)
                        return negative_errno();
                if (r <= 0)
                        continue;
                char c;
                ssize_t n = read(fd, &c, 1);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return negative_errno();
                }
                if (n == 0)
                        return -EPIPE;
                if (c == '\n')
                        break;
                buf[len++] = c;
        }
        buf[len] = 0;
        return (int)len;
}

static char ascii_tolower(char c) {
        return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* Optimal string alignment distance of a and b (ASCII case folded), both at
 * most 64 bytes. */
static size_t osa_distance(const char *a, size_t la, const char *b, size_t lb) {
        size_t d[65][65];
        for (size_t i = 0; i <= la; i++)
                d[i][0] = i;
        for (size_t j = 0; j <= lb; j++)
                d[0][j] = j;
        for (size_t i = 1; i <= la; i++)
                for (size_t j = 1; j <= lb; j++) {
                        bool same = ascii_tolower(a[i - 1]) == ascii_tolower(b[j - 1]);
                        size_t v = d[i - 1][j - 1] + !same;
                        if (d[i - 1][j] + 1 < v)
                                v = d[i - 1][j] + 1;
                        if (d[i][j - 1] + 1 < v)
                                v = d[i][j - 1] + 1;
                        if (i > 1 && j > 1 && ascii_tolower(a[i - 1]) == ascii_tolower(b[j - 2]) &&
                            ascii_tolower(a[i - 2]) == ascii_tolower(b[j - 1]))
                                v = d[i - 2][j - 2] + 1 < v ? d[i - 2][j - 2] + 1 : v;
                        d[i][j] = v;
                }
        return d[la][lb];
}

int core_closest_word(const char *word, const char *const *candidates, size_t n) {
        size_t lw = strlen(word), best = SIZE_MAX;
        int best_i = -1;
        if (lw == 0 || lw > 64)
                return -1;
        for (size_t i = 0; i < n; i++) {
                size_t lc = strlen(candidates[i]);
                if (lc > 64)
                        continue;
                size_t d = osa_distance(word, lw, candidates[i], lc);
                size_t longest = lw > lc ? lw : lc, shorter = lw < lc ? lw : lc;
                size_t allowed = longest <= 4 ? 1 : longest <= 8 ? 2 : 3;
                bool prefix = shorter >= 3 && strncasecmp(word, candidates[i], shorter) == 0;
                if ((d <= allowed || prefix) && d < best) {
                        best = d;
                        best_i = (int)i;
                }
        }
        return best_i;
}

static _Thread_local const int *cancel_flag;

void core_cancel_bind(const int *flag) {
        cancel_flag = flag;
}

const int *core_cancel_current(void) {
        return cancel_flag;
}

bool core_cancel_requested(void) {
        return cancel_flag && __atomic_load_n(cancel_flag, __ATOMIC_ACQUIRE) == CORE_CANCEL_REQUESTED;
}

/* Whether the open file behind /proc/<pid>/<rel> is (dev, ino). */
static bool proc_link_is(int piddir, const char *rel, dev_t dev, ino_t ino) {
        struct stat st;
        return fstatat(piddir, rel, &st, 0) == 0 && st.st_dev == dev && st.st_ino == ino;
}

int core_lock_holder(int fd, pid_t *ret_pid, bool *ret_unexeced_child) {
        struct stat want, self, self_user, self_pid;
        if (fstat(fd, &want) < 0)
                return negative_errno();
        bool have_self = stat("/proc/self/exe", &self) == 0 && stat("/proc/self/ns/user", &self_user) == 0 &&
                         stat("/proc/self/ns/pid", &self_pid) == 0;
        DIR *proc = opendir("/proc");
        if (!proc)
                return 0;
        pid_t me = getpid(), child = 0;
        int found = 0;
        struct dirent *de;
        /* A holder that is not an un-exec'd child wins (a live daemon and
         * its child being cloned both hold the lock). */
        while (!found && (de = readdir(proc))) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                if (*end || pid <= 0 || pid == me)
                        continue;
                _cleanup_close_ int piddir = openat(dirfd(proc), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (piddir < 0)
                        continue;
                int fds = openat(piddir, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                DIR *fdd = fds >= 0 ? fdopendir(fds) : NULL;
                if (!fdd) {
                        if (fds >= 0)
                                close(fds);
                        continue;
                }
                struct dirent *fe;
                bool holds = false;
                while (!holds && (fe = readdir(fdd))) {
                        char rel[300];
                        if (fe->d_name[0] == '.')
                                continue;
                        snprintf(rel, sizeof(rel), "fd/%s", fe->d_name);
                        holds = proc_link_is(piddir, rel, want.st_dev, want.st_ino);
                }
                closedir(fdd);
                if (!holds)
                        continue;
                bool unexeced = have_self && proc_link_is(piddir, "exe", self.st_dev, self.st_ino) &&
                                (!proc_link_is(piddir, "ns/user", self_user.st_dev, self_user.st_ino) ||
                                 !proc_link_is(piddir, "ns/pid", self_pid.st_dev, self_pid.st_ino));
                if (!unexeced) {
                        *ret_pid = (pid_t)pid;
                        *ret_unexeced_child = false;
                        found = 1;
                } else if (!child)
                        child = (pid_t)pid;
        }
        closedir(proc);
        if (!found && child) {
                *ret_pid = child;
                *ret_unexeced_child = true;
                found = 1;
        }
        return found;
}
