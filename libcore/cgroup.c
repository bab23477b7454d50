/* Session cgroups: layout detection (v1, v2, hybrid), sandboxd's parent
 * cgroups, and the create / limit / attach / kill / destroy cycle of one
 * session's cgroup, dispatched per hierarchy through an ops table as crun's
 * libcrun/cgroup*.c does.
 *
 * Where the session cgroups live (never at a hierarchy's root: the parent is
 * sandboxd's own cgroup from /proc/self/cgroup, its delegated subtree):
 *   v1 (each of pids, memory, cpu, freezer that is mounted):
 *        <mount>/<own>/sandboxd-sessions-<instance>/<name>
 *   v2:  <mount>/<own>/sandboxd-sessions-<instance>/<name>; sandboxd first
 *        moves the processes of <own> into <own>/supervisor, because a cgroup
 *        that enables controllers for its children may hold no processes
 *        itself. When <own> is the hierarchy's root (a hybrid host, a
 *        container's cgroup namespace) nothing moves (the root is exempt
 *        from that rule).
 * <instance> is a key derived from the daemon's state directory
 * (core_cgroup_instance_key). Two daemons can share <own> (a second daemon
 * with another --state-dir, a test run beside a live daemon); the key keeps
 * each one's start-up sweep (core_cgroup_remove_all_sessions) and its
 * session names away from the other's. "supervisor" is shared on purpose:
 * it holds only daemon processes, never a session, and no instance removes
 * or kills it, so moving processes into it harms no one.
 * On a hybrid host the v2 hierarchy carries no controllers; it is still used
 * for process tracking because it offers cgroup.kill. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include "libcore/cgroup.h"
#include "libcore/cgroup-systemd.h"
#include "libcore/log.h"
#include "libcore/util.h"

#define CGROUP_MAX_HIERARCHIES 8
/* Prefix of every instance's session parent; tools and tests find sessions
 * by it. */
#define SESSIONS_PREFIX "sandboxd-sessions"
#define SUPERVISOR_V2 "supervisor"
#define INSTANCE_KEY_MAX 32
/* Teardown bounds: the kernel removes exiting tasks asynchronously, so an
 * rmdir right after SIGKILL may see EBUSY for a few milliseconds. */
#define RETRY_STEP_MS 10
#define RETRY_TOTAL_MS 1000
#define KILL_ROUNDS 100

/* Controller bits for the v2 subtree_control mask. */
enum { CTL_PIDS = 1 << 0, CTL_MEMORY = 1 << 1, CTL_CPU = 1 << 2, CTL_ALL = 7 };

typedef struct hierarchy hierarchy;

typedef struct cgroup_ops {
        const char *name;
        /* Writes the limits named in `what` (CTL_* bits) that this
         * hierarchy carries; the others are left alone. */
        int (*set_limits)(const hierarchy *h, const char *dir, const core_cgroup_limits *l, unsigned what);
        int (*kill_all)(const char *dir);
} cgroup_ops;

struct hierarchy {
        const cgroup_ops *ops;
        char *controller; /* v1 controller name; NULL for v2 */
        char *parent;     /* absolute directory holding the session cgroups */
        unsigned v2_ctl;  /* v2: controllers enabled for the sessions */
};

struct core_cgroup {
        char *name;
        size_t n;
        char *dirs[CGROUP_MAX_HIERARCHIES]; /* one per state.h[i] */
        /* systemd driver: the scope unit, and the placeholder process that
         * holds it from its start until the session's first process is in
         * (a scope cannot start empty; systemd.scope(5)) */
        char *unit;
        pid_t holder;
        int holder_fd;
        /* memory.events (v2) or memory.oom_control (v1), kept open for
         * core_cgroup_oom_kills, which sandboxd asks at every command's
         * start: fd + 1, 0 until opened (set once, atomically). */
        int oom_fd1;
};

static core_cgroup_driver driver = CORE_CGROUP_CGROUPFS;
/* The xattr on a scope's cgroup naming the instance that made it, so a
 * start-up sweep never touches another daemon's sessions in the shared
 * slice (kernfs keeps trusted.* xattrs on cgroup directories). */
#define INSTANCE_XATTR "trusted.sandboxd.instance"
#define SCOPE_PREFIX "sandboxd-"
#define SCOPE_SUFFIX ".scope"

static struct {
        bool ready;
        char instance[INSTANCE_KEY_MAX + 1];
        core_cgroup_mode mode;
        size_t n;
        hierarchy h[CGROUP_MAX_HIERARCHIES];
} state;

/* The v1 controllers sessions use, in tracking-preference order. cpuset is
 * left out on purpose (a new cpuset cgroup needs cpus/mems copied before it
 * accepts a task and sandboxes have no pinning need), as are blkio and
 * devices (the sandbox gets no block devices; /dev is a private minimal tree). */
static const char *const v1_controllers[] = { "pids", "memory", "cpu", "freezer" };
/* Under the systemd driver on a v1 or hybrid host, systemd tracks units in
 * its named hierarchy (systemd-cgls, `systemctl status` read it there), so
 * session processes go there too. */
#define V1_SYSTEMD_NAMED "name=systemd"

/* Child cgroups a session may have (core_cgroup_attach_child): teardown
 * kills and removes these too. */
static const char *const session_children[] = { CORE_CGROUP_NETD, CORE_CGROUP_INIT };

/* The containers' child cgroups of session directory `dir`
 * (CORE_CGROUP_CTR_PREFIX + name, core_cgroup_container_create): fn on
 * each one's path; the first error of fn, after calling it on all. A
 * missing directory has none. */
static int for_each_ctr(const char *dir, int (*fn)(const char *path)) {
        DIR *d = opendir(dir);
        if (!d)
                return 0;
        int ret = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_type != DT_DIR || strncmp(e->d_name, CORE_CGROUP_CTR_PREFIX, strlen(CORE_CGROUP_CTR_PREFIX)) != 0)
                        continue;
                _cleanup_free_ char *p = NULL;
                if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) {
                        ret = ret ? ret : -ENOMEM;
                        continue;
                }
                int r = fn(p);
                if (r < 0 && r != -ENOENT && ret == 0)
                        ret = r;
        }
        closedir(d);
        return ret;
}

static int procs_nonempty(const char *path) {
        _cleanup_free_ char *f = NULL, *d = NULL;
        if (asprintf(&f, "%s/cgroup.procs", path) < 0)
                return -ENOMEM;
        int r = core_read_file(f, 16 << 20, &d, NULL);
        return r < 0 ? r : d[0] != '\0' ? -EBUSY : 0;
}

static void sleep_ms(int ms) {
        (void) poll(NULL, 0, ms);
}

static int write_file(const char *dir, const char *file, const char *value) {
        _cleanup_free_ char *p = NULL;
        if (asprintf(&p, "%s/%s", dir, file) < 0)
                return -ENOMEM;
        int r = core_write_string(p, value);
        if (r < 0)
                log_debug_errno(r, "cgroup: write '%s' to %s: %m", value, p);
        return r;
}

static int write_u64_or(const char *dir, const char *file, uint64_t v, const char *unlimited) {
        char buf[32];
        if (v == 0)
                return write_file(dir, file, unlimited);
        snprintf(buf, sizeof(buf), "%" PRIu64, v);
        return write_file(dir, file, buf);
}

/* SIGKILL to every pid in dir/cgroup.procs. With `wait`, re-read until
 * it stays empty (-EBUSY after KILL_ROUNDS): a process may fork between
 * the read and the kill, so one pass is not enough; the rounds are bounded
 * so a fork bomb without a pids limit cannot hold us forever. Without,
 * one read (core_cgroup_kill_now). */
static int kill_by_procs_wait(const char *dir, bool wait) {
        _cleanup_free_ char *procs = NULL;
        if (asprintf(&procs, "%s/cgroup.procs", dir) < 0)
                return -ENOMEM;
        for (int round = 0; round < KILL_ROUNDS; round++) {
                _cleanup_free_ char *data = NULL;
                int r = core_read_file(procs, 16 << 20, &data, NULL);
                if (r == -ENOENT)
                        return 0;
                if (r < 0)
                        return r;
                bool any = false;
                for (char *s = data, *end; *s; s = end) {
                        long pid = strtol(s, &end, 10);
                        if (end == s)
                                break;
                        if (pid > 0 && kill((pid_t) pid, SIGKILL) == 0)
                                any = true;
                }
                if (!any || !wait)
                        return 0;
                sleep_ms(RETRY_STEP_MS);
        }
        return -EBUSY;
}

static int kill_by_procs(const char *dir) {
        return kill_by_procs_wait(dir, true);
}

static int kill_by_procs_once(const char *dir) {
        return kill_by_procs_wait(dir, false);
}

/* v1 memory: memory.memsw.limit_in_bytes (swap accounting, when the kernel
 * has it) carries the same bound, so swap is no way around the limit. The
 * kernel requires memsw >= limit at every moment, so a raise writes memsw
 * first and a lowering writes it last; which one this is shows as EINVAL
 * from the first write. Lowering below the usage makes the kernel reclaim,
 * and when it cannot reclaim enough the write fails with EBUSY and the old
 * limit stays (mem_cgroup_resize_max; Documentation/admin-guide/
 * cgroup-v1/memory.rst, "Setting a limit lower than the usage"). */
