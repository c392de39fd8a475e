// CacheConfig::validate and the enum <-> name conversions used by the CLI and reports.
#include "snapkv/kv/core/config.h"

#include <array>
#include <string>
#include <utility>

#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

namespace snapkv {
namespace {

template <typename Enum, size_t N>
Enum parse_enum(std::string_view s, const std::array<std::pair<std::string_view, Enum>, N>& names,
                std::string_view what) {
  std::string accepted;
  for (const auto& [name, value] : names) {
    if (s == name) return value;
    if (!accepted.empty()) accepted += '|';
    accepted += name;
  }
  std::string got(1, '\'');  // built by appends: GCC 12 misfires -Wrestrict on "'" + string
  got += s;
  got += '\'';
  throw_invalid("config", "unknown " + std::string(what), got, accepted);
}

template <typename Enum, size_t N>
std::string_view enum_name(Enum k, const std::array<std::pair<std::string_view, Enum>, N>& names) {
  for (const auto& [name, value] : names) {
    if (value == k) return name;
  }
  return "unknown";
}

constexpr std::array<std::pair<std::string_view, PolicyKind>, 12> kPolicyNames{{
    {"full", PolicyKind::full},
    {"snapkv", PolicyKind::snapkv},
    {"streaming", PolicyKind::streaming},
    {"random", PolicyKind::random},
    {"knorm", PolicyKind::knorm},
    {"chunkkv", PolicyKind::chunkkv},
    {"keydiff", PolicyKind::keydiff},
    {"expected_attention", PolicyKind::expected_attention},
    {"kvzip", PolicyKind::kvzip},
    {"kvzap", PolicyKind::kvzap},
    {"kvzip_plus", PolicyKind::kvzip_plus},
    {"kvzap_snapkv", PolicyKind::kvzap_snapkv},
}};
constexpr std::array<std::pair<std::string_view, HeadAllocation>, 4> kHeadAllocationNames{{
    {"uniform", HeadAllocation::uniform},
    {"ada", HeadAllocation::ada},
    {"duo", HeadAllocation::duo},
    {"duo_ada", HeadAllocation::duo_ada},
}};
constexpr std::array<std::pair<std::string_view, LayerAllocation>, 2> kLayerAllocationNames{{
    {"uniform", LayerAllocation::uniform},
    {"pyramid", LayerAllocation::pyramid},
}};
constexpr std::array<std::pair<std::string_view, PoolKind>, 4> kPoolNames{{
    {"none", PoolKind::none},
    {"max", PoolKind::max},
    {"avg", PoolKind::avg},
    {"causal_max", PoolKind::causal_max},
}};
constexpr std::array<std::pair<std::string_view, QuerySource>, 3> kQuerySourceNames{{
    {"auto", QuerySource::auto_select},
    {"queries", QuerySource::queries},
    {"keys", QuerySource::keys},
}};
constexpr std::array<std::pair<std::string_view, ChunkMode>, 2> kChunkModeNames{{
    {"every_chunk", ChunkMode::every_chunk},
    {"end_of_prompt", ChunkMode::end_of_prompt},
}};

template <typename Enum, size_t N>
void check_enum(Enum k, const std::array<std::pair<std::string_view, Enum>, N>& names,
                std::string_view field) {
  for (const auto& entry : names) {
    if (entry.second == k) return;
  }
  std::string accepted;
  for (const auto& entry : names) {
    if (!accepted.empty()) accepted += '|';
    accepted += entry.first;
  }
  throw_invalid("config", std::string(field) + " is not a known value",
                std::to_string(static_cast<int>(k)), accepted);
}

}  // namespace

void CacheConfig::validate() const {
  check_enum(policy, kPolicyNames, "policy");
  if (!codec_is_built(codec)) {
    throw_invalid("config", "codec is not a known value", std::to_string(static_cast<int>(codec)),
                  built_codec_names());
  }
  check_enum(pool, kPoolNames, "pool");
  check_enum(query_source, kQuerySourceNames, "query_source");
  check_enum(chunk_mode, kChunkModeNames, "chunk_mode");
  check_enum(head_allocation, kHeadAllocationNames, "head_allocation");
  check_enum(layer_allocation, kLayerAllocationNames, "layer_allocation");
  if (!(ada_floor >= 0.0 && ada_floor <= 1.0)) {
    throw_invalid("config", "ada_floor out of range", std::to_string(ada_floor), "[0, 1]");
  }
  if (!(pyramid_beta >= 1.0 && pyramid_beta <= 1e6)) {
    throw_invalid("config", "pyramid_beta out of range", std::to_string(pyramid_beta), "[1, 1e6]");
  }
  if (head_allocation_ada(head_allocation) && policy != PolicyKind::full &&
      !policy_scores_rows(policy)) {
    throw_invalid("config",
                  "head_allocation " + std::string(to_string(head_allocation)) +
                      " needs a policy that scores rows",
                  std::string(to_string(policy)),
                  "snapkv|knorm|keydiff|expected_attention|kvzip|kvzip_plus|kvzap|kvzap_snapkv");
  }
  if (head_allocation_duo(head_allocation) && policy == PolicyKind::streaming) {
    throw_invalid("config",
                  "head_allocation " + std::string(to_string(head_allocation)) +
                      " needs a policy that chooses rows (streaming heads already are streaming)",
                  "policy streaming", "any other evicting policy");
  }
  if (!(duo_streaming >= 0.0 && duo_streaming <= 1.0)) {
    throw_invalid("config", "duo_streaming out of range", std::to_string(duo_streaming), "[0, 1]");
  }
  if (duo_recent == 0) throw_invalid("config", "duo_recent must be positive", "0", ">= 1");
  if (!(prior_weight >= 0.0 && prior_weight <= 1.0)) {
    throw_invalid("config", "prior_weight out of range", std::to_string(prior_weight), "[0, 1]");
  }

  if (window == 0) throw_invalid("config", "window must be positive", "0", ">= 1");
  if (kernel == 0 || kernel % 2 == 0) {
    throw_invalid("config", "kernel must be odd", num(kernel), "an odd number >= 1");
  }
  if (chunk_size == 0) throw_invalid("config", "chunk_size must be positive", "0", ">= 1");
  if (policy != PolicyKind::full) {
    if (budget == 0) throw_invalid("config", "budget must be positive", "0", ">= 1");
    if (budget < n_sink) {
      throw_invalid("config", "budget must hold the sinks", "budget " + num(budget),
                    ">= n_sink = " + num(n_sink));
    }
    if (keeps_window(*this) && budget < n_sink + window) {
      throw_invalid("config", "budget must hold the sinks and the kept window",
                    "budget " + num(budget),
                    ">= n_sink + window = " + num(n_sink) + " + " + num(window));
    }
  }
  if (policy_takes_external_scores(policy) && chunk_mode != ChunkMode::end_of_prompt) {
    throw_invalid("config",
                  "policy " + std::string(to_string(policy)) +
                      " scores the whole prompt once (a pass over the prompt)",
                  "chunk_mode " + std::string(to_string(chunk_mode)), "end_of_prompt");
  }
  if (decode_budget > 0) {
    if (policy == PolicyKind::full) {
      throw_invalid("config", "decode_budget needs an evicting policy", "policy full",
                    "snapkv|streaming|random|knorm|chunkkv|kvzip|kvzip_plus|kvzap|kvzap_snapkv, or "
                    "decode_budget "
                    "0");
    }
    if (decode_interval == 0) {
      throw_invalid("config", "decode_interval must be positive", "0", ">= 1");
    }
    const bool kept = keeps_window(*this);
    const size_t floor = n_sink + decode_interval + (kept ? window : 0);
    if (decode_budget < floor) {
      throw_invalid("config",
                    "decode_budget must hold the sinks, one interval of new rows" +
                        std::string(kept ? " and the kept window" : ""),
                    "decode_budget " + num(decode_budget),
                    ">= n_sink + decode_interval" + std::string(kept ? " + window" : "") + " = " +
                        num(floor));
    }
  }
  // Codec fields are checked whatever the codec, so a config stays valid when the codec changes.
  if (kivi_group == 0) throw_invalid("config", "kivi_group must be positive", "0", ">= 1");
  if (kivi_residual_of(*this) % kivi_group != 0) {
    throw_invalid("config", "kivi_residual must be a multiple of kivi_group",
                  "kivi_residual " + num(kivi_residual_of(*this)) +
                      (kivi_residual == 0 ? " (the codec's default)" : ""),
                  "a multiple of kivi_group = " + num(kivi_group));
  }
  if (codec == CodecKind::kitty && kitty_channels == 0) {
    throw_invalid("config", "kitty_channels must be positive for codec kitty", "0",
                  ">= 1 and < head_dim (kivi2 keeps none)");
  }
  if (kitty_channels > kMaxKittyChannels) {
    throw_invalid("config", "kitty_channels too large", num(kitty_channels),
                  "<= " + num(kMaxKittyChannels) + " and < head_dim");
  }
  if (zip_salient != kCodecDefaultFraction && !(zip_salient >= 0.0 && zip_salient <= 1.0)) {
    throw_invalid("config", "zip_salient out of range", std::to_string(zip_salient),
                  "[0, 1] (or kCodecDefaultFraction = -1: the codec's default)");
  }
  if (zip_high_bits != 4 && zip_high_bits != 16) {
    throw_invalid("config", "zip_high_bits unsupported", num(zip_high_bits), "4 or 16 (fp16)");
  }
  if (gear_bits != 2 && gear_bits != 4) {
    throw_invalid("config", "gear_bits unsupported", num(gear_bits), "2 or 4");
  }
  if (!(gear_sparse >= 0.0 && gear_sparse <= 1.0)) {
    throw_invalid("config", "gear_sparse out of range", std::to_string(gear_sparse), "[0, 1]");
  }
  if (gear_rank > 64) {
    throw_invalid("config", "gear_rank too large", num(gear_rank), "<= 64 (and < head_dim)");
  }
}

std::string_view to_string(PolicyKind k) {
  return enum_name(k, kPolicyNames);
}
std::string_view to_string(PoolKind k) {
  return enum_name(k, kPoolNames);
}
std::string_view to_string(QuerySource k) {
  return enum_name(k, kQuerySourceNames);
}
std::string_view to_string(ChunkMode k) {
  return enum_name(k, kChunkModeNames);
}

std::string_view to_string(HeadAllocation k) {
  return enum_name(k, kHeadAllocationNames);
}
std::string_view to_string(LayerAllocation k) {
  return enum_name(k, kLayerAllocationNames);
}

HeadAllocation parse_head_allocation(std::string_view s) {
  return parse_enum(s, kHeadAllocationNames, "head allocation");
}
LayerAllocation parse_layer_allocation(std::string_view s) {
  return parse_enum(s, kLayerAllocationNames, "layer allocation");
}

bool head_allocation_ada(HeadAllocation k) {
  return k == HeadAllocation::ada || k == HeadAllocation::duo_ada;
}

bool head_allocation_duo(HeadAllocation k) {
  return k == HeadAllocation::duo || k == HeadAllocation::duo_ada;
}

std::string_view apply_allocation_prefix(std::string_view name, CacheConfig& config) {
  constexpr std::string_view kDuo = "duo-", kAda = "ada-", kPyramid = "pyramid-";
  bool duo = false;
  if (name.starts_with(kDuo)) {
    duo = true;
    config.head_allocation = HeadAllocation::duo;
    name.remove_prefix(kDuo.size());
  }
  if (name.starts_with(kAda)) {
    config.head_allocation = duo ? HeadAllocation::duo_ada : HeadAllocation::ada;
    name.remove_prefix(kAda.size());
  }
  if (name.starts_with(kPyramid)) {
    config.layer_allocation = LayerAllocation::pyramid;
    name.remove_prefix(kPyramid.size());
  }
  return name;
}

bool keeps_window(const CacheConfig& config) {
  return config.keep_window || config.layer_allocation == LayerAllocation::pyramid;
}

bool policy_uses_queries(PolicyKind k) {
  return k == PolicyKind::snapkv || k == PolicyKind::chunkkv ||
         k == PolicyKind::expected_attention || k == PolicyKind::kvzap_snapkv;
}

size_t kivi_fp16_sinks_of(const CacheConfig& c) {
  return c.kivi_fp16_sinks != kCodecDefaultCount ? c.kivi_fp16_sinks
                                                 : codec_default_kivi_fp16_sinks(c.codec);
}

size_t kivi_residual_of(const CacheConfig& c) {
  return c.kivi_residual != 0 ? c.kivi_residual : codec_default_kivi_residual(c.codec);
}

double zip_salient_of(const CacheConfig& c) {
  return c.zip_salient != kCodecDefaultFraction ? c.zip_salient
                                                : codec_default_zip_salient(c.codec);
}

bool policy_scores_rows(PolicyKind k) {
  return k == PolicyKind::snapkv || k == PolicyKind::knorm || k == PolicyKind::keydiff ||
         k == PolicyKind::expected_attention || policy_takes_external_scores(k);
}

bool policy_takes_external_scores(PolicyKind k) {
  return k == PolicyKind::kvzip || k == PolicyKind::kvzap || k == PolicyKind::kvzip_plus ||
         k == PolicyKind::kvzap_snapkv;
}

bool policy_uses_kvzap(PolicyKind k) {
  return k == PolicyKind::kvzap || k == PolicyKind::kvzap_snapkv;
}

PolicyKind parse_policy(std::string_view s) {
  return parse_enum(s, kPolicyNames, "policy");
}
PoolKind parse_pool(std::string_view s) {
  return parse_enum(s, kPoolNames, "pool");
}
QuerySource parse_query_source(std::string_view s) {
  return parse_enum(s, kQuerySourceNames, "query source");
}
ChunkMode parse_chunk_mode(std::string_view s) {
  return parse_enum(s, kChunkModeNames, "chunk mode");
}

}  // namespace snapkv
