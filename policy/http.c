/* The HTTP layer of the egress proxy (DESIGN §5.1 rule 7, §5.2): HTTP/1.1
 * framing with the packaged parser (nodejs http_parser 2.9) for requests
 * from the sandbox and responses from upstream, the per-request Host
 * check, the rules (transform headers, forwardURL), header hygiene, echo
 * scrubbing of injected values, and the legible 403 and error pages. TLS
 * (the session CA, termination, verified upstream) is in policy/tls.c.
 *
 * Framing: a Content-Length request body is forwarded as the exact bytes
 * the parser accepted; a chunked one is decoded by the parser and written
 * as chunks the proxy framed itself (no client chunk extension, odd line
 * end or trailer reaches the upstream, which might frame them differently:
 * no smuggling). Response bodies are decoded by the parser and re-framed
 * (chunked stays chunked, Content-Length and close-delimited bodies are
 * passed through), which lets the scrubber see an injected value even
 * when it straddles two chunks. Nothing is ever read whole. An upstream
 * connection with bytes left after a complete response is out of step
 * and is closed, never reused.
 *
 * Matching (rule 7): the path is matched as sent, without the query and
 * without percent-decoding (a policy that wants "/a%2Fb" writes it so).
 * Query parameters are split on '&' and the first '=', and key and value
 * are both percent-decoded with '+' read as a space (the
 * application/x-www-form-urlencoded reading servers apply, WHATWG URL
 * §5.1) before matching; a malformed %-escape stays literal. Header names
 * compare case-insensitively (RFC 9110 §5.1): exact and startsWith
 * ignore case, a regex is tried on the lowercased name and on the name as
 * sent. Methods compare case-sensitively (RFC 9110 §9.1).
 *
 * forwardURL: the request keeps its method, body and end-to-end headers;
 * its target becomes the rule's path without trailing '/' followed by the
 * original path and query ("https://f.example/base/" + "/v1/x?y=1" sends
 * "/base/v1/x?y=1"), Host becomes the forward authority, and the original
 * host, scheme, port and path travel in x-sandbox-forwarded-*. A
 * transform's values are never added to a forwarded request.
 *
 * Echo scrubbing covers header values and identity-encoded bodies only,
 * and finds an injected value as injected, JSON-escaped, percent-encoded,
 * and (for "<scheme> <token>") as the token alone: each form is its own
 * needle, and the overlap window is the longest needle. A compressed
 * body (Content-Encoding other than identity, or a transfer coding
 * besides chunked) or another encoding (base64, HTML entities) is not
 * scrubbed. Needles shorter than SCRUB_MIN bytes are not scrubbed either
 * (they could not be credentials, and scrubbing them would garble
 * ordinary text).
 *
 * Upgrades (WebSocket, h2c) are not relayed on this layer: the Upgrade
 * header is hop-by-hop and is dropped. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <http_parser.h>
#include <openssl/ssl.h>
#include "libcore/buf.h"
#include "libcore/macro.h"
#include "libcore/urldecode.h"
#include "libcore/util.h"
#include "policy/proxy.h"
#include "policy/tls-internal.h"

#define HEAD_MAX (64 * 1024) /* one request or response head */
#define IO_CHUNK (16 * 1024) /* bytes moved per read */
#define MAX_FIELDS 256
#define SCRUB_MIN 4
#define MAX_SECRETS 1024
/* Longest needle: a value of POL_MAX_STRING bytes JSON-escaped as \u00xx. */
#define NEEDLE_MAX (6 * POL_MAX_STRING)

/* ---- growable text ---------------------------------------------------------- */

typedef struct sbuf {
        char *p;
        size_t len, cap;
        bool oom;
} sbuf;

static void sbuf_add(sbuf *b, const char *s, size_t n) {
        if (b->oom)
                return;
        if (b->len + n + 1 > b->cap) {
                size_t cap = (b->len + n + 1) * 2;
                char *np = realloc(b->p, cap);
                if (!np) {
                        b->oom = true;
                        return;
                }
                b->p = np;
                b->cap = cap;
        }
        memcpy(b->p + b->len, s, n);
        b->len += n;
        b->p[b->len] = 0;
}

static void sbuf_str(sbuf *b, const char *s) {
        sbuf_add(b, s, strlen(s));
}

