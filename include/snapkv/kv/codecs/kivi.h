// KIVI codec (arXiv 2402.02750): 2-, 3- and 4-bit asymmetric min/max quantization of kept KV rows.
// This header pins the packed layouts and exposes the scalar primitives (parameter choice, encode,
// decode, word packing) that the RowStore (src/kv/codecs/kivi/kivi_store.cpp) and the tests share.
// The store itself is made by make_row_store(config with codec kivi2/kivi4, role, head_dim).
//
// Quantizer. For a group of values with minimum lo and maximum hi (fp16 values: rows are rounded
// to fp16 before they are quantized, exactly as the residual holds them):
//   zero  = lo                                   (fp16, exact since lo is an fp16 value)
//   scale = (hi - lo) / (2^b - 1), rounded UP to fp16 so that zero + (2^b-1)*scale >= hi
//   code  = the nearer of the two grid points around x, in [0, 2^b - 1]
//   x'    = zero + scale * code                  (fp32 arithmetic, the decode used everywhere)
// A constant group (hi == lo) gets scale 0: every code is 0 and x' == x exactly; nothing is ever
// divided by a zero scale. Per element |x - x'| <= scale/2 + one fp32 rounding of x'.
//
// Grouping (KIVI): keys per channel, values per token.
//   keys   (RowRole::key):   a block of up to G consecutive rows shares one (scale, zero) per
//                            channel: params [head_dim] scales then [head_dim] zeros.
//   values (RowRole::value): each row has ceil(head_dim / G) groups of G consecutive channels; the
//                            last group holds the head_dim % G tail channels when G does not
//                            divide head_dim (its min/max cover just those channels).
//
// Code words. Codes are packed 8 to a little-endian word of b*8 bits (2-bit: uint16, 3-bit: three
// bytes, byte i holding bits [8i, 8i + 8) of the 24-bit word, 4-bit: uint32): element k of the
// octet sits in bits [b*k, b*k + b). 3-bit codes are for keys only (codec kivi32; a value store
// of width 3 is an error): their dot product runs a float kernel of its own
// (src/kernels/kivi/kivi3_kernels.cpp), not the packed SIMD or integer kernels of widths 2 and 4.
// A key block of n rows stores, per octet of rows o = 0 .. ceil(n/8)-1 and channel c, the word of
// rows 8o..8o+7 of channel c:
//   key block codes  [ceil(n/8)][head_dim] words   (rows past n inside the last octet: code 0)
// so one word decodes into 8 consecutive rows' codes of one channel, and a dot product of a query
// with 8 rows is a sum over channels of (q_c * scale_c) * codes + sum_c q_c * zero_c. (Where the
// CPU has AVX-512 VNNI the first sum runs in integers on the codes, q_c * scale_c rounded per
// block to a pair of int8 vectors, about 15 bits, for 4-bit codes and to one int8 vector for
// 2-bit codes: src/kernels/kivi/kivi_kernels.h bounds the difference and weighs it against the
// codec's own error.) A value row stores its channels in octets (where the CPU has AVX-512 VNNI,
// attention sums value rows of head_dim 128 or 256 in integers: the weights times scales rounded
// per group to u8 per 64 rows for 2-bit rows, to int16 per 128 rows for 4-bit rows;
// src/kernels/kivi/kivi_kernels.h bounds the difference):
//   value row codes  [ceil(head_dim/8)] words       (channels past head_dim: code 0)
//   value row params [ceil(head_dim/G)] KiviParams
//
// Store regions, in row order: [fp16 sinks][quantized rows][fp16 residual]. The first
// kivi_fp16_sinks rows ever appended stay fp16 for good (KIVI-Sink); other rows enter the fp16
// residual. When rows arrive and the residual already holds R rows or more, its oldest rows are
// quantized R at a time (keys: R/G blocks of G rows; values: row by row) until fewer than R
// remain, then the new rows join it. So the rows of the latest append stay fp16 until the next
// append: an eviction that follows an append (LayerCache appends a chunk, then selects) drops
// fresh rows before they are packed. Decode (one row per append) sees KIVI's rule: a full
// residual of R rows is quantized when the next row arrives.
//
// Kitty (codec kitty; "2-bit with boosted key channels" in the method notes): 2-bit KIVI where
// each key block also keeps its K = kitty_channels channels of largest magnitude (max |x| over the
// block's rows, ties to the lower channel index) in fp16. Those channels get parameters (scale 0,
// zero +0) and code 0 in the packed words, so the packed kernels add exactly 0 for them; the block
// stores
//   boost channels   [K] uint16, increasing           (per block)
//   boost values     [K] fp16 per quantized row      (the row's values of those channels)
// and attention adds sum_k q[channel_k] * value_k per row. The fp16 choice (not 4- or 8-bit) keeps
// the boosted channels exact: an outlier channel is where 2-bit error hurts q.k most. Cost per key
// row: 2-bit codes of every channel (the K boosted ones hold zeros) + 16 K bits, plus 2 K bytes of
// channel indices per block. Values are plain KIVI-2.
//
// Mixed key widths (codec kivimix; 2.5 code bits per element over keys and values): each key block
// of n rows quantizes its W = head_dim / 2 channels of largest range (hi - lo over the block's
// rows, ties to the lower channel index) at 4 bits and the other channels at 2 bits, 3 bits per key
// element on average (head_dim even; an odd head_dim gets one 2-bit channel more). A wide
// channel's 4-bit code u (params (s, z) by the rule above at b = 4) is split into u = 4 h + l:
// h (0..3) sits in the block's ordinary 2-bit words, with the stored params (S = 4 s, z) (4 s is
// exact in fp16), so the packed 2-bit kernels run unchanged; l (0..3) is stored per row:
//   wide channels    [W] uint16, increasing            (per block, 2 W bytes: the width map)
//   low codes        [ceil(W/8)] 2-bit words per row   (element k = wide channel k)
// Decode of a wide channel: x' = (z + S h) + (S/4) l in fp32 (the first sum is kivi_decode), so
// |x - x'| <= s/2 + fp32 roundings, four times finer than the 2-bit channels. Attention adds
// sum_k q[wide_k] (S_k / 4) l_k per row after the packed kernel. Per key row: 2 bits for every
// channel + 2 W bits; per block: 4 head_dim bytes of params + 2 W bytes of width map + the block
// entry (at head_dim 32, G = 32: 3 code bits, 1 + 0.25 + 0.06 bits of parameters per element).
// Values are plain KIVI-2.
//
// Eviction (retain) never re-quantizes: kept codes and their group parameters are moved, never
// recomputed, so a kept row decodes bit-identically before and after any number of retains. A key
// block that loses rows keeps its parameters and shrinks (a "block with holes"); it is dropped when
// it loses its last row. bytes() counts the shrunken blocks' full parameter cost.
#pragma once

