"""The per-tool reference, generated from the tool table and the models: ``references/tools.md``.

The tool list publishes lean schemas (``app.published``); the field documentation that leaves them lives
here: every tool's description and details, each argument with its type, default and full description,
and each result field with its meaning, nested objects included. A test keeps the page equal to this
rendering. Regenerate after changing a tool, a model or a description:

    python -m skill_server.app.tool_docs --write      # rewrite references/tools.md
    python -m skill_server.app.tool_docs              # print it
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skill_server.app.schema_text import describe_type
from skill_server.app.table import TOOLS, ToolSpec
from skill_server.core.models import MAX_JSON_INT

if TYPE_CHECKING:
    from pydantic import BaseModel

REFERENCE = Path(__file__).resolve().parents[2] / "references" / "tools.md"

HEADER = """# Tool reference

<!-- generated from the tool table and the models by `python -m skill_server.app.tool_docs --write`: do not edit -->

Every tool's arguments and result, field by field. The schemas the MCP server publishes are lean (see
[mcp-setup.md](mcp-setup.md#what-the-published-schemas-carry)); this page is their full text. The CLI's
`python -m skill_server call TOOL --help` prints a tool's arguments too.
"""


def duration(seconds: int) -> str:
    """``30`` -> ``30 s``, ``120`` -> ``2 min``."""
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


def backoff_text() -> str:
    """The wait back-off, from the one constant the tool uses."""
    from skill_server.tools.wait_experiment.tool import WAIT_SCHEDULE_S

    steps = [duration(s) for s in WAIT_SCHEDULE_S]
    return (f"`next_wait_s` follows the back-off {', '.join(steps[:-1])}, then {steps[-1]} (the last repeats), "
            "one step further with each wait of that experiment that ends in `timeout`; the first step after an "
            "`error`, and 0 once the run has ended.")


#: notes rendered from code, so that a fact the code holds is written in one place
NOTES: dict[str, Callable[[], str]] = {"wait_experiment": backoff_text}


def _plain(node: Any) -> Any:
    """A schema without the JSON-safe integer bound every integer carries (noise in prose)."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if not (k == "maximum" and v == MAX_JSON_INT)}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def _field_lines(model: dict[str, Any], *, result: bool) -> list[str]:
    required = set(model.get("required", ()))
    lines = []
    for name, prop in model.get("properties", {}).items():
        if result:
            when = "" if name in required else ", optional"
        elif name in required:
            when = ", required"
        elif prop.get("default") is not None:
            when = f", default `{_json(prop['default'])}`"
        else:
            when = ", optional"
        text = prop.get("description", "")
        lines.append(f"- `{name}` ({describe_type(_plain(prop))}{when}){': ' + text if text else ''}")
    return lines


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def _bases(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The documented models ``model`` extends (the tool base classes aside), nearest first."""
    from pydantic import BaseModel as Pydantic

    from skill_server.core.models import SparseOutput, ToolInput, ToolOutput

    plain = {Pydantic, ToolInput, ToolOutput, SparseOutput}
    return [base for base in model.__mro__[1:] if isinstance(base, type) and issubclass(base, Pydantic)
            and base not in plain and base.model_fields]


def _own(schema: dict[str, Any], model: type[BaseModel]) -> tuple[dict[str, Any], list[str]]:
    """``schema`` with only the fields ``model`` adds to its documented bases, and those bases' names."""
    bases = _bases(model)[:1]
    if not bases:
        return schema, []
    base_props = bases[0].model_json_schema().get("properties", {})
    # a field the model redefines (an optional one made of a required one, say) is its own again
    props = {k: v for k, v in schema.get("properties", {}).items() if base_props.get(k) != v}
    return {**schema, "properties": props}, [bases[0].__name__]


def _collect(specs: tuple[ToolSpec, ...]) -> tuple[dict[str, dict[str, Any]], dict[str, set[str]]]:
    """Every object type the tools use (nested models, and models a result extends), with the tools using it."""
    objects: dict[str, dict[str, Any]] = {}
    users: dict[str, set[str]] = {}
    for spec in specs:
        for model in (spec.input_type, spec.output_type):
            schema = model.model_json_schema()
            found = dict(schema.get("$defs", {}))
            for base in _bases(model)[:1]:
                base_schema = base.model_json_schema()
                found.update(base_schema.get("$defs", {}))
                found[base.__name__] = {k: v for k, v in base_schema.items() if k != "$defs"}
            for name, definition in found.items():
                if isinstance(definition, dict) and "properties" in definition:
                    objects.setdefault(name, definition)
                    users.setdefault(name, set()).add(spec.name)
    return objects, users


def _object_section(name: str, definition: dict[str, Any], *, result: bool, level: str) -> list[str]:
    about = (definition.get("description") or "").strip().split("\n")[0]
    lines = ["", f"{level} `{name}`" if level else f"`{name}`:" + (f" {about}" if about else ""), ""]
    if level and about:
        lines += [about, ""]
    return lines + _field_lines(definition, result=result)


def _hints(spec: ToolSpec) -> str:
    words = ["read-only" if spec.read_only else "writes"]
    if spec.destructive:
        words.append("destructive")
    words.append("idempotent" if spec.idempotent else "not idempotent")
    if spec.open_world:
        words.append("reaches other hosts or servers")
    if spec.reports_progress:
        words.append("reports progress")
    return ", ".join(words)


def shared_arguments(specs: tuple[ToolSpec, ...]) -> dict[str, str]:
    """Arguments several tools take with the same type and words (documented once): name -> line."""
    seen: dict[str, set[str]] = {}
    for spec in specs:
        for line in _field_lines(spec.input_type.model_json_schema(), result=False):
            seen.setdefault(line, set()).add(spec.name)
    return {line.split("`")[1]: line for line, tools in seen.items() if len(tools) > 2}


@dataclass(frozen=True)
class Shared:
    """What is documented once for all tools: objects, arguments, and each tool's whole result."""

    objects: dict[str, dict[str, Any]]    # name -> schema, for objects more than one tool uses
    arguments: dict[str, str]             # name -> its line, for arguments several tools take word for word
    results: dict[str, str]               # output model name -> its tool

    @classmethod
    def of(cls, specs: tuple[ToolSpec, ...]) -> Shared:
        objects, users = _collect(specs)
        return cls(objects={name: objects[name] for name in sorted(objects) if len(users[name]) > 1},
                   arguments=shared_arguments(specs),
                   results={spec.output_type.__name__: spec.name for spec in specs})


def _part(title: str, model: type[BaseModel], shared: Shared, *, result: bool) -> list[str]:
    """The arguments or the result: own fields, the shared objects it uses (linked), its own objects."""
    schema = model.model_json_schema()
    own, bases = _own(schema, model)
    if bases and bases[0] not in shared.objects and bases[0] not in shared.results:
        own, bases = schema, []  # a base only this tool uses has no section of its own: list its fields here
    lines = ["", f"{title}:", ""]
    if bases:
        lines += [f"Every field of [`{bases[0]}`](#{bases[0].lower()}), and:", ""]
    for line in _field_lines(own, result=result):
        name = line.split("`")[1]
        if not result and shared.arguments.get(name) == line:
            line = f"- `{name}`: see [shared arguments](#shared-arguments)."
        lines.append(line)
    defs = {name: d for name, d in schema.get("$defs", {}).items() if isinstance(d, dict) and "properties" in d}
    used = sorted(name for name in defs if name in shared.objects)
    if used:
        lines += ["", "Shared objects: " + ", ".join(f"[`{n}`](#{n.lower()})" for n in used) + "."]
    for name, definition in defs.items():
        if name in shared.results:  # another tool's whole result, documented there
            lines += ["", f"`{name}`: the result of [`{shared.results[name]}`](#{shared.results[name]})."]
        elif name not in shared.objects:
            lines += _object_section(name, definition, result=result, level="")
    return lines


def render_tool(spec: ToolSpec, shared: Shared) -> str:
    """One tool's section."""
    lines = [f"## `{spec.name}`", "", f"**{spec.title}** ({_hints(spec)}). {spec.description}"]
    if spec.details:
        lines += ["", spec.details]
    if spec.name in NOTES:
        lines += ["", NOTES[spec.name]()]
    lines += _part("Arguments", spec.input_type, shared, result=False)
    lines += _part("Result", spec.output_type, shared, result=True)
    return "\n".join(lines) + "\n"


def render_reference() -> str:
    """The whole page."""
    shared = Shared.of(TOOLS)
    index = " · ".join(f"[`{spec.name}`](#{spec.name})" for spec in TOOLS)
    lines = [HEADER, index, "", *(render_tool(spec, shared) for spec in TOOLS),
             "## Shared arguments", "", "Arguments several tools take, with the same meaning in each.", "",
             *shared.arguments.values(), "", "## Shared objects", "",
             "Objects more than one tool takes or returns, each documented once."]
    for name, definition in shared.objects.items():
        lines += _object_section(name, definition, result=True, level="###")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        from skill_server.core.fsutil import write_text_atomic

        write_text_atomic(REFERENCE, render_reference(), overwrite=True)
        sys.stderr.write(f"wrote {REFERENCE}\n")
        return 0
    if argv:
        sys.stderr.write("usage: python -m skill_server.app.tool_docs [--write]\n")
        return 2
    sys.stdout.write(render_reference())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
