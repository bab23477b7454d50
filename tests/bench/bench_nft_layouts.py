#!/usr/bin/env python3
"""Issue #23 item 1: what one session's policy update costs the kernel with
N sessions loaded, for today's nftables layout and the candidate layouts,
measured side by side in one run. Not part of `make bench` or `make check`.

Runs in a private network namespace of its own (`ip netns add`, removed at
the end, even on failure): nothing touches the machine's tables, and no
packet is sent. Each layout is loaded with N sessions shaped like
policy/nftgen.c's custom sessions (interval sets allow4/deny4/forbid4, the
timeout set dns4, a forward chain of 8 rules, a reply chain and an input
chain), then one session's update is sent as one `nft -f` batch, and the
time of the batch's sendmsg() is taken with `strace -T` (the kernel's
validation and commit; nft's own parsing and cache dump are left out, as
the daemon sends its batch with libnftnl). Layouts:

  today     one table `inet t`; base chains forward/input dispatch through
            the verdict maps `sessions`/`sessions_input` keyed by iifname;
            the update replaces the session's chains' rules and its sets'
            elements.
  elements  the same table and chains, built once per mode; the update
            only flushes and refills the session's sets (element-only
            batch; no rule, no verdict-map element). Measured at the
            oldest and at the newest session (a set is found by name with
            a walk of the table's list of sets).
  built     what policy/nftgen.c built before it took layout `keyed`
            (layout "elements" made
            element-only in full): the session's chains are never
            rewritten; its address-range sets come in two slots, each
            slot's rules in a chain of its own (`iifname @slot_b goto
            s_<if>_b`); its generation is an element of the shared
            `gens` and `genmark`/`genmark_b`, its pins of the shared
            `pins4`, all made before any session's. An update is two
            batches: flush and fill the unused slot, then move slot_b,
            gens and the slot's genmark and empty the slot left behind
            (the time is the two together). Also a pin into pins4.
  concat    no per-session chain or set: shared sets keyed by interface
            and address (`ifname . ipv4_addr`, intervals) matched by one
            chain for every custom session (`iifname . ip daddr @allow4`);
            the update deletes the session's old elements and adds its new
            ones (element-only, and the set walk is the same short one
            whatever N).
  keyed     (what policy/nftgen.c builds now, keyed by the interface
            name rather than an id, its forbidden ranges one shared set:
            docs/POLICY.md) no per-session chain or set and no
            concatenation: shared
            interval sets of one field (the kernel's rbtree, which keeps
            its tree across commits) whose key is the session's id
            followed by the address, so each session's ranges are one
            stretch of the key space; the update deletes the session's old
            elements and adds its new ones (element-only; the shared sets
            are first in the table's list, so found at once).
  tables    one table `inet s_<if>` per session with its own forward base
            chain (`iifname "<if>" jump s`); the update replaces that
            table's chain and sets. Every forwarded packet then walks N
            base chains (per-packet cost O(N)).
  pin       the DNS filter's pin (one element with a timeout into the
            session's dns4 set, as sandboxd adds before an answer is
            released), in the shared table (newest and oldest session) and
            in a session's own netdev table.
  netdev    one table `netdev s_<if>` per session with an ingress base
            chain bound to the session's host-side interface (one end of a veth
            pair here); the update replaces that table's chain and sets.
            A packet meets only its own interface's chain.

    python3 tests/bench/bench_nft_layouts.py [--sessions N] [--rounds R]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

BASE = 20000


def blk(head, stmts):
    return "%s {\n%s\n}" % (head, "\n".join(stmts))


def sets(pfx, i):
    a = "10.%d.%d.0/24" % (i // 250 % 250, i % 250)
    return [
        blk("set %sallow4" % pfx, ["type ipv4_addr", "flags interval", "elements = { 192.0.2.0/24, %s }" % a]),
        blk("set %sdeny4" % pfx, ["type ipv4_addr", "flags interval", "elements = { 198.51.100.7 }"]),
        blk("set %sforbid4" % pfx, ["type ipv4_addr", "flags interval",
                                    "elements = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16 }"]),
        blk("set %sdns4" % pfx, ["type ipv4_addr", "flags timeout"]),
    ]


def fwd_rules(pfx):
    return [
        "ct state established,related accept",
        "ip daddr @%sdeny4 goto deny" % pfx,
        "ip daddr @%sforbid4 goto deny" % pfx,
        "meta l4proto { tcp, udp } th dport { 53, 853 } goto deny",
        "ip daddr @%sallow4 accept" % pfx,
        "udp dport 443 goto deny",
        "ip daddr @%sdns4 accept" % pfx,
        "goto deny",
    ]


def reply_rules():
    return ["ct state established,related accept", "ip protocol icmp accept", "goto deny"]


def input_rules(i):
    gw = "100.64.%d.%d" % (i // 64 % 256, (i % 64) * 4 + 1)
    return ["ip daddr %s udp dport 53 accept" % gw, "ip daddr %s tcp dport { 53, 3128 } accept" % gw, "goto deny"]


def shared_load(n):
    """`today` and `elements`: one table, per-session chains and sets."""
    out = ["table inet t {",
           deny_chain()]
    for i in range(BASE, BASE + n):
        p = "s_sbx%d_" % i
        out += sets(p, i)
        out.append(blk("chain s_sbx%d" % i, fwd_rules(p)))
        out.append(blk("chain r_sbx%d" % i, reply_rules()))
        out.append(blk("chain i_sbx%d" % i, input_rules(i)))
    el = lambda c: ", ".join('"sbx%d" : jump %s_sbx%d' % (i, c, i) for i in range(BASE, BASE + n))  # noqa: E731
    out += [blk("map %s" % m, ["type ifname : verdict", "elements = { %s }" % el(c)])
            for m, c in (("sessions", "s"), ("sessions_reply", "r"), ("sessions_input", "i"))]
    out += [blk("chain forward", ["type filter hook forward priority 0; policy accept", "iifname vmap @sessions",
                                  "oifname vmap @sessions_reply", "iifname \"sbx*\" goto deny"]),
            blk("chain input", ["type filter hook input priority 0; policy accept", "iifname vmap @sessions_input",
                                "iifname \"sbx*\" goto deny"]), "}"]
    return "\n".join(out) + "\n"


def today_update(i, gen):
    p, t = "s_sbx%d_" % i, "inet t"
    a = "10.%d.%d.0/24" % (gen % 250, i % 250)
    return "\n".join(["flush chain %s s_sbx%d" % (t, i), "flush chain %s i_sbx%d" % (t, i)] +
                     ["add rule %s s_sbx%d %s" % (t, i, r) for r in fwd_rules(p)] +
                     ["add rule %s i_sbx%d %s" % (t, i, r) for r in input_rules(i)] +
                     ["flush set %s %sallow4" % (t, p), "add element %s %sallow4 { 192.0.2.0/24, %s }" % (t, p, a),
                      "flush set %s %sdeny4" % (t, p), "add element %s %sdeny4 { 198.51.100.%d }" % (t, p, gen % 250)]
                     ) + "\n"


def elements_update(i, gen):
    p, t = "s_sbx%d_" % i, "inet t"
    a = "10.%d.%d.0/24" % (gen % 250, i % 250)
    return "\n".join(["flush set %s %sallow4" % (t, p), "add element %s %sallow4 { 192.0.2.0/24, %s }" % (t, p, a),
                      "flush set %s %sdeny4" % (t, p), "add element %s %sdeny4 { 198.51.100.%d }" % (t, p, gen % 250)]
                     ) + "\n"


def pin(table, set_name, gen):
    """The DNS filter's pin: one element with a timeout (policy/nftgen.c
    pol_nft_pin), to a fresh address each round."""
    return "add element %s %s { 203.0.%d.%d timeout 30s }\n" % (table, set_name, gen // 250 % 250, gen % 250 + 1)


def built_load(n):
    """`built`: policy/nftgen.c's layout (see the module's comment)."""
    out = ["table inet t {", deny_chain(),
           blk("set pins4", ["type ifname . ipv4_addr", "flags timeout"]),
           blk("set gens", ["type ifname . mark", "elements = { %s }" % ", ".join(
               '"sbx%d" . %d' % (i, i) for i in range(BASE, BASE + n))]),
           blk("map genmark", ["type ifname : mark", "elements = { %s }" % ", ".join(
               '"sbx%d" : %d' % (i, i) for i in range(BASE, BASE + n))]),
           blk("map genmark_b", ["type ifname : mark"]),
           blk("set slot_b", ["type ifname"])]
    for i in range(BASE, BASE + n):
        p = "s_sbx%d_" % i
        for slot in ("", "_b"):
            a = "10.%d.%d.0/24" % (i // 250 % 250, i % 250)
            out += [blk("set %sallow4%s" % (p, slot), ["type ipv4_addr", "flags interval",
                                                       "elements = { 192.0.2.0/24, %s }" % a]),
                    blk("set %sdeny4%s" % (p, slot), ["type ipv4_addr", "flags interval",
                                                      "elements = { 198.51.100.7 }"]),
                    blk("set %sforbid4%s" % (p, slot), ["type ipv4_addr", "flags interval", "elements = { "
                                                        "10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16 }"])]
        def steps(slot):
            mk = "ct mark set iifname map @genmark%s" % slot
            return ["ip daddr @%sdeny4%s goto deny" % (p, slot), "ip daddr @%sforbid4%s goto deny" % (p, slot),
                    "meta l4proto { tcp, udp } th dport { 53, 853 } goto deny",
                    "ip daddr @%sallow4%s %s accept" % (p, slot, mk),
                    "udp dport 443 goto deny", "iifname . ip daddr @pins4 %s accept" % mk, "goto deny"]
        out.append(blk("chain s_sbx%d_b" % i, steps("_b")))
        out.append(blk("chain s_sbx%d" % i, ["iifname . ct mark @gens accept",
                                             "iifname @slot_b goto s_sbx%d_b" % i] + steps("")))
        out.append(blk("chain r_sbx%d" % i, reply_rules()))
        out.append(blk("chain i_sbx%d" % i, input_rules(i)))
    el = lambda c: ", ".join('"sbx%d" : jump %s_sbx%d' % (i, c, i) for i in range(BASE, BASE + n))  # noqa: E731
    out += [blk("map %s" % m, ["type ifname : verdict", "elements = { %s }" % el(c)])
            for m, c in (("sessions", "s"), ("sessions_reply", "r"), ("sessions_input", "i"))]
    out += [blk("chain forward", ["type filter hook forward priority 0; policy accept", "iifname vmap @sessions",
                                  "oifname vmap @sessions_reply", "iifname \"sbx*\" goto deny"]),
            blk("chain input", ["type filter hook input priority 0; policy accept", "iifname vmap @sessions_input",
                                "iifname \"sbx*\" goto deny"]), "}"]
    return "\n".join(out) + "\n"


def built_update(i, gen):
    """The two batches of a custom-to-custom change: the unused slot
    flushed and filled, then the session moved to it and to generation
    `mark` (old: the one before)."""
    p, t = "s_sbx%d_" % i, "inet t"
    slot = "_b" if gen % 2 == 0 else ""
    a = "10.%d.%d.0/24" % (gen % 250, i % 250)
    old, new = (i if gen == 0 else 100000 + gen - 1), 100000 + gen
    stage = "\n".join(["flush set %s %sallow4%s" % (t, p, slot),
                       "add element %s %sallow4%s { 192.0.2.0/24, %s }" % (t, p, slot, a),
                       "flush set %s %sdeny4%s" % (t, p, slot),
                       "add element %s %sdeny4%s { 198.51.100.%d }" % (t, p, slot, gen % 250),
                       "flush set %s %sforbid4%s" % (t, p, slot),
                       "add element %s %sforbid4%s { 10.0.0.0/8, 172.16.0.0/12 }" % (t, p, slot)]) + "\n"
    gm = "genmark_b" if slot else "genmark"
    move = "\n".join(['%s element %s slot_b { "sbx%d" }' % ("add" if slot else "delete", t, i),
                      'delete element %s gens { "sbx%d" . %d }' % (t, i, old),
                      'add element %s gens { "sbx%d" . %d }' % (t, i, new)] +
                     (['delete element %s %s { "sbx%d" }' % (t, gm, i)] if gen > 1 or not slot else []) +
                     ['add element %s %s { "sbx%d" : %d }' % (t, gm, i, new)]) + "\n"
    other = "" if slot else "_b"
    clear = "\n".join("flush set %s %s%s%s" % (t, p, x, other) for x in ("allow4", "deny4", "forbid4")) + "\n"
    return [stage, move + clear]


def concat_load(n):
    """`concat`: no per-session chain or set. Shared sets keyed by
    interface and address (`ifname . ipv4_addr`, intervals), one chain for
    every custom session, reached from the same verdict map."""
    out = ["table inet t {", deny_chain()]
    allow, deny, dns = [], [], []
    for i in range(BASE, BASE + n):
        allow += ['"sbx%d" . 192.0.2.0/24' % i, '"sbx%d" . 10.%d.%d.0/24' % (i, i // 250 % 250, i % 250)]
        deny.append('"sbx%d" . 198.51.100.7' % i)
    out += [blk("set allow4", ["type ifname . ipv4_addr", "flags interval", "elements = { %s }" % ", ".join(allow)]),
            blk("set deny4", ["type ifname . ipv4_addr", "flags interval", "elements = { %s }" % ", ".join(deny)]),
            blk("set forbid4", ["type ipv4_addr", "flags interval",
                                "elements = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16 }"]),
            blk("set dns4", ["type ifname . ipv4_addr", "flags timeout"]),
            blk("chain custom", ["ct state established,related accept", "iifname . ip daddr @deny4 goto deny",
                                 "ip daddr @forbid4 goto deny", "meta l4proto { tcp, udp } th dport { 53, 853 } goto deny",
                                 "iifname . ip daddr @allow4 accept", "udp dport 443 goto deny",
                                 "iifname . ip daddr @dns4 accept", "goto deny"]),
            blk("map sessions", ["type ifname : verdict", "elements = { %s }" % ", ".join(
                '"sbx%d" : jump custom' % i for i in range(BASE, BASE + n))]),
            blk("chain forward", ["type filter hook forward priority 0; policy accept", "iifname vmap @sessions",
                                  "iifname \"sbx*\" goto deny"]), "}"]
    return "\n".join(out) + "\n"


def concat_update(i, gen):
    """Replaces session i's allow and deny elements (the daemon knows the
    old ones): deletes the previous round's (the loaded ones at round 0)
    and adds this round's."""
    old_a = "10.%d.%d.0/24" % ((i // 250 % 250, i % 250) if gen == 0 else (100 + (gen - 1) % 100, i % 250))
    new_a = "10.%d.%d.0/24" % (100 + gen % 100, i % 250)
    old_d = "198.51.100.7" if gen == 0 else "198.51.101.%d" % ((gen - 1) % 250)
    return "\n".join(['delete element inet t allow4 { "sbx%d" . %s }' % (i, old_a),
                      'add element inet t allow4 { "sbx%d" . %s }' % (i, new_a),
                      'delete element inet t deny4 { "sbx%d" . %s }' % (i, old_d),
                      'add element inet t deny4 { "sbx%d" . 198.51.101.%d }' % (i, gen % 250)]) + "\n"


def keyed_key(i, v4):
    """The 16-byte key of session i's IPv4 prefix v4 ("a.b.c.d/len") in a
    `keyed` set: the session id in the first 4 bytes, 8 zero bytes, then
    the address, written as an IPv6 prefix of len + 96 bits."""
    addr, plen = (v4.split("/") + ["32"])[:2]
    a = [int(x) for x in addr.split(".")]
    return "%x:%x:0:0:0:0:%x:%x/%d" % (i >> 16, i & 0xffff, a[0] << 8 | a[1], a[2] << 8 | a[3], int(plen) + 96)


def keyed_load(n):
    """`keyed`: no per-session chain or set, and no concatenation: shared
    interval sets (one field, the kernel's rbtree) whose key is the session
    id followed by the address, so a session's ranges are one contiguous
    stretch of the key space; one chain for every custom session. (The
    daemon would build the key in registers: the id from a map keyed by
    iifname, then the address; here the chain only references the sets.)"""
    out = ["table inet t {", deny_chain()]
    allow, deny = [], []
    for i in range(BASE, BASE + n):
        allow += [keyed_key(i, "192.0.2.0/24"), keyed_key(i, "10.%d.%d.0/24" % (i // 250 % 250, i % 250))]
        deny.append(keyed_key(i, "198.51.100.7"))
    out += [blk("set allow4", ["type ipv6_addr", "flags interval", "elements = { %s }" % ", ".join(allow)]),
            blk("set deny4", ["type ipv6_addr", "flags interval", "elements = { %s }" % ", ".join(deny)]),
            blk("set forbid4", ["type ipv4_addr", "flags interval",
                                "elements = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 169.254.0.0/16 }"]),
            blk("set dns4", ["type ifname . ipv4_addr", "flags timeout"]),
            blk("map sid", ["type ifname : mark", "elements = { %s }" % ", ".join(
                '"sbx%d" : %d' % (i, i) for i in range(BASE, BASE + n))]),
            blk("chain custom", ["ct state established,related accept", "ip6 daddr @deny4 goto deny",
                                 "ip daddr @forbid4 goto deny", "meta l4proto { tcp, udp } th dport { 53, 853 } goto deny",
                                 "ip6 daddr @allow4 accept", "udp dport 443 goto deny",
                                 "iifname . ip daddr @dns4 accept", "goto deny"]),
            blk("map sessions", ["type ifname : verdict", "elements = { %s }" % ", ".join(
                '"sbx%d" : jump custom' % i for i in range(BASE, BASE + n))]),
            blk("chain forward", ["type filter hook forward priority 0; policy accept", "iifname vmap @sessions",
                                  "iifname \"sbx*\" goto deny"]), "}"]
    return "\n".join(out) + "\n"


def keyed_update(i, gen):
    """As concat_update, in the keyed sets."""
    old_a = "10.%d.%d.0/24" % ((i // 250 % 250, i % 250) if gen == 0 else (100 + (gen - 1) % 100, i % 250))
    new_a = "10.%d.%d.0/24" % (100 + gen % 100, i % 250)
    old_d = "198.51.100.7" if gen == 0 else "198.51.101.%d" % ((gen - 1) % 250)
    return "\n".join(['delete element inet t allow4 { %s }' % keyed_key(i, old_a),
                      'add element inet t allow4 { %s }' % keyed_key(i, new_a),
                      'delete element inet t deny4 { %s }' % keyed_key(i, old_d),
                      'add element inet t deny4 { %s }' % keyed_key(i, "198.51.101.%d" % (gen % 250))]) + "\n"


def deny_chain():
    return blk("chain deny", ["meta l4proto tcp reject with tcp reset", "reject with icmpx admin-prohibited"])


def tables_load(n):
    out = []
    for i in range(BASE, BASE + n):
        out += ["table inet s_sbx%d {" % i, deny_chain()] + sets("", i) + [
            blk("chain s", fwd_rules("")),
            blk("chain forward", ["type filter hook forward priority 0; policy accept", "iifname \"sbx%d\" jump s" % i]),
            "}"]
    return "\n".join(out) + "\n"


def netdev_load(n):
    out = []
    for i in range(BASE, BASE + n):
        # netdev has no ct/reject in every kernel: the same set lookups
        # and verdicts, drop for deny.
        rules = [r.replace("goto deny", "drop").replace("ct state established,related accept",
                                                        "ip protocol icmp accept") for r in fwd_rules("")]
        out += ["table netdev s_sbx%d {" % i] + sets("", i) + [
            blk("chain ingress", ["type filter hook ingress device \"sbx%d\" priority 0; policy accept" % i] + rules),
            "}"]
    return "\n".join(out) + "\n"


def own_table_update(family, chain, i, gen):
    t = "%s s_sbx%d" % (family, i)
    a = "10.%d.%d.0/24" % (gen % 250, i % 250)
    rules = fwd_rules("")
    if family == "netdev":
        rules = [r.replace("goto deny", "drop").replace("ct state established,related accept",
                                                        "ip protocol icmp accept") for r in rules]
    return "\n".join(["flush chain %s %s" % (t, chain)] + ["add rule %s %s %s" % (t, chain, r) for r in rules] +
                     ["flush set %s allow4" % t, "add element %s allow4 { 192.0.2.0/24, %s }" % (t, a),
                      "flush set %s deny4" % t, "add element %s deny4 { 198.51.100.%d }" % (t, gen % 250)]) + "\n"


def ns_run(ns, cmd, **kw):
    return subprocess.run(["ip", "netns", "exec", ns] + cmd, capture_output=True, text=True, **kw)


def nft_load(ns, text, tmp):
    path = os.path.join(tmp, "load.nft")
    with open(path, "w") as f:
        f.write(text)
    p = ns_run(ns, ["nft", "-f", path], timeout=600)
    if p.returncode != 0:
        raise SystemExit("nft -f: %s" % p.stderr[:600])


def batch_ms(ns, text, tmp):
    """The kernel time of one nft -f batch: its sendmsg() calls (strace -T);
    a list of batches: their sum."""
    if isinstance(text, list):
        return sum(batch_ms(ns, t, tmp) for t in text)
    path = os.path.join(tmp, "upd.nft")
    with open(path, "w") as f:
        f.write(text)
    p = ns_run(ns, ["strace", "-T", "-e", "trace=sendmsg", "nft", "-f", path], timeout=120)
    if p.returncode != 0:
        raise SystemExit("nft -f (update): %s" % p.stderr[-600:])
    return sum(float(x) for x in re.findall(r"^sendmsg\(.*<([0-9.]+)>$", p.stderr, re.M)) * 1000


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--only", default="today,elements,built,concat,keyed,tables,netdev")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root")
    ns = "bench-nftl-%d" % os.getpid()
    n = a.sessions
    res = {}
    with tempfile.TemporaryDirectory(prefix="bench-nftl-") as tmp:
        subprocess.run(["ip", "netns", "add", ns], check=True)
        try:
            layouts = a.only.split(",")
            if "netdev" in layouts:
                bpath = os.path.join(tmp, "links")
                with open(bpath, "w") as f:
                    f.write("".join("link add sbx%d type veth peer name p%d\nlink set sbx%d up\n" % (i, i, i)
                                    for i in range(BASE, BASE + n)))
                subprocess.run(["ip", "-n", ns, "-b", bpath], check=True)
            # Each layout loaded in turn, all N sessions (the tables do not
            # see each other: a layout's numbers are its own table's).
            for lay in layouts:
                nft_load(ns, {"today": shared_load, "elements": shared_load, "built": built_load,
                              "tables": tables_load, "concat": concat_load, "keyed": keyed_load,
                              "netdev": netdev_load}[lay](n), tmp)
                cases = {
                    "today": [("today, newest session", lambda g: today_update(BASE + n - 1, g)),
                              ("today, oldest session", lambda g: today_update(BASE, g))],
                    "elements": [("elements, newest session", lambda g: elements_update(BASE + n - 1, g)),
                                 ("elements, oldest session", lambda g: elements_update(BASE, g)),
                                 ("pin, shared table, newest", lambda g: pin("inet t", "s_sbx%d_dns4" % (BASE + n - 1), g)),
                                 ("pin, shared table, oldest", lambda g: pin("inet t", "s_sbx%d_dns4" % BASE, g))],
                    "built": [("built, newest session", lambda g: built_update(BASE + n - 1, g)),
                              ("built, oldest session", lambda g: built_update(BASE, g)),
                              ("pin, shared pins4", lambda g: 'add element inet t pins4 { "sbx%d" . 203.0.%d.%d timeout 30s }\n'
                               % (BASE + n - 1, g // 250 % 250, g % 250 + 1))],
                    "concat": [("concat, newest session", lambda g: concat_update(BASE + n - 1, g)),
                               ("concat, oldest session", lambda g: concat_update(BASE, g)),
                               ("pin, concat set", lambda g: 'add element inet t dns4 { "sbx%d" . 203.0.%d.%d timeout 30s }\n'
                                % (BASE + n - 1, g // 250 % 250, g % 250 + 1))],
                    "keyed": [("keyed, newest session", lambda g: keyed_update(BASE + n - 1, g)),
                              ("keyed, oldest session", lambda g: keyed_update(BASE, g))],
                    "tables": [("tables, newest session", lambda g: own_table_update("inet", "s", BASE + n - 1, g)),
                               ("tables, oldest session", lambda g: own_table_update("inet", "s", BASE, g))],
                    "netdev": [("netdev, newest session",
                                lambda g: own_table_update("netdev", "ingress", BASE + n - 1, g)),
                               ("netdev, oldest session", lambda g: own_table_update("netdev", "ingress", BASE, g)),
                               ("pin, own netdev table", lambda g: pin("netdev s_sbx%d" % (BASE + n - 1), "dns4", g))],
                }[lay]
                for g in range(a.rounds):  # interleaved: one of each per round
                    for label, fn in (cases if g % 2 == 0 else cases[::-1]):
                        res.setdefault(label, []).append(batch_ms(ns, fn(g), tmp))
                ns_run(ns, ["nft", "flush", "ruleset"])
                print("  loaded and measured %s" % lay, file=sys.stderr, flush=True)
        finally:
            subprocess.run(["ip", "netns", "del", ns])
    print("%d sessions, %d rounds, kernel time of one update batch (sendmsg, ms)" % (n, a.rounds))
    for label, v in res.items():
        print("  %-28s p50 %7.3f  min %7.3f  max %7.3f" % (label, statistics.median(v), min(v), max(v)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
