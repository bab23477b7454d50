/* File watches of the agent protocol (libcore/agent.h "op":"watch"):
 * sandbox-init forks one child per watch, confined as a command of the
 * sandbox user (init_child_confine: its uid, no capabilities, no_new_privs,
 * the seccomp filter), never running inotify in init itself. The child
 * lives in the sandbox's namespaces and root, so every path it sees and
 * reports is the sandbox's own. It writes one JSON object per line to a
 * pipe; init reads the pipe from its event loop and relays the objects in
 * batches ("ev":"watch"), and answers "watch_end" once the child is reaped.
 *
 * Bounds, each one reported rather than silently exceeded:
 *  - WATCH_INOTIFY_MAX inotify watches per watch (a recursive watch of a
 *    huge tree): directories past it are not watched, and an "overflow"
 *    event with reason "watches" names the first one left out;
 *  - WATCH_QUEUE_MAX events queued in the child while init does not read
 *    (the daemon or its client reads slowly): past it events are dropped
 *    and an "overflow" event (reason "queue") comes before the next one;
 *  - the kernel's own queue (IN_Q_OVERFLOW): an "overflow" (reason "kernel");
 *  - INIT_WATCH_MAX watches at once per sandbox-init;
 *  - a scan 64 levels deep, and paths the kernel (PATH_MAX) or the API
 *    (WATCH_PATH_MAX) can carry: a directory left out is an "overflow"
 *    (reason "watches"), a change with a path past the API's bound an
 *    "overflow" (reason "path") naming the longest directory above it that
 *    fits. Nothing in the tree changes unseen without an overflow.
 * Flow control: while init's send queue is above INIT_SEND_HIGH, it stops
 * reading the watch pipes as it stops reading command output
 * (cmd_set_output_paused), so the children's bounded queues take the
 * backlog. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "libcore/agent.h"
#include "libcore/init/init.h"
#include "libcore/log.h"
#include "libcore/seccomp.h"
#include "libcore/util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON, cJSON_Delete);

/* Longest line init takes from a child (a path of PATH_MAX, escaped). */
#define WATCH_LINE_MAX (32 * 1024)
/* Bytes of lines relayed per "watch" packet. */
#define WATCH_BATCH_BYTES (64 * 1024)

typedef struct init_fswatch {
        struct init_fswatch *next;
        int64_t id;
        pid_t pid;             /* 0 once reaped */
        int fd;                /* read end of the child's pipe, -EBADF at EOF */
        bool watched;
        init_watch w;
        char *buf;             /* a partial line */
        size_t len;
        int end_errno;         /* from the child's last line */
        char *end_reason, *end_message;
        int status;
        bool ended;            /* its end sent: out of `watches`, on `dead` */
} init_fswatch;

static init_fswatch *watches;
/* Ended watches, freed between epoll batches (init_watch_free_dead): a
 * later event of the same batch may still point at one (its pipe's, after
 * the SIGCHLD of the batch reaped its child and ended it). */
static init_fswatch *dead;
static bool watches_paused;

/* ---- the child --------------------------------------------------------- */

typedef struct wd_entry {
        int wd;
        char *path;
} wd_entry;

typedef struct child_state {
        int ifd, out;
        bool recursive;
        bool root_dir;             /* the watched path is a directory */
        dev_t dev;                 /* recursive watches stay on the root's filesystem */
        wd_entry *wds;
        size_t n_wds, cap_wds;
        /* queued lines (each malloc'd, '\n'-terminated) */
        char **q;
        size_t q_head, q_n;
        size_t q_off;              /* bytes of q[q_head] already written */
        const char *last_line;     /* the newest queued line while it is queued */
        uint64_t dropped;          /* events dropped since the last overflow event */
        bool limit_reported;
        /* a moved-from waiting for its moved-to (same cookie) */
        uint32_t pend_cookie;
        char *pend_path;
        bool pend_dir;
} child_state;

static const char *wd_path(child_state *c, int wd) {
        for (size_t i = 0; i < c->n_wds; i++)
                if (c->wds[i].wd == wd)
                        return c->wds[i].path;
        return NULL;
}

static void wd_forget(child_state *c, int wd) {
        for (size_t i = 0; i < c->n_wds; i++)
                if (c->wds[i].wd == wd) {
                        free(c->wds[i].path);
                        c->wds[i] = c->wds[--c->n_wds];
                        return;
                }
}

