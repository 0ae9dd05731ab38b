"""sonic: exact, batched LLM sampling and speculative-draft verification.

    import numpy as np, sonic
    s = sonic.Sampler(vocab_size=1000, max_slots=8, backend="cpu")
    s.admit(0, temperature=0.8, top_p=0.9, seed=42, prompt=[1, 2, 3])
    out = s.sample(np.random.randn(1, 1000).astype(np.float32), logprobs="raw")
    out.tokens, out.logprob

    sonic.sample(logits, temperature=0.7, top_k=50)   # one-off form
    values, ids = sonic.top_k(logits, 50)              # batched top-k of raw logits

What is computed is defined by SPEC.md and docs/semantics.md of the repository. Arrays are taken
through DLPack without copies; outputs are allocated in the framework of the logits (numpy for
host arrays that are not torch or cupy).
"""

from __future__ import annotations

from . import _sonic
from .functional import sample, top_k
from .sampler import (
    BACKENDS,
    LOGPROB_MODES,
    STATUS_HISTORY_FULL,
    STATUS_INVALID_INPUT,
    STATUS_NAN,
    STATUS_NO_VALID_TOKEN,
    STATUS_OK,
    VERIFY_RULES,
    SampleResult,
    Sampler,
    VerifyResult,
    max_final_entries,
)

__version__ = "0.1.0"
MAX_TOP_LOGPROBS = _sonic.MAX_TOP_LOGPROBS
MAX_TOP_K = _sonic.MAX_TOP_K
built_with_cuda: bool = _sonic.built_with_cuda


def cuda_available() -> bool:
    """True when this build has the CUDA backend and a usable GPU is present."""
    return bool(_sonic.cuda_available())


__all__ = [
    "BACKENDS",
    "LOGPROB_MODES",
    "MAX_TOP_K",
    "MAX_TOP_LOGPROBS",
    "STATUS_HISTORY_FULL",
    "STATUS_INVALID_INPUT",
    "STATUS_NAN",
    "STATUS_NO_VALID_TOKEN",
    "STATUS_OK",
    "VERIFY_RULES",
    "SampleResult",
    "Sampler",
    "VerifyResult",
    "built_with_cuda",
    "cuda_available",
    "max_final_entries",
    "sample",
    "top_k",
]
