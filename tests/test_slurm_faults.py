"""Slurm's word decides, and nothing watches alone inside a job (issue 31), on the real two-node cluster of
tests/slurm_cluster.py with this machine as the login node: a monitor killed inside the job is replaced there and
its policy still cancels the job; a requeued job is queued, then running again (the same attempt, with a note); a
job SIGKILLed and forgotten before any call ends lost with the reason; a stop while slurmctld hangs says it could
not be confirmed and what the run's monitor did on its node; an sbatch that found no controller leaves no
rollback behind; a job that ran while its launch was interrupted stays visible.

Each fault test makes no tool call between the fault and its check where the scenario says so (it reads the
job's files and asks Slurm itself, as a user at the login node would).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skill_server.hosts.agent import heartbeat, procs, rundir
from tests.conftest import REPO
from tests.slurm_cluster import CONTROLLER, SLURMCTLD, Daemon, SlurmCluster, _in_namespace, slurm  # noqa: F401
from tests.test_slurm_runs import Lab, forgotten, launch_killed_after_sbatch
from tests.test_unattended import kinds, told

#: Step lines, then (once the file ``go`` exists) an NCCL collective timeout, then a hang, as a hung rank does.
HANGS_ON_GO = r'''
import os, sys, time
go = sys.argv[1]
for step in range(1, 4):
    print("step:%d - critic/score/mean:0.1 - training/global_step:%d" % (step, step), flush=True)
    time.sleep(0.2)
while not os.path.exists(go):
    time.sleep(0.2)
print("[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE) ran for "
      "600000 milliseconds before timing out.", flush=True)
time.sleep(600)
'''


@pytest.fixture(scope="module")
def lab(slurm: SlurmCluster) -> Iterator[Lab]:  # noqa: F811
    yield Lab(slurm)


def run_dir_of(lab: Lab, exp_id: str) -> Path:
    return next(iter((lab.state / "runs" / exp_id).glob("*")))


def record(rdir: Path) -> dict[str, Any]:
    try:
        return json.loads((rdir / "job.json").read_text())
    except (OSError, ValueError):
        return {}


def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < end, what
        time.sleep(0.2)
    return value


def job_pids(lab: Lab, node: str, job: int) -> list[int]:
    """Every process on ``node`` of job ``job`` (its environment says so): its batch shell, the run's processes,
    its monitor and supervisor."""
    script = (f"for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -qx SLURM_JOB_ID={job} "
              "&& echo ${p#/proc/}; done")
    return [int(x) for x in lab.cluster.node_exec(node, ["sh", "-c", script]).stdout.split()]


def slurmctld_pids(lab: Lab) -> list[int]:
    daemon = lab.cluster.daemons["slurmctld"]
    return [p for p in _in_namespace(daemon.namespace) if Path(f"/proc/{p}/comm").read_text().strip() == "slurmctld"]


def restart_controller(lab: Lab, clear: bool = False) -> None:
    """slurmctld started again after it was killed; ``clear``: with ``-c``, so that it has lost every job (as after
    a crash that lost its state; job ids start over)."""
    cluster = lab.cluster
    argv = [SLURMCTLD, "-D", *(["-c"] if clear else []), "-f", str(cluster.conf)]
    cluster.daemons["slurmctld"] = Daemon("slurmctld", argv, cluster.root / "log" / "slurmctld.out",
                                          hostname=CONTROLLER, network=cluster.network)
    wait_for(lambda: cluster.run("sinfo", "-h", timeout=20).returncode == 0, 60, "slurmctld did not come back")


def hangs_on_go_in_a_job(lab: Lab, name: str, signal_flag: str) -> tuple[dict[str, Any], Path, Path, Path]:
    """A job (one GPU) whose run hangs on an NCCL error once ``go`` exists, with ``on_error: stop`` and every event
    told: once it trained its first step, its monitor (a pid on its node) gets ``kill <signal_flag>``. (the launch,
    its run directory, ``go``, the events file)."""
    script, go, events = lab.work / "hang_on_go.py", lab.work / f"{name}_go", lab.work / f"{name}_events.jsonl"
    script.write_text(HANGS_ON_GO)
    run = lab.call("launch_experiment", name=name, command=f"{sys.executable} {script} {go}",
                   workdir=str(lab.work), max_time_s=3600, slurm={"gpus_per_node": 1},
                   policy={"on_error": "stop", "notify_command": f"cat >> {events}"})
    rdir = run_dir_of(lab, run["id"])
    wait_for(lambda: "first_step" in kinds(events), 90, "no first step")
    monitor = heartbeat.read(str(rdir / rundir.BEAT))[0]["pid"]
    assert lab.cluster.node_exec(record(rdir)["nodes"], ["kill", signal_flag, str(monitor)]).returncode == 0
    return run, rdir, go, events


def test_a_monitor_killed_inside_the_job_is_replaced_there_and_its_policy_still_cancels_the_job(lab: Lab):
    run, rdir, go, events = hangs_on_go_in_a_job(lab, "k9_job", "-9")
    go.write_text("")  # the NCCL error comes after the monitor died
    # no tool call from here on: the supervisor in the job starts a monitor, which sees the error and cancels
    wait_for(lambda: record(rdir).get("state") == "CANCELLED", 60, "the job was not cancelled")
    job = int(record(rdir)["job_id"])
    lab.cluster.wait_job(job, {"CANCELLED"}, timeout=60)
    assert "stopped" in kinds(events), told(events)
    seen = lab.status(run["id"], max_lines=0)
    assert seen["state"] == "stopped" and seen["scheduler"]["state"] == "CANCELLED", seen
    assert "was replaced (at " in seen["note"] and "by its supervisor): its process ended" in seen["note"], seen


def test_a_frozen_monitor_inside_the_job_is_replaced_there_and_its_policy_still_cancels_the_job(lab: Lab):
    run, rdir, go, events = hangs_on_go_in_a_job(lab, "frozen_job", "-STOP")
    # as a monitor stuck on a hung NFS read for 200 s (one boot clock for the node and this machine)
    os.utime(rdir / rundir.BEAT, (procs.uptime() - 200, procs.uptime() - 200))
    go.write_text("")  # the NCCL error comes while it is frozen
    # no tool call from here on: the supervisor in the job replaces it, and the new monitor cancels the job
    wait_for(lambda: record(rdir).get("state") == "CANCELLED", 60, "the job was not cancelled")
    why = json.loads((rdir / rundir.REPLACED).read_text())[-1]["why"]
    assert why.startswith("it gave no sign of life for "), why
    assert "stopped" in kinds(events), told(events)
    seen = lab.status(run["id"], max_lines=0)
    assert seen["state"] == "stopped" and seen["scheduler"]["state"] == "CANCELLED", seen
    assert "by its supervisor): it gave no sign of life" in seen["note"], seen["note"]


def test_a_requeued_job_is_queued_then_running_again_as_the_same_attempt(lab: Lab):
    alerts = lab.work / "requeued_alerts.log"
    run = lab.call("launch_experiment", name="requeued", command="echo started; sleep 300", workdir=str(lab.work),
                   host="local", max_time_s=3600, slurm={}, policy={"notify_file": str(alerts)})
    lab.call("wait_experiment", id=run["id"], until="started", timeout_s=50)
    rdir = run_dir_of(lab, run["id"])
    job = int(record(rdir)["job_id"])
    lab.wait_for(run["id"], lambda s: "started" in s["lines"], timeout=30)
    assert lab.cluster.run("scontrol", "requeue", str(job)).returncode == 0
    lab.cluster.wait_job(job, {"PENDING"}, timeout=30)
    wait_for(lambda: record(rdir).get("state") == "REQUEUED", 30, "the trap did not record the requeue")
    queued = lab.status(run["id"], max_lines=0)
    assert queued["state"] == "queued" and queued["processes"][0]["state"] == "waiting", queued["summary"]
    assert "Slurm requeued job" in queued["note"] and "as the same attempt" in queued["note"], queued["note"]
    assert lab.cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now").returncode == 0
    again = lab.wait_for(run["id"], lambda s: s["state"] == "running" and s["lines"].count("started") == 2,
                         timeout=90)
    assert again["scheduler"]["state"] == "RUNNING" and again["processes"][0]["state"] == "running"
    assert "Slurm requeued job" in again["note"]
    assert (rdir / "requeued.1" / "main.exit").is_file()  # what the first start left, set aside
    told = wait_for(lambda: [line for line in alerts.read_text().splitlines() if " restart: " in line], 30,
                    "the requeue was not told")  # the one line a user reads: a restart of the same attempt
    assert f"its Slurm job {job} was requeued: the processes started again (attempt 1, start 2)" in told[0], told
    assert [line.split(" ")[2] for line in alerts.read_text().splitlines()] == ["started:", "restart:"]
    stopped = lab.call("stop_experiment", id=run["id"], grace_s=2)
    assert stopped["state"] == "stopped" and stopped["scheduler"]["state"] == "CANCELLED", stopped["summary"]


def test_a_job_killed_and_forgotten_before_any_call_ends_lost_with_the_reason(lab: Lab):
    run = lab.launch("forgotten", "echo started; sleep 300")
    rdir = run_dir_of(lab, run["id"])
    wait_for(lambda: record(rdir).get("state") == "RUNNING" and (rdir / "main.pid").is_file(), 60, "never ran")
    node, job = record(rdir)["nodes"], int(record(rdir)["job_id"])
    pids = wait_for(lambda: job_pids(lab, node, job), 10, "no process of the job on its node")
    # as a node's OOM killer or reboot: every process of the job at once, nothing records anything
    lab.cluster.node_exec(node, ["kill", "-9", *map(str, pids)])
    forgotten(lab, job)  # Slurm forgets it (MinJobAge); still no tool call
    assert record(rdir)["state"] == "RUNNING"  # the job's own record was cut short
    status = lab.status(run["id"], max_lines=0)
    assert status["state"] == "lost" and status["scheduler"]["state"] == "LOST", status
    assert f"Slurm no longer knows job {job} and its own record stops at RUNNING" in status["note"], status["note"]
    waited = lab.call("wait_experiment", id=run["id"], timeout_s=10)
    assert (waited["reason"], waited["state"]) == ("exited", "lost"), waited["summary"]
    assert record(rdir)["source"] == "judged" and record(rdir)["state"] == "LOST"  # kept: every call says the same
    again = lab.status(run["id"], max_lines=0)
    assert again["state"] == "lost" and f"Slurm no longer knows job {job}" in again["note"], again


def test_a_stop_while_slurmctld_hangs_says_it_could_not_be_confirmed_and_what_was_done_on_the_node(lab: Lab):
    run = lab.launch("ctld_hangs", "echo started; sleep 301")
    lab.call("wait_experiment", id=run["id"], until="started", timeout_s=50)
    rdir = run_dir_of(lab, run["id"])
    node = lab.wait_for(run["id"], lambda s: "started" in s["lines"], timeout=30)["scheduler"]["nodes"]
    pids = slurmctld_pids(lab)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        stopped = lab.call("stop_experiment", id=run["id"], grace_s=2)
        left = lab.cluster.node_exec(node, ["pgrep", "-f", "sleep 301"]).stdout.split()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    summary = stopped["summary"]
    assert "nothing was running" not in summary, summary
    assert summary.startswith(f"Run {run['id']}: the stop could not be confirmed (local: the run's monitor in the "
                              f"job stopped its processes on {node}: SIGINT to main"), summary
    assert "Slurm did not answer" in summary
    assert left == [], left  # the monitor ended them on their node
    assert (rdir / "main.stopped").is_file()
    done = lab.wait_for(run["id"], lambda s: s["state"] not in ("running", "queued"), timeout=90)
    assert done["state"] == "stopped", done["summary"]


def test_an_sbatch_that_found_no_controller_leaves_no_rollback_behind(lab: Lab, tmp_path: Path):
    """A login node whose slurm.conf names a controller port nothing listens on: sbatch says it could not contact
    the controller, so nothing was submitted, and the launch is undone at once although Slurm still cannot be
    asked."""
    conf = tmp_path / "slurm.conf"
    conf.write_text(lab.cluster.conf.read_text().replace("SlurmctldPort=16817", "SlurmctldPort=16819"))
    env = dict(lab.env, SLURM_CONF=str(conf))
    args = {"name": "no_controller", "command": "true", "workdir": str(lab.work), "slurm": {}}
    proc = subprocess.run(lab.argv("launch_experiment", args), env=env, capture_output=True, text=True, cwd=REPO,
                          timeout=180, check=False)
    assert proc.returncode != 0 and "Unable to contact slurm controller" in proc.stderr, proc.stderr
    listed = subprocess.run(lab.argv("experiment_status", {}), env=env, capture_output=True, text=True, cwd=REPO,
                            timeout=180, check=False)
    assert listed.returncode == 0 and "rolling back" not in listed.stderr, listed.stderr
    from skill_server.experiments.store import open_registry

    before = os.environ.get("SKILL_SERVER_STATE_DIR")
    os.environ["SKILL_SERVER_STATE_DIR"] = str(lab.state)
    try:
        with open_registry() as reg:
            assert [r.id for r in reg.pending() if "no_controller" in r.session] == []
    finally:
        if before is not None:
            os.environ["SKILL_SERVER_STATE_DIR"] = before


def test_a_job_that_ran_while_its_launch_was_interrupted_stays_visible(lab: Lab, tmp_path: Path):
    """sbatch answers, the launching CLI is killed before it records the job, and the job runs to its end and is
    forgotten before any other call: that call keeps the run (its job ran), it does not roll it back to nothing."""
    launch_killed_after_sbatch(lab, tmp_path, "ran_anyway", "echo ran to its end")
    rdir = wait_for(lambda: next(iter((lab.state / "runs").glob("ajet_ran_anyway-*/*")), None), 10, "no run dir")
    wait_for(lambda: record(rdir).get("state") == "COMPLETED", 90, "the job did not complete")
    forgotten(lab, int(record(rdir)["job_id"]))
    listed = [e for e in lab.call("experiment_status")["experiments"] if e["session"] == "ajet_ran_anyway"]
    assert len(listed) == 1 and listed[0]["state"] == "succeeded", listed
    assert "its launch was interrupted after it submitted the job, which ran: kept" in listed[0]["note"]
    assert "ran to its end" in lab.status(listed[0]["id"], since="0")["lines"]


def test_a_stop_while_slurmctld_is_down_says_it_could_not_be_confirmed_and_the_job_ends_once_it_is_back(lab: Lab):
    run = lab.launch("ctld_down", "echo started; sleep 302")
    lab.call("wait_experiment", id=run["id"], until="started", timeout_s=50)
    node = lab.wait_for(run["id"], lambda s: "started" in s["lines"], timeout=30)["scheduler"]["nodes"]
    lab.cluster.daemons["slurmctld"].stop()  # killed: nothing listens on its port
    try:
        stopped = lab.call("stop_experiment", id=run["id"], grace_s=2)
        left = lab.cluster.node_exec(node, ["pgrep", "-f", "sleep 302"]).stdout.split()
    finally:
        restart_controller(lab)
    summary = stopped["summary"]
    assert "nothing was running" not in summary, summary
    assert summary.startswith(f"Run {run['id']}: the stop could not be confirmed (local: the run's monitor in the "
                              f"job stopped its processes on {node}: SIGINT to main"), summary
    assert "Slurm did not answer" in summary and "Unable to contact slurm controller" in summary, summary
    assert left == [], left
    done = lab.wait_for(run["id"], lambda s: s["state"] not in ("running", "queued"), timeout=90)
    assert done["state"] == "stopped", done["summary"]


def test_a_job_its_controller_lost_in_a_crash_ends_lost_with_the_reason(lab: Lab):
    """Last in this module: the controller comes back without its state (job ids start over)."""
    run = lab.launch("ctld_lost", "echo started; sleep 303")
    rdir = run_dir_of(lab, run["id"])
    wait_for(lambda: record(rdir).get("state") == "RUNNING" and (rdir / "main.pid").is_file(), 60, "never ran")
    node, job = record(rdir)["nodes"], int(record(rdir)["job_id"])
    wait_for(lambda: job_pids(lab, node, job), 10, "no process of the job on its node")
    lab.cluster.daemons["slurmctld"].stop()
    restart_controller(lab, clear=True)  # the job is unknown to it: its node is told to kill what is left of it
    wait_for(lambda: not job_pids(lab, node, job), 60, "the job's processes still run on its node")
    # no tool call from the crash to here: the job's own record was cut short
    assert record(rdir)["state"] == "RUNNING"
    status = lab.status(run["id"], max_lines=0)
    assert status["state"] == "lost" and status["scheduler"]["state"] == "LOST", status
    assert f"Slurm no longer knows job {job} and its own record stops at RUNNING" in status["note"], status["note"]
    assert "its controller lost it" in status["note"]
    waited = lab.call("wait_experiment", id=run["id"], timeout_s=10)
    assert (waited["reason"], waited["state"]) == ("exited", "lost"), waited["summary"]
