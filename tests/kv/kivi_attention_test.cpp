// Attention over KIVI stores: the fused kernels (dot_rows / accumulate_rows reading packed rows)
// against a simple reference (read() everything to fp32, then dot in double), the AVX2 kernels
// against their scalar twins, and attention output error against an fp16 cache on the same rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kv/kivi_kernels.h"
#include "kv/kivi_test_util.h"
#include "kv/stores.h"
#include "snapkv/kv/row_store.h"

namespace snapkv {
namespace {

using kivi_test::realistic_rows;

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff

std::vector<float> read_all(const RowStore& s) {
  std::vector<float> out(s.rows() * s.head_dim());
  s.read(out.data(), 0, s.rows());
  return out;
}

// A store of n realistic rows with some rows evicted (so key blocks have holes and partial
// octets), plus fp16 sinks and a partly filled residual.
std::unique_ptr<RowStore> make_store(RowRole role, int bits, size_t head_dim, size_t group,
                                     size_t n, uint32_t seed) {
  auto s = make_kivi_row_store(role, bits, head_dim, group, 4 * group, 3);
  const std::vector<float> x = realistic_rows(n, head_dim, seed, true);
  s->append(x.data(), n - 1);
  s->append(x.data() + (n - 1) * head_dim, 1);  // packs the first rows, R at a time
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

struct Shape {
  size_t head_dim, group;
};
constexpr Shape kShapes[] = {{128, 32}, {64, 16}, {40, 16}, {13, 5}, {24, 64}};

// Fused dot_rows vs double-precision dots of read() rows. The fused key path computes
// sum_c (q_c * s_c) * code + sum_c q_c * z_c in fp32: each of the ~head_dim + 2 products and sums
// rounds once, so |fused - exact| <= 2 (head_dim + 4) u * sum_c |q_c| (|s_c code| + |z_c|), and
// |s_c code| + |z_c| <= |x'_c| + 2 |z_c| <= |x'_c| + 2 A_c with A_c = max over rows |x'_rc|.
TEST(KiviAttention, FusedDotMatchesReference) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (int bits : {2, 4}) {
      for (const Shape& sh : kShapes) {
        const size_t hd = sh.head_dim;
        auto s = make_store(role, bits, hd, sh.group, 301, 42);
        const size_t n = s->rows();
        const std::vector<float> x = read_all(*s);
        std::vector<double> col_max(hd, 0.0);
        for (size_t i = 0; i < n * hd; ++i) {
          col_max[i % hd] = std::max(col_max[i % hd], double(std::fabs(x[i])));
        }
        for (size_t n_q : {size_t{1}, size_t{3}, size_t{4}, size_t{6}}) {
          const std::vector<float> q = realistic_rows(n_q, hd, 7, false);
          std::vector<float> out(n_q * n, NAN);
          s->dot_rows(out.data(), q.data(), n_q);
          for (size_t j = 0; j < n_q; ++j) {
            for (size_t r = 0; r < n; ++r) {
              double ref = 0, mag = 0;
              for (size_t c = 0; c < hd; ++c) {
                ref += double(q[j * hd + c]) * x[r * hd + c];
                mag += std::fabs(q[j * hd + c]) * (std::fabs(x[r * hd + c]) + 2 * col_max[c]);
              }
              const double bound = 2.0 * double(hd + 4) * kU32 * mag;
              ASSERT_NEAR(out[j * n + r], ref, bound)
                  << "role " << int(role) << " bits " << bits << " hd " << hd << " row " << r;
            }
          }
        }
      }
    }
  }
}

// Fused accumulate_rows vs double sums of w * read() rows. Per output element the fused value
// path sums n rows of (w_r s_r) code + (w_r z_r): |fused - exact| <=
// 2 (n + 4) u * sum_r |w_r| (|x'_rc| + 2 B_r), B_r = max_c |x'_rc| >= |z_r|.
TEST(KiviAttention, FusedAccumulateMatchesReference) {
  for (RowRole role : {RowRole::key, RowRole::value}) {
    for (int bits : {2, 4}) {
      for (const Shape& sh : kShapes) {
        const size_t hd = sh.head_dim;
        auto s = make_store(role, bits, hd, sh.group, 301, 43);
        const size_t n = s->rows();
        const std::vector<float> x = read_all(*s);
        std::vector<double> row_max(n, 0.0);
        for (size_t i = 0; i < n * hd; ++i) {
          row_max[i / hd] = std::max(row_max[i / hd], double(std::fabs(x[i])));
        }
        for (size_t n_q : {size_t{1}, size_t{2}, size_t{4}, size_t{5}}) {
          std::mt19937 rng(static_cast<uint32_t>(n_q));
          std::uniform_real_distribution<float> u(-1.0f, 1.0f);
          std::vector<float> w(n_q * n);
          for (float& v : w) v = u(rng);
          std::vector<float> out(n_q * hd, 0.5f);  // accumulates onto what is there
          s->accumulate_rows(out.data(), w.data(), n_q);
          for (size_t j = 0; j < n_q; ++j) {
            for (size_t c = 0; c < hd; ++c) {
              double ref = 0.5, mag = 0.5;
              for (size_t r = 0; r < n; ++r) {
                ref += double(w[j * n + r]) * x[r * hd + c];
                mag += std::fabs(w[j * n + r]) * (std::fabs(x[r * hd + c]) + 2 * row_max[r]);
              }
              const double bound = 2.0 * double(n + 4) * kU32 * mag;
              ASSERT_NEAR(out[j * hd + c], ref, bound)
                  << "role " << int(role) << " bits " << bits << " hd " << hd << " ch " << c;
            }
          }
        }
      }
    }
  }
}

// The AVX2 kernels against their scalar twins on raw packed data (all code patterns).
TEST(KiviAttention, FastKernelsMatchScalarTwins) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int bits : {2, 4}) {
    for (size_t hd : {size_t{8}, size_t{128}, size_t{24}}) {
      for (size_t n_rows : {size_t{1}, size_t{7}, size_t{8}, size_t{17}, size_t{32}}) {
        const size_t n_q = 5;
        std::vector<uint8_t> words((n_rows + 7) / 8 * hd * size_t(bits));
        for (auto& b : words) b = static_cast<uint8_t>(rng());
        std::vector<float> scales(hd), zeros(hd), q(n_q * hd);
        for (size_t c = 0; c < hd; ++c) {
          scales[c] = std::fabs(u(rng));
          zeros[c] = u(rng);
        }
        for (float& v : q) v = u(rng);
        std::vector<float> fast(n_q * n_rows), slow(n_q * n_rows);
        kivi_key_block_dot(fast.data(), n_rows, q.data(), n_q, scales.data(), zeros.data(),
                           words.data(), n_rows, hd, bits);
        kivi_key_block_dot_scalar(slow.data(), n_rows, q.data(), n_q, scales.data(), zeros.data(),
                                  words.data(), n_rows, hd, bits);
        // both within 2 (hd + 4) u * sum_c |q_c| (|s_c| max_code + 2 |z_c|) of the exact value
        for (size_t j = 0; j < n_q; ++j) {
          double mag = 0;
          for (size_t c = 0; c < hd; ++c) {
            mag += std::fabs(q[j * hd + c]) *
                   (scales[c] * double(kivi_max_code(bits)) + 2 * std::fabs(zeros[c]));
          }
          for (size_t r = 0; r < n_rows; ++r) {
            EXPECT_NEAR(fast[j * n_rows + r], slow[j * n_rows + r],
                        4.0 * double(hd + 4) * kU32 * mag);
          }
        }
        // values: n_rows rows of hd channels, groups of 8
        const size_t group = 8, n_groups = (hd + group - 1) / group;
        std::vector<uint8_t> codes(n_rows * ((hd + 7) / 8) * size_t(bits));
        for (auto& b : codes) b = static_cast<uint8_t>(rng());
        std::vector<KiviParams> params(n_rows * n_groups);
        for (auto& p : params) {
          p.scale = fp32_to_fp16(std::fabs(u(rng)));
          p.zero = fp32_to_fp16(u(rng));
        }
        std::vector<float> w(n_q * n_rows), acc_fast(n_q * hd, 1.0f), acc_slow(n_q * hd, 1.0f);
        for (float& v : w) v = u(rng);
        kivi_value_rows_accumulate(acc_fast.data(), w.data(), n_rows, n_q, codes.data(),
                                   params.data(), n_rows, hd, group, bits);
        kivi_value_rows_accumulate_scalar(acc_slow.data(), w.data(), n_rows, n_q, codes.data(),
                                          params.data(), n_rows, hd, group, bits);
        // both within 2 (n_rows + 4) u * (1 + sum_r |w_r| (|s_r| max_code + 2 |z_r|))
        for (size_t j = 0; j < n_q; ++j) {
          for (size_t c = 0; c < hd; ++c) {
            double mag = 1.0;
            for (size_t r = 0; r < n_rows; ++r) {
              const KiviParams& p = params[r * n_groups + c / group];
              mag += std::fabs(w[j * n_rows + r]) *
                     (fp16_to_fp32(p.scale) * double(kivi_max_code(bits)) +
                      2 * std::fabs(fp16_to_fp32(p.zero)));
            }
            EXPECT_NEAR(acc_fast[j * hd + c], acc_slow[j * hd + c],
                        4.0 * double(n_rows + 4) * kU32 * mag);
          }
        }
      }
    }
  }
}

