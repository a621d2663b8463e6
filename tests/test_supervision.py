"""No single process can lose a run (issue 31), with real processes, a real tmux server and a real full disk: a
run monitor killed (kill -9), frozen (SIGSTOP) past the run's max time, or killed during a resume's backoff is
replaced by its supervisor with nobody calling; a relaunch that a full disk refused is said to have failed and is
carried out once the space is back; a stop on the first id of a resumed run stops its later attempt; the restart
throttle does not trust a caller's wall clock; an attempt's own id works before anything took it up; a stop in a
read-only run directory is still a stop; two machines with one host identity do not judge each other's runs;
the happenings still queued at a run's end reach a slow notify command (a hanging one still gets the ``end``, the
rest recorded), a killed monitor's queued happenings are sent by its replacement, and a notify command that floods
its output leaves a bounded ``notify.log``.

Each fault test makes no tool call between the fault and its check (it reads the files the run's processes and
notify command write); the status call after the check is what the user sees.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skill_server.experiments.store import open_registry
from skill_server.hosts.agent import heartbeat, notifier, procs, rundir, supervisor
from tests.conftest import REPO, cli_env, run_cli
from tests.experiment_helpers import PY, call, marked_pids, pid_alive, status, tmux_socket, wait_until, workdir  # noqa: F401
from tests.faults import FullDisk, ReadOnlyBind, clock_step_env, have_faketime, have_root_mounts
from tests.test_unattended import HANGS, RESUMES, kinds, told

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

#: Step lines every 0.3 s for as long as it lives; once the file ``go`` exists, one CUDA out-of-memory line.
TRAINS = r'''
import os, sys, time
go, said, step = sys.argv[1], False, 0
while True:
    step += 1
    print("step:%d - critic/score/mean:0.1 - training/global_step:%d" % (step, step), flush=True)
    if not said and os.path.exists(go):
        said = True
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)", flush=True)
    time.sleep(0.3)
'''
#: RESUMES (tests/test_unattended.py) whose first start only fails: a relaunch then trains on, slowly.
RESUMES_ONCE = RESUMES.replace("if step == first + 2 and starts < 3:", "if step == first + 2 and starts < 1:").replace(
    "    time.sleep(0.1)\n", "    time.sleep(0.1 if starts < 1 else 2.0)\n")


def run_dir(exp_id: str) -> Path:
    with open_registry() as reg:
        return Path(reg.get(exp_id).processes[0].run_dir)


def pid_of(exp_id: str, beat: str = rundir.BEAT) -> int:
    """The pid a beat file names (the monitor's, or with ``rundir.SUPERVISOR_BEAT`` its supervisor's)."""
    return wait_until(lambda: (record := heartbeat.read(str(run_dir(exp_id) / beat))[0]) and record["pid"], timeout=20)


def in_backoff(exp_id: str) -> bool:
    """Whether the run's monitor document says it waits out a resume's backoff (read from the file: no tool call)."""
    try:
        doc = json.loads((run_dir(exp_id) / rundir.FINDINGS).read_text())
    except (OSError, ValueError):
        return False
    return doc.get("phase") == "backoff" and bool(doc.get("pending_resume"))


def relaunched(exp_id: str) -> bool:
    """Whether the run's resume policy started its next attempt (the attempt's record is on disk)."""
    return (run_dir(exp_id) / rundir.NEXT_ATTEMPT).is_file()


def test_a_monitor_killed_with_nobody_calling_is_replaced_and_still_tells_and_ends_the_run(tmux_socket: str,
                                                                                           workdir: Path):
    script, go, events = workdir / "trains.py", workdir / "go", workdir / "events.jsonl"
    script.write_text(TRAINS)
    out = call("launch_experiment", name="k9", workdir=str(workdir), command=f"{PY} {script} {go}", max_time_s=15,
               policy={"notify_command": f"cat >> {events}"})
    wait_until(lambda: "first_step" in kinds(events), timeout=30)
    first = pid_of(out["id"])
    os.kill(first, signal.SIGKILL)
    go.write_text("")  # an error after the monitor died
    # no tool call from here on: only the supervisor and the monitor it starts act
    wait_until(lambda: "end" in kinds(events), timeout=60, interval=0.2)
    got = kinds(events)
    assert "failure" in got and "stopped" in got, got  # the error, then the max time, told by the new monitor
    assert not pid_alive(out["processes"][0]["pid"]) and not pid_alive(first)
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "timed_out", seen["summary"]
    assert "the run's monitor on local was replaced (at " in seen["note"], seen["note"]
    assert "by its supervisor): its process ended before the run did" in seen["note"]


def test_a_frozen_monitor_past_the_max_time_is_replaced_and_the_run_ended(tmux_socket: str, workdir: Path):
    script, events = workdir / "hang.py", workdir / "events.jsonl"
    script.write_text(HANGS)
    out = call("launch_experiment", name="frozen", workdir=str(workdir), command=f"{PY} {script} silent -",
               max_time_s=10, policy={"notify_command": f"cat >> {events}"})
    wait_until(lambda: "first_step" in kinds(events), timeout=30)
    frozen = pid_of(out["id"])
    os.kill(frozen, signal.SIGSTOP)  # as a monitor stuck on a hung NFS read: it still holds its lock
    try:
        # no tool call: the supervisor replaces it once the max time is 10 s past, and the new one ends the run
        wait_until(lambda: not pid_alive(out["processes"][0]["pid"]), timeout=60, interval=0.2)
        assert not pid_alive(frozen)  # ended (SIGKILL ends a stopped process)
    finally:
        if pid_alive(frozen):
            os.kill(frozen, signal.SIGCONT)
    wait_until(lambda: "end" in kinds(events), timeout=30)
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "timed_out", seen["summary"]
    assert "the run's max time passed" in seen["note"] and "it had not ended the run" in seen["note"], seen["note"]


def test_a_frozen_monitor_is_said_frozen_by_status_with_who_replaces_it(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="stale", command="sleep 120", workdir=str(workdir))
    where = run_dir(out["id"])
    frozen, keeper = pid_of(out["id"]), pid_of(out["id"], rundir.SUPERVISOR_BEAT)
    for pid in (keeper, frozen):
        os.kill(pid, signal.SIGSTOP)
    try:
        beat = where / rundir.BEAT  # its last beat 200 s ago on the boot clock, as a monitor stuck that long
        os.utime(beat, (procs.uptime() - 200, procs.uptime() - 200))
        seen = status(out["id"], max_lines=0)
        assert seen["state"] == "running", seen["summary"]
        assert re.search(r"the run's monitor on local has given no sign of life for 20\d s \(frozen: stopped, or stuck "
                         r"on a hung filesystem; its supervisor replaces it\)", seen["note"] or ""), seen["note"]
    finally:
        for pid in (keeper, frozen):
            os.kill(pid, signal.SIGCONT)
    call("stop_experiment", id=out["id"], grace_s=1)


def test_a_monitor_killed_during_the_backoff_is_replaced_and_the_run_relaunched(tmux_socket: str, workdir: Path):
    script, ckpt, starts, events = workdir / "resumes.py", workdir / "ckpt", workdir / "starts", workdir / "ev.jsonl"
    script.write_text(RESUMES_ONCE)
    out = call("launch_experiment", name="backoff_k9", workdir=str(workdir),
               command=f"{PY} {script} {ckpt} {starts} 50",
               policy={"on_error": "resume", "max_resumes": 1, "backoff_s": 6, "notify_command": f"cat >> {events}"})
    first = out["id"]
    wait_until(lambda: in_backoff(first), timeout=30, interval=0.1)
    os.kill(pid_of(first), signal.SIGKILL)
    # no tool call: the supervisor starts a monitor that takes up the backoff where it was
    wait_until(lambda: relaunched(first), timeout=60, interval=0.2)
    assert starts.read_text() == "2"
    wait_until(lambda: "restart" in kinds(events), timeout=10)
    assert [e["next_id"] for e in told(events) if e["kind"] == "restart"] == [f"{first}.r2"], told(events)
    seen = status(first, max_lines=0)
    assert seen["next_attempt"] == f"{first}.r2" and "by its supervisor" in seen["note"], seen
    call("stop_experiment", id=first, grace_s=1)


@pytest.mark.skipif(not have_root_mounts(), reason="mounting a tmpfs needs root")
def test_a_relaunch_a_full_disk_refused_is_said_failed_and_done_once_there_is_space(
        tmux_socket: str, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    disk = FullDisk(tmp_path / "disk", "16m")
    monkeypatch.setenv("SKILL_SERVER_STATE_DIR", str(disk.path / "state"))
    monkeypatch.setenv("SKILL_SERVER_REGISTRY_DIR", str(tmp_path / "registry"))  # the registry stays writable
    try:
        script, ckpt, starts, events = workdir / "r.py", workdir / "ckpt", workdir / "starts", workdir / "ev.jsonl"
        script.write_text(RESUMES_ONCE)
        out = call("launch_experiment", name="diskfull", workdir=str(workdir),
                   command=f"{PY} {script} {ckpt} {starts} 50",
                   policy={"on_error": "resume", "max_resumes": 1, "backoff_s": 3,
                           "notify_command": f"cat >> {events}"})
        first = out["id"]
        wait_until(lambda: in_backoff(first), timeout=30, interval=0.05)
        disk.fill()
        time.sleep(6)  # the backoff ends on a full disk; no tool call until the check
        waited = call("wait_experiment", id=first, timeout_s=5)
        assert (waited["reason"], waited["next_wait_s"]) == ("exited", 0), waited["summary"]
        assert "its resume could not be carried out (relaunch failed: the relaunch was refused: " in waited["summary"]
        assert "No space left on device" in waited["actions"][-1], waited["actions"]
        assert starts.read_text() == "1"
        assert "failure" in kinds(events)  # told through a pipe, though the run's disk is full
        assert any(e["kind"] == "failure" and e["signature"] == "relaunch_failed" for e in told(events)), told(events)
        disk.free()
        wait_until(lambda: relaunched(first), timeout=60, interval=0.2)
        seen = status(first, max_lines=0)
        assert seen["next_attempt"] == f"{first}.r2"
        assert status(f"{first}.r2", max_lines=0)["state"] == "running"
        call("stop_experiment", id=first, grace_s=1)
    finally:
        subprocess.run(["tmux", "-L", tmux_socket, "kill-server"], capture_output=True, check=False)
        for exp_dir in (disk.path / "state" / "runs").glob("*/*"):
            for pid in (pid for beat in ("monitor.beat", "supervisor.beat")
                        if (pid := (heartbeat.read(str(exp_dir / beat))[0] or {}).get("pid"))):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        disk.unmount()


def ended_here(exp_id: str) -> bool:
    """The run's monitor wrote its last document (after its last notifications)."""
    try:
        return bool(json.loads((run_dir(exp_id) / rundir.FINDINGS).read_text()).get("ended"))
    except (OSError, ValueError):
        return False


