"""What a scan of a client script produces, as plain data (no AgentJet knowledge here).

A ``Value`` is either resolved (a plain Python value) or not (then ``why`` says what it depends on).
A resolved value may rest on an ``Assumption``: an environment variable or a command-line option left
at its default. ``Scope`` is the symbol table of a module or function body, used to resolve names;
``ModuleInfo`` is one parsed file with its symbol tables (filled by ``modules.walk_module``). Every data
type of the scan lives here, so the modules that compute them import this one and none imports another
for a type.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

from skill_server.core.text import shorten

#: How a resolved value was obtained. Listed from most to least fragile: the first that applies to
#: any part of an expression names the whole (an env default times a literal is an env default).
HOW_ORDER = ("env-default", "cli-default", "dataclass argument", "dataclass default", "imported constant",
             "constant", "path", "arithmetic", "literal")


@dataclass(frozen=True)
class PathRef:
    """A path expression. ``anchor``: 'absolute', 'script_file' (``__file__`` itself), 'script_dir' (built
    from ``__file__``) or 'cwd' (relative: resolved against the launch directory at run time)."""

    anchor: str
    path: str


@dataclass(frozen=True)
class Assumption:
    """A value that holds only while the user leaves something at its default."""

    kind: Literal["env", "cli", "code"]
    name: str  # the environment variable (GRPO_N), the option (--batch-size), or the code (a function)
    default: str  # the default as written; for code, what it changes

    def describe(self) -> str:
        if self.kind == "env":
            return f"environment variable {self.name} is unset (the script then uses its default {self.default})"
        if self.kind == "code":
            return f"{self.name} changes only {self.default} of the object it returns, and no other code changes this"
        return f"option {self.name} is not given (argparse then uses its default {self.default})"


@dataclass(frozen=True)
class Prov:
    """Provenance of a resolved value: how, and under which assumptions."""

    how: str = "literal"
    assumes: tuple[Assumption, ...] = ()


#: The provenance of a literal (and of objects units make, which are as static as the code that makes them).
LITERAL = Prov("literal")
#: A line after every line: a name looked up at END has the binding its module leaves it with once it has run.
END = 10 ** 9


def combine(provs: list[Prov] | tuple[Prov, ...], floor: str = "literal") -> Prov:
    """The provenance of a value computed from several parts."""
    hows = {p.how for p in provs} | {floor}
    how = next(h for h in HOW_ORDER if h in hows)
    assumes: list[Assumption] = []
    for p in provs:
        assumes.extend(a for a in p.assumes if a not in assumes)
    return Prov(how, tuple(assumes))


@dataclass
class Value:
    value: Any  # a plain Python value when resolved
    resolved: bool
    text: str  # source text of the expression (whitespace collapsed, at most 200 chars)
    how: str = "literal"  # one of HOW_ORDER, or "unresolved"
    assumes: tuple[Assumption, ...] = ()
    why: str = ""  # for an unresolved value: what it depends on

    def describe_unresolved(self) -> str:
        return f"{self.text}: {self.why}" if self.why else f"{self.text}: computed at run time"


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


# --- what a name can be bound to ------------------------------------------------------------------


@dataclass(frozen=True)
class ImportedName:
    """``from module import name``: resolved, statically, only for modules next to the script."""

    module: str
    name: str
    level: int


@dataclass(frozen=True)
class ImportedModule:
    """``import module`` (or ``import module as alias``)."""

    module: str


class Opaque:
    """A binding whose value is never static (a loop variable, a parameter, a ``with`` target ...)."""

    def __init__(self, why: str) -> None:
        self.why = why


class UnitObject:
    """An object an evaluator unit makes (a dataclass definition, an argparse parser): its own static value,
    which only that unit's attributes, methods and calls know how to read."""


#: What a name is bound to: an expression, an import, an opaque marker, a function (its ``Scope``), an
#: object a unit made of a class statement (a dataclass definition), or None (annotated, never assigned).
Binding = Union[ast.expr, ImportedName, ImportedModule, Opaque, UnitObject, "Scope", None]  # noqa: UP007 (forward ref)


