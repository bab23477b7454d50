/* daemon.json: every key optional with a default; an unknown key or a bad
 * value stops the start with a message naming the key. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/socket.h>
#include "libcore/error.h"

struct cJSON;

typedef struct daemon_config {
        char *socket_path;          /* "socket", default /run/sandboxd/sandboxd.sock */
        char *state_dir;            /* "stateDir", default /var/lib/sandboxd */
        char *run_dir;              /* "runDir", default /run/sandboxd */
        char *socket_group;         /* "socketGroup", default "sandboxd" (missing group: root only, warned) */
        size_t max_line_bytes;      /* "maxLineBytes", default 16 MiB, 1 KiB..1 GiB */
        unsigned max_conns_user;    /* "maxConnectionsPerUser", default 256 */
        unsigned max_conns_root;    /* "maxConnectionsRoot", default 1024 */
        uint64_t output_budget_mib; /* "outputBudgetMiB", default 256: queued output of all connections (rpc.h) */
        uint64_t default_timeout_ms;/* "defaultTimeoutMs", default 300000 */
        uint64_t max_timeout_ms;    /* "maxTimeoutMs", default 86400000 */
        unsigned max_vcpus;         /* "maxVcpus", default 8 */
        uint64_t pids_max;          /* "pidsMax", default 4096 */
        uint64_t stop_grace_ms;     /* "stopGraceMs", default 2000 */
        size_t command_log_bytes;   /* "commandLogBytes", default 1 MiB per stream */
        uint64_t log_budget_mib;    /* "logBudgetMiB", default 256: all commands' logs together */
        uint64_t disk_mib;          /* "diskMiB", default 10240: each sandbox's writable layer, 0 = none */
        uint64_t disk_inodes;       /* "diskInodes", default 0: one inode per 16 KiB of diskMiB */
        uint64_t max_source_bytes;  /* "maxSourceBytes", default 4 GiB (tarball download cap) */
        char *network_pool;         /* "networkPool", default "10.201.0.0/16" */
        char *ipv6_pool;            /* "ipv6Pool", default "fd5b:d0c5:6a1e::/64"; "off": no IPv6 */
        char *init_path;            /* "initPath", default: sandbox-init beside the sandboxd binary, else LIBEXECDIR */
        char *runtime_cache;        /* "runtimeCache", debootstrap trees by suite and mirror; NULL: <stateDir>/cache/debootstrap */
        uint64_t bootstrap_timeout_ms; /* "bootstrapTimeoutMs", default 1800000 (30 min) per debootstrap run */
        bool userns;                /* "userns", default true where the host supports it: sandboxes
                                       without "userns" get this */
        bool userns_set;            /* daemon.json named "userns" (else the host decides, userns.c) */
        uint64_t userns_base;       /* "usernsBase", default 100000000: first host id of the pool */
        uint64_t userns_size;       /* "usernsSize", default 268435456 (4096 sandboxes of 65536 ids) */
        char *proxy_upstream_ca;    /* "proxyUpstreamCA", PEM roots the egress proxy trusts for upstreams
                                       besides the host's; NULL: none */
        char **local_source_roots;  /* "localSourceRoots", directories path, file:// tarball and
                                       file:// git sources may lie under; NULL-terminated, NULL:
                                       none (the default), so local sources are refused; admin's and
                                       local tenants' without their own (tenant_roots) */
        char **host_mount_roots;    /* "hostMountRoots", directories the sources of host mounts
                                       (container.create and sandbox.create "mounts") must lie
                                       under; NULL-terminated, NULL: none (the default), so every
                                       host mount is refused */
        char **listen;              /* "listen", TCP addresses for remote clients ("tcp://ADDR:PORT"),
                                       NULL-terminated; NULL: none (the default) */
        char *tls_cert;             /* "tlsCert", PEM: the listener's certificate (chain) */
        char *tls_key;              /* "tlsKey", PEM: its private key */
        char *tls_client_ca;        /* "tlsClientCA", PEM: the CA(s) client certificates must chain to */
        uint64_t tls_handshake_timeout_ms; /* "tlsHandshakeTimeoutMs", default 10000 */
        unsigned max_conns_remote;  /* "maxConnectionsRemote", default 256 */
        unsigned max_conns_addr;    /* "maxConnectionsPerAddress", default 64 */
        unsigned max_tls_handshakes; /* "maxTlsHandshakes", default 64 */
        char *log_level;            /* "logLevel", NULL: info (debug with SANDBOXD_DEBUG=1) */
        bool metrics;               /* "metrics", default true: the metrics endpoint serves */
        char *metrics_socket;       /* "metricsSocket", NULL: <runDir>/metrics.sock */
        char *metrics_listen;       /* "metricsListen", loopback "ADDR:PORT" also serving /metrics; NULL: none */
        struct cJSON *storage;      /* "storage" {pool: {sizeMiB} | {device}} as validated; NULL or no
                                       pool: ext4 images (libcore/pool.h) */
        struct cJSON *warm_pool;    /* "warmPool" {size, runtime, policy} as validated; NULL: off
                                       (warmpool.c; daemon_config_warm_pool() reads it) */
        char *cgroup_driver;        /* "cgroupDriver", default "auto": "systemd" when systemd is PID 1
                                       (/run/systemd/system), else "cgroupfs" (libcore/cgroup.h) */
        struct cJSON *default_network_policy; /* "defaultNetworkPolicy": the networkPolicy of a create
                                       that names none, as validated ("allow-all", "deny-all" or a
                                       policy object); NULL: "allow-all" (DESIGN §5.1 rule 1) */
        struct cJSON *tenants;      /* "tenants" {localAdmins, defaults, names} as validated
                                       (tenant.c reads it); NULL: none given */
        struct cJSON *kubernetes;   /* "kubernetes" {podCIDRs, serviceCIDRs, clusterDNS} as validated
                                       (pod.c reads it); NULL: none given */
} daemon_config;

