// The integer KIVI key kernels of one key block (kivi_q8_simd.h), compiled once per ISA level;
// only the levels with AVX-512 VNNI define them.
//
// Layout of a key block (include/snapkv/kv/codecs/kivi.h): per octet of 8 rows, one word per
// channel holding the 8 rows' codes, W = bits bytes per word, P = 8 / bits codes per byte (row h *
// P + i sits in byte h at bits bits * i). The kernels take 4 octets (32 rows) at a time and one
// channel quad (4 channels) per code vector: a byte shuffle makes every dword hold byte h of the
// quad's 4 channels in one octet, so masking bits (bits * i) .. leaves in each dword one row's
// codes of those 4 channels (times 2^(bits i)), and vpdpbusd against the quad's 4 query bytes
// (broadcast from memory) adds that row's part of the dot product into the dword. Every dword of
// an accumulator therefore stays one row for the whole channel walk: no reduction across lanes,
// only a shift, an interleave of the P accumulators into row order and the conversion at the end.
// 2-bit: 8 dwords (4 octets x 2 bytes) per 256-bit vector, row 4 k + i in dword k of accumulator
// i; 4-bit: 16 dwords (4 octets x 4 bytes) per 512-bit vector, row 2 k + i (docs/KERNELS.md).
#include <algorithm>
#include <cstring>

#include "kernels/kivi/kivi_q8_simd.h"

#if SNAPKV_KIVI_VNNI
namespace snapkv::SNAPKV_ISA::kivi_q8 {
namespace {

constexpr size_t kRowsPerPass = 32;  // 4 octets
// Passes ahead whose code words the kernels prefetch, one line per channel step: the words of
// a store's blocks follow each other, so this runs into the next blocks (a prefetch past the
// end of the words is harmless: it never faults; the address is formed as an integer); spread
// over the loop, unlike a burst per block.
constexpr size_t kPrefetchPasses = 4;

// acc += vpdpbusd(u8 a, s8 b), in place: the asm keeps the accumulator in its register.
template <typename V>
inline void dpbusd(V& acc, V a, V b) {
#if defined(__GNUC__)
  __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
#else
  if constexpr (sizeof(V) == 32) {
    acc = _mm256_dpbusd_epi32(acc, a, b);
  } else {
    acc = _mm512_dpbusd_epi32(acc, a, b);
  }
#endif
}

// The 4 bytes at p as one int32 (to broadcast: one load per query and channel quad, reused by
// every masked code vector of the quad).
inline int32_t load_i32(const int8_t* p) {
  int32_t x;
  std::memcpy(&x, p, 4);
  return x;
}

// The octet addresses of a pass over rows r0 .. r0 + 31 (octets past the block repeat its last
// one; their rows are never stored) and the store masks of its two halves of 16 rows.
struct Pass {
  const uint8_t* oct[4];
  __mmask16 mask[2];
  Pass(const uint8_t* words, size_t oct_bytes, size_t r0, size_t n_rows) {
    const size_t n_oct = (n_rows + 7) / 8;
    for (size_t o = 0; o < 4; ++o) oct[o] = words + std::min(r0 / 8 + o, n_oct - 1) * oct_bytes;
    const size_t valid = std::min(kRowsPerPass, n_rows - r0);
    mask[0] = static_cast<__mmask16>(valid >= 16 ? 0xFFFFu : (1u << valid) - 1u);
    mask[1] = static_cast<__mmask16>(valid >= 32  ? 0xFFFFu
                                     : valid > 16 ? (1u << (valid - 16)) - 1u
                                                  : 0u);
  }
};

// Bytes 16 step .. 16 step + 15 of the pass's 4 octets in the 4 lanes of one vector (lane o:
// octet o), after a prefetch of one line of the words kPrefetchPasses passes ahead (a step per
// line: spread over the loop, not a burst per block).
inline __m512i octet_lanes(const Pass& pass, size_t oct_bytes, size_t step) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(pass.oct[0]) +
                                             kPrefetchPasses * 4 * oct_bytes + 64 * step),
               _MM_HINT_T0);
  const auto lane = [step](const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * step));
  };
  __m512i x = _mm512_castsi128_si512(lane(pass.oct[0]));
  x = _mm512_inserti32x4(x, lane(pass.oct[1]), 1);
  x = _mm512_inserti32x4(x, lane(pass.oct[2]), 2);
  return _mm512_inserti32x4(x, lane(pass.oct[3]), 3);
}

}  // namespace

