"""Blueprint markdown: parse (tolerant of formatting), validate, and render from fields.

A blueprint is the experiment card AgentJet's research skills write before running anything: sections
``[exp_purpose]``, ``[exp_codebase_dir]``, ``[exp_venv_exe]``, ``[exp_yaml_path]``,
``[exp_launch_command]``, ``[exp_result_dir]``, ``[exp_max_time]`` plus free notes. A section header may
be ``[exp_x]``, ``## [exp_x]``, ``**[exp_x]**``, ``- [exp_x]: value`` or ``exp_x:``; its value is a
``content:`` bullet when there is one (AgentJet's own example numbers them: ``- content 1:``, ``- content 2:``;
the first filled one is a path section's value), else the text that is not a ``description:``/``hint:``/
``warning:`` bullet. Validation only reads text and checks paths; it never runs anything.

A blueprint lives on a host: ``gpu1:/abs/blueprint.md`` (or a path plus the launch's ``host``) is read on
gpu1 through the host agent (a regular file, bounded), its relative paths resolve against its folder
there and its paths are checked there (``stat``), so a run is checked where it will run; ``local:/path``
reads one on this machine for a run elsewhere (its paths are still checked on the run's host).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath
from typing import TYPE_CHECKING, Literal

from skill_server.core.deadline import Deadline
from skill_server.core.errors import ToolFailure, ToolInputError
from skill_server.core.fsutil import resolve_path
from skill_server.experiments.models import MAX_DURATION_S, RunPolicy
from skill_server.hosts import LOCAL, HostUnreachable, call_hosts, client, normalise
from skill_server.hosts import localfiles as host_files

if TYPE_CHECKING:
    from skill_server.hosts.agent.protocol import PathInfo

MAX_BLUEPRINT_BYTES = 256 * 1024

SECTIONS = (
    "exp_purpose", "exp_codebase_dir", "exp_venv_exe", "exp_yaml_path", "exp_launch_command", "exp_result_dir",
    "exp_max_time",
)
#: Sections a blueprint may add: ``[exp_policy]``, the launch's ``policy`` as a JSON object (its keys: ``RunPolicy``).
OPTIONAL_SECTIONS = ("exp_policy",)
#: The template's ``[exp_policy]``: left empty (no policy), with what it takes and an example to copy.
POLICY_DESCRIPTION = (
    "Optional: what the run's monitor does alone while nobody watches, as launch_experiment's policy in one "
    "JSON object after content: (references/monitoring.md), e.g. {\"on_error\": \"resume\", \"errors\": "
    "[\"nccl_error\"], \"on_stall\": \"stop\", \"on_end\": \"collect\", \"notify_file\": \"alerts.log\"}; "
    "empty: no policy.")
PATH_SECTIONS = ("exp_codebase_dir", "exp_venv_exe", "exp_yaml_path", "exp_result_dir")
DEFAULT_MAX_TIME = "24 hours"
DEFAULT_FIRST_STEP = "20 min"
DEFAULT_RESULT_DIR = "./auto_agent/exp_results/"
DEFAULT_MAX_TIME_S = 24 * 3600
DEFAULT_FIRST_STEP_S = 20 * 60

_HEADER = re.compile(
    r"^\s*(?:#{1,6}\s*)?(?:[-*+]\s+)?(?:\*\*|__)?\s*\[?\s*(exp_[a-z_]+)\s*\]?\s*(?:\*\*|__)?\s*[:：]?\s*(.*?)\s*$",
    re.IGNORECASE,
)
#: A labelled bullet: ``- content: x``, and AgentJet's numbered form ``- content 1: x`` / ``- warning 2:``.
_LABELLED = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*|__)?(description|hint|content|warning|note|value)(?:\s*\d{1,3})?"
                       r"(?:\*\*|__)?\s*[:：]\s*(.*)$", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_OTHER_HEADING = re.compile(r"^\s*(?:#{1,6}\s|\[[^\]]+\]\s*$|(?:\*\*|__)\[[^\]]+\](?:\*\*|__)\s*$)")

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "小时": 3600, "分钟": 60, "秒": 1, "天": 86400,
}
_DURATION = re.compile(
    r"(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|hr|h|days?|d|小时|分钟|秒|天)(?![A-Za-z])",
    re.IGNORECASE,
)


_NEGATIVE = re.compile(r"^\s*[-\u2212]\s*$")  # a leading minus sign; in "4-6 hours" or "run-2h" it is no sign


def parse_duration(text: str) -> float | None:
    """Seconds in '24 hours', '90 min', '1.5h', '2h30m', '1 day'; None when no unit-bearing number is found.

    A sign before the number is kept ('-5h' is -18000), so that it is reported instead of read as 5 hours."""
    matches = list(_DURATION.finditer(text))
    if not matches:
        return None
    sign = -1 if _NEGATIVE.match(text[:matches[0].start()]) else 1
    total = 0.0
    # Adjacent parts such as "2h30m" or "1 h 30 min" add up; stop at the first gap with other words.
    prev_end = None
    for match in matches:
        if prev_end is not None and text[prev_end:match.start()].strip(" ,and") != "":
            break
        total += float(match.group(1)) * _UNITS[match.group(2).lower()]
        prev_end = match.end()
    return sign * total if total > 0 else None


def parse_max_time(text: str) -> tuple[float | None, float | None]:
    """(max_time_s, first_step_s) from the [exp_max_time] text: a clause mentioning 'first' sets the second."""
    max_time = first_step = None
    clauses = re.split(r"[;\n。；]|,(?!\d)", text)
    for clause in clauses:
        seconds = parse_duration(clause)
        if seconds is None:
            continue
        if re.search(r"first|首", clause, re.IGNORECASE):
            if first_step is None:
                first_step = seconds
        elif max_time is None:
            max_time = seconds
    return max_time, first_step


@dataclass
class Problem:
    field: str
    severity: Literal["error", "warning"]
    message: str


@dataclass
class Parsed:
    values: dict[str, str]
    notes: str
    problems: list[Problem] = field(default_factory=list)


def _strip_inline(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`'\"":
        text = text[1:-1].strip()
    return text.strip("`").strip()


def _section_value(lines: list[str], name: str) -> str:
    content: list[str] = []
    plain: list[str] = []
    in_content = False
    for raw in lines:
        if _FENCE.match(raw):
            continue
        labelled = _LABELLED.match(raw)
        if labelled:
            label = labelled.group(1).lower()
            in_content = label in ("content", "value")
            if in_content and labelled.group(2).strip():
                content.append(labelled.group(2))
            continue
        stripped = raw.strip()
        if not stripped:
            continue
        (content if in_content else plain).append(re.sub(r"^[-*+]\s+", "", stripped))
    chosen = content or plain
    if not chosen:
        return ""
    if name in ("exp_purpose",):
        return "\n".join(_strip_inline(x) for x in chosen).strip()
    if name == "exp_launch_command":
        parts = [_strip_inline(x).removesuffix("\\").strip() for x in chosen]
        return " ".join(p for p in parts if p)
    if name == "exp_max_time":
        return "; ".join(_strip_inline(x) for x in chosen)
    if name == "exp_policy":
        return "\n".join(chosen)
    return _strip_inline(chosen[0])


def parse(text: str) -> Parsed:
    """Split blueprint text into known sections (values) and everything else (notes)."""
    bodies: dict[str, list[str]] = {}
    notes: list[str] = []
    current: str | None = None
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            if current:
                bodies[current].append(line)
            else:
                notes.append(line)
            continue
        header = None if in_fence else _HEADER.match(line)
        if header and header.group(1).lower() in SECTIONS + OPTIONAL_SECTIONS:
            current = header.group(1).lower()
            bodies.setdefault(current, [])
            if header.group(2):
                bodies[current].append(header.group(2))
            continue
        if not in_fence and _OTHER_HEADING.match(line):
            current = None  # another heading or an unknown [section] starts the free notes
        if current:
            bodies[current].append(line)
        else:
            notes.append(line)
    values = {name: _section_value(body, name) for name, body in bodies.items()}
    return Parsed(values=values, notes="\n".join(notes).strip())


@dataclass
class Validated:
    values: dict[str, str]
    resolved: dict[str, str]
    max_time_s: float | None
    first_step_timeout_s: float | None
    notes: str
    problems: list[Problem]
    #: ``[exp_policy]`` checked (None: no such section, or it has an error in ``problems``).
    policy: RunPolicy | None = None

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)


def duration_problem(seconds: float) -> str | None:
    """Why a parsed duration cannot be used (too long, not finite), or None."""
    if not seconds < float("inf") or seconds > MAX_DURATION_S:
        return f"longer than the limit of {MAX_DURATION_S // 86400} days"
    if seconds < 0:
        return "negative"
    if seconds < 1:
        return "shorter than one second"
    return None


#: What each of a list of paths is, where the run will use them (``hosts.agent.files.describe``).
Stat = Callable[[list[str]], list["PathInfo"]]


def validate_text(text: str, base_dir: PurePath, *, check_paths: bool = True) -> Validated:
    """Fields, resolved paths, durations and problems of a blueprint whose paths are this machine's
    (``check_paths=False`` skips the existence checks)."""
    return _validate(text, base_dir, here=True, stat=_stat_here if check_paths else None, where="")


def validate_on(text: str, base_dir: PurePath, host: str, deadline: Deadline | None = None) -> Validated:
    """As :func:`validate_text`, with the paths those of ``host`` (``~`` is its home) and checked there in one
    round trip; relative ones resolve against ``base_dir``, the blueprint's folder. Problems name the host."""
    if host == LOCAL:
        return validate_text(text, base_dir)
    return _validate(text, base_dir, here=False, stat=lambda paths: _stat_on(host, paths, deadline),
                     where=f" on {host}")


