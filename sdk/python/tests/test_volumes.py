"""Volumes against a real sandboxd, sync and asyncio: shared by several
sandboxes at once (read-write and read-only), listed page by page, deleted
only once nothing mounts them."""
import asyncio

import pytest

import leaks
from sandboxd import (AsyncSandbox, AsyncSandboxClient, AsyncVolume, InUseError, InvalidParamsError, NotFoundError,
                      Sandbox, SandboxError, Volume)


def _cleanup(client, sandboxes, volumes):
    """Deletes what a test made, sandboxes first (a mounted volume cannot
    go); what is already gone is fine."""
    for s in sandboxes:
        try:
            Sandbox.get(s, resume=False, client=client).delete()
        except NotFoundError:
            pass
    for v in volumes:
        try:
            Volume.delete(v, client=client)
        except NotFoundError:
            pass


def test_two_sandboxes_share_a_volume_read_only_refuses_writes_delete_waits_for_the_last_mount(world, client):
    vol_name = world.name("pyvol")
    names = [world.name("pyvw"), world.name("pyvr"), world.name("pyvro")]
    try:
        vol = Volume.create(vol_name, size="64M", tags={"t": "share"}, client=client)  # sent as sizeMiB 64
        assert (vol.name, vol.size_mib, vol.tags, vol.mounted_by) == (vol_name, 64, {"t": "share"}, [])
        assert isinstance(vol.inodes, int) and vol.created_at
        assert isinstance(vol.usage["usedBytes"], int)

        writer = Sandbox.create(name=names[0], network_policy="deny-all",
                                volumes=[{"name": vol_name, "path": "/data"}], client=client)
        reader = Sandbox.create(name=names[1], network_policy="deny-all",
                                volumes=[{"name": vol_name, "path": "/mnt/shared"}], client=client)
        ro = Sandbox.create(name=names[2], network_policy="deny-all",
                            volumes=[{"name": vol_name, "path": "/data", "read_only": True}], client=client)
        assert [(m["name"], m["path"]) for m in writer.volumes] == [(vol_name, "/data")]
        assert ro.volumes[0].get("readOnly") is True

        writer.fs.write_file("/data/hello.txt", "from the writer")
        assert reader.fs.read_text("/mnt/shared/hello.txt") == "from the writer"
        assert reader.run_command("cat", ["/mnt/shared/hello.txt"]).stdout() == "from the writer"
        reader.run_command("sh", ["-c", "echo back > /mnt/shared/back.txt"])
        assert writer.read_file("/data/back.txt") == b"back\n"

        assert ro.fs.read_text("/data/hello.txt") == "from the writer"
        r = ro.run_command("sh", ["-c", "echo no > /data/ro.txt"])
        assert r.exit_code != 0 and "Read-only file system" in r.stderr()
        with pytest.raises(SandboxError):
            ro.fs.write_file("/data/ro2.txt", "no")
        assert writer.read_file("/data/ro.txt") is None and writer.read_file("/data/ro2.txt") is None

        vol.refresh()
        assert sorted(vol.mounted_by) == sorted(names)
        assert vol.usage["usedBytes"] > 0 and vol.usage["usedInodes"] > 0, vol.usage

        with pytest.raises(InUseError) as e:
            vol.delete()
        assert e.value.reason == "in_use" and sorted(e.value.sandboxes) == sorted(names)
        writer.delete()
        reader.delete()
        with pytest.raises(InUseError) as e:
            Volume.delete(vol_name, client=client)
        assert e.value.sandboxes == [names[2]]
        assert ro.fs.read_text("/data/back.txt") == "back\n", "a refused delete kept the files"
        ro.delete()

        assert Volume.get(vol_name, client=client).mounted_by == []
        vol.delete()
        with pytest.raises(NotFoundError):
            Volume.get(vol_name, client=client)
        with pytest.raises(NotFoundError):
            Volume.delete(vol_name, client=client)
    finally:
        _cleanup(client, names, [vol_name])
    for n in names:
        leaks.check(world, n)