static void queue_line(child_state *c, char *line) {
        if (c->q_n == WATCH_QUEUE_MAX) {
                free(line);
                c->dropped++;
                return;
        }
        c->q[(c->q_head + c->q_n++) % WATCH_QUEUE_MAX] = line;
        c->last_line = line;
}

/* The longest path an event may carry: the API's (sandboxd/limits.h
 * LIMIT_PATH_BYTES, docs/API.md "fs.watch"); sandboxd drops an event with a
 * longer one, so none is sent. */
#define WATCH_PATH_MAX 4096

/* The longest leading directory of `path` that fits WATCH_PATH_MAX (at
 * least "/"), in buf (WATCH_PATH_MAX + 1 bytes). */
static const char *fitting_ancestor(const char *path, char *buf) {
        size_t cut = 0;
        for (size_t i = 1; i <= WATCH_PATH_MAX && path[i]; i++)
                if (path[i] == '/')
                        cut = i;
        if (cut == 0)
                return "/";
        memcpy(buf, path, cut);
        buf[cut] = 0;
        return buf;
}

/* Queues {"type":T,"path":P,"isDir":D[,"oldPath":O][,"reason":R]}; an
 * "overflow" for events dropped before it goes first. A change whose path
 * (or old path) is longer than WATCH_PATH_MAX is never dropped in silence:
 * it becomes an "overflow" with reason "path" naming the longest directory
 * above it that fits (an overflow's own path is shortened the same way). */
static void emit(child_state *c, const char *type, const char *path, bool is_dir, const char *old_path,
                 const char *reason) {
        char short_path[WATCH_PATH_MAX + 1];
        bool long_path = path && strlen(path) > WATCH_PATH_MAX;
        bool long_old = old_path && strlen(old_path) > WATCH_PATH_MAX;
        if (long_path || long_old) {
                const char *which = long_path ? path : old_path;
                if (!streq(type, "overflow")) {
                        type = "overflow";
                        reason = "path";
                        is_dir = true;
                        old_path = NULL;
                }
                path = fitting_ancestor(which, short_path);
        }
        if (c->dropped && c->q_n < WATCH_QUEUE_MAX) {
                uint64_t d = c->dropped;
                c->dropped = 0;
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "type", "overflow");
                cJSON_AddStringToObject(o, "reason", "queue");
                cJSON_AddNumberToObject(o, "dropped", (double)d);
                char *t = cJSON_PrintUnformatted(o);
                cJSON_Delete(o);
                char *line = NULL;
                if (t && asprintf(&line, "%s\n", t) >= 0)
                        queue_line(c, line);
                free(t);
                if (!line)
                        c->dropped = d;
        }
        if (c->q_n == WATCH_QUEUE_MAX) {
                c->dropped++;
                return;
        }
        cJSON *o = cJSON_CreateObject();
        if (!o)
                return;
        cJSON_AddStringToObject(o, "type", type);
        if (path)
                cJSON_AddStringToObject(o, "path", path);
        if (path)
                cJSON_AddBoolToObject(o, "isDir", is_dir);
        if (old_path)
                cJSON_AddStringToObject(o, "oldPath", old_path);
        if (reason)
                cJSON_AddStringToObject(o, "reason", reason);
        char *t = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        char *line = NULL;
        if (!t || asprintf(&line, "%s\n", t) < 0)
                c->dropped++;
        /* A write in many pieces is one "modified" while the reader has
         * not taken the last one yet, not one per write(2); so is a run of
         * the same overflow. */
        else if ((streq(type, "modified") || streq(type, "overflow")) && c->last_line && streq(line, c->last_line))
                free(line);
        else
                queue_line(c, line);
        free(t);
}

/* Writes queued lines until the pipe is full. -EPIPE: init is gone. */
static int flush_lines(child_state *c) {
        while (c->q_n) {
                char *l = c->q[c->q_head];
                size_t len = strlen(l);
                ssize_t n = write(c->out, l + c->q_off, len - c->q_off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return 0;
                if (n < 0)
                        return negative_errno();
                c->q_off += (size_t)n;
                if (c->q_off < len)
                        continue;
                if (l == c->last_line)
                        c->last_line = NULL;
                free(l);
                c->q_head = (c->q_head + 1) % WATCH_QUEUE_MAX;
                c->q_n--;
                c->q_off = 0;
        }
        return 0;
}

static char *join(const char *dir, const char *name) {
        char *p = NULL;
        if (asprintf(&p, "%s%s%s", dir, streq(dir, "/") ? "" : "/", name) < 0)
                return NULL;
        return p;
}

#define DIR_MASK (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | \
                  IN_MOVE_SELF | IN_DONT_FOLLOW | IN_ONLYDIR | IN_EXCL_UNLINK)
