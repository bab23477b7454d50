/* Exposed ports (DESIGN §3): each port a sandbox asks for is reachable from
 * the host at 127.0.0.1:<allocated>, shown in sandbox.get.
 *
 * sandboxd listens on loopback in its own network namespace and, for every
 * connection, opens a socket INSIDE the sandbox's network namespace (on a
 * worker thread that setns()es there, so the loop's thread never changes
 * namespace) and connects to 127.0.0.1:<port> there. So it works for every
 * policy, deny-all included, never touches the sandbox's nftables rules, and
 * a service listening on the sandbox's loopback is enough. Bytes are
 * relayed on the event loop with bounded buffers in both directions. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include "libcore/log.h"
#include "libcore/util.h"
#include "sandboxd/internal.h"
#include "sandboxd/worker.h"

#define RELAY_BUF (64 * 1024)
#define CONNECT_TIMEOUT_S 5

struct port_listener {
        session *s;
        uint16_t port;            /* inside the sandbox */
        uint16_t host_port;       /* allocated on 127.0.0.1 */
        int fd;
        sd_event_source *src;
};

typedef struct relay_half {
        char buf[RELAY_BUF];
        size_t len, off;
        bool eof;                 /* read side reached EOF */
} relay_half;

typedef struct relay {
        int fd[2];                /* 0: client on the host, 1: the sandbox side */
        sd_event_source *src[2];
        relay_half dir[2];        /* dir[i]: bytes read from fd[i], to write to fd[!i] */
        bool shut[2];             /* write side of fd[i] shut down */
} relay;

static void relay_free(relay *r) {
        for (int i = 0; i < 2; i++) {
                sd_event_source_disable_unref(r->src[i]);
                if (r->fd[i] >= 0)
                        close(r->fd[i]);
        }
        free(r);
}

static void relay_update(relay *r) {
        for (int i = 0; i < 2; i++) {
                uint32_t ev = 0;
                if (!r->dir[i].eof && r->dir[i].len == 0)
                        ev |= EPOLLIN;
                if (r->dir[!i].len > r->dir[!i].off)
                        ev |= EPOLLOUT;
                if (r->src[i])
                        sd_event_source_set_io_events(r->src[i], ev);
        }
}

static int on_relay(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        relay *r = userdata;
        int i = fd == r->fd[0] ? 0 : 1;
        relay_half *in = &r->dir[i], *out = &r->dir[!i];
        if ((revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !in->eof && in->len == 0) {
                ssize_t n = read(fd, in->buf, sizeof(in->buf));
                if (n > 0) {
                        in->len = (size_t)n;
                        in->off = 0;
                } else if (n == 0 || (errno != EAGAIN && errno != EINTR))
                        in->eof = true;
        }
        if ((revents & EPOLLOUT) && out->len > out->off) {
                ssize_t n = write(fd, out->buf + out->off, out->len - out->off);
                if (n > 0)
                        out->off += (size_t)n;
                else if (n < 0 && errno != EAGAIN && errno != EINTR)
                        out->eof = true, out->len = out->off = 0;
        }
        /* Flush what was read to the other side now if it can take it. */
        for (int k = 0; k < 2; k++) {
                relay_half *h = &r->dir[k];
                if (h->len > h->off) {
                        ssize_t n = write(r->fd[!k], h->buf + h->off, h->len - h->off);
                        if (n > 0)
                                h->off += (size_t)n;
                }
                if (h->off >= h->len)
                        h->len = h->off = 0;
                /* A side that ended and whose bytes are all delivered: pass
                 * the half-close on. */
                if (h->eof && h->len == 0 && !r->shut[!k]) {
                        shutdown(r->fd[!k], SHUT_WR);
                        r->shut[!k] = true;
                }
        }
        if (r->dir[0].eof && r->dir[1].eof && r->dir[0].len == 0 && r->dir[1].len == 0) {
                relay_free(r);
                return 0;
        }
        relay_update(r);
        return 0;
}

static void relay_start(manager *m, int client, int inside) {
        relay *r = calloc(1, sizeof(*r));
        if (!r) {
                close(client);
                close(inside);
                return;
        }
        r->fd[0] = client;
        r->fd[1] = inside;
        for (int i = 0; i < 2; i++) {
                int fl = fcntl(r->fd[i], F_GETFL);
                (void)fcntl(r->fd[i], F_SETFL, fl | O_NONBLOCK);
                if (sd_event_add_io(m->event, &r->src[i], r->fd[i], EPOLLIN, on_relay, r) < 0) {
                        relay_free(r);
                        return;
                }
        }
}

/* ---- connecting inside the sandbox (worker thread) ------------------------- */

typedef struct connect_job {
        manager *m;
        int netns;                /* dup of the session's netns fd */
        int client;
        uint16_t port;
        int inside;               /* result, or -errno */
        char sandbox[64];
} connect_job;

static void connect_work(void *userdata) {
        connect_job *j = userdata;
        /* This thread exists for this job only: entering the sandbox's network
         * namespace here leaves every other thread where it is. */
        if (setns(j->netns, CLONE_NEWNET) < 0) {
                j->inside = negative_errno();
                return;
        }
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                j->inside = negative_errno();
                return;
        }
        struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_S};
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(j->port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                j->inside = negative_errno();
                close(fd);
                return;
        }
        j->inside = fd;
}

static void connect_done(void *userdata) {
        connect_job *j = userdata;
        close(j->netns);
        if (j->inside < 0) {
                log_debug("sandbox '%s': port %u: %s", j->sandbox, j->port, strerror(-j->inside));
                close(j->client); /* the client sees the connection close */
        } else
                relay_start(j->m, j->client, j->inside);
        free(j);
}

