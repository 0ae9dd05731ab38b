// A CPU model of stage 1's candidate screen at one tile a chunk (small batches, where each of a
// row's chunks is one tile of 4096 ids screened by four warps of one group each), to predict what a
// change of the screen's bound does to stage 2's work before timing it (perf-notes v3.28 to v3.30).
// For each row: the candidates the chunks list, how many lie at or above the row's bound (what
// stage 2 lists again), and whether the row escapes to the exact path: its needed prefix reaches
// below the row's bound, or that prefix would pass stage 2's 768 keys (top-k rows cut theirs by a
// histogram where the row has a bound).
//
// A warp's group is 1024 ids; lane l holds ids base + 128 i + 4 l + j (i < 8, j < 4), as fp32's
// 16-byte loads place them (src/cuda/tile_loader.cuh). Each lane keeps its three largest valid
// values; the warp's bound is one of:
//   lanes: just above the largest of the lanes' fourth values (main until v3.32: no lane holds four above it);
//   rank r: the r-th largest of the lanes' kept values (docs/experiments/warp-rank-bound-v2.patch),
//           r fixed (9 in top-k rows, 16 in others) or following V as its screen_rank does, with 9
//           or 12 in top-k rows (main takes 12 since rank-bound-v3.patch merged), the lanes' bound where the warp
//           keeps fewer than r; a lane with four or more at or above the bound ("crowded") lists
//           them all ("listed", wrB) or the bound rises above the crowded lanes' fourth values
//           ("unlisted", wrN). main's sparse groups (rank-bound-v3.patch, merged) list every valid token instead.
// The chunk's four warps share their bounds (the largest), as they mostly do at B = 1.
//
//   sonic_screen_model [ROWS [V]]   (ROWS a case, default 50; V default 151936; one line a case and
//                                    bound)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr int kTile = 4096, kGroup = 1024;
int vocab = 151936;  // V (main's second argument)

struct Bound {
  std::string name;
  int top_k_rank;  // 0: the lanes' bound
  int row_rank;
  bool by_v;       // the ranks as screen_rank picks them for the row's top-k and V
  bool listed;     // crowded lanes list all their tokens at or above the bound (else the bound rises)
  int sparse;      // in rows with a rank, a warp's group of at most 96 valid tokens whose lanes
                   // keep fewer than `sparse` values (at most 96) lists them all and sets no bound
                   // (main, from rank-bound-v3.patch: 36; 0: never; 97: whatever the lanes keep); a warp
                   // keeping fewer than r values takes the lanes' bound
};

struct Case {
  std::string name;
  int kind;   // 0 peaked (3 N(0,1), +10 on five ids), 1 flat N(0,1), 2 peaked with a run of ten
              // neighbouring ids on top (digit tokens after "19"), 3 flat, 4 a grammar's mask: -inf
              // but for one to three runs of 4-40 neighbouring ids and a few scattered ids, 2 N(0,1);
              // 5 and 6 random masks allowing 8 % and 3 % of the ids, 2 N(0,1)
  int top_k;  // top-k k (needs its top k), or 0: top-p alone (needs its nucleus + 1)
  double top_p;
};

struct Tally {
  double candidates = 0, at_bound = 0;
  int escaped = 0;
  int below_bound = 0;  // of those, rows whose needed prefix reaches below the row's bound
  int with_mass_cut = 0;  // rows escaping if stage 2 cut top-p rows' prefixes by mass as top-k rows'
                          // by count: below the bound, or a nucleus past 768 keys
};

std::vector<float> make_row(int kind, std::mt19937_64& g) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(vocab);
  for (float& v : x) v = (kind == 1 || kind == 3) ? n(g) : 3.0f * n(g);
  if (kind == 0 || kind == 2)
    for (int i = 0; i < 5; ++i) x[g() % vocab] += 10.0f;
  if (kind == 2) {
    const int at = static_cast<int>(g() % (vocab - 10));
    for (int i = 0; i < 10; ++i) x[at + i] = 14.0f + n(g);
  }
  if (kind == 4) {
    std::vector<float> masked(vocab, -INFINITY);
    for (int runs = 1 + static_cast<int>(g() % 3); runs > 0; --runs) {
      const int len = 4 + static_cast<int>(g() % 37), at = static_cast<int>(g() % (vocab - len));
      for (int i = 0; i < len; ++i) masked[at + i] = 2.0f * n(g);
    }
    for (int k = static_cast<int>(g() % 6); k > 0; --k) masked[g() % vocab] = 2.0f * n(g);
    x = masked;
  }
  if (kind == 5 || kind == 6) {  // a random mask allowing 8 % or 3 % of the ids
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (float& v : x) v = u(g) < (kind == 5 ? 0.08f : 0.03f) ? 2.0f * n(g) : -INFINITY;
  }
  return x;
}

