"""build_config against real AgentJetJob runs (the goldens) and, beyond them, against the stand-in oracle.

The goldens (the c68c154 reference in tests/fixtures/agentjet-reference/) are verbatim dumps and exceptions of
AgentJet's own code at c68c154f. Every success case must come out byte for byte, from the bundled release
and from an install read statically; every error case must be refused with AgentJet's exception.

Cases the goldens do not cover are checked against ``tests.agentjet_fixtures.reference_dump``: a stand-in
AgentJetJob written from the fact sheet that runs real Hydra, OmegaConf and dataclasses. It is trusted
only because it reproduces every golden first (``test_standin_reproduces_every_golden``).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from skill_server.agentjet.refusals import AgentJetRefusal
from skill_server.tools.build_config.tool import BuildConfigInput, build_config
from tests.agentjet_fixtures import GOLDENS, TAIL, dedent, goldens, reference_dump, write_reference_checkout

CASES = goldens()
SUCCESS = [c for c in CASES if "expect_file" in c]
ERRORS = [c for c in CASES if "expect_error" in c]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_reference_checkout(tmp_path_factory.mktemp("ref") / "AgentJet")


def run_tool(case: dict[str, Any], **extra: Any):
    args: dict[str, Any] = {"kwargs": case["kwargs"], "set": case["writes"] or None, **extra}
    if case["base_yaml"]:
        args["base_yaml"] = str(GOLDENS / case["base_yaml"])
    return build_config(BuildConfigInput(**args))


def run_standin(checkout: Path, kwargs: dict[str, Any], base: str | None = None,
                writes: dict[str, Any] | None = None) -> tuple[str | None, BaseException | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Hydra warns about _self_ and version_base
        try:
            return reference_dump(checkout, kwargs, base, writes), None
        except Exception as exc:  # the stand-in raises what AgentJet raises
            return None, exc


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_standin_reproduces_every_golden(checkout, case):
    base = str(GOLDENS / case["base_yaml"]) if case["base_yaml"] else None
    text, error = run_standin(checkout, case["kwargs"], base, case["writes"])
    if "expect_file" in case:
        assert error is None and text == (GOLDENS / case["expect_file"]).read_text()
    else:
        assert type(error).__name__ == case["expect_error"]["type"]
        assert _first_line(error) == case["expect_error"]["message"]


@pytest.mark.parametrize("case", SUCCESS, ids=[c["id"] for c in SUCCESS])
def test_bundled_release_dumps_byte_for_byte(case):
    result = run_tool(case)
    assert result.yaml == (GOLDENS / case["expect_file"]).read_text()
    assert (result.agentjet.source, result.agentjet.version, result.agentjet.commit[:8]) == ("bundled", "0.1.0",
                                                                                            "c68c154f")


@pytest.mark.parametrize("case", SUCCESS, ids=[c["id"] for c in SUCCESS])
def test_install_dumps_byte_for_byte(checkout, case):
    result = run_tool(case, agentjet_root=str(checkout))
    assert result.yaml == (GOLDENS / case["expect_file"]).read_text()
    assert result.agentjet.source == "install" and result.agentjet.path == str(checkout.resolve())
    assert all(layer.startswith(str(checkout.resolve())) or layer.startswith(str(GOLDENS))
               for layer in result.layers)


@pytest.mark.parametrize("case", ERRORS, ids=[c["id"] for c in ERRORS])
def test_agentjet_refusals_with_the_cause(checkout, case):
    for extra in ({}, {"agentjet_root": str(checkout)}):
        with pytest.raises(AgentJetRefusal) as info:
            run_tool(case, **extra)
        cause = info.value.cause
        assert (cause.exception, cause.exception_message) == (case["expect_error"]["type"],
                                                              case["expect_error"]["message"])
        message = str(info.value)
        assert "\n" not in message and "AgentJet 0.1.0" in message and cause.exception in message
        assert info.value.field and info.value.field in message
    assert cause.field == {"G_S6a": "kwargs.max_response_length", "G_S6b": "kwargs.max_model_len",
                           "G_S6c": "kwargs.lora_load_format", "G_S6d": "kwargs.layered_summon",
                           "G_S6e": "kwargs.lr", "G_S6f": "kwargs.max_response_length_in_one_turn",
                           "N5c_ulysses": "kwargs.ulysses_sequence_parallel_size"}.get(case["id"], "base_yaml")


def test_refusal_words_name_the_cause():
    by_id = {c["id"]: c for c in ERRORS}
    texts = {}
    for cid in ("G_S6f", "N5c_ulysses", "N9_base_then_kwargs", "N11_no_defaults", "N23_nnodes_str"):
        with pytest.raises(AgentJetRefusal) as info:
            run_tool(by_id[cid])
        texts[cid] = str(info.value)
    assert "max_response_length_in_one_turn <= max_response_length failed: 12000 <= 10000" in texts["G_S6f"]
    assert "with an empty message" in texts["G_S6f"]
    assert "closest known kwarg: tensor_model_parallel_size" in texts["N5c_ulysses"]
    assert "includes 'ajet_swarm_default'" in texts["N9_base_then_kwargs"]
    assert "no 'defaults' block" in texts["N11_no_defaults"]
    assert "nnodes is '2' (str)" in texts["N23_nnodes_str"]


# --- beyond the goldens: the stand-in is the oracle ------------------------------------------------------

ORACLE_SUCCESS = {
    "base-only keys sort after layer keys, at every depth": (dedent("""
        zeta_top: 1
        alpha_top: {b: 1, a: 2}
        trainer: {zz_new: 1, aa_new: 2, total_epochs: 7}
        ajet:
          enable_swarm_mode: true
          my_section: {y: 1, x: 2}
          rollout: {zzz: 1, aaa: 2, num_repeat: 6}
          trainer_common: {logger: swanlab}
        """) + TAIL, {}, {}),
    "OmegaConf scalar typing of base values": (dedent("""
        ajet:
          trainer_common:
            optim: {lr: 3e-6}
          notes:
            when: 2026-05-26
            stamp: 2026-05-26 10:30:00
            big: 1.0e5
            quoted_exp: "7e-3"
            quoted_true: "true"
            plain: 1_000
            inf: .inf
            interp: ${ajet.rollout.num_repeat}
        """) + TAIL, {}, {}),
    "_self_ first: the layers override the base": (dedent("""
        ajet:
          rollout: {num_repeat: 6, only_here: 1}
          trainer_common: {logger: swanlab}
        hydra:
          searchpath:
          - file://ajet/default_config
          - file://ajet/default_config/verl
        defaults:
        - _self_
        - verl_default
        - ajet_default
        """), {}, {}),
    "hydra before defaults in the base: dump order stays defaults, hydra": (dedent("""
        defaults: [verl_default, ajet_default, _self_]
        hydra:
          searchpath: [file://ajet/default_config, file://ajet/default_config/verl]
        ajet: {experiment_name: order}
        """), {}, {}),
    "a null and a list replace mappings; ??? keeps the value": (dedent("""
        ajet:
          rollout: {multi_turn: null, val_kwargs: null}
          project_name: "???"
          task_judge: {rubrics_auto_grader: ~}
        """) + TAIL, {}, {}),
    "kwargs pass through untyped; writes replace sections and append keys": (None, {
        "num_repeat": "6", "lr": 4.0, "n_gpu": True, "nnodes": 2, "swarm_mode": False,
        "compute_madness_checklist": [], "experiment_name": "a|b c/d\n"}, {
        "ajet.interchange_server": {"interchange_method": "ipc"}, "ajet.rollout.multi_turn.brand_new": [1],
        "trainer.logger": "console", "zz_top": {"b": 1, "a": 2}, "ajet.trainer_common.optim.lr": 3}),
}


@pytest.mark.parametrize("name", list(ORACLE_SUCCESS))
def test_more_dumps_match_the_standin(checkout, tmp_path, name):
    base_text, kwargs, writes = ORACLE_SUCCESS[name]
    base = None
    if base_text is not None:
        base = tmp_path / "base.yaml"
        base.write_text(base_text)
    expected, error = run_standin(checkout, kwargs, str(base) if base else None, writes)
    assert error is None, error
    for extra in ({}, {"agentjet_root": str(checkout)}):
        got = build_config(BuildConfigInput(kwargs=kwargs, set=writes or None,
                                            base_yaml=str(base) if base else None, **extra))
        assert got.yaml == expected


ORACLE_REFUSALS = {
    "lengths as strings compare as text": (None, {"max_prompt_length": "1000", "max_response_length": "2000",
                                                  "max_model_len": "5000", "max_response_length_in_one_turn": "300"},
                                           "kwargs.max_response_length_in_one_turn"),
    "string lengths joined by +": (None, {"max_prompt_length": "500", "max_response_length": "2000",
                                          "max_model_len": "12000", "max_response_length_in_one_turn": "100"},
                                   "kwargs.max_model_len"),
    "length as a string next to numbers": (None, {"max_prompt_length": "500", "max_response_length": 2000,
                                                  "max_model_len": 12000, "max_response_length_in_one_turn": 100},
                                           "kwargs.max_model_len"),
    "nnodes as a string kwarg": (None, {"nnodes": "2", "swarm_mode": False}, "kwargs.nnodes"),
    "lora rank as a string": (None, {"lora_rank": "8"}, "kwargs.lora_rank"),
    "ajet is a list in the base": ("ajet:\n- 1\n- 2\n" + TAIL, {}, "base_yaml"),
    "ajet is a number in the base": ("ajet: 5\n" + TAIL, {}, "base_yaml"),
    "the base leaves out ajet_default": (TAIL.replace("- ajet_default\n", ""), {}, "base_yaml"),
    "a defaults entry that only exists beside the base": (TAIL.replace("- ajet_default\n", "- ajet_default\n- mine\n"),
                                                          {}, "base_yaml"),
    "a section of the base is a list where a layer has a mapping": ("trainer: [1]\n" + TAIL, {}, "base_yaml"),
    "_self_ twice": (TAIL + "- _self_\n", {}, "base_yaml"),
    "defaults not a list": (TAIL.split("defaults:")[0] + "defaults: 5\n", {}, "base_yaml"),
    "an unknown kwarg": (None, {"num_repaet": 4}, "kwargs.num_repaet"),
    "backbone trinity": (None, {"backbone": "trinity"}, "kwargs.backbone"),
}


@pytest.mark.parametrize("name", list(ORACLE_REFUSALS))
def test_more_refusals_match_the_standin(checkout, tmp_path, name):
    base_text, kwargs, field = ORACLE_REFUSALS[name]
    base = None
    if base_text is not None:
        base = tmp_path / "base.yaml"
        base.write_text(base_text)
        (tmp_path / "mine.yaml").write_text("x: 1\n")  # beside the base: Hydra never looks there
    _, error = run_standin(checkout, kwargs, str(base) if base else None)
    assert error is not None
    with pytest.raises(AgentJetRefusal) as info:
        build_config(BuildConfigInput(kwargs=kwargs, base_yaml=str(base) if base else None))
    cause = info.value.cause
    assert cause.exception == type(error).__name__ and info.value.field == field
    if cause.exception_message is not None:
        assert _normal(_first_line(error)).startswith(_normal(cause.exception_message)), (cause, error)
    assert "\n" not in str(info.value)


def test_writes_below_a_missing_section_match_the_standin(checkout):
    writes = {"ajet.no_such_section.x": 1}
    _, error = run_standin(checkout, {}, None, writes)
    with pytest.raises(AgentJetRefusal) as info:
        build_config(BuildConfigInput(set=writes))
    cause = info.value.cause
    assert (cause.exception, cause.exception_message) == (type(error).__name__, str(error))
    assert info.value.field == "set.ajet.no_such_section.x" and "closest known key" in str(info.value)


def _first_line(error: BaseException) -> str:
    text = str(error)
    if isinstance(error, KeyError):
        return text
    return " ".join(text.split("\n\n")[0].split("\n"))


def _normal(text: str) -> str:
    text = re.sub(r"tmp[^'\s]*\.yaml", "tmp.yaml", text)
    return " ".join(text.split())
