/* Which addresses a source may be fetched from (source.h): the guard that
 * keeps source URLs an agent supplied away from link-local services such as
 * cloud metadata. Runs in sandboxd on worker threads. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include "libcore/source.h"
#include "libcore/util.h"

static __thread core_source_address_guard thread_guard;

void core_source_set_address_guard(core_source_address_guard guard) {
        thread_guard = guard;
}

core_source_address_guard core_source_get_address_guard(void) {
        return thread_guard;
}

static const char *builtin_forbidden(const struct sockaddr *sa);

const char *core_source_address_forbidden(const struct sockaddr *sa) {
        const char *why = builtin_forbidden(sa);
        if (!thread_guard)
                return why;
        /* Under a guard every refusal reads the same, whatever the range:
         * the guard's text (remote clients learn nothing about the host's
         * networks from the error). */
        const char *g = thread_guard(sa);
        return g ? g : why ? thread_guard(NULL) : NULL;
}

static const char *builtin_forbidden(const struct sockaddr *sa) {
        if (sa->sa_family == AF_INET) {
                uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
                if ((a >> 16) == 0xa9fe)
                        return "169.254.0.0/16 is link-local, where cloud metadata lives";
                if (a == 0)
                        return "0.0.0.0 is the unspecified address";
                if ((a >> 28) == 0xe)
                        return "224.0.0.0/4 is multicast";
                if (a == 0xffffffff)
                        return "255.255.255.255 is broadcast";
                return NULL;
        }
        if (sa->sa_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                if (IN6_IS_ADDR_LINKLOCAL(a))
                        return "fe80::/10 is link-local";
                if (IN6_IS_ADDR_UNSPECIFIED(a))
                        return ":: is the unspecified address";
                if (IN6_IS_ADDR_MULTICAST(a))
                        return "ff00::/8 is multicast";
                if (IN6_IS_ADDR_V4MAPPED(a)) {
                        struct sockaddr_in v4 = {.sin_family = AF_INET};
                        memcpy(&v4.sin_addr, &a->s6_addr[12], 4);
                        return builtin_forbidden((const struct sockaddr *)&v4);
                }
                return NULL;
        }
        return "not an IP address";
}

int core_source_host_check(const char *url, sb_error **ret_err) {
        if (url[0] == '/' || !strncasecmp(url, "file:", 5))
                return 0;
        CURLU *u = curl_url();
        char *host = NULL;
        if (!u)
                return sb_error_set(ret_err, -ENOMEM, "source_failed", NULL, "out of memory");
        int bad = curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
                  curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK;
        curl_url_cleanup(u);
        if (bad) {
                curl_free(host);
                return sb_error_set(ret_err, -EINVAL, "source_failed", "source.url",
                                    "source.url: cannot find the host in the URL");
        }
        /* curl keeps IPv6 literals in brackets. */
        char name[256];
        size_t n = strlen(host);
        if (n >= 2 && host[0] == '[' && host[n - 1] == ']')
                snprintf(name, sizeof(name), "%.*s", (int)(n - 2), host + 1);
        else
                snprintf(name, sizeof(name), "%s", host);
        curl_free(host);
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        int e = getaddrinfo(name, NULL, &hints, &res);
        if (e != 0)
                return sb_error_set(ret_err, -EHOSTUNREACH, "source_failed", "source.url",
                                    "source.url: cannot resolve '%s': %s", name, gai_strerror(e));
        int r = 0;
        for (struct addrinfo *ai = res; ai && r == 0; ai = ai->ai_next) {
                const char *why = core_source_address_forbidden(ai->ai_addr);
                if (why)
                        r = sb_error_set(ret_err, -EACCES, "source_failed", "source.url",
                                         "source.url: refusing to fetch from '%s' (%s)", name, why);
        }
        freeaddrinfo(res);
        return r;
}
