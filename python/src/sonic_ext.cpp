// sonic._sonic: the nanobind binding of sonic::Sampler. Arrays arrive through DLPack (or the buffer
// protocol) as nb::ndarray without copies; this file checks their dtype, shape, layout and device,
// naming the Python argument in the error, and fills the C++ views. The Python package
// (python/sonic/) allocates the outputs and offers the friendly API; this layer stays thin.
//
// Errors: a bad Python argument raises TypeError (wrong dtype or not an array) or ValueError (shape,
// layout, device, range); sonic::Error raises ValueError for kInvalidArgument and RuntimeError
// otherwise, with the library's message (which names the C++ argument and its value).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sonic/sonic.hpp"

namespace nb = nanobind;

namespace {

using InArray = nb::ndarray<nb::ro>;  // any dtype, shape and device; read through a const pointer
using OutArray = nb::ndarray<>;       // any dtype, shape and device; written

// DLPack device types (dlpack.h): host memory and the CUDA kinds.
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;
constexpr int kDLCUDAManaged = 13;

enum class Elem { kI32, kF32, kLogits, kU8 };

std::string dtype_name(nb::dlpack::dtype d) {
  const auto code = static_cast<nb::dlpack::dtype_code>(d.code);
  std::string base;
  switch (code) {
    case nb::dlpack::dtype_code::Int: base = "int"; break;
    case nb::dlpack::dtype_code::UInt: base = "uint"; break;
    case nb::dlpack::dtype_code::Float: base = "float"; break;
    case nb::dlpack::dtype_code::Bfloat: base = "bfloat"; break;
    case nb::dlpack::dtype_code::Bool: return "bool";
    case nb::dlpack::dtype_code::Complex: base = "complex"; break;
    default: base = "dtype(code=" + std::to_string(int(d.code)) + ")"; break;
  }
  std::string s = base + std::to_string(int(d.bits));
  if (d.lanes != 1) s += "x" + std::to_string(int(d.lanes));
  return s;
}

bool is(nb::dlpack::dtype d, nb::dlpack::dtype_code code, int bits) {
  return d.code == static_cast<uint8_t>(code) && d.bits == bits && d.lanes == 1;
}

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::kI32: return "int32";
    case Elem::kF32: return "float32";
    case Elem::kU8: return "uint8";
    case Elem::kLogits: return "float32, bfloat16 or float16";
  }
  return "?";
}

[[noreturn]] void type_error(const std::string& msg) { throw nb::type_error(msg.c_str()); }
[[noreturn]] void value_error(const std::string& msg) { throw nb::value_error(msg.c_str()); }

template <typename A>
std::string shape_str(const A& a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (i) s += ", ";
    s += std::to_string(a.shape(i));
  }
  if (a.ndim() == 1) s += ",";
  return s + ")";
}

std::string device_name(int type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLCUDAManaged: return "cuda_managed";
    default: return "device type " + std::to_string(type);
  }
}

// Where an array must live: host memory (prompts, token lists), or where the backend works.
enum class Where { kHost, kBackend };

class Binding;

struct Checked {
  const void* data = nullptr;
  int64_t rows = 0;    // shape(0)
  int64_t cols = 0;    // shape(1) for 2-D arrays, 1 otherwise
  int64_t stride = 0;  // stride of dim 0 in elements (2-D), >= cols
};

// A placeholder address for arrays with no elements, whose DLPack data pointer may be null.
alignas(16) const int32_t kEmpty[4] = {0, 0, 0, 0};

class Binding {
 public:
  explicit Binding(const sonic::SamplerConfig& config) : sampler_(config) {}

  sonic::Sampler& sampler() { return sampler_; }
  const sonic::SamplerConfig& config() const { return sampler_.config(); }
  // Every call that reads or changes the sampler's state holds this, with the GIL released: calls
  // from two Python threads would otherwise race on the request table (a sample reading a history
  // that an admit replaces).
  std::unique_lock<std::mutex> hold() { return std::unique_lock<std::mutex>(mutex_); }
  bool on_cuda() const { return sampler_.backend() == sonic::Backend::kCuda; }

