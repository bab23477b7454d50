/* The event stream and the policy dry run: events.subscribe (a bounded
 * table of subscriptions, each a connection plus a sandbox and kind filter),
 * events_emit() fanning `event` notifications out to them, and policy.check,
 * which answers "would this destination be allowed, and by which rule" with
 * the same matcher the enforcement layers use (policy/match.h). Everything
 * here runs on the event loop thread. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-journal.h>
#include "libcore/log.h"
#include "libcore/util.h"
#include "policy/match.h"
#include "policy/policy.h"
#include "sandboxd/events.h"
#include "sandboxd/metrics.h"
#include "sandboxd/internal.h"
#include "sandboxd/remote.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"

/* At most this many subscriptions daemon-wide: each costs a connection
 * reference and a copy of every matching event, so an unbounded number
 * would let one client multiply the daemon's work per event. */
#define EVENTS_MAX_SUBSCRIPTIONS 256
/* At most this many on one capped connection (TLS, or a tenant's on the
 * Unix socket), and capped connections together may hold all but
 * EVENTS_LOCAL_RESERVE of the daemon's: one remote client or tenant cannot
 * take every subscription, nor can they blind a local admin (root-
 * equivalent, docs/SECURITY.md §4: not capped per connection). */
#define EVENTS_MAX_PER_CONN 16
#define EVENTS_LOCAL_RESERVE 64

/* The kinds a subscription may filter on (DESIGN §5.2). A kind emitted that
 * is not listed still reaches subscribers without a kind filter. */
static const char *const known_kinds[] = { EVENT_DENIED, EVENT_SANDBOX, EVENT_NETD_RESTARTED, EVENT_OOM };

typedef struct subscription {
        manager *m;
        rpc_conn *conn;         /* a reference */
        char *sandbox;          /* NULL: every sandbox */
        unsigned kinds;         /* bit i: known_kinds[i]; 0: every kind */
        uint64_t dropped;       /* events not sent while the peer was not reading */
        struct subscription *next;
} subscription;

/* Subscriptions live in this file rather than in the manager: the table is
 * private to the event stream, and each entry records its manager so that
 * several managers in one process (unit tests) never see each other's. */
static subscription *subs;
static size_t n_subs;

static void subscription_free(subscription *s) {
        rpc_conn_unref(s->conn);
        free(s->sandbox);
        free(s);
}

/* Drops the subscriptions of `conn` (NULL: of every connection that is no
 * longer open), so a peer that went away stops costing anything even when
 * the close hook has not run yet. */
static void drop_subscriptions(manager *m, rpc_conn *conn) {
        subscription **p = &subs;
        while (*p) {
                subscription *s = *p;
                bool gone = conn ? s->conn == conn && s->m == m : !rpc_conn_is_open(s->conn);
                if (gone) {
                        *p = s->next;
                        n_subs--;
                        subscription_free(s);
                } else
                        p = &s->next;
        }
}

void events_conn_closed(manager *m, rpc_conn *c) {
        drop_subscriptions(m, c);
}

static int kind_bit(const char *kind) {
        for (size_t i = 0; i < ELEMENTSOF(known_kinds); i++)
                if (streq(known_kinds[i], kind))
                        return (int)i;
        return -1;
}

/* Who owns the sandbox of an event: looked up by name, or given. */
typedef struct event_owner {
        bool given;
        const char *owner;
} event_owner;

static bool subscriber_sees(manager *m, const rpc_conn *c, const char *sb_name, const event_owner *o) {
        if (!o->given)
                return tenant_conn_sees_sandbox(m, c, sb_name);
        tenant t;
        tenant_of_conn(m->cfg, c, &t);
        return sb_name && tenant_owns(&t, o->owner);
}

static bool subscription_matches(const subscription *s, manager *m, const char *kind, const char *sb_name,
                                 const event_owner *o) {
        if (s->m != m || !rpc_conn_is_open(s->conn))
                return false;
        if (s->sandbox && (!sb_name || !streq(s->sandbox, sb_name)))
                return false;
        /* A tenant hears only of its own sandboxes, none of the daemon's. */
        if (!subscriber_sees(m, s->conn, sb_name, o))
                return false;
        if (s->kinds) {
                int bit = kind_bit(kind);
                if (bit < 0 || !(s->kinds & (1u << bit)))
                        return false;
        }
        return true;
}

