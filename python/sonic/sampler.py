"""The Sampler class: the slot-based request table and the sample() / verify() calls of the C++
library (include/sonic/sampler.hpp), over arrays of any DLPack framework."""

from __future__ import annotations

import functools
import numbers
from typing import Any, NamedTuple, Optional

from . import _arrays as A
from . import _sonic

BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}
_BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}
LOGPROB_MODES = {"raw": 0, "processed": 1, "final": 2}
VERIFY_RULES = {"dense": 0, "sparse": 1, "one_hot": 2, "strict": 3}
_RULE_ALIASES = {
    "dense_draft_probs": "dense",
    "sparse_draft_probs": "sparse",
    "onehot": "one_hot",
    "one-hot": "one_hot",
}

# Status bits (sonic::StatusBits).
STATUS_OK = 0
STATUS_NAN = 1
STATUS_NO_VALID_TOKEN = 2
STATUS_INVALID_INPUT = 4
STATUS_HISTORY_FULL = 8


class SampleResult(NamedTuple):
    """Outputs of Sampler.sample, in the logits' framework and device. Fields not asked for are
    None. Shapes: tokens, status, logprob, rank, final_count [R]; top_ids, top_logprobs
    [R, max_top_logprobs]; final_ids, final_probs [R, max_final_entries]."""

    tokens: Any
    status: Any
    logprob: Any = None
    rank: Any = None
    top_ids: Any = None
    top_logprobs: Any = None
    final_ids: Any = None
    final_probs: Any = None
    final_count: Any = None


class VerifyResult(NamedTuple):
    """Outputs of Sampler.verify. tokens [B, max_drafts + 1] (accepted drafts, one correction or
    bonus token, then -1); num_accepted [B]; status [rows] (one per target row); logprob, rank
    [B, max_drafts + 1]; top_ids, top_logprobs [B, max_drafts + 1, max_top_logprobs]."""

    tokens: Any
    num_accepted: Any
    status: Any
    logprob: Any = None
    rank: Any = None
    top_ids: Any = None
    top_logprobs: Any = None


def _on_call_stream(method):
    """Runs a call (logits first, ``stream`` by keyword) with its stream current in the logits'
    framework (A.on_stream), so that what it allocates is made and filled on that stream."""

    @functools.wraps(method)
    def call(self, logits, *args, stream: Any = None, **kw):
        with A.on_stream(stream, logits):
            return method(self, logits, *args, stream=stream, **kw)

    return call


def _logits_rows(logits: Any) -> tuple:
    """The allocator for outputs beside ``logits`` and its row count; ``logits`` must be 2-D."""
    A.require_array(logits, "logits")
    shp = A.shape(logits)
    if len(shp) != 2:
        raise ValueError(f"sonic: argument 'logits' must be 2-D [rows, vocab], got shape {shp}")
    return A.Allocator(logits), shp[0]


def _mode(logprobs: Any, top: bool) -> tuple:
    """(mode int, want logprob/rank) from the 'logprobs' argument."""
    if logprobs is None or logprobs is False:
        return 0, False
    if logprobs is True:
        return 0, True
    if isinstance(logprobs, str) and logprobs in LOGPROB_MODES:
        return LOGPROB_MODES[logprobs], True
    raise ValueError(
        f"sonic: argument 'logprobs' must be None, 'raw', 'processed' or 'final', got {logprobs!r}"
    )


def _logit_bias(bias: Any) -> tuple:
    """(ids, values) host arrays from a dict {token: bias} or a sequence of (token, bias)."""
    if bias is None:
        return None, None
    items = list(bias.items()) if isinstance(bias, dict) else list(bias)
    ids, vals = [], []
    for i, item in enumerate(items):
        try:
            t, b = item
        except (TypeError, ValueError):
            raise TypeError(
                f"sonic: argument 'logit_bias[{i}]' must be a (token, bias) pair, got {item!r}"
            ) from None
        ids.append(A._int(f"logit_bias[{i}] token", t))
        vals.append(A._float(f"logit_bias[{i}] bias", b))
    return A.host_i32(ids, "logit_bias"), A.host_f32(vals, "logit_bias")


