/* Directory trees as one tar stream (pax restricted, uncompressed), packed
 * from and unpacked into a directory: fs.readTar / fs.writeTar (sandbox-init
 * runs these inside the sandbox, as the sandbox user) and `sandboxctl cp -r`
 * (on the host, as the caller). Both ends get the same rules, so a stream
 * that one end refuses the other never writes:
 *
 * - member names are relative, without "." or ".." components
 *   (ARCHIVE_EXTRACT_SECURE_NODOTDOT and SECURE_NOABSOLUTEPATHS, and our own
 *   check first, which names the member);
 * - nothing is written through a symlink the stream or the tree holds
 *   (ARCHIVE_EXTRACT_SECURE_SYMLINKS): a symlink member is kept as a link;
 * - hardlink targets obey the same rules as names, so they stay inside the
 *   extraction directory;
 * - only regular files, directories, symlinks and hardlinks: device nodes,
 *   FIFOs and sockets are refused;
 * - setuid and setgid bits are dropped; other permission bits and mtimes
 *   are kept; owners are not (files belong to whoever unpacks).
 *
 * Header-only because cli/ links no libcore object (like base64.h); depends
 * on libarchive and libc only. Link with -larchive. */
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Bytes per archive_read_data_block / write buffer: large blocks keep the
 * per-call cost of libarchive out of a 1 GiB copy. */
#define TARSTREAM_BLOCK (1024 * 1024)

/* Counters of one pack or unpack. */
typedef struct tarstream_stats {
        uint64_t entries; /* members */
        uint64_t bytes;   /* file content bytes */
} tarstream_stats;

/* True when `name` is a relative path with no empty, "." or ".." component
 * (a trailing '/' of a directory member is allowed). */
static inline bool tarstream_name_ok(const char *name) {
        if (!name || !*name || name[0] == '/')
                return false;
        for (const char *p = name; *p;) {
                const char *e = strchrnul(p, '/');
                size_t n = (size_t)(e - p);
                if (n == 0 && *e) /* "a//b" */
                        return false;
                if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                p = *e ? e + 1 : e;
        }
        return true;
}

/* The options of archive_write_disk for every unpack (see the file comment).
 * Not ARCHIVE_EXTRACT_UNLINK: with it libarchive removes a symlink met on a
 * member's path and goes on, where without it SECURE_SYMLINKS refuses the
 * member, which says more. A file in the way is still replaced. */
#define TARSTREAM_EXTRACT_FLAGS                                                                              \
        (ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |                                 \
         ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME)

/* Checks one member against the rules above and makes it safe to write
 * (setuid/setgid cleared, owner names dropped). Returns 0, or -EPERM with a
 * message naming the member in err. */
static inline int tarstream_check_entry(struct archive_entry *e, char *err, size_t errlen) {
        const char *name = archive_entry_pathname(e);
        const char *link = archive_entry_hardlink(e);
        mode_t type = archive_entry_filetype(e);
        if (!tarstream_name_ok(name)) {
                snprintf(err, errlen, "member \"%.200s\": names must be relative, without \".\" or \"..\"",
                         name ? name : "");
                return -EPERM;
        }
        if (link && !tarstream_name_ok(link)) {
                snprintf(err, errlen, "member \"%.200s\": hardlink to \"%.200s\" outside the tree", name, link);
                return -EPERM;
        }
        if (!link && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
                snprintf(err, errlen, "member \"%.200s\": only files, directories and links are copied "
                         "(device nodes, FIFOs and sockets are refused)", name);
                return -EPERM;
        }
        archive_entry_set_perm(e, archive_entry_perm(e) & 01777);
        archive_entry_set_uname(e, NULL);
        archive_entry_set_gname(e, NULL);
        return 0;
}

/* Unpacks every member of the open reader `in` into the current directory
 * (the caller chdir'ed into the target; names resolve against it). Stops at
 * the first refused member or error. Returns 0 or a negative errno with a
 * message in err; *stats counts what was written. */
static inline int tarstream_unpack(struct archive *in, tarstream_stats *stats, char *err, size_t errlen) {
        struct archive *out = archive_write_disk_new();
        if (!out) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        archive_write_disk_set_options(out, TARSTREAM_EXTRACT_FLAGS);
        int ret = 0;
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header(in, &e);
                if (r == ARCHIVE_EOF)
                        break;
                if (r < ARCHIVE_WARN) {
                        snprintf(err, errlen, "read archive: %s", archive_error_string(in) ?: "error");
                        ret = -EIO;
                        break;
                }
                if ((ret = tarstream_check_entry(e, err, errlen)) < 0)
                        break;
                r = archive_write_header(out, e);
                if (r < ARCHIVE_WARN) {
                        snprintf(err, errlen, "member \"%.200s\": %s", archive_entry_pathname(e),
                                 archive_error_string(out) ?: "refused");
                        ret = -EPERM;
                        break;
                }
                stats->entries++;
                const void *buf;
                size_t len;
                int64_t off;
                while (archive_entry_size(e) > 0 && (r = archive_read_data_block(in, &buf, &len, &off)) == ARCHIVE_OK) {
                        if (archive_write_data_block(out, buf, len, off) < ARCHIVE_OK) {
                                r = ARCHIVE_FATAL;
                                snprintf(err, errlen, "write \"%.200s\": %s", archive_entry_pathname(e),
                                         archive_error_string(out) ?: "error");
                                break;
                        }
                        stats->bytes += len;
                }
                if (archive_entry_size(e) > 0 && r != ARCHIVE_EOF) {
                        if (r != ARCHIVE_FATAL || !*err)
                                snprintf(err, errlen, "read \"%.200s\": %s", archive_entry_pathname(e),
                                         archive_error_string(in) ?: "truncated");
                        ret = -EIO;
                        break;
                }
                if (archive_write_finish_entry(out) < ARCHIVE_WARN) {
                        snprintf(err, errlen, "member \"%.200s\": %s", archive_entry_pathname(e),
                                 archive_error_string(out) ?: "error");
                        ret = -EIO;
                        break;
                }
        }
        /* Closing applies the deferred directory modes and times. */
        if (archive_write_close(out) < ARCHIVE_WARN && ret == 0) {
                snprintf(err, errlen, "finish: %s", archive_error_string(out) ?: "error");
                ret = -EIO;
        }
        archive_write_free(out);
        return ret;
}

