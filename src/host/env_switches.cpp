#include "host/env_switches.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "sonic/error.hpp"

namespace sonic::detail {
namespace {

[[noreturn]] void bad_switch(const char* name, const char* value, const std::string& expected) {
  throw Error(ErrorCode::kInvalidArgument,
              std::string("sonic: ") + name + " = '" + value + "': expected " + expected);
}

}  // namespace

std::vector<int32_t> parse_int_list(const char* name, const char* value, const IntListFormat& format) {
  std::vector<int32_t> out;
  const char* p = value;
  while (true) {
    if (out.size() == format.ranges.size()) bad_switch(name, value, format.expected);  // too many
    // strtol alone would skip leading blanks and accept an empty field as nothing read.
    if (!(*p == '-' || (*p >= '0' && *p <= '9'))) bad_switch(name, value, format.expected);
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(p, &end, 10);
    const IntListFormat::Range& r = format.ranges[out.size()];
    if (end == p || errno == ERANGE || v < r.lo || v > r.hi) bad_switch(name, value, format.expected);
    out.push_back(static_cast<int32_t>(v));
    p = end;
    if (*p == '\0') break;
    if (*p != format.separator) bad_switch(name, value, format.expected);
    ++p;
  }
  if (out.size() < format.min_count) bad_switch(name, value, format.expected);
  return out;
}

std::optional<std::vector<int32_t>> env_int_list(const char* name, const IntListFormat& format) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  return parse_int_list(name, value, format);
}

std::optional<int32_t> env_int(const char* name, int32_t lo, int32_t hi) {
  const std::string expected = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  const auto v = env_int_list(name, IntListFormat{',', 1, {{lo, hi}}, expected.c_str()});
  if (!v) return std::nullopt;
  return (*v)[0];
}

}  // namespace sonic::detail
