"""End-to-end decoding with a real language-model architecture, sonic replacing its sampling.

No small model ships its weights inside a pip package and the GPU machine has no network, so this
builds a Qwen2-architecture model from `transformers` with RANDOM weights (vocabulary 151936, the
Qwen2 tokenizer's size) and says so. It decodes a batch for a number of steps with a KV cache, twice
from the same prompts: sampling with the library's own logits warpers (temperature, top-k, top-p)
and torch.multinomial, then with a sonic.Sampler with the same parameters. It prints tokens per
second for both and the time spent sampling per step.

    python examples/python/decode_e2e.py --batch 32 --steps 128
"""

import argparse
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import sonic


def decode(model, prompt, steps, sample):
    """A decode loop with a KV cache; returns (tokens per second, mean ms per sampling call)."""
    B = prompt.shape[0]
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sampling_ms = 0.0
    with torch.inference_mode():
        out = model(prompt, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for step in range(steps):
            start.record()
            nxt = sample(logits, step)
            stop.record()
            out = model(nxt.long()[:, None], past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1, :]
            stop.synchronize()
            sampling_ms += start.elapsed_time(stop)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    return B * steps / seconds, sampling_ms / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--top-p", type=float, default=0.9)
    a = ap.parse_args()
    if not (torch.cuda.is_available() and sonic.cuda_available()):
        raise SystemExit("decode_e2e: needs a GPU and sonic built with CUDA")

    V = 151936
    cfg = Qwen2Config(vocab_size=V, hidden_size=a.hidden, intermediate_size=4 * a.hidden,
                      num_hidden_layers=a.layers, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=4096)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    print(f"model: Qwen2 architecture with RANDOM weights, {a.layers} layers, hidden {a.hidden}, "
          f"vocab {V}, {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, bf16")
    prompt = torch.randint(0, V, (a.batch, 16), device="cuda")

    warpers = LogitsProcessorList([TemperatureLogitsWarper(a.temperature), TopKLogitsWarper(a.top_k),
                                   TopPLogitsWarper(a.top_p)])

    def library_sample(logits, step):
        scores = warpers(None, logits.float())
        return torch.multinomial(scores.softmax(dim=-1), 1)[:, 0]

    sampler = sonic.Sampler(V, max_slots=a.batch, backend="cuda")
    for r in range(a.batch):
        sampler.admit(r, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, seed=1000 + r,
                      prompt=prompt[r].tolist())

    def sonic_sample(logits, step):
        return sampler.sample(logits).tokens  # the model's bf16 rows as they are (strided)

    decode(model, prompt, 4, library_sample)  # warm-ups (kernels, allocator)
    decode(model, prompt, 4, sonic_sample)
    lib_tps, lib_ms = decode(model, prompt, a.steps, library_sample)
    son_tps, son_ms = decode(model, prompt, a.steps, sonic_sample)
    print(f"batch {a.batch}, {a.steps} steps")
    print(f"  transformers warpers + torch.multinomial: {lib_tps:9.1f} tokens/s, sampling {lib_ms:7.3f} ms/step")
    print(f"  sonic:                                    {son_tps:9.1f} tokens/s, sampling {son_ms:7.3f} ms/step")


if __name__ == "__main__":
    main()
