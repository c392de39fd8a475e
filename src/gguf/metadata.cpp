// Typed metadata getters of File. Every failure names the key: missing, wrong type, out of range.
#include <cfloat>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>

#include "gguf/value_traits.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv::gguf {
namespace {

constexpr std::string_view kComponent = "gguf";

std::string type_label(const Value& v) {
  if (v.is_array()) return "array of " + std::string(value_type_name(v.array_type()));
  return std::string(value_type_name(v.type()));
}

[[noreturn]] void wrong_type(std::string_view key, const Value& v, std::string_view expected) {
  throw_runtime(kComponent, "key '" + std::string(key) + "' has the wrong type", type_label(v),
                expected);
}

// Any integer alternative (bool excluded) converted to Out when the value fits.
template <class Out>
Out get_integer(std::string_view key, const Value& v, std::string_view expected) {
  return std::visit(
      [&](const auto& x) -> Out {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if (!std::in_range<Out>(x)) {
            throw_runtime(
                kComponent, "key '" + std::string(key) + "' out of range", std::to_string(x),
                std::string(expected) + " in " + std::to_string(std::numeric_limits<Out>::min()) +
                    ".." + std::to_string(std::numeric_limits<Out>::max()));
          }
          return static_cast<Out>(x);
        } else {
          wrong_type(key, v, std::string(expected) + " (or another integer type in range)");
        }
      },
      v.storage());
}

}  // namespace

const Value* File::find(std::string_view key) const {
  const auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &kvs_[it->second].value;
}

const Value& File::get(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) {
    throw_runtime(kComponent, "key '" + std::string(key) + "' missing", "no such key",
                  "the key in " + (origin_.empty() ? std::string("<memory>") : origin_));
  }
  return *v;
}

uint32_t File::get_u32(std::string_view key) const {
  return get_integer<uint32_t>(key, get(key), "u32");
}
int32_t File::get_i32(std::string_view key) const {
  return get_integer<int32_t>(key, get(key), "i32");
}
uint64_t File::get_u64(std::string_view key) const {
  return get_integer<uint64_t>(key, get(key), "u64");
}

float File::get_f32(std::string_view key) const {
  const Value& v = get(key);
  if (const float* f = v.get_if<float>()) return *f;
  if (const double* d = v.get_if<double>()) {
    if (std::isfinite(*d) && std::fabs(*d) > static_cast<double>(FLT_MAX)) {
      throw_runtime(kComponent, "key '" + std::string(key) + "' out of range", std::to_string(*d),
                    "an f32 value");
    }
    return static_cast<float>(*d);
  }
  wrong_type(key, v, "f32 (or f64)");
}

bool File::get_bool(std::string_view key) const {
  const Value& v = get(key);
  if (const bool* b = v.get_if<bool>()) return *b;
  wrong_type(key, v, "bool");
}

const std::string& File::get_string(std::string_view key) const {
  const Value& v = get(key);
  if (const auto* s = v.get_if<std::string>()) return *s;
  wrong_type(key, v, "string");
}

const std::vector<std::string>& File::get_string_array(std::string_view key) const {
  const Value& v = get(key);
  if (const auto* a = v.get_if<std::vector<std::string>>()) return *a;
  wrong_type(key, v, "array of string");
}

std::span<const float> File::get_f32_array(std::string_view key) const {
  const Value& v = get(key);
  if (const auto* a = v.get_if<std::vector<float>>()) return *a;
  wrong_type(key, v, "array of f32");
}

std::span<const int32_t> File::get_i32_array(std::string_view key) const {
  const Value& v = get(key);
  if (const auto* a = v.get_if<std::vector<int32_t>>()) return *a;
  wrong_type(key, v, "array of i32");
}

uint32_t File::get_u32_or(std::string_view key, uint32_t fallback) const {
  return has_key(key) ? get_u32(key) : fallback;
}
uint64_t File::get_u64_or(std::string_view key, uint64_t fallback) const {
  return has_key(key) ? get_u64(key) : fallback;
}
float File::get_f32_or(std::string_view key, float fallback) const {
  return has_key(key) ? get_f32(key) : fallback;
}
bool File::get_bool_or(std::string_view key, bool fallback) const {
  return has_key(key) ? get_bool(key) : fallback;
}
std::string File::get_string_or(std::string_view key, std::string_view fallback) const {
  return has_key(key) ? get_string(key) : std::string(fallback);
}

}  // namespace snapkv::gguf
