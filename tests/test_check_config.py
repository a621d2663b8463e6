"""check_config on realistic client scripts in the tutorials' styles: each has its exact set of findings."""

from __future__ import annotations

from pathlib import Path

import pytest

from skill_server.agentjet.identity import agentjet_label
from skill_server.app.table import get_tool
from skill_server.core.errors import ToolInputError
from tests.conftest import call_cli
from tests.lint_helpers import CLIENTS, SWARM_TAIL, lint, old_install, only, rules, skipped, where, write

# --- the fixture clients, one style each ----------------------------------------------------------


def test_werewolves_yaml_first_with_one_kwarg_override():
    r = lint(CLIENTS / "werewolves" / "agent_roll.py")
    assert rules(r) == {"kwarg-overrides-yaml", "cap-not-divisible", "tracker-threads-below-cap", "split-configuration"}
    over = only(r, "kwarg-overrides-yaml")
    assert over.key == "ajet.rollout.max_env_worker"
    assert (over.values["kwarg_value"], over.values["yaml_value"]) == (128, 64)
    assert where(over) == [("agent_roll.py", 17), ("werewolves.yaml", 14)]
    split = only(r, "split-configuration")
    assert split.values["in_both"] == ["ajet.rollout.max_env_worker"] and split.values["one_place"] == "yaml"
    assert split.values["kwarg_keys"] == ["ajet.rollout.max_env_worker", "ajet.trainer_common.algorithm.adv_estimator"]
    assert "build_config" in split.fix and "werewolves.yaml" in split.fix
    args = split.values["build_config_arguments"]
    assert args["kwargs"] == {"algorithm": "grpo", "experiment_name": "werewolves_grpo", "max_env_worker": 128}
    assert args["base_yaml"] == str(CLIENTS / "werewolves" / "werewolves.yaml")
    assert "output_path" not in args  # the tool proposes no file in the user's source tree
    assert split.values["build_config_missing"] == [] and split.values["build_config_left_out"] == []
    cap = only(r, "cap-not-divisible")
    assert cap.values == {"max_env_worker": 128, "num_repeat": 6, "episode_cap": 128, "thread_rule": "ceil"}
    assert "126 or 132" in cap.fix and "line 17" in cap.fix
    # all three inputs, the effective setter of each first, then the YAML value the kwarg overrides
    assert [(loc.key.rsplit(".", 1)[1], Path(loc.file).name, loc.line, loc.source) for loc in cap.locations] == [
        ("max_env_worker", "agent_roll.py", 17, "kwarg"), ("num_repeat", "werewolves.yaml", 13, "yaml"),
        ("train_batch_size", "werewolves.yaml", 9, "yaml"), ("max_env_worker", "werewolves.yaml", 14, "yaml")]
    tracker = only(r, "tracker-threads-below-cap")
    assert tracker.values["max_inference_tracker_threads"] == 64 and "werewolves.yaml:21" in tracker.fix
    e = r.effective
    assert (e.max_env_worker.value, e.num_repeat.value, e.train_batch_size.value, e.episode_cap.value) == (
        128, 6, 32, 128)
    assert (e.max_env_worker.source, e.num_repeat.source, e.num_repeat.location.line) == ("kwarg", "yaml", 13)
    base = r.constructions[0].base_yaml
    assert base.anchor == "script_dir" and base.path.endswith("werewolves.yaml") and base.exists
    assert r.counts.errors == 0 and r.counts.warnings == 4 and r.skipped == []
    # the newest bundled release (never null: a bundled answer names the release folder it read)
    assert (r.agentjet.source, r.agentjet.version, r.agentjet.commit[:8]) == ("bundled", "0.1.0", "c68c154f")
    assert r.agentjet.path.endswith("c68c154f")


