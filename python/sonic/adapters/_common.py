"""Shared pieces of the engine adapters: per-request values read on the host, and the per-call
admission of every row into the adapter's own sampler."""

from __future__ import annotations

import os
import random
from typing import Any, Optional, Sequence

from .. import _arrays as A

GREEDY_EPS = 1e-5  # temperatures below this are greedy (vLLM's _SAMPLING_EPS; SPEC.md's bound)


def column(x: Any, name: str, rows: int, default: Any) -> list:
    """Per-request values as a host list of length rows: None gives the default for every row; a
    scalar is broadcast; arrays of shape [rows] or [rows, 1] (SGLang keeps temperatures as
    [B, 1]) are read (a device array is copied to the host)."""
    if x is None:
        return [default] * rows
    if isinstance(x, (int, float, bool)):
        return [x] * rows
    values = A.to_list(x, name)
    if values and isinstance(values[0], list):
        if any(len(v) != 1 for v in values):
            raise ValueError(f"sonic: argument '{name}' must have shape [{rows}] or [{rows}, 1]")
        values = [v[0] for v in values]
    if len(values) != rows:
        raise ValueError(
            f"sonic: argument '{name}' holds {len(values)} values, the batch has {rows} rows"
        )
    return values


def greedy_temperature(t: float) -> float:
    """Engines' greedy conventions (0, negative, or below 1e-5) map to sonic's 0."""
    t = float(t)
    return 0.0 if t < GREEDY_EPS else t


def top_k_value(k: Any, vocab_size: int) -> int:
    """-1, 0 and anything >= vocab_size disable top-k (vLLM, SGLang): sonic's 0."""
    k = int(k)
    return 0 if k <= 0 or k >= vocab_size else k


def token_rows(x: Any, name: str, rows: int, vocab_size: int) -> list:
    """Per-request token lists from a list of lists or a padded [rows, L] array; ids outside
    [0, vocab_size) are padding (vLLM pads prompt_token_ids with vocab_size, and may hold -1
    placeholders in output lists) and are dropped."""
    if x is None:
        return [[] for _ in range(rows)]
    values = A.to_list(x, name)
    if len(values) != rows:
        raise ValueError(
            f"sonic: argument '{name}' holds {len(values)} rows, the batch has {rows} rows"
        )
    out = []
    for i, row in enumerate(values):
        row = A.to_list(row, f"{name}[{i}]") if row is not None else []
        out.append([int(t) for t in row if 0 <= int(t) < vocab_size])
    return out


class SeedSource:
    """Seeds for requests without one: fresh randomness per call (the engines draw unseeded
    requests from a global generator)."""

    def __init__(self, seed: Optional[int] = None):
        self._rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "little"))

    def next(self) -> int:
        return self._rng.getrandbits(64)


def seeds_and_steps(
    seeds: Optional[Sequence[Any]], rows: int, history_lengths: Sequence[int], source: SeedSource
) -> tuple:
    """(seed, step) per row: a seeded request uses its seed and, as step, the number of tokens it
    has generated (so that each position of a seeded request has its own reproducible noise); an
    unseeded one a fresh random seed and step 0."""
    given = column(seeds, "seeds", rows, None) if seeds is not None else [None] * rows
    out_seeds, out_steps = [], []
    for r in range(rows):
        s = given[r]
        if s is None or (isinstance(s, int) and s < 0):
            out_seeds.append(source.next())
            out_steps.append(0)
        else:
            out_seeds.append(int(s) % (1 << 64))
            out_steps.append(int(history_lengths[r]))
    return out_seeds, out_steps
