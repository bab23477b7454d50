/* Directory copies as one tar stream: fs.writeTar (in) and fs.readTar (out).
 *
 * The daemon never unpacks or packs anything itself: it makes a pipe, hands
 * one end to sandbox-init with the request (SCM_RIGHTS, libcore/agent.h),
 * and init's confined child unpacks from it, or packs into it, inside the
 * sandbox as the sandbox user (libcore/init/tar.c, rules in
 * libcore/tarstream.h). The daemon moves bytes between the client's chunk
 * requests and its end of the pipe, on the event loop and non-blocking:
 *
 *   fs.writeTar → {stream}; fs.writeTarChunk {stream, data} … answered once
 *   the bytes are in the pipe (so a client that waits for each answer, or
 *   keeps a few in flight, is paced by the sandbox); fs.writeTarEnd
 *   {stream} closes the pipe and answers with init's result.
 *   fs.readTar → {stream}; fs.readTarChunk {stream} answers up to
 *   TAR_READ_CHUNK bytes; the last answer has eof: true and the counts.
 *
 * A stream belongs to the connection that began it; when that connection
 * closes the pipe is closed and the copy in the sandbox ends.
 *
 * With "fd": true the client sends the pipe itself (SCM_RIGHTS, on the same
 * host as always with a Unix socket): it goes straight to the sandbox's
 * child, the bytes never pass through the daemon or base64, and the answer
 * comes when the copy is done. sandboxctl cp -r uses this form. */
#include <fcntl.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/limits.h"

/* Raw bytes per fs.readTarChunk answer (base64 makes it 5.3 MiB). */
#define TAR_READ_CHUNK (4u * 1024 * 1024)
/* fs.writeTarChunk requests waiting for the pipe, per stream. */
#define TAR_PENDING_MAX 4
/* Open copies per connection. */
#define TAR_STREAMS_MAX 16
#define TAR_PIPE_SIZE (1024 * 1024)

typedef struct tar_chunk {
        struct tar_chunk *next;
        rpc_request *req;
        void *data;
        size_t len, off;
} tar_chunk;

typedef struct tar_stream {
        struct tar_stream *next;
        char id[17];
        bool write;             /* fs.writeTar; else fs.readTar */
        rpc_conn *conn;         /* a reference */
        char *path;
        int fd;                 /* our end of the pipe, non-blocking; -EBADF once closed */
        sd_event_source *src;
        tar_chunk *chunks, **chunks_tail;
        unsigned nchunks;
        bool broken;            /* the pipe refused bytes: the copy ended early */
        rpc_request *end_req;   /* fs.writeTarEnd waiting */
        rpc_request *read_req;  /* fs.readTarChunk waiting */
        char *buf;
        size_t len;
        bool eof;
        bool done;              /* init answered */
        int err;
        char *message;
        double entries, bytes;
        bool agent_pending;     /* init's answer still to come: the callback holds us */
        bool listed;            /* in `streams` */
} tar_stream;

static tar_stream *streams;
static sd_event *loop;

static void stream_close_fd(tar_stream *t) {
        t->src = sd_event_source_disable_unref(t->src);
        if (t->fd >= 0)
                close(t->fd);
        t->fd = -EBADF;
}

static void reply_error(rpc_request *req, tar_stream *t, int err, const char *message) {
        const char *reason = err == -ENOENT ? "not_found" : err == -ESHUTDOWN ? "sandbox_stopped" : "failed";
        if (message && *message)
                rpc_reply_error(req, RPC_APP_ERROR, reason, NULL, "%s", message);
        else
                rpc_reply_error(req, RPC_APP_ERROR, reason, NULL, "fs.%s %s: %s", t->write ? "writeTar" : "readTar",
                                t->path, strerror(-err));
}

static void stream_unlist(tar_stream *t) {
        if (!t->listed)
                return;
        for (tar_stream **pp = &streams; *pp; pp = &(*pp)->next)
                if (*pp == t) {
                        *pp = t->next;
                        break;
                }
        t->listed = false;
}

