/* `sandboxctl certs init DIR`: a quick-start set of certificates for the
 * remote listener (docs/SECURITY.md "Remote clients", sandboxd(8)), made
 * with OpenSSL's library: a CA, a server certificate for the daemon's
 * tlsCert/tlsKey, an admin client certificate and, with --tag K=V, one for
 * the tag role tag:K=V (the tenant "tag:K=V", sandboxd/tenant.h). Keys are EC P-256, written mode 0600; no file is
 * ever replaced (O_EXCL), so running it twice cannot swap a CA under a
 * running daemon. */
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include "cli/lazy/openssl.h"
#include "libcore/macro.h"
#include "cli/ctl.h"

static const char certs_help[] =
        "Usage: sandboxctl certs init DIR [--tag K=V] [--tenant NAME] [--name HOST]... [--days N]\n"
        "\n"
        "Makes in DIR (created mode 0700 if missing; no file is replaced):\n"
        "  ca.pem, ca-key.pem          a CA: daemon.json tlsClientCA, and what clients verify the daemon with\n"
        "  server.pem, server-key.pem  the daemon's tlsCert and tlsKey, for localhost,\n"
        "                              127.0.0.1, ::1 and each --name (a DNS name or an address)\n"
        "  client.pem, client-key.pem  a client of role admin (subject O=admin)\n"
        "  tag.pem, tag-key.pem        with --tag K=V: a client of role tag:K=V, the tenant\n"
        "                              \"tag:K=V\", which sees and changes only what it made\n"
        "  tenant.pem, tenant-key.pem  with --tenant NAME: a client of role tenant:NAME (subject\n"
        "                              O=tenant:NAME), the tenant NAME\n"
        "--days N: validity of the server and client certificates (default 365; the CA 3650).\n";

#define CERTS_NAMES_MAX 16

typedef struct cert_spec {
        const char *cn, *org;     /* subject; org NULL: none */
        bool ca;
        bool server;              /* EKU serverAuth and the SANs, else clientAuth */
        int days;
} cert_spec;

static EVP_PKEY *new_key(void) {
        return EVP_EC_gen("P-256");
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
        X509V3_CTX v3;
        X509V3_set_ctx_nodb(&v3);
        X509V3_set_ctx(&v3, issuer, cert, NULL, NULL, 0);
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, nid, value);
        if (!e)
                return -EINVAL;
        int ok = X509_add_ext(cert, e, -1);
        X509_EXTENSION_free(e);
        return ok ? 0 : -ENOMEM;
}

/* The SAN list: localhost and the loopback addresses, then each name as an
 * IP: or DNS: entry. */
static char *san_list(char **names, size_t n) {
        size_t cap = 64;
        for (size_t i = 0; i < n; i++)
                cap += strlen(names[i]) + 8;
        char *s = malloc(cap);
        if (!s)
                return NULL;
        strcpy(s, "DNS:localhost,IP:127.0.0.1,IP:::1");
        for (size_t i = 0; i < n; i++) {
                unsigned char buf[16];
                bool ip = inet_pton(AF_INET, names[i], buf) == 1 || inet_pton(AF_INET6, names[i], buf) == 1;
                strcat(s, ip ? ",IP:" : ",DNS:");
                strcat(s, names[i]);
        }
        return s;
}

/* Builds and signs one certificate (self-signed when issuer is NULL). */
static X509 *make_cert(const cert_spec *spec, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key, char **names,
                       size_t n_names) {
        X509 *c = X509_new();
        if (!c)
                return NULL;
        unsigned char serial[16];
        BIGNUM *bn = NULL;
        int ok = RAND_bytes(serial, sizeof(serial)) == 1;
        serial[0] &= 0x7f;  /* positive (RFC 5280 §4.1.2.2) */
        ok = ok && (bn = BN_bin2bn(serial, sizeof(serial), NULL)) && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c));
        BN_free(bn);
        ok = ok && X509_set_version(c, 2) && X509_gmtime_adj(X509_getm_notBefore(c), -300) &&
             X509_gmtime_adj(X509_getm_notAfter(c), (long) spec->days * 86400) && X509_set_pubkey(c, key);
        X509_NAME *name = X509_get_subject_name(c);
        if (ok && spec->org)
                ok = X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, (const unsigned char *) spec->org, -1, -1, 0);
        ok = ok && X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *) spec->cn, -1, -1, 0);
        ok = ok && X509_set_issuer_name(c, issuer ? X509_get_subject_name(issuer) : name);
        X509 *iss = issuer ? issuer : c;
        if (ok && spec->ca)
                ok = add_ext(c, iss, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") == 0 &&
                     add_ext(c, iss, NID_key_usage, "critical,keyCertSign,cRLSign") == 0 &&
                     add_ext(c, iss, NID_subject_key_identifier, "hash") == 0;
        else if (ok) {
                _cleanup_free_ char *san = spec->server ? san_list(names, n_names) : NULL;
                ok = add_ext(c, iss, NID_basic_constraints, "critical,CA:FALSE") == 0 &&
                     add_ext(c, iss, NID_key_usage, "critical,digitalSignature") == 0 &&
                     add_ext(c, iss, NID_ext_key_usage, spec->server ? "serverAuth" : "clientAuth") == 0 &&
                     add_ext(c, iss, NID_subject_key_identifier, "hash") == 0 &&
                     add_ext(c, iss, NID_authority_key_identifier, "keyid:always") == 0 &&
                     (!spec->server || (san && add_ext(c, iss, NID_subject_alt_name, san) == 0));
        }
        ok = ok && X509_sign(c, issuer_key ? issuer_key : key, EVP_sha256()) > 0;
        if (!ok) {
                X509_free(c);
                return NULL;
        }
        return c;
}

