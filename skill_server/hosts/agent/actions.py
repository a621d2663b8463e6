"""A run started again on this host: the one primitive a resume policy relaunches it with.

``relaunch_here`` starts the same processes again as a new run (its own id, run directory, session, monitor and
logs: ``attempt_log``): the launch request that started the run here (``rundir.LAUNCH_REQUEST``, kept by the launch
op when the run has a resume policy) goes through the same ``launch`` op a controller sends, in a child agent
process, with the new id. ``stop_started`` stops such a relaunch at once (a ``stop_experiment`` came while it
started). (Stopping a run is its backend's: ``backend.Backend.stop``.)
"""

from __future__ import annotations

import json
import os

from . import files
from .files import AgentError
from .protocol import PROTOCOL_VERSION, TYPE_CHECKING
from .rundir import LAUNCH_REQUEST

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .protocol import LaunchStarted

RELAUNCH_TIMEOUT_S = 120.0
#: The child agent a relaunch runs: this version's install, one request on stdin, the reply on stdout.
_AGENT = "import sys; sys.path.insert(0, sys.argv[1]); from ajs_agent import ops; sys.exit(ops.main(sys.argv[1:]))"


def attempt_log(path: str, old_id: str, new_id: str, attempt: int) -> str:
    """The log of a relaunched attempt, so that each attempt's output is its own: a log in the run's own folder
    (``<old id>/...``, the default) moves to the new run's folder; any other log gets the attempt's suffix before
    its extension (``train.log`` -> ``train.r2.log``)."""
    head, sep, rest = path.partition("/")
    if sep and head == old_id:
        return new_id + "/" + rest
    import re

    root, ext = os.path.splitext(path)
    return "%s.r%d%s" % (re.sub(r"\.r\d+$", "", root), attempt, ext)


def relaunch_here(run_dir: str, new_id: str, policy: Mapping[str, Any]) -> LaunchStarted:
    """Start the processes the launch recorded in ``run_dir`` again as run ``new_id`` (same commands, workdirs,
    environment, logs and session name; ``policy`` replaces the monitor's policy), through the ``launch``
    op; its reply (``LaunchStarted``). Raises ``AgentError`` with one line when it did not start."""
    import subprocess
    import sys

    from . import program

    text = files.read_small(os.path.join(run_dir, LAUNCH_REQUEST), 16 * 1024 * 1024)
    try:
        req = json.loads(text or "")
        if not isinstance(req, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        raise AgentError("cannot read the launch request %s: %s" % (LAUNCH_REQUEST, exc)) from None
    monitor = dict(req.get("monitor") or {})
    monitor["policy"] = dict(policy)
    old_id, attempt = str(req.get("exp_id") or ""), int(policy.get("attempt") or 2)
    procs = [dict(p, log_path=attempt_log(str(p.get("log_path") or ""), old_id, new_id, attempt))
             for p in req.get("procs") or [] if isinstance(p, dict)]
    req.update(exp_id=new_id, dry_run=False, monitor=monitor, procs=procs)
    base = program.install_dir()
    if not os.path.isfile(os.path.join(base, program.PACKAGE, "ops.py")):
        raise AgentError("the host agent is not installed under %s" % base)
    body = json.dumps({"v": PROTOCOL_VERSION, "ops": [req], "budget_s": RELAUNCH_TIMEOUT_S}).encode("utf-8")
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _AGENT, base], input=body, capture_output=True,
                              timeout=RELAUNCH_TIMEOUT_S + 10, cwd=run_dir, start_new_session=True, check=False)
        reply = json.loads(done.stdout.decode("utf-8", "replace") or "{}")
        result = (reply.get("results") or [{}])[0]
    except (OSError, ValueError, subprocess.SubprocessError, IndexError, AttributeError) as exc:
        raise AgentError("the relaunch did not answer: %s" % exc) from None
    if not isinstance(result, dict) or not result.get("ok"):
        said = result.get("error") if isinstance(result, dict) else None
        raise AgentError("the relaunch was refused: %s" % (said or reply.get("error") or "no answer"))
    return result  # type: ignore[return-value]  # the launch op's reply


def stop_started(started: Mapping[str, Any], exp_id: str, grace_s: float = 5.0) -> str:
    """Stop run ``exp_id`` that ``relaunch_here`` just started (its launch reply) as ``stop_experiment`` would (its
    run directory marked, so that its monitor ends it as stopped); what became of it, in words."""
    from . import backend
    from .rundir import STOP_REQUESTED, RunDir

    rdir, handle = str(started.get("run_dir") or ""), dict(started.get("handle") or {})
    RunDir(rdir).touch(STOP_REQUESTED)
    procs: list[dict[str, object]] = [{"role": p.get("role"), "pid": p.get("pid"), "start": p.get("start"),
                                       "pane_id": p.get("pane_id")} for p in started.get("procs") or []]
    try:
        report = backend.of_handle(handle).stop(handle, exp_id, rdir, procs, grace_s)
    except (AgentError, OSError) as exc:
        return "its stop failed: %s" % exc
    return "stopped" + ("; %d process(es) survived SIGKILL" % len(report["survivors"]) if report["survivors"] else "")
