/* Tests of sandbox-init (libcore/init/) through its agent socket, the way
 * sandboxd drives it: each test starts build/sandbox-init (or $SANDBOX_INIT)
 * as PID 1 of private PID, mount, network, UTS and IPC namespaces with a
 * SOCK_SEQPACKET socket on fd 3, sends a setup packet with "rootfs": null
 * (init stays on the host's filesystem) and no network slot, and then runs
 * commands and file operations. Needs root. Nothing leaves the machine: the
 * network namespace is private and gets only lo. */
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <cjson/cJSON.h>
#include <cmocka.h>
#include "libcore/agent.h"
#include "libcore/init/init.h"
#include "libcore/util.h"

#define TIMEOUT_MS 10000

typedef struct init_proc {
        int sock;
        pid_t pid; /* the helper whose exit status is init's */
        char tmp[64];
} init_proc;

typedef struct result {
        char out[1 << 16], err[1 << 16];
        size_t out_len, err_len, out_total;
        bool started, exited;
        int code;
        char error[256];
} result;

static const char *init_binary(void) {
        const char *p = getenv("SANDBOX_INIT");
        return p && *p ? p : "build/sandbox-init";
}

/* A listening socket for init's AGENT_LISTEN_FD (spawn), or -1. */
static int listen_for_spawn = -1;

/* sandbox-init's environment: empty, or SANDBOX_INIT_SPAWN=copy for the
 * second run of the command tests (each command's child with a copy of
 * init's memory instead of init's own, command.c spawn_shares_vm). */
static const char *init_env;

/* In the helper: new namespaces, then a fork so the child is their PID 1.
 * Both die with their parent (PDEATHSIG), so a failed test leaks nothing. */
_noreturn_ static void helper(int fd, int other) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(other); /* the test's end: init must see EOF when the test closes it */
        if (unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC) < 0 ||
            mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                _exit(100);
        pid_t pid = fork();
        if (pid < 0)
                _exit(101);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                int null = open("/dev/null", O_RDWR);
                if (dup2(fd, AGENT_FD) < 0 || null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 ||
                    (!getenv("INIT_TEST_STDERR") && dup2(null, 2) < 0))
                        _exit(102);
                if (listen_for_spawn >= 0 && dup2(listen_for_spawn, AGENT_LISTEN_FD) < 0)
                        _exit(102);
                close_range(listen_for_spawn >= 0 ? AGENT_LISTEN_FD + 1 : AGENT_FD + 1, ~0U, 0);
                char *argv[] = { (char *)"sandbox-init", NULL }, *envp[] = { (char *)init_env, NULL };
                execve(init_binary(), argv, envp);
                _exit(103);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                ;
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static void send_json(init_proc *ip, const char *fmt, ...) _printf_(2, 3);
static void send_json(init_proc *ip, const char *fmt, ...) {
        char buf[8192];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        assert_true(n > 0 && (size_t)n < sizeof(buf));
        assert_int_equal(send(ip->sock, buf, (size_t)n, MSG_NOSIGNAL), n);
}

/* Next packet as JSON, or NULL at EOF. Fails the test after TIMEOUT_MS. */
static cJSON *recv_event(init_proc *ip) {
        static char buf[AGENT_MAX_PACKET + 1];
        struct pollfd p = { .fd = ip->sock, .events = POLLIN };
        int r = poll(&p, 1, TIMEOUT_MS);
        if (r != 1)
                fail_msg("no event from sandbox-init within %d ms", TIMEOUT_MS);
        ssize_t n = recv(ip->sock, buf, sizeof(buf), 0);
        assert_true(n >= 0);
        if (n == 0)
                return NULL;
        cJSON *ev = cJSON_ParseWithLength(buf, (size_t)n);
        if (!ev)
                fail_msg("unparsable packet: %.*s", (int)n, buf);
        return ev;
}

static const char *ev_str(const cJSON *ev, const char *key) {
        return cJSON_GetStringValue(cJSON_GetObjectItem(ev, key));
}

/* Waits (pidfd + poll, bounded) for the helper and returns init's exit code. */
static int wait_init(init_proc *ip) {
        int pfd = (int)syscall(SYS_pidfd_open, ip->pid, 0);
        assert_true(pfd >= 0);
        struct pollfd p = { .fd = pfd, .events = POLLIN };
        int r = poll(&p, 1, TIMEOUT_MS);
        close(pfd);
        if (r != 1) {
                kill(ip->pid, SIGKILL);
                waitpid(ip->pid, NULL, 0);
                ip->pid = -1;
                fail_msg("sandbox-init did not exit");
        }
        int st;
        assert_int_equal(waitpid(ip->pid, &st, 0), ip->pid);
        ip->pid = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void spawn(init_proc *ip) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        int bufsz = 1 << 20;
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof(bufsz));
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                helper(sv[1], sv[0]);
        close(sv[1]);
        ip->sock = sv[0];
        ip->pid = pid;
}

