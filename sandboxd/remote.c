/* Remote clients (remote.h): the TLS 1.3 context and listeners and the
 * subject-to-role mapping. What a role may do is tenant.c's, the same for
 * TLS and Unix-socket clients.
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
 *  4. every request of a tenant checked before its method runs (tenant.c).
 * Every refusal is one log line: the peer, the subject when known, why. */
#include <arpa/inet.h>
#include <ctype.h>
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
        free(id->tenant);
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

/* A tenant:NAME's NAME: 1..REMOTE_NAME_MAX of A-Z, a-z, 0-9, '.', '_' and
 * '-', starting with a letter or digit (no ':', so no NAME is ever a
 * "uid:N" or "tag:K=V" tenant, tenant.h). */
bool remote_tenant_name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > REMOTE_NAME_MAX || !isalnum((unsigned char) s[0]))
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char) *s) && *s != '.' && *s != '_' && *s != '-')
                        return false;
        return true;
}

/* "admin", "tenant:NAME", or "tag:KEY=VALUE" with KEY 1..LIMIT_TAG_NAME_BYTES
 * without '=' and VALUE non-empty (the tenant named "tag:KEY=VALUE"). */
static int parse_role(const char *o, remote_identity *id, const char **ret_reason) {
        if (streq(o, "admin")) {
                id->role = REMOTE_ROLE_ADMIN;
                return (id->role_text = strdup("admin")) ? 0 : -ENOMEM;
        }
        if (strncmp(o, "tenant:", 7) == 0) {
                if (!remote_tenant_name_ok(o + 7)) {
                        *ret_reason = "the subject's O is not tenant:NAME with NAME of A-Z, a-z, 0-9, '.', '_', '-'";
                        return -EACCES;
                }
                id->role = REMOTE_ROLE_TENANT;
                id->tenant = strdup(o + 7);
                id->role_text = strdup(o);
                return id->tenant && id->role_text ? 0 : -ENOMEM;
        }
        if (strncmp(o, "tag:", 4) != 0) {
                *ret_reason = "the subject's O names no role (admin, tenant:NAME or tag:KEY=VALUE)";
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
        id->tenant = strdup(o);
        return id->tag_key && id->tag_value && id->role_text && id->tenant ? 0 : -ENOMEM;
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

bool remote_conn_is_tenant(const rpc_conn *c) {
        const remote_identity *id = c ? rpc_conn_identity(c) : NULL;
        return id && id->role != REMOTE_ROLE_ADMIN;
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
