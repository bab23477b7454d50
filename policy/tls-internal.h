/* Helpers shared by policy/tls.c and policy/http.c (not part of the
 * proxy's public interface). */
#pragma once

#include <stddef.h>

struct ssl_st;
struct ssl_ctx_st;

/* Applies timeout_ms as SO_RCVTIMEO and SO_SNDTIMEO on fd (no-op when
 * timeout_ms <= 0). 0 or negative errno. */
int pol_proxy_set_timeouts(int fd, int timeout_ms);

/* Runs a verified TLS client handshake on the connected socket fd for
 * `host` (a normalised name: SNI plus name check; an address text: IP
 * check, no SNI). On success stores the SSL in *ret_ssl (caller frees).
 * On failure fills `why` with a sentence for the 502 page and returns
 * -EPROTO (verification or protocol) or -ETIMEDOUT. */
int pol_proxy_upstream_tls(struct ssl_ctx_st *ctx, int fd, const char *host, struct ssl_st **ret_ssl,
                           char *why, size_t why_size);
