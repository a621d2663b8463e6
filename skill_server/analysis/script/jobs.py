"""Finding ``AgentJetJob(...)`` constructions and following the job through variables, returns and calls."""

from __future__ import annotations

import ast
from collections.abc import Callable

from skill_server.analysis.script.evaluate import Evaluator
from skill_server.analysis.script.model import Construction, Kwarg, ModuleInfo, Scope, Value, tracked
from skill_server.analysis.script.modules import dotted
from skill_server.analysis.script.paths import literal_path

JOB_MODULE = "ajet.copilot.job"
JOB_CLASS = "AgentJetJob"


class JobTracker:
    """Which expressions are jobs: constructions, variables bound to them, functions returning them."""

    def __init__(self, main: ModuleInfo, evaluator: Evaluator, note: Callable[[str], None]) -> None:
        self.main = main
        self.evaluator = evaluator
        self.note = note
        self.constructions: list[Construction] = []
        self.returns_job: dict[str, int | None] = {}  # function name -> construction it returns
        self.class_names: set[str] = set()  # AgentJetJob under its local names
        self.module_names: set[str] = set()  # dotted names bound to the ajet.copilot.job module
        self._made: dict[int, int] = {}  # id(call node) -> construction index
        self._read_imports()

    def _read_imports(self) -> None:
        for node, _ in self.main.imports:
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                for alias in node.names:
                    local = alias.asname or alias.name
                    if alias.name == JOB_CLASS and (module == "ajet" or module.startswith("ajet.")):
                        self.class_names.add(local)
                    elif module == "ajet.copilot" and alias.name == "job":
                        self.module_names.add(local)
                    elif alias.name == "*" and module == JOB_MODULE:
                        self.class_names.add(JOB_CLASS)
                continue
            for alias in node.names:
                if alias.name == JOB_MODULE:
                    self.module_names.add(alias.asname or JOB_MODULE)

    # -- pass 1: constructions

    def is_job_class(self, func: ast.expr) -> str | None:
        if isinstance(func, ast.Name) and (func.id in self.class_names or func.id == JOB_CLASS):
            if func.id not in self.class_names:
                self.note("AgentJetJob is called without a recognised import from ajet; treated as AgentJet's class")
            return func.id
        if isinstance(func, ast.Attribute) and func.attr == JOB_CLASS:
            owner = dotted(func.value)
            if owner is not None and (owner in self.module_names or owner == JOB_MODULE):
                return f"{owner}.{JOB_CLASS}"
        return None

    def visit(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Call):
            self.make_construction(node, scope)
            return
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            index = self.job_of_expr(node.value, scope, node.lineno) if node.value is not None else None
            if index is not None:
                for target in targets:
                    name = dotted(target)
                    if name is not None:
                        self.bind(scope, name, node.lineno, index[0])
                        if index[0] is not None and self.constructions[index[0]].variable is None:
                            self.constructions[index[0]].variable = name
        if isinstance(node, ast.Return) and node.value is not None and scope is not self.main.scope:
            found = self.job_of_expr(node.value, scope, node.lineno)
            if found is not None:
                self.returns_job[scope.name] = found[0]

    def make_construction(self, node: ast.Call, scope: Scope) -> int | None:
        if id(node) in self._made:
            return self._made[id(node)]
        callee = self.is_job_class(node.func)
        if callee is None:
            return None
        construction = self._construction(node, callee, scope)
        self.constructions.append(construction)
        self._made[id(node)] = construction.index
        return construction.index

    def _construction(self, call: ast.Call, callee: str, scope: Scope) -> Construction:
        c = Construction(index=len(self.constructions), line=call.lineno, callee=callee, scope=scope)
        if call.args:
            c.dynamic.append(f"{len(call.args)} positional argument(s): {self.main.text(call.args[0])}...")
        for kw in call.keywords:
            line = getattr(kw, "lineno", call.lineno)
            if kw.arg is not None:
                c.kwargs[kw.arg] = Kwarg(kw.arg, self.evaluator.resolve(kw.value, scope, line), line)
                continue
            splat = self.evaluator.resolve(kw.value, scope, line)
            if splat.resolved and isinstance(splat.value, dict) and all(isinstance(k, str) for k in splat.value):
                for name, value in splat.value.items():
                    c.kwargs[name] = Kwarg(name, Value(value, True, f"**{self.main.text(kw.value)}", splat.how,
                                                       splat.assumes), line)
            else:
                c.dynamic.append(f"**{self.main.text(kw.value)}")
        base = c.kwargs.get("base_yaml_config")
        if base is not None:
            node = next((k.value for k in call.keywords if k.arg == "base_yaml_config"), None)
            c.base_yaml = base.value
            ref = self.evaluator.resolve_path(node, scope, base.line) if node is not None else None
            if ref is None and base.value.resolved and isinstance(base.value.value, str):
                ref = literal_path(base.value.value)
            c.base_path = ref
        return c

    # -- job variables

    def bind(self, scope: Scope, name: str, line: int, index: int | None) -> None:
        target = scope if "." not in name else self.main.scope  # self.job and friends: one binding script-wide
        target.jobs.setdefault(name, []).append((line if "." not in name else 0, index))

    def job_of_expr(self, expr: ast.expr, scope: Scope, line: int) -> tuple[int | None] | None:
        """If ``expr`` evaluates to a job: (construction index, or None when ambiguous,)."""
        if isinstance(expr, ast.Call):
            made = self.make_construction(expr, scope)
            if made is not None:
                return (made,)
            if isinstance(expr.func, ast.Name) and expr.func.id in self.returns_job:
                return (self.returns_job[expr.func.id],)
            return None
        if isinstance(expr, ast.Await):
            return self.job_of_expr(expr.value, scope, line)
        name = dotted(expr)
        if name is not None:
            return self.job_var(name, scope, line)
        return None

    def job_var(self, name: str, scope: Scope | None, line: int) -> tuple[int | None] | None:
        if "." in name:
            entries = self.main.scope.jobs.get(name)
            return (entries[-1][1],) if entries else None
        return tracked(scope, lambda s: s.jobs, name, line)

    # -- pass 2: jobs passed to functions

    def bind_parameters(self, calls: list[tuple[Scope, ast.Call]]) -> bool:
        """``configure(job)`` or ``def f(job: AgentJetJob)``: the parameter holds that job inside ``f``."""
        changed = False
        for fscope in self.main.functions.values():
            fnode = fscope.node
            if not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for pname, annotation in fscope.params.items():
                if pname in fscope.jobs:
                    continue
                ann = dotted(annotation) if annotation is not None else None
                if ann is not None and ann.split(".")[-1] == JOB_CLASS:
                    index = self.constructions[0].index if len(self.constructions) == 1 else None
                    fscope.jobs[pname] = [(0, index)]
                    changed = True
        for scope, call in calls:
            if not isinstance(call.func, ast.Name) or call.func.id not in self.main.functions:
                continue
            fscope = self.main.functions[call.func.id]
            fnode = fscope.node
            if not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            positional = [a.arg for a in (*fnode.args.posonlyargs, *fnode.args.args)]
            pairs = list(zip(positional, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg]
            for pname, arg in pairs:
                found = self.job_of_expr(arg, scope, call.lineno)
                if found is None or pname in fscope.jobs:
                    continue
                fscope.jobs[pname] = [(0, found[0])]
                changed = True
        return changed
