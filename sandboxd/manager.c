/* The registry: startup (directories, the host runtime, the sealed
 * sandbox-init, cgroups, the host nftables table, reconciliation of what an
 * earlier run left), lookups, the address pool, daemon.info and method
 * registration. */
#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <libgen.h>
#include <inttypes.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include "libcore/diskimg.h"
#include "libcore/pool.h"
#include "libcore/cgroup-systemd.h"
#include "libcore/container.h"
#include "libcore/nflog.h"
#include "libcore/log.h"
#include "libcore/route.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/tenant.h"
#include "sandboxd/limits.h"
#include "sandboxd/schema.h"
#include "sandboxd/text.h"

sandbox *manager_find_sandbox(manager *m, const char *name) {
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                if (streq(sb->name, name))
                        return sb;
        return NULL;
}

command *manager_find_command(manager *m, const char *cmd_id) {
        for (command *c = m->commands; c; c = c->next)
                if (streq(c->cmd_id, cmd_id))
                        return c;
        return NULL;
}

int manager_alloc_slot(manager *m) {
        for (unsigned i = 0; i < m->n_slots; i++)
                if (!m->slots[i]) {
                        m->slots[i] = true;
                        return (int)i;
                }
        return -ENOSPC;
}

void manager_release_slot(manager *m, int slot) {
        if (slot >= 0 && (unsigned)slot < m->n_slots)
                m->slots[slot] = false;
}

void reply_not_found(rpc_request *req, const char *what, const char *name) {
        rpc_reply_error(req, RPC_APP_ERROR, "not_found", NULL, "%s '%s' not found", what, TEXT_Q(name));
}

static void on_conn_close(rpc_conn *c, void *userdata) {
        commands_conn_closed(userdata, c);
        events_conn_closed(userdata, c);
        fs_tar_conn_closed(c);
        fs_watches_conn_closed(c);
        ready_conn_closed(userdata, c);
}

/* The request limits every client is held to (daemon.info "limits"). */
static void add_limits(const manager *m, cJSON *o) {
        const daemon_config *cfg = m->cfg;
        cJSON *lim = cJSON_AddObjectToObject(o, "limits");
        cJSON_AddNumberToObject(lim, "maxLineBytes", (double)cfg->max_line_bytes);
        cJSON_AddNumberToObject(lim, "maxTimeoutMs", (double)cfg->max_timeout_ms);
        cJSON_AddNumberToObject(lim, "defaultTimeoutMs", (double)cfg->default_timeout_ms);
        cJSON_AddNumberToObject(lim, "maxVcpus", cfg->max_vcpus);
        cJSON_AddNumberToObject(lim, "maxTags", 5);
        cJSON_AddNumberToObject(lim, "maxPorts", 15);
        cJSON_AddNumberToObject(lim, "pidsMax", (double)cfg->pids_max);
        cJSON_AddNumberToObject(lim, "maxSourceBytes", (double)cfg->max_source_bytes);
        /* The request size limits (limits.h, docs/API.md "Limits"). */
        static const struct {
                const char *key;
                double value;
        } sizes[] = {
                { "maxJsonDepth", LIMIT_JSON_DEPTH },         { "maxEnvVars", LIMIT_ENV_COUNT },
                { "maxEnvValueBytes", LIMIT_ENV_VALUE_BYTES }, { "maxEnvBytes", LIMIT_ENV_BYTES },
                { "maxArgs", LIMIT_ARGS_COUNT },              { "maxArgsBytes", LIMIT_ARGS_BYTES },
                { "maxCmdBytes", LIMIT_CMD_BYTES },           { "maxCwdBytes", LIMIT_CWD_BYTES },
                { "maxPathBytes", LIMIT_PATH_BYTES },         { "maxTagValueBytes", LIMIT_TAG_VALUE_BYTES },
        };
        for (size_t i = 0; i < ELEMENTSOF(sizes); i++)
                cJSON_AddNumberToObject(lim, sizes[i].key, sizes[i].value);
        cJSON_AddNumberToObject(lim, "logBudgetMiB", (double)cfg->log_budget_mib);
}

/* daemon.info of a tenant (docs/API.md "daemon.info"): the version, the
 * limits, what the host can do, and the tenant's own counts, limits and
 * usage (tenant_info). Nothing of other tenants (no daemon-wide counts,
 * warm pool, storage or log use) and no host path (socket, state and run
 * directories, the userns probe's messages). */
static void info_tenant(rpc_request *req, manager *m) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "version", SANDBOXD_VERSION);
        add_limits(m, o);
        cJSON *cap = cJSON_AddObjectToObject(o, "capabilities");
        cJSON_AddStringToObject(cap, "cgroup", core_cgroup_mode_name(core_cgroup_get_mode()));
        cJSON_AddBoolToObject(cap, "overlayfs", access("/sys/module/overlay", F_OK) == 0);
        cJSON_AddBoolToObject(cap, "seccomp", access("/proc/sys/kernel/seccomp", F_OK) == 0);
        cJSON *u = cJSON_AddObjectToObject(cap, "userns");
        cJSON_AddBoolToObject(u, "available", !m->userns_unavailable);
        cJSON_AddBoolToObject(u, "default", m->userns_default);
        cJSON_AddBoolToObject(cap, "nftables", m->have_nft);
        tenant_info(m, req, o);
        cJSON *pol = daemon_config_default_policy_json(m->cfg);
        cJSON_AddItemToObject(o, "defaultNetworkPolicy", pol ? pol : cJSON_CreateNull());
        rpc_reply(req, o);
}

