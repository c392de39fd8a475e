// Bulk binary16 conversions, compiled once per ISA level (util/isa.h): F16C when the level targets
// it (round to nearest even, as the scalar conversions in fp16.cpp), else those conversions.
#include "util/fp16_kernels.h"
#include "util/isa.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace snapkv::SNAPKV_ISA {

void fp16_to_fp32_n(float* out, const fp16_t* in, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) out[i] = fp16_to_fp32(in[i]);
}

void fp32_to_fp16_n(fp16_t* out, const float* in, size_t n) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) out[i] = fp32_to_fp16(in[i]);
}

}  // namespace snapkv::SNAPKV_ISA