def _validate(text: str, base_dir: PurePath, *, here: bool, stat: Stat | None, where: str) -> Validated:
    parsed = parse(text)
    values = parsed.values
    problems = _section_problems(values)
    resolved = _resolve_paths(values, base_dir, here, problems)
    if stat is not None and resolved:
        _check_paths(resolved, stat(list(resolved.values())), where, here, problems)
    max_time_s, first_step_s = _durations(values, problems)
    return Validated(values, resolved, max_time_s, first_step_s, parsed.notes, problems, _policy(values, problems))


def _policy(values: dict[str, str], problems: list[Problem]) -> RunPolicy | None:
    """``[exp_policy]`` as the launch's ``policy``: a JSON object of its keys; anything else is an error."""
    from pydantic import ValidationError

    text = values.get("exp_policy")
    if not text:
        return None
    try:
        return RunPolicy.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        problems.append(Problem("exp_policy", "error", "not a policy (a JSON object of launch_experiment's policy "
                                f"keys): {where + ': ' if where else ''}{first.get('msg')}"))
        return None


def _section_problems(values: dict[str, str]) -> list[Problem]:
    """Each section missing, empty or left a TODO is an error; a TODO value is blanked so that nothing uses it."""
    problems: list[Problem] = []
    for name in SECTIONS:
        if name not in values:
            problems.append(Problem(name, "error", f"section [{name}] is missing"))
        elif not values[name]:
            problems.append(Problem(name, "error", f"section [{name}] is empty"))
        elif values[name].upper().startswith("TODO"):
            problems.append(Problem(name, "error", f"section [{name}] is not filled in ({values[name]!r})"))
            values[name] = ""
    return problems


