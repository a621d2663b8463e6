"""Host requests, built and read: one typed function per agent operation.

Every op the server sends is built here from typed arguments, as an :class:`Op` whose type parameter is
its reply's type (the shapes are ``agent.protocol``'s); ``Host.call`` and ``call_hosts`` carry ops to the
hosts and give back one raw result per op. ``op.answer(result)`` is that result typed, the reply or a
``Failure`` (narrow on ``answer["ok"]``); ``op.expect(result)`` is the reply, or the tool error the
failure deserves. A reader that does not hold the op (it reads the nvidia-smi runs that rode along with
another op, say) names the kind of op instead: ``answer(result, client.run)``. The reply types are for
type checkers only (see ``agent.protocol``): at run time an op is its request and nothing more.

Replies are typed, not re-validated: the agent that answers runs this server's own sources (shipped
per call over ssh, in-process locally), and the protocol version is checked on every reply.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from skill_server.core.errors import ToolFailure, ToolInputError

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import (
        BackendChoice,
        CheckpointsReply,
        DiscardReply,
        DiscardRequest,
        Failure,
        Handle,
        LaunchPlan,
        LaunchProc,
        LaunchRequest,
        LaunchStarted,
        MonitorConfig,
        ObserveProc,
        ObserveReply,
        ObserveRequest,
        OpRequest,
        PingReply,
        ReadReply,
        ReclaimReply,
        ResultsDoc,
        RunReply,
        RunRequest,
        StatReply,
        StopProc,
        StopReply,
        StopRequest,
        WrapUpDone,
        WrapUpRequest,
        WriteReply,
        WriteRequest,
    )

R = TypeVar("R")
#: An op's reply type (an op of a narrower reply is an op of a wider one).
R_co = TypeVar("R_co", covariant=True)

#: One op's result as the transport returns it (``answer`` types it).
Result = dict[str, Any]


def answer(result: Result, kind: Callable[..., Op[R]]) -> R | Failure:
    """``result`` read as the answer to an op that ``kind`` (one of this module's functions) builds: its
    reply, or a failure."""
    del kind  # it only tells the type checker what the result is
    return cast("R | Failure", result)


def expect(answer: R | Failure, *, field: str | None = None) -> R:
    """The reply of a successful op, else raise: ``ToolInputError`` when the host names an argument (or
    ``field`` is given and the path was missing or not a regular file), otherwise ``ToolFailure``."""
    raw = cast(Result, answer)
    if raw.get("ok"):
        return cast("R", answer)
    message = str(raw.get("error") or "operation failed")
    named = raw.get("field")
    if named is not None or (field is not None and raw.get("kind") in ("not_found", "not_regular")):
        raise ToolInputError(message, field=str(named) if named is not None else field)
    raise ToolFailure(message, field=field)


@dataclass(frozen=True)
class Op(Generic[R_co]):
    """One operation for a host's request (build it with this module's functions); ``R_co`` is its reply."""

    request: OpRequest

    def answer(self, result: Result) -> R_co | Failure:
        """This op's result, typed."""
        return cast("R_co | Failure", result)

    def expect(self, result: Result, *, field: str | None = None) -> R_co:
        """This op's reply, or the tool error its failure deserves (see :func:`expect`)."""
        return expect(self.answer(result), field=field)


def ping() -> Op[PingReply]:
    """Who answers: interpreter, user, state directory, whether tmux and bash exist."""
    return Op({"op": "ping"})


def run(argv: Sequence[str], *, timeout_s: float | None = None, stdin: str | None = None, cwd: str | None = None,
        env: Mapping[str, str] | None = None, max_output: int | None = None) -> Op[RunReply]:
    """``argv`` run on the host (no shell: each element reaches the program unchanged), killed with its
    process group at ``timeout_s`` (the agent's default: 30 s), each stream cut at ``max_output`` bytes
    (1 MiB); ``env`` is added to the agent's environment. Arguments left out are not sent."""
    request: RunRequest = {"op": "run", "argv": list(argv)}
    if timeout_s is not None:
        request["timeout_s"] = timeout_s
    if stdin is not None:
        request["stdin"] = stdin
    if cwd is not None:
        request["cwd"] = cwd
    if env:
        request["env"] = dict(env)
    if max_output is not None:
        request["max_output"] = max_output
    return Op(request)


def read(path: str, length: int, *, offset: int = 0, text: bool = False) -> Op[ReadReply]:
    """The size of the regular file ``path`` and ``length`` bytes of it from ``offset`` (negative: from the
    end), as text or base64 data."""
    return Op({"op": "read", "path": path, "offset": offset, "length": length, "text": text})


def stat(paths: Sequence[str]) -> Op[StatReply]:
    """What each of ``paths`` is on the host (a directory, a regular file and whether it may be run, something
    else, missing), ``~`` expanded there; at most 64."""
    return Op({"op": "stat", "paths": list(paths)})


