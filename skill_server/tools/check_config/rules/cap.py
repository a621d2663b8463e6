"""Rules on the engine's episode cap: pool width against GRPO groups, the batch, the tracker threads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.replay import Run
from skill_server.analysis.values import Unknown, is_int
from skill_server.tools.check_config.context import CAP_INPUTS, LintContext
from skill_server.tools.check_config.registry import Report, rule


@rule("cap-not-divisible", "warning", "max_env_worker is not a multiple of num_repeat.", """
    The engine submits whole GRPO groups of num_repeat episodes onto a pool of max_env_worker threads; the
    last partial group either waits in the queue and never runs (ceil rule, current engines) or leaves
    threads idle (floor rule, older engines). When train_batch_size x num_repeat is below max_env_worker
    the batch binds instead and no partial group forms: cap-limited-by-batch reports that, with a fix that
    also makes max_env_worker a multiple. The finding locates max_env_worker, num_repeat and
    train_batch_size, the line that sets each effective value first.""", swarm_only=True, example="""
python
max_env_worker=128, num_repeat=6   # before
max_env_worker=126, num_repeat=6   # after (or 132)""")
def cap_not_divisible(ctx: LintContext, run: Run) -> Iterator[Report]:
    v = ctx.needs("cap-not-divisible", run, "max_env_worker", "num_repeat")
    if v is None:
        return
    mew, n = v["max_env_worker"], v["num_repeat"]
    if mew % n == 0:
        return
    tbs = run.value("train_batch_size")
    if is_int(tbs) and tbs > 0 and tbs * n < mew:
        return  # the batch binds: no partial group forms (cap-limited-by-batch says what to change)
    facts = ctx.episode_cap(run, with_batch=is_int(tbs)) or ctx.episode_cap(run, with_batch=False)
    pools = [pool for pool, _ in ctx.aj.balanced_settings(mew, n, tbs if is_int(tbs) and tbs > 0 else None)]
    waste = ""
    values: dict[str, Any] = {"max_env_worker": mew, "num_repeat": n}
    if facts is not None:
        waste = (f": {facts.queued_loops} of the {facts.worker_loops} worker loops wait in the queue and never run"
                 if facts.thread_rule == "ceil" else f": {facts.idle_threads} pool threads stay idle")
        waste += f" (episode cap {facts.episode_cap})"
        values |= {"episode_cap": facts.episode_cap, "thread_rule": facts.thread_rule}
    yield Report(KEYS["max_env_worker"], f"max_env_worker={mew} is not a multiple of num_repeat={n}{waste}",
                 ctx.locate(run, *CAP_INPUTS), values,
                 f"use max_env_worker {' or '.join(str(p) for p in pools)}, so whole GRPO groups fill the pool exactly "
                 f"({ctx.where_to_set(run, KEYS['max_env_worker'], pools[0])})")


@rule("cap-limited-by-batch", "warning", "train_batch_size x num_repeat is below max_env_worker.", """
    Only train_batch_size x num_repeat episodes exist per step, so that many run at once and the remaining
    engine threads never work. The fix either fits the pool to the batch or raises the batch to the whole
    groups the pool holds, lowering max_env_worker to a multiple of num_repeat when it is not one (a batch
    that outgrows a partial group would leave loops queued). The finding locates all three inputs.""",
      swarm_only=True, example="""
python
max_env_worker=512, num_repeat=8, batch_size=32   # before: cap 256
max_env_worker=256, num_repeat=8, batch_size=32   # after (or batch_size=64)""")
def cap_limited_by_batch(ctx: LintContext, run: Run) -> Iterator[Report]:
    v = ctx.needs("cap-limited-by-batch", run, *CAP_INPUTS)
    if v is None:
        return
    mew, n, tbs = (v[k] for k in CAP_INPUTS)
    if tbs * n >= mew:
        return
    facts = ctx.episode_cap(run)
    (fit, _), *grow = ctx.aj.balanced_settings(mew, n, tbs)
    lower = f"lower max_env_worker to {fit} ({ctx.where_to_set(run, KEYS['max_env_worker'], fit)})"
    fix = lower
    message = (f"train_batch_size x num_repeat = {tbs} x {n} = {tbs * n} < max_env_worker={mew}: only {tbs * n} "
               f"episodes can run at once and {mew - tbs * n} engine threads never work")
    if grow and grow[0][1] is not None:
        pool, batch = grow[0]
        fix = f"raise train_batch_size to {batch} ({ctx.where_to_set(run, KEYS['train_batch_size'], batch)})"
        if pool != mew:
            message += f"; max_env_worker={mew} is not a multiple of num_repeat={n} either"
            fix += (f" and lower max_env_worker to {pool} ({ctx.where_to_set(run, KEYS['max_env_worker'], pool)}), "
                    f"so the batch fills the pool with whole GRPO groups and no loop waits")
        else:
            fix += " to use the whole pool"
        fix += f", or {lower}"
    yield Report(KEYS["train_batch_size"], message, ctx.locate(run, "train_batch_size", "num_repeat", "max_env_worker"),
                 {**v, "episode_cap": facts.episode_cap if facts else None}, fix)


@rule("tracker-threads-below-cap", "warning", "max_inference_tracker_threads is below the episode cap.", """
    Each running episode's LLM proxy holds one interchange tracker thread, so episodes beyond
    interchange_server.max_inference_tracker_threads may wait. This limiter is inferred from AgentJet's
    code, not verified.""", swarm_only=True, example="""
yaml
max_inference_tracker_threads: 64    # before, with max_env_worker 128
max_inference_tracker_threads: 128   # after: equal to max_env_worker""")
def tracker_threads_below_cap(ctx: LintContext, run: Run) -> Iterator[Report]:
    tracker = run.value("max_inference_tracker_threads")
    if isinstance(tracker, Unknown):
        ctx.skip("tracker-threads-below-cap", f"max_inference_tracker_threads is unknown ({tracker.reason})")
        return
    if not is_int(tracker):
        return
    facts = ctx.episode_cap(run, "tracker-threads-below-cap")
    if facts is None or tracker >= facts.episode_cap:
        return
    mew = run.value("max_env_worker")
    yield Report(KEYS["max_inference_tracker_threads"],
                 f"max_inference_tracker_threads={tracker} is below the episode cap ({facts.episode_cap}): each "
                 "running episode's LLM proxy holds one of these threads, so episodes beyond it may wait (inferred "
                 "from AgentJet's code)", ctx.locate(run, "max_inference_tracker_threads", *CAP_INPUTS),
                 {"max_inference_tracker_threads": tracker, "episode_cap": facts.episode_cap, "max_env_worker": mew},
                 f"raise it to {mew} (= max_env_worker, as AgentJet recommends): "
                 f"{ctx.where_to_set(run, KEYS['max_inference_tracker_threads'], mew)}")
