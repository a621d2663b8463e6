"""Fake AgentJet checkouts for tests, written from the bundled snapshot (no AgentJet code involved).

``make_fake_agentjet`` lays out ``ajet/default_config/{ajet_swarm_default,ajet_default}.yaml`` and
``ajet/default_config/verl/verl_default.yaml`` as an AgentJet checkout would, so that Hydra itself can
compose them (the fidelity oracle) and the locator can find them.
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import yaml

from skill_server.agentjet.knowledge import snapshot

#: Fields that exist only in AgentJet's config dataclasses (facts 1.5.1, e48a5397): the real dump
#: contains them although no YAML sets them.
SCHEMA_ONLY_FIELDS = {
    "ajet.trainer_verl": {},
    "ajet.task_reader.huggingface_dat_repo.dataset_name": None,
    "ajet.task_reader.huggingface_dat_repo.http_proxy_address": "",
}


def make_fake_agentjet(root: Path, *, version: str = "0.0.4", job_py: str | None = None,
                       schema_py: str | None = None, rollout_py: str | None = None) -> Path:
    snap = snapshot()
    pkg = root / "ajet"
    for name, rel in snap["layer_files"].items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(snap["layers"][name], sort_keys=False))
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    for rel, text in (("copilot/job.py", job_py), ("default_config/ajet_config_schema.py", schema_py),
                      ("task_rollout/native_parallel_worker.py", rollout_py)):
        if text is not None:
            (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
            (pkg / rel).write_text(text)
    return root


@contextmanager
def chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def hydra_compose(config_file: Path, cwd: Path) -> dict[str, Any]:
    """Compose ``config_file`` with real Hydra (relative search paths resolve against ``cwd``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    with chdir(cwd), initialize_config_dir(config_dir=str(config_file.parent.resolve()), version_base=None):
        cfg = compose(config_name=config_file.stem)
        return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = copy.deepcopy(value)


def expected_dump(composed: dict[str, Any], base_file: Path, schema_only: dict[str, Any] | None = None) -> dict[str, Any]:
    """What AgentJetJob dumps (facts 1.5.1): the composed tree, schema-only fields, the base's own tail."""
    doc = copy.deepcopy(composed)
    for key, value in (SCHEMA_ONLY_FIELDS if schema_only is None else schema_only).items():
        node = doc
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node.setdefault(parts[-1], copy.deepcopy(value))
    own = yaml.safe_load(base_file.read_text())
    for key in ("hydra", "defaults"):
        if key in own:
            doc[key] = own[key]
    return doc
