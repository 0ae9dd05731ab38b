"""Engine adapters: accept an engine's own layouts and conventions, call sonic.

- :mod:`sonic.adapters.vllm`: vLLM's sampler inputs (per-request tensors, -1/0 top-k, temperature
  below 1e-5 as greedy, raw/processed logprob modes) and its rejection sampler's packing
  (inclusive ``cu_num_draft_tokens``, output ``[B, max_spec_len + 1]`` padded with -1).
- :mod:`sonic.adapters.sglang`: SGLang's sampling batch (joint top-k/top-p, repetition penalty
  over the output only, processed logprobs).

Each adapter owns a :class:`sonic.Sampler` whose slot ``r`` is row ``r`` of the engine's batch;
every call re-admits the rows with the parameters and history it is given, and samples without
advancing any state (the engine owns the history). That costs host work per row and call; a
persistent slot mapping is a later optimisation.
"""

from .sglang import SGLangSampleOutput, SGLangSampler
from .vllm import VllmLogprobsTensors, VllmRejectionOutput, VllmSampler, VllmSamplerOutput

__all__ = [
    "SGLangSampleOutput",
    "SGLangSampler",
    "VllmLogprobsTensors",
    "VllmRejectionOutput",
    "VllmSampler",
    "VllmSamplerOutput",
]
