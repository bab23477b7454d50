/* The session lifecycle: starting one (for a new sandbox: directories,
 * source and config first) on a worker thread and attaching it on the
 * loop; stop (SIGTERM, grace, SIGKILL through sandbox-init); timeout;
 * teardown of every trace (cgroup, veth, directories) on a worker thread;
 * and live restore: leaving sessions running at daemon exit and re-adopting
 * them at the next start (session_adopt). */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <arpa/inet.h>
#include <net/if.h>
#include "libcore/agent.h"
#include "libcore/container.h"
#include "libcore/conntrack.h"
#include "libcore/fault.h"
#include "libcore/log.h"
#include "libcore/rootfs.h"
#include "libcore/source.h"
#include "libcore/userns.h"
#include "libcore/util.h"
#include "policy/proxy.h"
#include "libcore/diskimg.h"
#include "sandboxd/internal.h"
#include "sandboxd/metrics.h"
#include "sandboxd/remote.h"
#include "sandboxd/tenant.h"
#include "sandboxd/text.h"
#include "sandboxd/worker.h"
#include "policy/nftpod.h"

#define SETUP_TIMEOUT_MS 15000

static void finish_requests(sandbox *sb, req_list *l, bool empty_result);
static void emit_status(sandbox *sb, const char *status);

/* ---- the worker thread ----------------------------------------------------- */

/* Where a start's time goes: each step's wall time, logged as one debug
 * line per start (SANDBOXD_DEBUG=1 or daemon.json logLevel "debug"),
 * "start 'x': dirs 1.2 ms, source 0.0 ms, ...". Cheap: one clock read per
 * step. */
typedef struct step_clock {
        struct timespec last;
        char line[512];
        size_t len;
} step_clock;

static void step_clock_start(step_clock *c) {
        clock_gettime(CLOCK_MONOTONIC, &c->last);
        c->len = 0;
        c->line[0] = 0;
}

static void step_mark(step_clock *c, const char *step) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double ms = (double)(now.tv_sec - c->last.tv_sec) * 1e3 + (double)(now.tv_nsec - c->last.tv_nsec) / 1e6;
        c->last = now;
        if (c->len < sizeof(c->line)) {
                int n = snprintf(c->line + c->len, sizeof(c->line) - c->len, "%s%s %.2f ms", c->len ? ", " : "",
                                 step, ms);
                if (n > 0)
                        c->len += (size_t)n;
        }
}

/* The sandbox's own /etc files, written into its upper layer before every
 * session (the gateway can differ between sessions). resolv.conf names the
 * session's gateway in every mode, so a live change of mode never rewrites
 * it: under a custom policy the DNS filter answers there (and nothing else
 * answers it, DESIGN §5.2); under allow-all the gateway's port 53 is
 * translated to the host's resolver (policy/nftgen.h); under deny-all the
 * sandbox has no route to it (lo only) and a lookup fails at once. Only a
 * session without a network slot (the pool was full) gets none.
 *
 * The upper layer is the sandbox's: root inside may have made /etc (or
 * anything under it) a symlink to a host path while it ran. Host root
 * therefore opens it beneath the upper directory's fd with no symlink
 * followed (core_open_beneath), replaces each file by rename (a link at
 * /etc/hosts is replaced, never written through) and fails closed, naming
 * the path, when /etc is not a plain directory. */
static int write_upper_etc(const sandbox *sb, const char *mode, struct in_addr gateway, sb_error **ret_err) {
        _cleanup_free_ char *hosts = NULL, *hostname = NULL, *resolv = NULL;
        _cleanup_close_ int upper = sandbox_open_upper(sb);
        if (upper < 0)
                return sb_error_set(ret_err, upper, NULL, NULL, "open the sandbox's upper directory: %s",
                                    strerror(-upper));
        _cleanup_close_ int etc = core_mkdir_beneath(upper, "etc", 0755);
        if (etc < 0)
                return sb_error_set(ret_err, etc, NULL, NULL,
                                    "/etc in the sandbox's files %s; sandboxd writes /etc/hosts, /etc/hostname and "
                                    "/etc/resolv.conf there at every start and follows no symbolic link in a "
                                    "sandbox's files, so this session was not started",
                                    core_beneath_strerror(etc));
        if (asprintf(&hosts, "127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n",
                     sb->name) < 0 ||
            asprintf(&hostname, "%s\n", sb->name) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        size_t cap = 4096, len = 0;
        resolv = calloc(1, cap);
        if (!resolv)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        (void)len;
        if (sandbox_is_pod(sb))
                /* Port 53 to any address is redirected there too (nftpod.h). */
                snprintf(resolv, cap,
                         "# the pod's DNS filter (sandboxd), inside the pod's network namespace\n"
                         "nameserver %s\noptions edns0\n", POL_POD_DNS_ADDR);
        else if (gateway.s_addr) {
                char gw[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &gateway, gw, sizeof(gw));
                snprintf(resolv, cap,
                         "# the sandbox's resolver, the same under every networkPolicy: the DNS filter\n"
                         "# (custom), the host's resolver (allow-all), unreachable (deny-all)\n"
                         "nameserver %s\noptions edns0\n", gw);
        } else
                snprintf(resolv, cap, "# this session has no network address\n");
        static const char *const names[] = {"hosts", "hostname", "resolv.conf"};
        const char *texts[] = {hosts, hostname, resolv};
        for (size_t i = 0; i < 3; i++) {
                int r = core_write_file_at(etc, names[i], texts[i], strlen(texts[i]), 0644, false);
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "write /etc/%s in the sandbox's files: %s",
                                            names[i], r == -EISDIR ? "it is a directory" : strerror(-r));
        }
        return 0;
}

/* The new sandbox's state directory, disk image and run directory.
 * *made is set once <dir> is made by this call, so that the caller's
 * failure path removes it (and all below it) whatever step failed after. */
