/* The DNS filter of sandbox-netd (see dns.h for what is forwarded and
 * why): query judgement, the sanitised upstream query, answer checking and
 * pinning, and the replies (denials with an RFC 8914 Extended DNS Error).
 *
 * Messages are parsed and built with ldns only. Nothing here touches a
 * socket, logs above debug or keeps state between calls: everything a
 * forwarded query needs later travels in its pol_dns_query. */
#include <string.h>
#include <sys/param.h>
#include <sys/random.h>
#include <arpa/inet.h>
#include <ldns/ldns.h>
#include "policy/dns.h"
#include "policy/policy.h"

/* Longest CNAME chain followed inside one answer; resolvers stop around 8-16
 * (unbound: 11, BIND: 16). A longer chain just ends the walk. */
#define MAX_CHAIN 16

/* The types sent upstream. Each returns names or text, never an address the
 * client would use without a further A/AAAA query, except A and AAAA, whose
 * addresses are judged and pinned. */
static const uint16_t forwarded_types[] = {
        LDNS_RR_TYPE_A, LDNS_RR_TYPE_AAAA, LDNS_RR_TYPE_CNAME,
        LDNS_RR_TYPE_TXT, LDNS_RR_TYPE_MX, LDNS_RR_TYPE_SRV,
};

static void ldns_pkt_freep(ldns_pkt **p) {
        if (*p)
                ldns_pkt_free(*p);
}
static void ldns_rr_list_freep(ldns_rr_list **l) {
        if (*l)
                ldns_rr_list_free(*l); /* the list only: its records are borrowed */
}
#define _cleanup_pkt_ _cleanup_(ldns_pkt_freep)
#define _cleanup_rr_list_ _cleanup_(ldns_rr_list_freep)

void pol_dns_result_done(pol_dns_result *r) {
        if (!r)
                return;
        free(r->packet);
        free(r->pins);
        memset(r, 0, sizeof(*r));
}

const char *pol_dns_type_name(uint16_t qtype, char *buf, size_t size) {
        const ldns_rr_descriptor *d = ldns_rr_descript(qtype);
        if (d && d->_name)
                snprintf(buf, size, "%s", d->_name);
        else
                snprintf(buf, size, "TYPE%u", qtype);
        return buf;
}

/* ---- replies ---------------------------------------------------------------- */

/* A bare header reply for a query ldns could not parse or will not read
 * (bad opcode): the id, opcode and RD echoed, no sections (RFC 1035 §4.1.1
 * lets a FORMERR carry no question). */
static int header_reply(const uint8_t *pkt, size_t len, uint8_t rcode, pol_dns_result *ret) {
        uint8_t *h = calloc(1, LDNS_HEADER_SIZE);
        if (!h)
                return -ENOMEM;
        h[0] = pkt[0];
        h[1] = pkt[1];
        h[2] = 0x80 | (len > 2 ? (pkt[2] & 0x79) : 0); /* QR, opcode, RD */
        h[3] = rcode & 0x0f;
        ret->action = POL_DNS_REPLY;
        ret->packet = h;
        ret->len = LDNS_HEADER_SIZE;
        return 0;
}

/* Adds the OPT RR of a reply: our UDP size and, when code >= 0, one EDE
 * option (INFO-CODE, then EXTRA-TEXT without a NUL, RFC 8914 §2). */
static int add_edns(ldns_pkt *pkt, int code, const char *text) {
        ldns_pkt_set_edns_udp_size(pkt, POL_DNS_UDP_MAX);
        if (code < 0)
                return 0;
        size_t tlen = text ? strnlen(text, POL_DNS_EDE_TEXT_MAX) : 0;
        uint8_t data[2 + POL_DNS_EDE_TEXT_MAX];
        data[0] = (uint8_t)(code >> 8);
        data[1] = (uint8_t)code;
        if (tlen)
                memcpy(data + 2, text, tlen);
        ldns_edns_option_list *list = ldns_edns_option_list_new();
        ldns_edns_option *opt = ldns_edns_new_from_data(LDNS_EDNS_EDE, 2 + tlen, data);
        if (!list || !opt || !ldns_edns_option_list_push(list, opt)) {
                ldns_edns_deep_free(opt);
                ldns_edns_option_list_deep_free(list);
                return -ENOMEM;
        }
        ldns_pkt_set_edns_option_list(pkt, list);
        return 0;
}

