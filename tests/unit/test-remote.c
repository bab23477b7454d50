/* Unit tests for sandboxd/remote.c's subject-to-role mapping: the roles a
 * well-formed subject names, and every spoofing shape refused (multi-valued
 * RDNs, repeated CN or O, embedded NUL, control characters, other string
 * types, over-long values, unknown roles). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <openssl/asn1.h>
#include <openssl/x509.h>
#include "sandboxd/remote.h"

/* Adds attribute `field` with `len` bytes of `value` as ASN.1 `type`, in
 * RDN `set`: 0 a new RDN at the end, -1 joins the last one. */
static void add(X509_NAME *n, const char *field, int type, const char *value, int len, int set) {
        if (X509_NAME_add_entry_by_txt(n, field, type, (const unsigned char *) value, len, -1, set) != 1)
                fail_msg("cannot add %s=%s", field, value);
}

static X509_NAME *name2(const char *org, const char *cn) {
        X509_NAME *n = X509_NAME_new();
        assert_non_null(n);
        if (org)
                add(n, "O", MBSTRING_UTF8, org, -1, 0);
        if (cn)
                add(n, "CN", MBSTRING_UTF8, cn, -1, 0);
        return n;
}

static remote_identity *map_ok(X509_NAME *n) {
        remote_identity *id = NULL;
        const char *reason = NULL;
        int r = remote_identity_from_name(n, &id, &reason);
        if (r < 0)
                fail_msg("refused: %s", reason);
        X509_NAME_free(n);
        return id;
}

static void refused(X509_NAME *n, const char *why) {
        remote_identity *id = NULL;
        const char *reason = NULL;
        int r = remote_identity_from_name(n, &id, &reason);
        if (r != -EACCES)
                fail_msg("expected a refusal saying '%s', got %d (role %s)", why, r, id ? id->role_text : "-");
        assert_null(id);
        assert_non_null(reason);
        if (!strstr(reason, why))
                fail_msg("reason '%s' does not say '%s'", reason, why);
        X509_NAME_free(n);
}

static void test_admin_and_tag_roles(void **state) {
        remote_identity *id = map_ok(name2("admin", "alice"));
        assert_int_equal(id->role, REMOTE_ROLE_ADMIN);
        assert_string_equal(id->name, "alice");
        assert_string_equal(id->role_text, "admin");
        assert_string_equal(id->subject, "CN=alice,O=admin");
        remote_identity_free(id);
        id = map_ok(name2("tag:team=a=b", "ci"));
        assert_int_equal(id->role, REMOTE_ROLE_TAG);
        assert_string_equal(id->tag_key, "team");
        assert_string_equal(id->tag_value, "a=b");  /* split at the first '=' */
        assert_string_equal(id->tenant, "tag:team=a=b"); /* the tenant it is (tenant.h) */
        remote_identity_free(id);
        id = map_ok(name2("tenant:team-a.ci_1", "ci"));
        assert_int_equal(id->role, REMOTE_ROLE_TENANT);
        assert_string_equal(id->tenant, "team-a.ci_1");
        assert_string_equal(id->role_text, "tenant:team-a.ci_1");
        remote_identity_free(id);
        id = map_ok(name2("admin", "root"));
        assert_null(id->tenant);
        remote_identity_free(id);
        /* Other attributes (C, OU) are allowed and ignored; UTF-8 is fine. */
        X509_NAME *n = X509_NAME_new();
        add(n, "C", MBSTRING_ASC, "DE", -1, 0);
        add(n, "OU", MBSTRING_UTF8, "admin", -1, 0);
        add(n, "O", MBSTRING_UTF8, "tag:équipe=α", -1, 0);
        add(n, "CN", MBSTRING_UTF8, "jörg", -1, 0);
        id = map_ok(n);
        assert_string_equal(id->tag_key, "équipe");
        assert_string_equal(id->name, "jörg");
        /* The logged subject escapes what is not printable ASCII. */
        assert_null(strchr(id->subject, (char) 0xc3));
        remote_identity_free(id);
}

