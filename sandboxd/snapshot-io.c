/* Snapshot export and import (snapshot.export, snapshot.import).
 *
 * The file is a tar (pax; zstd, or gzip when the name ends in .gz/.tgz):
 *   snapshot.json   {"sandbox", "createdAt", "config"}
 *   layers/0/...    the top layer, then layers/1/ ... down the stack
 * with owners, modes, times, xattrs and overlayfs whiteouts (0:0 character
 * devices) kept, read with libarchive's disk reader as libcore/copy.c does.
 *
 * An imported file is untrusted: it came from elsewhere and its layers end
 * up as lower directories of sandboxes. Every member is checked against an
 * allow list of names and types before libarchive writes it, extraction
 * runs on a worker thread chrooted into the layers directory with
 * libarchive's SECURE_* checks, and setuid/setgid bits, device nodes other
 * than whiteouts and xattrs other than user.*, trusted.overlay.opaque and
 * trusted.overlay.whiteout are not brought in. A failed import leaves no layer and no record behind.
 * snapshot.json's config is untrusted as well: what of it is kept, and how
 * it is checked, is snapshot_import_config's (snapshot.c).
 *
 * A tenant (tenant.h) with the permission (daemon.json tenants
 * allowSnapshotImport, allowSnapshotExport) names host paths the daemon
 * reads and writes as root: only under localSourceRoots, opened beneath
 * the root with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) before the
 * work starts (tenant_host_open), never by the path again; an export is
 * created in the directory so opened, under a plain file name, never
 * replacing or following what is there, and belongs to a local tenant's
 * uid. A tenant's import is bounded by maxSourceBytes unpacked, and is
 * its importer's. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "libcore/copy.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"
#include "sandboxd/worker.h"

/* Same bound as a capture (snapshot.c): overlayfs' lowerdir must fit. */
#define MAX_IMPORT_LAYERS 64
/* snapshot.json is a small record; anything bigger is not ours. */
#define MAX_RECORD_BYTES (1 << 20)

static bool ends_with(const char *s, const char *suffix) {
        size_t n = strlen(s), k = strlen(suffix);
        return n >= k && streq(s + n - k, suffix);
}

/* ---- export ------------------------------------------------------------------- */

typedef struct export_job {
        rpc_request *req;
        char *path;
        int dirfd;                /* a tenant's target directory (tenant_host_open); else -EBADF */
        uid_t chown_uid;          /* a local tenant's uid, the file's owner; else (uid_t)-1 */
        char *record;             /* snapshot.json's text */
        char **layer_dirs;        /* absolute, top first */
        size_t n_layers;
        int64_t bytes;
        sb_error *err;
} export_job;

static int write_member_data(struct archive *wr, const char *name, const void *data, size_t len,
                             sb_error **ret_err) {
        _cleanup_(archive_entry_freep) struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0600);
        archive_entry_set_size(e, (la_int64_t)len);
        archive_entry_set_mtime(e, (time_t)(core_now_ms() / 1000), 0);
        if (archive_write_header(wr, e) != ARCHIVE_OK || archive_write_data(wr, data, len) != (la_ssize_t)len)
                return sb_error_set(ret_err, -EIO, "failed", NULL, "write %s: %s", name, archive_error_string(wr));
        return 0;
}

static int export_write(export_job *j, int fd) {
        _cleanup_(archive_freep) struct archive *wr = archive_write_new();
        if (!wr)
                return sb_error_set(&j->err, -ENOMEM, "failed", NULL, "out of memory");
        bool gz = ends_with(j->path, ".gz") || ends_with(j->path, ".tgz");
        if (archive_write_set_format_pax(wr) != ARCHIVE_OK ||
            (gz ? archive_write_add_filter_gzip(wr) : archive_write_add_filter_zstd(wr)) != ARCHIVE_OK ||
            archive_write_open_fd(wr, fd) != ARCHIVE_OK)
                return sb_error_set(&j->err, -EIO, "failed", NULL, "export: %s", archive_error_string(wr));
        int r = write_member_data(wr, "snapshot.json", j->record, strlen(j->record), &j->err);
        core_fault("export.writing");
        for (size_t i = 0; r >= 0 && i < j->n_layers; i++) {
                char prefix[32];
                snprintf(prefix, sizeof(prefix), "layers/%zu", i);
                if ((r = core_tree_write(j->layer_dirs[i], wr, prefix, true, &j->err)) < 0)
                        sb_error_prefix(&j->err, "export");
                core_fault("export.writing");
        }
        if (r >= 0 && archive_write_close(wr) != ARCHIVE_OK)
                r = sb_error_set(&j->err, -EIO, "failed", NULL, "export: %s", archive_error_string(wr));
        return r;
}

