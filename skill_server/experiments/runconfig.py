"""What a run's training YAML says: total steps, where checkpoints go, and the flattened config for comparisons.

The YAML of a run is the blueprint's ``[exp_yaml_path]`` or a ``--conf PATH`` argument of one of its
commands (resolved against that process's workdir, read on that process's host). It is read through
the host layer (regular files only, bounded) and parsed with the project's bounded YAML loader, never
executed. What status needs from it is cached in the registry's ``run_configs`` table, so the file is
read again only while something is still unknown, at most every ``RECHECK_S`` seconds.

Checkpoints: verl writes ``<default_local_dir>/global_step_N/``; AgentJet sets ``default_local_dir`` to
``<checkpoint_base_dir>/<project_name>/<experiment_name>`` (``ajet.trainer_common.checkpoint_base_dir``,
relative to the trainer's working directory), so the listing is the config's own experiment's, never another
experiment's under the same base. When the YAML does not set the base or the project, their defaults are read
from the newest bundled AgentJet release's ``ajet_default.yaml`` and the source names that release; an
experiment_name left to AgentJet (``read_yaml_name``: it appends the launch time) lists the project's folder and
says so. A dumped YAML's ``trainer.default_local_dir`` interpolation (``${trainer.checkpoint_base_dir}/...``) is
resolved from the same YAML.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skill_server.core import trees
from skill_server.core.errors import ToolInputError
from skill_server.core.jsonsafe import json_number
from skill_server.core.safe_yaml import MAX_YAML_BYTES, parse_yaml_text
from skill_server.core.text import shorten
from skill_server.experiments.fixes import LENGTH_KEYS
from skill_server.experiments.progress import MAX_STEPS
from skill_server.experiments.store import Registry, Row
from skill_server.hosts import client

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import ReadReply

#: Re-read a YAML that left something unknown at most this often.
RECHECK_S = 300.0
#: Most YAML candidates read for one run.
MAX_CANDIDATES = 4
#: The AgentJet layer that holds ``ajet.trainer_common.checkpoint_base_dir``'s default.
AGENTJET_DEFAULT_LAYER = "ajet/default_config/ajet_default.yaml"
CHECKPOINT_BASE_KEY = "ajet.trainer_common.checkpoint_base_dir"
#: Flattening bounds: keys kept, nesting followed, characters of one value shown.
MAX_FLAT_KEYS = 20_000
MAX_FLAT_DEPTH = 32
MAX_VALUE_CHARS = 200


@dataclass(frozen=True)
class Candidate:
    """A YAML path on a host, and the directory relative paths inside it resolve against."""

    host: str
    path: str
    workdir: str


def candidates(row: Row) -> list[Candidate]:
    """The run's YAML candidates: the blueprint's yaml_path first, then each ``--conf`` argument."""
    out: list[Candidate] = []
    procs = row.processes
    first_workdir = procs[0].workdir if procs else row.spec.workdir
    yaml_path = row.spec.yaml_path
    if yaml_path is not None and yaml_path.startswith(("/", "~")):
        out.append(Candidate(row.host, yaml_path, first_workdir))
    for p in procs:
        for token in conf_arguments(p.command):
            path = token if token.startswith(("/", "~")) else posixpath.normpath(posixpath.join(p.workdir, token))
            out.append(Candidate(p.host, path, p.workdir))
    unique: list[Candidate] = []
    for c in out:
        if all((c.host, c.path) != (u.host, u.path) for u in unique):
            unique.append(c)
    return unique[:MAX_CANDIDATES]


def conf_arguments(command: str) -> list[str]:
    """The values of ``--conf X`` / ``--conf=X`` in a shell command (words as the shell splits them)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return []
    found = []
    for i, word in enumerate(words):
        if word == "--conf" and i + 1 < len(words):
            found.append(words[i + 1])
        elif word.startswith("--conf="):
            found.append(word[len("--conf="):])
    return [w for w in found if w and "\x00" not in w]


def read_op(path: str) -> client.Op[ReadReply]:
    """Reading a YAML candidate: one byte over the limit, so a file over it is seen to be."""
    return client.read(path, MAX_YAML_BYTES + 1, text=True)


#: Most bytes of a model's config.json read (they are a few KiB).
MAX_MODEL_CONFIG_BYTES = 256 * 1024


def model_read(row: Row, config: dict[str, Any]) -> tuple[str, client.Op[ReadReply]] | None:
    """Reading the run's model ``config.json`` on its host (once: its KV shape is cached with the YAML's
    summary), when the YAML names a local model folder and the shape is not known yet."""
    path = config.get("model_path")
    if not isinstance(path, str) or "model_kv" in config or config.get("model_kv_problem"):
        return None
    return row.host, client.read(posixpath.join(path, "config.json"), MAX_MODEL_CONFIG_BYTES + 1, text=True)


