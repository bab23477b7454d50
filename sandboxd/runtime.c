/* Runtimes: the read-only root filesystems sandboxes stand on (DESIGN §3),
 * and the methods runtime.list, runtime.import, runtime.bootstrap and
 * runtime.delete (docs/API.md).
 *
 * Layout under <state>/runtimes/:
 *   host/<version>/     the built-in runtime (core_runtime_host_build), one
 *                       tree per version (a hash of what it is made from);
 *                       new sessions get the current one, and each running
 *                       session's record names the one its overlay stands
 *                       on: an older version is removed only once no live
 *                       session names it (runtime_host_collect)
 *   host/.tmp-<hex>     a version being built
 *   <name>/             an imported or bootstrapped root filesystem
 *   <name>.json         its record {name, source, sizeBytes, createdAt, owner}
 *   .<name>.tmp-<hex>   an import or bootstrap in progress
 *   .<name>.del-<hex>   a runtime being removed
 * Leftovers of the last two kinds, and a tree without a record (or a
 * record without a tree), are removed at start (runtimes_load).
 *
 * Ownership (tenant.h): the record's "owner" is the tenant whose client
 * imported or bootstrapped it, from the client's identity; absent (admin's
 * runtimes, records from before owners) it is admin-owned, shared by every
 * tenant. A tenant's runtime is seen, used and deleted by that tenant (and
 * admin) only; to any other tenant it answers as a missing one. Names are
 * one name space: a name another tenant holds is already_exists, without
 * saying whose.
 *
 * A runtime is never written once it is made: it is the lowest overlayfs
 * layer of every sandbox on it, so its files reach sandboxes only through
 * their own upper directories.
 *
 * Imports are untrusted: the tarball is extracted by a thread chrooted into
 * the new tree, with the member checks of snapshot imports (snapshot-io.c:
 * no absolute names, no "..", libarchive's SECURE_SYMLINKS so no member is
 * written through a symlink an earlier one made), device nodes, sockets
 * and FIFOs skipped, setuid/setgid bits dropped, xattrs other than user.*
 * dropped.
 *
 * Bootstraps run debootstrap --variant=minbase into the debootstrap cache
 * (daemon.json "runtimeCache", default <state>/cache/debootstrap):
 *   <cache>/<suite>-<first 16 hex digits of sha256(mirror)>/   the tree
 *   <cache>/<same>.json                                       {suite, mirror}
 * and clone the cached tree into the runtime with hard links, so a second
 * bootstrap of the same suite and mirror takes well under a second and no
 * network. debootstrap runs in the daemon's own network namespace, in a
 * new mount namespace (the proc and sys mounts it makes in the target die
 * with it) and a new PID namespace (a timeout kills all of it at once).
 * An operator whose daemon cannot reach the mirror (the test world) fills
 * the cache with the same command on a host that can. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <linux/sched.h>
#include <openssl/sha.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "libcore/agent.h"
#include "libcore/copy.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"
#include "sandboxd/worker.h"

#define DEBOOTSTRAP "/usr/sbin/debootstrap"
#define DEFAULT_SUITE "bookworm"
#define MAX_RECORD_BYTES (64 * 1024)

typedef struct runtime_job {
        manager *m;
        rpc_request *req;
        char *name;
        char *path;               /* import: the tarball */
        int fd;                   /* import: the tarball, opened for a tenant (tenant_host_open); else -EBADF */
        char *owner;              /* the tenant making it; NULL: admin */
        char *suite, *mirror;     /* bootstrap */
        char *runtimes_dir;
        char *cache_dir;
        uint64_t max_bytes;       /* import: bound on the unpacked size */
        bool disk_bound;          /* import: max_bytes is the tenant's room under maxDiskMiB */
        uint64_t timeout_ms;      /* bootstrap: bound on debootstrap */
        char tmp[96];             /* ".<name>.tmp-<hex>" under runtimes_dir */
        bool cached;              /* bootstrap: the tree came from the cache */
        unsigned skipped;         /* import: members not brought in (devices...) */
        cJSON *record;
        sb_error *err;
} runtime_job;

char *runtime_dir(const manager *m, const char *name) {
        char *p = NULL;
        if (streq(name, "host"))
                return strdup(m->host_runtime);
        return asprintf(&p, "%s/%s", m->runtimes_dir, name) < 0 ? NULL : p;
}

static char *record_path(const manager *m, const char *name) {
        char *p = NULL;
        return asprintf(&p, "%s/%s.json", m->runtimes_dir, name) < 0 ? NULL : p;
}

/* m->runtime_jobs holds {"name", "owner"?} of each import or bootstrap
 * in progress. */
static const char *job_field(const cJSON *job, const char *key) {
        return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(job, key));
}

static bool job_pending(const manager *m, const char *name) {
        const cJSON *it;
        cJSON_ArrayForEach(it, m->runtime_jobs)
                if (streq(job_field(it, "name") ?: "", name))
                        return true;
        return false;
}

/* Imports and bootstraps in progress for tenant `owner`. */
static unsigned jobs_of(const manager *m, const char *owner) {
        unsigned n = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, m->runtime_jobs)
                n += job_field(it, "owner") && streq(job_field(it, "owner"), owner);
        return n;
}

/* MiB reserved by tenant `owner`'s imports in progress ("reserveMiB" of
 * each: the most it may unpack). */
static uint64_t jobs_reserved_mib(const manager *m, const char *owner) {
        uint64_t mib = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, m->runtime_jobs) {
                const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "reserveMiB");
                if (job_field(it, "owner") && streq(job_field(it, "owner"), owner) && cJSON_IsNumber(r))
                        mib += (uint64_t) r->valuedouble;
        }
        return mib;
}

static void job_forget(manager *m, const char *name) {
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, m->runtime_jobs) {
                if (streq(job_field(it, "name") ?: "", name)) {
                        cJSON_DeleteItemFromArray(m->runtime_jobs, i);
                        return;
                }
                i++;
        }
}

/* True when a runtime of that name is on disk (record and tree). */
static bool runtime_exists(const manager *m, const char *name) {
        if (streq(name, "host"))
                return true;
        _cleanup_free_ char *rec = record_path(m, name), *dir = runtime_dir(m, name);
        struct stat st;
        return rec && dir && access(rec, F_OK) == 0 && stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* The record's owner (malloc'd, NULL for admin) of an existing runtime. */
static int record_owner(const manager *m, const char *name, char **ret_owner) {
        *ret_owner = NULL;
        if (streq(name, "host"))
                return 0;
        _cleanup_free_ char *path = record_path(m, name), *text = NULL;
        if (!path)
                return -ENOMEM;
        int r = core_read_file(path, MAX_RECORD_BYTES, &text, NULL);
        if (r < 0)
                return r;
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(text);
        if (!cJSON_IsObject(o))
                return -EINVAL;
        const char *owner = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "owner"));
        if (owner && *owner && !(*ret_owner = strdup(owner)))
                return -ENOMEM;
        return 0;
}

