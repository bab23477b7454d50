/* The sandbox user's account inside a sandbox: its ids (from the setup
 * packet: 1000 with a user namespace, the host's sandboxd-user account
 * without one) and the `sandbox` entries of /etc/passwd and /etc/group, the
 * owner of $HOME and /workspace, made to agree with them at every start.
 *
 * Runs in sandbox-init (root of the sandbox; without a user namespace that
 * is host root) after pivot_root, before any command. The tree is the
 * sandbox's own upper layer, which the sandbox may have rigged while it
 * ran: every path is opened beneath the new root with RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, so a symlink or a /proc
 * magic link planted at /etc, /etc/passwd or /home/sandbox fails the start
 * instead of sending host root's write elsewhere (a /proc/<pid>/... file,
 * a read-only host bind); files are replaced by rename in the opened /etc,
 * never written through. */
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "libcore/agent.h"
#include "libcore/init/init.h"
#include "libcore/util.h"

uid_t init_user_uid = SANDBOX_UID;
gid_t init_user_gid = SANDBOX_GID;
/* The other mode's ids of the sandbox user, whose files become this one's
 * (setup "user"."remapFrom"), or (uid_t)-1. */
static uid_t remap_uid = (uid_t)-1;
static gid_t remap_gid = (gid_t)-1;

/* Directory depth the remap walk follows; deeper trees keep their owners. */
#define REMAP_MAX_DEPTH 128

/* An account file bigger than this is not one a sandbox start should parse. */
#define ACCOUNT_FILE_MAX (4u << 20)

static int open_beneath(int dirfd, const char *path, int flags) {
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        return fd < 0 ? negative_errno() : fd;
}

/* The regular file `name` of etcfd, whole, NUL-terminated; *ret_text NULL
 * when it does not exist. */
static int read_account_file(int etcfd, const char *name, char **ret_text, struct stat *ret_st,
                             sb_error **ret_err) {
        *ret_text = NULL;
        _cleanup_close_ int fd = open_beneath(etcfd, name, O_RDONLY | O_NONBLOCK);
        if (fd == -ENOENT)
                return 0;
        if (fd < 0)
                return sb_error_set(ret_err, fd, NULL, NULL, "/etc/%s: %s (a symlink here is refused)", name,
                                    strerror(-fd));
        if (fstat(fd, ret_st) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "/etc/%s: %m", name);
        if (!S_ISREG(ret_st->st_mode) || ret_st->st_size > ACCOUNT_FILE_MAX)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "/etc/%s: not a regular file of at most %u bytes",
                                    name, ACCOUNT_FILE_MAX);
        _cleanup_free_ char *text = malloc((size_t)ret_st->st_size + 1);
        if (!text)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        size_t got = 0;
        while (got < (size_t)ret_st->st_size) {
                ssize_t n = read(fd, text + got, (size_t)ret_st->st_size - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        text[got] = '\0';
        if (strlen(text) != got)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "/etc/%s: contains a NUL byte", name);
        *ret_text = TAKE_PTR(text);
        return 0;
}

/* Field `i` (0-based) of the ':'-separated line l[0..n): start and length. */
static bool field(const char *l, size_t n, unsigned i, const char **ret_start, size_t *ret_len) {
        const char *p = l, *end = l + n;
        for (; i > 0; i--) {
                const char *c = memchr(p, ':', (size_t)(end - p));
                if (!c)
                        return false;
                p = c + 1;
        }
        const char *c = memchr(p, ':', (size_t)(end - p));
        *ret_start = p;
        *ret_len = (size_t)((c ? c : end) - p);
        return true;
}

/* `text` (passwd(5) or group(5) lines) with the line of account `sandbox`
 * carrying `n_ids` ids `ids` (passwd: "uid:gid", group: "gid") from field
 * 3 on, or `line` appended when no line has that name nor `first_id` as its
 * id (an image's own user at that id is then the sandbox user, as the
 * runtime import leaves it). *ret NULL when nothing changes. */