// Out of line even where the optimizer could inline them (the accumulators stay in registers).
#if defined(__GNUC__)
#define SNAPKV_NOINLINE __attribute__((noinline))
#else
#define SNAPKV_NOINLINE
#endif

// 2-bit keys, one int8 part, NQ queries (1, 2 or 4; absent ones have zero operands).
template <int NQ>
SNAPKV_NOINLINE void key_block_2bit(float* out, size_t out_stride, size_t nq, const int8_t* ops,
                                    const QueryParams& qp, const uint8_t* words, size_t n_rows,
                                    size_t head_dim) {
  const size_t oct_bytes = 2 * head_dim;
  // in a lane of 8 channels (channel c, byte h at 2 c + h): qword n <- quad n, dword h of it <-
  // byte h of its 4 channels
  const __m256i shuffle = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0,
                                           2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  // row p of a half of 16 rows (row 4 k + i) <- dword k of accumulator i (pairs of accumulators
  // joined: i * 8 + k), shifted back by 2 i
  const __m512i pick[2] = {
      _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27),
      _mm512_setr_epi32(4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31)};
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
  for (size_t r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const Pass pass(words, oct_bytes, r0, n_rows);
    __m256i acc[4 * NQ];  // [i][query]
    SNAPKV_UNROLL
    for (int i = 0; i < 4; ++i) {
      SNAPKV_UNROLL
      for (int f = 0; f < NQ; ++f) acc[i * NQ + f] = _mm256_setzero_si256();
    }
    for (size_t t = 0; t < head_dim / 8; ++t) {  // 8 channels: quads 2 t, 2 t + 1
      // one line of the words kPrefetchPasses passes ahead per iteration (a pass is 16 lines at
      // head_dim 128)
      _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(pass.oct[0]) +
                                                 kPrefetchPasses * 4 * oct_bytes + 64 * t),
                   _MM_HINT_T0);
      const auto join = [t](const uint8_t* lo, const uint8_t* hi) {
        return _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + 16 * t))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + 16 * t)), 1);
      };
      const __m256i a = _mm256_shuffle_epi8(join(pass.oct[0], pass.oct[2]), shuffle);
      const __m256i b = _mm256_shuffle_epi8(join(pass.oct[1], pass.oct[3]), shuffle);
      // dword k = 2 o + h of quad n: byte h of octet o (rows 8 o + 4 h + i)
      const __m256i x[2] = {_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b)};
      SNAPKV_UNROLL
      for (int n = 0; n < 2; ++n) {
        const int8_t* qb = ops + quad_offset<1>(2 * t + n);
        __m256i qv[NQ];
        SNAPKV_UNROLL
        for (int f = 0; f < NQ; ++f) qv[f] = _mm256_set1_epi32(load_i32(qb + 4 * f));
        SNAPKV_UNROLL
        for (int i = 0; i < 4; ++i) {
          const __m256i m =
              _mm256_and_si256(x[n], _mm256_set1_epi8(static_cast<char>(3 << (2 * i))));
          SNAPKV_UNROLL
          for (int f = 0; f < NQ; ++f) dpbusd(acc[i * NQ + f], m, qv[f]);
        }
      }
    }
    SNAPKV_UNROLL
    for (int f = 0; f < NQ; ++f) {
      if (static_cast<size_t>(f) >= nq) continue;
      const __m512i a01 = _mm512_inserti64x4(_mm512_castsi256_si512(acc[f]), acc[NQ + f], 1);
      const __m512i a23 =
          _mm512_inserti64x4(_mm512_castsi256_si512(acc[2 * NQ + f]), acc[3 * NQ + f], 1);
      const __m512 sv = _mm512_set1_ps(qp.step[f]), zv = _mm512_set1_ps(qp.qz[f]);
      SNAPKV_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i rows =
            _mm512_srav_epi32(_mm512_permutex2var_epi32(a01, pick[h], a23), shifts);
        _mm512_mask_storeu_ps(out + f * out_stride + r0 + 16 * h, pass.mask[h],
                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(rows), sv, zv));
      }
    }
  }
}

