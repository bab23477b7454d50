/* sandboxd's entry point: command line, configuration, signal handling and
 * the start-up and shutdown order of the event loop, the worker channel, the
 * manager and the JSON-RPC server.
 *
 * Signals: SIGTERM and SIGINT are blocked and turned into sd-event sources
 * that stop the daemon once the requests in flight are answered; SIGCHLD
 * is blocked too, so child exits are only seen through
 * sd_event_add_child() or pidfds (the manager's job) and never
 * interrupt a system call; SIGPIPE is ignored (sockets also write with
 * MSG_NOSIGNAL). The mask is set before any thread starts, so worker threads
 * inherit it and these signals always go to the event loop. */
#include <getopt.h>
#include <grp.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <cjson/cJSON.h>
#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>
#include "libcore/fault.h"
#include "libcore/diskimg.h"
#include "libcore/log.h"
#include "libcore/seccomp.h"
#include "libcore/util.h"
#include "sandboxd/config.h"
#include "sandboxd/manager.h"
#include "sandboxd/remote.h"
#include "sandboxd/tenant.h"
#include "sandboxd/metrics.h"
#include "sandboxd/rpc.h"
#include "sandboxd/worker.h"

#define DEFAULT_CONFIG "/etc/sandboxd/daemon.json"

typedef struct args {
        const char *config;
        bool config_given;
        const char *socket, *state_dir, *run_dir;
        bool check_config;          /* --check-config [FILE]: validate, print, exit */
        bool quiet;                 /* --quiet: --check-config prints nothing on success */
} args;

static void usage(FILE *f) {
        fprintf(f,
                "Usage: sandboxd [OPTIONS]\n"
                "       sandboxd --check-config [FILE]\n"
                "Runs the sandbox daemon in the foreground; needs root.\n\n"
                "  --config FILE     daemon.json to read (default " DEFAULT_CONFIG ")\n"
                "  --socket PATH     JSON-RPC socket (default /run/sandboxd/sandboxd.sock)\n"
                "  --state-dir DIR   state directory (default /var/lib/sandboxd)\n"
                "  --run-dir DIR     runtime directory (default /run/sandboxd)\n"
                "  --check-config [FILE]  validate FILE (default: the --config file) and print\n"
                "                    the effective configuration as JSON; needs no root\n"
                "  --quiet           with --check-config: print only errors\n"
                "  --help            show this help\n"
                "  --version         show the version\n");
}

/* Returns 1 to go on, 0 to exit successfully (help, version), -EINVAL on a
 * usage error (already reported). */
static int parse_args(int argc, char **argv, args *a) {
        static const struct option opts[] = {
                { "config", required_argument, NULL, 'c' },
                { "socket", required_argument, NULL, 's' },
                { "state-dir", required_argument, NULL, 'S' },
                { "run-dir", required_argument, NULL, 'R' },
                { "check-config", no_argument, NULL, 'C' },
                { "quiet", no_argument, NULL, 'q' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {}
        };
        *a = (args) { .config = DEFAULT_CONFIG };
        int c;
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (c) {
                case 'c': a->config = optarg; a->config_given = true; break;
                case 's': a->socket = optarg; break;
                case 'S': a->state_dir = optarg; break;
                case 'R': a->run_dir = optarg; break;
                case 'C': a->check_config = true; break;
                case 'q': a->quiet = true; break;
                case 'h': usage(stdout); return 0;
                case 'V': printf("sandboxd %s\n", SANDBOXD_VERSION); return 0;
                default: usage(stderr); return -EINVAL;
                }
        }
        /* --check-config takes the file as its one operand. */
        if (a->check_config && optind < argc) {
                a->config = argv[optind++];
                a->config_given = true;
        }
        if (a->quiet && !a->check_config) {
                fprintf(stderr, "sandboxd: --quiet goes with --check-config\n");
                usage(stderr);
                return -EINVAL;
        }
        if (optind < argc) {
                fprintf(stderr, "sandboxd: unexpected argument '%s'\n", argv[optind]);
                usage(stderr);
                return -EINVAL;
        }
        return 1;
}

/* A flag value replaces the file's; paths must be absolute like the file's. */
static int override_path(char **field, const char *value, const char *flag) {
        if (!value)
                return 0;
        if (value[0] != '/')
                return log_error_errno(-EINVAL, "%s: must be an absolute path: %s", flag, value);
        char *p = strdup(value);
        if (!p)
                return log_error_errno(-ENOMEM, "out of memory");
        free(*field);
        *field = p;
        return 0;
}

