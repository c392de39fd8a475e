// .npy I/O for float32 tensors, the exchange format of `snapkv select` and the dev tools.
//
// Reads: NumPy format versions 1.0, 2.0 and 3.0, dtype '<f4' (little-endian float32) only,
// C order only. Everything else is refused with a snapkv::RuntimeError naming the file and what
// was found: wrong magic, unknown version, a header that is not the dict NumPy writes, another
// dtype ("got '<f8', expected '<f4'"), fortran_order True, a rank other than the caller's, a shape
// whose element count overflows, data shorter (truncated) or longer than the shape says.
// A file is hostile input: every length is checked against the bytes actually present before
// anything is allocated from it.
//
// Writes: version 1.0 (2.0 when the header does not fit in 65535 bytes), '<f4', C order, the
// header padded with spaces so that the data starts at a multiple of 64 bytes, as NumPy does.
//
// Not supported: other dtypes (no conversion), object arrays, .npz archives, memory mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace snapkv {

// A row-major float32 tensor read from (or to be written to) a .npy file.
struct NpyArray {
  std::vector<size_t> shape;  // [dim0][dim1]...; empty for a scalar (one element)
  std::vector<float> data;    // product(shape) elements, C order
  size_t rank() const { return shape.size(); }
  size_t numel() const;  // product of the shape (1 for a scalar)
};

// Accepts any rank.
inline constexpr size_t kNpyAnyRank = static_cast<size_t>(-1);

// Largest header a reader accepts (NumPy's own reader refuses more than 10000 bytes by default;
// we allow more for very high-rank shapes but never trust a 4 GiB length field).
inline constexpr size_t kNpyMaxHeaderBytes = 1u << 20;

// Reads `path`. expected_rank: the rank the caller needs (kNpyAnyRank for any). Errors name the
// file as given ("[npy] K.npy: ..."). Throws snapkv::RuntimeError for a bad or unreadable file.
NpyArray read_npy(const std::string& path, size_t expected_rank = kNpyAnyRank);

// Same checks on an in-memory file image; `name` is used in error messages.
NpyArray decode_npy(std::span<const uint8_t> bytes, std::string_view name,
                    size_t expected_rank = kNpyAnyRank);

// The complete file image of a '<f4' C-order array. data: [product(shape)].
// Throws std::invalid_argument when data.size() != product(shape).
std::vector<uint8_t> encode_npy(std::span<const float> data, std::span<const size_t> shape);

// Writes encode_npy(...) to `path`; throws snapkv::RuntimeError when the file cannot be written.
void write_npy(const std::string& path, std::span<const float> data, std::span<const size_t> shape);

}  // namespace snapkv
