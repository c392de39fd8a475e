// Cache configuration: which eviction policy, its parameters, and which codec stores the kept rows.
// One CacheConfig is shared by every layer of a model (the builder copies it into each cache).
// validate() rejects inconsistent settings with std::invalid_argument naming the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "snapkv/kv/core/codec_spec.h"

namespace snapkv {

// Which rows survive.
enum class PolicyKind {
  full,       // keep everything (baseline)
  snapkv,     // observation-window attention scores, per KV head (SnapKV)
  streaming,  // StreamingLLM: first n_sink rows + the most recent rows
  random,     // seeded uniform choice among non-sink rows (a baseline)
  knorm,      // keep the keys with the lowest L2 norm (sinks kept)
  chunkkv,  // ChunkKV-adapted: whole chunks of chunk_size positions ranked by summed SnapKV scores
  keydiff,  // KeyDiff: keep the keys least similar (cosine) to the mean direction of the candidates
  expected_attention,  // Expected Attention: closed-form attention of modelled future queries
  kvzip,  // KVzip: per-row scores supplied from outside (the model's context-reconstruction pass,
          // LayerCache::compress_with_scores); needs chunk_mode end_of_prompt
  kvzap,  // KVzap: per-row scores supplied from outside (a learned surrogate of kvzip's scores,
          // computed by the model's scorer from the cached keys); needs chunk_mode end_of_prompt
  kvzip_plus,    // KVzip+: kvzip's pass with each attention probability weighted by the size of
                 // what the row adds to the query's residual stream, ||W_O v|| / ||h||
  kvzap_snapkv,  // kvzap's learned scores (supplied from outside, as kvzap's) mixed with the
                 // observation window's attention, real queries or proxy keys by query_source
                 // (kv/core/prior_mix.h, weight prior_weight); needs chunk_mode end_of_prompt
};

// How the rows kept in one layer are shared among its KV heads (kv/core/allocation.h).
enum class HeadAllocation {
  uniform,  // every KV head keeps `budget` rows
  ada,      // AdaKV: the layer keeps n_kv_heads * budget rows, chosen by score across its heads;
            // each head keeps its forced rows and at least ceil(ada_floor * budget) rows
  duo,      // head types (DuoAttention's idea, kv/core/head_types.h): streaming heads keep the
            // sinks and the most recent rows only, the layer's retrieval heads share what they
            // free; which heads stream is the model's (LayerCache::set_head_types)
  duo_ada,  // duo, with the retrieval heads' rows chosen by score across them as ada does
};

// True for ada and duo_ada (rows ranked across heads), and for duo and duo_ada (head types).
bool head_allocation_ada(HeadAllocation k);
bool head_allocation_duo(HeadAllocation k);

// How the rows kept by the model are shared among its layers (kv/core/allocation.h).
enum class LayerAllocation {
  uniform,  // every layer has the per-head budget `budget`
  pyramid,  // PyramidKV: per-head budgets decrease linearly with depth, same total over layers
};

// 1-D smoothing of the scores before selection (stride 1, odd kernel, same-length output).
// Edges: max pools over the in-range part of the kernel (padding acts as -inf); avg divides the
// in-range sum by the full kernel size (padding counts as zeros), as torch's avg_pool1d with
// count_include_pad=True does in the SnapKV reference code. causal_max is one-sided: a row takes
// the largest score of itself and the kernel - 1 rows before it, so a peak (the window attending
// to a needle's key words) passes to the rows after it (the value that follows the key) and to
// none before it (ops/pool.h).
enum class PoolKind { none, max, avg, causal_max };

// Where the observation window's queries come from.
enum class QuerySource {
  auto_select,  // true queries when the caller passes q_window, else the last `window` keys
  queries,      // require q_window on every prefill update of a policy that uses queries
                // (snapkv, chunkkv, expected_attention); std::invalid_argument if it is missing
  keys,         // always the last `window` keys as proxy queries (engine-agnostic mode)
};

// When the budget is enforced during a prompt that arrives in several prefill chunks.
enum class ChunkMode {
  every_chunk,    // at every prefill update, over retained + new rows (bounded peak memory)
  end_of_prompt,  // keep everything until LayerCache::end_prompt(), then compress once (paper)
};

// How kept rows are stored: CodecKind, the tag of a built codec, whose name is composed from
// parts by the grammar of kv/core/codec_spec.h (its spec: family, key and value bits, rotated
// roles). The built codecs: fp16; kivi2, kivi4 (KIVI, kv/codecs/kivi.h); kivi2r, kivi4r (KIVI on
// rows turned by a seeded randomized Hadamard rotation, kv/codecs/rotation.h); kitty (2-bit KIVI
// whose largest-magnitude key channels per block stay fp16); zipcache (per-row mixed precision
// routed by the policy's scores, kv/codecs/zipcache.h); zipcacher (zipcache whose value rows are
// rotated; its keys are zipcache's); gear (KIVI plus a low-rank and a sparse correction of its
// error, kv/codecs/gear.h); kivi42 (4-bit keys per channel, 2-bit values per token) and kivi24
// (the mirror); kivi42r (kivi42 whose values are rotated); kivi32 (3-bit keys, 2-bit values: 2.5
// code bits per element); kivimix (2.5 bits spent unevenly on the keys: in every key block the
// head_dim/2 channels of largest range get 4-bit codes, the others 2-bit; values 2-bit,
// kv/codecs/kivi.h "Mixed key widths"). Layouts are KIVI's at each role's width.

// Bits per code of the KIVI store of `role`: the spec's key_bits / value_bits (0 for fp16,
// zipcache and gear).
int codec_kivi_bits(CodecKind k, bool key_role);

// True for the codecs that quantize Hadamard-rotated rows (kivi2r, kivi4r; zipcacher and kivi42r
// their values): they use CacheConfig::rotation_seed.
bool codec_is_rotated(CodecKind k);
// True for the codecs that route rows by saliency (zipcache, zipcacher): they use zip_salient
// and zip_high_bits, and rank rows with the window's queries when the policy gives no scores.
bool codec_routes_rows(CodecKind k);

// Per-codec defaults, listed with each built codec in the registry (kv/codecs/codec_registry.cpp).
// CacheConfig::kivi_residual == 0, kivi_fp16_sinks == kCodecDefaultCount and zip_salient ==
// kCodecDefaultFraction (the field defaults) stand for the codec's own setting, chosen on the dev
// seed (2) per codec:
//   kivi_residual:   32 for zipcacher, kivi42, kivi42r, kivi24, kivi32, kivimix (at a 1K prompt
//                    128 fp16 rows are 12% of the cache; 32 frees those bytes:
//                    docs/results/codecs-zipcacher/, docs/results/codecs-kivi42/); 128 (KIVI's R)
//                    for every other codec.
//   zip_salient:     0.7 for zipcacher (with residual 32), 0.2 for zipcache, 0 for the rest.
//   kivi_fp16_sinks: 4 for kivi42, kivi32, kivimix (the first rows, the attention sinks SnapKV
//                    always keeps, stay fp16: on the dev seed they carry most of what
//                    snapkv + kivi42 lost, docs/results/codecs-25bit/); 0 for every other codec.
// Any explicit value overrides the default. The resolved values are what the stores use and what
// .kvc files, fork keys and eval reports record.
inline constexpr double kCodecDefaultFraction = -1.0;
inline constexpr size_t kCodecDefaultCount = static_cast<size_t>(-1);
struct CacheConfig;
size_t codec_default_kivi_residual(CodecKind k);
size_t codec_default_kivi_fp16_sinks(CodecKind k);
size_t kivi_fp16_sinks_of(const CacheConfig& c);  // kivi_fp16_sinks, or the codec's default
double codec_default_zip_salient(CodecKind k);
size_t kivi_residual_of(const CacheConfig& c);  // kivi_residual, or the codec's default for 0
double zip_salient_of(const CacheConfig& c);    // zip_salient, or the codec's default

// kitty stores channel indices as uint16 (kv/codecs/kivi.h).
inline constexpr size_t kMaxKittyChannels = 65535;

struct CacheConfig {
  PolicyKind policy = PolicyKind::snapkv;
  CodecKind codec = CodecKind::fp16;

