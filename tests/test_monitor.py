"""The run monitor (hosts/agent/monitor.py and its rooms), with real processes and a real tmux server: every byte of
a fast log scanned, a monitor that ends with its run and never outlives a stop, one that died replaced, finished
sessions removed, and an observation whose cost does not grow with the runs a host had."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import libtmux
import pytest

from skill_server.experiments import history, observe
from skill_server.experiments.spec import RunSpec
from skill_server.experiments.store import open_registry
from skill_server.hosts.agent import heartbeat, monitor, procs, program, rundir
from tests.experiment_helpers import (  # noqa: F401  (fixtures are used by name)
    PY,
    call,
    marked_pids,
    pid_alive,
    status,
    tmux_socket,
    trainer,
    wait_exit,
    wait_until,
    workdir,
)

pytestmark = pytest.mark.needs("tmux")

#: Writes ``rate`` bytes a second for ``seconds`` (verl-like step lines and short INFO lines), with one CUDA OOM
#: line half-way; notes the wall time of the OOM line in ``mark``. Prints ``wrote N bytes, S steps`` at the end.
FLOOD = r'''
import sys, time
rate, seconds, mark = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
keys = ["critic/score/mean", "critic/real_reward", "actor/entropy", "actor/pg_loss", "actor/kl_loss",
        "actor/grad_norm", "perf/mfu/actor_infer", "perf/throughput", "timing_s/gen", "response_length/mean"]
info = "2026-05-26 17:07:12.482 | INFO     | ajet.task_rollout.native_parallel_worker:run:212 - episode %d claimed\n"
out = sys.stdout
start, written, step, oom = time.monotonic(), 0, 0, False
while time.monotonic() - start < seconds:
    chunk = []
    for _ in range(40):
        step += 1
        chunk.append("(TaskRunner pid=7) step:%d - " % step
                     + " - ".join("%s:%.6f" % (k, 0.001 * step + n) for n, k in enumerate(keys))
                     + " - training/global_step:%d\n" % step)
        chunk += [info % (step * 10 + i) for i in range(12)]
    if not oom and time.monotonic() - start >= seconds / 2:
        chunk.append("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)\n")
        oom = True
        open(mark, "w").write(repr(time.time()))
    data = "".join(chunk)
    out.write(data)
    out.flush()
    written += len(data)
    time.sleep(max(0.0, written / rate - (time.monotonic() - start)))
print("wrote %d bytes, %d steps" % (written, step), flush=True)
'''


def run_dir(exp_id: str) -> Path:
    with open_registry() as reg:
        return Path(reg.get(exp_id).processes[0].run_dir)


def findings(exp_id: str) -> dict:
    return json.loads((run_dir(exp_id) / rundir.FINDINGS).read_text())


def monitor_pid(exp_id: str) -> int:
    return wait_until(lambda: (run_dir(exp_id) / rundir.FINDINGS).exists() and findings(exp_id)["pid"])


def test_a_log_at_100_mb_a_minute_is_scanned_to_its_last_byte(tmux_socket: str, workdir: Path):
    script, mark = workdir / "flood.py", workdir / "oom.mark"
    script.write_text(FLOOD)
    rate = 100 * 1024 * 1024 / 60
    out = call("launch_experiment", name="flood", workdir=str(workdir),
               command=f"{PY} {script} {rate:.0f} 16 {mark}")
    woke = call("wait_experiment", id=out["id"], timeout_s=40)
    seen_at = time.time()
    assert woke["reason"] == "error" and woke["state"] == "running", woke["reason"]
    assert [e["count"] for e in woke["errors"] if e["signature"] == "cuda_oom"] == [1]
    assert seen_at - float(mark.read_text()) < 5  # status knew within seconds, the log growing at 1.7 MB/s
    done = wait_exit(out["id"], timeout_s=45)
    log = Path(out["log_path"])
    size = log.stat().st_size
    wrote = next(line for line in done["lines"] if line.startswith("wrote "))
    assert int(wrote.split()[1]) >= 20 * 1024 * 1024  # 16 s at 100 MB/min
    steps = int(wrote.split()[3])
    assert done["state"] == "succeeded" and done["global_step"] == steps
    assert {e["signature"]: e["count"] for e in done["errors"]} == {"cuda_oom": 1, "python_exception": 1}
    assert done["unscanned_bytes"] == 0
    main = findings(out["id"])["roles"]["main"]
    assert main["offset"] == size and main["unscannable"] == 0 and main["drained"]
    assert findings(out["id"])["ended"]
    with open_registry() as reg:  # the metric history holds the run's first and last step, thinned in between
        series = history.read_series(reg, out["id"], "critic/score/mean")
    assert series.steps[0] == 1 and series.steps[-1] == steps


def test_the_monitor_is_outside_the_run_and_never_outlives_a_stop(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="mon", command=trainer("--mode", "hang"), workdir=str(workdir))
    wrapper = out["processes"][0]["pid"]
    pid = monitor_pid(out["id"])
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not [e for e in environ if e.startswith(b"AGENTJET_SKILL_RUN=")]  # a stop's marker sweep never finds it
    assert os.getsid(pid) != os.getsid(wrapper) and os.getpgid(pid) != os.getpgid(wrapper)
    assert int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) != os.getpid()  # not our child
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert program.install_dir().encode() in cmdline or program.BOOTSTRAP.encode() in cmdline  # stage one installs
    assert (Path(program.install_dir()) / "ajs_agent" / "monitor.py").is_file()  # the version-cached install ...
    assert not list(run_dir(out["id"]).glob("*.py"))  # ... and no copy of the agent in the run directory
    wait_until(lambda: "rollout step begin" in Path(out["log_path"]).read_text())
    stopped = call("stop_experiment", id=out["id"], grace_s=2)
    assert stopped["state"] == "stopped" and stopped["session_removed"] and stopped["still_alive"] == []
    wait_until(lambda: not pid_alive(pid), timeout=10)
    assert marked_pids(out["id"] + "/") == []
    doc = findings(out["id"])
    assert doc["ended"] and doc["roles"]["main"]["drained"]
    assert [e["kind"] for e in doc["events"]][-3:] == ["process_ended", "ended", "finished"]
    assert not libtmux.Server(socket_name=tmux_socket).has_session("ajet_mon")


def test_a_finished_run_leaves_no_session_and_no_monitor(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="fin", workdir=str(workdir), processes=[
        {"role": "a", "command": trainer("--steps", "2")}, {"role": "b", "command": "echo b-done"}])
    pid = monitor_pid(out["id"])
    done = wait_exit(out["id"])
    assert done["state"] == "succeeded" and done["global_step"] == 2
    wait_until(lambda: not pid_alive(pid))
    assert not libtmux.Server(socket_name=tmux_socket).has_session("ajet_fin")
    assert (run_dir(out["id"]) / rundir.SESSION_REMOVED).exists() and findings(out["id"])["session_removed"]
    again = call("launch_experiment", name="fin", command="true", workdir=str(workdir))  # the name is free
    assert wait_exit(again["id"])["state"] == "succeeded"


def test_a_killed_wrapper_keeps_its_session_and_the_monitor_still_ends(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="k9m", command=trainer("--mode", "hang"), workdir=str(workdir))
    pid = monitor_pid(out["id"])
    wait_until(lambda: len(marked_pids(out["id"] + "/")) >= 3)
    for p in marked_pids(out["id"] + "/"):
        os.kill(p, signal.SIGKILL)
    assert call("wait_experiment", id=out["id"], timeout_s=20)["state"] == "lost"
    wait_until(lambda: not pid_alive(pid), timeout=15)
    doc = findings(out["id"])
    assert doc["ended"] and not doc["session_removed"] and doc["events"][-1]["exit_codes"] == {"main": None}
    assert libtmux.Server(socket_name=tmux_socket).has_session("ajet_k9m")  # no exit code on disk: kept


def test_a_monitor_that_died_is_restarted_and_misses_nothing(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="phoenix", workdir=str(workdir),
               command=trainer("--steps", "40", "--delay", "0.15", "--timing", "2.0"))
    call("wait_experiment", id=out["id"], until="first_step", timeout_s=20)
    first = monitor_pid(out["id"])
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not pid_alive(first))
    time.sleep(1.5)  # steps go on with nobody reading them
    assert status(out["id"], max_lines=0)["state"] == "running"  # this look starts a new monitor
    second = wait_until(lambda: findings(out["id"])["pid"] != first and findings(out["id"])["pid"])
    done = wait_exit(out["id"], timeout_s=30)
    assert done["global_step"] == 40 and done["progress"]["seconds_per_step"] == 2.0
    wait_until(lambda: not pid_alive(second))
    with open_registry() as reg:
        series = history.read_series(reg, out["id"], "critic/real_reward")
        count, distinct = reg.conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT p.step) FROM metric_points p JOIN metric_series s ON s.id = p.series "
            "WHERE s.exp_id = ? AND s.name = 'critic/real_reward'", (out["id"],)).fetchone()
    assert series.steps == list(range(1, 41)) and count == distinct == 40


def supervisor_pid(exp_id: str) -> int:
    return wait_until(lambda: (record := heartbeat.read(str(run_dir(exp_id) / rundir.SUPERVISOR_BEAT))[0])
                      and record["pid"])


def test_a_monitor_and_its_supervisor_both_gone_are_said_and_a_status_call_starts_them(tmux_socket: str,
                                                                                       workdir: Path):
    out = call("launch_experiment", name="orphaned", command="sleep 60", workdir=str(workdir))
    first, keeper = monitor_pid(out["id"]), supervisor_pid(out["id"])
    stamp = run_dir(out["id"]) / rundir.RESTARTED
    stamp.write_text(f"{procs.uptime():.3f}\n")  # as if a look had just started one
    os.kill(keeper, signal.SIGKILL)
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not pid_alive(first) and not pid_alive(keeper))
    note = status(out["id"], max_lines=0)["note"]
    assert note and "monitor on local is not running (no supervisor runs either" in note, note
    assert "max time is not enforced" in note
    stamp.write_text(f"{procs.uptime() - 60:.3f}\n")  # long ago: the next look starts one
    note = status(out["id"], max_lines=0)["note"]
    assert note and "was replaced (at " in note and "by a status call): neither it nor its supervisor runs" in note
    wait_until(lambda: pid_alive(findings(out["id"])["pid"]) and findings(out["id"])["pid"] != first)
    wait_until(lambda: supervisor_pid(out["id"]) != keeper and pid_alive(supervisor_pid(out["id"])))  # started by it
    call("stop_experiment", id=out["id"], grace_s=1)


def _lingering_sessions(socket: str, n: int) -> None:
    """``n`` finished sessions left on the server, as runs from before session clean-up left them."""
    base = ["tmux", "-S", socket, "set-option", "-g", "remain-on-exit", "on"]
    subprocess.run(base, check=True, timeout=30)
    for lo in range(0, n, 100):
        cmd = ["tmux", "-S", socket]
        for i in range(lo, min(n, lo + 100)):
            cmd += ["new-session", "-d", "-s", f"old_{i}", "true", ";"]
        subprocess.run(cmd[:-1], check=True, timeout=60, capture_output=True)


def _finished_rows(n: int, created: float) -> None:
    with open_registry() as reg:
        for i in range(n):
            spec = RunSpec.from_json({"format": 2, "host": "local", "hosts": {"local": {
                "run_dir": f"/nonexistent/runs/old_{i}", "socket_path": "/nonexistent/sock"}},
                "processes": [{"role": "main", "host": "local", "log_path": f"/nonexistent/old_{i}.log",
                               "pid": 2**22 + i, "start": "1"}]})
            reg.insert(id=f"old_{i}-x", session=f"old_{i}", socket="x", created=created - n + i, started_at="",
                       spec=spec)
            reg.finish(f"old_{i}-x", "succeeded", 0, created)


def test_a_thousand_finished_runs_are_not_in_an_observation(tmux_socket: str, workdir: Path):
    """What makes an observation's cost independent of history (its time is measured in bench/status.py,
    not here): it asks tmux nothing about a run whose pids are recorded, and it names only that run's own
    processes, however many finished runs and lingering sessions there are."""
    out = call("launch_experiment", name="one", command="sleep 120", workdir=str(workdir))
    socket = out["attach"].split(" -S ", 1)[1].split(" ")[0]
    _lingering_sessions(socket, 1000)
    _finished_rows(1000, time.time())
    assert len(libtmux.Server(socket_path=socket).sessions) == 1001
    with open_registry() as reg:
        requests, _ = observe._requests([reg.get(out["id"])], [observe.logs.ScanState(offsets=[0])], [[[]]])
    (request,) = requests["local"]
    asked = request.request["procs"]  # type: ignore[typeddict-item]
    assert len(asked) == 1 and asked[0]["pid"] and asked[0]["handle"]["kind"] == "tmux"  # its one process, by pid
    assert status(out["id"], max_lines=0, checkpoints=False)["state"] == "running"
    call("stop_experiment", id=out["id"], grace_s=1)


def test_finishing_interrupted_launches_reads_only_unfinished_launches_by_index():
    """Each healing tool call looks for interrupted launches; with thousands of finished runs that must not be a
    scan."""
    from skill_server.experiments import store

    with store.open_registry() as reg:
        plan = reg.conn.execute("EXPLAIN QUERY PLAN " + store.PENDING_SQL, (store.RUNNING, store.RUNNING)).fetchall()
    steps = " ".join(str(row[-1]) for row in plan)
    assert "USING INDEX experiments_by_phase" in steps and "SCAN experiments" not in steps, steps


def test_the_monitor_runs_on_python_3_8_syntax_and_the_program_lists_it():
    import ast

    for name in program.MODULES:  # the monitor and every room of it
        ast.parse((Path(monitor.__file__).parent / f"{name}.py").read_text(), feature_version=(3, 8))
    assert "monitor" in program.MODULES and "watchdog" not in program.MODULES
    assert sys.modules.get("typing") is not None  # (the test runner loads typing; the agent itself never does)