  // Checks one array and returns its data and 2-D geometry. ndim is 1, 2 or 3 (3: C-contiguous).
  // rows_expected / cols_expected < 0: any.
  template <typename A>
  Checked check(const A& a, const char* name, Elem elem, int ndim, Where where,
                int64_t rows_expected = -1, int64_t cols_expected = -1,
                int64_t depth_expected = -1, bool row_strided = false) const {
    const nb::dlpack::dtype d = a.dtype();
    bool ok = false;
    switch (elem) {
      case Elem::kI32: ok = is(d, nb::dlpack::dtype_code::Int, 32); break;
      case Elem::kF32: ok = is(d, nb::dlpack::dtype_code::Float, 32); break;
      case Elem::kU8: ok = is(d, nb::dlpack::dtype_code::UInt, 8); break;
      case Elem::kLogits:
        ok = is(d, nb::dlpack::dtype_code::Float, 32) || is(d, nb::dlpack::dtype_code::Float, 16) ||
             is(d, nb::dlpack::dtype_code::Bfloat, 16);
        break;
    }
    if (!ok)
      type_error(std::string("sonic: argument '") + name + "' must have dtype " + elem_name(elem) +
                 ", got " + dtype_name(d));
    if (static_cast<int>(a.ndim()) != ndim)
      value_error(std::string("sonic: argument '") + name + "' must be " + std::to_string(ndim) +
                  "-D, got shape " + shape_str(a));
    const int dev = a.device_type();
    if (where == Where::kHost || !on_cuda()) {
      if (dev != kDLCPU && dev != kDLCUDAHost)
        value_error(std::string("sonic: argument '") + name + "' must be in host memory" +
                    (where == Where::kHost ? "" : " (the sampler runs on the CPU backend)") +
                    ", got " + device_name(dev));
    } else {
      if (dev != kDLCUDA && dev != kDLCUDAManaged)
        value_error(std::string("sonic: argument '") + name +
                    "' must be in CUDA device memory (the sampler runs on the CUDA backend), got " +
                    device_name(dev));
      if (dev == kDLCUDA && a.device_id() != config().device)
        value_error(std::string("sonic: argument '") + name + "' is on cuda:" +
                    std::to_string(a.device_id()) + ", the sampler on cuda:" +
                    std::to_string(config().device));
    }
    const int64_t expect[3] = {rows_expected, cols_expected, depth_expected};
    for (int i = 0; i < ndim; ++i)
      if (expect[i] >= 0 && static_cast<int64_t>(a.shape(i)) != expect[i]) {
        std::string want = "(";
        for (int j = 0; j < ndim; ++j) {
          if (j) want += ", ";
          want += expect[j] >= 0 ? std::to_string(expect[j]) : std::string("*");
        }
        want += ndim == 1 ? ",)" : ")";
        value_error(std::string("sonic: argument '") + name + "' must have shape " + want +
                    ", got " + shape_str(a));
      }

    Checked c;
    c.rows = static_cast<int64_t>(a.shape(0));
    c.cols = ndim >= 2 ? static_cast<int64_t>(a.shape(1)) : 1;
    // Layout: unit stride in the last dimension; C-contiguous except dim 0 of row-strided 2-D
    // arrays (logits), whose row stride may exceed the row length. Extents of 1 have any stride.
    int64_t inner = 1;
    // An empty array has no layout to check (numpy gives a (0, V) array strides (0, 0)).
    for (int i = a.size() == 0 ? -1 : ndim - 1; i >= 0; --i) {
      const int64_t n = static_cast<int64_t>(a.shape(i));
      const int64_t s = a.stride(i);
      const bool free_row = row_strided && i == 0 && ndim == 2;
      if (n > 1 && (free_row ? s < inner : s != inner))
        value_error(std::string("sonic: argument '") + name + "' must be " +
                    (row_strided ? "row-contiguous (unit stride along the last dimension, row "
                                   "stride >= row length)"
                                 : "C-contiguous") +
                    "; got shape " + shape_str(a) + " with element strides " +
                    strides_str(a));
      inner *= n;
    }
    c.stride = c.cols;
    if (ndim == 2 && row_strided && c.rows > 1) c.stride = a.stride(0);
    c.data = a.data();
    if (c.data == nullptr && a.size() == 0) c.data = kEmpty;
    return c;
  }