static int start(void **state) {
        init_proc *ip = calloc(1, sizeof(*ip));
        if (!ip || access(init_binary(), X_OK) < 0) {
                fprintf(stderr, "%s: not built\n", init_binary());
                return -1;
        }
        strcpy(ip->tmp, "/tmp/test-init-agent-XXXXXX");
        if (!mkdtemp(ip->tmp) || chown(ip->tmp, SANDBOX_UID, SANDBOX_GID) < 0)
                return -1;
        spawn(ip);
        send_json(ip, "{\"op\":\"setup\",\"rootfs\":null,\"netSlot\":-1,"
                      "\"env\":{\"PATH\":\"/usr/bin:/bin\",\"BASE\":\"b\",\"OVER\":\"base\"}}");
        cJSON *ev = recv_event(ip);
        bool ok = ev && streq(ev_str(ev, "ev"), "ready");
        if (!ok)
                fprintf(stderr, "setup failed: %s\n", ev ? cJSON_PrintUnformatted(ev) : "EOF");
        cJSON_Delete(ev);
        *state = ip;
        return ok ? 0 : -1;
}

static int stop(void **state) {
        init_proc *ip = *state;
        if (!ip)
                return 0;
        if (ip->sock >= 0)
                close(ip->sock); /* EOF: init stops with no grace */
        if (ip->pid > 0) {
                kill(ip->pid, SIGKILL);
                waitpid(ip->pid, NULL, 0);
        }
        core_rm_rf(ip->tmp);
        free(ip);
        return 0;
}

static void append(char *buf, size_t *len, const void *data, size_t n, size_t cap) {
        size_t k = n < cap - 1 - *len ? n : cap - 1 - *len;
        memcpy(buf + *len, data, k);
        *len += k;
        buf[*len] = 0;
}

/* Reads events of command `id` into r until it exits, or until stdout holds
 * `until` (when given). */
static void pump(init_proc *ip, int id, result *r, const char *until) {
        while (!r->exited && !(until && strstr(r->out, until))) {
                cJSON *ev = recv_event(ip);
                assert_non_null(ev);
                const char *kind = ev_str(ev, "ev");
                assert_non_null(kind);
                if (cJSON_GetObjectItem(ev, "id") && cJSON_GetObjectItem(ev, "id")->valueint != id)
                        fail_msg("event for another command: %s", cJSON_PrintUnformatted(ev));
                if (streq(kind, "started"))
                        r->started = true;
                else if (streq(kind, "output")) {
                        void *data;
                        size_t n;
                        assert_int_equal(core_base64_decode(ev_str(ev, "data"), &data, &n), 0);
                        assert_true(n <= 64 * 1024);
                        if (streq(ev_str(ev, "stream"), "stderr"))
                                append(r->err, &r->err_len, data, n, sizeof(r->err));
                        else {
                                append(r->out, &r->out_len, data, n, sizeof(r->out));
                                r->out_total += n;
                        }
                        free(data);
                } else if (streq(kind, "exit")) {
                        r->exited = true;
                        r->code = cJSON_GetObjectItem(ev, "code")->valueint;
                        const char *e = ev_str(ev, "error");
                        snprintf(r->error, sizeof(r->error), "%s", e ? e : "");
                } else
                        fail_msg("unexpected event: %s", cJSON_PrintUnformatted(ev));
                cJSON_Delete(ev);
        }
}

/* Runs sh -c SCRIPT with extra run fields and waits for its exit. */
static result *run_sh(init_proc *ip, int id, const char *script, const char *extra) {
        result *r = calloc(1, sizeof(*r));
        assert_non_null(r);
        cJSON *argv = cJSON_CreateArray();
        cJSON_AddItemToArray(argv, cJSON_CreateString("sh"));
        cJSON_AddItemToArray(argv, cJSON_CreateString("-c"));
        cJSON_AddItemToArray(argv, cJSON_CreateString(script));
        char *a = cJSON_PrintUnformatted(argv);
        send_json(ip, "{\"op\":\"run\",\"id\":%d,\"argv\":%s%s}", id, a, extra ? extra : "");
        free(a);
        cJSON_Delete(argv);
        pump(ip, id, r, NULL);
        return r;
}