def absorb_model(config: dict[str, Any], result: client.Result) -> None:
    """The model's KV shape (``fixes.model_kv``) from the answer to :func:`model_read`, or why there is none."""
    from skill_server.experiments.fixes import model_kv

    where = posixpath.join(str(config.get("model_path")), "config.json")
    answer = client.answer(result, client.read)
    if not answer["ok"] or answer["size"] > MAX_MODEL_CONFIG_BYTES:
        config["model_kv_problem"] = f"{where}: {answer['error'] if not answer['ok'] else 'too large'}"
        return
    try:
        shape = model_kv(json.loads(answer.get("text", "")))
    except (ValueError, RecursionError):
        shape = None
    if shape is None:
        config["model_kv_problem"] = f"{where} does not give layers, KV heads, head size and dtype"
    else:
        config["model_kv"] = {**shape, "source": where}


def parse_answer(candidate: Candidate, result: client.Result) -> tuple[Any, str | None]:
    """(parsed YAML or None, why not) from the host's answer to ``read_op``."""
    answer = client.answer(result, client.read)
    if not answer["ok"]:
        return None, f"{candidate.path}: {answer['error']}"
    if answer["size"] > MAX_YAML_BYTES:
        return None, f"{candidate.path} is over {MAX_YAML_BYTES // (1024 * 1024)} MiB; not read"
    try:
        return parse_yaml_text(answer.get("text", ""), field="yaml_path", source=candidate.path), None
    except ToolInputError as exc:
        return None, f"could not read {candidate.path}: {exc.message}"


def _get(data: Any, dotted: str) -> Any:
    return trees.get_path(data, dotted, None)


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 < value <= MAX_STEPS else None


def _plain(value: Any) -> str | None:
    """A usable path or name: a non-empty string without interpolation (``${...}``) or NUL."""
    if isinstance(value, str) and value.strip() and "${" not in value and "\x00" not in value:
        return value.strip()
    return None


def agentjet_checkpoint_base() -> tuple[str | None, str]:
    """(the default checkpoint_base_dir, which AgentJet says so): the newest bundled release's default layer.
    Imported here, not at the top: only a YAML that leaves the base unset needs AgentJet's data."""
    base, _, label = agentjet_checkpoint_defaults()
    return base, label


def agentjet_checkpoint_defaults() -> tuple[str | None, str | None, str]:
    """(the default checkpoint_base_dir, the default project_name, which AgentJet says so): the newest bundled
    release's default layer."""
    from skill_server.agentjet.release import newest_bundled

    release = newest_bundled()
    layer = release.config_file(AGENTJET_DEFAULT_LAYER)
    data = layer.data if layer is not None else None
    return _plain(_get(data, CHECKPOINT_BASE_KEY)), _plain(_get(data, "ajet.project_name")), release.label


#: The experiment_name AgentJet replaces at launch (with ``<yaml basename>_<time>``): not a folder's name.
EXPERIMENT_SENTINEL = "read_yaml_name"
_REFERENCE = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")


def _resolved(data: Any, value: Any) -> str | None:
    """A path whose ``${a.b}`` references name plain values of the same YAML, with them filled in (None: not a
    string, or a reference that does not resolve)."""
    if not isinstance(value, str) or "\x00" in value:
        return None
    text = _REFERENCE.sub(lambda m: _plain(_get(data, m.group(1))) or "${?}", value)
    return _plain(text)


def _ajet_checkpoints(candidate: Candidate, data: Any, out: dict[str, Any]) -> tuple[str, str] | None:
    """(directory, source) of an AgentJet YAML's checkpoints: ``<base>/<project>/<experiment>``, each part from the
    YAML or AgentJet's defaults (None: no default base to fall back on)."""
    base = _plain(_get(data, CHECKPOINT_BASE_KEY))
    project = _plain(_get(data, "ajet.project_name"))
    experiment = _plain(_get(data, "ajet.experiment_name"))
    source = f"{CHECKPOINT_BASE_KEY} in {candidate.path}"
    if base is None or project is None:
        default_base, default_project, release = agentjet_checkpoint_defaults()
        if base is None:
            if default_base is None:
                return None
            base = default_base
            source = f"the default checkpoint_base_dir of the bundled {release}; {candidate.path} does not set it"
        if project is None and default_project is not None:
            project = default_project
            source += f"; project_name {project}, {release}'s default"
    if project and experiment and experiment != EXPERIMENT_SENTINEL:
        return posixpath.join(base, project, experiment), source + " / ajet.project_name / ajet.experiment_name"
    if project:
        out["checkpoint_note"] = (f"experiment_name is not set (AgentJet names it <yaml name>_<launch time>): every "
                                  f"global_step_N folder of project {project} is listed, other experiments' included")
        return posixpath.join(base, project), source + " / ajet.project_name"
    out["checkpoint_note"] = ("project_name unknown: every global_step_N folder under the base directory is listed, "
                              "other experiments' included")
    return base, source


