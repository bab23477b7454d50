/* `sandboxctl cp -r`: a directory tree between the host and a sandbox as
 * one tar stream (fs.writeTar / fs.readTar of docs/API.md).
 *
 * On the host the CLI packs and unpacks with libarchive itself, as the
 * caller, under the rules of libcore/tarstream.h (the same the sandbox's end
 * applies): a stream that comes out of a sandbox is hostile, and those rules
 * keep it inside the destination directory (no "..", no absolute names, no
 * writing through symlinks, no device nodes, no setuid bits). libarchive
 * rather than the tar program, because GNU tar's defaults (setuid bits kept
 * for root, device nodes created, absolute hardlink targets followed) are not
 * those rules, and a library call reports the refused member precisely.
 *
 * Throughput: 4 MiB of tar per request and two requests in flight, so the
 * daemon moves one piece while the CLI encodes or unpacks the next. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "libcore/tarstream.h"
#include "cli/copytree.h"

#define TREE_CHUNK (4u * 1024 * 1024)
#define TREE_INFLIGHT 2

typedef struct tree_io {
        const ctl_globals *g;
        client *c;
        char stream[64];
        char *buf;
        size_t len;
        int64_t inflight[TREE_INFLIGHT];
        int n_inflight;
        int exit_code;         /* set by the first failure, reported once */
        void *data;            /* readTar: the decoded piece handed to libarchive */
        bool eof;
        cJSON *final;          /* the last answer (counts) */
} tree_io;

static int io_fail_reply(tree_io *io, const char *context, client_error *err) {
        if (!io->exit_code)
                io->exit_code = err ? ctl_report(io->g, context, err) : ctl_error(CLI_EXIT_ERROR, "%s: failed", context);
        client_error_free(err);
        return -1;
}

static int wait_oldest(tree_io *io, cJSON **ret) {
        client_error *err = NULL;
        int64_t id = io->inflight[0];
        memmove(io->inflight, io->inflight + 1, sizeof(int64_t) * (TREE_INFLIGHT - 1));
        io->n_inflight--;
        if (client_wait(io->c, id, -1, NULL, NULL, ret, &err) < 0)
                return io_fail_reply(io, "cp", err);
        return 0;
}

static int send_piece(tree_io *io) {
        if (io->n_inflight == TREE_INFLIGHT && wait_oldest(io, NULL) < 0)
                return -1;
        /* {"stream":"ID","data":"BASE64"} written directly: cJSON would copy
         * the 5 MiB string three times more. The stream id is hex. */
        _cleanup_free_ char *b64 = client_base64_encode(io->buf, io->len);
        if (!b64)
                return io->exit_code = ctl_error(CLI_EXIT_ERROR, "out of memory"), -1;
        size_t blen = strlen(b64);
        _cleanup_free_ char *params = malloc(blen + sizeof(io->stream) + 32);
        if (!params)
                return io->exit_code = ctl_error(CLI_EXIT_ERROR, "out of memory"), -1;
        int h = sprintf(params, "{\"stream\":\"%s\",\"data\":\"", io->stream);
        memcpy(params + h, b64, blen);
        memcpy(params + h + blen, "\"}", 2);
        int64_t id = client_send_text(io->c, "fs.writeTarChunk", params, (size_t) h + blen + 2);
        if (id < 0)
                return io->exit_code = ctl_error(CLI_EXIT_UNREACHABLE, "cp: lost the connection to sandboxd: %s",
                                                 strerror((int) -id)), -1;
        io->inflight[io->n_inflight++] = id;
        io->len = 0;
        return 0;
}

static la_ssize_t up_write(struct archive *a, void *userdata, const void *buf, size_t len) {
        tree_io *io = userdata;
        size_t done = 0;
        while (done < len) {
                size_t n = len - done < TREE_CHUNK - io->len ? len - done : TREE_CHUNK - io->len;
                memcpy(io->buf + io->len, (const char *) buf + done, n);
                io->len += n;
                done += n;
                if (io->len == TREE_CHUNK && send_piece(io) < 0) {
                        archive_set_error(a, EIO, "sending to sandboxd failed");
                        return -1;
                }
        }
        return (la_ssize_t) len;
}

static int begin(tree_io *io, const char *method, const char *name, const char *path) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "sandbox", name);
        cJSON_AddStringToObject(p, "path", path);
        client_error *err = NULL;
        _cleanup_json_ cJSON *res = NULL;
        if (client_call(io->c, method, p, -1, NULL, NULL, &res, &err) < 0)
                return io_fail_reply(io, "cp", err), io->exit_code;
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(res, "stream"));
        if (!id || strlen(id) >= sizeof(io->stream) || strspn(id, "0123456789abcdef") != strlen(id))
                return ctl_error(CLI_EXIT_ERROR, "cp: %s: no stream in the answer", method);
        snprintf(io->stream, sizeof(io->stream), "%s", id);
        return 0;
}

