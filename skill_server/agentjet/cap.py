"""The exact concurrent-episode cap of AgentJet's swarm engine (``episode_cap``, and the cap checks of
``check_config`` and ``swarm_status``).

Each training step the engine's ``rollout_swarm`` receives one task per batch row and submits
``n_task * num_repeat`` long-lived worker loops to a thread pool of ``max_env_worker`` threads, where
``n_task = min(train_batch_size, round(max_env_worker / num_repeat))`` and ``round`` is ceil in current
engines, floor in older ones (the selected AgentJet says which). Every running episode (what overwatch
counts as "Running Episodes") is held by one loop, so the gauge can never exceed
``min(max_env_worker, n_task * num_repeat)``; what the clients together run at once can lower it further,
never raise it. All arithmetic is on Python integers: exact for any input size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from skill_server.agentjet.identity import AgentJetRef, AgentJetRootArg, AgentJetVersionArg, agentjet_label
from skill_server.core.errors import ToolInputError
from skill_server.core.models import MAX_JSON_INT, NonNegativeInt, PositiveInt, ToolInput, ToolOutput

if TYPE_CHECKING:
    from skill_server.agentjet.release import Release

BoundName = Literal["max_env_worker", "train_batch_size", "clients"]
MAX_CLIENTS = 100_000


class EpisodeCapInput(ToolInput):
    max_env_worker: PositiveInt = Field(
        description="ajet.rollout.max_env_worker of the config the swarm ENGINE runs (not a client-side value)."
    )
    num_repeat: PositiveInt | None = Field(
        default=None, description="ajet.rollout.num_repeat: episodes per task (GRPO group size, 'grpo_n')."
    )
    grpo_n: PositiveInt | None = Field(default=None, description="Alias of num_repeat.")
    train_batch_size: PositiveInt | None = Field(
        default=None, description="ajet.data.train_batch_size: tasks per training step. Omit for 'unbounded'."
    )
    client_parallelism: NonNegativeInt | list[NonNegativeInt] | None = Field(
        default=None,
        description="What the swarm clients run at once: one total (an integer) or each client's own concurrency "
        "(a list, one entry per client). Omit when unknown.",
    )
    max_inference_tracker_threads: PositiveInt | None = Field(
        default=None, description="ajet.interchange_server.max_inference_tracker_threads, to check it against the cap."
    )
    target: PositiveInt | None = Field(
        default=None, description="Episodes at once wanted. The plan (and first suggestion) is the fewest engine "
        "changes reaching it; default: the clients' concurrency when above the cap.")
    thread_rule: Literal["ceil", "floor", "auto"] = Field(
        default="auto",
        description="Rounding of max_env_worker/num_repeat; auto = the selected AgentJet's. Ceil (current engines), "
        "floor (older engines), or auto (the selected AgentJet's rule: a bundled release's, or read statically from "
        "agentjet_root).",
    )
    agentjet_version: AgentJetVersionArg = None
    agentjet_root: AgentJetRootArg = None

    @field_validator("client_parallelism", mode="before")
    @classmethod
    def _clients(cls, value: Any) -> Any:
        """One clear message for the int-or-list union (pydantic would report both branches)."""
        if value is None:
            return value
        if isinstance(value, list):
            if not value:
                raise ValueError("is an empty list; give each client's concurrency (one entry per client), one total, "
                                 "or omit it")
            if len(value) > MAX_CLIENTS:
                raise ValueError(f"lists {len(value)} clients; at most {MAX_CLIENTS}")
            for index, item in enumerate(value):
                _check_count(item, f"entry {index}")
            return value
        _check_count(value, "the total")
        return value

    @model_validator(mode="after")
    def _one_group_size(self) -> EpisodeCapInput:
        if self.num_repeat is None and self.grpo_n is None:
            raise ValueError("num_repeat (or its alias grpo_n) is required")
        if self.num_repeat is not None and self.grpo_n is not None and self.num_repeat != self.grpo_n:
            raise ValueError(f"num_repeat={self.num_repeat} and grpo_n={self.grpo_n} disagree; give one of them")
        return self

    @property
    def group_size(self) -> int:
        size = self.num_repeat if self.num_repeat is not None else self.grpo_n
        assert size is not None  # the validator above requires one of them
        return size

    @property
    def clients_total(self) -> int | None:
        if self.client_parallelism is None:
            return None
        if isinstance(self.client_parallelism, list):
            return sum(self.client_parallelism)
        return self.client_parallelism


def _check_count(value: Any, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is {value!r} ({type(value).__name__}); a client's concurrency is a whole number")
    if value < 0 or value > MAX_JSON_INT:
        raise ValueError(f"{what} is {value}; a client's concurrency is between 0 and {MAX_JSON_INT}")


class CapBounds(ToolOutput):
    max_env_worker: int = Field(description="The engine's thread pool width.")
    max_env_worker_groups: int = Field(
        description="num_repeat * round(max_env_worker / num_repeat): the loops max_env_worker lets the engine submit.")
    train_batch_size: int | None = Field(description="num_repeat * train_batch_size, or null when not given.")
    clients: int | None = Field(description="What the clients run at once (the total given, or the sum of the list).")


class CapChange(ToolOutput):
    name: str = Field(description="The setting, e.g. max_env_worker.")
    key: str = Field(description="Its dotted config key.")
    value: int = Field(description="The value to set.")
    was: int | None = Field(description="The value now (null: not known).")


class CapPlan(ToolOutput):
    """The fewest engine-side changes that let ``target`` episodes run at once, checked with the cap's own
    arithmetic (``episode_cap`` is what the changed settings give)."""

    target: int
    aim: Literal["given", "clients"] = Field(description="given: the target argument; clients: the clients' "
                                             "concurrency, above the engine's cap.")
    changes: list[CapChange] = Field(description="Empty when the engine already allows the target.")
    episode_cap: int = Field(description="The engine's cap with the changes (the gauge also needs the clients).")
    reaches: bool
    notes: list[str]


class EpisodeCapResult(ToolOutput):
    summary: str = Field(description="One line to quote: the cap, what binds, the knob.")
    episode_cap: int = Field(description="Most episodes that can run at once: the ceiling of overwatch's gauge.")
    engine_cap: int = Field(description="The cap the engine alone imposes: min(max_env_worker, worker_loops).")
    worker_loops: int = Field(description="Worker loops submitted per step: n_task * num_repeat.")
    n_task: int = Field(description="Task groups submitted per step.")
    pool_width: int = Field(description="Threads in the engine's pool (= max_env_worker).")
    num_repeat: int
    thread_rule: Literal["ceil", "floor"]
    thread_rule_source: str = Field(description="Why this rule: given, or which AgentJet's code says so.")
    agentjet: AgentJetRef = Field(description="The AgentJet the rule (and so the answer) describes.")
    divisible: bool = Field(description="max_env_worker % num_repeat == 0.")
    queued_loops: int = Field(description="Loops submitted beyond the pool: they wait and never run this step.")
    idle_threads: int = Field(description="Pool threads that get no loop this step.")
    bounds: CapBounds
    binding: list[BoundName] = Field(
        description="The inputs that set the cap: max_env_worker (the pool, or its rounding to whole GRPO groups), "
        "train_batch_size, clients.")
    plan: CapPlan | None = Field(default=None, description="With a target (or clients above the cap): the fewest "
                                 "engine changes reaching it, checked.")
    suggestions: list[str]
    explanation: str


def engine_cap_of(max_env_worker: int, num_repeat: int, train_batch_size: int | None, rule: str) -> int:
    """The engine's cap for these settings: the one formula every answer and every suggestion is checked with."""
    groups = _groups(max_env_worker, num_repeat, rule)
    n_task = min(train_batch_size, groups) if train_batch_size is not None else groups
    return min(max_env_worker, n_task * num_repeat)


