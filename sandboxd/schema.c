/* The parameter schema of every method (schema.h) and its checker.
 *
 * Fail closed: a key the method does not take is never ignored. A typo
 * ({"nme": ...}, "timeout" for "timeoutMs") would otherwise run the request
 * without what the caller asked for (a command without its time limit, an
 * update that changes nothing yet answers success), and a wrong-case or
 * repeated key would leave the choice of value to the JSON library
 * (cJSON_GetObjectItem matches case-insensitively; of duplicates the first
 * is found, while other readers take the last). So every key must match
 * one of the table exactly, and no object may hold a key twice.
 *
 * The size of every string parameter is here too (schema_limits), checked
 * on arrival, so an oversized name or prefix is refused naming the field
 * and the limit rather than looked up (a 1 MiB namePrefix, a 100-byte name
 * answered not_found, a 1 MiB policy.check host judged "deny").
 *
 * What the tables leave to others, on purpose: types, ranges and required
 * keys (each handler's rpc_param_* call, with messages naming the range);
 * env, tags and args sizes (sandboxd/limits.c); the keys of networkPolicy (pol_policy_parse,
 * which refuses unknown and duplicate keys itself, answering
 * invalid_policy); the "type" of a source, when it is not one of the
 * variants (parse_source names the choices). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "libcore/util.h"
#include "sandboxd/limits.h"
#include "sandboxd/schema.h"
#include "sandboxd/text.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

#define OPT(k) { .key = (k), .kind = SCHEMA_VALUE }
#define REQ(k) { .key = (k), .kind = SCHEMA_VALUE, .required = true }
#define MAP(k) { .key = (k), .kind = SCHEMA_MAP }
#define END { .key = NULL }

/* ---- the table ---------------------------------------------------------- */

static const schema_field resources_fields[] = { OPT("vcpus"), OPT("diskMiB"), END };

static const schema_field git_fields[] = {
        REQ("url"), OPT("depth"), OPT("revision"), OPT("username"), OPT("password"), END,
};
/* Exactly one of url and path (parse_source). */
static const schema_field tarball_fields[] = { OPT("url"), OPT("path"), END };
static const schema_field snapshot_fields[] = { REQ("snapshotId"), END };
static const schema_variant source_variants[] = {
        { "git", git_fields },
        { "tarball", tarball_fields },
        { "snapshot", snapshot_fields },
        { NULL, NULL },
};

static const schema_field volume_mount_fields[] = { REQ("name"), REQ("path"), OPT("readOnly"), END };

/* The config of a sandbox: what create takes besides name and source, and
 * so what a fork may override. */
#define CONFIG_FIELDS                                                                 \
        OPT("runtime"), OPT("ports"), OPT("timeout"),                                 \
        { .key = "resources", .kind = SCHEMA_OBJECT, .fields = resources_fields },    \
        { .key = "networkPolicy", .kind = SCHEMA_POLICY }, MAP("env"), MAP("tags"),   \
        OPT("persistent"), OPT("userns"),                                             \
        { .key = "volumes", .kind = SCHEMA_ARRAY, .fields = volume_mount_fields }
#define SOURCE_FIELD { .key = "source", .kind = SCHEMA_VARIANT, .variants = source_variants }

/* A pod's network namespace (pod.c); not a fork override: a fork gets a
 * namespace of its own. */
static const schema_field network_fields[] = { OPT("netns"), END };
#define NETWORK_FIELD { .key = "network", .kind = SCHEMA_OBJECT, .fields = network_fields }
/* Host mounts (container.c); not a fork override. */
static const schema_field ctr_mount_fields[] = { REQ("source"), REQ("destination"), OPT("readOnly"), END };
#define MOUNTS_FIELD { .key = "mounts", .kind = SCHEMA_ARRAY, .fields = ctr_mount_fields }
static const schema_field create_params[] = { OPT("name"), SOURCE_FIELD, CONFIG_FIELDS, NETWORK_FIELD, MOUNTS_FIELD, OPT("progress"), END };
static const schema_field get_or_create_params[] = { REQ("name"), SOURCE_FIELD, CONFIG_FIELDS, NETWORK_FIELD, MOUNTS_FIELD, OPT("progress"), OPT("setup"), END };
static const schema_field set_ready_params[] = { REQ("name"), REQ("ready"), END };
static const schema_field overrides_fields[] = { CONFIG_FIELDS, END };