static void method_info(rpc_request *req, void *userdata) {
        manager *m = userdata;
        const daemon_config *cfg = m->cfg;
        if (!tenant_req_admin(m, req)) {
                info_tenant(req, m);
                return;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "version", SANDBOXD_VERSION);
        cJSON_AddNumberToObject(o, "pid", getpid());
        cJSON_AddStringToObject(o, "socket", cfg->socket_path);
        cJSON_AddStringToObject(o, "stateDir", cfg->state_dir);
        cJSON_AddStringToObject(o, "runDir", cfg->run_dir);
        add_limits(m, o);
        cJSON_AddNumberToObject(cJSON_GetObjectItemCaseSensitive(o, "limits"), "logBytesInUse", (double)m->log_bytes);
        cJSON *cap = cJSON_AddObjectToObject(o, "capabilities");
        cJSON_AddStringToObject(cap, "cgroup", core_cgroup_mode_name(core_cgroup_get_mode()));
        cJSON_AddStringToObject(cap, "cgroupDriver", core_cgroup_driver_name(core_cgroup_get_driver()));
        cJSON_AddBoolToObject(cap, "overlayfs", access("/sys/module/overlay", F_OK) == 0);
        cJSON_AddBoolToObject(cap, "seccomp", access("/proc/sys/kernel/seccomp", F_OK) == 0);
        userns_info(m, cap);
        cJSON_AddBoolToObject(cap, "nftables", m->have_nft);
        unsigned n = 0, running = 0;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                n++;
                running += sb->sess != NULL;
        }
        cJSON_AddNumberToObject(o, "sandboxes", n);
        cJSON_AddNumberToObject(o, "running", running);
        cJSON_AddItemToObject(o, "warmPool", warmpool_info(m));
        /* Disk space (docs/SECURITY.md "Disk space"): every disk image
         * holds its blocks, so committed is already taken from free. */
        sandbox_storage ss;
        sandbox_storage_stats(m, NULL, &ss);
        cJSON *st = cJSON_AddObjectToObject(o, "storage");
        cJSON_AddStringToObject(st, "model", "backed");
        cJSON_AddNumberToObject(st, "committedBytes", (double)ss.committed_bytes);
        cJSON_AddNumberToObject(st, "freeBytes", (double)ss.free_bytes);
        cJSON_AddNumberToObject(st, "totalBytes", (double)ss.total_bytes);
        cJSON_AddNumberToObject(st, "disks", ss.disks);
        cJSON_AddNumberToObject(st, "unbackedDisks", ss.unbacked);
        /* Volumes (volume.c): in committedBytes (or the pool's) too. */
        cJSON_AddNumberToObject(st, "volumes", ss.volumes);
        cJSON_AddNumberToObject(st, "volumeCommittedBytes", (double)ss.volume_committed_bytes);
        /* The storage pool (libcore/pool.h), when daemon.json has one:
         * what admission counts (committed includes its metadata margin)
         * beside what Btrfs says is in use. */
        core_pool_stats ps;
        if (core_pool_stats_get(&ps) >= 0) {
                cJSON *p = cJSON_AddObjectToObject(st, "pool");
                cJSON_AddNumberToObject(p, "sizeBytes", (double)ps.size);
                cJSON_AddNumberToObject(p, "committedBytes", (double)ps.committed);
                cJSON_AddNumberToObject(p, "freeBytes", (double)(ps.committed < ps.size ? ps.size - ps.committed : 0));
                cJSON_AddNumberToObject(p, "usedBytes", (double)ps.used);
                cJSON_AddNumberToObject(p, "disks", ss.pool_disks);
                cJSON_AddNumberToObject(p, "layers", ps.layers);
        } else
                cJSON_AddNullToObject(st, "pool");
        /* What a create that names no networkPolicy gets. */
        cJSON *pol = daemon_config_default_policy_json(cfg);
        cJSON_AddItemToObject(o, "defaultNetworkPolicy", pol ? pol : cJSON_CreateNull());
        rpc_reply(req, o);
}

void manager_count(const manager *m, unsigned *ret_all, unsigned *ret_running) {
        unsigned n = 0, running = 0;
        for (const sandbox *sb = m ? m->sandboxes : NULL; sb; sb = sb->next) {
                n++;
                running += sb->sess != NULL;
        }
        *ret_all = n;
        *ret_running = running;
}

void manager_register_methods(manager *m, rpc_server *server) {
        m->server = server;
        rpc_server_set_close_handler(server, on_conn_close, m);
        /* Every method's params against its table (schema.c) first. */
        rpc_server_set_params_check(server, schema_check_params);
        rpc_server_add_method(server, "daemon.info", method_info, m);
        register_sandbox_methods(m, server);
        register_command_methods(m, server);
        register_fs_methods(m, server);
        register_fs_tar_methods(m, server);
        register_fs_watch_methods(m, server);
        register_snapshot_methods(m, server);
        register_snapshot_io_methods(m, server);
        register_runtime_methods(m, server);
        register_pause_methods(m, server);
        register_event_methods(m, server);
        register_ready_methods(m, server);
        register_volume_methods(m, server);
        container_attach(m, server);
}

static int parse_pool(const char *text, core_net_pool *pool, sb_error **ret_err) {
        char addr[64];
        unsigned prefix;
        if (sscanf(text, "%63[0-9.]/%u", addr, &prefix) != 2 || inet_pton(AF_INET, addr, &pool->base) != 1 ||
            prefix < 8 || prefix > 30)
                return sb_error_set(ret_err, -EINVAL, NULL, "networkPool",
                                    "networkPool: '%s' is not an IPv4 CIDR with a prefix from 8 to 30", text);
        uint32_t mask = htonl(~0U << (32 - prefix));
        if (pool->base.s_addr & ~mask)
                return sb_error_set(ret_err, -EINVAL, NULL, "networkPool",
                                    "networkPool: '%s' has host bits set", text);
        pool->prefix = prefix;
        return 0;
}

/* "off" leaves pool->prefix6 0 (no IPv6). Otherwise the ULA network (its
 * form checked by the config loader) must hold a /127 for every /31 of the
 * IPv4 pool, since a session's slot indexes both. */
static int parse_pool6(const char *text, core_net_pool *pool, sb_error **ret_err) {
        char addr[INET6_ADDRSTRLEN];
        unsigned prefix;
        pool->prefix6 = 0;
        if (!text || streq(text, "off"))
                return 0;
        if (sscanf(text, "%45[0-9a-fA-F:]/%u", addr, &prefix) != 2 || inet_pton(AF_INET6, addr, &pool->base6) != 1 ||
            prefix < 8 || prefix > 120)
                return sb_error_set(ret_err, -EINVAL, NULL, "ipv6Pool",
                                    "ipv6Pool: '%s' is not an IPv6 CIDR with a prefix from 8 to 120", text);
        if (127 - prefix < 31 - pool->prefix)
                return sb_error_set(ret_err, -EINVAL, NULL, "ipv6Pool",
                                    "ipv6Pool: '%s' holds fewer /127 links than networkPool holds /31s; use a "
                                    "prefix of at most /%u", text, 96 + pool->prefix);
        pool->prefix6 = prefix;
        return 0;
}

