// Method names -> CacheConfig, and the keep/budget rule every front end uses (CLI, server, C ABI,
// eval).
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

namespace snapkv {

inline constexpr size_t kSnapkvWindow = 24;
inline constexpr size_t kSnapkvKernel = 13;

struct Method {
  std::string name;       // as given ("snapkv+kivi2")
  CacheConfig config;     // budget left at knobs' value; see budget_for()
  bool uses_keep = true;  // false when the policy is full (keep is ignored)
};

// Parses one name over `knobs`, the options shared by every method of a run (window, sinks,
// pooling, codec parameters, ...: kv/core/spec.h): the result is knobs with the policy, codec,
// query source and allocations the name says; its decode-time budget is knobs' for methods that
// evict and off for the others. Throws std::invalid_argument "[kv] unknown method ..." listing
// the names.
// Policy defaults: snapkv with real queries (snapkv, ada-/pyramid-/duo-snapkv, snapkv+<codec>)
// takes window kSnapkvWindow and kernel kSnapkvKernel where knobs leave them at CacheConfig's
// defaults (32, 11) and no spec setter named them (window_given, kernel_given); every other
// policy keeps 32 and 11. Chosen on the development seeds: docs/TUNING.md, "The query-aware
// default at keep 0.05 and 0.1".
Method parse_method(std::string_view name, const CacheConfig& knobs = CacheConfig{});
// Comma-separated list ("full,snapkv,kivi2"); empty items and duplicates are rejected.
std::vector<Method> parse_methods(std::string_view list, const CacheConfig& knobs = CacheConfig{});
// Comma-separated kept fractions in (0, 1]; throws std::invalid_argument otherwise.
std::vector<double> parse_keeps(std::string_view list);

// The budget rule above. keep in (0, 1], compressed_tokens >= 1.
size_t budget_for(double keep, size_t compressed_tokens, const CacheConfig& config);

// Splits a comma-separated list, trimming spaces; "" gives {}.
std::vector<std::string> split_list(std::string_view list);

}  // namespace snapkv