static const schema_field name_params[] = { REQ("name"), END };
static const schema_field get_params[] = { REQ("name"), OPT("resume"), END };
static const schema_field update_params[] = {
        REQ("name"), OPT("timeout"), MAP("env"), MAP("tags"),
        { .key = "resources", .kind = SCHEMA_OBJECT, .fields = resources_fields },
        { .key = "networkPolicy", .kind = SCHEMA_POLICY }, OPT("ports"), END,
};
static const schema_field list_params[] = { OPT("namePrefix"), MAP("tags"), OPT("limit"), OPT("cursor"), END };
static const schema_field extend_params[] = { REQ("name"), REQ("duration"), END };
static const schema_field set_timeout_params[] = { REQ("name"), REQ("timeout"), OPT("onTimeout"), END };
static const schema_field fork_params[] = {
        REQ("sourceSandbox"), OPT("name"),
        { .key = "overrides", .kind = SCHEMA_OBJECT, .fields = overrides_fields }, END,
};
static const schema_field snapshot_params[] = { REQ("name"), OPT("expiration"), MAP("tags"), END };
static const schema_field snapshot_list_params[] = { OPT("sandbox"), MAP("tags"), END };
static const schema_field id_params[] = { REQ("id"), END };
static const schema_field export_params[] = { REQ("id"), REQ("path"), END };
static const schema_field import_params[] = { REQ("path"), OPT("config"), END };
static const schema_field no_params[] = { END };
static const schema_field runtime_import_params[] = { REQ("name"), REQ("path"), END };
static const schema_field bootstrap_params[] = { REQ("name"), OPT("suite"), OPT("mirror"), END };
static const schema_field run_params[] = {
        REQ("sandbox"), REQ("cmd"), OPT("args"), OPT("cwd"), MAP("env"), OPT("sudo"), OPT("detached"),
        OPT("stdin"), OPT("tty"), OPT("rows"), OPT("cols"), OPT("timeoutMs"), OPT("container"), END,
};
static const schema_field ctr_create_params[] = {
        REQ("sandbox"), REQ("name"), REQ("runtime"), MOUNTS_FIELD,
        OPT("readOnlyRoot"), OPT("pidNamespace"), OPT("memoryMiB"), OPT("cpuMillis"), OPT("pidsMax"), END,
};
static const schema_field ctr_name_params[] = { REQ("sandbox"), REQ("name"), END };
static const schema_field ctr_list_params[] = { REQ("sandbox"), END };
static const schema_field cmd_params[] = { REQ("cmdId"), END };
static const schema_field cmd_list_params[] = { REQ("name"), OPT("limit"), OPT("cursor"), END };
static const schema_field cancel_params[] = { REQ("id"), END };
static const schema_field write_params[] = { REQ("cmdId"), REQ("data"), END };
static const schema_field resize_params[] = { REQ("cmdId"), REQ("rows"), REQ("cols"), END };
static const schema_field kill_params[] = { REQ("cmdId"), OPT("signal"), END };
static const schema_field file_fields[] = { REQ("path"), REQ("content"), OPT("mode"), OPT("append"), MAP("xattrs"), END };
static const schema_field fs_write_params[] = {
        REQ("sandbox"), { .key = "files", .kind = SCHEMA_ARRAY, .required = true, .fields = file_fields }, OPT("sudo"),
        END,
};
static const schema_field fs_path_params[] = { REQ("sandbox"), REQ("path"), OPT("sudo"), END };
static const schema_field fs_mkdir_params[] = { REQ("sandbox"), REQ("path"), OPT("parents"), OPT("sudo"), END };
static const schema_field fs_remove_params[] = { REQ("sandbox"), REQ("path"), OPT("recursive"), OPT("sudo"), END };
static const schema_field fs_tar_params[] = { REQ("sandbox"), REQ("path"), OPT("sudo"), OPT("fd"), END };
static const schema_field tar_chunk_params[] = { REQ("stream"), REQ("data"), END };
static const schema_field tar_stream_params[] = { REQ("stream"), END };
static const schema_field policy_check_params[] = {
        OPT("sandbox"), { .key = "networkPolicy", .kind = SCHEMA_POLICY }, OPT("url"), OPT("host"), OPT("port"),
        OPT("protocol"), END,
};
static const schema_field fs_watch_params[] = { REQ("sandbox"), REQ("path"), OPT("recursive"), END };
static const schema_field act_as_params[] = { REQ("tenant"), END };
static const schema_field subscribe_params[] = { OPT("sandbox"), OPT("kinds"), END };
static const schema_field volume_create_params[] = { REQ("name"), REQ("sizeMiB"), OPT("inodes"), MAP("tags"), END };