/* True when the IPv6 address is in the IPv6 pool. */
static bool addr6_in_pool(const core_net_pool *pool, const uint8_t *a) {
        if (!pool->prefix6)
                return false;
        for (unsigned bit = 0; bit < pool->prefix6; bit++) {
                uint8_t m = (uint8_t)(0x80 >> (bit % 8));
                if ((a[bit / 8] & m) != (pool->base6.s6_addr[bit / 8] & m))
                        return false;
        }
        return true;
}

/* The host sides of the veths are in the pool, which the never list holds
 * whole: adding one (every session start) changes nothing. */
static bool addr_in_pool(int family, const void *addr, void *userdata) {
        const manager *m = userdata;
        uint32_t a, mask = htonl(~0U << (32 - m->pool.prefix));
        /* Link-local addresses (every veth's host side gets one) are
         * forbidden under every policy already (fe80::/10). */
        if (family == AF_INET6)
                return addr6_in_pool(&m->pool, addr) || IN6_IS_ADDR_LINKLOCAL((const struct in6_addr *)addr);
        if (family != AF_INET)
                return false;
        memcpy(&a, addr, 4);
        return (a & mask) == m->pool.base.s_addr;
}

/* The never list as last read (manager_never_list), so a policy update or
 * a netd start does not dump every link and address of the host (getifaddrs
 * walks every veth, so that cost grows with the number of sessions). The
 * cache is dropped on every address change the monitor reports (or an
 * overrun of it), and not used while one is queued unread, so it never
 * answers an older list than a fresh read would. `never_epoch` counts the
 * drops: a list read across one is not stored. Any thread. */
static pthread_mutex_t never_lock = PTHREAD_MUTEX_INITIALIZER;
static pol_cidr *never_cache;
static size_t never_cache_n;
static bool never_cached;
static uint64_t never_epoch;

static void never_cache_drop(void) {
        pthread_mutex_lock(&never_lock);
        free(never_cache);
        never_cache = NULL;
        never_cache_n = 0;
        never_cached = false;
        never_epoch++;
        pthread_mutex_unlock(&never_lock);
}

/* An address of the host was added or removed: every running netd gets
 * the never list as it is now (the proxy also asks the kernel before each
 * dial, core_route_is_unicast, so this is the second of two guards). */
static int on_addr_event(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        manager *m = userdata;
        int r = core_addr_monitor_drain(fd, addr_in_pool, m);
        if (r < 0)
                log_warning_errno(r, "host address monitor: %m");
        if (r != 0) {
                never_cache_drop();
                sessions_push_never_list(m);
        }
        return 0;
}

static int on_nft_event(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        manager *m = userdata;
        if (core_net_monitor_read(fd) != 1)
                return 0;
        _cleanup_error_ sb_error *err = NULL;
        int r = core_net_host_ensure(&m->pool, &err);
        if (r < 0) {
                log_error("nftables: our table was changed and cannot be re-installed: %s; stopping every "
                          "sandbox with network (fail closed)", err ? err->message : "failed");
                for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                        if (sb->sess && sb->sess->net_slot >= 0)
                                session_stop(sb);
        } else if (r == 1) {
                log_warning("nftables: table inet sandboxd was removed or changed; re-installed it and the "
                            "rules of every session");
                pol_nft_host_reset();
                sessions_reapply_rules(m);
        }
        return 0;
}

/* A packet the nftables rules denied (NFLOG): counted on its sandbox and
 * told as an event that names the rule, judged again with the sandbox's
 * policy by pol_check_packet(), which walks the table the session chain
 * was generated from, so the event names the step that denied it (DESIGN
 * §5.2: every denial is an event and a counter). A denied packet was not
 * pinned: a pinned address is accepted unless an earlier step denies. */
static void on_denied_packet(const core_nflog_packet *p, void *userdata) {
        manager *m = userdata;
        int slot;
        if (sscanf(p->ifname, "sbx%d", &slot) != 1)
                return;
        sandbox *sb = NULL;
        for (sandbox *it = m->sandboxes; it && !sb; it = it->next)
                if (it->sess && it->sess->net_slot == slot)
                        sb = it;
        if (!sb)
                return;
        sb->denials++;
        char dst[INET6_ADDRSTRLEN] = "";
        inet_ntop(p->family == AF_INET6 ? AF_INET6 : AF_INET, &p->daddr, dst, sizeof(dst));
        pol_addr a = {.family = p->family == AF_INET6 ? AF_INET6 : AF_INET};
        memcpy(a.bytes, &p->daddr, p->family == AF_INET6 ? 16 : 4);
        _cleanup_free_ pol_cidr *never = NULL;
        size_t n_never = 0;
        manager_never_list(m, &never, &n_never);
        pol_verdict v;
        pol_check_packet(sb->pol, p->proto, &a, p->dport, false, never, n_never, &v);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "layer", "nftables");
        cJSON_AddStringToObject(f, "destination", dst);
        if (p->dport)
                cJSON_AddNumberToObject(f, "port", p->dport);
        cJSON_AddStringToObject(f, "protocol", p->proto == IPPROTO_TCP ? "tcp" : p->proto == IPPROTO_UDP ? "udp"
                                               : p->proto == IPPROTO_ICMP ? "icmp" : "other");
        /* v.allow: the policy changed between the packet and its report. */
        if (v.allow)
                snprintf(v.detail, sizeof(v.detail), "a rule of the policy in force when it was sent (since changed)");
        cJSON_AddStringToObject(f, "policyLayer", v.allow ? "changed" : pol_layer_to_string(v.layer));
        cJSON_AddStringToObject(f, "rule", v.detail);
        char msg[320], port[8] = "";
        if (p->dport)
                snprintf(port, sizeof(port), ":%u", p->dport);
        snprintf(msg, sizeof(msg), "blocked by sandbox policy: connection to %s%s: %s", dst, port, v.detail);
        cJSON_AddStringToObject(f, "message", msg);
        events_emit(m, EVENT_DENIED, sb->name, f);
}

