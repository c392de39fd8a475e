// Simple K-quant encoders (Q2_K .. Q6_K) for tests, tools and random-model generation.
// Not ggml's quantizer: no search for the best scales. Scales are rounded *up* from the ideal
// ones, so the rounded sub-block range still covers the data, and every weight is then rounded to
// the nearest level of its stored (fp16 super-scale times integer) step: the error of a finite
// block is at most half a step plus rounding slack (quant_blocks.h). Zero scales are guarded.
#include <algorithm>
#include <cmath>

#include "snapkv/util/quant_blocks.h"

namespace snapkv {
namespace {

// Nearest integer of v clamped to [lo, hi]; NaN gives 0 (never an out-of-range float->int cast).
int round_clamp(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  const float r = std::round(v);
  if (r <= static_cast<float>(lo)) return lo;
  if (r >= static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// ceil(v) clamped to [0, hi]; NaN or v <= 0 gives 0.
int ceil_clamp(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  const float c = std::ceil(v);
  return c >= static_cast<float>(hi) ? hi : static_cast<int>(c);
}

// fp16 super-scale for a largest sub-block scale `largest` spread over integer scales 0..sc_max,
// and its fp32 value as the decoder will see it (0 when it would not be finite).
float super_scale(fp16_t& stored, float largest, int sc_max) {
  stored = fp32_to_fp16(largest / static_cast<float>(sc_max));
  const float d = fp16_to_fp32(stored);
  if (std::isfinite(d)) return d;
  stored = fp32_to_fp16(0.0f);  // inf / NaN input or beyond fp16 range: a zero block, not inf
  return 0.0f;
}

// Asymmetric sub-blocks: w = (d * sc[s]) * q - (dmin * m[s]), q in 0..qmax, sc and m in
// 0..sc_max. Fills sc, m [n_sub] and q [n_sub * sub_len] for x [n_sub * sub_len].
void encode_asymmetric(int* sc, int* m, int* q, fp16_t& d_out, fp16_t& dmin_out, const float* x,
                       size_t n_sub, size_t sub_len, int qmax, int sc_max) {
  float lo[16], hi[16];
  float largest_min = 0.0f;
  for (size_t s = 0; s < n_sub; ++s) {
    lo[s] = 0.0f;
    hi[s] = 0.0f;
    for (size_t l = 0; l < sub_len; ++l) {
      const float v = x[s * sub_len + l];
      if (v < lo[s]) lo[s] = v;
      if (v > hi[s]) hi[s] = v;
    }
    largest_min = std::max(largest_min, -lo[s]);
  }
  const float dmin = super_scale(dmin_out, largest_min, sc_max);
  float offset[16], largest_scale = 0.0f;
  for (size_t s = 0; s < n_sub; ++s) {
    m[s] = dmin > 0.0f ? ceil_clamp(-lo[s] / dmin, sc_max) : 0;
    offset[s] = dmin * static_cast<float>(m[s]);
    largest_scale = std::max(largest_scale, (hi[s] + offset[s]) / static_cast<float>(qmax));
  }
  const float d = super_scale(d_out, largest_scale, sc_max);
  for (size_t s = 0; s < n_sub; ++s) {
    const float scale = (hi[s] + offset[s]) / static_cast<float>(qmax);
    sc[s] = d > 0.0f ? ceil_clamp(scale / d, sc_max) : 0;
    const float step = d * static_cast<float>(sc[s]);
    for (size_t l = 0; l < sub_len; ++l) {
      const float v = x[s * sub_len + l];
      q[s * sub_len + l] = step > 0.0f ? round_clamp((v + offset[s]) / step, 0, qmax) : 0;
    }
  }
}

// Symmetric sub-blocks of 16: w = (d * sc[s]) * q, q in qmin..qmax, sc in 0..sc_max.
void encode_symmetric(int* sc, int* q, fp16_t& d_out, const float* x, int qmin, int qmax,
                      int sc_max) {
  float amax[16], largest = 0.0f;
  for (size_t s = 0; s < 16; ++s) {
    amax[s] = 0.0f;
    for (size_t l = 0; l < 16; ++l) amax[s] = std::max(amax[s], std::fabs(x[16 * s + l]));
    largest = std::max(largest, amax[s] / static_cast<float>(qmax));
  }
  const float d = super_scale(d_out, largest, sc_max);
  for (size_t s = 0; s < 16; ++s) {
    sc[s] = d > 0.0f ? ceil_clamp(amax[s] / static_cast<float>(qmax) / d, sc_max) : 0;
    const float step = d * static_cast<float>(sc[s]);
    for (size_t l = 0; l < 16; ++l) {
      q[16 * s + l] = step > 0.0f ? round_clamp(x[16 * s + l] / step, qmin, qmax) : 0;
    }
  }
}

// Q4_K / Q5_K scale packing (inverse of the k4 unpacking in quant_blocks.h).
void pack_scale_min_k4(uint8_t* out, const int* sc, const int* m) {
  for (size_t s = 0; s < 12; ++s) out[s] = 0;
  for (size_t s = 0; s < 4; ++s) {
    out[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    out[s + 4] = static_cast<uint8_t>(m[s] | ((m[s + 4] >> 4) << 6));
    out[s + 8] = static_cast<uint8_t>((sc[s + 4] & 0x0F) | ((m[s + 4] & 0x0F) << 4));
  }
}

}  // namespace

void quantize_block(BlockQ2_K* out, const float* x) {
  int sc[16], m[16], q[kQK_K];
  encode_asymmetric(sc, m, q, out->d, out->dmin, x, 16, 16, 3, 15);
  for (size_t s = 0; s < 16; ++s) out->scales[s] = static_cast<uint8_t>(sc[s] | (m[s] << 4));
  for (size_t b = 0; b < kQK_K / 4; ++b) out->qs[b] = 0;
  for (size_t i = 0; i < kQK_K; ++i) {
    const size_t h = i / 128, j = (i % 128) / 32, l = i % 32;
    out->qs[32 * h + l] = static_cast<uint8_t>(out->qs[32 * h + l] | (q[i] << (2 * j)));
  }
}

void quantize_block(BlockQ3_K* out, const float* x) {
  int sc[16], q[kQK_K];
  encode_symmetric(sc, q, out->d, x, -4, 3, 31);
  for (size_t b = 0; b < 12; ++b) out->scales[b] = 0;
  for (size_t s = 0; s < 16; ++s) {
    const int stored = sc[s] + 32;
    const size_t low_byte = s < 8 ? s : s - 8;
    const int low_shift = s < 8 ? 0 : 4;
    out->scales[low_byte] =
        static_cast<uint8_t>(out->scales[low_byte] | ((stored & 0x0F) << low_shift));
    out->scales[8 + s % 4] =
        static_cast<uint8_t>(out->scales[8 + s % 4] | ((stored >> 4) << (2 * (s / 4))));
  }
  for (size_t b = 0; b < kQK_K / 4; ++b) out->qs[b] = 0;
  for (size_t b = 0; b < kQK_K / 8; ++b) out->hmask[b] = 0;
  for (size_t i = 0; i < kQK_K; ++i) {
    const size_t h = i / 128, j = (i % 128) / 32, l = i % 32;
    const int low = q[i] & 3;  // q >= 0: q itself; q < 0: q + 4
    out->qs[32 * h + l] = static_cast<uint8_t>(out->qs[32 * h + l] | (low << (2 * j)));
    if (q[i] >= 0) out->hmask[l] = static_cast<uint8_t>(out->hmask[l] | (1u << (4 * h + j)));
  }
}

void quantize_block(BlockQ4_K* out, const float* x) {
  int sc[8], m[8], q[kQK_K];
  encode_asymmetric(sc, m, q, out->d, out->dmin, x, 8, 32, 15, 63);
  pack_scale_min_k4(out->scales, sc, m);
  for (size_t g = 0; g < 4; ++g) {
    for (size_t l = 0; l < 32; ++l) {
      out->qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
  }
}

void quantize_block(BlockQ5_K* out, const float* x) {
  int sc[8], m[8], q[kQK_K];
  encode_asymmetric(sc, m, q, out->d, out->dmin, x, 8, 32, 31, 63);
  pack_scale_min_k4(out->scales, sc, m);
  for (size_t b = 0; b < kQK_K / 8; ++b) out->qh[b] = 0;
  for (size_t g = 0; g < 4; ++g) {
    for (size_t l = 0; l < 32; ++l) {
      const int lo = q[64 * g + l], hi = q[64 * g + 32 + l];
      out->qs[32 * g + l] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
      out->qh[l] =
          static_cast<uint8_t>(out->qh[l] | ((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
    }
  }
}

void quantize_block(BlockQ6_K* out, const float* x) {
  int sc[16], q[kQK_K];
  encode_symmetric(sc, q, out->d, x, -32, 31, 127);
  for (size_t s = 0; s < 16; ++s) out->scales[s] = static_cast<int8_t>(sc[s]);
  for (size_t b = 0; b < kQK_K / 2; ++b) out->ql[b] = 0;
  for (size_t b = 0; b < kQK_K / 4; ++b) out->qh[b] = 0;
  for (size_t i = 0; i < kQK_K; ++i) {
    const size_t h = i / 128, k = (i % 128) / 32, l = i % 32;
    const int u = q[i] + 32;  // 0..63
    const size_t lb = 64 * h + 32 * (k % 2) + l;
    out->ql[lb] = static_cast<uint8_t>(out->ql[lb] | ((u & 0x0F) << (k < 2 ? 0 : 4)));
    out->qh[32 * h + l] = static_cast<uint8_t>(out->qh[32 * h + l] | ((u >> 4) << (2 * k)));
  }
}

}  // namespace snapkv