def test_dataclass_config_feeding_kwargs_from_a_sibling_module():
    r = lint(CLIENTS / "cocktail" / "train_client.py")
    assert rules(r) == {"no-total-steps", "cap-limited-by-batch", "escape-hatch-has-kwarg", "logger-needs-key",
                        "engine-control-in-client"}  # swanlab; force_restart when FORCE=1
    hatch = only(r, "escape-hatch-has-kwarg")
    assert hatch.key == "ajet.trainer_common.nnodes" and hatch.values["kwarg_passed"] is False
    assert f"pass nnodes=1 to AgentJetJob (a kwarg of {agentjet_label(r.agentjet)})" in hatch.fix
    kwargs = {k.name: k for k in r.constructions[0].kwargs}
    assert kwargs["num_repeat"].value == 8 and kwargs["num_repeat"].how == "dataclass default"
    assert kwargs["max_env_worker"].value == 512 and kwargs["compute_madness_checklist"].value == ["nonsense"]
    writes = {w.key: w for w in r.constructions[0].writes}
    assert writes["ajet.rollout.multi_turn"].kind == "whole-dict"
    assert writes["ajet.rollout.multi_turn"].value == {"max_sample_per_task": 25, "max_steps": 25, "expected_steps": 1}
    assert writes["ajet.trainer_common.save_freq"].value == 1_000_000_000
    cap = only(r, "cap-limited-by-batch")
    assert [loc.key.rsplit(".", 1)[1] for loc in cap.locations] == ["train_batch_size", "num_repeat", "max_env_worker"]
    assert [loc.line for loc in cap.locations] == [20, 19, 23]
    assert r.effective.episode_cap.value == 256 and r.constructions[0].freezes[0].call == \
        "auto_sync_train_config_and_start_engine"


def test_all_kwargs_multi_node_is_clean_and_switches_to_tcp():
    r = lint(CLIENTS / "geo3k_multinode.py")
    # the tutorial sets no step count, logs to swanlab and force-restarts the engine when its environment says so
    assert rules(r) == {"no-total-steps", "logger-needs-key", "engine-control-in-client"}
    assert r.counts.errors == r.counts.infos == 0
    e = r.effective
    assert (e.nnodes.value, e.interchange_method.value, e.interchange_method.source) == (2, "tcp", "tcp-switch")
    assert (e.max_env_worker.value, e.max_model_len.value) == (64, 18000)
    assert r.constructions[0].callee == "ajet_job_module.AgentJetJob"
    model = next(k for k in r.constructions[0].kwargs if k.name == "model")
    assert (model.value, model.how) == ("/mnt/models/Qwen2.5-VL-7B-Instruct", "env-default")
    assert "REMOTE_MODEL_PATH" in model.assumes[0]
    assert e.model_path.source == "env-default" and e.model_path.set_by == "kwarg"


def test_writes_after_a_dump():
    r = lint(CLIENTS / "e2b_dump_then_write.py")
    # AgentJet 0.1.0 (c68c154f) has neither ulysses_sequence_parallel_size nor ppo_max_token_len_per_gpu
    assert rules(r) == {"no-total-steps", "unknown-key", "write-after-dump", "unsupported-kwarg"}
    kwargs = {f.values["kwarg"]: f for f in r.findings if f.rule == "unsupported-kwarg"}
    assert set(kwargs) == {"ulysses_sequence_parallel_size", "ppo_max_token_len_per_gpu"}
    ppo = kwargs["ppo_max_token_len_per_gpu"]
    assert [loc.line for loc in ppo.locations] == [17] and ppo.values["exception"] == "TypeError"
    assert "AgentJet 0.1.0 (c68c154f)" in ppo.message and "unexpected keyword argument" in ppo.message
    # no bundled release has it: the fix names the config keys of that name, written the way they must be
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu" in ppo.fix
    assert "job.config.actor_rollout_ref['actor']['ppo_max_token_len_per_gpu'] = ..." in ppo.fix
    late = only(r, "write-after-dump")
    assert late.key == "ajet.rollout.temperature" and [loc.line for loc in late.locations] == [28, 27]
    unknown = only(r, "unknown-key")
    assert unknown.key == "ajet.rollout.vllm_tool_parser" and unknown.values["closest"] is None
    assert "closest known key: none" in unknown.message and "typo" not in unknown.message
    assert [w.after_freeze for w in r.constructions[0].writes] == [False, False, True]
    assert r.effective.interchange_method.source == "tcp-switch"


