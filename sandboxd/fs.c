/* fs.* methods. Every file operation runs in sandbox-init, inside the
 * sandbox's own mount namespace and root, as the sandbox user: the daemon
 * never follows a sandbox path on the host, so a symlink the sandbox planted
 * toward / resolves to the sandbox's /, not the host's. Large contents are
 * moved in AGENT_FS_CHUNK pieces. */
#include <malloc.h>
#include <string.h>
#include "libcore/agent.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/limits.h"

#define FS_READ_MAX (64ULL * 1024 * 1024)

static void reply_fs_error(rpc_request *req, const char *action, const char *path, int err, const char *message) {
        const char *reason = err == -ENOENT ? "not_found" : err == -ESHUTDOWN ? "sandbox_stopped" : "failed";
        if (message)
                rpc_reply_error(req, RPC_APP_ERROR, reason, NULL, "%s", message);
        else
                rpc_reply_error(req, RPC_APP_ERROR, reason, NULL, "fs.%s %s: %s", action, path, strerror(-err));
}

/* With sudo the operation ran as root only when sandbox-init says so: an
 * older one ignores the field and would act as the sandbox user. Takes
 * the mark off the result (NULL: fine); false after answering. */
static bool sudo_done(rpc_request *req, bool sudo, cJSON *result) {
        if (!sudo)
                return true;
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "sudo"))) {
                rpc_reply_error(req, RPC_APP_ERROR, "failed", NULL,
                                "fs: this sandbox's session predates sudo for fs.* (its sandbox-init did not run the "
                                "operation as root); restart the sandbox");
                return false;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(result, "sudo");
        return true;
}

static int check_path(rpc_request *req, const char *field, const char **ret, sb_error **ret_err) {
        int r = rpc_param_string(req, field, true, ret, ret_err);
        if (r < 0)
                return r;
        if (!**ret || strlen(*ret) > LIMIT_PATH_BYTES)
                return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: must be a path of 1-%d bytes", field,
                                    LIMIT_PATH_BYTES);
        return 0;
}

/* ---- simple operations: one request, one reply ---------------------------- */

typedef struct simple_op {
        rpc_request *req;
        char *action, *path;
        bool sudo;
} simple_op;

static void simple_done(session *s, cJSON *result, int err, const char *message, void *userdata) {
        simple_op *op = userdata;
        cJSON *copy = err >= 0 && result ? cJSON_Duplicate(result, 1) : NULL;
        if (err < 0)
                reply_fs_error(op->req, op->action, op->path, err, message);
        else if (sudo_done(op->req, op->sudo, copy)) {
                rpc_reply(op->req, copy);
                copy = NULL;
        }
        cJSON_Delete(copy);
        free(op->action);
        free(op->path);
        free(op);
}

