// The CUDA backend: the request table and workspace on the device, every step a fixed sequence of
// launches on the caller's stream (no host synchronisation, no allocation: CUDA-Graph capturable).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/device_allocations.hpp"
#include "cuda/margin_band.cuh"
#include "cuda/row_job.cuh"
#include "cuda/slot_table.hpp"
#include "host/backend.hpp"
#include "host/env_switches.hpp"
#include "host/validate.hpp"

namespace sonic {
namespace {

// Arrays handed to the CUDA backend must be reachable from the device.
void require_device(const void* ptr, const char* name) {
  if (!ptr) return;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
  }
  if (attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost)
    detail::invalid_argument(name, "a host pointer", "the CUDA backend needs device memory");
}

class CudaBackend final : public SamplerBackend {
 public:
  explicit CudaBackend(const SamplerConfig& config) : SamplerBackend(config), table_(config) {
    read_switches();  // first, so that a malformed value throws before anything is allocated
    const int64_t rows = config.max_rows;
    const int32_t V = config.vocab_size;
    // The fp32 tiling and the short 16-bit steps' have the most tiles (4096 tokens); 16-bit tiles
    // of full steps hold twice the tokens and candidates.
    const int64_t tiles32 = cuda::row_tiles(V, DType::kF32);
    const int64_t tiles16 = cuda::row_tiles(V, DType::kBF16);
    const int64_t tiles16_short = cuda::row_tiles(V, DType::kBF16, cuda::kShortStepLoads);
    const int64_t most_tiles = std::max(tiles32, tiles16_short);
    cand_stride_ = std::max({tiles32 * cuda::tile_candidates(DType::kF32), tiles16 * cuda::tile_candidates(DType::kBF16),
                             tiles16_short * cuda::tile_candidates(DType::kBF16, cuda::kShortStepLoads)});
    // Several heads a row (forced only) take regions of equal size, their tails too (row_tails_shape()):
    // half as much room again.
    if (tails_min_rows_ >= 0) cand_stride_ = cand_stride_ * 3 / 2;
    z_ = mem_.alloc<float>(rows * V);
    stats_ = mem_.alloc<cuda::TileStat>(rows * most_tiles);
    // Zeroed once: stage 2 loads a window of each chunk's slots before it knows how many are filled
    // (list_chunks_ahead), and masks the rest.
    cands_ = mem_.zeroed<unsigned long long>(rows * cand_stride_);
    // Counters: [0, rows) chunks done per row, then the rows flagged, the exact kernel's blocks done
    // and the row tails' grid's blocks done. Zero between calls: the kernels reset what they
    // count.
    counters_ = mem_.zeroed<int32_t>(rows + 3);
    // Rows flagged, then rows decided from a SplitList, then from a MarginBand.
    flagged_total_ = mem_.zeroed<unsigned long long>(3);
    exact_flags_ = mem_.alloc<int32_t>(rows);
    exact_hints_ = mem_.alloc<unsigned long long>(rows);
    bands_ = mem_.alloc<cuda::MarginBand>(rows);
    verdicts_ = mem_.alloc<cuda::RowVerdict>(rows);
    row_logprob_ = mem_.alloc<float>(rows);
    row_rank_ = mem_.alloc<int32_t>(rows);
    row_top_stride_ = std::max(config.max_top_logprobs, 1);
    row_top_ids_ = mem_.alloc<int32_t>(rows * row_top_stride_);
    row_top_logprobs_ = mem_.alloc<float>(rows * row_top_stride_);
    int sms = 0;
    SONIC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, config.device));
    sms_ = sms;
    // The exact sampler splits the flagged rows of a call that flags at most one row per SM across
    // its blocks (at least sms of them), a slot of scratch each; a call that flags more gives each
    // block a slot for its rows (one at a time), up to the largest grid it launches
    // (min(max(rows, sms), exact_blocks_)): 64 KB a slot, 17.3 MB at 264 slots (132 SMs).
    cuda::prepare_exact_sample(config.device);
    exact_blocks_ = 2 * sms;
    split_rows_ = sms;
    split_slots_ = static_cast<int32_t>(std::max<int64_t>(split_rows_, std::min<int64_t>(rows, exact_blocks_)));
    const size_t split_bins = static_cast<size_t>(split_slots_) * cuda::kSplitBuckets;
    split_mass_ = mem_.zeroed<unsigned long long>(split_bins);
    split_count_ = mem_.zeroed<uint32_t>(split_bins);
    split_best_ = mem_.zeroed<uint32_t>(split_bins);
    split_total_ = mem_.zeroed<unsigned long long>(split_slots_);
    split_flags_ = mem_.zeroed<int32_t>(2 * split_slots_);  // done, then nan
    int major = 0;
    SONIC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, config.device));
    // Programmatic dependent launch needs compute capability 9.0.
    programmatic_launch_ = major >= 9 && programmatic_switch_;
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16})
      resident_[static_cast<int>(d)] = sms * std::max(1, cuda::fast_sample_blocks_per_sm(d));
  }

  Backend kind() const override { return Backend::kCuda; }

  void admit(int32_t slot, const RequestParams& params, const int32_t* prompt, int64_t prompt_len,
             void* stream) override {
    table_.admit(slot, params, prompt, prompt_len, static_cast<cudaStream_t>(stream));
  }
  void retire(int32_t slot, void* stream) override {
    table_.retire(slot, static_cast<cudaStream_t>(stream));
  }
  void append_output(int32_t slot, const int32_t* tokens, int64_t count, void* stream) override {
    table_.append_output(slot, tokens, count, static_cast<cudaStream_t>(stream));
  }
  uint64_t step(int32_t slot) const override { return table_.step(slot); }
  uint64_t exact_path_rows() const override { return path_count(0); }
  uint64_t exact_path_list_rows() const override { return path_count(1); }
  uint64_t exact_path_band_rows() const override { return path_count(2); }

  void sample(const LogitsView& logits, const int32_t* slots, const BitmaskView& bitmask,
              const SampleOutputs& out, const CallOptions& options) override {
    require_device(logits.data, "logits.data");
    require_device(slots, "slots");
    require_device(bitmask.data, "bitmask.data");
    require_device(bitmask.row_index, "bitmask.row_index");
    require_device(out.tokens, "out.tokens");
    require_device(out.status, "out.status");
    require_device(out.logprob, "out.logprob");
    require_device(out.rank, "out.rank");
    require_device(out.top_ids, "out.top_ids");
    require_device(out.top_logprobs, "out.top_logprobs");
    require_device(out.final_ids, "out.final_ids");
    require_device(out.final_probs, "out.final_probs");
    require_device(out.final_count, "out.final_count");

    cuda::RowJob job = row_job(logits, &bitmask, options);
    job.slots = slots;
    job.out = cuda::RowOutputs{out.tokens,     out.status,       out.logprob,     out.rank,
                               out.top_ids,    out.top_logprobs, out.top_stride,  out.final_ids,
                               out.final_probs, out.final_count, out.final_stride, config_.max_final_entries};
    launch(job, options);
  }

  void top_k(const LogitsView& logits, int32_t k, const TopKOutputs& out, const CallOptions& options) override {
    require_device(logits.data, "logits.data");
    require_device(out.ids, "out.ids");
    require_device(out.values, "out.values");
    // Of the table only vocab_size is read; top-k rows have no rules, so no row tails.
    cuda::RowJob job = row_job(logits, nullptr, options, /*row_tails=*/false);
    job.top_k = cuda::TopKJob{k, out.ids, out.values, out.stride};
    const cudaStream_t stream = static_cast<cudaStream_t>(options.stream);
    job.fast.separate_stage2 = separate_stage2(job);
    cuda::launch_fast_sample(job, programmatic_launch_, stream);
    if (job.fast.separate_stage2) cuda::launch_row_stage2(job, programmatic_launch_, stream);
    cuda::launch_exact_top_k(job, stream);
  }

  void verify(const LogitsView& logits, const VerifyInputs& in, const BitmaskView& bitmask, const VerifyOutputs& out,
              const CallOptions& options) override {
    require_device(logits.data, "logits.data");
    require_device(in.cu_rows, "in.cu_rows");
    require_device(in.slots, "in.slots");
    require_device(in.draft_tokens, "in.draft_tokens");
    require_device(in.rules, "in.rules");
    require_device(in.draft_probs.dense, "in.draft_probs.dense");
    require_device(in.draft_probs.sparse_ids, "in.draft_probs.sparse_ids");
    require_device(in.draft_probs.sparse_probs, "in.draft_probs.sparse_probs");
    require_device(in.draft_probs.sparse_count, "in.draft_probs.sparse_count");
    require_device(bitmask.data, "bitmask.data");
    require_device(bitmask.row_index, "bitmask.row_index");
    require_device(out.tokens, "out.tokens");
    require_device(out.num_accepted, "out.num_accepted");
    require_device(out.status, "out.status");
    require_device(out.logprob, "out.logprob");
    require_device(out.rank, "out.rank");
    require_device(out.top_ids, "out.top_ids");
    require_device(out.top_logprobs, "out.top_logprobs");

    // Row tails in verification only where SONIC_CUDA_TAILS forces them (CudaVerifyTails tests that
    // path): their cost and gain on verification calls are not measured yet (perf-notes v3.24).
    cuda::RowJob job = row_job(logits, &bitmask, options, /*row_tails=*/tails_min_rows_ >= 0);
    // Per-row outputs are scratch: the commit turns the row verdicts into the request outputs.
    // Rank and top-N are written per row (by stage 2 or the exact path, as in sampling).
    job.out = cuda::RowOutputs{nullptr,
                               out.status,
                               out.logprob ? row_logprob_ : nullptr,
                               out.rank ? row_rank_ : nullptr,
                               out.top_ids ? row_top_ids_ : nullptr,
                               out.top_ids ? row_top_logprobs_ : nullptr,
                               row_top_stride_,
                               nullptr,
                               nullptr,
                               nullptr,
                               0,
                               0};
    job.verify = cuda::VerifyJob{in.num_requests, in.cu_rows,   in.slots,     in.draft_tokens,
                                 in.num_drafts_capacity,  in.rules,  in.draft_probs, config_.max_drafts,
                                 verdicts_,         out.tokens, out.num_accepted, out.out_stride, out.logprob,
                                 out.rank,          out.top_ids, out.top_logprobs, out.top_stride};
    if (in.num_requests == 0) return;
    launch(job, options);
  }

 private:
  // What every call's job holds: the logits, the bitmask (null for top_k), the request table, the
  // workspace (with row tails where scratch() gives them and row_tails allows) and the call's options.
  cuda::RowJob row_job(const LogitsView& logits, const BitmaskView* bitmask, const CallOptions& options,
                       bool row_tails = true) const {
    cuda::RowJob job{};
    job.logits = logits.data;
    job.dtype = logits.dtype;
    job.row_stride = logits.row_stride;
    job.rows = static_cast<int32_t>(logits.rows);
    if (bitmask) {
      job.bitmask = bitmask->data;
      job.bitmask_rows = bitmask->rows;
      job.bitmask_stride = bitmask->row_stride;
      job.bitmask_index = bitmask->row_index;
    }
    job.table = table_.view();
    job.z = z_;
    job.fast = scratch(logits.dtype, job.rows, row_tails);
    job.mode = options.logprob_mode;
    job.advance_step = options.advance_step;
    job.append_to_history = options.append_to_history;
    return job;
  }

  // A sampling or verification step: stage 1 + stage 2 settle most rows; the exact path takes the
  // rows they flag, on the device, then commits every row's state.
  void launch(cuda::RowJob job, const CallOptions& options) const {
    const cudaStream_t stream = static_cast<cudaStream_t>(options.stream);
    job.fast.separate_stage2 = separate_stage2(job);
    cuda::launch_fast_sample(job, programmatic_launch_, stream);
    if (job.fast.separate_stage2) cuda::launch_row_stage2(job, programmatic_launch_, stream);
    job.exact_flags = exact_flags_;
    if (!split_list_) job.fast.exact_hints = nullptr;
    if (!split_list_ || !split_band_) job.fast.bands = nullptr;
    job.split = cuda::SplitScratch{split_mass_, split_count_, split_best_, split_total_, split_flags_,
                                   split_flags_ + split_slots_, flagged_total_ + 1, flagged_total_ + 2,
                                   split_rows_, split_slots_};
    cuda::launch_exact_sample(job, exact_blocks_, programmatic_launch_, stream);
  }

  // Stage 2 in its own kernel (a block of 512 threads a row, one an SM for its registers) for calls
  // of at most a row an SM: a row's stage 2 in the fast kernel's last block (four warps) is then the
  // call's critical path while most SMs idle. Larger batches keep it in each row's last block: a
  // second wave of the separate kernel's blocks costs more than the narrower blocks. H200, V =
  // 151936, graph, each pair side by side: with the chunks of before, the separate kernel was as fast
  // or faster at every B <= 64 (fp32 B = 1 34.0 -> 25.0 us, B = 32 44.3 -> 39.6) and at B = 96; with
  // the one-wave chunks (ca525d3), B = 128 homogeneous fp32 55.1 -> 54.7, bf16 49.8 -> 48.9,
  // heterogeneous fp32 107.4 -> 103.6, bf16 105.0 -> 99.1, but B = 192 homogeneous fp32 66.6 -> 78.1,
  // heterogeneous 159.5 -> 168.0, and B = 512 127.9 -> 152.9. Two blocks an SM (64 registers, 216
  // bytes of spills; ca525d3's switch, since removed) lost 1-2 us at B <= 128 and won nowhere. A
  // call's shape decides it, never its data.
  bool separate_stage2(const cuda::RowJob& job) const { return separate_stage2(job.rows); }
  bool separate_stage2(int32_t rows) const {
    if (forced_separate_rows_ >= 0) return rows <= forced_separate_rows_;
    return rows <= sms_;
  }

  // The shape of a call with row tails: `heads` chunks a row (0: none), each of tiles_per_head tiles
  // (the last one shorter), of which a row with rules keeps tail_first in the head and gives the
  // rest to its tail. Chunk 2c is head c, chunk 2c + 1 its tail, and chunk k's candidates start at
  // k * tail_first * tile_candidates in the row's list: a head of a row without tails (a whole
  // chunk) may run into its own empty tail's region, no further (tail_first >= half a chunk), and
  // the last region must end within cand_stride_. A head keeps at least two tiles, the steps that
  // start_chunk issues before the request says how long the head is.
  struct RowTails {
    int32_t heads = 0, tiles_per_head = 0, tail_first = 0;
  };
  RowTails row_tails_shape(DType dtype, int32_t tiles, int32_t chunks) const {
    const int64_t tc = cuda::tile_candidates(dtype);
    for (int32_t wanted = std::min(chunks, cuda::kMaxChunks / 2); wanted >= 1; --wanted) {
      const int32_t per = (tiles + wanted - 1) / wanted;
      const int32_t heads = (tiles + per - 1) / per;
      if (per < 3) continue;
      int32_t first = std::clamp<int32_t>(per * head_percent_ / 100, 2, per - 1);
      if (heads > 1) first = std::max(first, (per + 1) / 2);
      int64_t need = 0;
      for (int32_t c = 0; c < heads; ++c) {
        const int32_t len = std::min(per, tiles - c * per);
        need = std::max(need, (2 * c * first + len) * tc);                                // head, whole chunk
        need = std::max(need, ((2 * c + 1) * first + std::max(0, len - first)) * tc);  // tail
      }
      if (need <= cand_stride_) return RowTails{heads, per, first};
    }
    return RowTails{};
  }

  // The fast kernel's workspace and shape for a call of `rows` rows of `dtype` logits. As many chunks a
  // row as keep every block of the call resident at once (rows * chunks <= the blocks the device
  // holds), a tile a chunk at most: one wave of blocks, none waiting for the first ones to end.
  // Small batches keep a block a tile for latency; chunks grow with the batch, up to a whole row a
  // block (B > 264 fp32 at V = 151936, 38 tiles). Measured against the rule before (about
  // rows * tiles / resident tiles a chunk, at most 16: 1.2 waves at B = 64 and 128, 2.9 at 512),
  // side by side, H200, V = 151936, graph: homogeneous fp32 B = 32 / 128 / 512 36.5 / 62.4 / 144.4 ->
  // 31.8 / 55.8 / 126.2 us, bf16 B = 512 123.9 -> 98.1; heterogeneous fp32 B = 128 116.4 -> 107.6,
  // but heterogeneous bf16 B = 32 46.6 -> 50.7 (its compute-bound screen gains from more warps an SM
  // more than it loses to a partial second wave).
  //
  // Small calls of 16-bit logits take short steps (four loads a lane, tiles of 4096 tokens as in
  // fp32), so that a row has twice the blocks: their screen is compute-bound and a block's tiles one
  // after the other are on the call's critical path. H200, V = 151936, graph, side by side
  // (docs/perf-notes.md v3.25): bf16 homogeneous B = 1 / 8 / 16 / 32 22.7 / 23.0 / 25.1 / 26.9 ->
  // 20.5 / 21.9 / 24.3 / 26.1 us, the mix 13.4 / 28.2 / 30.9 / 40.6 -> 11.7 / 24.1 / 31.4 / 38.6;
  // B = 64 homogeneous +0.9, the mix -1.5; B = 96-128 within 0.1 / +1.2; B = 256-512 homogeneous
  // +2.9 (the mix -2.6 / -4.8); fp16 alike (v3.26). Not with row tails (no kernel of short steps has them).
  cuda::FastScratch scratch(DType dtype, int32_t rows, bool row_tails) const {
    const int32_t V = config_.vocab_size;
    // Row tails forced by SONIC_CUDA_TAILS take precedence over short steps, which no tails kernel has.
    const bool tails_allowed = row_tails && forced_tiles_per_chunk_ <= 0 && head_percent_ > 0;
    const bool tails_forced = tails_allowed && tails_min_rows_ >= 0 && rows >= tails_min_rows_;
    const int32_t loads =
        dtype != DType::kF32 && rows <= short_step_rows_ && !tails_forced ? cuda::kShortStepLoads : cuda::kStepLoads;
    const int32_t tiles = cuda::row_tiles(V, dtype, loads);
    const int64_t resident = resident_[static_cast<int>(dtype)];
    int64_t chunks = forced_tiles_per_chunk_ > 0
                         ? (tiles + forced_tiles_per_chunk_ - 1) / forced_tiles_per_chunk_
                         : resident / std::max<int64_t>(rows, 1);
    chunks = std::clamp<int64_t>(chunks, 1, tiles);
    int32_t tiles_per_chunk = static_cast<int32_t>((tiles + chunks - 1) / chunks);  // evened out
    // Row tails: each chunk of a row with rules (penalties, token lists, a bitmask: the expensive
    // rows) gives its last quarter to a block of a second grid, which the hardware starts on the
    // first SM to free a slot, so that such rows end nearer the others (row_tails_shape()). By
    // default only where a row is a block's work (B > 264 fp32 or bf16 at V = 151936). H200, V =
    // 151936, graph, side by side (docs/perf-notes.md v3.23): the mix fp32 B = 384 / 448 / 512 / 1024
    // 167.3 / 188.0 / 192.9 / 362.0 -> 147.2 / 157.2 / 182.7 / 346.6 us, bf16 181.6 / 202.9 / 213.7 /
    // 415.7 -> 173.9 / 184.9 / 213.2 / 410.6; homogeneous rows (no tails) +0.6 to +2.0 us (about 1 us
    // of it the second grid's completion before the exact kernel's start, v3.24). A head of 75 % beat
    // 60 and 85. At two or three chunks a row (B = 133-264) tails lost as often as they won (v3.24:
    // the mix fp32 B = 192 -7 %, B = 256 +6 %, bf16 B = 160 -6 %, B = 256 +7 %, homogeneous +1-2 us).
    // fp16 alike (v3.26): the mix B = 320 / 384 / 448 / 512 168.9 / 174.2 / 194.8 / 204.6 -> 155.6 /
    // 171.2 / 180.9 / 208.1 us, homogeneous within 0.6.
    const bool tails = tails_min_rows_ >= 0 ? tails_forced
                                            : tails_allowed && chunks == 1 && !separate_stage2(rows) &&
                                                  loads == cuda::kStepLoads;
    const RowTails rt = tails ? row_tails_shape(dtype, tiles, static_cast<int32_t>(chunks)) : RowTails{};  // (full steps)
    if (rt.heads > 0) tiles_per_chunk = rt.tiles_per_head;
    const int64_t max_rows = config_.max_rows;
    cuda::FastScratch f{};
    f.stats = stats_;
    f.cands = cands_;
    f.cand_stride = cand_stride_;
    f.tiles_done = counters_;
    f.exact_flags = exact_flags_;
    f.exact_hints = exact_hints_;
    f.bands = bands_;
    f.flagged = counters_ + max_rows;
    f.flagged_total = flagged_total_;
    f.rows_done = counters_ + max_rows + 1;
    f.tiles = tiles;
    f.tiles_per_chunk = tiles_per_chunk;
    f.chunks = rt.heads > 0 ? 2 * rt.heads : (tiles + tiles_per_chunk - 1) / tiles_per_chunk;
    f.chunk_capacity = (rt.heads > 0 ? rt.tail_first : tiles_per_chunk) * cuda::tile_candidates(dtype, loads);
    f.tail_first = rt.heads > 0 ? rt.tail_first : 0;
    f.tail_launch = 0;
    f.tails_done = counters_ + max_rows + 2;
    f.step_loads = loads;
    return f;
  }

  // The switches for experiments and tests (README); tokens never depend on them.
  void read_switches() {
    using detail::env_int;
    using detail::env_int_list;
    constexpr int32_t kAnyRows = INT32_MAX;
    // "F,R,E": the fast, row stage-2 and exact kernels' preferred shared-memory carveouts in percent
    // (-1: no preference, the default). Kernel attributes: they hold for every sampler of the process
    // until set again.
    if (const auto c = env_int_list("SONIC_CUDA_CARVEOUT",
                                    {',', 3, {{-1, 100}, {-1, 100}, {-1, 100}}, "F,R,E percentages in [-1, 100]"})) {
      cuda::set_fast_sample_carveout((*c)[0]);
      cuda::set_row_stage2_carveout((*c)[1]);
      cuda::set_exact_sample_carveout((*c)[2]);
    }
    // Row tails (scratch()): "P" keeps P % of each chunk's tiles in the head of a row with rules (0:
    // no tails), "P:R" also gives rows tails in calls of R rows or more, where a row may have
    // several chunks.
    if (const auto t = env_int_list("SONIC_CUDA_TAILS", {':', 1, {{0, 100}, {0, kAnyRows}},
                                                         "P or P:R, P a percentage in [0, 100], R rows >= 0"})) {
      head_percent_ = (*t)[0];
      if (t->size() == 2) tails_min_rows_ = (*t)[1];
    }
    // A fixed chunk size in tiles (0: the rule; a row has at most kMaxChunks tiles).
    if (const auto n = env_int("SONIC_CUDA_TILES_PER_CHUNK", 0, cuda::kMaxChunks)) forced_tiles_per_chunk_ = *n;
    // Stage 2 in its own kernel for calls of at most this many rows (0: never).
    if (const auto n = env_int("SONIC_CUDA_SEPARATE_STAGE2_ROWS", 0, kAnyRows)) forced_separate_rows_ = *n;
    // Short 16-bit steps for calls of at most this many rows (0: never).
    if (const auto n = env_int("SONIC_CUDA_SHORT_STEP_ROWS", 0, kAnyRows)) short_step_rows_ = *n;
    // 0: plain launches in place of programmatic ones (a kernel then starts once the one before has
    // completed).
    if (const auto n = env_int("SONIC_CUDA_PROGRAMMATIC", 0, 1)) programmatic_switch_ = *n != 0;
    // 0: the exact path's split top-k rows ignore stage 2's hint (FastScratch::exact_hints): their
    // slices count keys by bucket and the last gathers in one pass over the row, as before the hint.
    if (const auto n = env_int("SONIC_CUDA_SPLIT_LIST", 0, 1)) split_list_ = *n != 0;
    // 0: the split's joint top-p rows ignore stage 2's margin band (FastScratch::bands) and decide
    // from the list as before it.
    if (const auto n = env_int("SONIC_CUDA_SPLIT_BAND", 0, 1)) split_band_ = *n != 0;
  }

  // Counter i of flagged_total_ (0: rows flagged, 1: rows decided from a SplitList, 2: from a
  // MarginBand), once the device is idle: the diagnostics' one read.
  uint64_t path_count(int i) const {
    unsigned long long n = 0;
    SONIC_CUDA_CHECK(cudaDeviceSynchronize());
    SONIC_CUDA_CHECK(cudaMemcpy(&n, flagged_total_ + i, sizeof n, cudaMemcpyDeviceToHost));
    return n;
  }

  // The device arrays below; whatever the constructor allocated before a throw is freed.
  cuda::DeviceAllocations mem_;
  cuda::DeviceSlotTable table_;
  float* z_ = nullptr;
  int64_t cand_stride_ = 0;  // candidates a row may hold
  int32_t sms_ = 0;
  bool programmatic_launch_ = false;  // the row stage-2 and exact kernels as programmatic dependents
  bool programmatic_switch_ = true;   // SONIC_CUDA_PROGRAMMATIC
  bool split_list_ = true;            // SONIC_CUDA_SPLIT_LIST
  bool split_band_ = true;            // SONIC_CUDA_SPLIT_BAND
  int32_t resident_[3] = {1, 1, 1};  // fast-kernel blocks the device holds at once, per dtype
  int32_t forced_tiles_per_chunk_ = 0;
  int32_t head_percent_ = 75, tails_min_rows_ = -1;  // SONIC_CUDA_TAILS
  int32_t forced_separate_rows_ = -1;  // -1: separate_stage2's rule
  int32_t short_step_rows_ = 32;       // 16-bit calls of at most this many rows take short steps (scratch())
  cuda::TileStat* stats_ = nullptr;
  unsigned long long* cands_ = nullptr;
  int32_t* counters_ = nullptr;
  unsigned long long* flagged_total_ = nullptr;
  int32_t* exact_flags_ = nullptr;
  unsigned long long* exact_hints_ = nullptr;  // FastScratch::exact_hints
  cuda::MarginBand* bands_ = nullptr;          // FastScratch::bands
  int32_t exact_blocks_ = 0;  // the exact sampler's largest grid
  int32_t split_rows_ = 0;    // the exact sampler's split rows (SplitScratch)
  int32_t split_slots_ = 0;   // and its scratch slots
  unsigned long long* split_mass_ = nullptr;
  uint32_t* split_count_ = nullptr;
  uint32_t* split_best_ = nullptr;
  unsigned long long* split_total_ = nullptr;
  int32_t* split_flags_ = nullptr;
  cuda::RowVerdict* verdicts_ = nullptr;  // verification: [max_rows]
  float* row_logprob_ = nullptr;          // verification: [max_rows] logprob of each row's token
  int32_t* row_rank_ = nullptr;           // verification: [max_rows] its rank
  int32_t* row_top_ids_ = nullptr;        // verification: [max_rows, row_top_stride_] the row's top-N
  float* row_top_logprobs_ = nullptr;
  int64_t row_top_stride_ = 1;
};

}  // namespace

