/* Git sources: URL vetting (option injection, transports that run
 * programs) and cloning with libgit2 on a thread that runs as the sandbox
 * user (see source.h and source-internal.h).
 *
 * Shallow clones: libgit2 1.5 (Debian 12) has no shallow-fetch support
 * (git_fetch_options.depth arrived in libgit2 1.7). A source with `depth`
 * is cloned by the git program instead (git_cli_clone), in a child that
 * becomes the sandbox user, with an empty environment and every
 * config-driven program off: no system or global config, hooks to
 * /dev/null, no templates, no credential helpers or prompts, no submodules,
 * only the http, https and git transports (file only for the checked copy
 * of a local source), no redirects. The URL and address checks run first,
 * exactly as for libgit2. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netdb.h>
#include "libcore/base64.h"
#include <ctype.h>
#include <git2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "libcore/source-internal.h"
#include "libcore/source.h"
#include "libcore/util.h"

#define REASON "source_failed"
#define FIELD "source.url"

/* ---- URL check ------------------------------------------------------------ */

/* Allowed schemes. Left out on purpose: ssh (runs the ssh binary with
 * URL-derived arguments in git; needs keys we do not manage), ext (runs an
 * arbitrary command), fd, and any other `<transport>::` form. */
static const char *const allowed_schemes[] = {"https", "http", "git", "file"};

_printf_(2, 3) static int url_error(sb_error **ret_err, const char *fmt, ...) {
        _cleanup_free_ char *msg = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&msg, fmt, ap);
        va_end(ap);
        if (r < 0)
                return sb_error_set(ret_err, -EINVAL, REASON, FIELD, "source.url: invalid git URL");
        return sb_error_set(ret_err, -EINVAL, REASON, FIELD, "source.url: %s", msg);
}

