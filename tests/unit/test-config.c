/* Unit tests for daemon.json parsing (sandboxd/config.c): defaults, every
 * key, and errors that name the offending key. */
#include <setjmp.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <sys/stat.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>
#include "libcore/util.h"
#include "sandboxd/config.h"
#include "sandboxd/tenant.h"

/* Parses `text` over the defaults; returns the error message (caller frees)
 * or NULL on success. */
static char *parse_error(const char *text, daemon_config *cfg) {
        sb_error *err = NULL;
        daemon_config_defaults(cfg);
        int r = daemon_config_parse(cfg, text, &err);
        if (r == 0) {
                assert_null(err);
                return NULL;
        }
        assert_non_null(err);
        char *msg = strdup(err->message);
        sb_error_free(err);
        return msg;
}

static void assert_rejected_naming(const char *text, const char *needle) {
        daemon_config cfg;
        char *msg = parse_error(text, &cfg);
        assert_non_null(msg);
        if (!strstr(msg, needle))
                fail_msg("message '%s' does not contain '%s'", msg, needle);
        free(msg);
        daemon_config_free(&cfg);
}

static void test_defaults_match_the_design(void **state) {
        daemon_config cfg;
        daemon_config_defaults(&cfg);
        assert_string_equal(cfg.socket_path, "/run/sandboxd/sandboxd.sock");
        assert_string_equal(cfg.state_dir, "/var/lib/sandboxd");
        assert_string_equal(cfg.run_dir, "/run/sandboxd");
        assert_string_equal(cfg.socket_group, "sandboxd");
        assert_int_equal(cfg.max_line_bytes, 16 * 1024 * 1024);
        assert_int_equal(cfg.default_timeout_ms, 300000);
        assert_int_equal(cfg.max_timeout_ms, 86400000);
        assert_int_equal(cfg.max_vcpus, 8);
        assert_int_equal(cfg.pids_max, 4096);
        assert_int_equal(cfg.stop_grace_ms, 2000);
        assert_int_equal(cfg.command_log_bytes, 1024 * 1024);
        assert_int_equal(cfg.max_source_bytes, 4ULL * 1024 * 1024 * 1024);
        assert_string_equal(cfg.network_pool, "10.201.0.0/16");
        assert_non_null(cfg.init_path);
        assert_true(strstr(cfg.init_path, "/sandbox-init") != NULL);
        daemon_config_free(&cfg);
}

/* userns: on unless daemon.json names it (the host may still make the
 * built-in default fall back; sandboxd/userns.c), and whether it was named. */
static void test_userns_defaults_on_and_an_explicit_value_is_recorded(void **state) {
        daemon_config cfg;
        assert_null(parse_error("{}", &cfg));
        assert_true(cfg.userns);
        assert_false(cfg.userns_set);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"userns\": false}", &cfg));
        assert_false(cfg.userns);
        assert_true(cfg.userns_set);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"userns\": true}", &cfg));
        assert_true(cfg.userns);
        assert_true(cfg.userns_set);
        daemon_config_free(&cfg);
}

/* cgroupDriver: auto (the default), systemd or cgroupfs; anything else is
 * refused naming the key and the three choices. */
static void test_cgroup_driver_is_one_of_three(void **state) {
        static const char *const good[] = { "auto", "systemd", "cgroupfs" };
        for (size_t i = 0; i < 3; i++) {
                daemon_config cfg;
                char text[64];
                snprintf(text, sizeof(text), "{\"cgroupDriver\": \"%s\"}", good[i]);
                assert_null(parse_error(text, &cfg));
                assert_string_equal(cfg.cgroup_driver, good[i]);
                daemon_config_free(&cfg);
        }
        assert_rejected_naming("{\"cgroupDriver\": \"Systemd\"}", "cgroupDriver: must be \"auto\", \"systemd\" or \"cgroupfs\"");
        assert_rejected_naming("{\"cgroupDriver\": \"\"}", "cgroupDriver");
        assert_rejected_naming("{\"cgroupDriver\": 1}", "cgroupDriver");
}

/* warmPool: off by default, every member checked, an unknown one named. */
static void test_warm_pool_is_validated_and_off_by_default(void **state) {
        daemon_config cfg;
        unsigned size;
        const char *runtime, *policy;
        assert_null(parse_error("{}", &cfg));
        daemon_config_warm_pool(&cfg, &size, &runtime, &policy);
        assert_int_equal(size, 0);
        assert_string_equal(runtime, "host");
        assert_string_equal(policy, "allow-all");
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"warmPool\": {\"size\": 3, \"runtime\": \"bookworm\", \"policy\": \"custom\"}}",
                                &cfg));
        daemon_config_warm_pool(&cfg, &size, &runtime, &policy);
        assert_int_equal(size, 3);
        assert_string_equal(runtime, "bookworm");
        assert_string_equal(policy, "custom");
        cJSON *o = daemon_config_to_json(&cfg);
        cJSON *w = cJSON_GetObjectItemCaseSensitive(o, "warmPool");
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(w, "size")->valuedouble, 3);
        cJSON_Delete(o);
        daemon_config_free(&cfg);
        assert_rejected_naming("{\"warmPool\": {\"size\": 2, \"sise\": 1}}", "warmPool: unknown key 'sise'");
        assert_rejected_naming("{\"warmPool\": {\"size\": 65}}", "warmPool.size: must be an integer from 0 (off) to 64");
        assert_rejected_naming("{\"warmPool\": {\"size\": -1}}", "warmPool.size");
        assert_rejected_naming("{\"warmPool\": {\"size\": 1.5}}", "warmPool.size");
        assert_rejected_naming("{\"warmPool\": {\"size\": \"2\"}}", "warmPool.size");
        assert_rejected_naming("{\"warmPool\": {\"runtime\": \"../x\"}}", "warmPool.runtime: must be a runtime name");
        assert_rejected_naming("{\"warmPool\": {\"policy\": \"allow\"}}", "warmPool.policy: must be");
        assert_rejected_naming("{\"warmPool\": {\"size\": 1, \"size\": 2}}", "warmPool.size: key given more than once");
        assert_rejected_naming("{\"warmPool\": 2}", "warmPool: must be an object");
}