def test_notifications_still_queued_when_the_run_ends_are_all_sent_by_a_slow_notify_command(tmux_socket: str,
                                                                                             workdir: Path):
    script, events = workdir / "hang.py", workdir / "events.jsonl"
    script.write_text(HANGS)
    out = call("launch_experiment", name="slowtell", workdir=str(workdir), command=f"{PY} {script} nccl -",
               policy={"on_error": "stop", "on_end": "collect", "notify_command": f"sleep 3; cat >> {events}"})
    # no tool call: five happenings 3 s each, four of them still queued when the run has ended (about 2 s in)
    wait_until(lambda: ended_here(out["id"]), timeout=60, interval=0.2)
    assert kinds(events) == ["started", "first_step", "failure", "stopped", "end"]
    assert told(events)[-1]["state"] == "stopped"
    seen = status(out["id"], max_lines=0)
    assert seen["state"] == "stopped" and not [a for a in seen["actions"] if "-> notify" in a], seen["actions"]


def test_notifications_a_killed_monitor_still_owed_are_sent_by_its_replacement(tmux_socket: str, workdir: Path):
    """The queue is part of ``monitor.json``: what the killed monitor had queued is sent by its replacement, and
    the one it had started (which outlives it) is not sent again; the notify file got each line once."""
    script, events, alerts = workdir / "hang.py", workdir / "events.jsonl", workdir / "alerts"
    script.write_text(HANGS)
    out = call("launch_experiment", name="owed", workdir=str(workdir), command=f"{PY} {script} nccl -",
               policy={"on_error": "notify", "notify_command": f"sleep 6; cat >> {events}",
                       "notify_file": str(alerts)})
    findings = run_dir(out["id"]) / rundir.FINDINGS

    def owed() -> int:
        try:
            return len(json.loads(findings.read_text()).get("notify_queue") or [])
        except (OSError, ValueError):
            return 0

    # the first step and the failure are handled and recorded, waiting behind started's notification (6 s)
    wait_until(lambda: owed() == 2, timeout=20, interval=0.05)
    os.kill(pid_of(out["id"]), signal.SIGKILL)
    # no tool call: the supervisor's new monitor sends what the old one owed
    wait_until(lambda: len(told(events)) >= 3, timeout=40, interval=0.2)
    time.sleep(1)
    assert kinds(events) == ["started", "first_step", "failure"]
    said = [line.split(" ", 1)[1].split(":")[0] for line in alerts.read_text().splitlines()]  # without the time
    assert said == [f"{out['id']} started", f"{out['id']} first_step", f"{out['id']} failure"], said
    call("stop_experiment", id=out["id"], grace_s=1)


