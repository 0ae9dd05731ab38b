"""pytest set-up for the Python package's tests (CPU backend, numpy arrays)."""

import numpy as np
import pytest

import sonic


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def make_sampler(vocab_size=16, max_slots=4, **kw):
    kw.setdefault("backend", "cpu")
    return sonic.Sampler(vocab_size, max_slots=max_slots, **kw)


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x[np.isfinite(x)]) if np.isfinite(x).any() else 0.0
    e = np.exp(x - m)
    return x - m - np.log(e.sum())