static void print_counts(const ctl_globals *g, const cJSON *res) {
        if (g->json && res)
                ctl_print_json(res);
}

/* ---- the fd form: our pipe goes to the sandbox, no bytes through JSON ---- */

typedef struct pipe_io {
        tree_io *io;
        int fd;               /* our end of the pipe */
        int64_t id;           /* the fs.writeTar / fs.readTar request */
        bool answered;
        cJSON *result;
        char buf[TARSTREAM_BLOCK];
} pipe_io;

/* Waits until the pipe is ready or sandboxd answered (which, before the
 * stream is done, means it refused). Returns 1 ready, 0 answered, -1 error. */
static int pipe_wait(pipe_io *pio, short events) {
        for (;;) {
                if (pio->answered)
                        return 1;
                struct pollfd p[2] = { { .fd = pio->fd, .events = events }, { .fd = client_fd(pio->io->c), .events = POLLIN } };
                if (!client_has_pending(pio->io->c) && poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return -1;
                }
                if (client_has_pending(pio->io->c) || (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
                        client_error *err = NULL;
                        pio->answered = true;
                        if (client_wait(pio->io->c, pio->id, -1, NULL, NULL, &pio->result, &err) < 0)
                                return io_fail_reply(pio->io, "cp", err);
                        return 0;
                }
                if (p[0].revents)
                        return 1;
        }
}

static la_ssize_t pipe_write(struct archive *a, void *userdata, const void *buf, size_t len) {
        pipe_io *pio = userdata;
        for (;;) {
                int r = pipe_wait(pio, POLLOUT);
                if (r <= 0) {
                        archive_set_error(a, EIO, "sandboxd ended the copy");
                        return -1;
                }
                ssize_t n = write(pio->fd, buf, len);
                if (n >= 0)
                        return n;
                if (errno != EAGAIN && errno != EINTR) {
                        archive_set_error(a, errno, "write to the sandbox: %s", strerror(errno));
                        return -1;
                }
        }
}

static la_ssize_t pipe_read(struct archive *a, void *userdata, const void **ret) {
        pipe_io *pio = userdata;
        for (;;) {
                int r = pipe_wait(pio, POLLIN);
                if (r < 0 || (r == 0 && pio->io->exit_code)) {
                        archive_set_error(a, EIO, "sandboxd ended the copy");
                        return -1;
                }
                ssize_t n = read(pio->fd, pio->buf, sizeof(pio->buf));
                if (n >= 0) {
                        *ret = pio->buf;
                        return n;
                }
                if (errno != EAGAIN && errno != EINTR) {
                        archive_set_error(a, errno, "read from the sandbox: %s", strerror(errno));
                        return -1;
                }
        }
}

static int pipe_begin(pipe_io *pio, const char *method, const char *name, const char *path, bool write) {
        int p[2];
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: pipe: %s", strerror(errno));
        (void) fcntl(p[0], F_SETPIPE_SZ, 1024 * 1024);
        int theirs = write ? p[0] : p[1];
        pio->fd = write ? p[1] : p[0];
        cJSON *params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "sandbox", name);
        cJSON_AddStringToObject(params, "path", path);
        cJSON_AddBoolToObject(params, "fd", true);
        pio->id = client_send_fd(pio->io->c, method, params, theirs);
        close(theirs);
        if (pio->id < 0) {
                close(pio->fd);
                return ctl_error(CLI_EXIT_UNREACHABLE, "cp: lost the connection to sandboxd: %s",
                                 strerror((int) -pio->id));
        }
        return 0;
}

/* After the local side is done: sandboxd's answer (the sandbox side's
 * verdict and counts). */
static int pipe_finish(const ctl_globals *g, pipe_io *pio) {
        if (!pio->answered) {
                client_error *err = NULL;
                pio->answered = true;
                if (client_wait(pio->io->c, pio->id, -1, NULL, NULL, &pio->result, &err) < 0)
                        return io_fail_reply(pio->io, "cp", err), pio->io->exit_code;
        }
        if (pio->io->exit_code)
                return pio->io->exit_code;
        print_counts(g, pio->result);
        return 0;
}

