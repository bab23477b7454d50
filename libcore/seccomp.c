/* The seccomp deny table and its compilation to BPF (see seccomp.h).
 *
 * Runs in sandbox-init: core_seccomp_default() in the parent before fork,
 * core_seccomp_install() in the command's child as the last step before
 * execve, after the identity change and no_new_privs, so the filter need
 * not allow anything that sequence still does. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <linux/audit.h>
#include <linux/btrfs.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "libcore/log.h"
#include "libcore/seccomp.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

struct core_seccomp {
        size_t len;
        struct sock_filter *insns;
};

/* Every namespace-creating flag. CLONE_NEWTIME shares its bit with the exit
 * signal of clone(2) (CSIGNAL), so it is only matched for unshare; clone3,
 * the one clone that can take it, is refused as a whole. */
#define NS_FLAGS_CLONE (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | \
                        CLONE_NEWPID | CLONE_NEWNET)
#define NS_FLAGS_UNSHARE (NS_FLAGS_CLONE | CLONE_NEWTIME)

#define DENY(n) { .name = (n), .err = EPERM, .match = CORE_SC_ALL }

/* Source: the syscalls Docker's default profile (moby
 * profiles/seccomp/default.json, and docs/security/seccomp.md "Significant
 * syscalls blocked by the default profile") does not allow a container
 * without extra capabilities, plus DESIGN §4's list. Names that do not exist
 * on x86_64 (umount, stime, vm86, vm86old, ...) are left out: the native
 * ABI is the only one a command can reach.
 *
 * Left out on purpose (allowed):
 * - ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, process_madvise:
 *   Docker allows them on kernels >= 4.8, where seccomp runs after a tracer
 *   changes a syscall, so a tracee cannot be used to bypass the filter. The
 *   kernel's own ptrace access checks still apply (same uid, and the
 *   tracer's permitted capabilities must cover the tracee's: a command can
 *   never attach to sandbox-init, which holds every capability), and
 *   debuggers and strace keep working inside a sandbox.
 * - sethostname/setdomainname: the UTS namespace is the sandbox's own and
 *   they need CAP_SYS_ADMIN, which no command holds.
 * - seccomp: a command may stack stricter filters of its own. */
