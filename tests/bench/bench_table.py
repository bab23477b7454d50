#!/usr/bin/env python3
"""make bench: every row of the performance table (issue #16), each beside
its peer and its goal, measured side by side in one run of one test world
(tests/integration/world.py) with one private sandboxd.

Rows and their peers:
  create_exec_delete_rpc     create + command.run true + delete (JSON-RPC)   bwrap --unshare-all true
  create_exec_delete_cli     the same through sandboxctl (3 processes)       bwrap --unshare-all true
  create_exec_delete_pool    create from a full warm pool + command.run true + delete (JSON-RPC)  bwrap --unshare-all true; goal 0.5x
  exec_rpc                   command.run true in a running sandbox           posix_spawn + waitpid of true
  exec_cli                   sandboxctl exec NAME -- true                    /usr/bin/true as a whole process
  policy_update_1            sandbox.update networkPolicy, 1 session         goal 2 ms
  policy_update_n            the same with N sessions loaded                 policy_update_1
  dns_added_1                DNS through the filter minus straight, 1 session  goal 0.3 ms
  dns_added_n                the same with N sessions loaded                 dns_added_1
  tcp_throughput_n           TCP through an allowlist, N sessions loaded     the same transfer over a plain veth
  snapshot_freeze            how long the source is frozen by sandbox.snapshot (1 GiB written)  cp -a of its upper
  fork_freeze                the same for sandbox.fork of the running source                   cp -a of its upper
  snapshot_freeze_dirty      the same right after 512 MiB more written, not yet synced          the call; goal 50 ms
  fork_stopped_1m/_1g        sandbox.fork of a stopped sandbox with 1 MiB / 1 GiB written     goal 50 ms; 1g: 1m's figure, <= 1.2x
  snapshot_stopped_1m/_1g    sandbox.snapshot of the same                                      the same
  fork_running_1m/_1g        sandbox.fork of a running sandbox (the call)                      goal 100 ms; 1g: 1m's figure
  snapshot_running_1m/_1g    sandbox.snapshot of the same                                      the same
  connect_1                  new TCP connect allowed by subnets.allow, 1 session  the same from an allow-all sandbox
  connect_n                  the same with N sessions loaded                 connect_1; goal 1.2x
  idle_sandboxes             host memory per idle sandbox, 1000 alive, machine-wide  goal 1 MiB, count goal 1000
                             (daemon RSS + kernel memory from /proc/meminfo deltas + the sessions' PSS)
  create_burst_p50/_p99      20 sandbox.create at once, per create           single-create p50
  create_rate_20             create+delete per second, 20 clients at once    20 bwrap --unshare-all true at once; >= 0.7x

Where a create, exec and delete spend their time (perf record -g of the
daemon and sandbox-init over loops of each, strace -f -T of one cycle, and
the daemon's per-step clock, `start 'x': dirs+disk ... init-setup` at
logLevel debug), and what was cut:
  - delete waited for the kernel to tear down the session's namespaces:
    init's exit is reported (pidfd) only after its mount namespace is
    unmounted (overlay, /proc, /dev, tmpfs), 1-8 ms, while its agent
    socket closes 1.1 ms after the stop. Delete now answers at that
    goodbye once the session is fenced (one SIGKILL pass over its cgroup)
    and its directories are renamed to tombstones; netd, the nftables
    objects (about 30 netlink round trips, the largest part of the old
    delete), the veth and the cgroup go in the background, and a restart
    finishes them (fault point delete.fenced). Warm-pool delete p50, same
    run of both builds: 2.99 -> 1.42 ms (quiet machine), 15-25 -> 4.5-5 ms
    at load 10-19.
  - every delete walked the host's whole conntrack table twice (IPv4 and
    IPv6: 262144 buckets, ~9 ms of CPU each, 8%% of all samples with a
    create loop running) to forget the flows of the session's address,
    even for a session that never had a veth. Only sessions that had one
    (or may have: adopted after a restart) are flushed now.
  - each of the 16 masked directories (/proc/acpi, /sys/fs, ...) was a
    tmpfs instance of its own, made at the start and torn down at the end
    of every session; now one empty read-only instance is cloned over
    each: 0.92 -> 0.57 ms for the masks' setup and teardown in a mount
    namespace of their own (p50 of 200, interleaved, same machine).
  - measured before/after: nine interleaved pairs of runs of the two
    builds (lifecycle and pool parts) on a shared 2-core machine at load
    5 to 40, so the absolute figures spread 3x between runs. The pool
    row's delete went down in every pair (p50 2.99-24.8 ms before,
    1.42-5.0 after); its cycle ratio 0.56-1.97x before, 0.84-1.47x after
    (goal 0.5x not met). create_exec_delete_rpc went down in 7 of 9 pairs
    (e.g. 49.3 -> 23.0 ms), but so did its bwrap peer (15-35 ms before,
    5.5-19 ms after: the conntrack walks no longer take its CPU), so its
    ratio stayed 1.8-4x (goal 1.5x not met). exec_rpc is unchanged,
    1.9-2.3x posix_spawn (goal 1.3x not met).
  - the cold create (issue #23 item 3). Its steps before, p50 of 20 on a
    quiet machine: disk image and mount 1.5-3.5 ms, cgroup 0.3, spawn of
    init 1.4-2.9, nftables 0.5-0.9 (policy/'s ruleset), init-setup
    4.6-6.9 ms. Init's own clock (marks around its setup, sent back in
    its ready packet for the measurement only) showed where init-setup
    went: sandbox-init reached main() 10.9 ms after its clone at load 3.5,
    as late as the daemon's disk, and then needed 2.5 ms (network 0.6,
    mounts and pivot_root 1.6, the container helper's fork 0.3). Cut:
    * sandbox-init was linked with libarchive, so every exec loaded
      libxml2, ICU and libstdc++ with it: 2.6 ms of CPU before main()
      against 0.6 without them (perf stat of its bare start; relocation
      and those libraries' initialisers). It starts without them now
      (same moment: 1.2 against 5.1 ms). A first version loaded
      libarchive on a thread during init's setup, joined before
      pivot_root: the load still took 2.7 ms of CPU there and init waited
      1.2-1.6 ms for it. Now nothing is loaded until a copy: sandboxd
      names the files of libarchive and the libraries it needs (its own,
      dl_iterate_phdr), init opens them before pivot_root, and a copy's
      child checks them (each DT_NEEDED the soname of a file before it)
      and dlopen()s them through /proc/self/fd in that order, so the
      loader never searches the sandbox's tree, whose /lib its root may
      change (test_runtimes: copies in a runtime without libarchive).
      A copy pays the 2.7 ms instead of every start.
    * with a user namespace init is cloned first, and a thread makes the
      directories and the disk meanwhile: the loop device and the ext4
      mount (LOOP_CONFIGURE 0.5-8.6 ms and the mount 0.5-12 ms in perf
      trace, longest while the last sandbox's disk is torn down in the
      background) overlap the clone of five namespaces (1.1-1.6 ms) and
      init's start. Without a user namespace init mounts the overlay by
      host paths in its own mount namespace, cloned after the disk.
    * the 30 masks attach on the fd they open to see the path exists
      (60 fewer openat2 and close per start); init answers ready before
      it forks its container helper (0.2-0.4 ms), which it still does
      before it reads the first request.
    Measured before/after, the two builds interleaved on the shared
    2-core machine. With the first cuts (the libarchive thread), p50 of
    60 creates each at load 2: disk 2.9 ms -> 0.7-1.2 left after the
    clone, cgroup 0.3 -> 0.5, spawn 2.0 -> 2.3-2.6, nftables 0.5-0.7
    both, init-setup 4.6-6.1 -> 4.2-5.0; the create alone 14.2 -> 12.0
    and 11.6 -> 10.0 ms; create_exec_delete_rpc (--quick --only
    lifecycle) at load 6-7: 25.6 ms 3.34x -> 22.6 ms 2.64x, 20.7 ms
    3.15x -> 17.7 ms 2.68x. All of them, at load 0.6-0.9: the create
    alone 11.3 -> 10.4 ms; create_exec_delete_rpc 14.2 ms 2.56x -> 12.2
    ms 1.98x and 14.4 ms 2.57x -> 14.2 ms 2.29x. The overlaps need a
    free core, which this machine often lacks; a burst of load (16)
    erased the gain in one set. Goal 1.5x not met.
  - the cold create, second round (issue #23 item 3). Profiled with the
    step clock, perf trace of the daemon's threads and init's own marks
    (clock readings in its ready packet, for the measurement only): the
    disk was still 1.1-2.5 ms past the clone (perf trace: LOOP_CONFIGURE
    1-98 ms and ext4's mount 0.5-35 ms at load 4-5), init reached main()
    1.6 ms after the daemon released it, and the clone itself took
    1.25 ms, 0.75 of it a copy of the daemon's address space (a bare
    clone3 of the five namespaces: 0.44 ms from a small process, 1.27 ms
    from one of 18 MiB and 300 mappings, the daemon's size). Cut:
    * a spare disk (libcore/diskimg.c): one image of the daemon's
      default size made ahead by a thread of its own (template copy,
      fallocate, loop device, ext4 mounted as a detached fsmount() with
      upper/, work/ and the reserve made), which a create renames into
      its directory and attaches with move_mount: dirs+disk 1.3-2.5 ms
      -> 0.02. The next spare is made once the create is done (made
      beside it, it slowed the rest of the create by about what it
      saved). A kill leaves only the image, removed at the next start
      (fault point disk.spare_mounted, test_disk_spare). The spare's
      work still falls in the cycle of this row (the exec after the
      create went 1.43 -> 1.74 ms while the spare was made), so the row
      gains less than the create.
    * sandbox-init's clone shares the daemon's memory (CLONE_VM on a
      stack of its own, an x86-64 trampoline as glibc's clone(), raw
      syscalls in the child, signals blocked, the parent waits for the
      exec through a close-on-exec pipe): no copy of the address space
      at the clone nor its teardown at the exec; the clone 0.60 ms of a
      spawn step of 1.7 (v1 moves 0.2, exec wait 0.16), init-setup
      2.0 -> 1.5 ms.
    * a deny-all session's nftables rules go in after the setup packet,
      while init sets up (it has no veth: nothing but lo to send on):
      0.23-0.3 ms off the path.
    Measured before/after (the create alone and the row's cycle, the
    builds' daemons alternating in blocks of 25 cycles in one test
    world, p50 of 200 each, bwrap interleaved, load 3-4): create 7.28 ->
    5.87 ms (client's view; steps 6.4 -> 4.6), create_exec_delete_rpc
    2.08x -> 1.75x and 2.13x -> 1.79x; at load 6, p50 of 250: create
    20.9 -> 14.1 ms, 2.95x -> 2.27x. Without a user namespace (load 7,
    p50 of 150): create 19.7 -> 13.6 ms (dirs+disk 5.4 -> 0.6), 4.30x ->
    2.71x. This script (--quick --only lifecycle), four interleaved pairs
    at load 3.8-5: create_exec_delete_rpc 3.52, 3.17, 2.14, 2.29x before,
    3.32, 1.75, 2.22, 2.92x after; _cli 3.80-4.03x and 2.65-4.62x: at
    that load 30 rounds spread wider than the change. Goal 1.5x not met.
  - not cut, the next steps: the overlay as an fd in the plain mode too,
    so init can be cloned first there as well. init-send (0.45-0.55 ms:
    the idmapped overlay and six host-bind clones, the binds the same for
    every sandbox). Init's network (0.37 ms: sysctls, lo up through a
    libnl link dump) and mounts (1.1 ms, ~80 mount-API calls). Init's
    start: 1.6 ms from its release to main() (execveat, five libraries:
    linking libseccomp, libcap and libnl statically takes a bare start
    from 0.94 to 0.70 ms, not done: Debian's policy on static linking).
    The cgroup (0.3-0.5 ms, five hierarchies here) and the exec wait
    (0.16 ms: the child's stack could outlive the spawn instead). Outside
    the steps the daemon adds 0.3 ms (request to worker 0.04, worker to
    answer 0.22), the client and socket about 0.7. exec_rpc is the exec
    path's (1.8-2.0x posix_spawn).
  - exec into a running sandbox, CPU per `command.run true` (/proc stat
    of the daemon, init and init's reaped children over interleaved
    blocks of 500, quiet machine): daemon 0.15-0.17 ms, init 0.41-0.45 ms,
    the command's process (its child of init until exec, then `true`)
    0.78-0.87 ms, against 0.59 ms for `true` by posix_spawn on the host.
    A third of init's own samples are its fork of the child (perf:
    clone/dup_mmap; init maps 130 areas, about 95 of them the libraries
    it links for directory copies, netlink and JSON: libarchive, libxml2,
    ICU, libstdc++, the compressors), and its writes after the fork take
    copy-on-write faults (_int_free, malloc). Tried and not kept: the
    loaded segments of every library the child does not call made
    MADV_DONTFORK (madvise(2)), each other fork of init given them back.
    A bare fork+exec of `true` from a process with init's libraries:
    0.68 -> 0.61 ms; in the daemon, interleaved A/B: exec_rpc p50
    1.453/1.446 -> 1.412/1.421 ms (posix_spawn 0.69), CPU per exec
    unchanged within the noise (init 0.45 -> 0.43 and 0.41 -> 0.43 ms).
    Kernel 6.18 copies the whole mapping tree at fork and then clears
    each DONTCOPY area from the child's copy (mas_store_gfp, 5%% of
    init's samples), which takes most of the saving; and a child that
    bound a symbol lazily would walk the missing libraries and fault.
    Done: a spawn that copies no address space (libcore/init/command.c
    spawn_child). init builds all the child needs in a mapping of its
    own (guard page, stack, copies of argv, envp, PATH, cwd, the fds,
    ids, capability data, the signals to reset, the seccomp programs as
    BPF) and clones it with CLONE_VM and without CLONE_VFORK, every
    signal blocked; the child makes raw system calls only (no errno, no
    malloc, no lock: libcap's capset, execvpe and sigaction replaced by
    their syscalls and a PATH search of its own), resets each handled
    signal before it unblocks them, and init frees the mapping at the
    report pipe's end of file (after exec or death) or at the reap, so
    a child the sandbox user holds stopped costs init nothing. init is
    not dumpable (the flag is the shared mm's), so a held child cannot
    be ptraced nor its /proc/PID/mem opened (tests/escape); with
    fs.suid_dumpable 1, which the kernel would give the mm at the uid
    change, the child gets a copy as before. A write to oom_score_adj
    reaches every process sharing the writer's mm unless the writer is
    a vfork child: the child shares init's memory only when init's own
    score is 0 (inside a user namespace) and it is no container's
    command (an OOM kill in the container's cgroup would take init with
    it); otherwise it gets a copy and writes its own score (a vfork
    launcher, tried first, could be held stopped by root inside and init
    with it). Also cut: sandboxd keeps memory.events open per
    cgroup (it opened it by full path at each command's start, 8%% of
    its samples per exec). Tried and not kept: sandboxd writing an
    answer at once when nothing is queued instead of arming EPOLLOUT
    (two epoll_ctl and a turn of the loop per message, three messages
    per command.run): no difference in the ratio (medians 1.43x and
    1.43x over six blocks each at load 30), and it splits the exit
    notification and the answer into two writes.
    Measured before/after, the two builds' daemons in alternating blocks
    of 200 commands in one test world, ratio to posix_spawn+wait of true
    in the same block: CLONE_VM child 1.83/1.98/1.75/1.75x ->
    1.54/1.57/1.58/1.57x; the final sandbox-init (inside a user
    namespace), six blocks each at load 3: 1.82/1.85/1.83/1.81/
    1.80/1.76x -> 1.40/1.38/1.43/1.43/1.40/1.45x; all of it, bench_table --quick --only
    lifecycle, runs of the two builds interleaved (four pairs, load 3 to
    39): exec_rpc 1.245 ms 1.91x, 1.266 ms 1.88x, 1.647 ms 2.07x, 1.612
    ms 2.27x -> 0.984 ms 1.50x, 0.998 ms 1.45x, 1.073 ms 1.54x (one run
    beside a build, 2.75x, left out); posix_spawn 0.65-0.80 ms; exec_cli
    3.44x, 3.53x, 3.71x, 4.51x -> 3.16x, 3.05x, 3.00x. Two more pairs at
    load 12-16 spread too far to say anything (posix_spawn itself 0.64
    to 0.93 ms within a pair, block ratios 0.7-2.0x either way) and are
    left out. Goals (1.3x, 2.5x) not met. What is left
    (perf, 1500 execs of one sandbox): the child before exec costs about
    as much CPU as the exec'd `true` itself: execve's PATH search (three
    failed lookups before /usr/bin), the seccomp no-setns filter loaded
    and JIT-compiled per child (outer mode, libcore/seccomp.h), 14
    PR_CAPBSET_DROP commits, setsid; init's four pipes, the clone and
    wait4; the daemon's JSON (cJSON prints each number with sprintf and
    reads it back with sscanf); the hops (client, daemon, init, back) and
    the `started` notification, which wakes the daemon and the client
    while the command runs.
  - tried and not kept: init closing its agent socket (and the listening
    one) itself right before _exit, once every process of the namespace
    is reaped, instead of at the exit, which closes its files only after
    tearing down its address space. A process with init's mappings, time
    from its last write to the peer's end of file: 0.12 ms (exit) ->
    0.02 ms (close, then exit); but the pool cycle's delete did not move
    (interleaved, p50 of 60, 60 and 120 cycles: 1.451 -> 1.530,
    1.553 -> 1.462, 1.208 -> 1.211 ms).
  - where else the pool row went (strace of one cycle, the daemon's own
    clock around each step of the adopt, p50 of 40): the adopt was about
    120 syscalls on the loop thread, 1.1 ms: a vfork child joining the
    UTS namespace for the hostname (0.10 ms), /etc/hosts and
    /etc/hostname opened with O_TRUNC, five limit writes (0.07), five
    usage reads for the rebase (0.08), config.json (0.16) and
    session.json (0.16) each written by a rename over the pooled file,
    and session.json again in the activation (0.30 ms, unchanged but for
    an expiry a few hundred microseconds later). A rename over an
    existing file, and a close after a truncation to 0, make ext4 start
    the new file's writeback there (auto_da_alloc, ext4(5)): 3 ms against
    0.02 for a fresh name, in a loop on the state filesystem. The
    delete's answer waited for init's SIGTERM round (the container
    helper, a fork of init, exits and is reaped first), the goodbye, a
    new worker thread, one kill pass over the five hierarchies of the
    hybrid cgroup layout (about 60 syscalls) and two renames. Cut:
    * sandbox.delete kills the session whole at once: cgroup.kill on its
      cgroup of the tracking hierarchy (the unified one of a hybrid
      layout) reaches every process of it and a fork under way, so the
      session is fenced when the write returns; delete no longer gives
      the stop's grace (sandbox.stop does; docs/API.md). The renames of
      a sandbox that is not persistent run on the loop (no thread hand-
      off), and the threads of the background teardown and of the
      tombstones' removal start after the answer is written
      (worker_submit_soon: p50 0.30 -> 0.22 and 0.46 -> 0.29 ms for the
      delete, interleaved pairs of 150). A host with no cgroup.kill keeps
      init's stop, with no grace. New fault point delete.killed.
    * the adopt: init sets the hostname (an agent message, read before
      any later request, instead of the vfork); the pooled config and
      record are unlinked before new ones are written (the pooled state
      directory is removed whole if the daemon dies before the commit);
      /etc/hosts and /etc/hostname written over and cut to length; the
      record written once (the timeout timer armed for the recorded
      expiry); the limits written only when pidsMax was reloaded since
      the pooled cgroup was made; the rebase reads the CPU figure alone.
    Measured, the two builds interleaved on the shared 2-core machine
    (load 2.6-4): own A/B, both daemons in one world, each cycle after
    both pools are full, p50 of 100: create 1.508 -> 0.571 ms, exec
    1.526 -> 1.361, delete 1.666 -> 0.323, cycle 5.074 -> 2.341 ms.
    create_exec_delete_pool (--quick --only pool), pairs of runs at load
    2.6: 5.178 ms 0.80x -> 2.661 ms 0.44x and 4.530 ms 0.77x -> 2.189 ms
    0.45x (goal 0.5x met); split after: create 0.56-0.83, exec 1.30-1.48,
    delete 0.28-0.36 ms. With the soon-started threads as well, five
    pairs at load 6-10 (bwrap 6.8-11.9 ms): 0.72-1.13x before, 0.41-0.60x
    after (met in two of five); the exec, 1.8-3.5 ms there, is then most
    of the row. What is left: the exec (the other half of the
    row: init's fork of the command), and in the create the config and
    record writes (cJSON and two files), the limits of a reloaded
    pidsMax, the CA of a networked mode; the daemon opens
    memory.oom_control by its full path for each exec (8%% of the
    daemon's samples per exec, 11 us).

Where tcp_throughput_n's packets spend their time (perf record -a -g
during the uploads, 1000 sessions; docs/POLICY.md "Per-packet cost"):
about 28 packets a MiB cross the host (TSO), each judged by the ruleset,
a flow's later packets too (its generation check). nftables took 6.7%%
of the transfer's CPU, most of it walking forward: a sandbox's IPv4
packet met 22 rules and 23 interface-name loads before the sessions map,
17 of them IPv6 rules. forward and input now send a sandbox's packets to
from_sbx / in_sbx after one test of the input interface (the IPv6 rules
behind one nfproto test): 4 rules and 2 name loads, the hooks' share
4.3%%. A/B of the two builds (a loop of its own, not this script: two
test worlds of 1000 sessions side by side, each round's four uploads
interleaved, nine runs of 40-60 rounds on the shared 2-core machine at
load 3-18): the sandbox's throughput +5.3%% (median; runs -7.7%% to
+7.5%%), the ratio to the plain veth 0.86x -> 0.87x (runs 0.85x to
0.95x). This script's own runs, alternating builds: 0.59x, 0.83x before,
0.78x, 0.80x after (5 uploads each: noise). With forward and unrouted
accepting everything first (a measurement only) the ratio was 0.92x: the
rest is the second hop, conntrack and the masquerade. A flowtable is not used:
an update would have to delete the session's conntrack entries (a walk
of the table) to cut its flows, and a cut flow would lose its reset and
denial event.

Interleaved rounds (one of each operation per round, the order rotating)
make a burst of load from elsewhere on the machine slow both sides of a
ratio alike. The N sessions are real custom-policy sandboxes plus sessions
made with `nft -f` in policy/nftgen.c's shape (bench_policy.py). The
frozen time is measured from inside the source: a ticker that wakes every
millisecond logs every gap it sees; the longest gap overlapping the call
is the time the source stood still.

Prints the table and writes build/bench.json ({"mode", "rows": [{id,
label, value, unit, peer, peer_value, ratio, goal, met}]}). No assertions:
figures are reported, never judged by a test.

    python3 tests/bench/bench_table.py [--quick] [--json PATH] [--only PARTS] [--pool MIB]

Storage: the freeze and copies parts measure the storage the project
recommends, a storage pool (daemon.json storage.pool, libcore/pool.h:
every disk a Btrfs subvolume with a quota, forks and snapshots read-only
subvolume snapshots), made by the daemon in the test world as a fully
allocated file of --pool MIB (default %d) on the state filesystem,
loop-mounted; their rows carry the plain ids. The same two parts then run
again on a daemon with the default storage (a disk image per sandbox),
rows suffixed _images, side by side in the same run. --pool 0 leaves the
pool out (image rows only, under the plain ids). The other parts run on
the default storage: the idle part's thousand disks would need a pool of
20 GiB.
""" % 10240
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

