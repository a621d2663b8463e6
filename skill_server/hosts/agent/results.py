"""An experiment's results, written where its blueprint looks for them: one renderer for the run's monitor
(``on_end: collect``, with nobody asking) and for ``collect_results`` (the ``wrap_up`` op), both from a
``ResultsDoc`` (``documents``).

The layout in the result directory (``wrap_up``):

* ``<result_dir>/<experiment>/results.md`` (and ``metrics.png`` when one was drawn): the experiment's own page,
  in its own folder (the first attempt's id), so experiments sharing a result directory never replace one
  another's pages; the attempts' logs are in their own folders beside it;
* ``<result_dir>/results.md``: the document the blueprint asks for, beside ``finish.flag``: the experiment's page
  when it is the only one there, an index of every experiment's page when several share the directory (a
  ``results.md`` there that is not ours is left alone, and said so);
* ``<result_dir>/finish.flag``: last, after the document, and only when asked (the experiment finished:
  ``finished``; ``collect_results`` with ``write_finish_flag``).

A page covers the whole experiment: each attempt with the cause of its end and the checkpoint it continued from,
the headline metrics' final and best values with their steps and whether the best step was saved (``outcomes``),
the curve of the first one, the metric tables, errors, policy actions and notes. The monitor gathers what it
needs for one from the files of every attempt on its host (``gather``: each attempt's findings and metric points,
merged by step as ``points.merge_attempts`` says); ``collect_results`` from the registry. Every page starts with a
marker line (``MARK``) holding its id, state and headline, from which the index is made. Stdlib only, Python 3.8.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import time

from . import files, outcome, points
from .protocol import TYPE_CHECKING
from .request import need, need_or

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .documents import ErrorDoc
    from .protocol import ActionRecord, AttemptDoc, OutcomeDoc, ResultsDoc, WrapUpDone, WrapUpReply
    from .runstate import Run

PAGE, PLOT, FLAG = "results.md", "metrics.png", "finish.flag"
MARK = "<!-- agentjet-swarm-skill results "
#: The end states of an experiment that finished (its finish.flag is written unasked).
FINISHED = ("succeeded", "timed_out")
#: Metrics a page leads with (globs, in order; the first a run has of each): reward, validation, loss, entropy.
HEADLINE = ("critic/score/mean", "critic/real_reward", "critic/rewards/mean", "critic/success_rate", "val-core/*",
            "actor/pg_loss", "actor/kl_loss", "actor/entropy", "response_length/mean")
HEADLINE_COUNT = 4
#: A metric whose name has one of these is better lower.
LOWER_IS_BETTER_TOKENS = ("loss", "error", "timing", "time_per", "madness", "std", "clip_ratio", "grad_norm")
CURVE_ROWS = 20
#: Most pages the index lists, and most entries of the result directory looked at for them.
INDEX_MAX, SCAN_MAX = 200, 2000


def lower_is_better(name: str) -> bool:
    """Whether a smaller value of this metric is better, assumed from its name."""
    return any(token in name.lower() for token in LOWER_IS_BETTER_TOKENS)


def headline(names: Sequence[str], limit: int = HEADLINE_COUNT) -> list[str]:
    """The first ``limit`` names (in ``HEADLINE`` order) a run has; its first names if none match."""
    chosen: list[str] = []
    for pattern in HEADLINE:
        for name in sorted(names):
            if fnmatch.fnmatchcase(name, pattern):
                if name not in chosen:
                    chosen.append(name)
                break
    return (chosen or sorted(names))[:limit]


def nearest_saved(saved: Sequence[int], step: int | None) -> int | None:
    """The saved checkpoint step nearest ``step`` (the earlier of two as near); None when none is saved."""
    if step is None or not saved:
        return None
    return min(saved, key=lambda s: (abs(s - step), s))


def outcome_of(name: str, series: Mapping[int, Any], saved: Sequence[int] | None) -> OutcomeDoc:
    """Final and best value of one merged series (step -> value) with their steps; whether the best step has a
    checkpoint and which saved step is nearest (``saved``: None when the checkpoints are not known)."""
    steps = sorted(series)
    finite = [(s, float(series[s])) for s in steps if _finite(series[s])]
    lower = lower_is_better(name)
    best = (min if lower else max)(finite, key=lambda p: p[1]) if finite else None
    out: OutcomeDoc = {"name": name, "points": len(steps), "final": _number(series[steps[-1]]) if steps else None,
                       "final_step": steps[-1] if steps else None, "best": best[1] if best else None,
                       "best_step": best[0] if best else None, "direction": "lower" if lower else "higher"}
    if saved is not None and best is not None:
        out["best_saved"] = best[0] in saved
        out["nearest_checkpoint"] = nearest_saved(saved, best[0])
    return out


def curve(name: str, series: Mapping[int, Any], rows: int = CURVE_ROWS) -> dict[str, Any]:
    """One metric over steps, at most ``rows`` points (each the last of its bucket of consecutive steps)."""
    steps = sorted(series)
    n = len(steps)
    buckets = min(rows, n)
    picked = [steps[(b + 1) * n // buckets - 1] for b in range(buckets)]
    return {"metric": name, "steps": picked, "values": [_number(series[s]) for s in picked], "of": n}


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: object) -> float | None:
    return float(value) if _finite(value) else None  # type: ignore[arg-type]  # _finite checked it


# ---- why an attempt ended


def cause_of_end(state: str, exit_code: int | None, actions: Sequence[Mapping[str, Any]],
                 stop_asked: bool | None) -> str:
    """An attempt's end in words: what its policy did (and why), its max time, a stop_experiment (``stop_asked``:
    whether one was asked for; None: not known), or its exit."""
    for a in reversed(list(actions)):
        action, result, trigger = a.get("action"), str(a.get("result") or ""), str(a.get("trigger") or "")
        if action == "resume" and result.startswith("relaunched as "):
            return "%s: stopped and %s by its policy" % (_trigger(trigger), result)
        if action == "resume" and result.startswith(("cancelled", "given up", "relaunch failed")):
            return "%s: stopped by its policy, not relaunched (%s)" % (_trigger(trigger), result)
        if action == "stop" and not result.startswith("stop failed"):
            return "%s: stopped by its policy (%s)" % (_trigger(trigger), result)
    if state == "timed_out":
        return "its max time was reached"
    if state == "stopped":
        if stop_asked is None:
            return "stopped from outside its policy (stop_experiment, or its scheduler cancelled it)"
        return "stop_experiment was called" if stop_asked else "stopped"
    if state == "succeeded":
        return "finished (exit code 0)"
    if state == "failed":
        return "failed (exit code %s)" % exit_code
    if state == "lost":
        return "its processes vanished without an exit code"
    return state


def _trigger(trigger: str) -> str:
    return trigger[6:] if trigger.startswith("error:") else {"stall": "a stall", "first_step_overdue":
                                                            "no first step by its deadline"}.get(trigger, trigger)


# ---- the monitor's document: every attempt of the experiment on this host


def _chain(run: Run) -> list[tuple[str, Any]]:
    """(id, RunDir or None for this run) of every attempt up to this one on this host, first first."""
    from .rundir import MAX_CHAIN, RunDir

    out: list[tuple[str, Any]] = [(run.exp_id, None)]
    previous = (run.spec.get("policy") or {}).get("previous")
    while isinstance(previous, str) and previous and len(out) < MAX_CHAIN:
        here = RunDir(files.run_dir(previous))
        spec = here.spec()
        if spec is None:
            break
        out.insert(0, (previous, here))
        previous = (spec.get("policy") or {}).get("previous")
    return out


def _attempt(exp_id: str, spec: Mapping[str, Any], doc: Mapping[str, Any], where: Any) -> AttemptDoc:
    roles = [str(r.get("role")) for r in spec.get("roles") or []]
    codes = [where.exit_code(r) for r in roles]
    state = outcome.ended_as(codes, [where.markers(r) for r in roles])
    code = next((c for c in codes if c not in (None, 0)), 0 if codes and all(c == 0 for c in codes) else None)
    found = [f for f in (doc.get("roles") or {}).values() if isinstance(f, dict)]
    firsts = [f["first_step"] for f in found if isinstance(f.get("first_step"), int)]
    lasts = [f["global_step"] for f in found if isinstance(f.get("global_step"), int)]
    policy = spec.get("policy") or {}
    from .rundir import STOP_REQUESTED

    out: AttemptDoc = {"id": exp_id, "attempt": int(policy.get("attempt") or 1), "state": state, "exit_code": code,
                       "first_step": min(firsts) if firsts else None, "last_step": max(lasts) if lasts else None,
                       "ended_by": cause_of_end(state, code, doc.get("actions") or [], where.has(STOP_REQUESTED)),
                       "logs": [str(r.get("log_path")) for r in spec.get("roles") or []]}
    if out["attempt"] > 1:
        out["resumed_from"] = _resumed_words(policy.get("resumed_from"))
    return out


def _resumed_words(found: object) -> str:
    if isinstance(found, dict) and isinstance(found.get("step"), int):
        return "global_step_%d (%s)" % (found["step"], found.get("path"))
    return "started over"


def _series_of(where: Any, spec: Mapping[str, Any]) -> dict[str, dict[int, Any]]:
    """Metric -> step -> value of one attempt, from its points files (newest point of a step wins)."""
    out: dict[str, dict[int, Any]] = {}
    for role in spec.get("roles") or []:
        _, held = points.read_all(where.points(str(role.get("role"))))
        for p in sorted(held, key=lambda x: x["seq"]):
            for name, value in p["m"].items():
                out.setdefault(name, {})[int(p["step"])] = value
    return out


def gather(run: Run, state: str, actions: Sequence[ActionRecord], folders: Sequence[str]) -> ResultsDoc:
    """The document of the experiment this run ends, from what its monitor and its predecessors' monitors left
    on this host (``folders``: where its checkpoints are, ``policy.checkpoint_dirs``)."""
    from .checkpoints import op_checkpoints

    doc_now = run.document(ended=True)
    doc_now["actions"] = list(actions)
    attempts: list[AttemptDoc] = []
    series: list[dict[str, dict[int, Any]]] = []
    errors: dict[str, ErrorDoc] = {}
    acted: list[str] = []
    for exp_id, where in _chain(run):
        spec = run.spec if where is None else where.spec() or {}
        doc = doc_now if where is None else where.findings() or {}
        place = run.files if where is None else where
        attempts.append(_attempt(exp_id, spec, doc, place))
        series.append(_series_of(place, spec))
        for found in (doc.get("roles") or {}).values():
            for name, hit in (found.get("errors") or {}).items():
                errors.setdefault(name, {"signature": name, "severity": run.severity.get(name, "error"), "count": 0,
                                         "line": hit.get("first_line", "")})["count"] += int(hit.get("count") or 0)
        acted += ["%s %s %s -> %s: %s" % (exp_id, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(a["wall"]))),
                                          a["trigger"], a["action"], a["result"]) for a in doc.get("actions") or []]
    attempts[-1]["state"] = state
    merged = points.merge_attempts([(a.get("first_step"), s) for a, s in zip(attempts, series)])
    saved: list[int] = []
    for folder in sorted(folders):
        try:
            saved += [int(c["step"]) for c in op_checkpoints({"path": folder, "max_depth": 0, "limit": 2000})[
                "checkpoints"]]
        except files.AgentError:
            continue
    names = headline(list(merged))
    out: ResultsDoc = {
        "id": str((run.spec.get("policy") or {}).get("lineage") or run.exp_id), "state": state,
        "written_by": "the run's monitor, as the run ended (nobody was asked)", "host": os.uname()[1],
        "attempts": attempts, "outcomes": [outcome_of(n, merged[n], sorted(set(saved))) for n in names],
        "errors": sorted(errors.values(), key=lambda e: (e["severity"] != "error", -e["count"])),
        "actions": acted, "last_metrics": {}, "notes": [], "tables": []}
    if names:
        out["curve"] = curve(names[0], merged[names[0]])
    for role in run.roles:
        out["last_metrics"].update(role.found.last_metrics or {})
    return out


def collect(run: Run, state: str, actions: Sequence[ActionRecord], folders: Sequence[str]) -> dict[str, Any]:
    """``on_end: collect``: the document of the experiment (``gather``) written by ``wrap_up``, finish.flag once it
    finished. What was written: ``result`` (the action's words), ``results`` and ``finish_flag`` (paths), or
    ``error``."""
    result_dir = run.spec.get("result_dir")
    if not isinstance(result_dir, str) or not result_dir:
        return {"result": "no result_dir", "error": "no result_dir"}
    try:
        done = wrap_up(result_dir, gather(run, state, actions, folders), None, state in FINISHED)
    except (OSError, files.AgentError, ValueError) as exc:
        why = getattr(exc, "message", None) or getattr(exc, "strerror", None) or str(exc)
        return {"result": "collect failed: %s" % why, "error": why}
    where = done["document"] or done["page"]
    flag = "finish.flag written" if done["finish_flag"] else "no finish.flag (the experiment ended %s)" % state
    return {"result": "%s written; %s" % (where, flag), "results": where, "finish_flag": done["finish_flag"]}


# ---- rendering


def _fmt(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else "%.6g" % value
    return str(value)


def _cell(value: object, limit: int = 200) -> str:
    text = " ".join(_fmt(value).split())
    return (text if len(text) <= limit else text[:limit - 3] + "...").replace("|", "\\|")


def headline_words(doc: Mapping[str, Any]) -> str:
    """One line for the index: the first outcome's final and best."""
    outs = doc.get("outcomes") or []
    if not outs:
        return "no metrics"
    o = outs[0]
    return "%s final %s (step %s), best %s (step %s)" % (o.get("name"), _fmt(o.get("final")), _fmt(
        o.get("final_step")), _fmt(o.get("best")), _fmt(o.get("best_step")))


def _best_saved(o: Mapping[str, Any]) -> str:
    if "best_saved" not in o:
        return "unknown (checkpoints not listed)"
    if o.get("best_saved"):
        return "yes (global_step_%s)" % o.get("best_step")
    near = o.get("nearest_checkpoint")
    return "no; nearest global_step_%s" % near if near is not None else "no; none saved"


def _summary_lines(doc: Mapping[str, Any]) -> list[str]:
    attempts = doc.get("attempts") or []
    n = len(attempts)
    last = attempts[-1] if attempts else {}
    out = ["- state: **%s**%s, exit code %s, last step %s" % (
        doc.get("state"), " after %d attempts" % n if n > 1 else "", _fmt(last.get("exit_code")),
        _fmt(last.get("last_step")))]
    for key, label in (("started_at", "started"), ("elapsed_s", "elapsed (s)"), ("written_by", "written by"),
                       ("host", "host")):
        if doc.get(key) not in (None, ""):
            out.append("- %s: %s" % (label, _fmt(doc.get(key))))
    out += ["- command: `%s`" % c for c in doc.get("commands") or []]
    out += ["- log: %s" % p for a in attempts for p in a.get("logs") or []]
    return out


def _attempt_table(doc: Mapping[str, Any]) -> list[str]:
    attempts = doc.get("attempts") or []
    if len(attempts) < 2:
        return []
    out = ["## Attempts", "", "| attempt | run | state | steps | continued from | ended by |",
           "| --- | --- | --- | --- | --- | --- |"]
    for a in attempts:
        steps = "-" if a.get("first_step") is None else "%s-%s" % (a.get("first_step"), _fmt(a.get("last_step")))
        out.append("| %s | %s | %s | %s | %s | %s |" % (a.get("attempt"), _cell(a.get("id")), a.get("state"), steps,
                                                        _cell(a.get("resumed_from")), _cell(a.get("ended_by"))))
    return out + [""]


def _outcome_table(doc: Mapping[str, Any]) -> list[str]:
    outs = doc.get("outcomes") or []
    if not outs:
        return []
    out = ["## Outcome (every attempt, merged by step)", "",
           "| metric | final | at step | best | at step | best step saved? |", "| --- | --- | --- | --- | --- | --- |"]
    for o in outs:
        out.append("| %s (%s is better) | %s | %s | %s | %s | %s |" % (
            _cell(o.get("name")), o.get("direction"), _fmt(o.get("final")), _fmt(o.get("final_step")),
            _fmt(o.get("best")), _fmt(o.get("best_step")), _best_saved(o)))
    return out + [""]


def _curve_table(doc: Mapping[str, Any], prefix: str) -> list[str]:
    c = doc.get("curve") or {}
    out = []
    if doc.get("plot"):
        out += ["## Metrics over steps", "", "![metrics over steps](%s%s)" % (prefix, doc["plot"]), ""]
    if c.get("steps"):
        out += ["## %s over the whole run" % c.get("metric"), ""]
        if int(c.get("of") or 0) > len(c["steps"]):  # say so: a reader would take missing steps for missing data
            out += ["%d of its %d steps, each the last of an even stretch (every step: the metrics history)."
                    % (len(c["steps"]), c["of"]), ""]
        out += ["| step | value |", "| --- | --- |"]
        out += ["| %s | %s |" % (s, _fmt(v)) for s, v in zip(c["steps"], c.get("values") or [])] + [""]
    return out


def _tables(doc: Mapping[str, Any]) -> list[str]:
    out = []
    for t in doc.get("tables") or []:
        out += ["## %s" % t.get("title"), "", "Source: %s." % t.get("source"), ""]
        rows = t.get("rows") or []
        if not rows:
            out += ["(none)", ""]
            continue
        out += ["| metric | n | first | best | last | trend | plateau | best at |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        out += ["| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            _cell(r.get("key")), r.get("n"), _fmt(r.get("first")), _fmt(r.get("best")), _fmt(r.get("last")),
            r.get("trend"), {True: "yes", False: "no"}.get(r.get("plateau"), "-"),
            _cell(r.get("best_at"))) for r in rows] + [""]
    return out