static const core_seccomp_rule deny_rules[] = {
        /* io_uring: a second syscall interface that bypasses this filter
         * (its operations are not syscalls) and a steady source of kernel
         * bugs; Docker blocks it since moby 25. */
        DENY("io_uring_setup"), DENY("io_uring_enter"), DENY("io_uring_register"),
        /* Kernel attack surface with a history of exploits. */
        DENY("userfaultfd"), DENY("bpf"), DENY("perf_event_open"), DENY("fanotify_init"),
        /* The kernel keyring is not namespaced. */
        DENY("keyctl"), DENY("add_key"), DENY("request_key"),
        /* Loading code into the kernel. */
        DENY("kexec_load"), DENY("kexec_file_load"), DENY("init_module"), DENY("finit_module"),
        DENY("delete_module"), DENY("create_module"), DENY("get_kernel_syms"), DENY("query_module"),
        /* The mount family, old and new API: the sandbox's mounts are final. */
        DENY("mount"), DENY("umount2"), DENY("fsopen"), DENY("fsconfig"), DENY("fsmount"),
        DENY("fspick"), DENY("move_mount"), DENY("open_tree"), DENY("mount_setattr"),
        DENY("pivot_root"), DENY("chroot"),
        /* Namespaces: no new ones (user namespaces above all: they hand an
         * unprivileged process a full capability set over new kernel code),
         * no joining others. clone3 gets ENOSYS, not EPERM, so that libc
         * falls back to clone(2), whose flags this filter can read. */
        { .name = "clone", .err = EPERM, .match = CORE_SC_ANY_BIT, .arg = 0, .bits = NS_FLAGS_CLONE },
        { .name = "unshare", .err = EPERM, .match = CORE_SC_ANY_BIT, .arg = 0, .bits = NS_FLAGS_UNSHARE },
        { .name = "clone3", .err = ENOSYS, .match = CORE_SC_ALL },
        DENY("setns"),
        /* Only the default persona and the 0xffffffff query: other
         * personalities turn off ASLR or make data executable. */
        { .name = "personality", .err = EPERM, .match = CORE_SC_NOT_QUERY, .arg = 0 },
        /* Injecting input into a terminal that another process reads (the
         * pty of a `sandboxctl exec -t` session ends at the caller's). */
        { .name = "ioctl", .err = EPERM, .match = CORE_SC_EQ32, .arg = 1, .bits = TIOCSTI },
        { .name = "ioctl", .err = EPERM, .match = CORE_SC_EQ32, .arg = 1, .bits = TIOCLINUX },
        /* Btrfs subvolumes and snapshots: any user who may write a
         * directory may make one there (fs/btrfs/ioctl.c btrfs_mksubvol
         * checks only write access), and a new subvolume gets a qgroup of
         * its own, outside the limit of the volume or disk it was made in
         * (docs/SECURITY.md "Volumes": a pool volume is a subvolume bound
         * by a qgroup, mounted without overlayfs between). Refused as
         * mkdir would be on a filesystem without them. */
        { .name = "ioctl", .err = EPERM, .match = CORE_SC_EQ32, .arg = 1, .bits = BTRFS_IOC_SUBVOL_CREATE },
        { .name = "ioctl", .err = EPERM, .match = CORE_SC_EQ32, .arg = 1, .bits = BTRFS_IOC_SUBVOL_CREATE_V2 },
        { .name = "ioctl", .err = EPERM, .match = CORE_SC_EQ32, .arg = 1, .bits = BTRFS_IOC_SNAP_CREATE },
        { .name = "ioctl", .err = EPERM, .match = CORE_SC_EQ32, .arg = 1, .bits = BTRFS_IOC_SNAP_CREATE_V2 },
        /* Extents shared by reference (reflinks, dedupe): on the storage
         * pool's Btrfs each shared extent adds a back reference to the
         * extent tree, which no subvolume's quota counts (about 0.75 byte
         * of it per byte the quota does count, measured), so a sandbox
         * could fill the pool for everyone while within its diskMiB
         * (docs/SECURITY.md "Disk space"). Refused as a filesystem without
         * reflinks refuses them, EOPNOTSUPP, so `cp --reflink=auto` and
         * the like copy the bytes instead. copy_file_range(2) clones on
         * Btrfs too (vfs_copy_file_range remaps within one filesystem):
         * ENOSYS, which coreutils, glibc's callers and Go take as "copy by
         * read and write". Overlayfs copy-up clones from a lower layer in
         * the kernel, once per file and bounded by the layer's size. */
        { .name = "ioctl", .err = EOPNOTSUPP, .match = CORE_SC_EQ32, .arg = 1, .bits = FICLONE },
        { .name = "ioctl", .err = EOPNOTSUPP, .match = CORE_SC_EQ32, .arg = 1, .bits = FICLONERANGE },
        { .name = "ioctl", .err = EOPNOTSUPP, .match = CORE_SC_EQ32, .arg = 1, .bits = FIDEDUPERANGE },
        { .name = "copy_file_range", .err = ENOSYS, .match = CORE_SC_ALL },
        /* Host-wide state that is not namespaced: accounting, swap, power,
         * clocks, the kernel log, quotas, raw I/O ports. */
        DENY("acct"), DENY("swapon"), DENY("swapoff"), DENY("reboot"),
        DENY("settimeofday"), DENY("clock_settime"), DENY("clock_adjtime"), DENY("adjtimex"),
        DENY("syslog"), DENY("quotactl"), DENY("quotactl_fd"), DENY("lookup_dcookie"),
        DENY("vhangup"), DENY("nfsservctl"), DENY("iopl"), DENY("ioperm"),
        /* File handles bypass path-based confinement (the "shocker"
         * escape used open_by_handle_at). */
        DENY("open_by_handle_at"), DENY("name_to_handle_at"),
        /* NUMA policy and obsolete calls Docker blocks without CAP_SYS_NICE
         * or at all. */
        DENY("get_mempolicy"), DENY("set_mempolicy"), DENY("set_mempolicy_home_node"),
        DENY("mbind"), DENY("move_pages"), DENY("sysfs"), DENY("_sysctl"), DENY("uselib"),
        DENY("ustat"),
        /* Memory the kernel unmaps from its own direct map: not for
         * sandboxes in Docker's profile either. */
        DENY("memfd_secret"),
};

/* Syscalls newer than the table above. The table was written for every
 * x86_64 syscall libseccomp 2.5.4 (Debian 12) knows by name, up to
 * futex_requeue (456, Linux 6.7); each of them is either in the table or
 * allowed on purpose. A number above that is a syscall nobody reviewed for
 * this filter, and the filter fails closed on it: ENOSYS, the answer of an
 * older kernel, so that libc and other programs take their fallback (glibc
 * does for fchmodat2, mseal, the *xattrat calls, ...). The few newer calls
 * that belong to a family the table refuses get that family's EPERM, by
 * raw number since libseccomp 2.5.4 does not know their names. Numbers
 * from the x86_64 table (arch/x86/entry/syscalls/syscall_64.tbl); the
 * filter is for x86_64 only (core_seccomp_new refuses other builds). */