_printf_(2, 3) static void sbuf_printf(sbuf *b, const char *fmt, ...) {
        char tmp[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
        va_end(ap);
        if (n > 0)
                sbuf_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* ---- one message head, collected by parser callbacks ------------------------- */

typedef struct field {
        char *name, *value;
        size_t name_len, value_len;
} field;

typedef struct resp_out resp_out;
typedef struct conn conn;

typedef struct msg {
        http_parser p;
        field f[MAX_FIELDS];
        size_t n;
        char *url, *status;
        size_t url_len, status_len;
        size_t bytes;      /* head text seen, bounded by HEAD_MAX */
        bool in_value;
        bool too_big;
        bool headers_done; /* on_headers_complete ran (parser paused there) */
        bool done;         /* on_message_complete ran (parser paused there) */
        bool keep_alive;   /* http_should_keep_alive() at the end of the head */
        bool skip_body;    /* a response to HEAD */
        bool fold_lf;      /* obs-fold scan: the previous head byte was LF */
        bool folded;
        resp_out *out;     /* responses: where the body goes */
        conn *reframe;     /* chunked requests: re-framed to this conn's upstream */
        int reframe_err;
} msg;

static void msg_clear(msg *m) {
        for (size_t i = 0; i < m->n; i++) {
                free(m->f[i].name);
                free(m->f[i].value);
                m->f[i] = (field){};
        }
        free(m->url);
        free(m->status);
        m->n = 0;
        m->url = m->status = NULL;
        m->url_len = m->status_len = m->bytes = 0;
        m->in_value = m->too_big = m->headers_done = m->done = m->folded = false;
        m->fold_lf = false;
}

static int grow(msg *m, char **s, size_t *len, const char *at, size_t n) {
        if ((m->bytes += n) > HEAD_MAX) {
                m->too_big = true;
                return -1;
        }
        return core_buf_append(s, len, at, n);
}

static int on_message_begin(http_parser *p) {
        msg *m = p->data;
        msg_clear(m);
        return 0;
}

static int on_url(http_parser *p, const char *at, size_t n) {
        msg *m = p->data;
        return grow(m, &m->url, &m->url_len, at, n);
}

static int on_status(http_parser *p, const char *at, size_t n) {
        msg *m = p->data;
        return grow(m, &m->status, &m->status_len, at, n);
}

static int on_header_field(http_parser *p, const char *at, size_t n) {
        msg *m = p->data;
        if (m->n == 0 || m->in_value) {
                if (m->n == MAX_FIELDS) {
                        m->too_big = true;
                        return -1;
                }
                m->n++;
                m->in_value = false;
        }
        field *f = &m->f[m->n - 1];
        return grow(m, &f->name, &f->name_len, at, n);
}

static int on_header_value(http_parser *p, const char *at, size_t n) {
        msg *m = p->data;
        if (m->n == 0)
                return -1;
        m->in_value = true;
        field *f = &m->f[m->n - 1];
        return grow(m, &f->value, &f->value_len, at, n);
}

static int on_headers_complete(http_parser *p) {
        msg *m = p->data;
        m->headers_done = true;
        m->keep_alive = http_should_keep_alive(p);
        http_parser_pause(p, 1);
        /* 1: the parser expects no body (a response to HEAD). */
        return m->skip_body ? 1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n);
static int on_message_complete(http_parser *p);

static const http_parser_settings settings = {
        .on_message_begin = on_message_begin,
        .on_url = on_url,
        .on_status = on_status,
        .on_header_field = on_header_field,
        .on_header_value = on_header_value,
        .on_headers_complete = on_headers_complete,
        .on_body = on_body,
        .on_message_complete = on_message_complete,
};

static void msg_init(msg *m, enum http_parser_type type) {
        memset(m, 0, sizeof(*m));
        http_parser_init(&m->p, type);
        m->p.data = m;
}

/* Feeds bytes; stops after the head and after the message (both pause).
 * Returns the bytes consumed or -EBADMSG / -E2BIG. While the head is being
 * read it also scans for obs-fold (a line starting with SP or HTAB), which
 * RFC 9112 §5.2 lets a proxy reject and the parser would accept. */
static ssize_t msg_feed(msg *m, const uint8_t *data, size_t n) {
        bool was_head = !m->headers_done;
        size_t used = http_parser_execute(&m->p, &settings, (const char *)data, n);
        enum http_errno e = HTTP_PARSER_ERRNO(&m->p);
        for (size_t i = 0; was_head && i < used && !m->folded; i++) {
                if (m->fold_lf && (data[i] == ' ' || data[i] == '\t'))
                        m->folded = true;
                m->fold_lf = data[i] == '\n';
        }
        if (e == HPE_PAUSED) {
                http_parser_pause(&m->p, 0);
                return (ssize_t)used;
        }
        if (e != HPE_OK)
                return m->too_big || e == HPE_HEADER_OVERFLOW ? -E2BIG : -EBADMSG;
        return (ssize_t)used;
}

static const field *find_field(const msg *m, const char *name, size_t *ret_count) {
        const field *first = NULL;
        size_t count = 0;
        for (size_t i = 0; i < m->n; i++)
                if (m->f[i].name && strcasecmp(m->f[i].name, name) == 0) {
                        if (!first)
                                first = &m->f[i];
                        count++;
                }
        if (ret_count)
                *ret_count = count;
        return first;
}

static const char *fvalue(const field *f) {
        return f && f->value ? f->value : "";
}

/* True when a comma-separated field value consists of exactly the
 * tokens allowed by ok() (OWS around each, RFC 9110 §5.6.1). */
static bool tokens_all(const char *v, bool (*ok)(const char *tok, size_t len)) {
        while (*v) {
                v += strspn(v, " \t,");
                size_t l = strcspn(v, ",");
                size_t t = l;
                while (t > 0 && (v[t - 1] == ' ' || v[t - 1] == '\t'))
                        t--;
                if (t > 0 && !ok(v, t))
                        return false;
                v += l;
        }
        return true;
}

static bool tok_chunked(const char *tok, size_t len) {
        return len == 7 && strncasecmp(tok, "chunked", 7) == 0;
}

/* RFC 9112 §6.3 and §11.2: a request whose length two parties could read
 * differently is refused, never guessed at. The parser already rejects
 * two differing Content-Lengths and Content-Length with chunked; this
 * repeats those checks and adds what it lets through. */
static int head_check(const msg *m, bool request) {
        size_t n_cl, n_te, n_host;
        const field *te = find_field(m, "transfer-encoding", &n_te);
        find_field(m, "content-length", &n_cl);
        find_field(m, "host", &n_host);
        if (m->folded || n_cl > 1 || (n_te && n_cl) || n_te > 1)
                return -EBADMSG;
        if (request && (n_host > 1 || (te && !tokens_all(fvalue(te), tok_chunked))))
                return -EBADMSG;
        for (size_t i = 0; i < m->n; i++)
                if (!m->f[i].name || !pol_header_name_is_valid(m->f[i].name))
                        return -EBADMSG;
        return 0;
}

int pol_http_parse_head(const uint8_t *buf, size_t n, char method[32], char **ret_target, char **ret_host,
                        size_t *ret_head_len) {
        _cleanup_free_ msg *m = calloc(1, sizeof(*m));
        int r;
        if (!m)
                return -ENOMEM;
        msg_init(m, HTTP_REQUEST);
        ssize_t used = msg_feed(m, buf, n);
        if (used < 0 || !m->headers_done) {
                r = used < 0 ? (int)used : n >= HEAD_MAX ? -E2BIG : -EAGAIN;
                goto out;
        }
        /* The parser stopped on the head's last LF, not yet consumed. */
        size_t head_len = (size_t)used + 1;
        if (head_len > HEAD_MAX) {
                r = -E2BIG;
                goto out;
        }
        if ((r = head_check(m, true)) < 0 || !m->url)
                goto out_bad;
        const char *meth = http_method_str(m->p.method);
        const field *h = find_field(m, "host", NULL);
        char *target = strdup(m->url), *host = h ? strdup(fvalue(h)) : NULL;
        if (!target || (h && !host)) {
                free(target);
                free(host);
                r = -ENOMEM;
                goto out;
        }
        snprintf(method, 32, "%s", meth);
        *ret_target = target;
        *ret_host = host;
        *ret_head_len = head_len;
        r = 0;
        goto out;
out_bad:
        r = -EBADMSG;
out:
        msg_clear(m);
        return r;
}

/* ---- responses the proxy writes itself ---------------------------------------- */

/* Copies untrusted text (a Host header) for a page or header: printable
 * ASCII only, so it can neither split a header nor forge page lines. */
static void clean_copy(char *dst, size_t size, const char *src) {
        size_t i = 0;
        for (; src && src[i] && i + 1 < size; i++)
                dst[i] = src[i] > 0x20 && src[i] < 0x7f ? src[i] : '?';
        dst[i] = 0;
}

int pol_http_write_403(pol_stream *client, const char *policy_name, const char *host, const pol_verdict *v,
                       const char *why) {
        char h[POL_NAME_MAX + 8], pname[128];
        sbuf body = {}, out = {};
        clean_copy(h, sizeof(h), host ? host : "-");
        clean_copy(pname, sizeof(pname), policy_name ? policy_name : "-");
        const char *layer = v ? pol_layer_to_string(v->layer) : "http";
        sbuf_printf(&body, "Request to %s refused by the sandbox's network policy; retrying will not help.\n", h);
        if (why)
                sbuf_printf(&body, "%s\n", why);
        sbuf_printf(&body, "policy: %s\nhost: %s\nrule: %s\n", pname, h,
                    v && v->detail[0] ? v->detail : layer);
        sbuf_printf(&out,
                    "HTTP/1.1 403 Forbidden\r\nx-sandbox-policy: %s; host=%s; layer=%s\r\n"
                    "content-type: text/plain; charset=utf-8\r\ncontent-length: %zu\r\n"
                    "cache-control: no-store\r\nconnection: close\r\n\r\n",
                    pname, h, layer, body.len);
        sbuf_add(&out, body.p ? body.p : "", body.len);
        int r = out.oom || body.oom ? -ENOMEM : pol_stream_write_all(client, out.p, out.len);
        free(body.p);
        free(out.p);
        return r;
}

int pol_http_write_error(pol_stream *client, int status, const char *why) {
        sbuf out = {};
        const char *reason = http_status_str((enum http_status)status);
        size_t blen = strlen(why ? why : "") + 1;
        sbuf_printf(&out,
                    "HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %zu\r\n"
                    "cache-control: no-store\r\nconnection: close\r\n\r\n",
                    status, reason, blen);
        sbuf_str(&out, why ? why : "");
        sbuf_str(&out, "\n");
        int r = out.oom ? -ENOMEM : pol_stream_write_all(client, out.p, out.len);
        free(out.p);
        return r;
}

/* The whole exchange is bounded by one deadline, not per read: a client
 * that trickles its head a byte at a time still leaves within
 * io_timeout_ms. What it asks does not matter, so the head is only
 * looked at for its end. */
int pol_http_refuse(const pol_proxy_env *env, pol_stream *client, const pol_proxy_target *t, const char *why) {
        if (!env || !client || !t)
                return -EINVAL;
        _cleanup_free_ uint8_t *buf = malloc(HEAD_MAX);
        int ms = env->io_timeout_ms > 0 ? env->io_timeout_ms : 3000, r = -EAGAIN;
        uint64_t deadline = core_monotonic_ms() + (uint64_t)ms;
        size_t n = 0;
        if (!buf)
                return -ENOMEM;
        while (r == -EAGAIN && n < HEAD_MAX) {
                uint64_t now = core_monotonic_ms();
                if (now >= deadline)
                        return -ETIMEDOUT;
                (void)pol_proxy_set_timeouts(client->fd, (int)(deadline - now));
                ssize_t k = pol_stream_read(client, buf + n, HEAD_MAX - n);
                if (k <= 0)
                        return k < 0 ? (int)k : -ECONNRESET;
                n += (size_t)k;
                char method[32], *target = NULL, *host = NULL;
                size_t head_len = 0;
                r = pol_http_parse_head(buf, n, method, &target, &host, &head_len);
                free(target);
                free(host);
        }
        return pol_http_write_403(client, env->policy_name, t->host, &t->verdict, why);
}

/* ---- one client connection ------------------------------------------------------ */

typedef struct secret {
        char *v; /* owned, wiped on free */
        size_t len;
} secret;

typedef struct upstream {
        pol_stream s; /* fd -1 when closed */
        char host[POL_NAME_MAX + 1];
        uint16_t port;
        bool tls;
        uint8_t buf[IO_CHUNK];
        size_t off, len;
        size_t got; /* bytes read for the current request */
        pol_proxy_live *live; /* of the target it was dialled for */
} upstream;

typedef struct conn {
        const pol_proxy_env *env;
        const pol_proxy_target *t;
        pol_stream *client;
        bool tls; /* upstream TLS (and, on this layer, client TLS) */
        uint8_t *cbuf;
        size_t cap, off, len;
        msg req;
        upstream up;
        secret secrets[MAX_SECRETS];
        size_t n_secrets, max_secret;
        bool client_bad; /* the request body's framing was malformed */
} conn;

/* Where a response body goes: the client, re-framed, through the scrub
 * window (the last max_secret - 1 bytes are held back so a value split
 * across two reads is still seen whole). */
struct resp_out {
        conn *c;
        bool chunked;
        bool scrub;
        uint8_t win[IO_CHUNK + NEEDLE_MAX];
        size_t wlen;
        int err;
};

static void event(conn *c, const char *reason, const char *host, uint16_t port, const pol_verdict *v,
                  const char *fmt, ...) _printf_(6, 7);
static void event(conn *c, const char *reason, const char *host, uint16_t port, const pol_verdict *v,
                  const char *fmt, ...) {
        char text[512];
        va_list ap;
        if (!c->env->event)
                return;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        pol_proxy_event ev = { .allow = false, .host = host, .port = port, .reason = reason, .verdict = v,
                               .message = text };
        c->env->event(&ev, c->env->event_userdata);
}

/* Adds one needle (a copy, wiped on free). Too short to be a credential,
 * a duplicate, or past the table's size: not added. */
static void add_needle(conn *c, const char *v, size_t l) {
        if (l < SCRUB_MIN || l > NEEDLE_MAX || c->n_secrets == MAX_SECRETS)
                return;
        for (size_t i = 0; i < c->n_secrets; i++)
                if (c->secrets[i].len == l && memcmp(c->secrets[i].v, v, l) == 0)
                        return;
        char *copy = malloc(l);
        if (!copy)
                return;
        memcpy(copy, v, l);
        c->secrets[c->n_secrets++] = (secret){ copy, l };
        if (l > c->max_secret)
                c->max_secret = l;
}

/* The length of the UTF-8 sequence at s[0..n) and its code point, or 0
 * when it is not valid UTF-8 (then the byte is escaped on its own). */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *ret) {
        size_t len = s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
        if (len == 0 || len > n)
                return 0;
        uint32_t cp = s[0] & (0x7f >> len);
        for (size_t i = 1; i < len; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp < 0xe000))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
                return 0;
        *ret = cp;
        return len;
}

