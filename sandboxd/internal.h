/* The daemon's registry types shared by manager.c (registry, daemon.info,
 * startup), sandbox.c (sandbox.* methods and the session lifecycle),
 * agent.c (the channel to sandbox-init), command.c (command.*) and fs.c
 * (fs.*). Everything here runs on the event loop thread unless a comment
 * says a worker thread. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <cjson/cJSON.h>
#include <systemd/sd-event.h>
#include "libcore/cgroup.h"
#include "libcore/container.h"
#include "libcore/net.h"
#include "libcore/source.h"
#include "policy/match.h"
#include "policy/nftgen.h"
#include "policy/policy.h"
#include "sandboxd/events.h"
#include "sandboxd/config.h"
#include "sandboxd/manager.h"
#include "sandboxd/rpc.h"

typedef struct sandbox sandbox;
typedef struct session session;
typedef struct ctr ctr;
typedef struct command command;
typedef struct port_listener port_listener;

/* pins.c: the DNS pins of a running session, by name. */
typedef struct session_pin session_pin;
typedef struct session_pins {
        session_pin *v;
        size_t n, cap;
} session_pins;
/* Records that netd pinned `addr` for `name` for ttl_s seconds (at least
 * the nftables floor); bounded, expired entries dropped first. */
void pins_record(session_pins *p, struct in_addr addr, const char *name, uint32_t ttl_s);
/* pins_record() for an address of either family (IPv6: an AAAA pin). */
void pins_record_addr(session_pins *p, const pol_addr *addr, const char *name, uint32_t ttl_s);
/* Before the session's nftables objects are replaced: forgets every
 * recorded pair the new custom policy `pol` does not allow
 * (pol_check_resolved with the never list) and returns the others as pins
 * for pol_nft_session_apply_pins() (*ret, *ret_n entries, the caller
 * frees it), each for the rest of its TTL. 0 or -ENOMEM (nothing
 * forgotten then). */
int pins_keep_allowed(session_pins *p, const pol_policy *pol, const pol_cidr *never, size_t n_never,
                      pol_nft_carried_pin **ret, size_t *ret_n);
void pins_free(session_pins *p);

/* A list of requests waiting for the same event. */
typedef struct req_list {
        rpc_request **items;
        size_t n;
} req_list;
/* Appends req (not owned: answered later by whoever takes the list).
 * Returns 0, or -ENOMEM after answering req with an internal error itself,
 * so no caller leaves a request unanswered when the list cannot grow. */
int req_list_add(req_list *l, rpc_request *req);
/* Takes the requests out of the list (the caller replies to each). */
req_list req_list_take(req_list *l);

/* Requests parked until a session runs, each with the handler that runs it
 * again then (or that answers it: create's own request). */
typedef struct redo_list {
        rpc_request **reqs;
        rpc_handler *fns;
        size_t n;
} redo_list;
int redo_list_add(redo_list *l, rpc_request *req, rpc_handler fn);
redo_list redo_list_take(redo_list *l);
void redo_list_clear(redo_list *l);

/* Last `cap` bytes of a stream. */
typedef struct ring {
        char *buf;
        size_t cap;     /* most bytes kept */
        size_t alloc;   /* bytes allocated so far (grows up to cap) */
        size_t start, len;
        bool truncated;
        uint64_t total; /* bytes ever appended, kept or not: the stream offset just past the newest byte */
} ring;
void ring_append(ring *r, const char *data, size_t len);
/* Lowers the ring's cap to `cap` bytes (no-op when not lower), keeping the
 * newest bytes in a buffer just big enough for them; what is dropped sets
 * `truncated`. On allocation failure the ring is left as it was. */
void ring_shrink(ring *r, size_t cap);
/* Base64 of the ring's content in order; caller frees. */
char *ring_base64(const ring *r);
void ring_free(ring *r);

struct command {
        char cmd_id[24];          /* "cmd-" + 16 hex */
        unsigned agent_id;        /* id on the agent channel, unique per session */
        sandbox *sb;
        session *sess;            /* NULL once the session is gone */
        char *cmd;
        /* Its args, kept compactly (a cJSON tree cost ~100 bytes an
         * argument): each string with its NUL, one after the other. */
        char *argv;
        size_t argv_len;          /* bytes of argv, NULs included */
        unsigned argc;
        size_t kept;              /* its share of manager.kept_bytes */
        bool pruning;             /* being forgotten (prune_finished) */
        char *cwd;
        char *container;          /* the container it runs in (command.run "container"), or NULL */
        bool sudo, tty, detached;
        uint64_t started_ms, ended_ms;
        bool started, exited;
        bool timed_out;           /* its timeoutMs expired and it was sent SIGKILL */
        bool cancelled;           /* request.cancel of its command.run: killed, answered -32800 */
        bool oom_known;           /* oom_before was read at its start */
        bool oom_killed;          /* SIGKILLed while the session's OOM kill count grew */
        uint64_t oom_before;      /* the session cgroup's OOM kill count at its start */
        int exit_code;
        /* "usage" of its exit (agent.h): CPU ms of its process tree and the
         * largest resident set of one of its processes; unknown when init
         * reported none (a session that ended under it). */
        bool has_usage;
        uint64_t usage_cpu_ms, usage_mem_peak;
        rpc_conn *conn;           /* streams go here while it is open; a reference */
        rpc_request *run_req;     /* command.run waiting for start (detached) or exit */
        req_list waiters;         /* command.wait */
        sd_event_source *timeout_src;
        ring out, err;
        bool log_evicted;         /* its logs were dropped for the global budget (logBudgetMiB) */
        bool log_replay;          /* restored from init: takes init's "log" events until its first output */
        /* Per-command flow control (agent.h "window", "credit"): the
         * window this daemon granted and init keeps (0: none, an older
         * init or a restored command), and the output bytes received and
         * not yet credited back. */
        uint64_t window, credit_owed;
        bool window_overrun;      /* init sent past window + slack: the rest is dropped, logged once */
        command *next;
};

/* A pending file operation on the agent channel. */
typedef void (*agent_fs_cb)(session *s, cJSON *result, int err, const char *message, void *userdata);
typedef struct agent_fs_op {
        unsigned req;
        agent_fs_cb cb;
        void *userdata;
        struct agent_fs_op *next;
} agent_fs_op;

typedef struct agent_packet {
        char *data;
        size_t len;
        int fd;                   /* sent with the packet (SCM_RIGHTS) and closed, or -EBADF */
        struct agent_packet *next;
} agent_packet;

