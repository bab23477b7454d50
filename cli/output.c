/* sandboxctl's reporting and human output: error lines and exit codes,
 * connection failures with a hint, pretty JSON, "key: value" lines and
 * aligned tables, and the escaping of text from a sandbox or a client
 * before it reaches the operator's terminal (ctl_fput_escaped). */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "libcore/macro.h"
#include "cli/ctl.h"

bool ctl_json_errors;

/* Length of the valid UTF-8 sequence at p (2 to 4) and its code point in
 * *ret_cp, or 0 when p does not start one: overlong forms, surrogates and
 * code points above U+10FFFF are invalid (RFC 3629 §4). */
static size_t utf8_sequence(const unsigned char *p, uint32_t *ret_cp) {
        size_t n;
        uint32_t cp, min;
        if (p[0] >= 0xc2 && p[0] <= 0xdf)
                n = 2, cp = p[0] & 0x1f, min = 0x80;
        else if (p[0] >= 0xe0 && p[0] <= 0xef)
                n = 3, cp = p[0] & 0x0f, min = 0x800;
        else if (p[0] >= 0xf0 && p[0] <= 0xf4)
                n = 4, cp = p[0] & 0x07, min = 0x10000;
        else
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((p[i] & 0xc0) != 0x80)   /* also stops at the terminating NUL */
                        return 0;
                cp = cp << 6 | (p[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        *ret_cp = cp;
        return n;
}

/* Threat: file names, command lines, tags, metadata and messages are chosen
 * by code in a sandbox or by another client; written raw, ESC, BEL or CSI
 * sequences would retitle, clear or rewrite the operator's terminal, and a
 * newline would forge whole lines of output (a fake "deleted file" line in
 * fs watch). Every byte that a terminal may act on is therefore shown as
 * text; printable UTF-8 (and the backslash) pass unchanged, as
 * sandboxctl(1) "OUTPUT" documents. */
void ctl_fput_escaped(FILE *f, const char *s) {
        const unsigned char *p = (const unsigned char *) s;
        while (p && *p) {
                uint32_t cp = 0;
                size_t n = *p < 0x80 ? 1 : utf8_sequence(p, &cp);
                if (n == 1 && *p >= 0x20 && *p != 0x7f)
                        fputc(*p, f);
                else if (*p == '\n')
                        fputs("\\n", f);
                else if (*p == '\r')
                        fputs("\\r", f);
                else if (*p == '\t')
                        fputs("\\t", f);
                else if (n == 1 || n == 0) {   /* C0, DEL, or a byte of no valid sequence */
                        fprintf(f, "\\x%02x", *p);
                        n = 1;
                } else if (cp >= 0x80 && cp <= 0x9f)   /* C1: 0x9b is CSI on some terminals */
                        fprintf(f, "\\u%04x", (unsigned) cp);
                else
                        fwrite(p, 1, n, f);
                p += n;
        }
}

void ctl_puts_escaped(const char *s) {
        ctl_fput_escaped(stdout, s);
        putchar('\n');
}

char *ctl_escape(const char *s) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return NULL;
        ctl_fput_escaped(f, s);
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
}

/* The JSON-RPC code and reason an error sandboxctl found itself is given
 * in --json mode, from the exit code it returns: a usage error is what the
 * daemon's -32602 is for a value it refuses. */
static void local_error_kind(int exit_code, int *ret_code, const char **ret_reason) {
        *ret_code = exit_code == CLI_EXIT_USAGE ? -32602 : -32000;
        *ret_reason = exit_code == CLI_EXIT_USAGE         ? "usage"
                      : exit_code == CLI_EXIT_UNREACHABLE ? "unreachable"
                      : exit_code == CLI_EXIT_NOT_FOUND   ? "not_found"
                      : exit_code == CLI_EXIT_INTERRUPTED ? "interrupted"
                                                          : "failed";
}

void ctl_print_error_json(int code, const char *message, const char *reason, const char *field, int exit_code,
                          cJSON *extra) {
        _cleanup_json_ cJSON *j = cJSON_CreateObject();
        cJSON *e = j ? cJSON_AddObjectToObject(j, "error") : NULL;
        cJSON *data = e ? cJSON_CreateObject() : NULL;
        if (!data) {
                cJSON_Delete(extra);
                fputs("{\"error\":{\"code\":-32603,\"message\":\"out of memory\",\"data\":null}}\n", stderr);
                return;
        }
        cJSON_AddNumberToObject(e, "code", code);
        cJSON_AddStringToObject(e, "message", message ? message : "");
        if (reason)
                cJSON_AddStringToObject(data, "reason", reason);
        if (field)
                cJSON_AddStringToObject(data, "field", field);
        cJSON_AddNumberToObject(data, "exitCode", exit_code);
        for (cJSON *x = extra ? extra->child : NULL; x; x = extra->child)
                cJSON_AddItemToObject(data, x->string, cJSON_DetachItemViaPointer(extra, x));
        cJSON_Delete(extra);
        cJSON_AddItemToObject(e, "data", data);
        _cleanup_free_ char *text = cJSON_PrintUnformatted(j);
        if (text)
                fprintf(stderr, "%s\n", text);
}

/* Prints one error line, or in --json mode the error object; a notice
 * (exit_code 0) is left out in --json mode, where the result carries it. */
static int report_line(int exit_code, const char *text) {
        if (!ctl_json_errors) {
                fputs("sandboxctl: ", stderr);
                ctl_fput_escaped(stderr, text);
                fputc('\n', stderr);
                return exit_code;
        }
        if (exit_code == 0)
                return 0;
        int code;
        const char *reason;
        local_error_kind(exit_code, &code, &reason);
        ctl_print_error_json(code, text, reason, NULL, exit_code, NULL);
        return exit_code;
}

int ctl_error(int exit_code, const char *fmt, ...) {
        va_list ap;
        _cleanup_free_ char *text = NULL;
        va_start(ap, fmt);
        if (vasprintf(&text, fmt, ap) < 0)
                text = NULL;
        va_end(ap);
        return report_line(exit_code, text ? text : "out of memory");
}

char *const *ctl_option_argv;
/* What the last ctl_getopt_long '?' was about. */
static enum { OPTION_UNKNOWN, OPTION_MISSING_VALUE, OPTION_NO_VALUE, OPTION_AMBIGUOUS } option_problem;

int ctl_getopt_long(int argc, char *const *argv, const char *shortopts, const struct option *longopts,
                    int *longindex) {
        /* A leading ':' makes getopt return ':' for a missing argument; it
         * goes after a leading '+' or '-'. */
        char spec[64];
        size_t lead = shortopts[0] == '+' || shortopts[0] == '-' ? 1 : 0;
        snprintf(spec, sizeof spec, "%.*s:%s", (int) lead, shortopts, shortopts + lead);
        opterr = 0;
        ctl_option_argv = argv;
        int opt = getopt_long(argc, argv, spec, longopts, longindex);
        option_problem = opt == ':' ? OPTION_MISSING_VALUE : OPTION_UNKNOWN;
        if (opt == '?' && optind > 0 && strncmp(argv[optind - 1], "--", 2) == 0) {
                /* A known option given "=VALUE" it does not take, or a
                 * prefix of more than one option. */
                const char *arg = argv[optind - 1] + 2;
                size_t n = strcspn(arg, "="), matches = 0;
                for (const struct option *o = longopts; o && o->name; o++)
                        if (strncmp(o->name, arg, n) == 0)
                                matches++;
                if (optopt != 0 && arg[n] == '=')
                        option_problem = OPTION_NO_VALUE;
                else if (matches > 1)
                        option_problem = OPTION_AMBIGUOUS;
        }
        return opt == ':' ? '?' : opt;
}

/* The option getopt just refused, as typed ("--nmae", "-x"), into buf. */
static const char *refused_option(char *buf, size_t size) {
        if (optopt > 0 && optopt < 256 && !(ctl_option_argv && optind > 0 &&
                                             strncmp(ctl_option_argv[optind - 1], "--", 2) == 0)) {
                snprintf(buf, size, "-%c", optopt);
                return buf;
        }
        if (!ctl_option_argv || optind < 1)
                return NULL;
        const char *arg = ctl_option_argv[optind - 1];
        snprintf(buf, size, "%.*s", (int) strcspn(arg, "="), arg);
        return buf;
}

int ctl_usage(const char *command, const char *fmt, ...) {
        size_t n = strlen(fmt), tail = strlen("unknown option");
        char buf[256];
        const char *bad = n >= tail && streq(fmt + n - tail, "unknown option") ? refused_option(buf, sizeof buf) : NULL;
        _cleanup_free_ char *text = NULL;
        if (bad) {
                /* One line: what was wrong, and where the options are. */
                static const char *const after[] = {
                        [OPTION_UNKNOWN] = "", [OPTION_MISSING_VALUE] = " needs a value",
                        [OPTION_NO_VALUE] = " takes no value", [OPTION_AMBIGUOUS] = " is ambiguous",
                };
                if (asprintf(&text, "%s%s%s '%s'%s; see 'sandboxctl %s%s--help'", command ? command : "",
                             command ? ": " : "", option_problem == OPTION_UNKNOWN ? "unrecognized option" : "option",
                             bad, after[option_problem], command ? command : "", command ? " " : "") < 0)
                        text = NULL;
                return report_line(CLI_EXIT_USAGE, text ? text : "usage error");
        }
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&text, fmt, ap) < 0)
                text = NULL;
        va_end(ap);
        if (ctl_json_errors)
                return report_line(CLI_EXIT_USAGE, text ? text : "usage error");
        fputs("sandboxctl: ", stderr);
        ctl_fput_escaped(stderr, text ? text : "usage error");
        if (command)
                fprintf(stderr, "\nTry 'sandboxctl %s --help'.\n", command);
        else
                fputs("\nTry 'sandboxctl --help'.\n", stderr);
        return CLI_EXIT_USAGE;
}

