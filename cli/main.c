/* sandboxctl: the command line front end of sandboxd (DESIGN §6 "CLI").
 * Parses the global options, dispatches to one function per command, and
 * turns results into human output or --json. `exec` lives in cli/exec.c. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"
#include "cli/copytree.h"

static const char main_help[] =
        "Usage: sandboxctl [--socket PATH] [--json] COMMAND [OPTIONS] ...\n"
        "\n"
        "Talks to sandboxd, the sandbox daemon.\n"
        "\n"
        "Commands (sandboxctl COMMAND --help shows every option):\n"
        "  create [OPTIONS]              create a sandbox and print its name: --name N,\n"
        "                                --runtime R, --git URL [--depth N] [--revision REV] |\n"
        "                                --tarball PATH|URL | --snapshot ID, --timeout D, --vcpus N,\n"
        "                                --port P, --env K=V, --tag K=V, --persistent,\n"
        "                                --userns | --no-userns, --allow-all | --deny-all |\n"
        "                                --policy FILE | --allow PATTERN, --allow-subnet CIDR, --deny-subnet CIDR\n"
        "  get-or-create --name N [OPTIONS]\n"
        "                                show sandbox N, creating it with create's options;\n"
        "                                says whether it was created and which keys differ\n"
        "  ls [--prefix P] [--tag K=V] [--limit N] [--cursor C]\n"
        "                                list sandboxes (--limit: one page and its next cursor)\n"
        "  get [--resume] NAME           show a sandbox (--resume: resume a stopped persistent one)\n"
        "  extend NAME DURATION          move a running sandbox's expiry later\n"
        "  set-timeout NAME DURATION [--on-timeout stop|pause]\n"
        "                                end (or pause) the running session DURATION from now\n"
        "  exec [OPTIONS] NAME -- CMD... run a command in a sandbox: --sudo, --cwd DIR, --env K=V,\n"
        "                                --container C, --timeout D, --detach, -i, -t\n"
        "  command get|wait|kill|logs ID reach a command started with exec --detach\n"
        "                                (kill --signal SIG; wait exits with its code;\n"
        "                                logs -f follows the output until the command ends)\n"
        "  ps NAME [--limit N] [--cursor C]\n"
        "                                list a sandbox's commands: id, status, exit code, start, command\n"
        "  stop NAME                     stop a sandbox's session\n"
        "  update NAME [OPTIONS]         change --timeout, --vcpus, --env, --tag, --port/--no-ports\n"
        "                                or the network policy options of create; shows the sandbox\n"
        "  fork SRC [--name N]           a new sandbox from SRC's current filesystem and config\n"
        "  snapshot NAME [--expire D] [--tag K=V]\n"
        "                                snapshot a sandbox (files and config); prints the snapshot id\n"
        "  snapshots [ls [--sandbox NAME] [--tag K=V]|rm ID|export ID FILE|import FILE]\n"
        "                                list (oldest first), delete, export or import snapshots\n"
        "  runtime list|import NAME ROOTFS|bootstrap NAME [--suite S] [--mirror URL]|rm NAME\n"
        "                                root filesystems for --runtime\n"
        "  volume create NAME --size SIZE [--inodes N] [--tag K=V]|ls|get NAME|rm NAME\n"
        "                                named volumes for create --volume NAME:/PATH[:ro]\n"
        "  pause NAME                    freeze a sandbox's processes\n"
        "  resume NAME                   thaw a paused sandbox\n"
        "  container ls SANDBOX|pause SANDBOX NAME|resume SANDBOX NAME\n"
        "                                list a sandbox's containers, freeze or thaw one\n"
        "  rm [-f] NAME...               delete sandboxes (-f: one already gone is no error)\n"
        "  cp [-r] SRC DST               copy a file, or with -r a directory tree; one side is NAME:PATH\n"
        "  fs ls|stat|mkdir [-p]|rm [-r]|watch [-r] NAME:PATH\n"
        "                                list, show, make or remove paths in a sandbox\n"
        "  policy test NAME|--policy FILE URL\n"
        "                                would the policy allow URL? (exit 0 yes, 3 no)\n"
        "  events [NAME] [--kind K]...   print events (denials, lifecycle) as they happen\n"
        "  daemon info                   show the daemon's version, limits and host support\n"
        "  certs init DIR [--tag K=V] [--tenant NAME] [--name HOST]\n"
        "                                a CA, server and client certificates for --host\n"
        "  top [--interval SECS]         live usage of every running sandbox (--json: once)\n"
        "\n"
        "Global options:\n"
        "  --socket PATH   daemon socket (default: $SANDBOXD_SOCKET, else " CLIENT_DEFAULT_SOCKET ")\n"
        "  --host tcp://H:P  a remote daemon over TLS 1.3 (default: $SANDBOXD_HOST); with\n"
        "                  --cert FILE, --key FILE (the client certificate and key) and\n"
        "                  --ca FILE (the CA of the daemon's certificate), else $SANDBOXD_CERT,\n"
        "                  $SANDBOXD_KEY, $SANDBOXD_CA; 'sandboxctl certs init DIR' makes a set\n"
        "  --json          print results as JSON\n"
        "  -h, --help      show help (also after a command: sandboxctl exec --help)\n"
        "  --version       show the version\n"
        "\n"
        "Exit status: 0 ok, 1 error, 2 usage, 3 invalid or denied policy, 4 not found,\n"
        "5 conflict, 69 daemon unreachable, 130 interrupted; exec and command wait exit with\n"
        "the command's code. With --json an error is one JSON object on stderr:\n"
        "{\"error\": {\"code\": N, \"message\": TEXT, \"data\": {\"reason\", \"field\", \"exitCode\"}}}.\n";

/* Long options every command accepts, so `sandboxctl get x --json` works as
 * well as `sandboxctl --json get x`. */
enum { OPT_SOCKET = 1000, OPT_JSON, OPT_HOST, OPT_CERT, OPT_KEY, OPT_CA, OPT_FIRST_COMMAND };
#define COMMON_OPTIONS                                          \
        { "socket", required_argument, NULL, OPT_SOCKET },      \
        { "host", required_argument, NULL, OPT_HOST },          \
        { "cert", required_argument, NULL, OPT_CERT },          \
        { "key", required_argument, NULL, OPT_KEY },            \
        { "ca", required_argument, NULL, OPT_CA },              \
        { "json", no_argument, NULL, OPT_JSON },                \
        { "help", no_argument, NULL, 'h' }

/* Handles the common options for a command; returns 1 when handled, 0 for
 * `--help` (help printed), -1 when `opt` is not common. */
static int common_option(ctl_globals *g, int opt, const char *help) {
        switch (opt) {
        case OPT_SOCKET:
                g->socket = optarg;
                return 1;
        case OPT_JSON:
                g->json = true;
                return 1;
        case OPT_HOST:
                g->host = optarg;
                return 1;
        case OPT_CERT:
                g->cert = optarg;
                return 1;
        case OPT_KEY:
                g->key = optarg;
                return 1;
        case OPT_CA:
                g->ca = optarg;
                return 1;
        case 'h':
                fputs(help, stdout);
                return 0;
        default:
                return -1;
        }
}

/* Runs one call on a fresh connection. Returns 0 with *ret_result, or the
 * exit code after reporting the failure with `context`. */
/* Parses the single NAME operand a command takes after its options. */
static int one_name(const char *command, int argc, char **argv, const char **ret) {
        if (optind + 1 != argc)
                return ctl_usage(command, optind >= argc ? "%s: missing NAME" : "%s: too many arguments",
                                 command);
        *ret = argv[optind];
        return 0;
}

static cJSON *name_params(const char *name) {
        cJSON *p = cJSON_CreateObject();
        if (p)
                cJSON_AddStringToObject(p, "name", name);
        return p;
}

/* Shows a Sandbox the way `get` does: --json as JSON, else key: value lines. */
static void ctl_print_sandbox(const ctl_globals *g, const cJSON *sandbox) {
        if (g->json)
                ctl_print_json(sandbox);
        else
                ctl_print_fields(sandbox);
}

/* get / stop / rm / daemon info share one shape: one call, then either JSON,
 * the fields, or nothing. */
static int simple_command(ctl_globals *g, int argc, char **argv, const char *help,
                          const char *method, bool takes_name, bool print_fields) {
        static const struct option opts[] = { COMMON_OPTIONS, {} };
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, help);
                if (r == 0)
                        return 0;
                if (r < 0)
                        return ctl_usage(argv[0], "%s: unknown option", argv[0]);
        }
        const char *name = NULL;
        cJSON *params = NULL;
        if (takes_name) {
                int r = one_name(argv[0], argc, argv, &name);
                if (r != 0)
                        return r;
                params = name_params(name);
        } else if (optind != argc)
                return ctl_usage(argv[0], "%s: too many arguments", argv[0]);

        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "%s%s%s", argv[0], name ? " " : "", name ? name : "") < 0)
                context = NULL;
        cJSON *result = NULL;
        int r = ctl_call(g, context, method, params, &result);
        if (r != 0)
                return r;
        if (g->json)
                ctl_print_json(result);
        else if (print_fields)
                ctl_print_fields(result);
        cJSON_Delete(result);
        return 0;
}

static const char get_help[] =
        "Usage: sandboxctl get [--json] [--resume] NAME\n\n"
        "Shows a sandbox as key: value lines.\n"
        "  --resume   a stopped persistent sandbox first gets a new session on its kept\n"
        "             filesystem (a running one is shown as it is)\n";