struct session {
        char id[33];
        sandbox *sb;
        pid_t pid;
        int pidfd;
        int agent_fd;
        int net_slot;             /* -1 without network */
        core_cgroup *cg;
        bool paused;              /* frozen by sandbox.pause (pause.c) */
        bool pause_on_timeout;    /* sandbox.setTimeout onTimeout "pause": its expiry pauses it, not stops */
        uint64_t started_ms;
        sd_event_source *agent_src, *pidfd_src, *expire_src, *kill_src;
        agent_packet *outq, **outq_tail;
        size_t outq_bytes;        /* bytes of the packets in outq (agent_input_refused) */
        unsigned next_cmd_id, next_fs_req;
        agent_fs_op *fs_ops;
        bool stopping, agent_closed;
        /* This session's init keeps windows (agent.h): this daemon started
         * it (its own build; kept in the session record across a restart),
         * or it answered a run with a window. A run it answers without one
         * is held to the one this daemon granted all the same (command.c). */
        bool keeps_windows;
        /* Its init answers each command.write with whether it took it
         * (agent.h "write"): said in its "started" and "list" events. */
        bool write_acks;
        bool output_bulk;         /* used its relay budget last turn: lower priority (agent.c) */
        struct in_addr gateway;   /* host side of the veth (network order) */
        pid_t netd_pid;           /* sandbox-netd (custom policies), or 0 */
        int netd_out;             /* its stdout: ready/pin/deny lines */
        int netd_in;              /* its stdin: one ack per pin line */
        sd_event_source *netd_src;
        sd_event_source *netd_exit_src;  /* its pidfd (owned by the source): netd died */
        sd_event_source *netd_retry_src; /* a restart after backoff */
        unsigned netd_restarts;   /* times netd died and was started again (sandbox.get) */
        unsigned netd_burst;      /* restarts since netd_burst_ms (backoff) */
        uint64_t netd_burst_ms;
        int netns_fd;             /* the sandbox's network namespace (ports connect there) */
        int pod_netns;            /* a pod's namespace (network.netns, pod.c), held for the session's
                                     life; -EBADF for a namespace of its own */
        port_listener **listeners; /* exposed ports (ports.c) */
        size_t n_listeners;
        char *netd_buf;           /* partial line */
        size_t netd_len;
        int netd_reloaded;        /* last {"reloaded":...} line: 1 ok, -1 refused, 0 none yet */
        bool proxy_ca;            /* its egress proxy CA exists */
        bool sandbox_trusts_ca;   /* ... and is in the sandbox's system bundle */
        bool flows_forgotten;     /* its slot's conntrack entries were flushed at its start */
        bool adopted;             /* re-adopted after a daemon restart: init is not our child */
        bool logs_replaying;      /* init is sending its kept logs (agent.h "log") */
        redo_list logs_waiting;   /* command.logs held until "logs_done" */
        bool listing;             /* adopted, its init's {"ev":"list"} not yet in (command.c) */
        bool has_veth;            /* its veth sbx<net_slot> exists (not under deny-all) */
        /* It had a veth at some point (or may have: adopted after a
         * restart), so the host may track flows from its address: its slot
         * is flushed before reuse (session.c release_slot_after_flush). A
         * session that was deny-all all its life sent nothing beyond its
         * own namespace, and its slot goes back at once. */
        bool had_veth;
        /* Ended at its init's goodbye (agent.c: the agent socket's EOF
         * during a stop that removes the sandbox), before the kernel
         * reported init's exit: pidfd stays open for the background
         * teardown, which waits for that exit (session_kernel_teardown). */
        bool ended_early;
        /* Killed whole by sandbox.delete (session_kill: cgroup.kill): no
         * process of it runs user code again. */
        bool fenced;
        session_pins pins;        /* DNS pins as netd reported them (pins.c) */
        /* Bumped by every policy update; netd stamps each pin with the
         * generation it judged it under, and only current ones are pinned. */
        uint64_t policy_generation;
        /* The host runtime version its overlay stands on ("" on another
         * runtime): kept on disk while the session lives (runtime.c). */
        char runtime_version[CORE_RUNTIME_VERSION_LEN + 1];
        /* The key of its cgroup and systemd scope when that is not the
         * sandbox's name (a session adopted from the warm pool, whose
         * cgroup cannot be renamed); "" otherwise. Kept in its record. */
        char cgroup_name[72];
        /* A session adopted from the warm pool counts its usage from the
         * adoption (metrics_usage_rebase): its CPU time then, and how its
         * memory peak restarted (an fd of memory.peak, reset then, when
         * peak_fd_set; peak_unknown when the kernel cannot reset it). */
        bool usage_rebased;
        bool peak_fd_set;
        bool peak_unknown;
        int peak_fd;
        uint64_t cpu_base_usec;
        ctr *ctrs;                /* its containers (container.c) */
        cJSON *ctr_pending;       /* names of containers being created (array; NULL: none) */
};

struct sandbox {
        manager *m;
        char *name;
        char id[33];
        /* The tenant that made it (tenant.h), set at creation from the
         * client's identity and changed by no method; NULL: admin-owned
         * (also state written before owners existed). */
        char *owner;
        char *runtime;
        cJSON *source;            /* as stored: password replaced by "<redacted>", or NULL */
        uint64_t timeout_ms;
        cJSON *env;               /* object of strings */
        cJSON *tags;              /* object of strings */
        cJSON *policy;            /* networkPolicy as given (string or object), header values included */
        pol_policy *pol;          /* the same, parsed and validated */
        uint64_t denials;         /* denied DNS questions and answers, all sessions */
        bool persistent;
        bool userns;              /* runs in a user namespace (libcore/userns.h) */
        uint32_t userns_base;     /* host id of its uid/gid 0 while it holds a range, else 0 */
        unsigned vcpus;
        uint64_t disk_mib;        /* resources.diskMiB: size of its disk image, 0 = none (diskimg.h) */
        cJSON *ports;             /* array */
        /* network.netns (pod.c): the pod's network namespace the sandbox
         * joins instead of one of its own, as given (NULL: its own), and
         * the identity of the nsfs inode first opened there; every later
         * open by the path must find the same one. */
        char *netns_path;
        uint64_t netns_dev, netns_ino;
        cJSON *mounts;            /* host mounts as given ([{source, destination, readOnly}]), or NULL:
                                     resolved again at each session start (container.c), never
                                     copied into forks or snapshots */
        uint64_t created_ms, expires_ms;
        const char *status;       /* pending, running, stopping, stopped, failed */
        session *sess;
        cJSON *sessions;          /* history: [{id, status, startedAt, endedAt}] */
        char *dir;                /* <state>/sandboxes/<name> */
        char *run_dir;            /* <run>/sandboxes/<name> */
        bool deleting;
        bool starting;            /* a session is being started */
        cJSON *layers;            /* immutable layers below the upper, top first (ids) */
        unsigned capturing;       /* snapshot/fork copies of its upper in flight */
        session *deferred_teardown_session;
        bool deferred_teardown, deferred_remove;
        req_list stop_waiters, delete_waiters;
        redo_list pending;        /* requests waiting for the session to run */
        bool pooled;              /* a warm pool session, not (yet) a user's sandbox (warmpool.c) */
        /* Setup and readiness (ready.c): not ready from a getOrCreate with
         * setup until sandbox.setReady; stored as "ready": false. */
        bool not_ready;
        rpc_conn *setup_conn;     /* the connection holding the setup claim (a reference), or NULL */
        req_list setup_waiters;   /* getOrCreate callers parked until it is ready or the claim is free */
        cJSON *volumes;           /* its volume mounts: [{name, path, readOnly}] (volume.c) */
        dev_t pool_rt_dev;        /* pooled: the runtime tree it was made on (stat of runtime_dir) */
        ino_t pool_rt_ino;
        /* A pooled session's pids.max as its cgroup was made (start_work):
         * adoption writes the limits only when pidsMax was reloaded since. */
        uint64_t pool_pids_max;
        sandbox *next;
};

/* "allow-all", "deny-all" or "custom". */
const char *sandbox_policy_mode(const sandbox *sb);

/* ---- pod.c: sandboxes in a pod's network namespace (network.netns) ---- */

/* True when sb joins a pod's network namespace (network.netns). */
static inline bool sandbox_is_pod(const sandbox *sb) {
        return sb->netns_path != NULL;
}

/* Reads sandbox.create's `network` ({"netns": PATH}) into sb and opens the
 * namespace into *ret_fd (caller closes; -EBADF when `network` is absent or
 * null). Refused, naming network.netns: a client other than root on the
 * local socket, a path with a symlink, anything but a network namespace's
 * nsfs file, the daemon's own namespace, one another sandbox holds. */
int pod_parse_network(manager *m, const rpc_request *req, sandbox *sb, int *ret_fd, sb_error **ret_err);

/* Opens sb's recorded network.netns again (resume, restore) and checks it
 * is the namespace first recorded (same inode); *ret_fd is the caller's. */
int pod_netns_reopen(const sandbox *sb, int *ret_fd, sb_error **ret_err);

/* Installs (replaces) the policy table of pod sandbox sb for p in its
 * namespace `netns_fd` (policy/nftpod.h), with the daemon's never list and
 * daemon.json kubernetes CIDRs. `keep`: leave a table that p already built
 * (a restarted daemon: its pins stay). 0 or a negative errno (*ret_err). */
int pod_apply_policy(manager *m, int netns_fd, const pol_policy *p, bool keep, sb_error **ret_err);

