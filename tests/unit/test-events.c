/* Unit tests for sandboxd/events.c: how policy.check reads a URL into the
 * host it judges and the port (the scheme's default when none is written),
 * and which URLs it refuses with an error naming the "url" field. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "sandboxd/events.h"

typedef struct url_case {
        const char *url;
        const char *host; /* NULL: an error */
        uint16_t port;
} url_case;

static const url_case url_cases[] = {
        { "https://api.example.com/v1", "api.example.com", 443 },
        { "http://api.example.com", "api.example.com", 80 },
        { "HTTPS://API.example.com:8443/x?y#z", "API.example.com", 8443 },
        { "wss://chat.example.com/socket", "chat.example.com", 443 },
        { "ws://chat.example.com", "chat.example.com", 80 },
        { "https://example.com:/", "example.com", 443 },       /* empty port: the default */
        { "https://user:pw@example.com/", "example.com", 443 }, /* userinfo dropped */
        { "https://a.com@b.com/", "b.com", 443 },              /* the host follows the last '@' */
        { "https://a.com\\@b.com/", "a.com", 443 },            /* '\' ends the authority (WHATWG) */
        { "http://[::1]:8080/", "[::1]", 8080 },
        { "http://[fe80::1]/", "[fe80::1]", 80 },
        { "http://0x7f.1/", "0x7f.1", 80 },                    /* judged as an address later */
        { "postgres://db.example.com:5432/x", "db.example.com", 5432 },
        { "postgres://db.example.com/x", NULL, 0 },            /* no default port */
        { "api.example.com/v1", NULL, 0 },                     /* no scheme */
        { "://api.example.com", NULL, 0 },
        { "1http://api.example.com", NULL, 0 },
        { "https:///path", NULL, 0 },                          /* no host */
        { "https://user@/", NULL, 0 },
        { "https://example.com:0/", NULL, 0 },
        { "https://example.com:65536/", NULL, 0 },
        { "https://example.com:443x/", NULL, 0 },
        { "https://example.com:-1/", NULL, 0 },
        { "http://[::1]x/", NULL, 0 },
};

static void test_parse_url_table(void **state) {
        for (size_t i = 0; i < sizeof(url_cases) / sizeof(url_cases[0]); i++) {
                const url_case *c = &url_cases[i];
                char *host = NULL;
                uint16_t port = 0;
                sb_error *err = NULL;
                int r = events_parse_url(c->url, &host, &port, &err);
                if (c->host) {
                        if (r != 0)
                                fail_msg("%s: %s", c->url, err ? err->message : "?");
                        assert_string_equal(host, c->host);
                        assert_int_equal(port, c->port);
                        assert_null(err);
                } else {
                        if (r != -EINVAL)
                                fail_msg("%s: accepted as host '%s' port %u", c->url, host ? host : "", port);
                        assert_null(host);
                        assert_non_null(err);
                        assert_string_equal(err->field, "url");
                        assert_non_null(strstr(err->message, "url: "));
                }
                free(host);
                sb_error_free(err);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_parse_url_table),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