static int on_nflog(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        core_nflog_read(fd, on_denied_packet, userdata);
        return 0;
}

/* The never list read now; *ret_complete false when the host's addresses
 * could not be read (the list then holds the pool and link-local only). */
static int never_list_read(manager *m, pol_cidr **ret, size_t *ret_n, bool *ret_complete) {
        struct ifaddrs *ifa = NULL;
        *ret_complete = getifaddrs(&ifa) >= 0;
        if (!*ret_complete)
                ifa = NULL;
        size_t n = 1, cap = 3;
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
                cap++;
        pol_cidr *v = calloc(cap, sizeof(*v));
        if (!v) {
                freeifaddrs(ifa);
                return -ENOMEM;
        }
        /* The whole pool: other sandboxes and every host side of a veth. */
        v[0].addr.family = AF_INET;
        memcpy(v[0].addr.bytes, &m->pool.base, 4);
        v[0].prefix = m->pool.prefix;
        uint32_t pool_mask = htonl(~0U << (32 - m->pool.prefix));
        if (m->pool.prefix6) {
                v[n].addr.family = AF_INET6;
                memcpy(v[n].addr.bytes, &m->pool.base6, 16);
                v[n++].prefix = m->pool.prefix6;
        }
        /* Every IPv6 link-local address (fe80::/10, RFC 4291 §2.5.6): the
         * only link a sandbox has is its veth, whose far end is the host,
         * and the proxy dials from the host, where a link-local address is
         * one of the host's own links (its uplinks' addresses, the host
         * sides of the veths) or a neighbour on them. So no subnets.allow
         * (which opens a forbidden range it names) opens one: one row for
         * the whole range, as for the pool, however many links there are. */
        v[n].addr.family = AF_INET6;
        v[n].addr.bytes[0] = 0xfe, v[n].addr.bytes[1] = 0x80;
        v[n++].prefix = 10;
        for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
                if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
                        continue;
                /* The veths' host sides are in the pool, already listed whole:
                 * listing each would grow the list with every session. */
                if (i->ifa_addr->sa_family == AF_INET &&
                    (((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr & pool_mask) == m->pool.base.s_addr)
                        continue;
                if (i->ifa_addr->sa_family == AF_INET6 &&
                    addr_in_pool(AF_INET6, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, m))
                        continue;
                pol_cidr *c = &v[n++];
                c->addr.family = i->ifa_addr->sa_family;
                if (c->addr.family == AF_INET) {
                        memcpy(c->addr.bytes, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, 4);
                        c->prefix = 32;
                } else {
                        memcpy(c->addr.bytes, &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, 16);
                        c->prefix = 128;
                }
        }
        freeifaddrs(ifa);
        *ret = v;
        *ret_n = n;
        return 0;
}

int manager_never_list(manager *m, pol_cidr **ret, size_t *ret_n) {
        /* A change queued on the monitor, not yet drained by the loop: the
         * cache may predate it, so read afresh (and do not store). */
        struct pollfd pfd = { .fd = m->addr_monitor, .events = POLLIN };
        bool usable = m->addr_monitor >= 0 && poll(&pfd, 1, 0) == 0;
        uint64_t epoch;
        pthread_mutex_lock(&never_lock);
        epoch = never_epoch;
        if (usable && never_cached) {
                pol_cidr *v = calloc(never_cache_n ? never_cache_n : 1, sizeof(*v));
                if (v)
                        memcpy(v, never_cache, never_cache_n * sizeof(*v));
                size_t n = never_cache_n;
                pthread_mutex_unlock(&never_lock);
                if (!v)
                        return -ENOMEM;
                *ret = v;
                *ret_n = n;
                return 0;
        }
        pthread_mutex_unlock(&never_lock);
        pol_cidr *v = NULL;
        size_t n = 0;
        bool complete;
        int r = never_list_read(m, &v, &n, &complete);
        if (r < 0)
                return r;
        pol_cidr *copy = usable && complete ? calloc(n ? n : 1, sizeof(*copy)) : NULL;
        if (copy) {
                memcpy(copy, v, n * sizeof(*copy));
                pthread_mutex_lock(&never_lock);
                if (never_epoch == epoch && !never_cached) {
                        never_cache = TAKE_PTR(copy);
                        never_cache_n = n;
                        never_cached = true;
                }
                pthread_mutex_unlock(&never_lock);
                free(copy);
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

/* sandbox-init beside our own binary (a build tree), else LIBEXECDIR. */
static char *find_init(const daemon_config *cfg) {
        if (cfg->init_path)
                return strdup(cfg->init_path);
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n > 0) {
                self[n] = 0;
                char *p = NULL;
                if (asprintf(&p, "%s/sandbox-init", dirname(self)) >= 0 && access(p, X_OK) == 0)
                        return p;
                free(p);
        }
        return strdup(LIBEXECDIR "/sandbox-init");
}

/* One daemon per state directory: reconcile() deletes the non-persistent
 * sandboxes it finds there and sweeps the sessions of the instance the
 * directory names, so a second daemon on the same directory (in another
 * network namespace, where the namespace lock does not meet it) would
 * destroy the first one's sandboxes. The lock file stays (never unlinked),
 * so there is no replace race. */
static int lock_state_dir(manager *m, sb_error **ret_err) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/sandboxd.lock", m->cfg->state_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        m->state_lock_fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (m->state_lock_fd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", path);
        if (flock(m->state_lock_fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno == EWOULDBLOCK) {
                        /* Name the holder: a child of a killed daemon that
                         * never ran its program holds the lock as well as a
                         * live daemon does. */
                        pid_t holder = 0;
                        bool orphan = false;
                        if (core_lock_holder(m->state_lock_fd, &holder, &orphan) > 0 && orphan)
                                return sb_error_set(ret_err, -EBUSY, NULL, NULL,
                                                    "the lock of the state directory %s is held by pid %d, a "
                                                    "child of a sandboxd that never ran its program; end that "
                                                    "process (kill -9 %d) and start again",
                                                    m->cfg->state_dir, (int) holder, (int) holder);
                        return sb_error_set(ret_err, -EBUSY, NULL, NULL,
                                            "another sandboxd uses the state directory %s; give each daemon "
                                            "its own --state-dir", m->cfg->state_dir);
                }
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "lock %s: %m", path);
        }
        return 0;
}

