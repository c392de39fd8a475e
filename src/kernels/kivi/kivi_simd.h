// Shared by the float KIVI attention kernels (kivi_keys_simd.cpp, kivi_values_simd.cpp; see
// kivi_kernels.h), compiled once per ISA level (kernels/isa.h): the byte -> codes tables and the
// code unpacking both use. A level without the vector layer (kernels/vec.h: SNAPKV_VEC) runs the
// scalar twins (kivi_kernels.cpp). The kernels decode one code word (8 codes) into an F8 (8
// floats: by table lookup at x86, by per-lane shifts at the NEON levels), or 16 codes into an F16
// by variable shifts at the AVX-512 level, then feed up to 4 queries' FMAs from it, so the decode
// cost is shared by the query heads of a GQA group (docs/KERNELS.md); the queries' accumulators
// are arrays indexed through unroll<NQ> (kernels/unroll.h). The helpers have internal linkage (an
// anonymous namespace); the tables are one inline variable per level (snapkv::SNAPKV_ISA), so the
// key and value kernels share one copy in L1.
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/isa.h"
#include "kernels/kivi/kivi_kernels.h"
#include "kernels/unroll.h"
#include "kernels/vec.h"

namespace snapkv::SNAPKV_ISA {

#if SNAPKV_VEC_X86

// Byte -> codes as floats: 2-bit bytes hold 4 codes, 4-bit bytes 2 (element k in bits b*k..).
template <int Bits>
struct CodeTable {
  static constexpr int kPerByte = 8 / Bits;
  alignas(16) float codes[256][kPerByte];
  constexpr CodeTable() : codes{} {
    for (int byte = 0; byte < 256; ++byte) {
      for (int k = 0; k < kPerByte; ++k) {
        codes[byte][k] = static_cast<float>((byte >> (Bits * k)) & ((1 << Bits) - 1));
      }
    }
  }
};
inline constexpr CodeTable<2> kCodes2;
inline constexpr CodeTable<4> kCodes4;

#endif  // SNAPKV_VEC_X86

#if SNAPKV_VEC
namespace {

inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

// Word i of a packed array, inlined for the hot loops (kivi_load_word is the out-of-line twin).
template <int Bits>
inline uint32_t load_word(const uint8_t* words, size_t i) {
  if constexpr (Bits == 2) {
    uint16_t w;
    std::memcpy(&w, words + 2 * i, sizeof w);
    return w;
  } else {
    uint32_t w;
    std::memcpy(&w, words + 4 * i, sizeof w);
    return w;
  }
}

#if SNAPKV_VEC_X86
// The 8 codes of a word as 8 floats, by table lookup (4 KiB / 2 KiB, L1-resident) instead of
// broadcast + variable shift + mask + convert (docs/KERNELS.md, KIVI float kernels).
template <int Bits>
inline F8 unpack8(uint32_t word) {
  if constexpr (Bits == 2) {
    const __m128 lo = _mm_load_ps(kCodes2.codes[word & 0xFFu]);
    const __m128 hi = _mm_load_ps(kCodes2.codes[(word >> 8) & 0xFFu]);
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  } else {
    const auto pair = [](uint32_t byte) {
      return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(kCodes4.codes[byte])));
    };
    const __m128 lo = _mm_movelh_ps(pair(word & 0xFFu), pair((word >> 8) & 0xFFu));
    const __m128 hi = _mm_movelh_ps(pair((word >> 16) & 0xFFu), pair(word >> 24));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
  }
}

#elif SNAPKV_VEC_NEON
// NEON: a shift per lane, a mask and a convert, into the two registers of an F8.
template <int Bits>
inline F8 unpack8(uint32_t word) {
  constexpr int b = Bits;
  const int32x4_t lo_shift = {0, -b, -2 * b, -3 * b};
  const int32x4_t hi_shift = {-4 * b, -5 * b, -6 * b, -7 * b};
  const uint32x4_t w = vdupq_n_u32(word);
  const uint32x4_t mask = vdupq_n_u32((1u << Bits) - 1u);
  return {{vcvtq_f32_u32(vandq_u32(vshlq_u32(w, lo_shift), mask)),
           vcvtq_f32_u32(vandq_u32(vshlq_u32(w, hi_shift), mask))}};
}

#endif

// Runs f(NQ, Bits) with both as std::integral_constant, for nq in 1..4 (more: 4) and bits 2 or 4:
// the one place the kernels' runtime shape becomes their template arguments.
template <class F>
inline void with_nq_bits(int nq, int bits, F&& f) {
  const auto by_nq = [&](auto b) {
    switch (nq) {
      case 1:
        return f(std::integral_constant<int, 1>{}, b);
      case 2:
        return f(std::integral_constant<int, 2>{}, b);
      case 3:
        return f(std::integral_constant<int, 3>{}, b);
      default:
        return f(std::integral_constant<int, 4>{}, b);
    }
  };
  if (bits == 2) {
    by_nq(std::integral_constant<int, 2>{});
  } else {
    by_nq(std::integral_constant<int, 4>{});
  }
}

#if SNAPKV_VEC_AVX512

// 16 codes as 16 floats: Bits = 2: the 32-bit word `w` holds codes 0..15 at bits 2k; Bits = 4: the
// 64-bit `w` holds codes 0..15 at bits 4k. A variable shift per lane, a mask and a convert.
template <int Bits>
inline F16 unpack16(uint64_t w) {
  if constexpr (Bits == 2) {
    const __m512i shifts =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i v = _mm512_srlv_epi32(_mm512_set1_epi32(static_cast<int>(w)), shifts);
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(3)));
  } else {
    const __m512i shifts =
        _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i both = _mm512_permutexvar_epi32(
        halves, _mm512_zextsi128_si512(_mm_cvtsi64_si128(static_cast<long long>(w))));
    const __m512i v = _mm512_srlv_epi32(both, shifts);
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
  }
}

#endif  // SNAPKV_VEC_AVX512

}  // namespace

#endif  // SNAPKV_VEC

}  // namespace snapkv::SNAPKV_ISA
