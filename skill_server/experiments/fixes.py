"""Fixes computed from an error line's own numbers (and the run's config, when known).

Most signatures carry one fixed hint (``signatures.SIGNATURES``). A few failures say in their line exactly
how far off the configuration is; for those, :func:`hint_for` works the numbers out: vLLM's "max seq len
(N) is larger than the maximum number of tokens that can be stored in KV cache (M)" tells which
``max_model_len`` fits, and the run's YAML (``runconfig``'s ``lengths``) which length keys must move with
it so that AgentJetJob's own checks still hold (prompt + response <= max_model_len, one turn <= response).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
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
}
_KV_OLD = re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV "
                     r"cache \((\d+)\)")
_KV_NEW = re.compile(r"max seq len \((\d+)\).*estimated maximum model length is (\d+)")
ROUND_TO = 1024  # a max_model_len suggestion is rounded down to a multiple of this (when the cache holds more)


def hint_for(signature: str, line: str, config: Mapping[str, Any] | None = None) -> str:
    """The hint for one hit: computed from ``line`` (and ``config``'s ``lengths``) where a fix can be, else the
    signature's fixed hint."""
    compute = _COMPUTED.get(signature)
    computed = compute(line, (config or {}).get("lengths") or {}) if compute is not None else None
    return computed or SIGNATURES_BY_NAME[signature].hint


def kv_cache_fix(line: str, lengths: Mapping[str, Any]) -> str | None:
    """vLLM's KV cache holds ``m`` tokens and one sequence may need ``n``: the ``max_model_len`` that fits, the
    length keys that must follow it, and the memory alternatives. None when the line has no numbers."""
    found = _KV_OLD.search(line) or _KV_NEW.search(line)
    if found is None:
        return None
    n, m = int(found.group(1)), int(found.group(2))
    if m <= 0 or m >= n:
        return None
    fit = m // ROUND_TO * ROUND_TO if m >= 2 * ROUND_TO else m
    bound = f" (at most {m})" if fit < m else ""
    parts = [f"vLLM's KV cache holds {m} tokens, but one sequence of max seq len {n} needs {n / m:.2f}x that. "
             f"Either lower ajet.rollout.max_model_len to {fit}{bound}" + _lengths_within(fit, lengths)]
    memory = "or give vLLM more memory: raise ajet.rollout.gpu_memory_utilization"
    utilisation = _number(lengths.get("gpu_memory_utilization"))
    if utilisation is not None:
        memory += f" (now {utilisation:g}; every 0.01 adds 1% of each GPU's memory to the cache, which must grow " \
                  f"x{n / m:.2f}; how far depends on the GPU and the model, so go up in small steps, to about 0.95 " \
                  "at most)"
    tp = _number(lengths.get("tensor_model_parallel_size"))
    memory += (f", or raise ajet.rollout.tensor_model_parallel_size (now {tp:g})" if tp is not None else
               ", or raise ajet.rollout.tensor_model_parallel_size") + " to spread the weights and the cache over " \
        "more GPUs"
    parts.append(memory)
    return "; ".join(parts) + "."


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


_COMPUTED: dict[str, Callable[[str, Mapping[str, Any]], str | None]] = {"vllm_kv_cache_too_small": kv_cache_fix}