  // Budget = maximum rows kept per KV head after a compressing update (prefill history).
  size_t budget = 512;
  size_t window = 32;  // observation window (rows of queries / proxy keys); method snapkv: 24
  size_t n_sink = 4;   // first positions always kept

  // Defaults chosen by measurement on the dev seed (docs/TUNING.md: the sweep of
  // scripts/tune_defaults.sh, then "Causal pooling"): causal max pooling with kernel 11 (13 for
  // method snapkv: kv/core/method.h), the window's rows competing for the budget (PyramidKV
  // still keeps them), one compression at the end of the prompt, in every subcommand.
  PoolKind pool = PoolKind::causal_max;
  // pooling kernel, odd, >= 1 (1 with pool != none is the identity); method snapkv: 13
  size_t kernel = 11;
  bool keep_window = false;  // always keep the last `window` candidates (paper); else they compete
                             // (applies to snapkv, chunkkv, knorm, random, keydiff,
                             // expected_attention, kvzip, kvzap, kvzap_snapkv). layer_allocation
                             // pyramid keeps the window whatever this says: keeps_window() below.
  bool causal = true;        // causal mask inside the window (false: SnapKV's reference code)
  QuerySource query_source = QuerySource::auto_select;
  ChunkMode chunk_mode = ChunkMode::end_of_prompt;
  // Budget allocation, separate from scoring (any scoring policy combines with any allocation).
  HeadAllocation head_allocation = HeadAllocation::uniform;
  LayerAllocation layer_allocation = LayerAllocation::uniform;
  double ada_floor = 0.2;      // ada: fraction of `budget` every head keeps at least, in [0, 1]
  double pyramid_beta = 20.0;  // pyramid: the last layer gets budget / beta (>= 1), then clamped
                               // up to the floor of kv/core/allocation.h
  // duo (kv/core/head_types.h): the fraction in [0, 1] of the model's KV heads (over all layers,
  // lowest retrieval score first) that stream, and the recent rows a streaming head keeps after
  // its n_sink sinks (capped by the layer's per-head budget). Read by the engine when it hands
  // the head types to the caches (model/head_types.h), and by the caches' selection.
  // Default 0.25: on the dev seed (11, 1K, six tasks, N = 20, shipped model: 2 of its 8 KV heads)
  // duo-snapkv keeps 49.7 / 68.4 / 72.1 at keep 0.05 / 0.1 / 0.2 (snapkv 46.4 / 68.0 / 73.0);
  // 0.5 (4 heads, one layer wholly streaming) falls to 47.5 / 57.3 / 57.2 (docs/RESULTS.md).
  double duo_streaming = 0.25;
  size_t duo_recent = 32;
  // kvzap_snapkv (kv/core/prior_mix.h): the weight in [0, 1] of kvzap's learned prior in its
  // mixture with the window's attention (0 = the window alone, 1 = the prior alone). Default 0.9,
  // chosen on the dev seeds (11 and 2, 1K and 2K, N = 20, query-aware): kvzap-proxy at keep
  // 0.05 / 0.1 / 0.2 on seed 11 at 1K keeps 13.5 / 57.9 / 72.7 (0.5: 6.7 / 48.8 / 66.3; 0.7:
  // 6.7 / 49.5 / 71.9; 0.95: 33.0 / 56.5 / 71.5; snapkv-proxy 5.0 / 48.3 / 60.4), and
  // kvzap-snapkv stays within 1.2 points of snapkv at 0.1 and 0.2 (docs/RESULTS.md).
  double prior_weight = 0.9;

