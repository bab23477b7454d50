/* The egress proxy of sandbox-netd (DESIGN §5.1 rule 7, §5.2): the types
 * its two halves share.
 *
 *  - policy/proxy.c, the front: accepts connections redirected by nftables
 *    (TCP 80/443 of a custom-policy session) or sent to it as an explicit
 *    proxy (HTTP_PROXY / HTTPS_PROXY: CONNECT and absolute-form requests);
 *    finds the host from the CONNECT target, the TLS SNI (peeked, never
 *    consumed) and the HTTP Host / absolute URI; requires them to agree;
 *    judges the host with the policy; resolves it itself and dials only the
 *    addresses it resolved and judged; splices TLS of domains without rules.
 *  - policy/http.c, the HTTP layer: HTTP/1.1 framing (a packaged parser),
 *    per-request Host checks, the rules (transform headers, forwardURL),
 *    hygiene, TLS termination with the session CA, upstream TLS verified
 *    against the host's roots, and the legible 403 page (also inside TLS,
 *    for a name refused on 443: pol_tls_deny()).
 *
 * Both run inside sandbox-netd after it dropped privileges: nothing here
 * needs root, and every read and write is bounded by a timeout. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include "libcore/error.h"
#include "policy/match.h"
#include "policy/policy.h"

/* The proxy's TCP port on each session's gateway address. nftables
 * redirects TCP 80/443 there, and HTTP_PROXY points there. */
#define POL_PROXY_PORT 3128

/* Most addresses one resolution yields that the proxy will try. */
#define POL_PROXY_MAX_ADDRS 16

struct ssl_st;
struct ssl_ctx_st;

/* ---- the per-session CA (policy/http.c) ------------------------------------ */

typedef struct pol_proxy_ca pol_proxy_ca;

/* Generates a new CA for one session: an EC P-256 key and a self-signed
 * certificate (CA:TRUE, pathlen 0, keyCertSign, valid from now - 1 h for
 * 30 days, subject CN "sandboxd session CA <label>"). Writes the
 * certificate (PEM) to cert_path mode 0644 and the key (PEM, unencrypted)
 * to key_path mode 0600, both atomically. Returns 0 or a negative errno
 * with *ret_err naming the step. Used by sandboxd at session start. */
int pol_proxy_ca_generate(const char *cert_path, const char *key_path, const char *label, sb_error **ret_err);

/* Loads a CA written by pol_proxy_ca_generate(). The returned CA mints
 * leaf certificates on demand and caches them per host; it is thread-safe.
 * The caller frees it with pol_proxy_ca_free(). 0 or negative errno. */
int pol_proxy_ca_load(const char *cert_path, const char *key_path, pol_proxy_ca **ret, sb_error **ret_err);

/* Frees a CA and its cached leaves; the key is wiped (accepts NULL). */
void pol_proxy_ca_free(pol_proxy_ca *ca);

struct x509_st;
struct evp_pkey_st;

/* The leaf certificate for `host` (a normalised name, or an address text:
 * SAN DNS:<host> or IP:<addr>), minted on first use and cached per host
 * (bounded, least recently used evicted, re-minted after a day; valid from
 * 1 h back to 7 days ahead). Stores new references in *ret_cert and
 * *ret_key; the caller drops them with X509_free()/EVP_PKEY_free().
 * Thread-safe. 0, -EINVAL or -ENOMEM. */
int pol_proxy_ca_leaf(pol_proxy_ca *ca, const char *host, struct x509_st **ret_cert,
                      struct evp_pkey_st **ret_key);

/* The SSL_CTX for upstream connections: TLS 1.2+, peer verification always
 * on against the system roots plus, when extra_ca_file is not NULL, the
 * certificates in that PEM file (daemon.json "proxy.upstreamCA"). There is
 * no way to turn verification off. The system bundle ($SSL_CERT_FILE, else
 * OpenSSL's default file) is opened here, before netd drops its
 * privileges, and parsed at the first pol_proxy_upstream_tls() on this
 * context (it is most of a netd's start-up otherwise, and most policies
 * never need it). The caller frees it with SSL_CTX_free(). 0 or negative
 * errno. */
int pol_proxy_upstream_ctx_new(const char *extra_ca_file, struct ssl_ctx_st **ret, sb_error **ret_err);

/* ---- what the front hands the HTTP layer ------------------------------------ */

/* A denial or a notable decision, reported by either half. Strings are
 * borrowed for the duration of the callback. Never carries a header value
 * of a transform (they are credentials). */
