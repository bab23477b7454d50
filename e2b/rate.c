/* sandboxd-e2b's request rate per tenant (docs/SECURITY.md §4.3): a
 * token bucket for each tenant its API keys and envd tokens name, so one
 * key's caller cannot spend the gateway's threads and the daemon's time
 * at whatever rate its connections allow.
 *
 * Each tenant's bucket holds at most 2 x rate requests and fills at
 * `rate` a second; a request of a tenant whose bucket is empty is
 * answered 429 from its head (route.c), before any byte of its body.
 * Per tenant rather than per key string: a tenant's keys and its
 * sandboxes' envd tokens are one caller to the daemon, and keys are
 * added by the operator, so more keys must not mean more rate. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <stdbool.h>
#include <time.h>
#include "e2b/gateway.h"

/* Tenants tracked at once: the keys file names them; past this the
 * bucket idle longest (the fullest, as buckets fill while idle) is
 * reused. */
#define BUCKETS 1024

typedef struct bucket {
        char tenant[80];
        bool public;    /* the tenant's public traffic (gw_rate_take_public), a bucket of its own */
        double tokens;
        int64_t at_ms;  /* when tokens was last brought up to date */
} bucket;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bucket buckets[BUCKETS];
static size_t n_buckets;
static unsigned rate = GW_RATE_DEFAULT;

static int64_t monotonic_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t (*clock_ms)(void) = monotonic_ms;

void gw_rate_set(unsigned per_second, int64_t (*now_ms)(void)) {
        pthread_mutex_lock(&lock);
        rate = per_second ? per_second : 1;
        clock_ms = now_ms ? now_ms : monotonic_ms;
        n_buckets = 0;
        pthread_mutex_unlock(&lock);
}

static bucket *bucket_of(const char *tenant, bool public, int64_t now) {
        double burst = 2.0 * rate;
        for (size_t i = 0; i < n_buckets; i++)
                if (buckets[i].public == public && strcmp(buckets[i].tenant, tenant) == 0)
                        return &buckets[i];
        size_t at = n_buckets;
        if (n_buckets < BUCKETS)
                n_buckets++;
        else
                for (size_t i = at = 0; i < BUCKETS; i++)
                        if (buckets[i].at_ms < buckets[at].at_ms)
                                at = i;
        bucket *b = &buckets[at];
        snprintf(b->tenant, sizeof(b->tenant), "%s", tenant);
        b->public = public;
        b->tokens = burst;
        b->at_ms = now;
        return b;
}

static bool take(const char *tenant, bool public) {
        pthread_mutex_lock(&lock);
        int64_t now = clock_ms();
        bucket *b = bucket_of(tenant, public, now);
        double burst = 2.0 * rate;
        if (now > b->at_ms) {
                b->tokens += (double) (now - b->at_ms) * rate / 1000.0;
                if (b->tokens > burst)
                        b->tokens = burst;
                b->at_ms = now;
        }
        bool ok = b->tokens >= 1.0;
        if (ok)
                b->tokens -= 1.0;
        pthread_mutex_unlock(&lock);
        return ok;
}

bool gw_rate_take(const char *tenant) {
        return take(tenant, false);
}

bool gw_rate_take_public(const char *tenant) {
        return take(tenant, true);
}
