"""The structure behind the run monitor and the runs service, room by room, without tmux: the run directory's
layout (one class), the phase set whose moves record the events, one derivation of how a run ended, specs and
documents an earlier version wrote, attempts as a lineage, and reads that only read (healing is asked for)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from skill_server.experiments import lineage, states, upkeep
from skill_server.experiments.spec import RunSpec
from skill_server.experiments.store import LAUNCHING, controller_identity, open_registry
from skill_server.hosts.agent import backend, observer, ops, outcome, phases, rundir, slurm, stall, wrapper
from skill_server.hosts.agent.files import run_dir
from skill_server.hosts.agent.protocol import PROTOCOL_VERSION
from skill_server.hosts.agent.runstate import Run
from tests.experiment_helpers import call, pid_alive, wait_until

# ---- the run directory's layout


def test_the_run_directory_is_spelt_once(tmp_path: Path):
    run = rundir.RunDir(str(tmp_path))
    assert run.exit_code("main") is None and run.markers("main") == []
    run.mark("main", "gate")
    run.mark_stopped(["main", "done"])
    (tmp_path / "done.exit").write_text("0\n")
    run.write_exit("main", 3)
    run.write_exit("main", 4)  # an exit code found elsewhere never replaces one on disk
    assert (run.exit_code("main"), run.markers("main"), run.markers("done")) == (3, ["gate", "stopped"], ["stopped"])
    run.write_survivors("main", [{"pid": 1, "start": "9"}])
    assert run.survivors("main") == [{"pid": 1, "start": "9"}]
    run.write_survivors("main", [])
    assert not (tmp_path / "main.survivors").exists()
    script = wrapper.render(exp_id="x", role="main", run_dir=str(tmp_path), workdir="/w", env={}, path_prepend=None,
                            virtual_env=None, command="true", log_path="/l", gate_url=None, gate_timeout_s=0,
                            python="py")
    assert f'"$__ajs_run/$__ajs_role{rundir.PID}"' in script and f'"$__ajs_run/$__ajs_role{rundir.EXIT}"' in script
    batch = slurm.render("x", str(tmp_path), ["main"])
    assert f"{tmp_path}/main{rundir.EXIT}" in batch and f"$__ajs_run/{rundir.DISCARDED}" in batch


def test_the_attempts_after_a_run_are_followed_from_run_directory_to_run_directory(tmp_path: Path):
    dirs = [tmp_path / name for name in ("x", "x.r2", "x.r3")]
    for d in dirs:
        d.mkdir()
    for i, (here, there) in enumerate(zip(dirs, dirs[1:])):
        rundir.RunDir(str(here)).write_json(rundir.NEXT_ATTEMPT, {
            "id": there.name, "attempt": i + 2, "lineage": "x", "previous": here.name,
            "launch": {"run_dir": str(there), "procs": []}}, replace=False)
    chain = rundir.RunDir(str(dirs[0])).attempts_after()
    assert [(r["id"], r["attempt"], r["lineage"]) for r in chain] == [("x.r2", 2, "x"), ("x.r3", 3, "x")]
    assert rundir.RunDir(str(dirs[2])).attempts_after() == []


# ---- the phases and their events


def test_a_phase_moves_only_where_it_may_and_records_its_move_s_event():
    now = [0.0]
    life = phases.Lifecycle(lambda: now[0], {}, phases.STARTING)
    life.emit("first_step", role="main", step=1)
    life.move(phases.RUNNING)
    now[0] = 5.0
    stalled = life.move(phases.STALLED, "stalled", last_step=1)
    assert stalled is not None and (stalled["kind"], stalled["at"], stalled["seq"]) == ("stalled", 5.0, 2)
    with pytest.raises(ValueError):
        life.emit("stalled")  # a move's event is recorded by its move only
    with pytest.raises(ValueError):
        life.move(phases.STOPPING, "progressed")  # and only by the move it belongs to
    life.move(phases.RUNNING, "progressed")
    life.move(phases.STOPPING, "timed_out", max_time_s=10)
    life.move(phases.STOPPING)  # staying is no move: nothing recorded
    with pytest.raises(ValueError):
        life.move(phases.RUNNING)  # a stop does not turn back
    life.move(phases.BACKOFF, "ended", state="stopped")
    life.move(phases.ENDED)
    assert [e["kind"] for e in life.events] == ["first_step", "stalled", "progressed", "timed_out", "ended"]
    assert [e["phase"] for e in life.events] == ["starting", "stalled", "running", "stopping", "backoff"]
    assert [e["kind"] for e in life.since(3)] == ["timed_out", "ended"] and phases.MOVES[phases.ENDED] == ()
    assert set(phases.EVENTS) == {"started", "first_step", "first_step_overdue", "error", "process_ended", "action",
                                  "finished", "stalled", "progressed", "timed_out", "ended"}


def _run(tmp_path: Path, policy: dict | None = None, previous: dict | None = None) -> Run:
    log = tmp_path / "main.log"
    log.write_text("")
    spec = rundir.spec_of({"format": rundir.FORMAT, "exp_id": "x-1", "socket_path": "/nonexistent/sock",
                           "session": "ajet_x", "max_time_s": 0, "grace_s": 1, "first_step_s": 60,
                           "policy": policy or {}, "signatures": [],
                           "roles": [{"role": "main", "log_path": str(log), "pid": None, "start": None}]})
    return Run(str(tmp_path), spec, previous)


def test_the_stall_watch_moves_the_run_to_stalled_and_back_recording_the_events(tmp_path: Path):
    run = _run(tmp_path, policy={"stall_floor_s": 2})
    watch = stall.StallWatch(run, {})
    found = run.roles[0].found
    found.first_step_seen, found.first_step, found.global_step, found.stepped_at = True, 1, 1, 0.0
    run.life.move(phases.RUNNING)
    assert watch.tick(run, 1.0) == pytest.approx(1.0) and run.phase == phases.RUNNING  # due when the bound runs out
    watch.tick(run, 2.5)
    assert run.phase == phases.STALLED and watch.verdict["stalled"] and watch.to_json()["stall"]["bound_s"] == 2.0
    found.global_step, found.stepped_at = 2, 3.0
    watch.tick(run, 3.1)
    assert run.phase == phases.RUNNING and not watch.verdict["stalled"]
    assert [e["kind"] for e in run.life.events] == ["stalled", "progressed"]
    assert run.document(ended=False)["phase"] == "running"


def test_a_first_step_and_an_error_read_in_one_chunk_are_recorded_in_the_log_s_order(tmp_path: Path):
    """The happenings' order follows the events': a step line then an error in one read is first_step, then error;
    an error printed before the first step line stays first."""
    from skill_server.hosts.agent import scanner, watchers

    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)\n"
    step = "step:1 - critic/score/mean:0.1 - training/global_step:1\n"
    for text, order in ((step + oom, ["first_step", "error"]), (oom + step, ["error", "first_step"])):
        folder = tmp_path / str(len(order) + text.index("step:"))
        folder.mkdir()
        run = _run(folder)
        run.table = scanner.Table([{"name": "cuda_oom", "pattern": "CUDA out of memory"}])
        watchers.LogTail(run, run.roles[0]).fold(run, text.encode(), 1.0, 1.0, False)
        assert [e["kind"] for e in run.life.events] == order, text


# ---- one derivation of how a run ended


def test_the_monitor_and_the_server_derive_states_by_the_same_rules():
    assert states.run_state is not None and states.process_state(None) == "unreachable"
    for codes, markers in (([0, 0], [[], []]), ([1, 130], [[], ["stopped"]]), ([0, None], [[], ["timedout"]]),
                           ([None], [[]]), ([143], [["timedout"]])):
        server = states.run_state([states.process_state(states.ProcFacts(False, c, frozenset(m)))
                                   for c, m in zip(codes, markers)], codes)[0]
        assert outcome.ended_as(codes, markers) == server
    assert outcome.ended_as([1, 143], [[], ["timedout"]]) == "failed"  # a failure is not hidden by a timed-out peer


# ---- what an earlier version wrote


def test_a_monitor_spec_and_document_written_before_handles_and_phases_still_load(tmp_path: Path):
    assert rundir.spec_of({"socket_path": "/s", "session": "ajet_x"})["handle"] == {
        "kind": "tmux", "socket_path": "/s", "session": "ajet_x", "session_id": None}
    assert rundir.spec_of({"slurm": True, "socket_path": ""})["handle"] == {"kind": "slurm", "job_id": None}
    assert backend.of_handle(rundir.spec_of({"slurm": True})["handle"]).monitor_in_job
    old = {"format": 1, "ended": False, "stall": {"stalled": True, "bound_s": 5.0}, "event_seq": 4,
           "events": [{"at": 1.0, "kind": "stalled", "seq": 4}], "policy_seq": 4, "pending_resume": None,
           "actions": [{"at": 1.0, "wall": 1.0, "trigger": "stall", "action": "notify", "result": "told"}],
           "roles": {"main": {"log_path": "/l", "offset": 7, "first_step_seen": True}}}
    run = _run(tmp_path, previous=old)
    assert run.phase == phases.STALLED and run.life.seq == 4 and run.roles[0].found.offset == 7
    assert phases.resumed_phase({"pending_resume": {"trigger": "stall", "due": 3}}, True, True) == phases.BACKOFF
    assert phases.resumed_phase({"ended": True}, True, True) == phases.ENDED


# ---- attempts as a lineage


def _spec(run_dir: str) -> RunSpec:
    return RunSpec.from_json({"format": 3, "host": "local", "hosts": {"local": {
        "run_dir": run_dir, "attach": "", "python": None, "handle": {"kind": "tmux", "socket_path": "/nonexistent"}}},
        "processes": [{"role": "main", "host": "local", "log_path": "/nonexistent/m.log", "pid": 2**22, "start": "1"}]})


def test_a_lineage_lists_its_attempts_in_order_and_links_each_to_its_neighbours():
    with open_registry() as reg:
        for exp_id, attempt in (("x", 1), ("x.r3", 3), ("x.r2", 2), ("y", 1)):
            reg.insert(id=exp_id, session="ajet_x", socket="s", created=time.time(), started_at="", spec=_spec("/r"),
                       lineage=None if exp_id == "y" else "x", attempt=attempt)
        chain = lineage.of(reg, reg.get("x.r2"))
        assert (chain.id, chain.ids) == ("x", ["x", "x.r2", "x.r3"])
        assert ([r.id for r in chain.before("x.r3")], chain.previous("x.r2"), chain.next("x.r2")) == (
            ["x", "x.r2"], "x", "x.r3")
        assert lineage.links(reg, [reg.get("x"), reg.get("x.r3"), reg.get("y")]) == {
            "x": (None, "x.r2"), "x.r3": ("x.r2", None), "y": (None, None)}


def test_a_registry_written_before_lineages_gets_them_from_its_linked_specs(tmp_path: Path):
    """A resumed run's rows linked by ``previous_attempt`` in their spec (what an earlier version wrote): the first
    open numbers them into one lineage, once."""
    path = Path(os.environ["SKILL_SERVER_STATE_DIR"])
    path.mkdir(parents=True)
    conn = sqlite3.connect(path / "experiments.sqlite3")
    conn.executescript("CREATE TABLE experiments (id TEXT PRIMARY KEY, session TEXT NOT NULL, socket TEXT NOT NULL, "
                       "created REAL NOT NULL, started_at TEXT NOT NULL, spec TEXT NOT NULL, final_state TEXT, "
                       "final_exit_code INTEGER, ended REAL, note TEXT, read_cursor TEXT NOT NULL DEFAULT '', "
                       "scan TEXT NOT NULL DEFAULT '{}', scan_version INTEGER NOT NULL DEFAULT 0, "
                       "timeouts INTEGER NOT NULL DEFAULT 0)")
    links = (("x", None, "x.r2"), ("x.r2", "x", "x.r3"), ("x.r3", "x.r2", None), ("z", None, None))
    for exp_id, previous, nxt in links:
        spec = _spec("/r").to_json()
        spec.update({k: v for k, v in (("previous_attempt", previous), ("next_attempt", nxt)) if v})
        conn.execute("INSERT INTO experiments (id, session, socket, created, started_at, spec) "
                     "VALUES (?, ?, ?, ?, ?, ?)", (exp_id, "ajet_x", "s", 1.0, "", json.dumps(spec)))
    conn.commit()
    conn.close()
    with open_registry() as reg:
        assert [(r.id, r.lineage, r.attempt) for r in reg.lineage("x")] == [("x", "x", 1), ("x.r2", "x", 2),
                                                                            ("x.r3", "x", 3)]
        assert (reg.get("z").lineage, reg.get("z").attempt) == ("z", 1)


# ---- reads that only read


def test_reading_the_registry_heals_nothing_and_a_healing_tool_finishes_an_interrupted_launch():
    with open_registry() as reg:
        reg.insert(id="gone-1", session="ajet_gone", socket="s", created=time.time(), started_at="",
                   spec=_spec(run_dir("gone-1")), phase=LAUNCHING, controller=controller_identity(),
                   launcher={"pid": 2**22 + 3, "start": "1"})  # its launcher is gone: an interrupted launch
        reg.insert(id="done-1", session="ajet_done", socket="s", created=time.time(), started_at="",
                   spec=_spec(run_dir("done-1")))
        reg.finish("done-1", "succeeded", 0, time.time())
    for _ in range(2):
        with open_registry() as reg:
            assert [r.id for r in reg.pending()] == ["gone-1"]  # opening it did nothing
    assert call("compare_experiments", ids=["done-1"])["runs"][0]["state"] == "succeeded"  # a read-only tool
    with open_registry() as reg:
        assert [r.id for r in reg.pending()] == ["gone-1"]  # ... heals nothing either
    call("experiment_status")  # a tool that heals: it finishes the launch (rolled back on every host, forgotten)
    with open_registry() as reg:
        assert reg.pending() == [] and reg.get("gone-1") is None
    assert (Path(run_dir("gone-1")) / rundir.DISCARDED).exists()  # a start that arrives late refuses
    with open_registry() as reg:
        assert upkeep.finish_interrupted_launches(reg) == []


def test_an_observation_starts_a_dead_monitor_only_when_asked_to_heal(tmp_path: Path):
    log = tmp_path / "main.log"
    log.write_text("")
    where = run_dir("quiet-1")
    os.makedirs(where)
    spec = {"format": rundir.FORMAT, "exp_id": "quiet-1", "handle": {"kind": "tmux", "socket_path": "/nonexistent"},
            "max_time_s": 0, "grace_s": 1, "signatures": [], "policy": {},
            "roles": [{"role": "main", "log_path": str(log), "pid": 2**22 + 5, "start": "1"}]}
    rundir.RunDir(where).write_json(rundir.SPEC, spec, replace=False)
    asked = {"run_dir": where, "role": "main", "pid": 2**22 + 5, "start": "1", "log_path": str(log), "reads": [],
             "exp_id": "quiet-1", "handle": spec["handle"]}

    def observe(heal: bool) -> dict:
        return ops.handle({"v": PROTOCOL_VERSION, "ops": [{"op": "observe", "procs": [asked], "heal": heal}]}
                          )["results"][0]

    looked = observe(False)
    assert looked["ok"] and looked["healed"] == [] and looked["procs"][0]["monitor"]["run"]["alive"] is False
    assert not (Path(where) / rundir.RESTARTED).exists() and not (Path(where) / rundir.FINDINGS).exists()
    healed = observe(True)
    assert healed["healed"] == ["started the monitor of quiet-1 again"]
    assert (Path(where) / rundir.RESTARTED).exists()
    # the monitor it started finds the run's process gone without an exit code, says so and ends
    doc = wait_until(lambda: (d := rundir.RunDir(where).findings()) and d.get("ended") and d, timeout=30)
    assert doc["phase"] == phases.ENDED and doc["events"][-1]["state"] == "lost"
    assert wait_until(lambda: not pid_alive(doc["pid"]), timeout=15)
    assert observer.lock_free(where)


# ---- waking on change


def test_the_waker_wakes_on_a_watched_file_and_a_process_s_end_only(tmp_path: Path):
    import subprocess

    from skill_server.hosts.agent import waker

    (tmp_path / "main.log").write_text("")
    awake = waker.Waker([(str(tmp_path), "main.log", waker.IN_MODIFY), (str(tmp_path), "main.exit", waker.IN_MOVED_TO)])
    try:
        if not awake.available:
            pytest.skip("no inotify here: the monitor looks every tick instead")
        assert not awake.wait(0.2)  # nothing happened
        (tmp_path / "other.txt").write_text("x")  # not a watched name
        assert not awake.wait(0.3)
        with open(tmp_path / "main.log", "a") as log:
            log.write("step:1\n")
        began = time.monotonic()
        assert awake.wait(5.0) and time.monotonic() - began < 1.0
        (tmp_path / "main.exit.tmp").write_text("0\n")
        os.replace(tmp_path / "main.exit.tmp", tmp_path / "main.exit")
        assert awake.wait(5.0)
        child = subprocess.Popen(["sleep", "0.5"])
        assert awake.watch_pid(child.pid)
        began = time.monotonic()
        assert awake.wait(10.0) and 0.2 < time.monotonic() - began < 5.0  # woken by its end, not before
        child.wait()
    finally:
        awake.close()
