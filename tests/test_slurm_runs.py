"""Runs submitted to a real Slurm through the tools, as a user calls them (the CLI), with this machine as the
login node: queued (with Slurm's reason), running (on which node), completed, failed (exit code), cancelled,
timed out, a job that ignores SIGTERM, a launch whose controller is killed after sbatch, and the final
states still known once Slurm has forgotten the jobs (MinJobAge; no accounting). The cluster is
tests/slurm_cluster.py's; the server's state directory and the runs' workdir are on its shared folder, as a
home directory on NFS would be. The two runs past their time limit are launched when the module starts, so
that their minute passes while the other tests run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, cli_env
from tests.gpu_helpers import A100, install_fake_smi
from tests.slurm_cluster import SlurmCluster, _in_namespace, slurm  # noqa: F401  (fixtures are used by name)
from tests.sshd import LoopbackSshd
from tests.test_unattended import HANGS, kinds, told

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
#: A process that ignores SIGTERM (Slurm sends it to every process of the job; SIGKILL follows after KillWait).
STUBBORN = (f"{sys.executable} -c \"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('stubborn', flush=True); time.sleep(600)\"")


class Lab:
    """The cluster plus the environment of a tool call on its login node (this machine, in its network)."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster
        self.state = cluster.shared / "state"
        self.work = cluster.shared / "work"
        self.work.mkdir(exist_ok=True)
        self.env = cluster.client_env(cli_env(SKILL_SERVER_STATE_DIR=str(self.state)))

    def argv(self, tool: str, arguments: dict[str, Any]) -> list[str]:
        return self.cluster.argv([sys.executable, "-m", "skill_server", "call", tool, "--json",
                                  json.dumps(arguments)])

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        proc = self.try_call(tool, **arguments)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def try_call(self, tool: str, **arguments: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(tool, arguments), env=self.env, capture_output=True, text=True, cwd=REPO,
                              timeout=180, check=False, stdin=subprocess.DEVNULL)

    def launch(self, name: str, command: str, host: str = "local", **slurm_options: Any) -> dict[str, Any]:
        max_time = slurm_options.pop("max_time_s", 3600)
        return self.call("launch_experiment", name=name, command=command, workdir=str(self.work), host=host,
                         max_time_s=max_time, slurm=slurm_options)

    def status(self, run_id: str, **arguments: Any) -> dict[str, Any]:
        return self.call("experiment_status", id=run_id, **arguments)["experiments"][0]

    def wait_for(self, run_id: str, predicate: Any, timeout: float = 120) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while True:
            status = self.status(run_id, since="0")  # every line from the start
            if predicate(status):
                return status
            assert time.monotonic() < end, status
            time.sleep(0.5)


@pytest.fixture(scope="module")
def lab(slurm: SlurmCluster) -> Iterator[Lab]:  # noqa: F811
    yield Lab(slurm)


@pytest.fixture(scope="module", autouse=True)
def past_the_limit(lab: Lab) -> dict[str, str]:
    """Two runs whose max time is one minute (sbatch --time=1): one dies of SIGTERM, one ignores it."""
    return {"sleeps": lab.launch("limit_sleeps", "echo started; sleep 600", max_time_s=60)["id"],
            "stubborn": lab.launch("limit_stubborn", STUBBORN, max_time_s=60)["id"]}


def job_of(status: dict[str, Any]) -> int:
    return int(status["scheduler"]["job_id"])


def forgotten(lab: Lab, job: int, timeout: float = 90) -> None:
    """Wait until Slurm has forgotten the job (MinJobAge after its end)."""
    end = time.monotonic() + timeout
    while lab.cluster.job(job) is not None:
        assert time.monotonic() < end
        time.sleep(0.5)


