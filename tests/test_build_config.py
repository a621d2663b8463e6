"""build_config as a tool: which AgentJet, paths and cwd, create-only output, hostile base files, provenance,
installs read or refused, the per-file cache, and both front ends. (Byte-for-byte fidelity: test_agentjet_goldens.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from skill_server.agentjet import release as release_module
from skill_server.agentjet import yamltypes
from skill_server.agentjet.refusals import AgentJetRefusal
from skill_server.app.table import get_tool
from skill_server.core.errors import SkillError, ToolFailure, ToolInputError
from tests.agentjet_fixtures import TAIL, write_reference_checkout
from tests.conftest import call_cli

SWARM_REL = "ajet/default_config/ajet_swarm_default.yaml"


def build(**kw):
    return get_tool("build_config").invoke(kw)


def doc(result) -> dict:
    return yaml.safe_load(result.yaml)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return write_reference_checkout(tmp_path / "AgentJet")


# --- which AgentJet ----------------------------------------------------------------------------------------


def test_default_is_the_newest_bundled_release_and_says_so():
    r = build()
    assert r.agentjet.source == "bundled" and r.agentjet.version == "0.1.0"
    assert r.agentjet.commit == "c68c154f9653233ded73867c9e0553d53ca4ac30" and r.agentjet.date.startswith("2026-05-26")
    assert Path(r.agentjet.path).name == "c68c154f" and r.base.kind == "default"
    assert r.layers == ["bundled:ajet/default_config/verl/verl_default.yaml",
                        "bundled:ajet/default_config/ajet_default.yaml", r.base.path]
    d = doc(r)
    assert d["ajet"]["rollout"]["max_env_worker"] == 128 and d["ajet"]["trainer_common"]["logger"] == "tensorboard"
    assert list(d)[:2] == ["ajet", "actor_rollout_ref"] and list(d)[-2:] == ["defaults", "hydra"]


@pytest.mark.parametrize("wanted", ["0.1.0", "v0.1.0", "c68c154f", "C68C", "c68c154f9653233ded73867c9e0553d53ca4ac30"])
def test_agentjet_version_accepts_a_version_or_a_commit_prefix(wanted):
    assert build(agentjet_version=wanted).agentjet.commit.startswith("c68c154f")


@pytest.mark.parametrize("wanted", ["0.0.4", "deadbeef", "c68", ""])
def test_unknown_agentjet_version_lists_the_bundled_ones(wanted):
    with pytest.raises(ToolInputError) as info:
        build(agentjet_version=wanted)
    assert info.value.field == "agentjet_version" and "0.1.0 (c68c154f, 2026-05-26)" in str(info.value)


def test_unknown_kwarg_names_the_version_and_the_closest_kwarg():
    with pytest.raises(AgentJetRefusal) as info:
        build(kwargs={"ppo_max_token_len_per_gpu": 30000})
    text = str(info.value)
    assert info.value.field == "kwargs.ppo_max_token_len_per_gpu" and "AgentJet 0.1.0 (c68c154f)" in text
    assert "TypeError: AgentJetJob.__init__() got an unexpected keyword argument 'ppo_max_token_len_per_gpu'" in text
    with pytest.raises(AgentJetRefusal) as info:
        build(kwargs={"zzzz": 1})
    assert "closest known kwarg: none" in str(info.value)
    with pytest.raises(AgentJetRefusal) as info:
        build(kwargs={"num_repaet": 1})
    assert "closest known kwarg: num_repeat" in str(info.value)


def test_an_install_is_read_not_mixed(checkout):
    # the install's own layer value shows up: nothing comes from the bundled release
    swarm = checkout / SWARM_REL
    swarm.write_text(swarm.read_text().replace("max_env_worker: 128", "max_env_worker: 77"))
    r = build(agentjet_root=str(checkout))
    assert doc(r)["ajet"]["rollout"]["max_env_worker"] == 77
    assert r.agentjet.source == "install" and r.agentjet.version == "0.1.0" and r.agentjet.commit is None
    assert r.base.path == str((checkout / SWARM_REL).resolve()) and r.layers[-1] == r.base.path
    with pytest.raises(ToolInputError) as info:
        build(agentjet_root=str(checkout), agentjet_version="0.0.4")
    assert info.value.field == "agentjet_version"
    assert build(agentjet_root=str(checkout), agentjet_version="0.1.0").agentjet.source == "install"


def test_install_found_through_ajet_root(checkout, monkeypatch):
    monkeypatch.setenv("AJET_ROOT", str(checkout))
    assert build().agentjet.source == "install"
    assert build(agentjet_version="0.1.0").agentjet.source == "bundled"  # an explicit version wins


@pytest.mark.parametrize("missing, words", [
    ("swarm_default", "missing the swarm default layer ajet/default_config/ajet_swarm_default.yaml"),
    ("job", "missing ajet/copilot/job.py"),
    ("table", "an overrides table in AgentJetJob.__init__"),
])
def test_installs_without_swarm_support_are_refused(tmp_path, missing, words):
    old_job = "class AgentJetJob:\n    def __init__(self, base_yaml_config=None, num_repeat=None):\n        pass\n"
    root = write_reference_checkout(tmp_path / "old", version="0.0.2", swarm_default=missing != "swarm_default",
                                    job=old_job if missing == "table" else None)
    if missing == "job":
        (root / "ajet/copilot/job.py").unlink()
    with pytest.raises(ToolInputError) as info:
        build(agentjet_root=str(root))
    text = str(info.value)
    assert info.value.field == "agentjet_root" and "AgentJet 0.0.2" in text and words in text
    assert "no swarm support" in text and "agentjet_version" in text


def test_install_without_its_schema_module_is_refused_not_completed(tmp_path):
    root = write_reference_checkout(tmp_path / "aj", schema=None)
    with pytest.raises(ToolInputError) as info:
        build(agentjet_root=str(root))
    assert info.value.field == "agentjet_root" and "ajet_config_schema.py" in str(info.value)
    assert "does not fill them in" in str(info.value)


def test_install_schema_default_that_is_not_a_literal_is_refused(tmp_path):
    from tests.agentjet_fixtures import SCHEMA_PY

    schema = SCHEMA_PY.replace('dataset_path: str = "gsm8k"', 'dataset_path: str = os.environ.get("DS", "x")')
    root = write_reference_checkout(tmp_path / "aj", schema=schema)
    with pytest.raises(ToolInputError) as info:
        build(agentjet_root=str(root))
    assert "HuggingfaceDatRepo.dataset_path" in str(info.value)


def test_an_install_layer_that_is_not_yaml_is_named_with_its_line(checkout):
    layer = checkout / "ajet/default_config/ajet_default.yaml"
    layer.write_text(layer.read_text() + "broken:\n\t- 1\n")
    with pytest.raises(ToolInputError) as info:
        build(agentjet_root=str(checkout))
    text = str(info.value)
    assert info.value.field == "agentjet_root" and f"cannot read {layer.resolve()}: not valid YAML at line " in text
    assert "cannot start any token" in text and "\n" not in text


def test_install_facts_are_cached_until_a_file_changes(checkout, monkeypatch):
    calls = []
    for name in ("load_layer_text", "load_layer_and_base_text"):  # a layer alone, or with its base reading
        real = getattr(yamltypes, name)
        monkeypatch.setattr(yamltypes, name, lambda text, *a, real=real, **k: calls.append(1) or real(text, *a, **k))
    release_module.clear_cache()
    first = build(agentjet_root=str(checkout))
    assert len(calls) == 3  # the three layers, parsed once
    build(agentjet_root=str(checkout), kwargs={"num_repeat": 6})
    assert len(calls) == 3  # reused
    layer = checkout / "ajet/default_config/ajet_default.yaml"
    layer.write_text(layer.read_text().replace("gamma: 1.0", "gamma: 0.5"))
    os.utime(layer, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    again = build(agentjet_root=str(checkout))
    assert len(calls) == 4 and doc(again)["ajet"]["rollout"]["gamma"] == 0.5 != doc(first)["ajet"]["rollout"]["gamma"]


# --- paths, cwd and writing ----------------------------------------------------------------------------------


def test_relative_paths_resolve_against_cwd(tmp_path, checkout):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "base.yaml").write_text("ajet:\n  experiment_name: rel\n" + TAIL)
    r = build(cwd=str(tmp_path), base_yaml="exp/base.yaml", output_path="out/run.yaml", agentjet_root="AgentJet")
    assert r.base.path == str(tmp_path / "exp" / "base.yaml") and r.written == str(tmp_path / "out" / "run.yaml")
    assert r.agentjet.path == str(checkout.resolve()) and doc(r)["ajet"]["experiment_name"] == "rel"
    with pytest.raises(AgentJetRefusal) as info:
        build(cwd=str(tmp_path), base_yaml="exp/nope.yaml")
    assert str(tmp_path / "exp" / "nope.yaml") in str(info.value) and "Configuration yaml is absent!" in str(info.value)
    with pytest.raises(ToolInputError) as info:
        build(cwd=str(tmp_path / "no-such-dir"))
    assert info.value.field == "cwd" and str(tmp_path / "no-such-dir") in str(info.value)


def test_a_bad_cwd_gets_the_same_words_from_build_config_and_check_config(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "base.yaml").write_text("ajet: {}\n" + TAIL)
    for cwd, words in ((tmp_path / "missing", "directory not found"), (tmp_path / "file", "not a directory")):
        errors = []
        for tool, args in (("build_config", {}), ("check_config", {"yaml": str(tmp_path / "base.yaml")})):
            with pytest.raises(ToolInputError) as info:
                get_tool(tool).invoke({**args, "cwd": str(cwd)})
            errors.append(str(info.value))
        assert errors[0] == errors[1] == f"cwd: {words}: {cwd}", errors


def test_own_layers_through_a_relative_search_path_and_cwd(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "team.yaml").write_text("ajet:\n  rollout:\n    num_repeat: 6\n  project_name: team\n")
    (tmp_path / "base.yaml").write_text(
        "ajet:\n  experiment_name: mine\nhydra:\n  searchpath:\n  - file://ajet/default_config\n"
        "  - file://ajet/default_config/verl\n  - file://configs\ndefaults:\n- verl_default\n- ajet_default\n"
        "- team\n- _self_\n")
    r = build(cwd=str(tmp_path), base_yaml="base.yaml", provenance="changed")
    d = doc(r)
    assert (d["ajet"]["rollout"]["num_repeat"], d["ajet"]["project_name"], d["ajet"]["experiment_name"]) == (
        6, "team", "mine")
    assert r.layers[2] == str(tmp_path / "configs" / "team.yaml")
    with pytest.raises(AgentJetRefusal) as info:
        build(cwd=str(tmp_path / "configs"), base_yaml="../base.yaml")
    assert "Could not load 'team'" in str(info.value)


def test_output_path_only_creates(tmp_path):
    out = tmp_path / "nested" / "resolved.yaml"
    r = build(kwargs={"num_repeat": 8}, output_path=str(out))
    assert r.written == str(out) and out.read_text() == r.yaml
    out.write_text("user edits\n")
    with pytest.raises(ToolFailure) as info:
        build(output_path=str(out))
    assert info.value.field == "output_path" and "only creates new files" in str(info.value)
    assert out.read_text() == "user edits\n"
    link = tmp_path / "link.yaml"
    link.symlink_to(tmp_path / "dangling-target")
    with pytest.raises(ToolFailure):
        build(output_path=str(link))
    assert not (tmp_path / "dangling-target").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["resolved.yaml"]  # no temp files left behind


def test_output_path_device_and_placeholder_are_refused(tmp_path):
    device = tmp_path / "null"
    os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))  # a character device of our own, under a temp dir
    with pytest.raises(ToolFailure):
        build(output_path=str(device))
    assert device.is_char_device()
    for placeholder in ("<consolidated>.yaml", str(tmp_path / "x>.yaml")):
        with pytest.raises(ToolInputError) as info:
            build(output_path=placeholder)
        assert info.value.field == "output_path" and "placeholder" in str(info.value)


def test_no_overwrite_argument_and_strict_types():
    tool = get_tool("build_config")
    for bad, field in (({"overwrite": True}, "overwrite"), ({"output_path": 5}, "output_path"),
                       ({"kwargs": [1, 2]}, "kwargs"), ({"set": "x"}, "set"), ({"base_yaml": True}, "base_yaml"),
                       ({"provenance": "some"}, "provenance"), ({"agentjet_version": 1}, "agentjet_version")):
        with pytest.raises(ToolInputError) as info:
            tool.validate(bad)
        assert info.value.field == field, bad
    with pytest.raises(ToolInputError) as info:
        build(kwargs={"base_yaml_config": 5})
    assert info.value.field == "kwargs.base_yaml_config"


def test_deep_json_values_are_refused_cleanly():
    deep: object = 1
    for _ in range(500):
        deep = [deep]
    for args, field in (({"kwargs": {"model": deep}}, "kwargs.model"), ({"set": {"ajet.x": deep}}, "set.ajet.x")):
        with pytest.raises(ToolInputError) as info:
            build(**args)
        assert info.value.field == field and "nested deeper than" in str(info.value)


def test_refusal_for_returns_the_cause_for_linters():
    from skill_server.agentjet.compose import default_base
    from skill_server.agentjet.job import refusal_for
    from skill_server.agentjet.release import newest_bundled

    release = newest_bundled()
    cause = refusal_for(release, default_base(release), {"nnodes": "2"})
    assert cause is not None and (cause.id, cause.exception, cause.field) == ("nnodes-not-a-number", "TypeError",
                                                                             "kwargs.nnodes")
    assert refusal_for(release, default_base(release), {"nnodes": 2}) is None


def test_annotations_are_honest():
    spec = get_tool("build_config")
    assert (spec.read_only, spec.destructive, spec.idempotent) == (False, False, True)
    assert "never replaces" in spec.description and "Read-only unless output_path" in spec.description


# --- hostile base files: one line naming the field, never a traceback or a hang ---------------------------


@pytest.mark.parametrize("content, words", [
    ("ajet: [unclosed\n", "not valid YAML at line"),
    ("- a\n- b\n", "must hold a YAML mapping"),
    ("", "is empty"),
    ("x: !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "alias bomb"),
    ("ajet:\n  tags: !!set {a: null, b: null}\n" + TAIL, "ajet.tags holds a !!set value"),
    ("ajet:\n  pairs: !!omap [{a: 1}, {b: 2}]\n" + TAIL, "holds an !!omap or !!pairs entry"),
    ("ajet:\n  blob: !!binary aGVsbG8=\n" + TAIL, "ajet.blob holds !!binary data"),
    ("ajet:\n  name: \"bell\x07\"\n" + TAIL, "not valid YAML"),
    ("a: " + "[" * 2000 + "]" * 2000 + "\n", "nest"),
    ("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 150)) + TAIL, "nested deeper than"),
])
def test_bad_base_yaml_is_one_line_naming_the_field(tmp_path, content, words):
    base = tmp_path / "bad.yaml"
    base.write_text(content)
    with pytest.raises(ToolInputError) as info:
        build(base_yaml=str(base))
    assert info.value.field == "base_yaml" and words in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_fifo_device_and_directory_are_not_regular_files(tmp_path):
    fifo = tmp_path / "base.fifo"
    os.mkfifo(fifo)
    device = tmp_path / "zero"
    os.mknod(device, 0o666 | 0o020000, os.makedev(1, 5))
    results: list[str] = []

    def attempt(path: Path) -> None:
        try:
            build(base_yaml=str(path))
        except ToolInputError as exc:
            results.append(str(exc))

    worker = threading.Thread(target=lambda: [attempt(p) for p in (fifo, device, tmp_path)], daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "build_config blocked on a FIFO or device"
    assert [("not a regular file" in r, "not found" in r) for r in results] == [(True, False)] * 3
    assert "a FIFO" in results[0] and "a character device" in results[1] and "a directory" in results[2]


def test_ajet_as_a_list_or_number_is_refused_with_the_cause(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("ajet:\n- 1\n" + TAIL)
    with pytest.raises(AgentJetRefusal) as info:
        build(base_yaml=str(base))
    assert "ajet is a mapping in one config and a list in another" in str(info.value)
    assert "ConfigCompositionException" in str(info.value)
    base.write_text("ajet: 5\n" + TAIL)
    with pytest.raises(AgentJetRefusal) as info:
        build(base_yaml=str(base))
    assert "but ajet is an int in the composed config" in str(info.value)
    assert "AttributeError: 'int' object has no attribute 'experiment_dir'" in str(info.value)


# --- provenance, warnings -----------------------------------------------------------------------------------


def test_provenance_says_where_each_value_came_from(tmp_path):
    base = tmp_path / "wolves.yaml"
    base.write_text("ajet:\n  enable_swarm_mode: true\n  rollout:\n    num_repeat: 6\n    max_env_worker: 64\n"
                    "  trainer_common:\n    nnodes: 2\n" + TAIL)
    r = build(base_yaml=str(base), kwargs={"max_env_worker": 128},
              set={"ajet.rollout.temperature": 0.6, "ajet.rollout.vllm_tool_parser": "hermes"}, provenance="all")
    prov = {p.key: p for p in r.provenance}
    assert (prov["ajet.rollout.max_env_worker"].source, prov["ajet.rollout.max_env_worker"].base_value) == ("kwarg", 64)
    assert prov["ajet.rollout.max_env_worker"].layer == "wolves"
    assert (prov["ajet.rollout.num_repeat"].source, prov["ajet.rollout.num_repeat"].layer) == ("base", "wolves")
    assert prov["ajet.trainer_common.logger"].layer == "ajet_default"  # the swarm overlay is not composed here
    assert prov["ajet.task_reader.huggingface_dat_repo.dataset_name"].layer == "schema"
    assert prov["ajet.rollout.temperature"].source == "set" and prov["ajet.rollout.temperature"].base_value == 0.9
    tcp = prov["ajet.interchange_server.interchange_method"]
    assert (tcp.source, tcp.value) == ("agentjet", "tcp") and "AgentJet 0.1.0 (c68c154f)" in tcp.note
    assert prov["defaults"].layer.startswith("wolves")
    assert prov["actor_rollout_ref.hybrid_engine"].layer == "verl_default"
    assert any("vllm_tool_parser" in w and "closest known key" in w for w in r.warnings)
    changed = build(base_yaml=str(base), kwargs={"max_env_worker": 128}, provenance="changed")
    assert {p.key for p in changed.provenance} == {"ajet.rollout.max_env_worker",
                                                   "ajet.interchange_server.interchange_method"}


def test_warnings_for_types_and_writes_with_a_kwarg():
    r = build(kwargs={"num_repeat": "8"}, set={"ajet.rollout.num_repeat": 8, "ajet.rollout.temprature": 0.5})
    assert any("num_repeat='8' is a str" in w for w in r.warnings)
    assert any("pass num_repeat=" in w for w in r.warnings)
    assert any("temprature" in w and "closest known key: ajet.rollout.temperature" in w for w in r.warnings)


def test_ensure_new_experiment_stamps_names():
    name = doc(build(kwargs={"ensure_new_experiment": True, "experiment_name": "math"}))["ajet"]["experiment_name"]
    assert name.startswith("math_") and len(name) == len("math_20260101-000000")
    assert doc(build(kwargs={"ensure_new_experiment": True}))["ajet"]["experiment_name"] == "read_yaml_name"


# --- both front ends --------------------------------------------------------------------------------------------


def test_cli_build_config_and_one_voice_for_errors(tmp_path):
    code, out, _ = call_cli("build_config", {"kwargs": {"max_env_worker": 126, "num_repeat": 6},
                                             "provenance": "changed"})
    assert code == 0 and {p["key"] for p in out["provenance"]} == {"ajet.rollout.max_env_worker",
                                                                    "ajet.rollout.num_repeat"}
    assert out["agentjet"]["version"] == "0.1.0" and yaml.safe_load(out["yaml"])["ajet"]["rollout"]["num_repeat"] == 6
    direct = None
    try:
        build(kwargs={"batch": 3})
    except SkillError as exc:
        direct = str(exc)
    code, out, err = call_cli("build_config", {"kwargs": {"batch": 3}})
    assert code == 1 and err == f"build_config: {direct}\n" and "closest known kwarg: batch_size" in err
    code, out, err = call_cli("build_config", {"base_yaml": str(tmp_path / "absent.yaml")})
    assert code == 1 and "base_yaml:" in err and str(tmp_path / "absent.yaml") in err


@pytest.mark.anyio
async def test_mcp_refusal_matches_the_cli(tmp_path):
    from mcp import Client

    from skill_server.app.mcp_server import build_server

    code, _, err = call_cli("build_config", {"kwargs": {"nnodes": "2", "swarm_mode": False}})
    async with Client(build_server()) as client:
        result = await client.call_tool("build_config", {"kwargs": {"nnodes": "2", "swarm_mode": False}})
        assert result.is_error and result.content[0].text.endswith(err.removeprefix("build_config: ").strip())
        ok = await client.call_tool("build_config", {"agentjet_version": "c68c154f", "provenance": "changed"})
        assert not ok.is_error and ok.structured_content["agentjet"]["source"] == "bundled"


def test_cli_never_imports_mcp_or_hydra():
    code = ("import sys; from skill_server.app import cli; cli.main(['call', 'build_config', '--json', '{}']); "
            "sys.stderr.write(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('mcp', 'hydra', 'omegaconf'))))")
    proc = subprocess.run([sys.executable, "-c", "import json; " + code], capture_output=True, text=True,
                          env={**os.environ,
                               "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, timeout=60, check=False)
    assert proc.returncode == 0 and json.loads(proc.stderr) == []