/* Cgroups of this instance only: the key comes from the state directory,
 * so a restart finds its own leftovers and another daemon sharing our
 * cgroup keeps its sessions. */
static int init_cgroups(const daemon_config *cfg, sb_error **ret_err) {
        _cleanup_free_ char *key = NULL;
        int r = core_cgroup_instance_key(cfg->state_dir, &key);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "cgroups: instance key of %s: %s", cfg->state_dir,
                                    strerror(-r));
        /* cgroupDriver (daemon.json): auto is systemd where systemd is the
         * service manager (sessions then outlive the service's cgroup). */
        bool systemd = streq(cfg->cgroup_driver, "systemd") ||
                       (streq(cfg->cgroup_driver, "auto") && core_systemd_is_pid1());
        core_cgroup_set_driver(systemd ? CORE_CGROUP_SYSTEMD : CORE_CGROUP_CGROUPFS);
        if ((r = core_cgroup_init(key, ret_err)) < 0)
                return sb_error_prefix(ret_err, "cgroups (cgroupDriver %s)",
                                       core_cgroup_driver_name(core_cgroup_get_driver()));
        log_info("cgroups: driver %s, %s", core_cgroup_driver_name(core_cgroup_get_driver()),
                 core_cgroup_mode_name(core_cgroup_get_mode()));
        if (!systemd && core_systemd_is_pid1())
                log_warning("cgroupDriver is cgroupfs under systemd: sessions live in the service's cgroup and "
                            "stop with it unless the unit has Delegate=yes and KillMode=process");
        return r;
}

/* A sandbox whose record says a session ran: registered and re-adopted if
 * that session still lives (live restore). Returns true when it runs on.
 * On false a persistent sandbox may stay registered (stopped), a
 * non-persistent one is not; the cgroup sweep then kills what is left. */
static bool reconcile_live(manager *m, const char *dir, const char *name, bool persistent) {
        _cleanup_free_ char *run = NULL, *rec = NULL;
        if (asprintf(&run, "%s/%s", m->run_sandboxes_dir, name) < 0 ||
            asprintf(&rec, "%s/session.json", run) < 0 || access(rec, F_OK) < 0)
                return false;
        _cleanup_error_ sb_error *err = NULL;
        if (sandbox_load(m, dir, &err) < 0)
                return false;
        sandbox *sb = manager_find_sandbox(m, name);
        if (sb && session_adopt(sb, &err) >= 0)
                return true;
        log_info("sandbox '%s': its session is not restored: %s",
                 text_for_log(name, (char[TEXT_LOG_BUF]){0}, TEXT_LOG_BUF),
                 text_for_log(err ? err->message : "failed", (char[TEXT_LOG_BUF]){0}, TEXT_LOG_BUF));
        if (sb && !persistent) {
                sandbox_unlink(m, sb);
                sandbox_free(sb);
        }
        return false;
}

/* Run directories of sessions that were not re-adopted. */
static void reconcile_run_dirs(manager *m) {
        _cleanup_closedir_ DIR *d = opendir(m->run_sandboxes_dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                /* A deleted sandbox's run directory is renamed aside before
                 * delete answers and removed after it: a crash between
                 * leaves its tombstone. */
                bool tomb = core_is_tombstone(de->d_name);
                if (de->d_name[0] == '.' && !tomb)
                        continue;
                sandbox *sb = tomb ? NULL : manager_find_sandbox(m, de->d_name);
                if (sb && sb->sess)
                        continue;
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", m->run_sandboxes_dir, de->d_name) >= 0)
                        core_rm_rf(p);
        }
}

/* Leftovers of an earlier run. Sessions belong to their sandbox-init, not
 * to the daemon (DESIGN §2): every session still alive is re-adopted, with
 * its sandbox, persistent or not. Of the rest, non-persistent sandbox
 * directories are removed and persistent ones come back stopped (they
 * resume on use). The cgroup sweep reaches this instance's sessions only
 * (the state lock makes sure no live daemon has the same instance) and
 * spares the re-adopted ones. */
static void reconcile(manager *m) {
        core_mkdir_p(m->run_sandboxes_dir, 0700);
        _cleanup_closedir_ DIR *d = opendir(m->sandboxes_dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (core_is_tombstone(de->d_name)) {
                        /* A delete a crash cut short (core_tombstone): finished,
                         * never loaded. */
                        _cleanup_free_ char *dir = NULL;
                        if (asprintf(&dir, "%s/%s", m->sandboxes_dir, de->d_name) < 0)
                                continue;
                        sandbox_disk_remove(dir);
                        int r = core_rm_rf(dir);
                        if (r < 0)
                                log_warning_errno(r, "finish the removal of %s: %m", dir);
                        else
                                log_info("finished an interrupted delete (%s)", de->d_name);
                        continue;
                }
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_free_ char *dir = NULL, *conf = NULL, *text = NULL;
                if (asprintf(&dir, "%s/%s", m->sandboxes_dir, de->d_name) < 0 ||
                    asprintf(&conf, "%s/config.json", dir) < 0)
                        continue;
                cJSON *c = core_read_file(conf, 1 << 20, &text, NULL) >= 0 ? cJSON_Parse(text) : NULL;
                bool persistent = cJSON_IsTrue(cJSON_GetObjectItem(c, "persistent"));
                cJSON_Delete(c);
                /* Its files are in its disk image (if it has one): mounted
                 * before anything reads, copies or resumes them. */
                _cleanup_error_ sb_error *derr = NULL;
                if (sandbox_disk_attach(dir, &derr) < 0)
                        log_warning("sandbox '%s': %s", de->d_name, derr ? derr->message : "disk image");
                /* A warm pool session of the last daemon (one it was adopting
                 * when it died included: the directory is renamed last) is
                 * nobody's sandbox: removed; the cgroup sweep below ends it. */
                bool pooled = strncmp(de->d_name, WARMPOOL_PREFIX, strlen(WARMPOOL_PREFIX)) == 0;
                if (pooled)
                        persistent = false;
                else if (reconcile_live(m, dir, de->d_name, persistent))
                        continue;
                if (!persistent) {
                        log_info("removing leftover sandbox '%s'", de->d_name);
                        sandbox_disk_remove(dir);
                        core_rm_rf(dir);
                        continue;
                }
                if (manager_find_sandbox(m, de->d_name))
                        continue;
                _cleanup_error_ sb_error *err = NULL;
                if (sandbox_load(m, dir, &err) < 0)
                        log_warning("persistent sandbox '%s' not restored (its files are kept): %s",
                                    text_for_log(de->d_name, (char[TEXT_LOG_BUF]){0}, TEXT_LOG_BUF),
                                    text_for_log(err ? err->message : "out of memory", (char[TEXT_LOG_BUF]){0},
                                                 TEXT_LOG_BUF));
        }
        size_t n_keep = 0;
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                n_keep += sb->sess != NULL;
        _cleanup_free_ char **keep = calloc(n_keep + 1, sizeof(char *));
        n_keep = 0;
        for (sandbox *sb = m->sandboxes; keep && sb; sb = sb->next)
                if (sb->sess)
                        keep[n_keep++] = sb->sess->cgroup_name[0] ? sb->sess->cgroup_name : sb->name;
        int n = core_cgroup_remove_sessions_except(keep, n_keep);
        if (n > 0)
                log_info("removed %d leftover session cgroups", n);
        /* No veth to sweep: a session's veth lives in its network namespace,
         * which dies with its init. */
        reconcile_run_dirs(m);
}

