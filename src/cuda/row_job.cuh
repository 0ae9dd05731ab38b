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

// The fast path's fixed shapes: a block of 256 threads takes a tile of 4096 tokens (16 each) and
// keeps up to 64 candidates, aiming for 16: a tile rarely holds more than a few of a row's kept
// tokens, and the coverage check in stage 2 catches the rows where one does.
constexpr int32_t kTile = 4096;
constexpr int32_t kStage1Threads = 256;
constexpr int32_t kTokensPerThread = kTile / kStage1Threads;
constexpr int32_t kCandidateCap = 64;
constexpr int32_t kCandidateAim = 16;
constexpr int32_t kMaxVocab = 64 * kTile;  // stage 2 holds the statistics of 64 tiles

// What stage 1 leaves for stage 2 about one (row, tile).
struct TileStat {
  unsigned long long max_key;  // largest packed key of z in the tile (0: no valid token)
  unsigned long long bound;    // every valid token not among the candidates has a key < bound
  float sum;                   // sum of exp(z - tile max) over valid tokens (rows that need it)
  float raw_max;               // raw logits (raw logprob mode): max and sum of exp(x - max)
  float raw_sum;
  float win_score;             // untruncated random rows: the tile's best z + G
  int32_t win_token;
  int32_t count;               // candidates written
  int32_t valid;               // tokens with z > -inf
  int32_t nan;
};

struct FastScratch {
  TileStat* stats;              // [rows, tiles]
  unsigned long long* cands;    // [rows, tiles, kCandidateCap] packed keys, unsorted
  int32_t* exact_flags;         // [rows] 1: stage 2 could not settle the row exactly
  int32_t tiles;
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
  LogprobMode mode;
  bool advance_step;
  bool append_to_history;
};

// The exact sampler: one block a row, every rule of SPEC.md section 2 by full passes over the row.
void launch_exact_sample(const RowJob& job, cudaStream_t stream);

// The fast path: stage 1 (row x tile) and stage 2 (row); rows it cannot settle are flagged in
// job.fast.exact_flags for launch_exact_sample.
void launch_fast_sample(const RowJob& job, cudaStream_t stream);

}  // namespace sonic::cuda