static void simple_method(rpc_request *req, manager *m, const char *action, rpc_handler self) {
        _cleanup_error_ sb_error *err = NULL;
        const char *path = NULL;
        bool parents = true, recursive = false, sudo = false;
        if (check_path(req, "path", &path, &err) < 0 || rpc_param_bool(req, "recursive", &recursive, &err) < 0 ||
            rpc_param_bool(req, "parents", &parents, &err) < 0 || rpc_param_bool(req, "sudo", &sudo, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_require_unpaused(req, m, "sandbox", self);
        if (!sb)
                return;
        simple_op *op = calloc(1, sizeof(*op));
        op->req = req;
        op->action = strdup(action);
        op->path = strdup(path);
        op->sudo = sudo;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "action", action);
        cJSON_AddStringToObject(o, "path", path);
        cJSON_AddBoolToObject(o, "parents", parents);
        cJSON_AddBoolToObject(o, "recursive", recursive);
        if (sudo)
                cJSON_AddBoolToObject(o, "sudo", true);
        int r = agent_fs(sb->sess, o, simple_done, op);
        if (r < 0)
                simple_done(sb->sess, NULL, r, NULL, op);
}

static void method_mkdir(rpc_request *req, void *m) { simple_method(req, m, "mkdir", method_mkdir); }
static void method_list(rpc_request *req, void *m) { simple_method(req, m, "list", method_list); }
static void method_stat(rpc_request *req, void *m) { simple_method(req, m, "stat", method_stat); }
static void method_remove(rpc_request *req, void *m) { simple_method(req, m, "remove", method_remove); }

/* ---- fs.read: chained reads by offset ------------------------------------ */

typedef struct read_op {
        rpc_request *req;
        bool sudo;
        char *path;
        char *data;
        size_t len;
} read_op;

static void read_free(read_op *op) {
        bool big = op->len >= 1024 * 1024;
        free(op->path);
        free(op->data);
        free(op);
        if (big)
                malloc_trim(0);  /* a burst of large reads must not stay the daemon's size */
}

static int read_next(session *s, read_op *op);

static void read_step(session *s, cJSON *result, int err, const char *message, void *userdata) {
        read_op *op = userdata;
        if (err < 0) {
                reply_fs_error(op->req, "read", op->path, err, message);
                read_free(op);
                return;
        }
        if (op->sudo && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "sudo"))) {
                sudo_done(op->req, true, result);
                read_free(op);
                return;
        }
        if (!rpc_conn_is_open(op->req->conn)) {
                /* Nobody to answer (the client went or was dropped): stop
                 * reading instead of buffering the rest of the file. */
                rpc_reply(op->req, NULL);
                read_free(op);
                return;
        }
        const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "data"));
        _cleanup_free_ void *chunk = NULL;
        size_t n = 0;
        if (!b64 || core_base64_decode(b64, &chunk, &n) < 0) {
                rpc_reply_error(op->req, RPC_INTERNAL_ERROR, NULL, NULL, "fs.read %s: bad reply from sandbox-init",
                                op->path);
                read_free(op);
                return;
        }
        if (op->len + n > FS_READ_MAX) {
                rpc_reply_error(op->req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                "fs.read %s: file is larger than %llu bytes (64 MiB)", op->path,
                                (unsigned long long)FS_READ_MAX);
                read_free(op);
                return;
        }
        char *nd = realloc(op->data, op->len + n + 1);
        if (!nd) {
                rpc_reply_error(op->req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
                read_free(op);
                return;
        }
        op->data = nd;
        memcpy(op->data + op->len, chunk, n);
        op->len += n;
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "eof")) && n > 0) {
                int r = read_next(s, op);
                if (r < 0) {
                        reply_fs_error(op->req, "read", op->path, r, NULL);
                        read_free(op);
                }
                return;
        }
        cJSON *o = cJSON_CreateObject();
        _cleanup_free_ char *enc = core_base64_encode(op->data ? op->data : "", op->len);
        cJSON_AddStringToObject(o, "content", enc ? enc : "");
        cJSON_AddNumberToObject(o, "size", (double)op->len);
        rpc_reply(op->req, o);
        read_free(op);
}

static int read_next(session *s, read_op *op) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "action", "read");
        cJSON_AddStringToObject(o, "path", op->path);
        if (op->sudo)
                cJSON_AddBoolToObject(o, "sudo", true);
        cJSON_AddNumberToObject(o, "offset", (double)op->len);
        return agent_fs(s, o, read_step, op);
}

static void method_read(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        const char *path = NULL;
        bool sudo = false;
        if (check_path(req, "path", &path, &err) < 0 || rpc_param_bool(req, "sudo", &sudo, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_require_unpaused(req, userdata, "sandbox", method_read);
        if (!sb)
                return;
        read_op *op = calloc(1, sizeof(*op));
        op->req = req;
        op->sudo = sudo;
        op->path = strdup(path);
        int r = read_next(sb->sess, op);
        if (r < 0) {
                reply_fs_error(req, "read", path, r, NULL);
                read_free(op);
        }
}

/* ---- fs.write: files in order, each in chunks ----------------------------- */

typedef struct write_op {
        rpc_request *req;
        cJSON *files;      /* the request's array, borrowed */
        int index, count;
        void *data;        /* decoded content of files[index] */
        size_t len, off;
        bool loaded, sent;
        bool xattrs_sent;  /* the piece in flight carries files[index].xattrs */
        bool sudo;         /* every piece as root */
} write_op;

static void write_free(write_op *op) {
        free(op->data);
        free(op);
}

static int write_next(session *s, write_op *op);

static void write_step(session *s, cJSON *result, int err, const char *message, void *userdata) {
        write_op *op = userdata;
        if (err < 0) {
                cJSON *f = cJSON_GetArrayItem(op->files, op->index);
                reply_fs_error(op->req, "write", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "path")), err, message);
                write_free(op);
                return;
        }
        if (op->xattrs_sent && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "xattrs"))) {
                /* A sandbox-init from before xattrs ignores the field:
                 * never a silent success. */
                rpc_reply_error(op->req, RPC_APP_ERROR, "failed", NULL,
                                "fs.write: this sandbox's session predates xattrs (its sandbox-init did not set "
                                "them); restart the sandbox");
                write_free(op);
                return;
        }
        op->xattrs_sent = false;
        if (!sudo_done(op->req, op->sudo, result)) {
                write_free(op);
                return;
        }
        int r = write_next(s, op);
        if (r == 1) {
                rpc_reply(op->req, NULL);
                write_free(op);
        } else if (r < 0) {
                reply_fs_error(op->req, "write", "", r, NULL);
                write_free(op);
        }
}

