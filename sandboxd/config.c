#include <sys/stat.h>
#include <fcntl.h>
/* daemon.json: the defaults, the table of known keys with their types and
 * ranges, and the loader that applies a file over the defaults (config.h).
 *
 * The file is validated as a whole before anything is applied, so a bad file
 * leaves the configuration it was loaded over untouched. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "libcore/diskimg.h"
#include "libcore/pool.h"
#include "libcore/util.h"
#include "policy/policy.h"
#include "sandboxd/config.h"
#include "sandboxd/tenant.h"

#define KIB ((uint64_t) 1024)
#define MIB (KIB * 1024)
#define GIB (MIB * 1024)

/* A daemon.json file is small; anything bigger is not a config file. */
#define CONFIG_MAX_BYTES (1 * MIB)

typedef enum {
        KEY_PATH,      /* absolute path string */
        KEY_SOCKET,    /* absolute path that fits in sockaddr_un.sun_path */
        KEY_NAME,      /* non-empty string without '/' or ':' (a group name) */
        KEY_CIDR4,     /* canonical IPv4 CIDR */
        KEY_CIDR6,     /* canonical IPv6 CIDR inside fc00::/7 (unique local, RFC 4193), or "off" */
        KEY_CGDRIVER,  /* "auto", "systemd" or "cgroupfs" (cgroupDriver) */
        KEY_PATH_LIST, /* array of absolute paths, stored NULL-terminated in a char ** */
        KEY_SIZE,      /* integer stored in a size_t */
        KEY_U64,       /* integer stored in a uint64_t */
        KEY_UINT,      /* integer stored in an unsigned */
        KEY_BOOL,      /* true or false, stored in a bool */
        KEY_LISTEN_LIST, /* array of "tcp://ADDR:PORT", stored like KEY_PATH_LIST */
        KEY_LEVEL,     /* a syslog level name (debug .. error), stored as its char * */
        KEY_LOOPBACK,  /* "ADDRESS:PORT" with a loopback IPv4 or "[::1]" address, stored as char * */
        KEY_WARMPOOL,  /* {size, runtime, policy} (warmPool), stored as its cJSON copy */
        KEY_POLICY,    /* a networkPolicy document (pol_policy_parse), stored as its cJSON copy */
        KEY_TENANTS,   /* {localAdmins, defaults, names} (tenant_config_check), stored as its cJSON copy */
        KEY_STORAGE,   /* {pool: {sizeMiB} or {device}} (check_storage), stored as its cJSON copy */
        KEY_KUBERNETES, /* {podCIDRs, serviceCIDRs, clusterDNS} (check_kubernetes), stored as its cJSON copy */
} key_kind;

typedef struct config_key {
        const char *name;
        key_kind kind;
        size_t offset;
        uint64_t min, max;  /* integers only; KEY_PATH_LIST: max entries */
        const char *doc;    /* one line for sandboxd(8): what the key changes */
        const char *def;    /* the default in words where it is not one fixed value; NULL: the value */
        bool live;          /* a reload (SIGHUP) applies a new value; otherwise it needs a restart */
} config_key;

#define OFF(f) offsetof(daemon_config, f)

static bool kind_is_integer(key_kind kind) {
        return kind == KEY_SIZE || kind == KEY_U64 || kind == KEY_UINT;
}

/* The ranges keep values where the rest of the daemon was designed to work:
 * maxVcpus 256 bounds cpu.max arithmetic, pidsMax 4194304 is the kernel's
 * PID_MAX_LIMIT, timeouts stop at 30 days, the pool prefix at /30 leaves at
 * least two /31 links. The defaults are daemon_config_defaults()'s; the
 * CONFIGURATION section of docs/man/sandboxd.8 is generated from this table
 * (daemon_config_man_table(), checked by tests/unit/test-config.c). */