int runtime_owner(manager *m, const char *name, char **ret_owner) {
        *ret_owner = NULL;
        if (!core_name_is_valid(name) || job_pending(m, name) || !runtime_exists(m, name))
                return -ENOENT;
        int r = record_owner(m, name, ret_owner);
        /* A record that cannot be read names nobody: nobody but admin may
         * use it (fail closed; no tenant is named ""). */
        if (r < 0 && r != -ENOMEM && !(*ret_owner = strdup("")))
                return -ENOMEM;
        return r == -ENOMEM ? r : 0;
}

/* True when the client of `req` (NULL: the daemon) may see runtime `name`
 * recorded with `owner`: an admin-owned one everybody, a tenant's its own. */
static bool runtime_visible(manager *m, const rpc_request *req, const char *owner) {
        return !owner || tenant_req_owns(m, req, owner);
}

int runtime_check(manager *m, const rpc_request *req, const char *name, const char *field, sb_error **ret_err) {
        _cleanup_free_ char *owner = NULL;
        if (runtime_owner(m, name, &owner) == 0 && (!req || runtime_visible(m, req, owner)))
                return 0;
        return sb_error_set(ret_err, -ENOENT, "not_found", field,
                            "%s: runtime '%s' not found (sandboxctl runtime list shows them)", field, TEXT_Q(name));
}

/* Sandboxes (names, in *ret_sandboxes when given) and snapshots standing on
 * runtime `name`. Returns how many in all. */
static int runtime_users(manager *m, const char *name, cJSON *ret_sandboxes, int *ret_snapshots) {
        int n = 0, snaps = 0;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                if (sb->runtime && streq(sb->runtime, name)) {
                        if (ret_sandboxes)
                                cJSON_AddItemToArray(ret_sandboxes, cJSON_CreateString(sb->name));
                        n++;
                } else if (sb->sess && container_uses_runtime(sb->sess, name)) {
                        /* A container's root stands on it (container.c). */
                        if (ret_sandboxes)
                                cJSON_AddItemToArray(ret_sandboxes, cJSON_CreateString(sb->name));
                        n++;
                }
        for (snapshot *s = m->snapshots; s; s = s->next) {
                const char *rt = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(s->config, "runtime"));
                if (streq(rt ? rt : "host", name))
                        snaps++;
        }
        if (ret_snapshots)
                *ret_snapshots = snaps;
        return n + snaps;
}

/* The Runtime object: the record plus who uses it. */
static cJSON *runtime_json(manager *m, const char *name) {
        cJSON *o = NULL;
        if (streq(name, "host")) {
                char buf[32];
                o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", "host");
                cJSON_AddBoolToObject(o, "builtin", true);
                cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "source"), "type", "host");
                cJSON_AddNullToObject(o, "sizeBytes");
                cJSON_AddStringToObject(o, "createdAt", core_format_time(m->started_ms, buf, sizeof(buf)));
        } else {
                _cleanup_free_ char *path = record_path(m, name), *text = NULL;
                if (!path || core_read_file(path, MAX_RECORD_BYTES, &text, NULL) < 0)
                        return NULL;
                o = cJSON_Parse(text);
                if (!cJSON_IsObject(o)) {
                        cJSON_Delete(o);
                        return NULL;
                }
                cJSON_DeleteItemFromObject(o, "name");
                cJSON_AddStringToObject(o, "name", name);
                cJSON_DeleteItemFromObject(o, "builtin");
                cJSON_AddBoolToObject(o, "builtin", false);
        }
        /* Absent or not a tenant name (records from before owners): admin. */
        const char *owner = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "owner"));
        cJSON *ov = owner && *owner ? cJSON_CreateString(owner) : cJSON_CreateNull();
        cJSON_DeleteItemFromObject(o, "owner");
        cJSON_AddItemToObject(o, "owner", ov);
        int snaps = 0;
        cJSON *users = cJSON_AddArrayToObject(o, "sandboxes");
        runtime_users(m, name, users, &snaps);
        cJSON_AddNumberToObject(o, "snapshots", snaps);
        return o;
}

/* ---- the tree: extraction, fix-ups, size ------------------------------------ */

/* Strips leading "./" (and a lone "."): tarballs made with `tar -C dir .`
 * name members that way. */
static const char *strip_dot(const char *name) {
        while (name[0] == '.' && name[1] == '/')
                for (name += 2; *name == '/';)
                        name++;
        return streq(name, ".") ? "" : name;
}

static int runtime_too_big(runtime_job *j, sb_error **ret_err) {
        if (j->disk_bound)
                return sb_error_set(ret_err, -EDQUOT, "limit_exceeded", "path",
                                    "the unpacked tree is over the %llu MiB tenant '%s' has left under its disk "
                                    "limit (daemon.json tenants maxDiskMiB; its sandboxes', snapshots' and imported "
                                    "runtimes' disk counted)", (unsigned long long)(j->max_bytes >> 20), j->owner);
        return sb_error_set(ret_err, -E2BIG, "limit_exceeded", "path",
                            "the unpacked tree is over maxSourceBytes (%llu bytes)", (unsigned long long)j->max_bytes);
}

/* Checks one member of a runtime tarball and points it (and its hardlink
 * target) at the same name under "/", the chroot's root. Returns 1 to
 * write it, 0 to skip it, or a negative errno. */
static int runtime_member_rewrite(runtime_job *j, struct archive_entry *e, uint64_t *total, sb_error **ret_err) {
        static const char *const keep_xattrs[] = {"user."};
        const char *name = archive_entry_pathname(e);
        if (name[0] == '/')
                return sb_error_set(ret_err, -EINVAL, "source_failed", "path",
                                    "member '%s': absolute names are refused", name);
        const char *rest = strip_dot(name);
        if (!tar_relative_name_ok(rest))
                return sb_error_set(ret_err, -EINVAL, "source_failed", "path",
                                    "member '%s': names with '..' or empty components are refused", name);
        mode_t type = archive_entry_filetype(e);
        const char *link = archive_entry_hardlink(e);
        if (!rest[0])
                return 0;       /* the root itself: ours, made by us */
        if (!link && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
                /* Device nodes would give a sandbox the host's hardware
                 * (and /dev is a fresh tmpfs in every sandbox anyway);
                 * FIFOs and sockets have no place in a base image. */
                j->skipped++;
                return 0;
        }
        _cleanup_free_ char *to = NULL, *link_to = NULL;
        if (link) {
                /* An absolute target (usr/bin/perlthanks -> /usr/bin/perlbug,
                 * as tar writes hardlinks of an image made from /) names a
                 * member of the same tree: resolved under the root. */
                const char *labs = link;
                while (*labs == '/')
                        labs++;
                const char *lrest = strip_dot(labs);
                if (!lrest || !lrest[0] || !tar_relative_name_ok(lrest))
                        return sb_error_set(ret_err, -EINVAL, "source_failed", "path",
                                            "member '%s': hardlink to '%s' outside the tree", name, link);
                if (asprintf(&link_to, "/%s", lrest) < 0)
                        return -ENOMEM;
                archive_entry_copy_hardlink(e, link_to);
        }
        if (asprintf(&to, "/%s", rest) < 0)
                return -ENOMEM;
        archive_entry_copy_pathname(e, to);
        if (archive_entry_size(e) > 0)
                *total += (uint64_t)archive_entry_size(e);
        if (*total > j->max_bytes)
                return runtime_too_big(j, ret_err);
        /* A setuid file from elsewhere would be a privilege nobody granted
         * on this host (sandboxes also mount nosuid and run no_new_privs). */
        archive_entry_set_perm(e, archive_entry_perm(e) & ~(mode_t)(S_ISUID | S_ISGID));
        archive_entry_acl_clear(e);
        archive_entry_set_fflags(e, 0, 0);
        tar_filter_xattrs(e, keep_xattrs, ELEMENTSOF(keep_xattrs));
        return 1;
}

