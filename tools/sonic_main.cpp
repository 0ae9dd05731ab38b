// The `sonic` command-line program: `sonic demo` shows the library working in one command.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "demo.hpp"
#include "sonic/sonic.hpp"

#ifndef SONIC_VERSION
#define SONIC_VERSION "unknown"
#endif

namespace {

using sonic_tools::DemoOptions;

// A wrong command line: reported with a hint, exit code 2.
struct UsageError {
  std::string message;
  std::string help;  // the help command to suggest
};

const char* const kMainHelp =
    "usage: sonic <command> [options]\n"
    "\n"
    "sonic turns LLM logits into tokens: one batched pipeline with grammar masks, logit bias,\n"
    "penalties, temperature, min-p, top-k, top-p, greedy or random sampling, logprobs and\n"
    "speculative-draft verification.\n"
    "\n"
    "commands:\n"
    "  demo       sample a synthetic heterogeneous batch, verify drafts, time a step\n"
    "  info       show the version and which backends this build can use\n"
    "  help       show this message (also: sonic --help, sonic <command> --help)\n"
    "\n"
    "options:\n"
    "  -h, --help     show this message\n"
    "  --version      print the version\n";

const char* const kDemoHelp =
    "usage: sonic demo [options]\n"
    "\n"
    "Builds a batch of synthetic logits rows (peaked LM-head rows and flat ones), one request per\n"
    "row with its own parameters: greedy rows and random rows, temperature, top-k, top-p, joint\n"
    "top-p, min-p, repetition/frequency/presence penalties with both scope flags, logit bias,\n"
    "banned and allowed lists, a grammar bitmask on some rows, top-N logprobs and the sparse "
    "final\n"
    "distribution. Samples the batch in one call and prints each row; then verifies speculative\n"
    "drafts with every rule (greedy, dense draft probabilities, one-hot, strict, sparse draft\n"
    "probabilities) and prints the table; then times further steps of the same batch.\n"
    "\n"
    "options:\n"
    "  --vocab N                    vocabulary size, 1024..2097152 (default 32000)\n"
    "  --rows N                     rows in the batch, 1..4096 (default 16)\n"
    "  --steps N                    timed steps after the printed one, >= 1\n"
    "                               (default 5 on the CPU backend, 50 on CUDA)\n"
    "  --seed N                     seed of the synthetic data and the requests (default 1234)\n"
    "  --backend auto|cpu|cuda      where to run (default auto: CUDA when a GPU is usable)\n"
    "  --dtype f32|bf16|f16         dtype of the logits (default f32)\n"
    "  --logprobs raw|processed|final  logprob mode (default raw)\n"
    "  -h, --help                   show this message\n"
    "\n"
    "exit codes: 0 success, 1 library error, 2 bad command line\n";

long long parse_integer(const std::string& option, const std::string& text, long long lo,
                        long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw UsageError{option + " expects an integer in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got '" + text + "'",
                     "sonic demo --help"};
  return v;
}

uint64_t parse_seed(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] == '-' || *end != '\0' || errno == ERANGE)
    throw UsageError{"--seed expects a non-negative integer, got '" + text + "'",
                     "sonic demo --help"};
  return v;
}

template <typename T>
T parse_choice(const std::string& option, const std::string& text,
               const std::vector<std::pair<const char*, T>>& choices) {
  std::string names;
  for (const auto& c : choices) {
    if (text == c.first) return c.second;
    names += (names.empty() ? "" : "|") + std::string(c.first);
  }
  throw UsageError{option + " expects " + names + ", got '" + text + "'", "sonic demo --help"};
}

// Returns false when help was printed instead.
bool parse_demo(const std::vector<std::string>& args, DemoOptions& o) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (name == "-h" || name == "--help") {
      std::fputs(kDemoHelp, stdout);
      return false;
    }
    const size_t eq = name.find('=');
    const bool inline_value = name.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const char* known[] = {"--vocab",   "--rows",  "--steps",   "--seed",
                           "--backend", "--dtype", "--logprobs"};
    bool is_known = false;
    for (const char* k : known) is_known = is_known || name == k;
    if (!is_known)
      throw UsageError{(name.rfind("-", 0) == 0 ? "unknown option '" : "unexpected argument '") +
                           args[i] + "' for 'sonic demo'",
                       "sonic demo --help"};
    if (!inline_value) {
      if (i + 1 >= args.size()) throw UsageError{name + " needs a value", "sonic demo --help"};
      value = args[++i];
    }
    if (name == "--vocab") {
      o.vocab = int32_t(parse_integer(name, value, 1024, 1 << 21));
    } else if (name == "--rows") {
      o.rows = int32_t(parse_integer(name, value, 1, 4096));
    } else if (name == "--steps") {
      o.steps = int32_t(parse_integer(name, value, 1, 1000000));
    } else if (name == "--seed") {
      o.seed = parse_seed(value);
    } else if (name == "--backend") {
      o.backend = parse_choice<sonic::Backend>(name, value,
                                               {{"auto", sonic::Backend::kAuto},
                                                {"cpu", sonic::Backend::kCpu},
                                                {"cuda", sonic::Backend::kCuda}});
    } else if (name == "--dtype") {
      o.dtype = parse_choice<sonic::DType>(name, value,
                                           {{"f32", sonic::DType::kF32},
                                            {"bf16", sonic::DType::kBF16},
                                            {"f16", sonic::DType::kF16}});
    } else {
      o.logprob_mode =
          parse_choice<sonic::LogprobMode>(name, value,
                                           {{"raw", sonic::LogprobMode::kRaw},
                                            {"processed", sonic::LogprobMode::kProcessed},
                                            {"final", sonic::LogprobMode::kFinal}});
    }
  }
  return true;
}

int info() {
  std::printf("sonic %s\n", SONIC_VERSION);
  std::printf("cpu backend: available (the reference)\n");
#if defined(SONIC_WITH_CUDA)
  std::printf("cuda backend: %s (this build has CUDA)\n",
              sonic::cuda_available() ? "available" : "not usable here");
#else
  std::printf("cuda backend: not in this build (built without CUDA)\n");
#endif
  return 0;
}

int run(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fputs(kMainHelp, stderr);
    return 2;
  }
  const std::string& command = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "-h" || command == "--help" || command == "help") {
    if (command == "help" && !rest.empty() && rest[0] == "demo")
      std::fputs(kDemoHelp, stdout);
    else
      std::fputs(kMainHelp, stdout);
    return 0;
  }
  if (command == "--version" || command == "version") {
    std::printf("sonic %s\n", SONIC_VERSION);
    return 0;
  }
  if (command == "info") {
    if (!rest.empty()) {
      if (rest[0] == "-h" || rest[0] == "--help") {
        std::puts("usage: sonic info\n\nShows the version and which backends this build can use.");
        return 0;
      }
      throw UsageError{"unexpected argument '" + rest[0] + "' for 'sonic info'", "sonic --help"};
    }
    return info();
  }
  if (command == "demo") {
    DemoOptions options;
    if (!parse_demo(rest, options)) return 0;
    return sonic_tools::run_demo(options);
  }
  throw UsageError{
      (command.rfind("-", 0) == 0 ? "unknown option '" : "unknown command '") + command + "'",
      "sonic --help"};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "sonic: %s (see '%s')\n", e.message.c_str(), e.help.c_str());
    return 2;
  } catch (const sonic::Error& e) {
    const std::string what = e.what();
    std::fprintf(stderr, "%s%s\n",
                 what.rfind("sonic:", 0) == 0 ? "" : "sonic: error: ", what.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sonic: unexpected error: %s\n", e.what());
    return 1;
  }
}
