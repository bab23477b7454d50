/* sandboxctl container: ls, pause and resume, thin wrappers over
 * container.list, container.pause and container.resume (docs/API.md
 * "Containers"). Containers are made through the API (the containerd shim's
 * pods); the command line lists them and freezes or thaws one. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "cli/ctl.h"
#include "libcore/macro.h"

static const char container_help[] =
        "Usage: sandboxctl container ls [--json] SANDBOX\n"
        "       sandboxctl container pause [--json] SANDBOX NAME\n"
        "       sandboxctl container resume [--json] SANDBOX NAME\n\n"
        "The containers of a running sandbox (made through the API, e.g. by the\n"
        "containerd shim): each has its own root filesystem, mount namespace and cgroup.\n\n"
        "  ls      lists them: name, runtime, paused, memory in use, processes\n"
        "  pause   freezes container NAME's own cgroup: only its processes stop, the\n"
        "          sandbox and its other containers run on; exec --container into it\n"
        "          is refused until resume. Prints nothing (--json: the container,\n"
        "          whose paused is true)\n"
        "  resume  thaws it. Prints nothing (--json: the container)\n"
        "A pause and resume of the whole sandbox leaves a paused container paused.\n";

enum { OPT_SOCKET = 1000, OPT_JSON };

static const char *string_of(const cJSON *o, const char *key) {
        return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static void print_containers(const cJSON *arr) {
        static const char *const header[] = { "NAME", "RUNTIME", "PAUSED", "MEM", "PIDS", "CREATED" };
        size_t n = (size_t) cJSON_GetArraySize(arr), i = 0;
        _cleanup_free_ char ***rows = calloc(n ? n : 1, sizeof(char **));
        _cleanup_free_ char (*nums)[2][32] = calloc(n ? n : 1, sizeof(*nums));
        _cleanup_free_ char **cells = calloc(n ? n * 6 : 1, sizeof(char *));
        if (!rows || !nums || !cells)
                return;
        const cJSON *c;
        cJSON_ArrayForEach(c, arr) {
                const cJSON *usage = cJSON_GetObjectItemCaseSensitive(c, "usage");
                const cJSON *mem = cJSON_GetObjectItemCaseSensitive(usage, "memoryBytes");
                const cJSON *pids = cJSON_GetObjectItemCaseSensitive(usage, "pids");
                char **row = rows[i] = cells + i * 6;
                row[0] = (char *) string_of(c, "name");
                row[1] = (char *) string_of(c, "runtime");
                row[2] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "paused")) ? "yes" : "no";
                if (cJSON_IsNumber(mem)) {
                        snprintf(nums[i][0], sizeof(nums[i][0]), "%.0f", mem->valuedouble);
                        row[3] = nums[i][0];
                }
                if (cJSON_IsNumber(pids)) {
                        snprintf(nums[i][1], sizeof(nums[i][1]), "%.0f", pids->valuedouble);
                        row[4] = nums[i][1];
                }
                row[5] = (char *) string_of(c, "createdAt");
                i++;
        }
        ctl_print_table(header, 6, rows, n);
}

/* container pause|resume SANDBOX NAME (verb is "pause" or "resume"). */
static int container_freeze(ctl_globals *g, const char *verb, const char *sandbox, const char *name) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "sandbox", sandbox);
        cJSON_AddStringToObject(p, "name", name);
        _cleanup_free_ char *context = NULL;
        if (asprintf(&context, "container %s %s %s", verb, sandbox, name) < 0)
                context = NULL;
        cJSON *res = NULL;
        int r = ctl_call(g, context, streq(verb, "pause") ? "container.pause" : "container.resume", p, &res);
        if (r != 0)
                return r;
        if (g->json)
                ctl_print_json(res);
        cJSON_Delete(res);
        return 0;
}

int ctl_container(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "json", no_argument, NULL, OPT_JSON },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case 'h': fputs(container_help, stdout); return 0;
                default: return ctl_usage("container", "container: unknown option");
                }
        }
        if (optind >= argc)
                return ctl_usage("container", "container: missing subcommand (ls, pause, resume)");
        const char *verb = argv[optind];
        int nargs = argc - optind - 1;
        if (streq(verb, "ls") || streq(verb, "list")) {
                if (nargs != 1)
                        return ctl_usage("container", "container ls: give one SANDBOX");
                cJSON *p = cJSON_CreateObject();
                cJSON_AddStringToObject(p, "sandbox", argv[optind + 1]);
                cJSON *res = NULL;
                int r = ctl_call(g, "container ls", "container.list", p, &res);
                if (r != 0)
                        return r;
                if (g->json)
                        ctl_print_json(res);
                else
                        print_containers(cJSON_GetObjectItemCaseSensitive(res, "containers"));
                cJSON_Delete(res);
                return 0;
        }
        if (streq(verb, "pause") || streq(verb, "resume")) {
                if (nargs != 2)
                        return ctl_usage("container", "container %s: give SANDBOX and NAME", verb);
                return container_freeze(g, verb, argv[optind + 1], argv[optind + 2]);
        }
        return ctl_usage("container", "container: unknown subcommand '%s' (ls, pause, resume)", verb);
}