int ctl_report(const ctl_globals *g, const char *context, const client_error *e) {
        if (!e)
                return ctl_error(CLI_EXIT_ERROR, "%s%sout of memory", context ? context : "",
                                 context ? ": " : "");
        /* The verb is the context's first word ("snapshots export" →
         * "snapshots"): it decides how a field is spelled on the command line. */
        _cleanup_free_ char *verb = context ? strndup(context, strcspn(context, " ")) : NULL;
        _cleanup_free_ char *text = cli_error_text(verb, e);
        int exit_code = cli_exit_code(e);
        if (!ctl_json_errors && !(g && g->json)) {
                /* The message may quote a path or name from the sandbox. */
                fputs("sandboxctl: ", stderr);
                ctl_fput_escaped(stderr, context);
                fputs(context ? ": " : "", stderr);
                ctl_fput_escaped(stderr, text ? text : e->message);
                fputc('\n', stderr);
                return exit_code;
        }
        _cleanup_free_ char *line = NULL;
        if (asprintf(&line, "%s%s%s", context ? context : "", context ? ": " : "", text ? text : e->message) < 0)
                line = NULL;
        /* CLIENT_ERROR_LOCAL: no answer from the daemon (the connection
         * failed or the answer was unreadable; reason says which). */
        int code = e->code == CLIENT_ERROR_LOCAL ? -32000 : e->code;
        ctl_print_error_json(code, line ? line : e->message, e->reason, e->field, exit_code, NULL);
        return exit_code;
}