const schema_method schema_methods[] = {
        { "sandbox.create", create_params },
        { "sandbox.get", get_params },
        { "sandbox.getOrCreate", get_or_create_params },
        { "sandbox.update", update_params },
        { "sandbox.list", list_params },
        { "sandbox.stop", name_params },
        { "sandbox.delete", name_params },
        { "sandbox.extendTimeout", extend_params },
        { "sandbox.setTimeout", set_timeout_params },
        { "sandbox.pause", name_params },
        { "sandbox.resume", name_params },
        { "sandbox.fork", fork_params },
        { "sandbox.snapshot", snapshot_params },
        { "snapshot.list", snapshot_list_params },
        { "snapshot.get", id_params },
        { "snapshot.delete", id_params },
        { "snapshot.export", export_params },
        { "snapshot.import", import_params },
        { "runtime.list", no_params },
        { "runtime.import", runtime_import_params },
        { "runtime.bootstrap", bootstrap_params },
        { "runtime.delete", name_params },
        { "command.run", run_params },
        { "container.create", ctr_create_params },
        { "container.get", ctr_name_params },
        { "container.list", ctr_list_params },
        { "container.delete", ctr_name_params },
        { "container.pause", ctr_name_params },
        { "container.resume", ctr_name_params },
        { "command.write", write_params },
        { "command.closeStdin", cmd_params },
        { "command.resize", resize_params },
        { "command.wait", cmd_params },
        { "command.kill", kill_params },
        { "command.get", cmd_params },
        { "command.logs", cmd_params },
        { "command.list", cmd_list_params },
        { "fs.write", fs_write_params },
        { "fs.read", fs_path_params },
        { "fs.mkdir", fs_mkdir_params },
        { "fs.list", fs_path_params },
        { "fs.stat", fs_path_params },
        { "fs.remove", fs_remove_params },
        { "fs.writeTar", fs_tar_params },
        { "fs.writeTarChunk", tar_chunk_params },
        { "fs.writeTarEnd", tar_stream_params },
        { "fs.readTar", fs_tar_params },
        { "fs.readTarChunk", tar_stream_params },
        { "fs.watch", fs_watch_params },
        { "policy.check", policy_check_params },
        { "events.subscribe", subscribe_params },
        { "daemon.info", no_params },
        { "request.cancel", cancel_params },
        { "sandbox.setReady", set_ready_params },
        { "session.actAs", act_as_params },
        { "volume.create", volume_create_params },
        { "volume.get", name_params },
        { "volume.list", list_params },
        { "volume.delete", name_params },
        { NULL, NULL },
};

/* The sizes of every plain parameter (schema.h). Kept apart from the
 * method table, one row per parameter, so a new method adds its rows
 * without touching the others'. */
#define CONFIG_LIMITS(m, pre)                                                                         \
        { m, pre "runtime", LIMIT_NAME_BYTES }, { m, pre "ports", 0 }, { m, pre "timeout", 0 },      \
        { m, pre "resources.vcpus", 0 }, { m, pre "resources.diskMiB", 0 }, { m, pre "persistent", 0 }, \
        { m, pre "userns", 0 }, { m, pre "volumes[].name", LIMIT_NAME_BYTES },                    \
        { m, pre "volumes[].path", LIMIT_PATH_BYTES }, { m, pre "volumes[].readOnly", 0 }
#define SOURCE_LIMITS(m)                                                                              \
        { m, "source.url", LIMIT_URL_BYTES }, { m, "source.depth", 0 },                              \
        { m, "source.revision", LIMIT_REVISION_BYTES }, { m, "source.username", LIMIT_USERNAME_BYTES }, \
        { m, "source.password", LIMIT_PASSWORD_BYTES }, { m, "source.path", LIMIT_PATH_BYTES },      \
        { m, "source.snapshotId", LIMIT_ID_BYTES }
