/* Unit tests for the command log ring (sandboxd/command.c): the last `cap`
 * bytes of a stream are kept in order, growth is on demand, and truncation
 * is reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include "libcore/util.h"
#include "sandboxd/internal.h"

static char *ring_text(const ring *r, size_t *len) {
        _cleanup_free_ char *b64 = ring_base64(r);
        void *data = NULL;
        assert_non_null(b64);
        assert_int_equal(core_base64_decode(b64, &data, len), 0);
        return data;
}

static void test_small_output_is_kept_whole_without_full_allocation(void **state) {
        ring r = {.cap = 1 << 20};
        ring_append(&r, "hello ", 6);
        ring_append(&r, "world", 5);
        size_t n;
        _cleanup_free_ char *t = ring_text(&r, &n);
        assert_int_equal(n, 11);
        assert_memory_equal(t, "hello world", 11);
        assert_false(r.truncated);
        assert_true(r.alloc < r.cap);
        ring_free(&r);
}

/* total counts every byte appended, kept or dropped, through a wrap, a
 * shrink and a free (command.logs gives total - len as the offset of what
 * it returns). */
static void test_total_counts_every_byte_through_wrap_shrink_and_free(void **state) {
        ring r = {.cap = 8};
        ring_append(&r, "0123456789", 10);
        ring_append(&r, "abc", 3);
        assert_int_equal(r.total, 13);
        assert_int_equal(r.total - r.len, 5);
        ring_shrink(&r, 4);
        assert_int_equal(r.total - r.len, 9);
        ring_free(&r);
        assert_int_equal(r.total, 13);
        assert_int_equal(r.len, 0);
        ring_append(&r, "xy", 2);
        assert_int_equal(r.total, 15);
}

static void test_empty_ring_reads_empty(void **state) {
        ring r = {.cap = 16};
        size_t n = 99;
        _cleanup_free_ char *t = ring_text(&r, &n);
        assert_int_equal(n, 0);
        assert_false(r.truncated);
        ring_free(&r);
}

static void test_keeps_last_cap_bytes_in_order_across_wraps(void **state) {
        ring r = {.cap = 10};
        char expect[10];
        /* Feed 0..99 as bytes in uneven chunks; the last ten must remain. */
        unsigned char all[100];
        for (int i = 0; i < 100; i++)
                all[i] = (unsigned char)i;
        size_t off = 0, step = 1;
        while (off < sizeof(all)) {
                size_t n = step < sizeof(all) - off ? step : sizeof(all) - off;
                ring_append(&r, (char *)all + off, n);
                off += n;
                step = step % 7 + 3;
        }
        for (int i = 0; i < 10; i++)
                expect[i] = (char)(90 + i);
        size_t n;
        _cleanup_free_ char *t = ring_text(&r, &n);
        assert_int_equal(n, 10);
        assert_memory_equal(t, expect, 10);
        assert_true(r.truncated);
        ring_free(&r);
}

static void test_one_chunk_larger_than_cap_keeps_its_tail(void **state) {
        ring r = {.cap = 4};
        ring_append(&r, "ab", 2);
        ring_append(&r, "0123456789", 10);
        size_t n;
        _cleanup_free_ char *t = ring_text(&r, &n);
        assert_int_equal(n, 4);
        assert_memory_equal(t, "6789", 4);
        assert_true(r.truncated);
        ring_free(&r);
}

static void test_shrink_keeps_the_newest_bytes_of_a_wrapped_ring(void **state) {
        ring r = {.cap = 8};
        ring_append(&r, "abcdef", 6);
        ring_append(&r, "ghij", 4); /* wrapped: holds "cdefghij" */
        ring_shrink(&r, 3);
        size_t n;
        _cleanup_free_ char *t = ring_text(&r, &n);
        assert_int_equal(n, 3);
        assert_memory_equal(t, "hij", 3);
        assert_true(r.truncated);
        assert_int_equal(r.alloc, 3);
        assert_int_equal(r.cap, 3);
        /* Later output stays within the new cap. */
        ring_append(&r, "kl", 2);
        _cleanup_free_ char *t2 = ring_text(&r, &n);
        assert_int_equal(n, 3);
        assert_memory_equal(t2, "jkl", 3);
        assert_true(r.alloc <= 3);
        ring_free(&r);
}

static void test_shrink_to_a_larger_cap_changes_nothing(void **state) {
        ring r = {.cap = 8};
        ring_append(&r, "abc", 3);
        ring_shrink(&r, 16);
        size_t n;
        _cleanup_free_ char *t = ring_text(&r, &n);
        assert_int_equal(n, 3);
        assert_memory_equal(t, "abc", 3);
        assert_false(r.truncated);
        assert_int_equal(r.cap, 8);
        ring_free(&r);
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_small_output_is_kept_whole_without_full_allocation),
                cmocka_unit_test(test_empty_ring_reads_empty),
                cmocka_unit_test(test_total_counts_every_byte_through_wrap_shrink_and_free),
                cmocka_unit_test(test_keeps_last_cap_bytes_in_order_across_wraps),
                cmocka_unit_test(test_one_chunk_larger_than_cap_keeps_its_tail),
                cmocka_unit_test(test_shrink_keeps_the_newest_bytes_of_a_wrapped_ring),
                cmocka_unit_test(test_shrink_to_a_larger_cap_changes_nothing),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