/* v as a JSON string body (RFC 8259 §7) the way common encoders write it:
 * '"' and '\\' escaped, '/' as "\/" when esc_slash (PHP, some Java), the
 * short escapes for BS/FF/LF/CR/TAB, other controls as \u00xx, and
 * non-ASCII as \uxxxx (UTF-16, lowercase hex) when esc_utf8 (Python's
 * default) or raw otherwise (JavaScript, Go). */
static void json_form(sbuf *b, const uint8_t *v, size_t l, bool esc_slash, bool esc_utf8) {
        static const char shorts[] = "\bb\ff\nn\rr\tt";
        for (size_t i = 0; i < l; i++) {
                const char *sh = v[i] ? memchr(shorts, v[i], sizeof(shorts) - 1) : NULL;
                uint32_t cp;
                size_t ul;
                if (v[i] == '"' || v[i] == '\\' || (v[i] == '/' && esc_slash))
                        sbuf_printf(b, "\\%c", v[i]);
                else if (sh && (sh - shorts) % 2 == 0)
                        sbuf_printf(b, "\\%c", sh[1]);
                else if (v[i] < 0x20)
                        sbuf_printf(b, "\\u%04x", v[i]);
                else if (v[i] < 0x80 || !esc_utf8)
                        sbuf_add(b, (const char *)&v[i], 1);
                else if ((ul = utf8_decode(v + i, l - i, &cp)) > 0) {
                        if (cp >= 0x10000)
                                sbuf_printf(b, "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10),
                                            0xdc00 + ((cp - 0x10000) & 0x3ff));
                        else
                                sbuf_printf(b, "\\u%04x", cp);
                        i += ul - 1;
                } else
                        sbuf_printf(b, "\\u%04x", v[i]);
        }
}

/* v percent-encoded (RFC 3986 §2.1): every byte but the unreserved ones,
 * hex digits in the given case (the RFC prefers upper, many encoders
 * write lower). */