// How many of the row's largest tokens the row needs on the fast path (at most its valid ones).
int needed(const std::vector<float>& sorted, const Case& c) {
  const int valid = static_cast<int>(std::count_if(sorted.begin(), sorted.end(), [](float v) { return v > -INFINITY; }));
  // Top-k rows: stage 2 decides a row whose prefix holds k tokens (decide_kept); its slack of 16
  // (kTopKSlack) only rounds the histogram's cut.
  if (c.top_k) return std::min(c.top_k, valid);
  const double T = 0.7;
  double total = 0.0, cum = 0.0;
  for (float v : sorted) total += std::exp((v - sorted[0]) / T);
  int i = 0;
  while (cum < c.top_p * total) cum += std::exp((sorted[i++] - sorted[0]) / T);
  return std::min<int>(i + 1, valid);
}

// The rank a row's groups take (screen_rank of the v2 patch when by_v).
int row_rank(const Bound& b, int top_k) {
  if (!b.by_v) return top_k ? b.top_k_rank : b.row_rank;
  if (top_k) {
    const long spread = static_cast<long>(top_k + 16) * kGroup;
    if (spread + spread / 3 <= vocab) return b.top_k_rank;
    return spread / 4 <= vocab ? b.row_rank : 0;
  }
  return vocab >= 32 * kGroup ? b.row_rank : 0;
}