static void test_empty_object_keeps_defaults(void **state) {
        daemon_config cfg;
        assert_null(parse_error(" { } ", &cfg));
        assert_int_equal(cfg.max_vcpus, 8);
        assert_string_equal(cfg.socket_path, "/run/sandboxd/sandboxd.sock");
        daemon_config_free(&cfg);
}

static void test_every_key_is_parsed(void **state) {
        daemon_config cfg;
        const char *text =
                "{\"socket\": \"/tmp/x/s.sock\", \"stateDir\": \"/srv/state\", \"runDir\": \"/run/x\","
                " \"socketGroup\": \"wheel\", \"maxLineBytes\": 2048, \"defaultTimeoutMs\": 60000,"
                " \"maxTimeoutMs\": 120000, \"maxVcpus\": 16, \"pidsMax\": 100, \"stopGraceMs\": 0,"
                " \"commandLogBytes\": 65536, \"maxSourceBytes\": 1048576,"
                " \"networkPool\": \"10.99.0.0/20\", \"initPath\": \"/opt/sandbox-init\"}";
        assert_null(parse_error(text, &cfg));
        assert_string_equal(cfg.socket_path, "/tmp/x/s.sock");
        assert_string_equal(cfg.state_dir, "/srv/state");
        assert_string_equal(cfg.run_dir, "/run/x");
        assert_string_equal(cfg.socket_group, "wheel");
        assert_int_equal(cfg.max_line_bytes, 2048);
        assert_int_equal(cfg.default_timeout_ms, 60000);
        assert_int_equal(cfg.max_timeout_ms, 120000);
        assert_int_equal(cfg.max_vcpus, 16);
        assert_int_equal(cfg.pids_max, 100);
        assert_int_equal(cfg.stop_grace_ms, 0);
        assert_int_equal(cfg.command_log_bytes, 65536);
        assert_int_equal(cfg.max_source_bytes, 1048576);
        assert_string_equal(cfg.network_pool, "10.99.0.0/20");
        assert_string_equal(cfg.init_path, "/opt/sandbox-init");
        daemon_config_free(&cfg);
}

static void test_local_source_roots_default_empty_and_checked(void **state) {
        daemon_config cfg;
        daemon_config_defaults(&cfg);
        assert_null(cfg.local_source_roots);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"localSourceRoots\": [\"/srv/repos\", \"/var/cache/src/\"]}", &cfg));
        assert_string_equal(cfg.local_source_roots[0], "/srv/repos");
        assert_string_equal(cfg.local_source_roots[1], "/var/cache/src/");
        assert_null(cfg.local_source_roots[2]);
        daemon_config_free(&cfg);
        assert_rejected_naming("{\"localSourceRoots\": \"/srv\"}", "localSourceRoots: must be an array");
        assert_rejected_naming("{\"localSourceRoots\": [\"srv\"]}", "localSourceRoots[0]: must be an absolute");
        assert_rejected_naming("{\"localSourceRoots\": [\"/srv\", \"/\"]}", "localSourceRoots[1]");
        assert_rejected_naming("{\"localSourceRoots\": [\"/srv/../etc\"]}", "'..'");
        assert_rejected_naming("{\"localSourceRoots\": [7]}", "localSourceRoots[0]");
}

/* hostMountRoots: none by default; each absolute, not /, an existing
 * directory that is not a symlink, none inside another. */
static void test_host_mount_roots_default_empty_and_checked(void **state) {
        daemon_config cfg;
        daemon_config_defaults(&cfg);
        assert_null(cfg.host_mount_roots);
        daemon_config_free(&cfg);
        char dir[] = "/tmp/test-config-hmr-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char a[128], b[128], link[128], file[128], json[1024];
        snprintf(a, sizeof(a), "%s/a", dir);
        snprintf(b, sizeof(b), "%s/b", dir);
        snprintf(link, sizeof(link), "%s/link", dir);
        snprintf(file, sizeof(file), "%s/file", dir);
        assert_int_equal(mkdir(a, 0755), 0);
        assert_int_equal(mkdir(b, 0755), 0);
        assert_int_equal(symlink(a, link), 0);
        assert_int_equal(close(open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0644)), 0);
        snprintf(json, sizeof(json), "{\"hostMountRoots\": [\"%s\", \"%s/\"]}", a, b);
        assert_null(parse_error(json, &cfg));
        assert_string_equal(cfg.host_mount_roots[0], a);
        assert_null(cfg.host_mount_roots[2]);
        daemon_config_free(&cfg);
        assert_rejected_naming("{\"hostMountRoots\": [\"/\"]}", "hostMountRoots[0]");
        assert_rejected_naming("{\"hostMountRoots\": [\"/srv/../etc\"]}", "'..'");
        snprintf(json, sizeof(json), "{\"hostMountRoots\": [\"%s/missing\"]}", dir);
        assert_rejected_naming(json, "is not an existing directory");
        snprintf(json, sizeof(json), "{\"hostMountRoots\": [\"%s\"]}", link);
        assert_rejected_naming(json, "is not an existing directory");
        snprintf(json, sizeof(json), "{\"hostMountRoots\": [\"%s\"]}", file);
        assert_rejected_naming(json, "is not an existing directory");
        snprintf(json, sizeof(json), "{\"hostMountRoots\": [\"%s\", \"%s\"]}", a, dir);
        assert_rejected_naming(json, "hostMountRoots[0]: '");
        assert_rejected_naming(json, "lies under hostMountRoots[1]");
        snprintf(json, sizeof(json), "{\"hostMountRoots\": [\"%s\", \"%s\"]}", a, a);
        assert_rejected_naming(json, "lies under hostMountRoots[1]");
        unlink(link);
        unlink(file);
        rmdir(a);
        rmdir(b);
        rmdir(dir);
}

