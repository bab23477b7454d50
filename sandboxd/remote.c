/* Remote clients (remote.h): the TLS 1.3 context and listeners, the
 * subject-to-role mapping, and the authorization of each request of a TLS
 * connection.
 *
 * Threat: anyone who can reach the TCP port. The order of locks:
 *  1. caps before any TLS work (rpc.c: total, per address, handshakes in
 *     progress) and a handshake deadline, so a flood or a stalled client
 *     cannot exhaust the daemon or hold the loop (all SSL calls are
 *     non-blocking, driven by the event loop);
 *  2. TLS 1.3 only (no renegotiation exists in 1.3, no downgrade), no
 *     session resumption (every connection presents and proves its
 *     certificate), a client certificate required and verified against
 *     tlsClientCA alone (never the host's roots), for client use (EKU),
 *     within validity, chain depth and size bounded;
 *  3. the subject parsed strictly into one role (remote.h), else refused;
 *  4. every request checked against the role's table below before its
 *     method runs; a table miss is a refusal (a new method must be
 *     classified here).
 * Every refusal is one log line: the peer, the subject when known, why. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include "libcore/log.h"
#include "libcore/route.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/limits.h"
#include "sandboxd/remote.h"
#include "sandboxd/text.h"
#include "policy/match.h"

/* The manager the result filters look sandboxes up in (one per daemon; set
 * by remote_attach). */
static manager *filter_manager;

/* RFC 5280 Appendix A upper bounds: ub-common-name and
 * ub-organization-name are 64 characters. */
#define REMOTE_NAME_MAX 64
/* Attributes in a subject we read at all. */
#define REMOTE_SUBJECT_ENTRIES_MAX 16
/* Certificates in a client chain (leaf + intermediates) and the bytes of
 * the Certificate message: a "huge chain" costs a bounded read and is
 * refused before any signature is checked. */
#define REMOTE_VERIFY_DEPTH 4
#define REMOTE_MAX_CERT_LIST (64 * 1024)
#define REMOTE_SUBJECT_LOG_MAX 512

void remote_identity_free(remote_identity *id) {
        if (!id)
                return;
        free(id->name);
        free(id->tag_key);
        free(id->tag_value);
        free(id->subject);
        free(id->role_text);
        free(id);
}

/* The subject as RFC 2253 text with every control and non-ASCII byte
 * escaped, so a log line shows exactly what the certificate holds and no
 * NUL, newline or escape sequence can forge another line. */
static char *subject_text(const X509_NAME *name) {
        BIO *b = BIO_new(BIO_s_mem());
        if (!b)
                return NULL;
        unsigned long flags = XN_FLAG_RFC2253 | ASN1_STRFLGS_ESC_MSB;
        char *text = NULL;
        if (X509_NAME_print_ex(b, name, 0, flags) >= 0) {
                char *data = NULL;
                long n = BIO_get_mem_data(b, &data);
                if (n > REMOTE_SUBJECT_LOG_MAX)
                        n = REMOTE_SUBJECT_LOG_MAX;
                text = strndup(data ? data : "", n > 0 ? (size_t) n : 0);
        }
        BIO_free(b);
        return text;
}

/* One attribute's value as UTF-8, refused unless it is a UTF8String or
 * PrintableString of 1..REMOTE_NAME_MAX characters with no NUL (an embedded
 * NUL would make "admin\0x" compare as "admin"), no control character and
 * valid UTF-8. Returns a new string or NULL with *ret_reason. */
static char *attribute_value(const X509_NAME_ENTRY *e, const char *what, const char **ret_reason) {
        const ASN1_STRING *v = X509_NAME_ENTRY_get_data(e);
        int type = ASN1_STRING_type(v);
        if (type != V_ASN1_UTF8STRING && type != V_ASN1_PRINTABLESTRING) {
                *ret_reason = streq(what, "CN") ? "the subject's CN is not a UTF8String or PrintableString"
                                                : "the subject's O is not a UTF8String or PrintableString";
                return NULL;
        }
        const unsigned char *raw = ASN1_STRING_get0_data(v);
        int len = ASN1_STRING_length(v);
        if (len <= 0 || !raw || memchr(raw, 0, (size_t) len) || !text_utf8_valid((const char *) raw, (size_t) len, NULL)) {
                *ret_reason = "a subject attribute is empty, holds a NUL byte or is not UTF-8";
                return NULL;
        }
        size_t chars = 0;
        for (int i = 0; i < len; i++) {
                if (raw[i] < 0x20 || raw[i] == 0x7f) {
                        *ret_reason = "a subject attribute holds a control character";
                        return NULL;
                }
                if ((raw[i] & 0xc0) != 0x80)
                        chars++;
        }
        if (chars > REMOTE_NAME_MAX) {
                *ret_reason = "a subject attribute is longer than 64 characters (RFC 5280 upper bound)";
                return NULL;
        }
        char *s = strndup((const char *) raw, (size_t) len);
        if (!s)
                *ret_reason = "out of memory";
        return s;
}