static const config_key config_keys[] = {
        { "socket",           KEY_SOCKET, OFF(socket_path), 0, 0,
          "The JSON-RPC socket the daemon listens on (mode 0660, group socketGroup); --socket replaces it.", NULL },
        { "stateDir",         KEY_PATH,   OFF(state_dir), 0, 0,
          "Persistent state: sandboxes, snapshots, runtimes; --state-dir replaces it.", NULL },
        { "runDir",           KEY_PATH,   OFF(run_dir), 0, 0,
          "Runtime state that does not survive a reboot (sessions, helpers); --run-dir replaces it.", NULL },
        { "socketGroup",      KEY_NAME,   OFF(socket_group), 0, 0,
          "The group whose members may connect to the socket; a missing group leaves root only (warned).", NULL },
        { "maxLineBytes",     KEY_SIZE,   OFF(max_line_bytes), 1 * KIB, 1 * GIB,
          "The longest JSON-RPC message (one line) a client may send, in bytes.", NULL },
        { "maxConnectionsPerUser", KEY_UINT, OFF(max_conns_user), 1, 1000000,
          "Open JSON-RPC connections per peer uid other than root (see maxConnectionsRoot); one over it gets an error line and is closed.", NULL },
        { "maxConnectionsRoot", KEY_UINT, OFF(max_conns_root), 1, 1000000,
          "Open JSON-RPC connections of root (uid 0); one over it gets an error line and is closed.", NULL },
        { "outputBudgetMiB",  KEY_U64,    OFF(output_budget_mib), 16, 1024 * 1024,
          "One budget for the answers and output queued for every JSON-RPC connection together, in MiB; past it, of the client holding the most (a tenant, an admin uid or certificate), the connection that has read nothing for the longest time is dropped (logged).", NULL },
        { "defaultTimeoutMs", KEY_U64,    OFF(default_timeout_ms), 1000, 30ULL * 86400000,
          "A sandbox's timeout when create does not give one, in milliseconds; at most maxTimeoutMs.", NULL , .live = true },
        { "maxTimeoutMs",     KEY_U64,    OFF(max_timeout_ms), 1000, 30ULL * 86400000,
          "The longest timeout a sandbox may be given or extended to, in milliseconds.", NULL , .live = true },
        { "maxVcpus",         KEY_UINT,   OFF(max_vcpus), 1, 256,
          "The most vCPUs a sandbox may ask for (each vCPU also brings 2048 MiB of memory).", NULL , .live = true },
        { "pidsMax",          KEY_U64,    OFF(pids_max), 16, 4194304,
          "The most processes and threads of one sandbox (pids cgroup).", NULL , .live = true },
        { "stopGraceMs",      KEY_U64,    OFF(stop_grace_ms), 0, 600000,
          "How long a stopped sandbox's processes get after SIGTERM before SIGKILL, in milliseconds "
          "(sandbox.stop, the timeout, and sandbox.delete of a sandbox with a writable volume or host mount; "
          "other deletes kill at once).", NULL , .live = true },
        { "commandLogBytes",  KEY_SIZE,   OFF(command_log_bytes), 4 * KIB, 1 * GIB,
          "The bytes of each stream (stdout, stderr) of each command the daemon keeps.", NULL , .live = true },
        { "logBudgetMiB",     KEY_U64,    OFF(log_budget_mib), 1, 1024 * 1024,
          "One budget for the kept logs of every command, in MiB; over it the oldest finished command's logs go first.",
          NULL , .live = true },
        /* 0 opts out of the disk bound; otherwise at least the image's
         * minimum (libcore/diskimg.h), checked at load. */
        { "diskMiB",          KEY_U64,    OFF(disk_mib), 0, 16 * 1024 * 1024,
          "Each sandbox's writable layer as an ext4 image of this size, in MiB, holding all its blocks on the state filesystem from its create (a create the state filesystem cannot back is refused; docs/SECURITY.md \"Disk space\"): 0 (unbounded, no image: the sandbox writes on the state filesystem itself) or at least 16.", NULL , .live = true },
        { "diskInodes",       KEY_U64,    OFF(disk_inodes), 0, 1ULL << 32,
          "Inodes of each sandbox's disk image; 0: one per 16 KiB of diskMiB.", NULL , .live = true },
        { "maxSourceBytes",   KEY_U64,    OFF(max_source_bytes), 1 * MIB, 1024 * GIB,
          "The largest tarball source the daemon downloads, in bytes.", NULL , .live = true },
        { "networkPool",      KEY_CIDR4,  OFF(network_pool), 0, 0,
          "The IPv4 network sandboxes' links are taken from (prefix 8 to 30, no host bits).", NULL },
        /* DESIGN §5: the same for IPv6 from a configurable ULA pool (NAT66). */
        { "ipv6Pool",         KEY_CIDR6,  OFF(ipv6_pool), 0, 0,
          "The IPv6 unique local network (inside fc00::/7, prefix 8 to 120, no host bits) sandboxes' links are taken from, a /127 per session, masqueraded (NAT66) when it leaves the host; it must hold as many /127 links as networkPool holds /31s; \"off\" gives sessions no IPv6.", NULL },
        { "initPath",         KEY_PATH,   OFF(init_path), 0, 0,
          "The sandbox-init binary run as PID 1 of each sandbox.",
          "sandbox-init beside the sandboxd binary, else LIBEXECDIR/sandbox-init" },
        { "runtimeCache",     KEY_PATH,   OFF(runtime_cache), 0, 0,
          "Where debootstrap trees are cached by suite and mirror.", "STATEDIR/cache/debootstrap (null)" },
        { "bootstrapTimeoutMs", KEY_U64,  OFF(bootstrap_timeout_ms), 10000, 6ULL * 3600000,
          "The longest one debootstrap run of a runtime may take, in milliseconds.", NULL , .live = true },
        { "proxyUpstreamCA",  KEY_PATH,   OFF(proxy_upstream_ca), 0, 0,
          "A PEM file of roots the egress proxy trusts for upstream TLS besides the host's.", "none (null)" },
        /* Where path and file:// sources may come from (libcore/source-local.c);
         * none by default: such a source is read by the daemon, so the
         * operator says which host directories sandboxes may take files from. */
        { "hostMountRoots", KEY_PATH_LIST, OFF(host_mount_roots), 0, 64,
          "The host directories whose files and directories root on the local socket may bind into containers and sandboxes (container.create and sandbox.create \"mounts\"): absolute, existing, not /, none inside another; none (the default): every host mount is refused. A sandbox without a user namespace gets them read-only only (its root is host root on those files). For Kubernetes nodes: the kubelet's pod directory (/var/lib/kubelet/pods) and containerd's sandbox state (/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes, /run/containerd/io.containerd.grpc.v1.cri/sandboxes)." },
        { "localSourceRoots", KEY_PATH_LIST, OFF(local_source_roots), 0, 64,
          "The host directories path and file:// sources, imports and exports of admin and of local uid:N tenants may lie under (a tenant with tenants.names.NAME.localSourceRoots has those instead; a remote tenant never these); none: every local source is refused.",
          "none ([])" },
        /* The user namespace pool (libcore/userns.h): host ids
         * [usernsBase, usernsBase + usernsSize), 65536 per sandbox; checked
         * against host accounts and /etc/sub[ug]id at start. */
        { "userns",           KEY_BOOL,   OFF(userns), 0, 0,
          "Whether sandboxes that do not say otherwise run in a user namespace; true makes it mandatory.",
          "on where the host supports it" },
        { "usernsBase",       KEY_U64,    OFF(userns_base), 65536, 4294967295ULL - 65536,
          "The first host id of the user namespace pool.", NULL },
        { "usernsSize",       KEY_U64,    OFF(userns_size), 65536, 4294967295ULL - 65536,
          "The host ids of the user namespace pool, 65536 per sandbox: a multiple of 65536, with usernsBase + usernsSize at most 4294967295.", NULL },
        /* Remote clients (sandboxd/remote.c): JSON-RPC over TLS 1.3 with
         * mandatory client certificates; all three files are required once
         * listen names an address. */
        { "listen",           KEY_LISTEN_LIST, OFF(listen), 0, 8,
          "TCP addresses for remote clients, each \"tcp://ADDR:PORT\" (numeric IPv4, or [IPv6]); needs tlsCert, tlsKey and tlsClientCA.",
          "none ([])" },
        { "tlsCert",          KEY_PATH,   OFF(tls_cert), 0, 0,
          "PEM file of the TCP listener's certificate, then its intermediates.", "none (null)" },
        { "tlsKey",           KEY_PATH,   OFF(tls_key), 0, 0,
          "PEM file of that certificate's private key (keep it mode 0600).", "none (null)" },
        { "tlsClientCA",      KEY_PATH,   OFF(tls_client_ca), 0, 0,
          "PEM file of the CA certificates a client certificate must chain to; the subject's O names the role (admin, tenant:NAME, or tag:KEY=VALUE read as the tenant named so).",
          "none (null)" },
        { "tlsHandshakeTimeoutMs", KEY_U64, OFF(tls_handshake_timeout_ms), 100, 120000,
          "How long a TCP client has to finish its TLS handshake before it is disconnected, in milliseconds.", NULL },
        { "maxConnectionsRemote", KEY_UINT, OFF(max_conns_remote), 1, 1000000,
          "Open TLS connections on all listen addresses together; one over it is closed at once.", NULL },
        { "maxConnectionsPerAddress", KEY_UINT, OFF(max_conns_addr), 1, 1000000,
          "Open TLS connections from one client IP address; one over it is closed at once.", NULL },
        { "maxTlsHandshakes", KEY_UINT, OFF(max_tls_handshakes), 1, 100000,
          "TLS handshakes in progress at a time (one client address, or IPv6 /64, holds at most a quarter of them); a connection over it is closed at once.", NULL },
        /* Read by the event loop only, so a reload may replace them. */
        { "logLevel",         KEY_LEVEL,  OFF(log_level), 0, 0,
          "The most verbose level logged: debug, info, notice, warning or error.",
          "info, debug with SANDBOXD_DEBUG=1 in the environment (null)", .live = true },
        { "metrics",          KEY_BOOL,   OFF(metrics), 0, 0,
          "Whether the Prometheus metrics endpoint (metricsSocket, metricsListen) serves.", NULL, .live = true },
        { "metricsSocket",    KEY_SOCKET, OFF(metrics_socket), 0, 0,
          "The Unix socket serving GET /metrics (Prometheus text format; mode 0660, group socketGroup).",
          "RUNDIR/metrics.sock (null)", .live = true },
        { "metricsListen",    KEY_LOOPBACK, OFF(metrics_listen), 0, 0,
          "Also serve GET /metrics on this TCP address, which must be a loopback one (127.0.0.1:9464, [::1]:9464), to root and socketGroup members only.",
          "none (null)", .live = true },
        /* sandboxd/warmpool.c: sessions prepared ahead for creates that match. */
        { "warmPool",         KEY_WARMPOOL, OFF(warm_pool), 0, WARM_POOL_MAX_SIZE,
          "Sessions kept prepared (namespaces, mounts, disk image, cgroup, sandbox-init), under deny-all until a sandbox.create without source or resources other than the defaults, on the same runtime and of the same networkPolicy mode adopts one: {\"size\": 0 to 64 (0: off), \"runtime\": a runtime name (default \"host\"), \"policy\": \"allow-all\" (default), \"deny-all\" or \"custom\"}; every other create takes the cold path.",
          "off ({\"size\":0,\"runtime\":\"host\",\"policy\":\"allow-all\"})" },
        /* libcore/pool.h: the opt-in Btrfs storage pool; made, formatted
         * and mounted at start, so a change needs a restart. */
        { "storage",          KEY_STORAGE, OFF(storage), 0, 0,
          "Where sandboxes' disks live: {} (default) gives each sandbox a fully allocated ext4 image on the state filesystem; {\"pool\": {\"sizeMiB\": N}} (at least 256) a Btrfs pool the daemon makes as a fully allocated file <stateDir>/pool.img, or {\"pool\": {\"device\": \"/dev/...\"}} one on a whole block device (formatted only when blank), mounted at <stateDir>/pool: each new sandbox's disk is a subvolume with a quota of its diskMiB, and forks and snapshots are O(1) read-only snapshots. Admission never commits more than the pool holds (docs/SECURITY.md \"Disk space\"). Sandboxes made before keep their images and are served beside the pool's; the pool is the recommended storage wherever it can be given a size or a device.",
          "{} (ext4 images)" },
        /* libcore/cgroup.h: systemd scope units over D-Bus, or cgroupfs
         * directories below the daemon's own cgroup. */
        { "cgroupDriver",     KEY_CGDRIVER, OFF(cgroup_driver), 0, 0,
          "Who makes each session's cgroup: systemd (a transient scope unit sandboxd-NAME.scope in sandboxd.slice, made over D-Bus), cgroupfs (directories below the daemon's own cgroup), or auto: systemd when it is PID 1 and /run/systemd/system exists, else cgroupfs.", NULL },
        /* DESIGN §5.1 rule 1 is the default; read by the event loop only
         * (parse_create), so a reload may replace it. */
        { "defaultNetworkPolicy", KEY_POLICY, OFF(default_network_policy), 0, 0,
          "The networkPolicy of a sandbox.create or getOrCreate that gives none (the CLI, the SDKs and the containerd shim send none unless asked): \"allow-all\", \"deny-all\" or a policy object as networkPolicy takes (docs/POLICY.md), validated at load. Sandboxes made earlier, forks and creates from a snapshot keep their own policy; daemon.info shows it, header values redacted.",
          NULL, .live = true },
        /* sandboxd/tenant.c: who is admin on the Unix socket and what each
         * tenant may take; read by the event loop only, so a reload may
         * replace it (limits apply to new objects, nothing running is
         * touched). */
        { "tenants",          KEY_TENANTS, OFF(tenants), 0, 0,
          "Tenants (docs/SECURITY.md 4): {\"localAdmins\": [UID...] (non-root uids of the socket group that are admin; every other one is the tenant uid:N), \"gateways\": [UID...] (non-root, non-admin uids whose connections act as one tenant each, named by session.actAs, e.g. sandboxd-e2b's), \"defaults\": LIMITS (every tenant), \"names\": {NAME: LIMITS} (one tenant: uid:N, tag:K=V or a tenant:NAME certificate's NAME)}; LIMITS is {\"maxSandboxes\", \"maxVcpus\", \"maxDiskMiB\", \"maxSnapshots\", \"maxRuntimes\", \"maxVolumes\": integer or null (no limit, the default), \"networkModes\": the networkPolicy modes allowed (default all three), \"allowNoUserns\": a create may set userns false (default false), \"allowLocalSources\": path and file:// sources under localSourceRoots (default false), \"allowRuntimeImport\": runtime.import (a tarball under localSourceRoots) and runtime.bootstrap (the daemon's mirror) of runtimes its own (default false), \"allowSnapshotImport\": snapshot.import of a file under localSourceRoots (default false), \"allowSnapshotExport\": snapshot.export of its snapshots into a directory under localSourceRoots (default false), \"localSourceRoots\": in tenants.names only (refused in defaults), the tenant's own absolute, existing directories, none of them another tenant's, that its host paths (the four allow keys above) are confined beneath instead of the top-level localSourceRoots; a remote tenant (TLS, gateway session.actAs) without its own has no host paths at all, a local uid:N tenant without its own has the top-level ones, opened as its uid}.",
          "{} (uid 0 alone is admin; tenants unlimited in counts, every network mode, no userns false, no local sources)", .live = true },
        /* docs/KUBERNETES.md "The pod model" step 4: what a pod sandbox
         * (sandbox.create network.netns) may reach of its cluster. Read
         * when a pod's table is built, so a restart applies a change. */
        { "kubernetes",       KEY_KUBERNETES, OFF(kubernetes), 0, 0,
          "The cluster's own ranges for pod sandboxes (sandbox.create network.netns, docs/KUBERNETES.md): {\"podCIDRs\": [CIDR...], \"serviceCIDRs\": [CIDR...], \"clusterDNS\": [ADDRESS...]}, each empty by default. Pod and service CIDRs are not open to a pod by default: its policy admits them (a subnets.allow entry) or allow-all does; the node's addresses and 169.254.0.0/16 stay refused. The first clusterDNS address is the upstream of a pod's DNS filter (else the host's resolver).",
          "{} (no ranges; pods resolve through the host's resolver)" },
};

