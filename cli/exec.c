/* `sandboxctl exec`: runs a command in a sandbox and relays its I/O.
 *
 * Three shapes (docs/man/sandboxctl.1):
 *   plain      command.run waits for the exit; output notifications stream
 *              to our stdout/stderr meanwhile; we exit with its code.
 *   --detach   command.run detached; print the cmdId.
 *   -i / -t    command.run detached (with a pty for -t), then one poll()
 *              loop pumps our stdin to command.write, output to our
 *              stdout/stderr, SIGWINCH to command.resize, until command.exit.
 * Signals reach the loop through a self-pipe so that nothing but write()
 * runs in a handler. With -t the terminal is raw and is put back by an
 * atexit() hook on every way out (normal return, exit() from a signal path,
 * errors). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

static const char exec_help[] =
        "Usage: sandboxctl exec [OPTIONS] NAME -- CMD [ARG...]\n\n"
        "Runs CMD in sandbox NAME as user 'sandbox' and relays its output; exits with\n"
        "the command's exit code (128+N when killed by signal N).\n\n"
        "  --sudo               run as root\n"
        "  --cwd DIR            working directory (default /workspace)\n"
        "  --container NAME     run it in that container of the sandbox (container.create)\n"
        "  --env K=V            environment variable (repeatable)\n"
        "  --timeout DURATION   kill the command after 90s, 5m, 2h, 1d or milliseconds\n"
        "  --detach             start it, print its command id, and return; reach it\n"
        "                       later with sandboxctl command get|wait|kill|logs ID\n"
        "  -i, --interactive    send our stdin to the command\n"
        "  -t, --tty            run it on a terminal (our terminal goes raw meanwhile)\n\n"
        "Ctrl-C (without -t) sends SIGINT to the command; a second Ctrl-C leaves at once\n"
        "with status 130. A command whose id is not known yet (it has printed nothing)\n"
        "is not waited for: sandboxctl leaves with 130 and sandboxd hangs the command up\n"
        "(SIGHUP), as a closed terminal would. So does any exit of sandboxctl while a\n"
        "command it started without --detach still runs.\n";

typedef struct exec_opts {
        bool sudo, detach, interactive, tty;
        const char *cwd;
        const char *container; /* command.run "container", or NULL */
        int64_t timeout_ms;
        cJSON *env;           /* owned */
        const char *name;
        char **cmd;           /* NULL-terminated, borrowed from argv */
} exec_opts;

/* State of one relayed command. */
typedef struct session {
        const ctl_globals *g;
        client *c;
        exec_opts *o;
        bool detached;        /* command.run was detached (-i / -t) */
        int64_t run_id;       /* request id of command.run */
        char *cmd_id;         /* known from the run answer or the first notification */
        bool stdin_open;
        /* One command.write at a time: sandboxd answers each once
         * sandbox-init has queued it, or refuses it whole (limit_exceeded)
         * while the command has 16 MiB of input unread; the refused one is
         * sent again, and nothing after it goes first. */
        int64_t write_id;     /* the write in flight, 0 when none */
        char *write_b64;      /* its data, kept for a retry */
        bool write_retry;     /* refused: send write_b64 again after a pause */
        bool kill_pending;    /* Ctrl-C came before the cmdId was known */
        int interrupts;
        bool done;
        int exit_code;
} session;

/* Pause before a write refused for a full stdin queue is sent again. */
#define WRITE_RETRY_MS 20

static int signal_pipe[2] = { -1, -1 };
static struct termios saved_termios;
static bool termios_saved;

static void restore_terminal(void) {
        if (termios_saved) {
                tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
                termios_saved = false;
        }
}

static void on_signal(int sig) {
        int saved = errno;
        unsigned char b = (unsigned char) sig;
        (void) !write(signal_pipe[1], &b, 1);
        errno = saved;
}

/* Installs the self-pipe handlers. SA_RESTART is left off on purpose so
 * blocking calls return EINTR and the loop sees the byte promptly. */