def test_typos_and_broken_groups():
    r = lint(CLIENTS / "typos_client.py")
    assert rules(r) == {"unsupported-kwarg", "unknown-key", "kwarg-group-incomplete", "length-budget", "lora-rules",
                        "batch-not-divisible-by-gpus", "cap-limited-by-batch", "no-total-steps"}
    assert only(r, "unsupported-kwarg").values["closest"] == "num_repeat"
    unknown = {f.key: f for f in r.findings if f.rule == "unknown-key"}
    assert set(unknown) == {"ajet.rollout.temprature", "ajet.rolout", "ajet.rollout.multi_turn.max_steps"}
    assert unknown["ajet.rollout.temprature"].values["closest"] == "ajet.rollout.temperature"
    assert unknown["ajet.rolout"].values["closest"] == "ajet.rollout"
    assert unknown["ajet.rollout.multi_turn.max_steps"].values["access_error"] == "AttributeError"
    assert "['max_steps']" in unknown["ajet.rollout.multi_turn.max_steps"].fix
    # the line that makes the script raise leads the errors (nothing after it runs), whatever its line number
    errors = [f for f in r.findings if f.severity == "error"]
    assert errors[0].key == "ajet.rollout.multi_turn.max_steps", [f.key for f in errors]
    assert any(f.location and int(f.location.rsplit(":", 1)[1]) < int(errors[0].location.rsplit(":", 1)[1])
               for f in errors[1:]), "the order must differ from the line order for this to test it"
    # the sampling temperature the engine gets: the typo'd write reaches no key, so the base config's value holds
    assert r.effective.temperature.key == "ajet.rollout.temperature"
    assert (r.effective.temperature.value, r.effective.temperature.source) == (0.9, "default")  # ajet_default.yaml
    group = only(r, "kwarg-group-incomplete")
    # 18000 is what the config holds, but the given 4000 + 16000 would then fail the length check: raised to fit
    assert group.values["missing"] == ["max_model_len"] and "max_model_len=20000" in group.fix
    assert "at least 20000" in only(r, "length-budget").fix
    lora = only(r, "lora-rules")
    assert lora.key == "ajet.trainer_common.optim.lr"
    assert f"pass lr=0.0001 to AgentJetJob (a kwarg of {agentjet_label(r.agentjet)})" in lora.fix
    batch = only(r, "batch-not-divisible-by-gpus")
    assert batch.values == {"train_batch_size": 9, "num_repeat": 4, "n_gpus_per_node": 8, "nnodes": 1}
    assert "e.g. 10" in batch.fix and [loc.source for loc in batch.locations] == ["kwarg", "default", "default",
                                                                                  "default"]
    budget = only(r, "length-budget")
    assert "20000" in budget.fix and budget.values["max_model_len"] == 18000
    assert r.counts.errors == 8 and r.findings[0].severity == "error"


def test_whole_dict_writes_through_aliases_and_setattr():
    r = lint(CLIENTS / "whole_dict_client.py")
    assert rules(r) == {"no-total-steps", "unknown-key", "escape-hatch-has-kwarg"}
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
    assert r.counts.errors == 0 and r.counts.warnings == 0 and r.findings == [] and r.skipped == []
    assert r.effective.episode_cap.value == 128 and r.effective.max_env_worker.source == "kwarg"
    assert r.constructions[0].variable == "job" and len(r.constructions[0].writes) == 3


def test_yaml_alone_base_not_swarm():
    r = lint(yaml=str(CLIENTS / "not_swarm_base.yaml"))
    assert rules(r) == {"no-total-steps", "base-not-swarm", "logger-needs-key"}  # ajet_default's logger is swanlab
    f = only(r, "base-not-swarm")
    assert f.values["composes_swarm_defaults"] is False
    assert "enable_swarm_mode: true" in f.fix and "do not add ajet_swarm_default" in f.fix
    assert r.effective.enable_swarm_mode.value is False and r.effective.max_env_worker.value == 64
    assert r.constructions == [] and r.yaml_customised == ["ajet.model.path"]