/* Sends the next chunk; returns 1 when every file is written. An empty
 * file is one empty chunk, so it is still created. */
static int write_next(session *s, write_op *op) {
        for (;;) {
                if (op->index >= op->count)
                        return 1;
                cJSON *f = cJSON_GetArrayItem(op->files, op->index);
                if (!op->loaded) {
                        const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "content"));
                        if (core_base64_decode(b64 ? b64 : "", &op->data, &op->len) < 0)
                                return -EINVAL;
                        op->off = 0;
                        op->sent = false;
                        op->loaded = true;
                }
                if (op->sent && op->off >= op->len) {
                        free(op->data);
                        op->data = NULL;
                        op->loaded = false;
                        op->index++;
                        continue;
                }
                size_t n = op->len - op->off < AGENT_FS_CHUNK ? op->len - op->off : AGENT_FS_CHUNK;
                _cleanup_free_ char *chunk = core_base64_encode((char *)op->data + op->off, n);
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "action", "write");
                cJSON_AddStringToObject(o, "path", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "path")));
                cJSON *mode = cJSON_GetObjectItemCaseSensitive(f, "mode");
                cJSON_AddNumberToObject(o, "mode", cJSON_IsNumber(mode) ? mode->valuedouble : 0644);
                cJSON_AddStringToObject(o, "data", chunk ? chunk : "");
                /* A client's own append continues a file it sends in pieces
                 * (sandboxctl cp); our chunks of one content always do. */
                cJSON_AddBoolToObject(o, "append", op->sent || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(f, "append")));
                if (op->sudo)
                        cJSON_AddBoolToObject(o, "sudo", true);
                /* xattrs with the first piece: set once the file is opened. */
                cJSON *xattrs = cJSON_GetObjectItemCaseSensitive(f, "xattrs");
                if (!op->sent && xattrs) {
                        cJSON_AddItemToObject(o, "xattrs", cJSON_Duplicate(xattrs, 1));
                        op->xattrs_sent = true;
                }
                op->off += n;
                op->sent = true;
                return agent_fs(s, o, write_step, op);
        }
}

/* fs.write's files[i].xattrs: {NAME: VALUE}, at most FS_XATTRS, each NAME
 * `user.` and 1-250 more bytes of printable ASCII, each VALUE a string of
 * at most FS_XATTR_VALUE bytes of printable ASCII (what fs.stat can show
 * again). Absent is fine. */
#define FS_XATTRS 32
#define FS_XATTR_NAME 255
#define FS_XATTR_VALUE 4096

static bool printable_ascii(const char *s) {
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
                        return false;
        return true;
}

