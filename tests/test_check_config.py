"""check_config: realistic client scripts in several styles, each with its exact set of findings."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from skill_server.errors import ToolInputError
from skill_server.lint import RULES, CheckConfigInput, check_config
from skill_server.tools import get_tool
from tests.agentjet_fixtures import make_fake_agentjet
from tests.conftest import call_cli

CLIENTS = Path(__file__).parent / "fixtures" / "clients"


def lint(script: Path | str | None = None, **kw):
    return check_config(CheckConfigInput(script=str(script) if script else None, **kw))


def rules(result) -> set[str]:
    return {f.rule for f in result.findings}


def only(result, rule: str):
    found = [f for f in result.findings if f.rule == rule]
    assert len(found) == 1, (rule, [f.message for f in found])
    return found[0]


def write(tmp_path: Path, name: str, text: str, tail: str = "") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text) + tail)
    return path


# AgentJet refuses ajet_swarm_default inside a defaults list (it sets hydra.searchpath); a custom base composes
# verl_default and ajet_default and turns swarm mode on itself (SWARM_ON, under ajet:).
SWARM_TAIL = ("hydra:\n  searchpath:\n    - file://ajet/default_config\n    - file://ajet/default_config/verl\n"
              "defaults:\n  - verl_default\n  - ajet_default\n  - _self_\n")
SWARM_ON = "  enable_swarm_mode: true\n  enable_interchange_server: true\n"


# --- the fixture clients, one style each ----------------------------------------------------------


def test_werewolves_yaml_first_with_one_kwarg_override():
    r = lint(CLIENTS / "werewolves" / "agent_roll.py")
    assert rules(r) == {"kwarg-overrides-yaml", "cap-not-divisible", "tracker-threads-below-cap", "split-configuration"}
    over = only(r, "kwarg-overrides-yaml")
    assert over.key == "ajet.rollout.max_env_worker"
    assert (over.values["kwarg_value"], over.values["yaml_value"]) == (128, 64)
    assert [(Path(l.file).name, l.line) for l in over.locations] == [("agent_roll.py", 17), ("werewolves.yaml", 14)]
    split = only(r, "split-configuration")
    assert split.values["in_both"] == ["ajet.rollout.max_env_worker"] and split.values["one_place"] == "yaml"
    assert "build_config" in split.fix and "werewolves.yaml" in split.fix
    assert split.values["build_config_arguments"]["kwargs"] == {
        "algorithm": "grpo", "experiment_name": "werewolves_grpo", "max_env_worker": 128}
    cap = only(r, "cap-not-divisible")
    assert cap.values == {"max_env_worker": 128, "num_repeat": 6, "episode_cap": 128, "thread_rule": "ceil"}
    assert "126 or 132" in cap.fix
    assert only(r, "tracker-threads-below-cap").values["max_inference_tracker_threads"] == 64
    e = r.effective
    assert (e.max_env_worker, e.num_repeat, e.train_batch_size, e.episode_cap) == (128, 6, 32, 128)
    assert e.source["max_env_worker"] == "kwarg" and e.source["num_repeat"] == "yaml"
    base = r.constructions[0].base_yaml
    assert base.anchor == "script_dir" and base.path.endswith("werewolves.yaml") and base.exists
    assert r.summary.errors == 0 and r.summary.warnings == 4


def test_dataclass_config_feeding_kwargs_from_a_sibling_module():
    r = lint(CLIENTS / "cocktail" / "train_client.py")
    assert rules(r) == {"cap-limited-by-batch", "escape-hatch-has-kwarg"}
    assert only(r, "escape-hatch-has-kwarg").key == "ajet.trainer_common.nnodes"
    kwargs = {k.name: k for k in r.constructions[0].kwargs}
    assert kwargs["num_repeat"].value == 8 and kwargs["num_repeat"].how == "dataclass default"
    assert kwargs["max_env_worker"].value == 512 and kwargs["compute_madness_checklist"].value == ["nonsense"]
    writes = {w.key: w for w in r.constructions[0].writes}
    assert writes["ajet.rollout.multi_turn"].kind == "whole-dict"
    assert writes["ajet.rollout.multi_turn"].value == {"max_sample_per_task": 25, "max_steps": 25, "expected_steps": 1}
    assert writes["ajet.trainer_common.save_freq"].value == 1_000_000_000
    assert r.effective.episode_cap == 256 and r.constructions[0].freezes[0].call == "auto_sync_train_config_and_start_engine"


def test_all_kwargs_multi_node_is_clean_and_switches_to_tcp():
    r = lint(CLIENTS / "geo3k_multinode.py")
    assert r.findings == [] and r.summary.errors == r.summary.warnings == r.summary.infos == 0
    e = r.effective
    assert (e.nnodes, e.interchange_method, e.source["interchange_method"]) == (2, "tcp", "tcp-switch")
    assert (e.max_env_worker, e.max_model_len) == (64, 18000)
    assert r.constructions[0].callee == "ajet_job_module.AgentJetJob"
    assert {k.name for k in r.constructions[0].kwargs} >= {"max_prompt_length", "max_response_length_in_one_turn"}
    assert "model" in {k.name for k in r.constructions[0].kwargs if not k.resolved}


def test_writes_after_a_dump():
    r = lint(CLIENTS / "e2b_dump_then_write.py")
    # AgentJet c68c154f (the bundled release) has no ulysses_sequence_parallel_size / ppo_max_token_len_per_gpu
    assert rules(r) == {"unknown-key", "write-after-dump", "unsupported-kwarg"}
    late = only(r, "write-after-dump")
    assert late.key == "ajet.rollout.temperature" and [l.line for l in late.locations] == [28, 27]
    assert only(r, "unknown-key").key == "ajet.rollout.vllm_tool_parser"
    assert [w.after_freeze for w in r.constructions[0].writes] == [False, False, True]
    assert r.effective.source["interchange_method"] == "tcp-switch"
    assert r.constructions[0].callee == "ajet_job.AgentJetJob"


def test_typos_and_broken_groups():
    r = lint(CLIENTS / "typos_client.py")
    assert rules(r) == {"unsupported-kwarg", "unknown-key", "kwarg-group-incomplete", "length-budget", "lora-rules",
                        "batch-not-divisible-by-gpus", "cap-limited-by-batch"}
    assert only(r, "unsupported-kwarg").values["closest"] == "num_repeat"
    unknown = {f.key: f for f in r.findings if f.rule == "unknown-key"}
    assert set(unknown) == {"ajet.rollout.temprature", "ajet.rolout", "ajet.rollout.multi_turn.max_steps"}
    assert unknown["ajet.rollout.temprature"].values["closest"] == "ajet.rollout.temperature"
    assert unknown["ajet.rolout"].values["closest"] == "ajet.rollout"
    assert unknown["ajet.rollout.multi_turn.max_steps"].values["access_error"] == "AttributeError"
    assert "['max_steps']" in unknown["ajet.rollout.multi_turn.max_steps"].fix
    group = only(r, "kwarg-group-incomplete")
    assert group.values["missing"] == ["max_model_len"] and "max_model_len=18000" in group.fix
    assert only(r, "lora-rules").key == "ajet.trainer_common.optim.lr"
    assert only(r, "batch-not-divisible-by-gpus").values == {
        "train_batch_size": 9, "num_repeat": 4, "n_gpus_per_node": 8, "nnodes": 1}
    assert r.summary.errors == 8 and r.findings[0].severity == "error"


def test_whole_dict_writes_through_aliases_and_setattr():
    r = lint(CLIENTS / "whole_dict_client.py")
    assert rules(r) == {"unknown-key", "escape-hatch-has-kwarg"}
    assert only(r, "unknown-key").key == "ajet.trainer_common.fsdp_config.optimizer_ofload"
    assert only(r, "unknown-key").values["closest"] == "ajet.trainer_common.fsdp_config.optimizer_offload"
    hatch = only(r, "escape-hatch-has-kwarg")
    assert hatch.key == "ajet.lora.lora_rank" and "lora_rank=0" in hatch.fix
    kinds = {w.key: w.kind for w in r.constructions[0].writes}
    assert kinds == {"ajet.rollout.multi_turn": "whole-dict", "ajet.rollout.val_kwargs.temperature": "item",
                     "ajet.debug": "whole-dict", "ajet.trainer_common.fsdp_config": "whole-dict",
                     "ajet.lora.lora_rank": "setattr"}
    assert any("ajet.debug dict" in n and "debug_vllm_port" in n for n in r.notes)


def test_clean_script_has_no_errors_or_warnings():
    r = lint(CLIENTS / "clean_client.py")
    assert r.summary.errors == 0 and r.summary.warnings == 0 and r.findings == []
    assert r.effective.episode_cap == 128 and r.effective.source["max_env_worker"] == "kwarg"
    assert r.constructions[0].variable == "job" and len(r.constructions[0].writes) == 3


def test_yaml_alone_base_not_swarm():
    r = lint(yaml=str(CLIENTS / "not_swarm_base.yaml"))
    assert rules(r) == {"base-not-swarm"}
    f = only(r, "base-not-swarm")
    assert f.values["composes_swarm_defaults"] is False and "ajet_swarm_default" in f.fix
    assert r.effective.enable_swarm_mode is False and r.effective.max_env_worker == 64
    assert r.constructions == [] and r.yaml_customised == ["ajet.model.path"]


# --- the remaining rules, from small scripts ------------------------------------------------------


def test_redundant_kwarg_is_info_and_split_still_warns(tmp_path):
    write(tmp_path, "base.yaml", """\
        ajet:
          rollout:
            num_repeat: 8
            max_env_worker: 256
        """, SWARM_ON + SWARM_TAIL)
    script = write(tmp_path, "client.py", """\
        from pathlib import Path
        from ajet.copilot.job import AgentJetJob
        job = AgentJetJob(base_yaml_config=str(Path(__file__).parent / "base.yaml"), num_repeat=8)
        """)
    r = lint(script)
    assert rules(r) == {"redundant-kwarg", "split-configuration"}
    assert only(r, "redundant-kwarg").severity == "info" and r.summary.infos == 1


def test_interchange_ipc_in_yaml_or_write_with_two_nodes(tmp_path):
    write(tmp_path, "base.yaml", """\
        ajet:
          trainer_common:
            nnodes: 2
          interchange_server:
            interchange_method: ipc
        """, SWARM_ON + SWARM_TAIL)
    r = lint(yaml=str(tmp_path / "base.yaml"))
    assert rules(r) == {"interchange-not-tcp"} and only(r, "interchange-not-tcp").locations[0].line == 5
    script = write(tmp_path, "client.py", """\
        import ajet.copilot.job as m
        job = m.AgentJetJob(nnodes=2, n_gpu=8)
        job.config.ajet.interchange_server.interchange_method = "ipc"
        """)
    r = lint(script)
    assert rules(r) == {"interchange-not-tcp"} and r.effective.interchange_method == "ipc"
    assert only(r, "interchange-not-tcp").locations[0].line == 3


def test_relative_base_resolved_against_cwd(tmp_path):
    (tmp_path / "configs").mkdir()
    write(tmp_path / "configs", "run.yaml", "ajet:\n  rollout:\n    num_repeat: 8\n", SWARM_ON + SWARM_TAIL)
    (tmp_path / "tutorial").mkdir()
    script = write(tmp_path / "tutorial", "client.py", """\
        from ajet.copilot.job import AgentJetJob
        job = AgentJetJob(base_yaml_config="configs/run.yaml")
        """)
    r = lint(script)
    assert r.constructions[0].base_yaml.anchor == "cwd" and r.effective.num_repeat == 8
    assert any("relative to the working directory" in n for n in r.notes)
    missing = write(tmp_path / "tutorial", "other.py", """\
        from ajet.copilot.job import AgentJetJob
        job = AgentJetJob(base_yaml_config="nowhere/run.yaml")
        """)
    r = lint(missing)
    assert r.constructions[0].base_yaml.exists is False and any("Configuration yaml is absent" in n for n in r.notes)


def test_import_styles_writes_via_helpers_and_order_across_functions(tmp_path):
    script = write(tmp_path, "client.py", """\
        from ajet.copilot.job import AgentJetJob
        from ajet.tuner_lib.experimental.swarm_client import SwarmClient
        BASE_KW = {"num_repeat": 4, "batch_size": 32}

        class Runner:
            def __init__(self):
                self.job = AgentJetJob(**BASE_KW, max_env_worker=128)
                self.job.config.ajet.rollout.temperature = 0.5

            def start(self, client):
                client.sync_train_config(self.job)
                configure(self.job)

        def configure(job: AgentJetJob):
            job.config.ajet.rollout.top_p = 0.9
        """)
    r = lint(script)
    c = r.constructions[0]
    assert c.variable == "self.job" and {k.name: k.value for k in c.kwargs} == {
        "num_repeat": 4, "batch_size": 32, "max_env_worker": 128}
    assert [(w.key, w.after_freeze) for w in c.writes] == [("ajet.rollout.temperature", False),
                                                          ("ajet.rollout.top_p", True)]
    assert rules(r) == {"write-after-dump"}


@pytest.mark.parametrize("imports, callee", [
    ("from ajet.copilot.job import AgentJetJob", "AgentJetJob"),
    ("from ajet.copilot.job import AgentJetJob as Job", "Job"),
    ("from ajet.copilot import job as j", "j.AgentJetJob"),
    ("from ajet.copilot import job", "job.AgentJetJob"),
    ("import ajet.copilot.job as m", "m.AgentJetJob"),
    ("import ajet.copilot.job", "ajet.copilot.job.AgentJetJob"),
])
def test_every_import_style_is_recognised(tmp_path, imports, callee):
    script = write(tmp_path, "client.py", f"{imports}\nx = {callee}(**{{'num_repeat': 8}}, max_env_worker=64)\n"
                   "x.config.ajet.rollout.temperature = 0.5\n")
    r = lint(script)
    assert [c.callee for c in r.constructions] == [callee] and r.effective.num_repeat == 8
    assert [w.key for w in r.constructions[0].writes] == ["ajet.rollout.temperature"] and r.findings == []


def test_unrelated_class_of_the_same_name_is_ignored(tmp_path):
    script = write(tmp_path, "client.py", "import mylib\njob = mylib.AgentJetJob(num_repeat=3)\n")
    r = lint(script)
    assert r.constructions == [] and any("no AgentJetJob" in n for n in r.notes)


def test_unsupported_kwarg_for_an_older_install(tmp_path):
    old_job = textwrap.dedent('''
        class AgentJetJob:
            def __init__(self, base_yaml_config=None, experiment_name=None, num_repeat=None):
                overrides = {"ajet.experiment_name": "experiment_name", "ajet.rollout.num_repeat": "num_repeat"}
        ''')
    root = make_fake_agentjet(tmp_path / "old", version="0.0.2", job_py=old_job)
    script = write(tmp_path, "client.py", """\
        from ajet.copilot.job import AgentJetJob
        job = AgentJetJob(num_repeat=4, nnodes=1)
        """)
    r = lint(script, agentjet_root=str(root))
    f = only(r, "unsupported-kwarg")
    assert f.key == "ajet.trainer_common.nnodes" and "0.0.2" in f.message and "TypeError" in f.message
    assert r.agentjet.version_hint == "0.0.2" and r.agentjet.overrides_table.endswith("job.py")


def test_unresolvable_values_are_reported_not_guessed(tmp_path):
    script = write(tmp_path, "client.py", """\
        import argparse, os
        from ajet.copilot.job import AgentJetJob
        args = argparse.ArgumentParser().parse_args()
        kwargs = {k: v for k, v in vars(args).items() if v is not None}
        job = AgentJetJob(**kwargs, max_env_worker=int(os.environ.get("MEW", "64")), num_repeat=args.n)
        job.config.ajet.rollout.temperature = args.temperature
        """)
    r = lint(script)
    c = r.constructions[0]
    assert c.dynamic_kwargs == ["**kwargs"] and not any(k.resolved for k in c.kwargs)
    assert r.effective.max_env_worker is None and "ajet.rollout.max_env_worker" in r.effective.unresolved
    assert r.summary.errors == 0 and r.summary.warnings == 0


def test_base_without_defaults_list_is_not_swarm(tmp_path):
    write(tmp_path, "bare.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n")
    r = lint(yaml=str(tmp_path / "bare.yaml"))
    f = only(r, "base-not-swarm")
    assert f.key == "ajet.enable_interchange_server" and "no defaults list" in f.message


# --- bad inputs --------------------------------------------------------------------------------------


def test_bad_inputs_are_clear_errors(tmp_path):
    bad = write(tmp_path, "bad.py", "from ajet.copilot.job import AgentJetJob\njob = AgentJetJob(\n  num_repeat=4,,\n)\n")
    with pytest.raises(ToolInputError) as info:
        lint(bad)
    assert info.value.field == "script" and "line 3" in str(info.value) and "not valid Python" in str(info.value)
    with pytest.raises(ToolInputError, match="file not found"):
        lint(tmp_path / "missing.py")
    with pytest.raises(ToolInputError, match="not a regular file"):
        lint(tmp_path)
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 400_000)
    with pytest.raises(ToolInputError, match="MiB limit"):
        lint(big)
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ToolInputError) as info:
        lint(yaml=str(tmp_path / "list.yaml"))
    assert info.value.field == "yaml" and "mapping" in str(info.value)
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00x")
    with pytest.raises(ToolInputError, match="UTF-8"):
        lint(tmp_path / "binary.py")
    spec = get_tool("check_config")
    with pytest.raises(ToolInputError, match="give script"):
        spec.validate({})
    with pytest.raises(ToolInputError) as info:
        spec.validate({"script": "x.py", "scripts": "y"})
    assert info.value.field == "scripts"


def test_rule_table_is_the_documented_api():
    assert RULES == {
        "split-configuration": "warning", "kwarg-overrides-yaml": "warning", "redundant-kwarg": "info",
        "escape-hatch-has-kwarg": "warning", "unknown-key": "error", "unsupported-kwarg": "error",
        "write-after-dump": "error", "kwarg-group-incomplete": "error", "length-budget": "error",
        "lora-rules": "error", "batch-not-divisible-by-gpus": "error", "interchange-not-tcp": "error",
        "base-not-swarm": "warning", "cap-not-divisible": "warning", "cap-limited-by-batch": "warning",
        "tracker-threads-below-cap": "warning",
    }
    doc = (Path(__file__).parents[1] / "references" / "split-configuration.md").read_text()
    assert all(f"`{rule}`" in doc for rule in RULES)


# --- front ends ---------------------------------------------------------------------------------------


def test_cli_call():
    code, out, err = call_cli("check_config", {"script": str(CLIENTS / "werewolves" / "agent_roll.py")})
    assert code == 0, err
    assert out["summary"] == {"errors": 0, "warnings": 4, "infos": 0}
    code, out, err = call_cli("check_config", {"script": str(CLIENTS / "nope.py")})
    assert code == 1 and out is None and "script: file not found" in err and err.count("\n") == 1


@pytest.mark.anyio
async def test_mcp_in_process():
    from mcp import Client

    from skill_server.mcp_app import build_server

    async with Client(build_server()) as client:
        r = await client.call_tool("check_config", {"script": str(CLIENTS / "e2b_dump_then_write.py")})
        assert not r.is_error
        assert {f["rule"] for f in r.structured_content["findings"]} == {"unknown-key", "write-after-dump",
                                                                     "unsupported-kwarg"}
        r = await client.call_tool("check_config", {})
        assert r.is_error and "give script" in r.content[0].text
