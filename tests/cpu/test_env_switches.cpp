// The environment switches for experiments and tests (src/host/env_switches.hpp): a value is read
// whole or rejected with an error that names the variable and the value.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "host/env_switches.hpp"
#include "sonic/error.hpp"

namespace {

using sonic::detail::IntListFormat;
using sonic::detail::parse_int_list;

const IntListFormat kCarveout{',', 3, {{-1, 100}, {-1, 100}, {-1, 100}}, "F,R,E percentages in [-1, 100]"};
const IntListFormat kTails{':', 1, {{0, 100}, {0, 1 << 30}}, "P or P:R"};

TEST(EnvSwitches, ReadsWellFormedLists) {
  EXPECT_EQ(parse_int_list("X", "-1,25,100", kCarveout), (std::vector<int32_t>{-1, 25, 100}));
  EXPECT_EQ(parse_int_list("X", "75", kTails), (std::vector<int32_t>{75}));
  EXPECT_EQ(parse_int_list("X", "75:265", kTails), (std::vector<int32_t>{75, 265}));
  EXPECT_EQ(parse_int_list("X", "0", kTails), (std::vector<int32_t>{0}));
}

TEST(EnvSwitches, RejectsMalformedValuesNamingThem) {
  const std::vector<std::pair<const IntListFormat*, const char*>> bad = {
      {&kCarveout, "100"},      {&kCarveout, "50,50,abc"}, {&kCarveout, "101,0,0"}, {&kCarveout, "-2,0,0"},
      {&kCarveout, "1,2,3,4"},  {&kCarveout, "1,,3"},      {&kCarveout, " 1,2,3"},  {&kCarveout, "1,2,3 "},
      {&kTails, ""},            {&kTails, "75x"},          {&kTails, "abc"},        {&kTails, "75:"},
      {&kTails, "75:265:1"},    {&kTails, "101"},          {&kTails, "75,265"},     {&kTails, "99999999999999999999"},
      {&kTails, "75:-1"},       {&kTails, "+5"}};
  for (const auto& [format, value] : bad) {
    SCOPED_TRACE(value);
    try {
      parse_int_list("SONIC_SOME_SWITCH", value, *format);
      ADD_FAILURE() << "no error";
    } catch (const sonic::Error& e) {
      EXPECT_EQ(e.code(), sonic::ErrorCode::kInvalidArgument);
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("SONIC_SOME_SWITCH = '") + value + "'"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("expected ") + format->expected), std::string::npos) << what;
    }
  }
}

TEST(EnvSwitches, ReadsTheEnvironment) {
  constexpr const char* kName = "SONIC_TEST_ENV_SWITCH";
  unsetenv(kName);
  EXPECT_FALSE(sonic::detail::env_int(kName, 0, 1).has_value());
  setenv(kName, "1", 1);
  EXPECT_EQ(sonic::detail::env_int(kName, 0, 1), 1);
  setenv(kName, "2", 1);
  EXPECT_THROW(sonic::detail::env_int(kName, 0, 1), sonic::Error);
  setenv(kName, "3:4", 1);
  EXPECT_EQ(sonic::detail::env_int_list(kName, kTails), (std::vector<int32_t>{3, 4}));
  unsetenv(kName);
}

}  // namespace
