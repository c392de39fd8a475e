// Quantized-activation kernels (src/kernels/q8_dot.h, gemm.h GemmPrecision::q8):
//  - each fast integer kernel equals its scalar reference bit for bit, on encoded random weights
//  and
//    on blocks of random bytes (every code and scale value reachable, extremes included);
//  - the activation quantizers keep each element within the documented bound;
//  - the reference is within a derived bound of the exact (double) product of the dequantized
//    weights with the unquantized activations: sum_i |w_i| e_i (e_i the activation rounding bound
//    of element i) + gamma_k * sum_i |w_i| |a_i| (the fp32 operations after the integer sums);
//  - zeros, all-equal, tiny and huge activation blocks; NaN propagates;
//  - the register-tiled prefill kernels equal the per-pair reference dots at every tile edge;
//  - gemv / matmul under q8 use exactly these kernels, and keep the f32 path for Q2_K / Q3_K.
#include "ops/gemm_internal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "snapkv/gguf/quant.h"
#include "snapkv/ops/gemm.h"
#include "snapkv/util/parallel.h"

namespace snapkv {
namespace {

using namespace ops_internal;  // NOLINT: the kernels under test

constexpr double kU = std::numeric_limits<float>::epsilon() / 2.0;  // unit roundoff 2^-24

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> encode(WeightType type, const std::vector<float>& m, size_t rows,
                            size_t cols) {
  const size_t rb = weight_row_bytes(type, cols);
  std::vector<uint8_t> bytes(rows * rb);
  const auto gt = gguf::tensor_type_from_name(to_string(type));
  if (!gt) throw std::logic_error("no gguf encoder for this weight type");
  for (size_t r = 0; r < rows; ++r)
    gguf::quantize_row(bytes.data() + r * rb, m.data() + r * cols, *gt, cols);
  return bytes;
}

// Random bytes for every field, then each fp16 scale replaced by a finite random one (the byte
// offsets of the fp16 fields per block type).
std::vector<uint8_t> random_blocks(WeightType type, size_t rows, size_t cols, uint32_t seed) {
  const size_t rb = weight_row_bytes(type, cols);
  std::vector<uint8_t> bytes(rows * rb);
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<size_t> fp16_offsets;
  size_t block = 0;
  switch (type) {
    case WeightType::q8_0:
      fp16_offsets = {0};
      block = sizeof(BlockQ8_0);
      break;
    case WeightType::q4_0:
      fp16_offsets = {0};
      block = sizeof(BlockQ4_0);
      break;
    case WeightType::q4_K:
      fp16_offsets = {0, 2};
      block = sizeof(BlockQ4_K);
      break;
    case WeightType::q5_K:
      fp16_offsets = {0, 2};
      block = sizeof(BlockQ5_K);
      break;
    case WeightType::q6_K:
      fp16_offsets = {offsetof(BlockQ6_K, d)};
      block = sizeof(BlockQ6_K);
      break;
    default:
      throw std::logic_error("random_blocks: not a q8 weight type");
  }
  std::uniform_real_distribution<float> scale(-0.01f, 0.01f);
  for (size_t off = 0; off < bytes.size(); off += block) {
    for (size_t f : fp16_offsets) {
      const fp16_t h = fp32_to_fp16(scale(rng));
      std::memcpy(bytes.data() + off + f, &h, sizeof h);
    }
  }
  return bytes;
}

bool uses_q8_k(WeightType type) {
  return type == WeightType::q4_K || type == WeightType::q5_K || type == WeightType::q6_K;
}

size_t act_block(WeightType type) {
  return uses_q8_k(type) ? kQK_K : kQ8BlockSize;
}

// Quantized activations of x and the per-element bound e_i of |x_i - a_i| with a_i their values.
struct Act {
  std::vector<BlockQ8_0> q8_0;
  std::vector<BlockQ8_K> q8_k;
  std::vector<double> value, bound;
};

// Largest |x[j]| over the block of `block` elements holding element i.
float amax_of(const std::vector<float>& x, size_t i, size_t block) {
  float amax = 0.0f;
  for (size_t j = i / block * block; j < i / block * block + block; ++j) {
    amax = std::max(amax, std::fabs(x[j]));
  }
  return amax;
}

Act quantize(WeightType type, const std::vector<float>& x) {
  const size_t n = x.size();
  Act a;
  a.value.resize(n);
  a.bound.resize(n);
  if (uses_q8_k(type)) {
    a.q8_k.resize(n / kQK_K);
    quantize_act_q8_K(a.q8_k.data(), x.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const BlockQ8_K& b = a.q8_k[i / kQK_K];
      a.value[i] = static_cast<double>(b.d) * b.qs[i % kQK_K];
      a.bound[i] = std::fabs(static_cast<double>(b.d)) * (0.5 + 300.0 * kU);
      if (b.d == 0.0f) a.bound[i] = amax_of(x, i, kQK_K);  // zero or below 127 / FLT_MAX
    }
  } else {
    a.q8_0.resize(n / kQ8BlockSize);
    quantize_act_q8_0(a.q8_0.data(), x.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const BlockQ8_0& b = a.q8_0[i / kQ8BlockSize];
      const double d = amax_of(x, i, kQ8BlockSize) / 127.0f, stored = fp16_to_fp32(b.d);
      a.value[i] = stored * b.qs[i % kQ8BlockSize];
      a.bound[i] = d * (0.5 + 300.0 * kU) + 127.0 * std::fabs(stored - d);
    }
  }
  return a;
}

// Fast and reference kernel for row r of w.
void dots(const WeightMatrix& w, size_t r, const Act& a, float& fast, float& ref) {
  const void* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
  const size_t n = w.cols;
  switch (w.type) {
    case WeightType::q8_0:
      fast = dot_q8_0_q8_0(static_cast<const BlockQ8_0*>(row), a.q8_0.data(), n);
      ref = dot_q8_0_q8_0_ref(static_cast<const BlockQ8_0*>(row), a.q8_0.data(), n);
      return;
    case WeightType::q4_0:
      fast = dot_q4_0_q8_0(static_cast<const BlockQ4_0*>(row), a.q8_0.data(), n);
      ref = dot_q4_0_q8_0_ref(static_cast<const BlockQ4_0*>(row), a.q8_0.data(), n);
      return;
    case WeightType::q4_K:
      fast = dot_q4_K_q8_K(static_cast<const BlockQ4_K*>(row), a.q8_k.data(), n);
      ref = dot_q4_K_q8_K_ref(static_cast<const BlockQ4_K*>(row), a.q8_k.data(), n);
      return;
    case WeightType::q5_K:
      fast = dot_q5_K_q8_K(static_cast<const BlockQ5_K*>(row), a.q8_k.data(), n);
      ref = dot_q5_K_q8_K_ref(static_cast<const BlockQ5_K*>(row), a.q8_k.data(), n);
      return;
    case WeightType::q6_K:
      fast = dot_q6_K_q8_K(static_cast<const BlockQ6_K*>(row), a.q8_k.data(), n);
      ref = dot_q6_K_q8_K_ref(static_cast<const BlockQ6_K*>(row), a.q8_k.data(), n);
      return;
    default:
      throw std::logic_error("dots: not a q8 weight type");
  }
}

// Largest |dmin * m| of a block (Q4_K / Q5_K: m <= 63), as a bound on the terms that cancel.
double min_term_bound(const WeightMatrix& w, size_t r, size_t i) {
  if (w.type != WeightType::q4_K && w.type != WeightType::q5_K) return 0.0;
  const uint8_t* block = static_cast<const uint8_t*>(w.data) + r * w.row_bytes() +
                         (i / kQK_K) * weight_row_bytes(w.type, kQK_K);
  fp16_t dmin;
  std::memcpy(&dmin, block + 2, sizeof dmin);
  return 63.0 * std::fabs(fp16_to_fp32(dmin));
}

// Checks every row of w against x: fast == reference bit for bit, and the reference within the
// derived bound of the exact product. Returns the largest error / bound ratio seen.
double check_rows(const WeightMatrix& w, const std::vector<float>& x) {
  const Act a = quantize(w.type, x);
  std::vector<float> deq(w.rows * w.cols);
  dequantize_rows_ref(deq.data(), w, 0, w.rows);
  const size_t n_blocks = w.cols / weight_block_size(w.type);
  // fp32 operations after the exact integer sums: one fma per block and lane (Q8_0 / Q4_0: n_blocks
  // in a lane, 3 more in the lane sum) or two per super-block (K-quants), the rounding of the
  // scale product and of the int -> float conversions, the decoded weight's own rounding.
  const double k = uses_q8_k(w.type) ? 2.0 * static_cast<double>(n_blocks) + 8
                                     : static_cast<double>(n_blocks) + 8;
  const double gamma = k * kU / (1.0 - k * kU);
  double worst = 0.0;
  for (size_t r = 0; r < w.rows; ++r) {
    float fast = 0.0f, ref = 0.0f;
    dots(w, r, a, fast, ref);
    EXPECT_EQ(0, std::memcmp(&fast, &ref, sizeof fast))
        << to_string(w.type) << " row " << r << ": fast " << fast << " reference " << ref;
    double exact = 0.0, quant_bound = 0.0, magnitude = 0.0;
    for (size_t i = 0; i < w.cols; ++i) {
      const double wi = deq[r * w.cols + i];
      exact += wi * x[i];
      quant_bound += std::fabs(wi) * a.bound[i];
      magnitude += (std::fabs(wi) + 2.0 * min_term_bound(w, r, i)) * std::fabs(a.value[i]);
    }
    const double bound = quant_bound + gamma * magnitude;
    const double err = std::fabs(static_cast<double>(ref) - exact);
    EXPECT_LE(err, bound) << to_string(w.type) << " row " << r;
    if (bound > 0.0) worst = std::max(worst, err / bound);
  }
  return worst;
}

class Q8DotTest : public ::testing::TestWithParam<WeightType> {};

TEST_P(Q8DotTest, FastEqualsReferenceAndReferenceWithinDerivedBound) {
  const WeightType type = GetParam();
  const size_t rows = 24, cols = 1024;
  const auto m = random_vec(rows * cols, 21, 0.05f);
  const auto enc = encode(type, m, rows, cols);
  const auto raw = random_blocks(type, rows, cols, 22);
  double worst = 0.0;
  for (const auto* bytes : {&enc, &raw}) {
    const WeightMatrix w{type, bytes->data(), rows, cols};
    worst = std::max(worst, check_rows(w, random_vec(cols, 23)));
    // heavy tails: a few large activations per block
    auto x = random_vec(cols, 24);
    for (size_t i = 0; i < cols; i += 37) x[i] *= 50.0f;
    worst = std::max(worst, check_rows(w, x));
  }
  // The bound is a worst case: rounding errors of random data partly cancel.
  RecordProperty("worst_err_over_bound", std::to_string(worst));
  EXPECT_GT(worst, 0.0);
}

TEST_P(Q8DotTest, AdversarialActivations) {
  const WeightType type = GetParam();
  const size_t rows = 4, cols = 512, blk = act_block(type);
  const auto raw = random_blocks(type, rows, cols, 31);
  const WeightMatrix w{type, raw.data(), rows, cols};
  std::vector<float> x(cols);
  // all zero: exactly 0
  check_rows(w, x);
  const Act zero = quantize(type, x);
  for (size_t r = 0; r < rows; ++r) {
    float fast, ref;
    dots(w, r, zero, fast, ref);
    EXPECT_EQ(fast, 0.0f);
  }
  // all equal, alternating signs, one spike per block, tiny (fp16 scale underflows for Q8_0)
  for (float v : {1.0f, -3.5f}) {
    std::fill(x.begin(), x.end(), v);
    check_rows(w, x);
  }
  for (size_t i = 0; i < cols; ++i) x[i] = (i % 2 == 0 ? 1.0f : -1.0f) * static_cast<float>(i % 7);
  check_rows(w, x);
  x = random_vec(cols, 32, 1e-3f);
  for (size_t i = 0; i < cols; i += blk) x[i] = 1e4f;
  check_rows(w, x);
  check_rows(w, random_vec(cols, 33, 1e-9f));
  check_rows(w, random_vec(cols, 34, 1e-30f));
  check_rows(w, random_vec(cols, 37, 1e-38f));  // 1 / d overflows: stored as zero
  check_rows(w, random_vec(cols, 38, 1e-43f));  // subnormal activations
  // huge: Q8_K (fp32 scale) stays within its bound; Q8_0's fp16 scale overflows above
  // 127 * 65504, documented as a non-finite result.
  const auto huge = random_vec(cols, 35, 1e30f);
  if (uses_q8_k(type)) {
    check_rows(w, huge);
  } else {
    const Act a = quantize(type, huge);
    float fast, ref;
    dots(w, 0, a, fast, ref);
    EXPECT_FALSE(std::isfinite(fast));
  }
  // NaN or infinity in a block: the result is NaN.
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    x = random_vec(cols, 36);
    x[blk + 3] = bad;
    const Act a = quantize(type, x);
    float fast, ref;
    dots(w, 1, a, fast, ref);
    EXPECT_TRUE(std::isnan(fast));
    EXPECT_TRUE(std::isnan(ref));
  }
}

TEST_P(Q8DotTest, GemvAndMatmulUseTheKernels) {
  const WeightType type = GetParam();
  const size_t rows = 70, cols = 512, n_tokens = 21;
  const auto m = random_vec(rows * cols, 41, 0.05f);
  const auto bytes = encode(type, m, rows, cols);
  const WeightMatrix w{type, bytes.data(), rows, cols};
  const auto x = random_vec(n_tokens * cols, 42);
  std::vector<float> mm(n_tokens * rows), gv(rows);
  matmul(mm.data(), x.data(), w, n_tokens, GemmPrecision::q8);
  const int saved = num_threads();
  for (int threads : {1, 3}) {
    set_num_threads(threads);
    for (size_t t = 0; t < n_tokens; ++t) {
      const std::vector<float> xt(x.begin() + static_cast<long>(t * cols),
                                  x.begin() + static_cast<long>((t + 1) * cols));
      gemv(gv.data(), xt.data(), w, GemmPrecision::q8);
      const Act a = quantize(type, xt);
      for (size_t r = 0; r < rows; ++r) {
        float fast, ref;
        dots(w, r, a, fast, ref);
        ASSERT_EQ(0, std::memcmp(&gv[r], &fast, sizeof fast)) << "t " << t << " r " << r;
        ASSERT_EQ(0, std::memcmp(&mm[t * rows + r], &fast, sizeof fast)) << "t " << t << " r " << r;
      }
    }
  }
  set_num_threads(saved);
}

// The rows x tokens kernels (gemm_*: 8 rows x up to 8 tokens for Q8_0 / Q4_0, pair loops for the
// K-quants) against the per-pair reference dots, bit for bit, at every edge of the tiling: row and
// token counts that are not multiples of the tile (1..17 rows: one and two row groups and a
// partial one, each with the next group prefetched; 1..9 tokens, every decode batch size; 16, and
// 67 tokens, past one 64-token chunk), an output stride wider than the rows (the columns beyond
// stay untouched),
// random bytes for every weight code (-128 included) and activation codes spanning [-127, 127].
// The Q8_0 / Q4_0 tiles' own references (gemm_*_ref) are held to the same values.
template <class Block, class ABlock>
using GemmKernel = void (*)(float*, size_t, const Block*, size_t, const ABlock*, size_t, size_t);

void quantize_rows(std::vector<BlockQ8_0>& act, const std::vector<float>& x) {
  quantize_act_q8_0(act.data(), x.data(), x.size());
}
void quantize_rows(std::vector<BlockQ8_K>& act, const std::vector<float>& x) {
  quantize_act_q8_K(act.data(), x.data(), x.size());
}
void refresh_sums(BlockQ8_0&) {}
void refresh_sums(BlockQ8_K& a) {  // the block sums after a code was changed by hand
  for (size_t j = 0; j < kQK_K / 16; ++j) {
    int sum = 0;
    for (size_t i = 0; i < 16; ++i) sum += a.qs[16 * j + i];
    a.bsums[j] = static_cast<int16_t>(sum);
  }
}

template <class Block, class ABlock>
void check_tiles(WeightType type, GemmKernel<Block, ABlock> fast, GemmKernel<Block, ABlock> ref,
                 float (*pair_ref)(const Block*, const ABlock*, size_t)) {
  const size_t block = act_block(type), cols = 3 * block, max_rows = 17, max_tokens = 67;
  const size_t nb = cols / block;
  const auto bytes = random_blocks(type, max_rows, cols, 61);
  const auto* w = reinterpret_cast<const Block*>(bytes.data());
  std::vector<ABlock> act(max_tokens * nb);
  quantize_rows(act, random_vec(max_tokens * cols, 62));
  for (size_t b = 0; b < nb; ++b) {  // the extremes of the codes
    act[b].qs[0] = -127;
    act[b].qs[1] = 127;
    refresh_sums(act[b]);
  }
  const float sentinel = 12345.0f;
  for (size_t rows = 1; rows <= max_rows; ++rows) {
    for (size_t tokens : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{5}, size_t{6},
                          size_t{7}, size_t{8}, size_t{9}, size_t{16}, max_tokens}) {
      const size_t ldo = rows + 3;
      std::vector<float> got(tokens * ldo, sentinel), want(tokens * ldo, sentinel);
      fast(got.data(), ldo, w, rows, act.data(), tokens, cols);
      if (ref != nullptr) ref(want.data(), ldo, w, rows, act.data(), tokens, cols);
      for (size_t t = 0; t < tokens; ++t) {
        for (size_t c = 0; c < ldo; ++c) {
          const float expect =
              c < rows ? pair_ref(w + c * nb, act.data() + t * nb, cols) : sentinel;
          ASSERT_EQ(0, std::memcmp(&got[t * ldo + c], &expect, sizeof expect))
              << "fast rows " << rows << " tokens " << tokens << " t " << t << " c " << c;
          if (ref == nullptr) continue;
          ASSERT_EQ(0, std::memcmp(&want[t * ldo + c], &expect, sizeof expect))
              << "ref rows " << rows << " tokens " << tokens << " t " << t << " c " << c;
        }
      }
    }
  }
}