def test_a_key_no_layer_sets_is_shown_as_not_set(tmp_path):
    """A base without AgentJet's layers lacks enable_interchange_server: the message says so in words."""
    r = lint(yaml=str(write(tmp_path, "bare.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n")))
    f = only(r, "base-not-swarm")
    assert f.message.startswith("ajet.enable_interchange_server is not set: the swarm server needs both on")
    assert "object at 0x" not in f.message and f.values["enable_interchange_server"] is None


def test_cap_fixes_on_the_engines_copy_agree_and_name_the_job_the_client_builds(tmp_path):
    """The engine's yaml_backup.yaml of a job with 128 threads, groups of 6 and batch 16: the batch binds, no loop
    waits; the one fix lowers max_env_worker to a multiple whenever it raises the batch, and names the client's job."""
    from skill_server.tools.build_config.tool import BuildConfigInput, build_config

    folder = tmp_path / "saved_experiments" / "math_run"
    folder.mkdir(parents=True)
    dump = build_config(BuildConfigInput(kwargs={"max_env_worker": 128, "num_repeat": 6, "batch_size": 16,
                                                 "experiment_dir": str(folder)})).yaml
    (folder / "yaml_backup.yaml").write_text(dump)
    r = lint(yaml=str(folder / "yaml_backup.yaml"))
    assert "cap-not-divisible" not in rules(r)  # nothing queues: the batch binds
    f = only(r, "cap-limited-by-batch")
    assert "raise train_batch_size to 21" in f.fix and "lower max_env_worker to 126" in f.fix
    assert "or lower max_env_worker to 96" in f.fix and "22" not in f.fix
    assert "in the job the client builds, not in yaml_backup.yaml" in f.fix and " at yaml_backup.yaml" not in f.fix
    assert any("the copy the swarm engine writes at start" in note for note in r.notes)
    # the same job as a client's kwargs: the fix points at the kwargs
    client = write(tmp_path, "client.py", "from ajet.copilot.job import AgentJetJob\n"
                                          "job = AgentJetJob(max_env_worker=128, num_repeat=6, batch_size=16)\n")
    fix = only(lint(client), "cap-limited-by-batch").fix
    assert "change the kwarg batch_size=16 at line 2 to batch_size=21" in fix
    assert "change the kwarg max_env_worker=128 at line 2 to max_env_worker=126" in fix


CLASSIC = """\
ajet:
  project_name: math_agent
  model:
    path: Qwen/Qwen2.5-7B
  rollout:
    user_workflow: "tutorial.example_math_agent.math_agent->ExampleMathLearn"
    max_env_worker: 64
    num_repeat: 6
  data:
    train_batch_size: 100
trinity:
  synchronizer:
    sync_offset: 1
hydra:
  searchpath:
    - file://ajet/default_config
    - file://ajet/default_config/verl
    - file://ajet/default_config/trinity
defaults:
  - verl_default
  - trinity_default
  - ajet_default
  - _self_
"""


