"""Engine adapters: the engines' documented conventions, pinned."""

import numpy as np
import pytest

from conftest import log_softmax
from sonic.adapters import SGLangSampler, VllmSampler

V = 8


def _logits(rows):
    return np.tile(np.linspace(1.4, 0.0, V, dtype=np.float32), (rows, 1))  # argmax 0


# ---- vLLM ------------------------------------------------------------------------------------


def test_vllm_greedy_temperatures():
    # vLLM: temperature below 1e-5 is greedy (its input batch stores -1 for greedy requests).
    x = np.random.default_rng(0).normal(size=(4, V)).astype(np.float32)
    vs = VllmSampler(V, 4, backend="cpu", seed=0)
    out = vs.sample(x, temperature=np.array([-1.0, 0.0, 1e-6, 9e-6], dtype=np.float32))
    assert out.sampled_token_ids.shape == (4, 1)
    assert out.sampled_token_ids[:, 0].tolist() == np.argmax(x, axis=1).tolist()
    assert out.logprobs_tensors is None


def test_vllm_all_greedy_batch_has_no_temperature():
    # vLLM's SamplingMetadata.temperature is None when every request is greedy.
    x = np.random.default_rng(1).normal(size=(6, V)).astype(np.float32)
    vs = VllmSampler(V, 6, backend="cpu", seed=0)
    out = vs.sample(x, temperature=None)
    assert out.sampled_token_ids[:, 0].tolist() == np.argmax(x, axis=1).tolist()


def test_vllm_allowed_mask_of_a_large_vocabulary():
    # The mask goes in as the shorter of the allowed and the banned lists: one token disallowed of
    # 8000 is a banned list of one (an allowed list of 7999 exceeded max_token_list, 4096), and a
    # row with every token disallowed has no valid token.
    big = 8000
    x = np.tile(np.linspace(1.0, 0.0, big, dtype=np.float32), (3, 1))  # argmax 0, then 1
    vs = VllmSampler(big, 3, backend="cpu")
    mask = np.zeros((3, big), dtype=bool)
    mask[0, 0] = True       # the argmax disallowed
    mask[1, :] = True       # nothing allowed
    mask[2, :] = True
    mask[2, 4000:4003] = False  # three allowed
    out = vs.sample(x, temperature=[0.0] * 3, allowed_token_ids_mask=mask)
    assert out.sampled_token_ids[:, 0].tolist() == [1, -1, 4000]


def test_vllm_per_row_values_are_not_dicts():
    # A {row: value} dict would be read as its keys: refused, naming the argument.
    vs = VllmSampler(V, 2, backend="cpu")
    with pytest.raises(TypeError, match="seeds"):
        vs.sample(_logits(2), temperature=[1.0, 1.0], seeds={0: 11, 1: 12})


def test_vllm_top_k_disabled_values_match_no_top_k():
    R = 64
    x = np.tile(np.log(np.array([0.3, 0.25, 0.2, 0.1, 0.05, 0.05, 0.03, 0.02], np.float32)), (R, 1))
    seeds = list(range(R))
    vs = VllmSampler(V, R, backend="cpu")
    ref = vs.sample(x, temperature=np.ones(R, np.float32), seeds=seeds).sampled_token_ids
    for k in (-1, 0, V, V + 5):
        got = vs.sample(x, temperature=np.ones(R, np.float32), top_k=np.full(R, k, np.int32),
                        seeds=seeds).sampled_token_ids
        np.testing.assert_array_equal(got, ref)
    assert len(set(ref[:, 0].tolist())) > 2  # really random
    k1 = vs.sample(x, temperature=np.ones(R, np.float32), top_k=np.ones(R, np.int32), seeds=seeds)
    assert set(k1.sampled_token_ids[:, 0].tolist()) == {0}


def test_vllm_seeded_requests_are_reproducible_and_step_with_the_output():
    x = np.zeros((1, V), dtype=np.float32)
    vs = VllmSampler(V, 1, backend="cpu")
    a = vs.sample(x, temperature=[1.0], seeds=[7], output_token_ids=[[1, 2]])
    b = vs.sample(x, temperature=[1.0], seeds=[7], output_token_ids=[[1, 2]])
    assert a.sampled_token_ids.tolist() == b.sampled_token_ids.tolist()
    seq = [int(vs.sample(x, temperature=[1.0], seeds=[7], output_token_ids=[[0] * n])
               .sampled_token_ids[0, 0]) for n in range(12)]
    assert len(set(seq)) > 1  # a new position, new noise