def episode_cap_for(inp: EpisodeCapInput, release: Release, *, world_size: int | None = None) -> EpisodeCapResult:
    """The cap under ``release``, which a caller already selected (check_config does); ``inp.agentjet_version``
    and ``agentjet_root`` are then not read. ``world_size`` (GPUs x nodes, when the caller knows them) keeps a
    planned batch a multiple the trainer accepts."""
    rule, rule_source = _resolve_rule(inp, release)
    mew, n, tbs = inp.max_env_worker, inp.group_size, inp.train_batch_size

    groups = _groups(mew, n, rule)
    n_task = min(tbs, groups) if tbs is not None else groups
    worker_loops = n_task * n
    engine_cap = engine_cap_of(mew, n, tbs, rule)
    clients = inp.clients_total
    cap = engine_cap if clients is None else min(engine_cap, clients)

    bounds = CapBounds(max_env_worker=mew, max_env_worker_groups=groups * n,
                       train_batch_size=n * tbs if tbs is not None else None, clients=clients)
    binding: list[BoundName] = []
    if min(mew, groups * n) == cap:
        binding.append("max_env_worker")
    if bounds.train_batch_size is not None and bounds.train_batch_size == cap:
        binding.append("train_batch_size")
    if clients is not None and clients == cap:
        binding.append("clients")
    result = EpisodeCapResult(
        summary="",
        episode_cap=cap,
        engine_cap=engine_cap,
        worker_loops=worker_loops,
        n_task=n_task,
        pool_width=mew,
        num_repeat=n,
        thread_rule=rule,
        thread_rule_source=rule_source,
        agentjet=release.ref,
        divisible=mew % n == 0,
        queued_loops=max(0, worker_loops - mew),
        idle_threads=max(0, mew - worker_loops),
        bounds=bounds,
        binding=binding,
        suggestions=[],
        explanation="",
    )
    result.plan = plan_for(inp, result, world_size)
    result.suggestions = _suggestions(inp, result)
    result.explanation = _explanation(inp, result)
    result.summary = cap_summary(result)
    return result