static int to_sandbox_fd(const ctl_globals *g, client *c, const char *local, const char *name, const char *path) {
        tree_io io = { .g = g, .c = c };
        _cleanup_free_ pipe_io *pio = calloc(1, sizeof(*pio));
        if (!pio)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        pio->io = &io;
        signal(SIGPIPE, SIG_IGN); /* a refused stream is an EPIPE to report */
        int r = pipe_begin(pio, "fs.writeTar", name, path, true);
        if (r != 0)
                return r;
        struct archive *w = tarstream_writer_new();
        tarstream_stats st = {};
        char msg[1024] = "";
        if (!w || archive_write_open2(w, pio, NULL, pipe_write, NULL, NULL) != ARCHIVE_OK) {
                snprintf(msg, sizeof(msg), "cannot start the archive");
                r = -EIO;
        } else {
                r = tarstream_pack(w, local, &st, msg, sizeof(msg));
                if (archive_write_close(w) != ARCHIVE_OK && r == 0) {
                        snprintf(msg, sizeof(msg), "%s", archive_error_string(w) ?: "write error");
                        r = -EIO;
                }
        }
        if (w)
                archive_write_free(w);
        close(pio->fd); /* end of the stream for the sandbox */
        int code = pipe_finish(g, pio);
        cJSON_Delete(pio->result);
        if (code)
                return code;
        return r < 0 ? ctl_error(CLI_EXIT_ERROR, "cp: %s: %s", local, msg) : 0;
}

int ctl_cp_tree_to_sandbox(const ctl_globals *g, client *c, const char *local, const char *name, const char *path) {
        if (!getenv("SANDBOXCTL_CP_JSON") && !client_is_remote(c))
                return to_sandbox_fd(g, c, local, name, path);
        tree_io io = { .g = g, .c = c };
        _cleanup_free_ char *buf = io.buf = malloc(TREE_CHUNK);
        if (!buf)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        int r = begin(&io, "fs.writeTar", name, path);
        if (r != 0)
                return r;
        struct archive *w = tarstream_writer_new();
        if (!w)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        tarstream_stats st = {};
        char msg[1024] = "";
        if (archive_write_open2(w, &io, NULL, up_write, NULL, NULL) != ARCHIVE_OK) {
                archive_write_free(w);
                return ctl_error(CLI_EXIT_ERROR, "cp: %s", archive_error_string(w) ?: "cannot start the archive");
        }
        r = tarstream_pack(w, local, &st, msg, sizeof(msg));
        if (archive_write_close(w) != ARCHIVE_OK && r == 0) {
                snprintf(msg, sizeof(msg), "%s", archive_error_string(w) ?: "write error");
                r = -EIO;
        }
        archive_write_free(w);
        if (io.exit_code)
                return io.exit_code;
        if (r < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: %s: %s", local, msg);
        if (io.len > 0 && send_piece(&io) < 0)
                return io.exit_code;
        while (io.n_inflight > 0)
                if (wait_oldest(&io, NULL) < 0)
                        return io.exit_code;
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "stream", io.stream);
        client_error *err = NULL;
        _cleanup_json_ cJSON *res = NULL;
        if (client_call(c, "fs.writeTarEnd", p, -1, NULL, NULL, &res, &err) < 0)
                return io_fail_reply(&io, "cp", err), io.exit_code;
        print_counts(g, res);
        return 0;
}

static int ask_next(tree_io *io) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "stream", io->stream);
        int64_t id = client_send(io->c, "fs.readTarChunk", p);
        if (id < 0)
                return io->exit_code = ctl_error(CLI_EXIT_UNREACHABLE, "cp: lost the connection to sandboxd: %s",
                                                 strerror((int) -id)), -1;
        io->inflight[io->n_inflight++] = id;
        return 0;
}

/* libarchive's read callback: the next piece of the stream, asking for the
 * one after it before handing this one over. */
static la_ssize_t down_read(struct archive *a, void *userdata, const void **ret) {
        tree_io *io = userdata;
        free(io->data);
        io->data = NULL;
        while (!io->eof) {
                cJSON *res = NULL;
                if (wait_oldest(io, &res) < 0) {
                        if (a)
                                archive_set_error(a, EIO, "reading from sandboxd failed");
                        return -1;
                }
                io->eof = cJSON_IsTrue(cJSON_GetObjectItem(res, "eof"));
                if (!io->eof && ask_next(io) < 0) {
                        cJSON_Delete(res);
                        if (a)
                                archive_set_error(a, EIO, "reading from sandboxd failed");
                        return -1;
                }
                const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItem(res, "data"));
                size_t len = 0;
                if (!b64 || client_base64_decode(b64, &io->data, &len) < 0) {
                        cJSON_Delete(res);
                        io->exit_code = ctl_error(CLI_EXIT_ERROR, "cp: unreadable data from sandboxd");
                        if (a)
                                archive_set_error(a, EIO, "unreadable data");
                        return -1;
                }
                if (io->eof) {
                        cJSON_DeleteItemFromObject(res, "data");
                        io->final = res;
                } else
                        cJSON_Delete(res);
                if (len > 0) {
                        *ret = io->data;
                        return (la_ssize_t) len;
                }
                free(io->data);
                io->data = NULL;
        }
        return 0;
}

