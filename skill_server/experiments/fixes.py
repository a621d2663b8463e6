"""Fixes computed from an error line's own numbers (and the run's config, when known).

Most signatures carry one fixed hint (``signatures.SIGNATURES``). A few failures say in their line exactly
how far off the configuration is; for those, :func:`hint_for` works the numbers out: vLLM's "max seq len
(N) is larger than the maximum number of tokens that can be stored in KV cache (M)" tells which
``max_model_len`` fits, and the run's YAML (``runconfig``'s ``lengths``) which length keys must move with
it so that AgentJetJob's own checks still hold (prompt + response <= max_model_len, one turn <= response).
It also tells how much more cache one sequence needs: in GiB outright (vLLM v1's line), or as the missing
tokens times the model's KV bytes per token (its ``config.json``: layers x KV heads / TP x head size x
dtype bytes x 2), which as a share of the GPU's memory (vLLM's profile line, or nvidia-smi) is what
``gpu_memory_utilization`` must rise by. Each fix says what it costs the experiment.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skill_server.experiments.signatures import SIGNATURES_BY_NAME

#: The config keys a computed fix reads, by their short names (runconfig stores them under ``lengths``).
LENGTH_KEYS = {
    "max_model_len": "ajet.rollout.max_model_len",
    "max_prompt_length": "ajet.data.max_prompt_length",
    "max_response_length": "ajet.data.max_response_length",
    "max_response_length_in_one_turn": "ajet.rollout.max_response_length_in_one_turn",
    "gpu_memory_utilization": "ajet.rollout.gpu_memory_utilization",
    "tensor_model_parallel_size": "ajet.rollout.tensor_model_parallel_size",
    "n_gpus_per_node": "ajet.trainer_common.n_gpus_per_node",
}
_KV_OLD = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
                     r"cache \((\d+)\)")
_KV_NEW = re.compile(r"max seq len \((\d+)\).*estimated maximum model length is (\d+)")
_KV_NEW_GIB = re.compile(r"\((\d+(?:\.\d+)?) GiB KV cache is needed, which is larger than the available KV cache "
                         r"memory \((\d+(?:\.\d+)?) GiB\)")
#: vLLM's memory profile (v0 at INFO, v1 at DEBUG): the GPU's memory and the utilization in force.
_PROFILE = re.compile(r"total_gpu_memory \((\d+(?:\.\d+)?) ?GiB\) x gpu_memory_utilization \((\d+(?:\.\d+)?)\)")
_KV_GIB = re.compile(r"(?:the rest of the memory reserved for KV Cache is|Available KV cache memory:) "
                     r"(\d+(?:\.\d+)?) ?GiB")
_KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
ROUND_TO = 1024  # a max_model_len suggestion is rounded down to a multiple of this (when the cache holds more)
GIB = 1024 ** 3
#: Bytes per element of the dtypes a model's config.json names.
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "float8_e4m3fn": 1}
#: Beyond this a utilization leaves the trainer too little of the GPUs it shares with vLLM.
UTILIZATION_CEILING = 0.95


def hint_for(signature: str, line: str, config: Mapping[str, Any] | None = None,
             lines: Sequence[str] = ()) -> str:
    """The hint for one hit: computed from ``line`` (with ``config``: the run's lengths, its model's KV shape,
    its GPU memory; and ``lines``: other log lines read with it) where a fix can be, else the fixed hint."""
    compute = _COMPUTED.get(signature)
    computed = compute(line, config or {}, lines) if compute is not None else None
    return computed or SIGNATURES_BY_NAME[signature].hint


@dataclass
class KvNeed:
    """What vLLM's error and log say: a sequence of ``seq_len`` tokens against a cache that fits ``fits``."""

    seq_len: int
    fits: int
    needed_gib: float | None = None  # vLLM v1 says both memories outright
    available_gib: float | None = None


