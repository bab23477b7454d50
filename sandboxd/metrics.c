/* Usage figures of sandboxes (sandbox.get, sandboxctl top) and the
 * Prometheus metrics endpoint (metrics.h).
 *
 * The endpoint is HTTP/1.1 on non-blocking sockets driven by the event loop:
 * a request is read with the packaged HTTP parser (nodejs http_parser, as
 * policy/http.c) up to METRICS_REQUEST_MAX bytes, the whole answer is built
 * in memory at once and then written as the peer takes it; every connection
 * has a deadline and there are at most METRICS_CONNS_MAX at a time, so no
 * client, slow or silent, holds the loop or its memory. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <http_parser.h>
#include <inttypes.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>
#include "libcore/log.h"
#include "libcore/pool.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/metrics.h"
#include "sandboxd/tenant.h"

static int safe_close(int fd) {
        if (fd >= 0)
                close(fd);
        return -EBADF;
}

#define METRICS_CONNS_MAX 16
#define METRICS_REQUEST_MAX 8192
#define METRICS_DEADLINE_USEC (10 * 1000000ULL)
/* Distinct (layer, rule) pairs counted per sandbox; further ones count as
 * rule "other" so that a sandbox cannot grow the daemon's memory. */
#define DENIAL_KEYS_MAX 64

typedef struct denial_count {
        char *sandbox, *layer, *rule;
        uint64_t n;
        struct denial_count *next;
} denial_count;

typedef struct started_count {
        char *sandbox;
        uint64_t n;
        struct started_count *next;
} started_count;

typedef struct mconn {
        int fd;
        bool full;                /* per-sandbox series too (every allowed peer, both endpoints) */
        tenant who;               /* the peer (tenant.h): a tenant sees its own sandboxes only */
        sd_event_source *io, *timer;
        http_parser parser;
        char in[METRICS_REQUEST_MAX];
        size_t in_len;
        bool complete, is_get, is_head;
        char url[64];             /* the request target as far as it fits */
        size_t url_len;
        bool url_long;
        char *out;
        size_t out_len, out_off;
        struct mconn *next;
} mconn;

static struct {
        manager *m;
        const daemon_config *cfg;
        int unix_fd, tcp_fd;
        sd_event_source *unix_src, *tcp_src;
        char *unix_path, *tcp_addr;   /* what is bound now */
        mconn *conns;
        unsigned n_conns;
        denial_count *denials;
        unsigned n_denials;
        started_count *started;
} M = { .unix_fd = -EBADF, .tcp_fd = -EBADF };

/* ---- figures ---- */

/* Bytes the host side of the session's veth (sbx<slot>) received (the
 * sandbox's egress) and sent (its ingress), from /proc/net/dev, which shows
 * the reading thread's network namespace (proc(5)): the daemon's, where the
 * host side lives. */
