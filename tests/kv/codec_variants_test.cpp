// The codecs beside KIVI: rotated KIVI (kivi2r, kivi4r) and kitty. Round-trip distortion against
// bounds derived from each group's range, fused dot/accumulate against double references over the
// decoded rows, .kvc store records, byte accounting and clear errors for bad configurations. The
// no-drift rule under repeated eviction: codec_contract_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kv/codecs/stores.h"
#include "kv/kivi_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/kv/codecs/rotation.h"
#include "snapkv/kv/core/row_store.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

using kivi_test::read_all;
using kivi_test::realistic_rows;
using kivi_test::round_fp16;
using kivi_test::scale_bound;

constexpr double kU32 = 1.0 / 16777216.0;

CacheConfig codec_config(CodecKind codec, size_t group, size_t residual, size_t sinks = 0) {
  CacheConfig c;
  c.codec = codec;
  c.kivi_group = group;
  c.kivi_residual = residual;
  c.kivi_fp16_sinks = sinks;
  c.rotation_seed = 1234;
  c.kitty_channels = 4;
  return c;
}

double norm(const double* x, size_t d) {
  double s = 0;
  for (size_t c = 0; c < d; ++c) s += x[c] * x[c];
  return std::sqrt(s);
}

int bits_of(CodecKind c, RowRole role) {
  return codec_kivi_bits(c, role == RowRole::key);
}
// kivi42r rotates its values only (its keys are plain 4-bit KIVI).
bool rotated(CodecKind c, RowRole role) {
  return c == CodecKind::kivi2r || c == CodecKind::kivi4r ||
         (c == CodecKind::kivi42r && role == RowRole::value);
}

struct RoundTrip {
  double nmse = 0;
  size_t rows_over_bound = 0;
};

