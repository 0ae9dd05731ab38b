"""sonic.Sampler on the CPU backend against the documented semantics (SPEC.md, docs/semantics.md)
on small hand cases."""

import numpy as np
import pytest

import sonic
from conftest import log_softmax, make_sampler


def test_import_and_build_info():
    assert isinstance(sonic.built_with_cuda, bool)
    assert isinstance(sonic.cuda_available(), bool)
    assert sonic.MAX_TOP_LOGPROBS == 20
    s = make_sampler()
    assert s.backend == "cpu"
    assert s.config["vocab_size"] == 16 and s.config["max_rows"] == 4
    assert "Sampler(" in repr(s)


def test_greedy_argmax_ties_to_lower_id():
    s = make_sampler(vocab_size=6, max_slots=2)
    s.admit(0, temperature=0.0)
    s.admit(1, temperature=0.0)
    x = np.array([[1, 5, 5, 2, 0, 5], [-1, -2, 3, 3, 3, -9]], dtype=np.float32)
    out = s.sample(x)
    assert out.tokens.dtype == np.int32 and out.tokens.shape == (2,)
    assert out.tokens.tolist() == [1, 2]
    assert out.status.tolist() == [0, 0]


def test_cpu_threads_change_nothing(rng):
    R, V = 12, 40
    x = rng.normal(size=(R, V)).astype(np.float32)
    outs = []
    for threads in (1, 4, 0):
        s = make_sampler(vocab_size=V, max_slots=R, cpu_threads=threads)
        assert s.config["cpu_threads"] == threads
        for r in range(R):
            s.admit(r, temperature=0.9, top_p=0.9, frequency_penalty=0.5, seed=r, prompt=[r % V])
        outs.append([s.sample(x).tokens.tolist() for _ in range(3)])
    assert outs[1] == outs[0] and outs[2] == outs[0]


def test_top_k_one_is_argmax_for_every_seed(rng):
    R = 32
    s = make_sampler(vocab_size=50, max_slots=R)
    x = rng.normal(size=(R, 50)).astype(np.float32)
    x[:, 7] = x.max(axis=1) + 1.0
    x[:, 3] = x[:, 7]  # tie with 7: the lower id wins
    for r in range(R):
        s.admit(r, temperature=0.7, top_k=1, seed=r)
    assert s.sample(x).tokens.tolist() == [3] * R


def test_banned_and_allowed_tokens():
    s = make_sampler(vocab_size=5, max_slots=3)
    x = np.tile(np.array([0.0, 4.0, 3.0, 2.0, 1.0], dtype=np.float32), (3, 1))
    s.admit(0, temperature=0, banned_tokens=[1])
    s.admit(1, temperature=0, banned_tokens=np.array([1, 2], dtype=np.int32))
    s.admit(2, temperature=0, allowed_tokens=[0, 4])
    assert s.sample(x).tokens.tolist() == [2, 3, 4]


def test_logit_bias_dict_and_pairs():
    s = make_sampler(vocab_size=4, max_slots=2)
    x = np.zeros((2, 4), dtype=np.float32)
    s.admit(0, temperature=0, logit_bias={2: 1.5})
    s.admit(1, temperature=0, logit_bias=[(3, 0.5), (1, 0.25)])
    assert s.sample(x).tokens.tolist() == [2, 3]


def test_nan_and_no_valid_token_status():
    s = make_sampler(vocab_size=4, max_slots=2)
    s.admit(0, temperature=0)
    s.admit(1, temperature=0.5, seed=3)
    x = np.array([[np.nan, 1.0, 2.0, np.nan], [-np.inf] * 4], dtype=np.float32)
    out = s.sample(x, logprobs="raw")
    assert out.tokens.tolist() == [2, -1]
    assert out.status[0] == sonic.STATUS_NAN
    assert out.status[1] & sonic.STATUS_NO_VALID_TOKEN
    assert out.logprob[1] == -np.inf and out.rank[1] == 0


def test_padded_columns_are_masked():
    s = make_sampler(vocab_size=4, max_slots=1)
    s.admit(0, temperature=0)
    x = np.array([[0.0, 1.0, 2.0, 0.5, 100.0, 100.0]], dtype=np.float32)  # ids 4, 5: padding
    assert s.sample(x).tokens.tolist() == [2]


def test_strided_rows_without_copy(rng):
    s = make_sampler(vocab_size=10, max_slots=3)
    for r in range(3):
        s.admit(r, temperature=1.0, seed=11 + r)
    wide = rng.normal(size=(3, 16)).astype(np.float32)
    view = wide[:, :10]  # row stride 16
    assert not view.flags.c_contiguous
    a = s.sample(view, advance_step=False).tokens
    b = s.sample(np.ascontiguousarray(view), advance_step=False).tokens
    assert a.tolist() == b.tolist()