/* "admin" or "tag:KEY=VALUE" with KEY 1..LIMIT_TAG_NAME_BYTES without '='
 * and VALUE non-empty. */
static int parse_role(const char *o, remote_identity *id, const char **ret_reason) {
        if (streq(o, "admin")) {
                id->role = REMOTE_ROLE_ADMIN;
                return (id->role_text = strdup("admin")) ? 0 : -ENOMEM;
        }
        if (strncmp(o, "tag:", 4) != 0) {
                *ret_reason = "the subject's O names no role (admin or tag:KEY=VALUE)";
                return -EACCES;
        }
        const char *kv = o + 4, *eq = strchr(kv, '=');
        if (!eq || eq == kv || !eq[1] || (size_t) (eq - kv) > LIMIT_TAG_NAME_BYTES) {
                *ret_reason = "the subject's O is not tag:KEY=VALUE with a non-empty KEY and VALUE";
                return -EACCES;
        }
        id->role = REMOTE_ROLE_TAG;
        id->tag_key = strndup(kv, (size_t) (eq - kv));
        id->tag_value = strdup(eq + 1);
        id->role_text = strdup(o);
        return id->tag_key && id->tag_value && id->role_text ? 0 : -ENOMEM;
}

int remote_identity_from_name(const X509_NAME *name, remote_identity **ret, const char **ret_reason) {
        const char *reason = "out of memory";
        int n = X509_NAME_entry_count(name);
        if (n <= 0 || n > REMOTE_SUBJECT_ENTRIES_MAX) {
                *ret_reason = n <= 0 ? "the certificate has an empty subject" : "the subject has too many attributes";
                return -EACCES;
        }
        const X509_NAME_ENTRY *cn = NULL, *org = NULL;
        for (int i = 0; i < n; i++) {
                const X509_NAME_ENTRY *e = X509_NAME_get_entry(name, i);
                /* Each RDN one attribute: OpenSSL numbers the RDN of each
                 * entry; a repeated number is a multi-valued RDN
                 * ("O=admin+O=tag:x=y"), which readers split differently. */
                if (X509_NAME_ENTRY_set(e) != i) {
                        *ret_reason = "the subject has a multi-valued RDN";
                        return -EACCES;
                }
                int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(e));
                const X509_NAME_ENTRY **slot = nid == NID_commonName ? &cn : nid == NID_organizationName ? &org : NULL;
                if (!slot)
                        continue;
                if (*slot) {
                        *ret_reason = nid == NID_commonName ? "the subject has more than one CN"
                                                            : "the subject has more than one O";
                        return -EACCES;
                }
                *slot = e;
        }
        if (!cn || !org) {
                *ret_reason = !cn ? "the subject has no CN" : "the subject has no O (the role)";
                return -EACCES;
        }
        remote_identity *id = calloc(1, sizeof(*id));
        if (!id) {
                *ret_reason = reason;
                return -ENOMEM;
        }
        _cleanup_free_ char *o = NULL;
        int r = -EACCES;
        if ((id->name = attribute_value(cn, "CN", &reason)) && (o = attribute_value(org, "O", &reason))) {
                r = parse_role(o, id, &reason);
                if (r == 0 && !(id->subject = subject_text(name)))
                        r = -ENOMEM;
        }
        if (r < 0) {
                remote_identity_free(id);
                *ret_reason = r == -ENOMEM ? "out of memory" : reason;
                return r;
        }
        *ret = id;
        return 0;
}