def write(path: str, *, text: str | None = None, data: bytes | None = None, replace: bool,
          mode: int | None = None) -> Op[WriteReply]:
    """Write ``text`` (or ``data``) to ``path`` atomically: create it, or with ``replace`` replace a regular
    file only; ``mode`` for a new file (the agent's default: 0644)."""
    if (text is None) == (data is None):
        raise ValueError("write takes text or data")
    request: WriteRequest
    if text is not None:
        request = {"op": "write", "path": path, "text": text, "replace": replace}
    else:
        assert data is not None
        request = {"op": "write", "path": path, "data": base64.b64encode(data).decode("ascii"), "replace": replace}
    if mode is not None:
        request["mode"] = mode
    return Op(request)


@dataclass(frozen=True)
class Launch:
    """One host's part of a launch, as its two rounds: the dry run, then the start."""

    check: Op[LaunchPlan]
    start: Op[LaunchStarted]


def launch(exp_id: str, session: str, *, backend: BackendChoice, python: str | None, workdir: str,
           result_dir: str, max_time_s: int, deadline_grace_s: int, procs: Sequence[LaunchProc],
           monitor: MonitorConfig | None = None) -> Launch:
    """Start ``procs`` (this host's processes of run ``exp_id``, named ``session``) in ``backend`` (its kind and
    its own options: ``experiments.backends``), and the run's monitor where that backend runs it. ``check``
    resolves and checks everything and starts nothing; ``start`` creates the run directory and starts the
    processes. ``monitor``: what the run monitor scans for (the signature table, the run's first-step pattern)
    and its policies."""
    request: LaunchRequest = {
        "op": "launch", "exp_id": exp_id, "session": session, "dry_run": True, "backend": backend, "python": python,
        "workdir": workdir, "result_dir": result_dir, "max_time_s": max_time_s, "deadline_grace_s": deadline_grace_s,
        "procs": list(procs)}
    if monitor is not None:
        request["monitor"] = monitor
    start: LaunchRequest = {**request, "dry_run": False}
    return Launch(Op(request), Op(start))


def discard(exp_id: str, handle: Handle, *, run_dir: str | None = None) -> Op[DiscardReply]:
    """Undo a launch on the host: its backend ends what it started there, by the run's identity (``handle``, as
    far as it is known: a start that never answered left only the dry run's), and the run directory
    (``run_dir``, default the host's own for ``exp_id``) is left marked discarded."""
    request: DiscardRequest = {"op": "discard", "exp_id": exp_id, "handle": handle}
    if run_dir is not None:
        request["run_dir"] = run_dir
    return Op(request)


def observe(procs: Sequence[ObserveProc], *, heal: bool = False) -> Op[ObserveReply]:
    """Each process's liveness and exit code (from its backend), markers, the requested appended ranges of its
    log and what the run's monitor found (or, for a run without one, its scan range) with the metric points
    after its cursor. ``heal``: also start dead monitors and release finished sessions there (``ObserveRequest``)."""
    request: ObserveRequest = {"op": "observe", "procs": list(procs)}
    if heal:
        request["heal"] = True
    return Op(request)


def stop(exp_id: str, run_dir: str, handle: Handle, *, grace_s: float, procs: Sequence[StopProc],
         keep_session: bool = False) -> Op[StopReply]:
    """Stop every process of run ``exp_id`` on the host as its backend does (Ctrl-C, ``grace_s``, SIGTERM,
    SIGKILL, verified; a scheduler's job cancelled) and, unless ``keep_session``, remove what holds it there (only
    a tmux session that is the run's by identity, never one found by name)."""
    request: StopRequest = {"op": "stop", "exp_id": exp_id, "run_dir": run_dir, "handle": handle, "grace_s": grace_s,
                            "procs": list(procs)}
    if keep_session:
        request["keep_session"] = True
    return Op(request)


def checkpoints(path: str, *, max_depth: int, max_entries: int, limit: int) -> Op[CheckpointsReply]:
    """The ``global_step_N`` folders under ``path`` (at most ``max_depth`` levels down, ``max_entries``
    directory entries looked at), the newest ``limit`` of them."""
    return Op({"op": "checkpoints", "path": path, "max_depth": max_depth, "max_entries": max_entries,
               "limit": limit})


def reclaim_gpus(pids: Sequence[int], grace_s: float) -> Op[ReclaimReply]:
    """End those of ``pids`` that are GPU processes of the ssh user on the host (SIGTERM, ``grace_s``,
    SIGKILL), each pid reported."""
    return Op({"op": "reclaim_gpus", "pids": list(pids), "grace_s": grace_s})


def wrap_up(result_dir: str, doc: ResultsDoc, *, png: bytes | None, flag: bool) -> Op[WrapUpDone]:
    """Write an experiment's results page (and ``png`` beside it), the result directory's document (the page, or
    an index of the experiments there) and, when ``flag``, finish.flag last (``agent.results.wrap_up``)."""
    request: WrapUpRequest = {"op": "wrap_up", "result_dir": result_dir, "doc": doc, "flag": flag}
    if png is not None:
        request["png"] = base64.b64encode(png).decode("ascii")
    return Op(request)
