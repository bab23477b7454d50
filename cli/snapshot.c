/* sandboxctl fork, snapshot and snapshots: thin wrappers over sandbox.fork,
 * sandbox.snapshot and snapshot.list/delete/export/import (docs/API.md). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/ctl.h"
#include "libcore/macro.h"

static const struct option common_opts[] = {
        {"socket", required_argument, NULL, 1000}, {"json", no_argument, NULL, 1001},
        {"help", no_argument, NULL, 'h'},          {"name", required_argument, NULL, 1002},
        {"expire", required_argument, NULL, 1003}, {"config", no_argument, NULL, 1004},
        {"tag", required_argument, NULL, 1005},    {"sandbox", required_argument, NULL, 1006}, {}};

/* Parses the common options plus --name (when name_out), --expire (when
 * expire_out), --config (when config_out), --tag K=V into the object tags
 * (when not NULL) and --sandbox (when sandbox_out); returns -1 to go on, or
 * an exit code (0 after --help). */
static int parse_opts(ctl_globals *g, int argc, char **argv, const char *help, const char **name_out,
                      const char **expire_out, bool *config_out, cJSON *tags, const char **sandbox_out) {
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", common_opts, NULL)) != -1) {
                switch (opt) {
                case 1000: g->socket = optarg; break;
                case 1001: g->json = true; break;
                case 'h': fputs(help, stdout); return 0;
                case 1002:
                        if (name_out) {
                                *name_out = optarg;
                                break;
                        }
                        return ctl_usage(argv[0], "%s: unknown option", argv[0]);
                case 1003:
                        if (expire_out) {
                                *expire_out = optarg;
                                break;
                        }
                        return ctl_usage(argv[0], "%s: unknown option", argv[0]);
                case 1004:
                        if (config_out) {
                                *config_out = true;
                                break;
                        }
                        return ctl_usage(argv[0], "%s: unknown option", argv[0]);
                case 1005:
                        if (tags) {
                                if (cli_kv_add(tags, optarg) < 0)
                                        return ctl_usage(argv[0], "%s: --tag wants K=V, got '%s'", argv[0], optarg);
                                break;
                        }
                        return ctl_usage(argv[0], "%s: unknown option", argv[0]);
                case 1006:
                        if (sandbox_out) {
                                *sandbox_out = optarg;
                                break;
                        }
                        /* fall through */
                default: return ctl_usage(argv[0], "%s: unknown option", argv[0]);
                }
        }
        return -1;
}

int ctl_fork(ctl_globals *g, int argc, char **argv) {
        static const char help[] =
                "Usage: sandboxctl fork [--json] SRC [--name N]\n\n"
                "Creates a sandbox whose filesystem is SRC's current state and whose config is\n"
                "SRC's. A running SRC is frozen for a consistent copy and thawed; its commands\n"
                "keep running. A stopped (persistent) SRC is forked without copying. The two\n"
                "never share writable state. Prints the new sandbox's name.\n";
        const char *name = NULL;
        int r = parse_opts(g, argc, argv, help, &name, NULL, NULL, NULL, NULL);
        if (r >= 0)
                return r;
        if (optind + 1 != argc)
                return ctl_usage("fork", "fork: %s", optind >= argc ? "missing SRC" : "too many arguments");
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "sourceSandbox", argv[optind]);
        if (name)
                cJSON_AddStringToObject(p, "name", name);
        cJSON *res = NULL;
        if ((r = ctl_call(g, "fork", "sandbox.fork", p, &res)) != 0)
                return r;
        if (g->json)
                ctl_print_json(res);
        else
                ctl_puts_escaped(cJSON_GetStringValue(cJSON_GetObjectItem(res, "name")) ?: "?");
        cJSON_Delete(res);
        return 0;
}

int ctl_snapshot(ctl_globals *g, int argc, char **argv) {
        static const char help[] =
                "Usage: sandboxctl snapshot [--json] NAME [--expire DURATION] [--tag K=V]...\n\n"
                "Takes a snapshot of sandbox NAME's filesystem and config (network policy, env,\n"
                "tags, ports, timeout, vCPUs: `create --snapshot ID` restores them unless\n"
                "given again); a running sandbox "
                "keeps running. Prints the snapshot id, a source for `create --snapshot ID`.\n"
                "--expire (90s, 5m, 2h, 7d, or bare milliseconds; at most 365d) deletes the\n"
                "snapshot that long after it is taken; sandboxes created from it keep their\n"
                "files, and it is kept, shown as expired, until the last of them is deleted.\n"
                "--tag K=V (repeatable, at most 5) labels the snapshot itself (not the\n"
                "sandbox); `snapshots ls --tag K=V` lists only the snapshots that carry it.\n";
        const char *expire = NULL;
        _cleanup_json_ cJSON *tags = cJSON_CreateObject();
        int r = parse_opts(g, argc, argv, help, NULL, &expire, NULL, tags, NULL);
        if (r >= 0)
                return r;
        if (optind + 1 != argc)
                return ctl_usage("snapshot", "snapshot: %s", optind >= argc ? "missing NAME" : "too many arguments");
        int64_t ms = 0;
        if (expire && (cli_parse_duration(expire, &ms) < 0 || ms <= 0))
                return ctl_usage("snapshot", "snapshot: bad --expire '%s' (use 90s, 5m, 2h, 1d or milliseconds)",
                                 expire);
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "name", argv[optind]);
        if (expire)
                cJSON_AddNumberToObject(p, "expiration", (double)ms);
        if (tags->child)
                cJSON_AddItemToObject(p, "tags", TAKE_PTR(tags));
        cJSON *res = NULL;
        if ((r = ctl_call(g, "snapshot", "sandbox.snapshot", p, &res)) != 0)
                return r;
        if (g->json)
                ctl_print_json(res);
        else
                ctl_puts_escaped(cJSON_GetStringValue(cJSON_GetObjectItem(res, "id")) ?: "?");
        cJSON_Delete(res);
        return 0;
}

