// What every quantizing codec promises alike, as one test family per promise:
//  - CodecNoDrift: under repeated eviction, appends and settles a kept row decodes bit for bit as
//    before, changing at most once in its life (kv/no_drift_util.h), for KIVI (2 and 4 bits),
//    zipcache, zipcacher, GEAR and the codecs beside KIVI (rotated KIVI, kitty, the mixed widths);
//  - CodecRecord: save() then load_row_store() gives the same rows, bytes, routing state and
//    record; a cut record, or a configuration the record was not written with, is a named error
//    (zipcache and zipcacher at both high-row precisions, GEAR).
// Each codec's own properties (distortion bounds, fused attention, bytes, bad configurations) are
// in its own test file.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "kv/no_drift_util.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using kivi_test::read_all;
using kivi_test::realistic_rows;

CacheConfig kivi_family(CodecKind codec, size_t group, size_t residual, size_t sinks) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.kivi_fp16_sinks = sinks;
  c.rotation_seed = 1234;
  c.kitty_channels = 4;
  return c;
}

CacheConfig zip(CodecKind codec, size_t group, size_t residual, double salient, size_t high) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.zip_salient = salient;
  c.zip_high_bits = high;
  if (codec_is_rotated(codec)) c.rotation_seed = 4321;
  return c;
}

CacheConfig gear(size_t group, size_t residual, size_t rank, double sparse, size_t bits) {
  CacheConfig c;
  c.codec = CodecKind::gear;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.gear_rank = rank;
  c.gear_sparse = sparse;
  c.gear_bits = bits;
  return c;
}

// ---- no drift under repeated eviction ----------------------------------------------------------

struct NoDriftCase {
  std::string name;
  std::function<std::unique_ptr<RowStore>(RowRole)> make;
  kv_test::NoDriftRun run;
  size_t min_appended = 0, min_compared = 0;  // the run's size: more than these
  size_t min_changed = 50;                    // rows did get quantized along the way
};

NoDriftCase kivi_case(int bits) {
  // The KIVI store itself, with 2 fp16 sinks.
  return {.name = "kivi" + std::to_string(bits),
          .make = [bits](RowRole role) { return make_kivi_row_store(role, bits, 40, 8, 16, 2); },
          .run = {.rounds = 30, .rng_seed = uint32_t(17 + bits), .data_seed = 1000},
          .min_appended = 300};
}

NoDriftCase zip_case(CodecKind codec) {
  const CacheConfig c = zip(codec, 8, 16, 0.3, 4);
  return {.name = std::string(to_string(codec)),
          .make = [c](RowRole role) { return make_row_store(c, role, 20); },
          .run = {.rounds = 25, .rng_seed = 61, .data_seed = 700, .settle = true},
          .min_compared = 200};
}

NoDriftCase gear_case() {
  const CacheConfig c = gear(8, 16, 2, 0.05, 2);
  return {.name = "gear",
          .make = [c](RowRole role) { return make_row_store(c, role, 20); },
          .run = {.rounds = 25, .rng_seed = 41, .data_seed = 500},
          .min_compared = 200};
}

// The codecs beside KIVI (codec_variants_test.cpp), with 2 fp16 sinks.
NoDriftCase variant_case(CodecKind codec) {
  const CacheConfig c = kivi_family(codec, 8, 16, 2);
  return {.name = std::string(to_string(codec)),
          .make = [c](RowRole role) { return make_row_store(c, role, 24); },
          .run = {.rounds = 25, .rng_seed = 5, .data_seed = 500},
          .min_appended = 300};
}

void PrintTo(const NoDriftCase& c, std::ostream* os) {
  *os << c.name;
}

class CodecNoDrift : public ::testing::TestWithParam<NoDriftCase> {};