static int cmd_get(ctl_globals *g, int argc, char **argv) {
        enum { OPT_RESUME = OPT_FIRST_COMMAND };
        static const struct option opts[] = { COMMON_OPTIONS, { "resume", no_argument, NULL, OPT_RESUME }, {} };
        bool resume = false;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, get_help);
                if (r == 0)
                        return 0;
                if (r > 0)
                        continue;
                if (opt != OPT_RESUME)
                        return ctl_usage("get", "get: unknown option");
                resume = true;
        }
        const char *name = NULL;
        int r = one_name("get", argc, argv, &name);
        if (r != 0)
                return r;
        cJSON *params = name_params(name);
        if (resume)
                cJSON_AddBoolToObject(params, "resume", true);
        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "get %s", name) < 0)
                context = NULL;
        cJSON *result = NULL;
        r = ctl_call(g, context, "sandbox.get", params, &result);
        if (r != 0)
                return r;
        ctl_print_sandbox(g, result);
        cJSON_Delete(result);
        return 0;
}

static const char extend_help[] =
        "Usage: sandboxctl extend [--json] NAME DURATION\n\n"
        "Moves the running session's expiry later by DURATION (90s, 5m, 2h, 1d or\n"
        "milliseconds), capped at the daemon's maximum timeout from now, and shows the\n"
        "sandbox. A stopped sandbox is not resumed here; get can resume it.\n";

static int cmd_extend(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = { COMMON_OPTIONS, {} };
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, extend_help);
                if (r == 0)
                        return 0;
                if (r < 0)
                        return ctl_usage("extend", "extend: unknown option");
        }
        if (argc - optind != 2)
                return ctl_usage("extend", argc - optind < 2 ? "extend: want NAME and DURATION" :
                                 "extend: too many arguments");
        const char *name = argv[optind], *duration = argv[optind + 1];
        int64_t ms;
        if (cli_parse_duration(duration, &ms) < 0)
                return ctl_usage("extend", "extend: bad DURATION '%s' (use 90s, 5m, 2h, 1d or milliseconds)",
                                 duration);
        cJSON *params = name_params(name);
        cJSON_AddNumberToObject(params, "duration", (double) ms);
        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "extend %s", name) < 0)
                context = NULL;
        cJSON *result = NULL;
        int r = ctl_call(g, context, "sandbox.extendTimeout", params, &result);
        if (r != 0)
                return r;
        ctl_print_sandbox(g, result);
        cJSON_Delete(result);
        return 0;
}

static const char set_timeout_help[] =
        "Usage: sandboxctl set-timeout [--json] NAME DURATION [--on-timeout stop|pause]\n\n"
        "Sets the running session to end DURATION (90s, 5m, 2h, 1d or milliseconds; at\n"
        "least 1s, at most the daemon's maximum timeout) from now, earlier or later than\n"
        "it would have, and shows the sandbox. The sandbox's own timeout (that of its\n"
        "later sessions) is not changed: update changes it.\n"
        "  --on-timeout stop|pause   what the expiry does: stop ends the session (the\n"
        "                            default); pause freezes it as pause does, and a\n"
        "                            resume then gives it a whole timeout. It holds for\n"
        "                            the rest of the session.\n";

static int cmd_set_timeout(ctl_globals *g, int argc, char **argv) {
        enum { OPT_ON_TIMEOUT = OPT_FIRST_COMMAND };
        static const struct option opts[] = {
                COMMON_OPTIONS, { "on-timeout", required_argument, NULL, OPT_ON_TIMEOUT }, {}
        };
        const char *on_timeout = NULL;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, set_timeout_help);
                if (r == 0)
                        return 0;
                if (r > 0)
                        continue;
                if (opt != OPT_ON_TIMEOUT)
                        return ctl_usage("set-timeout", "set-timeout: unknown option");
                /* Checked here too, so a typo is a usage error naming the flag. */
                if (!streq(optarg, "stop") && !streq(optarg, "pause"))
                        return ctl_usage("set-timeout", "set-timeout: --on-timeout wants stop or pause, got '%s'",
                                         optarg);
                on_timeout = optarg;
        }
        if (argc - optind != 2)
                return ctl_usage("set-timeout", argc - optind < 2 ? "set-timeout: want NAME and DURATION" :
                                 "set-timeout: too many arguments");
        const char *name = argv[optind], *duration = argv[optind + 1];
        int64_t ms;
        if (cli_parse_duration(duration, &ms) < 0)
                return ctl_usage("set-timeout",
                                 "set-timeout: bad DURATION '%s' (use 90s, 5m, 2h, 1d or milliseconds)", duration);
        cJSON *params = name_params(name);
        cJSON_AddNumberToObject(params, "timeout", (double) ms);
        if (on_timeout)
                cJSON_AddStringToObject(params, "onTimeout", on_timeout);
        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "set-timeout %s", name) < 0)
                context = NULL;
        cJSON *result = NULL;
        int r = ctl_call(g, context, "sandbox.setTimeout", params, &result);
        if (r != 0)
                return r;
        ctl_print_sandbox(g, result);
        cJSON_Delete(result);
        return 0;
}

static int cmd_stop(ctl_globals *g, int argc, char **argv) {
        return simple_command(g, argc, argv,
                              "Usage: sandboxctl stop [--json] NAME\n\n"
                              "Stops the sandbox's session (SIGTERM, a grace period, SIGKILL).\n"
                              "A sandbox that is not persistent is then deleted. Prints nothing.\n",
                              "sandbox.stop", true, false);
}

static const char rm_help[] =
        "Usage: sandboxctl rm [--json] [-f] NAME...\n\n"
        "Stops each sandbox if needed and removes every trace of it. Prints nothing.\n"
        "Every NAME is tried, in order; a failure is reported for its name and the\n"
        "others still go. The exit status is 0 when all were removed, else that of the\n"
        "failures when they agree (4: not found), else 1.\n"
        "  -f, --force   a sandbox that does not exist (already removed) is no error\n";

/* The exit code of several failures: theirs when they agree, else 1. */
static int merge_exit(int so_far, int next) {
        return so_far == 0 || so_far == next ? next : CLI_EXIT_ERROR;
}

/* One failure of `rm` for its --json error object's data.errors. */
static cJSON *rm_failure(const char *name, const client_error *err) {
        cJSON *e = cJSON_CreateObject();
        if (!e)
                return NULL;
        cJSON_AddStringToObject(e, "name", name);
        cJSON_AddNumberToObject(e, "code", err && err->code != CLIENT_ERROR_LOCAL ? err->code : -32000);
        cJSON_AddStringToObject(e, "message", err && err->message ? err->message : "out of memory");
        cJSON *d = cJSON_AddObjectToObject(e, "data");
        if (d && err && err->reason)
                cJSON_AddStringToObject(d, "reason", err->reason);
        if (d)
                cJSON_AddNumberToObject(d, "exitCode", cli_exit_code(err));
        return e;
}

static int cmd_rm(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = { COMMON_OPTIONS, { "force", no_argument, NULL, 'f' }, {} };
        bool force = false;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "hf", opts, NULL)) != -1) {
                int r = common_option(g, opt, rm_help);
                if (r == 0)
                        return 0;
                if (r > 0)
                        continue;
                if (opt != 'f')
                        return ctl_usage("rm", "rm: unknown option");
                force = true;
        }
        if (optind >= argc)
                return ctl_usage("rm", "rm: missing NAME");
        _cleanup_client_ client *c = NULL;
        int ret = ctl_connect(g, &c);
        if (ret != 0)
                return ret;
        /* With --json several failures go out together as one error object. */
        bool one_json = (g->json || ctl_json_errors) && argc - optind > 1;
        _cleanup_json_ cJSON *failed = cJSON_CreateArray();
        int first_code = 0;
        for (int i = optind; i < argc && c; i++) {
                _cleanup_client_error_ client_error *err = NULL;
                _cleanup_json_ cJSON *result = NULL;
                if (client_call(c, "sandbox.delete", name_params(argv[i]), -1, NULL, NULL, &result, &err) >= 0 ||
                    (force && err && err->reason && streq(err->reason, "not_found")))
                        continue;
                if (one_json) {
                        ret = merge_exit(ret, cli_exit_code(err));
                        cJSON_AddItemToArray(failed, rm_failure(argv[i], err));
                        if (!first_code)
                                first_code = err && err->code != CLIENT_ERROR_LOCAL ? err->code : -32000;
                } else {
                        _cleanup_free_ char *context = NULL;
                        if (asprintf(&context, "rm %s", argv[i]) < 0)
                                context = NULL;
                        ret = merge_exit(ret, ctl_report(g, context, err));
                }
                if (err && err->code == CLIENT_ERROR_LOCAL && err->reason &&
                    streq(err->reason, CLIENT_REASON_DISCONNECTED)) {
                        /* The connection is gone; the next names get a new one. */
                        client_free(TAKE_PTR(c));
                        if (i + 1 < argc && ctl_connect(g, &c) != 0)
                                ret = merge_exit(ret, CLI_EXIT_UNREACHABLE);
                }
        }
        int n_failed = cJSON_GetArraySize(failed);
        if (one_json && n_failed > 0) {
                _cleanup_free_ char *msg = NULL;
                if (asprintf(&msg, "rm: %d of %d sandboxes not removed", n_failed, argc - optind) < 0)
                        msg = NULL;
                cJSON *extra = cJSON_CreateObject();
                cJSON_AddItemToObject(extra, "errors", TAKE_PTR(failed));
                ctl_print_error_json(first_code, msg, NULL, NULL, ret, extra);
        }
        return ret;
}