#define FILE_MASK (IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW)

/* Adds a watch on directory `path` (`follow`: a symlink at its end is
 * followed, for the watched path itself; never for what a scan finds);
 * past the cap (ours or the kernel's max_user_watches), one "overflow"
 * event with reason "watches" names it. Returns 1 when watched, 0 when
 * not, a negative errno on a lookup error. */
static int add_dir(child_state *c, const char *path, bool follow) {
        if (c->n_wds >= WATCH_INOTIFY_MAX) {
                if (!c->limit_reported)
                        emit(c, "overflow", path, true, NULL, "watches");
                c->limit_reported = true;
                return 0;
        }
        int wd = inotify_add_watch(c->ifd, path, follow ? DIR_MASK & ~IN_DONT_FOLLOW : DIR_MASK);
        /* ENAMETOOLONG: a directory whose path is past PATH_MAX (made with
         * relative paths) cannot be watched by path: left out, and said. */
        if (wd < 0 && (errno == ENOSPC || errno == ENAMETOOLONG)) {
                if (!c->limit_reported)
                        emit(c, "overflow", path, true, NULL, "watches");
                c->limit_reported = true;
                return 0;
        }
        if (wd < 0)
                return negative_errno();
        if (wd_path(c, wd))
                return 1;
        if (c->n_wds == c->cap_wds) {
                size_t n = c->cap_wds ? c->cap_wds * 2 : 64;
                wd_entry *nw = realloc(c->wds, n * sizeof(*nw));
                if (!nw)
                        return -ENOMEM;
                c->wds = nw;
                c->cap_wds = n;
        }
        char *copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        c->wds[c->n_wds++] = (wd_entry){ wd, copy };
        return 1;
}

/* Watches the directories below `path` (already watched), depth first,
 * staying on the root's filesystem. With `report`, every entry found is
 * reported "created": a directory that just appeared may have been filled
 * before its watch was in place (mkdir -p a/b && touch a/b/f). */
static void scan_dir(child_state *c, const char *path, bool report, int depth) {
        if (depth > 64) {
                /* Deeper than this scan goes (each level holds a directory
                 * stream open): what is below is not watched, and said. */
                if (!c->limit_reported)
                        emit(c, "overflow", path, true, NULL, "watches");
                c->limit_reported = true;
                return;
        }
        DIR *d = opendir(path);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (streq(de->d_name, ".") || streq(de->d_name, ".."))
                        continue;
                _cleanup_free_ char *p = join(path, de->d_name);
                struct stat st;
                if (!p || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                bool is_dir = S_ISDIR(st.st_mode);
                if (report)
                        emit(c, "created", p, is_dir, NULL, NULL);
                if (is_dir && st.st_dev == c->dev && add_dir(c, p, false) > 0)
                        scan_dir(c, p, report, depth + 1);
        }
        closedir(d);
}

/* A directory renamed inside the tree: the paths of its watches follow. */
static void rename_prefix(child_state *c, const char *from, const char *to) {
        size_t fl = strlen(from);
        for (size_t i = 0; i < c->n_wds; i++) {
                char *p = c->wds[i].path;
                if (strncmp(p, from, fl) || (p[fl] != 0 && p[fl] != '/'))
                        continue;
                char *np = NULL;
                if (asprintf(&np, "%s%s", to, p + fl) < 0)
                        continue;
                free(p);
                c->wds[i].path = np;
        }
}

/* A directory moved out of the tree: its watches go (their events would
 * name paths that are no longer there). */
static void drop_prefix(child_state *c, const char *from) {
        size_t fl = strlen(from);
        for (size_t i = 0; i < c->n_wds;) {
                char *p = c->wds[i].path;
                if (!strncmp(p, from, fl) && (p[fl] == 0 || p[fl] == '/')) {
                        (void)inotify_rm_watch(c->ifd, c->wds[i].wd);
                        free(p);
                        c->wds[i] = c->wds[--c->n_wds];
                } else
                        i++;
        }
}