class Scope:
    """A module or function body: its simple-name bindings in source order, and what tools need about it."""

    def __init__(self, name: str, parent: Scope | None, node: ast.AST | None, module: ModuleInfo | None = None
                 ) -> None:
        self.name = name
        self.parent = parent
        self.node = node
        self.module: ModuleInfo | None = module if module is not None else (
            parent.module if parent is not None else None)
        self.assigned: dict[str, list[tuple[int, Binding]]] = {}
        self.params: dict[str, ast.expr | None] = {}  # parameter -> annotation
        self.jobs: dict[str, list[tuple[int, int | None]]] = {}  # variable -> [(line, construction)]
        self.aliases: dict[str, list[tuple[int, tuple[int | None, tuple[tuple[str, str], ...]]]]] = {}
        self.call_sites: list[tuple[Scope, int]] = []  # where this function is called from
        self.call_nodes: list[tuple[Scope, ast.Call]] = []

    def __repr__(self) -> str:
        return f"<scope {self.name}>"

    def assign(self, name: str, line: int, value: Binding) -> None:
        self.assigned.setdefault(name, []).append((line, value))

    def lookup(self, name: str, line: int | None) -> tuple[Scope, Binding] | None:
        """The binding of ``name`` last made before ``line`` (None: anywhere), searching outwards."""
        scope: Scope | None = self
        use_line = line
        while scope is not None:
            entries = scope.assigned.get(name)
            if name in scope.params and not entries:
                return None  # a parameter: the caller decides
            if entries:
                candidates = entries if use_line is None else [e for e in entries if e[0] <= use_line]
                if not candidates:
                    return None
                if use_line is None and len(entries) > 1 and not _all_same(entries):
                    return None  # reassigned with different values: unknowable from an inner scope
                return scope, candidates[-1][1]
            scope = scope.parent
            use_line = None
        return None


T = TypeVar("T")


def tracked(scope: Scope | None, table: Callable[[Scope], dict[str, list[tuple[int, T]]]], name: str,
            line: int) -> tuple[T] | None:
    """The entry ``name`` last got in ``table`` (a scope's ``jobs`` or ``aliases``) before ``line``, searching
    outwards as Python resolves names: a scope that binds ``name`` to something else hides the outer ones.
    Wrapped in a tuple, since the entry itself may be None."""
    current: Scope | None = scope
    use_line: int | None = line
    while current is not None:
        entries = table(current).get(name)
        if entries:
            before = [e for e in entries if use_line is None or e[0] <= use_line]
            if before:
                return (before[-1][1],)
        if current.assigned.get(name) or name in current.params:
            return None  # bound to something else in this scope
        current, use_line = current.parent, None
    return None


def _all_same(entries: list[tuple[int, Binding]]) -> bool:
    def key(binding: Binding) -> str:
        if isinstance(binding, ast.AST):
            try:
                return ast.dump(binding)
            except RecursionError:
                return f"deep:{id(binding)}"
        return repr(binding) if not isinstance(binding, Opaque) else f"opaque:{id(binding)}"

    return len({key(b) for _, b in entries}) == 1


#: Longest source text kept for a node (``ModuleInfo.text``).
MAX_TEXT = 200