def _as_path(raw: str, on_this_machine: bool) -> PurePath:
    # On another host "~" means that host's home: keep it for the host to expand.
    return Path(raw).expanduser() if on_this_machine else PurePosixPath(raw)


def _absolute(path: PurePath, on_this_machine: bool) -> bool:
    return path.is_absolute() or (not on_this_machine and str(path).startswith("~"))


def _resolve_paths(values: dict[str, str], base_dir: PurePath, here: bool, problems: list[Problem]
                   ) -> dict[str, str]:
    """The path sections made absolute: the code base against the blueprint's directory, the others against the
    code base (a warning for each relative one)."""
    codebase = values.get("exp_codebase_dir") or ""
    code_dir = _as_path(codebase, here) if codebase else base_dir
    if codebase and not _absolute(code_dir, here):
        problems.append(Problem("exp_codebase_dir", "warning",
                                f"relative path {codebase!r}; resolved against the blueprint's directory"))
        code_dir = base_dir / code_dir
    code_dir = PurePosixPath(_normalise(code_dir))
    resolved: dict[str, str] = {}
    path: PurePath
    for name in PATH_SECTIONS:
        raw = values.get(name) or ""
        if not raw:
            continue
        if name == "exp_codebase_dir":
            path = code_dir
        else:
            path = _as_path(raw, here)
            if not _absolute(path, here):
                problems.append(Problem(name, "warning", f"relative path {raw!r}; resolved against exp_codebase_dir"))
                path = PurePosixPath(_normalise(code_dir / path))
        resolved[name] = str(path)
    return resolved