/* A moved-from with no moved-to: it left the tree, reported "deleted". */
static void flush_pending_move(child_state *c) {
        if (!c->pend_path)
                return;
        emit(c, "deleted", c->pend_path, c->pend_dir, NULL, NULL);
        if (c->pend_dir && c->recursive)
                drop_prefix(c, c->pend_path);
        free(c->pend_path);
        c->pend_path = NULL;
}

/* One inotify event. Returns 1 when the watched root itself went. */
static int handle_event(child_state *c, const struct inotify_event *e, const char *root) {
        if (e->mask & IN_Q_OVERFLOW) {
                flush_pending_move(c);
                emit(c, "overflow", NULL, false, NULL, "kernel");
                return 0;
        }
        const char *dir = wd_path(c, e->wd);
        if (e->mask & IN_IGNORED) {
                bool was_root = dir && streq(dir, root);
                wd_forget(c, e->wd);
                return was_root;
        }
        if (!dir)
                return 0;
        bool is_dir = e->mask & IN_ISDIR;
        if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
                /* Below the root these come with the parent's own delete
                 * or move event, reported there. */
                if (!streq(dir, root))
                        return 0;
                flush_pending_move(c);
                emit(c, "deleted", root, c->root_dir, NULL, NULL);
                return 1;
        }
        _cleanup_free_ char *path = e->len ? join(dir, e->name) : strdup(dir);
        if (!path)
                return 0;
        if (!(e->mask & IN_MOVED_TO) || e->cookie != c->pend_cookie)
                flush_pending_move(c);
        if (e->mask & IN_CREATE) {
                emit(c, "created", path, is_dir, NULL, NULL);
                if (is_dir && c->recursive && add_dir(c, path, false) > 0)
                        scan_dir(c, path, true, 0);
        } else if (e->mask & IN_MODIFY) {
                emit(c, "modified", path, is_dir, NULL, NULL);
        } else if (e->mask & IN_DELETE) {
                emit(c, "deleted", path, is_dir, NULL, NULL);
        } else if (e->mask & IN_MOVED_FROM) {
                c->pend_path = TAKE_PTR(path);
                c->pend_cookie = e->cookie;
                c->pend_dir = is_dir;
        } else if (e->mask & IN_MOVED_TO) {
                if (c->pend_path && e->cookie == c->pend_cookie) {
                        emit(c, "renamed", path, is_dir, c->pend_path, NULL);
                        if (is_dir && c->recursive)
                                rename_prefix(c, c->pend_path, path);
                        free(c->pend_path);
                        c->pend_path = NULL;
                } else {
                        /* moved in from outside the tree: new here */
                        emit(c, "created", path, is_dir, NULL, NULL);
                        if (is_dir && c->recursive && add_dir(c, path, false) > 0)
                                scan_dir(c, path, true, 0);
                }
        }
        return 0;
}

static void write_line_now(int fd, cJSON *o) {
        char *t = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!t)
                return;
        (void)core_write_all(fd, t, strlen(t));
        (void)core_write_all(fd, "\n", 1);
        free(t);
}

/* "fs.watch PATH: [STEP: ]ERROR" as the child's last line, then exit. */
_noreturn_ static void child_fail(int out, int err, const char *step, const char *path) {
        char msg[PATH_MAX + 256];
        snprintf(msg, sizeof(msg), "fs.watch %s: %s%s%s", path, step ? step : "", step ? ": " : "", strerror(err));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "errno", err);
        cJSON_AddStringToObject(o, "message", msg);
        write_line_now(out, o);
        _exit(1);
}

/* In the child, single-threaded after fork: confine, watch, relay. The
 * pipe is blocking until the start is reported, then non-blocking (the
 * queue above takes what init does not read yet). Never returns. */
