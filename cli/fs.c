/* `sandboxctl fs ls|stat|mkdir|rm|watch NAME:PATH`: the fs.list, fs.stat,
 * fs.mkdir, fs.remove and fs.watch (cli/watch.c) methods (docs/API.md "fs.*"). The daemon does the
 * work inside the sandbox as its user; this only builds the request and
 * prints the answer. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

static const char fs_help[] =
        "Usage: sandboxctl fs [--json] ls|stat|mkdir [-p]|rm [-r]|watch [-r] NAME:PATH\n\n"
        "Files in a sandbox (a relative PATH is under /workspace):\n"
        "  ls NAME:PATH          list a directory: TYPE MODE SIZE MTIME NAME\n"
        "  stat NAME:PATH        show one path as key: value lines (mode in octal)\n"
        "  mkdir [-p] NAME:PATH  make a directory; -p (--parents) makes missing parents too\n"
        "  rm [-r] NAME:PATH     remove a file or an empty directory; -r (--recursive)\n"
        "                        removes a directory and everything in it\n"
        "  watch [-r] NAME:PATH  print a line per change (created, modified, deleted,\n"
        "                        renamed, overflow) of PATH, or with -r of its whole tree,\n"
        "                        until Ctrl-C; --json prints one object per line\n";

static const char *cell(const cJSON *obj, const char *key, char *buf, size_t size) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
        if (cJSON_IsString(v))
                return v->valuestring;
        if (cJSON_IsNumber(v)) {
                if (streq(key, "mode"))
                        snprintf(buf, size, "%04o", (unsigned) v->valuedouble);
                else
                        snprintf(buf, size, "%.0f", v->valuedouble);
                return buf;
        }
        return NULL;
}

static void print_entries(const cJSON *entries) {
        static const char *const header[] = { "TYPE", "MODE", "SIZE", "MTIME", "NAME" };
        static const char *const keys[] = { "type", "mode", "size", "mtime", "name" };
        size_t n = (size_t) cJSON_GetArraySize(entries), i = 0;
        _cleanup_free_ char ***rows = calloc(n ? n : 1, sizeof(char **));
        _cleanup_free_ char **cells = calloc(n ? n * 5 : 1, sizeof(char *));
        _cleanup_free_ char *numbers = calloc(n ? n * 5 : 1, 32);
        if (!rows || !cells || !numbers)
                return;
        const cJSON *e;
        cJSON_ArrayForEach(e, entries) {
                rows[i] = cells + i * 5;
                for (size_t j = 0; j < 5; j++)
                        rows[i][j] = (char *) cell(e, keys[j], numbers + (i * 5 + j) * 32, 32);
                i++;
        }
        ctl_print_table(header, 5, rows, n);
}

int ctl_fs(ctl_globals *g, int argc, char **argv) {
        enum { OPT_PARENTS = 'p', OPT_RECURSIVE = 'r', OPT_SOCKET = 1000, OPT_JSON };
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "json", no_argument, NULL, OPT_JSON },
                { "help", no_argument, NULL, 'h' },
                { "parents", no_argument, NULL, OPT_PARENTS },
                { "recursive", no_argument, NULL, OPT_RECURSIVE },
                {}
        };
        bool parents = false, recursive = false;
        int opt;
        optind = 0;
        /* Options may come before or after the subcommand (getopt permutes). */
        while ((opt = ctl_getopt_long(argc, argv, "hpr", opts, NULL)) != -1)
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case 'h': fputs(fs_help, stdout); return 0;
                case OPT_PARENTS: parents = true; break;
                case OPT_RECURSIVE: recursive = true; break;
                default: return ctl_usage("fs", "fs: unknown option");
                }
        if (optind >= argc)
                return ctl_usage("fs", "fs: missing subcommand (ls, stat, mkdir, rm, watch)");
        const char *verb = argv[optind++], *method;
        if (streq(verb, "ls"))
                method = "fs.list";
        else if (streq(verb, "stat"))
                method = "fs.stat";
        else if (streq(verb, "mkdir"))
                method = "fs.mkdir";
        else if (streq(verb, "rm"))
                method = "fs.remove";
        else if (streq(verb, "watch"))
                method = "fs.watch";
        else
                return ctl_usage("fs", "fs: unknown subcommand '%s' (ls, stat, mkdir, rm, watch)", verb);
        if (parents && !streq(verb, "mkdir"))
                return ctl_usage("fs", "fs %s: -p belongs to fs mkdir", verb);
        if (recursive && !streq(verb, "rm") && !streq(verb, "watch"))
                return ctl_usage("fs", "fs %s: -r belongs to fs rm and fs watch", verb);
        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "fs %s", verb) < 0)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        if (argc - optind != 1)
                return ctl_usage("fs", argc - optind < 1 ? "fs %s: missing NAME:PATH" : "fs %s: too many arguments",
                                 verb);
        _cleanup_free_ char *name = NULL, *path = NULL;
        int r = cli_parse_remote(argv[optind], &name, &path);
        if (r < 0)
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        if (r == 0)
                return ctl_usage("fs", "fs %s: want NAME:PATH, got '%s'", verb, argv[optind]);

        if (streq(verb, "watch"))
                return ctl_fs_watch(g, name, path, recursive);
        cJSON *params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "sandbox", name);
        cJSON_AddStringToObject(params, "path", path);
        /* fs.mkdir makes parents unless told not to; the command line
         * follows mkdir(1). */
        if (streq(verb, "mkdir"))
                cJSON_AddBoolToObject(params, "parents", parents);
        if (recursive)
                cJSON_AddBoolToObject(params, "recursive", true);
        _cleanup_json_ cJSON *result = NULL;
        r = ctl_call(g, context, method, params, &result);
        if (r != 0)
                return r;
        if (g->json)
                ctl_print_json(result);
        else if (streq(verb, "ls"))
                print_entries(cJSON_GetObjectItemCaseSensitive(result, "entries"));
        else if (streq(verb, "stat")) {
                /* The mode in octal, as fs ls shows it (JSON keeps the number). */
                const cJSON *mode = cJSON_GetObjectItemCaseSensitive(result, "mode");
                if (cJSON_IsNumber(mode)) {
                        char buf[16];
                        snprintf(buf, sizeof buf, "%04o", (unsigned) mode->valuedouble);
                        cJSON_ReplaceItemInObjectCaseSensitive(result, "mode", cJSON_CreateString(buf));
                }
                ctl_print_fields(result);
        }
        return 0;
}