/* Runs chrooted into the new tree (run_chrooted). */
static int extract_tarball(runtime_job *j, int archive_fd, sb_error **ret_err) {
        _cleanup_(archive_freep) struct archive *rd = NULL;
        _cleanup_(archive_freep) struct archive *wr = NULL;
        int k = tar_open_untrusted(archive_fd, &rd, &wr);
        if (k == -ENOMEM)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (k < 0)
                return sb_error_set(ret_err, -EIO, "source_failed", "path", "read %s: %s", j->path,
                                    archive_error_string(rd));
        uint64_t total = 0;
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header(rd, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r < ARCHIVE_WARN || !archive_entry_pathname(e))
                        return sb_error_set(ret_err, -EIO, "source_failed", "path", "read %s: %s", j->path,
                                            archive_error_string(rd) ?: "a member without a name");
                _cleanup_free_ char *shown = strdup(archive_entry_pathname(e));
                r = runtime_member_rewrite(j, e, &total, ret_err);
                if (r > 0)
                        r = tar_copy_member(rd, wr, e, shown, ret_err);
                if (r < 0)
                        return r == -ENOMEM && !*ret_err ? sb_error_set(ret_err, r, NULL, NULL, "out of memory") : r;
        }
        if (archive_write_close(wr) != ARCHIVE_OK)
                return sb_error_set(ret_err, -EIO, "source_failed", "path", "import: %s", archive_error_string(wr));
        return 0;
}

/* Adds `line` to the passwd-style file `path` unless an entry already has
 * its name or its id (field 3). The file is replaced, never written in
 * place: in a bootstrapped runtime it may be a hard link into the cache.
 * A path that is not a regular file is left alone. */
static int ensure_entry(const char *path, const char *line, const char *if_missing) {
        _cleanup_free_ char *text = NULL, *out = NULL;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        struct stat st;
        if (fd < 0 && errno != ENOENT)
                return 0;
        if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || core_read_file(path, 1 << 20, &text, NULL) < 0))
                return 0;
        /* An entry with the same name, or with id 1000 (the third field in
         * both passwd and group), is the image's own choice: kept. */
        size_t name_len = strcspn(line, ":") + 1;
        for (const char *l = text; l && *l;) {
                const char *f = strchr(l, ':'), *g = f ? strchr(f + 1, ':') : NULL, *nl = strchr(l, '\n');
                if (strncmp(l, line, name_len) == 0 || (g && strncmp(g, ":1000:", 6) == 0 && (!nl || g < nl)))
                        return 0;
                l = nl ? nl + 1 : NULL;
        }
        size_t n = text ? strlen(text) : 0;
        if (asprintf(&out, "%s%s%s", text ? text : if_missing, n && text[n - 1] != '\n' ? "\n" : "", line) < 0)
                return -ENOMEM;
        return core_write_file_atomic(path, out, strlen(out), 0644);
}

/* Runs chrooted into a new runtime: the mount points sandbox-init needs
 * (a tree from a tarball may lack them), the sandbox user's home and
 * /workspace, and the `sandbox` user (uid and gid 1000) in passwd and
 * group, as the host runtime has them. */
static int fixup_tree(sb_error **ret_err) {
        static const struct { const char *path; mode_t mode; uid_t uid; } dirs[] = {
                {"/proc", 0555, 0}, {"/dev", 0755, 0}, {"/sys", 0555, 0}, {"/tmp", 01777, 0},
                {"/run", 0755, 0}, {"/etc", 0755, 0}, {"/root", 0700, 0}, {"/home", 0755, 0},
                {"/home/sandbox", 0755, SANDBOX_UID}, {"/workspace", 0755, SANDBOX_UID},
        };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                if (mkdir(dirs[i].path, dirs[i].mode) < 0) {
                        if (errno == EEXIST)
                                continue;
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mkdir %s: %m", dirs[i].path);
                }
                if (chmod(dirs[i].path, dirs[i].mode) < 0 || chown(dirs[i].path, dirs[i].uid, dirs[i].uid) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "prepare %s: %m", dirs[i].path);
        }
        const char *shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
        char pw[160];
        snprintf(pw, sizeof(pw), "sandbox:x:1000:1000:sandbox:/home/sandbox:%s\n", shell);
        int r = ensure_entry("/etc/passwd", pw, "root:x:0:0:root:/root:/bin/sh\n");
        if (r >= 0)
                r = ensure_entry("/etc/group", "sandbox:x:1000:\n", "root:x:0:\n");
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "add the sandbox user: %s", strerror(-r));
        return 0;
}

typedef struct chroot_call {
        runtime_job *j;
        int tree_fd;
        int archive_fd;           /* extract it first when >= 0 */
        int r;
} chroot_call;

static void *chrooted_main(void *userdata) {
        chroot_call *c = userdata;
        /* unshare(CLONE_FS) gives this thread its own root, so the chroot
         * does not touch the daemon's other threads; the thread ends here. */
        if (unshare(CLONE_FS) < 0 || fchdir(c->tree_fd) < 0 || chroot(".") < 0 || chdir("/") < 0) {
                c->r = sb_error_set(&c->j->err, negative_errno(), NULL, NULL, "chroot into the new tree: %m");
                return NULL;
        }
        umask(022);
        c->r = c->archive_fd >= 0 ? extract_tarball(c->j, c->archive_fd, &c->j->err) : 0;
        if (c->r >= 0)
                c->r = fixup_tree(&c->j->err);
        return NULL;
}

/* Extracts (archive_fd >= 0) and fixes up the tree at tree_fd from a
 * thread of its own chrooted there: whatever the members say, nothing is
 * written outside the tree. */
static int run_chrooted(runtime_job *j, int tree_fd, int archive_fd) {
        chroot_call c = {.j = j, .tree_fd = tree_fd, .archive_fd = archive_fd, .r = -EIO};
        pthread_t t;
        int r = pthread_create(&t, NULL, chrooted_main, &c);
        if (r != 0)
                return sb_error_set(&j->err, -r, NULL, NULL, "start the extraction thread: %s", strerror(r));
        pthread_join(t, NULL);
        return c.r;
}

