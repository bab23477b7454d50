/* `sandboxctl command get|wait|kill|logs ID`: reaching a command started
 * with `exec --detach` (or any command still remembered by the daemon)
 * through command.get, command.wait, command.kill and command.logs
 * (docs/API.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

static const char command_help[] =
        "Usage: sandboxctl command get [--json] ID\n"
        "       sandboxctl command wait [--json] ID\n"
        "       sandboxctl command kill ID [--signal SIG]\n"
        "       sandboxctl command logs [--json] ID\n\n"
        "Reaches a command by the id `exec --detach` printed.\n\n"
        "  get    shows the command: cmd, args, cwd, user, startedAt, and once it\n"
        "         has ended exitCode (128+N when killed by signal N), durationMs and\n"
        "         timedOut, and usage (cpuMs: CPU time of its process tree; memoryPeakBytes:\n"
        "         the largest resident set of one of its processes).\n"
        "  wait   waits until the command ends and exits with its exit code.\n"
        "  kill   sends SIG (a name like TERM or SIGTERM, or a number; default KILL)\n"
        "         to the command's process group. Prints nothing.\n"
        "  logs   prints the output the daemon kept (the last part of each stream):\n"
        "         the command's stdout on stdout and its stderr on stderr.\n";

enum { OPT_SOCKET = 1000, OPT_JSON, OPT_SIGNAL };

/* A signal as the daemon takes it: a number for digits, else the name. */
static cJSON *signal_json(const char *sig) {
        if (sig[strspn(sig, "0123456789")] == 0)
                return cJSON_CreateNumber(atoi(sig));
        return cJSON_CreateString(sig);
}

/* Decodes one stream of command.logs and writes it to fd. */
static int write_stream(const cJSON *result, const char *key, int fd) {
        const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, key));
        _cleanup_free_ void *data = NULL;
        size_t len;
        if (!b64 || client_base64_decode(b64, &data, &len) < 0)
                return ctl_error(CLI_EXIT_ERROR, "command logs: unreadable %s from sandboxd", key);
        if (ctl_write_all(fd, data, len) < 0)
                return ctl_error(CLI_EXIT_ERROR, "command logs: write %s: %m", key);
        return 0;
}

/* Prints a result the way each subcommand shows it, and returns the exit
 * code: wait's is the command's own. */
static int show(const ctl_globals *g, const char *verb, cJSON *result) {
        if (streq(verb, "kill"))
                return 0;
        if (g->json && !streq(verb, "logs"))
                ctl_print_json(result);
        if (streq(verb, "get")) {
                if (!g->json)
                        ctl_print_fields(result);
                return 0;
        }
        if (streq(verb, "logs")) {
                if (g->json) {
                        ctl_print_json(result);
                        return 0;
                }
                int r = write_stream(result, "stdout", STDOUT_FILENO);
                return r != 0 ? r : write_stream(result, "stderr", STDERR_FILENO);
        }
        /* wait */
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "timedOut")))
                ctl_error(0, "command wait: the command was killed after its timeout");
        else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result, "oomKilled"))) {
                const cJSON *limit = cJSON_GetObjectItemCaseSensitive(result, "memoryLimitBytes");
                if (cJSON_IsNumber(limit))
                        ctl_error(0, "killed: out of memory (limit %g GiB; update --vcpus N raises it)",
                                  limit->valuedouble / (1024.0 * 1024 * 1024));
                else
                        ctl_error(0, "killed: out of memory (update --vcpus N raises the limit)");
        }
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(result, "exitCode");
        return cJSON_IsNumber(code) ? code->valueint : CLI_EXIT_ERROR;
}

int ctl_command(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET }, { "json", no_argument, NULL, OPT_JSON },
                { "help", no_argument, NULL, 'h' },                { "signal", required_argument, NULL, OPT_SIGNAL },
                {}
        };
        const char *sig = NULL;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1)
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case OPT_SIGNAL: sig = optarg; break;
                case 'h': fputs(command_help, stdout); return 0;
                default: return ctl_usage("command", "command: unknown option");
                }
        if (optind >= argc)
                return ctl_usage("command", "command: give get, wait, kill or logs and a command ID");
        const char *verb = argv[optind];
        static const char *const methods[][2] = {
                { "get", "command.get" }, { "wait", "command.wait" },
                { "kill", "command.kill" }, { "logs", "command.logs" },
        };
        const char *method = NULL;
        for (size_t i = 0; i < ELEMENTSOF(methods); i++)
                if (streq(verb, methods[i][0]))
                        method = methods[i][1];
        if (!method)
                return ctl_usage("command", "command: unknown subcommand '%s' (get, wait, kill, logs)", verb);
        if (argc - optind != 2)
                return ctl_usage("command", "command %s: %s", verb,
                                 argc - optind < 2 ? "missing command ID" : "too many arguments");
        if (sig && !streq(verb, "kill"))
                return ctl_usage("command", "command %s: --signal is for kill", verb);

        cJSON *params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "cmdId", argv[optind + 1]);
        if (sig)
                cJSON_AddItemToObject(params, "signal", signal_json(sig));
        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "command %s", verb) < 0)
                context = NULL;
        _cleanup_json_ cJSON *result = NULL;
        int r = ctl_call(g, context, method, params, &result);
        return r != 0 ? r : show(g, verb, result);
}
