/* API keys and envd access tokens of sandboxd-e2b (docs/E2B.md "Keys").
 *
 * The keys file holds, one per line:
 *   secret HEX          32 random bytes: the HMAC key of envd tokens
 *   key TENANT SHA256   the SHA-256 (hex) of one API key, and its tenant
 * Only hashes are stored: a copy of the file lets nobody call the
 * gateway. A key is "e2b_" and 40 hex digits (160 random bits), the form
 * E2B's SDKs accept. Envd tokens are "TENANT.HMAC-SHA256(secret,
 * TENANT '\n' SANDBOX)" in hex: one per sandbox, so a token of one
 * sandbox opens no other, and the gateway keeps no state for them. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ctype.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include "e2b/gateway.h"

static void to_hex(const unsigned char *in, size_t n, char *out) {
        static const char digits[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = digits[in[i] >> 4];
                out[2 * i + 1] = digits[in[i] & 15];
        }
        out[2 * n] = 0;
}

static int sha256_hex(const char *s, char out[65]) {
        unsigned char md[32];
        unsigned int len = 0;
        if (!EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL) || len != 32)
                return -EIO;
        to_hex(md, 32, out);
        return 0;
}

bool gw_tenant_name_ok(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > 64 || !isalnum((unsigned char) s[0]))
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char) *s) && *s != '.' && *s != '_' && *s != '-')
                        return false;
        return true;
}

/* The keys file's secret forges an envd token of any tenant's sandbox:
 * a file another uid could read or write (mode bits for group or other,
 * or another owner than the reader; root, running `key add` on the
 * gateway's file, may read it) is not used. -EPERM, or 0. */
static int keys_private(int fd) {
        struct stat st;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || (st.st_mode & 077) || (st.st_uid != geteuid() && geteuid() != 0))
                return -EPERM;
        return 0;
}

int gw_keys_check(const char *keys_path) {
        int fd = open(keys_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        int r = keys_private(fd);
        close(fd);
        return r;
}

/* Reads the whole keys file (new string) or NULL with errno (EPERM: not
 * private, keys_private). */
static char *read_keys(const char *path) {
        FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        int r = keys_private(fileno(f));
        if (r < 0) {
                fclose(f);
                errno = -r;
                return NULL;
        }
        char *buf = NULL;
        size_t len = 0;
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
                char *p = realloc(buf, len + n + 1);
                if (!p) {
                        free(buf);
                        fclose(f);
                        errno = ENOMEM;
                        return NULL;
                }
                buf = p;
                memcpy(buf + len, chunk, n);
                len += n;
        }
        fclose(f);
        if (!buf && !(buf = calloc(1, 1)))
                return NULL;
        buf[len] = 0;
        return buf;
}

/* The secret of the keys text, decoded into out; -ENOENT when none. */
static int find_secret(const char *text, unsigned char out[GW_SECRET_BYTES]) {
        for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
                if (strncmp(l, "secret ", 7) != 0)
                        continue;
                for (int i = 0; i < GW_SECRET_BYTES; i++) {
                        unsigned v;
                        if (sscanf(l + 7 + 2 * i, "%2x", &v) != 1)
                                return -EINVAL;
                        out[i] = (unsigned char) v;
                }
                return 0;
        }
        return -ENOENT;
}