static const char *const level_names[] = {
        [LOG_ERR] = "error", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

int daemon_config_log_level(const daemon_config *cfg) {
        for (size_t i = 0; cfg->log_level && i < ELEMENTSOF(level_names); i++)
                if (level_names[i] && streq(level_names[i], cfg->log_level))
                        return (int) i;
        return -1;
}

int daemon_config_parse_loopback(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len) {
        const char *colon = strrchr(s, ':');
        if (!colon || colon == s)
                return -EINVAL;
        char host[INET6_ADDRSTRLEN + 2];
        size_t n = (size_t) (colon - s);
        if (n >= sizeof(host))
                return -EINVAL;
        memcpy(host, s, n);
        host[n] = '\0';
        char *end;
        errno = 0;
        unsigned long port = strtoul(colon + 1, &end, 10);
        if (errno || *end || end == colon + 1 || colon[1] == '+' || colon[1] == '-' || port < 1 || port > 65535)
                return -EINVAL;
        struct sockaddr_storage ss = {};
        if (host[0] == '[') {
                if (n < 3 || host[n - 1] != ']')
                        return -EINVAL;
                host[n - 1] = '\0';
                struct sockaddr_in6 *a = (struct sockaddr_in6 *) &ss;
                a->sin6_family = AF_INET6;
                a->sin6_port = htons((uint16_t) port);
                if (inet_pton(AF_INET6, host + 1, &a->sin6_addr) != 1 || !IN6_IS_ADDR_LOOPBACK(&a->sin6_addr))
                        return -EINVAL;
                *ret_len = sizeof(*a);
        } else {
                struct sockaddr_in *a = (struct sockaddr_in *) &ss;
                a->sin_family = AF_INET;
                a->sin_port = htons((uint16_t) port);
                /* 127.0.0.0/8 (RFC 1122 3.2.1.3). */
                if (inet_pton(AF_INET, host, &a->sin_addr) != 1 || (ntohl(a->sin_addr.s_addr) >> 24) != 127)
                        return -EINVAL;
                *ret_len = sizeof(*a);
        }
        if (ret)
                *ret = ss;
        return 0;
}

/* Start-up only: running out of memory while building the defaults leaves
 * nothing sensible to do. */
static char *xstrdup(const char *s) {
        char *p = strdup(s);
        if (!p)
                abort();
        return p;
}

/* sandbox-init beside our own binary (a build tree or a relocated install),
 * else the configured LIBEXECDIR. */
static char *default_init_path(void) {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n > 0) {
                exe[n] = '\0';
                char *slash = strrchr(exe, '/');
                if (slash) {
                        _cleanup_free_ char *p = NULL;
                        *slash = '\0';
                        if (asprintf(&p, "%s/sandbox-init", exe) >= 0 && access(p, X_OK) == 0)
                                return TAKE_PTR(p);
                }
        }
        return xstrdup(LIBEXECDIR "/sandbox-init");
}

