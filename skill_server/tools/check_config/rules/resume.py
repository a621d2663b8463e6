"""Rules on what resuming and progress need: checkpoints that are saved before the end, a known step count.

verl saves a checkpoint when ``save_freq > 0`` and the step is the last one or a multiple of ``save_freq``; a
relaunch with the same experiment name resumes from the newest (``trainer.resume_mode: auto``). So a run that
saves never, or only at its last step, starts over after any failure, and a run without a step count has no
end the tools can measure an ETA against.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.replay import Run
from skill_server.analysis.values import MISSING, Unknown, a_type, describe_unknown, is_int, is_num, show
from skill_server.tools.check_config.context import LintContext
from skill_server.tools.check_config.registry import Report, rule

SAVE_FREQ = KEYS["save_freq"]
TOTAL_STEPS = KEYS["total_training_steps"]
#: AgentJet's own default save_freq, offered when the step count is not known.
DEFAULT_SAVE_FREQ = 20


def _number(ctx: LintContext, rule_id: str, run: Run, key: str) -> float | None:
    """The effective numeric value of ``key``, or None after recording why ``rule_id`` cannot judge it."""
    value = run.value(key)
    name = key.rsplit(".", 1)[-1]
    if isinstance(value, Unknown):
        ctx.skip(rule_id, describe_unknown([(name, value)]))
    elif value is MISSING or value is None:
        ctx.skip(rule_id, f"{name} is not set in what was read")
    elif not is_num(value):
        ctx.skip(rule_id, f"{name} is {show(value)} ({a_type(value)}), not a number")
    else:
        return cast(float, value)  # an int or a float, as the config gives it (shown as written)
    return None


def total_steps(run: Run) -> int | None:
    """The step count the trainer stops at, when the config states one (verl: unset, null and -1 mean none)."""
    value = run.value(TOTAL_STEPS)
    return value if is_int(value) and value > 0 else None


@rule("no-checkpoints", "warning", "No checkpoint is saved before the last step, so a resumed run starts over.", """
    verl saves a checkpoint only when save_freq > 0, at every multiple of save_freq and at the last step; a
    relaunch with the same experiment name and checkpoint directory resumes from the newest one. With
    save_freq <= 0 nothing is ever saved; with save_freq above total_training_steps only the last step is, so a
    failure anywhere before the end loses every step done (a resume policy relaunches from step 0). The
    finding locates save_freq and total_training_steps.""", example="""
python
job.config.ajet.trainer_common.save_freq = 1e9   # before: with total_training_steps=25, only step 25 saves
job.config.ajet.trainer_common.save_freq = 5     # after: steps 5, 10, 15, 20, 25""")
def no_checkpoints(ctx: LintContext, run: Run) -> Iterator[Report]:
    freq = _number(ctx, "no-checkpoints", run, SAVE_FREQ)
    if freq is None:
        return
    total = total_steps(run)
    if freq > 0 and (total is None or freq <= total):
        return
    values: dict[str, Any] = {"save_freq": freq, "total_training_steps": total}
    if freq <= 0:
        message = f"save_freq is {show(freq)}: verl saves no checkpoint at all, so a relaunch starts from step 0"
    else:
        message = (f"save_freq {show(freq)} is above total_training_steps {total}: verl saves only at the last step, "
                   f"so a failure before step {total} loses every step and a relaunch starts from step 0")
    good = max(1, min(DEFAULT_SAVE_FREQ, total // 5)) if total else DEFAULT_SAVE_FREQ
    yield Report(SAVE_FREQ, message, ctx.locate(run, SAVE_FREQ, TOTAL_STEPS), values,
                 f"save every few steps, e.g. save_freq {good} ({ctx.where_to_set(run, SAVE_FREQ, good)}); each "
                 "checkpoint costs disk, so keep a rotation if space is short")


@rule("no-total-steps", "warning", "total_training_steps is not set: no ETA, and checkpoint spacing is unchecked.", """
    Without total_training_steps the trainer runs total_epochs passes over its data loader, a step count
    that is not known before the run: progress has no end to measure an ETA or percent done against, the
    tqdm bar has no total, and no-checkpoints cannot tell whether save_freq saves before the end. The
    finding locates total_training_steps and total_epochs.""", example="""
python
AgentJetJob(batch_size=32)                              # before: the length follows total_epochs
AgentJetJob(batch_size=32, total_training_steps=200)    # after""")
def no_total_steps(ctx: LintContext, run: Run) -> Iterator[Report]:
    value = run.value(TOTAL_STEPS)
    if isinstance(value, Unknown):
        ctx.skip("no-total-steps", describe_unknown([("total_training_steps", value)]))
        return
    if value is MISSING:  # AgentJet's layers set it (null): missing means they were not composed here
        ctx.skip("no-total-steps", "total_training_steps is not in what was read (AgentJet's layers not composed)")
        return
    if total_steps(run) is not None:
        return
    if value is not None and not is_num(value):
        ctx.skip("no-total-steps", f"total_training_steps is {show(value)} ({a_type(value)}), not a number")
        return
    epochs_key = "ajet.trainer_common.total_epochs"
    epochs = run.value(epochs_key)
    said = "not set" if value is None else f"{show(value)} (none)"
    length = f"total_epochs ({show(epochs)})" if is_num(epochs) else "total_epochs"
    yield Report(TOTAL_STEPS, f"total_training_steps is {said}: the run's length follows {length} passes over "
                 "the data, unknown before it runs, so no ETA or percent done can be given",
                 ctx.locate(run, TOTAL_STEPS, epochs_key), {"total_training_steps": value,
                                                           "total_epochs": epochs if is_num(epochs) else None},
                 f"set the number of steps the run should take ({ctx.where_to_set(run, TOTAL_STEPS, 200)}, 200 being "
                 "an example)")
