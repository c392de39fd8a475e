// The integer key kernel (kernels/kivi/kivi_q8_simd.cpp, levels with AVX-512 VNNI) against its
// scalar twin on every shape the stores hand it: blocks longer than one 32-row pass, partial
// octets, any number of queries (groups of 4 and a remainder), strided outputs; and the fp16-params
// entry point (kivi_key_block_dot_f16) against the fp32 one, and the entry for runs of blocks
// (kivi_key_blocks_dot_f16) against per-block calls, which they must equal exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/kivi/kivi_kernels.h"
#include "snapkv/kv/codecs/kivi.h"
#include "snapkv/util/fp16.h"

namespace snapkv {
namespace {

constexpr double kU32 = 1.0 / 16777216.0;  // fp32 unit roundoff
constexpr float kSentinel = 1234.5f;       // output slots past the block's rows

TEST(KiviKeyQ8, MatchesScalarTwinOnEveryShape) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  size_t checked = 0;
  for (int bits : {2, 4}) {
    for (size_t hd : {size_t{16}, size_t{32}, size_t{48}, size_t{96}, size_t{128}, size_t{256}}) {
      if (!kivi_key_dot_uses_q8(hd, bits)) continue;  // the float form: FastKernelsMatchScalarTwins
      for (size_t n_rows :
           {size_t{1}, size_t{13}, size_t{32}, size_t{33}, size_t{57}, size_t{64}, size_t{128}}) {
        for (size_t n_q : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{5}, size_t{8}}) {
          std::vector<uint8_t> words((n_rows + 7) / 8 * hd * kivi_word_bytes(bits));
          for (auto& b : words) b = static_cast<uint8_t>(rng());
          std::vector<float> scales(hd), zeros(hd), q(n_q * hd);
          for (size_t c = 0; c < hd; ++c) {
            scales[c] = std::fabs(u(rng));
            zeros[c] = u(rng);
          }
          for (float& v : q) v = u(rng);
          q[(n_q - 1) * hd + hd / 3] *= 40.0f;  // one query with an outlier channel
          const size_t stride = n_rows + 5;
          std::vector<float> fast(n_q * stride, kSentinel), slow(n_q * stride, kSentinel);
          kivi_key_block_dot(fast.data(), stride, q.data(), n_q, scales.data(), zeros.data(),
                             words.data(), n_rows, hd, bits);
          kivi_key_block_dot_q8_scalar(slow.data(), stride, q.data(), n_q, scales.data(),
                                       zeros.data(), words.data(), n_rows, hd, bits);
          for (size_t j = 0; j < n_q; ++j) {
            // Same int8 operands and exact integer sums; only qz = sum_c q_c z_c is summed in
            // another order (each order within (hd + 4) u sum_c |q_c z_c| of the exact sum, to
            // first order) and then the one or two final fmas round (up to 2 u |result| each).
            double qz_mag = 0;
            for (size_t c = 0; c < hd; ++c) qz_mag += std::fabs(double(q[j * hd + c]) * zeros[c]);
            for (size_t r = 0; r < stride; ++r) {
              const float f = fast[j * stride + r], s = slow[j * stride + r];
              if (r >= n_rows) {
                EXPECT_EQ(f, kSentinel) << "row past the block written, bits " << bits;
                continue;
              }
              const double bound = 2.0 * double(hd + 4) * kU32 * qz_mag + 4.0 * kU32 * std::fabs(s);
              EXPECT_NEAR(f, s, bound) << "bits " << bits << " hd " << hd << " rows " << n_rows
                                       << " n_q " << n_q << " query " << j << " row " << r;
              ++checked;
            }
          }
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no integer key kernel at this ISA level";
}

TEST(KiviKeyQ8, Fp16ParamsEntryEqualsFp32Entry) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int bits : {2, 3, 4}) {
    for (size_t hd : {size_t{24}, size_t{32}, size_t{128}}) {
      for (size_t n_rows : {size_t{5}, size_t{32}, size_t{40}}) {
        for (size_t n_q : {size_t{1}, size_t{4}, size_t{5}}) {
          std::vector<uint8_t> words((n_rows + 7) / 8 * hd * kivi_word_bytes(bits));
          for (auto& b : words) b = static_cast<uint8_t>(rng());
          std::vector<fp16_t> params(2 * hd);
          std::vector<float> p32(2 * hd), q(n_q * hd);
          for (size_t c = 0; c < 2 * hd; ++c) {
            params[c] = fp32_to_fp16(c < hd ? std::fabs(u(rng)) : u(rng));
            p32[c] = fp16_to_fp32(params[c]);
          }
          for (float& v : q) v = u(rng);
          std::vector<float> a(n_q * n_rows), b(n_q * n_rows);
          kivi_key_block_dot_f16(a.data(), n_rows, q.data(), n_q, params.data(), words.data(),
                                 n_rows, hd, bits);
          kivi_key_block_dot(b.data(), n_rows, q.data(), n_q, p32.data(), p32.data() + hd,
                             words.data(), n_rows, hd, bits);
          for (size_t i = 0; i < a.size(); ++i) {
            ASSERT_EQ(a[i], b[i]) << "bits " << bits << " hd " << hd << " rows " << n_rows
                                  << " n_q " << n_q << " at " << i;
          }
        }
      }
    }
  }
}

TEST(KiviKeyQ8, BlocksEntryEqualsPerBlockCalls) {
  // kivi_key_blocks_dot_f16 (one call for a run of blocks: the stores' decode path) against
  // kivi_key_block_dot_f16 per block, which it must equal exactly at every ISA level, for groups
  // of 4 queries and remainders, one or more passes per block, strided outputs.
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int bits : {2, 3, 4}) {
    for (size_t hd : {size_t{32}, size_t{48}, size_t{128}}) {
      for (size_t rows : {size_t{8}, size_t{32}, size_t{64}}) {
        for (size_t n_blocks : {size_t{1}, size_t{3}, size_t{6}}) {
          for (size_t n_q : {size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{8}}) {
            const size_t block_bytes = rows / 8 * hd * kivi_word_bytes(bits);
            std::vector<uint8_t> words(n_blocks * block_bytes);
            for (auto& b : words) b = static_cast<uint8_t>(rng());
            std::vector<fp16_t> params(n_blocks * 2 * hd);
            for (size_t i = 0; i < params.size(); ++i) {
              params[i] = fp32_to_fp16(i % (2 * hd) < hd ? std::fabs(u(rng)) : u(rng));
            }
            std::vector<float> q(n_q * hd);
            for (float& v : q) v = u(rng);
            q[hd / 2] *= 40.0f;  // an outlier channel
            const size_t stride = n_blocks * rows + 3;
            std::vector<float> a(n_q * stride, kSentinel), b(n_q * stride, kSentinel);
            kivi_key_blocks_dot_f16(a.data(), stride, q.data(), n_q, params.data(), words.data(),
                                    n_blocks, rows, hd, bits);
            for (size_t k = 0; k < n_blocks; ++k) {
              kivi_key_block_dot_f16(b.data() + k * rows, stride, q.data(), n_q,
                                     params.data() + k * 2 * hd, words.data() + k * block_bytes,
                                     rows, hd, bits);
            }
            for (size_t i = 0; i < a.size(); ++i) {
              ASSERT_EQ(a[i], b[i]) << "bits " << bits << " hd " << hd << " rows " << rows
                                    << " blocks " << n_blocks << " n_q " << n_q << " at " << i;
            }
          }
        }
      }
    }
  }
}

TEST(KiviKeyQ8, BlocksEntryPairsOfBlocksEqualPerBlockCalls) {
  // The decode path of 2-bit keys prepares the operands of two blocks at once and runs them on
  // 512-bit vectors (kivi_q8_simd.cpp: prepare_pair, key_block_2bit_pair); it must equal the
  // per-block calls exactly over many pairs (and an odd block after them), with queries that are
  // zero on one block's channels or all through (no step), params of different magnitudes per
  // block, and blocks of one to three 32-row passes.
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int bits = 2;
  for (size_t hd : {size_t{64}, size_t{128}}) {
    for (size_t rows : {size_t{32}, size_t{40}, size_t{96}}) {
      for (size_t n_blocks : {size_t{2}, size_t{9}, size_t{16}}) {
        const size_t n_q = 8;
        const size_t block_bytes = rows / 8 * hd * kivi_word_bytes(bits);
        std::vector<uint8_t> words(n_blocks * block_bytes);
        for (auto& b : words) b = static_cast<uint8_t>(rng());
        std::vector<fp16_t> params(n_blocks * 2 * hd);
        for (size_t k = 0; k < n_blocks; ++k) {
          const float mag = std::ldexp(1.0f, static_cast<int>(k % 7) - 3);
          for (size_t c = 0; c < 2 * hd; ++c) {
            const float v = c < hd ? std::fabs(u(rng)) * mag : u(rng) * mag;
            params[k * 2 * hd + c] = fp32_to_fp16(v);
          }
        }
        std::vector<float> q(n_q * hd);
        for (float& v : q) v = u(rng);
        for (size_t c = 0; c < hd; ++c) q[2 * hd + c] = 0.0f;  // query 2: no step
        for (size_t c = hd / 2; c < hd; ++c) q[5 * hd + c] = 0.0f;
        q[6 * hd + 3] *= 1000.0f;  // an outlier channel
        const size_t stride = n_blocks * rows + 5;
        std::vector<float> a(n_q * stride, kSentinel), b(n_q * stride, kSentinel);
        kivi_key_blocks_dot_f16(a.data(), stride, q.data(), n_q, params.data(), words.data(),
                                n_blocks, rows, hd, bits);
        for (size_t k = 0; k < n_blocks; ++k) {
          kivi_key_block_dot_f16(b.data() + k * rows, stride, q.data(), n_q,
                                 params.data() + k * 2 * hd, words.data() + k * block_bytes, rows,
                                 hd, bits);
        }
        for (size_t i = 0; i < a.size(); ++i) {
          ASSERT_EQ(a[i], b[i]) << "hd " << hd << " rows " << rows << " blocks " << n_blocks
                                << " at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace snapkv
