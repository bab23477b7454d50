/* `sandboxctl policy test` (a dry run of a destination against a sandbox's
 * network policy, through policy.check) and `sandboxctl events` (the event
 * stream, through events.subscribe, until interrupted). */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

enum { OPT_P_SOCKET = 1000, OPT_P_JSON, OPT_P_POLICY, OPT_P_KIND };

static const char policy_help[] =
        "Usage: sandboxctl policy test [--json] NAME URL\n"
        "       sandboxctl policy test [--json] --policy FILE URL\n\n"
        "Asks whether the sandbox's network policy (or the policy document in FILE,\n"
        "- for stdin) allows URL, without sending anything. URL is\n"
        "scheme://host[:port]/... (the scheme gives the default port: https 443,\n"
        "http 80) or a bare host[:port] or address. Prints allow or deny, the layer\n"
        "that decided, the rule, and a one-line explanation.\n\n"
        "Exit status: 0 allowed, 3 denied (or an invalid policy), 4 no such sandbox.\n";

static const char *str_field(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int print_check(const ctl_globals *g, const cJSON *res) {
        const char *decision = str_field(res, "decision");
        bool allow = decision && streq(decision, "allow");
        if (g->json)
                ctl_print_json(res);
        else {
                const char *rule = str_field(res, "rule"), *msg = str_field(res, "message");
                printf("%s\nlayer: ", allow ? "allow" : "deny");
                ctl_fput_escaped(stdout, str_field(res, "layer") ? str_field(res, "layer") : "-");
                fputs("\nrule: ", stdout);
                ctl_fput_escaped(stdout, rule ? rule : "-");
                fputs("\nmessage: ", stdout);
                ctl_fput_escaped(stdout, msg ? msg : "-");
                fputc('\n', stdout);
        }
        return allow ? CLI_EXIT_OK : CLI_EXIT_POLICY;
}

/* Reads a policy document from FILE ("-": stdin). Returns 0 with *ret, or
 * an exit code after saying what is wrong. */
static int read_policy(const char *path, cJSON **ret) {
        _cleanup_fclose_ FILE *f = streq(path, "-") ? NULL : fopen(path, "re");
        FILE *in = streq(path, "-") ? stdin : f;
        if (!in)
                return ctl_error(CLI_EXIT_ERROR, "policy test: %s: %s", path, strerror(errno));
        size_t len = 0, cap = 0;
        _cleanup_free_ char *buf = NULL;
        for (;;) {
                if (cap - len < 4096) {
                        char *b = realloc(buf, cap ? cap * 2 : 65536);
                        if (!b)
                                return ctl_error(CLI_EXIT_ERROR, "out of memory");
                        buf = b;
                        cap = cap ? cap * 2 : 65536;
                }
                size_t n = fread(buf + len, 1, cap - len - 1, in);
                len += n;
                if (n == 0)
                        break;
        }
        if (ferror(in))
                return ctl_error(CLI_EXIT_ERROR, "policy test: read %s failed", path);
        buf[len] = 0;
        const char *where = NULL;
        cJSON *doc = cJSON_ParseWithOpts(buf, &where, true);
        if (!doc)
                return ctl_error(CLI_EXIT_POLICY, "policy test: %s is not valid JSON (near byte %zu)", path,
                                 where ? (size_t)(where - buf) : (size_t)0);
        *ret = doc;
        return 0;
}

static int policy_test(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_P_SOCKET }, { "json", no_argument, NULL, OPT_P_JSON },
                { "help", no_argument, NULL, 'h' }, { "policy", required_argument, NULL, OPT_P_POLICY }, {}
        };
        const char *file = NULL;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                if (opt == OPT_P_SOCKET)
                        g->socket = optarg;
                else if (opt == OPT_P_JSON)
                        g->json = true;
                else if (opt == OPT_P_POLICY)
                        file = optarg;
                else if (opt == 'h')
                        return fputs(policy_help, stdout), 0;
                else
                        return ctl_usage("policy", "policy test: unknown option");
        }
        int want = file ? 1 : 2;
        if (argc - optind != want)
                return ctl_usage("policy", "policy test: want %s", file ? "URL after --policy FILE" : "NAME and URL");
        const char *target = argv[argc - 1];
        _cleanup_json_ cJSON *params = cJSON_CreateObject();
        if (file) {
                cJSON *doc = NULL;
                int r = read_policy(file, &doc);
                if (r != 0)
                        return r;
                cJSON_AddItemToObject(params, "networkPolicy", doc);
        } else
                cJSON_AddStringToObject(params, "sandbox", argv[optind]);
        /* Anything without a scheme is a host[:port] or an address. */
        cJSON_AddStringToObject(params, strstr(target, "://") ? "url" : "host", target);

        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0)
                return r;
        _cleanup_client_error_ client_error *err = NULL;
        _cleanup_json_ cJSON *res = NULL;
        if (client_call(c, "policy.check", TAKE_PTR(params), -1, NULL, NULL, &res, &err) < 0)
                return ctl_report(g, "policy test", err);
        return print_check(g, res);
}