void daemon_config_defaults(daemon_config *cfg) {
        *cfg = (daemon_config) {
                .socket_path = xstrdup("/run/sandboxd/sandboxd.sock"),
                .state_dir = xstrdup("/var/lib/sandboxd"),
                .run_dir = xstrdup("/run/sandboxd"),
                .socket_group = xstrdup("sandboxd"),
                .max_line_bytes = 16 * MIB,
                .max_conns_user = 256,
                .max_conns_root = 1024,
                .output_budget_mib = 256,
                .default_timeout_ms = 300000,
                .max_timeout_ms = 86400000,
                .max_vcpus = 8,
                .pids_max = 4096,
                .stop_grace_ms = 2000,
                .command_log_bytes = 1 * MIB,
                .log_budget_mib = 256,
                .disk_mib = 2048,
                .max_source_bytes = 4 * GIB,
                .network_pool = xstrdup("10.201.0.0/16"),
                .ipv6_pool = xstrdup("fd5b:d0c5:6a1e::/64"),
                .init_path = default_init_path(),
                .bootstrap_timeout_ms = 1800000,
                .userns = true,
                .userns_base = 100000000,
                .userns_size = 4096 * 65536ULL,
                .tls_handshake_timeout_ms = 5000,
                .max_conns_remote = 256,
                .max_conns_addr = 64,
                .max_tls_handshakes = 64,
                .metrics = true,
                .cgroup_driver = xstrdup("auto"),
        };
}

static void path_list_free(char **l) {
        for (size_t i = 0; l && l[i]; i++)
                free(l[i]);
        free(l);
}

void daemon_config_free(daemon_config *cfg) {
        if (!cfg)
                return;
        free(cfg->socket_path);
        free(cfg->state_dir);
        free(cfg->run_dir);
        free(cfg->socket_group);
        free(cfg->network_pool);
        free(cfg->ipv6_pool);
        free(cfg->init_path);
        free(cfg->runtime_cache);
        free(cfg->proxy_upstream_ca);
        free(cfg->log_level);
        free(cfg->metrics_socket);
        free(cfg->metrics_listen);
        free(cfg->cgroup_driver);
        cJSON_Delete(cfg->warm_pool);
        cJSON_Delete(cfg->default_network_policy);
        cJSON_Delete(cfg->tenants);
        cJSON_Delete(cfg->storage);
        cJSON_Delete(cfg->kubernetes);
        path_list_free(cfg->local_source_roots);
        path_list_free(cfg->host_mount_roots);
        path_list_free(cfg->listen);
        free(cfg->tls_cert);
        free(cfg->tls_key);
        free(cfg->tls_client_ca);
        *cfg = (daemon_config) {};
}

/* A canonical IPv4 CIDR with a prefix from 8 to 30 and no host bits. */
static bool cidr4_is_valid(const char *s) {
        const char *slash = strchr(s, '/');
        if (!slash || slash - s >= INET_ADDRSTRLEN)
                return false;
        char addr[INET_ADDRSTRLEN];
        memcpy(addr, s, slash - s);
        addr[slash - s] = '\0';
        struct in_addr in;
        if (inet_pton(AF_INET, addr, &in) != 1)
                return false;
        char *end;
        errno = 0;
        long prefix = strtol(slash + 1, &end, 10);
        if (errno || *end || end == slash + 1 || slash[1] == '+' || slash[1] == '-' ||
            prefix < 8 || prefix > 30)
                return false;
        uint32_t mask = ~(uint32_t) 0 << (32 - prefix);
        return (ntohl(in.s_addr) & ~mask) == 0;
}

/* "off", or a canonical IPv6 CIDR inside fc00::/7 with a prefix from 8 to
 * 120 and no host bits. */
static bool cidr6_is_valid(const char *s) {
        if (streq(s, "off"))
                return true;
        const char *slash = strchr(s, '/');
        if (!slash || slash - s >= INET6_ADDRSTRLEN)
                return false;
        char addr[INET6_ADDRSTRLEN];
        memcpy(addr, s, slash - s);
        addr[slash - s] = '\0';
        struct in6_addr in;
        if (inet_pton(AF_INET6, addr, &in) != 1 || (in.s6_addr[0] & 0xfe) != 0xfc)
                return false;
        char *end;
        errno = 0;
        long prefix = strtol(slash + 1, &end, 10);
        if (errno || *end || end == slash + 1 || slash[1] == '+' || slash[1] == '-' || prefix < 8 || prefix > 120)
                return false;
        for (long bit = prefix; bit < 128; bit++)
                if (in.s6_addr[bit / 8] & (0x80 >> (bit % 8)))
                        return false;
        return true;
}

static int check_string(const config_key *k, const cJSON *v, sb_error **ret_err) {
        if (!cJSON_IsString(v))
                return sb_error_set(ret_err, -EINVAL, NULL, k->name, "daemon.json: %s: must be a string",
                                    k->name);
        const char *s = v->valuestring;
        switch (k->kind) {
        case KEY_SOCKET:
                if (s[0] != '/' || strlen(s) >= sizeof(((struct sockaddr_un *) NULL)->sun_path))
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s: must be an absolute path shorter than %zu bytes",
                                            k->name, sizeof(((struct sockaddr_un *) NULL)->sun_path));
                return 0;
        case KEY_PATH:
                if (s[0] != '/')
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s: must be an absolute path", k->name);
                return 0;
        case KEY_NAME:
                if (!s[0] || strpbrk(s, "/: \t\n"))
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s: must be a group name", k->name);
                return 0;
        case KEY_LEVEL:
                for (size_t i = 0; i < ELEMENTSOF(level_names); i++)
                        if (level_names[i] && streq(level_names[i], s))
                                return 0;
                return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                    "daemon.json: %s: must be one of debug, info, notice, warning, error", k->name);
        case KEY_LOOPBACK: {
                socklen_t len;
                if (daemon_config_parse_loopback(s, NULL, &len) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s: must be a loopback address and port like "
                                            "127.0.0.1:9464 or [::1]:9464",
                                            k->name);
                return 0;
        }
        case KEY_CGDRIVER:
                if (!streq(s, "auto") && !streq(s, "systemd") && !streq(s, "cgroupfs"))
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s: must be \"auto\", \"systemd\" or \"cgroupfs\"", k->name);
                return 0;
        case KEY_CIDR4:
                if (!cidr4_is_valid(s))
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s: must be an IPv4 network like 10.201.0.0/16 "
                                            "with a prefix from 8 to 30 and no host bits set",
                                            k->name);
                return 0;
        case KEY_CIDR6:
                if (!cidr6_is_valid(s))
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s: must be \"off\" or an IPv6 unique local network "
                                            "like fd5b:d0c5:6a1e::/64 (inside fc00::/7) with a prefix from 8 to "
                                            "120 and no host bits set",
                                            k->name);
                return 0;
        default:
                return -EINVAL;
        }
}

/* An array of at most k->max absolute paths, none "/" and none with a "."
 * or ".." component (the paths are compared as text). */
static int check_path_list(const config_key *k, const cJSON *v, sb_error **ret_err) {
        if (!cJSON_IsArray(v) || (uint64_t) cJSON_GetArraySize(v) > k->max)
                return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                    "daemon.json: %s: must be an array of at most %" PRIu64 " absolute paths",
                                    k->name, k->max);
        const cJSON *it;
        int i = 0;
        cJSON_ArrayForEach(it, v) {
                if (!core_path_is_plain_absolute(cJSON_GetStringValue(it)))
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s[%d]: must be an absolute directory path other than "
                                            "/ without '.' or '..' components",
                                            k->name, i);
                i++;
        }
        return 0;
}

/* hostMountRoots beyond check_path_list: each an existing directory
 * (stat follows no symlink at the last component: a root that is a link
 * could be turned elsewhere), none equal to or inside another. */
static int check_host_mount_roots(const cJSON *v, sb_error **ret_err) {
        int i = 0;
        const cJSON *a, *b;
        cJSON_ArrayForEach(a, v) {
                struct stat st;
                if (lstat(a->valuestring, &st) < 0 || !S_ISDIR(st.st_mode))
                        return sb_error_set(ret_err, -EINVAL, NULL, "hostMountRoots",
                                            "daemon.json: hostMountRoots[%d]: '%s' is not an existing directory", i,
                                            a->valuestring);
                int j = 0;
                cJSON_ArrayForEach(b, v) {
                        size_t n = strlen(b->valuestring);
                        while (n > 1 && b->valuestring[n - 1] == '/')
                                n--;
                        if (j != i && strncmp(a->valuestring, b->valuestring, n) == 0 &&
                            (a->valuestring[n] == '\0' || a->valuestring[n] == '/'))
                                return sb_error_set(ret_err, -EINVAL, NULL, "hostMountRoots",
                                                    "daemon.json: hostMountRoots[%d]: '%s' lies under hostMountRoots[%d] "
                                                    "'%s': list one of them",
                                                    i, a->valuestring, j, b->valuestring);
                        j++;
                }
                i++;
        }
        return 0;
}