def test_a_hanging_notify_command_still_gets_the_end_and_what_it_never_got_is_recorded(tmux_socket: str,
                                                                                       workdir: Path):
    script, events = workdir / "hang.py", workdir / "events.jsonl"
    script.write_text(HANGS)
    hangs_but_on_the_end = (f"read -r line; printf '%s\\n' \"$line\" >> {events}; "
                            "case \"$line\" in *'\"kind\": \"end\"'*) ;; *) exec sleep 60;; esac")
    out = call("launch_experiment", name="hangtell", workdir=str(workdir), command=f"{PY} {script} nccl -",
               policy={"on_error": "stop", "on_end": "collect", "notify_command": hangs_but_on_the_end})
    # no tool call: each notification hangs (killed at 10 s) while the rest queue up behind it
    wait_until(lambda: ended_here(out["id"]), timeout=80, interval=0.2)
    got = kinds(events)  # what the command was given: the first ones in order, then the end, not the rest
    assert got[0] == "started" and got[-1] == "end" and len(got) < 5, got
    seen = status(out["id"], max_lines=0)
    line = next((a for a in seen["actions"] if "-> notify: not sent" in a), None)
    assert line is not None and line.endswith(f"-> notify: not sent ({5 - len(got)} so far): the notify command hung")
    never = line.split(" -> ")[0].split(" ", 1)[1].split(", ")
    assert sorted(got + never) == sorted(["started", "first_step", "failure", "stopped", "end"]), (got, never)
    assert any(f"-> notify: failed ({len(got) - 1} so far, {len(got) - 1} killed at the time bound): killed after"
               in a for a in seen["actions"]), seen["actions"]


