// GGUF reader: memory map (or byte buffer), bounds-checked parse of header, metadata and tensor
// infos, validation of the data layout, and typed metadata getters.
//
// Every read goes through Cursor, which checks the remaining bytes first; every count read from the
// file is bounded by the bytes left before anything is allocated for it. Errors name the key or
// tensor ("key #3", "tensor 'blk.0.attn_q.weight'") and are snapkv::RuntimeError.
#include <algorithm>
#include <cfloat>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "gguf/value_traits.h"
#include "snapkv/gguf/gguf.h"
#include "snapkv/util/error.h"
#include "snapkv/util/mapped_file.h"
#include "util/huge_pages.h"

namespace snapkv::gguf {

struct File::Mapping {
  MappedFile file;             // read-only map of File::open's path (registered for SIGBUS)
  HugePageRegion copy;         // or File::open's path read into huge pages
  std::vector<uint8_t> owned;  // from_bytes copy
};

namespace {

constexpr std::string_view kComponent = "gguf";

// Bounds-checked little-endian reads over [base, base + size). `where` names the item being read
// ("key 'general.name'") and prefixes every error.
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size, std::string origin)
      : base_(base), size_(size), origin_(std::move(origin)) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  void set_where(std::string where) { where_ = std::move(where); }
  const std::string& where() const { return where_; }

  [[noreturn]] void fail(std::string_view what, std::string_view got,
                         std::string_view expected) const {
    std::string msg;
    if (!origin_.empty()) msg += origin_ + ": ";
    msg += where_;
    msg += ": ";
    msg += what;
    throw_runtime(kComponent, msg, got, expected);
  }

  void need(size_t n, std::string_view what) const {
    if (remaining() < n) {
      fail(std::string("truncated file while reading ") + std::string(what),
           std::to_string(remaining()) + " bytes left at offset " + std::to_string(pos_),
           std::to_string(n));
    }
  }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    const uint64_t len = read<uint64_t>(std::string(what) + " length");
    if (len > remaining()) {
      fail(std::string(what) + " length exceeds the bytes left in the file", std::to_string(len),
           "at most " + std::to_string(remaining()));
    }
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
  std::string origin_;
  std::string where_ = "header";
};

std::string quoted(std::string_view s) {
  std::string out = "'";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += (u < 0x20 || u == 0x7F) ? '?' : c;
  }
  return out + "'";
}

template <class T>
T read_scalar(Cursor& cur) {
  if constexpr (std::is_same_v<T, std::string>) {
    return cur.read_string("string value");
  } else if constexpr (std::is_same_v<T, bool>) {
    const uint8_t b = cur.read<uint8_t>("bool value");
    if (b > 1) cur.fail("bool value is not 0 or 1", std::to_string(b), "0 or 1");
    return b == 1;
  } else {
    return cur.read<T>(value_type_name(detail::value_type_of<T>));
  }
}

template <class T>
Value read_array(Cursor& cur, uint64_t count) {
  std::vector<T> elems;
  elems.reserve(static_cast<size_t>(count));  // count already bounded by the bytes left
  for (uint64_t i = 0; i < count; ++i) elems.push_back(read_scalar<T>(cur));
  return Value(std::move(elems));
}

// Reads one value of (non-array) type t, or an array of element type t when is_array.
template <class T>
Value read_typed(Cursor& cur, bool is_array, uint64_t count) {
  if (is_array) return read_array<T>(cur, count);
  return Value(read_scalar<T>(cur));
}

Value read_value(Cursor& cur, ValueType t, bool is_array, uint64_t count) {
  switch (t) {
    case ValueType::u8:
      return read_typed<uint8_t>(cur, is_array, count);
    case ValueType::i8:
      return read_typed<int8_t>(cur, is_array, count);
    case ValueType::u16:
      return read_typed<uint16_t>(cur, is_array, count);
    case ValueType::i16:
      return read_typed<int16_t>(cur, is_array, count);
    case ValueType::u32:
      return read_typed<uint32_t>(cur, is_array, count);
    case ValueType::i32:
      return read_typed<int32_t>(cur, is_array, count);
    case ValueType::f32:
      return read_typed<float>(cur, is_array, count);
    case ValueType::boolean:
      return read_typed<bool>(cur, is_array, count);
    case ValueType::string:
      return read_typed<std::string>(cur, is_array, count);
    case ValueType::u64:
      return read_typed<uint64_t>(cur, is_array, count);
    case ValueType::i64:
      return read_typed<int64_t>(cur, is_array, count);
    case ValueType::f64:
      return read_typed<double>(cur, is_array, count);
    case ValueType::array:
      break;
  }
  cur.fail("nested arrays are not supported", "array of array", "an array of scalars or strings");
}

