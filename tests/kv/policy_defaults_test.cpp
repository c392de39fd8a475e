// Policy defaults (kv/core/method.h, parse_method): snapkv with real queries takes window 24 and
// kernel 13 where nothing named them; every other policy keeps CacheConfig's 32 and 11; a value
// given through the cache spec or assigned away from the default is kept for every policy.
#include <gtest/gtest.h>

#include <string>

#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/spec.h"

namespace snapkv {
namespace {

TEST(PolicyDefaults, SnapkvWithQueriesTakesItsOwnWindowAndKernel) {
  for (const char* name : {"snapkv", "ada-snapkv", "pyramid-snapkv", "duo-snapkv",
                           "ada-pyramid-snapkv", "snapkv+kivi2"}) {
    const CacheConfig c = parse_method(name).config;
    EXPECT_EQ(c.window, kSnapkvWindow) << name;
    EXPECT_EQ(c.kernel, kSnapkvKernel) << name;
    EXPECT_NO_THROW(c.validate()) << name;
  }
  EXPECT_EQ(kSnapkvWindow, 24u);
  EXPECT_EQ(kSnapkvKernel, 13u);
}

TEST(PolicyDefaults, OtherPoliciesKeepTheConfigDefaults) {
  const CacheConfig fresh;
  for (const char* name : {"snapkv-proxy", "ada-snapkv-proxy", "kvzap", "ada-kvzap", "kvzip",
                           "kvzip_plus", "chunkkv", "knorm", "streaming", "expected_attention",
                           "kvzap-proxy", "kvzap-snapkv", "full", "kivi2"}) {
    const CacheConfig c = parse_method(name).config;
    EXPECT_EQ(c.window, fresh.window) << name;
    EXPECT_EQ(c.kernel, fresh.kernel) << name;
  }
  // The struct itself is unchanged: code that builds a CacheConfig directly gets 32 and 11.
  EXPECT_EQ(fresh.window, 32u);
  EXPECT_EQ(fresh.kernel, 11u);
  EXPECT_FALSE(fresh.window_given);
  EXPECT_FALSE(fresh.kernel_given);
}

TEST(PolicyDefaults, ValuesGivenThroughTheSpecWinEvenAtTheConfigDefault) {
  CacheConfig knobs;
  set_cache_option(knobs, "window", "32");
  set_cache_option(knobs, "kernel", "11");
  EXPECT_TRUE(knobs.window_given);
  EXPECT_TRUE(knobs.kernel_given);
  const CacheConfig c = parse_method("snapkv", knobs).config;
  EXPECT_EQ(c.window, 32u);
  EXPECT_EQ(c.kernel, 11u);

  CacheConfig one;  // naming one field leaves the other to the policy
  set_cache_option_value(one, "kernel", OptionValue{uint64_t{7}});
  const CacheConfig d = parse_method("snapkv", one).config;
  EXPECT_EQ(d.window, kSnapkvWindow);
  EXPECT_EQ(d.kernel, 7u);
  // kvzap keeps a given value as well as its own default.
  EXPECT_EQ(parse_method("kvzap", one).config.kernel, 7u);
  EXPECT_EQ(parse_method("kvzap", one).config.window, 32u);
}

TEST(PolicyDefaults, AssignedValuesOffTheDefaultAreKept) {
  CacheConfig knobs;
  knobs.window = 16;
  knobs.kernel = 5;
  const CacheConfig c = parse_method("snapkv", knobs).config;
  EXPECT_EQ(c.window, 16u);
  EXPECT_EQ(c.kernel, 5u);
}

TEST(PolicyDefaults, TheBudgetFloorFollowsTheWindow) {
  // pyramid keeps the window, so its floor is sinks + window: 4 + 24 with snapkv's default.
  const CacheConfig c = parse_method("pyramid-snapkv").config;
  EXPECT_EQ(budget_for(0.01, 100, c), c.n_sink + kSnapkvWindow);
  const CacheConfig k = parse_method("pyramid-kvzap").config;
  EXPECT_EQ(budget_for(0.01, 100, k), k.n_sink + 32u);
}

TEST(PolicyDefaults, EveryMethodListedInARunResolvesOnItsOwn) {
  CacheConfig knobs;
  set_cache_option(knobs, "sinks", "2");
  const std::vector<Method> ms = parse_methods("full,snapkv,kvzap,snapkv-proxy", knobs);
  ASSERT_EQ(ms.size(), 4u);
  EXPECT_EQ(ms[1].config.window, kSnapkvWindow);
  EXPECT_EQ(ms[1].config.n_sink, 2u);
  EXPECT_EQ(ms[2].config.window, 32u);
  EXPECT_EQ(ms[3].config.kernel, 11u);
}

}  // namespace
}  // namespace snapkv
