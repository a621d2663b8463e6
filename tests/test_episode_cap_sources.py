"""episode_cap from the artifacts users hold: an engine YAML, a client script (read as check_config reads it),
a live swarm server (the stand-in), and the numbers overriding any of them; refusals through both front ends."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from skill_server.app.mcp_server import build_server
from skill_server.app.table import TOOLS_BY_NAME
from skill_server.core.errors import SkillError, ToolInputError
from tests.conftest import call_cli
from tests.swarm_standin import SwarmStandin, SwarmState, free_port_with_nothing_listening

DUMP = """\
ajet:
  experiment_dir: saved_experiments/run1
  rollout:
    max_env_worker: 64
    num_repeat: 4
  data:
    train_batch_size: 8
  interchange_server:
    max_inference_tracker_threads: 32
"""

SCRIPT = """\
import os
from ajet import AgentJetJob

N = int(os.environ.get("N_REPEAT", "6"))
job = AgentJetJob(algorithm="grpo", n_gpu=8, num_repeat=N, batch_size=32, max_env_worker=128)
job.config.ajet.rollout.max_env_worker = 96
"""


def call(**arguments):
    return TOOLS_BY_NAME["episode_cap"].invoke(arguments)


def by_name(result):
    return {i.name: i for i in result.inputs}


def test_an_engine_yaml_names_the_file_and_line_of_each_input(tmp_path):
    dump = tmp_path / "yaml_backup.yaml"
    dump.write_text(DUMP)
    r = call(yaml=str(dump))
    assert (r.episode_cap, r.binding) == (32, ["train_batch_size"])
    got = by_name(r)
    assert (got["max_env_worker"].value, got["max_env_worker"].place) == (64, f"{dump}:4")
    assert (got["num_repeat"].place, got["train_batch_size"].place) == (f"{dump}:5", f"{dump}:7")
    assert got["max_inference_tracker_threads"].value == 32 and r.unknown == []
    assert {i.source for i in r.inputs} == {"yaml"}
    assert r.summary.startswith("Episode cap 32 (AgentJet 0.1.0 (c68c154f), ceil rule): train_batch_size binds")
    assert r.summary.endswith(f"Settings from {dump}.") and "\n" not in r.summary
    # a number given with the file wins, and the answer says what it replaced
    r = call(yaml=str(dump), train_batch_size=64)
    assert r.episode_cap == 64 and by_name(r)["train_batch_size"].overrides == f"8 at {dump}:7"
    assert "(train_batch_size given, overriding it)" in r.summary


def test_a_yaml_without_the_needed_settings_is_refused_naming_them(tmp_path):
    dump = tmp_path / "partial.yaml"
    dump.write_text("ajet:\n  rollout:\n    num_repeat: 4\n")
    with pytest.raises(ToolInputError) as err:
        call(yaml=str(dump))
    assert err.value.field == "yaml" and "max_env_worker (ajet.rollout.max_env_worker is not in partial.yaml)" in \
        str(err.value) and str(err.value).endswith("give max_env_worker")
    r = call(yaml=str(dump), max_env_worker=16)  # ... and the number completes it
    assert r.episode_cap == 16 and r.bounds.train_batch_size is None
    assert {u.name for u in r.unknown} == {"train_batch_size", "max_inference_tracker_threads"}
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ToolInputError) as err:
        call(yaml=str(tmp_path / "list.yaml"))
    assert err.value.field == "yaml"


def test_a_client_script_is_read_as_check_config_reads_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    r = call(script=str(script))
    checked = TOOLS_BY_NAME["check_config"].invoke({"script": str(script)})
    assert r.episode_cap == checked.values["episode_cap"] == 96
    got = by_name(r)
    assert got["max_env_worker"].place == f"{script}:6 (written after construction: 96)"
    assert got["num_repeat"].value == 6 and "environment variable N_REPEAT is unset" in got["num_repeat"].place
    assert got["train_batch_size"].place == f"{script}:5 (AgentJetJob kwarg batch_size)"
    assert got["max_inference_tracker_threads"].place.startswith("AgentJet 0.1.0 (c68c154f)'s default")
    assert r.summary.endswith(f"Settings from {script}.")


def test_what_a_script_leaves_unknown_is_listed_not_guessed(tmp_path):
    script = tmp_path / "argv.py"
    script.write_text("import sys\nfrom ajet import AgentJetJob\n"
                      "job = AgentJetJob(num_repeat=4, batch_size=32, max_env_worker=int(sys.argv[1]))\n")
    with pytest.raises(ToolInputError) as err:
        call(script=str(script))
    assert err.value.field == "script" and "sys.argv" in str(err.value)
    assert str(err.value).endswith("give max_env_worker")
    r = call(script=str(script), max_env_worker=16)
    assert r.episode_cap == 16 and by_name(r)["max_env_worker"].source == "argument"


def test_several_constructions_with_different_settings_are_refused_with_their_lines(tmp_path):
    script = tmp_path / "two.py"
    script.write_text("from ajet import AgentJetJob\n"
                      "a = AgentJetJob(num_repeat=4, max_env_worker=64)\n"
                      "b = AgentJetJob(num_repeat=4, max_env_worker=32)\n")
    with pytest.raises(ToolInputError) as err:
        call(script=str(script))
    assert err.value.field == "script" and "2 AgentJetJobs (lines 2, 3)" in str(err.value)


def test_a_script_agentjet_refuses_still_gets_its_cap_with_the_refusal_said(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("from ajet import AgentJetJob\njob = AgentJetJob(grpo_n=4, max_env_worker=64)\n")
    r = call(script=str(script))
    assert "AgentJet refuses this script as written" in r.summary
    assert "no kwarg 'grpo_n'" in r.explanation


def test_a_live_server_its_dump_then_what_its_pool_publishes(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "yaml_backup.yaml").write_text(DUMP)
    with SwarmStandin(SwarmState(experiment_dir=str(exp))) as server:
        r = call(url=server.url)
        assert r.episode_cap == 32 and by_name(r)["max_env_worker"].place == f"{exp / 'yaml_backup.yaml'}:4"
        assert {i.source for i in r.inputs} == {"server"}
        assert f"(the config the engine at {server.url} dumped)" in r.summary
        # before an experiment starts there is no dump: the pool's numbers alone do not give the cap
        server.state.experiment_dir = None
        with pytest.raises(ToolInputError) as err:
            call(url=server.url)
        assert err.value.field == "url" and "has not started an experiment yet" in str(err.value)
        r = call(url=server.url, max_env_worker=64)
        got = by_name(r)
        assert got["num_repeat"].place.endswith("(task_expected_num_repeat)") and got["num_repeat"].value == 4
        assert got["train_batch_size"].value == 32 and r.episode_cap == 64


def test_a_server_that_is_down_is_a_failure_naming_it():
    port = free_port_with_nothing_listening()
    with pytest.raises(SkillError) as err:
        call(url=f"127.0.0.1:{port}", timeout_s=1)
    assert f"could not read the swarm server at http://127.0.0.1:{port}" in str(err.value)


@pytest.mark.parametrize("args, words", [
    ({"yaml": "a.yaml", "url": "localhost:1"}, "give one source of the settings, not yaml and url"),
    ({"script": "a.py", "id": "run"}, "not script and id"),
    ({"cwd": "/tmp"}, "cwd: only used with script or yaml"),
    ({"num_repeat": 4}, "max_env_worker is required (or give yaml, script, url or id to read it from)"),
    ({"url": "ftp://x:1"}, "url: "),
    ({"yaml": "/nonexistent/yaml_backup.yaml"}, "yaml"),
])
def test_bad_sources_are_one_line_errors_the_same_in_both_front_ends(args, words):
    code, out, err = call_cli("episode_cap", args)
    assert code == 1 and out is None and err.count("\n") == 1 and words in err, err


@pytest.mark.anyio
async def test_the_mcp_client_gets_the_same_refusal_and_the_answer(tmp_path):
    dump = tmp_path / "yaml_backup.yaml"
    dump.write_text(DUMP)
    args = {"yaml": str(dump), "url": "localhost:1"}
    _, _, err = call_cli("episode_cap", args)
    async with Client(build_server()) as client:
        bad = await client.call_tool("episode_cap", args)
        ok = await client.call_tool("episode_cap", {"yaml": str(dump)})
    message = err.removeprefix("episode_cap: ").strip()
    assert bad.is_error and bad.content[0].text == f"Error executing tool episode_cap: {message}"
    assert not ok.is_error and ok.structured_content["episode_cap"] == 32
    assert next(iter(ok.structured_content)) == "summary"
    assert json.loads(ok.content[0].text)["inputs"][0]["place"] == f"{dump}:4"


POOL_CLIENT = """\
import os
from concurrent.futures import ThreadPoolExecutor
from ajet import AgentJetJob
from ajet.utils.thread_executors import PeriodicDrainThreadPoolExecutor