TEST(Q8Tile, TilesEqualThePairDotsAtEveryShape) {
  check_tiles<BlockQ8_0, BlockQ8_0>(WeightType::q8_0, gemm_q8_0_q8_0, gemm_q8_0_q8_0_ref,
                                    dot_q8_0_q8_0_ref);
  check_tiles<BlockQ4_0, BlockQ8_0>(WeightType::q4_0, gemm_q4_0_q8_0, gemm_q4_0_q8_0_ref,
                                    dot_q4_0_q8_0_ref);
  check_tiles<BlockQ4_K, BlockQ8_K>(WeightType::q4_K, gemm_q4_K_q8_K, nullptr, dot_q4_K_q8_K_ref);
  check_tiles<BlockQ5_K, BlockQ8_K>(WeightType::q5_K, gemm_q5_K_q8_K, nullptr, dot_q5_K_q8_K_ref);
  check_tiles<BlockQ6_K, BlockQ8_K>(WeightType::q6_K, gemm_q6_K_q8_K, nullptr, dot_q6_K_q8_K_ref);
}

// The documented float order of the Q8_0 / Q4_0 dots (q8_dot.h), written out here: per block the
// integer dot of the 32 codes, then one fma into a single running sum, block after block. The
// reference, the one-row kernel and the multi-row kernel at the active level all give its bits
// (a decode batch gives every stream the bits it gets alone).
int32_t block_codes_dot(const BlockQ8_0& w, const BlockQ8_0& a) {
  int32_t s = 0;
  for (size_t e = 0; e < kQ8BlockSize; ++e) s += w.qs[e] * a.qs[e];
  return s;
}
int32_t block_codes_dot(const BlockQ4_0& w, const BlockQ8_0& a) {
  int32_t s = 0;
  for (size_t e = 0; e < kQ8BlockSize; ++e) {
    const int nibble = e < 16 ? (w.qs[e] & 0x0F) : (w.qs[e - 16] >> 4);
    s += (nibble - 8) * a.qs[e];
  }
  return s;
}