static int load_config(const args *a, daemon_config *cfg) {
        _cleanup_error_ sb_error *err = NULL;
        daemon_config_defaults(cfg);
        if (daemon_config_load(cfg, a->config, a->config_given, &err) < 0)
                return log_error_errno(err->code, "%s", err->message);
        if (override_path(&cfg->socket_path, a->socket, "--socket") < 0 ||
            override_path(&cfg->state_dir, a->state_dir, "--state-dir") < 0 ||
            override_path(&cfg->run_dir, a->run_dir, "--run-dir") < 0)
                return -EINVAL;
        return 0;
}

/* --check-config: loads the file the daemon would (a named file must exist)
 * with the command line's overrides and prints every key's effective value
 * as JSON on stdout (nothing with --quiet); an error goes to stderr. Reads the file and nothing
 * else: no root, no state, socket, nftables or cgroups. Exit 0 or 1. */
static int check_config(const args *a) {
        daemon_config cfg;
        int r = load_config(a, &cfg);
        if (r < 0) {
                daemon_config_free(&cfg);
                return EXIT_FAILURE;
        }
        if (a->quiet) {
                daemon_config_free(&cfg);
                return EXIT_SUCCESS;
        }
        cJSON *o = daemon_config_to_json(&cfg);
        _cleanup_free_ char *text = o ? cJSON_Print(o) : NULL;
        cJSON_Delete(o);
        daemon_config_free(&cfg);
        if (!text) {
                log_error("out of memory");
                return EXIT_FAILURE;
        }
        if (printf("%s\n", text) < 0 || fflush(stdout) != 0) {
                log_error("write the configuration: %m");
                return EXIT_FAILURE;
        }
        return EXIT_SUCCESS;
}

/* The group whose members may connect; a missing group leaves root only. */
static gid_t socket_gid(const char *group) {
        struct group *g = getgrnam(group);
        if (!g) {
                log_warning("socket group '%s' does not exist; only root may connect", group);
                return (gid_t) -1;
        }
        return g->gr_gid;
}

/* What a reload needs: the command line (the same file and overrides as at
 * start) and the configuration in force, which the manager reads. */
typedef struct reload_ctx {
        const args *a;
        daemon_config *cfg;
} reload_ctx;

static void apply_log_level(const daemon_config *cfg) {
        log_set_max_level(daemon_config_log_level(cfg)); /* -1: from the environment again */
}

/* SIGHUP (systemctl reload, after ExecReload= ran --check-config): reads the
 * file again as at start; a file that does not load is refused whole, the
 * reason logged, and nothing changes. Otherwise the keys that may change
 * live take their new values (daemon_config_apply_live()) and each other
 * changed key is named as needing a restart. */
static int on_reload_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        reload_ctx *ctx = userdata;
        daemon_config next;
        (void) sd_notify(0, "RELOADING=1");
        if (load_config(ctx->a, &next) < 0) {
                log_error("reload: %s refused, the configuration in force is kept", ctx->a->config);
                daemon_config_free(&next);
                (void) sd_notify(0, "READY=1");
                return 0;
        }
        _cleanup_free_ char *changed = NULL, *kept = NULL;
        daemon_config_apply_live(ctx->cfg, &next, &changed, &kept);
        daemon_config_free(&next);
        /* The spare disk follows the default disk size (diskimg.h). */
        core_disk_spare_resize(&(core_disk_limits){.bytes = ctx->cfg->disk_mib << 20,
                                                   .inodes = ctx->cfg->disk_inodes});
        apply_log_level(ctx->cfg);
        metrics_reconfigure(ctx->cfg);
        if (kept)
                log_warning("reload: %s: changed keys that need a restart, old values kept: %s", ctx->a->config, kept);
        log_info("reload: %s applied; changed: %s", ctx->a->config, changed ? changed : "nothing");
        (void) sd_notify(0, "READY=1");
        return 0;
}

/* The bounds of a stop (SIGTERM, SIGINT): requests in flight may finish
 * for STOP_FINISH_MS, those that can be rolled back then are within
 * STOP_ROLLBACK_MS, and the answers are written out within STOP_FLUSH_MS
 * (rpc_server_stop()). Together well inside systemd's default
 * TimeoutStopSec= of 90 s, with the worker wait (worker.c) after them.
 * docs/API.md "Daemon restarts" gives them to clients. */
