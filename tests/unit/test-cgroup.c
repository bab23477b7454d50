/* Unit tests for libcore/cgroup.c on the real cgroup hierarchies (needs
 * root). The test process first moves itself into a private cgroup
 * ("sbx-unit-<pid>") under its own cgroup in every hierarchy sessions use,
 * so sandboxd's parent cgroups, and remove_all_sessions(), only ever see
 * this test's sessions, never those of a sandboxd running on the machine.
 * Sessions belong to instance KEY_A unless a test switches to KEY_B (a
 * second daemon sharing the same cgroup). Teardown moves back and removes
 * everything it made. */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>
#include "libcore/cgroup.h"
#include "libcore/util.h"

/* A hierarchy the library may use, with our original path in it. */
typedef struct moved {
        char mount[128];
        char orig[512];
        char priv[640];
        char ctl[64]; /* v1 controllers of the hierarchy, "" for v2 */
} moved;

static moved hier[8];
static size_t nhier;

#define KEY_A "unit-a"
#define KEY_B "unit-b"

static bool wanted(const char *ctls) {
        static const char *const used[] = { "pids", "memory", "cpu", "freezer" };
        for (size_t i = 0; i < ELEMENTSOF(used); i++) {
                _cleanup_free_ char *copy = strdup(ctls);
                char *save = NULL;
                for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
                        if (streq(t, used[i]))
                                return true;
        }
        return false;
}

static void rmdir_tree(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return;
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_type != DT_DIR || streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                char sub[1024];
                snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
                rmdir_tree(sub);
        }
        closedir(d);
        rmdir(dir);
}

/* The mount point of each hierarchy is found the way this project's test
 * machines lay it out (/sys/fs/cgroup/<controllers>, cgroup2 at
 * /sys/fs/cgroup/unified or /sys/fs/cgroup). */
static int enter_private_cgroup(void **state) {
        _cleanup_free_ char *data = NULL;
        char pid[24];
        snprintf(pid, sizeof(pid), "%d", (int) getpid());
        if (core_read_file("/proc/self/cgroup", 1 << 16, &data, NULL) < 0)
                return -1;
        char *save = NULL;
        for (char *line = strtok_r(data, "\n", &save); line && nhier < ELEMENTSOF(hier);
             line = strtok_r(NULL, "\n", &save)) {
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2)
                        continue;
                *c2 = '\0';
                moved *m = &hier[nhier];
                struct stat st;
                if (c1[1] == '\0' && strncmp(line, "0:", 2) == 0)
                        snprintf(m->mount, sizeof(m->mount), "%s",
                                 stat("/sys/fs/cgroup/unified", &st) == 0 ? "/sys/fs/cgroup/unified"
                                                                         : "/sys/fs/cgroup");
                else if (wanted(c1 + 1))
                        snprintf(m->mount, sizeof(m->mount), "/sys/fs/cgroup/%s", c1 + 1);
                else
                        continue;
                const char *own = streq(c2 + 1, "/") ? "" : c2 + 1;
                char orig[sizeof(m->orig)];
                snprintf(orig, sizeof(orig), "%s%s", m->mount, own);
                snprintf(m->orig, sizeof(m->orig), "%s", orig);
                snprintf(m->priv, sizeof(m->priv), "%s/sbx-unit-%s", orig, pid);
                if (mkdir(m->priv, 0755) < 0 && errno != EEXIST)
                        return -1;
                char procs[700];
                snprintf(procs, sizeof(procs), "%s/cgroup.procs", m->priv);
                if (core_write_string(procs, pid) < 0)
                        return -1;
                snprintf(m->ctl, sizeof(m->ctl), "%s", c1 + 1);
                nhier++;
        }
        sb_error *err = NULL;
        int r = core_cgroup_init(KEY_A, &err);
        sb_error_free(err);
        return r;
}

static int leave_private_cgroup(void **state) {
        char pid[24];
        snprintf(pid, sizeof(pid), "%d", (int) getpid());
        (void) core_cgroup_remove_all_sessions();
        for (size_t i = 0; i < nhier; i++) {
                char procs[600];
                snprintf(procs, sizeof(procs), "%s/cgroup.procs", hier[i].orig);
                (void) core_write_string(procs, pid);
                rmdir_tree(hier[i].priv);
        }
        nhier = 0;
        return 0;
}

