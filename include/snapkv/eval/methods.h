// Evaluation method names -> CacheConfig, and the per-sample budget rule of `snapkv eval`.
//
// Names: full, snapkv (true queries), snapkv-proxy (key-as-query), streaming, chunkkv, knorm,
// random, kvzip (context-reconstruction scores, model/kvzip.h), and the codecs kivi2 / kivi4
// (policy full + that codec). "<policy>+<codec>" stacks a codec on a policy (snapkv+kivi2,
// streaming+kivi4, full+kivi2 == kivi2).
//
// Budget rule (per sample): the compressed part of the prompt has T tokens (the whole prompt in the
// query-aware protocol, the context alone in the question-agnostic one);
//   budget = max(ceil(keep * T), floor)   floor = n_sink + window when keep_window, else n_sink + 1
// (a budget >= T evicts nothing). Methods whose policy is full (full, kivi2,
// kivi4) ignore keep: they are run once and reported identically for every keep.
// Leaves out: running anything (harness.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/kv/config.h"

namespace snapkv::eval {

// Settings shared by every method of a run (the eviction knobs of CacheConfig).
struct MethodDefaults {
  size_t window = 32;  // observation window
  size_t n_sink = 4;
  PoolKind pool = PoolKind::max;
  size_t kernel = 7;
  bool keep_window = true;                          // paper: the window's own rows are always kept
  ChunkMode chunk_mode = ChunkMode::end_of_prompt;  // paper: compress once, at the end
  size_t chunk_size = 8;                            // chunkkv
  uint64_t seed = 0;                                // random policy
  // Decode-time budget (CacheConfig::decode_budget / decode_interval), applied to every evicting
  // method (the full-cache baselines stay full); 0 = off.
  size_t decode_budget = 0;
  size_t decode_interval = 16;
};

struct Method {
  std::string name;       // as given ("snapkv+kivi2")
  CacheConfig config;     // budget left at its default; see budget_for()
  bool uses_keep = true;  // false when the policy is full (keep is ignored)
};

// Parses one name; throws std::invalid_argument "[eval] unknown method ..." listing the names.
Method parse_method(std::string_view name, const MethodDefaults& defaults);
// Comma-separated list ("full,snapkv,kivi2"); empty items and duplicates are rejected.
std::vector<Method> parse_methods(std::string_view list, const MethodDefaults& defaults);
// Comma-separated kept fractions in (0, 1]; throws std::invalid_argument otherwise.
std::vector<double> parse_keeps(std::string_view list);

// The budget rule above. keep in (0, 1], compressed_tokens >= 1.
size_t budget_for(double keep, size_t compressed_tokens, const CacheConfig& config);

// Splits a comma-separated list, trimming spaces; "" gives {}.
std::vector<std::string> split_list(std::string_view list);

}  // namespace snapkv::eval
