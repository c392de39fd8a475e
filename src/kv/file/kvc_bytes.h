// Byte helpers of the .kvc file (kv/file/kvc_format.h): appending plain structs and arrays to a
// buffer, and a bounded reader that checks every length before it copies. Private to kv/. Errors: a
// read past the end of a record is snapkv::RuntimeError "[kvc] <field> truncated ..."; the file
// reader turns it into the named KvcError it belongs to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "snapkv/util/error.h"
#include "snapkv/util/fp16.h"

namespace snapkv::kvc {

template <class T>
void append_pod(std::vector<uint8_t>& out, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

// items: [n]
template <class T>
void append_array(std::vector<uint8_t>& out, const T* items, size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n * sizeof(T));
  std::memcpy(out.data() + at, items, n * sizeof(T));
}

// a * b, or a RuntimeError naming `field` when the product does not fit in size_t.
inline size_t checked_mul(size_t a, size_t b, const char* field) {
  if (a != 0 && b > SIZE_MAX / a) {
    throw_runtime("kvc", std::string(field) + " size overflows",
                  std::to_string(a) + " x " + std::to_string(b), "a size that fits in memory");
  }
  return a * b;
}

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }

  template <class T>
  T pod(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T), field);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  // Reads n items of T into a vector; the length is checked against what is left first.
  template <class T>
  std::vector<T> array(size_t n, const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n > remaining() / sizeof(T)) truncated(field, n * sizeof(T));
    std::vector<T> out(n);
    if (n > 0) std::memcpy(out.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return out;
  }

  // The next n bytes as a view (n checked).
  std::span<const uint8_t> bytes(size_t n, const char* field) {
    need(n, field);
    const std::span<const uint8_t> out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  void need(size_t n, const char* field) const {
    if (n > remaining()) truncated(field, n);
  }
  [[noreturn]] void truncated(const char* field, size_t n) const {
    throw_runtime("kvc", std::string(field) + " truncated",
                  std::to_string(remaining()) + " bytes left at offset " + std::to_string(pos_),
                  ">= " + std::to_string(n) + " bytes");
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

// Throws a RuntimeError naming `field` when an fp16 value is NaN, or infinite unless allow_inf
// (the fp16 codec rounds finite fp32 values above 65504 to infinity, so its rows may hold them;
// KIVI rejects such rows on append, so its fp16 parts never do).
inline void check_fp16_values(std::span<const fp16_t> values, const char* field, bool allow_inf) {
  for (size_t i = 0; i < values.size(); ++i) {
    const bool special = (values[i] & 0x7c00u) == 0x7c00u;
    const bool nan = special && (values[i] & 0x03ffu) != 0;
    if (nan || (special && !allow_inf)) {
      throw_runtime("kvc",
                    std::string(field) + " holds a " + (nan ? "NaN" : "infinite") + " fp16 value",
                    "bits " + std::to_string(values[i]) + " at index " + std::to_string(i),
                    allow_inf ? "no NaN" : "finite values");
    }
  }
}

}  // namespace snapkv::kvc
