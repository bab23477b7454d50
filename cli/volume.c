/* sandboxctl volume: create, ls, get and rm, thin wrappers over
 * volume.create, volume.list, volume.get and volume.delete (docs/API.md
 * "Volumes"). Mounting is create's --volume NAME:/PATH[:ro]. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include "cli/ctl.h"
#include "libcore/macro.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

static const char volume_help[] =
        "Usage: sandboxctl volume create NAME --size SIZE [--inodes N] [--tag K=V]...\n"
        "       sandboxctl volume ls [--prefix P] [--tag K=V]...\n"
        "       sandboxctl volume get NAME\n"
        "       sandboxctl volume rm NAME\n\n"
        "A volume is a named filesystem of its own, bounded to SIZE (512M, 1G, 2T or\n"
        "MiB; at least 16M) and to N inodes (default: one per 16 KiB), mounted into\n"
        "sandboxes with `create --volume NAME:/PATH[:ro]` (repeatable). Several\n"
        "sandboxes may mount one volume at once, read-write or read-only; a full\n"
        "volume gives ENOSPC to its users alone. Files keep the sandbox user's\n"
        "ownership from one sandbox to the next. Volumes outlive the sandboxes that\n"
        "mount them, are no part of snapshots, and a fork mounts its source's.\n\n"
        "  create  makes the volume and prints its name\n"
        "  ls      lists volumes: size, use, inodes, mounted by\n"
        "  get     shows one volume\n"
        "  rm      deletes a volume and its files; refused (exit 5) while a sandbox\n"
        "          mounts it, naming the sandboxes\n";

enum { OPT_SOCKET = 1000, OPT_JSON, OPT_SIZE, OPT_INODES, OPT_TAG, OPT_PREFIX };

static void mib_text(double bytes, char *buf, size_t size) {
        const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        size_t u = 0;
        while (bytes >= 1024 && u + 1 < ELEMENTSOF(units)) {
                bytes /= 1024;
                u++;
        }
        snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

static int volume_ls(const ctl_globals *g, cJSON *params) {
        cJSON *all = cJSON_CreateArray();
        for (;;) {
                cJSON *res = NULL;
                int r = ctl_call(g, "volume ls", "volume.list", cJSON_Duplicate(params, 1), &res);
                if (r != 0) {
                        cJSON_Delete(params);
                        cJSON_Delete(all);
                        return r;
                }
                cJSON *arr = cJSON_DetachItemFromObject(res, "volumes"), *it;
                while (arr && (it = cJSON_DetachItemViaPointer(arr, arr->child)))
                        cJSON_AddItemToArray(all, it);
                cJSON_Delete(arr);
                const char *next = cJSON_GetStringValue(cJSON_GetObjectItem(res, "nextCursor"));
                cJSON_DeleteItemFromObject(params, "cursor");
                if (next)
                        cJSON_AddStringToObject(params, "cursor", next);
                cJSON_Delete(res);
                if (!next)
                        break;
        }
        cJSON_Delete(params);
        if (g->json) {
                cJSON *out = cJSON_CreateObject();
                cJSON_AddItemToObject(out, "volumes", all);
                cJSON_AddNullToObject(out, "nextCursor");
                ctl_print_json(out);
                cJSON_Delete(out);
                return 0;
        }
        static const char *const header[] = {"NAME", "SIZE", "USED", "INODES USED", "MOUNTED BY", "CREATED"};
        size_t n = (size_t)cJSON_GetArraySize(all), i = 0;
        char ***rows = calloc(n + 1, sizeof(*rows));
        char (*cells)[4][600] = calloc(n + 1, sizeof(*cells));
        cJSON *it;
        cJSON_ArrayForEach(it, all) {
                rows[i] = calloc(6, sizeof(char *));
                cJSON *u = cJSON_GetObjectItem(it, "usage");
                mib_text(cJSON_GetNumberValue(cJSON_GetObjectItem(it, "sizeMiB")) * 1048576.0, cells[i][0], 600);
                mib_text(cJSON_GetNumberValue(cJSON_GetObjectItem(u, "usedBytes")), cells[i][1], 600);
                snprintf(cells[i][2], 600, "%.0f/%.0f", cJSON_GetNumberValue(cJSON_GetObjectItem(u, "usedInodes")),
                         cJSON_GetNumberValue(cJSON_GetObjectItem(it, "inodes")));
                cJSON *by = cJSON_GetObjectItem(it, "mountedBy"), *b;
                size_t off = 0;
                cells[i][3][0] = 0;
                cJSON_ArrayForEach(b, by)
                        if (cJSON_IsString(b) && off < 590)
                                off += (size_t)snprintf(cells[i][3] + off, 600 - off, "%s%s", off ? "," : "", b->valuestring);
                rows[i][0] = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name"));
                rows[i][1] = cells[i][0];
                rows[i][2] = cells[i][1];
                rows[i][3] = cells[i][2];
                rows[i][4] = off ? cells[i][3] : NULL;
                rows[i][5] = cJSON_GetStringValue(cJSON_GetObjectItem(it, "createdAt"));
                i++;
        }
        ctl_print_table(header, 6, rows, n);
        for (i = 0; i < n; i++)
                free(rows[i]);
        free(rows);
        free(cells);
        cJSON_Delete(all);
        return 0;
}

/* Adds K=V of a --tag to params.tags. Returns 0 or an exit code. */
static int add_tag(cJSON *params, const char *verb, const char *arg) {
        char *k = NULL, *v = NULL;
        if (cli_parse_kv(arg, &k, &v) < 0)
                return ctl_usage("volume", "volume %s: bad --tag '%s' (use K=V)", verb, arg);
        cJSON *tags = cJSON_GetObjectItemCaseSensitive(params, "tags");
        if (!tags)
                tags = cJSON_AddObjectToObject(params, "tags");
        cJSON_DeleteItemFromObjectCaseSensitive(tags, k);
        cJSON_AddStringToObject(tags, k, v);
        free(k);
        return 0;
}

