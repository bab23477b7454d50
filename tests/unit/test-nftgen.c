/* Unit tests for policy/nftgen.c: the per-session nftables objects. Every
 * test runs in a private network namespace it creates (unshare of the test
 * thread, undone in teardown) with the host table installed; the objects
 * are checked with the `nft` binary and the verdicts with real TCP connects
 * and UDP round trips from a "sandbox" namespace through its veth to the
 * host namespace itself (the gateway services) or through it to a
 * "listener" namespace. Nothing leaves this machine. Needs root. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>
#include "libcore/net.h"
#include "libcore/util.h"
#include "policy/nftgen.h"

#define SLOT 3
#define IF "sbx3"

/* kids[0]: the sandbox, kids[1]: the listener namespace, kids[2]: a UDP
 * echo in the host namespace (the DNS filter's stand-in). */
#define N_KIDS 3
static int orig_netns = -1;
static pid_t kids[N_KIDS] = { -1, -1, -1 };
static int to_kid[N_KIDS] = { -1, -1, -1 }, from_kid[N_KIDS] = { -1, -1, -1 };
static int host_fds[4] = { -1, -1, -1, -1 }; /* TCP listeners in the host namespace */

static core_net_pool test_pool(void) {
        core_net_pool p = { .prefix = 16 };
        inet_pton(AF_INET, "10.201.0.0", &p.base);
        return p;
}

static int setup(void **state) {
        core_net_pool p = test_pool();
        orig_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (orig_netns < 0 || unshare(CLONE_NEWNET) < 0)
                return -1;
        pol_nft_host_reset();
        pol_nft_host_extend();
        return core_net_host_setup(&p, NULL) < 0 ? -1 : 0;
}

/* Kills the helper children and returns to the original namespace; the
 * private ones, with their table and links, go away with their last
 * reference. */
static int teardown(void **state) {
        for (size_t i = 0; i < ELEMENTSOF(host_fds); i++) {
                if (host_fds[i] >= 0)
                        close(host_fds[i]);
                host_fds[i] = -1;
        }
        for (int i = 0; i < N_KIDS; i++) {
                if (kids[i] > 0) {
                        kill(kids[i], SIGKILL);
                        waitpid(kids[i], NULL, 0);
                }
                if (to_kid[i] >= 0)
                        close(to_kid[i]);
                if (from_kid[i] >= 0)
                        close(from_kid[i]);
                kids[i] = to_kid[i] = from_kid[i] = -1;
        }
        (void) core_veth_delete(SLOT, NULL);
        (void) core_net_host_teardown(NULL);
        int r = setns(orig_netns, CLONE_NEWNET);
        close(orig_netns);
        orig_netns = -1;
        return r;
}

static pol_policy *policy(const char *json) {
        cJSON *j = cJSON_Parse(json);
        pol_policy *p = NULL;
        sb_error *err = NULL;
        assert_non_null(j);
        if (pol_policy_parse(j, &p, &err) < 0)
                fail_msg("policy: %s", err->message);
        cJSON_Delete(j);
        return p;
}

/* The host side of the session's veth: where its DNS filter answers. */
static struct in_addr gateway(void) {
        core_net_pool p = test_pool();
        return core_net_host_addr(&p, SLOT);
}

static void apply(const char *json) {
        pol_policy *p = policy(json);
        sb_error *err = NULL;
        if (pol_nft_session_apply(IF, p, gateway(), &err) < 0)
                fail_msg("apply: %s", err->message);
        pol_policy_free(p);
}

static char *run(const char *cmd) {
        FILE *f = popen(cmd, "re");
        assert_non_null(f);
        size_t cap = 1 << 17, len = 0, n;
        char *buf = calloc(1, cap);
        assert_non_null(buf);
        while ((n = fread(buf + len, 1, cap - 1 - len, f)) > 0)
                len += n;
        pclose(f);
        return buf;
}

static int count(const char *hay, const char *needle) {
        int n = 0;
        for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

/* The elements line of one set, as nft prints it. */
static char *raw_set(const char *set) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "nft list set inet sandboxd %s 2>&1 | tr -s ' \\t\\n' ' '", set);
        return run(cmd);
}

/* A key nft prints as a big-endian integer (decimal) into len bytes. */
static void key_from_decimal(const char *d, size_t n_digits, uint8_t *key, size_t len) {
        memset(key, 0, len);
        for (size_t i = 0; i < n_digits; i++) {
                unsigned carry = (unsigned) (d[i] - '0');
                for (size_t b = len; b-- > 0;) {
                        carry += key[b] * 10u;
                        key[b] = (uint8_t) carry;
                        carry >>= 8;
                }
        }
}

/* One range of a keyed set as nft prints an address interval: "a.b.c.d"
 * alone, a CIDR, or "lo-hi". */
static void range_out(FILE *f, const uint8_t *lo, const uint8_t *hi, size_t alen) {
        char a[INET6_ADDRSTRLEN], b[INET6_ADDRSTRLEN];
        unsigned __int128 l = 0, h = 0;
        for (size_t i = 0; i < alen; i++)
                l = l << 8 | lo[i], h = h << 8 | hi[i];
        unsigned __int128 span = h - l;
        int bits = 0;
        while (bits < (int) (8 * alen) && ((span >> bits) & 1))
                bits++;
        bool prefix = (bits == (int) (8 * alen) || (span >> bits) == 0) && (l & span) == 0;
        inet_ntop(alen == 4 ? AF_INET : AF_INET6, lo, a, sizeof(a));
        inet_ntop(alen == 4 ? AF_INET : AF_INET6, hi, b, sizeof(b));
        if (span == 0)
                fprintf(f, "%s", a);
        else if (prefix)
                fprintf(f, "%s/%d", a, (int) (8 * alen) - bits);
        else
                fprintf(f, "%s-%s", a, b);
}

/* The ranges of interface `ifname` in keyed set `set` (allow4, deny4_b,
 * ...), as nft prints an address interval set: "elements = { 10.0.0.0/8,
 * 1.2.3.0-1.2.4.255 }" ("elements = { }" for none). nft prints a keyed
 * set's keys as big-endian integers: the name's IFNAMSIZ bytes, then the
 * address. */
static char *if_elements(const char *set, const char *ifname) {
        char cmd[128], *out, *buf = NULL;
        size_t size = 0, alen = strchr(set, '6') ? 16 : 4, klen = IFNAMSIZ + alen;
        uint8_t want[IFNAMSIZ] = {};
        bool first = true;
        memcpy(want, ifname, strlen(ifname));
        snprintf(cmd, sizeof(cmd), "nft list set inet sandboxd %s 2>&1", set);
        out = run(cmd);
        FILE *f = open_memstream(&buf, &size);
        assert_non_null(f);
        fputs("elements = { ", f);
        const char *p = strstr(out, "elements = {");
        for (p = p ? p + 12 : ""; *p && *p != '}';) {
                size_t n = strspn(p, "0123456789");
                if (!n) {
                        p++;
                        continue;
                }
                uint8_t lo[48], hi[48];
                key_from_decimal(p, n, lo, klen);
                memcpy(hi, lo, klen);
                p += n;
                if (*p == '-') {
                        n = strspn(++p, "0123456789");
                        key_from_decimal(p, n, hi, klen);
                        p += n;
                }
                if (memcmp(lo, want, IFNAMSIZ) != 0)
                        continue;
                fputs(first ? "" : ", ", f);
                first = false;
                range_out(f, lo + IFNAMSIZ, hi + IFNAMSIZ, alen);
        }
        fputs(first ? "}" : " }", f);
        fclose(f);
        free(out);
        return buf;
}