#define STOP_FINISH_MS 20000
#define STOP_ROLLBACK_MS 10000
#define STOP_FLUSH_MS 5000

/* What a stop needs, filled in as the daemon starts. */
typedef struct stop_ctx {
        manager *m;
        rpc_server *server;
        bool stopping;
} stop_ctx;

static void on_server_stopped(rpc_server *server, void *userdata) {
        sd_event *event = userdata;
        log_info("every request in flight is answered; exiting");
        (void) sd_event_exit(event, 0);
}

/* The first SIGTERM or SIGINT stops taking work and lets the requests in
 * flight get their answers (rpc_server_stop()); the loop ends once they
 * have. A second one ends the loop at once. Sessions are never stopped:
 * they live on for the next daemon (live restore). */
static int on_exit_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        stop_ctx *st = userdata;
        sd_event *event = sd_event_source_get_event(s);
        if (st->stopping || !st->server) {
                log_info("received %s, shutting down now", strsignal((int) si->ssi_signo));
                return sd_event_exit(event, 0);
        }
        st->stopping = true;
        log_info("received %s, shutting down: answering the requests in flight first", strsignal((int) si->ssi_signo));
        (void) sd_notify(0, "STOPPING=1");
        manager_drain(st->m);
        rpc_stop_config cfg = {
                .finish_usec = core_fault_tunable("SANDBOXD_FAULT_STOP_GRACE_MS", STOP_FINISH_MS) * 1000,
                .rollback_usec = (uint64_t) STOP_ROLLBACK_MS * 1000,
                .flush_usec = (uint64_t) STOP_FLUSH_MS * 1000,
        };
        rpc_server_stop(st->server, &cfg, on_server_stopped, event);
        return 0;
}

static int setup_signals(sd_event *event, reload_ctx *reload, stop_ctx *stop) {
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigaddset(&mask, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(-errno, "block signals: %m");
        signal(SIGPIPE, SIG_IGN);
        int r = sd_event_add_signal(event, NULL, SIGTERM, on_exit_signal, stop);
        if (r >= 0)
                r = sd_event_add_signal(event, NULL, SIGINT, on_exit_signal, stop);
        if (r >= 0)
                r = sd_event_add_signal(event, NULL, SIGHUP, on_reload_signal, reload);
        if (r < 0)
                return log_error_errno(r, "watch signals: %m");
        return 0;
}

/* Socket activation (sandboxd.socket) or our own socket. Returns the fd to
 * adopt, -1 to bind, or a negative errno < -1 on error. */
static int activation_fd(void) {
        int n = sd_listen_fds(1);
        if (n < 0)
                return log_error_errno(n, "socket activation: %m");
        if (n > 1)
                return log_error_errno(-EINVAL, "socket activation: expected one socket, got %d", n);
        return n == 1 ? SD_LISTEN_FDS_START : -1;
}

static int start_server(sd_event *event, const daemon_config *cfg, manager *m, rpc_server **ret) {
        _cleanup_error_ sb_error *err = NULL;
        rpc_server_config rc = {
                .socket_path = cfg->socket_path,
                .listen_fd = activation_fd(),
                .max_line_bytes = cfg->max_line_bytes,
                .max_conns_user = cfg->max_conns_user,
                .max_conns_root = cfg->max_conns_root,
                .out_budget_bytes = (size_t)cfg->output_budget_mib << 20,
                .socket_gid = socket_gid(cfg->socket_group),
                .socket_mode = 0660,
        };
        if (rc.listen_fd < -1)
                return rc.listen_fd;
        /* TLS files and TCP ports first: a bad one stops the start before
         * the Unix socket accepts anyone. */
        remote_listeners *remote = NULL;
        if (remote_prepare(cfg, &remote, &err) < 0)
                return log_error_errno(err->code, "%s", err->message);
        if (rc.listen_fd < 0) {
                _cleanup_free_ char *dir = strdup(cfg->socket_path);
                int r = dir ? core_mkdir_p(dirname(dir), 0755) : -ENOMEM;
                if (r < 0) {
                        remote_listeners_free(remote);
                        return log_error_errno(r, "create socket directory '%s': %m", dir ? dir : "?");
                }
        }
        if (rpc_server_new(event, &rc, ret, &err) < 0) {
                remote_listeners_free(remote);
                return log_error_errno(err->code, "%s", err->message);
        }
        manager_register_methods(m, *ret);
        /* Before any client is accepted: every request of a tenant is checked. */
        tenant_attach(m, *ret);
        if (remote_attach(remote, m, cfg, *ret, &err) < 0)
                return log_error_errno(err->code, "%s", err->message);
        if (rc.listen_fd >= 0)
                log_info("listening on the socket passed by the service manager");
        else
                log_info("listening on %s", cfg->socket_path);
        return 0;
}

/* The service's STATUS= (systemctl status): the sandbox counts, sent
 * when they change; checked every STATUS_PERIOD_USEC from the loop. */
#define STATUS_PERIOD_USEC (2ULL * 1000000)
typedef struct status_state {
        manager *m;
        unsigned all, running;
        bool sent;
} status_state;

static void send_status(status_state *st, bool ready) {
        unsigned all = 0, running = 0;
        manager_count(st->m, &all, &running);
        if (!ready && st->sent && all == st->all && running == st->running)
                return;
        st->all = all;
        st->running = running;
        st->sent = true;
        (void) sd_notifyf(0, "%sSTATUS=Serving, %u sandboxes (%u running)", ready ? "READY=1\n" : "", all,
                          running);
}

static int on_status_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        send_status(userdata, false);
        (void) sd_event_source_set_time(s, usec + STATUS_PERIOD_USEC);
        return 0;
}