const schema_limit schema_limits[] = {
        { "sandbox.create", "name", LIMIT_NAME_BYTES },
        SOURCE_LIMITS("sandbox.create"),
        CONFIG_LIMITS("sandbox.create", ""),
        { "sandbox.get", "name", LIMIT_NAME_BYTES },
        { "sandbox.get", "resume", 0 },
        { "sandbox.create", "progress", 0 },
        { "sandbox.create", "network.netns", LIMIT_PATH_BYTES },
        { "sandbox.create", "mounts[].source", LIMIT_PATH_BYTES },
        { "sandbox.create", "mounts[].destination", LIMIT_PATH_BYTES },
        { "sandbox.create", "mounts[].readOnly", 0 },
        { "sandbox.getOrCreate", "name", LIMIT_NAME_BYTES },
        { "sandbox.getOrCreate", "progress", 0 },
        { "sandbox.getOrCreate", "setup", 0 },
        { "sandbox.setReady", "name", LIMIT_NAME_BYTES },
        { "sandbox.setReady", "ready", 0 },
        SOURCE_LIMITS("sandbox.getOrCreate"),
        CONFIG_LIMITS("sandbox.getOrCreate", ""),
        { "sandbox.getOrCreate", "network.netns", LIMIT_PATH_BYTES },
        { "sandbox.getOrCreate", "mounts[].source", LIMIT_PATH_BYTES },
        { "sandbox.getOrCreate", "mounts[].destination", LIMIT_PATH_BYTES },
        { "sandbox.getOrCreate", "mounts[].readOnly", 0 },
        { "sandbox.update", "name", LIMIT_NAME_BYTES },
        { "sandbox.update", "timeout", 0 },
        { "sandbox.update", "resources.vcpus", 0 },
        { "sandbox.update", "resources.diskMiB", 0 },
        { "sandbox.update", "ports", 0 },
        { "sandbox.list", "namePrefix", LIMIT_NAME_BYTES },
        { "sandbox.list", "limit", 0 },
        { "sandbox.list", "cursor", LIMIT_NAME_BYTES }, /* the last name of the page before */
        { "sandbox.stop", "name", LIMIT_NAME_BYTES },
        { "sandbox.delete", "name", LIMIT_NAME_BYTES },
        { "sandbox.extendTimeout", "name", LIMIT_NAME_BYTES },
        { "sandbox.extendTimeout", "duration", 0 },
        { "sandbox.setTimeout", "name", LIMIT_NAME_BYTES },
        { "sandbox.setTimeout", "timeout", 0 },
        { "sandbox.setTimeout", "onTimeout", 16 },
        { "sandbox.pause", "name", LIMIT_NAME_BYTES },
        { "sandbox.resume", "name", LIMIT_NAME_BYTES },
        { "sandbox.fork", "sourceSandbox", LIMIT_NAME_BYTES },
        { "sandbox.fork", "name", LIMIT_NAME_BYTES },
        CONFIG_LIMITS("sandbox.fork", "overrides."),
        { "sandbox.snapshot", "name", LIMIT_NAME_BYTES },
        { "sandbox.snapshot", "expiration", 0 },
        { "snapshot.list", "sandbox", LIMIT_NAME_BYTES },
        { "snapshot.get", "id", LIMIT_ID_BYTES },
        { "snapshot.delete", "id", LIMIT_ID_BYTES },
        { "snapshot.export", "id", LIMIT_ID_BYTES },
        { "snapshot.export", "path", LIMIT_PATH_BYTES },
        { "snapshot.import", "path", LIMIT_PATH_BYTES },
        { "snapshot.import", "config", 0 },
        { "runtime.import", "name", LIMIT_NAME_BYTES },
        { "runtime.import", "path", LIMIT_PATH_BYTES },
        { "runtime.bootstrap", "name", LIMIT_NAME_BYTES },
        { "runtime.bootstrap", "suite", LIMIT_SUITE_BYTES },
        { "runtime.bootstrap", "mirror", LIMIT_MIRROR_BYTES },
        { "runtime.delete", "name", LIMIT_NAME_BYTES },
        { "command.run", "sandbox", LIMIT_NAME_BYTES },
        { "command.run", "cmd", LIMIT_CMD_BYTES },
        { "command.run", "args", 0 }, /* limit_check_args */
        { "command.run", "cwd", LIMIT_CWD_BYTES },
        { "command.run", "sudo", 0 },
        { "command.run", "detached", 0 },
        { "command.run", "stdin", 0 }, /* the line */
        { "command.run", "tty", 0 },
        { "command.run", "rows", 0 },
        { "command.run", "cols", 0 },
        { "command.run", "timeoutMs", 0 },
        { "command.run", "container", LIMIT_NAME_BYTES },
        { "container.create", "sandbox", LIMIT_NAME_BYTES },
        { "container.create", "name", LIMIT_NAME_BYTES },
        { "container.create", "runtime", LIMIT_NAME_BYTES },
        { "container.create", "mounts[].source", LIMIT_PATH_BYTES },
        { "container.create", "mounts[].destination", LIMIT_PATH_BYTES },
        { "container.create", "mounts[].readOnly", 0 },
        { "container.create", "readOnlyRoot", 0 },
        { "container.create", "pidNamespace", 0 },
        { "container.create", "memoryMiB", 0 },
        { "container.create", "cpuMillis", 0 },
        { "container.create", "pidsMax", 0 },
        { "container.get", "sandbox", LIMIT_NAME_BYTES },
        { "container.get", "name", LIMIT_NAME_BYTES },
        { "container.list", "sandbox", LIMIT_NAME_BYTES },
        { "container.delete", "sandbox", LIMIT_NAME_BYTES },
        { "container.delete", "name", LIMIT_NAME_BYTES },
        { "container.pause", "sandbox", LIMIT_NAME_BYTES },
        { "container.pause", "name", LIMIT_NAME_BYTES },
        { "container.resume", "sandbox", LIMIT_NAME_BYTES },
        { "container.resume", "name", LIMIT_NAME_BYTES },
        { "command.write", "cmdId", LIMIT_ID_BYTES },
        { "command.write", "data", 0 }, /* the line */
        { "command.closeStdin", "cmdId", LIMIT_ID_BYTES },
        { "command.resize", "cmdId", LIMIT_ID_BYTES },
        { "command.resize", "rows", 0 },
        { "command.resize", "cols", 0 },
        { "command.wait", "cmdId", LIMIT_ID_BYTES },
        { "command.kill", "cmdId", LIMIT_ID_BYTES },
        { "command.kill", "signal", LIMIT_WORD_BYTES },
        { "command.get", "cmdId", LIMIT_ID_BYTES },
        { "command.logs", "cmdId", LIMIT_ID_BYTES },
        { "command.list", "name", LIMIT_NAME_BYTES },
        { "command.list", "limit", 0 },
        { "command.list", "cursor", LIMIT_ID_BYTES },
        { "fs.write", "sandbox", LIMIT_NAME_BYTES },
        { "fs.write", "files[].path", LIMIT_PATH_BYTES },
        { "fs.write", "files[].content", 0 }, /* the line */
        { "fs.write", "files[].mode", 0 },
        { "fs.write", "files[].append", 0 },
        { "fs.write", "sudo", 0 },
        { "fs.read", "sandbox", LIMIT_NAME_BYTES },
        { "fs.read", "path", LIMIT_PATH_BYTES },
        { "fs.read", "sudo", 0 },
        { "fs.mkdir", "sandbox", LIMIT_NAME_BYTES },
        { "fs.mkdir", "path", LIMIT_PATH_BYTES },
        { "fs.mkdir", "parents", 0 },
        { "fs.mkdir", "sudo", 0 },
        { "fs.list", "sandbox", LIMIT_NAME_BYTES },
        { "fs.list", "path", LIMIT_PATH_BYTES },
        { "fs.list", "sudo", 0 },
        { "fs.stat", "sandbox", LIMIT_NAME_BYTES },
        { "fs.stat", "path", LIMIT_PATH_BYTES },
        { "fs.stat", "sudo", 0 },
        { "fs.remove", "sandbox", LIMIT_NAME_BYTES },
        { "fs.remove", "path", LIMIT_PATH_BYTES },
        { "fs.remove", "recursive", 0 },
        { "fs.remove", "sudo", 0 },
        { "fs.watch", "sandbox", LIMIT_NAME_BYTES },
        { "fs.watch", "path", LIMIT_PATH_BYTES },
        { "fs.watch", "recursive", 0 },
        { "fs.writeTar", "sandbox", LIMIT_NAME_BYTES },
        { "fs.writeTar", "path", LIMIT_PATH_BYTES },
        { "fs.writeTar", "sudo", 0 },
        { "fs.writeTar", "fd", 0 },
        { "fs.writeTarChunk", "stream", LIMIT_ID_BYTES },
        { "fs.writeTarChunk", "data", 0 }, /* the line */
        { "fs.writeTarEnd", "stream", LIMIT_ID_BYTES },
        { "fs.readTar", "sandbox", LIMIT_NAME_BYTES },
        { "fs.readTar", "path", LIMIT_PATH_BYTES },
        { "fs.readTar", "sudo", 0 },
        { "fs.readTar", "fd", 0 },
        { "fs.readTarChunk", "stream", LIMIT_ID_BYTES },
        { "policy.check", "sandbox", LIMIT_NAME_BYTES },
        { "policy.check", "url", LIMIT_URL_BYTES },
        { "policy.check", "host", LIMIT_HOST_BYTES },
        { "policy.check", "port", 0 },
        { "policy.check", "protocol", LIMIT_WORD_BYTES },
        { "events.subscribe", "sandbox", LIMIT_NAME_BYTES },
        { "events.subscribe", "kinds", 0 }, /* each one of the known kinds */
        { "request.cancel", "id", 0 },
        { "session.actAs", "tenant", 64 }, /* a tenant:NAME's NAME (remote_tenant_name_ok) */
        { "volume.create", "name", LIMIT_NAME_BYTES },
        { "volume.create", "sizeMiB", 0 },
        { "volume.create", "inodes", 0 },
        { "volume.get", "name", LIMIT_NAME_BYTES },
        { "volume.list", "namePrefix", LIMIT_NAME_BYTES },
        { "volume.list", "limit", 0 },
        { "volume.list", "cursor", LIMIT_NAME_BYTES }, /* the last name of the page before */
        { "volume.delete", "name", LIMIT_NAME_BYTES },
        { NULL, NULL, 0 },
};

