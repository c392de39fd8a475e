// GGUF writer: validates keys and tensors as they are added, then streams the file in llama.cpp's
// layout (header, KVs, tensor infos, padding, padded tensor data) to a byte vector or a file.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "gguf/value_traits.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"

namespace snapkv::gguf {
namespace {

constexpr std::string_view kComponent = "gguf";

bool is_power_of_two(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

struct VectorSink {
  std::vector<uint8_t>& out;
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  }
};

struct FileSink {
  std::FILE* f;
  const std::string& path;
  void put(const void* p, size_t n) {
    if (n != 0 && std::fwrite(p, 1, n, f) != n) {
      throw_runtime(kComponent, "cannot write file '" + path + "'", std::strerror(errno),
                    "a writable destination");
    }
  }
};

template <class Sink>
class Emitter {
 public:
  explicit Emitter(Sink& sink) : sink_(sink) {}
  uint64_t pos() const { return pos_; }

  template <class T>
  void scalar(const T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      string(v);
    } else if constexpr (std::is_same_v<T, bool>) {
      raw<uint8_t>(v ? 1 : 0);
    } else {
      raw<T>(v);
    }
  }
  template <class T>
  void raw(T v) {
    sink_.put(&v, sizeof v);
    pos_ += sizeof v;
  }
  void bytes(std::span<const uint8_t> b) {
    sink_.put(b.data(), b.size());
    pos_ += b.size();
  }
  void string(std::string_view s) {
    raw<uint64_t>(s.size());
    sink_.put(s.data(), s.size());
    pos_ += s.size();
  }
  void pad(uint64_t alignment) {
    static constexpr uint8_t zeros[64] = {};
    uint64_t n = (alignment - pos_ % alignment) % alignment;
    while (n > 0) {
      const size_t chunk = n < sizeof zeros ? static_cast<size_t>(n) : sizeof zeros;
      sink_.put(zeros, chunk);
      pos_ += chunk;
      n -= chunk;
    }
  }

 private:
  Sink& sink_;
  uint64_t pos_ = 0;
};

template <class Sink>
void emit_value(Emitter<Sink>& e, const Value& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (detail::is_vector_v<T>) {
          using E = typename T::value_type;
          e.template raw<int32_t>(static_cast<int32_t>(ValueType::array));
          e.template raw<int32_t>(static_cast<int32_t>(detail::value_type_of<E>));
          e.template raw<uint64_t>(v.size());
          for (const auto& x : v) e.scalar(static_cast<E>(x));
        } else {
          e.template raw<int32_t>(static_cast<int32_t>(detail::value_type_of<T>));
          e.scalar(v);
        }
      },
      value.storage());
}

}  // namespace

uint32_t Writer::alignment() const {
  for (const KeyValue& kv : kvs_) {
    if (kv.key == kKeyAlignment) return *kv.value.get_if<uint32_t>();  // checked in set()
  }
  return kDefaultAlignment;
}

void Writer::set_alignment(uint32_t alignment) {
  set(kKeyAlignment, Value(alignment));
}