int remote_identity_from_der(const uint8_t *der, size_t len, remote_identity **ret, const char **ret_reason) {
        const unsigned char *p = der;
        X509_NAME *name = d2i_X509_NAME(NULL, &p, (long) len);
        if (!name) {
                ERR_clear_error();
                *ret_reason = "not a DER-encoded Name";
                return -EINVAL;
        }
        int r = remote_identity_from_name(name, ret, ret_reason);
        X509_NAME_free(name);
        return r;
}

/* ---- the handshake ---- */

/* OpenSSL's chain verification, with one log line per certificate it
 * refuses (expired, not yet valid, unknown issuer, wrong purpose, too
 * deep), naming the peer and the subject. The verdict is OpenSSL's. */
static int verify_cb(int ok, X509_STORE_CTX *store) {
        if (ok)
                return ok;
        SSL *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
        const char *peer = ssl ? SSL_get_app_data(ssl) : NULL;
        X509 *cert = X509_STORE_CTX_get_current_cert(store);
        _cleanup_free_ char *subject = cert ? subject_text(X509_get_subject_name(cert)) : NULL;
        int err = X509_STORE_CTX_get_error(store);
        log_warning("remote: refused %s: client certificate \"%s\" (depth %d): %s", peer ? peer : "?",
                    subject ? subject : "?", X509_STORE_CTX_get_error_depth(store), X509_verify_cert_error_string(err));
        return 0;
}

static int tls_accept(rpc_conn *c, SSL *ssl, const char *peer, void **ret_identity, void *userdata) {
        X509 *cert = SSL_get0_peer_certificate(ssl);
        long vr = SSL_get_verify_result(ssl);
        if (!cert || vr != X509_V_OK || SSL_version(ssl) != TLS1_3_VERSION) {
                /* Unreachable with the context below; checked again so a
                 * change there fails closed. */
                log_warning("remote: refused %s: %s", peer,
                            !cert ? "no client certificate" : vr != X509_V_OK ? X509_verify_cert_error_string(vr)
                                                                              : "not TLS 1.3");
                return -EACCES;
        }
        const char *reason = NULL;
        remote_identity *id = NULL;
        int r = remote_identity_from_name(X509_get_subject_name(cert), &id, &reason);
        if (r < 0) {
                _cleanup_free_ char *subject = subject_text(X509_get_subject_name(cert));
                log_warning("remote: refused %s: client certificate \"%s\": %s", peer, subject ? subject : "?", reason);
                return r;
        }
        log_info("remote: %s connected as \"%s\" (role %s)", peer, id->subject, id->role_text);
        *ret_identity = id;
        return 0;
}

static void identity_free(void *p) {
        remote_identity_free(p);
}

/* The server context: TLS 1.3 only, a verified client certificate
 * required, trust in tlsClientCA alone. */
static int make_ctx(const daemon_config *cfg, SSL_CTX **ret, sb_error **ret_err) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        char buf[256];
        const char *key = NULL;
        if (!ctx)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "TLS context: out of memory");
        int ok = SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) && SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
        /* No resumption: a resumed session would skip the certificate. */
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        ok = ok && SSL_CTX_set_num_tickets(ctx, 0);
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
        SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_CTX_set_max_cert_list(ctx, REMOTE_MAX_CERT_LIST);
        if (ok && SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert) != 1)
                ok = 0, key = "tlsCert";
        if (ok && SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key, SSL_FILETYPE_PEM) != 1)
                ok = 0, key = "tlsKey";
        if (ok && SSL_CTX_check_private_key(ctx) != 1)
                ok = 0, key = "tlsKey";
        if (ok && SSL_CTX_load_verify_locations(ctx, cfg->tls_client_ca, NULL) != 1)
                ok = 0, key = "tlsClientCA";
        STACK_OF(X509_NAME) *names = ok ? SSL_load_client_CA_file(cfg->tls_client_ca) : NULL;
        if (ok && !names)
                ok = 0, key = "tlsClientCA";
        if (ok) {
                SSL_CTX_set_client_CA_list(ctx, names);  /* takes names */
                SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
                SSL_CTX_set_verify_depth(ctx, REMOTE_VERIFY_DEPTH);
                X509_VERIFY_PARAM *vp = SSL_CTX_get0_param(ctx);
                ok = X509_VERIFY_PARAM_set_purpose(vp, X509_PURPOSE_SSL_CLIENT) &&
                     X509_VERIFY_PARAM_set_flags(vp, X509_V_FLAG_X509_STRICT);
        }
        if (!ok) {
                unsigned long e = ERR_peek_last_error();
                ERR_error_string_n(e, buf, sizeof(buf));
                ERR_clear_error();
                SSL_CTX_free(ctx);
                const char *path = !key ? "" : streq(key, "tlsCert") ? cfg->tls_cert
                                             : streq(key, "tlsKey") ? cfg->tls_key : cfg->tls_client_ca;
                return sb_error_set(ret_err, -EINVAL, NULL, key, "daemon.json: %s: '%s': %s", key ? key : "TLS",
                                    path, e ? buf : "cannot set up TLS 1.3");
        }
        *ret = ctx;
        return 0;
}