def test_empty_batch():
    # numpy gives a (0, V) array element strides (0, 0): no layout to check, nothing to sample.
    s = make_sampler(vocab_size=4, max_slots=1)
    s.admit(0, temperature=0)
    assert s.sample(np.zeros((0, 4), dtype=np.float32)).tokens.shape == (0,)


def test_calls_from_two_threads():
    # The binding holds a lock a sampler, with the GIL released: a sample reading the histories while
    # another thread admits requests (replacing them) once read freed memory.
    import threading

    s = make_sampler(vocab_size=64, max_slots=8)
    for r in range(8):
        s.admit(r, temperature=1.0, repetition_penalty=1.3, seed=r, prompt=list(range(r, r + 20)))
    x = np.random.default_rng(0).normal(size=(8, 64)).astype(np.float32)
    errors = []

    def admits():
        try:
            for i in range(200):
                s.admit(i % 8, temperature=1.0, repetition_penalty=1.3, seed=i, prompt=list(range(i % 30)))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=admits)
    t.start()
    for _ in range(200):
        out = s.sample(x, logprobs="raw")
        # Whatever request a slot holds at that moment, a valid row yields a token of the vocabulary
        # with status 0 and a finite log-probability.
        assert out.tokens.shape == (8,)
        assert ((out.tokens >= 0) & (out.tokens < 64)).all()
        assert (out.status == 0).all()
        assert np.isfinite(out.logprob).all()
    t.join()
    assert not errors


def test_read_only_input_is_accepted():
    s = make_sampler(vocab_size=4, max_slots=1)
    s.admit(0, temperature=0)
    x = np.array([[0.0, 3.0, 1.0, 2.0]], dtype=np.float32)
    x.setflags(write=False)
    assert s.sample(x).tokens.tolist() == [1]


def test_float16_logits():
    s = make_sampler(vocab_size=4, max_slots=1)
    s.admit(0, temperature=0)
    x = np.array([[0.0, 1.0, 3.0, 2.0]], dtype=np.float16)
    assert s.sample(x).tokens.tolist() == [2]


def test_raw_logprob_and_rank_match_log_softmax(rng):
    V = 12
    s = make_sampler(vocab_size=V, max_slots=2, max_top_logprobs=5)
    x = rng.normal(size=(2, V)).astype(np.float32)
    s.admit(0, temperature=0, top_logprobs=3)
    s.admit(1, temperature=0.9, seed=5, top_logprobs=5)
    out = s.sample(x, logprobs="raw", top_logprobs=True)
    for r in range(2):
        ref = log_softmax(x[r])
        t = out.tokens[r]
        assert out.logprob[r] == pytest.approx(ref[t], abs=1e-5)
        assert out.rank[r] == int((ref >= ref[t] - 1e-12).sum())
        order = np.lexsort((np.arange(V), -ref))
        n = 3 if r == 0 else 5
        assert out.top_ids[r, :n].tolist() == order[:n].tolist()
        np.testing.assert_allclose(out.top_logprobs[r, :n], ref[order[:n]], atol=1e-5)
    assert out.top_ids[0, 3:].tolist() == [-1, -1]
    assert np.all(out.top_logprobs[0, 3:] == -np.inf)


def test_processed_and_final_modes():
    V = 4
    x = np.array([[2.0, 1.0, 0.0, -1.0]], dtype=np.float32)
    s = make_sampler(vocab_size=V, max_slots=1)
    s.admit(0, temperature=2.0, top_k=2, seed=9)
    proc = s.sample(x, logprobs="processed", advance_step=False)
    fin = s.sample(x, logprobs="final", advance_step=False)
    t = proc.tokens[0]
    assert t in (0, 1) and fin.tokens[0] == t
    assert proc.logprob[0] == pytest.approx(log_softmax(x[0] / 2.0)[t], abs=1e-5)
    assert fin.logprob[0] == pytest.approx(log_softmax(x[0, :2] / 2.0)[t], abs=1e-5)


def test_final_distribution():
    s = make_sampler(vocab_size=6, max_slots=1, max_final_entries=4)
    s.admit(0, temperature=1.0, top_k=3, seed=1)
    x = np.array([[0.0, 3.0, 1.0, 2.0, -1.0, 2.0]], dtype=np.float32)
    out = s.sample(x, final_distribution=True)
    assert out.final_count.tolist() == [3]
    assert out.final_ids[0].tolist() == [1, 3, 5, -1]  # most likely first, ties by id
    p = np.exp(np.array([3.0, 2.0, 2.0]) - 3.0)
    np.testing.assert_allclose(out.final_probs[0, :3], p / p.sum(), rtol=1e-5)
    assert out.final_probs[0, 3] == 0


