"""A run's spec as the registry stores it: parsed once, typed, written back byte for byte; older shapes read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from skill_server.experiments.spec import Handle, RayCluster, RunSpec
from skill_server.experiments.store import CorruptRow, _row, open_registry
from tests.experiment_helpers import call, tmux_socket, workdir  # noqa: F401  (fixtures are used by name)

#: What a launch on two hosts wrote before backends (format 2), then ray_cluster start's section.
FORMAT_2 = (
    '{"format": 2, "host": "local", "result_dir": "/w/res", "workdir": "/w", "python": null, "blueprint": null, '
    '"yaml_path": "/w/a.yaml", "max_time_s": 600, "first_step_timeout_s": 300, "first_step_pattern": null, '
    '"hosts": {"local": {"run_dir": "/s/runs/x", "socket_path": "/t/agentjet", "attach": "tmux -S /t/agentjet attach '
    '-t ajet_x", "python": "/usr/bin/python3"}, "node1": {"run_dir": "/r/runs/x", "socket_path": "/u/agentjet", '
    '"attach": "ssh -t node1 \'tmux -S /u/agentjet attach -t ajet_x\'", "python": "/usr/bin/python3"}}, '
    '"processes": [{"role": "head", "command": "ray start --head", "host": "local", "workdir": "/w", '
    '"log_path": "/w/res/h.log", "wait_for_url": null, "window_id": "@1", "pane_id": "%1", "pid": 11, "start": "99"}, '
    '{"role": "worker1", "command": "ray start", "host": "node1", "workdir": "/v", "log_path": "/v/w.log", '
    '"wait_for_url": "http://h:1/", "window_id": "@2", "pane_id": "%2", "pid": 12, "start": null}], '
    '"attach": "tmux -S /t/agentjet attach -t ajet_x", '
    '"ray_cluster": {"head": "local", "workers": ["node1"], "port": 6379, "address": "10.0.0.1:6379", "ray": "ray"}}')


#: The same launch as this version writes it (format 3): each host's backend handle in its own key.
FORMAT_3 = FORMAT_2.replace('"format": 2', '"format": 3').replace(
    '"run_dir": "/s/runs/x", "socket_path": "/t/agentjet", "attach": "tmux -S /t/agentjet attach -t ajet_x", '
    '"python": "/usr/bin/python3"}',
    '"run_dir": "/s/runs/x", "attach": "tmux -S /t/agentjet attach -t ajet_x", "python": "/usr/bin/python3", '
    '"handle": {"kind": "tmux", "socket_path": "/t/agentjet", "session": "ajet_x"}}').replace(
    '"run_dir": "/r/runs/x", "socket_path": "/u/agentjet", "attach": "ssh -t node1 \'tmux -S /u/agentjet attach '
    '-t ajet_x\'", "python": "/usr/bin/python3"}',
    '"run_dir": "/r/runs/x", "attach": "ssh -t node1 \'tmux -S /u/agentjet attach -t ajet_x\'", '
    '"python": "/usr/bin/python3", "handle": {"kind": "tmux", "socket_path": "/u/agentjet", "session": "ajet_x"}}')


def _values(spec: str, scan: str = "{}") -> tuple[object, ...]:
    return ("x", "ajet_x", "agentjet", 1.0, "t", spec, None, None, None, None, "", scan, 0, 0)


def test_a_stored_spec_reads_typed_and_writes_back_byte_for_byte():
    assert FORMAT_3 != FORMAT_2 and '"handle"' in FORMAT_3 and '"socket_path": "/t' not in FORMAT_3.split('"handle"')[0]
    row = _row(_values(FORMAT_3))
    assert json.dumps(row.spec.to_json()) == FORMAT_3
    assert row.host == "local" and row.hosts == ["local", "node1"]
    head, worker = row.processes
    assert (head.run_dir, head.handle, head.pid, head.start, head.pane_id) == (
        "/s/runs/x", Handle("tmux", {"socket_path": "/t/agentjet", "session": "ajet_x"}), 11, "99", "%1")
    assert (worker.host, worker.run_dir, worker.workdir, worker.wait_for_url) == ("node1", "/r/runs/x", "/v",
                                                                                  "http://h:1/")
    assert row.spec.attach_on("node1").startswith("ssh -t node1") and row.spec.attach_on("elsewhere") == ""
    assert row.spec.ray_cluster == RayCluster(head="local", workers=("node1",), port=6379, address="10.0.0.1:6379",
                                              ray="ray")
    without = dataclasses.replace(row.spec, ray_cluster=None)
    assert json.dumps(without.to_json()) == FORMAT_3.split(', "ray_cluster"')[0] + "}"


def test_a_format_2_spec_reads_into_handles_and_writes_format_3():
    """Rows written before backends had handles (runs in flight when the server was updated) read the same and
    are written in this version's shape; a scheduler's job id moves into its handle too."""
    row = _row(_values(FORMAT_2))
    assert json.dumps(row.spec.to_json()) == FORMAT_3
    legacy = json.loads(FORMAT_2)
    legacy["hosts"]["local"].update(socket_path="", backend="slurm", job_id="42", session_id=None)
    job = _row(_values(json.dumps(legacy)))
    assert job.spec.hosts["local"].handle == Handle("slurm", {"job_id": "42"})
    assert job.spec.to_json()["hosts"]["local"]["handle"] == {"kind": "slurm", "job_id": "42"}
    legacy["hosts"]["node1"]["session_id"] = "$4"
    assert _row(_values(json.dumps(legacy))).processes[1].handle.get("session_id") == "$4"


def test_a_format_1_spec_still_reads():
    legacy = {"result_dir": "/w/r", "workdir": "/w", "python": None, "blueprint": None, "yaml_path": None,
              "max_time_s": 600, "first_step_timeout_s": 300, "first_step_pattern": "step:1", "run_dir": "/s/runs/x",
              "attach": "tmux -L agentjet attach -t ajet_x", "socket_path": "/t/agentjet",
              "processes": [{"role": "main", "command": "python train.py", "workdir": "/w", "log_path": "/w/r/m.log",
                             "wait_for_url": None, "window_id": "@0", "pane_id": "%0"}]}
    row = _row(_values(json.dumps(legacy)))
    (main,) = row.processes
    assert row.host == "local" and (main.host, main.run_dir, main.handle.get("socket_path"), main.pid) == (
        "local", "/s/runs/x", "/t/agentjet", None)
    assert row.spec.first_step_pattern == "step:1" and row.spec.format is None
    again = RunSpec.from_json(row.spec.to_json())
    assert again == row.spec and again.resolved == row.spec.resolved


@pytest.mark.parametrize("change, reason", [
    (lambda s: s["processes"][0].update(pid="11"), "pid is not an integer"),
    (lambda s: s["processes"][0].pop("role"), "'role'"),
    (lambda s: s["processes"][0].update(log_path=None), "no processes"),
    (lambda s: s["processes"][0].update(role=7), "role is not a string"),
    (lambda s: s.update(processes={}), "processes is not a list"),
    (lambda s: s.update(processes=[]), "no processes"),
    (lambda s: s.update(hosts={"local": "x"}), "hosts.local is not an object"),
    (lambda s: s["hosts"].pop("local"), "no processes"),  # the head's host has no run directory left
    (lambda s: s.update(max_time_s=True), "max_time_s"),
    (lambda s: s.update(first_step_timeout_s=2**53), "first_step_timeout_s"),
    (lambda s: s.update(yaml_path=3), "yaml_path is not a string"),
    (lambda s: s["ray_cluster"].update(workers="node1"), "ray_cluster's workers"),
])
def test_a_spec_of_the_wrong_shape_is_that_row_s_corrupt_row(change, reason):
    spec = json.loads(FORMAT_2)
    change(spec)
    with pytest.raises(CorruptRow) as err:
        _row(_values(json.dumps(spec)))
    assert err.value.field == "id" and f"unexpected content: {reason}" in err.value.message, err.value.message


def test_what_a_launch_stores_is_what_its_spec_writes(tmux_socket: str, workdir: Path):
    out = call("launch_experiment", name="spec", command="sleep 30", workdir=str(workdir), max_time_s=120)
    try:
        with open_registry() as reg:
            stored = reg.conn.execute("SELECT spec FROM experiments WHERE id = ?", (out["id"],)).fetchone()[0]
            row = reg.get(out["id"])
        assert row is not None and json.dumps(row.spec.to_json()) == stored
        assert row.spec.format == 3 and row.spec.max_time_s == 120
        assert row.spec.hosts["local"].handle.kind == "tmux" and row.spec.hosts["local"].handle.get("session_id")
        assert (row.lineage, row.attempt) == (out["id"], 1)
        assert row.processes[0].pid == out["processes"][0]["pid"]
        assert list(json.loads(stored)) == ["format", "host", "result_dir", "workdir", "python", "blueprint",
                                            "yaml_path", "max_time_s", "first_step_timeout_s", "first_step_pattern",
                                            "hosts", "processes", "attach"]
    finally:
        call("stop_experiment", id=out["id"], grace_s=1)
