// Environment switches for experiments and tests (README). Each is read when a sampler
// is made; a malformed value is an error naming the variable and its value, never a silent default
// (std::atoi read "75x" as 75 and "abc" as 0).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace sonic::detail {

// A list of integers separated by one character: at least min_count of them and at most
// ranges.size(), integer i within ranges[i].
struct IntListFormat {
  struct Range {
    int64_t lo, hi;
  };
  char separator;
  size_t min_count;
  std::vector<Range> ranges;
  const char* expected;  // for the message, e.g. "F,R,E percentages in [-1, 100]"
};

// `value` read as `format`. Throws Error(kInvalidArgument): "sonic: NAME = 'VALUE': expected ...".
std::vector<int32_t> parse_int_list(const char* name, const char* value, const IntListFormat& format);

// The environment variable `name` read as `format`, or nullopt when it is unset.
std::optional<std::vector<int32_t>> env_int_list(const char* name, const IntListFormat& format);

// The environment variable `name` as one integer in [lo, hi], or nullopt when it is unset.
std::optional<int32_t> env_int(const char* name, int32_t lo, int32_t hi);

}  // namespace sonic::detail