static bool host_char_ok(char c) {
        /* DNS names, IPv4, bracketed IPv6 and a port. No '%' so an encoded
         * '-' or space cannot slip past the checks below. */
        return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_' || c == ':' || c == '[' ||
               c == ']';
}

/* Checks "user@host:port" (the authority, `len` bytes at `a`). */
static int check_authority(const char *a, size_t len, sb_error **ret_err) {
        const char *at = memrchr(a, '@', len);
        const char *host = at ? at + 1 : a;
        size_t hlen = len - (size_t)(host - a);
        if (at && (at == a || a[0] == '-'))
                return url_error(ret_err, "user part %s; it must not be empty or start with '-'",
                                 at == a ? "is empty" : "starts with '-'");
        if (hlen == 0)
                return url_error(ret_err, "the URL has no host; use scheme://host/path");
        if (host[0] == '-')
                return url_error(ret_err, "host starts with '-' (option injection); use a real host name");
        for (size_t i = 0; i < hlen; i++)
                if (!host_char_ok(host[i]))
                        return url_error(ret_err,
                                         "host contains a character that is not allowed (%s); use "
                                         "letters, digits, '.', '-' and an optional :port",
                                         host[i] == ' ' ? "space" : "control or special character");
        return 0;
}

/* Where "<transport>::" or "://" puts the scheme. Returns the length of the
 * scheme before "://", or 0 with *ret_err set. */
static int check_scheme(const char *url, sb_error **ret_err) {
        const char *sep = strstr(url, "://");
        const char *dc = strstr(url, "::");
        if (dc && (!sep || dc < sep)) {
                _cleanup_free_ char *t = strndup(url, (size_t)(dc - url));
                return url_error(ret_err,
                                 "transport '%s::' is not allowed; use an https, http, git or file "
                                 "URL",
                                 t ? t : "");
        }
        if (!sep) {
                if (strchr(url, ':'))
                        return url_error(ret_err, "scp-like 'host:path' URLs (ssh) are not allowed; use "
                                                  "https, http, git or file");
                return url_error(ret_err, "'%s' is not a URL; use https://, http://, git:// or file:///path",
                                 url);
        }
        size_t n = (size_t)(sep - url);
        for (size_t i = 0; i < ELEMENTSOF(allowed_schemes); i++)
                if (strlen(allowed_schemes[i]) == n && strncasecmp(url, allowed_schemes[i], n) == 0)
                        return (int)n;
        _cleanup_free_ char *s = strndup(url, n);
        return url_error(ret_err, "scheme '%s' is not allowed; use https, http, git or file", s ? s : "");
}

int core_git_url_check(const char *url, sb_error **ret_err) {
        if (!url || !url[0])
                return url_error(ret_err, "empty URL; use https, http, git or file");
        for (const char *p = url; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        return url_error(ret_err, "control characters are not allowed");
        if (url[0] == '-')
                return url_error(ret_err, "the URL starts with '-' (option injection); give a URL such as "
                                          "https://host/repo.git");
        int n = check_scheme(url, ret_err);
        if (n <= 0)
                return n < 0 ? n : -EINVAL;
        const char *auth = url + n + 3;
        size_t alen = strcspn(auth, "/");
        const char *path = auth + alen;
        if (strncasecmp(url, "file", 4) == 0 && n == 4) {
                if (alen != 0 && !(alen == 9 && strncasecmp(auth, "localhost", 9) == 0))
                        return url_error(ret_err, "file URLs must be local; use file:///path");
        } else {
                int r = check_authority(auth, alen, ret_err);
                if (r < 0)
                        return r;
        }
        if (path[0] != '/' || path[1] == '\0')
                return url_error(ret_err, "the URL has no repository path");
        if (path[1] == '-')
                return url_error(ret_err, "the path starts with '-' (option injection)");
        return 0;
}

/* ---- clone ---------------------------------------------------------------- */

static pthread_once_t git_once = PTHREAD_ONCE_INIT;
static int git_init_result;

/* libgit2 is initialised once for the process and never shut down (other
 * threads may still clone). The host's global, XDG and system gitconfig are
 * not read: an `url.*.insteadOf` or proxy setting of the machine's root
 * account has no business rewriting a sandbox's source. */
static void git_init_once(void) {
        git_init_result = git_libgit2_init();
        if (git_init_result < 0)
                return;
        static const int levels[] = {GIT_CONFIG_LEVEL_PROGRAMDATA, GIT_CONFIG_LEVEL_SYSTEM,
                                     GIT_CONFIG_LEVEL_XDG, GIT_CONFIG_LEVEL_GLOBAL};
        for (size_t i = 0; i < ELEMENTSOF(levels); i++)
                git_libgit2_opts(GIT_OPT_SET_SEARCH_PATH, levels[i], "");
        /* The new repository is owned by the sandbox user while the euid
         * stays 0, and a file:// source may belong to any account, so
         * libgit2's safe.directory ownership check would refuse both. That
         * check guards git's config-driven programs (fsmonitor, hooks),
         * which libgit2 never runs; the data is only read. */
        git_libgit2_opts(GIT_OPT_SET_OWNER_VALIDATION, 0);
}

typedef struct clone_job {
        const core_git_source *src;
        const char *dest_dir;
        uid_t uid;              /* the sandbox user, for the git program */
        gid_t gid;
        char *resolve;          /* http.curloptResolve for the git program, or NULL */
        bool creds_used;
} clone_job;

/* Replaces every occurrence of `secret` in msg by "<redacted>". Returns a
 * malloc'd string or NULL on ENOMEM. */
static char *redact(const char *msg, const char *secret) {
        size_t sl = secret ? strlen(secret) : 0;
        if (sl == 0)
                return strdup(msg);
        size_t cap = strlen(msg) * 10 / (sl < 10 ? sl : 10) + strlen(msg) + 1, o = 0;
        char *out = malloc(cap);
        if (!out)
                return NULL;
        for (const char *p = msg; *p;) {
                if (strncmp(p, secret, sl) == 0) {
                        memcpy(out + o, "<redacted>", 10);
                        o += 10;
                        p += sl;
                } else
                        out[o++] = *p++;
        }
        out[o] = 0;
        return out;
}

/* Fills *ret_err from libgit2's last error on this thread. */
static int git_fail(const clone_job *j, int r, const char *what, sb_error **ret_err) {
        const git_error *ge = git_error_last();
        _cleanup_free_ char *msg =
                redact(ge && ge->message ? ge->message : "unknown error", j->src->password);
        int code = r == GIT_ENOTFOUND ? -ENOENT : r == GIT_EAUTH ? -EACCES : -EIO;
        return sb_error_set(ret_err, code, REASON, NULL, "%s: %s", what, msg ? msg : "unknown error");
}

/* Offers the configured user/password once, over http(s) only: a second
 * call means the server refused them, and retrying would loop forever. */
static int credentials_cb(git_credential **out, const char *url, const char *user_from_url,
                          unsigned allowed_types, void *payload) {
        clone_job *j = payload;
        const core_git_source *s = j->src;
        bool http = strncasecmp(url, "https://", 8) == 0 || strncasecmp(url, "http://", 7) == 0;
        if (j->creds_used || !http || !s->username || !(allowed_types & GIT_CREDENTIAL_USERPASS_PLAINTEXT)) {
                git_error_set_str(GIT_ERROR_NET,
                                  j->creds_used ? "authentication failed" : "authentication required");
                return GIT_EAUTH;
        }
        j->creds_used = true;
        return git_credential_userpass_plaintext_new(out, s->username, s->password ? s->password : "");
}

static void checkout_progress_cb(const char *path, size_t completed_steps, size_t total_steps, void *payload);

static int checkout_revision(clone_job *j, git_repository *repo, sb_error **ret_err) {
        const char *rev = j->src->revision;
        git_object *obj = NULL, *commit = NULL;
        int r = git_revparse_single(&obj, repo, rev);
        if (r == GIT_ENOTFOUND) {
                /* A branch other than the default exists only as origin/<name>. */
                _cleanup_free_ char *remote = NULL;
                if (asprintf(&remote, "origin/%s", rev) < 0)
                        return -ENOMEM;
                r = git_revparse_single(&obj, repo, remote);
                if (r == GIT_ENOTFOUND)
                        git_error_set_str(GIT_ERROR_REFERENCE, "no commit, tag or branch of that name");
        }
        if (r >= 0)
                r = git_object_peel(&commit, obj, GIT_OBJECT_COMMIT);
        if (r < 0) {
                git_object_free(obj);
                return git_fail(j, r, "resolve revision", ret_err);
        }
        git_checkout_options co = GIT_CHECKOUT_OPTIONS_INIT;
        co.checkout_strategy = GIT_CHECKOUT_FORCE;
        co.progress_cb = checkout_progress_cb;
        r = git_checkout_tree(repo, commit, &co);
        if (r >= 0)
                r = git_repository_set_head_detached(repo, git_object_id(commit));
        if (r < 0)
                r = git_fail(j, r, "check out revision", ret_err);
        git_object_free(commit);
        git_object_free(obj);
        return r;
}

/* Creates "origin" without url.*.insteadOf rewriting: the URL that was
 * checked is the URL that is fetched. (It also avoids a libgit2 1.5 leak in
 * the insteadOf config scan, fixed upstream in libgit2 PR #6382.) */
static int remote_create_cb(git_remote **out, git_repository *repo, const char *name, const char *url,
                            void *payload) {
        git_remote_create_options o = GIT_REMOTE_CREATE_OPTIONS_INIT;
        o.repository = repo;
        o.name = name;
        o.flags = GIT_REMOTE_CREATE_SKIP_INSTEADOF;
        return git_remote_create_with_opts(out, url, &o);
}

static int clone_from(clone_job *j, const char *url, sb_error **ret_err);

static bool is_file_url(const char *url) {
        return strncasecmp(url, "file://", 7) == 0;
}

/* Runs on the confined thread (fsuid/fsgid = the sandbox user). A file://
 * repository is first copied, checked entry by entry (source-local.c), and
 * libgit2 clones from the copy: it opens repositories by path and follows
 * alternates, gitfiles and symlinks, so it never sees the original. */
static int clone_confined(void *userdata, sb_error **ret_err) {
        clone_job *j = userdata;
        source_progress("cloning", 0, 0, 0, 0);
        if (!is_file_url(j->src->url))
                return clone_from(j, j->src->url, ret_err);
        _cleanup_free_ char *path = NULL, *copy = NULL, *url = NULL;
        int r = source_file_url_path(j->src->url, &path, ret_err);
        if (r < 0)
                return r;
        if ((r = source_local_git_copy(j->src->local_roots, path, j->src->max_local_bytes, &copy, ret_err)) < 0)
                return r;
        if (asprintf(&url, "file://%s", copy) < 0)
                r = sb_error_set(ret_err, -ENOMEM, REASON, NULL, "out of memory");
        else
                r = clone_from(j, url, ret_err);
        int k = core_rm_rf(copy);
        if (k < 0 && r >= 0)
                r = sb_error_set(ret_err, k, REASON, NULL, "remove %s: %s", copy, strerror(-k));
        return r;
}

/* ---- shallow clones with the git program ---------------------------------- */

#define GIT_PROGRAM "/usr/bin/git"
#define GIT_ERR_MAX 4096

/* Options every git run gets, ahead of the subcommand: nothing in a
 * repository or on the host may make git run a program or reach a transport
 * we did not pick. Sources: git-config(1) (core.hooksPath, protocol.*,
 * credential.helper, core.askPass, http.followRedirects,
 * submodule.recurse, core.fsmonitor, init.templateDir), git(1)
 * (GIT_ALLOW_PROTOCOL, GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL). */
static const char *const git_safe_opts[] = {
        "-c", "core.hooksPath=/dev/null",
        "-c", "core.fsmonitor=false",
        "-c", "core.sshCommand=false",
        "-c", "core.askPass=",
        "-c", "credential.helper=",
        "-c", "init.templateDir=",
        "-c", "protocol.allow=never",
        "-c", "protocol.http.allow=always",
        "-c", "protocol.https.allow=always",
        "-c", "protocol.git.allow=always",
        "-c", "submodule.recurse=false",
        "-c", "fetch.recurseSubmodules=false",
        "-c", "http.followRedirects=false",
        "-c", "transfer.fsckObjects=true",
};

/* The progress lines `git --progress` writes (git's progress.c: "TITLE:
 * NN% (DONE/TOTAL)", then for received objects ", X.YY MiB | RATE"), as
 * the stages of core_source_progress. */
static const struct {
        const char *title, *stage;
} git_progress_titles[] = {
        {"Receiving objects: ", "cloning"},
        {"Resolving deltas: ", "resolving"},
        {"Updating files: ", "checking out"},
};

/* Reports one progress line of git (NUL-terminated, without its \r or
 * \n); *bytes keeps the last byte count seen. Other lines are ignored. */
static void git_progress_line(const char *line, uint64_t *bytes) {
        for (size_t i = 0; i < ELEMENTSOF(git_progress_titles); i++) {
                if (strncmp(line, git_progress_titles[i].title, strlen(git_progress_titles[i].title)) != 0)
                        continue;
                const char *paren = strchr(line, '(');
                unsigned long long done, total;
                if (!paren || sscanf(paren, "(%llu/%llu)", &done, &total) != 2)
                        return;
                /* strbuf_humanise_bytes(): "N bytes", "X.YY KiB", "MiB", "GiB". */
                const char *size = strstr(paren, "), ");
                double v;
                char unit[8];
                if (size && sscanf(size + 3, "%lf %7s", &v, unit) == 2 && v >= 0) {
                        double mult = streq(unit, "KiB") ? 1024.0 : streq(unit, "MiB") ? 1048576.0
                                    : streq(unit, "GiB") ? 1073741824.0 : 1.0;
                        *bytes = (uint64_t)(v * mult);
                }
                source_progress(git_progress_titles[i].stage, *bytes, 0, done, total);
                return;
        }
}

/* Runs `git <safe opts> [-c protocol.file.allow=always] ARGS...` as
 * uid:gid in cwd (NULL: /) and waits for it. On failure *ret_err carries
 * the last line git wrote to stderr (the password redacted). */
static int run_git(const clone_job *j, const char *cwd, uid_t uid, gid_t gid, bool allow_file,
                   const char *const *args, sb_error **ret_err) {
        const char *argv[64];
        size_t n = 0;
        argv[n++] = "git";
        for (size_t i = 0; i < ELEMENTSOF(git_safe_opts); i++)
                argv[n++] = git_safe_opts[i];
        argv[n++] = "-c";
        argv[n++] = allow_file ? "protocol.file.allow=always" : "protocol.file.allow=never";
        _cleanup_free_ char *pin = NULL;
        if (j->resolve) {
                if (asprintf(&pin, "http.curloptResolve=%s", j->resolve) < 0)
                        return sb_error_set(ret_err, -ENOMEM, REASON, NULL, "out of memory");
                argv[n++] = "-c";
                argv[n++] = pin;
        }
        for (size_t i = 0; args[i] && n < ELEMENTSOF(argv) - 1; i++)
                argv[n++] = args[i];
        argv[n] = NULL;
        /* Credentials go in the environment (git's GIT_CONFIG_COUNT), never
         * on the command line that every host user can read. */
        _cleanup_free_ char *auth = NULL, *header = NULL;
        bool http = strncasecmp(j->src->url, "http", 4) == 0;
        if (http && j->src->username) {
                _cleanup_free_ char *pair = NULL;
                if (asprintf(&pair, "%s:%s", j->src->username, j->src->password ? j->src->password : "") < 0 ||
                    !(auth = base64_encode(pair, strlen(pair))) ||
                    asprintf(&header, "GIT_CONFIG_VALUE_0=Authorization: Basic %s", auth) < 0) {
                        header = NULL;
                        return sb_error_set(ret_err, -ENOMEM, REASON, NULL, "out of memory");
                }
        }
        const char *envp[] = {
                "PATH=/usr/bin:/bin", "HOME=/nonexistent", "XDG_CONFIG_HOME=/nonexistent", "LC_ALL=C",
                "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
                "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false",
                allow_file ? "GIT_ALLOW_PROTOCOL=http:https:git:file" : "GIT_ALLOW_PROTOCOL=http:https:git",
                header ? "GIT_CONFIG_COUNT=1" : NULL, "GIT_CONFIG_KEY_0=http.extraHeader", header, NULL,
        };
        int errp[2];
        if (pipe2(errp, O_CLOEXEC) < 0)
                return sb_error_set(ret_err, negative_errno(), REASON, NULL, "clone: pipe: %m");
        pid_t pid = fork();
        if (pid < 0) {
                close(errp[0]);
                close(errp[1]);
                return sb_error_set(ret_err, negative_errno(), REASON, NULL, "clone: fork: %m");
        }
        if (pid == 0) {
                /* Child of a threaded process: raw syscalls only until exec.
                 * The sandbox user's ids, no groups, no new privileges, and
                 * killed with its parent. */
                int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(errp[1], 1) < 0 || dup2(errp[1], 2) < 0 ||
                    syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, gid, gid, gid) < 0 ||
                    syscall(SYS_setresuid, uid, uid, uid) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
                    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0 || chdir(cwd ? cwd : "/") < 0 ||
                    /* A group of its own, so a cancel kills its transport
                     * helpers (git-remote-http) too. */
                    setpgid(0, 0) < 0)
                        _exit(125);
                (void)close_range(3, ~0U, 0);
                core_signals_reset();
                execve(GIT_PROGRAM, (char **)argv, (char **)envp);
                _exit(127);
        }
        close(errp[1]);
        char buf[GIT_ERR_MAX + 1];
        size_t len = 0;
        bool cancelled = false;
        /* With a progress callback (and --progress in args), each line
         * git ends with \r or \n is read for its counts. */
        void *progress_userdata;
        bool progress = core_source_get_progress(&progress_userdata) != NULL;
        char pline[256];
        size_t plen = 0;
        uint64_t pbytes = 0;
        for (;;) {
                char tmp[1024];
                /* Woken at least every 200 ms to notice a cancellation:
                 * then git is killed (its helpers die of the closed pipes
                 * or PDEATHSIG) and the caller removes the partial clone. */
                struct pollfd pfd = {.fd = errp[0], .events = POLLIN};
                int pr = poll(&pfd, 1, 200);
                if (core_cancel_requested()) {
                        (void)kill(-pid, SIGKILL);
                        (void)kill(pid, SIGKILL);
                        cancelled = true;
                        break;
                }
                if (pr == 0 || (pr < 0 && errno == EINTR))
                        continue;
                ssize_t k = read(errp[0], tmp, sizeof(tmp));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                for (ssize_t i = 0; progress && i < k; i++) {
                        if (tmp[i] == '\r' || tmp[i] == '\n') {
                                pline[plen] = 0;
                                git_progress_line(pline, &pbytes);
                                plen = 0;
                        } else if (plen < sizeof(pline) - 1)
                                pline[plen++] = tmp[i];
                }
                /* Keep the tail: git's reason is its last line. */
                if ((size_t)k > GIT_ERR_MAX)
                        k = GIT_ERR_MAX;
                if (len + (size_t)k > GIT_ERR_MAX) {
                        size_t drop = len + (size_t)k - GIT_ERR_MAX;
                        memmove(buf, buf + drop, len - drop);
                        len -= drop;
                }
                memcpy(buf + len, tmp, (size_t)k);
                len += (size_t)k;
        }
        close(errp[0]);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        if (cancelled)
                return sb_error_set(ret_err, -ECANCELED, "cancelled", NULL, "clone: cancelled");
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
                len--;
        buf[len] = 0;
        const char *last = strrchr(buf, '\n');
        last = last ? last + 1 : buf;
        /* Progress (\r-separated) before the reason on the same line. */
        const char *cr = strrchr(last, '\r');
        if (cr && cr[1])
                last = cr + 1;
        _cleanup_free_ char *msg = redact(*last ? last : "git failed", j->src->password);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
                return sb_error_set(ret_err, -ENOENT, REASON, NULL, "clone: %s not found (install git)", GIT_PROGRAM);
        return sb_error_set(ret_err, -EIO, REASON, NULL, "clone: git %s: %s", args[0], msg ? msg : "failed");
}