static void test_unknown_key_is_named_with_known_keys(void **state) {
        assert_rejected_naming("{\"maxVcpu\": 4}", "unknown key 'maxVcpu'");
        assert_rejected_naming("{\"maxVcpu\": 4}", "did you mean \"maxVcpus\"?");
        assert_rejected_naming("{\"logBudgetMib\": 4}", "did you mean \"logBudgetMiB\"?");
        assert_rejected_naming("{\"userNS\": true}", "did you mean \"userns\"?");
        /* Nothing close: the list of keys instead. */
        assert_rejected_naming("{\"frobnicate\": 4}", "unknown key 'frobnicate'; known keys: socket, stateDir");
        assert_rejected_naming("{\"frobnicate\": 4}", "usernsSize");
}

/* Every key with its value, defaults included, as --check-config prints. */
static void test_effective_configuration_names_every_key(void **state) {
        daemon_config cfg;
        assert_null(parse_error("{\"maxVcpus\": 12, \"localSourceRoots\": [\"/srv\"]}", &cfg));
        cJSON *o = daemon_config_to_json(&cfg);
        assert_non_null(o);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "maxVcpus")->valuedouble, 12);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "pidsMax")->valuedouble, 4096);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "maxSourceBytes")->valuedouble, 4294967296.0);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "networkPool")->valuestring, "10.201.0.0/16");
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "ipv6Pool")->valuestring, "fd5b:d0c5:6a1e::/64");
        assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "proxyUpstreamCA")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "userns")));
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(o, "cgroupDriver")->valuestring, "auto");
        assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "localSourceRoots"), 0)->valuestring,
                            "/srv");
        /* The printed object is itself a valid daemon.json that changes nothing
         * but the null keys (which a file cannot name). */
        cJSON *c;
        int n = 0;
        cJSON_ArrayForEach(c, o) {
                n++;
                if (cJSON_IsNull(c))
                        continue;
                cJSON *one = cJSON_CreateObject();
                cJSON_AddItemToObject(one, c->string, cJSON_Duplicate(c, true));
                char *text = cJSON_PrintUnformatted(one);
                daemon_config again;
                char *msg = parse_error(text, &again);
                if (msg)
                        fail_msg("%s does not load back: %s", text, msg);
                daemon_config_free(&again);
                free(text);
                cJSON_Delete(one);
        }
        assert_int_equal(n, 47);
        cJSON_Delete(o);
        daemon_config_free(&cfg);
}

/* A listener serves mutual TLS only: without the certificate, key or
 * client CA the file is refused naming the missing key; addresses are
 * numeric tcp://ADDR:PORT, each once. */
static void test_listen_needs_the_tls_files_and_numeric_addresses(void **state) {
        daemon_config cfg;
        char *msg = parse_error("{\"listen\": [\"tcp://0.0.0.0:7443\"], \"tlsCert\": \"/c\", \"tlsKey\": \"/k\"}", &cfg);
        assert_non_null(msg);
        assert_non_null(strstr(msg, "listen: needs tlsClientCA"));
        free(msg);
        daemon_config_free(&cfg);
        static const char *const bad[] = { "0.0.0.0:7443", "tcp://host.example:7443", "tcp://0.0.0.0", "tcp://0.0.0.0:0",
                                           "tcp://0.0.0.0:65536", "tcp://::1:7443", "tcp://[::1]7443", "tcp://1.2.3.4:07443",
                                           "tcp://1.2.3.4:+80" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                assert_int_equal(daemon_config_parse_listen(bad[i], NULL, NULL), -EINVAL);
        struct sockaddr_storage ss;
        unsigned len;
        assert_int_equal(daemon_config_parse_listen("tcp://[::1]:7443", &ss, &len), 0);
        assert_int_equal(ss.ss_family, AF_INET6);
        assert_int_equal(daemon_config_parse_listen("tcp://127.0.0.1:1", &ss, &len), 0);
        assert_int_equal(ss.ss_family, AF_INET);
        msg = parse_error("{\"listen\": [\"tcp://1.2.3.4:1\", \"tcp://1.2.3.4:1\"], \"tlsCert\": \"/c\", "
                          "\"tlsKey\": \"/k\", \"tlsClientCA\": \"/a\"}", &cfg);
        assert_non_null(msg);
        assert_non_null(strstr(msg, "given twice"));
        free(msg);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"listen\": [\"tcp://[::]:7443\"], \"tlsCert\": \"/c\", \"tlsKey\": \"/k\", "
                                "\"tlsClientCA\": \"/a\"}", &cfg));
        assert_string_equal(cfg.listen[0], "tcp://[::]:7443");
        assert_null(cfg.listen[1]);
        daemon_config_free(&cfg);
}

#define MAN_PAGE "docs/man/sandboxd.8"
#define MAN_BEGIN ".\\\" BEGIN CONFIG KEYS (generated from sandboxd/config.c; SANDBOXD_UPDATE_MAN=1 build/tests/test-config)\n"
#define MAN_END ".\\\" END CONFIG KEYS\n"

/* sandboxd(8) lists every key of the loader's table, with type, range,
 * default and what it changes: the section between the markers is exactly
 * daemon_config_man_table(). SANDBOXD_UPDATE_MAN=1 rewrites it. */
static void test_man_page_lists_every_key_as_the_table_says(void **state) {
        _cleanup_free_ char *page = NULL, *table = daemon_config_man_table();
        size_t len;
        assert_non_null(table);
        assert_non_null(strstr(table, ".B pidsMax\n(integer, 16 to 4194304; default 4096)\n"));
        assert_non_null(strstr(table, ".B localSourceRoots\n"));
        int r = core_read_file(MAN_PAGE, 1 << 20, &page, &len);
        if (r < 0)
                fail_msg("read %s (run from the source tree): %s", MAN_PAGE, strerror(-r));
        char *begin = strstr(page, MAN_BEGIN);
        char *end = begin ? strstr(begin, MAN_END) : NULL;
        if (!begin || !end)
                fail_msg("%s: no section between '%s' and '%s'", MAN_PAGE, MAN_BEGIN, MAN_END);
        begin += strlen(MAN_BEGIN);
        const char *update = getenv("SANDBOXD_UPDATE_MAN");
        if (update && streq(update, "1")) {
                FILE *f = fopen(MAN_PAGE, "we");
                assert_non_null(f);
                fwrite(page, 1, begin - page, f);
                fputs(table, f);
                fputs(end, f);
                assert_int_equal(fclose(f), 0);
                return;
        }
        if ((size_t) (end - begin) != strlen(table) || memcmp(begin, table, end - begin) != 0)
                fail_msg("%s: the CONFIG KEYS section differs from sandboxd/config.c's table; regenerate it "
                         "with SANDBOXD_UPDATE_MAN=1 build/tests/test-config. Expected:\n%s", MAN_PAGE, table);
}