def test_bitmask_and_bitmask_index():
    V = 40
    s = make_sampler(vocab_size=V, max_slots=2)
    s.admit(0, temperature=0)
    s.admit(1, temperature=0)
    x = np.tile(np.arange(V, dtype=np.float32), (2, 1))  # argmax 39
    mask = np.zeros((1, 2), dtype=np.int32)
    mask[0, 0] = 1 << 3  # only token 3 allowed
    mask[0, 1] = 0
    out = s.sample(x, bitmask=mask, bitmask_index=[0, -1])
    assert out.tokens.tolist() == [3, 39]


def test_slots_map_rows_and_results_do_not_depend_on_the_batch(rng):
    V = 30
    s = make_sampler(vocab_size=V, max_slots=4)
    for slot in range(4):
        s.admit(slot, temperature=1.0, seed=100 + slot)
    x = rng.normal(size=(4, V)).astype(np.float32)
    full = s.sample(x, advance_step=False).tokens
    # the same rows in reverse order, through explicit slot ids
    rev = s.sample(x[::-1].copy(), slots=np.array([3, 2, 1, 0], dtype=np.int32), advance_step=False)
    assert rev.tokens[::-1].tolist() == full.tolist()
    one = s.sample(x[2:3], slots=[2], advance_step=False)
    assert one.tokens[0] == full[2]


def test_step_history_and_repetition_penalty():
    s = make_sampler(vocab_size=3, max_slots=1)
    s.admit(0, temperature=0, repetition_penalty=4.0, seed=1, initial_step=7)
    assert s.step(0) == 7
    x = np.array([[2.0, 1.0, 0.6]], dtype=np.float32)
    assert s.sample(x).tokens.tolist() == [0]  # appended to the history; step 8
    assert s.step(0) == 8
    assert s.sample(x).tokens.tolist() == [1]  # 2.0 / 4 < 1.0
    assert s.sample(x, advance_step=False, append_to_history=False).tokens.tolist() == [2]
    assert s.step(0) == 9
    assert s.sample(x, advance_step=False, append_to_history=False).tokens.tolist() == [2]
    s.append_output(0, [2])
    assert s.sample(x).tokens.tolist() == [0]  # 0.5 vs 0.25 vs 0.15
    s.retire(0)
    s.admit(0, temperature=0, repetition_penalty=4.0, prompt=[0])
    assert s.sample(x).tokens.tolist() == [1]  # the prompt counts too


def test_reproducible_with_seed_and_step(rng):
    V = 100
    x = rng.normal(size=(1, V)).astype(np.float32)
    a = make_sampler(vocab_size=V, max_slots=1)
    b = make_sampler(vocab_size=V, max_slots=1)
    a.admit(0, temperature=1.0, seed=42)
    b.admit(0, temperature=1.0, seed=42)
    ta = [int(a.sample(x).tokens[0]) for _ in range(10)]
    tb = [int(b.sample(x).tokens[0]) for _ in range(10)]
    assert ta == tb
    assert len(set(ta)) > 1  # the step changes the noise


def test_sampling_frequencies_follow_softmax():
    # 2000 requests with distinct seeds in one call; V = 4, temperature 1.
    R, V = 2000, 4
    s = make_sampler(vocab_size=V, max_slots=R)
    z = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    x = np.tile(z.astype(np.float32), (R, 1))
    for r in range(R):
        s.admit(r, temperature=1.0, seed=r)
    counts = np.bincount(s.sample(x).tokens, minlength=V) / R
    np.testing.assert_allclose(counts, [0.1, 0.2, 0.3, 0.4], atol=0.05)


# ---- verification --------------------------------------------------------------------------


def _peaked(rows_argmax, V):
    x = np.zeros((len(rows_argmax), V), dtype=np.float32)
    for i, t in enumerate(rows_argmax):
        x[i, t] = 50.0  # every other token is 50 below: probability ~2e-22
    return x


def test_verify_greedy_accepts_until_mismatch():
    V = 8
    s = make_sampler(vocab_size=V, max_slots=2, max_drafts=3, max_rows=8)
    s.admit(0, temperature=0)
    s.admit(1, temperature=0)
    # request 0: drafts [1, 2, 3], target argmax [1, 2, 5, 6] -> accept 2, correction 5
    # request 1: drafts [4], target argmax [4, 7] -> accept 1, bonus 7
    x = _peaked([1, 2, 5, 6, 4, 7], V)
    out = s.verify(x, cu_rows=[0, 4, 6], draft_tokens=[1, 2, 3, 4])
    assert out.tokens.shape == (2, 4)
    assert out.tokens.tolist() == [[1, 2, 5, -1], [4, 7, -1, -1]]
    assert out.num_accepted.tolist() == [2, 1]
    assert out.status.shape == (6,) and out.status.tolist() == [0] * 6
    assert s.step(0) == 1 and s.step(1) == 1