/* For an http(s) URL: resolves its host now, refuses it when any address
 * is forbidden (core_source_address_forbidden), and stores
 * "HOST:PORT:ADDR,..." in j->resolve, so that git (libcurl's
 * CURLOPT_RESOLVE through http.curloptResolve, git-config(1)) connects to
 * exactly the addresses checked here: a name that re-resolves elsewhere
 * during the clone (DNS rebinding) is not followed. git:// has no such
 * option; its connect is covered by the check before the clone only. */
static int pin_http_addresses(clone_job *j, sb_error **ret_err) {
        const char *url = j->src->url;
        if (strncasecmp(url, "http://", 7) != 0 && strncasecmp(url, "https://", 8) != 0)
                return 0;
        CURLU *u = curl_url();
        char *host = NULL, *port = NULL;
        int bad = !u || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
                  curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK ||
                  curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) != CURLUE_OK;
        curl_url_cleanup(u);
        char name[256] = "";
        if (!bad) {
                size_t n = strlen(host);
                if (n >= 2 && host[0] == '[' && host[n - 1] == ']')
                        snprintf(name, sizeof(name), "%.*s", (int)(n - 2), host + 1);
                else
                        snprintf(name, sizeof(name), "%s", host);
        }
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        int r = bad ? sb_error_set(ret_err, -EINVAL, REASON, FIELD, "source.url: cannot find the host in the URL")
                    : getaddrinfo(name, NULL, &hints, &res) != 0
                              ? sb_error_set(ret_err, -EHOSTUNREACH, REASON, FIELD, "source.url: cannot resolve '%s'", name)
                              : 0;
        size_t cap = strlen(host ? host : "") + 16, len = 0;
        char *out = r < 0 ? NULL : malloc(cap);
        if (r == 0 && !out)
                r = sb_error_set(ret_err, -ENOMEM, REASON, NULL, "out of memory");
        size_t prefix = 0;
        if (out)
                prefix = len = (size_t)snprintf(out, cap, "%s:%s:", host, port);
        for (struct addrinfo *ai = res; ai && r == 0; ai = ai->ai_next) {
                const char *why = core_source_address_forbidden(ai->ai_addr);
                char a[INET6_ADDRSTRLEN + 3];
                if (why) {
                        r = sb_error_set(ret_err, -EACCES, REASON, FIELD, "source.url: refusing to fetch from '%s' (%s)",
                                         name, why);
                        break;
                }
                char txt[INET6_ADDRSTRLEN] = "";
                const void *bin = ai->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr
                                                            : (const void *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
                inet_ntop(ai->ai_family, bin, txt, sizeof(txt));
                snprintf(a, sizeof(a), ai->ai_family == AF_INET6 ? "[%s]" : "%s", txt);
                if (strstr(out + prefix, a)) /* getaddrinfo repeats an address per protocol */
                        continue;
                char *grown = realloc(out, cap += strlen(a) + 2);
                if (!grown) {
                        r = sb_error_set(ret_err, -ENOMEM, REASON, NULL, "out of memory");
                        break;
                }
                out = grown;
                len += (size_t)snprintf(out + len, cap - len, "%s%s", out[len - 1] == ':' ? "" : ",", a);
        }
        if (res)
                freeaddrinfo(res);
        curl_free(host);
        curl_free(port);
        if (r < 0) {
                free(out);
                return r;
        }
        j->resolve = out;
        return 0;
}

