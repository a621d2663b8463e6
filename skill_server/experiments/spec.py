"""A run's spec: what its launch decided, typed, parsed once from the registry row's JSON.

``RunSpec.from_json`` reads the ``spec`` column (``store._row`` turns what it raises into that row's
``CorruptRow``); ``to_json`` gives back the JSON a launch writes, key for key and in the same order. Three
shapes exist, all read: format 3 (every launch since backends) records per host where the run lives
(``hosts``: its run directory, attach command, interpreter, identity, and its backend's ``handle``) and per
process its host and wrapper identity; format 2 kept what the handle holds as optional keys of the host's
record (tmux's ``socket_path`` and ``session_id``, a scheduler's ``backend`` and ``job_id``), read into a handle
and written back as format 3; format 1 (one local host) kept ``run_dir`` and ``socket_path`` at the top level,
and its processes have no host (written back as it was). A key that is missing or null reads as its default;
a value of the wrong type makes the row unreadable rather than half-read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: How the registry names this machine (``hosts.LOCAL``).
LOCAL = "local"
FORMAT = 3
#: The backend of every run recorded before backends were (formats 1 and 2 without one).
LEGACY_KIND = "tmux"
#: What a format 2 host record kept of its backend's handle, as optional keys of its own.
_LEGACY_HANDLE_KEYS = ("socket_path", "session_id", "job_id")


@dataclass(frozen=True)
class Handle:
    """Where a run lives on one host, in its backend's own terms (``agent.protocol.Handle``): ``kind`` names the
    backend (``experiments.backends``); ``values`` are that backend's own keys, read by it alone."""

    kind: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.values}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Handle:
        kind = data.get("kind")
        if not isinstance(kind, str) or not kind:
            raise TypeError("handle has no kind")
        return cls(kind, {str(k): v for k, v in data.items() if k != "kind"})
#: The largest max_time_s or first_step_timeout_s a row may hold (what JSON numbers carry exactly).
MAX_SECONDS = 2**53


@dataclass(frozen=True)
class HostRecord:
    """Where a run lives on one of its hosts."""

    run_dir: str
    attach: str  # the command a user types to watch the run there
    python: str | None  # the host agent's interpreter there
    identity: str | None = None  # the host's ``host_identity()`` (host name plus machine-id digest)
    handle: Handle = field(default_factory=lambda: Handle(LEGACY_KIND))  # its backend's, as the start gave it


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
    """One process of a run with where it lives resolved (its host's run directory and backend handle)."""

    role: str
    command: str
    host: str
    workdir: str
    log_path: str
    wait_for_url: str | None
    run_dir: str
    pid: int | None
    start: str | None
    pane_id: str | None
    handle: Handle = field(default_factory=lambda: Handle(LEGACY_KIND))  # its host's


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
    #: The policy in force as the launch resolved it (``launch_experiment``'s ``policy``, every field with its
    #: default), None without one; the attempts a resume started carry it too.
    policy: Mapping[str, Any] | None = None
    format: int | None = FORMAT
    legacy_run_dir: str | None = None  # format 1
    legacy_socket_path: str | None = None  # format 1
    #: The processes with their run directory and socket resolved (computed once).
    resolved: tuple[RunProcess, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "resolved", tuple(self._resolve(p) for p in self.processes))

    def _resolve(self, p: ProcessRecord) -> RunProcess:
        where = self.hosts.get(p.host)
        handle = where.handle if where else Handle(LEGACY_KIND, {"socket_path": self.legacy_socket_path or ""})
        return RunProcess(
            role=p.role, command=p.command, host=p.host, workdir=p.workdir, log_path=p.log_path,
            wait_for_url=p.wait_for_url, run_dir=(where.run_dir if where else "") or self.legacy_run_dir or "",
            pid=p.pid, start=p.start, pane_id=p.pane_id, handle=handle)

    def attach_on(self, host: str) -> str:
        """The command that attaches to the run's session on ``host`` ("" when unknown)."""
        where = self.hosts.get(host)
        return where.attach if where else ""

    # ---- the registry's JSON

    @classmethod
    def from_json(cls, data: object, session: str = "") -> RunSpec:
        """The spec a row holds (``session``: the row's session name, which a format 2 tmux handle lacks);
        ``TypeError``/``ValueError``/``KeyError`` say what is wrong with it."""
        spec = _object(data, "spec")
        hosts = _object(spec.get("hosts") or {}, "hosts")
        processes = spec["processes"]
        if not isinstance(processes, list):
            raise TypeError("processes is not a list")
        ray = spec.get("ray_cluster")
        policy = spec.get("policy")
        return cls(
            host=_text(spec, "host") or LOCAL, result_dir=_text(spec, "result_dir"), workdir=_text(spec, "workdir"),
            python=_maybe_text(spec, "python"), blueprint=_maybe_text(spec, "blueprint"),
            yaml_path=_maybe_text(spec, "yaml_path"), max_time_s=_seconds(spec, "max_time_s"),
            first_step_timeout_s=_seconds(spec, "first_step_timeout_s"),
            first_step_pattern=_maybe_text(spec, "first_step_pattern"),
            hosts={str(name): _host(_object(where, f"hosts.{name}"), session) for name, where in hosts.items()},
            processes=tuple(_process(_object(p, f"processes.{i}")) for i, p in enumerate(processes)),
            attach=_text(spec, "attach"), ray_cluster=None if ray is None else _ray(_object(ray, "ray_cluster")),
            policy=None if policy is None else dict(_object(policy, "policy")), format=_maybe_int(spec, "format"),
            legacy_run_dir=_maybe_text(spec, "run_dir"),
            legacy_socket_path=_maybe_text(spec, "socket_path"))

    def to_json(self) -> dict[str, Any]:
        """The JSON a launch writes for this spec (format 1 rows keep their top-level paths; format 2 rows are
        written as format 3)."""
        out: dict[str, Any] = {} if self.format is None else {"format": FORMAT}
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
        if self.policy is not None:
            out["policy"] = dict(self.policy)
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


def _host(where: Mapping[str, Any], session: str) -> HostRecord:
    handle = where.get("handle")
    if handle is not None:
        parsed = Handle.from_json(_object(handle, "handle"))
    else:  # format 2: what the handle holds, as the record's own optional keys
        kind = _maybe_text(where, "backend") or LEGACY_KIND
        values = {key: value for key in _LEGACY_HANDLE_KEYS if (value := _maybe_text(where, key))}
        if kind == LEGACY_KIND and session:
            values["session"] = session
        parsed = Handle(kind, values)
    return HostRecord(run_dir=_text(where, "run_dir"), attach=_text(where, "attach"),
                      python=_maybe_text(where, "python"), identity=_maybe_text(where, "identity"), handle=parsed)


def _host_json(h: HostRecord) -> dict[str, Any]:
    """A host's record as JSON; its identity only once known."""
    out: dict[str, Any] = {"run_dir": h.run_dir, "attach": h.attach, "python": h.python}
    if h.identity is not None:
        out["identity"] = h.identity
    out["handle"] = h.handle.to_json()
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