const schema_method *schema_find(const char *method) {
        for (const schema_method *m = schema_methods; method && m->method; m++)
                if (streq(m->method, method))
                        return m;
        return NULL;
}

/* ---- paths ---------------------------------------------------------------- */

/* A field path as data.field shows it: "resources.vcpus", "files[2].path",
 * env["A B"] for a name that is not a plain identifier. Cut (never
 * overflowed) past its buffer; depth is bounded by LIMIT_JSON_DEPTH. */
typedef struct path {
        char buf[1024];
        size_t len;
} path;

static bool plain_key(const char *k) {
        size_t n = 0;
        for (; k[n]; n++)
                if (!((k[n] >= 'a' && k[n] <= 'z') || (k[n] >= 'A' && k[n] <= 'Z') || (k[n] >= '0' && k[n] <= '9') ||
                      k[n] == '_' || k[n] == '-'))
                        return false;
        return n > 0 && n <= TEXT_QUOTE_MAX;
}

static size_t path_push_key(path *p, const char *key) {
        size_t old = p->len, room = sizeof(p->buf) - p->len;
        int w;
        if (plain_key(key))
                w = snprintf(p->buf + p->len, room, "%s%s", p->len ? "." : "", key);
        else {
                /* JSON-quoted, so quotes and control characters cannot
                 * forge another path; cut like any echoed input. */
                _cleanup_(cJSON_Deletep) cJSON *s = cJSON_CreateString(TEXT_Q(key));
                _cleanup_free_ char *q = s ? cJSON_PrintUnformatted(s) : NULL;
                w = snprintf(p->buf + p->len, room, "[%s]", q ? q : "\"?\"");
        }
        p->len = w < 0 ? p->len : (size_t)w >= room ? sizeof(p->buf) - 1 : p->len + (size_t)w;
        return old;
}