static int authorize(rpc_request *req, void *userdata, sb_error **ret_err);

static int bind_listen(const char *addr, int *ret_fd, sb_error **ret_err) {
        struct sockaddr_storage ss;
        unsigned len = 0;
        if (daemon_config_parse_listen(addr, &ss, &len) < 0)
                return sb_error_set(ret_err, -EINVAL, NULL, "listen", "daemon.json: listen: bad address '%s'", addr);
        _cleanup_close_ int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int on = 1;
        if (fd < 0)
                return sb_error_set(ret_err, -errno, NULL, "listen", "listen '%s': socket: %m", addr);
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (ss.ss_family == AF_INET6)
                (void) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof(on));
        if (bind(fd, (struct sockaddr *) &ss, len) < 0 || listen(fd, SOMAXCONN) < 0)
                return sb_error_set(ret_err, -errno, NULL, "listen", "listen '%s': %m", addr);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

struct remote_listeners {
        SSL_CTX *ctx;
        int fds[RPC_LISTEN_MAX];
        size_t n;
};

void remote_listeners_free(remote_listeners *l) {
        if (!l)
                return;
        for (size_t i = 0; i < l->n; i++)
                if (l->fds[i] >= 0)
                        close(l->fds[i]);
        SSL_CTX_free(l->ctx);
        free(l);
}

int remote_prepare(const daemon_config *cfg, remote_listeners **ret, sb_error **ret_err) {
        *ret = NULL;
        if (!cfg->listen || !cfg->listen[0])
                return 0;
        remote_listeners *l = calloc(1, sizeof(*l));
        if (!l)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = make_ctx(cfg, &l->ctx, ret_err);
        for (size_t i = 0; r >= 0 && cfg->listen[i]; i++) {
                if (l->n >= RPC_LISTEN_MAX) {
                        r = sb_error_set(ret_err, -E2BIG, NULL, "listen", "daemon.json: listen: at most %d addresses",
                                         RPC_LISTEN_MAX);
                        break;
                }
                l->fds[l->n] = -EBADF;
                r = bind_listen(cfg->listen[i], &l->fds[l->n], ret_err);
                if (r >= 0)
                        l->n++;
        }
        if (r < 0) {
                remote_listeners_free(l);
                return r;
        }
        *ret = l;
        return 0;
}

int remote_attach(remote_listeners *l, manager *m, const daemon_config *cfg, rpc_server *server, sb_error **ret_err) {
        if (!l)
                return 0;
        rpc_server_set_tls_accept(server, tls_accept, identity_free, m);
        rpc_server_set_authorize(server, authorize, m);
        filter_manager = m;
        int r = 0;
        for (size_t i = 0; r >= 0 && i < l->n; i++) {
                rpc_tls_config tc = {
                        .listen_fd = l->fds[i],
                        .name = cfg->listen[i],
                        .ctx = l->ctx,
                        .handshake_timeout_ms = (unsigned) cfg->tls_handshake_timeout_ms,
                        .max_conns = cfg->max_conns_remote,
                        .max_conns_addr = cfg->max_conns_addr,
                        .max_handshakes = cfg->max_tls_handshakes,
                };
                l->fds[i] = -EBADF;  /* taken, even on failure */
                r = rpc_server_add_tls_listener(server, &tc, ret_err);
                if (r >= 0)
                        log_info("listening on %s (TLS 1.3, client certificates from %s)", cfg->listen[i],
                                 cfg->tls_client_ca);
        }
        remote_listeners_free(l);  /* the listeners hold their references to the context */
        return r;
}

/* ---- authorization ---- */