static __thread uint64_t tree_bytes;

static int count_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        tree_bytes += (uint64_t)st->st_blocks * 512;
        return 0;
}

static uint64_t tree_size(const char *path) {
        tree_bytes = 0;
        (void)nftw(path, count_entry, 64, FTW_PHYS | FTW_MOUNT);
        return tree_bytes;
}

/* Writes the record and renames the finished tree into place. */
static int publish(runtime_job *j, cJSON *source) {
        _cleanup_free_ char *tmp = NULL, *dst = NULL, *rec = NULL, *text = NULL;
        char buf[32];
        if (asprintf(&tmp, "%s/%s", j->runtimes_dir, j->tmp) < 0 ||
            asprintf(&dst, "%s/%s", j->runtimes_dir, j->name) < 0 ||
            asprintf(&rec, "%s/%s.json", j->runtimes_dir, j->name) < 0) {
                cJSON_Delete(source);
                return sb_error_set(&j->err, -ENOMEM, NULL, NULL, "out of memory");
        }
        j->record = cJSON_CreateObject();
        cJSON_AddStringToObject(j->record, "name", j->name);
        cJSON_AddItemToObject(j->record, "source", source);
        cJSON_AddNumberToObject(j->record, "sizeBytes", (double)tree_size(tmp));
        cJSON_AddStringToObject(j->record, "createdAt", core_format_time(core_now_ms(), buf, sizeof(buf)));
        if (j->owner)
                cJSON_AddStringToObject(j->record, "owner", j->owner);
        text = cJSON_Print(j->record);
        if (!text)
                return sb_error_set(&j->err, -ENOMEM, NULL, NULL, "out of memory");
        /* The lower layer must be traversable by the sandbox user. */
        if (chmod(tmp, 0755) < 0 || rename(tmp, dst) < 0)
                return sb_error_set(&j->err, negative_errno(), NULL, NULL, "rename %s: %m", tmp);
        core_fault("runtime.renamed");
        int r = core_write_file_atomic(rec, text, strlen(text), 0644);
        if (r < 0) {
                core_rm_rf(dst);
                return sb_error_set(&j->err, r, NULL, NULL, "write %s: %s", rec, strerror(-r));
        }
        return 0;
}

/* The new tree's directory, made (mode 0700 until it is whole) and opened. */
static int make_tmp(runtime_job *j) {
        char hex[17];
        core_random_hex(hex, 16);
        snprintf(j->tmp, sizeof(j->tmp), ".%s.tmp-%s", j->name, hex);
        _cleanup_free_ char *p = NULL;
        if (asprintf(&p, "%s/%s", j->runtimes_dir, j->tmp) < 0)
                return sb_error_set(&j->err, -ENOMEM, NULL, NULL, "out of memory");
        if (mkdir(p, 0700) < 0)
                return sb_error_set(&j->err, negative_errno(), NULL, NULL, "mkdir %s: %m", p);
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return sb_error_set(&j->err, negative_errno(), NULL, NULL, "open %s: %m", p);
        return fd;
}

static void remove_tmp(runtime_job *j) {
        _cleanup_free_ char *p = NULL;
        if (j->tmp[0] && asprintf(&p, "%s/%s", j->runtimes_dir, j->tmp) >= 0)
                core_rm_rf(p);
}

/* ---- runtime.import ------------------------------------------------------------ */

static void import_work(void *userdata) {
        runtime_job *j = userdata;
        struct stat st;
        /* A tenant's tarball was opened under localSourceRoots already. */
        _cleanup_close_ int fd = j->fd >= 0 ? TAKE_FD(j->fd) : open(j->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0 || fstat(fd, &st) < 0) {
                sb_error_set(&j->err, negative_errno(), errno == ENOENT ? "not_found" : "source_failed", "path",
                             "open %s: %m", j->path);
                return;
        }
        if (!S_ISREG(st.st_mode)) {
                sb_error_set(&j->err, -EINVAL, "source_failed", "path", "%s is not a regular file", j->path);
                return;
        }
        _cleanup_close_ int tree = make_tmp(j);
        int r = tree < 0 ? tree : run_chrooted(j, tree, fd);
        if (r >= 0 && j->disk_bound) {
                /* Blocks, not member sizes: many small files take more. */
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", j->runtimes_dir, j->tmp) < 0)
                        r = sb_error_set(&j->err, -ENOMEM, NULL, NULL, "out of memory");
                else if (tree_size(p) > j->max_bytes)
                        r = runtime_too_big(j, &j->err);
        }
        if (r >= 0) {
                core_fault("runtime_import.extracted");
                cJSON *src = cJSON_CreateObject();
                cJSON_AddStringToObject(src, "type", "tarball");
                cJSON_AddStringToObject(src, "path", j->path);
                if (j->skipped)
                        cJSON_AddNumberToObject(src, "skippedMembers", j->skipped);
                r = publish(j, src);
        }
        if (r < 0)
                remove_tmp(j);
}

static void runtime_job_free(runtime_job *j) {
        if (!j)
                return;
        free(j->name);
        free(j->path);
        free(j->owner);
        if (j->fd >= 0)
                close(j->fd);
        free(j->suite);
        free(j->mirror);
        free(j->runtimes_dir);
        free(j->cache_dir);
        cJSON_Delete(j->record);
        sb_error_free(j->err);
        free(j);
}

static void job_done(void *userdata) {
        runtime_job *j = userdata;
        manager *m = j->m;
        job_forget(m, j->name);
        if (j->err) {
                sb_error_prefix(&j->err, "runtime '%s'", j->name);
                char lm[TEXT_LOG_BUF];  /* names the client's path and the tarball's members */
                log_warning("%s", text_for_log(j->err->message, lm, sizeof(lm)));
                rpc_reply_sb_error(j->req, j->err);
        } else {
                cJSON *o = runtime_json(m, j->name);
                if (o && j->suite)
                        cJSON_AddBoolToObject(o, "cached", j->cached);
                log_info("runtime '%s' %s", j->name, j->suite ? "bootstrapped" : "imported");
                if (o)
                        rpc_reply(j->req, o);
                else
                        rpc_reply_error(j->req, RPC_APP_ERROR, "failed", NULL, "runtime '%s': record unreadable",
                                        j->name);
        }
        runtime_job_free(j);
}

/* Validates params.name for a new runtime and reserves it. Answers the
 * request itself and returns NULL on failure. */
