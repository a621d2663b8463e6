"""AgentJet checkouts for tests, and a runnable stand-in of ``AgentJetJob`` to use as an oracle.

``write_reference_checkout`` lays out an AgentJet c68c154f tree: the three YAML layers from the c68c154
reference (``tests/fixtures/agentjet-reference/``) plus ``ajet/__init__.py``, ``pyproject.toml`` and three
Python modules written for this project from AgentJet's documented facts at that commit: ``ajet/copilot/job.py``
(AgentJetJob's signature, overrides table and construction steps), the config dataclasses and the
swarm rollout's thread rule. None of it is AgentJet's code.

The product only ever reads these modules statically. Tests also *run* the stand-in ``job.py`` with
real Hydra, OmegaConf and dataclasses (:func:`reference_dump`): it stands in for AgentJet's own
``AgentJetJob``, which cannot run here. It is checked against the real goldens byte for byte before any
test trusts it for cases the goldens do not cover.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.tmp_dirs import process_tmp_dir

ARCHIVE = REPO / "tests" / "fixtures" / "agentjet-reference" / "c68c154.tar.xz"  # see the README beside it


def _unpacked(archive: Path) -> Path:
    """The reference archive unpacked once for this process, into a folder removed at exit."""
    folder = Path(process_tmp_dir("ajs-ref-"))
    with tarfile.open(archive, "r:xz") as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4: plain files and folders only
            tar.extractall(folder, filter="data")
        else:
            tar.extractall(folder)  # noqa: S202  (our own archive, in this repository)
    return folder / archive.name.split(".")[0]


REFERENCE = _unpacked(ARCHIVE)
GOLDENS = REFERENCE / "goldens"
REFERENCE_COMMIT = "c68c154f9653233ded73867c9e0553d53ca4ac30"
REFERENCE_DATE = "2026-05-26T17:07:00+08:00"
REFERENCE_REPO = "modelscope/AgentJet"

LAYER_FILES = {
    "ajet_swarm_default.yaml": "ajet/default_config/ajet_swarm_default.yaml",
    "ajet_default.yaml": "ajet/default_config/ajet_default.yaml",
    "verl/verl_default.yaml": "ajet/default_config/verl/verl_default.yaml",
}
#: The defaults and hydra blocks a base needs (as yaml.dump writes them), to append to a test base's own keys.
TAIL = ("hydra:\n  searchpath:\n  - file://ajet/default_config\n  - file://ajet/default_config/verl\n"
        "defaults:\n- verl_default\n- ajet_default\n- _self_\n")

# --- the fact sheet's tables, as code --------------------------------------------------------------------

#: Signature order (fact sheet: "The rows follow the signature order").
SIGNATURE_ROWS = [
    ("experiment_dir", "ajet.experiment_dir"),
    ("project_name", "ajet.project_name"),
    ("experiment_name", "ajet.experiment_name"),
    ("logging", "ajet.trainer_common.logger"),
    ("n_gpu", "ajet.trainer_common.n_gpus_per_node"),
    ("nnodes", "ajet.trainer_common.nnodes"),
    ("model", "ajet.model.path"),
    ("algorithm", "ajet.trainer_common.algorithm.adv_estimator"),
    ("num_repeat", "ajet.rollout.num_repeat"),
    ("batch_size", "ajet.data.train_batch_size"),
    ("swarm_mode", "ajet.enable_swarm_mode"),
    ("swarm_mode_sample_collection_method", "ajet.swarm_mode_sample_collection_method"),
    ("max_env_worker", "ajet.rollout.max_env_worker"),
    ("backbone", "ajet.backbone"),
    ("max_prompt_length", "ajet.data.max_prompt_length"),
    ("max_response_length", "ajet.data.max_response_length"),
    ("max_response_length_in_one_turn", "ajet.rollout.max_response_length_in_one_turn"),
    ("max_model_len", "ajet.rollout.max_model_len"),
    ("tensor_model_parallel_size", "ajet.rollout.tensor_model_parallel_size"),
    ("max_num_seqs", "ajet.rollout.max_num_seqs"),
    ("mini_batch_num", "ajet.trainer_common.mini_batch_num"),
    ("lora_rank", "ajet.lora.lora_rank"),
    ("lora_alpha", "ajet.lora.lora_alpha"),
    ("lora_target_modules", "ajet.lora.target_modules"),
    ("lora_load_format", "ajet.lora.load_format"),
    ("layered_summon", "ajet.lora.layered_summon"),
    ("gpu_memory_utilization", "ajet.rollout.gpu_memory_utilization"),
    ("lr", "ajet.trainer_common.optim.lr"),
    ("ppo_epochs", "ajet.trainer_common.ppo_epochs"),
    ("use_kl_loss", "ajet.trainer_common.use_kl_loss"),
    ("use_kl_in_reward", "ajet.trainer_common.use_kl_in_reward"),
    ("kl_penalty_type", "ajet.trainer_common.kl_penalty_type"),
    ("compute_madness_checklist", "ajet.rollout.compute_madness_checklist"),
    ("val_print_to_markdown_file_path", "ajet.trainer_common.val_print_to_markdown_file_path"),
    ("train_print_to_markdown_file_path", "ajet.trainer_common.train_print_to_markdown_file_path"),
    ("total_training_steps", "ajet.trainer_common.total_training_steps"),
    ("timeline_compare_level", "ajet.context_tracker.timeline_merging_policy.timeline_compare_level"),
]


def table_order(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The order AgentJetJob walks the table: ``model`` right after ``logging``, ``total_training_steps``
    before the two markdown-path kwargs."""
    names = [name for name, _ in rows if name not in ("model", "total_training_steps")]
    names.insert(names.index("logging") + 1, "model")
    names.insert(names.index("val_print_to_markdown_file_path"), "total_training_steps")
    keys = dict(rows)
    return [(name, keys[name]) for name in names]


