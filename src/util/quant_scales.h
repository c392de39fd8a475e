// Internal: the packed sub-block scales of Q3_K, Q4_K and Q5_K (layouts in
// snapkv/util/quant_blocks.h), shared by the references (util/quant_blocks.cpp) and the fast
// decoders (kernels/quant_blocks_simd.cpp, compiled per ISA level). Internal linkage, so the
// per-level copies never share a symbol (kernels/isa.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace snapkv::quant_internal {
namespace {

// Q4_K / Q5_K: 6-bit scale and min of sub-block s (< 8) from the 12 packed bytes.
inline void scale_min_k4(const uint8_t* q, size_t s, int& sc, int& m) {
  if (s < 4) {
    sc = q[s] & 63;
    m = q[s + 4] & 63;
  } else {
    sc = (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
    m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

// Q3_K: 6-bit scale of sub-block s (< 16), offset removed (range -32..31).
inline int scale_q3_K(const uint8_t* q, size_t s) {
  const int low = s < 8 ? (q[s] & 0x0F) : (q[s - 8] >> 4);
  const int high = (q[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

}  // namespace
}  // namespace snapkv::quant_internal
