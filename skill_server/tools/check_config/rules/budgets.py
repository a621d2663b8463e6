"""Rules on the effective numbers: token budgets, LoRA requirements, batch against GPUs."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from skill_server.analysis.agentjet import KEYS
from skill_server.analysis.replay import Run
from skill_server.analysis.values import a_type, is_num, show
from skill_server.tools.check_config.context import LintContext, cause_values
from skill_server.tools.check_config.registry import Report, rule


@rule("length-budget", "error", "Prompt plus response exceed max_model_len, or one turn exceeds the response.", """
    AgentJetJob asserts max_prompt_length + max_response_length <= max_model_len ("illegal token length") and
    max_response_length_in_one_turn <= max_response_length (an empty assert), on the values at construction,
    whether they come from kwargs or the YAML. It does not convert them: lengths given as strings are joined
    and compared as text (AssertionError), mixed types raise TypeError.""",
      claims=("token-budget", "one-turn-over-response"), example="""
python
max_prompt_length=4000, max_response_length=16000, max_model_len=18000   # before
max_prompt_length=4000, max_response_length=16000, max_model_len=20000   # after""")
def length_budget(ctx: LintContext, run: Run) -> Iterator[Report]:
    for cause in run.causes_for("token-budget", "one-turn-over-response"):
        v = cause.values
        names = list(v)
        if not all(is_num(x) for x in v.values()):
            fix = ("give the lengths as ints (convert environment or command-line values with int(...)): "
                   + "; ".join(_types(v)))
        elif cause.id == "token-budget":
            total = v["max_prompt_length"] + v["max_response_length"]
            fix = (f"raise max_model_len to at least {total} ({ctx.where_to_set(run, KEYS['max_model_len'], total)}), "
                   "or shorten the prompt/response budget")
        else:
            limit = v["max_response_length"]
            fix = (f"set max_response_length_in_one_turn to at most {limit} "
                   f"({ctx.where_to_set(run, KEYS['max_response_length_in_one_turn'], limit)})")
        key = KEYS["max_model_len" if cause.id == "token-budget" else "max_response_length_in_one_turn"]
        yield Report(cause.key or key, cause.message, ctx.locate(run, *names),
                     {**cause_values(cause), **v}, fix)


def _types(values: dict[str, Any]) -> list[str]:
    return [f"{name} is {show(value)} ({a_type(value)})" for name, value in values.items() if not is_num(value)]


#: cause -> (the value to change, a value AgentJet accepts)
LORA_FIXES = {"lora-rank-not-a-number": ("lora_rank", 8), "lora-load-format": ("lora_load_format", "safetensors"),
              "lora-layered-summon": ("layered_summon", True), "lora-lr-missing": ("lr", 1e-4),
              "lora-lr-too-low": ("lr", 1e-4)}


@rule("lora-rules", "error", "LoRA is on without safetensors, layered_summon or a large enough lr.", """
    With lora_rank > 0 AgentJetJob requires lora_load_format='safetensors', layered_summon=True and an lr
    above 1e-5, checked in that order (each a ValueError); a lora_rank that cannot be compared with 0 raises
    TypeError. One finding per requirement that is not met (AgentJet stops at the first).""",
      claims=tuple(LORA_FIXES), example="""
python
AgentJetJob(lora_rank=8)                                                              # before
AgentJetJob(lora_rank=8, lora_load_format="safetensors", layered_summon=True, lr=1e-4) # after""")
def lora_rules(ctx: LintContext, run: Run) -> Iterator[Report]:
    for cause in run.causes_for(*LORA_FIXES):
        name, good = LORA_FIXES[cause.id]
        fix = ctx.where_to_set(run, KEYS[name], good)
        if name == "lr":
            fix = "use an lr above 1e-5 for LoRA, e.g. 1e-4: " + fix
        elif name == "lora_rank":
            fix = "give lora_rank as an int (0 turns LoRA off), e.g. " + fix
        yield Report(KEYS[name], cause.message, ctx.locate(run, name, "lora_rank"),
                     {**cause_values(cause), **cause.values}, fix)