_noreturn_ static void child_main(const char *root, bool recursive, int out, const core_seccomp *filter) {
        int r = init_child_confine(init_user_uid, init_user_gid, out, out, filter);
        if (r < 0)
                child_fail(out, -r, "confine the watcher", root);
        static child_state c;
        c.out = out;
        c.recursive = recursive;
        c.q = calloc(WATCH_QUEUE_MAX, sizeof(char *));
        c.ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (!c.q || c.ifd < 0)
                child_fail(out, c.q ? errno : ENOMEM, "inotify", root);
        /* The watched path resolves as the sandbox user's own open() would
         * resolve it: a symlink is followed with that user's permissions
         * (a /proc/PID/root of a process it may not inspect is EACCES, as
         * for ls), and what it names is watched. inotify_add_watch() then
         * follows the same path as the same user. */
        struct stat st;
        int rfd = open(root, O_PATH | O_CLOEXEC);
        if (rfd < 0 || fstat(rfd, &st) < 0)
                child_fail(out, errno, NULL, root);
        close(rfd);
        c.dev = st.st_dev;
        c.root_dir = S_ISDIR(st.st_mode);
        if (c.root_dir) {
                r = add_dir(&c, root, true);
                if (r <= 0)
                        child_fail(out, r < 0 ? -r : ENOSPC, NULL, root);
                if (recursive)
                        scan_dir(&c, root, false, 0);
        } else {
                int wd = inotify_add_watch(c.ifd, root, FILE_MASK & ~IN_DONT_FOLLOW);
                if (wd < 0)
                        child_fail(out, errno, NULL, root);
                c.wds = calloc(1, sizeof(*c.wds));
                if (!c.wds)
                        child_fail(out, ENOMEM, NULL, root);
                c.wds[0] = (wd_entry){ wd, strdup(root) };
                c.n_wds = c.cap_wds = 1;
        }
        cJSON *ready = cJSON_CreateObject();
        cJSON_AddBoolToObject(ready, "ready", true);
        cJSON_AddNumberToObject(ready, "watches", (double)c.n_wds);
        write_line_now(out, ready);
        int fl = fcntl(out, F_GETFL);
        if (fl < 0 || fcntl(out, F_SETFL, fl | O_NONBLOCK) < 0)
                _exit(1);

        static char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
        bool gone = false;
        while (!gone) {
                struct pollfd p[2] = { { c.ifd, POLLIN, 0 }, { out, c.q_n ? POLLOUT : 0, 0 } };
                /* A moved-from waits a moment for its moved-to. */
                int n = poll(p, 2, c.pend_path ? 20 : -1);
                if (n < 0 && errno != EINTR)
                        _exit(1);
                if (n == 0)
                        flush_pending_move(&c);
                if (p[1].revents & (POLLERR | POLLHUP))
                        _exit(0); /* init is gone */
                if (p[0].revents & POLLIN) {
                        ssize_t len = read(c.ifd, buf, sizeof(buf));
                        for (char *q = buf; len > 0 && q < buf + len && !gone;) {
                                const struct inotify_event *e = (const struct inotify_event *)q;
                                gone = handle_event(&c, e, root) == 1;
                                q += sizeof(*e) + e->len;
                        }
                }
                if (flush_lines(&c) < 0)
                        _exit(0);
        }
        /* The watched path itself went: what is queued, then the end. */
        flush_pending_move(&c);
        if (fcntl(out, F_SETFL, fl) < 0 || flush_lines(&c) < 0)
                _exit(1);
        cJSON *end = cJSON_CreateObject();
        cJSON_AddStringToObject(end, "end", "deleted");
        write_line_now(out, end);
        _exit(0);
}

/* ---- init's side ------------------------------------------------------- */

static size_t count_watches(void) {
        size_t n = 0;
        for (init_fswatch *w = watches; w; w = w->next)
                n++;
        return n;
}

static init_fswatch *find(int64_t id) {
        for (init_fswatch *w = watches; w; w = w->next)
                if (w->id == id)
                        return w;
        return NULL;
}

static void send_end(init_agent *a, int64_t id, int err, const char *reason, const char *message) {
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "watch_end");
        cJSON_AddNumberToObject(ev, "id", (double)id);
        if (err) {
                cJSON_AddNumberToObject(ev, "errno", err);
                cJSON_AddStringToObject(ev, "message", message ? message : strerror(err));
        }
        if (reason)
                cJSON_AddStringToObject(ev, "reason", reason);
        (void)agent_send(a, ev);
}