/* Shutdown order: on SIGTERM, answer every request in flight
 * (on_exit_signal); when the loop ends, stop taking requests, let finished
 * jobs report to the manager while it still exists, then stop the manager. */
static int run(const args *a, daemon_config *cfg) {
        reload_ctx reload = { .a = a, .cfg = cfg };
        stop_ctx stop = {};
        _cleanup_error_ sb_error *err = NULL;
        sd_event *event = NULL;
        manager *m = NULL;
        rpc_server *server = NULL;
        int r = sd_event_default(&event);
        if (r < 0)
                return log_error_errno(r, "event loop: %m");
        /* Pings systemd's watchdog from the loop when WatchdogSec= is set, so
         * a wedged loop gets the daemon restarted. */
        (void) sd_event_set_watchdog(event, true);
        r = setup_signals(event, &reload, &stop);
        if (r >= 0 && (r = worker_init(event)) < 0)
                log_error_errno(r, "worker channel: %m");
        if (r >= 0 && (r = manager_new(event, cfg, &m, &err)) < 0)
                log_error_errno(r, "%s", err ? err->message : "start manager: failed");
        if (r >= 0)
                r = start_server(event, cfg, m, &server);
        if (r >= 0)
                metrics_start(m, cfg);
        stop.m = m;
        stop.server = server;
        if (r >= 0) {
                /* READY=1 only now: the socket is adopted or bound and
                 * every method is registered (Type=notify, sd_notify(3)). */
                status_state st = {.m = m};
                send_status(&st, true);
                sd_event_source *timer = NULL;
                if (getenv("NOTIFY_SOCKET") &&
                    sd_event_add_time_relative(event, &timer, CLOCK_MONOTONIC, STATUS_PERIOD_USEC, 0,
                                               on_status_timer, &st) >= 0)
                        (void) sd_event_source_set_enabled(timer, SD_EVENT_ON);
                r = sd_event_loop(event);
                sd_event_source_unref(timer);
                if (r < 0)
                        log_error_errno(r, "event loop: %m");
                if (!stop.stopping)
                        (void) sd_notify(0, "STOPPING=1");
        }
        metrics_stop();
        manager_stopping(m);
        rpc_server_free(server);
        worker_shutdown();
        manager_free(m);
        sd_event_unref(event);
        return r;
}

int main(int argc, char **argv) {
        /* The filter handed to sandbox-init leaves setns to an inner one
         * each child adds after joining its container (libcore/seccomp.h). */
        core_seccomp_set_outer(true);
        log_set_ident("sandboxd");
        args a;
        int r = parse_args(argc, argv, &a);
        if (r <= 0)
                return r == 0 ? EXIT_SUCCESS : 2;
        if (a.check_config)
                return check_config(&a);
        if (geteuid() != 0) {
                log_error("sandboxd must run as root (it creates namespaces, mounts, cgroups and nftables rules)");
                return EXIT_FAILURE;
        }
        daemon_config cfg;
        r = load_config(&a, &cfg);
        if (r >= 0)
                apply_log_level(&cfg);
        if (r >= 0)
                r = run(&a, &cfg);
        daemon_config_free(&cfg);
        return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