static char *read_in(const char *dir, const char *name, const char *file) {
        char path[1024];
        char *data = NULL;
        snprintf(path, sizeof(path), "%s/%s/%s", dir, name, file);
        if (core_read_file(path, 1 << 16, &data, NULL) < 0)
                return NULL;
        return data;
}

/* Reads <file> of session `name` (instance KEY_A) in the v1 hierarchy of
 * controller `ctl`; NULL when that controller is not on v1 here. */
static char *v1_read(const char *ctl, const char *name, const char *file) {
        for (size_t i = 0; i < nhier; i++)
                if (streq(hier[i].ctl, ctl)) {
                        char dir[700];
                        snprintf(dir, sizeof(dir), "%s/sandboxd-sessions-" KEY_A, hier[i].priv);
                        return read_in(dir, name, file);
                }
        return NULL;
}

/* Does session `name` of instance `key` exist in any hierarchy? */
static bool exists_in(const char *key, const char *name) {
        for (size_t i = 0; i < nhier; i++) {
                char p[1024];
                struct stat st;
                snprintf(p, sizeof(p), "%s/sandboxd-sessions-%s/%s", hier[i].priv, key, name);
                if (stat(p, &st) == 0)
                        return true;
        }
        return false;
}

static bool exists_anywhere(const char *name) {
        return exists_in(KEY_A, name) || exists_in(KEY_B, name);
}

static bool parent_exists(const char *key) {
        for (size_t i = 0; i < nhier; i++) {
                char p[1024];
                struct stat st;
                snprintf(p, sizeof(p), "%s/sandboxd-sessions-%s", hier[i].priv, key);
                if (stat(p, &st) == 0)
                        return true;
        }
        return false;
}

static bool alive(pid_t pid) {
        return waitpid(pid, NULL, WNOHANG) == 0;
}

/* A child that blocks until its pipe closes; returns its pid and the write
 * end (closing it lets the child exit). */
static pid_t spawn_sleeper(int *ret_wr) {
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char c;
                close(p[1]);
                if (read(p[0], &c, 1) < 0)
                        _exit(1);
                _exit(0);
        }
        close(p[0]);
        *ret_wr = p[1];
        return pid;
}

/* The OOM kill count: parsed from both files' formats, and counted when the
 * kernel kills a process of the session at its memory limit (and not when
 * we SIGKILL one ourselves). */