/* The upstream of a pod's DNS filter, "ADDR:53" into buf: daemon.json
 * kubernetes.clusterDNS[0], else -ENOENT (the caller uses the host's). */
int pod_dns_upstream(const manager *m, char *buf, size_t size);

/* What a pod's table cannot enforce yet, refused naming the entry: HTTP
 * rules (a pod has no egress proxy) and a port on a name (its addresses
 * are admitted on every port). 0 or -EOPNOTSUPP (*ret_err). */
int pod_policy_check(const pol_policy *p, sb_error **ret_err);

/* A session being started on a worker thread (session_start). */
typedef struct start_job {
        manager *m;
        sandbox *sb;
        bool fresh;               /* a new sandbox: directories, source, config first */
        /* source, copied out of the request (fresh only) */
        char *src_type, *url, *revision, *username, *password;
        unsigned depth;
        bool source_guarded;      /* a tag role's source: remote_source_guard applies */
        bool source_as_peer;      /* a local tenant's source: a local path is read as source_peer */
        core_peer source_peer;    /* its uid, gid and groups (groups: source_peer_groups) */
        gid_t *source_peer_groups;
        char **source_roots;      /* the roots its local source is read beneath (tenant_roots; owned) */
        char *config_text;        /* config.json to write (fresh only) */
        char *rootfs;
        /* results from the worker */
        core_spawn_result spawn;
        pid_t netd_pid;
        int netd_out, netd_in;
        int netns_fd;             /* the sandbox's network namespace, for ports */
        int pod_netns;            /* network.netns opened and checked (pod.c), or -EBADF */
        core_cgroup *cg;
        int slot;
        bool proxy_ca;            /* the session CA exists (netd terminates TLS with it) */
        bool sandbox_trusts_ca;   /* its bundle is bound over the sandbox's system bundle */
        bool pool_ca;             /* a pooled deny-all session made for a networked mode gets its CA */
        bool flows_forgotten;     /* the slot's conntrack entries were flushed (worker) */
        /* request.cancel of a fresh create: START_RUNNING until the worker
         * commits (START_COMMITTED, atomically) or a cancel asks it to stop
         * (CORE_CANCEL_REQUESTED); whichever comes first wins. */
        int cancel;
        sb_error *err;
        /* sandbox.progress notifications during the source fetch (create's
         * "progress": true): the connection they go to (a reference, taken
         * and released on the loop thread; NULL: none), and on the worker
         * thread the last stage sent and when (session.c). */
        bool progress;
        rpc_conn *progress_conn;
        const char *progress_stage;
        uint64_t progress_sent_ms;
        core_source_progress progress_held; /* the last report not sent (stage NULL: none) */
        /* The volumes to mount, resolved on the loop thread at
         * session_start: [{name, dir, path, readOnly}] (volume.c). */
        cJSON *volume_mounts;
} start_job;
enum { START_RUNNING = 0, START_COMMITTED = 2 };
/* request.cancel hook for a create or fork's create phase (session.c). */
bool start_job_cancel(rpc_request *req, void *userdata);

typedef struct snapshot {
        char id[40];              /* "snap-" + 32 hex */
        char *sandbox;            /* the sandbox it was taken of */
        char *owner;              /* the tenant that took it (tenant.h); NULL: admin-owned */
        cJSON *layers;            /* the filesystem: layer ids, top first */
        cJSON *config;            /* the sandbox's config when taken */
        uint64_t created_ms;
        uint64_t expires_ms;      /* 0 = never (sandbox.snapshot's expiration) */
        bool expired;             /* past expires_ms, kept while a sandbox stands on it */
        cJSON *tags;              /* object of strings (sandbox.snapshot's tags); NULL: none */
        struct snapshot *next;
} snapshot;

/* A named volume (volume.c): a bounded filesystem of its own, mounted into
 * the sandboxes that name it. */
typedef struct volume {
        char *name;
        char *owner;              /* the tenant that made it (tenant.h); NULL: admin-owned */
        uint64_t size_mib;        /* its bound (sizeMiB) */
        uint64_t inodes;          /* inodes asked for; 0: ext4's ratio */
        cJSON *tags;              /* object of strings */
        uint64_t created_ms;
        char *dir;                /* <state>/volumes/<name> */
        bool creating;            /* its filesystem is being made (worker): not mountable yet */
        bool deleting;            /* its files are being removed (worker) */
        struct volume *next;
} volume;

struct manager {
        sd_event *event;
        const daemon_config *cfg;
        char *sandboxes_dir, *runtimes_dir, *run_sandboxes_dir, *layers_dir, *snapshots_dir;
        snapshot *snapshots;
        sd_event_source *snapshot_expire_src; /* next snapshot expiration (snapshot.c) */
        char *host_runtime;       /* <state>/runtimes/host/<host_version> */
        char host_version[CORE_RUNTIME_VERSION_LEN + 1]; /* what new sessions on `host` get */
        cJSON *runtime_jobs;      /* names being imported or bootstrapped (runtime.c) */
        int init_memfd;
        char *netd_path;          /* sandbox-netd */
        int nft_monitor;          /* nftables notifications (core_net_monitor_open) */
        sd_event_source *nft_monitor_src;
        int nflog;                /* denied packets (core_nflog_open), or -EBADF */
        sd_event_source *nflog_src;
        int addr_monitor;         /* rtnetlink address changes (core_addr_monitor_open) */
        sd_event_source *addr_monitor_src;
        int netns_lock_fd;        /* core_net_lock_namespace(), held for life */
        int state_lock_fd;        /* flock on <state dir>/sandboxd.lock */
        core_net_pool pool;
        bool *slots;              /* slot in use */
        unsigned n_slots;
        bool have_nft;
        char *userns_unavailable; /* why user-namespace sandboxes cannot run here, or NULL */
        bool userns_default;      /* sandboxes that do not say get a user namespace (userns.c) */
        const char *userns_default_from; /* "daemon.json", "host" or "fallback" (static) */
        char *userns_probe_error; /* a transient probe failure, not yet probed again, or NULL */
        uid_t plain_uid;          /* host account of the sandbox user without a user namespace */
        gid_t plain_gid;
        char *plain_unavailable;  /* why that account cannot be used, or NULL */
        sandbox *sandboxes;
        command *commands;
        unsigned n_commands;
        unsigned n_conn_commands; /* commands streaming to a connection (c->conn set; command.c) */
        size_t log_bytes;         /* bytes allocated by every command's log rings (command.c) */
        size_t kept_bytes;        /* every kept command's record, args and cwd included (command.c) */
        rpc_server *server;
        uint64_t started_ms;
        unsigned kept_sessions;   /* left running at exit for the next daemon (live restore) */
        /* Re-adopted sessions whose command list is not yet in, and the
         * command.* requests naming an unknown cmdId that wait for them
         * (command.c, commands_listing_begin). */
        unsigned n_listing;
        redo_list listing_waiters;
        sd_event_source *listing_timer;
        bool listing_over;        /* the wait timed out: unknown cmdIds are not_found at once */
        bool stopping;            /* the daemon is exiting (manager_stopping) */
        struct warm_pool *warm_pool; /* warmpool.c; NULL when warmPool is off */
        /* Sessions of deleted sandboxes whose kernel objects (nftables,
         * veth, cgroup) are being removed after the delete answered
         * (session.c); a start of a session whose cgroup has the name of
         * one waits for it. */
        struct teardown_job *teardowns;
        volume *volumes;          /* volume.c */
        char *volumes_dir;        /* <state>/volumes */
};

/* disk.c: each sandbox's bounded writable layer (libcore/diskimg.h). */
/* resources.diskMiB of a create (res may be NULL: the daemon's diskMiB). */
int sandbox_parse_disk(const daemon_config *cfg, const cJSON *res, uint64_t *ret_mib, sb_error **ret_err);
/* Worker: makes and mounts a fresh sandbox's image (none when its
 * disk_mib is 0), before upper/ and work/ are used. */
