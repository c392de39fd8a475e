// Activation quantizers of q8_dot.h: a row of fp32 activations -> Q8_0 or Q8_K blocks, once per
// matrix-vector product, so the weight rows can be dotted with int8 codes. Scalar loops; round to
// nearest with ties to even (std::nearbyint in the default rounding mode). The Q8_0 one is the
// reference of the per-ISA quantize_act_q8_0 (q8_act_simd.cpp), which prefill calls for every
// token row; the Q8_K one is read by every weight row of a product, so it is not a hot loop.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/q8_dot.h"
#include "snapkv/util/error.h"

namespace snapkv::ops_internal {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Largest |x[i]| over i < n and whether every x[i] is finite; `arg` gets the first element of
// that magnitude (sign kept).
float abs_max(const float* x, size_t n, bool& finite, float& arg) {
  float amax = 0.0f;
  arg = 0.0f;
  finite = true;
  for (size_t i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (!(ax <= std::numeric_limits<float>::max())) finite = false;  // NaN or infinity
    if (ax > amax) {
      amax = ax;
      arg = x[i];
    }
  }
  return amax;
}

void check_length(size_t n, size_t block, const char* what) {
  if (n % block != 0) {
    throw_invalid("ops", std::string(what) + ": length not a multiple of the block size",
                  std::to_string(n), "a multiple of " + std::to_string(block));
  }
}

}  // namespace

void quantize_act_q8_0_ref(BlockQ8_0* out, const float* x, size_t n) {
  check_length(n, kQ8BlockSize, "quantize_act_q8_0");
  for (size_t b = 0; b < n / kQ8BlockSize; ++b) {
    const float* xb = x + b * kQ8BlockSize;
    bool finite;
    float arg;
    const float amax = abs_max(xb, kQ8BlockSize, finite, arg);
    BlockQ8_0& o = out[b];
    if (!finite) {
      o.d = fp32_to_fp16(kNaN);
      std::memset(o.qs, 0, sizeof o.qs);
      continue;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (!std::isfinite(id)) {  // amax < 127 / FLT_MAX: stored as zero (fp16(d) is 0 anyway)
      o.d = fp32_to_fp16(0.0f);
      std::memset(o.qs, 0, sizeof o.qs);
      continue;
    }
    o.d = fp32_to_fp16(d);
    for (size_t j = 0; j < kQ8BlockSize; ++j) {
      // |xb[j] * id| <= 127 (1 + 2u) rounds to at most 127
      o.qs[j] = static_cast<int8_t>(std::nearbyint(xb[j] * id));
    }
  }
}

void quantize_act_q8_K(BlockQ8_K* out, const float* x, size_t n) {
  check_length(n, kQK_K, "quantize_act_q8_K");
  for (size_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    bool finite;
    float max;
    const float amax = abs_max(xb, kQK_K, finite, max);
    BlockQ8_K& o = out[b];
    const float iscale = -127.0f / max;
    if (!finite || amax == 0.0f || !std::isfinite(iscale)) {  // NaN / inf, zero, or too tiny
      o.d = finite ? 0.0f : kNaN;
      std::memset(o.qs, 0, sizeof o.qs);
      std::memset(o.bsums, 0, sizeof o.bsums);
      continue;
    }
    for (size_t j = 0; j < kQK_K; ++j) {
      const float v = std::nearbyint(iscale * xb[j]);
      o.qs[j] = static_cast<int8_t>(std::min(127.0f, v));  // v is finite: no libm fmin call
    }
    for (size_t j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (size_t i = 0; i < 16; ++i) sum += o.qs[16 * j + i];
      o.bsums[j] = static_cast<int16_t>(sum);
    }
    o.d = 1.0f / iscale;
  }
}

}  // namespace snapkv::ops_internal