uint64_t pad_to(uint64_t x, uint64_t alignment) {
  return (x + alignment - 1) / alignment * alignment;  // callers keep x + alignment from wrapping
}

}  // namespace

// ---- construction --------------------------------------------------------------------------

File::File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path, Storage storage) {
  File f;
  f.origin_ = path;
  f.mapping_ = std::make_unique<Mapping>();
  constexpr std::string_view kExpected = "a readable regular GGUF file";
  if (storage == Storage::huge_page_copy) {
    f.mapping_->copy = read_file_to_huge_pages(path, kComponent, kExpected);
    f.base_ = f.mapping_->copy.data();
    f.size_ = f.mapping_->copy.size();
  } else {
    f.mapping_->file = MappedFile::open(path, kComponent, kExpected);
    f.base_ = f.mapping_->file.data();
    f.size_ = f.mapping_->file.size();
  }
  f.parse();
  return f;
}

File File::from_bytes(std::vector<uint8_t> bytes) {
  File f;
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->owned = std::move(bytes);
  f.base_ = f.mapping_->owned.data();
  f.size_ = f.mapping_->owned.size();
  f.parse();
  return f;
}

File File::from_buffer(const uint8_t* data, size_t size) {
  if (data == nullptr && size != 0) {
    throw_invalid(kComponent, "from_buffer: null data", std::to_string(size) + " bytes",
                  "a valid pointer");
  }
  File f;
  f.base_ = data;
  f.size_ = size;
  f.parse();
  return f;
}

// ---- parsing -------------------------------------------------------------------------------