int sandbox_disk_create(const manager *m, const sandbox *sb, sb_error **ret_err);
/* Mounts the image of the sandbox directory `dir` if it has one and it is
 * not mounted: 1, 0 without an image, or a negative errno. */
int sandbox_disk_attach(const char *dir, sb_error **ret_err);
/* Unmounts it (before the directory is removed); logs failures. */
void sandbox_disk_detach(const char *dir);
/* Detaches the disk image of sandbox directory `dir` (its loop device goes
 * with the last unmount) and unlinks the image file: the first step of
 * removing a sandbox's files. Errors are logged. */
void sandbox_disk_remove(const char *dir);

/* The disk space model (libcore/diskimg.h, docs/SECURITY.md "Disk
 * space"), for daemon.info and metrics. */
typedef struct sandbox_storage {
        uint64_t committed_bytes; /* sum of the sandboxes' diskMiB, in bytes: all held on the state filesystem */
        uint64_t free_bytes;      /* the state filesystem's free bytes (f_bavail) */
        uint64_t total_bytes;     /* its size */
        unsigned disks;           /* sandboxes with a disk image */
        unsigned unbacked;        /* of them, images without all their blocks (made sparse by an earlier version) */
        unsigned pool_disks;      /* sandboxes whose disk is a subvolume of the storage pool (libcore/pool.h) */
        uint64_t pool_committed_bytes; /* their diskMiB plus CORE_POOL_RESERVE_BYTES each, in bytes */
        unsigned volumes;         /* volumes (volume.c), counted in the sums above by where they live */
        uint64_t volume_committed_bytes; /* their sizeMiB on the state filesystem, in bytes (in committed_bytes) */
} sandbox_storage;
/* Fills *ret from the sandboxes' records, one fstat per image, and a
 * statvfs of the state directory (zeros when it fails). With `owner`
 * non-NULL, committed_bytes, disks and unbacked count only the sandboxes
 * that tenant owns (tenant.h; a tenant's metrics show no other's). */
void sandbox_storage_stats(const manager *m, const char *owner, sandbox_storage *ret);
/* daemon.json storage.pool (libcore/pool.h): makes, formats and mounts the
 * pool at <stateDir>/pool when configured (manager start, before any
 * sandbox's disk is attached). Returns 0 or a negative errno with
 * *ret_err. */
int storage_pool_init(manager *m, sb_error **ret_err);
/* Start-up, after sandboxes and snapshots are loaded: deletes the pool's
 * subvolumes no sandbox directory names and its layers no sandbox or
 * snapshot stands on (what a crash between a subvolume or snapshot and
 * the record that names it left). */
void storage_pool_sweep(manager *m);
/* The directory of layer `id`: in the storage pool (its subvolume, or with
 * `files` the upper/ in it that holds the files) or <stateDir>/layers/<id>.
 * malloc'd; NULL when out of memory. */
char *layer_dir(const manager *m, const char *id, bool files);
/* Whether a sandbox or snapshot of m (a manager *) stands on layer id. */
bool layer_in_use_cb(const char *id, void *m);

/* volume.c: named volumes (docs/API.md "Volumes"). */
/* At most this many volume mounts per sandbox. */
#define VOLUME_MOUNTS_MAX 16
void register_volume_methods(manager *m, rpc_server *s);
/* Daemon start, before reconcile: makes <state>/volumes, loads every
 * record, mounts each volume's filesystem, and removes each directory
 * without a record (an interrupted create or delete). 0 or a negative
 * errno with *ret_err. */
int volumes_load(manager *m, sb_error **ret_err);
void volumes_free(manager *m);
/* The volume named `name`, or NULL. */
volume *manager_find_volume(manager *m, const char *name);
/* Whether sandbox sb's config names volume `name`. */
bool volume_mounted_by(const sandbox *sb, const char *name);
/* A request run again (fn(req, m)) once the teardown holding it is done. */
typedef void (*teardown_redo)(rpc_request *req, manager *m);
/* When a deleted sandbox's session that mounted volume `name` is still
 * being torn down in the background (its clones of the volume live until
 * its mount namespace goes), holds `req` and returns true: fn(req, m) runs
 * on the loop thread once that teardown is done (or `req` is answered
 * unavailable when the daemon is stopping by then). False when none does
 * (or no memory: the caller goes on). session.c. */
bool session_teardown_hold(manager *m, const char *name, teardown_redo fn, rpc_request *req);
/* Validates a create's `volumes` param (NULL or null: none) against the
 * registry: at most VOLUME_MOUNTS_MAX {name, path, readOnly?}, path
 * absolute, not /, without empty, '.' or '..' components, not under /proc,
 * /sys or /dev, no two at one path, each volume existing and the client
 * of `req`'s (another tenant's: not_found). *ret gets the normalised array
 * (caller deletes). 0 or a negative errno with *ret_err naming
 * volumes[i].field. */
int volumes_parse_mounts(manager *m, const rpc_request *req, const cJSON *arr, cJSON **ret, sb_error **ret_err);
/* Loop thread, at session_start: sb's mounts with each volume's directory
 * ([{name, dir, path, readOnly}], caller deletes), or NULL with *ret_err
 * (not_found: a volume it names is gone or being deleted). */
cJSON *volumes_session_mounts(manager *m, const sandbox *sb, sb_error **ret_err);
/* Worker: the detached, idmapped (through userns_fd), nosuid, nodev
 * clone of the tree of the volume in `dir` (its <dir>/upper mount),
 * read-only when `ro`. The fd (caller's) or a negative errno. */
int volumes_tree(const char *dir, int userns_fd, bool ro, sb_error **ret_err);
/* Adds the volumes (of tenant `owner` only, when not NULL) to st: counts,
 * committed bytes by where each lives. */
void volumes_storage_stats(const manager *m, const char *owner, sandbox_storage *st);
/* MiB of the volumes tenant `owner` made (0 for NULL: admin). */
uint64_t volumes_disk_mib(const manager *m, const char *owner);
unsigned volumes_count(const manager *m);
/* Calls fn for each volume (of `owner` only, when not NULL) with its
 * size, use and inode count (metrics.c). */
void volumes_metrics(manager *m, const char *owner, void (*fn)(const char *name, uint64_t size_bytes,
                                                                 uint64_t used_bytes, uint64_t used_inodes,
                                                                 uint64_t inodes, void *userdata),
                     void *userdata);

/* manager.c */
sandbox *manager_find_sandbox(manager *m, const char *name);
command *manager_find_command(manager *m, const char *cmd_id);
int manager_alloc_slot(manager *m);
void manager_release_slot(manager *m, int slot);
/* Addresses no sandbox may reach whatever its policy says (DESIGN §5.1
 * rule 5): every address of the host (in the daemon's network namespace,
 * as it is now: a cached copy, dropped at each address change and not used
 * while one is queued unread) and the whole sandbox pool. Caller frees
 * *ret. Any thread. */
int manager_never_list(manager *m, pol_cidr **ret, size_t *ret_n);
void reply_not_found(rpc_request *req, const char *what, const char *name);

/* userns.c */
/* Start-up: checks the pool against host accounts and subordinate ids and
 * probes idmapped overlays under the state directory. Fails only when
 * daemon.json says "userns": true and the host cannot do it; else records
 * the reason in m->userns_unavailable. Sets m->userns_default: daemon.json's
 * "userns" when given, else on wherever the host can (off, with a log line,
 * where it cannot). Looks up the host account SANDBOXD_PLAIN_USER for
 * sandboxes without a user namespace (m->plain_uid/gid, or the reason it
 * cannot be used in m->plain_unavailable: such sandboxes are then refused). */
int userns_manager_init(manager *m, sb_error **ret_err);
/* Probes user-namespace support again when the last probe failed
 * transiently (core_userns_probe_transient: a full or read-only state
 * filesystem...): that failure never turns user namespaces off. 0 when they
 * work (or were never in doubt); -EOPNOTSUPP when the host turned out not
 * to support them (recorded in m->userns_unavailable, the built-in default
 * turned off, logged as a warning); the probe's error when it failed
 * transiently again. Main thread. */
