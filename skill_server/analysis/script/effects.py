"""What the script does to a job's config after construction: writes (through aliases, items, ``setattr``,
``.update``, whole dicts), mirror-attribute writes, writer methods, and the calls that freeze the config."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from skill_server.analysis.script.evaluate import Evaluator
from skill_server.analysis.script.jobs import JobTracker
from skill_server.analysis.script.model import Freeze, ModuleInfo, Scope, Value, Write, tracked
from skill_server.analysis.script.modules import dotted

#: Calls after which writes to ``job.config`` no longer reach the engine.
FREEZE_CALLS = ("dump_job_as_yaml", "sync_train_config", "auto_sync_train_config_and_start_engine",
                "async_and_start_multi_engine")
#: AgentJetJob methods that write config keys (they count as writes for ordering only).
WRITER_METHODS = {"set_workflow": "ajet.rollout.user_workflow", "set_data": "ajet.task_reader.type"}

Access = tuple[tuple[str, str], ...]


class EffectCollector:
    """Pass 3: walks the script in source order and records writes and freezes per construction."""

    def __init__(self, main: ModuleInfo, evaluator: Evaluator, jobs: JobTracker, note: Callable[[str], None]) -> None:
        self.main = main
        self.evaluator = evaluator
        self.jobs = jobs
        self.note = note
        self.writes: list[Write] = []
        self.freezes: list[Freeze] = []

    def visit(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._assignment(target, node.value, node.lineno, scope)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self._assignment(node.target, node.value, node.lineno, scope)
        elif isinstance(node, ast.AugAssign):
            ref = self._config_ref(node.target, scope, node.lineno)
            if ref is not None:
                index, access = ref
                op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}.get(type(node.op), "?")
                self._add(index, access, Value(None, False, f"{op}= {self.main.text(node.value)}",
                                               why="changed in place from its current value"),
                          node.lineno, scope, "attribute" if access[-1][1] == "attr" else "item")
        elif isinstance(node, ast.Call):
            self._call(node, scope)

    def _assignment(self, target: ast.expr, value: ast.expr, line: int, scope: Scope) -> None:
        if isinstance(target, ast.Name):  # an alias of a config section: cfg = job.config.ajet
            ref = self._config_ref(value, scope, line)
            if ref is not None:
                scope.aliases.setdefault(target.id, []).append((line, ref))
                return
        ref = self._config_ref(target, scope, line)
        if ref is not None:
            index, access = ref
            resolved = self.evaluator.resolve(value, scope, line)
            kind = "attribute" if access[-1][1] == "attr" else "item"
            if resolved.resolved and isinstance(resolved.value, dict):
                kind = "whole-dict"
            self._add(index, access, resolved, line, scope, kind)
            return
        if isinstance(target, ast.Attribute):  # job.num_repeat = 8: a mirror attribute, not the config
            owner = dotted(target.value)
            if owner is not None:
                found = self.jobs.job_var(owner, scope, line)
                if found is not None and target.attr != "config":
                    self.writes.append(Write(found[0], target.attr, self.evaluator.resolve(value, scope, line), line,
                                             scope, "mirror", ((target.attr, "attr"),)))

    def _call(self, call: ast.Call, scope: Scope) -> None:
        func = call.func
        line = call.lineno
        if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) == 3:
            ref = self._config_ref(call.args[0], scope, line)
            name = self.evaluator.resolve(call.args[1], scope, line)
            if ref is not None and name.resolved and isinstance(name.value, str):
                index, access = ref
                self._add(index, access + ((name.value, "attr"),), self.evaluator.resolve(call.args[2], scope, line),
                          line, scope, "setattr")
            return
        if not isinstance(func, ast.Attribute):
            return
        if func.attr == "update":
            self._update(call, func, scope, line)
            return
        owner = dotted(func.value)
        if func.attr in WRITER_METHODS and owner is not None:
            found = self.jobs.job_var(owner, scope, line)
            if found is not None:
                key = WRITER_METHODS[func.attr]
                self.writes.append(Write(found[0], key, Value(None, False, self.main.text(call),
                                                              why=f"set by {func.attr}() at run time"),
                                         line, scope, "method", tuple((p, "attr") for p in key.split("."))))
            return
        if func.attr in FREEZE_CALLS:
            self._freeze(call, func.attr, owner, scope, line)

    def _update(self, call: ast.Call, func: ast.Attribute, scope: Scope, line: int) -> None:
        ref = self._config_ref(func.value, scope, line)
        if ref is None:
            return
        index, access = ref
        items: dict[str, Any] = {}
        ok = True
        for arg in call.args:
            v = self.evaluator.resolve(arg, scope, line)
            if v.resolved and isinstance(v.value, dict):
                items.update(v.value)
            else:
                ok = False
        for kw in call.keywords:
            if kw.arg is None:
                ok = False
                continue
            v = self.evaluator.resolve(kw.value, scope, line)
            if not v.resolved:
                ok = False
            items[kw.arg] = v.value
        if ok:
            for key, v in items.items():
                self._add(index, access + ((str(key), "item"),), Value(v, True, self.main.text(call)), line, scope,
                          "update")
        else:
            self._add(index, access, Value(None, False, self.main.text(call), why="updated with values known only "
                                           "at run time"), line, scope, "update")

    def _freeze(self, call: ast.Call, name: str, owner: str | None, scope: Scope, line: int) -> None:
        index: int | None = None
        tied = False
        if name == "dump_job_as_yaml" and owner is not None:
            found = self.jobs.job_var(owner, scope, line)
            if found is None:
                return  # some other object's method of the same name
            index, tied = found[0], True
        else:
            for node in [*call.args, *(k.value for k in call.keywords)]:
                direct = self.jobs.job_of_expr(node, scope, line)
                if direct is not None:
                    index, tied = direct[0], True
                    break
                for sub in ast.walk(node):
                    sub_name = dotted(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else None
                    found = self.jobs.job_var(sub_name, scope, line) if sub_name else None
                    if found is not None:
                        index, tied = found[0], True
                        break
                if tied:
                    break
        if not tied and len(self.jobs.constructions) == 1:
            index = 0
            self.note(f"{name}(...) at line {line} is not passed a recognisable job variable; assumed to "
                      "freeze the only AgentJetJob of the script")
        self.freezes.append(Freeze(index, name, line, scope))

    def _add(self, index: int | None, access: Access, value: Value, line: int, scope: Scope, kind: str) -> None:
        key = ".".join(p for p, _ in access)
        if key:
            self.writes.append(Write(index, key, value, line, scope, kind, access))

    def _config_ref(self, expr: ast.expr, scope: Scope, line: int) -> tuple[int | None, Access] | None:
        """``job.config.ajet.rollout`` -> (construction, (("ajet","attr"),("rollout","attr"))); aliases followed."""
        chain: list[tuple[str, str]] = []
        node = expr
        for _ in range(64):
            if isinstance(node, ast.Attribute):
                chain.append((node.attr, "attr"))
                node = node.value
                continue
            if isinstance(node, ast.Subscript):
                key = self.evaluator.resolve(node.slice, scope, line)
                if not (key.resolved and isinstance(key.value, str)):
                    return None
                chain.append((key.value, "item"))
                node = node.value
                continue
            break
        chain.reverse()
        if not isinstance(node, ast.Name):
            return None
        alias = self._alias(node.id, scope, line)
        if alias is not None:
            return alias[0], alias[1] + tuple(chain)
        names = [node.id]  # job.config... or self.job.config...: where "config" follows a job expression
        for i, (part, how) in enumerate(chain):
            if how != "attr":
                break
            if part == "config":
                found = self.jobs.job_var(".".join(names), scope, line)
                if found is not None:
                    return found[0], tuple(chain[i + 1:])
            names.append(part)
        return None

    def _alias(self, name: str, scope: Scope, line: int) -> tuple[int | None, Access] | None:
        found = tracked(scope, lambda s: s.aliases, name, line)
        return found[0] if found is not None else None
