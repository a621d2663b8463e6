"""Small things that keep a long-lived setup healthy (issue 19 item 9): ``experiment_status`` without an id
answers one bounded page however many runs the registry holds, and a host's stale agent install folders
(left by a full disk or a killed install) are removed. Real tmux, real runs, the real shipped program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skill_server.core.errors import ToolInputError
from skill_server.hosts.agent import program
from skill_server.hosts.agent.protocol import PROTOCOL_VERSION
from tests.experiment_helpers import call, tmux_socket, workdir  # noqa: F401  (fixtures)


def test_listing_every_run_answers_one_bounded_page_with_a_cursor(tmux_socket: str, workdir: Path):
    ids = [call("launch_experiment", name=f"many{i}", command="true", workdir=str(workdir))["id"] for i in range(25)]
    first = call("experiment_status", max_lines=0)  # none observed yet: 25 unfinished rows
    assert len(first["experiments"]) == 20 and first["total"] == 25 and first["more"] == 5
    assert first["next_offset"] == 20
    second = call("experiment_status", max_lines=0, offset=first["next_offset"])
    assert len(second["experiments"]) == 5 and second["more"] == 0 and second["next_offset"] is None
    seen = [e["id"] for e in first["experiments"] + second["experiments"]]
    assert seen == list(reversed(ids))  # newest first, every run once
    small = call("experiment_status", max_lines=0, limit=3)
    assert [e["id"] for e in small["experiments"]] == seen[:3] and small["more"] == 22
    assert len(json.dumps(first)) < 200_000
    with pytest.raises(ToolInputError) as err:
        call("experiment_status", id=ids[0], offset=3)
    assert err.value.field == "offset"


NONCE = "feedc0de"


def _ping(env: dict[str, str]) -> dict:
    request = json.dumps({"v": PROTOCOL_VERSION, "ops": [{"op": "ping"}]}).encode()
    done = subprocess.run([sys.executable, "-I", "-S", "-c", program.BOOTSTRAP, *program.bootstrap_argv(NONCE)],
                          input=program.ssh_payload(NONCE) + program.frame(NONCE, request), env=env,
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.split(b"\n", 2)[2])


def test_stale_agent_install_folders_are_removed(tmp_path: Path):
    import socket

    env = {"PATH": os.environ["PATH"], "SKILL_SERVER_STATE_DIR": str(tmp_path / "state"), "HOME": str(tmp_path)}
    agent = tmp_path / "state" / "agent"
    agent.mkdir(parents=True)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()  # a pid that no longer runs
    host = socket.gethostname()
    stale = agent / f"0123456789abcdef.tmp-{host}-{gone}"
    (stale / "ajs_agent").mkdir(parents=True)
    (stale / "ajs_agent" / "ops.py").write_text("# half written\n")
    alive = agent / f"0123456789abcdef.tmp-{host}-{os.getpid()}"  # a writer that still runs: left alone
    alive.mkdir()
    other = agent / f"0123456789abcdef.tmp-otherhost-{gone}"  # another host of a shared home: its own business
    other.mkdir()
    assert _ping(env)["results"][0]["ok"]
    left = sorted(p.name for p in agent.iterdir())
    assert stale.name not in left and alive.name in left and other.name in left
    assert len([p for p in left if ".tmp-" not in p]) == 1  # the real install


def test_an_install_that_fails_leaves_no_folder(tmp_path: Path):
    """A full disk while the agent installs itself: it answers from memory and removes its folder."""
    from tests.faults import FullDisk, have_root_mounts

    if not have_root_mounts():
        pytest.skip("mounting a tmpfs needs root")
    disk = FullDisk(tmp_path / "state", "1m")
    try:
        (disk.path / "agent").mkdir()
        disk.fill()
        env = {"PATH": os.environ["PATH"], "SKILL_SERVER_STATE_DIR": str(disk.path), "HOME": str(tmp_path)}
        assert _ping(env)["results"][0]["ok"]
        assert list((disk.path / "agent").iterdir()) == []
    finally:
        disk.free()
        disk.unmount()