int userns_reprobe(manager *m, sb_error **ret_err);
/* The system account that is the sandbox user of sandboxes without a user
 * namespace (created by systemd-sysusers from systemd/sandboxd.sysusers). */
#define SANDBOXD_PLAIN_USER "sandboxd-user"
/* The ids of sb's sandbox user inside the sandbox, which are also the ids
 * its files carry in the layers: SANDBOX_UID/GID (1000) with a user
 * namespace, m->plain_uid/gid without. Returns 0, or -EOPNOTSUPP (outputs
 * untouched) without a user namespace when that account is unusable
 * (m->plain_unavailable says why). */
int userns_sandbox_user(const sandbox *sb, uid_t *ret_uid, gid_t *ret_gid);
/* Gives sb (sb->userns set) the lowest free host id range of the pool, or
 * clears sb->userns_base without userns (checking that the plain sandbox
 * user's account is usable). Errors: unavailable (host, account),
 * limit_exceeded (pool full). */
int userns_assign(manager *m, sandbox *sb, sb_error **ret_err);
/* From config.json: "userns" and "usernsRange".start, re-assigned when the
 * stored range is outside the pool or taken. */
void userns_load(manager *m, sandbox *sb, const cJSON *conf);
/* Adds "userns" (bool) and, with a range, "usernsRange" {start, count}. */
void userns_to_json(const sandbox *sb, cJSON *o);
/* daemon.info capabilities.userns: {available, mode, reason?, default,
 * defaultFrom, poolStart, poolRanges, plainUser}. */
void userns_info(const manager *m, cJSON *cap);

/* sandbox.c */
void register_sandbox_methods(manager *m, rpc_server *s);
cJSON *sandbox_to_json(const sandbox *sb);
cJSON *sandbox_config_json(const sandbox *sb);
/* Looks up params.<field> as a sandbox name. Returns the sandbox when its
 * session runs. Otherwise answers the request itself (not_found,
 * sandbox_stopped) and returns NULL — except for a stopped persistent
 * sandbox when `redo` is given: then a new session is started (DESIGN §3:
 * any command on a stopped persistent sandbox resumes it) and the request
 * is run again through `redo` once it runs. */
sandbox *sandbox_require_running(rpc_request *req, manager *m, const char *field, rpc_handler redo);
/* sandbox_require_running(), then refuses a paused sandbox (sandbox.pause) at
 * once with "unavailable" naming field and sandbox.resume, for the methods
 * sandbox-init must serve (command.run, fs.*): they would otherwise wait,
 * unanswered, for a resume. Returns the sandbox or NULL (req answered). */
sandbox *sandbox_require_unpaused(rpc_request *req, manager *m, const char *field, rpc_handler redo);
/* Writes <dir>/config.json (durably for a persistent sandbox); `text` NULL
 * means the sandbox's current config. Worker-thread safe when text is given. */
int sandbox_save_config(const sandbox *sb, const char *text, sb_error **ret_err);
/* The sandbox's upper directory (<dir>/upper, the tree root inside writes)
 * as an O_DIRECTORY fd: <dir> is the daemon's, upper itself must be a
 * plain directory (no symlink). Everything below it is resolved from this
 * fd with core_open_beneath() and friends, never by a path string. Returns
 * the fd (caller closes) or a negative errno. */
int sandbox_open_upper(const sandbox *sb);
/* Registers a sandbox found on disk at start (persistent ones). */
int sandbox_load(manager *m, const char *dir, sb_error **ret_err);
void sandbox_unlink(manager *m, sandbox *sb);
/* The sandbox named by params.<field>, or NULL after answering the request
 * (-32602, or not_found — also while its first session is being made). */
sandbox *sandbox_lookup(rpc_request *req, manager *m, const char *field);
/* Validates req->params as sandbox.create's, registers the sandbox and
 * starts it on `layers` (NULL: none, or a snapshot source's); `on_ready`
 * answers once it runs. */
void create_sandbox(rpc_request *req, manager *m, rpc_handler on_ready, const cJSON *layers);
/* Answers req with the Sandbox named by params.name. */
void reply_sandbox(rpc_request *req, void *userdata);
void sandbox_free(sandbox *sb);
void session_history_update(sandbox *sb, const char *status, uint64_t ended_ms);
void set_status(sandbox *sb, const char *status);

/* session.c */
/* Starts a session on sb in a worker (j->fresh: a new sandbox). Parked
 * requests in sb->pending run once it runs or get the error. Takes j on
 * success; on failure j->err says why and the caller still owns j. */
int session_start(sandbox *sb, start_job *j);
void start_job_free(start_job *j);
/* A job for session_start on sb (fresh = a new sandbox). NULL on ENOMEM. */
start_job *start_job_new(sandbox *sb, bool fresh);
void session_stop(sandbox *sb);
/* sandbox.delete's end of the running session of sb, without a grace:
 * where the kill of the whole session is atomic (core_cgroup_kill_fence)
 * every process of it gets SIGKILL at once and the session ends here
 * (session_ended: the teardown that removes the sandbox starts); else, or
 * while a snapshot or fork copies it, a stop with no grace (init SIGKILLs
 * what its SIGTERM left and says goodbye). No-op without a session or
 * once killed. */
void session_kill(sandbox *sb);
/* Applies policy p to a running session: its nftables objects in one batch,
 * then its DNS filter restarted on p. On failure nothing changed. */
int session_apply_policy(session *s, const pol_policy *p, sb_error **ret_err);
/* Reads the host's resolver for allow-all sessions (the first IPv4
 * nameserver of /etc/resolv.conf that is not loopback) and hands it to the
 * nftables generator (pol_nft_set_dns_upstream). Call before any session
 * is applied. */
void session_dns_upstream_init(void);

/* Adds to a command's environment (an object of strings, before the
 * sandbox's and the command's own variables) what the session's egress
 * proxy needs: the CA bundle variables whenever the session trusts its CA,
 * and HTTP(S)_PROXY / NO_PROXY (both cases) while its policy is custom.
 * Read at each command start, so a live policy update applies to every
 * command started after it. */
void session_proxy_env(const sandbox *sb, cJSON *env);
/* Re-applies every running session's nftables objects (after the host
 * table was re-installed). */
void sessions_reapply_rules(manager *m);
/* The host's addresses changed: every running netd is reloaded with the
 * current never list (same policy, same generation); one that fails to
 * take it is killed, and supervision restarts it on the current list. */
void sessions_push_never_list(manager *m);
/* Whether a pin line's "generation" member is the session's current
 * policy generation: anything else (older, missing, not a number) was not
 * judged under the policy in force and must not be pinned. */
bool pin_generation_current(const session *s, const cJSON *generation);
/* Called by agent.c when sandbox-init has exited. */
void session_ended(session *s, int status);
void start_teardown(sandbox *sb, session *s, bool remove_files);
void sandbox_stop_all(manager *m);

/* Live restore: re-adopts the session recorded in sb->run_dir (pid and
 * start time of its init, slot, netd, expiry) if that init still lives in
 * sb's cgroup; reconnects, re-installs the nftables chain, restarts netd
 * (killing the recorded one), re-opens ports and the expiry timer. On
 * failure nothing is kept and the caller cleans up as for a dead session. */
int session_adopt(sandbox *sb, sb_error **ret_err);

/* restore.c */
/* A listening SOCK_SEQPACKET socket at <run_dir>/agent.sock (mode 0600),
 * handed to sandbox-init as AGENT_LISTEN_FD. Returns the fd or -errno. */
int restore_listen(const char *run_dir, sb_error **ret_err);
/* A connection to <run_dir>/agent.sock, or -errno. */
int restore_connect(const char *run_dir);
/* Field 22 of /proc/<pid>/stat (clock ticks since boot), 0 when unknown. */
uint64_t restore_proc_start_time(pid_t pid);
/* A pidfd of pid if it is still the process that started at start_time. */
int restore_pidfd(pid_t pid, uint64_t start_time);
/* SIGKILL to pid if it is still the recorded process and its comm starts
 * with `comm`; waits (2 s at most) until it has exited. */