// Eviction on quantized rows never re-quantizes: every kept row decodes bit-identically after each
// retain, so its error against the original input never grows. Appends in between (which flush
// the residual) and settles (which route rows) must not touch rows that were already quantized
// either; coefficients, sparse entries and routing move with their rows.
TEST_P(CodecNoDrift, RepeatedEvictionNeverChangesKeptRows) {
  const NoDriftCase& c = GetParam();
  for (RowRole role : {RowRole::key, RowRole::value}) {
    auto s = c.make(role);
    const std::string what = c.name + (role == RowRole::key ? " keys" : " values");
    const kv_test::NoDriftStats st = kv_test::check_no_drift(*s, c.run, what.c_str());
    EXPECT_GT(st.appended, c.min_appended) << what;
    EXPECT_GT(st.compared, c.min_compared) << what;
    EXPECT_GT(st.changed, c.min_changed) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, CodecNoDrift,
    ::testing::Values(kivi_case(2), kivi_case(4), zip_case(CodecKind::zipcache),
                      zip_case(CodecKind::zipcacher), gear_case(), variant_case(CodecKind::kivi2r),
                      variant_case(CodecKind::kivi4r), variant_case(CodecKind::kitty),
                      variant_case(CodecKind::kivi42), variant_case(CodecKind::kivi24),
                      variant_case(CodecKind::kivi42r), variant_case(CodecKind::kivi32),
                      variant_case(CodecKind::kivimix)),
    [](const ::testing::TestParamInfo<NoDriftCase>& p) { return p.param.name; });

// ---- store records -----------------------------------------------------------------------------

struct RecordCase {
  std::string name;
  CacheConfig config;
  uint32_t data_seed = 0;
  bool settle = false;      // route the first 60 rows (zipcache, zipcacher); the rest wait unrouted
  uint32_t keep_every = 1;  // keep rows 0, k, 2k, ...
  size_t cut = 1;           // bytes cut off the end of the record
  // Changes the config into one the record was not written with (false: none for this role).
  std::function<bool(CacheConfig&, RowRole)> mismatch;
};

RecordCase zip_record(CodecKind codec, size_t high) {
  RecordCase r;
  r.name = std::string(to_string(codec)) + "_high" + std::to_string(high);
  r.config = zip(codec, 8, 16, 0.25, high);
  r.data_seed = 31;
  r.settle = true;
  r.keep_every = 3;
  r.cut = 1;
  // zipcacher's values are rotated: a record with another seed is refused
  r.mismatch = [](CacheConfig& c, RowRole role) {
    if (!(codec_is_rotated(c.codec) && role == RowRole::value)) return false;
    c.rotation_seed = 4321 + 1;
    return true;
  };
  return r;
}

RecordCase gear_record() {
  RecordCase r;
  r.name = "gear";
  r.config = gear(8, 16, 3, 0.04, 2);
  r.data_seed = 21;
  r.keep_every = 2;
  r.cut = 3;
  r.mismatch = [](CacheConfig& c, RowRole) {
    c.gear_rank = 2;
    return true;
  };
  return r;
}

void PrintTo(const RecordCase& c, std::ostream* os) {
  *os << c.name;
}

class CodecRecord : public ::testing::TestWithParam<RecordCase> {};

// 60 rows, then 30 more (segments flushed, the last rows pending), every k-th row kept; the record
// reloads into the same store and saves back to the same bytes.
TEST_P(CodecRecord, RecordRoundTripIsExact) {
  const RecordCase& p = GetParam();
  const size_t hd = 24;
  for (RowRole role : {RowRole::key, RowRole::value}) {
    auto s = make_row_store(p.config, role, hd);
    const std::vector<float> x = realistic_rows(90, hd, p.data_seed, true);
    s->append(x.data(), 60);
    if (p.settle) {
      std::vector<float> sal(60);
      for (size_t i = 0; i < 60; ++i) sal[i] = float((i * 11) % 23);
      s->settle(sal);
    }
    s->append(x.data() + 60 * hd, 30);
    std::vector<uint32_t> keep;
    for (uint32_t i = 0; i < 90; i += p.keep_every) keep.push_back(i);
    s->retain(keep);
    std::vector<uint8_t> record;
    s->save(record);
    auto loaded = load_row_store(p.config, role, hd, record);
    EXPECT_EQ(read_all(*loaded), read_all(*s));
    EXPECT_EQ(loaded->bytes(), s->bytes());
    EXPECT_EQ(loaded->unsettled_rows(), s->unsettled_rows());
    if (p.settle) {
      EXPECT_GT(loaded->unsettled_rows(), 0u);
    }
    std::vector<uint8_t> again;
    loaded->save(again);
    EXPECT_EQ(again, record);
    const std::vector<uint8_t> cut(record.begin(), record.end() - long(p.cut));
    EXPECT_THROW(load_row_store(p.config, role, hd, cut), RuntimeError);
    CacheConfig other = p.config;
    if (p.mismatch(other, role)) {
      EXPECT_THROW(load_row_store(other, role, hd, record), RuntimeError);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecRecord,
                         ::testing::Values(zip_record(CodecKind::zipcache, 4),
                                           zip_record(CodecKind::zipcache, 16),
                                           zip_record(CodecKind::zipcacher, 4),
                                           zip_record(CodecKind::zipcacher, 16), gear_record()),
                         [](const ::testing::TestParamInfo<RecordCase>& p) {
                           return p.param.name;
                         });

}  // namespace
}  // namespace snapkv
