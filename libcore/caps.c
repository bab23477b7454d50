/* Capability sets of sandbox commands (see caps.h). The steps that run in
 * the child of sandbox-init between its spawn and exec (core_caps_bound,
 * core_caps_set) use prctl and capget/capset directly: that child shares
 * init's memory (a CLONE_VM spawn), so it must not allocate. libcap serves
 * the rest (the kernel's capability count, core_caps_verify). */
#include <errno.h>
#include <stdbool.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
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

/* Number of capabilities the running kernel knows (CAP_LAST_CAP + 1).
 * Asked once: cap_max_bits() probes the kernel and caches nothing. */
static unsigned caps_known(void) {
        static unsigned known;
        if (!known) {
                unsigned n = (unsigned)cap_max_bits();
                known = n > 64 ? 64 : n;
        }
        return known;
}

/* The capability sets of the calling thread through capget/capset
 * themselves, not libcap: these run between fork (or a CLONE_VM spawn) and
 * exec, where nothing may allocate. Version 3: two 32-bit words per set. */
static int caps_get(struct __user_cap_data_struct data[2]) {
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        return syscall(SYS_capget, &hdr, data) < 0 ? negative_errno() : 0;
}

static int caps_put(const struct __user_cap_data_struct data[2]) {
        struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
        return syscall(SYS_capset, &hdr, data) < 0 ? negative_errno() : 0;
}

uint64_t core_caps_known_mask(void) {
        return caps_known() >= 64 ? ~0ull : BIT(caps_known()) - 1;
}

uint64_t core_caps_bounding(void) {
        uint64_t m = 0;
        for (unsigned c = 0; c < caps_known(); c++)
                if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) > 0)
                        m |= BIT(c);
        return m;
}

int core_caps_bound_known(uint64_t keep, uint64_t have) {
        unsigned n = caps_known();
        /* PR_CAPBSET_DROP commits a new set of credentials each time:
         * dropping only what is still there makes a process whose bounding
         * set is already small (sandbox-init trims its own, see
         * init/command.c) pay for what is left only. */
        for (unsigned c = 0; c < n; c++)
                if ((have & ~keep & BIT(c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0)
                        return negative_errno();
        /* One call clears the ambient set; EINVAL: no ambient support. */
        if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
                return negative_errno();
        struct __user_cap_data_struct data[2];
        int r = caps_get(data);
        if (r < 0)
                return r;
        data[0].inheritable &= (uint32_t)keep;
        data[1].inheritable &= (uint32_t)(keep >> 32);
        return caps_put(data);
}

int core_caps_bound(uint64_t keep) {
        return core_caps_bound_known(keep, core_caps_bounding());
}

int core_caps_set(uint64_t keep) {
        uint64_t known = caps_known() >= 64 ? ~0ull : BIT(caps_known()) - 1;
        keep &= known;
        struct __user_cap_data_struct data[2] = {
                { .effective = (uint32_t)keep, .permitted = (uint32_t)keep, .inheritable = (uint32_t)keep },
                { .effective = (uint32_t)(keep >> 32), .permitted = (uint32_t)(keep >> 32),
                  .inheritable = (uint32_t)(keep >> 32) },
        };
        return caps_put(data);
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

int core_caps_effective(int cap, bool on) {
        _cleanup_(cap_freep) cap_t caps = cap_get_proc();
        if (!caps)
                return negative_errno();
        cap_value_t v = (cap_value_t)cap;
        cap_flag_value_t was;
        if (cap_get_flag(caps, v, CAP_EFFECTIVE, &was) < 0)
                return negative_errno();
        if ((was == CAP_SET) == on)
                return was == CAP_SET;
        if (cap_set_flag(caps, CAP_EFFECTIVE, 1, &v, on ? CAP_SET : CAP_CLEAR) < 0 || cap_set_proc(caps) < 0)
                return negative_errno();
        return was == CAP_SET;
}