def test_a_classic_mode_config_is_not_linted_as_an_agentjetjob_base(tmp_path):
    """A config for `python -m ajet.launcher --conf`: composed as the launcher composes it (backbone verl), no
    AgentJetJob refusal and no swarm-engine check; the trainer's own checks still run."""
    r = lint(yaml=str(write(tmp_path, "math_agent.yaml", CLASSIC)))
    assert rules(r) == {"no-total-steps", "logger-needs-key"}  # ajet_default's swanlab: the launcher checks its key
    assert "ajet --conf" in only(r, "logger-needs-key").message
    swarm_only = ("episode_cap", "engine_cap", "client_parallelism", "max_inference_tracker_threads",
                  "swarm_mode_sample_collection_method", "interchange_method")
    assert all(getattr(r.effective, name) is None for name in swarm_only)  # a classic config has none of them
    compact = lint(yaml=str(tmp_path / "math_agent.yaml"), detail="compact")
    assert not set(swarm_only) & set(compact.values or {})
    assert (r.effective.num_repeat.value, r.effective.max_env_worker.value) == (6, 64)  # composed, not refused
    reasons = skipped(r)
    for rule_id in ("base-not-swarm", "cap-not-divisible", "tracker-threads-below-cap", "interchange-not-tcp"):
        assert "classic-mode config" in reasons[rule_id][0]
    assert "batch-not-divisible-by-gpus" not in reasons and "samples-below-world-size" not in reasons
    assert any("classic-mode config" in note and "ajet.launcher --conf math_agent.yaml" in note for note in r.notes)
    assert not any("trinity" in note for note in r.notes)
    # without defaults and hydra blocks: still no base refusal (AgentJetJob never reads it)
    bare = lint(yaml=str(write(tmp_path, "bare.yaml", "ajet:\n  enable_swarm_mode: false\n  rollout:\n"
                                                      "    max_env_worker: 10\n    num_repeat: 4\n")))
    assert rules(bare) == {"no-total-steps"} and "cap-not-divisible" in skipped(bare)
    # the same file with swarm mode turned on is a swarm base again, and gets the swarm checks
    swarm = lint(yaml=str(write(tmp_path, "swarm.yaml", "ajet:\n  enable_swarm_mode: true\n  rollout:\n"
                                                        "    user_workflow: a.b->C\n    max_env_worker: 10\n"
                                                        "    num_repeat: 4\n")))
    assert {"agentjet-refusal", "cap-not-divisible"} <= rules(swarm)


def test_env_defaults_and_imported_constants():
    """os.getenv defaults and constants of a module next to the script; a str nnodes is refused."""
    r = lint(CLIENTS / "env_defaults" / "math_client.py")
    assert rules(r) == {"no-total-steps", "agentjet-refusal", "cap-limited-by-batch"}
    kwargs = {k.name: k for k in r.constructions[0].kwargs}
    assert (kwargs["batch_size"].value, kwargs["batch_size"].how) == (16, "env-default")
    assert (kwargs["num_repeat"].value, kwargs["num_repeat"].how) == (4, "imported constant")
    assert (kwargs["max_env_worker"].value, kwargs["max_env_worker"].how) == (128, "imported constant")
    assert kwargs["model"].value == "/mnt/models/Qwen2.5-7B-Instruct"
    assert (kwargs["experiment_name"].value, kwargs["experiment_name"].how) == ("math_env", "env-default")
    e = r.effective
    assert (e.train_batch_size.value, e.train_batch_size.source, e.train_batch_size.set_by) == (16, "env-default",
                                                                                              "kwarg")
    assert "MATH_BATCH" in e.train_batch_size.assumes[0]
    assert e.nnodes.value == "1" and e.nnodes.source == "env-default" and "a str" in e.nnodes.note
    refusal = only(r, "agentjet-refusal")
    assert refusal.values["cause"] == "nnodes-not-a-number" and refusal.values["exception"] == "TypeError"
    assert where(refusal) == [("math_client.py", 20)] and "int(" in refusal.fix
    assert "AgentJet" in refusal.message and "TypeError" in refusal.message
    assert skipped(r)["batch-not-divisible-by-gpus"] == [
        "nnodes is '1' (a str), not a positive int (an environment default is a str at run time unless the script "
        "converts it)"]
    assert e.episode_cap.value == 64 and "MATH_BATCH" in e.episode_cap.assumes[0]
    written = {w.key: w for w in r.constructions[0].writes}
    assert written["ajet.rollout.temperature"].value == 0.8


