/* Reports of packets the host table `inet sandboxd` denied, read from the
 * kernel's NFLOG (nfnetlink_log) so that every nftables denial can become an
 * event and a per-sandbox counter (DESIGN §5.2, last item).
 *
 * The table's shared `deny` chain (libcore/nft.c), which every session
 * denial and every host-protection rule ends in, starts with
 *     add @lograte { iifname limit rate CORE_NFLOG_RATE/second
 *                    burst CORE_NFLOG_BURST packets }
 *         log prefix CORE_NFLOG_PREFIX group CORE_NFLOG_GROUP
 *         snaplen CORE_NFLOG_SNAPLEN
 * before its rejects: `lograte` is a meter (a dynamic set keyed by the
 * input interface name) that gives every interface its own token bucket,
 * so each sandbox (its veth "sbx<n>") has its own rate and a flood from one
 * never hides another's denials; the host's own packets (output chain, no
 * input interface) share the bucket of the empty name. The limit applies
 * to the log rule only, so a flood from a sandbox costs the daemon at most
 * that many reports per second per sandbox while every packet is still
 * rejected; the per-packet cost is one hash lookup whatever the number of
 * sandboxes. Reports beyond the limit are not made at all; a flooding
 * sandbox's own counters are a lower bound.
 *
 * NFLOG groups belong to a network namespace: open the group in the
 * namespace that holds the table and the "sbx<n>" veths. */
#pragma once

#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include "libcore/error.h"

#define CORE_NFLOG_GROUP 4242           /* nfnetlink_log group of the deny chain */
#define CORE_NFLOG_SNAPLEN 64           /* bytes of each packet copied: the headers */
#define CORE_NFLOG_RATE 50              /* reports per second, per input interface */
#define CORE_NFLOG_BURST 100            /* packets above the rate in one burst */
#define CORE_NFLOG_PREFIX "sandboxd deny" /* log prefix of the deny chain */

typedef union core_nflog_addr {
        struct in_addr v4;  /* family AF_INET */
        struct in6_addr v6; /* family AF_INET6 */
} core_nflog_addr;

/* One denied packet. Addresses are in network order; a field the copied
 * headers do not hold stays zero. */
typedef struct core_nflog_packet {
        unsigned ifindex;            /* input interface (NFULA_IFINDEX_INDEV); 0 when none */
        char ifname[IF_NAMESIZE];    /* its name now; "" when gone or none */
        int family;                  /* AF_INET or AF_INET6; 0 when the header is unreadable */
        uint8_t proto;               /* IPPROTO_*: IPv4 protocol, IPv6 first next header */
        core_nflog_addr saddr, daddr;
        uint16_t dport;              /* host order; TCP and UDP only, else 0 */
        const char *prefix;          /* log prefix, NULL when none; valid during the callback */
} core_nflog_packet;

typedef void (*core_nflog_cb)(const core_nflog_packet *p, void *userdata);

/* Binds NFLOG group `group` in the caller's network namespace (one
 * NFULNL_CFG_CMD_BIND, then copy mode "packet" with CORE_NFLOG_SNAPLEN
 * bytes and a queue threshold of one packet, so each report is delivered
 * at once instead of batched for up to a second). Returns a non-blocking,
 * close-on-exec netlink fd the caller owns and closes with close(), or a
 * negative errno with *ret_err filled: -EBUSY when the kernel refuses the
 * bind, which it does with the same EPERM for a group another socket holds
 * (e.g. ulogd, or a second daemon in this namespace) and for a caller
 * without CAP_NET_ADMIN; the message names both. The group is released
 * when the last descriptor of the socket is closed. */
int core_nflog_open(uint16_t group, sb_error **ret_err);

/* Reads every message pending on a core_nflog_open() fd without blocking
 * and calls cb(p, userdata) once per packet report. Messages that are not
 * packet reports, or are malformed or truncated, are skipped. Reports lost
 * to a full socket buffer (ENOBUFS) are skipped too: the reader goes on
 * with what follows. Returns the number of reports passed to cb, or a
 * negative errno from recv(). */
int core_nflog_read(int fd, core_nflog_cb cb, void *userdata);
