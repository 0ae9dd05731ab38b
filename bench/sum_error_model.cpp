// A host model of the fast path's total mass (stage 1's ExpSum, the block's combine, stage 2's
// merge of the chunks into sum_all) against the CPU reference's total, for one row, to test
// decide_kept's top-p margin (src/cuda/stage2_row.cuh) on adversarial rows (perf-notes v3.32). The
// fp32 operations follow the device code in order; ex2.approx is modelled as correctly rounded or
// off by 2^-22 either way (PTX ISA: at most 2 ulp from the correctly rounded result, which is
// 2^-22 relative at worst). Built with -ffp-contract=off (contractions only where written as fma).
//   sonic_sum_error_model [V] [sea]   sweeps the "sea" row: one token at x = 0, the other V - 1 at
//                               -d (T 1), d from 14 to 19, each term about half an ulp of the
//                               running sum: prints the worst |ref / sum_all - 1| over the kernel's
//                               margin (detail::top_p_sum_margin: |zm| + 38 since v3.38, + 44 in
//                               v3.36-v3.37, + 62 in v3.33-v3.35) and over the one before (|zm| +
//                               32, v3.31-v3.32),
//                               with the whole row one chunk (large B) and one tile a chunk (B = 1),
//                               the lanes' sums plain (the kernels' before v3.36) and compensated
//                               (the kernels' since v3.36): 70.1 and 10.9 units of 2^-24 at worst,
//                               one chunk (perf-notes v3.35).
//   sonic_sum_error_model [V] chunking   random rows (normal logits, a few raised, shifted by 0 or
//                               20, T 0.7 and 1) under five chunkings, ex2 erring by argument:
//                               how far the chunking alone moves sum_all, and how far it lies from
//                               the reference, with the kernels' terms and with the order-free
//                               terms of docs/design-order-free-sums.md (perf-notes v3.40: 3.8 and
//                               3.9 units at V = 151936; 19.9 and 30.5 from the reference at zm 45).
//   sonic_sum_error_model [V] canonical   how far stage 1's sum_all lies from the design's S* (the
//                               canonical terms' sum, or today's terms at the row's scale) in any
//                               of five chunk plans: random and sea rows, each ex2 model (perf-notes
//                               v3.40: at V = 32768 and 131072, 2.6-3.6 units on random rows,
//                               10.9-11.0 on sea rows, 9.4-9.7 on rising rows, with either S*;
//                               v3.41: 8.2 / 9.1 units on terraced rows at V = 32768 / 131072).
//   sonic_sum_error_model [V] sea|rising order-free   the sea or rising rows with the order-free
//                               terms (the sea row at V = 16384: 11.1 units at worst, as the
//                               kernels' terms).
//   sonic_sum_error_model [V] sea|rising expf   the same rows with the sums rescaled by __expf at
//                               each new maximum, as the kernels did before pow2-sums.patch
//                               (perf-notes v3.37; g_pow2 below, false).
//   sonic_sum_error_model [V] rising   rows whose lanes' maxima rise at every tile, so that each
//                               lane's sum is rescaled once a tile (the whole row one chunk, the
//                               lanes compensated; perf-notes v3.37): "band", every token of tile t
//                               at -(tiles - 1 - t) delta; "lane", only the first token of each
//                               tile so (one lane's), the rest at -40; "bulk", the band from -d
//                               with one token at 0. Sweeps delta (and d) for each model of
//                               ex2.approx and prints each family's worst ratio to the margin.
//                               V = 262144 (64 tiles): 0.013-0.100 with the kernels' exact
//                               rescales; with `expf` (the rescales' errors compound) 1.2-1.3 if
//                               ex2 errs 2 ulp the same way at every rescale, 0.18-0.24 correctly
//                               rounded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "common/token_rules.hpp"

