/* Host, pattern and CIDR matching (policy/match.c). Input: lines
 * "pattern\nhost\ncidr\naddress". Invariants: a normalised name normalises
 * to itself; a matched name is a normalised name; an address or CIDR that
 * parses formats to text that parses back to the same value; a CIDR
 * contains its own base address and lies within itself; a host parsed as
 * an address is classified without trouble. */
#include <errno.h>
#include "fuzz.h"
#include "policy/match.h"

static void check_name(const char *in) {
        char norm[POL_NAME_MAX + 1], again[POL_NAME_MAX + 1];
        const char *why = NULL;
        if (pol_name_normalize(in, norm, &why) < 0) {
                FUZZ_ASSERT(why);
                return;
        }
        FUZZ_ASSERT(strlen(norm) <= POL_NAME_MAX);
        FUZZ_ASSERT(pol_name_normalize(norm, again, &why) == 0);
        FUZZ_ASSERT(strcmp(norm, again) == 0);
}

static void check_addr(const char *in) {
        pol_addr a, b;
        char buf[64];
        if (pol_addr_parse(in, &a) == 0) {
                pol_addr_format(&a, buf, sizeof(buf));
                FUZZ_ASSERT(pol_addr_parse(buf, &b) == 0);
                FUZZ_ASSERT(a.family == b.family && memcmp(a.bytes, b.bytes, sizeof(a.bytes)) == 0);
                pol_addr emb;
                (void)pol_addr_embedded_v4(&a, &emb);
                (void)pol_addr_classify(&a);
        }
        if (pol_addr_parse_inet_aton(in, &a) == 0)
                FUZZ_ASSERT(a.family != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *s = fuzz_cstr(data, size);
        char *host = fuzz_split(s), *cidr = fuzz_split(host), *addr = fuzz_split(cidr);
        fuzz_split(addr);

        check_name(s);
        check_name(host);
        check_addr(addr);
        check_addr(host);

        pol_pattern p;
        pol_host h;
        const char *why = NULL;
        int pr = pol_pattern_parse(s, &p, &why);
        FUZZ_ASSERT(pr == 0 || why);
        int hr = pol_host_parse(host, &h, &why);
        FUZZ_ASSERT(hr == 0 || why);
        if (pr == 0)
                (void)pol_pattern_specificity(&p);
        if (pr == 0 && hr == 0 && !h.is_addr && pol_pattern_match(&p, h.name, h.port)) {
                char norm[POL_NAME_MAX + 1];
                FUZZ_ASSERT(pol_name_normalize(h.name, norm, &why) == 0 && strcmp(norm, h.name) == 0);
        }
        if (hr == 0 && h.is_addr)
                (void)pol_addr_classify(&h.addr);

        pol_cidr c, c2;
        char *cwhy = NULL, buf[64];
        int cr = pol_cidr_parse(cidr, &c, &cwhy);
        if (cr < 0) {
                FUZZ_ASSERT(cr == -EINVAL || cr == -ENOMEM);
                free(cwhy);
        } else {
                FUZZ_ASSERT(!cwhy);
                pol_cidr_format(&c, buf, sizeof(buf));
                FUZZ_ASSERT(pol_cidr_parse(buf, &c2, &cwhy) == 0);
                FUZZ_ASSERT(c.prefix == c2.prefix && c.addr.family == c2.addr.family &&
                            memcmp(c.addr.bytes, c2.addr.bytes, 16) == 0);
                FUZZ_ASSERT(pol_cidr_contains(&c, &c.addr));
                FUZZ_ASSERT(pol_cidr_within(&c, &c));
                pol_addr a;
                if (pol_addr_parse(addr, &a) == 0)
                        (void)pol_cidr_contains(&c, &a);
                if (hr == 0 && h.is_addr)
                        (void)pol_cidr_contains(&c, &h.addr);
        }
        free(s);
        return 0;
}