#define NR_REVIEWED_MAX 456u
static const struct {
        uint32_t nr;
        const char *name;
} denied_new[] = {
        /* The mount family and the mount-information calls. */
        { 457, "statmount" },
        { 458, "listmount" },
        { 467, "open_tree_attr" },
};

/* Socket families (DESIGN §4, "only AF_UNIX, AF_INET, AF_INET6 and
 * AF_NETLINK sockets can be made"): socket(2) and socketpair(2) of any
 * other family fail with EAFNOSUPPORT, the answer of a kernel built without
 * it, so programs take their usual fallback. The check is on the family
 * argument before the kernel sees it: families the kernel would load as a
 * module on demand (net-pf-N) are never loaded for a sandbox either.
 *
 * Within AF_NETLINK only the protocols listed are allowed; the others fail
 * with EPROTONOSUPPORT, what netlink_create() answers for a protocol the
 * kernel does not have (libaudit, for one, then carries on without audit):
 * - NETLINK_ROUTE: addresses, links, routes of the sandbox's own network
 *   namespace (`ip addr`, `ip route`, glibc's getaddrinfo(AI_ADDRCONFIG)
 *   and if_nameindex()); changes need CAP_NET_ADMIN, which no command has.
 * - NETLINK_SOCK_DIAG (inet_diag, unix_diag): `ss`, reading the sandbox's
 *   own sockets; destroying one needs CAP_NET_ADMIN.
 *
 * Knowingly excluded (this list is what "every other" means in practice):
 * - AF_VSOCK: the VM-wide vsock port space is not namespaced, and on a VM a
 *   vsock reaches the hypervisor (CID 2) past every network policy; Docker's
 *   profile blocks it too since moby#44562.
 * - AF_PACKET (and AF_INET with SOCK_PACKET, which the kernel turns into an
 *   AF_PACKET socket): raw frames below the policy; needs CAP_NET_RAW,
 *   which root inside has, and no sandbox tool needs it (ping uses AF_INET).
 * - AF_ALG (kernel crypto API), AF_KEY (IPsec keys), AF_XDP, AF_BLUETOOTH,
 *   AF_RDS, AF_TIPC, AF_CAN, AF_LLC, AF_X25, AF_AX25, AF_NETROM, AF_ROSE,
 *   AF_APPLETALK, AF_IPX, AF_ATMPVC/SVC, AF_DECnet, AF_IRDA, AF_PPPOX,
 *   AF_WANPIPE, AF_ISDN, AF_PHONET, AF_IEEE802154, AF_CAIF, AF_NFC,
 *   AF_KCM, AF_QIPCRTR, AF_SMC, AF_MCTP, AF_IB, AF_MPLS, AF_IUCV, AF_RXRPC,
 *   AF_BRIDGE, AF_ECONET, AF_SNA, AF_ASH, AF_SECURITY: hardware or
 *   legacy protocols a sandbox has no use for, many of them loadable on
 *   demand and the home of past privilege escalations (CVE-2017-7308
 *   AF_PACKET, CVE-2019-8912 AF_ALG, CVE-2010-3904 AF_RDS, CVE-2021-43267
 *   TIPC, CVE-2021-26708 AF_VSOCK), and any family a newer kernel adds.
 * - Netlink protocols other than the two above: NETLINK_GENERIC (a
 *   multiplexer over dozens of kernel subsystems: nl80211, devlink,
 *   ethtool, wireguard, mptcp, taskstats, nbd, ...), NETLINK_NETFILTER
 *   (nftables, conntrack), NETLINK_XFRM, NETLINK_AUDIT, NETLINK_KOBJECT_UEVENT
 *   (host device events), NETLINK_CRYPTO, NETLINK_CONNECTOR, NETLINK_RDMA,
 *   NETLINK_SCSITRANSPORT, NETLINK_ISCSI, NETLINK_SELINUX, NETLINK_USERSOCK,
 *   NETLINK_FIB_LOOKUP, NETLINK_SMC, NETLINK_ECRYPTFS: the read-only `ip`
 *   and `ss` views do not use them, and tools that do (`ip mptcp`, `ip
 *   tcp_metrics`, ethtool's netlink mode) report the subsystem as missing.
 *
 * Left as the kernel has it: the protocol argument of AF_INET and AF_INET6
 * (TCP, UDP, ICMP ping sockets, and raw sockets for root inside, which
 * CAP_NET_RAW gates). */
static const int netlink_protocols[] = { NETLINK_ROUTE, NETLINK_SOCK_DIAG };