def test_a_run_completes_and_one_fails_with_its_exit_code_known_after_slurm_forgets_them(lab: Lab):
    ok = lab.launch("completes", "echo hello from $(hostname); echo 'step:1 - loss:0.5'")
    # the nodes declare no RealMemory (1 MB): mem="1M" is what fits
    bad = lab.launch("fails", "echo going down; exit 7", nodes=1, cpus_per_task=1, mem="1M")
    assert ok["attach"].startswith("tail -F ")
    done = lab.call("wait_experiment", id=ok["id"], timeout_s=50)
    assert (done["state"], done["exit_code"]) == ("succeeded", 0)
    assert done["scheduler"]["state"] == "COMPLETED" and done["scheduler"]["exit_code"] == "0:0"
    assert done["scheduler"]["nodes"] in lab.cluster.nodes
    failed = lab.call("wait_experiment", id=bad["id"], timeout_s=50)
    assert (failed["state"], failed["exit_code"]) == ("failed", 7)
    assert (failed["scheduler"]["state"], failed["scheduler"]["exit_code"]) == ("FAILED", "7:0")
    status = lab.status(ok["id"], since="0")
    assert f"hello from {done['scheduler']['nodes']}" in status["lines"]  # the job's node wrote the log
    assert status["global_step"] == 1 and status["last_metrics"] == {"loss": 0.5}
    for run in (ok, bad):
        forgotten(lab, job_of(lab.status(run["id"])))
    # Slurm has forgotten both (no accounting): the job's own record and the registry still say how they ended
    again = {r["id"]: lab.status(r["id"]) for r in (ok, bad)}
    assert (again[ok["id"]]["state"], again[ok["id"]]["exit_code"]) == ("succeeded", 0)
    assert (again[bad["id"]]["state"], again[bad["id"]]["exit_code"]) == ("failed", 7)
    assert again[bad["id"]]["scheduler"]["state"] == "FAILED"
    # results and comparisons by id, as for tmux runs
    collected = lab.call("collect_results", id=ok["id"], plot=False)
    assert (collected["state"], collected["exit_code"]) == ("succeeded", 0)
    assert collected["finish_flag_path"] and Path(collected["finish_flag_path"]).exists()
    compared = lab.call("compare_experiments", ids=[ok["id"], bad["id"]], plot=False)
    assert {r["id"]: r["state"] for r in compared["runs"]} == {ok["id"]: "succeeded", bad["id"]: "failed"}


