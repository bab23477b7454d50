/* TLS for the egress proxy (DESIGN §5.2): the per-session CA (generation,
 * loading, leaf certificates minted per host and cached), the upstream
 * SSL_CTX (always verified), the server side that terminates a sandbox's
 * TLS with a minted leaf, and the stream read/write helpers both halves of
 * the proxy use. The HTTP that runs on top lives in policy/http.c.
 *
 * Runs inside sandbox-netd without privilege; the CA key is the one secret
 * here: it never leaves this process and is wiped when the CA is freed. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include "libcore/util.h"
#include "policy/proxy.h"
#include "policy/tls-internal.h"

/* Cached leaves per CA. A session talks to few hosts with rules (those
 * are terminated) and names few refused hosts on 443 (those get their 403
 * inside TLS, pol_tls_deny), so a small table with LRU eviction is enough
 * and bounds what a sandbox can make us hold: a flood of new names costs
 * one signature each, never a key. */
#define LEAF_CACHE 128
/* A cached leaf is re-minted after this long, well before its 7-day end. */
#define LEAF_REFRESH_S (24 * 3600)

typedef struct leaf {
        char host[POL_NAME_MAX + 1];
        X509 *cert;
        time_t minted;
        uint64_t used;
} leaf;

struct pol_proxy_ca {
        X509 *cert;
        EVP_PKEY *key;
        EVP_PKEY *leaf_key; /* one key for every leaf of this CA */
        SSL_CTX *server;    /* the terminating side, shared by connections */
        pthread_mutex_t lock;
        leaf cache[LEAF_CACHE];
        uint64_t clock;
};

/* Per-connection data for the servername callback. */
typedef struct accept_ctx {
        pol_proxy_ca *ca;
        const pol_proxy_target *t;
        bool need_sni; /* a ClientHello without SNI fails (pol_tls_deny) */
} accept_ctx;

static int ssl_fail(sb_error **ret_err, int r, const char *step) {
        unsigned long e = ERR_get_error();
        char buf[256] = "unknown error";
        if (e)
                ERR_error_string_n(e, buf, sizeof(buf));
        ERR_clear_error();
        return sb_error_set(ret_err, r, NULL, NULL, "%s: %s", step, buf);
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
        X509V3_CTX ctx;
        X509V3_set_ctx_nodb(&ctx);
        X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
        X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
        if (!ext)
                return -EINVAL;
        int ok = X509_add_ext(cert, ext, -1);
        X509_EXTENSION_free(ext);
        return ok ? 0 : -ENOMEM;
}

/* A random positive 127-bit serial (RFC 5280 §4.1.2.2: unique, at most
 * 20 octets; random so two sessions' leaves never collide). */
static int set_random_serial(X509 *cert) {
        BIGNUM *bn = BN_new();
        int r = -ENOMEM;
        if (bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) &&
            BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)))
                r = 0;
        BN_free(bn);
        return r;
}

static int set_validity(X509 *cert, long back_s, long ahead_s) {
        return X509_gmtime_adj(X509_getm_notBefore(cert), -back_s) &&
                               X509_gmtime_adj(X509_getm_notAfter(cert), ahead_s)
                       ? 0
                       : -ENOMEM;
}

/* A PEM object in a memory BIO, written atomically to path. */
static int write_bio(BIO *b, const char *path, mode_t mode) {
        char *data = NULL;
        long len = BIO_get_mem_data(b, &data);
        if (len <= 0)
                return -EIO;
        return core_write_file_atomic(path, data, (size_t)len, mode);
}

