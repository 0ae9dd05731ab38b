// sonic_bench --timeline N, in a build configured with -DSONIC_TIMELINE=ON: N calls (eager, or each
// replayed from a graph of its own with --timeline-graph 1) and, for each, the phases of the fast
// and exact kernels from their blocks' marks (src/cuda/timeline.cuh), relative to the first block's
// start. Prints the median over the calls of every phase, in µs, and the spread of the call's end.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda/timeline.cuh"

namespace timeline {

using sonic::cuda::kTimelineBlocks;
using sonic::cuda::kTimelineColumns;
using sonic::cuda::kTimelineMarks;
using sonic::cuda::kTimelineValues;

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The mean, the 90th percentile (nearest rank) and the largest of v: what a median leaves out.
struct Spread {
  double mean = 0, p90 = 0, max = 0;
};
inline Spread spread(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  s.p90 = v[(v.size() * 9 + 9) / 10 - 1];
  s.max = v.back();
  return s;
}

// The phases of one call, in µs.
struct Phases {
  double last_start = 0;                          // the last fast-kernel block starts (launch spread)
  double request = 0, screen = 0, chunk_end = 0;  // stage 1, the median block
  double last_chunk = 0;                          // the last chunk of any row is counted
  double stage2[kTimelineMarks] = {};             // stage 2 of the row done last: each mark after the one before
  double fast_end = 0;                            // the fast kernel's last block leaves
  double exact_start = 0, exact_end = 0;          // the exact kernel's first start, last exit
  // Split rows (exact kernel): the median slice's entry to its count, the last slice counted, and
  // the phases of the last row's last slice, each mark after the one before (0: no split row).
  double slice = 0, last_slice = 0, split[kTimelineMarks] = {};
  double row_stage2_start = 0, row_stage2_end = 0;  // row_stage2_kernel's (small batches; 0: not run)
  // Its blocks' residency (entry): the first, the median, and that of the row done last; and how
  // many were resident before the fast kernel's last block left.
  double wide_entry_first = 0, wide_entry_median = 0, wide_entry_last_row = 0, wide_early = 0;
  double resolution = 0;                          // smallest nonzero difference between two marks seen
  double value[kTimelineValues] = {};             // the values of the row done last (timeline.cuh)
  double stage2_ghz = 0;                          // its SM's clock rate through stage 2
  // row_stage2_kernel's row done last: its first and last warp's arrival at the barrier that ends
  // each phase with warp stamps (timeline_warp_arrive), after the phase's start (0: none).
  double warp_first[kTimelineMarks] = {}, warp_last[kTimelineMarks] = {};
  // Its merge phase's points (timeline.cuh's TimelineWarpPoint), first and last warp to reach each,
  // after the phase's start (0: none).
  double point_first[sonic::cuda::kTimelineWarpPoints] = {}, point_last[sonic::cuda::kTimelineWarpPoints] = {};
  // Its serial steps, after their phase's start: warp 0's bin search done (threshold), the kept set
  // decided (warp 0's decision; decided); 0: not reached.
  double bin_found = 0, decided = 0;
  // Blocks of each kernel (fast, row_stage2, exact) on the SM of that row's block while its stage 2
  // ran (from its request again to its exit), its own block left out.
  double beside_fast = 0, beside_wide = 0, beside_exact = 0;
  // When the fast kernel's blocks counted their chunks: percentiles over the blocks, and the mean
  // over the blocks of SMs that ran 1, 2, ... kMaxPerSm of them in the call (with one wave, the
  // blocks an SM held at once), with how many SMs ran that many.
  static constexpr int kMaxPerSm = 8;
  double chunk_p10 = 0, chunk_p50 = 0, chunk_p90 = 0;
  double chunk_by_load[kMaxPerSm + 1] = {}, sms_by_load[kMaxPerSm + 1] = {};
};

inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// The phases that end in a barrier with warp stamps, and the thread-0 mark each starts at. The
// sampling rows of wide blocks also stamp their warps at the barrier after the draw (row "sampled",
// from the decided mark) and once their outputs are issued (row "exit", from the sampled mark).
constexpr int kWarpStamped[][2] = {{sonic::cuda::kMarkMerged, sonic::cuda::kMarkStage2},
                                   {sonic::cuda::kMarkThreshold, sonic::cuda::kMarkListed},
                                   {sonic::cuda::kMarkStaged, sonic::cuda::kMarkThreshold},
                                   {sonic::cuda::kMarkGathered, sonic::cuda::kMarkStaged},
                                   {sonic::cuda::kMarkDecided, sonic::cuda::kMarkGathered},
                                   {sonic::cuda::kMarkSampled, sonic::cuda::kMarkDecided},
                                   {sonic::cuda::kMarkExit, sonic::cuda::kMarkSampled}};

// fast, exact, wide: the tables of the fast kernel, the exact kernel and row_stage2_kernel; warps:
// row_stage2_kernel's warp stamps ([block][mark][warp]).
inline Phases phases_of(const std::vector<unsigned long long>& fast, const std::vector<unsigned long long>& exact,
                        const std::vector<unsigned long long>& wide, const std::vector<unsigned long long>& warps) {
  using namespace sonic::cuda;
  auto at = [](const std::vector<unsigned long long>& t, int b, int m) { return t[static_cast<size_t>(b) * kTimelineColumns + m]; };
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < kTimelineBlocks; ++b)
    if (at(fast, b, kMarkEntry)) t0 = std::min(t0, at(fast, b, kMarkEntry));
  Phases p;
  if (t0 == ~0ull) return p;
  auto us = [&](unsigned long long t) { return t ? 1e-3 * static_cast<double>(t - t0) : 0.0; };
  // Signed: a phase counted from another block's mark may start before it.
  auto span = [](unsigned long long a, unsigned long long b) {
    return a && b ? 1e-3 * static_cast<double>(static_cast<long long>(b - a)) : 0.0;
  };
  std::vector<double> request, screen, chunk_end;
  unsigned long long last_exit = 0, least = ~0ull;
  int last_row_block = -1;
  unsigned long long last_chunk = 0;
  for (int b = 0; b < kTimelineBlocks; ++b) {
    if (!at(fast, b, kMarkEntry)) continue;
    p.last_start = std::max(p.last_start, us(at(fast, b, kMarkEntry)));
    request.push_back(span(at(fast, b, kMarkEntry), at(fast, b, kMarkScreening)));
    screen.push_back(span(at(fast, b, kMarkScreening), at(fast, b, kMarkScreened)));
    chunk_end.push_back(span(at(fast, b, kMarkScreened), at(fast, b, kMarkChunkDone)));
    last_chunk = std::max(last_chunk, at(fast, b, kMarkChunkDone));
    last_exit = std::max(last_exit, at(fast, b, kMarkExit));
    if (at(fast, b, kMarkStage2) && (last_row_block < 0 || at(fast, b, kMarkExit) > at(fast, last_row_block, kMarkExit)))
      last_row_block = b;
    unsigned long long prev = 0;
    for (int m = 0; m < kTimelineMarks; ++m) {
      const unsigned long long c = at(fast, b, m);
      if (!c) continue;
      if (prev && c > prev) least = std::min(least, c - prev);
      prev = c;
    }
  }
  p.last_chunk = us(last_chunk);
  {  // the spread of chunk ends, and by how many blocks their SM ran
    std::vector<double> ends;
    std::vector<int> per_sm(1024, 0);
    for (int b = 0; b < kTimelineBlocks; ++b) {
      if (!at(fast, b, kMarkChunkDone)) continue;
      ends.push_back(us(at(fast, b, kMarkChunkDone)));
      const unsigned long long sm = at(fast, b, kTimelineMarks + kValueSm);
      if (sm && sm <= per_sm.size()) ++per_sm[sm - 1];
    }
    p.chunk_p10 = percentile(ends, 0.1);
    p.chunk_p50 = percentile(ends, 0.5);
    p.chunk_p90 = percentile(ends, 0.9);
    double n_by_load[Phases::kMaxPerSm + 1] = {};
    for (int b = 0; b < kTimelineBlocks; ++b) {
      const unsigned long long sm = at(fast, b, kTimelineMarks + kValueSm);
      if (!at(fast, b, kMarkChunkDone) || !sm || sm > per_sm.size()) continue;
      const int load = std::min(per_sm[sm - 1], Phases::kMaxPerSm);
      p.chunk_by_load[load] += us(at(fast, b, kMarkChunkDone));
      n_by_load[load] += 1;
    }
    for (int l = 1; l <= Phases::kMaxPerSm; ++l) {
      if (n_by_load[l] > 0) p.chunk_by_load[l] /= n_by_load[l];
      p.sms_by_load[l] = n_by_load[l] / l;
    }
  }
  // Stage 2 ran in row_stage2_kernel when its table has marks: the row done last there, its first
  // phase counted from the last chunk's end (it includes the launch gap).
  const std::vector<unsigned long long>* rows = &fast;
  unsigned long long wide_start = ~0ull, wide_end = 0;
  int wide_last = -1;
  for (int b = 0; b < kTimelineBlocks; ++b) {
    if (!at(wide, b, kMarkStage2)) continue;
    wide_start = std::min(wide_start, at(wide, b, kMarkStage2));
    wide_end = std::max(wide_end, at(wide, b, kMarkExit));
    if (wide_last < 0 || at(wide, b, kMarkExit) > at(wide, wide_last, kMarkExit)) wide_last = b;
  }
  if (wide_last >= 0) {
    rows = &wide;
    last_row_block = wide_last;
    p.row_stage2_start = us(wide_start);
    p.row_stage2_end = us(wide_end);
    std::vector<double> entries;
    unsigned long long first = ~0ull;
    for (int b = 0; b < kTimelineBlocks; ++b) {
      const unsigned long long e = at(wide, b, kMarkEntry);
      if (!e) continue;
      entries.push_back(us(e));
      first = std::min(first, e);
      if (e < last_exit) p.wide_early += 1;
    }
    p.wide_entry_first = first == ~0ull ? 0.0 : us(first);
    p.wide_entry_median = median(entries);
    p.wide_entry_last_row = us(at(wide, wide_last, kMarkEntry));
    {  // who shared its SM during its stage 2
      const unsigned long long sm = at(wide, wide_last, kTimelineMarks + kValueSm);
      const unsigned long long from = at(wide, wide_last, kMarkStage2), to = at(wide, wide_last, kMarkExit);
      auto beside = [&](const std::vector<unsigned long long>& t, int skip) {
        double n = 0;
        for (int b = 0; b < kTimelineBlocks; ++b) {
          const unsigned long long e = at(t, b, kMarkEntry), x = at(t, b, kMarkExit);
          if (b != skip && e && sm && at(t, b, kTimelineMarks + kValueSm) == sm && e < to && (!x || x > from)) n += 1;
        }
        return n;
      };
      p.beside_fast = beside(fast, -1);
      p.beside_wide = beside(wide, wide_last);
      p.beside_exact = beside(exact, -1);
    }
    p.bin_found = span(at(wide, wide_last, kMarkListed), at(wide, wide_last, kTimelineMarks + kValueBinFound));
    p.decided = span(at(wide, wide_last, kMarkGathered), at(wide, wide_last, kTimelineMarks + kValueDecided));
    // The first and last of the warps' stamps in row `row` (a mark or kTimelineMarks + a point) after `start`.
    auto warp_spread = [&](int row, unsigned long long start, double* first_us, double* last_us) {
      unsigned long long first = ~0ull, last = 0;
      for (int w = 0; w < kTimelineWarps; ++w) {
        const unsigned long long t = warps[(static_cast<size_t>(wide_last) * kTimelineWarpRows + row) * kTimelineWarps + w];
        if (!t) continue;
        first = std::min(first, t);
        last = std::max(last, t);
      }
      if (last && start) {
        *first_us = span(start, first);
        *last_us = span(start, last);
      }
    };
    if (wide_last < kTimelineWarpBlocks) {
      for (const auto& [m, from] : kWarpStamped) warp_spread(m, at(wide, wide_last, from), &p.warp_first[m], &p.warp_last[m]);
      // Each point after the start of its phase: merge, then sorted (noise), then decided.
      for (int q = 0; q < kTimelineWarpPoints; ++q) {
        const int from = q < sonic::cuda::kMergePoints ? kMarkStage2 : q == sonic::cuda::kPointNoiseDrawn ? kMarkStaged : kMarkGathered;
        warp_spread(kTimelineMarks + q, at(wide, wide_last, from), &p.point_first[q], &p.point_last[q]);
      }
    }
  }
  p.request = median(request);
  p.screen = median(screen);
  p.chunk_end = median(chunk_end);
  if (last_row_block >= 0) {
    unsigned long long prev = rows == &wide ? last_chunk : at(fast, last_row_block, kMarkChunkDone);
    for (int m = kMarkStage2; m < kTimelineMarks; ++m) {
      const unsigned long long c = at(*rows, last_row_block, m);
      if (!c) continue;
      p.stage2[m] = span(prev, c);
      prev = c;
    }
    for (int v = 0; v < kTimelineValues; ++v) p.value[v] = static_cast<double>(at(*rows, last_row_block, kTimelineMarks + v));
    const double ns = static_cast<double>(at(*rows, last_row_block, kMarkExit) - at(*rows, last_row_block, kMarkStage2));
    const double cycles = p.value[kValueClockExit] - p.value[kValueClockStage2];
    p.stage2_ghz = ns > 0 && cycles > 0 ? cycles / ns : 0.0;
  }
  p.fast_end = us(last_exit);
  unsigned long long x0 = ~0ull, x1 = 0;
  for (int b = 0; b < kTimelineBlocks; ++b) {
    if (at(exact, b, kMarkEntry)) x0 = std::min(x0, at(exact, b, kMarkEntry));
    x1 = std::max(x1, at(exact, b, kMarkExit));
  }
  if (x0 != ~0ull) {
    p.exact_start = us(x0);
    p.exact_end = us(x1);
  }
  std::vector<double> slices;
  int last_slice = -1;
  unsigned long long counted = 0;
  for (int b = 0; b < kTimelineBlocks; ++b) {
    if (!at(exact, b, kMarkChunkDone)) continue;
    slices.push_back(span(at(exact, b, kMarkEntry), at(exact, b, kMarkChunkDone)));
    counted = std::max(counted, at(exact, b, kMarkChunkDone));
    if (at(exact, b, kMarkMerged) && (last_slice < 0 || at(exact, b, kMarkExit) > at(exact, last_slice, kMarkExit)))
      last_slice = b;
  }
  p.slice = median(slices);
  p.last_slice = us(counted);
  if (last_slice >= 0) {
    unsigned long long prev = at(exact, last_slice, kMarkChunkDone);
    for (int m = kMarkMerged; m < kTimelineMarks; ++m) {
      const unsigned long long c = at(exact, last_slice, m);
      if (!c) continue;
      p.split[m] = span(prev, c);
      prev = c;
    }
  }
  p.resolution = least == ~0ull ? 0.0 : 1e-3 * static_cast<double>(least);
  return p;
}