/* A shallow clone: `git clone --depth N` of the remote HEAD, or for a
 * revision init + fetch --depth N of exactly that revision (a branch, a tag,
 * or a commit the server lets us fetch by id) + a detached checkout. */
static int git_cli_clone(clone_job *j, const char *url, sb_error **ret_err) {
        char depth[32];
        /* depth 0 (a guarded full clone): --no-tags repeated is a no-op. */
        snprintf(depth, sizeof(depth), j->src->depth ? "--depth=%u" : "--no-tags", j->src->depth);
        bool file = is_file_url(url);
        uid_t uid = j->uid;
        gid_t gid = j->gid;
        int r = file ? 0 : pin_http_addresses(j, ret_err);
        if (r < 0)
                return r;
        /* git reports progress only when asked for it (core_source_set_progress). */
        void *progress_userdata;
        const char *talk = core_source_get_progress(&progress_userdata) ? "--progress" : "-q";
        if (!j->src->revision) {
                const char *args[] = {"clone", talk, "--no-tags", depth, "--template=", "--", url, j->dest_dir, NULL};
                r = run_git(j, NULL, uid, gid, file, args, ret_err);
        } else {
                const char *init[] = {"init", "-q", "--template=", j->dest_dir, NULL};
                const char *add[] = {"remote", "add", "origin", url, NULL};
                const char *fetch[] = {"fetch", talk, "--no-tags", depth, "origin", j->src->revision, NULL};
                const char *co[] = {"checkout", talk, "--detach", "FETCH_HEAD", NULL};
                if ((r = run_git(j, NULL, uid, gid, file, init, ret_err)) >= 0 &&
                    (r = run_git(j, j->dest_dir, uid, gid, file, add, ret_err)) >= 0 &&
                    (r = run_git(j, j->dest_dir, uid, gid, file, fetch, ret_err)) >= 0)
                        r = run_git(j, j->dest_dir, uid, gid, file, co, ret_err);
        }
        if (r >= 0 && !streq(url, j->src->url)) {
                const char *seturl[] = {"remote", "set-url", "origin", j->src->url, NULL};
                r = run_git(j, j->dest_dir, uid, gid, false, seturl, ret_err);
        }
        free(j->resolve);
        j->resolve = NULL;
        return r;
}

