// KIVI attention kernels: dot products of queries with packed key blocks and weighted sums of
// packed value rows, decoding codes inside the loops (never a dequantized copy of the cache).
// Layouts are those of include/snapkv/kv/codecs/kivi.h. Each fast kernel (AVX2+FMA at the avx2 ISA
// level and up, snapkv/util/cpu.h; kivi_keys_simd.cpp, kivi_values_simd.cpp) has a *_scalar twin
// that decodes element by element with kivi_decode; tests hold the fast ones to the twins. Internal
// (the KIVI stores of kv/codecs/kivi use them).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/isa_tables.h"
#include "snapkv/kernels/kivi_layout.h"

namespace snapkv {

// One key block of n_rows rows (1..), per-channel params already in fp32:
//   out[j * out_stride + r] = sum_c q[j][c] * (scales[c] * code(r, c) + zeros[c])
//   out: [n_q][out_stride] (rows r < n_rows written), q: [n_q][head_dim],
//   scales, zeros: [head_dim], words: [ceil(n_rows/8)][head_dim] code words.
void kivi_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                        const float* scales, const float* zeros, const uint8_t* words,
                        size_t n_rows, size_t head_dim, int bits);
void kivi_key_block_dot_scalar(float* out, size_t out_stride, const float* q, size_t n_q,
                               const float* scales, const float* zeros, const uint8_t* words,
                               size_t n_rows, size_t head_dim, int bits);

// The integer form of kivi_key_block_dot (the reference of the AVX-512 VNNI kernel,
// kivi_q8_simd.cpp): per query j, q'_c = q_c * scales[c] becomes int8 vectors with
//   mx = max_c |q'_c|, step = mx / 127, step2 = step / 254 (all 0 when mx is 0),
//   hi_c = rne(q'_c * (127 / mx)),  lo_c = rne(fma(-step, hi_c, q'_c) * (254 / step))
// (rne: round to nearest even, saturated to [-127, 127]; lo = 0 when step < 2^-100) and
//   4-bit (two parts): out[j * out_stride + r] = fma(step2, float(L_r), fma(step, float(H_r), qz))
//   2-bit (one part):  out[j * out_stride + r] = fma(step, float(H_r), qz)
// with qz = sum_c q_c zeros[c], H_r = sum_c hi_c code(r, c), L_r = sum_c lo_c code(r, c) exact.
// With unit = step2 (4-bit) or step (2-bit) (kivi_key_q8_unit), its distance from the float
// form is at most
//   unit / 2 * (1 + 2^-10) * sum_c code(r, c) + the float rounding of both forms,
// since |step hi_c + step2 lo_c - q'_c| <= step2 / 2 and |step hi_c - q'_c| <= step / 2 up to the
// roundings of the operands.
// Why one part suffices for 2-bit codes: the codec itself moves a logit by
// sum_c q'_c (code_c - x_c / s_c), each term's rounding uniform in [-1/2, 1/2], so its RMS is
// ||q'||_2 / sqrt(12) >= mx / sqrt(12) = 0.289 mx. The int8 rounding of q' adds
// sum_c (step hi_c - q'_c) code_c: terms within +-step / 2, RMS (step / sqrt(12)) * sqrt(sum_c
// code^2) <= 0.289 (mx / 127) * 3 sqrt(head_dim) (every code 3): 0.077 mx at head_dim 128, 0.046
// mx for uniform codes (mean code^2 3.5). So it adds at most (0.077 / 0.289)^2 = 7% of the
// codec's own error variance (2.5% for uniform codes) even when one channel dominates q'. For
// 4-bit codes (code^2 up to 225, mean 77.5 uniform) the same ratio reaches 60%: they keep the
// second part (about 15 bits: a single int8 vector moves a logit by up to 5% on keys with outlier
// channels).
void kivi_key_block_dot_q8_scalar(float* out, size_t out_stride, const float* q, size_t n_q,
                                  const float* scales, const float* zeros, const uint8_t* words,
                                  size_t n_rows, size_t head_dim, int bits);
// unit above for one query q: [head_dim] and the width (2 or 4).
float kivi_key_q8_unit(const float* q, const float* scales, size_t head_dim, int bits);
// True when kivi_key_block_dot runs the integer form at the active ISA level for this shape.
bool kivi_key_dot_uses_q8(size_t head_dim, int bits);
// kivi_key_block_dot on a block's params as stored, params: [2][head_dim] fp16 (scales, then
// zeros): where the integer form runs (kivi_key_dot_uses_q8) its query preparation reads them
// directly (fp16 -> fp32 is exact, so the result is the same), else they are converted first.
void kivi_key_block_dot_f16(float* out, size_t out_stride, const float* q, size_t n_q,
                            const fp16_t* params, const uint8_t* words, size_t n_rows,
                            size_t head_dim, int bits);

