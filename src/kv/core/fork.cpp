// The shared-prefill rules (kv/core/fork.h).
#include "snapkv/kv/core/fork.h"

#include <algorithm>
#include <string>

#include "snapkv/util/text.h"

namespace snapkv {

bool wants_window_queries(const CacheConfig& config) {
  if (config.query_source == QuerySource::keys) return false;
  // zipcache routes rows by the window's attention when the policy hands it no scores.
  if (codec_routes_rows(config.codec)) return true;
  return config.policy != PolicyKind::full && policy_uses_queries(config.policy);
}

bool can_be_fork_base(const CacheConfig& config) {
  return config.chunk_mode == ChunkMode::end_of_prompt && config.policy != PolicyKind::full;
}

std::optional<ForkKey> fork_key(const CacheConfig& c) {
  if (c.chunk_mode != ChunkMode::end_of_prompt) return std::nullopt;
  ForkKey key{c.codec, c.kivi_group, kivi_residual_of(c), kivi_fp16_sinks_of(c), c.window};
  if (codec_is_rotated(c.codec)) {
    key.rotation_seed = c.rotation_seed;
  }
  if (c.codec == CodecKind::kitty) key.kitty_channels = c.kitty_channels;
  if (codec_routes_rows(c.codec)) {
    key.zip_salient = zip_salient_of(c);
    key.zip_high_bits = c.zip_high_bits;
  } else if (c.codec == CodecKind::gear) {
    key.gear_sparse = c.gear_sparse;
    key.gear_bits = c.gear_bits;
    key.gear_rank = c.gear_rank;
  }
  return key;
}

std::string to_string(const ForkKey& k) {
  std::string out = std::string(to_string(k.codec)) + "/" + num(k.kivi_group) + "/" +
                    num(k.kivi_residual) + "/" + num(k.kivi_fp16_sinks) + "/w" + num(k.window);
  if (codec_routes_rows(k.codec)) {
    out += "/s" + std::to_string(k.zip_salient) + "/h" + num(k.zip_high_bits);
  } else if (k.codec == CodecKind::gear) {
    out += "/r" + num(k.gear_rank) + "/p" + std::to_string(k.gear_sparse) + "/b" + num(k.gear_bits);
  }
  if (k.rotation_seed != 0) out += "/r" + std::to_string(k.rotation_seed);
  if (k.kitty_channels != 0) out += "/k" + num(k.kitty_channels);
  return out;
}

std::optional<ForkRefusal> fork_refusal(const CacheConfig& base, const CacheConfig& target,
                                        bool base_has_queries) {
  if (!can_be_fork_base(base)) {
    return ForkRefusal{"fork base cannot hold an open prompt",
                       "policy " + std::string(to_string(base.policy)) + ", chunk_mode " +
                           std::string(to_string(base.chunk_mode)),
                       "an evicting policy with chunk_mode end_of_prompt"};
  }
  const std::optional<ForkKey> target_key = fork_key(target);
  if (!target_key) {
    return ForkRefusal{"fork target chunk_mode", std::string(to_string(target.chunk_mode)),
                       "end_of_prompt (every_chunk compresses during the prefill)"};
  }
  const ForkKey base_key = *fork_key(base);
  if (target_key->codec != base_key.codec || target_key->kivi_group != base_key.kivi_group ||
      target_key->kivi_residual != base_key.kivi_residual ||
      target_key->kivi_fp16_sinks != base_key.kivi_fp16_sinks ||
      target_key->rotation_seed != base_key.rotation_seed ||
      target_key->kitty_channels != base_key.kitty_channels ||
      target_key->zip_salient != base_key.zip_salient ||
      target_key->zip_high_bits != base_key.zip_high_bits ||
      target_key->gear_sparse != base_key.gear_sparse ||
      target_key->gear_bits != base_key.gear_bits || target_key->gear_rank != base_key.gear_rank) {
    return ForkRefusal{"fork target codec differs from the prefilled cache's",
                       std::string(to_string(target.codec)),
                       std::string(to_string(base.codec)) +
                           " with the same KIVI, rotation, kitty, zipcache and gear parameters"};
  }
  if (target_key->window != base_key.window) {
    return ForkRefusal{"fork target window differs from the prefilled cache's", num(target.window),
                       num(base.window)};
  }
  if (wants_window_queries(target) && !base_has_queries) {
    return ForkRefusal{"fork target scores with queries but none were kept", "no window queries",
                       "a prefill that passed q_window"};
  }
  return std::nullopt;
}

bool can_fork(const CacheConfig& base, const CacheConfig& target) {
  return !fork_refusal(base, target, wants_window_queries(base)).has_value();
}

CacheConfig fork_base_config(const CacheConfig& target, size_t prompt_tokens) {
  CacheConfig base = target;
  base.policy = PolicyKind::snapkv;
  base.query_source = QuerySource::auto_select;  // keeps the window's queries for every target
  base.chunk_mode = ChunkMode::end_of_prompt;
  base.budget = std::max(base.budget, prompt_tokens);
  return base;
}

}  // namespace snapkv