static const char *flag_or_env(const char *flag, const char *env) {
        if (flag && flag[0])
                return flag;
        const char *e = getenv(env);
        return e && e[0] ? e : NULL;
}

/* Connects as ctl_connect does, printing nothing: 0, or a negative errno
 * with *ret_where (the socket or host) and, for TLS, *ret_msg (caller
 * frees) saying what failed. */
static int connect_quiet(const ctl_globals *g, client **ret, const char **ret_where, char **ret_msg) {
        /* --socket names the local daemon even when $SANDBOXD_HOST is set. */
        const char *host = g->host && g->host[0] ? g->host : g->socket ? NULL : flag_or_env(NULL, CLIENT_HOST_ENV);
        *ret_msg = NULL;
        if (host) {
                *ret_where = host;
                return client_connect_tls(host, flag_or_env(g->cert, CLIENT_CERT_ENV), flag_or_env(g->key, CLIENT_KEY_ENV),
                                          flag_or_env(g->ca, CLIENT_CA_ENV), ret, ret_msg);
        }
        *ret_where = client_socket_path(g->socket);
        return client_connect(*ret_where, ret);
}

int ctl_connect(const ctl_globals *g, client **ret) {
        const char *where = NULL;
        _cleanup_free_ char *msg = NULL;
        int r = connect_quiet(g, ret, &where, &msg);
        if (r >= 0)
                return 0;
        bool tls = g->host && g->host[0] ? true : g->socket ? false : flag_or_env(NULL, CLIENT_HOST_ENV) != NULL;
        if (tls)
                return ctl_error(r == -EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_UNREACHABLE, "cannot connect to sandboxd at %s: %s",
                                 where, msg ? msg : strerror(-r));
        const char *hint = "is it running? Try 'systemctl start sandboxd', "
                           "or point --socket / $" CLIENT_SOCKET_ENV " at its socket";
        if (r == -EACCES || r == -EPERM)
                hint = "connecting needs root or membership in group 'sandboxd'";
        return ctl_error(CLI_EXIT_UNREACHABLE, "cannot connect to sandboxd at %s: %s (%s)",
                         where, strerror(-r), hint);
}

