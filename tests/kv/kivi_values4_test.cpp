// The 4-bit integer value form (int16 weights, kernels/kivi/kivi_kernels.h "4-bit value rows in
// integers"): the active level's kernel against its scalar twin bit for bit, the twin against the
// exact weighted sum within the derived bound, and attention over realistic quantized values: the
// integer form's error against fp16 no larger than the float form's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kivi/kivi_kernels.h"
#include "kv/kivi_test_util.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace {

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff

struct Values4 {
  size_t hd, group, n_rows, n_q;
  std::vector<uint8_t> codes;      // [n_rows][hd / 2]
  std::vector<KiviParams> params;  // [n_rows][n_groups]
  std::vector<float> w;            // [n_q][n_rows]
  size_t n_groups() const { return (hd + group - 1) / group; }
  uint32_t code(size_t r, size_t c) const {
    return (kivi_load_word(codes.data() + r * (hd / 8) * 4, c / 8, 4) >> (4 * (c % 8))) & 15u;
  }
};

// Random codes and params (some groups constant: scale 0), softmax-like weights with zeros, a
// run of weights below the smallest step kept (2^-100) and, in one query, one dominant row.
Values4 random_case(size_t hd, size_t group, size_t n_rows, size_t n_q, uint32_t seed) {
  Values4 v{hd, group, n_rows, n_q, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  v.codes.resize(n_rows * hd / 2);
  for (auto& b : v.codes) b = static_cast<uint8_t>(rng());
  v.params.resize(n_rows * v.n_groups());
  for (auto& p : v.params) {
    p.scale = fp32_to_fp16(std::fabs(u(rng)) * (rng() % 7 == 0 ? 0.0f : 1.0f));
    p.zero = fp32_to_fp16(u(rng));
  }
  v.w.resize(n_q * n_rows);
  for (size_t j = 0; j < n_q; ++j) {
    for (size_t r = 0; r < n_rows; ++r) {
      float& x = v.w[j * n_rows + r];
      x = std::exp(-std::fabs(u(rng)) * 12.0f);
      if (rng() % 11 == 0) x = 0.0f;
      if (j == 1 && r < 40) x *= 0x1p-110f;
      if (j == 2 && r == n_rows / 3) x = 1.0f;
    }
  }
  return v;
}

struct Shape {
  size_t hd, group;
};

// The dispatch: the integer form exactly where the level has VNNI (as the integer key form),
// for 4-bit rows of head_dim 128 / 256 with groups of 16k channels, n_groups dividing 16.
TEST(KiviValues4, IntegerFormRunsWhereTheLevelHasIt) {
  const bool vnni = kivi_key_dot_uses_q8(128, 4);
  for (const Shape& s : {Shape{128, 32}, Shape{128, 16}, Shape{128, 64}, Shape{128, 128},
                         Shape{128, 256}, Shape{256, 32}, Shape{256, 16}, Shape{256, 256}}) {
    EXPECT_EQ(kivi_value_accumulate_uses_q16(s.hd, s.group, 4), vnni) << s.hd << " " << s.group;
    EXPECT_FALSE(kivi_value_accumulate_uses_q16(s.hd, s.group, 2));
  }
  for (const Shape& s : {Shape{64, 32}, Shape{32, 32}, Shape{128, 8}, Shape{128, 48}, Shape{96, 32},
                         Shape{384, 32}}) {
    EXPECT_FALSE(kivi_value_accumulate_uses_q16(s.hd, s.group, 4)) << s.hd << " " << s.group;
  }
}

// Bit for bit: the same int16 weights, exact integer sums, and the same fp32 operations in the
// same order (zero-term lanes and their folding, one fma per tile, the final two adds). Weights
// with a negative entry run the float form: held to its scalar twin with the fp32 tolerance.
TEST(KiviValues4, KernelIsExactTwinOfScalarForm) {
  for (const Shape& s : {Shape{128, 32}, Shape{128, 16}, Shape{128, 64}, Shape{128, 128},
                         Shape{128, 256}, Shape{256, 32}, Shape{256, 16}, Shape{256, 128}}) {
    const bool q16 = kivi_value_accumulate_uses_q16(s.hd, s.group, 4);
    for (size_t n_rows : {1, 2, 5, 63, 64, 65, 130, 1024}) {
      for (size_t n_q : {1, 2, 3, 4, 5, 8}) {
        for (bool negative : {false, true}) {
          Values4 v = random_case(s.hd, s.group, n_rows, n_q, uint32_t(n_rows * 31 + n_q + s.hd));
          if (negative) v.w[(n_q - 1) * n_rows + n_rows / 2] = -0.25f;
          std::vector<float> fast(n_q * s.hd, 0.5f), slow(n_q * s.hd, 0.5f);
          kivi_value_rows_accumulate(fast.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                     v.params.data(), n_rows, s.hd, s.group, 4);
          if (q16 && !negative) {
            kivi_value_rows_accumulate_q16_scalar(slow.data(), v.w.data(), n_rows, n_q,
                                                  v.codes.data(), v.params.data(), n_rows, s.hd,
                                                  s.group);
            for (size_t i = 0; i < fast.size(); ++i) {
              ASSERT_EQ(fast[i], slow[i]) << "hd " << s.hd << " group " << s.group << " rows "
                                          << n_rows << " n_q " << n_q << " at " << i;
            }
            continue;
          }
          kivi_value_rows_accumulate_scalar(slow.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                            v.params.data(), n_rows, s.hd, s.group, 4);
          for (size_t j = 0; j < n_q; ++j) {
            for (size_t c = 0; c < s.hd; ++c) {
              const double mag =
                  kivi_test::value_sum_magnitude(v.w.data() + j * n_rows, v.params.data(), n_rows,
                                                 v.n_groups(), c / s.group, 15.0 * 1.01, 0.5);
              ASSERT_NEAR(fast[j * s.hd + c], slow[j * s.hd + c],
                          4.0 * double(n_rows + 4) * kU32 * mag)
                  << "float form: hd " << s.hd << " rows " << n_rows << " query " << j;
            }
          }
        }
      }
    }
  }
}

// The range of the integer form is [0, 2^100] (kernels/kivi/kivi_weights_range.h, run with the
// 4-bit bound): a weight of exactly 2^100 in the last row of the last query still runs it (bit for
// bit its scalar twin; a bound below 2^100 fails here), one above it, negative or NaN gives the
// float form's result (within its fp32 tolerance of the float twin, NaN where the twin has NaN: the
// output is not summed twice). Above 2^100 the integer form would stay within that tolerance
// too, so a looser bound is not seen here.
TEST(KiviValues4, WeightsOutsideTheRangeRunTheFloatForm) {
  if (!kivi_value_accumulate_uses_q16(128, 32, 4)) {
    GTEST_SKIP() << "no 4-bit integer value kernel at this ISA level";
  }
  const size_t hd = 128, group = 32, n_rows = 300, n_q = 4;
  for (const float last : {0x1p100f, 0x1p101f, -0.25f, std::nanf("")}) {
    Values4 v = random_case(hd, group, n_rows, n_q, 91);
    v.w[(n_q - 1) * n_rows + n_rows - 1] = last;
    std::vector<float> fast(n_q * hd, 0.5f), slow(n_q * hd, 0.5f);
    kivi_value_rows_accumulate(fast.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                               v.params.data(), n_rows, hd, group, 4);
    if (last == 0x1p100f) {
      kivi_value_rows_accumulate_q16_scalar(slow.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                            v.params.data(), n_rows, hd, group);
      EXPECT_EQ(std::memcmp(fast.data(), slow.data(), fast.size() * sizeof(float)), 0);
      continue;
    }
    kivi_value_rows_accumulate_scalar(slow.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                      v.params.data(), n_rows, hd, group, 4);
    EXPECT_EQ(kivi_test::value_sums_disagree(fast, slow, v.w, v.params, n_rows, n_q, hd, group,
                                             15.0 * 1.01, 0.5),
              "")
        << "weight " << last;
  }
}

// The scalar form against the exact weighted sum of the decoded rows: per tile
// e_t * sum_r code(r, c), e_t = step / 2 (1 + 2^-5) (or mx below 2^-100), plus the fp32
// rounding of the sums (each product and sum rounds once: 4 (n + 8) u * magnitude).
TEST(KiviValues4, ScalarFormWithinDerivedBound) {
  for (const Shape& s :
       {Shape{128, 32}, Shape{128, 128}, Shape{256, 16}, Shape{64, 16}, Shape{32, 32}}) {
    const size_t n_rows = 300, n_q = 4;
    const Values4 v = random_case(s.hd, s.group, n_rows, n_q, 11);
    std::vector<float> q16(n_q * s.hd, 0.0f);
    kivi_value_rows_accumulate_q16_scalar(q16.data(), v.w.data(), n_rows, n_q, v.codes.data(),
                                          v.params.data(), n_rows, s.hd, s.group);
    double worst = 0;  // largest error over its bound
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t c = 0; c < s.hd; ++c) {
        const size_t g = c / s.group;
        double exact = 0, mag = 0, bound = 0;
        for (size_t r0 = 0; r0 < n_rows; r0 += kKiviValueQ16Tile) {
          const size_t nr = std::min(kKiviValueQ16Tile, n_rows - r0);
          double mx = 0, code_sum = 0;
          for (size_t r = r0; r < r0 + nr; ++r) {
            const KiviParams& p = v.params[r * v.n_groups() + g];
            const float wr = v.w[j * n_rows + r];
            mx = std::max(mx, double(wr * fp16_to_fp32(p.scale)));
            code_sum += v.code(r, c);
            exact += double(wr) * kivi_decode(v.code(r, c), p);
            mag += std::fabs(wr) * (fp16_to_fp32(p.scale) * double(v.code(r, c)) +
                                    2 * std::fabs(fp16_to_fp32(p.zero)));
          }
          const double e = mx >= 0x1p-100 ? mx / 32767.0 / 2 * (1.0 + 1.0 / 32) : mx;
          bound += e * code_sum;
        }
        bound += 4.0 * double(n_rows + 8) * kU32 * mag;
        const double err = std::fabs(q16[j * s.hd + c] - exact);
        ASSERT_LE(err, bound) << "hd " << s.hd << " group " << s.group << " query " << j
                              << " channel " << c;
        worst = std::max(worst, err / bound);
      }
    }
    std::printf("[kivi] 4-bit integer value form, hd %zu group %zu: error / bound <= %.3f\n", s.hd,
                s.group, worst);
  }
}