static int on_accept(sd_event_source *src, int fd, uint32_t revents, void *userdata) {
        port_listener *l = userdata;
        session *s = l->s;
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0)
                return 0;
        connect_job *j = calloc(1, sizeof(*j));
        if (!j || s->netns_fd < 0 || (j->netns = fcntl(s->netns_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                free(j);
                close(c);
                return 0;
        }
        j->m = s->sb->m;
        j->client = c;
        j->port = l->port;
        snprintf(j->sandbox, sizeof(j->sandbox), "%s", s->sb->name);
        if (worker_submit(connect_work, connect_done, j) < 0) {
                close(j->netns);
                close(c);
                free(j);
        }
        return 0;
}

static void listener_free(port_listener *l) {
        if (!l)
                return;
        sd_event_source_disable_unref(l->src);
        if (l->fd >= 0)
                close(l->fd);
        free(l);
}

/* A listener on 127.0.0.1:<any> for the sandbox's `port`. */
static port_listener *listener_new(session *s, uint16_t port, sb_error **ret_err) {
        port_listener *l = calloc(1, sizeof(*l));
        if (!l) {
                sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
                return NULL;
        }
        l->s = s;
        l->port = port;
        l->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l->fd, 128) < 0 ||
            getsockname(l->fd, (struct sockaddr *)&a, &len) < 0) {
                sb_error_set(ret_err, negative_errno(), NULL, "ports", "ports: listen on 127.0.0.1 for port %u: %m",
                             port);
                listener_free(l);
                return NULL;
        }
        l->host_port = ntohs(a.sin_port);
        int r = sd_event_add_io(s->sb->m->event, &l->src, l->fd, EPOLLIN, on_accept, l);
        if (r < 0) {
                sb_error_set(ret_err, r, NULL, NULL, "watch port %u: %s", port, strerror(-r));
                listener_free(l);
                return NULL;
        }
        return l;
}

int ports_replace(session *s, const cJSON *ports, sb_error **ret_err) {
        int n = cJSON_GetArraySize(ports);
        port_listener **v = calloc((size_t)n + 1, sizeof(*v));
        if (!v)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "out of memory");
        /* New listeners first: on failure nothing has changed. */
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, ports) {
                uint16_t port = (uint16_t)it->valuedouble;
                bool kept = false;
                for (size_t k = 0; k < s->n_listeners; k++)
                        kept |= s->listeners[k]->port == port;
                if (!kept && !(v[i] = listener_new(s, port, ret_err))) {
                        for (int k = 0; k < i; k++)
                                listener_free(v[k]);
                        free(v);
                        return -EIO;
                }
                i++;
        }
        /* Then keep the listeners (and endpoints) of ports still exposed,
         * and close the others; their relayed connections carry on. */
        i = 0;
        cJSON_ArrayForEach(it, ports) {
                for (size_t k = 0; !v[i] && k < s->n_listeners; k++)
                        if (s->listeners[k] && s->listeners[k]->port == (uint16_t)it->valuedouble)
                                v[i] = TAKE_PTR(s->listeners[k]);
                i++;
        }
        for (size_t k = 0; k < s->n_listeners; k++)
                listener_free(s->listeners[k]);
        free(s->listeners);
        s->listeners = v;
        s->n_listeners = (size_t)n;
        return 0;
}

int ports_open(session *s, sb_error **ret_err) {
        return ports_replace(s, s->sb->ports, ret_err);
}

void ports_close(session *s) {
        for (size_t i = 0; i < s->n_listeners; i++)
                listener_free(s->listeners[i]);
        free(s->listeners);
        s->listeners = NULL;
        s->n_listeners = 0;
        if (s->netns_fd >= 0)
                close(s->netns_fd);
        s->netns_fd = -EBADF;
}

cJSON *ports_json(const sandbox *sb) {
        cJSON *arr = cJSON_CreateArray();
        cJSON *it;
        cJSON_ArrayForEach(it, sb->ports) {
                cJSON *o = cJSON_CreateObject();
                uint16_t port = (uint16_t)it->valuedouble;
                cJSON_AddNumberToObject(o, "port", port);
                const port_listener *l = NULL;
                for (size_t i = 0; sb->sess && i < sb->sess->n_listeners; i++)
                        if (sb->sess->listeners[i]->port == port)
                                l = sb->sess->listeners[i];
                if (l) {
                        char ep[32];
                        snprintf(ep, sizeof(ep), "127.0.0.1:%u", l->host_port);
                        cJSON_AddStringToObject(o, "endpoint", ep);
                } else
                        cJSON_AddNullToObject(o, "endpoint");
                cJSON_AddItemToArray(arr, o);
        }
        return arr;
}

int ports_parse(const cJSON *ports, cJSON **ret, sb_error **ret_err) {
        cJSON *out = cJSON_CreateArray();
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, ports) {
                char field[32];
                snprintf(field, sizeof(field), "ports[%d]", i);
                if (!cJSON_IsNumber(it) || it->valuedouble < 1 || it->valuedouble > 65535 ||
                    it->valuedouble != (int)it->valuedouble) {
                        cJSON_Delete(out);
                        return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: must be a port from 1 to 65535", field);
                }
                const cJSON *seen;
                cJSON_ArrayForEach(seen, out)
                        if (seen->valuedouble == it->valuedouble) {
                                cJSON_Delete(out);
                                return sb_error_set(ret_err, -EINVAL, NULL, field, "%s: port %d is listed twice",
                                                    field, (int)it->valuedouble);
                        }
                if (++i > 15) {
                        cJSON_Delete(out);
                        return sb_error_set(ret_err, -E2BIG, "limit_exceeded", "ports", "ports: at most 15");
                }
                cJSON_AddItemToArray(out, cJSON_CreateNumber(it->valuedouble));
        }
        *ret = out;
        return 0;
}