/* True when `dir` holds a host runtime a session can start on: its /usr
 * mount point and generated /etc/passwd (core_runtime_host_build). */
static bool host_runtime_usable(const char *dir) {
        _cleanup_free_ char *usr = NULL, *passwd = NULL;
        struct stat st;
        if (asprintf(&usr, "%s/usr", dir) < 0 || asprintf(&passwd, "%s/etc/passwd", dir) < 0)
                return false;
        return stat(usr, &st) == 0 && S_ISDIR(st.st_mode) && stat(passwd, &st) == 0 && S_ISREG(st.st_mode) &&
               st.st_size > 0;
}

/* Picks the newest usable version under `host` (runtimes/host) into
 * ret_version when a new one cannot be built. Returns 0, or -ENOENT when
 * there is none. */
static int host_runtime_fallback(const char *host, char ret_version[static CORE_RUNTIME_VERSION_LEN + 1]) {
        _cleanup_(closedirp) DIR *d = opendir(host);
        if (!d)
                return -ENOENT;
        struct dirent *de;
        time_t best = 0;
        bool found = false;
        while ((de = readdir(d))) {
                if (strlen(de->d_name) != CORE_RUNTIME_VERSION_LEN ||
                    strspn(de->d_name, "0123456789abcdef") != CORE_RUNTIME_VERSION_LEN)
                        continue;
                _cleanup_free_ char *p = NULL;
                struct stat st;
                if (asprintf(&p, "%s/%s", host, de->d_name) < 0 || !host_runtime_usable(p) || lstat(p, &st) < 0)
                        continue;
                if (!found || st.st_mtime > best) {
                        memcpy(ret_version, de->d_name, CORE_RUNTIME_VERSION_LEN + 1);
                        best = st.st_mtime;
                        found = true;
                }
        }
        return found ? 0 : -ENOENT;
}

/* Removes the temporaries of records a crash cut short (core_write_file_atomic
 * and core_write_file_replace) from every directory the daemon writes records
 * to: each sandbox's config.json and session-record directories, snapshots/,
 * layers/ (capture intents), runtimes/, the helper records. Before anything
 * is loaded, so none of them is mistaken for a record. */
static void sweep_write_temps(manager *m, const daemon_config *cfg) {
        _cleanup_free_ char *helpers = NULL;
        const char *dirs[] = { m->sandboxes_dir, m->run_sandboxes_dir, m->snapshots_dir, m->layers_dir,
                               m->runtimes_dir, asprintf(&helpers, "%s/helpers", cfg->run_dir) < 0 ? NULL : helpers };
        int total = 0;
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                if (!dirs[i])
                        continue;
                int r = core_remove_write_temps(dirs[i]);
                if (r < 0)
                        log_warning_errno(r, "remove stale temporary files in %s: %m", dirs[i]);
                else
                        total += r;
                if (i > 1)
                        continue;
                /* sandboxes/<name>/ and <run>/sandboxes/<name>/ */
                _cleanup_(closedirp) DIR *d = opendir(dirs[i]);
                struct dirent *de;
                while (d && (de = readdir(d))) {
                        _cleanup_free_ char *sub = NULL;
                        if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) ||
                            asprintf(&sub, "%s/%s", dirs[i], de->d_name) < 0)
                                continue;
                        r = core_remove_write_temps(sub);
                        if (r > 0)
                                total += r;
                }
        }
        if (total > 0)
                log_info("removed %d temporary file(s) of interrupted record writes", total);
}

/* ---- flow generations (ct marks, policy/nftgen.h) ----
 *
 * Every custom policy applied gets a generation never handed out before,
 * across restarts too: a flow admitted under an old policy keeps its mark
 * in the kernel for as long as it lives (days for an idle TCP flow), and
 * a new policy given the same mark would let it pass unjudged. <state>/
 * ct-mark holds the first generation not yet reserved; a block is
 * reserved there (fsync'd) before any of it is used, so a restart starts
 * past everything an earlier run may have used, at the cost of skipping
 * the rest of a block. */
#define CT_MARK_FILE "ct-mark"
#define CT_MARK_BLOCK 65536u

static int ct_mark_reserve(void *userdata, uint32_t next, uint32_t *ret_limit) {
        manager *m = userdata;
        _cleanup_free_ char *path = NULL;
        char text[16];
        uint32_t limit = next + CT_MARK_BLOCK;
        if (limit < next)
                limit = 1; /* wraps after 2^32 - 1 generations: starts again at 1 */
        if (asprintf(&path, "%s/" CT_MARK_FILE, m->cfg->state_dir) < 0)
                return -ENOMEM;
        int n = snprintf(text, sizeof(text), "%" PRIu32 "\n", limit);
        int r = core_write_file_atomic(path, text, (size_t)n, 0600);
        if (r < 0) {
                log_error("reserve flow generations in %s: %s; policy changes are refused until it can be "
                          "written", path, strerror(-r));
                return r;
        }
        *ret_limit = limit;
        return 0;
}

