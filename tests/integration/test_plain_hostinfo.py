"""Without a user namespace root inside is host root, so the
host's root-only (0400) kernel information files are readable unless
masked. docs/SECURITY.md §3.2 masks the physical page tables
(/proc/kpage*, page_idle) but not their kin: /proc/slabinfo (slab cache
counts, the heap-grooming oracle of kernel exploits), /proc/vmallocinfo
(vmalloc areas and their callers) and /proc/pagetypeinfo. With a user
namespace root inside is an unprivileged id and they are refused (EACCES).
Also /sys/kernel/vmcoreinfo (0444 on the host, so readable in both
modes): the physical address of the kernel's vmcoreinfo note, a physical
KASLR leak. Expected: none of them readable in a plain sandbox."""
from common import expect, sandbox

_CHK = r"""
import os
for p in ("/proc/slabinfo", "/proc/vmallocinfo", "/proc/pagetypeinfo", "/sys/kernel/vmcoreinfo"):
    try:
        if os.path.isdir(p):
            print("%s:%s" % (p, "data" if os.listdir(p) else "empty"))
        else:
            with open(p, "rb") as f:
                print("%s:%s" % (p, "data" if f.read(4096) else "empty"))
    except OSError as e:
        print("%s:%d" % (p, e.errno))
"""


def test_plain_root_reads_no_root_only_host_kernel_info(world):
    with sandbox(world, "plaininfo", "--no-userns", "--deny-all") as name:
        code, out, err = world.ctl("exec", "--sudo", name, "--", "python3", "-c", _CHK)
    expect(code == 0, "the probe ran:", err)
    got = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    readable = [p for p, v in got.items() if v == "data"]
    expect(not readable, "host-wide root-only kernel information readable by root inside a plain sandbox:",
           readable)