  uint64_t seed = 0;      // random policy
  size_t chunk_size = 8;  // chunkkv: chunk = original position / chunk_size

  // Decode-time budget (SnapKV-D): 0 = off (decode steps append and never evict). Otherwise no
  // update leaves more than decode_budget rows per KV head: when a decode step would, the cache
  // re-selects down to decode_budget - decode_interval + 1 rows with the policy, the most recent
  // decode queries acting as the window, so re-selection happens every decode_interval steps.
  // Needs decode_budget >= n_sink + decode_interval (+ window with keep_window).
  size_t decode_budget = 0;
  size_t decode_interval = 16;

  // Codec parameters (KIVI): group size G and fp16 residual length R (R % G == 0).
  // kivi_residual 0 = the codec's own default, codec_default_kivi_residual() (what the stores,
  // .kvc files, fork keys and reports use: kivi_residual_of()).
  size_t kivi_group = 32;
  size_t kivi_residual = 0;
  // KIVI-Sink: the first kivi_fp16_sinks rows stay fp16 forever (0 = plain KIVI);
  // kCodecDefaultCount = the codec's own default (kivi_fp16_sinks_of()).
  size_t kivi_fp16_sinks = kCodecDefaultCount;
  // kivi2r/kivi4r/zipcacher: seed of the rotation's random signs (kv/codecs/rotation.h); saved in
  // .kvc files.
  uint64_t rotation_seed = 0;
  // kitty: key channels per key block kept fp16 (the largest max |x| over the block's rows);
  // must be below head_dim (checked when a store is made). Default 8: on the dev seed (2, 1K, six
  // tasks, N = 20) the smallest of 1/2/4/8 within 95% of the full cache's mean (50.4, 61.8, 66.3,
  // 70.5 vs full 74.2); it keeps a quarter of head_dim 32 in fp16 (KV 39.7% of fp16, kivi2 28%).
  size_t kitty_channels = 8;

