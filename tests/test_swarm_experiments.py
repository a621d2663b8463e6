"""swarm_status and the experiments this skill launched: the id argument, what to check when a server
is down, and the config the engine dumped in its experiment directory.

End to end with real processes: launch_experiment starts a stand-in for ``ajet-swarm start`` (AgentJet's
real server needs GPUs) in a private tmux server, swarm_status finds it by experiment id, stop_experiment
ends it. The address rules are also checked one by one on registry-shaped specs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml as pyyaml

from skill_server.app.table import TOOLS_BY_NAME, model_schema
from skill_server.core.errors import ToolInputError
from skill_server.swarm.links import DEFAULT_SWARM_PORT, server_address
from tests.conftest import REPO, call_cli
from tests.swarm_standin import SwarmStandin, SwarmState, free_port_with_nothing_listening

pytestmark = pytest.mark.needs("tmux")
STANDIN_COMMAND = REPO / "tests" / "fixtures" / "ajet_swarm_standin.py"


def call(tool: str, **arguments):
    return TOOLS_BY_NAME[tool].invoke(arguments)


@pytest.fixture
def fake_ajet_swarm(tmp_path: Path) -> dict[str, str]:
    """A bin folder whose ``ajet-swarm`` runs the stand-in; returns the env a launch needs to find it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ajet-swarm"
    script.write_text(f"#!/bin/sh\nexec {os.sys.executable} {STANDIN_COMMAND} \"$@\"\n")
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def dump_config(directory: Path, max_env_worker: int = 64, num_repeat: int = 4, batch: int = 16) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "yaml_backup.yaml"
    path.write_text(pyyaml.safe_dump({"ajet": {
        "rollout": {"max_env_worker": max_env_worker, "num_repeat": num_repeat},
        "data": {"train_batch_size": batch}}}))
    return path


