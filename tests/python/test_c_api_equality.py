"""The binding against the C API (libsonic through ctypes) on the same inputs: the same tokens,
statuses, logprobs, ranks and top-N. Skipped when no libsonic.so is found: set SONIC_LIBRARY, or
build build/src/libsonic.so first (scripts/test.sh does; .ci/run runs it before these tests)."""

import ctypes as C
import os
import pathlib

import numpy as np
import pytest

import sonic


def _find_library():
    env = os.environ.get("SONIC_LIBRARY")
    if env:
        return env
    lib = pathlib.Path(__file__).resolve().parents[2] / "build" / "src" / "libsonic.so"
    return str(lib) if lib.exists() else None


LIB_PATH = _find_library()
pytestmark = pytest.mark.skipif(LIB_PATH is None, reason="libsonic.so not found")

i32, i64, f32, u64 = C.c_int32, C.c_int64, C.c_float, C.c_uint64
P = C.POINTER


class Config(C.Structure):
    _fields_ = [(n, i32) for n in ("backend", "vocab_size", "max_slots", "max_rows", "max_drafts",
                                   "max_history", "max_token_list", "max_top_logprobs",
                                   "max_final_entries", "device", "cpu_threads")]


class Params(C.Structure):
    _fields_ = [("temperature", f32), ("top_k", i32), ("top_p", f32), ("top_p_joint", i32),
                ("min_p", f32), ("repetition_penalty", f32), ("repetition_output_only", i32),
                ("frequency_penalty", f32), ("presence_penalty", f32),
                ("penalties_include_prompt", i32), ("logit_bias_ids", P(i32)),
                ("logit_bias_values", P(f32)), ("logit_bias_count", i64),
                ("banned_tokens", P(i32)), ("banned_count", i64), ("allowed_tokens", P(i32)),
                ("allowed_count", i64), ("seed", u64), ("initial_step", u64),
                ("top_logprobs", i32)]


class Logits(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", i32), ("rows", i64), ("cols", i64),
                ("row_stride", i64)]


class Outputs(C.Structure):
    _fields_ = [("tokens", P(i32)), ("status", P(i32)), ("logprob", P(f32)), ("rank", P(i32)),
                ("top_ids", P(i32)), ("top_logprobs", P(f32)), ("top_stride", i64),
                ("final_ids", P(i32)), ("final_probs", P(f32)), ("final_count", P(i32)),
                ("final_stride", i64)]


class Options(C.Structure):
    _fields_ = [("logprob_mode", i32), ("advance_step", i32), ("append_to_history", i32),
                ("stream", C.c_void_p)]


def _ptr(a, t):
    return a.ctypes.data_as(P(t))


def test_sample_matches_the_c_api():
    lib = C.CDLL(LIB_PATH)
    lib.sonic_last_error.restype = C.c_char_p
    R, V, N = 6, 300, 4
    rng = np.random.default_rng(77)
    x = (rng.normal(size=(R, V)) * 3).astype(np.float32)
    x[2, 5] = np.nan
    rows = [
        dict(temperature=0.0),
        dict(temperature=0.7, top_k=20, seed=1),
        dict(temperature=1.3, top_p=0.8, seed=2, repetition_penalty=1.3),
        dict(temperature=1.0, min_p=0.05, top_k=50, top_p=0.9, top_p_joint=True, seed=3),
        dict(temperature=0.9, frequency_penalty=0.5, presence_penalty=0.2, seed=4),
        dict(temperature=1.0, seed=5, initial_step=9),
    ]
    prompt = np.array([1, 2, 3, 4, 5, 9, 9], dtype=np.int32)

    cfg = Config()
    lib.sonic_config_default(C.byref(cfg))
    cfg.backend, cfg.vocab_size, cfg.max_slots, cfg.max_rows, cfg.max_top_logprobs = 1, V, R, R, N
    h = C.c_void_p()
    assert lib.sonic_sampler_create(C.byref(cfg), C.byref(h)) == 0, lib.sonic_last_error()
    py = sonic.Sampler(V, max_slots=R, max_top_logprobs=N, backend="cpu")
    try:
        for r, kw in enumerate(rows):
            p = Params()
            lib.sonic_request_params_default(C.byref(p))
            for k, v in kw.items():
                setattr(p, k, v)
            p.top_logprobs = N
            assert lib.sonic_admit(h, r, C.byref(p), _ptr(prompt, i32), len(prompt), None) == 0
            py.admit(r, top_logprobs=N, prompt=prompt, **kw)

        for mode_name, mode in (("raw", 0), ("processed", 1), ("final", 2)):
            lg = Logits(x.ctypes.data, 0, R, V, V)
            tok, st, rk = (np.empty(R, np.int32) for _ in range(3))
            lp = np.empty(R, np.float32)
            ti, tl = np.empty((R, N), np.int32), np.empty((R, N), np.float32)
            out = Outputs()
            lib.sonic_sample_outputs_default(C.byref(out))
            out.tokens, out.status, out.logprob, out.rank = (_ptr(tok, i32), _ptr(st, i32),
                                                             _ptr(lp, f32), _ptr(rk, i32))
            out.top_ids, out.top_logprobs, out.top_stride = _ptr(ti, i32), _ptr(tl, f32), N
            opt = Options(mode, 1, 1, None)
            assert lib.sonic_sample(h, C.byref(lg), None, None, C.byref(out), C.byref(opt)) == 0

            # the binding reads the same rows through a strided view of a wider array
            wide = np.full((R, V + 13), 7.0, dtype=np.float32)
            wide[:, :V] = x
            res = py.sample(wide[:, :V], logprobs=mode_name, top_logprobs=True)
            np.testing.assert_array_equal(res.tokens, tok)
            np.testing.assert_array_equal(res.status, st)
            np.testing.assert_array_equal(res.logprob, lp)
            np.testing.assert_array_equal(res.rank, rk)
            np.testing.assert_array_equal(res.top_ids, ti)
            np.testing.assert_array_equal(res.top_logprobs, tl)
        assert st[2] == sonic.STATUS_NAN
        step = C.c_uint64()
        assert lib.sonic_get_step(h, 5, C.byref(step)) == 0
        assert step.value == py.step(5) == 12
    finally:
        lib.sonic_sampler_destroy(h)
