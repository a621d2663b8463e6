"""The thread pools a client script runs its episodes on, read statically: how many episodes it runs at once.

The gauge counts episodes across every client, so a client's own pool bounds the cap as much as the engine's
settings do. Recognised (facts from AgentJet's ``ajet.utils.thread_executors`` and the standard library):

* ``ThreadPoolExecutor(max_workers=N)``: N threads (without N, Python picks ``min(32, cpus + 4)``: unknown here);
* AgentJet's ``PeriodicDrainThreadPoolExecutor(workers=W, max_parallel=P)``: a pool of P threads (W when P is not
  given; W defaults to 100) that waits for everything in flight every W submissions, so at most ``min(W, P)``;
* AgentJet's ``BoundedThreadPoolExecutor(max_workers, max_queue_size)``: max_workers threads.

Only the main script's own code is read; a pool built in an imported module is not seen (said in the answer).
"""

from __future__ import annotations

import ast

from skill_server.analysis.script.evaluate import Evaluator
from skill_server.analysis.script.model import ModuleInfo, Pool, Scope, Value
from skill_server.analysis.script.modules import dotted

#: class name -> its parameters in order, the ones that bound the threads, and their defaults
POOL_CLASSES: dict[str, tuple[tuple[str, ...], dict[str, int | None]]] = {
    "ThreadPoolExecutor": (("max_workers",), {"max_workers": None}),
    "PeriodicDrainThreadPoolExecutor": (("workers", "max_parallel"), {"workers": 100, "max_parallel": None}),
    "BoundedThreadPoolExecutor": (("max_workers",), {"max_workers": None}),
}


def find_pools(main: ModuleInfo, evaluator: Evaluator) -> list[Pool]:
    """Every pool the main script constructs, in source order, with its thread bound resolved where possible."""
    pools: list[Pool] = []
    for node, scope in main.effect_nodes:
        if isinstance(node, ast.Call):
            name = (dotted(node.func) or "").rsplit(".", 1)[-1]
            if name in POOL_CLASSES:
                pools.append(_pool(name, node, scope, evaluator, main))
    return pools


def _pool(name: str, call: ast.Call, scope: Scope, evaluator: Evaluator, main: ModuleInfo) -> Pool:
    order, defaults = POOL_CLASSES[name]
    given: dict[str, ast.expr] = {p: arg for p, arg in zip(order, call.args)}
    given |= {kw.arg: kw.value for kw in call.keywords if kw.arg in order}
    text = main.text(call)[:200]
    values: dict[str, int] = {}
    assumes: list[str] = []
    for param in order:
        if param not in given:
            default = defaults[param]
            if default is not None:
                values[param] = default
            continue
        value: Value = evaluator.resolve(given[param], scope, call.lineno)
        if not value.resolved:
            return Pool(name, call.lineno, None, f"{param}={value.describe_unresolved()}", text)
        if value.value is None and param == "max_parallel":
            continue
        if not isinstance(value.value, int) or isinstance(value.value, bool) or value.value < 1:
            return Pool(name, call.lineno, None, f"{param}={value.value!r} is not a positive integer", text)
        values[param] = value.value
        assumes.extend(a.describe() for a in value.assumes if a.describe() not in assumes)
    if not values:
        return Pool(name, call.lineno, None, f"{order[0]} is not given: Python picks min(32, cpus + 4) threads on the "
                    "machine that runs it", text)
    return Pool(name, call.lineno, min(values.values()), text=text, assumes=tuple(assumes))
