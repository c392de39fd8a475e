// GGUF v3 files as llama.cpp (ggml src/gguf.cpp) reads and writes them: a hostile-input-safe,
// zero-copy reader over a read-only memory map, and a writer producing the same byte layout.
//
// Layout (little-endian): "GGUF", u32 version = 3, i64 n_tensors, i64 n_kv; n_kv key/value pairs
// (string key, i32 value type, value); n_tensors tensor infos (string name, u32 n_dims, i64
// ne[n_dims], i32 ggml type, u64 offset); zero padding to `general.alignment` (u32, power of two,
// default 32, at most kMaxAlignment = 1 MiB); the data section, where each tensor starts at the
// running sum of the earlier tensors' sizes, each padded to the alignment. Strings are u64 length +
// bytes (no NUL). The reader requires the padding before the data section to be zeros and the file
// to end with the last tensor (its padding may be cut short): leftover bytes mean the tensor infos
// and the data disagree.
//
// File::open maps the file read-only (MAP_PRIVATE; or, with Storage::huge_page_copy, reads it into
// read-only huge-page memory and keeps no map) and registers the map with util/mapped_file.h:
// if the file is truncated while mapped, the next read of a lost page raises SIGBUS, which
// install_mapped_file_fault_handler() (installed by the `snapkv` command) turns into a named error
// and exit status 1. Library users that map files another process may truncate should install it
// too (or load from bytes).
//
// The reader checks every count, length, dimension, element-count product, type id, offset and
// alignment before using it, and throws snapkv::RuntimeError naming the key or tensor at fault:
//   "[gguf] tensor 'blk.0.attn_q.weight': offset 100 not aligned, got 100, expected a multiple of
//   32"
// It never reads outside the file. Model-level checks (which keys and tensors an architecture
// needs) belong to the loader; check_shape() helps it phrase shape errors the same way.
//
// Not covered: big-endian files, GGUF v1/v2 (rejected), nested arrays (rejected, as in ggml),
// tensor types other than those in quant.h (rejected as unknown).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "snapkv/gguf/quant.h"

namespace snapkv::gguf {

inline constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
// Largest `general.alignment` accepted (reader and writer): ggml uses 32, and a larger value only
// pads; the bound keeps a hostile header from making a rewrite pad by gigabytes.
inline constexpr uint32_t kMaxAlignment = 1u << 20;
inline constexpr size_t kMaxDims = 4;
inline constexpr size_t kMaxTensorNameLength = 63;  // ggml's GGML_MAX_NAME (64) minus the NUL
inline constexpr std::string_view kKeyAlignment = "general.alignment";

// Metadata value types with their on-disk ids.
enum class ValueType : int32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,  // one byte, 0 or 1
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

// "u8", "i8", ..., "bool", "string", "array", ..., "f64"; "unknown" otherwise.
std::string_view value_type_name(ValueType type);

// One metadata value: a scalar, a string, or an array of scalars or strings (never of arrays).
class Value {
 public:
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, uint64_t, int64_t, double, std::vector<uint8_t>,
                               std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
                               std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>,
                               std::vector<bool>, std::vector<std::string>, std::vector<uint64_t>,
                               std::vector<int64_t>, std::vector<double>>;

  Value() = default;  // u8 0
  // Exactly one of the Storage alternatives (no implicit numeric conversion):
  //   Value(uint32_t{7}), Value(std::string("llama")), Value(std::vector<float>{...}).
  template <class T>
  requires(!std::is_same_v<std::decay_t<T>, Value> &&
           std::is_constructible_v<Storage, std::in_place_type_t<std::decay_t<T>>,
                                   T&&>) explicit Value(T&& v)
      : storage_(std::in_place_type<std::decay_t<T>>, std::forward<T>(v)) {}

  ValueType type() const;  // ValueType::array for the vector alternatives
  bool is_array() const { return type() == ValueType::array; }
  ValueType array_type() const;  // element type; throws std::invalid_argument if not an array
  size_t array_size() const;     // element count; throws std::invalid_argument if not an array

  // Pointer to the stored T, or nullptr when the value holds another alternative.
  template <class T>
  const T* get_if() const {
    return std::get_if<T>(&storage_);
  }
  const Storage& storage() const { return storage_; }

