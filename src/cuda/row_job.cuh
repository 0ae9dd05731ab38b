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

  // Whether a row's outputs are its token and status alone: none of the outputs that stage 2's
  // settled_row_outputs and the exact path write besides them. An output added above must be
  // added here (stage2_row's common row stores its token and leaves when this holds).
  __host__ __device__ bool tokens_only() const {
    return !logprob && !rank && !top_ids && !final_ids && !final_count;
  }
};

// The fast path's shapes. A block has 128 threads (4 warps). Each lane screens its tokens in groups
// of 32 (kGroupTokens) and keeps the three largest keys of each group; the warp keeps those at or
// above the largest value any lane of the chunk had to leave out so far (the chunk's running bound).
// One step of a warp is eight 16-byte loads a lane (4 KB of logits): one group of fp32 tokens, two
// groups of 16-bit ones. A tile is one step of every warp of a block (16 KB: 4096 fp32 or 8192
// 16-bit tokens). Small calls of 16-bit logits take short steps of four loads (tiles of 4096 tokens,
// one group a step), so that a row has as many blocks as an fp32 row (FastScratch::step_loads). A
// block takes a chunk of consecutive tiles of one row and streams them through shared memory with
// the next steps in flight while it screens the current one. The tiles a chunk takes are chosen per
// launch (more for larger grids); the sampled tokens never depend on them.
constexpr int32_t kFastThreads = 128;
constexpr int32_t kFastWarps = kFastThreads / 32;
constexpr int32_t kGroupTokens = 32;                   // tokens a lane screens together
constexpr int32_t kStepLoads = 8;                      // 16-byte loads a lane a step
constexpr int32_t kShortStepLoads = 4;                 // 16-bit logits in small calls (FastScratch::step_loads)
constexpr int32_t kGroupCandidates = 3 * 32;           // keys a warp may keep from one group
constexpr int32_t kTopKSlack = 16;                      // top-k rows: stage 2 sorts about k + kTopKSlack keys
constexpr int32_t kMaxChunks = 64;                     // stage 2 merges at most 64 chunks (two a lane)
constexpr int32_t kMinTileTokens = 4096;               // fp32
constexpr int32_t kMaxVocab = kMaxChunks * kMinTileTokens;
constexpr int32_t kMaxRows = 65535;                    // the fast kernel's grid holds a row a y index

__host__ __device__ constexpr int32_t elem_bytes(DType d) { return d == DType::kF32 ? 4 : 2; }
// A tile of `loads` loads a lane a step.
__host__ __device__ constexpr int32_t tile_tokens(DType d, int32_t loads = kStepLoads) {
  return kFastWarps * loads * 32 * (16 / elem_bytes(d));
}
static_assert(tile_tokens(DType::kBF16, kShortStepLoads) == kMinTileTokens, "kMaxVocab counts tiles of kMinTileTokens");
__host__ __device__ constexpr int32_t row_tiles(int32_t V, DType d, int32_t loads = kStepLoads) {  // the last one partial
  return (V + tile_tokens(d, loads) - 1) / tile_tokens(d, loads);
}
__host__ __device__ constexpr int32_t tile_candidates(DType d, int32_t loads = kStepLoads) {  // at most three a lane a group
  return kFastWarps * (tile_tokens(d, loads) / kFastWarps / (32 * kGroupTokens)) * kGroupCandidates;
}

// What stage 1 leaves for stage 2 about one (row, chunk). Keys are packed (value, id) keys of the
// logits after steps 1-4 (before temperature, which preserves their order): stage 2 divides the
// few it keeps.
struct alignas(16) TileStat {
  unsigned long long max_key;  // largest key in the chunk (0: no valid token)
  unsigned long long bound;    // every valid token that is not a candidate has a key < bound
  float sum;                   // sum of 2^(x c - K), c = log2(e) / T (T = 1 for greedy rows), K =
                               // ceil(chunk max c) (stage1_chunk.cuh's ExpSum), if needed
  float raw_max;               // raw logits (raw logprob mode): max, and sum of 2^(x log2(e) - K)
  float raw_sum;               // (K = ceil(max log2(e)))
  float win_score;             // untruncated random rows: the chunk's best z + G
  int32_t win_token;
  int32_t valid;               // tokens with a finite or +inf value
  int32_t nan;
  int32_t count;               // candidates the chunk wrote at the start of its region
};

