/* sandboxctl runtime: list, import, bootstrap and rm, thin wrappers over
 * runtime.list, runtime.import, runtime.bootstrap and runtime.delete
 * (docs/API.md). */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/ctl.h"
#include "libcore/macro.h"

static const char runtime_help[] =
        "Usage: sandboxctl runtime list [--json]\n"
        "       sandboxctl runtime import NAME ROOTFS.tar[.gz|.xz|.zst]\n"
        "       sandboxctl runtime bootstrap NAME [--suite SUITE] [--mirror URL]\n"
        "       sandboxctl runtime rm NAME\n\n"
        "A runtime is the read-only root filesystem a sandbox stands on\n"
        "(`create --runtime NAME`). `host` is built in: the host's /usr with a generated\n"
        "/etc. Other runtimes are whole root filesystems:\n\n"
        "  import     unpacks ROOTFS (a tar on the daemon's host; relative paths are\n"
        "             made absolute here). Names with '..', absolute names and writes\n"
        "             through symlinks are refused; device nodes are skipped;\n"
        "             setuid/setgid bits are dropped.\n"
        "  bootstrap  runs `debootstrap --variant=minbase SUITE` (default bookworm) from\n"
        "             URL (default: the first deb mirror in this machine's apt sources).\n"
        "             Trees are cached by suite and mirror: the second one is instant.\n"
        "  rm         deletes a runtime; refused while a sandbox or snapshot uses it.\n\n"
        "Both import and bootstrap add the `sandbox` user (uid 1000) to the tree's\n"
        "/etc/passwd and /etc/group when it has none.\n";

enum { OPT_SOCKET = 1000, OPT_JSON, OPT_SUITE, OPT_MIRROR };

/* The daemon opens paths on its own host from its own directory; a
 * relative ROOTFS is meant relative to ours. The path is also what
 * `runtime list` shows as the source, so it is resolved (symlinks, ".",
 * "..") when the file exists; otherwise it is only made absolute and the
 * daemon reports the missing file. */
static char *absolute_path(const char *file) {
        char *real = realpath(file, NULL);
        if (real)
                return real;
        if (file[0] == '/')
                return strdup(file);
        _cleanup_free_ char *cwd = getcwd(NULL, 0);
        char *abs = NULL;
        if (!cwd || asprintf(&abs, "%s/%s", cwd, file) < 0)
                return NULL;
        return abs;
}

static void human_size(const cJSON *v, char *buf, size_t size) {
        if (!cJSON_IsNumber(v)) {
                snprintf(buf, size, "-");
                return;
        }
        double b = v->valuedouble;
        const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        size_t u = 0;
        while (b >= 1024 && u + 1 < ELEMENTSOF(units)) {
                b /= 1024;
                u++;
        }
        snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

/* "tarball /path", "debootstrap bookworm http://...", "host". */
static void source_text(const cJSON *src, char *buf, size_t size) {
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(src, "type")) ?: "?";
        const char *a = cJSON_GetStringValue(cJSON_GetObjectItem(src, streq(type, "tarball") ? "path" : "suite"));
        const char *b = cJSON_GetStringValue(cJSON_GetObjectItem(src, "mirror"));
        snprintf(buf, size, "%s%s%s%s%s", type, a ? " " : "", a ?: "", b ? " " : "", b ?: "");
}