static void test_wrong_type_is_named(void **state) {
        assert_rejected_naming("{\"maxVcpus\": \"4\"}", "maxVcpus: must be an integer from 1 to 256");
        assert_rejected_naming("{\"maxVcpus\": 2.5}", "maxVcpus: must be an integer");
        assert_rejected_naming("{\"stateDir\": 7}", "stateDir: must be a string");
        assert_rejected_naming("{\"socketGroup\": null}", "socketGroup: must be a string");
        assert_rejected_naming("{\"pidsMax\": true}", "pidsMax: must be an integer");
}

static void test_out_of_range_is_named_with_range(void **state) {
        assert_rejected_naming("{\"maxVcpus\": 0}", "maxVcpus: must be an integer from 1 to 256");
        assert_rejected_naming("{\"maxVcpus\": 257}", "maxVcpus: must be an integer from 1 to 256");
        assert_rejected_naming("{\"maxLineBytes\": 100}", "maxLineBytes: must be an integer from 1024 to 1073741824");
        assert_rejected_naming("{\"maxVcpus\": 1e400}", "maxVcpus");
        assert_rejected_naming("{\"defaultTimeoutMs\": 7200000, \"maxTimeoutMs\": 3600000}",
                               "defaultTimeoutMs: 7200000 exceeds maxTimeoutMs (3600000)");
        assert_rejected_naming("{\"stateDir\": \"relative/dir\"}", "stateDir: must be an absolute path");
        assert_rejected_naming("{\"networkPool\": \"10.201.0.5/16\"}", "networkPool: must be an IPv4 network");
        assert_rejected_naming("{\"networkPool\": \"10.201.0.0/31\"}", "networkPool");
        assert_rejected_naming("{\"networkPool\": \"fd00::/64\"}", "networkPool");
        /* ipv6Pool: unique local only (RFC 4193), canonical, a prefix from 8 to 120, or "off". */
        assert_rejected_naming("{\"ipv6Pool\": \"2001:db8::/64\"}", "ipv6Pool: must be \"off\" or an IPv6 unique local");
        assert_rejected_naming("{\"ipv6Pool\": \"fd00::1/64\"}", "ipv6Pool");
        assert_rejected_naming("{\"ipv6Pool\": \"fd00::/124\"}", "ipv6Pool");
        assert_rejected_naming("{\"ipv6Pool\": \"10.0.0.0/8\"}", "ipv6Pool");
        assert_rejected_naming("{\"ipv6Pool\": \"Off\"}", "ipv6Pool");
        {
                daemon_config c6;
                assert_null(parse_error("{\"ipv6Pool\": \"off\"}", &c6));
                assert_string_equal(c6.ipv6_pool, "off");
                daemon_config_free(&c6);
                assert_null(parse_error("{\"ipv6Pool\": \"fd12:3456::/48\"}", &c6));
                assert_string_equal(c6.ipv6_pool, "fd12:3456::/48");
                daemon_config_free(&c6);
        }
}

/* A disk image below its minimum would only fail at each create: refused at load. */
static void test_disk_mib_below_the_image_minimum_is_refused(void **state) {
        daemon_config cfg;
        assert_rejected_naming("{\"diskMiB\": 1}", "diskMiB: must be 0 (unbounded) or from 16 to");
        assert_null(parse_error("{\"diskMiB\": 0}", &cfg));
        assert_int_equal(cfg.disk_mib, 0);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"diskMiB\": 16}", &cfg));
        assert_int_equal(cfg.disk_mib, 16);
        daemon_config_free(&cfg);
}

/* storage.pool (libcore/pool.h): one of sizeMiB (at least the pool
 * minimum) or device, nothing else, each refusal naming the field. */
static void test_storage_pool_is_checked_at_load(void **state) {
        daemon_config cfg;
        assert_rejected_naming("{\"storage\": []}", "storage: must be an object");
        assert_rejected_naming("{\"storage\": {\"pol\": {}}}", "storage: unknown key 'pol'; known keys: pool");
        assert_rejected_naming("{\"storage\": {\"pool\": {}}}", "storage.pool: must be {\"sizeMiB\": N}");
        assert_rejected_naming("{\"storage\": {\"pool\": {\"sizeMiB\": 100}}}",
                               "storage.pool.sizeMiB: must be an integer from 256 to 16777216");
        assert_rejected_naming("{\"storage\": {\"pool\": {\"sizeMiB\": 512, \"device\": \"/dev/vdb\"}}}",
                               "storage.pool: must be {\"sizeMiB\": N}");
        assert_rejected_naming("{\"storage\": {\"pool\": {\"device\": \"vdb\"}}}",
                               "storage.pool.device: must be the absolute path of a block device");
        assert_rejected_naming("{\"storage\": {\"pool\": {\"size\": 512}}}",
                               "storage.pool: unknown key 'size'; known keys: sizeMiB, device");
        assert_null(parse_error("{\"storage\": {\"pool\": {\"sizeMiB\": 1024}}}", &cfg));
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg.storage, "pool"),
                                                          "sizeMiB")->valuedouble, 1024);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"storage\": {}}", &cfg));
        daemon_config_free(&cfg);
}

/* kubernetes (docs/KUBERNETES.md "The pod model" step 4): CIDRs and
 * addresses checked at load, every unknown member refused by name. */