static int edit_accounts(const char *text, const char *ids, unsigned n_ids, unsigned first_id, const char *line,
                         char **ret) {
        *ret = NULL;
        size_t cap = strlen(text) + strlen(line) + 64;
        _cleanup_free_ char *out = malloc(cap);
        if (!out)
                return -ENOMEM;
        char id[16];
        snprintf(id, sizeof(id), "%u", first_id);
        size_t len = 0;
        bool found = false, changed = false;
        for (const char *l = text; *l;) {
                const char *nl = strchr(l, '\n');
                size_t n = nl ? (size_t)(nl - l) : strlen(l);
                const char *f, *rest;
                size_t fl, rl;
                if (n > 8 && strncmp(l, "sandbox:", 8) == 0 && field(l, n, 2, &f, &fl)) {
                        /* name:password: kept, the ids, then the fields after them. */
                        bool more = field(l, n, 2 + n_ids, &rest, &rl);
                        int w = snprintf(out + len, cap - len, "%.*s%s%s%.*s\n", (int)(f - l), l, ids,
                                         more ? ":" : "", more ? (int)(l + n - rest) : 0, more ? rest : "");
                        if (w < 0 || (size_t)w >= cap - len)
                                return -E2BIG;
                        changed |= (size_t)w != n + 1 || memcmp(out + len, l, n) != 0 || !nl;
                        len += (size_t)w;
                        found = true;
                } else {
                        if (field(l, n, 2, &f, &fl) && fl == strlen(id) && memcmp(f, id, fl) == 0)
                                found = true;
                        if (len + n + 1 >= cap)
                                return -E2BIG;
                        memcpy(out + len, l, n);
                        len += n;
                        out[len++] = '\n';
                        changed |= !nl;
                }
                l += nl ? n + 1 : n;
        }
        if (!found) {
                int w = snprintf(out + len, cap - len, "%s", line);
                if (w < 0 || (size_t)w >= cap - len)
                        return -E2BIG;
                len += (size_t)w;
                changed = true;
        }
        out[len] = '\0';
        if (changed)
                *ret = TAKE_PTR(out);
        return 0;
}

/* Replaces etcfd's `name` by `text` (temporary file, then rename: whatever
 * was at `name` — a symlink included — is replaced, never written
 * through), with the old file's mode and owner, or 0644 root. */
static int replace_account_file(int etcfd, const char *name, const char *text, const struct stat *old,
                                sb_error **ret_err) {
        char tmp[64];
        snprintf(tmp, sizeof(tmp), ".%s.sandbox-init", name);
        (void)unlinkat(etcfd, tmp, 0);
        _cleanup_close_ int fd = openat(etcfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "/etc/%s: %m", tmp);
        size_t len = strlen(text);
        int r = 0;
        for (size_t off = 0; off < len && r == 0;) {
                ssize_t n = write(fd, text + off, len - off);
                if (n < 0 && errno != EINTR)
                        r = negative_errno();
                else if (n > 0)
                        off += (size_t)n;
        }
        if (r == 0 && old && (fchown(fd, old->st_uid, old->st_gid) < 0 || fchmod(fd, old->st_mode & 07777) < 0))
                r = negative_errno();
        if (r == 0 && renameat(etcfd, tmp, etcfd, name) < 0)
                r = negative_errno();
        if (r < 0) {
                (void)unlinkat(etcfd, tmp, 0);
                return sb_error_set(ret_err, r, NULL, NULL, "write /etc/%s: %s", name, strerror(-r));
        }
        return 0;
}