def test_argparse_defaults_through_a_parse_function():
    r = lint(CLIENTS / "argparse_client" / "train_math.py")
    e = r.effective
    assert (e.train_batch_size.value, e.train_batch_size.source) == (16, "cli-default")
    assert "--batch-size" in e.train_batch_size.assumes[0]
    assert e.num_repeat.value == 8  # default="8" goes through type=int, as argparse does
    assert (e.max_env_worker.value, e.max_env_worker.source) == (128, "cli-default")  # dest= of a group option
    assert "--workers" in e.max_env_worker.assumes[0]
    assert e.nnodes.value is None and "--nnodes is required" in e.nnodes.unresolved
    assert e.interchange_method.value is None and "nnodes is unknown" in e.interchange_method.unresolved
    assert e.max_model_len.value == 8192 and e.max_model_len.source == "kwarg"  # a dataclass default: arithmetic
    assert e.episode_cap.value == 128 and len(e.episode_cap.assumes) == 3
    assert set(skipped(r)) == {"batch-not-divisible-by-gpus", "samples-below-world-size", "interchange-not-tcp",
                               "agentjet-refusal"}
    assert rules(r) == {"no-total-steps"}


def test_unresolved_nnodes_skips_what_depends_on_it():
    r = lint(CLIENTS / "unresolved_nnodes.py")
    e = r.effective
    assert e.nnodes.value is None and "SLURM_NNODES" in e.nnodes.unresolved
    assert e.interchange_method.value is None and e.interchange_method.unresolved.startswith(
        "AgentJetJob switches it to tcp when nnodes > 1")
    assert "ajet.trainer_common.nnodes" in e.unresolved
    skips = skipped(r)
    for rule in ("batch-not-divisible-by-gpus", "samples-below-world-size", "interchange-not-tcp"):
        assert any("nnodes is unknown" in reason and "SLURM_NNODES" in reason for reason in skips[rule]), rule
    assert rules(r) == {"no-total-steps"} and r.counts.skipped == len(r.skipped)


def test_small_batch_on_two_nodes():
    r = lint(CLIENTS / "multinode_small_batch.py")
    assert rules(r) == {"no-total-steps", "batch-not-divisible-by-gpus", "samples-below-world-size"}
    f = only(r, "samples-below-world-size")
    assert f.severity == "warning"
    assert "2 x 4 = 8 samples per step" in f.message and "8 x 2 = 16 GPUs" in f.message
    assert "8 % 16 = 8 samples every step" in f.message
    assert f.values["samples_per_step"] == 8 and f.values["world_size"] == 16
    assert [loc.line for loc in f.locations] == [11, 12, 9, 10] and "batch_size=4" in f.fix
    assert r.effective.nnodes.source == "env-default" and r.effective.interchange_method.value == "tcp"


def test_yaml_first_with_a_run_time_kwarg_cannot_be_consolidated():
    r = lint(CLIENTS / "yaml_first_dynamic" / "roll.py")
    assert rules(r) == {"no-total-steps", "split-configuration", "unsupported-kwarg", "logger-needs-key"}
    split = only(r, "split-configuration")
    assert split.values["build_config_arguments"] is None
    assert split.values["build_config_missing"] == [
        "kwarg max_env_worker (line 12): int(sys.argv[1]): a command-line argument (sys.argv), known only at run "
        "time"]
    assert split.values["build_config_left_out"] == [
        f"kwarg num_repeats (line 13): not a kwarg of {agentjet_label(r.agentjet)}"]
    assert "cannot consolidate" in split.fix
    assert r.effective.max_env_worker.value is None and "sys.argv" in r.effective.max_env_worker.unresolved
    assert r.effective.num_repeat.value == 4 and r.effective.num_repeat.source == "yaml"
    assert {s for s in skipped(r)} == {"cap-not-divisible", "cap-limited-by-batch", "tracker-threads-below-cap"}