/* Drops t from the table, fails whatever waits, and frees it unless init's
 * answer is still to come (the callback frees it then). */
static void stream_release(tar_stream *t, int err, const char *message) {
        stream_unlist(t);
        stream_close_fd(t);
        while (t->chunks) {
                tar_chunk *c = t->chunks;
                t->chunks = c->next;
                reply_error(c->req, t, err, message);
                free(c->data);
                free(c);
        }
        t->nchunks = 0;
        t->chunks_tail = &t->chunks;
        if (t->end_req)
                reply_error(TAKE_PTR(t->end_req), t, err, message);
        if (t->read_req)
                reply_error(TAKE_PTR(t->read_req), t, err, message);
        if (t->agent_pending)
                return;
        if (t->conn)
                rpc_conn_unref(t->conn);
        free(t->buf);
        free(t->message);
        free(t->path);
        free(t);
}

static cJSON *result_counts(const tar_stream *t) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "entries", t->entries);
        cJSON_AddNumberToObject(o, "bytes", t->bytes);
        return o;
}

/* ---- writing: chunks into the pipe ---------------------------------------- */

static void write_settle(tar_stream *t);

static void write_pump(tar_stream *t) {
        while (t->chunks && !t->broken && t->fd >= 0) {
                tar_chunk *c = t->chunks;
                while (c->off < c->len) {
                        ssize_t n = write(t->fd, (char *)c->data + c->off, c->len - c->off);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0 && errno == EAGAIN) {
                                (void)sd_event_source_set_enabled(t->src, SD_EVENT_ON);
                                return;
                        }
                        if (n < 0) {
                                /* The child stopped reading (a refused member, or
                                 * the archive ended): its answer says which. */
                                t->broken = true;
                                break;
                        }
                        c->off += (size_t)n;
                }
                if (t->broken)
                        break;
                t->chunks = c->next;
                if (!t->chunks)
                        t->chunks_tail = &t->chunks;
                t->nchunks--;
                rpc_reply(c->req, NULL);
                free(c->data);
                free(c);
        }
        if (t->src)
                (void)sd_event_source_set_enabled(t->src, SD_EVENT_OFF);
        write_settle(t);
}

/* Answers what can be answered now: chunks the broken pipe left, once init
 * said why; the end, once every chunk is in and init answered. */
static void write_settle(tar_stream *t) {
        if (t->broken && !t->done)
                return;
        if (t->done && t->err < 0) {
                /* Kept until a request can carry the message. */
                if (t->chunks || t->end_req)
                        return stream_release(t, t->err, t->message);
                return stream_close_fd(t);
        }
        if (t->broken) /* init succeeded: the archive ended before the data did */
                while (t->chunks) {
                        tar_chunk *c = t->chunks;
                        t->chunks = c->next;
                        t->nchunks--;
                        rpc_reply(c->req, NULL);
                        free(c->data);
                        free(c);
                }
        if (!t->chunks)
                t->chunks_tail = &t->chunks;
        if (!t->end_req || t->chunks)
                return;
        stream_close_fd(t); /* end of the stream for the child */
        if (!t->done)
                return;
        rpc_reply(TAKE_PTR(t->end_req), result_counts(t));
        stream_release(t, 0, NULL);
}

/* ---- reading: the pipe into chunk answers --------------------------------- */

static void read_settle(tar_stream *t) {
        if (t->done && t->err < 0) {
                /* Kept until a request can carry the message. */
                if (t->read_req)
                        return stream_release(t, t->err, t->message);
                return stream_close_fd(t);
        }
        if (!t->read_req)
                return;
        bool final = t->eof && t->done;
        if (t->len < TAR_READ_CHUNK && !final)
                return;
        _cleanup_free_ char *b64 = core_base64_encode(t->buf ? t->buf : "", t->len);
        if (!b64)
                return stream_release(t, -ENOMEM, "out of memory");
        cJSON *o = final ? result_counts(t) : cJSON_CreateObject();
        /* A reference, not a copy: rpc_reply prints the answer before it
         * returns, and b64 lives until then. */
        cJSON_AddItemToObject(o, "data", cJSON_CreateStringReference(b64));
        cJSON_AddBoolToObject(o, "eof", final);
        t->len = 0;
        rpc_reply(TAKE_PTR(t->read_req), o);
        if (final)
                stream_release(t, 0, NULL);
        else if (t->src)
                (void)sd_event_source_set_enabled(t->src, SD_EVENT_OFF);
}