/* Fills *cfg with defaults. */
void daemon_config_defaults(daemon_config *cfg);

/* Loads `path` over the defaults in *cfg. A missing file is fine only when
 * `must_exist` is false (the default path). Errors name the key:
 * "daemon.json: maxVcpus: must be an integer from 1 to 256". */
int daemon_config_load(daemon_config *cfg, const char *path, bool must_exist, sb_error **ret_err);

/* Parses a JSON text (same rules as the file). Used by load and the tests. */
int daemon_config_parse(daemon_config *cfg, const char *text, sb_error **ret_err);

void daemon_config_free(daemon_config *cfg);

/* The most sessions daemon.json's warmPool.size may keep prepared. */
#define WARM_POOL_MAX_SIZE 64
/* daemon.json's warmPool with its defaults filled in: *ret_size sessions
 * (0: the pool is off), on runtime *ret_runtime ("host" by default), for
 * creates whose networkPolicy mode is *ret_policy ("allow-all" by
 * default, "deny-all" or "custom"). The strings are owned by cfg. */
void daemon_config_warm_pool(const daemon_config *cfg, unsigned *ret_size, const char **ret_runtime,
                             const char **ret_policy);

/* The effective configuration: a JSON object with every key daemon.json
 * knows and its value in *cfg, defaults included (a path not set is null,
 * localSourceRoots an array). Caller owns the result (cJSON_Delete); NULL
 * when out of memory. Used by `sandboxd --check-config`. */
struct cJSON *daemon_config_to_json(const daemon_config *cfg);

/* The roff text of sandboxd(8)'s key list, one ".TP" entry per key of the
 * table in config.c: name, type, range, default and what it changes. The
 * man page holds it between the comment lines ".\" BEGIN CONFIG KEYS" and
 * ".\" END CONFIG KEYS" (groff_man(7)). Caller frees; NULL when out of
 * memory. */
char *daemon_config_man_table(void);

/* daemon.json's defaultNetworkPolicy as daemon.info and --check-config
 * show it: normalised (pol_policy_to_json) with every header value of a
 * rule replaced by "<redacted>"; "allow-all" when unset. Caller owns the
 * result (cJSON_Delete); NULL when out of memory. */
struct cJSON *daemon_config_default_policy_json(const daemon_config *cfg);

struct sockaddr_storage;
/* Parses a listen address "tcp://ADDR:PORT": ADDR a numeric IPv4 address
 * or a bracketed IPv6 one ("tcp://[::1]:7443"), PORT 1-65535. Returns 0
 * and fills *ret (and *ret_len) or -EINVAL. No name is resolved: the
 * daemon binds what the operator wrote. */
int daemon_config_parse_listen(const char *s, struct sockaddr_storage *ret, unsigned *ret_len);
/* The syslog level (LOG_ERR .. LOG_DEBUG, syslog(3)) "logLevel" names, or
 * -1 when the key is not set (the environment decides, libcore/log.h). */
int daemon_config_log_level(const daemon_config *cfg);

/* Parses "metricsListen": "ADDR:PORT" with ADDR in 127.0.0.0/8 (RFC 1122
 * 3.2.1.3) or "[::1]" and PORT 1..65535, into *ret (may be NULL) and
 * *ret_len. -EINVAL for anything else, a non-loopback address included. */
int daemon_config_parse_loopback(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len);

/* A reload: the keys of *next that may change while the daemon runs
 * (marked live in config.c's table: limits for new sandboxes and commands,
 * logLevel, the metrics keys) are moved into *cur; every other key that
 * differs keeps *cur's value. *ret_changed and *ret_kept get the names
 * changed and kept, comma-separated, or NULL when none (caller frees).
 * Runs on the event loop thread; *next is left for daemon_config_free(). */
void daemon_config_apply_live(daemon_config *cur, daemon_config *next, char **ret_changed, char **ret_kept);