int ctl_policy(ctl_globals *g, int argc, char **argv) {
        if (argc >= 2 && (streq(argv[1], "--help") || streq(argv[1], "-h")))
                return fputs(policy_help, stdout), 0;
        if (argc < 2)
                return ctl_usage("policy", "policy: missing subcommand (test)");
        if (!streq(argv[1], "test"))
                return ctl_usage("policy", "policy: unknown subcommand '%s'", argv[1]);
        return policy_test(g, argc - 1, argv + 1);
}

/* --- events ----------------------------------------------------------- */

static const char events_help[] =
        "Usage: sandboxctl events [--json] [--kind K]... [NAME]\n\n"
        "Prints the daemon's events as they happen, one line each:\n"
        "TIME KIND SANDBOX MESSAGE, until interrupted (Ctrl-C, exit status 130).\n"
        "  NAME       only events of this sandbox (it need not exist yet)\n"
        "  --kind K   only events of kind K: denied, sandbox, netd_restarted (repeatable)\n"
        "  --json     one JSON object per line instead\n";

/* The human line: TIME KIND SANDBOX MESSAGE, where MESSAGE is the event's
 * message, else its status, else its other fields as JSON. */
static void print_event(const ctl_globals *g, const cJSON *ev) {
        if (g->json) {
                _cleanup_free_ char *s = cJSON_PrintUnformatted(ev);
                if (s)
                        puts(s);
                fflush(stdout);
                return;
        }
        const char *t = str_field(ev, "time"), *kind = str_field(ev, "kind"), *sb = str_field(ev, "sandbox");
        const char *msg = str_field(ev, "message"), *status = str_field(ev, "status");
        ctl_fput_escaped(stdout, t ? t : "-");
        putchar(' ');
        ctl_fput_escaped(stdout, kind ? kind : "-");
        putchar(' ');
        ctl_fput_escaped(stdout, sb ? sb : "-");
        putchar(' ');
        if (msg || status)
                ctl_fput_escaped(stdout, msg ? msg : status);
        else {
                _cleanup_json_ cJSON *rest = cJSON_Duplicate(ev, true);
                cJSON_DeleteItemFromObjectCaseSensitive(rest, "time");
                cJSON_DeleteItemFromObjectCaseSensitive(rest, "kind");
                cJSON_DeleteItemFromObjectCaseSensitive(rest, "sandbox");
                _cleanup_free_ char *s = rest ? cJSON_PrintUnformatted(rest) : NULL;
                ctl_fput_escaped(stdout, s ? s : "-");
        }
        const cJSON *dropped = cJSON_GetObjectItemCaseSensitive(ev, "dropped");
        if (cJSON_IsNumber(dropped))
                printf(" (%.0f earlier events dropped: this reader was too slow)", dropped->valuedouble);
        putchar('\n');
        fflush(stdout);
}

/* SIGINT/SIGTERM/SIGHUP arrive on a signalfd, polled beside the socket, so
 * an interrupt is never lost between a check and a blocking read. */
int ctl_signal_fd(void) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
                return -errno;
        int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd < 0 ? -errno : fd;
}