static int cmd_pause(ctl_globals *g, int argc, char **argv) {
        return simple_command(g, argc, argv,
                              "Usage: sandboxctl pause [--json] NAME\n\n"
                              "Freezes every process of the sandbox's running session (its cgroup's\n"
                              "freezer) until resume; exec, cp and fs are refused meanwhile. Prints nothing\n"
                              "(--json: the sandbox, whose session.paused is true).\n",
                              "sandbox.pause", true, false);
}

static int cmd_resume(ctl_globals *g, int argc, char **argv) {
        return simple_command(g, argc, argv,
                              "Usage: sandboxctl resume [--json] NAME\n\n"
                              "Thaws a sandbox that pause froze. Prints nothing (--json: the sandbox).\n"
                              "A stopped persistent sandbox is not resumed here: exec, or get with its\n"
                              "resume flag, gives it a new session.\n",
                              "sandbox.resume", true, false);
}

static int cmd_daemon(ctl_globals *g, int argc, char **argv) {
        static const char help[] = "Usage: sandboxctl daemon info [--json]\n\n"
                                   "Shows the daemon's version, paths, limits and what this host supports.\n";
        if (argc >= 2 && (streq(argv[1], "--help") || streq(argv[1], "-h"))) {
                fputs(help, stdout);
                return 0;
        }
        if (argc < 2 || !streq(argv[1], "info"))
                return ctl_usage("daemon", argc < 2 ? "daemon: missing subcommand (info)" :
                                 "daemon: unknown subcommand '%s'", argv[argc < 2 ? 0 : 1]);
        argv[1] = (char *) "daemon info";
        return simple_command(g, argc - 1, argv + 1, help, "daemon.info", false, true);
}

/* The NETWORK column: the policy's name, or "custom" for an object. */
static const char *network_cell(const cJSON *sandbox) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(sandbox, "networkPolicy");
        if (cJSON_IsString(p))
                return p->valuestring;
        return cJSON_IsObject(p) ? "custom" : NULL;
}

static const char *string_cell(const cJSON *obj, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void print_sandbox_table(const cJSON *sandboxes) {
        static const char *const header[] = { "NAME", "STATUS", "RUNTIME", "NETWORK", "CREATED", "EXPIRES" };
        size_t n = (size_t) cJSON_GetArraySize(sandboxes), i = 0;
        _cleanup_free_ char ***rows = calloc(n ? n : 1, sizeof(char **));
        _cleanup_free_ char **cells = calloc(n ? n * 6 : 1, sizeof(char *));
        if (!rows || !cells)
                return;
        const cJSON *s;
        cJSON_ArrayForEach(s, sandboxes) {
                char **row = rows[i] = cells + i * 6;
                i++;
                row[0] = (char *) string_cell(s, "name");
                row[1] = (char *) string_cell(s, "status");
                row[2] = (char *) string_cell(s, "runtime");
                row[3] = (char *) network_cell(s);
                row[4] = (char *) string_cell(s, "createdAt");
                row[5] = (char *) string_cell(s, "expiresAt");
        }
        ctl_print_table(header, 6, rows, n);
}

/* Fetches every page of sandbox.list (following nextCursor) into one
 * array. Returns 0 with *ret, or an exit code. */
static int list_all(const ctl_globals *g, const char *prefix, const cJSON *tags, cJSON **ret) {
        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0)
                return r;
        _cleanup_json_ cJSON *all = cJSON_CreateArray();
        _cleanup_free_ char *cursor = NULL;
        do {
                cJSON *p = cJSON_CreateObject();
                if (prefix)
                        cJSON_AddStringToObject(p, "namePrefix", prefix);
                if (tags->child)
                        cJSON_AddItemToObject(p, "tags", cJSON_Duplicate(tags, true));
                if (cursor)
                        cJSON_AddStringToObject(p, "cursor", cursor);
                _cleanup_client_error_ client_error *err = NULL;
                _cleanup_json_ cJSON *result = NULL;
                if (client_call(c, "sandbox.list", p, -1, NULL, NULL, &result, &err) < 0)
                        return ctl_report(g, "ls", err);
                cJSON *list = cJSON_GetObjectItemCaseSensitive(result, "sandboxes");
                cJSON *s;
                while (cJSON_IsArray(list) && (s = cJSON_DetachItemFromArray(list, 0)))
                        cJSON_AddItemToArray(all, s);
                free(cursor);
                const char *next = string_cell(result, "nextCursor");
                cursor = next ? strdup(next) : NULL;
        } while (cursor);
        *ret = TAKE_PTR(all);
        return 0;
}

static int parse_uint(const char *s, long max, long *ret);
static int range_usage(const char *verb, const char *flag, const char *value, long max);

/* One page of sandbox.list (ls --limit/--cursor): the table and the next
 * cursor, or the answer as it is with --json. Returns the exit code. */
static int list_page(const ctl_globals *g, const char *prefix, const cJSON *tags, long limit, const char *cursor) {
        cJSON *p = cJSON_CreateObject();
        if (prefix)
                cJSON_AddStringToObject(p, "namePrefix", prefix);
        if (tags->child)
                cJSON_AddItemToObject(p, "tags", cJSON_Duplicate(tags, true));
        if (limit)
                cJSON_AddNumberToObject(p, "limit", (double) limit);
        if (cursor)
                cJSON_AddStringToObject(p, "cursor", cursor);
        _cleanup_json_ cJSON *result = NULL;
        int r = ctl_call(g, "ls", "sandbox.list", p, &result);
        if (r != 0)
                return r;
        if (g->json) {
                ctl_print_json(result);
                return 0;
        }
        print_sandbox_table(cJSON_GetObjectItemCaseSensitive(result, "sandboxes"));
        const char *next = string_cell(result, "nextCursor");
        if (next) {
                fputs("next cursor: ", stdout);
                ctl_fput_escaped(stdout, next);
                putchar('\n');
        }
        return 0;
}

static int cmd_ls(ctl_globals *g, int argc, char **argv) {
        static const char help[] =
                "Usage: sandboxctl ls [--json] [--prefix P] [--tag K=V]...\n\n"
                "Lists sandboxes as a table: NAME STATUS RUNTIME NETWORK CREATED EXPIRES.\n"
                "  --prefix P   only names starting with P\n"
                "  --tag K=V    only sandboxes with this tag (repeatable; all must match)\n"
                "  --limit N    one page of at most N sandboxes (1 to 1000) instead of all of them;\n"
                "               prints 'next cursor: C' after the table when there are more\n"
                "  --cursor C   the page that starts at cursor C (from an earlier --limit)\n";
        enum { OPT_TAG = OPT_FIRST_COMMAND, OPT_PREFIX, OPT_LIMIT, OPT_CURSOR };
        static const struct option opts[] = {
                COMMON_OPTIONS, { "tag", required_argument, NULL, OPT_TAG },
                { "prefix", required_argument, NULL, OPT_PREFIX },
                { "limit", required_argument, NULL, OPT_LIMIT },
                { "cursor", required_argument, NULL, OPT_CURSOR }, {}
        };
        _cleanup_json_ cJSON *tags = cJSON_CreateObject();
        const char *prefix = NULL, *cursor = NULL;
        long limit = 0;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, help);
                if (r >= 0) {
                        if (r == 0)
                                return 0;
                } else if (opt == OPT_TAG) {
                        if (cli_kv_add(tags, optarg) < 0)
                                return ctl_usage("ls", "ls: --tag wants K=V, got '%s'", optarg);
                } else if (opt == OPT_PREFIX)
                        prefix = optarg;
                else if (opt == OPT_LIMIT) {
                        if (parse_uint(optarg, 1000, &limit) < 0)
                                return range_usage("ls", "--limit", optarg, 1000);
                } else if (opt == OPT_CURSOR)
                        cursor = optarg;
                else
                        return ctl_usage("ls", "ls: unknown option");
        }
        if (optind != argc)
                return ctl_usage("ls", "ls: too many arguments");
        if (limit || cursor)
                return list_page(g, prefix, tags, limit, cursor);

        _cleanup_json_ cJSON *all = NULL;
        int r = list_all(g, prefix, tags, &all);
        if (r != 0)
                return r;
        if (g->json) {
                cJSON *out = cJSON_CreateObject();
                cJSON_AddItemToObject(out, "sandboxes", TAKE_PTR(all));
                cJSON_AddNullToObject(out, "nextCursor");
                ctl_print_json(out);
                cJSON_Delete(out);
        } else
                print_sandbox_table(all);
        return 0;
}

/* --- create ----------------------------------------------------------- */

