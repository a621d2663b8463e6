"""check_config and the versioned AgentJet knowledge: which AgentJet it describes, bases composed exactly as
build_config composes them, and AgentJet's refusals as findings (the same causes build_config raises)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from skill_server.agentjet.compose import default_base
from skill_server.agentjet.identity import agentjet_label
from skill_server.agentjet.job import refusal_for
from skill_server.agentjet.release import select_agentjet
from skill_server.core.errors import ToolInputError
from tests.agentjet_fixtures import goldens, write_reference_checkout
from tests.conftest import call_cli
from tests.lint_helpers import CLIENTS, LAYERS_TAIL, SWARM_TAIL, lint, old_install, rules, skipped, write

HEAD = "import os\nfrom ajet.copilot.job import AgentJetJob\n"
CAUSE_RULES = ("agentjet-refusal", "unsupported-kwarg", "kwarg-group-incomplete", "length-budget", "lora-rules")


def client(tmp_path, kwargs: dict) -> object:
    """A client passing ``kwargs`` as literals, linted against the newest bundled release."""
    call = ", ".join(f"{name}={value!r}" for name, value in kwargs.items())
    return lint(write(tmp_path, "client.py", HEAD + f"job = AgentJetJob({call})\n"))


def cause_findings(result) -> list:
    return [f for f in result.findings if f.rule in CAUSE_RULES]


# --- which AgentJet -------------------------------------------------------------------------------------


def test_agentjet_version_selects_a_bundled_release_by_version_or_commit():
    newest = lint(CLIENTS / "clean_client.py").agentjet
    for wanted in ("0.1.0", "v0.1.0", "c68c154f", "C68C"):
        assert lint(CLIENTS / "clean_client.py", agentjet_version=wanted).agentjet == newest
    with pytest.raises(ToolInputError) as info:
        lint(CLIENTS / "clean_client.py", agentjet_version="0.0.1")
    assert info.value.field == "agentjet_version" and "0.1.0 (c68c154f" in str(info.value)


def test_cli_names_the_version_argument_it_refuses():
    code, out, err = call_cli("check_config", {"script": str(CLIENTS / "clean_client.py"), "agentjet_version": "9"})
    assert code == 1 and out is None and "agentjet_version: AgentJet '9' is not bundled" in err
    assert err.count("\n") == 1
    code, out, err = call_cli("check_config", {"script": str(CLIENTS / "clean_client.py"), "agentjet_version": 9})
    assert code == 1 and "agentjet_version" in err


def test_an_install_given_relative_to_cwd_is_read_and_named(tmp_path):
    root = write_reference_checkout(tmp_path / "AgentJet", version="0.1.1")
    write(tmp_path, "client.py", HEAD + "job = AgentJetJob(num_repeat=4, n_gpu='8')\n")
    r = lint("client.py", cwd=str(tmp_path), agentjet_root="AgentJet")
    assert (r.agentjet.source, r.agentjet.version, r.agentjet.path) == ("install", "0.1.1", str(root))
    # a value nobody sets is located in the install's own default layer, at its line
    e = r.effective.max_env_worker
    assert e.source == "default" and e.location.file == str(root / "ajet/default_config/ajet_swarm_default.yaml")
    assert e.location.line is not None
    with pytest.raises(ToolInputError) as info:
        lint("client.py", cwd=str(tmp_path), agentjet_root="AgentJet", agentjet_version="0.1.0")
    assert info.value.field == "agentjet_version" and "0.1.1" in str(info.value)


def test_an_install_without_swarm_support_is_refused_not_mixed(tmp_path):
    root = write_reference_checkout(tmp_path / "old", version="0.0.1", swarm_default=False)
    with pytest.raises(ToolInputError) as info:
        lint(CLIENTS / "clean_client.py", agentjet_root=str(root))
    assert info.value.field == "agentjet_root" and "no swarm support" in str(info.value)


def test_a_kwarg_an_older_install_lacks_names_the_release_that_has_it(tmp_path):
    root = old_install(tmp_path / "old")
    script = write(tmp_path, "client.py", HEAD + "job = AgentJetJob(num_repeat=4, nnodes=2, swarm_modes=True)\n")
    r = lint(script, agentjet_root=str(root))
    found = {f.values["kwarg"]: f for f in r.findings if f.rule == "unsupported-kwarg"}
    assert set(found) == {"nnodes", "swarm_modes"}
    nnodes = found["nnodes"]
    assert nnodes.key == "ajet.trainer_common.nnodes" and nnodes.values["agentjet_with_kwarg"] == \
        "AgentJet 0.1.0 (c68c154f)"
    assert agentjet_label(r.agentjet) in nnodes.message and "unexpected keyword argument 'nnodes'" in nnodes.message
    assert "job.config.ajet.trainer_common.nnodes = ..." in nnodes.fix and "select AgentJet 0.1.0 (c68c154f)" in \
        nnodes.fix
    assert found["swarm_modes"].values["closest"] is None and "valid kwargs: base_yaml_config" in \
        found["swarm_modes"].fix


# --- bases composed exactly as build_config composes them ------------------------------------------------


LAYER_ENTRY = ("hydra:\n  searchpath:\n    - file://ajet/default_config\n    - file://ajet/default_config/verl\n"
               "    - file://team_layers\ndefaults:\n  - verl_default\n  - ajet_default\n  - shared\n  - _self_\n")


def test_relative_search_path_folders_resolve_against_cwd(tmp_path):
    launch = tmp_path / "launch"
    write(launch, "team_layers/shared.yaml", "ajet:\n  rollout:\n    num_repeat: 8\n    max_env_worker: 64\n")
    write(launch, "base.yaml", "ajet:\n  enable_swarm_mode: true\n  enable_interchange_server: true\n" + LAYER_ENTRY)
    r = lint(yaml=str(launch / "base.yaml"), cwd=str(launch))
    assert rules(r) - {"logger-needs-key"} == {"no-total-steps"} and r.effective.num_repeat.value == 8
    # the team layer is the user's file: its values have source yaml, located at their line there
    assert (r.effective.num_repeat.source, r.effective.num_repeat.location.file,
            r.effective.num_repeat.location.line) == ("yaml", str(launch / "team_layers/shared.yaml"), 3)
    # the same base linted from elsewhere (no cwd): Hydra does not find the layer, and the note says why
    r = lint(yaml=str(launch / "base.yaml"))
    refusal = next(f for f in r.findings if f.rule == "agentjet-refusal")
    assert refusal.values["cause"] == "defaults-entry-missing"
    assert refusal.values["exception"] == "MissingConfigException"
    assert refusal.values["exception_message"] == "In 'tmp….yaml': Could not load 'shared'."
    assert any("file://team_layers" in note and "pass cwd=" in note for note in r.notes)
    assert r.effective.num_repeat.value is None and "refuses to compose" in r.effective.num_repeat.unresolved


def test_a_base_is_composed_as_build_config_composes_it(tmp_path):
    """The same base through both tools: every value build_config dumps is what check_config reports."""
    import yaml

    from skill_server.tools.build_config.tool import BuildConfigInput, build_config

    base = write(tmp_path, "base.yaml", "ajet:\n  rollout:\n    num_repeat: 6\n    max_env_worker: 96\n"
                                        "  trainer_common:\n    optim:\n      lr: 3e-6\n    nnodes: 2\n"
                                        "  experiment_name: 2026-05-26\n" + SWARM_TAIL)
    dumped = yaml.safe_load(build_config(BuildConfigInput(base_yaml=str(base))).yaml)["ajet"]
    e = lint(yaml=str(base)).effective
    assert e.lr.value == dumped["trainer_common"]["optim"]["lr"] == 3e-06  # OmegaConf reads 3e-6 as a float
    assert e.experiment_name.value == dumped["experiment_name"] == "2026-05-26"  # ... and a date as a string
    assert (e.num_repeat.value, e.max_env_worker.value) == (dumped["rollout"]["num_repeat"],
                                                           dumped["rollout"]["max_env_worker"])
    assert e.interchange_method.value == dumped["interchange_server"]["interchange_method"] == "tcp"
    assert e.logger.value == dumped["trainer_common"]["logger"]


def test_a_base_inside_the_checkout_stays_the_users_yaml(tmp_path):
    """AgentJet's tutorials keep their bases in ``tutorial/<x>/``: only ``ajet/default_config/`` is AgentJet's."""
    root = write_reference_checkout(tmp_path / "AgentJet")
    tutorial = root / "tutorial" / "example_werewolves_swarm"
    tutorial.mkdir(parents=True)
    for name in ("agent_roll.py", "werewolves.yaml"):
        shutil.copyfile(CLIENTS / "werewolves" / name, tutorial / name)
    bundled = lint(tutorial / "agent_roll.py")
    installed = lint(tutorial / "agent_roll.py", agentjet_root=str(root))
    assert installed.agentjet.source == "install"
    assert installed.yaml_customised == bundled.yaml_customised != []
    assert [(f.rule, f.key) for f in installed.findings] == [(f.rule, f.key) for f in bundled.findings]
    assert "kwarg-overrides-yaml" in rules(installed) and "split-configuration" in rules(installed)
    repeat = installed.effective.num_repeat
    assert (repeat.source, repeat.location.file, repeat.location.line) == (
        "yaml", str(tutorial / "werewolves.yaml"), 13)
    files = {Path(loc.file).name for f in installed.findings for loc in f.locations if loc.file}
    assert "ajet_swarm_default.yaml" not in files  # every value the tutorial's YAML sets is located there


# --- refusals: the same causes as build_config, on partially known values -----------------------------------


ERROR_GOLDENS = [c for c in goldens() if c.get("expect_error") and c["base_yaml"] is None]


@pytest.mark.parametrize("case", ERROR_GOLDENS, ids=[c["id"] for c in ERROR_GOLDENS])
def test_golden_refusals_of_kwargs_are_findings(tmp_path, case):
    """Real AgentJetJob runs at c68c154f that raise: the linter reports that exception, type and message."""
    r = client(tmp_path, case["kwargs"])
    expected = case["expect_error"]
    assert any((f.values["exception"], f.values["exception_message"]) == (expected["type"], expected["message"])
               for f in cause_findings(r)), [(f.rule, f.message) for f in r.findings]


SUCCESS_GOLDENS = [c for c in goldens() if c.get("expect_file") and c["base_yaml"] is None]


@pytest.mark.parametrize("case", SUCCESS_GOLDENS, ids=[c["id"] for c in SUCCESS_GOLDENS])
def test_kwargs_real_agentjet_accepts_are_not_refused(tmp_path, case):
    r = client(tmp_path, case["kwargs"])
    assert cause_findings(r) == [], [f.message for f in cause_findings(r)]


@pytest.mark.parametrize("kwargs", [
    {"nnodes": "2"}, {"nnodes": [2]}, {"backbone": "trinity"}, {"lora_rank": "8"}, {"lora_rank": 8, "lr": None},
    {"lora_rank": 4, "lora_load_format": "safetensors", "layered_summon": True, "lr": "1e-4"},
    {"max_prompt_length": "500", "max_response_length": 2000, "max_model_len": 3000,
     "max_response_length_in_one_turn": 300},
    {"max_prompt_length": "500", "max_response_length": "2000", "max_model_len": "9000",
     "max_response_length_in_one_turn": "300"},
    {"num_repeats": 4}, {"max_model_len": 1000},
])
def test_the_first_cause_build_config_refuses_with_is_a_finding(tmp_path, kwargs):
    release = select_agentjet()
    expected = refusal_for(release, default_base(release), kwargs)
    assert expected is not None
    found = {(f.values["cause"], f.values["exception"], f.values["exception_message"]) for f in
             cause_findings(client(tmp_path, kwargs))}
    assert (expected.id, expected.exception, expected.exception_message) in found


def test_every_cause_is_reported_at_once(tmp_path):
    r = client(tmp_path, {"lora_rank": 8, "lr": 1e-6, "max_prompt_length": 3000, "max_response_length": 15000,
                          "max_model_len": 12000, "max_response_length_in_one_turn": 16000, "nnodes": "1"})
    causes = {f.values["cause"] for f in cause_findings(r)}
    # AgentJet stops at the first of these (token-budget); the linter lists them all, each once
    assert causes == {"token-budget", "one-turn-over-response", "lora-load-format", "lora-layered-summon",
                      "lora-lr-too-low", "nnodes-not-a-number"}
    assert len(cause_findings(r)) == len(causes)


def test_a_check_that_reads_an_unknown_value_is_skipped_not_guessed(tmp_path):
    script = write(tmp_path, "client.py", HEAD + "job = AgentJetJob(nnodes=int(os.environ['NODES']), "
                   "lora_rank=int(os.environ['RANK']), max_prompt_length=int(os.environ['P']), "
                   "max_response_length=900, "
                   "max_model_len=1000, max_response_length_in_one_turn=2000)\n")
    r = lint(script)
    # the one-turn check reads only known values: reported; the others are skipped with what they wait for
    assert {f.values["cause"] for f in cause_findings(r)} == {"one-turn-over-response"}
    skips = skipped(r)
    assert any("max_prompt_length" in why and "environment variable P" in why for why in skips["length-budget"])
    assert any("lora_rank" in why and "RANK" in why for why in skips["lora-rules"])
    assert any("nnodes" in why and "NODES" in why for why in skips["agentjet-refusal"])


def test_a_splat_leaves_kwarg_names_and_the_length_group_unknown(tmp_path):
    script = write(tmp_path, "client.py", HEAD + "extra = {k: v for k, v in os.environ.items()}\n"
                                                 "job = AgentJetJob(**extra, max_prompt_length=1000)\n")
    r = lint(script)
    assert not {"unsupported-kwarg", "kwarg-group-incomplete"} & rules(r)
    skips = skipped(r)
    assert skips["unsupported-kwarg"] == ["**extra at line 4 may pass kwargs whose names are known only at run time"]
    assert skips["kwarg-group-incomplete"] == ["**extra at line 4 may pass the other length kwargs"]


def test_a_base_without_ajet_default_misses_a_key_agentjet_reads(tmp_path):
    base = write(tmp_path, "base.yaml", "ajet:\n  enable_swarm_mode: true\n  enable_interchange_server: true\n"
                 + LAYERS_TAIL.replace("  - ajet_default\n", ""))
    r = lint(yaml=str(base))
    f = next(f for f in r.findings if f.rule == "agentjet-refusal")
    assert (f.values["cause"], f.values["exception"]) == ("missing-key", "AttributeError")
    assert f.values["exception_message"] == "'AjetTrainerCommon' object has no attribute 'logger'"  # fact sheet
    assert "ajet_default" in f.fix