def test_verify_random_rules_on_peaked_rows():
    V = 8
    s = make_sampler(vocab_size=V, max_slots=3, max_drafts=2, max_rows=9, max_final_entries=V)
    for slot in range(3):
        s.admit(slot, temperature=1.0, seed=slot)
    x = _peaked([1, 2, 3] * 3, V)
    drafts = np.array([1, 2, 1, 6, 1, 2], dtype=np.int32)
    cu = np.array([0, 3, 6, 9], dtype=np.int32)
    # one-hot: p(d) ~ 1 for matching drafts, ~0 for a mismatch
    out = s.verify(x, cu, drafts, rules="one_hot", advance_step=False)
    assert out.tokens.tolist() == [[1, 2, 3], [1, 2, -1], [1, 2, 3]]
    assert out.num_accepted.tolist() == [2, 1, 2]
    # strict: accept while the draft equals the row's own sample (the peak)
    out = s.verify(x, cu, drafts, rules=["strict", "strict", "one_hot"], advance_step=False)
    assert out.tokens.tolist() == [[1, 2, 3], [1, 2, -1], [1, 2, 3]]
    # dense draft probabilities peaked at each draft: accepted where the target agrees; the
    # rejected draft 6 of request 1 is replaced by a sample of max(0, p - q), peaked at 2
    q = _peaked(drafts, V).astype(np.float64)
    q = np.exp(q - q.max(axis=1, keepdims=True))
    q = (q / q.sum(axis=1, keepdims=True)).astype(np.float32)
    out = s.verify(x, cu, drafts, draft_probs=q, advance_step=False)
    assert out.tokens.tolist() == [[1, 2, 3], [1, 2, -1], [1, 2, 3]]
    assert out.num_accepted.tolist() == [2, 1, 2]


def test_verify_sparse_from_a_sample_result():
    V = 8
    s = make_sampler(vocab_size=V, max_slots=2, max_drafts=1, max_rows=4, max_final_entries=4)
    s.admit(0, temperature=1.0, seed=4)
    s.admit(1, temperature=1.0, seed=5)
    draft_logits = _peaked([3, 5], V)
    d = s.sample(draft_logits, final_distribution=True, advance_step=False, append_to_history=False)
    # the kept set (all V tokens) does not fit the capacity 4: count only, entries -1 and 0
    assert d.final_count.tolist() == [V, V]
    assert (d.final_ids == -1).all() and (d.final_probs == 0).all()
    draft = np.array([3, 5], dtype=np.int32)
    s2 = make_sampler(vocab_size=V, max_slots=2, max_drafts=1, max_rows=4, max_final_entries=V)
    s2.admit(0, temperature=1.0, seed=4, top_k=2)
    s2.admit(1, temperature=1.0, seed=5, top_k=2)
    d = s2.sample(draft_logits, final_distribution=True, advance_step=False, append_to_history=False)
    assert d.final_count.tolist() == [2, 2]
    out = s2.verify(_peaked([3, 0, 5, 1], V), [0, 2, 4], draft, draft_sparse=d)
    assert out.tokens.tolist() == [[3, 0], [5, 1]]
    assert out.num_accepted.tolist() == [1, 1]


def test_verify_with_logprobs_and_history():
    V = 6
    s = make_sampler(vocab_size=V, max_slots=1, max_drafts=2, max_rows=3, max_top_logprobs=2)
    s.admit(0, temperature=0, top_logprobs=2, repetition_penalty=100.0)
    x = _peaked([4, 4, 4], V)
    x[1, 4] = -1.0  # row 1: argmax is token 0 (a tie of zeros -> the lowest id)
    out = s.verify(x, [0, 3], [4, 4], logprobs="raw", top_logprobs=True)
    assert out.tokens.tolist() == [[4, 0, -1]]
    assert out.logprob.shape == (1, 3) and out.top_ids.shape == (1, 3, 2)
    assert out.logprob[0, 0] == pytest.approx(log_softmax(x[0])[4], abs=1e-5)
    assert out.top_ids[0, 0, 0] == 4
    # the emitted tokens joined the history: a repetition penalty now sees them
    assert s.step(0) == 1
    y = np.array([[1.0, 0.1, 0.0, 0.0, 1.0, 0.0]], dtype=np.float32)
    assert s.sample(y).tokens.tolist() == [1]


def test_functional_per_row_values_are_not_dicts():
    # A {row: value} dict would be read as its keys (temperatures 0 and 1): refused, naming it.
    import sonic.functional as F

    x = np.zeros((2, 8), np.float32)
    with pytest.raises(TypeError, match="temperature"):
        F.sample(x, temperature={0: 0.5, 1: 0.7}, backend="cpu")