static int veth_bytes(int slot, uint64_t *ret_rx, uint64_t *ret_tx) {
        _cleanup_free_ char *data = NULL;
        int r = core_read_file("/proc/net/dev", 1 << 20, &data, NULL);
        if (r < 0)
                return r;
        char want[32];
        snprintf(want, sizeof(want), "sbx%d:", slot);
        for (char *line = data; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                char *p = line + strspn(line, " ");
                if (strncmp(p, want, strlen(want)) != 0)
                        continue;
                unsigned long long v[9];
                if (sscanf(p + strlen(want), "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                           &v[4], &v[5], &v[6], &v[7], &v[8]) != 9)
                        return -EBADMSG;
                *ret_rx = v[0];
                *ret_tx = v[8];
                return 0;
        }
        return -ENOENT;
}

static uint64_t started_of(const char *name) {
        for (started_count *c = M.started; c; c = c->next)
                if (streq(c->sandbox, name))
                        return c->n;
        return 0;
}

void metrics_usage_rebase(sandbox *sb) {
        session *s = sb->sess;
        if (!s || !s->cg)
                return;
        s->usage_rebased = true;
        uint64_t cpu = core_cgroup_read_cpu_usec(s->cg);
        s->cpu_base_usec = cpu != UINT64_MAX ? cpu : 0;
        int fd = -EBADF;
        int r = core_cgroup_peak_reset(s->cg, &fd);
        if (r >= 0 && fd >= 0) {
                s->peak_fd = fd;
                s->peak_fd_set = true;
        } else if (r < 0 && r != -ENODATA) {
                s->peak_unknown = true;
                log_debug_errno(r, "sandbox '%s': memory peak not reset at adoption (shown as null): %m", sb->name);
        }
}

void metrics_usage_base_to_json(const session *s, cJSON *rec) {
        if (!s->usage_rebased)
                return;
        cJSON *b = cJSON_AddObjectToObject(rec, "usageBase");
        if (!b)
                return;
        cJSON_AddNumberToObject(b, "cpuUsec", (double)s->cpu_base_usec);
        cJSON_AddStringToObject(b, "peak", s->peak_unknown ? "none" : s->peak_fd_set ? "fd" : "reset");
}

void metrics_usage_base_from_json(session *s, const cJSON *rec) {
        const cJSON *b = cJSON_GetObjectItem(rec, "usageBase");
        if (!cJSON_IsObject(b))
                return;
        const cJSON *cpu = cJSON_GetObjectItem(b, "cpuUsec");
        const char *peak = cJSON_GetStringValue(cJSON_GetObjectItem(b, "peak"));
        s->usage_rebased = true;
        s->cpu_base_usec = cJSON_IsNumber(cpu) && cpu->valuedouble > 0 ? (uint64_t)cpu->valuedouble : 0;
        /* Fail closed: only a reset every reader sees still holds. */
        s->peak_unknown = !peak || !streq(peak, "reset");
}

/* The figures of a session adopted from the pool, from its adoption on. */
static void rebased_usage(const session *s, metrics_usage *u) {
        if (u->cpu_usec != UINT64_MAX)
                u->cpu_usec = u->cpu_usec > s->cpu_base_usec ? u->cpu_usec - s->cpu_base_usec : 0;
        uint64_t peak;
        if (s->peak_unknown)
                u->memory_peak_bytes = UINT64_MAX;
        else if (s->peak_fd_set)
                u->memory_peak_bytes = core_cgroup_peak_read(s->peak_fd, &peak) == 0 ? peak : UINT64_MAX;
}

void metrics_sandbox_usage(const sandbox *sb, metrics_usage *u) {
        *u = (metrics_usage) { .cpu_usec = UINT64_MAX, .memory_bytes = UINT64_MAX,
                               .memory_peak_bytes = UINT64_MAX, .pids = UINT64_MAX,
                               .disk_used_bytes = UINT64_MAX, .net_ingress = UINT64_MAX,
                               .net_egress = UINT64_MAX };
        const session *s = sb->sess;
        if (s && s->cg) {
                core_cgroup_usage cu;
                if (core_cgroup_read_usage(s->cg, &cu) == 0) {
                        u->cpu_usec = cu.cpu_usec;
                        u->memory_bytes = cu.memory_bytes;
                        u->memory_peak_bytes = cu.memory_peak_bytes;
                        u->pids = cu.pids;
                }
                if (s->usage_rebased)
                        rebased_usage(s, u);
        }
        if (s && s->net_slot >= 0) {
                uint64_t rx, tx;
                if (veth_bytes(s->net_slot, &rx, &tx) == 0)
                        u->net_egress = rx, u->net_ingress = tx;
        }
        if (s && sb->disk_mib) {
                /* The image's filesystem, mounted at <dir>/disk by the daemon
                 * (not a path the sandbox can change): blocks in use. */
                _cleanup_free_ char *disk = NULL;
                struct statvfs st;
                uint64_t used;
                if (core_pool_present(sb->dir)) {
                        /* A pool disk: its subvolume's referenced bytes. */
                        if (core_pool_used(sb->dir, &used) == 0)
                                u->disk_used_bytes = used;
                } else if (asprintf(&disk, "%s/disk", sb->dir) >= 0 && statvfs(disk, &st) == 0)
                        u->disk_used_bytes = (uint64_t) (st.f_blocks - st.f_bfree) * st.f_frsize;
        }
        for (const command *c = sb->m->commands; c; c = c->next)
                if (c->sb == sb && c->started && !c->exited)
                        u->commands_running++;
        u->commands_started = started_of(sb->name);
        for (const denial_count *d = M.denials; d; d = d->next)
                if (streq(d->sandbox, sb->name))
                        u->denials += d->n;
}

static void add_num(cJSON *o, const char *key, uint64_t v) {
        if (v == UINT64_MAX)
                cJSON_AddNullToObject(o, key);
        else
                cJSON_AddNumberToObject(o, key, (double) v);
}

void metrics_usage_to_json(const sandbox *sb, cJSON *o) {
        metrics_usage u;
        metrics_sandbox_usage(sb, &u);
        add_num(o, "activeCpuUsageMs", u.cpu_usec == UINT64_MAX ? UINT64_MAX : u.cpu_usec / 1000);
        add_num(o, "memoryPeakBytes", u.memory_peak_bytes);
        cJSON *net = cJSON_AddObjectToObject(o, "networkTransfer");
        if (net) {
                add_num(net, "ingress", u.net_ingress);
                add_num(net, "egress", u.net_egress);
        }
        cJSON *usage = cJSON_AddObjectToObject(o, "usage");
        if (usage) {
                add_num(usage, "memoryBytes", u.memory_bytes);
                add_num(usage, "pids", u.pids);
                add_num(usage, "diskUsedBytes", u.disk_used_bytes);
                add_num(usage, "commandsStarted", u.commands_started);
                add_num(usage, "commandsRunning", u.commands_running);
                add_num(usage, "denials", u.denials);
        }
}

static char *xstrdup_or_null(const char *s) {
        return s ? strdup(s) : NULL;
}

void metrics_count_denial(const char *sb_name, const char *layer, const char *rule) {
        if (!sb_name)
                return;
        layer = layer ? layer : "unknown";
        rule = rule ? rule : "none";
        unsigned keys = 0;
        for (denial_count *d = M.denials; d; d = d->next) {
                if (!streq(d->sandbox, sb_name))
                        continue;
                keys++;
                if (streq(d->layer, layer) && streq(d->rule, rule)) {
                        d->n++;
                        return;
                }
        }
        if (keys >= DENIAL_KEYS_MAX - 1) {
                rule = "other";
                for (denial_count *d = M.denials; d; d = d->next)
                        if (streq(d->sandbox, sb_name) && streq(d->layer, layer) && streq(d->rule, rule)) {
                                d->n++;
                                return;
                        }
        }
        denial_count *d = calloc(1, sizeof(*d));
        if (!d)
                return;
        d->sandbox = xstrdup_or_null(sb_name);
        d->layer = xstrdup_or_null(layer);
        d->rule = xstrdup_or_null(rule);
        if (!d->sandbox || !d->layer || !d->rule) {
                free(d->sandbox), free(d->layer), free(d->rule), free(d);
                return;
        }
        d->n = 1;
        d->next = M.denials;
        M.denials = d;
        M.n_denials++;
}

void metrics_count_command(const char *sb_name) {
        for (started_count *c = M.started; c; c = c->next)
                if (streq(c->sandbox, sb_name)) {
                        c->n++;
                        return;
                }
        started_count *c = calloc(1, sizeof(*c));
        if (!c || !(c->sandbox = strdup(sb_name))) {
                free(c);
                return;
        }
        c->n = 1;
        c->next = M.started;
        M.started = c;
}

void metrics_forget_sandbox(const char *sb_name) {
        for (denial_count **p = &M.denials; *p;) {
                denial_count *d = *p;
                if (streq(d->sandbox, sb_name)) {
                        *p = d->next;
                        free(d->sandbox), free(d->layer), free(d->rule), free(d);
                        M.n_denials--;
                } else
                        p = &d->next;
        }
        for (started_count **p = &M.started; *p;) {
                started_count *c = *p;
                if (streq(c->sandbox, sb_name)) {
                        *p = c->next;
                        free(c->sandbox), free(c);
                } else
                        p = &c->next;
        }
}

/* ---- the text ---- */

static void label(FILE *f, const char *v) {
        for (; *v; v++) {
                if (*v == '\\' || *v == '"')
                        fputc('\\', f), fputc(*v, f);
                else if (*v == '\n')
                        fputs("\\n", f);
                else
                        fputc(*v, f);
        }
}

typedef struct series {
        const char *name, *type, *help;
} series;

static const series S_CPU = { "sandboxd_sandbox_cpu_seconds_total", "counter",
                              "CPU time of the sandbox's running session (every process it ever had)." };
static const series S_MEM = { "sandboxd_sandbox_memory_bytes", "gauge", "Memory the session's cgroup uses now." };
static const series S_PEAK = { "sandboxd_sandbox_memory_peak_bytes", "gauge", "The most memory the session's cgroup has used." };
static const series S_PIDS = { "sandboxd_sandbox_pids", "gauge", "Processes and threads of the session now." };
/* The volumes' gauges (volumes_metrics): one series per volume and
 * metric, each metric's HELP and TYPE once. Names are a-z, 0-9, '-': no
 * label escaping needed. */
typedef struct volume_out {
        FILE *f;
        int which; /* 0 size, 1 used bytes, 2 used inodes, 3 inodes */
} volume_out;
static const char *const volume_metric[][2] = {
        { "sandboxd_volume_size_bytes", "Size of the volume (sizeMiB)." },
        { "sandboxd_volume_used_bytes", "Bytes in use on the volume's filesystem." },
        { "sandboxd_volume_used_inodes", "Inodes in use on the volume's filesystem." },
        { "sandboxd_volume_inodes", "Inodes of the volume's filesystem." },
};

static void volume_series(const char *name, uint64_t size, uint64_t used, uint64_t used_inodes, uint64_t inodes,
                          void *userdata) {
        volume_out *o = userdata;
        uint64_t v[] = { size, used, used_inodes, inodes };
        fprintf(o->f, "%s{volume=\"%s\"} %" PRIu64 "\n", volume_metric[o->which][0], name, v[o->which]);
}

static void volumes_print(manager *m, const char *owner, FILE *f) {
        for (int i = 0; i < (int)ELEMENTSOF(volume_metric); i++) {
                fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", volume_metric[i][0], volume_metric[i][1],
                        volume_metric[i][0]);
                volume_out o = { .f = f, .which = i };
                volumes_metrics(m, owner, volume_series, &o);
        }
}

static const series S_DISK = { "sandboxd_sandbox_disk_used_bytes", "gauge", "Bytes in use on the sandbox's disk (its image's filesystem, or its storage pool subvolume's referenced bytes)." };
static const series S_RX = { "sandboxd_sandbox_network_receive_bytes_total", "counter",
                             "Bytes the sandbox received over its network link (ingress)." };
static const series S_TX = { "sandboxd_sandbox_network_transmit_bytes_total", "counter",
                             "Bytes the sandbox sent over its network link (egress)." };
static const series S_STARTED = { "sandboxd_sandbox_commands_started_total", "counter", "Commands started in the sandbox." };
static const series S_RUNNING = { "sandboxd_sandbox_commands_running", "gauge", "Commands running in the sandbox now." };

static void header(FILE *f, const series *s) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", s->name, s->help, s->name, s->type);
}