BATCH_INPUTS = ("train_batch_size", "num_repeat", "n_gpus_per_node", "nnodes")


@rule("batch-not-divisible-by-gpus", "error", "train_batch_size x num_repeat is not a multiple of the GPU count.", """
    The trainer refuses to start unless train_batch_size x num_repeat is a multiple of n_gpus_per_node x nnodes
    ('real_train_batch_size ... must be divisible by minimal possible batch size').""", example="""
python
AgentJetJob(batch_size=9, num_repeat=4, n_gpu=8)    # before: 36 % 8 != 0
AgentJetJob(batch_size=10, num_repeat=4, n_gpu=8)   # after: 40 % 8 == 0""")
def batch_not_divisible_by_gpus(ctx: LintContext, run: Run) -> Iterator[Report]:
    v = ctx.needs("batch-not-divisible-by-gpus", run, *BATCH_INPUTS)
    if v is None:
        return
    tbs, n, gpus, nodes = (v[k] for k in BATCH_INPUTS)
    world = gpus * nodes
    if (tbs * n) % world == 0:
        return
    better = next_batch(tbs, n, world)
    yield Report(KEYS["train_batch_size"],
                 f"train_batch_size x num_repeat = {tbs} x {n} = {tbs * n} is not a multiple of n_gpus_per_node x "
                 f"nnodes = {gpus} x {nodes} = {world}: the trainer refuses to start ('real_train_batch_size ... must "
                 "be divisible by minimal possible batch size')", ctx.locate(run, *BATCH_INPUTS), dict(v),
                 f"choose train_batch_size so that train_batch_size x {n} is a multiple of {world}, e.g. {better} "
                 f"({ctx.where_to_set(run, KEYS['train_batch_size'], better)})")


@rule("samples-below-world-size", "warning", "A step yields fewer samples than there are GPUs.", """
    When train_batch_size x num_repeat < n_gpus_per_node x nnodes, a step collects fewer samples than GPUs.
    Upstream drops len(samples) % world_size samples every step so that each GPU gets the same number, so
    training silently gets none. (Counts one sample per episode; multi-turn episodes whose turns are not
    merged can yield more.)""", example="""
python
AgentJetJob(batch_size=2, num_repeat=4, n_gpu=8, nnodes=2)   # before: 8 samples, 16 GPUs
AgentJetJob(batch_size=4, num_repeat=4, n_gpu=8, nnodes=2)   # after: 16 samples""")
def samples_below_world_size(ctx: LintContext, run: Run) -> Iterator[Report]:
    v = ctx.needs("samples-below-world-size", run, *BATCH_INPUTS)
    if v is None:
        return
    tbs, n, gpus, nodes = (v[k] for k in BATCH_INPUTS)
    samples, world = tbs * n, gpus * nodes
    if samples >= world:
        return
    need = next_batch(max(tbs, -(-world // n)), n, world)
    yield Report(KEYS["train_batch_size"],
                 f"train_batch_size x num_repeat = {tbs} x {n} = {samples} samples per step, fewer than "
                 f"n_gpus_per_node x nnodes = {gpus} x {nodes} = {world} GPUs: upstream drops len(samples) % "
                 f"world_size = {samples} % {world} = {samples % world} samples every step, so training silently "
                 "gets none", ctx.locate(run, *BATCH_INPUTS), {**v, "samples_per_step": samples, "world_size": world},
                 f"raise train_batch_size to {need} or more ({ctx.where_to_set(run, KEYS['train_batch_size'], need)}), "
                 f"so that a step yields at least {world} samples and a multiple of {world}")


def next_batch(tbs: int, n: int, world: int) -> int:
    """The smallest batch >= tbs with batch x n a multiple of world (computed, not searched)."""
    step = world // math.gcd(n, world)
    return -(-tbs // step) * step