#define CREATE_OPTIONS_HELP \
        "  --name N                 name ([a-z0-9][a-z0-9-]{0,62}; default sbx-xxxxxxxx)\n" \
        "  --runtime R              base root filesystem (default host)\n" \
        "  --git URL                clone URL into /workspace\n" \
        "    --depth N              accepted; the clone is full (libgit2 1.5 has no shallow fetch)\n" \
        "    --revision REV         branch, tag or commit to check out\n" \
        "    --git-username U       user for an authenticated clone\n" \
        "    --git-password-env VAR read the password from environment variable VAR\n" \
        "    --git-password-stdin   read the password from the first line of stdin\n" \
        "  --tarball PATH|URL       extract a tarball into /workspace (a path is made absolute)\n" \
        "  --snapshot ID            start from a snapshot\n" \
        "  --timeout DURATION       session lifetime: 90s, 5m, 2h, 1d or milliseconds (default 5m)\n" \
        "  --vcpus N                CPUs (memory is N x 2 GiB)\n" \
        "  --port P                 expose a port (repeatable)\n" \
        "  --env K=V                environment for every command (repeatable)\n" \
        "  --tag K=V                tag (repeatable, at most 5)\n" \
        "  --persistent             keep the filesystem when the session ends\n" \
        "  --volume NAME:/PATH[:ro] mount volume NAME at /PATH, read-only with :ro\n" \
        "                           (repeatable, at most 16; sandboxctl volume --help)\n" \
        "  --userns | --no-userns   run in a user namespace: sandbox root is an unprivileged\n" \
        "                           host id (default: the daemon's \"userns\" setting)\n" \
        "  --allow-all | --deny-all | --policy FILE\n" \
        "                           network policy (default: the daemon's\n" \
        "                           defaultNetworkPolicy, allow-all unless set); FILE\n" \
        "                           holds the JSON policy document, - for stdin\n" \
        "  --allow PATTERN          or a custom policy: allow this domain pattern\n" \
        "                           (*.example.com, api.example.com:443; repeatable),\n" \
        "  --allow-subnet CIDR      allow addresses in CIDR (repeatable),\n" \
        "  --deny-subnet CIDR       deny addresses in CIDR, before any allow (repeatable);\n" \
        "                           a custom policy denies everything it does not allow\n" \
        "Passwords are never taken on the command line, where other users can read them.\n"

static const char create_help[] =
        "Usage: sandboxctl create [--json] [OPTIONS]\n\n"
        "Creates a sandbox, waits until it runs with its source in /workspace, and\n"
        "prints its name. On a terminal (without --json), stderr shows the progress\n"
        "of a git or tarball source while it is fetched.\n\n"
        CREATE_OPTIONS_HELP;

enum {
        OPT_NAME = OPT_FIRST_COMMAND, OPT_RUNTIME, OPT_GIT, OPT_DEPTH, OPT_REVISION, OPT_GIT_USER,
        OPT_GIT_PASS_ENV, OPT_GIT_PASS_STDIN, OPT_TARBALL, OPT_SNAPSHOT, OPT_TIMEOUT, OPT_VCPUS,
        OPT_PORT, OPT_ENV, OPT_TAG, OPT_PERSISTENT, OPT_USERNS, OPT_NO_USERNS, OPT_ALLOW_ALL, OPT_DENY_ALL, OPT_POLICY,
        OPT_ALLOW, OPT_ALLOW_SUBNET, OPT_DENY_SUBNET, OPT_VOLUME,
};

typedef struct create_args {
        cJSON *params;      /* the request being built */
        cJSON *source;      /* params.source, once a source option is seen */
        const char *git_url, *depth, *revision, *user, *pass_env;
        bool pass_stdin;
        bool source_conflict; /* more than one of --git, --tarball, --snapshot */
        int policies;       /* how many of --allow-all/--deny-all/--policy */
        cJSON *custom;      /* the document --allow/--allow-subnet/--deny-subnet build */
        const char *vcpus_arg, *timeout_arg; /* as typed, for check_limits */
        long vcpus;
        int64_t timeout_ms;
} create_args;

/* Frees what create_args owns (the custom document until it is moved into
 * params). */
static void create_args_done(create_args *a) {
        cJSON_Delete(a->custom);
}

/* The list of the custom policy document an option adds to, or NULL. */
static const char *custom_policy_list(int opt) {
        return opt == OPT_ALLOW ? "allow" : opt == OPT_ALLOW_SUBNET ? "subnets.allow" :
               opt == OPT_DENY_SUBNET ? "subnets.deny" : NULL;
}

/* Puts the custom document into params.networkPolicy once all options are
 * read; it excludes the named policies. Returns 0 or an exit code. */
static int finish_custom_policy(const char *command, create_args *a) {
        if (!a->custom)
                return 0;
        if (a->policies)
                return ctl_usage(command, "%s: --allow, --allow-subnet and --deny-subnet build a custom policy; "
                                 "they cannot be combined with --allow-all, --deny-all or --policy", command);
        cJSON_DeleteItemFromObjectCaseSensitive(a->params, "networkPolicy");
        cJSON_AddItemToObject(a->params, "networkPolicy", TAKE_PTR(a->custom));
        return 0;
}

/* Parses a positive integer in [1, max]. */
static int parse_uint(const char *s, long max, long *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 1 || v > max)
                return -EINVAL;
        *ret = v;
        return 0;
}

/* Checks a --vcpus and a --timeout value against the daemon's limits
 * (daemon.info "limits": maxVcpus, maxTimeoutMs) before the request, so an
 * out-of-range value is reported as the value typed and the valid range:
 * "create: --vcpus: 99 is out of range (1 to 8)". vcpus_arg or timeout_arg
 * NULL skips that one. When daemon.info cannot be had, the daemon's own
 * check of the request decides. Returns 0 or CLI_EXIT_USAGE. */
static int check_limits(const ctl_globals *g, const char *verb, const char *vcpus_arg, long vcpus,
                        const char *timeout_arg, int64_t timeout_ms) {
        if (!vcpus_arg && !timeout_arg)
                return 0;
        _cleanup_client_ client *c = NULL;
        if (client_connect(client_socket_path(g->socket), &c) < 0)
                return 0;
        _cleanup_json_ cJSON *info = NULL;
        if (client_call(c, "daemon.info", NULL, -1, NULL, NULL, &info, NULL) < 0)
                return 0;
        const cJSON *lim = cJSON_GetObjectItemCaseSensitive(info, "limits");
        const cJSON *maxv = cJSON_GetObjectItemCaseSensitive(lim, "maxVcpus");
        const cJSON *maxt = cJSON_GetObjectItemCaseSensitive(lim, "maxTimeoutMs");
        if (vcpus_arg && cJSON_IsNumber(maxv) && (vcpus < 1 || vcpus > (long) maxv->valuedouble))
                return ctl_error(CLI_EXIT_USAGE, "%s: --vcpus: %s is out of range (1 to %.0f)", verb, vcpus_arg,
                                 maxv->valuedouble);
        if (timeout_arg && cJSON_IsNumber(maxt) && timeout_ms > (int64_t) maxt->valuedouble) {
                char buf[32];
                return ctl_error(CLI_EXIT_USAGE, "%s: --timeout: %s is out of range (1ms to %s)", verb, timeout_arg,
                                 cli_format_duration((int64_t) maxt->valuedouble, buf, sizeof buf));
        }
        return 0;
}

/* Parses a --vcpus value: a whole number (any size: check_limits says
 * whether it is in range). Returns 0 or -EINVAL. */
static int parse_vcpus(const char *s, long *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || *end || !(s[0] >= '0' && s[0] <= '9'))
                return -EINVAL;
        *ret = errno == ERANGE ? LONG_MAX : v;
        return 0;
}

/* Reports a value parse_uint refused as one line with the valid range:
 * "ls: --limit: 0 is out of range (1 to 1000)", or for what is not a whole
 * number "ls: --limit: 'x' is not a whole number (1 to 1000)". Returns
 * CLI_EXIT_USAGE. */
static int range_usage(const char *verb, const char *flag, const char *value, long max) {
        bool digits = *value != 0 && strspn(value, "0123456789") == strlen(value);
        return ctl_error(CLI_EXIT_USAGE, digits ? "%s: %s: %s is out of range (1 to %ld)" :
                         "%s: %s: '%s' is not a whole number (1 to %ld)", verb, flag, value, max);
}

/* Reads a whole file ("-" = stdin) into a new NUL-terminated buffer. */
static int read_file(const char *path, char **ret, size_t *ret_len) {
        _cleanup_fclose_ FILE *f = streq(path, "-") ? NULL : fopen(path, "re");
        FILE *in = streq(path, "-") ? stdin : f;
        if (!in)
                return negative_errno();
        size_t len = 0, cap = 65536;
        _cleanup_free_ char *buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        size_t n;
        while ((n = fread(buf + len, 1, cap - len - 1, in)) > 0) {
                len += n;
                if (cap - len - 1 == 0) {
                        char *b = realloc(buf, cap * 2);
                        if (!b)
                                return -ENOMEM;
                        buf = b;
                        cap *= 2;
                }
        }
        if (ferror(in))
                return -EIO;
        buf[len] = 0;
        *ret = TAKE_PTR(buf);
        *ret_len = len;
        return 0;
}

static int set_policy(create_args *a, const char *value, bool from_file) {
        a->policies++;
        cJSON_DeleteItemFromObjectCaseSensitive(a->params, "networkPolicy");
        if (!from_file) {
                cJSON_AddStringToObject(a->params, "networkPolicy", value);
                return 0;
        }
        _cleanup_free_ char *text = NULL;
        size_t len;
        int r = read_file(value, &text, &len);
        if (r < 0)
                return ctl_error(CLI_EXIT_ERROR, "create: read policy %s: %s", value, strerror(-r));
        const char *where = NULL;
        cJSON *policy = cJSON_ParseWithOpts(text, &where, true);
        if (!policy)
                return ctl_error(CLI_EXIT_POLICY, "create: policy %s is not valid JSON (near byte %zu)",
                                 value, where ? (size_t) (where - text) : (size_t) 0);
        cJSON_AddItemToObject(a->params, "networkPolicy", policy);
        return 0;
}