/* Hidden name of an export in progress when the filesystem has no
 * O_TMPFILE: ".NAME.export-" + 16 hex. */
#define EXPORT_TMP_INFIX ".export-"

static bool is_export_tmp(const char *entry, const char *base) {
        size_t b = strlen(base), k = strlen(EXPORT_TMP_INFIX);
        return entry[0] == '.' && strncmp(entry + 1, base, b) == 0 && strncmp(entry + 1 + b, EXPORT_TMP_INFIX, k) == 0 &&
               strlen(entry + 1 + b + k) == 16 && strspn(entry + 1 + b + k, "0123456789abcdef") == 16;
}

/* Removes what an export to the same path left when it was killed on a
 * filesystem without O_TMPFILE: regular files of that exact pattern
 * only, and only the exporter's own (`owner`: a local tenant's uid, which
 * its hidden file is given at once, else root). The daemon deletes as
 * root: another user's file of that name in a shared (sticky) directory
 * is not an exporter's to remove. */
static void remove_stale_tmps(int dirfd, const char *base, uid_t owner) {
        int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        if (!d) {
                if (fd >= 0)
                        close(fd);
                return;
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (is_export_tmp(de->d_name, base)) {
                        struct stat st;
                        if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
                            st.st_uid == owner) {
                                char ln[TEXT_LOG_BUF];
                                log_info("snapshot export: removing %s, left by an interrupted export",
                                         text_for_log(de->d_name, ln, sizeof(ln)));
                                (void)unlinkat(dirfd, de->d_name, 0);
                        }
                }
        closedir(d);
}

/* Gives the finished file (fd; tmp its hidden name, or "" for an O_TMPFILE
 * one) its name `base` in dirfd, never replacing what is there. */
static int export_publish(int dirfd, int fd, const char *tmp, const char *base) {
        if (!*tmp) {
                if (linkat(fd, "", dirfd, base, AT_EMPTY_PATH) == 0)
                        return 0;
                if (errno != ENOENT && errno != EPERM)
                        return negative_errno();
                /* Without CAP_DAC_READ_SEARCH, through /proc (proc(5)). */
                char proc[64];
                snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
                return linkat(AT_FDCWD, proc, dirfd, base, AT_SYMLINK_FOLLOW) == 0 ? 0 : negative_errno();
        }
        if (renameat2(dirfd, tmp, dirfd, base, RENAME_NOREPLACE) == 0)
                return 0;
        if (errno != EINVAL && errno != ENOSYS)
                return negative_errno();
        /* No RENAME_NOREPLACE here: link (fails on an existing name), then
         * drop the hidden name. */
        if (linkat(dirfd, tmp, dirfd, base, 0) < 0)
                return negative_errno();
        (void)unlinkat(dirfd, tmp, 0);
        return 0;
}

/* Worker thread. The file appears at its path complete or not at all: it
 * is written unnamed (O_TMPFILE) in the target directory, or where that is
 * not supported under a hidden name beside it, fsync'ed, and only then
 * linked at the path, which fails if anything took the name meanwhile (an
 * existing file or symlink is never replaced or followed). A kill at any
 * moment leaves nothing at the path: an O_TMPFILE inode goes with the
 * process, and a hidden file is removed by the next export to that path. */
static void export_work(void *userdata) {
        export_job *j = userdata;
        core_fault_stall("export.working");
        _cleanup_free_ char *dcopy = strdup(j->path), *bcopy = strdup(j->path);
        if (!dcopy || !bcopy) {
                sb_error_set(&j->err, -ENOMEM, "failed", NULL, "out of memory");
                return;
        }
        const char *dir = dirname(dcopy), *base = basename(bcopy);
        _cleanup_close_ int dirfd = j->dirfd >= 0 ? TAKE_FD(j->dirfd) : open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0) {
                sb_error_set(&j->err, negative_errno(), "failed", NULL, "open directory %s: %m", dir);
                return;
        }
        remove_stale_tmps(dirfd, base, j->chown_uid != (uid_t)-1 ? j->chown_uid : 0);
        char tmp[NAME_MAX + 1] = "";
        _cleanup_close_ int fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
                char rnd[17];
                core_random_hex(rnd, 8);
                if (snprintf(tmp, sizeof(tmp), ".%s" EXPORT_TMP_INFIX "%s", base, rnd) >= (int)sizeof(tmp)) {
                        sb_error_set(&j->err, -ENAMETOOLONG, "failed", NULL, "create %s: file name too long", j->path);
                        return;
                }
                fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        }
        if (fd < 0) {
                sb_error_set(&j->err, negative_errno(), "failed", NULL, "create %s: %m", j->path);
                return;
        }
        struct stat st;
        int r = 0;
        if (j->chown_uid != (uid_t)-1 && fchown(fd, j->chown_uid, (gid_t)-1) < 0) {
                sb_error_set(&j->err, negative_errno(), "failed", NULL, "chown %s: %m", j->path);
                if (*tmp)
                        (void)unlinkat(dirfd, tmp, 0);
                return;
        }
        if (export_write(j, fd) < 0 || fsync(fd) < 0 || fstat(fd, &st) < 0 ||
            (r = export_publish(dirfd, fd, tmp, base)) < 0 || fsync(dirfd) < 0) {
                if (r < 0)
                        sb_error_set(&j->err, r, "failed", NULL, "create %s: %s", j->path, strerror(-r));
                else if (!j->err)
                        sb_error_set(&j->err, negative_errno(), "failed", NULL, "write %s: %m", j->path);
                if (*tmp)
                        (void)unlinkat(dirfd, tmp, 0);
                return;
        }
        core_fault("export.written");
        j->bytes = st.st_size;
}