// n rows appended at once, then one more (which packs the first n rows, R at a time). Per row,
// in the coordinates the codec quantizes (y = R x for rotated codecs, computed with the same fast
// transform; x itself otherwise) each element's error is at most
//   e_c = |y_c - fp16(y_c)| + s/2 + 2u (|y_c| + s)       (s: the group's scale bound; kitty's
//                                                           fp16 channels: s = 0)
// and the decoded row's error in x coordinates is at most ||e||_2 + (L+3) u (||x|| + ||y'||)
// for rotated codecs (the two transforms' rounding, kv/codecs/rotation.h), ||e||_2 otherwise.
RoundTrip round_trip(CodecKind codec, RowRole role, size_t head_dim, size_t group, size_t n) {
  const size_t residual = 4 * group;
  const CacheConfig cfg = codec_config(codec, group, residual);
  auto store = make_row_store(cfg, role, head_dim);
  const std::vector<float> x = realistic_rows(n + 1, head_dim, 77, true);
  store->append(x.data(), n);
  store->append(x.data() + n * head_dim, 1);
  const std::vector<float> out = read_all(*store);
  const size_t n_quant = n / residual * residual;
  const HadamardRotation rot(head_dim, cfg.rotation_seed);
  std::vector<float> y = x;  // quantized coordinates
  if (rotated(codec, role)) rot.rotate(y.data(), n + 1);
  std::vector<float> yh(y.size());
  for (size_t i = 0; i < y.size(); ++i) yh[i] = round_fp16(y[i]);
  const int bits = bits_of(codec, role);
  const size_t n_vgroups = (head_dim + group - 1) / group;
  RoundTrip res;
  double err2 = 0, sig2 = 0;
  std::vector<double> e(head_dim);
  for (size_t r = 0; r <= n; ++r) {
    const size_t b0 = r / group * group;  // key block of row r
    // kitty: the block's fp16 channels, as the store picks them (largest max|x|, lower index)
    std::vector<bool> exact(head_dim, false);
    if (codec == CodecKind::kitty && role == RowRole::key && r < n_quant) {
      std::vector<std::pair<float, size_t>> mag(head_dim);
      for (size_t c = 0; c < head_dim; ++c) {
        float m = 0;
        for (size_t i = b0; i < b0 + group; ++i) m = std::max(m, std::fabs(yh[i * head_dim + c]));
        mag[c] = {-m, c};
      }
      std::sort(mag.begin(), mag.end());
      for (size_t k = 0; k < cfg.kitty_channels; ++k) exact[mag[k].second] = true;
    }
    // kivimix: the block's head_dim/2 channels of largest range are 4-bit, decoded as
    // (z + 4 s h) + s l (two fp32 roundings of values up to |y| + 4 s)
    std::vector<bool> wide(head_dim, false);
    if (codec == CodecKind::kivimix && role == RowRole::key && r < n_quant) {
      std::vector<std::pair<float, size_t>> range(head_dim);
      for (size_t c = 0; c < head_dim; ++c) {
        float lo = INFINITY, hi = -INFINITY;
        for (size_t i = b0; i < b0 + group; ++i) {
          lo = std::min(lo, yh[i * head_dim + c]);
          hi = std::max(hi, yh[i * head_dim + c]);
        }
        range[c] = {-(hi - lo), c};
      }
      std::sort(range.begin(), range.end());
      for (size_t k = 0; k < head_dim / 2; ++k) wide[range[k].second] = true;
    }
    for (size_t c = 0; c < head_dim; ++c) {
      const size_t i = r * head_dim + c;
      double s = 0;
      if (r < n_quant && !exact[c]) {
        float lo = INFINITY, hi = -INFINITY;
        if (role == RowRole::key) {
          for (size_t k = b0; k < b0 + group; ++k) {
            lo = std::min(lo, yh[k * head_dim + c]);
            hi = std::max(hi, yh[k * head_dim + c]);
          }
        } else {
          const size_t c0 = c / group * group, c1 = std::min(head_dim, c0 + group);
          for (size_t k = c0; k < c1; ++k) {
            lo = std::min(lo, yh[r * head_dim + k]);
            hi = std::max(hi, yh[r * head_dim + k]);
          }
        }
        s = scale_bound(double(hi) - lo, wide[c] ? 4 : bits);
      }
      e[c] = std::fabs(double(y[i]) - yh[i]) + s / 2 +
             2 * kU32 * (std::fabs(y[i]) + (wide[c] ? 4 * s : s));
      (void)n_vgroups;
    }
    double xn = 0, on = 0, d2 = 0;
    for (size_t c = 0; c < head_dim; ++c) {
      const size_t i = r * head_dim + c;
      xn += double(x[i]) * x[i];
      on += double(out[i]) * out[i];
      d2 += (double(out[i]) - x[i]) * (double(out[i]) - x[i]);
    }
    double bound = norm(e.data(), head_dim);
    if (rotated(codec, role)) {
      bound += double(rot.stages() + 3) * kU32 * (std::sqrt(xn) + std::sqrt(on) + bound);
    }
    if (std::sqrt(d2) > bound) ++res.rows_over_bound;
    err2 += d2;
    sig2 += xn;
  }
  res.nmse = err2 / sig2;
  return res;
}