typedef struct pol_proxy_event {
        bool allow;
        const char *host;    /* normalised host, or the raw text when it did not normalise */
        uint16_t port;
        const char *reason;  /* "not-allowed", "sni-mismatch", "host-mismatch", "missing-sni",
                                "bad-request", "framing", "upstream-tls", "upstream-unreachable",
                                "upstream-timeout", "transform-needs-tls", "forward-denied" */
        const pol_verdict *verdict; /* the policy verdict, when one was made; else NULL */
        const char *message; /* one legible sentence for the event stream */
} pol_proxy_event;

typedef void (*pol_proxy_event_fn)(const pol_proxy_event *ev, void *userdata);

/* Everything a connection needs from its netd: read-only after startup. */
typedef struct pol_proxy_env {
        const pol_policy *policy;
        const pol_cidr *never;          /* never reachable: host addresses, other sandboxes */
        size_t n_never;
        struct sockaddr_storage resolver; /* the upstream DNS resolver */
        socklen_t resolver_len;
        struct ssl_ctx_st *upstream_tls; /* pol_proxy_upstream_ctx_new() */
        pol_proxy_ca *ca;               /* NULL: no termination; hosts with rules are refused */
        bool deny_in_tls;               /* the sandbox trusts ca: a name refused on port 443 gets its
                                           403 inside TLS (pol_tls_deny()), not before it */
        const char *policy_name;        /* shown in 403 pages and events, e.g. the sandbox id */
        int io_timeout_ms;              /* each read/write/connect */
        pol_proxy_event_fn event;
        void *event_userdata;
} pol_proxy_env;

/* One side of a connection: a socket, with TLS on top when ssl is set. */
typedef struct pol_stream {
        int fd;
        struct ssl_st *ssl;
} pol_stream;

/* The destination the front judged allowed. addrs were resolved by the
 * proxy itself and each passed pol_check_resolved()/pol_check_address(). */
typedef struct pol_proxy_live pol_proxy_live;

typedef struct pol_proxy_target {
        char host[POL_NAME_MAX + 1]; /* normalised name, or address text when is_addr */
        bool is_addr;
        uint16_t port;               /* upstream port */
        const pol_domain *domain;    /* the allow entry whose rules apply on port, or NULL:
                                        a pattern without ":port" only on 80 and 443 */
        pol_addr addrs[POL_PROXY_MAX_ADDRS];
        size_t n_addrs;
        pol_verdict verdict;
        pol_proxy_live *live;        /* the connection this target serves (pol_proxy_live_update()
                                        cuts it); NULL: none */
} pol_proxy_target;

/* Makes env the policy in force for every proxied connection
 * (DESIGN §5.1 rule 9, docs/POLICY.md "Live update"). Every live
 * connection of pol_proxy_serve() is judged again against env: one whose
 * target (host, port, addresses, how it was admitted) env no longer
 * allows, or whose rule set (the allow entry's rules) differs, or that had
 * not been decided yet, or that was decided under another env, is cut
 * (both sockets shut down, so no byte of it moves any more) before this
 * returns; so is every connection that registers later under an older
 * env. Dials of a cut connection are refused (-ECONNABORTED). Judges
 * from memory only (no DNS), bounded by the number of connections. env
 * must stay valid until the next call. Thread-safe. */
void pol_proxy_live_update(const pol_proxy_env *env);

/* Forgets the upstream socket fd of live (from pol_proxy_dial()) before
 * its owner closes it, so a later cut cannot reach a reused descriptor.
 * Accepts NULL live and a negative fd. */
void pol_proxy_live_forget(pol_proxy_live *live, int fd);

/* Serves HTTP/1.1 requests arriving on `client` for target `t` until either
 * side closes or a request is refused. `pre`/`n_pre` are bytes the front
 * already read from client (the start of the first request). Each request's
 * Host (and absolute URI, when given) must normalise to t->host, else 403.
 * The first rule of t->domain that matches applies (transform: add or
 * overwrite headers; forwardURL: send it there over TLS, adding the
 * x-sandbox-forwarded-* headers); no match passes unmodified. Upstream is
 * TLS when upstream_tls, else plaintext; a transform never applies over a
 * plaintext upstream (the request gets a 403 that says to use https).
 * Returns 0 when the connection ended normally, a negative errno otherwise
 * (the client has been answered where it could be). */
int pol_http_serve(const pol_proxy_env *env, pol_stream *client, const pol_proxy_target *t, bool upstream_tls,
                   const uint8_t *pre, size_t n_pre);

/* Terminates TLS on client_fd (whose ClientHello is still unread in the
 * socket) with a leaf for t->host minted by env->ca, ALPN offering only
 * http/1.1, then runs pol_http_serve() with a verified TLS upstream.
 * 0 or negative errno. */
int pol_tls_terminate(const pol_proxy_env *env, int client_fd, const pol_proxy_target *t);