namespace {


// ex2.approx model: mode 0 = correctly rounded 2^v; mode +1/-1 = 2^v * (1 +- 2^-22), rounded toward
// the exact value so the float result stays within 2^-22 relative; mode 2 = an error that follows
// the argument, 2^v * (1 + h(v) 2^-22) with h a hash of v's bits in [-1, 1] (the same v always errs
// the same way, different v's differently: what makes a term follow its exponent's rounding);
// integer inputs are exact.
int g_ex2_mode = 0;
constexpr double g_ex2_rel = 0x1p-22;
inline double ex2_hash(float v) {
  uint32_t h;
  std::memcpy(&h, &v, sizeof h);
  h ^= h >> 16;
  h *= 0x7feb352dU;
  h ^= h >> 15;
  h *= 0x846ca68bU;
  h ^= h >> 16;
  return static_cast<double>(h) / 2147483647.5 - 1.0;
}

inline float ex2_approx(float v, bool ftz) {
  if (std::isnan(v)) return v;
  if (v == -INFINITY) return 0.0f;
  const double ex = std::exp2(static_cast<double>(v));
  float r;
  if (g_ex2_mode == 0 || v == std::floor(v)) {
    r = static_cast<float>(ex);
  } else {
    const double y = ex * (1.0 + (g_ex2_mode == 2 ? ex2_hash(v) : g_ex2_mode) * g_ex2_rel);
    r = static_cast<float>(y);
    // keep |r - ex| <= rel * ex (step toward ex if rounding went past the bound)
    if (std::fabs(static_cast<double>(r) - ex) > g_ex2_rel * ex) r = std::nextafter(r, static_cast<float>(ex));
  }
  if (ftz && r < 0x1p-126f) r = 0.0f;
  return r;
}
inline float exp2_flush(float v) { return ex2_approx(v, true); }
// __expf: ex2.approx(x * fl(log2 e)) (libdevice __nv_fast_expf)
inline float fast_expf(float x) {
  const float v = x * 1.4426950408889634f;
  return ex2_approx(v, false);
}

// The lanes' running sums compensated, as stage 1's ExpSum does since v3.36 (src/cuda/stage1_chunk.cuh):
// each group's sum joins by Fast2Sum of the larger and the smaller, its rounding error kept in comp.
// false models the plain sums before it.
bool g_compensated = false;
// The kernels' sums, kept relative to a power of two, 2^k with k = ceil(max c), so that a growing
// maximum rescales them exactly (stage1_chunk.cuh's ExpSum, perf-notes v3.37): each term one fmaf
// of x c - k and one ex2.approx; the warps' and the block's combines and stage 2's merge exact
// scalings, stage 2's conversion to the row maximum in double. false models the sums before
// (rescaled by __expf at each new maximum).
bool g_pow2 = true;
// docs/design-order-free-sums.md: each term a function of x alone, 2^(y - n) 2^(n - k) with y = x c
// rounded once, n = floor(y) and the fraction's ex2 (exact scalings), so that only the additions
// follow the chunking. false: the kernels' terms, ex2(fma(x, c, -k)).
bool g_order_free = false;
inline float sum_base2(float inv_t) { return inv_t * 1.4426950408889634f; }
constexpr float kSumScaleLimit = 0x1p22f;
inline float sum_scale(float m, float c) { return std::ceil(std::fmin(std::fmax(m * c, -kSumScaleLimit), kSumScaleLimit)); }
inline float exact_pow2(float d) {
  const int e = static_cast<int>(std::fmin(std::fmax(d, -127.0f), 127.0f));
  return e < -126 ? 0.0f : std::ldexp(1.0f, e);
}

// The design's term: 2^(x c - k) as ex2(f) 2^(n - k), y = x c, n = floor(y), f = y - n (exact for
// |y| >= 1; rounded the same way in every chunking below). -inf and NaN add 0.
inline float order_free_term(float x, float c, float k) {
  if (!(x > -INFINITY)) return 0.0f;
  const float y = x * c;
  const float n = std::floor(y);
  const float f = y - n;
  return ex2_approx(f, false) * exact_pow2(n - k);
}

struct ExpSum {
  float max = -INFINITY;
  float k = -INFINITY;  // g_pow2: the scale
  float sum = 0.0f;
  float comp = 0.0f;  // g_compensated: what the running sum's additions rounded away
  bool rebase(float m, float inv_t) {
    if (m > max) {
      const float kn = sum_scale(m, sum_base2(inv_t));
      if (max > -INFINITY && max < INFINITY) {
        const float f = g_pow2 ? exact_pow2(k - kn) : fast_expf((max - m) * inv_t);
        sum *= f;
        comp *= f;
      }
      max = m;
      k = kn;
    }
    return max > -INFINITY && max < INFINITY;
  }
  void add_group(const float* x, float inv_t) {
    const float to_base2 = inv_t * 1.4426950408889634f;
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < 32; ++i)
      part[i % 4] += g_order_free ? order_free_term(x[i], to_base2, k)
                                  : exp2_flush(std::fmax(g_pow2 ? std::fma(x[i], to_base2, -k) : (x[i] - max) * to_base2, -INFINITY));
    const float g = (part[0] + part[1]) + (part[2] + part[3]);
    if (!g_compensated) {
      sum += g;
      return;
    }
    const float a = std::fmax(sum, g), b = std::fmin(sum, g);  // both >= 0
    const float t = a + b;
    comp += b - (t - a);
    sum = t;
  }
  float total() const { return sum + comp; }
};