def test_a_notify_command_that_floods_its_output_leaves_a_bounded_notify_log(tmux_socket: str, workdir: Path):
    script, events = workdir / "one.py", workdir / "events.jsonl"
    script.write_text('print("step:1 - critic/score/mean:0.1 - training/global_step:1", flush=True)\n')
    floods = f"cat >> {events}; head -c 30000000 /dev/zero; echo oops >&2"
    out = call("launch_experiment", name="floods", workdir=str(workdir), command=f"{PY} {script}",
               policy={"notify_command": floods})
    wait_until(lambda: ended_here(out["id"]), timeout=60, interval=0.2)  # no tool call
    assert kinds(events) == ["started", "first_step", "end"]
    log = run_dir(out["id"]) / rundir.NOTIFY_LOG
    text = log.read_bytes()
    assert len(text) < 3 * (notifier.OUTPUT_KEPT + 200), len(text)  # 90 MB written: 8 KiB kept of each run
    assert text.count(b"more bytes of output not kept]") == 3
    assert not [a for a in status(out["id"], max_lines=0)["actions"] if "-> notify" in a]


def relaunched_at_once(workdir: Path, name: str) -> str:
    """A run whose first start fails (an NCCL timeout) and that its resume policy relaunches at once as
    ``<id>.r2``, which trains on: its first id, once the relaunch is done (no tool call)."""
    script, ckpt, starts, events = workdir / "r.py", workdir / "ckpt", workdir / "starts", workdir / "ev.jsonl"
    script.write_text(RESUMES_ONCE)
    out = call("launch_experiment", name=name, workdir=str(workdir), command=f"{PY} {script} {ckpt} {starts} 50",
               policy={"on_error": "resume", "max_resumes": 1, "backoff_s": 0, "notify_command": f"cat >> {events}"})
    wait_until(lambda: relaunched(out["id"]), timeout=40, interval=0.1)
    return out["id"]