int gw_key_add(const char *tenant, const char *keys_path, char *ret_key, size_t size) {
        if (!gw_tenant_name_ok(tenant)) {
                fprintf(stderr, "sandboxd-e2b: key add: tenant '%s': use 1-64 of A-Z, a-z, 0-9, '.', '_', '-', "
                                "starting with a letter or digit (the daemon's tenant:NAME rule)\n", tenant);
                return 2;
        }
        int fd = open(keys_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0 || flock(fd, LOCK_EX) < 0) {
                fprintf(stderr, "sandboxd-e2b: key add: %s: %s\n", keys_path, strerror(errno));
                if (fd >= 0)
                        close(fd);
                return 1;
        }
        unsigned char rnd[GW_SECRET_BYTES + 20], dummy[GW_SECRET_BYTES];
        char hex[2 * GW_SECRET_BYTES + 1], key[128], hash[65], line[256];
        char *text = read_keys(keys_path);
        int r = 0;
        if (!text || RAND_bytes(rnd, sizeof(rnd)) != 1) {
                fprintf(stderr, "sandboxd-e2b: key add: %s: cannot read it or no randomness\n", keys_path);
                r = 1;
                goto out;
        }
        if (find_secret(text, dummy) == -ENOENT) {
                to_hex(rnd, GW_SECRET_BYTES, hex);
                int n = snprintf(line, sizeof(line), "secret %s\n", hex);
                if (write(fd, line, (size_t) n) != n) {
                        r = 1;
                        goto out;
                }
        }
        to_hex(rnd + GW_SECRET_BYTES, 20, hex);
        snprintf(key, sizeof(key), "e2b_%s", hex);
        if (sha256_hex(key, hash) < 0) {
                r = 1;
                goto out;
        }
        int n = snprintf(line, sizeof(line), "key %s %s\n", tenant, hash);
        if (write(fd, line, (size_t) n) != n || fsync(fd) < 0) {
                fprintf(stderr, "sandboxd-e2b: key add: write %s: %s\n", keys_path, strerror(errno));
                r = 1;
                goto out;
        }
        snprintf(ret_key, size, "%s", key);
out:
        OPENSSL_cleanse(rnd, sizeof(rnd));
        free(text);
        close(fd);
        return r;
}

int gw_key_tenant(const char *keys_path, const char *key, char *ret, size_t size) {
        char hash[65];
        if (!key || strncmp(key, "e2b_", 4) != 0 || sha256_hex(key, hash) < 0)
                return -EACCES;
        char *text = read_keys(keys_path);
        if (!text)
                return -errno;
        int r = -EACCES;
        for (char *l = text, *next; l && *l; l = next) {
                next = strchr(l, '\n');
                if (next)
                        *next++ = 0;
                char t[80], h[80];
                if (sscanf(l, "key %79s %79s", t, h) == 2 && strlen(h) == 64 && CRYPTO_memcmp(h, hash, 64) == 0) {
                        snprintf(ret, size, "%s", t);
                        r = 0;
                        break;
                }
        }
        free(text);
        return r;
}

/* HMAC-SHA256 under the keys file's secret over `kind` (NULL: an envd
 * token, "tenant\nsandbox"; "traffic": a traffic token,
 * "traffic\ntenant\nsandbox": sandbox names and tenant names hold no
 * newline, so the two never share a message), as 64 hex digits. */
static int token_mac(const char *keys_path, const char *kind, const char *tenant, const char *sandbox, char out[65]) {
        unsigned char secret[GW_SECRET_BYTES], md[32];
        unsigned int len = 0;
        char *text = read_keys(keys_path);
        if (!text)
                return -errno;
        int r = find_secret(text, secret);
        free(text);
        if (r < 0)
                return r;
        char *msg = NULL;
        if ((kind ? asprintf(&msg, "%s\n%s\n%s", kind, tenant, sandbox) : asprintf(&msg, "%s\n%s", tenant, sandbox)) < 0)
                return -ENOMEM;
        if (!HMAC(EVP_sha256(), secret, sizeof(secret), (unsigned char *) msg, strlen(msg), md, &len) || len != 32)
                r = -EIO;
        OPENSSL_cleanse(secret, sizeof(secret));
        free(msg);
        if (r == 0)
                to_hex(md, 32, out);
        return r;
}

/* ---- sandboxes whose tokens this gateway handed out or accepted ----
 *
 * A signed file URL made with E2B_SANDBOX_URL set names no sandbox (the
 * SDK's downloadUrl()/uploadUrl() put only the path, the user and the
 * signature in it): its sandbox is found among the ones whose envd tokens
 * this gateway handed out (create, connect, get) or accepted lately, at
 * most SEEN_MAX of them, the least recently used forgotten first. Each is
 * kept with its token, so that trying a signature against all of them
 * costs one SHA-256 each and no daemon call. */
#define SEEN_MAX 1024

typedef struct seen {
        char tenant[80], sandbox[64], token[160];
        uint64_t used;  /* when it was last noted: the least is forgotten first */
} seen;