static int prepare_dirs(start_job *j, bool *made, sb_error **ret_err) {
        sandbox *sb = j->sb;
        _cleanup_free_ char *upper = NULL, *work = NULL, *ws = NULL, *rootfs = NULL;
        if (asprintf(&upper, "%s/upper", sb->dir) < 0 || asprintf(&work, "%s/work", sb->dir) < 0 ||
            asprintf(&ws, "%s/upper/workspace", sb->dir) < 0 || asprintf(&rootfs, "%s/rootfs", sb->run_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (mkdir(sb->dir, 0710) < 0)
                return sb_error_set(ret_err, negative_errno(), errno == EEXIST ? "already_exists" : NULL, NULL,
                                    "create %s: %m", sb->dir);
        *made = true;
        /* Sources are fetched as the sandbox user (libcore/source.h), which
         * must traverse to upper/workspace; nobody else may. */
        uid_t uid;
        gid_t gid;
        if (userns_sandbox_user(sb, &uid, &gid) < 0)
                return sb_error_set(ret_err, -EOPNOTSUPP, "unavailable", "userns", "no sandbox user: %s",
                                    j->m->plain_unavailable);
        if (chown(sb->dir, 0, gid) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chown %s: %m", sb->dir);
        int r;
        if ((r = sandbox_disk_create(j->m, sb, ret_err)) < 0)
                return r;
        if ((r = core_fault_error("create.dirs")) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "create sandbox directories: injected failure");
        /* The overlay's work dir is on the same mount as upper
         * (setup_packet): the disk image's disk/work when the session has
         * one, made with the image; <dir>/work only without one. */
        bool own_work = !core_disk_present(sb->dir);
        if ((r = core_mkdir_p(upper, 0755)) < 0 || (own_work && (r = core_mkdir_p(work, 0700)) < 0) ||
            (r = core_mkdir_p(ws, 0755)) < 0 || (r = core_mkdir_p(rootfs, 0755)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "create sandbox directories: %s", strerror(-r));
        /* Modes set outright: the process's umask is briefly 0177 while
         * the metrics socket is bound at start (metrics.c), when a warm
         * pool's first creates run (found: a workspace of 0600, which the
         * sandbox user could not enter: "chdir /workspace: permission
         * denied", test_warmpool). */
        if (chmod(upper, 0755) < 0 || chmod(ws, 0755) < 0 || chmod(rootfs, 0755) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chmod sandbox directories: %m");
        if (chown(ws, uid, gid) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "chown workspace: %m");
        return 0;
}

/* ---- progress of the source fetch ----------------------------------------- */

/* At most this often a sandbox.progress notification per create, besides
 * one at each change of stage: about ten a second keep a terminal line
 * moving without flooding the connection. */
#define PROGRESS_INTERVAL_MS 100

typedef struct progress_msg {
        start_job *j;
        char *name;
        core_source_progress p;
} progress_msg;

/* Loop thread: sends one notification on the create's connection. The job
 * is alive: posts run before its start_done (worker_post). */
static void progress_send(void *userdata) {
        progress_msg *msg = userdata;
        rpc_conn *c = msg->j->progress_conn;
        if (c && rpc_conn_is_open(c)) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", msg->name);
                cJSON_AddStringToObject(o, "stage", msg->p.stage);
                cJSON_AddNumberToObject(o, "bytes", (double)msg->p.bytes);
                if (msg->p.total_bytes)
                        cJSON_AddNumberToObject(o, "totalBytes", (double)msg->p.total_bytes);
                if (msg->p.objects || msg->p.total_objects)
                        cJSON_AddNumberToObject(o, "objects", (double)msg->p.objects);
                if (msg->p.total_objects)
                        cJSON_AddNumberToObject(o, "totalObjects", (double)msg->p.total_objects);
                rpc_notify(c, "sandbox.progress", o);
        }
        free(msg->name);
        free(msg);
}

/* Queues one report for the loop thread; one lost for lack of memory is
 * only news lost. */
static void progress_post(start_job *j, const core_source_progress *p) {
        progress_msg *msg = calloc(1, sizeof(*msg));
        if (!msg || !(msg->name = strdup(j->sb->name))) {
                free(msg);
                return;
        }
        msg->j = j;
        msg->p = *p;
        if (worker_post(progress_send, msg) < 0) {
                free(msg->name);
                free(msg);
        }
}

/* Sends the report held back by the rate limit, if any: a stage's last
 * counts go out before the next stage's, and the fetch's final ones
 * before the answer. */
static void progress_flush(start_job *j) {
        if (!j->progress_held.stage)
                return;
        progress_post(j, &j->progress_held);
        j->progress_held.stage = NULL;
}

/* The fetching thread (worker or its confined helper, one at a time):
 * passes a report on to the loop thread when its stage changed or
 * PROGRESS_INTERVAL_MS passed since the last one sent, and holds it back
 * otherwise (progress_flush). */
static void progress_report(const core_source_progress *p, void *userdata) {
        start_job *j = userdata;
        uint64_t now = core_monotonic_ms();
        bool same_stage = j->progress_stage && streq(j->progress_stage, p->stage);
        if (same_stage && now - j->progress_sent_ms < PROGRESS_INTERVAL_MS) {
                j->progress_held = *p;
                return;
        }
        if (!same_stage)
                progress_flush(j);
        j->progress_held.stage = NULL;
        progress_post(j, p);
        j->progress_stage = p->stage;
        j->progress_sent_ms = now;
}

static int fetch_source(start_job *j, sb_error **ret_err) {
        if (!j->src_type)
                return 0;
        _cleanup_free_ char *ws = NULL;
        if (asprintf(&ws, "%s/upper/workspace", j->sb->dir) < 0)
                return -ENOMEM;
        int r;
        uid_t uid;
        gid_t gid;
        if (userns_sandbox_user(j->sb, &uid, &gid) < 0)
                return sb_error_set(ret_err, -EOPNOTSUPP, "unavailable", "userns", "no sandbox user: %s",
                                    j->m->plain_unavailable);
        /* The worker thread's guard, cleared again below whatever happens. */
        core_source_set_address_guard(j->source_guarded ? remote_source_guard : NULL);
        core_source_set_local_peer(j->source_as_peer ? &j->source_peer : NULL);
        core_source_set_progress(j->progress_conn ? progress_report : NULL, j);
        if (streq(j->src_type, "git")) {
                core_git_source g = {.url = j->url, .revision = j->revision, .depth = j->depth,
                                     .username = j->username, .password = j->password,
                                     .local_roots = (const char *const *)j->source_roots,
                                     .max_local_bytes = j->m->cfg->max_source_bytes};
                r = core_source_git_clone(&g, ws, uid, gid, ret_err);
        } else
                r = core_source_tarball_extract(j->url, ws, uid, gid, j->m->cfg->max_source_bytes,
                                                (const char *const *)j->source_roots, ret_err);
        core_source_set_address_guard(NULL);
        core_source_set_local_peer(NULL);
        core_source_set_progress(NULL, NULL);
        if (j->progress_conn)
                progress_flush(j);
        if (r < 0) {
                sb_error_set(ret_err, r, "source_failed", NULL, "%s", strerror(-r));
                free((*ret_err)->reason);
                (*ret_err)->reason = strdup("source_failed");
                return sb_error_prefix(ret_err, "%s source", j->src_type);
        }
        return 0;
}

/* ---- the egress proxy's CA and the sandbox's trust ---------------------------- */

/* The system bundle inside the sandbox (Debian's, bound from the host with
 * /etc/ssl), which OpenSSL, GnuTLS, curl, git, Python and Node read. */
#define SANDBOX_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"

/* Where a session's CA lives on the host. <run>/proxy (0700 root) holds
 * the key: only sandboxd and sandbox-netd (which loads it before dropping
 * privileges) read it, and the sandbox's mount namespace has no path to
 * any of the run directory. <run>/trust holds the public bundle, whose
 * copy on a tmpfs (ca_bundle_tree) is bound read-only over
 * SANDBOX_CA_BUNDLE. Both go with the run directory
 * when the session ends. */
static int ca_paths(const sandbox *sb, char **ret_cert, char **ret_key, char **ret_bundle) {
        if (asprintf(ret_cert, "%s/proxy/ca.crt", sb->run_dir) < 0)
                return -ENOMEM;
        if (asprintf(ret_key, "%s/proxy/ca.key", sb->run_dir) < 0) {
                free(*ret_cert);
                return -ENOMEM;
        }
        if (asprintf(ret_bundle, "%s/trust/ca-bundle.crt", sb->run_dir) < 0) {
                free(*ret_cert);
                free(*ret_key);
                return -ENOMEM;
        }
        return 0;
}

/* mkdir that also fixes the mode of a directory left by an earlier
 * session, so a loosened proxy/ never holds a new key. */
static int make_dir_mode(const char *path, mode_t mode) {
        int r = core_mkdir_p(path, mode);
        if (r < 0)
                return r;
        return chmod(path, mode) < 0 ? negative_errno() : 0;
}

/* Worker thread, any session with a network interface: a fresh CA
 * (policy/tls.c) and the bundle the sandbox trusts, the host's roots
 * followed by the session CA. Made for allow-all sessions too, so that a
 * live update to a custom policy (whose proxy terminates TLS with this CA)
 * finds the trust already in place in every process of the sandbox: the
 * bundle is bound once, at setup, and cannot be swapped later without
 * touching the sandbox's mounts. The CA without the key is harmless to
 * trust: nothing but sandbox-netd can sign with it. Without a host bundle
 * to extend there is no trust to install and the session runs without it;
 * its proxy then cannot terminate TLS that the sandbox accepts. */
/* Whether a session of sb trusts its CA: only the host runtime binds the
 * host's /etc/ssl, so only there is the bundle's mount point known to
 * exist (docs/POLICY.md, CA trust), and only with a host bundle to extend. */
static bool ca_trust_possible(const sandbox *sb) {
        return streq(sb->runtime, "host") && access(SANDBOX_CA_BUNDLE, R_OK) == 0;
}

/* The session CA's files for sb: <run>/proxy (the CA, 0700) and
 * <run>/trust, and when `trust` (ca_trust_possible) the bundle of the
 * host's roots plus the session CA that is bound over the sandbox's system
 * bundle. *ret_made is set once the CA exists (so a failure after it still
 * has it removed). 1: the bundle was written; 0: no bundle (not trusted
 * there); negative errno with *ret_err. */
static int ca_make_files(sandbox *sb, bool trust, bool *ret_made, sb_error **ret_err) {
        _cleanup_free_ char *cert = NULL, *key = NULL, *bundle = NULL, *proxy_dir = NULL, *trust_dir = NULL;
        _cleanup_free_ char *host = NULL, *mine = NULL, *text = NULL;
        size_t n_host = 0, n_mine = 0;
        int r;
        if (ca_paths(sb, &cert, &key, &bundle) < 0 || asprintf(&proxy_dir, "%s/proxy", sb->run_dir) < 0 ||
            asprintf(&trust_dir, "%s/trust", sb->run_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if ((r = make_dir_mode(proxy_dir, 0700)) < 0 || (r = make_dir_mode(trust_dir, 0755)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: create %s: %s", proxy_dir, strerror(-r));
        if ((r = pol_proxy_ca_generate(cert, key, sb->name, ret_err)) < 0)
                return sb_error_prefix(ret_err, "egress proxy CA");
        *ret_made = true;
        /* Only the host runtime binds the host's /etc/ssl, so only there is
         * the bundle's mount point known to exist; an imported runtime keeps
         * its own trust store (docs/POLICY.md, CA trust). */
        if (!trust)
                return 0;
        if ((r = core_read_file(SANDBOX_CA_BUNDLE, 16 << 20, &host, &n_host)) < 0 ||
            (r = core_read_file(cert, 1 << 20, &mine, &n_mine)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: read certificates: %s", strerror(-r));
        if (asprintf(&text, "%.*s\n# sandboxd session CA (egress proxy) of '%s'\n%.*s", (int)n_host, host, sb->name,
                     (int)n_mine, mine) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if ((r = core_write_file_replace(bundle, text, strlen(text), 0644)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: write %s: %s", bundle, strerror(-r));
        return 1;
}

static int ca_prepare(start_job *j, sb_error **ret_err) {
        sandbox *sb = j->sb;
        /* The CA is made for every networked session: netd terminates with
         * it whatever the runtime. Not for one started under deny-all. After
         * a live switch to a policy with rules, its proxy refuses the
         * hosts with rules (it has no CA to apply them with). */
        bool trust = ca_trust_possible(sb);
        /* A pooled session runs under deny-all but is made for creates of
         * its pool's networked mode, which a cold create would give a CA. */
        if (j->slot < 0 || (streq(sandbox_policy_mode(sb), "deny-all") && !j->pool_ca))
                return 0;
        int r = ca_make_files(sb, trust, &j->proxy_ca, ret_err);
        if (r < 0)
                return r;
        j->sandbox_trusts_ca = r > 0;
        return 0;
}

/* The variables clients read their CA bundle from, all pointing at the
 * system bundle that holds the session CA. NODE_EXTRA_CA_CERTS adds to
 * Node's built-in roots, so the whole bundle there is harmless. */
static const char *const ca_env_vars[] = {
        "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
};

void session_proxy_env(const sandbox *sb, cJSON *env) {
        const session *s = sb->sess;
        char url[64], gw[INET_ADDRSTRLEN];
        if (!s || s->net_slot < 0)
                return;
        if (s->sandbox_trusts_ca)
                for (size_t i = 0; i < ELEMENTSOF(ca_env_vars); i++)
                        cJSON_AddStringToObject(env, ca_env_vars[i], SANDBOX_CA_BUNDLE);
        if (!streq(sandbox_policy_mode(sb), "custom"))
                return;
        /* The same proxy nftables redirects ports 80 and 443 to; clients
         * that honour these get CONNECT and absolute-form requests there,
         * the others are intercepted. Loopback stays direct. */
        snprintf(url, sizeof(url), "http://%s:%d", inet_ntop(AF_INET, &s->gateway, gw, sizeof(gw)), POL_PROXY_PORT);
        static const char *const proxy_vars[] = { "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy" };
        for (size_t i = 0; i < ELEMENTSOF(proxy_vars); i++)
                cJSON_AddStringToObject(env, proxy_vars[i], url);
        cJSON_AddStringToObject(env, "NO_PROXY", "localhost,127.0.0.1,::1");
        cJSON_AddStringToObject(env, "no_proxy", "localhost,127.0.0.1,::1");
}

static cJSON *setup_packet(start_job *j) {
        sandbox *sb = j->sb;
        manager *m = j->m;
        char buf[INET_ADDRSTRLEN];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", "setup");
        cJSON_AddStringToObject(o, "hostname", sb->name);
        /* Half the session's memory (vcpus × 2048 MiB, DESIGN §3). */
        cJSON_AddNumberToObject(o, "tmpSize", (double)((uint64_t)sb->vcpus * 1024ULL * 1024 * 1024));
        /* libarchive's files, which init opens before its root changes
         * and loads only for a copy (core_archive_lib_files). */
        const char *const *libs = core_archive_lib_files();
        cJSON *al = cJSON_AddArrayToObject(o, "archiveLibs");
        for (size_t i = 0; al && libs && libs[i]; i++)
                cJSON_AddItemToArray(al, cJSON_CreateString(libs[i]));
        char *p = NULL;
        if (asprintf(&p, "%s/rootfs", sb->run_dir) >= 0)
                cJSON_AddStringToObject(o, "rootfs", p);
        free(p);
        /* The runtime is the lowest layer; only `host` is a skeleton that
         * needs the host's /usr and /etc entries bound in (runtime.c). */
        _cleanup_free_ char *lower = sandbox_lowerdir(sb);
        if (lower)
                cJSON_AddStringToObject(o, "lower", lower);
        /* upper and work on one mount: the disk image's when it has one. */
        _cleanup_free_ char *layer = core_disk_layer_dir(sb->dir);
        if (layer && asprintf(&p, "%s/upper", layer) >= 0)
                cJSON_AddStringToObject(o, "upper", p);
        free(p);
        p = NULL;
        if (layer && asprintf(&p, "%s/work", layer) >= 0)
                cJSON_AddStringToObject(o, "work", p);
        free(p);
        cJSON *binds = cJSON_AddArrayToObject(o, "binds");
        for (size_t i = 0; streq(sb->runtime, "host") && core_runtime_host_binds[i][0]; i++) {
                if (access(core_runtime_host_binds[i][0], F_OK) < 0)
                        continue;
                cJSON *b = cJSON_CreateObject();
                cJSON_AddStringToObject(b, "src", core_runtime_host_binds[i][0]);
                cJSON_AddStringToObject(b, "dst", core_runtime_host_binds[i][1]);
                cJSON_AddBoolToObject(b, "ro", true);
                cJSON_AddItemToArray(binds, b);
        }
        /* init configures eth0 only when there is one (not deny-all). */
        cJSON_AddNumberToObject(o, "netSlot", streq(sandbox_policy_mode(sb), "deny-all") ? -1 : j->slot);
        /* A pod's namespace: CNI configured it; init leaves it alone. */
        if (sandbox_is_pod(sb))
                cJSON_AddBoolToObject(o, "joinedNetns", true);
        cJSON_AddStringToObject(o, "poolBase", inet_ntop(AF_INET, &m->pool.base, buf, sizeof(buf)));
        cJSON_AddNumberToObject(o, "poolPrefix", m->pool.prefix);
        if (m->pool.prefix6) {
                char b6[INET6_ADDRSTRLEN];
                cJSON_AddStringToObject(o, "poolBase6", inet_ntop(AF_INET6, &m->pool.base6, b6, sizeof(b6)));
                cJSON_AddNumberToObject(o, "poolPrefix6", m->pool.prefix6);
        }
        /* No base environment in init: each command.run carries the whole
         * environment (the sandbox's env as it is now, then the command's),
         * so a variable an update removes is gone from new commands. */
        cJSON_AddItemToObject(o, "env", cJSON_CreateObject());
        if (sb->userns_base)
                cJSON_AddBoolToObject(o, "userns", true);
        /* The sandbox user's ids inside (1000 with a user namespace, the
         * sandboxd-user account without): init's fs operations and the
         * `sandbox` entry of /etc/passwd and /etc/group follow them. */
        uid_t uid = 0;
        gid_t gid = 0;
        /* Without an account init refuses ids 0 (fail closed); session_start
         * refuses such a sandbox before it gets here. */
        (void)userns_sandbox_user(sb, &uid, &gid);
        cJSON *user = cJSON_AddObjectToObject(o, "user");
        cJSON_AddNumberToObject(user, "uid", uid);
        cJSON_AddNumberToObject(user, "gid", gid);
        /* Layers of a snapshot or fork may come from a sandbox of the other
         * mode, and a plain sandbox from before sandboxd-user has files of
         * uid 1000: init gives that user's files under /workspace and
         * /home/sandbox to this one when /home/sandbox says the layers are
         * the other mode's (libcore/init/init.h). */
        if (!sb->userns || !m->plain_unavailable) {
                cJSON *from = cJSON_AddObjectToObject(user, "remapFrom");
                cJSON_AddNumberToObject(from, "uid", sb->userns ? m->plain_uid : SANDBOX_UID);
                cJSON_AddNumberToObject(from, "gid", sb->userns ? m->plain_gid : SANDBOX_GID);
        }
        return o;
}

#define SETUP_MAX_FDS 64  /* as sandbox-init receives them */

/* Mount fds sent with the setup packet (user namespace only). */
typedef struct setup_fds {
        int fd[SETUP_MAX_FDS];
        size_t n;
} setup_fds;

static void setup_fds_close(setup_fds *f) {
        for (size_t i = 0; i < f->n; i++)
                close(f->fd[i]);
        f->n = 0;
}

/* One packet, with the fds attached (SCM_RIGHTS) when there are any. */
static ssize_t send_with_fds(int sock, const char *text, const setup_fds *fds) {
        struct iovec iov = {.iov_base = (void *)text, .iov_len = strlen(text)};
        union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * SETUP_MAX_FDS)]; } ctl = {};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (fds->n) {
                mh.msg_control = ctl.b;
                mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds->n);
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int) * fds->n);
                memcpy(CMSG_DATA(c), fds->fd, sizeof(int) * fds->n);
        }
        return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

/* The session CA's bundle as a detached read-only mount of a copy on a
 * tmpfs of its own (core_rootfs_file_tree), to go over the sandbox's
 * system bundle: a bind of the file under our run directory would show
 * that path, and the sandbox's host-side name, in /proc/self/mountinfo
 * inside. Returns the fd or a negative errno with *ret_err. */
static int ca_bundle_tree(const sandbox *sb, sb_error **ret_err) {
        _cleanup_free_ char *cert = NULL, *key = NULL, *bundle = NULL, *text = NULL;
        size_t n = 0;
        if (ca_paths(sb, &cert, &key, &bundle) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_read_file(bundle, 32 << 20, &text, &n);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: read the bundle: %s", strerror(-r));
        r = core_rootfs_file_tree("ca-bundle.crt", text, n, ret_err);
        return r < 0 ? sb_error_prefix(ret_err, "egress proxy CA") : r;
}

/* After the host's /etc/ssl (the last bind): the combined bundle covers
 * the file inside that bind, read-only, so the sandbox cannot plant a CA
 * of its own for other processes to trust. As fd fds->n of the packet. */
static int ca_bundle_bind(start_job *j, cJSON *pkt, setup_fds *fds, sb_error **ret_err) {
        if (fds->n >= SETUP_MAX_FDS)
                return sb_error_set(ret_err, -E2BIG, NULL, NULL, "too many binds");
        int fd = ca_bundle_tree(j->sb, ret_err);
        if (fd < 0)
                return fd;
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "src", "ca-bundle.crt");
        cJSON_AddStringToObject(b, "dst", SANDBOX_CA_BUNDLE);
        cJSON_AddBoolToObject(b, "ro", true);
        cJSON_AddNumberToObject(b, "fd", (double)fds->n);
        cJSON_AddItemToArray(cJSON_GetObjectItem(pkt, "binds"), b);
        fds->fd[fds->n++] = fd;
        return 0;
}

/* User namespace: every bind of the packet as a detached mount made here
 * (init cannot reach paths under our 0700 directories), its index in
 * "fd". */
static int userns_binds(cJSON *pkt, setup_fds *fds, sb_error **ret_err) {
        cJSON *b;
        cJSON_ArrayForEach(b, cJSON_GetObjectItem(pkt, "binds")) {
                const char *src = cJSON_GetStringValue(cJSON_GetObjectItem(b, "src"));
                if (!src || fds->n >= SETUP_MAX_FDS)
                        return sb_error_set(ret_err, -E2BIG, NULL, NULL, "too many binds");
                int fd = core_userns_bind_tree(src, !cJSON_IsFalse(cJSON_GetObjectItem(b, "ro")), ret_err);
                if (fd < 0)
                        return fd;
                cJSON_AddNumberToObject(b, "fd", (double)fds->n);
                fds->fd[fds->n++] = fd;
        }
        return 0;
}

/* User namespace: the root overlay on idmapped layers, built here (host
 * root) for init, which cannot (libcore/userns.h). */
static int userns_overlay(start_job *j, sb_error **ret_err) {
        char ns[64];
        snprintf(ns, sizeof(ns), "/proc/%d/ns/user", (int)j->spawn.pid);
        _cleanup_close_ int nsfd = open(ns, O_RDONLY | O_CLOEXEC);
        if (nsfd < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", ns);
        _cleanup_free_ char *lower = sandbox_lowerdir(j->sb);
        if (!lower)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        _cleanup_free_ char *layer = core_disk_layer_dir(j->sb->dir);
        if (!layer)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_userns_overlay(nsfd, lower, layer, j->sb->userns_base, ret_err);
        return r < 0 ? sb_error_prefix(ret_err, "user namespace root") : r;
}

/* The sandbox's volumes (volume.c): each a detached clone of the
 * volume's tree made here, idmapped so that the files keep sandbox ids on
 * disk: through the session's own user namespace (on-disk k is its k), or
 * without one through a namespace of its own mapping on-disk 0 and 1000
 * to host root and the sandboxd-user account, the ids of root and the
 * sandbox user there (on-disk ids other than those show as nobody, and
 * may not be given). sandbox-init attaches each last, at its path, made
 * without following symlinks ("mkdir", libcore/rootfs.c). */
static int volume_binds(start_job *j, cJSON *pkt, setup_fds *fds, sb_error **ret_err) {
        if (cJSON_GetArraySize(j->volume_mounts) == 0)
                return 0;
        _cleanup_close_ int nsfd = -EBADF;
        pid_t holder = 0;
        if (j->sb->userns_base) {
                char ns[64];
                snprintf(ns, sizeof(ns), "/proc/%d/ns/user", (int)j->spawn.pid);
                if ((nsfd = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", ns);
        } else {
                uid_t uid = 0;
                gid_t gid = 0;
                int r = userns_sandbox_user(j->sb, &uid, &gid);
                char umap[64], gmap[64];
                snprintf(umap, sizeof(umap), "0 0 1\n%u %u 1\n", SANDBOX_UID, (unsigned)uid);
                snprintf(gmap, sizeof(gmap), "0 0 1\n%u %u 1\n", SANDBOX_GID, (unsigned)gid);
                if (r < 0 || uid == 0 || gid == 0)
                        return sb_error_set(ret_err, r < 0 ? r : -EINVAL, NULL, NULL,
                                            "volumes: no sandbox user account to map");
                if ((r = core_userns_hold_maps(umap, gmap, &holder, &nsfd, ret_err)) < 0)
                        return sb_error_prefix(ret_err, "volumes");
        }
        int r = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, j->volume_mounts) {
                const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "name"));
                const char *dir = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "dir"));
                const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "path"));
                bool ro = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "readOnly"));
                if (fds->n >= SETUP_MAX_FDS) {
                        r = sb_error_set(ret_err, -E2BIG, NULL, NULL, "too many binds");
                        break;
                }
                int fd = volumes_tree(dir, nsfd, ro, ret_err);
                if (fd < 0) {
                        r = sb_error_prefix(ret_err, "volume '%s'", name);
                        break;
                }
                cJSON *b = cJSON_CreateObject();
                char src[96];
                snprintf(src, sizeof(src), "volume:%s", name);
                cJSON_AddStringToObject(b, "src", src);
                cJSON_AddStringToObject(b, "dst", path);
                cJSON_AddBoolToObject(b, "ro", ro);
                cJSON_AddBoolToObject(b, "mkdir", true);
                cJSON_AddNumberToObject(b, "fd", (double)fds->n);
                cJSON_AddItemToArray(cJSON_GetObjectItem(pkt, "binds"), b);
                fds->fd[fds->n++] = fd;
        }
        if (holder > 0)
                core_userns_release(holder);
        return r;
}

/* Sends sandbox-init its setup packet (the mounts it needs as fds with a
 * user namespace); its answer is setup_wait's. 0 or a negative errno with
 * *ret_err. */
static int setup_send(start_job *j, sb_error **ret_err) {
        _cleanup_(setup_fds_close) setup_fds fds = {.n = 0};
        cJSON *pkt = setup_packet(j);
        if (j->sb->userns_base) {
                int fd = userns_overlay(j, ret_err);
                if (fd >= 0)
                        fds.fd[fds.n++] = fd;
                if (fd < 0 || (fd = userns_binds(pkt, &fds, ret_err)) < 0) {
                        cJSON_Delete(pkt);
                        return fd;
                }
        }
        if (j->sandbox_trusts_ca) {
                int r = ca_bundle_bind(j, pkt, &fds, ret_err);
                if (r < 0) {
                        cJSON_Delete(pkt);
                        return r;
                }
        }
        {
                int r = volume_binds(j, pkt, &fds, ret_err);
                if (r < 0) {
                        cJSON_Delete(pkt);
                        return r;
                }
        }
        /* Host mounts (sandbox.create "mounts"), resolved again at every
         * start: attached by init last, over everything else. */
        if (cJSON_GetArraySize(j->sb->mounts) > 0) {
                cJSON *pm = cJSON_AddArrayToObject(pkt, "mounts");
                int r = pm ? container_sandbox_mounts(j->sb, pm, fds.fd, &fds.n, SETUP_MAX_FDS, ret_err) : -ENOMEM;
                if (r < 0) {
                        cJSON_Delete(pkt);
                        return r;
                }
        }
        _cleanup_free_ char *text = cJSON_PrintUnformatted(pkt);
        cJSON_Delete(pkt);
        if (!text)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if (send_with_fds(j->spawn.agent_fd, text, &fds) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "send setup to sandbox-init: %m");
        return 0;
}

/* Waits for sandbox-init's answer to the setup packet setup_send sent:
 * 0 once it is ready, else a negative errno with *ret_err (its message,
 * a timeout, its exit). */
static int setup_wait(start_job *j, sb_error **ret_err) {
        struct pollfd p = {.fd = j->spawn.agent_fd, .events = POLLIN};
        int r = poll(&p, 1, SETUP_TIMEOUT_MS);
        if (r <= 0)
                return sb_error_set(ret_err, r < 0 ? negative_errno() : -ETIMEDOUT, NULL, NULL,
                                    "sandbox-init did not report ready within %d ms", SETUP_TIMEOUT_MS);
        char buf[8192];
        ssize_t n = recv(j->spawn.agent_fd, buf, sizeof(buf) - 1, 0);
        if (n <= 0)
                return sb_error_set(ret_err, -EPIPE, NULL, NULL, "sandbox-init exited during setup");
        buf[n] = 0;
        cJSON *msg = cJSON_Parse(buf);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "ev"));
        if (ev && streq(ev, "ready")) {
                cJSON_Delete(msg);
                return 0;
        }
        r = sb_error_set(ret_err, -EIO, NULL, NULL, "sandbox-init setup: %s",
                         cJSON_GetStringValue(cJSON_GetObjectItem(msg, "message")) ?: "unexpected answer");
        cJSON_Delete(msg);
        return r;
}

static void kill_spawned(core_spawn_result *sp) {
        if (sp->pidfd >= 0) {
                syscall(SYS_pidfd_send_signal, sp->pidfd, SIGKILL, NULL, 0);
                siginfo_t si;
                waitid(P_PIDFD, (id_t)sp->pidfd, &si, WEXITED);
                close(sp->pidfd);
        }
        if (sp->agent_fd >= 0)
                close(sp->agent_fd);
        sp->pidfd = sp->agent_fd = -EBADF;
}

/* ---- the resolver of allow-all sessions ----------------------------------- */

void session_dns_upstream_init(void) {
        _cleanup_fclose_ FILE *f = fopen("/etc/resolv.conf", "re");
        char line[512], ns[256];
        struct in_addr a = {0};
        /* The first IPv4 nameserver a forwarded packet can reach: not a
         * loopback one (systemd-resolved's 127.0.0.53 is the host's own,
         * and no sandbox packet is routed to loopback). */
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, " nameserver %255s", ns) == 1 && inet_pton(AF_INET, ns, &a) == 1 &&
                    (ntohl(a.s_addr) >> 24) != IN_LOOPBACKNET && a.s_addr != INADDR_ANY)
                        break;
                else
                        a.s_addr = 0;
        pol_nft_set_dns_upstream(a);
        if (a.s_addr)
                log_info("allow-all sessions resolve through %s (the host's resolver)", inet_ntop(AF_INET, &a, ns,
                                                                                                  sizeof(ns)));
        else
                log_warning("no IPv4 nameserver other than loopback in /etc/resolv.conf: allow-all sessions "
                            "cannot resolve names");
}

/* ---- the DNS filter (sandbox-netd) of a custom-policy session -------------- */

/* The host's first resolver: sandbox-netd runs in the daemon's network
 * namespace, so a loopback resolver (systemd-resolved) is fine here. */
static int upstream_resolver(char *buf, size_t size) {
        _cleanup_fclose_ FILE *f = fopen("/etc/resolv.conf", "re");
        char line[512], ns[256];
        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, " nameserver %255s", ns) == 1) {
                        snprintf(buf, size, strchr(ns, ':') ? "[%s]:53" : "%s:53", ns);
                        return 0;
                }
        return -ENOENT;
}

/* The egress proxy's arguments: where it listens (the port nftables
 * redirects TCP 80/443 to), the session CA it terminates TLS with (without
 * one, hosts with rules are refused) and whether the sandbox trusts it
 * (then a refused name on 443 gets its 403 inside TLS: --ca-trusted), the
 * extra roots it verifies upstreams against, and the name its 403 pages
 * and events carry. A session's sandbox trusts its CA exactly when the CA
 * was made with ca_trust_possible() true (ca_make_files; a pooled session
 * that loses its bind loses its CA too), and that depends on the runtime
 * and the host's bundle only, so it is asked again here. */
static size_t netd_proxy_args(const sandbox *sb, bool with_ca, char **argv, char *proxy_arg, char *cert,
                              char *key) {
        const char *extra = sb->m->cfg->proxy_upstream_ca;
        size_t a = 0;
        argv[a++] = (char *)"--proxy";
        argv[a++] = proxy_arg;
        if (with_ca) {
                argv[a++] = (char *)"--ca-cert";
                argv[a++] = cert;
                argv[a++] = (char *)"--ca-key";
                argv[a++] = key;
                if (ca_trust_possible(sb))
                        argv[a++] = (char *)"--ca-trusted";
        }
        if (extra) {
                argv[a++] = (char *)"--upstream-ca";
                argv[a++] = (char *)extra;
        }
        argv[a++] = (char *)"--name";
        argv[a++] = sb->name;
        return a;
}