static int ca_build(const char *label, EVP_PKEY *key, X509 **ret) {
        X509 *cert = X509_new();
        char cn[64];
        int r = -ENOMEM;
        snprintf(cn, sizeof(cn), "sandboxd session CA %s", label ? label : "");
        X509_NAME *name = cert ? X509_get_subject_name(cert) : NULL;
        if (!name || !X509_set_version(cert, X509_VERSION_3) || set_random_serial(cert) < 0 ||
            set_validity(cert, 3600, 30L * 24 * 3600) < 0 ||
            !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) ||
            !X509_set_issuer_name(cert, name) || !X509_set_pubkey(cert, key))
                goto fail;
        /* RFC 5280 §4.2.1.9/§4.2.1.3: a CA that may sign leaves only. */
        if ((r = add_ext(cert, cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0")) < 0 ||
            (r = add_ext(cert, cert, NID_key_usage, "critical,keyCertSign,cRLSign")) < 0 ||
            (r = add_ext(cert, cert, NID_subject_key_identifier, "hash")) < 0)
                goto fail;
        if (!X509_sign(cert, key, EVP_sha256())) {
                r = -EIO;
                goto fail;
        }
        *ret = cert;
        return 0;
fail:
        X509_free(cert);
        return r;
}

int pol_proxy_ca_generate(const char *cert_path, const char *key_path, const char *label, sb_error **ret_err) {
        EVP_PKEY *key = EVP_EC_gen("P-256");
        X509 *cert = NULL;
        BIO *kb = NULL, *cb = NULL;
        int r;
        if (!key)
                return ssl_fail(ret_err, -ENOMEM, "generate the session CA key");
        if ((r = ca_build(label, key, &cert)) < 0) {
                ssl_fail(ret_err, r, "build the session CA certificate");
                goto out;
        }
        /* The key's PEM text sits in secure memory, wiped when freed. */
        kb = BIO_new(BIO_s_secmem());
        cb = BIO_new(BIO_s_mem());
        if (!kb || !cb || !PEM_write_bio_PrivateKey(kb, key, NULL, NULL, 0, NULL, NULL) ||
            !PEM_write_bio_X509(cb, cert)) {
                r = ssl_fail(ret_err, -ENOMEM, "encode the session CA");
                goto out;
        }
        /* The key first and 0600: a certificate on disk without its key
         * is harmless, the reverse would be a CA nobody can use. */
        if ((r = write_bio(kb, key_path, 0600)) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", key_path, strerror(-r));
                goto out;
        }
        if ((r = write_bio(cb, cert_path, 0644)) < 0)
                sb_error_set(ret_err, r, NULL, NULL, "write %s: %s", cert_path, strerror(-r));
out:
        BIO_free(kb);
        BIO_free(cb);
        X509_free(cert);
        EVP_PKEY_free(key);
        return r;
}

static int sni_cb(SSL *ssl, int *alert, void *arg);
static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                   unsigned inlen, void *arg);

static int server_ctx_new(pol_proxy_ca *ca, sb_error **ret_err) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (!ctx)
                return ssl_fail(ret_err, -ENOMEM, "create the TLS server context");
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
        /* Close-delimited bodies end with a bare TCP close from many servers. */
        SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_tlsext_servername_callback(ctx, sni_cb);
        SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, NULL);
        ca->server = ctx;
        return 0;
}

int pol_proxy_ca_load(const char *cert_path, const char *key_path, pol_proxy_ca **ret, sb_error **ret_err) {
        pol_proxy_ca *ca = calloc(1, sizeof(*ca));
        BIO *b = NULL;
        int r;
        if (!ca)
                return -ENOMEM;
        pthread_mutex_init(&ca->lock, NULL);
        if (!(b = BIO_new_file(cert_path, "re")) || !(ca->cert = PEM_read_bio_X509(b, NULL, NULL, NULL))) {
                r = ssl_fail(ret_err, -ENOENT, "read the session CA certificate");
                goto fail;
        }
        BIO_free(b);
        if (!(b = BIO_new_file(key_path, "re")) || !(ca->key = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL))) {
                r = ssl_fail(ret_err, -ENOENT, "read the session CA key");
                goto fail;
        }
        if (!X509_check_private_key(ca->cert, ca->key)) {
                r = ssl_fail(ret_err, -EINVAL, "the session CA key does not match its certificate");
                goto fail;
        }
        if (!(ca->leaf_key = EVP_EC_gen("P-256"))) {
                r = ssl_fail(ret_err, -ENOMEM, "generate the leaf key");
                goto fail;
        }
        if ((r = server_ctx_new(ca, ret_err)) < 0)
                goto fail;
        BIO_free(b);
        *ret = ca;
        return 0;
fail:
        BIO_free(b);
        pol_proxy_ca_free(ca);
        return r;
}

void pol_proxy_ca_free(pol_proxy_ca *ca) {
        if (!ca)
                return;
        for (size_t i = 0; i < LEAF_CACHE; i++)
                X509_free(ca->cache[i].cert);
        SSL_CTX_free(ca->server);
        X509_free(ca->cert);
        /* EVP_PKEY_free clears the private key material (OPENSSL_cleanse
         * in the EC key's free). */
        EVP_PKEY_free(ca->key);
        EVP_PKEY_free(ca->leaf_key);
        pthread_mutex_destroy(&ca->lock);
        free(ca);
}