namespace detail {
namespace {
// `device` (the argument `name`; >= 0, checked before) must be present.
void require_cuda_device(int32_t device, const char* name) {
  const int devices = cuda_device_count();
  if (devices == 0) throw Error(ErrorCode::kUnsupported, "sonic: config.backend = cuda: no CUDA device is present");
  if (device >= devices)
    invalid_argument(name, std::to_string(device),
                     "must be < " + std::to_string(devices) + " (the CUDA devices present)");
}

// The exact sampler holds a row's final distribution in shared memory: a larger max_final_entries
// would fail its launch in the middle of a call, after the fast kernel's. `device` must be current
// (the kernel's static shared memory is read there).
int32_t final_capacity(int32_t device) {
  return static_cast<int32_t>(std::min<int64_t>(cuda::exact_sample_final_capacity(device), INT32_MAX));
}

// Makes `device` current while it lives, then puts the caller's back: a query leaves the thread's
// device as it found it.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    SONIC_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ == device) {
      previous_ = -1;  // nothing to put back
    } else {
      SONIC_CUDA_CHECK(cudaSetDevice(device));
    }
  }
  ~CurrentDevice() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};
}  // namespace

// detail::top_p_sum_margin's budget holds for vocabularies up to 2^18 (the mass-weighted depth of
// the sums' terms grows with V): tests/cpu/test_token_rules.cpp's TopPSumMargin checks it there.
static_assert(cuda::kMaxVocab <= 262144, "top_p_sum_margin's budget is checked up to V = 2^18");

