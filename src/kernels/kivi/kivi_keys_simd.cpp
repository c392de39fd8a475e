// The float KIVI key kernels (kivi_kernels.h: kivi_key_block_dot), compiled once per ISA level
// (kivi_simd.h). A key block stores 8 rows of one channel per word; out(8 rows) += (q_c * scale_c)
// * codes, no horizontal sums; the zero term sum_c q_c * zero_c is added once per row. Levels with
// AVX-512 VNNI take the integer kernels of kivi_q8_simd.cpp first. The kernels are written on F8
// (kernels/vec.h: one octet per vector; at the NEON levels a pair of 4-lane registers), the
// AVX-512 level adds a 16-row form.
#include "kernels/kivi/kivi_simd.h"

namespace snapkv::SNAPKV_ISA {
namespace {

#if SNAPKV_VEC

// The q * zero partial sums: 8 lanes summed in order (x86), 4 lanes by pairwise adds (NEON).
#if SNAPKV_VEC_X86
using QPart = F8;
inline float lane_total(F8 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  float z = 0.0f;
  for (float x : lanes) z += x;
  return z;
}
#else
using QPart = F4;
inline float lane_total(F4 v) {
  return vaddvq_f32(v);
}
#endif

// Writes the 8 row results of one octet (rows past n_rows are dropped): dst[0..valid) = acc + qz.
[[maybe_unused]] inline void store_octet(float* dst, const F8& acc, float qz, size_t valid) {
  const F8 v = add(acc, set1<F8>(qz));
  if (valid == kKiviOctet) {
    store(dst, v);
  } else {
    alignas(32) float tmp[kKiviOctet];
    store(tmp, v);
    std::copy_n(tmp, valid, dst);
  }
}

// The same for two inputs sharing each query's coefficient (two octets of a key block).
template <int NQ>
inline void fma_bcast2(F8 (&p)[NQ], F8 (&r)[NQ], const float* coef, size_t stride, F8 x0, F8 x1) {
  unroll<NQ>([&](auto j) {
    const F8 b = bcast<F8>(coef + j * stride);
    p[j] = fma(b, x0, p[j]);
    r[j] = fma(b, x1, r[j]);
  });
}

// NQ queries (<= 4) against every octet of a key block; qs: [NQ][qs_stride] = q * scale,
// qz: [NQ] = sum_c q * zero.
template <int NQ, int Bits>
void key_block_dot_nq(float* out, size_t out_stride, const float* qs, size_t qs_stride,
                      const float* qz, const uint8_t* words, size_t n_rows, size_t head_dim) {
  const size_t n_oct = ceil_div(n_rows, kKiviOctet);
  size_t oct = 0;
  for (; oct + 2 <= n_oct; oct += 2) {  // two octets at a time: 2 * NQ independent FMA chains
    F8 acc0[NQ] = {}, acc1[NQ] = {};
    const uint8_t* w0 = words + oct * head_dim * Bits;
    const uint8_t* w1 = w0 + head_dim * Bits;
    for (size_t c = 0; c < head_dim; ++c) {
      const F8 x0 = unpack8<Bits>(load_word<Bits>(w0, c));
      const F8 x1 = unpack8<Bits>(load_word<Bits>(w1, c));
      fma_bcast2<NQ>(acc0, acc1, qs + c, qs_stride, x0, x1);
    }
    unroll<NQ>([&](auto j) {
      float* dst = out + j * out_stride + oct * kKiviOctet;
      store_octet(dst, acc0[j], qz[j], kKiviOctet);
      store_octet(dst + kKiviOctet, acc1[j], qz[j],
                  std::min(kKiviOctet, n_rows - (oct + 1) * kKiviOctet));
    });
  }
  if (oct < n_oct) {
    F8 acc[NQ] = {};
    const uint8_t* w0 = words + oct * head_dim * Bits;
    for (size_t c = 0; c < head_dim; ++c) {
      fma_bcast<NQ>(acc, qs + c, qs_stride, unpack8<Bits>(load_word<Bits>(w0, c)));
    }
    unroll<NQ>([&](auto j) {
      store_octet(out + j * out_stride + oct * kKiviOctet, acc[j], qz[j],
                  n_rows - oct * kKiviOctet);
    });
  }
}

#if SNAPKV_VEC_AVX512

// The codes of rows 16p .. 16p+15 of channel c in a key block (two octets; the second one past
// the block's last octet reads as 0).
template <int Bits>
inline uint64_t key_pair_word(const uint8_t* words, size_t pair, size_t n_oct, size_t c,
                              size_t head_dim) {
  const uint8_t* w0 = words + (2 * pair) * head_dim * Bits;
  const uint64_t lo = load_word<Bits>(w0, c);
  const uint64_t hi = 2 * pair + 1 < n_oct ? load_word<Bits>(w0 + head_dim * Bits, c) : 0;
  return lo | (hi << (8 * Bits));
}

// NQ queries (<= 4) against a key block, 16 rows (two octets) per vector, two vectors (32 rows, a
// whole block of G = 32) per pass; qs, qz as in key_block_dot_nq.
template <int NQ, int Bits>
void key_block_dot16_nq(float* out, size_t out_stride, const float* qs, size_t qs_stride,
                        const float* qz, const uint8_t* words, size_t n_rows, size_t head_dim) {
  const size_t n_oct = ceil_div(n_rows, kKiviOctet);
  const size_t n_pairs = ceil_div(n_oct, 2);
  auto store_pair = [&](const F16(&acc)[NQ], size_t pair) {
    const size_t row0 = pair * 16;
    const size_t valid = std::min<size_t>(16, n_rows - row0);
    const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
    unroll<NQ>([&](auto j) {
      const F16 v = add(acc[j], set1<F16>(qz[j]));
      _mm512_mask_storeu_ps(out + j * out_stride + row0, mask, v);
    });
  };
  size_t p = 0;
  for (; p + 2 <= n_pairs; p += 2) {
    F16 acc0[NQ] = {}, acc1[NQ] = {};
    for (size_t c = 0; c < head_dim; ++c) {
      const F16 x0 = unpack16<Bits>(key_pair_word<Bits>(words, p, n_oct, c, head_dim));
      const F16 x1 = unpack16<Bits>(key_pair_word<Bits>(words, p + 1, n_oct, c, head_dim));
      fma_bcast<NQ>(acc0, qs + c, qs_stride, x0);
      fma_bcast<NQ>(acc1, qs + c, qs_stride, x1);
    }
    store_pair(acc0, p);
    store_pair(acc1, p + 1);
  }
  if (p < n_pairs) {
    F16 acc0[NQ] = {};
    for (size_t c = 0; c < head_dim; ++c) {
      fma_bcast<NQ>(acc0, qs + c, qs_stride,
                    unpack16<Bits>(key_pair_word<Bits>(words, p, n_oct, c, head_dim)));
    }
    store_pair(acc0, p);
  }
}

#endif  // SNAPKV_VEC_AVX512

#endif  // SNAPKV_VEC

}  // namespace

void kivi_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                        const float* scales, const float* zeros, const uint8_t* words,
                        size_t n_rows, size_t head_dim, int bits, float* scratch) {
  if (kivi_key_block_dot_q8(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, bits,
                            scratch)) {
    return;  // integer dot products (kivi_q8_simd.cpp)
  }
#if SNAPKV_VEC
  // qs[j][c] = q[j][c] * scale[c]; qz[j] = sum_c q[j][c] * zero[c] (partial sums per lane, then
  // their total)
  float* qs = scratch;
  float* qz = scratch + n_q * head_dim;
  constexpr size_t kPart = sizeof(QPart) / sizeof(float);
  for (size_t j = 0; j < n_q; ++j) {
    const float* qj = q + j * head_dim;
    QPart zp = zero<QPart>();
    size_t c = 0;
    for (; c + kPart <= head_dim; c += kPart) {
      const QPart qv = load<QPart>(qj + c);
      store(qs + j * head_dim + c, mul(qv, load<QPart>(scales + c)));
      zp = fma(qv, load<QPart>(zeros + c), zp);
    }
    float z = lane_total(zp);
    for (; c < head_dim; ++c) {
      qs[j * head_dim + c] = qj[c] * scales[c];
      z += qj[c] * zeros[c];
    }
    qz[j] = z;
  }
  for (size_t j0 = 0; j0 < n_q; j0 += 4) {
    const int nq = static_cast<int>(std::min<size_t>(4, n_q - j0));
    float* o = out + j0 * out_stride;
    const float* s = qs + j0 * head_dim;
    with_nq_bits(nq, bits, [&](auto n, auto b) {
      constexpr int kNq = decltype(n)::value, kBits = decltype(b)::value;
#if SNAPKV_VEC_AVX512
      key_block_dot16_nq<kNq, kBits>(o, out_stride, s, head_dim, qz + j0, words, n_rows, head_dim);
#else
      key_block_dot_nq<kNq, kBits>(o, out_stride, s, head_dim, qz + j0, words, n_rows, head_dim);
#endif
    });
  }
#else
  (void)scratch;
  kivi_key_block_dot_scalar(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim, bits);
#endif
}

}  // namespace snapkv::SNAPKV_ISA
