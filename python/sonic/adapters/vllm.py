"""vLLM adapter: sonic behind vLLM's sampler inputs and its rejection sampler's packing.

Written from vLLM's documented semantics (its v1 sampler and rejection sampler):

* Per-request parameter tensors, one entry per row of the batch: ``temperature`` (below 1e-5,
  including vLLM's -1 for greedy rows, means greedy -> sonic's 0; None, vLLM's all-greedy batch,
  means every row greedy), ``top_k`` (-1, 0 or >= vocab size: disabled), ``top_p`` (1.0:
  disabled), ``min_p`` (0: disabled), ``repetition_penalties`` (1.0: disabled; over prompt and
  output), ``frequency_penalties`` / ``presence_penalties`` (0: disabled; over the output). The
  order of the rules is vLLM's, which is sonic's (SPEC.md).
* ``prompt_token_ids`` may be vLLM's padded [B, L] tensor (padded with vocab_size), and
  ``output_token_ids`` a list of lists; ids outside [0, V) are dropped as padding/placeholders.
* ``allowed_token_ids_mask`` [B, V] bool is True where a token is NOT allowed (vLLM's layout),
  passed as the shorter of the allowed and the banned list (each counts against max_token_list);
  ``bad_words_token_ids`` {row: [[ids...], ...]} bans the last id of a bad word when the output
  ends with its other ids; ``logit_bias`` is a per-row list of {token: bias} (or None).
* Logprobs (``logprobs_mode``): 'raw_logprobs' is log_softmax of the input logits (sonic's raw
  mode, before every mask: a ``bitmask`` passed here is not in them, where vLLM applies its grammar
  bitmask to the logits before its sampler; for vLLM's raw logprobs of constrained rows, apply it to
  the logits instead); 'processed_logprobs' is log_softmax after temperature, min-p, top-k and
  top-p, that is sonic's 'final' mode for random rows, and log_softmax of the penalised logits at
  temperature 1 for greedy rows (sonic's 'processed' mode for them). The 'raw_logits' /
  'processed_logits' modes return logits, which sonic does not produce. Output: vLLM's
  LogprobsTensors layout, column 0 the sampled token and columns 1..N the top-N, plus the sampled
  token's rank (tokens with logprob >= its own). Where fewer than N tokens have finite logprob,
  sonic pads with id -1 and -inf.
* Rejection sampling: ``cu_num_draft_tokens`` [B] is INCLUSIVE (request b's drafts are
  ``draft_token_ids[cu[b-1]:cu[b]]``); ``logits`` holds the n_b + 1 rows of each request
  (n_b target rows then the bonus row, vLLM's logits_indices order). The output
  ``[B, max_spec_len + 1]`` int32 holds the accepted drafts, then the recovered or bonus token,
  then -1. Without ``draft_probs`` (n-gram drafts) the draft distribution is one-hot; greedy
  requests accept while the draft equals the argmax.
* Randomness is sonic's (Philox keyed by seed and step), not torch's generators: a request with a
  seed uses it with step = the number of tokens it has generated; one without gets a fresh seed
  per call.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from .. import _arrays as A
from ..sampler import Sampler
from ._common import SeedSource, column, greedy_temperature, seeds_and_steps, token_rows, top_k_value

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs", "raw_logits", "processed_logits")


class VllmLogprobsTensors(NamedTuple):
    logprob_token_ids: Any  # [B, N + 1] int32: the sampled token, then the top-N
    logprobs: Any  # [B, N + 1] float32
    selected_token_ranks: Any  # [B] int32


class VllmSamplerOutput(NamedTuple):
    sampled_token_ids: Any  # [B, 1] int32
    logprobs_tensors: Optional[VllmLogprobsTensors]
    status: Any  # [B] sonic status bits


class VllmRejectionOutput(NamedTuple):
    output_token_ids: Any  # [B, max_spec_len + 1] int32, -1 padded
    num_accepted: Any  # [B] int32
    status: Any  # [rows] sonic status bits of each target row


def _to_i32(x: Any, alloc: A.Allocator, name: str) -> Any:
    """An int32 array in the logits' framework (vLLM keeps some ids as int64)."""
    if isinstance(x, (list, tuple, range)):
        return alloc.from_list([int(v) for v in x], "int32")
    A.require_array(x, name)
    kind = A.framework(x)
    if kind == "torch":
        import torch

        return x if x.dtype == torch.int32 else x.to(torch.int32)
    if kind in ("numpy", "cupy"):
        return x if str(x.dtype) == "int32" else x.astype("int32")
    return x


