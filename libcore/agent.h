/* The protocol between sandboxd and sandbox-init (PID 1 inside a sandbox).
 *
 * Transport: a SOCK_SEQPACKET socketpair made by sandboxd before clone; init
 * gets its end as fd 3 (AGENT_FD) and nothing else but 0-2 (/dev/null). The
 * socket is never reachable by path from inside the sandbox. Each packet is
 * one JSON object (UTF-8, no trailing newline), at most AGENT_MAX_PACKET
 * bytes; larger payloads (file contents) are split by the sender into
 * chunks (see fs.write / fs.read below).
 *
 * Startup:
 *   sandboxd → init   {"op":"setup", "hostname":S, "rootfs":DIR, "lower":DIR,
 *                      "upper":DIR, "work":DIR,
 *                      "binds":[{"src":S,"dst":S,"ro":B}...],
 *                      "netSlot":N|-1, "poolBase":"10.201.0.0", "poolPrefix":16,
 *                      "env":{"K":"V"...}, "tmpSize":BYTES, "userns":B,
 *                      "archiveLibs":[PATH...]}
 *   "archiveLibs" are the host files of libarchive and the libraries it
 *   needs, each after those it needs (core_archive_lib_files): init opens
 *   them before its root changes and a copy's child loads libarchive from
 *   those fds (cli/lazy/archive.h); without them copies fail.
 *   With "userns": true (init is root of its own user namespace) the packet
 *   carries detached mount fds (SCM_RIGHTS): fd 0 of that array is the root
 *   overlay (lower/upper/work are then not mounted by init), and each bind
 *   has "fd":N, the index of its mount; init attaches them instead of
 *   opening the paths, which it could not reach.
 *   init → sandboxd   {"ev":"ready"} or {"ev":"error","message":S} (then init exits 1)
 *   sandboxd → init   {"op":"seccomp","bpf":BASE64}  (optional, once, before
 *                      any run) the command filter of libcore/seccomp.h as
 *                      sandboxd compiled it; init keeps it unless it has one,
 *                      and compiles its own when none came
 *   "rootfs": null skips the root filesystem (init stays on the filesystem it
 *   started on; for tests). init refuses to run unless it is PID 1.
 *
 * Commands (id chosen by sandboxd, unique per session):
 *   → {"op":"run","id":N,"argv":[S...],"env":[ "K=V"... ],"cwd":S,"uid":U,"gid":G,
 *      "tty":B,"rows":R,"cols":C,"stdin":B,"logBytes":L,"window":W,"container":S?}
 *      stdin false: stdin is /dev/null. logBytes (0 to 2^30, default 0):
 *      init keeps the last L bytes of each output stream it read (the
 *      daemon's commandLogBytes), for a reconnecting daemon ("log" below).
 *      window (0 to 2^26, default 0: none): per-command flow control, so
 *      that one client that does not read stalls its own command only and
 *      never the channel: once W bytes of the command's output were sent
 *      and not credited, init stops reading that command's pipes (the
 *      command blocks on write, as under a slow terminal) until
 *   → {"op":"credit","id":N,"bytes":B}   the daemon passed B more bytes of
 *      command N's output on (or kept them: nobody is attached); init
 *      reads the pipes again once fewer than W are outstanding. Output
 *      read at the command's reap (at most 1 MiB per stream) is sent
 *      regardless. sandboxd holds init to the window it granted: output of
 *      a command past W + AGENT_WINDOW_SLACK bytes not credited is a
 *      protocol error, and the rest of that command's output is dropped. When the connection to sandboxd is lost every window
 *      is dropped (the next daemon's clients are not attached to them).
 *   ← {"ev":"started","id":N,"pid":P,"window":W}  or  {"ev":"exit","id":N,"code":127,"error":S}
 *      "window" (W of the run) says that init keeps the window; without
 *      it (an older init) the daemon sends no credit
 *   ← {"ev":"output","id":N,"stream":"stdout"|"stderr","data":BASE64}
 *   ← {"ev":"exit","id":N,"code":C,"usage":{"cpuMs":T,"memoryPeakBytes":B}}
 *      C = exit status, or 128+signal; sent after all output of that
 *      command. "usage" (absent when init did not reap it itself) is
 *      wait4's rusage of the command's process: T = ru_utime + ru_stime in
 *      ms (it and the descendants it waited for), B = ru_maxrss in bytes
 *      (the largest resident set of one of them); sent again with a kept
 *      exit after a reconnection
 *   → {"op":"ack","id":N}   sandboxd forgot command N (it left the
 *      daemon's table of finished commands). Until then init keeps the
 *      finished command (at most 256 such; the oldest go first): it is in
 *      "list" with "exited": true and its exit event is sent again after a
 *      reconnection, so a restarted or killed daemon, whether or not it
 *      had read the exit, loses no exit status.
 *   → {"op":"logcap","id":N,"bytes":B}   the daemon cut command N's logs to
 *      their last B bytes per stream (0: dropped whole, for its budget);
 *      init cuts its copy the same way
 *   → {"op":"write","id":N,"data":BASE64}   → {"op":"close_stdin","id":N}
 *   → {"op":"write","id":N,"data":BASE64,"acked":true,"total":T,"req":R}
 *      an acked write: one client write of T bytes (at most AGENT_STDIN_MAX)
 *      sent as chunks, each "acked", "total" on its first, "req" on its
 *      last (one chunk: both).
 *      init takes the whole write or none of it: when T bytes do not fit
 *      in what it queues for the command's stdin (AGENT_STDIN_MAX), or the
 *      stdin is closed, every chunk of that write is dropped and the last
 *      is answered {"ev":"fs","req":R,"errno":E,"message":S} (ENOBUFS: the
 *      command is not reading; EPIPE: stdin closed; ESRCH: no such running
 *      command); else {"ev":"fs","req":R,"result":{}} once all are queued.
 *      The chunks of one write are sent back to back, nothing between.
 *      init says it answers such writes with "writeAcks":true in "started"
 *      and "list"; an older init (no "writeAcks") gets plain writes.
 *   → {"op":"resize","id":N,"rows":R,"cols":C}
 *   → {"op":"kill","id":N,"signal":S}   signal to the command's process group
 *      (S a number or a name, "TERM" or "SIGTERM"; default SIGKILL)
 *   Run defaults: cwd /workspace (or / when that is missing and no cwd was
 *   given), uid/gid SANDBOX_UID/GID, 24x80; "env" entries override setup's
 *   env; PATH defaults to /usr/local/sbin:...:/bin. A command that never ran
 *   gets only the exit event: code 127 when the program or cwd is missing,
 *   126 otherwise, "error" e.g. "foo: no such file or directory".
 *   close_stdin on a tty sends VEOF (^D) to the pty.
 *   A malformed packet, or a write naming no running command, gets
 *   {"ev":"error","message":S} (with "id" when it had one); init goes on.
 *   kill, resize and close_stdin of a command that has exited are no-ops.
 *
 * File operations, run by init inside the sandbox's mount namespace with
 * fsuid/fsgid 1000 (so the sandbox user's permissions apply and no host path
 * is ever followed):
 *   → {"op":"fs","req":N,"action":"write","path":S,"mode":M,"data":BASE64,
 *      "append":B}   (append: false for the first chunk, true for the rest)
 *   → {"op":"fs","req":N,"action":"read","path":S,"offset":O}  reply data is
 *      at most AGENT_FS_CHUNK bytes from offset; "eof":B says whether more follows
 *   → {"op":"fs","req":N,"action":"mkdir","path":S,"parents":B}
 *   → {"op":"fs","req":N,"action":"list"|"stat","path":S}
 *   → {"op":"fs","req":N,"action":"remove","path":S,"recursive":B}
 *   ← {"ev":"fs","req":N,"result":{...}}   (read: {"data":B64,"size":S,"eof":B};
 *      stat: Stat object of docs/API.md; list: {"entries":[Stat...]}; else {})
 *   ← {"ev":"fs","req":N,"errno":E,"message":S}
 *   Relative paths are resolved against /workspace. write applies "mode"
 *   (default 0644) only when it creates the file. A list that would not fit
 *   in one packet fails with EFBIG.
 *
 * File watches (libcore/init/watch.c; W chosen by sandboxd, unique per
 * session), each run by a child of init confined as a command of the
 * sandbox user, inside the sandbox:
 *   → {"op":"watch","id":W,"path":S,"recursive":B}
 *   ← {"ev":"watch","id":W,"ready":true?,"events":[E...]}  batches of at most
 *      64 KiB; "ready" once the watches are in place (before any event).
 *      E = {"type":"created"|"modified"|"deleted"|"renamed"|"overflow",
 *      "path":S?,"isDir":B?,"oldPath":S?,"reason":S?,"dropped":N?}
 *      (docs/API.md "fs.watch")
 *   → {"op":"unwatch","id":W}   ends it (SIGKILL to its child)
 *   ← {"ev":"watch_end","id":W,"reason":S}  or  {"ev":"watch_end","id":W,
 *      "errno":E,"message":S}  once its child is reaped: reason "stopped"
 *      (unwatch), "deleted" (the watched path went), "sandbox_stopped"
 *      (init is stopping); errno when it could not start. When the
 *      connection to sandboxd is lost every watch is ended.
 *
 * Containers (libcore/init/container.c; docs/API.md "Containers"):
 *   → {"op":"ctrfd","index":I}   one fd per packet (SCM_RIGHTS), queued in
 *      order (I = 0, 1, ...; 0 drops whatever an earlier batch left) for
 *      the next create: [0] the container's root overlay (a detached mount
 *      sandboxd made), then the mounts' detached trees, then the
 *      cgroup.procs files (opened O_WRONLY by sandboxd) of its cgroups
 *   → {"op":"container","action":"create","req":N,"name":S,
 *      "mounts":[{"destination":S,"fd":I}...],"cgroups":[I...],
 *      "readOnlyRoot":B,"ownPids":B,"tmpSize":BYTES}   I index the queued fds
 *   → {"op":"container","action":"delete"|"list","req":N,"name":S}
 *   ← {"ev":"fs","req":N,"result":{}} (list: {"containers":[S...]})  or
 *      {"ev":"fs","req":N,"errno":E,"message":S}
 *   A create makes the container's mount namespace under the sandbox's
 *   (in a helper init forked before any seccomp filter): the overlay as its
 *   root, the sandbox's /dev, /sys, /etc/resolv.conf and /etc/hosts (and
 *   /proc unless "ownPids") cloned in; with "ownPids" a PID namespace of
 *   its own whose PID 1 (sandbox-ctrinit, in the container's cgroups)
 *   mounts a /proc of it with the sandbox's masks; a tmpfs /tmp of tmpSize bytes, the mounts at
 *   their destinations (resolved beneath the new root, no symlink
 *   followed, made when missing), read-only root when asked, pivot_root.
 *   A run with "container":S joins that container's cgroups (writes "0"
 *   to each cgroup.procs fd) and mount namespace (setns) before anything
 *   else in its child, which init forks into the container's own PID
 *   namespace when it has one. delete only forgets the namespace and fds (sandboxd
 *   has killed its processes through its cgroup).
 *
 * Hostname:
 *   → {"op":"hostname","name":S}   sethostname(2) in the sandbox's UTS
 *      namespace (a warm pool session adopted under its sandbox's name):
 *      no reply; a failure comes as {"ev":"error","message":S}. Later
 *      requests see the new name (init reads its socket in order).
 *
 * Stop:
 *   → {"op":"stop","graceMs":N}   SIGTERM to every process, SIGKILL after
 *      graceMs, then init exits 0.
 *
 * Reconnection (live restore): sandboxd may also pass a listening
 * SOCK_SEQPACKET Unix socket as fd 4 (AGENT_LISTEN_FD), bound at a root-only
 * path outside the sandbox's mount namespace. When the agent socket closes
 * (sandboxd exited or crashed), init keeps its commands running; their
 * output waits in its pipes (a command that fills one blocks) and exits are
 * held. It then accepts one connection at a time on fd 4 from a peer with
 * the uid of the daemon that started it (SO_PEERCRED) and speaks the same
 * protocol, packet for packet, on the accepted socket. The first request
 * of a reconnected sandboxd is:
 *   → {"op":"list"}
 *   ← {"ev":"list","commands":[{"id":N,"pid":P,"exited":B,"meta":S}...],"logs":true}
 *      every command whose exit was not acknowledged yet (running ones
 *      first, then finished ones newest first, as many as fit in one
 *      packet); "meta" is the
 *      string given as "meta" in its run (at most 4096 bytes), kept opaque
 *   with "logs": true (after a lost connection), every kept log follows,
 *   oldest bytes first, in pieces of at most 64 KiB:
 *   ← {"ev":"log","id":N,"stream":"stdout"|"stderr","data":BASE64}
 *      the first piece of a stream also has "cap":L (its current bound),
 *      "truncated":B (bytes were dropped from its front), "offset":O (the
 *      count of the stream's bytes before the kept ones) and, when the
 *      daemon dropped it whole, "evicted":true
 *   ← {"ev":"logs_done"}
 *   then the held output and exit events follow (also every exit sent
 *   before but not acknowledged): output after the logs is output that
 *   came after them, never a byte of them again.
 *   Without fd 4, when the socket closes init stops with a grace of 0.
 */
#pragma once

#define AGENT_FD 3
#define AGENT_LISTEN_FD 4
#define AGENT_MAX_PACKET (256 * 1024)
#define AGENT_FS_CHUNK (128 * 1024)
/* Bytes of stdin init queues for one command that has not read them yet
 * (an acked "write" over it is refused whole, see above). */
#define AGENT_STDIN_MAX (16u * 1024 * 1024)
/* What an init that keeps a command's window ("window" above) may send of
 * its output beyond the window, not yet credited: one read past it (init
 * checks the window after each read of up to 64 KiB) and what it reads
 * regardless at the command's reap (up to 1 MiB and one more read, per
 * stream). sandboxd drops output of a command past window + this as a
 * forged init's (sandboxd/command.c); libcore/init/command.c asserts that
 * its own reads stay within it. */
#define AGENT_WINDOW_SLACK (3u * 64 * 1024 + 2u * 1024 * 1024)
#define SANDBOX_UID 1000
#define SANDBOX_GID 1000
