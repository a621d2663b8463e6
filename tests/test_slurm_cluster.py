"""The Slurm harness (tests/slurm_cluster.py) works, and the behaviour the product will rely on holds.

Every string and state asserted here is one that tests/slurm_facts.md records: squeue's ``%T``/``%r``,
``scontrol show job``'s JobState/Reason/ExitCode, the variables a GPU job gets, what sacct says without
accounting. One cluster serves the module; each test cancels what it leaves queued.

The two jobs with a one-minute time limit are submitted when the module starts (``time_limited``), so
that their minute passes while the other tests run; the last test waits for them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.slurm_cluster import SLURMD_PORT, SlurmCluster, _in_namespace, slurm  # noqa: F401  (fixtures are used by name)

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}
#: A batch script that notes SIGTERM in its output and carries on; ``while sleep`` so it wakes every second.
IGNORES_TERM = "trap 'echo got TERM' TERM; echo started; while :; do sleep 1; done"


def squeue(cluster: SlurmCluster, job: int, *, all_states: bool = False) -> subprocess.CompletedProcess[str]:
    """``squeue --noheader -j JOB -o '%T|%r'`` (state and reason), with ``-t all`` if asked."""
    extra = ["--states=all"] if all_states else []
    return cluster.run("squeue", "--noheader", f"--jobs={job}", "--format=%T|%r", *extra)


def out(cluster: SlurmCluster, job: int) -> str:
    return (cluster.shared / f"{job}.out").read_text()


def submit(cluster: SlurmCluster, *args: str) -> int:
    """sbatch with its output in the shared folder, as ``<id>.out``."""
    return cluster.sbatch(f"--output={cluster.shared}/%j.out", f"--chdir={cluster.shared}", *args)


def wall(stamp: str) -> float:
    """scontrol's local-time stamp (StartTime=2026-12-01T22:19:37) as seconds since the epoch."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S").timestamp()


Timeline = list[tuple[float, "dict[str, str] | None"]]


def watch(cluster: SlurmCluster, jobs: list[int], timeout: float) -> dict[int, Timeline]:
    """Every change of each job's (JobState, Reason, ExitCode) with the wall time it was seen, until Slurm
    has forgotten them all (None)."""
    keys = ("JobState", "Reason", "ExitCode", "StartTime", "EndTime")
    seen: dict[int, Timeline] = {job: [] for job in jobs}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job, timeline in seen.items():
            if timeline and timeline[-1][1] is None:
                continue
            fields = cluster.job(job)
            now = None if fields is None else {k: fields[k] for k in keys}
            if not timeline or timeline[-1][1] != now:
                timeline.append((time.time(), now))
        if all(timeline[-1][1] is None for timeline in seen.values()):
            return seen
        time.sleep(0.25)
    raise AssertionError(f"jobs still known after {timeout} s: {seen}")


def states(timeline: Timeline) -> list[tuple[str, str, str] | None]:
    return [f and (f["JobState"], f["Reason"], f["ExitCode"]) for _, f in timeline]


@pytest.fixture(scope="module", autouse=True)
def time_limited(slurm: SlurmCluster) -> Iterator[dict[str, int]]:
    """Two jobs with ``--time=1``: one that dies of SIGTERM, one that ignores it (killed after KillWait)."""
    jobs = {"sleeps": submit(slurm, "--time=1", "--nodelist=node2", "--wrap", "echo started; sleep 600"),
            "ignores_term": submit(slurm, "--time=1", "--nodelist=node2", "--wrap", IGNORES_TERM)}
    yield jobs
    slurm.run("scancel", *map(str, jobs.values()))