/* Mints a leaf for host (a normalised name or an address text). */
static int leaf_mint(pol_proxy_ca *ca, const char *host, X509 **ret) {
        pol_addr a;
        char san[POL_NAME_MAX + 8], cn[65];
        X509 *cert = X509_new();
        int r = -ENOMEM;
        bool is_addr = pol_addr_parse(host, &a) == 0;
        snprintf(san, sizeof(san), "%s:%s", is_addr ? "IP" : "DNS", host);
        snprintf(cn, sizeof(cn), "%s", host); /* CN is at most 64 chars (RFC 5280 ub-common-name) */
        X509_NAME *name = cert ? X509_get_subject_name(cert) : NULL;
        if (!name || !X509_set_version(cert, X509_VERSION_3) || set_random_serial(cert) < 0 ||
            set_validity(cert, 3600, 7L * 24 * 3600) < 0 ||
            !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0) ||
            !X509_set_issuer_name(cert, X509_get_subject_name(ca->cert)) || !X509_set_pubkey(cert, ca->leaf_key))
                goto fail;
        if ((r = add_ext(cert, ca->cert, NID_basic_constraints, "critical,CA:FALSE")) < 0 ||
            (r = add_ext(cert, ca->cert, NID_key_usage, "critical,digitalSignature")) < 0 ||
            (r = add_ext(cert, ca->cert, NID_ext_key_usage, "serverAuth")) < 0 ||
            (r = add_ext(cert, ca->cert, NID_subject_alt_name, san)) < 0 ||
            (r = add_ext(cert, ca->cert, NID_subject_key_identifier, "hash")) < 0 ||
            (r = add_ext(cert, ca->cert, NID_authority_key_identifier, "keyid:always")) < 0)
                goto fail;
        if (!X509_sign(cert, ca->key, EVP_sha256())) {
                r = -EIO;
                goto fail;
        }
        *ret = cert;
        return 0;
fail:
        X509_free(cert);
        return r;
}

int pol_proxy_ca_leaf(pol_proxy_ca *ca, const char *host, struct x509_st **ret_cert,
                      struct evp_pkey_st **ret_key) {
        time_t now = time(NULL);
        int r = 0;
        if (!ca || !host || !*host || strlen(host) > POL_NAME_MAX)
                return -EINVAL;
        pthread_mutex_lock(&ca->lock);
        leaf *hit = NULL, *slot = &ca->cache[0];
        for (size_t i = 0; i < LEAF_CACHE && !hit; i++) {
                leaf *l = &ca->cache[i];
                if (l->cert && streq(l->host, host))
                        hit = l;
                else if (slot->cert && (!l->cert || l->used < slot->used))
                        slot = l; /* an empty slot, else the least recently used */
        }
        if (hit)
                slot = hit;
        if (!hit || now - hit->minted >= LEAF_REFRESH_S) {
                X509 *cert = NULL;
                if ((r = leaf_mint(ca, host, &cert)) >= 0) {
                        X509_free(slot->cert);
                        slot->cert = cert;
                        slot->minted = now;
                        snprintf(slot->host, sizeof(slot->host), "%s", host);
                }
        }
        if (r >= 0) {
                slot->used = ++ca->clock;
                X509_up_ref(slot->cert);
                EVP_PKEY_up_ref(ca->leaf_key);
                *ret_cert = slot->cert;
                *ret_key = ca->leaf_key;
        }
        pthread_mutex_unlock(&ca->lock);
        return r;
}

/* ---- the terminating side ------------------------------------------------------ */

/* Picks the leaf by SNI. The front already required the SNI to name
 * t->host; it is checked again here so this layer never presents a
 * certificate for a name the policy did not judge. No SNI (an address
 * target): the leaf for t->host. */