static void read_pump(tar_stream *t) {
        while (t->read_req && t->fd >= 0 && t->len < TAR_READ_CHUNK) {
                ssize_t n = read(t->fd, t->buf + t->len, TAR_READ_CHUNK - t->len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        (void)sd_event_source_set_enabled(t->src, SD_EVENT_ON);
                        return;
                }
                if (n <= 0) {
                        t->eof = true;
                        stream_close_fd(t);
                        break;
                }
                t->len += (size_t)n;
        }
        read_settle(t);
}

static int on_pipe(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        tar_stream *t = userdata;
        if (t->write)
                write_pump(t);
        else
                read_pump(t);
        return 0;
}

/* init's answer: the child was reaped (or the sandbox stopped). */
static void on_done(session *s, cJSON *result, int err, const char *message, void *userdata) {
        tar_stream *t = userdata;
        t->agent_pending = false;
        t->done = true;
        t->err = err;
        t->message = message ? strdup(message) : NULL;
        t->entries = cJSON_GetNumberValue(cJSON_GetObjectItem(result, "entries"));
        t->bytes = cJSON_GetNumberValue(cJSON_GetObjectItem(result, "bytes"));
        if (t->entries != t->entries)
                t->entries = 0;
        if (t->bytes != t->bytes)
                t->bytes = 0;
        if (!t->listed)
                return stream_release(t, err, message);
        if (t->write)
                write_settle(t);
        else
                read_settle(t);
}

/* ---- methods -------------------------------------------------------------- */

static tar_stream *find_stream(rpc_request *req, bool write) {
        _cleanup_error_ sb_error *err = NULL;
        const char *id = NULL;
        if (rpc_param_string(req, "stream", true, &id, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return NULL;
        }
        for (tar_stream *t = streams; t; t = t->next)
                if (t->conn == req->conn && t->write == write && streq(t->id, id))
                        return t;
        rpc_reply_error(req, RPC_APP_ERROR, "not_found", NULL,
                        "stream \"%.32s\": no such %s copy on this connection (it ended or failed)", id,
                        write ? "fs.writeTar" : "fs.readTar");
        return NULL;
}

/* ---- the fd form: the client's own pipe goes to the sandbox ---------------- */

typedef struct fd_copy {
        rpc_request *req;
        char *path;
        bool write;
} fd_copy;

static void fd_done(session *s, cJSON *result, int err, const char *message, void *userdata) {
        fd_copy *f = userdata;
        if (err < 0) {
                const char *reason = err == -ENOENT ? "not_found" : err == -ESHUTDOWN ? "sandbox_stopped" : "failed";
                if (message && *message)
                        rpc_reply_error(f->req, RPC_APP_ERROR, reason, NULL, "%s", message);
                else
                        rpc_reply_error(f->req, RPC_APP_ERROR, reason, NULL, "fs.%s %s: %s",
                                        f->write ? "writeTar" : "readTar", f->path, strerror(-err));
        } else {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddNumberToObject(o, "entries", cJSON_GetNumberValue(cJSON_GetObjectItem(result, "entries")));
                cJSON_AddNumberToObject(o, "bytes", cJSON_GetNumberValue(cJSON_GetObjectItem(result, "bytes")));
                rpc_reply(f->req, o);
        }
        free(f->path);
        free(f);
}

/* The fd a client sent with the request, checked: an anonymous pipe
 * (pipefs: nothing that can be reopened as another file), open for reading
 * (writeTar: the sandbox reads the stream) or writing (readTar). The
 * sandbox's child gets it, so it must be nothing more than that pipe. */
static int take_pipe(rpc_request *req, bool write) {
        int fd = rpc_request_take_fd(req);
        if (fd < 0) {
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "fd",
                                "fd: no file descriptor came with the request (send a pipe with SCM_RIGHTS)");
                return -EINVAL;
        }
        struct stat st;
        struct statfs sfs;
        int fl = fcntl(fd, F_GETFL);
        if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode) || fstatfs(fd, &sfs) < 0 || sfs.f_type != PIPEFS_MAGIC ||
            fl < 0 || (fl & O_ACCMODE) != (write ? O_RDONLY : O_WRONLY)) {
                close(fd);
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "fd",
                                "fd: must be the %s end of a pipe", write ? "read" : "write");
                return -EINVAL;
        }
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        return fd;
}

