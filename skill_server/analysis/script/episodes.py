"""The episode protocol of a swarm client, read statically: where episodes are begun, ended or aborted, the
paths on which a begun episode is left claimed, engine-control calls, and the client's own per-episode
timeouts. Which thread pool runs episodes follows from what it is given to run.

AgentJet's client API (``SwarmClient``, facts in the project's AgentJet notes): ``begin_episode(
discard_episode_timeout=240, episode_type="train", throttle_policy=None)`` claims an episode and returns
``(episode_uuid, api_baseurl_key)``; ``end_episode(task, episode_uuid, workflow_output)`` hands the result
back; ``abort_episode(episode_uuid)`` gives it back unused. A claimed episode that is neither ended nor
aborted stays claimed until the server's ``discard_episode_timeout`` patience runs out: it holds one of
the engine's worker loops until then. ``stop_engine()`` stops the engine for every client, and
``auto_sync_train_config_and_start_engine(job, force_restart=True)`` restarts it under them.

The flow check is per function (and the module body): an abstract walk over the statements that tracks
whether an episode may be open, following ``if``/loops/``try``/``with``, ``return`` and ``raise``, and the
exceptions any call may raise. A call of one of the script's own functions that ends or aborts an episode
counts as ending it; a function that returns what ``begin_episode`` gave (a wrapper) counts as beginning one
where it is called. Nothing is imported or run.
"""

from __future__ import annotations

import ast
import builtins
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from skill_server.analysis.script.evaluate import Evaluator
from skill_server.analysis.script.model import (
    Claim,
    EngineCall,
    EpisodeProtocol,
    EpisodeTimeout,
    Handoff,
    Leak,
    ModuleInfo,
    Pool,
    Scope,
)
from skill_server.analysis.script.modules import child_nodes, dotted

BEGIN = "begin_episode"
CLOSERS = ("end_episode", "abort_episode")
#: The swarm client's default patience of a claimed episode (``begin_episode``'s keyword default).
DEFAULT_DISCARD_TIMEOUT_S = 240
#: Calls that stop or restart the engine every client shares.
ENGINE_STOP = "stop_engine"
RESTARTING = ("auto_sync_train_config_and_start_engine", "sync_train_code_from_dir", "sync_train_code")
#: Calls that bound how long the client waits for a whole episode (or for the agent run inside one).
TIMEOUT_CALLS = {"result": 0, "wait_for": 1, "run": None, "call": None, "check_call": None, "check_output": None,
                 "func_timeout": 0}
#: Pool methods that take the function to run first.
SUBMITTERS = ("submit", "map", "submit_with_periodic_drain", "submit_with_auto_retry", "starmap", "apply_async",
              "imap", "imap_unordered")
BROAD = ("Exception", "BaseException")
MAX_FUNCTIONS = 500


def method_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
#: The fields of a statement that hold statements (or except clauses and match cases, which hold them).
_BLOCK_FIELDS = frozenset({"body", "handlers", "orelse", "finalbody", "cases"})
_BLOCK_ITEMS = (ast.stmt, ast.excepthandler, ast.match_case)


def _calls(node: ast.AST) -> list[ast.Call]:
    """The calls in ``node``, not those in functions, lambdas or classes defined inside it (depth first, the last
    child first). ``find_protocol`` asks once per function (``_OwnCalls``)."""
    out: list[ast.Call] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, ast.Call):
            out.append(item)
        stack += [child for child in child_nodes(item) if not isinstance(child, _NESTED)]
    return out


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """The statements of ``tree`` (and its except clauses and match cases) in ``ast.walk``'s order, without walking
    into expressions, where no statement can be."""
    queue = deque([tree])
    while queue:
        node = queue.popleft()
        yield node
        for name in node._fields:
            if name in _BLOCK_FIELDS:
                value = getattr(node, name, None)
                if isinstance(value, list):
                    queue.extend(item for item in value if isinstance(item, _BLOCK_ITEMS))


class _OwnCalls:
    """``_calls`` of each node asked about, computed once: the roles, the scan and the flow check all read them."""

    def __init__(self) -> None:
        self._found: dict[int, list[ast.Call]] = {}

    def __call__(self, node: ast.AST) -> list[ast.Call]:
        found = self._found.get(id(node))
        if found is None:
            found = self._found[id(node)] = _calls(node)
        return found