/* if_elements() of the test's session. */
static char *set_elements(const char *set) {
        return if_elements(set, IF);
}

/* How many ranges of interface `ifname` the keyed sets of both slots hold. */
static int keyed_ranges(const char *ifname) {
        static const char *const sets[] = { "allow4", "deny4", "opened4", "allow6", "deny6", "opened6" };
        int n = 0;
        for (size_t i = 0; i < 2 * ELEMENTSOF(sets); i++) {
                char name[32];
                snprintf(name, sizeof(name), "%s%s", sets[i / 2], i % 2 ? "_b" : "");
                char *e = if_elements(name, ifname);
                n += strcmp(e, "elements = { }") != 0 ? 1 + count(e, ", ") : 0;
                free(e);
        }
        return n;
}

static void test_apply_replace_and_remove_leave_exactly_the_expected_objects(void **state) {
        sb_error *err = NULL;
        apply("{\"allow\":[\"example.com\"],\"subnets\":{\"allow\":[\"203.0.113.0/24\"],\"deny\":[\"8.8.8.0/24\"]}}");
        char *out = run("nft list table inet sandboxd");
        /* No chain or set of the session's own: elements of the shared
         * ones, made with the host table. */
        assert_int_equal(count(out, "s_sbx3"), 0);
        assert_int_equal(count(out, "i_sbx3"), 0);
        assert_int_equal(count(out, "r_sbx3"), 0);
        char *e = set_elements("allow4");
        assert_string_equal(e, "elements = { 203.0.113.0/24 }");
        free(e);
        e = set_elements("deny4");
        assert_string_equal(e, "elements = { 8.8.8.0/24 }");
        free(e);
        e = set_elements("opened4"); /* a forbidden range subnets.allow names */
        assert_string_equal(e, "elements = { 203.0.113.0/24 }");
        free(e);
        e = set_elements("allow4_b"); /* slot b: nothing yet */
        assert_string_equal(e, "elements = { }");
        free(e);
        assert_int_equal(count(out, "\"sbx3\" : goto custom"), 1);
        assert_int_equal(count(out, "\"sbx3\" : goto reply"), 1);
        /* The gateway services: the DNS filter and the proxy at the
         * gateway, nothing else of the host. */
        assert_int_equal(count(out, "\"sbx3\" : jump gateway"), 1);
        if (count(out, "set gw4 {\n\t\ttype ifname . ipv4_addr . inet_proto . inet_service\n\t\telements = { "
                       "\"sbx3\" . 10.201.0.6 . tcp . 53,\n\t\t\t     \"sbx3\" . 10.201.0.6 . udp . 53,\n"
                       "\t\t\t     \"sbx3\" . 10.201.0.6 . tcp . 3128 }") != 1)
                fail_msg("gw4 not as expected:\n%s", out);
        if (count(out, "chain gateway {\n\t\tiifname . ip daddr . meta l4proto . th dport @gw4 accept\n"
                       "\t\tiifname . ip6 daddr . meta l4proto . th dport @gw6 accept\n\t\tgoto deny\n\t}") != 1)
                fail_msg("gateway chain not as expected:\n%s", out);
        /* HTTP and HTTPS of the session go to the egress proxy on its own
         * gateway: one element in the host's `proxied` set. */
        if (count(out, "set proxied {\n\t\ttype ifname\n\t\telements = { \"sbx3\" }") != 1)
                fail_msg("proxied set not as expected:\n%s", out);
        /* The generation: an element of the shared `gens` set and
         * `genmark` map (a change moves the elements alone); slot a in use
         * (no slot_b element). */
        const char *g = strstr(out, "elements = { \"sbx3\" . 0x");
        unsigned mark = 0;
        assert_non_null(g);
        assert_int_equal(sscanf(g, "elements = { \"sbx3\" . 0x%x }", &mark), 1);
        assert_true(mark != 0);
        char *gm = NULL;
        assert_true(asprintf(&gm, "elements = { \"sbx3\" : 0x%08x }", mark) > 0);
        if (count(out, gm) != 1)
                fail_msg("genmark not as expected:\n%s", out);
        free(gm);
        assert_int_equal(count(out, "set slot_b {\n\t\ttype ifname\n\t}"), 1);
        /* The shared chains: the generation check first, then what a custom
         * policy never forwards, then the decision table; every accept
         * marks the flow with the generation. The reply chain the same on
         * the remote end (source), its denials dropped. Per direction, a
         * chain per slot: the slot is decided once per packet (`iifname
         * @slot_b goto`), each slot's chain looks up its own keyed sets and
         * marks from its own genmark map. */
#define STEPS(ifk, dir, sfx, deny, mk)                                                                             \
        "\t\t" ifk " . ip " dir " @deny4" sfx " " deny "\n"                                                      \
        "\t\tip " dir " @forbid4 " ifk " . ip " dir " != @opened4" sfx " " deny "\n"                               \
        "\t\t" ifk " . ip6 " dir " @deny6" sfx " " deny "\n"                                                     \
        "\t\tip6 " dir " @forbid6 " ifk " . ip6 " dir " != @opened6" sfx " " deny "\n"                             \
        PORTS(deny) "\t\t" ifk " . ip " dir " @allow4" sfx " ct mark set " mk " accept\n"                          \
        "\t\t" ifk " . ip6 " dir " @allow6" sfx " ct mark set " mk " accept\n"
        const char *rules =
                "chain custom {\n\t\tiifname . ct mark @gens accept\n\t\tct status dnat goto deny\n"
                "\t\ttcp dport 80 goto deny\n\t\ttcp dport 443 goto deny\n\t\tiifname @slot_b goto custom_b\n"
#define PORTS(deny) "\t\ttcp dport 53 " deny "\n\t\tudp dport 53 " deny "\n\t\ttcp dport 853 " deny "\n\t\tudp dport 853 " deny "\n"
                STEPS("iifname", "daddr", "", "goto deny", "iifname map @genmark")
                "\t\tudp dport 443 goto deny\n"
                "\t\tiifname . ip daddr @pins4 ct mark set iifname map @genmark accept\n"
                "\t\tiifname . ip6 daddr @pins6 ct mark set iifname map @genmark accept\n\t\tgoto deny\n\t}\n\n"
                "\tchain custom_b {\n"
                STEPS("iifname", "daddr", "_b", "goto deny", "iifname map @genmark_b")
                "\t\tudp dport 443 goto deny\n"
                "\t\tiifname . ip daddr @pins4 ct mark set iifname map @genmark_b accept\n"
                "\t\tiifname . ip6 daddr @pins6 ct mark set iifname map @genmark_b accept\n\t\tgoto deny\n\t}";
#undef PORTS
#define PORTS(deny) "\t\ttcp sport 53 " deny "\n\t\tudp sport 53 " deny "\n\t\ttcp sport 853 " deny "\n\t\tudp sport 853 " deny "\n"
        const char *reply =
                "chain reply {\n\t\toifname . ct mark @gens accept\n\t\tct state related drop\n\t\tct status dnat drop\n"
                "\t\ttcp sport 80 drop\n\t\ttcp sport 443 drop\n\t\toifname @slot_b goto reply_b\n"
                STEPS("oifname", "saddr", "", "drop", "oifname map @genmark")
                "\t\tudp sport 443 drop\n"
                "\t\toifname . ip saddr @pins4 ct mark set oifname map @genmark accept\n"
                "\t\toifname . ip6 saddr @pins6 ct mark set oifname map @genmark accept\n\t\tdrop\n\t}\n\n"
                "\tchain reply_b {\n"
                STEPS("oifname", "saddr", "_b", "drop", "oifname map @genmark_b")
                "\t\tudp sport 443 drop\n"
                "\t\toifname . ip saddr @pins4 ct mark set oifname map @genmark_b accept\n"
                "\t\toifname . ip6 saddr @pins6 ct mark set oifname map @genmark_b accept\n\t\tdrop\n\t}";
#undef PORTS
#undef STEPS
        if (count(out, rules) != 1)
                fail_msg("custom chain not as expected:\n%s", strstr(out, "chain custom {") ?: out);
        if (count(out, reply) != 1)
                fail_msg("reply chain not as expected:\n%s", strstr(out, "chain reply {") ?: out);
        char g_mark_text[48];
        snprintf(g_mark_text, sizeof(g_mark_text), "\"sbx3\" . 0x%08x", mark);
        char *chains = strdup(strstr(out, "chain custom {"));
        free(out);

        /* Replace: the new policy's ranges in the other slot (put in by a
         * batch before the one that moves the session's slot_b element,
         * rule 9), the session moved there and to a new generation; the
         * chains untouched. */
        apply("{\"allow\":[\"example.com\"],\"subnets\":{\"allow\":[\"1.1.1.0/24\"]}}");
        out = run("nft list table inet sandboxd");
        assert_int_equal(count(out, chains), 1); /* the same chains, rules and all, to the end of the listing */
        assert_int_equal(count(out, "set slot_b {\n\t\ttype ifname\n\t\telements = { \"sbx3\" }"), 1);
        /* The slot left behind emptied: nothing of the replaced policy
         * stays loaded (203.0.113.0/24 is forbidden again: forbid4_b). */
        e = set_elements("allow4");
        assert_string_equal(e, "elements = { }");
        free(e);
        e = set_elements("deny4");
        assert_string_equal(e, "elements = { }");
        free(e);
        e = set_elements("opened4");
        assert_string_equal(e, "elements = { }");
        free(e);
        e = set_elements("allow4_b");
        assert_string_equal(e, "elements = { 1.1.1.0/24 }");
        free(e);
        e = set_elements("opened4_b");
        assert_string_equal(e, "elements = { }");
        free(e);
        /* Flows the chains of slot b admit get the new generation. */
        const char *g2 = strstr(out, "elements = { \"sbx3\" . 0x");
        unsigned mark2 = 0;
        assert_non_null(g2);
        assert_int_equal(sscanf(g2, "elements = { \"sbx3\" . 0x%x }", &mark2), 1);
        char *gm2 = NULL;
        assert_true(asprintf(&gm2, "map genmark_b {\n\t\ttype ifname : mark\n\t\telements = { \"sbx3\" : 0x%08x }", mark2) > 0);
        if (count(out, gm2) != 1)
                fail_msg("genmark_b not as expected:\n%s", out);
        free(gm2);
        assert_int_equal(count(out, "\"sbx3\" . 0x"), 1);
        assert_int_equal(count(out, g_mark_text), 0); /* the old generation is gone */
        assert_int_equal(count(out, "\"sbx3\" : goto custom"), 1);
        free(out);

        /* And back: slot a again, its old ranges replaced. */
        apply("{\"allow\":[\"example.com\"],\"subnets\":{\"deny\":[\"9.9.9.0/24\"]}}");
        out = run("nft list table inet sandboxd");
        assert_int_equal(count(out, "set slot_b {\n\t\ttype ifname\n\t}"), 1);
        e = set_elements("deny4");
        assert_string_equal(e, "elements = { 9.9.9.0/24 }");
        free(e);
        e = set_elements("allow4");
        assert_string_equal(e, "elements = { }");
        free(e);
        e = set_elements("allow4_b");
        assert_string_equal(e, "elements = { }");
        free(e);
        free(out);

        apply("\"deny-all\"");
        out = run("nft list table inet sandboxd");
        assert_int_equal(keyed_ranges(IF), 0);
        assert_int_equal(count(out, "sbx3\""), 1);
        assert_int_equal(count(out, "\"sbx3\" : goto deny"), 1);
        free(out);

        apply("\"allow-all\"");
        out = run("nft list table inet sandboxd");
        /* Accepted both ways, whatever a flow's generation. */
        assert_int_equal(count(out, "sbx3\""), 2);
        assert_int_equal(count(out, "\"sbx3\" : accept"), 2);
        assert_int_equal(keyed_ranges(IF), 0);
        free(out);

        apply("{\"allow\":[\"example.com\"],\"subnets\":{\"allow\":[\"192.0.2.0/24\"],\"deny\":[\"8.8.8.0/24\"]}}");
        /* allow4, deny4, opened4 (192.0.2.0/24 is forbidden) and opened6 (its
         * four IPv6 forms) */
        assert_int_equal(keyed_ranges(IF), 7);
        assert_int_equal(pol_nft_session_remove(IF, &err), 0);
        assert_int_equal(pol_nft_session_remove(IF, &err), 0); /* nothing there: success */
        assert_null(err);
        out = run("nft list table inet sandboxd");
        assert_int_equal(count(out, "sbx3"), 0);
        assert_int_equal(keyed_ranges(IF), 0);
        free(out);
        /* The shared chains stay, the same. */
        out = run("nft list table inet sandboxd");
        assert_int_equal(count(out, chains), 1);
        free(out);
        free(chains);
}

