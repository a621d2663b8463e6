"""A stop that stops, honest states and inputs that never crash (issue 14), with real processes and tmux."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import sqlite3
import stat
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from skill_server.core.errors import SkillError, ToolFailure, ToolInputError
from skill_server.hosts.agent import procs as agent_procs
from tests.conftest import call_cli, cli_env
from tests.experiment_helpers import PY, call, marked_pids, pid_alive, status, tmux_socket, trainer, wait_until, workdir  # noqa: F401  (fixtures are used by name)

DOUBLE_FORK = ("import os, time\n"
               "if os.fork(): os._exit(0)\n"
               "os.setsid()\n"
               "if os.fork(): os._exit(0)\n"
               "time.sleep(903)\n")


def stubborn_tree(tmp: Path) -> str:
    """A command leaving three hard cases: a process ignoring SIGINT and SIGTERM, a grandchild, and a
    double-forked process in its own session (reparented to init, outside the wrapper's process group)."""
    script = tmp / "double_fork.py"
    script.write_text(DOUBLE_FORK)
    return (f"sh -c 'trap \"\" INT TERM; exec sleep 901' & sh -c 'sleep 902 & wait' & "
            f"{PY} {shlex.quote(str(script))}; echo tree-ready; wait")


@pytest.mark.parametrize("use_proc", [pytest.param(True, id="proc"),
                                      pytest.param(False, id="ps-fallback", marks=pytest.mark.needs("ps"))])
def test_stop_ends_every_process_of_the_run_and_says_so(tmux_socket: str, workdir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch, use_proc: bool):
    monkeypatch.setattr(agent_procs, "USE_PROC", use_proc)  # the in-process agent; ps stands in for /proc
    out = call("launch_experiment", name="tree", command=stubborn_tree(tmp_path), workdir=str(workdir))
    pane_session = os.getsid(out["processes"][0]["pid"])

    def is_double_fork(command: str) -> bool:
        return command.split(" ")[0] == sys.executable and "double_fork.py" in command

    def settled() -> dict[int, str] | None:
        found = {}
        for pid in marked_pids(out["id"] + "/"):
            try:
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                if is_double_fork(found[pid]) and os.getsid(pid) == pane_session:
                    return None  # the double fork is still under way
            except OSError:
                return None
        commands = list(found.values())
        ready = any(is_double_fork(c) for c in commands) and any(c.startswith("sleep 901") for c in commands)
        return found if ready and any(c.startswith("sleep 902") for c in found.values()) else None

    commands = wait_until(settled)
    pids = list(commands)
    setsid_pid = next(p for p, c in commands.items() if is_double_fork(c))
    assert os.getsid(setsid_pid) != pane_session and os.getpgid(setsid_pid) != out["processes"][0]["pid"]
    stopped = call("stop_experiment", id=out["id"], grace_s=1)
    assert stopped["state"] == "stopped" and stopped["still_alive"] == []
    assert stopped["interrupted"] == ["main"] and stopped["killed"] == ["main"]
    killed = {p["pid"] for p in stopped["killed_processes"]}
    ignoring = next(p for p, c in commands.items() if c.startswith("sleep 901"))
    assert {ignoring, setsid_pid} <= killed
    assert not [p for p in pids if pid_alive(p)] and marked_pids(out["id"] + "/") == []
    assert stopped["processes"][0]["state"] == "stopped" and stopped["session_removed"]
    assert status(out["id"])["state"] == "stopped"


def test_kill_dash_nine_of_wrapper_and_child_is_lost_not_running(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="k9", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: len(marked_pids(out["id"] + "/")) >= 3)  # wrapper, bash -c / trainer, tee
    wrapper = out["processes"][0]["pid"]
    for pid in marked_pids(out["id"] + "/"):
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not pid_alive(wrapper))
    assert status(out["id"], max_lines=0)["state"] == "lost"  # the pane stays (remain-on-exit): not a signal
    waited = call("wait_experiment", id=out["id"], timeout_s=10)
    assert waited["reason"] == "exited" and waited["state"] == "lost" and waited["waited_s"] < 5