std::unique_ptr<SamplerBackend> make_cuda_backend(const SamplerConfig& config) {
  require_cuda_device(config.device, "config.device");
  if (config.vocab_size > cuda::kMaxVocab)
    invalid_argument("config.vocab_size", std::to_string(config.vocab_size),
                     "the CUDA backend takes at most " + std::to_string(cuda::kMaxVocab) + " tokens");
  // A grid's y dimension is at most 65535, and the fast kernel's grid has a row a y index (rows along
  // x were slower for the mix: perf-notes v3.23).
  if (config.max_rows > cuda::kMaxRows)
    invalid_argument("config.max_rows", std::to_string(config.max_rows),
                     "the CUDA backend takes at most " + std::to_string(cuda::kMaxRows) + " rows a call");
  SONIC_CUDA_CHECK(cudaSetDevice(config.device));
  const int32_t capacity = final_capacity(config.device);
  if (config.max_final_entries > capacity)
    invalid_argument("config.max_final_entries", std::to_string(config.max_final_entries),
                     "the CUDA backend keeps at most " + std::to_string(capacity) +
                         " entries a row on this device (the exact sampler's shared memory)");
  return std::make_unique<CudaBackend>(config);
}

int32_t cuda_max_final_entries(int32_t device) {
  require_cuda_device(device, "device");
  const CurrentDevice current(device);
  return final_capacity(device);
}
}  // namespace detail

}  // namespace sonic
