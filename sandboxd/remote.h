/* Remote clients (docs/SECURITY.md "Remote clients", sandboxd(8)): the TCP
 * listeners of daemon.json "listen", serving the JSON-RPC API over TLS 1.3
 * with mandatory client certificates; the role a client certificate's
 * subject names; and the authorization of every request of a TLS
 * connection before its method runs.
 *
 * Roles come from the subject of a certificate that chains to tlsClientCA,
 * as Kubernetes reads users and groups from client certificates: CN names
 * the client (for logs), O names the role:
 *   O=admin           every method, as root on the Unix socket;
 *   O=tenant:NAME     the tenant NAME (tenant.h): only what it owns;
 *   O=tag:KEY=VALUE   the older form, read as the tenant named "tag:KEY=VALUE"
 *                     (ownership, never the tag, decides what it sees).
 * The subject must hold each attribute as its own RDN (no multi-valued
 * RDNs), exactly one CN and one O, as UTF8String or PrintableString
 * without NUL or control characters; anything else is refused. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "libcore/error.h"
#include "sandboxd/config.h"
#include "sandboxd/manager.h"
#include "sandboxd/rpc.h"

typedef enum remote_role_kind {
        REMOTE_ROLE_ADMIN = 1,
        REMOTE_ROLE_TAG,
        REMOTE_ROLE_TENANT,
} remote_role_kind;

/* Who a TLS connection is. Owned by its connection (rpc_conn_identity). */
typedef struct remote_identity {
        remote_role_kind role;
        char *name;        /* the subject's CN */
        char *tag_key;     /* REMOTE_ROLE_TAG: the tag the role is scoped to */
        char *tag_value;
        char *subject;     /* the whole subject, RFC 2253, escaped to printable ASCII (for logs) */
        char *role_text;   /* "admin", "tenant:NAME" or "tag:KEY=VALUE" */
        char *tenant;      /* the tenant (tenant.h): NAME or "tag:KEY=VALUE"; NULL for admin */
} remote_identity;

void remote_identity_free(remote_identity *id);

/* True when `s` is a tenant:NAME's NAME: 1..64 of A-Z, a-z, 0-9, '.', '_'
 * and '-', starting with a letter or digit (no ':', so it is never a
 * "uid:N" or "tag:K=V" tenant). Also the rule of session.actAs. Pure. */
bool remote_tenant_name_ok(const char *s);

struct X509_name_st;
/* Maps a certificate subject to an identity under the rules above.
 * Returns 0 with *ret (caller frees with remote_identity_free), or
 * -EACCES with *ret_reason (a static string saying which rule failed),
 * -ENOMEM. Pure: reads nothing but `name`. */
int remote_identity_from_name(const struct X509_name_st *name, remote_identity **ret, const char **ret_reason);

/* Same from a DER-encoded Name (RFC 5280 §4.1.2.4); -EINVAL when the bytes
 * are not one. For the fuzz target and the unit tests. */
int remote_identity_from_der(const uint8_t *der, size_t len, remote_identity **ret, const char **ret_reason);

/* The most addresses daemon.json "listen" may name (config.c's range). */
#define RPC_LISTEN_MAX 8

typedef struct remote_listeners remote_listeners;

/* Readies every daemon.json "listen" address: loads the certificate, key
 * and client CA into a TLS 1.3-only context and binds each address, so a
 * bad file or a taken port stops the start before the Unix socket exists.
 * No address: 0 with *ret NULL. Returns 0 with *ret (remote_attach takes
 * it; remote_listeners_free otherwise) or a negative errno with *ret_err
 * naming the key. */
int remote_prepare(const daemon_config *cfg, remote_listeners **ret, sb_error **ret_err);

/* Serves the prepared listeners on `server` and installs the accept hook
 * (the identity and role of each TLS connection; the check of each
 * request is tenant_attach's, for every connection). Takes `l` (NULL: nothing to do). Returns 0 or a
 * negative errno with *ret_err. */
int remote_attach(remote_listeners *l, manager *m, const daemon_config *cfg, rpc_server *server, sb_error **ret_err);
void remote_listeners_free(remote_listeners *l);

/* True when the connection is a TLS client that is not admin (the clients
 * whose sources are fetched under remote_source_guard). */
bool remote_conn_is_tenant(const rpc_conn *c);

/* The address guard (libcore/source.h, core_source_set_address_guard) for
 * sources a remote tenant supplied: refuses every row of the forbidden range
 * table (policy/match.c: loopback, private, CGNAT, link-local, benchmark,
 * multicast, reserved; the documentation ranges of RFC 5737 and RFC 3849,
 * which no network is assigned, excepted) and every address the kernel
 * does not route as RTN_UNICAST (libcore/route.h: any of the host's own
 * addresses, broadcast, unroutable). Returns one static text for every
 * refusal (also for sa NULL), or NULL when the address may be dialled. */
struct sockaddr;
const char *remote_source_guard(const struct sockaddr *sa);