// Layout: width = tokens per 16-byte load (4 fp32, 8 16-bit); groups_per_step = 1 (fp32, short
// 16-bit steps) or 2 (full 16-bit steps). tile tokens = 4 warps * groups_per_step * 1024.
struct Layout {
  int width = 4;
  int groups_per_step = 1;
  int tile_tokens() const { return 4 * groups_per_step * 1024; }
  int tiles(int V) const { return (V + tile_tokens() - 1) / tile_tokens(); }
};

struct Chunk { int first, end; };  // tile range

inline std::vector<Chunk> chunks_for_tpc(int tiles, int tpc) {
  std::vector<Chunk> c;
  for (int f = 0; f < tiles; f += tpc) c.push_back({f, std::min(f + tpc, tiles)});
  return c;
}

// The warp's butterfly sum (every lane ends with the same value: + commutes), lane 0's.
template <typename T>
T warp_sum(const T (&v)[32]) {
  T a[32];
  std::memcpy(a, v, sizeof a);
  for (int o = 16; o > 0; o >>= 1) {
    T b[32];
    for (int l = 0; l < 32; ++l) b[l] = a[l] + a[l ^ o];
    std::memcpy(a, b, sizeof a);
  }
  return a[0];
}

struct Stat { float max; float sum; };


// One chunk's TileStat (max, sum) as stage 1 computes it.
inline Stat chunk_stat(const std::vector<float>& x, int V, float inv_t, const Layout& L, Chunk ch) {
  const int tt = L.tile_tokens();
  ExpSum wsum[4];
  float wmax[4];
  for (int w = 0; w < 4; ++w) {
    ExpSum lane[32];
    for (int t = ch.first; t < ch.end; ++t) {
      for (int g = 0; g < L.groups_per_step; ++g) {
        const int base = t * tt + w * (L.groups_per_step * 1024) + g * 1024;
        for (int l = 0; l < 32; ++l) {
          float xr[32];
          float v1 = -INFINITY;
          for (int i = 0; i < 32; ++i) {
            const int tok = base + (i / L.width) * (32 * L.width) + l * L.width + (i % L.width);
            xr[i] = tok < V ? x[tok] : -INFINITY;
            v1 = std::fmax(v1, xr[i]);
          }
          if (lane[l].rebase(v1, inv_t)) lane[l].add_group(xr, inv_t);
        }
      }
    }
    // warp_combine
    float m = -INFINITY, wk = -INFINITY;
    for (int l = 0; l < 32; ++l) m = std::fmax(m, lane[l].max), wk = std::fmax(wk, lane[l].k);
    float part[32];
    for (int l = 0; l < 32; ++l) {
      if (lane[l].max > -INFINITY && m < INFINITY)
        part[l] = lane[l].total() * (g_pow2 ? exact_pow2(lane[l].k - wk) : fast_expf((lane[l].max - m) * inv_t));
      else part[l] = 0.0f;
    }
    wsum[w].k = wk;
    wsum[w].max = m;
    wsum[w].sum = warp_sum(part);
    wmax[w] = m;
  }
  float tm = -INFINITY;
  for (int w = 0; w < 4; ++w) tm = std::fmax(tm, wmax[w]);
  float s = 0.0f;
  for (int w = 0; w < 4; ++w) {
    if (wsum[w].max > -INFINITY && tm < INFINITY) {
      const float f = g_pow2 ? exact_pow2(wsum[w].k - sum_scale(tm, sum_base2(inv_t))) : fast_expf((wsum[w].max - tm) * inv_t);
      s = std::fma(wsum[w].sum, f, s);  // t.sum += ws.sum * __expf(..), contracted to an FFMA
    }
  }
  return {tm, s};
}