int daemon_config_parse_listen(const char *s, struct sockaddr_storage *ret, unsigned *ret_len) {
        if (!s || strncmp(s, "tcp://", 6) != 0)
                return -EINVAL;
        const char *host = s + 6, *colon;
        char addr[INET6_ADDRSTRLEN + 1];
        size_t n;
        bool v6 = host[0] == '[';
        if (v6) {
                const char *close = strchr(host, ']');
                if (!close || close[1] != ':')
                        return -EINVAL;
                n = (size_t) (close - host - 1);
                host++;
                colon = close + 1;
        } else {
                colon = strrchr(host, ':');
                if (!colon)
                        return -EINVAL;
                n = (size_t) (colon - host);
        }
        if (n == 0 || n >= sizeof(addr))
                return -EINVAL;
        memcpy(addr, host, n);
        addr[n] = '\0';
        const char *p = colon + 1;
        if (!*p || strlen(p) > 5 || strspn(p, "0123456789") != strlen(p) || p[0] == '0')
                return -EINVAL;
        long port = strtol(p, NULL, 10);
        if (port < 1 || port > 65535)
                return -EINVAL;
        struct sockaddr_storage ss = {};
        if (v6) {
                struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &ss;
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t) port);
                if (inet_pton(AF_INET6, addr, &in6->sin6_addr) != 1)
                        return -EINVAL;
                n = sizeof(*in6);
        } else {
                struct sockaddr_in *in = (struct sockaddr_in *) &ss;
                in->sin_family = AF_INET;
                in->sin_port = htons((uint16_t) port);
                if (inet_pton(AF_INET, addr, &in->sin_addr) != 1)
                        return -EINVAL;
                n = sizeof(*in);
        }
        if (ret)
                *ret = ss;
        if (ret_len)
                *ret_len = (unsigned) n;
        return 0;
}

/* An array of at most k->max distinct listen addresses. */
static int check_listen_list(const config_key *k, const cJSON *v, sb_error **ret_err) {
        if (!cJSON_IsArray(v) || (uint64_t) cJSON_GetArraySize(v) > k->max)
                return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                    "daemon.json: %s: must be an array of at most %" PRIu64 " addresses like "
                                    "\"tcp://0.0.0.0:7443\"", k->name, k->max);
        const cJSON *it;
        int i = 0;
        cJSON_ArrayForEach(it, v) {
                if (daemon_config_parse_listen(cJSON_GetStringValue(it), NULL, NULL) < 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: %s[%d]: must be \"tcp://ADDR:PORT\" with a numeric IPv4 "
                                            "address or a bracketed IPv6 one and a port from 1 to 65535, like "
                                            "\"tcp://0.0.0.0:7443\" or \"tcp://[::1]:7443\"", k->name, i);
                for (const cJSON *o = v->child; o != it; o = o->next)
                        if (streq(o->valuestring, it->valuestring))
                                return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                                    "daemon.json: %s[%d]: \"%s\" is given twice", k->name, i,
                                                    it->valuestring);
                i++;
        }
        return 0;
}

/* warmPool: an object of size (0..k->max), runtime (a runtime name as
 * sandbox.create takes it) and policy (a networkPolicy mode); every other
 * member is refused by name. */
static int check_warm_pool(const config_key *k, const cJSON *v, sb_error **ret_err) {
        if (!cJSON_IsObject(v))
                return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                    "daemon.json: warmPool: must be an object {\"size\": N, \"runtime\": NAME, "
                                    "\"policy\": MODE}");
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
                if (cJSON_GetObjectItemCaseSensitive(v, it->string) != it)
                        return sb_error_set(ret_err, -EINVAL, NULL, "warmPool",
                                            "daemon.json: warmPool.%s: key given more than once", it->string);
                if (streq(it->string, "size")) {
                        double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
                        if (!isfinite(d) || d != floor(d) || d < 0 || d > (double) k->max)
                                return sb_error_set(ret_err, -EINVAL, NULL, "warmPool.size",
                                                    "daemon.json: warmPool.size: must be an integer from 0 (off) "
                                                    "to %" PRIu64, k->max);
                } else if (streq(it->string, "runtime")) {
                        if (!cJSON_IsString(it) || !core_name_is_valid(it->valuestring))
                                return sb_error_set(ret_err, -EINVAL, NULL, "warmPool.runtime",
                                                    "daemon.json: warmPool.runtime: must be a runtime name (1-63 "
                                                    "of a-z, 0-9 and '-'), such as \"host\"");
                } else if (streq(it->string, "policy")) {
                        const char *p = cJSON_GetStringValue(it);
                        if (!p || (!streq(p, "allow-all") && !streq(p, "deny-all") && !streq(p, "custom")))
                                return sb_error_set(ret_err, -EINVAL, NULL, "warmPool.policy",
                                                    "daemon.json: warmPool.policy: must be \"allow-all\", "
                                                    "\"deny-all\" or \"custom\" (the networkPolicy mode of the "
                                                    "creates the pool serves)");
                } else
                        return sb_error_set(ret_err, -EINVAL, NULL, "warmPool",
                                            "daemon.json: warmPool: unknown key '%s'; known keys: size, runtime, "
                                            "policy", it->string);
        }
        return 0;
}

/* storage: {} or {"pool": {"sizeMiB": N}} or {"pool": {"device": PATH}};
 * every other member is refused by name. */
static int check_storage(const cJSON *v, sb_error **ret_err) {
        if (!cJSON_IsObject(v))
                return sb_error_set(ret_err, -EINVAL, NULL, "storage",
                                    "daemon.json: storage: must be an object, {} or {\"pool\": {\"sizeMiB\": N}}");
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
                if (cJSON_GetObjectItemCaseSensitive(v, it->string) != it)
                        return sb_error_set(ret_err, -EINVAL, NULL, "storage",
                                            "daemon.json: storage.%s: key given more than once", it->string);
                if (!streq(it->string, "pool"))
                        return sb_error_set(ret_err, -EINVAL, NULL, "storage",
                                            "daemon.json: storage: unknown key '%s'; known keys: pool", it->string);
        }
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(v, "pool");
        if (!p)
                return 0;
        if (!cJSON_IsObject(p) || cJSON_GetArraySize(p) != 1)
                return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool",
                                    "daemon.json: storage.pool: must be {\"sizeMiB\": N} (a file under the state "
                                    "directory) or {\"device\": \"/dev/...\"}, one of the two");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(p, "sizeMiB"),
                    *dev = cJSON_GetObjectItemCaseSensitive(p, "device");
        if (size) {
                double d = cJSON_IsNumber(size) ? size->valuedouble : NAN;
                if (!isfinite(d) || d != floor(d) || d < (double)(CORE_POOL_MIN_BYTES >> 20) ||
                    d > 16.0 * 1024 * 1024)
                        return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool.sizeMiB",
                                            "daemon.json: storage.pool.sizeMiB: must be an integer from %llu to "
                                            "16777216", CORE_POOL_MIN_BYTES >> 20);
                return 0;
        }
        if (dev) {
                const char *s = cJSON_GetStringValue(dev);
                if (!s || s[0] != '/' || strlen(s) > 255 || strstr(s, "/../") || strstr(s, "/./"))
                        return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool.device",
                                            "daemon.json: storage.pool.device: must be the absolute path of a "
                                            "block device, such as \"/dev/vdb\"");
                return 0;
        }
        return sb_error_set(ret_err, -EINVAL, NULL, "storage.pool",
                            "daemon.json: storage.pool: unknown key '%s'; known keys: sizeMiB, device",
                            p->child->string);
}

