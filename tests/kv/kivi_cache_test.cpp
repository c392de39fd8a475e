// KIVI under LayerCache: any policy + codec. Stacking snapkv + kivi2 keeps exactly the rows
// snapkv + fp16 keeps (on data the codec reproduces exactly, so any difference is a plumbing
// bug: retain on packed rows, row order, offsets), with correct offsets and accounting through
// prefill chunks, compressions and decode; attend() over a KIVI cache against a double
// reference over the same decoded rows, and against an fp16 cache on realistic data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kv/kivi_test_util.h"
#include "plain_config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv {
using snapkv::test::plain_config;
namespace {

using kivi_test::realistic_rows;

constexpr double kU32 = 1.0 / 16777216.0;

// [n_heads][S][head_dim] of +-a times an exact power of two: every KIVI group of such data is
// either constant (scale 0) or spans exactly {-a m, +a m}, which kivi2 reproduces exactly for
// a = 1.5 (scale m, codes 0 and 3) and kivi4 for a = 7.5 (scale m, codes 0 and 15). Keys are
// grouped per channel, so keys scale by channel (m = 2^(c % 3)); values are grouped per token, so
// values scale by token (m = 2^(t % 3)).
std::vector<float> binary_tensor(size_t heads, size_t s, size_t head_dim, float a,
                                 std::mt19937& rng, RowRole role) {
  std::vector<float> t(heads * s * head_dim);
  for (size_t i = 0; i < t.size(); ++i) {
    const size_t along = role == RowRole::key ? i % head_dim : i / head_dim;
    t[i] = (rng() & 1u ? a : -a) * float(1u << (along % 3));
  }
  return t;
}

std::vector<float> read_keys(const LayerCache& c, size_t h) {
  std::vector<float> out(c.size() * c.dims().head_dim);
  c.read_keys(h, out.data());
  return out;
}
std::vector<float> read_values(const LayerCache& c, size_t h) {
  std::vector<float> out(c.size() * c.dims().head_dim);
  c.read_values(h, out.data());
  return out;
}

struct StackCase {
  CodecKind codec;
  float a;
  ChunkMode mode;
  size_t group, residual, sinks;
};

TEST(KiviCache, StackingKeepsExactlyTheRowsOfFp16) {
  const CacheDims dims{4, 2, 24};
  const StackCase cases[] = {
      {CodecKind::kivi2, 1.5f, ChunkMode::every_chunk, 8, 16, 0},
      {CodecKind::kivi2, 1.5f, ChunkMode::every_chunk, 32, 128, 4},
      {CodecKind::kivi2, 1.5f, ChunkMode::end_of_prompt, 8, 32, 0},
      {CodecKind::kivi4, 7.5f, ChunkMode::every_chunk, 16, 32, 2},
      // kitty's fp16 key channels are exact, its other channels are kivi2's
      {CodecKind::kitty, 1.5f, ChunkMode::every_chunk, 8, 16, 0},
      {CodecKind::kitty, 1.5f, ChunkMode::end_of_prompt, 8, 32, 2},
  };
  for (const StackCase& sc : cases) {
    CacheConfig base;
    base.policy = PolicyKind::snapkv;
    base.budget = 96;
    base.window = 8;
    base.n_sink = 4;
    base.pool = PoolKind::max;
    base.kernel = 5;
    base.chunk_mode = sc.mode;
    base.kivi_group = sc.group;
    base.kivi_residual = sc.residual;
    base.kivi_fp16_sinks = sc.sinks;
    CacheConfig quant = base;
    quant.codec = sc.codec;
    LayerCache fp16(dims, base), kivi(dims, quant);
    std::mt19937 rng(2024);
    const size_t chunks[] = {37, 100, 64, 1, 90, 128, 33};  // includes a size-1 prefill chunk
    size_t seen = 0;
    auto compare = [&](const char* when) {
      ASSERT_EQ(kivi.offset(), seen) << when;
      ASSERT_EQ(kivi.size(), fp16.size()) << when;
      ASSERT_EQ(kivi.compressions(), fp16.compressions()) << when;
      size_t bytes = 0;
      for (size_t h = 0; h < dims.n_kv_heads; ++h) {
        const auto pk = kivi.positions(h), pf = fp16.positions(h);
        ASSERT_EQ(std::vector<int64_t>(pk.begin(), pk.end()),
                  std::vector<int64_t>(pf.begin(), pf.end()))
            << when << " head " << h;
        ASSERT_EQ(read_keys(kivi, h), read_keys(fp16, h)) << when;
        ASSERT_EQ(read_values(kivi, h), read_values(fp16, h)) << when;
        bytes += kivi.keys(h).bytes() + kivi.values(h).bytes();
      }
      const CacheStats st = kivi.stats();
      EXPECT_EQ(st.tokens_seen, seen);
      EXPECT_EQ(st.tokens_kept, kivi.size());
      EXPECT_EQ(st.bytes_stored, bytes);
      EXPECT_EQ(st.bytes_full_fp16, fp16.stats().bytes_full_fp16);
    };
    for (size_t s : chunks) {
      const auto k = binary_tensor(dims.n_kv_heads, s, dims.head_dim, sc.a, rng, RowRole::key);
      const auto v = binary_tensor(dims.n_kv_heads, s, dims.head_dim, sc.a, rng, RowRole::value);
      const size_t w = std::min<size_t>(s, base.window);
      const auto q = realistic_rows(dims.n_heads * w, dims.head_dim, unsigned(seen), false);
      const Tensor3 kt{k.data(), dims.n_kv_heads, s, dims.head_dim};
      const Tensor3 vt{v.data(), dims.n_kv_heads, s, dims.head_dim};
      const Tensor3 qt{q.data(), dims.n_heads, w, dims.head_dim};
      fp16.update(kt, vt, &qt, UpdateKind::prefill);
      kivi.update(kt, vt, &qt, UpdateKind::prefill);
      seen += s;
      compare("prefill");
    }
    fp16.end_prompt();
    kivi.end_prompt();
    compare("end_prompt");
    EXPECT_EQ(kivi.size(), base.budget);
    EXPECT_GE(kivi.compressions(), 1u);
    for (int step = 0; step < 70; ++step) {  // decode: appends, flushes the residual
      const auto k = binary_tensor(dims.n_kv_heads, 1, dims.head_dim, sc.a, rng, RowRole::key);
      const auto v = binary_tensor(dims.n_kv_heads, 1, dims.head_dim, sc.a, rng, RowRole::value);
      const Tensor3 kt{k.data(), dims.n_kv_heads, 1, dims.head_dim};
      const Tensor3 vt{v.data(), dims.n_kv_heads, 1, dims.head_dim};
      fp16.update(kt, vt);
      kivi.update(kt, vt);
      ++seen;
      compare("decode");
    }
    EXPECT_EQ(kivi.size(), base.budget + 70);
    // rows were really packed: the KIVI cache holds fewer bytes than the fp16 one
    EXPECT_LT(kivi.stats().bytes_stored, fp16.stats().bytes_stored);
    std::printf("[kivi] %s g%zu r%zu: %zu rows, %zu bytes vs fp16 %zu\n",
                std::string(to_string(sc.codec)).c_str(), sc.group, sc.residual, kivi.size(),
                kivi.stats().bytes_stored, fp16.stats().bytes_stored);
  }
}

// attend() through the packed stores against a double-precision attention over the cache's own
// decoded rows plus the chunk: both see the same numbers, so only fp32 rounding separates them:
// per output element <= 4 (n + head_dim) u * max|v| * (1 + max logit error terms), taken here as
// (n + head_dim + 8) * u * 16 * max|v| (logits to ~10, exp and normalisation to a few ulps).
TEST(KiviCache, AttendMatchesReferenceOverDecodedRows) {
  const CacheDims dims{8, 2, 64};
  // The rotated codecs' own rounding (q rotated, the value sum rotated back: 2 (L + 3) u ||q||
  // ||k|| on a logit, (L + 3) u ||sum|| on the output, kv/codecs/rotation.h) is far inside this
  // bound.
  for (CodecKind codec : {CodecKind::kivi2, CodecKind::kivi4, CodecKind::kivi2r, CodecKind::kivi4r,
                          CodecKind::kitty}) {
    if (kivi_test::one_part_key_dots(codec, dims.head_dim)) continue;  // see kivi_test_util.h
    CacheConfig cfg = plain_config();
    cfg.policy = PolicyKind::snapkv;
    cfg.codec = codec;
    cfg.budget = 300;
    cfg.window = 16;
    cfg.kivi_fp16_sinks = 4;
    LayerCache cache(dims, cfg);
    const size_t n_chunk = 350;  // two chunks: the second packs the first's kept rows, and its
                                 // compression evicts packed rows
    for (uint32_t chunk = 0; chunk < 2; ++chunk) {
      const auto k = realistic_rows(dims.n_kv_heads * n_chunk, dims.head_dim, 1 + chunk, true);
      const auto v = realistic_rows(dims.n_kv_heads * n_chunk, dims.head_dim, 3 + chunk, false);
      cache.update({k.data(), dims.n_kv_heads, n_chunk, dims.head_dim},
                   {v.data(), dims.n_kv_heads, n_chunk, dims.head_dim});
    }
    ASSERT_EQ(cache.size(), 300u);
    for (size_t s : {size_t{1}, size_t{5}}) {
      const auto q = realistic_rows(dims.n_heads * s, dims.head_dim, 3, false);
      const auto kn = realistic_rows(dims.n_kv_heads * s, dims.head_dim, 4, true);
      const auto vn = realistic_rows(dims.n_kv_heads * s, dims.head_dim, 5, false);
      std::vector<float> out(dims.n_heads * s * dims.head_dim);
      cache.attend(out.data(), {q.data(), dims.n_heads, s, dims.head_dim},
                   {kn.data(), dims.n_kv_heads, s, dims.head_dim},
                   {vn.data(), dims.n_kv_heads, s, dims.head_dim});
      const size_t group = dims.n_heads / dims.n_kv_heads, hd = dims.head_dim;
      for (size_t h = 0; h < dims.n_heads; ++h) {
        const size_t kv = h / group;
        for (size_t i = 0; i < s; ++i) {
          // rows visible to query i: the cache's decoded rows, then chunk rows 0..i
          std::vector<float> keys = read_keys(cache, kv), values = read_values(cache, kv);
          for (size_t j = 0; j <= i; ++j) {
            keys.insert(keys.end(), kn.begin() + long((kv * s + j) * hd),
                        kn.begin() + long((kv * s + j + 1) * hd));
            values.insert(values.end(), vn.begin() + long((kv * s + j) * hd),
                          vn.begin() + long((kv * s + j + 1) * hd));
          }
          const size_t n = keys.size() / hd;
          std::vector<double> ref(hd);
          kivi_test::attention_ref(ref.data(), q.data() + (h * s + i) * hd, keys.data(),
                                   values.data(), n, hd);
          float vmax = 0;
          for (float x : values) vmax = std::max(vmax, std::fabs(x));
          const double bound = double(n + hd + 8) * kU32 * 16 * vmax;
          for (size_t c = 0; c < hd; ++c) {
            ASSERT_NEAR(out[(h * s + i) * hd + c], ref[c], bound)
                << to_string(codec) << " head " << h << " row " << i << " channel " << c;
          }
        }
      }
    }
  }
}

// KIVI alone (policy full) on realistic data: attend() vs the same cache in fp16. The bound is the
// softmax perturbation bound of kivi_attention_test.cpp (AttentionErrorVsFp16PerBitWidth) computed
// per query head from the measured key and value errors of the cache's own rows.
TEST(KiviCache, AttendCloseToFp16Attend) {
  const CacheDims dims{8, 2, 128};
  const size_t n = 1500, hd = dims.head_dim;
  const auto k = realistic_rows(dims.n_kv_heads * n, hd, 11, true);
  const auto v = realistic_rows(dims.n_kv_heads * n, hd, 12, false);
  auto q = realistic_rows(dims.n_heads, hd, 13, false);
  for (float& x : q) x *= 0.5f;
  const auto kn = realistic_rows(dims.n_kv_heads, hd, 14, true);
  const auto vn = realistic_rows(dims.n_kv_heads, hd, 15, false);
  CacheConfig cfg;
  cfg.policy = PolicyKind::full;
  // k, v: [n_kv_heads][n][hd] fed as a prompt of n - 1 rows and one decode row (which packs)
  auto feed = [&](LayerCache& c) {
    std::vector<float> k1, v1, k2, v2;
    for (size_t h = 0; h < dims.n_kv_heads; ++h) {
      k1.insert(k1.end(), k.begin() + long(h * n * hd), k.begin() + long(((h + 1) * n - 1) * hd));
      v1.insert(v1.end(), v.begin() + long(h * n * hd), v.begin() + long(((h + 1) * n - 1) * hd));
      k2.insert(k2.end(), k.begin() + long(((h + 1) * n - 1) * hd),
                k.begin() + long((h + 1) * n * hd));
      v2.insert(v2.end(), v.begin() + long(((h + 1) * n - 1) * hd),
                v.begin() + long((h + 1) * n * hd));
    }
    c.update({k1.data(), dims.n_kv_heads, n - 1, hd}, {v1.data(), dims.n_kv_heads, n - 1, hd});
    c.update({k2.data(), dims.n_kv_heads, 1, hd}, {v2.data(), dims.n_kv_heads, 1, hd});
  };
  LayerCache f16(dims, cfg);
  feed(f16);
  std::vector<float> out16(dims.n_heads * hd);
  f16.attend(out16.data(), {q.data(), dims.n_heads, 1, hd}, {kn.data(), dims.n_kv_heads, 1, hd},
             {vn.data(), dims.n_kv_heads, 1, hd});
  double rel[2] = {0, 0};
  for (CodecKind codec : {CodecKind::kivi2, CodecKind::kivi4}) {
    cfg.codec = codec;
    LayerCache qc(dims, cfg);
    feed(qc);
    EXPECT_EQ(qc.size(), n);
    std::vector<float> out(dims.n_heads * hd);
    qc.attend(out.data(), {q.data(), dims.n_heads, 1, hd}, {kn.data(), dims.n_kv_heads, 1, hd},
              {vn.data(), dims.n_kv_heads, 1, hd});
    double err2 = 0, ref2 = 0;
    for (size_t h = 0; h < dims.n_heads; ++h) {
      const size_t kv = h / (dims.n_heads / dims.n_kv_heads);
      const auto kq = read_keys(qc, kv), kf = read_keys(f16, kv);
      const auto vq = read_values(qc, kv), vf = read_values(f16, kv);
      double big_d = 0;
      for (size_t i = 0; i < n; ++i) {
        double d = 0;
        for (size_t c = 0; c < hd; ++c)
          d += double(q[h * hd + c]) * (kq[i * hd + c] - kf[i * hd + c]);
        big_d = std::max(big_d, std::fabs(d) / std::sqrt(double(hd)));
      }
      for (size_t c = 0; c < hd; ++c) {
        double v_err = 0, lo = vn[kv * hd + c], hi = vn[kv * hd + c];
        for (size_t i = 0; i < n; ++i) {
          v_err = std::max(v_err, std::fabs(double(vq[i * hd + c]) - vf[i * hd + c]));
          lo = std::min(lo, double(vf[i * hd + c]));
          hi = std::max(hi, double(vf[i * hd + c]));
        }
        const double bound = v_err + std::expm1(2 * big_d) * (hi - lo) / 2 + 1e-4 * (hi - lo);
        const double e = std::fabs(double(out[h * hd + c]) - out16[h * hd + c]);
        EXPECT_LE(e, bound) << to_string(codec) << " head " << h << " channel " << c;
        err2 += e * e;
        ref2 += double(out16[h * hd + c]) * out16[h * hd + c];
      }
    }
    rel[codec == CodecKind::kivi4] = std::sqrt(err2 / ref2);
    std::printf(
        "[kivi] LayerCache attend vs fp16, %zu rows: %s relative L2 error %.4f, "
        "%zu bytes vs %zu\n",
        n, std::string(to_string(codec)).c_str(), rel[codec == CodecKind::kivi4],
        qc.stats().bytes_stored, f16.stats().bytes_stored);
  }
  EXPECT_LT(rel[1] * 2, rel[0]);
}

// clone() of a cache with packed rows is deep and equal.
TEST(KiviCache, CloneCarriesPackedRows) {
  const CacheDims dims{2, 1, 16};
  CacheConfig cfg;
  cfg.policy = PolicyKind::streaming;
  cfg.codec = CodecKind::kivi2;
  cfg.budget = 40;
  cfg.kivi_group = 8;
  cfg.kivi_residual = 16;
  LayerCache a(dims, cfg);
  const auto k = realistic_rows(100, 16, 1, true), v = realistic_rows(100, 16, 2, false);
  a.update({k.data(), 1, 100, 16}, {v.data(), 1, 100, 16});
  a.update({k.data(), 1, 1, 16}, {v.data(), 1, 1, 16});  // packs 32 of the 40 kept rows
  LayerCache b = a.clone();
  EXPECT_EQ(read_keys(a, 0), read_keys(b, 0));
  EXPECT_EQ(read_values(a, 0), read_values(b, 0));
  EXPECT_EQ(a.stats().bytes_stored, b.stats().bytes_stored);
  a.update({k.data(), 1, 1, 16}, {v.data(), 1, 1, 16});
  EXPECT_EQ(b.size(), 41u);
  EXPECT_EQ(a.size(), 42u);
}

}  // namespace
}  // namespace snapkv