static void test_spoofed_subjects_are_refused(void **state) {
        refused(name2(NULL, "alice"), "no O");
        refused(name2("admin", NULL), "no CN");
        refused(name2("root", "x"), "names no role");
        refused(name2("Admin", "x"), "names no role");
        refused(name2("admin ", "x"), "names no role");
        refused(name2("tag:", "x"), "tag:KEY=VALUE");
        refused(name2("tag:team", "x"), "tag:KEY=VALUE");
        refused(name2("tag:=a", "x"), "tag:KEY=VALUE");
        refused(name2("tag:team=", "x"), "tag:KEY=VALUE");
        /* A tenant NAME has no ':' (it could pose as uid:N or tag:K=V),
         * no space or '/', and is not empty. */
        refused(name2("tenant:", "x"), "tenant:NAME");
        refused(name2("tenant:uid:0", "x"), "tenant:NAME");
        refused(name2("tenant:tag:team=a", "x"), "tenant:NAME");
        refused(name2("tenant:a b", "x"), "tenant:NAME");
        refused(name2("tenant:-a", "x"), "tenant:NAME");
        /* Two O attributes, each its own RDN. */
        X509_NAME *n = name2("tag:team=a", "x");
        add(n, "O", MBSTRING_UTF8, "admin", -1, 0);
        refused(n, "more than one O");
        n = name2("admin", "x");
        add(n, "CN", MBSTRING_UTF8, "y", -1, 0);
        refused(n, "more than one CN");
        /* O=tag:team=a+O=admin: one multi-valued RDN. */
        n = X509_NAME_new();
        add(n, "O", MBSTRING_UTF8, "tag:team=a", -1, 0);
        add(n, "CN", MBSTRING_UTF8, "x", -1, -1);  /* joins the O's RDN */
        refused(n, "multi-valued RDN");
        /* An embedded NUL: "admin\0..." must not read as admin. */
        n = X509_NAME_new();
        add(n, "O", V_ASN1_UTF8STRING, "admin\0tag:a=b", 13, 0);
        add(n, "CN", MBSTRING_UTF8, "x", -1, 0);
        refused(n, "NUL");
        n = X509_NAME_new();
        add(n, "O", MBSTRING_UTF8, "admin", -1, 0);
        add(n, "CN", V_ASN1_UTF8STRING, "x\nremote: forged", -1, 0);
        refused(n, "control character");
        /* A BMPString O (UTF-16) is not compared as text at all. */
        n = X509_NAME_new();
        add(n, "O", V_ASN1_BMPSTRING, "\0a\0d\0m\0i\0n", 10, 0);
        add(n, "CN", MBSTRING_UTF8, "x", -1, 0);
        refused(n, "UTF8String or PrintableString");
        n = X509_NAME_new();
        add(n, "O", V_ASN1_UTF8STRING, "\xc3\x28", 2, 0);
        add(n, "CN", MBSTRING_UTF8, "x", -1, 0);
        refused(n, "UTF-8");
        char long_cn[80];
        memset(long_cn, 'a', sizeof(long_cn) - 1);
        long_cn[sizeof(long_cn) - 1] = 0;
        /* Past RFC 5280's bound (OpenSSL's own add refuses it; a
         * certificate can still carry it). */
        n = X509_NAME_new();
        add(n, "O", MBSTRING_UTF8, "admin", -1, 0);
        add(n, "CN", V_ASN1_UTF8STRING, long_cn, -1, 0);
        refused(n, "longer than 64");
        n = X509_NAME_new();
        refused(n, "empty subject");
}

static void test_der_input(void **state) {
        X509_NAME *n = name2("admin", "alice");
        unsigned char *der = NULL;
        int len = i2d_X509_NAME(n, &der);
        assert_true(len > 0);
        remote_identity *id = NULL;
        const char *reason = NULL;
        assert_int_equal(remote_identity_from_der(der, (size_t) len, &id, &reason), 0);
        assert_int_equal(id->role, REMOTE_ROLE_ADMIN);
        remote_identity_free(id);
        id = NULL;
        assert_int_equal(remote_identity_from_der(der, (size_t) len - 1, &id, &reason), -EINVAL);
        assert_null(id);
        OPENSSL_free(der);
        X509_NAME_free(n);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_admin_and_tag_roles),
                cmocka_unit_test(test_spoofed_subjects_are_refused),
                cmocka_unit_test(test_der_input),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