TEST(CodecVariants, RoundTripWithinDerivedBounds) {
  const CodecKind codecs[] = {CodecKind::kivi2,  CodecKind::kivi2r,  CodecKind::kitty,
                              CodecKind::kivi4,  CodecKind::kivi4r,  CodecKind::kivi42,
                              CodecKind::kivi24, CodecKind::kivi42r, CodecKind::kivi32,
                              CodecKind::kivimix};
  std::map<std::pair<int, int>, double> nmse;  // (codec, role) -> nmse
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (CodecKind codec : codecs) {
      for (size_t head_dim : {size_t{64}, size_t{48}}) {
        const RoundTrip rt = round_trip(codec, role, head_dim, 16, 512);
        EXPECT_EQ(rt.rows_over_bound, 0u)
            << to_string(codec) << (role == RowRole::key ? " keys" : " values") << " hd "
            << head_dim;
        if (head_dim == 64) nmse[{int(codec), int(role)}] = rt.nmse;
      }
      std::printf("[codecs] %-6s %s nmse %.5f\n", std::string(to_string(codec)).c_str(),
                  role == RowRole::key ? "keys  " : "values", nmse[{int(codec), int(role)}]);
    }
  }
  auto at = [&](CodecKind c, RowRole r) { return nmse[{int(c), int(r)}]; };
  // Kitty keeps the outlier channels (every 16th: 4 of 64, exactly kitty_channels) in fp16, so its
  // keys lose far less than kivi2's; its values are kivi2's.
  EXPECT_LT(at(CodecKind::kitty, RowRole::key) * 2, at(CodecKind::kivi2, RowRole::key));
  EXPECT_EQ(at(CodecKind::kitty, RowRole::value), at(CodecKind::kivi2, RowRole::value));
  // Values are grouped per token, so an outlier channel stretches every group it is in; the
  // rotation spreads it over the row and the groups tighten.
  EXPECT_LT(at(CodecKind::kivi2r, RowRole::value), at(CodecKind::kivi2, RowRole::value));
  EXPECT_LT(at(CodecKind::kivi4r, RowRole::value), at(CodecKind::kivi4, RowRole::value));
  // The mixed codecs are KIVI at each role's width: kivi42 keys are kivi4's keys, its values
  // kivi2's (kivi42r: kivi2r's), kivi24 the mirror. Same data, same stores: equal errors.
  EXPECT_EQ(at(CodecKind::kivi42, RowRole::key), at(CodecKind::kivi4, RowRole::key));
  EXPECT_EQ(at(CodecKind::kivi42, RowRole::value), at(CodecKind::kivi2, RowRole::value));
  EXPECT_EQ(at(CodecKind::kivi42r, RowRole::key), at(CodecKind::kivi4, RowRole::key));
  EXPECT_EQ(at(CodecKind::kivi42r, RowRole::value), at(CodecKind::kivi2r, RowRole::value));
  EXPECT_EQ(at(CodecKind::kivi24, RowRole::key), at(CodecKind::kivi2, RowRole::key));
  EXPECT_EQ(at(CodecKind::kivi24, RowRole::value), at(CodecKind::kivi4, RowRole::value));
  // kivi32: 3-bit keys lose less than 2-bit ones and more than 4-bit ones (7 levels between 3 and
  // 15); its values are kivi2's.
  EXPECT_LT(at(CodecKind::kivi32, RowRole::key), at(CodecKind::kivi2, RowRole::key));
  EXPECT_GT(at(CodecKind::kivi32, RowRole::key), at(CodecKind::kivi4, RowRole::key));
  EXPECT_EQ(at(CodecKind::kivi32, RowRole::value), at(CodecKind::kivi2, RowRole::value));
  // kivimix: half the key channels at 4 bits (the outlier channels among them) lose less than
  // 2-bit keys and more than 4-bit ones; its values are kivi2's.
  EXPECT_LT(at(CodecKind::kivimix, RowRole::key), at(CodecKind::kivi2, RowRole::key));
  EXPECT_GT(at(CodecKind::kivimix, RowRole::key), at(CodecKind::kivi4, RowRole::key));
  EXPECT_EQ(at(CodecKind::kivimix, RowRole::value), at(CodecKind::kivi2, RowRole::value));
}

// A store of realistic rows with evictions (holes in key blocks), sinks and a partial residual.
std::unique_ptr<RowStore> evicted_store(CodecKind codec, RowRole role, size_t head_dim,
                                        size_t group, uint32_t seed) {
  auto s = make_row_store(codec_config(codec, group, 4 * group, 3), role, head_dim);
  const size_t n = 301;
  const std::vector<float> x = realistic_rows(n, head_dim, seed, true);
  s->append(x.data(), n - 1);
  s->append(x.data() + (n - 1) * head_dim, 1);
  std::vector<uint32_t> keep;
  std::mt19937 rng(seed);
  for (uint32_t i = 0; i < n; ++i) {
    if (rng() % 4 != 0) keep.push_back(i);
  }
  s->retain(keep);
  const std::vector<float> more = realistic_rows(group + 3, head_dim, seed + 1, true);
  s->append(more.data(), group + 3);
  return s;
}

// The codecs beside KIVI, one test of each family below per codec.
class CodecVariant : public ::testing::TestWithParam<CodecKind> {};