def wait_reachable(exp_id: str, timeout: float = 30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        r = call("swarm_status", id=exp_id, timeout_s=1)
        if r.reachable:
            return r
        time.sleep(0.2)
    raise AssertionError(f"the server of {exp_id} never answered: {r.reason}")


def test_status_by_experiment_id_then_diagnosis_once_it_is_stopped(private_tmux, fake_ajet_swarm, tmp_path):
    port = free_port_with_nothing_listening()
    exp_dir = tmp_path / "saved_experiments" / "run1"
    dump_config(exp_dir, max_env_worker=64, num_repeat=4, batch=16)
    launched = call("launch_experiment", name="swarm_link", workdir=str(tmp_path), env=fake_ajet_swarm,
                    processes=[{"role": "server", "command": f"ajet-swarm start --swarm-port {port} "
                                                            f"--experiment-dir saved_experiments/run1 --running 64"}])
    exp_id = launched.id
    try:
        r = wait_reachable(exp_id)
        assert r.url == f"http://localhost:{port}" and r.running_episodes == 64
        link = r.experiment
        assert (link.id, link.role, link.port, link.state) == (exp_id, "server", port, "running")
        assert link.port_source == "--swarm-port in the server's command"
        # the server reports a relative experiment dir; the server process's workdir anchors it
        assert r.experiment_dir == "saved_experiments/run1"
        assert r.config.yaml == str(exp_dir / "yaml_backup.yaml")
        assert r.config.sources == {"max_env_worker": "server", "num_repeat": "server", "train_batch_size": "server"}
        assert r.episode_cap.episode_cap == 64 and any("at the episode cap (64)" in d for d in r.diagnosis)
    finally:
        call("stop_experiment", id=exp_id, grace_s=5)
    r = call("swarm_status", id=exp_id, timeout_s=1)
    assert r.reachable is False and "connection refused" in r.reason
    text = " ".join(r.diagnosis)
    assert f"Nothing answers at localhost:{port}" in text and f"grep :{port}" in text
    assert f"Experiment {exp_id} (tmux session {launched.session}, stopped) launched this swarm server as its " \
           f"server process, on port {port}" in text and "That run has ended" in text
    # by URL alone, the experiment given that port is found too
    r = call("swarm_status", url=f"127.0.0.1:{port}", timeout_s=1)
    assert r.experiment is not None and r.experiment.id == exp_id
    assert any(f"Experiment {exp_id}" in d for d in r.diagnosis)


def test_episode_cap_by_experiment_id_reads_the_config_its_engine_dumped(private_tmux, fake_ajet_swarm, tmp_path):
    port = free_port_with_nothing_listening()
    dumped = dump_config(tmp_path / "saved_experiments" / "run1", max_env_worker=64, num_repeat=6, batch=16)
    launched = call("launch_experiment", name="cap_link", workdir=str(tmp_path), env=fake_ajet_swarm,
                    processes=[{"role": "server", "command": f"ajet-swarm start --swarm-port {port} "
                                                            f"--experiment-dir saved_experiments/run1"}])
    try:
        wait_reachable(launched.id)
        r = call("episode_cap", id=launched.id)
        assert (r.episode_cap, r.queued_loops) == (64, 2)
        places = {i.name: i.place for i in r.inputs}
        assert places["max_env_worker"].startswith(f"{dumped}:") and {i.source for i in r.inputs} == {"server"}
        assert r.summary.startswith("Episode cap 64 ") and str(dumped) in r.summary
    finally:
        call("stop_experiment", id=launched.id, grace_s=5)
    with pytest.raises(ToolInputError) as err:
        call("episode_cap", id="no-such-run")
    assert err.value.field == "id"


def test_a_port_nobody_was_given_says_so():
    port = free_port_with_nothing_listening()
    r = call("swarm_status", url=f"http://127.0.0.1:{port}", timeout_s=1)
    assert r.experiment is None
    assert any("No experiment this skill launched was given this port" in d for d in r.diagnosis)
    assert not Path(os.environ["SKILL_SERVER_STATE_DIR"]).exists()  # a read-only tool creates no registry


def test_unknown_or_serverless_experiment_is_an_error_naming_id(private_tmux, tmp_path):
    with pytest.raises(ToolInputError) as err:
        call("swarm_status", id="no-such-run")
    assert err.value.field == "id" and "no experiment 'no-such-run'" in str(err.value)
    assert not Path(os.environ["SKILL_SERVER_STATE_DIR"]).exists()
    launched = call("launch_experiment", name="plain_run", workdir=str(tmp_path), command="sleep 30")
    try:
        with pytest.raises(ToolInputError) as err:
            call("swarm_status", id=launched.id)
        assert err.value.field == "id" and "runs no swarm server" in str(err.value)
    finally:
        call("stop_experiment", id=launched.id, grace_s=1)
    with pytest.raises(ToolInputError, match="give one server"):
        call("swarm_status", id="x", url="http://127.0.0.1:1")


@pytest.mark.parametrize("processes, expected", [
    ([{"role": "server", "command": "ajet-swarm start --swarm-port=10099"}],
     (10099, "--swarm-port in the server's command", "server")),
    ([{"role": "srv", "command": "NO_COLOR=1 ajet-swarm start --swarm-port 10111 &> log"}], (10111, None, "srv")),
    ([{"role": "server", "command": "ajet-swarm start"}],
     (DEFAULT_SWARM_PORT, "AgentJet's default (no --swarm-port in the server command)", "server")),
    ([{"role": "server", "command": "ajet-swarm start"},
      {"role": "client", "command": "python roll.py", "wait_for_url": "http://localhost:10123/health"}],
     (10123, "wait_for_url of process client", "server")),
    ([{"role": "client", "command": "AJET_SWARM_URL='http://localhost:10555' python roll.py"}],
     (10555, "AJET_SWARM_URL in a command", None)),
    ([{"role": "client", "command": "python roll.py", "env": {"AJET_SWARM_URL": "http://10.0.0.5:10777"}}],
     (10777, "AJET_SWARM_URL in the run's environment", None)),
    ([{"role": "main", "command": "python train.py"}], None),
    ([], None),
])
def test_the_port_a_run_gave_its_server(processes, expected):
    found = server_address({"processes": processes})
    if expected is None:
        assert found is None
        return
    port, source, role = expected
    assert found["port"] == port and found.get("role") == role
    if source:
        assert found["port_source"] == source
    if any(p.get("env") for p in processes):
        assert found["host"] == "10.0.0.5"


def test_experiment_dir_on_this_machine_gives_the_cap(tmp_path):
    dumped = dump_config(tmp_path / "exp", max_env_worker=128, num_repeat=6, batch=32)
    with SwarmStandin(SwarmState(experiment_dir=str(tmp_path / "exp"))) as server:
        server.state.set_running(128)
        r = call("swarm_status", url=server.url)
        assert r.config.yaml == str(dumped) and r.episode_cap.episode_cap == 128
        assert r.episode_cap.worker_loops == 132
        # explicit settings win: the server's dump is not read then
        r = call("swarm_status", url=server.url, max_env_worker=64, num_repeat=4)
        assert r.config.sources == {"max_env_worker": "argument", "num_repeat": "argument"}
        assert server.state.experiment_dir and r.experiment_dir is None
        # a directory that is not here, a relative one with no known workdir, a dump that is not a config
        server.state.experiment_dir = "/nowhere/exp"
        r = call("swarm_status", url=server.url)
        assert r.config is None and "/nowhere/exp/yaml_backup.yaml is not on this machine" in r.field_errors["config"]
        server.state.experiment_dir = "saved_experiments/x"
        r = call("swarm_status", url=server.url)
        assert "relative to the server's working directory" in r.field_errors["config"]
        (tmp_path / "bad").mkdir()
        (tmp_path / "bad" / "yaml_backup.yaml").write_text("ajet: !!set {a}\n")
        server.state.experiment_dir = str(tmp_path / "bad")
        r = call("swarm_status", url=server.url)
        assert r.reachable and "!!set is not supported" in r.field_errors["config"]
        # before an experiment starts the route reports null; an older server has no route at all
        server.state.experiment_dir = None
        assert call("swarm_status", url=server.url).field_errors == {}
        server.state.has_experiment_dir_route = False
        assert call("swarm_status", url=server.url).field_errors == {}


def test_a_watch_reads_the_dumped_config_once(tmp_path, monkeypatch):
    from skill_server.tools.swarm_status import tool as swarm

    dump_config(tmp_path / "exp", max_env_worker=128, num_repeat=6, batch=32)
    reads = []
    real = swarm.config_from_yaml
    monkeypatch.setattr(swarm, "config_from_yaml", lambda *a, **kw: reads.append(a) or real(*a, **kw))
    with SwarmStandin(SwarmState(experiment_dir=str(tmp_path / "exp"))) as server:
        r = call("swarm_status", url=server.url, watch_s=2, timeout_s=1)
    assert r.watch.samples_read >= 2 and r.episode_cap.episode_cap == 128
    assert len(reads) == 1


def test_unknown_values_are_left_out_not_null(tmp_path):
    with SwarmStandin() as server:
        server.state.engine_status_detail = None
        code, out, err = call_cli("swarm_status", {"url": server.url})
    assert code == 0, err

    def nulls(value, where="$"):
        if value is None:
            return [where]
        if isinstance(value, dict):
            return [w for k, v in value.items() for w in nulls(v, f"{where}.{k}")]
        if isinstance(value, list):
            return [w for i, v in enumerate(value) for w in nulls(v, f"{where}[{i}]")]
        return []

    assert nulls(out) == []
    assert "engine_status_detail" not in out and "episode_cap" not in out and "servers" not in out
    schema = model_schema(TOOLS_BY_NAME["swarm_status"].output_type)
    props = schema["properties"]
    assert set(schema["required"]) == {"summary", "checked_at"}
    for name in ("engine_status_detail", "episode_cap", "servers", "experiment", "url", "reachable"):
        assert "null" not in json.dumps(props[name]) and "default" not in props[name], name


@pytest.mark.anyio
async def test_a_real_mcp_client_accepts_the_sparse_output():
    """The SDK client validates structured content against the published output schema."""
    from mcp import Client

    from skill_server.app.mcp_server import build_server

    port = free_port_with_nothing_listening()
    with SwarmStandin() as server:
        async with Client(build_server()) as client:
            r = await client.call_tool("swarm_status", {"urls": [server.url, f"127.0.0.1:{port}"], "timeout_s": 1})
    assert not r.is_error, r.content
    first, second = r.structured_content["servers"]
    assert first["reachable"] is True and second["reachable"] is False and "engine_status" not in second