// Stage 2's merge of the chunk stats into sum_all (double).
inline double merge(const std::vector<Stat>& st, float inv_t) {
  float m = -INFINITY;
  for (auto& s : st) m = std::fmax(m, s.max);
  double lane[32];
  for (int l = 0; l < 32; ++l) {
    double sum = 0.0;
    for (int h = 0; h < 2; ++h) {
      const size_t c = l + 32 * h;
      if (c < st.size() && st[c].max > -INFINITY) {
        const float e = (st[c].max - m) * inv_t;
        const float cf = sum_base2(inv_t);
        const double f = g_pow2 ? std::exp2(static_cast<double>(sum_scale(st[c].max, cf)) - static_cast<double>(m) * cf)
                                : std::exp(static_cast<double>(e));
        sum = std::fma(static_cast<double>(st[c].sum), f, sum);
      }
    }
    lane[l] = sum;
  }
  return warp_sum(lane);
}

inline double device_sum_all(const std::vector<float>& x, float T, const Layout& L, const std::vector<Chunk>& chunks) {
  const int V = static_cast<int>(x.size());
  const float inv_t = 1.0f / T;
  std::vector<Stat> st;
  for (auto& c : chunks) st.push_back(chunk_stat(x, V, inv_t, L, c));
  return merge(st, inv_t);
}

struct Ref { float zm; double total; };
inline Ref reference(const std::vector<float>& x, float T) {
  float zm = -INFINITY;
  std::vector<float> z(x.size());
  for (size_t i = 0; i < x.size(); ++i) { z[i] = x[i] / T; zm = std::fmax(zm, z[i]); }
  // the reference sums in the sorted order; double, so the order is immaterial at 1e-6 (use a
  // compensated sum to remove it entirely)
  double s = 0.0, c = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double t = std::exp(static_cast<double>(z[i]) - static_cast<double>(zm));
    const double y = t - c;
    const double u = s + y;
    c = (u - s) - y;
    s = u;
  }
  return {zm, s};
}

// The margin before v3.33 (|zm| + 32), which the sea row reached 0.868 of: beside the kernel's.
double former_margin(float zm) { return 1e-6 + std::expm1((std::fabs(static_cast<double>(zm)) + 32.0) * 0x1p-23); }

// The sea row (see the header): token 0 at 0, the other V - 1 at -d.
inline std::vector<float> sea_row(int V, double d) {
  std::vector<float> x(V, static_cast<float>(-d));
  x[0] = 0.0f;
  return x;
}

