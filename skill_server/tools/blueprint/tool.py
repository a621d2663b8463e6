"""The ``blueprint`` tool: render a blueprint (create-only) or validate one. Never runs anything."""

from __future__ import annotations

from pathlib import Path

from skill_server.core.errors import ToolInputError
from skill_server.core.fsutil import resolve_path, write_text_atomic
from skill_server.experiments import blueprint as bp
from skill_server.tools.blueprint.models import BlueprintInput, BlueprintOutput, BlueprintProblem

_TEMPLATE_FIELDS = ("purpose", "codebase_dir", "venv_exe", "yaml_path", "launch_command", "result_dir", "max_time",
                    "first_step_timeout", "notes")


def blueprint_tool(inp: BlueprintInput) -> BlueprintOutput:
    if inp.action == "validate":
        given = [f for f in _TEMPLATE_FIELDS if getattr(inp, f) is not None]
        if given:
            raise ToolInputError("only used by action='template'", field=given[0])
        if (inp.path is None) == (inp.text is None):
            raise ToolInputError("give exactly one of path or text", field="path")
        if inp.path is None:
            if inp.host is not None:
                raise ToolInputError("only with path (the blueprint's folder on that host resolves its relative "
                                     "paths)", field="host")
            return _output("validate", bp.validate_text(inp.text or "", Path.cwd()), None, None)
        source, run_host = bp.locate(inp.path, inp.host, "path")
        text, where = bp.read(source, "path")
        shown = str(bp.Source(source.host, str(where)))
        return _output("validate", bp.validate_on(text, where.parent, run_host), None, shown)
    for name in ("text", "host"):
        if getattr(inp, name) is not None:
            raise ToolInputError("only used by action='validate'", field=name)
    for name in ("max_time", "first_step_timeout"):
        value = getattr(inp, name)
        if value is None:
            continue
        seconds = bp.parse_duration(value)
        if seconds is None:
            raise ToolInputError(f"cannot read a duration from {value!r} (try '24 hours', '90 min', '1.5h')",
                                 field=name)
        why = bp.duration_problem(seconds)
        if why:
            raise ToolInputError(f"{value!r} is {why}", field=name)
    text = bp.render({
        "exp_purpose": inp.purpose, "exp_codebase_dir": inp.codebase_dir, "exp_venv_exe": inp.venv_exe,
        "exp_yaml_path": inp.yaml_path, "exp_launch_command": inp.launch_command, "exp_result_dir": inp.result_dir,
        "exp_max_time": inp.max_time, "first_step_timeout": inp.first_step_timeout, "notes": inp.notes,
    })
    base = Path.cwd()
    written = None
    if inp.path is not None:
        target = resolve_path(inp.path, field="path")
        if target.exists() or target.is_symlink():
            raise ToolInputError(f"{target} exists; the template is only written to a new file (choose another "
                                 "path, or validate the existing one)", field="path")
        written = str(write_text_atomic(target, text, overwrite=False, field="path"))
        base = target.parent
    return _output("template", bp.validate_text(text, base), text, written)


def _summary(action: str, v: bp.Validated, path: str | None) -> str:
    """One line: the blueprint's validity, its problem counts and the first (errors first)."""
    what = "The blueprint" + (f" {path}" if path else "") + (" (written)" if action == "template" and path else "")
    errors = [p for p in v.problems if p.severity == "error"]
    warnings = [p for p in v.problems if p.severity == "warning"]
    if not v.problems:
        return f"{what} is valid."
    counts = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in ((len(errors), "error"),
                                                                             (len(warnings), "warning")) if n)
    first = (errors or warnings)[0]
    state = "is valid" if v.ok else "is not valid"
    return f"{what} {state}: {counts}; first: {first.field}: {first.message}"[:600]


def _output(action: str, v: bp.Validated, text: str | None, path: str | None) -> BlueprintOutput:
    return BlueprintOutput(
        summary=_summary(action, v, path),
        action=action, ok=v.ok, fields=v.values, resolved=v.resolved, max_time_s=v.max_time_s,
        first_step_timeout_s=v.first_step_timeout_s, notes=v.notes,
        problems=[BlueprintProblem(field=p.field, severity=p.severity, message=p.message) for p in v.problems],
        text=text, path=path,
    )