TABLE_ROWS = table_order(SIGNATURE_ROWS)


def job_py(rows: list[tuple[str, str]] = SIGNATURE_ROWS, table: list[tuple[str, str]] | None = None) -> str:
    """A stand-in ``ajet/copilot/job.py`` with this signature and table (see the module docstring)."""
    table = table_order(rows) if table is None else table
    params = "".join(f"        {name}=None,\n" for name, _ in rows)
    entries = "".join(f"            {name!r}: {key!r},\n" for name, key in table)
    return JOB_TEMPLATE.replace("@PARAMS@", params).replace("@TABLE@", entries)


JOB_TEMPLATE = '''"""Test stand-in for AgentJetJob, written from the c68c154f fact sheet (not AgentJet's code)."""

import dataclasses
import importlib.util
import os
import sys
import tempfile
from datetime import datetime

import yaml

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LENGTHS = ("max_prompt_length", "max_response_length", "max_model_len", "max_response_length_in_one_turn")


def _schema():
    path = os.path.join(_PACKAGE, "default_config", "ajet_config_schema.py")
    name = "_standin_schema_" + str(abs(hash(path)))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _apply(obj, data):
    for key, value in data.items():
        current = getattr(obj, key, None) if isinstance(key, str) else None
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            _apply(current, value)
        else:
            setattr(obj, key, value)


def _to_dict(obj):
    return {k: (_to_dict(v) if dataclasses.is_dataclass(v) else v) for k, v in vars(obj).items()}


def _compose(raw):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    with tempfile.TemporaryDirectory(prefix="standin-") as folder:  # removed again: tests leave /tmp as found
        handle = tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=folder, delete=False)
        with handle:
            yaml.dump(raw, handle)
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=folder, version_base=None):
            cfg = compose(config_name=os.path.basename(handle.name))
        return yaml.safe_load(OmegaConf.to_yaml(cfg))


class AgentJetJob:
    def __init__(
        self,
        ensure_new_experiment=False,
        base_yaml_config=None,
@PARAMS@    ):
        given = dict(locals())
        overrides = {
@TABLE@        }
        if base_yaml_config is None:
            base_yaml_config = os.path.join(_PACKAGE, "default_config", "ajet_swarm_default.yaml")
        if not os.path.exists(base_yaml_config):
            raise ValueError("Configuration yaml is absent!")
        lengths = [given[k] for k in _LENGTHS]
        if any(v is None for v in lengths) and not all(v is None for v in lengths):
            raise ValueError("(`max_prompt_length`, `max_response_length`, `max_model_len`, "
                             "`max_response_length_in_one_turn`) must all be None or all be non-None")
        with open(base_yaml_config, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
        config_as_dict = _compose(raw)
        config_as_dict["defaults"] = raw["defaults"]
        config_as_dict["hydra"] = raw["hydra"]
        self.config = _schema().Config()
        _apply(self.config, config_as_dict)

        if ensure_new_experiment:
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
            if given["experiment_name"] is not None:
                given["experiment_name"] = f"{given['experiment_name']}_{stamp}"
            elif self.config.ajet.experiment_name != "read_yaml_name":
                given["experiment_name"] = f"{self.config.ajet.experiment_name}_{stamp}"
        for kwarg, key in overrides.items():
            *parents, leaf = key.split(".")
            node = self.config
            for part in parents:
                node = getattr(node, part)
            current = getattr(node, leaf)
            if given[kwarg] is not None:
                setattr(node, leaf, given[kwarg])
            setattr(self, kwarg, given[kwarg] if given[kwarg] is not None else current)

        ajet = self.config.ajet
        assert ajet.data.max_prompt_length + ajet.data.max_response_length <= ajet.rollout.max_model_len, \\
            "illegal token length"
        assert ajet.rollout.max_response_length_in_one_turn <= ajet.data.max_response_length
        if ajet.lora.lora_rank > 0:
            if ajet.lora.load_format != "safetensors":
                raise ValueError("When lora_rank > 0, lora_load_format must be 'safetensors', "
                                 f"got {ajet.lora.load_format!r}")
            if not ajet.lora.layered_summon:
                raise ValueError("When lora_rank > 0, layered_summon must be True")
            if ajet.trainer_common.optim.lr is None:
                raise ValueError("lr must be set for lora training")
            if ajet.trainer_common.optim.lr <= 1e-5:
                raise ValueError("lr should usually be greater than 1e-5 for lora training, "
                                 f"got {ajet.trainer_common.optim.lr}")
        if ajet.trainer_common.nnodes > 1 and ajet.enable_swarm_mode:
            ajet.interchange_server.interchange_method = "tcp"
        if ajet.backbone == "trinity":
            raise NotImplementedError("trinity")

    def dump_job_as_yaml(self):
        return yaml.safe_dump(_to_dict(self.config), sort_keys=False)
'''