static void drop_fd(rpc_request *req) {
        int fd = rpc_request_take_fd(req);
        if (fd >= 0)
                close(fd);
}

static void begin(rpc_request *req, manager *m, bool write, rpc_handler self) {
        _cleanup_error_ sb_error *err = NULL;
        const char *path = NULL;
        bool sudo = false, use_fd = false;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(req->params, "sandbox"));
        sandbox *target = name ? manager_find_sandbox(m, name) : NULL;
        /* The fd form's pipe is queued on the connection; a request refused
         * before it reaches the sandbox closes it, so that neither the
         * client's writer blocks on a pipe nobody reads nor a later request
         * takes it. (A request that waits for its sandbox to start keeps it
         * queued until it runs again.) */
        bool refused = rpc_param_string(req, "path", true, &path, &err) < 0 ||
                       rpc_param_bool(req, "sudo", &sudo, &err) < 0 || rpc_param_bool(req, "fd", &use_fd, &err) < 0;
        if (cJSON_IsTrue(cJSON_GetObjectItem(req->params, "fd")) &&
            (refused || !target || target->deleting ||
             (!(target->sess && !target->sess->stopping && streq(target->status, "running")) &&
              !target->starting && !target->persistent)))
                drop_fd(req);
        if (refused) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (!*path || strlen(path) > LIMIT_PATH_BYTES) {
                if (use_fd)
                        drop_fd(req);
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "path", "path: must be a path of 1-%d bytes",
                                LIMIT_PATH_BYTES);
                return;
        }
        unsigned n = 0;
        for (tar_stream *t = streams; t; t = t->next)
                n += t->conn == req->conn;
        if (n >= TAR_STREAMS_MAX && !use_fd) {
                rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "fs.%s: %d copies are open on this connection already (the limit)",
                                write ? "writeTar" : "readTar", TAR_STREAMS_MAX);
                return;
        }
        sandbox *sb = sandbox_require_unpaused(req, m, "sandbox", self);
        if (!sb)
                return;
        loop = m->event;
        if (use_fd) {
                int fd = take_pipe(req, write);
                if (fd < 0)
                        return;
                fd_copy *f = calloc(1, sizeof(*f));
                if (!f || !(f->path = strdup(path))) {
                        free(f);
                        close(fd);
                        rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                        return;
                }
                f->req = req;
                f->write = write;
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "action", write ? "writeTar" : "readTar");
                cJSON_AddStringToObject(o, "path", path);
                cJSON_AddBoolToObject(o, "sudo", sudo);
                int r = agent_fs_fd(sb->sess, o, fd, fd_done, f);
                if (r < 0)
                        fd_done(sb->sess, NULL, r, NULL, f);
                return;
        }
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "fs.%s: pipe: %s", write ? "writeTar" : "readTar",
                                strerror(errno));
                return;
        }
        (void)fcntl(p[0], F_SETPIPE_SZ, TAR_PIPE_SIZE);
        int ours = write ? p[1] : p[0], theirs = write ? p[0] : p[1];
        (void)fcntl(ours, F_SETFL, O_NONBLOCK);
        tar_stream *t = calloc(1, sizeof(*t));
        if (!t || !(t->path = strdup(path)) || (!write && !(t->buf = malloc(TAR_READ_CHUNK)))) {
                if (t)
                        free(t->path);
                free(t);
                close(p[0]);
                close(p[1]);
                rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                return;
        }
        t->write = write;
        t->fd = ours;
        t->chunks_tail = &t->chunks;
        core_random_hex(t->id, 16);
        t->id[16] = 0;
        int r = sd_event_add_io(loop, &t->src, ours, write ? EPOLLOUT : EPOLLIN, on_pipe, t);
        if (r >= 0)
                (void)sd_event_source_set_enabled(t->src, SD_EVENT_OFF);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "action", write ? "writeTar" : "readTar");
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddBoolToObject(o, "sudo", sudo);
        if (r >= 0)
                r = agent_fs_fd(sb->sess, o, theirs, on_done, t);
        else {
                cJSON_Delete(o);
                close(theirs);
        }
        if (r < 0) {
                reply_error(req, t, r, NULL);
                stream_release(t, r, NULL);
                return;
        }
        t->agent_pending = true;
        t->conn = rpc_conn_ref(req->conn);
        t->listed = true;
        t->next = streams;
        streams = t;
        cJSON *res = cJSON_CreateObject();
        cJSON_AddStringToObject(res, "stream", t->id);
        rpc_reply(req, res);
}

