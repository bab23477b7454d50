/* Capability sets of sandbox commands (see caps.h), with libcap. Runs in
 * the forked child of sandbox-init between fork and exec; the process is
 * single-threaded there, so libcap's allocations are safe. */
#include <errno.h>
#include <stdbool.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include "libcore/caps.h"
#include "libcore/macro.h"

#define BIT(c) (1ull << (c))

/* Source: Docker's default capability set (moby oci/caps/defaults.go).
 * Left out on purpose: CAP_MKNOD. Docker pairs it with a device cgroup
 * that refuses opening any device node not in its list; sandboxes have no
 * device filter, and their /dev is a writable tmpfs without nodev, so root
 * with CAP_MKNOD could create and open a node for a host disk or /dev/mem.
 * CAP_SYS_CHROOT stays for fidelity with Docker, but chroot(2) itself is
 * refused by the seccomp filter. */
static const cap_value_t root_caps[] = {
        CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_NET_RAW, CAP_SETGID, CAP_SETUID,
        CAP_SETFCAP, CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_KILL, CAP_AUDIT_WRITE,
};

static inline void cap_freep(cap_t *c) {
        if (*c)
                cap_free(*c);
}

uint64_t core_caps_root_set(void) {
        uint64_t m = 0;
        for (size_t i = 0; i < ELEMENTSOF(root_caps); i++)
                m |= BIT(root_caps[i]);
        return m;
}

uint64_t core_caps_for_uid(uid_t uid) {
        return uid == 0 ? core_caps_root_set() : 0;
}

/* Number of capabilities the running kernel knows (CAP_LAST_CAP + 1). */
static unsigned caps_known(void) {
        unsigned n = (unsigned)cap_max_bits();
        return n > 64 ? 64 : n;
}

int core_caps_bound(uint64_t keep) {
        unsigned n = caps_known();
        for (unsigned c = 0; c < n; c++)
                if (!(keep & BIT(c)) && cap_drop_bound((cap_value_t)c) < 0)
                        return negative_errno();
        if (cap_reset_ambient() < 0 && errno != EINVAL) /* EINVAL: no ambient support */
                return negative_errno();
        _cleanup_(cap_freep) cap_t caps = cap_get_proc();
        if (!caps)
                return negative_errno();
        if (cap_clear_flag(caps, CAP_INHERITABLE) < 0)
                return negative_errno();
        for (unsigned c = 0; c < n; c++) {
                cap_value_t v = (cap_value_t)c;
                if ((keep & BIT(c)) && cap_set_flag(caps, CAP_INHERITABLE, 1, &v, CAP_SET) < 0)
                        return negative_errno();
        }
        return cap_set_proc(caps) < 0 ? negative_errno() : 0;
}

int core_caps_set(uint64_t keep) {
        _cleanup_(cap_freep) cap_t caps = cap_init();
        if (!caps)
                return negative_errno();
        unsigned n = caps_known();
        for (unsigned c = 0; c < n; c++) {
                cap_value_t v = (cap_value_t)c;
                if (!(keep & BIT(c)))
                        continue;
                if (cap_set_flag(caps, CAP_PERMITTED, 1, &v, CAP_SET) < 0 ||
                    cap_set_flag(caps, CAP_EFFECTIVE, 1, &v, CAP_SET) < 0 ||
                    cap_set_flag(caps, CAP_INHERITABLE, 1, &v, CAP_SET) < 0)
                        return negative_errno();
        }
        return cap_set_proc(caps) < 0 ? negative_errno() : 0;
}

int core_caps_verify(uint64_t keep) {
        _cleanup_(cap_freep) cap_t caps = cap_get_proc();
        if (!caps)
                return negative_errno();
        unsigned n = caps_known();
        for (unsigned c = 0; c < n; c++) {
                cap_value_t v = (cap_value_t)c;
                bool want = keep & BIT(c);
                cap_flag_value_t p, e, i;
                if (cap_get_flag(caps, v, CAP_PERMITTED, &p) < 0 || cap_get_flag(caps, v, CAP_EFFECTIVE, &e) < 0 ||
                    cap_get_flag(caps, v, CAP_INHERITABLE, &i) < 0)
                        return negative_errno();
                int b = cap_get_bound(v), a = cap_get_ambient(v);
                if ((p == CAP_SET) != want || (e == CAP_SET) != want || (i == CAP_SET) != want ||
                    (b > 0) != want || a > 0)
                        return -EPERM;
        }
        return 0;
}
