/* Sandboxes that join a pod's network namespace (sandbox.create
 * `network: {"netns": PATH}`, docs/KUBERNETES.md "The pod model" steps
 * 2-4): who may ask, how the path is opened and checked, and the pod's
 * policy table (policy/nftpod.h) with the cluster's ranges from daemon.json
 * `kubernetes`.
 *
 * The threat: a path names any namespace of the node, and a sandbox in the
 * node's own (or another workload's) would reach everything there with no
 * policy between. So only root on the local socket may name one (not a
 * tenant, a TLS client or a gateway acting for one), the path is resolved
 * with no symlink anywhere (a directory on the way that someone else could
 * swap is not followed), the file must be an nsfs file of a network
 * namespace, never the daemon's own, and not one another sandbox of this
 * daemon holds (two policy tables in one namespace would each admit what
 * the other refuses). */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "libcore/util.h"
#include "policy/nftpod.h"
#include "sandboxd/internal.h"
#include "sandboxd/remote.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

/* Opens `path` (absolute) with no symlink followed in any component, and
 * checks it is a network namespace other than the daemon's. */
static int open_netns(const char *path, int *ret_fd, struct stat *ret_st, sb_error **ret_err) {
        struct open_how how = { .flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC,
                                .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
        if (path[0] != '/')
                return sb_error_set(ret_err, -EINVAL, NULL, "network.netns",
                                    "network.netns: '%s' is not an absolute path; give the network namespace's "
                                    "file, such as /run/netns/NAME", TEXT_Q(path));
        _cleanup_close_ int fd = (int) syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
        if (fd < 0) {
                int e = errno;
                if (e == ELOOP || e == EXDEV) {
                        _cleanup_free_ char *real = realpath(path, NULL);
                        return sb_error_set(ret_err, -ELOOP, NULL, "network.netns",
                                            "network.netns: %s: the path goes through a symbolic link, which "
                                            "sandboxd does not follow; give it without one%s%s",
                                            TEXT_Q(path), real ? " (here: " : "", real ? real : "");
                }
                return sb_error_set(ret_err, -e, NULL, "network.netns", "network.netns: %s: %s", TEXT_Q(path),
                                    strerror(e));
        }
        struct statfs fs;
        struct stat st, own;
        if (fstatfs(fd, &fs) < 0 || fs.f_type != NSFS_MAGIC)
                return sb_error_set(ret_err, -EINVAL, NULL, "network.netns",
                                    "network.netns: %s is not a namespace file (nsfs); give a network namespace, "
                                    "such as one `ip netns add` or CNI made under /run/netns", TEXT_Q(path));
        int type = ioctl(fd, NS_GET_NSTYPE);
        if (type != CLONE_NEWNET)
                return sb_error_set(ret_err, -EINVAL, NULL, "network.netns",
                                    "network.netns: %s is a namespace, but not a network namespace", TEXT_Q(path));
        if (fstat(fd, &st) < 0 || stat("/proc/self/ns/net", &own) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, "network.netns", "network.netns: %s: %m",
                                    TEXT_Q(path));
        if (st.st_dev == own.st_dev && st.st_ino == own.st_ino)
                return sb_error_set(ret_err, -EACCES, "permission_denied", "network.netns",
                                    "network.netns: %s is sandboxd's own network namespace; a sandbox never "
                                    "joins it (give the pod's namespace)", TEXT_Q(path));
        *ret_fd = TAKE_FD(fd);
        *ret_st = st;
        return 0;
}

/* Root on the local Unix socket, acting for nobody else. */
static bool local_root(const manager *m, const rpc_request *req) {
        tenant t;
        if (!req->conn)
                return false;
        tenant_of_conn(m->cfg, req->conn, &t);
        return t.admin && !t.remote && !rpc_conn_is_tls(req->conn) && !remote_conn_is_tenant(req->conn) &&
               !tenant_conn_is_gateway(m->cfg, req->conn) && rpc_conn_uid(req->conn) == 0;
}

int pod_parse_network(manager *m, const rpc_request *req, sandbox *sb, int *ret_fd, sb_error **ret_err) {
        const cJSON *net = cJSON_GetObjectItemCaseSensitive(req->params, "network");
        *ret_fd = -EBADF;
        if (!net || cJSON_IsNull(net))
                return 0;
        if (!cJSON_IsObject(net))
                return sb_error_set(ret_err, -EINVAL, NULL, "network",
                                    "network: must be an object, {\"netns\": PATH}");
        const cJSON *it;
        cJSON_ArrayForEach(it, net)
                if (!streq(it->string, "netns"))
                        return sb_error_set(ret_err, -EINVAL, NULL, "network",
                                            "network: unknown key '%s'; known keys: netns", TEXT_Q(it->string));
        const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(net, "netns"));
        if (!path || !*path || strlen(path) >= PATH_MAX)
                return sb_error_set(ret_err, -EINVAL, NULL, "network.netns",
                                    "network.netns: must be the path of a network namespace, such as "
                                    "/run/netns/NAME");
        if (!local_root(m, req))
                return sb_error_set(ret_err, -EACCES, "permission_denied", "network.netns",
                                    "network.netns: only root on sandboxd's local socket may put a sandbox in a "
                                    "network namespace of the host");
        struct stat st;
        _cleanup_close_ int fd = -EBADF;
        int r = open_netns(path, &fd, &st, ret_err);
        if (r < 0)
                return r;
        /* getOrCreate of the pod's own sandbox compares it (config_differs). */
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req->params, "name"));
        for (const sandbox *o = m->sandboxes; o; o = o->next)
                if (!(name && streq(name, o->name)) && o->netns_path && o->netns_dev == (uint64_t) st.st_dev && o->netns_ino == (uint64_t) st.st_ino)
                        return sb_error_set(ret_err, -EBUSY, "already_exists", "network.netns",
                                            "network.netns: %s is already the network namespace of sandbox '%s'; "
                                            "a pod is one sandbox", TEXT_Q(path), o->name);
        if (!(sb->netns_path = strdup(path)))
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        sb->netns_dev = (uint64_t) st.st_dev;
        sb->netns_ino = (uint64_t) st.st_ino;
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int pod_netns_reopen(const sandbox *sb, int *ret_fd, sb_error **ret_err) {
        struct stat st;
        _cleanup_close_ int fd = -EBADF;
        _cleanup_error_ sb_error *err = NULL;
        int r = open_netns(sb->netns_path, &fd, &st, &err);
        if (r < 0)
                return sb_error_set(ret_err, r, "failed", "network.netns",
                                    "the pod's network namespace is gone or changed: %s", err ? err->message : "");
        if ((uint64_t) st.st_dev != sb->netns_dev || (uint64_t) st.st_ino != sb->netns_ino)
                return sb_error_set(ret_err, -ESTALE, "failed", "network.netns",
                                    "network.netns: %s is now another network namespace than the one sandbox "
                                    "'%s' was made in (the pod's is gone); delete the sandbox", sb->netns_path,
                                    sb->name);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* daemon.json kubernetes.podCIDRs and serviceCIDRs (validated at load). */
static int cluster_cidrs(const manager *m, pol_cidr **ret, size_t *ret_n) {
        static const char *const keys[] = { "podCIDRs", "serviceCIDRs" };
        const cJSON *k = m->cfg->kubernetes;
        size_t n = 0, cap = 0;
        pol_cidr *v = NULL;
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                const cJSON *e;
                cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(k, keys[i])) {
                        pol_cidr c;
                        char *why = NULL;
                        const char *s = cJSON_GetStringValue(e);
                        if (!s || pol_cidr_parse(s, &c, &why) < 0) {
                                free(why);
                                continue;
                        }
                        if (n == cap) {
                                pol_cidr *w = reallocarray(v, cap = cap ? 2 * cap : 8, sizeof(*v));
                                if (!w) {
                                        free(v);
                                        return -ENOMEM;
                                }
                                v = w;
                        }
                        v[n++] = c;
                }
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int pod_apply_policy(manager *m, int netns_fd, const pol_policy *p, bool keep, sb_error **ret_err) {
        _cleanup_free_ pol_cidr *never = NULL, *cluster = NULL;
        size_t n_never = 0, n_cluster = 0;
        if (manager_never_list(m, &never, &n_never) < 0 || cluster_cidrs(m, &cluster, &n_cluster) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        pol_pod_ranges r = { .never = never, .n_never = n_never, .cluster = cluster, .n_cluster = n_cluster };
        if (keep && pol_pod_current(netns_fd, p, &r) > 0)
                return 0;
        int k = pol_pod_apply(netns_fd, p, &r, ret_err);
        return k < 0 ? sb_error_prefix(ret_err, "the pod's policy table") : 0;
}

int pod_dns_upstream(const manager *m, char *buf, size_t size) {
        const cJSON *dns = cJSON_GetObjectItemCaseSensitive(m->cfg->kubernetes, "clusterDNS");
        const char *a = cJSON_GetStringValue(cJSON_GetArrayItem(dns, 0));
        if (!a)
                return -ENOENT;
        snprintf(buf, size, strchr(a, ':') ? "[%s]:53" : "%s:53", a);
        return 0;
}

int pod_policy_check(const pol_policy *p, sb_error **ret_err) {
        for (size_t i = 0; p && p->mode == POL_MODE_CUSTOM && i < p->n_domains; i++) {
                const pol_domain *d = &p->domains[i];
                char pat[POL_NAME_MAX + 8];
                if (d->pattern.port)
                        snprintf(pat, sizeof(pat), "%s:%u", d->pattern.text, d->pattern.port);
                else
                        snprintf(pat, sizeof(pat), "%s", d->pattern.text);
                if (d->n_rules)
                        return sb_error_set(ret_err, -EOPNOTSUPP, "invalid_policy", "networkPolicy",
                                            "networkPolicy.allow[\"%s\"]: HTTP rules are not enforced yet for a "
                                            "sandbox in a pod's network namespace (network.netns): it has no "
                                            "egress proxy; allow the name without rules", pat);
                if (d->pattern.port)
                        return sb_error_set(ret_err, -EOPNOTSUPP, "invalid_policy", "networkPolicy",
                                            "networkPolicy.allow[\"%s\"]: a port on a name is not enforced yet for "
                                            "a sandbox in a pod's network namespace (network.netns): its names are "
                                            "admitted by address, on every port; allow \"%s\" without the port",
                                            pat, d->pattern.text);
        }
        return 0;
}
