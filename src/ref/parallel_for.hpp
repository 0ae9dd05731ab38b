// The CPU backend's rows on several threads (SamplerConfig::cpu_threads). Each row is computed
// exactly as on one thread; only the order in which rows finish changes, and every state change a
// call makes is applied after all of its rows, in row order.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace sonic::ref {

// The threads cpu_threads asks for: itself when positive, else one a hardware thread.
inline int resolve_cpu_threads(int32_t cpu_threads) {
  if (cpu_threads > 0) return cpu_threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

// Calls f(i) for every i in [0, n) on at most `threads` threads, the caller's among them, each
// taking the next index from a shared counter. If calls throw, the one of the lowest index is
// rethrown after every thread has finished (the same one whatever the timing). Where a thread
// cannot be started, the others do its share.
template <class F>
void parallel_for(int64_t n, int threads, F&& f) {
  const int64_t workers = std::min<int64_t>(threads, n);
  if (workers <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::mutex error_mutex;
  int64_t error_at = n;
  std::exception_ptr error;
  auto run = [&] {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        f(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (i < error_at) {
          error_at = i;
          error = std::current_exception();
        }
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int64_t w = 1; w < workers; ++w) {
    try {
      pool.emplace_back(run);
    } catch (...) {  // no more threads to be had: run with those started
      break;
    }
  }
  run();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace sonic::ref
