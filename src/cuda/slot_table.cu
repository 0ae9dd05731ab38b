#include "cuda/slot_table.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda/cuda_check.hpp"
#include "host/validate.hpp"

namespace sonic::cuda {
namespace {

int32_t next_pow2(int64_t n) {
  int64_t p = 16;
  while (p < n) p <<= 1;
  return static_cast<int32_t>(p);
}

__global__ void append_tokens_kernel(SlotTableView tab, int32_t slot, const int32_t* tokens,
                                     int32_t count) {
  // One thread: appends stay in order, and host appends are not on the per-step path.
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  for (int32_t i = 0; i < count; ++i) history_append(tab, slot, tokens[i]);
}

}  // namespace

DeviceSlotTable::DeviceSlotTable(const SamplerConfig& config)
    : config_(config), host_active_(static_cast<size_t>(config.max_slots), 0) {
  const int64_t S = config.max_slots;
  view_.max_slots = config.max_slots;
  view_.vocab_size = config.vocab_size;
  view_.words = (config.vocab_size + 31) / 32;
  view_.list_capacity = std::max(config.max_token_list, 1);
  view_.hash_capacity = next_pow2(2 * static_cast<int64_t>(config.max_history));
  view_.max_history = config.max_history;
  auto* params = mem_.alloc<SlotParams>(S);
  view_.params = params;
  view_.step = mem_.alloc<uint64_t>(S);
  view_.list_token = mem_.alloc<int32_t>(S * view_.list_capacity);
  view_.list_bias = mem_.alloc<float>(S * view_.list_capacity);
  view_.list_kind = mem_.alloc<uint8_t>(S * view_.list_capacity);
  view_.hist_len = mem_.alloc<int32_t>(S);
  view_.hist_bits = mem_.alloc<uint32_t>(S * view_.words);
  view_.hist_keys = mem_.alloc<int32_t>(S * view_.hash_capacity);
  view_.hist_prompt = mem_.alloc<int32_t>(S * view_.hash_capacity);
  view_.hist_output = mem_.alloc<int32_t>(S * view_.hash_capacity);
  staging_ = mem_.alloc<int32_t>(config.max_history);
  // Every slot starts retired: flags 0, empty history.
  SONIC_CUDA_CHECK(cudaMemset(params, 0, S * sizeof(SlotParams)));
  SONIC_CUDA_CHECK(cudaMemset(view_.step, 0, S * sizeof(uint64_t)));
  SONIC_CUDA_CHECK(cudaMemset(view_.hist_len, 0, S * sizeof(int32_t)));
  SONIC_CUDA_CHECK(cudaMemset(view_.hist_bits, 0, S * view_.words * sizeof(uint32_t)));
  SONIC_CUDA_CHECK(cudaMemset(view_.hist_keys, 0xFF, S * view_.hash_capacity * sizeof(int32_t)));
  SONIC_CUDA_CHECK(cudaMemset(view_.hist_prompt, 0, S * view_.hash_capacity * sizeof(int32_t)));
  SONIC_CUDA_CHECK(cudaMemset(view_.hist_output, 0, S * view_.hash_capacity * sizeof(int32_t)));
  SONIC_CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceSlotTable::admit(int32_t slot, const RequestParams& params, const int32_t* prompt,
                            int64_t prompt_len, cudaStream_t stream) {
  const int32_t V = config_.vocab_size;
  // The token list: bias, banned and allowed merged into one list sorted by token.
  struct Entry {
    int32_t token;
    float bias;
    uint8_t kind;
  };
  std::vector<Entry> entries;
  auto entry = [&](int32_t t) -> Entry& {
    for (Entry& e : entries)
      if (e.token == t) return e;
    entries.push_back(Entry{t, 0.0f, 0});
    return entries.back();
  };
  for (const auto& [t, b] : params.logit_bias) {
    Entry& e = entry(t);
    e.bias = b;
    e.kind |= kListBias;
  }
  for (int32_t t : params.banned_tokens) entry(t).kind |= kListBanned;
  for (int32_t t : params.allowed_tokens) entry(t).kind |= kListAllowed;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.token < b.token; });
  if (static_cast<int64_t>(entries.size()) > view_.list_capacity)
    detail::invalid_argument("params.logit_bias/banned_tokens/allowed_tokens",
                             std::to_string(entries.size()) + " distinct tokens",
                             "must be at most config.max_token_list (" +
                                 std::to_string(view_.list_capacity) + ")");

  // The history: presence bits and the hash table, built here with the kernels' hash.
  std::vector<uint32_t> bits(view_.words, 0);
  std::vector<int32_t> keys(view_.hash_capacity, -1), pcount(view_.hash_capacity, 0),
      ocount(view_.hash_capacity, 0);
  for (int64_t i = 0; i < prompt_len; ++i) {
    const int32_t t = prompt[i];
    bits[t >> 5] |= 1u << (t & 31);
    uint32_t h = history_hash(t, view_.hash_capacity);
    while (keys[h] != -1 && keys[h] != t) h = (h + 1) & (view_.hash_capacity - 1);
    keys[h] = t;
    ++pcount[h];
  }
  (void)V;