static void test_stdout_and_stderr_are_separate_and_exit_code_is_reported(void **state) {
        init_proc *ip = *state;
        _cleanup_free_ result *r = run_sh(ip, 1, "echo out; echo err >&2; exit 3", NULL);
        assert_true(r->started);
        assert_string_equal(r->out, "out\n");
        assert_string_equal(r->err, "err\n");
        assert_int_equal(r->code, 3);
        assert_string_equal(r->error, "");
}

/* agent.h "window": init sends at most the window (plus what one read and
 * the drain at the reap add) of a command's output the daemon has not
 * credited; the command waits on its pipe meanwhile, init answers other
 * requests, and credit lets the rest come, every byte. A credit larger
 * than what was sent opens no more than the window. Each round asks for
 * an fs answer: everything received before it was sent before init read
 * the credit ahead of it. */
static void test_a_command_window_holds_its_output_until_credit(void **state) {
        init_proc *ip = *state;
        const size_t window = 128 * 1024, total_want = 3000000;
        send_json(ip, "{\"op\":\"run\",\"id\":1,\"argv\":[\"sh\",\"-c\",\"head -c %zu /dev/zero\"],"
                      "\"window\":%zu}", total_want, window);
        send_json(ip, "{\"op\":\"credit\",\"id\":1,\"bytes\":1e12}");
        size_t total = 0;
        bool started = false, exited = false;
        for (int req = 1; !exited; req++) {
                assert_true(req < 10000);
                send_json(ip, "{\"op\":\"fs\",\"req\":%d,\"action\":\"stat\",\"path\":\"/\"}", req);
                size_t round = 0;
                for (;;) {
                        cJSON *ev = recv_event(ip);
                        assert_non_null(ev);
                        const char *kind = ev_str(ev, "ev");
                        assert_non_null(kind);
                        bool marker = streq(kind, "fs") && cJSON_GetObjectItem(ev, "req")->valueint == req;
                        if (streq(kind, "started")) {
                                started = true;
                                assert_int_equal(cJSON_GetObjectItem(ev, "window")->valuedouble, (double)window);
                        } else if (streq(kind, "output")) {
                                void *data;
                                size_t n;
                                assert_int_equal(core_base64_decode(ev_str(ev, "data"), &data, &n), 0);
                                free(data);
                                round += n;
                        } else if (streq(kind, "exit")) {
                                exited = true;
                                assert_int_equal(cJSON_GetObjectItem(ev, "code")->valueint, 0);
                        } else if (!marker)
                                fail_msg("unexpected event: %s", cJSON_PrintUnformatted(ev));
                        cJSON_Delete(ev);
                        if (marker)
                                break;
                }
                if (round > window + 2 * INIT_OUTPUT_CHUNK)
                        fail_msg("%zu bytes of output came without credit (window %zu)", round, window);
                total += round;
                if (round)
                        send_json(ip, "{\"op\":\"credit\",\"id\":1,\"bytes\":%zu}", round);
        }
        assert_true(started);
        assert_int_equal(total, total_want);
}

static void test_death_by_signal_is_128_plus_signal(void **state) {
        _cleanup_free_ result *r = run_sh(*state, 1, "kill -TERM $$", NULL);
        assert_int_equal(r->code, 128 + SIGTERM);
}

static void test_all_output_arrives_before_exit(void **state) {
        _cleanup_free_ result *r = run_sh(*state, 1, "head -c 3000000 /dev/zero; exit 5", NULL);
        assert_int_equal(r->out_total, 3000000);
        assert_int_equal(r->code, 5);
}

static void test_missing_command_exits_127_without_starting(void **state) {
        init_proc *ip = *state;
        result r = {};
        send_json(ip, "{\"op\":\"run\",\"id\":7,\"argv\":[\"no-such-command-xyz\"]}");
        pump(ip, 7, &r, NULL);
        assert_false(r.started);
        assert_int_equal(r.code, 127);
        assert_string_equal(r.error, "no-such-command-xyz: no such file or directory");
}

static void test_non_executable_file_exits_126(void **state) {
        init_proc *ip = *state;
        char p[128];
        snprintf(p, sizeof(p), "%s/notexec", ip->tmp);
        assert_int_equal(core_write_file_atomic(p, "x", 1, 0644), 0);
        result r = {};
        send_json(ip, "{\"op\":\"run\",\"id\":8,\"argv\":[\"%s\"]}", p);
        pump(ip, 8, &r, NULL);
        assert_int_equal(r.code, 126);
        assert_non_null(strstr(r.error, "permission denied"));
}