GRPO_N = int(os.environ.get("GRPO_N", "4"))
BATCH = 16
job = AgentJetJob(num_repeat=GRPO_N, batch_size=32, max_env_worker=256)
{pool}
"""


@pytest.mark.parametrize(("pool", "threads"), [
    ("executor = PeriodicDrainThreadPoolExecutor(workers=GRPO_N * BATCH, max_parallel=48)", 48),
    ("executor = PeriodicDrainThreadPoolExecutor(workers=GRPO_N * BATCH)", 64),
    ("with ThreadPoolExecutor(max_workers=BATCH) as pool:\n    pass", 16),
])
def test_a_client_scripts_own_pool_bounds_the_cap_with_its_line_and_assumptions(tmp_path, pool, threads):
    script = tmp_path / "client.py"
    script.write_text(POOL_CLIENT.format(pool=pool))
    r = call(script=str(script))
    got = by_name(r)["client_parallelism"]
    assert (got.value, got.source) == (threads, "script")
    assert got.place.startswith("client.py:9 (") and "this script is the only client" in got.place
    if "GRPO_N" in pool and "max_parallel" not in pool:
        assert "environment variable GRPO_N is unset" in got.place
    assert r.episode_cap == threads and r.binding == ["clients"]  # the engine alone would allow 128
    given = call(script=str(script), client_parallelism=[threads, threads])
    assert given.episode_cap == 2 * threads and by_name(given)["client_parallelism"].overrides.startswith(str(threads))


@pytest.mark.parametrize(("pool", "said"), [
    ("executor = ThreadPoolExecutor()", "Python picks min(32, cpus + 4)"),
    ("executor = ThreadPoolExecutor(max_workers=int(os.environ['W']))", "has an unknown size"),
    ("a = ThreadPoolExecutor(4)\nb = ThreadPoolExecutor(8)",
     "2 thread pools that could run the episodes (line 9: 4; line 10: 8)"),
    ("", "builds no thread pool this tool recognises"),
])
def test_a_pool_whose_size_or_role_is_not_known_is_said_and_not_used(tmp_path, pool, said):
    script = tmp_path / "client.py"
    script.write_text(POOL_CLIENT.format(pool=pool))
    r = call(script=str(script))
    assert "client_parallelism" not in by_name(r) and r.episode_cap == 128
    assert said in r.explanation