static runtime_job *job_new(rpc_request *req, manager *m, bool import) {
        const char *name = NULL;
        _cleanup_error_ sb_error *err = NULL;
        if (rpc_param_string(req, "name", true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        if (!core_name_is_valid(name)) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "name",
                                "name: '%s' is not valid; use 1-63 of a-z, 0-9 and '-', starting with a letter or digit",
                                TEXT_Q(name));
                return NULL;
        }
        if (streq(name, "host") || job_pending(m, name) || runtime_exists(m, name)) {
                _cleanup_free_ char *owner = NULL;
                bool pending = job_pending(m, name);
                bool admin = tenant_req_admin(m, req);
                if (streq(name, "host"))
                        rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                        "runtime 'host' is built in and cannot be replaced");
                else if (!admin && (pending || runtime_owner(m, name, &owner) < 0 || !tenant_req_owns(m, req, owner)))
                        /* Taken by another tenant, by admin or by a job of
                         * anyone's: that it is taken, never by whom. */
                        rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name",
                                        "runtime '%s' already exists; pick another name", name);
                else
                        rpc_reply_error(req, RPC_APP_ERROR, "already_exists", "name", "runtime '%s' already exists%s",
                                        name, pending ? " (being made)" : "; delete it first");
                return NULL;
        }
        /* The owner is the client's identity, never a param (tenant.h). */
        tenant t;
        tenant_of_conn(m->cfg, req->conn, &t);
        const char *owner = tenant_owner(&t);
        /* Counted here, on the loop, with the tenant's imports still in
         * progress: concurrent requests cannot pass maxRuntimes together. */
        if (owner && tenant_check_new_runtime(m, req, runtimes_owned(m, owner) + jobs_of(m, owner), &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        /* An import unpacks onto the state filesystem: under maxDiskMiB at
         * most the tenant's room, reserved (as the count is) until it ends. */
        uint64_t room_mib = UINT64_MAX;
        if (owner && import && tenant_disk_room(m, req, &room_mib, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        uint64_t max_bytes = m->cfg->max_source_bytes;
        bool disk_bound = room_mib != UINT64_MAX && room_mib < (max_bytes >> 20);
        if (disk_bound)
                max_bytes = room_mib << 20;
        cJSON *job = cJSON_CreateObject();
        if (job && (!cJSON_AddStringToObject(job, "name", name) || (owner && !cJSON_AddStringToObject(job, "owner", owner)) ||
                    (owner && import && room_mib != UINT64_MAX &&
                     !cJSON_AddNumberToObject(job, "reserveMiB", (double) ((max_bytes + (1u << 20) - 1) >> 20))))) {
                cJSON_Delete(job);
                job = NULL;
        }
        runtime_job *j = calloc(1, sizeof(*j));
        if (j)
                j->fd = -EBADF;
        if (!j || !(j->name = strdup(name)) || !(j->runtimes_dir = strdup(m->runtimes_dir)) ||
            (owner && !(j->owner = strdup(owner))) ||
            !job || cJSON_AddItemToArray(m->runtime_jobs, TAKE_PTR(job)) == false) {
                cJSON_Delete(job);
                runtime_job_free(j);
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "out of memory");
                return NULL;
        }
        j->m = m;
        j->req = req;
        j->max_bytes = max_bytes;
        j->disk_bound = disk_bound;
        return j;
}

static void submit(runtime_job *j, worker_fn work) {
        if (worker_submit(work, job_done, j) < 0) {
                job_forget(j->m, j->name);
                rpc_reply_error(j->req, RPC_APP_ERROR, "failed", NULL, "cannot start a worker");
                runtime_job_free(j);
        }
}

static void method_import(rpc_request *req, void *userdata) {
        manager *m = userdata;
        const char *path = NULL;
        _cleanup_error_ sb_error *err = NULL;
        if (rpc_param_string(req, "path", true, &path, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (path[0] != '/') {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "path", "path: must be an absolute path on the daemon's host");
                return;
        }
        /* A tenant's path is read as root: only under localSourceRoots,
         * never through a symlink or "..", opened now (tenant.h). */
        _cleanup_close_ int fd = -EBADF;
        if (!tenant_req_admin(m, req) && (fd = tenant_host_open(m, req, path, TENANT_HOST_FILE, "path", &err)) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        runtime_job *j = job_new(req, m, true);
        if (!j)
                return;
        j->fd = TAKE_FD(fd);
        if (!(j->path = strdup(path))) {
                job_forget(m, j->name);
                runtime_job_free(j);
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "out of memory");
                return;
        }
        submit(j, import_work);
}

/* ---- runtime.bootstrap ------------------------------------------------------- */

/* The first `deb` URI this machine's apt uses: one-line sources.list
 * entries first, then deb822 .sources files in name order. */
static char *default_mirror(void) {
        _cleanup_fclose_ FILE *f = fopen("/etc/apt/sources.list", "re");
        char line[1024], url[512];
        while (f && fgets(line, sizeof(line), f)) {
                char *p = line + strspn(line, " \t");
                if (strncmp(p, "deb", 3) != 0 || (p[3] != ' ' && p[3] != '\t'))
                        continue;
                p += 3 + strspn(p + 3, " \t");
                if (*p == '[' && (p = strchr(p, ']')))
                        p++;
                if (p && sscanf(p, " %511s", url) == 1)
                        return strdup(url);
        }
        glob_t g = {};
        if (glob("/etc/apt/sources.list.d/*.sources", 0, NULL, &g) != 0)
                return NULL;
        char *found = NULL;
        for (size_t i = 0; !found && i < g.gl_pathc; i++) {
                _cleanup_fclose_ FILE *s = fopen(g.gl_pathv[i], "re");
                bool deb = false;
                char uri[512] = "";
                while (s && !found && fgets(line, sizeof(line), s)) {
                        if (line[0] == '\n') {          /* end of a stanza */
                                if (deb && uri[0])
                                        found = strdup(uri);
                                deb = false;
                                uri[0] = 0;
                        } else if (strncasecmp(line, "Types:", 6) == 0) {
                                char *t = line + 6;
                                for (char *w = strtok(t, " \t\n"); w; w = strtok(NULL, " \t\n"))
                                        deb = deb || streq(w, "deb");
                        } else if (strncasecmp(line, "URIs:", 5) == 0)
                                (void)sscanf(line + 5, " %511s", uri);
                }
                if (!found && deb && uri[0])
                        found = strdup(uri);
        }
        globfree(&g);
        return found;
}

static bool suite_is_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 32 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
                return false;
        return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

/* http(s) only, no whitespace or control characters, nothing that debootstrap
 * could read as an option. */
static bool mirror_is_valid(const char *s) {
        if (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0)
                return false;
        if (strlen(s) > 400)
                return false;
        for (const unsigned char *p = (const unsigned char *)s; *p; p++)
                if (*p <= ' ' || *p == 0x7f || *p == '\'' || *p == '"' || *p == '\\')
                        return false;
        return true;
}

/* "<suite>-<16 hex>": the cache entry of suite and mirror. */
static void cache_key(const char *suite, const char *mirror, char *buf, size_t size) {
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)mirror, strlen(mirror), md);
        int n = snprintf(buf, size, "%s-", suite);
        for (int i = 0; i < 8 && n > 0 && (size_t)n + 3 <= size; i++)
                n += snprintf(buf + n, size - (size_t)n, "%02x", md[i]);
}

/* The last lines of debootstrap's log, for the error message. */
static void log_tail(const char *log, char *buf, size_t size) {
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        buf[0] = 0;
        if (core_read_file(log, 16 << 20, &text, &len) < 0 || !len)
                return;
        while (len && text[len - 1] == '\n')
                text[--len] = 0;
        const char *start = len > size - 1 ? text + len - (size - 1) : text;
        const char *nl = strchr(start, '\n');
        if (start != text && nl)
                start = nl + 1;
        snprintf(buf, size, "%s", start);
        for (char *p = buf; *p; p++)
                if (*p == '\n')
                        *p = ' ';
}

/* Runs debootstrap into `target` in new mount and PID namespaces, output
 * to `log`, bounded by j->timeout_ms (then everything in its PID namespace
 * is killed). Returns 0 or a negative errno with j->err. */
static int run_debootstrap(runtime_job *j, const char *target, const char *log) {
        char *const argv[] = {(char *)"debootstrap", (char *)"--variant=minbase", j->suite, (char *)target, j->mirror,
                              NULL};
        char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LANG=C.UTF-8",
                              (char *)"DEBIAN_FRONTEND=noninteractive", (char *)"HOME=/root", NULL};
        _cleanup_close_ int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        _cleanup_close_ int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (out < 0 || null < 0)
                return sb_error_set(&j->err, negative_errno(), NULL, NULL, "open %s: %m", log);
        int pidfd = -EBADF;
        struct clone_args args = {.flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_PIDFD,
                                  .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = SIGCHLD};
        pid_t pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
        if (pid == 0) {
                /* Child, PID 1 of its namespace: raw syscalls only until exec.
                 * Private mounts first, so debootstrap's proc and sys mounts in
                 * the target never propagate to the host. */
                if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 ||
                    dup2(out, 2) < 0)
                        _exit(126);
                /* The daemon blocks SIGCHLD and friends for sd-event and may
                 * ignore SIGPIPE; both would survive exec and confuse the
                 * shell scripts and dpkg debootstrap runs. */
                core_signals_reset();
                syscall(SYS_close_range, 3U, ~0U, 0U);
                execve(DEBOOTSTRAP, argv, envp);
                _exit(127);
        }
        if (pid < 0)
                return sb_error_set(&j->err, negative_errno(), NULL, NULL, "start debootstrap: %m");
        /* A daemon killed during the bootstrap: the next one ends it (and its
         * PID namespace with it) before it removes the half-made tree. */
        char owner[96];
        snprintf(owner, sizeof(owner), "debootstrap of runtime '%s'", j->name);
        (void)restore_helper_record(pid, owner);
        _cleanup_close_ int pfd = pidfd;
        uint64_t deadline = core_monotonic_ms() + j->timeout_ms;
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        int r;
        do {
                uint64_t now = core_monotonic_ms();
                r = now >= deadline ? 0 : poll(&p, 1, (int)(deadline - now > 60000 ? 60000 : deadline - now));
        } while ((r < 0 && errno == EINTR) || (r == 0 && core_monotonic_ms() < deadline));
        bool timed_out = r == 0;
        if (timed_out)
                syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
        siginfo_t si = {};
        (void)waitid(P_PIDFD, (id_t)pfd, &si, WEXITED);
        restore_helper_forget(pid);
        char tail[400];
        log_tail(log, tail, sizeof(tail));
        if (timed_out)
                return sb_error_set(&j->err, -ETIMEDOUT, "source_failed", NULL,
                                    "debootstrap did not finish within %llu ms (bootstrapTimeoutMs); last output: %s",
                                    (unsigned long long)j->timeout_ms, tail);
        if (si.si_code != CLD_EXITED || si.si_status != 0)
                return sb_error_set(&j->err, -EIO, "source_failed", "mirror",
                                    "debootstrap %s %s failed (exit %d): %s", j->suite, j->mirror, si.si_status,
                                    tail[0] ? tail : "no output");
        return 0;
}

