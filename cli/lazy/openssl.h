/* OpenSSL for sandboxctl, loaded on first use (dlopen) instead of at every
 * start: libssl and libcrypto cost about 0.75 ms of loading and relocation
 * per process on this class of machine, which every local `sandboxctl exec`
 * paid for the TLS of `--host` and `certs init` it did not use.
 *
 * Include this after the OpenSSL headers, in the files that call OpenSSL
 * (cli/client.c, cli/certs.c) and nowhere else: each name below becomes a
 * call through a table filled by dlsym(3) from libssl's handle (which also
 * reaches libcrypto, its dependency). OpenSSL's own function-like macros
 * (SSL_CTX_set_min_proto_version, SSL_set_tlsext_host_name, ...) expand to
 * these names and so go through the table too. The list is the OpenSSL
 * functions the CLI calls (nm -u build/sandboxctl before this file); a
 * function missing from it is a link error, never a silent eager load. */
#pragma once
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#define LAZY_SSL_FUNCS(X)                                                                                    \
        X(BN_bin2bn) X(BN_free) X(BN_to_ASN1_INTEGER) X(ERR_clear_error) X(ERR_error_string_n)               \
        X(ERR_peek_last_error) X(EVP_PKEY_Q_keygen) X(EVP_PKEY_free) X(EVP_sha256) X(PEM_write_PrivateKey)   \
        X(PEM_write_X509) X(RAND_bytes) X(SSL_CTX_check_private_key) X(SSL_CTX_ctrl) X(SSL_CTX_free)         \
        X(SSL_CTX_load_verify_locations) X(SSL_CTX_new) X(SSL_CTX_set_verify) X(SSL_CTX_use_PrivateKey_file) \
        X(SSL_CTX_use_certificate_chain_file) X(SSL_connect) X(SSL_ctrl) X(SSL_free) X(SSL_get0_param)       \
        X(SSL_get_error) X(SSL_get_verify_result) X(SSL_new) X(SSL_pending) X(SSL_read_ex) X(SSL_set1_host)  \
        X(SSL_set_fd) X(SSL_shutdown) X(SSL_write_ex) X(TLS_client_method) X(X509V3_EXT_conf_nid)            \
        X(X509V3_set_ctx) X(X509_EXTENSION_free) X(X509_NAME_add_entry_by_txt)                               \
        X(X509_VERIFY_PARAM_set1_ip_asc) X(X509_add_ext) X(X509_free) X(X509_get_serialNumber)               \
        X(X509_get_subject_name) X(X509_getm_notAfter) X(X509_getm_notBefore) X(X509_gmtime_adj) X(X509_new) \
        X(X509_set_issuer_name) X(X509_set_pubkey) X(X509_set_version) X(X509_sign)                          \
        X(X509_verify_cert_error_string)

/* One pointer per function, with the prototype of its OpenSSL header. */
struct lazy_ssl {
#define LAZY_SSL_MEMBER(name) __typeof__(&name) name;
        LAZY_SSL_FUNCS(LAZY_SSL_MEMBER)
#undef LAZY_SSL_MEMBER
};

/* The table, loaded by the first call (thread-safe, pthread_once); later
 * calls return the same table. libssl.so.3 or any function of the list
 * missing is fatal: a message naming the library and the function on
 * stderr, exit status 1 (fail closed: no TLS, no certificate without the
 * real library; sandboxctl has no fallback to offer). */
const struct lazy_ssl *lazy_ssl(void);