/* What netd's policy file holds (policy/netd/main.c): the policy, the
 * never list as it is now (manager_never_list: the host's addresses as the
 * kernel has them, so every start and every reload carries the current
 * list) and the
 * policy generation its pins must carry. NULL when out of memory. */
static char *netd_policy_text(manager *m, const pol_policy *p, uint64_t generation) {
        _cleanup_free_ pol_cidr *never = NULL;
        size_t n_never = 0;
        if (manager_never_list(m, &never, &n_never) < 0)
                return NULL;
        cJSON *doc = cJSON_CreateObject(), *pol = pol_policy_to_json(p, false), *list = cJSON_CreateArray();
        char *text = NULL;
        if (doc && pol && list) {
                cJSON_AddItemToObject(doc, "networkPolicy", pol);
                pol = NULL;
                for (size_t i = 0; i < n_never; i++) {
                        char c[64];
                        cJSON_AddItemToArray(list, cJSON_CreateString(pol_cidr_format(&never[i], c, sizeof(c))));
                }
                cJSON_AddItemToObject(doc, "never", list);
                list = NULL;
                cJSON_AddNumberToObject(doc, "generation", (double)generation);
                text = cJSON_PrintUnformatted(doc);
        }
        cJSON_Delete(doc);
        cJSON_Delete(pol);
        cJSON_Delete(list);
        return text;
}

/* core_spawn_helper_in of sandbox-netd as a core_cgroup_run_inside_child_v1
 * callback. */
typedef struct netd_spawn {
        const char *path;
        char **argv;
        int cgroup_fd;  /* the netd child's v2 directory, or -EBADF */
        bool v2_missed; /* a v2 hierarchy is in use but no fd for it */
        pid_t pid;
        int out, in;
        sb_error **err;
} netd_spawn;

static int netd_spawn_run(void *userdata) {
        netd_spawn *sp = userdata;
        return core_spawn_helper_in(sp->path, sp->argv, sp->cgroup_fd, &sp->out, &sp->in, &sp->pid, sp->err);
}

/* Starts sandbox-netd for policy p (pins stamped with `generation`): the DNS filter on gateway:53 and the
 * egress proxy on gateway:POL_PROXY_PORT, and waits (bounded) for its
 * ready line. Its stdout (pins and denials, one JSON object a line) is
 * returned in *ret_out. It runs in the child cgroup CORE_CGROUP_NETD of
 * the session's `cg` (NULL: left where it is). Blocking: a worker thread,
 * or the loop for a live update. */
static int netd_start(manager *m, const sandbox *sb, core_cgroup *cg, bool with_ca, const pol_policy *p,
                      uint64_t generation, struct in_addr gateway, int pod_netns, pid_t *ret_pid, int *ret_out,
                      int *ret_in, sb_error **ret_err) {
        const char *run_dir = sb->run_dir;
        char gw[INET_ADDRSTRLEN], listen_arg[64], proxy_arg[64], upstream[300], netns_arg[64];
        _cleanup_free_ char *cert = NULL, *key = NULL, *bundle = NULL;
        bool pod = pod_netns >= 0;
        inet_ntop(AF_INET, &gateway, gw, sizeof(gw));
        snprintf(listen_arg, sizeof(listen_arg), "%s:53", gw);
        snprintf(proxy_arg, sizeof(proxy_arg), "%s:%d", gw, POL_PROXY_PORT);
        /* A pod's filter listens on its namespace's loopback, where the
         * pod's table redirects port 53 (policy/nftpod.h); netd opens the
         * namespace through this daemon's descriptor of it. */
        if (pod) {
                snprintf(listen_arg, sizeof(listen_arg), "%s:%d", POL_POD_DNS_ADDR, POL_POD_DNS_PORT);
                snprintf(netns_arg, sizeof(netns_arg), "/proc/%d/fd/%d", (int)getpid(), pod_netns);
        }
        if (ca_paths(sb, &cert, &key, &bundle) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if ((!pod || pod_dns_upstream(m, upstream, sizeof(upstream)) < 0) &&
            upstream_resolver(upstream, sizeof(upstream)) < 0)
                return sb_error_set(ret_err, -ENOENT, NULL, NULL, "DNS filter: no nameserver in /etc/resolv.conf");
        _cleanup_free_ char *path = NULL, *text = netd_policy_text(m, p, generation);
        if (!text || asprintf(&path, "%s/policy.json", run_dir) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        int r = core_mkdir_p(run_dir, 0700);
        if (r >= 0)
                r = core_write_file_replace(path, text, strlen(text), 0600);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "DNS filter: write %s: %s", path, strerror(-r));
        /* The never list travels in the policy file (netd_policy_text). */
        char **argv = calloc(25, sizeof(char *));
        size_t a = 0;
        if (!argv)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        argv[a++] = (char *)"sandbox-netd";
        argv[a++] = (char *)"--listen";
        argv[a++] = listen_arg;
        argv[a++] = (char *)"--upstream";
        argv[a++] = upstream;
        argv[a++] = (char *)"--policy";
        argv[a++] = path;
        argv[a++] = (char *)"--ack";
        if (pod) {
                /* No egress proxy for a pod (pod_policy_check refuses what
                 * would need one). */
                argv[a++] = (char *)"--listen-netns";
                argv[a++] = netns_arg;
                argv[a++] = (char *)"--name";
                argv[a++] = sb->name;
        } else
                a += netd_proxy_args(sb, with_ca, argv + a, proxy_arg, cert, key);
        /* The IPv6 gateway of the same slot (the IPv4 gateway is the
         * slot's even address): the proxy's IPv6 listener, where nftables
         * redirects the session's IPv6 TCP 80/443. */
        char proxy6_arg[INET6_ADDRSTRLEN + 10];
        if (m->pool.prefix6 && !pod) {
                char gw6[INET6_ADDRSTRLEN];
                unsigned slot = (ntohl(gateway.s_addr) - ntohl(m->pool.base.s_addr)) / 2;
                struct in6_addr g6 = core_net_host_addr6(&m->pool, slot);
                inet_ntop(AF_INET6, &g6, gw6, sizeof(gw6));
                snprintf(proxy6_arg, sizeof(proxy6_arg), "[%s]:%d", gw6, POL_PROXY_PORT);
                argv[a++] = (char *)"--proxy6";
                argv[a++] = proxy6_arg;
        }
        /* netd parses the sandbox's traffic for it: its CPU, memory and
         * threads are charged to the session (a child cgroup under the
         * session's limits), from its first instruction, so a DNS or proxy
         * flood from one sandbox spends only that sandbox's share. A
         * sandbox that exhausts its own limits starves its own netd: its
         * network then fails closed. Born there (v2 CLONE_INTO_CGROUP, the
         * spawning thread inside the v1 ones), as sandbox-init is: a move
         * through cgroup.procs waits for an RCU grace period. */
        netd_spawn sp = {.path = m->netd_path, .argv = argv, .cgroup_fd = -EBADF, .out = -EBADF, .in = -EBADF,
                         .err = ret_err};
        bool born_inside = false;
        if (cg && (r = core_cgroup_make_child(cg, CORE_CGROUP_NETD, &sp.cgroup_fd, ret_err)) > 0)
                sp.v2_missed = true;
        if (r >= 0)
                r = cg ? core_cgroup_run_inside_child_v1(cg, CORE_CGROUP_NETD, netd_spawn_run, &sp, &born_inside,
                                                         ret_err)
                       : netd_spawn_run(&sp);
        free(argv);
        if (sp.cgroup_fd >= 0)
                close(sp.cgroup_fd);
        if (r < 0 && sp.pid > 0) {
                /* Started, but the thread could not leave the session's cgroups. */
                kill(sp.pid, SIGKILL);
                waitpid(sp.pid, NULL, 0);
                close(sp.out);
                close(sp.in);
        }
        if (r < 0)
                return sb_error_prefix(ret_err, "DNS filter");
        int out = sp.out, in = sp.in;
        *ret_pid = sp.pid;
        /* First of all: a daemon killed from here on leaves a record by
         * which the next one ends this netd (restore.c). */
        {
                char owner[96];
                snprintf(owner, sizeof(owner), "sandbox-netd of sandbox '%s'", sb->name);
                (void)restore_helper_record(*ret_pid, owner);
        }
        _cleanup_close_ int fd = out, ack = in;
        /* Where it could not be born in them (systemd driver, a failed
         * move of the thread, no v2 fd): moved in before it reads a
         * packet. */
        if (cg && (sp.v2_missed || !born_inside) &&
            (r = sp.v2_missed ? core_cgroup_attach_child(cg, CORE_CGROUP_NETD, *ret_pid, ret_err)
                              : core_cgroup_attach_child_v1(cg, CORE_CGROUP_NETD, *ret_pid, ret_err)) < 0) {
                kill(*ret_pid, SIGKILL);
                waitpid(*ret_pid, NULL, 0);
                *ret_pid = 0;
                return sb_error_prefix(ret_err, "DNS filter");
        }
        /* The ready line comes once it has bound :53 and dropped privileges. */
        char line[512];
        r = core_read_line_timeout(fd, line, sizeof(line), 5000);
        /* Both must be up: a custom policy without its proxy would leave
         * the redirected ports 80 and 443 refused (fail closed, but not
         * what the policy says). */
        if (r < 0 || !strstr(line, "\"ready\":true") || (!pod && !strstr(line, "\"proxy\""))) {
                kill(*ret_pid, SIGKILL);
                waitpid(*ret_pid, NULL, 0);
                restore_helper_forget(*ret_pid);
                *ret_pid = 0;
                return sb_error_set(ret_err, r < 0 ? r : -EIO, NULL, NULL,
                                    "DNS filter and egress proxy did not start on %s and %s (see the daemon log)",
                                    listen_arg, proxy_arg);
        }
        *ret_out = TAKE_FD(fd);
        *ret_in = TAKE_FD(ack);
        return 0;
}

static void netd_stop(pid_t *pid) {
        if (*pid <= 0)
                return;
        kill(*pid, SIGTERM);
        /* netd exits at once on SIGTERM; bounded wait, then SIGKILL. */
        for (int i = 0; i < 200; i++) {
                if (waitpid(*pid, NULL, WNOHANG) == *pid) {
                        restore_helper_forget(*pid);
                        *pid = 0;
                        return;
                }
                usleep(5000);
        }
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        restore_helper_forget(*pid);
        *pid = 0;
}

static bool layer_is(cJSON *o, const char *layer) {
        const char *l = cJSON_GetStringValue(cJSON_GetObjectItem(o, "layer"));
        return l && streq(l, layer);
}

/* A refusal by the egress proxy ({"deny":host,"port":N,"layer":"proxy",
 * "reason":...,"rule":...,"message":...}): an event on the stream and a
 * count in the sandbox's counters, as the DNS filter's and nftables'
 * denials are. netd never puts a header value in these lines. */
static void proxy_denial(sandbox *sb, cJSON *o, const char *host) {
        cJSON *port = cJSON_GetObjectItem(o, "port");
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(o, "message"));
        const char *rule = cJSON_GetStringValue(cJSON_GetObjectItem(o, "rule"));
        const char *reason = cJSON_GetStringValue(cJSON_GetObjectItem(o, "reason"));
        cJSON *f = cJSON_CreateObject();
        sb->denials++;
        cJSON_AddStringToObject(f, "layer", "proxy");
        cJSON_AddStringToObject(f, "host", host);
        if (cJSON_IsNumber(port) && port->valuedouble >= 0 && port->valuedouble <= 65535)
                cJSON_AddNumberToObject(f, "port", port->valuedouble);
        cJSON_AddStringToObject(f, "reason", reason ? reason : "not-allowed");
        cJSON_AddStringToObject(f, "message", msg ? msg : "refused by the sandbox's egress proxy");
        cJSON_AddStringToObject(f, "rule", rule ? rule : "");
        events_emit(sb->m, EVENT_DENIED, sb->name, f);
}

bool pin_generation_current(const session *s, const cJSON *generation) {
        return cJSON_IsNumber(generation) && generation->valuedouble >= 0 &&
               (uint64_t)generation->valuedouble == s->policy_generation;
}

/* One line from sandbox-netd: pin the address before netd releases the
 * answer (it waits for us to read the next line), or record a denial. */
static void netd_line(session *s, const char *line) {
        sandbox *sb = s->sb;
        cJSON *o = cJSON_Parse(line);
        const char *pin = cJSON_GetStringValue(cJSON_GetObjectItem(o, "pin"));
        const char *deny = cJSON_GetStringValue(cJSON_GetObjectItem(o, "deny"));
        const cJSON *reloaded = cJSON_GetObjectItem(o, "reloaded");
        char ifname[32];
        snprintf(ifname, sizeof(ifname), "sbx%d", s->net_slot);
        if (cJSON_IsBool(reloaded)) {
                s->netd_reloaded = cJSON_IsTrue(reloaded) ? 1 : -1;
                if (s->netd_reloaded < 0)
                        log_warning("sandbox '%s': its DNS filter refused the new policy: %s", sb->name,
                                    cJSON_GetStringValue(cJSON_GetObjectItem(o, "message")) ?: "?");
        } else if (pin) {
                pol_addr a;
                cJSON *ttl = cJSON_GetObjectItem(o, "ttl");
                _cleanup_error_ sb_error *err = NULL;
                /* A pin judged under a policy this session no longer has
                 * (its line was still in flight when sandbox.update
                 * replaced it) is refused, never added: netd answers
                 * SERVFAIL and the client asks again, under the new one. */
                bool current = pin_generation_current(s, cJSON_GetObjectItem(o, "generation"));
                /* A (dns4) or AAAA (dns6) pin; an IPv6 pin without an IPv6
                 * pool goes into a set no packet reaches (the host table
                 * denies the session's IPv6 first). */
                uint32_t ttl_s = cJSON_IsNumber(ttl) ? (uint32_t)ttl->valuedouble : 30;
                bool ok = current && pol_addr_parse(pin, &a) == 0;
                /* A pod's pins go into its own table (nftpod.h); only a
                 * custom policy has pin sets (allow-all admits anyway). */
                if (ok && s->pod_netns >= 0)
                        ok = sb->pol->mode != POL_MODE_CUSTOM || pol_pod_pin(s->pod_netns, &a, ttl_s, &err) >= 0;
                else if (ok)
                        ok = pol_nft_pin_addr(ifname, &a, ttl_s, &err) >= 0;
                if (!current)
                        log_debug("sandbox '%s': pin %s judged under a replaced policy: refused", sb->name, pin);
                else if (!ok)
                        log_warning("sandbox '%s': pin %s: %s", sb->name, pin, err ? err->message : "not an IP address");
                else
                        pins_record_addr(&s->pins, &a, cJSON_GetStringValue(cJSON_GetObjectItem(o, "name")),
                                    cJSON_IsNumber(ttl) ? (uint32_t)ttl->valuedouble : 30);
                /* netd releases the answer only on "\n": the address is in the
                 * set before the sandbox learns it; anything else is SERVFAIL. */
                if (s->netd_in >= 0 && write(s->netd_in, ok ? "\n" : "!", 1) != 1)
                        log_warning("sandbox '%s': cannot acknowledge a pin to its DNS filter: %m", sb->name);
        } else if (deny && layer_is(o, "proxy")) {
                proxy_denial(sb, o, deny);
        } else if (deny) {
                sb->denials++;
                cJSON *f = cJSON_CreateObject();
                cJSON_AddStringToObject(f, "layer", "dns");
                cJSON_AddStringToObject(f, "host", deny);
                const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(o, "message"));
                cJSON_AddStringToObject(f, "message", msg ? msg : "denied by the sandbox's network policy");
                const char *layer = cJSON_GetStringValue(cJSON_GetObjectItem(o, "layer"));
                cJSON_AddStringToObject(f, "rule", layer ? layer : "");
                events_emit(sb->m, EVENT_DENIED, sb->name, f);
        }
        cJSON_Delete(o);
}

/* Reads what netd wrote and handles every complete line. Returns the
 * read(2) result: > 0 bytes, 0 at EOF, negative errno (-EAGAIN: nothing). */
static ssize_t netd_read(session *s) {
        char buf[4096];
        ssize_t n = read(s->netd_out, buf, sizeof(buf));
        if (n <= 0)
                return n < 0 ? negative_errno() : 0;
        char *nb = realloc(s->netd_buf, s->netd_len + (size_t)n + 1);
        if (!nb)
                return n;
        s->netd_buf = nb;
        memcpy(s->netd_buf + s->netd_len, buf, (size_t)n);
        s->netd_len += (size_t)n;
        s->netd_buf[s->netd_len] = 0;
        char *start = s->netd_buf, *nl;
        while ((nl = strchr(start, '\n'))) {
                *nl = 0;
                netd_line(s, start);
                start = nl + 1;
        }
        s->netd_len -= (size_t)(start - s->netd_buf);
        memmove(s->netd_buf, start, s->netd_len + 1);
        if (s->netd_len > 65536)
                s->netd_len = 0; /* a line that long is not one of ours */
        return n;
}

static int on_netd_output(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        session *s = userdata;
        ssize_t n = netd_read(s);
        if (n == 0 || (n < 0 && n != -EAGAIN && n != -EINTR)) {
                log_warning("sandbox '%s': its DNS filter and egress proxy (sandbox-netd) exited", s->sb->name);
                s->netd_src = sd_event_source_disable_unref(s->netd_src);
        }
        return 0;
}

/* Swaps the policy of the running netd without a restart: the policy file
 * is rewritten in place (netd holds it open from before its privilege
 * drop, so it must stay the same inode), then SIGHUP; netd answers with a
 * {"reloaded":...} line, which netd_reload_wait() reads. Connections and
 * queries already in progress finish under the policy they started with.
 * 0, or a negative errno when the caller should restart netd instead.
 * Runs on the loop. */
static int netd_reload_begin(session *s, const pol_policy *p) {
        if (s->netd_pid <= 0 || s->netd_out < 0)
                return -ESRCH;
        _cleanup_free_ char *path = NULL, *text = netd_policy_text(s->sb->m, p, s->policy_generation);
        if (!text || asprintf(&path, "%s/policy.json", s->sb->run_dir) < 0)
                return -ENOMEM;
        _cleanup_close_ int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return negative_errno();
        for (size_t off = 0, len = strlen(text); off < len;) {
                ssize_t w = write(fd, text + off, len - off);
                if (w < 0 && errno != EINTR)
                        return negative_errno();
                off += w > 0 ? (size_t)w : 0;
        }
        s->netd_reloaded = 0;
        if (kill(s->netd_pid, SIGHUP) < 0)
                return negative_errno();
        return 0;
}

/* Waits (bounded, 2 s) for the acknowledgement of netd_reload_begin(),
 * handling the pins and denials that arrive meanwhile as usual. 0 when
 * netd took the policy, or a negative errno (-EINVAL: it refused it) when
 * the caller should restart netd instead. Runs on the loop. */
static int netd_reload_wait(session *s) {
        uint64_t deadline = core_monotonic_ms() + 2000;
        while (s->netd_reloaded == 0) {
                uint64_t now = core_monotonic_ms();
                if (now >= deadline)
                        return -ETIMEDOUT;
                struct pollfd pfd = { .fd = s->netd_out, .events = POLLIN };
                if (poll(&pfd, 1, (int)(deadline - now)) < 0 && errno != EINTR)
                        return negative_errno();
                ssize_t n = netd_read(s);
                if (n == 0 || (n < 0 && n != -EAGAIN && n != -EINTR))
                        return n == 0 ? -EPIPE : (int)n;
        }
        return s->netd_reloaded > 0 ? 0 : -EINVAL;
}

/* netd_reload_begin() and netd_reload_wait() in one. */
static int netd_reload(session *s, const pol_policy *p) {
        int k = netd_reload_begin(s, p);
        return k < 0 ? k : netd_reload_wait(s);
}