static int setup_signals(bool tty) {
        if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
                return negative_errno();
        struct sigaction sa = { .sa_handler = on_signal };
        sigemptyset(&sa.sa_mask);
        int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGWINCH };
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
                if (sigs[i] == SIGWINCH && !tty)
                        continue;
                if (sigaction(sigs[i], &sa, NULL) < 0)
                        return negative_errno();
        }
        return 0;
}

/* Puts our terminal in raw mode so every key (Ctrl-C included) goes to the
 * remote pty. The atexit hook is registered before the change, so no path
 * out of the process can leave the terminal raw. */
static int make_raw(void) {
        if (!isatty(STDIN_FILENO))
                return 0;
        if (tcgetattr(STDIN_FILENO, &saved_termios) < 0)
                return negative_errno();
        atexit(restore_terminal);
        termios_saved = true;
        struct termios raw = saved_termios;
        cfmakeraw(&raw);
        if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) < 0)
                return negative_errno();
        return 0;
}

static void window_size(int *rows, int *cols) {
        struct winsize ws = {};
        if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0)
                if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0)
                        ws = (struct winsize) { .ws_row = 24, .ws_col = 80 };
        *rows = ws.ws_row;
        *cols = ws.ws_col;
}

static cJSON *run_params(const exec_opts *o, bool detached) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "sandbox", o->name);
        cJSON_AddStringToObject(p, "cmd", o->cmd[0]);
        cJSON *args = cJSON_AddArrayToObject(p, "args");
        for (char **a = o->cmd + 1; *a; a++)
                cJSON_AddItemToArray(args, cJSON_CreateString(*a));
        if (o->cwd)
                cJSON_AddStringToObject(p, "cwd", o->cwd);
        if (o->container)
                cJSON_AddStringToObject(p, "container", o->container);
        if (o->env && o->env->child)
                cJSON_AddItemToObject(p, "env", cJSON_Duplicate(o->env, true));
        if (o->sudo)
                cJSON_AddBoolToObject(p, "sudo", true);
        if (o->timeout_ms > 0)
                cJSON_AddNumberToObject(p, "timeoutMs", (double) o->timeout_ms);
        if (detached)
                cJSON_AddBoolToObject(p, "detached", true);
        if (o->tty) {
                int rows, cols;
                window_size(&rows, &cols);
                cJSON_AddBoolToObject(p, "tty", true);
                cJSON_AddNumberToObject(p, "rows", rows);
                cJSON_AddNumberToObject(p, "cols", cols);
        }
        return p;
}

/* Sends a command.* request about our command; its answer is read by the
 * loop and ignored unless it is an error worth reporting. */
static int send_cmd(session *s, const char *method, cJSON *params) {
        if (!params)
                params = cJSON_CreateObject();
        cJSON_AddStringToObject(params, "cmdId", s->cmd_id);
        int64_t id = client_send(s->c, method, params);
        return id < 0 ? (int) id : 0;
}

static int send_interrupt(session *s) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddStringToObject(p, "signal", "INT");
        return send_cmd(s, "command.kill", p);
}

static int learn_cmd_id(session *s, const cJSON *obj) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "cmdId");
        if (s->cmd_id || !cJSON_IsString(id))
                return 0;
        s->cmd_id = strdup(id->valuestring);
        if (!s->cmd_id)
                return -ENOMEM;
        if (s->kill_pending) {
                s->kill_pending = false;
                return send_interrupt(s);
        }
        return 0;
}

static int exit_code_of(const cJSON *obj) {
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(obj, "exitCode");
        return cJSON_IsNumber(code) ? code->valueint : CLI_EXIT_ERROR;
}

/* A memory size for people: "2 GiB", "512 MiB". */
static const char *format_bytes(double bytes, char *buf, size_t size) {
        static const double gib = 1024.0 * 1024 * 1024, mib = 1024.0 * 1024;
        if (bytes >= gib)
                snprintf(buf, size, "%g GiB", bytes / gib);
        else
                snprintf(buf, size, "%g MiB", bytes / mib);
        return buf;
}

/* Records the end of the command from a CommandFinished object. A bare 137
 * reads like an OOM kill or a crash; when the daemon says the --timeout or
 * the OOM killer killed it, one stderr line says so (the code stays the
 * command's). */