static size_t path_push_index(path *p, int i) {
        size_t old = p->len, room = sizeof(p->buf) - p->len;
        int w = snprintf(p->buf + p->len, room, "[%d]", i);
        p->len = w < 0 ? p->len : (size_t)w >= room ? sizeof(p->buf) - 1 : p->len + (size_t)w;
        return old;
}

static void path_pop(path *p, size_t old) {
        p->len = old;
        p->buf[old] = '\0';
}

/* ---- checking --------------------------------------------------------------- */

static int duplicate_error(const path *p, sb_error **ret_err) {
        return sb_error_set(ret_err, -EINVAL, NULL, p->buf, "%s: duplicate key: give each key once", p->buf);
}

static int cmp_member_names(const void *a, const void *b) {
        const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
        return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

/* Sets *ret to a member of obj whose name another member has, or NULL.
 * A line may hold millions of members (maxLineBytes), so beyond a few
 * they are sorted by name, O(n log n), rather than compared pairwise on
 * the event loop. 0, or -ENOMEM with *ret_err set. */
static int find_duplicate(const cJSON *obj, const cJSON **ret, sb_error **ret_err) {
        size_t n = 0;
        *ret = NULL;
        for (const cJSON *c = obj->child; c; c = c->next)
                n++;
        if (n <= 16) {
                for (const cJSON *c = obj->child; c && !*ret; c = c->next)
                        for (const cJSON *d = obj->child; d != c && !*ret; d = d->next)
                                if (c->string && d->string && streq(c->string, d->string))
                                        *ret = c;
                return 0;
        }
        _cleanup_free_ const cJSON **v = malloc(n * sizeof(*v));
        if (!v)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        n = 0;
        for (const cJSON *c = obj->child; c; c = c->next)
                v[n++] = c;
        qsort(v, n, sizeof(*v), cmp_member_names);
        for (size_t i = 1; i < n && !*ret; i++)
                if (cmp_member_names(&v[i - 1], &v[i]) == 0)
                        *ret = v[i];
        return 0;
}

/* No object anywhere in v repeats a key (values the schema says nothing
 * about: map values, a value of the wrong type). */
static int check_no_duplicates(const cJSON *v, path *p, sb_error **ret_err) {
        if (cJSON_IsObject(v)) {
                const cJSON *dup = NULL;
                int r = find_duplicate(v, &dup, ret_err);
                if (r < 0)
                        return r;
                if (dup) {
                        path_push_key(p, dup->string);
                        return duplicate_error(p, ret_err);
                }
        }
        if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
                return 0;
        int i = 0;
        for (const cJSON *c = v->child; c; c = c->next, i++) {
                size_t old = cJSON_IsObject(v) ? path_push_key(p, c->string) : path_push_index(p, i);
                int r = check_no_duplicates(c, p, ret_err);
                if (r < 0)
                        return r;
                path_pop(p, old);
        }
        return 0;
}

/* "unknown parameter" with the closest known key, or the list of them. */
static int unknown_error(const path *p, const char *key, const char *owner, const schema_field *fields,
                         sb_error **ret_err) {
        const char *names[64] = { NULL };
        size_t n = 0;
        for (const schema_field *f = fields; f->key && n < ELEMENTSOF(names); f++)
                names[n++] = f->key;
        int best = core_closest_word(key, names, n);
        if (best >= 0)
                return sb_error_set(ret_err, -EINVAL, NULL, p->buf, "%s: unknown parameter of %s%s; did you mean \"%s\"?",
                                    p->buf, owner,
                                    strcasecmp(key, names[best]) == 0 ? " (keys are case-sensitive)" : "",
                                    names[best]);
        char list[512];
        size_t o = 0;
        list[0] = '\0';
        for (size_t i = 0; i < n && o < sizeof(list); i++) {
                int w = snprintf(list + o, sizeof(list) - o, "%s\"%s\"", i ? ", " : "", names[i]);
                o += w > 0 ? (size_t)w : 0;
        }
        if (n == 0)
                return sb_error_set(ret_err, -EINVAL, NULL, p->buf, "%s: unknown parameter; %s takes none", p->buf,
                                    owner);
        return sb_error_set(ret_err, -EINVAL, NULL, p->buf, "%s: unknown parameter of %s, which takes %s", p->buf,
                            owner, list);
}

static int check_object(const cJSON *obj, path *p, const char *owner, const schema_field *fields,
                        const char *skip, sb_error **ret_err);

/* One value against its field. Values of the wrong JSON type are left to
 * the handler (which names the type it wants), but still may not hide a
 * duplicate key. */
static int check_value(const cJSON *v, path *p, const schema_field *f, sb_error **ret_err) {
        switch (f->kind) {
        case SCHEMA_POLICY:
                return 0;
        case SCHEMA_OBJECT:
                if (cJSON_IsObject(v)) {
                        _cleanup_free_ char *owner = strdup(p->buf);
                        return check_object(v, p, owner ? owner : "?", f->fields, NULL, ret_err);
                }
                break;
        case SCHEMA_ARRAY:
                if (!cJSON_IsArray(v))
                        break;
                int i = 0;
                for (const cJSON *c = v->child; c; c = c->next, i++) {
                        size_t old = path_push_index(p, i);
                        _cleanup_free_ char *owner = strdup(p->buf);
                        int r = cJSON_IsObject(c) ? check_object(c, p, owner ? owner : "?", f->fields, NULL, ret_err)
                                                  : check_no_duplicates(c, p, ret_err);
                        if (r < 0)
                                return r;
                        path_pop(p, old);
                }
                return 0;
        case SCHEMA_VARIANT: {
                if (!cJSON_IsObject(v))
                        break;
                const cJSON *dup = NULL;
                int r = find_duplicate(v, &dup, ret_err);
                if (r < 0)
                        return r;
                if (dup) {
                        path_push_key(p, dup->string);
                        return duplicate_error(p, ret_err);
                }
                const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(v, "type"));
                for (const schema_variant *var = f->variants; type && var->type; var++)
                        if (streq(var->type, type)) {
                                _cleanup_free_ char *owner = NULL;
                                if (asprintf(&owner, "a %s %s", type, p->buf) < 0)
                                        owner = NULL;
                                return check_object(v, p, owner ? owner : "?", var->fields, "type", ret_err);
                        }
                break; /* no or an unknown type: the handler lists the types */
        }
        case SCHEMA_MAP:
        case SCHEMA_VALUE:
                break;
        }
        return check_no_duplicates(v, p, ret_err);
}