/* ---- supervision of a session's sandbox-netd ---------------------------------
 *
 * netd parses hostile traffic, so it may die (a bug, the OOM killer, a
 * kill by an operator). While it is down the sandbox fails closed: nothing
 * answers on the gateway's DNS and proxy ports, and nftables refuses the
 * rest. It is started again at once on the session's current policy (the
 * pins it made stay in the session's nftables set), the restart is an
 * event and is counted in sandbox.get's session.netdRestarts. A netd that
 * keeps dying is started again at once NETD_BURST times within
 * NETD_BURST_WINDOW_MS, then after a delay doubling from 1 s up to
 * NETD_BACKOFF_MAX_MS, so a crash loop never spins the daemon. */
#define NETD_BURST 5
#define NETD_BURST_WINDOW_MS (60 * 1000)
#define NETD_BACKOFF_MAX_MS (30 * 1000)

static int netd_attach(session *s);
static void netd_detach(session *s);
static uint64_t netd_schedule_restart(session *s);

static int on_netd_retry(sd_event_source *src, uint64_t usec, void *userdata) {
        session *s = userdata;
        sandbox *sb = s->sb;
        if (s->stopping || s->netd_pid > 0 || !sb->pol ||
            (s->pod_netns < 0 && (s->net_slot < 0 || sb->pol->mode != POL_MODE_CUSTOM)))
                return 0;
        _cleanup_error_ sb_error *err = NULL;
        int r = netd_start(sb->m, sb, s->cg, s->proxy_ca, sb->pol, s->policy_generation, s->gateway, s->pod_netns, &s->netd_pid,
                           &s->netd_out, &s->netd_in, &err);
        if (r >= 0 && (r = netd_attach(s)) < 0)
                sb_error_set(&err, r, NULL, NULL, "watch it: %s", strerror(-r));
        if (r < 0) {
                log_warning("sandbox '%s': restart its DNS filter and egress proxy: %s (retrying; DNS and "
                            "proxied HTTP fail closed meanwhile)", sb->name, err ? err->message : strerror(-r));
                netd_detach(s);
                netd_stop(&s->netd_pid);
                netd_schedule_restart(s);
                return 0;
        }
        s->netd_restarts++;
        (void)restore_save_record(s);
        log_info("sandbox '%s': sandbox-netd started again (pid %d, restart %u)", sb->name, (int)s->netd_pid,
                 s->netd_restarts);
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "restarts", s->netd_restarts);
        cJSON_AddNumberToObject(f, "pid", s->netd_pid);
        char msg[128];
        snprintf(msg, sizeof(msg), "sandbox-netd died and was started again (restart %u of this session)",
                 s->netd_restarts);
        cJSON_AddStringToObject(f, "message", msg);
        events_emit(sb->m, EVENT_NETD_RESTARTED, sb->name, f);
        return 0;
}

static uint64_t netd_schedule_restart(session *s) {
        uint64_t now = core_monotonic_ms(), delay_ms = 0;
        if (!s->netd_burst_ms || now - s->netd_burst_ms > NETD_BURST_WINDOW_MS) {
                s->netd_burst_ms = now;
                s->netd_burst = 0;
        }
        if (s->netd_burst >= NETD_BURST) {
                unsigned shift = s->netd_burst - NETD_BURST;
                delay_ms = 1000ULL << (shift > 5 ? 5 : shift);
                if (delay_ms > NETD_BACKOFF_MAX_MS)
                        delay_ms = NETD_BACKOFF_MAX_MS;
                /* The window restarts at the last failure: a crash loop
                 * stays in backoff until netd runs a whole window. */
                s->netd_burst_ms = now;
        }
        s->netd_burst++;
        int r;
        if (s->netd_retry_src) {
                r = sd_event_source_set_time_relative(s->netd_retry_src, delay_ms * 1000);
                if (r >= 0)
                        r = sd_event_source_set_enabled(s->netd_retry_src, SD_EVENT_ONESHOT);
        } else
                r = sd_event_add_time_relative(s->sb->m->event, &s->netd_retry_src, CLOCK_MONOTONIC,
                                               delay_ms * 1000, 0, on_netd_retry, s);
        if (r < 0)
                log_error("sandbox '%s': cannot schedule a restart of sandbox-netd: %s; its DNS and proxied "
                          "HTTP stay closed", s->sb->name, strerror(-r));
        return delay_ms;
}

static int on_netd_exit(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        session *s = userdata;
        siginfo_t si = {0};
        /* Our child: reaped here, so its pid is not reused under netd_stop. */
        (void)waitid(P_PIDFD, (id_t)fd, &si, WEXITED | WNOHANG);
        restore_helper_forget(s->netd_pid);
        pid_t pid = s->netd_pid;
        s->netd_pid = 0;
        netd_detach(s);
        uint64_t delay_ms = netd_schedule_restart(s);
        log_warning("sandbox '%s': its DNS filter and egress proxy (sandbox-netd, pid %d) died (%s %d); "
                    "starting it again in %llu ms", s->sb->name, (int)pid,
                    si.si_code == CLD_EXITED ? "exit status" : "signal", si.si_status,
                    (unsigned long long)delay_ms);
        return 0;
}

static int netd_attach(session *s) {
        if (s->netd_out < 0)
                return 0;
        int fl = fcntl(s->netd_out, F_GETFL);
        if (fl >= 0)
                (void)fcntl(s->netd_out, F_SETFL, fl | O_NONBLOCK);
        int r = sd_event_add_io(s->sb->m->event, &s->netd_src, s->netd_out, EPOLLIN, on_netd_output, s);
        if (r < 0 || s->netd_pid <= 0)
                return r;
        /* Supervision: netd's pidfd turns readable when it dies. */
        int pfd = (int)syscall(SYS_pidfd_open, s->netd_pid, 0);
        if (pfd < 0)
                return negative_errno();
        r = sd_event_add_io(s->sb->m->event, &s->netd_exit_src, pfd, EPOLLIN, on_netd_exit, s);
        if (r < 0) {
                close(pfd);
                return r;
        }
        (void)sd_event_source_set_io_fd_own(s->netd_exit_src, true);
        return 0;
}

static void netd_detach(session *s) {
        s->netd_src = sd_event_source_disable_unref(s->netd_src);
        s->netd_exit_src = sd_event_source_disable_unref(s->netd_exit_src);
        s->netd_retry_src = sd_event_source_disable_unref(s->netd_retry_src);
        if (s->netd_out >= 0)
                close(s->netd_out);
        s->netd_out = -EBADF;
        if (s->netd_in >= 0)
                close(s->netd_in);
        s->netd_in = -EBADF;
        free(s->netd_buf);
        s->netd_buf = NULL;
        s->netd_len = 0;
}

/* deny-all → a networked mode: the veth of the session's slot, made with
 * its peer inside the sandbox's network namespace (as at start), before
 * the new rules are in place; eth0 inside stays down until
 * session_veth_configure. */
static int session_veth_add(session *s, sb_error **ret_err) {
        int r = core_veth_create(&s->sb->m->pool, (unsigned)s->net_slot, s->pid, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "networkPolicy: give the sandbox its network interface");
        s->has_veth = s->had_veth = true;
        core_fault("update.veth_created");
        return 0;
}

/* eth0 inside up with its address and default route (idempotent). */
static int session_veth_configure(session *s, sb_error **ret_err) {
        int r = core_net_configure_eth0(s->netns_fd, &s->sb->m->pool, (unsigned)s->net_slot, ret_err);
        return r < 0 ? sb_error_prefix(ret_err, "networkPolicy: configure the sandbox's eth0") : 0;
}

/* Step 4 of session_apply_policy: the session's nftables objects for p in
 * one batch, with the recorded pins the new policy still allows (a custom
 * one) put back in the same batch, so their flows carry on and need no new
 * lookup; the others are forgotten. */
static int session_apply_rules(session *s, const char *ifname, const pol_policy *p, sb_error **ret_err) {
        _cleanup_free_ pol_nft_carried_pin *keep = NULL;
        size_t n_keep = 0;
        if (p->mode == POL_MODE_CUSTOM) {
                _cleanup_free_ pol_cidr *never = NULL;
                size_t n_never = 0;
                manager_never_list(s->sb->m, &never, &n_never);
                if (pins_keep_allowed(&s->pins, p, never, n_never, &keep, &n_keep) < 0)
                        pins_free(&s->pins); /* out of memory: none carried over (fail closed) */
        } else
                pins_free(&s->pins);
        return pol_nft_session_apply_pins(ifname, p, s->gateway, keep, n_keep, ret_err);
}

/* The order leaves no moment where an address only the old policy allowed
 * is reachable once this returns (DESIGN §5.1 rule 9), and none where
 * traffic passes that neither policy allows:
 * 1. the session's policy generation is bumped: from here on every pin
 *    line judged under the old policy is refused (pin_generation_current),
 *    however late it arrives;
 * 2. netd gets the new policy with the new generation and acknowledges it
 *    once the batch of 4 is sent (pins that arrive meanwhile are read
 *    after the batch, into the new sets); if it cannot, it is stopped after
 *    4; if the new policy is not custom, it is stopped here (and started
 *    afresh in 7);
 * 3. leaving deny-all: the veth is made (its sandbox end down; the host
 *    table denies a veth without an element, so nothing passes yet);
 * 4. the nftables objects are replaced in one batch (every pin dropped;
 *    recorded pins the new policy still allows are pinned again in the
 *    same batch);
 * 5. nothing to do for established flows: the new rules are a new flow
 *    generation (ct mark, policy/nftgen.h), so every flow admitted before
 *    meets them on its next packet, in either direction, and a denied one
 *    is cut then (a TCP flow with a reset on the sandbox's next packet);
 *    no conntrack entry is deleted, so nothing here grows with the
 *    number of flows or sessions on the host;
 * 6. leaving deny-all: eth0 inside is brought up with its address and
 *    route. Entering it keeps the veth, fenced: its element `goto deny`
 *    answers every packet at once (TCP with a reset, so a flow cut here
 *    fails on its next send instead of hanging as it would on a deleted
 *    route), and nothing of it is forwarded or reaches the host;
 * 7. a netd that is not running is started on the new policy.
 * The resolver in the sandbox's resolv.conf (the gateway) is the same in
 * every mode, so nothing inside the sandbox changes. On failure in 3-7 the
 * old policy is put back (the caller restores the stored config). */
/* session_apply_policy() for a pod's sandbox (pod.c): the generation is
 * bumped (pins judged under the old policy are refused from here on), netd
 * takes the new policy (reloaded, or restarted on it), and the pod's table
 * is replaced in one batch (its pins dropped with it: judged under the old
 * policy). On a failure the old table and netd's old policy are put back;
 * a table that cannot be put back stops the sandbox (fail closed). */
static int session_apply_pod_policy(session *s, const pol_policy *p, sb_error **ret_err) {
        sandbox *sb = s->sb;
        s->policy_generation++;
        int reload = s->netd_pid > 0 ? netd_reload_begin(s, p) : -ESRCH;
        if (reload == -ESRCH) {
                netd_detach(s);
                netd_stop(&s->netd_pid);
        }
        int r = pod_apply_policy(sb->m, s->pod_netns, p, false, ret_err);
        if (r >= 0)
                pins_free(&s->pins); /* gone with the old table */
        if (reload >= 0)
                reload = netd_reload_wait(s);
        if (r < 0 || reload < 0) {
                netd_detach(s);
                netd_stop(&s->netd_pid);
        }
        if (r < 0) {
                _cleanup_error_ sb_error *uerr = NULL;
                s->policy_generation++;
                if (pod_apply_policy(sb->m, s->pod_netns, sb->pol, false, &uerr) < 0) {
                        log_error("sandbox '%s': put back its table after a refused update: %s; stopping it "
                                  "(fail closed)", sb->name, uerr ? uerr->message : "failed");
                        session_stop(sb);
                }
        }
        if (s->netd_pid <= 0 && !s->stopping) {
                _cleanup_error_ sb_error *nerr = NULL;
                if (netd_start(sb->m, sb, s->cg, s->proxy_ca, r < 0 ? sb->pol : p, s->policy_generation, s->gateway,
                               s->pod_netns, &s->netd_pid, &s->netd_out, &s->netd_in, &nerr) >= 0)
                        netd_attach(s);
                else {
                        log_warning("sandbox '%s': restart its DNS filter: %s (retrying; DNS fails closed "
                                    "meanwhile)", sb->name, nerr ? nerr->message : "failed");
                        netd_schedule_restart(s);
                }
        }
        (void)restore_save_record(s);
        return r;
}

int session_apply_policy(session *s, const pol_policy *p, sb_error **ret_err) {
        sandbox *sb = s->sb;
        char ifname[32];
        if (s->pod_netns >= 0)
                return session_apply_pod_policy(s, p, ret_err);
        if (s->net_slot < 0) {
                if (p->mode == POL_MODE_DENY_ALL)
                        return 0;
                return sb_error_set(ret_err, -EOPNOTSUPP, "invalid_policy", "networkPolicy",
                                    "networkPolicy: this session started without a network address (the "
                                    "address pool was full); stop the sandbox and start it again to change "
                                    "its policy to one with network access");
        }
        snprintf(ifname, sizeof(ifname), "sbx%d", s->net_slot);
        bool want_veth = p->mode != POL_MODE_DENY_ALL, made_veth = false;
        /* eth0 is configured, and the session record rewritten, only when
         * this change touches them: leaving deny-all (its fence), or a netd
         * started or stopped. A custom -> custom update does neither. */
        bool configure_eth0 = want_veth && (!s->has_veth || !sb->pol || sb->pol->mode == POL_MODE_DENY_ALL);
        pid_t old_netd = s->netd_pid;
        /* A stopping session is not given a network it lacks (its init may
         * already be gone); it ends as the narrower deny-all. */
        if (s->stopping && want_veth && !s->has_veth)
                return 0;
        s->policy_generation++;
        /* A custom policy replacing a custom one is swapped inside the
         * running netd. Otherwise (or if that fails) netd restarts on the
         * new policy; while it is down, queries go unanswered (fail closed). */
        /* The reload runs in netd while this thread sends the nftables
         * batch; its acknowledgement is awaited right after the batch, so
         * the update answers only once both hold (and netd has cut what
         * the new policy denies). A pin netd asks for meanwhile is read
         * after the batch, so it lands in the new sets (one of the old
         * generation is refused). */
        int reload = -ESRCH;
        if (p->mode == POL_MODE_CUSTOM && s->netd_pid > 0)
                reload = netd_reload_begin(s, p);
        if (reload == -ESRCH) {
                netd_detach(s);
                netd_stop(&s->netd_pid);
        }
        core_fault("update.netd_stopped");
        int r;
        if (want_veth && !s->has_veth) {
                if ((r = session_veth_add(s, ret_err)) < 0)
                        goto undo;
                made_veth = true;
        }
        if ((r = session_apply_rules(s, ifname, p, ret_err)) < 0)
                goto undo;
        if (reload >= 0)
                reload = netd_reload_wait(s);
        if (reload < 0 && reload != -ESRCH) {
                log_warning("sandbox '%s': reload of its DNS filter failed (%s); restarting it", sb->name,
                            strerror(-reload));
                netd_detach(s);
                netd_stop(&s->netd_pid);
        }
        core_fault("update.rules_replaced");
        /* No conntrack entry is deleted: the new rules carry a generation
         * of their own (pol_nft_session_apply_pins), so every flow admitted
         * before meets them on its next packet, in either direction. */
        core_fault("update.conntrack_flushed");
        /* Entering deny-all with a veth: the sandbox's own route to the
         * gateway becomes unreachable, so its lookups fail at once in its
         * own stack (nothing depends on a rate-limited ICMP answer). The
         * nftables fence above holds whether or not this succeeds. */
        if (!want_veth && s->has_veth) {
                _cleanup_error_ sb_error *ferr = NULL;
                if (core_net_fence_gateway(s->netns_fd, &sb->m->pool, (unsigned)s->net_slot, &ferr) < 0)
                        log_warning("sandbox '%s': %s; its lookups fail only when the refusal arrives", sb->name,
                                    ferr ? ferr->message : "fence the gateway failed");
        }
        if (configure_eth0 && (r = session_veth_configure(s, ret_err)) < 0)
                goto undo;
        if (p->mode == POL_MODE_CUSTOM && s->netd_pid <= 0) {
                r = netd_start(sb->m, sb, s->cg, s->proxy_ca, p, s->policy_generation, s->gateway, s->pod_netns, &s->netd_pid,
                               &s->netd_out, &s->netd_in, ret_err);
                if (r < 0)
                        goto undo;
                netd_attach(s);
        }
        if (s->netd_pid != old_netd)
                (void)restore_save_record(s);
        return 0;
undo:
        /* Back to the old policy as it was enforced: its rules (a later
         * generation, so no pin of the refused one is taken), its netd, and
         * no veth if it had none. */
        s->policy_generation++;
        netd_detach(s);
        netd_stop(&s->netd_pid);
        {
                _cleanup_error_ sb_error *uerr = NULL;
                if (pol_nft_session_apply(ifname, sb->pol, s->gateway, &uerr) < 0) {
                        log_error("sandbox '%s': put back its rules after a refused update: %s; stopping it "
                                  "(fail closed)", sb->name, uerr ? uerr->message : "failed");
                        session_stop(sb);
                }
        }
        if (made_veth) {
                core_veth_delete((unsigned)s->net_slot, NULL);
                s->has_veth = false;
        }
        if (sb->pol->mode == POL_MODE_CUSTOM && !s->stopping) {
                _cleanup_error_ sb_error *nerr = NULL;
                if (netd_start(sb->m, sb, s->cg, s->proxy_ca, sb->pol, s->policy_generation, s->gateway, s->pod_netns,
                               &s->netd_pid, &s->netd_out, &s->netd_in, &nerr) >= 0)
                        netd_attach(s);
                else
                        netd_schedule_restart(s);
        }
        (void)restore_save_record(s);
        return r;
}

void sessions_push_never_list(manager *m) {
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                session *s = sb->sess;
                if (s && !s->stopping && s->pod_netns >= 0) {
                        /* A pod's table holds the never list too: rebuilt
                         * if it changed (pod_apply_policy keeps it if not). */
                        _cleanup_error_ sb_error *perr = NULL;
                        if (pod_apply_policy(m, s->pod_netns, sb->pol, true, &perr) < 0) {
                                log_error("sandbox '%s': %s; stopping it (fail closed)", sb->name,
                                          perr ? perr->message : "the pod's table");
                                session_stop(sb);
                                continue;
                        }
                }
                if (!s || s->stopping || s->netd_pid <= 0 || !sb->pol ||
                    (sb->pol->mode != POL_MODE_CUSTOM && s->pod_netns < 0))
                        continue;
                /* Same policy, same generation: only the never list is new. */
                int k = netd_reload(s, sb->pol);
                if (k >= 0)
                        continue;
                /* A netd that cannot take the new list must not go on
                 * with the old one: restarted, on the current list. */
                log_warning("sandbox '%s': its DNS filter did not take the host's new addresses (%s); "
                            "restarting it", sb->name, strerror(-k));
                kill(s->netd_pid, SIGKILL); /* supervision restarts it (on_netd_exit) */
        }
}

void sessions_reapply_rules(manager *m) {
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                session *s = sb->sess;
                if (!s || s->net_slot < 0)
                        continue;
                char ifname[32];
                snprintf(ifname, sizeof(ifname), "sbx%d", s->net_slot);
                _cleanup_error_ sb_error *err = NULL;
                if (pol_nft_session_apply(ifname, sb->pol, s->gateway, &err) < 0)
                        log_error("sandbox '%s': re-apply its network rules: %s; stopping it (fail closed)",
                                  sb->name, err ? err->message : "failed");
                if (err)
                        session_stop(sb);
        }
}

