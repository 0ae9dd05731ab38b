// The device benchmark of ../shared/BENCH.md for this library: single-step sampling over
// B x V x dtype x case, CUDA-graph replay (mean per call) and eager launches (median), inputs
// rotated through >= 256 MiB so that no call finds its logits in L2, every configuration checked
// against the CPU reference before it is timed. One JSON object a line on --out.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/random.hpp"
#include "graph_timing.hpp"
#include "ref/reference.hpp"
#include "sonic/sonic.hpp"
#if SONIC_TIMELINE
#include "timeline_report.hpp"
#endif

namespace {



// Logits: peaked = 3 N(0,1) + 10 on 5 tokens a row; flat = N(0,1). Box-Muller on Philox words.
template <class T>
__global__ void fill_logits(T* out, int64_t rows, int32_t V, bool peaked, uint64_t seed) {
  const int64_t n = rows * V;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * static_cast<int64_t>(blockDim.x)) {
    const sonic::detail::Philox4 w = sonic::detail::random_block(seed, 0, 7, static_cast<uint32_t>(i));
    const float u1 = sonic::detail::uniform_from_word(w.v[0]), u2 = sonic::detail::uniform_from_word(w.v[1]);
    float x = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    if (peaked) {
      x *= 3.0f;
      const int32_t t = static_cast<int32_t>(i % V);
      const uint32_t r = static_cast<uint32_t>(i / V);
      for (uint32_t k = 0; k < 5; ++k)
        if (static_cast<int32_t>(sonic::detail::random_word(seed, r, 9, k) % V) == t) x += 10.0f;
    }
    if constexpr (sizeof(T) == 4) out[i] = x;
    else if constexpr (std::is_same<T, __half>::value) out[i] = __float2half(x);
    else out[i] = __float2bfloat16(x);
  }
}

// The element type of a --dtype name (fp32, bf16, fp16): false for any other name.
bool parse_dtype(const std::string& name, sonic::DType* d) {
  if (name == "fp32") *d = sonic::DType::kF32;
  else if (name == "bf16") *d = sonic::DType::kBF16;
  else if (name == "fp16") *d = sonic::DType::kF16;
  else return false;
  return true;
}
// The element type of a name that main() has checked already.
sonic::DType dtype_of(const std::string& name) {
  sonic::DType d = sonic::DType::kF32;
  parse_dtype(name, &d);
  return d;
}
size_t dtype_bytes(sonic::DType d) { return d == sonic::DType::kF32 ? 4 : 2; }
// `rows` rows of the case's logits in `d` at p.
void fill_rows(char* p, sonic::DType d, int64_t rows, int32_t V, bool peaked, uint64_t seed) {
  switch (d) {
    case sonic::DType::kF32: fill_logits<<<1024, 256>>>(reinterpret_cast<float*>(p), rows, V, peaked, seed); break;
    case sonic::DType::kBF16: fill_logits<<<1024, 256>>>(reinterpret_cast<__nv_bfloat16*>(p), rows, V, peaked, seed); break;
    case sonic::DType::kF16: fill_logits<<<1024, 256>>>(reinterpret_cast<__half*>(p), rows, V, peaked, seed); break;
  }
}

struct Case {
  std::string name;
  bool peaked;
  bool hetero;
  bool top_p_only;  // "topp-*" (not in BENCH.md): T 1, top-p 0.9 alone; flat rows take the exact path
  bool sharp = false;  // "topp-sharp-*" (not in BENCH.md): the same at T 0.7, a nucleus of a few hundred
  bool grammar = false;  // "grammar-*" (not in BENCH.md): the homogeneous parameters under a grammar's mask
  int kind = -1;    // "hetero-kindK-*" (not in BENCH.md): every row is the heterogeneous batch's kind K
  // Options of the hetero-kindK cases, to tell a kind's rules apart (kind 1 has k 50, kind 3 k 100):
  int top_k = 0;               // "-kN": its top-k rows take top-k N instead (0: the kind's own)
  float temperature = 0.0f;    // "-tN": its random rows take T = N / 100 (0: the kind's own)
  bool no_penalties = false;   // "-nopen": no penalties and no prompt
  bool no_joint = false;       // "-nojoint": top-p over the kept set, not over the whole row
  // The heterogeneous batch's kind of row r (0 greedy; 1 top-k/top-p, penalties; 2 top-k/min-p,
  // bitmask; 3 joint top-k/top-p, penalties), or kind K for every row. Row 0 is kind 1, so that a
  // batch of one row is a mixed row rather than a greedy one (before 2026-12-05, r % 4: hetero B = 1
  // timed a greedy row); a quarter of every batch of 4n rows is greedy.
  int row_kind(int r) const { return kind >= 0 ? kind : (r + 1) % 4; }
};