static void percent_form(sbuf *b, const uint8_t *v, size_t l, bool upper) {
        for (size_t i = 0; i < l; i++) {
                bool unreserved = (v[i] >= 'A' && v[i] <= 'Z') || (v[i] >= 'a' && v[i] <= 'z') ||
                                  (v[i] >= '0' && v[i] <= '9') || strchr("-._~", v[i]);
                if (unreserved && v[i])
                        sbuf_add(b, (const char *)&v[i], 1);
                else
                        sbuf_printf(b, upper ? "%%%02X" : "%%%02x", v[i]);
        }
}

/* The needles for one value: as injected, JSON-escaped (four encoder
 * styles) and percent-encoded (both hex cases). */
static void add_forms(conn *c, const char *v, size_t l) {
        add_needle(c, v, l);
        for (int k = 0; k < 6; k++) {
                sbuf b = {};
                if (k < 4)
                        json_form(&b, (const uint8_t *)v, l, k & 1, k & 2);
                else
                        percent_form(&b, (const uint8_t *)v, l, k == 4);
                if (!b.oom && b.p)
                        add_needle(c, b.p, b.len);
                if (b.p)
                        explicit_bzero(b.p, b.len);
                free(b.p);
        }
}

/* Every value any rule of this domain injects, in every form above: a
 * value injected on one request may be echoed on a later one of the same
 * connection. */
static void collect_secrets(conn *c) {
        const pol_domain *d = c->t->domain;
        for (size_t i = 0; d && i < d->n_rules; i++)
                for (size_t k = 0; k < d->rules[i].n_transforms; k++)
                        for (size_t h = 0; h < d->rules[i].transforms[k].n_headers; h++) {
                                const char *v = d->rules[i].transforms[k].headers[h].value;
                                size_t l = strlen(v);
                                if (l > POL_MAX_STRING)
                                        continue;
                                add_forms(c, v, l);
                                /* "Bearer <token>": APIs echo the credential alone. A
                                 * short one could be ordinary text, so only from 8 bytes. */
                                const char *sp = memchr(v, ' ', l);
                                size_t skip = sp ? (size_t)(sp - v) + strspn(sp, " ") : 0;
                                if (sp && sp > v && l - skip >= 8)
                                        add_forms(c, v + skip, l - skip);
                        }
}

static void free_secrets(conn *c) {
        for (size_t i = 0; i < c->n_secrets; i++) {
                explicit_bzero(c->secrets[i].v, c->secrets[i].len);
                free(c->secrets[i].v);
        }
        c->n_secrets = 0;
}

/* Replaces every occurrence of a needle in buf with '*' of the same
 * length (lengths, and so Content-Length, unchanged). */
static void scrub(const conn *c, uint8_t *buf, size_t n) {
        for (size_t i = 0; i < c->n_secrets; i++) {
                const secret *s = &c->secrets[i];
                uint8_t *p = buf, *end = buf + n;
                while ((size_t)(end - p) >= s->len && (p = memmem(p, (size_t)(end - p), s->v, s->len))) {
                        memset(p, '*', s->len);
                        p += s->len;
                }
        }
}

/* ---- request matching (rule 7) --------------------------------------------------- */

/* True when some parameter of the query satisfies kv. */
static bool query_has(const pol_kv *kv, const char *q, size_t qlen) {
        _cleanup_free_ char *k = malloc(qlen + 1), *v = malloc(qlen + 1);
        if (!k || !v)
                return false; /* fail closed: no rule applies */
        for (size_t i = 0; i <= qlen && qlen > 0;) {
                size_t l = 0;
                while (i + l < qlen && q[i + l] != '&')
                        l++;
                const char *eq = memchr(q + i, '=', l);
                size_t kl = eq ? (size_t)(eq - (q + i)) : l;
                size_t dk = core_url_decode(q + i, kl, true, k);
                size_t dv = eq ? core_url_decode(eq + 1, l - kl - 1, true, v) : (v[0] = 0, 0);
                if (l > 0 && (!kv->key || pol_str_match_test(kv->key, k, dk)) &&
                    (!kv->value || pol_str_match_test(kv->value, v, dv)))
                        return true;
                i += l + 1;
        }
        return false;
}

static bool name_test(const pol_str_match *m, const char *name, size_t len) {
        size_t tl = strlen(m->text);
        if (m->kind == POL_STR_EXACT)
                return len == tl && strncasecmp(name, m->text, len) == 0;
        if (m->kind == POL_STR_STARTS_WITH)
                return len >= tl && strncasecmp(name, m->text, tl) == 0;
        char low[256];
        if (len >= sizeof(low))
                return pol_str_match_test(m, name, len);
        for (size_t i = 0; i < len; i++)
                low[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] + 32 : name[i]);
        return pol_str_match_test(m, low, len) || pol_str_match_test(m, name, len);
}

static bool header_has(const pol_kv *kv, const msg *m) {
        for (size_t i = 0; i < m->n; i++) {
                const field *f = &m->f[i];
                if ((!kv->key || name_test(kv->key, f->name, f->name_len)) &&
                    (!kv->value || pol_str_match_test(kv->value, fvalue(f), f->value_len)))
                        return true;
        }
        return false;
}

/* The parts of the request target rules look at. */
typedef struct target {
        char *origin; /* origin-form: path and query, no fragment */
        size_t path_len;
        const char *query;
        size_t query_len;
} target;

static bool rule_matches(const pol_match *mt, const char *method, const target *tg, const msg *m) {
        if (!mt)
                return true;
        if (mt->path && !pol_str_match_test(mt->path, tg->origin, tg->path_len))
                return false;
        if (mt->n_methods) {
                bool any = false;
                for (size_t i = 0; i < mt->n_methods && !any; i++)
                        any = streq(mt->methods[i], method);
                if (!any)
                        return false;
        }
        for (size_t i = 0; i < mt->n_query; i++)
                if (!query_has(&mt->query[i], tg->query ? tg->query : "", tg->query_len))
                        return false;
        for (size_t i = 0; i < mt->n_headers; i++)
                if (!header_has(&mt->headers[i], m))
                        return false;
        return true;
}

static const pol_rule *first_rule(const conn *c, const char *method, const target *tg, int *ret_index) {
        const pol_domain *d = c->t->domain;
        for (size_t i = 0; d && i < d->n_rules; i++)
                if (rule_matches(d->rules[i].match, method, tg, &c->req)) {
                        *ret_index = (int)i;
                        return &d->rules[i];
                }
        return NULL;
}

/* ---- response relay ------------------------------------------------------------ */

static int emit(resp_out *o, const uint8_t *p, size_t n) {
        if (n == 0)
                return 0;
        if (!o->chunked)
                return pol_stream_write_all(o->c->client, p, n);
        char hdr[24];
        int hl = snprintf(hdr, sizeof(hdr), "%zx\r\n", n);
        int r = pol_stream_write_all(o->c->client, hdr, (size_t)hl);
        if (r >= 0)
                r = pol_stream_write_all(o->c->client, p, n);
        return r < 0 ? r : pol_stream_write_all(o->c->client, "\r\n", 2);
}

/* A chunked request body goes upstream as chunks the proxy framed from
 * the decoded data: the client's chunk lines (extensions, odd line ends)
 * never reach an upstream that might read them differently. */