def _kv_need(line: str) -> KvNeed | None:
    found = _KV_OLD.search(line) or _KV_NEW.search(line)
    if found is None:
        return None
    need = KvNeed(int(found.group(1)), int(found.group(2)))
    gib = _KV_NEW_GIB.search(line)
    if gib is not None:
        need.needed_gib, need.available_gib = float(gib.group(1)), float(gib.group(2))
    return need


def model_kv(config_json: Any) -> dict[str, Any] | None:
    """A model's KV shape from its Hugging Face ``config.json``: layers, KV heads, head size, dtype bytes (None
    when one is missing). A multimodal config keeps the language model's under ``text_config``."""
    if not isinstance(config_json, dict):
        return None
    inner = config_json.get("text_config")
    text: dict[str, Any] = inner if isinstance(inner, dict) else config_json
    layers, heads = text.get("num_hidden_layers"), text.get("num_attention_heads")
    kv_heads = text.get("num_key_value_heads", heads)
    hidden = text.get("hidden_size")
    head_dim = text.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                        and _count(hidden) and _count(heads) else None)
    dtype = str(text.get("torch_dtype") or config_json.get("torch_dtype") or "").removeprefix("torch.")
    if not all(_count(v) for v in (layers, kv_heads, head_dim)) or dtype not in DTYPE_BYTES:
        return None
    return {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim, "dtype": dtype,
            "dtype_bytes": DTYPE_BYTES[dtype]}


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def log_facts(lines: Sequence[str]) -> dict[str, float]:
    """The memory figures vLLM logged (the last of each wins: a restart logs them again)."""
    facts: dict[str, float] = {}
    for text in lines:
        if (m := _PROFILE.search(text)) is not None:
            facts["total_gib"], facts["utilization"] = float(m.group(1)), float(m.group(2))
        if (m := _KV_GIB.search(text)) is not None:
            facts["kv_gib"] = float(m.group(1))
        if (m := _KV_TOKENS.search(text)) is not None:
            facts["kv_tokens"] = float(m.group(1).replace(",", ""))
    return facts


def kv_cache_fix(line: str, config: Mapping[str, Any], lines: Sequence[str] = ()) -> str | None:
    """vLLM's KV cache holds ``m`` tokens and one sequence may need ``n``: the gpu_memory_utilization that makes
    room (a lower bound, with its arithmetic and inputs), the ``max_model_len`` that fits instead (with the
    length keys that must follow it), and what each costs the experiment. None when the line has no numbers."""
    need = _kv_need(line)
    if need is None or need.fits <= 0 or need.fits >= need.seq_len:
        return None
    n, m = need.seq_len, need.fits
    lengths = config.get("lengths") or {}
    fit = m // ROUND_TO * ROUND_TO if m >= 2 * ROUND_TO else m
    bound = f" (at most {m})" if fit < m else ""
    head = f"vLLM's KV cache fits {m} tokens of one sequence, but max seq len is {n} ({n / m:.2f}x)."
    memory = "Fix 1: " + _utilization_fix(need, config, lines)
    shorter = (f"Fix 2: lower ajet.rollout.max_model_len to {fit}{bound}" + _lengths_within(fit, lengths)
               + f". Cost: every sequence (prompt + response) is then cut at {fit} tokens, so an experiment about "
               f"{n}-token context no longer tests it")
    return " ".join([head, memory + ".", shorter + "."] + _spread(lengths))


def _spread(lengths: Mapping[str, Any]) -> list[str]:
    """Tensor parallelism as a third way, where the node has GPUs to spread over (not with TP at the GPU count)."""
    tp, gpus = _number(lengths.get("tensor_model_parallel_size")), _number(lengths.get("n_gpus_per_node"))
    if tp is not None and gpus is not None and tp >= gpus:
        return []
    now = f" (now {tp:g}" + (f", of {gpus:g} GPUs per node)" if gpus is not None else ")") if tp is not None else ""
    return ["Or raise ajet.rollout.tensor_model_parallel_size" + now + " to spread the weights and the cache over "
            "more GPUs (fewer vLLM engines, so fewer sequences at once)."]