/* What a tag role may do with a method, by the object its params name. */
typedef enum tag_access {
        ACCESS_ADMIN,     /* daemon-wide or host paths: admin only */
        ACCESS_ANY,       /* reads nothing of any sandbox */
        ACCESS_SANDBOX,   /* params[field] names a sandbox that must carry the tag */
        ACCESS_COMMAND,   /* params.cmdId names a command of such a sandbox */
        ACCESS_SNAPSHOT,  /* params.id names a snapshot whose config carries the tag */
        ACCESS_STREAM,    /* a tar stream: bound to the connection that began it (fstar.c) */
        ACCESS_CREATE,    /* sandbox.create / getOrCreate: the tag forced, sources checked */
        ACCESS_LIST,      /* sandbox.list: the tag forced into the filter */
        ACCESS_SNAPSHOTS, /* snapshot.list: the result filtered */
        ACCESS_RUNTIMES,  /* runtime.list: each runtime's users filtered to the tag's */
        ACCESS_OPTIONAL_SANDBOX, /* params[field] optional; when given, ACCESS_SANDBOX */
} tag_access;

/* Every method of the API (schema.c's table) with a tag role's access.
 * Admin only, on purpose: runtime.import, runtime.bootstrap and
 * runtime.delete (runtimes are shared by every tenant), snapshot.export and
 * snapshot.import (host paths), daemon.info (the daemon as a whole). A
 * method missing here is refused for tag roles. */
static const struct {
        const char *method;
        tag_access access;
        const char *field;
} method_access[] = {
        { "sandbox.create", ACCESS_CREATE, NULL },
        { "sandbox.getOrCreate", ACCESS_CREATE, "name" },
        { "sandbox.get", ACCESS_SANDBOX, "name" },
        { "sandbox.update", ACCESS_SANDBOX, "name" },
        { "sandbox.list", ACCESS_LIST, NULL },
        { "sandbox.stop", ACCESS_SANDBOX, "name" },
        { "sandbox.delete", ACCESS_SANDBOX, "name" },
        { "sandbox.extendTimeout", ACCESS_SANDBOX, "name" },
        { "sandbox.fork", ACCESS_SANDBOX, "sourceSandbox" },
        { "sandbox.snapshot", ACCESS_SANDBOX, "name" },
        { "snapshot.list", ACCESS_SNAPSHOTS, "sandbox" },
        { "snapshot.get", ACCESS_SNAPSHOT, "id" },
        { "snapshot.delete", ACCESS_SNAPSHOT, "id" },
        { "snapshot.export", ACCESS_ADMIN, NULL },
        { "snapshot.import", ACCESS_ADMIN, NULL },
        { "runtime.list", ACCESS_RUNTIMES, NULL },
        { "runtime.import", ACCESS_ADMIN, NULL },
        { "runtime.bootstrap", ACCESS_ADMIN, NULL },
        { "runtime.delete", ACCESS_ADMIN, NULL },
        { "command.run", ACCESS_SANDBOX, "sandbox" },
        { "command.write", ACCESS_COMMAND, "cmdId" },
        { "command.closeStdin", ACCESS_COMMAND, "cmdId" },
        { "command.resize", ACCESS_COMMAND, "cmdId" },
        { "command.wait", ACCESS_COMMAND, "cmdId" },
        { "command.kill", ACCESS_COMMAND, "cmdId" },
        { "command.get", ACCESS_COMMAND, "cmdId" },
        { "command.logs", ACCESS_COMMAND, "cmdId" },
        { "command.list", ACCESS_SANDBOX, "name" },
        { "fs.write", ACCESS_SANDBOX, "sandbox" },
        { "fs.read", ACCESS_SANDBOX, "sandbox" },
        { "fs.mkdir", ACCESS_SANDBOX, "sandbox" },
        { "fs.list", ACCESS_SANDBOX, "sandbox" },
        { "fs.stat", ACCESS_SANDBOX, "sandbox" },
        { "fs.remove", ACCESS_SANDBOX, "sandbox" },
        { "fs.writeTar", ACCESS_SANDBOX, "sandbox" },
        { "fs.writeTarChunk", ACCESS_STREAM, NULL },
        { "fs.writeTarEnd", ACCESS_STREAM, NULL },
        { "fs.readTar", ACCESS_SANDBOX, "sandbox" },
        { "fs.readTarChunk", ACCESS_STREAM, NULL },
        { "fs.watch", ACCESS_SANDBOX, "sandbox" },
        { "policy.check", ACCESS_OPTIONAL_SANDBOX, "sandbox" },
        { "events.subscribe", ACCESS_OPTIONAL_SANDBOX, "sandbox" },
        { "daemon.info", ACCESS_ADMIN, NULL },
        /* Finds requests of the caller's own connection only (rpc.c). */
        { "request.cancel", ACCESS_ANY, NULL },
        { "sandbox.setReady", ACCESS_SANDBOX, "name" },
};

