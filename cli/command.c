/* `sandboxctl command get|wait|kill|logs ID`: reaching a command started
 * with `exec --detach` (or any command still remembered by the daemon)
 * through command.get, command.wait, command.kill and command.logs
 * (docs/API.md); and `sandboxctl ps NAME`, a sandbox's commands from
 * command.list. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

static const char command_help[] =
        "Usage: sandboxctl command get [--json] ID\n"
        "       sandboxctl command wait [--json] ID\n"
        "       sandboxctl command kill ID [--signal SIG]\n"
        "       sandboxctl command logs [--json] [-f] ID\n\n"
        "Reaches a command by the id `exec --detach` printed.\n\n"
        "  get    shows the command: cmd, args, cwd, user, startedAt, and once it\n"
        "         has ended exitCode (128+N when killed by signal N), durationMs and\n"
        "         timedOut, and usage (cpuMs: CPU time of its process tree; memoryPeakBytes:\n"
        "         the largest resident set of one of its processes).\n"
        "  wait   waits until the command ends and exits with its exit code.\n"
        "  kill   sends SIG (a name like TERM or SIGTERM, or a number; default KILL)\n"
        "         to the command's process group. Prints nothing.\n"
        "  logs   prints the output the daemon kept (the last part of each stream):\n"
        "         the command's stdout on stdout and its stderr on stderr.\n"
        "         -f, --follow: then prints its output as it comes until the command\n"
        "         ends, and exits 0 (command wait gives its exit code); not with --json.\n";

enum { OPT_SOCKET = 1000, OPT_JSON, OPT_SIGNAL, OPT_LIMIT, OPT_CURSOR };

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

/* Writes what of one stream of a command.logs answer comes after the
 * `*done` bytes already written, and moves *done past it. The answer gives
 * the offset of its first byte (stdoutOffset): bytes the daemon dropped
 * between two looks are skipped, never written twice. */
static int write_new(const cJSON *result, const char *key, const char *offset_key, uint64_t *done, int fd) {
        const char *b64 = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, key));
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(result, offset_key);
        _cleanup_free_ void *data = NULL;
        size_t len;
        if (!b64 || !cJSON_IsNumber(off) || off->valuedouble < 0 || client_base64_decode(b64, &data, &len) < 0)
                return ctl_error(CLI_EXIT_ERROR, "command logs: unreadable %s from sandboxd", key);
        uint64_t base = (uint64_t) off->valuedouble, end = base + len;
        if (end < *done)
                /* Fewer bytes than before (a daemon that lost count): go
                 * on from its end, never print a byte twice. */
                *done = end;
        if (end == *done)
                return 0;
        uint64_t from = *done > base ? *done : base;
        if (ctl_write_all(fd, (const char *) data + (from - base), (size_t) (end - from)) < 0)
                return ctl_error(CLI_EXIT_ERROR, "command logs: write %s: %m", key);
        *done = end;
        return 0;
}

/* How often `command logs -f` looks again (ms). Output to a connection
 * other than the one that started the command is not streamed by the
 * daemon, so a follower asks for the log and prints what is new. */
#define FOLLOW_INTERVAL_MS 250

static void pause_ms(long ms) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/* How long `command logs -f` waits for a restarted daemon (ms). */
#define FOLLOW_RECONNECT_MS 30000

/* The daemon closed the connection, or answered that it is shutting down
 * (a restart): worth a new connection. */
static bool daemon_went_away(const client_error *e) {
        return e && e->reason &&
               ((e->code == CLIENT_ERROR_LOCAL && streq(e->reason, CLIENT_REASON_DISCONNECTED)) ||
                (e->code != CLIENT_ERROR_LOCAL && streq(e->reason, "unavailable")));
}

/* `command logs -f ID`: the logs so far, then what comes, until the
 * command has ended and its last output is written. Returns 0, or the
 * exit code of a failure. */