 private:
  template <typename A>
  static std::string strides_str(const A& a) {
    std::string s = "(";
    for (size_t i = 0; i < a.ndim(); ++i) {
      if (i) s += ", ";
      s += std::to_string(a.stride(i));
    }
    if (a.ndim() == 1) s += ",";
    return s + ")";
  }

  sonic::Sampler sampler_;
  std::mutex mutex_;
};

sonic::DType logits_dtype(const InArray& a) {
  const nb::dlpack::dtype d = a.dtype();
  if (is(d, nb::dlpack::dtype_code::Bfloat, 16)) return sonic::DType::kBF16;
  if (is(d, nb::dlpack::dtype_code::Float, 16)) return sonic::DType::kF16;
  return sonic::DType::kF32;
}

void* as_stream(uintptr_t stream) { return reinterpret_cast<void*>(stream); }

sonic::LogprobMode to_mode(int mode) {
  if (mode < 0 || mode > 2)
    value_error("sonic: argument 'logprobs' must be 'raw', 'processed' or 'final'");
  return static_cast<sonic::LogprobMode>(mode);
}

sonic::CallOptions call_options(int mode, bool advance_step, bool append_to_history, uintptr_t stream) {
  sonic::CallOptions opt;
  opt.logprob_mode = to_mode(mode);
  opt.advance_step = advance_step;
  opt.append_to_history = append_to_history;
  opt.stream = as_stream(stream);
  return opt;
}

// Fills a BitmaskView from optional bitmask [rows, words] int32 and bitmask_index [n] int32.
sonic::BitmaskView make_bitmask(const Binding& b, const InArray& bitmask,
                                const InArray& bitmask_index, int64_t call_rows) {
  sonic::BitmaskView v;
  if (!bitmask.is_valid()) {
    if (bitmask_index.is_valid())
      value_error("sonic: argument 'bitmask_index' is given without 'bitmask'");
    return v;
  }
  const Checked m = b.check(bitmask, "bitmask", Elem::kI32, 2, Where::kBackend, -1, -1, -1, true);
  v.data = static_cast<const int32_t*>(m.data);
  v.rows = m.rows;
  v.words = m.cols;
  v.row_stride = m.stride;
  if (bitmask_index.is_valid()) {
    const Checked ix =
        b.check(bitmask_index, "bitmask_index", Elem::kI32, 1, Where::kBackend, call_rows);
    v.row_index = static_cast<const int32_t*>(ix.data);
  }
  return v;
}

sonic::LogitsView make_logits(const Binding& b, const InArray& logits) {
  const Checked l = b.check(logits, "logits", Elem::kLogits, 2, Where::kBackend, -1, -1, -1, true);
  sonic::LogitsView v;
  v.data = l.data;
  v.dtype = logits_dtype(logits);
  v.rows = l.rows;
  v.cols = l.cols;
  v.row_stride = l.stride;
  return v;
}

template <typename T>
T* out_ptr(const Binding& b, const OutArray& a, const char* name, Elem elem, int ndim,
           int64_t d0, int64_t d1 = -1, int64_t d2 = -1) {
  if (!a.is_valid()) return nullptr;
  return const_cast<T*>(
      static_cast<const T*>(b.check(a, name, elem, ndim, Where::kBackend, d0, d1, d2).data));
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const sonic::Error& e) {
    PyErr_SetString(e.code() == sonic::ErrorCode::kInvalidArgument ? PyExc_ValueError
                                                                   : PyExc_RuntimeError,
                    e.what());
  }
}

}  // namespace