#include <cstddef>
#include <cstdint>

#include "snapkv/kernels/kivi_layout.h"
#include "snapkv/util/fp16.h"

namespace snapkv {

// Metadata of one key block: its rows are [previous block's row_end, row_end) of the quantized
// region, its code words start at word_begin (in units of head_dim words, i.e. octets).
struct KiviKeyBlock {
  uint32_t row_end;
  uint32_t octet_begin;
};
static_assert(sizeof(KiviKeyBlock) == 8, "KiviKeyBlock is two uint32");

// Guarded min/max parameters for a group whose minimum is lo and maximum hi (finite, lo <= hi,
// |lo|, |hi| <= kFp16Max). zero is lo rounded down to fp16, scale rounded up as described above.
KiviParams kivi_choose_params(float lo, float hi, int bits);

// Nearest code of x under p (x within the group's [lo, hi]); 0 when scale is 0.
uint32_t kivi_encode(float x, KiviParams p, int bits);

// Packs codes[0..8) (each <= 2^bits - 1) into one word; unpacks a word into codes[0..8).
uint32_t kivi_pack_word(const uint8_t* codes, int bits);
void kivi_unpack_word(uint8_t* codes, uint32_t word, int bits);

// Writes the word at index i of a packed code array (kivi_load_word reads it:
// snapkv/kernels/kivi_layout.h).
void kivi_store_word(uint8_t* words, size_t i, uint32_t word, int bits);

}  // namespace snapkv