  // zipcache, zipcacher (kv/codecs/zipcache.h): the fraction of a prompt's rows, ranked by the
  // policy's scores, stored at zip_high_bits (4, or 16 = fp16); the other rows get 2 bits.
  // kCodecDefaultFraction = the codec's own default, codec_default_zip_salient()
  // (zip_salient_of()).
  double zip_salient = kCodecDefaultFraction;
  size_t zip_high_bits = 4;
  // gear (kv/codecs/gear.h): KIVI at gear_bits (2 or 4) plus a rank-gear_rank approximation of the
  // quantization error per flushed segment (gear_rank < head_dim, checked by the store) and the
  // gear_sparse fraction of the entries with the largest remaining error kept exactly in fp16.
  size_t gear_bits = 2;
  size_t gear_rank = 2;
  double gear_sparse = 0.01;

  // Set by the cache spec's setters (kv/core/spec.h) when a front end names window or kernel, so
  // that a method's own defaults (kv/core/method.h, parse_method) leave a given value alone.
  bool window_given = false;
  bool kernel_given = false;

  // Throws std::invalid_argument "[config] <field> ..., got X, expected Y" on the first problem.
  void validate() const;
};

std::string_view to_string(PolicyKind k);
std::string_view to_string(PoolKind k);
std::string_view to_string(QuerySource k);
std::string_view to_string(ChunkMode k);
std::string_view to_string(CodecKind k);  // the canonical name (kv/core/codec_spec.h)
std::string_view to_string(HeadAllocation k);
std::string_view to_string(LayerAllocation k);

// Parsers accept exactly the names to_string produces ("auto" for auto_select) and throw
// std::invalid_argument listing the accepted names otherwise.
PolicyKind parse_policy(std::string_view s);
PoolKind parse_pool(std::string_view s);
QuerySource parse_query_source(std::string_view s);
ChunkMode parse_chunk_mode(std::string_view s);
// parse_codec goes through the codec grammar (kv/core/codec_spec.h): it accepts every name that
// parses to a built spec ("kivi44" is kivi4) and refuses a malformed or unbuilt one by name.
CodecKind parse_codec(std::string_view s);
HeadAllocation parse_head_allocation(std::string_view s);
LayerAllocation parse_layer_allocation(std::string_view s);

// Method-name prefixes for the allocations: "duo-", "ada-" and "pyramid-" (in that order, each
// optional: "duo-ada-pyramid-snapkv") set head_allocation / layer_allocation on config and return
// the rest of the name (the policy); a name without a prefix is returned unchanged and config
// untouched. "ada-snapkv" -> "snapkv"; "duo-ada-kvzip" -> head_allocation duo_ada, "kvzip".
std::string_view apply_allocation_prefix(std::string_view name, CacheConfig& config);

// Whether the last `window` candidates are forced into every selection: keep_window, or
// layer_allocation pyramid, whose deepest layers get budgets near the floor and, with the window
// competing, would keep little more than the sinks and lose the end of the prompt
// (docs/TUNING.md). Every rule that reads the window's forced rows (selection, floors, budget
// checks) goes through this.
bool keeps_window(const CacheConfig& config);

// True for the policies whose scoring reads window queries (snapkv, chunkkv, expected_attention,
// kvzap_snapkv).
bool policy_uses_queries(PolicyKind k);
// True for the policies that score every row on its own, which head_allocation ada requires
// (snapkv, knorm, keydiff, expected_attention, kvzip, kvzap, kvzip_plus, kvzap_snapkv).
bool policy_scores_rows(PolicyKind k);
// True for the policies whose prompt is compressed with scores supplied from outside
// (LayerCache::compress_with_scores): kvzip, kvzap, kvzip_plus, kvzap_snapkv.
bool policy_takes_external_scores(PolicyKind k);
// True for the policies whose external scores come from the model's learned scorer (kvzap's
// sidecar, model/kvzap.h): kvzap, kvzap_snapkv.
bool policy_uses_kvzap(PolicyKind k);

}  // namespace snapkv