/* Packs the tree under `dir` (a directory; symlinks are stored as links and
 * never followed, other mounts below are entered) into the open writer
 * `out`, member names relative to dir ("a", "a/b"). Device nodes, FIFOs and
 * sockets in the tree are skipped, so the other end's unpack accepts every
 * member. Returns 0 or a negative errno with a message in err. */
static inline int tarstream_pack(struct archive *out, const char *dir, tarstream_stats *stats, char *err,
                                 size_t errlen) {
        struct archive *disk = archive_read_disk_new();
        struct archive_entry_linkresolver *lr = archive_entry_linkresolver_new();
        char *buf = malloc(TARSTREAM_BLOCK);
        int ret = 0;
        if (!disk || !lr || !buf) {
                snprintf(err, errlen, "out of memory");
                ret = -ENOMEM;
                goto done;
        }
        archive_entry_linkresolver_set_strategy(lr, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED);
        archive_read_disk_set_symlink_physical(disk);
        archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                                     ARCHIVE_READDISK_NO_FFLAGS);
        if (archive_read_disk_open(disk, dir) != ARCHIVE_OK) {
                snprintf(err, errlen, "%s", archive_error_string(disk) ?: "cannot open");
                ret = -ENOENT;
                goto done;
        }
        size_t prefix = strlen(dir);
        for (;;) {
                struct archive_entry *e;
                int r = archive_read_next_header2(disk, e = archive_entry_new());
                if (r == ARCHIVE_EOF) {
                        archive_entry_free(e);
                        break;
                }
                if (r < ARCHIVE_WARN) {
                        snprintf(err, errlen, "%s", archive_error_string(disk) ?: "read error");
                        archive_entry_free(e);
                        ret = -EIO;
                        break;
                }
                /* The first entry is dir itself; descend before anything else. */
                archive_read_disk_descend(disk);
                const char *p = archive_entry_pathname(e);
                mode_t type = archive_entry_filetype(e);
                if (strlen(p) <= prefix || (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)) {
                        archive_entry_free(e);
                        continue;
                }
                const char *rel = p + prefix;
                while (*rel == '/')
                        rel++;
                archive_entry_copy_pathname(e, rel);
                archive_entry_set_uname(e, NULL);
                archive_entry_set_gname(e, NULL);
                struct archive_entry *spare = NULL;
                archive_entry_linkify(lr, &e, &spare);
                if (!e) /* a hardlink held back by the resolver: not with this strategy */
                        continue;
                bool data = archive_entry_filetype(e) == AE_IFREG && archive_entry_size(e) > 0;
                r = archive_write_header(out, e);
                if (r < ARCHIVE_WARN) {
                        snprintf(err, errlen, "%.200s: %s", rel, archive_error_string(out) ?: "write error");
                        archive_entry_free(e);
                        ret = -EIO;
                        break;
                }
                stats->entries++;
                ssize_t n;
                while (data && (n = archive_read_data(disk, buf, TARSTREAM_BLOCK)) > 0) {
                        if (archive_write_data(out, buf, (size_t)n) < 0) {
                                snprintf(err, errlen, "%.200s: %s", archive_entry_pathname(e),
                                         archive_error_string(out) ?: "write error");
                                ret = -EIO;
                                break;
                        }
                        stats->bytes += (uint64_t)n;
                }
                archive_entry_free(e);
                if (ret < 0)
                        break;
        }
        archive_read_close(disk);
done:
        free(buf);
        if (lr)
                archive_entry_linkresolver_free(lr);
        if (disk)
                archive_read_free(disk);
        return ret;
}

/* A writer for tarstream_pack: pax restricted, no compression. Returns
 * NULL on ENOMEM. The caller opens it (archive_write_open_fd, _open2). */
static inline struct archive *tarstream_writer_new(void) {
        struct archive *w = archive_write_new();
        if (w && (archive_write_set_format_pax_restricted(w) != ARCHIVE_OK ||
                  archive_write_add_filter_none(w) != ARCHIVE_OK ||
                  archive_write_set_bytes_per_block(w, 64 * 1024) != ARCHIVE_OK)) {
                archive_write_free(w);
                return NULL;
        }
        return w;
}

/* A reader for tarstream_unpack: tar formats only, no compression. */
static inline struct archive *tarstream_reader_new(void) {
        struct archive *r = archive_read_new();
        if (r && (archive_read_support_format_tar(r) != ARCHIVE_OK ||
                  archive_read_support_filter_none(r) != ARCHIVE_OK)) {
                archive_read_free(r);
                return NULL;
        }
        return r;
}