static int v1_set_memory(const char *dir, uint64_t max) {
        int r = write_u64_or(dir, "memory.limit_in_bytes", max, "-1");
        if (r == -EINVAL) {
                r = write_u64_or(dir, "memory.memsw.limit_in_bytes", max, "-1");
                if (r < 0)
                        return r;
                r = write_u64_or(dir, "memory.limit_in_bytes", max, "-1");
        }
        if (r < 0)
                return r;
        r = write_u64_or(dir, "memory.memsw.limit_in_bytes", max, "-1");
        return r == -ENOENT ? 0 : r;
}

static int v1_set_limits(const hierarchy *h, const char *dir, const core_cgroup_limits *l, unsigned what) {
        if (streq(h->controller, "pids") && what & CTL_PIDS)
                return write_u64_or(dir, "pids.max", l->pids_max, "max");
        if (streq(h->controller, "memory") && what & CTL_MEMORY)
                return v1_set_memory(dir, l->memory_max);
        if (streq(h->controller, "cpu") && what & CTL_CPU) {
                int r = write_file(dir, "cpu.cfs_period_us", "100000");
                if (r < 0)
                        return r;
                /* percent of one CPU at a 100 ms period = pct * 1000 us */
                return write_u64_or(dir, "cpu.cfs_quota_us", (uint64_t) l->cpu_quota_pct * 1000, "-1");
        }
        return 0; /* freezer: no limit, used for stop/fork freezing */
}

static int v2_set_limits(const hierarchy *h, const char *dir, const core_cgroup_limits *l, unsigned what) {
        int r;
        what &= h->v2_ctl;
        if (what & CTL_PIDS && (r = write_u64_or(dir, "pids.max", l->pids_max, "max")) < 0)
                return r;
        if (what & CTL_MEMORY && (r = write_u64_or(dir, "memory.max", l->memory_max, "max")) < 0)
                return r;
        if (what & CTL_CPU) {
                char buf[48] = "max 100000";
                if (l->cpu_quota_pct)
                        snprintf(buf, sizeof(buf), "%u 100000", l->cpu_quota_pct * 1000);
                if ((r = write_file(dir, "cpu.max", buf)) < 0)
                        return r;
        }
        return 0;
}

/* cgroup.kill (Linux 5.14) kills the whole subtree atomically, forks
 * included; older kernels fall back to the procs loop. */
static int v2_kill_all_with(const char *dir, int (*fallback)(const char *)) {
        int r = write_file(dir, "cgroup.kill", "1");
        if (r == -ENOENT || r == -EINVAL || r == -EOPNOTSUPP)
                return fallback(dir);
        return r;
}

static int v2_kill_all(const char *dir) {
        return v2_kill_all_with(dir, kill_by_procs);
}

static const cgroup_ops ops_v1 = { "v1", v1_set_limits, kill_by_procs };
static const cgroup_ops ops_v2 = { "v2", v2_set_limits, v2_kill_all };

/* ---- detection ---- */

/* Finds our own path for a hierarchy in /proc/self/cgroup: `controller` is
 * a v1 controller name, or NULL for the v2 line ("0::/path"). */
static int own_path(const char *cgroup_file, const char *controller, char **ret) {
        _cleanup_free_ char *copy = strdup(cgroup_file);
        if (!copy)
                return -ENOMEM;
        char *save = NULL;
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *c1 = strchr(line, ':');
                char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = '\0';
                const char *ctls = c1 + 1, *path = c2 + 1;
                bool hit = false;
                if (!controller)
                        hit = strncmp(line, "0:", 2) == 0 && *ctls == '\0';
                else {
                        _cleanup_free_ char *list = strdup(ctls);
                        char *s2 = NULL;
                        for (char *t = list ? strtok_r(list, ",", &s2) : NULL; t && !hit;
                             t = strtok_r(NULL, ",", &s2))
                                hit = streq(t, controller);
                }
                if (hit) {
                        *ret = strdup(path);
                        return *ret ? 0 : -ENOMEM;
                }
        }
        return -ENOENT;
}

/* Parses one mountinfo line: is it a cgroup (v1) mount carrying
 * `controller`, or the cgroup2 mount when controller is NULL? On a hit
 * returns the mount point and the mount's root within the hierarchy. */
static bool mount_matches(char *line, const char *controller, char **ret_mnt, char **ret_root) {
        char *sep = strstr(line, " - ");
        if (!sep)
                return false;
        *sep = '\0';
        char *fields[5] = {}, *save = NULL, *t = strtok_r(line, " ", &save);
        for (int i = 0; t && i < 5; i++, t = strtok_r(NULL, " ", &save))
                fields[i] = t;
        char *fstype = strtok_r(sep + 3, " ", &save);
        strtok_r(NULL, " ", &save); /* source */
        char *super = strtok_r(NULL, " ", &save);
        if (!fields[4] || !fstype || !super)
                return false;
        bool hit = false;
        if (!controller)
                hit = streq(fstype, "cgroup2");
        else if (streq(fstype, "cgroup"))
                for (char *s2 = NULL, *o = strtok_r(super, ",", &s2); o && !hit; o = strtok_r(NULL, ",", &s2))
                        hit = streq(o, controller);
        if (hit) {
                *ret_mnt = fields[4];
                *ret_root = fields[3];
        }
        return hit;
}

/* Absolute directory of our own cgroup in one hierarchy, or -ENOENT when
 * that hierarchy is not mounted here. */
static int hierarchy_dir(const char *mountinfo, const char *cgroup_file, const char *controller,
                         char **ret, bool *ret_is_root) {
        _cleanup_free_ char *copy = strdup(mountinfo), *own = NULL;
        if (!copy)
                return -ENOMEM;
        int r = own_path(cgroup_file, controller, &own);
        if (r < 0)
                return r;
        /* A daemon started from inside an earlier instance's leaf (a
         * restart by a process that was moved with it) is already in
         * <own>/supervisor: <own> is still the delegated subtree. */
        size_t ol = strlen(own), sl = strlen("/" SUPERVISOR_V2);
        if (!controller && ol > sl && streq(own + ol - sl, "/" SUPERVISOR_V2))
                own[ol - sl] = '\0';
        char *save = NULL, *mnt = NULL, *root = NULL;
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
                if (mount_matches(line, controller, &mnt, &root))
                        break;
        if (!mnt)
                return -ENOENT;
        /* A mount of a sub-tree (bind-mounted cgroup dir in a container)
         * shows our path relative to its root. */
        const char *rel = own;
        size_t rl = strlen(root);
        if (!streq(root, "/") && strncmp(own, root, rl) == 0 && (own[rl] == '/' || own[rl] == '\0'))
                rel = own + rl;
        if (streq(rel, "/") || *rel == '\0')
                rel = "";
        *ret_is_root = *rel == '\0';
        return asprintf(ret, "%s%s", mnt, rel) < 0 ? -ENOMEM : 0;
}

static unsigned parse_controllers(const char *list) {
        static const struct { const char *name; unsigned bit; } table[] = {
                { "pids", CTL_PIDS }, { "memory", CTL_MEMORY }, { "cpu", CTL_CPU },
        };
        unsigned mask = 0;
        _cleanup_free_ char *copy = strdup(list ? list : "");
        char *save = NULL;
        for (char *t = copy ? strtok_r(copy, " \n", &save) : NULL; t; t = strtok_r(NULL, " \n", &save))
                for (size_t i = 0; i < ELEMENTSOF(table); i++)
                        if (streq(t, table[i].name))
                                mask |= table[i].bit;
        return mask;
}

static unsigned read_controllers(const char *dir, const char *file) {
        _cleanup_free_ char *p = NULL, *data = NULL;
        if (asprintf(&p, "%s/%s", dir, file) < 0 || core_read_file(p, 4096, &data, NULL) < 0)
                return 0;
        return parse_controllers(data);
}

/* Enables each wanted controller for the children of dir; one at a time so
 * a controller the kernel refuses costs only itself. Returns what is on. */
static unsigned enable_controllers(const char *dir, unsigned wanted) {
        static const char *const names[] = { "+pids", "+memory", "+cpu" };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (wanted & (1u << i))
                        (void) write_file(dir, "cgroup.subtree_control", names[i]);
        return read_controllers(dir, "cgroup.subtree_control") & wanted;
}

/* v2 "no internal processes": before <own> can enable controllers for
 * children it must be empty, so every process in it (sandboxd and anything
 * the service manager put beside it) moves to <own>/supervisor. */
