"""Static extraction of AgentJetJob usage from a swarm client script (``ast`` only; nothing is imported or run).

What a client script does to its config, as data: every ``AgentJetJob(...)`` construction (however the
class was imported) with its kwargs resolved where that is possible statically, the ``base_yaml_config``
path, the post-construction writes to ``job.config...`` (attribute, item, ``setattr``, ``.update``, via
alias variables) and the calls that freeze the config (dump / sync). ``check_config`` turns this into
findings; nothing here knows about AgentJet's defaults.

Resolution is deliberately modest: literals, arithmetic on literals, names assigned once before use
(function scope first, then module scope), dataclass config objects whose fields have literal defaults,
module-level dict constants splatted with ``**``, and the usual ``__file__``-relative path idioms.
Anything else is kept as its source text and marked unresolved.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skill_server.errors import ToolInputError
from skill_server.fsutil import read_text_bounded

MAX_SCRIPT_BYTES = 2 * 1024 * 1024
MAX_DEPTH = 24
JOB_MODULE = "ajet.copilot.job"
JOB_CLASS = "AgentJetJob"
#: Calls after which writes to ``job.config`` no longer reach the engine.
FREEZE_CALLS = ("dump_job_as_yaml", "sync_train_config", "auto_sync_train_config_and_start_engine",
                "async_and_start_multi_engine")
#: AgentJetJob methods that write config keys (they count as writes for ordering only).
WRITER_METHODS = {"set_workflow": "ajet.rollout.user_workflow", "set_data": "ajet.task_reader.type"}


@dataclass(frozen=True)
class PathRef:
    """A path expression: ``anchor`` is 'absolute', 'script_dir' (built from __file__) or 'cwd' (relative)."""

    anchor: str
    path: str


@dataclass
class Instance:
    """A dataclass object created in the script (``cfg = CocktailConfig(grpo_n=4)``)."""

    cls: str
    overrides: dict[str, ast.expr]
    scope: Scope | None
    line: int


@dataclass
class Value:
    value: Any  # a plain Python value when resolved
    resolved: bool
    text: str  # source text of the expression
    how: str = "literal"  # literal | constant | dataclass default | ... (how it was resolved)


@dataclass
class Kwarg:
    name: str
    value: Value
    line: int


@dataclass
class Construction:
    index: int
    line: int
    callee: str
    scope: Scope
    variable: str | None = None
    kwargs: dict[str, Kwarg] = field(default_factory=dict)
    dynamic: list[str] = field(default_factory=list)  # splats or positional args that could not be resolved
    base_yaml: Value | None = None
    base_path: PathRef | None = None


@dataclass
class Write:
    construction: int | None  # None: the job could not be tied to one construction
    key: str  # dotted from the config root, e.g. ajet.rollout.temperature
    value: Value
    line: int
    scope: Scope
    kind: str  # attribute | item | setattr | update | whole-dict | method | mirror
    # the access chain: (segment, "attr" | "item") for each segment below the config root
    access: tuple[tuple[str, str], ...] = ()


@dataclass
class Freeze:
    construction: int | None
    call: str
    line: int
    scope: Scope


class Scope:
    """A module or function body: its simple-name assignments, in source order."""

    def __init__(self, name: str, parent: Scope | None, node: ast.AST | None) -> None:
        self.name = name
        self.parent = parent
        self.node = node
        self.assigned: dict[str, list[tuple[int, ast.expr | None]]] = {}
        self.params: dict[str, ast.expr | None] = {}  # parameter -> annotation
        self.jobs: dict[str, list[tuple[int, int | None]]] = {}  # variable -> [(line, construction)]
        self.aliases: dict[str, list[tuple[int, tuple[int | None, tuple[tuple[str, str], ...]]]]] = {}
        self.call_sites: list[tuple[Scope, int]] = []  # where this function is called from
        self.call_nodes: list[tuple[Scope, ast.Call]] = []

    def __repr__(self) -> str:
        return f"<scope {self.name}>"

    def assign(self, name: str, line: int, value: ast.expr | None) -> None:
        self.assigned.setdefault(name, []).append((line, value))

    def lookup(self, name: str, line: int) -> tuple[Scope, ast.expr | None] | None:
        """The expression last assigned to ``name`` before ``line``, searching outwards."""
        scope: Scope | None = self
        use_line: int | None = line
        while scope is not None:
            entries = scope.assigned.get(name)
            if name in scope.params and not entries:
                return None  # a parameter: the caller decides
            if entries:
                if use_line is None:  # used from an inner function: its value when the function runs
                    candidates = entries
                else:
                    candidates = [e for e in entries if e[0] <= use_line]
                if not candidates:
                    return None
                if len(entries) > 1 and use_line is None and len({ast.dump(e[1]) if e[1] else "" for e in entries}) > 1:
                    return None  # reassigned with different values: unknowable from an inner scope
                return scope, candidates[-1][1]
            scope = scope.parent
            use_line = None
        return None


@dataclass
class ScriptScan:
    path: Path
    source: str
    constructions: list[Construction]
    writes: list[Write]
    freezes: list[Freeze]
    notes: list[str]
    module: Scope


# --- reading --------------------------------------------------------------------------------------


def read_script(path: str | Path, *, field: str = "script") -> tuple[Path, str, ast.Module]:
    p, source = read_text_bounded(path, field=field, max_bytes=MAX_SCRIPT_BYTES, what="a client script",
                                  encoding="utf-8-sig")
    try:
        tree = ast.parse(source, filename=str(p))
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "") if exc.lineno else ""
        raise ToolInputError(f"{p} is not valid Python{where}: {exc.msg}", field=field) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ToolInputError(f"{p} cannot be parsed: {type(exc).__name__}", field=field) from None
    return p.resolve(), source, tree


def scan_script(path: str | Path, *, field: str = "script") -> ScriptScan:
    p, source, tree = read_script(path, field=field)
    return _Scanner(p, source, tree).run()


# --- the scanner ----------------------------------------------------------------------------------


class _Scanner:
    def __init__(self, path: Path, source: str, tree: ast.Module) -> None:
        self.path = path
        self.source = source
        self.tree = tree
        self.module = Scope("<module>", None, tree)
        self.functions: dict[str, Scope] = {}  # module-level and nested function names -> scope
        self.dataclasses: dict[str, dict[str, ast.expr | None]] = {}
        self.class_names: set[str] = set()  # AgentJetJob under its local names
        self.module_names: set[str] = set()  # dotted names bound to the ajet.copilot.job module
        self.constructions: list[Construction] = []
        self.writes: list[Write] = []
        self.freezes: list[Freeze] = []
        self.notes: list[str] = []
        self.returns_job: dict[str, int | None] = {}  # function name -> construction it returns
        self.scope_of: dict[int, Scope] = {}  # id(function node) -> scope
        self._note_seen: set[str] = set()
        self._made: dict[int, int] = {}  # id(call node) -> construction index
        self._flat_cache: list[tuple[ast.AST, Scope]] | None = None
        self._line_starts: list[bytes] | None = None

    def note(self, text: str) -> None:
        if text not in self._note_seen:
            self._note_seen.add(text)
            self.notes.append(text)

    def run(self) -> ScriptScan:
        self._collect(self.tree, self.module)
        self._collect_sibling_dataclasses()
        self._record_call_sites()
        # pass 1: constructions and what returns them; pass 2: bind job parameters through calls; pass 3: writes
        for _ in range(2):  # twice: a builder function may be defined after its caller
            self._walk_body(self.tree.body, self.module, self._visit_constructions)
        for _ in range(3):
            if not self._bind_job_parameters():
                break
        self._walk_body(self.tree.body, self.module, self._visit_effects)
        self.writes.sort(key=lambda w: w.line)
        self.freezes.sort(key=lambda f: f.line)
        if not self.constructions:
            self.note("no AgentJetJob(...) construction found in the script")
        return ScriptScan(self.path, self.source, self.constructions, self.writes, self.freezes, self.notes, self.module)

    # -- symbol tables

    def _collect(self, node: ast.AST, scope: Scope) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = Scope(child.name, scope, child)
                self.scope_of[id(child)] = inner
                self.functions.setdefault(child.name, inner)
                scope.assign(child.name, child.lineno, None)
                args = child.args
                every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
                every += [a for a in (args.vararg, args.kwarg) if a is not None]
                for arg in every:
                    inner.params[arg.arg] = arg.annotation
                self._collect(child, inner)
                continue
            if isinstance(child, ast.ClassDef):
                if any(_is_dataclass_decorator(d) for d in child.decorator_list):
                    self.dataclasses[child.name] = {
                        s.target.id: s.value for s in child.body
                        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    }
                scope.assign(child.name, child.lineno, None)
                for item in child.body:  # methods: their own scopes, parented to the enclosing scope
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self._collect(ast.Module(body=[item], type_ignores=[]), scope)
                continue
            if isinstance(child, ast.Lambda):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                self._imports(child, scope)
            elif isinstance(child, ast.Assign):
                for target in child.targets:
                    self._bind_target(target, child.value, child.lineno, scope)
            elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                scope.assign(child.target.id, child.lineno, child.value)
            elif isinstance(child, ast.AugAssign) and isinstance(child.target, ast.Name):
                scope.assign(child.target.id, child.lineno, None)
            elif isinstance(child, ast.NamedExpr) and isinstance(child.target, ast.Name):
                scope.assign(child.target.id, child.lineno, child.value)
            elif isinstance(child, (ast.For, ast.AsyncFor, ast.comprehension)):
                for name in _target_names(child.target):
                    scope.assign(name, getattr(child, "lineno", 0) or 0, None)
            elif isinstance(child, (ast.With, ast.AsyncWith)):
                for item in child.items:
                    if item.optional_vars is not None:
                        for name in _target_names(item.optional_vars):
                            scope.assign(name, child.lineno, None)
            elif isinstance(child, ast.ExceptHandler) and child.name:
                scope.assign(child.name, child.lineno, None)
            if isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                continue  # comprehension variables live in their own scope
            self._collect(child, scope)

    def _bind_target(self, target: ast.expr, value: ast.expr, line: int, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            scope.assign(target.id, line, value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(
                target.elts) else [None] * len(target.elts)
            for t, v in zip(target.elts, values):
                if isinstance(t, ast.Name):
                    scope.assign(t.id, line, v)

    def _imports(self, node: ast.Import | ast.ImportFrom, scope: Scope) -> None:
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                local = alias.asname or alias.name
                scope.assign(local, node.lineno, None)
                if alias.name == JOB_CLASS and (module == "ajet" or module.startswith("ajet.")):
                    self.class_names.add(local)
                elif module == "ajet.copilot" and alias.name == "job":
                    self.module_names.add(local)
                elif alias.name == "*" and module == JOB_MODULE:
                    self.class_names.add(JOB_CLASS)
            return
        for alias in node.names:
            if alias.name == JOB_MODULE:
                if alias.asname:
                    self.module_names.add(alias.asname)
                    scope.assign(alias.asname, node.lineno, None)
                else:
                    self.module_names.add(JOB_MODULE)
            else:
                scope.assign((alias.asname or alias.name).split(".")[0], node.lineno, None)

    def _collect_sibling_dataclasses(self) -> None:
        """Dataclasses imported from a module next to the script (``from cfg_mod import Cfg``), read statically."""
        for node, _ in self._flat():
            if not isinstance(node, ast.ImportFrom) or not node.module:
                continue
            wanted = {a.name for a in node.names} - set(self.dataclasses)
            if not wanted or node.module.startswith("ajet"):
                continue
            candidate = self.path.parent / (node.module.split(".")[-1] + ".py")
            try:
                if not candidate.is_file() or candidate.stat().st_size > MAX_SCRIPT_BYTES:
                    continue
                other = ast.parse(candidate.read_text(encoding="utf-8", errors="replace"))
            except (OSError, SyntaxError, ValueError, RecursionError):
                continue
            for item in other.body:
                if isinstance(item, ast.ClassDef) and item.name in wanted and any(
                        _is_dataclass_decorator(d) for d in item.decorator_list):
                    self.dataclasses[item.name] = {
                        s.target.id: s.value for s in item.body
                        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                    }
                    self.note(f"dataclass {item.name} read from {candidate.name} (next to the script)")

    # -- walking in source order, with the scope of each statement

    def _walk_body(self, body: list[ast.stmt], scope: Scope, visit: Any) -> None:
        """Call ``visit(node, scope)`` for every node in source order (the flat list is built once)."""
        if body is self.tree.body and scope is self.module:
            for node, node_scope in self._flat():
                visit(node, node_scope)
            return
        for stmt in body:
            for node, node_scope in self._flatten(stmt, scope):
                visit(node, node_scope)

    def _flat(self) -> list[tuple[ast.AST, Scope]]:
        if self._flat_cache is None:
            out: list[tuple[ast.AST, Scope]] = []
            for stmt in self.tree.body:
                out.extend(self._flatten(stmt, self.module))
            self._flat_cache = out
        return self._flat_cache

    def _flatten(self, root: ast.AST, scope: Scope) -> list[tuple[ast.AST, Scope]]:
        out: list[tuple[ast.AST, Scope]] = []
        stack: list[tuple[ast.AST, Scope]] = [(root, scope)]
        while stack:
            node, current = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = self.scope_of.get(id(node), current)
                pending = [(d, current) for d in node.decorator_list] + [(b, inner) for b in node.body]
            elif isinstance(node, ast.ClassDef):
                pending = [(item, current) for item in node.body]
            else:
                out.append((node, current))
                pending = [(child, current) for child in ast.iter_child_nodes(node)]
            stack.extend(reversed(pending))
        return out

    # -- pass 1: constructions

    def _is_job_class(self, func: ast.expr) -> str | None:
        if isinstance(func, ast.Name) and (func.id in self.class_names or func.id == JOB_CLASS):
            if func.id not in self.class_names:
                self.note("AgentJetJob is called without a recognised import from ajet; treated as AgentJet's class")
            return func.id
        if isinstance(func, ast.Attribute) and func.attr == JOB_CLASS:
            owner = _dotted(func.value)
            if owner is not None and (owner in self.module_names or owner == JOB_MODULE):
                return f"{owner}.{JOB_CLASS}"
        return None

    def _visit_constructions(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Call):
            self._make_construction(node, scope)
            return
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            index = self._job_of_expr(node.value, scope, node.lineno) if node.value is not None else None
            if index is not None:
                for target in targets:
                    name = _dotted(target)
                    if name is not None:
                        self._bind_job(scope, name, node.lineno, index[0])
                        if index[0] is not None and self.constructions[index[0]].variable is None:
                            self.constructions[index[0]].variable = name
        if isinstance(node, ast.Return) and node.value is not None:
            func = self._function_of(scope)
            found = self._job_of_expr(node.value, scope, node.lineno)
            if func is not None and found is not None:
                self.returns_job[func] = found[0]

    def _make_construction(self, node: ast.Call, scope: Scope) -> int | None:
        if id(node) in self._made:
            return self._made[id(node)]
        callee = self._is_job_class(node.func)
        if callee is None:
            return None
        construction = self._construction(node, callee, scope)
        self.constructions.append(construction)
        self._made[id(node)] = construction.index
        return construction.index

    def _function_of(self, scope: Scope) -> str | None:
        return scope.name if scope is not self.module else None

    def _bind_job(self, scope: Scope, name: str, line: int, index: int | None) -> None:
        target = scope if "." not in name else self.module  # self.job and friends: one binding script-wide
        target.jobs.setdefault(name, []).append((line if "." not in name else 0, index))

    def _job_of_expr(self, expr: ast.expr, scope: Scope, line: int) -> tuple[int | None] | None:
        """If ``expr`` evaluates to a job: (construction index or None when ambiguous,)."""
        if isinstance(expr, ast.Call):
            made = self._make_construction(expr, scope)
            if made is not None:
                return (made,)
            if isinstance(expr.func, ast.Name) and expr.func.id in self.returns_job:
                return (self.returns_job[expr.func.id],)
            return None
        if isinstance(expr, ast.Await):
            return self._job_of_expr(expr.value, scope, line)
        name = _dotted(expr)
        if name is not None:
            return self._job_var(name, scope, line)
        return None

    def _job_var(self, name: str, scope: Scope | None, line: int) -> tuple[int | None] | None:
        if "." in name:
            entries = self.module.jobs.get(name)
            return (entries[-1][1],) if entries else None
        current: Scope | None = scope
        use_line: int | None = line
        while current is not None:
            entries = current.jobs.get(name)
            if entries:
                before = [e for e in entries if use_line is None or e[0] <= use_line]
                if before:
                    return (before[-1][1],)
            if current.assigned.get(name) or name in current.params:
                return None  # rebound in this scope: not the job
            current = current.parent
            use_line = None
        return None

    def _bind_job_parameters(self) -> bool:
        """``configure(job)`` or ``def f(job: AgentJetJob)``: the parameter holds that job inside ``f``."""
        changed = False
        for fname, fscope in self.functions.items():
            fnode = fscope.node
            if not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for pname, annotation in fscope.params.items():
                if pname in fscope.jobs:
                    continue
                ann = _dotted(annotation) if annotation is not None else None
                if ann is not None and ann.split(".")[-1] == JOB_CLASS:
                    index = self.constructions[0].index if len(self.constructions) == 1 else None
                    fscope.jobs[pname] = [(0, index)]
                    changed = True
        # call sites: f(job) binds the matching parameter
        for scope, call in self._calls():
            if not isinstance(call.func, ast.Name) or call.func.id not in self.functions:
                continue
            fscope = self.functions[call.func.id]
            fnode = fscope.node
            if not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if (scope, call.lineno) not in fscope.call_sites:
                fscope.call_sites.append((scope, call.lineno))
            positional = [a.arg for a in (*fnode.args.posonlyargs, *fnode.args.args)]
            pairs = list(zip(positional, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg]
            for pname, arg in pairs:
                found = self._job_of_expr(arg, scope, call.lineno)
                if found is None or pname in fscope.jobs:
                    continue
                fscope.jobs[pname] = [(0, found[0])]
                changed = True
        return changed

    def _record_call_sites(self) -> None:
        for scope, call in self._calls():
            if isinstance(call.func, ast.Name) and call.func.id in self.functions:
                fscope = self.functions[call.func.id]
                if (scope, call.lineno) not in fscope.call_sites:
                    fscope.call_sites.append((scope, call.lineno))
                fscope.call_nodes.append((scope, call))

    def _calls(self) -> list[tuple[Scope, ast.Call]]:
        if not hasattr(self, "_call_cache"):
            self._call_cache = [(sc, n) for n, sc in self._flat() if isinstance(n, ast.Call)]
        return self._call_cache

    def _construction(self, call: ast.Call, callee: str, scope: Scope) -> Construction:
        c = Construction(index=len(self.constructions), line=call.lineno, callee=callee, scope=scope)
        if call.args:
            c.dynamic.append(f"{len(call.args)} positional argument(s): {self.text(call.args[0])}...")
        for kw in call.keywords:
            line = getattr(kw, "lineno", call.lineno)
            if kw.arg is not None:
                c.kwargs[kw.arg] = Kwarg(kw.arg, self.resolve(kw.value, scope, line), line)
                continue
            splat = self.resolve(kw.value, scope, line)
            if splat.resolved and isinstance(splat.value, dict) and all(isinstance(k, str) for k in splat.value):
                for name, value in splat.value.items():
                    c.kwargs[name] = Kwarg(name, Value(value, True, f"**{self.text(kw.value)}", splat.how), line)
            else:
                c.dynamic.append(f"**{self.text(kw.value)}")
        base = c.kwargs.get("base_yaml_config")
        if base is not None:
            node = next((k.value for k in call.keywords if k.arg == "base_yaml_config"), None)
            c.base_yaml = base.value
            ref = self.resolve_path(node, scope, base.line) if node is not None else None
            if ref is None and base.value.resolved and isinstance(base.value.value, str):
                ref = _literal_path(base.value.value)
            c.base_path = ref
        return c

    # -- pass 3: writes, aliases, freezes

    def _visit_effects(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._assignment(target, node.value, node.lineno, scope)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self._assignment(node.target, node.value, node.lineno, scope)
        elif isinstance(node, ast.AugAssign):
            ref = self._config_ref(node.target, scope, node.lineno)
            if ref is not None:
                index, access = ref
                self._add_write(index, access, Value(None, False, f"{_op_text(node.op)}= {self.text(node.value)}"),
                                node.lineno, scope, "attribute" if access[-1][1] == "attr" else "item")
        elif isinstance(node, ast.Call):
            self._call_effects(node, scope)

    def _assignment(self, target: ast.expr, value: ast.expr, line: int, scope: Scope) -> None:
        # an alias of a config section: cfg = job.config.ajet
        if isinstance(target, ast.Name):
            ref = self._config_ref(value, scope, line)
            if ref is not None:
                scope.aliases.setdefault(target.id, []).append((line, ref))
                return
        ref = self._config_ref(target, scope, line)
        if ref is not None:
            index, access = ref
            resolved = self.resolve(value, scope, line)
            kind = "attribute" if access[-1][1] == "attr" else "item"
            if resolved.resolved and isinstance(resolved.value, dict):
                kind = "whole-dict"
            self._add_write(index, access, resolved, line, scope, kind)
            return
        # job.num_repeat = 8: a mirror attribute, not the config
        if isinstance(target, ast.Attribute):
            owner = _dotted(target.value)
            if owner is not None:
                found = self._job_var(owner, scope, line)
                if found is not None and target.attr != "config":
                    self.writes.append(Write(found[0], target.attr, self.resolve(value, scope, line), line, scope,
                                             "mirror", ((target.attr, "attr"),)))

    def _call_effects(self, call: ast.Call, scope: Scope) -> None:
        func = call.func
        line = call.lineno
        if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) == 3:
            ref = self._config_ref(call.args[0], scope, line)
            name = self.resolve(call.args[1], scope, line)
            if ref is not None and name.resolved and isinstance(name.value, str):
                index, access = ref
                self._add_write(index, access + ((name.value, "attr"),), self.resolve(call.args[2], scope, line),
                                line, scope, "setattr")
            return
        if not isinstance(func, ast.Attribute):
            return
        if func.attr == "update":
            ref = self._config_ref(func.value, scope, line)
            if ref is not None:
                index, access = ref
                items: dict[str, Any] = {}
                ok = True
                for arg in call.args:
                    v = self.resolve(arg, scope, line)
                    if v.resolved and isinstance(v.value, dict):
                        items.update(v.value)
                    else:
                        ok = False
                for kw in call.keywords:
                    if kw.arg is None:
                        ok = False
                        continue
                    items[kw.arg] = self.resolve(kw.value, scope, line).value
                if ok:
                    for key, v in items.items():
                        self._add_write(index, access + ((str(key), "item"),), Value(v, True, self.text(call)),
                                        line, scope, "update")
                else:
                    self._add_write(index, access, Value(None, False, self.text(call)), line, scope, "update")
            return
        owner = _dotted(func.value)
        if func.attr in WRITER_METHODS and owner is not None:
            found = self._job_var(owner, scope, line)
            if found is not None:
                key = WRITER_METHODS[func.attr]
                self.writes.append(Write(found[0], key, Value(None, False, self.text(call)), line, scope, "method",
                                         tuple((p, "attr") for p in key.split("."))))
            return
        if func.attr in FREEZE_CALLS:
            index: int | None = None
            tied = False
            if func.attr == "dump_job_as_yaml" and owner is not None:
                found = self._job_var(owner, scope, line)
                if found is None:
                    return  # some other object's method of the same name
                index, tied = found[0], True
            else:
                for node in [*call.args, *(k.value for k in call.keywords)]:
                    for sub in ast.walk(node):
                        name = _dotted(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else None
                        found = self._job_var(name, scope, line) if name else None
                        if found is not None:
                            index, tied = found[0], True
                            break
                    if tied:
                        break
            if not tied and len(self.constructions) == 1:
                index = 0
                self.note(f"{func.attr}(...) at line {line} is not passed a recognisable job variable; assumed to "
                          "freeze the only AgentJetJob of the script")
            self.freezes.append(Freeze(index, func.attr, line, scope))

    def _add_write(self, index: int | None, access: tuple[tuple[str, str], ...], value: Value, line: int,
                   scope: Scope, kind: str) -> None:
        key = ".".join(p for p, _ in access)
        if not key:
            return
        self.writes.append(Write(index, key, value, line, scope, kind, access))

    def _config_ref(self, expr: ast.expr, scope: Scope, line: int
                    ) -> tuple[int | None, tuple[tuple[str, str], ...]] | None:
        """``job.config.ajet.rollout`` -> (construction, (("ajet","attr"),("rollout","attr"))); aliases followed."""
        chain: list[tuple[str, str]] = []
        node = expr
        while True:
            if isinstance(node, ast.Attribute):
                chain.append((node.attr, "attr"))
                node = node.value
                continue
            if isinstance(node, ast.Subscript):
                key = self.resolve(node.slice, scope, line)
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
        # job.config... or self.job.config...: find where "config" follows a job expression
        names = [node.id]
        for i, (part, how) in enumerate(chain):
            if how != "attr":
                break
            if part == "config":
                found = self._job_var(".".join(names), scope, line)
                if found is not None:
                    return found[0], tuple(chain[i + 1:])
            names.append(part)
        return None

    def _alias(self, name: str, scope: Scope, line: int
               ) -> tuple[int | None, tuple[tuple[str, str], ...]] | None:
        current: Scope | None = scope
        use_line: int | None = line
        while current is not None:
            entries = current.aliases.get(name)
            if entries:
                before = [e for e in entries if use_line is None or e[0] <= use_line]
                if before:
                    return before[-1][1]
            if name in current.params or current.assigned.get(name):
                # assigned to something else in this scope after the alias? then not an alias here
                if not entries:
                    return None
            current = current.parent
            use_line = None
        return None

    # -- values

    def text(self, node: ast.AST) -> str:
        """Source text of a node (offsets are UTF-8 byte columns), whitespace collapsed, at most 200 chars."""
        segment = None
        lineno, end_lineno = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if None not in (lineno, end_lineno, col, end_col):
            if self._line_starts is None:
                self._line_starts = [line.encode("utf-8") for line in self.source.splitlines(keepends=True)]
            lines = self._line_starts[lineno - 1:end_lineno]
            if lines:
                if len(lines) == 1:
                    raw = lines[0][col:end_col]
                else:
                    raw = lines[0][col:] + b"".join(lines[1:-1]) + lines[-1][:end_col]
                segment = raw.decode("utf-8", errors="replace")
        if segment is None:
            try:
                segment = ast.unparse(node)
            except Exception:  # noqa: BLE001 - unparse of odd nodes; text is informational only
                segment = type(node).__name__
        segment = " ".join(segment.split())
        return segment if len(segment) <= 200 else segment[:197] + "..."

    def resolve(self, node: ast.expr, scope: Scope | None, line: int, depth: int = 0) -> Value:
        text = self.text(node)
        try:
            value, how = self._eval(node, scope, line, depth)
        except _NoValue:
            return Value(None, False, text, "unresolved")
        if isinstance(value, (Instance, PathRef)):
            if isinstance(value, PathRef):
                return Value(value.path, True, text, f"path ({value.anchor})")
            return Value(None, False, text, "unresolved")
        return Value(value, True, text, how)

    def _eval(self, node: ast.expr, scope: Scope | None, line: int, depth: int) -> tuple[Any, str]:
        if depth > MAX_DEPTH:
            raise _NoValue
        d = depth + 1
        if isinstance(node, ast.Constant):
            return node.value, "literal"
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items, hows = [], []
            for elt in node.elts:
                if isinstance(elt, ast.Starred):
                    raise _NoValue
                v, h = self._eval(elt, scope, line, d)
                items.append(v)
                hows.append(h)
            return items, _combine(hows)
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            hows = []
            for k, v in zip(node.keys, node.values):
                if k is None:
                    inner, h = self._eval(v, scope, line, d)
                    if not isinstance(inner, dict):
                        raise _NoValue
                    out.update(inner)
                    hows.append(h)
                    continue
                kk, hk = self._eval(k, scope, line, d)
                vv, hv = self._eval(v, scope, line, d)
                if isinstance(vv, (Instance, PathRef)):
                    vv = vv.path if isinstance(vv, PathRef) else _raise()
                out[kk] = vv
                hows += [hk, hv]
            return out, _combine(hows)
        if isinstance(node, ast.UnaryOp):
            v, h = self._eval(node.operand, scope, line, d)
            if isinstance(node.op, ast.USub) and _is_number(v):
                return -v, h
            if isinstance(node.op, ast.UAdd) and _is_number(v):
                return +v, h
            if isinstance(node.op, ast.Not):
                return (not v), h
            raise _NoValue
        if isinstance(node, ast.BinOp):
            left, hl = self._eval(node.left, scope, line, d)
            if isinstance(left, PathRef) and isinstance(node.op, ast.Div):
                right, hr = self._eval(node.right, scope, line, d)
                return _join(left, right), "path"
            right, hr = self._eval(node.right, scope, line, d)
            return _arith(node.op, left, right), _combine([hl, hr, "arithmetic"])
        if isinstance(node, ast.JoinedStr):
            return self._eval_fstring(node, scope, line, d)
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return PathRef("script_file", str(self.path)), "path"
            if scope is None:
                raise _NoValue
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id], "literal"
            param = self._param_instance(node.id, scope)
            if param is not None:
                return param, "dataclass default"
            found = scope.lookup(node.id, line)
            if found is None or found[1] is None:
                raise _NoValue
            owner, expr = found
            v, h = self._eval(expr, owner, getattr(expr, "lineno", line), d)
            return v, ("constant" if h == "literal" else h)
        if isinstance(node, ast.Attribute):
            owner_value: Any
            try:
                owner_value, how = self._eval(node.value, scope, line, d)
            except _NoValue:
                owner_name = _dotted(node.value)
                if owner_name in self.dataclasses:  # Cfg.field: the class attribute is the default
                    owner_value, how = Instance(owner_name, {}, None, line), "dataclass default"
                else:
                    raise
            if isinstance(owner_value, Instance):
                return self._field(owner_value, node.attr, d)
            if isinstance(owner_value, PathRef):
                if node.attr == "parent":
                    return _parent(owner_value), "path"
                raise _NoValue
            raise _NoValue
        if isinstance(node, ast.Subscript):
            base, hb = self._eval(node.value, scope, line, d)
            key, hk = self._eval(node.slice, scope, line, d)
            try:
                return base[key], _combine([hb, hk])
            except (KeyError, IndexError, TypeError):
                raise _NoValue from None
        if isinstance(node, ast.Call):
            return self._eval_call(node, scope, line, d)
        raise _NoValue

    def _eval_fstring(self, node: ast.JoinedStr, scope: Scope | None, line: int, d: int) -> tuple[Any, str]:
        """f"{HERE}/x.yaml" (a path placeholder first) or an f-string of resolvable pieces."""
        base: PathRef | None = None
        parts: list[str] = []
        hows: list[str] = []
        for i, piece in enumerate(node.values):
            if isinstance(piece, ast.Constant):
                parts.append(str(piece.value))
                continue
            if not (isinstance(piece, ast.FormattedValue) and piece.format_spec is None and piece.conversion == -1):
                raise _NoValue
            v, h = self._eval(piece.value, scope, line, d)
            if isinstance(v, PathRef) and i == 0:
                base = v
                continue
            if isinstance(v, (PathRef, Instance)):
                raise _NoValue
            parts.append(str(v))
            hows.append(h)
        if base is not None:
            return _join(base, "".join(parts).lstrip("/")), "path"
        return "".join(parts), _combine(hows)

    def _eval_call(self, node: ast.Call, scope: Scope | None, line: int, d: int) -> tuple[Any, str]:
        name = _dotted(node.func)
        if name is None:
            # Path(__file__).resolve().parent and the like: methods on a path
            if isinstance(node.func, ast.Attribute):
                owner, _ = self._eval(node.func.value, scope, line, d)
                if isinstance(owner, PathRef) and node.func.attr in ("resolve", "absolute", "expanduser"):
                    return owner, "path"
                if isinstance(owner, PathRef) and node.func.attr == "joinpath":
                    out = owner
                    for a in node.args:
                        out = _join(out, self._eval(a, scope, line, d)[0])
                    return out, "path"
                if isinstance(owner, str) and node.func.attr in ("lower", "upper", "strip"):
                    return getattr(owner, node.func.attr)(), "literal"
            raise _NoValue
        short = name.split(".")[-1]
        if short in self.dataclasses:
            overrides = {k.arg: k.value for k in node.keywords if k.arg}
            if node.args:
                fields = list(self.dataclasses[short])
                overrides.update({fields[i]: a for i, a in enumerate(node.args) if i < len(fields)})
            return Instance(short, overrides, scope, line), "dataclass default"
        args = node.args
        if name in ("os.path.join", "path.join", "join") and args:
            out, _ = self._eval(args[0], scope, line, d)
            out = out if isinstance(out, PathRef) else _literal_path(_as_str(out))
            for a in args[1:]:
                out = _join(out, self._eval(a, scope, line, d)[0])
            return out, "path"
        if name in ("os.path.dirname", "path.dirname", "dirname") and len(args) == 1:
            v, _ = self._eval(args[0], scope, line, d)
            return _parent(v if isinstance(v, PathRef) else _literal_path(_as_str(v))), "path"
        if name in ("os.path.abspath", "os.path.realpath", "os.path.normpath", "os.path.expanduser", "os.fspath",
                    "abspath", "realpath", "Path", "pathlib.Path", "PurePath", "str") and len(args) >= 1:
            v, h = self._eval(args[0], scope, line, d)
            if isinstance(v, PathRef):
                for a in args[1:]:
                    v = _join(v, self._eval(a, scope, line, d)[0])
                return v, "path"
            if short in ("Path", "PurePath"):
                ref = _literal_path(_as_str(v))
                for a in args[1:]:
                    ref = _join(ref, self._eval(a, scope, line, d)[0])
                return ref, "path"
            if name == "str":
                return str(v), h
            if len(args) == 1 and isinstance(v, str) and short in ("abspath", "realpath", "normpath", "expanduser",
                                                                   "fspath"):
                return _literal_path(v), "path"
            raise _NoValue
        if name in ("int", "float", "bool") and len(args) == 1 and not node.keywords:
            v, h = self._eval(args[0], scope, line, d)
            try:
                return {"int": int, "float": float, "bool": bool}[name](v), h
            except (TypeError, ValueError):
                raise _NoValue from None
        if name in ("dict",) and not args:
            out: dict[str, Any] = {}
            hows = []
            for kw in node.keywords:
                if kw.arg is None:
                    raise _NoValue
                v, h = self._eval(kw.value, scope, line, d)
                out[kw.arg] = v
                hows.append(h)
            return out, _combine(hows)
        if name in ("min", "max") and args and not node.keywords:
            values = [self._eval(a, scope, line, d)[0] for a in args]
            if all(_is_number(v) for v in values):
                return (min if name == "min" else max)(values), "arithmetic"
        raise _NoValue

    def _param_instance(self, name: str, scope: Scope) -> Instance | None:
        """``def build(cfg: CocktailConfig)``: inside ``build`` cfg's fields have their dataclass defaults."""
        current: Scope | None = scope
        while current is not None:
            if name in current.params:
                if current.assigned.get(name):
                    return None
                ann = current.params[name]
                ann_name = _dotted(ann) if ann is not None else None
                if ann_name is None and isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                    ann_name = ann.value
                passed = self._single_call_argument(current, name)
                if passed is not None:
                    return passed
                if ann_name is not None and ann_name.split(".")[-1] in self.dataclasses:
                    self.note(f"parameter {name} of {current.name}() is read with the dataclass defaults of "
                              f"{ann_name.split('.')[-1]} (callers may pass other values)")
                    return Instance(ann_name.split(".")[-1], {}, None, 0)
                return None
            if current.assigned.get(name):
                return None
            current = current.parent
        return None

    def _single_call_argument(self, fscope: Scope, pname: str) -> Instance | None:
        """A function called exactly once with a dataclass object for ``pname``: that object."""
        calls = fscope.call_nodes
        fnode = fscope.node
        if len(calls) != 1 or not isinstance(fnode, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
        caller, call = calls[0]
        positional = [a.arg for a in (*fnode.args.posonlyargs, *fnode.args.args)]
        arg = next((k.value for k in call.keywords if k.arg == pname), None)
        if arg is None and pname in positional and positional.index(pname) < len(call.args):
            arg = call.args[positional.index(pname)]
        if arg is None:
            return None
        try:
            value, _ = self._eval(arg, caller, call.lineno, 1)
        except _NoValue:
            return None
        return value if isinstance(value, Instance) else None

    def _field(self, inst: Instance, attr: str, d: int) -> tuple[Any, str]:
        fields = self.dataclasses.get(inst.cls, {})
        if attr in inst.overrides:
            return self._eval(inst.overrides[attr], inst.scope, inst.line, d)[0], "dataclass argument"
        if attr not in fields or fields[attr] is None:
            raise _NoValue
        default = fields[attr]
        if isinstance(default, ast.Call) and _dotted(default.func) in ("field", "dataclasses.field"):
            for kw in default.keywords:
                if kw.arg == "default":
                    return self._eval(kw.value, self.module, kw.value.lineno, d)[0], "dataclass default"
                if kw.arg == "default_factory":
                    factory = kw.value
                    if isinstance(factory, ast.Lambda):
                        return self._eval(factory.body, self.module, factory.lineno, d)[0], "dataclass default"
                    fname = _dotted(factory)
                    if fname in self.dataclasses:
                        return Instance(fname, {}, None, 0), "dataclass default"
                    if fname in ("list", "dict"):
                        return ([] if fname == "list" else {}), "dataclass default"
            raise _NoValue
        value, _ = self._eval(default, self.module, getattr(default, "lineno", 0), d)
        return value, "dataclass default"

    def resolve_path(self, node: ast.expr, scope: Scope, line: int) -> PathRef | None:
        try:
            value, _ = self._eval(node, scope, line, 0)
        except _NoValue:
            return None
        if isinstance(value, PathRef):
            return value
        if isinstance(value, str):
            return _literal_path(value)
        return None


class _NoValue(Exception):
    """The expression has no static value."""


def _raise() -> Any:
    raise _NoValue


def _combine(hows: list[str]) -> str:
    for preferred in ("dataclass argument", "dataclass default", "constant", "path", "arithmetic"):
        if preferred in hows:
            return preferred
    return "literal"


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _arith(op: ast.operator, a: Any, b: Any) -> Any:
    if isinstance(a, str) and isinstance(b, str) and isinstance(op, ast.Add):
        return a + b
    if isinstance(a, list) and isinstance(b, list) and isinstance(op, ast.Add):
        return a + b
    if not (_is_number(a) and _is_number(b)):
        raise _NoValue
    try:
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, ast.Div):
            return a / b
        if isinstance(op, ast.FloorDiv):
            return a // b
        if isinstance(op, ast.Mod):
            return a % b
        if isinstance(op, ast.Pow) and abs(b) <= 64 and abs(a) < 2 ** 32:
            return a ** b
    except (ZeroDivisionError, OverflowError):
        raise _NoValue from None
    raise _NoValue