// kivi_key_block_dot_f16 on n_blocks consecutive blocks of block_rows rows each (a multiple of
// 8): params: [n_blocks][2][head_dim] fp16, words: [n_blocks][block_rows / 8][head_dim] code
// words, out rows b * block_rows + r (r < block_rows) for block b. The same results as the
// per-block calls, with one dispatch and scratch set-up for the run (kivi_q8_simd.cpp).
void kivi_key_blocks_dot_f16(float* out, size_t out_stride, const float* q, size_t n_q,
                             const fp16_t* params, const uint8_t* words, size_t n_blocks,
                             size_t block_rows, size_t head_dim, int bits);

// Decodes rows [row_begin, row_end) of one key block into out: [row_end - row_begin][head_dim].
void kivi_key_block_decode(float* out, const float* scales, const float* zeros,
                           const uint8_t* words, size_t row_begin, size_t row_end, size_t head_dim,
                           int bits);

// n_rows value rows, each ceil(head_dim/8) words and ceil(head_dim/group) params:
//   out[j][c] += sum_r w[j * w_stride + r] * (scale(r, g(c)) * code(r, c) + zero(r, g(c)))
//   out: [n_q][head_dim], w: [n_q][w_stride], codes: [n_rows][ceil(head_dim/8)] words,
//   params: [n_rows][ceil(head_dim/group)].
void kivi_value_rows_accumulate(float* out, const float* w, size_t w_stride, size_t n_q,
                                const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                size_t head_dim, size_t group, int bits);
void kivi_value_rows_accumulate_scalar(float* out, const float* w, size_t w_stride, size_t n_q,
                                       const uint8_t* codes, const KiviParams* params,
                                       size_t n_rows, size_t head_dim, size_t group, int bits);

// The integer form of kivi_value_rows_accumulate (the reference of the AVX-512 VNNI kernel,
// kivi_q8_values_simd.cpp, which runs it for 2-bit rows of head_dim 128 or 256 with groups of
// 16k channels, at most 4 per row), for weights w in [0, 2^64] (softmax weights; other weights
// run the float form). Per query j, tile of kKiviValueQ8Tile rows (counted from row 0 of the
// call) and group g, with u_r = w[j][r] * scale(r, g) (fp32) and mx = max_r u_r over the tile:
//   step = mx * (1 / 255), inv = 255 / mx (fp32), wq_r = rne(u_r * inv) of the exact product
//   (one rounding: fma(u_r, inv, 2^23) - 2^23), both 0 when mx < 2^-100
//   out[j][c] += sum_tiles fma(step, float(I_c), .) + sum_r w_r zero(r, g)
// with I_c = sum_r wq_r code(r, c) exact in int32; wq_r <= 255 since u_r <= mx makes
// u_r * inv <= 255 (1 + 2^-24). Its distance from the float form is at most
//   sum_tiles e_t * sum_r code(r, c) + the fp32 rounding of both forms,
// e_t = step / 2 * (1 + 2^-10) (or mx when mx < 2^-100), since |step wq_r - u_r| <= e_t.
// One u8 part (8 bits) suffices for 2-bit codes: against the codec's own error the rounding of
// the weights adds at most kKiviValueQ8Tile * 9 / 255^2 = 0.89% of its variance while the
// roundings are independent (IntegerValueFormAddsLittleToCodecError); equal u_r round alike, so
// near-uniform weights over many rows add more (docs/KERNELS.md gives the measured shares).
// 4-bit values run the int16 form below instead (kivi_value_rows_accumulate_q16_scalar).
void kivi_value_rows_accumulate_q8_scalar(float* out, const float* w, size_t w_stride, size_t n_q,
                                          const uint8_t* codes, const KiviParams* params,
                                          size_t n_rows, size_t head_dim, size_t group, int bits);
// True when kivi_value_rows_accumulate runs the integer form at the active ISA level for this
// shape (and weights in [0, 2^64]).
bool kivi_value_accumulate_uses_q8(size_t head_dim, size_t group, int bits);

// Decodes n_rows value rows into out: [n_rows][head_dim].
void kivi_value_rows_decode(float* out, const uint8_t* codes, const KiviParams* params,
                            size_t n_rows, size_t head_dim, size_t group, int bits);