// The parts of s between the separators (an empty s gives one empty part).
std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    const size_t b = s.find(sep, a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

// Parses a sample-suite case name: {homog,hetero,topp,topp-sharp,grammar}-{peaked,flat} or
// hetero-kindK[-kN][-tN][-nopen][-nojoint]-{peaked,flat} with K in 0..3, top-k N in 1..1024 and
// T = N / 100 with N in 1..500 (the options in that order); false for any other name.
bool parse_case(const std::string& name, Case* c) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos) return false;
  std::string head = name.substr(0, dash);
  const std::string tail = name.substr(dash + 1);
  if (tail != "peaked" && tail != "flat") return false;
  // A number of at most four digits in [lo, hi], or -1.
  auto number = [](const std::string& n, int lo, int hi) {
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos) return -1;
    const int v = std::stoi(n);
    return v >= lo && v <= hi ? v : -1;
  };
  std::vector<std::string> options;
  const size_t kind_len = std::string("hetero-kindK").size();
  if (head.rfind("hetero-kind", 0) == 0 && head.size() > kind_len) {
    if (head[kind_len] != '-') return false;
    options = split_on(head.substr(kind_len + 1), '-');
    head = head.substr(0, kind_len);
  }
  *c = Case{name, tail == "peaked", head.rfind("hetero", 0) == 0, head == "topp" || head == "topp-sharp"};
  c->sharp = head == "topp-sharp";
  c->grammar = head == "grammar";
  if (head == "hetero-kind0" || head == "hetero-kind1" || head == "hetero-kind2" || head == "hetero-kind3")
    c->kind = head.back() - '0';
  else if (head != "homog" && head != "hetero" && head != "topp" && head != "topp-sharp" && head != "grammar")
    return false;
  int stage = 0;  // the options come in the order of the comment above, each at most once
  for (const std::string& o : options) {
    if (stage < 1 && o.size() > 1 && o[0] == 'k') {
      if ((c->top_k = number(o.substr(1), 1, 1024)) < 0) return false;
      stage = 1;
    } else if (stage < 2 && o.size() > 1 && o[0] == 't') {
      const int t = number(o.substr(1), 1, 500);
      if (t < 0) return false;
      c->temperature = static_cast<float>(t) / 100.0f;
      stage = 2;
    } else if (stage < 3 && o == "nopen") {
      c->no_penalties = true;
      stage = 3;
    } else if (stage < 4 && o == "nojoint") {
      c->no_joint = true;
      stage = 4;
    } else {
      return false;
    }
  }
  return true;
}

struct Args {
  std::string out = "bench.jsonl";
  std::string commit = "unknown";
  std::string date = "unknown";
  std::vector<int> batches = {1, 8, 32, 64, 128, 256, 512};
  std::vector<int> vocabs = {128256, 151936, 262144};
  std::vector<std::string> dtypes = {"fp32", "bf16"};
  bool dtypes_given = false;  // --dtype named them (the verify suite then times those, else fp32)
  std::vector<std::string> cases = {"homog-peaked", "homog-flat", "hetero-peaked", "hetero-flat"};
  int graph_replays = 20;
  std::string suite = "sample";  // or "topk": Sampler::top_k with k = --k; or "verify"
  int k = 128;
  std::vector<int> drafts = {1, 3, 5, 7};
  int timeline = 0;  // suites sample and verify, builds with SONIC_TIMELINE: calls whose kernel phases are reported
  bool timeline_graph = false;  // --timeline-graph: those calls replayed from a graph each, not eager
  bool cold_l2 = false;  // --cold-l2 1: suite sample also prints each call with the L2 flushed before it, and
                         // --timeline reports its calls again, each after a flush (diagnostics)
};

std::vector<std::string> split(const std::string& s) { return split_on(s, ','); }

// The gate on a timed case's first rows against the reference: greedy rows must agree exactly; of
// random rows one in 16 may differ (a near-tie), so a small batch's rows must all agree.
bool agrees_with_reference(int checked, int mismatches, int greedy_mismatches) {
  return greedy_mismatches == 0 && mismatches <= checked / 16;
}

// Per-row parameters of a case (BENCH.md): homogeneous T 0.7 / top-k 50 / top-p 0.9; heterogeneous:
// a quarter greedy, the rest mixed top-k / top-p / min-p, half with penalties over 1000 history
// tokens, a logit bias of 20 tokens; a grammar bitmask (random half of the vocabulary) on a quarter.
// The topp cases time the exact path: top-p 0.9 alone on flat logits keeps most of the vocabulary.
// The topp-sharp cases take T 0.7: a peaked row's nucleus is then a few hundred keys, far fewer
// than stage 1 leaves at its bound, which stage 2 cuts by mass (gather_prefix).
// The hetero-kindK cases give every row the heterogeneous batch's kind K (its rules too), to tell
// which kind costs what. The grammar cases take the homogeneous parameters under grammar_mask_row.
sonic::RequestParams row_params(const Case& c, int r, int32_t V, std::mt19937_64& rng, std::vector<int32_t>* prompt) {
  sonic::RequestParams p;
  p.seed = 1000 + r;
  prompt->clear();
  if (c.top_p_only) {
    p.temperature = c.sharp ? 0.7f : 1.0f;
    p.top_p = 0.9f;
    return p;
  }
  if (!c.hetero) {  // homog and grammar
    p.temperature = 0.7f;
    p.top_k = 50;
    p.top_p = 0.9f;
    return p;
  }
  const int kind = c.row_kind(r);
  switch (kind) {
    case 0: p.temperature = 0.0f; break;
    case 1: p.temperature = 0.7f; p.top_k = 50; p.top_p = 0.9f; break;
    case 2: p.temperature = 1.0f; p.top_k = 20; p.min_p = 0.05f; break;
    default: p.temperature = 0.8f; p.top_k = 100; p.top_p = 0.95f; p.top_p_joint = true; break;
  }
  if (c.top_k > 0 && p.top_k > 0) p.top_k = c.top_k;
  if (c.temperature > 0.0f && p.temperature > 0.0f) p.temperature = c.temperature;
  if (c.no_joint) p.top_p_joint = false;
  if (kind % 2 == 1 && !c.no_penalties) {
    // BENCH.md: the three penalties over 1000 history tokens, the prompt here (frequency and
    // presence count the prompt only with penalties_include_prompt; before 2026-12-05 they did not).
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.1f;
    p.penalties_include_prompt = true;
    for (int i = 0; i < 1000; ++i) prompt->push_back(static_cast<int32_t>(rng() % V));
  }
  std::vector<char> used(V, 0);
  while (p.logit_bias.size() < 20) {
    const int32_t t = static_cast<int32_t>(rng() % V);
    if (used[t]) continue;
    used[t] = 1;
    p.logit_bias.push_back({t, 2.0f});
  }
  return p;
}