/* Builds the reply to q: rcode, the question as the client sent it, the
 * given answer records (cloned), TC, and an OPT RR (with EDE `code` when
 * >= 0) when the client used EDNS. */
static int build_reply(const pol_dns_query *q, uint8_t rcode, int code, const char *text,
                       const ldns_rr_list *answer, bool tc, pol_dns_result *ret) {
        _cleanup_pkt_ ldns_pkt *pkt = ldns_pkt_new();
        ldns_rr *qrr = ldns_rr_new();
        ldns_rdf *owner = ldns_dname_new_frm_data((uint16_t)q->qname_len, q->qname_wire);
        if (!pkt || !qrr || !owner) {
                ldns_rr_free(qrr);
                ldns_rdf_deep_free(owner);
                return -ENOMEM;
        }
        ldns_rr_set_owner(qrr, owner);
        ldns_rr_set_type(qrr, q->qtype);
        ldns_rr_set_class(qrr, q->qclass);
        ldns_rr_set_question(qrr, true);
        if (!ldns_pkt_push_rr(pkt, LDNS_SECTION_QUESTION, qrr)) {
                ldns_rr_free(qrr);
                return -ENOMEM;
        }
        ldns_pkt_set_id(pkt, q->client_id);
        ldns_pkt_set_qr(pkt, true);
        ldns_pkt_set_rd(pkt, q->rd);
        ldns_pkt_set_ra(pkt, true);
        ldns_pkt_set_tc(pkt, tc);
        ldns_pkt_set_opcode(pkt, LDNS_PACKET_QUERY);
        ldns_pkt_set_rcode(pkt, rcode);
        for (size_t i = 0; answer && i < ldns_rr_list_rr_count(answer); i++) {
                ldns_rr *rr = ldns_rr_clone(ldns_rr_list_rr(answer, i));
                if (!rr || !ldns_pkt_push_rr(pkt, LDNS_SECTION_ANSWER, rr)) {
                        ldns_rr_free(rr);
                        return -ENOMEM;
                }
        }
        if (q->edns && add_edns(pkt, code, text) < 0)
                return -ENOMEM;
        uint8_t *wire = NULL;
        size_t size = 0;
        if (ldns_pkt2wire(&wire, pkt, &size) != LDNS_STATUS_OK)
                return free(wire), -ENOMEM;
        ret->action = POL_DNS_REPLY;
        ret->packet = wire;
        ret->len = size;
        return 0;
}

/* A policy denial: NXDOMAIN (a name) or REFUSED (an answer) with EDE 15. */
static int deny(const pol_dns_query *q, uint8_t rcode, const pol_verdict *v, pol_dns_result *ret) {
        ret->blocked = true;
        ret->verdict = *v;
        return build_reply(q, rcode, POL_DNS_EDE_BLOCKED, ret->message, NULL, false, ret);
}

/* The EXTRA-TEXT of a denial of `subject` (a name, an address, or "answer
 * for NAME"), phrased with the field of networkPolicy that decided. */
static void deny_message(char *buf, size_t size, const char *subject, const pol_verdict *v, bool addr) {
        const char *pre = "blocked by sandbox policy: ";
        switch (v->layer) {
        case POL_LAYER_MODE:
                snprintf(buf, size, "%s%s: networkPolicy is \"deny-all\"", pre, subject);
                break;
        case POL_LAYER_INVALID_HOST:
                snprintf(buf, size, "%s%s is not a valid host name (%s)", pre, subject, v->detail);
                break;
        case POL_LAYER_DOMAIN:
        case POL_LAYER_DEFAULT:
                if (addr) /* a literal no subnets.allow entry holds */
                        snprintf(buf, size, "%s%s: %s", pre, subject, v->detail);
                else
                        snprintf(buf, size, "%s%s is not in networkPolicy.allow", pre, subject);
                break;
        case POL_LAYER_SUBNET_DENY:
        case POL_LAYER_SUBNET_ALLOW:
                snprintf(buf, size, "%s%s (networkPolicy.%s)", pre, subject, v->detail);
                break;
        default:
                snprintf(buf, size, "%s%s: %s", pre, subject, v->detail);
                break;
        }
}

/* ---- queries ---------------------------------------------------------------- */

static bool is_forwarded(uint16_t t) {
        for (size_t i = 0; i < ELEMENTSOF(forwarded_types); i++)
                if (forwarded_types[i] == t)
                        return true;
        return false;
}