static int sni_cb(SSL *ssl, int *alert, void *arg) {
        accept_ctx *ac = SSL_get_app_data(ssl);
        const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        X509 *cert = NULL;
        EVP_PKEY *key = NULL;
        if (!ac)
                return SSL_TLSEXT_ERR_ALERT_FATAL;
        if (sni) {
                pol_host h;
                pol_addr ta;
                const char *why;
                bool same = pol_host_parse(sni, &h, &why) == 0 && h.is_addr == ac->t->is_addr &&
                            (h.is_addr ? pol_addr_parse(ac->t->host, &ta) == 0 && ta.family == h.addr.family &&
                                                 memcmp(ta.bytes, h.addr.bytes, sizeof(ta.bytes)) == 0
                                       : streq(h.name, ac->t->host));
                if (!same) {
                        *alert = SSL_AD_UNRECOGNIZED_NAME;
                        return SSL_TLSEXT_ERR_ALERT_FATAL;
                }
        } else if (ac->need_sni) {
                /* docs/POLICY.md "legible refusals": the SNI must name the
                 * refused host, else no leaf is minted for it. */
                *alert = SSL_AD_UNRECOGNIZED_NAME;
                return SSL_TLSEXT_ERR_ALERT_FATAL;
        }
        if (pol_proxy_ca_leaf(ac->ca, ac->t->host, &cert, &key) < 0) {
                *alert = SSL_AD_INTERNAL_ERROR;
                return SSL_TLSEXT_ERR_ALERT_FATAL;
        }
        int ok = SSL_use_certificate(ssl, cert) && SSL_use_PrivateKey(ssl, key) &&
                 SSL_add1_chain_cert(ssl, ac->ca->cert);
        X509_free(cert);
        EVP_PKEY_free(key);
        return ok ? SSL_TLSEXT_ERR_OK : SSL_TLSEXT_ERR_ALERT_FATAL;
}

/* Only http/1.1: this layer speaks HTTP/1.1 alone. A client that offers
 * only h2 gets no ALPN (NOACK), which per RFC 7301 §3.2 it treats as
 * HTTP/1.1. */
static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                   unsigned inlen, void *arg) {
        static const unsigned char h1[] = "\x08http/1.1";
        unsigned char *sel = NULL;
        if (SSL_select_next_proto(&sel, outlen, h1, sizeof(h1) - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
                return SSL_TLSEXT_ERR_NOACK;
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
}

int pol_proxy_set_timeouts(int fd, int timeout_ms) {
        struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
        if (timeout_ms <= 0)
                return 0;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
                return negative_errno();
        return 0;
}

/* The server half of the handshake on client_fd with a leaf for t->host
 * (sni_cb), ALPN offering only http/1.1 (alpn_cb). *ret_ssl (caller
 * frees) is set on success. -ECONNABORTED when the handshake failed: the
 * client rejected our leaf, named another host, or timed out; nothing
 * legible can be sent outside TLS. */
static int tls_accept(const pol_proxy_env *env, int client_fd, accept_ctx *ac, SSL **ret_ssl) {
        SSL *ssl = SSL_new(env->ca->server);
        int r;
        if (!ssl)
                return -ENOMEM;
        if ((r = pol_proxy_set_timeouts(client_fd, env->io_timeout_ms)) < 0)
                goto fail;
        SSL_set_app_data(ssl, ac);
        if (!SSL_set_fd(ssl, client_fd)) {
                r = -ENOMEM;
                goto fail;
        }
        if (SSL_accept(ssl) != 1) {
                r = -ECONNABORTED;
                goto fail;
        }
        *ret_ssl = ssl;
        return 0;
fail:
        ERR_clear_error();
        SSL_free(ssl);
        return r;
}

int pol_tls_terminate(const pol_proxy_env *env, int client_fd, const pol_proxy_target *t) {
        if (!env || !env->ca || !t || client_fd < 0)
                return -EINVAL;
        accept_ctx ac = { .ca = env->ca, .t = t };
        SSL *ssl = NULL;
        int r = tls_accept(env, client_fd, &ac, &ssl);
        if (r < 0)
                return r;
        pol_stream client = { .fd = client_fd, .ssl = ssl };
        r = pol_http_serve(env, &client, t, true, NULL, 0);
        SSL_shutdown(ssl);
        ERR_clear_error();
        SSL_free(ssl);
        return r;
}

/* Threat: the leaf is a certificate the sandbox trusts, for a name the
 * policy refused. It is minted for t->host only (sni_cb refuses any other
 * SNI), by this session's CA only, and serves a page the proxy writes
 * itself: no byte of the connection goes anywhere. A ClientHello without
 * SNI fails the handshake too (docs/POLICY.md): the refusal is already
 * reported, so the caller reports nothing more. Cost per connection is
 * one handshake with the CA's one leaf key (EC P-256) and, per new name,
 * one signature (the leaf cache, LEAF_CACHE names). */
int pol_tls_deny(const pol_proxy_env *env, int client_fd, const pol_proxy_target *t, const char *why) {
        if (!env || !env->ca || !t || t->is_addr || !t->host[0] || client_fd < 0)
                return -EINVAL;
        accept_ctx ac = { .ca = env->ca, .t = t, .need_sni = true };
        SSL *ssl = NULL;
        int r = tls_accept(env, client_fd, &ac, &ssl);
        if (r < 0)
                return r;
        pol_stream client = { .fd = client_fd, .ssl = ssl };
        r = pol_http_refuse(env, &client, t, why);
        SSL_shutdown(ssl);
        ERR_clear_error();
        SSL_free(ssl);
        return r;
}

/* ---- the upstream side ------------------------------------------------------ */

/* The system trust roots are read at a context's first upstream handshake,
 * not when it is made: parsing the whole bundle (about 140 certificates)
 * took 25-45 ms of every netd's start on these machines, and most
 * policies never make an upstream TLS connection (TLS to an allowed host
 * passes through by SNI). The bundle is opened when the context is made —
 * before netd drops its privileges — and kept open for that read. */
typedef struct upstream_roots {
        pthread_mutex_t lock;
        int fd;      /* the system bundle (X509_get_default_cert_file), or -1 */
        bool loaded; /* its certificates are in the context's store */
} upstream_roots;

static int roots_index = -1;
static pthread_once_t roots_once = PTHREAD_ONCE_INIT;

static void roots_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp) {
        upstream_roots *r = ptr;
        if (!r)
                return;
        if (r->fd >= 0)
                close(r->fd);
        pthread_mutex_destroy(&r->lock);
        free(r);
}

static void roots_index_make(void) {
        roots_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, roots_free);
}