/* forbid6 holds the IPv6 rows of the forbidden table and every IPv6 form
 * (IPv4-mapped, NAT64, IPv4-compatible, 6to4) of its IPv4 rows, minus what
 * subnets.allow names; allow6 and deny6 hold the IPv6 CIDRs. */
static void test_ipv6_sets_hold_the_forbidden_forms_and_the_policys_cidrs(void **state) {
        apply("{\"allow\":[\"example.com\"],\"subnets\":{\"allow\":[\"2a05:5::/64\",\"fd00::/8\"],"
              "\"deny\":[\"2a05:5::13/128\"]}}");
        char *f = raw_set("forbid6"), *o = set_elements("opened6"), *a = set_elements("allow6"),
             *d = set_elements("deny6");
        static const char *const in_forbid[] = {
                "::/104",                                           /* ::, ::1, compatible 0/8 */
                "fe80::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",   /* link-local, site-local, multicast */
                "2001:db8::/32", "fc00::/7",                        /* fd00::/8 is opened */
                "::ffff:169.254.0.0/112", "::ffff:10.0.0.0/104", "::169.254.0.0/112",
                "64:ff9b::a9fe:0/112", "64:ff9b::7f00:0/104", "64:ff9b:1::/48",
                "2002:a9fe::/32", "2002:7f00::/24", "2002:a00::/24",
        };
        for (size_t i = 0; i < ELEMENTSOF(in_forbid); i++)
                if (!strstr(f, in_forbid[i]))
                {
                        fprintf(stderr, "forbid6: %s\n", f);
                        fail_msg("forbid6 lacks %s", in_forbid[i]);
                }
        /* Named by subnets.allow: opened for the session; public space is
         * not forbidden. */
        assert_string_equal(o, "elements = { fd00::/8 }");
        if (strstr(f, "2a05:"))
                fail_msg("forbid6 holds a public range: %s", f);
        if (!strstr(a, "2a05:5::/64") || !strstr(a, "fd00::/8"))
                fail_msg("allow6: %s", a);
        if (!strstr(d, "2a05:5::13"))
                fail_msg("deny6: %s", d);
        free(f);
        free(o);
        free(a);
        free(d);
}