static bool tags_carry(const cJSON *tags, const remote_identity *id) {
        const cJSON *v = cJSON_IsObject(tags) ? cJSON_GetObjectItemCaseSensitive(tags, id->tag_key) : NULL;
        return cJSON_IsString(v) && streq(v->valuestring, id->tag_value);
}

static bool sandbox_visible(manager *m, const char *name, const remote_identity *id) {
        sandbox *sb = name ? manager_find_sandbox(m, name) : NULL;
        return sb && tags_carry(sb->tags, id);
}

bool remote_conn_sees_sandbox(manager *m, const rpc_conn *c, const char *sb_name) {
        const remote_identity *id = rpc_conn_identity(c);
        if (!id || id->role == REMOTE_ROLE_ADMIN)
                return true;
        return sandbox_visible(m, sb_name, id);
}

static int refuse(rpc_request *req, const remote_identity *id, sb_error **ret_err, const char *fmt, ...)
        _printf_(4, 5);
static int refuse(rpc_request *req, const remote_identity *id, sb_error **ret_err, const char *fmt, ...) {
        _cleanup_free_ char *why = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&why, fmt, ap) < 0)
                why = NULL;
        va_end(ap);
        char lm[TEXT_LOG_BUF], lw[TEXT_LOG_BUF];
        log_warning("remote: refused %s from %s (\"%s\", role %s): %s", text_for_log(req->method, lm, sizeof(lm)),
                    rpc_conn_peer(req->conn), id->subject, id->role_text,
                    text_for_log(why ? why : "permission denied", lw, sizeof(lw)));
        return sb_error_set(ret_err, -EACCES, "permission_denied", NULL, "permission denied: %s (role %s)",
                            why ? why : "not allowed", id->role_text);
}

/* A string param (borrowed), or NULL when absent or not a string. */
static const char *param_str(const rpc_request *req, const char *field) {
        const cJSON *v = cJSON_IsObject(req->params) ? cJSON_GetObjectItemCaseSensitive(req->params, field) : NULL;
        return cJSON_GetStringValue(v);
}

/* Makes obj[key] (a tags object, created when absent) carry the role's
 * tag; a different value for the key is refused rather than overwritten. */
static int force_tag(rpc_request *req, const remote_identity *id, cJSON *obj, const char *key, const char *where,
                     sb_error **ret_err) {
        cJSON *tags = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (!tags) {
                tags = cJSON_AddObjectToObject(obj, key);
                if (!tags)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        if (!cJSON_IsObject(tags))
                return refuse(req, id, ret_err, "%s must be an object", where);
        cJSON *v = cJSON_GetObjectItemCaseSensitive(tags, id->tag_key);
        if (v && !(cJSON_IsString(v) && streq(v->valuestring, id->tag_value)))
                return refuse(req, id, ret_err, "%s.%s: this client may only set it to \"%s\"", where,
                              TEXT_Q(id->tag_key), TEXT_Q(id->tag_value));
        if (!v && !cJSON_AddStringToObject(tags, id->tag_key, id->tag_value))
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        return 0;
}

static bool url_is_remote(const char *url) {
        return url && (strncasecmp(url, "https://", 8) == 0 || strncasecmp(url, "http://", 7) == 0);
}

/* A tag role's source: a snapshot carrying its tag, or a git or tarball
 * URL over http(s). Paths and file:// read the daemon's host (an operator's
 * choice through localSourceRoots, for local clients only). */
static int check_source(rpc_request *req, manager *m, const remote_identity *id, sb_error **ret_err) {
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(req->params, "source");
        if (!src)
                return 0;
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "type"));
        if (type && streq(type, "snapshot")) {
                const char *sid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "snapshotId"));
                snapshot *sn = sid ? manager_find_snapshot(m, sid) : NULL;
                if (!sn || !tags_carry(cJSON_GetObjectItemCaseSensitive(sn->config, "tags"), id))
                        return refuse(req, id, ret_err, "source.snapshotId: no snapshot '%s' carrying tag %s=%s",
                                      TEXT_Q(sid ? sid : "?"), TEXT_Q(id->tag_key), TEXT_Q(id->tag_value));
                return 0;
        }
        if (cJSON_GetObjectItemCaseSensitive(src, "path"))
                return refuse(req, id, ret_err, "source.path: host paths are for local clients only");
        const char *url = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(src, "url"));
        if (url && !url_is_remote(url))
                return refuse(req, id, ret_err, "source.url: only http:// and https:// sources for remote clients");
        return 0;
}