template <class Block>
void check_block_order(WeightType type, float (*fast)(const Block*, const BlockQ8_0*, size_t),
                       float (*ref)(const Block*, const BlockQ8_0*, size_t),
                       GemmKernel<Block, BlockQ8_0> gemm) {
  const size_t rows = 8, cols = 6144, nb = cols / kQ8BlockSize, tokens = 8;
  const auto bytes = random_blocks(type, rows, cols, 71);
  const auto* w = reinterpret_cast<const Block*>(bytes.data());
  std::vector<BlockQ8_0> act(tokens * nb);
  quantize_rows(act, random_vec(tokens * cols, 72));
  std::vector<float> tile(tokens * rows);
  gemm(tile.data(), rows, w, rows, act.data(), tokens, cols);
  for (size_t t = 0; t < tokens; ++t) {
    for (size_t r = 0; r < rows; ++r) {
      float want = 0.0f;
      for (size_t b = 0; b < nb; ++b) {
        const Block& wb = w[r * nb + b];
        const BlockQ8_0& ab = act[t * nb + b];
        const float d = fp16_to_fp32(wb.d) * fp16_to_fp32(ab.d);
        want = std::fma(d, static_cast<float>(block_codes_dot(wb, ab)), want);
      }
      const float got_ref = ref(w + r * nb, act.data() + t * nb, cols);
      const float got_fast = fast(w + r * nb, act.data() + t * nb, cols);
      ASSERT_EQ(0, std::memcmp(&got_ref, &want, sizeof want)) << "ref r " << r << " t " << t;
      ASSERT_EQ(0, std::memcmp(&got_fast, &want, sizeof want)) << "fast r " << r << " t " << t;
      ASSERT_EQ(0, std::memcmp(&tile[t * rows + r], &want, sizeof want))
          << "gemm r " << r << " t " << t;
    }
  }
}