static void test_missing_cwd_is_reported(void **state) {
        _cleanup_free_ result *r = run_sh(*state, 1, "pwd", ",\"cwd\":\"/no/such/dir\"");
        assert_false(r->started);
        assert_int_equal(r->code, 127);
        assert_string_equal(r->error, "chdir /no/such/dir: no such file or directory");
}

static void test_cwd_env_and_user_apply(void **state) {
        init_proc *ip = *state;
        char extra[256];
        snprintf(extra, sizeof(extra), ",\"cwd\":\"%s\",\"env\":[\"OVER=run\",\"EXTRA=e\"]", ip->tmp);
        _cleanup_free_ result *r = run_sh(ip, 1, "pwd; echo $BASE $OVER $EXTRA; id -u; id -g; id -G", extra);
        char want[256];
        snprintf(want, sizeof(want), "%s\nb run e\n1000\n1000\n1000\n", ip->tmp);
        assert_string_equal(r->out, want);
        _cleanup_free_ result *root = run_sh(ip, 2, "id -u; id -G", ",\"uid\":0,\"gid\":0");
        assert_string_equal(root->out, "0\n0\n");
}

static void test_command_gets_only_stdio_and_no_new_privs(void **state) {
        /* exec'd by the shell, ls inherits exactly the shell's fds; 3 is the
         * directory ls itself reads. */
        _cleanup_free_ result *r = run_sh(*state, 1, "grep NoNewPrivs /proc/self/status; exec ls /proc/self/fd", NULL);
        assert_string_equal(r->out, "NoNewPrivs:\t1\n0\n1\n2\n3\n");
}

static void test_stdin_is_relayed_and_closed(void **state) {
        init_proc *ip = *state;
        result r = {};
        send_json(ip, "{\"op\":\"run\",\"id\":3,\"argv\":[\"cat\"],\"stdin\":true}");
        _cleanup_free_ char *b64 = core_base64_encode("hello\n", 6);
        send_json(ip, "{\"op\":\"write\",\"id\":3,\"data\":\"%s\"}", b64);
        pump(ip, 3, &r, "hello\n");
        send_json(ip, "{\"op\":\"close_stdin\",\"id\":3}");
        pump(ip, 3, &r, NULL);
        assert_string_equal(r.out, "hello\n");
        assert_int_equal(r.code, 0);
}

static void test_without_stdin_reads_end_of_file(void **state) {
        _cleanup_free_ result *r = run_sh(*state, 1, "cat; echo done", NULL);
        assert_string_equal(r->out, "done\n");
}

static void test_tty_command_gets_a_pty_and_sees_resize(void **state) {
        init_proc *ip = *state;
        _cleanup_free_ result *t = run_sh(ip, 1, "tty", ",\"tty\":true");
        assert_int_equal(strncmp(t->out, "/dev/pts/", 9), 0);
        assert_int_equal(t->code, 0);

        result r = {};
        send_json(ip, "{\"op\":\"run\",\"id\":2,\"argv\":[\"sh\",\"-c\",\"stty size; read x; stty size\"],"
                      "\"tty\":true,\"rows\":24,\"cols\":80,\"stdin\":true}");
        pump(ip, 2, &r, "24 80\r\n");
        send_json(ip, "{\"op\":\"resize\",\"id\":2,\"rows\":50,\"cols\":100}");
        _cleanup_free_ char *b64 = core_base64_encode("x\n", 2);
        send_json(ip, "{\"op\":\"write\",\"id\":2,\"data\":\"%s\"}", b64);
        pump(ip, 2, &r, NULL);
        assert_non_null(strstr(r.out, "50 100"));
        assert_int_equal(r.code, 0);
}

static void test_kill_signals_the_process_group(void **state) {
        init_proc *ip = *state;
        result r = {};
        /* The shell waits on a child: only a group signal ends both fast. */
        send_json(ip, "{\"op\":\"run\",\"id\":4,\"argv\":[\"sh\",\"-c\",\"echo up; sleep 1000; echo never\"]}");
        pump(ip, 4, &r, "up\n");
        send_json(ip, "{\"op\":\"kill\",\"id\":4,\"signal\":\"TERM\"}");
        pump(ip, 4, &r, NULL);
        assert_int_equal(r.code, 128 + SIGTERM);
        assert_string_equal(r.out, "up\n");
}

static void test_background_grandchild_does_not_delay_exit(void **state) {
        _cleanup_free_ result *r = run_sh(*state, 1, "sleep 1000 & echo hi", NULL);
        assert_string_equal(r->out, "hi\n");
        assert_int_equal(r->code, 0);
}

