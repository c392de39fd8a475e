// Reader exerciser shared by the fuzzer, its corpus driver and the corpus regression test.
#include "gguf/exercise.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv::gguf::detail {
namespace {

constexpr size_t kMaxElementsTouched = 4096;  // per row, keeps each fuzz run fast

// Every getter on every key: each either returns or throws RuntimeError (wrong type / range).
void touch_metadata(const File& f) {
  for (const KeyValue& kv : f.metadata()) {
    (void)kv.value.to_string(4);
    SNAPKV_CHECK(f.find(kv.key) == &kv.value);
    const auto attempt = [&](auto&& fn) {
      try {
        fn();
      } catch (const RuntimeError&) {
      }
    };
    attempt([&] { (void)f.get_u32(kv.key); });
    attempt([&] { (void)f.get_i32(kv.key); });
    attempt([&] { (void)f.get_u64(kv.key); });
    attempt([&] { (void)f.get_f32(kv.key); });
    attempt([&] { (void)f.get_bool(kv.key); });
    attempt([&] { (void)f.get_string(kv.key); });
    attempt([&] { (void)f.get_string_array(kv.key).size(); });
    attempt([&] { (void)f.get_f32_array(kv.key).size(); });
    attempt([&] { (void)f.get_i32_array(kv.key).size(); });
  }
}

void touch_tensors(const File& f) {
  const uint8_t* begin = f.bytes();
  const uint8_t* end = f.bytes() + f.size();
  std::vector<float> row;
  for (const TensorInfo& t : f.tensors()) {
    SNAPKV_CHECK(f.find_tensor(t.name) == &t);
    SNAPKV_CHECK(t.n_bytes <= f.size());
    SNAPKV_CHECK(t.data >= begin && t.data + t.n_bytes <= end);
    if (t.n_bytes == 0) continue;
    const auto n = static_cast<size_t>(t.row_length());
    const size_t bs = block_size(t.type);
    const size_t take = std::min(n, kMaxElementsTouched / bs * bs);
    row.resize(take);
    dequantize_row(row.data(), t.row(0), t.type, take);
    dequantize_row(row.data(), t.row(t.n_rows() - 1), t.type, take);
  }
}

std::vector<uint8_t> rewrite(const File& f) {
  Writer w;
  for (const KeyValue& kv : f.metadata()) w.set(kv.key, kv.value);
  for (const TensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::span<const uint8_t>(t.data, t.n_bytes), false);
  }
  return w.to_bytes();
}

// Writing a parsed file must give a file that parses to the same content and rewrites to the
// same bytes.
void check_round_trip_or_abort(const File& f) {
  const std::vector<uint8_t> once = rewrite(f);
  const File g = File::from_bytes(once);
  SNAPKV_CHECK(g.metadata().size() == f.metadata().size());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    SNAPKV_CHECK(g.metadata()[i].key == f.metadata()[i].key);
    SNAPKV_CHECK(g.metadata()[i].value.type() == f.metadata()[i].value.type());
  }
  SNAPKV_CHECK(g.alignment() == f.alignment());
  SNAPKV_CHECK(g.tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const TensorInfo& a = f.tensors()[i];
    const TensorInfo& b = g.tensors()[i];
    SNAPKV_CHECK(a.name == b.name && a.type == b.type && a.n_bytes == b.n_bytes);
    SNAPKV_CHECK(a.n_elements() == b.n_elements() && a.row_length() == b.row_length());
    SNAPKV_CHECK(a.n_bytes == 0 || std::memcmp(a.data, b.data, a.n_bytes) == 0);
  }
  SNAPKV_CHECK(rewrite(g) == once);
}

void check_round_trip(const File& f) {
  try {
    check_round_trip_or_abort(f);
  } catch (const RuntimeError& e) {  // the reader rejecting our own writer's output is a bug
    std::fprintf(stderr, "gguf round trip failed: %s\n", e.what());
    std::abort();
  }
}

}  // namespace

bool exercise_reader(const uint8_t* data, size_t size) {
  try {
    const File f = File::from_buffer(data, size);
    touch_metadata(f);
    touch_tensors(f);
    check_round_trip(f);
    return true;
  } catch (const RuntimeError&) {
    return false;
  }
}

}  // namespace snapkv::gguf::detail