static int fix_account_file(int etcfd, const char *name, const char *ids, unsigned n_ids, unsigned first_id,
                            const char *line, const char *if_missing, sb_error **ret_err) {
        _cleanup_free_ char *text = NULL, *edited = NULL;
        struct stat st;
        int r = read_account_file(etcfd, name, &text, &st, ret_err);
        if (r < 0)
                return r;
        if ((r = edit_accounts(text ? text : if_missing, ids, n_ids, first_id, line, &edited)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "/etc/%s: %s", name, strerror(-r));
        if (!edited)
                return 0;
        return replace_account_file(etcfd, name, edited, text ? &st : NULL, ret_err);
}

/* The directory `path` beneath rootfd owned by uid:gid (not recursive:
 * what is inside keeps its owners). Missing: nothing to do. */
static int own_dir(int rootfd, const char *path, sb_error **ret_err) {
        _cleanup_close_ int fd = open_beneath(rootfd, path, O_PATH | O_DIRECTORY);
        /* Missing, or made a link or a file by the sandbox itself: its own
         * business, left as it is (never followed). */
        if (fd == -ENOENT || fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV)
                return 0;
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0)
                return sb_error_set(ret_err, fd < 0 ? fd : negative_errno(), NULL, NULL,
                                    "/%s: %s (a symlink here is refused)", path, strerror(fd < 0 ? -fd : errno));
        if (st.st_uid == init_user_uid && st.st_gid == init_user_gid)
                return 0;
        if (fchownat(fd, "", init_user_uid, init_user_gid, AT_EMPTY_PATH) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chown /%s: %m", path);
        return 0;
}

/* The mount an entry is on (statx STATX_MNT_ID, Linux 5.8): an overlay
 * whose layers sit on different filesystems reports each file's st_dev
 * from its layer, so st_dev cannot tell "another mount" there. Returns 0
 * and fills *ret, or a negative errno. */
static int mount_id_at(int dirfd, const char *name, uint64_t *ret, struct stat *ret_st) {
        struct statx stx;
        if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | (name[0] ? 0 : AT_EMPTY_PATH),
                  STATX_TYPE | STATX_MODE | STATX_UID | STATX_GID | STATX_MNT_ID, &stx) < 0)
                return negative_errno();
        if (!(stx.stx_mask & STATX_MNT_ID))
                return -EOPNOTSUPP;
        *ret = stx.stx_mnt_id;
        ret_st->st_mode = stx.stx_mode;
        ret_st->st_uid = stx.stx_uid;
        ret_st->st_gid = stx.stx_gid;
        return 0;
}

/* Every entry below directory fd `dfd` (owned by the caller) on mount
 * `mnt` (mount_id_at) owned by remap_uid/remap_gid is given to the sandbox user, links
 * themselves and not their targets (AT_SYMLINK_NOFOLLOW), directories
 * entered by O_NOFOLLOW fds only, other mounts not entered. */
static int remap_tree(int dfd, uint64_t mnt, unsigned depth) {
        if (depth > REMAP_MAX_DEPTH)
                return 0;
        DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return negative_errno();
        }
        int r = 0;
        for (struct dirent *e; (e = readdir(d));) {
                if (streq(e->d_name, ".") || streq(e->d_name, ".."))
                        continue;
                struct stat st;
                uint64_t id;
                if (mount_id_at(dirfd(d), e->d_name, &id, &st) < 0 || id != mnt)
                        continue;
                uid_t u = st.st_uid == remap_uid ? init_user_uid : (uid_t)-1;
                gid_t g = st.st_gid == remap_gid ? init_user_gid : (gid_t)-1;
                if ((u != (uid_t)-1 || g != (gid_t)-1) &&
                    fchownat(dirfd(d), e->d_name, u, g, AT_SYMLINK_NOFOLLOW) < 0 && r == 0)
                        r = negative_errno();
                if (!S_ISDIR(st.st_mode))
                        continue;
                int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (sub >= 0) {
                        int r2 = remap_tree(sub, mnt, depth + 1);
                        if (r == 0)
                                r = r2;
                }
        }
        closedir(d);
        return r;
}

static int remap_dir(int rootfd, const char *path, sb_error **ret_err) {
        int fd = open_beneath(rootfd, path, O_RDONLY | O_DIRECTORY);
        if (fd == -ENOENT || fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV)
                return 0;
        struct stat st;
        uint64_t mnt = 0;
        int k = fd < 0 ? fd : mount_id_at(fd, "", &mnt, &st);
        if (k < 0) {
                if (fd >= 0)
                        close(fd);
                return sb_error_set(ret_err, k, NULL, NULL, "/%s: %s", path, strerror(-k));
        }
        int r = remap_tree(fd, mnt, 0);
        return r < 0 ? sb_error_set(ret_err, r, NULL, NULL, "give the files under /%s to the sandbox user: %s", path,
                                    strerror(-r))
                     : 0;
}

