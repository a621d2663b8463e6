"""Every call ends inside its bound with a hung tmux server (issue 19 item 5): the run's tmux server is
SIGSTOPped (as a server swapped out or stuck on a dead filesystem is) and every experiment tool is timed;
once it resumes, the launch that hung there is rolled back by the next call. Real tmux, real processes."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skill_server.core.errors import ToolFailure
from tests.experiment_helpers import call, marked_pids, status, tmux_socket, trainer, wait_until, workdir  # noqa: F401  (fixtures)
from tests.faults import freeze_process, thaw_process, timed, tmux_server_pid

CALL_BOUND_S = 55.0
WAIT_MARGIN_S = 5.0


def _socket_path() -> str:
    return os.path.join(os.environ["TMUX_TMPDIR"], f"tmux-{os.getuid()}", os.environ["SKILL_SERVER_TMUX_SOCKET"])


def test_every_tool_answers_in_its_bound_while_tmux_hangs(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="hung", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: len(marked_pids(out["id"] + "/")) >= 3)
    server = tmux_server_pid(_socket_path())
    freeze_process(server)
    try:
        calls = {
            "status": ("experiment_status", {"id": out["id"]}, CALL_BOUND_S),
            "status_all": ("experiment_status", {}, CALL_BOUND_S),
            "wait": ("wait_experiment", {"id": out["id"], "timeout_s": 10}, 10 + WAIT_MARGIN_S),
            "launch": ("launch_experiment", {"name": "during", "command": "sleep 300", "workdir": str(workdir)},
                       CALL_BOUND_S),
        }
        with ThreadPoolExecutor(len(calls)) as pool:
            futures = {key: pool.submit(timed, call, tool, **args) for key, (tool, args, _) in calls.items()}
            results = {key: f.result() for key, f in futures.items()}
        took = {key: round(t, 1) for key, (_, t) in results.items()}
        print("seconds per call with tmux stopped:", took)
        for key, (_, _, bound) in calls.items():
            assert took[key] <= bound, (key, took)
        assert results["status"][0]["experiments"][0]["state"] == "running"  # the process itself still runs
        assert results["wait"][0]["reason"] == "timeout"
        launched = results["launch"][0]
        assert isinstance(launched, ToolFailure) and "tmux did not answer" in str(launched), launched
        stopped, took_stop = timed(call, "stop_experiment", id=out["id"], grace_s=1)
        print("stop with tmux stopped:", round(took_stop, 1))
        assert took_stop <= CALL_BOUND_S and not isinstance(stopped, Exception), stopped
        assert stopped["state"] == "stopped" and marked_pids(out["id"] + "/") == []
    finally:
        thaw_process(server)
    # The launch's new-session ran once tmux resumed; the next call of any tool rolls it back.
    listed = wait_until(lambda: (s := call("experiment_status")["experiments"]) is not None and s)
    assert [e["session"] for e in listed] == ["ajet_hung"]
    wait_until(lambda: marked_pids("ajet_during-") == [] and call("experiment_status") is not None, timeout=40,
               interval=2)
    assert status(out["id"])["state"] == "stopped"