/* True when an earlier subscription of the same connection already took
 * this event: a connection subscribed twice gets each event once. */
static bool already_sent(const subscription *upto, manager *m, const char *kind, const char *sb_name,
                         const event_owner *o) {
        for (const subscription *s = subs; s != upto; s = s->next)
                if (s->conn == upto->conn && subscription_matches(s, m, kind, sb_name, o))
                        return true;
        return false;
}

/* {time, kind, sandbox, ...fields}. The three envelope keys are set here
 * and never taken from `fields`, so a field cannot disguise an event. */
static cJSON *build_event(const char *kind, const char *sb_name, cJSON *fields) {
        char now[32];
        cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return NULL;
        cJSON_AddStringToObject(ev, "time", core_format_time(core_now_ms(), now, sizeof(now)));
        cJSON_AddStringToObject(ev, "kind", kind);
        if (sb_name)
                cJSON_AddStringToObject(ev, "sandbox", sb_name);
        else
                cJSON_AddNullToObject(ev, "sandbox");
        cJSON *f;
        while (cJSON_IsObject(fields) && (f = fields->child)) {
                cJSON_DetachItemViaPointer(fields, f);
                if (!f->string || streq(f->string, "time") || streq(f->string, "kind") ||
                    streq(f->string, "sandbox") || streq(f->string, "dropped"))
                        cJSON_Delete(f);
                else
                        cJSON_AddItemToObject(ev, f->string, f);
        }
        return ev;
}

/* Is stderr the journal? systemd sets JOURNAL_STREAM=<dev>:<inode> of the
 * stream it connected to stderr (systemd.exec(5)); stderr redirected
 * elsewhere since does not match. Checked once. */
static bool stderr_is_journal(void) {
        static int cached = -1;
        if (cached < 0) {
                const char *e = getenv("JOURNAL_STREAM");
                unsigned long long dev = 0, ino = 0;
                struct stat st;
                cached = e && sscanf(e, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
                         (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
        }
        return cached;
}

/* A lifecycle event (not a denial: a sandbox can cause those as fast as it
 * likes) as a journal entry with SANDBOX= and SANDBOX_EVENT= (and
 * SANDBOX_STATUS= for status changes), so `journalctl -u sandboxd
 * SANDBOX=name` finds one sandbox's history (sd_journal_send(3)); without
 * the journal, an ordinary log line. */
static void journal_event(const char *kind, const char *sb_name, const cJSON *fields) {
        if (!sb_name || streq(kind, EVENT_DENIED))
                return;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(fields, "status");
        const char *status = cJSON_IsString(st) ? st->valuestring : NULL;
        if (!stderr_is_journal()) {
                log_debug("sandbox '%s': %s%s%s", sb_name, kind, status ? " " : "", status ? status : "");
                return;
        }
        if (status)
                (void) sd_journal_send("MESSAGE=sandbox '%s': %s %s", sb_name, kind, status, "PRIORITY=%d", LOG_INFO,
                                       "SYSLOG_IDENTIFIER=sandboxd", "SANDBOX=%s", sb_name, "SANDBOX_EVENT=%s", kind,
                                       "SANDBOX_STATUS=%s", status, NULL);
        else
                (void) sd_journal_send("MESSAGE=sandbox '%s': %s", sb_name, kind, "PRIORITY=%d", LOG_INFO,
                                       "SYSLOG_IDENTIFIER=sandboxd", "SANDBOX=%s", sb_name, "SANDBOX_EVENT=%s", kind,
                                       NULL);
}

static void emit(manager *m, const char *kind, const char *sb_name, const event_owner *o, cJSON *fields) {
        if (kind)
                journal_event(kind, sb_name, fields);
        if (kind && streq(kind, EVENT_DENIED))
                metrics_count_denial(sb_name, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fields, "layer")),
                                     cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fields, "rule")));
        drop_subscriptions(m, NULL);
        if (!subs || !kind) {
                cJSON_Delete(fields);
                return;
        }
        cJSON *ev = build_event(kind, sb_name, fields);
        cJSON_Delete(fields);
        if (!ev)
                return;
        for (subscription *s = subs; s; s = s->next) {
                if (!subscription_matches(s, m, kind, sb_name, o) || already_sent(s, m, kind, sb_name, o))
                        continue;
                /* A subscriber that does not read must not make the daemon
                 * queue without bound (a sandbox can cause denials as fast as
                 * it likes): past the high-water mark events are counted, not
                 * queued, and the next one delivered says how many were lost. */
                if (rpc_conn_queued(s->conn) > RPC_CONN_HIGH_WATER) {
                        s->dropped++;
                        continue;
                }
                cJSON *copy = cJSON_Duplicate(ev, true);
                if (!copy) {
                        s->dropped++;
                        continue;
                }
                if (s->dropped) {
                        cJSON_AddNumberToObject(copy, "dropped", (double)s->dropped);
                        s->dropped = 0;
                }
                rpc_notify(s->conn, "event", copy);
        }
        cJSON_Delete(ev);
}

