// .npy reader/writer for '<f4' C-order tensors (see include/snapkv/util/npy.h for what is refused).
// Layout of a .npy file:
//   "\x93NUMPY" | major u8 | minor u8 | header_len (u16 LE for 1.0, u32 LE for 2.0/3.0)
//   | header: Python dict literal, ASCII (1.0/2.0) or UTF-8 (3.0), space-padded, ends in '\n'
//   | data: product(shape) elements
#include "snapkv/util/npy.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include "snapkv/util/error.h"
#include "snapkv/util/mapped_file.h"

namespace snapkv {
namespace {

static_assert(std::endian::native == std::endian::little,
              "npy.cpp copies '<f4' bytes directly and needs a little-endian host");
static_assert(sizeof(float) == 4);

constexpr uint8_t kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kPreambleV1 = 10;  // magic + version + u16 length
constexpr size_t kPreambleV2 = 12;  // magic + version + u32 length

std::string python_shape(std::span<const size_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ',';
  s += ')';
  return s;
}

[[noreturn]] void fail(std::string_view name, std::string_view what, std::string_view got,
                       std::string_view expected) {
  std::string full(name);
  full += ": ";
  full += what;
  throw_runtime("npy", full, got, expected);
}

// Header text shown in errors: printable, at most 80 characters.
std::string snippet(std::string_view text) {
  std::string s;
  for (char c : text.substr(0, 80)) s += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  if (text.size() > 80) s += "...";
  return "\"" + s + "\"";
}

// Magic, version and header length. prefix: the first bytes of the file (all of them if short).
struct Preamble {
  size_t header_begin = 0;
  size_t header_len = 0;
};

Preamble parse_preamble(std::span<const uint8_t> prefix, size_t file_size, std::string_view name) {
  if (file_size < kPreambleV1) {
    fail(name, "file too short for a .npy preamble", std::to_string(file_size) + " bytes",
         "at least 10 bytes");
  }
  if (std::memcmp(prefix.data(), kMagic, sizeof(kMagic)) != 0) {
    static const char* hex = "0123456789abcdef";
    std::string got;
    for (size_t i = 0; i < sizeof(kMagic); ++i) {
      if (std::isprint(prefix[i]) && prefix[i] != '\\') {
        got += static_cast<char>(prefix[i]);
      } else {
        got += "\\x";
        got += hex[prefix[i] >> 4];
        got += hex[prefix[i] & 15];
      }
    }
    fail(name, "not a .npy file (bad magic)", got, "\\x93NUMPY");
  }
  const uint8_t major = prefix[6], minor = prefix[7];
  Preamble p;
  if (major == 1 && minor == 0) {
    p.header_begin = kPreambleV1;
    p.header_len = static_cast<size_t>(prefix[8]) | (static_cast<size_t>(prefix[9]) << 8);
  } else if ((major == 2 || major == 3) && minor == 0) {
    if (file_size < kPreambleV2) {
      fail(name, "file too short for a version 2/3 preamble", std::to_string(file_size) + " bytes",
           "at least 12 bytes");
    }
    p.header_begin = kPreambleV2;
    p.header_len = 0;
    for (int i = 3; i >= 0; --i) p.header_len = (p.header_len << 8) | prefix[8 + i];
  } else {
    fail(name, "unsupported .npy format version",
         std::to_string(major) + "." + std::to_string(minor), "1.0, 2.0 or 3.0");
  }
  if (p.header_len > kNpyMaxHeaderBytes) {
    fail(name, "header length too large", std::to_string(p.header_len) + " bytes",
         "at most " + std::to_string(kNpyMaxHeaderBytes));
  }
  if (p.header_len > file_size - p.header_begin) {
    fail(name, "header runs past the end of the file (truncated)",
         std::to_string(p.header_len) + " header bytes",
         "at most " + std::to_string(file_size - p.header_begin) + " (bytes left in the file)");
  }
  return p;
}

// A tiny parser for the dict NumPy writes: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), } with any key order and whitespace.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) malformed(std::string("'") + c + "'");
  }
  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }
  bool peek_is(char c) {
    skip_space();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  std::string string_literal() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      malformed("a quoted string");
    }
    const char quote = text_[pos_++];
    const size_t begin = pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') malformed("a plain string without escapes");
      ++pos_;
    }
    if (pos_ >= text_.size()) malformed("a closing quote");
    return std::string(text_.substr(begin, pos_++ - begin));
  }

  std::string word() {
    skip_space();
    const size_t begin = pos_;
    while (pos_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    return std::string(text_.substr(begin, pos_ - begin));
  }

  size_t integer() {
    skip_space();
    const size_t begin = pos_;
    size_t value = 0;
    bool overflow = false;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const size_t digit = static_cast<size_t>(text_[pos_] - '0');
      if (value > (std::numeric_limits<size_t>::max() - digit) / 10) overflow = true;
      if (!overflow) value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == begin) malformed("a non-negative integer dimension");
    if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;  // Python 2
    if (overflow) {
      fail(name_, "shape dimension does not fit in 64 bits",
           std::string(text_.substr(begin, pos_ - begin)), "a dimension below 2^64");
    }
    return value;
  }

  std::vector<size_t> shape_tuple() {
    expect('(');
    std::vector<size_t> shape;
    while (!eat(')')) {
      if (shape.size() >= 64) malformed("at most 64 dimensions");
      shape.push_back(integer());
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  [[noreturn]] void malformed(std::string_view wanted) {
    fail(name_,
         "malformed header at offset " + std::to_string(pos_) + " (wanted " + std::string(wanted) +
             ")",
         snippet(text_), "{'descr': '<f4', 'fortran_order': False, 'shape': (...), }");
  }

 private:
  std::string_view text_;
  std::string_view name_;
  size_t pos_ = 0;
};

std::vector<size_t> parse_header(std::string_view text, std::string_view name,
                                 size_t expected_rank) {
  HeaderParser p(text, name);
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<size_t>> shape;
  p.expect('{');
  while (!p.eat('}')) {
    const std::string key = p.string_literal();
    p.expect(':');
    if (key == "descr") {
      if (!p.peek_is('\'') && !p.peek_is('"')) {
        fail(name, "dtype not supported", "a structured dtype", "'<f4' (little-endian float32)");
      }
      descr = p.string_literal();
    } else if (key == "fortran_order") {
      const std::string w = p.word();
      if (w == "True") {
        fortran_order = true;
      } else if (w == "False") {
        fortran_order = false;
      } else {
        p.malformed("True or False for fortran_order");
      }
    } else if (key == "shape") {
      shape = p.shape_tuple();
    } else {
      fail(name, "unknown header key", "'" + key + "'", "'descr', 'fortran_order' or 'shape'");
    }
    if (!p.eat(',')) {
      p.expect('}');
      break;
    }
  }
  if (!p.at_end()) p.malformed("the end of the header after '}'");
  if (!descr || !fortran_order || !shape) {
    p.malformed("all of 'descr', 'fortran_order' and 'shape'");
  }
  if (*descr != "<f4") {
    fail(name, "dtype not supported", "'" + *descr + "'", "'<f4' (little-endian float32)");
  }
  if (*fortran_order) {
    fail(name, "fortran_order not supported", "True", "False (C order)");
  }
  if (expected_rank != kNpyAnyRank && shape->size() != expected_rank) {
    fail(name, "wrong rank",
         std::to_string(shape->size()) + " (shape " + python_shape(*shape) + ")",
         std::to_string(expected_rank));
  }
  return *shape;
}

// Bytes the data of `shape` takes, refusing overflow (and anything above 2^62 bytes).
size_t checked_data_bytes(std::span<const size_t> shape, std::string_view name) {
  constexpr size_t kLimit = size_t{1} << 62;
  size_t count = 1;
  bool zero = false;
  for (size_t d : shape) zero = zero || d == 0;
  if (zero) return 0;
  for (size_t d : shape) {
    if (count > kLimit / d) {
      fail(name, "shape too large", python_shape(shape), "at most 2^62 bytes of data");
    }
    count *= d;
  }
  if (count > kLimit / sizeof(float)) {
    fail(name, "shape too large", python_shape(shape), "at most 2^62 bytes of data");
  }
  return count * sizeof(float);
}

void check_data_size(size_t present, size_t needed, std::span<const size_t> shape,
                     std::string_view name) {
  if (present < needed) {
    fail(name, "truncated data", std::to_string(present) + " bytes after the header",
         std::to_string(needed) + " bytes for shape " + python_shape(shape) + " of '<f4'");
  }
  if (present > needed) {
    fail(name, "trailing bytes after the data", std::to_string(present) + " bytes after the header",
         std::to_string(needed) + " bytes for shape " + python_shape(shape) + " of '<f4'");
  }
}

std::string header_text(std::span<const size_t> shape, size_t preamble_bytes) {
  std::string h =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + python_shape(shape) + ", }";
  const size_t unpadded = preamble_bytes + h.size() + 1;  // + '\n'
  h.append((64 - unpadded % 64) % 64, ' ');
  h += '\n';
  return h;
}

}  // namespace