// The sea row's sweep (see the header).
int sweep_sea(int V, const Layout& L) {
  const float T = 1.0f;
  const int tiles = L.tiles(V);
  for (const bool compensated : {false, true})
  for (const int mode : {0, 1, -1}) {
    g_compensated = compensated;
    g_ex2_mode = mode;
    double best = 0.0;
    for (double d = 14.0; d < 19.0; d += 0.0005) {
      const std::vector<float> x = sea_row(V, d);
      const Ref r = reference(x, T);
      const double rel = r.total / device_sum_all(x, T, L, chunks_for_tpc(tiles, tiles)) - 1.0;
      const double ratio = std::fabs(rel) / sonic::detail::top_p_sum_margin(r.zm);
      if (ratio <= best) continue;
      best = ratio;
      const double rel1 = r.total / device_sum_all(x, T, L, chunks_for_tpc(tiles, 1)) - 1.0;
      std::printf("%s%s ex2 %+d d=%.4f rel(one chunk)=%.4e (%.1f units of 2^-24) rel(a tile a chunk)=%.4e "
                  "margin=%.4e ratio=%.3f ratio(former +32)=%.3f\n", g_pow2 ? "" : "expf ", compensated ? "compensated" : "plain", mode, d,
                  rel, std::fabs(rel) * 0x1p24, rel1, sonic::detail::top_p_sum_margin(r.zm), ratio,
                  std::fabs(rel) / former_margin(r.zm));
    }
  }
  return 0;
}

// The rising rows (see the header), tiles of L's size: kBand, every token of tile t at
// -(tiles - 1 - t) delta; kLane, only each tile's first token so, the rest at -40; kBulk, the band
// from -d with the last tile's first token at 0.
enum class RisingFamily { kBand, kLane, kBulk };
inline std::vector<float> rising_row(int V, const Layout& L, RisingFamily family, double delta, double d = 0.0) {
  const int tt = L.tile_tokens(), tiles = L.tiles(V);
  std::vector<float> x(V);
  if (family == RisingFamily::kLane) {
    std::fill(x.begin(), x.end(), -40.0f);
    for (int t = 0; t < tiles; ++t) x[static_cast<size_t>(t) * tt] = static_cast<float>(-(tiles - 1 - t) * delta);
    return x;
  }
  for (int t = 0; t < V; ++t) x[t] = static_cast<float>(-d - (tiles - 1 - t / tt) * delta);
  if (family == RisingFamily::kBulk) x[static_cast<size_t>(tiles - 1) * tt] = 0.0f;
  return x;
}

// The rising rows' sweep (see the header): the kernels' compensated lanes, the whole row one chunk.
int sweep_rising(int V, const Layout& L) {
  const float T = 1.0f;
  const int tiles = L.tiles(V);
  g_compensated = true;
  struct Worst { double ratio = 0.0, rel = 0.0, delta = 0.0, d = 0.0; };
  auto measure = [&](const std::vector<float>& x, double delta, double d, Worst& w) {
    const Ref r = reference(x, T);
    const double rel = r.total / device_sum_all(x, T, L, chunks_for_tpc(tiles, tiles)) - 1.0;
    const double ratio = std::fabs(rel) / sonic::detail::top_p_sum_margin(r.zm);
    if (ratio > w.ratio) w = Worst{ratio, rel, delta, d};
  };
  auto report = [](const char* family, int mode, const Worst& w) {
    std::printf("%s rising %-4s ex2 %+d: worst ratio %.3f (rel %.3e, %.1f units of 2^-24) at delta %.3g d %.1f\n", g_pow2 ? "kernels" : "expf", family,
                mode, w.ratio, w.rel, std::fabs(w.rel) * 0x1p24, w.delta, w.d);
  };
  for (const int mode : {0, 1, -1}) {
    g_ex2_mode = mode;
    Worst band, lane, bulk;
    for (double delta = 1e-7; delta < 2.0; delta *= 1.05) {
      measure(rising_row(V, L, RisingFamily::kBand, delta), delta, 0.0, band);
      measure(rising_row(V, L, RisingFamily::kLane, delta), delta, 0.0, lane);
    }
    for (double d = 2.0; d < 16.0; d += 0.5)
      for (double delta = 1e-6; delta < 0.3; delta *= 1.3) measure(rising_row(V, L, RisingFamily::kBulk, delta, d), delta, d, bulk);
    report("band", mode, band);
    report("lane", mode, lane);
    report("bulk", mode, bulk);
  }
  return 0;
}