void events_emit(manager *m, const char *kind, const char *sb_name, cJSON *fields) {
        emit(m, kind, sb_name, &(event_owner) { .given = false }, fields);
}

void events_emit_owned(manager *m, const char *kind, const char *sb_name, const char *owner, cJSON *fields) {
        emit(m, kind, sb_name, &(event_owner) { .given = true, .owner = owner }, fields);
}

/* Reads params.kinds into a bit mask: a non-empty array of known kinds. */
static int parse_kinds(rpc_request *req, unsigned *ret, sb_error **ret_err) {
        cJSON *kinds = NULL, *k;
        int r = rpc_param_array(req, "kinds", false, &kinds, ret_err);
        if (r < 0 || !kinds)
                return r;
        if (!kinds->child)
                return sb_error_set(ret_err, -EINVAL, NULL, "kinds",
                                    "kinds: empty list; leave it out to receive every kind");
        unsigned mask = 0, i = 0;
        cJSON_ArrayForEach(k, kinds) {
                char field[32];
                snprintf(field, sizeof(field), "kinds[%u]", i++);
                int bit = cJSON_IsString(k) ? kind_bit(k->valuestring) : -1;
                if (bit < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, field,
                                            "%s: must be \"" EVENT_DENIED "\", \"" EVENT_SANDBOX "\", \""
                                            EVENT_NETD_RESTARTED "\" or \"" EVENT_OOM "\"", field);
                mask |= 1u << bit;
        }
        *ret = mask;
        return 0;
}

/* A connection held to the caps above: TLS (admin included), or a tenant's. */
static bool capped(manager *m, const rpc_conn *c) {
        if (rpc_conn_identity(c))
                return true;
        tenant t;
        tenant_of_conn(m->cfg, c, &t);
        return !t.admin;
}

static void method_subscribe(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        unsigned kinds = 0;
        if (rpc_param_string(req, "sandbox", false, &name, &err) < 0 || parse_kinds(req, &kinds, &err) < 0)
                return rpc_reply_sb_error(req, err);
        /* The sandbox need not exist yet, so a watcher can start before the
         * sandbox it waits for; only the name's form is checked. */
        if (name && !core_name_is_valid(name))
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "sandbox",
                                       "sandbox: '%s' is not a sandbox name ([a-z0-9][a-z0-9-]{0,62})", TEXT_Q(name));
        drop_subscriptions(m, NULL);
        size_t mine = 0, remote = 0;
        for (subscription *it = subs; it; it = it->next) {
                mine += it->conn == req->conn;
                remote += capped(m, it->conn);
        }
        bool limited = capped(m, req->conn);
        if (limited && mine >= EVENTS_MAX_PER_CONN)
                return rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                       "events.subscribe: this connection already has %d subscriptions, the limit "
                                       "per connection; one subscription without a filter sees every event",
                                       EVENTS_MAX_PER_CONN);
        if (limited && remote >= EVENTS_MAX_SUBSCRIPTIONS - EVENTS_LOCAL_RESERVE)
                return rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                       "events.subscribe: remote clients and tenants already hold %d subscriptions, "
                                       "their limit; "
                                       "close an idle subscriber",
                                       EVENTS_MAX_SUBSCRIPTIONS - EVENTS_LOCAL_RESERVE);
        if (n_subs >= EVENTS_MAX_SUBSCRIPTIONS)
                return rpc_reply_error(req, RPC_APP_ERROR, "limit_exceeded", NULL,
                                       "events.subscribe: the daemon already has %d subscriptions, its limit; "
                                       "close an idle subscriber",
                                       EVENTS_MAX_SUBSCRIPTIONS);
        subscription *s = calloc(1, sizeof(*s));
        if (!s || (name && !(s->sandbox = strdup(name)))) {
                free(s);
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory");
        }
        s->m = m;
        s->conn = rpc_conn_ref(req->conn);
        s->kinds = kinds;
        /* Appended, so events reach subscribers in the order they came. */
        subscription **p = &subs;
        while (*p)
                p = &(*p)->next;
        *p = s;
        n_subs++;
        cJSON *res = cJSON_CreateObject();
        cJSON_AddBoolToObject(res, "subscribed", true);
        rpc_reply(req, res);
}