def _utilization_fix(need: KvNeed, config: Mapping[str, Any], lines: Sequence[str]) -> str:
    """The utilization that gives the cache room for one sequence: the current one plus the missing KV memory as
    a share of the GPU. Each input says where it came from; a missing one is named instead of guessed."""
    lengths = config.get("lengths") or {}
    remembered = config.get("vllm_profile")  # what earlier reads of the log saw (queries keeps it)
    log = {**(remembered if isinstance(remembered, dict) else {}), **log_facts(lines)}
    inputs: list[str] = []
    extra_gib, how, sequence_gib = _missing_memory(need, config, log, inputs)
    utilization = log.get("utilization")
    if utilization is not None:
        inputs.append(f"utilization {utilization:g} from vLLM's memory profile line")
    elif (configured := _number(lengths.get("gpu_memory_utilization"))) is not None:
        utilization = configured
        inputs.append(f"utilization {utilization:g} from the run's YAML")
    total_gib = log.get("total_gib")
    if total_gib is not None:
        inputs.append(f"GPU memory {total_gib:g} GiB from vLLM's memory profile line")
    elif _number(config.get("gpu_total_mib")):
        total_gib = float(config["gpu_total_mib"]) / 1024
        inputs.append(f"GPU memory {total_gib:.1f} GiB from nvidia-smi on {config.get('gpu_host', 'the host')}")
    cost = ("Cost: vLLM keeps that share of each GPU it shares with the trainer, so the actor has less when vLLM "
            "wakes after a weight sync (cumem_allocator out-of-memory): raise it no further than needed")
    missing = [what for what, value in (("the KV bytes per token (the model's config.json)", extra_gib),
                                        ("the current utilization", utilization), ("the GPU's memory", total_gib))
               if value is None]
    if missing or extra_gib is None or total_gib is None or utilization is None:
        said = f"; inputs: {'; '.join(inputs)}" if inputs else ""
        known = f" (the cache must grow by {how})" if extra_gib is not None else ""
        return (f"raise ajet.rollout.gpu_memory_utilization{known}; how far is unknown here, for want of "
                f"{', '.join(missing)}; vLLM's memory profile line in the log gives the utilization, the GPU's "
                f"memory and the cache's size, and gpu_status the GPU's memory{said}. {cost}")
    share = extra_gib / total_gib
    needed = math.ceil((utilization + share) * 100 - 1e-9) / 100
    arithmetic = (f"{utilization:g} + {how} / {total_gib:.4g} GiB = {utilization + share:.4f}, so at least "
                  f"{needed:.2f}")
    said = f" (a lower bound: vLLM rounds the cache to whole blocks; inputs: {'; '.join(inputs)})"
    if needed > 1:
        return (f"no gpu_memory_utilization makes room: {arithmetic}, more than the whole GPU{said}. Raise "
                "tensor_model_parallel_size, or use GPUs with more memory")
    over = (f"; above {UTILIZATION_CEILING:g} the trainer sharing these GPUs is likely short of memory"
            if needed > UTILIZATION_CEILING else "")
    return (f"raise ajet.rollout.gpu_memory_utilization to at least {needed:.2f} (now {utilization:g}). Arithmetic: "
            f"{arithmetic}{said}{over}{_more_at_once(need.seq_len, sequence_gib, total_gib, utilization + share)}. "
            f"{cost}")


def _more_at_once(seq_len: int, sequence_gib: float | None, total_gib: float, one: float) -> str:
    """What each further whole sequence at once adds to the utilization: the bound above fits one, and rollouts
    run many at once (vLLM queues the rest)."""
    if not sequence_gib:
        return ""
    step = sequence_gib / total_gib
    examples = ", ".join(f"{k} at once {math.ceil((one + (k - 1) * step) * 100 - 1e-9) / 100:.2f}" for k in (2, 4)
                         if one + (k - 1) * step <= 1)
    return (f". That fits one {seq_len}-token sequence at a time; each more at once needs {sequence_gib:.2f} GiB "
            f"more ({step:.3f} of the GPU" + (f"; {examples}" if examples else "") + ")")


