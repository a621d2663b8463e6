"""Where a run's processes execute on this host, behind one small interface: its *backend*.

One module per backend, ``backend_<kind>`` (``backend_tmux``: windows of one tmux session, the run's monitor
beside them; a batch scheduler's: one job submitted from this host, the processes and the monitor inside its
allocation). The run operations (``runs``) and the run monitor dispatch to it and never ask which one it is.
A run's backend is named by its ``Handle`` (``protocol``): ``kind`` plus the backend's own keys, made by its
start and carried back by every later op, so a run is observed and stopped the way it was started.

What a backend does, each step for its own kind:

* ``check``, ``prepare``: refuse what this host cannot do (missing commands, bad options), and work out the
  handle as far as it is known before anything starts (the dry run's answer);
* ``attach``: the command (argv on this host) that shows a user the run;
* ``start``: start the processes (their wrapper scripts are in the run directory already) and the monitor
  where the monitor runs, filling the handle in as it goes (a failure is undone by ``discard`` from what the
  handle says); ``discard``: undo a launch;
* ``prefetch`` and ``observe``: whether a process lives, how it ended, its extra markers, and (a scheduler's
  job) the job's facts; ``release``: remove what holds a run that ended here (a finished tmux session);
* ``stop``: the complete stop of ``stop_experiment``; ``cancel_own_job``: the stop a monitor running inside the
  job does to it (``own_job``: that job's id); ``started``: whether a process launched without a pid has
  started (its monitor's question);
* ``monitor_in_job``: where its monitor runs (False: beside the processes, started by the launch and restarted
  by observations here; True: inside the job, never from here); ``can_resume``: whether a resume policy can
  relaunch its runs here; ``scheduler``: the scheduler's name in words ("" without one);
* ``legacy_handle``: the handle of a run whose monitor spec was written before handles (None: not its).

Stdlib only, Python 3.8.
"""

from __future__ import annotations

from .files import AgentError
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .protocol import DiscardReply, Handle, JobFacts, StartedProc, StopReply

DEFAULT = "tmux"
_LOADED: dict[str, Any] = {}


class Launch:
    """One launch on this host as its backend carries it out: the request, the resolved processes, the run
    directory, and the handle as far as it is known (``start`` fills it in as it goes)."""

    def __init__(self, req: Mapping[str, object], exp_id: str, session: str, rdir: str, plan: dict[str, Any],
                 options: dict[str, Any]) -> None:
        self.req = req
        self.exp_id = exp_id
        self.session = session
        self.rdir = rdir
        self.plan = plan
        self.options = options
        self.handle: dict[str, Any] = {}


class Liveness:
    """What a backend knows of one process: alive (None: it cannot tell), seconds it has run, its exit code and
    where that came from, markers of its own (``queued``, ``stopped``, ``timedout``), and its job's facts."""

    def __init__(self, alive: bool | None, elapsed_s: float | None = None, exit_code: int | None = None,
                 exit_source: str | None = None, markers: list[str] | None = None, job: JobFacts | None = None
                 ) -> None:
        self.alive = alive
        self.elapsed_s = elapsed_s
        self.exit_code = exit_code
        self.exit_source = exit_source
        self.markers = markers or []
        self.job = job


class Backend:
    """The interface (see the module's docstring); each ``backend_<kind>`` module has one subclass, ``BACKEND``."""

    kind = ""
    monitor_in_job = False
    can_resume = True
    scheduler = ""

    def check(self, launch: Launch) -> None:
        raise NotImplementedError

    def prepare(self, launch: Launch) -> None:
        raise NotImplementedError

    def attach(self, handle: Mapping[str, Any], procs: Sequence[Mapping[str, Any]]) -> list[str]:
        raise NotImplementedError

    def start(self, launch: Launch, monitor_spec: dict[str, Any]) -> list[StartedProc]:
        raise NotImplementedError

    def discard(self, handle: Mapping[str, Any], exp_id: str, rdir: str) -> DiscardReply:
        raise NotImplementedError

    def prefetch(self, asked: list[tuple[Mapping[str, Any], str]], cache: dict[str, Any]) -> None:
        """Before ``observe``: ask once for all the processes of this kind (their handles and run directories)."""

    def observe(self, p: Mapping[str, object], handle: Mapping[str, Any], cache: dict[str, Any]) -> Liveness:
        raise NotImplementedError

    def release(self, handle: Mapping[str, Any], exp_id: str) -> bool | None:
        """Remove what holds a run whose processes here have all ended: True once nothing is left, False while
        something still lives, None when that cannot be told now (the next look tries again)."""
        return True

    def stop(self, handle: Mapping[str, Any], exp_id: str, rdir: str, procs: list[dict[str, object]],
             grace_s: float, keep_session: bool = False) -> StopReply:
        raise NotImplementedError

    def own_job(self, handle: Mapping[str, Any], rdir: str) -> str | None:
        """The id of the job this process runs in (None: not in one, or it is not known)."""
        return None

    def requeued(self, rdir: str, codes: Mapping[str, int | None]) -> bool:
        """Whether the run's processes, which just ended here with exit ``codes``, ended because the scheduler
        requeued the run's job (it starts them again: their end is not the run's)."""
        return False

    def cancel_own_job(self, handle: Mapping[str, Any], rdir: str) -> str:
        raise AgentError("a %s run is no job to cancel from inside" % self.kind)

    def started(self, rdir: str, role: str) -> bool:
        """Whether a process launched without a pid has started (its wrapper wrote one) or never will."""
        return True

    def legacy_handle(self, spec: Mapping[str, Any]) -> Handle | None:
        return None


def of(kind: object) -> Backend:
    """The backend named ``kind`` (``backend_<kind>``); ``AgentError`` naming ``backend`` when there is none."""
    if not isinstance(kind, str) or not kind.isidentifier():
        raise AgentError("no backend %r on this host" % (kind,), "backend")
    if kind not in _LOADED:
        import importlib

        try:
            module = importlib.import_module("%s.backend_%s" % (__package__, kind))
        except ImportError:
            raise AgentError("no backend %r on this host" % kind, "backend") from None
        _LOADED[kind] = module.BACKEND
    backend: Backend = _LOADED[kind]
    return backend


def of_handle(handle: Mapping[str, Any] | None) -> Backend:
    return of((handle or {}).get("kind") or DEFAULT)


def kinds() -> list[str]:
    """The backends this agent has (its modules named ``backend_<kind>``)."""
    from .program import MODULES

    return [name[len("backend_"):] for name in MODULES if name.startswith("backend_")]


def legacy_handle(spec: Mapping[str, Any]) -> Handle:
    """The handle of a run whose monitor spec was written before handles: the backend that recognises its
    top-level keys says, else it was tmux's."""
    for kind in kinds():
        found = of(kind).legacy_handle(spec)
        if found is not None:
            return found
    return {"kind": DEFAULT}