int ctl_reconnect(const ctl_globals *g, unsigned wait_ms, client **ret) {
        for (unsigned waited = 0; waited < wait_ms; waited += 100) {
                const char *where = NULL;
                _cleanup_free_ char *msg = NULL;
                int r = connect_quiet(g, ret, &where, &msg);
                if (r >= 0)
                        return 0;
                if (r == -EINVAL || r == -EACCES || r == -EPERM)
                        break;
                struct timespec ts = { 0, 100 * 1000000L };
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        return ctl_connect(g, ret);
}

int ctl_call(const ctl_globals *g, const char *context, const char *method, cJSON *params, cJSON **ret) {
        _cleanup_client_ client *c = NULL;
        int r = ctl_connect(g, &c);
        if (r != 0) {
                cJSON_Delete(params);
                return r;
        }
        _cleanup_client_error_ client_error *err = NULL;
        if (client_call(c, method, params, -1, NULL, NULL, ret, &err) < 0)
                return ctl_report(g, context, err);
        return 0;
}

void ctl_print_json(const cJSON *json) {
        _cleanup_free_ char *text = cJSON_Print(json);
        if (text)
                printf("%s\n", text);
}

static bool all_scalars(const cJSON *array) {
        const cJSON *item;
        cJSON_ArrayForEach(item, array)
                if (cJSON_IsObject(item) || cJSON_IsArray(item))
                        return false;
        return true;
}

/* Appends the text of a scalar to f: strings escaped (ctl_fput_escaped),
 * null "-", others as JSON. */
static void print_scalar(FILE *f, const cJSON *v) {
        if (cJSON_IsString(v))
                ctl_fput_escaped(f, v->valuestring);
        else if (cJSON_IsNull(v))
                fputc('-', f);
        else {
                _cleanup_free_ char *t = cJSON_PrintUnformatted(v);
                fputs(t ? t : "?", f);
        }
}

static void print_field(const char *key, const cJSON *v) {
        if (cJSON_IsObject(v) && v->child) {
                for (const cJSON *c = v->child; c; c = c->next) {
                        _cleanup_free_ char *k = NULL;
                        if (asprintf(&k, "%s.%s", key, c->string) >= 0)
                                print_field(k, c);
                }
                return;
        }
        if (cJSON_IsArray(v) && !all_scalars(v)) {
                int i = 0;
                for (const cJSON *c = v->child; c; c = c->next, i++) {
                        _cleanup_free_ char *k = NULL;
                        if (asprintf(&k, "%s[%d]", key, i) >= 0)
                                print_field(k, c);
                }
                return;
        }
        /* Keys of tags and metadata are a client's text too. */
        ctl_fput_escaped(stdout, key);
        fputs(": ", stdout);
        if (cJSON_IsArray(v)) {
                if (!v->child)
                        fputc('-', stdout);
                for (const cJSON *c = v->child; c; c = c->next) {
                        print_scalar(stdout, c);
                        if (c->next)
                                fputs(", ", stdout);
                }
        } else if (cJSON_IsObject(v))
                fputc('-', stdout);   /* an empty object */
        else
                print_scalar(stdout, v);
        fputc('\n', stdout);
}

void ctl_print_fields(const cJSON *obj) {
        for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next)
                print_field(c->string, c);
}

void ctl_print_table(const char *const *header, size_t ncols, char ***rows, size_t nrows) {
        size_t width[16] = { 0 };
        if (ncols > ELEMENTSOF(width))
                ncols = ELEMENTSOF(width);
        /* Cells escaped before measuring, so the columns line up with what
         * is printed; a cell that cannot be escaped (out of memory) prints
         * "?" rather than raw. */
        _cleanup_free_ char **esc = calloc(nrows * ncols + 1, sizeof(char *));
        if (!esc)
                return;
        for (size_t i = 0; i < nrows; i++)
                for (size_t j = 0; j < ncols; j++)
                        esc[i * ncols + j] = rows[i][j] ? ctl_escape(rows[i][j]) : NULL;
        for (size_t j = 0; j < ncols; j++) {
                width[j] = strlen(header[j]);
                for (size_t i = 0; i < nrows; i++) {
                        const char *e = esc[i * ncols + j];
                        size_t n = e ? strlen(e) : 1;
                        if (n > width[j])
                                width[j] = n;
                }
        }
        for (size_t i = 0; i <= nrows; i++)
                for (size_t j = 0; j < ncols; j++) {
                        const char *cell = i == 0 ? header[j] : esc[(i - 1) * ncols + j];
                        if (!cell)
                                cell = i > 0 && rows[i - 1][j] ? "?" : "-";
                        if (j + 1 == ncols)
                                printf("%s\n", cell);
                        else
                                printf("%-*s  ", (int) width[j], cell);
                }
        for (size_t k = 0; k < nrows * ncols; k++)
                free(esc[k]);
}

int ctl_write_all(int fd, const void *buf, size_t len) {
        const char *p = buf;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                p += n;
                len -= (size_t) n;
        }
        return 0;
}
