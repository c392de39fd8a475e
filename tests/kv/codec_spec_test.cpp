// The codec grammar (kv/core/codec_spec.h) and the registry's table of built codecs: every built
// name parses to its spec and tag and prints back as itself, with the parameters and defaults
// each codec has always had; other spellings of a built spec are accepted and printed
// canonically; well-formed names no store implements are refused by name with the built ones;
// malformed names are refused with the grammar. The method grammar and the cache spec table go
// through the same parser.
#include "snapkv/kv/core/codec_spec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/kv/core/spec.h"

namespace snapkv {
namespace {

using F = CodecFamily;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

struct BuiltRow {
  const char* name;
  CodecKind kind;
  CodecSpec spec;
  size_t residual;  // codec_default_kivi_residual
  size_t sinks;     // codec_default_kivi_fp16_sinks
  double salient;   // codec_default_zip_salient
};

// What each codec name has always meant: its store's bits per role, rotated roles and defaults.
const std::vector<BuiltRow> kBuiltRows = {
    {"fp16", CodecKind::fp16, {F::fp16, 0, 0, false, false}, 128, 0, 0.0},
    {"kivi2", CodecKind::kivi2, {F::kivi, 2, 2, false, false}, 128, 0, 0.0},
    {"kivi4", CodecKind::kivi4, {F::kivi, 4, 4, false, false}, 128, 0, 0.0},
    {"kivi2r", CodecKind::kivi2r, {F::kivi, 2, 2, true, true}, 128, 0, 0.0},
    {"kivi4r", CodecKind::kivi4r, {F::kivi, 4, 4, true, true}, 128, 0, 0.0},
    {"kitty", CodecKind::kitty, {F::kitty, 2, 2, false, false}, 128, 0, 0.0},
    {"zipcache", CodecKind::zipcache, {F::zipcache, 0, 0, false, false}, 128, 0, 0.2},
    {"gear", CodecKind::gear, {F::gear, 0, 0, false, false}, 128, 0, 0.0},
    {"zipcacher", CodecKind::zipcacher, {F::zipcache, 0, 0, false, true}, 32, 0, 0.7},
    {"kivi42", CodecKind::kivi42, {F::kivi, 4, 2, false, false}, 32, 4, 0.0},
    {"kivi24", CodecKind::kivi24, {F::kivi, 2, 4, false, false}, 32, 0, 0.0},
    {"kivi42r", CodecKind::kivi42r, {F::kivi, 4, 2, false, true}, 32, 0, 0.0},
    {"kivi32", CodecKind::kivi32, {F::kivi, 3, 2, false, false}, 32, 4, 0.0},
    {"kivimix", CodecKind::kivimix, {F::kivimix, 2, 2, false, false}, 32, 4, 0.0},
};

class BuiltCodecName : public ::testing::TestWithParam<BuiltRow> {};

TEST_P(BuiltCodecName, ParsesToItsSpecAndPrintsBack) {
  const BuiltRow& r = GetParam();
  EXPECT_EQ(parse_codec_spec(r.name), r.spec);
  EXPECT_EQ(codec_name(r.spec), r.name);
  EXPECT_EQ(parse_codec(r.name), r.kind);
  EXPECT_EQ(to_string(r.kind), r.name);
  EXPECT_EQ(codec_spec(r.kind), r.spec);
  EXPECT_EQ(codec_kind(r.spec), r.kind);
  EXPECT_TRUE(codec_is_built(r.kind));
}

TEST_P(BuiltCodecName, KeepsItsParametersAndDefaults) {
  const BuiltRow& r = GetParam();
  EXPECT_EQ(codec_kivi_bits(r.kind, true), r.spec.key_bits);
  EXPECT_EQ(codec_kivi_bits(r.kind, false), r.spec.value_bits);
  EXPECT_EQ(codec_is_rotated(r.kind), r.spec.rotate_keys || r.spec.rotate_values);
  EXPECT_EQ(codec_routes_rows(r.kind), r.spec.family == F::zipcache);
  EXPECT_EQ(codec_default_kivi_residual(r.kind), r.residual);
  EXPECT_EQ(codec_default_kivi_fp16_sinks(r.kind), r.sinks);
  EXPECT_EQ(codec_default_zip_salient(r.kind), r.salient);
}

TEST_P(BuiltCodecName, NamesAMethodAndACacheOption) {
  const BuiltRow& r = GetParam();
  CacheConfig c;
  set_cache_option(c, "codec", r.name);
  EXPECT_EQ(c.codec, r.kind);
  EXPECT_EQ(format_option_value(find_cache_option("codec")->get(c)), r.name);
  if (r.kind == CodecKind::fp16) return;  // the default codec is no method name
  const Method alone = parse_method(r.name);
  EXPECT_EQ(alone.config.policy, PolicyKind::full);
  EXPECT_EQ(alone.config.codec, r.kind);
  const Method stacked = parse_method(std::string("snapkv+") + r.name);
  EXPECT_EQ(stacked.config.policy, PolicyKind::snapkv);
  EXPECT_EQ(stacked.config.codec, r.kind);
}

// The registry wraps exactly the spec's rotated roles in the rotation (whose store adds its 8-byte
// seed to the plain store's bytes) around the store of the spec without rotation.
TEST_P(BuiltCodecName, RotatesExactlyTheSpecsRoles) {
  const BuiltRow& r = GetParam();
  CacheConfig c;
  c.codec = r.kind;
  c.kivi_group = 8;
  c.kivi_residual = 16;
  c.kitty_channels = 2;
  c.gear_rank = 1;
  c.kivi_fp16_sinks = 0;  // explicit, so the rotated codec and its plain spec store alike
  c.zip_salient = 0.5;
  CodecSpec plain_spec = r.spec;
  plain_spec.rotate_keys = plain_spec.rotate_values = false;
  CacheConfig plain = c;
  plain.codec = codec_kind(plain_spec);
  std::vector<float> rows(3 * 32);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  for (const RowRole role : {RowRole::key, RowRole::value}) {
    const bool rotated = role == RowRole::key ? r.spec.rotate_keys : r.spec.rotate_values;
    const auto store = make_row_store(c, role, 32);
    const auto reference = make_row_store(plain, role, 32);
    store->append(rows.data(), 3);
    reference->append(rows.data(), 3);
    EXPECT_EQ(store->head_dim(), 32u);
    EXPECT_EQ(store->rows(), 3u);
    EXPECT_EQ(store->bytes(), reference->bytes() + (rotated ? sizeof(uint64_t) : 0)) << r.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, BuiltCodecName, ::testing::ValuesIn(kBuiltRows),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(CodecGrammar, TheRegistryListsExactlyTheBuiltRows) {
  ASSERT_EQ(built_codecs().size(), kBuiltRows.size());
  std::string names;
  for (size_t i = 0; i < kBuiltRows.size(); ++i) {
    EXPECT_EQ(built_codecs()[i], kBuiltRows[i].kind);
    if (i > 0) names += '|';
    names += kBuiltRows[i].name;
  }
  EXPECT_EQ(built_codec_names(), names);
  EXPECT_EQ(find_cache_option("codec")->choices, names);
  EXPECT_FALSE(codec_is_built(static_cast<CodecKind>(kBuiltRows.size())));
  EXPECT_EQ(to_string(static_cast<CodecKind>(99)), "unknown");
  EXPECT_NE(error_of([] { codec_spec(static_cast<CodecKind>(99)); }).find("not a built codec"),
            std::string::npos);
}

// Other spellings of built specs: accepted everywhere, printed canonically.
TEST(CodecGrammar, AliasesOfBuiltSpecsPrintCanonically) {
  const std::vector<std::pair<const char*, const char*>> aliases = {
      {"kivi44", "kivi4"},         {"kivi22", "kivi2"},    {"kivi22r", "kivi2r"},
      {"kivi44rkv", "kivi4r"},     {"kivi2rkv", "kivi2r"}, {"kivi42rv", "kivi42r"},
      {"zipcacherv", "zipcacher"}, {"kivi33", "kivi3"},
  };
  for (const auto& [alias, canonical] : aliases) {
    EXPECT_EQ(codec_name(parse_codec_spec(alias)), canonical) << alias;
  }
  EXPECT_EQ(parse_codec("kivi44"), CodecKind::kivi4);
  EXPECT_EQ(parse_codec("kivi42rv"), CodecKind::kivi42r);
  EXPECT_EQ(parse_codec("zipcacherv"), CodecKind::zipcacher);
  EXPECT_EQ(parse_method("snapkv+kivi44").config.codec, CodecKind::kivi4);
  CacheConfig c;
  set_cache_option(c, "codec", "kivi22r");
  EXPECT_EQ(c.codec, CodecKind::kivi2r);
  EXPECT_EQ(
      std::get<std::string>(check_option_value(*find_cache_option("codec"), OptionValue{"kivi44"})),
      "kivi4");
}

// Every spec the grammar can spell prints to a name that parses back to it.
TEST(CodecGrammar, EverySpellableSpecRoundTrips) {
  size_t n = 0;
  for (int k = 1; k <= 8; ++k) {
    for (int v = 1; v <= 8; ++v) {
      for (const bool rk : {false, true}) {
        for (const bool rv : {false, true}) {
          const CodecSpec s{F::kivi, k, v, rk, rv};
          const std::string name = codec_name(s);
          EXPECT_EQ(parse_codec_spec(name), s) << name;
          ++n;
        }
      }
    }
  }
  for (const bool rk : {false, true}) {
    for (const bool rv : {false, true}) {
      const CodecSpec s{F::zipcache, 0, 0, rk, rv};
      EXPECT_EQ(parse_codec_spec(codec_name(s)), s) << codec_name(s);
    }
  }
  EXPECT_EQ(n, 256u);
  EXPECT_EQ(codec_name(CodecSpec{F::kivi, 4, 2, true, true}), "kivi42rkv");
  EXPECT_EQ(codec_name(CodecSpec{F::kivi, 2, 2, false, true}), "kivi2rv");
  EXPECT_EQ(codec_name(CodecSpec{F::zipcache, 0, 0, true, false}), "zipcacherk");
  // Specs no name spells.
  EXPECT_THROW(codec_name(CodecSpec{F::kivi, 0, 2, false, false}), std::invalid_argument);
  EXPECT_THROW(codec_name(CodecSpec{F::kivi, 9, 2, false, false}), std::invalid_argument);
  EXPECT_THROW(codec_name(CodecSpec{F::kitty, 2, 2, true, false}), std::invalid_argument);
  EXPECT_THROW(codec_name(CodecSpec{F::gear, 2, 2, false, false}), std::invalid_argument);
}

// Well-formed, but no store: refused by name, with the parts and the built codecs.
TEST(CodecGrammar, UnbuiltNamesAreRefusedWithTheBuiltOnes) {
  const std::vector<std::pair<const char*, const char*>> unbuilt = {
      {"kivi8", "KIVI, 8-bit keys, 8-bit values"},
      {"kivi33", "KIVI, 3-bit keys, 3-bit values"},
      {"kivi3r", "keys and values rotated"},
      {"kivi2rv", "KIVI, 2-bit keys, 2-bit values, values rotated"},
      {"kivi44rk", "keys rotated"},
      {"kivi42rkv", "keys and values rotated"},
      {"kivi24r", "values rotated"},
      {"zipcacherk", "zipcache, keys rotated"},
  };
  for (const auto& entry : unbuilt) {
    const char* name = entry.first;  // named: lambdas below capture it
    const char* parts = entry.second;
    EXPECT_NO_THROW(parse_codec_spec(name)) << name;
    const std::string canonical = codec_name(parse_codec_spec(name));
    const std::string msg = error_of([&] { parse_codec(name); });
    EXPECT_EQ(msg.rfind("[kv] codec '" + canonical + "' (", 0), 0u) << msg;
    EXPECT_NE(msg.find(parts), std::string::npos) << msg;
    EXPECT_NE(msg.find("has no store"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected a built codec: " + std::string(built_codec_names())),
              std::string::npos)
        << msg;
    // The method grammar and the cache spec say the same.
    EXPECT_NE(error_of([&] { parse_method(name); }).find("has no store"), std::string::npos);
    EXPECT_NE(error_of([&] { parse_method(std::string("snapkv+") + name); }).find("has no store"),
              std::string::npos);
    CacheConfig c;
    EXPECT_NE(error_of([&] { set_cache_option(c, "codec", name); }).find("has no store"),
              std::string::npos);
  }
}

TEST(CodecGrammar, MalformedNamesAreRefusedWithTheGrammar) {
  for (const char* name :
       {"",         "kivi",      "kivi0",      "kivi9",     "kivi2x", "kivi222", "kivi2rr",
        "kivi2rvk", "kittyr",    "kivimixr",   "gear4",     "gearr",  "fp8",     "fp16r",
        "KIVI2",    "zipcache2", "zipcacher2", "kivimixed", " kivi2", "kivi2 ",  "int8"}) {
    const std::string msg = error_of([&] { parse_codec_spec(name); });
    EXPECT_EQ(msg.rfind("[kv] unknown codec, got '" + std::string(name) + "'", 0), 0u) << msg;
    EXPECT_NE(msg.find("expected " + std::string(codec_grammar())), std::string::npos) << msg;
    EXPECT_NE(msg.find("built: " + std::string(built_codec_names())), std::string::npos) << msg;
    EXPECT_EQ(error_of([&] { parse_codec(name); }), msg);
    // The cache spec refuses empty text before any option's parser sees it.
    const std::string spec_msg = error_of([&] {
      CacheConfig c;
      set_cache_option(c, "codec", name);
    });
    EXPECT_NE(spec_msg.find(*name == '\0' ? "empty text" : "unknown codec"), std::string::npos)
        << spec_msg;
  }
  EXPECT_NE(error_of([] { parse_method("snapkv+kivi"); }).find("unknown codec in method"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_method("snapkv+fp16"); }).find("unknown codec in method"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_method("kivi2x"); }).find("unknown method"), std::string::npos);
  EXPECT_NE(error_of([] { parse_method("fp16"); }).find("unknown method"), std::string::npos);
}

}  // namespace
}  // namespace snapkv
