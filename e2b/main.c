/* sandboxd-e2b: E2B's protocols for sandboxd (docs/E2B.md).
 *
 *   sandboxd-e2b --socket PATH --listen ADDR:PORT --keys FILE [--tls-cert F --tls-key F]
 *                [--domain DOMAIN] [--max-conns N] [--max-conns-per-addr N] [--rate N]
 *   sandboxd-e2b key add TENANT --keys FILE
 *
 * Runs as an unprivileged uid named in the daemon's daemon.json
 * tenants.gateways. Accepts on one TCP address; a thread per connection
 * (capped in all and per peer address, conns.c), each request its own
 * daemon connection (daemon.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include "e2b/gateway.h"

static gw_config cfg;

static void usage(FILE *f) {
        fprintf(f, "usage: sandboxd-e2b --socket PATH --listen ADDR:PORT --keys FILE [--tls-cert F --tls-key F]\n"
                   "                    [--domain DOMAIN] [--max-conns N (256)] [--max-conns-per-addr N (32)] [--rate N (100)]\n"
                   "       sandboxd-e2b key add TENANT --keys FILE\n");
}

typedef struct conn_arg {
        int fd;
        gw_slot *slot;
} conn_arg;

static void *conn_thread(void *arg) {
        conn_arg a = *(conn_arg *) arg;
        free(arg);
        gw_serve_conn_slot(&cfg, a.fd, a.slot);
        return NULL;
}

/* A connection the table refused (gw_conns_admit): over plain HTTP a 503
 * in E2B's error shape if the socket takes it at once (never waiting on
 * the peer), over TLS just the close (a handshake would cost more than
 * the refusal saves). */
static void refuse(int fd, int why) {
        if (!cfg.tls) {
                const char *msg = why == -EUSERS ? "too many connections from this address to the gateway; retry"
                                                 : "the gateway serves as many connections as it may; retry";
                char body[160], resp[400];
                int bl = snprintf(body, sizeof(body), "{\"code\":503,\"message\":\"%s\"}", msg);
                int n = snprintf(resp, sizeof(resp),
                                 "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                                 "Connection: close\r\nContent-Length: %d\r\n\r\n%s", bl, body);
                (void) send(fd, resp, (size_t) n, MSG_DONTWAIT | MSG_NOSIGNAL);
        }
        close(fd);
}

/* "ADDR:PORT", IPv4 numeric (the gateway binds loopback in tests and
 * behind a TLS terminator otherwise). */
static int listen_on(const char *spec) {
        const char *colon = strrchr(spec, ':');
        struct sockaddr_in sa = { .sin_family = AF_INET };
        char addr[64];
        if (!colon || (size_t) (colon - spec) >= sizeof(addr))
                return -EINVAL;
        memcpy(addr, spec, (size_t) (colon - spec));
        addr[colon - spec] = 0;
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port < 1 || port > 65535 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
                return -EINVAL;
        sa.sin_port = htons((uint16_t) port);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        if (fd < 0)
                return -errno;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

static int serve(const char *listen_spec) {
        int lfd = listen_on(listen_spec);
        if (lfd < 0) {
                fprintf(stderr, "sandboxd-e2b: --listen %s: %s (want a numeric IPv4 ADDR:PORT)\n", listen_spec,
                        strerror(-lfd));
                return 1;
        }
        signal(SIGPIPE, SIG_IGN);
        fprintf(stderr, "sandboxd-e2b: listening on %s (%s), daemon %s\n", listen_spec, cfg.tls ? "HTTPS" : "HTTP",
                cfg.socket_path);
        for (;;) {
                struct sockaddr_storage peer;
                socklen_t peer_len = sizeof(peer);
                int fd = accept4(lfd, (struct sockaddr *) &peer, &peer_len, SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        if (errno == EMFILE || errno == ENFILE) {
                                usleep(100000);
                                continue;
                        }
                        fprintf(stderr, "sandboxd-e2b: accept: %s\n", strerror(errno));
                        return 1;
                }
                conn_arg *ca = malloc(sizeof(*ca));
                int r = ca ? gw_conns_admit((struct sockaddr *) &peer, peer_len, fd, &ca->slot) : -ENOMEM;
                if (r < 0) {
                        free(ca);
                        refuse(fd, r);
                        continue;
                }
                ca->fd = fd;
                pthread_t t;
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&t, &a, conn_thread, ca) != 0) {
                        gw_conns_release(ca->slot);
                        free(ca);
                        close(fd);
                }
                pthread_attr_destroy(&a);
        }
}

/* HTTPS on the listener: TLS 1.2 or 1.3 (E2B's SDKs and browsers speak
 * both; the daemon's own listener is 1.3 only because only its own
 * clients use it), the certificate chain and key of the given PEM files.
 * Clients are not asked for certificates: API keys and envd tokens say
 * who they are. */
static SSL_CTX *tls_context(const char *cert, const char *key) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) ||
            SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
                unsigned long e = ERR_get_error();
                fprintf(stderr, "sandboxd-e2b: --tls-cert %s --tls-key %s: %s\n", cert, key,
                        e ? ERR_reason_error_string(e) : "cannot load them");
                SSL_CTX_free(ctx);
                return NULL;
        }
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
        return ctx;
}