void restore_kill_recorded(pid_t pid, uint64_t start_time, const char *comm);
/* The session record's name in its run directory. */
#define RESTORE_RECORD_NAME "session.json"
/* Writes <run_dir>/session.json atomically (0600). */
int restore_save_record(const session *s);
/* Parses <run_dir>/session.json; NULL when missing or malformed. */
cJSON *restore_load_record(const char *run_dir);
/* Records helper `pid` (just spawned, ours) in <runDir>/helpers/<pid>.json
 * with its start time and `owner` (for the log: "sandbox 'x'"). 0 or
 * -errno. Worker-thread safe. */
int restore_helper_record(pid_t pid, const char *owner);
/* Removes the record of helper `pid` (after it was reaped). */
void restore_helper_forget(pid_t pid);
/* Daemon start, before any adoption: SIGKILLs every helper recorded in
 * <run_dir>/helpers/ that still lives (pidfd + start time, so a reused pid
 * is never hit), waits (2 s each at most) until it is gone, removes the
 * records. Returns how many were ended, or -errno. */
int restore_helpers_sweep(const char *run_dir);

/* agent.c */
/* Bytes queued for one session's sandbox-init past which input for its
 * commands (command.write, command.run stdin) is refused: an init that
 * does not read (frozen, starved) would otherwise have the daemon hold
 * every write sent to it, outside any cgroup. Above one write of the
 * largest stdin (AGENT_STDIN_MAX, base64 in its packets) and then some. */
#define AGENT_OUTQ_INPUT_MAX (64u << 20)
int agent_attach(session *s, sd_event *event);
/* Whether `bytes` more of command input for s's sandbox-init would pass
 * AGENT_OUTQ_INPUT_MAX; when so, answers req with limit_exceeded naming
 * the sandbox and the limit and returns true. Control packets (kill,
 * credit, close_stdin) are never held to it. */
bool agent_input_refused(session *s, rpc_request *req, size_t bytes);
/* Queues one packet (takes json). */
int agent_send(session *s, cJSON *json);
/* Decodes and acts on one packet from sandbox-init (len bytes of JSON, not
 * necessarily NUL-terminated; sandbox-controlled, libcore/agent.h): events
 * of commands, fs replies, the command list after a reconnection. A
 * malformed packet is ignored (logged at debug). */
void agent_handle_packet(session *s, const char *buf, size_t len);
int agent_fs(session *s, cJSON *op, agent_fs_cb cb, void *userdata);
/* agent_fs with `fd` (taken: closed once sent, or on failure) passed
 * along with the packet, for the pipe of a directory copy. */
int agent_fs_fd(session *s, cJSON *op, int fd, agent_fs_cb cb, void *userdata);
/* A request of the caller's own "op" (set in op) answered as an fs op is
 * ({"ev":"fs","req":N,...}, agent.h "container"): cb as for agent_fs, or
 * NULL when nobody waits for the answer. op is taken. */
int agent_call(session *s, cJSON *op, agent_fs_cb cb, void *userdata);
/* One packet with `fd` attached (taken: closed once sent or on failure). */
int agent_send_fd(session *s, cJSON *json, int fd);

/* container.c: containers of a session (docs/API.md "Containers"). */
void container_attach(manager *m, rpc_server *s);
/* The container `name` of session s, or NULL; borrowed. */
ctr *container_find(session *s, const char *name);
/* Its child cgroup (borrowed) or NULL; its memory limit in bytes (0: none
 * of its own). */
core_cgroup *container_cgroup(session *s, const char *name);
uint64_t container_memory_limit(session *s, const char *name);
/* Whether a container of s stands on runtime `name`. */
bool container_uses_runtime(session *s, const char *name);
/* Whether a container of session s (NULL: none) has a host mount without
 * readOnly: a write there outlives the sandbox, so sandbox.delete gives
 * its processes the stop's grace (docs/API.md sandbox.delete). Creates
 * still in flight are not counted: no process runs in them yet. */
bool container_writes_beyond(const session *s);
/* Thaws every paused container (container.pause) of session s (NULL:
 * none), for a stop: frozen, their processes would get no SIGTERM in the
 * grace. Failures are logged (the stop's SIGKILL and the teardown's
 * kill_all, which thaws, still end them). */
void container_thaw_all(session *s);
/* Live restore: the containers recorded for an adopted session. */
void container_adopt(session *s);
/* Live restore, once init's agent is attached: asks init for its
 * containers and removes whatever a daemon's death cut in half. */
void container_reconcile(session *s);
/* The session ended (its processes and cgroup are gone or going): its
 * containers are forgotten and their directories removed. */
void container_session_end(session *s);
/* Frees the session's container records only (its struct goes; a session
 * left running for the next daemon keeps its containers). */
void container_forget(session *s);
/* The detached clone of host path `source` for a mount (daemon.json
 * hostMountRoots; docs/SECURITY.md "Host mounts"), read-only when ro;
 * errors name `field`. Returns the fd or a negative errno with *ret_err. */
int container_host_mount(const daemon_config *cfg, const char *field, const char *source, bool ro,
                         sb_error **ret_err);
/* sandbox.create "mounts": root only, each one resolved now (and closed)
 * so that a bad one is refused naming it before anything is made. 0 or a
 * negative errno with *ret_err. */
int container_mounts_check(manager *m, const rpc_request *req, const cJSON *mounts, sb_error **ret_err);
/* Host mounts of a sandbox without a user namespace must each be
 * readOnly: root inside is host root on the host's files (uid 0,
 * CAP_FOWNER, CAP_FSETID), so a writable one could leave a setuid-root
 * program or a file capability in a host directory (docs/SECURITY.md
 * §3.17). `mounts` as given (an array or NULL). 0, or -EACCES with
 * *ret_err naming mounts[i].readOnly. */
int container_mounts_userns_check(const cJSON *mounts, bool userns, sb_error **ret_err);
/* Session start: the sandbox's host mounts as trees, appended to `fds`
 * (at most max in all, *n counting them) and described in `pkt_mounts`
 * ({"destination","fd"}). 0 or a negative errno with *ret_err naming the
 * mount. */
int container_sandbox_mounts(const sandbox *sb, cJSON *pkt_mounts, int *fds, size_t *n, size_t max,
                             sb_error **ret_err);
/* Whether the client of req may ask for host mounts: root on the local
 * socket (no tenant, no gateway acting for one, no TLS client). */
bool container_may_mount(manager *m, const rpc_request *req);
void agent_detach(session *s);

/* command.c */
void register_command_methods(manager *m, rpc_server *s);
/* {"ev":"started"}: command `id` has pid `pid`; `window` is the flow
 * control window init keeps for it (agent.h), 0 when it keeps none. */
void command_on_started(session *s, unsigned id, pid_t pid, uint64_t window);
void command_on_output(session *s, unsigned id, const char *stream, const char *b64);
/* {"ev":"log"} of agent.h: init's kept log of a restored command, added to
 * its logs (command.logs) before any output that follows the restart. */
void command_on_log(session *s, unsigned id, const cJSON *msg);
/* {"ev":"logs_done"}, or the session's end: the command.logs requests held
 * while init replayed its logs are answered. */
void commands_logs_replayed(session *s);
/* {"ev":"exit"}: command `id` ended with `code` (0..255), `error` when it
 * never ran, `usage` the event's {"cpuMs","memoryPeakBytes"} or NULL
 * (sandbox-controlled: each number is range-checked here). */
void command_on_exit(session *s, unsigned id, int code, const char *error, const cJSON *usage);
/* Rebuilds the commands of a re-adopted session from init's
 * {"ev":"list"} (libcore/agent.h): same cmdIds, empty logs, detached. */
void commands_restore(session *s, const cJSON *list);
/* Session s was re-adopted and asked for its command list: until it is in
 * (commands_restore), or s goes, or LISTING_WAIT_MS pass, a command.*
 * request naming a cmdId the daemon does not know waits rather than
 * answer not_found, since the command may be one of s's. Idempotent. */
