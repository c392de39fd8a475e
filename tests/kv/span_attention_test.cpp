// The fused decode attention's parts: the multi-query fp16 row kernels against their scalar
// references (at the ISA level the run forces, ctest -L isa), every codec's span methods against
// a double-precision reference over its decoded rows (spans from span_end and arbitrary ones),
// and LayerCache::attend over every codec against the reference of kv_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/fp16_rows.h"
#include "kv/kivi_test_util.h"
#include "kv/kv_test_util.h"
#include "plain_config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/row_store.h"

namespace snapkv {
namespace {

using kivi_test::realistic_rows;
constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff

std::vector<fp16_t> to_fp16(const std::vector<float>& x) {
  std::vector<fp16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = fp32_to_fp16(x[i]);
  return h;
}

// Two fp32 sums of the same m products, each within gamma_m = m u / (1 - m u) of the exact sum
// times sum |product|, differ by at most 2 gamma_m sum |product|.
double two_sums_bound(size_t m, double abs_sum) {
  const double mu = double(m) * kU32;
  return 2.0 * mu / (1.0 - mu) * abs_sum;
}

TEST(Fp16StoreRows, DotMatchesScalarReference) {
  for (size_t hd : {size_t{128}, size_t{64}, size_t{40}, size_t{16}, size_t{13}}) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{37}}) {
      const std::vector<fp16_t> rows = to_fp16(realistic_rows(n, hd, 11, true));
      for (size_t n_q : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{6}, size_t{9}}) {
        const std::vector<float> q = realistic_rows(n_q, hd, 12, false);
        const size_t stride = n + 3;
        std::vector<float> fast(n_q * stride, -7.0f), ref(n_q * stride, -7.0f);
        fp16_rows_dot(fast.data(), stride, q.data(), n_q, rows.data(), n, hd);
        fp16_rows_dot_scalar(ref.data(), stride, q.data(), n_q, rows.data(), n, hd);
        for (size_t j = 0; j < n_q; ++j) {
          for (size_t i = 0; i < stride; ++i) {
            if (i >= n) {  // columns past n are left alone
              ASSERT_EQ(fast[j * stride + i], -7.0f);
              continue;
            }
            double abs_sum = 0;
            for (size_t c = 0; c < hd; ++c) {
              abs_sum += std::fabs(double(q[j * hd + c]) * fp16_to_fp32(rows[i * hd + c]));
            }
            ASSERT_NEAR(fast[j * stride + i], ref[j * stride + i], two_sums_bound(hd, abs_sum))
                << "head_dim " << hd << " n " << n << " n_q " << n_q << " q " << j << " row " << i;
          }
        }
      }
    }
  }
}

TEST(Fp16StoreRows, AccumulateMatchesScalarReference) {
  for (size_t hd : {size_t{128}, size_t{64}, size_t{48}, size_t{40}, size_t{13}}) {
    for (size_t n : {size_t{1}, size_t{31}, size_t{32}, size_t{70}}) {
      const std::vector<fp16_t> rows = to_fp16(realistic_rows(n, hd, 21, true));
      for (size_t n_q : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{8}}) {
        const size_t stride = n + 2;
        const std::vector<float> w = realistic_rows(n_q, stride, 22, false);
        const std::vector<float> start = realistic_rows(n_q, hd, 23, false);
        std::vector<float> fast = start, ref = start;
        fp16_rows_accumulate(fast.data(), w.data(), stride, n_q, rows.data(), n, hd);
        fp16_rows_accumulate_scalar(ref.data(), w.data(), stride, n_q, rows.data(), n, hd);
        for (size_t j = 0; j < n_q; ++j) {
          for (size_t c = 0; c < hd; ++c) {
            double abs_sum = std::fabs(start[j * hd + c]);
            for (size_t i = 0; i < n; ++i) {
              abs_sum += std::fabs(double(w[j * stride + i]) * fp16_to_fp32(rows[i * hd + c]));
            }
            ASSERT_NEAR(fast[j * hd + c], ref[j * hd + c], two_sums_bound(n + 1, abs_sum))
                << "head_dim " << hd << " n " << n << " n_q " << n_q << " q " << j << " c " << c;
          }
        }
      }
    }
  }
}

constexpr CodecKind kCodecs[] = {CodecKind::fp16,  CodecKind::kivi2,   CodecKind::kivi4,
                                 CodecKind::kitty, CodecKind::kivi2r,  CodecKind::kivi4r,
                                 CodecKind::gear,  CodecKind::zipcache};

