/* The E2B gateway's reader of a client stream (gw_instream_feed, e2b/envd.c:
 * process.Process/StreamInput's request body, Connect envelopes from the
 * network, read as they come). The input is the body; it is fed once
 * whole and once cut at a point the input's first byte chooses.
 * Invariants: each feed returns 0 or -1, and once -1 always -1; the two
 * ways of feeding agree on the verdict (a message is acted on when its
 * last byte comes, whatever the cuts); nothing leaks or overruns. The
 * daemon socket does not exist, so a start message fails at once and
 * the same way both times. */
#include "fuzz.h"
#include "e2b/gateway.h"

static const gw_config cfg = { .socket_path = "/nonexistent/sandboxd.sock", .keys_path = "/nonexistent/keys" };

static int feed(const uint8_t *data, size_t size, size_t cut) {
        gw_instream *s = gw_instream_open(&cfg, "team-a", "sbx-1");
        FUZZ_ASSERT(s);
        int a = gw_instream_feed(s, (const char *) data, cut);
        FUZZ_ASSERT(a == 0 || a == -1);
        int b = gw_instream_feed(s, (const char *) data + cut, size - cut);
        FUZZ_ASSERT(b == 0 || b == -1);
        FUZZ_ASSERT(a == 0 || b == -1);
        gw_instream_finish(s, NULL);
        return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size == 0)
                return 0;
        size_t cut = data[0] % (size + 1);
        FUZZ_ASSERT(feed(data, size, size) == feed(data, size, cut));
        return 0;
}