_KNOBS = {"max_env_worker": "raise max_env_worker", "train_batch_size": "raise train_batch_size",
          "clients": "raise what the clients run at once"}


def cap_summary(r: EpisodeCapResult) -> str:
    """One line an assistant can quote: the cap, what binds it, the knob that lifts it, and which AgentJet."""
    binds = " and ".join("the clients' concurrency" if b == "clients" else b for b in r.binding) or "nothing"
    knobs = " or ".join(_KNOBS[b] for b in r.binding) or "raise max_env_worker"
    line = (f"Episode cap {r.episode_cap} ({agentjet_label(r.agentjet)}, {r.thread_rule} rule): {binds} "
            f"bind{'s' if len(r.binding) == 1 else ''}; to lift it, {knobs}.")
    if r.queued_loops:
        line += (f" {r.queued_loops} of {r.worker_loops} worker loops queue (max_env_worker is no multiple of "
                 f"{r.num_repeat}).")
    elif r.idle_threads and r.n_task:
        line += f" {r.idle_threads} of {r.pool_width} threads stay idle."
    plan = r.plan
    if plan is not None and plan.changes:
        sets = _and([f"{c.name} {c.value}" for c in plan.changes])
        line += f" For {plan.target} at once{' (the clients)' if plan.aim == 'clients' else ''}: {sets} (cap " \
                f"{plan.episode_cap})."
    return line