// Rows per tile of the fast value kernel (the codes stay in L1 while the words are walked), and
// the fp32 scratch it needs: coefficients [tile][n_groups][4], params [tile][n_groups][2], the
// zero sums [n_q][n_groups] and those of one group of 4 queries [n_groups][4].
inline constexpr size_t kKiviValueTile = 32;
// Rows per weight step of the integer value form (kivi_value_rows_accumulate_q8_scalar).
inline constexpr size_t kKiviValueQ8Tile = 64;
constexpr size_t kivi_value_scratch_floats(size_t n_q, size_t head_dim, size_t group) {
  return ((head_dim + group - 1) / group) * (6 * kKiviValueTile + n_q + 4);
}

}  // namespace snapkv

// The fast kernels as compiled for each ISA level (kivi_keys_simd.cpp, kivi_values_simd.cpp,
// kivi_q8_simd.cpp, ...; kernels/isa.h), with a caller's scratch: key_block_dot
// [kivi_key_scratch_floats(n_q, head_dim)] floats, value_rows_accumulate
// [kivi_value_scratch_floats(n_q, head_dim, group)]. key_block_dot_q8 runs the integer form (false,
// nothing written, where the level or shape has none: key_q8_handles).
namespace snapkv {
constexpr size_t kivi_key_scratch_floats(size_t n_q, size_t head_dim) {
  // float form: qs, qz; integer form: up to 8 hd floats of operand vectors (4-bit, 4 queries)
  return (n_q * head_dim + n_q + 5 * head_dim > 8 * head_dim ? n_q * head_dim + n_q + 5 * head_dim
                                                             : 8 * head_dim) +
         16;
}
}  // namespace snapkv
#define SNAPKV_KIVI_KERNELS_DECLARE(NS)                                                          \
  namespace snapkv::NS {                                                                         \
  void kivi_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,             \
                          const float* scales, const float* zeros, const uint8_t* words,         \
                          size_t n_rows, size_t head_dim, int bits, float* scratch);             \
  bool kivi_key_block_dot_q8(float* out, size_t out_stride, const float* q, size_t n_q,          \
                             const float* scales, const float* zeros, const uint8_t* words,      \
                             size_t n_rows, size_t head_dim, int bits, float* scratch);          \
  bool kivi_key_block_dot_q8_f16(float* out, size_t out_stride, const float* q, size_t n_q,      \
                                 const fp16_t* params, const uint8_t* words, size_t n_rows,      \
                                 size_t head_dim, int bits, float* scratch);                     \
  bool kivi_key_blocks_dot_q8_f16(float* out, size_t out_stride, const float* q, size_t n_q,     \
                                  const fp16_t* params, const uint8_t* words, size_t n_blocks,   \
                                  size_t block_rows, size_t head_dim, int bits, float* scratch); \
  bool kivi_key_q8_handles(size_t head_dim, int bits);                                           \
  void kivi_value_rows_accumulate(float* out, const float* w, size_t w_stride, size_t n_q,       \
                                  const uint8_t* codes, const KiviParams* params, size_t n_rows, \
                                  size_t head_dim, size_t group, int bits, float* scratch);      \
  bool kivi_value_rows_accumulate_q8(float* out, const float* w, size_t w_stride, size_t n_q,    \
                                     const uint8_t* codes, const KiviParams* params,             \
                                     size_t n_rows, size_t head_dim, size_t group, int bits);    \
  bool kivi_value_q8_handles(size_t head_dim, size_t group, int bits);                           \
  }
SNAPKV_ISA_DECLARE(SNAPKV_KIVI_KERNELS_DECLARE)

