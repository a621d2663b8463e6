"""Bundled releases and the snapshot maintainer command; static readers of a checkout (.git, job.py, schema)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skill_server.agentjet import gitmeta, pysource
from skill_server.agentjet.release import RELEASES_DIR, bundled_releases, find_bundled, newest_bundled, select_agentjet
from skill_server.core.errors import ToolInputError
from tests.agentjet_fixtures import (
    REFERENCE,
    REFERENCE_COMMIT,
    REFERENCE_DATE,
    REFERENCE_REPO,
    TABLE_ROWS,
    job_py,
    write_reference_checkout,
)
from tests.conftest import run_cli


def snapshot(checkout: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("snapshot", "--from", str(checkout), "--commit", REFERENCE_COMMIT, "--date", REFERENCE_DATE,
                   "--repo", REFERENCE_REPO, *extra)


# --- the bundled release ------------------------------------------------------------------------------------


def test_one_consistent_bundled_release():
    (only,) = bundled_releases()
    assert newest_bundled() is only and only.folder == RELEASES_DIR / "c68c154f"
    meta = only.document["agentjet"]
    assert meta == {"repo": "modelscope/AgentJet", "version": "0.1.0", "pyproject_version": "0.0.4",
                    "commit": REFERENCE_COMMIT, "date": REFERENCE_DATE}
    table = only.overrides
    assert table.rows == tuple(TABLE_ROWS) and len(table.rows) == 37
    assert table.constructor_kwargs[:3] == ("ensure_new_experiment", "base_yaml_config", "experiment_dir")
    assert table.control_kwargs == ("ensure_new_experiment", "base_yaml_config")
    assert not {"ppo_max_token_len_per_gpu", "ulysses_sequence_parallel_size"} & set(table.constructor_kwargs)
    assert only.thread_rule.rule == "ceil"
    fields = [k for k in only.schema.tree["ajet"] if k != "__dataclass__"]
    assert fields[:4] == ["project_name", "experiment_name", "experiment_dir", "backbone"]
    assert fields[-4:] == ["enable_swarm_mode", "swarm_mode_sample_collection_method", "execute_test",
                           "interchange_server"]
    assert "ulysses_sequence_parallel_size" not in only.schema.tree["ajet"]["trainer_common"]


def test_bundled_layers_are_the_reference_yamls():
    import yaml

    release = newest_bundled()
    for source, rel in (("ajet_swarm_default.yaml", "ajet/default_config/ajet_swarm_default.yaml"),
                        ("ajet_default.yaml", "ajet/default_config/ajet_default.yaml"),
                        ("verl/verl_default.yaml", "ajet/default_config/verl/verl_default.yaml")):
        found = release.config_file(rel, raw=True)
        expected = yaml.safe_load((REFERENCE / source).read_text())
        assert found is not None and json.dumps(found.raw) == json.dumps(expected), rel


def test_find_bundled_by_version_or_commit():
    assert find_bundled("0.1.0") is find_bundled("c68c") is find_bundled("V0.1.0")
    with pytest.raises(ToolInputError) as info:
        find_bundled("0.0.4")
    assert "bundled releases: 0.1.0 (c68c154f, 2026-05-26)" in str(info.value)


# --- the snapshot command ---------------------------------------------------------------------------------------


def test_snapshot_of_the_reference_checkout_equals_the_bundled_release(tmp_path):
    checkout = write_reference_checkout(tmp_path / "AgentJet")
    before = {p.name: p.read_bytes() for p in (RELEASES_DIR / "c68c154f").iterdir()}
    proc = snapshot(checkout)
    assert proc.returncode == 0, proc.stderr
    assert "no difference from the bundled release" in proc.stdout
    assert {p.name: p.read_bytes() for p in (RELEASES_DIR / "c68c154f").iterdir()} == before


def test_snapshot_shows_differences_and_writes_only_when_asked(tmp_path):
    rows = [r for r in TABLE_ROWS if r[0] != "timeline_compare_level"]
    checkout = write_reference_checkout(tmp_path / "AgentJet", job=job_py(rows, rows))
    proc = snapshot(checkout)
    assert proc.returncode == 3 and "differs from the bundled release" in proc.stdout
    assert '-   ["timeline_compare_level", ' in proc.stdout and "Nothing written" in proc.stdout
    target = tmp_path / "releases"
    written = snapshot(checkout, "--write", "--releases-dir", str(target))
    assert written.returncode == 0 and (target / "c68c154f" / "release.json").is_file()
    document = json.loads((target / "c68c154f" / "release.json").read_text())
    assert ["timeline_compare_level", None] not in document["job"]["signature"]
    assert json.loads((target / "c68c154f" / "layers.json").read_text()) == json.loads(
        (RELEASES_DIR / "c68c154f" / "layers.json").read_text())
    again = snapshot(checkout, "--releases-dir", str(target))
    assert again.returncode == 0 and "no difference" in again.stdout


def test_snapshot_of_a_new_commit_reports_what_it_would_add(tmp_path):
    checkout = write_reference_checkout(tmp_path / "AgentJet", version="0.2.0")
    proc = run_cli("snapshot", "--from", str(checkout), "--commit", "1234567890abcdef", "--date",
                   "2026-07-01T00:00:00+00:00")
    assert proc.returncode == 3 and "is not bundled yet" in proc.stdout and "37 overrides rows" in proc.stdout
    assert '+  "version": "0.2.0",' in proc.stdout and not (RELEASES_DIR / "12345678").exists()


def test_snapshot_refusals_are_one_line(tmp_path):
    plain = write_reference_checkout(tmp_path / "AgentJet", layers=False)
    proc = run_cli("snapshot", "--from", str(plain))
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "no swarm support" in proc.stderr
    proc = run_cli("snapshot", "--from", str(tmp_path / "nowhere"))
    assert proc.returncode == 1 and "--from" in proc.stderr
    full = write_reference_checkout(tmp_path / "Full")
    proc = run_cli("snapshot", "--from", str(full))
    assert proc.returncode == 1 and "not a git checkout" in proc.stderr and "--commit" in proc.stderr
    assert run_cli("snapshot").returncode == 2


def test_snapshot_command_does_not_import_mcp(tmp_path):
    checkout = write_reference_checkout(tmp_path / "AgentJet", layers=False)
    code = ("import sys, json; from skill_server.app import cli; cli.main(['snapshot', '--from', sys.argv[1]]); "
            "sys.stdout.write(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'hydra'))))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run([sys.executable, "-c", code, str(checkout)], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.stdout.strip().endswith("[]")


# --- reading .git statically --------------------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_COMMITTER_DATE": "2026-05-26T17:07:00+08:00",
           "GIT_AUTHOR_DATE": "2026-05-26T17:07:00+08:00", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


@pytest.mark.needs("git")
def test_commit_and_date_come_from_dot_git_loose_and_packed(tmp_path):
    checkout = write_reference_checkout(tmp_path / "AgentJet")
    _git(checkout, "init", "-q", "-b", "main")
    _git(checkout, "add", ".")
    _git(checkout, "commit", "-q", "-m", "reference")
    _git(checkout, "remote", "add", "origin", "https://github.com/modelscope/AgentJet.git")
    head = _git(checkout, "rev-parse", "HEAD")
    assert gitmeta.head_commit(checkout) == head
    assert gitmeta.commit_date(checkout, head) == "2026-05-26T17:07:00+08:00"
    assert gitmeta.origin_repo(checkout) == "modelscope/AgentJet"
    _git(checkout, "gc", "-q")  # refs packed, the commit moved into a pack
    assert not (checkout / ".git" / "refs" / "heads" / "main").exists()
    assert gitmeta.head_commit(checkout) == head
    assert gitmeta.commit_date(checkout, head) == "2026-05-26T17:07:00+08:00"
    proc = run_cli("snapshot", "--from", str(checkout))
    assert proc.returncode == 3 and f"({head[:8]}, 2026-05-26T17:07:00+08:00)" in proc.stdout
    worktree = tmp_path / "wt"
    _git(checkout, "worktree", "add", "-q", "--detach", str(worktree))
    assert gitmeta.head_commit(worktree) == head and gitmeta.commit_date(worktree, head) is not None


# --- reading Python sources statically ---------------------------------------------------------------------------


def test_job_source_in_either_orientation_and_with_parameter_values():
    source = ("class AgentJetJob:\n"
              "    def __init__(self, base_yaml_config=None, num_repeat=None, lr=None, *, extra=3):\n"
              "        overrides = {'ajet.rollout.num_repeat': num_repeat, 'lr': 'ajet.trainer_common.optim.lr'}\n")
    signature, rows, any_kwarg = pysource.read_job_source(source)
    assert signature == [("base_yaml_config", None), ("num_repeat", None), ("lr", None), ("extra", 3)]
    assert rows == [("num_repeat", "ajet.rollout.num_repeat"), ("lr", "ajet.trainer_common.optim.lr")]
    assert any_kwarg is False
    with pytest.raises(pysource.NoOverridesTable):
        pysource.read_job_source("class AgentJetJob:\n    def __init__(self, num_repeat=None):\n        pass\n")
    with pytest.raises(pysource.SourceUnreadable):
        pysource.read_job_source("class AgentJetJob:\n    def __init__(self, x=os.getcwd()):\n        overrides = {}\n")


def test_schema_source_with_inheritance_and_refusals():
    source = ("from dataclasses import dataclass, field\nfrom typing import ClassVar\n\n"
              "@dataclass\nclass Base:\n    a: int = 1\n    b: str = 'x'\n    NOTE: ClassVar[int] = 3\n\n"
              "@dataclass\nclass Child(Base):\n    c: list = field(default_factory=lambda: [1, 2])\n    a: int = 5\n\n"
              "@dataclass\nclass Config:\n    ajet: Child = field(default_factory=Child)\n")
    tree = pysource.read_schema_source(source)
    assert tree == {"__dataclass__": "Config", "ajet": {"__dataclass__": "Child", "a": 5, "b": "x", "c": [1, 2]}}
    with pytest.raises(pysource.SourceUnreadable, match="Config.ajet"):
        pysource.read_schema_source("from dataclasses import dataclass\n@dataclass\nclass Config:\n    ajet: int\n")


def test_thread_rule_is_read_from_code_not_text():
    ceil = ("import math\ndef rollout_swarm(t, m, n):\n    assert True, 'min(len(t), m // n)'\n"
            "    return math.ceil(m / n)\n")
    assert pysource.read_thread_rule(ceil)[0] == "ceil"
    text_only = "def rollout_swarm(t, m, n):\n    assert m, 'uses m // n'\n    return m\n"
    assert pysource.read_thread_rule(text_only)[0] is None
    assert pysource.read_thread_rule("def rollout_swarm(t, m, n):\n    return m // n\n")[0] == "floor"
    assert pysource.read_thread_rule("def other():\n    pass\n") == (None, "no rollout_swarm function (an engine "
                                                                      "without swarm mode)")


def test_a_checkout_without_git_says_which_bundled_release_its_layers_are(tmp_path):
    root = write_reference_checkout(tmp_path / "AgentJet")  # the c68c154f layers, no .git
    release = select_agentjet(agentjet_root=str(root))
    assert release.ref.commit is None and release.ref.layers_match == "0.1.0 (c68c154f)"
    assert release.label == f"AgentJet 0.1.0 (commit unknown; layers as in bundled 0.1.0 (c68c154f)) at {root}"
    # one value changed in one layer: no longer that release's layers, and the label says only what is known
    layer = root / "ajet/default_config/ajet_default.yaml"
    layer.write_text(layer.read_text().replace("max_env_worker: 64", "max_env_worker: 65", 1))
    changed = select_agentjet(agentjet_root=str(root))
    assert changed.ref.layers_match is None and changed.label == f"AgentJet 0.1.0 (commit unknown) at {root}"
