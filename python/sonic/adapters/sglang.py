"""SGLang adapter: sonic behind SGLang's sampling batch.

Written from SGLang's documented semantics (its sampling parameters and sampler):

* ``temperatures`` [B] or [B, 1] (SGLang keeps them as a column): below 1e-5 is greedy -> sonic's
  0. (SGLang itself turns temperature < 1e-6 into top_k = 1 at temperature 1, which picks the
  same token; values in [1e-6, 1e-5) are greedy here, where SGLang would sample at that
  temperature: the results differ only between near-tied logits.)
* ``top_ks``: -1 (the request default) and anything >= vocab size (SGLang's "all" sentinel,
  1 << 30) disable top-k; ``top_ps`` 1.0 and ``min_ps`` 0 are disabled.
* Top-k and top-p are applied jointly (``top_p_joint``): the top-p prefix is measured on the full
  softmax, and a token survives if it passes every rule, as SGLang's joint top-k/top-p sampling
  does. With min-p as well, SGLang renormalises after top-k and top-p before min-p; sonic's joint
  rule measures top-p on the full distribution. Both agree whenever top-k is off or top-p is 1; a
  request using all three can keep a slightly different set.
* Penalties: repetition over the output tokens only (SGLang's scope), frequency and presence over
  the output tokens. ``logit_bias`` is SGLang's dense [B, V] tensor or a per-row list of dicts.
* ``vocab_mask``: the grammar bitmask, xgrammar's int32 layout [B, ceil(V / 32)].
* Logprobs are SGLang's default, the log of the temperature-scaled softmax before truncation
  (sonic's 'processed' mode; temperature 1 for greedy rows), or the raw input log_softmax with
  ``return_original_logprob=True``. ``top_logprobs_nums`` gives each request's N. SGLang's own
  "original" logprobs are of the logits after its penalties, bias and vocab mask at temperature 1,
  a distribution sonic has no mode for: sonic's raw mode is before all of them, so the two agree
  only for rows without penalties, bias or mask.
* Randomness is sonic's: ``sampling_seed`` per request (or a fresh seed per call), with step = the
  number of output tokens so far.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from .. import _arrays as A
from ..sampler import Sampler
from ._common import SeedSource, column, greedy_temperature, seeds_and_steps, token_rows, top_k_value

TOP_K_ALL = 1 << 30  # SGLang's "no top-k" value in its batch tensors


class SGLangSampleOutput(NamedTuple):
    next_token_ids: Any  # [B] int32
    next_token_logprobs: Any  # [B] float32 or None
    top_logprobs_idx: Any  # [B, max_top_logprobs] int32 (-1 padded) or None
    top_logprobs_val: Any  # [B, max_top_logprobs] float32 (-inf padded) or None
    status: Any  # [B] sonic status bits


class SGLangSampler:
    """sonic with SGLang's conventions; ``max_batch_size`` rows per call."""

    def __init__(
        self,
        vocab_size: int,
        max_batch_size: int,
        *,
        max_top_logprobs: int = 0,
        max_context_len: int = 32768,
        max_token_list: int = 4096,
        return_original_logprob: bool = False,
        backend: str = "auto",
        device: int = 0,
        seed: Optional[int] = None,
    ):
        self.vocab_size = A._int("vocab_size", vocab_size, 1)
        self.max_top_logprobs = A._int("max_top_logprobs", max_top_logprobs, 0, 20)
        self.logprob_mode = "raw" if return_original_logprob else "processed"
        self.sampler = Sampler(
            self.vocab_size,
            max_slots=A._int("max_batch_size", max_batch_size, 1),
            max_history=max_context_len,
            max_token_list=max_token_list,
            max_top_logprobs=self.max_top_logprobs,
            backend=backend,
            device=device,
        )
        self._seeds = SeedSource(seed)

    def sample(
        self,
        logits: Any,
        *,
        temperatures: Any,
        top_ps: Any = None,
        top_ks: Any = None,
        min_ps: Any = None,
        frequency_penalties: Any = None,
        presence_penalties: Any = None,
        repetition_penalties: Any = None,
        output_ids: Any = None,
        logit_bias: Any = None,
        vocab_mask: Any = None,
        sampling_seed: Any = None,
        return_logprob: bool = False,
        top_logprobs_nums: Any = None,
        stream: Any = None,
    ) -> SGLangSampleOutput:
        """Samples one token per row of ``logits`` [B, V] with SGLang's per-request tensors."""
        A.require_array(logits, "logits")
        shp = A.shape(logits)
        if len(shp) != 2:
            raise ValueError(f"sonic: argument 'logits' must be 2-D [B, V], got shape {shp}")
        rows = shp[0]
        V = self.vocab_size
        if rows > self.sampler.config["max_slots"]:
            raise ValueError(
                f"sonic: the batch has {rows} requests, more than max_batch_size "
                f"({self.sampler.config['max_slots']})"
            )
        temps = [greedy_temperature(t) for t in column(temperatures, "temperatures", rows, 1.0)]
        ks = [top_k_value(k, V) for k in column(top_ks, "top_ks", rows, -1)]
        ps = column(top_ps, "top_ps", rows, 1.0)
        mins = column(min_ps, "min_ps", rows, 0.0)
        freq = column(frequency_penalties, "frequency_penalties", rows, 0.0)
        pres = column(presence_penalties, "presence_penalties", rows, 0.0)
        rep = column(repetition_penalties, "repetition_penalties", rows, 1.0)
        outputs = token_rows(output_ids, "output_ids", rows, V)
        tops = [
            A._int("top_logprobs_nums", n, 0, self.max_top_logprobs)
            for n in column(top_logprobs_nums, "top_logprobs_nums", rows, 0)
        ]
        biases: list = [None] * rows
        if logit_bias is not None:
            if A.is_array(logit_bias):  # dense [B, V]
                dense = A.to_list(logit_bias, "logit_bias")
                if len(dense) != rows:
                    raise ValueError(
                        f"sonic: argument 'logit_bias' holds {len(dense)} rows, the batch has {rows}"
                    )
                biases = [{t: b for t, b in enumerate(row[:V]) if b != 0} or None for row in dense]
            else:
                biases = list(logit_bias)
                if len(biases) != rows:
                    raise ValueError(
                        f"sonic: argument 'logit_bias' holds {len(biases)} rows, the batch has {rows}"
                    )
        seeds, steps = seeds_and_steps(sampling_seed, rows, [len(o) for o in outputs], self._seeds)

        for r in range(rows):
            self.sampler.admit(
                r,
                temperature=temps[r],
                top_k=ks[r],
                top_p=float(ps[r]),
                top_p_joint=True,
                min_p=float(mins[r]),
                repetition_penalty=float(rep[r]),
                repetition_output_only=True,
                frequency_penalty=float(freq[r]),
                presence_penalty=float(pres[r]),
                logit_bias=biases[r],
                seed=seeds[r],
                initial_step=steps[r],
                top_logprobs=tops[r],
                stream=stream,
            )
            if outputs[r]:
                self.sampler.append_output(r, outputs[r], stream=stream)

        want_top = bool(return_logprob) and any(tops)
        res = self.sampler.sample(
            logits,
            bitmask=vocab_mask,
            logprobs=self.logprob_mode if return_logprob else None,
            top_logprobs=want_top,
            advance_step=False,
            append_to_history=False,
            stream=stream,
        )
        return SGLangSampleOutput(res.tokens, res.logprob, res.top_ids, res.top_logprobs, res.status)