/* The daemon resolves paths on its own host with its own working
 * directory; a relative FILE is meant relative to ours. */
static char *absolute_path(const char *file) {
        if (file[0] == '/')
                return strdup(file);
        _cleanup_free_ char *cwd = getcwd(NULL, 0);
        char *abs = NULL;
        if (!cwd || asprintf(&abs, "%s/%s", cwd, file) < 0)
                return NULL;
        return abs;
}

/* snapshots export ID FILE / snapshots import FILE [--config] (argv[0] is
 * the verb). */
static int snapshots_transfer(ctl_globals *g, int argc, char **argv, bool config) {
        bool export = streq(argv[0], "export");
        if (export && config)
                return ctl_usage("snapshots", "snapshots export: --config is an option of import");
        if (argc != (export ? 3 : 2))
                return ctl_usage("snapshots", export ? "snapshots export: give a snapshot ID and a FILE"
                                                     : "snapshots import: give one FILE");
        _cleanup_free_ char *path = absolute_path(argv[argc - 1]);
        if (!path)
                return ctl_usage("snapshots", "snapshots %s: cannot resolve '%s'", argv[0], argv[argc - 1]);
        /* The daemon never overwrites; saying so here gives the conflict
         * exit code without a round trip. */
        struct stat st;
        if (export && lstat(path, &st) == 0)
                return ctl_error(CLI_EXIT_CONFLICT, "snapshots export: %s exists; give a new file name", path);
        cJSON *p = cJSON_CreateObject();
        if (export)
                cJSON_AddStringToObject(p, "id", argv[1]);
        cJSON_AddStringToObject(p, "path", path);
        if (!export)
                cJSON_AddBoolToObject(p, "config", config);
        cJSON *res = NULL;
        int r = ctl_call(g, export ? "snapshots export" : "snapshots import",
                         export ? "snapshot.export" : "snapshot.import", p, &res);
        if (r != 0)
                return r;
        if (g->json)
                ctl_print_json(res);
        else if (export)
                ctl_puts_escaped(cJSON_GetStringValue(cJSON_GetObjectItem(res, "path")) ?: "?");
        else {
                ctl_puts_escaped(cJSON_GetStringValue(cJSON_GetObjectItem(res, "id")) ?: "?");
                /* Said on stderr, so a script reading the id is not disturbed. */
                cJSON *ignored = cJSON_GetObjectItem(res, "configIgnored"), *it;
                if (cJSON_GetArraySize(ignored) > 0) {
                        fputs("snapshots import: not taken from the file's config:", stderr);
                        cJSON_ArrayForEach(it, ignored)
                        {
                                fputc(' ', stderr);
                                ctl_fput_escaped(stderr, cJSON_GetStringValue(it) ?: "?");
                        }
                        fputs(config ? "\n" : " (--config takes policy, env, ports, tags, timeout and resources)\n",
                              stderr);
                }
        }
        cJSON_Delete(res);
        return 0;
}

typedef struct snap_item {
        cJSON *json;
        const char *created;  /* createdAt, "" when missing */
        size_t index;         /* position in the daemon's answer */
} snap_item;

/* createdAt is RFC 3339 UTC of one fixed width, so text order is time
 * order; equal times keep the daemon's order. */