struct MarginBand;  // margin_band.cuh

struct FastScratch {
  TileStat* stats;              // [rows, chunks]
  unsigned long long* cands;    // [rows, cand_stride]; chunk c writes from c * chunk_capacity
  int64_t cand_stride;
  int32_t* tiles_done;          // [rows] chunks finished (the last one runs stage 2 and resets it)
  int32_t* exact_flags;         // [rows] 1: stage 2 could not settle the row exactly
  // [rows] a flagged top-k row's k-th largest key of stage 2's sorted prefix (0: none). k of the
  // row's keys reach it, so the row's k-th largest does too: the exact path's split lists the keys
  // at or above it while it computes z, instead of a pass over the row in its last slice. The exact
  // kernel's job has null here when SONIC_CUDA_SPLIT_LIST=0.
  unsigned long long* exact_hints;
  // [rows] a flagged joint top-p row's margin band (margin_band.cuh; lo = 0: none), written with
  // its hint. The exact kernel's job has null here when SONIC_CUDA_SPLIT_LIST=0 or
  // SONIC_CUDA_SPLIT_BAND=0.
  MarginBand* bands;
  int32_t* flagged;             // [1] rows flagged in this call (the exact kernel resets it)
  unsigned long long* flagged_total;  // [1] rows flagged since the sampler was created
  int32_t* rows_done;           // [1] blocks finished by the exact kernel (its last block commits)
  int32_t tiles;                // tiles of a row for the call's dtype
  int32_t tiles_per_chunk;
  int32_t chunks;               // ceil(tiles / tiles_per_chunk) <= kMaxChunks
  int32_t chunk_capacity;       // chunk c's candidates start at c * chunk_capacity in the row's list
  // Row tails (0: none): the call's chunks alternate heads and tails, chunk 2c being head c of a
  // row (tiles_per_chunk tiles from tiles_per_chunk * c) and chunk 2c + 1 its tail. A row with rules
  // (RowPrologue::has_rules, the expensive ones) keeps tail_first tiles of each chunk in the head
  // and gives the rest to the tail; any other row has its chunks in the heads alone (tails empty).
  // Then chunk_capacity is tail_first * tile_candidates. The heads are one grid (placed as a call
  // without tails would be) and the tails a second one (tail_launch = 1), launched as its
  // programmatic dependent: its blocks take the slots that the first grid leaves or frees.
  int32_t tail_first;
  int32_t tail_launch;          // 1 in the second grid of a call with row tails: its blocks are the tails
  int32_t* tails_done;          // [1] that grid's blocks finished (its last one waits for the first grid)
  bool separate_stage2;         // stage 2 in row_stage2_kernel (small batches), not in the last block
  int32_t step_loads;           // kStepLoads, or kShortStepLoads for 16-bit logits in small calls
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
  int32_t* rank;            // [B, out_stride] or null
  int32_t* top_ids;         // [B, out_stride, top_stride] or null (with top_logprobs)
  float* top_logprobs;
  int64_t top_stride;
};

// The exact sampler's scratch for the rows it splits across blocks (exact_sample.cu, split_row): for
// a slot f < slots, a histogram by the keys' top 12 bits of the valid tokens' fixed-point masses,
// counts and best screened Gumbel score, the mass top-p measures against, the slices done and a NaN
// flag. A call that flags at most `rows` rows splits each across blocks, flagged row f in slot f; one
// that flags more gives each row one block, block b's rows one after the other in slot b (when the
// grid has at most `slots` blocks). Zero between rows: each row's last slice resets its slot.
constexpr int32_t kSplitBuckets = 4096;
struct SplitScratch {
  unsigned long long* mass;   // [slots, kSplitBuckets]
  uint32_t* count;            // [slots, kSplitBuckets]
  uint32_t* best;             // [slots, kSplitBuckets] order bits of the largest screened score, rounded up
  unsigned long long* total;  // [slots]
  int32_t* done;              // [slots]
  int32_t* nan;               // [slots]
  unsigned long long* list_rows;  // [1] rows decided from a SplitList since the sampler was created
  unsigned long long* band_rows;  // [1] of the others, rows decided from their MarginBand
  int32_t rows;               // rows split across blocks at most (0: none)
  int32_t slots;              // >= rows
};

