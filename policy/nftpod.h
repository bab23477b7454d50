/* The network policy of a pod sandbox (sandbox.create network.netns,
 * docs/KUBERNETES.md "The pod model" step 3): a table `inet sandboxd-pod`
 * installed *inside* the pod's network namespace, which CNI made and whose
 * interfaces the daemon does not control. What it holds:
 *
 *   chain output      filter hook output priority -199 (right after
 *                     conntrack, before mangle, nat and filter):
 *                       oifname "lo" accept        the pod itself, and DNS
 *                                                  redirected to its filter
 *                       ct direction reply accept  answers to inbound flows
 *                                                  (Services, other pods,
 *                                                  the kubelet's probes)
 *                       ct state related accept    their ICMP errors
 *                       udp/tcp dport 53 accept    on to the dns chain below
 *                       goto policy_out
 *   chain postrouting filter hook postrouting priority 400 (after every
 *                     NAT): the same, ending in `goto policy_post`, so
 *                     what another table rewrote is judged again
 *   chain dns         nat hook output priority -100: IPv4 UDP and TCP to
 *                     port 53 `redirect` (to 127.0.0.1:53, where the
 *                     daemon's DNS filter listens inside the namespace)
 *   chain policy_out / policy_post, the decision (rejects in output,
 *                     drops in postrouting, where reject cannot run):
 *     deny-all:  everything denied
 *     allow-all: the node's addresses, the sandbox pool and the always-
 *                forbidden ranges (loopback, link-local, ...) denied, one
 *                range rule each; the rest accepted
 *     custom:    the same ranges plus subnets.deny and the forbidden table
 *                (pol_nft_forbidden), and the cluster's pod and service
 *                CIDRs unless a subnets.allow entry overlaps them, denied;
 *                the port steps of pol_packet_steps() (DNS and DoT
 *                elsewhere, QUIC) denied; `ip daddr @allow4` (subnets.allow)
 *                and `ip daddr @dns4` (addresses the DNS filter pinned,
 *                with timeouts) accepted, and their IPv6 twins; the rest
 *                denied
 *   chain deny_out    tcp: reject with tcp reset; else reject with icmpx
 *                     admin-prohibited: a refused connection fails at once
 *
 * Every packet of the pod's own flows is judged (no established shortcut
 * in the original direction), so a policy change binds flows already open.
 * A change replaces the whole table in one batch (pins included: they were
 * judged under the old policy). The ranges are rules, not interval sets,
 * so no packet meets a rule whose set the same transaction is still
 * filling (see pol_nft_session_apply); an empty allow or pin set only
 * refuses. The table's userdata records a digest of what built it, so a
 * restarted daemon keeps a table (and its pins) that is still right.
 *
 * The sandbox's processes cannot change the table: the namespace belongs to
 * the host's user namespace, and they hold no CAP_NET_ADMIN there (a user
 * namespace of their own, or sandboxd's dropped capabilities).
 *
 * Every function here runs its netlink work on a short-lived thread that
 * setns(2)es into `netns_fd` first (a netlink socket speaks to the
 * namespace it was made in), so any thread may call them. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include "libcore/error.h"
#include "policy/match.h"
#include "policy/policy.h"

#define POL_POD_TABLE "sandboxd-pod"
/* Where the DNS filter listens inside the pod's namespace. */
#define POL_POD_DNS_ADDR "127.0.0.1"
#define POL_POD_DNS_PORT 53

/* What a pod's table refuses besides its policy: `never` (the node's own
 * addresses and the sandbox pool, manager_never_list) and `cluster` (the
 * daemon.json kubernetes podCIDRs and serviceCIDRs), both borrowed. */
typedef struct pol_pod_ranges {
        const pol_cidr *never;
        size_t n_never;
        const pol_cidr *cluster;
        size_t n_cluster;
} pol_pod_ranges;

/* Installs or atomically replaces the table for policy p in the network
 * namespace `netns_fd` (an nsfs fd of a CLONE_NEWNET namespace). 0, or a
 * negative errno with *ret_err naming the message that failed. */
int pol_pod_apply(int netns_fd, const pol_policy *p, const pol_pod_ranges *r, sb_error **ret_err);

/* 1 when the table in `netns_fd` exists and was built by pol_pod_apply()
 * from the same p and r (its digest matches), 0 when not or there is no
 * table, a negative errno on a netlink failure. */
int pol_pod_current(int netns_fd, const pol_policy *p, const pol_pod_ranges *r);

/* Deletes the table; none is success. 0 or a negative errno (*ret_err). */
int pol_pod_remove(int netns_fd, sb_error **ret_err);

/* Adds address a (judged by the DNS filter under the table's policy) to
 * the table's dns4 or dns6 set for ttl_s seconds (at least 30). -ENOENT
 * when the table has no such set (not custom). */
int pol_pod_pin(int netns_fd, const pol_addr *a, uint32_t ttl_s, sb_error **ret_err);

/* Runs fn(userdata) on a new thread that first joined network namespace
 * `netns_fd`, and returns what fn returned (or the setns error). The
 * calling thread's namespaces are untouched. */
int pol_pod_in_netns(int netns_fd, int (*fn)(void *userdata), void *userdata);