static void sample(FILE *f, const series *s, const char *sb_name, uint64_t v, double scale) {
        if (v == UINT64_MAX)
                return;
        fprintf(f, "%s{sandbox=\"", s->name);
        label(f, sb_name);
        if (scale != 1)
                fprintf(f, "\"} %.6f\n", (double) v / scale);
        else
                fprintf(f, "\"} %" PRIu64 "\n", v);
}

static char *render(bool full, const tenant *who, size_t *ret_len) {
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        if (!f)
                return NULL;
        manager *m = M.m;
        unsigned n_status[5] = {};
        static const char *const statuses[] = { "pending", "running", "stopping", "stopped", "failed" };
        for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                for (size_t i = 0; i < ELEMENTSOF(statuses); i++)
                        if (streq(sb->status, statuses[i]) && tenant_owns(who, sb->owner))
                                n_status[i]++;
        fputs("# HELP sandboxd_sandboxes Sandboxes by status.\n# TYPE sandboxd_sandboxes gauge\n", f);
        for (size_t i = 0; i < ELEMENTSOF(statuses); i++)
                fprintf(f, "sandboxd_sandboxes{status=\"%s\"} %u\n", statuses[i], n_status[i]);
        sandbox_storage ss;
        /* A tenant's: its own disks only (the state filesystem's free
         * bytes are the host's, as its disk refusals say them). */
        sandbox_storage_stats(m, tenant_owner(who), &ss);
        fprintf(f,
                "# HELP sandboxd_storage_committed_bytes Sum of the disk images' sizes (diskMiB), each held on the state filesystem (disks in the storage pool: sandboxd_storage_pool_*).\n"
                "# TYPE sandboxd_storage_committed_bytes gauge\nsandboxd_storage_committed_bytes %" PRIu64 "\n"
                "# HELP sandboxd_storage_free_bytes Free bytes of the state filesystem.\n"
                "# TYPE sandboxd_storage_free_bytes gauge\nsandboxd_storage_free_bytes %" PRIu64 "\n"
                "# HELP sandboxd_storage_unbacked_disks Disk images without all their blocks (made sparse by an earlier version).\n"
                "# TYPE sandboxd_storage_unbacked_disks gauge\nsandboxd_storage_unbacked_disks %u\n",
                ss.committed_bytes, ss.free_bytes, ss.unbacked);
        core_pool_stats ps;
        if (core_pool_stats_get(&ps) >= 0)
                fprintf(f,
                        "# HELP sandboxd_storage_pool_size_bytes Size of the storage pool (daemon.json storage.pool).\n"
                        "# TYPE sandboxd_storage_pool_size_bytes gauge\nsandboxd_storage_pool_size_bytes %" PRIu64 "\n"
                        "# HELP sandboxd_storage_pool_committed_bytes Bytes of the storage pool committed: every pool disk's diskMiB, every pool layer's referenced bytes and the metadata margin.\n"
                        "# TYPE sandboxd_storage_pool_committed_bytes gauge\nsandboxd_storage_pool_committed_bytes %" PRIu64 "\n"
                        "# HELP sandboxd_storage_pool_used_bytes Bytes of the storage pool Btrfs has in use.\n"
                        "# TYPE sandboxd_storage_pool_used_bytes gauge\nsandboxd_storage_pool_used_bytes %" PRIu64 "\n",
                        ps.size, ps.committed, ps.used);
        fprintf(f, "# HELP sandboxd_volumes Volumes (volume.create).\n# TYPE sandboxd_volumes gauge\nsandboxd_volumes %u\n"
                   "# HELP sandboxd_storage_volume_committed_bytes Sum of the volumes' sizes (sizeMiB) held on the state filesystem (in sandboxd_storage_committed_bytes).\n"
                   "# TYPE sandboxd_storage_volume_committed_bytes gauge\nsandboxd_storage_volume_committed_bytes %" PRIu64 "\n",
                ss.volumes, ss.volume_committed_bytes);
        volumes_print(m, tenant_owner(who), f);
        if (full) {
                /* Usage of each running sandbox, read once. */
                size_t n = 0;
                for (sandbox *sb = m->sandboxes; sb; sb = sb->next)
                        n++;
                metrics_usage *u = calloc(n ? n : 1, sizeof(*u));
                if (!u) {
                        fclose(f);
                        free(buf);
                        return NULL;
                }
                size_t i = 0;
                for (sandbox *sb = m->sandboxes; sb; sb = sb->next, i++)
                        if (tenant_owns(who, sb->owner))
                                metrics_sandbox_usage(sb, &u[i]);
                struct { const series *s; size_t off; double scale; } cols[] = {
                        { &S_CPU, offsetof(metrics_usage, cpu_usec), 1e6 },
                        { &S_MEM, offsetof(metrics_usage, memory_bytes), 1 },
                        { &S_PEAK, offsetof(metrics_usage, memory_peak_bytes), 1 },
                        { &S_PIDS, offsetof(metrics_usage, pids), 1 },
                        { &S_DISK, offsetof(metrics_usage, disk_used_bytes), 1 },
                        { &S_RX, offsetof(metrics_usage, net_ingress), 1 },
                        { &S_TX, offsetof(metrics_usage, net_egress), 1 },
                        { &S_STARTED, offsetof(metrics_usage, commands_started), 1 },
                        { &S_RUNNING, offsetof(metrics_usage, commands_running), 1 },
                };
                for (size_t c = 0; c < ELEMENTSOF(cols); c++) {
                        header(f, cols[c].s);
                        i = 0;
                        for (sandbox *sb = m->sandboxes; sb; sb = sb->next, i++)
                                if (tenant_owns(who, sb->owner))
                                        sample(f, cols[c].s, sb->name, *(uint64_t *) ((char *) &u[i] + cols[c].off),
                                               cols[c].scale);
                }
                free(u);
                fputs("# HELP sandboxd_sandbox_denials_total Connections and DNS questions refused, by layer and rule.\n"
                      "# TYPE sandboxd_sandbox_denials_total counter\n", f);
                for (const denial_count *d = M.denials; d; d = d->next) {
                        sandbox *dsb = manager_find_sandbox(m, d->sandbox);
                        if (!dsb || !tenant_owns(who, dsb->owner))
                                continue;
                        fputs("sandboxd_sandbox_denials_total{sandbox=\"", f);
                        label(f, d->sandbox);
                        fputs("\",layer=\"", f);
                        label(f, d->layer);
                        fputs("\",rule=\"", f);
                        label(f, d->rule);
                        fprintf(f, "\"} %" PRIu64 "\n", d->n);
                }
        }
        /* The daemon's request counts are everyone's: admin only. */
        if (m->server && who->admin)
                rpc_server_write_metrics(m->server, f);
        if (fclose(f) != 0) {
                free(buf);
                return NULL;
        }
        *ret_len = len;
        return buf;
}