def _check_paths(resolved: dict[str, str], infos: list[PathInfo], where: str, here: bool,
                 problems: list[Problem]) -> None:
    """An error for each path that cannot serve its section where the run will use it; a path the host expanded
    (``~``) is shown as it found it. A path missing on a host but present here says so: the blueprint describes
    this machine, not the host."""
    for (name, shown), info in zip(list(resolved.items()), infos):
        if not here and info["kind"] != "missing":
            resolved[name] = info["path"]
        missing = _missing(name, info, where)
        if missing and where and info["kind"] == "missing" and os.path.exists(os.path.expanduser(shown)):
            missing += "; it exists on this machine"
        if missing:
            problems.append(Problem(name, "error", missing))


def _missing(name: str, info: PathInfo, where: str) -> str | None:
    """Why the path of section ``name`` cannot be used (``where``: on which host), or None."""
    kind, path = info["kind"], info["path"]
    if kind == "unreadable":
        return f"cannot be looked at{where} (no permission on a folder above it?): {path}"
    if name == "exp_codebase_dir" and kind != "dir":
        return f"directory does not exist{where}: {path}" if kind == "missing" else f"not a directory{where}: {path}"
    if name == "exp_venv_exe":
        if kind != "file":
            return f"interpreter does not exist{where}: {path}"
        if not info["executable"]:
            return f"interpreter is not executable{where}: {path}"
    if name == "exp_yaml_path" and kind != "file":
        return f"YAML file does not exist{where} (write it before launching): {path}"
    if name == "exp_result_dir" and kind not in ("dir", "missing"):
        return f"exists but is not a directory{where}: {path}"
    return None


def _stat_here(paths: list[str]) -> list[PathInfo]:
    return [host_files.describe(path) for path in paths]


def _stat_on(host: str, paths: list[str], deadline: Deadline | None) -> list[PathInfo]:
    op = client.stat(paths)
    reply = call_hosts({host: [op]}, timeout_s=READ_TIMEOUT_S, deadline=deadline)[host]
    if isinstance(reply, HostUnreachable):
        raise ToolFailure(reply.message, field="blueprint")
    return op.expect(reply[0], field="blueprint")["paths"]


def _durations(values: dict[str, str], problems: list[Problem]) -> tuple[float | None, float | None]:
    """(max time, first-step deadline) in seconds from [exp_max_time]; one that cannot be used is an error and None."""
    text = values.get("exp_max_time")
    if not text:
        return None, None
    max_time_s, first_step_s = parse_max_time(text)
    if max_time_s is None:
        problems.append(Problem("exp_max_time", "error",
                                f"cannot read a duration from {text!r} (write it like '24 hours', '90 min' or '1.5h')"))
    for label, seconds in (("max time", max_time_s), ("first-step deadline", first_step_s)):
        why = duration_problem(seconds) if seconds is not None else None
        if why:
            problems.append(Problem("exp_max_time", "error", f"the {label} is {why}"))
    return _usable(max_time_s), _usable(first_step_s)


