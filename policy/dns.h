/* The DNS filter of sandbox-netd (DESIGN §5.1 rules 2, 3, 6 and §5.2), as a
 * library with no sockets: a query packet from the sandbox goes in, and out
 * comes either a reply to send back (a denial, an error, a local answer) or
 * a sanitised query to send upstream; the upstream answer goes in, and out
 * comes the reply to release plus the addresses to pin first.
 *
 * Threat: the sandbox writes every query byte and the upstream (or a spoofer
 * racing it) writes every answer byte. Both are parsed with ldns, which
 * bounds name lengths and compression pointers; every malformed packet
 * becomes FORMERR (queries) or SERVFAIL (answers), never a crash.
 *
 * What is forwarded (everything else is answered here, never sent out):
 *   - QTYPE A, AAAA, CNAME, TXT, MX, SRV, class IN, opcode QUERY, for a
 *     question name the policy allows (rule 3: the QUESTION name decides;
 *     CNAME targets inside the answer are not judged as names, because a
 *     CDN alias is the normal case, but every address they lead to is).
 *   - HTTPS and SVCB (RFC 9460) get an empty NOERROR answer: their
 *     ipv4hint/ipv6hint addresses would reach the client without being
 *     judged or pinned; clients fall back to A/AAAA, which are.
 *   - ANY (RFC 8482 lets a server decline it) and every other type or class
 *     get REFUSED with EDE 21 "Not Supported" naming the type.
 *   - Opcodes other than QUERY get NOTIMP; anything ldns cannot parse, or
 *     that is not exactly one question, FORMERR; responses are dropped.
 *   - A question that is an IP literal (127.0.0.1, 0x7f.1) is judged as an
 *     address (rule 3) and never forwarded: NXDOMAIN, with EDE 15 when the
 *     address is forbidden.
 *   - A denied name gets NXDOMAIN with EDE 15 "Blocked" (RFC 8914) whose
 *     EXTRA-TEXT names the policy and the name; deny-all denies every name.
 *
 * An upstream answer is checked whole (rule 6): every A/AAAA in the answer
 * section goes through pol_check_resolved() for the question name; one
 * forbidden address refuses the answer (REFUSED + EDE 15 naming the
 * address). Of an accepted answer only the question's CNAME chain and the
 * records of the asked type at its end are released (authority and
 * additional sections are dropped: their addresses would not be pinned);
 * the addresses released are returned as pins with TTL max(ttl, 30 s),
 * capped at one day, and the released records carry the capped TTL so a
 * client cache never outlives its pin.
 *
 * EDNS (RFC 6891): the reply carries an OPT RR, and so the EDE option, only
 * when the query had one. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "policy/match.h"

/* Pin TTL bounds, seconds: the floor is DESIGN §5.1 rule 6; the cap keeps
 * a hostile TTL (2^31) from pinning an address for decades. */
#define POL_DNS_TTL_FLOOR 30
#define POL_DNS_TTL_CAP 86400

/* Largest reply sent over UDP when the client advertises more (the EDNS
 * buffer size the DNS flag day 2020 settled on), and over UDP without EDNS
 * (RFC 1035 §4.2.1). */
#define POL_DNS_UDP_MAX 1232
#define POL_DNS_UDP_PLAIN 512
/* Largest message over TCP (RFC 1035 §4.2.2: a 16-bit length). */
#define POL_DNS_TCP_MAX 65535
/* Most addresses one answer may carry; a longer answer is refused. */
#define POL_DNS_MAX_PINS 64

/* EDNS option 15 INFO-CODEs used here (RFC 8914 §4). */
#define POL_DNS_EDE_BLOCKED 15
#define POL_DNS_EDE_NOT_SUPPORTED 21
/* Longest EXTRA-TEXT sent: a name, an address and the deciding rule fit. */
#define POL_DNS_EDE_TEXT_MAX 767

/* What the filter remembers about one forwarded query, to judge its answer
 * and to build the client's reply. Plain data: copy it freely. */