static int validate_xattrs(const cJSON *x, int i, sb_error **ret_err) {
        char field[96];
        snprintf(field, sizeof(field), "files[%d].xattrs", i);
        if (!x)
                return 0;
        if (!cJSON_IsObject(x))
                return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: must be an object {NAME: VALUE}", field);
        int n = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, x) {
                const char *v = cJSON_GetStringValue(e);
                size_t nl = strlen(e->string);
                if (++n > FS_XATTRS)
                        return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: at most %d attributes", field, FS_XATTRS);
                if (strncmp(e->string, "user.", 5) != 0 || nl < 6 || nl > FS_XATTR_NAME || !printable_ascii(e->string))
                        return sb_error_set(ret_err, -EINVAL, NULL, field,
                                            "%s: '%.64s': a name in the user. namespace (xattr(7)), 6-%d bytes of "
                                            "printable ASCII", field, e->string, FS_XATTR_NAME);
                if (!v || strlen(v) > FS_XATTR_VALUE || !printable_ascii(v))
                        return sb_error_set(ret_err, -EINVAL, NULL, field,
                                            "%s: '%.64s': its value must be a string of at most %d bytes of "
                                            "printable ASCII", field, e->string, FS_XATTR_VALUE);
        }
        return 0;
}

static int validate_files(cJSON *files, sb_error **ret_err) {
        int i = 0;
        cJSON *f;
        cJSON_ArrayForEach(f, files) {
                char field[64];
                snprintf(field, sizeof(field), "files[%d]", i);
                if (!cJSON_IsObject(f))
                        return sb_error_set(ret_err, -EINVAL, NULL, field,
                                            "%s: must be an object {path, content, mode?, append?, xattrs?}", field);
                const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "path"));
                const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "content"));
                cJSON *mode = cJSON_GetObjectItemCaseSensitive(f, "mode");
                cJSON *append = cJSON_GetObjectItemCaseSensitive(f, "append");
                _cleanup_free_ void *d = NULL;
                size_t n;
                if (!path || !*path || strlen(path) > LIMIT_PATH_BYTES) {
                        snprintf(field, sizeof(field), "files[%d].path", i);
                        return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: a path of 1-%d bytes is required",
                                            field, LIMIT_PATH_BYTES);
                }
                if (!content || core_base64_decode(content, &d, &n) < 0) {
                        snprintf(field, sizeof(field), "files[%d].content", i);
                        return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: base64 content is required", field);
                }
                if (mode && (!cJSON_IsNumber(mode) || mode->valuedouble < 0 || mode->valuedouble > 07777 ||
                             mode->valuedouble != (int)mode->valuedouble)) {
                        snprintf(field, sizeof(field), "files[%d].mode", i);
                        return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: permission bits from 0 to 07777", field);
                }
                if (append && !cJSON_IsBool(append)) {
                        snprintf(field, sizeof(field), "files[%d].append", i);
                        return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: must be true or false", field);
                }
                if (validate_xattrs(cJSON_GetObjectItemCaseSensitive(f, "xattrs"), i, ret_err) < 0)
                        return -EINVAL;
                i++;
        }
        return i;
}

static void method_write(rpc_request *req, void *userdata) {
        _cleanup_error_ sb_error *err = NULL;
        cJSON *files = NULL;
        int count;
        bool sudo = false;
        if (rpc_param_array(req, "files", true, &files, &err) < 0 || (count = validate_files(files, &err)) < 0 ||
            rpc_param_bool(req, "sudo", &sudo, &err) < 0) {
                rpc_reply_sb_error(req, err);
                return;
        }
        sandbox *sb = sandbox_require_unpaused(req, userdata, "sandbox", method_write);
        if (!sb)
                return;
        write_op *op = calloc(1, sizeof(*op));
        op->req = req;
        op->files = files;
        op->count = count;
        op->sudo = sudo;
        int r = write_next(sb->sess, op);
        if (r == 1) {
                rpc_reply(req, NULL);
                write_free(op);
        } else if (r < 0) {
                reply_fs_error(req, "write", "", r, NULL);
                write_free(op);
        }
}

void register_fs_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "fs.write", method_write, m);
        rpc_server_add_method(s, "fs.read", method_read, m);
        /* Up to 64 MiB per answer: one at a time per connection (rpc.h). */
        rpc_server_set_method_bulk(s, "fs.read");
        rpc_server_add_method(s, "fs.mkdir", method_mkdir, m);
        rpc_server_add_method(s, "fs.list", method_list, m);
        rpc_server_add_method(s, "fs.stat", method_stat, m);
        rpc_server_add_method(s, "fs.remove", method_remove, m);
}
