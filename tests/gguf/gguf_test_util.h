// Test helpers for the gguf layer: a raw little-endian byte builder for hand-made (malformed)
// files, a sample Writer holding every value type and tensor type, and an error-message matcher.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv::gguf::testing {

// Appends raw little-endian fields (x86 is little-endian, as GGUF).
struct Raw {
  std::vector<uint8_t> bytes;

  template <class T>
  Raw& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
    return *this;
  }
  Raw& u8(uint8_t v) { return put(v); }
  Raw& u32(uint32_t v) { return put(v); }
  Raw& i32(int32_t v) { return put(v); }
  Raw& u64(uint64_t v) { return put(v); }
  Raw& i64(int64_t v) { return put(v); }
  Raw& str(std::string_view s) {
    u64(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(int64_t n_tensors, int64_t n_kv, uint32_t version = 3) {
    bytes.insert(bytes.end(), {'G', 'G', 'U', 'F'});
    return u32(version).i64(n_tensors).i64(n_kv);
  }
  Raw& kv_u32(std::string_view key, uint32_t v) { return str(key).i32(4).u32(v); }
  Raw& kv_string(std::string_view key, std::string_view v) { return str(key).i32(8).str(v); }
  // Tensor info with explicit fields.
  Raw& info(std::string_view name, std::initializer_list<int64_t> ne, int32_t type,
            uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (const int64_t d : ne) i64(d);
    return i32(type).u64(offset);
  }
  Raw& pad_to(size_t alignment) {
    while (bytes.size() % alignment != 0) bytes.push_back(0);
    return *this;
  }
  Raw& zeros(size_t n) {
    bytes.insert(bytes.end(), n, 0);
    return *this;
  }
};

// Deterministic pseudo-random floats in [-scale, scale] (splitmix64).
inline std::vector<float> test_values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(n);
  uint64_t s = seed;
  for (float& x : v) {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) / 9007199254740992.0;  // [0, 1)
    x = static_cast<float>((2.0 * u - 1.0) * scale);
  }
  return v;
}

// A writer holding one key of every scalar type, an array of every element type, and one tensor
// of every tensor type (plus a 3-D and an empty one).
inline Writer sample_writer() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u8("t.u8", 200);
  w.set_i8("t.i8", -100);
  w.set_u16("t.u16", 60000);
  w.set_i16("t.i16", -30000);
  w.set_u32("t.u32", 4000000000u);
  w.set_i32("t.i32", -2000000000);
  w.set_f32("t.f32", 1.5f);
  w.set_bool("t.bool", true);
  w.set_string("t.string", std::string("h\xC3\xA9llo\0x", 8));
  w.set_u64("t.u64", 18000000000000000000ull);
  w.set_i64("t.i64", -9000000000000000000ll);
  w.set_f64("t.f64", -2.25e300);
  w.set("t.arr.u8", Value(std::vector<uint8_t>{0, 1, 255}));
  w.set("t.arr.i8", Value(std::vector<int8_t>{-128, 0, 127}));
  w.set("t.arr.u16", Value(std::vector<uint16_t>{1, 65535}));
  w.set("t.arr.i16", Value(std::vector<int16_t>{-32768, 32767}));
  w.set("t.arr.u32", Value(std::vector<uint32_t>{7, 4294967295u}));
  w.set_i32_array("t.arr.i32", {-1, 0, 1, 2147483647});
  w.set_f32_array("t.arr.f32", {0.5f, -0.0f, 3.0e38f});
  w.set("t.arr.bool", Value(std::vector<bool>{true, false, true}));
  w.set_string_array("t.arr.string", {"<s>", "", "</s>", "<0x0A>"});
  w.set("t.arr.u64", Value(std::vector<uint64_t>{0, 18446744073709551615ull}));
  w.set("t.arr.i64", Value(std::vector<int64_t>{-1, 9223372036854775807ll}));
  w.set("t.arr.f64", Value(std::vector<double>{1e-300, -0.125}));
  w.set("t.arr.empty", Value(std::vector<float>{}));
  w.add_tensor_f32("w.f32", TensorType::f32, {5, 3}, test_values(15, 1));
  w.add_tensor_f32("w.f16", TensorType::f16, {7, 2}, test_values(14, 2));
  w.add_tensor_f32("w.q8_0", TensorType::q8_0, {64, 3}, test_values(192, 3));
  w.add_tensor_f32("w.q4_0", TensorType::q4_0, {32, 2}, test_values(64, 4));
  w.add_tensor_f32("w.bf16", TensorType::bf16, {3, 2, 2}, test_values(12, 5));
  w.add_tensor_f32("w.empty", TensorType::f32, {0, 4}, {});
  return w;
}

// Parses bytes and expects a snapkv::RuntimeError whose message contains every substring.
inline void expect_gguf_error(const std::vector<uint8_t>& bytes,
                              std::initializer_list<std::string_view> substrings,
                              const std::string& label = "") {
  try {
    File::from_bytes(bytes);
    ADD_FAILURE() << label << ": parsed, expected an error containing '" << *substrings.begin()
                  << "'";
  } catch (const RuntimeError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[gguf] ", 0), 0u) << label << ": " << msg;
    for (const std::string_view s : substrings) {
      EXPECT_NE(msg.find(s), std::string::npos) << label << ": '" << s << "' not in: " << msg;
    }
  }
}

}  // namespace snapkv::gguf::testing
