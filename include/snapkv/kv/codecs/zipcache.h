// ZipCache-adapted codec (after ZipCache, arXiv 2405.14256): mixed precision per token. The rows a
// prompt's eviction policy scores highest ("salient") are stored at zip_high_bits (4-bit, or fp16
// with 16), the others at 2 bits, so the average is about 2 + zip_salient * (high - 2) bits.
// Promises: the routing uses the scores the policy already computed (handed over by LayerCache
// through RowStore::settle), the byte layout below (pinned by static_assert), exact bytes(), and
// KIVI's no-drift eviction (kept rows keep their codes, parameters and precision).
// Leaves out: ZipCache's own saliency metric (normalized attention from probe queries); the
// policy's scores stand in for it.
//
// Quantizer. Per token, over groups of G = kivi_group consecutive channels, with KIVI's guarded
// min/max quantizer (include/snapkv/kv/codecs/kivi.h: kivi_choose_params / kivi_encode /
// kivi_decode) at 2 or 4 bits; codes packed 8 to a word as KIVI value rows. Keys are first divided
// by a per-channel scale (ZipCache's channel-separable token-wise quantization, which keeps a
// channel with large magnitudes from dominating every token's range): for a segment of rows,
//   chan_c = sqrt(max_i |x_ic|) rounded to fp16 (1 when the channel is all zero),
//   y_ic = x_ic / chan_c quantized per token,  decode x'_ic = chan_c * (zero + scale * code).
// Values use chan_c = 1 (no channel scales are stored). fp16 high rows are stored as they are.
//
// Flow (the fp16 "pending" rows play KIVI's residual):
//   append   rows join the pending region, not yet routed. Before they join, while the pending
//            region holds R = kivi_residual rows or more and its oldest R rows are all routed,
//            those R rows are quantized as one segment (KIVI's rule: the rows of the latest
//            append wait). Unrouted rows are never quantized.
//   settle   (RowStore::settle) routes the unrouted rows: with scores, the
//            round(zip_salient * n_unrouted) highest-scoring rows (ties to the earlier row) are
//            high, the rest low; without scores all are low. Then, every pending row being
//            routed, the oldest R rows are quantized as one segment while R or more wait, so
//            fewer than R rows stay fp16 after a settle. (The model attends over the cache before
//            a step's own rows are appended: settling is what makes the next step read the
//            prompt quantized, as it reads KIVI's flushed rows.)
// LayerCache settles a prompt's rows with the policy's scores of the kept rows after each
// compression; when no compression ran (policy full, a prompt within the budget, or a policy
// without scores: streaming, random, chunkkv) it scores them with SnapKV's observation window
// (the window's queries when it has them, else the last `window` keys as proxies) and settles
// with those. Rows appended by decode steps are settled without scores: they get 2 bits when
// they reach a flush.
//
// Layout (a .kvc zipcache store record, kv/file/kvc_format.h: KvcZipStore, then in this order):
//   ZipSegment segments[n_segments]                   row_end of each flushed segment
//   fp16       chan[n_segments][head_dim]             keys only (values: none)
//   uint8      precision[n_quant]                     0 = low (2-bit), 1 = high
//   uint8      low_codes[n_low][ceil(head_dim/8) * 2] KIVI value-row words, 2-bit
//   KiviParams low_params[n_low][ceil(head_dim/G)]
//   high 4-bit: uint8 high_codes[n_high][ceil(head_dim/8) * 4], KiviParams [n_high][groups]
//   high fp16:  fp16  high_rows[n_high][head_dim]
//   fp16       pending[n_pending][head_dim]
//   uint8      pending_route[n_pending]               0 = not routed, 1 = low, 2 = high
// with n_low = n_quant - n_high. bytes() counts exactly these arrays.
#pragma once

#include <cstdint>

namespace snapkv {

struct ZipSegment {
  uint32_t row_end;  // segment rows are [previous row_end, row_end) of the quantized region
};
static_assert(sizeof(ZipSegment) == 4, "ZipSegment is one uint32");

inline constexpr uint8_t kZipLow = 0, kZipHigh = 1;                                // precision[]
inline constexpr uint8_t kZipUnrouted = 0, kZipRoutedLow = 1, kZipRoutedHigh = 2;  // pending

}  // namespace snapkv
