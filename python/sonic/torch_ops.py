"""sonic's calls as torch.library custom ops, so that they trace under ``torch.compile`` and run
inside ``torch.cuda.graph`` capture.

    import sonic, sonic.torch_ops as ops
    s = sonic.Sampler(vocab_size=V, max_slots=64, backend="cuda")
    h = ops.register(s)                       # a handle the ops can carry through a graph
    tokens, status, logprob = torch.ops.sonic.sample(ops.state(h), logits, h, slots, None, None,
                                                     "", True, True)
    values, ids = torch.ops.sonic.top_k(ops.state(h), logits, h, 50)

A sampler is stateful (request table, history, step counters) and torch only orders and keeps ops
that visibly write something, so every op takes the sampler's ``state`` tensor (one element, on
the sampler's device) as a mutated argument: two steps are never merged or reordered, and a call
whose outputs are unused is not dropped. The ops run on torch's current stream; outputs are new
tensors on the logits' device (inside graph capture they come from the graph's pool).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch

from .sampler import Sampler

_samplers: Dict[int, Sampler] = {}
_states: Dict[int, torch.Tensor] = {}


def register(sampler: Sampler, device: Optional[torch.device] = None) -> int:
    """Makes ``sampler`` reachable from the ops; returns its handle. ``device``: where its state
    tensor lives (the sampler's CUDA device for 'cuda' samplers, the CPU otherwise)."""
    if not isinstance(sampler, Sampler):
        raise TypeError(f"sonic: argument 'sampler' must be a sonic.Sampler, got {type(sampler).__name__}")
    handle = id(sampler)
    if device is None:
        device = torch.device("cuda", sampler.config["device"]) if sampler.backend == "cuda" else torch.device("cpu")
    _samplers[handle] = sampler
    _states[handle] = torch.zeros(1, dtype=torch.int32, device=device)
    return handle


def unregister(handle: int) -> None:
    _samplers.pop(handle, None)
    _states.pop(handle, None)


def state(handle: int) -> torch.Tensor:
    """The tensor that stands for the sampler's device state in a graph."""
    if handle not in _states:
        raise ValueError(f"sonic: argument 'handle' = {handle} is not a registered sampler")
    return _states[handle]


def _sampler(handle: int) -> Sampler:
    if handle not in _samplers:
        raise ValueError(f"sonic: argument 'handle' = {handle} is not a registered sampler")
    return _samplers[handle]


def _empty_f32(like: torch.Tensor, n: int) -> torch.Tensor:
    return torch.empty((n,), dtype=torch.float32, device=like.device)


@torch.library.custom_op("sonic::sample", mutates_args=("state",))
def sample(
    state: torch.Tensor,
    logits: torch.Tensor,
    handle: int,
    slots: Optional[torch.Tensor],
    bitmask: Optional[torch.Tensor],
    bitmask_index: Optional[torch.Tensor],
    logprobs: str,
    advance_step: bool,
    append_to_history: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sampler.sample: (tokens [R] int32, status [R] int32, logprob [R] float32, or [0] when
    ``logprobs`` is '')."""
    out = _sampler(handle).sample(
        logits,
        slots,
        bitmask,
        bitmask_index,
        logprobs=logprobs or None,
        advance_step=advance_step,
        append_to_history=append_to_history,
    )
    lp = out.logprob if out.logprob is not None else _empty_f32(logits, 0)
    return out.tokens, out.status, lp


@sample.register_fake
def _sample_fake(state, logits, handle, slots, bitmask, bitmask_index, logprobs, advance_step, append_to_history):
    R = logits.shape[0]
    tokens = logits.new_empty((R,), dtype=torch.int32)
    status = logits.new_empty((R,), dtype=torch.int32)
    lp = logits.new_empty((R if logprobs else 0,), dtype=torch.float32)
    return tokens, status, lp


@torch.library.custom_op("sonic::top_k", mutates_args=("state",))
def top_k(state: torch.Tensor, logits: torch.Tensor, handle: int, k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sampler.top_k: (values [R, k] float32, ids [R, k] int32). ``state`` orders it after the
    sampler's other calls (they share its workspace)."""
    vals, ids = _sampler(handle).top_k(logits, k)
    return vals, ids


@top_k.register_fake
def _top_k_fake(state, logits, handle, k):
    R = logits.shape[0]
    return logits.new_empty((R, k), dtype=torch.float32), logits.new_empty((R, k), dtype=torch.int32)


@torch.library.custom_op("sonic::verify", mutates_args=("state",))
def verify(
    state: torch.Tensor,
    logits: torch.Tensor,
    handle: int,
    cu_rows: torch.Tensor,
    draft_tokens: torch.Tensor,
    slots: Optional[torch.Tensor],
    rules: Optional[torch.Tensor],
    draft_probs: Optional[torch.Tensor],
    advance_step: bool,
    append_to_history: bool,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sampler.verify with dense or no draft probabilities: (tokens [B, max_drafts + 1] int32,
    num_accepted [B] int32, status [rows] int32, one per target row)."""
    out = _sampler(handle).verify(
        logits,
        cu_rows,
        draft_tokens,
        slots=slots,
        rules=rules,
        draft_probs=draft_probs,
        advance_step=advance_step,
        append_to_history=append_to_history,
    )
    return out.tokens, out.num_accepted, out.status


@verify.register_fake
def _verify_fake(state, logits, handle, cu_rows, draft_tokens, slots, rules, draft_probs, advance_step,
                 append_to_history):
    B = cu_rows.shape[0] - 1
    width = _sampler(handle).config["max_drafts"] + 1
    return (
        logits.new_empty((B, width), dtype=torch.int32),
        logits.new_empty((B,), dtype=torch.int32),
        logits.new_empty((logits.shape[0],), dtype=torch.int32),
    )


__all__: List[str] = ["register", "unregister", "state", "sample", "top_k", "verify"]