/* ---- connections ---- */

static void conn_free(mconn *c) {
        for (mconn **p = &M.conns; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        M.n_conns--;
        sd_event_source_disable_unref(c->io);
        sd_event_source_disable_unref(c->timer);
        safe_close(c->fd);
        free(c->out);
        free(c);
}

/* The parser hands the target over in pieces when it arrives in several
 * reads: gather it. */
static int on_url(http_parser *p, const char *at, size_t n) {
        mconn *c = p->data;
        if (c->url_len + n >= sizeof(c->url)) {
                c->url_long = true;
                return 0;
        }
        memcpy(c->url + c->url_len, at, n);
        c->url_len += n;
        c->url[c->url_len] = '\0';
        return 0;
}

/* "/metrics", a query string ignored. */
static bool url_is_metrics(const mconn *c) {
        return !c->url_long && strncmp(c->url, "/metrics", 8) == 0 && (c->url[8] == '\0' || c->url[8] == '?');
}

static int on_complete(http_parser *p) {
        mconn *c = p->data;
        c->complete = true;
        c->is_get = p->method == HTTP_GET;
        c->is_head = p->method == HTTP_HEAD;
        http_parser_pause(p, 1);
        return 0;
}

static const http_parser_settings parser_settings = {
        .on_url = on_url,
        .on_message_complete = on_complete,
};

static void respond(mconn *c, int status, const char *reason, const char *type, char *body, size_t body_len,
                    bool head) {
        char *out = NULL;
        int n = asprintf(&out,
                         "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n"
                         "Cache-Control: no-store\r\n\r\n",
                         status, reason, type, body_len);
        if (n < 0) {
                free(body);
                return;
        }
        if (!head && body_len) {
                char *both = realloc(out, (size_t) n + body_len);
                if (!both) {
                        free(out);
                        free(body);
                        return;
                }
                memcpy(both + n, body, body_len);
                out = both;
                n += (int) body_len;
        }
        free(body);
        c->out = out;
        c->out_len = (size_t) n;
        c->out_off = 0;
}

static void answer(mconn *c) {
        if (!c->complete)
                respond(c, 400, "Bad Request", "text/plain", strdup("bad request\n"), 12, false);
        else if (!url_is_metrics(c))
                respond(c, 404, "Not Found", "text/plain", strdup("not found; try /metrics\n"), 24, false);
        else if (!c->is_get && !c->is_head)
                respond(c, 405, "Method Not Allowed", "text/plain", strdup("GET only\n"), 9, false);
        else {
                size_t len = 0;
                char *body = render(c->full, &c->who, &len);
                if (!body)
                        respond(c, 500, "Internal Server Error", "text/plain", strdup("out of memory\n"), 14, false);
                else
                        respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body, len, c->is_head);
        }
        if (!c->out) {
                conn_free(c);
                return;
        }
        (void) sd_event_source_set_io_events(c->io, EPOLLOUT);
}