def test_a_stop_on_the_first_id_stops_the_attempt_its_policy_started(tmux_socket: str, workdir: Path):
    first = relaunched_at_once(workdir, "chainstop")
    wait_until(lambda: marked_pids(f"{first}.r2/"), timeout=10)
    stopped = call("stop_experiment", id=first, grace_s=1)  # the id the user knows
    assert marked_pids(f"{first}.r2/") == []
    assert f"also stopped {first}.r2 (stopped)" in stopped["summary"], stopped["summary"]
    assert status(f"{first}.r2", max_lines=0)["state"] == "stopped"


def test_an_attempt_s_own_id_is_found_before_anything_took_it_up(tmux_socket: str, workdir: Path):
    first = relaunched_at_once(workdir, "byattempt")
    with open_registry() as reg:
        assert reg.get(f"{first}.r2") is None  # nothing has taken it up yet
    seen = status(f"{first}.r2", max_lines=0)  # the id its notifications carry
    assert (seen["id"], seen["previous_attempt"], seen["state"]) == (f"{first}.r2", first, "running")
    call("stop_experiment", id=f"{first}.r2", grace_s=1)


@pytest.mark.skipif(not have_faketime(), reason="libfaketime (Debian: faketime) is not installed")
def test_the_restart_throttle_is_not_fooled_by_a_caller_whose_clock_is_behind(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="behind", command="sleep 120", workdir=str(workdir))
    where = run_dir(out["id"])
    first, keeper = pid_of(out["id"]), pid_of(out["id"], rundir.SUPERVISOR_BEAT)
    stamp = where / rundir.RESTARTED
    stamp.write_text(f"{procs.uptime() - 60:.3f}\n")  # a status call started the monitor a minute ago
    os.utime(stamp, (time.time() - 60, time.time() - 60))
    os.kill(keeper, signal.SIGKILL)
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not pid_alive(first) and not pid_alive(keeper))
    args = {"id": out["id"], "max_lines": 0}
    proc = run_cli("call", "experiment_status", "--json", json.dumps(args), env=clock_step_env(cli_env(), "-2h"))
    assert proc.returncode == 0, proc.stderr
    wait_until(lambda: (pid := pid_of(out["id"])) != first and pid_alive(pid), timeout=20)
    call("stop_experiment", id=out["id"], grace_s=1)


@pytest.mark.skipif(not have_root_mounts(), reason="a read-only bind mount needs root")
def test_a_stop_in_a_read_only_run_directory_is_recorded_stopped_for_good(tmux_socket: str, workdir: Path):
    script = workdir / "hang.py"
    script.write_text(HANGS)
    out = call("launch_experiment", name="rostop", workdir=str(workdir), command=f"{PY} {script} silent -")
    wait_until(lambda: status(out["id"], max_lines=0)["first_step_seen"], timeout=30)
    runs = Path(os.environ["SKILL_SERVER_STATE_DIR"]) / "runs"
    frozen = ReadOnlyBind(runs)
    try:
        stopped = call("stop_experiment", id=out["id"], grace_s=1)
        assert stopped["state"] == "stopped" and stopped["interrupted"] == ["main"], stopped["summary"]
        assert "could not be written, so the stop is recorded here only" in stopped["note"]
        assert not pid_alive(out["processes"][0]["pid"])
    finally:
        frozen.unmount()
    again = status(out["id"], max_lines=0)
    assert (again["state"], again["exit_code"]) == ("stopped", None), again["summary"]


def test_a_lock_whose_holder_would_not_die_is_fenced_and_the_old_holder_ends_itself(tmp_path: Path):
    """A monitor stuck in the kernel (here: a process the beat record does not name, so SIGKILL never reaches it)
    keeps its lock: the replacement fences it, the new monitor locks a new file, and the old one, should it run
    again, finds that its lock is no longer the run's."""
    path = str(tmp_path / rundir.LOCK)
    old = heartbeat.Lock(path)
    assert old.acquire() and not heartbeat.lock_free(path)
    began = time.monotonic()
    assert supervisor._let_go(path, None) is True  # nothing to kill: fenced after LET_GO_S
    assert time.monotonic() - began >= supervisor.LET_GO_S
    assert heartbeat.lock_free(path) and old.superseded()
    new = heartbeat.Lock(path)
    assert new.acquire() and not new.superseded() and not heartbeat.lock_free(path)
    old.release()
    new.release()