def _rest(doc: Mapping[str, Any]) -> list[str]:
    out = []
    last = doc.get("last_metrics") or {}
    if last:
        out += ["## Last metric line in the log", ""] + ["- %s: %s" % (k, _fmt(v)) for k, v in list(
            last.items())[:40]] + [""]
    out += ["## Errors seen in the logs", ""]
    errors = doc.get("errors") or []
    if errors:
        out += ["| signature | severity | count | line | fix |", "| --- | --- | --- | --- | --- |"]
        out += ["| %s | %s | %s | `%s` | %s |" % (e.get("signature"), e.get("severity"), e.get("count"),
                                                 _cell(e.get("line")), _cell(e.get("fix"), 400)) for e in errors]
        out += [""]
    else:
        out += ["(none)", ""]
    if doc.get("actions"):
        out += ["## Policy actions", ""] + ["- %s" % _cell(a, 500) for a in doc["actions"]] + [""]
    if doc.get("notes"):
        out += ["## Notes", ""] + ["- %s" % _cell(n, 1000) for n in doc["notes"]] + [""]
    return out


def marker(doc: Mapping[str, Any]) -> str:
    said = {"id": doc.get("id"), "state": doc.get("state"), "written_at": doc.get("written_at"),
            "headline": headline_words(doc), "attempts": len(doc.get("attempts") or [])}
    return MARK + json.dumps(said).replace("--", "- -") + " -->"


