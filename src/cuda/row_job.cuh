// What a sampling kernel needs for a batch of rows: where the logits are, which slot owns each row,
// the bitmask, the request table, the workspace and the outputs. Plain data, passed by value.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/slot_table.cuh"
#include "sonic/types.hpp"

namespace sonic::cuda {

struct RowOutputs {
  int32_t* tokens;
  int32_t* status;
  float* logprob;
  int32_t* rank;
  int32_t* top_ids;
  float* top_logprobs;
  int64_t top_stride;
  int32_t* final_ids;
  float* final_probs;
  int32_t* final_count;
  int64_t final_stride;
  int32_t final_capacity;
};

// The fast path's fixed shapes. A block of 128 threads takes a tile of 4096 tokens; each warp screens
// 1024 of them (32 a lane) on its own. Every lane keeps its three largest keys; the block keeps those
// above the largest value any lane had to leave out (the tile's bound), a few per warp on real
// distributions. Stage 2 proves from the bounds that these candidates hold the kept set.
constexpr int32_t kTile = 4096;
constexpr int32_t kFastThreads = 128;
constexpr int32_t kFastWarps = kFastThreads / 32;
constexpr int32_t kWarpTokens = kTile / kFastWarps;
constexpr int32_t kLaneTokens = kWarpTokens / 32;
constexpr int32_t kTileCandidates = 3 * kFastThreads;  // at most three a lane
constexpr int32_t kMaxVocab = 64 * kTile;              // stage 2 merges at most 64 tiles (two a lane)

// What stage 1 leaves for stage 2 about one (row, tile). Keys are packed (value, id) keys of the
// logits after steps 1-4 (before temperature, which preserves their order): stage 2 divides the
// few it keeps.
struct alignas(16) TileStat {
  unsigned long long max_key;  // largest key in the tile (0: no valid token)
  unsigned long long bound;    // every valid token that is not a candidate has a key < bound
  float sum;                   // sum of exp((x - tile max) / T) (T = 1 for greedy rows), if needed
  float raw_max;               // raw logits (raw logprob mode): max and sum of exp(x - max)
  float raw_sum;
  float win_score;             // untruncated random rows: the tile's best z + G
  int32_t win_token;
  int32_t valid;               // tokens with a finite or +inf value
  int32_t nan;
  int32_t pad;
};

struct FastScratch {
  TileStat* stats;              // [rows, tiles]
  unsigned long long* cands;    // [rows, tiles * kTileCandidates] packed keys, unordered
  int32_t* cand_count;          // [rows] keys appended to the row's list (reset by stage 2)
  int32_t* tiles_done;          // [rows] tiles finished (the last one runs stage 2 and resets it)
  int32_t* exact_flags;         // [rows] 1: stage 2 could not settle the row exactly
  int32_t* rows_done;           // [1] rows finished by the exact kernel (its last block commits)
  int32_t tiles;
};

// Sampler::top_k's outputs: when k > 0 the fast kernel runs the top-k of raw logits instead of sampling.
struct TopKJob {
  int32_t k;
  int32_t* ids;
  float* values;  // may be null
  int64_t stride;
};

// What a target row of a verification call leaves for its request's commit (docs/design-verify.md).
// Its logprob (of `emit`, in the call's mode) goes to RowOutputs::logprob[row], a [rows] scratch.
struct RowVerdict {
  int32_t emit;  // the token this row emits if the request reaches it (-1: none)
  int32_t stop;  // 1: the request ends at this row (rejection, mismatch, bonus or no token)
};

// A verification call (Sampler::verify): rows are the packed target rows.
struct VerifyJob {
  int32_t num_requests;     // B; 0: a sampling call
  const int32_t* cu_rows;   // [B + 1] exclusive offsets
  const int32_t* slots;     // [B] or null (request b is slot b)
  const int32_t* draft_tokens;
  int64_t num_drafts_capacity;
  const int32_t* rules;     // [B] VerifyRule or null (one-hot)
  DraftProbsView q;
  int32_t max_drafts;
  RowVerdict* verdicts;     // [rows] scratch
  int32_t* tokens;          // [B, out_stride]
  int32_t* num_accepted;    // [B]
  int64_t out_stride;
  float* logprob;           // [B, out_stride] or null
};

struct RowJob {
  const void* logits;
  DType dtype;
  int64_t row_stride;   // elements
  int32_t rows;
  const int32_t* slots;  // null: row r is slot r
  const int32_t* bitmask;
  int64_t bitmask_rows;
  int64_t bitmask_stride;
  const int32_t* bitmask_index;
  SlotTableView table;
  float* z;              // workspace [rows, vocab_size]
  const int32_t* exact_flags;  // exact path: rows with a nonzero flag only (null: every row)
  FastScratch fast;
  RowOutputs out;
  TopKJob top_k;    // k = 0: sampling or verification
  VerifyJob verify;  // num_requests = 0: sampling
  LogprobMode mode;
  bool advance_step;
  bool append_to_history;
};

// The fast path, one kernel: stage 1 on every (tile, row), stage 2 in the last block of each row to
// finish. Rows it cannot settle are flagged in job.fast.exact_flags. Reads the request table only.
void launch_fast_sample(const RowJob& job, cudaStream_t stream);

// Top-k rows the fast kernel flagged (their top k is not inside the candidates): a radix select over
// the whole row, one block a row.
void launch_exact_top_k(const RowJob& job, cudaStream_t stream);

// The exact sampler over the flagged rows (one block a row, every rule of SPEC.md section 2 by full
// passes over the row), then the state updates of every row of the call: its last block to finish
// appends the emitted tokens to the histories and advances the steps, after every row has read them.
void launch_exact_sample(const RowJob& job, cudaStream_t stream);

}  // namespace sonic::cuda
