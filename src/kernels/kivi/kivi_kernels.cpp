// KIVI attention kernels (see kivi_kernels.h): the scalar twins, the decoders, and the public
// fast kernels, which run the active ISA level's code (kivi_simd.h) with per-thread scratch.
#include "kernels/kivi/kivi_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kivi/kivi3_kernels.h"
#include "kernels/registry.h"
#include "snapkv/util/error.h"

namespace snapkv {
namespace {

size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

uint32_t code_at(uint32_t word, size_t k, int bits) {
  return (word >> (static_cast<uint32_t>(bits) * k)) & kivi_max_code(bits);
}
}  // namespace

void kivi_key_block_dot_scalar(float* out, size_t out_stride, const float* q, size_t n_q,
                               const float* scales, const float* zeros, const uint8_t* words,
                               size_t n_rows, size_t head_dim, int bits) {
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* oct_words = words + (r / kKiviOctet) * head_dim * kivi_word_bytes(bits);
    const size_t k = r % kKiviOctet;
    for (size_t j = 0; j < n_q; ++j) {
      float sum = 0.0f;
      for (size_t c = 0; c < head_dim; ++c) {
        const uint32_t code = code_at(kivi_load_word(oct_words, c, bits), k, bits);
        sum += q[j * head_dim + c] * kivi_decode(code, scales[c], zeros[c]);
      }
      out[j * out_stride + r] = sum;
    }
  }
}

void kivi_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                        const float* scales, const float* zeros, const uint8_t* words,
                        size_t n_rows, size_t head_dim, int bits) {
  if (bits == 3) {  // kivi32's keys: a float kernel of their own (kernels/kivi/kivi3_kernels.h)
    kivi3_key_block_dot(out, out_stride, q, n_q, scales, zeros, words, n_rows, head_dim);
    return;
  }
  // thread_local: one buffer per worker, reused across blocks and calls (concurrent stores never
  // share it).
  thread_local std::vector<float> scratch;
  scratch.resize(kivi_key_scratch_floats(n_q, head_dim));
  kernels::active().kivi.key_block_dot(out, out_stride, q, n_q, scales, zeros, words, n_rows,
                                       head_dim, bits, scratch.data());
}

float kivi_key_q8_unit(const float* q, const float* scales, size_t head_dim, int bits) {
  float mx = 0.0f;
  for (size_t c = 0; c < head_dim; ++c) mx = std::max(mx, std::fabs(q[c] * scales[c]));
  return bits == 2 ? mx / 127.0f : mx / 127.0f / 254.0f;
}

void kivi_key_block_dot_q8_scalar(float* out, size_t out_stride, const float* q, size_t n_q,
                                  const float* scales, const float* zeros, const uint8_t* words,
                                  size_t n_rows, size_t head_dim, int bits) {
  std::vector<int32_t> hi(head_dim), lo(head_dim);
  const auto rne = [](float x) {
    return static_cast<int32_t>(std::clamp(std::nearbyint(x), -127.0f, 127.0f));
  };
  for (size_t j = 0; j < n_q; ++j) {
    const float* qj = q + j * head_dim;
    float mx = 0.0f;  // max_c |q'_c|
    for (size_t c = 0; c < head_dim; ++c) mx = std::max(mx, std::fabs(qj[c] * scales[c]));
    const float step = mx / 127.0f, step2 = step / 254.0f;
    const bool two_parts = bits != 2;  // 2-bit keys: hi alone (lo = 0)
    const float inv = mx > 0.0f ? 127.0f / mx : 0.0f,
                inv2 = two_parts && step >= 0x1p-100f ? 254.0f / step : 0.0f;
    float qz = 0.0f;
    for (size_t c = 0; c < head_dim; ++c) {
      const float qs = qj[c] * scales[c];
      hi[c] = rne(qs * inv);
      lo[c] = rne(std::fma(-step, static_cast<float>(hi[c]), qs) * inv2);
      qz += qj[c] * zeros[c];
    }
    for (size_t r = 0; r < n_rows; ++r) {
      const uint8_t* oct_words = words + (r / kKiviOctet) * head_dim * kivi_word_bytes(bits);
      const size_t k = r % kKiviOctet;
      int32_t sum_hi = 0, sum_lo = 0;
      for (size_t c = 0; c < head_dim; ++c) {
        const auto code =
            static_cast<int32_t>(code_at(kivi_load_word(oct_words, c, bits), k, bits));
        sum_hi += hi[c] * code;
        sum_lo += lo[c] * code;
      }
      const float with_hi = std::fma(step, static_cast<float>(sum_hi), qz);
      out[j * out_stride + r] =
          two_parts ? std::fma(step2, static_cast<float>(sum_lo), with_hi) : with_hi;
    }
  }
}