def _usable(seconds: float | None) -> float | None:
    return seconds if seconds is not None and duration_problem(seconds) is None else None


def _normalise(path: PurePath) -> str:
    return os.path.normpath(str(path))


def read_blueprint(path_text: str, field_name: str = "path") -> tuple[str, Path]:
    """The text of a blueprint file on this machine (regular files only, bounded) and its absolute path;
    a relative path resolves against the server's working directory (``fsutil.resolve_path``)."""
    path = resolve_path(path_text, field=field_name)
    try:
        size, data = host_files.read_range(str(path), 0, MAX_BLUEPRINT_BYTES + 1)
    except FileNotFoundError:
        raise ToolInputError(f"blueprint not found: {path}", field=field_name) from None
    except host_files.AgentError as exc:
        raise ToolInputError(exc.message, field=field_name) from None
    except (OSError, ValueError) as exc:
        raise ToolInputError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", field=field_name) from None
    _bounded(size, str(path), field_name)
    return data.decode("utf-8", errors="replace"), path


def _bounded(size: int, shown: str, field_name: str) -> None:
    if size > MAX_BLUEPRINT_BYTES:
        raise ToolInputError(f"{shown} is {size} bytes, over the {MAX_BLUEPRINT_BYTES // 1024} KiB limit",
                             field=field_name)


#: The host call that reads a blueprint or checks its paths.
READ_TIMEOUT_S = 30.0
#: ``host:/path`` or ``host:~/path`` (scp's form): a destination without '/' (an IPv6 address in brackets), a
#: colon, then a path that starts like a path or like what a shell would expand (refused by ``_host_path``).
#: Anything else (``./a:b``, ``notes:draft.md``) is a path here.
_ON_HOST = re.compile(r"^((?:[^/:\[\]]|\[[^\]/]*\])+):(?=[/~.$`'\"])(.*)$", re.DOTALL)


@dataclass(frozen=True)
class Source:
    """Where a blueprint is read: ``host`` (``local`` or an ssh destination) and its path there."""

    host: str
    path: str

    def __str__(self) -> str:
        return self.path if self.host == LOCAL else f"{self.host}:{self.path}"


def locate(value: str, host: str | None, field_name: str) -> tuple[Source, str]:
    """Where the blueprint ``value`` is read, and the run's host: ``gpu1:/path`` is read on gpu1 and runs there
    (a ``host`` naming another is refused), ``local:/path`` is read here for a run on ``host``, and a plain
    path is read on ``host`` (default: here)."""
    run_host = normalise(host, field="host")
    if value.startswith("ssh://"):
        raise ToolInputError("an ssh:// destination cannot prefix a path: give the path here and the destination "
                             "in host", field=field_name)
    named = _ON_HOST.match(value)
    if named is None:
        return Source(run_host, value), run_host
    where = normalise(named.group(1), field=field_name)
    if where != LOCAL and host is not None and run_host != where:
        raise ToolInputError(f"the blueprint is on {where} but host is {run_host}: a blueprint on a host runs "
                             "there (leave host out, or read one here with 'local:/path')", field=field_name)
    return Source(where, named.group(2)), run_host if where == LOCAL else where