def test_missing_relative_base_without_cwd_lists_candidates():
    script = CLIENTS / "missing_base" / "tutorial" / "agent_roll.py"
    r = lint(script)
    f = only(r, "base-yaml-missing")
    assert rules(r) == {"base-yaml-missing"} and f.severity == "error"
    assert f.values["launch_dir_known"] is False and f.values["anchor"] == "cwd"
    assert f.values["tried"][:2] == [str(script.parent / "tutorial" / "game.yaml"),
                                     str(script.parent.parent / "tutorial" / "game.yaml")]
    assert "launch directory, which is not known" in f.message and "pass cwd=" in f.fix
    assert where(f) == [("agent_roll.py", 7)]
    e = r.effective
    assert e.num_repeat.value is None and e.num_repeat.source == "yaml" and "not found" in e.num_repeat.unresolved
    assert e.max_env_worker.value == 96  # the kwarg is known whatever the base holds
    assert "(base YAML)" in e.unresolved
    assert "cap-not-divisible" in skipped(r) and "base-not-swarm" in skipped(r)
    info = r.constructions[0].base_yaml
    assert (info.state, info.exists, info.launch_dir_known) == ("missing", False, False)


def test_missing_relative_base_with_cwd_names_the_one_path(tmp_path):
    script = CLIENTS / "missing_base" / "tutorial" / "agent_roll.py"
    r = lint(script, cwd=str(tmp_path))
    f = only(r, "base-yaml-missing")
    assert f.values["tried"] == [str(tmp_path / "tutorial" / "game.yaml")] and f.values["launch_dir_known"] is True
    assert "does not exist" in f.message and "Configuration yaml is absent" in f.message
    # the same client, launched from the folder that holds tutorial/game.yaml
    write(tmp_path, "tutorial/game.yaml", "ajet:\n  rollout:\n    num_repeat: 4\n", SWARM_TAIL)
    r = lint(script, cwd=str(tmp_path))
    assert "base-yaml-missing" not in rules(r) and r.effective.num_repeat.value == 4
    assert r.effective.num_repeat.location.file == str(tmp_path / "tutorial" / "game.yaml")


def test_missing_base_built_from_file():
    r = lint(CLIENTS / "missing_base" / "tutorial" / "here_client.py")
    f = only(r, "base-yaml-missing")
    path = str(CLIENTS / "missing_base" / "tutorial" / "game_v2.yaml")
    assert f.values["tried"] == [path] and f.values["anchor"] == "script_dir" and path in f.message
    assert r.effective.num_repeat.value == 4 and r.effective.max_env_worker.value is None


def test_relative_base_found_from_a_candidate_folder_says_so():
    script = CLIENTS / "relative_base" / "tutorial" / "launch_from_root.py"
    r = lint(script)
    # experiment_name next to a YAML-first job is not a split
    assert rules(r) - {"logger-needs-key"} == {"no-total-steps"}
    assert r.constructions[0].base_yaml.launch_dir_known is False
    assert any("started from" in n and str(CLIENTS / "relative_base") in n for n in r.notes)
    assert r.effective.max_env_worker.value == 128 and r.effective.max_env_worker.source == "yaml"
    r = lint(script, cwd=str(CLIENTS / "relative_base"))
    assert r.constructions[0].base_yaml.launch_dir_known is True and r.constructions[0].base_yaml.tried == [
        str(CLIENTS / "relative_base" / "configs" / "game.yaml")]


# --- bad inputs --------------------------------------------------------------------------------------


def test_bad_inputs_are_clear_errors(tmp_path):
    bad = write(tmp_path, "bad.py", "from ajet.copilot.job import AgentJetJob\njob = AgentJetJob(\n"
                                    "  num_repeat=4,,\n)\n")
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
    with pytest.raises(ToolInputError) as info:
        lint(CLIENTS / "clean_client.py", cwd=str(tmp_path / "nowhere"))
    assert info.value.field == "cwd" and str(tmp_path / "nowhere") in str(info.value)
    with pytest.raises(ToolInputError) as info:
        lint(CLIENTS / "clean_client.py", cwd=str(bad))
    assert info.value.field == "cwd" and "not a directory" in str(info.value)
    spec = get_tool("check_config")
    with pytest.raises(ToolInputError, match="give script"):
        spec.validate({})
    with pytest.raises(ToolInputError) as info:
        spec.validate({"script": "x.py", "scripts": "y"})
    assert info.value.field == "scripts"
    with pytest.raises(ToolInputError) as info:
        spec.validate({"script": 3})
    assert info.value.field == "script"