static void export_job_free(export_job *j) {
        for (size_t i = 0; i < j->n_layers; i++)
                free(j->layer_dirs[i]);
        free(j->layer_dirs);
        free(j->path);
        free(j->record);
        if (j->dirfd >= 0)
                close(j->dirfd);
        sb_error_free(j->err);
        free(j);
}

static void export_done(void *userdata) {
        export_job *j = userdata;
        if (j->err) {
                char lp[TEXT_LOG_BUF], lm[TEXT_LOG_BUF];
                log_warning("snapshot export to %s: %s", text_for_log(j->path, lp, sizeof(lp)),
                            text_for_log(j->err->message, lm, sizeof(lm)));
                rpc_reply_sb_error(j->req, j->err);
        } else {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "path", j->path);
                cJSON_AddNumberToObject(o, "bytes", (double)j->bytes);
                char lp[TEXT_LOG_BUF];
                log_info("snapshot exported to %s (%lld bytes)", text_for_log(j->path, lp, sizeof(lp)),
                         (long long)j->bytes);
                rpc_reply(j->req, o);
        }
        export_job_free(j);
}

/* params.path: absolute, and nothing there yet. */
static const char *param_new_path(rpc_request *req, bool must_not_exist) {
        _cleanup_error_ sb_error *err = NULL;
        const char *path = NULL;
        if (rpc_param_string(req, "path", true, &path, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        struct stat st;
        if (path[0] != '/') {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "path", "path: '%s' is not an absolute path", TEXT_Q(path));
                return NULL;
        }
        if (must_not_exist && lstat(path, &st) == 0) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "path", "path: %s exists; give a new file name", path);
                return NULL;
        }
        return path;
}

/* A tenant's export target: a plain file name in a directory under
 * localSourceRoots, opened beneath the root (tenant_host_open), with
 * nothing of that name in it yet. Returns the directory's fd, or answers
 * the request and returns a negative errno. */
static int export_open_dir(manager *m, rpc_request *req, const char *path) {
        _cleanup_error_ sb_error *err = NULL;
        _cleanup_free_ char *dcopy = strdup(path), *bcopy = strdup(path);
        if (!dcopy || !bcopy) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "out of memory");
                return -ENOMEM;
        }
        size_t n = strlen(path);
        const char *base = basename(bcopy);
        if (path[n - 1] == '/' || streq(base, ".") || streq(base, "..") || streq(base, "/")) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "path", "path: '%s' does not end in a file name",
                                TEXT_Q(path));
                return -EINVAL;
        }
        int dirfd = tenant_host_open(m, req, dirname(dcopy), TENANT_HOST_WRITE_DIR, "path", &err);
        if (dirfd < 0) {
                rpc_reply_sb_error(req, err);
                return dirfd;
        }
        struct stat st;
        if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
                close(dirfd);
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "path", "path: %s exists; give a new file name", path);
                return -EEXIST;
        }
        return dirfd;
}

static char *export_record(const snapshot *s) {
        cJSON *o = snapshot_json(s);
        cJSON_DeleteItemFromObject(o, "id");
        cJSON_DeleteItemFromObject(o, "layers");
        cJSON_DeleteItemFromObject(o, "owner"); /* this host's tenants; an import is its importer's */
        cJSON_DeleteItemFromObject(o, "tags");  /* labels of this host's; an import has its own (none) */
        char *text = cJSON_Print(o);
        cJSON_Delete(o);
        return text;
}