/* Adds every certificate and CRL of the PEM bundle on r->fd to ctx's
 * store, once. 0 or -EIO (nothing usable read: the handshake must fail). */
static int roots_load(SSL_CTX *ctx, upstream_roots *r) {
        int ret = 0;
        pthread_mutex_lock(&r->lock);
        if (!r->loaded) {
                BIO *b = lseek(r->fd, 0, SEEK_SET) == 0 ? BIO_new_fd(r->fd, BIO_NOCLOSE) : NULL;
                STACK_OF(X509_INFO) *infos = b ? PEM_X509_INFO_read_bio(b, NULL, NULL, NULL) : NULL;
                X509_STORE *store = SSL_CTX_get_cert_store(ctx);
                int added = 0;
                for (int i = 0; infos && i < sk_X509_INFO_num(infos); i++) {
                        X509_INFO *xi = sk_X509_INFO_value(infos, i);
                        if (xi->x509 && X509_STORE_add_cert(store, xi->x509))
                                added++;
                        if (xi->crl)
                                (void)X509_STORE_add_crl(store, xi->crl);
                }
                sk_X509_INFO_pop_free(infos, X509_INFO_free);
                BIO_free(b);
                ERR_clear_error();
                if (added > 0)
                        r->loaded = true;
                else
                        ret = -EIO;
        }
        pthread_mutex_unlock(&r->lock);
        return ret;
}

int pol_proxy_upstream_ctx_new(const char *extra_ca_file, struct ssl_ctx_st **ret, sb_error **ret_err) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        if (!ctx)
                return ssl_fail(ret_err, -ENOMEM, "create the upstream TLS context");
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
        SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
        /* Verification is never optional: the injected credentials go only
         * to a peer that proves it is the host the policy names. */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        /* The bundle OpenSSL's default paths name ($SSL_CERT_FILE, else the
         * build's default file), read at the first handshake; the default
         * directory is a lookup by hash at verification time, as before. */
        const char *file = getenv(X509_get_default_cert_file_env());
        if (!file || !*file)
                file = X509_get_default_cert_file();
        const char *dir = getenv(X509_get_default_cert_dir_env());
        if (!dir || !*dir)
                dir = X509_get_default_cert_dir();
        (void)pthread_once(&roots_once, roots_index_make);
        upstream_roots *roots = roots_index >= 0 ? calloc(1, sizeof(*roots)) : NULL;
        if (roots) {
                pthread_mutex_init(&roots->lock, NULL);
                roots->fd = open(file, O_RDONLY | O_CLOEXEC);
                if (roots->fd < 0 || !SSL_CTX_set_ex_data(ctx, roots_index, roots)) {
                        roots_free(NULL, roots, NULL, 0, 0, NULL);
                        roots = NULL;
                }
        }
        /* No bundle to keep (none there, or no memory): the default paths
         * at once, as OpenSSL would take them. */
        if (!roots && !SSL_CTX_set_default_verify_paths(ctx)) {
                SSL_CTX_free(ctx);
                return ssl_fail(ret_err, -EIO, "load the system trust roots");
        }
        if (roots && dir)
                (void)SSL_CTX_load_verify_dir(ctx, dir);
        ERR_clear_error();
        if (extra_ca_file && !SSL_CTX_load_verify_locations(ctx, extra_ca_file, NULL)) {
                SSL_CTX_free(ctx);
                return ssl_fail(ret_err, -ENOENT, "load the extra upstream CA file");
        }
        if (SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x08http/1.1", 9) != 0) {
                SSL_CTX_free(ctx);
                return ssl_fail(ret_err, -ENOMEM, "set ALPN");
        }
        *ret = ctx;
        return 0;
}