// 2-bit keys, 4 queries, 512-bit vectors (the decode pairs: prepare_pair's operand order): per 8
// channels (step t) one code vector holds both quads, lane o = octet o, dword 4 o + 2 h + n <-
// byte h of quad n's 4 channels, against a query operand with quad 2 t in the even and 2 t + 1 in
// the odd dwords (one qword broadcast). Each accumulator dword is then one row slot (k = 2 o + h,
// row 4 k + i) and quad parity; the two parities are added (exact in int32) at the end, which
// leaves the sums of key_block_2bit.
SNAPKV_NOINLINE void key_block_2bit_pair(float* out, size_t out_stride, const int8_t* ops,
                                         const QueryParams& qp, const uint8_t* words, size_t n_rows,
                                         size_t head_dim) {
  const size_t oct_bytes = 2 * head_dim;
  const __m512i shuffle =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  // row p of a half of 16 rows (row 4 k + i) <- slot k of accumulator i in the joined pairs
  // (joined: 128-bit lane l of a pair holds slots 2 l, 2 l + 1 of its first accumulator, then of
  // its second; the second pair at 16 ..)
  const __m512i pick[2] = {
      _mm512_setr_epi32(0, 2, 16, 18, 1, 3, 17, 19, 4, 6, 20, 22, 5, 7, 21, 23),
      _mm512_setr_epi32(8, 10, 24, 26, 9, 11, 25, 27, 12, 14, 28, 30, 13, 15, 29, 31)};
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
  for (size_t r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const Pass pass(words, oct_bytes, r0, n_rows);
    __m512i acc[16];  // [i][query]
    SNAPKV_UNROLL
    for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_si512();
    for (size_t t = 0; t < head_dim / 8; ++t) {
      const __m512i x = _mm512_shuffle_epi8(octet_lanes(pass, oct_bytes, t), shuffle);
      const int8_t* qb = ops + t / 2 * 64 + t % 2 * 32;
      __m512i qv[4];
      SNAPKV_UNROLL
      for (int f = 0; f < 4; ++f) {
        int64_t w;
        std::memcpy(&w, qb + 8 * f, 8);
        qv[f] = _mm512_set1_epi64(w);
      }
      SNAPKV_UNROLL
      for (int i = 0; i < 4; ++i) {
        const __m512i m = _mm512_and_si512(x, _mm512_set1_epi8(static_cast<char>(3 << (2 * i))));
        SNAPKV_UNROLL
        for (int f = 0; f < 4; ++f) dpbusd(acc[i * 4 + f], m, qv[f]);
      }
    }
    SNAPKV_UNROLL
    for (int f = 0; f < 4; ++f) {
      // the two quad parities of each slot added (in-lane shuffles of the even and odd dwords)
      const auto join = [](__m512i a, __m512i b) {
        const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
        return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                                _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xDD)));
      };
      const __m512i a01 = join(acc[f], acc[4 + f]), a23 = join(acc[8 + f], acc[12 + f]);
      const __m512 sv = _mm512_set1_ps(qp.step[f]), zv = _mm512_set1_ps(qp.qz[f]);
      SNAPKV_UNROLL
      for (int h = 0; h < 2; ++h) {
        const __m512i rows =
            _mm512_srav_epi32(_mm512_permutex2var_epi32(a01, pick[h], a23), shifts);
        _mm512_mask_storeu_ps(out + f * out_stride + r0 + 16 * h, pass.mask[h],
                              _mm512_fmadd_ps(_mm512_cvtepi32_ps(rows), sv, zv));
      }
    }
  }
}