static cJSON *ensure_source(create_args *a, const char *type) {
        if (a->source)
                a->source_conflict = true;
        cJSON_DeleteItemFromObjectCaseSensitive(a->params, "source");
        a->source = cJSON_AddObjectToObject(a->params, "source");
        cJSON_AddStringToObject(a->source, "type", type);
        return a->source;
}

static int set_tarball(create_args *a, const char *value) {
        cJSON *s = ensure_source(a, "tarball");
        if (strstr(value, "://")) {
                cJSON_AddStringToObject(s, "url", value);
                return 0;
        }
        /* The daemon resolves paths in its own cwd, not ours. */
        char abs[PATH_MAX];
        if (!realpath(value, abs))
                return ctl_error(CLI_EXIT_ERROR, "create: tarball %s: %s", value, strerror(errno));
        cJSON_AddStringToObject(s, "path", abs);
        return 0;
}

/* Sets obj[key] = item, replacing an earlier value (a repeated option's
 * last value wins, as with most command line tools). */
static void set_item(cJSON *obj, const char *key, cJSON *item) {
        cJSON_DeleteItemFromObjectCaseSensitive(obj, key);
        cJSON_AddItemToObject(obj, key, item);
}

/* Handles one create option. Returns 0, or an exit code. */
static int create_option(create_args *a, int opt) {
        cJSON *p = a->params;
        long n;
        int64_t ms;
        switch (opt) {
        case OPT_NAME: set_item(p, "name", cJSON_CreateString(optarg)); return 0;
        case OPT_RUNTIME: set_item(p, "runtime", cJSON_CreateString(optarg)); return 0;
        case OPT_GIT: a->git_url = optarg; return 0;
        case OPT_DEPTH: a->depth = optarg; return 0;
        case OPT_REVISION: a->revision = optarg; return 0;
        case OPT_GIT_USER: a->user = optarg; return 0;
        case OPT_GIT_PASS_ENV: a->pass_env = optarg; return 0;
        case OPT_GIT_PASS_STDIN: a->pass_stdin = true; return 0;
        case OPT_TARBALL: return set_tarball(a, optarg);
        case OPT_VOLUME: {
                cJSON *m = NULL;
                if (cli_parse_volume_mount(optarg, &m) < 0)
                        return ctl_usage("create", "create: bad --volume '%s' (use NAME:/PATH or NAME:/PATH:ro)", optarg);
                if (!cJSON_GetObjectItemCaseSensitive(p, "volumes"))
                        cJSON_AddArrayToObject(p, "volumes");
                cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(p, "volumes"), m);
                return 0;
        }
        case OPT_SNAPSHOT:
                cJSON_AddStringToObject(ensure_source(a, "snapshot"), "snapshotId", optarg);
                return 0;
        case OPT_TIMEOUT:
                if (cli_parse_duration(optarg, &ms) < 0)
                        return ctl_usage("create", "create: bad --timeout '%s' (use 90s, 5m, 2h, 1d or milliseconds)", optarg);
                set_item(p, "timeout", cJSON_CreateNumber((double) ms));
                a->timeout_arg = optarg;
                a->timeout_ms = ms;
                return 0;
        case OPT_VCPUS:
                if (parse_vcpus(optarg, &n) < 0)
                        return ctl_usage("create", "create: bad --vcpus '%s' (a whole number)", optarg);
                a->vcpus_arg = optarg;
                a->vcpus = n;
                set_item(p, "resources", cJSON_CreateObject());
                cJSON_AddNumberToObject(cJSON_GetObjectItemCaseSensitive(p, "resources"), "vcpus", (double) n);
                return 0;
        case OPT_PORT:
                if (parse_uint(optarg, 65535, &n) < 0)
                        return range_usage("create", "--port", optarg, 65535);
                if (!cJSON_GetObjectItemCaseSensitive(p, "ports"))
                        cJSON_AddArrayToObject(p, "ports");
                cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(p, "ports"), cJSON_CreateNumber((double) n));
                return 0;
        case OPT_ENV:
        case OPT_TAG: {
                const char *key = opt == OPT_ENV ? "env" : "tags";
                if (!cJSON_GetObjectItemCaseSensitive(p, key))
                        cJSON_AddObjectToObject(p, key);
                if (cli_kv_add(cJSON_GetObjectItemCaseSensitive(p, key), optarg) < 0)
                        return ctl_usage("create", "create: --%s wants K=V, got '%s'",
                                         opt == OPT_ENV ? "env" : "tag", optarg);
                return 0;
        }
        case OPT_PERSISTENT: set_item(p, "persistent", cJSON_CreateTrue()); return 0;
        case OPT_USERNS: set_item(p, "userns", cJSON_CreateTrue()); return 0;
        case OPT_NO_USERNS: set_item(p, "userns", cJSON_CreateFalse()); return 0;
        case OPT_ALLOW_ALL: return set_policy(a, "allow-all", false);
        case OPT_DENY_ALL: return set_policy(a, "deny-all", false);
        case OPT_POLICY: return set_policy(a, optarg, true);
        case OPT_ALLOW:
        case OPT_ALLOW_SUBNET:
        case OPT_DENY_SUBNET:
                return ctl_policy_add(&a->custom, custom_policy_list(opt), optarg) < 0 ?
                        ctl_error(CLI_EXIT_ERROR, "out of memory") : 0;
        default: return ctl_usage("create", "create: unknown option");
        }
}

/* Reads the git password from the place the user named. */
static int git_password(const create_args *a, char **ret) {
        if (a->pass_env) {
                const char *v = getenv(a->pass_env);
                if (!v)
                        return ctl_error(CLI_EXIT_USAGE, "create: environment variable %s is not set", a->pass_env);
                *ret = strdup(v);
        } else {
                char *line = NULL;
                size_t cap = 0;
                ssize_t n = getline(&line, &cap, stdin);
                if (n < 0) {
                        free(line);
                        return ctl_error(CLI_EXIT_USAGE, "create: no password on stdin");
                }
                line[strcspn(line, "\r\n")] = 0;
                *ret = line;
        }
        return *ret ? 0 : ctl_error(CLI_EXIT_ERROR, "out of memory");
}

/* Turns the git options into params.source once all options are read, so
 * their order on the command line does not matter. */
static int finish_git(create_args *a) {
        bool extras = a->depth || a->revision || a->user || a->pass_env || a->pass_stdin;
        if (!a->git_url)
                return extras ? ctl_usage("create", "create: --depth, --revision and --git-* need --git URL") : 0;
        cJSON *s = ensure_source(a, "git");
        if (a->source_conflict)
                return ctl_usage("create", "create: choose one of --git, --tarball, --snapshot");
        cJSON_AddStringToObject(s, "url", a->git_url);
        long depth;
        if (a->depth) {
                if (parse_uint(a->depth, INT32_MAX, &depth) < 0)
                        return range_usage("create", "--depth", a->depth, INT32_MAX);
                cJSON_AddNumberToObject(s, "depth", (double) depth);
        }
        if (a->revision)
                cJSON_AddStringToObject(s, "revision", a->revision);
        if (a->user)
                cJSON_AddStringToObject(s, "username", a->user);
        if (a->pass_env && a->pass_stdin)
                return ctl_usage("create", "create: choose one of --git-password-env, --git-password-stdin");
        if (a->pass_env || a->pass_stdin) {
                _cleanup_free_ char *pw = NULL;
                int r = git_password(a, &pw);
                if (r != 0)
                        return r;
                cJSON_AddStringToObject(s, "password", pw);
                explicit_bzero(pw, strlen(pw));
        }
        return 0;
}