/* cli/lazy/openssl.c, the loader, needs OpenSSL's own names. */
#ifndef LAZY_SSL_NO_REDIRECT
#define BN_bin2bn (lazy_ssl()->BN_bin2bn)
#define BN_free (lazy_ssl()->BN_free)
#define BN_to_ASN1_INTEGER (lazy_ssl()->BN_to_ASN1_INTEGER)
#define ERR_clear_error (lazy_ssl()->ERR_clear_error)
#define ERR_error_string_n (lazy_ssl()->ERR_error_string_n)
#define ERR_peek_last_error (lazy_ssl()->ERR_peek_last_error)
#define EVP_PKEY_Q_keygen (lazy_ssl()->EVP_PKEY_Q_keygen)
#define EVP_PKEY_free (lazy_ssl()->EVP_PKEY_free)
#define EVP_sha256 (lazy_ssl()->EVP_sha256)
#define PEM_write_PrivateKey (lazy_ssl()->PEM_write_PrivateKey)
#define PEM_write_X509 (lazy_ssl()->PEM_write_X509)
#define RAND_bytes (lazy_ssl()->RAND_bytes)
#define SSL_CTX_check_private_key (lazy_ssl()->SSL_CTX_check_private_key)
#define SSL_CTX_ctrl (lazy_ssl()->SSL_CTX_ctrl)
#define SSL_CTX_free (lazy_ssl()->SSL_CTX_free)
#define SSL_CTX_load_verify_locations (lazy_ssl()->SSL_CTX_load_verify_locations)
#define SSL_CTX_new (lazy_ssl()->SSL_CTX_new)
#define SSL_CTX_set_verify (lazy_ssl()->SSL_CTX_set_verify)
#define SSL_CTX_use_PrivateKey_file (lazy_ssl()->SSL_CTX_use_PrivateKey_file)
#define SSL_CTX_use_certificate_chain_file (lazy_ssl()->SSL_CTX_use_certificate_chain_file)
#define SSL_connect (lazy_ssl()->SSL_connect)
#define SSL_ctrl (lazy_ssl()->SSL_ctrl)
#define SSL_free (lazy_ssl()->SSL_free)
#define SSL_get0_param (lazy_ssl()->SSL_get0_param)
#define SSL_get_error (lazy_ssl()->SSL_get_error)
#define SSL_get_verify_result (lazy_ssl()->SSL_get_verify_result)
#define SSL_new (lazy_ssl()->SSL_new)
#define SSL_pending (lazy_ssl()->SSL_pending)
#define SSL_read_ex (lazy_ssl()->SSL_read_ex)
#define SSL_set1_host (lazy_ssl()->SSL_set1_host)
#define SSL_set_fd (lazy_ssl()->SSL_set_fd)
#define SSL_shutdown (lazy_ssl()->SSL_shutdown)
#define SSL_write_ex (lazy_ssl()->SSL_write_ex)
#define TLS_client_method (lazy_ssl()->TLS_client_method)
#define X509V3_EXT_conf_nid (lazy_ssl()->X509V3_EXT_conf_nid)
#define X509V3_set_ctx (lazy_ssl()->X509V3_set_ctx)
#define X509_EXTENSION_free (lazy_ssl()->X509_EXTENSION_free)
#define X509_NAME_add_entry_by_txt (lazy_ssl()->X509_NAME_add_entry_by_txt)
#define X509_VERIFY_PARAM_set1_ip_asc (lazy_ssl()->X509_VERIFY_PARAM_set1_ip_asc)
#define X509_add_ext (lazy_ssl()->X509_add_ext)
#define X509_free (lazy_ssl()->X509_free)
#define X509_get_serialNumber (lazy_ssl()->X509_get_serialNumber)
#define X509_get_subject_name (lazy_ssl()->X509_get_subject_name)
#define X509_getm_notAfter (lazy_ssl()->X509_getm_notAfter)
#define X509_getm_notBefore (lazy_ssl()->X509_getm_notBefore)
#define X509_gmtime_adj (lazy_ssl()->X509_gmtime_adj)
#define X509_new (lazy_ssl()->X509_new)
#define X509_set_issuer_name (lazy_ssl()->X509_set_issuer_name)
#define X509_set_pubkey (lazy_ssl()->X509_set_pubkey)
#define X509_set_version (lazy_ssl()->X509_set_version)
#define X509_sign (lazy_ssl()->X509_sign)
#define X509_verify_cert_error_string (lazy_ssl()->X509_verify_cert_error_string)
#endif
