// Cache configuration: which eviction policy, its parameters, and which codec stores the kept rows.
// One CacheConfig is shared by every layer of a model (the builder copies it into each cache).
// validate() rejects inconsistent settings with std::invalid_argument naming the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace snapkv {

// Which rows survive.
enum class PolicyKind {
  full,       // keep everything (baseline)
  snapkv,     // observation-window attention scores, per KV head (SnapKV)
  streaming,  // StreamingLLM: first n_sink rows + the most recent rows
  random,     // seeded uniform choice among non-sink rows (baseline of the method notes)
  knorm,      // keep the keys with the lowest L2 norm (sinks kept)
  chunkkv,  // ChunkKV-adapted: whole chunks of chunk_size positions ranked by summed SnapKV scores
  kvzip,    // KVzip: per-row scores supplied from outside (the model's context-reconstruction pass,
            // LayerCache::compress_with_scores); needs chunk_mode end_of_prompt
};

// 1-D smoothing of the scores before selection (stride 1, odd kernel, same-length output).
// Edges: max pools over the in-range part of the kernel (padding acts as -inf); avg divides the
// in-range sum by the full kernel size (padding counts as zeros), as torch's avg_pool1d with
// count_include_pad=True does in the SnapKV reference code.
enum class PoolKind { none, max, avg };

// Where the observation window's queries come from.
enum class QuerySource {
  auto_select,  // true queries when the caller passes q_window, else the last `window` keys
  queries,      // require q_window on every prefill update of a scoring policy (snapkv,
                // chunkkv); std::invalid_argument if it is missing
  keys,         // always the last `window` keys as proxy queries (engine-agnostic mode)
};

// When the budget is enforced during a prompt that arrives in several prefill chunks.
enum class ChunkMode {
  every_chunk,    // at every prefill update, over retained + new rows (bounded peak memory)
  end_of_prompt,  // keep everything until LayerCache::end_prompt(), then compress once (paper)
};

// How kept rows are stored. fp16 is built in; KIVI codecs register under kivi2/kivi4.
enum class CodecKind { fp16, kivi2, kivi4 };

struct CacheConfig {
  PolicyKind policy = PolicyKind::snapkv;
  CodecKind codec = CodecKind::fp16;

  // Budget = maximum rows kept per KV head after a compressing update (prefill history).
  size_t budget = 512;
  size_t window = 32;  // observation window (rows of queries / proxy keys)
  size_t n_sink = 4;   // first positions always kept

  PoolKind pool = PoolKind::none;
  size_t kernel = 1;         // pooling kernel, odd, >= 1 (1 with pool != none is the identity)
  bool keep_window = false;  // always keep the last `window` candidates (paper); else they compete
                             // (applies to snapkv, chunkkv, knorm, random)
  bool causal = true;        // causal mask inside the window (false reproduces the method notes)
  QuerySource query_source = QuerySource::auto_select;
  ChunkMode chunk_mode = ChunkMode::every_chunk;
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
  size_t kivi_group = 32;
  size_t kivi_residual = 128;
  // KIVI-Sink: the first kivi_fp16_sinks rows stay fp16 forever (0 = plain KIVI).
  size_t kivi_fp16_sinks = 0;

  // Throws std::invalid_argument "[config] <field> ..., got X, expected Y" on the first problem.
  void validate() const;
};

std::string_view to_string(PolicyKind k);
std::string_view to_string(PoolKind k);
std::string_view to_string(QuerySource k);
std::string_view to_string(ChunkMode k);
std::string_view to_string(CodecKind k);

// Parsers accept exactly the names to_string produces ("auto" for auto_select) and throw
// std::invalid_argument listing the accepted names otherwise.
PolicyKind parse_policy(std::string_view s);
PoolKind parse_pool(std::string_view s);
QuerySource parse_query_source(std::string_view s);
ChunkMode parse_chunk_mode(std::string_view s);
CodecKind parse_codec(std::string_view s);

}  // namespace snapkv