def _backend(backend: Any) -> int:
    """The backend int of a name: 'auto', 'cpu' or 'cuda'."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(
            f"sonic: argument 'backend' must be 'auto', 'cpu' or 'cuda', got {backend!r}"
        )
    return BACKENDS[backend]


def max_final_entries(backend: str = "cuda", device: int = 0) -> int:
    """The largest ``max_final_entries`` a Sampler of ``backend`` ('auto', 'cpu' or 'cuda') on
    ``device`` accepts: 2**31 - 1 for 'cpu'; for 'cuda' the entries of a row's final distribution
    that the exact sampler's shared memory holds (about 28000 on an H100 or H200). Raises as
    Sampler does: RuntimeError where the backend is not usable here, ValueError for a device that
    is not present."""
    b = _backend(backend)
    return int(_sonic.max_final_entries(b, A._int("device", device, -(2**31), 2**31 - 1)))


class Sampler:
    """A sonic sampler: request table plus batched sample() and verify(), and a batched top_k().

    The keyword arguments are the fields of sonic::SamplerConfig. ``backend`` is 'auto' (CUDA when
    a GPU is usable, else CPU), 'cpu' or 'cuda'. Arrays passed to the calls live where the backend
    works: host memory for 'cpu', CUDA memory for 'cuda'.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        max_slots: int,
        max_rows: Optional[int] = None,
        max_drafts: int = 0,
        max_history: int = 32768,
        max_token_list: int = 4096,
        max_top_logprobs: int = 0,
        max_final_entries: int = 0,
        backend: str = "auto",
        device: int = 0,
        cpu_threads: int = 1,
    ):
        backend_id = _backend(backend)
        if max_rows is None:
            max_rows = max_slots
        i32 = (-(2**31), 2**31 - 1)
        args = dict(
            vocab_size=vocab_size,
            max_slots=max_slots,
            max_rows=max_rows,
            max_drafts=max_drafts,
            max_history=max_history,
            max_token_list=max_token_list,
            max_top_logprobs=max_top_logprobs,
            max_final_entries=max_final_entries,
            device=device,
            cpu_threads=cpu_threads,
        )
        checked = {k: A._int(k, v, *i32) for k, v in args.items()}
        self._impl = _sonic.Sampler(backend=backend_id, **checked)
        self._config = dict(self._impl.config)

    # ---- properties -------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        """The backend in use: 'cpu' or 'cuda' (never 'auto')."""
        return _BACKEND_NAMES[self._impl.backend]

    @property
    def config(self) -> dict:
        c = dict(self._config)
        c["backend"] = self.backend
        return c

    @property
    def vocab_size(self) -> int:
        return self._config["vocab_size"]

    def __repr__(self) -> str:
        c = self._config
        return (
            f"sonic.Sampler(vocab_size={c['vocab_size']}, max_slots={c['max_slots']}, "
            f"max_rows={c['max_rows']}, max_drafts={c['max_drafts']}, backend='{self.backend}')"
        )

    def _stream(self, stream: Any, like: Any = None) -> int:
        if stream is None and like is None:
            if self.backend == "cuda":
                try:
                    import torch

                    if torch.cuda.is_available():
                        return int(torch.cuda.current_stream(self._config["device"]).cuda_stream)
                except ImportError:
                    pass
            return 0
        return A.stream_handle(stream, like if like is not None else 0)

    # ---- request table ----------------------------------------------------------------------
    def admit(
        self,
        slot: int,
        *,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        top_p_joint: bool = False,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        repetition_output_only: bool = False,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        penalties_include_prompt: bool = False,
        logit_bias: Any = None,
        banned_tokens: Any = None,
        allowed_tokens: Any = None,
        seed: int = 0,
        initial_step: int = 0,
        top_logprobs: int = 0,
        prompt: Any = None,
        stream: Any = None,
    ) -> None:
        """Admits a request into ``slot`` with its parameters (sonic::RequestParams; SPEC.md gives
        the ranges) and its prompt as history. Re-admitting an occupied slot replaces it.
        ``logit_bias`` is a dict {token: bias} or a sequence of (token, bias) pairs; the token
        lists and the prompt are sequences or host arrays of token ids."""
        bias_ids, bias_vals = _logit_bias(logit_bias)
        for name, v in (
            ("top_p_joint", top_p_joint),
            ("repetition_output_only", repetition_output_only),
            ("penalties_include_prompt", penalties_include_prompt),
        ):
            if not isinstance(v, (bool, numbers.Integral)):
                raise TypeError(f"sonic: argument '{name}' must be a bool, got {v!r}")
        self._impl.admit(
            slot=A._int("slot", slot, -(2**31), 2**31 - 1),
            prompt=A.host_i32(prompt, "prompt"),
            temperature=A._float("temperature", temperature),
            top_k=A._int("top_k", top_k, -(2**31), 2**31 - 1),
            top_p=A._float("top_p", top_p),
            top_p_joint=bool(top_p_joint),
            min_p=A._float("min_p", min_p),
            repetition_penalty=A._float("repetition_penalty", repetition_penalty),
            repetition_output_only=bool(repetition_output_only),
            frequency_penalty=A._float("frequency_penalty", frequency_penalty),
            presence_penalty=A._float("presence_penalty", presence_penalty),
            penalties_include_prompt=bool(penalties_include_prompt),
            logit_bias_ids=bias_ids,
            logit_bias_values=bias_vals,
            banned_tokens=A.host_i32(banned_tokens, "banned_tokens"),
            allowed_tokens=A.host_i32(allowed_tokens, "allowed_tokens"),
            seed=A._int("seed", seed, 0, 2**64 - 1),
            initial_step=A._int("initial_step", initial_step, 0, 2**64 - 1),
            top_logprobs=A._int("top_logprobs", top_logprobs, -(2**31), 2**31 - 1),
            stream=self._stream(stream),
        )

    def retire(self, slot: int, *, stream: Any = None) -> None:
        """Frees ``slot``."""
        self._impl.retire(A._int("slot", slot, -(2**31), 2**31 - 1), self._stream(stream))

    def append_output(self, slot: int, tokens: Any, *, stream: Any = None) -> None:
        """Adds host tokens to the slot's output history (sample/verify do it themselves unless
        append_to_history=False)."""
        self._impl.append_output(
            A._int("slot", slot, -(2**31), 2**31 - 1),
            A.host_i32(tokens, "tokens"),
            self._stream(stream),
        )

    def step(self, slot: int) -> int:
        """The slot's step counter (a synchronising call on CUDA)."""
        return int(self._impl.step(A._int("slot", slot, -(2**31), 2**31 - 1)))

    # ---- calls ------------------------------------------------------------------------------
    def _logprob_outputs(self, alloc: A.Allocator, lead: tuple, want_lp: bool, top_logprobs: bool) -> tuple:
        """(logprob, rank, top_ids, top_logprobs) arrays of shape ``lead`` (top-N: lead + (N,)),
        None where not asked for."""
        logprob = alloc.empty(lead, "float32") if want_lp else None
        rank = alloc.empty(lead, "int32") if want_lp else None
        if not top_logprobs:
            return logprob, rank, None, None
        n = self._config["max_top_logprobs"]
        if n <= 0:
            raise ValueError(
                "sonic: argument 'top_logprobs' needs a sampler created with max_top_logprobs > 0"
            )
        return logprob, rank, alloc.empty(lead + (n,), "int32"), alloc.empty(lead + (n,), "float32")

    @_on_call_stream
    def sample(
        self,
        logits: Any,
        slots: Any = None,
        bitmask: Any = None,
        bitmask_index: Any = None,
        *,
        logprobs: Any = None,
        top_logprobs: bool = False,
        final_distribution: bool = False,
        advance_step: bool = True,
        append_to_history: bool = True,
        stream: Any = None,
    ) -> SampleResult:
        """One decode step: row r of ``logits`` [R, cols >= vocab_size] (float32, bfloat16 or
        float16; rows may be strided) belongs to slot ``slots[r]`` (slot r when None).

        ``bitmask`` [rows, ceil(V/32)] int32 is xgrammar's layout; row r uses bitmask row
        ``bitmask_index[r]`` (-1: none), or row r when bitmask_index is None. ``logprobs`` is None
        or the mode 'raw', 'processed' or 'final' of the sampled token's logprob and rank (and of
        the top-N when ``top_logprobs``). ``final_distribution`` returns the sparse kept set.
        ``stream`` defaults to the caller's current stream (torch/cupy) for device arrays.
        """
        alloc, R = _logits_rows(logits)
        mode, want_lp = _mode(logprobs, bool(top_logprobs))
        c = self._config
        slots = alloc.as_input(slots, "slots")
        bitmask = alloc.as_input(bitmask, "bitmask")
        bitmask_index = alloc.as_input(bitmask_index, "bitmask_index")

        tokens = alloc.empty((R,), "int32")
        status = alloc.empty((R,), "int32")
        logprob, rank, top_ids, top_lps = self._logprob_outputs(alloc, (R,), want_lp, top_logprobs)
        final_ids = final_probs = final_count = None
        if final_distribution:
            n = c["max_final_entries"]
            if n <= 0:
                raise ValueError(
                    "sonic: argument 'final_distribution' needs a sampler created with "
                    "max_final_entries > 0"
                )
            final_ids = alloc.empty((R, n), "int32")
            final_probs = alloc.empty((R, n), "float32")
            final_count = alloc.empty((R,), "int32")

        self._impl.sample(
            logits,
            slots,
            bitmask,
            bitmask_index,
            tokens,
            status,
            logprob,
            rank,
            top_ids,
            top_lps,
            final_ids,
            final_probs,
            final_count,
            mode,
            bool(advance_step),
            bool(append_to_history),
            A.stream_handle(stream, logits),
        )
        return SampleResult(
            tokens, status, logprob, rank, top_ids, top_lps, final_ids, final_probs, final_count
        )

    @_on_call_stream
    def top_k(self, logits: Any, k: int, *, values: bool = True, stream: Any = None) -> tuple:
        """Batched top-k of raw logits [R, cols >= vocab_size]: row r's ``k`` largest entries among
        ids below vocab_size, value descending then id ascending (NaN read as -inf). No request
        state is used. Returns ``(values, ids)`` as [R, k] float32 and int32 arrays of the logits'
        framework and device (``values`` is None when ``values=False``), like ``torch.topk``.
        """
        alloc, R = _logits_rows(logits)
        k = A._int("k", k, 1, min(self.vocab_size, _sonic.MAX_TOP_K))
        ids = alloc.empty((R, k), "int32")
        vals = alloc.empty((R, k), "float32") if values else None
        self._impl.top_k(logits, k, ids, vals, A.stream_handle(stream, logits))
        return vals, ids

    @_on_call_stream
    def verify(
        self,
        logits: Any,
        cu_rows: Any,
        draft_tokens: Any,
        *,
        slots: Any = None,
        rules: Any = None,
        draft_probs: Any = None,
        draft_sparse: Any = None,
        bitmask: Any = None,
        bitmask_index: Any = None,
        logprobs: Any = None,
        top_logprobs: bool = False,
        advance_step: bool = True,
        append_to_history: bool = True,
        stream: Any = None,
    ) -> VerifyResult:
        """Speculative-draft verification (SPEC.md section 3).

        Request b owns target rows ``cu_rows[b] .. cu_rows[b+1]-1`` of ``logits`` (exclusive
        offsets, B + 1 entries; n_b + 1 rows for n_b drafts) and drafts
        ``draft_tokens[cu_rows[b] - b + j]``. ``slots`` [B] maps requests to slots (request b is
        slot b when None). ``rules`` is one of 'dense', 'sparse', 'one_hot', 'strict' for every
        request, or a per-request sequence/array of rule names or codes (int32 array); when None it
        is 'dense' if ``draft_probs`` is given, 'sparse' if ``draft_sparse`` is given, else
        'one_hot'. Greedy requests always use the greedy rule. ``draft_probs`` [drafts, >= V]
        float32 are dense draft distributions; ``draft_sparse`` is (ids, probs, count) or a
        SampleResult with the final distribution, packed like the drafts.
        """
        alloc, rows = _logits_rows(logits)
        mode, want_lp = _mode(logprobs, bool(top_logprobs))
        c = self._config

        cu_rows = alloc.as_input(cu_rows, "cu_rows")
        cu_shape = A.shape(cu_rows)
        if len(cu_shape) != 1 or cu_shape[0] < 1:
            raise ValueError(
                f"sonic: argument 'cu_rows' must be 1-D with B + 1 >= 1 entries, got shape {cu_shape}"
            )
        B = cu_shape[0] - 1
        draft_tokens = alloc.as_input(draft_tokens, "draft_tokens")
        slots = alloc.as_input(slots, "slots")

        sparse = (None, None, None)
        if draft_sparse is not None:
            if hasattr(draft_sparse, "final_ids"):
                sparse = (draft_sparse.final_ids, draft_sparse.final_probs, draft_sparse.final_count)
            else:
                try:
                    ids, probs, count = draft_sparse
                except (TypeError, ValueError):
                    raise TypeError(
                        "sonic: argument 'draft_sparse' must be (ids, probs, count) or a "
                        "SampleResult with the final distribution"
                    ) from None
                sparse = (ids, probs, count)
            for name, a in zip(("ids", "probs", "count"), sparse):
                A.require_array(a, f"draft_sparse.{name}")
        if draft_probs is not None:
            A.require_array(draft_probs, "draft_probs")

        if rules is None:
            rules = "dense" if draft_probs is not None else "sparse" if draft_sparse is not None else "one_hot"
        if isinstance(rules, (str, numbers.Integral)) and not isinstance(rules, bool):
            rules = alloc.full((B,), _rule_code(rules, "rules"), "int32")
        elif isinstance(rules, (list, tuple)):
            rules = alloc.from_list(
                [_rule_code(r, f"rules[{i}]") for i, r in enumerate(rules)], "int32"
            )
        else:
            A.require_array(rules, "rules")

        W = c["max_drafts"] + 1
        tokens = alloc.empty((B, W), "int32")
        num_accepted = alloc.empty((B,), "int32")
        status = alloc.empty((rows,), "int32")
        logprob, rank, top_ids, top_lps = self._logprob_outputs(alloc, (B, W), want_lp, top_logprobs)

        self._impl.verify(
            logits,
            cu_rows,
            slots,
            draft_tokens,
            rules,
            draft_probs,
            sparse[0],
            sparse[1],
            sparse[2],
            alloc.as_input(bitmask, "bitmask"),
            alloc.as_input(bitmask_index, "bitmask_index"),
            tokens,
            num_accepted,
            status,
            logprob,
            rank,
            top_ids,
            top_lps,
            mode,
            bool(advance_step),
            bool(append_to_history),
            A.stream_handle(stream, logits),
        )
        return VerifyResult(tokens, num_accepted, status, logprob, rank, top_ids, top_lps)


def _rule_code(rule: Any, name: str) -> int:
    if isinstance(rule, str):
        key = _RULE_ALIASES.get(rule, rule)
        if key in VERIFY_RULES:
            return VERIFY_RULES[key]
    elif isinstance(rule, numbers.Integral) and not isinstance(rule, bool):
        if int(rule) in VERIFY_RULES.values():
            return int(rule)
    raise ValueError(
        f"sonic: argument '{name}' must be one of 'dense', 'sparse', 'one_hot', 'strict' "
        f"(or 0..3), got {rule!r}"
    )

