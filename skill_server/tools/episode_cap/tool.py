"""episode_cap: the exact ceiling of overwatch's "Running Episodes" gauge, which bound binds, which knob lifts it.

The settings come from the numbers given or from the artifact the user holds, one per call: an engine YAML
(``yaml``), a client script resolved statically as check_config resolves it (``script``), or a live swarm
server's dumped config (``url`` / ``id``, read through the ``skill_server.swarm`` service). A number given
with an artifact overrides the artifact's value, and the answer says so. Values the artifact leaves unknown
are listed with the reason; a cap that depends on one is refused rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from skill_server.agentjet.cap import episode_cap_for
from skill_server.agentjet.keys import KEYS
from skill_server.agentjet.swarm_api import ROUTE_EXPERIMENT_DIR, ROUTE_POOL
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.fsutil import resolve_directory, resolve_path
from skill_server.core.models import Progress
from skill_server.tools.episode_cap.models import (
    CapSource,
    EpisodeCapAnswer,
    EpisodeCapInput,
    EpisodeCapQuery,
    EpisodeCapResult,
    UnknownSetting,
)

if TYPE_CHECKING:
    from skill_server.analysis.script.model import ScriptScan

#: The settings the cap reads, in the order the answer lists them.
NAMES = ("max_env_worker", "num_repeat", "train_batch_size", "max_inference_tracker_threads")
#: Without these the cap cannot be computed (train_batch_size absent means "no batch bound").
REQUIRED = ("max_env_worker", "num_repeat")
#: What a planned batch must suit (the trainer needs batch x num_repeat to be a multiple of GPUs x nodes).
WORLD = ("n_gpus_per_node", "nnodes")
SourceKind = Literal["yaml", "script", "server"]


@dataclass
class Found:
    """What an artifact says: a value and its place per setting, or why a setting is unknown."""

    kind: SourceKind
    what: str  # the artifact, for the summary: a file, a script, a server
    values: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (value, place)
    unknown: dict[str, str] = field(default_factory=dict)  # name -> why
    notes: list[str] = field(default_factory=list)
    refusal: str | None = None  # why AgentJet would stop before the engine ever ran this config
    parallelism: tuple[int, str] | None = None  # what this client runs at once (its one pool), and where
    world_size: int | None = None  # n_gpus_per_node x nnodes, when the artifact says both


def compute_episode_cap(inp: EpisodeCapInput, progress: Progress | None = None) -> EpisodeCapResult:
    """Compute the cap under the selected AgentJet and say which knob moves it (and, with an artifact, where
    each input came from)."""
    from skill_server.agentjet.release import select_agentjet

    source = inp.source if isinstance(inp, EpisodeCapQuery) else None
    if source is None:
        base = episode_cap_for(inp, select_agentjet(inp.agentjet_version, inp.agentjet_root))
        return EpisodeCapAnswer(**base.model_dump(), inputs=_merge(inp, None)[1], unknown=[])
    assert isinstance(inp, EpisodeCapQuery)
    found = _read_artifact(inp, source)
    numbers, inputs = _merge(inp, found)
    missing = [name for name in REQUIRED if name not in numbers]
    if missing:
        raise ToolInputError(_missing_message(found, missing), field=source)
    cwd = resolve_directory(inp.cwd, field="cwd") if inp.cwd is not None else None
    release = select_agentjet(inp.agentjet_version, inp.agentjet_root, cwd=cwd)
    base = episode_cap_for(EpisodeCapInput(
        max_env_worker=numbers["max_env_worker"], num_repeat=numbers["num_repeat"],
        train_batch_size=numbers.get("train_batch_size"), client_parallelism=_parallelism(inp, found),
        max_inference_tracker_threads=numbers.get("max_inference_tracker_threads"), target=inp.target,
        thread_rule=inp.thread_rule), release, world_size=found.world_size)
    unknown = [UnknownSetting(name=n, key=KEYS[n], reason=why) for n, why in found.unknown.items() if n not in numbers]
    answer = EpisodeCapAnswer(**base.model_dump(), inputs=inputs, unknown=unknown)
    answer.summary = _summary(base.summary, found, inputs)
    notes = [*found.notes, *([found.refusal] if found.refusal else [])]
    if notes:
        answer.explanation += " " + " ".join(notes)
    return answer


def _summary(line: str, found: Found, inputs: list[CapSource]) -> str:
    given = [i.name for i in inputs if i.source == "argument" and i.overrides is not None]
    tail = f" Settings from {found.what}"
    if given:
        tail += f" ({', '.join(given)} given, overriding it)"
    line += tail + "."
    if found.refusal:
        line += " But AgentJet refuses this script as written (check_config says why and how to fix it)."
    return line


def _merge(inp: EpisodeCapInput, found: Found | None) -> tuple[dict[str, int], list[CapSource]]:
    """The numbers the cap uses: an argument wins over the artifact (if any), and says what it replaced."""
    numbers: dict[str, int] = {}
    inputs: list[CapSource] = []
    for name in NAMES:
        given = inp.group_size if name == "num_repeat" and (inp.num_repeat or inp.grpo_n) else getattr(inp, name)
        read = found.values.get(name) if found is not None else None
        if given is not None:
            numbers[name] = given
            overrides = f"{read[0]} at {read[1]}" if read is not None and read[0] != given else None
            inputs.append(CapSource(name=name, key=KEYS[name], value=given, source="argument", place="given",
                                    overrides=overrides))
        elif read is not None and found is not None:
            numbers[name] = read[0]
            inputs.append(CapSource(name=name, key=KEYS[name], value=read[0], source=found.kind, place=read[1]))
    if inp.client_parallelism is not None:
        read_pool = found.parallelism if found is not None else None
        inputs.append(CapSource(name="client_parallelism", key="client_parallelism",
                                value=inp.client_parallelism, source="argument", place="given",
                                overrides=f"{read_pool[0]} at {read_pool[1]}" if read_pool else None))
    elif found is not None and found.parallelism is not None:
        inputs.append(CapSource(name="client_parallelism", key="client_parallelism", value=found.parallelism[0],
                                source=found.kind, place=found.parallelism[1]))
    return numbers, inputs


def _parallelism(inp: EpisodeCapInput, found: Found) -> int | list[int] | None:
    """What the clients run at once: the argument, else the one pool the script builds."""
    if inp.client_parallelism is not None:
        return inp.client_parallelism
    return found.parallelism[0] if found.parallelism is not None else None


def _missing_message(found: Found, missing: list[str]) -> str:
    parts = [f"{n} ({found.unknown[n]})" if n in found.unknown else f"{n} (not in it)" for n in missing]
    return (f"the cap cannot be computed from {found.what}: {'; '.join(parts)}; give "
            f"{' and '.join(missing)}")[:1500]


# ----------------------------------------------------------------------------------------------- artifacts

def _read_artifact(inp: EpisodeCapQuery, source: str) -> Found:
    if source == "script":
        return _from_script(inp)
    if source == "yaml":
        assert inp.yaml is not None
        cwd = resolve_directory(inp.cwd, field="cwd") if inp.cwd is not None else None
        return _from_yaml(resolve_path(inp.yaml, field="yaml", base=cwd), "yaml", "yaml")
    return _from_server(inp, source)


def _from_yaml(path: Path, field: str, kind: SourceKind) -> Found:
    from skill_server.core.safe_yaml import load_yaml_file
    from skill_server.swarm.config import read_settings

    settings = read_settings(path, field=field)
    found = Found(kind, str(path))
    found.world_size = _world(load_yaml_file(path, field=field))
    for name in NAMES:
        value = settings.values.get(name)
        if isinstance(value, int):
            found.values[name] = (value, settings.where(name))
        else:
            found.unknown[name] = f"{KEYS[name]} is not in {path.name}"
    return found


def _from_script(inp: EpisodeCapQuery) -> Found:
    from skill_server.analysis.analyse import analyse_arguments
    from skill_server.analysis.settings import settings_of

    assert inp.script is not None
    _, analysis = analyse_arguments(inp.script, inp.yaml, inp.cwd, inp.agentjet_version, inp.agentjet_root)
    runs = settings_of(analysis, (*NAMES, *WORLD))
    found = Found("script", inp.script if not inp.yaml else f"{inp.script} on {inp.yaml}")
    if len(runs) > 1:
        shown = {tuple(s.value for s in run.settings.values()) for run in runs}
        if len(shown) > 1:
            lines = ", ".join(str(run.line) for run in runs)
            raise ToolInputError(f"the script builds {len(runs)} AgentJetJobs (lines {lines}) with different "
                                 "settings; give the numbers of the one the engine runs, or its yaml_backup.yaml",
                                 field="script")
        found.notes.append(f"The script builds {len(runs)} AgentJetJobs with the same settings.")
    if analysis.runs and analysis.runs[0].construction is None:
        found.notes.append("The script builds no AgentJetJob: AgentJet's defaults (or the yaml) were read.")
    if runs[0].refusals:
        found.refusal = f"AgentJet refuses this construction: {runs[0].refusals[0]}"[:600]
    _read_pools(analysis.session.scan, found)
    world = {name: runs[0].settings.pop(name).value for name in WORLD}
    found.world_size = _world({"ajet": {"trainer_common": world}})
    for name, setting in runs[0].settings.items():
        if setting.unknown is not None:
            found.unknown[name] = setting.unknown
        elif isinstance(setting.value, int) and not isinstance(setting.value, bool) and setting.value > 0:
            place = setting.place + (f" (assuming {'; '.join(setting.assumes)})" if setting.assumes else "")
            found.values[name] = (setting.value, place)
        else:
            found.unknown[name] = f"{setting.value!r} at {setting.place} is not a positive integer"
    return found


def _read_pools(scan: ScriptScan | None, found: Found) -> None:
    """The client's own bound (``analysis.concurrency``): the pool that runs its episodes, assumed to be the
    only client; several candidate pools, or one whose size is unknown, are said and not used."""
    from skill_server.analysis.concurrency import client_bound

    bound = client_bound(scan)
    if bound.threads is not None:
        found.parallelism = (bound.threads, f"{bound.place}, assuming {'; '.join(bound.assumes)}")
    else:
        found.notes.append(f"The clients' own bound is not included: {bound.why}; give client_parallelism for it.")


def _world(data: Any) -> int | None:
    """GPUs per node x nodes of a config (None unless both are positive ints)."""
    from skill_server.core.trees import get_path

    gpus, nodes = (get_path(data, f"ajet.trainer_common.{k}", None) for k in WORLD)
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (gpus, nodes)):
        return int(gpus) * int(nodes)
    return None


def _from_server(inp: EpisodeCapQuery, source: str) -> Found:
    """The settings of the config the server's engine dumped, then what its pool publishes for the rest."""
    from skill_server.swarm.config import locate_dump, read_dumped, read_settings
    from skill_server.swarm.links import ExperimentLink, experiment_server
    from skill_server.swarm.read import int_or_none, read_servers

    link: ExperimentLink | None = None
    if inp.id is not None:
        link = experiment_server(inp.id)
        url = link.url
    else:
        assert inp.url is not None
        url = inp.url
    raw = read_servers([url], inp.timeout_s, with_experiment_dir=True)[0]
    if not isinstance(raw.engine, dict) and not isinstance(raw.pool, dict):
        raise ToolFailure(f"could not read the swarm server at {url}: {raw.engine}; give yaml or the numbers")
    where = locate_dump(url, raw.experiment_dir, link)
    found = Found("server", f"the server at {url}")
    why: str | None = None
    if where.problem is not None:
        why = where.problem[1]
    elif where.path is None:
        why = (f"the server has not started an experiment yet ({ROUTE_EXPERIMENT_DIR} names none), so it has dumped "
               "no config")
    else:
        settings = read_dumped(where.path, lambda p: read_settings(p, field=source))
        if isinstance(settings, str):
            why = settings
        else:
            found.what = f"{where.path} (the config the engine at {url} dumped)"
            for name in NAMES:
                value = settings.values.get(name)
                if isinstance(value, int):
                    found.values[name] = (value, settings.where(name))
    pool: dict[str, Any] = raw.pool if isinstance(raw.pool, dict) else {}
    published = {"num_repeat": "task_expected_num_repeat", "train_batch_size": "completed_task_target"}
    for name, route_field in published.items():
        value, _ = int_or_none(pool.get(route_field))
        if name not in found.values and value:
            found.values[name] = (value, f"{url}{ROUTE_POOL} ({route_field})")
    for name in NAMES:
        if name not in found.values:
            found.unknown[name] = why or f"{KEYS[name]} is not in the dumped config"
    return found
