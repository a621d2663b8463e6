"""Where a run's processes execute, seen from the server: one module per backend, each the pair of the host
agent's ``backend_<kind>`` (which does the work on the host).

* ``tmux`` (the default): one tmux session per host, a window per process, the run's monitor beside it.
* Each other module here is a backend a launch chooses with the launch input field of its name (its options
  model is that module's ``OPTIONS``).

A run's backend is recorded per host in its spec, as the handle the host's start gave (``spec.Handle``: its
``kind`` and the backend's own keys), so a row read later is observed, stopped and rolled back the way it was
launched; the ops that carry the handle (observe, stop, discard) are the same for every backend. What differs
is here: the launch's options and the checks of its input, the command that attaches a user to the run, and a
scheduler's allocation (its nodes, a command on one of them, their GPUs; preflight checks them too).
``references/adding-a-backend.md`` walks through adding one.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from skill_server.hosts import client

if TYPE_CHECKING:
    from skill_server.experiments.spec import HostRecord, RunProcess
    from skill_server.gpus.models import GpuHost
    from skill_server.hosts.agent.protocol import (
        BackendChoice,
        DiscardReply,
        LaunchPlan,
        LaunchProc,
        MonitorConfig,
        MonitorPolicy,
        StopProc,
        StopReply,
    )

DEFAULT = "tmux"


@dataclass(frozen=True)
class LaunchContext:
    """What a backend checks a launch's input against: the field of the first process on another host than the
    main one (None: every process runs there), whether free GPUs were required, the launch's policies."""

    other_host_field: str | None
    gpus_required: bool
    policy: MonitorPolicy


class Backend(Protocol):
    """What launching, attaching and a scheduler's GPUs need to know of where a run executes."""

    name: str

    def configure(self, options: Any, context: LaunchContext) -> Backend:
        """This backend for one launch, with its options (the launch input's field of its name), after
        refusing what it cannot do (``ToolInputError`` naming the field)."""

    def choice(self, replace_pids: Sequence[int]) -> BackendChoice:
        """What the launch op on a host gets (``replace_pids``: the panes of an earlier run of the same name
        there, whose finished session may be replaced)."""

    def attach(self, host: str, plan: LaunchPlan) -> str:
        """The command a user types to watch the run on ``host`` (from the attach argv its dry run gave)."""

    def allocation_gpus(self, host: str, where: HostRecord) -> list[GpuHost] | None:
        """The GPUs of the nodes the run's job holds, asked through ``host``; None: this backend holds no
        allocation (ask the run's hosts)."""

    #: What the scheduler is called in answers ("Slurm"); None for a backend without jobs.
    scheduler: str | None

    def job_nodes_op(self, job_id: str) -> client.Op[Any]:
        """The op that lists, on the host the job was submitted from, the nodes of the running job ``job_id``
        (``ToolInputError`` for a backend without jobs)."""

    def job_nodes(self, reply: Any, job_id: str) -> JobNodes:
        """The nodes that op's reply lists, or why there are none."""

    def on_node(self, job_id: str, node: str) -> list[str]:
        """The argv prefix that runs a command on ``node`` inside the job, starting at once beside its steps."""


@dataclass(frozen=True)
class JobNodes:
    """A running job's nodes as its submitting host listed them; none: ``why``, and what to do (``fix``)."""

    nodes: list[str]
    command: str  # what was asked, for a user to repeat
    why: str = ""
    fix: str = ""


def kinds() -> list[str]:
    """The backends there are: this package's modules."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


@functools.cache
def named(kind: str) -> Backend:
    """The backend ``kind`` (a module of this package), unconfigured."""
    backend: Backend = importlib.import_module(f"{__name__}.{kind}").BACKEND
    return backend


def of(where: HostRecord | None) -> Backend:
    """The backend a run was launched with on one host (tmux for every run recorded without one)."""
    return named(where.handle.kind if where is not None else DEFAULT)


def for_launch(inp: Any, context: LaunchContext) -> Backend:
    """The backend a launch chose (its input field of the backend's name; none: tmux), configured."""
    for kind in kinds():
        options = getattr(inp, kind, None) if kind != DEFAULT else None
        if options is not None:
            return named(kind).configure(options, context)
    return named(DEFAULT).configure(None, context)


def launch(backend: Backend, exp_id: str, session: str, *, replace_pids: Sequence[int], python: str | None,
           workdir: str, result_dir: str, max_time_s: int, deadline_grace_s: int, procs: Sequence[LaunchProc],
           monitor: MonitorConfig | None) -> client.Launch:
    """One host's part of a launch (dry run, then start) in ``backend``."""
    return client.launch(exp_id, session, backend=backend.choice(replace_pids), python=python, workdir=workdir,
                         result_dir=result_dir, max_time_s=max_time_s, deadline_grace_s=deadline_grace_s,
                         procs=procs, monitor=monitor)


def observe_entry(p: RunProcess) -> dict[str, Any]:
    """What every observation of ``p`` carries: its host's handle."""
    return {"handle": p.handle.to_json()}


def stop(exp_id: str, p: RunProcess, *, grace_s: float, procs: Sequence[StopProc]) -> client.Op[StopReply]:
    """The stop of the run's processes on ``p``'s host (``p``: its first process there), as its backend does it."""
    return client.stop(exp_id, p.run_dir, p.handle.to_json(), grace_s=grace_s, procs=procs)  # type: ignore[arg-type]


def discard(exp_id: str, where: HostRecord) -> client.Op[DiscardReply]:
    """Undo a launch on a host (it failed, or was interrupted)."""
    return client.discard(exp_id, where.handle.to_json(), run_dir=where.run_dir or None)  # type: ignore[arg-type]