// 4-bit keys, two int8 parts (hi and lo, prepare_queries), NQ queries.
template <int NQ>
SNAPKV_NOINLINE void key_block_4bit(float* out, size_t out_stride, size_t nq, const int8_t* ops,
                                    const QueryParams& qp, const uint8_t* words, size_t n_rows,
                                    size_t head_dim) {
  const size_t oct_bytes = 4 * head_dim;
  // in a lane of one quad (channel c, byte h at 4 c + h): dword h <- byte h of the 4 channels
  const __m512i shuffle =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  // row p of a half of 16 rows (row 2 k + i) <- dword k of accumulator i (i * 16 + k)
  const __m512i pick[2] = {
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)};
  for (size_t r0 = 0; r0 < n_rows; r0 += kRowsPerPass) {
    const Pass pass(words, oct_bytes, r0, n_rows);
    __m512i acc[4 * NQ];  // [i][query][part]
    SNAPKV_UNROLL
    for (int i = 0; i < 2; ++i) {
      SNAPKV_UNROLL
      for (int f = 0; f < NQ; ++f)
        acc[2 * (i * NQ + f)] = acc[2 * (i * NQ + f) + 1] = _mm512_setzero_si512();
    }
    for (size_t g = 0; g < head_dim / 4; ++g) {
      // dword k = 4 o + h: byte h of octet o (rows 8 o + 2 h + i)
      const __m512i x = _mm512_shuffle_epi8(octet_lanes(pass, oct_bytes, g), shuffle);
      const int8_t* qb = ops + quad_offset<2>(g);
      __m512i qv[2 * NQ];  // [query][part]
      SNAPKV_UNROLL
      for (int f = 0; f < NQ; ++f) {
        qv[2 * f] = _mm512_set1_epi32(load_i32(qb + 4 * f));
        qv[2 * f + 1] = _mm512_set1_epi32(load_i32(qb + 64 + 4 * f));
      }
      SNAPKV_UNROLL
      for (int i = 0; i < 2; ++i) {
        const __m512i m = _mm512_and_si512(x, _mm512_set1_epi8(static_cast<char>(15 << (4 * i))));
        SNAPKV_UNROLL
        for (int f = 0; f < NQ; ++f) {
          dpbusd(acc[2 * (i * NQ + f)], m, qv[2 * f]);
          dpbusd(acc[2 * (i * NQ + f) + 1], m, qv[2 * f + 1]);
        }
      }
    }
    SNAPKV_UNROLL
    for (int f = 0; f < NQ; ++f) {
      if (static_cast<size_t>(f) >= nq) continue;
      const __m512 sv = _mm512_set1_ps(qp.step[f]), s2v = _mm512_set1_ps(qp.step2[f]);
      const __m512 zv = _mm512_set1_ps(qp.qz[f]);
      __m512 res[2];
      SNAPKV_UNROLL
      for (int i = 0; i < 2; ++i) {
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srai_epi32(acc[2 * (i * NQ + f)], 4 * i));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_srai_epi32(acc[2 * (i * NQ + f) + 1], 4 * i));
        res[i] = _mm512_fmadd_ps(lo, s2v, _mm512_fmadd_ps(hi, sv, zv));
      }
      SNAPKV_UNROLL
      for (int h = 0; h < 2; ++h) {
        _mm512_mask_storeu_ps(out + f * out_stride + r0 + 16 * h, pass.mask[h],
                              _mm512_permutex2var_ps(res[0], pick[h], res[1]));
      }
    }
  }
}

// The instantiations the entry points call (kivi_q8_simd.h).
template void key_block_2bit<1>(float*, size_t, size_t, const int8_t*, const QueryParams&,
                                const uint8_t*, size_t, size_t);
template void key_block_2bit<2>(float*, size_t, size_t, const int8_t*, const QueryParams&,
                                const uint8_t*, size_t, size_t);
template void key_block_2bit<4>(float*, size_t, size_t, const int8_t*, const QueryParams&,
                                const uint8_t*, size_t, size_t);
template void key_block_4bit<1>(float*, size_t, size_t, const int8_t*, const QueryParams&,
                                const uint8_t*, size_t, size_t);
template void key_block_4bit<2>(float*, size_t, size_t, const int8_t*, const QueryParams&,
                                const uint8_t*, size_t, size_t);
template void key_block_4bit<4>(float*, size_t, size_t, const int8_t*, const QueryParams&,
                                const uint8_t*, size_t, size_t);

#undef SNAPKV_NOINLINE
}  // namespace snapkv::SNAPKV_ISA::kivi_q8
#endif  // SNAPKV_KIVI_VNNI