void init_watch_start(init_agent *a, const cJSON *req) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
        const char *p = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(req, "path"));
        bool recursive = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(req, "recursive"));
        if (!cJSON_IsNumber(id) || id->valuedouble < 1 || id->valuedouble > 4294967295.0)
                return agent_send_error(a, NULL, "watch: \"id\" must be a number from 1 to 2^32-1");
        int64_t wid = (int64_t)id->valuedouble;
        if (!p || !*p || strlen(p) >= 4096)
                return send_end(a, wid, EINVAL, NULL, "fs.watch: \"path\" must be a non-empty string");
        if (find(wid))
                return send_end(a, wid, EEXIST, NULL, "fs.watch: a watch with this id exists");
        if (count_watches() >= INIT_WATCH_MAX)
                return send_end(a, wid, EMFILE, "limit_exceeded", "fs.watch: too many watches in this sandbox");
        _cleanup_free_ char *path = init_fs_path(p, INIT_WORKSPACE);
        const core_seccomp *filter = NULL;
        /* No filter, no watcher (fail closed), as for a command. */
        int r = path ? core_seccomp_default(&filter, NULL) : -ENOMEM;
        init_fswatch *w = r >= 0 ? calloc(1, sizeof(*w)) : NULL;
        int pp[2] = { -EBADF, -EBADF };
        if (r >= 0 && !w)
                r = -ENOMEM;
        if (r >= 0 && pipe2(pp, O_CLOEXEC) < 0)
                r = negative_errno();
        pid_t pid = r >= 0 ? fork() : -1;
        if (r >= 0 && pid < 0)
                r = negative_errno();
        if (pid == 0) {
                close(pp[0]);
                child_main(path, recursive, pp[1], filter);
        }
        if (pp[1] >= 0)
                close(pp[1]);
        if (r >= 0 && fcntl(pp[0], F_SETFL, O_NONBLOCK) < 0)
                r = negative_errno();
        if (r < 0) {
                if (pid > 0)
                        (void)kill(pid, SIGKILL); /* reaped silently by cmd_reap */
                if (pp[0] >= 0)
                        close(pp[0]);
                free(w);
                return send_end(a, wid, -r, NULL, NULL);
        }
        w->id = wid;
        w->pid = pid;
        w->fd = pp[0];
        w->w = (init_watch){ .kind = WATCH_FSWATCH, .fsw = w };
        w->next = watches;
        watches = w;
        (void)watch_set(a, w->fd, &w->w, &w->watched, watches_paused ? 0 : EPOLLIN);
}

void init_watch_stop(init_agent *a, const cJSON *req) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(req, "id");
        init_fswatch *w = cJSON_IsNumber(id) ? find((int64_t)id->valuedouble) : NULL;
        if (w && w->pid > 0)
                (void)kill(w->pid, SIGKILL);
}

void init_watch_stop_all(init_agent *a) {
        for (init_fswatch *w = watches; w; w = w->next)
                if (w->pid > 0)
                        (void)kill(w->pid, SIGKILL);
}

/* Takes w out of `watches` onto `dead`; freed by init_watch_free_dead. */
static void forget_watch(init_agent *a, init_fswatch *w) {
        for (init_fswatch **pp = &watches; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        break;
                }
        watch_clear(a, w->fd, &w->watched);
        if (w->fd >= 0)
                close(w->fd);
        w->fd = -EBADF;
        w->ended = true;
        w->next = dead;
        dead = w;
}

void init_watch_free_dead(void) {
        while (dead) {
                init_fswatch *w = dead;
                dead = w->next;
                free(w->buf);
                free(w->end_reason);
                free(w->end_message);
                free(w);
        }
}

/* Both the child reaped and its pipe at EOF: the end goes out, once. The
 * watch leaves `watches` before the send: agent_send may resume paused
 * output (agent_update_backpressure), which walks `watches` and ends what
 * it finds ended. */
static void maybe_end(init_agent *a, init_fswatch *w) {
        if (w->ended || w->pid > 0 || w->fd >= 0)
                return;
        forget_watch(a, w);
        const char *reason = w->end_reason;
        /* Ended by the stop's SIGTERM to every process. */
        if (!reason && !w->end_errno && a->stopping)
                reason = "sandbox_stopped";
        if (!reason && !w->end_errno)
                reason = WIFSIGNALED(w->status) && WTERMSIG(w->status) == SIGKILL ? "stopped" : "ended";
        send_end(a, w->id, w->end_errno, reason, w->end_message);
}

