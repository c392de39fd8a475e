// Rotated KIVI under LayerCache: stacking snapkv + kivi2r / kivi4r keeps exactly the rows that
// snapkv + fp16 keeps, with the same decoded rows and attention, through prefill chunks,
// compressions and decode. The data is built so that both codecs reproduce it exactly (any
// difference is a plumbing bug): head_dim 16 is one Hadamard block whose 1/sqrt(16) is exact, so
// rows x = R^T y with y the "binary" KIVI-exact data of kivi_cache_test.cpp (+-a times a power of
// two, per channel for keys, per token for values) are small dyadic numbers: R x == y exactly,
// KIVI stores y exactly, and fp16 holds x exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kv/kivi_test_util.h"
#include "snapkv/kv/codecs/rotation.h"
#include "snapkv/kv/core/layer_cache.h"

namespace snapkv {
namespace {

constexpr uint64_t kSeed = 99;

// [heads][s][head_dim] rows R^T y, y of +-a * 2^(along % 3) (along: channel for keys, token for
// values).
std::vector<float> rotated_binary(size_t heads, size_t s, size_t head_dim, float a,
                                  std::mt19937& rng, RowRole role) {
  std::vector<float> t(heads * s * head_dim);
  for (size_t i = 0; i < t.size(); ++i) {
    const size_t along = role == RowRole::key ? i % head_dim : i / head_dim;
    t[i] = (rng() & 1u ? a : -a) * float(1u << (along % 3));
  }
  HadamardRotation(head_dim, kSeed).unrotate(t.data(), heads * s);
  return t;
}

std::vector<float> read(const LayerCache& c, size_t h, bool keys) {
  std::vector<float> out(c.size(h) * c.dims().head_dim);
  if (keys) {
    c.read_keys(h, out.data());
  } else {
    c.read_values(h, out.data());
  }
  return out;
}

// A rotated codec and the magnitude a of its data (+-a times a power of two, exact in it).
struct RotatedCase {
  CodecKind codec;
  float a;
};

void PrintTo(const RotatedCase& c, std::ostream* os) {
  *os << to_string(c.codec);
}

class RotatedCache : public ::testing::TestWithParam<RotatedCase> {};

TEST_P(RotatedCache, StackingKeepsExactlyTheRowsOfFp16) {
  const CacheDims dims{4, 2, 16};
  const auto [codec, a] = GetParam();
  CacheConfig base;
  base.policy = PolicyKind::snapkv;
  base.budget = 80;
  base.window = 8;
  base.n_sink = 4;
  base.kernel = 5;
  base.chunk_mode = ChunkMode::every_chunk;
  base.kivi_group = 8;
  base.kivi_residual = 16;
  base.kivi_fp16_sinks = 2;
  base.rotation_seed = kSeed;
  CacheConfig quant = base;
  quant.codec = codec;
  LayerCache fp16(dims, base), rot(dims, quant);
  std::mt19937 rng(7);
  auto compare = [&](const char* when) {
    ASSERT_EQ(rot.size(), fp16.size()) << when;
    for (size_t h = 0; h < dims.n_kv_heads; ++h) {
      const auto pr = rot.positions(h), pf = fp16.positions(h);
      ASSERT_EQ(std::vector<int64_t>(pr.begin(), pr.end()),
                std::vector<int64_t>(pf.begin(), pf.end()))
          << when << " head " << h;
      ASSERT_EQ(read(rot, h, true), read(fp16, h, true)) << when;
      ASSERT_EQ(read(rot, h, false), read(fp16, h, false)) << when;
    }
  };
  size_t seen = 0;
  for (size_t s : {size_t{37}, size_t{100}, size_t{1}, size_t{64}}) {
    const auto k = rotated_binary(dims.n_kv_heads, s, dims.head_dim, a, rng, RowRole::key);
    const auto v = rotated_binary(dims.n_kv_heads, s, dims.head_dim, a, rng, RowRole::value);
    const size_t w = std::min<size_t>(s, base.window);
    const auto q = kivi_test::realistic_rows(dims.n_heads * w, dims.head_dim, unsigned(s), false);
    const Tensor3 kt{k.data(), dims.n_kv_heads, s, dims.head_dim};
    const Tensor3 vt{v.data(), dims.n_kv_heads, s, dims.head_dim};
    const Tensor3 qt{q.data(), dims.n_heads, w, dims.head_dim};
    fp16.update(kt, vt, &qt, UpdateKind::prefill);
    rot.update(kt, vt, &qt, UpdateKind::prefill);
    seen += s;
    compare("prefill");
  }
  EXPECT_EQ(rot.offset(), seen);
  EXPECT_EQ(rot.size(), base.budget);
  for (int step = 0; step < 40; ++step) {  // decode: appends flush the residual into KIVI
    const auto k = rotated_binary(dims.n_kv_heads, 1, dims.head_dim, a, rng, RowRole::key);
    const auto v = rotated_binary(dims.n_kv_heads, 1, dims.head_dim, a, rng, RowRole::value);
    const auto q =
        kivi_test::realistic_rows(dims.n_heads, dims.head_dim, 50u + unsigned(step), false);
    std::vector<float> out_r(dims.n_heads * dims.head_dim), out_f(out_r.size());
    const Tensor3 kt{k.data(), dims.n_kv_heads, 1, dims.head_dim};
    const Tensor3 vt{v.data(), dims.n_kv_heads, 1, dims.head_dim};
    const Tensor3 qt{q.data(), dims.n_heads, 1, dims.head_dim};
    rot.attend(out_r.data(), qt, kt, vt);
    fp16.attend(out_f.data(), qt, kt, vt);
    // The same rows, summed in other coordinates: each output is within kivi_cache_test.cpp's
    // (n + head_dim + 8) u 16 max|v| of the double attention over these rows, hence twice that
    // of each other (the rotation's own 2 (L + 3) u ||q|| ||k|| per logit is far inside).
    float vmax = 0;
    for (size_t h = 0; h < dims.n_kv_heads; ++h) {
      for (float x : read(fp16, h, false)) vmax = std::max(vmax, std::fabs(x));
    }
    const double bound =
        2.0 * double(fp16.size() + 1 + dims.head_dim + 8) * 16.0 * vmax / 16777216.0;
    for (size_t i = 0; i < out_r.size(); ++i) ASSERT_NEAR(out_r[i], out_f[i], bound) << step;
    fp16.update(kt, vt);
    rot.update(kt, vt);
    compare("decode");
  }
  EXPECT_LT(rot.stats().bytes_stored, fp16.stats().bytes_stored);
}

INSTANTIATE_TEST_SUITE_P(Codecs, RotatedCache,
                         ::testing::Values(RotatedCase{CodecKind::kivi2r, 1.5f},
                                           RotatedCase{CodecKind::kivi4r, 7.5f}),
                         [](const ::testing::TestParamInfo<RotatedCase>& p) {
                           return std::string(to_string(p.param.codec));
                         });

}  // namespace
}  // namespace snapkv