void screen_row(const std::vector<float>& x, float tau, int need, const Bound& b, int top_k, Tally& t) {
  const int rank = row_rank(b, top_k);
  std::vector<float> listed;
  float row_bound = -INFINITY;
  for (int tile = 0; tile * kTile < vocab; ++tile) {
    std::vector<std::vector<float>> lanes[4];
    bool sparse[4];
    float chunk_bound = -INFINITY;
    for (int w = 0; w < 4; ++w) {
      const int base = tile * kTile + w * kGroup;
      std::vector<float> fourth, kept;
      int valid = 0;
      for (int lane = 0; lane < 32; ++lane) {
        std::vector<float> v;
        for (int i = 0; i < 32; ++i) {
          const int id = base + (i / 4) * 128 + lane * 4 + i % 4;
          if (id < vocab && x[id] > -INFINITY) v.push_back(x[id]);  // the lane's valid tokens
        }
        std::sort(v.begin(), v.end(), std::greater<float>());
        for (int i = 0; i < 3 && i < static_cast<int>(v.size()); ++i) kept.push_back(v[i]);
        fourth.push_back(v.size() >= 4 ? std::nextafter(v[3], INFINITY) : -INFINITY);
        valid += static_cast<int>(v.size());
        lanes[w].push_back(v);
      }
      int kept_n = 0;  // the values the lanes keep
      for (const std::vector<float>& v : lanes[w]) kept_n += std::min<int>(3, static_cast<int>(v.size()));
      sparse[w] = rank > 0 && valid <= 96 && kept_n < b.sparse;
      if (sparse[w]) continue;
      std::sort(kept.begin(), kept.end(), std::greater<float>());
      const float lanes_bound = *std::max_element(fourth.begin(), fourth.end());
      const float own = rank == 0 ? lanes_bound
                        : static_cast<int>(kept.size()) >= rank ? kept[rank - 1]
                                                                : lanes_bound;
      chunk_bound = std::max(chunk_bound, own);
    }
    if (!b.listed)  // the bound rises above every crowded lane's fourth value
      for (int w = 0; w < 4; ++w)
        for (const std::vector<float>& v : lanes[w])
          if (!sparse[w] && v.size() >= 4 && v[3] >= chunk_bound) chunk_bound = std::nextafter(v[3], INFINITY);
    for (int w = 0; w < 4; ++w)
      for (const std::vector<float>& v : lanes[w]) {
        const bool crowded = v.size() >= 4 && v[3] >= chunk_bound;
        for (int i = 0; i < static_cast<int>(v.size()) && (sparse[w] || crowded || i < 3); ++i)
          if (sparse[w] || v[i] >= chunk_bound) listed.push_back(v[i]);
      }
    row_bound = std::max(row_bound, chunk_bound);
  }
  t.candidates += static_cast<double>(listed.size());
  int t_at_bound = 0;
  for (float v : listed) t_at_bound += v >= row_bound;
  t.at_bound += t_at_bound;
  // Stage 2 also leaves a row to the exact path when its prefix passes kGatherCap (768 keys): top-k
  // rows cut theirs to about k + 16 by a histogram, which needs a row bound.
  const bool cut = top_k > 0 && row_bound > -INFINITY;
  t.escaped += row_bound > tau || (!cut && t_at_bound > 768);
  t.below_bound += row_bound > tau;
  t.with_mass_cut += row_bound > tau || (!cut && (row_bound > -INFINITY ? need : t_at_bound) > 768);
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 50;
  if (rows <= 0) {
    std::fprintf(stderr, "sonic_screen_model: ROWS must be positive, got '%s'\n", argv[1]);
    return 2;
  }
  if (argc > 2) vocab = std::atoi(argv[2]);
  if (vocab < 4096) {
    std::fprintf(stderr, "sonic_screen_model: V must be at least 4096, got '%s'\n", argv[2]);
    return 2;
  }
  const std::vector<Bound> bounds = {{"lanes (main until v3.32)", 0, 0, false, true, 0},
                                     {"rank 9/16 fixed, listed", 9, 16, false, true, 0},
                                     {"rank by V, listed (wrB)", 9, 16, true, true, 0},
                                     {"rank 12 by V, sparse (main)", 12, 16, true, true, 36},
                                     {"v3 without sparse groups", 12, 16, true, true, 0},
                                     {"v3, every group <= 96 sparse", 12, 16, true, true, 97},
                                     {"rank by V, unlisted (wrN)", 9, 16, true, false, 0}};
  const std::vector<Case> cases = {{"peaked, top-k 50", 0, 50, 1.0},   {"peaked, top-k 100", 0, 100, 1.0},
                                   {"peaked, top-p 0.9", 0, 0, 0.9},  {"flat, top-k 50", 1, 50, 1.0},
                                   {"digits, top-k 50", 2, 50, 1.0},  {"digits, top-p 0.9", 2, 0, 0.9},
                                   {"flat, top-p 0.02", 3, 0, 0.02},  {"grammar runs, top-k 50", 4, 50, 1.0},
                                   {"grammar runs, top-p 0.9", 4, 0, 0.9}, {"8 % mask, top-k 50", 5, 50, 1.0},
                                   {"8 % mask, top-p 0.9", 5, 0, 0.9},      {"3 % mask, top-p 0.9", 6, 0, 0.9}};
  std::mt19937_64 g(1);
  for (const Case& c : cases) {
    std::vector<Tally> tally(bounds.size());
    double need = 0.0;
    for (int r = 0; r < rows; ++r) {
      const std::vector<float> x = make_row(c.kind, g);
      std::vector<float> sorted = x;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      const int n = needed(sorted, c);
      need += n;
      for (size_t b = 0; b < bounds.size(); ++b) screen_row(x, sorted[n - 1], n, bounds[b], c.top_k, tally[b]);
    }
    std::printf("%s (needs its top %.0f):\n", c.name.c_str(), need / rows);
    for (size_t b = 0; b < bounds.size(); ++b)
      std::printf("  %-26s %6.0f candidates, %5.0f at the row's bound, %d of %d rows escape (%d below the bound; %d with "
                  "a mass cut)\n",
                  bounds[b].name.c_str(), tally[b].candidates / rows, tally[b].at_bound / rows, tally[b].escaped, rows,
                  tally[b].below_bound, tally[b].with_mass_cut);
  }
  return 0;
}