/* snapshot.list for a tag role: only snapshots whose config carries the tag. */
static void filter_snapshots(rpc_request *req, cJSON *result, void *userdata) {
        const remote_identity *id = userdata;
        cJSON *list = cJSON_GetObjectItemCaseSensitive(result, "snapshots");
        cJSON *it = cJSON_IsArray(list) ? list->child : NULL;
        while (it) {
                cJSON *next = it->next;
                if (!tags_carry(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(it, "config"), "tags"),
                                id))
                        cJSON_Delete(cJSON_DetachItemViaPointer(list, it));
                it = next;
        }
}

/* runtime.list for a tag role: a runtime's `sandboxes` name only the
 * role's own, and `snapshots` counts only snapshots carrying its tag, so
 * other tenants' sandbox names and counts do not show. */
static void filter_runtimes(rpc_request *req, cJSON *result, void *userdata) {
        const remote_identity *id = userdata;
        manager *m = filter_manager;
        cJSON *list = cJSON_GetObjectItemCaseSensitive(result, "runtimes"), *rt;
        cJSON_ArrayForEach(rt, list) {
                cJSON *users = cJSON_GetObjectItemCaseSensitive(rt, "sandboxes");
                cJSON *it = cJSON_IsArray(users) ? users->child : NULL;
                while (it) {
                        cJSON *next = it->next;
                        if (!m || !cJSON_IsString(it) || !sandbox_visible(m, it->valuestring, id))
                                cJSON_Delete(cJSON_DetachItemViaPointer(users, it));
                        it = next;
                }
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rt, "name"));
                int snaps = 0;
                for (snapshot *sn = m && name ? m->snapshots : NULL; sn; sn = sn->next) {
                        const char *r = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sn->config, "runtime"));
                        if (streq(r ? r : "host", name) && tags_carry(cJSON_GetObjectItemCaseSensitive(sn->config, "tags"), id))
                                snaps++;
                }
                if (cJSON_GetObjectItemCaseSensitive(rt, "snapshots"))
                        cJSON_ReplaceItemInObjectCaseSensitive(rt, "snapshots", cJSON_CreateNumber(snaps));
        }
}