  // Human-readable rendering for dumps: scalars in full, strings quoted, arrays as
  // "[n x type: a, b, c, ...]" with at most max_elements elements shown.
  std::string to_string(size_t max_elements = 8) const;

 private:
  Storage storage_;
};

struct KeyValue {
  std::string key;
  Value value;
};

// One tensor of a file. `data` points into the file's mapping: valid while the File lives.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // [n_dims], ne[0] contiguous; 1 <= n_dims <= 4, each >= 0
  TensorType type = TensorType::f32;
  uint64_t offset = 0;   // from the start of the data section
  uint64_t n_bytes = 0;  // tensor_n_bytes(type, ne)
  const uint8_t* data = nullptr;

  size_t n_dims() const { return ne.size(); }
  int64_t dim(size_t i) const { return i < ne.size() ? ne[i] : 1; }  // 1 past n_dims, as ggml
  int64_t n_elements() const { return element_count(ne); }
  // Elements / rows as a 2-D view: ne[0] by ne[1]*ne[2]*ne[3].
  int64_t row_length() const { return dim(0); }
  int64_t n_rows() const { return dim(1) * dim(2) * dim(3); }
  // Pointer to row r (r < n_rows()), row_n_bytes(type, ne[0]) bytes. Throws std::invalid_argument.
  const uint8_t* row(int64_t r) const;
};

// Throws snapkv::RuntimeError "[gguf] tensor 'NAME': wrong shape, got {a, b}, expected {c, d}"
// unless t.ne equals expected after trailing 1s are dropped from both.
void check_shape(const TensorInfo& t, std::span<const int64_t> expected);
// "{4096, 32000}"
std::string shape_string(std::span<const int64_t> ne);

// A parsed GGUF file. Move-only; owns its memory map (or byte buffer).
class File {
 public:
  // How open() holds the file's bytes:
  //   mapped          a read-only memory map (pages read on first touch; 4 KiB pages of the page
  //                   cache; a truncation while mapped raises SIGBUS, see above)
  //   huge_page_copy  the whole file read (pread, no map) into anonymous memory on 2 MiB
  //                   boundaries advised for transparent huge pages (util/huge_pages.h), then
  //                   made read-only: for weights streamed once per decoded token, where 4 KiB
  //                   pages cost a TLB walk every 4 KiB. Same peak RSS as a fully touched map
  //                   (plus < 2 MiB of rounding); reads the whole file up front.
  enum class Storage { mapped, huge_page_copy };

  // Opens `path` (a memory map by default) and parses it. Throws snapkv::RuntimeError on any I/O
  // problem or malformed content (the message starts with "[gguf] " and includes the path). Only
  // regular files are opened (a FIFO, directory or device is refused before open(), which could
  // block).
  static File open(const std::string& path, Storage storage = Storage::mapped);
  // Parses a copy of the bytes held by the File (tests, generated files).
  static File from_bytes(std::vector<uint8_t> bytes);
  // Parses bytes the caller keeps alive for the File's lifetime (no copy; used by the fuzzer).
  static File from_buffer(const uint8_t* data, size_t size);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // absolute offset of the data section
  size_t size() const { return size_; }                  // bytes of the whole file
  const uint8_t* bytes() const { return base_; }         // the whole file, size() bytes

  // ---- metadata, in file order ----
  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const Value* find(std::string_view key) const;  // nullptr when absent
  bool has_key(std::string_view key) const { return find(key) != nullptr; }
  // The value of key; RuntimeError "[gguf] key 'K' missing, ..." when absent.
  const Value& get(std::string_view key) const;

  // Typed getters. Each throws snapkv::RuntimeError naming the key when it is missing or holds
  // another type. Integer getters accept any integer type whose value fits the result
  // (out-of-range is an error); get_f32 accepts f32 and f64; the others are exact.
  uint32_t get_u32(std::string_view key) const;
  int32_t get_i32(std::string_view key) const;
  uint64_t get_u64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  std::span<const float> get_f32_array(std::string_view key) const;
  std::span<const int32_t> get_i32_array(std::string_view key) const;