static int on_conn_io(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        mconn *c = userdata;
        if (c->out) {
                while (c->out_off < c->out_len) {
                        ssize_t n = send(fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0 && errno == EAGAIN)
                                return 0;
                        if (n <= 0) {
                                conn_free(c);
                                return 0;
                        }
                        c->out_off += (size_t) n;
                }
                conn_free(c);
                return 0;
        }
        ssize_t n = recv(fd, c->in + c->in_len, sizeof(c->in) - c->in_len, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n < 0) {
                conn_free(c);
                return 0;
        }
        if (n == 0) {
                /* EOF before a whole request: nothing to answer. */
                if (!c->complete) {
                        conn_free(c);
                        return 0;
                }
        } else {
                size_t done = http_parser_execute(&c->parser, &parser_settings, c->in + c->in_len, (size_t) n);
                c->in_len += (size_t) n;
                if (!c->complete && HTTP_PARSER_ERRNO(&c->parser) != HPE_OK) {
                        answer(c);
                        return 0;
                }
                (void) done;
                if (!c->complete && c->in_len == sizeof(c->in)) {
                        respond(c, 431, "Request Header Fields Too Large", "text/plain", strdup("too large\n"), 10, false);
                        if (!c->out)
                                conn_free(c);
                        else
                                (void) sd_event_source_set_io_events(c->io, EPOLLOUT);
                        return 0;
                }
        }
        if (c->complete)
                answer(c);
        return 0;
}

