"""A real sandboxd in the test world (tests/integration/world.py) for the
SDK's tests: run as root with Debian's pytest, /usr/bin/python3 -m pytest."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import world as W  # noqa: E402


@pytest.fixture(scope="session")
def world():
    if os.geteuid() != 0:
        pytest.skip("needs root (the test world: network namespaces, cgroups)")
    w = W.World(quiet=True)
    try:
        w.open()
        w.start_sandboxd()
        yield w
    finally:
        w.close()


@pytest.fixture
def client(world):
    from sandboxd import SandboxClient
    c = SandboxClient(world.daemon.socket)
    yield c
    c.close()


@pytest.fixture
def name(world):
    return world.name("py")