static void test_oom_kill_count_parses_both_formats(void **state) {
        uint64_t n = 99;
        assert_int_equal(core_cgroup_parse_oom_kills("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n", &n),
                         0);
        assert_int_equal(n, 2);
        assert_int_equal(core_cgroup_parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n", &n), 0);
        assert_int_equal(n, 7);
        assert_int_equal(core_cgroup_parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n", &n), -ENODATA);
        assert_int_equal(core_cgroup_parse_oom_kills("oom_kill x\n", &n), -EBADMSG);
        assert_int_equal(core_cgroup_parse_oom_kills("", &n), -ENODATA);
}

static void test_oom_kill_at_the_memory_limit_is_counted_and_sigkill_is_not(void **state) {
        core_cgroup_limits lim = { .pids_max = 10, .memory_max = 32u << 20 };
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        uint64_t before = 0, after = 0;
        int wr, status;
        assert_int_equal(core_cgroup_create("unit-oom", &lim, &cg, NULL), 0);
        if (core_cgroup_oom_kills(cg, &before) == -ENOENT) {
                assert_int_equal(core_cgroup_destroy(cg), 0);
                skip(); /* no memory controller for sessions here */
        }
        assert_int_equal(before, 0);
        /* Our own SIGKILL: not an OOM kill. */
        pid_t pid = spawn_sleeper(&wr);
        assert_int_equal(core_cgroup_attach(cg, pid, NULL), 0);
        assert_int_equal(kill(pid, SIGKILL), 0);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        close(wr);
        assert_int_equal(core_cgroup_oom_kills(cg, &after), 0);
        assert_int_equal(after, 0);
        /* A child that touches more than the limit, once it is inside. */
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char c;
                close(p[1]);
                if (read(p[0], &c, 1) != 1)
                        _exit(1);
                for (int i = 0; i < 64; i++) {
                        char *b = malloc(4u << 20);
                        if (!b)
                                _exit(2);
                        memset(b, 1, 4u << 20);
                }
                _exit(3); /* 256 MiB touched: the limit did not hold */
        }
        close(p[0]);
        assert_int_equal(core_cgroup_attach(cg, pid, NULL), 0);
        assert_int_equal(write(p[1], "x", 1), 1);
        close(p[1]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        assert_int_equal(core_cgroup_oom_kills(cg, &after), 0);
        assert_true(after >= 1);
        assert_int_equal(core_cgroup_destroy(cg), 0);
}

static void test_mode_matches_the_mounted_hierarchies(void **state) {
        struct stat st;
        bool v1 = stat("/sys/fs/cgroup/pids/tasks", &st) == 0 || stat("/sys/fs/cgroup/memory/tasks", &st) == 0;
        bool v2 = stat("/sys/fs/cgroup/unified/cgroup.procs", &st) == 0 ||
                  stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0;
        core_cgroup_mode want = v1 && v2 ? CORE_CGROUP_HYBRID : v1 ? CORE_CGROUP_V1 : CORE_CGROUP_V2;
        assert_int_equal(core_cgroup_get_mode(), want);
        assert_string_equal(core_cgroup_mode_name(CORE_CGROUP_HYBRID), "hybrid");
}

static void test_session_gets_limits_holds_its_process_and_kill_destroy_leave_nothing(void **state) {
        core_cgroup_limits lim = { .pids_max = 10, .memory_max = 256u << 20, .cpu_quota_pct = 150 };
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        sb_error *err = NULL;
        int wr;

        assert_int_equal(core_cgroup_create("unit-a", &lim, &cg, &err), 0);
        assert_null(err);
        pid_t pid = spawn_sleeper(&wr);
        assert_int_equal(core_cgroup_attach(cg, pid, &err), 0);
        assert_null(err);

        /* v2 with controllers: in the session's leaf "init" (cgroup.h
         * CORE_CGROUP_INIT), the session's own directory empty. */
        char *top = read_in(core_cgroup_path(cg), CORE_CGROUP_INIT, "cgroup.controllers");
        bool leaf = core_cgroup_get_mode() == CORE_CGROUP_V2 && top;
        free(top);
        char *procs = read_in(core_cgroup_path(cg), leaf ? CORE_CGROUP_INIT : "", "cgroup.procs"), want[24];
        snprintf(want, sizeof(want), "%d\n", (int) pid);
        assert_non_null(procs);
        assert_string_equal(procs, want);
        free(procs);
        if (core_cgroup_get_mode() != CORE_CGROUP_V2) {
                static const char *const checks[][3] = {
                        { "pids", "pids.max", "10\n" },
                        { "memory", "memory.limit_in_bytes", "268435456\n" },
                        { "cpu", "cpu.cfs_quota_us", "150000\n" },
                        { "cpu", "cpu.cfs_period_us", "100000\n" },
                };
                for (size_t i = 0; i < ELEMENTSOF(checks); i++) {
                        char *v = v1_read(checks[i][0], "unit-a", checks[i][1]);
                        assert_non_null(v);
                        assert_string_equal(v, checks[i][2]);
                        free(v);
                }
        }

        assert_int_equal(core_cgroup_kill_all(cg), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        close(wr);
        assert_int_equal(core_cgroup_destroy(cg), 0);
        assert_false(exists_anywhere("unit-a"));
}

/* What a daemon killed between freeze and thaw leaves: the cgroup reads as
 * frozen, a kill still ends its process (v1 freezer tasks keep SIGKILL
 * pending until thawed) and the cgroup can be removed. */
static void test_a_frozen_session_is_seen_frozen_and_kill_all_still_ends_it(void **state) {
        core_cgroup_limits lim = { .pids_max = 10, .memory_max = 256u << 20, .cpu_quota_pct = 100 };
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        int wr;

        assert_int_equal(core_cgroup_create("unit-frz", &lim, &cg, NULL), 0);
        pid_t pid = spawn_sleeper(&wr);
        assert_int_equal(core_cgroup_attach(cg, pid, NULL), 0);
        assert_int_equal(core_cgroup_frozen(cg), 0);
        int r = core_cgroup_freeze(cg, true);
        if (r == -ENOTSUP) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                close(wr);
                core_cgroup_destroy(cg);
                skip();
        }
        assert_int_equal(r, 0);
        assert_int_equal(core_cgroup_frozen(cg), 1);
        assert_int_equal(core_cgroup_kill_all(cg), 0);
        int status = 0;
        pid_t got = 0;
        for (int i = 0; i < 400 && got == 0; i++) {
                got = waitpid(pid, &status, WNOHANG);
                if (got == 0)
                        usleep(5000);
        }
        if (got == 0) { /* do not leave it behind when the assertion fails */
                core_cgroup_freeze(cg, false);
                waitpid(pid, &status, 0);
        }
        assert_int_equal(got, pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        assert_int_equal(core_cgroup_frozen(cg), 0);
        close(wr);
        assert_int_equal(core_cgroup_destroy(cg), 0);
        assert_false(exists_anywhere("unit-frz"));
}

static void test_pids_limit_stops_forks_past_the_maximum(void **state) {
        core_cgroup_limits lim = { .pids_max = 3 };
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        int go[2], res[2];
        assert_int_equal(core_cgroup_create("unit-pids", &lim, &cg, NULL), 0);
        assert_int_equal(pipe2(go, O_CLOEXEC), 0);
        assert_int_equal(pipe2(res, O_CLOEXEC), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char c;
                int ok = 0;
                if (read(go[0], &c, 1) != 1)
                        _exit(1);
                for (int i = 0; i < 6; i++) {
                        pid_t k = fork();
                        if (k == 0) {
                                if (read(go[0], &c, 1) < 0) /* parked until killed */
                                        _exit(1);
                                _exit(0);
                        }
                        ok += k > 0;
                }
                if (write(res[1], &ok, sizeof(ok)) != sizeof(ok) || read(go[0], &c, 1) < 0)
                        _exit(1);
                _exit(0);
        }
        assert_int_equal(core_cgroup_attach(cg, pid, NULL), 0);
        assert_int_equal(write(go[1], "g", 1), 1);
        int forked = -1;
        assert_int_equal(read(res[0], &forked, sizeof(forked)), sizeof(forked));
        assert_int_equal(forked, 2); /* the child itself plus two */
        assert_int_equal(core_cgroup_kill_all(cg), 0);
        waitpid(pid, NULL, 0);
        close(go[0]), close(go[1]), close(res[0]), close(res[1]);
        assert_int_equal(core_cgroup_destroy(cg), 0);
        assert_false(exists_anywhere("unit-pids"));
}

static void test_remove_all_sessions_kills_and_removes_every_leftover(void **state) {
        _cleanup_(core_cgroup_freep) core_cgroup *a = NULL;
        _cleanup_(core_cgroup_freep) core_cgroup *b = NULL;
        int wr;
        assert_int_equal(core_cgroup_create("left-1", NULL, &a, NULL), 0);
        assert_int_equal(core_cgroup_create("left-2", NULL, &b, NULL), 0);
        pid_t pid = spawn_sleeper(&wr);
        assert_int_equal(core_cgroup_attach(a, pid, NULL), 0);

        assert_int_equal(core_cgroup_remove_all_sessions(), 2);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status));
        close(wr);
        assert_false(exists_anywhere("left-1"));
        assert_false(exists_anywhere("left-2"));
        assert_int_equal(core_cgroup_remove_all_sessions(), 0);
}

static void test_create_refuses_names_that_escape_the_parent(void **state) {
        core_cgroup *cg = NULL;
        sb_error *err = NULL;
        assert_int_equal(core_cgroup_create("../evil", NULL, &cg, &err), -EINVAL);
        assert_null(cg);
        assert_non_null(err);
        sb_error_free(err);
        assert_int_equal(core_cgroup_create("..", NULL, &cg, NULL), -EINVAL);
}

static void test_sweep_of_one_instance_leaves_another_instances_sessions_running(void **state) {
        _cleanup_(core_cgroup_freep) core_cgroup *a = NULL;
        _cleanup_(core_cgroup_freep) core_cgroup *b = NULL;
        _cleanup_(core_cgroup_freep) core_cgroup *b2 = NULL;
        int wa, wb, status;
        assert_int_equal(core_cgroup_create("same", NULL, &a, NULL), 0);
        pid_t pa = spawn_sleeper(&wa);
        assert_int_equal(core_cgroup_attach(a, pa, NULL), 0);

        /* A second daemon in the same cgroup, with a session of the same name. */
        assert_int_equal(core_cgroup_init(KEY_B, NULL), 0);
        assert_int_equal(core_cgroup_create("same", NULL, &b, NULL), 0);
        assert_int_equal(core_cgroup_create("b-only", NULL, &b2, NULL), 0);
        pid_t pb = spawn_sleeper(&wb);
        assert_int_equal(core_cgroup_attach(b, pb, NULL), 0);
        assert_string_not_equal(core_cgroup_path(a), core_cgroup_path(b));

        assert_int_equal(core_cgroup_remove_all_sessions(), 2);
        assert_int_equal(waitpid(pb, &status, 0), pb);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        assert_true(alive(pa));
        assert_true(exists_in(KEY_A, "same"));
        assert_false(exists_in(KEY_B, "same"));
        assert_false(exists_in(KEY_B, "b-only"));
        /* Shutdown of the second daemon removes its (now empty) parent only. */
        assert_int_equal(core_cgroup_fini(), 0);
        assert_false(parent_exists(KEY_B));
        assert_true(parent_exists(KEY_A));

        assert_int_equal(core_cgroup_init(KEY_A, NULL), 0);
        assert_true(alive(pa));
        assert_int_equal(core_cgroup_remove_all_sessions(), 1);
        assert_int_equal(waitpid(pa, &status, 0), pa);
        assert_true(WIFSIGNALED(status));
        close(wa), close(wb);
        assert_false(exists_anywhere("same"));
}

static void test_create_refuses_a_running_session_of_that_name_but_reuses_an_empty_one(void **state) {
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        core_cgroup *again = NULL;
        sb_error *err = NULL;
        int wr;
        assert_int_equal(core_cgroup_create("busy", NULL, &cg, NULL), 0);
        pid_t pid = spawn_sleeper(&wr);
        assert_int_equal(core_cgroup_attach(cg, pid, NULL), 0);

        assert_int_equal(core_cgroup_create("busy", NULL, &again, &err), -EEXIST);
        assert_null(again);
        assert_non_null(err);
        assert_non_null(strstr(err->message, "has processes in it"));
        sb_error_free(err);
        /* Refused means untouched: the running session keeps its process. */
        assert_true(alive(pid));
        assert_true(exists_in(KEY_A, "busy"));

        assert_int_equal(core_cgroup_kill_all(cg), 0);
        assert_int_equal(waitpid(pid, NULL, 0), pid);
        close(wr);
        assert_int_equal(core_cgroup_create("busy", NULL, &again, NULL), 0);
        assert_string_equal(core_cgroup_path(again), core_cgroup_path(cg));
        assert_int_equal(core_cgroup_destroy(again), 0);
        core_cgroup_free(again);
        assert_false(exists_anywhere("busy"));
}

static void test_instance_key_names_the_directory_not_its_spelling(void **state) {
        _cleanup_free_ char *k1 = NULL, *k2 = NULL, *k3 = NULL;
        assert_int_equal(core_cgroup_instance_key("/tmp", &k1), 0);
        assert_int_equal(core_cgroup_instance_key("/tmp/../tmp/", &k2), 0);
        assert_int_equal(core_cgroup_instance_key("/", &k3), 0);
        assert_int_equal(strlen(k1), 16);
        assert_int_equal(strspn(k1, "0123456789abcdef"), 16);
        assert_string_equal(k1, k2);
        assert_string_not_equal(k1, k3);
        char *none = NULL;
        assert_int_equal(core_cgroup_instance_key("/nonexistent/sandboxd-state", &none), -ENOENT);
        assert_null(none);
}

static void test_init_refuses_keys_that_are_not_plain_names(void **state) {
        sb_error *err = NULL;
        assert_int_equal(core_cgroup_init("../x", &err), -EINVAL);
        assert_non_null(err);
        sb_error_free(err);
        assert_int_equal(core_cgroup_init("", NULL), -EINVAL);
        assert_int_equal(core_cgroup_init(NULL, NULL), -EINVAL);
        /* Nothing is usable until a valid init. */
        core_cgroup *cg = NULL;
        assert_int_equal(core_cgroup_create("after-bad-init", NULL, &cg, NULL), -ESTALE);
        assert_int_equal(core_cgroup_init(KEY_A, NULL), 0);
}

/* The session's memory peak read now: through the reset's fd when it has
 * one (v2), else as core_cgroup_read_usage() reads it (v1). */
static uint64_t peak_now(const core_cgroup *cg, int fd) {
        uint64_t v = UINT64_MAX;
        core_cgroup_usage u;
        if (fd >= 0)
                assert_int_equal(core_cgroup_peak_read(fd, &v), 0);
        else if (core_cgroup_read_usage(cg, &u) == 0)
                v = u.memory_peak_bytes;
        return v;
}

/* Runs a child in cg that touches `mib` MiB and ends. */
static void touch_in(core_cgroup *cg, size_t mib) {
        int p[2], status;
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                char c;
                close(p[1]);
                if (read(p[0], &c, 1) != 1)
                        _exit(1);
                char *b = malloc(mib << 20);
                if (!b)
                        _exit(2);
                memset(b, 1, mib << 20);
                _exit(((volatile char *)b)[(mib << 20) - 1] == 1 ? 0 : 3); /* read: not optimised away */
        }
        close(p[0]);
        assert_int_equal(core_cgroup_attach(cg, pid, NULL), 0);
        assert_int_equal(write(p[1], "x", 1), 1);
        close(p[1]);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_memory_peak_restarts_at_a_reset_and_counts_on(void **state) {
        core_cgroup_limits lim = { .pids_max = 10, .memory_max = 512u << 20 };
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        core_cgroup_usage u;
        assert_int_equal(core_cgroup_create("unit-peak", &lim, &cg, NULL), 0);
        if (core_cgroup_read_usage(cg, &u) != 0 || u.memory_peak_bytes == UINT64_MAX) {
                assert_int_equal(core_cgroup_destroy(cg), 0);
                skip(); /* no memory peak kept for sessions here */
        }
        touch_in(cg, 48);
        assert_true(peak_now(cg, -EBADF) >= 48u << 20);
        int fd = -EBADF;
        int r = core_cgroup_peak_reset(cg, &fd);
        if (r == -EOPNOTSUPP) {
                assert_int_equal(core_cgroup_destroy(cg), 0);
                skip(); /* cgroup v2 before Linux 6.12: no reset */
        }
        assert_int_equal(r, 0);
        assert_true(peak_now(cg, fd) < 24u << 20);
        touch_in(cg, 32);
        uint64_t after = peak_now(cg, fd);
        assert_true(after >= 32u << 20 && after < 48u << 20);
        if (fd >= 0)
                close(fd);
        assert_int_equal(core_cgroup_destroy(cg), 0);
}

static void test_memory_peak_read_takes_a_number_only(void **state) {
        char path[] = "/tmp/unit-peak-XXXXXX";
        int fd = mkstemp(path);
        uint64_t v = 0;
        assert_true(fd >= 0);
        unlink(path);
        assert_int_equal(write(fd, "123456\n", 7), 7);
        assert_int_equal(core_cgroup_peak_read(fd, &v), 0);
        assert_int_equal(v, 123456);
        assert_int_equal(ftruncate(fd, 0), 0);
        assert_int_equal(pwrite(fd, "12x\n", 4, 0), 4);
        assert_int_equal(core_cgroup_peak_read(fd, &v), -EBADMSG);
        close(fd);
}

/* core_cgroup_run_inside_child_v1 as the daemon spawns sandbox-netd. */
typedef struct born_call {
        int cgroup_fd;
        pid_t pid;
        int out;
} born_call;

static int born_spawn(void *userdata) {
        born_call *c = userdata;
        char *argv[] = { (char *) "sleep", (char *) "600", NULL };
        return core_spawn_helper_in("/bin/sleep", argv, c->cgroup_fd, &c->out, NULL, &c->pid, NULL);
}

static char *read_text(const char *path) {
        char *text = NULL;
        return core_read_file(path, 1 << 16, &text, NULL) < 0 ? NULL : text;
}

/* A helper started through core_cgroup_make_child, run_inside_child_v1 and
 * core_spawn_helper_in is in the session's netd child cgroup of every
 * hierarchy the library uses with nothing ever attaching it, and the
 * spawning thread is back in its own cgroups afterwards. */
static void test_a_helper_is_born_in_the_sessions_child_cgroup_and_the_thread_comes_back(void **state) {
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        sb_error *err = NULL;
        assert_int_equal(core_cgroup_create("unit-born", NULL, &cg, &err), 0);
        char *before = read_text("/proc/thread-self/cgroup");
        assert_non_null(before);

        born_call c = { .cgroup_fd = -EBADF, .out = -EBADF };
        assert_true(core_cgroup_make_child(cg, CORE_CGROUP_NETD, &c.cgroup_fd, &err) >= 0);
        bool inside = false;
        assert_int_equal(core_cgroup_run_inside_child_v1(cg, CORE_CGROUP_NETD, born_spawn, &c, &inside, &err), 0);
        assert_null(err);
        assert_true(c.pid > 0);
        if (c.cgroup_fd >= 0)
                close(c.cgroup_fd);

        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int) c.pid);
        char *got = read_text(path), *save = NULL;
        assert_non_null(got);
        size_t checked = 0;
        char bad[1024] = "";
        for (char *line = strtok_r(got, "\n", &save); line && !*bad; line = strtok_r(NULL, "\n", &save)) {
                char *ctls = strchr(line, ':'), *cgpath = ctls ? strchr(ctls + 1, ':') : NULL;
                if (!cgpath)
                        break;
                *cgpath++ = 0;
                ctls++;
                bool v2 = !*ctls;
                if (v2 ? core_cgroup_get_mode() == CORE_CGROUP_V1 : !wanted(ctls))
                        continue;
                size_t n = strlen(cgpath);
                if (n < strlen("/unit-born/netd") || !streq(cgpath + n - strlen("/unit-born/netd"), "/unit-born/netd"))
                        snprintf(bad, sizeof(bad), "hierarchy '%s': the helper is in %s, not in the session's "
                                 "netd cgroup", ctls, cgpath);
                checked++;
        }
        free(got);
        char *after = read_text("/proc/thread-self/cgroup");
        /* The helper goes before any verdict, so a failure leaves nothing. */
        kill(c.pid, SIGKILL);
        assert_int_equal(waitpid(c.pid, NULL, 0), c.pid);
        close(c.out);
        assert_int_equal(core_cgroup_destroy(cg), 0);
        if (*bad)
                fail_msg("%s", bad);
        assert_true(checked > 0);
        assert_non_null(after);
        assert_string_equal(after, before);
        free(before);
        free(after);
        assert_false(exists_anywhere("unit-born"));
}