def test_relative_paths_resolve_against_cwd(tmp_path):
    write(tmp_path, "client.py", "from ajet.copilot.job import AgentJetJob\njob = AgentJetJob(num_repeat=8)\n")
    r = lint("client.py", cwd=str(tmp_path))
    assert r.effective.num_repeat.value == 8 and r.effective.num_repeat.location.file == str(tmp_path / "client.py")
    with pytest.raises(ToolInputError) as info:
        lint("client.py", cwd=str(tmp_path / ".."))
    assert str(tmp_path.parent / "client.py") in str(info.value)


def test_unsupported_kwarg_for_an_older_install(tmp_path):
    root = old_install(tmp_path / "old")
    script = write(tmp_path, "client.py", """\
        from ajet.copilot.job import AgentJetJob
        job = AgentJetJob(num_repeat=4, nnodes=1)
        """)
    r = lint(script, agentjet_root=str(root))
    f = only(r, "unsupported-kwarg")
    assert f.key == "ajet.trainer_common.nnodes" and "0.0.2" in f.message and "TypeError" in f.message
    assert r.agentjet.source == "install" and r.agentjet.version == "0.0.2" and r.agentjet.path == str(root)
    # the old version's own layers are on disk: an input nobody sets is located at its default line
    cap_inputs = r.effective.max_env_worker
    assert cap_inputs.source == "default" and cap_inputs.location.file.endswith("ajet_swarm_default.yaml")
    assert cap_inputs.location.line is not None


# --- front ends ---------------------------------------------------------------------------------------


def test_cli_call():
    code, out, err = call_cli("check_config", {"script": str(CLIENTS / "werewolves" / "agent_roll.py")})
    assert code == 0, err
    assert out["counts"] == {"errors": 0, "warnings": 4, "infos": 0, "skipped": 0}
    code, out, err = call_cli("check_config", {"script": str(CLIENTS / "nope.py")})
    assert code == 1 and out is None and "script: file not found" in err and err.count("\n") == 1
    code, out, err = call_cli("check_config", {"script": str(CLIENTS / "clean_client.py"), "cwd": "/nonexistent/x"})
    assert code == 1 and "cwd: directory not found" in err and err.count("\n") == 1


@pytest.mark.anyio
async def test_mcp_in_process():
    from mcp import Client

    from skill_server.app.mcp_server import build_server

    async with Client(build_server()) as client:
        r = await client.call_tool("check_config", {"script": str(CLIENTS / "e2b_dump_then_write.py")})
        assert not r.is_error
        assert {f["rule"] for f in r.structured_content["findings"]} == {"unknown-key", "write-after-dump",
                                                                         "unsupported-kwarg", "no-total-steps"}
        assert r.structured_content["agentjet"]["version"] == "0.1.0"
        r = await client.call_tool("check_config", {"script": str(CLIENTS / "e2b_dump_then_write.py"),
                                                    "agentjet_version": "0.0.1"})
        assert r.is_error and "agentjet_version" in r.content[0].text and "0.1.0" in r.content[0].text
        r = await client.call_tool("check_config", {"script": str(CLIENTS / "unresolved_nnodes.py")})
        compact = r.structured_content  # the default view: values by name, and why the unknown ones are unknown
        assert compact["values"]["nnodes"] is None and "NNODES" in compact["unknown"]["nnodes"]
        assert "effective" not in compact and "constructions" not in compact
        r = await client.call_tool("check_config", {"script": str(CLIENTS / "unresolved_nnodes.py"), "detail": "full"})
        assert r.structured_content["effective"]["nnodes"]["value"] is None
        assert {s["rule"] for s in r.structured_content["skipped"]} >= {"interchange-not-tcp"}
        r = await client.call_tool("check_config", {})
        assert r.is_error and "give script" in r.content[0].text