static int strip_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        if (flag == FTW_F && S_ISREG(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)))
                (void)chmod(path, st->st_mode & 0777 & ~(mode_t)(S_ISUID | S_ISGID));
        return 0;
}

/* Makes <cache>/<key> with debootstrap unless it is there. */
static int fill_cache(runtime_job *j, const char *key, const char *tree) {
        _cleanup_free_ char *tmp = NULL, *log = NULL, *dev = NULL, *rec = NULL, *text = NULL;
        char hex[17];
        core_random_hex(hex, 16);
        int r = core_mkdir_p(j->cache_dir, 0700);
        if (r < 0)
                return sb_error_set(&j->err, r, NULL, NULL, "mkdir %s: %s", j->cache_dir, strerror(-r));
        if (asprintf(&tmp, "%s/.%s.tmp-%s", j->cache_dir, key, hex) < 0 ||
            asprintf(&log, "%s/%s.log", j->cache_dir, key) < 0 || asprintf(&dev, "%s/dev", tmp) < 0 ||
            asprintf(&rec, "%s/%s.json", j->cache_dir, key) < 0)
                return sb_error_set(&j->err, -ENOMEM, NULL, NULL, "out of memory");
        log_info("runtime '%s': debootstrap %s from %s (log: %s)", j->name, j->suite, j->mirror, log);
        r = run_debootstrap(j, tmp, log);
        if (r >= 0) {
                /* The device nodes debootstrap made: every sandbox gets a
                 * fresh minimal /dev; setuid bits: sandboxes run nosuid and
                 * no_new_privs, and the tree keeps none that could matter. */
                core_rm_rf(dev);
                (void)nftw(tmp, strip_entry, 64, FTW_PHYS | FTW_MOUNT);
                if (mkdir(dev, 0755) < 0 || chmod(tmp, 0755) < 0)
                        r = sb_error_set(&j->err, negative_errno(), NULL, NULL, "prepare %s: %m", tmp);
        }
        if (r >= 0 && rename(tmp, tree) < 0 && errno != EEXIST && errno != ENOTEMPTY)
                r = sb_error_set(&j->err, negative_errno(), NULL, NULL, "rename %s: %m", tmp);
        core_rm_rf(tmp);        /* gone after the rename; else a failure's or a concurrent twin's */
        if (r < 0)
                return r;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "suite", j->suite);
        cJSON_AddStringToObject(o, "mirror", j->mirror);
        text = cJSON_Print(o);
        cJSON_Delete(o);
        if (text)
                (void)core_write_file_atomic(rec, text, strlen(text), 0644);
        return 0;
}

/* Clones the tree below sfd into dfd with hard links (directories are
 * made anew with the same owner and mode); device nodes, FIFOs and sockets
 * are skipped. Neither tree is ever written, so sharing inodes is safe. */