static void test_kubernetes_ranges_are_checked_at_load(void **state) {
        daemon_config cfg;
        assert_rejected_naming("{\"kubernetes\": []}", "kubernetes: must be an object");
        assert_rejected_naming("{\"kubernetes\": {\"podCidrs\": []}}",
                               "kubernetes: unknown key 'podCidrs'; known keys: podCIDRs, serviceCIDRs, clusterDNS");
        assert_rejected_naming("{\"kubernetes\": {\"podCIDRs\": \"10.0.0.0/8\"}}",
                               "kubernetes.podCIDRs: must be an array of at most 64 CIDRs");
        assert_rejected_naming("{\"kubernetes\": {\"serviceCIDRs\": [\"10.96.0.0/12\", \"10.96.0.1/12\"]}}",
                               "kubernetes.serviceCIDRs[1]: must be a CIDR");
        assert_rejected_naming("{\"kubernetes\": {\"clusterDNS\": [\"dns.local\"]}}",
                               "kubernetes.clusterDNS[0]: must be an IPv4 or IPv6 address");
        assert_null(parse_error("{\"kubernetes\": {\"podCIDRs\": [\"10.244.0.0/16\", \"fd00:10::/56\"], "
                                "\"serviceCIDRs\": [\"10.96.0.0/12\"], \"clusterDNS\": [\"10.96.0.10\"]}}", &cfg));
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(cfg.kubernetes, "podCIDRs")), 2);
        daemon_config_free(&cfg);
}

/* The pool must be whole 65536-id ranges below the invalid id 2^32-1,
 * else every user-namespace sandbox would be refused at run time. */
static void test_userns_pool_shape_is_checked_at_load(void **state) {
        daemon_config cfg;
        assert_rejected_naming("{\"usernsSize\": 100000}", "usernsSize: 100000 is not a multiple of 65536 (try 65536)");
        assert_rejected_naming("{\"usernsBase\": 4100000000}",
                               "usernsBase + usernsSize: 4100000000 + 268435456 ends beyond host id 4294967294");
        assert_null(parse_error("{\"usernsBase\": 4000000000, \"usernsSize\": 65536}", &cfg));
        assert_int_equal(cfg.userns_base, 4000000000u);
        daemon_config_free(&cfg);
}

static void test_socket_path_must_fit_sockaddr(void **state) {
        char text[300];
        char longpath[200];
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[0] = '/';
        longpath[sizeof(longpath) - 1] = '\0';
        snprintf(text, sizeof(text), "{\"socket\": \"%s\"}", longpath);
        assert_rejected_naming(text, "socket: must be an absolute path shorter than 108 bytes");
}

static void test_top_level_must_be_an_object(void **state) {
        assert_rejected_naming("[1, 2]", "the top level must be an object");
        assert_rejected_naming("\"socket\"", "the top level must be an object");
        assert_rejected_naming("{\"maxVcpus\": 4", "not valid JSON");
        assert_rejected_naming("{} {}", "not valid JSON");
        /* A NUL would end the key or value early: "maxVcpus\u0000x" is not maxVcpus. */
        assert_rejected_naming("{\"maxVcpus\\u0000x\": 4}", "\\u0000");
        assert_rejected_naming("{\"localSourceRoots\": [\"/srv\\u0000/etc\"]}", "\\u0000");
        daemon_config cfg;
        assert_null(parse_error("{\"stateDir\": \"/srv/a\\\\u0000\"}", &cfg));  /* an escaped backslash, then text */
        assert_string_equal(cfg.state_dir, "/srv/a\\u0000");
        daemon_config_free(&cfg);
}

static void test_bad_file_leaves_config_untouched(void **state) {
        daemon_config cfg;
        daemon_config_defaults(&cfg);
        sb_error *err = NULL;
        assert_int_equal(daemon_config_parse(&cfg, "{\"maxVcpus\": 32, \"pidsMax\": -1}", &err), -EINVAL);
        assert_string_equal(err->field, "pidsMax");
        assert_int_equal(cfg.max_vcpus, 8);
        sb_error_free(err);
        daemon_config_free(&cfg);
}

/* logLevel takes syslog's level names; metricsListen only loopback
 * addresses (a metrics endpoint any host could reach would publish every
 * sandbox's usage). */
static void test_log_level_and_metrics_listen_are_checked(void **state) {
        daemon_config cfg;
        assert_null(parse_error("{\"logLevel\": \"debug\", \"metricsListen\": \"127.0.0.1:9464\"}", &cfg));
        assert_int_equal(daemon_config_log_level(&cfg), LOG_DEBUG);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"metricsListen\": \"[::1]:1\"}", &cfg));
        assert_int_equal(daemon_config_log_level(&cfg), -1);
        daemon_config_free(&cfg);
        assert_rejected_naming("{\"logLevel\": \"verbose\"}", "logLevel: must be one of debug, info, notice, warning, error");
        const char *bad[] = { "0.0.0.0:9464", "10.0.0.1:80", "[::]:9464", "[::ffff:127.0.0.1]:80", "127.0.0.1",
                              "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:+80", "localhost:80", ":80", "[::1:80" };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char text[128];
                snprintf(text, sizeof(text), "{\"metricsListen\": \"%s\"}", bad[i]);
                assert_rejected_naming(text, "metricsListen: must be a loopback address and port");
        }
}

/* A reload moves the live keys only and names the others it kept. */
static void test_apply_live_moves_live_keys_and_names_the_rest(void **state) {
        daemon_config cur, next;
        assert_null(parse_error("{\"maxVcpus\": 2}", &cur));
        assert_null(parse_error("{\"maxVcpus\": 4, \"pidsMax\": 100, \"logLevel\": \"warning\", "
                                "\"maxLineBytes\": 2048, \"stateDir\": \"/elsewhere\"}", &next));
        char *changed = NULL, *kept = NULL;
        daemon_config_apply_live(&cur, &next, &changed, &kept);
        assert_int_equal(cur.max_vcpus, 4);
        assert_int_equal(cur.pids_max, 100);
        assert_int_equal(daemon_config_log_level(&cur), LOG_WARNING);
        assert_int_equal(cur.max_line_bytes, 16 << 20);
        assert_string_equal(cur.state_dir, "/var/lib/sandboxd");
        assert_string_equal(changed, "maxVcpus, pidsMax, logLevel");
        assert_string_equal(kept, "stateDir, maxLineBytes");
        free(changed);
        free(kept);
        daemon_config_free(&next);
        /* The same file again changes nothing. */
        assert_null(parse_error("{\"maxVcpus\": 4, \"pidsMax\": 100, \"logLevel\": \"warning\"}", &next));
        daemon_config_apply_live(&cur, &next, &changed, &kept);
        assert_null(changed);
        assert_null(kept);
        daemon_config_free(&next);
        daemon_config_free(&cur);
}