// The random rows of the chunking and canonical sweeps, f(x, T) on each: normal logits (sigma 2),
// 20 of them raised by 5-12, shifted by 0 or 20, at T 0.7 and 1 (32 rows).
template <class F>
void for_each_random_row(int V, F f) {
  for (int seed = 0; seed < 8; ++seed)
    for (const float shift : {0.0f, 20.0f})
      for (const float T : {0.7f, 1.0f}) {
        std::mt19937_64 rng(1234 + seed);
        std::normal_distribution<float> normal(0.0f, 2.0f);
        std::uniform_real_distribution<float> raise(5.0f, 12.0f);
        std::vector<float> x(V);
        for (float& v : x) v = normal(rng) + shift;
        for (int i = 0; i < 20; ++i) x[rng() % V] += raise(rng);
        f(x, T);
      }
}

// Random rows under several chunkings (the chunk plans of different B and tile sizes): how far
// sum_all moves with the chunking alone (what the margin of docs/design-order-free-sums.md must
// cover, so that the token does not follow B) and how far it lies from the reference's (what
// SPEC.md section 4 lets the token differ by where it is within 1e-5, 168 units), the kernels'
// terms against the design's, ex2 erring by argument (mode 2), on for_each_random_row's rows.
int sweep_chunking(int V, const Layout& L) {
  const int tiles = L.tiles(V);
  g_compensated = true;
  g_ex2_mode = 2;
  for (const bool order_free : {false, true}) {
    g_order_free = order_free;
    double worst_move = 0.0, worst_ref = 0.0, worst_ref_zm = 0.0, move_zm = 0.0;
    for_each_random_row(V, [&](const std::vector<float>& x, float T) {
      const Ref r = reference(x, T);
      double lo = INFINITY, hi = -INFINITY;
      for (const int tpc : {tiles, 1, 2, 3, 5}) {
        const double sum = device_sum_all(x, T, L, chunks_for_tpc(tiles, tpc));
        lo = std::fmin(lo, sum);
        hi = std::fmax(hi, sum);
        const double ref_units = std::fabs(r.total / sum - 1.0) * 0x1p24;
        if (ref_units > worst_ref) worst_ref = ref_units, worst_ref_zm = r.zm;
      }
      const double move_units = (hi / lo - 1.0) * 0x1p24;
      if (move_units > worst_move) worst_move = move_units, move_zm = r.zm;
    });
    std::printf("%s terms: the chunking moves sum_all by up to %.2f units of 2^-24 (zm %.1f); from the reference up "
                "to %.2f units (zm %.1f; the margin there %.1f units)\n",
                order_free ? "order-free" : "kernels'", worst_move, move_zm, worst_ref, worst_ref_zm,
                sonic::detail::top_p_sum_margin(worst_ref_zm) * 0x1p24);
  }
  return 0;
}

// docs/design-order-free-sums.md's S*, the mass every decision would come from, in double: the
// canonical terms' sum (order-free) or today's terms at the row's scale k_row = ceil(row max c)
// (the design's cheaper variant). Both relative to 2^k_row.
inline double canonical_sum(const std::vector<float>& x, float T, bool order_free) {
  const float inv_t = 1.0f / T, c = sum_base2(inv_t);
  float m = -INFINITY;
  for (float v : x) m = std::fmax(m, v);
  const float k = sum_scale(m, c);
  double s = 0.0;
  for (float v : x) {
    if (!(v > -INFINITY)) continue;
    s += order_free ? static_cast<double>(order_free_term(v, c, k)) : static_cast<double>(exp2_flush(std::fma(v, c, -k)));
  }
  // sum_all is relative to the row's maximum, exp((x - m) / T) = 2^(x c - k) 2^(k - m c)
  return s * std::exp2(static_cast<double>(k) - static_cast<double>(m) * static_cast<double>(c));
}

// Terraced rows: token 0 at 0, the others on `levels` terraces at -d, -d - step, ... (token t on
// terrace hash(t) % levels), except that every third tile holds only the deepest terrace, so that
// its chunks' maxima, and with them their lanes' scales, lie below the others'. Terms of several
// exponents in one lane's sum and chunks at several scales at once: docs/design-order-free-sums.md's
// "rows with terms at several depths".
inline std::vector<float> terraced_row(int V, const Layout& L, double d, double step, int levels) {
  const int tile = L.tile_tokens();
  std::vector<float> x(V);
  for (int t = 0; t < V; ++t) {
    const uint32_t h = static_cast<uint32_t>(t) * 2654435761u;
    const int level = (t / tile) % 3 == 2 ? levels - 1 : static_cast<int>((h >> 8) % static_cast<uint32_t>(levels));
    x[t] = static_cast<float>(-d - step * level);
  }
  x[0] = 0.0f;
  return x;
}