/* The refusal of a name on port 443, made legible to HTTPS clients
 * (docs/POLICY.md, "Refusals an HTTPS client can read"): completes the
 * TLS handshake on client_fd (whose ClientHello is still unread in the
 * socket) with a leaf for t->host (a name, never an address) minted by
 * env->ca, ALPN offering only http/1.1, then answers the request that
 * arrives with pol_http_refuse() and closes TLS. Nothing is resolved or
 * dialled. A client whose SNI names another host, or that does not trust
 * env->ca, fails the handshake. The caller has already reported the
 * denial. 0 when the 403 was written; -EINVAL, -ENOMEM, -ECONNABORTED
 * (handshake failed), or the error of pol_http_refuse(). */
int pol_tls_deny(const pol_proxy_env *env, int client_fd, const pol_proxy_target *t, const char *why);

/* Answers a connection whose host the policy refused (t->host with its
 * verdict t->verdict): reads one request head (at most 64 KiB, within
 * env->io_timeout_ms in all) and answers it with pol_http_write_403()
 * whatever it asks (a malformed head too), with connection: close. Reports
 * no event (the caller did, once per connection). 0 when answered;
 * -ETIMEDOUT or -ECONNRESET when no request came (nothing is written);
 * -ENOMEM. */
int pol_http_refuse(const pol_proxy_env *env, pol_stream *client, const pol_proxy_target *t, const char *why);

/* Parses the head of one HTTP/1.x request in buf (n bytes, may hold more
 * than the head). On success fills method (NUL-terminated, at most 31
 * chars), the request target and the Host header value (malloc'd, caller
 * frees; *ret_host NULL when absent) and *ret_head_len (bytes up to and
 * including the blank line). -EAGAIN when the head is not complete yet,
 * -E2BIG past 64 KiB, -EBADMSG for a malformed head or ambiguous framing
 * (RFC 9112 §6.3: two Content-Length, Content-Length with chunked). */
int pol_http_parse_head(const uint8_t *buf, size_t n, char method[32], char **ret_target, char **ret_host,
                        size_t *ret_head_len);

/* Writes the legible refusal: "HTTP/1.1 403 Forbidden" with
 * "x-sandbox-policy: <policy_name>; host=<host>; layer=<layer>",
 * "connection: close", and a text/plain body that names the host, the
 * policy and the rule, and says the request is refused by policy and must
 * not be retried. `why` is a sentence for the body. Best effort; 0 or
 * negative errno. */
int pol_http_write_403(pol_stream *client, const char *policy_name, const char *host, const pol_verdict *v,
                       const char *why);

/* Writes a minimal error response (400, 502, 504) with connection: close. */
int pol_http_write_error(pol_stream *client, int status, const char *why);

/* Reads from / writes to a stream with env-style timeouts applied by the
 * caller (socket SO_RCVTIMEO/SO_SNDTIMEO). read: bytes (0 at EOF) or
 * negative errno. write_all: 0 or negative errno. */
ssize_t pol_stream_read(pol_stream *s, void *buf, size_t n);
int pol_stream_write_all(pol_stream *s, const void *buf, size_t n);

/* ---- the front (policy/proxy.c) ----------------------------------------------- */

/* Serves one accepted connection to completion (blocking; netd runs each
 * in its own thread). Takes ownership of client_fd. `orig` is the
 * connection's original destination (SO_ORIGINAL_DST) when nftables
 * redirected it, or NULL when the client addressed the proxy directly. */
void pol_proxy_serve(const pol_proxy_env *env, int client_fd, const struct sockaddr_storage *orig);

/* Connects to t->addrs in order on t->port, each with a connect timeout of
 * timeout_ms; the first that answers wins. The socket is blocking, with
 * timeout_ms as SO_RCVTIMEO/SO_SNDTIMEO, and TCP_NODELAY. Before each
 * connect the kernel is asked how it routes the address
 * (core_route_is_unicast, RTM_GETROUTE): only RTN_UNICAST is dialled, so an
 * address of the host itself (local, broadcast, multicast, no route; also
 * one added after the policy was judged) is never reached whatever the
 * policy said; such an address fails with -EACCES. Returns the fd
 * (O_CLOEXEC, caller closes) or the last negative errno (-EHOSTUNREACH
 * when there is no address). */
#define POL_PROXY_LOCAL_REFUSED "the address is the host itself, which no sandbox may reach"
int pol_proxy_dial(const pol_proxy_target *t, int timeout_ms);

/* Resolves `name` through env->resolver (A records, then AAAA) and judges the answer with pol_check_resolved() on
 * `port`. On allow fills t->addrs/n_addrs and t->verdict and returns 0;
 * -EACCES when denied (t->verdict says why), -ENOENT for NXDOMAIN or no
 * address, -ETIMEDOUT / -EIO when the resolver failed. */
int pol_proxy_resolve(const pol_proxy_env *env, const char *name, uint16_t port, pol_proxy_target *t);