/* A command starts with every signal at its default disposition and
 * unblocked, whatever init ignores (SIGPIPE) or handles, and without -i its
 * stdin is /dev/null, read-only. Signals 32 and 33 are glibc's own
 * (SIGCANCEL, SIGSETXID: sigaction(2) of glibc refuses them), so an
 * ignore of theirs inherited from whatever started the test stays. */
static void test_command_starts_with_default_signals_and_null_stdin(void **state) {
        _cleanup_free_ result *r = run_sh(*state, 1,
                                          "readlink /proc/self/fd/0; echo x >&0 2>/dev/null || echo read-only; "
                                          "exec sed -n 's/^Sig\\(Ign\\|Blk\\):[[:space:]]*/\\1 /p' /proc/self/status",
                                          NULL);
        assert_int_equal(r->code, 0);
        unsigned long long blk = ~0ull, ign = ~0ull;
        assert_int_equal(sscanf(r->out, "/dev/null\nread-only\nBlk %llx\nIgn %llx\n", &blk, &ign), 2);
        assert_int_equal(blk, 0);
        assert_int_equal(ign & ~((1ull << 31) | (1ull << 32)), 0);
}

static void test_malformed_packets_get_errors_and_init_keeps_serving(void **state) {
        init_proc *ip = *state;
        const char *bad[] = {
                "not json", "[1,2]", "{\"op\":42}", "{\"op\":\"run\",\"id\":\"x\"}",
                "{\"op\":\"run\",\"id\":1,\"argv\":[]}", "{\"op\":\"kill\",\"id\":\"x\"}",
                "{\"op\":\"write\",\"id\":999,\"data\":\"eA==\"}", "{\"op\":\"nope\"}",
                "{\"op\":\"fs\",\"action\":\"read\"}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                send_json(ip, "%s", bad[i]);
                cJSON *ev = recv_event(ip);
                assert_non_null(ev);
                assert_string_equal(ev_str(ev, "ev"), "error");
                assert_non_null(ev_str(ev, "message"));
                cJSON_Delete(ev);
        }
        _cleanup_free_ result *r = run_sh(ip, 1, "echo still here", NULL);
        assert_string_equal(r->out, "still here\n");
}

/* Sends {"op":"seccomp"} with a filter that refuses uname(2) with EPERM
 * (deny_uname) or allows everything. */
static void send_filter(init_proc *ip, bool deny_uname) {
        struct sock_filter prog[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, deny_uname ? SYS_uname : 0xfffffff, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        _cleanup_free_ char *b64 = core_base64_encode(prog, sizeof(prog));
        send_json(ip, "{\"op\":\"seccomp\",\"bpf\":\"%s\"}", b64);
}

/* Seccomp_filters of init (the helper's only child, seen from the test's
 * pid namespace, proc(5)), or -1. */
static int init_filters(const init_proc *ip) {
        char path[64], buf[4096];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)ip->pid, (int)ip->pid);
        FILE *f = fopen(path, "re");
        int pid = 0, n = -1;
        if (!f)
                return -1;
        if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
        fclose(f);
        snprintf(path, sizeof(path), "/proc/%d/status", pid);
        if (pid <= 0 || !(f = fopen(path, "re")))
                return -1;
        while (fgets(buf, sizeof(buf), f))
                if (sscanf(buf, "Seccomp_filters: %d", &n) == 1)
                        break;
        fclose(f);
        return n;
}

static void test_command_filter_handed_over_is_installed_and_kept(void **state) {
        init_proc *ip = *state;
        /* Not a whole BPF program: refused with an error, init goes on. */
        send_json(ip, "{\"op\":\"seccomp\",\"bpf\":\"eA==\"}");
        cJSON *ev = recv_event(ip);
        assert_non_null(ev);
        assert_string_equal(ev_str(ev, "ev"), "error");
        cJSON_Delete(ev);
        send_filter(ip, true);
        _cleanup_free_ result *r = run_sh(ip, 1, "uname -s", NULL);
        assert_int_not_equal(r->code, 0);
        assert_string_equal(r->out, "");
        /* The first filter stays: a later one does not replace it. */
        send_filter(ip, false);
        _cleanup_free_ result *again = run_sh(ip, 2, "uname -s", NULL);
        assert_int_not_equal(again->code, 0);
        /* Installed once, on init itself (the command's parent), and
         * inherited: the command runs under that one filter, not a second
         * copy compiled again in its child before exec, plus the small
         * inner one that refuses setns (libcore/seccomp.h outer mode). */
        _cleanup_free_ result *st = run_sh(ip, 3, "sed -n 's/^Seccomp_filters:[[:space:]]*//p' /proc/self/status",
                                           NULL);
        assert_string_equal(st->out, "2\n");
        assert_int_equal(init_filters(ip), 1);
}