/* The stored first unreserved generation: 1 when there is none yet; an
 * unreadable or malformed file is an error naming it (the generations an
 * earlier run used are unknown, so none can be handed out safely). */
static int ct_mark_load(manager *m, uint32_t *ret, sb_error **ret_err) {
        _cleanup_free_ char *path = NULL, *data = NULL;
        size_t len = 0;
        char *end = NULL;
        if (asprintf(&path, "%s/" CT_MARK_FILE, m->cfg->state_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_read_file(path, 64, &data, &len);
        if (r == -ENOENT) {
                *ret = 1;
                return 0;
        }
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "read %s: %s", path, strerror(-r));
        errno = 0;
        unsigned long v = strtoul(data, &end, 10);
        if (errno || end == data || (*end && *end != '\n') || v == 0 || v > UINT32_MAX)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "%s: not a flow generation (a decimal number from 1 to %" PRIu32 "); "
                                    "write the value it had, or a larger one", path, UINT32_MAX);
        *ret = (uint32_t)v;
        return 0;
}

int manager_new(sd_event *event, const daemon_config *cfg, manager **ret, sb_error **ret_err) {
        manager *m = calloc(1, sizeof(*m));
        if (!m)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        m->event = sd_event_ref(event);
        m->cfg = cfg;
        m->init_memfd = -EBADF;
        m->nft_monitor = -EBADF;
        m->addr_monitor = -EBADF;
        m->nflog = -EBADF;
        m->state_lock_fd = -EBADF;
        m->started_ms = core_now_ms();
        _cleanup_free_ char *init = NULL;
        _cleanup_error_ sb_error *nferr = NULL;
        int r;
        /* First of all: a daemon refused here has touched nothing, neither
         * the other daemon's nftables table and veths nor its state. */
        m->netns_lock_fd = r = core_net_lock_namespace(ret_err);
        if (r < 0)
                goto fail;
        if (asprintf(&m->sandboxes_dir, "%s/sandboxes", cfg->state_dir) < 0 ||
            asprintf(&m->runtimes_dir, "%s/runtimes", cfg->state_dir) < 0 ||
            asprintf(&m->run_sandboxes_dir, "%s/sandboxes", cfg->run_dir) < 0 ||
            asprintf(&m->layers_dir, "%s/layers", cfg->state_dir) < 0 ||
            asprintf(&m->snapshots_dir, "%s/snapshots", cfg->state_dir) < 0) {
                r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                goto fail;
        }
        if ((r = core_mkdir_p(m->sandboxes_dir, 0700)) < 0 || (r = core_mkdir_p(m->runtimes_dir, 0700)) < 0 ||
            (r = core_mkdir_p(m->layers_dir, 0700)) < 0 || (r = core_mkdir_p(m->snapshots_dir, 0700)) < 0 ||
            (r = core_mkdir_p(m->run_sandboxes_dir, 0700)) < 0) {
                r = sb_error_set(ret_err, r, NULL, NULL, "create state directories under %s and %s: %s",
                                 cfg->state_dir, cfg->run_dir, strerror(-r));
                goto fail;
        }
        if ((r = lock_state_dir(m, ret_err)) < 0)
                goto fail;
        /* Blank ext4 images to copy per sandbox (diskimg.h), beside the
         * sandboxes' images so a copy can share their extents. */
        {
                _cleanup_free_ char *templates = NULL;
                if (asprintf(&templates, "%s/disk-templates", cfg->state_dir) < 0) {
                        r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                        goto fail;
                }
                if ((r = core_disk_templates_init(templates, ret_err)) < 0)
                        goto fail;
        }
        /* The opt-in storage pool (libcore/pool.h), mounted before any
         * sandbox's disk is attached (reconcile). */
        if ((r = storage_pool_init(m, ret_err)) < 0)
                goto fail;
        /* The spare disk of the default size (diskimg.h), beside the
         * sandboxes' directories so it is renamed into one. */
        if (cfg->disk_mib && !core_pool_enabled()) {
                _cleanup_free_ char *spare = NULL;
                core_disk_limits lim = {.bytes = cfg->disk_mib << 20, .inodes = cfg->disk_inodes};
                if (asprintf(&spare, "%s/disk-spare", cfg->state_dir) < 0) {
                        r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                        goto fail;
                }
                if ((r = core_disk_spare_init(spare, &lim, ret_err)) < 0)
                        goto fail;
        }
        /* The lower layer must be traversable by the sandbox user. */
        /* Snapshot and fork layers hold what root inside a sandbox wrote
         * (setuid-root files included): root-only, like each sandbox's
         * directory (session.c), whatever an older version left. */
        if (chmod(cfg->state_dir, 0711) < 0 || chmod(m->runtimes_dir, 0711) < 0 ||
            chmod(m->sandboxes_dir, 0711) < 0 || chmod(m->layers_dir, 0700) < 0) {
                r = sb_error_set(ret_err, negative_errno(), NULL, NULL, "chmod %s: %m", cfg->state_dir);
                goto fail;
        }
        if ((r = parse_pool(cfg->network_pool, &m->pool, ret_err)) < 0 ||
            (r = parse_pool6(cfg->ipv6_pool, &m->pool, ret_err)) < 0)
                goto fail;
        m->n_slots = core_net_pool_slots(&m->pool);
        pol_nft_set_ipv6_pool(&m->pool);
        {
                uint32_t next_mark = 1;
                if ((r = ct_mark_load(m, &next_mark, ret_err)) < 0)
                        goto fail;
                pol_nft_set_mark_store(next_mark, ct_mark_reserve, m);
        }
        if (m->n_slots > 65536)
                m->n_slots = 65536;
        m->slots = calloc(m->n_slots, sizeof(bool));
        init = find_init(cfg);
        if ((r = core_init_memfd(init, ret_err)) < 0) {
                sb_error_prefix(ret_err, "load sandbox-init (set initPath in daemon.json?)");
                goto fail;
        }
        m->init_memfd = r;
        /* sandbox-netd lives where sandbox-init does (build tree or LIBEXECDIR). */
        {
                _cleanup_free_ char *dir = strdup(init);
                if (!dir || asprintf(&m->netd_path, "%s/sandbox-netd", dirname(dir)) < 0) {
                        r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                        goto fail;
                }
        }
        {
                _cleanup_free_ char *host = NULL;
                if (asprintf(&host, "%s/host", m->runtimes_dir) < 0) {
                        r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                        goto fail;
                }
                if ((r = core_runtime_host_build(host, m->host_version, ret_err)) < 0) {
                        /* A full or failing state filesystem must not keep
                         * the daemon from starting and re-adopting its
                         * sessions: a version an earlier start built serves
                         * as it is (versions are never written after). */
                        if (host_runtime_fallback(host, m->host_version) < 0) {
                                sb_error_prefix(ret_err, "build the host runtime");
                                goto fail;
                        }
                        log_warning("build the host runtime: %s; using version %s already in %s",
                                    ret_err && *ret_err ? (*ret_err)->message : strerror(-r), m->host_version,
                                    host);
                        if (ret_err) {
                                sb_error_free(*ret_err);
                                *ret_err = NULL;
                        }
                        r = 0;
                }
                if (asprintf(&m->host_runtime, "%s/%s", host, m->host_version) < 0) {
                        r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                        goto fail;
                }
        }
        if ((r = init_cgroups(cfg, ret_err)) < 0)
                goto fail;
        if ((r = userns_manager_init(m, ret_err)) < 0)
                goto fail;
        session_dns_upstream_init();
        pol_nft_host_extend();
        if ((r = core_net_host_setup(&m->pool, ret_err)) < 0) {
                sb_error_prefix(ret_err, "nftables");
                goto fail;
        }
        pol_nft_host_reset();
        m->have_nft = true;
        /* Fail closed when someone removes our table (`nft flush ruleset`,
         * a restart of the nftables service): re-install it and every
         * session's rules at once; until then unknown veths are denied. */
        if ((r = core_net_monitor_open(ret_err)) < 0) {
                sb_error_prefix(ret_err, "nftables monitor");
                goto fail;
        }
        m->nft_monitor = r;
        if ((r = sd_event_add_io(event, &m->nft_monitor_src, m->nft_monitor, EPOLLIN, on_nft_event, m)) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "watch nftables: %s", strerror(-r));
                goto fail;
        }
        /* Denials as events: visibility, not enforcement, so a group held
         * by someone else (ulogd) is a warning, not a failure. */
        m->nflog = core_nflog_open(CORE_NFLOG_GROUP, &nferr);
        if (m->nflog < 0)
                log_warning("nftables denials will not be reported as events: %s",
                            nferr ? nferr->message : "cannot open NFLOG");
        else if ((r = sd_event_add_io(event, &m->nflog_src, m->nflog, EPOLLIN, on_nflog, m)) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "watch NFLOG: %s", strerror(-r));
                goto fail;
        }
        /* The never list follows the host's addresses while sessions run. */
        if ((r = core_addr_monitor_open()) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "watch the host's addresses: %s", strerror(-r));
                goto fail;
        }
        m->addr_monitor = r;
        if ((r = sd_event_add_io(event, &m->addr_monitor_src, m->addr_monitor, EPOLLIN, on_addr_event, m)) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "watch the host's addresses: %s", strerror(-r));
                goto fail;
        }
        /* Before adoption: every helper the last daemon started is ended
         * (adopted sessions get new ones), so none holds a gateway port. */
        r = restore_helpers_sweep(cfg->run_dir);
        if (r > 0)
                log_info("ended %d helper process(es) no session owns", r);
        else if (r < 0)
                log_warning_errno(r, "helper records in %s/helpers: %m", cfg->run_dir);
        sweep_write_temps(m, cfg);
        /* Volumes before sandboxes: a sandbox's resume mounts them. */
        if ((r = volumes_load(m, ret_err)) < 0)
                goto fail;
        reconcile(m);
        snapshots_load(m);
        storage_pool_sweep(m);
        runtimes_load(m);
        if ((r = warmpool_init(m)) < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "warm pool: %s", strerror(-r));
                goto fail;
        }
        *ret = m;
        return 0;