// With SONIC_TIMELINE_RAW=FILE, every fast-kernel block of the call as one line appended to FILE:
// the label, the call, the block, its SM (-1: unknown) and each mark in ns after the call's first
// block started (-1: not reached); for block-level questions the medians cannot answer (which blocks
// end last, and what their SM ran beside them).
inline void dump_raw(const std::string& label, int call, const std::vector<unsigned long long>& fast) {
  const char* path = std::getenv("SONIC_TIMELINE_RAW");
  if (!path || !*path) return;
  using namespace sonic::cuda;
  auto at = [&](int b, int m) { return fast[static_cast<size_t>(b) * kTimelineColumns + m]; };
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < kTimelineBlocks; ++b)
    if (at(b, kMarkEntry)) t0 = std::min(t0, at(b, kMarkEntry));
  if (t0 == ~0ull) return;
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  for (int b = 0; b < kTimelineBlocks; ++b) {
    if (!at(b, kMarkEntry)) continue;
    const unsigned long long sm = at(b, kTimelineMarks + kValueSm);
    std::fprintf(f, "%s\t%d\t%d\t%lld", label.c_str(), call, b, sm ? static_cast<long long>(sm) - 1 : -1ll);
    for (int m = 0; m < kTimelineMarks; ++m) {
      const unsigned long long c = at(b, m);
      std::fprintf(f, "\t%lld", c ? static_cast<long long>(c - t0) : -1ll);
    }
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}