def test_a_beat_says_busy_and_stale_on_the_boot_clock(tmp_path: Path):
    beat = heartbeat.Beat(str(tmp_path / rundir.BEAT))
    beat.start(phase="running", deadline=None)
    record, at = heartbeat.read(beat.path)
    assert record["pid"] == os.getpid() and record["phase"] == "running" and record["space"] == procs.pid_space()
    assert 0 <= heartbeat.age(at) < 2
    beat.beat(busy_s=120)  # a relaunch ahead: not stale before it is over
    assert heartbeat.age(heartbeat.read(beat.path)[1]) < -100
    beat.update(phase="stopping")
    assert heartbeat.read(beat.path)[0]["phase"] == "stopping"
    assert os.path.getsize(beat.path) == heartbeat.RECORD_BYTES  # rewritten in place


class Twin:
    """A "machine" of its own: PID, mount and UTS namespaces held open by a sleeping pid 1, with host name ``twin``
    and the machine id in ``machine_id`` (two twins get the same), sharing this machine's files (so a state
    directory and a registry, as a shared home would)."""

    def __init__(self, machine_id: Path, tmux_dir: Path) -> None:
        from tests.slurm_cluster import _children

        script = f"hostname twin && mount --bind {machine_id} /etc/machine-id && exec sleep infinity"
        self.holder = subprocess.Popen(["unshare", "--pid", "--fork", "--mount", "--uts", "--mount-proc",
                                        "--propagation", "private", "sh", "-c", script], stdin=subprocess.DEVNULL)
        self.tmux_dir = tmux_dir
        self.pid = wait_until(lambda: (kids := _children(self.holder.pid)) and kids[0], timeout=10)
        wait_until(lambda: Path(f"/proc/{self.pid}/comm").read_text().strip() == "sleep", timeout=10)

    def call(self, env: dict[str, str], tool: str, **arguments: object) -> subprocess.CompletedProcess[str]:
        argv = ["nsenter", f"--target={self.pid}", "--pid", "--mount", "--uts", "--", "env",
                f"TMUX_TMPDIR={self.tmux_dir}", sys.executable, "-m", "skill_server", "call", tool, "--json",
                json.dumps(arguments)]
        return subprocess.run(argv, env=env, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)

    def stop(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)  # pid 1 of the namespace: the kernel ends everything in it
        except OSError:
            pass
        self.holder.wait(timeout=10)


@pytest.mark.skipif(not have_root_mounts() or shutil.which("unshare") is None, reason="namespaces need root")
def test_two_machines_with_one_host_identity_sharing_a_registry_leave_each_other_s_runs_alone(
        tmux_socket: str, workdir: Path, tmp_path: Path):
    (tmp_path / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    env = cli_env(SKILL_SERVER_REGISTRY_DIR=str(tmp_path / "registry"))
    twins = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            twins.append(Twin(tmp_path / "machine-id", tmp_path / name))
        a, b = twins
        launched = a.call(env, "launch_experiment", name="twin", command="sleep 300", workdir=str(workdir))
        assert launched.returncode == 0, launched.stderr
        exp_id = json.loads(launched.stdout)["id"]
        seen = b.call(env, "experiment_status", id=exp_id, max_lines=0)
        assert seen.returncode == 0, seen.stderr
        run = json.loads(seen.stdout)["experiments"][0]
        assert run["state"] == "unreachable", run
        assert "another machine (or container) with this host's identity" in run["note"], run["note"]
        refused = b.call(env, "stop_experiment", id=exp_id)
        assert "not stopped from here" in refused.stdout + refused.stderr, (refused.stdout, refused.stderr)
        mine = json.loads(a.call(env, "experiment_status", id=exp_id, max_lines=0).stdout)["experiments"][0]
        assert mine["state"] == "running", mine
        stopped = a.call(env, "stop_experiment", id=exp_id, grace_s=1)
        assert stopped.returncode == 0 and json.loads(stopped.stdout)["state"] == "stopped", stopped.stderr
    finally:
        for twin in twins:
            twin.stop()