// Realistic values quantized as KiviValueStore packs them, softmax weights of realistic keys:
// the attention output's error against fp16 values is the codec's; the integer form's weight
// rounding must not add to it measurably (the RMS ratio of kivi_kernels.h: <= 0.4% of the
// codec's error, so the relative L2 error moves by < 0.1%). Also the active kernel, whatever
// form it runs, within that of the float form.
TEST(KiviValues4, AttentionErrorVsFp16DoesNotGrow) {
  for (size_t hd : {size_t{128}, size_t{256}}) {
    const size_t n = 2048, n_q = 4, group = 32, n_groups = hd / group;
    const std::vector<float> k = kivi_test::realistic_rows(n, hd, 31, true);
    const std::vector<float> x = kivi_test::realistic_rows(n, hd, 32, true);
    std::vector<float> q = kivi_test::realistic_rows(n_q, hd, 33, false);
    std::vector<float> v16(n * hd);
    for (size_t i = 0; i < v16.size(); ++i) v16[i] = kivi_test::round_fp16(x[i]);
    // pack the values: codes [n][hd / 2], params [n][n_groups]
    std::vector<uint8_t> codes(n * hd / 2, 0);
    std::vector<KiviParams> params(n * n_groups);
    for (size_t r = 0; r < n; ++r) {
      const float* row = v16.data() + r * hd;
      for (size_t g = 0; g < n_groups; ++g) {
        const auto [lo, hi] = std::minmax_element(row + g * group, row + (g + 1) * group);
        params[r * n_groups + g] = kivi_choose_params(*lo, *hi, 4);
      }
      for (size_t wi = 0; wi < hd / 8; ++wi) {
        uint8_t c8[8];
        for (size_t e = 0; e < 8; ++e) {
          const size_t c = wi * 8 + e;
          c8[e] = static_cast<uint8_t>(kivi_encode(row[c], params[r * n_groups + c / group], 4));
        }
        kivi_store_word(codes.data() + r * hd / 2, wi, kivi_pack_word(c8, 4), 4);
      }
    }
    // softmax weights of q . k / sqrt(hd), q scaled to logits of a few units
    std::vector<float> w(n_q * n);
    for (size_t j = 0; j < n_q; ++j) {
      double mx = -INFINITY, total = 0;
      std::vector<double> l(n);
      for (size_t i = 0; i < n; ++i) {
        double d = 0;
        for (size_t c = 0; c < hd; ++c) d += 0.5 * q[j * hd + c] * k[i * hd + c];
        l[i] = d / std::sqrt(double(hd));
        mx = std::max(mx, l[i]);
      }
      for (size_t i = 0; i < n; ++i) total += (l[i] = std::exp(l[i] - mx));
      for (size_t i = 0; i < n; ++i) w[j * n + i] = static_cast<float>(l[i] / total);
    }
    std::vector<float> flt(n_q * hd, 0.0f), q16(n_q * hd, 0.0f), fast(n_q * hd, 0.0f);
    kivi_value_rows_accumulate_scalar(flt.data(), w.data(), n, n_q, codes.data(), params.data(), n,
                                      hd, group, 4);
    kivi_value_rows_accumulate_q16_scalar(q16.data(), w.data(), n, n_q, codes.data(), params.data(),
                                          n, hd, group);
    kivi_value_rows_accumulate(fast.data(), w.data(), n, n_q, codes.data(), params.data(), n, hd,
                               group, 4);
    double e_flt = 0, e_q16 = 0, e_fast = 0, d_q16 = 0, ref2 = 0;
    for (size_t j = 0; j < n_q; ++j) {
      for (size_t c = 0; c < hd; ++c) {
        double ref = 0;
        for (size_t i = 0; i < n; ++i) ref += double(w[j * n + i]) * v16[i * hd + c];
        const size_t at = j * hd + c;
        e_flt += (flt[at] - ref) * (flt[at] - ref);
        e_q16 += (q16[at] - ref) * (q16[at] - ref);
        e_fast += (fast[at] - ref) * (fast[at] - ref);
        d_q16 += (q16[at] - double(flt[at])) * (q16[at] - double(flt[at]));
        ref2 += ref * ref;
      }
    }
    const double r_flt = std::sqrt(e_flt / ref2), r_q16 = std::sqrt(e_q16 / ref2),
                 r_fast = std::sqrt(e_fast / ref2), r_d = std::sqrt(d_q16 / ref2);
    std::printf(
        "[kivi] 4-bit values vs fp16, hd %zu: relative L2 error float form %.6f, integer form "
        "%.6f (their distance %.2e), active kernel %.6f\n",
        hd, r_flt, r_q16, r_d, r_fast);
    EXPECT_GT(r_flt, 0.0);
    EXPECT_LE(r_d, 0.004 * r_flt);  // the weight rounding: <= 0.4% of the codec's error
    EXPECT_LE(r_q16, r_flt * 1.001);
    EXPECT_LE(r_fast, r_flt * 1.001);
  }
}

}  // namespace
}  // namespace snapkv