def test_vllm_prompt_padding_and_repetition_scope():
    # vLLM pads prompt_token_ids with vocab_size; the repetition penalty covers prompt + output,
    # frequency/presence the output only.
    x = np.array([[2.0, 1.5, 1.0, 0, 0, 0, 0, 0]] * 2, dtype=np.float32)
    vs = VllmSampler(V, 2, backend="cpu")
    prompts = np.array([[0, V, V], [V, V, V]], dtype=np.int64)
    out = vs.sample(x, temperature=[0.0, 0.0], repetition_penalties=[2.0, 2.0],
                    prompt_token_ids=prompts, output_token_ids=[[], []])
    assert out.sampled_token_ids[:, 0].tolist() == [1, 0]
    out = vs.sample(x, temperature=[0.0, 0.0], presence_penalties=[1.0, 1.0],
                    prompt_token_ids=prompts, output_token_ids=[[], [0]])
    assert out.sampled_token_ids[:, 0].tolist() == [0, 1]


def test_vllm_allowed_mask_bad_words_and_bias():
    x = _logits(3)
    vs = VllmSampler(V, 3, backend="cpu")
    mask = np.zeros((3, V), dtype=bool)
    mask[0, :] = True
    mask[0, 5] = False  # vLLM: True = NOT allowed
    bad = {1: [[0], [3, 4, 1]], 2: [[9, 9, 0]]}
    out = vs.sample(x, temperature=[0.0] * 3, allowed_token_ids_mask=mask, bad_words_token_ids=bad,
                    output_token_ids=[[], [3, 4], [1]], logit_bias=[None, None, {7: 5.0}])
    # row 0: only 5 allowed; row 1: 0 banned and, after [3, 4], 1 banned -> 2; row 2: bias
    assert out.sampled_token_ids[:, 0].tolist() == [5, 2, 7]
    # the multi-token bad word applies only after its prefix
    out = vs.sample(x, temperature=[0.0] * 3, bad_words_token_ids={1: [[3, 4, 0]]},
                    output_token_ids=[[], [4, 3], []])
    assert out.sampled_token_ids[:, 0].tolist() == [0, 0, 0]


def test_vllm_raw_logprobs_layout():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, V)).astype(np.float32)
    vs = VllmSampler(V, 2, max_num_logprobs=3, backend="cpu")
    out = vs.sample(x, temperature=[0.0, 0.8], top_k=[-1, 4], seeds=[1, 2], max_num_logprobs=3)
    lt = out.logprobs_tensors
    assert lt.logprob_token_ids.shape == (2, 4) and lt.logprobs.shape == (2, 4)
    for r in range(2):
        ref = log_softmax(x[r])  # raw: the input logits, before any processing
        t = out.sampled_token_ids[r, 0]
        assert lt.logprob_token_ids[r, 0] == t
        assert lt.logprobs[r, 0] == pytest.approx(ref[t], abs=1e-5)
        assert lt.selected_token_ranks[r] == int((ref >= ref[t]).sum())
        assert lt.logprob_token_ids[r, 1:].tolist() == np.argsort(-ref, kind="stable")[:3].tolist()
    only = vs.sample(x, temperature=[0.0, 0.8], max_num_logprobs=0).logprobs_tensors
    assert only.logprob_token_ids.shape == (2, 1)


def test_vllm_processed_logprobs_are_after_truncation():
    # vLLM's processed_logprobs: log_softmax after temperature and top-k/top-p for random rows,
    # log_softmax of the logits at temperature 1 for greedy rows (in a mixed batch too).
    x = np.array([[2.0, 1.0, 0.5, 0, 0, 0, 0, -1.0]] * 2, dtype=np.float32)
    vs = VllmSampler(V, 2, max_num_logprobs=2, logprobs_mode="processed_logprobs", backend="cpu")
    out = vs.sample(x, temperature=[0.5, 0.0], top_k=[2, 0], seeds=[3, 3], max_num_logprobs=2)
    lt = out.logprobs_tensors
    t0 = out.sampled_token_ids[0, 0]
    assert t0 in (0, 1)
    assert lt.logprobs[0, 0] == pytest.approx(log_softmax(x[0, :2] / 0.5)[t0], abs=1e-5)
    assert lt.logprob_token_ids[0, 1:].tolist() == [0, 1]
    assert out.sampled_token_ids[1, 0] == 0
    assert lt.logprobs[1, 0] == pytest.approx(log_softmax(x[1])[0], abs=1e-5)
    assert lt.logprobs[1, 2] == pytest.approx(log_softmax(x[1])[1], abs=1e-5)