static const core_seccomp_family socket_families[] = {
        { AF_UNIX, "AF_UNIX", NULL, 0 },
        { AF_INET, "AF_INET", NULL, 0 },
        { AF_INET6, "AF_INET6", NULL, 0 },
        { AF_NETLINK, "AF_NETLINK", netlink_protocols, ELEMENTSOF(netlink_protocols) },
};

const core_seccomp_family *core_seccomp_families(size_t *ret_n) {
        *ret_n = ELEMENTSOF(socket_families);
        return socket_families;
}

const core_seccomp_rule *core_seccomp_rules(size_t *ret_n) {
        *ret_n = ELEMENTSOF(deny_rules);
        return deny_rules;
}

/* Adds the libseccomp rules of one table row. Argument comparisons are on
 * the low 32 bits (SCMP_CMP_MASKED_EQ with a 32-bit mask) because the
 * kernel reads these arguments as int: garbage in the upper half of the
 * register must not slip past the filter. */
static int add_rule(scmp_filter_ctx ctx, int nr, const core_seccomp_rule *r) {
        uint32_t act = SCMP_ACT_ERRNO((uint32_t)r->err);
        int k;
        switch (r->match) {
        case CORE_SC_ALL:
                return seccomp_rule_add_exact(ctx, act, nr, 0);
        case CORE_SC_EQ32:
                return seccomp_rule_add_exact(ctx, act, nr, 1,
                                              SCMP_CMP64(r->arg, SCMP_CMP_MASKED_EQ, 0xffffffffu, r->bits));
        case CORE_SC_ANY_BIT:
                /* One rule per bit: libseccomp ORs rules, and "any bit set"
                 * is an OR of "this bit set". */
                for (k = 0; k < 32; k++) {
                        uint64_t bit = 1ull << k;
                        if (!(r->bits & bit))
                                continue;
                        int e = seccomp_rule_add_exact(ctx, act, nr, 1,
                                                       SCMP_CMP64(r->arg, SCMP_CMP_MASKED_EQ, bit, bit));
                        if (e < 0)
                                return e;
                }
                return 0;
        case CORE_SC_NOT_QUERY:
                /* Not a libseccomp rule: a prefix before its program
                 * (add_query_prefix below). */
                return -EINVAL;
        }
        return -EINVAL;
}

/* 1 when v is one of the n values. */
static bool in_list(uint32_t v, const int *list, size_t n) {
        for (size_t i = 0; i < n; i++)
                if ((uint32_t) list[i] == v)
                        return true;
        return false;
}

/* Refuses with err every value of argument `arg` of syscall nr that is not
 * in `allowed`, with `pre` (if any) as a further condition of each rule.
 * libseccomp takes one comparison per argument and rule, so "not in the
 * list" is one rule per refused value below the largest allowed one
 * (low 32 bits, as the kernel reads an int) and one rule "the whole
 * 64-bit register is above it", which also catches negative values and
 * any value with garbage in the upper half: fail closed. */
static int refuse_outside(scmp_filter_ctx ctx, int nr, uint32_t err, const struct scmp_arg_cmp *pre,
                          unsigned arg, const int *allowed, size_t n) {
        uint32_t act = SCMP_ACT_ERRNO(err), max = 0;
        int r;
        for (size_t i = 0; i < n; i++)
                if ((uint32_t) allowed[i] > max)
                        max = (uint32_t) allowed[i];
        for (uint32_t v = 0; v <= max; v++) {
                if (in_list(v, allowed, n))
                        continue;
                struct scmp_arg_cmp eq = SCMP_CMP64(arg, SCMP_CMP_MASKED_EQ, 0xffffffffu, v);
                r = pre ? seccomp_rule_add_exact(ctx, act, nr, 2, *pre, eq)
                        : seccomp_rule_add_exact(ctx, act, nr, 1, eq);
                if (r < 0)
                        return r;
        }
        struct scmp_arg_cmp gt = SCMP_CMP64(arg, SCMP_CMP_GT, (uint64_t) max);
        return pre ? seccomp_rule_add_exact(ctx, act, nr, 2, *pre, gt)
                   : seccomp_rule_add_exact(ctx, act, nr, 1, gt);
}

/* The socket_families table for socket(2) and socketpair(2), whose
 * arguments are (family, type, protocol): families outside the table get
 * EAFNOSUPPORT; a row with a protocol list refuses other protocols of its
 * family with EPROTONOSUPPORT; AF_INET with SOCK_PACKET (type & 0xf, the
 * kernel's SOCK_TYPE_MASK) is an AF_PACKET socket and gets EAFNOSUPPORT. */