/* prepare_dirs on a thread of its own (start_work): its result, the
 * directory it made and its error, read after the join. */
typedef struct dirs_job {
        start_job *j;
        bool made;
        int r;
        sb_error *err;
} dirs_job;

static void *dirs_thread(void *userdata) {
        dirs_job *d = userdata;
        d->r = prepare_dirs(d->j, &d->made, &d->err);
        return NULL;
}

/* start_work's cgroup and init: the session's cgroup, its restore
 * socket and sandbox-init cloned into both; j->spawn and j->netns_fd set.
 * Returns 0 or a negative errno with j->err set; what it made is undone
 * by start_work's failure path. */
static int spawn_session(start_job *j, step_clock *clk) {
        sandbox *sb = j->sb;
        manager *m = j->m;
        int r;
        _cleanup_close_ int lfd = -EBADF;
        core_cgroup_limits lim = {.pids_max = m->cfg->pids_max,
                                  .memory_max = (uint64_t)sb->vcpus * 2048ULL * 1024 * 1024,
                                  .cpu_quota_pct = sb->vcpus * 100};
        if ((r = core_cgroup_create(sb->name, &lim, &j->cg, &j->err)) < 0) {
                sb_error_prefix(&j->err, "create cgroup");
                return r;
        }
        /* Read on the loop only once the session is ready (start_done). */
        if (sb->pooled)
                sb->pool_pids_max = lim.pids_max;
        step_mark(clk, "cgroup");
        /* The socket a restarted daemon reconnects through (live restore);
         * init holds the only listening copy once spawned. */
        if ((lfd = restore_listen(sb->run_dir, &j->err)) < 0)
                return lfd;
        /* A pod's namespace, opened again by its path on a resume (the
         * create opened it when it checked the request). */
        if (sandbox_is_pod(sb) && j->pod_netns < 0 && (r = pod_netns_reopen(sb, &j->pod_netns, &j->err)) < 0)
                return r;
        if ((r = core_spawn_init(m->init_memfd, j->cg, sb->userns_base, lfd, j->pod_netns, &j->spawn, &j->err)) < 0)
                return r;
        step_mark(clk, "spawn");
        char ns[64];
        snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)j->spawn.pid);
        if ((j->netns_fd = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
                return sb_error_set(&j->err, negative_errno(), NULL, NULL, "open %s: %m", ns);
        return 0;
}

/* Worker thread: the session's cgroup and init (clone); for a new sandbox
 * its directories, source and config; then the session's /etc, veth,
 * rules and setup. On failure everything made
 * here is undone before returning (a resumed sandbox keeps its files). */
static void start_work(void *userdata) {
        start_job *j = userdata;
        sandbox *sb = j->sb;
        manager *m = j->m;
        char ifname[32];
        snprintf(ifname, sizeof(ifname), "sbx%d", j->slot);
        int r;
        bool made_dir = false;
        /* Downloads, clones and copies below stop on a cancellation. */
        core_cancel_bind(&j->cancel);
        core_fault_stall("create.working");
        step_clock clk;
        step_clock_start(&clk);
        /* With a user namespace the session's cgroup and init come first,
         * while a thread of its own makes a new sandbox's directories and
         * disk (prepare_dirs): the loop device and the ext4 mount wait on
         * the kernel, the clone makes the namespaces, and init's exec (the
         * loading of its libraries) runs meanwhile too. The thread is
         * started before this one steps into the session's cgroups for
         * the clone (a thread is born in its creator's cgroups) and joined
         * before anything below, the failure path included. Init waits for
         * its setup packet (setup_send) before it does anything, and gets
         * every host mount it needs from there as an fd (userns_overlay,
         * userns_binds, volume_binds), so none made after its clone is
         * missed. Without a user namespace init mounts the overlay by its
         * host paths in its own mount namespace, which must be cloned
         * after the disk is mounted (mount propagation is not assumed):
         * spawned below, after the directories. Every failure kills init
         * with its cgroup. */
        bool early = sb->userns_base != 0;
        dirs_job dj = {.j = j};
        pthread_t dirs_tid;
        /* The run directory first, as restore_listen makes it (0700), so
         * the thread's rootfs/ below it does not race it to a mode. */
        if (early && j->fresh && (r = core_mkdir_p(sb->run_dir, 0700)) < 0) {
                r = sb_error_set(&j->err, r, NULL, NULL, "create %s: %s", sb->run_dir, strerror(-r));
                goto fail;
        }
        bool dirs_threaded = early && j->fresh && pthread_create(&dirs_tid, NULL, dirs_thread, &dj) == 0;
        int spawned = early ? spawn_session(j, &clk) : 0;
        if (dirs_threaded) {
                pthread_join(dirs_tid, NULL);
                made_dir = dj.made;
        }
        if (spawned < 0) {
                r = spawned;
                sb_error_free(dj.err);
                goto fail;
        }
        if (j->fresh) {
                if (dirs_threaded && (r = dj.r) < 0) {
                        j->err = TAKE_PTR(dj.err);
                        goto fail;
                }
                if (!dirs_threaded && (r = prepare_dirs(j, &made_dir, &j->err)) < 0)
                        goto fail;
                step_mark(&clk, "dirs+disk");
                if ((r = fetch_source(j, &j->err)) < 0)
                        goto fail;
                if (core_cancel_requested())
                        goto fail;
                step_mark(&clk, "source");
                core_fault("create.cloned");
                if ((r = sandbox_save_config(sb, j->config_text, &j->err)) < 0)
                        goto fail;
                core_fault("create.configured");
                step_mark(&clk, "config");
        } else if ((r = sandbox_disk_attach(sb->dir, &j->err)) < 0)
                goto fail;
        else if ((r = core_mkdir_p(j->rootfs, 0755)) < 0) {
                r = sb_error_set(&j->err, r, NULL, NULL, "create %s: %s", j->rootfs, strerror(-r));
                goto fail;
        }
        /* Inodes of a full disk for the /etc writes and the overlay (work/)
         * below; rearmed once init is ready. */
        if (!j->fresh)
                core_disk_release(sb->dir);
        /* Nobody but root may reach the sandbox's files from the host once
         * the source is in (the fetch, as the sandbox user, needed group
         * 1000's x): root inside writes real root-owned, even setuid-root,
         * files into upper/ (or, with a user namespace, files owned by
         * sandbox ids that are host ids too). */
        if (chmod(sb->dir, 0700) < 0) {
                r = sb_error_set(&j->err, negative_errno(), NULL, NULL, "chmod %s: %m", sb->dir);
                goto fail;
        }
        const char *mode = sandbox_policy_mode(sb);
        struct in_addr gateway = {0};
        if (j->slot >= 0)
                gateway = core_net_host_addr(&m->pool, (unsigned)j->slot);
        /* The image's reserve is for this write (CORE_DISK_RESERVE_ID). */
        core_disk_groups groups;
        r = core_disk_reserve_enter(&groups);
        if (r < 0)
                log_warning("sandbox '%s': the disk reserve for the /etc files: %s", sb->name, strerror(-r));
        r = write_upper_etc(sb, mode, gateway, &j->err);
        core_disk_reserve_leave(&groups);
        if (r < 0)
                goto fail;
        step_mark(&clk, "etc");
        if ((r = ca_prepare(j, &j->err)) < 0)
                goto fail;
        if (!early && (r = spawn_session(j, &clk)) < 0)
                goto fail;
        /* The slot's address may have been an earlier session's, whose
         * flows the kernel still tracks (a UDP entry for 30 s or more, an
         * established TCP one for days): the chain accepts established
         * flows before any policy rule, so they would pass for this one.
         * Forgotten before this session gets a network: now, or at its
         * adoption from the warm pool (which then flushes nothing). A live
         * update from deny-all flushes on its own (session_apply_policy). */
        if (j->slot >= 0 && (!streq(mode, "deny-all") || j->pool_ca)) {
                j->flows_forgotten = true;
                /* No conntrack in this kernel: no entry to inherit. */
                _cleanup_error_ sb_error *ct_err = NULL;
                int k = core_conntrack_flush_source(core_net_sandbox_addr(&m->pool, (unsigned)j->slot), &ct_err);
                if (k < 0 && k != -ENOENT && k != -EOPNOTSUPP && k != -EPROTONOSUPPORT) {
                        r = sb_error_set(&j->err, ct_err ? ct_err->code : -EIO, NULL, NULL,
                                         "forget the flows of the address's last session: %s",
                                         ct_err ? ct_err->message : "conntrack flush failed");
                        goto fail;
                }
                if (m->pool.prefix6) {
                        struct in6_addr a6 = core_net_sandbox_addr6(&m->pool, (unsigned)j->slot);
                        sb_error_free(TAKE_PTR(ct_err));
                        k = core_conntrack_flush_source6(&a6, &ct_err);
                        if (k < 0 && k != -ENOENT && k != -EOPNOTSUPP && k != -EPROTONOSUPPORT) {
                                r = sb_error_set(&j->err, ct_err ? ct_err->code : -EIO, NULL, NULL,
                                                 "forget the IPv6 flows of the address's last session: %s",
                                                 ct_err ? ct_err->message : "conntrack flush failed");
                                goto fail;
                        }
                }
        }
        /* deny-all: a slot (its gateway is the resolver in resolv.conf and
         * the address a live update gives it) but no veth: lo only. */
        if (j->slot >= 0 && !streq(mode, "deny-all") &&
            (r = core_veth_create(&m->pool, (unsigned)j->slot, j->spawn.pid, &j->err)) < 0) {
                sb_error_prefix(&j->err, "create veth");
                goto fail;
        }
        /* The session's rules before anything inside can send a packet:
         * init configures eth0 only after setup below. A deny-all session
         * has no veth, nothing but lo to send on: its rules (for the veth
         * a live update would add) go in while init sets up, after the
         * setup packet (rules_late), still before the create answers. */
        bool rules_late = j->slot >= 0 && streq(mode, "deny-all") && !sandbox_is_pod(sb);
        if (j->slot >= 0 && !rules_late && (r = pol_nft_session_apply(ifname, sb->pol, gateway, &j->err)) < 0)
                goto fail;
        /* A pod: its table inside its namespace, before init runs a thing. */
        if (sandbox_is_pod(sb) && (r = pod_apply_policy(m, j->pod_netns, sb->pol, false, &j->err)) < 0)
                goto fail;
        step_mark(&clk, "net");
        /* A pod's DNS filter runs under every policy (deny-all answers
         * NXDOMAIN naming it), on its namespace's loopback. */
        if ((streq(mode, "custom") || sandbox_is_pod(sb)) &&
            (r = netd_start(m, sb, j->cg, j->proxy_ca, sb->pol, 0, gateway, j->pod_netns, &j->netd_pid, &j->netd_out, &j->netd_in,
                            &j->err)) < 0)
                goto fail;
        if (j->netd_pid > 0)
                core_fault("netd.started");
        step_mark(&clk, "netd");
        if ((r = setup_send(j, &j->err)) < 0)
                goto fail;
        step_mark(&clk, "init-send");
        if (rules_late && (r = pol_nft_session_apply(ifname, sb->pol, gateway, &j->err)) < 0)
                goto fail;
        if (rules_late)
                step_mark(&clk, "net-late");
        if ((r = setup_wait(j, &j->err)) < 0)
                goto fail;
        step_mark(&clk, "init-setup");
        log_debug("start '%s': %s", sb->name, clk.line);
        /* The overlay is mounted and init is ready (both took inodes of a
         * full disk); no command runs before this job returns. */
        core_disk_groups rearm_groups;
        if (core_disk_reserve_enter(&rearm_groups) < 0)
                rearm_groups.n = -1;
        (void)core_disk_rearm(sb->dir);
        core_disk_reserve_leave(&rearm_groups);
        core_fault(j->fresh ? "create.session_started" : "resume.session_started");
        /* The point of no return for request.cancel: a cancel that came
         * first undoes everything above, as a failure would. */
        int expected = START_RUNNING;
        if (__atomic_compare_exchange_n(&j->cancel, &expected, START_COMMITTED, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
                core_cancel_bind(NULL);
                core_disk_spare_refill(); /* the spare this create took, if any */
                return;
        }
fail:
        core_cancel_bind(NULL);
        if (__atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE) == CORE_CANCEL_REQUESTED) {
                /* Whatever failed on the way, the caller asked for this. */
                sb_error_free(j->err);
                j->err = NULL;
                sb_error_set(&j->err, -ECANCELED, "cancelled", NULL, "create sandbox '%s': cancelled", sb->name);
                core_fault("create.cancelled");
        }
        kill_spawned(&j->spawn);
        netd_stop(&j->netd_pid);
        if (j->netd_out >= 0)
                close(j->netd_out);
        if (j->netd_in >= 0)
                close(j->netd_in);
        j->netd_out = j->netd_in = -EBADF;
        if (j->slot >= 0) {
                pol_nft_session_remove(ifname, NULL);
                core_veth_delete((unsigned)j->slot, NULL);
        }
        bool emptied = true;
        if (j->cg) {
                core_cgroup_kill_all(j->cg);
                emptied = core_cgroup_destroy(j->cg) >= 0;
                core_cgroup_free(j->cg);
                j->cg = NULL;
        }
        /* After every process of the session is gone (teardown_work). */
        if (j->pod_netns >= 0 && emptied)
                pol_pod_remove(j->pod_netns, NULL);
        if (made_dir) {
                sandbox_disk_remove(sb->dir);
                core_rm_rf(sb->dir);
        }
        core_rm_rf(sb->run_dir);
        sb_error_default_reason(&j->err, "failed");
        core_disk_spare_refill();
}

static int on_expire(sd_event_source *s, uint64_t usec, void *userdata);

static int session_start_timers(sandbox *sb) {
        session *s = sb->sess;
        sb->expires_ms = core_now_ms() + sb->timeout_ms;
        return sd_event_add_time_relative(sb->m->event, &s->expire_src, CLOCK_MONOTONIC,
                                          sb->timeout_ms * 1000, 10 * 1000, on_expire, sb);
}

/* Loop thread: the worker finished. Requests that waited for the session
 * are run again (or answered with the error). */
static void start_done(void *userdata) {
        start_job *j = userdata;
        sandbox *sb = j->sb;
        manager *m = j->m;
        sb->starting = false;
        /* j goes below: no request.cancel may reach it any more. */
        for (size_t i = 0; i < sb->pending.n; i++)
                if (sb->pending.reqs[i]->cancel_userdata == j)
                        rpc_request_set_cancel(sb->pending.reqs[i], NULL, NULL);
        if (j->fresh && j->err && j->err->reason && streq(j->err->reason, "cancelled")) {
                log_info("create sandbox '%s' cancelled", sb->name);
                manager_release_slot(m, j->slot);
                redo_list l = redo_list_take(&sb->pending);
                /* The create's own request first (redo_list_add order);
                 * anything that queued behind it finds no sandbox. */
                for (size_t i = 0; i < l.n; i++)
                        if (i == 0)
                                rpc_reply_sb_error(l.reqs[i], j->err);
                        else
                                rpc_reply_error(l.reqs[i], RPC_APP_ERROR, "not_found", NULL,
                                                "sandbox '%s' was cancelled while being created", sb->name);
                redo_list_clear(&l);
                finish_requests(sb, &sb->stop_waiters, false);
                finish_requests(sb, &sb->delete_waiters, true);
                sandbox_unlink(m, sb);
                /* A fork's new top layer is used by nothing else now. */
                layers_collect(m, sb->layers, NULL, NULL);
                sandbox_free(sb);
                start_job_free(j);
                return;
        }
        if (j->err) {
                /* The message can carry text from the source or the sandbox. */
                char safe[TEXT_LOG_BUF];
                log_info("%s sandbox '%s' failed: %s", j->fresh ? "create" : "resume", sb->name,
                         text_for_log(j->err->message, safe, sizeof(safe)));
                manager_release_slot(m, j->slot);
                redo_list l = redo_list_take(&sb->pending);
                for (size_t i = 0; i < l.n; i++)
                        rpc_reply_sb_error(l.reqs[i], j->err);
                redo_list_clear(&l);
                if (j->fresh) {
                        finish_requests(sb, &sb->stop_waiters, false);
                        finish_requests(sb, &sb->delete_waiters, true);
                        sandbox_unlink(m, sb);
                        if (sb->pooled)
                                warmpool_forget(m, sb, j->err);
                        /* A fork's new top layer is used by nothing else
                         * now (as after a cancel, above). */
                        layers_collect(m, sb->layers, NULL, NULL);
                        sandbox_free(sb);
                } else if (sb->deleting)
                        start_teardown(sb, NULL, true);
                else
                        /* No session started: it is as stopped as it was
                         * (not "pending" for good), and the next use tries
                         * again. */
                        sb->status = "stopped";
                start_job_free(j);
                return;
        }
        session *s = calloc(1, sizeof(*s));
        s->sb = sb;
        s->pid = j->spawn.pid;
        s->pidfd = j->spawn.pidfd;
        s->agent_fd = j->spawn.agent_fd;
        s->net_slot = j->slot;
        s->has_veth = j->slot >= 0 && !streq(sandbox_policy_mode(sb), "deny-all");
        s->had_veth = s->has_veth;
        s->cg = j->cg;
        if (j->slot >= 0)
                s->gateway = core_net_host_addr(&m->pool, (unsigned)j->slot);
        s->netd_pid = j->netd_pid;
        s->netd_out = j->netd_out;
        s->netd_in = j->netd_in;
        s->proxy_ca = j->proxy_ca;
        s->sandbox_trusts_ca = j->sandbox_trusts_ca;
        s->flows_forgotten = j->flows_forgotten;
        s->netns_fd = j->netns_fd;
        j->netns_fd = -EBADF;
        s->pod_netns = j->pod_netns;
        j->pod_netns = -EBADF;
        j->netd_pid = 0;
        j->netd_out = j->netd_in = -EBADF;
        s->started_ms = core_now_ms();
        core_random_hex(s->id, 32);
        /* Its init is this daemon's own build, which keeps every window it
         * is granted: a "started" without one (root inside speaking on
         * init's socket) is held to the window all the same (command.c). */
        s->keeps_windows = true;
        s->write_acks = true; /* and answers acked writes (agent.h "write") */
        if (runtime_is_host(sb))
                memcpy(s->runtime_version, m->host_version, sizeof(s->runtime_version));
        sb->sess = s;
        cJSON *h = cJSON_CreateObject();
        char buf[40];
        cJSON_AddStringToObject(h, "id", s->id);
        cJSON_AddStringToObject(h, "status", "running");
        cJSON_AddStringToObject(h, "startedAt", core_format_time(s->started_ms, buf, sizeof(buf)));
        cJSON_AddNullToObject(h, "endedAt");
        cJSON_AddItemToArray(sb->sessions, h);
        sb->status = "running";
        int r = agent_attach(s, m->event);
        if (r >= 0)
                r = netd_attach(s);
        _cleanup_error_ sb_error *perr = NULL;
        if (r >= 0 && ports_open(s, &perr) < 0)
                log_warning("sandbox '%s': %s", sb->name, perr ? perr->message : "ports");
        /* A pooled session has no timeout of its own: it gets the
         * adopting sandbox's (warmpool.c). */
        if (r >= 0 && !sb->pooled)
                r = session_start_timers(sb);
        if (r < 0)
                log_warning_errno(r, "sandbox '%s': attach session: %m", sb->name);
        (void)restore_save_record(s);
        core_fault(j->fresh ? "create.recorded" : "resume.recorded");
        log_info("sandbox '%s' running (init pid %d, %s)", sb->name, (int)s->pid, sandbox_policy_mode(sb));
        emit_status(sb, "running");
        if (sb->persistent)
                sandbox_save_config(sb, NULL, NULL);
        start_job_free(j);
        redo_list l = redo_list_take(&sb->pending);
        for (size_t i = 0; i < l.n; i++)
                l.fns[i](l.reqs[i], m);
        redo_list_clear(&l);
        /* A delete or stop that arrived while starting. */
        if (sb->deleting || sb->stop_waiters.n)
                session_stop(sb);
        else if (sb->pooled)
                warmpool_ready(m, sb);
}

static bool start_wait_for_teardown(manager *m, start_job *j);

int session_start(sandbox *sb, start_job *j) {
        manager *m = sb->m;
        /* Never a silent downgrade: a userns sandbox whose range could not
         * be kept (pool changed, host can no longer) gets one now or fails. */
        if (!sb->userns || !sb->userns_base) {
                /* Without one: the sandbox user's account must still be usable. */
                int ur = userns_assign(m, sb, &j->err);
                if (ur < 0)
                        return ur;
        }
        /* Every session takes a slot, deny-all too: a live update can give
         * it the veth of that slot later, and its resolv.conf already names
         * the gateway. A deny-all session starts without one when the pool
         * is full (it then stays deny-all while it runs). */
        /* A pod's sandbox (pod.c) has the pod's network, not a slot. */
        if (!sandbox_is_pod(sb) && (j->slot = manager_alloc_slot(m)) < 0 && !streq(sandbox_policy_mode(sb), "deny-all"))
                return sb_error_set(&j->err, -ENOSPC, "limit_exceeded", NULL,
                                    "no free address in the network pool %s", m->cfg->network_pool);
        if (asprintf(&j->rootfs, "%s/rootfs", sb->run_dir) < 0)
                return -ENOMEM;
        /* Its volumes as they are now (each must still exist: a stopped
         * sandbox resumes only with all of them). */
        cJSON_Delete(j->volume_mounts);
        if (!(j->volume_mounts = volumes_session_mounts(m, sb, &j->err))) {
                manager_release_slot(m, j->slot);
                j->slot = -1;
                return j->err ? j->err->code : -ENOMEM;
        }
        sb->starting = true;
        if (!j->fresh)
                sb->status = "pending";
        /* A deleted session of the same name still being removed: its
         * cgroup has the name this one makes (teardown_background_done
         * submits this start once it is gone). */
        if (start_wait_for_teardown(m, j))
                return 0;
        int r = worker_submit(start_work, start_done, j);
        if (r < 0) {
                sb->starting = false;
                manager_release_slot(m, j->slot);
                return sb_error_set(&j->err, r, NULL, NULL, "start worker: %s", strerror(-r));
        }
        return 0;
}

bool start_job_cancel(rpc_request *req, void *userdata) {
        start_job *j = userdata;
        /* Others wait for this sandbox too (getOrCreate, a command): the
         * creation is theirs as well, so it goes on. */
        if (j->sb->pending.n != 1 || j->sb->pending.reqs[0] != req)
                return false;
        int expected = START_RUNNING;
        if (__atomic_compare_exchange_n(&j->cancel, &expected, CORE_CANCEL_REQUESTED, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
                return true;
        return expected == CORE_CANCEL_REQUESTED;
}

start_job *start_job_new(sandbox *sb, bool fresh) {
        start_job *j = calloc(1, sizeof(*j));
        if (!j)
                return NULL;
        j->m = sb->m;
        j->sb = sb;
        j->fresh = fresh;
        j->slot = -1;
        j->spawn.pidfd = j->spawn.agent_fd = j->netd_out = j->netd_in = j->netns_fd = j->pod_netns = -EBADF;
        return j;
}

void start_job_free(start_job *j) {
        if (!j)
                return;
        free(j->src_type);
        free(j->url);
        free(j->source_peer_groups);
        tenant_roots_free(j->source_roots);
        free(j->revision);
        free(j->username);
        if (j->password) {
                explicit_bzero(j->password, strlen(j->password));
                free(j->password);
        }
        netd_stop(&j->netd_pid);
        if (j->netd_out >= 0)
                close(j->netd_out);
        if (j->netd_in >= 0)
                close(j->netd_in);
        if (j->netns_fd >= 0)
                close(j->netns_fd);
        if (j->pod_netns >= 0)
                close(j->pod_netns);
        free(j->rootfs);
        cJSON_Delete(j->volume_mounts);
        free(j->config_text);
        sb_error_free(j->err);
        if (j->progress_conn)
                rpc_conn_unref(j->progress_conn);
        free(j);
}


/* ---- stop, timeout, teardown --------------------------------------------- */

static int on_kill_timer(sd_event_source *src, uint64_t usec, void *userdata) {
        session *s = userdata;
        log_warning("sandbox '%s': sandbox-init did not stop in time; killing it", s->sb->name);
        if (s->pidfd >= 0)
                syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
        return 0;
}

/* A stop: init SIGTERMs every process of the session, waits up to
 * grace_ms for them, SIGKILLs the rest, reaps them all and exits. A
 * paused session (sandbox.pause) is thawed first: frozen, init would
 * never read the stop, its processes would get no grace, and under the
 * v1 freezer not even the backstop's SIGKILL would end it (a frozen
 * task's signal stays pending, cgroup-v1/freezer-subsystem.rst); so are
 * its paused containers (container.pause). A snapshot or fork in flight
 * keeps its freeze (sb->capturing). */
static void stop_with_grace(sandbox *sb, uint64_t grace) {
        session *s = sb->sess;
        if (!s || s->stopping)
                return;
        s->stopping = true;
        set_status(sb, "stopping");
        if (s->paused && !sb->capturing && s->cg) {
                int r = core_cgroup_freeze(s->cg, false);
                if (r < 0)
                        log_warning_errno(r, "sandbox '%s': thaw it for its stop: %m", sb->name);
                else
                        s->paused = false;
        }
        if (!sb->capturing)
                container_thaw_all(s);
        cJSON *op = cJSON_CreateObject();
        cJSON_AddStringToObject(op, "op", "stop");
        cJSON_AddNumberToObject(op, "graceMs", (double)grace);
        if (agent_send(s, op) < 0 && s->pidfd >= 0)
                syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
        core_fault("stop.signalled");
        /* Backstop: init that ignores stop is killed (its PID namespace with it). */
        sd_event_add_time_relative(sb->m->event, &s->kill_src, CLOCK_MONOTONIC, (grace + 3000) * 1000, 0,
                                   on_kill_timer, s);
}

void session_stop(sandbox *sb) {
        stop_with_grace(sb, sb->m->cfg->stop_grace_ms);
}

void session_kill(sandbox *sb) {
        session *s = sb->sess;
        if (!s || s->fenced)
                return;
        /* A snapshot or fork holds the session frozen and copies its upper
         * (the kill would thaw it): init stops it once the copy is done. */
        if (sb->capturing || !s->cg || s->pidfd < 0 || core_cgroup_kill_fence(s->cg) < 0) {
                stop_with_grace(sb, 0);
                return;
        }
        /* Fenced: every process of the session, init and netd included,
         * has SIGKILL pending and runs no user code again; the kernel ends
         * them and the PID namespace in the background (teardown_work). */
        s->fenced = true;
        /* Frozen ones (sandbox.pause, container.pause under a v1 freezer)
         * die once thawed; init's exit, which the teardown waits for,
         * waits for every process of its namespace. */
        if (s->paused || s->ctrs)
                (void)core_cgroup_kill_now(s->cg);
        s->stopping = true;
        set_status(sb, "stopping");
        core_fault("delete.killed");
        /* Its init's exit (the namespaces torn down, milliseconds) is the
         * background teardown's to wait for, as at a goodbye (agent.c). */
        s->ended_early = true;
        session_ended(s, 0);
}

static int on_expire(sd_event_source *src, uint64_t usec, void *userdata) {
        sandbox *sb = userdata;
        if (sb->sess && sb->sess->pause_on_timeout && session_pause_at_expiry(sb) >= 0)
                return 0;
        log_info("sandbox '%s': timeout reached; stopping", sb->name);
        session_stop(sb);
        return 0;
}

typedef struct teardown_job {
        manager *m;
        sandbox *sb;      /* NULL in the background part (the sandbox is gone by then) */
        session *s;       /* may be NULL */
        bool remove_files;
        char *tombstone;  /* set by teardown_work: the renamed directory, removed after delete answers */
        char *run_tombstone; /* ... and the renamed run directory */
        /* The background part (remove_files with a session): */
        char *name;       /* the sandbox's name, for its log lines */
        char *cgroup_key; /* the session's cgroup name (sandbox or pool name) */
        start_job **deferred; /* starts of a session whose cgroup has that name, held until it is gone */
        size_t n_deferred;
        /* The volumes its sandbox mounted (a copy of sb->volumes): the
         * session's clones keep each busy until its mount namespace goes,
         * so a volume.delete of one waits (session_teardown_hold). */
        cJSON *volumes;
        struct { teardown_redo fn; rpc_request *req; } *held;
        size_t n_held;
        struct teardown_job *next; /* in m->teardowns */
} teardown_job;

/* What a delete leaves to remove after its answer: the renamed state and
 * run directories (either may be NULL). */
typedef struct tombstones {
        char *dir;
        char *run;
} tombstones;

/* Removes a deleted sandbox's tombstones (core_tombstone): its disk
 * image, then its files, then its run directory (the session's sockets,
 * CA and rootfs mount point; nothing uses them once its init and netd are
 * gone). Runs after sandbox.delete has answered; a crash midway leaves
 * the tombstones, which start-up's reconciliation finishes. */
static void tombstone_work(void *userdata) {
        const tombstones *t = userdata;
        core_fault("delete.answered");
        if (t->dir) {
                sandbox_disk_remove(t->dir);
                core_fault("delete.removing");
                int r = core_rm_rf(t->dir);
                if (r < 0)
                        log_warning_errno(r, "remove %s: %m", t->dir);
                core_fault("delete.removed");
        }
        if (t->run) {
                int r = core_rm_rf(t->run);
                if (r < 0)
                        log_warning_errno(r, "remove %s: %m", t->run);
        }
}

static void tombstone_done(void *userdata) {
        tombstones *t = userdata;
        free(t->dir);
        free(t->run);
        free(t);
}

/* Hands the tombstones' removal to a worker thread; runs it here if no
 * thread can be had. Takes ownership of both paths (either may be NULL);
 * out of memory they are left for the next start-up. */
static void tombstone_remove_background(char *dir, char *run) {
        if (!dir && !run)
                return;
        tombstones *t = calloc(1, sizeof(*t));
        if (!t) {
                free(dir);
                free(run);
                return;
        }
        t->dir = dir;
        t->run = run;
        if (worker_submit_soon(tombstone_work, tombstone_done, t) < 0) {
                tombstone_work(t);
                tombstone_done(t);
        }
}

/* How long a deleted session's teardown waits for its init's exit (the
 * kernel's teardown of its namespaces: milliseconds, longer on a loaded
 * host); past it the teardown goes on and logs what stays. */
#define INIT_GONE_WAIT_MS 10000

/* A session that ended early (ended_early): waits until its init, on its
 * way out and killed besides, is gone, with its namespaces and mounts
 * (its pidfd turns readable at its exit, pidfd_open(2)), then reaps it
 * if it is the daemon's own child (an adopted one is not). Bounded by
 * INIT_GONE_WAIT_MS. No-op for any other session. */
static void session_wait_init_gone(session *s) {
        if (!s->ended_early || s->pidfd < 0)
                return;
        struct pollfd p = {.fd = s->pidfd, .events = POLLIN};
        int r;
        do
                r = poll(&p, 1, INIT_GONE_WAIT_MS);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                log_warning("sandbox-init %d did not exit within %d ms of its session's end", (int)s->pid,
                            INIT_GONE_WAIT_MS);
        siginfo_t si;
        (void)waitid(P_PIDFD, (id_t)s->pidfd, &si, WEXITED | WNOHANG);
        close(s->pidfd);
        s->pidfd = -EBADF;
}

/* What the kernel holds for session s of sandbox `name`: its netd, its
 * nftables objects and veth, its cgroup (every process in it killed
 * first), then, once no process of it is left, its table in a pod's
 * namespace. Every step is tried; errors are logged, never stop the rest. */
static void session_kernel_teardown(session *s, const char *name) {
        /* Nothing below goes before its init is gone. */
        session_wait_init_gone(s);
        netd_stop(&s->netd_pid);
        if (s->net_slot >= 0) {
                char ifname[32];
                snprintf(ifname, sizeof(ifname), "sbx%d", s->net_slot);
                _cleanup_error_ sb_error *err = NULL;
                if (pol_nft_session_remove(ifname, &err) < 0)
                        log_warning("sandbox '%s': remove its nftables objects: %s", name,
                                    err ? err->message : "failed");
                core_veth_delete((unsigned)s->net_slot, NULL);
        }
        bool emptied = true;
        if (s->cg) {
                core_cgroup_kill_all(s->cg);
                int r = core_cgroup_destroy(s->cg);
                if (r < 0) {
                        emptied = false;
                        log_warning_errno(r, "sandbox '%s': remove cgroup: %m", name);
                }
        }
        /* A pod's namespace outlives the sandbox (CNI removes it): nothing
         * of ours stays in it. Last, once no process of the sandbox is left
         * (its cgroup is gone): without the table the namespace is open, so
         * it stays while one might still send (fail closed). */
        if (s->pod_netns >= 0 && emptied) {
                _cleanup_error_ sb_error *err = NULL;
                if (pol_pod_remove(s->pod_netns, &err) < 0)
                        log_warning("sandbox '%s': remove its table in the pod's network namespace: %s", name,
                                    err ? err->message : "failed");
        } else if (s->pod_netns >= 0)
                log_warning("sandbox '%s': its table stays in the pod's network namespace while its "
                            "cgroup is not empty", name);
}

/* Worker thread. A stop: everything the kernel holds for the session
 * (session_kernel_teardown), then the run directory. A delete (or the end
 * of a sandbox that is not persistent): the session fenced, then its
 * files renamed aside; the delete answers then, and the rest of the
 * session goes in the background (teardown_background_work).
 *
 * Fenced: its PID namespace holds nothing but its init on its way out
 * (init reaps every process of it before it closes its socket, agent.c;
 * once init has exited the kernel has killed all of them,
 * pid_namespaces(7)), and one SIGKILL pass over its cgroup ends whatever
 * else is there (its netd, init itself); nothing of it runs or sends any
 * more. Renamed aside: the rename of its
 * state directory to a tombstone is the record that its removal is under
 * way (durable before the answer for a persistent sandbox): a restart at
 * any later point never brings it back, removes the tombstone, sweeps its
 * cgroup (reconcile: no record keeps it), re-creates the nftables table
 * without its objects, and its veth went with its network namespace. */
static void teardown_work(void *userdata) {
        teardown_job *t = userdata;
        if (t->s && t->remove_files) {
                /* Signalled, not waited for: its init may still be exiting
                 * (ended_early); the background waits (core_cgroup_kill_all
                 * before the cgroup goes). */
                if (t->s->cg && !t->s->fenced)
                        core_cgroup_kill_now(t->s->cg);
                /* After the kill: no container process writes its upper.
                 * Containers' roots are mounted in init's namespace: their
                 * files go once it is gone (a rare wait: pods only). */
                if (t->s->ctrs)
                        session_wait_init_gone(t->s);
                container_session_end(t->s);
        } else if (t->s) {
                session_kernel_teardown(t->s, t->sb->name);
                container_session_end(t->s);
        }
        core_fault(t->remove_files ? "delete.torn_down" : "stop.torn_down");
        if (t->remove_files) {
                /* Durable first: once renamed, a crash cannot bring back a
                 * half-removed sandbox (start-up finishes the tombstone).
                 * The parent's fsync (tens of ms on a busy disk, before
                 * delete answers) only for a persistent sandbox: a
                 * non-persistent one that a machine crash brings back under
                 * its name is removed by start-up's reconcile all the
                 * same (its session died with the machine). */
                _cleanup_free_ char *tomb = NULL;
                _cleanup_free_ char *parent = strdup(t->sb->dir);
                char *slash = parent ? strrchr(parent, '/') : NULL;
                int r = slash ? (*slash = '\0', core_tombstone_ex(parent, slash + 1, t->sb->persistent, &tomb))
                              : -ENOMEM;
                if (r < 0 && r != -ENOENT)
                        log_warning_errno(r, "sandbox '%s': rename %s aside for removal: %m", t->sb->name, t->sb->dir);
                core_fault("delete.tombstoned");
                if (tomb) {
                        /* Renamed aside: the name is free, and the files
                         * go after delete has answered (tombstone_work). */
                        t->tombstone = TAKE_PTR(tomb);
                } else {
                        const char *dir = t->sb->dir;
                        sandbox_disk_remove(dir);
                        core_fault("delete.removing");
                        r = core_rm_rf(dir);
                        if (r < 0)
                                log_warning_errno(r, "sandbox '%s': remove %s: %m", t->sb->name, dir);
                        core_fault("delete.removed");
                }
                /* The run directory too, renamed aside: a new sandbox of
                 * the name makes its own at once, and the files go after
                 * the answer (tombstone_work). */
                _cleanup_free_ char *rparent = strdup(t->sb->run_dir);
                char *rslash = rparent ? strrchr(rparent, '/') : NULL;
                if (rslash && (*rslash = '\0', core_tombstone_ex(rparent, rslash + 1, false, &t->run_tombstone)) >= 0)
                        return;
        }
        core_rm_rf(t->sb->run_dir);
}

static void finish_requests(sandbox *sb, req_list *l, bool empty_result) {
        req_list taken = req_list_take(l);
        for (size_t i = 0; i < taken.n; i++)
                rpc_reply(taken.items[i], empty_result ? cJSON_CreateObject() : sandbox_to_json(sb));
        free(taken.items);
}

/* A lifecycle event on the stream (kind "sandbox"). */
static void emit_status(sandbox *sb, const char *status) {
        /* A pooled session is no sandbox of anyone's (warmpool.c). */
        if (sb->pooled)
                return;
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "status", status);
        /* The owner given, not looked up: "deleted" comes once the sandbox
         * has left the registry (tenant.h). */
        events_emit_owned(sb->m, EVENT_SANDBOX, sb->name, sb->owner, f);
}

typedef struct delete_finish {
        sandbox *sb;
        char *tombstone; /* may be NULL */
        char *run_tombstone; /* may be NULL */
} delete_finish;

/* Answers the deletes, then removes the tombstone in the background. */
static void finish_delete(void *userdata) {
        delete_finish *f = userdata;
        sandbox *sb = f->sb;
        emit_status(sb, "deleted");
        finish_requests(sb, &sb->delete_waiters, true);
        sandbox_free(sb);
        tombstone_remove_background(f->tombstone, f->run_tombstone);
        free(f);
}

/* A network slot goes back to the pool only once the conntrack entries of
 * its last session's flows are gone: the next session on the slot has the
 * same addresses, so a flow left over (to its gateway's DNS filter, say)
 * would be taken for one of the new session's and skip what its own first
 * packet would get (allow-all's DNS forwarding is set up only for a new
 * flow). A policy update needs no flush (flow generations); a session's
 * end does, once, on a worker thread after delete has answered. */
typedef struct slot_flush {
        manager *m;
        int slot;
} slot_flush;

static void slot_flush_work(void *userdata) {
        slot_flush *f = userdata;
        _cleanup_error_ sb_error *err = NULL, *err6 = NULL;
        if (core_conntrack_flush_source(core_net_sandbox_addr(&f->m->pool, (unsigned)f->slot), &err) < 0)
                log_warning("network slot %d: %s", f->slot, err ? err->message : "flush conntrack entries failed");
        if (f->m->pool.prefix6) {
                struct in6_addr a6 = core_net_sandbox_addr6(&f->m->pool, (unsigned)f->slot);
                if (core_conntrack_flush_source6(&a6, &err6) < 0)
                        log_warning("network slot %d: %s", f->slot,
                                    err6 ? err6->message : "flush IPv6 conntrack entries failed");
        }
}

static void slot_flush_done(void *userdata) {
        slot_flush *f = userdata;
        manager_release_slot(f->m, f->slot);
        free(f);
}

static void release_slot_after_flush(manager *m, int slot) {
        slot_flush *f;
        if (slot < 0)
                return;
        if (!(f = calloc(1, sizeof(*f)))) {
                slot_flush tmp = { m, slot };
                slot_flush_work(&tmp);
                manager_release_slot(m, slot);
                return;
        }
        *f = (slot_flush) { m, slot };
        if (worker_submit(slot_flush_work, slot_flush_done, f) < 0) {
                slot_flush_work(f);
                slot_flush_done(f);
        }
}

/* Frees a session's struct once everything it held in the kernel is gone:
 * its network slot (after its flows, release_slot_after_flush), its cgroup
 * handle, its recorded pins. */
static void session_release(manager *m, session *s) {
        /* A session that never had a veth left no flow on the host: the
         * flush (a walk of the host's whole conntrack table, milliseconds
         * of CPU) is for those that did. */
        if (s->had_veth)
                release_slot_after_flush(m, s->net_slot);
        else if (s->net_slot >= 0)
                manager_release_slot(m, s->net_slot);
        core_cgroup_free(s->cg);
        container_forget(s);
        pins_free(&s->pins);
        redo_list_clear(&s->logs_waiting); /* answered by agent_detach */
        if (s->peak_fd_set)
                close(s->peak_fd);
        if (s->pod_netns >= 0)
                close(s->pod_netns);
        free(s);
}

/* Frees session s once the kernel no longer holds it. */
static void session_gone(manager *m, session *s) {
        bool old_runtime = s->runtime_version[0] && !streq(s->runtime_version, m->host_version);
        session_release(m, s);
        /* The last session on an older host runtime version frees it. */
        if (old_runtime)
                runtime_host_collect(m);
}

/* Worker thread: the rest of a deleted sandbox's session, after the
 * delete answered (teardown_work fenced it). A crash here is finished by
 * the next start (teardown_work). */
static void teardown_background_work(void *userdata) {
        teardown_job *t = userdata;
        core_fault("delete.fenced");
        session_kernel_teardown(t->s, t->name);
}

static void teardown_job_free(teardown_job *t) {
        cJSON_Delete(t->volumes);
        free(t->held);
        free(t->tombstone);
        free(t->run_tombstone);
        free(t->name);
        free(t->cgroup_key);
        free(t->deferred);
        free(t);
}

static void start_submit(start_job *j) {
        if (worker_submit(start_work, start_done, j) < 0) {
                start_work(j);
                start_done(j);
        }
}

/* Loop thread: the background part is done; the session is freed and the
 * starts that waited for its cgroup's name go on. */
static void teardown_background_done(void *userdata) {
        teardown_job *t = userdata;
        manager *m = t->m;
        for (teardown_job **pp = &m->teardowns; *pp; pp = &(*pp)->next)
                if (*pp == t) {
                        *pp = t->next;
                        break;
                }
        session_gone(m, t->s);
        for (size_t i = 0; i < t->n_deferred; i++) {
                start_job *j = t->deferred[i];
                if (m->stopping) {
                        /* The daemon is exiting (worker_shutdown runs this). */
                        sb_error_set(&j->err, -ECANCELED, NULL, NULL, "start sandbox '%s': sandboxd is stopping",
                                     j->sb->name);
                        start_done(j);
                } else
                        start_submit(j);
        }
        for (size_t i = 0; i < t->n_held; i++) {
                if (m->stopping)
                        rpc_reply_error(t->held[i].req, RPC_APP_ERROR, "unavailable", NULL,
                                        "sandboxd is stopping; retry once it is back");
                else
                        t->held[i].fn(t->held[i].req, m);
        }
        teardown_job_free(t);
}

bool session_teardown_hold(manager *m, const char *name, teardown_redo fn, rpc_request *req) {
        for (teardown_job *t = m->teardowns; t; t = t->next) {
                const cJSON *it;
                bool mounts = false;
                cJSON_ArrayForEach(it, t->volumes) {
                        const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "name"));
                        mounts |= n && streq(n, name);
                }
                if (!mounts)
                        continue;
                void *h = realloc(t->held, (t->n_held + 1) * sizeof(*t->held));
                if (!h)
                        return false; /* the caller goes on, and finds the volume busy */
                t->held = h;
                t->held[t->n_held].fn = fn;
                t->held[t->n_held].req = req;
                t->n_held++;
                return true;
        }
        return false;
}

