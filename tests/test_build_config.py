"""build_config: fidelity against Hydra's own composition of AgentJet's YAMLs, validation, writing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from skill_server.agentjet.knowledge import bundled_overrides, snapshot
from skill_server.errors import SkillError, ToolFailure, ToolInputError
from skill_server.overlay import BuildConfigInput, build_config
from tests.agentjet_fixtures import expected_dump, hydra_compose, make_fake_agentjet, set_dotted
from tests.conftest import SHARED, call_cli

SWARM_REL = Path("ajet/default_config/ajet_swarm_default.yaml")


def build(**kw):
    return build_config(BuildConfigInput(**kw))


def doc(result) -> dict:
    return yaml.safe_load(result.yaml)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_fake_agentjet(tmp_path / "AgentJet")


# --- the bundled snapshot -------------------------------------------------------------------------


@pytest.mark.skipif(not (SHARED / "agentjet-reference").is_dir(), reason="reference data not beside the repo")
def test_snapshot_layers_equal_agentjet_reference_yamls():
    snap = snapshot()
    ref = SHARED / "agentjet-reference"
    for name, rel in (("ajet_swarm_default", "ajet_swarm_default.yaml"), ("ajet_default", "ajet_default.yaml"),
                      ("verl_default", "verl/verl_default.yaml")):
        assert snap["layers"][name] == yaml.safe_load((ref / rel).read_text()), name


def test_overrides_table_is_the_39_rows_of_the_facts():
    table = bundled_overrides()
    assert len(table.rows) == 39 and len(set(table.kwargs)) == 39
    assert table.key_for("batch_size") == "ajet.data.train_batch_size"
    assert table.key_for("logging") == "ajet.trainer_common.logger"
    assert table.key_for("timeline_compare_level") == "ajet.context_tracker.timeline_merging_policy.timeline_compare_level"
    assert table.rows[0] == ("experiment_dir", "ajet.experiment_dir") and table.rows[-1][0] == "timeline_compare_level"


# --- fidelity -------------------------------------------------------------------------------------


def test_no_kwargs_reproduces_swarm_defaults(checkout):
    expected = expected_dump(hydra_compose(checkout / SWARM_REL, checkout), checkout / SWARM_REL)
    bundled = build()
    assert bundled.base.kind == "bundled" and doc(bundled) == expected
    installed = build(agentjet_root=str(checkout))
    assert installed.base.kind == "agentjet" and installed.base.version_hint == "0.0.4"
    assert doc(installed) == expected
    d = doc(bundled)
    # spot checks straight from the facts (section 2.2)
    assert d["ajet"]["rollout"]["max_env_worker"] == 128 and d["ajet"]["rollout"]["num_repeat"] == 4
    assert d["ajet"]["interchange_server"]["interchange_server_port"] == 10086
    assert d["ajet"]["trainer_common"]["logger"] == "tensorboard" and d["ajet"]["task_reader"]["type"] == "random_dummy"
    assert list(d)[:2] == ["ajet", "actor_rollout_ref"] and list(d)[-2:] == ["hydra", "defaults"]
    assert "run" not in d["hydra"]  # ajet_default's hydra.run.dir is not copied back
    assert d["trainer"]["default_local_dir"].startswith("${trainer.checkpoint_base_dir}")  # interpolation kept
    assert d["trainer"]["experiment_name"] == "read_yaml_name"  # verl sections are not synchronised


def test_install_found_through_env_and_used(checkout, monkeypatch):
    monkeypatch.setenv("AJET_ROOT", str(checkout))
    r = build(kwargs={"num_repeat": 8})
    assert r.base.kind == "agentjet" and r.base.path == str((checkout / SWARM_REL).resolve())
    assert r.sources.found_by == "AJET_ROOT"


WEREWOLVES_LIKE = """\
ajet:
  experiment_name: werewolves_swarm
  rollout:
    num_repeat: 6
    max_env_worker: 64
    tensor_model_parallel_size: 1
  data:
    train_batch_size: 32
  interchange_server:
    num_fastapi_process: 2
    max_inference_tracker_threads: 64
  trainer_common:
    save_freq: 5
    total_training_steps: 25
  enable_swarm_mode: true
  enable_interchange_server: true
hydra:
  searchpath:
    - file://ajet/default_config
    - file://ajet/default_config/verl
defaults:
  - verl_default
  - ajet_default
  - _self_