void Writer::set(std::string_view key, Value value) {
  if (key.empty()) throw_invalid(kComponent, "empty metadata key", "''", "a non-empty key");
  if (key == kKeyAlignment) {
    const auto* a = value.get_if<uint32_t>();
    if (a == nullptr) {
      throw_invalid(kComponent, "key 'general.alignment' has the wrong type",
                    value.is_array() ? "array" : value_type_name(value.type()), "u32");
    }
    if (!is_power_of_two(*a) || *a > kMaxAlignment) {
      throw_invalid(kComponent,
                    *a > kMaxAlignment ? "key 'general.alignment' is too large"
                                       : "key 'general.alignment' is not a power of two",
                    std::to_string(*a),
                    "a power of two at most " + std::to_string(kMaxAlignment) + " (1 MiB)");
    }
  }
  for (KeyValue& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(KeyValue{std::string(key), std::move(value)});
}

void Writer::add_tensor(std::string_view name, TensorType type, std::vector<int64_t> ne,
                        std::span<const uint8_t> bytes, bool copy) {
  const std::string who = "add_tensor '" + std::string(name) + "'";
  if (name.empty() || name.size() > kMaxTensorNameLength) {
    throw_invalid(kComponent, who + ": bad name length", std::to_string(name.size()),
                  "1.." + std::to_string(kMaxTensorNameLength) + " bytes");
  }
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) {
      throw_invalid(kComponent, who + ": duplicate tensor name", "a second tensor", "unique names");
    }
  }
  if (!tensor_type_from_id(static_cast<int32_t>(type))) {
    throw_invalid(kComponent, who + ": unknown tensor type",
                  std::to_string(static_cast<int32_t>(type)),
                  std::string(supported_tensor_types()));
  }
  const uint64_t n_bytes = tensor_n_bytes(type, ne);  // validates ne
  if (bytes.size() != n_bytes) {
    throw_invalid(kComponent,
                  who + ": byte count does not match " + std::string(tensor_type_name(type)) + " " +
                      shape_string(ne),
                  std::to_string(bytes.size()), std::to_string(n_bytes));
  }
  // As ggml_n_dims: trailing 1s are not written (at least one dimension stays).
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  PendingTensor t{std::string(name), type, std::move(ne), copy, {}, {}};
  if (copy) {
    t.owned.assign(bytes.begin(), bytes.end());
  } else {
    t.external = bytes;
  }
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor_f32(std::string_view name, TensorType type, std::vector<int64_t> ne,
                            std::span<const float> values) {
  const uint64_t n_bytes = tensor_n_bytes(type, ne);  // validates ne and the block size
  const int64_t n = element_count(ne);
  if (values.size() != static_cast<uint64_t>(n)) {
    throw_invalid(kComponent, "add_tensor_f32 '" + std::string(name) + "': value count",
                  std::to_string(values.size()), std::to_string(n) + " for " + shape_string(ne));
  }
  std::vector<uint8_t> encoded(static_cast<size_t>(n_bytes));
  const auto row = static_cast<size_t>(ne[0]);
  if (row > 0) {
    const size_t row_bytes = row_n_bytes(type, row);
    for (size_t r = 0; r < static_cast<size_t>(n) / row; ++r) {
      quantize_row(encoded.data() + r * row_bytes, values.data() + r * row, type, row);
    }
  }
  // Reuse add_tensor's checks (name, duplicates) without copying the bytes twice, then let the
  // entry own the encoded bytes.
  add_tensor(name, type, std::move(ne), std::span<const uint8_t>(encoded), /*copy=*/false);
  tensors_.back().copied = true;
  tensors_.back().owned = std::move(encoded);  // moving keeps the buffer: the view stays valid
  tensors_.back().external = {};
}

namespace {

template <class Sink, class Tensors>
void emit_file(Sink& sink, const std::vector<KeyValue>& kvs, const Tensors& tensors,
               uint32_t alignment) {
  Emitter<Sink> e(sink);
  e.template raw<uint32_t>(kMagic);
  e.template raw<uint32_t>(kVersion);
  e.template raw<int64_t>(static_cast<int64_t>(tensors.size()));
  e.template raw<int64_t>(static_cast<int64_t>(kvs.size()));
  for (const KeyValue& kv : kvs) {
    e.string(kv.key);
    emit_value(e, kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    e.string(t.name);
    e.template raw<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (const int64_t d : t.ne) e.template raw<int64_t>(d);
    e.template raw<int32_t>(static_cast<int32_t>(t.type));
    e.template raw<uint64_t>(offset);
    offset += (t.bytes().size() + alignment - 1) / alignment * alignment;
  }
  e.pad(alignment);
  for (const auto& t : tensors) {
    e.bytes(t.bytes());
    e.pad(alignment);
  }
}

}  // namespace

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  VectorSink sink{out};
  emit_file(sink, kvs_, tensors_, alignment());
  return out;
}

void Writer::write(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    throw_runtime(kComponent, "cannot create file '" + path + "'", std::strerror(errno),
                  "a writable path");
  }
  try {
    FileSink sink{f, path};
    emit_file(sink, kvs_, tensors_, alignment());
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) {
    throw_runtime(kComponent, "cannot finish writing file '" + path + "'", std::strerror(errno),
                  "a writable destination");
  }
}

}  // namespace snapkv::gguf