/* Fills q from a parsed query. False when it is not one plain question. */
static bool read_question(const ldns_pkt *pkt, bool tcp, pol_dns_query *q) {
        if (ldns_pkt_qdcount(pkt) != 1 || ldns_pkt_ancount(pkt) != 0 || ldns_pkt_nscount(pkt) != 0)
                return false;
        const ldns_rr *qrr = ldns_rr_list_rr(ldns_pkt_question(pkt), 0);
        const ldns_rdf *owner = qrr ? ldns_rr_owner(qrr) : NULL;
        if (!owner || ldns_rdf_size(owner) > sizeof(q->qname_wire) || ldns_rdf_size(owner) == 0)
                return false;
        q->client_id = ldns_pkt_id(pkt);
        q->qtype = (uint16_t)ldns_rr_get_type(qrr);
        q->qclass = (uint16_t)ldns_rr_get_class(qrr);
        q->rd = ldns_pkt_rd(pkt);
        q->edns = ldns_pkt_edns(pkt);
        q->qname_len = ldns_rdf_size(owner);
        memcpy(q->qname_wire, ldns_rdf_data(owner), q->qname_len);
        if (tcp)
                q->max_reply = POL_DNS_TCP_MAX;
        else if (q->edns)
                q->max_reply = MIN(MAX(ldns_pkt_edns_udp_size(pkt), POL_DNS_UDP_PLAIN), POL_DNS_UDP_MAX);
        else
                q->max_reply = POL_DNS_UDP_PLAIN;
        return true;
}

/* The query sent upstream: the question alone (client EDNS options such as
 * Client Subnet and cookies stay here), in lower case (the case of the
 * client's letters would otherwise be a channel to the upstream resolver,
 * ~1 bit a letter), RD, our EDNS size, a fresh id. */
static int build_upstream(pol_dns_query *q, pol_dns_result *ret) {
        ldns_rdf *name = ldns_dname_new_frm_data((uint16_t)q->qname_len, q->qname_wire);
        if (!name)
                return -ENOMEM;
        ldns_dname2canonical(name);
        _cleanup_pkt_ ldns_pkt *pkt = ldns_pkt_query_new(name, q->qtype, q->qclass, LDNS_RD);
        if (!pkt)
                return -ENOMEM;
        if (getrandom(&q->upstream_id, sizeof(q->upstream_id), 0) != sizeof(q->upstream_id))
                return -EIO;
        ldns_pkt_set_id(pkt, q->upstream_id);
        ldns_pkt_set_edns_udp_size(pkt, POL_DNS_UDP_MAX);
        uint8_t *wire = NULL;
        size_t size = 0;
        if (ldns_pkt2wire(&wire, pkt, &size) != LDNS_STATUS_OK)
                return free(wire), -ENOMEM;
        ret->action = POL_DNS_FORWARD;
        ret->packet = wire;
        ret->len = size;
        return 0;
}

/* Judges the question name of q (rules 2, 3); fills ret with the reply
 * and returns 1 when it is denied or an address, 0 when the name is allowed
 * (q->name then holds it normalised), or a negative errno. */
static int judge_name(const pol_policy *p, const pol_cidr *never, size_t n_never, pol_dns_query *q,
                      pol_dns_result *ret) {
        _cleanup_free_ char *text = NULL;
        ldns_rdf *rdf = ldns_dname_new_frm_data((uint16_t)q->qname_len, q->qname_wire);
        if (rdf)
                text = ldns_rdf2str(rdf);
        ldns_rdf_deep_free(rdf);
        if (!text)
                return -ENOMEM;
        pol_verdict v = { .allow = false, .rule = -1 };
        pol_host h;
        const char *why = NULL;
        bool parsed = pol_host_parse(text, &h, &why) == 0 && !h.port;
        if (parsed && h.is_addr)
                pol_addr_format(&h.addr, q->name, sizeof(q->name));
        else if (parsed)
                snprintf(q->name, sizeof(q->name), "%s", h.name);
        else /* printable (ldns escapes other bytes as \DDD), bounded */
                snprintf(q->name, sizeof(q->name), "%.*s", POL_NAME_MAX, text);

        if (!p || p->mode == POL_MODE_DENY_ALL) {
                v.layer = POL_LAYER_MODE; /* rule 2: DNS included */
                snprintf(v.detail, sizeof(v.detail), "deny-all");
        } else if (!parsed) {
                v.layer = POL_LAYER_INVALID_HOST;
                snprintf(v.detail, sizeof(v.detail), "%s", why ? why : "a port is not part of a name");
        } else if (h.is_addr) {
                /* Rule 3: an IP literal is judged as an address. It is never
                 * forwarded: no resolver has a zone for it. */
                if (pol_check_address(p, &h.addr, never, n_never, &v))
                        return build_reply(q, LDNS_RCODE_NXDOMAIN, -1, NULL, NULL, false, ret) ?: 1;
        } else if (pol_check_name(p, h.name, 0, &v)) {
                return 0;
        }
        deny_message(ret->message, sizeof(ret->message), q->name, &v, parsed && h.is_addr);
        return deny(q, LDNS_RCODE_NXDOMAIN, &v, ret) ?: 1;
}