static int clone_tree(int sfd, int dfd, sb_error **ret_err) {
        int dup_fd = fcntl(sfd, F_DUPFD_CLOEXEC, 3);
        _cleanup_closedir_ DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
        if (!d) {
                if (dup_fd >= 0)
                        close(dup_fd);
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "read the cached tree: %m");
        }
        struct dirent *de;
        while ((errno = 0, de = readdir(d))) {
                const char *n = de->d_name;
                struct stat st;
                if (streq(n, ".") || streq(n, ".."))
                        continue;
                if (fstatat(sfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "stat %s: %m", n);
                if (S_ISDIR(st.st_mode)) {
                        if (mkdirat(dfd, n, 0700) < 0 || fchownat(dfd, n, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
                            fchmodat(dfd, n, st.st_mode & 07777, 0) < 0)
                                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "mkdir %s: %m", n);
                        _cleanup_close_ int s2 = openat(sfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        _cleanup_close_ int d2 = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (s2 < 0 || d2 < 0)
                                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", n);
                        int r = clone_tree(s2, d2, ret_err);
                        if (r < 0)
                                return r;
                } else if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) {
                        if (linkat(sfd, n, dfd, n, 0) < 0)
                                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "link %s: %m", n);
                }
        }
        return errno ? sb_error_set(ret_err, -errno, NULL, NULL, "read the cached tree: %m") : 0;
}

static void bootstrap_work(void *userdata) {
        runtime_job *j = userdata;
        char key[64];
        cache_key(j->suite, j->mirror, key, sizeof(key));
        _cleanup_free_ char *tree = NULL;
        if (asprintf(&tree, "%s/%s", j->cache_dir, key) < 0) {
                sb_error_set(&j->err, -ENOMEM, NULL, NULL, "out of memory");
                return;
        }
        j->cached = access(tree, F_OK) == 0;
        int r = j->cached ? 0 : fill_cache(j, key, tree);
        if (r < 0)
                return;
        _cleanup_close_ int src = open(tree, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        _cleanup_close_ int dst = make_tmp(j);
        struct stat a, b;
        if (dst < 0)
                return;
        if (src < 0 || fstat(src, &a) < 0 || fstat(dst, &b) < 0)
                r = sb_error_set(&j->err, negative_errno(), NULL, NULL, "open %s: %m", tree);
        else if (a.st_dev == b.st_dev)
                r = clone_tree(src, dst, &j->err);
        else {
                /* The cache is on another filesystem: a full copy. */
                _cleanup_free_ char *p = NULL;
                r = asprintf(&p, "%s/%s", j->runtimes_dir, j->tmp) < 0 ? -ENOMEM : 0;
                if (r >= 0 && (r = rmdir(p) < 0 ? negative_errno() : 0) >= 0)
                        r = core_tree_copy(tree, p, &j->err);
                if (r >= 0) {
                        close(dst);
                        dst = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        r = dst < 0 ? negative_errno() : 0;
                }
                if (r < 0 && !j->err)
                        sb_error_set(&j->err, r, NULL, NULL, "copy %s: %s", tree, strerror(-r));
        }
        if (r >= 0)
                r = run_chrooted(j, dst, -EBADF);
        if (r >= 0) {
                cJSON *s = cJSON_CreateObject();
                cJSON_AddStringToObject(s, "type", "debootstrap");
                cJSON_AddStringToObject(s, "suite", j->suite);
                cJSON_AddStringToObject(s, "mirror", j->mirror);
                cJSON_AddStringToObject(s, "variant", "minbase");
                r = publish(j, s);
        }
        if (r < 0)
                remove_tmp(j);
}

static void method_bootstrap(rpc_request *req, void *userdata) {
        manager *m = userdata;
        const char *suite = DEFAULT_SUITE, *mirror = NULL;
        _cleanup_error_ sb_error *err = NULL;
        _cleanup_free_ char *dflt = NULL;
        if (rpc_param_string(req, "suite", false, &suite, &err) < 0 ||
            rpc_param_string(req, "mirror", false, &mirror, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (!suite_is_valid(suite)) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "suite",
                                "suite: '%s' is not a Debian suite name (e.g. bookworm)", TEXT_Q(suite));
                return;
        }
        if (!mirror && !(mirror = dflt = default_mirror())) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "mirror",
                                "mirror: none given and no deb entry in /etc/apt/sources.list or sources.list.d");
                return;
        }
        if (!mirror_is_valid(mirror)) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "mirror",
                                "mirror: must be an http:// or https:// URL without spaces or quotes");
                return;
        }
        runtime_job *j = job_new(req, m, false);
        if (!j)
                return;
        j->timeout_ms = m->cfg->bootstrap_timeout_ms;
        j->suite = strdup(suite);
        j->mirror = strdup(mirror);
        if (m->cfg->runtime_cache)
                j->cache_dir = strdup(m->cfg->runtime_cache);
        else if (asprintf(&j->cache_dir, "%s/cache/debootstrap", m->cfg->state_dir) < 0)
                j->cache_dir = NULL;
        if (!j->suite || !j->mirror || !j->cache_dir) {
                job_forget(m, j->name);
                runtime_job_free(j);
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "out of memory");
                return;
        }
        submit(j, bootstrap_work);
}

/* ---- runtime.list and runtime.delete ------------------------------------------- */

/* Calls fn for each runtime on disk but "host" (name order), with its
 * record's owner (NULL: admin). */
static void runtimes_each(manager *m, void (*fn)(manager *m, const char *name, const char *owner, void *userdata),
                          void *userdata) {
        struct dirent **names = NULL;
        int n = scandir(m->runtimes_dir, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
                const char *dn = names[i]->d_name;
                _cleanup_free_ char *owner = NULL;
                if (dn[0] != '.' && !streq(dn, "host") && runtime_owner(m, dn, &owner) == 0)
                        fn(m, dn, owner, userdata);
                free(names[i]);
        }
        free(names);
}

static void list_one(manager *m, const char *name, const char *owner, void *userdata) {
        rpc_request *req = ((void **) userdata)[0];
        cJSON *arr = ((void **) userdata)[1];
        /* Another tenant's runtime is not listed at all (tenant.h). */
        if (!runtime_visible(m, req, owner))
                return;
        cJSON *o = runtime_json(m, name);
        if (o)
                cJSON_AddItemToArray(arr, o);
}

static void method_list(rpc_request *req, void *userdata) {
        manager *m = userdata;
        cJSON *res = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(res, "runtimes");
        cJSON_AddItemToArray(arr, runtime_json(m, "host"));
        void *ctx[2] = { req, arr };
        runtimes_each(m, list_one, ctx);
        rpc_reply(req, res);
}

static void count_one(manager *m, const char *name, const char *owner, void *userdata) {
        struct { const char *owner; unsigned n; } *c = userdata;
        c->n += owner && streq(owner, c->owner);
}

/* Imported runtimes hold their tree on the state filesystem: sizeBytes of
 * the record, rounded up to MiB. A bootstrapped one is hard links into the
 * debootstrap cache, shared by every runtime of that suite: not counted. */