CacheConfig codec_config(CodecKind codec) {
  CacheConfig cfg = test::plain_config();
  cfg.codec = codec;
  cfg.kivi_group = 16;
  cfg.kivi_residual = 32;
  cfg.kivi_fp16_sinks = codec == CodecKind::zipcache ? 0 : 3;  // a KIVI-only option
  return cfg;
}

// A store of ~200 rows of realistic data with every 5th row evicted (KIVI key blocks with holes,
// partial octets), the sinks, packed rows and an fp16 residual.
std::unique_ptr<RowStore> make_store(CodecKind codec, RowRole role, size_t hd) {
  auto s = make_row_store(codec_config(codec), role, hd);
  const std::vector<float> x = realistic_rows(230, hd, 31, role == RowRole::key);
  s->append(x.data(), 150);
  s->settle({});
  s->append(x.data() + 150 * hd, 50);
  s->settle({});
  std::vector<uint32_t> keep;
  for (uint32_t i = 0; i < s->rows(); ++i) {
    if (i % 5 != 2) keep.push_back(i);
  }
  s->retain(keep);
  s->append(x.data() + 200 * hd, 30);
  s->settle({});
  return s;
}

// dot_span and accumulate_span over spans (from span_end with several limits, and cut at arbitrary
// rows) against double sums over read()'s rows. A codec may fold its parameters into the query
// (KIVI keys: q_c s_c code + q_c z_c) or the weights, so each product is bounded by |a| (|x| + 2 M)
// with M the largest |x| of its channel (keys) or row (values); fp32 sums of m such terms and a
// few roundings per term stay within 2 (m + 8) u times their sum.
TEST(AttendSpans, SpansMatchDecodedRowsForEveryCodec) {
  const size_t hd = 64, n_q = 5;
  for (CodecKind codec : kCodecs) {
    for (RowRole role : {RowRole::key, RowRole::value}) {
      // see kivi_test_util.h (gear's dot_span decodes its corrected rows: no integer form)
      if (role == RowRole::key && codec != CodecKind::gear &&
          kivi_test::one_part_key_dots(codec, hd)) {
        continue;
      }
      auto s = make_store(codec, role, hd);
      const size_t n = s->rows();
      std::vector<float> x(n * hd);
      s->read(x.data(), 0, n);
      std::vector<double> col_max(hd, 0.0), row_max(n, 0.0);
      for (size_t i = 0; i < n * hd; ++i) {
        col_max[i % hd] = std::max(col_max[i % hd], double(std::fabs(x[i])));
        row_max[i / hd] = std::max(row_max[i / hd], double(std::fabs(x[i])));
      }
      auto magnitude = [&](size_t i, size_t c) {
        return std::fabs(x[i * hd + c]) + 2.0 * std::max(col_max[c], row_max[i]);
      };
      const std::vector<float> q = realistic_rows(n_q, hd, 32, false);
      const std::vector<float> w = realistic_rows(n_q, n, 33, false);  // [n_q][n]
      for (size_t max_rows :
           {size_t{1}, size_t{7}, size_t{16}, size_t{50}, size_t{1000}, size_t{0}}) {
        std::vector<size_t> cuts{0};  // max_rows 0: arbitrary cuts, not from span_end
        if (max_rows == 0) {
          for (size_t c : {size_t{5}, size_t{9}, size_t{40}, size_t{41}, size_t{100}})
            cuts.push_back(c);
          cuts.push_back(n);
        } else {
          while (cuts.back() < n) {
            const size_t end = s->span_end(cuts.back(), max_rows);
            ASSERT_GT(end, cuts.back());
            ASSERT_LE(end, n);
            cuts.push_back(end);
          }
        }
        std::vector<float> acc(n_q * hd, 0.0f);
        for (size_t k = 0; k + 1 < cuts.size(); ++k) {
          const size_t b = cuts[k], e = cuts[k + 1], len = e - b;
          std::vector<float> dots(n_q * len, NAN), ws(n_q * len);
          s->dot_span(dots.data(), len, q.data(), n_q, b, e);
          for (size_t j = 0; j < n_q; ++j) {
            for (size_t i = b; i < e; ++i) {
              double ref = 0, mag = 0;
              for (size_t c = 0; c < hd; ++c) {
                ref += double(q[j * hd + c]) * x[i * hd + c];
                mag += std::fabs(q[j * hd + c]) * magnitude(i, c);
              }
              ASSERT_NEAR(dots[j * len + i - b], ref, 2.0 * double(hd + 8) * kU32 * mag)
                  << to_string(codec) << " span [" << b << ", " << e << ") row " << i;
              ws[j * len + i - b] = w[j * n + i];
            }
          }
          s->accumulate_span(acc.data(), ws.data(), len, n_q, b, e);
        }
        for (size_t j = 0; j < n_q; ++j) {
          for (size_t c = 0; c < hd; ++c) {
            double ref = 0, mag = 0;
            for (size_t i = 0; i < n; ++i) {
              ref += double(w[j * n + i]) * x[i * hd + c];
              mag += std::fabs(w[j * n + i]) * magnitude(i, c);
            }
            ASSERT_NEAR(acc[j * hd + c], ref, 2.0 * double(n + hd + 8) * kU32 * mag)
                << to_string(codec) << " max_rows " << max_rows << " q " << j << " c " << c;
          }
        }
      }
    }
  }
}

