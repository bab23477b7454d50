/* The loader of cli/lazy/openssl.h: dlopen(3) of libssl on the first
 * OpenSSL call of the process, then one dlsym(3) per function of the list.
 * This file includes the OpenSSL headers but not the redirecting macros, so
 * the names below are OpenSSL's own, for the types and the symbol names. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#define LAZY_SSL_NO_REDIRECT
#include "cli/lazy/openssl.h"

/* The soname of OpenSSL 3 (Debian's libssl3); libcrypto.so.3 comes with it
 * as its dependency, and dlsym on libssl's handle searches both. */
#define LIBSSL_SONAME "libssl.so.3"

static struct lazy_ssl table;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Exits with status 1 and a message naming what is missing. */
_Noreturn static void fail(const char *what) {
        const char *e = dlerror();
        fprintf(stderr, "sandboxctl: cannot load %s from %s (install libssl3): %s\n", what, LIBSSL_SONAME,
                e ? e : "not found");
        exit(1);
}

static void load(void) {
        void *h = dlopen(LIBSSL_SONAME, RTLD_NOW | RTLD_LOCAL);
        if (!h)
                fail("the library");
        /* The handle stays open for the life of the process: the table
         * points into it. */
#define LAZY_SSL_LOAD(name)                                      \
        if (!(table.name = (__typeof__(&name))dlsym(h, #name))) \
                fail(#name);
        LAZY_SSL_FUNCS(LAZY_SSL_LOAD)
#undef LAZY_SSL_LOAD
}

const struct lazy_ssl *lazy_ssl(void) {
        pthread_once(&once, load);
        return &table;
}