/* kubernetes: {"podCIDRs": [CIDR...], "serviceCIDRs": [CIDR...],
 * "clusterDNS": [ADDRESS...]}, every member optional; CIDRs as the policy
 * parser reads them (pol_cidr_parse: canonical, IPv4 or IPv6), addresses
 * unicast IPv4 or IPv6 literals; every other member refused by name. */
static int check_kubernetes(const cJSON *v, sb_error **ret_err) {
        static const char *const known[] = { "podCIDRs", "serviceCIDRs", "clusterDNS" };
        if (!cJSON_IsObject(v))
                return sb_error_set(ret_err, -EINVAL, NULL, "kubernetes",
                                    "daemon.json: kubernetes: must be an object, such as {\"podCIDRs\": "
                                    "[\"10.244.0.0/16\"], \"serviceCIDRs\": [\"10.96.0.0/12\"], "
                                    "\"clusterDNS\": [\"10.96.0.10\"]}");
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
                size_t i = 0;
                while (i < ELEMENTSOF(known) && !streq(it->string, known[i]))
                        i++;
                if (i == ELEMENTSOF(known))
                        return sb_error_set(ret_err, -EINVAL, NULL, "kubernetes",
                                            "daemon.json: kubernetes: unknown key '%s'; known keys: podCIDRs, "
                                            "serviceCIDRs, clusterDNS", it->string);
                if (cJSON_GetObjectItemCaseSensitive(v, it->string) != it)
                        return sb_error_set(ret_err, -EINVAL, NULL, "kubernetes",
                                            "daemon.json: kubernetes.%s: key given more than once", it->string);
                bool dns = i == 2;
                if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) > 64)
                        return sb_error_set(ret_err, -EINVAL, NULL, "kubernetes",
                                            "daemon.json: kubernetes.%s: must be an array of at most 64 %s",
                                            it->string, dns ? "addresses" : "CIDRs");
                const cJSON *e;
                int n = 0;
                cJSON_ArrayForEach(e, it) {
                        const char *s = cJSON_GetStringValue(e);
                        _cleanup_free_ char *why = NULL;
                        unsigned char a[16];
                        pol_cidr c;
                        bool ok = s && (dns ? inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1
                                            : pol_cidr_parse(s, &c, &why) >= 0);
                        if (!ok)
                                return sb_error_set(ret_err, -EINVAL, NULL, "kubernetes",
                                                    "daemon.json: kubernetes.%s[%d]: %s%s%s", it->string, n,
                                                    dns ? "must be an IPv4 or IPv6 address, such as \"10.96.0.10\""
                                                        : "must be a CIDR, such as \"10.96.0.0/12\"",
                                                    why ? ": " : "", why ? why : "");
                        n++;
                }
        }
        return 0;
}

/* defaultNetworkPolicy: whatever sandbox.create's networkPolicy takes
 * (null excepted: leave the key out), checked by the same parser, with its
 * error's path rebased from networkPolicy onto the key. */
static int check_policy(const config_key *k, const cJSON *v, sb_error **ret_err) {
        if (cJSON_IsNull(v))
                return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                    "daemon.json: %s: must be \"allow-all\", \"deny-all\" or a policy object "
                                    "(docs/POLICY.md); leave the key out for the default, allow-all", k->name);
        _cleanup_error_ sb_error *perr = NULL;
        _cleanup_policy_ pol_policy *p = NULL;
        int r = pol_policy_parse(v, &p, &perr);
        if (r >= 0)
                return 0;
        const char *msg = perr && perr->message ? perr->message : "invalid policy";
        const char *field = perr && perr->field ? perr->field : "networkPolicy";
        static const char prefix[] = "networkPolicy";
        if (strncmp(msg, prefix, sizeof(prefix) - 1) == 0)
                msg += sizeof(prefix) - 1;
        else if (msg[0] != ':')
                msg = ""; /* the message does not start with its path: keep it whole below */
        if (strncmp(field, prefix, sizeof(prefix) - 1) == 0)
                field += sizeof(prefix) - 1;
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s%s", k->name, field) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (!msg[0])
                return sb_error_set(ret_err, -EINVAL, NULL, path, "daemon.json: %s: %s", k->name,
                                    perr && perr->message ? perr->message : "invalid policy");
        return sb_error_set(ret_err, -EINVAL, NULL, path, "daemon.json: %s%s", k->name, msg);
}

cJSON *daemon_config_default_policy_json(const daemon_config *cfg) {
        _cleanup_policy_ pol_policy *p = NULL;
        _cleanup_error_ sb_error *err = NULL;
        /* Validated at load, so only memory can fail here. */
        if (pol_policy_parse(cfg->default_network_policy, &p, &err) < 0)
                return NULL;
        return pol_policy_to_json(p, true);
}

void daemon_config_warm_pool(const daemon_config *cfg, unsigned *ret_size, const char **ret_runtime,
                             const char **ret_policy) {
        const cJSON *w = cfg->warm_pool;
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(w, "size");
        *ret_size = cJSON_IsNumber(size) ? (unsigned) size->valuedouble : 0;
        *ret_runtime = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "runtime")) ?: "host";
        *ret_policy = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(w, "policy")) ?: "allow-all";
}

static int check_integer(const config_key *k, const cJSON *v, uint64_t *ret, sb_error **ret_err) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        /* The range bounds are far below 2^53, so a double in range is exact. */
        if (!isfinite(d) || d != floor(d) || d < (double) k->min || d > (double) k->max)
                return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                    "daemon.json: %s: must be an integer from %" PRIu64 " to %" PRIu64,
                                    k->name, k->min, k->max);
        *ret = (uint64_t) d;
        return 0;
}

static const config_key *find_key(const char *name) {
        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++)
                if (streq(config_keys[i].name, name))
                        return &config_keys[i];
        return NULL;
}

static int unknown_key(const char *name, sb_error **ret_err) {
        const char *names[ELEMENTSOF(config_keys)];
        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++)
                names[i] = config_keys[i].name;
        int best = core_closest_word(name, names, ELEMENTSOF(names));
        if (best >= 0)
                return sb_error_set(ret_err, -EINVAL, NULL, name,
                                    "daemon.json: unknown key '%s'; did you mean \"%s\"? (keys are case-sensitive; "
                                    "see sandboxd(8))",
                                    name, names[best]);
        char known[1024] = "";
        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
                if (i > 0)
                        strncat(known, ", ", sizeof(known) - strlen(known) - 1);
                strncat(known, config_keys[i].name, sizeof(known) - strlen(known) - 1);
        }
        return sb_error_set(ret_err, -EINVAL, NULL, name, "daemon.json: unknown key '%s'; known keys: %s",
                            name, known);
}

static void apply(daemon_config *cfg, const config_key *k, const cJSON *v) {
        char *base = (char *) cfg + k->offset;
        uint64_t n = 0;
        switch (k->kind) {
        case KEY_SIZE:
        case KEY_U64:
        case KEY_UINT:
                n = (uint64_t) v->valuedouble;  /* checked by check_integer() */
                if (k->kind == KEY_SIZE)
                        *(size_t *) base = (size_t) n;
                else if (k->kind == KEY_U64)
                        *(uint64_t *) base = n;
                else
                        *(unsigned *) base = (unsigned) n;
                break;
        case KEY_BOOL:
                *(bool *) base = cJSON_IsTrue(v);
                break;
        case KEY_WARMPOOL:
        case KEY_POLICY:
        case KEY_TENANTS:
        case KEY_STORAGE:
        case KEY_KUBERNETES:
                cJSON_Delete(*(cJSON **) base);
                if (!(*(cJSON **) base = cJSON_Duplicate(v, 1)))
                        abort();
                break;
        case KEY_LISTEN_LIST:
        case KEY_PATH_LIST: {
                char **l = calloc((size_t) cJSON_GetArraySize(v) + 1, sizeof(char *));
                size_t i = 0;
                const cJSON *it;
                if (!l)
                        abort();
                cJSON_ArrayForEach(it, v)
                        l[i++] = xstrdup(it->valuestring);
                path_list_free(*(char ***) base);
                *(char ***) base = l;
                break;
        }
        default:
                free(*(char **) base);
                *(char **) base = xstrdup(v->valuestring);
        }
}