static int compare_created(const void *a, const void *b) {
        const snap_item *x = a, *y = b;
        int c = strcmp(x->created, y->created);
        return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Sorts the snapshots array in place, oldest first: the daemon's order is
 * its directory's, which means nothing to a reader. */
static void sort_by_creation(cJSON *arr) {
        size_t n = (size_t)cJSON_GetArraySize(arr);
        _cleanup_free_ snap_item *items = calloc(n ? n : 1, sizeof(*items));
        if (!items)
                return;
        for (size_t i = 0; i < n; i++) {
                cJSON *it = cJSON_DetachItemFromArray(arr, 0);
                items[i] = (snap_item){it, cJSON_GetStringValue(cJSON_GetObjectItem(it, "createdAt")) ?: "", i};
        }
        qsort(items, n, sizeof(*items), compare_created);
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(arr, items[i].json);
}

int ctl_snapshots(ctl_globals *g, int argc, char **argv) {
        static const char help[] =
                "Usage: sandboxctl snapshots [--json]\n"
                "       sandboxctl snapshots ls|list [--json] [--sandbox NAME] [--tag K=V]...\n"
                "       sandboxctl snapshots rm ID\n"
                "       sandboxctl snapshots export ID FILE\n"
                "       sandboxctl snapshots import FILE [--config]\n\n"
                "Lists snapshots, oldest first (ID SANDBOX CREATED EXPIRES), or deletes one.\n"
                "ls --sandbox NAME lists only that sandbox's; --tag K=V (repeatable) only\n"
                "those carrying every given tag (snapshot --tag sets them).\n"
                "Deleting a snapshot that sandboxes were created from is safe: they keep\n"
                "their files.\n\n"
                "export writes snapshot ID to FILE (a new file; zstd tar, gzip when FILE ends\n"
                "in .gz or .tgz) on the daemon's host. import reads such a file into a new\n"
                "snapshot and prints its id. FILE is made absolute against the current\n"
                "directory. Imported files lose setuid/setgid bits and xattrs other than\n"
                "trusted.overlay.* and user.*; device nodes other than whiteouts are refused.\n"
                "The file's config (networkPolicy, env, ports, tags, timeout, resources) is\n"
                "taken only with --config, and then checked as create options are; without\n"
                "it sandboxes made from the snapshot get the daemon's defaults and your\n"
                "options. A file never turns a user namespace off.\n";
        bool config = false;
        const char *sandbox = NULL;
        _cleanup_json_ cJSON *tags = cJSON_CreateObject();
        int r = parse_opts(g, argc, argv, help, NULL, NULL, &config, tags, &sandbox);
        if (r >= 0)
                return r;
        bool listing = optind >= argc || streq(argv[optind], "ls") || streq(argv[optind], "list");
        if (!listing && (tags->child || sandbox))
                return ctl_usage("snapshots", "snapshots %s: --tag and --sandbox are options of ls", argv[optind]);
        if (optind < argc && streq(argv[optind], "rm")) {
                if (optind + 2 != argc)
                        return ctl_usage("snapshots", "snapshots rm: give one snapshot ID");
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "id", argv[optind + 1]);
                cJSON *res = NULL;
                if ((r = ctl_call(g, "snapshots rm", "snapshot.delete", p, &res)) != 0)
                        return r;
                cJSON_Delete(res);
                return 0;
        }
        if (optind < argc && (streq(argv[optind], "export") || streq(argv[optind], "import")))
                return snapshots_transfer(g, argc - optind, argv + optind, config);
        if (optind < argc && (streq(argv[optind], "ls") || streq(argv[optind], "list")))
                optind++;
        if (optind != argc)
                return ctl_usage("snapshots", "snapshots: unexpected argument '%s'", argv[optind]);
        cJSON *p = cJSON_CreateObject();
        if (sandbox)
                cJSON_AddStringToObject(p, "sandbox", sandbox);
        if (tags->child)
                cJSON_AddItemToObject(p, "tags", TAKE_PTR(tags));
        cJSON *res = NULL;
        if ((r = ctl_call(g, "snapshots", "snapshot.list", p, &res)) != 0)
                return r;
        cJSON *arr = cJSON_GetObjectItem(res, "snapshots");
        sort_by_creation(arr);
        if (g->json) {
                ctl_print_json(res);
                cJSON_Delete(res);
                return 0;
        }
        static const char *const header[] = {"ID", "SANDBOX", "CREATED", "EXPIRES"};
        size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
        char ***rows = calloc(n + 1, sizeof(*rows));
        cJSON *it;
        cJSON_ArrayForEach(it, arr) {
                rows[i] = calloc(4, sizeof(char *));
                rows[i][0] = cJSON_GetStringValue(cJSON_GetObjectItem(it, "id"));
                rows[i][1] = cJSON_GetStringValue(cJSON_GetObjectItem(it, "sandbox"));
                rows[i][2] = cJSON_GetStringValue(cJSON_GetObjectItem(it, "createdAt"));
                rows[i][3] = cJSON_IsTrue(cJSON_GetObjectItem(it, "expired"))
                                     ? "expired"
                                     : cJSON_GetStringValue(cJSON_GetObjectItem(it, "expiresAt")) ?: "never";
                i++;
        }
        ctl_print_table(header, 4, rows, n);
        for (i = 0; i < n; i++)
                free(rows[i]);
        free(rows);
        cJSON_Delete(res);
        return 0;
}
