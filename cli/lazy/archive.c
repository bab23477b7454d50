/* libarchive for sandboxctl and sandbox-init, loaded on first use
 * (dlopen) or when lazy_archive_load says (cli/lazy/archive.h) instead of at
 * every start: the library and what it pulls in (libxml2, ICU, libstdc++,
 * the compressors) cost several milliseconds of loading and relocation per
 * process, which every `sandboxctl exec` paid for a `cp -r` it did not run,
 * and every sandbox start for a copy it may never make. Each function below
 * has the prototype of archive.h / archive_entry.h and forwards to the real
 * one, found by dlsym in libarchive's own handle (dlopen(3), dlsym(3)). A
 * missing library is an error naming it, at the first call. Only
 * sandboxctl, sandboxd-e2b and sandbox-init link this file; the daemon and
 * the tests link libarchive as usual. The list is the archive_* functions
 * they call (nm -u build/sandboxctl build/sandbox-init). */
#include <archive.h>
#include <archive_entry.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/magic.h>
#include "cli/lazy/archive.h"

/* The soname of libarchive 3 (Debian's libarchive13). */
#define LIBARCHIVE_SONAME "libarchive.so.13"

static void *lazy_handle;
static pthread_once_t lazy_once = PTHREAD_ONCE_INIT;
/* lazy_archive_use_files: the libraries' open files, dependencies first. */
static int lazy_fds[64];
static size_t lazy_n_fds;
static bool lazy_files;
static char lazy_err[256];

const char *lazy_archive_error(void) {
        return lazy_err[0] ? lazy_err : "not found";
}

void lazy_archive_use_files(const int *fds, size_t n) {
        lazy_files = true;
        lazy_n_fds = 0;
        for (size_t i = 0; i < n && i < sizeof(lazy_fds) / sizeof(lazy_fds[0]); i++)
                lazy_fds[lazy_n_fds++] = fds[i];
        if (n > lazy_n_fds)
                lazy_n_fds = 0; /* more than it can hold: load nothing */
}

/* The dynamic section of the ELF file fd, read with pread: its DT_SONAME
 * and DT_NEEDED names into names[0] (soname, or "") and names[1..],
 * copied into buf. Returns the number of names, or -1 when the file is
 * not a 64-bit ELF object this can read. */
static int elf_names(int fd, char *buf, size_t size, const char **names, int max) {
        ElfW(Ehdr) eh;
        if (pread(fd, &eh, sizeof(eh), 0) != (ssize_t)sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
            eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum > 64)
                return -1;
        ElfW(Phdr) ph[64];
        size_t phsize = (size_t)eh.e_phnum * sizeof(ElfW(Phdr));
        if (pread(fd, ph, phsize, (off_t)eh.e_phoff) != (ssize_t)phsize)
                return -1;
        const ElfW(Phdr) *dynph = NULL;
        for (int i = 0; i < eh.e_phnum; i++)
                if (ph[i].p_type == PT_DYNAMIC)
                        dynph = &ph[i];
        if (!dynph || dynph->p_filesz > 64 * 1024)
                return -1;
        ElfW(Dyn) dyn[4096];
        ssize_t got = pread(fd, dyn, dynph->p_filesz, (off_t)dynph->p_offset);
        if (got != (ssize_t)dynph->p_filesz)
                return -1;
        size_t nd = (size_t)got / sizeof(ElfW(Dyn));
        ElfW(Addr) strtab = 0;
        for (size_t i = 0; i < nd && dyn[i].d_tag != DT_NULL; i++)
                if (dyn[i].d_tag == DT_STRTAB)
                        strtab = dyn[i].d_un.d_ptr;
        off_t stroff = -1;
        for (int i = 0; i < eh.e_phnum; i++)
                if (ph[i].p_type == PT_LOAD && strtab >= ph[i].p_vaddr && strtab < ph[i].p_vaddr + ph[i].p_filesz)
                        stroff = (off_t)(strtab - ph[i].p_vaddr + ph[i].p_offset);
        if (stroff < 0)
                return -1;
        int n = 1;
        size_t used = 0;
        names[0] = "";
        for (size_t i = 0; i < nd && dyn[i].d_tag != DT_NULL; i++) {
                if (dyn[i].d_tag != DT_SONAME && dyn[i].d_tag != DT_NEEDED)
                        continue;
                if (used + 256 > size || (dyn[i].d_tag == DT_NEEDED && n >= max))
                        return -1;
                ssize_t k = pread(fd, buf + used, 255, stroff + (off_t)dyn[i].d_un.d_val);
                if (k <= 0)
                        return -1;
                buf[used + (size_t)k] = 0;
                if (strlen(buf + used) >= 255)
                        return -1;
                if (dyn[i].d_tag == DT_SONAME)
                        names[0] = buf + used;
                else
                        names[n++] = buf + used;
                used += strlen(buf + used) + 1;
        }
        return n;
}