/* create and get-or-create: the same options, one call. */
static int create_like(ctl_globals *g, int argc, char **argv, const char *verb, const char *method,
                       const char *help) {
        static const struct option opts[] = {
                COMMON_OPTIONS,
                { "name", required_argument, NULL, OPT_NAME },
                { "runtime", required_argument, NULL, OPT_RUNTIME },
                { "git", required_argument, NULL, OPT_GIT },
                { "depth", required_argument, NULL, OPT_DEPTH },
                { "revision", required_argument, NULL, OPT_REVISION },
                { "git-username", required_argument, NULL, OPT_GIT_USER },
                { "git-password-env", required_argument, NULL, OPT_GIT_PASS_ENV },
                { "git-password-stdin", no_argument, NULL, OPT_GIT_PASS_STDIN },
                { "tarball", required_argument, NULL, OPT_TARBALL },
                { "snapshot", required_argument, NULL, OPT_SNAPSHOT },
                { "timeout", required_argument, NULL, OPT_TIMEOUT },
                { "vcpus", required_argument, NULL, OPT_VCPUS },
                { "port", required_argument, NULL, OPT_PORT },
                { "env", required_argument, NULL, OPT_ENV },
                { "tag", required_argument, NULL, OPT_TAG },
                { "persistent", no_argument, NULL, OPT_PERSISTENT },
                { "volume", required_argument, NULL, OPT_VOLUME },
                { "userns", no_argument, NULL, OPT_USERNS },
                { "no-userns", no_argument, NULL, OPT_NO_USERNS },
                { "allow-all", no_argument, NULL, OPT_ALLOW_ALL },
                { "deny-all", no_argument, NULL, OPT_DENY_ALL },
                { "policy", required_argument, NULL, OPT_POLICY },
                { "allow", required_argument, NULL, OPT_ALLOW },
                { "allow-subnet", required_argument, NULL, OPT_ALLOW_SUBNET },
                { "deny-subnet", required_argument, NULL, OPT_DENY_SUBNET },
                {}
        };
        _cleanup_json_ cJSON *params = cJSON_CreateObject();
        _cleanup_(create_args_done) create_args a = { .params = params };
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, help);
                if (r == 0)
                        return 0;
                if (r < 0 && (r = create_option(&a, opt)) != 0)
                        return r;
        }
        if (optind != argc)
                return ctl_usage(verb, "%s: unexpected argument '%s'", verb, argv[optind]);
        if (streq(verb, "get-or-create") && !cJSON_GetObjectItemCaseSensitive(params, "name"))
                return ctl_usage(verb, "get-or-create: missing --name");
        if (a.policies > 1)
                return ctl_usage("create", "create: choose one of --allow-all, --deny-all, --policy");
        int r = finish_custom_policy("create", &a);
        if (r != 0)
                return r;
        r = finish_git(&a);
        if (r != 0)
                return r;
        if (a.source_conflict)
                return ctl_usage("create", "create: choose one of --git, --tarball, --snapshot");

        r = check_limits(g, verb, a.vcpus_arg, a.vcpus, a.timeout_arg, a.timeout_ms);
        if (r != 0)
                return r;
        cJSON *result = NULL;
        /* A clone or download can take a while: on a terminal, say what it does. */
        if (ctl_progress_wanted(g, params))
                r = ctl_call_progress(g, verb, method, TAKE_PTR(params), &result);
        else
                r = ctl_call(g, verb, method, TAKE_PTR(params), &result);
        if (r != 0)
                return r;
        if (g->json)
                ctl_print_json(result);
        else if (streq(verb, "get-or-create")) {
                /* Whether it was made now and what of the given config it
                 * does not have, then the sandbox as get shows it. */
                const cJSON *created = cJSON_GetObjectItemCaseSensitive(result, "created");
                printf("created: %s\n", cJSON_IsTrue(created) ? "true" : "false");
                const cJSON *differs = cJSON_GetObjectItemCaseSensitive(result, "differs"), *d;
                fputs("differs: ", stdout);
                if (!cJSON_GetArraySize(differs))
                        fputc('-', stdout);
                cJSON_ArrayForEach(d, differs)
                {
                        ctl_fput_escaped(stdout, cJSON_IsString(d) ? d->valuestring : "?");
                        fputs(d->next ? ", " : "", stdout);
                }
                fputc('\n', stdout);
                ctl_print_fields(cJSON_GetObjectItemCaseSensitive(result, "sandbox"));
        } else
                ctl_puts_escaped(string_cell(result, "name") ? string_cell(result, "name") : "?");
        cJSON_Delete(result);
        return 0;
}

static int cmd_create(ctl_globals *g, int argc, char **argv) {
        return create_like(g, argc, argv, "create", "sandbox.create", create_help);
}

static const char get_or_create_help[] =
        "Usage: sandboxctl get-or-create [--json] --name N [OPTIONS]\n\n"
        "Shows sandbox N, creating it with the options of create when it does not exist\n"
        "(the options are those of create). A stopped persistent\n"
        "sandbox is resumed. Prints 'created: true|false', 'differs:' the config keys\n"
        "given whose value the existing sandbox does not have (they are not applied;\n"
        "use update), then the sandbox as get shows it.\n\n"
        CREATE_OPTIONS_HELP;

static int cmd_get_or_create(ctl_globals *g, int argc, char **argv) {
        return create_like(g, argc, argv, "get-or-create", "sandbox.getOrCreate", get_or_create_help);
}

/* --- update ------------------------------------------------------------ */

static const char update_help[] =
        "Usage: sandboxctl update [--json] NAME [--timeout DURATION] [--vcpus N] [--env K=V]... [--tag K=V]...\n"
        "         [--port N... | --no-ports] [--allow-all | --deny-all | --policy FILE |\n"
        "          --allow PATTERN... [--allow-subnet CIDR]... [--deny-subnet CIDR]...]\n\n"
        "Changes a sandbox. --timeout (90s, 5m, 2h, 1d or milliseconds): an increase also\n"
        "extends the running session. --vcpus sets CPUs and memory (N x 2 GiB) of the\n"
        "running session at once and of its next sessions; lowering memory below what\n"
        "the sandbox uses is refused when the kernel cannot reclaim enough (cgroup v1)\n"
        "or ends in an OOM kill inside the sandbox (cgroup v2). --env replaces the sandbox's environment for\n"
        "commands started afterwards; --tag replaces its tags (at most 5). --port (repeatable)\n"
        "replaces the exposed ports at once (ports kept keep their endpoints); --no-ports\n"
        "removes them all.\n"
        "The policy options (as for create) replace the whole network policy; a\n"
        "running session switches to the new one at once.\n";

static int cmd_update(ctl_globals *g, int argc, char **argv) {
        enum { OPT_U_TIMEOUT = OPT_FIRST_COMMAND, OPT_U_ENV, OPT_U_TAG, OPT_U_VCPUS, OPT_U_PORT, OPT_U_NO_PORTS };
        static const struct option opts[] = {
                COMMON_OPTIONS,
                { "timeout", required_argument, NULL, OPT_U_TIMEOUT },
                { "vcpus", required_argument, NULL, OPT_U_VCPUS },
                { "env", required_argument, NULL, OPT_U_ENV },
                { "tag", required_argument, NULL, OPT_U_TAG },
                { "port", required_argument, NULL, OPT_U_PORT },
                { "no-ports", no_argument, NULL, OPT_U_NO_PORTS },
                { "allow-all", no_argument, NULL, OPT_ALLOW_ALL },
                { "deny-all", no_argument, NULL, OPT_DENY_ALL },
                { "policy", required_argument, NULL, OPT_POLICY },
                { "allow", required_argument, NULL, OPT_ALLOW },
                { "allow-subnet", required_argument, NULL, OPT_ALLOW_SUBNET },
                { "deny-subnet", required_argument, NULL, OPT_DENY_SUBNET },
                {}
        };
        _cleanup_json_ cJSON *params = cJSON_CreateObject();
        /* The policy options share create's handling (same document, same
         * conflicts). */
        _cleanup_(create_args_done) create_args pa = { .params = params };
        int opt;
        int64_t ms, timeout_ms = 0;
        const char *vcpus_arg = NULL, *timeout_arg = NULL;
        long vcpus = 0;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, update_help);
                if (r == 0)
                        return 0;
                if (r > 0)
                        continue;
                if (opt == OPT_U_TIMEOUT) {
                        if (cli_parse_duration(optarg, &ms) < 0)
                                return ctl_usage("update", "update: bad --timeout '%s' (use 90s, 5m, 2h, 1d or milliseconds)",
                                                 optarg);
                        set_item(params, "timeout", cJSON_CreateNumber((double) ms));
                        timeout_arg = optarg;
                        timeout_ms = ms;
                } else if (opt == OPT_U_VCPUS) {
                        /* check_limits checks the range (the daemon's maxVcpus). */
                        long n;
                        if (parse_vcpus(optarg, &n) < 0)
                                return ctl_usage("update", "update: bad --vcpus '%s' (a whole number)", optarg);
                        vcpus_arg = optarg;
                        vcpus = n;
                        cJSON *res = cJSON_CreateObject();
                        cJSON_AddNumberToObject(res, "vcpus", (double) n);
                        set_item(params, "resources", res);
                } else if (opt == OPT_U_PORT || opt == OPT_U_NO_PORTS) {
                        long n = 0;
                        if (opt == OPT_U_PORT && parse_uint(optarg, 65535, &n) < 0)
                                return range_usage("update", "--port", optarg, 65535);
                        cJSON *ports = cJSON_GetObjectItemCaseSensitive(params, "ports");
                        if (!ports)
                                ports = cJSON_AddArrayToObject(params, "ports");
                        if (opt == OPT_U_PORT)
                                cJSON_AddItemToArray(ports, cJSON_CreateNumber((double) n));
                } else if (opt == OPT_U_ENV || opt == OPT_U_TAG) {
                        const char *key = opt == OPT_U_ENV ? "env" : "tags";
                        if (!cJSON_GetObjectItemCaseSensitive(params, key))
                                cJSON_AddObjectToObject(params, key);
                        if (cli_kv_add(cJSON_GetObjectItemCaseSensitive(params, key), optarg) < 0)
                                return ctl_usage("update", "update: --%s wants K=V, got '%s'",
                                                 opt == OPT_U_ENV ? "env" : "tag", optarg);
                } else if (opt == OPT_ALLOW_ALL || opt == OPT_DENY_ALL || opt == OPT_POLICY ||
                           custom_policy_list(opt)) {
                        if ((r = create_option(&pa, opt)) != 0)
                                return r;
                } else
                        return ctl_usage("update", "update: unknown option");
        }
        if (pa.policies > 1)
                return ctl_usage("update", "update: choose one of --allow-all, --deny-all, --policy");
        int r = finish_custom_policy("update", &pa);
        if (r != 0)
                return r;
        const char *name = NULL;
        r = one_name("update", argc, argv, &name);
        if (r != 0)
                return r;
        /* An update that changes nothing is a mistake, not a no-op to
         * report as success. */
        if (!params->child)
                return ctl_usage("update", "update: nothing to change; give --timeout, --vcpus, --env, --tag, "
                                 "--port or --no-ports, or a network policy option (--allow-all, --deny-all, "
                                 "--policy, --allow, --allow-subnet, --deny-subnet)");
        cJSON_AddStringToObject(params, "name", name);
        r = check_limits(g, "update", vcpus_arg, vcpus, timeout_arg, timeout_ms);
        if (r != 0)
                return r;
        cJSON *result = NULL;
        r = ctl_call(g, "update", "sandbox.update", TAKE_PTR(params), &result);
        if (r != 0)
                return r;
        ctl_print_sandbox(g, result);
        cJSON_Delete(result);
        return 0;
}