/* --domain: a DNS name (letters, digits, '-', '.'; no empty label),
 * optionally ":PORT" (the sandbox URLs' port when not 443). */
static bool domain_ok(const char *s) {
        size_t n = strcspn(s, ":");
        if (n == 0 || n > 253 || s[0] == '.' || s[n - 1] == '.')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '-' || (s[i] == '.' && s[i + 1] != '.')))
                        return false;
        if (!s[n])
                return true;
        char *end;
        long port = strtol(s + n + 1, &end, 10);
        return s[n + 1] >= '1' && s[n + 1] <= '9' && !*end && port <= 65535;
}

/* A count option's value: 1 to 65536, else false. */
static bool parse_count(const char *s, unsigned *ret) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 1 || v > 65536)
                return false;
        *ret = (unsigned) v;
        return true;
}

int main(int argc, char **argv) {
        const char *listen_spec = NULL, *key_tenant = NULL, *tls_cert = NULL, *tls_key = NULL;
        unsigned max_conns = GW_CONNS_MAX_DEFAULT, per_addr = GW_CONNS_PER_ADDR_DEFAULT, rate = GW_RATE_DEFAULT;
        for (int i = 1; i < argc; i++) {
                if (!strcmp(argv[i], "--socket") && i + 1 < argc)
                        cfg.socket_path = argv[++i];
                else if (!strcmp(argv[i], "--listen") && i + 1 < argc)
                        listen_spec = argv[++i];
                else if (!strcmp(argv[i], "--keys") && i + 1 < argc)
                        cfg.keys_path = argv[++i];
                else if (!strcmp(argv[i], "--domain") && i + 1 < argc) {
                        cfg.domain = argv[++i];
                        if (!domain_ok(cfg.domain)) {
                                fprintf(stderr, "sandboxd-e2b: --domain '%s': want a DNS name, optionally with "
                                                ":PORT (E2B's sandbox domain: hosts are PORT-ID.DOMAIN)\n",
                                        cfg.domain);
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--tls-cert") && i + 1 < argc)
                        tls_cert = argv[++i];
                else if (!strcmp(argv[i], "--tls-key") && i + 1 < argc)
                        tls_key = argv[++i];
                else if (!strcmp(argv[i], "--max-conns") && i + 1 < argc) {
                        if (!parse_count(argv[++i], &max_conns)) {
                                fprintf(stderr, "sandboxd-e2b: --max-conns '%s': want a count from 1 to 65536\n",
                                        argv[i]);
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--max-conns-per-addr") && i + 1 < argc) {
                        if (!parse_count(argv[++i], &per_addr)) {
                                fprintf(stderr, "sandboxd-e2b: --max-conns-per-addr '%s': want a count from 1 to "
                                                "65536\n", argv[i]);
                                return 2;
                        }
                } else if (!strcmp(argv[i], "--rate") && i + 1 < argc) {
                        if (!parse_count(argv[++i], &rate)) {
                                fprintf(stderr, "sandboxd-e2b: --rate '%s': want requests a second per tenant, "
                                                "from 1 to 65536\n", argv[i]);
                                return 2;
                        }
                } else if (i == 1 && !strcmp(argv[i], "key") && i + 2 < argc && !strcmp(argv[i + 1], "add")) {
                        key_tenant = argv[i + 2];
                        i += 2;
                } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                        usage(stdout);
                        return 0;
                } else {
                        fprintf(stderr, "sandboxd-e2b: unknown argument '%s'\n", argv[i]);
                        usage(stderr);
                        return 2;
                }
        }
        if (!cfg.keys_path) {
                fprintf(stderr, "sandboxd-e2b: --keys FILE is required\n");
                return 2;
        }
        if (key_tenant) {
                char key[64];
                int r = gw_key_add(key_tenant, cfg.keys_path, key, sizeof(key));
                if (r == 0)
                        printf("%s\n", key);
                return r;
        }
        if (!listen_spec) {
                fprintf(stderr, "sandboxd-e2b: --listen ADDR:PORT is required\n");
                return 2;
        }
        if (getuid() == 0 || geteuid() == 0) {
                fprintf(stderr, "sandboxd-e2b: refusing to run as root: run it as the uid of daemon.json "
                                "tenants.gateways (it acts only as its callers' tenants)\n");
                return 2;
        }
        int kr = gw_keys_check(cfg.keys_path);
        if (kr < 0) {
                fprintf(stderr, "sandboxd-e2b: --keys %s: %s\n", cfg.keys_path,
                        kr == -EPERM ? "not private to this uid: its secret forges every sandbox's envd token, so "
                                       "it must be a regular file of this uid with mode 0600 (chown and chmod it)"
                                     : strerror(-kr));
                return 2;
        }
        if (!tls_cert != !tls_key) {
                fprintf(stderr, "sandboxd-e2b: --tls-cert and --tls-key go together\n");
                return 2;
        }
        if (tls_cert && !(cfg.tls = tls_context(tls_cert, tls_key)))
                return 1;
        cfg.socket_path = client_socket_path(cfg.socket_path);
        gw_conns_set_limits(max_conns, per_addr);
        gw_rate_set(rate, NULL);
        return serve(listen_spec);
}