NB_MODULE(_sonic, m) {
  m.doc() = "sonic: exact batched LLM sampling (internal binding; use the sonic package)";
  nb::register_exception_translator(translate);

  m.def("cuda_available", &sonic::cuda_available,
        "True when this build has the CUDA backend and a usable GPU is present.");
  m.def(
      "max_final_entries",
      [](int backend, int32_t device) {
        return sonic::max_final_entries(static_cast<sonic::Backend>(backend), device);
      },
      nb::arg("backend"), nb::arg("device"),
      "The largest max_final_entries a sampler of that backend (an int) and device accepts.");
#if defined(SONIC_WITH_CUDA)
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
  m.attr("MAX_TOP_LOGPROBS") = sonic::kMaxTopLogprobs;
  m.attr("MAX_TOP_K") = sonic::kMaxTopK;

  nb::class_<Binding>(m, "Sampler")
      .def(
          "__init__",
          [](Binding* self, int backend, int32_t vocab_size, int32_t max_slots, int32_t max_rows,
             int32_t max_drafts, int32_t max_history, int32_t max_token_list,
             int32_t max_top_logprobs, int32_t max_final_entries, int32_t device, int32_t cpu_threads) {
            sonic::SamplerConfig c;
            c.backend = static_cast<sonic::Backend>(backend);
            c.vocab_size = vocab_size;
            c.max_slots = max_slots;
            c.max_rows = max_rows;
            c.max_drafts = max_drafts;
            c.max_history = max_history;
            c.max_token_list = max_token_list;
            c.max_top_logprobs = max_top_logprobs;
            c.max_final_entries = max_final_entries;
            c.device = device;
            c.cpu_threads = cpu_threads;
            new (self) Binding(c);
          },
          nb::arg("backend"), nb::arg("vocab_size"), nb::arg("max_slots"), nb::arg("max_rows"),
          nb::arg("max_drafts"), nb::arg("max_history"), nb::arg("max_token_list"),
          nb::arg("max_top_logprobs"), nb::arg("max_final_entries"), nb::arg("device"),
          nb::arg("cpu_threads"))
      .def_prop_ro("backend",
                   [](Binding& b) { return static_cast<int>(b.sampler().backend()); })
      .def_prop_ro("config",
                   [](Binding& b) {
                     const sonic::SamplerConfig& c = b.config();
                     nb::dict d;
                     d["backend"] = static_cast<int>(b.sampler().backend());
                     d["vocab_size"] = c.vocab_size;
                     d["max_slots"] = c.max_slots;
                     d["max_rows"] = c.max_rows;
                     d["max_drafts"] = c.max_drafts;
                     d["max_history"] = c.max_history;
                     d["max_token_list"] = c.max_token_list;
                     d["max_top_logprobs"] = c.max_top_logprobs;
                     d["max_final_entries"] = c.max_final_entries;
                     d["device"] = c.device;
                     d["cpu_threads"] = c.cpu_threads;
                     return d;
                   })
      .def(
          "admit",
          [](Binding& b, int32_t slot, const InArray& prompt, float temperature, int32_t top_k,
             float top_p, bool top_p_joint, float min_p, float repetition_penalty,
             bool repetition_output_only, float frequency_penalty, float presence_penalty,
             bool penalties_include_prompt, const InArray& bias_ids, const InArray& bias_values,
             const InArray& banned, const InArray& allowed, uint64_t seed, uint64_t initial_step,
             int32_t top_logprobs, uintptr_t stream) {
            sonic::RequestParams p;
            p.temperature = temperature;
            p.top_k = top_k;
            p.top_p = top_p;
            p.top_p_joint = top_p_joint;
            p.min_p = min_p;
            p.repetition_penalty = repetition_penalty;
            p.repetition_output_only = repetition_output_only;
            p.frequency_penalty = frequency_penalty;
            p.presence_penalty = presence_penalty;
            p.penalties_include_prompt = penalties_include_prompt;
            p.seed = seed;
            p.initial_step = initial_step;
            p.top_logprobs = top_logprobs;
            auto list = [&](const InArray& a, const char* name) {
              std::vector<int32_t> v;
              if (!a.is_valid()) return v;
              const Checked c = b.check(a, name, Elem::kI32, 1, Where::kHost);
              const int32_t* d = static_cast<const int32_t*>(c.data);
              v.assign(d, d + c.rows);
              return v;
            };
            p.banned_tokens = list(banned, "banned_tokens");
            p.allowed_tokens = list(allowed, "allowed_tokens");
            if (bias_ids.is_valid() != bias_values.is_valid())
              value_error("sonic: argument 'logit_bias': ids and values must be given together");
            if (bias_ids.is_valid()) {
              const std::vector<int32_t> ids = list(bias_ids, "logit_bias");
              const Checked c = b.check(bias_values, "logit_bias", Elem::kF32, 1, Where::kHost,
                                        static_cast<int64_t>(ids.size()));
              const float* vals = static_cast<const float*>(c.data);
              for (size_t i = 0; i < ids.size(); ++i) p.logit_bias.emplace_back(ids[i], vals[i]);
            }
            const int32_t* prompt_data = nullptr;
            int64_t prompt_len = 0;
            if (prompt.is_valid()) {
              const Checked c = b.check(prompt, "prompt", Elem::kI32, 1, Where::kHost);
              prompt_data = static_cast<const int32_t*>(c.data);
              prompt_len = c.rows;
            }
            nb::gil_scoped_release release;
            const auto held = b.hold();
            b.sampler().admit(slot, p, prompt_data, prompt_len, as_stream(stream));
          },
          nb::arg("slot"), nb::arg("prompt").none(), nb::arg("temperature"), nb::arg("top_k"),
          nb::arg("top_p"), nb::arg("top_p_joint"), nb::arg("min_p"),
          nb::arg("repetition_penalty"), nb::arg("repetition_output_only"),
          nb::arg("frequency_penalty"), nb::arg("presence_penalty"),
          nb::arg("penalties_include_prompt"), nb::arg("logit_bias_ids").none(),
          nb::arg("logit_bias_values").none(), nb::arg("banned_tokens").none(),
          nb::arg("allowed_tokens").none(), nb::arg("seed"), nb::arg("initial_step"),
          nb::arg("top_logprobs"), nb::arg("stream"))
      .def(
          "retire",
          [](Binding& b, int32_t slot, uintptr_t stream) {
            nb::gil_scoped_release release;
            const auto held = b.hold();
            b.sampler().retire(slot, as_stream(stream));
          },
          nb::arg("slot"), nb::arg("stream"))
      .def(
          "append_output",
          [](Binding& b, int32_t slot, const InArray& tokens, uintptr_t stream) {
            const Checked c = b.check(tokens, "tokens", Elem::kI32, 1, Where::kHost);
            nb::gil_scoped_release release;
            const auto held = b.hold();
            b.sampler().append_output(slot, static_cast<const int32_t*>(c.data), c.rows,
                                      as_stream(stream));
          },
          nb::arg("slot"), nb::arg("tokens"), nb::arg("stream"))
      .def(
          "step",
          [](Binding& b, int32_t slot) {
            nb::gil_scoped_release release;
            const auto held = b.hold();
            return b.sampler().step(slot);
          },
          nb::arg("slot"))
      .def(
          "sample",
          [](Binding& b, const InArray& logits, const InArray& slots, const InArray& bitmask,
             const InArray& bitmask_index, const OutArray& tokens, const OutArray& status,
             const OutArray& logprob, const OutArray& rank, const OutArray& top_ids,
             const OutArray& top_logprobs, const OutArray& final_ids,
             const OutArray& final_probs, const OutArray& final_count, int mode,
             bool advance_step, bool append_to_history, uintptr_t stream) {
            const sonic::LogitsView lv = make_logits(b, logits);
            const int64_t R = lv.rows;
            const int32_t* slot_ids = nullptr;
            if (slots.is_valid())
              slot_ids = static_cast<const int32_t*>(
                  b.check(slots, "slots", Elem::kI32, 1, Where::kBackend, R).data);
            const sonic::BitmaskView mv = make_bitmask(b, bitmask, bitmask_index, R);
            sonic::SampleOutputs o;
            o.tokens = out_ptr<int32_t>(b, tokens, "tokens", Elem::kI32, 1, R);
            o.status = out_ptr<int32_t>(b, status, "status", Elem::kI32, 1, R);
            o.logprob = out_ptr<float>(b, logprob, "logprob", Elem::kF32, 1, R);
            o.rank = out_ptr<int32_t>(b, rank, "rank", Elem::kI32, 1, R);
            if (top_ids.is_valid()) {
              const int64_t n = static_cast<int64_t>(top_ids.ndim() == 2 ? top_ids.shape(1) : 0);
              o.top_ids = out_ptr<int32_t>(b, top_ids, "top_ids", Elem::kI32, 2, R);
              o.top_logprobs =
                  out_ptr<float>(b, top_logprobs, "top_logprobs", Elem::kF32, 2, R, n);
              o.top_stride = n;
            }
            if (final_ids.is_valid()) {
              const int64_t n =
                  static_cast<int64_t>(final_ids.ndim() == 2 ? final_ids.shape(1) : 0);
              o.final_ids = out_ptr<int32_t>(b, final_ids, "final_ids", Elem::kI32, 2, R);
              o.final_probs = out_ptr<float>(b, final_probs, "final_probs", Elem::kF32, 2, R, n);
              o.final_count = out_ptr<int32_t>(b, final_count, "final_count", Elem::kI32, 1, R);
              o.final_stride = n;
            }
            const sonic::CallOptions opt = call_options(mode, advance_step, append_to_history, stream);
            nb::gil_scoped_release release;
            const auto held = b.hold();
            b.sampler().sample(lv, slot_ids, mv, o, opt);
          },
          nb::arg("logits"), nb::arg("slots").none(), nb::arg("bitmask").none(),
          nb::arg("bitmask_index").none(), nb::arg("tokens"), nb::arg("status").none(),
          nb::arg("logprob").none(), nb::arg("rank").none(), nb::arg("top_ids").none(),
          nb::arg("top_logprobs").none(), nb::arg("final_ids").none(),
          nb::arg("final_probs").none(), nb::arg("final_count").none(), nb::arg("mode"),
          nb::arg("advance_step"), nb::arg("append_to_history"), nb::arg("stream"))
      .def(
          "top_k",
          [](Binding& b, const InArray& logits, int32_t k, const OutArray& ids, const OutArray& values,
             uintptr_t stream) {
            const sonic::LogitsView lv = make_logits(b, logits);
            const int64_t R = lv.rows;
            const int64_t n = static_cast<int64_t>(ids.ndim() == 2 ? ids.shape(1) : 0);
            sonic::TopKOutputs o;
            o.ids = out_ptr<int32_t>(b, ids, "ids", Elem::kI32, 2, R);
            o.values = out_ptr<float>(b, values, "values", Elem::kF32, 2, R, n);
            o.stride = n;
            sonic::CallOptions opt;
            opt.stream = as_stream(stream);
            nb::gil_scoped_release release;
            const auto held = b.hold();
            b.sampler().top_k(lv, k, o, opt);
          },
          nb::arg("logits"), nb::arg("k"), nb::arg("ids"), nb::arg("values").none(), nb::arg("stream"))
      .def(
          "verify",
          [](Binding& b, const InArray& logits, const InArray& cu_rows, const InArray& slots,
             const InArray& draft_tokens, const InArray& rules, const InArray& draft_probs,
             const InArray& sparse_ids, const InArray& sparse_probs, const InArray& sparse_count,
             const InArray& bitmask, const InArray& bitmask_index, const OutArray& tokens,
             const OutArray& num_accepted, const OutArray& status, const OutArray& logprob,
             const OutArray& rank, const OutArray& top_ids, const OutArray& top_logprobs,
             int mode, bool advance_step, bool append_to_history, uintptr_t stream) {
            const sonic::LogitsView lv = make_logits(b, logits);
            const Checked cu = b.check(cu_rows, "cu_rows", Elem::kI32, 1, Where::kBackend);
            if (cu.rows < 1)
              value_error("sonic: argument 'cu_rows' must hold B + 1 >= 1 entries, got 0");
            const int64_t B = cu.rows - 1;
            sonic::VerifyInputs in;
            in.num_requests = static_cast<int32_t>(B);
            in.cu_rows = static_cast<const int32_t*>(cu.data);
            if (slots.is_valid())
              in.slots = static_cast<const int32_t*>(
                  b.check(slots, "slots", Elem::kI32, 1, Where::kBackend, B).data);
            const Checked d =
                b.check(draft_tokens, "draft_tokens", Elem::kI32, 1, Where::kBackend);
            in.draft_tokens = static_cast<const int32_t*>(d.data);
            in.num_drafts_capacity = d.rows;
            if (rules.is_valid())
              in.rules = static_cast<const int32_t*>(
                  b.check(rules, "rules", Elem::kI32, 1, Where::kBackend, B).data);
            if (draft_probs.is_valid()) {
              const Checked q = b.check(draft_probs, "draft_probs", Elem::kF32, 2,
                                        Where::kBackend, -1, -1, -1, true);
              in.draft_probs.dense = static_cast<const float*>(q.data);
              in.draft_probs.dense_rows = q.rows;
              in.draft_probs.dense_stride = q.rows > 1 ? q.stride : q.cols;
            }
            const int sparse_given =
                sparse_ids.is_valid() + sparse_probs.is_valid() + sparse_count.is_valid();
            if (sparse_given != 0 && sparse_given != 3)
              value_error(
                  "sonic: argument 'draft_sparse' needs ids, probs and count together");
            if (sparse_given == 3) {
              const Checked si =
                  b.check(sparse_ids, "draft_sparse.ids", Elem::kI32, 2, Where::kBackend);
              const Checked sp = b.check(sparse_probs, "draft_sparse.probs", Elem::kF32, 2,
                                         Where::kBackend, si.rows, si.cols);
              const Checked sc = b.check(sparse_count, "draft_sparse.count", Elem::kI32, 1,
                                         Where::kBackend, si.rows);
              in.draft_probs.sparse_ids = static_cast<const int32_t*>(si.data);
              in.draft_probs.sparse_probs = static_cast<const float*>(sp.data);
              in.draft_probs.sparse_count = static_cast<const int32_t*>(sc.data);
              in.draft_probs.sparse_rows = si.rows;
              in.draft_probs.sparse_stride = si.cols;
            }
            const sonic::BitmaskView mv = make_bitmask(b, bitmask, bitmask_index, lv.rows);
            sonic::VerifyOutputs o;
            const int64_t w = tokens.ndim() == 2 ? static_cast<int64_t>(tokens.shape(1)) : 0;
            o.tokens = out_ptr<int32_t>(b, tokens, "tokens", Elem::kI32, 2, B);
            o.out_stride = w;
            o.num_accepted = out_ptr<int32_t>(b, num_accepted, "num_accepted", Elem::kI32, 1, B);
            o.status = out_ptr<int32_t>(b, status, "status", Elem::kI32, 1, lv.rows);
            o.logprob = out_ptr<float>(b, logprob, "logprob", Elem::kF32, 2, B, w);
            o.rank = out_ptr<int32_t>(b, rank, "rank", Elem::kI32, 2, B, w);
            if (top_ids.is_valid()) {
              const int64_t n = static_cast<int64_t>(top_ids.ndim() == 3 ? top_ids.shape(2) : 0);
              o.top_ids = out_ptr<int32_t>(b, top_ids, "top_ids", Elem::kI32, 3, B, w);
              o.top_logprobs =
                  out_ptr<float>(b, top_logprobs, "top_logprobs", Elem::kF32, 3, B, w, n);
              o.top_stride = n;
            }
            const sonic::CallOptions opt = call_options(mode, advance_step, append_to_history, stream);
            nb::gil_scoped_release release;
            const auto held = b.hold();
            b.sampler().verify(lv, in, mv, o, opt);
          },
          nb::arg("logits"), nb::arg("cu_rows"), nb::arg("slots").none(),
          nb::arg("draft_tokens"), nb::arg("rules").none(), nb::arg("draft_probs").none(),
          nb::arg("sparse_ids").none(), nb::arg("sparse_probs").none(),
          nb::arg("sparse_count").none(), nb::arg("bitmask").none(),
          nb::arg("bitmask_index").none(), nb::arg("tokens"), nb::arg("num_accepted"),
          nb::arg("status").none(), nb::arg("logprob").none(), nb::arg("rank").none(),
          nb::arg("top_ids").none(), nb::arg("top_logprobs").none(), nb::arg("mode"),
          nb::arg("advance_step"), nb::arg("append_to_history"), nb::arg("stream"));
}