// dot_rows on packed rows vs double dots with read() rows. In the codec's coordinates the KIVI
// kernel's bound of kivi_attention_test.cpp holds: 2 (hd + K + 6) u * sum_c |q'_c| (|x'_c| +
// 2 A_c) (K: kitty's fp16 channels, summed apart); rotated codecs add the two transforms'
// rounding 2 (L + 3) u ||q|| ||x'|| (q' = R q, x' = R x in double from the dense reference).
TEST_P(CodecVariant, FusedDotMatchesDequantizedReference) {
  const CodecKind codec = GetParam();
  for (size_t hd : {size_t{64}, size_t{40}}) {
    if (kivi_test::one_part_key_dots(codec, hd)) continue;  // see kivi_test_util.h
    auto s = evicted_store(codec, RowRole::key, hd, 16, 42);
    const size_t n = s->rows();
    const std::vector<float> x = read_all(*s);
    std::vector<double> xr(x.begin(), x.end());  // x' (codec coordinates)
    const std::vector<double> m = hadamard_rotation_matrix(hd, 1234);
    if (rotated(codec, RowRole::key)) {
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < hd; ++i) {
          double v = 0;
          for (size_t j = 0; j < hd; ++j) v += m[i * hd + j] * x[r * hd + j];
          xr[r * hd + i] = v;
        }
      }
    }
    std::vector<double> col_max(hd, 0.0);
    for (size_t i = 0; i < n * hd; ++i) {
      col_max[i % hd] = std::max(col_max[i % hd], std::fabs(xr[i]));
    }
    const size_t n_q = 3;
    const std::vector<float> q = realistic_rows(n_q, hd, 7, false);
    std::vector<float> out(n_q * n, NAN);
    s->dot_rows(out.data(), q.data(), n_q);
    const double stages = double(HadamardRotation(hd, 0).stages());
    for (size_t j = 0; j < n_q; ++j) {
      std::vector<double> qr(hd);
      for (size_t i = 0; i < hd; ++i) {
        double v = q[j * hd + i];
        if (rotated(codec, RowRole::key)) {
          v = 0;
          for (size_t k = 0; k < hd; ++k) v += m[i * hd + k] * q[j * hd + k];
        }
        qr[i] = v;
      }
      for (size_t r = 0; r < n; ++r) {
        double ref = 0, mag = 0, xn = 0;
        for (size_t c = 0; c < hd; ++c) {
          ref += double(q[j * hd + c]) * x[r * hd + c];
          mag += std::fabs(qr[c]) * (std::fabs(xr[r * hd + c]) + 2 * col_max[c]);
          xn += xr[r * hd + c] * xr[r * hd + c];
        }
        // K: kitty's 4 fp16 channels, kivimix's hd / 2 low halves, summed apart
        const double extra = codec == CodecKind::kivimix ? double(hd / 2) : 4.0;
        double bound = 2.0 * (double(hd) + extra + 6) * kU32 * mag;
        if (rotated(codec, RowRole::key)) {
          bound += 2.0 * (stages + 3) * kU32 * norm(qr.data(), hd) * std::sqrt(xn) * 1.01;
        }
        ASSERT_NEAR(out[j * n + r], ref, bound) << to_string(codec) << " hd " << hd << " r " << r;
      }
    }
  }
}