static void method_export(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *id = NULL;
        if (rpc_param_string(req, "id", true, &id, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        snapshot *s = manager_find_snapshot(m, id);
        if (!s || !tenant_req_owns(m, req, s->owner)) {
                reply_not_found(req, "snapshot", id);
                return;
        }
        bool admin = tenant_req_admin(m, req);
        /* A tenant's path is not looked at before it is confined: a stat
         * of any host path would tell whether it exists. */
        const char *path = param_new_path(req, admin);
        if (!path)
                return;
        _cleanup_close_ int dirfd = -EBADF;
        if (!admin && (dirfd = export_open_dir(m, req, path)) < 0)
                return;
        export_job *j = calloc(1, sizeof(*j));
        if (!j) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "out of memory");
                return;
        }
        j->req = req;
        j->dirfd = TAKE_FD(dirfd);
        j->chown_uid = (uid_t)-1;
        if (!admin && !rpc_conn_identity(req->conn))
                j->chown_uid = rpc_conn_uid(req->conn);
        j->path = strdup(path);
        j->record = export_record(s);
        j->layer_dirs = calloc((size_t)cJSON_GetArraySize(s->layers) + 1, sizeof(char *));
        bool ok = j->path && j->record && j->layer_dirs;
        cJSON *it;
        cJSON_ArrayForEach(it, s->layers) {
                if (!ok || !cJSON_IsString(it) ||
                    !(j->layer_dirs[j->n_layers] = layer_dir(m, it->valuestring, true))) {
                        ok = false;
                        break;
                }
                j->n_layers++;
        }
        if (!ok || worker_submit(export_work, export_done, j) < 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "cannot start the export");
                export_job_free(j);
        }
}

/* ---- import ------------------------------------------------------------------- */

typedef struct import_job {
        manager *m;
        rpc_request *req;
        char *path;
        int fd;                             /* a tenant's file (tenant_host_open); else -EBADF */
        char *owner;                        /* the importer's tenant; NULL: admin */
        uint64_t max_bytes, total;          /* a tenant's bound on the unpacked layers (0: none), and so far */
        bool disk_bound;                    /* max_bytes is the tenant's room under maxDiskMiB */
        char *layers_dir;
        char ids[MAX_IMPORT_LAYERS][33];   /* new layer id per index; "" until seen */
        size_t n_layers;                    /* highest index seen + 1 */
        cJSON *record;                      /* parsed snapshot.json */
        bool take_config;                   /* params.config: apply the file's config */
        cJSON *ignored;                     /* the file's config keys left out */
        sb_error *err;
} import_job;

/* xattrs a layer may carry: of overlayfs' own only those that hide what is
 * below (an opaque directory; the xattr form of a whiteout, Linux 6.7,
 * Documentation/filesystems/overlayfs.rst "Whiteouts and opaque
 * directories"), and the user namespace. The other trusted.overlay.*
 * (redirect, metacopy, origin, upper, ...) point overlayfs at other
 * files or layers, a path nobody on this host chose; security.*
 * (capabilities, SELinux labels), system.* (ACLs) and every other trusted.*
 * would grant or label things on this host. All of them are dropped. */
static const char *const allowed_xattr_prefixes[] = {"trusted.overlay.opaque", "trusted.overlay.whiteout",
                                                     "user."};

/* A pattern ending in '.' is a namespace prefix ("user."); any other is
 * one exact name. */
static bool xattr_name_matches(const char *name, const char *pattern) {
        size_t n = strlen(pattern);
        return n && pattern[n - 1] == '.' ? strncmp(name, pattern, n) == 0 : streq(name, pattern);
}

void tar_filter_xattrs(struct archive_entry *e, const char *const *prefixes, size_t n_prefixes) {
        size_t n = (size_t)archive_entry_xattr_reset(e);
        if (!n)
                return;
        char **names = calloc(n, sizeof(char *));
        const void **vals = calloc(n, sizeof(void *));
        size_t *sizes = calloc(n, sizeof(size_t)), k = 0;
        const char *name;
        const void *val;
        size_t size;
        while (names && vals && sizes && archive_entry_xattr_next(e, &name, &val, &size) == ARCHIVE_OK)
                for (size_t i = 0; i < n_prefixes; i++)
                        if (xattr_name_matches(name, prefixes[i])) {
                                names[k] = strdup(name);
                                vals[k] = malloc(size ?: 1);
                                if (names[k] && vals[k])
                                        memcpy((void *)vals[k], val, size);
                                sizes[k++] = size;
                                break;
                        }
        archive_entry_xattr_clear(e);
        for (size_t i = 0; i < k; i++) {
                if (names[i] && vals[i])
                        archive_entry_xattr_add_entry(e, names[i], vals[i], sizes[i]);
                free(names[i]);
                free((void *)vals[i]);
        }
        free(names);
        free(vals);
        free(sizes);
}

static void filter_xattrs(struct archive_entry *e) {
        tar_filter_xattrs(e, allowed_xattr_prefixes, ELEMENTSOF(allowed_xattr_prefixes));
}

bool tar_relative_name_ok(const char *rest) {
        /* Each component: non-empty, not "." or "..". A trailing '/' (a
         * directory) is fine. */
        for (const char *c = rest; *c;) {
                size_t len = strcspn(c, "/");
                if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += len;
                if (*c == '/')
                        c++;
        }
        return true;
}