def test_a_reused_pid_is_not_mistaken_for_the_wrapper(tmux_socket: str, workdir: Path):
    from skill_server.experiments.store import open_registry

    out = call("launch_experiment", name="reuse", command="sleep 30", workdir=str(workdir))
    with open_registry() as reg:  # pretend the wrapper's pid now belongs to another process (ours)
        row = reg.get(out["id"])
        first = dataclasses.replace(row.spec.processes[0], pid=os.getpid())
        reg.update_spec(out["id"], dataclasses.replace(row.spec, processes=(first, *row.spec.processes[1:])))
    assert status(out["id"], max_lines=0)["state"] == "lost"  # start time differs: not alive
    assert pid_alive(os.getpid())


def test_max_time_bounds_and_a_launch_at_the_bound_stays_listable_and_stoppable(tmux_socket: str, workdir: Path):
    for value in (10**400, 366 * 86400 + 1, 0, -5, 2.5, "60", True):
        with pytest.raises(ToolInputError) as err:
            call("launch_experiment", name="big", command="true", workdir=str(workdir), max_time_s=value)
        assert err.value.field == "max_time_s", value
    rc, _, err = call_cli("launch_experiment", {"name": "big", "command": "true", "workdir": str(workdir),
                                                "max_time_s": 10**400}, env=cli_env())
    assert rc == 1 and err.count("\n") == 1 and "max_time_s" in err
    out = call("launch_experiment", name="longest", command="sleep 30", workdir=str(workdir),
               max_time_s=366 * 86400, first_step_timeout_s=366 * 86400)
    listed = call("experiment_status")["experiments"]
    assert [e["max_time_s"] for e in listed] == [366 * 86400] and listed[0]["time_left_s"] > 366 * 86400 - 60
    assert call("stop_experiment", id=out["id"], grace_s=1)["state"] == "stopped"


def test_blueprint_max_time_overflow_is_a_problem_not_a_traceback(tmux_socket: str, workdir: Path):
    text = "\n".join(f"## [{name}]\n- content: {value}\n" for name, value in [
        ("exp_purpose", "overflow"), ("exp_codebase_dir", str(workdir)), ("exp_venv_exe", sys.executable),
        ("exp_yaml_path", sys.executable), ("exp_launch_command", "true"), ("exp_result_dir", str(workdir)),
        ("exp_max_time", "9" * 400 + " hours; first step within 1e999 min")])
    checked = call("blueprint", action="validate", text=text)
    assert not checked["ok"] and checked["max_time_s"] is None
    assert [p["message"] for p in checked["problems"] if p["field"] == "exp_max_time"] == [
        "the max time is longer than the limit of 366 days"]
    path = workdir / "bp.md"
    path.write_text(text)
    with pytest.raises(ToolInputError) as err:
        call("launch_experiment", blueprint=str(path))
    assert err.value.field == "blueprint" and "366 days" in str(err.value)
    with pytest.raises(ToolInputError) as err:
        call("blueprint", action="template", max_time="9" * 400 + " hours")
    assert err.value.field == "max_time"


def test_blueprint_template_is_create_only(tmp_path: Path):
    target = tmp_path / "bp.md"
    call("blueprint", action="template", path=str(target), purpose="x")
    before = target.read_text()
    with pytest.raises(ToolInputError) as err:
        call("blueprint", action="template", path=str(target), purpose="y")
    assert err.value.field == "path" and "never replaced" not in str(err.value) and "exists" in str(err.value)
    assert target.read_text() == before
    with pytest.raises(ToolInputError) as err:
        call("blueprint", action="template", path=str(target), purpose="y", overwrite=True)
    assert err.value.field == "overwrite"
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    with pytest.raises(ToolInputError):
        call("blueprint", action="template", path=str(device), purpose="y")
    assert stat.S_ISCHR(device.stat().st_mode)