/* Writes a PEM object to DIR/NAME, created exclusively with `mode`. */
static int write_pem(int dirfd, const char *dir, const char *name, mode_t mode, X509 *cert, EVP_PKEY *key) {
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return ctl_error(CLI_EXIT_ERROR, "certs: %s/%s: %s%s", dir, name, strerror(errno),
                                 errno == EEXIST ? " (not replacing it; use another DIR)" : "");
        FILE *f = fdopen(fd, "w");
        if (!f) {
                close(fd);
                return ctl_error(CLI_EXIT_ERROR, "certs: %s/%s: %s", dir, name, strerror(errno));
        }
        int ok = cert ? PEM_write_X509(f, cert) : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
        ok = fclose(f) == 0 && ok;
        return ok ? 0 : ctl_error(CLI_EXIT_ERROR, "certs: write %s/%s failed", dir, name);
}

static int write_pair(int dirfd, const char *dir, const char *cert_name, const char *key_name, X509 *cert,
                      EVP_PKEY *key) {
        int r = write_pem(dirfd, dir, key_name, 0600, NULL, key);
        return r ? r : write_pem(dirfd, dir, cert_name, 0644, cert, NULL);
}

/* A tenant:NAME's NAME as sandboxd takes it (sandboxd/remote.c): 1-57
 * (64 with "tenant:") of A-Z, a-z, 0-9, '.', '_', '-', starting with a
 * letter or digit. */
static bool tenant_name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n + 7 > 64 || !isalnum((unsigned char) s[0]))
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char) *s) && *s != '.' && *s != '_' && *s != '-')
                        return false;
        return true;
}