def test_two_nodes_come_up_idle_with_their_gpus_and_only_inside_the_network(slurm: SlurmCluster):
    # a client outside the controller's network reaches the machine's own loopback, where nobody answers
    outside = subprocess.Popen(["sinfo"], env=slurm.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert slurm.startup_seconds is not None and slurm.startup_seconds < 30
    nodes = slurm.run("sinfo", "--noheader", "--Node", "--format=%N %T %G %c %o").stdout.split("\n")
    assert nodes[:2] == ["node1 idle gpu:2 8 127.47.0.11", "node2 idle gpu:2 8 127.47.0.12"]
    jobs = {node: submit(slurm, f"--nodelist={node}", "--wrap", "hostname") for node in slurm.nodes}
    for node, job in jobs.items():
        slurm.wait_job(job, {"COMPLETED"})
        assert out(slurm, job) == f"{node}\n"
    # separate machines on one LAN: each node its own network namespace, node1's slurmd reachable from node2
    nets = {node: slurm.node_exec(node, ["readlink", "/proc/self/ns/net"]).stdout for node in slurm.nodes}
    assert len(set(nets.values())) == 2 and os.readlink("/proc/self/ns/net") + "\n" not in nets.values()
    connect = f"import socket; socket.create_connection(('127.47.0.11', {SLURMD_PORT}), timeout=5).close()"
    assert slurm.node_exec("node2", [sys.executable, "-c", connect]).returncode == 0
    stdout, stderr = outside.communicate(timeout=60)
    assert outside.returncode == 1
    assert "Unable to contact slurm controller (connect failure)" in stderr


def test_batch_job_runs_writes_its_output_and_is_shown_only_with_all_states(slurm: SlurmCluster):
    job = submit(slurm, "--wrap", "echo to-out; echo to-err >&2; pwd")
    fields = slurm.wait_job(job, {"COMPLETED"})
    assert (fields["Reason"], fields["ExitCode"]) == ("None", "0:0")
    assert out(slurm, job) == f"to-out\nto-err\n{slurm.shared}\n"  # --output without --error: both streams
    plain = squeue(slurm, job)
    assert (plain.returncode, plain.stdout) == (0, "")  # finished: only --states=all shows it
    assert squeue(slurm, job, all_states=True).stdout == "COMPLETED|None\n"


@pytest.mark.parametrize("script, state, reason, exit_code", [
    ("exit 7", "FAILED", "NonZeroExitCode", "7:0"),
    ("sleep 60 & kill -9 $!; wait $!", "FAILED", "NonZeroExitCode", "137:0"),  # a child killed (OOM killer)
    ("kill -9 $$", "FAILED", "JobLaunchFailure", "0:9"),  # the batch script itself killed by a signal
    ("kill -TERM $$; sleep 1", "FAILED", "JobLaunchFailure", "0:15"),
])
def test_how_a_failed_batch_job_is_reported(slurm: SlurmCluster, script, state, reason, exit_code):
    job = submit(slurm, "--wrap", script)
    fields = slurm.wait_job(job, FINAL)
    assert (fields["JobState"], fields["Reason"], fields["ExitCode"]) == (state, reason, exit_code)
    assert squeue(slurm, job, all_states=True).stdout == f"{state}|{reason}\n"


def test_gres_gpus_set_cuda_visible_devices_to_the_node_s_device_indices(slurm: SlurmCluster):
    show = "env | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_JOB_GPUS|GPU_DEVICE_ORDINAL|SLURM_GPUS_ON_NODE)=' | sort"
    # two one-GPU jobs on one node at once get different GPUs, named by their index on the node
    ones = [submit(slurm, "--nodelist=node1", "--gres=gpu:1", "--wrap", f"{show}; sleep 2") for _ in range(2)]
    both = submit(slurm, "--nodelist=node2", "--gres=gpu:2", "--wrap", show)
    none = submit(slurm, "--nodelist=node2", "--wrap", f"{show}; echo end")
    for job in (*ones, both, none):
        slurm.wait_job(job, {"COMPLETED"})
    seen = sorted(out(slurm, job) for job in ones)
    assert seen == [f"CUDA_VISIBLE_DEVICES={i}\nGPU_DEVICE_ORDINAL={i}\nSLURM_GPUS_ON_NODE=1\nSLURM_JOB_GPUS={i}\n"
                    for i in (0, 1)]
    assert out(slurm, both) == ("CUDA_VISIBLE_DEVICES=0,1\nGPU_DEVICE_ORDINAL=0,1\nSLURM_GPUS_ON_NODE=2\n"
                                "SLURM_JOB_GPUS=0,1\n")
    assert out(slurm, none) == "end\n"  # no gres, no CUDA_VISIBLE_DEVICES at all


def test_pending_jobs_show_why(slurm: SlurmCluster):
    refused = slurm.run("sbatch", "--parsable", "--gres=gpu:3", "--wrap", "true")  # a node has 2
    assert refused.returncode == 1
    assert refused.stderr == ("sbatch: error: Batch job submission failed: Requested node configuration is not "
                              "available\n")
    jobs = []
    try:
        later = submit(slurm, "--begin=now+1hour", "--wrap", "true")
        too_wide = submit(slurm, "--nodes=3", "--wrap", "true")  # accepted, never runs: the partition has 2
        assert squeue(slurm, too_wide).stdout in ("PENDING|PartitionConfig\n", "PENDING|PartitionNodeLimit\n")
        every_gpu = submit(slurm, "--nodes=2", "--gres=gpu:2", "--wrap", "sleep 300")
        jobs += [later, too_wide, every_gpu]
        slurm.wait_job(every_gpu, {"RUNNING"})
        waits = submit(slurm, "--gres=gpu:1", "--wrap", "true")
        behind = submit(slurm, "--gres=gpu:1", "--wrap", "true")
        jobs += [waits, behind]
        deadline = time.monotonic() + 60
        while slurm.job(waits)["Reason"] == "None":  # the scheduler names the reason seconds later
            assert time.monotonic() < deadline
            time.sleep(0.25)
        # PartitionConfig at submission; the scheduler's pass names the limit
        expected = {later: "PENDING|BeginTime\n", too_wide: "PENDING|PartitionNodeLimit\n",
                    waits: "PENDING|Resources\n", behind: "PENDING|Priority\n"}
        assert {job: squeue(slurm, job).stdout for job in expected} == expected
        assert slurm.job(later)["StartTime"] != "Unknown"  # the --begin time
    finally:
        slurm.run("scancel", *map(str, jobs))
    cancelled = slurm.wait_job(waits, FINAL)
    assert (cancelled["JobState"], cancelled["Reason"], cancelled["ExitCode"]) == ("CANCELLED", "Resources", "0:0")


def _running_with_pids(slurm: SlurmCluster, scripts: list[str]) -> list[tuple[int, str]]:
    """Jobs on node1 running ``scripts``, each after writing its batch shell's pid (as the node sees it) to a
    file: (job id, pid) once all run."""
    pid_files = [slurm.shared / f"pid-{time.monotonic_ns()}-{i}" for i in range(len(scripts))]
    jobs = [submit(slurm, "--nodelist=node1", "--wrap", f"echo $$ > {pid_file}; {script}")
            for pid_file, script in zip(pid_files, scripts)]
    deadline = time.monotonic() + 60
    while not all(p.exists() and p.read_text().endswith("\n") for p in pid_files):
        assert time.monotonic() < deadline, [slurm.job(job) for job in jobs]
        time.sleep(0.1)
    return [(job, p.read_text().strip()) for job, p in zip(jobs, pid_files)]


def _alive_on_node1(slurm: SlurmCluster, pid: str) -> bool:
    return slurm.node_exec("node1", ["sh", "-c", f"kill -0 {pid}"]).returncode == 0


def test_scancel_ends_a_running_job_and_its_processes(slurm: SlurmCluster):
    (plain, plain_pid), (clean, _), (stubborn, stubborn_pid) = _running_with_pids(slurm, [
        "sleep 300", "trap 'echo got TERM; exit 0' TERM; while :; do sleep 1; done", IGNORES_TERM])
    time.sleep(1)  # the traps are set
    began = time.monotonic()
    assert slurm.run("scancel", str(plain), str(clean), str(stubborn)).returncode == 0
    fields = {job: slurm.wait_job(job, {"CANCELLED"}, timeout=30) for job in (plain, clean)}
    assert [(f["Reason"], f["ExitCode"]) for f in fields.values()] == [("None", "0:15"), ("None", "0:0")]
    assert "got TERM" in out(slurm, clean)  # scancel sends SIGTERM to the batch shell first
    assert f"*** JOB {plain} ON node1 CANCELLED AT " in out(slurm, plain)
    assert not _alive_on_node1(slurm, plain_pid)
    # the job that ignores SIGTERM is COMPLETING until KillWait has passed, then SIGKILLed
    assert slurm.job(stubborn)["JobState"] == "COMPLETING"
    assert squeue(slurm, stubborn).stdout == "COMPLETING|None\n"
    killed = slurm.wait_job(stubborn, {"CANCELLED"}, timeout=30)
    assert time.monotonic() - began >= slurm.kill_wait
    assert (killed["Reason"], killed["ExitCode"]) == ("None", "0:9")
    assert "got TERM" in out(slurm, stubborn)
    assert not _alive_on_node1(slurm, stubborn_pid)
    # a job id Slurm does not know: exit 0 and not a word (the message needs -v)
    unknown = slurm.run("scancel", "999999")
    assert (unknown.returncode, unknown.stdout, unknown.stderr) == (0, "", "")
    verbose = slurm.run("scancel", "-v", "999999")
    assert "Kill job error on job id 999999: Invalid job id specified" in verbose.stderr


def test_srun_overlap_runs_a_command_in_a_running_job_s_allocation(slurm: SlurmCluster):
    job = submit(slurm, "--nodes=2", "--gres=gpu:1", "--wrap", "sleep 300")
    single = submit(slurm, "--ntasks=1", "--nodelist=node1", "--wrap", "sleep 300")
    holder = waiting = None
    try:
        slurm.wait_job(job, {"RUNNING"})
        probe = 'echo "$(hostname) $SLURM_JOB_ID.$SLURM_STEP_ID gpus=$CUDA_VISIBLE_DEVICES"'
        step = slurm.run("srun", f"--jobid={job}", "--overlap", "sh", "-c", probe)
        assert step.returncode == 0, step.stderr
        assert sorted(step.stdout.splitlines()) == [f"node1 {job}.0 gpus=0", f"node2 {job}.0 gpus=0"]
        failing = slurm.run("srun", f"--jobid={job}", "--overlap", "--nodes=1", "--nodelist=node2", "sh", "-c",
                            "exit 3")
        assert failing.returncode == 3
        assert "srun: error: node2: task 0: Exited with exit code 3" in failing.stderr
        assert slurm.job(job)["JobState"] == "RUNNING"  # the steps' ends do not touch the job
        # Without --overlap a step waits, silently, while another step holds the allocation's only CPU
        slurm.wait_job(single, {"RUNNING"})
        holder = subprocess.Popen(slurm.argv(["srun", f"--jobid={single}", "sleep", "300"]), env=slurm.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while f"{single}.0" not in slurm.run("squeue", "--steps", f"--jobs={single}", "--format=%i").stdout:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        waiting = subprocess.Popen(slurm.argv(["srun", f"--jobid={single}", "true"]), env=slurm.env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        overlapping = slurm.run("srun", f"--jobid={single}", "--overlap", "echo", "in")
        assert (overlapping.returncode, overlapping.stdout) == (0, "in\n")
        time.sleep(3)
        assert waiting.poll() is None
    finally:
        for proc in (holder, waiting):
            if proc is not None:
                proc.kill()
                proc.communicate()
        slurm.run("scancel", str(job), str(single))
    slurm.wait_job(job, FINAL)
    expired = slurm.run("srun", f"--jobid={job}", "--overlap", "true")
    assert expired.returncode == 1
    assert f"srun: error: Slurm job {job} has expired" in expired.stderr


def test_sacct_says_accounting_is_disabled(slurm: SlurmCluster):
    proc = slurm.run("sacct", "--noheader", "--format=JobID,State,ExitCode")
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", "Slurm accounting storage is disabled\n")


def test_time_limit_gives_timeout_after_killwait_and_the_job_is_forgotten_after_min_job_age(
        slurm: SlurmCluster, time_limited: dict[str, int]):
    sleeps, stubborn = time_limited["sleeps"], time_limited["ignores_term"]
    seen = watch(slurm, [sleeps, stubborn], timeout=240)
    # SIGTERM at the limit: the job that dies of it is TIMEOUT at once, with the signal in ExitCode
    assert states(seen[sleeps])[-2:] == [("TIMEOUT", "TimeLimit", "0:15"), None]
    # the job that ignores it is COMPLETING (Reason TimeLimit) until KillWait is over, then SIGKILLed
    assert ("COMPLETING", "TimeLimit", "0:0") in states(seen[stubborn])
    assert states(seen[stubborn])[-2:] == [("TIMEOUT", "TimeLimit", "0:9"), None]
    assert "DUE TO TIME LIMIT ***" in out(slurm, sleeps)
    assert "got TERM" in out(slurm, stubborn)
    for job in (sleeps, stubborn):
        (_, ended), (forgotten_at, _) = seen[job][-2:]
        assert ended is not None
        ran = wall(ended["EndTime"]) - wall(ended["StartTime"])
        assert 60 <= ran <= 60 + 35 + slurm.kill_wait  # the limit is checked about every 30 s
        forgotten_after = forgotten_at - wall(ended["EndTime"])
        assert slurm.min_job_age - 1 <= forgotten_after <= slurm.min_job_age + 40
    gone = squeue(slurm, stubborn, all_states=True)
    assert (gone.returncode, gone.stderr) == (1, "slurm_load_jobs error: Invalid job id specified\n")


def test_stop_kills_every_daemon_and_job_and_removes_the_tree():
    """A one-node cluster of its own, stopped with a job still running."""
    cluster = SlurmCluster(("solo",), gpus_per_node=1)
    with cluster:
        job = submit(cluster, "--gres=gpu:1", "--wrap", "sleep 300")
        cluster.wait_job(job, {"RUNNING"})
        namespaces = [d.namespace for d in cluster.daemons.values()]
        root = str(cluster.root)
    assert not Path(root).exists()
    assert [pid for ns in namespaces for pid in _in_namespace(ns)] == []
    mentions = []  # no process of the machine still names the tree (slurmstepd, the job script)
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and root.encode() in (entry / "cmdline").read_bytes():
                mentions.append(int(entry.name))
        except OSError:
            pass
    assert mentions == []