/* Splits "layers/<n>[/rest]" into n and rest ("" for the layer's root).
 * Refuses absolute names, "." / ".." / empty components and anything else. */
static int parse_member(const char *name, size_t *ret_n, const char **ret_rest) {
        if (strncmp(name, "layers/", 7) != 0)
                return -EINVAL;
        const char *p = name + 7;
        char *end;
        if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9'))
                return -EINVAL;
        unsigned long n = strtoul(p, &end, 10);
        if (n >= MAX_IMPORT_LAYERS || (*end && *end != '/'))
                return -EINVAL;
        const char *rest = *end ? end + 1 : end;
        if (!tar_relative_name_ok(rest))
                return -EINVAL;
        *ret_n = n;
        *ret_rest = rest;
        return 0;
}

/* The new layer directory for index n (relative to the layers dir, which
 * is the thread's root), created on first use. */
static int layer_tmp(import_job *j, size_t n, char *buf, size_t size, sb_error **ret_err) {
        if (!j->ids[n][0]) {
                core_random_hex(j->ids[n], 32);
                snprintf(buf, size, "/%s.tmp", j->ids[n]);
                if (mkdir(buf, 0755) < 0) {
                        int r = negative_errno();
                        j->ids[n][0] = 0;
                        return sb_error_set(ret_err, r, "failed", NULL, "mkdir layer: %s", strerror(-r));
                }
                if (n + 1 > j->n_layers)
                        j->n_layers = n + 1;
        }
        snprintf(buf, size, "/%s.tmp", j->ids[n]);
        return 0;
}

/* Checks one layer member and points it (and its hardlink target) into
 * the layer's new directory. */
static int import_rewrite(import_job *j, struct archive_entry *e, size_t n, const char *rest, sb_error **ret_err) {
        const char *name = archive_entry_pathname(e);
        mode_t type = archive_entry_filetype(e);
        const char *link = archive_entry_hardlink(e);
        if (!rest[0] && (type != AE_IFDIR || link))
                return sb_error_set(ret_err, -EINVAL, "failed", NULL, "member '%s': a layer's root must be a directory", name);
        if (link) {
                size_t ln;
                const char *lrest;
                if (parse_member(link, &ln, &lrest) < 0 || ln != n || !lrest[0])
                        return sb_error_set(ret_err, -EINVAL, "failed", NULL,
                                            "member '%s': hardlink to '%s' outside its layer", name, link);
        } else if (type == AE_IFCHR || type == AE_IFBLK) {
                /* Only overlayfs whiteouts: a real device node would give a
                 * sandbox direct access to host hardware. */
                if (type != AE_IFCHR || archive_entry_rdev(e) != makedev(0, 0))
                        return sb_error_set(ret_err, -EPERM, "failed", NULL,
                                            "member '%s': device nodes are not allowed (only 0:0 whiteouts)", name);
        } else if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK && type != AE_IFIFO)
                return sb_error_set(ret_err, -EINVAL, "failed", NULL, "member '%s': unsupported file type", name);
        if (archive_entry_size(e) > 0 && !link)
                j->total += (uint64_t)archive_entry_size(e);
        if (j->max_bytes && j->total > j->max_bytes && j->disk_bound)
                return sb_error_set(ret_err, -EDQUOT, "limit_exceeded", "path",
                                    "the unpacked layers are over the %llu MiB tenant '%s' has left under its disk "
                                    "limit (daemon.json tenants maxDiskMiB; its sandboxes', snapshots' and imported "
                                    "runtimes' disk counted)", (unsigned long long)(j->max_bytes >> 20), j->owner);
        if (j->max_bytes && j->total > j->max_bytes)
                return sb_error_set(ret_err, -E2BIG, "limit_exceeded", "path",
                                    "the unpacked layers are over maxSourceBytes (%llu bytes)",
                                    (unsigned long long)j->max_bytes);
        char root[48];
        int r = layer_tmp(j, n, root, sizeof(root), ret_err);
        if (r < 0)
                return r;
        _cleanup_free_ char *to = NULL, *link_to = NULL;
        if (asprintf(&to, "%s/%s", root, rest) < 0)
                return sb_error_set(ret_err, -ENOMEM, "failed", NULL, "out of memory");
        if (link) {
                size_t ln;
                const char *lrest;
                (void)parse_member(link, &ln, &lrest);
                if (asprintf(&link_to, "%s/%s", root, lrest) < 0)
                        return sb_error_set(ret_err, -ENOMEM, "failed", NULL, "out of memory");
                archive_entry_copy_hardlink(e, link_to);
        }
        archive_entry_copy_pathname(e, to);
        /* setuid/setgid from a foreign file would be a privilege the sandbox
         * user never had on this host. */
        archive_entry_set_perm(e, archive_entry_perm(e) & ~(mode_t)(S_ISUID | S_ISGID));
        archive_entry_acl_clear(e);
        archive_entry_set_fflags(e, 0, 0);
        filter_xattrs(e);
        return 0;
}