/* ---- policy.check ------------------------------------------------------- */

/* Schemes with a well-known port (RFC 9110 §4.2, RFC 6455 §3). Others need
 * the port written in the URL. */
static const struct {
        const char *scheme;
        uint16_t port;
} default_ports[] = {
        { "http", 80 },
        { "https", 443 },
        { "ws", 80 },
        { "wss", 443 },
};

/* Reads the port after ':' (empty means the default, as in RFC 3986 §3.2.3). */
static int parse_url_port(const char *s, size_t len, uint16_t *port) {
        unsigned long v = 0;
        if (len == 0)
                return 0;
        if (len > 5)
                return -EINVAL;
        for (size_t i = 0; i < len; i++) {
                if (!isdigit((unsigned char)s[i]))
                        return -EINVAL;
                v = v * 10 + (unsigned long)(s[i] - '0');
        }
        if (v < 1 || v > 65535)
                return -EINVAL;
        *port = (uint16_t)v;
        return 0;
}

int events_parse_url(const char *url, char **ret_host, uint16_t *ret_port, sb_error **ret_err) {
        const char *sep = strstr(url, "://");
        size_t slen = sep ? (size_t)(sep - url) : 0;
        if (!sep || slen == 0 || !isalpha((unsigned char)url[0]) || strspn(url, "abcdefghijklmnopqrstuvwxyz"
                                                                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-") != slen)
                return sb_error_set(ret_err, -EINVAL, NULL, "url",
                                    "url: '%s' is not a URL (scheme://host[:port]/...); give host and port instead", TEXT_Q(url));
        /* The authority ends at the path, query or fragment; '\' too, as
         * browsers read it for http(s) (WHATWG URL). The host follows the
         * last '@', so "https://a.com@b.com/" names b.com, as curl sends it. */
        const char *auth = sep + 3;
        size_t alen = strcspn(auth, "/?#\\");
        const char *at = memrchr(auth, '@', alen);
        if (at) {
                alen -= (size_t)(at + 1 - auth);
                auth = at + 1;
        }
        size_t hlen;
        if (alen && auth[0] == '[') {
                const char *close = memchr(auth, ']', alen);
                hlen = close ? (size_t)(close - auth) + 1 : alen;
        } else {
                const char *colon = memchr(auth, ':', alen);
                hlen = colon ? (size_t)(colon - auth) : alen;
        }
        if (hlen == 0)
                return sb_error_set(ret_err, -EINVAL, NULL, "url", "url: '%s' has no host", TEXT_Q(url));
        uint16_t port = 0;
        if (hlen < alen && (auth[hlen] != ':' || parse_url_port(auth + hlen + 1, alen - hlen - 1, &port) < 0))
                return sb_error_set(ret_err, -EINVAL, NULL, "url",
                                    "url: '%s' has a bad port (want a number from 1 to 65535)", TEXT_Q(url));
        for (size_t i = 0; !port && i < ELEMENTSOF(default_ports); i++)
                if (strlen(default_ports[i].scheme) == slen && strncasecmp(url, default_ports[i].scheme, slen) == 0)
                        port = default_ports[i].port;
        if (!port)
                return sb_error_set(ret_err, -EINVAL, NULL, "url",
                                    "url: scheme '%.*s' has no default port; write the port in the URL", (int)slen, url);
        char *host = strndup(auth, hlen);
        if (!host)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        *ret_host = host;
        *ret_port = port;
        return 0;
}

/* The policy to judge with: the named sandbox's (borrowed: the parsed
 * policy its enforcement layers apply), or the document in the request
 * (parsed into *ret_owned, which the caller frees). Answers the request
 * itself on failure and returns a negative errno. */
static int request_policy(rpc_request *req, manager *m, const pol_policy **ret, pol_policy **ret_owned) {
        _cleanup_error_ sb_error *err = NULL;
        const char *name = NULL;
        cJSON *doc = cJSON_GetObjectItemCaseSensitive(req->params, "networkPolicy");
        if (rpc_param_string(req, "sandbox", false, &name, &err) < 0)
                return rpc_reply_sb_error(req, err), -EINVAL;
        if (!!name == !!doc)
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, name ? "networkPolicy" : "sandbox",
                                       "give either sandbox (a name) or networkPolicy (a policy document)%s",
                                       name ? ", not both" : ""),
                       -EINVAL;
        if (doc) {
                if (pol_policy_parse(doc, ret_owned, &err) < 0)
                        return rpc_reply_sb_error(req, err), -EINVAL;
                *ret = *ret_owned;
                return 0;
        }
        sandbox *sb = manager_find_sandbox(m, name);
        if (!sb)
                return reply_not_found(req, "sandbox", name), -ENOENT;
        /* A NULL policy judges as deny-all in pol_check (fail closed). */
        *ret = sb->pol;
        return 0;
}

/* The destination: url, or host with an optional port. On success stores a
 * new host string and the port (0: any port). Answers the request itself
 * on failure. */
static int request_target(rpc_request *req, char **ret_host, uint16_t *ret_port) {
        _cleanup_error_ sb_error *err = NULL;
        const char *url = NULL, *host = NULL;
        int64_t port = 0;
        if (rpc_param_string(req, "url", false, &url, &err) < 0 || rpc_param_string(req, "host", false, &host, &err) < 0 ||
            rpc_param_int(req, "port", false, 1, 65535, &port, &err) < 0)
                return rpc_reply_sb_error(req, err), -EINVAL;
        if (!!url == !!host)
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, url ? "host" : "url",
                                       "give either url or host (with port), not %s", url ? "both" : "neither"),
                       -EINVAL;
        if (url && port)
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "port",
                                       "port: goes with host; write the port in the URL instead"),
                       -EINVAL;
        if (url) {
                if (events_parse_url(url, ret_host, ret_port, &err) < 0)
                        return rpc_reply_sb_error(req, err), -EINVAL;
                return 0;
        }
        *ret_host = strdup(host);
        if (!*ret_host)
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL, "out of memory"), -ENOMEM;
        *ret_port = (uint16_t)port;
        return 0;
}