TEST(Q8Tile, Q8_0AndQ4_0FollowTheDocumentedBlockOrder) {
  check_block_order<BlockQ8_0>(WeightType::q8_0, dot_q8_0_q8_0, dot_q8_0_q8_0_ref, gemm_q8_0_q8_0);
  check_block_order<BlockQ4_0>(WeightType::q4_0, dot_q4_0_q8_0, dot_q4_0_q8_0_ref, gemm_q4_0_q8_0);
}

INSTANTIATE_TEST_SUITE_P(Types, Q8DotTest,
                         ::testing::Values(WeightType::q8_0, WeightType::q4_0, WeightType::q4_K,
                                           WeightType::q5_K, WeightType::q6_K),
                         [](const auto& param_info) {
                           return std::string(to_string(param_info.param));
                         });

TEST(Q8Act, QuantizersStayWithinBound) {
  const size_t n = 2048;
  auto x = random_vec(n, 51, 2.0f);
  for (size_t i = 0; i < n; i += 97) x[i] *= 100.0f;
  for (WeightType type : {WeightType::q8_0, WeightType::q4_K}) {
    const Act a = quantize(type, x);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(x[i] - a.value[i]), a.bound[i]) << to_string(type) << " i " << i;
    }
  }
  std::vector<BlockQ8_K> k(n / kQK_K);
  quantize_act_q8_K(k.data(), x.data(), n);
  for (const BlockQ8_K& b : k) {
    for (size_t j = 0; j < 16; ++j) {
      int sum = 0;
      for (size_t i = 0; i < 16; ++i) {
        sum += b.qs[16 * j + i];
        ASSERT_GE(b.qs[16 * j + i], -127);
      }
      EXPECT_EQ(sum, b.bsums[j]);
    }
  }
  std::vector<BlockQ8_0> q(n / kQ8BlockSize);
  quantize_act_q8_0(q.data(), x.data(), n);
  for (const BlockQ8_0& b : q) {
    for (int8_t v : b.qs) ASSERT_GE(v, -127);
  }
  EXPECT_THROW(quantize_act_q8_0(q.data(), x.data(), 33), std::invalid_argument);
  EXPECT_THROW(quantize_act_q8_K(k.data(), x.data(), 300), std::invalid_argument);
}