/* mkdir -p as the caller; the last component may exist. */
static int make_dirs(const char *path) {
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        for (char *s = p + 1; *s; s++)
                if (*s == '/') {
                        *s = 0;
                        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        *s = '/';
                }
        return mkdir(p, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static int from_sandbox_fd(const ctl_globals *g, client *c, const char *name, const char *path, int dfd) {
        tree_io io = { .g = g, .c = c };
        _cleanup_free_ pipe_io *pio = calloc(1, sizeof(*pio));
        if (!pio)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        pio->io = &io;
        int r = pipe_begin(pio, "fs.readTar", name, path, false);
        if (r != 0)
                return r;
        struct archive *in = tarstream_reader_new();
        _cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        tarstream_stats st = {};
        char msg[1024] = "";
        if (!in || fchdir(dfd) < 0) {
                snprintf(msg, sizeof(msg), "%s", in ? strerror(errno) : "out of memory");
                r = -EIO;
        } else if (archive_read_open(in, pio, NULL, pipe_read, NULL) != ARCHIVE_OK) {
                snprintf(msg, sizeof(msg), "%s", archive_error_string(in) ?: "not a tar stream");
                r = -EIO;
        } else
                r = tarstream_unpack(in, &st, msg, sizeof(msg));
        if (in)
                archive_read_free(in);
        if (cwd >= 0)
                (void)!fchdir(cwd);
        close(pio->fd); /* a refusal here ends the sandbox's side too (EPIPE) */
        int code = pipe_finish(g, pio);
        cJSON_Delete(pio->result);
        if (code)
                return code;
        return r < 0 ? ctl_error(CLI_EXIT_ERROR, "cp: %s:%s: %s", name, path, msg) : 0;
}

int ctl_cp_tree_from_sandbox(const ctl_globals *g, client *c, const char *name, const char *path, const char *local) {
        tree_io io = { .g = g, .c = c };
        int r = make_dirs(local);
        if (r < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: %s: %s", local, strerror(-r));
        _cleanup_close_ int dfd = open(local, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: %s: %s", local, strerror(errno));
        if (!getenv("SANDBOXCTL_CP_JSON") && !client_is_remote(c))  /* no fds cross TCP */
                return from_sandbox_fd(g, c, name, path, dfd);
        r = begin(&io, "fs.readTar", name, path);
        if (r != 0)
                return r;
        if (ask_next(&io) < 0)
                return io.exit_code;
        struct archive *in = tarstream_reader_new();
        if (!in)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        /* Names resolve against the destination: libarchive's secure
         * options work relative to the current directory. */
        _cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fchdir(dfd) < 0) {
                archive_read_free(in);
                return ctl_error(CLI_EXIT_ERROR, "cp: %s: %s", local, strerror(errno));
        }
        tarstream_stats st = {};
        char msg[1024] = "";
        if (archive_read_open(in, &io, NULL, down_read, NULL) != ARCHIVE_OK) {
                snprintf(msg, sizeof(msg), "%s", archive_error_string(in) ?: "not a tar stream");
                r = -EIO;
        } else
                r = tarstream_unpack(in, &st, msg, sizeof(msg));
        archive_read_free(in);
        free(io.data);
        if (cwd >= 0)
                (void)!fchdir(cwd);
        io.data = NULL;
        if (!io.exit_code && r < 0)
                io.exit_code = ctl_error(CLI_EXIT_ERROR, "cp: %s:%s: %s", name, path, msg);
        /* The tar end marker may come before the last answer, which
         * carries the sandbox side's verdict and counts. */
        const void *ignored;
        while (!io.exit_code && !io.eof) {
                if (down_read(NULL, &io, &ignored) < 0 && !io.exit_code)
                        io.exit_code = ctl_error(CLI_EXIT_ERROR, "cp: read failed");
                free(io.data);
                io.data = NULL;
        }
        if (!io.exit_code)
                print_counts(g, io.final);
        cJSON_Delete(io.final);
        return io.exit_code;
}