/* The transport: "protocol" is "tcp" (the default) or "udp". Answers the
 * request itself on failure. */
static int request_protocol(rpc_request *req, int *ret) {
        _cleanup_error_ sb_error *err = NULL;
        const char *proto = NULL;
        if (rpc_param_string(req, "protocol", false, &proto, &err) < 0)
                return rpc_reply_sb_error(req, err), -EINVAL;
        if (!proto || streq(proto, "tcp"))
                *ret = IPPROTO_TCP;
        else if (streq(proto, "udp"))
                *ret = IPPROTO_UDP;
        else
                return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "protocol",
                                       "protocol: '%s' is not \"tcp\" or \"udp\"", TEXT_Q(proto)),
                       -EINVAL;
        return 0;
}

/* One line that says what decided and why, naming the rule. */
static char *verdict_message(const pol_verdict *v, const char *dest) {
        char *msg = NULL;
        const char *what = v->allow ? "allowed" : "denied";
        int r;
        switch (v->layer) {
        case POL_LAYER_MODE:
                r = asprintf(&msg, "%s: %s by the policy %s", dest, what, v->detail);
                break;
        case POL_LAYER_INVALID_HOST:
                r = asprintf(&msg, "%s: denied, not a valid host (%s)", dest, v->detail);
                break;
        case POL_LAYER_DEFAULT:
                r = asprintf(&msg, "%s: denied, a custom policy denies what it does not allow (%s)", dest,
                             v->detail);
                break;
        case POL_LAYER_DOMAIN:
                r = asprintf(&msg, "%s: allowed by %s; the addresses it resolves to are still checked "
                             "against subnets.deny and the forbidden ranges", dest, v->detail);
                break;
        case POL_LAYER_PORT:
                r = asprintf(&msg, "%s: denied by %s", dest, v->detail);
                break;
        default: {
                /* "subnets.deny[0] 10.0.0.0/8" names its layer already. */
                const char *layer = pol_layer_to_string(v->layer);
                if (strncmp(v->detail, layer, strlen(layer)) == 0)
                        r = asprintf(&msg, "%s: %s by %s", dest, what, v->detail);
                else
                        r = asprintf(&msg, "%s: %s by %s: %s", dest, what, layer, v->detail);
                break;
        }
        }
        return r < 0 ? NULL : msg;
}