static void disk_one(manager *m, const char *name, const char *owner, void *userdata) {
        struct { const char *owner; uint64_t mib; } *c = userdata;
        if (!owner || !streq(owner, c->owner))
                return;
        _cleanup_free_ char *path = record_path(m, name), *text = NULL;
        if (!path || core_read_file(path, MAX_RECORD_BYTES, &text, NULL) < 0)
                return;
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(text);
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(o, "sizeBytes");
        const char *type = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "source"), "type"));
        if (cJSON_IsNumber(size) && size->valuedouble > 0 && type && streq(type, "tarball"))
                c->mib += ((uint64_t) size->valuedouble + (1u << 20) - 1) >> 20;
}

uint64_t runtimes_disk_mib(manager *m, const char *owner) {
        struct { const char *owner; uint64_t mib; } c = { owner, 0 };
        if (!owner)
                return 0;
        runtimes_each(m, disk_one, &c);
        return c.mib + jobs_reserved_mib(m, owner);
}

unsigned runtimes_owned(manager *m, const char *owner) {
        struct { const char *owner; unsigned n; } c = { owner, 0 };
        if (owner)
                runtimes_each(m, count_one, &c);
        return c.n;
}

typedef struct delete_job {
        rpc_request *req;
        char *path;
} delete_job;

static void delete_work(void *userdata) {
        delete_job *d = userdata;
        core_rm_rf(d->path);
}

static void delete_done(void *userdata) {
        delete_job *d = userdata;
        rpc_reply(d->req, NULL);
        free(d->path);
        free(d);
}

static void method_delete(rpc_request *req, void *userdata) {
        manager *m = userdata;
        const char *name = NULL;
        _cleanup_error_ sb_error *err = NULL;
        if (rpc_param_string(req, "name", true, &name, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (streq(name, "host")) {
                rpc_reply_error(req, RPC_APP_ERROR, "in_use", "name", "runtime 'host' is built in and cannot be deleted");
                return;
        }
        if (runtime_check(m, req, name, "name", &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        int snaps = 0;
        cJSON *users = cJSON_CreateArray();
        int n = runtime_users(m, name, users, &snaps);
        if (n > 0) {
                char list[512] = "";
                const cJSON *it;
                /* A tenant is told of its own sandboxes by name, of others'
                 * (admin's, on its runtime) by count only. */
                cJSON_ArrayForEach(it, users)
                        if (strlen(list) + strlen(it->valuestring) + 8 < sizeof(list) &&
                            tenant_conn_sees_sandbox(m, req->conn, it->valuestring))
                                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
                                         list[0] ? ", " : " (", it->valuestring);
                cJSON_Delete(users);
                rpc_reply_error(req, RPC_APP_ERROR, "in_use", "name",
                                "runtime '%s' is in use by %d sandbox(es)%s%s and %d snapshot(s); delete them first",
                                name, n - snaps, list, list[0] ? ")" : "", snaps);
                return;
        }
        cJSON_Delete(users);
        warmpool_discard_runtime(m, name);
        /* The name is free at once: the tree moves aside, the record goes,
         * and the (possibly large) tree is removed on a worker. */
        _cleanup_free_ char *rec = record_path(m, name);
        delete_job *d = calloc(1, sizeof(*d));
        if (!d || !rec) {
                free(d);
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "out of memory");
                return;
        }
        int tr = core_tombstone(m->runtimes_dir, name, &d->path);
        if (tr < 0 || unlink(rec) < 0) {
                if (tr < 0)
                        errno = -tr;
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "remove runtime '%s': %m", name);
                free(d->path);
                free(d);
                return;
        }
        log_info("runtime '%s' deleted", name);
        d->req = req;
        if (worker_submit(delete_work, delete_done, d) < 0) {
                delete_work(d);
                delete_done(d);
        }
}

void runtimes_load(manager *m) {
        if (!m->runtime_jobs)
                m->runtime_jobs = cJSON_CreateArray();
        /* After reconcile(): the adopted sessions hold their versions. */
        runtime_host_collect(m);
        _cleanup_closedir_ DIR *d = opendir(m->runtimes_dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                const char *n = de->d_name;
                size_t len = strlen(n);
                if (streq(n, ".") || streq(n, "..") || streq(n, "host") || strncmp(n, "host.", 5) == 0)
                        continue;
                bool is_record = len > 5 && streq(n + len - 5, ".json");
                _cleanup_free_ char *p = NULL, *base = strndup(n, is_record ? len - 5 : len);
                if (!base || asprintf(&p, "%s/%s", m->runtimes_dir, n) < 0)
                        continue;
                /* Leftovers of an interrupted import, bootstrap or delete,
                 * and halves of a runtime whose other half is missing. */
                if (n[0] != '.' && core_name_is_valid(base) && runtime_exists(m, base))
                        continue;
                /* Half a runtime is still never pulled from under a sandbox
                 * or snapshot that stands on it (its record was lost). */
                if (!is_record && n[0] != '.' && core_name_is_valid(base) && runtime_users(m, base, NULL, NULL) > 0) {
                        log_warning("runtime '%s' has no record (%s.json) but sandboxes or snapshots use it; "
                                    "its tree is kept", base, base);
                        continue;
                }
                log_info("removing leftover runtime file %s", n);
                if (is_record)
                        (void)unlink(p);
                else
                        core_rm_rf(p);
        }
}

bool runtime_is_host(const sandbox *sb) {
        return !sb->runtime || streq(sb->runtime, "host");
}

static bool host_version_in_use(manager *m, const char *version) {
        if (streq(version, m->host_version))
                return true;
        /* A session of the layout before versions may stand on either tree
         * that layout left ("legacy", "legacy-old"): both stay for it. */
        bool legacy = strncmp(version, "legacy", 6) == 0;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                if (sb->sess && (streq(sb->sess->runtime_version, version) ||
                                 (legacy && streq(sb->sess->runtime_version, "legacy"))))
                        return true;
        return warmpool_host_version_in_use(m, version);
}

void runtime_host_collect(manager *m) {
        _cleanup_free_ char *host = NULL;
        if (asprintf(&host, "%s/host", m->runtimes_dir) < 0)
                return;
        _cleanup_closedir_ DIR *d = opendir(host);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                const char *n = de->d_name;
                if (streq(n, ".") || streq(n, "..") || host_version_in_use(m, n))
                        continue;
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", host, n) < 0)
                        continue;
                /* Small trees (the generated /etc and empty mount points). */
                log_info("removing host runtime version %s (no session stands on it)", n);
                int r = core_rm_rf(p);
                if (r < 0)
                        log_warning_errno(r, "remove %s: %m", p);
        }
}

void register_runtime_methods(manager *m, rpc_server *s) {
        if (!m->runtime_jobs)
                m->runtime_jobs = cJSON_CreateArray();
        rpc_server_add_method(s, "runtime.list", method_list, m);
        rpc_server_add_method(s, "runtime.import", method_import, m);
        rpc_server_add_method(s, "runtime.bootstrap", method_bootstrap, m);
        rpc_server_add_method(s, "runtime.delete", method_delete, m);
}