  SlotParams p{};
  p.temperature = params.temperature;
  p.top_p = params.top_p;
  p.min_p = params.min_p;
  p.repetition = params.repetition_penalty;
  p.frequency = params.frequency_penalty;
  p.presence = params.presence_penalty;
  p.top_k = params.top_k;
  p.top_n = params.top_logprobs;
  p.flags = kSlotActive | (params.top_p_joint ? kSlotTopPJoint : 0u) |
            (params.repetition_output_only ? kSlotRepetitionOutputOnly : 0u) |
            (params.penalties_include_prompt ? kSlotPenaltiesIncludePrompt : 0u) |
            (params.allowed_tokens.empty() ? 0u : kSlotHasAllowed);
  p.list_count = static_cast<int32_t>(entries.size());
  p.seed = params.seed;

  std::vector<int32_t> ltok(entries.size());
  std::vector<float> lbias(entries.size());
  std::vector<uint8_t> lkind(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    ltok[i] = entries[i].token;
    lbias[i] = entries[i].bias;
    lkind[i] = entries[i].kind;
  }
  const int64_t L = view_.list_capacity, H = view_.hash_capacity;
  const int32_t len = static_cast<int32_t>(prompt_len);
  const uint64_t step = params.initial_step;
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    if (bytes) SONIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  };
  copy(const_cast<int32_t*>(view_.list_token) + slot * L, ltok.data(), ltok.size() * 4);
  copy(const_cast<float*>(view_.list_bias) + slot * L, lbias.data(), lbias.size() * 4);
  copy(const_cast<uint8_t*>(view_.list_kind) + slot * L, lkind.data(), lkind.size());
  copy(view_.hist_bits + slot * static_cast<int64_t>(view_.words), bits.data(), bits.size() * 4);
  copy(view_.hist_keys + slot * H, keys.data(), H * 4);
  copy(view_.hist_prompt + slot * H, pcount.data(), H * 4);
  copy(view_.hist_output + slot * H, ocount.data(), H * 4);
  copy(view_.hist_len + slot, &len, 4);
  copy(view_.step + slot, &step, 8);
  copy(const_cast<SlotParams*>(view_.params) + slot, &p, sizeof p);
  // The host vectors die here: wait until the copies have read them.
  SONIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  host_active_[slot] = 1;
}

void DeviceSlotTable::retire(int32_t slot, cudaStream_t stream) {
  const int64_t H = view_.hash_capacity;
  SONIC_CUDA_CHECK(cudaMemsetAsync(const_cast<SlotParams*>(view_.params) + slot, 0, sizeof(SlotParams), stream));
  SONIC_CUDA_CHECK(cudaMemsetAsync(view_.hist_len + slot, 0, 4, stream));
  SONIC_CUDA_CHECK(cudaMemsetAsync(view_.hist_bits + slot * static_cast<int64_t>(view_.words), 0,
                                   view_.words * 4, stream));
  SONIC_CUDA_CHECK(cudaMemsetAsync(view_.hist_keys + slot * H, 0xFF, H * 4, stream));
  SONIC_CUDA_CHECK(cudaMemsetAsync(view_.hist_prompt + slot * H, 0, H * 4, stream));
  SONIC_CUDA_CHECK(cudaMemsetAsync(view_.hist_output + slot * H, 0, H * 4, stream));
  SONIC_CUDA_CHECK(cudaMemsetAsync(view_.step + slot, 0, sizeof(uint64_t), stream));  // as the reference's
  host_active_[slot] = 0;
}

void DeviceSlotTable::append_output(int32_t slot, const int32_t* tokens, int64_t count,
                                    cudaStream_t stream) {
  if (!host_active_[slot])
    detail::invalid_argument("slot", std::to_string(slot), "must be an admitted slot");
  int32_t len = 0;
  SONIC_CUDA_CHECK(cudaMemcpyAsync(&len, view_.hist_len + slot, 4, cudaMemcpyDeviceToHost, stream));
  SONIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (len + count > config_.max_history)
    detail::invalid_argument("count", std::to_string(count),
                             "the slot's history would hold " + std::to_string(len + count) +
                                 " tokens, more than config.max_history (" +
                                 std::to_string(config_.max_history) + ")");
  if (count == 0) return;
  SONIC_CUDA_CHECK(cudaMemcpyAsync(staging_, tokens, count * 4, cudaMemcpyHostToDevice, stream));
  append_tokens_kernel<<<1, 1, 0, stream>>>(view_, slot, staging_, static_cast<int32_t>(count));
  SONIC_CUDA_CHECK(cudaGetLastError());
  SONIC_CUDA_CHECK(cudaStreamSynchronize(stream));
}

uint64_t DeviceSlotTable::step(int32_t slot) const {
  // After the device's work on every stream: a call on a non-blocking stream does not order with the
  // legacy default stream, whose copy alone could read the step from before the call.
  SONIC_CUDA_CHECK(cudaDeviceSynchronize());
  uint64_t s = 0;
  SONIC_CUDA_CHECK(cudaMemcpy(&s, view_.step + slot, 8, cudaMemcpyDeviceToHost));
  return s;
}

}  // namespace sonic::cuda