def test_vllm_logit_modes_are_refused():
    for mode in ("raw_logits", "processed_logits", "bogus"):
        with pytest.raises(ValueError, match="'logprobs_mode'"):
            VllmSampler(V, 1, logprobs_mode=mode, backend="cpu")


def _peaked(argmax_per_row):
    x = np.zeros((len(argmax_per_row), V), dtype=np.float32)
    for i, t in enumerate(argmax_per_row):
        x[i, t] = 50.0
    return x


def test_vllm_rejection_sampler_packing():
    # Three requests with 2, 0 and 3 drafts: cu_num_draft_tokens is INCLUSIVE [2, 2, 5]; the
    # logits hold n + 1 rows per request (targets, then the bonus row).
    vs = VllmSampler(V, 3, max_spec_len=4, backend="cpu")
    drafts = np.array([1, 2, 3, 4, 5], dtype=np.int64)
    targets = [1, 6, 7] + [7] + [3, 4, 0, 2]  # request 0: accept 1, reject 2 -> 6
    x = _peaked(targets)
    out = vs.rejection_sample(x, drafts, np.array([2, 2, 5]), max_spec_len=3,
                              temperature=[0.0, 0.0, 0.0])
    assert out.output_token_ids.dtype == np.int32
    assert out.output_token_ids.shape == (3, 4)
    assert out.output_token_ids.tolist() == [[1, 6, -1, -1], [7, -1, -1, -1], [3, 4, 0, -1]]
    assert out.num_accepted.tolist() == [1, 0, 2]


def test_vllm_rejection_sampler_random_rules():
    vs = VllmSampler(V, 2, max_spec_len=2, backend="cpu")
    x = _peaked([1, 2, 3, 1, 5, 6])
    drafts = np.array([1, 2, 1, 4], dtype=np.int32)
    # no draft_probs (n-gram drafts): one-hot q; the target puts ~all mass on its peak
    out = vs.rejection_sample(x, drafts, [2, 4], 2, temperature=[1.0, 1.0], seeds=[1, 2])
    assert out.output_token_ids.tolist() == [[1, 2, 3], [1, 5, -1]]
    q = _peaked([1, 2, 1, 4]).astype(np.float64)
    q = np.exp(q - q.max(axis=1, keepdims=True))
    q = (q / q.sum(axis=1, keepdims=True)).astype(np.float32)
    out = vs.rejection_sample(x, drafts, [2, 4], 2, draft_probs=q, temperature=[1.0, 1.0])
    assert out.output_token_ids.tolist() == [[1, 2, 3], [1, 5, -1]]


def test_vllm_rejection_sampler_errors():
    vs = VllmSampler(V, 2, max_spec_len=2, backend="cpu")
    x = _peaked([1, 2, 3])
    with pytest.raises(ValueError, match="'cu_num_draft_tokens'.*non-decreasing"):
        vs.rejection_sample(x, [1], [1, 0], 2, temperature=[0.0, 0.0])
    with pytest.raises(ValueError, match="'cu_num_draft_tokens'.*max_spec_len"):
        vs.rejection_sample(x, [1, 2], [2], 1, temperature=[0.0])
    with pytest.raises(ValueError, match="'draft_token_ids'"):
        vs.rejection_sample(x, [1, 2, 3], [2], 2, temperature=[0.0])
    with pytest.raises(ValueError, match="'logits'"):
        vs.rejection_sample(x[:2], [1, 2], [2], 2, temperature=[0.0])


# ---- SGLang ----------------------------------------------------------------------------------