class ModuleInfo:
    """One parsed Python file and its symbol tables (``modules.parse_module`` makes it and fills them)."""

    def __init__(self, path: Path, source: str, tree: ast.Module, name: str) -> None:
        self.path = path
        self.source = source
        self.tree = tree
        self.name = name
        self.scope = Scope("<module>", None, tree, module=self)
        self.functions: dict[str, Scope] = {}  # function name -> its scope (first definition wins)
        self.classes: dict[str, UnitObject] = {}  # class name -> what a unit made of it (first definition wins)
        self.imports: list[tuple[ast.Import | ast.ImportFrom, Scope]] = []
        #: The nodes the scan's passes read, in source order, each with the scope it runs in.
        self.effect_nodes: list[tuple[ast.AST, Scope]] = []
        self._lines: list[bytes] | None = None

    def __repr__(self) -> str:
        return f"<module {self.name}>"

    def text(self, node: ast.AST) -> str:
        """Source text of a node (offsets are UTF-8 byte columns), whitespace collapsed, at most 200 chars."""
        segment = None
        lineno, end_lineno = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if lineno is not None and end_lineno is not None and col is not None and end_col is not None:
            if self._lines is None:
                self._lines = [line.encode("utf-8") for line in self.source.splitlines(keepends=True)]
            lines = self._lines[lineno - 1:end_lineno]
            if lines:
                if len(lines) == 1:
                    raw = lines[0][col:end_col]
                else:
                    raw = lines[0][col:] + b"".join(lines[1:-1]) + lines[-1][:end_col]
                segment = raw.decode("utf-8", errors="replace")
        if segment is None:
            try:
                segment = ast.unparse(node)
            except (RecursionError, ValueError, AttributeError, TypeError):  # text is informational only
                segment = type(node).__name__
        segment = " ".join(segment.split())
        return shorten(segment, MAX_TEXT)


# --- the episode protocol of a client (filled by ``episodes``) ----------------------------------------

@dataclass(frozen=True)
class Leak:
    """A path on which an episode begun at ``begin_line`` leaves ``function`` still claimed."""

    function: str
    begin_line: int
    line: int  # where it leaves: the return, the statement that may raise, or the function's last line
    path: str  # "return" | "end" (falls off the function) | "again" (claims another) | "exception"
    raised_at: int | None = None  # an exception from this line was caught and the episode left open


@dataclass(frozen=True)
class Handoff:
    """The episode id goes to code this scan does not read, which may end it: the flow is not judged past it."""

    function: str
    begin_line: int
    line: int
    callee: str


@dataclass(frozen=True)
class EngineCall:
    call: str  # "stop_engine" or the restarting call
    line: int
    text: str
    force: Value | None = None  # force_restart= as given (None: stop_engine)


@dataclass(frozen=True)
class EpisodeTimeout:
    """How long the client waits for an episode (or for the agent run inside one), and where."""

    line: int
    seconds: Value
    what: str  # the call as written, shortened
    functions: frozenset[str] = frozenset()  # the functions whose claims it bounds (empty: every claim)


@dataclass(frozen=True)
class Claim:
    line: int
    function: str
    discard_timeout: Value | None  # discard_episode_timeout= as given (None: the default)


@dataclass
class EpisodeProtocol:
    claims: list[Claim] = field(default_factory=list)
    closes: list[int] = field(default_factory=list)  # lines of end_episode / abort_episode calls
    leaks: list[Leak] = field(default_factory=list)
    handoffs: list[Handoff] = field(default_factory=list)
    wrappers: list[str] = field(default_factory=list)  # functions that return a begun episode to their caller
    engine_calls: list[EngineCall] = field(default_factory=list)
    timeouts: list[EpisodeTimeout] = field(default_factory=list)
    episode_functions: set[str] = field(default_factory=set)  # the script's functions that run episodes
    pool_roles: dict[int, str] = field(default_factory=dict)  # pool line -> "episodes" | "other" | "unknown"


@dataclass
class Pool:
    """One pool construction: at most ``threads`` episodes at once, or why that is not known."""

    callee: str
    line: int
    threads: int | None
    why: str = ""  # when threads is None
    text: str = ""  # the call as written (shortened)
    assumes: tuple[str, ...] = ()


@dataclass
class ScriptScan:
    path: Path
    constructions: list[Construction]
    writes: list[Write]
    freezes: list[Freeze]
    notes: list[str]
    pools: list[Pool] = field(default_factory=list)  # the thread pools the script builds (its episode concurrency)
    episodes: EpisodeProtocol | None = None  # begin/end/abort, engine-control calls, timeouts, pool roles
