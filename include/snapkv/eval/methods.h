// Evaluation method names -> CacheConfig, and the per-sample budget rule of `snapkv eval`.
//
// Names: full, snapkv (true queries), snapkv-proxy (key-as-query), streaming, chunkkv, knorm,
// random, kvzip (context-reconstruction scores, model/kvzip.h), keydiff, expected_attention (true
// window queries), expected_attention-proxy (keys as the query sample), and the codecs kivi2 /
// kivi4 (policy full + that codec). "<policy>+<codec>" stacks a codec on a policy (snapkv+kivi2,
// streaming+kivi4, full+kivi2 == kivi2). Budget allocation prefixes (kv/core/allocation.h): "ada-"
// (AdaKV across the KV heads of a layer; policies that score rows: snapkv, snapkv-proxy, knorm,
// keydiff, expected_attention[-proxy]), "pyramid-" (PyramidKV across layers; any evicting policy),
// "ada-pyramid-" (both): ada-snapkv, pyramid-keydiff+kivi2. The budget below is the per-head budget
// of the uniform allocation; ada and pyramid keep the same total rows (per layer, and over the
// layers).
// Every other codec of kv/core/config.h is a method name too (kivi2r, kivi4r, kitty, ...).
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

#include "snapkv/kv/core/config.h"

namespace snapkv::eval {

// Settings shared by every method of a run (the eviction knobs of CacheConfig); the defaults are
// CacheConfig's own, so eval, run, bench and the library agree.
struct MethodDefaults {
  size_t window = CacheConfig{}.window;  // observation window
  size_t n_sink = CacheConfig{}.n_sink;
  PoolKind pool = CacheConfig{}.pool;
  size_t kernel = CacheConfig{}.kernel;
  bool keep_window = CacheConfig{}.keep_window;
  ChunkMode chunk_mode = CacheConfig{}.chunk_mode;
  size_t chunk_size = CacheConfig{}.chunk_size;            // chunkkv
  uint64_t seed = CacheConfig{}.seed;                      // random policy
  uint64_t rotation_seed = CacheConfig{}.rotation_seed;    // kivi2r / kivi4r / zipcacher
  size_t kitty_channels = CacheConfig{}.kitty_channels;    // kitty
  size_t kivi_residual = CacheConfig{}.kivi_residual;      // fp16 residual / zipcache segment
  size_t kivi_group = CacheConfig{}.kivi_group;            // KIVI group G
  size_t kivi_fp16_sinks = CacheConfig{}.kivi_fp16_sinks;  // KIVI-Sink rows kept fp16
  // Decode-time budget (CacheConfig::decode_budget / decode_interval), applied to every evicting
  // method (the full-cache baselines stay full); 0 = off.
  size_t decode_budget = CacheConfig{}.decode_budget;
  size_t decode_interval = CacheConfig{}.decode_interval;
  // Codec parameters (kv/core/config.h), copied into every method's config whatever its codec.
  double zip_salient = CacheConfig{}.zip_salient;
  size_t zip_high_bits = CacheConfig{}.zip_high_bits;
  size_t gear_bits = CacheConfig{}.gear_bits;
  size_t gear_rank = CacheConfig{}.gear_rank;
  double gear_sparse = CacheConfig{}.gear_sparse;
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
