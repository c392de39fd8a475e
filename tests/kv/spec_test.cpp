// The cache spec (kv/core/spec.h): one row per CacheConfig option, names unique, defaults inside
// their own ranges, values that round-trip through text, bad text refused by name, and the C
// header's documented key list equal to the table.
#include "snapkv/kv/core/spec.h"

#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace snapkv {
namespace {

TEST(CacheSpec, NamesAndAliasesAreUniqueAndFound) {
  std::set<std::string> seen;
  for (const CacheOption& o : cache_options()) {
    EXPECT_TRUE(seen.insert(std::string(o.name)).second) << o.name;
    EXPECT_EQ(find_cache_option(o.name), &o) << o.name;
    std::istringstream aliases{std::string(o.aliases)};
    std::string alias;
    while (aliases >> alias) {
      EXPECT_TRUE(seen.insert(alias).second) << alias;
      EXPECT_EQ(find_cache_option(alias), &o) << alias;
    }
    if (!o.flag.empty()) {
      EXPECT_EQ(find_cache_option(o.flag), &o) << o.flag;
    }
  }
  EXPECT_EQ(find_cache_option("no_such_option"), nullptr);
  EXPECT_EQ(find_cache_option("keep-window"), find_cache_option("keep_window"));
}

TEST(CacheSpec, DefaultsPassTheirOwnChecksAndRoundTripAsText) {
  const CacheConfig defaults;
  for (const CacheOption& o : cache_options()) {
    const OptionValue v = o.get(defaults);
    EXPECT_NO_THROW(check_option_value(o, v)) << o.name;
    const std::string text = format_option_value(v);
    CacheConfig c;
    set_cache_option(c, o.name, text);
    EXPECT_EQ(format_option_value(o.get(c)), text) << o.name;
  }
}

TEST(CacheSpec, SetsTheFieldItNames) {
  CacheConfig c;
  set_cache_option(c, "window", "64");
  set_cache_option(c, "sinks", "7");
  set_cache_option(c, "pool", "max");
  set_cache_option(c, "keep_window", "true");
  set_cache_option(c, "gear_sparse", "0.25");
  set_cache_option(c, "kivi_fp16_sinks", "-1");
  set_cache_option_value(c, "zip-high", OptionValue{uint64_t{16}});
  EXPECT_EQ(c.window, 64u);
  EXPECT_EQ(c.n_sink, 7u);
  EXPECT_EQ(c.pool, PoolKind::max);
  EXPECT_TRUE(c.keep_window);
  EXPECT_EQ(c.gear_sparse, 0.25);
  EXPECT_EQ(c.kivi_fp16_sinks, kCodecDefaultCount);
  EXPECT_EQ(c.zip_high_bits, 16u);
  set_cache_option(c, "kivi_fp16_sinks", "3");
  EXPECT_EQ(c.kivi_fp16_sinks, 3u);
  // A JSON number that is a whole double counts as a count.
  set_cache_option_value(c, "window", OptionValue{48.0});
  EXPECT_EQ(c.window, 48u);
}

void expect_refused(std::string_view name, std::string_view text, const std::string& fragment) {
  CacheConfig c;
  const CacheConfig before = c;
  try {
    set_cache_option(c, name, text);
    ADD_FAILURE() << name << "=" << text << " was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[kv]"), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
  EXPECT_EQ(format_option_value(find_cache_option(name) ? find_cache_option(name)->get(c)
                                                        : OptionValue{false}),
            format_option_value(find_cache_option(name) ? find_cache_option(name)->get(before)
                                                        : OptionValue{false}));
}

TEST(CacheSpec, BadTextIsRefusedByName) {
  expect_refused("window", "", "'window'");
  expect_refused("window", "0", "'window'");  // below its range
  expect_refused("window", "-1", "'window'");
  expect_refused("window", "010", "no leading zeros");
  expect_refused("window", "0x10", "decimal digits only");
  expect_refused("window", "1e3", "decimal digits only");
  expect_refused("window", " 5", "decimal digits only");
  expect_refused("seed", "18446744073709551616", "'seed'");  // 2^64: refused, not saturated
  expect_refused("budget", "99999999999999999999999", "'budget'");
  expect_refused("pool", "maxx", "none|max|avg|causal_max");
  expect_refused("keep_window", "yes", "true|false");
  expect_refused("gear_sparse", "nan", "'gear_sparse'");
  expect_refused("gear_sparse", "1.5", "'gear_sparse'");
  expect_refused("gear_sparse", "0x1p-2", "'gear_sparse'");
  expect_refused("zip_salient", "-0.5", "'zip_salient'");
  expect_refused("no_such", "1", "unknown cache option");
}

TEST(CacheSpec, TypedValuesAreChecked) {
  const CacheOption& window = *find_cache_option("window");
  EXPECT_THROW(check_option_value(window, OptionValue{std::string("64")}), std::invalid_argument);
  EXPECT_THROW(check_option_value(window, OptionValue{1.5}), std::invalid_argument);
  EXPECT_THROW(check_option_value(window, OptionValue{true}), std::invalid_argument);
  const CacheOption& pool = *find_cache_option("pool");
  EXPECT_THROW(check_option_value(pool, OptionValue{uint64_t{1}}), std::invalid_argument);
}

TEST(CacheSpec, RecordResolvesCodecDefaults) {
  CacheConfig c;
  c.codec = CodecKind::kivi42;
  for (const auto& [name, value] : config_record(c)) {
    if (name == "kivi_residual") {
      EXPECT_EQ(std::get<uint64_t>(value), kivi_residual_of(c));
    }
    if (name == "kivi_fp16_sinks") {
      EXPECT_EQ(std::get<uint64_t>(value), kivi_fp16_sinks_of(c));
    }
  }
  EXPECT_EQ(config_record(c).size(), cache_options().size());
}

// The C header documents the config keys by hand; it must list exactly the table's names.
TEST(CacheSpec, CHeaderListsEveryKey) {
  std::ifstream in(std::string(SNAPKV_SOURCE_DIR) + "/include/snapkv/snapkv.h");
  ASSERT_TRUE(in) << "cannot read include/snapkv/snapkv.h";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t begin = text.find(" *   policy=");  // the indented list of keys
  const size_t end = text.find(" * e.g.", begin);
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  const std::string block = text.substr(begin, end - begin);
  std::set<std::string> documented;  // every word directly before a '='
  for (size_t eq = block.find('='); eq != std::string::npos; eq = block.find('=', eq + 1)) {
    size_t b = eq;
    while (b > 0 &&
           (std::islower(static_cast<unsigned char>(block[b - 1])) ||
            std::isdigit(static_cast<unsigned char>(block[b - 1])) || block[b - 1] == '_')) {
      --b;
    }
    if (b < eq) documented.insert(block.substr(b, eq - b));
  }
  std::set<std::string> names;
  for (const CacheOption& o : cache_options()) {
    names.insert(std::string(o.name));
    std::istringstream aliases{std::string(o.aliases)};
    std::string alias;
    while (aliases >> alias) {
      if (documented.count(alias)) names.insert(alias);
    }
  }
  EXPECT_EQ(documented, names);
  // Each choice option's documented values ("codec=fp16|kivi2|...", wrapped over lines) are the
  // spec's choices, in its order.
  for (const CacheOption& o : cache_options()) {
    if (o.type != OptionType::choice) continue;
    const size_t at = block.find(" " + std::string(o.name) + "=");
    ASSERT_NE(at, std::string::npos) << o.name;
    std::string values;
    for (size_t i = at + o.name.size() + 2; i < block.size(); ++i) {
      const char ch = block[i];
      if (std::islower(static_cast<unsigned char>(ch)) ||
          std::isdigit(static_cast<unsigned char>(ch)) || ch == '_' || ch == '|') {
        values += ch;
        continue;
      }
      if (!values.empty() && values.back() == '|') continue;  // a list wrapped over lines
      break;
    }
    EXPECT_EQ(values, std::string(o.choices)) << o.name;
  }
}

}  // namespace
}  // namespace snapkv
