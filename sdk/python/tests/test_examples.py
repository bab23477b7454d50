"""examples/tour.py (the README's tour) runs against the test world's daemon."""
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def test_the_readme_tour_runs(world):
    env = dict(os.environ, SANDBOXD_SOCKET=world.daemon.socket, GIT_URL=world.git_url,
               PYTHONPATH=os.path.join(ROOT, "src"))
    p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples", "tour.py")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert "hello from" in out and "exit 0" in out
    assert "stdout hi tour" in out and "denied" in out
    assert "policy now deny-all" in out
    assert "copy has" in out and "hello.py" in out
    assert "not found: not_found" in out
    assert "['0', '1', '2']" in out and "snapshots left: []" in out