def _missing_memory(need: KvNeed, config: Mapping[str, Any], log: dict[str, float], inputs: list[str]
                    ) -> tuple[float | None, str, float | None]:
    """(GiB the cache lacks per GPU, how that was worked out, GiB one whole sequence takes), from vLLM's own
    figures or the model's shape."""
    n, m = need.seq_len, need.fits
    if need.needed_gib is not None and need.available_gib is not None:
        inputs.append(f"{need.needed_gib:g} GiB needed and {need.available_gib:g} GiB available from the error line")
        return (need.needed_gib - need.available_gib, f"({need.needed_gib:g} - {need.available_gib:g}) GiB",
                need.needed_gib)
    shape = config.get("model_kv")
    tp = _number((config.get("lengths") or {}).get("tensor_model_parallel_size")) or 1
    if isinstance(shape, dict) and shape.get("layers"):
        heads_per_gpu = max(1, int(shape["kv_heads"]) // int(tp))
        per_token = 2 * int(shape["layers"]) * heads_per_gpu * int(shape["head_dim"]) * int(shape["dtype_bytes"])
        inputs.append(f"cache {m} tokens and max seq len {n} from the error line; {shape['layers']} layers x "
                      f"{shape['kv_heads']} KV heads{f' / TP {tp:g}' if tp > 1 else ''} x head size "
                      f"{shape['head_dim']} x {shape['dtype_bytes']} B ({shape['dtype']}) x 2 (K and V) = {per_token} "
                      f"B per token from {shape.get('source', 'the model config.json')}")
        extra = (n - m) * per_token / GIB
        return extra, f"({n} - {m}) tokens x {per_token} B = {extra:.3f} GiB", n * per_token / GIB
    if log.get("kv_gib"):  # the cache the profile reserved is the one the error measured (m tokens)
        tokens = log.get("kv_tokens") or m
        logged = log["kv_gib"] * GIB / tokens
        inputs.append(f"{log['kv_gib']:g} GiB of KV cache for {tokens:g} tokens from vLLM's log")
        extra = (n - m) * logged / GIB
        return extra, f"({n} - {m}) tokens x {logged:.0f} B = {extra:.3f} GiB", n * logged / GIB
    return None, "", None


def _lengths_within(fit: int, lengths: Mapping[str, Any]) -> str:
    """The length keys that keep AgentJetJob's checks true under ``max_model_len = fit``."""
    prompt, response = _number(lengths.get("max_prompt_length")), _number(lengths.get("max_response_length"))
    one_turn = _number(lengths.get("max_response_length_in_one_turn"))
    rule = ("; keep max_prompt_length + max_response_length <= max_model_len and max_response_length_in_one_turn "
            "<= max_response_length (AgentJetJob asserts both, and its four length kwargs go together)")
    if prompt is None or response is None or prompt <= 0 or response <= 0:
        return rule
    prompt, response = int(prompt), int(response)
    if prompt + response <= fit:
        return f" (max_prompt_length {prompt} + max_response_length {response} already fit)"
    new_prompt = prompt if prompt < fit // 2 else fit * prompt // (prompt + response)
    new_response = fit - new_prompt
    text = (f", with max_prompt_length {new_prompt} and max_response_length {new_response} (now {prompt} + "
            f"{response}, over {fit})")
    if one_turn is not None and one_turn > new_response:
        text += f" and max_response_length_in_one_turn {new_response} (now {int(one_turn)})"
    return text + ", so that AgentJetJob's length checks still hold"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


_COMPUTED: dict[str, Callable[[str, Mapping[str, Any], Sequence[str]], str | None]] = {
    "vllm_kv_cache_too_small": kv_cache_fix}