static int authorize_tag(rpc_request *req, manager *m, const remote_identity *id, tag_access a, const char *field,
                         sb_error **ret_err) {
        const char *name = field ? param_str(req, field) : NULL;
        switch (a) {
        case ACCESS_ADMIN:
                return refuse(req, id, ret_err, "%s is for admin clients only", TEXT_Q(req->method));
        case ACCESS_ANY:
        case ACCESS_STREAM:
                return 0;
        case ACCESS_OPTIONAL_SANDBOX:
                if (!cJSON_GetObjectItemCaseSensitive(req->params, field))
                        return 0;
                __attribute__((fallthrough));
        case ACCESS_SANDBOX:
                if (!sandbox_visible(m, name, id))
                        return refuse(req, id, ret_err, "%s: no sandbox '%s' carrying tag %s=%s", field,
                                      TEXT_Q(name ? name : "?"), TEXT_Q(id->tag_key), TEXT_Q(id->tag_value));
                if (streq(req->method, "sandbox.update") && cJSON_GetObjectItemCaseSensitive(req->params, "tags"))
                        return force_tag(req, id, req->params, "tags", "tags", ret_err);
                if (streq(req->method, "sandbox.fork")) {
                        cJSON *ov = cJSON_GetObjectItemCaseSensitive(req->params, "overrides");
                        if (ov && cJSON_IsObject(ov) && cJSON_GetObjectItemCaseSensitive(ov, "tags"))
                                return force_tag(req, id, ov, "tags", "overrides.tags", ret_err);
                }
                return 0;
        case ACCESS_COMMAND: {
                command *cmd = name ? manager_find_command(m, name) : NULL;
                if (!cmd || !cmd->sb || !tags_carry(cmd->sb->tags, id))
                        return refuse(req, id, ret_err, "cmdId: no command '%s' of a sandbox carrying tag %s=%s",
                                      TEXT_Q(name ? name : "?"), TEXT_Q(id->tag_key), TEXT_Q(id->tag_value));
                return 0;
        }
        case ACCESS_SNAPSHOT: {
                snapshot *sn = name ? manager_find_snapshot(m, name) : NULL;
                if (!sn || !tags_carry(cJSON_GetObjectItemCaseSensitive(sn->config, "tags"), id))
                        return refuse(req, id, ret_err, "id: no snapshot '%s' carrying tag %s=%s",
                                      TEXT_Q(name ? name : "?"), TEXT_Q(id->tag_key), TEXT_Q(id->tag_value));
                return 0;
        }
        case ACCESS_CREATE: {
                /* getOrCreate of an existing sandbox is a get: it must be ours. */
                if (name && manager_find_sandbox(m, name) && !sandbox_visible(m, name, id))
                        return refuse(req, id, ret_err, "name: sandbox '%s' exists and does not carry tag %s=%s",
                                      TEXT_Q(name), TEXT_Q(id->tag_key), TEXT_Q(id->tag_value));
                int r = check_source(req, m, id, ret_err);
                return r < 0 ? r : force_tag(req, id, req->params, "tags", "tags", ret_err);
        }
        case ACCESS_LIST:
                return force_tag(req, id, req->params, "tags", "tags", ret_err);
        case ACCESS_RUNTIMES:
                req->result_filter = filter_runtimes;
                req->result_filter_userdata = (void *) id;
                return 0;
        case ACCESS_SNAPSHOTS:
                req->result_filter = filter_snapshots;
                req->result_filter_userdata = (void *) id;
                return 0;
        }
        return refuse(req, id, ret_err, "not allowed");
}

static int authorize(rpc_request *req, void *userdata, sb_error **ret_err) {
        manager *m = userdata;
        const remote_identity *id = rpc_conn_identity(req->conn);
        if (!id)
                return 0;  /* the Unix socket: its mode, group and peer checks (rpc.c) */
        if (id->role == REMOTE_ROLE_ADMIN)
                return 0;
        if (!cJSON_IsObject(req->params))
                return refuse(req, id, ret_err, "params must be an object");
        for (size_t i = 0; i < ELEMENTSOF(method_access); i++)
                if (streq(method_access[i].method, req->method))
                        return authorize_tag(req, m, id, method_access[i].access, method_access[i].field, ret_err);
        return refuse(req, id, ret_err, "%s is not open to tag roles", TEXT_Q(req->method));
}

bool remote_conn_is_tag_role(const rpc_conn *c) {
        const remote_identity *id = c ? rpc_conn_identity(c) : NULL;
        return id && id->role == REMOTE_ROLE_TAG;
}

#define SOURCE_GUARD_TEXT "not a public address; remote clients fetch sources from public addresses only"

const char *remote_source_guard(const struct sockaddr *sa) {
        if (!sa)
                return SOURCE_GUARD_TEXT;
        pol_addr a = {.family = sa->sa_family};
        if (sa->sa_family == AF_INET)
                memcpy(a.bytes, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        else if (sa->sa_family == AF_INET6)
                memcpy(a.bytes, &((const struct sockaddr_in6 *) sa)->sin6_addr, 16);
        else
                return SOURCE_GUARD_TEXT;
        const pol_range *row = pol_addr_classify(&a);
        if (row && row->kind != POL_RANGE_DOCUMENTATION)
                return SOURCE_GUARD_TEXT;
        /* The kernel's view, as the egress proxy asks it before each dial
         * (policy/proxy.c): an address of this host (whenever it was added)
         * is RTN_LOCAL; a failed ask fails closed. */
        if (core_route_is_unicast(a.family, a.bytes, NULL) != 1)
                return SOURCE_GUARD_TEXT;
        return NULL;
}