// Attention output of one query over a KIVI cache vs the same rows in an fp16 cache (the codec's
// error alone). With delta_i = q.(k'_i - k_i)/sqrt(d) and D = max |delta_i|, softmax weights
// move by at most a factor e^(+-2D), so ||p' - p||_1 <= e^(2D) - 1, and
//   |o'_c - o_c| <= max_i |v'_ic - v_ic| + ||p' - p||_1 * (max_i v_ic - min_i v_ic) / 2.
// The bound uses the measured deltas (data-derived); the attention itself runs through
// dot_rows / accumulate_rows of the stores with a float softmax, so a small fp32 slack is added.
TEST(KiviAttention, AttentionErrorVsFp16PerBitWidth) {
  const size_t hd = 128, n = 2048, n_q = 4;
  const std::vector<float> k = realistic_rows(n, hd, 21, true);
  const std::vector<float> v = realistic_rows(n, hd, 22, false);
  std::vector<float> q = realistic_rows(n_q, hd, 23, false);
  for (size_t i = 0; i < q.size(); ++i) q[i] *= 0.5f;  // logits of a few units, as in real heads
  auto fk = make_fp16_row_store(hd);
  auto fv = make_fp16_row_store(hd);
  fk->append(k.data(), n);
  fv->append(v.data(), n);
  const std::vector<float> k16 = read_all(*fk), v16 = read_all(*fv);
  double rel_err[2] = {0, 0};
  for (int bits : {2, 4}) {
    auto kk = make_kivi_row_store(RowRole::key, bits, hd, 32, 128, 0);
    auto kv = make_kivi_row_store(RowRole::value, bits, hd, 32, 128, 0);
    kk->append(k.data(), n - 1);  // the second append packs 1920 rows
    kv->append(v.data(), n - 1);
    kk->append(k.data() + (n - 1) * hd, 1);
    kv->append(v.data() + (n - 1) * hd, 1);
    const std::vector<float> kq = read_all(*kk), vq = read_all(*kv);
    // the fused attention: logits through dot_rows, weights through accumulate_rows
    std::vector<float> logits(n_q * n), out(n_q * hd, 0.0f);
    kk->dot_rows(logits.data(), q.data(), n_q);
    for (size_t j = 0; j < n_q; ++j) {
      float* l = logits.data() + j * n;
      float mx = -INFINITY, total = 0;
      for (size_t i = 0; i < n; ++i) mx = std::max(mx, l[i] /= std::sqrt(float(hd)));
      for (size_t i = 0; i < n; ++i) total += (l[i] = std::exp(l[i] - mx));
      for (size_t i = 0; i < n; ++i) l[i] /= total;
    }
    kv->accumulate_rows(out.data(), logits.data(), n_q);
    double err2 = 0, ref2 = 0;
    for (size_t j = 0; j < n_q; ++j) {
      std::vector<double> ref(hd);
      kivi_test::attention_ref(ref.data(), q.data() + j * hd, k16.data(), v16.data(), n, hd);
      double big_d = 0;
      for (size_t i = 0; i < n; ++i) {
        double d = 0;
        for (size_t c = 0; c < hd; ++c)
          d += double(q[j * hd + c]) * (kq[i * hd + c] - k16[i * hd + c]);
        big_d = std::max(big_d, std::fabs(d) / std::sqrt(double(hd)));
      }
      const double p_l1 = std::expm1(2 * big_d);
      for (size_t c = 0; c < hd; ++c) {
        double v_err = 0, v_lo = INFINITY, v_hi = -INFINITY;
        for (size_t i = 0; i < n; ++i) {
          v_err = std::max(v_err, std::fabs(double(vq[i * hd + c]) - v16[i * hd + c]));
          v_lo = std::min(v_lo, double(v16[i * hd + c]));
          v_hi = std::max(v_hi, double(v16[i * hd + c]));
        }
        const double bound = v_err + p_l1 * (v_hi - v_lo) / 2 + 1e-4 * (v_hi - v_lo);
        const double e = std::fabs(out[j * hd + c] - ref[c]);
        EXPECT_LE(e, bound) << bits << "-bit query " << j << " channel " << c;
        err2 += e * e;
        ref2 += ref[c] * ref[c];
      }
    }
    rel_err[bits == 4] = std::sqrt(err2 / ref2);
    std::printf("[kivi] attention vs fp16, %zu rows, %d-bit: relative L2 error %.4f\n", n, bits,
                rel_err[bits == 4]);
  }
  // 4-bit is the finer codec; its output error must be clearly smaller (steps 5x finer).
  EXPECT_LT(rel_err[1] * 2, rel_err[0]);
}

}  // namespace
}  // namespace snapkv