static void test_custom_policy_refuses_a_gateway_that_is_not_unicast(void **state) {
        pol_policy *p = policy("{\"allow\":[\"example.com\"]}");
        static const char *const bad[] = { "0.0.0.0", "255.255.255.255", "127.0.0.1", "224.0.0.1" };
        sb_error *err = NULL;
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct in_addr gw;
                char want[96];
                inet_pton(AF_INET, bad[i], &gw);
                assert_int_equal(pol_nft_session_apply(IF, p, gw, &err), -EINVAL);
                snprintf(want, sizeof(want), "nftables: invalid gateway address %s for sbx3", bad[i]);
                assert_string_equal(err->message, want);
                sb_error_free(err);
                err = NULL;
        }
        pol_policy_free(p);
        char *out = run("nft list table inet sandboxd");
        assert_int_equal(count(out, "sbx3"), 0);
        free(out);
}

static void test_overlapping_and_adjacent_prefixes_become_disjoint_ranges(void **state) {
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"10.0.0.0/25\",\"10.0.0.128/25\",\"192.0.2.0/24\"],"
              "\"deny\":[\"10.0.0.0/8\",\"10.0.0.0/16\",\"10.1.2.3/32\",\"1.2.3.0/24\",\"1.2.4.0/24\"]}}");
        char *deny = set_elements("deny4"), *allow = set_elements("allow4");
        char *forbid = raw_set("forbid4"), *opened = set_elements("opened4");
        if (!strstr(deny, "elements = { 1.2.3.0-1.2.4.255, 10.0.0.0/8 }"))
                fail_msg("deny4: %s", deny);
        if (!strstr(allow, "elements = { 10.0.0.0/24, 192.0.2.0/24 }"))
                fail_msg("allow4: %s", allow);
        /* The private and documentation ranges that subnets.allow names are
         * opened (cut out of the shared forbidden ranges for the session
         * alone); the rest of 10/8 stays forbidden. */
        if (!strstr(forbid, " 10.0.0.0/8,") || !strstr(forbid, "192.0.2.0/24") ||
            !strstr(forbid, "169.254.0.0/16") || !strstr(forbid, "192.168.0.0/16"))
                fail_msg("forbid4: %s", forbid);
        assert_string_equal(opened, "elements = { 10.0.0.0/24, 192.0.2.0/24 }");
        free(opened);
        free(deny);
        free(allow);
        free(forbid);
}

/* The keyed sets alternate between two slots, each filled before the
 * batch that moves the session to it (rule 9): a third change is back in
 * the first slot, and what the slots held before (the policy before last)
 * is gone, never merged. */
static void test_interval_sets_alternate_slots_and_replace_what_a_failed_change_left(void **state) {
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"192.0.2.0/24\"]}}");
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"198.51.100.0/24\"]}}");
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"203.0.113.0/24\"]}}");
        char *out = run("nft list table inet sandboxd");
        assert_int_equal(count(out, "set slot_b {\n\t\ttype ifname\n\t}"), 1); /* slot a */
        free(out);
        char *allow = set_elements("allow4");
        assert_string_equal(allow, "elements = { 203.0.113.0/24 }");
        free(allow);
        allow = set_elements("allow4_b");
        assert_string_equal(allow, "elements = { }");
        free(allow);
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"192.0.2.0/24\"]}}");
        out = run("nft list table inet sandboxd");
        assert_int_equal(count(out, "set slot_b {\n\t\ttype ifname\n\t\telements = { \"sbx3\" }"), 1);
        allow = set_elements("allow4_b");
        assert_string_equal(allow, "elements = { 192.0.2.0/24 }");
        free(allow);
        allow = set_elements("allow4");
        assert_string_equal(allow, "elements = { }");
        free(allow);
        free(out);
}

static void test_allow_all_subnet_never_opens_loopback_or_metadata(void **state) {
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"0.0.0.0/0\"]}}");
        char *forbid = raw_set("forbid4"), *opened = set_elements("opened4");
        if (!strstr(forbid, "127.0.0.0/8") || !strstr(forbid, "169.254.0.0/16") || !strstr(forbid, "10.0.0.0/8"))
                fail_msg("forbid4: %s", forbid);
        assert_string_equal(opened, "elements = { }"); /* 0.0.0.0/0 names no forbidden range */
        free(forbid);
        free(opened);
        /* The host itself stays forbidden even where subnets.allow names
         * it exactly (the proxy's and the kernel's verdicts agree). */
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"0.0.0.0/32\",\"127.0.0.0/8\",\"0.1.0.0/16\"]}}");
        opened = set_elements("opened4_b"); /* the second slot: see above */
        assert_string_equal(opened, "elements = { }");
        free(opened);
}

static void test_pin_adds_address_with_floored_timeout_and_errors_name_the_set(void **state) {
        struct in_addr a;
        sb_error *err = NULL;
        inet_pton(AF_INET, "93.184.216.34", &a);
        assert_int_equal(pol_nft_pin(IF, a, 5, &err), -ENOENT); /* no custom policy yet */
        assert_non_null(err);
        assert_string_equal(err->message, "nftables: sbx3 has no custom policy: no DNS pin for 93.184.216.34");
        sb_error_free(err);
        err = NULL;

        apply("{\"allow\":[\"example.com\"]}");
        assert_int_equal(pol_nft_pin(IF, a, 5, &err), 0);
        assert_null(err);
        char *dns = raw_set("pins4");
        if (!strstr(dns, "\"sbx3\" . 93.184.216.34 timeout 30s expires"))
                fail_msg("pins4: %s", dns);
        free(dns);
        inet_pton(AF_INET, "93.184.216.35", &a);
        assert_int_equal(pol_nft_pin(IF, a, 3600, &err), 0);
        dns = raw_set("pins4");
        if (!strstr(dns, "\"sbx3\" . 93.184.216.35 timeout 1h expires"))
                fail_msg("pins4: %s", dns);
        free(dns);
        struct in6_addr a6;
        inet_pton(AF_INET6, "2001:db8::35", &a6);
        assert_int_equal(pol_nft_pin6(IF, &a6, 60, &err), 0);
        dns = raw_set("pins6");
        if (!strstr(dns, "\"sbx3\" . 2001:db8::35 timeout 1m expires"))
                fail_msg("pins6: %s", dns);
        free(dns);

        /* A change of policy drops the session's pins (judged under the
         * old one) but those carried over, in the one batch. */
        pol_policy *p = policy("{\"allow\":[\"example.com\"]}");
        pol_nft_carried_pin keep = { .addr = { .family = AF_INET }, .ttl_s = 40 };
        memcpy(keep.addr.bytes, &a, 4);
        assert_int_equal(pol_nft_session_apply_pins(IF, p, gateway(), &keep, 1, &err), 0);
        dns = raw_set("pins4");
        if (!strstr(dns, "\"sbx3\" . 93.184.216.35") || strstr(dns, "93.184.216.34"))
                fail_msg("pins4 after a change: %s", dns);
        free(dns);
        dns = raw_set("pins6");
        if (strstr(dns, "2001:db8::35"))
                fail_msg("pins6 after a change: %s", dns);
        free(dns);
        /* And to another mode: none left, and no pin taken. */
        apply("\"allow-all\"");
        dns = raw_set("pins4");
        if (strstr(dns, "sbx3"))
                fail_msg("pins4 under allow-all: %s", dns);
        free(dns);
        assert_int_equal(pol_nft_pin(IF, a, 60, &err), -ENOENT);
        sb_error_free(err);
        err = NULL;
        assert_int_equal(pol_nft_session_apply(IF, p, gateway(), &err), 0);
        pol_policy_free(p);

        assert_int_equal(pol_nft_pin("eth0", a, 60, &err), -EINVAL);
        sb_error_free(err);
}