// accumulate_rows vs double sums of w * read() rows. In codec coordinates the KIVI value bound
// beta_c = 2 (n + 4) u sum_r |w_r| (|x'_rc| + 2 B_r) holds per element; rotating the sum back
// adds (L + 3) u ||S'|| to the vector error, so ||out - ref||_2 <= ||beta||_2 + (L + 3) u ||S'|| +
// u ||out||.
TEST_P(CodecVariant, FusedAccumulateMatchesDequantizedReference) {
  const CodecKind codec = GetParam();
  for (size_t hd : {size_t{64}, size_t{40}}) {
    auto s = evicted_store(codec, RowRole::value, hd, 16, 43);
    const size_t n = s->rows();
    const std::vector<float> x = read_all(*s);
    std::vector<double> xr(x.begin(), x.end());
    const std::vector<double> m = hadamard_rotation_matrix(hd, 1234);
    if (rotated(codec, RowRole::value)) {
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < hd; ++i) {
          double v = 0;
          for (size_t j = 0; j < hd; ++j) v += m[i * hd + j] * x[r * hd + j];
          xr[r * hd + i] = v;
        }
      }
    }
    std::vector<double> row_max(n, 0.0);
    for (size_t i = 0; i < n * hd; ++i) {
      row_max[i / hd] = std::max(row_max[i / hd], std::fabs(xr[i]));
    }
    const size_t n_q = 4;
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> w(n_q * n);
    for (float& v : w) v = u(rng);
    std::vector<float> out(n_q * hd, 0.5f);
    s->accumulate_rows(out.data(), w.data(), n_q);
    const double stages = double(HadamardRotation(hd, 0).stages());
    for (size_t j = 0; j < n_q; ++j) {
      std::vector<double> beta(hd), sum_r(hd, 0.0);
      double err2 = 0, out2 = 0;
      for (size_t c = 0; c < hd; ++c) {
        double ref = 0.5, mag = 0;
        for (size_t r = 0; r < n; ++r) {
          ref += double(w[j * n + r]) * x[r * hd + c];
          sum_r[c] += double(w[j * n + r]) * xr[r * hd + c];
          mag += std::fabs(w[j * n + r]) * (std::fabs(xr[r * hd + c]) + 2 * row_max[r]);
        }
        beta[c] = 2.0 * double(n + 4) * kU32 * mag;
        err2 += (out[j * hd + c] - ref) * (out[j * hd + c] - ref);
        out2 += double(out[j * hd + c]) * out[j * hd + c];
      }
      double bound = norm(beta.data(), hd) + kU32 * std::sqrt(out2);
      if (rotated(codec, RowRole::value))
        bound += (stages + 3) * kU32 * norm(sum_r.data(), hd) * 1.01;
      EXPECT_LE(std::sqrt(err2), bound) << to_string(codec) << " hd " << hd << " q " << j;
    }
  }
}

// The store record reloads into a store that decodes, dots, accumulates, counts bytes and goes on
// appending bit for bit like the original; a rotated record with another seed is refused.
TEST_P(CodecVariant, StoreRecordRoundTripIsBitIdentical) {
  const CodecKind codec = GetParam();
  for (RowRole role : {RowRole::key, RowRole::value}) {
    const size_t hd = 40;
    auto a = evicted_store(codec, role, hd, 16, 11);
    std::vector<uint8_t> record;
    a->save(record);
    const CacheConfig cfg = codec_config(codec, 16, 64, 3);
    auto b = load_row_store(cfg, role, hd, record);
    auto same = [&](const char* when) {
      ASSERT_EQ(a->rows(), b->rows()) << when;
      EXPECT_EQ(a->bytes(), b->bytes()) << when;
      EXPECT_EQ(read_all(*a), read_all(*b)) << when;
      const std::vector<float> q = realistic_rows(2, hd, 3, false);
      std::vector<float> da(2 * a->rows()), db(2 * b->rows());
      a->dot_rows(da.data(), q.data(), 2);
      b->dot_rows(db.data(), q.data(), 2);
      EXPECT_EQ(da, db) << when;
      std::vector<float> w(2 * a->rows(), 0.25f), oa(2 * hd, 0.0f), ob(2 * hd, 0.0f);
      a->accumulate_rows(oa.data(), w.data(), 2);
      b->accumulate_rows(ob.data(), w.data(), 2);
      EXPECT_EQ(oa, ob) << when;
      std::vector<uint8_t> ra, rb;
      a->save(ra);
      b->save(rb);
      EXPECT_EQ(ra, rb) << when;
    };
    same("loaded");
    const std::vector<float> more = realistic_rows(70, hd, 12, true);
    a->append(more.data(), 70);
    b->append(more.data(), 70);
    same("after appends");
    if (rotated(codec, role)) {
      CacheConfig other = cfg;
      other.rotation_seed = 4321;
      EXPECT_THROW(load_row_store(other, role, hd, record), RuntimeError);
    }
    record.push_back(0);  // one byte too many
    EXPECT_THROW(load_row_store(cfg, role, hd, record), RuntimeError) << to_string(codec);
  }
}