def _calls_in_order(node: ast.AST) -> list[ast.Call]:
    """The calls of one statement in the order Python makes them: a call's callee and arguments first."""
    out: list[ast.Call] = []
    stack: list[tuple[ast.AST, bool]] = [(node, False)]
    while stack:
        item, expanded = stack.pop()
        if expanded:
            if isinstance(item, ast.Call):
                out.append(item)
            continue
        stack.append((item, True))
        children = [c for c in ast.iter_child_nodes(item)
                    if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))]
        stack.extend((c, False) for c in reversed(children))
    return out


def _functions(module: ModuleInfo) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    found = [n for n in _statements(module.tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return found[:MAX_FUNCTIONS]


class _Roles:
    """Which of the script's functions begin, close or wrap episodes (directly or through each other), and which
    run inside an episode (called from a function that claims one)."""

    def __init__(self, functions: list[ast.FunctionDef | ast.AsyncFunctionDef], own_calls: _OwnCalls) -> None:
        self.begins: set[str] = set()
        self.closes: set[str] = set()
        self.wrappers: set[str] = set()
        self.inside: set[str] = set()
        calls = {f.name: {method_name(c) for c in own_calls(f)} for f in functions}
        self.own = set(calls)
        for f in functions:
            names = calls[f.name]
            if BEGIN in names:
                self.begins.add(f.name)
                if _returns_claim(f):
                    self.wrappers.add(f.name)
            if names & set(CLOSERS):
                self.closes.add(f.name)
        for _ in range(8):  # through the script's own call chains
            grown = False
            for f in functions:
                names = calls[f.name]
                if f.name not in self.closes and names & self.closes:
                    self.closes.add(f.name)
                    grown = True
                if f.name not in self.begins and names & self.begins:
                    self.begins.add(f.name)
                    grown = True
            if not grown:
                break
        self.reach = {f.name: _reachable(f.name, calls) for f in functions}  # a function and what it calls
        self.inside = {g for f in functions if BEGIN in calls[f.name] for g in self.reach[f.name]}

    def claimers_reaching(self, function: str) -> frozenset[str]:
        """The functions that claim an episode and run ``function`` (directly or through others) meanwhile."""
        return frozenset(f for f, reached in self.reach.items() if function in reached and f in self.claimers)

    @property
    def claimers(self) -> set[str]:
        return {f for f in self.begins if f not in self.wrappers}

    def kind(self, call: ast.Call) -> str | None:
        """'begin', 'close' or None for one call."""
        name = method_name(call)
        own = isinstance(call.func, ast.Name)  # one of the script's functions: what it does counts here
        if name in CLOSERS or (own and name in self.closes and name not in self.begins):
            return "close"
        if name == BEGIN or (own and name in self.wrappers):
            return "begin"
        return None


def _reachable(start: str, calls: dict[str, set[str | None]]) -> set[str]:
    seen = {start}
    stack = [start]
    while stack:
        for name in calls.get(stack.pop(), ()):
            if name in calls and name not in seen:
                seen.add(name)
                stack.append(name)
    return seen


def _returns_claim(f: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The function hands what begin_episode returned to its caller (a wrapper), so the caller must close it."""
    claimed: set[str] = set()
    for node in ast.walk(f):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and method_name(node.value) == BEGIN:
            for target in node.targets:
                claimed |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Call) and method_name(node.value) == BEGIN:
                return True
            if {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)} & claimed:
                return True
    return False


#: One possible state at a point of a function: () = nothing open, else (begin line, line of the exception an
#: except clause caught while it was open, or 0).
State = tuple[int, ...]
NONE: State = ()


@dataclass
class _Try:
    broad: bool  # an except clause catches every Exception
    closes_finally: bool  # the finally block ends or aborts the episode
    raised: dict[State, int] = field(default_factory=dict)  # open state -> first line that may raise in it


class _Flow:
    """The abstract walk of one function body (see the module docstring)."""

    def __init__(self, roles: _Roles, name: str, leaks: list[Leak], handoffs: list[Handoff], ids: set[str]) -> None:
        self.roles = roles
        self.name = name
        self.leaks = leaks
        self.handoffs = handoffs
        self.ids = ids  # the names the function binds the episode id to
        self.tries: list[_Try] = []
        self.loops: list[tuple[set[State], set[State]]] = []  # (states at break, states at continue)

    def leak(self, state: State, line: int, path: str) -> None:
        if not state:
            return
        raised = state[1] or None
        leak = Leak(self.name, state[0], line, "exception" if raised else path, raised)
        if leak not in self.leaks:
            self.leaks.append(leak)

    def throw(self, states: set[State], line: int) -> None:
        """An exception may leave this statement while ``states`` hold."""
        open_states = {s for s in states if s}
        if not open_states:
            return
        for frame in reversed(self.tries):
            if frame.closes_finally:
                return
            for s in open_states:
                frame.raised.setdefault(s, line)
            return  # the try statement decides where it goes next
        for s in open_states:
            self.leak((s[0], 0), line, "exception")

    def block(self, body: list[ast.stmt], states: set[State]) -> set[State]:
        for stmt in body:
            if not states:
                return states
            states = self.stmt(stmt, states)
        return states

    def stmt(self, node: ast.stmt, states: set[State]) -> set[State]:
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            return handler(self, node, states)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return states
        return self.simple(node, states)

    def simple(self, node: ast.AST, states: set[State]) -> set[State]:
        """A statement without inner blocks: its calls, in order."""
        for call in _calls_in_order(node):
            kind = self.roles.kind(call)
            if kind == "close":
                states = {NONE}
            elif kind == "begin":
                for s in states:
                    self.leak(s, call.lineno, "again")  # a second claim while this one is still open
                states = {(call.lineno, 0)}
            elif any(states) and self.hands_off(call):
                for s in states:
                    if s:
                        self.handoffs.append(Handoff(self.name, s[0], call.lineno, method_name(call) or "?"))
                states = {NONE}
            else:
                self.throw(states, call.lineno)
        return states

    def hands_off(self, call: ast.Call) -> bool:
        """The episode id is passed to a function that is not the script's own nor a builtin: it may end it."""
        if not isinstance(call.func, ast.Name) or call.func.id in self.roles.own or call.func.id in _BUILTINS:
            return False
        given = [*call.args, *(k.value for k in call.keywords)]
        return any(isinstance(a, ast.Name) and a.id in self.ids for a in given)

    def finally_closes(self) -> bool:
        return any(frame.closes_finally for frame in self.tries)


def _if(flow: _Flow, node: ast.If, states: set[State]) -> set[State]:
    states = flow.simple(node.test, states)
    return flow.block(node.body, set(states)) | flow.block(node.orelse, set(states))


def _loop(flow: _Flow, node: ast.For | ast.AsyncFor | ast.While, states: set[State]) -> set[State]:
    head = node.iter if isinstance(node, (ast.For, ast.AsyncFor)) else node.test
    states = flow.simple(head, states)
    breaks: set[State] = set()
    continues: set[State] = set()
    flow.loops.append((breaks, continues))
    seen = set(states)
    try:
        for _ in range(4):  # the body may run any number of times: until nothing new appears
            after = flow.block(node.body, set(seen)) | continues
            if after <= seen:
                break
            seen |= after
    finally:
        flow.loops.pop()
    return flow.block(node.orelse, set(seen)) | breaks


def _jump(flow: _Flow, node: ast.stmt, states: set[State]) -> set[State]:
    if flow.loops:
        flow.loops[-1][0 if isinstance(node, ast.Break) else 1].update(states)
    return set()


def _return(flow: _Flow, node: ast.Return, states: set[State]) -> set[State]:
    states = flow.simple(node, states)
    if not flow.finally_closes() and flow.name not in flow.roles.wrappers:
        for s in states:
            flow.leak(s, node.lineno, "return")
    return set()


def _raise(flow: _Flow, node: ast.Raise, states: set[State]) -> set[State]:
    states = flow.simple(node, states)
    flow.throw(states, node.lineno)
    return set()


def _with(flow: _Flow, node: ast.With | ast.AsyncWith, states: set[State]) -> set[State]:
    for item in node.items:
        states = flow.simple(item.context_expr, states)
    return flow.block(node.body, states)


def _try(flow: _Flow, node: ast.Try, states: set[State]) -> set[State]:
    broad = any(_catches_everything(h) for h in node.handlers)
    closes = any(flow.roles.kind(c) == "close" for stmt in node.finalbody for c in _calls(stmt))
    frame = _Try(broad, closes)
    flow.tries.append(frame)
    try:
        after = flow.block(node.body, states)
    finally:
        flow.tries.pop()
    after = flow.block(node.orelse, after)
    # a clause runs when something raised: with the episode open (and that line remembered), or with none open
    caught = {(s[0], line) for s, line in frame.raised.items()} | {NONE}
    for handler in node.handlers:
        after |= flow.block(handler.body, set(caught))
    if not broad and frame.raised:  # what no clause catches goes on, through the finally block
        escaping: set[State] = {(s[0], 0) for s in frame.raised}
        line = min(frame.raised.values())
        flow.throw(flow.block(node.finalbody, escaping) if node.finalbody else escaping, line)
    return flow.block(node.finalbody, after) if node.finalbody else after


def _catches_everything(handler: ast.ExceptHandler) -> bool:
    kind = handler.type
    if kind is None:
        return True
    names = [dotted(e) for e in kind.elts] if isinstance(kind, ast.Tuple) else [dotted(kind)]
    return any(name and name.rsplit(".", 1)[-1] in BROAD for name in names)


_HANDLERS: dict[type, Callable[[_Flow, Any, set[State]], set[State]]] = {
    ast.If: _if, ast.For: _loop, ast.AsyncFor: _loop, ast.While: _loop, ast.Break: _jump, ast.Continue: _jump,
    ast.Return: _return, ast.Raise: _raise, ast.With: _with, ast.AsyncWith: _with, ast.Try: _try,
}
if hasattr(ast, "TryStar"):
    _HANDLERS[ast.TryStar] = _try


_BUILTINS = frozenset(dir(builtins))


def _episode_ids(body: list[ast.stmt]) -> set[str]:
    """The names the episode id is bound to: ``uuid, key = client.begin_episode()`` binds ``uuid``."""
    ids: set[str] = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    method_name(node.value) == BEGIN:
                for target in node.targets:
                    first = target.elts[0] if isinstance(target, (ast.Tuple, ast.List)) and target.elts else target
                    if isinstance(first, ast.Name):
                        ids.add(first.id)
    return ids


def _check_body(roles: _Roles, name: str, body: list[ast.stmt], end_line: int, out: EpisodeProtocol) -> None:
    flow = _Flow(roles, name, out.leaks, out.handoffs, _episode_ids(body))
    for state in flow.block(body, {NONE}):
        if name not in roles.wrappers:
            flow.leak(state, end_line, "end")


def find_protocol(main: ModuleInfo, evaluator: Evaluator, pools: list[Pool]) -> EpisodeProtocol:
    """The episode protocol of the main script (see the module docstring)."""
    functions = _functions(main)
    own_calls = _OwnCalls()
    roles = _Roles(functions, own_calls)
    out = EpisodeProtocol(wrappers=sorted(roles.wrappers), episode_functions=set(roles.begins))
    scopes = {id(s.node): s for s in main.functions.values()}
    for f in functions:
        scope = scopes.get(id(f), main.scope)
        _scan_calls(main, evaluator, f, own_calls(f), scope, roles, out)
        if any(roles.kind(c) == "begin" for c in own_calls(f)):
            _check_body(roles, f.name, f.body, getattr(f, "end_lineno", f.lineno) or f.lineno, out)
    _scan_calls(main, evaluator, main.tree, own_calls(main.tree), main.scope, roles, out)
    if any(roles.kind(c) == "begin" for c in own_calls(main.tree)):
        last = main.tree.body[-1] if main.tree.body else None
        _check_body(roles, "<module>", main.tree.body, getattr(last, "end_lineno", 0) or 0, out)
    out.pool_roles = _pool_roles(main, pools, roles, own_calls(main.tree))
    out.claims.sort(key=lambda c: c.line)
    out.closes.sort()
    out.engine_calls.sort(key=lambda c: c.line)
    out.timeouts.sort(key=lambda t: t.line)
    return out


def _scan_calls(main: ModuleInfo, evaluator: Evaluator, node: ast.AST, calls: list[ast.Call], scope: Scope,
                roles: _Roles, out: EpisodeProtocol) -> None:
    """Claims, closes, engine-control calls and timeouts among ``node``'s own ``calls``."""
    in_episode = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in roles.inside
    for call in calls:
        name = method_name(call)
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        if name == BEGIN:
            given = keywords.get("discard_episode_timeout") or (call.args[0] if call.args else None)
            out.claims.append(Claim(call.lineno, getattr(node, "name", "<module>"),
                                    evaluator.resolve(given, scope, call.lineno) if given is not None else None))
        elif name in CLOSERS:
            out.closes.append(call.lineno)
        elif name == ENGINE_STOP and isinstance(call.func, ast.Attribute):
            out.engine_calls.append(EngineCall(ENGINE_STOP, call.lineno, main.text(call)))
        elif name in RESTARTING and "force_restart" in keywords:
            force = evaluator.resolve(keywords["force_restart"], scope, call.lineno)
            if not (force.resolved and not force.value and not force.assumes):  # false only while a default holds
                out.engine_calls.append(EngineCall(name, call.lineno, main.text(call), force))
        timeout = _timeout_of(call, name, keywords, roles, in_episode)
        if timeout is not None:
            bounds = roles.claimers_reaching(node.name) if in_episode and isinstance(
                node, (ast.FunctionDef, ast.AsyncFunctionDef)) else frozenset()
            out.timeouts.append(EpisodeTimeout(call.lineno, evaluator.resolve(timeout, scope, call.lineno),
                                               main.text(call), bounds))


def _timeout_of(call: ast.Call, name: str | None, keywords: dict[str, ast.expr], roles: _Roles,
                in_episode: bool) -> ast.expr | None:
    """The timeout a call puts on a whole episode: waiting for an episode's future or coroutine, or (inside a
    function that claims episodes) running the agent as a subprocess."""
    if name not in TIMEOUT_CALLS:
        return None
    given = keywords.get("timeout")
    position = TIMEOUT_CALLS[name]
    if given is None and position is not None and len(call.args) > position:
        given = call.args[position]
    if given is None:
        return None
    if name == "func_timeout":
        runs = call.args[1] if len(call.args) > 1 else None
        return given if isinstance(runs, ast.Name) and runs.id in roles.begins else None
    if name == "wait_for":
        inner = call.args[0] if call.args else None
        ran = inner.func if isinstance(inner, ast.Call) else None
        return given if isinstance(ran, ast.Name) and ran.id in roles.begins else None
    if name in ("run", "call", "check_call", "check_output"):
        owner = dotted(call.func.value) if isinstance(call.func, ast.Attribute) else None
        return given if in_episode and owner == "subprocess" else None
    return given if name == "result" and roles.begins else None


def _pool_roles(main: ModuleInfo, pools: list[Pool], roles: _Roles, module_calls: list[ast.Call]) -> dict[int, str]:
    """Each pool's line -> whether what it runs claims episodes: 'episodes', 'other', or 'unknown' (``module_calls``:
    the module body's own calls, where pools are given their work)."""
    names: dict[str, int] = {}  # variable -> pool line
    for node in _statements(main.tree):
        value_targets: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign):
            value_targets = [(node.value, t) for t in node.targets]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            value_targets = [(i.context_expr, i.optional_vars) for i in node.items if i.optional_vars is not None]
        for value, target in value_targets:
            if isinstance(value, ast.Call) and isinstance(target, (ast.Name, ast.Attribute)):
                line = value.lineno
                if any(p.line == line for p in pools):
                    names[dotted(target) or ""] = line
    given: dict[int, list[str | None]] = {p.line: [] for p in pools}
    for call in module_calls:
        submitted = _submitted(call, names)
        if submitted is not None:
            given.setdefault(submitted[0], []).append(submitted[1])
    out: dict[int, str] = {}
    for line, functions in given.items():
        if any(fn in roles.begins for fn in functions):
            out[line] = "episodes"
        elif functions and all(fn is not None for fn in functions):
            out[line] = "other"
        else:
            out[line] = "unknown"
    return out


def _submitted(call: ast.Call, names: dict[str, int]) -> tuple[int, str | None] | None:
    """(pool line, the script function it is given, or None when not one of the script's) for a submit/map
    call on a pool the script bound to a name."""
    name = method_name(call)
    if not (isinstance(call.func, ast.Attribute) and name in SUBMITTERS):
        return None
    line = names.get(dotted(call.func.value) or "")
    if line is None:
        return None
    fn_node: ast.expr | None = call.args[0] if call.args else None
    if isinstance(fn_node, ast.Call) and dotted(fn_node.func) in ("functools.partial", "partial") and fn_node.args:
        fn_node = fn_node.args[0]
    if isinstance(fn_node, ast.Lambda) and isinstance(fn_node.body, ast.Call):  # lambda: rollout(task)
        fn_node = fn_node.body.func
    fn = dotted(fn_node) if fn_node is not None else None
    return line, fn.rsplit(".", 1)[-1] if fn else None