def test_a_corrupt_registry_row_is_reported_for_that_run_only(tmux_socket: str, workdir: Path):
    good = call("launch_experiment", name="good", command="sleep 30", workdir=str(workdir))
    db = Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "experiments.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO experiments (id, session, socket, created, started_at, spec) VALUES "
                     "('bad-json', 'ajet_bad', 'x', 1.0, 't', '{not json')")
        conn.execute("INSERT INTO experiments (id, session, socket, created, started_at, spec, scan) VALUES "
                     "('bad-shape', 'ajet_bad2', 'x', 2.0, 't', ?, '[]')", (json.dumps({"processes": "x"}),))
        conn.execute("INSERT INTO experiments (id, session, socket, created, started_at, spec) VALUES "
                     "('bad-time', 'ajet_bad3', 'x', 3.0, 't', ?)",
                     (json.dumps({"max_time_s": 10**30, "processes": [{"role": "main", "log_path": "/x"}],
                                  "run_dir": "/x"}),))
    listed = call("experiment_status")
    assert [e["id"] for e in listed["experiments"]] == [good["id"]]
    assert sorted(p["id"] for p in listed["problems"]) == ["bad-json", "bad-shape", "bad-time"]
    assert all("cannot be read" in p["message"] for p in listed["problems"])
    for tool in ("experiment_status", "stop_experiment", "wait_experiment", "collect_results"):
        with pytest.raises(SkillError) as err:
            call(tool, id="bad-json")
        assert err.value.field == "id" and "bad-json" in str(err.value)
    assert call("stop_experiment", id=good["id"], grace_s=1)["state"] == "stopped"


def test_a_refused_launch_leaves_no_run_directory(tmux_socket: str, workdir: Path):
    (workdir / "a_dir").mkdir()
    (workdir / "a_file").write_text("x")
    cases = [({"workdir": str(workdir / "missing")}, "workdir"),
             ({"log_path": str(workdir / "a_dir")}, "log_path"),
             ({"result_dir": str(workdir / "a_file")}, "result_dir"),
             ({"python": str(workdir / "a_file")}, "python")]
    for extra, field in cases:
        args = {"name": "refused", "command": "true", "workdir": str(workdir), **extra}
        with pytest.raises(ToolInputError) as err:
            call("launch_experiment", **args)
        assert err.value.field == field, extra
    runs = Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []
    assert call("experiment_status")["experiments"] == []


def test_forty_concurrent_calls_agree_with_the_registry(tmux_socket: str, workdir: Path):
    from skill_server.experiments.store import open_registry

    out = call("launch_experiment", name="busy", command=trainer("--mode", "hang"), workdir=str(workdir))
    wait_until(lambda: status(out["id"], max_lines=0)["state"] == "running" and marked_pids(out["id"] + "/"))
    jobs = [("stop_experiment", {"grace_s": 1})] * 2 + [("wait_experiment", {"timeout_s": 8})] * 19 + [
        ("experiment_status", {})] * 19

    def one(job):
        tool, extra = job
        time.sleep(0.01 * (hash(tool) % 5))
        answer = call(tool, id=out["id"], **extra)
        return answer["experiments"][0] if tool == "experiment_status" else answer

    with ThreadPoolExecutor(max_workers=40) as pool:
        answers = list(pool.map(one, jobs))
    with open_registry() as reg:
        final = reg.get(out["id"]).final_state
    assert final == "stopped"
    states = [a["state"] for a in answers]
    assert set(states) <= {"running", "stopped"}, states
    assert all(a["processes"][0]["state"] in ("running", "stopped") for a in answers)
    assert marked_pids(out["id"] + "/") == []


def test_collect_results_never_reads_a_fifo_or_a_device(tmux_socket: str, tmp_path: Path):
    fifo = tmp_path / "fifo.md"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.md"
    os.mknod(zero, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # like /dev/zero, made here (never the system's)
    result_dir = tmp_path / "results"
    t0 = time.monotonic()
    res = call("collect_results", result_dir=str(result_dir), val_markdown=str(fifo), train_markdown=str(zero))
    assert time.monotonic() - t0 < 10
    assert sum("not a regular file" in n for n in res["notes"]) == 2 and res["val_metrics"] == []
    assert (result_dir / "results.md").is_file()
    for field, path in (("yaml_path", fifo), ("yaml_path", zero)):
        with pytest.raises(ToolInputError) as err:
            call("collect_results", result_dir=str(result_dir), yaml_path=str(path))
        assert err.value.field == field and "not a regular file" in str(err.value)
    (result_dir / "results.md").unlink()
    os.mkfifo(result_dir / "results.md")
    with pytest.raises(SkillError) as err:
        call("collect_results", result_dir=str(result_dir))
    assert err.value.field == "result_dir" and "not a regular file" in str(err.value)
    assert stat.S_ISFIFO((result_dir / "results.md").stat().st_mode)


def test_stop_refuses_what_it_did_not_launch_by_id(tmux_socket: str):
    with pytest.raises(ToolFailure) as err:
        call("stop_experiment", id="ajet_never")
    assert err.value.field == "id"