/* Hands the kernel's part of session s (of sandbox sb, being deleted) to
 * the background; runs it here if no thread or memory can be had. */
static void teardown_background(manager *m, sandbox *sb, session *s) {
        teardown_job *b = calloc(1, sizeof(*b));
        if (b) {
                b->m = m;
                b->s = s;
                b->name = strdup(sb->name);
                b->cgroup_key = strdup(s->cgroup_name[0] ? s->cgroup_name : sb->name);
                b->volumes = sb->volumes ? cJSON_Duplicate(sb->volumes, 1) : NULL;
        }
        if (!b || !b->name || !b->cgroup_key || (sb->volumes && !b->volumes)) {
                if (b)
                        teardown_job_free(b);
                session_kernel_teardown(s, sb->name);
                session_gone(m, s);
                return;
        }
        b->next = m->teardowns;
        m->teardowns = b;
        /* Started after the delete's answer is written (worker.h). */
        if (worker_submit_soon(teardown_background_work, teardown_background_done, b) < 0) {
                teardown_background_work(b);
                teardown_background_done(b);
        }
}

/* True (and j held) when a session start must wait: the cgroup it makes
 * (the sandbox's name) is still a deleted session's, being removed in the
 * background. */
static bool start_wait_for_teardown(manager *m, start_job *j) {
        for (teardown_job *t = m->teardowns; t; t = t->next) {
                if (!streq(t->cgroup_key, j->sb->name))
                        continue;
                start_job **d = realloc(t->deferred, (t->n_deferred + 1) * sizeof(*d));
                if (!d)
                        return false; /* the start goes on, and fails on the cgroup if it is still there */
                t->deferred = d;
                d[t->n_deferred++] = j;
                return true;
        }
        return false;
}