bool kivi_key_dot_uses_q8(size_t head_dim, int bits) {
  return kernels::active().kivi.key_q8_handles(head_dim, bits);
}

void kivi_key_block_dot_f16(float* out, size_t out_stride, const float* q, size_t n_q,
                            const fp16_t* params, const uint8_t* words, size_t n_rows,
                            size_t head_dim, int bits) {
  thread_local std::vector<float> scratch;  // as in kivi_key_block_dot; then fp32 params
  const size_t kernel_floats = kivi_key_scratch_floats(n_q, head_dim);
  scratch.resize(kernel_floats + 2 * head_dim);
  if (bits != 3 &&
      kernels::active().kivi.key_block_dot_q8_f16(out, out_stride, q, n_q, params, words, n_rows,
                                                  head_dim, bits, scratch.data())) {
    return;
  }
  float* p32 = scratch.data() + kernel_floats;
  fp16_to_fp32_n(p32, params, 2 * head_dim);
  kivi_key_block_dot(out, out_stride, q, n_q, p32, p32 + head_dim, words, n_rows, head_dim, bits);
}

void kivi_key_blocks_dot_f16(float* out, size_t out_stride, const float* q, size_t n_q,
                             const fp16_t* params, const uint8_t* words, size_t n_blocks,
                             size_t block_rows, size_t head_dim, int bits) {
  thread_local std::vector<float> scratch;  // as in kivi_key_block_dot
  scratch.resize(kivi_key_scratch_floats(n_q, head_dim));
  if (bits != 3 &&
      kernels::active().kivi.key_blocks_dot_q8_f16(out, out_stride, q, n_q, params, words, n_blocks,
                                                   block_rows, head_dim, bits, scratch.data())) {
    return;
  }
  const size_t block_bytes = block_rows / kKiviOctet * head_dim * kivi_word_bytes(bits);
  for (size_t b = 0; b < n_blocks; ++b) {
    kivi_key_block_dot_f16(out + b * block_rows, out_stride, q, n_q, params + b * 2 * head_dim,
                           words + b * block_bytes, block_rows, head_dim, bits);
  }
}

void kivi_key_block_decode(float* out, const float* scales, const float* zeros,
                           const uint8_t* words, size_t row_begin, size_t row_end, size_t head_dim,
                           int bits) {
  for (size_t r = row_begin; r < row_end; ++r) {
    const uint8_t* oct_words = words + (r / kKiviOctet) * head_dim * kivi_word_bytes(bits);
    const size_t k = r % kKiviOctet;
    float* dst = out + (r - row_begin) * head_dim;
    for (size_t c = 0; c < head_dim; ++c) {
      dst[c] =
          kivi_decode(code_at(kivi_load_word(oct_words, c, bits), k, bits), scales[c], zeros[c]);
    }
  }
}

void kivi_value_rows_accumulate_scalar(float* out, const float* w, size_t w_stride, size_t n_q,
                                       const uint8_t* codes, const KiviParams* params,
                                       size_t n_rows, size_t head_dim, size_t group, int bits) {
  const size_t n_words = ceil_div(head_dim, kKiviOctet);
  const size_t n_groups = ceil_div(head_dim, group);
  const size_t row_bytes = n_words * kivi_word_bytes(bits);
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = codes + r * row_bytes;
    const KiviParams* p = params + r * n_groups;
    for (size_t c = 0; c < head_dim; ++c) {
      const uint32_t code =
          code_at(kivi_load_word(row, c / kKiviOctet, bits), c % kKiviOctet, bits);
      const float x = kivi_decode(code, p[c / group]);
      for (size_t j = 0; j < n_q; ++j) out[j * head_dim + c] += w[j * w_stride + r] * x;
    }
  }
}