static void test_own_changes_do_not_alarm_the_monitor(void **state) {
        sb_error *err = NULL;
        int fd = core_net_monitor_open(&err);
        assert_true(fd >= 0);
        apply("{\"allow\":[\"example.com\"]}");
        apply("{\"allow\":[\"example.org\"]}");
        assert_int_equal(pol_nft_session_remove(IF, &err), 0);
        assert_int_equal(core_net_monitor_read(fd), 0);
        close(fd);
}

/* allow-all: the gateway's port 53 is translated to the upstream, in chain
 * n_<if> through `sessions_nat`; every other mode has neither, and going
 * back and forth is the daemon's own change (no re-install alarm). */
static void test_allow_all_forwards_gateway_dns_to_the_upstream_and_other_modes_do_not(void **state) {
        sb_error *err = NULL;
        struct in_addr up;
        inet_pton(AF_INET, "203.0.113.53", &up);
        pol_nft_set_dns_upstream(up);
        int fd = core_net_monitor_open(&err);
        assert_true(fd >= 0);
        apply("\"allow-all\"");
        char *out = run("nft list table inet sandboxd");
        assert_non_null(strstr(out, "\"" IF "\" . 10.201.0.6 . udp . 53 : 203.0.113.53"));
        assert_non_null(strstr(out, "\"" IF "\" . 10.201.0.6 . tcp . 53 : 203.0.113.53"));
        assert_non_null(strstr(out, "\"" IF "\" : jump dns_forward"));
        free(out);
        static const char *const others[] = { "\"deny-all\"", "{\"allow\":[\"example.com\"]}" };
        for (size_t i = 0; i < 2; i++) {
                apply(others[i]);
                out = run("nft list table inet sandboxd");
                assert_null(strstr(out, "jump dns_forward"));
                assert_null(strstr(out, ": 203.0.113.53"));
                free(out);
                apply("\"allow-all\"");
        }
        assert_int_equal(pol_nft_session_remove(IF, &err), 0);
        out = run("nft list table inet sandboxd");
        assert_null(strstr(out, IF "\""));
        free(out);
        assert_int_equal(core_net_monitor_read(fd), 0);
        close(fd);
        pol_nft_set_dns_upstream((struct in_addr) { 0 });
}

/* ---- real connects: sandbox netns -> sbx3 -> host netns (-> lst0 -> listener netns) ---- */

typedef struct cmd {
        char op;
        struct in_addr dst;
        uint16_t port;
} cmd;

typedef struct reply {
        int r, ms;
} reply;

static const char *const listen_on[] = { "10.1.1.1:8080", "192.168.77.1:8080", "192.168.77.1:53", "5.5.5.1:8080" };

static int connect_timed(struct in_addr dst, uint16_t port, int *ret_ms) {
        uint64_t t0 = core_monotonic_ms();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), r = 0, e = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = dst };
        socklen_t l = sizeof(e);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
                r = -errno;
        /* Bounded, so a silently dropped SYN fails the test instead of
         * hanging it. */
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        if (r == 0 && poll(&p, 1, 3000) == 0)
                r = -ETIMEDOUT;
        else if (r == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 && e)
                r = -e;
        *ret_ms = (int) (core_monotonic_ms() - t0);
        close(fd);
        return r;
}

/* Sends one datagram and waits for the echo: 0 for a round trip, else the
 * error the ICMP answer left on the socket (or -ETIMEDOUT). */
static int udp_round_trip(struct in_addr dst, uint16_t port, int *ret_ms) {
        uint64_t t0 = core_monotonic_ms();
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = 0;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = dst };
        char c;
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || send(fd, "q", 1, 0) < 0)
                r = -errno;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (r == 0 && poll(&p, 1, 3000) == 0)
                r = -ETIMEDOUT;
        else if (r == 0 && recv(fd, &c, 1, MSG_DONTWAIT) < 0)
                r = -errno;
        *ret_ms = (int) (core_monotonic_ms() - t0);
        close(fd);
        return r;
}

static int listen_all(void) {
        for (size_t i = 0; i < ELEMENTSOF(listen_on); i++) {
                char host[32];
                unsigned port;
                struct sockaddr_in sa = { .sin_family = AF_INET };
                sscanf(listen_on[i], "%31[^:]:%u", host, &port);
                inet_pton(AF_INET, host, &sa.sin_addr);
                sa.sin_port = htons((uint16_t) port);
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(fd, 16) < 0)
                        return -errno; /* fds stay open until the child dies */
        }
        return 0;
}

static _noreturn_ void kid_main(int rd, int wr) {
        core_net_pool p = test_pool();
        reply rep = { .r = unshare(CLONE_NEWNET) < 0 ? -errno : 0 };
        cmd c;
        if (write(wr, &rep, sizeof(rep)) != sizeof(rep))
                _exit(1);
        while (read(rd, &c, sizeof(c)) == sizeof(c)) {
                rep = (reply) {};
                switch (c.op) {
                case 'c': rep.r = core_net_configure_inside(&p, SLOT, true, NULL); break;
                case 'l': rep.r = listen_all(); break;
                case 't': rep.r = connect_timed(c.dst, c.port, &rep.ms); break;
                case 'u': rep.r = udp_round_trip(c.dst, c.port, &rep.ms); break;
                default: _exit(0);
                }
                if (write(wr, &rep, sizeof(rep)) != sizeof(rep))
                        _exit(1);
        }
        _exit(0);
}

static reply ask(int k, char op, const char *dst, uint16_t port) {
        cmd c = { .op = op, .port = port };
        reply rep;
        if (dst)
                inet_pton(AF_INET, dst, &c.dst);
        if (op && write(to_kid[k], &c, sizeof(c)) != sizeof(c))
                fail_msg("child gone");
        if (read(from_kid[k], &rep, sizeof(rep)) != sizeof(rep))
                fail_msg("no reply from child for '%c'", op);
        return rep;
}

static void start_kid(int k) {
        int down[2], up[2];
        assert_int_equal(pipe2(down, O_CLOEXEC), 0);
        assert_int_equal(pipe2(up, O_CLOEXEC), 0);
        kids[k] = fork();
        assert_true(kids[k] >= 0);
        if (kids[k] == 0) {
                close(down[1]);
                close(up[0]);
                kid_main(down[0], up[1]);
        }
        close(down[0]);
        close(up[1]);
        to_kid[k] = down[1];
        from_kid[k] = up[0];
        assert_int_equal(ask(k, 0, NULL, 0).r, 0); /* in its own netns */
}

static void sh(const char *fmt, ...) {
        char buf[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        if (system(buf) != 0)
                fail_msg("failed: %s", buf);
}

/* The listener namespace is the "internet" beyond the host: reached through
 * lst0, which is not a session interface, with the host masquerading. */
static void build_topology(void) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        start_kid(0);
        start_kid(1);
        assert_int_equal(core_veth_create(&p, SLOT, kids[0], &err), 0);
        assert_int_equal(ask(0, 'c', NULL, 0).r, 0);
        sh("ip link add lst0 type veth peer name up0 netns %d", (int) kids[1]);
        sh("ip addr add 10.1.1.254/24 dev lst0 && ip link set lst0 up && ip route add 192.168.77.0/24 dev lst0 && "
           "ip route add 5.5.5.0/24 dev lst0");
        sh("nsenter -t %d -n sh -c 'ip addr add 10.1.1.1/24 dev up0 && ip addr add 192.168.77.1/24 dev up0 && "
           "ip addr add 5.5.5.1/24 dev up0 && "
           "ip link set up0 up && ip link set lo up'", (int) kids[1]);
        assert_int_equal(ask(1, 'l', NULL, 0).r, 0);
}