static int read_record(import_job *j, struct archive *rd, struct archive_entry *e, sb_error **ret_err) {
        la_int64_t size = archive_entry_size(e);
        if (j->record)
                return sb_error_set(ret_err, -EINVAL, "failed", NULL, "member 'snapshot.json' appears twice");
        if (archive_entry_filetype(e) != AE_IFREG || size <= 0 || size > MAX_RECORD_BYTES)
                return sb_error_set(ret_err, -EINVAL, "failed", NULL, "member 'snapshot.json': not a small regular file");
        _cleanup_free_ char *text = calloc(1, (size_t)size + 1);
        if (!text)
                return sb_error_set(ret_err, -ENOMEM, "failed", NULL, "out of memory");
        if (archive_read_data(rd, text, (size_t)size) != size)
                return sb_error_set(ret_err, -EIO, "failed", NULL, "read snapshot.json: %s", archive_error_string(rd));
        j->record = cJSON_Parse(text);
        if (!cJSON_IsObject(j->record) || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j->record, "config")))
                return sb_error_set(ret_err, -EINVAL, "failed", NULL,
                                    "member 'snapshot.json': not a snapshot record (an object with a config object)");
        return 0;
}

static int import_member(import_job *j, struct archive *rd, struct archive *wr, struct archive_entry *e,
                         sb_error **ret_err) {
        const char *name = archive_entry_pathname(e);
        if (!name)
                return sb_error_set(ret_err, -EINVAL, "failed", NULL, "a member without a name");
        if (streq(name, "snapshot.json"))
                return read_record(j, rd, e, ret_err);
        size_t n;
        const char *rest;
        if (parse_member(name, &n, &rest) < 0)
                return sb_error_set(ret_err, -EINVAL, "failed", NULL,
                                    "member '%s': not snapshot.json or under layers/<n>/ (names with '..', "
                                    "absolute names and others are refused)", name);
        _cleanup_free_ char *shown = strdup(name);
        int r = import_rewrite(j, e, n, rest, ret_err);
        if (r < 0)
                return r;
        return tar_copy_member(rd, wr, e, shown, ret_err);
}

int tar_copy_member(struct archive *rd, struct archive *wr, struct archive_entry *e, const char *shown,
                    sb_error **ret_err) {
        int r;
        if (archive_write_header(wr, e) < ARCHIVE_WARN)
                return sb_error_set(ret_err, -EIO, "failed", NULL, "member '%s': %s", shown ?: "?",
                                    archive_error_string(wr));
        if (archive_entry_size(e) > 0 && !archive_entry_hardlink(e)) {
                const void *buf;
                size_t len;
                la_int64_t off;
                while ((r = archive_read_data_block(rd, &buf, &len, &off)) == ARCHIVE_OK)
                        if (archive_write_data_block(wr, buf, len, off) < ARCHIVE_WARN)
                                return sb_error_set(ret_err, -EIO, "failed", NULL, "member '%s': %s",
                                                    shown ?: "?", archive_error_string(wr));
                if (r != ARCHIVE_EOF)
                        return sb_error_set(ret_err, -EIO, "failed", NULL, "member '%s': %s", shown ?: "?",
                                            archive_error_string(rd));
        }
        if (archive_write_finish_entry(wr) < ARCHIVE_WARN)
                return sb_error_set(ret_err, -EIO, "failed", NULL, "member '%s': %s", shown ?: "?",
                                    archive_error_string(wr));
        return 0;
}

int tar_open_untrusted(int archive_fd, struct archive **ret_rd, struct archive **ret_wr) {
        struct archive *rd = archive_read_new(), *wr = archive_write_disk_new();
        *ret_rd = rd;
        *ret_wr = wr;
        if (!rd || !wr)
                return -ENOMEM;
        archive_read_support_filter_all(rd);
        archive_read_support_format_tar(rd);
        /* No standard lookup: owners stay numeric (and the chroot has no
         * passwd file). SECURE_SYMLINKS refuses to write through a symlink
         * an earlier member made; NODOTDOT repeats the callers' own name
         * checks. */
        archive_write_disk_set_options(wr, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                                   ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                   ARCHIVE_EXTRACT_SECURE_NODOTDOT);
        return archive_read_open_fd(rd, archive_fd, 64 * 1024) == ARCHIVE_OK ? 0 : -EIO;
}