static void teardown_done(void *userdata) {
        teardown_job *t = userdata;
        sandbox *sb = t->sb;
        manager *m = t->m;
        if (t->s && t->remove_files)
                teardown_background(m, sb, t->s);
        else if (t->s)
                session_gone(m, t->s);
        finish_requests(sb, &sb->stop_waiters, false);
        if (!t->remove_files && sb->pending.n && !sb->deleting) {
                /* Requests that arrived while it stopped want it running. */
                start_job *j = start_job_new(sb, false);
                if (j) {
                        if (session_start(sb, j) < 0) {
                                redo_list l = redo_list_take(&sb->pending);
                                for (size_t i = 0; i < l.n; i++)
                                        rpc_reply_sb_error(l.reqs[i], j->err);
                                redo_list_clear(&l);
                                start_job_free(j);
                        }
                }
        }
        if (t->remove_files) {
                log_info("sandbox '%s' deleted", sb->name);
                commands_forget_sandbox(m, sb);
                ready_sandbox_gone(sb);
                sandbox_unlink(m, sb);
                /* Its layers may now be unused (it left the registry); delete
                 * answers once they are gone too. */
                delete_finish *f = calloc(1, sizeof(*f));
                if (!f) {
                        /* Out of memory: the tombstone is left for the
                         * next start-up's reconciliation. */
                        log_error("sandbox '%s': out of memory; %s is removed at the next start", sb->name,
                                  t->tombstone ? t->tombstone : sb->dir);
                        free(TAKE_PTR(t->tombstone));
                        free(TAKE_PTR(t->run_tombstone));
                        emit_status(sb, "deleted");
                        finish_requests(sb, &sb->delete_waiters, true);
                        sandbox_free(sb);
                } else {
                        f->sb = sb;
                        f->tombstone = TAKE_PTR(t->tombstone);
                        f->run_tombstone = TAKE_PTR(t->run_tombstone);
                        layers_collect(m, sb->layers, finish_delete, f);
                }
        }
        free(t->tombstone);
        free(t->run_tombstone);
        free(t);
}

void start_teardown(sandbox *sb, session *s, bool remove_files) {
        if (sb->capturing) {
                /* A snapshot or fork is copying its upper layer: the files
                 * (and the frozen cgroup) go when the copy is done. */
                sb->deferred_teardown = true;
                sb->deferred_teardown_session = s;
                sb->deferred_remove = sb->deferred_remove || remove_files;
                return;
        }
        teardown_job *t = calloc(1, sizeof(*t));
        t->m = sb->m;
        t->sb = sb;
        t->s = s;
        t->remove_files = remove_files;
        /* A session killed whole (session_kill) of a sandbox that is not
         * persistent: what stands before delete's answer is two renames
         * (no fsync, no wait for init), done here rather than on a thread
         * whose start and hand-back would cost more. */
        bool inline_work = remove_files && s && s->fenced && !s->ctrs && !sb->persistent;
        if (inline_work || worker_submit(teardown_work, teardown_done, t) < 0) {
                teardown_work(t);
                teardown_done(t);
        }
}

/* A session whose init is gone (or being killed): its timers, agent
 * channel, netd, port listeners and commands let go, and its sandbox no
 * longer points at it. What the kernel still holds is teardown's. */
static void session_detach(session *s) {
        s->kill_src = sd_event_source_disable_unref(s->kill_src);
        s->expire_src = sd_event_source_disable_unref(s->expire_src);
        agent_detach(s);
        netd_detach(s);
        ports_close(s);
        commands_session_gone(s);
        s->sb->sess = NULL;
}

void session_ended(session *s, int status) {
        sandbox *sb = s->sb;
        bool expected = s->stopping;
        log_info("sandbox '%s': session ended (init status %d%s)", sb->name, status,
                 expected ? "" : ", unexpected");
        session_detach(s);
        if (sb->pooled)
                warmpool_forget(sb->m, sb, NULL);
        sb->status = expected ? "stopped" : "failed";
        session_history_update(sb, sb->status, core_now_ms());
        emit_status(sb, sb->status);
        /* A non-persistent sandbox lives exactly as long as its session. */
        bool remove = sb->deleting || !sb->persistent;
        if (remove)
                sb->deleting = true;
        else
                sandbox_save_config(sb, NULL, NULL);
        start_teardown(sb, s, remove);
}

/* ---- live restore ----------------------------------------------------------- */

static uint64_t rec_u64(const cJSON *rec, const char *key) {
        const cJSON *v = cJSON_GetObjectItem(rec, key);
        return cJSON_IsNumber(v) && v->valuedouble > 0 ? (uint64_t)v->valuedouble : 0;
}

/* The kernel objects of the recorded session: its init (pidfd, checked by
 * start time), its cgroup (init must be in it), a connection to init and
 * its network namespace. */
static int adopt_open(sandbox *sb, const cJSON *rec, session *s, sb_error **ret_err) {
        s->pid = (pid_t)rec_u64(rec, "pid");
        s->pidfd = restore_pidfd(s->pid, rec_u64(rec, "startTime"));
        if (s->pidfd < 0)
                return sb_error_set(ret_err, -ESRCH, NULL, NULL, "its sandbox-init (pid %d) is gone", (int)s->pid);
        /* A session taken from the warm pool keeps the cgroup (and systemd
         * scope) of the key it was made under: neither can be renamed. */
        const char *cgname = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "cgroup"));
        if (cgname && *cgname && strlen(cgname) < sizeof(s->cgroup_name) && !strchr(cgname, '/'))
                snprintf(s->cgroup_name, sizeof(s->cgroup_name), "%s", cgname);
        metrics_usage_base_from_json(s, rec);
        int r = core_cgroup_open(s->cgroup_name[0] ? s->cgroup_name : sb->name, s->pid, &s->cg);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "its sandbox-init is not in its cgroup: %s", strerror(-r));
        /* A daemon killed between freeze and thaw (a fork or snapshot of
         * the running sandbox) left it frozen: nothing else would ever
         * thaw it, and its commands, stop and delete would hang. */
        if (core_cgroup_frozen(s->cg) > 0) {
                r = core_cgroup_freeze(s->cg, false);
                if (r < 0 && r != -ENOTSUP)
                        return sb_error_set(ret_err, r, NULL, NULL, "thaw its cgroup (left frozen by the last "
                                            "sandboxd): %s", strerror(-r));
                log_warning("sandbox '%s': its cgroup was frozen (paused with sandbox.pause, or the last "
                            "sandboxd stopped during a fork or snapshot); thawed it: a restart resumes a paused sandbox", sb->name);
        }
        /* The config is the record of the limits (as start_work sets them): a
         * daemon killed between resizing a running session and writing its
         * config (sandbox.update) left the cgroup with limits nobody shows. */
        core_cgroup_limits lim = {.pids_max = sb->m->cfg->pids_max,
                                  .memory_max = (uint64_t)sb->vcpus * 2048ULL * 1024 * 1024,
                                  .cpu_quota_pct = sb->vcpus * 100};
        _cleanup_error_ sb_error *lerr = NULL;
        if (core_cgroup_update(s->cg, &lim, &lim, &lerr) < 0)
                log_warning("sandbox '%s': cannot set its recorded limits (%u vCPUs): %s", sb->name, sb->vcpus,
                            lerr ? lerr->message : "failed");
        if ((s->agent_fd = restore_connect(sb->run_dir)) < 0)
                return sb_error_set(ret_err, s->agent_fd, NULL, NULL, "connect to its sandbox-init: %s",
                                    strerror(-s->agent_fd));
        char ns[64];
        snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)s->pid);
        if ((s->netns_fd = open(ns, O_RDONLY | O_CLOEXEC)) < 0)
                return sb_error_set(ret_err, negative_errno(), NULL, NULL, "open %s: %m", ns);
        return 0;
}

/* The network side: the slot, the session's nftables chain (the host table
 * was replaced at start, taking session chains with it; until this point
 * the veth met the table's default deny) and, for a custom policy, a new
 * netd. */
/* adopt_network() of a pod's sandbox: its namespace opened again by the
 * recorded path (the same inode, and init's own), its table kept if the
 * stored policy built it (its pins with it), else rebuilt, and its netd. */
static int adopt_pod(sandbox *sb, session *s, sb_error **ret_err) {
        struct stat a, b;
        int r = pod_netns_reopen(sb, &s->pod_netns, ret_err);
        if (r < 0)
                return r;
        if (fstat(s->pod_netns, &a) < 0 || fstat(s->netns_fd, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)
                return sb_error_set(ret_err, -ESTALE, NULL, "network.netns",
                                    "its sandbox-init is not in the pod's network namespace %s", sb->netns_path);
        if ((r = pod_apply_policy(sb->m, s->pod_netns, sb->pol, true, ret_err)) < 0)
                return r;
        return netd_start(sb->m, sb, s->cg, s->proxy_ca, sb->pol, s->policy_generation, s->gateway, s->pod_netns,
                          &s->netd_pid, &s->netd_out, &s->netd_in, ret_err);
}

static int adopt_network(sandbox *sb, const cJSON *rec, session *s, sb_error **ret_err) {
        manager *m = sb->m;
        if (sandbox_is_pod(sb))
                return adopt_pod(sb, s, ret_err);
        const cJSON *slot = cJSON_GetObjectItem(rec, "slot");
        s->net_slot = cJSON_IsNumber(slot) ? slot->valueint : -1;
        if (s->net_slot < 0)
                return 0;
        if ((unsigned)s->net_slot >= m->n_slots || m->slots[s->net_slot]) {
                int bad = s->net_slot;
                s->net_slot = -1;
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "its network slot %d is not available", bad);
        }
        m->slots[s->net_slot] = true;
        s->gateway = core_net_host_addr(&m->pool, (unsigned)s->net_slot);
        char ifname[32];
        snprintf(ifname, sizeof(ifname), "sbx%d", s->net_slot);
        /* The stored policy is the truth (sandbox.update writes it before
         * it applies it): a daemon killed in the middle of a change from
         * deny-all may have left no veth or one without eth0 configured, so
         * a networked mode gets its veth made and eth0 (re)configured here.
         * A deny-all session keeps a veth it has, fenced (goto deny). */
        bool want_veth = sb->pol->mode != POL_MODE_DENY_ALL;
        s->has_veth = if_nametoindex(ifname) != 0;
        int r;
        if (want_veth && !s->has_veth) {
                if ((r = core_veth_create(&m->pool, (unsigned)s->net_slot, s->pid, ret_err)) < 0)
                        return sb_error_prefix(ret_err, "give it its network interface");
                s->has_veth = true;
        }
        if ((r = pol_nft_session_apply(ifname, sb->pol, s->gateway, ret_err)) < 0)
                return r;
        /* deny-all with a veth (entered by a live update) stays fenced by
         * its `goto deny` element; flows of the old mode are cut. */
        if (!want_veth && s->has_veth) {
                (void)core_conntrack_flush_source(core_net_sandbox_addr(&m->pool, (unsigned)s->net_slot), NULL);
                if (m->pool.prefix6) {
                        struct in6_addr a6 = core_net_sandbox_addr6(&m->pool, (unsigned)s->net_slot);
                        (void)core_conntrack_flush_source6(&a6, NULL);
                }
                (void)core_net_fence_gateway(s->netns_fd, &m->pool, (unsigned)s->net_slot, NULL);
        }
        if (want_veth && (r = core_net_configure_eth0(s->netns_fd, &m->pool, (unsigned)s->net_slot, ret_err)) < 0)
                return sb_error_prefix(ret_err, "configure its eth0");
        if (sb->pol->mode == POL_MODE_CUSTOM) {
                r = netd_start(m, sb, s->cg, s->proxy_ca, sb->pol, s->policy_generation, s->gateway, s->pod_netns, &s->netd_pid,
                               &s->netd_out, &s->netd_in,
                               ret_err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Undoes a failed adoption; the caller's sweep kills the session. */
static void adopt_undo(session *s) {
        netd_detach(s);
        netd_stop(&s->netd_pid);
        s->agent_src = sd_event_source_disable_unref(s->agent_src);
        s->pidfd_src = sd_event_source_disable_unref(s->pidfd_src);
        s->expire_src = sd_event_source_disable_unref(s->expire_src);
        ports_close(s);
        agent_detach(s);
        session_release(s->sb->m, s);
}

/* The session's line in the sandbox's history, added when the stored
 * config has none (a non-persistent sandbox saves it only at creation). */
static void adopt_history(sandbox *sb, session *s) {
        cJSON *h;
        cJSON_ArrayForEach(h, sb->sessions) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(h, "id"));
                if (id && streq(id, s->id)) {
                        cJSON_ReplaceItemInObject(h, "status", cJSON_CreateString("running"));
                        cJSON_ReplaceItemInObject(h, "endedAt", cJSON_CreateNull());
                        return;
                }
        }
        char buf[40];
        h = cJSON_CreateObject();
        cJSON_AddStringToObject(h, "id", s->id);
        cJSON_AddStringToObject(h, "status", "running");
        cJSON_AddStringToObject(h, "startedAt", core_format_time(s->started_ms, buf, sizeof(buf)));
        cJSON_AddNullToObject(h, "endedAt");
        cJSON_AddItemToArray(sb->sessions, h);
}

int session_adopt(sandbox *sb, sb_error **ret_err) {
        manager *m = sb->m;
        cJSON *rec = restore_load_record(sb->run_dir);
        if (!rec)
                return sb_error_set(ret_err, -ENOENT, NULL, NULL, "no session record");
        /* The old daemon's netd, if it outlived it (SIGKILL of the daemon):
         * it holds the DNS port the new one needs, and answers with a
         * policy nobody updates any more. */
        restore_kill_recorded((pid_t)rec_u64(rec, "netdPid"), rec_u64(rec, "netdStartTime"), "sandbox-netd");
        session *s = calloc(1, sizeof(*s));
        if (!s) {
                cJSON_Delete(rec);
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        s->sb = sb;
        s->adopted = true;
        /* Whether it ever had a veth is not recorded: assumed. */
        s->had_veth = true;
        s->pidfd = s->agent_fd = s->netd_out = s->netd_in = s->netns_fd = s->pod_netns = -EBADF;
        s->net_slot = -1;
        s->proxy_ca = cJSON_IsTrue(cJSON_GetObjectItem(rec, "proxyCa"));
        s->sandbox_trusts_ca = cJSON_IsTrue(cJSON_GetObjectItem(rec, "sandboxTrustsCa"));
        /* Recorded by the daemon that started it; a record from before
         * says nothing, and its init (maybe older) is judged by its answers. */
        s->keeps_windows = cJSON_IsTrue(cJSON_GetObjectItem(rec, "keepsWindows"));
        s->started_ms = rec_u64(rec, "startedMs");
        s->netd_restarts = (unsigned)rec_u64(rec, "netdRestarts");
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "id"));
        snprintf(s->id, sizeof(s->id), "%s", id && strlen(id) == 32 ? id : "");
        if (!*s->id)
                core_random_hex(s->id, 32);
        /* The host runtime version its overlay stands on; a record of the
         * layout before versions names none: the tree moved to "legacy". */
        const char *rv = cJSON_GetStringValue(cJSON_GetObjectItem(rec, "runtimeVersion"));
        if (runtime_is_host(sb))
                snprintf(s->runtime_version, sizeof(s->runtime_version), "%s",
                         rv && rv[0] && strlen(rv) < sizeof(s->runtime_version) ? rv : "legacy");
        uint64_t expires = rec_u64(rec, "expiresMs");
        /* A session that pauses at its expiry (sandbox.setTimeout) and was
         * paused by it: thawed by the restart, its past expiry pauses it
         * again at once. */
        s->pause_on_timeout = cJSON_IsTrue(cJSON_GetObjectItem(rec, "pauseOnTimeout"));
        int r = adopt_open(sb, rec, s, ret_err);
        if (r >= 0)
                r = adopt_network(sb, rec, s, ret_err);
        cJSON_Delete(rec);
        if (r >= 0 && (r = agent_attach(s, m->event)) >= 0)
                r = netd_attach(s);
        if (r >= 0) {
                cJSON *op = cJSON_CreateObject();
                cJSON_AddStringToObject(op, "op", "list");
                r = agent_send(s, op);
        }
        uint64_t now = core_now_ms();
        sb->expires_ms = expires ? expires : now + sb->timeout_ms;
        if (r >= 0)
                r = sd_event_add_time_relative(m->event, &s->expire_src, CLOCK_MONOTONIC,
                                               (sb->expires_ms > now ? sb->expires_ms - now : 0) * 1000, 10 * 1000,
                                               on_expire, sb);
        if (r < 0) {
                sb_error_default_reason(ret_err, "failed");
                if (ret_err && !*ret_err)
                        sb_error_set(ret_err, r, NULL, NULL, "attach: %s", strerror(-r));
                adopt_undo(s);
                return r;
        }
        sb->sess = s;
        sb->status = "running";
        container_adopt(s);
        container_reconcile(s);
        /* Its commands are known once init answers the "list" sent above. */
        commands_listing_begin(s);
        adopt_history(sb, s);
        _cleanup_error_ sb_error *perr = NULL;
        if (ports_open(s, &perr) < 0)
                log_warning("sandbox '%s': %s", sb->name, perr ? perr->message : "ports");
        (void)restore_save_record(s);
        if (sb->persistent)
                sandbox_save_config(sb, NULL, NULL);
        log_info("sandbox '%s' re-adopted (init pid %d, %s)", sb->name, (int)s->pid, sandbox_policy_mode(sb));
        return 0;
}