// The active level's Q8_0 activation quantizer against the scalar reference, byte for byte: random
// rows at several scales, ties (x * id exactly half-way), all-zero, tiny (1 / d overflows), huge
// (the fp16 scale overflows) and non-finite blocks.
TEST(Q8Act, Q8_0QuantizerEqualsReference) {
  const size_t n_blocks = 12, n = n_blocks * kQ8BlockSize;
  std::vector<float> x = random_vec(n, 81);
  for (size_t i = 0; i < kQ8BlockSize; ++i) x[i] = static_cast<float>(i) - 15.5f;  // amax 15.5
  for (size_t i = 0; i < kQ8BlockSize; ++i) x[kQ8BlockSize + i] = 0.0f;            // zero
  for (size_t i = 0; i < kQ8BlockSize; ++i) x[2 * kQ8BlockSize + i] = 1e-38f;      // tiny
  for (size_t i = 0; i < kQ8BlockSize; ++i) x[3 * kQ8BlockSize + i] *= 1e7f;       // huge
  x[4 * kQ8BlockSize + 5] = std::numeric_limits<float>::quiet_NaN();
  x[5 * kQ8BlockSize + 31] = -std::numeric_limits<float>::infinity();
  for (size_t i = 6 * kQ8BlockSize; i < 7 * kQ8BlockSize; ++i) x[i] *= 1e-3f;
  for (size_t i = 7 * kQ8BlockSize; i < 8 * kQ8BlockSize; ++i) {
    x[i] = 127.0f * static_cast<float>(static_cast<int>(i % 7) - 3) / 2.0f / 127.0f;  // ties
  }
  x[7 * kQ8BlockSize] = 1.0f;  // amax 1: d = 1 / 127, x * id lands on halves
  std::vector<BlockQ8_0> fast(n_blocks), ref(n_blocks);
  quantize_act_q8_0(fast.data(), x.data(), n);
  quantize_act_q8_0_ref(ref.data(), x.data(), n);
  for (size_t b = 0; b < n_blocks; ++b) {
    EXPECT_EQ(0, std::memcmp(&fast[b], &ref[b], sizeof(BlockQ8_0))) << "block " << b;
  }
}