static void finish(session *s, const cJSON *obj) {
        s->exit_code = exit_code_of(obj);
        s->done = true;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, "timedOut"))) {
                char buf[24];
                ctl_error(0, "exec: command killed after its timeout (--timeout %s)",
                          cli_format_duration(s->o->timeout_ms, buf, sizeof(buf)));
        } else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, "oomKilled"))) {
                const cJSON *limit = cJSON_GetObjectItemCaseSensitive(obj, "memoryLimitBytes");
                char buf[32];
                if (cJSON_IsNumber(limit))
                        ctl_error(0, "killed: out of memory (limit %s; update --vcpus N raises it)",
                                  format_bytes(limit->valuedouble, buf, sizeof(buf)));
                else
                        ctl_error(0, "killed: out of memory (update --vcpus N raises the limit)");
        }
}

/* True when a notification is about another command than ours (possible
 * only once our id is known; before that everything on this connection is
 * ours). */
static bool not_ours(const session *s, const cJSON *params) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(params, "cmdId");
        return s->cmd_id && cJSON_IsString(id) && !streq(id->valuestring, s->cmd_id);
}

static int on_notification(session *s, const client_msg *m) {
        if (not_ours(s, m->params))
                return 0;
        int r = learn_cmd_id(s, m->params);
        if (r < 0)
                return r;
        if (streq(m->method, "command.output")) {
                const cJSON *stream = cJSON_GetObjectItemCaseSensitive(m->params, "stream");
                const cJSON *data = cJSON_GetObjectItemCaseSensitive(m->params, "data");
                _cleanup_free_ void *bytes = NULL;
                size_t len;
                if (!cJSON_IsString(data) || client_base64_decode(data->valuestring, &bytes, &len) < 0)
                        return -EBADMSG;
                bool err = cJSON_IsString(stream) && streq(stream->valuestring, "stderr");
                return ctl_write_all(err ? STDERR_FILENO : STDOUT_FILENO, bytes, len);
        }
        /* Without detach the run answer carries the code; wait for it. */
        if (streq(m->method, "command.exit") && s->detached)
                finish(s, m->params);
        return 0;
}

/* Handles a response. Returns 0, or an exit code (> 0) to leave with. */
static int send_write(session *s) {
        cJSON *p = cJSON_CreateObject();
        if (!p)
                return -ENOMEM;
        cJSON_AddStringToObject(p, "data", s->write_b64);
        cJSON_AddStringToObject(p, "cmdId", s->cmd_id);
        int64_t id = client_send(s->c, "command.write", p);
        if (id < 0)
                return (int) id;
        s->write_id = id;
        s->write_retry = false;
        return 0;
}

static int close_stdin(session *s) {
        s->stdin_open = false;
        return send_cmd(s, "command.closeStdin", NULL);
}

/* The answer to the write in flight. Refused for a full queue: sent
 * again after a pause. Any other error (the command ended, its stdin
 * closed) ends our input, as a broken pipe would. */
static int on_write_answer(session *s, client_msg *m) {
        s->write_id = 0;
        if (m->error && m->error->reason && streq(m->error->reason, "limit_exceeded")) {
                s->write_retry = true;
                return 0;
        }
        free(s->write_b64);
        s->write_b64 = NULL;
        if (m->error)
                s->stdin_open = false;
        return 0;
}

static int on_response(session *s, client_msg *m) {
        if (s->write_id && m->id == s->write_id)
                return on_write_answer(s, m);
        if (m->id != s->run_id) {
                /* write/closeStdin/resize/kill: an error there (the command
                 * just ended, say) is not worth more than the exit itself. */
                return 0;
        }
        if (m->error)
                return ctl_report(s->g, "exec", m->error);
        if (learn_cmd_id(s, m->result) < 0)
                return ctl_error(CLI_EXIT_ERROR, "exec: out of memory");
        if (!s->detached)
                finish(s, m->result);
        return 0;
}

/* Reads every message available without blocking. Returns 0 or an exit
 * code. */