/* Daemon exit with the session left running for the next daemon (live
 * restore): init loses its connection and waits on its listening socket;
 * cgroup, veth and nftables chain stay. netd, our child, is stopped (name
 * resolution fails closed until the next daemon starts a new one). */
static void session_leave(session *s) {
        sandbox *sb = s->sb;
        s->kill_src = sd_event_source_disable_unref(s->kill_src);
        s->expire_src = sd_event_source_disable_unref(s->expire_src);
        netd_detach(s);
        netd_stop(&s->netd_pid);
        (void)restore_save_record(s);
        agent_detach(s);
        ports_close(s);
        commands_session_left(s);
        sb->sess = NULL;
        sb->m->kept_sessions++;
        log_info("sandbox '%s': left running for the next sandboxd (init pid %d)", sb->name, (int)s->pid);
        session_release(sb->m, s);
}

void sandbox_stop_all(manager *m) {
        warmpool_stop_all(m);
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next) {
                session *s = sb->sess;
                if (!s)
                        continue;
                if (!s->stopping && !sb->deleting && !s->agent_closed && !sb->capturing) {
                        session_leave(s);
                        continue;
                }
                /* Daemon exit: the PID namespace dies with its init. */
                if (s->pidfd >= 0) {
                        syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
                        siginfo_t si;
                        waitid(P_PIDFD, (id_t)s->pidfd, &si, WEXITED);
                }
                session_detach(s);
                teardown_job t = {.m = m, .sb = sb, .s = s, .remove_files = !sb->persistent};
                teardown_work(&t);
                if (t.remove_files)
                        session_kernel_teardown(s, sb->name);
                /* The state tombstone is the next start's; the run
                 * directory goes now, as it did before it was renamed. */
                if (t.run_tombstone)
                        core_rm_rf(t.run_tombstone);
                free(t.tombstone);
                free(t.run_tombstone);
                session_release(m, s);
        }
}


/* ---- warm pool hooks (warmpool.c) ------------------------------------------ */

/* The result of a vfork child of the pooled-session steps below: 0 when
 * it exited 0, -EIO when it failed, a negative errno when it could not be
 * waited for. */
static int vfork_child_result(pid_t c) {
        int st = 0;
        if (waitpid(c, &st, 0) < 0)
                return negative_errno();
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/* The sandbox's name as its hostname in the UTS namespace of init (a
 * vfork child joins it through init's pidfd, so the daemon's own
 * namespaces never change). */
static int set_uts_hostname(session *s, const char *name) {
        pid_t c = vfork();
        if (c < 0)
                return negative_errno();
        if (c == 0) {
                /* Child, sharing our memory until _exit: syscalls only. */
                if (setns(s->pidfd, CLONE_NEWUTS) < 0 || sethostname(name, strlen(name)) < 0)
                        _exit(1);
                _exit(0);
        }
        return vfork_child_result(c);
}

/* Overwrites the file `name` under the upper's etc/ in place (the same
 * inode: the overlay mounted on it may hold it already). Nothing has run
 * in a pooled session, but the resolution still follows no symlink. */
static int rewrite_etc_in_place(int upper, const char *name, const char *text) {
        char path[64];
        snprintf(path, sizeof(path), "etc/%s", name);
        /* Written over, then cut to its length: not opened with O_TRUNC,
         * whose truncation to 0 makes ext4 (auto_da_alloc, ext4(5)) start
         * the file's writeback at its close, a block write on the path of
         * the create. */
        _cleanup_close_ int fd = core_open_beneath(upper, path, O_WRONLY | O_NOFOLLOW, 0);
        if (fd < 0)
                return fd;
        size_t len = strlen(text);
        int r = core_write_all(fd, text, len);
        if (r < 0)
                return r;
        return ftruncate(fd, (off_t)len) < 0 ? negative_errno() : 0;
}

/* Removes the session CA's bundle bind (SANDBOX_CA_BUNDLE) from the mount
 * namespace of init, resolved from init's root (/proc/<pid>/root, opened
 * before joining: setns(2) resets the root), by a vfork child, so the
 * daemon's own namespaces never change. The host's bundle under it (the
 * /etc/ssl bind) is then what the sandbox reads, as in a cold deny-all
 * sandbox. Nothing has run in a pooled session but init, and the path is
 * unmounted without following a symlink (UMOUNT_NOFOLLOW). */
static int unbind_ca_bundle(session *s) {
        char root[64];
        snprintf(root, sizeof(root), "/proc/%d/root", (int)s->pid);
        _cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return negative_errno();
        pid_t c = vfork();
        if (c < 0)
                return negative_errno();
        if (c == 0) {
                /* Child, sharing our memory until _exit: syscalls only. */
                if (setns(s->pidfd, CLONE_NEWNS) < 0 || fchdir(rfd) < 0 || chroot(".") < 0 ||
                    umount2(SANDBOX_CA_BUNDLE, UMOUNT_NOFOLLOW) < 0)
                        _exit(1);
                _exit(0);
        }
        return vfork_child_result(c);
}

/* Binds the session CA's bundle read-only over SANDBOX_CA_BUNDLE in the
 * mount namespace of init, as setup_send does at a cold start: a copy on
 * a tmpfs of its own (ca_bundle_tree, so no host path shows inside),
 * attached inside by a vfork child that joined init's mount namespace and
 * root (move_mount(2)). */
static int bind_ca_bundle(session *s) {
        char root[64];
        snprintf(root, sizeof(root), "/proc/%d/root", (int)s->pid);
        _cleanup_close_ int rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return negative_errno();
        _cleanup_error_ sb_error *err = NULL;
        _cleanup_close_ int tfd = ca_bundle_tree(s->sb, &err);
        if (tfd < 0)
                return tfd;
        pid_t c = vfork();
        if (c < 0)
                return negative_errno();
        if (c == 0) {
                /* Child, sharing our memory until _exit: syscalls only. */
                if (setns(s->pidfd, CLONE_NEWNS) < 0 || fchdir(rfd) < 0 || chroot(".") < 0 ||
                    move_mount(tfd, "", AT_FDCWD, SANDBOX_CA_BUNDLE, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                        _exit(1);
                _exit(0);
        }
        return vfork_child_result(c);
}

int session_pool_relabel(session *s, sb_error **ret_err) {
        sandbox *sb = s->sb;
        /* A deny-all sandbox has no CA (ca_prepare): a pooled session made
         * with one loses its bind and is then a session without CA. */
        if (s->sandbox_trusts_ca && streq(sandbox_policy_mode(sb), "deny-all")) {
                int k = unbind_ca_bundle(s);
                if (k < 0)
                        return sb_error_set(ret_err, k, NULL, NULL, "remove the egress proxy CA's bundle: %s",
                                            strerror(-k));
                s->sandbox_trusts_ca = false;
                s->proxy_ca = false;
        } else if (s->proxy_ca && streq(sandbox_policy_mode(sb), "deny-all"))
                s->proxy_ca = false;
        /* By init, ahead of any request for the sandbox (it reads them in
         * order): a message, where a child of the daemon joining the UTS
         * namespace costs a vfork on the create's path. */
        cJSON *op = cJSON_CreateObject();
        int r = -ENOMEM;
        if (op && cJSON_AddStringToObject(op, "op", "hostname") && cJSON_AddStringToObject(op, "name", sb->name))
                r = agent_send(s, TAKE_PTR(op));
        cJSON_Delete(op);
        if (r < 0)
                r = set_uts_hostname(s, sb->name);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "set the hostname: %s", strerror(-r));
        _cleanup_free_ char *hosts = NULL, *hostname = NULL;
        if (asprintf(&hosts, "127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost ip6-loopback\n",
                     sb->name) < 0 ||
            asprintf(&hostname, "%s\n", sb->name) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        _cleanup_close_ int upper = sandbox_open_upper(sb);
        if (upper < 0)
                return sb_error_set(ret_err, upper, NULL, NULL, "open the upper directory: %s", strerror(-upper));
        if ((r = rewrite_etc_in_place(upper, "hosts", hosts)) < 0 ||
            (r = rewrite_etc_in_place(upper, "hostname", hostname)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "rewrite /etc/hosts, /etc/hostname: %s", strerror(-r));
        if (!s->proxy_ca)
                return 0;
        /* A CA of its own name, made now: the one of the refill is never
         * used (netd starts after this, and loads the files then). */
        _cleanup_free_ char *cert = NULL, *key = NULL, *bundle = NULL, *host = NULL, *mine = NULL, *text = NULL;
        size_t n_host = 0, n_mine = 0;
        if (ca_paths(sb, &cert, &key, &bundle) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if ((r = pol_proxy_ca_generate(cert, key, sb->name, ret_err)) < 0)
                return sb_error_prefix(ret_err, "egress proxy CA");
        if (!s->sandbox_trusts_ca)
                return 0;
        if ((r = core_read_file(SANDBOX_CA_BUNDLE, 16 << 20, &host, &n_host)) < 0 ||
            (r = core_read_file(cert, 1 << 20, &mine, &n_mine)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: read certificates: %s", strerror(-r));
        if (asprintf(&text, "%.*s\n# sandboxd session CA (egress proxy) of '%s'\n%.*s", (int)n_host, host, sb->name,
                     (int)n_mine, mine) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if ((r = core_write_file_replace(bundle, text, strlen(text), 0644)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: write %s: %s", bundle, strerror(-r));
        /* The sandbox reads a copy on a tmpfs (ca_bundle_tree): the pooled
         * one goes, the new bundle's copy takes its place. Nothing has run
         * in a pooled session but init. */
        if ((r = unbind_ca_bundle(s)) < 0 || (r = bind_ca_bundle(s)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: bind the bundle in the sandbox: %s",
                                    strerror(-r));
        return 0;
}

bool session_pool_fits(const session *s, const char *mode) {
        if (streq(mode, "deny-all"))
                return true;  /* a CA bind is removed at adoption */
        /* A CA, and its bundle's bind, are made at adoption if missing. */
        return s->net_slot >= 0;
}

/* The slot's conntrack entries (IPv4, and IPv6 with a v6 pool), failing
 * closed as start_work does: an earlier session's tracked flows would be
 * accepted by the chain before any policy rule. */
static int pool_forget_flows(session *s, sb_error **ret_err) {
        manager *m = s->sb->m;
        _cleanup_error_ sb_error *ct_err = NULL;
        int k = core_conntrack_flush_source(core_net_sandbox_addr(&m->pool, (unsigned)s->net_slot), &ct_err);
        if (k < 0 && k != -ENOENT && k != -EOPNOTSUPP && k != -EPROTONOSUPPORT)
                return sb_error_set(ret_err, ct_err ? ct_err->code : -EIO, NULL, NULL,
                                    "forget the flows of the address's last session: %s",
                                    ct_err ? ct_err->message : "conntrack flush failed");
        if (m->pool.prefix6) {
                struct in6_addr a6 = core_net_sandbox_addr6(&m->pool, (unsigned)s->net_slot);
                sb_error_free(TAKE_PTR(ct_err));
                k = core_conntrack_flush_source6(&a6, &ct_err);
                if (k < 0 && k != -ENOENT && k != -EOPNOTSUPP && k != -EPROTONOSUPPORT)
                        return sb_error_set(ret_err, ct_err ? ct_err->code : -EIO, NULL, NULL,
                                            "forget the IPv6 flows of the address's last session: %s",
                                            ct_err ? ct_err->message : "conntrack flush failed");
        }
        s->flows_forgotten = true;
        return 0;
}

/* A CA for a session made without one (its pool's hint was deny-all),
 * as ca_prepare makes it at a cold start: the files, and where the
 * sandbox trusts it (ca_trust_possible) the bundle of the host's roots
 * and it, bound over the sandbox's system bundle (bind_ca_bundle). */
static int pool_make_ca(session *s, sb_error **ret_err) {
        sandbox *sb = s->sb;
        _cleanup_free_ char *cert = NULL, *key = NULL, *bundle = NULL;
        int r = ca_make_files(sb, ca_trust_possible(sb), &s->proxy_ca, ret_err);
        if (r <= 0)
                return r;
        if (ca_paths(sb, &cert, &key, &bundle) < 0)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        if ((r = bind_ca_bundle(s)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "egress proxy CA: bind the bundle in the sandbox: %s",
                                    strerror(-r));
        s->sandbox_trusts_ca = true;
        return 0;
}

int session_pool_network(session *s, sb_error **ret_err) {
        sandbox *sb = s->sb;
        const pol_policy *p = sb->pol;
        if (p->mode == POL_MODE_DENY_ALL)
                return 0;
        if (s->net_slot < 0 || !session_pool_fits(s, sandbox_policy_mode(sb)))
                return sb_error_set(ret_err, -EOPNOTSUPP, NULL, NULL, "the pooled session cannot take policy mode %s",
                                    sandbox_policy_mode(sb));
        char ifname[32];
        snprintf(ifname, sizeof(ifname), "sbx%d", s->net_slot);
        int r;
        /* Made for a deny-all pool: its start forgot no flow of the
         * slot's last session, and it has no CA yet. */
        if (!s->flows_forgotten && (r = pool_forget_flows(s, ret_err)) < 0)
                return r;
        if (!s->proxy_ca && (r = pool_make_ca(s, ret_err)) < 0)
                return r;
        s->policy_generation++;
        /* As start_work orders it: veth (its sandbox end down, the host
         * table denying it), the session's rules, eth0 up, then netd. No
         * flow of this session ever existed, and the slot's earlier ones
         * are forgotten, so nothing more is flushed. */
        if (!s->has_veth && (r = session_veth_add(s, ret_err)) < 0)
                return r;
        if ((r = pol_nft_session_apply(ifname, p, s->gateway, ret_err)) < 0)
                return r;
        if ((r = session_veth_configure(s, ret_err)) < 0)
                return r;
        if (p->mode == POL_MODE_CUSTOM) {
                if ((r = netd_start(sb->m, sb, s->cg, s->proxy_ca, p, s->policy_generation, s->gateway, s->pod_netns, &s->netd_pid,
                                    &s->netd_out, &s->netd_in, ret_err)) < 0)
                        return r;
                if ((r = netd_attach(s)) < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "watch the DNS filter: %s", strerror(-r));
        }
        return 0;
}

int session_pool_activate(sandbox *sb) {
        session *s = sb->sess;
        /* Its end is the one adopt() recorded (the record is written once,
         * before the commit). */
        uint64_t now = core_now_ms();
        uint64_t left_ms = sb->expires_ms > now ? sb->expires_ms - now : 0;
        int r = sd_event_add_time_relative(sb->m->event, &s->expire_src, CLOCK_MONOTONIC, left_ms * 1000, 10 * 1000,
                                           on_expire, sb);
        _cleanup_error_ sb_error *perr = NULL;
        if (ports_open(s, &perr) < 0)
                log_warning("sandbox '%s': %s", sb->name, perr ? perr->message : "ports");
        log_info("sandbox '%s' running (from the warm pool, init pid %d, %s)", sb->name, (int)s->pid,
                 sandbox_policy_mode(sb));
        emit_status(sb, "running");
        return r;
}

void session_destroy_now(sandbox *sb) {
        manager *m = sb->m;
        session *s = sb->sess;
        if (!s)
                return;
        if (s->pidfd >= 0) {
                syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
                siginfo_t si;
                waitid(P_PIDFD, (id_t)s->pidfd, &si, WEXITED);
        }
        session_detach(s);
        teardown_job t = {.m = m, .sb = sb, .s = s, .remove_files = true};
        teardown_work(&t);
        session_kernel_teardown(s, sb->name);
        tombstones tb = {.dir = t.tombstone, .run = t.run_tombstone};
        tombstone_work(&tb);
        free(t.tombstone);
        free(t.run_tombstone);
        session_release(m, s);
}