TEST(Q8Act, TypesWithoutIntegerKernelKeepTheF32Path) {
  const size_t rows = 9, cols = 512;
  const auto x = random_vec(cols, 61);
  for (WeightType type : {WeightType::q2_K, WeightType::q3_K, WeightType::f16, WeightType::bf16}) {
    const auto m = random_vec(rows * cols, 62, 0.05f);
    std::vector<uint8_t> bytes(rows * weight_row_bytes(type, cols));
    const auto gt = gguf::tensor_type_from_name(to_string(type));
    ASSERT_TRUE(gt.has_value());
    for (size_t r = 0; r < rows; ++r) {
      gguf::quantize_row(bytes.data() + r * weight_row_bytes(type, cols), m.data() + r * cols, *gt,
                         cols);
    }
    const WeightMatrix w{type, bytes.data(), rows, cols};
    std::vector<float> a(rows), b(rows);
    gemv(a.data(), x.data(), w, GemmPrecision::q8);
    gemv(b.data(), x.data(), w, GemmPrecision::f32);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), rows * sizeof(float))) << to_string(type);
  }
}

TEST(Q8Act, PrecisionSwitch) {
  const GemmPrecision gv = gemv_precision(), mm = matmul_precision();
  set_gemm_precision(GemmPrecision::f32);
  EXPECT_EQ(gemv_precision(), GemmPrecision::f32);
  EXPECT_EQ(matmul_precision(), GemmPrecision::f32);
  set_gemm_precision(GemmPrecision::q8);
  EXPECT_EQ(matmul_precision(), GemmPrecision::q8);
  EXPECT_STREQ(to_string(GemmPrecision::q8), "q8");
  EXPECT_NE(std::string(q8_dot_isa()), "");
  set_gemm_precision(gv, mm);
  EXPECT_EQ(gemv_precision(), gv);
  EXPECT_EQ(matmul_precision(), mm);
}