/* obj's members against `fields` (plus `skip`, a key the caller handled). */
static int check_object(const cJSON *obj, path *p, const char *owner, const schema_field *fields,
                        const char *skip, sb_error **ret_err) {
        const cJSON *dup = NULL;
        int r0 = find_duplicate(obj, &dup, ret_err);
        if (r0 < 0)
                return r0;
        if (dup) {
                path_push_key(p, dup->string);
                return duplicate_error(p, ret_err);
        }
        for (const cJSON *c = obj->child; c; c = c->next) {
                const schema_field *f = fields;
                while (f->key && !streq(f->key, c->string))
                        f++;
                size_t old = path_push_key(p, c->string);
                if (skip && streq(c->string, skip)) {
                        path_pop(p, old);
                        continue;
                }
                if (!f->key)
                        return unknown_error(p, c->string, owner, fields, ret_err);
                int r = check_value(c, p, f, ret_err);
                if (r < 0)
                        return r;
                path_pop(p, old);
        }
        return 0;
}

/* ---- sizes (schema_limits) ----------------------------------------------- */

/* Checks the value(s) at `rest` (a schema_limits field, "a.b", "x[].y")
 * under v, extending p with the path as data.field shows it. */
static int check_limit_at(const cJSON *v, const char *rest, size_t max, path *p, sb_error **ret_err) {
        if (!*rest) {
                if (!cJSON_IsString(v))
                        return 0; /* a wrong type is the handler's to name */
                size_t n = limit_json_len(v->valuestring);
                if (n <= max)
                        return 0;
                /* The value's start, as every message quotes input (a
                 * secret is never echoed). */
                if (strstr(p->buf, "password"))
                        return sb_error_set(ret_err, -EINVAL, NULL, p->buf,
                                            "%s: %zu bytes is over the limit of %zu bytes", p->buf, n, max);
                return sb_error_set(ret_err, -EINVAL, NULL, p->buf, "%s: \"%s\": %zu bytes is over the limit of %zu bytes",
                                    p->buf, TEXT_Q(v->valuestring), n, max);
        }
        size_t k = strcspn(rest, ".[");
        char key[64];
        if (k >= sizeof(key) || !cJSON_IsObject(v))
                return 0;
        memcpy(key, rest, k);
        key[k] = '\0';
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, key);
        if (!c)
                return 0;
        size_t old = path_push_key(p, key);
        rest += k;
        int r = 0;
        if (strncmp(rest, "[]", 2) == 0) {
                rest += 2;
                if (*rest == '.')
                        rest++;
                int i = 0;
                for (const cJSON *e = cJSON_IsArray(c) ? c->child : NULL; e && r == 0; e = e->next, i++) {
                        size_t o2 = path_push_index(p, i);
                        r = check_limit_at(e, rest, max, p, ret_err);
                        path_pop(p, o2);
                }
        } else
                r = check_limit_at(c, *rest == '.' ? rest + 1 : rest, max, p, ret_err);
        if (r == 0)
                path_pop(p, old);
        return r;
}