void commands_listing_begin(session *s);
/* At daemon exit: requests still waiting for lists get `unavailable`. */
void commands_listing_free(manager *m);
/* The daemon exits leaving the session running (live restore): callers
 * waiting on its commands get `unavailable`; the commands go on. */
void commands_session_left(session *s);
/* The session ended: every command still running exits with 137. */
void commands_session_gone(session *s);
/* The sandbox is deleted: forget its commands. */
void commands_forget_sandbox(manager *m, sandbox *sb);
void commands_conn_closed(manager *m, rpc_conn *c);
/* The daemon is stopping (SIGTERM, manager_drain): every caller waiting on
 * a command (command.run that streams, command.wait) is answered
 * `unavailable` now, after the output already queued for it, with
 * error.data {"completed": false, "cmdId": ...}: the command goes on for
 * the next daemon, and its output stops streaming to that connection.
 * Requests parked for re-adopted sessions' lists are answered too. */
void commands_drain(manager *m);
void command_free(command *c);

/* ready.c: setup and readiness (sandbox.getOrCreate `setup`, sandbox.setReady). */
/* The params key under which method_get_or_create keeps the "differs" of
 * its answer until the answer is given. */
#define GET_OR_CREATE_DIFFERS "differs"
void register_ready_methods(manager *m, rpc_server *s);
/* Whether req's params ask for the setup claim (`setup: true`). */
bool ready_setup_wanted(const rpc_request *req);
/* The Sandbox object's "setup": {claimed, waiters}. Caller deletes. */
cJSON *ready_setup_json(const sandbox *sb);
/* Answers getOrCreate `req` for running sandbox sb ({sandbox, created,
 * differs, setup}) now, or parks it until sb is ready or its setup claim
 * is free (ready.c's top comment has the rules). */
void ready_answer(rpc_request *req, sandbox *sb, bool created);
/* A connection closed: its parked getOrCreate requests are dropped and the
 * setup claims it held are released (handed to a waiter with setup). */
void ready_conn_closed(manager *m, rpc_conn *c);
/* The daemon is stopping (manager_drain): every parked getOrCreate is
 * answered `unavailable` with data.completed false now, not at the end of
 * the stop's grace; the setup claims stay with their connections. */
void ready_drain(manager *m);
/* sb leaves the registry (deleted): its claim goes and its waiters get
 * not_found. */
void ready_sandbox_gone(sandbox *sb);

/* snapshot.c */
void register_snapshot_methods(manager *m, rpc_server *s);
/* The overlayfs lowerdir of a sandbox: its layers, then the runtime.
 * Caller frees. */
char *sandbox_lowerdir(const sandbox *sb);
/* True when `layers` is an array of layer ids as the daemon makes them (32
 * lowercase hex digits): the only names ever joined to the layers
 * directory. */
bool layers_valid(const cJSON *layers);
/* Loads snapshots/<id>.json records and removes layers nothing refers to
 * (daemon start, after persistent sandboxes are loaded). */
void snapshots_load(manager *m);
/* Removes the layers of `layers` that no sandbox or snapshot refers to any
 * more (after a delete), on a worker thread; then done(userdata) on the
 * loop (done may be NULL). */
void layers_collect(manager *m, cJSON *layers, void (*done)(void *userdata), void *userdata);
void snapshots_free(manager *m);
/* The Snapshot object of snapshot.get. Caller deletes. */
cJSON *snapshot_json(const snapshot *s);
/* The snapshot as API answers show it (snapshot.get/list, import): as
 * snapshot_json, with transform header values and a source password shown
 * as "<redacted>" (docs/API.md). Caller frees. */
cJSON *snapshot_view(const snapshot *s);
/* Writes snapshots/<id>.json (durably). */
int snapshot_save(manager *m, const snapshot *s, sb_error **ret_err);
void snapshot_free(snapshot *s);
/* Finds the snapshot by id; NULL when unknown. */
snapshot *manager_find_snapshot(manager *m, const char *id);
/* For a create whose source is a snapshot: every config key the caller
 * did not give (timeout, resources, env, tags, networkPolicy, ports,
 * userns) is
 * taken from the snapshot's config, so a deny-all sandbox's files never
 * come back with a wider policy by omission. Edits params in place. */
void snapshot_config_defaults(manager *m, cJSON *params);

/* Refuses a create from a snapshot taken in a user namespace when the
 * caller set `userns` (the effective value, given) to false: such layers
 * restore only in one. Returns 0 or -EINVAL with *ret_err (field "userns"). */
int snapshot_userns_check(manager *m, const cJSON *params, bool userns, sb_error **ret_err);

/* The config an imported snapshot file may carry in (snapshot.import). The
 * file is untrusted data: its "runtime" (a name, checked at create) and a
 * "userns": true (only ever a strengthening) are always kept; timeout,
 * resources, env, tags, networkPolicy and ports only when `take` (the
 * caller's config: true); "userns": false and every other key never.
 * What is kept goes through the sandbox.create validators against this
 * daemon's limits, so a bad value fails the import with field
 * "config.<path>". On success *ret_config is the new snapshot's config and
 * *ret_ignored the array of the file's keys left out (both owned by the
 * caller); on failure neither is touched. */
int snapshot_import_config(manager *m, const cJSON *file_config, bool take, cJSON **ret_config,
                           cJSON **ret_ignored, sb_error **ret_err);

/* Runs the sandbox.create parameter validators (name, timeout, resources,
 * ports, env, tags, networkPolicy, userns, runtime, source) on `params`
 * without creating anything. Returns 0 or a negative errno with *ret_err
 * naming the field as sandbox.create would. */
int sandbox_params_validate(manager *m, cJSON *params, sb_error **ret_err);
/* Re-arms the expiration timer: expired snapshots go on the next loop
 * iteration unless a sandbox still stands on them (then they are marked
 * expired and retried). Called at start and after anything that may free
 * one (a sandbox deleted). */
void snapshots_schedule_expiry(manager *m);

/* ports.c */
/* Validates a ports array (1-65535, unique, at most 15): a new array of
 * numbers in *ret, or -EINVAL/-E2BIG naming ports[i]. */
int ports_parse(const cJSON *ports, cJSON **ret, sb_error **ret_err);
/* Listens on 127.0.0.1 for each of the sandbox's ports (session start). */
int ports_open(session *s, sb_error **ret_err);
/* Makes the running session expose exactly `ports` (a ports_parse array):
 * ports still listed keep their listener and endpoint, new ones get one,
 * removed ones stop listening (connections already relayed carry on).
 * All or nothing: on error the session's listeners are unchanged. */
int ports_replace(session *s, const cJSON *ports, sb_error **ret_err);
/* Stops listening and closes the session's netns fd (session end). */
void ports_close(session *s);
/* [{port, endpoint}] for sandbox.get; endpoint null without a session. */
cJSON *ports_json(const sandbox *sb);

/* fs.c */
void register_fs_methods(manager *m, rpc_server *s);
/* fstar.c: fs.writeTar / fs.readTar and their chunk methods. */
void register_fs_tar_methods(manager *m, rpc_server *s);
/* A connection closed: its directory copies are abandoned. */
void fs_tar_conn_closed(rpc_conn *c);
/* watch.c: fs.watch (docs/API.md). From the agent channel: a batch of
 * events ({"ev":"watch"}) and the end ({"ev":"watch_end"}) of watch `id`
 * of session s (libcore/agent.h); both sandbox-controlled. */
void register_fs_watch_methods(manager *m, rpc_server *s);
void fs_watch_on_events(session *s, unsigned id, const cJSON *msg);
void fs_watch_on_end(session *s, unsigned id, const cJSON *msg);
/* The session's agent channel is gone (agent_detach): each of its watches
 * is answered (sandbox_stopped, or unavailable at daemon exit). */