/* Whether loading the files in order can never make the loader search for
 * a library by name: every DT_NEEDED of each is the DT_SONAME of one
 * before it, and the last is libarchive. */
static bool files_closed(void) {
        static char sonames[64][256];
        for (size_t i = 0; i < lazy_n_fds; i++) {
                char buf[8192];
                const char *names[64];
                int n = elf_names(lazy_fds[i], buf, sizeof(buf), names, 64);
                if (n < 1 || !names[0][0] || strlen(names[0]) >= sizeof(sonames[0])) {
                        snprintf(lazy_err, sizeof(lazy_err), "library %zu of %zu: not an ELF object with a soname",
                                 i + 1, lazy_n_fds);
                        return false;
                }
                for (int k = 1; k < n; k++) {
                        bool found = false;
                        for (size_t j = 0; j < i && !found; j++)
                                found = strcmp(sonames[j], names[k]) == 0;
                        if (!found) {
                                snprintf(lazy_err, sizeof(lazy_err), "%.100s needs %.100s, not among the files before it",
                                         names[0], names[k]);
                                return false;
                        }
                }
                snprintf(sonames[i], sizeof(sonames[i]), "%s", names[0]);
        }
        if (lazy_n_fds == 0 || strcmp(sonames[lazy_n_fds - 1], LIBARCHIVE_SONAME) != 0) {
                snprintf(lazy_err, sizeof(lazy_err), "the files do not end with %s", LIBARCHIVE_SONAME);
                return false;
        }
        return true;
}

/* From the files, checked first (files_closed): each dlopen(3)ed through
 * its /proc/self/fd link in order, so that every DT_NEEDED of the next is
 * found loaded by its soname and no library is searched for in the
 * process's root (a sandbox's tree, whose /etc/ld.so.cache names /lib
 * paths its root may replace); libarchive is then taken by its soname
 * without a search (RTLD_NOLOAD). */
static void lazy_open_files(void) {
        if (!files_closed())
                return;
        for (size_t i = 0; i < lazy_n_fds; i++) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/self/fd/%d", lazy_fds[i]);
                /* The path is resolved in the process's root (a sandbox's):
                 * its /proc must be a procfs and the link the very file of
                 * the fd, else what the loader opens is whatever file that
                 * tree has at that path (a host mount at /proc), run here
                 * before the caller's confinement. */
                struct statfs sfs;
                struct stat want, got;
                if (statfs("/proc/self/fd", &sfs) < 0 || sfs.f_type != PROC_SUPER_MAGIC ||
                    fstat(lazy_fds[i], &want) < 0 || stat(path, &got) < 0 || want.st_dev != got.st_dev ||
                    want.st_ino != got.st_ino) {
                        snprintf(lazy_err, sizeof(lazy_err), "%s is not the library's file (no procfs at /proc)",
                                 path);
                        return;
                }
                if (!dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
                        snprintf(lazy_err, sizeof(lazy_err), "%s", dlerror());
                        return;
                }
        }
        if (!(lazy_handle = dlopen(LIBARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)))
                snprintf(lazy_err, sizeof(lazy_err), "%s", dlerror());
}