static int drain_socket(session *s) {
        for (;;) {
                _cleanup_client_msg_ client_msg *m = NULL;
                int r = client_next(s->c, 0, &m);
                if (r == 0)
                        return 0;
                if (r == -EBADMSG)
                        continue;
                if (r < 0)
                        return ctl_error(r == -ECONNRESET ? CLI_EXIT_UNREACHABLE : CLI_EXIT_ERROR,
                                         "exec: connection to sandboxd: %s",
                                         r == -ECONNRESET ? "closed before the command ended" : strerror(-r));
                if (m->kind == CLIENT_MSG_NOTIFICATION)
                        r = on_notification(s, m);
                else
                        r = on_response(s, m);
                if (r < 0)
                        return ctl_error(CLI_EXIT_ERROR, "exec: %s", strerror(-r));
                if (r > 0 || s->done)
                        return r;
        }
}

/* Forwards one read of our stdin (only while no write is in flight).
 * EOF closes the command's stdin. */
static int pump_stdin(session *s) {
        char buf[256 * 1024];
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return 0;
        if (n <= 0)
                return close_stdin(s);
        s->write_b64 = client_base64_encode(buf, (size_t) n);
        if (!s->write_b64)
                return -ENOMEM;
        return send_write(s);
}

/* Acts on the signals queued in the self-pipe. Returns 0 or an exit code. */
static int handle_signals(session *s) {
        unsigned char sig;
        while (read(signal_pipe[0], &sig, 1) == 1) {
                if (sig == SIGWINCH) {
                        if (!s->cmd_id)
                                continue;
                        int rows, cols;
                        window_size(&rows, &cols);
                        cJSON *p = cJSON_CreateObject();
                        cJSON_AddNumberToObject(p, "rows", rows);
                        cJSON_AddNumberToObject(p, "cols", cols);
                        if (send_cmd(s, "command.resize", p) < 0)
                                return ctl_error(CLI_EXIT_UNREACHABLE, "exec: lost sandboxd");
                } else if (sig == SIGINT && ++s->interrupts < 2) {
                        /* No id to signal yet: a detached run's id is on its
                         * way; otherwise leaving closes the connection, and
                         * sandboxd hangs up commands whose caller left. */
                        if (!s->cmd_id && !s->detached)
                                return CLI_EXIT_INTERRUPTED;
                        if (!s->cmd_id)
                                s->kill_pending = true;
                        else if (send_interrupt(s) < 0)
                                return ctl_error(CLI_EXIT_UNREACHABLE, "exec: lost sandboxd");
                } else
                        return sig == SIGINT ? CLI_EXIT_INTERRUPTED : 128 + sig;
        }
        return 0;
}

static int relay(session *s) {
        while (!s->done) {
                int r = drain_socket(s);
                if (r != 0)
                        return r;
                if (s->done)
                        break;
                /* stdin is read only once the command id is known, since
                 * command.write needs it. */
                bool want_stdin = s->o->interactive && s->stdin_open && s->cmd_id && !s->write_id &&
                                  !s->write_retry;
                struct pollfd p[3] = {
                        { .fd = signal_pipe[0], .events = POLLIN },
                        { .fd = client_fd(s->c), .events = POLLIN },
                        { .fd = want_stdin ? STDIN_FILENO : -1, .events = POLLIN },
                };
                /* A refused write waits a little for the command to read
                 * (no event says when it has), output still relayed. */
                int n = poll(p, 3, s->write_retry ? WRITE_RETRY_MS : -1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return ctl_error(CLI_EXIT_ERROR, "exec: poll: %m");
                }
                if (n == 0 && s->write_retry && send_write(s) < 0)
                        return ctl_error(CLI_EXIT_UNREACHABLE, "exec: lost sandboxd while sending input");
                if (p[0].revents && (r = handle_signals(s)) != 0)
                        return r;
                if (p[2].revents && pump_stdin(s) < 0)
                        return ctl_error(CLI_EXIT_UNREACHABLE, "exec: lost sandboxd while sending input");
                /* p[1] is read by drain_socket at the top of the loop. */
        }
        return s->exit_code;
}

