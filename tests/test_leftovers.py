"""The suite's own end-of-session check (tests/conftest.py, tests/tmp_dirs.py), run on a session that leaves
things behind: a process still running, an entry under the user's home, one in the session's own home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, SESSION_HOME, cli_env
from tests.tmp_dirs import SESSION_MARKER, marked_processes

PROBE = '''
import os, subprocess
def test_leaves_things_behind():
    subprocess.Popen(["setsid", "sleep", "1777"])  # its own session: no process group of the test's ends it
    os.makedirs(os.path.join(os.environ["AJS_PROBE_USER_HOME"], "left-by-probe"))
    os.makedirs(os.path.expanduser("~/in-the-session-home"))
'''


def test_a_session_that_leaves_a_process_or_writes_under_home_fails_and_the_process_is_ended(tmp_path: Path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    # the inner session takes this session's home as the user's: what it writes there is removed below
    user_home = Path(os.environ["HOME"])
    env = {k: v for k, v in cli_env(AJS_PROBE_USER_HOME=str(user_home), XDG_CACHE_HOME=str(tmp_path / "cache")).items()
           if k != "PYTEST_ADDOPTS"}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                               "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                              capture_output=True, text=True, cwd=REPO, env=env, timeout=300, check=False)
        lines = done.stdout.splitlines()
        assert done.returncode == 1 and "1 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"tests wrote 1 entries under {user_home} outside " in done.stdout
        assert any(line.endswith(f"{user_home}/left-by-probe") for line in lines), lines
        assert any("into the session's $HOME" in line and line.endswith("/in-the-session-home") for line in lines)
        left = [line for line in lines if line.startswith("tests left 1 processes running (killed now): ")]
        assert left and left[0].endswith(" sleep 1777"), lines
        pid = int(left[0].rsplit(": ", 1)[1].split()[0])
        assert not Path(f"/proc/{pid}").exists() or "1777" not in Path(f"/proc/{pid}/cmdline").read_text()
    finally:
        if (user_home / "left-by-probe").exists():
            (user_home / "left-by-probe").rmdir()


def test_every_process_a_test_starts_carries_the_sessions_marker():
    """What the end-of-session check looks for: a child started now is found by the marker, then not."""
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert os.environ[SESSION_MARKER] and proc.pid in marked_processes(os.environ[SESSION_MARKER])
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in marked_processes(os.environ[SESSION_MARKER])
    assert Path(SESSION_HOME) == Path(os.environ["HOME"])  # the session runs with a home of its own