// A split top-k row's list of its keys at or above stage 2's hint (FastScratch::exact_hints), in its
// slot's `mass` and `best` words, which top-k rows leave unused: the keys in mass, the count (which
// passes kSplitListKeys when the list overflows) in best[0]. The slot's reset zeroes both.
constexpr int32_t kSplitListKeys = kSplitBuckets;
struct SplitList {
  unsigned long long* keys;  // [kSplitListKeys]
  uint32_t* count;
};

// Slot f of a SplitScratch: its buckets and sums, and the list a top-k row keeps in its words.
struct SplitSlot {
  unsigned long long* mass;  // [kSplitBuckets]
  uint32_t* count;           // [kSplitBuckets]
  uint32_t* best;            // [kSplitBuckets]
  unsigned long long* total;
  int32_t* done;
  int32_t* nan;
  __host__ __device__ SplitList list() const { return SplitList{mass, best}; }
};
__host__ __device__ inline SplitSlot split_slot(const SplitScratch& s, int32_t f) {
  const int64_t b = static_cast<int64_t>(f) * kSplitBuckets;
  return SplitSlot{s.mass + b, s.count + b, s.best + b, s.total + f, s.done + f, s.nan + f};
}

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
  SplitScratch split;    // the exact sampler's, for rows it splits across blocks
  RowOutputs out;
  TopKJob top_k;    // k = 0: sampling or verification
  VerifyJob verify;  // num_requests = 0: sampling
  LogprobMode mode;
  bool advance_step;
  bool append_to_history;
};

// The fast path, one kernel: stage 1 on every chunk of every row, stage 2 in the last block of each row to
// finish. Rows it cannot settle are flagged in job.fast.exact_flags. Reads the request table only.
// With row tails (fast.tail_first) two launches, the second a programmatic dependent of the first
// when `programmatic`.
void launch_fast_sample(const RowJob& job, bool programmatic, cudaStream_t stream);

// Stage 2 of a call whose fast kernel ran with fast.separate_stage2: one block of kRowStage2Threads a
// row (four times the fast kernel's block), for batches too small to fill the device, where a row's
// stage 2 on one SM is most of the call. With programmatic (compute capability 9.0 and later), it is
// launched as a programmatic dependent of the fast kernel launched just before it on the stream.
constexpr int32_t kRowStage2Threads = 512;
void launch_row_stage2(const RowJob& job, bool programmatic, cudaStream_t stream);

// Experiments only: a kernel's preferred shared-memory carveout (percent of the SM's unified L1 and
// shared memory, cudaFuncAttributePreferredSharedMemoryCarveout; -1: no preference), which the
// backend sets from SONIC_CUDA_CARVEOUT. Perf-notes v3.18: is the SM configuration that a
// programmatically launched row_stage2 block inherits what slows its stage 2?
void set_fast_sample_carveout(int percent);
void set_row_stage2_carveout(int percent);
void set_exact_sample_carveout(int percent);

// Blocks of the fast kernel an SM holds at once for a dtype (sizes the chunks). Call once per device
// before launching: it also sets the kernel's shared-memory limit.
int fast_sample_blocks_per_sm(DType dtype);

// Top-k rows the fast kernel flagged (their top k is not inside the candidates): a radix select over
// the whole row, one block a row.
void launch_exact_top_k(const RowJob& job, cudaStream_t stream);

// The exact sampler over the flagged rows (a block a row at a time, at most max_blocks blocks, every
// rule of SPEC.md section 2 by full passes over the row), then the state updates of every row of the
// call: the emitted tokens join the histories and the steps advance, after every row has read them.
// With programmatic (devices of compute capability 9.0 and later), it is launched as a programmatic
// dependent of the kernel launched just before it on the stream (the fast kernel or row_stage2_kernel).
void launch_exact_sample(const RowJob& job, int32_t max_blocks, bool programmatic, cudaStream_t stream);
// Once per device before launching: the exact sampler's shared-memory limit (final distributions of
// any capacity the device holds, split rows' histograms).
void prepare_exact_sample(int device);
// The entries of a row's final distribution that the exact sampler's shared memory holds on `device`
// (8 bytes each): SamplerConfig::max_final_entries's limit on the CUDA backend.
int64_t exact_sample_final_capacity(int device);

}  // namespace sonic::cuda