static void test_only_known_child_cgroups_are_made_or_entered(void **state) {
        _cleanup_(core_cgroup_freep) core_cgroup *cg = NULL;
        assert_int_equal(core_cgroup_create("unit-kids", NULL, &cg, NULL), 0);
        int fd = 0;
        sb_error *err = NULL;
        assert_int_equal(core_cgroup_make_child(cg, "../escape", &fd, &err), -EINVAL);
        assert_non_null(err);
        sb_error_free(err);
        assert_int_equal(fd, -EBADF);
        born_call c = { .cgroup_fd = -EBADF, .out = -EBADF };
        bool inside = true;
        err = NULL;
        assert_int_equal(core_cgroup_run_inside_child_v1(cg, "other", born_spawn, &c, &inside, &err), -EINVAL);
        assert_false(inside);
        assert_int_equal(c.pid, 0);
        sb_error_free(err);
        assert_int_equal(core_cgroup_destroy(cg), 0);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_mode_matches_the_mounted_hierarchies),
                cmocka_unit_test(test_session_gets_limits_holds_its_process_and_kill_destroy_leave_nothing),
                cmocka_unit_test(test_a_frozen_session_is_seen_frozen_and_kill_all_still_ends_it),
                cmocka_unit_test(test_pids_limit_stops_forks_past_the_maximum),
                cmocka_unit_test(test_remove_all_sessions_kills_and_removes_every_leftover),
                cmocka_unit_test(test_create_refuses_names_that_escape_the_parent),
                cmocka_unit_test(test_sweep_of_one_instance_leaves_another_instances_sessions_running),
                cmocka_unit_test(test_create_refuses_a_running_session_of_that_name_but_reuses_an_empty_one),
                cmocka_unit_test(test_instance_key_names_the_directory_not_its_spelling),
                cmocka_unit_test(test_init_refuses_keys_that_are_not_plain_names),
                cmocka_unit_test(test_oom_kill_count_parses_both_formats),
                cmocka_unit_test(test_oom_kill_at_the_memory_limit_is_counted_and_sigkill_is_not),
                cmocka_unit_test(test_memory_peak_restarts_at_a_reset_and_counts_on),
                cmocka_unit_test(test_memory_peak_read_takes_a_number_only),
                cmocka_unit_test(test_a_helper_is_born_in_the_sessions_child_cgroup_and_the_thread_comes_back),
                cmocka_unit_test(test_only_known_child_cgroups_are_made_or_entered),
        };
        return cmocka_run_group_tests(tests, enter_private_cgroup, leave_private_cgroup);
}