static cJSON *fs_call(init_proc *ip, const char *fmt, ...) _printf_(2, 3);
static cJSON *fs_call(init_proc *ip, const char *fmt, ...) {
        char buf[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        send_json(ip, "%s", buf);
        cJSON *ev = recv_event(ip);
        assert_non_null(ev);
        assert_string_equal(ev_str(ev, "ev"), "fs");
        return ev;
}

static void test_fs_operations_over_the_socket(void **state) {
        init_proc *ip = *state;
        _cleanup_free_ char *b64 = core_base64_encode("content", 7);
        cJSON *ev = fs_call(ip, "{\"op\":\"fs\",\"req\":1,\"action\":\"write\",\"path\":\"%s/d/f.txt\",\"data\":\"%s\"}",
                            ip->tmp, b64);
        assert_int_equal(cJSON_GetObjectItem(ev, "req")->valueint, 1);
        assert_true(cJSON_IsObject(cJSON_GetObjectItem(ev, "result")));
        cJSON_Delete(ev);

        ev = fs_call(ip, "{\"op\":\"fs\",\"req\":2,\"action\":\"read\",\"path\":\"%s/d/f.txt\"}", ip->tmp);
        cJSON *res = cJSON_GetObjectItem(ev, "result");
        assert_string_equal(ev_str(res, "data"), b64);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(res, "eof")));
        cJSON_Delete(ev);

        ev = fs_call(ip, "{\"op\":\"fs\",\"req\":3,\"action\":\"list\",\"path\":\"%s/d\"}", ip->tmp);
        cJSON *entries = cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "result"), "entries");
        assert_int_equal(cJSON_GetArraySize(entries), 1);
        assert_string_equal(ev_str(cJSON_GetArrayItem(entries, 0), "name"), "f.txt");
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(entries, 0), "uid")->valueint, SANDBOX_UID);
        cJSON_Delete(ev);

        ev = fs_call(ip, "{\"op\":\"fs\",\"req\":4,\"action\":\"remove\",\"path\":\"%s/d\"}", ip->tmp);
        assert_int_equal(cJSON_GetObjectItem(ev, "errno")->valueint, ENOTEMPTY);
        cJSON_Delete(ev);
        ev = fs_call(ip, "{\"op\":\"fs\",\"req\":5,\"action\":\"remove\",\"path\":\"%s/d\",\"recursive\":true}", ip->tmp);
        assert_true(cJSON_IsObject(cJSON_GetObjectItem(ev, "result")));
        cJSON_Delete(ev);
        ev = fs_call(ip, "{\"op\":\"fs\",\"req\":6,\"action\":\"stat\",\"path\":\"%s/d\"}", ip->tmp);
        assert_int_equal(cJSON_GetObjectItem(ev, "errno")->valueint, ENOENT);
        char want[256];
        snprintf(want, sizeof(want), "fs.stat %s/d: No such file or directory", ip->tmp);
        assert_string_equal(ev_str(ev, "message"), want);
        cJSON_Delete(ev);
}

static void test_stop_terminates_commands_and_exits_zero(void **state) {
        init_proc *ip = *state;
        result r = {};
        send_json(ip, "{\"op\":\"run\",\"id\":5,\"argv\":[\"sleep\",\"1000\"]}");
        while (!r.started) {
                cJSON *ev = recv_event(ip);
                r.started = ev && streq(ev_str(ev, "ev"), "started");
                cJSON_Delete(ev);
        }
        send_json(ip, "{\"op\":\"stop\",\"graceMs\":10000}");
        pump(ip, 5, &r, NULL);
        assert_int_equal(r.code, 128 + SIGTERM);
        assert_null(recv_event(ip)); /* init closes its socket by exiting */
        assert_int_equal(wait_init(ip), 0);
}

static void test_stop_kills_after_grace_when_term_is_ignored(void **state) {
        init_proc *ip = *state;
        result r = {};
        send_json(ip, "{\"op\":\"run\",\"id\":6,\"argv\":[\"sh\",\"-c\",\"trap '' TERM; echo ready; exec sleep 1000\"]}");
        pump(ip, 6, &r, "ready\n");
        uint64_t t0 = core_monotonic_ms();
        send_json(ip, "{\"op\":\"stop\",\"graceMs\":300}");
        pump(ip, 6, &r, NULL);
        assert_int_equal(r.code, 128 + SIGKILL);
        assert_true(core_monotonic_ms() - t0 >= 300);
        assert_int_equal(wait_init(ip), 0);
}