// attend() (the fused path where the codec has span kernels, the two-pass one elsewhere) over
// every codec, decode and prefill-sized chunks, against the double reference of kv_test_util.h
// over the cache's decoded rows. The reference's bound takes a logit's error as (d + 2) u |q||k|;
// a codec that folds its parameters into the query (KIVI keys: q_c s_c code + q_c z_c) rounds
// terms up to |q_c| (|k_c| + 2 M_c), M_c the largest |k| of channel c, so the check adds
// 2 E max|v| with E = 2 (d + 4) u sum_c |q_c| (|k_c| + 2 M_c) / sqrt(d), the largest over rows.
TEST(AttendSpans, AttendMatchesReferenceForEveryCodec) {
  const CacheDims dims{8, 2, 32};
  for (CodecKind codec : kCodecs) {
    CacheConfig cfg = codec_config(codec);
    if (kivi_test::one_part_key_dots(codec, dims.head_dim, cfg.gear_bits)) continue;  // see there
    cfg.policy = PolicyKind::full;
    LayerCache cache(dims, cfg);
    const size_t n = 150;
    const auto k = test::random_normal(dims.n_kv_heads * n * dims.head_dim, 41);
    const auto v = test::random_normal(dims.n_kv_heads * n * dims.head_dim, 42);
    cache.update(test::view(k, dims.n_kv_heads, n, dims.head_dim),
                 test::view(v, dims.n_kv_heads, n, dims.head_dim));
    cache.update(test::view(k, dims.n_kv_heads, 1, dims.head_dim),
                 test::view(v, dims.n_kv_heads, 1, dims.head_dim), nullptr, UpdateKind::decode);
    for (size_t n_new : {size_t{1}, size_t{7}}) {
      const size_t d = dims.head_dim;
      const auto q = test::random_normal(dims.n_heads * n_new * d, 50 + n_new);
      const auto kn = test::random_normal(dims.n_kv_heads * n_new * d, 60 + n_new);
      const auto vn = test::random_normal(dims.n_kv_heads * n_new * d, 70 + n_new);
      std::vector<float> out(dims.n_heads * n_new * d, -1.0f);
      cache.attend(out.data(), test::view(q, dims.n_heads, n_new, d),
                   test::view(kn, dims.n_kv_heads, n_new, d),
                   test::view(vn, dims.n_kv_heads, n_new, d));
      std::vector<double> ref, bound;
      test::reference_attention(ref, bound, cache, q, kn, vn, n_new);
      const size_t group = dims.n_heads / dims.n_kv_heads;
      for (size_t row = 0; row < dims.n_heads * n_new; ++row) {
        const size_t kv = row / n_new / group;
        std::vector<float> keys(cache.size(kv) * d), values(cache.size(kv) * d);
        cache.read_keys(kv, keys.data());
        cache.read_values(kv, values.data());
        std::vector<double> col_max(d, 0.0);
        double max_v = 0.0, fold_err = 0.0;
        for (size_t i = 0; i < keys.size(); ++i) {
          col_max[i % d] = std::max(col_max[i % d], double(std::fabs(keys[i])));
        }
        for (float x : values) max_v = std::max(max_v, double(std::fabs(x)));
        for (float x : vn) max_v = std::max(max_v, double(std::fabs(x)));
        for (size_t i = 0; i < cache.size(kv); ++i) {
          double mag = 0;
          for (size_t c = 0; c < d; ++c) {
            mag += std::fabs(q[row * d + c]) * (std::fabs(keys[i * d + c]) + 2.0 * col_max[c]);
          }
          fold_err = std::max(fold_err, 2.0 * double(d + 4) * kU32 * mag / std::sqrt(double(d)));
        }
        const double tol = bound[row] + 2.0 * fold_err * max_v;
        for (size_t c = 0; c < d; ++c) {
          ASSERT_NEAR(out[row * d + c], ref[row * d + c], tol)
              << to_string(codec) << " row " << row << " c " << c << " n_new " << n_new;
        }
      }
    }
  }
}

}  // namespace
}  // namespace snapkv
