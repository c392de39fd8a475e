// The C ABI (include/snapkv/snapkv.h) over the C++ cache library: a model's LayerCaches built from
// a key=value configuration string, exceptions turned into status codes plus a thread-local
// message. Every entry point validates its pointers and indices before touching the caches, and
// the C++ layer below leaves a cache unchanged when it throws, so a failed call changes nothing.
#include "snapkv/snapkv.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "capi_internal.h"
#include "snapkv/kv/core/builder.h"
#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/spec.h"
#include "snapkv/util/error.h"
#include "snapkv/util/text.h"

struct snapkv_caches {
  snapkv::ModelDims dims;
  std::vector<snapkv::LayerCache> layers;
};

namespace snapkv::capi {
namespace {
thread_local std::string g_last_error;
}  // namespace

void set_last_error(std::string message) {
  g_last_error = std::move(message);
}
void clear_last_error() {
  g_last_error.clear();
}
const char* last_error_text() {
  return g_last_error.c_str();
}

snapkv_stats to_c(const CacheStats& s) {
  snapkv_stats out{};
  out.tokens_seen = s.tokens_seen;
  out.tokens_kept = s.tokens_kept;
  out.bytes_stored = s.bytes_stored;
  out.bytes_full_fp16 = s.bytes_full_fp16;
  out.eviction_ratio = s.eviction_ratio();
  out.keep_rate = s.keep_rate();
  return out;
}

void require(bool ok, std::string_view what, std::string_view got, std::string_view expected) {
  if (!ok) throw_invalid(kComponent, what, got, expected);
}

ConfigText parse_config_text(const char* text) {
  ConfigText c;
  const std::string_view s = text == nullptr ? std::string_view() : std::string_view(text);
  size_t i = 0;
  std::vector<std::string> seen;
  while (i < s.size()) {
    const auto is_sep = [](char ch) { return ch == ' ' || ch == ',' || ch == ';' || ch == '\t'; };
    while (i < s.size() && is_sep(s[i])) ++i;
    if (i == s.size()) break;
    size_t j = i;
    while (j < s.size() && !is_sep(s[j])) ++j;
    const std::string_view item = s.substr(i, j - i);
    i = j;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      throw_invalid(kComponent, "config item is not key=value", "'" + std::string(item) + "'",
                    "key=value (e.g. budget=256)");
    }
    const std::string_view raw_key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    const CacheOption* option = find_cache_option(raw_key);
    const std::string key(option != nullptr ? option->name : raw_key);
    for (const std::string& k : seen) {
      if (k == key) {
        throw_invalid(kComponent, "config key given twice", "'" + key + "'",
                      "each key at most once");
      }
    }
    seen.push_back(key);
    if (key == "method") {
      c.method = std::string(value);
      (void)parse_method(*c.method);  // an unknown name fails here
    } else if (key == "keep") {
      c.keep = parse_keeps(value).at(0);
      require(parse_keeps(value).size() == 1, "keep", std::string(value), "one fraction");
    } else if (key == "prompt_tokens") {
      const OptionValue v = parse_option_value(*find_cache_option("budget"), value);
      c.prompt_tokens = static_cast<size_t>(std::get<uint64_t>(v));
    } else if (option == nullptr) {
      throw_invalid(kComponent, "unknown config key", "'" + key + "'",
                    "one of method keep prompt_tokens " + cache_option_names());
    } else if (key == "budget") {
      c.budget = static_cast<size_t>(std::get<uint64_t>(parse_option_value(*option, value)));
    } else {
      c.options.emplace_back(option, parse_option_value(*option, value));
    }
  }
  if (c.keep && c.budget) {
    throw_invalid(kComponent, "keep and budget both given", "both", "at most one of them");
  }
  return c;
}

CacheConfig ConfigText::resolve(size_t tokens, const char* default_method,
                                std::optional<double> default_keep) const {
  bool names_policy = method.has_value();
  for (const auto& [o, v] : options) names_policy = names_policy || o->group == OptionGroup::method;
  std::optional<std::string> m = method;
  if (!names_policy && default_method != nullptr) m = default_method;
  std::optional<double> k = keep;
  if (!keep && !budget && !names_policy) k = default_keep;
  // Knobs first, then the method name over them, then the method-group keys given explicitly.
  CacheConfig knobs;
  for (const auto& [o, v] : options) {
    if (o->group != OptionGroup::method) o->set(knobs, v);
  }
  Method parsed{"", knobs, true};
  if (m) parsed = parse_method(*m, knobs);
  CacheConfig c = parsed.config;
  for (const auto& [o, v] : options) {
    if (o->group == OptionGroup::method) o->set(c, v);
  }
  if (k) {
    const size_t t = tokens != 0 ? tokens : prompt_tokens.value_or(0);
    require(t != 0, "keep without a prompt length", "keep=" + format_option_value(OptionValue{*k}),
            "prompt_tokens=N beside it (or budget=N)");
    c.budget = parsed.uses_keep ? budget_for(*k, t, c) : std::max<size_t>(t, 1);
  } else if (budget) {
    c.budget = *budget;
  }
  c.validate();
  return c;
}

}  // namespace snapkv::capi

namespace {

using snapkv::num;
using snapkv::capi::guarded;
using snapkv::capi::require;
using snapkv::capi::to_c;

const snapkv::LayerCache& layer_of(const snapkv_caches* caches, size_t layer) {
  require(caches != nullptr, "caches", "NULL", "caches from snapkv_caches_create");
  require(layer < caches->layers.size(), "layer index out of range", num(layer),
          "< n_layers = " + num(caches->layers.size()));
  return caches->layers[layer];
}

}  // namespace