/* libgit2 calls these as the fetch and the checkout progress; a negative
 * return aborts the clone (GIT_EUSER). The fetch's stats are reported
 * too: objects as they arrive, then the deltas as they are resolved. */
static int cancel_transfer_cb(const git_indexer_progress *stats, void *payload) {
        (void)payload;
        if (stats->received_objects < stats->total_objects || stats->total_deltas == 0)
                source_progress("cloning", stats->received_bytes, 0, stats->received_objects, stats->total_objects);
        else
                source_progress("resolving", stats->received_bytes, 0, stats->indexed_deltas, stats->total_deltas);
        return core_cancel_requested() ? -1 : 0;
}

/* The checkout's progress: files written of how many. */
static void checkout_progress_cb(const char *path, size_t completed_steps, size_t total_steps, void *payload) {
        (void)path, (void)payload;
        source_progress("checking out", 0, 0, completed_steps, total_steps);
}

static int cancel_sideband_cb(const char *str, int len, void *payload) {
        (void)str, (void)len, (void)payload;
        return core_cancel_requested() ? -1 : 0;
}

static int clone_from(clone_job *j, const char *url, sb_error **ret_err) {
        /* libgit2 follows redirects without asking and cannot be pinned:
         * a guarded clone (core_source_set_address_guard) runs the git
         * program, whose redirects are off and addresses pinned. */
        if (j->src->depth > 0 || (core_source_get_address_guard() && !is_file_url(url)))
                return git_cli_clone(j, url, ret_err);
        git_clone_options opts = GIT_CLONE_OPTIONS_INIT;
        /* A real fetch even for file:// — never hardlink objects of a host
         * repository into the workspace. */
        opts.local = GIT_CLONE_NO_LOCAL;
        opts.checkout_opts.checkout_strategy = j->src->revision ? GIT_CHECKOUT_NONE : GIT_CHECKOUT_SAFE;
        opts.checkout_opts.progress_cb = checkout_progress_cb;
        opts.fetch_opts.callbacks.credentials = credentials_cb;
        opts.fetch_opts.callbacks.payload = j;
        opts.fetch_opts.callbacks.transfer_progress = cancel_transfer_cb;
        opts.fetch_opts.callbacks.sideband_progress = cancel_sideband_cb;
        opts.remote_cb = remote_create_cb;
        /* certificate_check stays NULL: libgit2 verifies TLS itself. */
        git_repository *repo = NULL;
        int r = git_clone(&repo, url, j->dest_dir, &opts);
        if (r < 0 && core_cancel_requested())
                return sb_error_set(ret_err, -ECANCELED, "cancelled", NULL, "clone: cancelled");
        if (r < 0)
                return git_fail(j, r, "clone", ret_err);
        /* A clone of the checked copy names the repository asked for. */
        if (!streq(url, j->src->url) && (r = git_remote_set_url(repo, "origin", j->src->url)) < 0) {
                r = git_fail(j, r, "set origin", ret_err);
                git_repository_free(repo);
                return r;
        }
        if (j->src->revision)
                r = checkout_revision(j, repo, ret_err);
        git_repository_free(repo);
        return r;
}