static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static seen seen_tab[SEEN_MAX];
static size_t n_seen;
static uint64_t seen_clock;

static void seen_note(const char *tenant, const char *sandbox, const char *token) {
        if (strlen(tenant) >= sizeof(seen_tab[0].tenant) || strlen(sandbox) >= sizeof(seen_tab[0].sandbox) ||
            strlen(token) >= sizeof(seen_tab[0].token))
                return;
        pthread_mutex_lock(&seen_lock);
        size_t i = 0, oldest = 0;
        for (; i < n_seen; i++) {
                if (!strcmp(seen_tab[i].sandbox, sandbox) && !strcmp(seen_tab[i].tenant, tenant))
                        break;
                if (seen_tab[i].used < seen_tab[oldest].used)
                        oldest = i;
        }
        if (i == n_seen && n_seen == SEEN_MAX)
                i = oldest;
        else if (i == n_seen)
                n_seen++;
        seen *e = &seen_tab[i];
        snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
        snprintf(e->sandbox, sizeof(e->sandbox), "%s", sandbox);
        snprintf(e->token, sizeof(e->token), "%s", token);
        e->used = ++seen_clock;
        pthread_mutex_unlock(&seen_lock);
}

static char *make_token(const char *keys_path, const char *kind, const char *tenant, const char *sandbox) {
        char mac[65];
        char *tok = NULL;
        if (token_mac(keys_path, kind, tenant, sandbox, mac) < 0 || asprintf(&tok, "%s.%s", tenant, mac) < 0)
                return NULL;
        if (!kind) /* envd tokens only: a traffic token never signs a file URL */
                seen_note(tenant, sandbox, tok);
        return tok;
}

char *gw_envd_token(const char *keys_path, const char *tenant, const char *sandbox) {
        return make_token(keys_path, NULL, tenant, sandbox);
}

char *gw_traffic_token(const char *keys_path, const char *tenant, const char *sandbox) {
        return make_token(keys_path, "traffic", tenant, sandbox);
}

/* Whether the keys file still has a key of `tenant`: a tenant whose last
 * key was removed keeps no envd access through tokens it was given. */
static bool tenant_has_key(const char *keys_path, const char *tenant) {
        char *text = read_keys(keys_path);
        bool found = false;
        for (char *l = text, *next; l && *l && !found; l = next) {
                next = strchr(l, '\n');
                if (next)
                        *next++ = 0;
                char t[80], h[80];
                found = sscanf(l, "key %79s %79s", t, h) == 2 && strlen(h) == 64 && !strcmp(t, tenant);
        }
        free(text);
        return found;
}

static int token_check(const char *keys_path, const char *kind, const char *token, const char *sandbox, char *ret,
                       size_t size) {
        const char *dot = token ? strrchr(token, '.') : NULL;
        char tenant[80], mac[65];
        if (!dot || (size_t) (dot - token) >= sizeof(tenant) || strlen(dot + 1) != 64)
                return -EACCES;
        memcpy(tenant, token, (size_t) (dot - token));
        tenant[dot - token] = 0;
        if (!gw_tenant_name_ok(tenant) || token_mac(keys_path, kind, tenant, sandbox, mac) < 0 ||
            CRYPTO_memcmp(mac, dot + 1, 64) != 0 || !tenant_has_key(keys_path, tenant))
                return -EACCES;
        snprintf(ret, size, "%s", tenant);
        if (!kind) /* as make_token: envd tokens only */
                seen_note(tenant, sandbox, token);
        return 0;
}

int gw_file_signature(const char *path, const char *op, const char *user, const char *token, const char *exp,
                      char out[GW_SIGNATURE_SIZE]) {
        char *raw = NULL;
        unsigned char md[32];
        unsigned int len = 0;
        int n = exp ? asprintf(&raw, "%s:%s:%s:%s:%s", path, op, user, token, exp)
                    : asprintf(&raw, "%s:%s:%s:%s", path, op, user, token);
        if (n < 0)
                return -ENOMEM;
        int ok = EVP_Digest(raw, (size_t) n, md, &len, EVP_sha256(), NULL) && len == 32;
        OPENSSL_cleanse(raw, (size_t) n);
        free(raw);
        if (!ok)
                return -EIO;
        memcpy(out, "v1_", 3);
        int b = EVP_EncodeBlock((unsigned char *) out + 3, md, 32); /* 44 characters, NUL-ended */
        while (b > 0 && out[3 + b - 1] == '=')
                out[3 + --b] = 0;
        return 0;
}

