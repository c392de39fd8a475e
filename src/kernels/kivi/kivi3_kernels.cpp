// The 3-bit KIVI key kernel (kernels/kivi/kivi3_kernels.h). Per query: q'_c = q_c * scale_c and
// qz = sum_c q_c * zero_c once per block, then per octet of rows eight fp32 accumulators take
// q'_c * code for every channel, the 24-bit word of one channel giving the codes of its 8 rows.
// Plain C++ (the compiler unrolls the 8 constant shifts); no dequantized copy of the block.
#include "kernels/kivi/kivi3_kernels.h"

#include <algorithm>
#include <array>
#include <vector>

#include "snapkv/kernels/kivi_layout.h"

namespace snapkv {

void kivi3_key_block_dot(float* out, size_t out_stride, const float* q, size_t n_q,
                         const float* scales, const float* zeros, const uint8_t* words,
                         size_t n_rows, size_t head_dim) {
  constexpr size_t kWordBytes = kivi_word_bytes(3);
  thread_local std::vector<float> qs;  // [head_dim] q'_c of one query
  qs.resize(head_dim);
  const size_t n_oct = (n_rows + kKiviOctet - 1) / kKiviOctet;
  for (size_t j = 0; j < n_q; ++j) {
    const float* qj = q + j * head_dim;
    float qz = 0.0f;
    for (size_t c = 0; c < head_dim; ++c) {
      qs[c] = qj[c] * scales[c];
      qz += qj[c] * zeros[c];
    }
    float* oj = out + j * out_stride;
    for (size_t o = 0; o < n_oct; ++o) {
      const uint8_t* w = words + o * head_dim * kWordBytes;
      std::array<float, kKiviOctet> acc{};
      for (size_t c = 0; c < head_dim; ++c, w += kWordBytes) {
        const uint32_t word = uint32_t{w[0]} | uint32_t{w[1]} << 8 | uint32_t{w[2]} << 16;
        const float qc = qs[c];
        for (size_t k = 0; k < kKiviOctet; ++k) {
          acc[k] += qc * static_cast<float>((word >> (3 * k)) & 7u);
        }
      }
      const size_t rows = std::min(kKiviOctet, n_rows - o * kKiviOctet);
      for (size_t k = 0; k < rows; ++k) oj[o * kKiviOctet + k] = acc[k] + qz;
    }
  }
}

}  // namespace snapkv
