// Shared by the C ABI's files (src/capi/): the config string parser and the guard that turns
// C++ exceptions into status codes and the thread's last-error message.
// Leaves out: the entry points (capi.cpp: caches; capi_model.cpp: model, generation, documents).
#pragma once

#include <cstddef>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "snapkv/kv/core/config.h"
#include "snapkv/kv/core/layer_cache.h"
#include "snapkv/kv/core/method.h"
#include "snapkv/kv/core/spec.h"
#include "snapkv/snapkv.h"
#include "snapkv/util/error.h"

namespace snapkv::capi {

inline constexpr std::string_view kComponent = "capi";

// A parsed config string: the keys of the cache spec plus method=, keep=, budget= and
// prompt_tokens= (snapkv.h).
struct ConfigText {
  std::optional<std::string> method;
  std::optional<double> keep;
  std::optional<size_t> budget;
  std::optional<size_t> prompt_tokens;
  // Every spec key given (canonical name, value), in order.
  std::vector<std::pair<const CacheOption*, OptionValue>> options;

  // The config for a prompt of `tokens` tokens (0: unknown; keep then needs prompt_tokens=).
  // default_method / default_keep apply when the string names no method, policy, keep or budget
  // (the model-level calls: generation.h's shared defaults); nullptr / nullopt: CacheConfig's.
  CacheConfig resolve(size_t tokens, const char* default_method = nullptr,
                      std::optional<double> default_keep = std::nullopt) const;
};

// "key=value key=value, key=value; ..." (NULL or "" = nothing given). Throws
// std::invalid_argument naming the item.
ConfigText parse_config_text(const char* text);

void require(bool ok, std::string_view what, std::string_view got, std::string_view expected);

void set_last_error(std::string message);
void clear_last_error();
const char* last_error_text();

snapkv_stats to_c(const CacheStats& s);

// Runs fn, mapping every exception to a status and the thread's message.
template <class Fn>
snapkv_status guarded(Fn&& fn) noexcept {
  try {
    fn();
    clear_last_error();
    return SNAPKV_OK;
  } catch (const std::invalid_argument& e) {
    set_last_error(e.what());
    return SNAPKV_INVALID_ARGUMENT;
  } catch (const snapkv::RuntimeError& e) {
    set_last_error(e.what());
    return SNAPKV_RUNTIME_ERROR;
  } catch (const std::bad_alloc&) {
    set_last_error("[capi] out of memory");
    return SNAPKV_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("[capi] internal error: ") + e.what());
    return SNAPKV_INTERNAL_ERROR;
  } catch (...) {
    set_last_error("[capi] internal error: unknown exception");
    return SNAPKV_INTERNAL_ERROR;
  }
}

}  // namespace snapkv::capi