static int follow_logs(const ctl_globals *g, const char *id) {
        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0)
                return r;
        uint64_t out_done = 0, err_done = 0;
        unsigned retries = 0;
        for (;;) {
                /* The state first, the log second: once it has ended, the
                 * log read after holds all of its output. */
                bool ended = false;
                for (int i = 0; i < 2; i++) {
                        cJSON *p = cJSON_CreateObject();
                        cJSON_AddStringToObject(p, "cmdId", id);
                        _cleanup_client_error_ client_error *err = NULL;
                        _cleanup_json_ cJSON *result = NULL;
                        if (client_call(c, i == 0 ? "command.get" : "command.logs", p, -1, NULL, NULL, &result,
                                        &err) < 0) {
                                if (!daemon_went_away(err) || ++retries > FOLLOW_RECONNECT_MS / FOLLOW_INTERVAL_MS)
                                        return ctl_report(g, "command logs", err);
                                /* A restart of sandboxd: its commands go
                                 * on, and so does the follower, from the
                                 * offsets it has printed up to. */
                                client_free(TAKE_PTR(c));
                                pause_ms(FOLLOW_INTERVAL_MS);
                                if ((r = ctl_reconnect(g, FOLLOW_RECONNECT_MS, &c)) != 0)
                                        return r;
                                i = -1;
                                continue;
                        }
                        retries = 0;
                        if (i == 0) {
                                ended = cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(result, "exitCode"));
                                continue;
                        }
                        if ((r = write_new(result, "stdout", "stdoutOffset", &out_done, STDOUT_FILENO)) != 0 ||
                            (r = write_new(result, "stderr", "stderrOffset", &err_done, STDERR_FILENO)) != 0)
                                return r;
                }
                if (ended)
                        return 0;
                pause_ms(FOLLOW_INTERVAL_MS);
        }
}

int ctl_command(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET }, { "json", no_argument, NULL, OPT_JSON },
                { "help", no_argument, NULL, 'h' },                { "signal", required_argument, NULL, OPT_SIGNAL },
                { "follow", no_argument, NULL, 'f' },
                {}
        };
        const char *sig = NULL;
        bool follow = false;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "hf", opts, NULL)) != -1)
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case OPT_SIGNAL: sig = optarg; break;
                case 'f': follow = true; break;
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
        if (follow && !streq(verb, "logs"))
                return ctl_usage("command", "command %s: --follow is for logs", verb);
        if (follow && g->json)
                return ctl_usage("command", "command logs: --follow prints the output itself; leave out --json");
        if (follow)
                return follow_logs(g, argv[optind + 1]);

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

/* --- ps ------------------------------------------------------------------ */

static const char ps_help[] =
        "Usage: sandboxctl ps [--json] [--limit N] [--cursor C] NAME\n\n"
        "Lists the commands of sandbox NAME the daemon keeps (running ones and the\n"
        "last finished ones), newest first, as a table:\n"
        "ID STATUS EXIT STARTED COMMAND (STATUS running or exited; EXIT the exit code,\n"
        "128+N when killed by signal N).\n"
        "  --limit N    one page of at most N commands (1 to 1000) instead of all of them;\n"
        "               prints 'next cursor: C' after the table when there are more\n"
        "  --cursor C   the page that starts after cursor C (from an earlier --limit)\n";

/* Appends `word` to the command line being built, quoted as a shell would
 * need it when it holds anything but plain characters. */
static void append_word(FILE *f, const char *word) {
        if (word[0] && word[strspn(word, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                         "-_./=:,+@%")] == 0) {
                fputs(word, f);
                return;
        }
        fputc('\'', f);
        for (const char *p = word; *p; p++)
                if (*p == '\'')
                        fputs("'\\''", f);
                else
                        fputc(*p, f);
        fputc('\'', f);
}

/* "cmd arg1 'arg two'" of a Command, as the user would type it again.
 * Caller frees. */
static char *command_line(const cJSON *cmd) {
        char *line = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&line, &len);
        if (!f)
                return NULL;
        const char *prog = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cmd, "cmd"));
        append_word(f, prog ? prog : "?");
        const cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(cmd, "args"))
                if (cJSON_IsString(a)) {
                        fputc(' ', f);
                        append_word(f, a->valuestring);
                }
        if (fclose(f) != 0) {
                free(line);
                return NULL;
        }
        return line;
}