static int reframe_write(msg *m, const char *data, size_t n) {
        char hdr[24];
        int hl = snprintf(hdr, sizeof(hdr), "%zx\r\n", n);
        pol_stream *up = &m->reframe->up.s;
        int r = pol_stream_write_all(up, hdr, (size_t)hl);
        if (r >= 0)
                r = pol_stream_write_all(up, data, n);
        if (r >= 0)
                r = pol_stream_write_all(up, "\r\n", 2);
        m->reframe_err = r < 0 ? r : 0;
        return r < 0 ? -1 : 0;
}

static int on_body(http_parser *p, const char *at, size_t n) {
        msg *m = p->data;
        resp_out *o = m->out;
        if (!o) /* requests: Content-Length bodies go raw, chunked ones re-framed */
                return m->reframe && n > 0 ? reframe_write(m, at, n) : 0;
        while (n > 0) {
                size_t room = sizeof(o->win) - o->wlen, take = n < room ? n : room, keep = 0;
                memcpy(o->win + o->wlen, at, take);
                o->wlen += take;
                at += take;
                n -= take;
                if (o->scrub) {
                        scrub(o->c, o->win, o->wlen);
                        keep = o->c->max_secret - 1 < o->wlen ? o->c->max_secret - 1 : o->wlen;
                }
                if ((o->err = emit(o, o->win, o->wlen - keep)) < 0)
                        return -1;
                memmove(o->win, o->win + o->wlen - keep, keep);
                o->wlen = keep;
        }
        return 0;
}

static int on_message_complete(http_parser *p) {
        msg *m = p->data;
        resp_out *o = m->out;
        m->done = true;
        http_parser_pause(p, 1);
        if (!o && m->reframe) {
                /* The last chunk; trailers are dropped. */
                int r = pol_stream_write_all(&m->reframe->up.s, "0\r\n\r\n", 5);
                m->reframe_err = r < 0 ? r : 0;
                return r < 0 ? -1 : 0;
        }
        if (!o)
                return 0;
        /* The held-back tail was scrubbed with everything before it. */
        if ((o->err = emit(o, o->win, o->wlen)) >= 0 && o->chunked)
                o->err = pol_stream_write_all(o->c->client, "0\r\n\r\n", 5);
        o->wlen = 0;
        return o->err < 0 ? -1 : 0;
}

/* Response fields that describe this hop only (RFC 9110 §7.6.1); the
 * framing fields stay because the framing is preserved. */
static bool resp_hop(const char *name) {
        static const char *const hop[] = { "connection", "keep-alive", "proxy-connection", "upgrade",
                                           "trailer", "proxy-authenticate" };
        for (size_t i = 0; i < ELEMENTSOF(hop); i++)
                if (strcasecmp(name, hop[i]) == 0)
                        return true;
        return false;
}

static bool tok_identity(const char *tok, size_t len) {
        return len == 8 && strncasecmp(tok, "identity", 8) == 0;
}

/* Sends the head of an upstream response (scrubbed) and sets up the body
 * path. *ret_eof: the body ends at the upstream's close, so the client
 * connection must end with it. */
static int send_resp_head(conn *c, msg *m, resp_out *o, bool *ret_eof) {
        unsigned st = m->p.status_code;
        bool bodiless = m->skip_body || st / 100 == 1 || st == 204 || st == 304;
        bool chunked = m->p.flags & F_CHUNKED, has_cl = m->p.flags & F_CONTENTLENGTH;
        bool eof = !bodiless && !chunked && !has_cl;
        const field *ce = find_field(m, "content-encoding", NULL), *te = find_field(m, "transfer-encoding", NULL);
        sbuf b = {};
        sbuf_printf(&b, "HTTP/%u.%u %u ", m->p.http_major, m->p.http_minor, st);
        sbuf_add(&b, m->status ? m->status : "", m->status_len);
        sbuf_str(&b, "\r\n");
        for (size_t i = 0; i < m->n; i++) {
                if (resp_hop(m->f[i].name))
                        continue;
                sbuf_add(&b, m->f[i].name, m->f[i].name_len);
                sbuf_str(&b, ": ");
                sbuf_str(&b, fvalue(&m->f[i]));
                sbuf_str(&b, "\r\n");
        }
        if (st / 100 != 1 && (eof || !c->req.keep_alive))
                sbuf_str(&b, "connection: close\r\n");
        sbuf_str(&b, "\r\n");
        if (b.oom) {
                free(b.p);
                return -ENOMEM;
        }
        scrub(c, (uint8_t *)b.p, b.len);
        int r = pol_stream_write_all(c->client, b.p, b.len);
        free(b.p);
        *o = (resp_out){ .c = c, .chunked = chunked && !bodiless };
        o->scrub = c->n_secrets > 0 && (!ce || tokens_all(fvalue(ce), tok_identity)) &&
                   (!te || tokens_all(fvalue(te), tok_chunked));
        m->out = o;
        *ret_eof = eof;
        return r;
}

/* Reads one upstream message into m, relaying it once its head is known.
 * *sent tells whether any byte reached the client. */