/* Pass one: every key known, every value of the right type and range, and
 * the cross-key rules on the merged values: defaultTimeoutMs <= maxTimeoutMs,
 * the user namespace pool made of whole ranges below id 4294967295. */
static int validate(const daemon_config *cfg, const cJSON *root, sb_error **ret_err) {
        uint64_t def = cfg->default_timeout_ms, max = cfg->max_timeout_ms;
        uint64_t ubase = cfg->userns_base, usize = cfg->userns_size;
        const cJSON *v;
        cJSON_ArrayForEach(v, root) {
                const config_key *k = find_key(v->string);
                if (!k)
                        return unknown_key(v->string, ret_err);
                if (cJSON_GetObjectItemCaseSensitive(root, v->string) != v)
                        return sb_error_set(ret_err, -EINVAL, NULL, v->string,
                                            "daemon.json: %s: key given more than once", v->string);
                uint64_t n = 0;
                int r;
                if (k->kind == KEY_PATH_LIST)
                        r = check_path_list(k, v, ret_err);
                else if (k->kind == KEY_LISTEN_LIST)
                        r = check_listen_list(k, v, ret_err);
                else if (k->kind == KEY_WARMPOOL)
                        r = check_warm_pool(k, v, ret_err);
                else if (k->kind == KEY_POLICY)
                        r = check_policy(k, v, ret_err);
                else if (k->kind == KEY_TENANTS)
                        r = tenant_config_check(v, ret_err);
                else if (k->kind == KEY_STORAGE)
                        r = check_storage(v, ret_err);
                else if (k->kind == KEY_KUBERNETES)
                        r = check_kubernetes(v, ret_err);
                else if (k->kind == KEY_BOOL)
                        r = cJSON_IsBool(v) ? 0
                                            : sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                                           "daemon.json: %s: must be true or false", k->name);
                else
                        r = kind_is_integer(k->kind) ? check_integer(k, v, &n, ret_err) : check_string(k, v, ret_err);
                if (r >= 0 && k->offset == OFF(host_mount_roots))
                        r = check_host_mount_roots(v, ret_err);
                if (r < 0)
                        return r;
                if (k->offset == OFF(disk_mib) && n != 0 && n < (CORE_DISK_MIN_BYTES >> 20))
                        return sb_error_set(ret_err, -EINVAL, NULL, k->name,
                                            "daemon.json: diskMiB: must be 0 (unbounded) or from %llu to %" PRIu64,
                                            (unsigned long long) (CORE_DISK_MIN_BYTES >> 20), k->max);
                if (k->offset == OFF(default_timeout_ms))
                        def = n;
                else if (k->offset == OFF(max_timeout_ms))
                        max = n;
                else if (k->offset == OFF(userns_base))
                        ubase = n;
                else if (k->offset == OFF(userns_size))
                        usize = n;
        }
        /* The pool's shape (libcore/userns.c core_userns_check_pool()): whole
         * 65536-id ranges, all below the invalid id 4294967295. */
        if (usize % 65536)
                return sb_error_set(ret_err, -EINVAL, NULL, "usernsSize",
                                    "daemon.json: usernsSize: %" PRIu64 " is not a multiple of 65536 (try %" PRIu64 ")",
                                    usize, usize / 65536 * 65536);
        if (ubase + usize > UINT32_MAX)
                return sb_error_set(ret_err, -EINVAL, NULL, "usernsBase",
                                    "daemon.json: usernsBase + usernsSize: %" PRIu64 " + %" PRIu64
                                    " ends beyond host id 4294967294; lower one of them",
                                    ubase, usize);
        /* Mutual TLS is not optional: a listener needs its certificate,
         * its key and the CA that client certificates must chain to. */
        const cJSON *lst = cJSON_GetObjectItemCaseSensitive(root, "listen");
        bool listening = lst ? cJSON_GetArraySize(lst) > 0 : cfg->listen && cfg->listen[0];
        static const char *const tls_keys[] = { "tlsCert", "tlsKey", "tlsClientCA" };
        const char *tls_set[3] = { cfg->tls_cert, cfg->tls_key, cfg->tls_client_ca };
        for (size_t i = 0; listening && i < ELEMENTSOF(tls_keys); i++)
                if (!tls_set[i] && !cJSON_GetObjectItemCaseSensitive(root, tls_keys[i]))
                        return sb_error_set(ret_err, -EINVAL, NULL, tls_keys[i],
                                            "daemon.json: listen: needs %s (the listener serves TLS 1.3 with client "
                                            "certificates only: set tlsCert, tlsKey and tlsClientCA; "
                                            "`sandboxctl certs init DIR` makes a set)", tls_keys[i]);
        if (def > max)
                return sb_error_set(ret_err, -EINVAL, NULL, "defaultTimeoutMs",
                                    "daemon.json: defaultTimeoutMs: %" PRIu64 " exceeds maxTimeoutMs (%" PRIu64 ")",
                                    def, max);
        return 0;
}

/* True when `text` holds the JSON escape \u0000: cJSON's strings end at a
 * NUL, so "maxVcpus\u0000x" would read as maxVcpus and "/srv\u0000x" as
 * /srv. Outside strings a backslash is not valid JSON anyway. */
static bool has_nul_escape(const char *text) {
        for (const char *c = text; *c; c++) {
                if (*c != '\\')
                        continue;
                if (c[1] == 'u' && strncmp(c + 2, "0000", 4) == 0)
                        return true;
                if (c[1])
                        c++;
        }
        return false;
}

int daemon_config_parse(daemon_config *cfg, const char *text, sb_error **ret_err) {
        if (has_nul_escape(text))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "daemon.json: contains \\u0000 (a NUL character), which no key or value may hold");
        const char *end = NULL;
        cJSON *root = cJSON_ParseWithOpts(text, &end, true);
        if (!root) {
                size_t at = end && end >= text ? (size_t) (end - text) : 0;
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "daemon.json: not valid JSON (near byte %zu)", at);
        }
        int r = 0;
        if (!cJSON_IsObject(root))
                r = sb_error_set(ret_err, -EINVAL, NULL, NULL, "daemon.json: the top level must be an object");
        else
                r = validate(cfg, root, ret_err);
        if (r == 0) {
                const cJSON *v;
                cJSON_ArrayForEach(v, root) {
                        apply(cfg, find_key(v->string), v);
                        if (streq(v->string, "userns"))
                                cfg->userns_set = true;
                }
        }
        cJSON_Delete(root);
        return r;
}

/* Reads the config file without ever blocking the caller (the event loop,
 * on a reload): opened O_NONBLOCK, so a FIFO or a device does not wait for
 * a writer, and refused unless fstat(2) says a regular file; the file is
 * then read through that same open inode (/proc/self/fd). */
static int read_config_file(const char *path, char **ret_text, size_t *ret_len, sb_error **ret_err) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (fd < 0)
                return negative_errno();
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                    "read config '%s': not a regular file (a %s); point it at a plain JSON file", path,
                                    S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory"
                                    : S_ISSOCK(st.st_mode) ? "socket" : "device");
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        return core_read_file(proc, CONFIG_MAX_BYTES, ret_text, ret_len);
}

int daemon_config_load(daemon_config *cfg, const char *path, bool must_exist, sb_error **ret_err) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = read_config_file(path, &text, &len, ret_err);
        if (r < 0 && ret_err && *ret_err)
                return r;
        if (r == -ENOENT && !must_exist)
                return 0;
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "read config '%s': %s", path, strerror(-r));
        if (strlen(text) != len)
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "config '%s': contains a NUL byte", path);
        r = daemon_config_parse(cfg, text, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "config '%s'", path);
        return 0;
}