static int parse_exec(int argc, char **argv, exec_opts *o, ctl_globals *g) {
        enum { OPT_SOCKET = 1000, OPT_JSON, OPT_SUDO, OPT_CWD, OPT_ENV, OPT_DETACH, OPT_TIMEOUT, OPT_CONTAINER };
        static const struct option opts[] = {
                { "socket", required_argument, NULL, OPT_SOCKET },
                { "json", no_argument, NULL, OPT_JSON },
                { "help", no_argument, NULL, 'h' },
                { "sudo", no_argument, NULL, OPT_SUDO },
                { "cwd", required_argument, NULL, OPT_CWD },
                { "container", required_argument, NULL, OPT_CONTAINER },
                { "env", required_argument, NULL, OPT_ENV },
                { "detach", no_argument, NULL, OPT_DETACH },
                { "timeout", required_argument, NULL, OPT_TIMEOUT },
                { "interactive", no_argument, NULL, 'i' },
                { "tty", no_argument, NULL, 't' },
                {}
        };
        int opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "+hit", opts, NULL)) != -1)
                switch (opt) {
                case OPT_SOCKET: g->socket = optarg; break;
                case OPT_JSON: g->json = true; break;
                case 'h': fputs(exec_help, stdout); return -1;
                case OPT_SUDO: o->sudo = true; break;
                case OPT_CWD: o->cwd = optarg; break;
                case OPT_CONTAINER: o->container = optarg; break;
                case OPT_DETACH: o->detach = true; break;
                case 'i': o->interactive = true; break;
                case 't': o->tty = true; break;
                case OPT_ENV:
                        if (cli_kv_add(o->env, optarg) < 0)
                                return ctl_usage("exec", "exec: --env wants K=V, got '%s'", optarg);
                        break;
                case OPT_TIMEOUT:
                        if (cli_parse_duration(optarg, &o->timeout_ms) < 0)
                                return ctl_usage("exec", "exec: bad --timeout '%s'", optarg);
                        break;
                default: return ctl_usage("exec", "exec: unknown option");
                }
        if (optind >= argc)
                return ctl_usage("exec", "exec: missing NAME");
        o->name = argv[optind++];
        if (optind < argc && streq(argv[optind], "--"))
                optind++;
        if (optind >= argc)
                return ctl_usage("exec", "exec: missing command after NAME --");
        if (o->detach && (o->interactive || o->tty))
                return ctl_usage("exec", "exec: --detach does not go with -i or -t");
        o->cmd = argv + optind;
        return 0;
}

static int run_detached(const ctl_globals *g, client *c, const exec_opts *o) {
        _cleanup_client_error_ client_error *err = NULL;
        _cleanup_json_ cJSON *result = NULL;
        if (client_call(c, "command.run", run_params(o, true), -1, NULL, NULL, &result, &err) < 0)
                return ctl_report(g, "exec", err);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(result, "cmdId");
        if (g->json)
                ctl_print_json(result);
        else
                ctl_puts_escaped(cJSON_IsString(id) ? id->valuestring : "?");
        return 0;
}

int ctl_exec(ctl_globals *gp, int argc, char **argv) {
        ctl_globals g = *gp;
        _cleanup_json_ cJSON *env = cJSON_CreateObject();
        exec_opts o = { .env = env };
        int r = parse_exec(argc, argv, &o, &g);
        if (r != 0)
                return r < 0 ? 0 : r;

        _cleanup_client_ client *c = NULL;
        r = ctl_connect(&g, &c);
        if (r != 0)
                return r;
        if (o.detach)
                return run_detached(&g, c, &o);

        session s = { .g = &g, .c = c, .o = &o, .detached = o.interactive || o.tty,
                      .stdin_open = true };
        if (setup_signals(o.tty) < 0)
                return ctl_error(CLI_EXIT_ERROR, "exec: signals: %m");
        s.run_id = client_send(c, "command.run", run_params(&o, s.detached));
        if (s.run_id < 0)
                return ctl_error(CLI_EXIT_UNREACHABLE, "exec: sending to sandboxd: %s", strerror((int) -s.run_id));
        if (o.tty && make_raw() < 0)
                return ctl_error(CLI_EXIT_ERROR, "exec: cannot set the terminal to raw mode: %m");
        r = relay(&s);
        restore_terminal();
        free(s.cmd_id);
        free(s.write_b64);
        return r;
}