static void method_write_tar(rpc_request *req, void *m) { begin(req, m, true, method_write_tar); }
static void method_read_tar(rpc_request *req, void *m) { begin(req, m, false, method_read_tar); }

static void method_write_chunk(rpc_request *req, void *userdata) {
        tar_stream *t = find_stream(req, true);
        if (!t)
                return;
        _cleanup_error_ sb_error *err = NULL;
        const char *b64 = NULL;
        if (rpc_param_string(req, "data", true, &b64, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        if (t->end_req) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "stream \"%s\": fs.writeTarEnd was already sent",
                                t->id);
                return;
        }
        if (t->nchunks >= TAR_PENDING_MAX) {
                rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "stream \"%s\": at most %d fs.writeTarChunk requests may wait; wait for an answer",
                                t->id, TAR_PENDING_MAX);
                return;
        }
        tar_chunk *c = calloc(1, sizeof(*c));
        if (!c || core_base64_decode(b64, &c->data, &c->len) < 0) {
                free(c);
                rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "data", "data: must be base64");
                return;
        }
        c->req = req;
        *t->chunks_tail = c;
        t->chunks_tail = &c->next;
        t->nchunks++;
        write_pump(t);
}

static void method_write_end(rpc_request *req, void *userdata) {
        tar_stream *t = find_stream(req, true);
        if (!t)
                return;
        if (t->end_req) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL, "stream \"%s\": fs.writeTarEnd was already sent",
                                t->id);
                return;
        }
        t->end_req = req;
        write_settle(t);
}

static void method_read_chunk(rpc_request *req, void *userdata) {
        tar_stream *t = find_stream(req, false);
        if (!t)
                return;
        if (t->read_req) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL,
                                "stream \"%s\": one fs.readTarChunk at a time; wait for the answer", t->id);
                return;
        }
        t->read_req = req;
        read_pump(t);
}

void fs_tar_conn_closed(rpc_conn *c) {
        for (tar_stream *t = streams, *next; t; t = next) {
                next = t->next;
                if (t->conn == c)
                        stream_release(t, -ECONNRESET, "the connection closed");
        }
}

void register_fs_tar_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "fs.writeTar", method_write_tar, m);
        rpc_server_add_method(s, "fs.writeTarChunk", method_write_chunk, m);
        rpc_server_add_method(s, "fs.writeTarEnd", method_write_end, m);
        rpc_server_add_method(s, "fs.readTar", method_read_tar, m);
        rpc_server_add_method(s, "fs.readTarChunk", method_read_chunk, m);
        /* Answers of 5.3 MiB: one at a time per connection (rpc.h). */
        rpc_server_set_method_bulk(s, "fs.readTarChunk");
}