/* --- cp --------------------------------------------------------------- */

static const char cp_help[] =
        "Usage: sandboxctl cp [-r] [--json] SRC DST\n\n"
        "Copies one file between the host and a sandbox. Exactly one side is NAME:PATH\n"
        "(a relative PATH is under /workspace); - as the host side means stdin or stdout.\n"
        "A host path that contains ':' can be written as ./a:b. Copying into an existing\n"
        "directory keeps the file's name.\n\n"
        "  -r, --recursive   copy a directory tree (as one tar stream): into an existing\n"
        "                    directory DST it goes to DST/NAME-OF-SRC, else DST is created.\n"
        "                    Files, directories and symlinks (kept as links) with their\n"
        "                    modes and times; device nodes and setuid bits are not copied.\n";

static const char *base_name(const char *path) {
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : path;
}

/* Asks for the type of a path in the sandbox: "file", "directory", ... or
 * NULL when unknown (including not found: the copy then reports it). */
static char *remote_type(client *c, const char *name, const char *path) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "sandbox", name);
        cJSON_AddStringToObject(p, "path", path);
        _cleanup_json_ cJSON *st = NULL;
        if (client_call(c, "fs.stat", p, -1, NULL, NULL, &st, NULL) < 0)
                return NULL;
        const char *t = string_cell(st, "type");
        return t ? strdup(t) : NULL;
}

/* Sends one fs.write of data[0..len) to path: the first piece creates or
 * truncates the file (and carries the mode), the rest append. */
static int cp_send_piece(const ctl_globals *g, client *c, const char *name, const char *path, const char *data,
                         size_t len, bool append, int mode) {
        _cleanup_free_ char *b64 = client_base64_encode(data, len);
        if (!b64)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        cJSON *params = cJSON_CreateObject(), *files = cJSON_AddArrayToObject(params, "files");
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "sandbox", name);
        cJSON_AddStringToObject(f, "path", path);
        cJSON_AddStringToObject(f, "content", b64);
        if (append)
                cJSON_AddBoolToObject(f, "append", true);
        else if (mode >= 0)
                cJSON_AddNumberToObject(f, "mode", mode);
        cJSON_AddItemToArray(files, f);
        _cleanup_client_error_ client_error *err = NULL;
        _cleanup_json_ cJSON *result = NULL;
        if (client_call(c, "fs.write", params, -1, NULL, NULL, &result, &err) < 0)
                return ctl_report(g, "cp", err);
        if (g->json && !append)
                ctl_print_json(result);
        return 0;
}

/* Copies in pieces of CP_CHUNK bytes, so a file of any size stays far below
 * the daemon's maxLineBytes (base64 adds a third) and memory stays flat. */
#define CP_CHUNK (4u * 1024 * 1024)

static int cp_to_sandbox(const ctl_globals *g, client *c, const char *local, const char *name, const char *path) {
        struct stat st = {};
        bool from_stdin = streq(local, "-");
        _cleanup_fclose_ FILE *file = from_stdin ? NULL : fopen(local, "re");
        FILE *in = from_stdin ? stdin : file;
        if (!in || fstat(fileno(in), &st) < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: %s: %s", local, strerror(errno));
        if (!from_stdin && S_ISDIR(st.st_mode))
                return ctl_error(CLI_EXIT_ERROR, "cp: %s is a directory (copy a tree with -r)", local);
        _cleanup_free_ char *type = remote_type(c, name, path), *target = NULL;
        if ((type && streq(type, "directory")) || (path[strlen(path) - 1] == '/' && !from_stdin)) {
                if (from_stdin)
                        return ctl_error(CLI_EXIT_ERROR, "cp: %s:%s is a directory", name, path);
                if (asprintf(&target, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", base_name(local)) < 0)
                        return ctl_error(CLI_EXIT_ERROR, "out of memory");
        }
        _cleanup_free_ char *buf = malloc(CP_CHUNK);
        if (!buf)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        bool first = true;
        for (;;) {
                size_t n = fread(buf, 1, CP_CHUNK, in);
                if (ferror(in))
                        return ctl_error(CLI_EXIT_ERROR, "cp: read %s: %s", local, strerror(errno ? errno : EIO));
                /* An empty file is still one (empty) write: it gets created. */
                if (n == 0 && !first)
                        break;
                int r = cp_send_piece(g, c, name, target ? target : path, buf, n, !first,
                                      from_stdin ? -1 : (int) (st.st_mode & 07777));
                if (r != 0)
                        return r;
                first = false;
                if (n < CP_CHUNK && feof(in))
                        break;
        }
        return 0;
}

static int cp_from_sandbox(const ctl_globals *g, client *c, const char *name, const char *path, const char *local) {
        _cleanup_free_ char *type = remote_type(c, name, path);
        if (type && streq(type, "directory"))
                return ctl_error(CLI_EXIT_ERROR, "cp: %s:%s is a directory (copy a tree with -r)", name, path);
        cJSON *params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "sandbox", name);
        cJSON_AddStringToObject(params, "path", path);
        _cleanup_client_error_ client_error *err = NULL;
        _cleanup_json_ cJSON *result = NULL;
        if (client_call(c, "fs.read", params, -1, NULL, NULL, &result, &err) < 0)
                return ctl_report(g, "cp", err);
        const char *content = string_cell(result, "content");
        _cleanup_free_ void *data = NULL;
        size_t len;
        if (!content || client_base64_decode(content, &data, &len) < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: unreadable content from sandboxd");
        if (streq(local, "-"))
                return ctl_write_all(STDOUT_FILENO, data, len) < 0 ?
                        ctl_error(CLI_EXIT_ERROR, "cp: write stdout: %s", strerror(errno)) : 0;

        struct stat st;
        _cleanup_free_ char *target = NULL;
        if (stat(local, &st) == 0 && S_ISDIR(st.st_mode) &&
            asprintf(&target, "%s/%s", local, base_name(path)) < 0)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        const char *dst = target ? target : local;
        _cleanup_close_ int fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0666);
        if (fd < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: %s: %s", dst, strerror(errno));
        int r = ctl_write_all(fd, data, len);
        if (r < 0)
                return ctl_error(CLI_EXIT_ERROR, "cp: write %s: %s", dst, strerror(-r));
        return 0;
}

/* cp -r: a tree goes into an existing directory under its own name, as
 * with cp(1); a file source falls back to the one-file copy. */
static int cp_tree(const ctl_globals *g, client *c, const char *src, const char *sname, const char *spath,
                   const char *dst, const char *dname, const char *dpath) {
        _cleanup_free_ char *target = NULL;
        if (dname) {
                struct stat st;
                if (streq(src, "-") || stat(src, &st) < 0 || !S_ISDIR(st.st_mode))
                        return cp_to_sandbox(g, c, src, dname, dpath);
                _cleanup_free_ char *type = remote_type(c, dname, dpath), *copy = strdup(src);
                if (!copy)
                        return ctl_error(CLI_EXIT_ERROR, "out of memory");
                while (strlen(copy) > 1 && copy[strlen(copy) - 1] == '/')
                        copy[strlen(copy) - 1] = 0;
                if (type && streq(type, "directory") && !streq(base_name(copy), ".") &&
                    !streq(base_name(copy), "..") && *base_name(copy) &&
                    asprintf(&target, "%s/%s", dpath, base_name(copy)) < 0)
                        return ctl_error(CLI_EXIT_ERROR, "out of memory");
                return ctl_cp_tree_to_sandbox(g, c, src, dname, target ? target : dpath);
        }
        _cleanup_free_ char *type = remote_type(c, sname, spath);
        if (!type || !streq(type, "directory") || streq(dst, "-"))
                return cp_from_sandbox(g, c, sname, spath, dst);
        struct stat st;
        _cleanup_free_ char *copy = strdup(spath);
        if (!copy)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        while (strlen(copy) > 1 && copy[strlen(copy) - 1] == '/')
                copy[strlen(copy) - 1] = 0;
        const char *leaf = base_name(copy);
        if (stat(dst, &st) == 0 && S_ISDIR(st.st_mode) && *leaf && !streq(leaf, ".") && !streq(leaf, "..") &&
            asprintf(&target, "%s/%s", dst, leaf) < 0)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        return ctl_cp_tree_from_sandbox(g, c, sname, spath, target ? target : dst);
}

static int cmd_cp(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = { COMMON_OPTIONS, { "recursive", no_argument, NULL, 'r' }, {} };
        int opt;
        bool recursive = false;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "hr", opts, NULL)) != -1) {
                if (opt == 'r') {
                        recursive = true;
                        continue;
                }
                int r = common_option(g, opt, cp_help);
                if (r == 0)
                        return 0;
                if (r < 0)
                        return ctl_usage("cp", "cp: unknown option");
        }
        if (argc - optind != 2)
                return ctl_usage("cp", "cp: want SRC and DST");
        const char *src = argv[optind], *dst = argv[optind + 1];
        _cleanup_free_ char *sname = NULL, *spath = NULL, *dname = NULL, *dpath = NULL;
        int rs = cli_parse_remote(src, &sname, &spath);
        int rd = cli_parse_remote(dst, &dname, &dpath);
        if (rs < 0 || rd < 0)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        if (rs + rd != 1)
                return ctl_usage("cp", "cp: exactly one of SRC and DST must be NAME:PATH");

        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0)
                return r;
        if (recursive)
                return cp_tree(g, c, src, sname, spath, dst, rd ? dname : NULL, dpath);
        return rd ? cp_to_sandbox(g, c, src, dname, dpath) : cp_from_sandbox(g, c, sname, spath, dst);
}

