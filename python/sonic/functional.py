"""One-off calls: sonic.sample(logits, temperature=..., ...) builds a temporary Sampler, admits one
request per row, samples once and returns the result. For steady decoding keep a Sampler: it holds
the request table, the history and the step counters between calls."""

from __future__ import annotations

import numbers
from typing import Any, Optional

from . import _arrays as A
from .sampler import Sampler, SampleResult, max_final_entries

_PER_ROW_SCALARS = (
    "temperature",
    "top_k",
    "top_p",
    "top_p_joint",
    "min_p",
    "repetition_penalty",
    "repetition_output_only",
    "frequency_penalty",
    "presence_penalty",
    "penalties_include_prompt",
    "seed",
    "step",
)


def _per_row(name: str, value: Any, rows: int) -> list:
    """A scalar for every row, or one value per row (a sequence or a 1-D array of length rows)."""
    if isinstance(value, (numbers.Number, bool)) or (
        hasattr(value, "ndim") and getattr(value, "ndim") == 0
    ):
        return [value] * rows
    values = A.to_list(value, name)
    if len(values) != rows:
        raise ValueError(
            f"sonic: argument '{name}' must be a scalar or hold one value per row ({rows}), "
            f"got {len(values)}"
        )
    return values


def _is_nested(value: Any) -> bool:
    if isinstance(value, (list, tuple)) and value:
        first = value[0]
        return first is None or isinstance(first, (list, tuple, dict)) or A.is_array(first)
    return False


def _per_row_list(name: str, value: Any, rows: int) -> list:
    """One token list (or bias dict) for every row, or one per row (a sequence of sequences)."""
    if value is None:
        return [None] * rows
    if isinstance(value, dict):
        return [value] * rows
    if _is_nested(value):
        if len(value) != rows:
            raise ValueError(
                f"sonic: argument '{name}' holds {len(value)} per-row lists, expected {rows}"
            )
        return list(value)
    return [value] * rows


def _one_off_rows(logits: Any, vocab_size: Optional[int], backend: Optional[str]) -> tuple:
    """The one-off calls' view of ``logits`` ([V] or [R, V]): (logits as [R, cols], whether the row
    dimension was added, R, V, backend). V defaults to cols; backend to 'cuda' for CUDA arrays."""
    A.require_array(logits, "logits")
    shp = A.shape(logits)
    squeeze = len(shp) == 1
    if squeeze:
        logits = logits[None]
        shp = (1,) + shp
    if len(shp) != 2:
        raise ValueError(f"sonic: argument 'logits' must be [V] or [R, V], got shape {shp}")
    R, cols = shp
    if R == 0:
        raise ValueError("sonic: argument 'logits' has no rows")
    V = cols if vocab_size is None else A._int("vocab_size", vocab_size, 1, cols)
    if backend is None:
        backend = "cuda" if A.on_cuda(logits) else "cpu"
    return logits, squeeze, R, V, backend