/* Runs chrooted into the layers directory (see import_work). */
static int import_extract(import_job *j, int archive_fd, sb_error **ret_err) {
        _cleanup_(archive_freep) struct archive *rd = NULL;
        _cleanup_(archive_freep) struct archive *wr = NULL;
        int k = tar_open_untrusted(archive_fd, &rd, &wr);
        if (k == -ENOMEM)
                return sb_error_set(ret_err, -ENOMEM, "failed", NULL, "out of memory");
        if (k < 0)
                return sb_error_set(ret_err, -EIO, "failed", NULL, "read %s: %s", j->path, archive_error_string(rd));
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header(rd, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r < ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EIO, "failed", NULL, "read %s: %s", j->path,
                                            archive_error_string(rd));
                if ((r = import_member(j, rd, wr, e, ret_err)) < 0)
                        return r;
        }
        if (archive_write_close(wr) != ARCHIVE_OK)
                return sb_error_set(ret_err, -EIO, "failed", NULL, "import: %s", archive_error_string(wr));
        if (!j->record)
                return sb_error_set(ret_err, -EINVAL, "failed", NULL, "%s has no snapshot.json", j->path);
        if (!j->n_layers)
                return sb_error_set(ret_err, -EINVAL, "failed", NULL, "%s has no layers/0/", j->path);
        for (size_t i = 0; i < j->n_layers; i++)
                if (!j->ids[i][0])
                        return sb_error_set(ret_err, -EINVAL, "failed", NULL, "%s has no layers/%zu/", j->path, i);
        return 0;
}

/* Worker thread. The archive is opened before the chroot (its path is the
 * host's); unshare(CLONE_FS) keeps the chroot to this thread, which ends
 * with the job. */
static void import_work(void *userdata) {
        import_job *j = userdata;
        _cleanup_close_ int fd = j->fd >= 0 ? TAKE_FD(j->fd) : open(j->path, O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int dir = open(j->layers_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int r;
        if (fd < 0 || dir < 0)
                r = sb_error_set(&j->err, negative_errno(), "failed", NULL, "open %s: %m", fd < 0 ? j->path : j->layers_dir);
        else if (unshare(CLONE_FS) < 0 || fchdir(dir) < 0 || chroot(".") < 0 || chdir("/") < 0)
                r = sb_error_set(&j->err, negative_errno(), "failed", NULL, "chroot into %s: %m", j->layers_dir);
        else
                r = import_extract(j, fd, &j->err);
        if (r >= 0)
                core_fault("import.extracted");
        for (size_t i = 0; r >= 0 && i < j->n_layers; i++) {
                char tmp[48];
                snprintf(tmp, sizeof(tmp), "%s.tmp", j->ids[i]);
                if (renameat(dir, tmp, dir, j->ids[i]) < 0)
                        r = sb_error_set(&j->err, negative_errno(), "failed", NULL, "rename layer %s: %m", tmp);
        }
        if (r >= 0)
                return;
        /* Nothing stays: neither the partial directories nor renamed ones.
         * Layers are only ever made after the chroot, so the paths are the
         * chroot's. */
        for (size_t i = 0; i < j->n_layers; i++) {
                if (!j->ids[i][0])
                        continue;
                char p[48];
                snprintf(p, sizeof(p), "/%s.tmp", j->ids[i]);
                core_rm_rf(p);
                snprintf(p, sizeof(p), "/%s", j->ids[i]);
                core_rm_rf(p);
        }
}

static void import_job_free(import_job *j) {
        free(j->path);
        free(j->owner);
        if (j->fd >= 0)
                close(j->fd);
        free(j->layers_dir);
        cJSON_Delete(j->record);
        cJSON_Delete(j->ignored);
        sb_error_free(j->err);
        free(j);
}

/* Writes the record, then registers the snapshot. A crash between the
 * rename of the layers and this leaves layers nothing refers to, which
 * the next start removes (snapshots_load). */
static int import_register(import_job *j, snapshot **ret, sb_error **ret_err) {
        manager *m = j->m;
        snapshot *s = calloc(1, sizeof(*s));
        if (!s)
                return sb_error_set(ret_err, -ENOMEM, "failed", NULL, "out of memory");
        memcpy(s->id, "snap-", 5);
        core_random_hex(s->id + 5, 32);
        s->sandbox = strdup(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j->record, "sandbox")) ?: "");
        /* The file's config is untrusted data: only what the caller asked
         * for, validated as create params (snapshot_import_config). */
        int k = snapshot_import_config(m, cJSON_GetObjectItemCaseSensitive(j->record, "config"), j->take_config, &s->config,
                                       &j->ignored, ret_err);
        if (k < 0) {
                snapshot_free(s);
                return k;
        }
        s->layers = cJSON_CreateArray();
        for (size_t i = 0; i < j->n_layers; i++)
                cJSON_AddItemToArray(s->layers, cJSON_CreateString(j->ids[i]));
        /* The importer's, from its identity (tenant.h); its limits are
         * checked here, where it is registered. */
        if ((j->owner && !(s->owner = strdup(j->owner))) ||
            (k = tenant_check_imported_snapshot(m, j->req, s, j->total, ret_err)) < 0) {
                snapshot_free(s);
                return k < 0 ? k : sb_error_set(ret_err, -ENOMEM, "failed", NULL, "out of memory");
        }
        /* createdAt is when the snapshot was taken, wherever that was. */
        s->created_ms = core_parse_time(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j->record, "createdAt")));
        if (!s->created_ms)
                s->created_ms = core_now_ms();
        int r = s->sandbox ? snapshot_save(m, s, ret_err) : sb_error_set(ret_err, -ENOMEM, "failed", NULL, "out of memory");
        if (r < 0) {
                snapshot_free(s);
                return r;
        }
        s->next = m->snapshots;
        m->snapshots = s;
        *ret = s;
        return 0;
}