int pol_dns_filter_query(const pol_policy *p, const pol_cidr *never, size_t n_never, const uint8_t *pkt,
                         size_t len, bool tcp, pol_dns_result *ret) {
        pol_dns_result r = {};
        _cleanup_pkt_ ldns_pkt *msg = NULL;
        int k;
        memset(ret, 0, sizeof(*ret));
        /* Never answer a response (reflection loops) or a packet too short to
         * carry an id. */
        if (!pkt || len < 3 || (pkt[2] & 0x80))
                return 0;
        if (len < LDNS_HEADER_SIZE || ldns_wire2pkt(&msg, pkt, len) != LDNS_STATUS_OK)
                return header_reply(pkt, len, LDNS_RCODE_FORMERR, ret);
        if (ldns_pkt_get_opcode(msg) != LDNS_PACKET_QUERY)
                return header_reply(pkt, len, LDNS_RCODE_NOTIMPL, ret);
        if (!read_question(msg, tcp, &r.query))
                return header_reply(pkt, len, LDNS_RCODE_FORMERR, ret);
        pol_dns_query *q = &r.query;
        char tn[16];
        if (q->qclass != LDNS_RR_CLASS_IN) {
                k = build_reply(q, LDNS_RCODE_REFUSED, POL_DNS_EDE_NOT_SUPPORTED,
                                "only class IN is answered by the sandbox DNS filter", NULL, false, &r);
        } else if ((k = judge_name(p, never, n_never, q, &r)) != 0) {
                k = k < 0 ? k : 0;
        } else if (q->qtype == LDNS_RR_TYPE_HTTPS || q->qtype == LDNS_RR_TYPE_SVCB) {
                /* NODATA: their address hints would bypass pinning. */
                k = build_reply(q, LDNS_RCODE_NOERROR, -1, NULL, NULL, false, &r);
        } else if (!is_forwarded(q->qtype)) {
                char text[96];
                snprintf(text, sizeof(text), "query type %s is not forwarded by the sandbox DNS filter",
                         pol_dns_type_name(q->qtype, tn, sizeof(tn)));
                k = build_reply(q, LDNS_RCODE_REFUSED, POL_DNS_EDE_NOT_SUPPORTED, text, NULL, false, &r);
        } else {
                k = build_upstream(q, &r);
        }
        if (k < 0) {
                pol_dns_result_done(&r);
                return k;
        }
        *ret = r;
        return 0;
}

int pol_dns_servfail(const pol_dns_query *q, pol_dns_result *ret) {
        memset(ret, 0, sizeof(*ret));
        ret->query = *q;
        int r = build_reply(q, LDNS_RCODE_SERVFAIL, -1, NULL, NULL, false, ret);
        if (r < 0)
                pol_dns_result_done(ret);
        return r;
}

/* ---- answers ---------------------------------------------------------------- */

static bool same_name(const ldns_rdf *a, const ldns_rdf *b) {
        return a && b && ldns_dname_compare(a, b) == 0; /* case-insensitive */
}

/* True when a is the response to q: QR, q's upstream id, q's question. */
static bool answers_query(const ldns_pkt *a, const pol_dns_query *q, const ldns_rdf *qname) {
        if (!ldns_pkt_qr(a) || ldns_pkt_id(a) != q->upstream_id || ldns_pkt_qdcount(a) != 1)
                return false;
        const ldns_rr *qrr = ldns_rr_list_rr(ldns_pkt_question(a), 0);
        return qrr && ldns_rr_get_type(qrr) == q->qtype && ldns_rr_get_class(qrr) == q->qclass &&
               same_name(ldns_rr_owner(qrr), qname);
}