/* Whether `sig` (NUL-ended) is the signature for `token`. */
static bool signature_is(const char *sig, const char *path, const char *op, const char *user, const char *exp,
                         const char *token) {
        char want[GW_SIGNATURE_SIZE];
        size_t n = strlen(sig);
        return gw_file_signature(path, op, user, token, exp, want) == 0 && n == strlen(want) &&
               CRYPTO_memcmp(want, sig, n) == 0;
}

int gw_signature_find(const char *keys_path, const char *sandbox, const char *path, const char *op, const char *user,
                      const char *exp, const char *sig, char *ret_tenant, size_t tsize, char *ret_sandbox,
                      size_t ssize) {
        char tenant[80] = "", sbx[64] = "";
        if (sandbox) {
                /* The named sandbox: the token of each tenant with a key. */
                char *text = read_keys(keys_path);
                if (!text)
                        return -errno;
                for (char *l = text, *next; l && *l && !tenant[0]; l = next) {
                        next = strchr(l, '\n');
                        if (next)
                                *next++ = 0;
                        char t[80], h[80], mac[65], tok[160];
                        if (sscanf(l, "key %79s %79s", t, h) != 2 || token_mac(keys_path, NULL, t, sandbox, mac) < 0)
                                continue;
                        snprintf(tok, sizeof(tok), "%s.%s", t, mac);
                        if (signature_is(sig, path, op, user, exp, tok))
                                snprintf(tenant, sizeof(tenant), "%s", t);
                }
                free(text);
                snprintf(sbx, sizeof(sbx), "%s", sandbox);
        } else {
                pthread_mutex_lock(&seen_lock);
                for (size_t i = 0; i < n_seen && !tenant[0]; i++)
                        if (signature_is(sig, path, op, user, exp, seen_tab[i].token)) {
                                snprintf(tenant, sizeof(tenant), "%s", seen_tab[i].tenant);
                                snprintf(sbx, sizeof(sbx), "%s", seen_tab[i].sandbox);
                        }
                pthread_mutex_unlock(&seen_lock);
        }
        /* The token it was made with must still be valid (the secret
         * unchanged, the tenant still with a key). */
        char *tok = tenant[0] ? gw_envd_token(keys_path, tenant, sbx) : NULL;
        char check[80];
        bool ok = tok && signature_is(sig, path, op, user, exp, tok) &&
                  gw_envd_token_check(keys_path, tok, sbx, check, sizeof(check)) == 0;
        free(tok);
        if (!ok)
                return -EACCES;
        snprintf(ret_tenant, tsize, "%s", tenant);
        snprintf(ret_sandbox, ssize, "%s", sbx);
        return 0;
}

int gw_envd_token_check(const char *keys_path, const char *token, const char *sandbox, char *ret, size_t size) {
        return token_check(keys_path, NULL, token, sandbox, ret, size);
}

int gw_traffic_token_check(const char *keys_path, const char *token, const char *sandbox, char *ret, size_t size) {
        return token_check(keys_path, "traffic", token, sandbox, ret, size);
}

int gw_key_tenants(const char *keys_path, char (*ret)[80], size_t max) {
        char *text = read_keys(keys_path);
        if (!text)
                return -errno;
        size_t n = 0;
        for (char *l = text, *next; l && *l && n < max; l = next) {
                next = strchr(l, '\n');
                if (next)
                        *next++ = 0;
                char t[80], h[80];
                if (sscanf(l, "key %79s %79s", t, h) != 2 || strlen(h) != 64 || !gw_tenant_name_ok(t))
                        continue;
                bool known = false;
                for (size_t i = 0; i < n && !known; i++)
                        known = !strcmp(ret[i], t);
                if (!known)
                        snprintf(ret[n++], 80, "%s", t);
        }
        free(text);
        return (int) n;
}