size_t NpyArray::numel() const {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  return n;
}

NpyArray decode_npy(std::span<const uint8_t> bytes, std::string_view name, size_t expected_rank) {
  const Preamble pre = parse_preamble(bytes, bytes.size(), name);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + pre.header_begin,
                              pre.header_len);
  NpyArray out;
  out.shape = parse_header(text, name, expected_rank);
  const size_t data_begin = pre.header_begin + pre.header_len;
  const size_t needed = checked_data_bytes(out.shape, name);
  check_data_size(bytes.size() - data_begin, needed, out.shape, name);
  out.data.resize(needed / sizeof(float));
  if (needed) std::memcpy(out.data.data(), bytes.data() + data_begin, needed);
  return out;
}

NpyArray read_npy(const std::string& path, size_t expected_rank) {
  // A FIFO would block the open below, a directory read as empty: regular files only.
  if (const std::string problem = regular_file_problem(path); !problem.empty()) {
    fail(path, "cannot open file", problem, "a readable regular .npy file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file", std::strerror(errno), "a readable .npy file");
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (end < 0) fail(path, "cannot determine the file size", "a stream error", "a regular file");
  const size_t file_size = static_cast<size_t>(end);
  in.seekg(0, std::ios::beg);

  uint8_t prefix[kPreambleV2] = {};
  const size_t prefix_len = std::min(file_size, kPreambleV2);
  in.read(reinterpret_cast<char*>(prefix), static_cast<std::streamsize>(prefix_len));
  if (!in) fail(path, "read error in the preamble", std::strerror(errno), "a readable file");
  const Preamble pre =
      parse_preamble(std::span<const uint8_t>(prefix, prefix_len), file_size, path);

  std::string text(pre.header_len, '\0');
  in.seekg(static_cast<std::streamoff>(pre.header_begin), std::ios::beg);
  in.read(text.data(), static_cast<std::streamsize>(pre.header_len));
  if (!in) fail(path, "read error in the header", std::strerror(errno), "a readable file");

  NpyArray out;
  out.shape = parse_header(text, path, expected_rank);
  const size_t data_begin = pre.header_begin + pre.header_len;
  const size_t needed = checked_data_bytes(out.shape, path);
  check_data_size(file_size - data_begin, needed, out.shape, path);
  out.data.resize(needed / sizeof(float));
  if (needed) {
    in.read(reinterpret_cast<char*>(out.data.data()), static_cast<std::streamsize>(needed));
    if (!in) fail(path, "read error in the data", std::strerror(errno), "a readable file");
  }
  return out;
}

std::vector<uint8_t> encode_npy(std::span<const float> data, std::span<const size_t> shape) {
  size_t count = 1;
  for (size_t d : shape) {
    if (d != 0 && count > std::numeric_limits<size_t>::max() / d) {
      throw_invalid("npy", "shape element count overflows", python_shape(shape),
                    "a count that fits in size_t");
    }
    count *= d;
  }
  if (count != data.size()) {
    throw_invalid("npy", "data size does not match the shape " + python_shape(shape),
                  std::to_string(data.size()) + " elements", std::to_string(count));
  }
  std::string header = header_text(shape, kPreambleV1);
  uint8_t major = 1;
  if (header.size() > 0xffff) {
    header = header_text(shape, kPreambleV2);
    major = 2;
  }
  const size_t preamble = major == 1 ? kPreambleV1 : kPreambleV2;
  std::vector<uint8_t> out(preamble + header.size() + data.size_bytes());
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  out[6] = major;
  out[7] = 0;
  size_t len = header.size();
  for (size_t i = 8; i < preamble; ++i, len >>= 8) out[i] = static_cast<uint8_t>(len & 0xff);
  std::memcpy(out.data() + preamble, header.data(), header.size());
  if (!data.empty()) {
    std::memcpy(out.data() + preamble + header.size(), data.data(), data.size_bytes());
  }
  return out;
}

void write_npy(const std::string& path, std::span<const float> data,
               std::span<const size_t> shape) {
  const std::vector<uint8_t> bytes = encode_npy(data, shape);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot open for writing", std::strerror(errno), "a writable path");
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(path, "write error", std::strerror(errno), "a writable path");
}

}  // namespace snapkv