import world as W  # noqa: E402
from bench import BWRAP, pct, interleaved, used_kib, rss_kib, children_rss  # noqa: E402
from bench_policy import CONNECTS  # noqa: E402
import bench_policy as BP  # noqa: E402
from bench_policy import QUERIES, nft_file, count_sessions, FAKE_BASE  # noqa: E402

SINK_PORT = 7100
# The disk of the sandboxes that write a GiB (freeze, copies).
COPY_DISK_MIB = 2048
# The storage pool of the freeze and copies parts: two sources of 2 GiB
# disks (1 MiB and 1 GiB written), a fork of the same disk, layers of
# about 1 GiB (a snapshot's and the fork's), and the pool's metadata
# margin, with room to spare.
POOL_MIB = 10240

# A TCP sink, in the world's internet namespace: reads each connection to
# EOF, answers the byte count (8 bytes) and closes.
SINK = r'''
import socket, struct, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(16)
print("ready", flush=True)
def serve(c):
    n = 0
    while True:
        b = c.recv(1 << 20)
        if not b: break
        n += len(b)
    c.sendall(struct.pack(">Q", n)); c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''

# The sender: MiB/s of each of `runs` transfers of `mib` MiB.
SENDER = r'''
import json, socket, struct, sys, time
host, port, mib, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
buf = b"\0" * (1 << 18); out = []
for _ in range(runs):
    s = socket.socket(); s.settimeout(60)
    t = time.perf_counter(); s.connect((host, port))
    for _ in range(mib * 4): s.sendall(buf)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while len(got) < 8:
        b = s.recv(8 - len(got))
        if not b: raise SystemExit("sink closed early")
        got += b
    dt = time.perf_counter() - t; s.close()
    if struct.unpack(">Q", got)[0] != mib << 20: raise SystemExit("short transfer")
    out.append(mib / dt)