void File::parse() {
  Cursor cur(base_, size_, origin_);

  // header
  cur.need(4, "magic");
  const uint32_t magic = cur.read<uint32_t>("magic");
  if (magic != kMagic) {
    std::string got = "'";
    for (int i = 0; i < 4; ++i) {
      const auto c = static_cast<unsigned char>(magic >> (8 * i));
      got += (c >= 0x20 && c < 0x7F) ? static_cast<char>(c) : '?';
    }
    cur.fail("bad magic, not a GGUF file", got + "'", "'GGUF'");
  }
  version_ = cur.read<uint32_t>("version");
  if (version_ != kVersion) {
    std::string got = std::to_string(version_);
    if (version_ == 1 || version_ == 2) got += " (GGUF v1/v2 is not supported; re-convert)";
    if (version_ != 0 && (version_ & 0xFFFFu) == 0) got += " (a big-endian file?)";
    cur.fail("unsupported GGUF version", got, std::to_string(kVersion));
  }
  const auto n_tensors = cur.read<int64_t>("tensor count");
  const auto n_kv = cur.read<int64_t>("metadata count");
  // Each KV takes at least 8 (key length) + 4 (type) + 1 (value) bytes; each tensor info at least
  // 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset).
  constexpr uint64_t kMinKvBytes = 13;
  constexpr uint64_t kMinTensorInfoBytes = 32;
  const uint64_t left = cur.remaining();
  if (n_tensors < 0 || static_cast<uint64_t>(n_tensors) > left / kMinTensorInfoBytes) {
    cur.fail("tensor count out of range for the file size", std::to_string(n_tensors),
             "0.." + std::to_string(left / kMinTensorInfoBytes));
  }
  if (n_kv < 0 || static_cast<uint64_t>(n_kv) > left / kMinKvBytes) {
    cur.fail("metadata count out of range for the file size", std::to_string(n_kv),
             "0.." + std::to_string(left / kMinKvBytes));
  }
  if (static_cast<uint64_t>(n_tensors) * kMinTensorInfoBytes +
          static_cast<uint64_t>(n_kv) * kMinKvBytes >
      left) {
    cur.fail("tensor and metadata counts too large for the file size",
             std::to_string(n_tensors) + " tensors and " + std::to_string(n_kv) + " keys",
             "at most " + std::to_string(left) + " bytes of them");
  }

  // metadata
  kvs_.reserve(static_cast<size_t>(n_kv));
  for (int64_t i = 0; i < n_kv; ++i) {
    cur.set_where("key #" + std::to_string(i));
    std::string key = cur.read_string("key");
    if (key.empty()) cur.fail("empty key", "''", "a non-empty key");
    cur.set_where("key " + quoted(key));
    if (key_index_.count(key) != 0) {
      cur.fail("duplicate key", "a second definition", "each key once");
    }
    const auto type_id = cur.read<int32_t>("value type");
    if (!detail::is_known_value_type(type_id)) {
      cur.fail("unknown value type", std::to_string(type_id), "0..12");
    }
    auto type = static_cast<ValueType>(type_id);
    const bool is_array = type == ValueType::array;
    uint64_t count = 1;
    if (is_array) {
      const auto elem_id = cur.read<int32_t>("array element type");
      if (!detail::is_known_value_type(elem_id)) {
        cur.fail("unknown array element type", std::to_string(elem_id), "0..12");
      }
      type = static_cast<ValueType>(elem_id);
      if (type == ValueType::array) {
        cur.fail("nested arrays are not supported", "array of array",
                 "an array of scalars or strings");
      }
      count = cur.read<uint64_t>("array length");
      const uint64_t max_count = cur.remaining() / detail::min_disk_size(type);
      if (count > max_count) {
        cur.fail("array length exceeds the bytes left in the file", std::to_string(count),
                 "at most " + std::to_string(max_count) + " " + std::string(value_type_name(type)) +
                     " elements");
      }
    }
    Value value = read_value(cur, type, is_array, count);
    key_index_.emplace(key, kvs_.size());
    kvs_.push_back(KeyValue{std::move(key), std::move(value)});
  }

  // alignment
  if (const Value* a = find(kKeyAlignment)) {
    cur.set_where("key '" + std::string(kKeyAlignment) + "'");
    const auto* v = a->get_if<uint32_t>();
    if (v == nullptr) {
      cur.fail("wrong type", a->is_array() ? "array" : value_type_name(a->type()), "u32");
    }
    if (*v == 0 || (*v & (*v - 1)) != 0 || *v > kMaxAlignment) {
      cur.fail(*v > kMaxAlignment ? "alignment too large" : "alignment is not a power of two",
               std::to_string(*v),
               "a power of two at most " + std::to_string(kMaxAlignment) + " (1 MiB)");
    }
    alignment_ = *v;
  }

  // tensor infos
  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (int64_t i = 0; i < n_tensors; ++i) {
    cur.set_where("tensor #" + std::to_string(i));
    TensorInfo t;
    t.name = cur.read_string("tensor name");
    if (t.name.empty()) cur.fail("empty tensor name", "''", "a non-empty name");
    cur.set_where("tensor " + quoted(t.name));
    if (t.name.size() > kMaxTensorNameLength) {
      cur.fail("name too long", std::to_string(t.name.size()) + " bytes",
               "at most " + std::to_string(kMaxTensorNameLength));
    }
    if (tensor_index_.count(t.name) != 0) {
      cur.fail("duplicate tensor name", "a second tensor of this name", "unique names");
    }
    const auto n_dims = cur.read<uint32_t>("n_dims");
    if (n_dims < 1 || n_dims > kMaxDims) {
      cur.fail("bad number of dimensions", std::to_string(n_dims), "1..4");
    }
    t.ne.resize(n_dims);
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      t.ne[d] = cur.read<int64_t>("ne");
      if (t.ne[d] < 0) {
        cur.fail("negative dimension ne[" + std::to_string(d) + "]", std::to_string(t.ne[d]),
                 ">= 0");
      }
      if (__builtin_mul_overflow(n_elements, t.ne[d], &n_elements)) {
        cur.fail("element count overflows int64", shape_string(t.ne), "a product below 2^63");
      }
    }
    const auto type_id = cur.read<int32_t>("tensor type");
    const auto type = tensor_type_from_id(type_id);
    if (!type) {
      // Name the type when ggml defines it ("IQ2_XS (type 17)"), the bare id otherwise.
      const std::string_view ggml_name = ggml_type_name(type_id);
      cur.fail("unknown or unsupported tensor type",
               ggml_name.empty()
                   ? std::to_string(type_id)
                   : std::string(ggml_name) + " (type " + std::to_string(type_id) + ")",
               std::string(supported_tensor_types()));
    }
    t.type = *type;
    const auto bs = static_cast<int64_t>(block_size(t.type));
    if (t.ne[0] % bs != 0) {
      cur.fail(
          "ne[0] not a multiple of the " + std::string(tensor_type_name(t.type)) + " block size",
          std::to_string(t.ne[0]), "a multiple of " + std::to_string(bs));
    }
    try {
      t.n_bytes = tensor_n_bytes(t.type, t.ne);
    } catch (const std::invalid_argument&) {
      cur.fail("byte size overflows int64", shape_string(t.ne), "a size below 2^63 bytes");
    }
    t.offset = cur.read<uint64_t>("offset");
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // data layout: section start padded to the alignment (the padding is zeros, as ggml and gguf-py
  // write it); each tensor at the running padded sum; the file ends after the last tensor's
  // padding (or its last byte). Bytes left over mean the tensor infos and the data disagree (a
  // lowered tensor count reads the last info as padding): an error, never a silent misread.
  const uint64_t info_end = cur.pos();
  data_offset_ = pad_to(info_end, alignment_);  // info_end <= size_ < 2^63: no wrap
  cur.set_where("data section");
  if (data_offset_ > size_ && !tensors_.empty()) {
    cur.fail("starts past the end of the file", std::to_string(data_offset_),
             "at most " + std::to_string(size_));
  }
  const uint64_t padding_end = std::min<uint64_t>(data_offset_, size_);
  for (uint64_t i = info_end; i < padding_end; ++i) {
    if (base_[i] != 0) {
      cur.fail(
          "padding before the data section is not zero (tensor count too low?)",
          "byte " + std::to_string(static_cast<unsigned>(base_[i])) + " at offset " +
              std::to_string(i),
          "zeros from offset " + std::to_string(info_end) + " to " + std::to_string(data_offset_));
    }
  }
  const uint64_t data_size = size_ > data_offset_ ? size_ - data_offset_ : 0;
  uint64_t expected = 0;
  uint64_t data_end = 0;  // end of the last tensor's bytes, unpadded
  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorInfo& t = tensors_[i];
    cur.set_where("tensor " + quoted(t.name));
    if (t.offset % alignment_ != 0) {
      cur.fail("offset not aligned", std::to_string(t.offset),
               "a multiple of " + std::to_string(alignment_));
    }
    if (t.offset != expected) {
      const std::string prev = i == 0 ? "the data start" : "tensor " + quoted(tensors_[i - 1].name);
      cur.fail(
          t.offset < expected ? "offset overlaps " + prev : "offset leaves a gap after " + prev,
          std::to_string(t.offset), std::to_string(expected));
    }
    if (t.n_bytes > data_size || t.offset > data_size - t.n_bytes) {
      cur.fail("data extends past the end of the file",
               "end at data offset " + std::to_string(t.offset) + " + " +
                   std::to_string(t.n_bytes) + " bytes",
               "at most " + std::to_string(data_size));
    }
    t.data = base_ + data_offset_ + t.offset;
    // Within data_size < 2^63 and alignment <= kMaxAlignment, so no wrap.
    data_end = t.offset + t.n_bytes;
    expected = pad_to(data_end, alignment_);
  }
  // The last tensor's padding may be cut short (or absent) at the end of the file, never longer.
  if (data_size > expected) {
    cur.set_where("data section");
    cur.fail("bytes after the last tensor that no tensor info describes (tensor count too low?)",
             std::to_string(data_size - data_end) + " bytes after " +
                 (tensors_.empty() ? std::string("the header")
                                   : "tensor " + quoted(tensors_.back().name)),
             "at most " + std::to_string(expected - data_end) + " bytes of padding");
  }
}

