"""The README's tour, runnable: python3 examples/tour.py (SANDBOXD_SOCKET
names the daemon's socket when it is not /run/sandboxd/sandboxd.sock;
GIT_URL a repository to clone, default none)."""
import asyncio
import os
import sys

from sandboxd import AsyncSandbox, NotFoundError, Sandbox, SandboxError, Snapshot

source = {"type": "git", "url": os.environ["GIT_URL"], "depth": 1} if os.environ.get("GIT_URL") else None

# 1. A sandbox for the length of a with block: stopped (and, not being
#    persistent, deleted) on exit.
with Sandbox.create(source=source, network_policy={"allow": ["pypi.org", "*.pythonhosted.org"]},
                    env={"CI": "1"}, tags={"project": "tour"}, timeout=10 * 60 * 1000) as sb:
    print("sandbox", sb.name, sb.status)

    # 2. Files in and out.
    sb.write_files([{"path": "hello.py", "content": "print('hello from', __import__('socket').gethostname())"}])
    print(sb.read_file("hello.py") is not None, sb.read_file("missing.txt"))

    # 3. A command, its output streamed as it comes, and its result.
    r = sb.run_command("python3", ["hello.py"], stdout=sys.stdout)
    print("exit", r.exit_code, "in", r.duration_ms, "ms")

    # 4. Tighten the network policy of the running sandbox (atomically), and ask why.
    sb.update(network_policy={"allow": ["pypi.org"]})
    print(sb.check_policy("https://files.pythonhosted.org/packages/")["message"])

    # 5. A detached command: logs, stdin, wait.
    cmd = sb.run_command("sh", ["-c", "read name; echo hi $name"], detached=True)
    cmd.write("tour\n")
    for line in cmd.logs():
        print(line["stream"], line["data"].decode(), end="")
    print("exit", cmd.wait().exit_code)

    # Cut it off entirely, live: nothing leaves it from the next packet on.
    sb.update(network_policy="deny-all")
    print("policy now", sb.network_policy)

    # 6. A snapshot, and a sandbox made from it.
    snap = sb.snapshot()
    with Sandbox.create(source={"type": "snapshot", "snapshot_id": snap.id}, network_policy="deny-all") as copy:
        print("copy has", copy.fs.readdir("/workspace"))
    snap.delete()

# 7. Errors are typed.
try:
    Sandbox.get("no-such-sandbox")
except NotFoundError as e:
    print("not found:", e.reason)
except SandboxError as e:
    print("other error:", e.code, e.reason, e.field)


# 8. The same with asyncio; cancelling a task cancels its request on the daemon.
async def main() -> None:
    async with await AsyncSandbox.create(network_policy="deny-all") as sb:
        results = await asyncio.gather(*(sb.run_command("echo", [str(i)]) for i in range(3)))
        print([r.stdout().strip() for r in results])
        async for s in AsyncSandbox.list(tags={"project": "tour"}):
            print("still listed:", s.name)

asyncio.run(main())
print("snapshots left:", [s.id for s in Snapshot.list() if s.id == snap.id])