static void test_socket_close_stops_everything(void **state) {
        init_proc *ip = *state;
        result r = {};
        send_json(ip, "{\"op\":\"run\",\"id\":9,\"argv\":[\"sh\",\"-c\",\"echo up; sleep 1000\"]}");
        pump(ip, 9, &r, "up\n");
        close(ip->sock);
        ip->sock = -1;
        /* init exits only once every process of its namespace is reaped */
        assert_int_equal(wait_init(ip), 0);
}

/* Live restore: with a listening socket on fd 4, losing the agent socket
 * leaves commands running; the next connection lists them (with their
 * "meta"), gets their held output and exit, and drives them as before. */
static void test_reconnect_keeps_commands_and_lists_them(void **state) {
        char dir[] = "/tmp/test-init-reconnect-XXXXXX";
        assert_non_null(mkdtemp(dir));
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/agent.sock", dir);
        int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        assert_true(lfd >= 0);
        assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(listen(lfd, 4), 0);
        /* Above the fds the helper rearranges (fd 3 is the agent socket's). */
        int high = fcntl(lfd, F_DUPFD_CLOEXEC, 20);
        assert_true(high >= 20);
        close(lfd);
        lfd = high;
        init_proc ip = { .sock = -1 };
        listen_for_spawn = lfd;
        spawn(&ip);
        listen_for_spawn = -1;
        close(lfd);
        send_json(&ip, "{\"op\":\"setup\",\"rootfs\":null,\"netSlot\":-1,\"env\":{\"PATH\":\"/usr/bin:/bin\"}}");
        cJSON *ev = recv_event(&ip);
        assert_string_equal(ev_str(ev, "ev"), "ready");
        cJSON_Delete(ev);
        /* Commands do not inherit the listening socket: ls sees its stdio
         * and the directory it reads (3), nothing else. */
        result *fds = run_sh(&ip, 4, "ls /proc/self/fd", NULL);
        assert_string_equal(fds->out, "0\n1\n2\n3\n");
        free(fds);
        /* An acknowledged exit is forgotten; command 6's is not acked. */
        send_json(&ip, "{\"op\":\"ack\",\"id\":4}");
        free(run_sh(&ip, 6, "exit 9", NULL));
        /* Finished commands with large metas: more than fit in one list
         * packet, which must stay whole (AGENT_MAX_PACKET). */
        char *meta = malloc(4001);
        memset(meta, 'm', 4000);
        meta[4000] = 0;
        char extra[4100];
        snprintf(extra, sizeof(extra), ",\"meta\":\"%s\"", meta);
        free(meta);
        for (int i = 100; i < 180; i++)
                free(run_sh(&ip, i, "true", extra));
        result r = {};
        send_json(&ip, "{\"op\":\"run\",\"id\":5,\"meta\":\"m5\",\"stdin\":true,\"logBytes\":4096,"
                       "\"argv\":[\"sh\",\"-c\",\"echo up; read x; echo after-$x; exit 3\"]}");
        pump(&ip, 5, &r, "up\n");
        close(ip.sock);
        /* init must now accept a new connection, not stop. */
        ip.sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        assert_int_equal(connect(ip.sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
        send_json(&ip, "{\"op\":\"list\"}");
        ev = recv_event(&ip);
        assert_non_null(ev);
        assert_string_equal(ev_str(ev, "ev"), "list");
        cJSON *cmds = cJSON_GetObjectItem(ev, "commands");
        /* Running commands first, then finished ones newest first while
         * they fit: command 6, the oldest, did not. */
        int n = cJSON_GetArraySize(cmds);
        assert_true(n > 40 && n < 70);
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cmds, 0), "id")->valueint, 5);
        assert_string_equal(ev_str(cJSON_GetArrayItem(cmds, 0), "meta"), "m5");
        assert_int_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(cmds, 1), "id")->valueint, 179);
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(cmds, 1), "exited")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItem(ev, "logs")));
        cJSON_Delete(ev);
        /* The kept log of command 5 (the only one with logBytes), with its
         * bound, then the end of the logs, before any exit. */
        ev = recv_event(&ip);
        assert_non_null(ev);
        assert_string_equal(ev_str(ev, "ev"), "log");
        assert_int_equal(cJSON_GetObjectItem(ev, "id")->valueint, 5);
        assert_string_equal(ev_str(ev, "stream"), "stdout");
        assert_string_equal(ev_str(ev, "data"), "dXAK"); /* "up\n" */
        assert_int_equal(cJSON_GetObjectItem(ev, "cap")->valueint, 4096);
        assert_false(cJSON_IsTrue(cJSON_GetObjectItem(ev, "truncated")));
        cJSON_Delete(ev);
        ev = recv_event(&ip);
        assert_non_null(ev);
        assert_string_equal(ev_str(ev, "ev"), "logs_done");
        cJSON_Delete(ev);
        /* Every exit the first connection may never have read comes again
         * (listed or not), command 6's with its status. */
        int code6 = -1;
        for (int seen = 0; seen < 81;) {
                ev = recv_event(&ip);
                assert_non_null(ev);
                assert_string_equal(ev_str(ev, "ev"), "exit");
                int id = cJSON_GetObjectItem(ev, "id")->valueint;
                if (id == 6)
                        code6 = cJSON_GetObjectItem(ev, "code")->valueint;
                send_json(&ip, "{\"op\":\"ack\",\"id\":%d}", id);
                cJSON_Delete(ev);
                seen++;
        }
        assert_int_equal(code6, 9);
        send_json(&ip, "{\"op\":\"write\",\"id\":5,\"data\":\"Z28K\"}"); /* "go\n" */
        memset(&r, 0, sizeof(r));
        pump(&ip, 5, &r, NULL);
        assert_string_equal(r.out, "after-go\n");
        assert_int_equal(r.code, 3);
        send_json(&ip, "{\"op\":\"stop\",\"graceMs\":0}");
        assert_int_equal(wait_init(&ip), 0);
        close(ip.sock);
        unlink(sa.sun_path);
        rmdir(dir);
}