// ---- tensors -------------------------------------------------------------------------------

const uint8_t* TensorInfo::row(int64_t r) const {
  if (r < 0 || r >= n_rows()) {
    throw_invalid(kComponent, "tensor '" + name + "': row index out of range", std::to_string(r),
                  "0.." + std::to_string(n_rows() - 1));
  }
  return data + static_cast<size_t>(r) * row_n_bytes(type, static_cast<size_t>(row_length()));
}

std::string shape_string(std::span<const int64_t> ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "}";
}

void check_shape(const TensorInfo& t, std::span<const int64_t> expected) {
  auto trimmed = [](std::span<const int64_t> ne) {
    while (ne.size() > 1 && ne.back() == 1) ne = ne.first(ne.size() - 1);
    return ne;
  };
  const auto got = trimmed(t.ne);
  const auto want = trimmed(expected);
  if (!std::equal(got.begin(), got.end(), want.begin(), want.end())) {
    throw_runtime(kComponent, "tensor '" + t.name + "': wrong shape", shape_string(t.ne),
                  shape_string(expected));
  }
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::get_tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) {
    throw_runtime(kComponent, "tensor '" + std::string(name) + "' missing", "no such tensor",
                  "a tensor of that name in " + (origin_.empty() ? "<memory>" : origin_));
  }
  return *t;
}

}  // namespace snapkv::gguf