/* One line of the child: an event for the batch, or its start or end. */
static void take_line(init_fswatch *w, const char *line, size_t len, cJSON *events, bool *ready) {
        cJSON *o = cJSON_ParseWithLength(line, len);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return;
        }
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(o, "errno");
        const char *end = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "end"));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ready")))
                *ready = true;
        else if (cJSON_IsNumber(en) && en->valuedouble >= 1 && en->valuedouble <= 4095) {
                w->end_errno = (int)en->valuedouble;
                const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "message"));
                free(w->end_message);
                w->end_message = m ? strdup(m) : NULL;
        } else if (end) {
                free(w->end_reason);
                w->end_reason = strdup(end);
        } else if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(o, "type"))) {
                cJSON_AddItemToArray(events, o);
                return;
        }
        cJSON_Delete(o);
}

static void send_batch(init_agent *a, init_fswatch *w, cJSON **events, bool *ready) {
        if (cJSON_GetArraySize(*events) == 0 && !*ready)
                return;
        _cleanup_(cJSON_Deletep) cJSON *ev = cJSON_CreateObject();
        if (!ev)
                return;
        cJSON_AddStringToObject(ev, "ev", "watch");
        cJSON_AddNumberToObject(ev, "id", (double)w->id);
        if (*ready)
                cJSON_AddBoolToObject(ev, "ready", true);
        cJSON_AddItemToObject(ev, "events", *events);
        *events = cJSON_CreateArray();
        *ready = false;
        (void)agent_send(a, ev);
}

/* Reads what the child wrote, up to a few batches per wakeup (the pipe is
 * level-triggered: what is left wakes us again). */
void init_watch_on_event(init_agent *a, init_watch *iw) {
        init_fswatch *w = iw->fsw;
        if (w->ended)
                return; /* ended earlier in this epoll batch */
        if (!w->buf && !(w->buf = malloc(WATCH_LINE_MAX)))
                return;
        _cleanup_(cJSON_Deletep) cJSON *events = cJSON_CreateArray();
        bool ready = false;
        size_t batch = 0;
        for (int i = 0; i < 16 && w->fd >= 0 && !watches_paused; i++) {
                ssize_t n = read(w->fd, w->buf + w->len, WATCH_LINE_MAX - w->len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        watch_clear(a, w->fd, &w->watched);
                        close(w->fd);
                        w->fd = -EBADF;
                        break;
                }
                w->len += (size_t)n;
                char *start = w->buf, *nl;
                while ((nl = memchr(start, '\n', w->len - (size_t)(start - w->buf)))) {
                        take_line(w, start, (size_t)(nl - start), events, &ready);
                        batch += (size_t)(nl - start) + 1;
                        start = nl + 1;
                        if (batch >= WATCH_BATCH_BYTES) {
                                send_batch(a, w, &events, &ready);
                                batch = 0;
                        }
                }
                w->len -= (size_t)(start - w->buf);
                memmove(w->buf, start, w->len);
                if (w->len == WATCH_LINE_MAX)
                        w->len = 0; /* a line longer than any path: dropped */
        }
        send_batch(a, w, &events, &ready);
        maybe_end(a, w);
}

void init_watch_end_stopped(void) {
        for (init_fswatch *w = watches; w; w = w->next)
                if (w->pid > 0 && init_child_stopped(w->pid) > 0)
                        (void)kill(w->pid, SIGKILL);
}

bool init_watch_reaped(init_agent *a, pid_t pid, int wstatus) {
        for (init_fswatch *w = watches; w; w = w->next)
                if (w->pid == pid) {
                        w->pid = 0;
                        w->status = wstatus;
                        /* What the child wrote before it went is in the
                         * pipe: read it now, then the end. */
                        if (w->fd >= 0 && !watches_paused)
                                init_watch_on_event(a, &w->w);
                        else
                                maybe_end(a, w);
                        return true;
                }
        return false;
}

void init_watch_set_paused(init_agent *a, bool paused) {
        watches_paused = paused;
        init_fswatch *next;
        for (init_fswatch *w = watches; w; w = next) {
                next = w->next;
                if (w->fd >= 0)
                        (void)watch_set(a, w->fd, &w->w, &w->watched, paused ? 0 : EPOLLIN);
                else if (!paused)
                        maybe_end(a, w);
        }
}