class VllmSampler:
    """sonic with vLLM's conventions. ``max_num_reqs`` rows per call; ``max_num_logprobs`` the
    largest N of top-N logprobs (<= 20); ``max_spec_len`` the most drafts per request."""

    def __init__(
        self,
        vocab_size: int,
        max_num_reqs: int,
        *,
        logprobs_mode: str = "raw_logprobs",
        max_num_logprobs: int = 0,
        max_spec_len: int = 0,
        max_model_len: int = 32768,
        max_token_list: int = 4096,
        backend: str = "auto",
        device: int = 0,
        seed: Optional[int] = None,
    ):
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(
                f"sonic: argument 'logprobs_mode' must be one of {LOGPROBS_MODES}, got {logprobs_mode!r}"
            )
        if logprobs_mode in ("raw_logits", "processed_logits"):
            raise ValueError(
                f"sonic: argument 'logprobs_mode' = {logprobs_mode!r} is not supported: sonic "
                "returns log-probabilities, not logits ('raw_logprobs' or 'processed_logprobs')"
            )
        self.logprobs_mode = logprobs_mode
        self.vocab_size = A._int("vocab_size", vocab_size, 1)
        self.max_num_logprobs = A._int("max_num_logprobs", max_num_logprobs, 0, 20)
        self.max_spec_len = A._int("max_spec_len", max_spec_len, 0)
        max_num_reqs = A._int("max_num_reqs", max_num_reqs, 1)
        # Verification packs n + 1 rows per request.
        max_rows = max_num_reqs * (self.max_spec_len + 1)
        self.sampler = Sampler(
            self.vocab_size,
            max_slots=max_num_reqs,
            max_rows=max_rows,
            max_drafts=self.max_spec_len,
            max_history=max_model_len,
            max_token_list=max_token_list,
            max_top_logprobs=self.max_num_logprobs,
            backend=backend,
            device=device,
        )
        self._seeds = SeedSource(seed)

    # ---- per-request state --------------------------------------------------------------------
    def _admit(
        self,
        rows: int,
        *,
        temperature: Any,
        top_k: Any,
        top_p: Any,
        min_p: Any,
        frequency_penalties: Any,
        presence_penalties: Any,
        repetition_penalties: Any,
        prompt_token_ids: Any,
        output_token_ids: Any,
        allowed_token_ids_mask: Any,
        bad_words_token_ids: Any,
        logit_bias: Any,
        seeds: Any,
        top_logprobs: int,
        stream: Any,
    ) -> list:
        """Admits row r of the batch into slot r; returns the per-row greedy flags."""
        V = self.vocab_size
        if rows > self.sampler.config["max_slots"]:
            raise ValueError(
                f"sonic: the batch has {rows} requests, more than max_num_reqs "
                f"({self.sampler.config['max_slots']})"
            )
        # None: vLLM's all-greedy batch (SamplingMetadata.temperature is None then).
        temps = [greedy_temperature(t) for t in column(temperature, "temperature", rows, 0.0)]
        ks = [top_k_value(k, V) for k in column(top_k, "top_k", rows, 0)]
        ps = column(top_p, "top_p", rows, 1.0)
        mins = column(min_p, "min_p", rows, 0.0)
        freq = column(frequency_penalties, "frequency_penalties", rows, 0.0)
        pres = column(presence_penalties, "presence_penalties", rows, 0.0)
        rep = column(repetition_penalties, "repetition_penalties", rows, 1.0)
        prompts = token_rows(prompt_token_ids, "prompt_token_ids", rows, V)
        outputs = token_rows(output_token_ids, "output_token_ids", rows, V)
        biases = list(logit_bias) if logit_bias is not None else [None] * rows
        if len(biases) != rows:
            raise ValueError(
                f"sonic: argument 'logit_bias' holds {len(biases)} rows, the batch has {rows} rows"
            )
        allowed = [None] * rows
        masked_ids = [[] for _ in range(rows)]  # disallowed by the mask, where fewer than the allowed
        all_masked = [False] * rows
        if allowed_token_ids_mask is not None:
            mask = A.to_list(allowed_token_ids_mask, "allowed_token_ids_mask")
            if len(mask) != rows:
                raise ValueError(
                    f"sonic: argument 'allowed_token_ids_mask' holds {len(mask)} rows, the batch "
                    f"has {rows} rows"
                )
            for r, row in enumerate(mask):
                if any(row):  # True: not allowed
                    # The shorter list of the two: both count against max_token_list.
                    ok, off = [], []
                    for t, masked in enumerate(row[:V]):
                        (off if masked else ok).append(t)
                    if not ok:  # every token disallowed (an empty list allows all)
                        all_masked[r] = True
                    elif len(ok) <= V - len(ok):
                        allowed[r] = ok
                    else:
                        masked_ids[r] = off
        banned = [[] for _ in range(rows)]
        for r, words in (bad_words_token_ids or {}).items():
            r = A._int("bad_words_token_ids row", r, 0, rows - 1)
            past = outputs[r]
            for word in words:
                word = [int(t) for t in word]
                if not word:
                    continue
                prefix = word[:-1]
                if len(prefix) > len(past):
                    continue
                if not prefix or past[len(past) - len(prefix):] == prefix:
                    banned[r].append(word[-1])
        seed_list, steps = seeds_and_steps(seeds, rows, [len(o) for o in outputs], self._seeds)

        for r in range(rows):
            ban = sorted(set(banned[r]) | set(masked_ids[r]))
            if all_masked[r]:  # nothing allowed: one id both allowed and banned
                allowed[r], ban = [0], [0]
            self.sampler.admit(
                r,
                temperature=temps[r],
                top_k=ks[r],
                top_p=float(ps[r]),
                min_p=float(mins[r]),
                repetition_penalty=float(rep[r]),
                frequency_penalty=float(freq[r]),
                presence_penalty=float(pres[r]),
                logit_bias=biases[r],
                banned_tokens=ban or None,
                allowed_tokens=allowed[r],
                seed=seed_list[r],
                initial_step=steps[r],
                top_logprobs=top_logprobs,
                prompt=prompts[r],
                stream=stream,
            )
            if outputs[r]:
                self.sampler.append_output(r, outputs[r], stream=stream)
        return [t == 0.0 for t in temps]

    # ---- single step --------------------------------------------------------------------------
    def sample(
        self,
        logits: Any,
        *,
        temperature: Any,
        top_k: Any = None,
        top_p: Any = None,
        min_p: Any = None,
        frequency_penalties: Any = None,
        presence_penalties: Any = None,
        repetition_penalties: Any = None,
        prompt_token_ids: Any = None,
        output_token_ids: Any = None,
        allowed_token_ids_mask: Any = None,
        bad_words_token_ids: Any = None,
        logit_bias: Any = None,
        seeds: Any = None,
        max_num_logprobs: Optional[int] = None,
        bitmask: Any = None,
        stream: Any = None,
    ) -> VllmSamplerOutput:
        """vLLM's Sampler.forward on ``logits`` [B, V]: ``sampled_token_ids`` [B, 1] and, when
        ``max_num_logprobs`` is not None, the LogprobsTensors of the sampled token and top-N."""
        A.require_array(logits, "logits")
        shp = A.shape(logits)
        if len(shp) != 2:
            raise ValueError(f"sonic: argument 'logits' must be 2-D [B, V], got shape {shp}")
        rows = shp[0]
        n = None
        if max_num_logprobs is not None:
            n = A._int("max_num_logprobs", max_num_logprobs, 0, self.max_num_logprobs)
        greedy = self._admit(
            rows,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            frequency_penalties=frequency_penalties,
            presence_penalties=presence_penalties,
            repetition_penalties=repetition_penalties,
            prompt_token_ids=prompt_token_ids,
            output_token_ids=output_token_ids,
            allowed_token_ids_mask=allowed_token_ids_mask,
            bad_words_token_ids=bad_words_token_ids,
            logit_bias=logit_bias,
            seeds=seeds,
            top_logprobs=n or 0,
            stream=stream,
        )
        call = dict(
            bitmask=bitmask,
            top_logprobs=bool(n),
            advance_step=False,
            append_to_history=False,
            stream=stream,
        )
        if n is None:
            res = self.sampler.sample(logits, **call)
            return VllmSamplerOutput(res.tokens[:, None], None, res.status)

        if self.logprobs_mode == "raw_logprobs":
            res = self.sampler.sample(logits, logprobs="raw", **call)
        else:
            # processed_logprobs: the kept set's distribution for random rows, the untruncated
            # temperature-1 distribution for greedy rows.
            res = self.sampler.sample(logits, logprobs="final" if not all(greedy) else "processed", **call)
            g = [r for r in range(rows) if greedy[r]]
            if g and len(g) < rows:
                alt = self.sampler.sample(logits, logprobs="processed", **call)
                res.logprob[g] = alt.logprob[g]
                res.rank[g] = alt.rank[g]
                if n:
                    res.top_ids[g] = alt.top_ids[g]
                    res.top_logprobs[g] = alt.top_logprobs[g]
        alloc = A.Allocator(logits)
        ids = alloc.empty((rows, n + 1), "int32")
        lps = alloc.empty((rows, n + 1), "float32")
        ids[:, 0] = res.tokens
        lps[:, 0] = res.logprob
        if n:
            ids[:, 1:] = res.top_ids[:, :n]
            lps[:, 1:] = res.top_logprobs[:, :n]
        return VllmSamplerOutput(
            res.tokens[:, None], VllmLogprobsTensors(ids, lps, res.rank), res.status
        )

    # ---- rejection sampling -------------------------------------------------------------------
    def rejection_sample(
        self,
        logits: Any,
        draft_token_ids: Any,
        cu_num_draft_tokens: Any,
        max_spec_len: int,
        *,
        draft_probs: Any = None,
        temperature: Any,
        top_k: Any = None,
        top_p: Any = None,
        min_p: Any = None,
        frequency_penalties: Any = None,
        presence_penalties: Any = None,
        repetition_penalties: Any = None,
        prompt_token_ids: Any = None,
        output_token_ids: Any = None,
        allowed_token_ids_mask: Any = None,
        logit_bias: Any = None,
        seeds: Any = None,
        bitmask: Any = None,
        stream: Any = None,
    ) -> VllmRejectionOutput:
        """vLLM's rejection sampler. ``logits`` [sum(n_b + 1), V]: each request's n_b target rows
        then its bonus row; ``draft_token_ids`` [sum(n_b)]; ``cu_num_draft_tokens`` [B]
        inclusive cumulative draft counts; ``draft_probs`` [sum(n_b), V] or None (one-hot drafts).
        Returns ``output_token_ids`` [B, max_spec_len + 1] padded with -1."""
        A.require_array(logits, "logits")
        alloc = A.Allocator(logits)
        max_spec_len = A._int("max_spec_len", max_spec_len, 0, self.max_spec_len)
        cu = [int(v) for v in A.to_list(cu_num_draft_tokens, "cu_num_draft_tokens")]
        B = len(cu)
        counts, prev = [], 0
        for b, c in enumerate(cu):
            n = c - prev
            if n < 0:
                raise ValueError(
                    f"sonic: argument 'cu_num_draft_tokens' must be non-decreasing (inclusive "
                    f"cumulative counts), got {cu[max(b - 1, 0)]} then {c} at index {b}"
                )
            if n > max_spec_len:
                raise ValueError(
                    f"sonic: argument 'cu_num_draft_tokens': request {b} has {n} drafts, more than "
                    f"max_spec_len ({max_spec_len})"
                )
            counts.append(n)
            prev = c
        num_drafts = prev
        drafts = _to_i32(draft_token_ids, alloc, "draft_token_ids")
        if A.shape(drafts) != (num_drafts,):
            raise ValueError(
                f"sonic: argument 'draft_token_ids' must have shape ({num_drafts},) "
                f"(cu_num_draft_tokens[-1]), got {A.shape(drafts)}"
            )
        rows = A.shape(logits)[0]
        if rows != num_drafts + B:
            raise ValueError(
                f"sonic: argument 'logits' must hold num_drafts + B = {num_drafts + B} rows "
                f"(n + 1 per request), got {rows}"
            )
        # vLLM's inclusive draft counts -> sonic's exclusive row offsets (n_b + 1 rows each).
        cu_rows = [0]
        for n in counts:
            cu_rows.append(cu_rows[-1] + n + 1)

        greedy = self._admit(
            B,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            frequency_penalties=frequency_penalties,
            presence_penalties=presence_penalties,
            repetition_penalties=repetition_penalties,
            prompt_token_ids=prompt_token_ids,
            output_token_ids=output_token_ids,
            allowed_token_ids_mask=allowed_token_ids_mask,
            bad_words_token_ids=None,
            logit_bias=logit_bias,
            seeds=seeds,
            top_logprobs=0,
            stream=stream,
        )
        del greedy  # greedy requests take the greedy rule inside sonic whatever the rule says
        res = self.sampler.verify(
            logits,
            alloc.from_list(cu_rows, "int32"),
            drafts,
            rules="dense" if draft_probs is not None else "one_hot",
            draft_probs=draft_probs,
            bitmask=bitmask,
            advance_step=False,
            append_to_history=False,
            stream=stream,
        )
        return VllmRejectionOutput(res.tokens[:, : max_spec_len + 1], res.num_accepted, res.status)