static int on_conn_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        conn_free(userdata);
        return 0;
}

/* The owner uid of the client end of the loopback TCP connection `fd`,
 * asked of the kernel with sock_diag (sock_diag(7): an exact
 * SOCK_DIAG_BY_FAMILY lookup of the peer's socket by its addresses and
 * ports, which on loopback is a socket of this network namespace). */
static int tcp_peer_uid(int fd, uid_t *ret) {
        struct sockaddr_storage self, peer;
        socklen_t ls = sizeof(self), lp = sizeof(peer);
        if (getsockname(fd, (struct sockaddr *) &self, &ls) < 0 || getpeername(fd, (struct sockaddr *) &peer, &lp) < 0)
                return -errno;
        struct {
                struct nlmsghdr nh;
                struct inet_diag_req_v2 req;
        } msg = {
                .nh = { .nlmsg_len = sizeof(msg), .nlmsg_type = SOCK_DIAG_BY_FAMILY, .nlmsg_flags = NLM_F_REQUEST },
                .req = { .sdiag_family = (uint8_t) peer.ss_family, .sdiag_protocol = IPPROTO_TCP,
                         .idiag_states = ~0u, .id = { .idiag_cookie = { INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE } } },
        };
        /* The client's socket: its source is our peer, its destination us. */
        if (peer.ss_family == AF_INET) {
                const struct sockaddr_in *p = (const void *) &peer, *m = (const void *) &self;
                msg.req.id.idiag_sport = p->sin_port;
                msg.req.id.idiag_dport = m->sin_port;
                memcpy(msg.req.id.idiag_src, &p->sin_addr, 4);
                memcpy(msg.req.id.idiag_dst, &m->sin_addr, 4);
        } else if (peer.ss_family == AF_INET6) {
                const struct sockaddr_in6 *p = (const void *) &peer, *m = (const void *) &self;
                msg.req.id.idiag_sport = p->sin6_port;
                msg.req.id.idiag_dport = m->sin6_port;
                memcpy(msg.req.id.idiag_src, &p->sin6_addr, 16);
                memcpy(msg.req.id.idiag_dst, &m->sin6_addr, 16);
        } else
                return -EAFNOSUPPORT;
        _cleanup_close_ int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (nl < 0)
                return -errno;
        struct timeval tv = { .tv_sec = 1 };
        (void) setsockopt(nl, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
        if (sendto(nl, &msg, sizeof(msg), 0, (struct sockaddr *) &kernel, sizeof(kernel)) < 0)
                return -errno;
        union {
                struct nlmsghdr nh;
                char buf[8192];
        } ans;
        ssize_t n = recv(nl, &ans, sizeof(ans), 0);
        if (n < 0)
                return -errno;
        for (struct nlmsghdr *h = &ans.nh; NLMSG_OK(h, (size_t) n); h = NLMSG_NEXT(h, n)) {
                if (h->nlmsg_type == NLMSG_ERROR) {
                        const struct nlmsgerr *e = NLMSG_DATA(h);
                        return e->error < 0 ? e->error : -ENOENT;
                }
                if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
                        continue;
                const struct inet_diag_msg *d = NLMSG_DATA(h);
                *ret = d->idiag_uid;
                return 0;
        }
        return -ENOENT;
}

/* Root, or a user whose groups (getgrouplist(3)) hold the socket group. */
static bool uid_is_allowed(uid_t uid, const char *group) {
        if (uid == 0)
                return true;
        struct group *g = group ? getgrnam(group) : NULL;
        struct passwd *pw = getpwuid(uid);
        if (!g || !pw)
                return false;
        gid_t groups[256];
        int n = (int) (sizeof(groups) / sizeof(groups[0]));
        if (getgrouplist(pw->pw_name, pw->pw_gid, groups, &n) < 0)
                return false;
        for (int i = 0; i < n; i++)
                if (groups[i] == g->gr_gid)
                        return true;
        return false;
}

/* Root and the socket group may read; *ret_who is the tenant the peer is
 * (tenant.h), whose view is its own sandboxes. */
static bool peer_allowed(int cfd, bool unix_socket, tenant *ret_who) {
        if (unix_socket) {
                struct ucred cred;
                socklen_t len = sizeof(cred);
                if (!M.m->server || !rpc_server_peer_allowed(M.m->server, cfd) ||
                    getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                        return false;
                tenant_of_uid(M.m->cfg, cred.uid, ret_who);
                return true;
        }
        uid_t uid;
        if (tcp_peer_uid(cfd, &uid) != 0 || !uid_is_allowed(uid, M.cfg ? M.cfg->socket_group : NULL))
                return false;
        tenant_of_uid(M.m->cfg, uid, ret_who);
        return true;
}

static int on_accept(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        bool full = userdata != NULL; /* the Unix socket; NULL: the TCP one */
        for (int i = 0; i < 16; i++) {
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0)
                        return 0;  /* EAGAIN, or EMFILE: the next round tries again */
                tenant who;
                if (M.n_conns >= METRICS_CONNS_MAX || !peer_allowed(cfd, full, &who)) {
                        close(cfd);
                        continue;
                }
                mconn *c = calloc(1, sizeof(*c));
                if (!c) {
                        close(cfd);
                        continue;
                }
                c->who = who;
                c->fd = cfd;
                c->full = true;
                http_parser_init(&c->parser, HTTP_REQUEST);
                c->parser.data = c;
                c->next = M.conns;
                M.conns = c;
                M.n_conns++;
                sd_event *e = sd_event_source_get_event(s);
                uint64_t now = 0;
                (void) sd_event_now(e, CLOCK_MONOTONIC, &now);
                if (sd_event_add_io(e, &c->io, cfd, EPOLLIN, on_conn_io, c) < 0 ||
                    sd_event_add_time(e, &c->timer, CLOCK_MONOTONIC, now + METRICS_DEADLINE_USEC, 0, on_conn_timer, c) < 0)
                        conn_free(c);
        }
        return 0;
}

/* ---- listeners ---- */

static void close_listener(int *fd, sd_event_source **src, char **what) {
        *src = sd_event_source_disable_unref(*src);
        *fd = safe_close(*fd);
        free(*what);
        *what = NULL;
}

static int listen_unix(const char *path, gid_t gid) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);
        struct stat st;
        /* A stale socket of an earlier run goes; anything else at the path stays. */
        if (lstat(path, &st) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return -EEXIST;
                if (unlink(path) < 0)
                        return -errno;
        }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        /* No umask(2) around the bind: it is the whole process's, and
         * another thread creating files meanwhile (a spare disk, a warm
         * pool's first sandboxes) got its modes. Nobody connects before
         * listen(), which comes after the owner and mode are set. */
        int r = bind(fd, (struct sockaddr *) &sa, sizeof(sa));
        if (r < 0 || chown(path, 0, gid == (gid_t) -1 ? 0 : gid) < 0 || chmod(path, 0660) < 0 || listen(fd, 16) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static int listen_tcp(const char *addr) {
        struct sockaddr_storage ss;
        socklen_t len;
        if (daemon_config_parse_loopback(addr, &ss, &len) < 0)
                return -EINVAL;
        int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *) &ss, len) < 0 || listen(fd, 16) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static gid_t group_gid(const char *name) {
        struct group *g = name ? getgrnam(name) : NULL;
        return g ? g->gr_gid : (gid_t) -1;
}

