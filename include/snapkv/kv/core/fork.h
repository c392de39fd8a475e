// The rules for sharing one prompt's prefill among several cache configs, in one place: which
// configs keep the window's queries, which configs can be the prefilled base, which targets can
// fork it, and the key that groups the targets one base serves. LayerCache::fork,
// LlamaSession::prefill_shared / fork and eval's SharedPrefill all ask these functions.
//
// Promises:
//  - in end_of_prompt mode the prefill forward never depends on the policy (attend() reads every
//    row), so a cache prefilled with `base` holds the same rows as one prefilled with `target`
//    whenever both store rows alike (same codec and KIVI parameters) and keep the same window of
//    queries (same window); that is fork_key();
//  - a target that scores with queries (wants_window_queries) needs a base that kept them.
// Leaves out: the cache state (an open prompt), which LayerCache::fork checks itself.
#pragma once

#include <compare>
#include <cstddef>
#include <optional>
#include <string>

#include "snapkv/kv/core/config.h"

namespace snapkv {

// True when a cache built with `config` keeps the prefill's window queries and scores with them:
// an evicting policy that reads queries (policy_uses_queries), or the codec zipcache (it ranks
// rows by the window's attention when the policy has no scores), and query_source != keys. A model
// has a reason to pass q_window on prefill updates exactly when this holds.
bool wants_window_queries(const CacheConfig& config);

// True when a cache built with `config` can be the prefilled base of forks: chunk_mode
// end_of_prompt (the prompt stays open until end_prompt()) and an evicting policy (a full-policy
// cache never opens a prompt).
bool can_be_fork_base(const CacheConfig& config);

// What a prefilled base and a fork target must agree on.
struct ForkKey {
  CodecKind codec = CodecKind::fp16;
  size_t kivi_group = 0, kivi_residual = 0, kivi_fp16_sinks = 0;
  size_t window = 0;
  uint64_t rotation_seed = 0;  // kivi2r/kivi4r/zipcacher only (0 for other codecs)
  size_t kitty_channels = 0;   // kitty only (0 for other codecs)
  // zipcache / gear parameters (the stores are made with them during the shared prefill)
  double zip_salient = 0, gear_sparse = 0;
  size_t zip_high_bits = 0, gear_bits = 0, gear_rank = 0;
  auto operator<=>(const ForkKey&) const = default;
};

// The key of a target that can fork a shared prefill; nullopt when it cannot (every_chunk
// compresses during the prefill). Targets with equal keys can fork one base.
std::optional<ForkKey> fork_key(const CacheConfig& config);

// "codec/group/residual/sinks/w<window>" (+ "/r<seed>" or "/k<channels>" for the codecs that
// use them), for messages and maps keyed by text.
std::string to_string(const ForkKey& key);

// Why a fork is refused, in the parts of a std::invalid_argument message ("what, got X, expected
// Y").
struct ForkRefusal {
  std::string what, got, expected;
};

// Why `target` cannot fork a prefill made with `base`; nullopt when it can. base_has_queries:
// whether the base kept window queries (its config wants them and the caller passed q_window).
// Checks, in order: base can be a fork base, target has a fork key, the same codec and KIVI
// parameters, the same window, and a target that wants window queries finds them.
std::optional<ForkRefusal> fork_refusal(const CacheConfig& base, const CacheConfig& target,
                                        bool base_has_queries);

// !fork_refusal(...), with base_has_queries = wants_window_queries(base).
bool can_fork(const CacheConfig& base, const CacheConfig& target);

// The base config that one prefill of `prompt_tokens` tokens uses for `target` and every config
// with the same fork_key: policy snapkv with queries auto (keeps the window's queries for every
// target), end_of_prompt, and a budget that evicts nothing. can_fork(result, target) holds for
// every target that has a fork key.
CacheConfig fork_base_config(const CacheConfig& target, size_t prompt_tokens);

}  // namespace snapkv