def read(source: Source, field_name: str, deadline: Deadline | None = None) -> tuple[str, PurePath]:
    """The blueprint's text and its absolute path where it lives: on this machine as :func:`read_blueprint`
    reads it, on a host through its agent (a regular file, bounded; a FIFO or a device is refused unopened)."""
    if source.host == LOCAL:
        return read_blueprint(source.path, field_name)
    path = _host_path(source.path, source.host, field_name)
    op = client.read(path, MAX_BLUEPRINT_BYTES + 1, text=True)
    reply = call_hosts({source.host: [op]}, timeout_s=READ_TIMEOUT_S, deadline=deadline)[source.host]
    if isinstance(reply, HostUnreachable):
        raise ToolFailure(reply.message, field=field_name)
    answer = op.answer(reply[0])
    if not answer["ok"]:
        raise ToolInputError(_unread(source.host, path, answer["kind"], answer["error"]), field=field_name)
    _bounded(answer["size"], f"{source.host}:{answer['path']}", field_name)
    return answer.get("text", ""), PurePosixPath(answer["path"])


def _unread(host: str, path: str, kind: str, error: str) -> str:
    if kind == "not_found":
        here = os.path.expanduser(path)
        hint = f"; {here} is on this machine: give 'local:{here}' to read it here" if os.path.isfile(here) else ""
        return f"blueprint not found on {host}: {path}{hint}"
    if kind == "not_regular":
        return f"not a regular file on {host}: {path} (a blueprint is a markdown file)"
    return f"cannot read the blueprint on {host}: {error}"


def _host_path(path: str, host: str, field_name: str) -> str:
    """A blueprint's path on a host, as the host will take it (no shell ever reads it): absolute or ``~/``, with
    no ``..``, quotes, ``$`` or backquotes, whose meaning a reader would guess at."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        raise ToolInputError(f"{path!r} contains a control character", field=field_name)
    if "$" in path or "`" in path:
        raise ToolInputError(f"{path!r}: no shell expands '$' or '`' here; give the path itself ('~/' for the "
                             f"home on {host})", field=field_name)
    if "'" in path or '"' in path:
        raise ToolInputError(f"{path!r}: give the path without quotes", field=field_name)
    if ".." in path.split("/"):
        raise ToolInputError(f"{path!r}: '..' is not taken in a host path; give the blueprint's own path",
                             field=field_name)
    if not (path.startswith("/") or path == "~" or path.startswith("~/")):
        raise ToolInputError(f"{path!r}: give an absolute path on {host}, or one under '~/'", field=field_name)
    return path


def render(fields: dict[str, str | None]) -> str:
    """A complete blueprint; missing values become TODO markers that ``validate`` reports."""

    def value(name: str, default: str | None = None) -> str:
        given = fields.get(name)
        return given if given else (default if default is not None else f"TODO: fill in {name}")

    max_time = value("exp_max_time", DEFAULT_MAX_TIME)
    first_step = fields.get("first_step_timeout") or DEFAULT_FIRST_STEP
    notes = fields.get("notes") or "- (free notes, todo list and a log of fix attempts go here)"
    sections = [
        ("exp_purpose", "What this experiment tries to find out, in one or two sentences.", value("exp_purpose")),
        ("exp_codebase_dir", "Absolute path of the code base the command runs in.", value("exp_codebase_dir")),
        ("exp_venv_exe", "Python interpreter of the virtual environment.", value("exp_venv_exe")),
        ("exp_yaml_path", "Training YAML (written next to this blueprint before launching).", value("exp_yaml_path")),
        ("exp_launch_command", "Command typed into the tmux session (one line).", value("exp_launch_command")),
        ("exp_result_dir", "Where logs, results.md and finish.flag go.", value("exp_result_dir", DEFAULT_RESULT_DIR)),
        ("exp_max_time", "Wall-clock budget per run, and the deadline for the first training step (the first "
         "step:N line in the log).", f"{max_time}; first step within {first_step}"),
    ]
    out = ["# Experiment blueprint", ""]
    for name, description, content in sections:
        out += [f"## [{name}]", f"- description: {description}", f"- content: {content}", ""]
    out += ["## [exp_policy]", f"- description: {POLICY_DESCRIPTION}", "- content:", ""]
    out += ["## Notes", "", notes, ""]
    return "\n".join(out)