/* --- top -------------------------------------------------------------- */

static double num_or(const cJSON *o, const char *key, double dflt) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* "12.3MiB"-style byte counts; "-" for a figure the host does not keep. */
static char *bytes_cell(double v) {
        char *s = NULL;
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        if (v < 0)
                return strdup("-");
        size_t u = 0;
        while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0]))
                v /= 1024, u++;
        if (asprintf(&s, u ? "%.1f%s" : "%.0f%s", v, units[u]) < 0)
                return NULL;
        return s;
}

/* One sample: sandbox.get of every running sandbox, in list order. Returns
 * 0 with *ret (an array of sandbox.get answers), or an exit code. */
static int top_sample(const ctl_globals *g, cJSON **ret) {
        _cleanup_json_ cJSON *all = NULL;
        _cleanup_json_ cJSON *tags = cJSON_CreateObject();
        int r = list_all(g, NULL, tags, &all);
        if (r != 0)
                return r;
        _cleanup_client_ client *c = NULL;
        if ((r = ctl_connect(g, &c)) != 0)
                return r;
        cJSON *out = cJSON_CreateArray();
        const cJSON *sb;
        cJSON_ArrayForEach(sb, all) {
                const char *name = string_cell(sb, "name"), *status = string_cell(sb, "status");
                if (!name || !status || strcmp(status, "running") != 0)
                        continue;
                _cleanup_client_error_ client_error *err = NULL;
                cJSON *result = NULL;
                if (client_call(c, "sandbox.get", name_params(name), -1, NULL, NULL, &result, &err) < 0)
                        continue;  /* deleted in between */
                cJSON_AddItemToArray(out, result);
        }
        *ret = out;
        return 0;
}

static void top_print(const cJSON *rows, const cJSON *prev, double secs) {
        static const char *const header[] = { "NAME", "CPU %", "CPU TIME", "MEM", "MEM PEAK", "PIDS", "NET IN/OUT",
                                              "DISK", "CMDS" };
        size_t n = (size_t) cJSON_GetArraySize(rows), i = 0;
        char ***table = calloc(n ? n : 1, sizeof(char **));
        const cJSON *r;
        cJSON_ArrayForEach(r, rows) {
                const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "usage");
                const cJSON *net = cJSON_GetObjectItemCaseSensitive(r, "networkTransfer");
                double cpu = num_or(r, "activeCpuUsageMs", -1), before = -1;
                const cJSON *p;
                cJSON_ArrayForEach(p, prev)
                        if (streq(string_cell(p, "name") ? string_cell(p, "name") : "", string_cell(r, "name")))
                                before = num_or(p, "activeCpuUsageMs", -1);
                char **row = calloc(9, sizeof(char *));
                if (!table || !row) {
                        free(row);
                        break;
                }
                row[0] = strdup(string_cell(r, "name"));
                if (cpu >= 0 && before >= 0 && secs > 0)
                        (void) !asprintf(&row[1], "%.1f%%", (cpu - before) / (secs * 10));
                else
                        row[1] = strdup("-");
                if (cpu >= 0)
                        (void) !asprintf(&row[2], "%.1fs", cpu / 1000);
                else
                        row[2] = strdup("-");
                row[3] = bytes_cell(num_or(u, "memoryBytes", -1));
                row[4] = bytes_cell(num_or(r, "memoryPeakBytes", -1));
                (void) !asprintf(&row[5], "%.0f", num_or(u, "pids", 0));
                _cleanup_free_ char *in = bytes_cell(num_or(net, "ingress", -1)), *outb = bytes_cell(num_or(net, "egress", -1));
                (void) !asprintf(&row[6], "%s / %s", in ? in : "-", outb ? outb : "-");
                row[7] = bytes_cell(num_or(u, "diskUsedBytes", -1));
                (void) !asprintf(&row[8], "%.0f/%.0f", num_or(u, "commandsRunning", 0), num_or(u, "commandsStarted", 0));
                table[i++] = row;
        }
        ctl_print_table(header, 9, table, i);
        for (size_t k = 0; k < i; k++) {
                for (size_t j = 0; j < 9; j++)
                        free(table[k][j]);
                free(table[k]);
        }
        free(table);
}

static int cmd_top(ctl_globals *g, int argc, char **argv) {
        static const char help[] =
                "Usage: sandboxctl top [--json] [--interval SECS]\n\n"
                "Shows the usage of every running sandbox as a table refreshed every SECS\n"
                "seconds (default 2) until interrupted, like docker stats: CPU share since the\n"
                "last refresh, CPU time, memory now and at peak, processes, network bytes in\n"
                "and out, disk in use, commands running/started. With --json, one sample of\n"
                "the sandbox.get answers (activeCpuUsageMs, memoryPeakBytes, networkTransfer,\n"
                "usage) as an array, then exits.\n";
        enum { OPT_INTERVAL = OPT_FIRST_COMMAND };
        static const struct option opts[] = { COMMON_OPTIONS, { "interval", required_argument, NULL, OPT_INTERVAL }, {} };
        long interval = 2;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                int r = common_option(g, opt, help);
                if (r == 0)
                        return 0;
                if (r > 0)
                        continue;
                if (opt != OPT_INTERVAL)
                        return ctl_usage("top", "top: unknown option");
                if (parse_uint(optarg, 3600, &interval) < 0 || interval < 1)
                        return range_usage("top", "--interval", optarg, 3600);
        }
        if (optind != argc)
                return ctl_usage("top", "top: too many arguments");
        _cleanup_json_ cJSON *prev = NULL;
        for (;;) {
                cJSON *rows = NULL;
                int r = top_sample(g, &rows);
                if (r != 0)
                        return r;
                if (g->json) {
                        ctl_print_json(rows);
                        cJSON_Delete(rows);
                        return 0;
                }
                if (isatty(STDOUT_FILENO))
                        fputs("\033[H\033[2J", stdout);  /* home, clear (ECMA-48) */
                top_print(rows, prev, (double) interval);
                fflush(stdout);
                cJSON_Delete(prev);
                prev = rows;
                sleep((unsigned) interval);
        }
}

/* --- dispatch --------------------------------------------------------- */

static const struct {
        const char *name;
        int (*run)(ctl_globals *g, int argc, char **argv);
} commands[] = {
        { "create", cmd_create },
        { "ls", cmd_ls },
        { "get", cmd_get },
        { "get-or-create", cmd_get_or_create },
        { "extend", cmd_extend },
        { "set-timeout", cmd_set_timeout },
        { "exec", ctl_exec },
        { "command", ctl_command },
        { "stop", cmd_stop },
        { "update", cmd_update },
        { "fork", ctl_fork },
        { "snapshot", ctl_snapshot },
        { "snapshots", ctl_snapshots },
        { "runtime", ctl_runtime },
        { "volume", ctl_volume },
        { "rm", cmd_rm },
        { "cp", cmd_cp },
        { "fs", ctl_fs },
        { "policy", ctl_policy },
        { "events", ctl_events },
        { "daemon", cmd_daemon },
        { "certs", ctl_certs },
        { "top", cmd_top },
        { "ps", ctl_ps },
        { "pause", cmd_pause },
        { "resume", cmd_resume },
        { "container", ctl_container },
};

int main(int argc, char **argv) {
        enum { OPT_VERSION = OPT_FIRST_COMMAND };
        static const struct option opts[] = {
                COMMON_OPTIONS, { "version", no_argument, NULL, OPT_VERSION }, {}
        };
        ctl_globals g = {};
        int opt;
        /* Errors are JSON from the first one on, a usage error in the
         * options included; what follows "--" is a command's own. */
        for (int i = 1; i < argc && !streq(argv[i], "--"); i++)
                if (streq(argv[i], "--json"))
                        ctl_json_errors = true;
        /* '+': stop at the command name; its options are its own. */
        while ((opt = ctl_getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
                if (opt == OPT_VERSION) {
                        printf("sandboxctl %s\n", SANDBOXD_VERSION);
                        return 0;
                }
                int r = common_option(&g, opt, main_help);
                if (r == 0)
                        return 0;
                if (r < 0)
                        return ctl_usage(NULL, "unknown option");
        }
        if (optind >= argc)
                return ctl_usage(NULL, "missing command");
        ctl_option_argv = argv + optind;
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                if (streq(argv[optind], commands[i].name)) {
                        int r = commands[i].run(&g, argc - optind, argv + optind);
                        fflush(stdout);
                        return r;
                }
        return ctl_usage(NULL, "unknown command '%s'", argv[optind]);
}