#if SONIC_TIMELINE
// --timeline: the phases of a few calls `call(i)`, eager, or with --timeline-graph each replayed
// from a graph of its own; with --cold-l2 1 the same calls again, each after an L2 flush (flush_l2),
// to see which phases the cold code and tables lengthen.
template <class Call>
void report_timeline_once(const Args& a, const std::string& label, cudaStream_t stream, int nbuf, Call call) {
  if (!a.timeline_graph) {
    timeline::report(label, a.timeline, nbuf, call);
    return;
  }
  std::vector<cudaGraphExec_t> execs = capture_each(stream, nbuf, call);
  timeline::report(label + " (graph)", a.timeline, nbuf, [&](int i) {
    CHECK_CUDA(cudaGraphLaunch(execs[static_cast<size_t>(i)], stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
  });
  for (cudaGraphExec_t e : execs) cudaGraphExecDestroy(e);
}
template <class Call>
void report_timeline(const Args& a, const std::string& label, cudaStream_t stream, int nbuf, Call call) {
  report_timeline_once(a, label, stream, nbuf, call);
  if (a.cold_l2) {
    l2_flush_buffer();  // before the captures
    report_timeline_once(a, label + " cold L2", stream, nbuf, [&](int i) {
      flush_l2(stream);
      call(i);
    });
  }
}
#endif

void emit(FILE* f, const Args& a, const std::string& impl, const std::string& cs, int B, int32_t V, const std::string& dtype,
          const char* mode, double us, double floor_us, const std::string& gpu) {
  std::fprintf(f,
               "{\"suite\": \"sample\", \"impl\": \"%s\", \"case\": \"%s\", \"B\": %d, \"V\": %d, \"dtype\": \"%s\", "
               "\"mode\": \"%s\", \"us\": %.2f, \"floor_us\": %.2f, \"gpu\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\"}\n",
               impl.c_str(), cs.c_str(), B, V, dtype.c_str(), mode, us, floor_us, gpu.c_str(), a.commit.c_str(), a.date.c_str());
  std::fflush(f);
}


// The grammar cases' bitmask of row r (words 32-bit words): a grammar state that allows about 60
// tokens, two runs of neighbouring ids (10 ids, as digit tokens lie in most vocabularies, and 26, as
// letters might) and 24 scattered ids, at places that differ from row to row. The row's top-k 50
// needs 50 of them: a screen that bounds a run's group above a crowded lane's fourth id (main's
// bound) can leave fewer than 50 above the row's bound, and the row then takes the exact path
// (perf-notes v3.30).
void grammar_mask_row(int r, int32_t V, std::mt19937_64& rng, int32_t* words, int32_t n_words) {
  std::fill(words, words + n_words, 0);
  auto allow = [&](int32_t t) { words[t / 32] |= static_cast<int32_t>(1u << (t % 32)); };
  const int32_t run10 = static_cast<int32_t>((static_cast<int64_t>(r) * 7919 + 100) % (V - 64));
  const int32_t run26 = static_cast<int32_t>((static_cast<int64_t>(r) * 104729 + V / 2) % (V - 64));
  for (int32_t t = 0; t < 10; ++t) allow(run10 + t);
  for (int32_t t = 0; t < 26; ++t) allow(run26 + t);
  for (int i = 0; i < 24; ++i) allow(static_cast<int32_t>(rng() % V));
}

// Suite "topk": Sampler::top_k (k = --k) on the homog-peaked logits, checked against the CPU
// reference on the first rows, then timed. Lines carry suite "topk" and the k.
int bench_top_k(const Args& a, FILE* out, const std::string& gpu, cudaStream_t stream) {
  int failures = 0;
  const int maxB = *std::max_element(a.batches.begin(), a.batches.end());
  for (int32_t V : a.vocabs) {
    sonic::SamplerConfig cfg;
    cfg.backend = sonic::Backend::kCuda;
    cfg.vocab_size = V;
    cfg.max_slots = 1;
    cfg.max_rows = maxB;
    cfg.max_history = 1;
    sonic::Sampler sampler(cfg);
    sonic::SamplerConfig ccfg = cfg;
    ccfg.backend = sonic::Backend::kCpu;
    sonic::Sampler reference(ccfg);
    for (const std::string& dtype : a.dtypes) {
      const sonic::DType dt = dtype_of(dtype);
      const size_t elem = dtype_bytes(dt);
      for (int B : a.batches) {
        const size_t bytes = static_cast<size_t>(B) * V * elem;
        const int nbuf = rotating_buffers(bytes);
        char* logits;
        CHECK_CUDA(cudaMalloc(&logits, bytes * nbuf));
        for (int i = 0; i < nbuf; ++i) fill_rows(logits + i * bytes, dt, B, V, true, 77 + i);
        int32_t* ids;
        float* vals;
        CHECK_CUDA(cudaMalloc(&ids, static_cast<size_t>(B) * a.k * 4));
        CHECK_CUDA(cudaMalloc(&vals, static_cast<size_t>(B) * a.k * 4));
        sonic::CallOptions opt;
        opt.stream = stream;
        auto call = [&](int i) {
          sampler.top_k(sonic::LogitsView{logits + i * bytes, dt, B, V, V}, a.k, sonic::TopKOutputs{ids, vals, a.k}, opt);
        };
        // Check the first rows of buffer 0 against the reference.
        call(0);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        const int nref = std::min(B, 3);
        std::vector<char> host(static_cast<size_t>(nref) * V * elem);
        CHECK_CUDA(cudaMemcpy(host.data(), logits, host.size(), cudaMemcpyDeviceToHost));
        std::vector<int32_t> got(static_cast<size_t>(nref) * a.k), want(got.size());
        CHECK_CUDA(cudaMemcpy(got.data(), ids, got.size() * 4, cudaMemcpyDeviceToHost));
        reference.top_k(sonic::LogitsView{host.data(), dt, nref, V, V}, a.k, sonic::TopKOutputs{want.data(), nullptr, a.k});
        const bool ok = got == want;
        // Rows the fast kernel flagged for the exact top-k kernel, over one call of every rotating
        // buffer: the eager figure is a median, so a few buffers' slow calls show only in the graph's
        // mean and here.
        uint64_t flagged_rows = 0;
        int flagged_buffers = 0;
        for (int i = 0; ok && i < nbuf; ++i) {
          const uint64_t before = sampler.exact_path_rows();
          call(i);
          CHECK_CUDA(cudaStreamSynchronize(stream));
          const uint64_t rows = sampler.exact_path_rows() - before;
          flagged_rows += rows;
          flagged_buffers += rows > 0;
        }
        double graph_us = 0.0, eager_us = 0.0;
        if (ok) std::tie(graph_us, eager_us) = time_calls(stream, nbuf, a.graph_replays, call);
        else ++failures;
        const double floor_us = read_floor_us(bytes);
        std::printf("%-14s %-5s %7d %4d %10.2f %10.2f %9.2f %6.0f%%  %s  exact rows %llu in %d of %d buffers\n",
                    ("topk-k" + std::to_string(a.k)).c_str(), dtype.c_str(), V, B, graph_us, eager_us, floor_us,
                    graph_us > 0 ? 100.0 * floor_us / graph_us : 0.0, ok ? "ok" : "FAILED(reference mismatch)",
                    static_cast<unsigned long long>(flagged_rows), flagged_buffers, nbuf);
        std::fflush(stdout);
        if (ok) {
          const std::string cs = "homog-peaked";  // the logits of the sample suite's case of that name
          std::fprintf(out,
                       "{\"suite\": \"topk\", \"impl\": \"sonic\", \"case\": \"%s\", \"B\": %d, \"V\": %d, \"dtype\": \"%s\", "
                       "\"mode\": \"graph\", \"k\": %d, \"us\": %.2f, \"floor_us\": %.2f, \"gpu\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\"}\n",
                       cs.c_str(), B, V, dtype.c_str(), a.k, graph_us, floor_us, gpu.c_str(), a.commit.c_str(), a.date.c_str());
          std::fprintf(out,
                       "{\"suite\": \"topk\", \"impl\": \"sonic\", \"case\": \"%s\", \"B\": %d, \"V\": %d, \"dtype\": \"%s\", "
                       "\"mode\": \"eager\", \"k\": %d, \"us\": %.2f, \"floor_us\": %.2f, \"gpu\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\"}\n",
                       cs.c_str(), B, V, dtype.c_str(), a.k, eager_us, floor_us, gpu.c_str(), a.commit.c_str(), a.date.c_str());
          std::fflush(out);
        }
        cudaFree(logits);
        cudaFree(ids);
        cudaFree(vals);
      }
    }
  }
  return failures;
}

// Suite "verify": Sampler::verify on n drafts a request (--drafts, default 1,3,5,7), B requests,
// cases all-greedy, all-random (one-hot drafts: n-gram style), mixed (greedy, one-hot, dense q,
// strict), homog-peaked logits (fp32, or the types --dtype names), T 0.7 / top-k 50 / top-p 0.9 for
// random requests; and, only when
// --case names it, mixed-rules: the mixed case with every other request penalised (repetition 1.1,
// frequency and presence 0.1) over a prompt of 1024 tokens, rows with rules beside rows without (the
// verification rows' row tails, perf-notes v3.24). Checked against the
// CPU reference on the first requests, then timed; the lines carry "rows" (B (n + 1)) so that the
// single-step time of as many rows can be read next to them.
int bench_verify(const Args& a, FILE* out, const std::string& gpu, cudaStream_t stream) {
  int failures = 0;
  const int maxB = *std::max_element(a.batches.begin(), a.batches.end());
  const int maxN = *std::max_element(a.drafts.begin(), a.drafts.end());
  for (int32_t V : a.vocabs) {
    sonic::SamplerConfig cfg;
    cfg.backend = sonic::Backend::kCuda;
    cfg.vocab_size = V;
    cfg.max_slots = maxB;
    cfg.max_rows = maxB * (maxN + 1);
    cfg.max_drafts = maxN;
    cfg.max_history = 4096;
    sonic::Sampler sampler(cfg);
    sonic::SamplerConfig ccfg = cfg;
    ccfg.backend = sonic::Backend::kCpu;
    sonic::Sampler reference(ccfg);
    // The cases --case names among these four, or the first three.
    std::vector<std::string> cases;
    for (const char* c : {"all-greedy", "all-random", "mixed", "mixed-rules"})
      if (std::find(a.cases.begin(), a.cases.end(), c) != a.cases.end()) cases.push_back(c);
    if (cases.empty()) cases = {"all-greedy", "all-random", "mixed"};
    const std::vector<std::string> dtypes = a.dtypes_given ? a.dtypes : std::vector<std::string>{"fp32"};
    for (const std::string& dtype : dtypes)
    for (const std::string& cname : cases) {
      const sonic::DType dt = dtype_of(dtype);
      const size_t elem = dtype_bytes(dt);
      for (int n : a.drafts) {
        for (int B : a.batches) {
          const int rows = B * (n + 1);
          std::vector<int32_t> rules(B), cu(B + 1), drafts(static_cast<size_t>(B) * n);
          std::vector<char> greedy(B);  // the requests that must agree with the reference exactly
          std::mt19937_64 rng(B * 31 + n);
          for (int b = 0; b < B; ++b) {
            sonic::RequestParams p;
            p.seed = 500 + b;
            const int kind = cname == "all-greedy" ? 0 : cname == "all-random" ? 1 : b % 4;
            p.temperature = kind == 0 ? 0.0f : 0.7f;
            greedy[b] = kind == 0;
            p.top_k = 50;
            p.top_p = 0.9f;
            std::vector<int32_t> prompt;
            if (cname == "mixed-rules" && b % 2 == 1) {
              p.repetition_penalty = 1.1f;
              p.frequency_penalty = 0.1f;
              p.presence_penalty = 0.1f;
              for (int i = 0; i < 1024; ++i) prompt.push_back(static_cast<int32_t>(rng() % V));
            }
            rules[b] = kind == 2 ? static_cast<int32_t>(sonic::VerifyRule::kDenseDraftProbs)
                       : kind == 3 ? static_cast<int32_t>(sonic::VerifyRule::kStrict)
                                   : static_cast<int32_t>(sonic::VerifyRule::kOneHot);
            sampler.admit(b, p, prompt.data(), static_cast<int64_t>(prompt.size()));
            reference.admit(b, p, prompt.data(), static_cast<int64_t>(prompt.size()));
            cu[b] = b * (n + 1);
            for (int j = 0; j < n; ++j) drafts[b * n + j] = static_cast<int32_t>(rng() % V);
          }
          cu[B] = rows;
          const size_t bytes = static_cast<size_t>(rows) * V * elem;
          const int nbuf = rotating_buffers(bytes);
          char* logits;
          CHECK_CUDA(cudaMalloc(&logits, bytes * nbuf));
          for (int i = 0; i < nbuf; ++i) fill_rows(logits + i * bytes, dt, rows, V, true, 77 + i);
          // Buffer 0 on the host: the drafts and the reference's check read it.
          std::vector<char> h(bytes);
          CHECK_CUDA(cudaMemcpy(h.data(), logits, bytes, cudaMemcpyDeviceToHost));
          // Draft tokens: the target row's argmax half the time, so that some are accepted.
          for (int b = 0; b < B; ++b)
            for (int j = 0; j < n; ++j)
              if (rng() % 2) {
                const std::vector<float> row =
                    sonic::ref::row_to_float(h.data() + static_cast<size_t>(b * (n + 1) + j) * V * elem, dt, V);
                drafts[b * n + j] = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
              }
          // Dense q: uniform over V (the worst case for the residual: every kept token has r > 0).
          std::vector<float> q(static_cast<size_t>(std::max(1, B * n)) * V, 1.0f / static_cast<float>(V));
          int32_t *d_cu, *d_drafts, *d_rules, *d_tokens, *d_acc, *d_status;
          float* d_q;
          CHECK_CUDA(cudaMalloc(&d_cu, cu.size() * 4));
          CHECK_CUDA(cudaMalloc(&d_drafts, std::max<size_t>(1, drafts.size()) * 4));
          CHECK_CUDA(cudaMalloc(&d_rules, rules.size() * 4));
          CHECK_CUDA(cudaMalloc(&d_tokens, static_cast<size_t>(B) * (maxN + 1) * 4));
          CHECK_CUDA(cudaMalloc(&d_acc, B * 4));
          CHECK_CUDA(cudaMalloc(&d_status, rows * 4));
          CHECK_CUDA(cudaMalloc(&d_q, q.size() * 4));
          CHECK_CUDA(cudaMemcpy(d_cu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
          CHECK_CUDA(cudaMemcpy(d_drafts, drafts.data(), drafts.size() * 4, cudaMemcpyHostToDevice));
          CHECK_CUDA(cudaMemcpy(d_rules, rules.data(), rules.size() * 4, cudaMemcpyHostToDevice));
          CHECK_CUDA(cudaMemcpy(d_q, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
          auto inputs = [&](const int32_t* c, const int32_t* d, const int32_t* ru, const float* qq) {
            sonic::VerifyInputs in;
            in.num_requests = B;
            in.cu_rows = c;
            in.draft_tokens = d;
            in.num_drafts_capacity = static_cast<int64_t>(B) * n;
            in.rules = ru;
            in.draft_probs.dense = qq;
            in.draft_probs.dense_rows = static_cast<int64_t>(B) * n;
            in.draft_probs.dense_stride = V;
            return in;
          };
          sonic::VerifyOutputs o;
          o.tokens = d_tokens;
          o.num_accepted = d_acc;
          o.out_stride = maxN + 1;
          o.status = d_status;
          sonic::CallOptions opt;
          opt.stream = stream;
          opt.advance_step = false;  // the timed state stays the checked state
          opt.append_to_history = false;
          auto view = [&](int i) { return sonic::LogitsView{logits + i * bytes, dt, rows, V, V}; };
          auto call = [&](int i) {
            sampler.verify(view(i), inputs(d_cu, d_drafts, d_rules, d_q), sonic::BitmaskView{}, o, opt);
          };
          // Check buffer 0 against the reference on the first requests (every kind of the mixed case):
          // greedy requests must agree exactly, and of 16 random ones one may differ (a near-tie).
          const int checked = std::min(B, 16);
          call(0);
          CHECK_CUDA(cudaStreamSynchronize(stream));
          std::vector<int32_t> got(static_cast<size_t>(B) * (maxN + 1)), want(got.size()), acc(B), wacc(B),
              st(rows), wst(rows);
          CHECK_CUDA(cudaMemcpy(got.data(), d_tokens, got.size() * 4, cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(acc.data(), d_acc, B * 4, cudaMemcpyDeviceToHost));
          {
            sonic::VerifyOutputs ho;
            ho.tokens = want.data();
            ho.num_accepted = wacc.data();
            ho.out_stride = maxN + 1;
            ho.status = wst.data();
            sonic::CallOptions hopt;
            hopt.advance_step = false;
            hopt.append_to_history = false;
            sonic::VerifyInputs hin = inputs(cu.data(), drafts.data(), rules.data(), q.data());
            hin.num_requests = checked;  // the reference is slow: the first requests only
            reference.verify(sonic::LogitsView{h.data(), dt, cu[checked], V, V}, hin,
                             sonic::BitmaskView{}, ho, hopt);
          }
          int mism = 0, greedy_mism = 0;
          for (int b = 0; b < checked; ++b) {
            bool same = acc[b] == wacc[b];
            for (int i = 0; i <= maxN; ++i) same &= got[b * (maxN + 1) + i] == want[b * (maxN + 1) + i];
            mism += !same;
            greedy_mism += !same && greedy[b];
          }
          double graph_us = 0.0, eager_us = 0.0;
          if (agrees_with_reference(checked, mism, greedy_mism))
            std::tie(graph_us, eager_us) = time_calls(stream, nbuf, a.graph_replays, call);
          else ++failures;
#if SONIC_TIMELINE
          if (a.timeline > 0 && graph_us > 0)
            report_timeline(a, cname + " " + dtype + " n=" + std::to_string(n) + " V=" + std::to_string(V) + " B=" + std::to_string(B),
                            stream, nbuf, call);
#endif
          const double floor_us = read_floor_us(bytes);
          std::printf("%-14s %-5s n=%d %7d %4d %10.2f %10.2f %9.2f %6.0f%%  %s\n", cname.c_str(), dtype.c_str(), n, V, B, graph_us, eager_us,
                      floor_us, graph_us > 0 ? 100.0 * floor_us / graph_us : 0.0,
                      mism == 0 ? "ok" : mism == 1 ? "ok (1 near-tie)" : ("FAILED(" + std::to_string(mism) + " requests differ)").c_str());
          std::fflush(stdout);
          if (mism <= 1)
            for (const char* mode : {"graph", "eager"})
              std::fprintf(out,
                           "{\"suite\": \"verify\", \"impl\": \"sonic\", \"case\": \"%s\", \"B\": %d, \"drafts\": %d, "
                           "\"rows\": %d, \"V\": %d, \"dtype\": \"%s\", \"mode\": \"%s\", \"us\": %.2f, \"floor_us\": %.2f, "
                           "\"gpu\": \"%s\", \"commit\": \"%s\", \"date\": \"%s\"}\n",
                           cname.c_str(), B, n, rows, V, dtype.c_str(), mode, std::string(mode) == "graph" ? graph_us : eager_us, floor_us,
                           gpu.c_str(), a.commit.c_str(), a.date.c_str());
          std::fflush(out);
          cudaFree(logits);
          cudaFree(d_cu);
          cudaFree(d_drafts);
          cudaFree(d_rules);
          cudaFree(d_tokens);
          cudaFree(d_acc);
          cudaFree(d_status);
          cudaFree(d_q);
          for (int b = 0; b < B; ++b) {
            sampler.retire(b);
            reference.retire(b);
          }
        }
      }
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--out") a.out = v;
    else if (k == "--commit") a.commit = v;
    else if (k == "--date") a.date = v;
    else if (k == "--B") { a.batches.clear(); for (auto& s : split(v)) a.batches.push_back(std::stoi(s)); }
    else if (k == "--V") { a.vocabs.clear(); for (auto& s : split(v)) a.vocabs.push_back(std::stoi(s)); }
    else if (k == "--dtype") {
      a.dtypes = split(v);
      a.dtypes_given = true;
      for (const std::string& d : a.dtypes) {
        sonic::DType unused;
        if (!parse_dtype(d, &unused)) { std::fprintf(stderr, "--dtype: unknown element type '%s' (fp32, bf16 or fp16)\n", d.c_str()); return 2; }
      }
    }
    else if (k == "--case") a.cases = split(v);
    else if (k == "--suite") {
      if (v != "sample" && v != "topk" && v != "verify") {
        std::fprintf(stderr, "--suite: unknown suite '%s' (sample, topk or verify)\n", v.c_str());
        return 2;
      }
      a.suite = v;
    }
    else if (k == "--k") a.k = std::stoi(v);
    else if (k == "--drafts") { a.drafts.clear(); for (auto& x : split(v)) a.drafts.push_back(std::stoi(x)); }
    else if (k == "--timeline") a.timeline = std::stoi(v);
    else if (k == "--timeline-graph") a.timeline_graph = v != "0";
    else if (k == "--cold-l2") a.cold_l2 = v != "0";
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); return 2; }
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const std::string gpu = prop.name;
  FILE* out = std::fopen(a.out.c_str(), "a");
  if (!out) { std::perror(a.out.c_str()); return 1; }
  std::printf("%-14s %-5s %7s %4s %10s %10s %9s %7s  %s\n", "case", "dtype", "V", "B", "graph_us", "eager_us", "floor_us", "%floor", "check");
  if (a.suite == "topk" || a.suite == "verify") {
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int failures = a.suite == "topk" ? bench_top_k(a, out, gpu, s) : bench_verify(a, out, gpu, s);
    std::fclose(out);
    std::printf("sonic_bench: %d configuration(s) failed their check\n", failures);
    return failures ? 1 : 0;
  }
  const int maxB = *std::max_element(a.batches.begin(), a.batches.end());
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int failures = 0;

  for (int32_t V : a.vocabs) {
    sonic::SamplerConfig cfg;
    cfg.backend = sonic::Backend::kCuda;
    cfg.vocab_size = V;
    cfg.max_slots = maxB;
    cfg.max_rows = maxB;
    cfg.max_history = 4096;
    sonic::Sampler sampler(cfg);
    for (const std::string& dtype : a.dtypes) {
      const sonic::DType dt = dtype_of(dtype);
      const size_t elem = dtype_bytes(dt);
      for (const std::string& cname : a.cases) {
        Case c;
        if (!parse_case(cname, &c)) {
          std::fprintf(stderr, "--case: unknown sample case '%s' (homog-, hetero-, topp-, topp-sharp-, grammar- or hetero-kind0..3- with optional k1..k1024-, t1..t500-, nopen-, nojoint- in that order, then peaked or flat)\n",
                       cname.c_str());
          return 2;
        }
        for (int B : a.batches) {
          // Requests.
          std::mt19937_64 rng(B * 7919 + V);
          std::vector<sonic::RequestParams> params(B);
          std::vector<std::vector<int32_t>> prompts(B);
          for (int r = 0; r < B; ++r) {
            params[r] = row_params(c, r, V, rng, &prompts[r]);
            sampler.admit(r, params[r], prompts[r].data(), static_cast<int64_t>(prompts[r].size()));
          }
          // Rotating inputs, >= 256 MiB in all.
          const size_t bytes = static_cast<size_t>(B) * V * elem;
          const int nbuf = rotating_buffers(bytes);
          char* logits;
          CHECK_CUDA(cudaMalloc(&logits, bytes * nbuf));
          for (int i = 0; i < nbuf; ++i) fill_rows(logits + i * bytes, dt, B, V, c.peaked, 77 + i);
          CHECK_CUDA(cudaGetLastError());
          int32_t *slots, *tokens, *status, *mask = nullptr, *mask_index = nullptr;
          CHECK_CUDA(cudaMalloc(&slots, B * 4));
          CHECK_CUDA(cudaMalloc(&tokens, B * 4));
          CHECK_CUDA(cudaMalloc(&status, B * 4));
          std::vector<int32_t> h_slots(B);
          for (int r = 0; r < B; ++r) h_slots[r] = r;
          CHECK_CUDA(cudaMemcpy(slots, h_slots.data(), B * 4, cudaMemcpyHostToDevice));
          const int32_t words = (V + 31) / 32;
          std::vector<int32_t> h_mask, h_mask_index(B, -1);
          sonic::BitmaskView bm;
          if (c.hetero || c.grammar) {
            h_mask.resize(static_cast<size_t>(B) * words);
            if (c.grammar)
              for (int r = 0; r < B; ++r) grammar_mask_row(r, V, rng, h_mask.data() + static_cast<size_t>(r) * words, words);
            else
              for (auto& w : h_mask) w = static_cast<int32_t>(rng());
            for (int r = 0; r < B; ++r) h_mask_index[r] = c.grammar || c.row_kind(r) == 2 ? r : -1;
            CHECK_CUDA(cudaMalloc(&mask, h_mask.size() * 4));
            CHECK_CUDA(cudaMalloc(&mask_index, B * 4));
            CHECK_CUDA(cudaMemcpy(mask, h_mask.data(), h_mask.size() * 4, cudaMemcpyHostToDevice));
            CHECK_CUDA(cudaMemcpy(mask_index, h_mask_index.data(), B * 4, cudaMemcpyHostToDevice));
            bm = sonic::BitmaskView{mask, B, words, words, mask_index};
          }
          auto view = [&](int i) { return sonic::LogitsView{logits + i * bytes, dt, B, V, V}; };
          sonic::SampleOutputs o;
          o.tokens = tokens;
          o.status = status;
          sonic::CallOptions opt;
          opt.stream = stream;
          opt.append_to_history = false;  // the timed state stays the checked state

          // Check: the first 16 rows against the CPU reference (same step), all tokens in range.
          // Greedy rows must agree exactly; of random rows one in 16 may differ (a near-tie), so a
          // small batch's rows must all agree.
          std::string check = "ok";
          {
            const int nref = std::min(B, 16);
            std::vector<uint64_t> steps(nref);
            for (int r = 0; r < nref; ++r) steps[r] = sampler.step(r);
            sampler.sample(view(0), slots, bm, o, opt);
            CHECK_CUDA(cudaStreamSynchronize(stream));
            std::vector<int32_t> got(B), st(B);
            CHECK_CUDA(cudaMemcpy(got.data(), tokens, B * 4, cudaMemcpyDeviceToHost));
            CHECK_CUDA(cudaMemcpy(st.data(), status, B * 4, cudaMemcpyDeviceToHost));
            std::vector<char> host(static_cast<size_t>(nref) * V * elem);
            CHECK_CUDA(cudaMemcpy(host.data(), logits, host.size(), cudaMemcpyDeviceToHost));
            int bad = 0, mism = 0, greedy_mism = 0;
            for (int r = 0; r < B; ++r) bad += got[r] < 0 || got[r] >= V || st[r] != 0;
            for (int r = 0; r < nref; ++r) {
              const std::vector<float> x = sonic::ref::row_to_float(host.data() + static_cast<size_t>(r) * V * elem, dt, V);
              const sonic::ref::TokenCounts counts = sonic::ref::count_tokens(prompts[r], {});
              const int32_t* mrow = h_mask_index[r] >= 0 ? h_mask.data() + static_cast<size_t>(r) * words : nullptr;
              const sonic::ref::RowContext ctx{&params[r], &counts, mrow, V, steps[r], 0};
              const bool wrong = sonic::ref::sample_row(x.data(), ctx, sonic::LogprobMode::kRaw).token != got[r];
              mism += wrong;
              greedy_mism += wrong && params[r].temperature == 0.0f;
            }
            if (bad || !agrees_with_reference(nref, mism, greedy_mism)) {
              check = "FAILED(" + std::to_string(bad) + " bad, " + std::to_string(mism) + " ref mismatches, " +
                      std::to_string(greedy_mism) + " greedy)";
              ++failures;
            } else if (mism) {
              check = "ok (1 near-tie)";
            }
          }

          double graph_us = 0.0, eager_us = 0.0;
          const uint64_t exact_before = sampler.exact_path_rows(), band_before = sampler.exact_path_band_rows();
          if (check.rfind("ok", 0) == 0)
            std::tie(graph_us, eager_us) = time_calls(stream, nbuf, a.graph_replays,
                                                      [&](int i) { sampler.sample(view(i), slots, bm, o, opt); });
          const uint64_t exact_rows = sampler.exact_path_rows() - exact_before;
          const uint64_t band_rows = sampler.exact_path_band_rows() - band_before;
#if SONIC_TIMELINE
          if (a.timeline > 0 && graph_us > 0)
            report_timeline(a, cname + " " + dtype + " V=" + std::to_string(V) + " B=" + std::to_string(B), stream, nbuf,
                            [&](int i) { sampler.sample(view(i), slots, bm, o, opt); });
#endif
          const double floor_us = read_floor_us(bytes);
          // Rows sent to the exact path during the timing (graph replays run every captured call).
          // Rows the exact path decided from stage 2's margin band, if any (margin_band.cuh).
          const std::string band = band_rows ? " (" + std::to_string(band_rows) + " from their band)" : "";
          std::printf("%-14s %-5s %7d %4d %10.2f %10.2f %9.2f %6.0f%%  %s  exact rows %llu%s\n", cname.c_str(), dtype.c_str(),
                      V, B, graph_us, eager_us, floor_us, graph_us > 0 ? 100.0 * floor_us / graph_us : 0.0, check.c_str(),
                      static_cast<unsigned long long>(exact_rows), band.c_str());
          std::fflush(stdout);
          if (a.cold_l2 && graph_us > 0) {
            // Printed only: BENCH.md's figures are the two above.
            const double cold_us =
                time_calls_cold_l2(stream, nbuf, [&](int i) { sampler.sample(view(i), slots, bm, o, opt); });
            std::printf("  cold L2 (diagnostic): %.2f us a call against %.2f (graph of [L2 flush, call] pairs less the flushes alone)\n",
                        cold_us, graph_us);
            std::fflush(stdout);
          }
          if (graph_us > 0) {
            emit(out, a, "sonic", cname, B, V, dtype, "graph", graph_us, floor_us, gpu);
            emit(out, a, "sonic", cname, B, V, dtype, "eager", eager_us, floor_us, gpu);
          }
          cudaFree(logits);
          cudaFree(slots);
          cudaFree(tokens);
          cudaFree(status);
          cudaFree(mask);
          cudaFree(mask_index);
          for (int r = 0; r < B; ++r) sampler.retire(r);
        }
      }
    }
  }
  std::fclose(out);
  std::printf("sonic_bench: %d configuration(s) failed their check\n", failures);
  return failures ? 1 : 0;
}