typedef struct pol_dns_query {
        uint16_t client_id;
        uint16_t upstream_id;      /* random, so an off-path spoofer must guess it */
        uint16_t qtype;
        uint16_t qclass;
        bool rd;                   /* the client's RD bit, echoed */
        bool edns;                 /* the client sent an OPT RR */
        size_t max_reply;          /* bytes the client accepts on its transport */
        uint8_t qname_wire[256];   /* the question as sent, case kept (0x20) */
        size_t qname_len;
        char name[POL_NAME_MAX + 1]; /* normalised, for checks and pins */
} pol_dns_query;

typedef enum pol_dns_action {
        POL_DNS_DROP,    /* say nothing (a response, or too short to answer) */
        POL_DNS_REPLY,   /* send `packet` to the client */
        POL_DNS_FORWARD, /* send `packet` upstream, keep `query` for the answer */
} pol_dns_action;

/* An address to pin into the session's nftables set before the reply that
 * contains it is released. ttl in seconds, already floored and capped. */
typedef struct pol_dns_pin {
        pol_addr addr;
        uint32_t ttl;
} pol_dns_pin;

/* The outcome of a filter step. `packet` (malloc'd wire bytes) and `pins`
 * are owned by the result; release with pol_dns_result_done(). */
typedef struct pol_dns_result {
        pol_dns_action action;
        uint8_t *packet;
        size_t len;
        pol_dns_query query;
        pol_dns_pin *pins;
        size_t n_pins;
        bool blocked;          /* a policy denial: an event for sandboxd */
        pol_verdict verdict;   /* when blocked: the deciding rule */
        char message[POL_DNS_EDE_TEXT_MAX + 1]; /* when blocked: the EDE EXTRA-TEXT */
} pol_dns_result;

/* Frees what a result owns and zeroes it (accepts an already-done result). */
void pol_dns_result_done(pol_dns_result *r);

/* Filters one query from the sandbox (len bytes of DNS message, without the
 * TCP length prefix). `tcp` says which transport it came on (it bounds the
 * reply size). `never`/`n_never` are the addresses never reachable (the
 * host, other sandboxes; see pol_check_address). On success fills *ret
 * (the caller must pol_dns_result_done() it) and returns 0: DROP, REPLY or
 * FORWARD. Returns -ENOMEM (with *ret zeroed) when out of memory. */
int pol_dns_filter_query(const pol_policy *p, const pol_cidr *never, size_t n_never, const uint8_t *pkt,
                         size_t len, bool tcp, pol_dns_result *ret);

/* Filters an upstream answer to the query q (as returned in a FORWARD
 * result). Returns -EBADMSG when the packet is not an answer to q (wrong
 * id, not a response, other question): the caller ignores it and keeps
 * waiting, since on UDP it may be a spoof racing the real answer. Otherwise
 * fills *ret with a REPLY and returns 0: the caller must pin every entry of
 * ret->pins and only then send ret->packet to the client. A garbled answer
 * becomes SERVFAIL; an answer with a forbidden address REFUSED + EDE 15;
 * one that does not fit the client's transport an empty reply with TC set.
 * The policy passed may be newer than the one that forwarded the query
 * (rule 9): the name is judged again. -ENOMEM on allocation failure. */
int pol_dns_filter_answer(const pol_policy *p, const pol_cidr *never, size_t n_never, const pol_dns_query *q,
                          const uint8_t *pkt, size_t len, pol_dns_result *ret);

/* Builds the SERVFAIL reply for q, for when upstream does not answer in
 * time or cannot be reached. Fills *ret with a REPLY; 0 or -ENOMEM. */
int pol_dns_servfail(const pol_dns_query *q, pol_dns_result *ret);

/* Name of a QTYPE for messages ("A", "TYPE65"); returns buf (16 bytes). */
const char *pol_dns_type_name(uint16_t qtype, char *buf, size_t size);