static void lazy_open(void) {
        if (lazy_files)
                lazy_open_files();
        else
                lazy_handle = dlopen(LIBARCHIVE_SONAME, RTLD_NOW | RTLD_LOCAL);
}

int lazy_archive_load(void) {
        pthread_once(&lazy_once, lazy_open);
        return lazy_handle ? 0 : -ENOENT;
}

/* The address of `name` in libarchive (looked up at each call: dlsym is
 * thread-safe, and nothing is cached to race on); exits with status 1 and a message
 * naming the library when it cannot be had (fail closed: no archive work
 * without it). */
static void *lazy_sym(const char *name) {
        pthread_once(&lazy_once, lazy_open);
        void *p = lazy_handle ? dlsym(lazy_handle, name) : NULL;
        if (!p) {
                const char *e = dlerror();
                fprintf(stderr, "%s: cannot load %s from %s (install libarchive13): %s\n",
                        program_invocation_short_name, name, LIBARCHIVE_SONAME, e ? e : "not found");
                exit(1);
        }
        return p;
}

/* The real `name`, with its own prototype's type. */
#define REAL(name) ((__typeof__(&name))lazy_sym(#name))

void archive_entry_copy_pathname(struct archive_entry *a0, const char *a1) {
        REAL(archive_entry_copy_pathname)(a0, a1);
}

__LA_MODE_T archive_entry_filetype(struct archive_entry *a0) {
        return REAL(archive_entry_filetype)(a0);
}

void archive_entry_free(struct archive_entry *a0) {
        REAL(archive_entry_free)(a0);
}

const char *archive_entry_hardlink(struct archive_entry *a0) {
        return REAL(archive_entry_hardlink)(a0);
}

void archive_entry_linkify(struct archive_entry_linkresolver *a0, struct archive_entry **a1,
                           struct archive_entry **a2) {
        REAL(archive_entry_linkify)(a0, a1, a2);
}

void archive_entry_linkresolver_free(struct archive_entry_linkresolver *a0) {
        REAL(archive_entry_linkresolver_free)(a0);
}

struct archive_entry_linkresolver *archive_entry_linkresolver_new(void) {
        return REAL(archive_entry_linkresolver_new)();
}

void archive_entry_linkresolver_set_strategy(struct archive_entry_linkresolver *a0, int a1) {
        REAL(archive_entry_linkresolver_set_strategy)(a0, a1);
}

struct archive_entry *archive_entry_new(void) {
        return REAL(archive_entry_new)();
}

const char *archive_entry_pathname(struct archive_entry *a0) {
        return REAL(archive_entry_pathname)(a0);
}

__LA_MODE_T archive_entry_perm(struct archive_entry *a0) {
        return REAL(archive_entry_perm)(a0);
}

void archive_entry_set_gname(struct archive_entry *a0, const char *a1) {
        REAL(archive_entry_set_gname)(a0, a1);
}

void archive_entry_set_perm(struct archive_entry *a0, __LA_MODE_T a1) {
        REAL(archive_entry_set_perm)(a0, a1);
}

void archive_entry_set_uname(struct archive_entry *a0, const char *a1) {
        REAL(archive_entry_set_uname)(a0, a1);
}

la_int64_t archive_entry_size(struct archive_entry *a0) {
        return REAL(archive_entry_size)(a0);
}

const char *archive_error_string(struct archive *a0) {
        return REAL(archive_error_string)(a0);
}

int archive_read_close(struct archive *a0) {
        return REAL(archive_read_close)(a0);
}

la_ssize_t archive_read_data(struct archive *a0, void *a1, size_t a2) {
        return REAL(archive_read_data)(a0, a1, a2);
}

int archive_read_data_block(struct archive *a0, const void **a1, size_t *a2, la_int64_t *a3) {
        return REAL(archive_read_data_block)(a0, a1, a2, a3);
}