int core_source_git_clone(const core_git_source *src, const char *dest_dir, uid_t uid, gid_t gid,
                          sb_error **ret_err) {
        int r = core_git_url_check(src->url, ret_err);
        if (r < 0)
                return r;
        if (src->revision && (!src->revision[0] || src->revision[0] == '-'))
                return sb_error_set(ret_err, -EINVAL, REASON, "source.revision",
                                    "source.revision: must not be empty or start with '-'");
        /* Resolved here, outside the clone: libgit2's connections cannot be
         * hooked. A name that re-resolves differently during the clone is
         * not caught (DNS rebinding); documented in docs/SECURITY.md. */
        if ((r = core_source_host_check(src->url, ret_err)) < 0)
                return r;
        if (core_source_get_address_guard() && !strncasecmp(src->url, "git://", 6))
                return sb_error_set(ret_err, -EACCES, REASON, FIELD,
                                    "source.url: git:// cannot be fetched for this client; use https://");
        pthread_once(&git_once, git_init_once);
        if (git_init_result < 0)
                return sb_error_set(ret_err, -EIO, REASON, NULL, "clone: libgit2 failed to initialise");
        _cleanup_close_ int dest_fd = source_open_dest(dest_dir, uid, gid, ret_err);
        if (dest_fd < 0)
                return sb_error_prefix(ret_err, "clone");
        clone_job j = {.src = src, .dest_dir = dest_dir, .uid = uid, .gid = gid};
        /* No chroot here: libgit2 needs the host's resolver and CA store, and
         * file:// names a host path. Running as uid:gid still bounds what a
         * hostile repository or a libgit2 bug could write (or read). */
        return source_run_confined(-EBADF, uid, gid, clone_confined, &j, ret_err);
}