INSTANTIATE_TEST_SUITE_P(NewCodecs, CodecVariant,
                         ::testing::Values(CodecKind::kivi2r, CodecKind::kivi4r, CodecKind::kitty,
                                           CodecKind::kivi42, CodecKind::kivi24, CodecKind::kivi42r,
                                           CodecKind::kivi32, CodecKind::kivimix),
                         [](const ::testing::TestParamInfo<CodecKind>& p) {
                           return std::string(to_string(p.param));
                         });

// Exact bytes: kitty keys hold KIVI-2's layout plus 2 bytes per block channel index and 2 per
// fp16 value; rotated stores hold their KIVI store plus the 8-byte seed.
TEST(CodecVariants, BytesAreExact) {
  const size_t hd = 32, group = 8, residual = 16, n = 64 + 5;
  const std::vector<float> x = realistic_rows(n, hd, 4, true);
  for (RowRole role : {RowRole::key, RowRole::value}) {
    auto kivi = make_row_store(codec_config(CodecKind::kivi2, group, residual), role, hd);
    auto kitty = make_row_store(codec_config(CodecKind::kitty, group, residual), role, hd);
    auto rot = make_row_store(codec_config(CodecKind::kivi2r, group, residual), role, hd);
    for (RowStore* s : {kivi.get(), kitty.get(), rot.get()}) {
      s->append(x.data(), 64);
      s->append(x.data() + 64 * hd, 5);  // 64 rows packed: 8 key blocks
    }
    const size_t k = 4, blocks = 64 / group;
    EXPECT_EQ(kitty->bytes(),
              kivi->bytes() + (role == RowRole::key ? blocks * k * 2 + 64 * k * 2 : 0));
    EXPECT_EQ(rot->bytes(), kivi->bytes() + 8);
    // KIVI-2 keys: 64 rows x 32 channels x 2 bits + 8 blocks x (32 scales + 32 zeros) fp16 +
    // 8 blocks x 8-byte table + 5 fp16 residual rows; values: 16 + 4 params per row.
    const size_t expect_kivi = role == RowRole::key
                                   ? 64 * hd / 4 + blocks * 2 * hd * 2 + blocks * 8 + 5 * hd * 2
                                   : 64 * (hd / 4 + 4 * ((hd + group - 1) / group)) + 5 * hd * 2;
    EXPECT_EQ(kivi->bytes(), expect_kivi);
  }
}

TEST(CodecVariants, BadConfigurationsAreClearErrors) {
  const auto message = [](auto&& fn) { return kivi_test::error_of(fn); };
  CacheConfig c = codec_config(CodecKind::kitty, 8, 16);
  c.kitty_channels = 0;
  EXPECT_NE(message([&] { c.validate(); }).find("kitty_channels must be positive"),
            std::string::npos);
  c.kitty_channels = 32;
  EXPECT_NE(message([&] { make_row_store(c, RowRole::key, 32); }).find("below head_dim"),
            std::string::npos);
  c.kitty_channels = kMaxKittyChannels + 1;
  EXPECT_NE(message([&] { c.validate(); }).find("kitty_channels too large"), std::string::npos);
  c.kitty_channels = 31;
  EXPECT_NO_THROW(make_row_store(c, RowRole::key, 32));
  EXPECT_NE(message([] { parse_codec("kivi3r"); }).find("kivi2r"), std::string::npos);
  EXPECT_EQ(parse_codec("kitty"), CodecKind::kitty);
  EXPECT_EQ(to_string(CodecKind::kivi4r), "kivi4r");
  CacheConfig r = codec_config(CodecKind::kivi2r, 8, 12);  // residual not a multiple of group
  EXPECT_NE(message([&] { make_row_store(r, RowRole::value, 16); }).find("kivi_residual"),
            std::string::npos);
}

}  // namespace
}  // namespace snapkv
