"""The results a run's monitor collects when its run ended (``on_end: collect``), with nobody asking.

``<result_dir>/<id>/results.md`` from what the monitor knows (the state, each process's exit code and last
step, the last metrics, the errors, the policies' actions) and ``<result_dir>/finish.flag`` (AgentJet's
blueprint convention). A later ``collect_results`` call replaces results.md with the full page (tables from the
registry's history, a plot). Stdlib only, Python 3.8.
"""

from __future__ import annotations

import os
import time

from . import files
from .protocol import TYPE_CHECKING

if TYPE_CHECKING:
    from .protocol import ActionRecord
    from .runstate import Run


def text(run: Run, state: str, actions: list[ActionRecord]) -> str:
    """results.md, as the monitor writes it."""
    lines = ["# Results of %s" % run.exp_id, "",
             "Written by the run's monitor on this host when the run ended (nobody was asked); "
             "`collect_results` rewrites it with the full tables and a plot.", "",
             "- state: %s" % state]
    for role in run.roles:
        lines.append("- %s: exit code %s, last step %s" % (role.name, run.files.exit_code(role.name),
                                                           role.found.global_step))
    metrics = {}
    for role in run.roles:
        metrics.update(role.found.last_metrics or {})
    if metrics:
        lines += ["", "## Last metrics", "", "| metric | value |", "| --- | --- |"]
        lines += ["| %s | %s |" % (k, v) for k, v in sorted(metrics.items())]
    errors = [(role.name, name, hit) for role in run.roles for name, hit in sorted(role.found.errors.items())]
    if errors:
        lines += ["", "## Errors", "", "| process | signature | count | first line |", "| --- | --- | --- | --- |"]
        lines += ["| %s | %s | %s | `%s` |" % (r, n, h.get("count"), str(h.get("first_line", ""))[:200].replace(
            "|", "\\|")) for r, n, h in errors]
    if actions:
        lines += ["", "## Policy actions", ""]
        lines += ["- %s: %s -> %s (%s)" % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(a["wall"]))),
                                            a["trigger"], a["action"], a["result"]) for a in actions]
    return "\n".join(lines) + "\n"


def collect(run: Run, state: str, actions: list[ActionRecord]) -> str:
    """Write ``<result_dir>/<id>/results.md`` and ``<result_dir>/finish.flag``; what was written."""
    result_dir = run.spec.get("result_dir")
    if not isinstance(result_dir, str) or not result_dir:
        return "no result_dir"
    folder = os.path.join(result_dir, run.exp_id)
    try:
        os.makedirs(folder, exist_ok=True)
        files.write_atomic(os.path.join(folder, "results.md"), text(run, state, actions).encode("utf-8"),
                           replace=True)
        files.write_atomic(os.path.join(result_dir, "finish.flag"), b"", replace=True)
    except (OSError, files.AgentError) as exc:
        return "collect failed: %s" % (getattr(exc, "strerror", None) or exc)
    return "results.md and finish.flag written in %s" % result_dir