static void import_reply_error(void *userdata) {
        import_job *j = userdata;
        sb_error_prefix(&j->err, "import %s", j->path);
        char lm[TEXT_LOG_BUF];
        log_warning("snapshot %s", text_for_log(j->err->message, lm, sizeof(lm)));
        rpc_reply_sb_error(j->req, j->err);
        import_job_free(j);
}

static void import_done(void *userdata) {
        import_job *j = userdata;
        snapshot *s = NULL;
        if (!j->err && import_register(j, &s, &j->err) < 0) {
                /* Answered once the new layers are gone: a refused import
                 * leaves nothing behind, also for a caller that looks at
                 * once. */
                cJSON *layers = cJSON_CreateArray();
                for (size_t i = 0; i < j->n_layers; i++)
                        cJSON_AddItemToArray(layers, cJSON_CreateString(j->ids[i]));
                layers_collect(j->m, layers, import_reply_error, j);
                cJSON_Delete(layers);
                return;
        }
        if (!j->err)
                core_fault("import.recorded");
        if (j->err) {
                import_reply_error(j);
                return;
        }
        char lp[TEXT_LOG_BUF];
        log_info("snapshot %s imported from %s (%zu layers)", s->id, text_for_log(j->path, lp, sizeof(lp)),
                 j->n_layers);
        /* What of the file's config was taken is in "config"; the answer
         * also says whether it was asked for and which keys were left out. */
        cJSON *o = snapshot_view(s);
        cJSON_AddBoolToObject(o, "configImported", j->take_config);
        cJSON_AddItemToObject(o, "configIgnored", TAKE_PTR(j->ignored));
        rpc_reply(j->req, o);
        import_job_free(j);
}

static void method_import(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        bool take_config = false;
        if (rpc_param_bool(req, "config", &take_config, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        const char *path = param_new_path(req, false);
        if (!path)
                return;
        tenant t;
        tenant_of_conn(m->cfg, req->conn, &t);
        /* A tenant's file is read as root: only under localSourceRoots,
         * opened now, never by its path again (tenant.h). */
        _cleanup_close_ int fd = -EBADF;
        if (!t.admin && (fd = tenant_host_open(m, req, path, TENANT_HOST_FILE, "path", &err)) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        /* A tenant at its snapshot count, or with no disk left, is refused
         * before the file is unpacked onto the state filesystem, and an
         * import unpacks at most the disk it has left (the registration's
         * check stays the one that counts: concurrent imports can all pass
         * this one). */
        uint64_t room_mib = UINT64_MAX;
        if (!t.admin && (tenant_check_new_snapshot(m, req, NULL, &err) < 0 ||
                         tenant_disk_room(m, req, &room_mib, &err) < 0)) {
                rpc_reply_sb_error(req, err);
                return;
        }
        import_job *j = calloc(1, sizeof(*j));
        if (!j) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "out of memory");
                return;
        }
        j->m = m;
        j->req = req;
        j->fd = TAKE_FD(fd);
        if (!t.admin) {
                j->owner = strdup(t.name);
                j->max_bytes = m->cfg->max_source_bytes;
                if (room_mib != UINT64_MAX && room_mib < (j->max_bytes >> 20)) {
                        j->max_bytes = room_mib << 20;
                        j->disk_bound = true;
                }
        }
        j->take_config = take_config;
        j->path = strdup(path);
        j->layers_dir = strdup(m->layers_dir);
        if (!j->path || !j->layers_dir || (!t.admin && !j->owner) || worker_submit(import_work, import_done, j) < 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "cannot start the import");
                import_job_free(j);
        }
}

void register_snapshot_io_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "snapshot.export", method_export, m);
        rpc_server_add_method(s, "snapshot.import", method_import, m);
}