def _as_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise _NoValue


def _literal_path(text: str) -> PathRef:
    expanded = os.path.expanduser(text)
    if os.path.isabs(expanded):
        return PathRef("absolute", os.path.normpath(expanded))
    return PathRef("cwd", os.path.normpath(text) if text else ".")


def _join(base: PathRef, part: Any) -> PathRef:
    if isinstance(part, PathRef):
        if part.anchor != "cwd":
            return part
        part = part.path
    part = _as_str(part)
    if os.path.isabs(part):
        return PathRef("absolute", os.path.normpath(part))
    anchor = "script_dir" if base.anchor == "script_file" else base.anchor
    if base.anchor == "script_file":
        return PathRef("script_dir", os.path.normpath(os.path.join(os.path.dirname(base.path), part)))
    return PathRef(anchor, os.path.normpath(os.path.join(base.path, part)))


def _parent(ref: PathRef) -> PathRef:
    if ref.anchor == "script_file":
        return PathRef("script_dir", os.path.dirname(ref.path))
    if ref.anchor == "cwd":
        parent = os.path.dirname(ref.path)
        return PathRef("cwd", parent or ".")
    return PathRef(ref.anchor, os.path.dirname(ref.path))


def _dotted(node: ast.AST | None) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _target_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def _is_dataclass_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass")


def _op_text(op: ast.operator) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}.get(type(op), "?")