int ctl_volume(ctl_globals *g, int argc, char **argv) {
        static const struct option opts[] = {
                {"socket", required_argument, NULL, OPT_SOCKET}, {"json", no_argument, NULL, OPT_JSON},
                {"help", no_argument, NULL, 'h'},                {"size", required_argument, NULL, OPT_SIZE},
                {"inodes", required_argument, NULL, OPT_INODES}, {"tag", required_argument, NULL, OPT_TAG},
                {"prefix", required_argument, NULL, OPT_PREFIX}, {}};
        _cleanup_(cJSON_Deletep) cJSON *p = cJSON_CreateObject();
        const char *size = NULL, *inodes = NULL, *prefix = NULL;
        bool tags = false;
        int opt, r;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case OPT_SIZE: size = optarg; break;
                case OPT_INODES: inodes = optarg; break;
                case OPT_PREFIX: prefix = optarg; break;
                case OPT_TAG:
                        tags = true;
                        if ((r = add_tag(p, "create", optarg)) != 0)
                                return r;
                        break;
                case 'h': fputs(volume_help, stdout); return 0;
                default: return ctl_usage("volume", "volume: unknown option");
                }
        }
        if (optind >= argc)
                return ctl_usage("volume", "volume: give create, ls, get or rm");
        const char *verb = argv[optind];
        int nargs = argc - optind - 1;
        char **args = argv + optind + 1;
        bool create = streq(verb, "create"), ls = streq(verb, "ls") || streq(verb, "list");
        if ((size || inodes) && !create)
                return ctl_usage("volume", "volume %s: --size and --inodes are for create", verb);
        if (tags && !create && !ls)
                return ctl_usage("volume", "volume %s: --tag is for create and ls", verb);
        if (prefix && !ls)
                return ctl_usage("volume", "volume %s: --prefix is for ls", verb);
        cJSON *res = NULL;
        if (ls) {
                if (nargs != 0)
                        return ctl_usage("volume", "volume ls: unexpected argument '%s'", args[0]);
                if (prefix)
                        cJSON_AddStringToObject(p, "namePrefix", prefix);
                return volume_ls(g, TAKE_PTR(p));
        }
        if (!create && !streq(verb, "get") && !streq(verb, "rm"))
                return ctl_usage("volume", "volume: unknown subcommand '%s'", verb);
        if (nargs != 1)
                return ctl_usage("volume", "volume %s: give one volume NAME", verb);
        cJSON_AddStringToObject(p, "name", args[0]);
        if (streq(verb, "rm")) {
                if ((r = ctl_call(g, "volume rm", "volume.delete", TAKE_PTR(p), &res)) != 0)
                        return r;
                cJSON_Delete(res);
                return 0;
        }
        if (streq(verb, "get")) {
                if ((r = ctl_call(g, "volume get", "volume.get", TAKE_PTR(p), &res)) != 0)
                        return r;
                if (g->json)
                        ctl_print_json(res);
                else
                        ctl_print_fields(res);
                cJSON_Delete(res);
                return 0;
        }
        int64_t mib = 0, n = 0;
        if (!size)
                return ctl_usage("volume", "volume create: give --size (512M, 1G, ...)");
        if (cli_parse_size_mib(size, &mib) < 0)
                return ctl_usage("volume", "volume create: bad --size '%s' (use 512M, 1G, 2T or a number of MiB)", size);
        cJSON_AddNumberToObject(p, "sizeMiB", (double)mib);
        if (inodes) {
                char *end = NULL;
                n = strtoll(inodes, &end, 10);
                if (!*inodes || *end || n <= 0)
                        return ctl_usage("volume", "volume create: bad --inodes '%s' (a whole number)", inodes);
                cJSON_AddNumberToObject(p, "inodes", (double)n);
        }
        if ((r = ctl_call(g, "volume create", "volume.create", TAKE_PTR(p), &res)) != 0)
                return r;
        if (g->json)
                ctl_print_json(res);
        else
                ctl_puts_escaped(cJSON_GetStringValue(cJSON_GetObjectItem(res, "name")) ?: "?");
        cJSON_Delete(res);
        return 0;
}