// call(i) runs one eager call on rotating buffer i.
template <class Call>
void report(const std::string& label, int calls, int nbuf, Call call) {
  std::vector<unsigned long long> fast(static_cast<size_t>(kTimelineBlocks) * kTimelineColumns), exact(fast.size()),
      wide(fast.size());
  std::vector<unsigned long long> warps(static_cast<size_t>(sonic::cuda::kTimelineWarpBlocks) *
                                        sonic::cuda::kTimelineWarpColumns);
  auto read_all = [&] {
    sonic_timeline_read(0, fast.data(), kTimelineBlocks);
    sonic_timeline_read(1, exact.data(), kTimelineBlocks);
    sonic_timeline_read(2, wide.data(), kTimelineBlocks);
    sonic_timeline_read_warps(warps.data(), sonic::cuda::kTimelineWarpBlocks);
  };
  read_all();  // clears what the timing left
  std::vector<Phases> all;
  for (int c = 0; c < calls; ++c) {
    call(c % nbuf);
    read_all();
    dump_raw(label, c, fast);
    all.push_back(phases_of(fast, exact, wide, warps));
  }
  auto per_call = [&](auto value) {
    std::vector<double> v;
    for (const Phases& p : all) v.push_back(value(p));
    return v;
  };
  auto med = [&](auto value) { return median(per_call(value)); };
  auto field = [&](double Phases::*f) { return med([f](const Phases& p) { return p.*f; }); };
  std::printf(
      "timeline %s (median of %d calls, us from the first block's start; marks resolve %.3f us):\n"
      "  fast kernel: last block starts +%.2f; stage 1 (median block): request %.2f, screen %.2f, chunk end %.2f;"
      " last chunk counted +%.2f\n  stage 2 of the row done last:",
      label.c_str(), calls, field(&Phases::resolution), field(&Phases::last_start), field(&Phases::request),
      field(&Phases::screen), field(&Phases::chunk_end), field(&Phases::last_chunk));
  for (int m = sonic::cuda::kMarkStage2; m < kTimelineMarks; ++m) {
    const double d = med([m](const Phases& p) { return p.stage2[m]; });
    if (d > 0) std::printf(" %s %.2f,", sonic::cuda::kTimelineMarkNames[m], d);
  }
  std::printf(" fast kernel ends +%.2f\n", field(&Phases::fast_end));
  if (field(&Phases::row_stage2_end) > 0)
    std::printf("  row_stage2_kernel: blocks resident from +%.2f (median +%.2f, the last row's +%.2f; %.0f before the fast"
                " kernel's last block left), first block starts +%.2f, last leaves +%.2f\n",
                field(&Phases::wide_entry_first), field(&Phases::wide_entry_median), field(&Phases::wide_entry_last_row),
                field(&Phases::wide_early), field(&Phases::row_stage2_start), field(&Phases::row_stage2_end));
  if (field(&Phases::row_stage2_end) > 0)
    std::printf("  beside the row done last on its SM during its stage 2: %.0f fast, %.0f row_stage2, %.0f exact blocks\n",
                field(&Phases::beside_fast), field(&Phases::beside_wide), field(&Phases::beside_exact));
  if (field(&Phases::row_stage2_end) > 0) {
    std::printf("  its warps at the phases' barriers (first / last arrival after the phase's start):");
    for (const auto& [m, from] : kWarpStamped) {
      (void)from;
      const double last = med([m = m](const Phases& p) { return p.warp_last[m]; });
      if (last != 0)
        std::printf(" %s %.2f / %.2f,", sonic::cuda::kTimelineMarkNames[m],
                    med([m = m](const Phases& p) { return p.warp_first[m]; }), last);
    }
    std::printf(" the bin found %.2f, the kept set decided %.2f\n", field(&Phases::bin_found), field(&Phases::decided));
    std::printf("  its merge phase, warp by warp (first / last warp after the phase's start):");
    auto points = [&](int from, int to) {
      for (int q = from; q < to; ++q)
        std::printf(" %s %.2f / %.2f%s", sonic::cuda::kTimelineWarpPointNames[q],
                    med([q](const Phases& p) { return p.point_first[q]; }),
                    med([q](const Phases& p) { return p.point_last[q]; }), q + 1 < to ? "," : "");
    };
    points(0, sonic::cuda::kMergePoints);
    std::printf(" (statistics to sums: warp 0; the others: the listing warps)\n");
    std::printf("  its sorted and decided phases (first / last warp after the phase's start):");
    points(sonic::cuda::kMergePoints, sonic::cuda::kTimelineWarpPoints);
    std::printf(" (noise: the warps with noise threads; masses: warp 0; winners: warp 1)\n");
  }
  std::printf("  exact kernel: first block starts +%.2f, last leaves +%.2f\n", field(&Phases::exact_start),
              field(&Phases::exact_end));
  // The medians above miss a path that only some calls take, and the benchmark's mean does not
  // (v3.52: screened-after v3's out-of-line check, for rows of more than 32 kept keys: by a model,
  // 7 % of the calls at B = 1 and 43 % at B = 8).
  const Spread end = spread(per_call([](const Phases& p) { return p.exact_end; }));
  const Spread kept = spread(per_call([](const Phases& p) { return p.value[sonic::cuda::kValueKept]; }));
  std::printf("  over the calls: the exact kernel's last block leaves at mean +%.2f, p90 +%.2f, latest +%.2f;"
              " the row done last keeps %.1f keys on average, at most %.0f\n",
              end.mean, end.p90, end.max, kept.mean, kept.max);
  if (field(&Phases::last_slice) > 0) {
    std::printf("  split rows: median slice %.2f (entry to counted), last slice counted +%.2f; the last row's last slice:",
                field(&Phases::slice), field(&Phases::last_slice));
    for (int m = sonic::cuda::kMarkMerged; m < kTimelineMarks; ++m) {
      const double d = med([m](const Phases& p) { return p.split[m]; });
      // A list row's ranks reuse stage 2's gather marks (timeline.cuh).
      const char* name = m == sonic::cuda::kMarkThreshold ? "masses"
                         : m == sonic::cuda::kMarkStaged  ? "ranked"
                         : m == sonic::cuda::kMarkGathered ? "top-k cut"
                                                           : sonic::cuda::kTimelineMarkNames[m];
      if (d > 0) std::printf(" %s %.2f,", name, d);
    }
    std::printf("\n");
  }
  std::printf("  chunk counted (over the blocks): p10 +%.2f, p50 +%.2f, p90 +%.2f, last +%.2f; mean by the blocks their SM ran:",
              field(&Phases::chunk_p10), field(&Phases::chunk_p50), field(&Phases::chunk_p90), field(&Phases::last_chunk));
  for (int l = 1; l <= Phases::kMaxPerSm; ++l) {
    const double sms = med([l](const Phases& p) { return p.sms_by_load[l]; });
    if (sms > 0)
      std::printf(" %d: +%.2f (%.0f SMs)", l, med([l](const Phases& p) { return p.chunk_by_load[l]; }), sms);
  }
  std::printf("\n");
  using namespace sonic::cuda;
  auto value = [&](int v) { return med([v](const Phases& p) { return p.value[v]; }); };
  std::printf("  that row: %.0f candidates, %.0f at or above the bound, a prefix of %.0f, %.0f kept; SM clock %.2f GHz in stage 2\n",
              value(kValueCandidates), value(kValueAtBound), value(kValuePrefix), value(kValueKept),
              field(&Phases::stage2_ghz));
  std::fflush(stdout);
}

}  // namespace timeline
