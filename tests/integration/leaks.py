"""The leak checker: after `sandbox.delete`, nothing of the sandbox may be
left anywhere (DESIGN §3 "delete ... removes every trace").

    problems = leaks.find(world, "my-sandbox")   # [] when clean
    leaks.check(world, "all")                    # raises AssertionError

Looked at:
  - mounts: any mount in the host's, the daemon's, or any process's mount
    table whose mount point or options name the sandbox's paths in the state
    or run dir (for "all": anything below them at all)
  - links named sbx* in the world host namespace ("all" only: link names are
    not tied to sandbox names)
  - cgroup directories named after the sandbox below a sandboxd-sessions*
    (sandboxd-sessions-<instance>) or sessions directory, in every cgroup
    hierarchy
  - nftables: chains or sets in `inet sandboxd` of the world host namespace
    whose name carries the sandbox name (for "all": any chain that is not a
    base chain, any set)
  - processes: a sandbox-init (exe a memfd or a path named sandbox-init)
    whose ancestry reaches the daemon or whose mount table names the state or
    run dir; any process whose mount table names the sandbox's dirs
  - the sandboxes/<name> directory of the state dir
"""
import json
import os
import re
import subprocess

import world as W


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return None


def _pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _ppid(pid):
    s = _read("/proc/%d/stat" % pid)
    if not s:
        return None
    try:
        return int(s[s.rindex(")") + 2:].split()[1])
    except (ValueError, IndexError):
        return None


def _descends_from(pid, ancestor):
    seen = 0
    while pid and pid > 1 and seen < 64:
        if pid == ancestor:
            return True
        pid = _ppid(pid)
        seen += 1
    return False


def _exe(pid):
    try:
        return os.readlink("/proc/%d/exe" % pid)
    except OSError:
        return ""


def _needles(d, name):
    """A regex matching a mountinfo line that names the sandbox's paths (for
    "all": any path below the daemon's state or run dir)."""
    dirs = "|".join(re.escape(x) for x in (d.state_dir, d.run_dir))
    if name == "all":
        return re.compile("(?:%s)/" % dirs)
    return re.compile(r"(?:%s)/(?:[^ ,]*/)?%s(?:[/ ,]|$)" % (dirs, re.escape(name)))


def _mount_hits(pid, needles):
    text = _read("/proc/%s/mountinfo" % pid)
    if not text:
        return []
    return [line for line in text.splitlines() if needles.search(line.replace("\\040", " "))]


def _mounts(world, d, name):
    needles = _needles(d, name)
    problems = []
    tables = ["self"]
    if d.alive():
        tables.append(str(d.pid))
    # The storage pool (daemon.json storage.pool) is the daemon's own
    # mount for as long as it runs, in its namespace: not a sandbox's.
    pool = os.path.join(d.state_dir, "pool")
    for t in tables:
        hits = [line for line in _mount_hits(t, needles)
                if not (t != "self" and line.split()[4:5] == [pool])]
        for line in hits[:3]:
            problems.append("mount left (%s): %s" % ("host" if t == "self" else "sandboxd", line))
    return problems


def _links(world):
    p = world.run_in_host(["ip", "-o", "link", "show"])
    names = re.findall(r"^\d+: ([^:@]+)", p.stdout, re.M)
    return ["link left in world host: %s" % n for n in names if n.startswith("sbx")]


def _cgroups(world, name):
    """Session cgroups left below this world's own cgroups (another sandboxd
    on the machine, with its own sessions, is none of this world's business)."""
    problems = []
    for mnt in (getattr(world, "cgroup_dirs", None) or W.cgroup_mounts()):
        for root, dirs, _files in W.walk(mnt):
            base = os.path.basename(root)
            if base.startswith("sandboxd-sessions") or base == "sessions":
                for x in dirs:
                    if name == "all" or x == name:
                        problems.append("cgroup left: %s" % os.path.join(root, x))
                dirs[:] = []
            elif root.count("/") - mnt.count("/") > 6:
                dirs[:] = []
    return problems


KEYED_SETS = ("pins4", "pins6", "gens", "genmark", "genmark_b", "slot_b", "gw4", "gw6", "dnsfwd")
RANGE_SETS = tuple(b + s for b in ("allow4", "deny4", "opened4", "allow6", "deny6", "opened6") for s in ("", "_b"))
# The host's regular chains whose names carry a digit (libcore/nft.c
# host_chains): made with the table, never a session's.
HOST_CHAINS = ("from_sbx6",)


