// The reference's one sort: 64-bit keys (detail::pack_key: the score's order bits, then the token id
// complemented) into descending order. Every key of a row is distinct (the ids are), so the order
// is the same whatever the algorithm; an LSD radix sort gives it about four times as fast as
// std::sort with a comparator on ids (V = 151936 on one core: 4 against 18 ms), which is most of
// what a CPU row costs. Digits on which all keys agree (the id's unused high bits) are skipped.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

namespace sonic::ref {

// Sorts `keys` into descending order; `scratch` is working space (resized here).
inline void sort_keys_descending(std::vector<uint64_t>& keys, std::vector<uint64_t>& scratch) {
  constexpr int kDigitBits = 11;
  constexpr uint64_t kDigitMask = (uint64_t{1} << kDigitBits) - 1;
  constexpr int kDigits = (64 + kDigitBits - 1) / kDigitBits;
  const size_t n = keys.size();
  if (n < 256) {  // below this the counting passes cost more than they save
    std::sort(keys.begin(), keys.end(), std::greater<uint64_t>());
    return;
  }
  // One read counts every digit's values; the bits that differ between keys say which digits to sort.
  std::vector<std::array<uint32_t, kDigitMask + 1>> count(kDigits);
  for (auto& c : count) c.fill(0);
  uint64_t all_and = ~uint64_t{0}, all_or = 0;
  for (const uint64_t k : keys) {
    all_and &= k;
    all_or |= k;
    for (int d = 0; d < kDigits; ++d) ++count[d][(k >> (d * kDigitBits)) & kDigitMask];
  }
  const uint64_t varying = all_and ^ all_or;
  scratch.resize(n);
  for (int d = 0; d < kDigits; ++d) {
    const int shift = d * kDigitBits;
    if (((varying >> shift) & kDigitMask) == 0) continue;
    // Stable scatter by this digit, larger digits first: after the last pass the keys are in
    // descending order (each pass keeps the order of the digits below it among equal digits).
    std::array<uint32_t, kDigitMask + 1>& at = count[d];
    uint32_t next = 0;
    for (size_t v = at.size(); v-- > 0;) {
      const uint32_t c = at[v];
      at[v] = next;
      next += c;
    }
    for (const uint64_t k : keys) scratch[at[(k >> shift) & kDigitMask]++] = k;
    keys.swap(scratch);
  }
}

}  // namespace sonic::ref