SCHEMA_PY = '''"""Test stand-in for AgentJet's config dataclasses at c68c154f (fields from the fact sheet)."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


@dataclass
class AjetModel:
    path: str = "/path/to/model/such/as/Qwen/Qwen2___5-14B-Instruct"


@dataclass
class AjetData:
    max_prompt_length: int = 3000
    max_response_length: int = 15000
    train_batch_size: int = 32


@dataclass
class AjetRollout:
    user_workflow: str = "tutorial.example_appworld.appworld->ExampleAgentScopeWorkflow"
    n_vllm_engine: int = 1
    tensor_model_parallel_size: int = 1
    max_num_seqs: int = 64
    num_repeat: int = 8
    gpu_memory_utilization: float = 0.85
    compute_madness_checklist: List[str] = field(default_factory=list)


@dataclass
class AjetAlgorithm:
    adv_estimator: str = "grpo"


@dataclass
class AjetOptim:
    lr: float = 1e-6


@dataclass
class AjetTrainerCommon:
    n_gpus_per_node: int = 8
    nnodes: int = 1
    algorithm: AjetAlgorithm = field(default_factory=AjetAlgorithm)
    optim: AjetOptim = field(default_factory=AjetOptim)
    use_kl_loss: bool = True
    use_kl_in_reward: bool = False
    kl_penalty_type: str = "kl"
    ppo_epochs: int = 1
    val_print_to_markdown_file_path: Optional[str] = None
    train_print_to_markdown_file_path: Optional[str] = None
    total_training_steps: Optional[int] = None
    test_freq: int = 20
    save_freq: int = 20
    total_epochs: int = 50
    val_pass_n: int = 4
    val_before_train: bool = False
    loss_weight_normalization_episode_level: bool = False
    advantage_estimation_episode_level: bool = False


@dataclass
class HuggingfaceDatRepo:
    dataset_path: str = "gsm8k"
    dataset_name: Optional[str] = None
    training_split: str = "train"
    validation_split: str = "validation"
    http_proxy_address: str = ""


@dataclass
class JsonlTrainingFp:
    file_path: str = ""


@dataclass
class JsonlDatasetFile:
    training: JsonlTrainingFp = field(default_factory=JsonlTrainingFp)
    validation: JsonlTrainingFp = field(default_factory=JsonlTrainingFp)


@dataclass
class AjetTaskReader:
    type: str = "huggingface_dat_repo"
    huggingface_dat_repo: HuggingfaceDatRepo = field(default_factory=HuggingfaceDatRepo)
    jsonl_dataset_file: JsonlDatasetFile = field(default_factory=JsonlDatasetFile)


@dataclass
class AjetLora:
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str = "all-linear"
    load_format: str = "auto"
    layered_summon: bool = False


@dataclass
class AjetTimelineMergingPolicy:
    timeline_compare_level: str = "text"
    ignore_tools: bool = True


@dataclass
class AjetContextTracker:
    timeline_merging_policy: AjetTimelineMergingPolicy = field(default_factory=AjetTimelineMergingPolicy)


@dataclass
class AjetInterchangeServer:
    interchange_method: str = "ipc"
    interchange_server_port: Any = "auto"
    num_fastapi_process: int = 1
    max_fastapi_threads: int = 512
    max_inference_tracker_threads: int = 256
    already_started: bool = False


@dataclass
class AjetDefaultConfig:
    project_name: str = "ajet_default_project"
    experiment_name: str = "read_yaml_name"
    experiment_dir: str = "auto"
    backbone: str = "debug"
    model: AjetModel = field(default_factory=AjetModel)
    data: AjetData = field(default_factory=AjetData)
    rollout: AjetRollout = field(default_factory=AjetRollout)
    trainer_common: AjetTrainerCommon = field(default_factory=AjetTrainerCommon)
    trainer_verl: Dict[str, Any] = field(default_factory=dict)
    task_reader: AjetTaskReader = field(default_factory=AjetTaskReader)
    lora: AjetLora = field(default_factory=AjetLora)
    context_tracker: AjetContextTracker = field(default_factory=AjetContextTracker)
    enable_swarm_mode: bool = True
    swarm_mode_sample_collection_method: str = "rollout_until_finish_enough_tasks"
    execute_test: bool = False
    interchange_server: AjetInterchangeServer = field(default_factory=AjetInterchangeServer)


@dataclass
class Config:
    ajet: AjetDefaultConfig = field(default_factory=AjetDefaultConfig)
'''