static int v2_move_to_supervisor(const char *own) {
        _cleanup_free_ char *sup = NULL, *procs = NULL;
        if (asprintf(&sup, "%s/" SUPERVISOR_V2, own) < 0 || asprintf(&procs, "%s/cgroup.procs", own) < 0)
                return -ENOMEM;
        if (mkdir(sup, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        for (int round = 0; round < KILL_ROUNDS; round++) {
                _cleanup_free_ char *data = NULL;
                int r = core_read_file(procs, 1 << 20, &data, NULL);
                if (r < 0)
                        return r;
                if (!*data)
                        return 0;
                for (char *s = data, *end; *s; s = end) {
                        long pid = strtol(s, &end, 10);
                        if (end == s)
                                break;
                        char buf[24];
                        snprintf(buf, sizeof(buf), "%ld", pid);
                        r = write_file(sup, "cgroup.procs", buf);
                        if (r < 0 && r != -ESRCH)
                                return r;
                }
        }
        return -EBUSY;
}

/* Prepares the v2 parent: <own>/sandboxd-sessions-<instance> with the
 * controllers it can get. */
static int v2_prepare(char *own, bool own_is_root, hierarchy *h) {
        unsigned wanted = read_controllers(own, "cgroup.controllers");
        int r;
        /* Moved even when no controller is on offer (a hybrid host's
         * scratch subtree): the layout is then the same everywhere, and a
         * controller delegated later can be enabled without moving anyone.
         * Only a failed move that controllers need is fatal. */
        if (!own_is_root && (r = v2_move_to_supervisor(own)) < 0) {
                if (wanted)
                        return r;
                log_debug_errno(r, "cgroup: move into %s/" SUPERVISOR_V2 ": %m", own);
        }
        if (wanted)
                wanted = enable_controllers(own, wanted);
        if (asprintf(&h->parent, "%s/" SESSIONS_PREFIX "-%s", own, state.instance) < 0)
                return -ENOMEM;
        if (mkdir(h->parent, 0755) < 0 && errno != EEXIST)
                return negative_errno();
        h->v2_ctl = wanted ? enable_controllers(h->parent, wanted) : 0;
        h->ops = &ops_v2;
        return 0;
}

static void state_clear(void) {
        for (size_t i = 0; i < state.n; i++) {
                free(state.h[i].controller);
                free(state.h[i].parent);
        }
        memset(&state, 0, sizeof(state));
}

/* Adds the v1 hierarchies that are mounted; returns how many. */
static int add_v1(const char *mountinfo, const char *cgroup_file) {
        int found = 0;
        for (size_t i = 0; i < ELEMENTSOF(v1_controllers); i++) {
                _cleanup_free_ char *own = NULL;
                bool is_root;
                int r = hierarchy_dir(mountinfo, cgroup_file, v1_controllers[i], &own, &is_root);
                if (r == -ENOENT)
                        continue;
                if (r < 0)
                        return r;
                hierarchy *h = &state.h[state.n];
                h->ops = &ops_v1;
                h->controller = strdup(v1_controllers[i]);
                if (!h->controller || asprintf(&h->parent, "%s/" SESSIONS_PREFIX "-%s", own, state.instance) < 0)
                        return -ENOMEM;
                state.n++;
                if (mkdir(h->parent, 0755) < 0 && errno != EEXIST) {
                        /* A container's read-only controller mounts
                         * (systemd-nspawn on a v1 host) are not ours. */
                        if (errno != EROFS)
                                return negative_errno();
                        log_debug("cgroup: %s hierarchy is read-only, not used", v1_controllers[i]);
                        state.n--;
                        free(h->controller);
                        free(h->parent);
                        *h = (hierarchy) {};
                        continue;
                }
                found++;
        }
        return found;
}

/* A key becomes part of a directory name: letters, digits, '-' and '_'
 * only, so it can neither climb out of <own> nor collide with "supervisor". */
static bool instance_ok(const char *key) {
        if (!key || !*key || strlen(key) > INSTANCE_KEY_MAX)
                return false;
        for (const char *c = key; *c; c++)
                if (!(('a' <= *c && *c <= 'z') || ('A' <= *c && *c <= 'Z') || ('0' <= *c && *c <= '9') ||
                      *c == '-' || *c == '_'))
                        return false;
        return true;
}

int core_cgroup_instance_key(const char *state_dir, char **ret) {
        _cleanup_free_ char *abs = realpath(state_dir, NULL);
        if (!abs)
                return negative_errno();
        /* FNV-1a, 64 bit (Fowler/Noll/Vo, draft-eastlake-fnv): not a secret
         * or an authenticator, only a short stable name per directory. */
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (const unsigned char *c = (const unsigned char *) abs; *c; c++) {
                h ^= *c;
                h *= UINT64_C(0x100000001b3);
        }
        return asprintf(ret, "%016" PRIx64, h) < 0 ? -ENOMEM : 0;
}

void core_cgroup_set_driver(core_cgroup_driver d) {
        driver = d;
}

core_cgroup_driver core_cgroup_get_driver(void) {
        return driver;
}

const char *core_cgroup_driver_name(core_cgroup_driver d) {
        return d == CORE_CGROUP_SYSTEMD ? "systemd" : "cgroupfs";
}

/* One hierarchy of the systemd driver: its mount (mountinfo), writable,
 * with CORE_SYSTEMD_SLICE as the parent of the session scopes. A read-only
 * mount (systemd-nspawn mounts v1 controllers read-only) is left out:
 * systemd cannot make the scope there either. Returns 1 when added, 0 when
 * left out, or a negative errno. */
static int systemd_add(const char *mountinfo, const char *controller) {
        char synthetic[64];
        snprintf(synthetic, sizeof(synthetic), "%s:%s:/\n", controller ? "1" : "0", controller ? controller : "");
        _cleanup_free_ char *mnt = NULL;
        bool is_root;
        int r = hierarchy_dir(mountinfo, synthetic, controller, &mnt, &is_root);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        if (access(mnt, W_OK) < 0) {
                log_debug("cgroup: %s hierarchy at %s not writable, not used", controller ? controller : "v2", mnt);
                return 0;
        }
        hierarchy *h = &state.h[state.n];
        h->ops = controller ? &ops_v1 : &ops_v2;
        if ((controller && !(h->controller = strdup(controller))) ||
            asprintf(&h->parent, "%s/" CORE_SYSTEMD_SLICE, mnt) < 0)
                return -ENOMEM;
        if (!controller)
                h->v2_ctl = read_controllers(mnt, "cgroup.controllers");
        state.n++;
        return 1;
}

static int systemd_init(const char *mountinfo, sb_error **ret_err) {
        int r = core_systemd_check(ret_err);
        if (r < 0)
                return r;
        r = systemd_add(mountinfo, NULL);
        int nv1 = 0;
        for (size_t i = 0; r >= 0 && i <= ELEMENTSOF(v1_controllers); i++) {
                r = systemd_add(mountinfo, i < ELEMENTSOF(v1_controllers) ? v1_controllers[i] : V1_SYSTEMD_NAMED);
                nv1 += r > 0;
        }
        if (r < 0) {
                state_clear();
                return sb_error_set(ret_err, r, NULL, NULL, "cgroup: find the cgroup hierarchies: %s", strerror(-r));
        }
        if (state.n == 0)
                return sb_error_set(ret_err, -ENOMEDIUM, NULL, NULL, "cgroup: no writable cgroup hierarchy");
        state.mode = nv1 == 0 ? CORE_CGROUP_V2 : state.h[0].ops == &ops_v2 ? CORE_CGROUP_HYBRID : CORE_CGROUP_V1;
        state.ready = true;
        return 0;
}

int core_cgroup_init(const char *instance, sb_error **ret_err) {
        _cleanup_free_ char *mountinfo = NULL, *cgroup_file = NULL, *own2 = NULL;
        int r;

        state_clear();
        if (!instance_ok(instance))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "cgroup: invalid instance key '%s'",
                                    instance ? instance : "");
        snprintf(state.instance, sizeof(state.instance), "%s", instance);
        if ((r = core_read_file("/proc/self/mountinfo", 4 << 20, &mountinfo, NULL)) < 0 ||
            (r = core_read_file("/proc/self/cgroup", 1 << 20, &cgroup_file, NULL)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "cgroup: read /proc/self: %s", strerror(-r));

        if (driver == CORE_CGROUP_SYSTEMD)
                return systemd_init(mountinfo, ret_err);

        /* v2 first: when present it is the tracking hierarchy (cgroup.kill). */
        bool is_root = false;
        r = hierarchy_dir(mountinfo, cgroup_file, NULL, &own2, &is_root);
        if (r < 0 && r != -ENOENT)
                return sb_error_set(ret_err, r, NULL, NULL, "cgroup: find own v2 cgroup: %s", strerror(-r));
        bool have_v2 = r == 0;
        if (have_v2) {
                r = v2_prepare(own2, is_root, &state.h[0]);
                if (r < 0) {
                        free(state.h[0].parent);
                        state.h[0] = (hierarchy) {};
                        have_v2 = false;
                        log_debug_errno(r, "cgroup: v2 hierarchy at %s unusable: %m", own2);
                } else
                        state.n = 1;
        }
        int nv1 = add_v1(mountinfo, cgroup_file);
        if (nv1 < 0) {
                state_clear();
                return sb_error_set(ret_err, nv1, NULL, NULL, "cgroup: prepare v1 hierarchies: %s",
                                    strerror(-nv1));
        }
        if (state.n == 0)
                return sb_error_set(ret_err, -ENOMEDIUM, NULL, NULL, "cgroup: no usable cgroup hierarchy");
        state.mode = nv1 == 0 ? CORE_CGROUP_V2 : have_v2 ? CORE_CGROUP_HYBRID : CORE_CGROUP_V1;
        state.ready = true;
        return 0;
}

core_cgroup_mode core_cgroup_get_mode(void) {
        return state.mode;
}

const char *core_cgroup_mode_name(core_cgroup_mode m) {
        switch (m) {
        case CORE_CGROUP_V1: return "v1";
        case CORE_CGROUP_V2: return "v2";
        case CORE_CGROUP_HYBRID: return "hybrid";
        }
        return "unknown";
}

/* ---- one session ---- */

static bool name_ok(const char *name) {
        return name && *name && strlen(name) < 200 && !strchr(name, '/') && !streq(name, ".") &&
               !streq(name, "..");
}

static int cgroup_new(const char *name, core_cgroup **ret) {
        _cleanup_(core_cgroup_freep) core_cgroup *cg = calloc(1, sizeof(*cg));
        if (!cg)
                return -ENOMEM;
        cg->holder_fd = -1;
        if (!(cg->name = strdup(name)))
                return -ENOMEM;
        if (driver == CORE_CGROUP_SYSTEMD && asprintf(&cg->unit, SCOPE_PREFIX "%s" SCOPE_SUFFIX, name) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < state.n; i++) {
                if (cg->unit ? asprintf(&cg->dirs[i], "%s/%s", state.h[i].parent, cg->unit) < 0
                             : asprintf(&cg->dirs[i], "%s/%s", state.h[i].parent, name) < 0)
                        return -ENOMEM;
                cg->n++;
        }
        *ret = TAKE_PTR(cg);
        return 0;
}

/* Does the cgroup at `dir` hold a process, its subtree included? v2 says so
 * in cgroup.events ("populated"); v1 has no such file, so the directory's
 * own cgroup.procs and those of its known children (session_children)
 * answer. A missing directory is empty. Returns 1, 0 or a negative errno. */
static int populated(const char *dir) {
        _cleanup_free_ char *events = NULL, *procs = NULL, *data = NULL;
        if (asprintf(&events, "%s/cgroup.events", dir) < 0 || asprintf(&procs, "%s/cgroup.procs", dir) < 0)
                return -ENOMEM;
        int r = core_read_file(events, 1 << 16, &data, NULL);
        if (r >= 0)
                return strstr(data, "populated 1") != NULL;
        if (r != -ENOENT)
                return r;
        r = core_read_file(procs, 16 << 20, &data, NULL);
        if (r == -ENOENT)
                return 0;
        if (r < 0 || data[0] != '\0')
                return r < 0 ? r : 1;
        for (size_t i = 0; i < ELEMENTSOF(session_children); i++) {
                _cleanup_free_ char *sub = NULL, *d = NULL;
                if (asprintf(&sub, "%s/%s/cgroup.procs", dir, session_children[i]) < 0)
                        return -ENOMEM;
                r = core_read_file(sub, 16 << 20, &d, NULL);
                if (r >= 0 && d[0] != '\0')
                        return 1;
                if (r < 0 && r != -ENOENT)
                        return r;
        }
        r = for_each_ctr(dir, procs_nonempty);
        return r == -EBUSY ? 1 : r;
}

/* Ends the scope's placeholder and reaps it. SIGKILL rather than waiting
 * for EOF: it has nothing to finish, and the reap then cannot wait. */
static void release_holder(core_cgroup *cg) {
        if (cg->holder_fd >= 0)
                close(cg->holder_fd);
        cg->holder_fd = -1;
        if (cg->holder > 0) {
                (void) kill(cg->holder, SIGKILL);
                while (waitpid(cg->holder, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        cg->holder = 0;
}

/* The placeholder: a child that waits for EOF on a pipe whose write end
 * only the daemon holds, so it also goes when the daemon dies. It keeps
 * no other descriptor: fork copies them all, CLOEXEC or not, and a
 * placeholder holding another's write end would keep that one alive.
 * Only async-signal-safe calls after fork (the daemon is multi-threaded). */
static int spawn_holder(core_cgroup *cg) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();
        pid_t pid = fork();
        if (pid < 0) {
                int r = negative_errno();
                close(p[0]);
                close(p[1]);
                return r;
        }
        if (pid == 0) {
                sigset_t none;
                sigemptyset(&none);
                (void) sigprocmask(SIG_SETMASK, &none, NULL);
                if (dup2(p[0], STDIN_FILENO) < 0)
                        _exit(1);
                (void) close_range(STDIN_FILENO + 1, ~0U, 0);
                char c;
                while (read(STDIN_FILENO, &c, 1) < 0 && errno == EINTR)
                        ;
                _exit(0);
        }
        close(p[0]);
        cg->holder = pid;
        cg->holder_fd = p[1];
        return 0;
}

/* The systemd driver's create: the scope starts with the placeholder in
 * it, then the session's first process is born in it
 * (core_cgroup_open_v2, clone3) or attached, which releases the holder. */
static int systemd_create(core_cgroup *cg, const core_cgroup_limits *limits, sb_error **ret_err) {
        static const core_cgroup_limits none = {};
        int r = spawn_holder(cg);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': fork the scope's first process: %s",
                                    cg->name, strerror(-r));
        _cleanup_free_ char *desc = NULL;
        if (asprintf(&desc, "sandboxd sandbox %s (instance %s)", cg->name, state.instance) < 0) {
                release_holder(cg);
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        }
        r = core_systemd_start_scope(cg->unit, desc, cg->holder, limits ? limits : &none, ret_err);
        if (r == -EEXIST)
                sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': the unit %s already exists (a session of that "
                             "name is running)", cg->name, cg->unit);
        if (r < 0) {
                (void) kill(cg->holder, SIGKILL);
                release_holder(cg);
                return sb_error_prefix(ret_err, "cgroup '%s'", cg->name);
        }
        if (lsetxattr(cg->dirs[0], INSTANCE_XATTR, state.instance, strlen(state.instance), 0) < 0)
                log_debug("cgroup: set %s on %s: %m", INSTANCE_XATTR, cg->dirs[0]);
        for (size_t i = 0; i < cg->n; i++)
                if (access(cg->dirs[i], F_OK) < 0) {
                        r = negative_errno();
                        sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': systemd started %s but made no %s: %s",
                                     cg->name, cg->unit, cg->dirs[i], strerror(-r));
                        (void) core_cgroup_kill_all(cg);
                        (void) core_cgroup_destroy(cg);
                        return r;
                }
        return 0;
}

int core_cgroup_create(const char *name, const core_cgroup_limits *limits, core_cgroup **ret,
                       sb_error **ret_err) {
        static const core_cgroup_limits none = {};
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        int r;

        if (!name_ok(name))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "cgroup: invalid name '%s'", name ? name : "");
        if (!state.ready)
                return sb_error_set(ret_err, -ESTALE, NULL, NULL, "cgroup: core_cgroup_init() was not called");
        if ((r = cgroup_new(name, &cg)) < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': %s", name, strerror(-r));
        /* An empty leftover (a crash of this instance) may be reused. One
         * with processes is a live session: sharing it would let one
         * session's limits, freeze and kill hit the other, so refuse, and
         * leave it exactly as it is. */
        for (size_t i = 0; i < cg->n; i++)
                if ((r = populated(cg->dirs[i])) != 0) {
                        if (r > 0)
                                return sb_error_set(ret_err, -EEXIST, NULL, NULL,
                                                    "cgroup '%s': %s already exists and has processes in it "
                                                    "(a session of that name is running)",
                                                    name, cg->dirs[i]);
                        return sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': read %s: %s", name,
                                            cg->dirs[i], strerror(-r));
                }
        if (cg->unit) {
                if ((r = systemd_create(cg, limits, ret_err)) < 0)
                        return r;
                *ret = TAKE_PTR(cg);
                return 0;
        }
        for (size_t i = 0; i < cg->n; i++) {
                if (mkdir(cg->dirs[i], 0755) < 0 && errno != EEXIST)
                        r = negative_errno();
                else
                        r = state.h[i].ops->set_limits(&state.h[i], cg->dirs[i], limits ? limits : &none, CTL_ALL);
                if (r < 0) {
                        sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': set up %s: %s", name, cg->dirs[i],
                                     strerror(-r));
                        (void) core_cgroup_destroy(cg);
                        return r;
                }
        }
        *ret = TAKE_PTR(cg);
        return 0;
}

