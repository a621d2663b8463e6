"""A run's spec: what its launch decided, typed, parsed once from the registry row's JSON.

``RunSpec.from_json`` reads the ``spec`` column (``store._row`` turns what it raises into that row's
``CorruptRow``); ``to_json`` gives back the JSON a launch writes, key for key and in the same order, so
registries written before and after this module read the same. Two shapes exist: format 2 (every launch
since runs could span hosts) records per host where the run lives (``hosts``) and per process its host
and wrapper identity; format 1 (one local host) kept ``run_dir`` and ``socket_path`` at the top level,
and its processes have no host. A key that is missing or null reads as its default; a value of the
wrong type makes the row unreadable rather than half-read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: How the registry names this machine (``hosts.LOCAL``).
LOCAL = "local"
FORMAT = 2
#: The largest max_time_s or first_step_timeout_s a row may hold (what JSON numbers carry exactly).
MAX_SECONDS = 2**53


@dataclass(frozen=True)
class HostRecord:
    """Where a run lives on one of its hosts."""

    run_dir: str
    socket_path: str
    attach: str  # the command a user types to watch the run's session there
    python: str | None  # the host agent's interpreter there
    session_id: str | None = None  # tmux's id of the run's session there (``$3``); None before it was recorded
    identity: str | None = None  # the host's ``host_identity()`` (host name plus machine-id digest)
    backend: str | None = None  # where the processes execute (``experiments.backends``): None is tmux, or "slurm"
    job_id: str | None = None  # a Slurm run's job id, once sbatch gave it


@dataclass(frozen=True)
class ProcessRecord:
    """One process as its launch recorded it (the wrapper's identity once it started)."""

    role: str
    command: str
    host: str
    workdir: str
    log_path: str
    wait_for_url: str | None
    window_id: str | None = None
    pane_id: str | None = None
    pid: int | None = None
    start: str | None = None


@dataclass(frozen=True)
class RayCluster:
    """A Ray cluster's run (``ray_cluster start``): its nodes, the port and address workers join, ray's path."""

    head: str
    workers: tuple[str, ...]
    port: int
    address: str
    ray: str | None


@dataclass(frozen=True)
class RunProcess:
    """One process of a run with where it lives resolved (its host's run directory and tmux socket)."""

    role: str
    command: str
    host: str
    workdir: str
    log_path: str
    wait_for_url: str | None
    run_dir: str
    socket_path: str
    pid: int | None
    start: str | None
    pane_id: str | None
    session_id: str | None = None
    job_id: str | None = None  # a Slurm run's job


@dataclass(frozen=True)
class RunSpec:
    host: str  # the main host: where results.md and finish.flag go
    result_dir: str
    workdir: str
    python: str | None
    blueprint: str | None
    yaml_path: str | None
    max_time_s: int | None
    first_step_timeout_s: int | None
    first_step_pattern: str | None
    hosts: Mapping[str, HostRecord]
    processes: tuple[ProcessRecord, ...]
    attach: str  # the first process's attach command
    ray_cluster: RayCluster | None = None
    format: int | None = FORMAT
    legacy_run_dir: str | None = None  # format 1
    legacy_socket_path: str | None = None  # format 1
    #: The attempt this run resumes, and the one that resumed it (a resume policy's chain: ``experiments.attempts``).
    previous_attempt: str | None = None
    next_attempt: str | None = None
    #: The processes with their run directory and socket resolved (computed once).
    resolved: tuple[RunProcess, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "resolved", tuple(self._resolve(p) for p in self.processes))

    def _resolve(self, p: ProcessRecord) -> RunProcess:
        where = self.hosts.get(p.host)
        return RunProcess(
            role=p.role, command=p.command, host=p.host, workdir=p.workdir, log_path=p.log_path,
            wait_for_url=p.wait_for_url, run_dir=(where.run_dir if where else "") or self.legacy_run_dir or "",
            socket_path=(where.socket_path if where else "") or self.legacy_socket_path or "",
            pid=p.pid, start=p.start, pane_id=p.pane_id, session_id=where.session_id if where else None,
            job_id=where.job_id if where else None)

    def attach_on(self, host: str) -> str:
        """The command that attaches to the run's session on ``host`` ("" when unknown)."""
        where = self.hosts.get(host)
        return where.attach if where else ""

    # ---- the registry's JSON

    @classmethod
    def from_json(cls, data: object) -> RunSpec:
        """The spec a row holds; ``TypeError``/``ValueError``/``KeyError`` say what is wrong with it."""
        spec = _object(data, "spec")
        hosts = _object(spec.get("hosts") or {}, "hosts")
        processes = spec["processes"]
        if not isinstance(processes, list):
            raise TypeError("processes is not a list")
        ray = spec.get("ray_cluster")
        return cls(
            host=_text(spec, "host") or LOCAL, result_dir=_text(spec, "result_dir"), workdir=_text(spec, "workdir"),
            python=_maybe_text(spec, "python"), blueprint=_maybe_text(spec, "blueprint"),
            yaml_path=_maybe_text(spec, "yaml_path"), max_time_s=_seconds(spec, "max_time_s"),
            first_step_timeout_s=_seconds(spec, "first_step_timeout_s"),
            first_step_pattern=_maybe_text(spec, "first_step_pattern"),
            hosts={str(name): _host(_object(where, f"hosts.{name}")) for name, where in hosts.items()},
            processes=tuple(_process(_object(p, f"processes.{i}")) for i, p in enumerate(processes)),
            attach=_text(spec, "attach"), ray_cluster=None if ray is None else _ray(_object(ray, "ray_cluster")),
            format=_maybe_int(spec, "format"), legacy_run_dir=_maybe_text(spec, "run_dir"),
            legacy_socket_path=_maybe_text(spec, "socket_path"), previous_attempt=_maybe_text(spec, "previous_attempt"),
            next_attempt=_maybe_text(spec, "next_attempt"))

    def to_json(self) -> dict[str, Any]:
        """The JSON a launch writes for this spec (format 1 rows keep their top-level paths)."""
        out: dict[str, Any] = {} if self.format is None else {"format": self.format}
        out.update(
            host=self.host, result_dir=self.result_dir, workdir=self.workdir, python=self.python,
            blueprint=self.blueprint, yaml_path=self.yaml_path, max_time_s=self.max_time_s,
            first_step_timeout_s=self.first_step_timeout_s, first_step_pattern=self.first_step_pattern,
            hosts={name: _host_json(h) for name, h in self.hosts.items()},
            processes=[{"role": p.role, "command": p.command, "host": p.host, "workdir": p.workdir,
                        "log_path": p.log_path, "wait_for_url": p.wait_for_url, "window_id": p.window_id,
                        "pane_id": p.pane_id, "pid": p.pid, "start": p.start} for p in self.processes],
            attach=self.attach)
        if self.legacy_run_dir is not None:
            out["run_dir"] = self.legacy_run_dir
        if self.legacy_socket_path is not None:
            out["socket_path"] = self.legacy_socket_path
        for key in ("previous_attempt", "next_attempt"):  # only in a resume chain's rows
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.ray_cluster is not None:
            r = self.ray_cluster
            out["ray_cluster"] = {"head": r.head, "workers": list(r.workers), "port": r.port, "address": r.address,
                                  "ray": r.ray}
        return out


def _object(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is not an object")
    return value


def _maybe_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _text(data: Mapping[str, Any], key: str) -> str:
    return _maybe_text(data, key) or ""


def _maybe_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise TypeError(f"{key} is not an integer")
    return value


def _seconds(data: Mapping[str, Any], key: str) -> int | None:
    """A positive whole number of seconds (or none); anything else names the key."""
    value = data.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 < value < MAX_SECONDS):
        raise ValueError(key)
    return value


def _host(where: Mapping[str, Any]) -> HostRecord:
    return HostRecord(run_dir=_text(where, "run_dir"), socket_path=_text(where, "socket_path"),
                      attach=_text(where, "attach"), python=_maybe_text(where, "python"),
                      session_id=_maybe_text(where, "session_id"), identity=_maybe_text(where, "identity"),
                      backend=_maybe_text(where, "backend"), job_id=_maybe_text(where, "job_id"))


def _host_json(h: HostRecord) -> dict[str, Any]:
    """A host's record as JSON; the identities only once known (older rows read and write back unchanged)."""
    out: dict[str, Any] = {"run_dir": h.run_dir, "socket_path": h.socket_path, "attach": h.attach, "python": h.python}
    if h.session_id is not None:
        out["session_id"] = h.session_id
    if h.identity is not None:
        out["identity"] = h.identity
    if h.backend is not None:
        out["backend"] = h.backend
    if h.job_id is not None:
        out["job_id"] = h.job_id
    return out


def _process(p: Mapping[str, Any]) -> ProcessRecord:
    missing = [key for key in ("role", "log_path") if key not in p]
    if missing:  # a process without them is no process
        raise KeyError(missing[0])
    return ProcessRecord(
        role=_text(p, "role"), command=_text(p, "command"), host=_text(p, "host") or LOCAL,
        workdir=_text(p, "workdir"), log_path=_text(p, "log_path"), wait_for_url=_maybe_text(p, "wait_for_url"),
        window_id=_maybe_text(p, "window_id"), pane_id=_maybe_text(p, "pane_id"), pid=_maybe_int(p, "pid"),
        start=_maybe_text(p, "start"))


def _ray(meta: Mapping[str, Any]) -> RayCluster:
    head, address, port, workers = meta["head"], meta["address"], meta["port"], meta.get("workers") or []
    if not isinstance(head, str) or not isinstance(address, str) or not isinstance(port, int):
        raise TypeError("ray_cluster's head, port or address has the wrong type")
    if not isinstance(workers, list) or not all(isinstance(w, str) for w in workers):
        raise TypeError("ray_cluster's workers are not a list of strings")
    return RayCluster(head=head, workers=tuple(workers), port=port, address=address, ray=_maybe_text(meta, "ray"))