/* Reads the address of an A or AAAA record of class IN: 1, 0 when rr is
 * another kind of record, -EBADMSG when its data has the wrong size. */
static int rr_addr(const ldns_rr *rr, pol_addr *ret) {
        ldns_rr_type t = ldns_rr_get_type(rr);
        if ((t != LDNS_RR_TYPE_A && t != LDNS_RR_TYPE_AAAA) || ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN)
                return 0;
        const ldns_rdf *d = ldns_rr_rd_count(rr) == 1 ? ldns_rr_rdf(rr, 0) : NULL;
        size_t want = t == LDNS_RR_TYPE_A ? 4 : 16;
        if (!d || ldns_rdf_size(d) != want)
                return -EBADMSG;
        *ret = (pol_addr){ .family = t == LDNS_RR_TYPE_A ? AF_INET : AF_INET6 };
        memcpy(ret->bytes, ldns_rdf_data(d), want);
        return 1;
}

/* Rule 6: judges every address of the answer section, on the chain or not,
 * one at a time so a denial can name the address. Returns 0 when all pass,
 * 1 with the denial in ret, or a negative errno (-EBADMSG: bad record). */
static int judge_addresses(const pol_policy *p, const pol_cidr *never, size_t n_never, const pol_dns_query *q,
                           const ldns_rr_list *ans, pol_dns_result *ret) {
        size_t n = 0;
        for (size_t i = 0; i < ldns_rr_list_rr_count(ans); i++) {
                pol_addr a;
                pol_verdict v;
                char subject[POL_NAME_MAX + 64], s[INET6_ADDRSTRLEN];
                int r = rr_addr(ldns_rr_list_rr(ans, i), &a);
                if (r <= 0) {
                        if (r < 0)
                                return r;
                        continue;
                }
                if (++n > POL_DNS_MAX_PINS)
                        return -EBADMSG;
                if (pol_check_resolved(p, q->name, 0, &a, 1, never, n_never, &v))
                        continue;
                snprintf(subject, sizeof(subject), "%s resolved to %s", q->name, pol_addr_format(&a, s, sizeof(s)));
                deny_message(ret->message, sizeof(ret->message), subject, &v, true);
                return deny(q, LDNS_RCODE_REFUSED, &v, ret) ?: 1;
        }
        return 0;
}

/* Walks the CNAME chain from the question name inside the answer section.
 * Fills chain (MAX_CHAIN entries, borrowed) and returns its length; a loop
 * or an overlong chain just ends it. */
static size_t walk_chain(const ldns_rr_list *ans, const ldns_rdf *qname, const ldns_rdf **chain) {
        size_t n = 0;
        chain[n++] = qname;
        while (n < MAX_CHAIN) {
                const ldns_rdf *next = NULL;
                for (size_t i = 0; i < ldns_rr_list_rr_count(ans) && !next; i++) {
                        const ldns_rr *rr = ldns_rr_list_rr(ans, i);
                        if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_CNAME && ldns_rr_rd_count(rr) == 1 &&
                            same_name(ldns_rr_owner(rr), chain[n - 1]))
                                next = ldns_rr_rdf(rr, 0);
                }
                for (size_t i = 0; next && i < n; i++)
                        if (same_name(chain[i], next))
                                next = NULL;
                if (!next)
                        break;
                chain[n++] = next;
        }
        return n;
}

static bool on_chain(const ldns_rdf *name, const ldns_rdf **chain, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (same_name(name, chain[i]))
                        return true;
        return false;
}

static int add_pin(pol_dns_result *ret, const pol_addr *a, uint32_t ttl) {
        ttl = MAX(ttl, (uint32_t)POL_DNS_TTL_FLOOR);
        for (size_t i = 0; i < ret->n_pins; i++)
                if (ret->pins[i].addr.family == a->family && !memcmp(ret->pins[i].addr.bytes, a->bytes, 16)) {
                        ret->pins[i].ttl = MAX(ret->pins[i].ttl, ttl);
                        return 0;
                }
        if (!ret->pins && !(ret->pins = calloc(POL_DNS_MAX_PINS, sizeof(*ret->pins))))
                return -ENOMEM;
        ret->pins[ret->n_pins++] = (pol_dns_pin){ .addr = *a, .ttl = ttl };
        return 0;
}

/* Picks the records released to the client (the chain's CNAMEs and the
 * asked type on the chain, TTLs capped in place) into `out` (borrowed) and
 * the addresses among them into ret->pins. */