/* tenants (sandboxd/tenant.c): every key known and typed, unknown ones
 * refused by name with the keys that exist; the value is shown as given
 * and a reload replaces it (it is read by the event loop only). */
static void test_tenants_are_checked_shown_and_reloaded(void **state) {
        daemon_config cfg;
        const char *good = "{\"tenants\": {\"localAdmins\": [1000], \"defaults\": {\"maxSandboxes\": 3, "
                           "\"maxVcpus\": null, \"networkModes\": [\"deny-all\"]}, \"names\": {\"uid:1001\": "
                           "{\"allowNoUserns\": true, \"allowLocalSources\": false, \"maxDiskMiB\": 4096, "
                           "\"allowRuntimeImport\": true, \"allowSnapshotImport\": false, "
                           "\"allowSnapshotExport\": true, \"maxRuntimes\": 2}, "
                           "\"tag:team=a\": {\"maxSnapshots\": 0}}}}";
        assert_null(parse_error(good, &cfg));
        cJSON *o = daemon_config_to_json(&cfg);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tenants");
        assert_true(cJSON_IsObject(t));
        assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(t, "localAdmins"), 0)->valuedouble, 1000);
        cJSON_Delete(o);
        daemon_config next;
        assert_null(parse_error("{\"tenants\": {}}", &next));
        char *changed = NULL, *kept = NULL;
        daemon_config_apply_live(&cfg, &next, &changed, &kept);
        assert_non_null(changed);
        assert_non_null(strstr(changed, "tenants"));
        assert_null(kept);
        assert_null(cJSON_GetObjectItemCaseSensitive(cfg.tenants, "localAdmins"));
        free(changed);
        daemon_config_free(&next);
        daemon_config_free(&cfg);

        assert_rejected_naming("{\"tenants\": []}", "tenants: must be an object");
        assert_rejected_naming("{\"tenants\": {\"admins\": [1]}}",
                               "tenants: unknown key 'admins'; known keys: localAdmins, gateways, defaults, names");
        assert_rejected_naming("{\"tenants\": {\"defaults\": {\"maxCpus\": 1}}}",
                               "tenants.defaults: unknown key 'maxCpus'; known keys: maxSandboxes");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"uid:5\": {\"maxSandboxes\": -1}}}}",
                               "tenants.names.uid:5.maxSandboxes: must be an integer from 0");
        assert_rejected_naming("{\"tenants\": {\"defaults\": {\"networkModes\": [\"open\"]}}}",
                               "tenants.defaults.networkModes: 'open' is not a mode");
        assert_rejected_naming("{\"tenants\": {\"defaults\": {\"allowNoUserns\": 1}}}",
                               "tenants.defaults.allowNoUserns: must be true or false");
        assert_rejected_naming("{\"tenants\": {\"defaults\": {\"allowRuntimeImport\": \"yes\"}}}",
                               "tenants.defaults.allowRuntimeImport: must be true or false");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"ci\": {\"allowSnapshotExport\": 0}}}}",
                               "tenants.names.ci.allowSnapshotExport: must be true or false");
        assert_rejected_naming("{\"tenants\": {\"defaults\": {\"allowImports\": true}}}",
                               "allowRuntimeImport, allowSnapshotImport, allowSnapshotExport");
        assert_rejected_naming("{\"tenants\": {\"localAdmins\": [0]}}", "tenants.localAdmins: each entry must be a uid");
        assert_rejected_naming("{\"tenants\": {\"localAdmins\": [\"alice\"]}}", "tenants.localAdmins");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"x\": 3}}}", "tenants.names.x: must be an object");
        /* Gateways (docs/SECURITY.md §4.3): never root, never also admin. */
        assert_null(parse_error("{\"tenants\": {\"gateways\": [2100], \"localAdmins\": [1000]}}", &cfg));
        daemon_config_free(&cfg);
        assert_rejected_naming("{\"tenants\": {\"gateways\": [0]}}", "tenants.gateways: each entry must be a uid from 1");
        assert_rejected_naming("{\"tenants\": {\"gateways\": \"2100\"}}", "tenants.gateways: must be an array of uids");
        assert_rejected_naming("{\"tenants\": {\"localAdmins\": [2100], \"gateways\": [2100]}}",
                               "tenants.gateways: uid 2100 is also in localAdmins");
        assert_rejected_naming("{\"tenants\": {\"defaults\": {\"maxSandboxes\": 1, \"maxSandboxes\": 2}}}",
                               "key given more than once");
}

/* tenants.names.NAME.localSourceRoots (issue #25): checked like the
 * top-level key and as existing directories, refused in tenants.defaults
 * (one list would be every remote tenant's), no directory two tenants';
 * tenant_roots gives each tenant its own, admin and a local tenant without
 * its own the top-level ones, and refuses a remote tenant without, naming
 * the key to set. */
