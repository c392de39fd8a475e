// Metadata values: type ids of the variant alternatives, array accessors, text rendering.
#include <cstdio>
#include <string>
#include <type_traits>

#include "gguf/value_traits.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv::gguf {
namespace {

template <class T>
std::string scalar_to_string(const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    std::string s = "\"";
    for (const char c : v) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        s += '\\';
        s += c;
      } else if (u < 0x20 || u == 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", u);
        s += buf;
      } else {
        s += c;
      }
    }
    return s + "\"";
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_floating_point_v<T>) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
    return buf;
  } else {
    return std::to_string(v);
  }
}

}  // namespace

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::u8:
      return "u8";
    case ValueType::i8:
      return "i8";
    case ValueType::u16:
      return "u16";
    case ValueType::i16:
      return "i16";
    case ValueType::u32:
      return "u32";
    case ValueType::i32:
      return "i32";
    case ValueType::f32:
      return "f32";
    case ValueType::boolean:
      return "bool";
    case ValueType::string:
      return "string";
    case ValueType::array:
      return "array";
    case ValueType::u64:
      return "u64";
    case ValueType::i64:
      return "i64";
    case ValueType::f64:
      return "f64";
  }
  return "unknown";
}

ValueType Value::type() const {
  return std::visit(
      [](const auto& v) -> ValueType {
        using T = std::decay_t<decltype(v)>;
        if constexpr (detail::is_vector_v<T>) {
          return ValueType::array;
        } else {
          return detail::value_type_of<T>;
        }
      },
      storage_);
}

ValueType Value::array_type() const {
  return std::visit(
      [](const auto& v) -> ValueType {
        using T = std::decay_t<decltype(v)>;
        if constexpr (detail::is_vector_v<T>) {
          return detail::value_type_of<typename T::value_type>;
        } else {
          throw_invalid("gguf", "array_type() of a non-array value",
                        value_type_name(detail::value_type_of<T>), "an array");
        }
      },
      storage_);
}

size_t Value::array_size() const {
  return std::visit(
      [](const auto& v) -> size_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (detail::is_vector_v<T>) {
          return v.size();
        } else {
          throw_invalid("gguf", "array_size() of a non-array value",
                        value_type_name(detail::value_type_of<T>), "an array");
        }
      },
      storage_);
}

std::string Value::to_string(size_t max_elements) const {
  return std::visit(
      [max_elements](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (detail::is_vector_v<T>) {
          using E = typename T::value_type;
          std::string s = "[";
          s += std::to_string(v.size());
          s += " x ";
          s += value_type_name(detail::value_type_of<E>);
          s += ':';
          for (size_t i = 0; i < v.size() && i < max_elements; ++i) {
            s += i ? ", " : " ";
            s += scalar_to_string(static_cast<E>(v[i]));
          }
          if (v.size() > max_elements) s += ", ...";
          return s + "]";
        } else {
          return scalar_to_string(v);
        }
      },
      storage_);
}

}  // namespace snapkv::gguf