static int add_socket_rules(scmp_filter_ctx ctx, sb_error **ret_err) {
        static const char *const calls[] = { "socket", "socketpair" };
        int families[ELEMENTSOF(socket_families)];
        for (size_t i = 0; i < ELEMENTSOF(socket_families); i++)
                families[i] = socket_families[i].family;
        for (size_t c = 0; c < ELEMENTSOF(calls); c++) {
                int nr = seccomp_syscall_resolve_name(calls[c]), r;
                if (nr == __NR_SCMP_ERROR || nr < 0)
                        return sb_error_set(ret_err, -ENOSYS, NULL, NULL, "seccomp: no %s syscall here",
                                            calls[c]);
                r = refuse_outside(ctx, nr, EAFNOSUPPORT, NULL, 0, families, ELEMENTSOF(families));
                for (size_t i = 0; r >= 0 && i < ELEMENTSOF(socket_families); i++) {
                        const core_seccomp_family *f = &socket_families[i];
                        struct scmp_arg_cmp fam =
                                SCMP_CMP64(0, SCMP_CMP_MASKED_EQ, 0xffffffffu, (uint64_t) f->family);
                        if (f->protocols)
                                r = refuse_outside(ctx, nr, EPROTONOSUPPORT, &fam, 2, f->protocols,
                                                   f->n_protocols);
                }
                if (r >= 0)
                        r = seccomp_rule_add_exact(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), nr, 2,
                                                   SCMP_CMP64(0, SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_INET),
                                                   SCMP_CMP64(1, SCMP_CMP_MASKED_EQ, 0xfu, SOCK_PACKET));
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "seccomp: socket family rules for %s: %s",
                                            calls[c], strerror(-r));
        }
        return 0;
}

/* The low 32 bits of syscall argument `arg` in struct seccomp_data, where
 * BPF_LD|BPF_W|BPF_ABS reads them: the kernel reads these arguments as
 * int, and so does this filter. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG_LO(arg) ((uint32_t)(offsetof(struct seccomp_data, args) + 8u * (arg)))
#else
#define ARG_LO(arg) ((uint32_t)(offsetof(struct seccomp_data, args) + 8u * (arg) + 4u))
#endif

/* The CORE_SC_NOT_QUERY rows as hand-written BPF in front of libseccomp's
 * program, which then follows unchanged. libseccomp takes one comparison
 * per argument and rule, so "neither 0 nor 0xffffffff" was 62 rules
 * ("bit 0 differs from bit k", k = 1..31): most of the filter's 382
 * instructions. Here it is nine, and the kernel compiles the filter (BPF
 * conversion and JIT, kernel/seccomp.c seccomp_prepare_filter) in every
 * command's child, a cost per instruction that each command.run pays.
 *
 * One block per row, each on its own: the native arch and the row's
 * syscall nr, else on to the next block (after the last one, libseccomp's
 * first instruction, whose own arch check sends any other ABI to the kill
 * action; an x32 number carries bit 0x40000000 and never equals the native
 * nr); then the low 32 bits of the argument: 0 or 0xffffffff are allowed,
 * anything else gets the row's errno. Allowed here means allowed by the
 * whole filter, so core_seccomp_new() refuses a table where another row
 * names the same syscall. Classic BPF only jumps forward
 * (seccomp_check_filter), which is all this needs. */
#define QUERY_BLOCK 9u
static void query_block(struct sock_filter *q, int nr, const core_seccomp_rule *r) {
        const uint32_t arch = offsetof(struct seccomp_data, arch), nr_off = offsetof(struct seccomp_data, nr);
        q[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arch);
        q[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)seccomp_arch_native(), 0, 7);
        q[2] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, nr_off);
        q[3] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 5);
        q[4] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(r->arg));
        q[5] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 2, 0);
        q[6] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffffu, 1, 0);
        q[7] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
                                            SECCOMP_RET_ERRNO | ((uint32_t)r->err & SECCOMP_RET_DATA));
        q[8] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
}

/* The block for syscalls newer than the table, put in front of the whole
 * program: for the native arch and a native number (not x32: bit
 * 0x40000000 or above goes on to libseccomp's program, which kills), each
 * number of denied_new gets EPERM and any other number above
 * NR_REVIEWED_MAX gets ENOSYS; everything else goes on to the next block.
 * Unsigned comparisons, as the kernel's nr is read as u32. */