static void expect_refused(const char *dst, uint16_t port) {
        reply t = ask(0, 't', dst, port);
        if (t.r != -ECONNREFUSED)
                fail_msg("%s:%u: %s, expected refused", dst, port, strerror(-t.r));
        assert_in_range(t.ms, 0, 1000);
}

/* A denied datagram: ICMP admin-prohibited, at once (a closed port would
 * answer port-unreachable, ECONNREFUSED, and the echo would answer). */
static void expect_udp_prohibited(const char *dst, uint16_t port) {
        reply u = ask(0, 'u', dst, port);
        if (u.r != -EHOSTUNREACH)
                fail_msg("udp %s:%u: %s, expected admin-prohibited", dst, port, strerror(-u.r));
        assert_in_range(u.ms, 0, 1000);
}

static void expect_reachable(char op, const char *dst, uint16_t port) {
        reply t = ask(0, op, dst, port);
        if (t.r != 0)
                fail_msg("%s %s:%u: %s, expected reachable", op == 'u' ? "udp" : "tcp", dst, port,
                         strerror(-t.r));
}

static int bound_socket(int type, uint16_t port) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) }; /* every address */
        int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), one = 1;
        assert_true(fd >= 0);
        assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
        assert_int_equal(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        return fd;
}

/* Services on every address of the host namespace, as sandbox-netd and
 * the host's own daemons would be: TCP 53 and 8080 (listening, the kernel
 * completes handshakes) and a UDP echo on 53 and 54 in a child. Bound here,
 * before the fork, so they are up before the first probe. */
static void start_host_services(void) {
        int udp[2] = { bound_socket(SOCK_DGRAM, 53), bound_socket(SOCK_DGRAM, 54) };
        host_fds[0] = bound_socket(SOCK_STREAM, 53);
        host_fds[1] = bound_socket(SOCK_STREAM, 8080);
        assert_int_equal(listen(host_fds[0], 16), 0);
        assert_int_equal(listen(host_fds[1], 16), 0);
        kids[2] = fork();
        assert_true(kids[2] >= 0);
        if (kids[2] == 0) {
                struct pollfd p[2] = { { .fd = udp[0], .events = POLLIN }, { .fd = udp[1], .events = POLLIN } };
                while (poll(p, 2, -1) > 0)
                        for (int i = 0; i < 2; i++) {
                                struct sockaddr_in from;
                                socklen_t l = sizeof(from);
                                char b[512];
                                ssize_t n = recvfrom(udp[i], b, sizeof(b), MSG_DONTWAIT, (struct sockaddr *) &from, &l);
                                if (n > 0)
                                        (void) sendto(udp[i], b, (size_t) n, 0, (struct sockaddr *) &from, l);
                        }
                _exit(0);
        }
        close(udp[0]);
        close(udp[1]);
}

static void test_custom_session_reaches_only_the_dns_filter_on_its_gateway(void **state) {
        sb_error *err = NULL;
        const char *gw = "10.201.0.6";      /* core_net_host_addr(slot 3) */
        const char *other = "10.1.1.254";   /* the host's address on lst0 */
        build_topology();
        start_host_services();

        apply("{\"allow\":[\"example.com\"]}");
        expect_reachable('u', gw, 53);
        expect_reachable('t', gw, 53);
        /* Another port on the gateway, the same port on another address of
         * the host: both shut, at once. */
        expect_refused(gw, 8080);
        expect_udp_prohibited(gw, 54);
        expect_refused(other, 53);
        expect_udp_prohibited(other, 53);

        /* allow-all resolves through the host's resolvers by forwarding: no
         * input element, the gateway stays shut. */
        apply("\"allow-all\"");
        expect_refused(gw, 53);
        expect_udp_prohibited(gw, 53);
        apply("{\"allow\":[\"example.org\"]}");
        expect_reachable('u', gw, 53);

        /* remove takes the input chain and its element with the rest. */
        assert_int_equal(pol_nft_session_remove(IF, &err), 0);
        assert_null(err);
        /* The log meter may keep the interface's rate bucket (libcore/nft.c):
         * state, not a rule. */
        char *out = run("nft list table inet sandboxd | sed '/set lograte {/,/}/d'");
        assert_int_equal(count(out, "sbx3\""), 0);
        assert_int_equal(keyed_ranges(IF), 0);
        free(out);
        expect_refused(gw, 53);
        expect_udp_prohibited(gw, 53);
}

/* A session veth the daemon has no element for (a leftover, or every veth
 * right after the table was re-installed) is denied, never forwarded. */
static void test_veth_without_element_is_denied_until_its_policy_is_applied_again(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        build_topology();
        expect_refused("10.1.1.1", 8080);
        apply("\"allow-all\"");
        expect_reachable('t', "10.1.1.1", 8080);

        /* The table repaired after `nft flush ruleset`: the element is gone
         * with the old table until the session is re-applied. */
        free(run("nft flush ruleset"));
        assert_int_equal(core_net_host_ensure(&p, &err), 1);
        assert_null(err);
        pol_nft_host_reset();
        expect_refused("10.1.1.1", 8080);
        apply("\"allow-all\"");
        expect_reachable('t', "10.1.1.1", 8080);

        /* A leftover veth after its session was removed. */
        assert_int_equal(pol_nft_session_remove(IF, &err), 0);
        expect_refused("10.1.1.1", 8080);
}

static void test_deny_beats_allow_in_real_connects_and_denials_fail_at_once(void **state) {
        build_topology();
        /* allow-all: both listeners reachable through the host. */
        apply("\"allow-all\"");
        assert_int_equal(ask(0, 't', "10.1.1.1", 8080).r, 0);
        assert_int_equal(ask(0, 't', "192.168.77.1", 8080).r, 0);

        /* allow 0.0.0.0/0 + deny 10.0.0.0/8 + allow 10.1.1.1/32: denied. */
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"0.0.0.0/0\",\"10.1.1.1/32\",\"192.168.77.0/24\"],"
              "\"deny\":[\"10.0.0.0/8\"]}}");
        expect_refused("10.1.1.1", 8080);
        assert_int_equal(ask(0, 't', "192.168.77.1", 8080).r, 0);
        /* A resolver other than the DNS filter, even at an allowed address. */
        expect_refused("192.168.77.1", 53);

        /* A private range no CIDR names is forbidden under a custom policy. */
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"0.0.0.0/0\"]}}");
        expect_refused("192.168.77.1", 8080);

        /* Between an allow and a deny CIDR that both name it, deny wins. */
        apply("{\"allow\":[\"example.com\"],\"subnets\":{\"allow\":[\"10.1.1.1/32\"],\"deny\":[\"10.1.1.1/32\"]}}");
        expect_refused("10.1.1.1", 8080);
        apply("\"deny-all\"");
        expect_refused("192.168.77.1", 8080);
        apply("\"allow-all\"");
        assert_int_equal(ask(0, 't', "192.168.77.1", 8080).r, 0);
}

/* Session "sbx2" (no veth needed) gets policy `json`, afresh: its ranges
 * in slot a, the slot the test's own session uses. */