static int runtime_list(const ctl_globals *g) {
        cJSON *res = NULL;
        int r = ctl_call(g, "runtime list", "runtime.list", cJSON_CreateObject(), &res);
        if (r != 0)
                return r;
        if (g->json) {
                ctl_print_json(res);
                cJSON_Delete(res);
                return 0;
        }
        static const char *const header[] = {"NAME", "SIZE", "USED BY", "CREATED", "SOURCE"};
        cJSON *arr = cJSON_GetObjectItem(res, "runtimes"), *it;
        size_t n = (size_t)cJSON_GetArraySize(arr), i = 0;
        char ***rows = calloc(n + 1, sizeof(*rows));
        char (*cells)[3][600] = calloc(n + 1, sizeof(*cells));
        cJSON_ArrayForEach(it, arr) {
                rows[i] = calloc(5, sizeof(char *));
                human_size(cJSON_GetObjectItem(it, "sizeBytes"), cells[i][0], sizeof(cells[i][0]));
                int snaps = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "snapshots"));
                snprintf(cells[i][1], sizeof(cells[i][1]), "%d sandbox(es), %d snapshot(s)",
                         cJSON_GetArraySize(cJSON_GetObjectItem(it, "sandboxes")), snaps);
                source_text(cJSON_GetObjectItem(it, "source"), cells[i][2], sizeof(cells[i][2]));
                rows[i][0] = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
                rows[i][1] = cells[i][0];
                rows[i][2] = cells[i][1];
                rows[i][3] = cJSON_GetStringValue(cJSON_GetObjectItem(it, "createdAt"));
                rows[i][4] = cells[i][2];
                i++;
        }
        ctl_print_table(header, 5, rows, n);
        for (i = 0; i < n; i++)
                free(rows[i]);
        free(rows);
        free(cells);
        cJSON_Delete(res);
        return 0;
}

/* Prints a new runtime: its name, or the object with --json. */
static int print_runtime(const ctl_globals *g, cJSON *res) {
        if (g->json)
                ctl_print_json(res);
        else
                ctl_puts_escaped(cJSON_GetStringValue(cJSON_GetObjectItem(res, "name")) ?: "?");
        cJSON_Delete(res);
        return 0;
}

int ctl_runtime(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                {"socket", required_argument, NULL, OPT_SOCKET}, {"json", no_argument, NULL, OPT_JSON},
                {"help", no_argument, NULL, 'h'},                {"suite", required_argument, NULL, OPT_SUITE},
                {"mirror", required_argument, NULL, OPT_MIRROR}, {}};
        const char *suite = NULL, *mirror = NULL;
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case OPT_SUITE: suite = optarg; break;
                case OPT_MIRROR: mirror = optarg; break;
                case 'h': fputs(runtime_help, stdout); return 0;
                default: return ctl_usage("runtime", "runtime: unknown option");
                }
        }
        if (optind >= argc)
                return ctl_usage("runtime", "runtime: give list, import, bootstrap or rm");
        const char *verb = argv[optind];
        int nargs = argc - optind - 1;
        char **args = argv + optind + 1;
        if ((suite || mirror) && !streq(verb, "bootstrap"))
                return ctl_usage("runtime", "runtime %s: --suite and --mirror are for bootstrap", verb);
        cJSON *res = NULL;
        int r;
        if (streq(verb, "list") || streq(verb, "ls")) {
                if (nargs != 0)
                        return ctl_usage("runtime", "runtime list: unexpected argument '%s'", args[0]);
                return runtime_list(g);
        }
        if (streq(verb, "rm")) {
                if (nargs != 1)
                        return ctl_usage("runtime", "runtime rm: give one runtime NAME");
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "name", args[0]);
                if ((r = ctl_call(g, "runtime rm", "runtime.delete", p, &res)) != 0)
                        return r;
                cJSON_Delete(res);
                return 0;
        }
        if (streq(verb, "import")) {
                if (nargs != 2)
                        return ctl_usage("runtime", "runtime import: give a NAME and a ROOTFS tarball");
                _cleanup_free_ char *path = absolute_path(args[1]);
                if (!path)
                        return ctl_usage("runtime", "runtime import: cannot resolve '%s'", args[1]);
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "name", args[0]);
                cJSON_AddStringToObject(p, "path", path);
                if ((r = ctl_call(g, "runtime import", "runtime.import", p, &res)) != 0)
                        return r;
                return print_runtime(g, res);
        }
        if (streq(verb, "bootstrap")) {
                if (nargs != 1)
                        return ctl_usage("runtime", "runtime bootstrap: give one runtime NAME");
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "name", args[0]);
                if (suite)
                        cJSON_AddStringToObject(p, "suite", suite);
                if (mirror)
                        cJSON_AddStringToObject(p, "mirror", mirror);
                if ((r = ctl_call(g, "runtime bootstrap", "runtime.bootstrap", p, &res)) != 0)
                        return r;
                return print_runtime(g, res);
        }
        return ctl_usage("runtime", "runtime: unknown subcommand '%s'", verb);
}