#define NEW_BLOCK (7u + ELEMENTSOF(denied_new))
static void new_block(struct sock_filter *q) {
        const uint32_t arch = offsetof(struct seccomp_data, arch), nr_off = offsetof(struct seccomp_data, nr);
        const uint32_t n = ELEMENTSOF(denied_new), end = NEW_BLOCK, ret_eperm = 6u + n;
        q[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arch);
        q[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)seccomp_arch_native(), 0,
                                            (uint8_t)(end - 2));
        q[2] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, nr_off);
        q[3] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, (uint8_t)(end - 4), 0);
        for (uint32_t k = 0; k < n; k++)
                q[4 + k] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, denied_new[k].nr,
                                                        (uint8_t)(ret_eperm - (4 + k) - 1), 0);
        q[4 + n] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, NR_REVIEWED_MAX, 0, 2);
        q[5 + n] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA));
        q[6 + n] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA));
}

/* Puts new_block in front of f's program. */
static int add_new_prefix(core_seccomp *f) {
        size_t len = NEW_BLOCK + f->len;
        if (len > BPF_MAXINSNS)
                return -E2BIG;
        struct sock_filter *p = malloc(len * sizeof(*p));
        if (!p)
                return -ENOMEM;
        new_block(p);
        memcpy(p + NEW_BLOCK, f->insns, f->len * sizeof(*p));
        free(f->insns);
        f->insns = p;
        f->len = len;
        return 0;
}

/* Puts one query_block per row of `rows` (with its syscall number in
 * `nrs`) in front of f's program. */
static int add_query_prefix(core_seccomp *f, const int *nrs, const core_seccomp_rule *const *rows, size_t n) {
        if (n == 0)
                return 0;
        size_t len = QUERY_BLOCK * n + f->len;
        if (len > BPF_MAXINSNS)
                return -E2BIG;
        struct sock_filter *p = malloc(len * sizeof(*p));
        if (!p)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                query_block(p + QUERY_BLOCK * i, nrs[i], rows[i]);
        memcpy(p + QUERY_BLOCK * n, f->insns, f->len * sizeof(*p));
        free(f->insns);
        f->insns = p;
        f->len = len;
        return 0;
}