static int relay_one(conn *c, msg *m, resp_out *o, bool *sent, bool *ret_eof) {
        upstream *u = &c->up;
        while (!m->done) {
                if (u->off == u->len) {
                        ssize_t r = pol_stream_read(&u->s, u->buf, sizeof(u->buf));
                        if (r < 0)
                                return (int)r;
                        u->off = 0;
                        u->len = (size_t)r;
                        u->got += (size_t)r;
                        if (r == 0) {
                                /* EOF ends a close-delimited body; elsewhere it is a
                                 * truncated message. */
                                http_parser_execute(&m->p, &settings, NULL, 0);
                                if (o->err < 0)
                                        return o->err;
                                return m->done ? 0 : -ECONNRESET;
                        }
                }
                ssize_t used = msg_feed(m, u->buf + u->off, u->len - u->off);
                if (used < 0)
                        return o->err < 0 ? o->err : (int)used;
                u->off += (size_t)used;
                if (m->headers_done && !m->out) {
                        if (m->p.status_code == 101)
                                return -EBADMSG; /* we never asked for an upgrade */
                        int r = send_resp_head(c, m, o, ret_eof);
                        *sent = true;
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

/* Relays upstream responses until the final (non-1xx) one. Sets
 * *ret_keep when the client connection may carry another request. */
static int relay_response(conn *c, bool head_req, bool *sent, bool *ret_keep) {
        _cleanup_free_ msg *m = malloc(sizeof(*m));
        _cleanup_free_ resp_out *o = calloc(1, sizeof(*o));
        bool eof = false;
        int r;
        if (!m || !o)
                return -ENOMEM;
        for (;;) {
                msg_init(m, HTTP_RESPONSE);
                m->skip_body = head_req;
                *o = (resp_out){ .c = c };
                r = relay_one(c, m, o, sent, &eof);
                unsigned st = m->p.status_code;
                bool up_keep = m->keep_alive && c->up.off == c->up.len;
                msg_clear(m);
                if (r < 0)
                        return r;
                if (st / 100 != 1) {
                        *ret_keep = c->req.keep_alive && !eof;
                        if (!up_keep || eof)
                                r = 1; /* the caller closes the upstream */
                        return r;
                }
        }
}

/* ---- upstream connections --------------------------------------------------------- */

static void up_close(upstream *u) {
        if (u->s.ssl)
                SSL_free(u->s.ssl);
        pol_proxy_live_forget(u->live, u->s.fd);
        if (u->s.fd >= 0)
                close(u->s.fd);
        u->s = (pol_stream){ .fd = -1 };
        u->off = u->len = 0;
        u->host[0] = 0;
}

/* True when a kept-alive upstream connection may carry the next request:
 * nothing of it is unread. Bytes (or EOF) that arrived after a complete
 * response mean the upstream and the proxy disagree on where that
 * response ended (a body sent for HEAD, a wrong Content-Length): reading
 * them as the next response would hand the sandbox the wrong answer. */
static bool up_in_sync(const upstream *u) {
        if (u->off < u->len || (u->s.ssl && SSL_pending(u->s.ssl) > 0))
                return false;
        struct pollfd p = { .fd = u->s.fd, .events = POLLIN };
        return poll(&p, 1, 0) == 0;
}

/* Connects to the judged addresses of `to` in order, then (tls) runs a
 * verified handshake for its host. On failure `why` says what happened,
 * for the 502/504 page. */
static int up_open(conn *c, const pol_proxy_target *to, bool tls, char *why, size_t why_size) {
        int r, fd;
        up_close(&c->up);
        if ((r = fd = pol_proxy_dial(to, c->env->io_timeout_ms)) < 0) {
                snprintf(why, why_size, "could not connect to %s port %u: %s", to->host, to->port,
                         r == -EACCES ? POL_PROXY_LOCAL_REFUSED : strerror(-r));
                return r;
        }
        c->up.s.fd = fd;
        c->up.live = to->live;
        if (tls && (r = pol_proxy_upstream_tls(c->env->upstream_tls, fd, to->host, &c->up.s.ssl, why, why_size)) < 0) {
                up_close(&c->up);
                return r;
        }
        snprintf(c->up.host, sizeof(c->up.host), "%s", to->host);
        c->up.port = to->port;
        c->up.tls = tls;
        return 0;
}

/* ---- the request loop ------------------------------------------------------------ */

static pol_policy *allow_all;
static pthread_once_t allow_all_once = PTHREAD_ONCE_INIT;

static void allow_all_init(void) {
        (void)pol_policy_parse(NULL, &allow_all, NULL);
}

/* The forwardURL target. Its host was chosen by the policy's author, not
 * the sandbox, so it is judged only against what is never reachable: the
 * caller's never-list and the always-forbidden ranges (an allow-all
 * policy gives exactly that judgement). */
static int forward_target(conn *c, const pol_rule *rule, pol_proxy_target *ft) {
        pol_addr a;
        memset(ft, 0, sizeof(*ft));
        ft->live = c->t->live; /* a cut connection dials no forward target either */
        snprintf(ft->host, sizeof(ft->host), "%s", rule->forward_host);
        ft->port = rule->forward_port;
        pthread_once(&allow_all_once, allow_all_init);
        if (!allow_all)
                return -ENOMEM;
        if (pol_addr_parse(rule->forward_host, &a) == 0) {
                ft->is_addr = true;
                if (!pol_check_address(allow_all, &a, c->env->never, c->env->n_never, &ft->verdict))
                        return -EACCES;
                ft->addrs[0] = a;
                ft->n_addrs = 1;
                return 0;
        }
        pol_proxy_env e = *c->env;
        e.policy = allow_all;
        return pol_proxy_resolve(&e, rule->forward_host, rule->forward_port, ft);
}

static bool host_ok(const pol_proxy_target *t, const char *text, uint16_t explicit_port) {
        pol_host h;
        pol_addr ta;
        const char *why;
        if (pol_host_parse(text, &h, &why) < 0)
                return false;
        uint16_t port = explicit_port ? explicit_port : h.port;
        if (port && port != t->port)
                return false;
        if (t->is_addr)
                return h.is_addr && pol_addr_parse(t->host, &ta) == 0 && ta.family == h.addr.family &&
                       memcmp(ta.bytes, h.addr.bytes, sizeof(ta.bytes)) == 0;
        return !h.is_addr && streq(h.name, t->host);
}

/* Splits the request target into origin-form; checks an absolute-form
 * target's authority against t. -EBADMSG for a malformed target,
 * -EACCES (with the host in uhost) for another host. */
static int parse_target(conn *c, target *tg, char *uhost, size_t uhost_size) {
        const char *url = c->req.url;
        sbuf o = {};
        if (!url)
                return -EBADMSG;
        if (url[0] == '/' || streq(url, "*"))
                sbuf_add(&o, url, strcspn(url, "#"));
        else {
                struct http_parser_url u;
                http_parser_url_init(&u);
                if (http_parser_parse_url(url, c->req.url_len, 0, &u) != 0 || !(u.field_set & (1 << UF_SCHEMA)) ||
                    !(u.field_set & (1 << UF_HOST)) || (u.field_set & (1 << UF_USERINFO)))
                        return -EBADMSG;
                size_t hl = u.field_data[UF_HOST].len;
                snprintf(uhost, uhost_size, "%.*s", (int)(hl < uhost_size ? hl : uhost_size - 1),
                         url + u.field_data[UF_HOST].off);
                if (!host_ok(c->t, uhost, u.port))
                        return -EACCES;
                if (u.field_set & (1 << UF_PATH))
                        sbuf_add(&o, url + u.field_data[UF_PATH].off, u.field_data[UF_PATH].len);
                else
                        sbuf_str(&o, "/");
                if (u.field_set & (1 << UF_QUERY)) {
                        sbuf_str(&o, "?");
                        sbuf_add(&o, url + u.field_data[UF_QUERY].off, u.field_data[UF_QUERY].len);
                }
        }
        if (o.oom || !o.p) {
                free(o.p);
                return -ENOMEM;
        }
        tg->origin = o.p;
        tg->path_len = strcspn(o.p, "?");
        tg->query = o.p[tg->path_len] == '?' ? o.p + tg->path_len + 1 : NULL;
        tg->query_len = tg->query ? strlen(tg->query) : 0;
        return 0;
}

/* Fields of the client's request that never go upstream: hop-by-hop
 * (RFC 9110 §7.6.1), credentials meant for this proxy, Host (rewritten),
 * Expect (answered here) and the forwarding headers only the proxy sets
 * (a sandbox could otherwise spoof them to a forward target). */
static bool req_dropped(const msg *m, const char *name) {
        static const char *const drop[] = { "connection", "keep-alive", "proxy-connection", "proxy-authorization",
                                            "proxy-authenticate", "te", "trailer", "upgrade", "host", "expect" };
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                if (strcasecmp(name, drop[i]) == 0)
                        return true;
        if (strncasecmp(name, "x-sandbox-forwarded-", 20) == 0)
                return true;
        /* Fields the Connection header names are hop-by-hop too, except the
         * framing ones: dropping those would desynchronise the body. */
        if (strcasecmp(name, "content-length") == 0 || strcasecmp(name, "transfer-encoding") == 0)
                return false;
        size_t nl = strlen(name);
        for (size_t i = 0; i < m->n; i++) {
                if (strcasecmp(m->f[i].name, "connection") != 0)
                        continue;
                for (const char *v = fvalue(&m->f[i]); *v;) {
                        v += strspn(v, " \t,");
                        size_t l = strcspn(v, " \t,");
                        if (l == nl && strncasecmp(v, name, l) == 0)
                                return true;
                        v += l;
                }
        }
        return false;
}

static bool transform_sets(const pol_rule *rule, const char *name, size_t from) {
        for (size_t k = from; rule && rule->kind == POL_RULE_TRANSFORM && k < rule->n_transforms; k++)
                for (size_t h = 0; h < rule->transforms[k].n_headers; h++)
                        if (strcasecmp(rule->transforms[k].headers[h].name, name) == 0)
                                return true;
        return false;
}

static void add_authority(sbuf *b, const char *host, uint16_t port, bool tls) {
        bool v6 = strchr(host, ':') != NULL;
        sbuf_printf(b, "%s%s%s", v6 ? "[" : "", host, v6 ? "]" : "");
        if (port != (tls ? 443 : 80))
                sbuf_printf(b, ":%u", port);
}

/* The request head sent upstream. A transform removes every field of a
 * name it sets and adds its value once; a later transform of the same
 * rule overrides an earlier one. */
static int build_request(conn *c, const target *tg, const pol_rule *rule, const pol_proxy_target *fwd, sbuf *b) {
        const msg *m = &c->req;
        sbuf_printf(b, "%s ", http_method_str(m->p.method));
        if (fwd) {
                size_t fl = strlen(rule->forward_path);
                while (fl > 0 && rule->forward_path[fl - 1] == '/')
                        fl--;
                sbuf_add(b, rule->forward_path, fl);
        }
        sbuf_str(b, tg->origin);
        sbuf_printf(b, " HTTP/1.%u\r\nhost: ", m->p.http_minor ? 1 : 0);
        if (fwd)
                add_authority(b, fwd->host, fwd->port, true);
        else
                add_authority(b, c->t->host, c->t->port, c->tls);
        sbuf_str(b, "\r\n");
        for (size_t i = 0; i < m->n; i++) {
                if (req_dropped(m, m->f[i].name) || transform_sets(rule, m->f[i].name, 0) ||
                    strcasecmp(m->f[i].name, "transfer-encoding") == 0)
                        continue;
                sbuf_add(b, m->f[i].name, m->f[i].name_len);
                sbuf_str(b, ": ");
                sbuf_str(b, fvalue(&m->f[i]));
                sbuf_str(b, "\r\n");
        }
        for (size_t k = 0; rule && rule->kind == POL_RULE_TRANSFORM && k < rule->n_transforms; k++)
                for (size_t h = 0; h < rule->transforms[k].n_headers; h++) {
                        const pol_header *ph = &rule->transforms[k].headers[h];
                        if (!transform_sets(rule, ph->name, k + 1))
                                sbuf_printf(b, "%s: %s\r\n", ph->name, ph->value);
                }
        if (fwd) {
                sbuf_printf(b, "x-sandbox-forwarded-host: %s\r\nx-sandbox-forwarded-scheme: %s\r\n"
                               "x-sandbox-forwarded-port: %u\r\nx-sandbox-forwarded-path: ",
                            c->t->host, c->tls ? "https" : "http", c->t->port);
                sbuf_str(b, tg->origin);
                sbuf_str(b, "\r\n");
        }
        /* The body is re-framed as plain chunked (forward_body). */
        if (m->p.flags & F_CHUNKED)
                sbuf_str(b, "transfer-encoding: chunked\r\n");
        sbuf_str(b, "\r\n");
        return b->oom ? -ENOMEM : 0;
}

static void rule_name(const conn *c, int idx, char *buf, size_t size) {
        const pol_pattern *p = &c->t->domain->pattern;
        if (p->port)
                snprintf(buf, size, "allow[\"%s:%u\"][%d]", p->text, p->port, idx);
        else
                snprintf(buf, size, "allow[\"%s\"][%d]", p->text, idx);
}

/* Reads the next request head into c->req. 1: head ready; 0: the client
 * is done (EOF or idle timeout between requests); negative errno. */
static int read_head(conn *c) {
        msg_clear(&c->req);
        for (;;) {
                if (c->off < c->len) {
                        ssize_t used = msg_feed(&c->req, c->cbuf + c->off, c->len - c->off);
                        if (used < 0)
                                return (int)used;
                        c->off += (size_t)used;
                        if (c->req.headers_done)
                                return 1;
                }
                c->off = c->len = 0;
                ssize_t r = pol_stream_read(c->client, c->cbuf, c->cap);
                if (r == 0 || r == -ETIMEDOUT)
                        return 0;
                if (r < 0)
                        return (int)r;
                c->len = (size_t)r;
        }
}

/* Answers with an error page and reports it; the connection then ends. */
static int answer(conn *c, int status, const char *reason, const char *text) {
        event(c, reason, c->t->host, c->t->port, NULL, "%s", text);
        (void)pol_http_write_error(c->client, status, text);
        return 0;
}

/* The checks on one request head: framing, method, target, Host. 1 when
 * the request may proceed; 0 when it was answered (refused). */
static int check_request(conn *c, target *tg) {
        char uhost[POL_NAME_MAX + 1] = "", why[POL_NAME_MAX * 2 + 96];
        size_t n_host;
        const field *host = find_field(&c->req, "host", &n_host);
        if (head_check(&c->req, true) < 0)
                return answer(c, 400, "framing", "ambiguous or malformed request framing (RFC 9112 §6.3, §11.2)");
        if (c->req.p.method == HTTP_CONNECT)
                return answer(c, 400, "bad-request", "CONNECT is not allowed inside a proxied connection");
        if (!host && c->req.p.http_minor >= 1)
                return answer(c, 400, "bad-request", "an HTTP/1.1 request must carry a Host header");
        int r = parse_target(c, tg, uhost, sizeof(uhost));
        if (r == -ENOMEM)
                return r;
        if (r == -EBADMSG)
                return answer(c, 400, "bad-request", "malformed request target");
        const char *bad = r == -EACCES ? uhost : host && !host_ok(c->t, fvalue(host), 0) ? fvalue(host) : NULL;
        if (bad) {
                char clean[POL_NAME_MAX + 1];
                clean_copy(clean, sizeof(clean), bad);
                snprintf(why, sizeof(why), "This connection was opened for %s:%u; a request on it named %s.",
                         c->t->host, c->t->port, clean);
                event(c, "host-mismatch", clean, c->t->port, NULL, "%s", why);
                (void)pol_http_write_403(c->client, c->env->policy_name, clean, NULL, why);
                return 0;
        }
        return 1;
}

/* Sends the body of the current request upstream: a Content-Length body
 * as the raw bytes the parser accepted, a chunked one re-framed by the
 * parser callbacks (reframe_write). -EBADMSG (with c->client_bad set)
 * when the client's framing is malformed: that is the client's error. */
static int forward_body(conn *c) {
        bool chunked = c->req.p.flags & F_CHUNKED;
        c->client_bad = false;
        c->req.reframe = chunked ? c : NULL;
        c->req.reframe_err = 0;
        while (!c->req.done) {
                if (c->off == c->len) {
                        c->off = c->len = 0;
                        ssize_t r = pol_stream_read(c->client, c->cbuf, c->cap);
                        if (r <= 0)
                                return r < 0 ? (int)r : -ECONNRESET;
                        c->len = (size_t)r;
                }
                ssize_t used = msg_feed(&c->req, c->cbuf + c->off, c->len - c->off);
                if (used < 0 && c->req.reframe_err < 0)
                        return c->req.reframe_err;
                if (used < 0) {
                        c->client_bad = true;
                        return (int)used;
                }
                int r = chunked ? 0 : pol_stream_write_all(&c->up.s, c->cbuf + c->off, (size_t)used);
                if (r < 0)
                        return r;
                c->off += (size_t)used;
        }
        return 0;
}

static int upstream_failed(conn *c, const pol_proxy_target *to, int r, const char *why) {
        char text[600];
        snprintf(text, sizeof(text), "The proxy could not reach %s port %u: %s", to->host, to->port, why);
        if (r == -ETIMEDOUT)
                return answer(c, 504, "upstream-timeout", text);
        return answer(c, 502, r == -EPROTO ? "upstream-tls" : "upstream-unreachable", text);
}

/* Connects (or reuses), sends head and body, relays the response. A
 * reused connection the upstream had closed meanwhile is retried once on
 * a new one when the request had no body and no byte came back. */
static int exchange(conn *c, const pol_proxy_target *to, bool tls, const sbuf *head, bool *ret_keep) {
        char why[400] = "";
        bool head_req = c->req.p.method == HTTP_HEAD, sent = false;
        const field *expect = find_field(&c->req, "expect", NULL);
        for (int attempt = 0;; attempt++) {
                bool reused = c->up.s.fd >= 0 && streq(c->up.host, to->host) && c->up.port == to->port &&
                              c->up.tls == tls && up_in_sync(&c->up);
                int r = reused ? 0 : up_open(c, to, tls, why, sizeof(why));
                if (r < 0)
                        return upstream_failed(c, to, r, why);
                c->up.got = 0;
                bool bodiless = c->req.done;
                r = pol_stream_write_all(&c->up.s, head->p, head->len);
                if (r >= 0 && !c->req.done && expect && strcasecmp(fvalue(expect), "100-continue") == 0)
                        r = pol_stream_write_all(c->client, "HTTP/1.1 100 Continue\r\n\r\n", 25) < 0 ? -EPIPE : 0;
                if (r >= 0)
                        r = forward_body(c);
                if (r >= 0)
                        r = relay_response(c, head_req, &sent, ret_keep);
                size_t got = c->up.got;
                if (r > 0 || r < 0)
                        up_close(&c->up);
                if (r >= 0)
                        return 1;
                if (c->client_bad)
                        return answer(c, 400, "framing", "malformed request body framing (RFC 9112 §7.1)");
                if (sent)
                        return r;
                /* Only a connection that closed without a byte of answer is
                 * retried: anything else may have been acted upon. */
                if (reused && bodiless && attempt == 0 && r != -ETIMEDOUT && got == 0)
                        continue;
                snprintf(why, sizeof(why), "%s", r == -ETIMEDOUT ? "no answer in time"
                                                                 : "the connection failed or the answer was not valid HTTP");
                return upstream_failed(c, to, r == -ETIMEDOUT ? r : -EIO, why);
        }
}

/* One request: check, choose the route, exchange. 1: the connection may
 * carry another request; 0: it ends normally; negative errno. */
static int serve_request(conn *c) {
        target tg = {};
        pol_proxy_target fwd;
        int idx = -1, r = read_head(c);
        if (r == -EBADMSG || r == -E2BIG)
                return answer(c, r == -E2BIG ? 431 : 400, "framing",
                              r == -E2BIG ? "request head too large" : "malformed or ambiguous request framing");
        if (r <= 0)
                return r;
        if ((r = check_request(c, &tg)) <= 0)
                goto out;
        /* The parser stopped on the head's last LF; consuming it ends a
         * bodiless message and rejects what the head check let through. */
        ssize_t used = msg_feed(&c->req, c->cbuf + c->off, 1);
        if (used < 0) {
                r = answer(c, 400, "framing", "malformed or ambiguous request framing");
                goto out;
        }
        c->off += (size_t)used;
        const pol_rule *rule = first_rule(c, http_method_str(c->req.p.method), &tg, &idx);
        char rname[POL_NAME_MAX + 32], text[POL_NAME_MAX * 2 + 256];
        if (rule)
                rule_name(c, idx, rname, sizeof(rname));
        if (rule && rule->kind == POL_RULE_TRANSFORM && !c->tls) {
                /* The injected value is a credential: it never crosses a
                 * link the sandbox (or anyone on the path) could read. */
                snprintf(text, sizeof(text),
                         "Rule %s adds headers to this request, which is only done over TLS: use https://%s/.",
                         rname, c->t->host);
                /* The event's rule names the rule (index and pattern),
                 * never a value it would inject. */
                pol_verdict v = { .allow = false, .layer = POL_LAYER_DOMAIN, .rule = idx };
                snprintf(v.detail, sizeof(v.detail), "%.*s", (int)sizeof(v.detail) - 1, rname);
                event(c, "transform-needs-tls", c->t->host, c->t->port, &v, "%s", text);
                (void)pol_http_write_403(c->client, c->env->policy_name, c->t->host, &v, text);
                r = 0;
                goto out;
        }
        bool forward = rule && rule->kind == POL_RULE_FORWARD;
        if (forward && (r = forward_target(c, rule, &fwd)) < 0) {
                snprintf(text, sizeof(text), "Rule %s forwards to %s port %u, which %s.", rname, rule->forward_host,
                         rule->forward_port, r == -EACCES ? "is never reachable from a sandbox" : "did not resolve");
                r = answer(c, 502, "forward-denied", text);
                goto out;
        }
        sbuf head = {};
        bool keep = false;
        r = build_request(c, &tg, rule, forward ? &fwd : NULL, &head);
        if (r >= 0)
                r = exchange(c, forward ? &fwd : c->t, forward || c->tls, &head, &keep);
        if (head.p)
                explicit_bzero(head.p, head.len); /* it may hold an injected value */
        free(head.p);
        if (r > 0 && !keep)
                r = 0;
out:
        free(tg.origin);
        return r;
}

int pol_http_serve(const pol_proxy_env *env, pol_stream *client, const pol_proxy_target *t, bool upstream_tls,
                   const uint8_t *pre, size_t n_pre) {
        if (!env || !client || !t)
                return -EINVAL;
        _cleanup_free_ conn *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->env = env;
        c->t = t;
        c->client = client;
        c->tls = upstream_tls;
        c->up.s.fd = -1;
        c->cap = n_pre > IO_CHUNK ? n_pre : IO_CHUNK;
        if (!(c->cbuf = malloc(c->cap)))
                return -ENOMEM;
        if (n_pre)
                memcpy(c->cbuf, pre, n_pre);
        c->len = n_pre;
        msg_init(&c->req, HTTP_REQUEST);
        collect_secrets(c);
        (void)pol_proxy_set_timeouts(client->fd, env->io_timeout_ms);
        int r;
        while ((r = serve_request(c)) > 0)
                ;
        up_close(&c->up);
        msg_clear(&c->req);
        free_secrets(c);
        free(c->cbuf);
        return r;
}
