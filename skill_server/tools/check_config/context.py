"""The lint context: the analysis of the script (``skill_server.analysis``), computed once, plus what only the
linter needs: which checks were skipped and why, where each value is set (as finding locations), and how a
fix should change it.

The analysis says what the script configures (one ``Run`` per construction: the config replayed, who set
each key, AgentJet's refusal causes). Everything here is about reporting on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from skill_server.analysis.agentjet import KEYS, CapFacts, Cause
from skill_server.analysis.analyse import Analysis
from skill_server.analysis.bases import BaseYaml
from skill_server.analysis.concurrency import ClientBound, client_bound
from skill_server.analysis.replay import Run
from skill_server.analysis.values import MISSING, Unknown, a_type, describe_unknown, is_int, show
from skill_server.tools.check_config.models import Location

CAP_INPUTS = ("max_env_worker", "num_repeat", "train_batch_size")


class LintContext:
    """What every rule reads: AgentJet (the adapter), the runs, the script's file; where skips are recorded."""

    def __init__(self, analysis: Analysis) -> None:
        session = analysis.session
        self.session = session
        self.aj = session.aj
        self.script_file = session.script_file
        self.runs = analysis.runs
        self.notes = session.notes  # one list: the analysis's notes, then the rules'
        self.note = session.note
        self.skipped: list[tuple[str, str]] = []
        self.client_bound: ClientBound = client_bound(session.scan)  # what the script runs at once

    # -- bookkeeping

    def skip(self, rule: str, reason: str) -> None:
        if (rule, reason) not in self.skipped:
            self.skipped.append((rule, reason))

    # -- values

    def needs(self, rule: str, run: Run, *names: str) -> dict[str, Any] | None:
        """The named effective values (positive ints), or None after recording why ``rule`` cannot run."""
        got: dict[str, Any] = {}
        problems: list[str] = []
        unknown: dict[str, list[str]] = {}  # reason -> names
        for name in names:
            value = run.value(name)
            if isinstance(value, Unknown):
                unknown.setdefault(value.reason, []).append(name)
            elif value is MISSING or value is None:
                problems.append(f"{name} is not set")
            elif not (is_int(value) and value > 0):
                problems.append(f"{name} is {show(value)} ({a_type(value)}), not a positive int"
                                + self._assumption_hint(run, name))
            else:
                got[name] = value
        if unknown:
            problems.insert(0, describe_unknown([(n, Unknown(r)) for r, group in unknown.items() for n in group]))
        if problems:
            self.skip(rule, "; ".join(problems))
            return None
        return got

    def _assumption_hint(self, run: Run, name: str) -> str:
        setter = run.effective_setter(KEYS.get(name, name))
        if setter is not None and any(a.kind == "env" for a in setter.assumes):
            return " (an environment default is a str at run time unless the script converts it)"
        return ""

    def episode_cap(self, run: Run, rule: str | None = None, *, with_batch: bool = True) -> CapFacts | None:
        """The engine's episode cap for the effective values; when it cannot be computed, None (and, for
        ``rule``, the reason is recorded as a skip)."""
        names = CAP_INPUTS if with_batch else CAP_INPUTS[:2]
        if rule is not None:
            v = self.needs(rule, run, *names)
        else:
            v = {n: run.value(n) for n in names}
            if not all(is_int(x) and x > 0 for x in v.values()):
                return None
        if v is None:
            return None
        tracker = run.value("max_inference_tracker_threads")
        facts = self.aj.episode_cap(v["max_env_worker"], v["num_repeat"], v.get("train_batch_size"),
                                    tracker if is_int(tracker) and tracker > 0 else None)
        if isinstance(facts, str):
            if rule is not None:
                self.skip(rule, facts)
            return None
        return facts

    # -- who sets what, and where

    def locate(self, run: Run, *names: str) -> list[Location]:
        """Where each named value is set, effective setters first (in the order given), then overridden ones.
        A value nobody sets is located at AgentJet's default (its file when an install is used)."""
        first: list[Location] = []
        later: list[Location] = []
        for name in names:
            key = KEYS.get(name, name)
            setter = run.effective_setter(key)
            if setter is None:
                if run.base.values_unknown:
                    first.append(Location(file=str(run.base.path) if run.base.path else None, line=None, key=key,
                                          source="yaml"))
                else:
                    file = self.aj.default_file(key)
                    line = self.yaml_lines(file).get(key) if file else None
                    first.append(Location(file=file, line=line, key=key, source="default"))
                continue
            first.append(Location(file=setter.file, line=setter.line, key=key, source=setter.kind))
            for older in reversed(run.setters.get(key, [])[:-1]):
                if older.kind != "tcp-switch":
                    later.append(Location(file=older.file, line=older.line, key=key, source=older.kind))
        return unique_locations(first + later)

    def construction_location(self, run: Run) -> list[Location]:
        if run.construction is not None:
            return [Location(file=self.script_file, line=run.construction.line)]
        return [Location(file=str(run.base.path) if run.base.path else None, line=None)]

    def yaml_location(self, base: BaseYaml, key: str) -> Location:
        file, line = base.place_of(self.session, key)
        return Location(file=file, line=line, key=key, source="yaml")

    def yaml_lines(self, file: str | None) -> dict[str, int]:
        return self.session.key_lines(file)

    def where_to_set(self, run: Run, key: str, value: Any) -> str:
        """How to change ``key`` to ``value`` in the place that holds it now, else in the job's one place."""
        kwarg = self.aj.kwarg_for(key)
        setter = run.effective_setter(key)
        text = show(value)
        if setter is not None and setter.kind == "kwarg":
            if setter.text == show(setter.value):
                return f"change the kwarg {setter.name}={setter.text} at line {setter.line} to {setter.name}={text}"
            return (f"make the kwarg {setter.name}={setter.text} at line {setter.line} (now {show(setter.value)}) "
                    f"give {text}")
        if setter is not None and setter.kind == "write":
            return f"change the write at line {setter.line} to set {key} = {text}"
        if run.base.engine_copy and (setter is None or setter.kind == "yaml"):
            return f"set {key} to {text} in the job the client builds, not in {run.base.name}"
        if setter is not None and setter.kind == "yaml":
            where = f"{Path(setter.file).name}:{setter.line}" if setter.file and setter.line else run.base.name
            return f"set {key.rsplit('.', 1)[-1]}: {yaml_scalar(value)} at {where}"
        if run.base.is_users and self.yaml_first(run):
            return f"add {key}: {yaml_scalar(value)} to {run.base.name}"
        if kwarg is not None and run.construction is not None:
            return f"pass {kwarg}={text} to AgentJetJob (a kwarg of {self.aj.label})"
        if run.construction is not None:
            return f"write job.config.{key} = {text} right after AgentJetJob(...)"
        return f"set {key}: {yaml_scalar(value)} in {run.base.name}"

    def misspelt(self, run: Run) -> dict[str, str | None]:
        """Keys this run sets that AgentJet's config does not have (the unknown-key rule reports them) -> the
        closest known key, or None: a fix names the corrected key, or leaves the key out and says why."""
        aj = self.aj
        out: dict[str, str | None] = {}
        if run.base.is_users:
            out |= {k: aj.closest(k) for k in run.base.explicit if k.startswith("ajet.") and not aj.known(k)}
        if run.construction is not None:
            out |= {w.key: aj.closest(w.key) for w in run.writes
                    if w.kind not in ("mirror", "method") and not aj.known(w.key)}
        return out

    def yaml_first(self, run: Run) -> bool:
        """The user's YAML holds more of this job than the script's kwargs and writes do."""
        c = run.construction
        if c is None:
            return True
        script_keys = {k for k in c.kwargs if k not in self.aj.control_kwargs} | {
            w.key for w in run.applied_writes if w.kind not in ("method", "mirror")}
        return len(run.base.explicit) > len(script_keys)


def cause_values(cause: Cause) -> dict[str, Any]:
    """The values every finding made from an AgentJet refusal cause carries, first in its ``values``."""
    return {"cause": cause.id, "exception": cause.exception, "exception_message": cause.exception_message,
            "verified": cause.verified}


def unique_locations(locations: list[Location]) -> list[Location]:
    """Each place once, in the order given: a location is the same when it names the same file, line and key
    (two keys set on one line are two locations; the source does not matter, the first one given is kept)."""
    seen: set[tuple[str | None, int | None, str | None]] = set()
    out: list[Location] = []
    for loc in locations:
        ident = (loc.file, loc.line, loc.key)
        if ident not in seen:
            seen.add(ident)
            out.append(loc)
    return out


def yaml_scalar(value: Any) -> str:
    try:
        return yaml.safe_dump(value, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()
    except yaml.YAMLError:
        return show(value)