/* Writes the limits in `what` in every hierarchy, stopping at the first
 * failure, whose directory goes to *ret_dir. */
static int apply_limits(core_cgroup *cg, const core_cgroup_limits *l, unsigned what, const char **ret_dir) {
        for (size_t i = 0; i < cg->n; i++) {
                int r = state.h[i].ops->set_limits(&state.h[i], cg->dirs[i], l, what);
                if (r < 0) {
                        if (ret_dir)
                                *ret_dir = cg->dirs[i];
                        return r;
                }
        }
        return 0;
}

/* Reads the session's memory-controller file: `v2` on the v2 hierarchy
 * when it has the memory controller, else `v1` on the v1 memory
 * hierarchy; at most `max` bytes into *ret (caller frees). -ENOENT
 * without a memory hierarchy. */
static int read_memory_file(const core_cgroup *cg, const char *v2, const char *v1, size_t max, char **ret) {
        for (size_t i = 0; cg && i < cg->n; i++) {
                const hierarchy *h = &state.h[i];
                const char *file = h->ops == &ops_v2 ? (h->v2_ctl & CTL_MEMORY ? v2 : NULL)
                                   : h->controller && streq(h->controller, "memory") ? v1
                                   : NULL;
                _cleanup_free_ char *path = NULL;
                if (!file)
                        continue;
                if (asprintf(&path, "%s/%s", cg->dirs[i], file) < 0)
                        return -ENOMEM;
                return core_read_file(path, max, ret, NULL);
        }
        return -ENOENT;
}

/* The memory limit the kernel holds for the session now (v2 memory.max,
 * v1 memory.limit_in_bytes), 0 for unlimited; -ENOENT without a memory
 * hierarchy. */
static int read_memory_max(const core_cgroup *cg, uint64_t *ret) {
        _cleanup_free_ char *data = NULL;
        int r = read_memory_file(cg, "memory.max", "memory.limit_in_bytes", 64, &data);
        if (r < 0)
                return r;
        /* v1 shows "unlimited" as PAGE_COUNTER_MAX pages in bytes. */
        unsigned long long v = strtoull(data, NULL, 10);
        *ret = strncmp(data, "max", 3) == 0 || v >= (1ULL << 62) ? 0 : v;
        return 0;
}