int pol_proxy_upstream_tls(struct ssl_ctx_st *ctx, int fd, const char *host, struct ssl_st **ret_ssl,
                           char *why, size_t why_size) {
        upstream_roots *roots = roots_index >= 0 ? SSL_CTX_get_ex_data(ctx, roots_index) : NULL;
        if (roots && roots_load(ctx, roots) < 0) {
                snprintf(why, why_size, "the system trust roots could not be read");
                return -EPROTO;
        }
        SSL *ssl = SSL_new(ctx);
        pol_addr a;
        int ok;
        if (!ssl)
                return -ENOMEM;
        if (pol_addr_parse(host, &a) == 0)
                ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
        else
                ok = SSL_set1_host(ssl, host) && SSL_set_tlsext_host_name(ssl, host);
        if (!ok || !SSL_set_fd(ssl, fd)) {
                SSL_free(ssl);
                return -ENOMEM;
        }
        if (SSL_connect(ssl) != 1) {
                long v = SSL_get_verify_result(ssl);
                int err = errno;
                unsigned long e = ERR_peek_error();
                if (v != X509_V_OK)
                        snprintf(why, why_size, "its certificate did not verify: %s",
                                 X509_verify_cert_error_string(v));
                else if (e)
                        snprintf(why, why_size, "the TLS handshake failed: %s", ERR_reason_error_string(e));
                else
                        snprintf(why, why_size, "the TLS handshake failed: %s", strerror(err ? err : EPROTO));
                ERR_clear_error();
                SSL_free(ssl);
                return v == X509_V_OK && (err == EAGAIN || err == EWOULDBLOCK) ? -ETIMEDOUT : -EPROTO;
        }
        *ret_ssl = ssl;
        return 0;
}

/* ---- streams ----------------------------------------------------------------- */

ssize_t pol_stream_read(pol_stream *s, void *buf, size_t n) {
        if (!s->ssl) {
                for (;;) {
                        ssize_t r = read(s->fd, buf, n);
                        if (r >= 0)
                                return r;
                        if (errno == EINTR)
                                continue;
                        return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : negative_errno();
                }
        }
        size_t got = 0;
        for (;;) {
                errno = 0;
                if (SSL_read_ex(s->ssl, buf, n, &got) == 1)
                        return (ssize_t)got;
                int e = SSL_get_error(s->ssl, 0), err = errno;
                ERR_clear_error();
                if (e == SSL_ERROR_ZERO_RETURN)
                        return 0;
                if (e == SSL_ERROR_SYSCALL && err == EINTR)
                        continue;
                if (e == SSL_ERROR_SYSCALL && (err == EAGAIN || err == EWOULDBLOCK))
                        return -ETIMEDOUT;
                return e == SSL_ERROR_SYSCALL && err ? -err : -EPROTO;
        }
}

int pol_stream_write_all(pol_stream *s, const void *buf, size_t n) {
        const uint8_t *p = buf;
        while (n > 0) {
                size_t done = 0;
                if (s->ssl) {
                        errno = 0;
                        if (SSL_write_ex(s->ssl, p, n, &done) != 1) {
                                int e = SSL_get_error(s->ssl, 0), err = errno;
                                ERR_clear_error();
                                if (e == SSL_ERROR_SYSCALL && err == EINTR)
                                        continue;
                                if (err == EAGAIN || err == EWOULDBLOCK)
                                        return -ETIMEDOUT;
                                return e == SSL_ERROR_SYSCALL && err ? -err : -EPIPE;
                        }
                } else {
                        ssize_t w = send(s->fd, p, n, MSG_NOSIGNAL);
                        if (w < 0) {
                                if (errno == EINTR)
                                        continue;
                                return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : negative_errno();
                        }
                        done = (size_t)w;
                }
                p += done;
                n -= done;
        }
        return 0;
}