int ctl_wait_message(client *c, int sfd, const char *what) {
        while (!client_has_pending(c)) {
                struct pollfd p[2] = { { .fd = sfd, .events = POLLIN }, { .fd = client_fd(c), .events = POLLIN } };
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return ctl_error(CLI_EXIT_ERROR, "%s: poll: %s", what, strerror(errno));
                }
                if (p[0].revents) {
                        struct signalfd_siginfo si;
                        if (read(sfd, &si, sizeof(si)) == sizeof(si))
                                return si.ssi_signo == SIGINT ? CLI_EXIT_INTERRUPTED : 128 + (int)si.ssi_signo;
                }
                if (p[1].revents)
                        return 0;
        }
        return 0;
}

/* Reads events until a signal or the daemon goes away. */
static int event_loop(const ctl_globals *g, client *c, int sfd) {
        for (;;) {
                int w = ctl_wait_message(c, sfd, "events");
                if (w != 0)
                        return w;
                _cleanup_client_msg_ client_msg *msg = NULL;
                int r = client_next(c, 0, &msg);
                if (r == 0 || r == -EBADMSG)
                        continue;
                if (r < 0)
                        return ctl_error(CLI_EXIT_UNREACHABLE, "events: sandboxd closed the connection");
                if (msg->kind == CLIENT_MSG_NOTIFICATION && streq(msg->method, "event") && cJSON_IsObject(msg->params))
                        print_event(g, msg->params);
        }
}

int ctl_events(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_P_SOCKET }, { "json", no_argument, NULL, OPT_P_JSON },
                { "help", no_argument, NULL, 'h' }, { "kind", required_argument, NULL, OPT_P_KIND }, {}
        };
        _cleanup_json_ cJSON *params = cJSON_CreateObject();
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                if (opt == OPT_P_SOCKET)
                        g->socket = optarg;
                else if (opt == OPT_P_JSON)
                        g->json = true;
                else if (opt == OPT_P_KIND) {
                        cJSON *kinds = cJSON_GetObjectItemCaseSensitive(params, "kinds");
                        if (!kinds)
                                kinds = cJSON_AddArrayToObject(params, "kinds");
                        cJSON_AddItemToArray(kinds, cJSON_CreateString(optarg));
                } else if (opt == 'h')
                        return fputs(events_help, stdout), 0;
                else
                        return ctl_usage("events", "events: unknown option");
        }
        if (argc - optind > 1)
                return ctl_usage("events", "events: too many arguments");
        if (optind < argc)
                cJSON_AddStringToObject(params, "sandbox", argv[optind]);

        _cleanup_close_ int sfd = ctl_signal_fd();
        if (sfd < 0)
                return ctl_error(CLI_EXIT_ERROR, "events: signals: %s", strerror(-sfd));
        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0)
                return r;
        _cleanup_client_error_ client_error *err = NULL;
        int64_t id = client_send(c, "events.subscribe", TAKE_PTR(params));
        /* Events that arrive before the answer are queued, not lost. */
        if (id < 0 || client_wait(c, id, -1, NULL, NULL, NULL, &err) < 0) {
                if (!err)
                        return ctl_error(CLI_EXIT_UNREACHABLE, "events: cannot send to sandboxd: %s", strerror((int)-id));
                return ctl_report(g, "events", err);
        }
        return event_loop(g, c, sfd);
}

/* --- policy options of create and update ------------------------------- */

int ctl_policy_add(cJSON **doc, const char *list, const char *value) {
        if (!*doc && !(*doc = cJSON_CreateObject()))
                return -ENOMEM;
        cJSON *parent = *doc;
        const char *key = list;
        if (strncmp(list, "subnets.", 8) == 0) {
                key = list + 8;
                parent = cJSON_GetObjectItemCaseSensitive(*doc, "subnets");
                if (!parent && !(parent = cJSON_AddObjectToObject(*doc, "subnets")))
                        return -ENOMEM;
        }
        cJSON *arr = cJSON_GetObjectItemCaseSensitive(parent, key);
        if (!arr && !(arr = cJSON_AddArrayToObject(parent, key)))
                return -ENOMEM;
        cJSON *s = cJSON_CreateString(value);
        if (!s || !cJSON_AddItemToArray(arr, s)) {
                cJSON_Delete(s);
                return -ENOMEM;
        }
        return 0;
}