static void apply_other(const char *json) {
        core_net_pool p = test_pool();
        pol_policy *pol = policy(json);
        sb_error *err = NULL;
        if (pol_nft_session_remove("sbx2", &err) < 0 || pol_nft_session_apply("sbx2", pol, core_net_host_addr(&p, 2), &err) < 0)
                fail_msg("apply sbx2: %s", err->message);
        pol_policy_free(pol);
}

/* Each session's ranges are a stretch of the keyed sets' key space of its
 * own: another session's subnets.allow never admits this session's
 * packets, not even one that runs to the top of the address space (whose
 * end element carries into the interface name: without it the range would
 * cover every key after it, the next sessions' included). */
static void test_another_sessions_ranges_never_admit_this_sessions_traffic(void **state) {
        sb_error *err = NULL;
        build_topology();
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"10.1.1.1/32\"]}}");
        apply_other("{\"allow\":[],\"subnets\":{\"allow\":[\"5.5.5.0/24\"]}}");
        expect_reachable('t', "10.1.1.1", 8080);
        expect_refused("5.5.5.1", 8080);
        apply_other("{\"allow\":[],\"subnets\":{\"allow\":[\"0.0.0.0/0\"]}}");
        expect_refused("5.5.5.1", 8080);
        apply_other("{\"allow\":[],\"subnets\":{\"allow\":[\"255.255.255.0/24\"]}}");
        expect_refused("5.5.5.1", 8080);
        /* The same with nothing of the session's own in the set. */
        apply("{\"allow\":[\"example.com\"]}");
        apply_other("{\"allow\":[],\"subnets\":{\"allow\":[\"0.0.0.0/0\"]}}");
        expect_refused("5.5.5.1", 8080);
        /* Its own allowlist admits it. */
        apply("{\"allow\":[],\"subnets\":{\"allow\":[\"5.5.5.0/24\"]}}");
        expect_reachable('t', "5.5.5.1", 8080);
        assert_int_equal(pol_nft_session_remove("sbx2", &err), 0);
        assert_int_equal(keyed_ranges("sbx2"), 0);
        expect_reachable('t', "5.5.5.1", 8080);
}

/* The connection the proxy listener holds next: its original destination
 * (SO_ORIGINAL_DST), as sandbox-netd reads it, or "" when none waits. */
static void accept_original_dst(int lfd, char *buf, size_t size) {
        struct sockaddr_in o;
        socklen_t l = sizeof(o);
        char a[INET_ADDRSTRLEN];
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        buf[0] = 0;
        if (fd < 0)
                return;
        if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &o, &l) == 0)
                snprintf(buf, size, "%s:%u", inet_ntop(AF_INET, &o.sin_addr, a, sizeof(a)), ntohs(o.sin_port));
        close(fd);
}

/* A custom policy's TCP 80/443 lands on the proxy port of its own gateway
 * (with the destination it asked for recoverable), whatever address it
 * dialled; QUIC is refused at once; allow-all is never redirected; and the
 * redirect comes back with the session after the table is re-installed. */
static void test_custom_session_http_goes_to_the_proxy_on_its_gateway(void **state) {
        core_net_pool p = test_pool();
        sb_error *err = NULL;
        char orig[64];
        const char *gw = "10.201.0.6";
        build_topology();
        host_fds[2] = bound_socket(SOCK_STREAM, 3128);
        assert_int_equal(listen(host_fds[2], 16), 0);

        apply("{\"allow\":[\"example.com\"],\"subnets\":{\"allow\":[\"10.1.1.0/24\"]}}");
        expect_reachable('t', "10.1.1.1", 80);
        accept_original_dst(host_fds[2], orig, sizeof(orig));
        assert_string_equal(orig, "10.1.1.1:80");
        expect_reachable('t', "10.1.1.1", 443);
        accept_original_dst(host_fds[2], orig, sizeof(orig));
        assert_string_equal(orig, "10.1.1.1:443");
        /* The proxy as HTTP(S)_PROXY, addressed directly. */
        expect_reachable('t', gw, 3128);
        accept_original_dst(host_fds[2], orig, sizeof(orig));
        assert_string_equal(orig, "10.201.0.6:3128");
        /* Other ports keep the forward chain's verdicts. QUIC reaches an
         * address subnets.allow admits (no name check needed: the closed
         * port answers), and is refused at once at one only a DNS pin
         * admits (it could not pass the proxy's SNI check). */
        expect_reachable('t', "10.1.1.1", 8080);
        reply quic = ask(0, 'u', "10.1.1.1", 443);
        if (quic.r != -ECONNREFUSED)
                fail_msg("udp 10.1.1.1:443: %s, expected the host's port-unreachable", strerror(-quic.r));
        struct in_addr pinned;
        inet_pton(AF_INET, "5.5.5.1", &pinned);
        assert_int_equal(pol_nft_pin(IF, pinned, 60, &err), 0);
        expect_udp_prohibited("5.5.5.1", 443);

        /* allow-all: nothing is redirected; the listener namespace has no
         * service on 80, and the proxy port on the gateway is shut. */
        apply("\"allow-all\"");
        expect_refused("10.1.1.1", 80);
        expect_refused(gw, 3128);

        /* Re-installed after `nft flush ruleset`: the nat chain and the
         * set come back with the table, the element with the session. */
        apply("{\"allow\":[\"example.com\"]}");
        free(run("nft flush ruleset"));
        assert_int_equal(core_net_host_ensure(&p, &err), 1);
        assert_null(err);
        pol_nft_host_reset();
        apply("{\"allow\":[\"example.com\"]}");
        expect_reachable('t', "10.1.1.1", 80);
        accept_original_dst(host_fds[2], orig, sizeof(orig));
        assert_string_equal(orig, "10.1.1.1:80");

        assert_int_equal(pol_nft_session_remove(IF, &err), 0);
        char *out = run("nft list set inet sandboxd proxied");
        assert_int_equal(count(out, "sbx3"), 0);
        free(out);
        expect_refused("10.1.1.1", 80);
}


/* Flow generations: each custom change gets a mark never handed out
 * before; the store is asked before each block is used, and a store that
 * cannot record one refuses the change (fail closed), naming why. */
typedef struct mark_store {
        unsigned calls;
        uint32_t block;
        int fail;
} mark_store;

static int reserve_marks(void *userdata, uint32_t next, uint32_t *ret_limit) {
        mark_store *m = userdata;
        m->calls++;
        if (m->fail)
                return m->fail;
        *ret_limit = next + m->block;
        return 0;
}

/* The session's generation: its element of the shared `gens` set. */
static unsigned chain_mark(void) {
        char *out = run("nft list set inet sandboxd gens");
        const char *at = strstr(out, "\"sbx3\" . 0x");
        unsigned mark = 0;
        assert_non_null(at);
        assert_int_equal(sscanf(at, "\"sbx3\" . 0x%x", &mark), 1);
        free(out);
        return mark;
}