// `fastest` (the matmul default): q8 for gemv and for Q8_0 / Q4_0 products of several tokens, f32
// for the K-quants' multi-token products and for types without integer kernels; the products it
// runs are those of the precision it names, bit for bit.
TEST(Q8Act, FastestResolvesPerType) {
  EXPECT_EQ(kDefaultMatmulPrecision, GemmPrecision::fastest);
  EXPECT_STREQ(to_string(GemmPrecision::fastest), "fastest");
  for (WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
    EXPECT_EQ(resolve_precision(GemmPrecision::fastest, type, 1), GemmPrecision::q8);
    EXPECT_EQ(resolve_precision(GemmPrecision::fastest, type, 512), GemmPrecision::q8);
  }
  for (WeightType type : {WeightType::q4_K, WeightType::q6_K, WeightType::f16}) {
    EXPECT_EQ(resolve_precision(GemmPrecision::fastest, type, 1), GemmPrecision::q8);
    EXPECT_EQ(resolve_precision(GemmPrecision::fastest, type, kGemmMinTokens), GemmPrecision::f32);
  }
  EXPECT_EQ(resolve_precision(GemmPrecision::f32, WeightType::q8_0, 512), GemmPrecision::f32);
  EXPECT_EQ(resolve_precision(GemmPrecision::q8, WeightType::q4_K, 512), GemmPrecision::q8);
  const size_t rows = 40, cols = 512, n_tokens = 9;
  const auto x = random_vec(n_tokens * cols, 71);
  for (WeightType type : {WeightType::q8_0, WeightType::q4_K}) {
    const auto bytes = encode(type, random_vec(rows * cols, 72, 0.05f), rows, cols);
    const WeightMatrix w{type, bytes.data(), rows, cols};
    std::vector<float> fastest(n_tokens * rows), named(n_tokens * rows);
    matmul(fastest.data(), x.data(), w, n_tokens, GemmPrecision::fastest);
    matmul(named.data(), x.data(), w, n_tokens, resolve_precision(GemmPrecision::fastest, type, 9));
    EXPECT_EQ(0, std::memcmp(fastest.data(), named.data(), fastest.size() * sizeof(float)))
        << to_string(type);
  }
}

}  // namespace
}  // namespace snapkv