def _groups(mew: int, n: int, rule: str) -> int:
    return -(-mew // n) if rule == "ceil" else mew // n


def _resolve_rule(inp: EpisodeCapInput, release: Release) -> tuple[Literal["ceil", "floor"], str]:
    if inp.thread_rule != "auto":
        return inp.thread_rule, f"given (thread_rule={inp.thread_rule})"
    found = release.thread_rule
    if found.rule not in ("ceil", "floor"):
        raise ToolInputError(f"thread_rule=auto, but the rule of {found.agentjet} is unknown ({found.evidence}); give "
                             "thread_rule ceil or floor", field="thread_rule")
    return ("ceil" if found.rule == "ceil" else "floor"), found.source


def _multiple_above(value: int, n: int) -> int:
    return -(-value // n) * n


#: Where every change a suggestion asks for is made: the job the client builds, never the engine's copy of it.
WHERE_TO_CHANGE = ("Make these changes in the job the client syncs to the engine (its AgentJetJob kwargs or its base "
                   "YAML), not in the engine's yaml_backup.yaml (a copy rewritten at every start), and restart the "
                   "engine: the values are read when training starts.")


@dataclass(frozen=True)
class Balanced:
    """An engine setting under which every pool thread runs a worker loop and no loop waits in the queue:
    ``max_env_worker`` a multiple of ``num_repeat`` and at most ``train_batch_size x num_repeat``."""

    max_env_worker: int
    train_batch_size: int | None  # the batch to set with it; None: the batch stays as it is

    @property
    def episode_cap(self) -> int:
        return self.max_env_worker


def balanced_settings(max_env_worker: int, num_repeat: int, train_batch_size: int | None) -> list[Balanced]:
    """The nearest balanced settings, changing as little as possible, first the one that keeps the pool
    smaller: [] when the setting is balanced already. The same answer under either thread rule (a balanced
    setting has no partial group to round), so every suggestion that uses it agrees with every other."""
    mew, n, tbs = max_env_worker, num_repeat, train_batch_size
    whole = mew // n  # GRPO groups the pool holds completely
    if tbs is not None and tbs * n < mew:  # the batch binds: fit the pool to it, or grow the batch to the pool
        out = [Balanced(tbs * n, None)]
        if whole > tbs:
            out.append(Balanced(whole * n, whole))
        return out
    if mew % n == 0:
        return []
    out = [Balanced(whole * n, None)] if whole > 0 else []
    return [*out, Balanced((whole + 1) * n, None)]  # tbs * n > mew here, so the batch already covers it


def plan_for(inp: EpisodeCapInput, r: EpisodeCapResult, world_size: int | None = None) -> CapPlan | None:
    """The fewest engine changes under which ``target`` episodes (else the clients' concurrency, when it is above
    the engine's cap) can run at once: max_env_worker and train_batch_size raised only as far as needed, to
    whole GRPO groups; num_repeat kept (it is the algorithm's group size); the batch kept a multiple the GPUs
    divide when ``world_size`` is known; the tracker threads raised when known to be short. The result is
    checked with :func:`engine_cap_of`."""
    clients = r.bounds.clients
    aim: Literal["given", "clients"]
    if inp.target is not None:
        target, aim = inp.target, "given"
    elif clients is not None and clients > r.engine_cap:
        target, aim = clients, "clients"
    else:
        return None
    mew, n, tbs, rule = inp.max_env_worker, r.num_repeat, inp.train_batch_size, r.thread_rule
    notes: list[str] = []
    groups = -(-target // n)
    new_tbs = tbs if tbs is None or tbs >= groups else groups
    new_mew = mew if engine_cap_of(mew, n, new_tbs, rule) >= target else groups * n
    if new_tbs is not None and new_tbs != tbs and world_size:
        new_tbs = _batch_for_world(new_tbs, n, world_size)
    if new_mew != mew and new_mew != target:
        notes.append(f"{new_mew} rather than {target}: max_env_worker in whole GRPO groups of {n} (the last "
                     "partial group would only queue)")
    changes = [CapChange(name=name, key=f"ajet.{section}.{name}", value=value, was=was)
               for name, section, value, was in (("max_env_worker", "rollout", new_mew, mew),
                                                 ("train_batch_size", "data", new_tbs, tbs))
               if value is not None and value != was]
    cap = engine_cap_of(new_mew, n, new_tbs, rule)
    tracker = inp.max_inference_tracker_threads
    if tracker is not None and tracker < cap:
        changes.append(CapChange(name="max_inference_tracker_threads",
                                 key="ajet.interchange_server.max_inference_tracker_threads", value=new_mew,
                                 was=tracker))
    notes += _plan_notes(target, clients, n, (mew, new_mew), (tbs, new_tbs), tracker, bool(changes))
    return CapPlan(target=target, aim=aim, changes=changes, episode_cap=cap, reaches=cap >= target, notes=notes)


def _plan_notes(target: int, clients: int | None, n: int, mews: tuple[int, int],
                tbss: tuple[int | None, int | None], tracker: int | None, changed: bool) -> list[str]:
    """The plan's cautions: what was not given, what stays and why, what the clients and the training see."""
    (mew, new_mew), (tbs, new_tbs) = mews, tbss
    notes: list[str] = []
    if tracker is None and changed:
        notes.append(f"keep ajet.interchange_server.max_inference_tracker_threads at {new_mew} or more (= "
                     "max_env_worker, as AgentJet recommends); it was not given")
    if new_mew % n and new_mew == mew and changed:
        notes.append(f"max_env_worker={mew} stays: it already reaches the target, though it is no multiple of {n}")
    if clients is not None and clients < target:
        notes.append(f"the clients together run {clients} at once: the gauge reaches {target} only once they run "
                     f"{target} (more clients, or larger client pools)")
    if new_tbs is not None and tbs is not None and new_tbs != tbs:
        notes.append(f"a train_batch_size of {new_tbs} also changes the training itself: each step learns from "
                     f"{new_tbs} tasks x {n} = {new_tbs * n} samples instead of {tbs * n} (fewer steps per epoch; "
                     "the learning rate may want a look)")
    if changed:
        notes.append(f"num_repeat stays {n} (the GRPO group size the algorithm uses)")
    return notes


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _batch_for_world(batch: int, n: int, world: int) -> int:
    """The smallest batch >= ``batch`` whose batch x num_repeat the GPUs divide (the trainer refuses others)."""
    for candidate in range(batch, batch + world + 1):
        if candidate * n % world == 0:
            return candidate
    return batch


def plan_sentence(plan: CapPlan, n: int, rule: str) -> str:
    """The plan as the first suggestion: what to set, and the check."""
    why = "the clients' concurrency" if plan.aim == "clients" else "the target"
    if not plan.changes:
        return (f"The engine already allows {plan.episode_cap} episodes at once, at least {why} ({plan.target}): no "
                "engine change is needed." + (" " + "; ".join(plan.notes) + "." if plan.notes else ""))
    values = {c.name: c.value for c in plan.changes}
    sets = _and([f"{c.name} {c.value}" + (f" (now {c.was})" if c.was is not None else "") for c in plan.changes])
    check = ""
    if "max_env_worker" in values or "train_batch_size" in values:
        mew = values.get("max_env_worker")
        tbs = values.get("train_batch_size")
        check = (f"; check: min(max_env_worker, {n} x min(train_batch_size, {rule}(max_env_worker/{n}))) with "
                 f"{'max_env_worker ' + str(mew) if mew else 'max_env_worker unchanged'}"
                 f"{', train_batch_size ' + str(tbs) if tbs else ''} = {plan.episode_cap}")
    notes = f" Also: {'; '.join(plan.notes)}." if plan.notes else ""
    return f"To run {plan.target} episodes at once ({why}): set {sets}, with num_repeat {n}{check}.{notes}"


def _suggestions(inp: EpisodeCapInput, r: EpisodeCapResult) -> list[str]:
    mew, n, tbs = inp.max_env_worker, r.num_repeat, inp.train_batch_size
    out: list[str] = [plan_sentence(r.plan, n, r.thread_rule)] if r.plan is not None else []
    balanced = balanced_settings(mew, n, tbs)
    batch_binds = tbs is not None and tbs * n < mew
    if r.n_task == 0:
        out.append(
            f"max_env_worker ({mew}) is smaller than num_repeat ({n}): with the floor rule no task group fits and the "
            f"engine's rollout refuses to start. Set max_env_worker to at least {n} (a multiple of {n})."
        )
    if not r.divisible and not batch_binds:  # the rounding binds: loops queue (ceil) or threads idle (floor)
        choices = " or ".join(str(b.max_env_worker) for b in balanced)
        if r.thread_rule == "ceil":
            waste = f"{r.queued_loops} of the {r.worker_loops} submitted loops wait in the queue and never run"
        else:
            waste = (f"{mew - r.bounds.max_env_worker_groups} pool threads stay idle (the floor rule drops the "
                     "partial group)")
        out.append(
            f"max_env_worker={mew} is not a multiple of num_repeat={n}: {waste}. Use {choices} so whole GRPO "
            "groups fill the pool exactly."
        )
    if "max_env_worker" in r.binding and r.n_task > 0 and r.plan is None:
        if tbs is not None and tbs * n > mew:
            how = (f"up to {tbs * n} (= train_batch_size {tbs} x num_repeat {n}, where the batch becomes the bound; "
                   "beyond that raise train_batch_size too)")
        else:
            target = _multiple_above(2 * mew, n)
            how = f"(e.g. to {target}, a multiple of {n})"
            if tbs is not None:
                how += f" together with train_batch_size (to at least {target // n})"
        out.append(
            f"To lift the cap, raise max_env_worker {how}."
        )
    if "train_batch_size" in r.binding and tbs is not None and "max_env_worker" not in r.binding:
        out.append(_batch_binds(r, balanced, tbs))
    if out and (r.plan is None or r.plan.changes or len(out) > 1):  # the suggestions so far change engine values
        out.append(WHERE_TO_CHANGE)
    if r.bounds.clients is not None and r.bounds.clients < r.engine_cap:
        out.append(
            f"The clients together run only {r.bounds.clients} episodes at once while the engine allows "
            f"{r.engine_cap}: raise each client's own concurrency (its thread pool / parallel episodes) or start "
            "more clients to reach the engine cap."
        )
    out.append(
        f"Adding swarm clients, or raising a client-side max_env_worker, never raises the engine cap ({r.engine_cap}); "
        "only the engine's own max_env_worker, num_repeat and train_batch_size do."
    )
    if inp.max_inference_tracker_threads is not None and inp.max_inference_tracker_threads < r.episode_cap:
        out.append(
            f"max_inference_tracker_threads={inp.max_inference_tracker_threads} is below the cap ({r.episode_cap}): "
            "each running episode's LLM proxy needs one of these threads, so episodes beyond it may wait "
            f"(a limiter inferred from AgentJet's code, not verified). Set it to max_env_worker ({mew}) as AgentJet "
            "recommends."
        )
    return out


def _batch_binds(r: EpisodeCapResult, balanced: list[Balanced], tbs: int) -> str:
    """The batch binds: fit the pool to it, or grow the batch to the whole groups the pool holds."""
    mew, n = r.pool_width, r.num_repeat
    fit, *grow = balanced
    options = [f"lower max_env_worker to {fit.max_env_worker} (the extra threads do nothing)"]
    if grow:
        g = grow[0]
        raise_batch = f"raise train_batch_size to {g.train_batch_size}"
        if g.max_env_worker != mew:
            raise_batch += (f" and set max_env_worker to {g.max_env_worker} (a multiple of {n}: {mew} would leave "
                            "the last partial group queued or idle)")
        options.insert(0, f"{raise_batch} to use the whole pool")
    said = ", or ".join(options)
    said = ("Alternatively, to use the pool you have: " + said if r.plan is not None and r.plan.changes
            else said[0].upper() + said[1:])
    return (f"train_batch_size={tbs} binds: only {tbs} task groups x {n} = {tbs * n} loops exist per step, so "
            f"{mew - tbs * n} of the {mew} pool threads never work. {said}.")


def _explanation(inp: EpisodeCapInput, r: EpisodeCapResult) -> str:
    mew, n, tbs = inp.max_env_worker, r.num_repeat, inp.train_batch_size
    groups = f"{r.thread_rule}({mew}/{n})"
    if tbs is not None:
        groups = f"min(train_batch_size {tbs}, {groups})"
    parts = [
        f"Each step the engine submits {groups} = {r.n_task} task groups of {n} episodes, i.e. {r.worker_loops} "
        f"worker loops, onto a pool of {mew} threads, so at most min({mew}, {r.worker_loops}) = {r.engine_cap} "
        f"episodes run at once ({r.thread_rule} rule: {r.thread_rule_source})."
    ]
    if r.queued_loops:
        parts.append(f"The {r.queued_loops} loops beyond the pool wait and never run during the step.")
    if r.idle_threads and r.n_task:
        parts.append(f"{r.idle_threads} threads get no loop.")
    if r.bounds.clients is not None:
        parts.append(
            f"The clients together run {r.bounds.clients} at once, so the gauge tops out at {r.episode_cap}."
        )
    parts.append(
        "Overwatch's 'Running Episodes' counts claimed episodes only, so it stays at or below this cap; more "
        "clients never raise it."
    )
    return " ".join(parts)
