// The request table on the device: per-slot parameters, the sorted token list (logit bias, banned,
// allowed) and the sparse history. Kernels read it through SlotTableView; the host fills it at
// admission and the kernels advance it (step counters, emitted tokens) after each call.
//
// History is sparse: a presence bitmap per slot (V bits, so a vocabulary tile tests its tokens with
// a few word loads) and an open-addressing hash table token -> (prompt count, output count) that is
// probed only for tokens whose bit is set. Its cost follows the history's length, not V.
#pragma once

#include <cstdint>

#include "common/hd.hpp"

namespace sonic::cuda {

enum SlotFlags : uint32_t {
  kSlotActive = 1u << 0,
  kSlotTopPJoint = 1u << 1,
  kSlotRepetitionOutputOnly = 1u << 2,
  kSlotPenaltiesIncludePrompt = 1u << 3,
  kSlotHasAllowed = 1u << 4,
};

enum ListKind : uint8_t { kListBias = 1u << 0, kListBanned = 1u << 1, kListAllowed = 1u << 2 };

struct SlotParams {
  float temperature;
  float top_p;
  float min_p;
  float repetition;
  float frequency;
  float presence;
  int32_t top_k;
  int32_t top_n;
  uint32_t flags;
  int32_t list_count;
  uint64_t seed;
};

struct SlotTableView {
  int32_t max_slots;
  int32_t vocab_size;
  int32_t words;           // ceil(V / 32): presence-bitmap words per slot
  int32_t list_capacity;   // token-list entries per slot
  int32_t hash_capacity;   // power of two
  int32_t max_history;
  const SlotParams* params;
  uint64_t* step;
  const int32_t* list_token;  // [slot, list_capacity], sorted by token
  const float* list_bias;
  const uint8_t* list_kind;
  int32_t* hist_len;          // tokens of history (prompt + output)
  uint32_t* hist_bits;        // [slot, words]
  int32_t* hist_keys;         // [slot, hash_capacity], -1 empty
  int32_t* hist_prompt;       // [slot, hash_capacity]
  int32_t* hist_output;       // [slot, hash_capacity]
};

SONIC_HD uint32_t history_hash(int32_t token, int32_t capacity) {
  return (static_cast<uint32_t>(token) * 2654435761u) & static_cast<uint32_t>(capacity - 1);
}

struct TokenHistory {
  int32_t prompt = 0;
  int32_t output = 0;
};

#if defined(__CUDACC__)
// A token's presence word and the first slot of its hash chain, loaded together: every address is
// in bounds whatever the token's presence, so the four loads go out at once and a lookup waits on
// one memory round trip (three dependent ones otherwise: the presence bit, the key, the counts).
// For tokens that are likely in the history (stage 1's special tokens).
struct HistoryProbe {
  uint32_t word;  // the presence bitmap's word of the token
  int32_t key, prompt, output;  // the first hash slot's entry
};
__device__ __forceinline__ HistoryProbe history_probe(const SlotTableView& tab, int32_t slot, int32_t token) {
  const int64_t at = static_cast<int64_t>(slot) * tab.hash_capacity + history_hash(token, tab.hash_capacity);
  HistoryProbe q;
  q.word = tab.hist_bits[static_cast<int64_t>(slot) * tab.words + (token >> 5)];
  q.key = tab.hist_keys[at];
  q.prompt = tab.hist_prompt[at];
  q.output = tab.hist_output[at];
  return q;
}

// The token's counts by walking its hash chain from slot i (probe `first` of the chain).
__device__ inline TokenHistory history_walk(const SlotTableView& tab, int32_t slot, int32_t token, uint32_t i,
                                            int32_t first) {
  TokenHistory h;
  const int64_t base = static_cast<int64_t>(slot) * tab.hash_capacity;
  for (int32_t probe = first; probe < tab.hash_capacity; ++probe) {
    const int32_t k = tab.hist_keys[base + i];
    if (k == token) {
      h.prompt = tab.hist_prompt[base + i];
      h.output = tab.hist_output[base + i];
      return h;
    }
    if (k < 0) return h;
    i = (i + 1) & static_cast<uint32_t>(tab.hash_capacity - 1);
  }
  return h;
}

// The same counts from the token's probe, walking on past the first hash slot on a collision.
__device__ inline TokenHistory history_lookup(const SlotTableView& tab, int32_t slot, int32_t token,
                                              const HistoryProbe& q) {
  TokenHistory h;
  if (!((q.word >> (token & 31)) & 1u)) return h;
  if (q.key == token) {
    h.prompt = q.prompt;
    h.output = q.output;
    return h;
  }
  if (q.key < 0) return h;
  const uint32_t next = (history_hash(token, tab.hash_capacity) + 1) & static_cast<uint32_t>(tab.hash_capacity - 1);
  return history_walk(tab, slot, token, next, 1);
}

// Counts of one token in a slot's history (zero when absent), by dependent loads (the presence bit
// first): for passes over every token of a row, where most tokens have no history.
__device__ inline TokenHistory history_lookup(const SlotTableView& tab, int32_t slot, int32_t token) {
  const uint32_t* bits = tab.hist_bits + static_cast<int64_t>(slot) * tab.words;
  if (!((bits[token >> 5] >> (token & 31)) & 1u)) return TokenHistory{};
  return history_walk(tab, slot, token, history_hash(token, tab.hash_capacity), 0);
}

// Appends one output token to a slot's history; false when the history is full.
__device__ inline bool history_append(const SlotTableView& tab, int32_t slot, int32_t token) {
  if (atomicAdd(tab.hist_len + slot, 1) >= tab.max_history) {
    atomicSub(tab.hist_len + slot, 1);
    return false;
  }
  const int64_t base = static_cast<int64_t>(slot) * tab.hash_capacity;
  uint32_t i = history_hash(token, tab.hash_capacity);
  for (int32_t probe = 0; probe < tab.hash_capacity; ++probe) {
    const int32_t prev = atomicCAS(tab.hist_keys + base + i, -1, token);
    if (prev == -1 || prev == token) {
      atomicAdd(tab.hist_output + base + i, 1);
      atomicOr(tab.hist_bits + static_cast<int64_t>(slot) * tab.words + (token >> 5), 1u << (token & 31));
      return true;
    }
    i = (i + 1) & static_cast<uint32_t>(tab.hash_capacity - 1);
  }
  return false;  // unreachable: the table holds twice max_history keys
}

// The slot's list entry for a token (index), or -1. The list is sorted by token.
__device__ inline int32_t list_find(const SlotTableView& tab, int32_t slot, int32_t count, int32_t token) {
  const int32_t* list = tab.list_token + static_cast<int64_t>(slot) * tab.list_capacity;
  int32_t lo = 0, hi = count;
  while (lo < hi) {
    const int32_t mid = (lo + hi) >> 1;
    if (list[mid] < token) lo = mid + 1; else hi = mid;
  }
  return lo < count && list[lo] == token ? lo : -1;
}
#endif

}  // namespace sonic::cuda