namespace snapkv {

// ---- 4-bit value rows in integers: int16 weights, vpdpwssd (kivi_q16_values_simd.cpp) ----
//
// The integer form of kivi_value_rows_accumulate for 4-bit rows, weights w in [0, 2^100]
// (softmax weights; others run the float form), n_groups = ceil(head_dim / group) dividing 16.
// Per query j, tile of kKiviValueQ16Tile rows (counted from row 0 of the call) and group g, with
// u_r = w[j][r] * scale(r, g) (fp32) and mx = max_r u_r over the tile:
//   live = mx >= 2^-100, step = live ? mx * fl(1 / 32767) : 0, inv = live ? fl(32767 / mx) : 0,
//   wq_r = min(rne(u_r * inv), 32767),  I_c = sum_r wq_r code(r, c) (exact in int32: at most
//   kKiviValueQ16Tile * 15 * 32767 < 2^31),  sums_c = fma(step, float(I_c), sums_c) per tile,
// and the zero terms in fp32 in a fixed order: 16 lanes z_l, row r (of the call) and group g
// adding fma(w_r, zero(r, g), z_l) at lane l = (r * n_groups + g) % 16 in row order, then for
// s = 8, 4, .. down to n_groups: z_l += z_((l + s) % 16) (all lanes at once), giving
// zero_sum(g) = z_g; finally out[j][c] += sums_c + zero_sum(g(c)).
// Bound. With the four fp32 roundings d_1..d_4 (|d_i| <= 2^-24) of inv, u_r * inv, 1 / 32767
// and step: wq_r = fl(u_r * inv) + rho_r, |rho_r| <= 1/2 (the min never acts: fl(u_r * inv) <=
// 32767 (1 + 2^-24)^2 < 32767.5), so step * wq_r - u_r = u_r ((1 + d_1) .. (1 + d_4) - 1) +
// step * rho_r, and with u_r <= mx, step / 2 >= mx / 65534 (1 - 2^-23):
// |step * wq_r - u_r| <= e_t with
//   e_t = step / 2 * (1 + 2^-5)   (4 * 2^-24 * 65534 (1 + 2^-22) < 2^-6; e_t = mx when
//                                  mx < 2^-100),
// and the distance from the float form is at most
//   sum_tiles e_t * sum_r code(r, c) + the fp32 rounding of both forms
// (float(I_c) rounds once when I_c > 2^24: part of the fp32 rounding).
// Why 15 bits: the codec's own value error per row is uniform in +-scale / 2, so it moves
// out_c by an RMS of sqrt(sum_r (w_r scale_r)^2 / 12) >= mx / sqrt(12) per tile. The weight
// rounding adds sum_r step rho_r code_r, RMS <= step / sqrt(12) * sqrt(sum_r code_r^2) <=
// (mx / 32767) / sqrt(12) * 15 sqrt(128) (every code 15, one tile of 128 rows): the ratio of
// the two is at most 170 / 32767 = 0.0052, 2.7e-5 of the codec's error variance, where one u8
// part (step mx / 255, 64-row tiles: ratio 0.47, 22% of the variance) gives the 5-19% the tests
// measure.
void kivi_value_rows_accumulate_q16_scalar(float* out, const float* w, size_t w_stride, size_t n_q,
                                           const uint8_t* codes, const KiviParams* params,
                                           size_t n_rows, size_t head_dim, size_t group);
// True when kivi_value_rows_accumulate runs the 4-bit integer form at the active ISA level for
// this shape (and weights in [0, 2^100]): AVX-512 VNNI, head_dim 128 or 256, group % 16 == 0,
// n_groups dividing 16.
bool kivi_value_accumulate_uses_q16(size_t head_dim, size_t group, int bits);
// Rows per weight step of the 4-bit integer value form.
inline constexpr size_t kKiviValueQ16Tile = 128;

}  // namespace snapkv
// As compiled for each ISA level: kivi_value_rows_accumulate_q16 runs the form (false, nothing
// written, where the level, shape or weights have none).
#define SNAPKV_KIVI_Q16_VALUES_DECLARE(NS)                                                     \
  namespace snapkv::NS {                                                                       \
  bool kivi_value_rows_accumulate_q16(float* out, const float* w, size_t w_stride, size_t n_q, \
                                      const uint8_t* codes, const KiviParams* params,          \
                                      size_t n_rows, size_t head_dim, size_t group, int bits); \
  bool kivi_value_q16_handles(size_t head_dim, size_t group, int bits);                        \
  }
SNAPKV_ISA_DECLARE(SNAPKV_KIVI_Q16_VALUES_DECLARE)

// The KIVI family of the kernel registry (kernels/registry.h).
namespace snapkv::kernels {
struct KiviKernels {
  void (*key_block_dot)(float*, size_t, const float*, size_t, const float*, const float*,
                        const uint8_t*, size_t, size_t, int, float*);
  void (*value_rows_accumulate)(float*, const float*, size_t, size_t, const uint8_t*,
                                const KiviParams*, size_t, size_t, size_t, int, float*);
  bool (*key_q8_handles)(size_t, int);
  bool (*value_q8_handles)(size_t, size_t, int);
  bool (*key_block_dot_q8_f16)(float*, size_t, const float*, size_t, const fp16_t*, const uint8_t*,
                               size_t, size_t, int, float*);
  bool (*key_blocks_dot_q8_f16)(float*, size_t, const float*, size_t, const fp16_t*, const uint8_t*,
                                size_t, size_t, size_t, int, float*);
  bool (*value_q16_handles)(size_t, size_t, int);
};
}  // namespace snapkv::kernels
#define SNAPKV_KIVI_ENTRY(NS)                                                           \
  kernels::KiviKernels {                                                                \
    &NS::kivi_key_block_dot, &NS::kivi_value_rows_accumulate, &NS::kivi_key_q8_handles, \
        &NS::kivi_value_q8_handles, &NS::kivi_key_block_dot_q8_f16,                     \
        &NS::kivi_key_blocks_dot_q8_f16, &NS::kivi_value_q16_handles                    \
  }