def test_sglang_greedy_and_top_k_sentinels():
    x = np.random.default_rng(5).normal(size=(3, V)).astype(np.float32)
    ss = SGLangSampler(V, 3, backend="cpu")
    out = ss.sample(x, temperatures=np.array([[0.0], [1e-7], [0.0]], np.float32),
                    top_ks=np.array([-1, 1 << 30, 1], np.int32))
    assert out.next_token_ids.tolist() == np.argmax(x, axis=1).tolist()
    R = 48
    y = np.tile(np.log(np.full(V, 1.0 / V, np.float32)), (R, 1))
    ss_r = SGLangSampler(V, R, backend="cpu")
    ref = ss_r.sample(y, temperatures=np.ones((R, 1), np.float32), sampling_seed=list(range(R)))
    for k in (-1, 1 << 30):
        got = ss_r.sample(y, temperatures=np.ones((R, 1), np.float32), top_ks=[k] * R,
                          sampling_seed=list(range(R)))
        np.testing.assert_array_equal(got.next_token_ids, ref.next_token_ids)


def test_sglang_top_k_top_p_are_joint():
    # p = [0.4, 0.3, 0.2, 0.1], top_k = 2, top_p = 0.5. Joint (SGLang): the top-p prefix on the
    # full distribution is {0, 1}, and {0, 1} survives top-k too -> tokens 0 and 1 are sampled.
    # Sequential (vLLM): top-p over the renormalised top-2 {0.57, 0.43} keeps {0} alone.
    R = 200
    p = np.array([0.4, 0.3, 0.2, 0.1, 0, 0, 0, 0], dtype=np.float64)
    with np.errstate(divide="ignore"):
        x = np.tile(np.log(p).astype(np.float32), (R, 1))
    ss = SGLangSampler(V, R, backend="cpu")
    got = ss.sample(x, temperatures=np.ones(R, np.float32), top_ks=[2] * R, top_ps=[0.5] * R,
                    sampling_seed=list(range(R))).next_token_ids
    freq1 = float(np.mean(got == 1))
    assert set(got.tolist()) == {0, 1} and 0.3 < freq1 < 0.56  # 0.3 / 0.7 = 0.43
    vs = VllmSampler(V, R, backend="cpu")
    seq = vs.sample(x, temperature=np.ones(R, np.float32), top_k=[2] * R, top_p=[0.5] * R,
                    seeds=list(range(R))).sampled_token_ids
    assert set(seq[:, 0].tolist()) == {0}


def test_sglang_repetition_penalty_is_output_only_and_logprobs_processed():
    x = np.array([[2.0, 1.9, 0, 0, 0, 0, 0, 0]] * 2, dtype=np.float32)
    ss = SGLangSampler(V, 2, max_top_logprobs=2, backend="cpu")
    out = ss.sample(x, temperatures=[0.0, 2.0], top_ks=[-1, 1], repetition_penalties=[2.0, 1.0],
                    output_ids=[[0], []], return_logprob=True, top_logprobs_nums=[1, 2])
    assert out.next_token_ids.tolist() == [1, 0]
    # processed: log_softmax of the penalised logits / T before truncation (T = 1 when greedy)
    pen = x[0].copy()
    pen[0] = 1.0
    assert out.next_token_logprobs[0] == pytest.approx(log_softmax(pen)[1], abs=1e-5)
    assert out.next_token_logprobs[1] == pytest.approx(log_softmax(x[1] / 2.0)[0], abs=1e-5)
    assert out.top_logprobs_idx.tolist() == [[1, -1], [0, 1]]
    raw = SGLangSampler(V, 2, backend="cpu", return_original_logprob=True)
    out = raw.sample(x, temperatures=[0.0, 2.0], repetition_penalties=[2.0, 1.0],
                     output_ids=[[0], []], return_logprob=True)
    assert out.next_token_logprobs[0] == pytest.approx(log_softmax(x[0])[1], abs=1e-5)


def test_sglang_vocab_mask_and_dense_bias():
    x = _logits(2)
    ss = SGLangSampler(V, 2, backend="cpu")
    mask = np.full((2, 1), -1, dtype=np.int32)  # all allowed
    mask[0, 0] = 1 << 6
    bias = np.zeros((2, V), dtype=np.float32)
    bias[1, 3] = 10.0
    out = ss.sample(x, temperatures=[0.0, 0.0], vocab_mask=mask, logit_bias=bias)
    assert out.next_token_ids.tolist() == [6, 3]