/* One key's value in *cfg as JSON; NULL strings are null, a NULL list []. */
static cJSON *key_to_json(const daemon_config *cfg, const config_key *k) {
        const char *base = (const char *) cfg + k->offset;
        switch (k->kind) {
        case KEY_SIZE:
                return cJSON_CreateNumber((double) *(const size_t *) base);
        case KEY_U64:
                return cJSON_CreateNumber((double) *(const uint64_t *) base);
        case KEY_UINT:
                return cJSON_CreateNumber((double) *(const unsigned *) base);
        case KEY_BOOL:
                return cJSON_CreateBool(*(const bool *) base);
        case KEY_WARMPOOL: {
                unsigned size;
                const char *runtime, *policy;
                daemon_config_warm_pool(cfg, &size, &runtime, &policy);
                cJSON *o = cJSON_CreateObject();
                if (!cJSON_AddNumberToObject(o, "size", size) || !cJSON_AddStringToObject(o, "runtime", runtime) ||
                    !cJSON_AddStringToObject(o, "policy", policy)) {
                        cJSON_Delete(o);
                        return NULL;
                }
                return o;
        }
        case KEY_POLICY: {
                const cJSON *p = *(const cJSON *const *) base;
                return p ? cJSON_Duplicate(p, 1) : cJSON_CreateString("allow-all");
        }
        case KEY_TENANTS:
        case KEY_STORAGE:
        case KEY_KUBERNETES: {
                const cJSON *t = *(const cJSON *const *) base;
                return t ? cJSON_Duplicate(t, 1) : cJSON_CreateObject();
        }
        case KEY_LISTEN_LIST:
        case KEY_PATH_LIST: {
                cJSON *a = cJSON_CreateArray();
                char *const *l = *(char *const *const *) base;
                for (size_t i = 0; a && l && l[i]; i++)
                        if (!cJSON_AddItemToArray(a, cJSON_CreateString(l[i]))) {
                                cJSON_Delete(a);
                                return NULL;
                        }
                return a;
        }
        default: {
                const char *s = *(const char *const *) base;
                return s ? cJSON_CreateString(s) : cJSON_CreateNull();
        }
        }
}

cJSON *daemon_config_to_json(const daemon_config *cfg) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; o && i < ELEMENTSOF(config_keys); i++) {
                /* A policy's header values are credentials: never printed. */
                cJSON *v = config_keys[i].kind == KEY_POLICY ? daemon_config_default_policy_json(cfg)
                                                             : key_to_json(cfg, &config_keys[i]);
                if (!v || !cJSON_AddItemToObject(o, config_keys[i].name, v)) {
                        cJSON_Delete(v);
                        cJSON_Delete(o);
                        return NULL;
                }
        }
        return o;
}

/* Appends `s` to the stream with roff's minus sign for '-' and a doubled
 * backslash for '\' (groff_man(7)). */
static void roff_text(FILE *f, const char *s) {
        for (; *s; s++) {
                if (*s == '-')
                        fputs("\\-", f);
                else if (*s == '\\')
                        fputs("\\\\", f);
                else
                        fputc(*s, f);
        }
}

static const char *kind_name(key_kind kind) {
        switch (kind) {
        case KEY_PATH: return "absolute path";
        case KEY_SOCKET: return "absolute path, under 108 bytes";
        case KEY_NAME: return "group name";
        case KEY_CIDR4: return "IPv4 CIDR";
        case KEY_CIDR6: return "IPv6 CIDR or \"off\"";
        case KEY_CGDRIVER: return "auto, systemd or cgroupfs";
        case KEY_PATH_LIST: return "array of absolute paths";
        case KEY_BOOL: return "boolean";
        case KEY_LISTEN_LIST: return "array of tcp://ADDR:PORT";
        case KEY_LEVEL: return "log level name";
        case KEY_LOOPBACK: return "loopback address:port";
        case KEY_WARMPOOL: return "object";
        case KEY_POLICY: return "\"allow-all\", \"deny-all\" or policy object";
        case KEY_TENANTS: return "object";
        case KEY_STORAGE: return "object";
        case KEY_KUBERNETES: return "object";
        default: return "integer";
        }
}

char *daemon_config_man_table(void) {
        daemon_config def;
        daemon_config_defaults(&def);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f) {
                daemon_config_free(&def);
                return NULL;
        }
        bool ok = true;
        for (size_t i = 0; ok && i < ELEMENTSOF(config_keys); i++) {
                const config_key *k = &config_keys[i];
                fprintf(f, ".TP\n.B %s\n(", k->name);
                roff_text(f, kind_name(k->kind));
                if (k->kind == KEY_PATH_LIST || k->kind == KEY_LISTEN_LIST)
                        fprintf(f, ", at most %" PRIu64, k->max);
                else if (kind_is_integer(k->kind))
                        fprintf(f, ", %" PRIu64 " to %" PRIu64, k->min, k->max);
                fputs("; default ", f);
                if (k->def)
                        roff_text(f, k->def);
                else {
                        cJSON *v = key_to_json(&def, k);
                        _cleanup_free_ char *text = v ? cJSON_PrintUnformatted(v) : NULL;
                        cJSON_Delete(v);
                        ok = text != NULL;
                        if (ok)
                                roff_text(f, text);
                }
                fputs(")\n.br\n", f);
                roff_text(f, k->doc);
                fputc('\n', f);
        }
        ok = fclose(f) == 0 && ok;
        daemon_config_free(&def);
        if (!ok) {
                free(buf);
                return NULL;
        }
        return buf;
}

/* Appends ", name" (or "name") to *list; out of memory leaves it as it was. */
static void list_add(char **list, const char *name) {
        char *n = NULL;
        if (asprintf(&n, "%s%s%s", *list ? *list : "", *list ? ", " : "", name) < 0)
                return;
        free(*list);
        *list = n;
}

static bool key_equal(const daemon_config *a, const daemon_config *b, const config_key *k) {
        cJSON *x = key_to_json(a, k), *y = key_to_json(b, k);
        bool eq = x && y && cJSON_Compare(x, y, true);
        cJSON_Delete(x);
        cJSON_Delete(y);
        return eq;
}

void daemon_config_apply_live(daemon_config *cur, daemon_config *next, char **ret_changed, char **ret_kept) {
        *ret_changed = *ret_kept = NULL;
        for (size_t i = 0; i < ELEMENTSOF(config_keys); i++) {
                const config_key *k = &config_keys[i];
                if (key_equal(cur, next, k))
                        continue;
                if (!k->live) {
                        list_add(ret_kept, k->name);
                        continue;
                }
                list_add(ret_changed, k->name);
                char *c = (char *) cur + k->offset, *n = (char *) next + k->offset;
                /* Worker threads may read the integers while they change: one
                 * aligned store each, never a torn value. The strings are read
                 * by the event loop only, which is where this runs. */
                switch (k->kind) {
                case KEY_SIZE: __atomic_store_n((size_t *) c, *(size_t *) n, __ATOMIC_RELAXED); break;
                case KEY_U64: __atomic_store_n((uint64_t *) c, *(uint64_t *) n, __ATOMIC_RELAXED); break;
                case KEY_UINT: __atomic_store_n((unsigned *) c, *(unsigned *) n, __ATOMIC_RELAXED); break;
                case KEY_BOOL: *(bool *) c = *(bool *) n; break;
                case KEY_POLICY:
                case KEY_TENANTS: {
                        cJSON *t = *(cJSON **) c;
                        *(cJSON **) c = *(cJSON **) n;
                        *(cJSON **) n = t;
                        break;
                }
                case KEY_LEVEL:
                case KEY_SOCKET:
                case KEY_LOOPBACK: {
                        char *t = *(char **) c;
                        *(char **) c = *(char **) n;
                        *(char **) n = t;
                        break;
                }
                default:
                        abort(); /* a live key of a kind not handled here */
                }
        }
}