/* The systemd driver's update: SetUnitProperties, then (systemd applies
 * them from its own loop, and logs rather than returns what the kernel
 * refused) a bounded wait until the kernel holds the new memory limit; if
 * it does not (v1, usage above it), the old properties go back and the
 * answer is -EBUSY, as with cgroupfs. */
static int systemd_update(core_cgroup *cg, const core_cgroup_limits *old, const core_cgroup_limits *limits,
                          sb_error **ret_err) {
        int r = core_systemd_set_limits(cg->unit, limits, ret_err);
        if (r < 0)
                return sb_error_prefix(ret_err, "cgroup '%s'", cg->name);
        uint64_t now = 0;
        for (int waited = 0; waited < RETRY_TOTAL_MS; waited += RETRY_STEP_MS) {
                if ((r = read_memory_max(cg, &now)) < 0 || now == limits->memory_max)
                        return 0;
                sleep_ms(RETRY_STEP_MS);
        }
        (void) core_systemd_set_limits(cg->unit, old, NULL);
        return sb_error_set(ret_err, -EBUSY, NULL, NULL,
                            "cgroup '%s': the session uses more memory than the new limit of %" PRIu64
                            " MiB and the kernel could not reclaim enough",
                            cg->name, limits->memory_max >> 20);
}

int core_cgroup_update(core_cgroup *cg, const core_cgroup_limits *old, const core_cgroup_limits *limits,
                       sb_error **ret_err) {
        const char *dir = "?";
        if (cg->unit)
                return systemd_update(cg, old, limits, ret_err);
        /* Memory first: it is the one limit the kernel may refuse (v1, usage
         * above the new limit), and then nothing else has changed yet. A
         * later failure puts the old values back, so the session never runs
         * under half of an update. */
        int r = apply_limits(cg, limits, CTL_MEMORY, &dir);
        if (r >= 0 && (r = apply_limits(cg, limits, CTL_CPU | CTL_PIDS, &dir)) < 0)
                (void) apply_limits(cg, old, CTL_ALL, NULL);
        else if (r < 0)
                (void) apply_limits(cg, old, CTL_MEMORY, NULL);
        if (r == -EBUSY)
                return sb_error_set(ret_err, r, NULL, NULL,
                                    "cgroup '%s': the session uses more memory than the new limit of %" PRIu64
                                    " MiB and the kernel could not reclaim enough",
                                    cg->name, limits->memory_max >> 20);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': set limits in %s: %s", cg->name, dir,
                                    strerror(-r));
        return 0;
}

/* Whether the session's processes live in its leaf CORE_CGROUP_INIT in
 * hierarchy i rather than in the session's directory: on a v2 hierarchy
 * that carries controllers, so that the session can enable them for its
 * containers' child cgroups (the "no internal processes" rule of
 * Documentation/admin-guide/cgroup-v2.rst: a cgroup that enables
 * controllers in cgroup.subtree_control holds no process itself). Not
 * under the systemd driver (the scope's directory is systemd's to
 * arrange), nor on v1 hierarchies or a hybrid host's controller-less v2
 * one, where the rule does not apply. */
static bool v2_leaf(const core_cgroup *cg, size_t i) {
        return i < state.n && state.h[i].ops == &ops_v2 && state.h[i].v2_ctl && !cg->unit;
}

/* The directory the session's own processes go to in hierarchy i (the
 * leaf made when missing), or NULL when out of memory or it cannot be
 * made (errno set). Caller frees. */
static char *process_dir(const core_cgroup *cg, size_t i) {
        char *d = NULL;
        if (!v2_leaf(cg, i))
                return strdup(cg->dirs[i]);
        if (asprintf(&d, "%s/%s", cg->dirs[i], CORE_CGROUP_INIT) < 0)
                return NULL;
        if (mkdir(d, 0755) < 0 && errno != EEXIST) {
                int e = errno;
                free(d);
                errno = e;
                return NULL;
        }
        return d;
}

static int attach(core_cgroup *cg, pid_t pid, bool skip_v2, sb_error **ret_err) {
        char buf[24];
        snprintf(buf, sizeof(buf), "%d", (int) pid);
        for (size_t i = 0; i < cg->n; i++) {
                if (skip_v2 && state.h[i].ops == &ops_v2)
                        continue;
                _cleanup_free_ char *dir = process_dir(cg, i);
                if (!dir)
                        return sb_error_set(ret_err, errno ? negative_errno() : -ENOMEM, NULL, NULL,
                                            "cgroup '%s': make the leaf %s/%s: %m", cg->name, cg->dirs[i],
                                            CORE_CGROUP_INIT);
                int r = write_file(dir, "cgroup.procs", buf);
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': move pid %d into %s: %s",
                                            cg->name, (int) pid, dir, strerror(-r));
        }
        /* The session's first process holds the scope now. */
        release_holder(cg);
        return 0;
}

int core_cgroup_attach(core_cgroup *cg, pid_t pid, sb_error **ret_err) {
        return attach(cg, pid, false, ret_err);
}

int core_cgroup_attach_v1(core_cgroup *cg, pid_t pid, sb_error **ret_err) {
        return attach(cg, pid, true, ret_err);
}

/* Writes "0" (the calling thread) into the `tasks` file of each v1 dir in
 * dirs[] (the v2 hierarchy skipped), stopping at the first failure.
 * Returns 0, or its negative errno with *ret_failed naming that dir. */
static int move_self_v1(char *const *dirs, size_t n, const char **ret_failed) {
        for (size_t i = 0; i < n; i++) {
                if (state.h[i].ops == &ops_v2)
                        continue;
                int r = write_file(dirs[i], "tasks", "0");
                if (r < 0) {
                        *ret_failed = dirs[i];
                        return r;
                }
        }
        return 0;
}

/* core_cgroup_run_inside_v1 into the session's cgroups (child NULL) or
 * into its child cgroup `child` (made by core_cgroup_make_child). */
static int run_inside_v1(core_cgroup *cg, const char *child, int (*fn)(void *userdata), void *userdata,
                         bool *ret_inside, sb_error **ret_err) {
        /* The daemon's own v1 cgroup, where its threads live: the parent
         * of the sessions' directory (add_v1). */
        char *own[CGROUP_MAX_HIERARCHIES] = {}, *into[CGROUP_MAX_HIERARCHIES] = {};
        size_t n = cg->n < state.n ? cg->n : state.n;
        /* systemd driver: its attach releases the scope's holder; a
         * session's child cgroup is in the scope, whose v1 parents are
         * not the daemon's own (the thread could not come back to them):
         * only the session's own cgroups, and only before that release. */
        bool usable = cg->holder <= 0 && !(child && cg->unit), any = false;
        const char *failed = NULL;
        *ret_inside = false;
        for (size_t i = 0; i < n && usable; i++) {
                if (state.h[i].ops == &ops_v2)
                        continue;
                const char *slash = strrchr(state.h[i].parent, '/');
                own[i] = slash ? strndup(state.h[i].parent, (size_t)(slash - state.h[i].parent)) : NULL;
                if (cg->dirs[i] && child && asprintf(&into[i], "%s/%s", cg->dirs[i], child) < 0)
                        into[i] = NULL;
                else if (cg->dirs[i] && !child)
                        into[i] = strdup(cg->dirs[i]);
                usable = own[i] && into[i];
                any = true;
        }
        if (usable && any) {
                int r = move_self_v1(into, n, &failed);
                if (r >= 0)
                        *ret_inside = true;
                else {
                        log_debug_errno(r, "cgroup '%s': move the spawning thread into %s: %m", cg->name, failed);
                        (void)move_self_v1(own, n, &failed); /* back where it was; the caller migrates */
                }
        }
        int ret = fn(userdata);
        if (*ret_inside) {
                int r = move_self_v1(own, n, &failed);
                if (r < 0)
                        ret = sb_error_set(ret_err, r, NULL, NULL,
                                           "cgroup '%s': move the spawning thread back into %s: %s", cg->name,
                                           failed, strerror(-r));
        }
        for (size_t i = 0; i < n; i++) {
                free(own[i]);
                free(into[i]);
        }
        return ret;
}

int core_cgroup_run_inside_v1(core_cgroup *cg, int (*fn)(void *userdata), void *userdata, bool *ret_inside,
                              sb_error **ret_err) {
        return run_inside_v1(cg, NULL, fn, userdata, ret_inside, ret_err);
}

static bool known_child(const char *child) {
        for (size_t i = 0; i < ELEMENTSOF(session_children); i++)
                if (child && streq(child, session_children[i]))
                        return true;
        return false;
}

int core_cgroup_make_child(core_cgroup *cg, const char *child, int *ret_v2_fd, sb_error **ret_err) {
        bool v2 = false;
        *ret_v2_fd = -EBADF;
        if (!known_child(child))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "cgroup '%s': no child cgroup '%s'",
                                    cg->name, child ? child : "");
        for (size_t i = 0; i < cg->n; i++) {
                _cleanup_free_ char *dir = NULL;
                if (asprintf(&dir, "%s/%s", cg->dirs[i], child) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                if (mkdir(dir, 0755) < 0 && errno != EEXIST)
                        return sb_error_set(ret_err, negative_errno(), NULL, NULL, "cgroup '%s': create %s: %m",
                                            cg->name, dir);
                /* Under the systemd driver the process is attached, as
                 * before (core_cgroup_attach_child): no CLONE_INTO_CGROUP
                 * into the scope. */
                v2 = v2 || (i < state.n && state.h[i].ops == &ops_v2);
                if (i < state.n && state.h[i].ops == &ops_v2 && !cg->unit && *ret_v2_fd < 0) {
                        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        if (fd < 0)
                                return sb_error_set(ret_err, negative_errno(), NULL, NULL,
                                                    "cgroup '%s': open %s: %m", cg->name, dir);
                        *ret_v2_fd = fd;
                }
        }
        return v2 && *ret_v2_fd < 0 ? 1 : 0;
}