def _range_key_ifnames(set_name, elems):
    """The interfaces named by the keys of a keyed range set
    (policy/nftgen.h): nft prints each key as a big-endian integer, the
    interface name's 16 bytes, then the address (4 or 16 bytes)."""
    klen = 16 + (16 if "6" in set_name else 4)
    for num in re.findall(r"\d{30,}", elems):
        key = int(num).to_bytes(klen, "big")
        yield key[:16].rstrip(b"\0\1").decode("ascii", "replace")


def _nft(world, name):
    p = world.run_in_host(["nft", "-j", "list", "table", "inet", "sandboxd"])
    if p.returncode != 0:
        return []  # no table: nothing left
    try:
        items = json.loads(p.stdout).get("nftables", [])
    except ValueError:
        return ["nft -j output unreadable: %s" % p.stdout[:200]]
    problems = []
    for it in items:
        for kind in ("chain", "set", "map"):
            obj = it.get(kind)
            if not obj:
                continue
            n = obj.get("name", "")
            if name != "all":
                bad = name in n
            else:
                # Host-wide objects have fixed names; per-session ones carry a
                # slot or id, so any name with a digit outside a base chain
                # is a session's.
                # The shared sets keyed by a session's interface (pins4,
                # pins6, gens, genmark, genmark_b, slot_b: libcore/net.h;
                # gw4, gw6, dnsfwd and the keyed range sets:
                # policy/nftgen.h) are the host's; an element of one that
                # names a session is left.
                shared = n in KEYED_SETS or n in RANGE_SETS or n in ("forbid4", "forbid6") or \
                    (kind == "chain" and n in HOST_CHAINS)
                bad = not shared and not (kind == "chain" and "hook" in obj) and bool(re.search(r"\d", n))
                elems = json.dumps(obj.get("elem", []))
                if n in KEYED_SETS and '"sbx' in elems:
                    problems.append("nft %s %s: elements left: %s" % (kind, n, elems[:200]))
                if n in RANGE_SETS:
                    left = sorted(set(_range_key_ifnames(n, elems)))
                    if left:
                        problems.append("nft set %s: ranges left of %s" % (n, ", ".join(left)))
            if bad:
                problems.append("nft %s left: %s" % (kind, n))
    return problems


def _processes(d, name):
    problems = []
    needles = _needles(d, name)
    all_needles = _needles(d, "all")
    skip = {os.getpid()}
    if d.alive():
        skip.add(d.pid)
    for pid in _pids():
        if pid in skip:
            continue
        exe = _exe(pid)
        is_init = "sandbox-init" in exe
        if name == "all":
            if is_init and ((d.alive() and _descends_from(pid, d.pid))
                            or _mount_hits(pid, all_needles)):
                problems.append("sandbox-init left: pid %d (%s)" % (pid, exe))
            continue
        hits = _mount_hits(pid, needles)
        if hits:
            problems.append("process left: pid %d (%s) sees %s" % (pid, exe or "?", hits[0][:160]))
    return problems


def _state(d, name):
    base = os.path.join(d.state_dir, "sandboxes")
    if not os.path.isdir(base):
        return []
    names = os.listdir(base) if name == "all" else ([name] if os.path.exists(os.path.join(base, name)) else [])
    return ["state dir left: %s" % os.path.join(base, n) for n in names]


def find(world, name, daemon=None):
    """Every trace left of sandbox `name` ("all": of every sandbox) of the
    world's daemon (or `daemon`). Returns a list of strings, empty when clean."""
    d = daemon or world.daemon
    problems = []
    problems += _mounts(world, d, name)
    if name == "all":
        problems += _links(world)
    problems += _cgroups(world, name)
    problems += _nft(world, name)
    problems += _processes(d, name)
    problems += _state(d, name)
    return problems


def check(world, name, daemon=None, secs=10.0):
    """Asserts nothing is left of `name`. Cleanup that the daemon finishes
    asynchronously after answering delete gets `secs` to complete (polled)."""
    import time
    deadline = time.monotonic() + secs
    while True:
        problems = find(world, name, daemon)
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if problems:
        raise AssertionError("leaks after delete of %s: %s" % (name, "; ".join(problems[:8])))