static void test_tenant_local_source_roots_are_each_tenants_own(void **state) {
        char base[] = "/tmp/test-config-roots-XXXXXX", a[64], b[64], ab[80], file[80], link[80], text[1024];
        assert_non_null(mkdtemp(base));
        snprintf(a, sizeof(a), "%s/a", base);
        snprintf(b, sizeof(b), "%s/b", base);
        snprintf(ab, sizeof(ab), "%s/a/sub", base);
        snprintf(file, sizeof(file), "%s/f", base);
        snprintf(link, sizeof(link), "%s/l", base);
        assert_int_equal(mkdir(a, 0700), 0);
        assert_int_equal(mkdir(b, 0700), 0);
        assert_int_equal(mkdir(ab, 0700), 0);
        FILE *f = fopen(file, "we");
        assert_non_null(f);
        fclose(f);
        assert_int_equal(symlink(a, link), 0);

        daemon_config cfg;
        snprintf(text, sizeof(text), "{\"localSourceRoots\": [\"/srv\"], \"tenants\": {\"names\": "
                 "{\"alpha\": {\"allowSnapshotExport\": true, \"localSourceRoots\": [\"%s\"]}, "
                 "\"uid:1000\": {\"localSourceRoots\": [\"%s/\"]}}}}", a, b);
        assert_null(parse_error(text, &cfg));
        char **roots = NULL;
        sb_error *err = NULL;
        tenant alpha = { .remote = true }, beta = { .remote = true }, local = { 0 }, other = { 0 }, admin = { .admin = true };
        snprintf(alpha.name, sizeof(alpha.name), "alpha");
        snprintf(beta.name, sizeof(beta.name), "beta");
        snprintf(local.name, sizeof(local.name), "uid:1000");
        snprintf(other.name, sizeof(other.name), "uid:1001");
        assert_int_equal(tenant_roots(&cfg, &alpha, "path", &roots, &err), 0);
        assert_string_equal(roots[0], a);
        assert_null(roots[1]);
        tenant_roots_free(roots);
        assert_int_equal(tenant_roots(&cfg, &local, "path", &roots, &err), 0);
        assert_non_null(strstr(roots[0], "/b"));
        assert_null(roots[1]);
        tenant_roots_free(roots);
        assert_int_equal(tenant_roots(&cfg, &other, "path", &roots, &err), 0);
        assert_string_equal(roots[0], "/srv");
        tenant_roots_free(roots);
        assert_int_equal(tenant_roots(&cfg, &admin, "path", &roots, &err), 0);
        assert_string_equal(roots[0], "/srv");
        assert_null(roots[1]);
        tenant_roots_free(roots);
        roots = NULL;
        assert_int_equal(tenant_roots(&cfg, &beta, "path", &roots, &err), -EACCES);
        assert_null(roots);
        assert_non_null(err);
        assert_non_null(strstr(err->message, "tenants.names.beta.localSourceRoots"));
        assert_string_equal(err->reason, "permission_denied");
        sb_error_free(err);
        daemon_config_free(&cfg);

        snprintf(text, sizeof(text), "{\"tenants\": {\"defaults\": {\"localSourceRoots\": [\"%s\"]}}}", a);
        assert_rejected_naming(text, "tenants.defaults.localSourceRoots: not allowed");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": \"/tmp\"}}}}",
                               "tenants.names.x.localSourceRoots: must be an array");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"tmp\"]}}}}",
                               "tenants.names.x.localSourceRoots[0]: must be an absolute");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"/\"]}}}}",
                               "tenants.names.x.localSourceRoots[0]");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"/tmp/../etc\"]}}}}",
                               "'..'");
        assert_rejected_naming("{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [7]}}}}",
                               "tenants.names.x.localSourceRoots[0]");
        snprintf(text, sizeof(text), "{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"%s/none\"]}}}}",
                 base);
        assert_rejected_naming(text, "is not an existing directory");
        snprintf(text, sizeof(text), "{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"%s\"]}}}}", file);
        assert_rejected_naming(text, "is not a directory");
        snprintf(text, sizeof(text), "{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"%s\"]}}}}", link);
        assert_rejected_naming(text, "has a symlink");
        /* No directory is two tenants': the same, or one beneath another. */
        snprintf(text, sizeof(text), "{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"%s\"]}, "
                 "\"y\": {\"localSourceRoots\": [\"%s\", \"%s\"]}}}}", a, b, ab);
        assert_rejected_naming(text, "tenants.names.y.localSourceRoots: '");
        snprintf(text, sizeof(text), "{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"%s\"]}, "
                 "\"y\": {\"localSourceRoots\": [\"%s//\"]}}}}", a, a);
        assert_rejected_naming(text, "overlaps tenants.names.x.localSourceRoots");
        snprintf(text, sizeof(text), "{\"tenants\": {\"names\": {\"x\": {\"localSourceRoots\": [\"%s\"]}, "
                 "\"y\": {\"localSourceRoots\": [\"%s\"]}}}}", ab, b);
        assert_null(parse_error(text, &cfg));
        daemon_config_free(&cfg);

        assert_int_equal(unlink(link), 0);
        assert_int_equal(unlink(file), 0);
        assert_int_equal(rmdir(ab), 0);
        assert_int_equal(rmdir(a), 0);
        assert_int_equal(rmdir(b), 0);
        assert_int_equal(rmdir(base), 0);
}

/* defaultNetworkPolicy: allow-all unless set; what networkPolicy takes,
 * checked by the policy parser with the key in the error's path; header
 * values never printed; a reload replaces it. */