int core_cgroup_run_inside_child_v1(core_cgroup *cg, const char *child, int (*fn)(void *userdata),
                                    void *userdata, bool *ret_inside, sb_error **ret_err) {
        if (!known_child(child)) {
                *ret_inside = false;
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "cgroup '%s': no child cgroup '%s'",
                                    cg->name, child ? child : "");
        }
        return run_inside_v1(cg, child, fn, userdata, ret_inside, ret_err);
}

static bool known_child(const char *child);

/* core_cgroup_attach_child in every hierarchy, or in the v1 ones only. */
static int attach_child(core_cgroup *cg, const char *child, pid_t pid, bool v1_only, sb_error **ret_err) {
        if (!known_child(child))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "cgroup '%s': no child cgroup '%s'",
                                    cg->name, child ? child : "");
        char buf[24];
        snprintf(buf, sizeof(buf), "%d", (int) pid);
        for (size_t i = 0; i < cg->n; i++) {
                if (v1_only && i < state.n && state.h[i].ops == &ops_v2)
                        continue;
                _cleanup_free_ char *dir = NULL;
                if (asprintf(&dir, "%s/%s", cg->dirs[i], child) < 0)
                        return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                int r = mkdir(dir, 0755) < 0 && errno != EEXIST ? negative_errno() : 0;
                if (r >= 0)
                        r = write_file(dir, "cgroup.procs", buf);
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "cgroup '%s': move pid %d into %s: %s",
                                            cg->name, (int) pid, dir, strerror(-r));
        }
        return 0;
}

int core_cgroup_attach_child(core_cgroup *cg, const char *child, pid_t pid, sb_error **ret_err) {
        return attach_child(cg, child, pid, false, ret_err);
}

int core_cgroup_attach_child_v1(core_cgroup *cg, const char *child, pid_t pid, sb_error **ret_err) {
        return attach_child(cg, child, pid, true, ret_err);
}

int core_cgroup_open_v2(const core_cgroup *cg) {
        for (size_t i = 0; cg && i < cg->n; i++)
                if (state.h[i].ops == &ops_v2) {
                        _cleanup_free_ char *dir = process_dir(cg, i);
                        if (!dir)
                                return errno ? negative_errno() : -ENOMEM;
                        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        return fd < 0 ? negative_errno() : fd;
                }
        return -ENOENT;
}

/* Polls a cgroup file until it holds `want` (a prefix match), up to 2 s. */
static int wait_for_value(const char *dir, const char *file, const char *want) {
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s/%s", dir, file) < 0)
                return -ENOMEM;
        for (int i = 0; i < 400; i++) {
                char buf[256] = "";
                _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        return negative_errno();
                ssize_t n = read(fd, buf, sizeof(buf) - 1);
                if (n < 0)
                        return negative_errno();
                buf[n] = 0;
                if (strstr(buf, want))
                        return 0;
                sleep_ms(5);
        }
        return -ETIMEDOUT;
}

int core_cgroup_freeze(core_cgroup *cg, bool frozen) {
        /* v2 first: cgroup.freeze reports completion in cgroup.events. */
        for (size_t i = 0; cg && i < cg->n; i++)
                if (state.h[i].ops == &ops_v2) {
                        _cleanup_free_ char *f = NULL;
                        if (asprintf(&f, "%s/cgroup.freeze", cg->dirs[i]) < 0)
                                return -ENOMEM;
                        if (access(f, F_OK) < 0)
                                break;
                        int r = write_file(cg->dirs[i], "cgroup.freeze", frozen ? "1" : "0");
                        if (r < 0)
                                return r;
                        return wait_for_value(cg->dirs[i], "cgroup.events", frozen ? "frozen 1" : "frozen 0");
                }
        for (size_t i = 0; cg && i < cg->n; i++)
                if (state.h[i].controller && streq(state.h[i].controller, "freezer")) {
                        int r = write_file(cg->dirs[i], "freezer.state", frozen ? "FROZEN" : "THAWED");
                        if (r < 0)
                                return r;
                        return wait_for_value(cg->dirs[i], "freezer.state", frozen ? "FROZEN" : "THAWED");
                }
        return -ENOTSUP;
}

int core_cgroup_frozen(core_cgroup *cg) {
        for (size_t i = 0; cg && i < cg->n; i++) {
                const char *file = state.h[i].ops == &ops_v2 ? "cgroup.freeze"
                                   : state.h[i].controller && streq(state.h[i].controller, "freezer") ? "freezer.state"
                                   : NULL;
                _cleanup_free_ char *path = NULL;
                if (!file || asprintf(&path, "%s/%s", cg->dirs[i], file) < 0)
                        continue;
                char buf[64] = "";
                _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
                ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
                if (n <= 0)
                        continue;
                buf[n] = 0;
                /* v2: "1"; v1: FROZEN or FREEZING (a freeze under way). */
                if (state.h[i].ops == &ops_v2 ? buf[0] == '1' : strncmp(buf, "THAWED", 6) != 0)
                        return 1;
        }
        return 0;
}

int core_cgroup_parse_oom_kills(const char *text, uint64_t *ret) {
        static const char key[] = "oom_kill ";
        for (const char *line = text, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                if (strncmp(line, key, strlen(key)) != 0)
                        continue;
                const char *v = line + strlen(key);
                char *end = NULL;
                if (!isdigit((unsigned char)*v))
                        return -EBADMSG;
                errno = 0;
                unsigned long long n = strtoull(v, &end, 10);
                if (errno || (*end && *end != '\n'))
                        return -EBADMSG;
                *ret = n;
                return 0;
        }
        return -ENODATA;
}

int core_cgroup_oom_kills(const core_cgroup *cg, uint64_t *ret) {
        if (!cg)
                return -ENOENT;
        /* The fd is a cache of the handle, not part of its value: set once
         * whatever thread asks first. */
        int *slot = &((core_cgroup *)cg)->oom_fd1;
        int fd = __atomic_load_n(slot, __ATOMIC_ACQUIRE) - 1;
        if (fd < 0) {
                fd = -ENOENT;
                for (size_t i = 0; i < cg->n; i++) {
                        const hierarchy *h = &state.h[i];
                        const char *file = h->ops == &ops_v2 ? (h->v2_ctl & CTL_MEMORY ? "memory.events" : NULL)
                                           : h->controller && streq(h->controller, "memory") ? "memory.oom_control"
                                           : NULL;
                        _cleanup_free_ char *path = NULL;
                        if (!file)
                                continue;
                        if (asprintf(&path, "%s/%s", cg->dirs[i], file) < 0)
                                return -ENOMEM;
                        fd = open(path, O_RDONLY | O_CLOEXEC);
                        if (fd < 0)
                                return negative_errno();
                        break;
                }
                if (fd < 0)
                        return fd;
                int expected = 0;
                if (!__atomic_compare_exchange_n(slot, &expected, fd + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                        close(fd);
                        fd = expected - 1;
                }
        }
        char data[4096];
        ssize_t n = pread(fd, data, sizeof(data) - 1, 0);
        if (n < 0)
                return negative_errno();
        data[n] = 0;
        return core_cgroup_parse_oom_kills(data, ret);
}

/* The number alone in `dir`/`file` (pids.current, memory.current, ...), or
 * the value of the `key` line of a flat-keyed file (cpu.stat). */
static int read_u64(const char *dir, const char *file, const char *key, uint64_t *ret) {
        _cleanup_free_ char *path = NULL, *data = NULL;
        if (asprintf(&path, "%s/%s", dir, file) < 0)
                return -ENOMEM;
        int r = core_read_file(path, 16384, &data, NULL);
        if (r < 0)
                return r;
        const char *v = data;
        if (key) {
                size_t kl = strlen(key);
                for (v = data; v; v = strchr(v, '\n') ? strchr(v, '\n') + 1 : NULL)
                        if (strncmp(v, key, kl) == 0 && v[kl] == ' ')
                                break;
                if (!v)
                        return -ENODATA;
                v += strlen(key) + 1;
        }
        char *end;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || end == v || (*end && *end != '\n'))
                return -EBADMSG;
        *ret = n;
        return 0;
}