def summarise(candidate: Candidate, data: Any) -> dict[str, Any]:
    """What status needs from one parsed YAML: total steps and the checkpoint directory, with sources."""
    out: dict[str, Any] = {"host": candidate.host, "path": candidate.path}
    for key in ("ajet.trainer_common.total_training_steps", "trainer.total_training_steps"):
        total = _positive_int(_get(data, key))
        if total is not None:
            out["total_steps"], out["total_steps_source"] = total, f"{key} in {candidate.path}"
            break
    lengths = {name: value for name, key in LENGTH_KEYS.items()
               if isinstance(value := _get(data, key), (int, float)) and not isinstance(value, bool)}
    if lengths:
        out["lengths"] = lengths  # what a computed fix (experiments.fixes) reads
    model = _plain(_get(data, "ajet.model.path"))
    if model is not None and model.startswith("/"):
        out["model_path"] = model  # a local model folder: its config.json gives the KV shape (model_read_op)
    local_dir = _resolved(data, _get(data, "trainer.default_local_dir"))
    if local_dir:
        directory, source = local_dir, f"trainer.default_local_dir in {candidate.path}"
    elif isinstance(_get(data, "ajet"), dict):
        found = _ajet_checkpoints(candidate, data, out)
        if found is None:
            return out  # no default to fall back on: the directory stays unknown
        directory, source = found
    else:
        return out
    if not directory.startswith(("/", "~")):
        directory = posixpath.normpath(posixpath.join(candidate.workdir, directory))
    out["checkpoint_dir"], out["checkpoint_source"] = directory, source
    return out


# --------------------------------------------------------------------------------------------------
# the cache


def cached(reg: Registry, exp_id: str) -> tuple[float | None, dict[str, Any]]:
    """(when it was checked, what was found) for a run; (None, {}) when never checked."""
    values = reg.conn.execute("SELECT checked_at, data FROM run_configs WHERE exp_id = ?", (exp_id,)).fetchone()
    if values is None:
        return None, {}
    try:
        data = json.loads(values[1])
    except (TypeError, ValueError, RecursionError):
        return None, {}
    return float(values[0]), data if isinstance(data, dict) else {}


def store(reg: Registry, exp_id: str, data: dict[str, Any], now: float | None = None) -> None:
    reg.conn.execute("INSERT OR REPLACE INTO run_configs (exp_id, checked_at, data) VALUES (?, ?, ?)",
                     (exp_id, time.time() if now is None else now, json.dumps(data)))


def needs_check(checked_at: float | None, data: dict[str, Any], now: float) -> bool:
    """Read the YAML again? Never read yet, or something is still unknown and it was read a while ago."""
    if checked_at is None:
        return True
    complete = data.get("total_steps") is not None and data.get("checkpoint_dir") is not None
    return not complete and now - checked_at >= RECHECK_S


def fold_answers(row: Row, cands: list[Candidate], answers: list[client.Result]) -> dict[str, Any]:
    """One summary from the answers to ``read_op`` for each candidate: the first YAML that says a thing wins."""
    merged: dict[str, Any] = {"notes": []}
    for cand, answer in zip(cands, answers):
        data, problem = parse_answer(cand, answer)
        if problem:
            merged["notes"].append(problem)
            continue
        for key, value in summarise(cand, data).items():
            merged.setdefault(key, value)
    if not cands:
        merged["notes"].append("no training YAML known for this run (the blueprint's exp_yaml_path or a --conf "
                               "argument of its command)")
    return merged


# --------------------------------------------------------------------------------------------------
# flattening, for config differences


def flatten(data: Any) -> dict[str, Any]:
    """Dotted keys to leaf values (lists are leaves), bounded in keys and depth."""
    return trees.flatten(data, max_keys=MAX_FLAT_KEYS, max_depth=MAX_FLAT_DEPTH, root="(root)")


def shown(value: Any) -> Any:
    """A config value as JSON, long ones cut (the cut is marked)."""
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, (bool, int)) or value is None:
        return value
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return shorten(text, MAX_VALUE_CHARS)