  // Same, with a fallback used only when the key is absent (a wrong type still throws).
  uint32_t get_u32_or(std::string_view key, uint32_t fallback) const;
  uint64_t get_u64_or(std::string_view key, uint64_t fallback) const;
  float get_f32_or(std::string_view key, float fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  std::string get_string_or(std::string_view key, std::string_view fallback) const;

  // ---- tensors, in file order ----
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  // RuntimeError "[gguf] tensor 'NAME' missing, ..." when absent.
  const TensorInfo& get_tensor(std::string_view name) const;

 private:
  struct Mapping;  // mmap owner (or huge-page copy, or byte vector), defined in the .cpp
  File();
  void parse();

  std::unique_ptr<Mapping> mapping_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string origin_;  // path or "<memory>", for messages
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> key_index_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Builds a GGUF v3 file: header, KVs in insertion order, tensor infos in insertion order, zero
// padding to the alignment, then each tensor's bytes padded with zeros to the alignment (the last
// one too, as ggml writes it). Setting an existing key replaces its value in place.
class Writer {
 public:
  Writer() = default;

  // Scalars and strings. Keys must be non-empty (std::invalid_argument).
  void set_u8(std::string_view key, uint8_t v) { set(key, Value(v)); }
  void set_i8(std::string_view key, int8_t v) { set(key, Value(v)); }
  void set_u16(std::string_view key, uint16_t v) { set(key, Value(v)); }
  void set_i16(std::string_view key, int16_t v) { set(key, Value(v)); }
  void set_u32(std::string_view key, uint32_t v) { set(key, Value(v)); }
  void set_i32(std::string_view key, int32_t v) { set(key, Value(v)); }
  void set_u64(std::string_view key, uint64_t v) { set(key, Value(v)); }
  void set_i64(std::string_view key, int64_t v) { set(key, Value(v)); }
  void set_f32(std::string_view key, float v) { set(key, Value(v)); }
  void set_f64(std::string_view key, double v) { set(key, Value(v)); }
  void set_bool(std::string_view key, bool v) { set(key, Value(v)); }
  void set_string(std::string_view key, std::string_view v) { set(key, Value(std::string(v))); }
  // Arrays (any element type: pass a Value holding the vector to set()).
  void set_string_array(std::string_view key, std::vector<std::string> v) {
    set(key, Value(std::move(v)));
  }
  void set_f32_array(std::string_view key, std::vector<float> v) { set(key, Value(std::move(v))); }
  void set_i32_array(std::string_view key, std::vector<int32_t> v) {
    set(key, Value(std::move(v)));
  }
  // `general.alignment` (u32). Must be a power of two (std::invalid_argument).
  void set_alignment(uint32_t alignment);
  void set(std::string_view key, Value value);
  const std::vector<KeyValue>& metadata() const { return kvs_; }

  // Adds a tensor whose encoded bytes are given. bytes.size() must equal tensor_n_bytes(type, ne);
  // the name must be 1..63 bytes and unused; ne 1..4 entries, each >= 0 (std::invalid_argument).
  // copy = true copies the bytes; false keeps a view that must outlive write()/to_bytes().
  // Trailing 1s of ne are dropped as ggml_n_dims does ({64, 1} is written as {64}).
  void add_tensor(std::string_view name, TensorType type, std::vector<int64_t> ne,
                  std::span<const uint8_t> bytes, bool copy = true);
  // Adds a tensor from fp32 values [ne[3]][ne[2]][ne[1]][ne[0]], encoded to `type` row by row.
  void add_tensor_f32(std::string_view name, TensorType type, std::vector<int64_t> ne,
                      std::span<const float> values);
  size_t n_tensors() const { return tensors_.size(); }

  // The whole file. write() writes it to path (throws snapkv::RuntimeError on I/O failure).
  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    bool copied = true;
    std::vector<uint8_t> owned;         // the bytes when copied
    std::span<const uint8_t> external;  // the caller's bytes when not copied
    std::span<const uint8_t> bytes() const { return copied ? std::span(owned) : external; }
  };
  uint32_t alignment() const;

  std::vector<KeyValue> kvs_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace snapkv::gguf