/* libseccomp's BPF, copied out through a memfd (2.5 has no in-memory export). */
static int export_bpf(scmp_filter_ctx ctx, core_seccomp *f) {
        _cleanup_close_ int fd = memfd_create("seccomp-bpf", MFD_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        int r = seccomp_export_bpf(ctx, fd);
        if (r < 0)
                return r;
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (st.st_size <= 0 || st.st_size % (off_t)sizeof(struct sock_filter) != 0 ||
            st.st_size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
                return -E2BIG;
        f->insns = malloc((size_t)st.st_size);
        if (!f->insns)
                return -ENOMEM;
        ssize_t n = pread(fd, f->insns, (size_t)st.st_size, 0);
        if (n != st.st_size)
                return n < 0 ? negative_errno() : -EIO;
        f->len = (size_t)st.st_size / sizeof(struct sock_filter);
        return 0;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(void, seccomp_release);

static bool outer_mode;

void core_seccomp_set_outer(bool outer) {
        outer_mode = outer;
}

bool core_seccomp_outer(void) {
        return outer_mode;
}

/* The inner filter of outer mode: setns(2) gets EPERM, everything else
 * passes to the outer filter (seccomp(2): every installed filter runs and
 * the most restrictive verdict wins, so the pair refuses what the whole
 * default filter refuses). Another ABI passes here: the outer filter kills
 * it. */
#if defined(__x86_64__)
static const struct sock_filter no_setns_insns[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setns, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
};
#endif

static int install_no_setns(void) {
#if !defined(__x86_64__)
        return -ENOSYS;
#else
        struct sock_filter q[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setns, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = { .len = (unsigned short)ELEMENTSOF(q), .filter = q };
        return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? negative_errno() : 0;
#endif
}

int core_seccomp_new(core_seccomp **ret, sb_error **ret_err) {
        /* A filter for the native architecture only: libseccomp then sends
         * every other audit arch (i386 through int 0x80 or sysenter) and, on
         * x86_64, every x32 syscall number (bit 0x40000000, which shares
         * the x86_64 audit arch) to the bad-arch action. KILL_PROCESS: no
         * program a sandbox runs legitimately uses another ABI, and a
         * process that tries is an exploit or a binary that cannot work. */
#if !defined(__x86_64__)
        /* NR_REVIEWED_MAX and denied_new are x86_64 numbers. */
        return sb_error_set(ret_err, -ENOSYS, NULL, NULL,
                            "seccomp: the filter's syscall table is for x86_64 only");
#endif
        _cleanup_(seccomp_releasep) void *ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "seccomp_init: out of memory");
        int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "seccomp: bad-arch action: %s", strerror(-r));
        /* A binary tree over the syscall numbers instead of a linear list,
         * same verdicts: the kernel evaluates the filter for every syscall
         * number when it is installed (to cache the always-allowed ones)
         * and then on each syscall of the command, and the tree costs
         * log n comparisons where the list cost n. Only a speed-up: an
         * older libseccomp without it keeps the list. */
        if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) < 0)
                log_debug("seccomp: binary tree filter not supported, using a list");
        const core_seccomp_rule *query_rows[ELEMENTSOF(deny_rules)];
        int query_nrs[ELEMENTSOF(deny_rules)];
        size_t n_query = 0;
        for (size_t i = 0; i < ELEMENTSOF(deny_rules); i++) {
                /* Outer mode: setns is refused by the inner filter each
                 * child adds (core_seccomp_install), after it joined its
                 * container's mount namespace. */
                if (outer_mode && strcmp(deny_rules[i].name, "setns") == 0)
                        continue;
                int nr = seccomp_syscall_resolve_name(deny_rules[i].name);
                if (nr == __NR_SCMP_ERROR || nr < 0)
                        /* Fail closed: a row this libseccomp cannot place
                         * would leave the syscall allowed. */
                        return sb_error_set(ret_err, -ENOSYS, NULL, NULL,
                                            "seccomp: libseccomp does not know the syscall %s of the deny "
                                            "table on this architecture",
                                            deny_rules[i].name);
                if (deny_rules[i].match == CORE_SC_NOT_QUERY) {
                        /* Its block allows what it does not refuse, so no
                         * other row may name the syscall (fail closed). */
                        for (size_t j = 0; j < ELEMENTSOF(deny_rules); j++)
                                if (j != i && strcmp(deny_rules[j].name, deny_rules[i].name) == 0)
                                        return sb_error_set(ret_err, -EINVAL, NULL, NULL,
                                                            "seccomp: %s has a query rule and another rule",
                                                            deny_rules[i].name);
                        query_rows[n_query] = &deny_rules[i];
                        query_nrs[n_query++] = nr;
                        continue;
                }
                r = add_rule(ctx, nr, &deny_rules[i]);
                if (r < 0)
                        return sb_error_set(ret_err, r, NULL, NULL, "seccomp: rule for %s: %s",
                                            deny_rules[i].name, strerror(-r));
        }
        if ((r = add_socket_rules(ctx, ret_err)) < 0)
                return r;
        _cleanup_(core_seccomp_freep) core_seccomp *f = calloc(1, sizeof(*f));
        if (!f)
                return sb_error_set(ret_err, -ENOMEM, NULL, NULL, "seccomp: out of memory");
        r = export_bpf(ctx, f);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "seccomp: export BPF: %s", strerror(-r));
        r = add_query_prefix(f, query_nrs, query_rows, n_query);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "seccomp: query rules: %s", strerror(-r));
        r = add_new_prefix(f);
        if (r < 0)
                return sb_error_set(ret_err, r, NULL, NULL, "seccomp: rules for newer syscalls: %s",
                                    strerror(-r));
        log_debug("seccomp: filter of %zu instructions", f->len);
        *ret = TAKE_PTR(f);
        return 0;
}

void core_seccomp_free(core_seccomp *f) {
        if (!f)
                return;
        free(f->insns);
        free(f);
}

static core_seccomp *cached;

int core_seccomp_from_bpf(const void *insns, size_t size, core_seccomp **ret) {
        if (size == 0 || size % sizeof(struct sock_filter) != 0 ||
            size / sizeof(struct sock_filter) > BPF_MAXINSNS)
                return -EINVAL;
        _cleanup_(core_seccomp_freep) core_seccomp *f = calloc(1, sizeof(*f));
        if (!f || !(f->insns = malloc(size)))
                return -ENOMEM;
        memcpy(f->insns, insns, size);
        f->len = size / sizeof(struct sock_filter);
        *ret = TAKE_PTR(f);
        return 0;
}

const void *core_seccomp_bpf(const core_seccomp *f, size_t *ret_size) {
        *ret_size = f->len * sizeof(struct sock_filter);
        return f->insns;
}

int core_seccomp_set_default(core_seccomp *f) {
        if (cached) {
                core_seccomp_free(f);
                return -EEXIST;
        }
        cached = f;
        return 0;
}

int core_seccomp_default(const core_seccomp **ret, sb_error **ret_err) {
        if (!cached) {
                int r = core_seccomp_new(&cached, ret_err);
                if (r < 0)
                        return r;
        }
        *ret = cached;
        return 0;
}

/* The filter core_seccomp_install_self() put on this process (and so on
 * every child it forks or clones later, which inherit this variable with
 * the filter), or NULL. */