static int check_limits(const char *method, const cJSON *params, sb_error **ret_err) {
        for (const schema_limit *l = schema_limits; l->method; l++) {
                if (l->max == 0 || !streq(l->method, method))
                        continue;
                path p = { .len = 0 };
                p.buf[0] = '\0';
                int r = check_limit_at(params, l->field, l->max, &p, ret_err);
                if (r < 0)
                        return r;
        }
        return 0;
}

int schema_check_params(const char *method, const cJSON *params, sb_error **ret_err) {
        const schema_method *m = schema_find(method);
        if (!m)
                return sb_error_set(ret_err, -ENOENT, NULL, NULL, "%s: the method has no parameter schema",
                                    TEXT_Q(method));
        if (cJSON_IsArray(params)) {
                if (cJSON_GetArraySize(params) == 0)
                        return 0;
                return sb_error_set(ret_err, -EINVAL, NULL, "params",
                                    "params: %s takes its parameters by name: give an object, not an array",
                                    m->method);
        }
        if (!cJSON_IsObject(params))
                return sb_error_set(ret_err, -EINVAL, NULL, "params", "params: must be an object");
        path p = { .len = 0 };
        p.buf[0] = '\0';
        int r = check_object(params, &p, m->method, m->params, NULL, ret_err);
        if (r < 0)
                return r;
        return check_limits(m->method, params, ret_err);
}

int schema_check_members(const cJSON *obj, const char *const *allowed, size_t n, const char *what,
                         sb_error **ret_err) {
        const cJSON *dup = NULL;
        int r = find_duplicate(obj, &dup, ret_err);
        if (r < 0)
                return r;
        if (dup)
                return sb_error_set(ret_err, -EINVAL, NULL, dup->string, "%s: duplicate member \"%s\"", what,
                                    TEXT_Q(dup->string));
        for (const cJSON *c = obj->child; c; c = c->next) {
                bool known = false;
                for (size_t i = 0; i < n && !known; i++)
                        known = streq(c->string, allowed[i]);
                if (known)
                        continue;
                int best = core_closest_word(c->string, allowed, n);
                if (best >= 0)
                        return sb_error_set(ret_err, -EINVAL, NULL, c->string,
                                            "%s: unknown member \"%s\"; did you mean \"%s\"?", what,
                                            TEXT_Q(c->string), allowed[best]);
                return sb_error_set(ret_err, -EINVAL, NULL, c->string,
                                    "%s: unknown member \"%s\" (JSON-RPC 2.0 requests have jsonrpc, id, method and params)",
                                    what, TEXT_Q(c->string));
        }
        return 0;
}

/* ---- the docs' table ---------------------------------------------------------- */

static void print_fields(FILE *f, const schema_field *fields) {
        for (const schema_field *x = fields; x->key; x++) {
                fprintf(f, "%s`%s%s`", x == fields ? "" : ", ", x->key, x->required ? "" : "?");
                switch (x->kind) {
                case SCHEMA_OBJECT:
                case SCHEMA_ARRAY:
                        fputs(x->kind == SCHEMA_ARRAY ? " [{" : " {", f);
                        print_fields(f, x->fields);
                        fputs(x->kind == SCHEMA_ARRAY ? "}]" : "}", f);
                        break;
                case SCHEMA_VARIANT:
                        fputs(" (", f);
                        for (const schema_variant *v = x->variants; v->type; v++) {
                                fprintf(f, "%s`\"type\": \"%s\"`, ", v == x->variants ? "" : "; ", v->type);
                                print_fields(f, v->fields);
                        }
                        fputs(")", f);
                        break;
                case SCHEMA_MAP:
                        fputs(" {NAME: string}", f);
                        break;
                case SCHEMA_POLICY:
                        fputs(" (docs/POLICY.md)", f);
                        break;
                case SCHEMA_VALUE:
                        break;
                }
        }
}

void schema_print_markdown(FILE *f) {
        for (const schema_method *m = schema_methods; m->method; m++) {
                fprintf(f, "| `%s` | ", m->method);
                if (m->params[0].key)
                        print_fields(f, m->params);
                else
                        fputs("none", f);
                fputs(" |\n", f);
        }
}

void schema_print_limits_markdown(FILE *f) {
        for (const schema_method *m = schema_methods; m->method; m++) {
                bool any = false;
                for (const schema_limit *l = schema_limits; l->method; l++) {
                        if (l->max == 0 || !streq(l->method, m->method))
                                continue;
                        if (!any)
                                fprintf(f, "| `%s` | ", m->method);
                        fprintf(f, "%s`%s` %zu", any ? ", " : "", l->field, l->max);
                        any = true;
                }
                if (any)
                        fputs(" |\n", f);
        }
}