extern "C" {

const char* snapkv_version(void) {
  return SNAPKV_VERSION_STRING;
}

int snapkv_version_number(void) {
  return SNAPKV_VERSION_NUMBER;
}

const char* snapkv_status_name(snapkv_status status) {
  switch (status) {
    case SNAPKV_OK:
      return "ok";
    case SNAPKV_INVALID_ARGUMENT:
      return "invalid argument";
    case SNAPKV_RUNTIME_ERROR:
      return "runtime error";
    case SNAPKV_OUT_OF_MEMORY:
      return "out of memory";
    case SNAPKV_INTERNAL_ERROR:
      return "internal error";
  }
  return "unknown status";
}

const char* snapkv_last_error(void) {
  return snapkv::capi::last_error_text();
}

snapkv_status snapkv_caches_create(const snapkv_model_dims* dims, const char* config,
                                   snapkv_caches** out) {
  return guarded([&] {
    require(out != nullptr, "out", "NULL", "a pointer to receive the caches");
    *out = nullptr;
    require(dims != nullptr, "dims", "NULL", "a snapkv_model_dims");
    const snapkv::CacheConfig c = snapkv::capi::parse_config_text(config).resolve(0);
    const snapkv::ModelDims d{dims->n_layers, dims->n_heads, dims->n_kv_heads, dims->head_dim};
    auto caches = std::make_unique<snapkv_caches>();
    caches->dims = d;
    caches->layers = snapkv::build_caches(d, c);
    *out = caches.release();
  });
}

void snapkv_caches_free(snapkv_caches* caches) {
  delete caches;
}

snapkv_status snapkv_update(snapkv_caches* caches, size_t layer, const float* k, const float* v,
                            size_t n_tokens, const float* q_window, size_t n_window, int kind) {
  return guarded([&] {
    layer_of(caches, layer);
    require(
        kind == SNAPKV_UPDATE_AUTO || kind == SNAPKV_UPDATE_PREFILL || kind == SNAPKV_UPDATE_DECODE,
        "update kind", std::to_string(kind), "0 (auto), 1 (prefill) or 2 (decode)");
    const snapkv::ModelDims& d = caches->dims;
    const snapkv::Tensor3 kt{k, d.n_kv_heads, n_tokens, d.head_dim};
    const snapkv::Tensor3 vt{v, d.n_kv_heads, n_tokens, d.head_dim};
    const snapkv::Tensor3 qt{q_window, d.n_heads, n_window, d.head_dim};
    if (q_window != nullptr) require(n_window > 0, "n_window", "0 with a q_window", ">= 1");
    const auto cpp_kind = kind == SNAPKV_UPDATE_PREFILL  ? snapkv::UpdateKind::prefill
                          : kind == SNAPKV_UPDATE_DECODE ? snapkv::UpdateKind::decode
                                                         : snapkv::UpdateKind::automatic;
    caches->layers[layer].update(kt, vt, q_window != nullptr ? &qt : nullptr, cpp_kind);
  });
}

snapkv_status snapkv_attend(const snapkv_caches* caches, size_t layer, float* out, const float* q,
                            const float* k, const float* v, size_t n_tokens) {
  return guarded([&] {
    const snapkv::LayerCache& cache = layer_of(caches, layer);
    const snapkv::ModelDims& d = caches->dims;
    cache.attend(out, snapkv::Tensor3{q, d.n_heads, n_tokens, d.head_dim},
                 snapkv::Tensor3{k, d.n_kv_heads, n_tokens, d.head_dim},
                 snapkv::Tensor3{v, d.n_kv_heads, n_tokens, d.head_dim});
  });
}

snapkv_status snapkv_end_prompt(snapkv_caches* caches) {
  return guarded([&] {
    require(caches != nullptr, "caches", "NULL", "caches from snapkv_caches_create");
    for (snapkv::LayerCache& c : caches->layers) c.end_prompt();
  });
}

snapkv_status snapkv_layer_stats(const snapkv_caches* caches, size_t layer, snapkv_stats* out) {
  return guarded([&] {
    const snapkv::LayerCache& cache = layer_of(caches, layer);
    require(out != nullptr, "out", "NULL", "a snapkv_stats to fill");
    *out = to_c(cache.stats());
  });
}

snapkv_status snapkv_total_stats(const snapkv_caches* caches, snapkv_stats* out) {
  return guarded([&] {
    require(caches != nullptr, "caches", "NULL", "caches from snapkv_caches_create");
    require(out != nullptr, "out", "NULL", "a snapkv_stats to fill");
    *out = to_c(snapkv::total_stats(caches->layers));
  });
}

snapkv_status snapkv_kept_positions(const snapkv_caches* caches, size_t layer, size_t kv_head,
                                    int64_t* out, size_t capacity, size_t* n_out) {
  return guarded([&] {
    const snapkv::LayerCache& cache = layer_of(caches, layer);
    require(n_out != nullptr, "n_out", "NULL", "a pointer to receive the count");
    require(out != nullptr || capacity == 0, "out", "NULL with capacity " + num(capacity),
            "a buffer of capacity positions");
    const auto pos = cache.positions(kv_head);  // checks kv_head
    const size_t n = std::min(capacity, pos.size());
    if (n > 0) std::memcpy(out, pos.data(), n * sizeof(int64_t));
    *n_out = pos.size();
  });
}

}  // extern "C"