void kivi_value_rows_accumulate(float* out, const float* w, size_t w_stride, size_t n_q,
                                const uint8_t* codes, const KiviParams* params, size_t n_rows,
                                size_t head_dim, size_t group, int bits) {
  thread_local std::vector<float> scratch;  // as in kivi_key_block_dot
  scratch.resize(kivi_value_scratch_floats(n_q, head_dim, group));
  kernels::active().kivi.value_rows_accumulate(out, w, w_stride, n_q, codes, params, n_rows,
                                               head_dim, group, bits, scratch.data());
}

void kivi_value_rows_accumulate_q8_scalar(float* out, const float* w, size_t w_stride, size_t n_q,
                                          const uint8_t* codes, const KiviParams* params,
                                          size_t n_rows, size_t head_dim, size_t group, int bits) {
  const size_t n_words = ceil_div(head_dim, kKiviOctet);
  const size_t n_groups = ceil_div(head_dim, group);
  const size_t row_bytes = n_words * kivi_word_bytes(bits);
  std::vector<float> sums(head_dim), zero_sum(n_groups), step(n_groups);
  std::vector<int32_t> isum(head_dim), wq(kKiviValueQ8Tile * n_groups);
  for (size_t j = 0; j < n_q; ++j) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    std::fill(zero_sum.begin(), zero_sum.end(), 0.0f);
    for (size_t r0 = 0; r0 < n_rows; r0 += kKiviValueQ8Tile) {
      const size_t nr = std::min(kKiviValueQ8Tile, n_rows - r0);
      const float* wj = w + j * w_stride + r0;
      for (size_t g = 0; g < n_groups; ++g) {
        const auto u = [&](size_t r) {
          return wj[r] * fp16_to_fp32(params[(r0 + r) * n_groups + g].scale);
        };
        float mx = 0.0f;
        for (size_t r = 0; r < nr; ++r) {
          mx = std::max(mx, u(r));
          zero_sum[g] += wj[r] * fp16_to_fp32(params[(r0 + r) * n_groups + g].zero);
        }
        const float inv = mx >= 0x1p-100f ? 255.0f / mx : 0.0f;
        step[g] = mx >= 0x1p-100f ? mx * (1.0f / 255.0f) : 0.0f;
        for (size_t r = 0; r < nr; ++r) {
          // rne of the exact product (one rounding: 2^23 + x has unit steps), <= 255 (header)
          const float q = std::fma(u(r), inv, 0x1p23f) - 0x1p23f;
          wq[r * n_groups + g] = static_cast<int32_t>(std::min(q, 255.0f));
        }
      }
      std::fill(isum.begin(), isum.end(), 0);
      for (size_t r = 0; r < nr; ++r) {
        const uint8_t* row = codes + (r0 + r) * row_bytes;
        for (size_t c = 0; c < head_dim; ++c) {
          const auto code = static_cast<int32_t>(
              code_at(kivi_load_word(row, c / kKiviOctet, bits), c % kKiviOctet, bits));
          isum[c] += wq[r * n_groups + c / group] * code;
        }
      }
      for (size_t c = 0; c < head_dim; ++c) {
        sums[c] = std::fma(step[c / group], static_cast<float>(isum[c]), sums[c]);
      }
    }
    for (size_t c = 0; c < head_dim; ++c) out[j * head_dim + c] += sums[c] + zero_sum[c / group];
  }
}

bool kivi_value_accumulate_uses_q8(size_t head_dim, size_t group, int bits) {
  return kernels::active().kivi.value_q8_handles(head_dim, group, bits);
}