static int select_records(const pol_dns_query *q, ldns_rr_list *ans, const ldns_rdf *qname, ldns_rr_list *out,
                          pol_dns_result *ret) {
        const ldns_rdf *chain[MAX_CHAIN];
        size_t n = walk_chain(ans, qname, chain);
        for (size_t i = 0; i < ldns_rr_list_rr_count(ans); i++) {
                ldns_rr *rr = ldns_rr_list_rr(ans, i);
                ldns_rr_type t = ldns_rr_get_type(rr);
                pol_addr a;
                if (ldns_rr_get_class(rr) != q->qclass || (t != LDNS_RR_TYPE_CNAME && t != q->qtype) ||
                    !on_chain(ldns_rr_owner(rr), chain, n))
                        continue;
                ldns_rr_set_ttl(rr, MIN(ldns_rr_ttl(rr), (uint32_t)POL_DNS_TTL_CAP));
                if (!ldns_rr_list_push_rr(out, rr))
                        return -ENOMEM;
                if (rr_addr(rr, &a) > 0 && add_pin(ret, &a, ldns_rr_ttl(rr)) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* The reply for an accepted NOERROR answer, or an empty one with TC when it
 * does not fit the client's transport (then nothing is pinned). */
static int release(const pol_dns_query *q, ldns_pkt *a, const ldns_rdf *qname, pol_dns_result *ret) {
        _cleanup_(ldns_rr_list_freep) ldns_rr_list *out = ldns_rr_list_new();
        if (!out)
                return -ENOMEM;
        int r = select_records(q, ldns_pkt_answer(a), qname, out, ret);
        if (r >= 0)
                r = build_reply(q, LDNS_RCODE_NOERROR, -1, NULL, out, false, ret);
        if (r < 0 || ret->len <= q->max_reply)
                return r;
        free(ret->packet);
        free(ret->pins);
        ret->packet = NULL;
        ret->pins = NULL;
        ret->n_pins = 0;
        return build_reply(q, LDNS_RCODE_NOERROR, -1, NULL, NULL, true, ret);
}

int pol_dns_filter_answer(const pol_policy *p, const pol_cidr *never, size_t n_never, const pol_dns_query *q,
                          const uint8_t *pkt, size_t len, pol_dns_result *ret) {
        pol_dns_result r = { .query = *q };
        _cleanup_pkt_ ldns_pkt *a = NULL;
        pol_verdict v;
        int k;
        memset(ret, 0, sizeof(*ret));
        /* A spoof or a stray costs no parse: id and QR first. */
        if (!pkt || len < LDNS_HEADER_SIZE || !(pkt[2] & 0x80) || ((pkt[0] << 8) | pkt[1]) != q->upstream_id)
                return -EBADMSG;
        ldns_rdf *qname = ldns_dname_new_frm_data((uint16_t)q->qname_len, q->qname_wire);
        if (!qname)
                return -ENOMEM;
        if (ldns_wire2pkt(&a, pkt, len) != LDNS_STATUS_OK)
                k = build_reply(q, LDNS_RCODE_SERVFAIL, -1, NULL, NULL, false, &r);
        else if (!answers_query(a, q, qname))
                k = -EBADMSG;
        else if (!pol_check_name(p, q->name, 0, &v)) {
                /* The policy changed while the query was out (rule 9). */
                deny_message(r.message, sizeof(r.message), q->name, &v, false);
                k = deny(q, LDNS_RCODE_NXDOMAIN, &v, &r);
        } else if (ldns_pkt_tc(a))
                k = build_reply(q, q->max_reply >= POL_DNS_TCP_MAX ? LDNS_RCODE_SERVFAIL : LDNS_RCODE_NOERROR, -1,
                                NULL, NULL, q->max_reply < POL_DNS_TCP_MAX, &r);
        else if (ldns_pkt_get_rcode(a) != LDNS_RCODE_NOERROR)
                k = build_reply(q, ldns_pkt_get_rcode(a), -1, NULL, NULL, false, &r);
        else if ((k = judge_addresses(p, never, n_never, q, ldns_pkt_answer(a), &r)) == 0)
                k = release(q, a, qname, &r);
        else if (k == -EBADMSG)
                k = build_reply(q, LDNS_RCODE_SERVFAIL, -1, NULL, NULL, false, &r);
        ldns_rdf_deep_free(qname);
        if (k < 0) {
                pol_dns_result_done(&r);
                return k;
        }
        *ret = r;
        return 0;
}