static void test_default_network_policy_is_checked_shown_and_reloaded(void **state) {
        daemon_config cfg;
        assert_null(parse_error("{}", &cfg));
        assert_null(cfg.default_network_policy);
        cJSON *shown = daemon_config_default_policy_json(&cfg);
        assert_string_equal(cJSON_GetStringValue(shown), "allow-all");
        cJSON_Delete(shown);
        daemon_config_free(&cfg);
        assert_null(parse_error("{\"defaultNetworkPolicy\": \"deny-all\"}", &cfg));
        assert_string_equal(cJSON_GetStringValue(cfg.default_network_policy), "deny-all");
        daemon_config_free(&cfg);
        assert_rejected_naming("{\"defaultNetworkPolicy\": \"deny\"}", "defaultNetworkPolicy: unknown policy \"deny\"");
        assert_rejected_naming("{\"defaultNetworkPolicy\": null}", "defaultNetworkPolicy: must be \"allow-all\"");
        assert_rejected_naming("{\"defaultNetworkPolicy\": 1}", "defaultNetworkPolicy: must be \"allow-all\"");
        assert_rejected_naming("{\"defaultNetworkPolicy\": {\"allow\": [\"*.com\"]}}", "defaultNetworkPolicy.allow[0]");
        assert_rejected_naming("{\"defaultNetworkPolicy\": {\"alow\": []}}", "defaultNetworkPolicy");
        /* The field of the error is the key's path too. */
        sb_error *err = NULL;
        daemon_config_defaults(&cfg);
        assert_int_equal(daemon_config_parse(&cfg, "{\"defaultNetworkPolicy\": {\"allow\": [\"*.com\"]}}", &err), -EINVAL);
        assert_string_equal(err->field, "defaultNetworkPolicy.allow[0]");
        sb_error_free(err);
        daemon_config_free(&cfg);
        /* A rule's header value is a credential: --check-config's object
         * and daemon.info show it redacted. */
        const char *secret = "{\"defaultNetworkPolicy\": {\"allow\": {\"api.example.com\": "
                             "[{\"transform\": [{\"headers\": {\"authorization\": \"Bearer sk-1\"}}]}]}}}";
        assert_null(parse_error(secret, &cfg));
        cJSON *o = daemon_config_to_json(&cfg);
        char *text = cJSON_PrintUnformatted(o);
        assert_null(strstr(text, "sk-1"));
        assert_non_null(strstr(text, "<redacted>"));
        free(text);
        cJSON_Delete(o);
        /* Live: a reload moves a new default in. */
        daemon_config next;
        assert_null(parse_error("{\"defaultNetworkPolicy\": \"deny-all\"}", &next));
        char *changed = NULL, *kept = NULL;
        daemon_config_apply_live(&cfg, &next, &changed, &kept);
        assert_string_equal(changed, "defaultNetworkPolicy");
        assert_null(kept);
        assert_string_equal(cJSON_GetStringValue(cfg.default_network_policy), "deny-all");
        free(changed);
        daemon_config_free(&next);
        daemon_config_free(&cfg);
}

static void test_duplicate_key_is_rejected(void **state) {
        assert_rejected_naming("{\"maxVcpus\": 4, \"maxVcpus\": 200}", "maxVcpus: key given more than once");
}

static void test_load_missing_file(void **state) {
        daemon_config cfg;
        daemon_config_defaults(&cfg);
        sb_error *err = NULL;
        assert_int_equal(daemon_config_load(&cfg, "/nonexistent/daemon.json", false, &err), 0);
        assert_null(err);
        assert_int_equal(daemon_config_load(&cfg, "/nonexistent/daemon.json", true, &err), -ENOENT);
        assert_non_null(err);
        assert_non_null(strstr(err->message, "/nonexistent/daemon.json"));
        sb_error_free(err);
        daemon_config_free(&cfg);
}

static void test_load_file_names_path_and_key(void **state) {
        char dir[] = "/tmp/test-config-XXXXXX";
        assert_non_null(mkdtemp(dir));
        char path[64];
        snprintf(path, sizeof(path), "%s/daemon.json", dir);
        const char *good = "{\"maxVcpus\": 12}\n";
        assert_int_equal(core_write_file_atomic(path, good, strlen(good), 0644), 0);
        daemon_config cfg;
        daemon_config_defaults(&cfg);
        sb_error *err = NULL;
        assert_int_equal(daemon_config_load(&cfg, path, true, &err), 0);
        assert_int_equal(cfg.max_vcpus, 12);
        const char *bad = "{\"maxVcpus\": 999}";
        assert_int_equal(core_write_file_atomic(path, bad, strlen(bad), 0644), 0);
        assert_int_equal(daemon_config_load(&cfg, path, true, &err), -EINVAL);
        assert_non_null(strstr(err->message, path));
        assert_non_null(strstr(err->message, "maxVcpus"));
        assert_int_equal(cfg.max_vcpus, 12);
        sb_error_free(err);
        daemon_config_free(&cfg);
        assert_int_equal(core_rm_rf(dir), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defaults_match_the_design),
                cmocka_unit_test(test_userns_defaults_on_and_an_explicit_value_is_recorded),
                cmocka_unit_test(test_empty_object_keeps_defaults),
                cmocka_unit_test(test_warm_pool_is_validated_and_off_by_default),
                cmocka_unit_test(test_cgroup_driver_is_one_of_three),
                cmocka_unit_test(test_every_key_is_parsed),
                cmocka_unit_test(test_local_source_roots_default_empty_and_checked),
                cmocka_unit_test(test_unknown_key_is_named_with_known_keys),
                cmocka_unit_test(test_effective_configuration_names_every_key),
                cmocka_unit_test(test_listen_needs_the_tls_files_and_numeric_addresses),
                cmocka_unit_test(test_log_level_and_metrics_listen_are_checked),
                cmocka_unit_test(test_host_mount_roots_default_empty_and_checked),
                cmocka_unit_test(test_apply_live_moves_live_keys_and_names_the_rest),
                cmocka_unit_test(test_man_page_lists_every_key_as_the_table_says),
                cmocka_unit_test(test_wrong_type_is_named),
                cmocka_unit_test(test_out_of_range_is_named_with_range),
                cmocka_unit_test(test_disk_mib_below_the_image_minimum_is_refused),
                cmocka_unit_test(test_storage_pool_is_checked_at_load),
                cmocka_unit_test(test_userns_pool_shape_is_checked_at_load),
                cmocka_unit_test(test_socket_path_must_fit_sockaddr),
                cmocka_unit_test(test_top_level_must_be_an_object),
                cmocka_unit_test(test_bad_file_leaves_config_untouched),
                cmocka_unit_test(test_duplicate_key_is_rejected),
                cmocka_unit_test(test_default_network_policy_is_checked_shown_and_reloaded),
                cmocka_unit_test(test_tenants_are_checked_shown_and_reloaded),
                cmocka_unit_test(test_tenant_local_source_roots_are_each_tenants_own),
                cmocka_unit_test(test_kubernetes_ranges_are_checked_at_load),
                cmocka_unit_test(test_load_missing_file),
                cmocka_unit_test(test_load_file_names_path_and_key),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
