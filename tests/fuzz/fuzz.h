/* Shared helpers of the libFuzzer targets (tests/fuzz/fuzz-*.c). Each target
 * defines LLVMFuzzerTestOneInput; an invariant that does not hold calls
 * FUZZ_ASSERT, which aborts so that libFuzzer keeps the input as a crash. */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                                          \
        do {                                                                                       \
                if (!(cond)) {                                                                     \
                        fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
                        abort();                                                                   \
                }                                                                                  \
        } while (0)

/* A NUL-terminated copy of the input (the caller frees). Inputs with a NUL
 * inside are cut there, as any C-string consumer would see them. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
        char *s = malloc(size + 1);
        if (!s)
                abort();
        memcpy(s, data, size);
        s[size] = 0;
        return s;
}

/* Splits s in place at the first '\n': returns the rest (or "" if none). */
static inline char *fuzz_split(char *s) {
        char *nl = strchr(s, '\n');
        if (!nl)
                return s + strlen(s);
        *nl = 0;
        return nl + 1;
}