/* The account files and directories beneath rootfd (the sandbox's /). */
static int fix_tree(int rootfd, sb_error **ret_err) {
        int r;
        _cleanup_close_ int etcfd = open_beneath(rootfd, "etc", O_RDONLY | O_DIRECTORY);
        if (etcfd < 0)
                return sb_error_set(ret_err, etcfd, NULL, NULL, "/etc: %s (a symlink here is refused)",
                                    strerror(-etcfd));
        char ids[32], pw[160], grp[64];
        const char *shell = faccessat(rootfd, "bin/bash", X_OK, AT_SYMLINK_NOFOLLOW) == 0 ? "/bin/bash" : "/bin/sh";
        snprintf(pw, sizeof(pw), "sandbox:x:%u:%u:sandbox:/home/sandbox:%s\n", (unsigned)init_user_uid,
                 (unsigned)init_user_gid, shell);
        snprintf(ids, sizeof(ids), "%u:%u", (unsigned)init_user_uid, (unsigned)init_user_gid);
        r = fix_account_file(etcfd, "passwd", ids, 2, (unsigned)init_user_uid, pw, "root:x:0:0:root:/root:/bin/sh\n",
                                 ret_err);
        snprintf(ids, sizeof(ids), "%u", (unsigned)init_user_gid);
        snprintf(grp, sizeof(grp), "sandbox:x:%u:\n", (unsigned)init_user_gid);
        if (r >= 0)
                r = fix_account_file(etcfd, "group", ids, 1, (unsigned)init_user_gid, grp, "root:x:0:\n", ret_err);
        /* $HOME is the marker of the ids the layers carry: the runtime's is
         * 1000's, and a start without a user namespace gives it to
         * sandboxd-user in the upper layer (which snapshots and forks
         * copy), so an owner of exactly the other mode's ids means a
         * snapshot, fork or sandbox of the other mode (or of a version
         * before sandboxd-user). Only then is the tree walked. */
        bool remap = false;
        struct stat st;
        if (r >= 0 && remap_uid != (uid_t)-1 && fstatat(rootfd, "home/sandbox", &st, AT_SYMLINK_NOFOLLOW) == 0)
                remap = S_ISDIR(st.st_mode) && st.st_uid == remap_uid && st.st_gid == remap_gid;
        if (r >= 0)
                r = own_dir(rootfd, "home/sandbox", ret_err);
        if (r >= 0)
                r = own_dir(rootfd, "workspace", ret_err);
        if (r >= 0 && remap && (r = remap_dir(rootfd, "workspace", ret_err)) >= 0)
                r = remap_dir(rootfd, "home/sandbox", ret_err);
        return r;
}

int init_user_setup(const cJSON *setup, bool in_rootfs, sb_error **ret_err) {
        const cJSON *user = cJSON_GetObjectItemCaseSensitive(setup, "user");
        if (user && !cJSON_IsNull(user)) {
                const cJSON *u = cJSON_GetObjectItemCaseSensitive(user, "uid");
                const cJSON *g = cJSON_GetObjectItemCaseSensitive(user, "gid");
                /* Never root, never (uid_t)-1 ("no id"). */
                if (!cJSON_IsNumber(u) || !cJSON_IsNumber(g) || u->valuedouble < 1 || u->valuedouble > 4294967294.0 ||
                    g->valuedouble < 1 || g->valuedouble > 4294967294.0 || u->valuedouble != (double)(uid_t)u->valuedouble ||
                    g->valuedouble != (double)(gid_t)g->valuedouble)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                            "setup: \"user\" must be {\"uid\": N, \"gid\": N}, ids from 1 to 4294967294");
                init_user_uid = (uid_t)u->valuedouble;
                init_user_gid = (gid_t)g->valuedouble;
                const cJSON *from = cJSON_GetObjectItemCaseSensitive(user, "remapFrom");
                u = cJSON_GetObjectItemCaseSensitive(from, "uid");
                g = cJSON_GetObjectItemCaseSensitive(from, "gid");
                if (cJSON_IsNumber(u) && cJSON_IsNumber(g) && u->valuedouble >= 1 && u->valuedouble <= 4294967294.0 &&
                    g->valuedouble >= 1 && g->valuedouble <= 4294967294.0 && (uid_t)u->valuedouble != init_user_uid) {
                        remap_uid = (uid_t)u->valuedouble;
                        remap_gid = (gid_t)g->valuedouble;
                }
        }
        if (!in_rootfs)
                return 0;
        _cleanup_close_ int rootfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rootfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open /: %m");
        int r = fix_tree(rootfd, ret_err);
        return r < 0 ? sb_error_prefix(ret_err, "setup: the sandbox user") : 0;
}
