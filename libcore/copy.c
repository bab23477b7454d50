/* Tree copy and tree export on libarchive's read_disk (see copy.h). Used
 * for forks and snapshots of a running sandbox, whose upper layer cannot be
 * reused in place while it is mounted, and for snapshot export. Runs in
 * sandboxd as root. */
#include <string.h>
#include <sys/stat.h>
#include "libcore/copy.h"
#include "libcore/util.h"

/* Writes one entry (header and, for regular files, data) under prefix. */
static int write_entry(struct archive *rd, struct archive *wr, struct archive_entry *e, const char *src,
                       const char *prefix, sb_error **ret_err) {
        const char *path = archive_entry_pathname(e), *link = archive_entry_hardlink(e);
        size_t n = strlen(src);
        if (strncmp(path, src, n) != 0 || (path[n] && path[n] != '/'))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "unexpected path %s", path);
        _cleanup_free_ char *to = NULL, *link_to = NULL;
        if (asprintf(&to, "%s%s%s", prefix, path + n, path[n] ? "" : "/") < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        archive_entry_copy_pathname(e, to);
        if (link) {
                if (strncmp(link, src, n) != 0 || link[n] != '/' || asprintf(&link_to, "%s%s", prefix, link + n) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, NULL, "hardlink %s outside the tree", link);
                archive_entry_copy_hardlink(e, link_to);
        }
        if (archive_write_header(wr, e) < ARCHIVE_WARN)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "%s: %s", to, archive_error_string(wr));
        if (archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0 && !link) {
                char buf[64 * 1024];
                la_ssize_t got;
                while ((got = archive_read_data(rd, buf, sizeof(buf))) > 0)
                        if (archive_write_data(wr, buf, (size_t)got) != got)
                                return sb_error_set(ret_err, -EIO, NULL, NULL, "%s: %s", to,
                                                    archive_error_string(wr));
                if (got < 0)
                        return sb_error_set(ret_err, -EIO, NULL, NULL, "%s: %s", path, archive_error_string(rd));
        }
        if (archive_write_finish_entry(wr) < ARCHIVE_WARN)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "%s: %s", to, archive_error_string(wr));
        return 0;
}

int core_tree_write(const char *src, struct archive *wr, const char *prefix, bool numeric_owners,
                    sb_error **ret_err) {
        _cleanup_(archive_freep) struct archive *rd = archive_read_disk_new();
        _cleanup_(archive_entry_linkresolver_freep) struct archive_entry_linkresolver *lr =
                archive_entry_linkresolver_new();
        if (!rd || !lr)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* Physical walk (symlinks stay links), metadata and xattrs read from
         * disk, never crossing into another mount. */
        archive_read_disk_set_symlink_physical(rd);
        if (!numeric_owners)
                archive_read_disk_set_standard_lookup(rd);
        archive_read_disk_set_behavior(rd, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
        archive_entry_linkresolver_set_strategy(lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
        if (archive_read_disk_open(rd, src) != ARCHIVE_OK)
                return sb_error_set(ret_err, -EIO, NULL, NULL, "open %s: %s", src, archive_error_string(rd));
        for (;;) {
                _cleanup_(archive_entry_freep) struct archive_entry *e = archive_entry_new();
                int r = archive_read_next_header2(rd, e);
                if (r == ARCHIVE_EOF)
                        return 0;
                if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
                        return sb_error_set(ret_err, -EIO, NULL, NULL, "read %s: %s", src, archive_error_string(rd));
                archive_read_disk_descend(rd);
                struct archive_entry *sparse = NULL, *cur = e;
                archive_entry_linkify(lr, &cur, &sparse);
                if (cur) {
                        r = write_entry(rd, wr, cur, src, prefix, ret_err);
                        if (cur != e)
                                archive_entry_free(cur);
                        if (r < 0)
                                return r;
                }
        }
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
        archive_write_disk_set_options(wr, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                                                   ARCHIVE_EXTRACT_XATTR | ARCHIVE_EXTRACT_ACL |
                                                   ARCHIVE_EXTRACT_FFLAGS | ARCHIVE_EXTRACT_UNLINK);
        int r = core_tree_write(src, wr, dst, false, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "copy");
        return archive_write_close(wr) == ARCHIVE_OK
                       ? 0 : sb_error_set(ret_err, -EIO, NULL, NULL, "copy: %s", archive_error_string(wr));
}