ROLLOUT_CEIL = '''"""Test stand-in for the swarm rollout's task-group rule (fact sheet: this commit uses ceil)."""

import math


class ParallelEnvWorkers:
    def rollout_swarm(self, tasks, max_parallel, rollout_n):
        n_task = min(len(tasks), math.ceil(max_parallel / rollout_n))
        assert n_task > 0, "n_task = min(len(tasks), max_parallel // rollout_n) must be positive"
        return n_task * rollout_n
'''

ROLLOUT_FLOOR = '''"""Test stand-in for an older swarm rollout that floor-divides."""


class ParallelEnvWorkers:
    def rollout_swarm(self, tasks, max_parallel, rollout_n):
        n_task = min(len(tasks), max_parallel // rollout_n)
        return n_task * rollout_n
'''


def write_reference_checkout(root: Path, *, version: str = "0.1.0", job: str | None = None,
                             schema: str | None = SCHEMA_PY, rollout: str | None = ROLLOUT_CEIL,
                             layers: bool = True, swarm_default: bool = True) -> Path:
    """An AgentJet c68c154f checkout at ``root`` (pass None to leave a module out)."""
    pkg = root / "ajet"
    pkg.mkdir(parents=True, exist_ok=True)
    if layers:
        for source, rel in LAYER_FILES.items():
            if rel.endswith("ajet_swarm_default.yaml") and not swarm_default:
                continue
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REFERENCE / source, root / rel)
    (pkg / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (root / "pyproject.toml").write_text('[project]\nname = "agentjet"\nversion = "0.0.4"\n')
    for rel, text in (("copilot/job.py", job_py() if job is None else job),
                      ("default_config/ajet_config_schema.py", schema),
                      ("task_rollout/native_parallel_worker.py", rollout)):
        if text:
            (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
            (pkg / rel).write_text(text)
    return root


def goldens() -> list[dict[str, Any]]:
    return json.loads((GOLDENS / "cases.json").read_text())


# --- running the stand-in -----------------------------------------------------------------------------------


@contextmanager
def chdir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _job_class(checkout: Path) -> Any:
    path = checkout / "ajet" / "copilot" / "job.py"
    name = f"_standin_job_{abs(hash(str(path)))}_{path.stat().st_mtime_ns}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name].AgentJetJob


def reference_dump(checkout: Path, kwargs: dict[str, Any], base_yaml: str | None = None,
                   writes: dict[str, Any] | None = None) -> str:
    """Run the stand-in AgentJetJob from the checkout root (as the goldens were made) and dump it.

    Writes are assigned as attributes on dataclass sections and as items in plain dicts. Raises what the
    stand-in raises."""
    import dataclasses

    job_class = _job_class(checkout)
    with chdir(checkout):
        args = dict(kwargs)
        if base_yaml is not None:
            args["base_yaml_config"] = base_yaml
        job = job_class(**args)
        for key, value in (writes or {}).items():
            *parents, leaf = key.split(".")
            node: Any = job.config
            for part in parents:
                node = node[part] if isinstance(node, dict) else getattr(node, part)
            if isinstance(node, dict):
                node[leaf] = value
            else:
                assert dataclasses.is_dataclass(node) or hasattr(node, "__dict__")
                setattr(node, leaf, value)
        return job.dump_job_as_yaml()


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def make_fake_agentjet(root: Path, *, version: str = "0.1.0", job_py: str | None = None,
                       schema_py: str | None = None, rollout_py: str | None = None) -> Path:
    """A reference checkout with some modules replaced (an older ``job.py``, another schema...)."""
    return write_reference_checkout(root, version=version, job=job_py, schema=schema_py or SCHEMA_PY,
                                    rollout=rollout_py or ROLLOUT_CEIL)