def render(doc: Mapping[str, Any], prefix: str = "") -> str:
    """The experiment's page (``prefix``: where its folder is, seen from the page: "" in the folder itself)."""
    lines = [marker(doc), "# Results of %s" % doc.get("id"), ""] + _summary_lines(doc) + [""]
    lines += _attempt_table(doc) + _outcome_table(doc) + _curve_table(doc, prefix) + _tables(doc) + _rest(doc)
    return "\n".join(lines) + "\n"


def read_marker(path: str) -> dict[str, Any] | None:
    """What a page's marker line says (None: no page of ours there)."""
    text = files.read_small(path, 4096) or ""
    first = text.split("\n", 1)[0]
    if not first.startswith(MARK) or not first.endswith(" -->"):
        return None
    try:
        said = json.loads(first[len(MARK):-4])
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


def render_index(result_dir: str, pages: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """``<result_dir>/results.md`` when several experiments share the directory: each one's page, newest first."""
    said = {"id": "index", "state": "index", "written_at": _now(), "headline": "%d experiments" % len(pages)}
    lines = [MARK + json.dumps(said) + " -->", "# Results in %s" % result_dir, "",
             "%d experiments share this result directory; each has its own page (newest first)." % len(pages), "",
             "| experiment | state | attempts | headline | written | page |", "| --- | --- | --- | --- | --- | --- |"]
    for folder, m in sorted(pages, key=lambda p: str(p[1].get("written_at") or ""), reverse=True)[:INDEX_MAX]:
        lines.append("| %s | %s | %s | %s | %s | [%s/%s](%s/%s) |" % (
            _cell(m.get("id")), _cell(m.get("state")), _cell(m.get("attempts")), _cell(m.get("headline")),
            _cell(m.get("written_at")), folder, PAGE, folder, PAGE))
    return "\n".join(lines) + "\n"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _pages(result_dir: str) -> list[tuple[str, dict[str, Any]]]:
    """(folder name, marker) of every experiment page in the result directory."""
    out = []
    try:
        with os.scandir(result_dir) as it:
            names = sorted(e.name for _, e in zip(range(SCAN_MAX), it) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    for name in names:
        said = read_marker(os.path.join(result_dir, name, PAGE))
        if said is not None:
            out.append((name, said))
    return out


def wrap_up(result_dir: str, doc: ResultsDoc, png: bytes | None, flag: bool) -> WrapUpReply:
    """Write the experiment's page (and plot) in its folder, then the result directory's document (the page, or
    the index of every page there), then, when ``flag``, finish.flag; each atomically, only over regular files."""
    base = files.expand(result_dir)
    doc = dict(doc, written_at=doc.get("written_at") or _now())  # type: ignore[assignment]
    folder = str(doc.get("id") or "")
    if not folder or "/" in folder or folder in (".", ".."):
        raise files.AgentError("bad experiment id %r" % folder, "doc")
    here = os.path.join(base, folder)
    written: WrapUpReply = {"page": "", "document": None, "plot": None, "finish_flag": None, "index": False,
                            "note": None}
    if png is not None:
        doc["plot"] = PLOT
        written["plot"] = files.write_atomic(os.path.join(here, PLOT), png, replace=True)
    written["page"] = files.write_atomic(os.path.join(here, PAGE), render(doc).encode("utf-8"), replace=True)
    top = os.path.join(base, PAGE)
    if files.exists(top) and read_marker(top) is None:
        written["note"] = ("%s is not a page of this skill's: left as it is; the experiment's page is %s"
                           % (top, written["page"]))
    else:
        pages = _pages(base)
        written["index"] = len(pages) > 1
        text = render_index(base, pages) if written["index"] else render(doc, folder + "/")
        written["document"] = files.write_atomic(top, text.encode("utf-8"), replace=True)
    if flag:
        written["finish_flag"] = files.write_atomic(os.path.join(base, FLAG), b"", replace=True)
    return written


def op_wrap_up(req: Mapping[str, object]) -> WrapUpDone:
    """``wrap_up`` for ``collect_results``: the document it gathered, the plot (base64) and whether finish.flag is
    wanted."""
    import base64

    doc = need(req, "doc", dict)
    data = need_or(req, "png", str, None)
    done = wrap_up(need(req, "result_dir", str), doc,  # type: ignore[arg-type]  # the server's ResultsDoc
                   base64.b64decode(data) if data is not None else None, need(req, "flag", bool))
    return dict(done)  # type: ignore[return-value]  # ``ok`` is the dispatcher's