"""


def test_kwargs_writes_and_custom_base_match_agentjetjob(checkout, tmp_path):
    base = tmp_path / "exp" / "werewolves.yaml"
    base.parent.mkdir()
    base.write_text(WEREWOLVES_LIKE)
    kwargs = {"algorithm": "grpo", "experiment_name": "wolves", "max_env_worker": 128, "n_gpu": 4,
              "compute_madness_checklist": ["nonsense", "un-paired-think"]}
    writes = {"ajet.rollout.temperature": 0.6, "ajet.rollout.multi_turn": {"max_steps": 12, "expected_steps": 2},
              "ajet.rollout.vllm_tool_parser": "hermes"}
    r = build(kwargs=kwargs, base_yaml=str(base), set=writes, agentjet_root=str(checkout))

    expected = expected_dump(hydra_compose(base, checkout), base)
    table = bundled_overrides()
    for name, value in kwargs.items():
        set_dotted(expected, table.key_for(name), value)
    for key, value in writes.items():
        set_dotted(expected, key, value)
    assert doc(r) == expected
    assert r.base.kind == "file"
    prov = {p.key: p for p in r.provenance}
    assert prov["ajet.rollout.max_env_worker"].source == "kwarg" and prov["ajet.rollout.max_env_worker"].base_value == 64
    assert prov["ajet.rollout.max_env_worker"].layer == "werewolves"
    assert prov["ajet.rollout.num_repeat"].source == "base" and prov["ajet.rollout.num_repeat"].value == 6
    assert prov["ajet.rollout.multi_turn.max_steps"].source == "set"
    assert prov["ajet.trainer_common.logger"].layer == "ajet_default"  # the trap: not the swarm overlay's value
    assert prov["ajet.task_reader.huggingface_dat_repo.dataset_name"].layer == "schema"
    assert any("vllm_tool_parser" in w and "new attribute" in w for w in r.warnings)


def test_custom_base_over_ajet_default_leaves_swarm_off(checkout, tmp_path):
    base = tmp_path / "plain.yaml"
    base.write_text("ajet:\n  rollout:\n    num_repeat: 8\nhydra:\n  searchpath:\n    - file://ajet/default_config\n"
                    "    - file://ajet/default_config/verl\ndefaults:\n  - verl_default\n  - ajet_default\n  - _self_\n")
    d = doc(build(base_yaml=str(base), agentjet_root=str(checkout)))
    assert d == expected_dump(hydra_compose(base, checkout), base)
    assert d["ajet"]["enable_swarm_mode"] is False and d["ajet"]["trainer_common"]["logger"] == "swanlab"
    assert d["ajet"]["rollout"]["max_env_worker"] == 64


def test_custom_base_without_install_uses_bundled_layers(tmp_path):
    base = tmp_path / "custom.yaml"
    base.write_text(WEREWOLVES_LIKE)
    r = build(base_yaml=str(base))
    assert doc(r)["ajet"]["rollout"]["num_repeat"] == 6 and doc(r)["actor_rollout_ref"]["hybrid_engine"] is True
    assert any("bundled AgentJet layer" in w for w in r.warnings)


def test_base_without_defaults_list_is_taken_as_is(tmp_path):
    base = tmp_path / "flat.yaml"
    base.write_text("ajet:\n  rollout:\n    max_env_worker: 32\n    num_repeat: 4\n")
    d = doc(build(base_yaml=str(base)))
    assert d["ajet"]["rollout"]["max_env_worker"] == 32
    assert d["ajet"]["trainer_common"]["nnodes"] == 1  # a dataclass default, present in every dump
    assert "actor_rollout_ref" not in d


def test_ensure_new_experiment_stamps_names():
    r = build(kwargs={"ensure_new_experiment": True, "experiment_name": "math"})
    name = doc(r)["ajet"]["experiment_name"]
    assert name.startswith("math_") and len(name) == len("math_20260101-000000")
    sentinel = build(kwargs={"ensure_new_experiment": True})
    assert doc(sentinel)["ajet"]["experiment_name"] == "read_yaml_name"
    odd = build(kwargs={"experiment_name": "a|b c/d"})
    assert doc(odd)["ajet"]["experiment_name"] == "a|b c/d"


def test_nnodes_forces_tcp_only_in_swarm_mode():
    r = build(kwargs={"nnodes": 2})
    assert doc(r)["ajet"]["interchange_server"]["interchange_method"] == "tcp"
    assert {p.key: p for p in r.provenance}["ajet.interchange_server.interchange_method"].note
    off = build(kwargs={"nnodes": 2, "swarm_mode": False})
    assert doc(off)["ajet"]["interchange_server"]["interchange_method"] == "ipc"
    undone = build(kwargs={"nnodes": 2}, set={"ajet.interchange_server.interchange_method": "ipc"})
    assert any("undoes the tcp switch" in w for w in undone.warnings)


# --- AgentJet-like validation --------------------------------------------------------------------


LENGTHS = {"max_prompt_length": 3000, "max_response_length": 15000, "max_model_len": 18000,
           "max_response_length_in_one_turn": 3000}


@pytest.mark.parametrize(
    "kwargs, field, text",
    [
        ({"max_model_len": 20000}, "kwargs.max_prompt_length", "must all be given or all be left unset"),
        (LENGTHS | {"max_model_len": 17999}, "kwargs.max_model_len", "illegal token length"),
        (LENGTHS | {"max_response_length_in_one_turn": 15001}, "kwargs.max_response_length_in_one_turn", "exceeds"),
        ({"lora_rank": 16}, "base_yaml", "lora_load_format='safetensors'"),
        ({"lora_rank": 16, "lora_load_format": "safetensors"}, "base_yaml", "layered_summon=True"),
        ({"lora_rank": 16, "lora_load_format": "safetensors", "layered_summon": True}, "base_yaml", "lr > 1e-5"),
        ({"lora_rank": 16, "lora_load_format": "safetensors", "layered_summon": True, "lr": 1e-5}, "kwargs.lr", "lr > 1e-5"),
        ({"backbone": "trinity"}, "kwargs.backbone", "trinity"),
        ({"num_repaet": 4}, "kwargs.num_repaet", "Did you mean 'num_repeat'"),
        ({"grpo_n": 4}, "kwargs.grpo_n", "Valid kwargs: algorithm"),
    ],
)
def test_agentjet_validations(kwargs, field, text):
    with pytest.raises(ToolInputError) as info:
        build(kwargs=kwargs)
    assert info.value.field == field and text in str(info.value)


def test_valid_lora_and_lengths_pass():
    r = build(kwargs=LENGTHS | {"lora_rank": 16, "lora_load_format": "safetensors", "layered_summon": True, "lr": 2e-5})
    assert doc(r)["ajet"]["lora"]["lora_rank"] == 16 and doc(r)["ajet"]["trainer_common"]["optim"]["lr"] == 2e-5


def test_writes_are_checked():
    with pytest.raises(ToolInputError) as info:
        build(set={"ajet.rolout.temperature": 0.5})
    assert info.value.field == "set.ajet.rolout.temperature" and "did you mean ajet.rollout" in str(info.value)
    r = build(set={"ajet.rollout.temprature": 0.5, "ajet.rollout.num_repeat": 8})
    assert any("temprature" in w and "did you mean ajet.rollout.temperature" in w for w in r.warnings)
    assert any("pass num_repeat=" in w for w in r.warnings)
    with pytest.raises(ToolInputError):
        build(set={"ajet..x": 1})


def test_type_mismatch_warns():
    r = build(kwargs={"num_repeat": "8"})
    assert any("num_repeat='8' is a str" in w for w in r.warnings)


# --- reading a specific AgentJet version statically ----------------------------------------------

OLD_JOB = '''
class AgentJetJob:
    def __init__(self, base_yaml_config=None, experiment_name=None, num_repeat=None, max_env_worker=None,
                 extra_knob=None):
        overrides = {
            "ajet.experiment_name": "experiment_name",
            "ajet.rollout.num_repeat": "num_repeat",
            "ajet.rollout.max_env_worker": "max_env_worker",
            "ajet.rollout.extra_knob": "extra_knob",
        }
'''


def test_overrides_table_read_from_installed_job_py(tmp_path):
    root = make_fake_agentjet(tmp_path / "old", version="0.0.2", job_py=OLD_JOB)
    r = build(kwargs={"num_repeat": 8, "extra_knob": 3}, agentjet_root=str(root))
    d = doc(r)
    assert d["ajet"]["rollout"]["extra_knob"] == 3 and r.sources.overrides_table.endswith("job.py")
    with pytest.raises(ToolInputError) as info:
        build(kwargs={"nnodes": 2}, agentjet_root=str(root))
    assert info.value.field == "kwargs.nnodes" and "0.0.2" in str(info.value) and "TypeError" in str(info.value)


SCHEMA_PY = '''
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

@dataclass
class AjetRollout:
    num_repeat: int = 8
    chat_template_generate_prompt_type: str = "default"
    compute_madness_checklist: List[str] = field(default_factory=list)

@dataclass
class AjetDefaultConfig:
    project_name: str = "p"
    rollout: AjetRollout = field(default_factory=AjetRollout)
    trainer_verl: Dict = field(default_factory=dict)

@dataclass
class Config:
    ajet: AjetDefaultConfig = field(default_factory=AjetDefaultConfig)
'''


def test_schema_only_fields_read_from_installed_schema(tmp_path):
    root = make_fake_agentjet(tmp_path / "aj", schema_py=SCHEMA_PY)
    d = doc(build(agentjet_root=str(root)))
    assert d["ajet"]["rollout"]["chat_template_generate_prompt_type"] == "default"
    assert d["ajet"]["trainer_verl"] == {}
    assert "dataset_name" not in d["ajet"]["task_reader"]["huggingface_dat_repo"]  # not in this version's schema


# --- bad input, files ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, text",
    [
        ("ajet: [unclosed\n", "not valid YAML at line"),
        ("- a\n- b\n", "must hold a YAML mapping"),
        ("just a string\n", "must hold a YAML mapping"),
        ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
         "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
         "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "alias bomb"),
        ("x: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ],
)
def test_bad_base_yaml(tmp_path, content, text):
    base = tmp_path / "bad.yaml"
    base.write_text(content)
    with pytest.raises(ToolInputError) as info:
        build(base_yaml=str(base))
    assert info.value.field == "base_yaml" and text in str(info.value)


def test_huge_missing_and_directory_bases(tmp_path):
    huge = tmp_path / "huge.yaml"
    with huge.open("w") as handle:
        handle.write("a: " + "x" * (5 * 1024 * 1024) + "\n")
    for path, text in ((huge, "limit"), (tmp_path / "nope.yaml", "not found"), (tmp_path, "not found")):
        with pytest.raises(ToolInputError) as info:
            build(base_yaml=str(path))
        assert info.value.field == "base_yaml" and text in str(info.value)


def test_missing_defaults_entry_is_named(tmp_path):
    base = tmp_path / "b.yaml"
    base.write_text("defaults:\n  - no_such_layer\n  - _self_\n")
    with pytest.raises(ToolInputError) as info:
        build(base_yaml=str(base))
    assert "no_such_layer" in str(info.value)


def test_atomic_write_refuses_to_clobber(tmp_path):
    out = tmp_path / "nested" / "resolved.yaml"
    r = build(kwargs={"num_repeat": 8}, output_path=str(out))
    assert r.written == str(out) and yaml.safe_load(out.read_text()) == doc(r)
    out.write_text("user edits\n")
    with pytest.raises(ToolFailure) as info:
        build(output_path=str(out))
    assert info.value.field == "output_path" and out.read_text() == "user edits\n"
    build(kwargs={"num_repeat": 6}, output_path=str(out), overwrite=True)
    assert yaml.safe_load(out.read_text())["ajet"]["rollout"]["num_repeat"] == 6
    assert sorted(p.name for p in out.parent.iterdir()) == ["resolved.yaml"]  # no temp files left behind


def test_unwritable_output_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SkillError) as info:
        build(output_path=str(blocker / "sub" / "out.yaml"))
    assert info.value.field == "output_path"


def test_cli_build_config(tmp_path):
    code, out, _ = call_cli("build_config", {"kwargs": {"max_env_worker": 126, "num_repeat": 6},
                                             "provenance": "changed"})
    assert code == 0 and {p["key"] for p in out["provenance"]} == {"ajet.rollout.max_env_worker", "ajet.rollout.num_repeat"}
    assert yaml.safe_load(out["yaml"])["ajet"]["rollout"]["max_env_worker"] == 126
    code, out, err = call_cli("build_config", {"kwargs": {"batch": 3}})
    assert code == 1 and "kwargs.batch" in err and err.count("\n") == 1
    code, out, err = call_cli("build_config", {"kwargs": [1, 2]})
    assert code == 1 and "kwargs" in err
    code, out, err = call_cli("build_config", {"base_yaml": str(tmp_path / "absent.yaml")})
    assert code == 1 and "base_yaml: configuration YAML not found" in err