def test_volume_outlives_its_sandboxes_and_get_or_create_and_fork_mount_it(world, client):
    vol_name = world.name("pyvkeep")
    names = [world.name("pyv1"), world.name("pyvgoc"), world.name("pyvfork"), world.name("pyvfork2")]
    try:
        Volume.create(vol_name, size_mib=32, client=client)
        with Sandbox.create(name=names[0], network_policy="deny-all",
                            volumes=[{"name": vol_name, "path": "/data"}], client=client) as first:
            first.fs.write_file("/data/kept.txt", "kept")
        goc = Sandbox.get_or_create(names[1], network_policy="deny-all",
                                    volumes=[{"name": vol_name, "path": "/v"}], client=client)
        assert goc.fs.read_text("/v/kept.txt") == "kept"
        fork = goc.fork(name=names[2], volumes=[{"name": vol_name, "path": "/ro", "readOnly": True}])
        assert fork.fs.read_text("/ro/kept.txt") == "kept"
        assert fork.run_command("sh", ["-c", "echo x > /ro/x"]).exit_code != 0
        # Without volumes=, a fork mounts its source's (the same volume, not a copy).
        same = Sandbox.fork(goc, name=names[3])
        assert [(m["name"], m["path"]) for m in same.volumes] == [(vol_name, "/v")]
        same.fs.write_file("/v/from-fork.txt", "shared")
        assert goc.fs.read_text("/v/from-fork.txt") == "shared"
    finally:
        _cleanup(client, names, [vol_name])


def test_volume_list_pages_with_name_prefix_and_tags(world, client):
    prefix = world.name("pyvls")
    names = ["%s-%d" % (prefix, i) for i in range(3)]
    try:
        for n in names:
            # A bare number is MiB, as for sandboxctl --size.
            assert Volume.create(n, size="16", tags={"grp": prefix[-20:]}, client=client).size_mib == 16
        assert sorted(v.name for v in Volume.list(name_prefix=prefix, limit=1, client=client)) == names
        assert sorted(v.name for v in Volume.list(tags={"grp": prefix[-20:]}, limit=2, client=client)) == names
        assert list(Volume.list(name_prefix=prefix + "-x", client=client)) == []
        with pytest.raises(NotFoundError):
            Sandbox.create(network_policy="deny-all", volumes=[{"name": prefix + "-nope", "path": "/data"}],
                           client=client)
    finally:
        _cleanup(client, [], names)


def test_volume_create_reads_size_as_sandboxctl_does_and_refuses_the_rest_before_asking_the_daemon(world, client):
    name = world.name("pyvsz")
    for size in ("1.5G", "10GB", "1g", "lots", "", " 16"):
        with pytest.raises(InvalidParamsError) as e:
            Volume.create(name, size=size, client=client)
        assert e.value.field == "size", size
    with pytest.raises(TypeError):
        Volume.create(name, size=1024, client=client)
    with pytest.raises(InvalidParamsError) as e:
        Volume.create(name, size="1G", size_mib=1024, client=client)
    assert e.value.field == "size"
    with pytest.raises(NotFoundError):
        Volume.get(name, client=client)
    # The daemon's own check comes back typed, naming its field.
    with pytest.raises(InvalidParamsError) as e:
        Volume.create(name, size_mib=0, client=client)
    assert e.value.field == "sizeMiB"


def test_async_volume_shared_listed_and_deleted_after_its_mounts(world):
    vol_name = world.name("pyavol")
    names = [world.name("pyaw"), world.name("pyar")]

    async def main():
        async with AsyncSandboxClient(world.daemon.socket) as c:
            made = []
            try:
                vol = await AsyncVolume.create(vol_name, size="32MiB", client=c)
                assert vol.size_mib == 32
                made.append(await AsyncSandbox.create(name=names[0], network_policy="deny-all",
                                                      volumes=[{"name": vol_name, "path": "/data"}], client=c))
                made.append(await AsyncSandbox.create(name=names[1], network_policy="deny-all",
                                                      volumes=[{"name": vol_name, "path": "/data",
                                                                "readOnly": True}], client=c))
                w, r = made
                await w.write_files([{"path": "/data/a", "content": "shared"}])
                assert await r.read_file("/data/a") == b"shared"
                assert (await r.run_command("sh", ["-c", "echo x > /data/b"])).exit_code != 0
                assert [v.name async for v in AsyncVolume.list(name_prefix=vol_name, limit=1, client=c)] == [vol_name]
                try:
                    await AsyncVolume.delete(vol_name, client=c)
                    raise AssertionError("a mounted volume was deleted")
                except InUseError as e:
                    assert sorted(e.sandboxes) == sorted(names)
                for s in made:
                    await s.delete()
                made.clear()
                assert (await vol.refresh()).mounted_by == []
                await vol.delete()
                try:
                    await AsyncVolume.get(vol_name, client=c)
                    raise AssertionError("still there after delete")
                except NotFoundError:
                    pass
            finally:
                for s in made:
                    try:
                        await s.delete()
                    except NotFoundError:
                        pass
                try:
                    await AsyncVolume.delete(vol_name, client=c)
                except NotFoundError:
                    pass
    asyncio.run(asyncio.wait_for(main(), 120))