def test_a_queued_run_shows_slurm_s_reason_and_is_cancelled_by_stop(lab: Lab):
    later = lab.launch("queued", "echo never", extra_args=["--begin=now+1hour"])
    status = lab.wait_for(later["id"], lambda s: s["scheduler"]["reason"] == "BeginTime", timeout=30)
    assert status["state"] == "queued" and status["processes"][0]["state"] == "waiting"
    assert (status["elapsed_s"], status["time_left_s"]) == (0.0, 3600)  # its clock starts when the job does
    assert status["first_step_overdue"] is False
    assert status["scheduler"]["state"] == "PENDING" and "nodes" not in status["scheduler"]
    assert status["summary"] == (f"Run {later['id']} is queued by Slurm (job {status['scheduler']['job_id']}, reason "
                                 f"BeginTime); next: wait_experiment id={later['id']} until=started.")
    waited = lab.call("wait_experiment", id=later["id"], until="started", timeout_s=2)
    assert (waited["reason"], waited["state"]) == ("timeout", "queued")
    listed = lab.call("experiment_status")["experiments"]
    assert [r["state"] for r in listed if r["id"] == later["id"]] == ["queued"]
    watched = subprocess.run(lab.cluster.argv([sys.executable, "-m", "skill_server", "watch", later["id"], "--json",
                                               "--interval", "0.5", "--max-time", "2"]),
                             env=lab.env, capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    first = json.loads(watched.stdout.splitlines()[0])
    assert (first["event"], first["state"]) == ("started", "queued"), watched.stdout
    stopped = lab.call("stop_experiment", id=later["id"])
    assert stopped["state"] == "stopped"
    assert stopped["scheduler"]["state"] == "CANCELLED"
    fields = lab.cluster.job(job_of(status))
    assert fields is None or fields["JobState"] == "CANCELLED"


def test_a_running_run_is_on_a_node_with_its_gpu_and_stop_cancels_it(lab: Lab):
    run = lab.launch("runs", "echo gpus=$CUDA_VISIBLE_DEVICES on $(hostname); sleep 300", gpus_per_node=1)
    started = lab.call("wait_experiment", id=run["id"], until="started", timeout_s=50)
    assert started["reason"] == "started" and started["state"] == "running"
    status = lab.wait_for(run["id"], lambda s: any("gpus=" in x for x in s["lines"]), timeout=30)
    node = status["scheduler"]["nodes"]
    assert 0 < status["elapsed_s"] < 60 and status["time_left_s"] > 3600 - 60
    assert node in lab.cluster.nodes and status["scheduler"]["state"] == "RUNNING"
    assert any(x.startswith("gpus=") and x.endswith(f"on {node}") and x != "gpus= on " + node
               for x in status["lines"])
    stopped = lab.call("stop_experiment", id=run["id"], grace_s=10)
    assert stopped["state"] == "stopped" and stopped["interrupted"] == ["main"]
    fields = lab.cluster.job(job_of(status))
    assert fields is None or fields["JobState"] == "CANCELLED"
    assert lab.status(run["id"])["state"] == "stopped"


@pytest.mark.needs("pgrep")
def test_a_run_that_ignores_sigterm_is_stopped_only_once_slurm_has_killed_it(lab: Lab):
    run = lab.launch("stubborn", STUBBORN)
    lab.wait_for(run["id"], lambda s: "stubborn" in s["lines"], timeout=60)
    began = time.monotonic()
    stopped = lab.call("stop_experiment", id=run["id"], grace_s=1)
    assert stopped["state"] == "stopped"
    assert time.monotonic() - began >= lab.cluster.kill_wait  # SIGKILL came after KillWait, and stop waited
    job = job_of(stopped)
    fields = lab.cluster.job(job)
    assert fields is None or (fields["JobState"], fields["ExitCode"]) == ("CANCELLED", "0:9")
    for node in lab.cluster.nodes:  # nothing of it is left on any node
        left = lab.cluster.node_exec(node, ["pgrep", "-f", "print('stubborn'"])
        assert left.stdout.strip() == "", node


def launch_killed_after_sbatch(lab: Lab, tmp_path: Path, name: str, command: str) -> None:
    """Launch through an sbatch (the real one) that answers, then lingers: the launching CLI is killed once the
    job is submitted, before it records the job."""
    slow = tmp_path / "bin"
    slow.mkdir()
    real = shutil.which("sbatch")
    (slow / "sbatch").write_text(f"#!/bin/sh\n{real} \"$@\"; code=$?; touch {tmp_path}/submitted; sleep 60; "
                                 "exit $code\n")
    (slow / "sbatch").chmod(0o755)
    env = {**lab.env, "PATH": f"{slow}:{lab.env['PATH']}"}
    args = {"name": name, "command": command, "workdir": str(lab.work), "slurm": {}}
    proc = subprocess.Popen(lab.argv("launch_experiment", args), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, start_new_session=True)
    end = time.monotonic() + 60
    while not (tmp_path / "submitted").exists():
        assert time.monotonic() < end and proc.poll() is None
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the lingering sbatch it left (the test's own stand-in) ends too
    except ProcessLookupError:
        pass


def test_a_controller_killed_after_sbatch_leaves_no_orphan_job(lab: Lab, tmp_path: Path):
    """sbatch (the real one) answers, then the launching CLI is killed before it records the job: the next
    call of any tool rolls the launch back, cancelling the job by its name (the run's id)."""
    launch_killed_after_sbatch(lab, tmp_path, "orphan", "sleep 300")
    names = lab.cluster.run("squeue", "-h", "-o", "%j|%T").stdout.split()
    assert any(n.startswith("ajet_orphan-") for n in names), names
    listed = lab.call("experiment_status")  # any call finishes the interrupted launch
    assert all(not e["session"].endswith("orphan") for e in listed["experiments"])
    end = time.monotonic() + 30
    while any(n.startswith("ajet_orphan-") for n in lab.cluster.run("squeue", "-h", "-o", "%j").stdout.split()):
        assert time.monotonic() < end, "the orphan job is still queued or running"
        time.sleep(0.5)


def test_sbatch_s_refusal_is_one_line_naming_slurm_and_nothing_is_registered(lab: Lab):
    proc = lab.try_call("launch_experiment", name="too_many_gpus", command="true", workdir=str(lab.work),
                        slurm={"gpus_per_node": 3})
    assert proc.returncode != 0
    assert "sbatch refused the job: sbatch: error: Batch job submission failed: Requested node configuration is " \
           "not available" in proc.stderr
    assert "slurm" in proc.stderr
    assert all("too_many_gpus" not in e["session"] for e in lab.call("experiment_status")["experiments"])


def test_runs_past_their_time_limit_end_timed_out(lab: Lab, past_the_limit: dict[str, str]):
    for key in ("sleeps", "stubborn"):
        status = lab.wait_for(past_the_limit[key], lambda s: s["state"] not in ("running", "queued"), timeout=200)
        assert status["state"] == "timed_out", status
        assert status["scheduler"]["state"] == "TIMEOUT"
    stubborn = lab.status(past_the_limit["stubborn"])
    forgotten(lab, job_of(stubborn))
    assert lab.status(past_the_limit["stubborn"])["state"] == "timed_out"


def test_the_login_node_over_ssh_submits_observes_and_stops(lab: Lab):
    """The login node is an ssh destination (an sshd in the cluster's network whose sessions have the
    cluster's SLURM_CONF, as a login node's /etc/slurm would give them): the same calls by id."""
    login = LoopbackSshd(("login",), one_per_node=True, network=lab.cluster.network,
                         node_env={"login": {"SLURM_CONF": str(lab.cluster.conf)}}).start()
    before = lab.env.get("SKILL_SERVER_SSH_CONFIG")
    lab.env["SKILL_SERVER_SSH_CONFIG"] = str(login.config)
    try:
        done = lab.launch("over_ssh", "echo hi from $(hostname)", host="login")
        waited = lab.call("wait_experiment", id=done["id"], timeout_s=50)
        assert (waited["state"], waited["host"], waited["scheduler"]["state"]) == ("succeeded", "login", "COMPLETED")
        assert done["attach"].startswith("ssh login 'tail -F ")
        assert f"hi from {waited['scheduler']['nodes']}" in lab.status(done["id"], since="0")["lines"]
        running = lab.launch("over_ssh_stop", "sleep 300", host="login")
        lab.call("wait_experiment", id=running["id"], until="started", timeout_s=50)
        stopped = lab.call("stop_experiment", id=running["id"])
        assert stopped["state"] == "stopped" and stopped["scheduler"]["state"] == "CANCELLED"
        assert lab.cluster.run("squeue", "-h", "-n", running["id"]).stdout == ""
    finally:
        if before is None:
            lab.env.pop("SKILL_SERVER_SSH_CONFIG", None)
        else:
            lab.env["SKILL_SERVER_SSH_CONFIG"] = before
        login.stop()


def test_one_status_call_over_many_jobs_asks_squeue_once_and_says_each_job_s_state(lab: Lab):
    runs = [lab.launch(f"many{i}", "sleep 300") for i in range(3)]
    ids = {r["id"] for r in runs}
    end = time.monotonic() + 60
    while True:  # the listing observes every run in one call: one squeue for the jobs, not one per job
        listed = {e["id"]: e for e in lab.call("experiment_status")["experiments"] if e["id"] in ids}
        if all(e["scheduler"]["state"] == "RUNNING" for e in listed.values()) and len(listed) == 3:
            break
        assert time.monotonic() < end, listed
        time.sleep(0.5)
    assert all(e["state"] == "running" and e["scheduler"]["nodes"] in lab.cluster.nodes for e in listed.values())
    for run in runs:
        assert lab.call("stop_experiment", id=run["id"], grace_s=5)["state"] == "stopped"
    listed = {e["id"]: e for e in lab.call("experiment_status")["experiments"] if e["id"] in ids}
    assert {e["scheduler"]["state"] for e in listed.values()} == {"CANCELLED"}


def test_a_run_on_two_nodes_starts_ray_across_the_allocation_before_its_processes(lab: Lab):
    ray = Path(sys.executable).parent / "ray"
    assert ray.is_file(), f"{ray} is missing: pip install ray (a test dependency)"
    command = f"{ray} status --address=$RAY_ADDRESS | grep -c ' node_' | sed 's/^/ray nodes: /'"
    # Ray's session files go under RAY_TMPDIR (sbatch and srun carry the caller's environment to the nodes):
    # the cluster's tree, not the machine's /tmp/ray (short: Ray's socket paths must fit in 107 bytes)
    ray_tmp = lab.cluster.root / "rt"
    ray_tmp.mkdir(exist_ok=True)
    lab.env["RAY_TMPDIR"] = str(ray_tmp)
    try:
        run = lab.call("launch_experiment", name="two_nodes", command=command, workdir=str(lab.work),
                       python=sys.executable, env={"RAY_USAGE_STATS_ENABLED": "0"}, slurm={"nodes": 2})
    finally:
        del lab.env["RAY_TMPDIR"]
    end = time.monotonic() + 240
    while (status := lab.status(run["id"], since="0"))["state"] in ("running", "queued"):
        assert time.monotonic() < end, status
        time.sleep(1)
    assert status["state"] == "succeeded", status
    # the processes ended; Slurm may still be releasing the nodes (COMPLETING on the last one), then COMPLETED
    done = lab.wait_for(run["id"], lambda s: s["scheduler"]["state"] == "COMPLETED", timeout=60)
    assert done["scheduler"]["nodes"] == "node[1-2]"
    assert "ray nodes: 2" in status["lines"]
    assert any(ray_tmp.glob("ray/session_*"))  # not in the machine's /tmp/ray


def test_gpu_status_looks_at_the_nodes_of_a_run_s_job(lab: Lab):
    """nvidia-smi (the stand-in, on the shared folder) in an ``srun --overlap`` step on each node of the job."""
    state = {"gpus": [{"uuid": f"GPU-{i}", "name": A100, "memory_total": 81920, "memory_used": 4, "utilization": 0}
                      for i in range(2)]}
    smi = lab.cluster.shared / "smi" / "bin"
    install_fake_smi(smi, state)
    path = lab.env["PATH"]
    lab.env["PATH"] = f"{smi}:{path}"  # srun carries the caller's PATH into the step
    try:
        run = lab.launch("gpus", "sleep 300", gpus_per_node=1)
        lab.call("wait_experiment", id=run["id"], until="started", timeout_s=50)
        seen = lab.call("gpu_status", experiment=run["id"])
        node = lab.status(run["id"])["scheduler"]["nodes"]
        assert [(h["host"], h["reachable"], len(h["gpus"] or [])) for h in seen["hosts"]] == [(node, True, 2)], seen
        assert seen["hosts"][0]["gpus"][0]["name"] == A100
        lab.call("stop_experiment", id=run["id"])
        ended = lab.call("gpu_status", experiment=run["id"])
        assert ended["hosts"][0]["gpus"] is None and "not running" in ended["hosts"][0]["reason"]
        refused = lab.try_call("gpu_status", experiment=run["id"], hosts=["local"])
        assert refused.returncode != 0 and "hosts" in refused.stderr
    finally:
        lab.env["PATH"] = path


def test_a_controller_that_does_not_answer_leaves_the_job_s_record_and_says_so(lab: Lab):
    """slurmctld stopped (SIGSTOP: a hung controller): status says what the job's own record says, and why
    Slurm was not heard; once it answers again, Slurm's word is back."""
    run = lab.launch("hung_controller", "sleep 300")
    lab.call("wait_experiment", id=run["id"], until="started", timeout_s=50)
    daemon = lab.cluster.daemons["slurmctld"]
    pids = [p for p in _in_namespace(daemon.namespace) if Path(f"/proc/{p}/comm").read_text().strip() == "slurmctld"]
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        status = lab.status(run["id"])
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    assert status["state"] == "running" and status["scheduler"]["state"] == "RUNNING"
    assert "Slurm cannot be asked on local (" in status["note"] and "job's own record" in status["note"]
    back = lab.status(run["id"])
    assert back["note"] is None and back["scheduler"]["state"] == "RUNNING"
    assert lab.call("stop_experiment", id=run["id"])["state"] == "stopped"


def test_watch_follows_a_queued_then_running_job_to_its_end(lab: Lab):
    run = lab.launch("watched", "sleep 2; echo 'step:1 - loss:0.25'; sleep 1")
    proc = subprocess.run(lab.cluster.argv([sys.executable, "-m", "skill_server", "watch", run["id"], "--json",
                                            "--interval", "0.5", "--every", "1", "--max-time", "120"]),
                          env=lab.env, capture_output=True, text=True, cwd=REPO, timeout=180, check=False)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert events[-1]["event"] == "finished" and events[-1]["state"] == "succeeded", events


def test_a_killed_process_and_a_killed_batch_shell_end_failed_with_slurm_s_word(lab: Lab):
    """A child killed by SIGKILL (as the OOM killer does): its exit code 137. The batch shell itself killed:
    it could not record its end, so the login node records Slurm's (JobLaunchFailure, 0:9), which outlives
    Slurm's memory of the job."""
    child = lab.launch("oom_like", "sleep 60 & kill -9 $!; wait $!")
    shell = lab.launch("shell_killed", "sleep 1; kill -9 $SLURM_TASK_PID; sleep 60")
    killed = lab.call("wait_experiment", id=child["id"], timeout_s=50)
    assert (killed["state"], killed["exit_code"], killed["scheduler"]["exit_code"]) == ("failed", 137, "137:0")
    end = time.monotonic() + 60
    while (status := lab.status(shell["id"]))["state"] in ("running", "queued"):
        assert time.monotonic() < end, status
        time.sleep(0.5)
    assert (status["state"], status["exit_code"]) == ("failed", 137), status
    assert (status["scheduler"]["state"], status["scheduler"]["reason"]) == ("FAILED", "JobLaunchFailure")
    forgotten(lab, job_of(status))
    again = lab.status(shell["id"])
    assert (again["state"], again["scheduler"]["reason"], again["scheduler"]["exit_code"]) == (
        "failed", "JobLaunchFailure", "0:9")


def test_an_nccl_hang_in_a_job_is_stopped_by_its_policy_with_no_tool_call_and_the_notify_command_told(lab: Lab):
    """The run's monitor runs inside the job: it sees the NCCL timeout, tells the notify command (on the compute
    node), marks the role stopped and cancels its own job; nobody calls a tool until the job has ended."""
    script, mark, events = lab.work / "hang.py", lab.work / "nccl.at", lab.work / "nccl_events.jsonl"
    script.write_text(HANGS)
    run = lab.call("launch_experiment", name="nccl_job", command=f"{sys.executable} {script} nccl {mark}",
                   workdir=str(lab.work), max_time_s=3600, slurm={},
                   policy={"on_error": "stop", "on_end": "collect", "notify_command": f"cat >> {events}"})
    # no tool call from here on: only the monitor inside the job acts, and the job records its end
    record = next(iter((lab.state / "runs" / run["id"]).glob("*"))) / "job.json"
    end = time.monotonic() + 90
    while not (record.is_file() and json.loads(record.read_text())["state"] == "CANCELLED"):
        assert time.monotonic() < end, record.read_text() if record.is_file() else "no job.json"
        time.sleep(0.1)
    acted_s = time.time() - float(mark.read_text())
    assert acted_s < 15, acted_s
    end = time.monotonic() + 30
    while "stopped" not in kinds(events):
        assert time.monotonic() < end, told(events)
        time.sleep(0.2)
    got = told(events)  # told before the job cancels itself; its end after that is not promised
    assert [e["kind"] for e in got][:4] == ["started", "first_step", "failure", "stopped"], got
    job = json.loads(record.read_text())["job_id"]
    assert got[2]["signature"] == "nccl_error" and got[2]["exp_id"] == run["id"] and got[2]["policy"] == "stop"
    assert (got[3]["trigger"], got[3]["why"]) == ("error:nccl_error", f"cancelling its Slurm job {job}")
    seen = lab.status(run["id"], max_lines=0)  # the first call since the launch
    assert seen["state"] == "stopped" and seen["scheduler"]["state"] == "CANCELLED", seen
    assert [a.split(" ", 1)[1] for a in seen["actions"]][:1] == [
        f"error:nccl_error -> stop: cancelling its Slurm job {job}"], seen["actions"]


def test_resume_is_refused_with_slurm_naming_the_policy_field(lab: Lab):
    proc = lab.try_call("launch_experiment", name="resumes", command="true", workdir=str(lab.work), slurm={},
                        policy={"on_error": "resume"})
    assert proc.returncode != 0 and "policy.on_error" in proc.stderr and "resume" in proc.stderr, proc.stderr


def test_a_job_ends_only_once_its_monitor_has_read_the_logs_told_and_collected(lab: Lab):
    """Slurm ends what runs in a job's cgroup with the job: the batch script waits for the monitor (its lock)."""
    events = lab.work / "end_events.jsonl"
    run = lab.call("launch_experiment", name="collects", workdir=str(lab.work), max_time_s=3600, slurm={},
                   command="echo 'step:1 - loss:0.5'; echo 'step:2 - loss:0.25'",
                   policy={"on_end": "collect", "notify_command": f"sleep 1; cat >> {events}"})
    rdir = next(iter((lab.state / "runs" / run["id"]).glob("*")))
    job = int((rdir / "job.id").read_text()) if (rdir / "job.id").is_file() else 0
    assert job, "no job.id"
    lab.cluster.wait_job(job, {"COMPLETED"}, timeout=90)
    found = json.loads((rdir / "monitor.json").read_text())
    assert found["ended"] is True and [a["action"] for a in found["actions"]] == ["collect"], found
    assert "end" in kinds(events)  # told before the job ended, though each notification takes a second
    assert (Path(run["result_dir"]) / run["id"] / "results.md").is_file()
    assert lab.status(run["id"])["state"] == "succeeded"