int core_cgroup_read_usage(const core_cgroup *cg, core_cgroup_usage *ret) {
        core_cgroup_usage u = { .cpu_usec = UINT64_MAX, .memory_bytes = UINT64_MAX,
                                .memory_peak_bytes = UINT64_MAX, .pids = UINT64_MAX };
        for (size_t i = 0; cg && i < cg->n; i++) {
                const hierarchy *h = &state.h[i];
                const char *dir = cg->dirs[i];
                uint64_t n;
                if (h->ops == &ops_v2) {
                        /* cpu.stat's usage_usec is there with or without the cpu
                         * controller (cgroup-v2.rst "cpu.stat"). */
                        if (u.cpu_usec == UINT64_MAX && read_u64(dir, "cpu.stat", "usage_usec", &n) == 0)
                                u.cpu_usec = n;
                        if (h->v2_ctl & CTL_MEMORY) {
                                if (read_u64(dir, "memory.current", NULL, &n) == 0)
                                        u.memory_bytes = n;
                                if (read_u64(dir, "memory.peak", NULL, &n) == 0) /* Linux 5.19 */
                                        u.memory_peak_bytes = n;
                        }
                        if (h->v2_ctl & CTL_PIDS && read_u64(dir, "pids.current", NULL, &n) == 0)
                                u.pids = n;
                } else if (h->controller && streq(h->controller, "memory")) {
                        if (read_u64(dir, "memory.usage_in_bytes", NULL, &n) == 0)
                                u.memory_bytes = n;
                        if (read_u64(dir, "memory.max_usage_in_bytes", NULL, &n) == 0)
                                u.memory_peak_bytes = n;
                } else if (h->controller && streq(h->controller, "pids")) {
                        if (read_u64(dir, "pids.current", NULL, &n) == 0)
                                u.pids = n;
                } else if (h->controller && streq(h->controller, "cpu")) {
                        /* cpu,cpuacct mounted together: nanoseconds. */
                        if (read_u64(dir, "cpuacct.usage", NULL, &n) == 0)
                                u.cpu_usec = n / 1000;
                }
        }
        *ret = u;
        return 0;
}

int core_cgroup_peak_reset(const core_cgroup *cg, int *ret_fd) {
        *ret_fd = -EBADF;
        for (size_t i = 0; cg && i < cg->n; i++) {
                const hierarchy *h = &state.h[i];
                const char *dir = cg->dirs[i];
                if (h->ops == &ops_v2 && (h->v2_ctl & CTL_MEMORY)) {
                        _cleanup_free_ char *path = NULL;
                        if (asprintf(&path, "%s/memory.peak", dir) < 0)
                                return -ENOMEM;
                        /* Before Linux 6.12 the file is read-only (0444):
                         * open for writing fails, and there is no reset. */
                        int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
                        if (fd < 0)
                                return errno == ENOENT || errno == EACCES || errno == EPERM ? -EOPNOTSUPP
                                                                                             : negative_errno();
                        if (write(fd, "reset\n", 6) != 6) {
                                int r = errno == EINVAL ? -EOPNOTSUPP : negative_errno();
                                close(fd);
                                return r;
                        }
                        *ret_fd = fd;
                        return 0;
                }
                if (h->ops != &ops_v2 && h->controller && streq(h->controller, "memory"))
                        return write_file(dir, "memory.max_usage_in_bytes", "0");
        }
        return -ENODATA;
}

int core_cgroup_peak_read(int fd, uint64_t *ret) {
        char buf[32];
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n < 0)
                return negative_errno();
        buf[n] = '\0';
        char *end;
        errno = 0;
        unsigned long long v = strtoull(buf, &end, 10);
        if (errno || end == buf || (*end && *end != '\n'))
                return -EBADMSG;
        *ret = v;
        return 0;
}

/* A container's cgroup thawed after its kill (container.pause froze it):
 * whichever freezer file the hierarchy has. */
static int thaw_ctr(const char *path) {
        _cleanup_free_ char *v2 = NULL, *v1 = NULL;
        if (asprintf(&v2, "%s/cgroup.freeze", path) < 0 || asprintf(&v1, "%s/freezer.state", path) < 0)
                return -ENOMEM;
        if (access(v2, F_OK) == 0)
                (void)write_file(path, "cgroup.freeze", "0");
        if (access(v1, F_OK) == 0)
                (void)write_file(path, "freezer.state", "THAWED");
        return 0;
}

static int kill_all(core_cgroup *cg, bool wait) {
        int ret = 0;
        int (*sweep)(const char *) = wait ? kill_by_procs : kill_by_procs_once;
        release_holder(cg);
        /* The tracking hierarchy first (atomic cgroup.kill when v2), then a
         * sweep of the others in case a process was only partly attached. */
        for (size_t i = 0; i < cg->n; i++) {
                int r = i == 0 && state.h[i].ops == &ops_v2 ? v2_kill_all_with(cg->dirs[i], sweep)
                        : i == 0 && wait ? state.h[i].ops->kill_all(cg->dirs[i]) : sweep(cg->dirs[i]);
                if (r < 0 && r != -ENOENT && ret == 0)
                        ret = r;
                /* v1 kills no subtree (v2's cgroup.kill does, the sweep is
                 * then a no-op). */
                for (size_t k = 0; k < ELEMENTSOF(session_children); k++) {
                        _cleanup_free_ char *dir = NULL;
                        if (asprintf(&dir, "%s/%s", cg->dirs[i], session_children[k]) < 0)
                                return -ENOMEM;
                        r = sweep(dir);
                        if (r < 0 && r != -ENOENT && ret == 0)
                                ret = r;
                }
                r = for_each_ctr(cg->dirs[i], sweep);
                if (r < 0 && ret == 0)
                        ret = r;
        }
        /* A frozen task (a crash between freeze and thaw) keeps its
         * SIGKILL pending under the v1 freezer: thawed after the kill, so
         * it dies at once instead of running on, and the cgroup can go. */
        if (core_cgroup_frozen(cg) > 0)
                (void)core_cgroup_freeze(cg, false);
        /* And its paused containers (container.pause): a v1 freezer child
         * keeps its own state whatever the session's. */
        for (size_t i = 0; i < cg->n; i++)
                (void)for_each_ctr(cg->dirs[i], thaw_ctr);
        return ret;
}

int core_cgroup_kill_all(core_cgroup *cg) {
        return kill_all(cg, true);
}

int core_cgroup_kill_now(core_cgroup *cg) {
        return kill_all(cg, false);
}

/* rmdir with a bounded wait: after SIGKILL the kernel still has to reap the
 * tasks, and until then the directory is busy. */
static int rmdir_retry(const char *dir) {
        for (int waited = 0;; waited += RETRY_STEP_MS) {
                if (rmdir(dir) == 0 || errno == ENOENT)
                        return 0;
                if (errno != EBUSY || waited >= RETRY_TOTAL_MS)
                        return negative_errno();
                sleep_ms(RETRY_STEP_MS);
        }
}

int core_cgroup_destroy(core_cgroup *cg) {
        int ret = 0;
        for (size_t i = 0; i < cg->n; i++) {
                for (size_t k = 0; k < ELEMENTSOF(session_children); k++) {
                        _cleanup_free_ char *dir = NULL;
                        if (asprintf(&dir, "%s/%s", cg->dirs[i], session_children[k]) < 0)
                                return -ENOMEM;
                        int r = rmdir_retry(dir);
                        if (r < 0) {
                                log_debug_errno(r, "cgroup: remove %s: %m", dir);
                                if (ret == 0)
                                        ret = r;
                        }
                }
                int r = for_each_ctr(cg->dirs[i], rmdir_retry);
                if (r < 0 && ret == 0)
                        ret = r;
                if (cg->unit)
                        continue; /* the scope's own directory is systemd's */
                r = rmdir_retry(cg->dirs[i]);
                if (r < 0) {
                        log_debug_errno(r, "cgroup: remove %s: %m", cg->dirs[i]);
                        if (ret == 0)
                                ret = r;
                }
        }
        if (cg->unit) {
                /* Empty now: stopping it is what systemd would do by itself
                 * (a scope ends when its last process does); done here so
                 * the name is free when we return. */
                int r = core_systemd_stop_unit(cg->unit);
                if (r < 0 && ret == 0)
                        ret = r;
                for (int waited = 0; waited < RETRY_TOTAL_MS && cg->n && access(cg->dirs[0], F_OK) == 0;
                     waited += RETRY_STEP_MS)
                        sleep_ms(RETRY_STEP_MS);
        }
        return ret;
}

/* The session name of a scope directory entry of this instance (systemd
 * driver): "sandboxd-<name>.scope" carrying our INSTANCE_XATTR. A scope
 * without it is another daemon's (or one whose start was cut short, which
 * systemd removes once its placeholder is gone). NULL otherwise. */
static char *scope_session(const char *parent, const char *entry) {
        size_t n = strlen(entry), pl = strlen(SCOPE_PREFIX), sl = strlen(SCOPE_SUFFIX);
        if (n <= pl + sl || strncmp(entry, SCOPE_PREFIX, pl) != 0 || !streq(entry + n - sl, SCOPE_SUFFIX))
                return NULL;
        _cleanup_free_ char *dir = NULL;
        char key[INSTANCE_KEY_MAX + 1] = "";
        if (asprintf(&dir, "%s/%s", parent, entry) < 0)
                return NULL;
        ssize_t kl = lgetxattr(dir, INSTANCE_XATTR, key, sizeof(key) - 1);
        if (kl <= 0 || !streq(key, state.instance))
                return NULL;
        return strndup(entry + pl, n - pl - sl);
}

/* Collects the distinct session names found under every parent. */
static int list_sessions(char ***ret, size_t *ret_n) {
        char **names = NULL;
        size_t n = 0;
        for (size_t i = 0; i < state.n; i++) {
                _cleanup_closedir_ DIR *d = opendir(state.h[i].parent);
                if (!d)
                        continue;
                for (struct dirent *de; (de = readdir(d));) {
                        _cleanup_free_ char *scoped = driver == CORE_CGROUP_SYSTEMD && de->d_type == DT_DIR
                                                              ? scope_session(state.h[i].parent, de->d_name)
                                                              : NULL;
                        const char *entry = driver == CORE_CGROUP_SYSTEMD ? scoped : de->d_name;
                        bool dup = de->d_type != DT_DIR || !entry || !name_ok(entry);
                        for (size_t j = 0; j < n && !dup; j++)
                                dup = streq(names[j], entry);
                        if (dup)
                                continue;
                        char **nn = realloc(names, (n + 1) * sizeof(*nn));
                        if (!nn || !(nn[n] = strdup(entry))) {
                                names = nn ? nn : names;
                                while (n)
                                        free(names[--n]);
                                free(names);
                                return -ENOMEM;
                        }
                        names = nn;
                        n++;
                }
        }
        *ret = names;
        *ret_n = n;
        return 0;
}