static int certs_init(const char *dir, const char *tag, const char *tenant, char **names, size_t n_names,
                      int days) {
        if (tag) {
                const char *eq = strchr(tag, '=');
                if (!eq || eq == tag || !eq[1] || strlen(tag) + 4 > 64)
                        return ctl_usage("certs", "certs: --tag must be K=V (non-empty K and V, at most 60 bytes)");
        }
        if (tenant && !tenant_name_ok(tenant))
                return ctl_usage("certs", "certs: --tenant must be a NAME of 1-57 of A-Z, a-z, 0-9, '.', '_' and "
                                          "'-', starting with a letter or digit");
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return ctl_error(CLI_EXIT_ERROR, "certs: mkdir %s: %s", dir, strerror(errno));
        _cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                return ctl_error(CLI_EXIT_ERROR, "certs: %s: %s", dir, strerror(errno));
        /* All or nothing: refuse before writing if any file of the set is
         * there, so a half-replaced set never mixes two CAs. */
        static const char *const files[] = { "ca.pem", "ca-key.pem", "server.pem", "server-key.pem", "client.pem",
                                             "client-key.pem", "tag.pem", "tag-key.pem", "tenant.pem",
                                             "tenant-key.pem" };
        struct stat st;
        for (size_t i = 0; i < ELEMENTSOF(files); i++)
                if ((i < 6 || (i < 8 && tag) || (i >= 8 && tenant)) &&
                    (fstatat(dirfd, files[i], &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT))
                        return ctl_error(CLI_EXIT_ERROR, "certs: %s/%s exists (not replacing it; use another DIR)",
                                         dir, files[i]);
        _cleanup_free_ char *tag_org = NULL, *tenant_org = NULL;
        if ((tag && asprintf(&tag_org, "tag:%s", tag) < 0) || (tenant && asprintf(&tenant_org, "tenant:%s", tenant) < 0))
                return ctl_error(CLI_EXIT_ERROR, "out of memory");
        const cert_spec ca_spec = { .cn = "sandboxd CA", .ca = true, .days = 3650 };
        const cert_spec server_spec = { .cn = "sandboxd", .server = true, .days = days };
        const cert_spec admin_spec = { .cn = "admin", .org = "admin", .days = days };
        const cert_spec tag_spec = { .cn = tag ? tag : "", .org = tag_org, .days = days };
        const cert_spec tenant_spec = { .cn = tenant ? tenant : "", .org = tenant_org, .days = days };
        EVP_PKEY *keys[5] = {};
        X509 *certs[5] = {};
        int r = 0;
        for (size_t i = 0; i < 5 && r == 0; i++)
                if ((i < 3 || (i == 3 && tag) || (i == 4 && tenant)) && !(keys[i] = new_key()))
                        r = -ENOMEM;
        if (r == 0 && !(certs[0] = make_cert(&ca_spec, keys[0], NULL, NULL, NULL, 0)))
                r = -EINVAL;
        if (r == 0 && !(certs[1] = make_cert(&server_spec, keys[1], certs[0], keys[0], names, n_names)))
                r = -EINVAL;
        if (r == 0 && !(certs[2] = make_cert(&admin_spec, keys[2], certs[0], keys[0], NULL, 0)))
                r = -EINVAL;
        if (r == 0 && tag && !(certs[3] = make_cert(&tag_spec, keys[3], certs[0], keys[0], NULL, 0)))
                r = -EINVAL;
        if (r == 0 && tenant && !(certs[4] = make_cert(&tenant_spec, keys[4], certs[0], keys[0], NULL, 0)))
                r = -EINVAL;
        if (r < 0) {
                char buf[256] = "";
                ERR_error_string_n(ERR_peek_last_error(), buf, sizeof(buf));
                r = ctl_error(CLI_EXIT_ERROR, "certs: making the certificates failed: %s", buf);
        }
        if (r == 0)
                r = write_pair(dirfd, dir, "ca.pem", "ca-key.pem", certs[0], keys[0]);
        if (r == 0)
                r = write_pair(dirfd, dir, "server.pem", "server-key.pem", certs[1], keys[1]);
        if (r == 0)
                r = write_pair(dirfd, dir, "client.pem", "client-key.pem", certs[2], keys[2]);
        if (r == 0 && tag)
                r = write_pair(dirfd, dir, "tag.pem", "tag-key.pem", certs[3], keys[3]);
        if (r == 0 && tenant)
                r = write_pair(dirfd, dir, "tenant.pem", "tenant-key.pem", certs[4], keys[4]);
        for (size_t i = 0; i < 5; i++) {
                X509_free(certs[i]);
                EVP_PKEY_free(keys[i]);
        }
        if (r == 0)
                printf("daemon.json:\n  \"listen\": [\"tcp://0.0.0.0:7443\"],\n  \"tlsCert\": \"%s/server.pem\",\n"
                       "  \"tlsKey\": \"%s/server-key.pem\",\n  \"tlsClientCA\": \"%s/ca.pem\"\n"
                       "client:\n  sandboxctl --host tcp://HOST:7443 --cert %s/client.pem --key %s/client-key.pem "
                       "--ca %s/ca.pem ls\n",
                       dir, dir, dir, dir, dir, dir);
        return r;
}

int ctl_certs(ctl_globals *g, int argc, char **argv) {
        enum { OPT_TAG = 1000, OPT_NAME, OPT_DAYS, OPT_TENANT };
        static const struct option opts[] = {
                { "tag", required_argument, NULL, OPT_TAG },
                { "tenant", required_argument, NULL, OPT_TENANT },
                { "name", required_argument, NULL, OPT_NAME },
                { "days", required_argument, NULL, OPT_DAYS },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *tag = NULL, *tenant = NULL;
        char *names[CERTS_NAMES_MAX];
        size_t n_names = 0;
        int days = 365, opt;
        optind = 0;
        while ((opt = ctl_getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                switch (opt) {
                case OPT_TAG:
                        tag = optarg;
                        break;
                case OPT_TENANT:
                        tenant = optarg;
                        break;
                case OPT_NAME:
                        if (n_names >= CERTS_NAMES_MAX || !optarg[0] || strpbrk(optarg, ", \t\n"))
                                return ctl_usage("certs", "certs: --name: up to %d names without ',' or spaces",
                                                 CERTS_NAMES_MAX);
                        names[n_names++] = optarg;
                        break;
                case OPT_DAYS: {
                        char *end;
                        long d = strtol(optarg, &end, 10);
                        if (*end || d < 1 || d > 3650)
                                return ctl_usage("certs", "certs: --days: a number from 1 to 3650");
                        days = (int) d;
                        break;
                }
                case 'h':
                        fputs(certs_help, stdout);
                        return 0;
                default:
                        return ctl_usage("certs", "certs: unknown option");
                }
        }
        if (argc - optind != 2 || !streq(argv[optind], "init"))
                return ctl_usage("certs", "certs: want 'init DIR'");
        return certs_init(argv[optind + 1], tag, tenant, names, n_names, days);
}