static void print_commands(const cJSON *commands) {
        static const char *const header[] = { "ID", "STATUS", "EXIT", "STARTED", "COMMAND" };
        size_t n = (size_t) cJSON_GetArraySize(commands), i = 0;
        _cleanup_free_ char ***rows = calloc(n ? n : 1, sizeof(char **));
        _cleanup_free_ char **cells = calloc(n ? n * 5 : 1, sizeof(char *));
        _cleanup_free_ char *codes = calloc(n ? n : 1, 16);
        _cleanup_free_ char **lines = calloc(n ? n : 1, sizeof(char *));
        if (!rows || !cells || !codes || !lines)
                return;
        const cJSON *c;
        cJSON_ArrayForEach(c, commands) {
                char **row = rows[i] = cells + i * 5;
                const cJSON *code = cJSON_GetObjectItemCaseSensitive(c, "exitCode");
                row[0] = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "cmdId"));
                row[1] = (char *) (cJSON_IsNumber(code) ? "exited" : "running");
                if (cJSON_IsNumber(code)) {
                        snprintf(codes + i * 16, 16, "%d", code->valueint);
                        row[2] = codes + i * 16;
                }
                row[3] = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "startedAt"));
                row[4] = lines[i] = command_line(c);
                i++;
        }
        ctl_print_table(header, 5, rows, n);
        for (i = 0; i < n; i++)
                free(lines[i]);
}

/* One call of command.list on connection c. Returns 0 with *ret, or the
 * exit code after reporting. */
static int list_call(const ctl_globals *g, client *c, const char *name, long limit, const char *cursor,
                     cJSON **ret) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", name);
        if (limit)
                cJSON_AddNumberToObject(p, "limit", (double) limit);
        if (cursor)
                cJSON_AddStringToObject(p, "cursor", cursor);
        _cleanup_client_error_ client_error *err = NULL;
        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "ps %s", name) < 0)
                context = NULL;
        if (client_call(c, "command.list", p, -1, NULL, NULL, ret, &err) < 0)
                return ctl_report(g, context, err);
        return 0;
}

int ctl_ps(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET }, { "json", no_argument, NULL, OPT_JSON },
                { "help", no_argument, NULL, 'h' },                { "limit", required_argument, NULL, OPT_LIMIT },
                { "cursor", required_argument, NULL, OPT_CURSOR }, {}
        };
        const char *cursor = NULL;
        long limit = 0;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1)
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case OPT_CURSOR: cursor = optarg; break;
                case OPT_LIMIT: {
                        char *end = NULL;
                        limit = strtol(optarg, &end, 10);
                        if (!optarg[0] || *end || limit < 1 || limit > 1000)
                                return ctl_usage("ps", "ps: --limit: %s is out of range (1 to 1000)", optarg);
                        break;
                }
                case 'h': fputs(ps_help, stdout); return 0;
                default: return ctl_usage("ps", "ps: unknown option");
                }
        if (argc - optind != 1)
                return ctl_usage("ps", argc - optind < 1 ? "ps: missing NAME" : "ps: too many arguments");
        const char *name = argv[optind];
        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0)
                return r;
        if (limit || cursor) {
                _cleanup_json_ cJSON *result = NULL;
                if ((r = list_call(g, c, name, limit, cursor, &result)) != 0)
                        return r;
                if (g->json) {
                        ctl_print_json(result);
                        return 0;
                }
                print_commands(cJSON_GetObjectItemCaseSensitive(result, "commands"));
                const char *next = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "nextCursor"));
                if (next) {
                        fputs("next cursor: ", stdout);
                        ctl_fput_escaped(stdout, next);
                        putchar('\n');
                }
                return 0;
        }
        /* Every page, following nextCursor, into one list. */
        _cleanup_json_ cJSON *all = cJSON_CreateArray();
        _cleanup_free_ char *next = NULL;
        do {
                _cleanup_json_ cJSON *result = NULL;
                if ((r = list_call(g, c, name, 0, next, &result)) != 0)
                        return r;
                cJSON *list = cJSON_GetObjectItemCaseSensitive(result, "commands"), *it;
                while (cJSON_IsArray(list) && (it = cJSON_DetachItemFromArray(list, 0)))
                        cJSON_AddItemToArray(all, it);
                const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(result, "nextCursor"));
                free(next);
                next = n ? strdup(n) : NULL;
        } while (next);
        if (g->json) {
                cJSON *out = cJSON_CreateObject();
                cJSON_AddItemToObject(out, "commands", TAKE_PTR(all));
                cJSON_AddNullToObject(out, "nextCursor");
                ctl_print_json(out);
                cJSON_Delete(out);
        } else
                print_commands(all);
        return 0;
}