def sample(
    logits: Any,
    *,
    temperature: Any = 1.0,
    top_k: Any = 0,
    top_p: Any = 1.0,
    top_p_joint: Any = False,
    min_p: Any = 0.0,
    repetition_penalty: Any = 1.0,
    repetition_output_only: Any = False,
    frequency_penalty: Any = 0.0,
    presence_penalty: Any = 0.0,
    penalties_include_prompt: Any = False,
    logit_bias: Any = None,
    banned_tokens: Any = None,
    allowed_tokens: Any = None,
    seed: Any = 0,
    step: Any = 0,
    prompt: Any = None,
    output: Any = None,
    bitmask: Any = None,
    vocab_size: Optional[int] = None,
    logprobs: Optional[str] = None,
    top_logprobs: int = 0,
    final_distribution: Any = False,
    backend: Optional[str] = None,
    stream: Any = None,
) -> SampleResult:
    """Samples one token per row of ``logits`` ([V] or [R, V]) with the given parameters.

    Every scalar parameter is one value for all rows or a sequence with one value per row.
    ``logit_bias`` (dict {token: bias}), ``banned_tokens``, ``allowed_tokens``, ``prompt`` and
    ``output`` (the history, for the penalties) are one list for all rows or a list of per-row
    lists. ``seed`` and ``step`` select the randomness (SPEC.md section 4). ``top_logprobs`` is N
    of the top-N output (0: none); ``final_distribution`` is True (capacity V; on CUDA at most
    the exact sampler's shared memory, sonic.max_final_entries('cuda')) or a capacity.
    ``backend`` defaults to 'cuda' for CUDA arrays and 'cpu' otherwise. For [V] logits every field
    of the result drops the row dimension.
    """
    logits, squeeze, R, V, backend = _one_off_rows(logits, vocab_size, backend)

    scalars = {
        name: _per_row(name, value, R)
        for name, value in (
            ("temperature", temperature),
            ("top_k", top_k),
            ("top_p", top_p),
            ("top_p_joint", top_p_joint),
            ("min_p", min_p),
            ("repetition_penalty", repetition_penalty),
            ("repetition_output_only", repetition_output_only),
            ("frequency_penalty", frequency_penalty),
            ("presence_penalty", presence_penalty),
            ("penalties_include_prompt", penalties_include_prompt),
            ("seed", seed),
            ("step", step),
        )
    }
    lists = {
        name: _per_row_list(name, value, R)
        for name, value in (
            ("logit_bias", logit_bias),
            ("banned_tokens", banned_tokens),
            ("allowed_tokens", allowed_tokens),
            ("prompt", prompt),
            ("output", output),
        )
    }
    prompts = [A.host_i32(p, "prompt") for p in lists["prompt"]]
    outputs = [A.host_i32(o, "output") for o in lists["output"]]
    history = max(
        (len(p) if p is not None else 0) + (len(o) if o is not None else 0)
        for p, o in zip(prompts, outputs)
    )
    token_list = max(
        sum(len(x) if x is not None else 0 for x in row)
        for row in zip(lists["logit_bias"], lists["banned_tokens"], lists["allowed_tokens"])
    )
    n_top = A._int("top_logprobs", top_logprobs, 0, 20)
    device = A.device(logits)[1] if backend == "cuda" else 0
    if final_distribution is True:
        # The CUDA backend holds a row's final distribution in shared memory (the CPU's limit is
        # 2**31 - 1): a larger kept set gets its count. A query of microseconds, beside the
        # sampler's allocations: not cached.
        n_final = min(V, max_final_entries(backend, device))
    elif final_distribution is False or final_distribution is None:
        n_final = 0
    else:
        n_final = A._int("final_distribution", final_distribution, 1)

    sampler = Sampler(
        V,
        max_slots=R,
        max_rows=R,
        max_history=max(history, 1),
        max_token_list=token_list,
        max_top_logprobs=n_top,
        max_final_entries=n_final,
        backend=backend,
        device=device,
    )
    for r in range(R):
        params = {name: scalars[name][r] for name in _PER_ROW_SCALARS if name != "step"}
        sampler.admit(
            r,
            initial_step=scalars["step"][r],
            logit_bias=lists["logit_bias"][r],
            banned_tokens=lists["banned_tokens"][r],
            allowed_tokens=lists["allowed_tokens"][r],
            top_logprobs=n_top,
            prompt=prompts[r],
            stream=stream,
            **params,
        )
        if outputs[r] is not None and len(outputs[r]):
            sampler.append_output(r, outputs[r], stream=stream)
    result = sampler.sample(
        logits,
        bitmask=bitmask[None] if (squeeze and bitmask is not None and A.is_array(bitmask)
                                  and len(A.shape(bitmask)) == 1) else bitmask,
        logprobs=logprobs,
        top_logprobs=n_top > 0,
        final_distribution=n_final > 0,
        advance_step=False,
        append_to_history=False,
        stream=stream,
    )
    if squeeze:
        result = SampleResult(*(None if f is None else f[0] for f in result))
    return result


def top_k(
    logits: Any,
    k: int,
    *,
    vocab_size: Optional[int] = None,
    values: bool = True,
    backend: Optional[str] = None,
    stream: Any = None,
) -> tuple:
    """Top-k of ``logits`` ([V] or [R, V]) by value, ties to the lower id, NaN read as -inf:
    ``(values, ids)`` of shape [R, k] (or [k]), as ``torch.topk`` returns them. Ids at or above
    ``vocab_size`` (default: every column) are padding and never returned."""
    logits, squeeze, R, V, backend = _one_off_rows(logits, vocab_size, backend)
    s = Sampler(V, max_slots=1, max_rows=R, max_history=1, backend=backend)
    vals, ids = s.top_k(logits, k, values=values, stream=stream)
    if squeeze:
        ids = ids[0]
        vals = vals[0] if vals is not None else None
    return vals, ids
