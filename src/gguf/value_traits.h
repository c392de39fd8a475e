// Private: compile-time mapping between C++ types of Value alternatives and GGUF value type ids,
// and the on-disk sizes of the value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "snapkv/gguf/gguf.h"

namespace snapkv::gguf::detail {

template <class T>
struct is_vector : std::false_type {};
template <class E>
struct is_vector<std::vector<E>> : std::true_type {};
template <class T>
inline constexpr bool is_vector_v = is_vector<T>::value;

template <class T>
inline constexpr bool always_false_v = false;

template <class T>
constexpr ValueType value_type_of_impl() {
  if constexpr (std::is_same_v<T, uint8_t>)
    return ValueType::u8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return ValueType::i8;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return ValueType::u16;
  else if constexpr (std::is_same_v<T, int16_t>)
    return ValueType::i16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return ValueType::u32;
  else if constexpr (std::is_same_v<T, int32_t>)
    return ValueType::i32;
  else if constexpr (std::is_same_v<T, float>)
    return ValueType::f32;
  else if constexpr (std::is_same_v<T, bool>)
    return ValueType::boolean;
  else if constexpr (std::is_same_v<T, std::string>)
    return ValueType::string;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return ValueType::u64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return ValueType::i64;
  else if constexpr (std::is_same_v<T, double>)
    return ValueType::f64;
  else
    static_assert(always_false_v<T>, "not a GGUF scalar type");
}

// The GGUF value type of a scalar alternative (string included).
template <class T>
inline constexpr ValueType value_type_of = value_type_of_impl<T>();

// True for the ids 0..12.
inline bool is_known_value_type(int32_t id) {
  return id >= 0 && id <= 12;
}

// Smallest number of bytes one value of this (non-array) type takes on disk: its size, or the
// u64 length prefix of a string.
inline size_t min_disk_size(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean:
      return 1;
    case ValueType::u16:
    case ValueType::i16:
      return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32:
      return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64:
    case ValueType::string:
      return 8;
    case ValueType::array:
      return 12;  // i32 element type + u64 count
  }
  return 1;
}

}  // namespace snapkv::gguf::detail