static const core_seccomp *self_installed;

int core_seccomp_install(const core_seccomp *f) {
        if (outer_mode) {
                int r = install_no_setns();
                if (r < 0)
                        return r;
        }
        if (f && f == self_installed)
                return 0;
        struct sock_fprog prog = { .len = (unsigned short)f->len, .filter = f->insns };
        return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? negative_errno() : 0;
}

int core_seccomp_programs(const core_seccomp *f, struct sock_fprog progs[2]) {
        int n = 0;
        if (outer_mode) {
#if !defined(__x86_64__)
                return -ENOSYS;
#else
                progs[n++] = (struct sock_fprog){ .len = (unsigned short)ELEMENTSOF(no_setns_insns),
                                                  .filter = (struct sock_filter *)no_setns_insns };
#endif
        }
        if (f && f != self_installed)
                progs[n++] = (struct sock_fprog){ .len = (unsigned short)f->len, .filter = f->insns };
        return n;
}

int core_seccomp_install_self(const core_seccomp *f) {
        if (!f)
                return -EINVAL;
        if (self_installed)
                return self_installed == f ? 0 : -EEXIST;
        struct sock_fprog prog = { .len = (unsigned short)f->len, .filter = f->insns };
        /* TSYNC: all threads or none; a positive answer is the id of a
         * thread that could not be synchronised (seccomp(2)). */
        long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
        if (r != 0)
                return r < 0 ? negative_errno() : -EBUSY;
        self_installed = f;
        return 0;
}

size_t core_seccomp_size(const core_seccomp *f) {
        return f ? f->len : 0;
}

/* Appends one instruction to q (room checked by the caller). */
#define IDS_EMIT(code, k_, jt_, jf_) (q[n++] = (struct sock_filter){(code), (jt_), (jf_), (k_)})

int core_seccomp_install_ids(uid_t uid, gid_t gid) {
#if !defined(__x86_64__)
        return -ENOSYS;
#else
        static const struct { int nr; unsigned nargs; bool gid; } calls[] = {
                {__NR_setuid, 1, false},   {__NR_setreuid, 2, false}, {__NR_setresuid, 3, false},
                {__NR_setfsuid, 1, false}, {__NR_setgid, 1, true},    {__NR_setregid, 2, true},
                {__NR_setresgid, 3, true}, {__NR_setfsgid, 1, true},
        };
        const uint32_t allow = SECCOMP_RET_ALLOW, eperm = SECCOMP_RET_ERRNO | EPERM;
        struct sock_filter q[160];
        unsigned short n = 0;
        /* Another ABI passes: the main filter kills it. */
        IDS_EMIT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch), 0, 0);
        IDS_EMIT(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
        IDS_EMIT(BPF_RET | BPF_K, allow, 0, 0);
        for (size_t i = 0; i < ELEMENTSOF(calls); i++) {
                uint32_t id = calls[i].gid ? (uint32_t)gid : (uint32_t)uid;
                /* Per argument: its low 32 bits (the kernel's uid_t) must
                 * be 0, id or -1, else EPERM; all pass: allowed. */
                IDS_EMIT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr), 0, 0);
                IDS_EMIT(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)calls[i].nr, 0, (uint8_t)(5 * calls[i].nargs + 1));
                for (unsigned a = 0; a < calls[i].nargs; a++) {
                        IDS_EMIT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args) + 8 * a, 0, 0);
                        IDS_EMIT(BPF_JMP | BPF_JEQ | BPF_K, 0, 3, 0);
                        IDS_EMIT(BPF_JMP | BPF_JEQ | BPF_K, id, 2, 0);
                        IDS_EMIT(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffffu, 1, 0);
                        IDS_EMIT(BPF_RET | BPF_K, eperm, 0, 0);
                }
                IDS_EMIT(BPF_RET | BPF_K, allow, 0, 0);
        }
        /* setgroups(size, list): size 0 only (the int the kernel reads). */
        IDS_EMIT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr), 0, 0);
        IDS_EMIT(BPF_JMP | BPF_JEQ | BPF_K, __NR_setgroups, 0, 4);
        IDS_EMIT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args), 0, 0);
        IDS_EMIT(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 1);
        IDS_EMIT(BPF_RET | BPF_K, allow, 0, 0);
        IDS_EMIT(BPF_RET | BPF_K, eperm, 0, 0);
        IDS_EMIT(BPF_RET | BPF_K, allow, 0, 0);
        struct sock_fprog prog = {.len = n, .filter = q};
        long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
        if (r != 0)
                return r < 0 ? negative_errno() : -EBUSY;
        return 0;
#endif
}
