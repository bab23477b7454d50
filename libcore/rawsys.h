/* A system call that never writes errno, for code running in another
 * thread's or process's memory: a CLONE_VM child before its exec
 * (sandboxd's clone of sandbox-init, libcore/container.c; sandbox-init's
 * clone of a command's child, libcore/init/command.c), where errno and
 * every other thread-local variable belong to the thread that cloned it
 * and a libc wrapper may take a lock. */
#pragma once

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
/* Whether core_rawsys is the inline instruction (a CLONE_VM child may use
 * it); elsewhere it goes through syscall(2), which writes errno, so only a
 * child with a copy of the memory may call it. */
#define CORE_RAWSYS_INLINE 1

/* System call n with up to five arguments (x86-64 `syscall`: rax, rdi,
 * rsi, rdx, r10, r8; syscall(2) NOTES). Returns its result, or a negative
 * errno; never writes errno. Not instrumented by ASan: a CLONE_VM child
 * must not poison shadow bytes of a stack it never returns from. */
__attribute__((no_sanitize_address)) static inline long core_rawsys(long n, long a, long b, long c, long d,
                                                                     long e) {
        register long r10 __asm__("r10") = d, r8 __asm__("r8") = e;
        long ret;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                         : "rcx", "r11", "memory");
        return ret;
}
#else
#define CORE_RAWSYS_INLINE 0

/* System call n through syscall(2): its result, or a negative errno (which
 * it also leaves in errno: only for a child with a copy of the memory). */
static inline long core_rawsys(long n, long a, long b, long c, long d, long e) {
        long r = syscall(n, a, b, c, d, e);
        return r < 0 ? -errno : r;
}
#endif