void kivi_value_rows_decode(float* out, const uint8_t* codes, const KiviParams* params,
                            size_t n_rows, size_t head_dim, size_t group, int bits) {
  const size_t n_words = ceil_div(head_dim, kKiviOctet);
  const size_t n_groups = ceil_div(head_dim, group);
  const size_t row_bytes = n_words * kivi_word_bytes(bits);
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = codes + r * row_bytes;
    for (size_t c = 0; c < head_dim; ++c) {
      const uint32_t code =
          code_at(kivi_load_word(row, c / kKiviOctet, bits), c % kKiviOctet, bits);
      out[r * head_dim + c] = kivi_decode(code, params[r * n_groups + c / group]);
    }
  }
}

// ---- 4-bit value rows in integers (kivi_kernels.h, kivi_q16_values_simd.cpp) ----

void kivi_value_rows_accumulate_q16_scalar(float* out, const float* w, size_t w_stride, size_t n_q,
                                           const uint8_t* codes, const KiviParams* params,
                                           size_t n_rows, size_t head_dim, size_t group) {
  constexpr int kBits = 4;
  constexpr size_t kLanes = 16;
  const size_t n_words = ceil_div(head_dim, kKiviOctet);
  const size_t n_groups = ceil_div(head_dim, group);
  if (kLanes % n_groups != 0) {
    throw_invalid("kivi", "4-bit integer value form needs n_groups dividing 16",
                  std::to_string(n_groups), "1, 2, 4, 8 or 16");
  }
  const size_t row_bytes = n_words * kivi_word_bytes(kBits);
  std::vector<float> sums(head_dim), step(n_groups);
  std::vector<int32_t> isum(head_dim), wq(kKiviValueQ16Tile * n_groups);
  for (size_t j = 0; j < n_q; ++j) {
    std::fill(sums.begin(), sums.end(), 0.0f);
    float z[kLanes] = {};  // the zero terms' lanes
    for (size_t r0 = 0; r0 < n_rows; r0 += kKiviValueQ16Tile) {
      const size_t nr = std::min(kKiviValueQ16Tile, n_rows - r0);
      const float* wj = w + j * w_stride + r0;
      for (size_t g = 0; g < n_groups; ++g) {
        const auto u = [&](size_t r) {
          return wj[r] * fp16_to_fp32(params[(r0 + r) * n_groups + g].scale);
        };
        float mx = 0.0f;
        for (size_t r = 0; r < nr; ++r) mx = std::max(mx, u(r));
        const bool live = mx >= 0x1p-100f;
        const float inv = live ? 32767.0f / mx : 0.0f;
        step[g] = live ? mx * (1.0f / 32767.0f) : 0.0f;
        for (size_t r = 0; r < nr; ++r) {
          wq[r * n_groups + g] =
              static_cast<int32_t>(std::min(std::nearbyint(u(r) * inv), 32767.0f));
        }
      }
      for (size_t r = 0; r < nr; ++r) {
        for (size_t g = 0; g < n_groups; ++g) {
          float& lane = z[((r0 + r) * n_groups + g) % kLanes];
          lane = std::fma(wj[r], fp16_to_fp32(params[(r0 + r) * n_groups + g].zero), lane);
        }
      }
      std::fill(isum.begin(), isum.end(), 0);
      for (size_t r = 0; r < nr; ++r) {
        const uint8_t* row = codes + (r0 + r) * row_bytes;
        for (size_t c = 0; c < head_dim; ++c) {
          const auto code = static_cast<int32_t>(
              code_at(kivi_load_word(row, c / kKiviOctet, kBits), c % kKiviOctet, kBits));
          isum[c] += wq[r * n_groups + c / group] * code;
        }
      }
      for (size_t c = 0; c < head_dim; ++c) {
        sums[c] = std::fma(step[c / group], static_cast<float>(isum[c]), sums[c]);
      }
    }
    for (size_t s = kLanes / 2; s >= n_groups; s /= 2) {
      float t[kLanes];
      for (size_t l = 0; l < kLanes; ++l) t[l] = z[l] + z[(l + s) % kLanes];
      std::copy_n(t, kLanes, z);
    }
    for (size_t c = 0; c < head_dim; ++c) out[j * head_dim + c] += sums[c] + z[c / group];
  }
}

bool kivi_value_accumulate_uses_q16(size_t head_dim, size_t group, int bits) {
  return kernels::active().kivi.value_q16_handles(head_dim, group, bits);
}

}  // namespace snapkv