print(json.dumps(out))
'''

# Runs detached in a sandbox: wakes every millisecond and appends to PATH
# "<realtime end> <gap ms>" for every gap of 2 ms or more (CLOCK_REALTIME:
# the same inside and outside the sandbox, time namespace or not).
TICKER = r'''
import sys, time
f = open(sys.argv[1], "a", buffering=1)
f.write("start\n")
last = time.time()
while True:
    time.sleep(0.001)
    now = time.time()
    if now - last >= 0.002:
        f.write("%.6f %.3f\n" % (now, (now - last) * 1000))
    last = now
'''


# Kernel memory in /proc/meminfo (proc(5)): what a sandbox costs the kernel
# that no process's RSS shows.
KERNEL_MEMINFO = ("SUnreclaim", "KernelStack", "PageTables", "SecPageTables", "Percpu")


def meminfo():
    """/proc/meminfo as {field: KiB}."""
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            m[k] = int(v.split()[0])
    return m


class Bench:
    def __init__(self, w, d, quick):
        self.w, self.d, self.quick = w, d, quick
        self.rpc = d.connect(600)
        self.rows = []
        self.tag = w.id
        # Appended to every row id, and the storage rows are judged or
        # only reported (the image storage's, beside the pool's).
        self.suffix, self.judged = "", True

    def use_daemon(self, config, tag):
        """Replaces the bench's daemon with one of `config` (one daemon
        per network namespace)."""
        self.rpc.close()
        self.w.stop_sandboxd(self.d)
        self.d = self.w.start_sandboxd(config, tag=tag)
        self.rpc = self.d.connect(600)

    def call(self, method, params, timeout=600):
        m = self.rpc.call(method, params, timeout)
        if "error" in m:
            raise SystemExit("bench: %s: %s" % (method, json.dumps(m["error"])[:400]))
        self.rpc.notes.clear()
        return m["result"]

    def ctl_ok(self, *args, timeout=300):
        c, o, e = self.d.ctl(*args, timeout=timeout)
        if c != 0:
            raise SystemExit("bench: sandboxctl %s: exit %d: %s" % (" ".join(args[:3]), c, e.strip()[:300]))
        return o

    def row(self, rid, label, value, unit, peer, peer_value, goal_text, ratio_goal=None, value_goal=None,
            extra=None, count_goal=None):
        """One row; `met` judges the ratio against ratio_goal and/or the value
        against value_goal (both upper bounds unless the goal text says >=)."""
        rid += self.suffix
        if not self.judged:
            ratio_goal = value_goal = count_goal = None
            goal_text = "reported (default storage)"
        ratio = value / peer_value if peer_value else None
        # A row with no goal to judge (figures reported only) has met None.
        met = True if (ratio_goal, value_goal, count_goal) != (None, None, None) else None
        ge = goal_text.startswith(">=")
        if ratio_goal is not None:
            met = met and ratio is not None and (ratio >= ratio_goal if ge else ratio <= ratio_goal)
        if value_goal is not None:
            met = met and value <= value_goal
        if count_goal is not None:
            met = met and count_goal[0] >= count_goal[1]
        r = {"id": rid, "label": label, "value": round(value, 4), "unit": unit, "peer": peer,
             "peer_value": round(peer_value, 4) if peer_value is not None else None,
             "ratio": round(ratio, 4) if ratio is not None else None, "goal": goal_text, "met": met}
        if extra:
            r.update(extra)
        self.rows.append(r)
        print("  %-26s %10.3f %-6s %-34s %10s %7s  %-30s %s" % (
            rid, value, unit, peer[:34], "%.3f" % peer_value if peer_value is not None else "-",
            "%.2fx" % ratio if ratio is not None else "-", goal_text,
            {True: "met", False: "NOT MET", None: ""}[met]), flush=True)

    # ------------------------------------------------------------ lifecycle
    def lifecycle(self, n):
        d, tag = self.d, self.tag

        def cli_cycle(i):
            name = "b%s-c%d" % (tag, i)
            self.ctl_ok("create", "--name", name, "--deny-all")
            self.ctl_ok("exec", name, "--", "true")
            self.ctl_ok("rm", name)

        def rpc_cycle(i):
            name = "b%s-r%d" % (tag, i)
            self.call("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
            self.call("command.run", {"sandbox": name, "cmd": "true"})
            self.call("sandbox.delete", {"name": name})

        def bwrap(i):
            subprocess.run(BWRAP, check=True, stdin=subprocess.DEVNULL)

        if not shutil.which("bwrap"):
            raise SystemExit("bench: bwrap is not installed (scripts/install-deps installs it)")
        cli_cycle(-1)  # warm-up
        rpc_cycle(-1)
        bwrap(-1)
        cli, rpc, bw = interleaved([cli_cycle, rpc_cycle, bwrap], n)
        bw50 = pct(bw, 50)
        self.row("create_exec_delete_rpc", "create+exec true+delete, JSON-RPC (p50)", pct(rpc, 50), "ms",
                 "bwrap --unshare-all true", bw50, "<= 1.5x", ratio_goal=1.5)
        self.row("create_exec_delete_cli", "the same through sandboxctl, 3 processes (p50)", pct(cli, 50), "ms",
                 "bwrap --unshare-all true", bw50, "<= 2.0x", ratio_goal=2.0)

        warm = "b%s-warm" % tag
        self.call("sandbox.create", {"name": warm, "networkPolicy": "deny-all"})
        true = shutil.which("true") or "/usr/bin/true"

        def rpc_exec(i):
            self.call("command.run", {"sandbox": warm, "cmd": "true"})

        def cli_exec(i):
            self.ctl_ok("exec", warm, "--", "true")

        def spawn(i):
            pid = os.posix_spawn(true, [true], os.environ)
            os.waitpid(pid, 0)

        def whole_true(i):
            subprocess.run(["/usr/bin/true"], check=True)

        for i in range(5):  # the sandbox's first commands fault in its files
            rpc_exec(i)
        rx, cx, sp, wt = interleaved([rpc_exec, cli_exec, spawn, whole_true], n)
        self.row("exec_rpc", "exec true into a running sandbox, JSON-RPC (p50)", pct(rx, 50), "ms",
                 "posix_spawn+wait of true", pct(sp, 50), "<= 1.3x", ratio_goal=1.3)
        self.row("exec_cli", "sandboxctl exec NAME -- true (p50)", pct(cx, 50), "ms",
                 "/usr/bin/true, whole process", pct(wt, 50), "<= 2.5x", ratio_goal=2.5)
        self.call("sandbox.delete", {"name": warm})

    # ------------------------------------------------------------ warm pool
    def pool(self, n, size=2):
        """create_exec_delete_pool: the rpc cycle of lifecycle() against a
        daemon of its own with warmPool {size, policy: deny-all}, each cycle
        started with the pool full (the wait for the refill is not timed;
        the refill the cycle's adoption starts runs during its exec and
        delete, as it would in use). The other rows' daemon has no pool, so
        no refill runs while they are measured."""
        w, tag = self.w, self.tag
        self.rpc.close()
        w.stop_sandboxd(self.d)
        pd = w.start_sandboxd({"warmPool": {"size": size, "policy": "deny-all"}}, tag="benchpool")
        conn = pd.connect(600)

        def call(method, params):
            m = conn.call(method, params, 600)
            if "error" in m:
                raise SystemExit("bench: %s: %s" % (method, json.dumps(m["error"])[:400]))
            conn.notes.clear()
            return m["result"]

        def full():
            deadline = time.monotonic() + 120
            while call("daemon.info", {})["warmPool"]["ready"] < size:
                if time.monotonic() > deadline:
                    raise SystemExit("bench: the warm pool did not fill within 120 s")
                time.sleep(0.005)

        split = {"create": [], "exec": [], "delete": []}

        def pool_cycle(i):
            name = "b%s-p%d" % (tag, i)
            for step, method, params in (("create", "sandbox.create", {"name": name, "networkPolicy": "deny-all"}),
                                         ("exec", "command.run", {"sandbox": name, "cmd": "true"}),
                                         ("delete", "sandbox.delete", {"name": name})):
                t = time.perf_counter()
                call(method, params)
                if i >= 0:
                    split[step].append((time.perf_counter() - t) * 1000.0)

        def bwrap(i):
            subprocess.run(BWRAP, check=True, stdin=subprocess.DEVNULL)

        full()
        pool_cycle(-1)  # warm-up
        bwrap(-1)
        pc, bw = [], []
        adopted0 = call("daemon.info", {})["warmPool"]["adopted"]
        for i in range(n):
            full()
            for k in ((0, 1) if i % 2 == 0 else (1, 0)):
                t = time.perf_counter()
                (pool_cycle if k == 0 else bwrap)(i)
                (pc if k == 0 else bw).append((time.perf_counter() - t) * 1000.0)
        served = call("daemon.info", {})["warmPool"]["adopted"] - adopted0
        self.row("create_exec_delete_pool", "the same from a warm pool, JSON-RPC (p50)", pct(pc, 50), "ms",
                 "bwrap --unshare-all true", pct(bw, 50), "<= 0.5x", ratio_goal=0.5,
                 extra={"served_from_pool": served, "cycles": n,
                        "split_p50_ms": {k: round(pct(v, 50), 3) for k, v in split.items()}})
        # What the row is made of: the delete is the cold one (the session's
        # end and teardown), the create the pool's.
        print("  %-26s create %.3f ms, exec %.3f ms, delete %.3f ms (p50), %d of %d from the pool"
              % ("  (pool split)", pct(split["create"], 50), pct(split["exec"], 50), pct(split["delete"], 50),
                 served, n), flush=True)
        conn.close()
        w.stop_sandboxd(pd)
        self.d = w.start_sandboxd()
        self.rpc = self.d.connect(600)

    # ------------------------------------------------------- creates at once
    def burst(self, rounds, n):
        single = []
        for i in range(max(10, rounds * 5)):
            name = "b%s-s%d" % (self.tag, i)
            t = time.perf_counter()
            self.call("sandbox.create", {"name": name, "networkPolicy": "deny-all"})
            single.append((time.perf_counter() - t) * 1000)
            self.call("sandbox.delete", {"name": name})
        lat = []
        for r in range(rounds):
            names = ["b%s-u%d-%d" % (self.tag, r, i) for i in range(n)]
            # n connections, as n clients would be; all requests sent before
            # the first answer is read.
            conns = [self.d.connect(600) for _ in names]
            done, errors = [None] * n, []

            # Each answer is timed when it arrives (a reader per
            # connection), not when a loop reading them in order gets to it.
            def reader(i, c, rid):
                m = c.wait(rid, 600)
                done[i] = time.perf_counter()
                if "error" in m:
                    errors.append(m["error"])

            t0 = time.perf_counter()
            ids = [c.start("sandbox.create", {"name": x, "networkPolicy": "deny-all"}) for c, x in zip(conns, names)]
            readers = [threading.Thread(target=reader, args=(i, c, rid)) for i, (c, rid) in enumerate(zip(conns, ids))]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            if errors or None in done:
                raise SystemExit("bench: burst create: %s" % (errors[:1] or "no answer"))
            lat += [(x - t0) * 1000 for x in done]
            for c in conns:
                c.close()
            for x in names:
                self.call("sandbox.delete", {"name": x})
        s50 = pct(single, 50)
        extra = {"samples": len(lat)}
        self.row("create_burst_p50", "%d creates at once, p50 of each create" % n, pct(lat, 50), "ms",
                 "single create p50", s50, "reported", extra=extra)
        self.row("create_burst_p99", "%d creates at once, p99 of each create" % n, pct(lat, 99), "ms",
                 "single create p50", s50, "<= 5x", ratio_goal=5.0, extra=extra)

    # -------------------------------------------------------- freeze times
    def freeze(self, mib):
        w, d = self.w, self.d
        src = "b%s-frz" % self.tag
        self.call("sandbox.create", {"name": src, "networkPolicy": "deny-all", "persistent": True,
                                     "timeout": 3600000, "resources": {"diskMiB": COPY_DISK_MIB}})
        self.call("command.run", {"sandbox": src, "cmd": "sh", "args": ["-c",
                  "mkdir -p /workspace/data && head -c %dM /dev/urandom > /workspace/data/blob && sync" % mib]})
        upper = os.path.join(d.state_dir, "sandboxes", src, "upper")
        ns = ["nsenter", "-t", str(d.pid), "-m", "--"]
        t = time.perf_counter()
        subprocess.run(ns + ["cp", "-a", upper, upper + ".cp"], check=True)
        cp_ms = (time.perf_counter() - t) * 1000
        subprocess.run(ns + ["rm", "-rf", upper + ".cp"], check=True)
        ticks = "/tmp/bench-ticks"
        self.call("command.run", {"sandbox": src, "cmd": "python3", "args": ["-c", TICKER, ticks],
                                  "detached": True})
        W.World.wait_until(lambda: d.ctl("exec", src, "--", "test", "-s", ticks)[0] == 0, 30, "the ticker")

        def frozen_during(t0, t1):
            _c, out, _e = d.ctl("exec", src, "--", "cat", ticks)
            worst = 0.0
            for line in out.splitlines():
                p = line.split()
                if len(p) != 2:
                    continue
                end, gap = float(p[0]), float(p[1])
                if end >= t0 and end - gap / 1000 <= t1:
                    worst = max(worst, gap)
            return worst

        t0 = time.time()
        snap = self.call("sandbox.snapshot", {"name": src})["id"]
        t1 = time.time()
        snap_call = (t1 - t0) * 1000
        snap_frozen = frozen_during(t0, t1)
        t0 = time.time()
        self.call("sandbox.fork", {"sourceSandbox": src, "name": src + "-fork"})
        t1 = time.time()
        fork_call = (t1 - t0) * 1000
        fork_frozen = frozen_during(t0, t1)
        # Right after a write that is still in the page cache: the data
        # has to reach the disk for the copy, not while the source is
        # frozen.
        self.call("command.run", {"sandbox": src, "cmd": "sh", "args": ["-c",
                  "head -c %dM /dev/urandom > /workspace/data/dirty" % (mib // 2)]})
        t0 = time.time()
        dsnap = self.call("sandbox.snapshot", {"name": src})["id"]
        t1 = time.time()
        dirty_call = (t1 - t0) * 1000
        dirty_frozen = frozen_during(t0, t1)
        self.row("snapshot_freeze", "snapshot of a running sandbox, %d MiB written: source frozen" % mib,
                 snap_frozen, "ms", "cp -a of its upper", cp_ms, "<= 50 ms (nothing changes during it)",
                 value_goal=50.0, extra={"call_ms": round(snap_call, 1), "mib": mib})
        self.row("fork_freeze", "fork of a running sandbox, %d MiB written: source frozen" % mib,
                 fork_frozen, "ms", "cp -a of its upper", cp_ms, "<= 50 ms (nothing changes during it)",
                 value_goal=50.0, extra={"call_ms": round(fork_call, 1), "mib": mib})
        self.row("snapshot_freeze_dirty", "snapshot right after %d MiB more written, unsynced: source frozen"
                 % (mib // 2), dirty_frozen, "ms", "the call", dirty_call, "<= 50 ms (nothing changes during it)",
                 value_goal=50.0, extra={"call_ms": round(dirty_call, 1), "mib": mib // 2})
        for name in (src + "-fork", src):
            self.call("sandbox.delete", {"name": name})
        for s in (snap, dsnap):
            self.call("snapshot.delete", {"id": s})

    # ------------------------------------------- copies against their size
    def copies(self, rounds, sizes=(1, 1024)):
        """Fork and snapshot of a running and of a stopped sandbox with
        `sizes` MiB written (issue #21 item 4: a copy in O(1) of the bytes):
        the median call of `rounds`, each 1 GiB row beside its 1 MiB one.
        One source per size, both made first; the rounds interleave them
        (the order alternating), so load from elsewhere on the machine
        slows both sides of a ratio alike."""
        got, samples = {}, {}
        srcs = {mib: "b%s-cp%d" % (self.tag, mib) for mib in sizes}
        for mib, src in srcs.items():
            # One disk size for both, so only the bytes written differ.
            self.call("sandbox.create", {"name": src, "networkPolicy": "deny-all", "persistent": True,
                                         "timeout": 3600000, "resources": {"diskMiB": COPY_DISK_MIB}})
            self.call("command.run", {"sandbox": src, "cmd": "sh", "args": ["-c",
                      "mkdir -p /workspace/data && head -c %dM /dev/urandom > /workspace/data/blob && sync" % mib]})
        for state in ("running", "stopped"):
            if state == "stopped":
                for src in srcs.values():
                    self.call("sandbox.stop", {"name": src})
            times = {(op, mib): [] for op in ("fork", "snapshot") for mib in sizes}
            for i in range(rounds):
                for mib in (sizes if i % 2 == 0 else tuple(reversed(sizes))):
                    src = srcs[mib]
                    t = time.perf_counter()
                    self.call("sandbox.fork", {"sourceSandbox": src, "name": "%s-f%d" % (src, i)})
                    times[("fork", mib)].append((time.perf_counter() - t) * 1000)
                    self.call("sandbox.delete", {"name": "%s-f%d" % (src, i)})
                    t = time.perf_counter()
                    snap = self.call("sandbox.snapshot", {"name": src})["id"]
                    times[("snapshot", mib)].append((time.perf_counter() - t) * 1000)
                    self.call("snapshot.delete", {"id": snap})
            for (op, mib), v in times.items():
                got[(op, state, mib)] = pct(v, 50)
                samples[(op, state, mib)] = [round(x, 1) for x in v]
        for src in srcs.values():
            self.call("sandbox.delete", {"name": src})
        lo, hi = sizes
        for op in ("fork", "snapshot"):
            for state, goal in (("stopped", 50.0), ("running", 100.0)):
                small, big = got[(op, state, lo)], got[(op, state, hi)]
                self.row("%s_%s_1m" % (op, state), "%s of a %s sandbox, %d MiB written" % (op, state, lo),
                         small, "ms", "goal %d ms" % goal, None, "<= %d ms" % goal, value_goal=goal,
                         extra={"mib": lo, "rounds": rounds, "samples_ms": samples[(op, state, lo)]})
                self.row("%s_%s_1g" % (op, state), "%s of a %s sandbox, %d MiB written" % (op, state, hi),
                         big, "ms", "%s_%s_1m" % (op, state), small, "<= 1.2x and <= %d ms" % goal,
                         ratio_goal=1.2, value_goal=goal,
                         extra={"mib": hi, "rounds": rounds, "samples_ms": samples[(op, state, hi)]})

    # ------------------------------------------------------ idle sandboxes
    def charged_kib(self):
        """memory.current of the world's cgroup (v2), where the daemon and
        every session nest: user and kernel memory (slab, page tables,
        sockets) charged to them, less the file page cache; None without a
        memory controller."""
        for dirpath in self.w.cgroup_dirs:
            for knob, pfx in (("memory.current", ""), ("memory.usage_in_bytes", "total_")):  # v2, v1
                try:
                    with open(os.path.join(dirpath, knob)) as f:
                        used = int(f.read())
                    with open(os.path.join(dirpath, "memory.stat")) as f:
                        st = dict(line.split() for line in f if len(line.split()) == 2)
                except OSError:
                    continue
                # Less the file page cache (the sessions' disk images,
                # reclaimable at will): what the sandboxes hold.
                cache = int(st.get(pfx + "active_file", 0)) + int(st.get(pfx + "inactive_file", 0))
                return (used - cache) // 1024
        return None

    def idle(self, want, budget_s):
        """idle_sandboxes: `want` deny-all sandboxes alive at once (created
        20 at a time on 4 connections, within budget_s seconds), and the
        host memory each costs, machine-wide: the daemon's RSS growth, plus
        the kernel's memory growth (/proc/meminfo: SUnreclaim, KernelStack,
        PageTables, SecPageTables, Percpu: namespaces, mounts, veths,
        nftables, cgroups, loop devices, page tables), plus the sessions'
        processes' PSS (sandbox-init and whatever an idle sandbox runs),
        divided by the number alive. The page cache of the disk images is
        left out (reclaimable at will). The cgroup-charged figure and free(1)'s
        used-memory delta are kept beside it. Every sandbox asked for is
        deleted at the end, also when a create fails or the bench is
        interrupted half-way."""
        d = self.d
        before_mem, before_rss = meminfo(), rss_kib(d.pid)
        before_used, charged_before = used_kib(), self.charged_kib()
        asked, names = [], []
        conns = [d.connect(600) for _ in range(4)]
        try:
            deadline = time.monotonic() + budget_s
            while len(names) < want and time.monotonic() < deadline:
                batch = ["b%s-i%d" % (self.tag, len(asked) + i) for i in range(min(20, want - len(names)))]
                asked += batch
                ids = [(conns[i % 4], conns[i % 4].start("sandbox.create", {"name": x, "networkPolicy": "deny-all",
                                                                               "timeout": 3600000}))
                       for i, x in enumerate(batch)]
                for x, (c, rid) in zip(batch, ids):
                    m = c.wait(rid, 600)
                    if "error" in m:
                        print("bench: idle sandbox %d: %s (stopping there)" % (len(names), m["error"]))
                        deadline = 0
                        continue
                    names.append(x)
            created_s = budget_s - max(0.0, deadline - time.monotonic()) if deadline else None
            # Let the kernel finish deferred work (RCU frees, per-cpu
            # caches) before reading the figures.
            time.sleep(2)
            after_mem, after_rss = meminfo(), rss_kib(d.pid)
            after_used, charged_after = used_kib(), self.charged_kib()
            procs, _rss, pss = children_rss(d.pid)
            count = len(names)
            k = max(1, count)
            kernel = sum(after_mem.get(x, 0) - before_mem.get(x, 0) for x in KERNEL_MEMINFO)
            daemon = after_rss - before_rss
            per = (daemon + kernel + pss) / k
            extra = {"count": count, "count_goal": 1000, "daemon_rss_kib_each": round(daemon / k, 1),
                     "kernel_kib_each": round(kernel / k, 1),
                     "kernel_kib_each_by_field": {x: round((after_mem.get(x, 0) - before_mem.get(x, 0)) / k, 1)
                                                  for x in KERNEL_MEMINFO},
                     "sessions_pss_kib_each": round(pss / k, 1),
                     "session_processes": procs,
                     "used_delta_kib_each": round((after_used - before_used) / k, 1),
                     "cgroup_charged_kib_each": round((charged_after - charged_before) / k, 1)
                     if charged_before is not None and charged_after is not None else None}
            if created_s is not None:
                extra["create_seconds"] = round(created_s, 1)
            self.row("idle_sandboxes", "%d idle sandboxes alive at once: host memory each" % count,
                     per, "KiB", "goal 1024 KiB each, 1000 alive", 1024.0, "<= 1.0x, and 1000 alive",
                     ratio_goal=1.0, count_goal=(count, 1000), extra=extra)
            print("  %-26s daemon RSS %.1f + kernel %.1f + sessions' PSS %.1f KiB each (%d processes); "
                  "cgroup-charged %s, free(1) used delta %.1f KiB each; kernel: %s"
                  % ("", daemon / k, kernel / k, pss / k, procs, extra["cgroup_charged_kib_each"],
                     extra["used_delta_kib_each"],
                     ", ".join("%s %.1f" % kv for kv in extra["kernel_kib_each_by_field"].items())), flush=True)
        finally:
            # Every name asked for, created or not (a create whose answer
            # was lost may have made it): "not found" is fine.
            for j in range(0, len(asked), 20):
                ids = [(conns[i % 4], conns[i % 4].start("sandbox.delete", {"name": x}))
                       for i, x in enumerate(asked[j:j + 20])]
                for c, rid in ids:
                    c.wait(rid, 600)
            for c in conns:
                c.close()

    # ------------------------------------------- creates at a sustained rate
    def rate(self, rounds, secs, clients=20):
        """create_rate_20: sandbox create + delete cycles per second with
        `clients` clients at once (a thread and a connection each, looping
        for `secs` seconds), beside bwrap --unshare-all true runs per second
        with as many at once, in alternating phases (the order swapped every
        round); the median phase's rate of each. A create is counted with
        its delete: a rate sustained that long needs both. Every sandbox a
        client made is deleted, also when the bench stops half-way."""
        d, tag = self.d, self.tag
        errors = []
        if not shutil.which("bwrap"):
            raise SystemExit("bench: bwrap is not installed (scripts/install-deps installs it)")

        def sbx_phase(r):
            done = [0] * clients
            stop = threading.Event()

            def client(k):
                conn = d.connect(600)
                name = None
                try:
                    j = 0
                    while not stop.is_set() and not errors:
                        name = "b%s-k%d-%d-%d" % (tag, r, k, j)
                        m = conn.call("sandbox.create", {"name": name, "networkPolicy": "deny-all"}, 600)
                        if "error" in m:
                            errors.append(m["error"])
                            break
                        m = conn.call("sandbox.delete", {"name": name}, 600)
                        if "error" in m:
                            errors.append(m["error"])
                            break
                        name = None
                        conn.notes.clear()
                        done[k] += 1
                        j += 1
                except Exception as e:  # noqa: BLE001 - reported as the phase's error
                    errors.append("client %d: %r" % (k, e))
                finally:
                    if name:
                        conn.call("sandbox.delete", {"name": name}, 600)
                    conn.close()
            return run_phase(client, done, stop)

        def bwrap_phase(r):
            done = [0] * clients
            stop = threading.Event()

            def client(k):
                while not stop.is_set() and not errors:
                    p = subprocess.run(BWRAP, stdin=subprocess.DEVNULL, capture_output=True)
                    if p.returncode != 0:
                        errors.append("bwrap: exit %d: %s" % (p.returncode, p.stderr[:200]))
                        break
                    done[k] += 1
            return run_phase(client, done, stop)

        def run_phase(client, done, stop):
            threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            time.sleep(secs)
            stop.set()
            for t in threads:
                t.join()
            if errors:
                raise SystemExit("bench: create_rate: %s" % json.dumps(errors[0])[:400])
            return sum(done) / (time.perf_counter() - t0)

        sbx, bw = [], []
        for r in range(rounds):
            for which in ((0, 1) if r % 2 == 0 else (1, 0)):
                if which == 0:
                    sbx.append(sbx_phase(r))
                else:
                    bw.append(bwrap_phase(r))
        self.row("create_rate_%d" % clients, "%d clients at once: create+delete per second (median)" % clients,
                 pct(sbx, 50), "1/s", "%d bwrap --unshare-all true at once" % clients, pct(bw, 50), ">= 0.7x",
                 ratio_goal=0.7, extra={"clients": clients, "rounds": rounds, "seconds_each": secs,
                                        "sandbox_rates": [round(x, 1) for x in sbx],
                                        "bwrap_rates": [round(x, 1) for x in bw]})

    # ------------------------------------------- policy, DNS, TCP at 1 and N
    def network(self, n_sessions, real_extra, iters, mib, runs):
        w, c = self.w, self.rpc
        probe, direct = w.name("probe"), w.name("direct")
        pol = [{"subnets": {"allow": [W.PUB_API_ADDR + "/32"]}, "allow": ["api.public.test"]},
               {"subnets": {"allow": [W.PUB_API_ADDR + "/32", W.PUB_OTHER_ADDR + "/32"]},
                "allow": ["api.public.test", "other.public.test"]}]
        self.call("sandbox.create", {"name": probe, "networkPolicy": pol[0], "timeout": 3600000})
        self.call("sandbox.create", {"name": direct, "networkPolicy": "allow-all", "timeout": 3600000})
        w._spawn("bench-sink", "net", [sys.executable, "-c", SINK, W.PUB_API_ADDR, str(SINK_PORT)], ready=True)

        def in_sbx(name, code, *args):
            rc, out, err = w.ctl("exec", name, "--", "python3", "-c", code, *[str(a) for a in args], timeout=600)
            if rc != 0:
                raise SystemExit("bench: in %s: exit %d: %s" % (name, rc, err.strip()[:300]))
            return json.loads(out.strip().splitlines()[-1])

        gw = [l.split()[1] for l in w.ctl("exec", probe, "--", "cat", "/etc/resolv.conf")[1].splitlines()
              if l.startswith("nameserver")][0]
        in_sbx(probe, QUERIES, gw, "api.public.test", 5)
        in_sbx(direct, QUERIES, W.DNS_ADDR, "api.public.test", 5)

        def measure():
            upd = []
            for i in range(iters):
                t = time.perf_counter()
                self.call("sandbox.update", {"name": probe, "networkPolicy": pol[(i + 1) % 2]})
                upd.append((time.perf_counter() - t) * 1000)
            W.World.wait_until(lambda: w.ctl("exec", probe, "--", "getent", "ahostsv4", "api.public.test")[0] == 0,
                               10, "the DNS filter after the updates")
            # Interleaved in rounds, the filtered and the straight query,
            # and a new TCP connection to an address subnets.allow holds
            # beside the same from the allow-all sandbox.
            filt, straight, conn_probe, conn_direct = [], [], [], []
            for r in range(4):
                steps = [lambda: filt.extend(in_sbx(probe, QUERIES, gw, "api.public.test", iters)),
                         lambda: straight.extend(in_sbx(direct, QUERIES, W.DNS_ADDR, "api.public.test", iters)),
                         lambda: conn_probe.extend(in_sbx(probe, CONNECTS, W.PUB_API_ADDR, W.LISTEN_PORT, iters)),
                         lambda: conn_direct.extend(in_sbx(direct, CONNECTS, W.PUB_API_ADDR, W.LISTEN_PORT, iters))]
                for step in steps[r:] + steps[:r]:
                    step()
            return {"update": pct(upd, 50), "dns_added": pct(filt, 50) - pct(straight, 50),
                    "dns_filter": pct(filt, 50), "dns_straight": pct(straight, 50),
                    "connect": pct(conn_probe, 50), "connect_direct": pct(conn_direct, 50)}

        at1 = measure()
        sessions1 = count_sessions(w)
        # The probe is the one custom-policy session yet: the shape the
        # nft-made sessions copy (bench_policy.SessionTemplate).
        listing = w.run_in_host(["nft", "list", "table", "inet", "sandboxd"]).stdout
        template = BP.SessionTemplate(listing, BP.custom_session_ifname(listing))
        fake_names = lambda n: ["sbx%d" % i for i in range(FAKE_BASE, FAKE_BASE + n)]
        extra = [w.name("load%d" % i) for i in range(real_extra)]
        for k in range(0, len(extra), 25):
            ids = [c.start("sandbox.create", {"name": x, "networkPolicy": {
                "allow": ["other.public.test"], "subnets": {"deny": ["5.5.4.%d/32" % i]}}, "timeout": 3600000})
                for i, x in enumerate(extra[k:k + 25], k)]
            for i in ids:
                r = c.wait(i, 600)
                if "error" in r:
                    raise SystemExit("bench: create: %s" % r["error"])
        fake = max(0, n_sessions - 2 - real_extra)
        tcp_sbx, tcp_plain = [], []
        try:
            if fake:
                nft_file(w, template.script(fake_names(fake), "add"))
            sessions_n = count_sessions(w)
            atn = measure()
            # TCP throughput with N sessions loaded: from the allowlisted
            # sandbox to the sink, beside the same transfer from a namespace
            # on a plain veth to the internet namespace (no nftables, no
            # forwarding), in alternating rounds.
            with w.neighbour() as nb:
                for _ in range(runs):
                    tcp_sbx += in_sbx(probe, SENDER, W.PUB_API_ADDR, SINK_PORT, mib, 1)
                    p = nb.run(["python3", "-c", SENDER, W.PUB_API_ADDR, str(SINK_PORT), str(mib), "1"],
                               timeout=600)
                    if p.returncode != 0:
                        raise SystemExit("bench: plain veth sender: %s" % p.stderr.strip()[:300])
                    tcp_plain += json.loads(p.stdout.strip().splitlines()[-1])
        finally:
            if fake:
                nft_file(w, template.script(fake_names(fake), "delete",
                                            w.run_in_host(["nft", "list", "table", "inet", "sandboxd"]).stdout))
        for x in extra + [probe, direct]:
            c.call("sandbox.delete", {"name": x}, 600)
        c.notes.clear()
        ex = {"sessions": sessions_n}
        self.row("policy_update_1", "policy update, %d session(s) (p50)" % sessions1, at1["update"], "ms",
                 "goal 2 ms", 2.0, "<= 2 ms", value_goal=2.0, extra={"sessions": sessions1})
        self.row("policy_update_n", "policy update, %d sessions (p50)" % sessions_n, atn["update"], "ms",
                 "policy update at 1 session", at1["update"], "<= 1.2x, and <= 2 ms",
                 ratio_goal=1.2, value_goal=2.0, extra=ex)
        self.row("dns_added_1", "DNS through the filter, added latency, %d session(s)" % sessions1,
                 at1["dns_added"], "ms", "straight to the resolver", at1["dns_straight"], "<= 0.3 ms",
                 value_goal=0.3, extra={"sessions": sessions1})
        self.row("dns_added_n", "DNS through the filter, added latency, %d sessions" % sessions_n,
                 atn["dns_added"], "ms", "added latency at 1 session", at1["dns_added"], "<= 1.2x, and <= 0.3 ms",
                 ratio_goal=1.2, value_goal=0.3, extra=ex)
        self.row("connect_1", "new TCP connection, allowed by subnets.allow, %d session(s) (p50)" % sessions1,
                 at1["connect"], "ms", "the same from an allow-all sandbox", at1["connect_direct"], "reported",
                 extra={"sessions": sessions1})
        self.row("connect_n", "new TCP connection, allowed by subnets.allow, %d sessions (p50)" % sessions_n,
                 atn["connect"], "ms", "new TCP connection at 1 session", at1["connect"], "<= 1.2x",
                 ratio_goal=1.2, extra=dict(ex, connect_direct_ms=round(atn["connect_direct"], 4)))
        self.row("tcp_throughput_n", "TCP through an allowlist, %d sessions loaded (MiB/s, p50)" % sessions_n,
                 pct(tcp_sbx, 50), "MiB/s", "the same over a plain veth", pct(tcp_plain, 50), ">= 0.9x",
                 ratio_goal=0.9, extra=dict(ex, mib=mib, runs=runs))


def main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds: a run of about fifteen minutes (1000 sessions and idle sandboxes still)")
    ap.add_argument("--json", default=os.path.join(W.BUILD, "bench.json"))
    ap.add_argument("--pool", type=int, default=POOL_MIB, metavar="MIB",
                    help="the storage pool of the freeze and copies parts, MiB (0: none)")
    ap.add_argument("--only", default="",
                    help="comma-separated parts: lifecycle,pool,burst,rate,freeze,copies,network,idle")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("bench: needs root")
        return 1
    q = a.quick
    # The scale rows (sessions, idle) are at 1000 in both modes: --quick
    # has fewer rounds, real sandboxes among the sessions and bytes.
    p = dict(iterations=30 if q else 60, burst_rounds=2 if q else 5, sessions=1000,
             real_extra=16 if q else 48, net_iters=30 if q else 60, tcp_mib=64 if q else 256,
             tcp_runs=5 if q else 7, freeze_mib=1024, idle=1000, idle_budget=300 if q else 900,
             rate_rounds=3 if q else 5, rate_secs=4 if q else 10)
    all_parts = ["lifecycle", "pool", "burst", "rate", "freeze", "copies", "network", "idle"]
    parts = set(x for x in a.only.split(",") if x) or set(all_parts)
    if parts - set(all_parts):
        print("bench: unknown part(s) %s in --only; the parts: %s" % (", ".join(sorted(parts - set(all_parts))),
                                                                    ",".join(all_parts)))
        return 2
    started = time.time()
    with W.World(quiet=False) as w:
        # The smallest disk by default: each holds its blocks on the host,
        # and the idle part makes up to 1000 sandboxes; the parts that
        # write a GiB ask for COPY_DISK_MIB.
        config = {"diskMiB": 16}
        d = w.start_sandboxd(config)
        print("bench: %s mode%s, sandboxd pid %d; %s" % ("quick" if q else "full",
              ", storage pool %d MiB" % a.pool if a.pool else "", d.pid,
              ", ".join("%s=%s" % kv for kv in sorted(p.items()))), flush=True)
        print("  %-26s %10s %-6s %-34s %10s %7s  %-30s %s" % ("row", "value", "unit", "peer", "peer",
                                                             "ratio", "goal", ""))
        b = Bench(w, d, q)
        if "lifecycle" in parts:
            b.lifecycle(p["iterations"])
        if "pool" in parts:
            b.pool(p["iterations"])
        if "burst" in parts:
            b.burst(p["burst_rounds"], 20)
        if parts & {"freeze", "copies"}:
            # The pool's rows first (the recommended storage, judged), then
            # the default storage's beside them.
            storages = ([("", True, dict(config, storage={"pool": {"sizeMiB": a.pool}}))] if a.pool else []) + \
                [("_images" if a.pool else "", not a.pool, config)]
            for suffix, judged, cfg in storages:
                b.suffix, b.judged = suffix, judged
                b.use_daemon(cfg, "bench" + (suffix or "-storage").replace("_", "-"))
                if "freeze" in parts:
                    b.freeze(p["freeze_mib"])
                if "copies" in parts:
                    # A pool copy takes milliseconds: rounds enough for a
                    # steady median; an image copy of a GiB takes seconds.
                    b.copies((9 if q else 25) if judged else (3 if q else 5))
            b.suffix, b.judged = "", True
            b.use_daemon(config, "bench-main")
        if "network" in parts:
            b.network(p["sessions"], p["real_extra"], p["net_iters"], p["tcp_mib"], p["tcp_runs"])
        if "idle" in parts:
            b.idle(p["idle"], p["idle_budget"])
        # Last: the kernel tears down the namespaces of the hundreds of
        # sandboxes it deletes in the background for a while after, which
        # would slow the policy updates measured after it.
        if "rate" in parts:
            b.rate(p["rate_rounds"], p["rate_secs"])
        b.rpc.close()
        w.stop_sandboxd(b.d)
    out = {"mode": "quick" if q else "full",
           "storage": {"freeze_copies": {"poolMiB": a.pool, "images": "rows suffixed _images"} if a.pool else "images",
                       "other_parts": "images"},
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
           "seconds": round(time.time() - started, 1), "params": p, "rows": b.rows}
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
    os.replace(a.json + ".tmp", a.json)
    met = sum(1 for r in b.rows if r["met"])
    judged = sum(1 for r in b.rows if r["met"] is not None)
    print("bench: %d of %d rows meet their goal; %s written (%.0f s)" % (met, judged, a.json, out["seconds"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
