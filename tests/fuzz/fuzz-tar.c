/* Tar member path checks of the untrusted imports (snapshot.import and
 * runtime.import: tar_open_untrusted and tar_relative_name_ok in
 * sandboxd/snapshot-io.c). The input is the archive, read through the same
 * reader set-up the daemon uses (from a memfd, any compression); nothing is
 * written to disk. Invariant: a member name the check accepts is relative
 * and has no empty, "." or ".." component, by an independent reading of
 * the name (so a name accepted can never address a path outside the
 * directory it is extracted beneath). */
#include <archive.h>
#include <archive_entry.h>
#include <sys/mman.h>
#include <unistd.h>
#include "fuzz.h"
#include "sandboxd/internal.h"

/* The oracle: split on '/', allow one trailing '/', nothing else odd. */
static bool name_is_contained(const char *name) {
        if (name[0] == '/')
                return false;
        const char *p = name;
        while (*p) {
                const char *slash = strchr(p, '/');
                size_t len = slash ? (size_t)(slash - p) : strlen(p);
                if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                if (!slash)
                        break;
                p = slash + 1;
        }
        return true;
}

static void check(const char *name) {
        if (!name)
                return;
        bool ok = tar_relative_name_ok(name);
        if (ok && !name_is_contained(name))
                fprintf(stderr, "accepted: '%s'\n", name);
        FUZZ_ASSERT(!ok || name_is_contained(name));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* The input as one name, too: the check itself, without tar. */
        char *as_name = fuzz_cstr(data, size < 4096 ? size : 4096);
        check(as_name);
        free(as_name);
        int fd = memfd_create("fuzz-tar", MFD_CLOEXEC);
        FUZZ_ASSERT(fd >= 0);
        FUZZ_ASSERT(write(fd, data, size) == (ssize_t)size);
        FUZZ_ASSERT(lseek(fd, 0, SEEK_SET) == 0);
        struct archive *rd = NULL, *wr = NULL;
        if (tar_open_untrusted(fd, &rd, &wr) == 0) {
                struct archive_entry *e;
                for (int i = 0; i < 4096 && archive_read_next_header(rd, &e) >= ARCHIVE_WARN; i++) {
                        check(archive_entry_pathname(e));
                        check(archive_entry_hardlink(e));
                        static const char *const keep[] = { "user.", "security.capability" };
                        tar_filter_xattrs(e, keep, 2);
                        if (archive_read_data_skip(rd) < ARCHIVE_WARN)
                                break;
                }
        }
        if (rd)
                archive_read_free(rd);
        if (wr)
                archive_write_free(wr);
        close(fd);
        return 0;
}