static void test_each_custom_change_gets_a_new_generation_reserved_first(void **state) {
        mark_store st = { 0, 2, 0 };
        unsigned seen[5];
        pol_nft_set_mark_store(1000, reserve_marks, &st);
        for (int i = 0; i < 5; i++) {
                apply(i % 2 ? "{\"allow\":[\"example.com\"]}" : "{\"allow\":[\"example.org\"]}");
                seen[i] = chain_mark();
                assert_int_equal(seen[i], 1000 + i);
        }
        assert_int_equal(st.calls, 3); /* blocks of 2: before 1000, 1002, 1004 */
        apply("\"allow-all\""); /* marks nothing, takes nothing */
        assert_int_equal(st.calls, 3);
        st.fail = -EIO;
        pol_policy *p = policy("{\"allow\":[\"example.com\"]}");
        sb_error *err = NULL;
        assert_int_equal(pol_nft_session_apply(IF, p, gateway(), &err), 0); /* 1005: still reserved */
        assert_int_equal(chain_mark(), 1005);
        assert_true(pol_nft_session_apply(IF, p, gateway(), &err) < 0);
        assert_non_null(err);
        assert_non_null(strstr(err->message, "flow generation"));
        sb_error_free(err);
        pol_policy_free(p);
        assert_int_equal(chain_mark(), 1005); /* the refused change left the rules as they were */
        pol_nft_set_mark_store(2000, NULL, NULL);
        assert_int_equal(pol_nft_session_remove(IF, NULL), 0);
}

/* ---- the range arithmetic alone (no namespace needed) ---- */

/* The ranges of cidrs (n of them, parsed here) or, with forbidden, the
 * forbidden ranges of a custom policy whose subnets.allow they are, each
 * as "lo-hi" on a line, IPv4 first. */
static char *ranges_text(const char *const *cidrs, size_t n, bool forbidden) {
        pol_cidr c[8];
        pol_nft_range *v = NULL;
        size_t nv = 0, len = 0;
        char *out = calloc(1, 16384);
        assert_non_null(out);
        assert_true(n <= 8);
        for (size_t i = 0; i < n; i++) {
                char *why = NULL;
                assert_int_equal(pol_cidr_parse(cidrs[i], &c[i], &why), 0);
        }
        pol_policy p = { .mode = POL_MODE_CUSTOM, .subnet_allow = c, .n_subnet_allow = n };
        assert_int_equal(forbidden ? pol_nft_forbidden(&p, &v, &nv) : pol_nft_cidr_ranges(c, n, &v, &nv), 0);
        for (size_t i = 0; i < nv; i++) {
                char lo[INET6_ADDRSTRLEN], hi[INET6_ADDRSTRLEN];
                inet_ntop(v[i].family, v[i].lo, lo, sizeof(lo));
                inet_ntop(v[i].family, v[i].hi, hi, sizeof(hi));
                len += (size_t) snprintf(out + len, 16384 - len, "%s-%s\n", lo, hi);
                assert_true(len < 16384);
        }
        free(v);
        return out;
}

/* Both families are one integer type inside the generator: each keeps its
 * own top (255.255.255.255 and ffff:...:ffff end a range, never wrap or
 * carry into the other family), an IPv4-mapped CIDR stays IPv6, and
 * overlapping or adjacent CIDRs merge up to the last address. */
static void test_cidr_ranges_merge_within_each_family_up_to_its_last_address(void **state) {
        (void) state;
        static const char *const all[] = { "0.0.0.0/0", "::/0" };
        static const char *const edges[] = { "255.255.255.255/32", "10.1.0.0/16", "10.0.0.0/8",
                                              "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", "ffff::/128",
                                              "::ffff:0:0/96", "10.0.0.0/9", "11.0.0.0/8" };
        static const char *const adjacent[] = { "10.0.0.0/9", "10.128.0.0/9", "fffe::/16", "ffff::/16" };
        _cleanup_free_ char *a = ranges_text(all, ELEMENTSOF(all), false);
        _cleanup_free_ char *e = ranges_text(edges, ELEMENTSOF(edges), false);
        _cleanup_free_ char *j = ranges_text(adjacent, ELEMENTSOF(adjacent), false);
        assert_string_equal(a, "0.0.0.0-255.255.255.255\n::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff\n");
        assert_string_equal(e, "10.0.0.0-11.255.255.255\n255.255.255.255-255.255.255.255\n"
                               "::ffff:0.0.0.0-::ffff:255.255.255.255\nffff::-ffff::\n"
                               "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff\n");
        assert_string_equal(j, "10.0.0.0-10.255.255.255\nfffe::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff\n");
}

/* subnets.allow opens the forbidden row it names in every form (IPv4,
 * IPv4-mapped, IPv4-compatible, NAT64, 6to4), never the host rows
 * (0.0.0.0/8, 127.0.0.0/8) nor, by a wider CIDR, rows it does not name;
 * the multicast rows run to each family's last address. */
static void test_forbidden_ranges_open_only_the_named_rows_in_both_families(void **state) {
        (void) state;
        static const char *const allow[] = { "10.0.0.0/8", "0.0.0.0/0", "127.0.0.0/8", "::/0" };
        _cleanup_free_ char *f = ranges_text(allow, ELEMENTSOF(allow), true);
        static const char *const kept[] = { "0.0.0.0-0.255.255.255\n", "127.0.0.0-127.255.255.255\n",
                                            "169.254.0.0-169.254.255.255\n", "224.0.0.0-255.255.255.255\n",
                                            "::ffff:127.0.0.0-::ffff:127.255.255.255\n",
                                            "::127.0.0.0-::127.255.255.255\n",
                                            "64:ff9b::7f00:0-64:ff9b::7fff:ffff\n",
                                            "2002:7f00::-2002:7fff:ffff:ffff:ffff:ffff:ffff:ffff\n",
                                            "fe80::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff\n" };
        static const char *const opened[] = { "\n10.0.0.0-", "::ffff:10.0.0.0", "::10.0.0.0", "64:ff9b::a00:0",
                                              "2002:a00::" };
        for (size_t i = 0; i < ELEMENTSOF(kept); i++)
                if (!strstr(f, kept[i]))
                        fail_msg("forbidden ranges lost %s in:\n%s", kept[i], f);
        for (size_t i = 0; i < ELEMENTSOF(opened); i++)
                if (strstr(f, opened[i]))
                        fail_msg("forbidden ranges still hold %s in:\n%s", opened[i], f);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_cidr_ranges_merge_within_each_family_up_to_its_last_address),
                cmocka_unit_test(test_forbidden_ranges_open_only_the_named_rows_in_both_families),
                cmocka_unit_test_setup_teardown(test_custom_session_http_goes_to_the_proxy_on_its_gateway, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_apply_replace_and_remove_leave_exactly_the_expected_objects,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_overlapping_and_adjacent_prefixes_become_disjoint_ranges,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_interval_sets_alternate_slots_and_replace_what_a_failed_change_left, setup, teardown),
                cmocka_unit_test_setup_teardown(test_allow_all_subnet_never_opens_loopback_or_metadata, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_pin_adds_address_with_floored_timeout_and_errors_name_the_set,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_own_changes_do_not_alarm_the_monitor, setup, teardown),
                cmocka_unit_test_setup_teardown(test_each_custom_change_gets_a_new_generation_reserved_first, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(
                        test_allow_all_forwards_gateway_dns_to_the_upstream_and_other_modes_do_not, setup, teardown),
                cmocka_unit_test_setup_teardown(test_another_sessions_ranges_never_admit_this_sessions_traffic, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_deny_beats_allow_in_real_connects_and_denials_fail_at_once,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(test_ipv6_sets_hold_the_forbidden_forms_and_the_policys_cidrs, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_custom_policy_refuses_a_gateway_that_is_not_unicast, setup,
                                                teardown),
                cmocka_unit_test_setup_teardown(test_custom_session_reaches_only_the_dns_filter_on_its_gateway,
                                                setup, teardown),
                cmocka_unit_test_setup_teardown(
                        test_veth_without_element_is_denied_until_its_policy_is_applied_again, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