void metrics_reconfigure(const daemon_config *cfg) {
        if (!M.m)
                return;
        M.cfg = cfg;
        sd_event *e = M.m->event;
        _cleanup_free_ char *want_unix = NULL;
        if (cfg->metrics) {
                if (cfg->metrics_socket)
                        want_unix = strdup(cfg->metrics_socket);
                else if (asprintf(&want_unix, "%s/metrics.sock", cfg->run_dir) < 0)
                        want_unix = NULL;
        }
        const char *want_tcp = cfg->metrics ? cfg->metrics_listen : NULL;
        if (!want_unix || !M.unix_path || !streq(want_unix, M.unix_path)) {
                if (M.unix_path)
                        (void) unlink(M.unix_path);
                close_listener(&M.unix_fd, &M.unix_src, &M.unix_path);
                if (want_unix && streq(want_unix, cfg->socket_path))
                        log_error("metrics: metricsSocket %s is the JSON-RPC socket; not serving metrics there",
                                  want_unix);
                else if (want_unix) {
                        int fd = listen_unix(want_unix, group_gid(cfg->socket_group));
                        if (fd < 0)
                                log_error_errno(fd, "metrics: listen on %s: %m (metricsSocket)", want_unix);
                        else if (sd_event_add_io(e, &M.unix_src, fd, EPOLLIN, on_accept, (void *) 1) < 0)
                                close(fd);
                        else {
                                M.unix_fd = fd;
                                M.unix_path = TAKE_PTR(want_unix);
                                log_info("metrics: serving GET /metrics on %s", M.unix_path);
                        }
                }
        }
        if (!want_tcp || !M.tcp_addr || !streq(want_tcp, M.tcp_addr)) {
                close_listener(&M.tcp_fd, &M.tcp_src, &M.tcp_addr);
                if (want_tcp) {
                        int fd = listen_tcp(want_tcp);
                        if (fd < 0)
                                log_error_errno(fd, "metrics: listen on %s: %m (metricsListen)", want_tcp);
                        else if (sd_event_add_io(e, &M.tcp_src, fd, EPOLLIN, on_accept, NULL) < 0)
                                close(fd);
                        else {
                                M.tcp_fd = fd;
                                M.tcp_addr = strdup(want_tcp);
                                log_info("metrics: serving GET /metrics on %s", want_tcp);
                        }
                }
        }
}

void metrics_start(manager *m, const daemon_config *cfg) {
        M.m = m;
        metrics_reconfigure(cfg);
}

void metrics_stop(void) {
        while (M.conns)
                conn_free(M.conns);
        if (M.unix_path)
                (void) unlink(M.unix_path);
        close_listener(&M.unix_fd, &M.unix_src, &M.unix_path);
        close_listener(&M.tcp_fd, &M.tcp_src, &M.tcp_addr);
        while (M.denials) {
                denial_count *d = M.denials;
                M.denials = d->next;
                free(d->sandbox), free(d->layer), free(d->rule), free(d);
        }
        while (M.started) {
                started_count *c = M.started;
                M.started = c->next;
                free(c->sandbox), free(c);
        }
        M.n_denials = 0;
        M.m = NULL;
}