int core_cgroup_remove_all_sessions(void) {
        return core_cgroup_remove_sessions_except(NULL, 0);
}

int core_cgroup_open(const char *name, pid_t pid, core_cgroup **ret) {
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        _cleanup_free_ char *procs = NULL, *data = NULL;
        if (!name_ok(name))
                return -EINVAL;
        if (!state.ready)
                return -ESTALE;
        int r = cgroup_new(name, &cg);
        if (r < 0)
                return r;
        /* Where init lives: the leaf on a v2 hierarchy with controllers
         * (v2_leaf), else the session's directory. */
        if (cg->n == 0 || asprintf(&procs, v2_leaf(cg, 0) ? "%s/" CORE_CGROUP_INIT "/cgroup.procs" : "%s/cgroup.procs",
                                   cg->dirs[0]) < 0)
                return -ENOMEM;
        if ((r = core_read_file(procs, 1 << 20, &data, NULL)) < 0)
                return r;
        bool found = false;
        for (char *line = data, *nl; line && *line && !found; line = nl ? nl + 1 : NULL) {
                nl = strchr(line, '\n');
                found = atoi(line) == (int)pid;
        }
        if (!found)
                return -ESRCH;
        *ret = TAKE_PTR(cg);
        return 0;
}

int core_cgroup_remove_sessions_except(char *const *keep, size_t n_keep) {
        int r;
        if (!state.ready)
                return -ESTALE;
        char **names = NULL;
        size_t n = 0;
        if ((r = list_sessions(&names, &n)) < 0)
                return r;
        int removed = 0, first_err = 0;
        for (size_t i = 0; i < n; i++) {
                bool kept = false;
                for (size_t k = 0; k < n_keep && !kept; k++)
                        kept = streq(keep[k], names[i]);
                _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
                r = kept ? -EEXIST : cgroup_new(names[i], &cg);
                if (r >= 0) {
                        (void) core_cgroup_kill_all(cg);
                        r = core_cgroup_destroy(cg);
                }
                if (r >= 0)
                        removed++;
                else if (!first_err && !kept)
                        first_err = r;
                free(names[i]);
        }
        free(names);
        return first_err < 0 ? first_err : removed;
}

int core_cgroup_fini(void) {
        int ret = 0;
        for (size_t i = 0; state.ready && driver == CORE_CGROUP_CGROUPFS && i < state.n; i++)
                if (rmdir(state.h[i].parent) < 0 && errno != ENOENT && ret == 0)
                        ret = negative_errno();
        state_clear();
        return ret;
}

const char *core_cgroup_unit(const core_cgroup *cg) {
        return cg ? cg->unit : NULL;
}

const char *core_cgroup_path(const core_cgroup *cg) {
        return cg && cg->n ? cg->dirs[0] : NULL;
}

size_t core_cgroup_dirs(const core_cgroup *cg, const char **dirs, size_t max) {
        if (!cg)
                return 0;
        for (size_t i = 0; i < cg->n && i < max; i++)
                dirs[i] = cg->dirs[i];
        return cg->n;
}

void core_cgroup_free(core_cgroup *cg) {
        if (!cg)
                return;
        release_holder(cg);
        if (cg->oom_fd1 > 0)
                close(cg->oom_fd1 - 1);
        for (size_t i = 0; i < cg->n; i++)
                free(cg->dirs[i]);
        free(cg->unit);
        free(cg->name);
        free(cg);
}

/* ---- containers' child cgroups ---- */

/* A handle on the child cgroup of container `name` of cg (no unit, no
 * holder: only its directories), or NULL when out of memory. */
static core_cgroup *ctr_view(const core_cgroup *cg, const char *name) {
        core_cgroup *v = calloc(1, sizeof(*v));
        if (!v)
                return NULL;
        v->holder_fd = -1;
        if (asprintf(&v->name, "%s/%s%s", cg->name, CORE_CGROUP_CTR_PREFIX, name) < 0) {
                v->name = NULL;
                core_cgroup_free(v);
                return NULL;
        }
        for (size_t i = 0; i < cg->n; i++) {
                if (asprintf(&v->dirs[i], "%s/%s%s", cg->dirs[i], CORE_CGROUP_CTR_PREFIX, name) < 0) {
                        core_cgroup_free(v);
                        return NULL;
                }
                v->n++;
        }
        return v;
}

int core_cgroup_container_open(const core_cgroup *cg, const char *name, core_cgroup **ret) {
        if (!core_name_is_valid(name))
                return -EINVAL;
        core_cgroup *v = ctr_view(cg, name);
        if (!v)
                return -ENOMEM;
        *ret = v;
        return 0;
}

int core_cgroup_container_create(core_cgroup *cg, const char *name, const core_cgroup_limits *limits,
                                 core_cgroup **ret, int *ret_fds, size_t max_fds, size_t *ret_n, sb_error **ret_err) {
        if (!core_name_is_valid(name))
                return sb_error_set(ret_err, -EINVAL, NULL, NULL, "container cgroup: bad name");
        _cleanup_(core_cgroup_freep) core_cgroup *v = ctr_view(cg, name);
        if (!v)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        size_t n = 0;
        int r = 0;
        for (size_t i = 0; i < v->n && i < state.n && r >= 0; i++) {
                const hierarchy *h = &state.h[i];
                bool any = limits->memory_max || limits->pids_max || limits->cpu_quota_pct, delegated = false;
                /* v2: a child has controllers (its limits, memory.current,
                 * memory.events for its own stats and OOM kills) only when
                 * the session delegates them to its children, which the
                 * kernel allows only while the session cgroup itself holds
                 * no process ("no internal processes", cgroup-v2.rst):
                 * sandbox-init lives in the leaf CORE_CGROUP_INIT for that
                 * (v2_leaf). A session whose init is in its own directory
                 * (the systemd driver's scope, or one started by an older
                 * daemon) cannot: a container asking for limits is then
                 * refused, one without gets none of those files. */
                if (h->ops == &ops_v2 && h->v2_ctl) {
                        char ctl[64] = "";
                        if (h->v2_ctl & CTL_MEMORY)
                                strcat(ctl, "+memory ");
                        if (h->v2_ctl & CTL_PIDS)
                                strcat(ctl, "+pids ");
                        if (h->v2_ctl & CTL_CPU)
                                strcat(ctl, "+cpu ");
                        int w = *ctl ? write_file(cg->dirs[i], "cgroup.subtree_control", ctl) : -ENOTSUP;
                        delegated = w >= 0;
                        if (w < 0 && any) {
                                r = sb_error_set(ret_err, w, NULL, NULL,
                                                 "container limits on cgroup v2: delegate controllers below %s: %s%s",
                                                 cg->dirs[i], strerror(-w),
                                                 w == -EBUSY ? " (the sandbox's own processes live in that cgroup, "
                                                               "not in its leaf '" CORE_CGROUP_INIT "': under the "
                                                               "systemd driver, or started by an older sandboxd; "
                                                               "a new session of the sandbox has the leaf)"
                                                             : "");
                                break;
                        }
                }
                /* A leftover of a daemon killed mid-create is reused when
                 * empty; one with processes is a live container's. */
                int mk = mkdir(v->dirs[i], 0755) < 0 ? negative_errno() : 0;
                if (mk == -EEXIST && populated(v->dirs[i]) == 0)
                        mk = 0;
                if (mk < 0) {
                        r = sb_error_set(ret_err, mk, NULL, NULL, "container cgroup: create %s: %s", v->dirs[i],
                                         mk == -EEXIST ? "it exists with processes" : strerror(-mk));
                        break;
                }
                /* v2 with no controller delegated: the child has none of
                 * their files to write. (v1 cpu: a child's quota above its
                 * parent's is refused, EINVAL, kernel/sched/core.c
                 * tg_cfs_schedulable_down; the caller bounds it by the
                 * session's.) */
                if ((h->ops != &ops_v2 || delegated) && (r = h->ops->set_limits(h, v->dirs[i], limits, CTL_ALL)) < 0) {
                        r = sb_error_set(ret_err, r, NULL, NULL, "container cgroup: limits of %s: %s", v->dirs[i],
                                         strerror(-r));
                        break;
                }
                _cleanup_free_ char *procs = NULL;
                if (asprintf(&procs, "%s/cgroup.procs", v->dirs[i]) < 0) {
                        r = sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                        break;
                }
                int fd = n < max_fds ? open(procs, O_WRONLY | O_CLOEXEC) : -E2BIG;
                if (fd < 0) {
                        r = sb_error_set(ret_err, fd == -E2BIG ? fd : negative_errno(), NULL, NULL,
                                         "container cgroup: open %s: %s", procs, strerror(fd == -E2BIG ? E2BIG : errno));
                        break;
                }
                ret_fds[n++] = fd;
        }
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        close(ret_fds[i]);
                (void)core_cgroup_destroy(v);
                return r;
        }
        *ret_n = n;
        *ret = TAKE_PTR(v);
        return 0;
}