int archive_read_open_fd(struct archive *a0, int a1, size_t a2) {
        return REAL(archive_read_open_fd)(a0, a1, a2);
}

int archive_read_disk_descend(struct archive *a0) {
        return REAL(archive_read_disk_descend)(a0);
}

struct archive *archive_read_disk_new(void) {
        return REAL(archive_read_disk_new)();
}

int archive_read_disk_open(struct archive *a0, const char *a1) {
        return REAL(archive_read_disk_open)(a0, a1);
}

int archive_read_disk_set_behavior(struct archive *a0, int a1) {
        return REAL(archive_read_disk_set_behavior)(a0, a1);
}

int archive_read_disk_set_symlink_physical(struct archive *a0) {
        return REAL(archive_read_disk_set_symlink_physical)(a0);
}

int archive_read_free(struct archive *a0) {
        return REAL(archive_read_free)(a0);
}

struct archive *archive_read_new(void) {
        return REAL(archive_read_new)();
}

int archive_read_next_header(struct archive *a0, struct archive_entry **a1) {
        return REAL(archive_read_next_header)(a0, a1);
}

int archive_read_next_header2(struct archive *a0, struct archive_entry *a1) {
        return REAL(archive_read_next_header2)(a0, a1);
}

int archive_read_open(struct archive *a0, void *a1, archive_open_callback *a2, archive_read_callback *a3,
                      archive_close_callback *a4) {
        return REAL(archive_read_open)(a0, a1, a2, a3, a4);
}

int archive_read_support_filter_none(struct archive *a0) {
        return REAL(archive_read_support_filter_none)(a0);
}

int archive_read_support_format_tar(struct archive *a0) {
        return REAL(archive_read_support_format_tar)(a0);
}

void archive_set_error(struct archive *a0, int a1, const char *a2, ...) {
        char buf[512];
        va_list ap;
        va_start(ap, a2);
        vsnprintf(buf, sizeof(buf), a2, ap);
        va_end(ap);
        REAL(archive_set_error)(a0, a1, "%s", buf);
}

int archive_write_add_filter_none(struct archive *a0) {
        return REAL(archive_write_add_filter_none)(a0);
}

int archive_write_close(struct archive *a0) {
        return REAL(archive_write_close)(a0);
}

la_ssize_t archive_write_data(struct archive *a0, const void *a1, size_t a2) {
        return REAL(archive_write_data)(a0, a1, a2);
}

la_ssize_t archive_write_data_block(struct archive *a0, const void *a1, size_t a2, la_int64_t a3) {
        return REAL(archive_write_data_block)(a0, a1, a2, a3);
}

struct archive *archive_write_disk_new(void) {
        return REAL(archive_write_disk_new)();
}

int archive_write_disk_set_options(struct archive *a0, int a1) {
        return REAL(archive_write_disk_set_options)(a0, a1);
}

int archive_write_finish_entry(struct archive *a0) {
        return REAL(archive_write_finish_entry)(a0);
}

int archive_write_free(struct archive *a0) {
        return REAL(archive_write_free)(a0);
}

int archive_write_header(struct archive *a0, struct archive_entry *a1) {
        return REAL(archive_write_header)(a0, a1);
}

struct archive *archive_write_new(void) {
        return REAL(archive_write_new)();
}

int archive_write_open2(struct archive *a0, void *a1, archive_open_callback *a2, archive_write_callback *a3,
                        archive_close_callback *a4, archive_free_callback *a5) {
        return REAL(archive_write_open2)(a0, a1, a2, a3, a4, a5);
}

int archive_write_open_fd(struct archive *a0, int a1) {
        return REAL(archive_write_open_fd)(a0, a1);
}

int archive_write_set_bytes_per_block(struct archive *a0, int a1) {
        return REAL(archive_write_set_bytes_per_block)(a0, a1);
}

int archive_write_set_format_pax_restricted(struct archive *a0) {
        return REAL(archive_write_set_format_pax_restricted)(a0);
}
