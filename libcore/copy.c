/* Tree copy on libarchive's read_disk / write_disk (see copy.h). Used for
 * forks and snapshots of a running sandbox, whose upper layer cannot be
 * reused in place while it is mounted. Runs in sandboxd as root. */
#include <archive.h>
#include <archive_entry.h>
#include <string.h>
#include <sys/stat.h>
#include "libcore/copy.h"
#include "libcore/util.h"

static void archive_freep(struct archive **a) {
        if (*a)
                archive_free(*a);
}
static void entry_freep(struct archive_entry **e) {
        if (*e)
                archive_entry_free(*e);
}
static void resolver_freep(struct archive_entry_linkresolver **r) {
        if (*r)
                archive_entry_linkresolver_free(*r);
}

/* Writes one entry (header and, for regular files, data) under dst. */
static int copy_entry(struct archive *rd, struct archive *wr, struct archive_entry *e, const char *src,
                      const char *dst, sb_error **ret_err) {
        const char *path = archive_entry_pathname(e);
        size_t n = strlen(src);
        if (strncmp(path, src, n) != 0 || (path[n] && path[n] != '/'))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "copy: unexpected path %s", path);
        _cleanup_free_ char *to = NULL;
        if (asprintf(&to, "%s%s", dst, path + n) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        archive_entry_copy_pathname(e, to);
        const char *link = archive_entry_hardlink(e);
        _cleanup_free_ char *link_to = NULL;
        if (link) {
                if (strncmp(link, src, n) != 0 || asprintf(&link_to, "%s%s", dst, link + n) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL, "copy: hardlink %s outside the tree", link);
                archive_entry_copy_hardlink(e, link_to);
        }
        if (archive_write_header(wr, e) != ARCHIVE_OK)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "copy %s: %s", to, archive_error_string(wr));
        if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0 && !link) {
                char buf[64 * 1024];
                la_ssize_t got;
                while ((got = archive_read_data(rd, buf, sizeof(buf))) > 0)
                        if (archive_write_data(wr, buf, (size_t)got) != got)
                                return sb_error_set(ret_err, -EIO, NULL, NULL, "copy %s: %s", to,
                                                    archive_error_string(wr));
                if (got < 0)
                        return sb_error_set(ret_err, -EIO, NULL, NULL, "copy %s: %s", path,
                                            archive_error_string(rd));
        }
        if (archive_write_finish_entry(wr) != ARCHIVE_OK)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "copy %s: %s", to, archive_error_string(wr));
        return 0;
}

int core_tree_copy(const char *src, const char *dst, sb_error **ret_err) {
        struct stat st;
        if (lstat(src, &st) < 0 || !S_ISDIR(st.st_mode))
                return sb_error_set(ret_err, -ENOTDIR, NULL, NULL, "copy: %s is not a directory", src);
        if (access(dst, F_OK) == 0)
                return sb_error_set(ret_err, -EEXIST, NULL, NULL, "copy: %s exists", dst);
        _cleanup_(archive_freep) struct archive *rd = archive_read_disk_new();
        _cleanup_(archive_freep) struct archive *wr = archive_write_disk_new();
        _cleanup_(resolver_freep) struct archive_entry_linkresolver *lr = archive_entry_linkresolver_new();
        if (!rd || !wr || !lr)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* Physical walk (symlinks stay links), metadata and xattrs read from
         * disk, never crossing into another mount. */
        archive_read_disk_set_symlink_physical(rd);
        archive_read_disk_set_standard_lookup(rd);
        archive_read_disk_set_behavior(rd, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
        archive_entry_linkresolver_set_strategy(lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
        archive_write_disk_set_options(wr, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                                   ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_ACL |
                                                   ARCHIVE_EXTRACT_FFLAGS | ARCHIVE_EXTRACT_UNLINK);
        if (archive_read_disk_open(rd, src) != ARCHIVE_OK)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "copy: open %s: %s", src, archive_error_string(rd));
        for (;;) {
                _cleanup_(entry_freep) struct archive_entry *e = archive_entry_new();
                int r = archive_read_next_header2(rd, e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EIO, NULL, NULL, "copy: read %s: %s", src,
                                            archive_error_string(rd));
                archive_read_disk_descend(rd);
                struct archive_entry *sparse = NULL, *cur = e;
                archive_entry_linkify(lr, &cur, &sparse);
                if (cur) {
                        r = copy_entry(rd, wr, cur, src, dst, ret_err);
                        if (cur != e)
                                archive_entry_free(cur);
                        if (r < 0)
                                return r;
                }
        }
        return archive_write_close(wr) == ARCHIVE_OK
                       ? 0 : sb_error_set(ret_err, -EIO, NULL, NULL, "copy: %s", archive_error_string(wr));
}