void fs_watches_session_detached(session *s);
/* A connection closed: its watches are ended in init. */
void fs_watches_conn_closed(rpc_conn *conn);
/* The daemon is stopping (manager_drain): every watch is ended in init and
 * answered `unavailable` (data: completed false, watchId) now, so an open
 * watch never holds the stop for its grace. */
void fs_watches_drain(manager *m);
/* A congested connection drained: the count of the events dropped meanwhile
 * goes out as an "overflow" event. */
void fs_watch_conn_drained(rpc_conn *conn);

/* snapshot-io.c */
/* snapshot.export and snapshot.import: a snapshot as a tar file. */
void register_snapshot_io_methods(manager *m, rpc_server *s);
/* Helpers for reading an untrusted tar (snapshot and runtime imports). */
struct archive;
struct archive_entry;
/* Keeps only the entry's xattrs matching one of `prefixes`: an entry ending
 * in '.' is a namespace prefix ("user."), any other one exact name. */
void tar_filter_xattrs(struct archive_entry *e, const char *const *prefixes, size_t n_prefixes);
/* True when every '/'-separated component of a relative member name is
 * non-empty and neither "." nor ".." (a trailing '/' is fine). */
bool tar_relative_name_ok(const char *rest);
/* Writes entry e (already checked and renamed) and its data from rd to the
 * disk writer wr; errors name the member as `shown`. */
int tar_copy_member(struct archive *rd, struct archive *wr, struct archive_entry *e, const char *shown,
                    sb_error **ret_err);
/* A reader of the tar on archive_fd (any compression libarchive knows)
 * and a disk writer set up for untrusted members: numeric owners,
 * SECURE_SYMLINKS and SECURE_NODOTDOT, no FFLAGS (an immutable file could
 * not be removed with its tree) and no ACLs. The caller runs chrooted in
 * the target (member names are absolute there, so no NOABSOLUTEPATHS) and
 * frees both with archive_free(). 0, -ENOMEM, or -EIO when the archive
 * cannot be opened (*ret_rd is then set, for archive_error_string()). */
int tar_open_untrusted(int archive_fd, struct archive **ret_rd, struct archive **ret_wr);

/* runtime.c */
/* runtime.list, runtime.import, runtime.bootstrap and runtime.delete. */
void register_runtime_methods(manager *m, rpc_server *s);
/* sandbox.pause, sandbox.resume (pause.c). */
void register_pause_methods(manager *m, rpc_server *s);
/* sb's session reached its expiry and pauses then (sandbox.setTimeout
 * onTimeout "pause"): frozen as sandbox.pause does (already paused:
 * nothing; while a snapshot or fork is taken: tried again 1 s later).
 * 0, or -errno when it cannot be frozen (the caller stops it instead). */
int session_pause_at_expiry(sandbox *sb);
/* The root directory of runtime `name` (<state>/runtimes/<name>). Caller
 * frees; NULL on ENOMEM. */
char *runtime_dir(const manager *m, const char *name);
/* 0 when runtime `name` exists, is not being replaced and the client of
 * `req` may use it (NULL: the daemon itself, admin): an admin-owned
 * runtime is every tenant's, a tenant's only its own (tenant.h); else
 * -ENOENT with reason not_found naming `field`, another tenant's runtime
 * answered exactly as a missing one. */
int runtime_check(manager *m, const rpc_request *req, const char *name, const char *field, sb_error **ret_err);
/* The owner recorded for runtime `name` in *ret_owner (malloc'd; NULL:
 * admin-owned, as "host" and records from before owners are). Returns 0,
 * or -ENOENT when there is no such runtime (or it is being made). */
int runtime_owner(manager *m, const char *name, char **ret_owner);
/* How many runtimes tenant `owner` made. */
unsigned runtimes_owned(manager *m, const char *owner);
/* The disk tenant `owner`'s runtimes hold against maxDiskMiB, in MiB: each
 * imported one's sizeBytes rounded up, and what its imports in progress
 * reserved (bootstrapped ones are hard links into the shared debootstrap
 * cache: not counted). 0 for NULL (admin). */
uint64_t runtimes_disk_mib(manager *m, const char *owner);
/* Removes what an interrupted import or bootstrap left (daemon start). */
void runtimes_load(manager *m);
/* True when sb stands on the built-in host runtime. */
bool runtime_is_host(const sandbox *sb);
/* Removes the versions of the host runtime (<state>/runtimes/host/<v>/)
 * that are neither the current one nor under a live session (at start,
 * after adoption, and when a session ends). */
void runtime_host_collect(manager *m);

/* warmpool.c: sessions prepared ahead (daemon.json warmPool). */
/* The name prefix of pooled sessions' directories and cgroups: '_' is
 * outside sandbox names (core_name_is_valid), so no sandbox can own one. */
#define WARMPOOL_PREFIX "_pool-"
/* Start-up, after reconcile(): reads daemon.json's warmPool and starts
 * filling the pool in the background. 0, or -ENOMEM. */
int warmpool_init(manager *m);
/* Daemon exit (sandbox_stop_all): every pooled session is killed and its
 * files removed now; none is left for the next daemon. */
void warmpool_stop_all(manager *m);
void warmpool_free(manager *m);
/* start_done: pooled sandbox sb runs; it joins the ready sessions. */
void warmpool_ready(manager *m, sandbox *sb);
/* Pooled sandbox sb failed to start (err) or its session ended (err
 * NULL): it leaves the pool's lists (the caller frees or tears it down),
 * and the pool refills, backing off after failures. */
void warmpool_forget(manager *m, sandbox *sb, const sb_error *err);
/* sandbox.create (create_sandbox), after validation: when sb (parsed,
 * registered nowhere, no directory yet) matches a ready pooled session,
 * that session becomes sb's and the request is answered through
 * on_ready; returns true. Otherwise (no match, empty pool, any failure
 * on the way, which removes the pooled session) returns false with sb as
 * it was, for the cold path. */
bool warmpool_try_adopt(manager *m, rpc_request *req, sandbox *sb, const start_job *j, rpc_handler on_ready);
/* daemon.info "warmPool": {size, runtime, policy, ready, starting,
 * adopted, reason?}. */
cJSON *warmpool_info(const manager *m);
/* Whether a pooled session holds user namespace range `base` / stands on
 * host runtime version `version` (the allocators' and collectors' view). */
bool warmpool_userns_taken(const manager *m, uint32_t base);
/* runtime.delete of `name`: the pooled sessions standing on it are ended. */
void warmpool_discard_runtime(manager *m, const char *name);
bool warmpool_host_version_in_use(const manager *m, const char *version);

/* session.c, for warmpool.c: s (already sb's, whose dir and run_dir are
 * still the pooled paths) gets sb's name as its hostname (UTS namespace,
 * /etc/hostname, /etc/hosts, in place) and, with a CA, a new CA of that
 * name; for a deny-all sb, its CA and the CA's bundle bind are removed
 * instead. 0 or a negative errno with *ret_err. */
int session_pool_relabel(session *s, sb_error **ret_err);
/* Gives s, which never had a network, sb->pol: the slot's conntrack
 * entries forgotten if its start did not, its CA if it has none (see
 * session_pool_fits), veth, rules, eth0, netd. On failure the caller
 * destroys the session. */
int session_pool_network(session *s, sb_error **ret_err);
/* Whether ready pooled session s (made under deny-all) can be given
 * policy mode `mode` ("deny-all", "allow-all", "custom") at adoption and
 * then be what a cold create of that mode makes, as the sandbox sees it:
 * a networked mode needs a slot (its CA, and the CA's bundle bind where a
 * cold create has one, are made at adoption if missing:
 * session_pool_network); deny-all fits every session (a CA bind is
 * removed at adoption: session_pool_relabel, as a deny-all sandbox sees
 * nothing of the host's run directory). */
bool session_pool_fits(const session *s, const char *mode);
/* An adopted session's last steps: its timeout timer (for the expiry
 * already recorded), ports, the "running" event. */
int session_pool_activate(sandbox *sb);
/* Kills sb's session and removes everything it and sb hold, now, on the
 * calling thread (daemon exit). */
void session_destroy_now(sandbox *sb);