fail:
        manager_free(m);
        return r;
}

void manager_stopping(manager *m) {
        if (m)
                m->stopping = true;
}

void manager_drain(manager *m) {
        if (!m)
                return;
        m->stopping = true;
        commands_drain(m);
        fs_watches_drain(m);
        ready_drain(m);
}

void manager_free(manager *m) {
        if (!m)
                return;
        sandbox_stop_all(m);
        warmpool_free(m);
        core_disk_spare_stop();
        commands_listing_free(m);
        while (m->commands) {
                command *c = m->commands;
                m->commands = c->next;
                command_free(c);
        }
        while (m->sandboxes) {
                sandbox *sb = m->sandboxes;
                m->sandboxes = sb->next;
                sandbox_free(sb);
        }
        /* Sessions left running keep their rules: the table stays for
         * them (the next daemon replaces it). */
        if (m->have_nft && !m->kept_sessions)
                core_net_host_teardown(NULL);
        (void) core_cgroup_fini();
        if (m->init_memfd >= 0)
                close(m->init_memfd);
        if (m->state_lock_fd >= 0)
                close(m->state_lock_fd);
        /* Last: only once our table is gone may another daemon take over. */
        core_net_unlock_namespace(m->netns_lock_fd);
        free(m->sandboxes_dir);
        free(m->runtimes_dir);
        free(m->host_runtime);
        free(m->userns_unavailable);
        free(m->userns_probe_error);
        free(m->plain_unavailable);
        cJSON_Delete(m->runtime_jobs);
        free(m->run_sandboxes_dir);
        sd_event_source_disable_unref(m->nflog_src);
        if (m->nflog >= 0)
                close(m->nflog);
        sd_event_source_disable_unref(m->nft_monitor_src);
        if (m->nft_monitor >= 0)
                close(m->nft_monitor);
        sd_event_source_disable_unref(m->addr_monitor_src);
        if (m->addr_monitor >= 0)
                close(m->addr_monitor);
        free(m->netd_path);
        free(m->layers_dir);
        free(m->snapshots_dir);
        snapshots_free(m);
        volumes_free(m);
        free(m->slots);
        sd_event_unref(m->event);
        free(m);
}