/* The answer: {decision, layer, rule, detail, host, port, protocol,
 * message}. `rule` is the rule's own text ("allow[0] \"*.example.com\"",
 * "subnets.deny[1] 10.0.0.0/8", "deny-all", "tcp dport 853 (DNS over
 * TLS): ..."), null when no rule decided (default deny, an invalid host);
 * `detail` is the verdict's one-line reason, never null: the `rule` a
 * denial event of nftables names for the same packet. */
static cJSON *check_result(const pol_verdict *v, const char *raw_host, const pol_host *h, bool parsed,
                           uint16_t port, int l4proto) {
        char norm[POL_NAME_MAX + 1], dest[POL_NAME_MAX + 16];
        if (parsed && h->is_addr)
                pol_addr_format(&h->addr, norm, sizeof(norm));
        else
                snprintf(norm, sizeof(norm), "%s", parsed ? h->name : raw_host);
        bool v6 = parsed && h->is_addr && h->addr.family == AF_INET6;
        if (port)
                snprintf(dest, sizeof(dest), v6 ? "[%s]:%u" : "%s:%u", norm, port);
        else
                snprintf(dest, sizeof(dest), "%s", norm);
        _cleanup_free_ char *msg = verdict_message(v, dest);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "decision", v->allow ? "allow" : "deny");
        cJSON_AddStringToObject(o, "layer", pol_layer_to_string(v->layer));
        if (v->rule >= 0 || v->layer == POL_LAYER_MODE)
                cJSON_AddStringToObject(o, "rule", v->detail);
        else
                cJSON_AddNullToObject(o, "rule");
        cJSON_AddStringToObject(o, "detail", v->detail);
        cJSON_AddStringToObject(o, "host", norm);
        if (port)
                cJSON_AddNumberToObject(o, "port", port);
        else
                cJSON_AddNullToObject(o, "port");
        cJSON_AddStringToObject(o, "protocol", l4proto == IPPROTO_UDP ? "udp" : "tcp");
        cJSON_AddStringToObject(o, "message", msg ? msg : v->detail);
        return o;
}

static void method_policy_check(rpc_request *req, void *userdata) {
        manager *m = userdata;
        _cleanup_policy_ pol_policy *owned = NULL;
        const pol_policy *pol = NULL;
        _cleanup_free_ char *host = NULL;
        _cleanup_free_ pol_cidr *never = NULL;
        size_t n_never = 0;
        uint16_t port = 0;
        int l4proto = IPPROTO_TCP;
        if (request_policy(req, m, &pol, &owned) < 0 || request_target(req, &host, &port) < 0 ||
            request_protocol(req, &l4proto) < 0)
                return;
        pol_host h = {};
        const char *why = NULL;
        bool parsed = pol_host_parse(host, &h, &why) == 0;
        if (parsed && h.port) {
                if (port && port != h.port)
                        return rpc_reply_error(req, RPC_INVALID_PARAMS, NULL, "port",
                                               "port: %u disagrees with the port in host '%s'", port, TEXT_Q(host));
                port = h.port;
        }
        /* The host's own addresses and the sandbox pool, as enforcement
         * sees them (DESIGN §5.1 rule 5): no policy opens them, so the dry
         * run must not say it would. Without the list the answer could
         * wrongly say allow, so failing to read it is an error. */
        if (manager_never_list(m, &never, &n_never) < 0)
                return rpc_reply_error(req, RPC_INTERNAL_ERROR, NULL, NULL,
                                       "policy.check: cannot read the host's addresses");
        /* As enforcement judges it: an address packet by packet, through
         * the table the session chain is generated from (as never pinned:
         * a dry run has no DNS answer); a name by the policy, then the
         * port steps its pinned addresses meet. */
        pol_verdict v;
        if (parsed && h.is_addr)
                pol_check_packet(pol, l4proto, &h.addr, port, false, never, n_never, &v);
        else if (pol_check(pol, host, port, never, n_never, &v))
                (void)pol_check_port(pol, l4proto, port, false, &v);
        rpc_reply(req, check_result(&v, host, &h, parsed, port, l4proto));
}

void register_event_methods(manager *m, rpc_server *s) {
        rpc_server_add_method(s, "events.subscribe", method_subscribe, m);
        rpc_server_add_method(s, "policy.check", method_policy_check, m);
}