static void test_first_packet_must_be_setup(void **state) {
        init_proc ip = { .sock = -1 };
        spawn(&ip);
        send_json(&ip, "{\"op\":\"run\",\"id\":1,\"argv\":[\"true\"]}");
        cJSON *ev = recv_event(&ip);
        assert_non_null(ev);
        assert_string_equal(ev_str(ev, "ev"), "error");
        cJSON_Delete(ev);
        assert_int_equal(wait_init(&ip), 1);
        close(ip.sock);
}

/* Outside a new PID namespace kill(-1) would reach the host: init refuses. */
static void test_refuses_to_run_unless_pid_1(void **state) {
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (dup2(sv[1], AGENT_FD) < 0)
                        _exit(102);
                char *argv[] = { (char *)"sandbox-init", NULL }, *envp[] = { NULL };
                execve(init_binary(), argv, envp);
                _exit(103);
        }
        close(sv[1]);
        init_proc ip = { .sock = sv[0], .pid = pid };
        cJSON *ev = recv_event(&ip);
        assert_non_null(ev);
        assert_string_equal(ev_str(ev, "ev"), "error");
        cJSON_Delete(ev);
        assert_int_equal(wait_init(&ip), 1);
        close(sv[0]);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, start, stop)
        const struct CMUnitTest tests[] = {
                T(test_stdout_and_stderr_are_separate_and_exit_code_is_reported),
                T(test_death_by_signal_is_128_plus_signal),
                T(test_all_output_arrives_before_exit),
                T(test_a_command_window_holds_its_output_until_credit),
                T(test_missing_command_exits_127_without_starting),
                T(test_non_executable_file_exits_126),
                T(test_missing_cwd_is_reported),
                T(test_cwd_env_and_user_apply),
                T(test_command_gets_only_stdio_and_no_new_privs),
                T(test_stdin_is_relayed_and_closed),
                T(test_without_stdin_reads_end_of_file),
                T(test_tty_command_gets_a_pty_and_sees_resize),
                T(test_kill_signals_the_process_group),
                T(test_background_grandchild_does_not_delay_exit),
                T(test_command_starts_with_default_signals_and_null_stdin),
                T(test_malformed_packets_get_errors_and_init_keeps_serving),
                T(test_fs_operations_over_the_socket),
                T(test_command_filter_handed_over_is_installed_and_kept),
                T(test_stop_terminates_commands_and_exits_zero),
                T(test_stop_kills_after_grace_when_term_is_ignored),
                T(test_socket_close_stops_everything),
                cmocka_unit_test(test_reconnect_keeps_commands_and_lists_them),
                cmocka_unit_test(test_first_packet_must_be_setup),
                cmocka_unit_test(test_refuses_to_run_unless_pid_1),
        };
#undef T
        int failed = cmocka_run_group_tests_name("init-agent", tests, NULL, NULL);
        /* The commands again, each child with a copy of init's memory (the
         * fallback where fs.suid_dumpable is 1). */
        init_env = "SANDBOX_INIT_SPAWN=copy";
        failed += cmocka_run_group_tests_name("init-agent (copied memory)", tests, NULL, NULL);
        return failed;
}