// How far stage 1's sum_all lies from S* in any chunk plan, for each S*: what the design's margin
// must cover. Rows: chunking's random rows, the sea rows (T 1, d 11-19), the rising rows (T 1) and
// the terraced rows (T 1, d 11-19, three steps, three or five terraces), ex2 in each mode.
int sweep_canonical(int V, const Layout& L) {
  const int tiles = L.tiles(V);
  g_compensated = true;
  for (const int mode : {2, 1, -1}) {
    g_ex2_mode = mode;
    for (const bool order_free : {false, true}) {
      g_order_free = order_free;
      double worst_random = 0.0, worst_sea = 0.0;
      auto measure = [&](const std::vector<float>& x, float T, double* worst) {
        const double star = canonical_sum(x, T, order_free);
        for (const int tpc : {tiles, 1, 2, 3, 5})
          *worst = std::fmax(*worst, std::fabs(device_sum_all(x, T, L, chunks_for_tpc(tiles, tpc)) / star - 1.0) * 0x1p24);
      };
      for_each_random_row(V, [&](const std::vector<float>& x, float T) { measure(x, T, &worst_random); });
      // From d = 11 (x c = -16: where the bulk's terms round their exponent at 2^-20 and still hold
      // most of the mass at V = 2^17, so that today's terms at another scale differ most) to 19.
      for (double d = 11.0; d < 19.0; d += 0.02) {
        measure(sea_row(V, d), 1.0f, &worst_sea);
      }
      double worst_rising = 0.0;
      for (double delta = 1e-3; delta < 2.0; delta *= 1.5) {
        measure(rising_row(V, L, RisingFamily::kBand, delta), 1.0f, &worst_rising);
        measure(rising_row(V, L, RisingFamily::kLane, delta), 1.0f, &worst_rising);
        for (const double d : {4.0, 8.0, 12.0}) measure(rising_row(V, L, RisingFamily::kBulk, delta, d), 1.0f, &worst_rising);
      }
      double worst_terraced = 0.0;
      for (double d = 11.0; d < 19.0; d += 0.25)
        for (const double step : {0.37, 1.1, 2.9})
          for (const int levels : {3, 5}) measure(terraced_row(V, L, d, step, levels), 1.0f, &worst_terraced);
      std::printf("ex2 %+d, S* of %s terms: stage 1's sum_all within %.2f units of 2^-24 of it (random rows), "
                  "%.2f (sea rows), %.2f (rising rows), %.2f (terraced rows)\n", mode,
                  order_free ? "order-free" : "today's (at the row's scale)", worst_random, worst_sea, worst_rising,
                  worst_terraced);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int V = argc > 1 ? std::atoi(argv[1]) : 262144;
  const char* rows = argc > 2 ? argv[2] : "sea";
  g_pow2 = !(argc > 3 && std::strcmp(argv[3], "expf") == 0);
  g_order_free = argc > 3 && std::strcmp(argv[3], "order-free") == 0;
  if (V < 4096) {
    std::fprintf(stderr, "sonic_sum_error_model: V must be at least 4096, got %d\n", V);
    return 2;
  }
  const Layout L;
  if (std::strcmp(rows, "sea") == 0) return sweep_sea(V, L);
  if (std::strcmp(rows, "rising") == 0) return sweep_rising(V, L);
  if (std::strcmp(rows, "chunking") == 0) return sweep_chunking(V, L);
  if (std::strcmp(rows, "canonical") == 0) return sweep_canonical(V, L);
  std::fprintf(stderr, "sonic_sum_error_model: rows must be sea, rising, chunking or canonical, got %s\n", rows);
  return 2;
}
